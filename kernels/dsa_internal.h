/* kernels/dsa_internal.h — private interface between the DSA frame (kernels/dsa.c: validation,
 * work split, top-k heaps, candidate and LSE merges, output conversion) and the per-ISA inner
 * kernels (kernels/ref/dsa_ref.c, kernels/x86/dsa_<isa>.c). Not a contract for other modules.
 */
#ifndef NUMLA_KERNELS_DSA_INTERNAL_H
#define NUMLA_KERNELS_DSA_INTERNAL_H

#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/dsa.h"
#include "kernels/blocking.h"

enum {
    NUMLA_DSA_ROWS = 16,       /* heads per attention unit (one query's head block) */
};

/* Indexer, per query: prepare turns the frame's fp32 copy of one query, qt (Di, Hi) (the query
 * transposed) and ws (Hi) = w · scale, into the variant's form in packed (packed_bytes(a)
 * bytes, 64-byte aligned), once per query and work item; it may rewrite ws (the int8 scoring
 * folds the query's per-head scale into it). scores then scores keys [k0, k1) (k1 - k0 <=
 * NUMLA_DSA_KEY_BLOCK, all visible) of sequence seq:
 *   float keys: out[t - k0] = Σ_h ws[h] · relu(Σ_d q[d][h] · k_t[d]);
 *   int8 keys:  out[t - k0] = sk_t · Σ_h ws[h] · relu(Σ_d cq[h][d] · ck_t[d]) (integer dot,
 *               ws[h] = w · scale · sq[h] after prepare; numla_dsa_quantize_row).
 * scratch: the variant's per-thread bytes, 64-byte aligned. */
typedef void (*numla_dsa_prepare_fn)(const numla_dsa_index_args *a, const float *qt, float *ws,
                                     void *packed);
typedef void (*numla_dsa_scores_fn)(const numla_dsa_index_args *a, const void *packed,
                                    const float *ws, int32_t seq, int64_t k0, int64_t k1,
                                    float *out, void *scratch);

/* A variant: the head (kernels/isa.h: name, CPU needs, applies() asked about the
 * numla_dsa_index_args) and its functions. */
typedef struct numla_dsa_index_kernel {
    numla_variant v;
    numla_dsa_prepare_fn prepare;
    size_t (*packed_bytes)(const numla_dsa_index_args *a);
    numla_dsa_scores_fn scores;
    size_t (*scratch_bytes)(const numla_dsa_index_args *a);
} numla_dsa_index_kernel;

/* Sparse attention: the unnormalised online-softmax state of rows row0 .. row0+nrows-1 (heads
 * of one query, consecutive) over the cache rows idx[0 .. n-1] of sequence seq:
 * acc[r] = Σ_j e^(s_rj - m_r) · v_j, l[r] = Σ_j e^(s_rj - m_r), m[r] = max_j s_rj (scaled);
 * n = 0 gives acc = 0, l = 0, m = -inf. acc: (NUMLA_DSA_ROWS, Dc) fp32, 64-byte aligned. */
typedef void (*numla_dsa_attn_chunk_fn)(const numla_dsa_attn_args *a, int32_t seq, int64_t row0,
                                        int32_t nrows, const int32_t *idx, int32_t n, float *acc,
                                        float *m, float *l, void *scratch);

/* A variant: the head (applies() asked about the numla_dsa_attn_args) and its functions. */
typedef struct numla_dsa_attn_kernel {
    numla_variant v;
    numla_dsa_attn_chunk_fn chunk;
    size_t (*scratch_bytes)(const numla_dsa_attn_args *a);
} numla_dsa_attn_kernel;

extern const numla_dsa_index_kernel numla_dsa_index_kernel_ref;
extern const numla_dsa_index_kernel numla_dsa_index_kernel_avx2;
extern const numla_dsa_index_kernel numla_dsa_index_kernel_i8_avx2;
extern const numla_dsa_index_kernel numla_dsa_index_kernel_avx512;
extern const numla_dsa_index_kernel numla_dsa_index_kernel_avx512bf16;
extern const numla_dsa_index_kernel numla_dsa_index_kernel_i8_ref;
extern const numla_dsa_index_kernel numla_dsa_index_kernel_i8_avx512vnni;

/* The one int8 rule of the quantized indexer, shared by the index-key writer and every
 * variant's query preparation (so all variants score the same codes): s = max|x| / 127,
 * code = x · (127 / max|x|) rounded to nearest even, clamped to ±127; all-zero x: s = 0, codes 0
 * (a NaN or infinite value, which no model should produce, gets code 0 rather than an undefined
 * conversion).
 * x[i · stride] for i < n. Returns s and the sum of the codes in *sum. */
static inline float numla_dsa_quantize_row(const float *x, size_t stride, int32_t n, int8_t *codes,
                                           int32_t *sum)
{
    float amax = 0.0f;
    for (int32_t i = 0; i < n; i++) {
        const float v = fabsf(x[(size_t)i * stride]);
        amax = v > amax ? v : amax;
    }
    int32_t tot = 0;
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int32_t i = 0; i < n; i++) {
        float c = nearbyintf(x[(size_t)i * stride] * inv);
        c = c > 127.0f ? 127.0f : c < -127.0f ? -127.0f : c == c ? c : 0.0f; /* NaN, inf: 0 */
        codes[i] = (int8_t)c;
        tot += (int32_t)c;
    }
    if (sum)
        *sum = tot;
    return amax / 127.0f;
}

/* Fields of an int8 index-key row (Di codes, then the fp32 scale, then the int32 code sum). */
static inline float numla_dsa_i8_row_scale(const char *row, int32_t D)
{
    float s;
    memcpy(&s, row + D, 4);
    return s;
}

static inline int32_t numla_dsa_i8_row_sum(const char *row, int32_t D)
{
    int32_t s;
    memcpy(&s, row + D + 4, 4);
    return s;
}
extern const numla_dsa_attn_kernel numla_dsa_attn_kernel_ref;
extern const numla_dsa_attn_kernel numla_dsa_attn_kernel_avx2;
extern const numla_dsa_attn_kernel numla_dsa_attn_kernel_avx512;
extern const numla_dsa_attn_kernel numla_dsa_attn_kernel_avx512bf16;

/* Sequence b's row of a block table of row stride `stride` (0: one row shared by all). */
static inline const int32_t *numla_dsa_table_row(const int32_t *tables, int32_t stride, int32_t b)
{
    return tables + (int64_t)b * stride;
}

/* Index-key row of token t of sequence b (validated). */
static inline const char *numla_dsa_k_row(const numla_dsa_index_args *a, int32_t b, int64_t t)
{
    int64_t blk = numla_dsa_table_row(a->block_tables, a->block_table_stride, b)[t / a->block_size];
    int64_t slot = blk * a->block_size + t % a->block_size;
    return (const char *)a->kcache + slot * (int64_t)numla_dsa_key_row_bytes(a->k_dtype, a->head_dim);
}

/* Keys a scoring loop asks the memory for ahead of its position: a key costs a few hundred
 * cycles of arithmetic, so this many rows cover a DRAM miss; without it a cache that does not
 * fit the LLC is read at a fraction of the bandwidth (the rows of a sequence sit in blocks
 * scattered over the pool, which the hardware prefetchers do not follow). */
enum { NUMLA_DSA_PREFETCH_KEYS = 64 };

/* rows[i] = the index-key row of token t0 + i of sequence b, i < n (all validated): one
 * division for the lot instead of one a key. */
static inline void numla_dsa_k_rows(const numla_dsa_index_args *a, int32_t b, int64_t t0, int32_t n,
                                    const char **rows)
{
    const int32_t *tab = numla_dsa_table_row(a->block_tables, a->block_table_stride, b);
    const int64_t rb = (int64_t)numla_dsa_key_row_bytes(a->k_dtype, a->head_dim);
    int64_t j = t0 / a->block_size, o = t0 % a->block_size;
    for (int32_t i = 0; i < n; i++) {
        rows[i] = (const char *)a->kcache + ((int64_t)tab[j] * a->block_size + o) * rb;
        if (++o == a->block_size)
            o = 0, j++;
    }
}

/* Prefetch the index-key rows of tokens t0 .. t0+n-1 of sequence b that exist (< seq_lens[b]). */
static inline void numla_dsa_k_prefetch(const numla_dsa_index_args *a, int32_t b, int64_t t0, int32_t n)
{
    if (t0 + n > a->seq_lens[b])
        n = t0 < a->seq_lens[b] ? (int32_t)(a->seq_lens[b] - t0) : 0;
    if (n <= 0)
        return;
    const char *rows[8];
    n = n > 8 ? 8 : n;
    numla_dsa_k_rows(a, b, t0, n, rows);
    const size_t rb = numla_dsa_key_row_bytes(a->k_dtype, a->head_dim);
    for (int32_t i = 0; i < n; i++) {
        for (size_t o = 0; o < rb; o += 64)
            __builtin_prefetch(rows[i] + o);
        __builtin_prefetch(rows[i] + rb - 1);
    }
}

/* Latent row of token t of sequence b (validated). */
static inline const char *numla_dsa_kv_row(const numla_dsa_attn_args *a, int32_t b, int64_t t)
{
    int64_t width = (int64_t)a->kv_lora_rank + a->rope_dim;
    int64_t blk = numla_dsa_table_row(a->block_tables, a->block_table_stride, b)[t / a->block_size];
    int64_t slot = blk * a->block_size + t % a->block_size;
    return (const char *)a->kv_cache + slot * width * (int64_t)numla_dtype_size(a->kv_dtype);
}

#endif
