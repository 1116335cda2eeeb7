/* kernels/act.c — numla_act_silu_mul dispatcher (kernels/act.h). AVX2 has no variant of its own:
 * the scalar loop is what it runs (the op is a small part of an MLP whose GEMMs dominate). */
#include "kernels/act.h"

typedef void (*numla_act_silu_mul_fn)(int64_t n, float *g, const float *u);

static const numla_act_silu_mul_fn numla_act_silu_mul_table_[NUMLA_ISA_COUNT] = {
    [NUMLA_ISA_REF] = numla_act_silu_mul_ref,
    [NUMLA_ISA_AVX2] = numla_act_silu_mul_ref, /* no AVX2 variant: inherit */
    [NUMLA_ISA_AVX512] = numla_act_silu_mul_avx512,
    [NUMLA_ISA_AVX512BF16] = numla_act_silu_mul_avx512,
    [NUMLA_ISA_AMX] = numla_act_silu_mul_avx512,
};

numla_status numla_act_silu_mul(numla_isa isa, int64_t n, float *g, const float *u)
{
    if ((unsigned)isa >= NUMLA_ISA_COUNT)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "act_silu_mul: unknown ISA %d", (int)isa);
    if (n < 0 || (n > 0 && (!g || !u)))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "act_silu_mul: n %lld, g %p, u %p", (long long)n,
                   (void *)g, (const void *)u);
    numla_act_silu_mul_table_[isa](n, g, u);
    return NUMLA_STATUS_OK;
}
