/* tests/unit/kernels/amx_probe_amx.c — amx_probe.h's tile instruction on the real tiles (built
 * with the AMX flags by its name). Callable only where numla_cpu_has(NUMLA_CPU_AMX_BF16) (AMX-INT8
 * products: NUMLA_CPU_AMX_INT8). */
#include <immintrin.h>

#include "amx_probe.h"

void amx_probe_dp_hardware(amx_probe_op op, int rows, int colsb_c, int colsb_a, void *c, const void *a,
                           const void *b);

void amx_probe_dp_hardware(amx_probe_op op, int rows, int colsb_c, int colsb_a, void *c, const void *a,
                           const void *b)
{
    amx_probe_dp(op, rows, colsb_c, colsb_a, c, a, b);
}
