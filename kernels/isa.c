/* kernels/isa.c — CPUID feature detection (the only place kernels read CPUID: the levels, the
 * feature bits variants need and the microarchitecture), the choice of a level by name, and the
 * one dispatch walk of every kernel family. */
#include "kernels/isa.h"
#include "common/log.h"

#include <cpuid.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static const char *const numla_isa_names_[NUMLA_ISA_COUNT] = {"ref", "avx2", "avx512", "avx512bf16",
                                                                  "amx"};

const char *numla_isa_name(numla_isa isa)
{
    return (unsigned)isa < NUMLA_ISA_COUNT ? numla_isa_names_[isa] : "?";
}

numla_status numla_isa_parse(const char *name, numla_isa *out)
{
    for (int i = 0; i < NUMLA_ISA_COUNT; i++)
        if (!strcmp(name, numla_isa_names_[i])) {
            *out = (numla_isa)i;
            return NUMLA_STATUS_OK;
        }
    NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "unknown ISA '%s' (expected ref, avx2, avx512, avx512bf16 or amx)",
               name);
}

static uint64_t numla_xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

int numla_isa_supported(numla_isa isa)
{
    unsigned a, b, c, d;
    if (isa == NUMLA_ISA_REF)
        return 1;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, f16c = (c >> 29) & 1;
    if (!osxsave)
        return 0;
    uint64_t xcr0 = numla_xgetbv0();
    int os_avx = (xcr0 & 0x6) == 0x6, os_avx512 = (xcr0 & 0xe6) == 0xe6;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return 0;
    int avx2 = (b >> 5) & 1;
    int avx512 = ((b >> 16) & 1) /*F*/ && ((b >> 17) & 1) /*DQ*/ && ((b >> 30) & 1) /*BW*/ &&
                 ((b >> 31) & 1) /*VL*/;
    int base = os_avx && avx2 && fma && f16c;
    if (isa == NUMLA_ISA_AVX2)
        return base;
    if (isa == NUMLA_ISA_AVX512)
        return base && os_avx512 && avx512;
    if (isa == NUMLA_ISA_AVX512BF16 || isa == NUMLA_ISA_AMX) {
        if (!(base && os_avx512 && avx512))
            return 0;
        if (!__get_cpuid_count(7, 1, &a, &b, &c, &d) || !((a >> 5) & 1)) /* AVX512_BF16 */
            return 0;
        return isa == NUMLA_ISA_AVX512BF16 || numla_cpu_has(NUMLA_CPU_AMX_BF16);
    }
    return 0;
}

enum { NUMLA_AMX_ARCH_REQ_XCOMP_PERM = 0x1023, NUMLA_AMX_XFEATURE_XTILEDATA = 18 };

static pthread_once_t numla_cpu_once_ = PTHREAD_ONCE_INIT;
static unsigned numla_cpu_features_;
static numla_uarch numla_cpu_uarch_;

static numla_uarch numla_uarch_read_(void);

static void numla_cpu_init_(void)
{
    unsigned a, b, c, d, f = 0;
    numla_cpu_uarch_ = numla_uarch_read_();
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return;
    if ((c >> 11) & 1)
        f |= NUMLA_CPU_VNNI;
    if ((c >> 1) & 1)
        f |= NUMLA_CPU_VBMI;
    if (!(d & (1u << 22)) || !(d & (1u << 24))) {
        NUMLA_DEBUG("amx: no AMX-BF16 on this CPU, the AVX-512 paths run instead");
    } else if (syscall(SYS_arch_prctl, NUMLA_AMX_ARCH_REQ_XCOMP_PERM, NUMLA_AMX_XFEATURE_XTILEDATA) != 0) {
        /* without the permission the first tile instruction faults */
        NUMLA_DEBUG("amx: the OS refused the tile state (arch_prctl), the AVX-512 paths run instead");
    } else {
        f |= NUMLA_CPU_AMX_BF16;
        if ((d >> 25) & 1)
            f |= NUMLA_CPU_AMX_INT8;
    }
    numla_cpu_features_ = f;
}

unsigned numla_cpu_features(void)
{
    pthread_once(&numla_cpu_once_, numla_cpu_init_);
    return numla_cpu_features_;
}

numla_isa numla_isa_pick(numla_isa isa, const numla_variant *const *table, int kinds, int kind,
                         const void *call)
{
    const unsigned cpu = numla_cpu_features();
    int i = (unsigned)isa < NUMLA_ISA_COUNT ? (int)isa : NUMLA_ISA_REF;
    for (; i > 0; i--) {
        const numla_variant *v = table[i * kinds + kind];
        if (v && (cpu & v->needs) == v->needs && (!v->applies || v->applies(call)))
            break;
    }
    return (numla_isa)i;
}

unsigned numla_isa_supported_mask(void)
{
    unsigned mask = 0;
    for (int i = 0; i < NUMLA_ISA_COUNT; i++)
        if (numla_isa_supported((numla_isa)i))
            mask |= 1u << i;
    return mask;
}

/* The highest level in a mask of supported levels (ref when none). */
static numla_isa numla_isa_best_in_(unsigned supported)
{
    for (int i = NUMLA_ISA_COUNT - 1; i > 0; i--)
        if (supported & (1u << i))
            return (numla_isa)i;
    return NUMLA_ISA_REF;
}

numla_isa numla_isa_best(void) { return numla_isa_best_in_(numla_isa_supported_mask()); }

numla_status numla_isa_choose(const char *what, const char *name, unsigned supported,
                              numla_isa *out)
{
    supported |= 1u << NUMLA_ISA_REF; /* the reference always runs */
    const numla_isa best = numla_isa_best_in_(supported);
    numla_isa isa = best;
    if (name && *name) {
        if (numla_isa_parse(name, &isa) != NUMLA_STATUS_OK)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "%s=%s: unknown ISA (expected ref, avx2, avx512, "
                       "avx512bf16 or amx)", what, name);
        if (!(supported & (1u << isa)))
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "%s=%s: this CPU does not support %s (best: %s)",
                       what, name, numla_isa_name(isa), numla_isa_name(best));
    }
    if (name && *name)
        NUMLA_DEBUG("kernel ISA: %s (forced by %s)", numla_isa_name(isa), what);
    else
        NUMLA_DEBUG("kernel ISA: %s (from CPUID)", numla_isa_name(isa));
    *out = isa;
    return NUMLA_STATUS_OK;
}

static const char *const numla_uarch_names_[NUMLA_UARCH_COUNT] = {"generic", "zen4", "zen5", "intel"};

const char *numla_uarch_name(numla_uarch u)
{
    return (unsigned)u < NUMLA_UARCH_COUNT ? numla_uarch_names_[u] : "?";
}

numla_status numla_uarch_parse(const char *name, numla_uarch *out)
{
    for (int i = 0; i < NUMLA_UARCH_COUNT; i++)
        if (!strcmp(name, numla_uarch_names_[i])) {
            *out = (numla_uarch)i;
            return NUMLA_STATUS_OK;
        }
    NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "unknown microarchitecture '%s' (expected auto, generic, zen4, zen5 "
               "or intel)", name);
}

numla_uarch numla_uarch_from_cpuid(const char *vendor, unsigned family, int avx512)
{
    if (!strncmp(vendor, "GenuineIntel", 12))
        return NUMLA_UARCH_INTEL;
    if (!strncmp(vendor, "AuthenticAMD", 12)) {
        if (family == 0x1a)
            return NUMLA_UARCH_ZEN5;
        if (family == 0x19 && avx512) /* Zen 3 shares the family but has no AVX-512 */
            return NUMLA_UARCH_ZEN4;
    }
    return NUMLA_UARCH_GENERIC;
}

static numla_uarch numla_uarch_read_(void)
{
    unsigned a, b, c, d;
    char vendor[13] = {0};
    if (!__get_cpuid(0, &a, &b, &c, &d))
        return NUMLA_UARCH_GENERIC;
    memcpy(vendor, &b, 4);
    memcpy(vendor + 4, &d, 4);
    memcpy(vendor + 8, &c, 4);
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return NUMLA_UARCH_GENERIC;
    unsigned family = (a >> 8) & 15;
    if (family == 15)
        family += (a >> 20) & 255;
    return numla_uarch_from_cpuid(vendor, family, numla_isa_supported(NUMLA_ISA_AVX512));
}

numla_uarch numla_uarch_detect(void)
{
    pthread_once(&numla_cpu_once_, numla_cpu_init_);
    return numla_cpu_uarch_;
}

numla_status numla_uarch_choose(const char *what, const char *name, numla_uarch detected,
                                numla_uarch *out)
{
    numla_uarch u = detected;
    const int forced = name && *name && strcmp(name, "auto");
    if (forced && numla_uarch_parse(name, &u) != NUMLA_STATUS_OK)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "%s=%s: unknown microarchitecture (expected auto, generic, "
                   "zen4, zen5 or intel)", what, name);
    NUMLA_DEBUG("kernel microarchitecture: %s (%s%s; CPUID says %s)", numla_uarch_name(u),
                forced ? "forced by " : "from CPUID", forced ? what : "", numla_uarch_name(detected));
    *out = u;
    return NUMLA_STATUS_OK;
}

int numla_uarch_bf16_dot_fast(numla_uarch u) { return u != NUMLA_UARCH_INTEL; }
