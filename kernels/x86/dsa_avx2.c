/* kernels/x86/dsa_avx2.c — AVX2+FMA inner kernels of the DSA indexer (kernels/dsa_internal.h):
 * the float scoring and the int8 scoring, the plan of the avx512 variants at 8 lanes.
 *
 * Heads in lanes: the query is kept as (Di, Hi) (float) or (Di/4, Hi) code words (int8); keys
 * go in groups of NUMLA_DSA_AVX2_KEYS, and for each dimension (or word of four codes) the
 * group's key values are broadcast against 16 heads' query values at a time, so a key row is
 * read once per 16 heads from L1; then relu, the weighted head sum (an FMA per 8 heads) and the
 * four keys' lane sums together. A key's score is one fixed sequence of operations on its own
 * row (the group, the key block and the call's split do not enter it). Needs Hi % 8 == 0;
 * other head counts run the reference.
 *
 * Float keys (f32, f16, bf16): each row widened to fp32 once per group, fp32 FMAs; the
 * products are those of the reference, only the sums grouped differently.
 *
 * Int8 keys: vpmaddubsw multiplies unsigned bytes by signed bytes and adds adjacent pairs into
 * int16 with saturation, vpmaddwd then adds pairs of those into int32. The sign trick makes the
 * unsigned operand |k| (vpabsb of the broadcast key word; |-128| reads as 128 unsigned) and the
 * signed one q · sign(k) (vpsignb, 0 where k = 0), so each product is q · k. The query's codes
 * are in -127 ..= 127 (numla_dsa_quantize_row) and a key byte in -128 ..= 127, so a pair sum
 * is at most 2 · 128 · 127 = 32512 in magnitude, inside int16: no saturation, whatever the
 * key row holds; the int32 sums are exact (|Σ| <= 128 · 127 · Di). The integer dots are thus
 * the reference's, the relu, the conversion to fp32 and the weights follow as in the other
 * int8 variants (only the fp32 head sum grouped differently).
 *
 * Sparse attention: the dense MLA kernel's avx2 chunk (kernels/x86/mla_attn_avx2.c) walking the
 * query's index list instead of a key range (the chunk's `keys`), as the avx512bf16 level runs
 * its own: same numerics as numla_mla_attn at this level. Needs Dc % 32 == 0 and Dr % 16 == 0
 * (the chunk's applies()); other shapes run the reference.
 */
#include "kernels/dsa_internal.h"
#include "kernels/mla_attn_internal.h"

#include <immintrin.h>
#include <string.h>

#define NUMLA_DSA_AVX2_INLINE static inline __attribute__((always_inline))

/* (Σ lanes of a, Σ b, Σ c, Σ d), each key's sum by the same tree. */
NUMLA_DSA_AVX2_INLINE __m128 numla_dsa_avx2_hsum4(__m256 a, __m256 b, __m256 c, __m256 d)
{
    const __m256 ab = _mm256_hadd_ps(a, b), cd = _mm256_hadd_ps(c, d); /* pairs */
    const __m256 x = _mm256_hadd_ps(ab, cd); /* [a0-3, b0-3, c0-3, d0-3 | a4-7, ...] */
    return _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
}

/* ---- float keys --------------------------------------------------------------------------- */

static int numla_dsa_index_avx2_supports(const void *args)
{
    const numla_dsa_index_args *a = args;
    return a->num_heads % 8 == 0 && a->k_dtype != NUMLA_DTYPE_I8;
}

static size_t numla_dsa_index_avx2_packed(const numla_dsa_index_args *a)
{
    return (size_t)a->head_dim * (size_t)a->num_heads * sizeof(float); /* qt as it is */
}

static void numla_dsa_index_avx2_prepare(const numla_dsa_index_args *a, const float *qt, float *ws,
                                         void *packed)
{
    (void)ws;
    memcpy(packed, qt, numla_dsa_index_avx2_packed(a));
}

static size_t numla_dsa_index_avx2_scratch(const numla_dsa_index_args *a)
{
    const size_t dp = ((size_t)a->head_dim + 7) & ~(size_t)7;
    return NUMLA_DSA_AVX2_KEYS * dp * sizeof(float); /* the group's widened rows */
}

/* n (multiple of 8) values of a key row as fp32. */
NUMLA_DSA_AVX2_INLINE void numla_dsa_avx2_widen(const void *src, numla_dtype t, float *dst, int32_t n)
{
    const uint16_t *s = src;
    if (t == NUMLA_DTYPE_BF16) {
        for (int32_t d = 0; d < n; d += 8)
            _mm256_storeu_ps(dst + d, _mm256_castsi256_ps(_mm256_slli_epi32(
                                          _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + d))), 16)));
    } else if (t == NUMLA_DTYPE_F16) {
        for (int32_t d = 0; d < n; d += 8)
            _mm256_storeu_ps(dst + d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + d))));
    } else {
        memcpy(dst, src, (size_t)n * sizeof(float));
    }
}

/* Dots of the group's widened keys kf (KEYS, Dp) with NV (1, 2) vectors of 8 heads from head
 * vector v0, relu, times the weights, into tot. */
NUMLA_DSA_AVX2_INLINE void numla_dsa_avx2_group(const float *qt, const float *kf, int32_t D,
                                                int32_t Dp, int32_t H, int32_t v0, const int NV,
                                                const float *ws, __m256 tot[NUMLA_DSA_AVX2_KEYS])
{
    __m256 acc[NUMLA_DSA_AVX2_KEYS][2];
    for (int j = 0; j < NUMLA_DSA_AVX2_KEYS; j++)
        for (int v = 0; v < NV; v++)
            acc[j][v] = _mm256_setzero_ps();
    for (int32_t d = 0; d < D; d++) {
        const float *qd = qt + (size_t)d * H + (size_t)v0 * 8;
        __m256 qv[2];
        for (int v = 0; v < NV; v++)
            qv[v] = _mm256_loadu_ps(qd + 8 * v);
        for (int j = 0; j < NUMLA_DSA_AVX2_KEYS; j++) {
            const __m256 kb = _mm256_broadcast_ss(kf + (size_t)j * Dp + d);
            for (int v = 0; v < NV; v++)
                acc[j][v] = _mm256_fmadd_ps(qv[v], kb, acc[j][v]);
        }
    }
    for (int v = 0; v < NV; v++) {
        const __m256 wv = _mm256_loadu_ps(ws + (size_t)(v0 + v) * 8);
        for (int j = 0; j < NUMLA_DSA_AVX2_KEYS; j++)
            tot[j] = _mm256_fmadd_ps(_mm256_max_ps(acc[j][v], _mm256_setzero_ps()), wv, tot[j]);
    }
}

static void numla_dsa_index_avx2_scores(const numla_dsa_index_args *a, const void *packed,
                                        const float *ws, int32_t seq, int64_t k0, int64_t k1,
                                        float *out, void *scratch)
{
    const float *qt = packed;
    const int32_t H = a->num_heads, D = a->head_dim, NV = H / 8, Dp = (D + 7) & ~7;
    float *kf = scratch; /* (KEYS, Dp) */
    for (int64_t t0 = k0; t0 < k1; t0 += NUMLA_DSA_AVX2_KEYS) {
        const int64_t nk = k1 - t0 < NUMLA_DSA_AVX2_KEYS ? k1 - t0 : NUMLA_DSA_AVX2_KEYS;
        numla_dsa_k_prefetch(a, seq, t0 + NUMLA_DSA_PREFETCH_KEYS, NUMLA_DSA_AVX2_KEYS);
        const char *rows[NUMLA_DSA_AVX2_KEYS];
        numla_dsa_k_rows(a, seq, t0, (int32_t)nk, rows);
        for (int64_t j = 0; j < NUMLA_DSA_AVX2_KEYS; j++) {
            float *dst = kf + (size_t)j * Dp;
            if (j >= nk) { /* missing keys of the last group: zeros, results dropped */
                memset(dst, 0, (size_t)Dp * sizeof(float));
                continue;
            }
            if (D % 8 == 0)
                numla_dsa_avx2_widen(rows[j], a->k_dtype, dst, D);
            else
                for (int32_t d = 0; d < D; d++)
                    dst[d] = numla_load_f32(rows[j], a->k_dtype, (size_t)d);
        }
        __m256 tot[NUMLA_DSA_AVX2_KEYS];
        for (int j = 0; j < NUMLA_DSA_AVX2_KEYS; j++)
            tot[j] = _mm256_setzero_ps();
        int32_t v0 = 0;
        for (; v0 + 2 <= NV; v0 += 2)
            numla_dsa_avx2_group(qt, kf, D, Dp, H, v0, 2, ws, tot);
        if (v0 < NV)
            numla_dsa_avx2_group(qt, kf, D, Dp, H, v0, 1, ws, tot);
        float s4[4];
        _mm_storeu_ps(s4, numla_dsa_avx2_hsum4(tot[0], tot[1], tot[2], tot[3]));
        for (int64_t j = 0; j < nk; j++)
            out[t0 + j - k0] = s4[j];
    }
}

const numla_dsa_index_kernel numla_dsa_index_kernel_avx2 = {
    .v = {"avx2", 0, numla_dsa_index_avx2_supports},
    .prepare = numla_dsa_index_avx2_prepare,
    .packed_bytes = numla_dsa_index_avx2_packed,
    .scores = numla_dsa_index_avx2_scores,
    .scratch_bytes = numla_dsa_index_avx2_scratch,
};

/* ---- int8 keys ---------------------------------------------------------------------------- */

static int numla_dsa_index_i8_avx2_supports(const void *args)
{
    const numla_dsa_index_args *a = args;
    return a->k_dtype == NUMLA_DTYPE_I8 && a->num_heads % 8 == 0 && a->head_dim % 4 == 0;
}

static size_t numla_dsa_index_i8_avx2_packed(const numla_dsa_index_args *a)
{
    /* the code words (Di/4, Hi), then one head's codes while packing */
    return (size_t)a->head_dim * (size_t)a->num_heads + (size_t)a->head_dim;
}

static size_t numla_dsa_index_i8_avx2_scratch(const numla_dsa_index_args *a)
{
    return numla_dsa_key_row_bytes(NUMLA_DTYPE_I8, a->head_dim) + 64; /* one zero key row */
}

static void numla_dsa_index_i8_avx2_prepare(const numla_dsa_index_args *a, const float *qt,
                                            float *ws, void *packed)
{
    const int32_t H = a->num_heads, D = a->head_dim;
    int8_t *qp = packed; /* word (d4, h) at bytes 4 · (d4 · H + h) */
    int8_t *codes = qp + (size_t)D * H;
    for (int32_t h = 0; h < H; h++) {
        ws[h] *= numla_dsa_quantize_row(qt + h, (size_t)H, D, codes, NULL);
        for (int32_t d = 0; d < D; d++)
            qp[4 * ((size_t)(d / 4) * H + h) + (size_t)(d % 4)] = codes[d];
    }
}

/* Integer dots of the group's keys kr with NV (1, 2) vectors of 8 heads from head vector v0
 * (the sign trick above), relu, fp32, times the weights, into tot. */
NUMLA_DSA_AVX2_INLINE void numla_dsa_i8_avx2_group(const int32_t *qp,
                                                   const int32_t *const kr[NUMLA_DSA_AVX2_KEYS],
                                                   int32_t D4, int32_t H, int32_t v0, const int NV,
                                                   const float *ws, __m256 tot[NUMLA_DSA_AVX2_KEYS])
{
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i acc[NUMLA_DSA_AVX2_KEYS][2];
    for (int j = 0; j < NUMLA_DSA_AVX2_KEYS; j++)
        for (int v = 0; v < NV; v++)
            acc[j][v] = _mm256_setzero_si256();
    for (int32_t d = 0; d < D4; d++) {
        const int32_t *qd = qp + (size_t)d * H + (size_t)v0 * 8;
        __m256i qv[2];
        for (int v = 0; v < NV; v++)
            qv[v] = _mm256_loadu_si256((const __m256i *)(const void *)(qd + 8 * v));
        for (int j = 0; j < NUMLA_DSA_AVX2_KEYS; j++) {
            const __m256i kb = _mm256_set1_epi32(kr[j][d]), ka = _mm256_abs_epi8(kb);
            for (int v = 0; v < NV; v++) {
                const __m256i pairs = _mm256_maddubs_epi16(ka, _mm256_sign_epi8(qv[v], kb));
                acc[j][v] = _mm256_add_epi32(acc[j][v], _mm256_madd_epi16(pairs, ones));
            }
        }
    }
    for (int v = 0; v < NV; v++) {
        const __m256 wv = _mm256_loadu_ps(ws + (size_t)(v0 + v) * 8);
        for (int j = 0; j < NUMLA_DSA_AVX2_KEYS; j++)
            tot[j] = _mm256_fmadd_ps(
                _mm256_cvtepi32_ps(_mm256_max_epi32(acc[j][v], _mm256_setzero_si256())), wv, tot[j]);
    }
}

static void numla_dsa_index_i8_avx2_scores(const numla_dsa_index_args *a, const void *packed,
                                           const float *ws, int32_t seq, int64_t k0, int64_t k1,
                                           float *out, void *scratch)
{
    const int32_t H = a->num_heads, D = a->head_dim, D4 = D / 4, NV = H / 8;
    const int32_t *qp = packed;
    char *zero = scratch; /* codes 0, scale 0, sum 0 */
    memset(zero, 0, numla_dsa_key_row_bytes(NUMLA_DTYPE_I8, D));
    for (int64_t t0 = k0; t0 < k1; t0 += NUMLA_DSA_AVX2_KEYS) {
        const int64_t nk = k1 - t0 < NUMLA_DSA_AVX2_KEYS ? k1 - t0 : NUMLA_DSA_AVX2_KEYS;
        numla_dsa_k_prefetch(a, seq, t0 + NUMLA_DSA_PREFETCH_KEYS, NUMLA_DSA_AVX2_KEYS);
        const char *rows[NUMLA_DSA_AVX2_KEYS];
        numla_dsa_k_rows(a, seq, t0, (int32_t)nk, rows);
        const int32_t *kr[NUMLA_DSA_AVX2_KEYS];
        float sk[NUMLA_DSA_AVX2_KEYS];
        for (int64_t j = 0; j < NUMLA_DSA_AVX2_KEYS; j++) {
            const char *row = j < nk ? rows[j] : zero;
            kr[j] = (const int32_t *)(const void *)row;
            sk[j] = numla_dsa_i8_row_scale(row, D);
        }
        __m256 tot[NUMLA_DSA_AVX2_KEYS];
        for (int j = 0; j < NUMLA_DSA_AVX2_KEYS; j++)
            tot[j] = _mm256_setzero_ps();
        int32_t v0 = 0;
        for (; v0 + 2 <= NV; v0 += 2)
            numla_dsa_i8_avx2_group(qp, kr, D4, H, v0, 2, ws, tot);
        if (v0 < NV)
            numla_dsa_i8_avx2_group(qp, kr, D4, H, v0, 1, ws, tot);
        float s4[4];
        _mm_storeu_ps(s4, _mm_mul_ps(numla_dsa_avx2_hsum4(tot[0], tot[1], tot[2], tot[3]),
                                     _mm_loadu_ps(sk)));
        for (int64_t j = 0; j < nk; j++)
            out[t0 + j - k0] = s4[j];
    }
}

const numla_dsa_index_kernel numla_dsa_index_kernel_i8_avx2 = {
    .v = {"i8-avx2", 0, numla_dsa_index_i8_avx2_supports},
    .prepare = numla_dsa_index_i8_avx2_prepare,
    .packed_bytes = numla_dsa_index_i8_avx2_packed,
    .scores = numla_dsa_index_i8_avx2_scores,
    .scratch_bytes = numla_dsa_index_i8_avx2_scratch,
};

/* ---- sparse attention --------------------------------------------------------------------- */

static numla_mla_attn_args numla_dsa_attn_avx2_as_mla(const numla_dsa_attn_args *a)
{
    return (numla_mla_attn_args){
        .num_seqs = a->num_seqs, .num_heads = a->num_heads, .kv_lora_rank = a->kv_lora_rank,
        .rope_dim = a->rope_dim, .block_size = a->block_size, .num_blocks = a->num_blocks,
        .max_blocks_per_seq = a->block_table_stride /* the MLA args' row stride */, .q = a->q,
        .q_dtype = a->q_dtype, .kv_cache = a->kv_cache, .kv_dtype = a->kv_dtype,
        .block_tables = a->block_tables, .seq_lens = a->seq_lens,
        .query_start_loc = a->query_start_loc, .causal = 0, .scale = a->scale, .out = a->out,
        .out_dtype = a->out_dtype, .lse = a->lse};
}

static int numla_dsa_attn_avx2_supports(const void *args)
{
    const numla_mla_attn_args m = numla_dsa_attn_avx2_as_mla(args);
    return numla_mla_attn_kernel_avx2.v.applies(&m);
}

static size_t numla_dsa_attn_avx2_scratch(const numla_dsa_attn_args *a)
{
    const numla_mla_attn_args m = numla_dsa_attn_avx2_as_mla(a);
    return numla_mla_attn_kernel_avx2.scratch_bytes(&m) + 64;
}

static void numla_dsa_attn_avx2_chunk(const numla_dsa_attn_args *a, int32_t seq, int64_t row0,
                                      int32_t nrows, const int32_t *idx, int32_t n, float *acc,
                                      float *m, float *l, void *scratch)
{
    const numla_mla_attn_args ma = numla_dsa_attn_avx2_as_mla(a);
    numla_mla_attn_chunk c = {.a = &ma, .seq = seq, .nrows = nrows, .row0 = row0, .k0 = 0,
                              .k1 = n, .keys = idx};
    for (int32_t r = 0; r < nrows; r++)
        c.lim[r] = n; /* every row of the unit sees the whole list */
    numla_mla_attn_kernel_avx2.chunk(&c, acc, m, l, scratch);
}

const numla_dsa_attn_kernel numla_dsa_attn_kernel_avx2 = {
    .v = {"avx2", 0, numla_dsa_attn_avx2_supports},
    .chunk = numla_dsa_attn_avx2_chunk,
    .scratch_bytes = numla_dsa_attn_avx2_scratch,
};
