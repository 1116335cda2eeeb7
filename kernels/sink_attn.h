/* kernels/sink_attn.h — shared-KV attention with a per-head sink over a window of rows plus a
 * list of other rows (DeepSeek-V4's attention, docs/design.md §5.9).
 *
 * Rows: one row of D values is both the key and the value of every head (MQA-shaped, like the
 *   latent rows of kernels/mla_attn.h, but the value is the whole row). Query t sees
 *     - its window: win_len[t] consecutive rows starting at win[t] (rows D values apart), and
 *     - its listed rows: ent_len[t] rows of the array at ent[t]: rows sel[t·sel_stride + i]
 *       (i < ent_len[t]) when sel is given, else its first ent_len[t] rows.
 *   Any of the two may be empty; the order of the rows does not matter.
 *   The listed rows' array is either contiguous (row e at ent[t] + e·D) or paged through a block
 *   table, as kernels/dsa.h reads its index keys: with ent_blocks given and ent_blocks[t] not
 *   NULL, ent[t] is a pool of (., ent_block_size, D) rows and row e lives in block
 *   ent_blocks[t][e / ent_block_size], at offset e % ent_block_size (DeepSeek-V4's compressed
 *   entries in the KV pool's pages: docs/design.md §3.1).
 *
 * Output, per query t and head h, with s_j = scale · q[t][h] · row_j over the visible rows:
 *     p = softmax([s_j ..., sink[h]]) without the sink's column  (the sink only dilutes)
 *     out[t][h] = Σ_j p_j row_j
 *   so a query that sees no row gets zeros. fp32 q, sink and out; the rows fp32 or bf16
 *   (rows_dtype, one kind of the family each: a bf16 cache is read in place, each value widened
 *   exactly to fp32 as it is loaded); fp32 accumulation, the softmax online (a running maximum
 *   that starts at the sink).
 *
 * Rules:
 *   - q (T, H, D), sink (H) and out (T, H, D) are fp32, the rows rows_dtype (NUMLA_DTYPE_F32 or
 *     NUMLA_DTYPE_BF16, else an error); out must not alias the others.
 *     Inputs are trusted to be finite (the sink included); the kernel does not look.
 *   - Listed rows must exist (sel values >= 0 are checked, their upper bound is the caller's;
 *     so are the block table's entries for the rows listed: >= 0 checked, < the pool's blocks
 *     the caller's).
 *   - Threading: the call opens its own OpenMP region and splits (query, block of 16 heads);
 *     every row a block reads is loaded once for its 16 heads.
 *   - No allocation: scratch of numla_sink_attn_workspace_size() bytes (any alignment) is
 *     passed in; it depends on D and the thread count only.
 *   - Levels, per kind (fp32 rows, bf16 rows): ref (scalar, always built), avx2
 *     (kernels/x86/sink_attn_avx2.c: the MLA avx2 kernel's plan over row pointers, scores with
 *     lanes along the heads, a tile of bf16 rows widened once into the scratch; needs
 *     D % 16 == 0, else ref runs) and avx512 (kernels/x86/sink_attn_avx512.c: the MLA avx512
 *     kernel's Q·K and P·V steps over row pointers, a bf16 row widened in registers; needs
 *     D % 32 == 0, else the level below runs).
 *     avx512bf16 and amx inherit avx512: vdpbf16ps would round q and P to bf16 (or split each
 *     into hi + lo, two products for one), and a decode step is bound by reading the rows,
 *     which the widening FMA reads once, at half the bytes of fp32 rows.
 *   - Numerics, either kind: a bf16 row's values are exact in fp32, so every level sums exact
 *     fp32 products in fp32, only in other orders; error bound against the exact result over
 *     the row values as stored: |out - exact| <= 2e-5 · max|row| + 1e-6 per element (D <= 512,
 *     scores of order 10; tests/unit/kernels/test_sink_attn.c holds each level and kind to it
 *     against a double reference). A query's output at a given level depends on its own q,
 *     rows, sink and scale only: the same bits whatever the call's other queries (how many,
 *     which: a decode step of several query rows, a chunk of a prompt; test_query_bits).
 */
#ifndef NUMLA_KERNELS_SINK_ATTN_H
#define NUMLA_KERNELS_SINK_ATTN_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/status.h"
#include "kernels/isa.h"

typedef struct numla_sink_attn_args {
    int32_t num_queries;          /* T, >= 0 */
    int32_t num_heads;            /* H, >= 1 */
    int32_t head_dim;             /* D, >= 1: row width, key = value = the whole row */
    const float *q;               /* (T, H, D) */
    const void *const *win;       /* (T) first window row of each query ((win_len, D) rows of
                                     rows_dtype) */
    const int32_t *win_len;       /* (T) >= 0 */
    const void *const *ent;       /* (T) each query's array of listed rows (., D) of rows_dtype */
    const int32_t *sel;           /* (T, sel_stride) row numbers into ent[t], or NULL: the first
                                     ent_len[t] rows */
    int32_t sel_stride;           /* >= max ent_len when sel is given */
    const int32_t *ent_len;       /* (T) >= 0 */
    const float *sink;            /* (H) per-head sink logit */
    float scale;                  /* softmax scale */
    float *out;                   /* (T, H, D) */
    numla_dtype rows_dtype;       /* the window's and listed rows' type: F32 or BF16 */
    const int32_t *const *ent_blocks; /* (T) each query's block table (ceil(rows / ent_block_size)
                                         block ids into ent[t]) or NULL: contiguous rows; the
                                         array itself NULL: every query's contiguous */
    int32_t ent_block_size;       /* rows a block, >= 1 where a table is given */
} numla_sink_attn_args;

/* Scratch bytes for a call at level isa on num_threads threads (< 1 counts as 1). */
size_t numla_sink_attn_workspace_size(numla_isa isa, const numla_sink_attn_args *a, int num_threads);
/* Run it. Bad shapes, NULL pointers, negative lengths or row numbers: an error naming the
 * field, nothing written. Not collective. */
numla_status numla_sink_attn(numla_isa isa, const numla_sink_attn_args *a, void *workspace,
                             size_t workspace_bytes);
/* The variant numla_sink_attn(isa, a) runs ("ref", "ref_bf16", "avx2", "avx2_bf16", "avx512" or
 * "avx512_bf16"). */
const char *numla_sink_attn_variant(numla_isa isa, const numla_sink_attn_args *a);

#endif
