/* kernels/x86/qblock_f32_avx2.c — block-quantized linear layers in F32 activation mode
 * (kernels/qblock.h) with AVX2: the types and shapes Q8 mode does not take at the avx2 level
 * (Q4_1; K not a multiple of the type's Q8 group) and the weights a caller packs for fp32
 * activations (DeepSeek-V4's MXFP4 experts and its GGUF tensors, engine/model/model_v4.c).
 *
 * Each weight row's blocks are decoded once per tile of up to NUMLA_QBLOCK_AVX2_MR x rows into
 * fp32 on the stack by the type's AVX2 decoder, inlined in its entry (its row's f32_avx2): the
 * reference's values exactly where it multiplies codes by scales, as the reference does (Q8_0,
 * Q4_0, Q5_0, IQ4_NL, MXFP4, Q6_K, IQ4_XS, Q3_K), one fused rounding where it adds a min or
 * offset, within 1 ulp of the reference's two (Q4_1, Q5_1, Q4_K, Q5_K, Q2_K). Then 8 products at
 * a time go into 4 accumulators of 8 lanes per x row (vector j of a block into accumulator
 * j mod 4, one fma each), added and summed in a fixed order at the row's end. The per-lane operations do not depend on M or the thread count, so neither changes a bit
 * of y. Weights come in the ROWS layout only (PANEL16 is a Q8-mode layout).
 */
#include "kernels/x86/qblock_avx2_internal.h"

#include <immintrin.h>
#include <omp.h>

#define NUMLA_F2_INLINE static inline __attribute__((always_inline))

static inline float numla_qblock_f2_h_(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* A 32-element block's 16 nibble bytes as 32 int32 codes in column order (low nibbles 0-15,
 * high 16-31), 8 to a vector. */
static inline void numla_qblock_f2_nib_(const uint8_t *qs, __m256i c[4])
{
    const __m128i q = _mm_loadu_si128((const __m128i *)(const void *)qs), m4 = _mm_set1_epi8(15);
    const __m128i lo = _mm_and_si128(q, m4), hi = _mm_and_si128(_mm_srli_epi16(q, 4), m4);
    c[0] = _mm256_cvtepu8_epi32(lo);
    c[1] = _mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8));
    c[2] = _mm256_cvtepu8_epi32(hi);
    c[3] = _mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8));
}

/* The same codes through a 16-entry signed code book (IQ4_NL's, MXFP4's). */
static inline void numla_qblock_f2_book_(const uint8_t *qs, const int8_t *book, __m256i c[4])
{
    const __m128i q = _mm_loadu_si128((const __m128i *)(const void *)qs), m4 = _mm_set1_epi8(15);
    const __m128i bk = _mm_loadu_si128((const __m128i *)(const void *)book);
    const __m128i lo = _mm_shuffle_epi8(bk, _mm_and_si128(q, m4));
    const __m128i hi = _mm_shuffle_epi8(bk, _mm_and_si128(_mm_srli_epi16(q, 4), m4));
    c[0] = _mm256_cvtepi8_epi32(lo);
    c[1] = _mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8));
    c[2] = _mm256_cvtepi8_epi32(hi);
    c[3] = _mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8));
}

/* codes · d (exact products of small integers and the scale, as the reference's). */
static inline void numla_qblock_f2_scale_(const __m256i c[4], float d, float *out)
{
    const __m256 dv = _mm256_set1_ps(d);
    for (int j = 0; j < 4; j++)
        _mm256_storeu_ps(out + 8 * j, _mm256_mul_ps(_mm256_cvtepi32_ps(c[j]), dv));
}

/* codes · d + m in one fused rounding (Q4_1, Q5_1: within 1 ulp of the reference's two). */
static inline void numla_qblock_f2_scale_min_(const __m256i c[4], float d, float m, float *out)
{
    const __m256 dv = _mm256_set1_ps(d), mv = _mm256_set1_ps(m);
    for (int j = 0; j < 4; j++)
        _mm256_storeu_ps(out + 8 * j, _mm256_fmadd_ps(_mm256_cvtepi32_ps(c[j]), dv, mv));
}

NUMLA_F2_INLINE void numla_qblock_f2_dec_q8_0_(const uint8_t *b, float *out)
{
    __m256i c[4];
    for (int j = 0; j < 4; j++)
        c[j] = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(b + 2 + 8 * j)));
    numla_qblock_f2_scale_(c, numla_qblock_f2_h_(b), out);
}

NUMLA_F2_INLINE void numla_qblock_f2_dec_q4_0_(const uint8_t *b, float *out)
{
    __m256i c[4];
    numla_qblock_f2_nib_(b + 2, c);
    for (int j = 0; j < 4; j++)
        c[j] = _mm256_sub_epi32(c[j], _mm256_set1_epi32(8));
    numla_qblock_f2_scale_(c, numla_qblock_f2_h_(b), out);
}

NUMLA_F2_INLINE void numla_qblock_f2_dec_q4_1_(const uint8_t *b, float *out)
{
    __m256i c[4];
    numla_qblock_f2_nib_(b + 4, c);
    numla_qblock_f2_scale_min_(c, numla_qblock_f2_h_(b), numla_qblock_f2_h_(b + 2), out);
}

NUMLA_F2_INLINE void numla_qblock_f2_dec_iq4_nl_(const uint8_t *b, float *out)
{
    __m256i c[4];
    numla_qblock_f2_book_(b + 2, numla_qblock_iq4_values, c);
    numla_qblock_f2_scale_(c, numla_qblock_f2_h_(b), out);
}

NUMLA_F2_INLINE void numla_qblock_f2_dec_mxfp4_(const uint8_t *b, float *out)
{
    __m256i c[4];
    numla_qblock_f2_book_(b + 1, numla_qblock_mxfp4_values, c);
    numla_qblock_f2_scale_(c, numla_qblock_e8m0_half_(b[0]), out);
}

/* 8 bytes from p as int32 lanes. */
static inline __m256i numla_qblock_f2_u8x8_(const uint8_t *p)
{
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p));
}

/* Q5_0's and Q5_1's fifth bits: column 8j + l of the nibble codes c takes bit 8j + l of the
 * 32-bit qh at p as 16. */
static inline void numla_qblock_f2_bit5_(const uint8_t *p, __m256i c[4])
{
    uint32_t qh;
    memcpy(&qh, p, 4);
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    for (int j = 0; j < 4; j++) {
        const __m256i h = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)(qh >> (8 * j))), bit), bit);
        c[j] = _mm256_or_si256(c[j], _mm256_and_si256(h, _mm256_set1_epi32(16)));
    }
}

NUMLA_F2_INLINE void numla_qblock_f2_dec_q5_0_(const uint8_t *b, float *out)
{
    __m256i c[4];
    numla_qblock_f2_nib_(b + 6, c);
    numla_qblock_f2_bit5_(b + 2, c);
    for (int j = 0; j < 4; j++)
        c[j] = _mm256_sub_epi32(c[j], _mm256_set1_epi32(16));
    numla_qblock_f2_scale_(c, numla_qblock_f2_h_(b), out);
}

/* Q4_K and Q5_K (qh NULL for Q4_K): sub-block j's codes (and fifth bits) times d · sc, less
 * dmin · m (one fused rounding: within an ulp of the reference's two). */
static inline void numla_qblock_f2_k45_(const uint8_t *b, const uint8_t *qh, const uint8_t *qs, float *out)
{
    const float d = numla_qblock_f2_h_(b), dmin = numla_qblock_f2_h_(b + 2);
    const __m256i m4 = _mm256_set1_epi32(15), one = _mm256_set1_epi32(1);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        numla_qblock_k4_scale_min_(b + 4, j, &sc, &m);
        const __m256 dl = _mm256_set1_ps(d * (float)sc), ml = _mm256_set1_ps(dmin * (float)m);
        const uint8_t *q = qs + 32 * (j / 2);
        for (int v = 0; v < 4; v++) {
            __m256i c = numla_qblock_f2_u8x8_(q + 8 * v);
            c = j & 1 ? _mm256_srli_epi32(c, 4) : _mm256_and_si256(c, m4);
            if (qh)
                c = _mm256_or_si256(
                    c, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(numla_qblock_f2_u8x8_(qh + 8 * v), j), one), 4));
            _mm256_storeu_ps(out + 32 * j + 8 * v, _mm256_fmsub_ps(_mm256_cvtepi32_ps(c), dl, ml));
        }
    }
}

NUMLA_F2_INLINE void numla_qblock_f2_dec_q4_k_(const uint8_t *b, float *out) { numla_qblock_f2_k45_(b, NULL, b + 16, out); }
NUMLA_F2_INLINE void numla_qblock_f2_dec_q5_k_(const uint8_t *b, float *out) { numla_qblock_f2_k45_(b, b + 16, b + 48, out); }

/* Q6_K: (d · sc[e / 16]) · (q - 32), the reference's two products. */
NUMLA_F2_INLINE void numla_qblock_f2_dec_q6_k_(const uint8_t *b, float *out)
{
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    const float d = numla_qblock_f2_h_(b + 208);
    const __m256i m4 = _mm256_set1_epi32(15), m3 = _mm256_set1_epi32(3), k32 = _mm256_set1_epi32(32);
    for (int h = 0; h < 2; h++)
        for (int t = 0; t < 4; t++)
            for (int v = 0; v < 4; v++) { /* elements e = 128h + 32t + 8v .. + 8 */
                __m256i c = numla_qblock_f2_u8x8_(ql + 64 * h + 32 * (t & 1) + 8 * v);
                c = t < 2 ? _mm256_and_si256(c, m4) : _mm256_srli_epi32(c, 4);
                const __m256i hb = _mm256_and_si256(_mm256_srli_epi32(numla_qblock_f2_u8x8_(qh + 32 * h + 8 * v), 2 * t), m3);
                c = _mm256_sub_epi32(_mm256_or_si256(c, _mm256_slli_epi32(hb, 4)), k32);
                const int e = 128 * h + 32 * t + 8 * v;
                _mm256_storeu_ps(out + e, _mm256_mul_ps(_mm256_set1_ps(d * (float)sc[e / 16]), _mm256_cvtepi32_ps(c)));
            }
}

/* IQ4_XS: (d · (ls - 32)) · the code book's value, the reference's two products. */
NUMLA_F2_INLINE void numla_qblock_f2_dec_iq4_xs_(const uint8_t *b, float *out)
{
    const float d = numla_qblock_f2_h_(b);
    uint16_t sh;
    memcpy(&sh, b + 2, 2);
    for (int j = 0; j < 8; j++) {
        const int ls = ((b[4 + j / 2] >> (4 * (j % 2))) & 15) | ((sh >> (2 * j)) & 3) << 4;
        __m256i c[4];
        numla_qblock_f2_book_(b + 8 + 16 * j, numla_qblock_iq4_values, c);
        numla_qblock_f2_scale_(c, d * (float)(ls - 32), out + 32 * j);
    }
}

/* Q5_1: d · q + m in one fused rounding (within 1 ulp of the reference's two). */
NUMLA_F2_INLINE void numla_qblock_f2_dec_q5_1_(const uint8_t *b, float *out)
{
    __m256i c[4];
    numla_qblock_f2_nib_(b + 8, c);
    numla_qblock_f2_bit5_(b + 4, c);
    numla_qblock_f2_scale_min_(c, numla_qblock_f2_h_(b), numla_qblock_f2_h_(b + 2), out);
}

/* Q2_K: (d · sc) · q - dmin · m per 16 columns (one fused rounding for the subtraction). Q3_K:
 * (d · (sc - 32)) · q, the reference's two products, q the 2 low bits less 4 where hmask's bit is
 * clear. Element e = 128h + 32s + l. */
NUMLA_F2_INLINE void numla_qblock_f2_dec_q2_k_(const uint8_t *b, float *out)
{
    const float d = numla_qblock_f2_h_(b + 80), dmin = numla_qblock_f2_h_(b + 82);
    const __m256i m3 = _mm256_set1_epi32(3);
    for (int h = 0; h < 2; h++)
        for (int s = 0; s < 4; s++)
            for (int v = 0; v < 4; v++) {
                const int e = 128 * h + 32 * s + 8 * v, g = e / 16;
                const __m256i q = _mm256_and_si256(_mm256_srli_epi32(numla_qblock_f2_u8x8_(b + 16 + 32 * h + 8 * v), 2 * s), m3);
                _mm256_storeu_ps(out + e, _mm256_fmsub_ps(_mm256_set1_ps(d * (float)(b[g] & 15)), _mm256_cvtepi32_ps(q),
                                                          _mm256_set1_ps(dmin * (float)(b[g] >> 4))));
            }
}

NUMLA_F2_INLINE void numla_qblock_f2_dec_q3_k_(const uint8_t *b, float *out)
{
    const float d = numla_qblock_f2_h_(b + 108);
    const __m256i m3 = _mm256_set1_epi32(3), one = _mm256_set1_epi32(1), four = _mm256_set1_epi32(4);
    for (int h = 0; h < 2; h++)
        for (int s = 0; s < 4; s++)
            for (int v = 0; v < 4; v++) {
                const int e = 128 * h + 32 * s + 8 * v;
                const __m256i lo = _mm256_and_si256(_mm256_srli_epi32(numla_qblock_f2_u8x8_(b + 32 + 32 * h + 8 * v), 2 * s), m3);
                const __m256i hb = _mm256_and_si256(_mm256_srli_epi32(numla_qblock_f2_u8x8_(b + 8 * v), 4 * h + s), one);
                const __m256i q = _mm256_sub_epi32(lo, _mm256_andnot_si256(_mm256_slli_epi32(hb, 2), four));
                const float dl = d * (float)numla_qblock_q3k_scale_(b + 96, e / 16);
                _mm256_storeu_ps(out + e, _mm256_mul_ps(_mm256_set1_ps(dl), _mm256_cvtepi32_ps(q)));
            }
}

/* One weight row (its blocks at row) against mr x rows: y's values for them into out. */
NUMLA_F2_INLINE void numla_qblock_f2_tile_(void (*dec)(const uint8_t *, float *), int bl,
                                                                       int bytes, const uint8_t *row, int64_t nb,
                                                                       int mr, const float *x, int64_t ldx,
                                                                       float *out)
{
    __m256 acc[NUMLA_QBLOCK_AVX2_MR][4];
    for (int i = 0; i < mr; i++)
        for (int a = 0; a < 4; a++)
            acc[i][a] = _mm256_setzero_ps();
    float wv[256] __attribute__((aligned(32)));
    for (int64_t b = 0; b < nb; b++) {
        dec(row + b * bytes, wv);
        for (int i = 0; i < mr; i++) {
            const float *xb = x + i * ldx + b * bl;
            for (int j = 0; j < bl / 8; j += 4) /* vector j + a into accumulator a */
#pragma GCC unroll 4
                for (int a = 0; a < 4; a++)
                    acc[i][a] = _mm256_fmadd_ps(_mm256_load_ps(wv + 8 * (j + a)), _mm256_loadu_ps(xb + 8 * (j + a)),
                                                acc[i][a]);
        }
    }
    for (int i = 0; i < mr; i++) {
        const __m256 s = _mm256_add_ps(_mm256_add_ps(acc[i][0], acc[i][1]), _mm256_add_ps(acc[i][2], acc[i][3]));
        __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        out[i] = _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
    }
}

/* One entry per type: its decoder inlined into the tiles, mr a constant in each tile height; and
 * columns [k0, k1) of a row (multiples of the block) decoded into dst for the many-row path. */
#define NUMLA_F2_ENTRY(T, DEC, BL, BYTES)                                                                      \
    void numla_qblock_f32_decode_##T##_avx2(const numla_qblock_weight *w, const uint8_t *row, int64_t k0,       \
                                            int64_t k1, float *dst)                                             \
    {                                                                                                           \
        (void)w;                                                                                                \
        for (int64_t b = k0 / (BL); b < k1 / (BL); b++)                                                         \
            DEC(row + b * (BYTES), dst + (b * (BL) - k0));                                                      \
    }                                                                                                           \
    void numla_qblock_f32_rows_##T##_avx2(const uint8_t *row, int64_t nb, int mr, const float *x, int64_t ldx, \
                                          float *out)                                                           \
    {                                                                                                           \
        switch (mr) {                                                                                           \
        case 1: numla_qblock_f2_tile_(DEC, BL, BYTES, row, nb, 1, x, ldx, out); break;                          \
        case 2: numla_qblock_f2_tile_(DEC, BL, BYTES, row, nb, 2, x, ldx, out); break;                          \
        case 3: numla_qblock_f2_tile_(DEC, BL, BYTES, row, nb, 3, x, ldx, out); break;                          \
        default: numla_qblock_f2_tile_(DEC, BL, BYTES, row, nb, NUMLA_QBLOCK_AVX2_MR, x, ldx, out); break;     \
        }                                                                                                       \
    }
NUMLA_F2_ENTRY(q8_0, numla_qblock_f2_dec_q8_0_, 32, 34)
NUMLA_F2_ENTRY(q4_0, numla_qblock_f2_dec_q4_0_, 32, 18)
NUMLA_F2_ENTRY(q4_1, numla_qblock_f2_dec_q4_1_, 32, 20)
NUMLA_F2_ENTRY(q5_0, numla_qblock_f2_dec_q5_0_, 32, 22)
NUMLA_F2_ENTRY(iq4_nl, numla_qblock_f2_dec_iq4_nl_, 32, 18)
NUMLA_F2_ENTRY(mxfp4, numla_qblock_f2_dec_mxfp4_, 32, 17)
NUMLA_F2_ENTRY(q4_k, numla_qblock_f2_dec_q4_k_, 256, 144)
NUMLA_F2_ENTRY(q5_k, numla_qblock_f2_dec_q5_k_, 256, 176)
NUMLA_F2_ENTRY(q6_k, numla_qblock_f2_dec_q6_k_, 256, 210)
NUMLA_F2_ENTRY(iq4_xs, numla_qblock_f2_dec_iq4_xs_, 256, 136)
NUMLA_F2_ENTRY(q2_k, numla_qblock_f2_dec_q2_k_, 256, 84)
NUMLA_F2_ENTRY(q3_k, numla_qblock_f2_dec_q3_k_, 256, 110)
NUMLA_F2_ENTRY(q5_1, numla_qblock_f2_dec_q5_1_, 32, 24)
#undef NUMLA_F2_ENTRY
_Static_assert(NUMLA_QBLOCK_AVX2_MR == 4, "the tile heights above are 1 .. 4");
_Static_assert((int)NUMLA_QBLOCK_AVX2_MANY_NW <= (int)NUMLA_QBLOCK_MANY_NW && NUMLA_QBLOCK_AVX2_MANY_MR == 4 &&
                   NUMLA_QBLOCK_AVX2_MANY_KC % 256 == 0 &&
                   (int)NUMLA_QBLOCK_AVX2_MANY_KC <= (int)NUMLA_QBLOCK_MANY_KC,
               "the many-row path fits the avx512 path's scratch, its tile heights are 1 .. 4, and a column "
               "block starts at a multiple of 32 vectors");

typedef struct numla_qblock_f2_job_ {
    const numla_qblock_weight *w;
    int64_t m, ldx, ldy, nb; /* nb: blocks per weight row */
    const float *x;
    float *y;
    int accumulate;
    numla_qblock_f32_avx2_fn fn; /* the type's f32_avx2 */
} numla_qblock_f2_job_;

/* Weight row r against x rows [i0, i0 + mr): y's values into v. */
static inline void numla_qblock_f2_row_(const void *job, int64_t r, int64_t i0, int mr, float *v)
{
    const numla_qblock_f2_job_ *j = job;
    j->fn(j->w->q + r * j->w->ld, j->nb, mr, j->x + i0 * j->ldx, j->ldx, v);
}

static void numla_qblock_f2_run_(const numla_qblock_f2_job_ *j, int ith, int nth)
{
    numla_qblock_avx2_walk_(j->w, j->m, j->y, j->ldy, j->accumulate, ith, nth, numla_qblock_f2_row_, j);
}

/* ---- many x rows: the GEMV's four accumulator sets one pass at a time -------------------------
 * The tile above keeps the four sets of one weight row against up to 4 x rows in registers and
 * decodes each block once per tile. From NUMLA_QBLOCK_AVX2_MANY_MIN_M rows each thread decodes 3 of
 * its weight rows per NUMLA_QBLOCK_AVX2_MANY_KC columns into fp32 scratch once and runs 3 x 4 tiles
 * over a chunk of x rows, one set per pass (vector v, 8 floats, into set v mod 4 as above; a
 * column block starts at a multiple of 32 vectors), stored between passes and blocks exactly;
 * each pair's sets are then added and summed in the tile's order, so every M keeps the bits.
 * S: a tile's sums, (mr, NW, 4 sets, 8 lanes). */
NUMLA_F2_INLINE void numla_qblock_f2_many_pass_(const float *W, int64_t v0, int64_t v1, const float *x,
                                                int64_t ldx, const int mr, float *S, int first)
{
    enum { NW = NUMLA_QBLOCK_AVX2_MANY_NW, MR = NUMLA_QBLOCK_AVX2_MANY_MR, KC = NUMLA_QBLOCK_AVX2_MANY_KC };
    for (int u = 0; u < 4; u++) {
        __m256 a[MR][NW];
        for (int i = 0; i < mr; i++)
            for (int r = 0; r < NW; r++)
                a[i][r] = first ? _mm256_setzero_ps() : _mm256_load_ps(S + ((i * NW + r) * 4 + u) * 8);
        for (int64_t v = v0 + u; v < v1; v += 4) {
            const int64_t c = 8 * (v - v0);
            __m256 wv[NW];
            for (int r = 0; r < NW; r++)
                wv[r] = _mm256_load_ps(W + r * KC + c);
            for (int i = 0; i < mr; i++) {
                const __m256 xv = _mm256_loadu_ps(x + i * ldx + c);
                for (int r = 0; r < NW; r++)
                    a[i][r] = _mm256_fmadd_ps(wv[r], xv, a[i][r]);
            }
        }
        for (int i = 0; i < mr; i++)
            for (int r = 0; r < NW; r++)
                _mm256_store_ps(S + ((i * NW + r) * 4 + u) * 8, a[i][r]);
    }
}

/* Weight rows [r0, r0 + nw) (nw <= NW) for x rows [i0, i1) (at most NUMLA_QBLOCK_MANY_CHUNK). */
static void numla_qblock_f2_many_rows_(const numla_qblock_weight *w, numla_qblock_f32_decode_fn dec, int64_t r0,
                                       int nw, int64_t i0, int64_t i1, const float *x, int64_t ldx, float *y,
                                       int64_t ldy, int accumulate, float *W, float *S)
{
    enum { NW = NUMLA_QBLOCK_AVX2_MANY_NW, MR = NUMLA_QBLOCK_AVX2_MANY_MR, KC = NUMLA_QBLOCK_AVX2_MANY_KC };
    for (int64_t k0 = 0; k0 < w->k; k0 += KC) {
        const int64_t kc = w->k - k0 < KC ? w->k - k0 : KC;
        numla_qblock_many_decode_(w, dec, r0, nw, NW, k0, kc, KC, W);
        const int64_t v0 = k0 / 8, v1 = (k0 + kc) / 8;
        const int first = k0 == 0;
        for (int64_t i = i0; i < i1; i += MR) {
            const int mr = i1 - i >= MR ? MR : (int)(i1 - i);
            const float *xi = x + i * ldx + k0;
            float *Si = S + (i - i0) * NW * 32;
            switch (mr) {
            case 4: numla_qblock_f2_many_pass_(W, v0, v1, xi, ldx, 4, Si, first); break;
            case 3: numla_qblock_f2_many_pass_(W, v0, v1, xi, ldx, 3, Si, first); break;
            case 2: numla_qblock_f2_many_pass_(W, v0, v1, xi, ldx, 2, Si, first); break;
            default: numla_qblock_f2_many_pass_(W, v0, v1, xi, ldx, 1, Si, first); break;
            }
        }
    }
    for (int64_t i = i0; i < i1; i++)
        for (int r = 0; r < nw; r++) {
            const float *sp = S + ((i - i0) * NW + r) * 32;
            const __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_load_ps(sp), _mm256_load_ps(sp + 8)),
                                           _mm256_add_ps(_mm256_load_ps(sp + 16), _mm256_load_ps(sp + 24)));
            __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
            h = _mm_add_ps(h, _mm_movehl_ps(h, h));
            const float out = _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
            float *yo = y + i * ldy + r0 + r;
            *yo = accumulate ? *yo + out : out;
        }
}

/* The many-row path on thread ith of nth (its rows split in groups of NW). */
static void numla_qblock_f2_many_(const numla_qblock_weight *w, numla_qblock_f32_decode_fn dec, int64_t m,
                                  const float *x, int64_t ldx, float *y, int64_t ldy, int accumulate, float *W,
                                  int ith, int nth)
{
    enum { NW = NUMLA_QBLOCK_AVX2_MANY_NW, CHUNK = NUMLA_QBLOCK_MANY_CHUNK };
    float *S = W + NW * NUMLA_QBLOCK_AVX2_MANY_KC;
    int64_t lo, hi;
    numla_qblock_many_split_(w->n, NW, ith, nth, &lo, &hi);
    for (int64_t i0 = 0; i0 < m; i0 += CHUNK) {
        const int64_t i1 = i0 + CHUNK < m ? i0 + CHUNK : m;
        for (int64_t r = lo; r < hi; r += NW)
            numla_qblock_f2_many_rows_(w, dec, r, hi - r < NW ? (int)(hi - r) : NW, i0, i1, x, ldx, y, ldy,
                                       accumulate, W, S);
    }
}

void numla_qblock_forward_f32_avx2(const numla_qblock_weight *w, int64_t m, const float *x, int64_t ldx, float *y,
                                   int64_t ldy, int accumulate, void *ws, size_t ws_bytes)
{
    const numla_qblock_type_row *trow = numla_qblock_type_row_get(w->type);
    if (m >= NUMLA_QBLOCK_AVX2_MANY_MIN_M && numla_qblock_many_applies_(w, m) && ws) { /* F32_AVX2_ names both kernels */
        /* the avx512 path's scratch holds this one's (NW 3 <= 4 rows, sums of 32 <= 64 floats) */
        const size_t per = numla_qblock_many_thread_bytes_(m, w->k), fit = (ws_bytes - 64) / per;
        float *base = (float *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
        const numla_qblock_f32_decode_fn dec = trow->f32_avx2_decode;
        const int team = omp_get_max_threads(), nth = (size_t)team < fit ? team : (int)fit;
        if (nth <= 1 || omp_in_parallel()) {
            numla_qblock_f2_many_(w, dec, m, x, ldx, y, ldy, accumulate, base, 0, 1);
            return;
        }
#pragma omp parallel num_threads(nth)
        numla_qblock_f2_many_(w, dec, m, x, ldx, y, ldy, accumulate,
                              base + (size_t)omp_get_thread_num() * (per / sizeof(float)), omp_get_thread_num(),
                              omp_get_num_threads());
        return;
    }
    const numla_qblock_f2_job_ job = {.w = w, .m = m, .ldx = ldx, .ldy = ldy, .nb = w->k / trow->info.block, .x = x,
                                      .y = y, .accumulate = accumulate, .fn = trow->f32_avx2};
    if (omp_get_max_threads() <= 1 || omp_in_parallel()) {
        numla_qblock_f2_run_(&job, 0, 1);
        return;
    }
#pragma omp parallel
    numla_qblock_f2_run_(&job, omp_get_thread_num(), omp_get_num_threads());
}
