/* kernels/sink_attn_internal.h — private to the sink_attn family (kernels/sink_attn.h): the
 * variant struct of the dispatch table and the per-item function every variant provides. */
#ifndef NUMLA_KERNELS_SINK_ATTN_INTERNAL_H
#define NUMLA_KERNELS_SINK_ATTN_INTERNAL_H

#include "kernels/sink_attn.h"

/* Heads per item: one zmm of fp32 scores per row. */
enum { NUMLA_SINK_ATTN_HEADS = 16 };

/* Query t, heads [h0, h0 + nh) (nh <= NUMLA_SINK_ATTN_HEADS) of validated args, into out;
 * scratch: the variant's scratch_bytes, 64-byte aligned, this thread's own. */
typedef void (*numla_sink_attn_item_fn)(const numla_sink_attn_args *a, int64_t t, int32_t h0,
                                        int32_t nh, void *scratch);

typedef struct numla_sink_attn_kernel {
    numla_variant v; /* applies(args) */
    numla_sink_attn_item_fn item;
    size_t (*scratch_bytes)(const numla_sink_attn_args *a);
} numla_sink_attn_kernel;

/* The family's kinds: the rows' type (numla_sink_attn_args.rows_dtype). */
enum { NUMLA_SINK_ATTN_F32 = 0, NUMLA_SINK_ATTN_BF16, NUMLA_SINK_ATTN_KINDS };

extern const numla_sink_attn_kernel numla_sink_attn_kernel_ref;
extern const numla_sink_attn_kernel numla_sink_attn_kernel_ref_bf16;
extern const numla_sink_attn_kernel numla_sink_attn_kernel_avx2;
extern const numla_sink_attn_kernel numla_sink_attn_kernel_avx2_bf16;
extern const numla_sink_attn_kernel numla_sink_attn_kernel_avx512;
extern const numla_sink_attn_kernel numla_sink_attn_kernel_avx512_bf16;

/* Row i of query t's visible rows (the window first, then the listed rows, contiguous or
 * through the query's block table), rows of es bytes per value (4: fp32, 2: bf16). */
static inline const char *numla_sink_attn_row(const numla_sink_attn_args *a, int64_t t, int64_t i,
                                              size_t es)
{
    const int64_t D = a->head_dim, nw = a->win_len[t];
    if (i < nw)
        return (const char *)a->win[t] + (size_t)(i * D) * es;
    i -= nw;
    int64_t e = a->sel ? (int64_t)a->sel[t * a->sel_stride + i] : i;
    const int32_t *tab = a->ent_blocks ? a->ent_blocks[t] : NULL;
    if (tab) /* paged: block e / bs, offset e % bs */
        e = (int64_t)tab[e / a->ent_block_size] * a->ent_block_size + e % a->ent_block_size;
    return (const char *)a->ent[t] + (size_t)(e * D) * es;
}

#endif
