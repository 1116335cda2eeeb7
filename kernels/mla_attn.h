/* kernels/mla_attn.h — MLA attention over the paged latent cache (docs/design.md §3, §4).
 *
 * Cache layout, per layer:  kv_cache[num_blocks][block_size][Dc + Dr]
 *   row = Dc normalised latent values c' (kv_lora_rank, 512 for DeepSeek) followed by
 *         Dr rope-applied k_pe values (qk_rope_head_dim, 64). One row serves every head.
 *   token t of sequence b lives at block_tables[b][t / block_size], offset t % block_size.
 *   All element offsets are computed in 64 bit.
 *
 * Queries (absorbed form): q[T_q][H][Dc + Dr] = [q̃ = W_UKᵀ q_nope | rope(q_pe)].
 *   Decode: one query per sequence (query_start_loc == NULL, T_q = B).
 *   Multi-token: sequence b owns query rows query_start_loc[b] .. query_start_loc[b+1]-1
 *   (n_b rows). With causal != 0, query i of sequence b sits at position
 *   seq_lens[b] - n_b + i and sees keys 0 ..= that position; with causal == 0 every query of
 *   b sees all seq_lens[b] keys (used for "attend to the cached prefix" in chunked prefill).
 *
 * Output: out[T_q][H][Dc] = Σ_t softmax_t(scale · q·k_t) · v_t with k_t the whole row and v_t
 *   its first Dc values; softmax in fp32. lse[T_q][H] (optional, may be NULL) = natural-log
 *   sum of exp of the scaled scores. A query that sees no key (seq_lens[b] == 0) gets a zero
 *   output and lse = -inf.
 *
 * Rules:
 *   - q, out, kv_cache may each be f32, f16 or bf16; they must not alias.
 *   - Cache rows past each sequence's end and blocks not in the table are never read, so they
 *     may hold anything (tests fill them with NaN).
 *   - Dc must be a multiple of 32 and Dr a multiple of 16 for the vector variants; the
 *     reference takes any Dc, Dr >= 1.
 *   - Threading: the call opens its own OpenMP parallel region and splits
 *     (sequence, head group, key chunks) over its threads (kernels/mla_attn.c).
 *   - Bits (a row's result depends only on the keys it sees): a (query, head) row's out and lse
 *     bits are a function of its q, the keys it sees (their number L and values) and the level,
 *     never of the thread count, of the call's other rows, queries or sequences, nor of how its
 *     keys are spread over cache blocks. Within a level and for the same dtypes, every call that
 *     shows a row the same L keys gives it the same bits: a decode row, query i of a causal
 *     multi-token sequence, or a query of a non-causal sequence of one query. Hence a verify step's rows, run as one causal
 *     call, keep the bits of one-row calls (engine/model/attention.c). How: the row's head block
 *     ("unit") is its own query's heads cut into sixteens from head 0, so a one-query call
 *     gives it the same unit (in a non-causal call of several queries, whose rows all see the
 *     same keys, units may hold several queries' heads, and there the contract holds between
 *     such calls of the same shape only); its keys are cut at fixed positions, chunks
 *     [c·C, min((c + 1)·C, L)) with C = NUMLA_MLA_ATTN_KEY_CHUNK (kernels/blocking.h), each run
 *     by the chunk kernel on its own and their states combined in a fixed binary tree over the
 *     chunk index, then normalised; the work split only picks which subtrees a thread runs.
 *     So a long row still splits over threads (L / C chunks), and a row's bits change only
 *     with C or the level's kernels. No kernel needs a tile row to be independent of the
 *     tile's other rows: a row's unit is the same in every call.
 *   - No allocation: scratch of numla_mla_attn_workspace_size() bytes is passed in.
 *   - Numerics: fp32 accumulation; on amx the products run on tiles with fp32 q and P split
 *     into bf16 hi + lo (error <= 2^-17 relative per element, documented tolerance in tests).
 *     avx512bf16 (a bf16 cache; kernels/x86/mla_attn_avx512bf16.c) runs both products on
 *     vdpbf16ps: a bf16 q as is, an fp32 / fp16 q split into hi + lo as on amx; P split the same
 *     way unless the output is bf16, where P is rounded once to bf16 (2^-9 relative per
 *     weight, below the output's own rounding). The softmax sums and the LSE use fp32 P on
 *     every level. Tests hold every level to the same tolerances.
 */
#ifndef NUMLA_KERNELS_MLA_ATTN_H
#define NUMLA_KERNELS_MLA_ATTN_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/status.h"
#include "kernels/isa.h"

typedef struct numla_mla_attn_args {
    int32_t num_seqs;           /* B */
    int32_t num_heads;          /* H (heads this rank owns), >= 1 */
    int32_t kv_lora_rank;       /* Dc */
    int32_t rope_dim;           /* Dr */
    int32_t block_size;         /* tokens per cache block, >= 1 */
    int64_t num_blocks;         /* blocks in kv_cache; table entries must be < this */
    int32_t max_blocks_per_seq; /* row stride of block_tables */

    const void *q;                  /* (T_q, H, Dc + Dr), q_dtype */
    numla_dtype q_dtype;
    const void *kv_cache;           /* (num_blocks, block_size, Dc + Dr), kv_dtype */
    numla_dtype kv_dtype;
    const int32_t *block_tables;    /* (B, max_blocks_per_seq) */
    const int32_t *seq_lens;        /* (B) keys visible to the sequence's last query */
    const int32_t *query_start_loc; /* (B + 1) or NULL for one query per sequence */
    int32_t causal;                 /* multi-token only: causal against positions (see above) */
    float scale;                    /* softmax scale, docs/design.md §5 (includes m²) */

    void *out;                      /* (T_q, H, Dc), out_dtype */
    numla_dtype out_dtype;
    float *lse;                     /* (T_q, H) or NULL */
} numla_mla_attn_args;

/* Bytes of scratch the call needs with `num_threads` OpenMP threads (the call runs
 * omp_get_max_threads() threads). Depends on shapes, dtypes, query_start_loc and the thread
 * count, not on seq_lens, so one size serves every step of a batch shape. */
size_t numla_mla_attn_workspace_size(numla_isa isa, const numla_mla_attn_args *args, int num_threads);

/* Run the kernel. Validates shapes (a table entry >= num_blocks or a query count that does not
 * fit seq_lens is NUMLA_STATUS_OUT_OF_RANGE; nothing is written in that case). Not collective.
 * "Fits": causal sequences need n_b <= seq_lens[b]; non-causal ones may have more queries than
 * keys (chunked prefill over a short cached prefix). A level whose variant cannot take the
 * dims (see Rules) runs the level below it. */
numla_status numla_mla_attn(numla_isa isa, const numla_mla_attn_args *args, void *workspace,
                            size_t workspace_bytes);
/* Name of the variant numla_mla_attn(isa, args) runs ("ref", "avx2", "avx512", "avx512bf16",
 * "amx"): the level's own, or the level below it when that cannot take the args (amx: a bf16
 * cache, (Dc + Dr) % 32 == 0, tiles granted; avx512bf16: a bf16 cache). */
const char *numla_mla_attn_variant(numla_isa isa, const numla_mla_attn_args *args);

#endif
