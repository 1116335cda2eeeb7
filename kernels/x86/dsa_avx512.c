/* kernels/x86/dsa_avx512.c — AVX-512 inner kernels of DSA (kernels/dsa_internal.h).
 *
 * Indexer scoring: keys in groups of 4, each row widened to fp32 once; for every dimension d
 * the 4 keys' k[d] are broadcast against the query's column qt[d][heads] (heads in lanes), so
 * one pass over a key's dims gives all heads' dots at once; then relu, the weighted head sum
 * and one horizontal add per key. Needs Hi % 16 == 0 (heads in lanes).
 *
 * Sparse attention: the selected rows in tiles of 16, gathered and widened into an fp32 tile
 * (each latent row read once for all heads of the item); scores with lanes along the row,
 * online softmax with a vector exp over the tile, and O += P·V with the tile's 16 value
 * pieces held in registers for every head. Needs (Dc + Dr) % 16 == 0.
 */
#include "kernels/dsa_internal.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/x86/dsa_hsum_avx512.h"
#include "kernels/x86/exp_avx512.h"

/* Widen n (multiple of 16) values of a cache row to fp32. */
static inline void numla_dsa_widen(const void *src, numla_dtype t, float *dst, int32_t n)
{
    if (t == NUMLA_DTYPE_BF16) {
        const uint16_t *s = src;
        for (int32_t d = 0; d < n; d += 16)
            _mm512_storeu_ps(dst + d, _mm512_castsi512_ps(_mm512_slli_epi32(
                                          _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(s + d))), 16)));
    } else if (t == NUMLA_DTYPE_F16) {
        const uint16_t *s = src;
        for (int32_t d = 0; d < n; d += 16)
            _mm512_storeu_ps(dst + d, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(s + d))));
    } else {
        memcpy(dst, src, (size_t)n * sizeof(float));
    }
}

/* ---- indexer ------------------------------------------------------------------------------ */

static int numla_dsa_index_avx512_supports(const void *args)
{
    const numla_dsa_index_args *a = args;
    return a->num_heads % 16 == 0 && a->k_dtype != NUMLA_DTYPE_I8;
}

static size_t numla_dsa_index_avx512_packed(const numla_dsa_index_args *a)
{
    return (size_t)a->head_dim * (size_t)a->num_heads * sizeof(float); /* qt as it is */
}

static void numla_dsa_index_avx512_prepare(const numla_dsa_index_args *a, const float *qt,
                                           float *ws, void *packed)
{
    (void)ws;
    memcpy(packed, qt, numla_dsa_index_avx512_packed(a));
}

static size_t numla_dsa_index_avx512_scratch(const numla_dsa_index_args *a)
{
    size_t dp = ((size_t)a->head_dim + 15) & ~(size_t)15;
    return NUMLA_DSA_IX_KEYS * dp * sizeof(float);
}

/* Dots of the 4 widened keys kf (4, Dp) with nv head vectors starting at head vector v0. */
static inline __attribute__((always_inline)) void
numla_dsa_ix_group(const float *qt, const float *kf, int32_t D, int32_t Dp, int32_t H, int32_t v0,
                   int nv, const float *ws, __m512 tot[NUMLA_DSA_IX_KEYS])
{
    __m512 acc[NUMLA_DSA_IX_KEYS][4];
    for (int j = 0; j < NUMLA_DSA_IX_KEYS; j++)
        for (int v = 0; v < nv; v++)
            acc[j][v] = _mm512_setzero_ps();
    for (int32_t d = 0; d < D; d++) {
        const float *qd = qt + (size_t)d * H + (size_t)v0 * 16;
        __m512 qv[4];
        for (int v = 0; v < nv; v++)
            qv[v] = _mm512_loadu_ps(qd + 16 * v);
        for (int j = 0; j < NUMLA_DSA_IX_KEYS; j++) {
            const __m512 kb = _mm512_set1_ps(kf[(size_t)j * Dp + d]);
            for (int v = 0; v < nv; v++)
                acc[j][v] = _mm512_fmadd_ps(qv[v], kb, acc[j][v]);
        }
    }
    for (int v = 0; v < nv; v++) {
        const __m512 wv = _mm512_loadu_ps(ws + (size_t)(v0 + v) * 16);
        for (int j = 0; j < NUMLA_DSA_IX_KEYS; j++)
            tot[j] = _mm512_fmadd_ps(_mm512_max_ps(acc[j][v], _mm512_setzero_ps()), wv, tot[j]);
    }
}

static void numla_dsa_index_avx512_scores(const numla_dsa_index_args *a, const void *packed,
                                          const float *ws, int32_t seq, int64_t k0, int64_t k1,
                                          float *out, void *scratch)
{
    const float *qt = packed;
    const int32_t H = a->num_heads, D = a->head_dim, NV = H / 16;
    const int32_t Dp = (D + 15) & ~15;
    float *kf = scratch; /* (4, Dp) */
    for (int64_t t0 = k0; t0 < k1; t0 += NUMLA_DSA_IX_KEYS) {
        const int64_t nk = k1 - t0 < NUMLA_DSA_IX_KEYS ? k1 - t0 : NUMLA_DSA_IX_KEYS;
        numla_dsa_k_prefetch(a, seq, t0 + NUMLA_DSA_PREFETCH_KEYS, NUMLA_DSA_IX_KEYS);
        const char *rows[NUMLA_DSA_IX_KEYS];
        numla_dsa_k_rows(a, seq, t0, (int32_t)nk, rows);
        for (int64_t j = 0; j < NUMLA_DSA_IX_KEYS; j++) {
            float *dst = kf + (size_t)j * Dp;
            if (j >= nk) { /* missing keys of the last group: zeros, results dropped */
                memset(dst, 0, (size_t)Dp * sizeof(float));
                continue;
            }
            const char *row = rows[j];
            if (D % 16 == 0)
                numla_dsa_widen(row, a->k_dtype, dst, D);
            else
                for (int32_t d = 0; d < D; d++)
                    dst[d] = numla_load_f32(row, a->k_dtype, (size_t)d);
        }
        __m512 tot[NUMLA_DSA_IX_KEYS];
        for (int j = 0; j < NUMLA_DSA_IX_KEYS; j++)
            tot[j] = _mm512_setzero_ps();
        int32_t v0 = 0;
        for (; v0 + 4 <= NV; v0 += 4)
            numla_dsa_ix_group(qt, kf, D, Dp, H, v0, 4, ws, tot);
        switch (NV - v0) {
        case 3: numla_dsa_ix_group(qt, kf, D, Dp, H, v0, 3, ws, tot); break;
        case 2: numla_dsa_ix_group(qt, kf, D, Dp, H, v0, 2, ws, tot); break;
        case 1: numla_dsa_ix_group(qt, kf, D, Dp, H, v0, 1, ws, tot); break;
        default: break;
        }
        float s4[4];
        _mm_storeu_ps(s4, numla_dsa_hsum4(tot[0], tot[1], tot[2], tot[3]));
        for (int64_t j = 0; j < nk; j++)
            out[t0 + j - k0] = s4[j];
    }
}

const numla_dsa_index_kernel numla_dsa_index_kernel_avx512 = {
    .v = {"avx512", 0, numla_dsa_index_avx512_supports},
    .prepare = numla_dsa_index_avx512_prepare,
    .packed_bytes = numla_dsa_index_avx512_packed,
    .scores = numla_dsa_index_avx512_scores,
    .scratch_bytes = numla_dsa_index_avx512_scratch,
};

/* ---- sparse attention --------------------------------------------------------------------- */

enum { NUMLA_DSA_AT_KEYS = 16 }; /* rows per tile: one zmm of scores per head */

static int numla_dsa_attn_avx512_supports(const void *args)
{
    const numla_dsa_attn_args *a = args;
    return a->kv_lora_rank % 16 == 0 && a->rope_dim % 16 == 0;
}

static size_t numla_dsa_attn_avx512_scratch(const numla_dsa_attn_args *a)
{
    const size_t w = (size_t)a->kv_lora_rank + (size_t)a->rope_dim;
    /* q rows, the widened tile, the tile's scores (rows, keys) */
    return (NUMLA_DSA_ROWS + NUMLA_DSA_AT_KEYS) * w * sizeof(float) +
           NUMLA_DSA_ROWS * NUMLA_DSA_AT_KEYS * sizeof(float);
}

static void numla_dsa_attn_avx512_chunk(const numla_dsa_attn_args *a, int32_t seq, int64_t row0,
                                        int32_t nrows, const int32_t *idx, int32_t n, float *acc,
                                        float *m, float *l, void *scratch)
{
    const int32_t dc = a->kv_lora_rank, w = dc + a->rope_dim;
    float *q = scratch;                                      /* (nrows, w) */
    float *kt = q + (size_t)NUMLA_DSA_ROWS * w;              /* (16, w) */
    float *sc = kt + (size_t)NUMLA_DSA_AT_KEYS * w;          /* (nrows, 16) */
    for (int32_t r = 0; r < nrows; r++) {
        const size_t base = (size_t)(row0 + r) * (size_t)w;
        if (a->q_dtype == NUMLA_DTYPE_F32)
            memcpy(q + (size_t)r * w, (const float *)a->q + base, (size_t)w * sizeof(float));
        else
            numla_dsa_widen((const uint16_t *)a->q + base, a->q_dtype, q + (size_t)r * w, w);
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    memset(acc, 0, (size_t)nrows * dc * sizeof(float));
    const float scale = a->scale;
    for (int32_t j0 = 0; j0 < n; j0 += NUMLA_DSA_AT_KEYS) {
        const int32_t nk = n - j0 < NUMLA_DSA_AT_KEYS ? n - j0 : NUMLA_DSA_AT_KEYS;
        for (int32_t j = 0; j < nk; j++)
            numla_dsa_widen(numla_dsa_kv_row(a, seq, idx[j0 + j]), a->kv_dtype,
                            kt + (size_t)j * w, w);
        const __mmask16 live = (__mmask16)((1u << nk) - 1u);
        for (int32_t r = 0; r < nrows; r++) {
            const float *qr = q + (size_t)r * w;
            float *sr = sc + (size_t)r * NUMLA_DSA_AT_KEYS;
            for (int32_t j = 0; j < nk; j += 4) {
                __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
                const float *k0 = kt + (size_t)j * w;
                const int nj = nk - j < 4 ? nk - j : 4;
                for (int32_t d = 0; d < w; d += 16) {
                    const __m512 qv = _mm512_loadu_ps(qr + d);
                    s0 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k0 + d), s0);
                    if (nj > 1)
                        s1 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k0 + w + d), s1);
                    if (nj > 2)
                        s2 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k0 + 2 * (size_t)w + d), s2);
                    if (nj > 3)
                        s3 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k0 + 3 * (size_t)w + d), s3);
                }
                sr[j] = _mm512_reduce_add_ps(s0) * scale;
                if (nj > 1)
                    sr[j + 1] = _mm512_reduce_add_ps(s1) * scale;
                if (nj > 2)
                    sr[j + 2] = _mm512_reduce_add_ps(s2) * scale;
                if (nj > 3)
                    sr[j + 3] = _mm512_reduce_add_ps(s3) * scale;
            }
            /* online softmax over the tile: P = e^(S - m_new), the running state scaled by
             * e^(m_old - m_new) (0 while m_old = -inf) */
            const __m512 s = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), live, sr);
            const float mt = _mm512_reduce_max_ps(s);
            const float mn = mt > m[r] ? mt : m[r];
            const float corr = m[r] == -INFINITY ? 0.0f : expf(m[r] - mn);
            const __m512 p = _mm512_maskz_mov_ps(live, numla_exp512(_mm512_sub_ps(s, _mm512_set1_ps(mn))));
            _mm512_storeu_ps(sr, p);
            l[r] = l[r] * corr + _mm512_reduce_add_ps(p);
            m[r] = mn;
            float *ar = acc + (size_t)r * dc;
            if (corr != 1.0f)
                for (int32_t d = 0; d < dc; d += 16)
                    _mm512_storeu_ps(ar + d, _mm512_mul_ps(_mm512_loadu_ps(ar + d), _mm512_set1_ps(corr)));
        }
        /* O[r] += Σ_j P[r][j] · v_j: per 16-wide piece of v, the tile's pieces stay in
         * registers across all rows */
        for (int32_t d = 0; d < dc; d += 16) {
            __m512 v[NUMLA_DSA_AT_KEYS];
            for (int32_t j = 0; j < NUMLA_DSA_AT_KEYS; j++)
                v[j] = j < nk ? _mm512_loadu_ps(kt + (size_t)j * w + d) : _mm512_setzero_ps();
            for (int32_t r = 0; r < nrows; r++) {
                const float *pr = sc + (size_t)r * NUMLA_DSA_AT_KEYS;
                float *ar = acc + (size_t)r * dc + d;
                __m512 o = _mm512_loadu_ps(ar);
                for (int32_t j = 0; j < nk; j++)
                    o = _mm512_fmadd_ps(_mm512_set1_ps(pr[j]), v[j], o);
                _mm512_storeu_ps(ar, o);
            }
        }
    }
}

const numla_dsa_attn_kernel numla_dsa_attn_kernel_avx512 = {
    .v = {"avx512", 0, numla_dsa_attn_avx512_supports},
    .chunk = numla_dsa_attn_avx512_chunk,
    .scratch_bytes = numla_dsa_attn_avx512_scratch,
};
