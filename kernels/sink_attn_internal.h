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

extern const numla_sink_attn_kernel numla_sink_attn_kernel_ref;
extern const numla_sink_attn_kernel numla_sink_attn_kernel_avx512;

/* Row i of query t's visible rows: the window first, then the listed rows. */
static inline const float *numla_sink_attn_row(const numla_sink_attn_args *a, int64_t t, int64_t i)
{
    const int64_t D = a->head_dim, nw = a->win_len[t];
    if (i < nw)
        return a->win[t] + i * D;
    i -= nw;
    return a->ent[t] + (a->sel ? (int64_t)a->sel[t * a->sel_stride + i] : i) * D;
}

#endif
