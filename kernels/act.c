/* kernels/act.c — numla_act_silu_mul dispatcher (kernels/act.h): the reference, and vector
 * variants at avx2 (8 lanes) and avx512 (16 lanes) that give the same results lane for lane. */
#include "kernels/act.h"

/* A variant: the head (kernels/isa.h) and its function. */
typedef struct numla_act_variant {
    numla_variant v;
    void (*silu_mul)(int64_t n, float *g, const float *u);
} numla_act_variant;

static const numla_act_variant numla_act_ref_ = {{"ref", 0, NULL}, numla_act_silu_mul_ref};
static const numla_act_variant numla_act_avx2_ = {{"avx2", 0, NULL}, numla_act_silu_mul_avx2};
static const numla_act_variant numla_act_avx512_ = {{"avx512", 0, NULL}, numla_act_silu_mul_avx512};

/* Native variants per level (one kind); an empty entry inherits the level below. */
static const numla_variant *const numla_act_table_[NUMLA_ISA_COUNT][1] = {
    [NUMLA_ISA_REF] = {&numla_act_ref_.v},
    [NUMLA_ISA_AVX2] = {&numla_act_avx2_.v},
    [NUMLA_ISA_AVX512] = {&numla_act_avx512_.v},
};

numla_status numla_act_silu_mul(numla_isa isa, int64_t n, float *g, const float *u)
{
    if ((unsigned)isa >= NUMLA_ISA_COUNT)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "act_silu_mul: unknown ISA %d", (int)isa);
    if (n < 0 || (n > 0 && (!g || !u)))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "act_silu_mul: n %lld, g %p, u %p", (long long)n,
                   (void *)g, (const void *)u);
    const numla_act_variant *k =
        (const numla_act_variant *)numla_act_table_[numla_isa_pick(isa, &numla_act_table_[0][0], 1, 0, NULL)][0];
    k->silu_mul(n, g, u);
    return NUMLA_STATUS_OK;
}
