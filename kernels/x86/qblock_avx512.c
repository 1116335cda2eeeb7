/* kernels/x86/qblock_avx512.c — block-quantized linear layers (kernels/qblock.h) on AVX-512.
 *
 * Each thread takes a contiguous range of weight rows and streams them once per pair of x rows:
 * a block (32 or 256 elements) is decoded in registers into 16-lane fp32 vectors holding the
 * dequantized weights (scale and min applied, with one fused multiply-add where the encoding
 * subtracts a min), then multiplied into 4 accumulators per x row (vector j of the 256 decoded
 * elements goes to accumulator j mod 4); the 4 are added and reduced at the end of the row.
 * Blocks of 32 are decoded 8 at a time, so every type runs the same 16-vector step. The per-lane
 * operations do not depend on M or on the thread count, so neither changes a bit of y.
 *
 * Decoding, per 16 elements: the packed bytes are zero-extended to 16 int32 lanes (vpmovzxbd),
 * their bit fields isolated with shifts and masks (the high bits of Q5_K and Q3_K through a
 * lane mask test), converted (vcvtdq2ps; IQ4_XS instead looks its 16 code values up in a
 * register with vpermps) and scaled. The scales themselves are unpacked in scalar code, 8 or
 * 16 per 256-element block.
 *
 * Batch 1 reads the packed rows once, row after row, so a thread's rows are one stream, with a
 * software prefetch NUMLA_QBLOCK_ROW_AHEAD bytes ahead in it (the hardware prefetcher alone left
 * a cold MXFP4 GEMV at about half the rate on one core). From 4 x rows (NUMLA_QBLOCK_MANY_MIN_M) each thread
 * decodes 4 of its weight rows at a time into fp32 scratch (the same decoders, stored, per
 * NUMLA_QBLOCK_MANY_KC columns) and runs 4 x 6 register tiles over a chunk of x rows, one of the
 * GEMV's four accumulator sets a pass, with the same per-lane operations, so the outputs keep
 * their bits (numla_qblock_many_pass_). The tiles read the decoded rows and the thread's own copy
 * of the chunk's x rows (K up to NUMLA_QBLOCK_MANY_KC; longer rows are read in place), both
 * NUMLA_QBLOCK_MANY_PAD floats longer than a row: with K 2048 or 4096 the caller's x rows and
 * unpadded scratch rows all fall in one L1 set, and where the two groups met in the same set
 * (which depended on where the buffers landed) the tiles ran at two-thirds of the rate. Below
 * that, each block is decoded once per 2 x rows.
 */
#include "kernels/qblock_internal.h"

#include <immintrin.h>
#include <omp.h>
#include <pthread.h>
#include <string.h>

static inline __m512i numla_qblock_u8x16_(const uint8_t *p)
{
    return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
}

static inline float numla_qblock_h_(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* ---- decoders: one block (or 8 blocks of 32) -> v[16], the dequantized weights ---------- */

static inline void numla_qblock_dec_q8_0_(const uint8_t *b, __m512 v[16])
{
#pragma GCC unroll 8
    for (int u = 0; u < 8; u++) {
        const uint8_t *p = b + 34 * u;
        const __m512 d = _mm512_set1_ps(numla_qblock_h_(p));
        v[2 * u] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p + 2)))), d);
        v[2 * u + 1] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p + 18)))), d);
    }
}

static inline void numla_qblock_dec_q4_0_(const uint8_t *b, __m512 v[16])
{
    const __m512i m4 = _mm512_set1_epi32(15), e8 = _mm512_set1_epi32(8);
#pragma GCC unroll 8
    for (int u = 0; u < 8; u++) {
        const uint8_t *p = b + 18 * u;
        const __m512 d = _mm512_set1_ps(numla_qblock_h_(p));
        const __m512i q = numla_qblock_u8x16_(p + 2);
        v[2 * u] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(q, m4), e8)), d);
        v[2 * u + 1] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(q, 4), e8)), d);
    }
}

/* Q5_0's and Q5_1's five-bit codes of elements 0-15 (lo) and 16-31 (hi), the nibbles of qs with
 * the fifth bit of element j from bit j of the block's u32 qh at qh (a lane mask as it stands). */
static inline void numla_qblock_q5_codes_(const uint8_t *qh, const uint8_t *qs, __m512i *lo, __m512i *hi)
{
    const __m512i m4 = _mm512_set1_epi32(15), e16 = _mm512_set1_epi32(16);
    uint32_t h;
    memcpy(&h, qh, 4);
    const __m512i q = numla_qblock_u8x16_(qs);
    *lo = _mm512_mask_or_epi32(_mm512_and_si512(q, m4), (__mmask16)h, _mm512_and_si512(q, m4), e16);
    *hi = _mm512_mask_or_epi32(_mm512_srli_epi32(q, 4), (__mmask16)(h >> 16), _mm512_srli_epi32(q, 4), e16);
}

/* Q5_0: w = d · (q - 16). */
static inline void numla_qblock_dec1_q5_0_(const uint8_t *p, __m512 *v0, __m512 *v1)
{
    const __m512i e16 = _mm512_set1_epi32(16);
    const __m512 d = _mm512_set1_ps(numla_qblock_h_(p));
    __m512i lo, hi;
    numla_qblock_q5_codes_(p + 2, p + 6, &lo, &hi);
    *v0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(lo, e16)), d);
    *v1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(hi, e16)), d);
}

static inline void numla_qblock_dec_q5_0_(const uint8_t *b, __m512 v[16])
{
#pragma GCC unroll 8
    for (int u = 0; u < 8; u++)
        numla_qblock_dec1_q5_0_(b + 22 * u, &v[2 * u], &v[2 * u + 1]);
}

/* Q5_1: w = d · q + m. */
static inline void numla_qblock_dec1_q5_1_(const uint8_t *p, __m512 *v0, __m512 *v1)
{
    const __m512 d = _mm512_set1_ps(numla_qblock_h_(p)), mn = _mm512_set1_ps(numla_qblock_h_(p + 2));
    __m512i lo, hi;
    numla_qblock_q5_codes_(p + 4, p + 8, &lo, &hi);
    *v0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), d, mn);
    *v1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), d, mn);
}

static inline void numla_qblock_dec_q5_1_(const uint8_t *b, __m512 v[16])
{
#pragma GCC unroll 8
    for (int u = 0; u < 8; u++)
        numla_qblock_dec1_q5_1_(b + 24 * u, &v[2 * u], &v[2 * u + 1]);
}

/* IQ4_NL: IQ4_XS's code values (looked up in a register) times the block's d. */
static inline void numla_qblock_dec1_iq4_nl_(const uint8_t *p, __m512 *v0, __m512 *v1)
{
    const __m512 lut = _mm512_setr_ps(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
    const __m512i m4 = _mm512_set1_epi32(15);
    const __m512 d = _mm512_set1_ps(numla_qblock_h_(p));
    const __m512i q = numla_qblock_u8x16_(p + 2);
    *v0 = _mm512_mul_ps(d, _mm512_permutexvar_ps(_mm512_and_si512(q, m4), lut));
    *v1 = _mm512_mul_ps(d, _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), lut));
}

static inline void numla_qblock_dec_iq4_nl_(const uint8_t *b, __m512 v[16])
{
#pragma GCC unroll 8
    for (int u = 0; u < 8; u++)
        numla_qblock_dec1_iq4_nl_(b + 18 * u, &v[2 * u], &v[2 * u + 1]);
}

/* MXFP4: twice the e2m1 values times the E8M0 half-scale, looked up in a register that holds
 * the 16 code values already scaled. The scaled code values of every scale byte are one table
 * (256 x 16 floats, 16 KiB, of which a row's few exponents stay in L1), each row the product
 * d · kv that a multiply per block would make (the same vmulps, once), so decoding a block
 * costs a load instead of a multiply on the vector ports: the same values, so the same bits.
 * numla_qblock_forward_avx512 builds it (pthread_once) before any decoder runs. vpermps reads
 * only the low 4 bits of each index lane, so the low nibble needs no mask. */
static float numla_qblock_mxfp4_dl_[256][16] __attribute__((aligned(64)));
static pthread_once_t numla_qblock_mxfp4_once_ = PTHREAD_ONCE_INIT;

static void numla_qblock_mxfp4_init_(void)
{
    const __m512 lut = _mm512_setr_ps(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    for (int e = 0; e < 256; e++)
        _mm512_store_ps(numla_qblock_mxfp4_dl_[e],
                        _mm512_mul_ps(_mm512_castsi512_ps(_mm512_set1_epi32((int)numla_qblock_e8m0h_bits_[e])), lut));
}

static inline void numla_qblock_dec1_mxfp4_(const uint8_t *p, __m512 *v0, __m512 *v1)
{
    const __m512 dl = _mm512_load_ps(numla_qblock_mxfp4_dl_[p[0]]);
    const __m512i q = numla_qblock_u8x16_(p + 1);
    *v0 = _mm512_permutexvar_ps(q, dl);
    *v1 = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), dl);
}

static inline void numla_qblock_dec_mxfp4_(const uint8_t *b, __m512 v[16])
{
#pragma GCC unroll 8
    for (int u = 0; u < 8; u++)
        numla_qblock_dec1_mxfp4_(b + 17 * u, &v[2 * u], &v[2 * u + 1]);
}

/* Q4_K and Q5_K (qh NULL for Q4_K). */
static inline void numla_qblock_dec_k45_(const uint8_t *b, const uint8_t *qh, const uint8_t *qs, __m512 v[16])
{
    const float d = numla_qblock_h_(b), dmin = numla_qblock_h_(b + 2);
    const __m512i m4 = _mm512_set1_epi32(15), s16 = _mm512_set1_epi32(16);
    __m512i h0 = _mm512_setzero_si512(), h1 = _mm512_setzero_si512();
    if (qh) {
        h0 = numla_qblock_u8x16_(qh);
        h1 = numla_qblock_u8x16_(qh + 16);
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        const __m512i a = numla_qblock_u8x16_(qs + 32 * c), z = numla_qblock_u8x16_(qs + 32 * c + 16);
#pragma GCC unroll 2
        for (int o = 0; o < 2; o++) {
            const int j = 2 * c + o;
            uint8_t sc, m;
            numla_qblock_k4_scale_min_(b + 4, j, &sc, &m);
            const __m512 dl = _mm512_set1_ps(d * (float)sc), ml = _mm512_set1_ps(dmin * (float)m);
            __m512i q0 = o ? _mm512_srli_epi32(a, 4) : _mm512_and_si512(a, m4);
            __m512i q1 = o ? _mm512_srli_epi32(z, 4) : _mm512_and_si512(z, m4);
            if (qh) {
                const __m512i bit = _mm512_set1_epi32(1 << j);
                q0 = _mm512_mask_add_epi32(q0, _mm512_test_epi32_mask(h0, bit), q0, s16);
                q1 = _mm512_mask_add_epi32(q1, _mm512_test_epi32_mask(h1, bit), q1, s16);
            }
            v[2 * j] = _mm512_fmsub_ps(_mm512_cvtepi32_ps(q0), dl, ml);
            v[2 * j + 1] = _mm512_fmsub_ps(_mm512_cvtepi32_ps(q1), dl, ml);
        }
    }
}

static inline void numla_qblock_dec_q4_k_(const uint8_t *b, __m512 v[16])
{
    numla_qblock_dec_k45_(b, NULL, b + 16, v);
}

static inline void numla_qblock_dec_q5_k_(const uint8_t *b, __m512 v[16])
{
    numla_qblock_dec_k45_(b, b + 16, b + 48, v);
}

static inline void numla_qblock_dec_q6_k_(const uint8_t *b, __m512 v[16])
{
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    const float d = numla_qblock_h_(b + 208);
    const __m512i m4 = _mm512_set1_epi32(15), m3 = _mm512_set1_epi32(3), e32 = _mm512_set1_epi32(32);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++)
#pragma GCC unroll 2
        for (int lh = 0; lh < 2; lh++) {
            const __m512i a = numla_qblock_u8x16_(ql + 64 * h + 16 * lh);
            const __m512i c = numla_qblock_u8x16_(ql + 64 * h + 32 + 16 * lh);
            const __m512i hb = numla_qblock_u8x16_(qh + 32 * h + 16 * lh);
            const __m512i q[4] = {
                _mm512_or_si512(_mm512_and_si512(a, m4), _mm512_slli_epi32(_mm512_and_si512(hb, m3), 4)),
                _mm512_or_si512(_mm512_and_si512(c, m4), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(hb, 2), m3), 4)),
                _mm512_or_si512(_mm512_srli_epi32(a, 4), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(hb, 4), m3), 4)),
                _mm512_or_si512(_mm512_srli_epi32(c, 4), _mm512_slli_epi32(_mm512_srli_epi32(hb, 6), 4)),
            };
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++) {
                const int g = 8 * h + 2 * t + lh; /* (128h + 32t + 16lh) / 16 */
                v[g] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(q[t], e32)), _mm512_set1_ps(d * (float)sc[g]));
            }
        }
}

static inline void numla_qblock_dec_iq4_xs_(const uint8_t *b, __m512 v[16])
{
    const float d = numla_qblock_h_(b);
    const unsigned sh = (unsigned)b[2] | (unsigned)b[3] << 8;
    const uint8_t *sl = b + 4, *qs = b + 8;
    const __m512 lut = _mm512_setr_ps(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
    const __m512i m4 = _mm512_set1_epi32(15);
#pragma GCC unroll 8
    for (int ib = 0; ib < 8; ib++) {
        const int ls = ((sl[ib / 2] >> (4 * (ib % 2))) & 15) | (int)(((sh >> (2 * ib)) & 3) << 4);
        const __m512 dl = _mm512_set1_ps(d * (float)(ls - 32));
        const __m512i q = numla_qblock_u8x16_(qs + 16 * ib);
        v[2 * ib] = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_and_si512(q, m4), lut), dl);
        v[2 * ib + 1] = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), lut), dl);
    }
}

static inline void numla_qblock_dec_q2_k_(const uint8_t *b, __m512 v[16])
{
    const uint8_t *sc = b, *qs = b + 16;
    const float d = numla_qblock_h_(b + 80), dmin = numla_qblock_h_(b + 82);
    const __m512i m3 = _mm512_set1_epi32(3);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++)
#pragma GCC unroll 2
        for (int lh = 0; lh < 2; lh++) {
            const __m512i q = numla_qblock_u8x16_(qs + 32 * h + 16 * lh);
#pragma GCC unroll 4
            for (int s = 0; s < 4; s++) {
                const int g = 8 * h + 2 * s + lh;
                const __m512 dl = _mm512_set1_ps(d * (float)(sc[g] & 15)), ml = _mm512_set1_ps(dmin * (float)(sc[g] >> 4));
                v[g] = _mm512_fmsub_ps(_mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(q, 2 * s), m3)), dl, ml);
            }
        }
}

static inline void numla_qblock_dec_q3_k_(const uint8_t *b, __m512 v[16])
{
    const uint8_t *hm = b, *qs = b + 32, *sc = b + 96;
    const float d = numla_qblock_h_(b + 108);
    const __m512i m3 = _mm512_set1_epi32(3), f4 = _mm512_set1_epi32(4);
#pragma GCC unroll 2
    for (int lh = 0; lh < 2; lh++) {
        const __m512i hb = numla_qblock_u8x16_(hm + 16 * lh);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m512i q = numla_qblock_u8x16_(qs + 32 * h + 16 * lh);
#pragma GCC unroll 4
            for (int s = 0; s < 4; s++) {
                const int g = 8 * h + 2 * s + lh;
                const __mmask16 set = _mm512_test_epi32_mask(hb, _mm512_set1_epi32(1 << (4 * h + s)));
                __m512i x = _mm512_and_si512(_mm512_srli_epi32(q, 2 * s), m3);
                x = _mm512_mask_sub_epi32(x, _knot_mask16(set), x, f4);
                v[g] = _mm512_mul_ps(_mm512_cvtepi32_ps(x), _mm512_set1_ps(d * (float)numla_qblock_q3k_scale_(sc, g)));
            }
        }
    }
}

/* ---- the driver: rows [r0, r1) of y for all m x rows ------------------------------------ */

/* One step covers 256 elements: `bytes` of packed row (8 blocks of 32 or one of 256). The pass
 * over one row is compiled twice, for one and for two x rows (TWO a constant after inlining), so
 * the one-row loop keeps its decoded vectors and accumulators in registers; both run the same
 * per-lane operations. */
#define NUMLA_QBLOCK_ROWS(NAME, STEP_BYTES)                                                                    \
    static inline __attribute__((always_inline)) void numla_qblock_pass_##NAME##_(                           \
        const numla_qblock_weight *w, const uint8_t *row, int64_t steps, const float *x0, const float *x1,   \
        const int two, const uint8_t *end, float *v0, float *v1)                                             \
    {                                                                                                        \
        __m512 a[4], c[4];                                                                                   \
        for (int t = 0; t < 4; t++)                                                                          \
            a[t] = c[t] = _mm512_setzero_ps();                                                               \
        for (int64_t s = 0; s < steps; s++) {                                                                \
            __m512 v[16];                                                                                    \
            for (int o = 0; o < (STEP_BYTES); o += 64) {                                                     \
                const uint8_t *pf = row + s * (STEP_BYTES) + o + NUMLA_QBLOCK_ROW_AHEAD;                     \
                if (pf < end)                                                                                \
                    _mm_prefetch((const char *)pf, _MM_HINT_T0);                                             \
            }                                                                                                \
            numla_qblock_dec_##NAME##_(row + s * (STEP_BYTES), v);                                           \
            const float *p0 = x0 + 256 * s, *p1 = x1 + 256 * s;                                              \
            _Pragma("GCC unroll 16") for (int j = 0; j < 16; j++)                                            \
            {                                                                                                \
                a[j & 3] = _mm512_fmadd_ps(v[j], _mm512_loadu_ps(p0 + 16 * j), a[j & 3]);                    \
                if (two)                                                                                     \
                    c[j & 3] = _mm512_fmadd_ps(v[j], _mm512_loadu_ps(p1 + 16 * j), c[j & 3]);                \
            }                                                                                                \
        }                                                                                                    \
        numla_qblock_tail_##NAME##_(w, row, steps, x0, x1, two, a, c);                                       \
        *v0 = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));     \
        if (two)                                                                                             \
            *v1 = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(c[0], c[1]), _mm512_add_ps(c[2], c[3]))); \
    }                                                                                                        \
    void numla_qblock_f32_rows_##NAME##_avx512(const numla_qblock_weight *w, int64_t r0, int64_t r1, int64_t m, \
                                               const float *x, int64_t ldx, float *y, int64_t ldy, int accumulate) \
    {                                                                                                        \
        const int64_t steps = w->k / 256;                                                                    \
        const uint8_t *end = w->q + r1 * w->ld; /* the thread's rows: one stream */                         \
        for (int64_t r = r0; r < r1; r++) {                                                                  \
            const uint8_t *row = w->q + r * w->ld;                                                           \
            for (int64_t i0 = 0; i0 < m; i0 += NUMLA_QBLOCK_MR) {                                            \
                const int two = i0 + 1 < m;                                                                  \
                const float *x0 = x + i0 * ldx;                                                              \
                float v0 = 0, v1 = 0;                                                                        \
                if (two)                                                                                     \
                    numla_qblock_pass_##NAME##_(w, row, steps, x0, x0 + ldx, 1, end, &v0, &v1);              \
                else                                                                                         \
                    numla_qblock_pass_##NAME##_(w, row, steps, x0, x0, 0, end, &v0, &v1);                    \
                float *y0 = y + i0 * ldy + r;                                                                \
                *y0 = accumulate ? *y0 + v0 : v0;                                                            \
                if (two) {                                                                                   \
                    float *y1 = y0 + ldy;                                                                    \
                    *y1 = accumulate ? *y1 + v1 : v1;                                                        \
                }                                                                                            \
            }                                                                                                \
        }                                                                                                    \
    }

/* 256-element blocks: K is a multiple of 256, nothing is left over. */
#define NUMLA_QBLOCK_NO_TAIL(NAME)                                                                          \
    static inline void numla_qblock_tail_##NAME##_(const numla_qblock_weight *w, const uint8_t *row,       \
                                                   int64_t steps, const float *x0, const float *x1, int two, \
                                                   __m512 a[4], __m512 c[4])                                \
    {                                                                                                       \
        (void)w, (void)row, (void)steps, (void)x0, (void)x1, (void)two, (void)a, (void)c;                   \
    }

/* 32-element blocks: the K mod 256 left after the 8-block steps, one block (two vectors, which
 * continue the j mod 4 pattern at j = 0, 1, 2, 3, ...) at a time. */
#define NUMLA_QBLOCK_TAIL32(NAME, BYTES, DEC1)                                                              \
    static inline void numla_qblock_tail_##NAME##_(const numla_qblock_weight *w, const uint8_t *row,       \
                                                   int64_t steps, const float *x0, const float *x1, int two, \
                                                   __m512 a[4], __m512 c[4])                                \
    {                                                                                                       \
        const int64_t nb = w->k / 32;                                                                       \
        for (int64_t b = steps * 8; b < nb; b++) {                                                          \
            __m512 v0, v1;                                                                                  \
            DEC1(row + b * (BYTES), &v0, &v1);                                                              \
            const int j = (int)(2 * (b - steps * 8)) & 3;                                                   \
            a[j] = _mm512_fmadd_ps(v0, _mm512_loadu_ps(x0 + 32 * b), a[j]);                                 \
            a[j + 1] = _mm512_fmadd_ps(v1, _mm512_loadu_ps(x0 + 32 * b + 16), a[j + 1]);                    \
            if (two) {                                                                                      \
                c[j] = _mm512_fmadd_ps(v0, _mm512_loadu_ps(x1 + 32 * b), c[j]);                             \
                c[j + 1] = _mm512_fmadd_ps(v1, _mm512_loadu_ps(x1 + 32 * b + 16), c[j + 1]);                \
            }                                                                                               \
        }                                                                                                   \
    }

static inline void numla_qblock_dec1_q8_0_(const uint8_t *p, __m512 *v0, __m512 *v1)
{
    const __m512 d = _mm512_set1_ps(numla_qblock_h_(p));
    *v0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p + 2)))), d);
    *v1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p + 18)))), d);
}

static inline void numla_qblock_dec1_q4_0_(const uint8_t *p, __m512 *v0, __m512 *v1)
{
    const __m512i m4 = _mm512_set1_epi32(15), e8 = _mm512_set1_epi32(8);
    const __m512 d = _mm512_set1_ps(numla_qblock_h_(p));
    const __m512i q = numla_qblock_u8x16_(p + 2);
    *v0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(q, m4), e8)), d);
    *v1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(q, 4), e8)), d);
}

NUMLA_QBLOCK_TAIL32(q8_0, 34, numla_qblock_dec1_q8_0_)
NUMLA_QBLOCK_TAIL32(q4_0, 18, numla_qblock_dec1_q4_0_)
NUMLA_QBLOCK_TAIL32(q5_0, 22, numla_qblock_dec1_q5_0_)
NUMLA_QBLOCK_TAIL32(iq4_nl, 18, numla_qblock_dec1_iq4_nl_)
NUMLA_QBLOCK_TAIL32(q5_1, 24, numla_qblock_dec1_q5_1_)
NUMLA_QBLOCK_TAIL32(mxfp4, 17, numla_qblock_dec1_mxfp4_)
NUMLA_QBLOCK_NO_TAIL(q4_k)
NUMLA_QBLOCK_NO_TAIL(q5_k)
NUMLA_QBLOCK_NO_TAIL(q6_k)
NUMLA_QBLOCK_NO_TAIL(iq4_xs)
NUMLA_QBLOCK_NO_TAIL(q2_k)
NUMLA_QBLOCK_NO_TAIL(q3_k)

NUMLA_QBLOCK_ROWS(q8_0, 8 * 34)
NUMLA_QBLOCK_ROWS(q4_0, 8 * 18)
NUMLA_QBLOCK_ROWS(q4_k, 144)
NUMLA_QBLOCK_ROWS(q5_k, 176)
NUMLA_QBLOCK_ROWS(q6_k, 210)
NUMLA_QBLOCK_ROWS(iq4_xs, 136)
NUMLA_QBLOCK_ROWS(q2_k, 84)
NUMLA_QBLOCK_ROWS(q3_k, 110)
NUMLA_QBLOCK_ROWS(q5_0, 8 * 22)
NUMLA_QBLOCK_ROWS(iq4_nl, 8 * 18)
NUMLA_QBLOCK_ROWS(q5_1, 8 * 24)
NUMLA_QBLOCK_ROWS(mxfp4, 8 * 17)

/* ---- the many-row path (F32 mode, M >= NUMLA_QBLOCK_MANY_MIN_M) --------------------------- */

/* Columns [k0, k1) of one packed row -> k1 - k0 floats at dst (k0 a multiple of 256, k1 one
 * of 256 or K): the same decoders, stored (the values the GEMV keeps in registers). */
#define NUMLA_QBLOCK_DECODE_ROW(NAME, STEP_BYTES)                                                   \
    void numla_qblock_f32_decode_##NAME##_avx512(const numla_qblock_weight *w, const uint8_t *row, \
                                                  int64_t k0, int64_t k1, float *dst)               \
    {                                                                                               \
        (void)w;                                                                                    \
        const int64_t s0 = k0 / 256, s1 = k1 / 256;                                                 \
        for (int64_t s = s0; s < s1; s++) {                                                         \
            __m512 v[16];                                                                           \
            numla_qblock_dec_##NAME##_(row + s * (STEP_BYTES), v);                                  \
            _Pragma("GCC unroll 16") for (int j = 0; j < 16; j++)                                   \
                _mm512_storeu_ps(dst + 256 * (s - s0) + 16 * j, v[j]);                              \
        }                                                                                           \
        numla_qblock_dectail_##NAME##_(row, s1 * 8, k1 / 32, dst + 256 * (s1 - s0));                \
    }

/* The 32-element blocks [b0, b1) of a row past its last whole 256-column step -> dst. */
#define NUMLA_QBLOCK_NO_DECTAIL(NAME)                                                               \
    static inline void numla_qblock_dectail_##NAME##_(const uint8_t *row, int64_t b0, int64_t b1,    \
                                                      float *dst)                                   \
    {                                                                                               \
        (void)row, (void)b0, (void)b1, (void)dst;                                                   \
    }

#define NUMLA_QBLOCK_DECTAIL32(NAME, BYTES, DEC1)                                                   \
    static inline void numla_qblock_dectail_##NAME##_(const uint8_t *row, int64_t b0, int64_t b1,    \
                                                      float *dst)                                   \
    {                                                                                               \
        for (int64_t b = b0; b < b1; b++) {                                                         \
            __m512 v0, v1;                                                                          \
            DEC1(row + b * (BYTES), &v0, &v1);                                                      \
            _mm512_storeu_ps(dst + 32 * (b - b0), v0);                                              \
            _mm512_storeu_ps(dst + 32 * (b - b0) + 16, v1);                                         \
        }                                                                                           \
    }

NUMLA_QBLOCK_DECTAIL32(q8_0, 34, numla_qblock_dec1_q8_0_)
NUMLA_QBLOCK_DECTAIL32(q4_0, 18, numla_qblock_dec1_q4_0_)
NUMLA_QBLOCK_DECTAIL32(q5_0, 22, numla_qblock_dec1_q5_0_)
NUMLA_QBLOCK_DECTAIL32(iq4_nl, 18, numla_qblock_dec1_iq4_nl_)
NUMLA_QBLOCK_DECTAIL32(q5_1, 24, numla_qblock_dec1_q5_1_)
NUMLA_QBLOCK_DECTAIL32(mxfp4, 17, numla_qblock_dec1_mxfp4_)
NUMLA_QBLOCK_NO_DECTAIL(q4_k)
NUMLA_QBLOCK_NO_DECTAIL(q5_k)
NUMLA_QBLOCK_NO_DECTAIL(q6_k)
NUMLA_QBLOCK_NO_DECTAIL(iq4_xs)
NUMLA_QBLOCK_NO_DECTAIL(q2_k)
NUMLA_QBLOCK_NO_DECTAIL(q3_k)

NUMLA_QBLOCK_DECODE_ROW(q8_0, 8 * 34)
NUMLA_QBLOCK_DECODE_ROW(q4_0, 8 * 18)
NUMLA_QBLOCK_DECODE_ROW(q4_k, 144)
NUMLA_QBLOCK_DECODE_ROW(q5_k, 176)
NUMLA_QBLOCK_DECODE_ROW(q6_k, 210)
NUMLA_QBLOCK_DECODE_ROW(iq4_xs, 136)
NUMLA_QBLOCK_DECODE_ROW(q2_k, 84)
NUMLA_QBLOCK_DECODE_ROW(q3_k, 110)
NUMLA_QBLOCK_DECODE_ROW(q5_0, 8 * 22)
NUMLA_QBLOCK_DECODE_ROW(iq4_nl, 8 * 18)
NUMLA_QBLOCK_DECODE_ROW(q5_1, 8 * 24)
NUMLA_QBLOCK_DECODE_ROW(mxfp4, 8 * 17)

/* The GEMV's arithmetic (numla_qblock_f32_rows_*): per output, 16-float vector v of the row goes
 * to accumulator set v mod 4 (a chain over those v in ascending order), and the output is
 * reduce((s0 + s1) + (s2 + s3)). The sets are independent chains, so the many-row path runs
 * them one at a time: a pass over a block of columns takes set u for every (weight row, x row)
 * pair of a tile, one accumulator each, so a tile of NW weight rows x MR x rows loads NW + MR
 * vectors per NW · MR FMAs (the sets side by side would allow 2 x 3 pairs and 5 loads per 6
 * FMAs), and the sets' sums are stored and reloaded exactly between passes and column blocks.
 * S holds a tile's sums: (mr, NW, 4 sets, 16 lanes). */
static inline __attribute__((always_inline)) void numla_qblock_many_pass_(const float *W, int64_t v0, int64_t v1,
                                                                          const float *x, int64_t ldx,
                                                                          const int mr, float *S, int first)
{
    enum { NW = NUMLA_QBLOCK_MANY_NW, MR = NUMLA_QBLOCK_MANY_MR, LDW = NUMLA_QBLOCK_MANY_KC + NUMLA_QBLOCK_MANY_PAD };
    for (int u = 0; u < 4; u++) {
        __m512 a[MR][NW];
        for (int i = 0; i < mr; i++)
            for (int r = 0; r < NW; r++)
                a[i][r] = first ? _mm512_setzero_ps() : _mm512_load_ps(S + ((i * NW + r) * 4 + u) * 16);
        for (int64_t v = v0 + u; v < v1; v += 4) {
            const int64_t c = 16 * (v - v0);
            __m512 wv[NW];
            for (int r = 0; r < NW; r++)
                wv[r] = _mm512_load_ps(W + r * LDW + c);
            for (int i = 0; i < mr; i++) {
                const __m512 xv = _mm512_loadu_ps(x + i * ldx + c);
                for (int r = 0; r < NW; r++)
                    a[i][r] = _mm512_fmadd_ps(wv[r], xv, a[i][r]);
            }
        }
        for (int i = 0; i < mr; i++)
            for (int r = 0; r < NW; r++)
                _mm512_store_ps(S + ((i * NW + r) * 4 + u) * 16, a[i][r]);
    }
}

/* Weight rows [r0, r0 + nw) (nw <= NW) for x rows [i0, i1) (i1 - i0 <= NUMLA_QBLOCK_MANY_CHUNK),
 * which X holds from its row 0, ldc floats apart (the thread's copy, or x itself past
 * numla_qblock_many_copies_x_): per KC columns the nw rows are
 * decoded into W (rows KC + PAD floats apart; rows past nw are zero and never stored), then
 * every tile of up to MR x rows runs its passes; after the last block each pair's sets are
 * reduced as the GEMV reduces them. */
static void numla_qblock_many_rows_(const numla_qblock_weight *w, numla_qblock_f32_decode_fn dec, int64_t r0,
                                    int nw, int64_t i0, int64_t i1, const float *X, int64_t ldc, float *y,
                                    int64_t ldy, int accumulate, float *W, float *S)
{
    enum { NW = NUMLA_QBLOCK_MANY_NW, MR = NUMLA_QBLOCK_MANY_MR, KC = NUMLA_QBLOCK_MANY_KC,
           LDW = NUMLA_QBLOCK_MANY_KC + NUMLA_QBLOCK_MANY_PAD };
    for (int64_t k0 = 0; k0 < w->k; k0 += KC) {
        const int64_t kc = w->k - k0 < KC ? w->k - k0 : KC;
        numla_qblock_many_decode_(w, dec, r0, nw, NW, k0, kc, LDW, W);
        const int64_t v0 = k0 / 16, v1 = (k0 + kc) / 16; /* KC is a multiple of 64: v0 of 4 */
        const int first = k0 == 0;
        for (int64_t i = i0; i < i1; i += MR) {
            const int mr = i1 - i >= MR ? MR : (int)(i1 - i);
            const float *xi = X + (i - i0) * ldc + k0;
            float *Si = S + (i - i0) * NW * 64;
            switch (mr) {
            case 6: numla_qblock_many_pass_(W, v0, v1, xi, ldc, 6, Si, first); break;
            case 5: numla_qblock_many_pass_(W, v0, v1, xi, ldc, 5, Si, first); break;
            case 4: numla_qblock_many_pass_(W, v0, v1, xi, ldc, 4, Si, first); break;
            case 3: numla_qblock_many_pass_(W, v0, v1, xi, ldc, 3, Si, first); break;
            case 2: numla_qblock_many_pass_(W, v0, v1, xi, ldc, 2, Si, first); break;
            default: numla_qblock_many_pass_(W, v0, v1, xi, ldc, 1, Si, first); break;
            }
        }
    }
    for (int64_t i = i0; i < i1; i++)
        for (int r = 0; r < nw; r++) {
            const float *s = S + ((i - i0) * NW + r) * 64;
            const float out = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(_mm512_load_ps(s), _mm512_load_ps(s + 16)),
                                                                 _mm512_add_ps(_mm512_load_ps(s + 32), _mm512_load_ps(s + 48))));
            float *yo = y + i * ldy + r0 + r;
            *yo = accumulate ? *yo + out : out;
        }
}

void numla_qblock_forward_avx512(const numla_qblock_weight *w, int64_t m, const float *x, int64_t ldx,
                                 float *y, int64_t ldy, int accumulate, void *ws, size_t ws_bytes)
{
    const numla_qblock_type_row *row = numla_qblock_type_row_get(w->type);
    if (w->type == NUMLA_QBLOCK_MXFP4)
        pthread_once(&numla_qblock_mxfp4_once_, numla_qblock_mxfp4_init_);
    if (numla_qblock_many_applies_(w, m) && ws) {
        enum { NW = NUMLA_QBLOCK_MANY_NW, CHUNK = NUMLA_QBLOCK_MANY_CHUNK };
        const size_t per = numla_qblock_many_thread_bytes_(m, w->k), fit = (ws_bytes - 64) / per;
        const int team = omp_get_max_threads(), nth = (size_t)team < fit ? team : (int)fit;
        float *base = (float *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
        const numla_qblock_f32_decode_fn dec = row->f32_decode;
        const int copy = numla_qblock_many_copies_x_(w->k);
        const int64_t rows = m < CHUNK ? m : CHUNK, ldc = copy ? w->k + NUMLA_QBLOCK_MANY_PAD : ldx;
#pragma omp parallel num_threads(nth)
        {
            const int t = omp_get_thread_num();
            int64_t lo, hi;
            numla_qblock_many_split_(w->n, NW, t, omp_get_num_threads(), &lo, &hi);
            float *W = base + (size_t)t * (per / sizeof(float)),
                  *S = W + NW * (NUMLA_QBLOCK_MANY_KC + NUMLA_QBLOCK_MANY_PAD), *X = copy ? S + rows * NW * 64 : NULL;
            for (int64_t i0 = 0; i0 < m && lo < hi; i0 += CHUNK) {
                const int64_t i1 = i0 + CHUNK < m ? i0 + CHUNK : m;
                if (copy)
                    numla_qblock_many_copy_x_(x, ldx, i0, i1, w->k, X);
                const float *xc = copy ? X : x + i0 * ldx;
                for (int64_t r = lo; r < hi; r += NW)
                    numla_qblock_many_rows_(w, dec, r, hi - r < NW ? (int)(hi - r) : NW, i0, i1, xc, ldc, y, ldy,
                                            accumulate, W, S);
            }
        }
        return;
    }
    const numla_qblock_f32_rows_fn fn = row->f32_rows;
#pragma omp parallel
    {
        int64_t lo, hi;
        numla_qblock_split_(w->n, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
        fn(w, lo, hi, m, x, ldx, y, ldy, accumulate);
    }
}
