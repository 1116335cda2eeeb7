/* kernels/merge_attn.c — merge_attn_states dispatcher (kernels/merge_attn.h): validates, picks
 * the variant for the ISA, splits rows over one OpenMP region. Variants live in ref/ and x86/. */
#include "kernels/merge_attn_internal.h"

#include <omp.h>

/* Below this many elements a thread team costs more than the merge itself. */
enum { NUMLA_MERGE_ATTN_PARALLEL_ELEMS = 64 * 1024 };

static const numla_merge_attn_fn numla_merge_attn_table_[NUMLA_ISA_COUNT] = {
    [NUMLA_ISA_REF] = numla_merge_attn_ref,
    [NUMLA_ISA_AVX2] = numla_merge_attn_avx2,
    [NUMLA_ISA_AVX512] = numla_merge_attn_avx512,
    [NUMLA_ISA_AVX512BF16] = numla_merge_attn_avx512, /* no bf16 arithmetic here: inherit */
    [NUMLA_ISA_AMX] = numla_merge_attn_avx512,
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
    const numla_merge_attn_fn fn = numla_merge_attn_table_[isa];
#pragma omp parallel if (rows * dim >= NUMLA_MERGE_ATTN_PARALLEL_ELEMS)
    {
        const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
        const int64_t r0 = rows * id / nt, r1 = rows * (id + 1) / nt;
        if (r0 < r1)
            fn(r0, r1, dim, out, out_lse, a, a_lse, b, b_lse);
    }
    return NUMLA_STATUS_OK;
}
