/* kernels/merge_attn.c — merge_attn_states dispatcher (kernels/merge_attn.h): validates, picks
 * the variant for the ISA, splits rows over one OpenMP region. Variants live in ref/ and x86/. */
#include "kernels/merge_attn_internal.h"

#include <omp.h>

/* A variant: the head (kernels/isa.h) and its function. */
typedef struct numla_merge_attn_variant {
    numla_variant v;
    numla_merge_attn_fn merge;
} numla_merge_attn_variant;

static const numla_merge_attn_variant numla_merge_attn_ref_ = {{"ref", 0, NULL}, numla_merge_attn_ref};
static const numla_merge_attn_variant numla_merge_attn_avx2_ = {{"avx2", 0, NULL}, numla_merge_attn_avx2};
static const numla_merge_attn_variant numla_merge_attn_avx512_ = {{"avx512", 0, NULL}, numla_merge_attn_avx512};

/* Native variants per level (one kind); an empty entry inherits the level below (no bf16
 * arithmetic here: avx512bf16 and amx run avx512's). */
static const numla_variant *const numla_merge_attn_table_[NUMLA_ISA_COUNT][1] = {
    [NUMLA_ISA_REF] = {&numla_merge_attn_ref_.v},
    [NUMLA_ISA_AVX2] = {&numla_merge_attn_avx2_.v},
    [NUMLA_ISA_AVX512] = {&numla_merge_attn_avx512_.v},
};

numla_status numla_merge_attn_states(numla_isa isa, int64_t rows, int32_t dim, float *out,
                                     float *out_lse, const float *a, const float *a_lse,
                                     const float *b, const float *b_lse)
{
    if ((unsigned)isa >= NUMLA_ISA_COUNT)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "merge_attn_states: unknown ISA %d", (int)isa);
    if (rows < 0 || dim < 1)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "merge_attn_states: rows %lld must be >= 0 and dim %d >= 1",
                   (long long)rows, dim);
    if (rows == 0)
        return NUMLA_STATUS_OK;
    if (!out || !a || !a_lse || !b || !b_lse)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "merge_attn_states: NULL pointer (out %p, a %p, a_lse %p, b %p, b_lse %p)",
                   (void *)out, (const void *)a, (const void *)a_lse, (const void *)b,
                   (const void *)b_lse);
    const numla_isa level = numla_isa_pick(isa, &numla_merge_attn_table_[0][0], 1, 0, NULL);
    const numla_merge_attn_fn fn = ((const numla_merge_attn_variant *)numla_merge_attn_table_[level][0])->merge;
#pragma omp parallel if (rows * dim >= NUMLA_MERGE_ATTN_PARALLEL_ELEMS)
    {
        const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
        const int64_t r0 = rows * id / nt, r1 = rows * (id + 1) / nt;
        if (r0 < r1)
            fn(r0, r1, dim, out, out_lse, a, a_lse, b, b_lse);
    }
    return NUMLA_STATUS_OK;
}
