/* kernels/dsa.h — DeepSeek Sparse Attention (DSA, DeepSeek-V3.2 / GLM-5): the lightning
 * indexer's scoring with fused top-k over a paged index-key cache, and sparse MLA attention
 * that reads only the selected rows of the paged latent cache (docs/sparse_attention.md).
 *
 * Index-key cache, per layer: kcache[num_blocks][block_size][row] (one row of index_head_dim
 *   values a token, LayerNorm'd and rope-applied), paged with the same block table as the
 *   latent cache: token t of sequence b lives at block_tables[b · block_table_stride +
 *   t / block_size], offset t % block_size. A row is Di values of k_dtype (f32, f16, bf16), or,
 *   for k_dtype I8 (the quantized option), Di int8 codes followed by the fp32 scale sk and the
 *   int32 sum of the codes: numla_dsa_key_row_bytes(k_dtype, Di) bytes, written by
 *   numla_dsa_key_quantize.
 *
 * Block tables (both calls): block_table_stride is the table's row stride in entries:
 *   >= max_blocks_per_seq for one row a sequence (the usual batch), or 0 for one row shared by
 *   every sequence: the form for "sequences" that are query rows of one real sequence reading
 *   its cache at different limits (DeepSeek-V4's CSA indexer passes each prefill row as its own
 *   sequence), so no caller copies the table once a row.
 *
 * Queries: one per sequence (query_start_loc == NULL, decode) or query_start_loc[b] ..
 *   query_start_loc[b+1]-1 for sequence b (multi-token). The visible keys of query i of
 *   sequence b are 0 .. lim-1 with lim = seq_lens[b] - n_b + i + 1 when causal (its position is
 *   seq_lens[b] - n_b + i), else lim = seq_lens[b].
 *
 * Indexer score of visible key t for query s (transformers' DeepseekV32Indexer):
 *     score(s, t) = scale · Σ_h w[s][h] · relu(q[s][h] · k[t])
 *   with w = weights_proj(x) · Hi^-0.5 (computed by the caller) and scale = Di^-0.5.
 *   k_dtype I8 (quantized scoring, an option; the float caches match transformers): the key is
 *   sk_t · ck_t (its codes), each query head is quantized the same way when the call starts,
 *   q[s][h] ≈ sq[s][h] · cq[s][h] (per (query, head): s = max|x| / 127, codes rounded to nearest
 *   even, ±127), and
 *     score(s, t) = sk_t · Σ_h (w[s][h] · scale · sq[s][h]) · relu(Σ_d cq[s][h][d] · ck_t[d])
 *   with the dot products exact integers; every variant scores the same codes (accuracy
 *   against the float scoring: docs/sparse_attention.md). Needs Di % 4 == 0.
 *   The kernel keeps the min(topk, lim) best keys: higher score first, and among equal scores
 *   the lower position (a total order, so the set does not depend on threading).
 *   A key's score at a given level is the same bits whichever key group, block or split part
 *   computes it, so a query's selection at a level does not depend on the call's other queries
 *   (a verify step's rows give each row its one-row selection). Levels: ref; avx2
 *   (kernels/x86/dsa_avx2.c, float and int8 keys, Hi % 8 == 0); avx512 (float keys and, with
 *   VNNI, int8 keys, Hi % 16 == 0); avx512bf16 (bf16 q and keys); other shapes run the level
 *   below. Across levels only the fp32 sums are grouped differently (docs/sparse_attention.md).
 *   indices[s][0 .. count-1] are those positions in ascending order, the rest of the row is -1;
 *   counts[s] = min(topk, lim).
 *
 * Sparse MLA attention: as numla_mla_attn (kernels/mla_attn.h, absorbed form: q rows
 *   (T_q, H, Dc + Dr), cache rows Dc + Dr, value = first Dc values) but query s attends only
 *   to the rows indices[s][0 .. counts[s]-1] of its sequence (any order, each < seq_lens[b];
 *   the causal limit is the indexer's business). Output out (T_q, H, Dc) and optional
 *   lse (T_q, H); a query with count 0 gets zeros and lse = -inf, so numla_merge_attn and the
 *   chunked-prefill merges work as with the dense kernel. Levels: ref; avx2 (the dense MLA avx2
 *   chunk over the index list: Dc % 32 == 0, Dr % 16 == 0); avx512 ((Dc + Dr) % 16 == 0);
 *   avx512bf16 (the dense avx512bf16 chunk over the index list, a bf16 cache); other shapes run
 *   the level below.
 *
 * Rules (both calls):
 *   - Cache rows past each sequence's end and blocks not in the table are never read.
 *   - max_blocks_per_seq bounds seq_lens (<= max_blocks_per_seq x block_size) whatever the
 *     stride; a shared table (stride 0) holds the blocks of the longest sequence.
 *   - q, caches and out may be f32, f16 or bf16 (the index-key cache also I8); w is fp32;
 *     accumulation in fp32 (int32 for the I8 dot products).
 *   - Threading: each call opens its own OpenMP parallel region (omp_get_max_threads()
 *     threads) and splits long key ranges / index lists, merging the parts (top-k candidate
 *     lists, LSE) afterwards.
 *   - No allocation: scratch of the matching *_workspace_size() bytes is passed in. It depends
 *     on shapes, query count, topk and thread count, never on seq_lens or counts.
 *   - Bad shapes, a table entry >= num_blocks, an index outside its sequence: an error naming
 *     the field; nothing is written.
 */
#ifndef NUMLA_KERNELS_DSA_H
#define NUMLA_KERNELS_DSA_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/status.h"
#include "kernels/isa.h"

typedef struct numla_dsa_index_args {
    int32_t num_seqs;           /* B */
    int32_t num_heads;          /* Hi (index_n_heads), >= 1 */
    int32_t head_dim;           /* Di (index_head_dim), >= 1 */
    int32_t block_size;         /* tokens per cache block, >= 1 */
    int64_t num_blocks;         /* blocks in kcache */
    int32_t max_blocks_per_seq; /* blocks a table row may hold (bounds seq_lens) */
    int32_t block_table_stride; /* row stride of block_tables: >= max_blocks_per_seq, or 0 (shared) */
    int32_t topk;               /* index_topk, >= 1; row stride of indices */

    const void *q;                  /* (T_q, Hi, Di), q_dtype, rope applied */
    numla_dtype q_dtype;
    const float *w;                 /* (T_q, Hi) head weights (weights_proj · Hi^-0.5) */
    const void *kcache;             /* (num_blocks, block_size, row), row: numla_dsa_key_row_bytes */
    numla_dtype k_dtype;
    const int32_t *block_tables;    /* (B, block_table_stride); stride 0: (max_blocks_per_seq) */
    const int32_t *seq_lens;        /* (B) */
    const int32_t *query_start_loc; /* (B + 1) or NULL: one query per sequence */
    int32_t causal;                 /* multi-token only */
    float scale;                    /* Di^-0.5 */

    int32_t *indices;               /* (T_q, topk) out: positions ascending, -1 padded */
    int32_t *counts;                /* (T_q) out: min(topk, visible keys) */
} numla_dsa_index_args;

typedef struct numla_dsa_attn_args {
    int32_t num_seqs;           /* B */
    int32_t num_heads;          /* H, >= 1 */
    int32_t kv_lora_rank;       /* Dc */
    int32_t rope_dim;           /* Dr */
    int32_t block_size;
    int64_t num_blocks;
    int32_t max_blocks_per_seq; /* as numla_dsa_index_args */
    int32_t block_table_stride; /* as numla_dsa_index_args: >= max_blocks_per_seq, or 0 */
    int32_t index_stride;       /* row stride of indices (topk), >= max count */

    const void *q;                  /* (T_q, H, Dc + Dr), q_dtype */
    numla_dtype q_dtype;
    const void *kv_cache;           /* (num_blocks, block_size, Dc + Dr), kv_dtype */
    numla_dtype kv_dtype;
    const int32_t *block_tables;    /* (B, block_table_stride); stride 0: (max_blocks_per_seq) */
    const int32_t *seq_lens;        /* (B) */
    const int32_t *query_start_loc; /* (B + 1) or NULL */
    const int32_t *indices;         /* (T_q, index_stride) selected positions */
    const int32_t *counts;          /* (T_q) */
    float scale;                    /* softmax scale (as numla_mla_attn) */

    void *out;                      /* (T_q, H, Dc), out_dtype */
    numla_dtype out_dtype;
    float *lse;                     /* (T_q, H) or NULL */
} numla_dsa_attn_args;

/* Bytes of one token's index-key row: Di values of k_dtype, or Di + 8 for I8 (codes, fp32
 * scale, int32 code sum). 0 for any other dtype. */
static inline size_t numla_dsa_key_row_bytes(numla_dtype k_dtype, int32_t head_dim)
{
    if (k_dtype == NUMLA_DTYPE_I8)
        return (size_t)head_dim + 8;
    return (unsigned)k_dtype < NUMLA_DTYPE_COUNT ? (size_t)head_dim * numla_dtype_size(k_dtype) : 0;
}

/* Write one I8 index-key row (numla_dsa_key_row_bytes(NUMLA_DTYPE_I8, head_dim) bytes at row)
 * from the fp32 key k (head_dim values): codes, scale and code sum by the rule above. Called by
 * whoever fills the index-key cache (the forward pass, per new token). */
void numla_dsa_key_quantize(const float *k, int32_t head_dim, void *row);

size_t numla_dsa_index_workspace_size(numla_isa isa, const numla_dsa_index_args *a, int num_threads);
/* Score and select. Not collective. */
numla_status numla_dsa_index(numla_isa isa, const numla_dsa_index_args *a, void *workspace,
                             size_t workspace_bytes);
const char *numla_dsa_index_variant(numla_isa isa, const numla_dsa_index_args *a);

size_t numla_dsa_attn_workspace_size(numla_isa isa, const numla_dsa_attn_args *a, int num_threads);
/* Sparse MLA attention over the listed rows. Not collective. */
numla_status numla_dsa_attn(numla_isa isa, const numla_dsa_attn_args *a, void *workspace,
                            size_t workspace_bytes);
const char *numla_dsa_attn_variant(numla_isa isa, const numla_dsa_attn_args *a);

#endif
