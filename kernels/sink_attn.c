/* kernels/sink_attn.c — the sink attention frame (kernels/sink_attn.h): dispatch table,
 * validation, and the (query, block of 16 heads) items over one OpenMP region. The variants
 * (sink_attn_internal.h) own the inner loops. */
#include "kernels/sink_attn.h"
#include "kernels/sink_attn_internal.h"

#include <omp.h>
#include <stdint.h>

/* Native variants per level and kind (the rows' type: fp32, bf16); an empty entry inherits the
 * level below, and so does a level whose variant does not take the call (avx512: D % 32 == 0;
 * avx2: D % 16 == 0). */
static const numla_variant *const numla_sink_attn_table_[NUMLA_ISA_COUNT][NUMLA_SINK_ATTN_KINDS] = {
    [NUMLA_ISA_REF] = {[NUMLA_SINK_ATTN_F32] = &numla_sink_attn_kernel_ref.v,
                       [NUMLA_SINK_ATTN_BF16] = &numla_sink_attn_kernel_ref_bf16.v},
    [NUMLA_ISA_AVX2] = {[NUMLA_SINK_ATTN_F32] = &numla_sink_attn_kernel_avx2.v,
                        [NUMLA_SINK_ATTN_BF16] = &numla_sink_attn_kernel_avx2_bf16.v},
    [NUMLA_ISA_AVX512] = {[NUMLA_SINK_ATTN_F32] = &numla_sink_attn_kernel_avx512.v,
                          [NUMLA_SINK_ATTN_BF16] = &numla_sink_attn_kernel_avx512_bf16.v},
};

/* a->rows_dtype is F32 or BF16 (checked by the callers of this) */
static const numla_sink_attn_kernel *numla_sink_attn_pick(numla_isa isa, const numla_sink_attn_args *a)
{
    const int kind = a->rows_dtype == NUMLA_DTYPE_BF16 ? NUMLA_SINK_ATTN_BF16 : NUMLA_SINK_ATTN_F32;
    const numla_isa level =
        numla_isa_pick(isa, &numla_sink_attn_table_[0][0], NUMLA_SINK_ATTN_KINDS, kind, a);
    return (const numla_sink_attn_kernel *)numla_sink_attn_table_[level][kind];
}

static int numla_sink_attn_dtype_ok_(const numla_sink_attn_args *a)
{
    return a->rows_dtype == NUMLA_DTYPE_F32 || a->rows_dtype == NUMLA_DTYPE_BF16;
}

static size_t numla_sink_attn_align_(size_t n) { return (n + 63) & ~(size_t)63; }

size_t numla_sink_attn_workspace_size(numla_isa isa, const numla_sink_attn_args *a, int num_threads)
{
    if (!a || (unsigned)isa >= NUMLA_ISA_COUNT || a->head_dim < 1 || !numla_sink_attn_dtype_ok_(a))
        return 0;
    const size_t per = numla_sink_attn_align_(numla_sink_attn_pick(isa, a)->scratch_bytes(a));
    return per * (size_t)(num_threads < 1 ? 1 : num_threads) + 64;
}

const char *numla_sink_attn_variant(numla_isa isa, const numla_sink_attn_args *a)
{
    if (!a || (unsigned)isa >= NUMLA_ISA_COUNT || !numla_sink_attn_dtype_ok_(a))
        return "?";
    return numla_sink_attn_pick(isa, a)->v.name;
}

numla_status numla_sink_attn(numla_isa isa, const numla_sink_attn_args *a, void *workspace,
                             size_t workspace_bytes)
{
    if ((unsigned)isa >= NUMLA_ISA_COUNT)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "sink_attn: unknown ISA %d", (int)isa);
    if (!a)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "sink_attn: NULL args");
    if (a->num_queries < 0 || a->num_heads < 1 || a->head_dim < 1)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "sink_attn: bad dims (num_queries=%d num_heads=%d head_dim=%d)",
                   a->num_queries, a->num_heads, a->head_dim);
    if (!numla_sink_attn_dtype_ok_(a))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "sink_attn: rows_dtype %d (%s): F32 or BF16 only",
                   (int)a->rows_dtype, numla_dtype_name(a->rows_dtype));
    const int64_t T = a->num_queries;
    if (T == 0)
        return NUMLA_STATUS_OK;
    if (!a->q || !a->win || !a->win_len || !a->ent || !a->ent_len || !a->sink || !a->out)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "sink_attn: NULL pointer (q %p, win %p, win_len %p, ent %p, ent_len %p, sink %p, "
                   "out %p)", (const void *)a->q, (const void *)a->win, (const void *)a->win_len,
                   (const void *)a->ent, (const void *)a->ent_len, (const void *)a->sink,
                   (void *)a->out);
    for (int64_t t = 0; t < T; t++) {
        if (a->win_len[t] < 0 || a->ent_len[t] < 0)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                       "sink_attn: query %lld has win_len %d, ent_len %d (>= 0)", (long long)t,
                       a->win_len[t], a->ent_len[t]);
        if ((a->win_len[t] > 0 && !a->win[t]) || (a->ent_len[t] > 0 && !a->ent[t]))
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "sink_attn: query %lld has rows but a NULL %s",
                       (long long)t, a->win_len[t] > 0 && !a->win[t] ? "win" : "ent");
        if (a->sel && a->ent_len[t] > a->sel_stride)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                       "sink_attn: query %lld lists %d rows, more than sel_stride %d",
                       (long long)t, a->ent_len[t], a->sel_stride);
        for (int32_t i = 0; a->sel && i < a->ent_len[t]; i++)
            if (a->sel[t * a->sel_stride + i] < 0)
                NUMLA_FAIL(NUMLA_STATUS_OUT_OF_RANGE, "sink_attn: query %lld's listed row %d is %d",
                           (long long)t, i, a->sel[t * a->sel_stride + i]);
        const int32_t *tab = a->ent_blocks ? a->ent_blocks[t] : NULL;
        if (!tab || a->ent_len[t] == 0)
            continue;
        if (a->ent_block_size < 1)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "sink_attn: query %lld has a block table but "
                       "ent_block_size %d (>= 1)", (long long)t, a->ent_block_size);
        for (int32_t i = 0; i < a->ent_len[t]; i++) {
            const int32_t e = a->sel ? a->sel[t * a->sel_stride + i] : i;
            if (tab[e / a->ent_block_size] < 0)
                NUMLA_FAIL(NUMLA_STATUS_OUT_OF_RANGE, "sink_attn: query %lld's listed row %d is "
                           "in block %d of its table, whose id is %d", (long long)t, e,
                           e / a->ent_block_size, tab[e / a->ent_block_size]);
        }
    }
    const numla_sink_attn_kernel *k = numla_sink_attn_pick(isa, a);
    const int nth = omp_get_max_threads();
    const size_t per = numla_sink_attn_align_(k->scratch_bytes(a));
    if (per && (!workspace || workspace_bytes < numla_sink_attn_workspace_size(isa, a, 1)))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "sink_attn: workspace of %zu bytes, %zu needed",
                   workspace_bytes, numla_sink_attn_workspace_size(isa, a, 1));
    /* as many threads as the workspace holds */
    char *ws = workspace ? (char *)(((uintptr_t)workspace + 63) & ~(uintptr_t)63) : NULL;
    const size_t room = workspace ? workspace_bytes - (size_t)(ws - (char *)workspace) : 0;
    const int cap = per ? (int)(room / per) : nth;
    const int team = cap < nth ? (cap < 1 ? 1 : cap) : nth;
    const int32_t hb = (a->num_heads + NUMLA_SINK_ATTN_HEADS - 1) / NUMLA_SINK_ATTN_HEADS;
    const int64_t items = T * hb;
#pragma omp parallel num_threads(team) if (items > 1)
    {
        void *mine = ws ? ws + per * (size_t)omp_get_thread_num() : NULL;
#pragma omp for schedule(dynamic, 1)
        for (int64_t it = 0; it < items; it++) {
            const int32_t h0 = (int32_t)(it % hb) * NUMLA_SINK_ATTN_HEADS;
            const int32_t nh = a->num_heads - h0 < NUMLA_SINK_ATTN_HEADS ? a->num_heads - h0
                                                                          : NUMLA_SINK_ATTN_HEADS;
            k->item(a, it / hb, h0, nh, mine);
        }
    }
    return NUMLA_STATUS_OK;
}
