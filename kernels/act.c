/* kernels/act.c — numla_act_silu_mul dispatcher (kernels/act.h). AVX2 has no variant of its own:
 * the scalar loop is what it runs (the op is a small part of an MLP whose GEMMs dominate). */
#include "kernels/act.h"

numla_status numla_act_silu_mul(numla_isa isa, int64_t n, float *g, const float *u)
{
    if ((unsigned)isa >= NUMLA_ISA_COUNT)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "act_silu_mul: unknown ISA %d", (int)isa);
    if (n < 0 || (n > 0 && (!g || !u)))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "act_silu_mul: n %lld, g %p, u %p", (long long)n,
                   (void *)g, (const void *)u);
    if (isa >= NUMLA_ISA_AVX512)
        numla_act_silu_mul_avx512(n, g, u);
    else
        numla_act_silu_mul_ref(n, g, u);
    return NUMLA_STATUS_OK;
}
