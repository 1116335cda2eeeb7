/* kernels/mha_prefill.c — mha_prefill dispatcher (kernels/mha_prefill.h): validates, picks the
 * variant for the ISA, and spreads (sequence, head, query block) tasks over one OpenMP region.
 * Variants live in ref/ and x86/. */
#include "kernels/mha_prefill_impl.h"

#include <omp.h>

static const numla_mha_prefill_fn numla_mha_prefill_table_[NUMLA_ISA_COUNT] = {
    [NUMLA_ISA_REF] = numla_mha_prefill_ref,
    [NUMLA_ISA_AVX2] = numla_mha_prefill_ref, /* no AVX2 variant: inherit */
    [NUMLA_ISA_AVX512] = numla_mha_prefill_avx512,
    [NUMLA_ISA_AVX512BF16] = numla_mha_prefill_avx512, /* f32 arithmetic only: inherit */
};

static size_t thread_bytes(const numla_mha_prefill_args *a)
{
    return (numla_mha_prefill_thread_floats(a) * sizeof(float) + 63) & ~(size_t)63;
}

size_t numla_mha_prefill_workspace_size(numla_isa isa, const numla_mha_prefill_args *args,
                                        int num_threads)
{
    (void)isa;
    return thread_bytes(args) * (size_t)(num_threads > 0 ? num_threads : 1) + 64;
}

static int64_t blocks_of(int32_t n)
{
    return ((int64_t)n + NUMLA_MHA_PREFILL_QB - 1) / NUMLA_MHA_PREFILL_QB;
}

numla_status numla_mha_prefill(numla_isa isa, const numla_mha_prefill_args *a, void *workspace,
                               size_t workspace_bytes)
{
    if ((unsigned)isa >= NUMLA_ISA_COUNT)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "mha_prefill: unknown ISA %d", (int)isa);
    if (a->num_seqs < 0 || a->num_heads < 1 || a->qk_dim < 1 || a->v_dim < 1)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "mha_prefill: bad shape (seqs %d, heads %d, qk_dim %d, v_dim %d)", a->num_seqs,
                   a->num_heads, a->qk_dim, a->v_dim);
    if (a->num_seqs == 0)
        return NUMLA_STATUS_OK;
    if (!a->q_start || !a->q_len || !a->k_start || !a->prefix || !a->q || !a->k || !a->v ||
        !a->out)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "mha_prefill: NULL pointer argument");
    const int64_t H = a->num_heads;
    if (a->q_stride < H * a->qk_dim || a->k_stride < H * a->qk_dim || a->v_stride < H * a->v_dim ||
        a->out_stride < H * a->v_dim)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "mha_prefill: row strides (q %lld, k %lld, v %lld, out %lld) below H·D",
                   (long long)a->q_stride, (long long)a->k_stride, (long long)a->v_stride,
                   (long long)a->out_stride);
    int64_t tasks = 0;
    for (int32_t b = 0; b < a->num_seqs; b++) {
        if (a->q_len[b] < 0 || a->prefix[b] < 0 || a->q_start[b] < 0 || a->k_start[b] < 0)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                       "mha_prefill: sequence %d has q_len %d, prefix %d, q_start %d, k_start %d",
                       b, a->q_len[b], a->prefix[b], a->q_start[b], a->k_start[b]);
        tasks += blocks_of(a->q_len[b]) * H;
    }
    const int nt = omp_get_max_threads();
    const size_t tb = thread_bytes(a);
    if (!workspace || workspace_bytes < numla_mha_prefill_workspace_size(isa, a, nt))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "mha_prefill: workspace of %zu bytes, need %zu",
                   workspace_bytes, numla_mha_prefill_workspace_size(isa, a, nt));
    char *ws = (char *)(((uintptr_t)workspace + 63) & ~(uintptr_t)63);
    const numla_mha_prefill_fn fn = numla_mha_prefill_table_[isa];
#pragma omp parallel num_threads(nt) if (tasks > 1)
    {
        float *scratch = (float *)(ws + tb * (size_t)omp_get_thread_num());
        int32_t b = 0;
        int64_t base = 0; /* first task of sequence b; tasks are handed out in order */
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < tasks; t++) {
            /* Per thread t only grows, so the walk over sequences is amortised. */
            while (t >= base + blocks_of(a->q_len[b]) * H) {
                base += blocks_of(a->q_len[b]) * H;
                b++;
            }
            const int64_t nb = blocks_of(a->q_len[b]), r = t - base;
            /* longest tasks (last query blocks, most keys) first */
            const int64_t blk = nb - 1 - r / H;
            const int32_t h = (int32_t)(r % H);
            const int32_t i0 = (int32_t)(blk * NUMLA_MHA_PREFILL_QB);
            int32_t i1 = i0 + NUMLA_MHA_PREFILL_QB;
            if (i1 > a->q_len[b])
                i1 = a->q_len[b];
            fn(a, b, h, i0, i1, scratch);
        }
    }
    return NUMLA_STATUS_OK;
}
