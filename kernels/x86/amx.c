/* kernels/x86/amx.c — may this process run AMX tile instructions? The CPU's bits and the OS's
 * permission for the tile state are read once with the other feature bits (kernels/isa.c). */
#include "kernels/x86/amx.h"

#include "kernels/isa.h"

int numla_amx_usable(void) { return numla_cpu_has(NUMLA_CPU_AMX_BF16); }

int numla_amx_int8_usable(void) { return numla_cpu_has(NUMLA_CPU_AMX_INT8); }
