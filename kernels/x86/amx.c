/* kernels/x86/amx.c — may this process run AMX tile instructions? CPUID plus the Linux
 * permission request for the tile data state (without it the first tile instruction faults). */
#include "kernels/x86/amx.h"

#include <cpuid.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/log.h"

enum { NUMLA_AMX_ARCH_REQ_XCOMP_PERM = 0x1023, NUMLA_AMX_XFEATURE_XTILEDATA = 18 };

/* Read once: CPUID traps to the hypervisor in a VM (microseconds), and the qlinear dispatch
 * asks on every call. */
static pthread_once_t numla_amx_once_ = PTHREAD_ONCE_INIT;
static int numla_amx_ok_, numla_amx_int8_ok_;

static void numla_amx_init_(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 22)) || !(d & (1u << 24))) {
        NUMLA_DEBUG("amx: no AMX-BF16 on this CPU, the AVX-512 paths run instead");
        return;
    }
    if (syscall(SYS_arch_prctl, NUMLA_AMX_ARCH_REQ_XCOMP_PERM, NUMLA_AMX_XFEATURE_XTILEDATA) != 0) {
        NUMLA_DEBUG("amx: the OS refused the tile state (arch_prctl), the AVX-512 paths run instead");
        return;
    }
    numla_amx_ok_ = 1;
    numla_amx_int8_ok_ = (d >> 25) & 1; /* AMX-INT8: CPUID.(7,0):EDX bit 25 */
}

int numla_amx_usable(void)
{
    pthread_once(&numla_amx_once_, numla_amx_init_);
    return numla_amx_ok_;
}

int numla_amx_int8_usable(void)
{
    pthread_once(&numla_amx_once_, numla_amx_init_);
    return numla_amx_int8_ok_;
}
