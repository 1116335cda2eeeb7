/* kernels/dsa_internal.h — private interface between the DSA frame (kernels/dsa.c: validation,
 * work split, top-k heaps, candidate and LSE merges, output conversion) and the per-ISA inner
 * kernels (kernels/ref/dsa_ref.c, kernels/x86/dsa_<isa>.c). Not a contract for other modules.
 */
#ifndef NUMLA_KERNELS_DSA_INTERNAL_H
#define NUMLA_KERNELS_DSA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/dsa.h"

enum {
    NUMLA_DSA_ROWS = 16,       /* heads per attention unit (one query's head block) */
    NUMLA_DSA_KEY_BLOCK = 256, /* keys scored per inner call before they enter the heap */
};

/* Indexer: scores of keys [k0, k1) (k1 - k0 <= NUMLA_DSA_KEY_BLOCK, all visible) of sequence
 * seq for one query: out[t - k0] = Σ_h ws[h] · relu(Σ_d qt[d][h] · k_t[d]).
 * qt: (Di, Hi) fp32, the query transposed; ws: (Hi) fp32 = w · scale. scratch: the variant's
 * per-thread bytes, 64-byte aligned. */
typedef void (*numla_dsa_scores_fn)(const numla_dsa_index_args *a, const float *qt,
                                    const float *ws, int32_t seq, int64_t k0, int64_t k1,
                                    float *out, void *scratch);

typedef struct numla_dsa_index_kernel {
    const char *name;
    numla_dsa_scores_fn scores;
    size_t (*scratch_bytes)(const numla_dsa_index_args *a);
    int (*supports)(const numla_dsa_index_args *a); /* NULL: any */
} numla_dsa_index_kernel;

/* Sparse attention: the unnormalised online-softmax state of rows row0 .. row0+nrows-1 (heads
 * of one query, consecutive) over the cache rows idx[0 .. n-1] of sequence seq:
 * acc[r] = Σ_j e^(s_rj - m_r) · v_j, l[r] = Σ_j e^(s_rj - m_r), m[r] = max_j s_rj (scaled);
 * n = 0 gives acc = 0, l = 0, m = -inf. acc: (NUMLA_DSA_ROWS, Dc) fp32, 64-byte aligned. */
typedef void (*numla_dsa_attn_chunk_fn)(const numla_dsa_attn_args *a, int32_t seq, int64_t row0,
                                        int32_t nrows, const int32_t *idx, int32_t n, float *acc,
                                        float *m, float *l, void *scratch);

typedef struct numla_dsa_attn_kernel {
    const char *name;
    numla_dsa_attn_chunk_fn chunk;
    size_t (*scratch_bytes)(const numla_dsa_attn_args *a);
    int (*supports)(const numla_dsa_attn_args *a); /* NULL: any */
} numla_dsa_attn_kernel;

extern const numla_dsa_index_kernel numla_dsa_index_kernel_ref;
extern const numla_dsa_index_kernel numla_dsa_index_kernel_avx512;
extern const numla_dsa_index_kernel numla_dsa_index_kernel_avx512bf16;
extern const numla_dsa_attn_kernel numla_dsa_attn_kernel_ref;
extern const numla_dsa_attn_kernel numla_dsa_attn_kernel_avx512;

/* Index-key row of token t of sequence b (validated). */
static inline const char *numla_dsa_k_row(const numla_dsa_index_args *a, int32_t b, int64_t t)
{
    int64_t blk = a->block_tables[(int64_t)b * a->max_blocks_per_seq + t / a->block_size];
    int64_t slot = blk * a->block_size + t % a->block_size;
    return (const char *)a->kcache + slot * a->head_dim * (int64_t)numla_dtype_size(a->k_dtype);
}

/* Latent row of token t of sequence b (validated). */
static inline const char *numla_dsa_kv_row(const numla_dsa_attn_args *a, int32_t b, int64_t t)
{
    int64_t width = (int64_t)a->kv_lora_rank + a->rope_dim;
    int64_t blk = a->block_tables[(int64_t)b * a->max_blocks_per_seq + t / a->block_size];
    int64_t slot = blk * a->block_size + t % a->block_size;
    return (const char *)a->kv_cache + slot * width * (int64_t)numla_dtype_size(a->kv_dtype);
}

#endif
