/* kernels/x86/qlinear_avx2.c — fp8-block, int8-row and W8A8 linear layers on AVX2 + FMA + F16C
 * (AMD Zen 2/3, Intel Haswell to Ice Lake client parts: the machines without AVX-512).
 *
 * fp8 and int8-row, few rows: each thread streams its rows of 1-byte weights once, widens them to
 * fp32 in registers and multiplies tiles of NUMLA_QLINEAR_AVX2_NW weight rows by
 * NUMLA_QLINEAR_AVX2_MR rows of x. Every output has one 8-lane accumulator per chain (lane =
 * k mod 8, columns in ascending order, one fused multiply-add per 8 columns, x masked past K):
 *   fp8: one chain per 128-wide block, added into an 8-lane total with one fused multiply-add by
 *        its block scale, blocks in order; the total's lanes reduced in a fixed order
 *        (numla_qlinear_avx2_hsum_);
 *   int8-row: one chain over all of K, reduced, times the row scale.
 * The tile shape only decides which outputs run side by side, so a row's bits depend neither on
 * M nor on the thread count. At M = 1 fp8 runs one weight row at a time (each thread's weights
 * one sequential stream) with NUMLA_QLINEAR_AVX2_BLOCKS blocks' chains interleaved, int8-row
 * NUMLA_QLINEAR_AVX2_GEMV_NW rows at once; both with a software prefetch ahead in the stream and
 * the tiles' arithmetic per output. int8-row from NUMLA_QLINEAR_GEMM_MIN_M rows runs the same
 * tiles over blocks of x rows kept in L2 (NUMLA_QLINEAR_GEMM_XBYTES), as the avx512 variant does.
 *
 * fp8 from NUMLA_QLINEAR_PANEL_MIN_M rows (numla_qlinear_gemm_avx2): a panel GEMM. Each thread
 * dequantizes KC x NC blocks of its weight rows once per call into fp32 panels of 16 columns,
 * k-major (element = fp32(e4m3 · block scale), one rounding of an exact product), and runs a
 * 6 x 16 register-blocked FMA micro-kernel over all M rows (each 6 rows of x packed k-major). Each
 * output is a sequential fp32 sum over k, inside the bound of kernels/qlinear.h, in another
 * order than the few-row tiles: as at avx512, fp8 rows may differ in the last bits between M
 * below and from 13 rows.
 *
 * W8A8: x quantized per row by the rule of kernels/qlinear.h (bit for bit the reference) into the
 * workspace as s8 q (padding 0). vpmaddubsw multiplies u8 by s8 and adds pairs into int16 with
 * saturation, so it takes |w| (u8, at most 128 for w = -128) times q with w's sign
 * (vpsignb: |q| <= 127): a pair sums to at most 2 · 128 · 127 = 32512 and never saturates;
 * vpmaddwd by ones adds pairs into int32. The integer sums are exact in any order, and the
 * output is the contract's (float)acc · sx · s rounded before the add: the same bits as every
 * level, whatever M.
 *
 * e4m3 -> fp32 without a table, as kernels/x86/qlinear_avx512.c: the byte sign-extended to 16
 * bits and shifted left by 7 is an fp16 with the same mantissa and the exponent field read with
 * bias 15 instead of 7 (subnormals included, which vcvtph2ps converts exactly, DAZ or not),
 * once bit 14 (the sign's copy) is cleared: the weight · 2^-8. The 2^8 goes into the block
 * scale (exact: a power of two). A NaN encoding (never in a loaded weight) reads as 480. */
#include "kernels/qlinear_internal.h"

#include <immintrin.h>
#include <math.h>
#include <omp.h>

#define NW NUMLA_QLINEAR_AVX2_NW
#define MR NUMLA_QLINEAR_AVX2_MR

/* The 8 lanes' sum, in one fixed order: (l0+l4) + (l2+l6) + ((l1+l5) + (l3+l7)). */
static inline float numla_qlinear_avx2_hsum_(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Lanes c .. c + 8 below k1, as a maskload mask. */
static inline __m256i numla_qlinear_avx2_mask_(int64_t left)
{
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(left < 8 ? left : 8)), iota);
}

/* 16 e4m3 bytes -> two vectors of 8 floats, each 2^-8 times the weight. */
static inline __attribute__((always_inline)) void numla_qlinear_avx2_fp8x16_(const int8_t *p, __m256 *w0, __m256 *w1)
{
    __m256i h = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)p));
    h = _mm256_and_si256(_mm256_slli_epi16(h, 7), _mm256_set1_epi16((short)0xBFFF));
    *w0 = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
    *w1 = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
}

/* 8 weights -> 8 floats (fp8: 2^-8 times the weight). */
static inline __attribute__((always_inline)) __m256 numla_qlinear_avx2_w8_(const int8_t *p, const int fp8)
{
    const __m128i b = _mm_loadl_epi64((const __m128i *)(const void *)p);
    if (fp8) {
        __m128i h = _mm_cvtepi8_epi16(b);
        h = _mm_and_si128(_mm_slli_epi16(h, 7), _mm_set1_epi16((short)0xBFFF));
        return _mm256_cvtph_ps(h);
    }
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
}

/* 16 weights -> two vectors of 8 floats. */
static inline __attribute__((always_inline)) void numla_qlinear_avx2_w16_(const int8_t *p, const int fp8, __m256 *w0,
                                                                          __m256 *w1)
{
    if (fp8) {
        numla_qlinear_avx2_fp8x16_(p, w0, w1);
    } else { /* two 8-byte loads widened from memory: cheaper than one load and a shift */
        *w0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p)));
        *w1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(p + 8))));
    }
}

/* out[j][i] = row r + j of W · x row i, for j < nw, i < mr (compile-time constants after
 * inlining). fp8: each 128-wide block's chain, times its scale into the total; int8: one chain,
 * reduced, times the row scale. pf: the span to prefetch, one tile ahead (NULL: none). */
static inline __attribute__((always_inline)) void
numla_qlinear_avx2_tile_(const numla_qlinear_weight *w, int64_t r, const float *x, int64_t ldx, const int nw,
                         const int mr, const int fp8, float out[NUMLA_QLINEAR_AVX2_GEMV_NW][MR], const int8_t *pf)
{
    const int64_t k = w->k, B = fp8 ? NUMLA_QLINEAR_BLOCK : w->kp;
    const int8_t *wr[NUMLA_QLINEAR_AVX2_GEMV_NW];
    const float *s[NUMLA_QLINEAR_AVX2_GEMV_NW];
    __m256 tot[NUMLA_QLINEAR_AVX2_GEMV_NW][MR];
    #pragma GCC unroll 8
    for (int j = 0; j < nw; j++) {
        wr[j] = w->q + (r + j) * w->kp;
        s[j] = fp8 ? w->scales + numla_qlinear_grid_row(w, r + j) * w->scale_cols : NULL;
        #pragma GCC unroll 8
        for (int i = 0; i < mr; i++)
            tot[j][i] = _mm256_setzero_ps();
    }
    for (int64_t k0 = 0; k0 < k; k0 += B) {
        const int64_t k1 = k0 + B < k ? k0 + B : k;
        __m256 a[NUMLA_QLINEAR_AVX2_GEMV_NW][MR];
        #pragma GCC unroll 8
        for (int j = 0; j < nw; j++)
            #pragma GCC unroll 8
            for (int i = 0; i < mr; i++)
                a[j][i] = _mm256_setzero_ps();
        int64_t c = k0;
        for (; c + 64 <= k1; c += 64) {
            #pragma GCC unroll 8
            for (int j = 0; j < nw && pf; j++)
                _mm_prefetch((const char *)(pf + j * w->kp + c), _MM_HINT_T0);
            for (int h = 0; h < 64; h += 16) {
                __m256 w0[NUMLA_QLINEAR_AVX2_GEMV_NW], w1[NUMLA_QLINEAR_AVX2_GEMV_NW];
                #pragma GCC unroll 8
                for (int j = 0; j < nw; j++)
                    numla_qlinear_avx2_w16_(wr[j] + c + h, fp8, &w0[j], &w1[j]);
                #pragma GCC unroll 8
                for (int i = 0; i < mr; i++) {
                    const __m256 x0 = _mm256_loadu_ps(x + i * ldx + c + h);
                    #pragma GCC unroll 8
                    for (int j = 0; j < nw; j++)
                        a[j][i] = _mm256_fmadd_ps(w0[j], x0, a[j][i]);
                    const __m256 x1 = _mm256_loadu_ps(x + i * ldx + c + h + 8);
                    #pragma GCC unroll 8
                    for (int j = 0; j < nw; j++)
                        a[j][i] = _mm256_fmadd_ps(w1[j], x1, a[j][i]);
                }
            }
        }
        /* 8 at a time; the packed rows are zero-padded to a multiple of 64 bytes, so only x
         * needs the mask at the end */
        for (; c < k1; c += 8) {
            const __m256i msk = numla_qlinear_avx2_mask_(k1 - c);
            __m256 xv[MR];
            #pragma GCC unroll 8
            for (int i = 0; i < mr; i++)
                xv[i] = _mm256_maskload_ps(x + i * ldx + c, msk);
            #pragma GCC unroll 8
            for (int j = 0; j < nw; j++) {
                const __m256 wv = numla_qlinear_avx2_w8_(wr[j] + c, fp8);
                #pragma GCC unroll 8
                for (int i = 0; i < mr; i++)
                    a[j][i] = _mm256_fmadd_ps(wv, xv[i], a[j][i]);
            }
        }
        #pragma GCC unroll 8
        for (int j = 0; j < nw; j++)
            #pragma GCC unroll 8
            for (int i = 0; i < mr; i++)
                tot[j][i] = fp8 ? _mm256_fmadd_ps(a[j][i], _mm256_set1_ps(s[j][k0 / NUMLA_QLINEAR_BLOCK] * 256.0f), tot[j][i])
                                : a[j][i];
    }
    #pragma GCC unroll 8
    for (int j = 0; j < nw; j++)
        #pragma GCC unroll 8
        for (int i = 0; i < mr; i++)
            out[j][i] = fp8 ? numla_qlinear_avx2_hsum_(tot[j][i]) : numla_qlinear_avx2_hsum_(tot[j][i]) * w->scales[r + j];
}

/* One tile of nw weight rows by mr x rows, any nw <= GEMV_NW, mr <= MR (fp8 or not). */
static void numla_qlinear_avx2_tile_any_(const numla_qlinear_weight *w, int64_t r, const float *x, int64_t ldx,
                                         int nw, int mr, int fp8, float out[NUMLA_QLINEAR_AVX2_GEMV_NW][MR],
                                         const int8_t *pf)
{
    switch ((fp8 ? 64 : 0) + nw * 8 + mr) {
#define NUMLA_QLINEAR_AVX2_CASE(F, NWC, MRC)                                                       \
    case (F ? 64 : 0) + NWC * 8 + MRC:                                                             \
        numla_qlinear_avx2_tile_(w, r, x, ldx, NWC, MRC, F, out, pf);                              \
        break;
#define NUMLA_QLINEAR_AVX2_CASES(F)                                                                \
    NUMLA_QLINEAR_AVX2_CASE(F, 1, 1)                                                               \
    NUMLA_QLINEAR_AVX2_CASE(F, 1, 2)                                                               \
    NUMLA_QLINEAR_AVX2_CASE(F, 1, 3)                                                               \
    NUMLA_QLINEAR_AVX2_CASE(F, 1, 4)                                                               \
    NUMLA_QLINEAR_AVX2_CASE(F, 2, 1)                                                               \
    NUMLA_QLINEAR_AVX2_CASE(F, 2, 2)                                                               \
    NUMLA_QLINEAR_AVX2_CASE(F, 2, 3)                                                               \
    NUMLA_QLINEAR_AVX2_CASE(F, 2, 4)                                                               \
    NUMLA_QLINEAR_AVX2_CASE(F, 4, 1)
        NUMLA_QLINEAR_AVX2_CASES(1)
        NUMLA_QLINEAR_AVX2_CASES(0)
#undef NUMLA_QLINEAR_AVX2_CASES
#undef NUMLA_QLINEAR_AVX2_CASE
    default:
        break;
    }
}

_Static_assert(NW == 2 && MR == 4 && NUMLA_QLINEAR_AVX2_GEMV_NW == 4, "the tile switch's cases");

/* Rows [r0, r1) of y for x rows [i0, i1): NW x MR tiles (a last weight row and the x rows'
 * tail in smaller ones). */
static void numla_qlinear_avx2_rows_(const numla_qlinear_weight *w, const float *x, int64_t ldx, float *y,
                                     int64_t ldy, int accumulate, int64_t r0, int64_t r1, int64_t i0, int64_t i1,
                                     int fp8)
{
    float out[NUMLA_QLINEAR_AVX2_GEMV_NW][MR] = {{0}};
    for (int64_t r = r0, nw; r < r1; r += nw) {
        nw = r1 - r >= NW ? NW : 1;
        for (int64_t i = i0, mr; i < i1; i += mr) {
            mr = i1 - i >= MR ? MR : i1 - i;
            numla_qlinear_avx2_tile_any_(w, r, x + i * ldx, ldx, (int)nw, (int)mr, fp8, out, NULL);
            #pragma GCC unroll 8
            for (int j = 0; j < nw; j++)
                for (int t = 0; t < mr; t++) {
                    float *yo = y + (i + t) * ldy + r + j;
                    *yo = accumulate ? *yo + out[j][t] : out[j][t];
                }
        }
    }
}

/* int8-row at M = 1: GEMV_NW rows at a time, each prefetching the next group's line. */
static void numla_qlinear_avx2_row_gemv_(const numla_qlinear_weight *w, const float *x, float *y, int accumulate,
                                         int64_t r0, int64_t r1)
{
    float out[NUMLA_QLINEAR_AVX2_GEMV_NW][MR] = {{0}};
    for (int64_t r = r0, nw; r < r1; r += nw) {
        nw = r1 - r >= NUMLA_QLINEAR_AVX2_GEMV_NW ? NUMLA_QLINEAR_AVX2_GEMV_NW : 1;
        const int8_t *pf = r + 2 * nw <= r1 ? w->q + (r + nw) * w->kp : NULL;
        numla_qlinear_avx2_tile_any_(w, r, x, 0, (int)nw, 1, 0, out, pf);
        #pragma GCC unroll 8
        for (int j = 0; j < nw; j++)
            y[r + j] = accumulate ? y[r + j] + out[j][0] : out[j][0];
    }
}

/* fp8 at M = 1: one weight row, NB of its full blocks interleaved (compile-time NB), each
 * block's chain and the order of the scaled sums those of numla_qlinear_avx2_tile_; prefetch
 * AHEAD bytes ahead in the stream, below end. */
static inline __attribute__((always_inline)) __m256
numla_qlinear_avx2_fp8_blocks_(const int8_t *wr, const float *x, const float *s, int64_t b, const int nb,
                               __m256 tot, const int8_t *end)
{
    const int64_t B = NUMLA_QLINEAR_BLOCK;
    __m256 a[NUMLA_QLINEAR_AVX2_BLOCKS];
    #pragma GCC unroll 8
    for (int j = 0; j < nb; j++)
        a[j] = _mm256_setzero_ps();
    for (int64_t c = 0; c < B; c += 64) {
        #pragma GCC unroll 8
        for (int j = 0; j < nb; j++) {
            const int8_t *pf = wr + (b + j) * B + c + NUMLA_QLINEAR_AVX2_AHEAD;
            if (pf < end)
                _mm_prefetch((const char *)pf, _MM_HINT_T0);
        }
        for (int h = 0; h < 64; h += 16)
            #pragma GCC unroll 8
            for (int j = 0; j < nb; j++) {
                const int64_t o = (b + j) * B + c + h;
                __m256 w0, w1;
                numla_qlinear_avx2_fp8x16_(wr + o, &w0, &w1);
                a[j] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + o), a[j]);
                a[j] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + o + 8), a[j]);
            }
    }
    #pragma GCC unroll 8
    for (int j = 0; j < nb; j++)
        tot = _mm256_fmadd_ps(a[j], _mm256_set1_ps(s[b + j] * 256.0f), tot);
    return tot;
}

static float numla_qlinear_avx2_fp8_row_(const numla_qlinear_weight *w, int64_t r, const float *x, const int8_t *end)
{
    const int64_t k = w->k, B = NUMLA_QLINEAR_BLOCK, full = k / B;
    const int8_t *wr = w->q + r * w->kp;
    const float *s = w->scales + numla_qlinear_grid_row(w, r) * w->scale_cols;
    __m256 tot = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + NUMLA_QLINEAR_AVX2_BLOCKS <= full; b += NUMLA_QLINEAR_AVX2_BLOCKS)
        tot = numla_qlinear_avx2_fp8_blocks_(wr, x, s, b, NUMLA_QLINEAR_AVX2_BLOCKS, tot, end);
    for (; b + 4 <= full; b += 4)
        tot = numla_qlinear_avx2_fp8_blocks_(wr, x, s, b, 4, tot, end);
    for (; b + 2 <= full; b += 2)
        tot = numla_qlinear_avx2_fp8_blocks_(wr, x, s, b, 2, tot, end);
    for (; b < full; b++)
        tot = numla_qlinear_avx2_fp8_blocks_(wr, x, s, b, 1, tot, end);
    if (b * B < k) { /* a partial last block: the tile's steps */
        const int64_t k0 = b * B;
        __m256 a = _mm256_setzero_ps();
        int64_t c = k0;
        for (; c + 64 <= k; c += 64)
            for (int h = 0; h < 64; h += 16) {
                __m256 w0, w1;
                numla_qlinear_avx2_fp8x16_(wr + c + h, &w0, &w1);
                a = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + c + h), a);
                a = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + c + h + 8), a);
            }
        for (; c < k; c += 8)
            a = _mm256_fmadd_ps(numla_qlinear_avx2_w8_(wr + c, 1), _mm256_maskload_ps(x + c, numla_qlinear_avx2_mask_(k - c)),
                                a);
        tot = _mm256_fmadd_ps(a, _mm256_set1_ps(s[b] * 256.0f), tot);
    }
    return numla_qlinear_avx2_hsum_(tot);
}

/* int8-row many rows: x rows in blocks kept in L2, the few-row tiles over each. */
static int64_t numla_qlinear_avx2_mb_(const numla_qlinear_weight *w)
{
    const int64_t mb = NUMLA_QLINEAR_GEMM_XBYTES / (4 * w->kp) / MR * MR;
    return mb > NUMLA_QLINEAR_GEMM_MIN_MB ? mb : NUMLA_QLINEAR_GEMM_MIN_MB;
}

/* ---- W8A8 ---- */

/* numla_qlinear_quantize_row_ref, vectorised: amax is exact in any order, the product is the
 * same fp32 multiply, and the rounding is to nearest even whatever MXCSR says; q as s8 (0 past
 * k, up to kp). */
static float numla_qlinear_avx2_quantize_row_(const float *x, int64_t k, int64_t kp, int8_t *xq)
{
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 vmax = _mm256_setzero_ps();
    int64_t c = 0;
    for (; c + 8 <= k; c += 8)
        vmax = _mm256_max_ps(vmax, _mm256_and_ps(_mm256_loadu_ps(x + c), absmask));
    if (c < k)
        vmax = _mm256_max_ps(vmax, _mm256_and_ps(_mm256_maskload_ps(x + c, numla_qlinear_avx2_mask_(k - c)), absmask));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = fmaxf(_mm_cvtss_f32(m4), 1e-7f);
    const float sx = amax / 127.0f, inv = 127.0f / amax;
    const __m256 vinv = _mm256_set1_ps(inv);
    const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
    for (c = 0; c < kp; c += 32) {
        __m256i q[4];
        for (int g = 0; g < 4; g++) {
            const int64_t o = c + 8 * g;
            const __m256 v = o + 8 <= k ? _mm256_loadu_ps(x + o)
                             : o < k  ? _mm256_maskload_ps(x + o, numla_qlinear_avx2_mask_(k - o))
                                      : _mm256_setzero_ps();
            const __m256 rv = _mm256_round_ps(_mm256_mul_ps(v, vinv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            q[g] = _mm256_min_epi32(_mm256_max_epi32(_mm256_cvttps_epi32(rv), lo), hi);
        }
        /* packs work within 128-bit lanes: dwords 0-3 of q0, q1, q2, q3, then 4-7 of each;
         * the permute puts them back in order */
        const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        const __m256i o = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(void *)(xq + c), o);
    }
    return sx;
}

/* acc + Σ of the 32 products q · w, as 8 int32 (no saturation: see the file's comment). */
static inline __attribute__((always_inline)) __m256i numla_qlinear_avx2_dot32_(__m256i acc, __m256i aw, __m256i wv,
                                                                               __m256i xv)
{
    const __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, wv));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}

static inline int32_t numla_qlinear_avx2_hsum_i32_(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

/* out[j][i] = Σ_k q[i][k] w[r + j][k] for j < nw, i < mr (compile-time constants after
 * inlining); pf: the span to prefetch one tile ahead (NULL: none). */
static inline __attribute__((always_inline)) void
numla_qlinear_avx2_i8_tile_(const numla_qlinear_weight *w, int64_t r, const int8_t *xq, const int nw, const int mr,
                            int32_t out[NUMLA_QLINEAR_AVX2_GEMV_NW][MR], const int8_t *pf)
{
    const int64_t kp = w->kp;
    const int8_t *wr = w->q + r * kp;
    __m256i a[NUMLA_QLINEAR_AVX2_GEMV_NW][MR];
    #pragma GCC unroll 8
    for (int j = 0; j < nw; j++)
        #pragma GCC unroll 8
        for (int i = 0; i < mr; i++)
            a[j][i] = _mm256_setzero_si256();
    for (int64_t c = 0; c < kp; c += 64) {
        #pragma GCC unroll 8
        for (int j = 0; j < nw && pf; j++)
            _mm_prefetch((const char *)(pf + j * kp + c), _MM_HINT_T0);
        for (int h = 0; h < 64; h += 32) {
            __m256i wv[NUMLA_QLINEAR_AVX2_GEMV_NW], aw[NUMLA_QLINEAR_AVX2_GEMV_NW];
            #pragma GCC unroll 8
            for (int j = 0; j < nw; j++) {
                wv[j] = _mm256_load_si256((const __m256i *)(const void *)(wr + j * kp + c + h));
                aw[j] = _mm256_abs_epi8(wv[j]);
            }
            #pragma GCC unroll 8
            for (int i = 0; i < mr; i++) {
                const __m256i xv = _mm256_loadu_si256((const __m256i *)(const void *)(xq + i * kp + c + h));
                #pragma GCC unroll 8
                for (int j = 0; j < nw; j++)
                    a[j][i] = numla_qlinear_avx2_dot32_(a[j][i], aw[j], wv[j], xv);
            }
        }
    }
    #pragma GCC unroll 8
    for (int j = 0; j < nw; j++)
        #pragma GCC unroll 8
        for (int i = 0; i < mr; i++)
            out[j][i] = numla_qlinear_avx2_hsum_i32_(a[j][i]);
}

static void numla_qlinear_avx2_i8_tile_any_(const numla_qlinear_weight *w, int64_t r, const int8_t *xq, int nw, int mr,
                                            int32_t out[NUMLA_QLINEAR_AVX2_GEMV_NW][MR], const int8_t *pf)
{
    switch (nw * 8 + mr) {
#define NUMLA_QLINEAR_AVX2_I8_CASE(NWC, MRC)                                                       \
    case NWC * 8 + MRC:                                                                            \
        numla_qlinear_avx2_i8_tile_(w, r, xq, NWC, MRC, out, pf);                                  \
        break;
        NUMLA_QLINEAR_AVX2_I8_CASE(1, 1)
        NUMLA_QLINEAR_AVX2_I8_CASE(1, 2)
        NUMLA_QLINEAR_AVX2_I8_CASE(1, 3)
        NUMLA_QLINEAR_AVX2_I8_CASE(1, 4)
        NUMLA_QLINEAR_AVX2_I8_CASE(2, 1)
        NUMLA_QLINEAR_AVX2_I8_CASE(2, 2)
        NUMLA_QLINEAR_AVX2_I8_CASE(2, 3)
        NUMLA_QLINEAR_AVX2_I8_CASE(2, 4)
        NUMLA_QLINEAR_AVX2_I8_CASE(4, 1)
#undef NUMLA_QLINEAR_AVX2_I8_CASE
    default:
        break;
    }
}

/* W8A8 rows [r0, r1) of y for x rows [i0, i1): M = 1 GEMV_NW weight rows at a time with a
 * prefetch one group ahead, else NW x MR tiles. */
static void numla_qlinear_avx2_i8_rows_(const numla_qlinear_weight *w, int64_t m, const int8_t *xq, const float *sx,
                                        float *y, int64_t ldy, int accumulate, int64_t r0, int64_t r1, int64_t i0,
                                        int64_t i1)
{
    int32_t out[NUMLA_QLINEAR_AVX2_GEMV_NW][MR] = {{0}};
    const int gw = m == 1 ? NUMLA_QLINEAR_AVX2_GEMV_NW : NW;
    for (int64_t r = r0, nw; r < r1; r += nw) {
        nw = r1 - r >= gw ? gw : 1;
        const int8_t *pf = m == 1 && r + 2 * nw <= r1 ? w->q + (r + nw) * w->kp : NULL;
        for (int64_t i = i0, mr; i < i1; i += mr) {
            mr = i1 - i >= MR ? MR : i1 - i;
            numla_qlinear_avx2_i8_tile_any_(w, r, xq + i * w->kp, (int)nw, (int)mr, out, pf);
            #pragma GCC unroll 8
            for (int j = 0; j < nw; j++)
                for (int t = 0; t < mr; t++) {
                    float *yo = y + (i + t) * ldy + r + j;
                    *yo = numla_qlinear_w8a8_out(out[j][t], sx[i + t], w->scales[r + j], *yo, accumulate);
                }
        }
    }
}

void numla_qlinear_forward_avx2(const numla_qlinear_weight *w, int64_t m, const float *x, int64_t ldx, float *y,
                                int64_t ldy, int accumulate, void *workspace)
{
    const int fp8 = w->fmt == NUMLA_QLINEAR_FP8_BLOCK;
    if (w->fmt == NUMLA_QLINEAR_INT8_W8A8) {
        int8_t *xq = (int8_t *)numla_qlinear_ws_xq(workspace);
        float *sx = numla_qlinear_ws_sx(workspace, w, m);
        const int64_t kp = w->kp, mb = numla_qlinear_avx2_mb_(w) * 4; /* s8 rows: 1/4 of fp32's */
#pragma omp parallel
        {
#pragma omp for schedule(static)
            for (int64_t i = 0; i < m; i++)
                sx[i] = numla_qlinear_avx2_quantize_row_(x + i * ldx, w->k, kp, xq + i * kp);
            int64_t r0, r1;
            numla_qlinear_split(w->n, omp_get_thread_num(), omp_get_num_threads(), &r0, &r1);
            for (int64_t b0 = 0; b0 < m; b0 += mb)
                numla_qlinear_avx2_i8_rows_(w, m, xq, sx, y, ldy, accumulate, r0, r1, b0, m - b0 > mb ? b0 + mb : m);
        }
        return;
    }
    (void)workspace;
#pragma omp parallel
    {
        int64_t r0, r1;
        numla_qlinear_split(w->n, omp_get_thread_num(), omp_get_num_threads(), &r0, &r1);
        if (fp8 && m == 1) {
            const int8_t *end = w->q + r1 * w->kp;
            for (int64_t r = r0; r < r1; r++) {
                const float v = numla_qlinear_avx2_fp8_row_(w, r, x, end);
                y[r] = accumulate ? y[r] + v : v;
            }
        } else if (!fp8 && m == 1) {
            numla_qlinear_avx2_row_gemv_(w, x, y, accumulate, r0, r1);
        } else {
            const int64_t mb = fp8 || m < NUMLA_QLINEAR_GEMM_MIN_M ? m : numla_qlinear_avx2_mb_(w);
            for (int64_t b0 = 0; b0 < m; b0 += mb)
                numla_qlinear_avx2_rows_(w, x, ldx, y, ldy, accumulate, r0, r1, b0, m - b0 > mb ? b0 + mb : m, fp8);
        }
    }
}

/* ---- fp8 many rows: the panel GEMM ---- */

enum { NUMLA_QLINEAR_AVX2_P_NR = 16, NUMLA_QLINEAR_AVX2_P_MR = NUMLA_QLINEAR_AVX2_PANEL_MR };

/* 16 rows of 16 bytes -> r[c] = column c of the 16 rows, in row order (four unpack stages). */
static inline __attribute__((always_inline)) void numla_qlinear_avx2_transpose16_(__m128i r[16])
{
    __m128i s[16];
    for (int j = 0; j < 8; j++) {
        s[j] = _mm_unpacklo_epi8(r[2 * j], r[2 * j + 1]);     /* columns 0..7 */
        s[j + 8] = _mm_unpackhi_epi8(r[2 * j], r[2 * j + 1]); /* columns 8..15 */
    }
    for (int g = 0; g < 16; g += 8)
        for (int j = 0; j < 4; j++) {
            r[g + j] = _mm_unpacklo_epi16(s[g + 2 * j], s[g + 2 * j + 1]);
            r[g + 4 + j] = _mm_unpackhi_epi16(s[g + 2 * j], s[g + 2 * j + 1]);
        }
    for (int g = 0; g < 16; g += 4) {
        s[g + 0] = _mm_unpacklo_epi32(r[g + 0], r[g + 1]);
        s[g + 1] = _mm_unpackhi_epi32(r[g + 0], r[g + 1]);
        s[g + 2] = _mm_unpacklo_epi32(r[g + 2], r[g + 3]);
        s[g + 3] = _mm_unpackhi_epi32(r[g + 2], r[g + 3]);
    }
    for (int g = 0; g < 16; g += 4) {
        r[g + 0] = _mm_unpacklo_epi64(s[g + 0], s[g + 2]);
        r[g + 1] = _mm_unpackhi_epi64(s[g + 0], s[g + 2]);
        r[g + 2] = _mm_unpacklo_epi64(s[g + 1], s[g + 3]);
        r[g + 3] = _mm_unpackhi_epi64(s[g + 1], s[g + 3]);
    }
}

/* Dequantizes fp8 weight rows [n0, n0 + 16) (rows past the weight repeat its last row: their
 * columns are never stored), columns [kc0, kc0 + kc) rounded up to 16, into dst: element
 * (row n0 + j, column kc0 + t) at dst[t · 16 + j], as fp32(e4m3 · block scale). */
static void numla_qlinear_avx2_dequant16_(const numla_qlinear_weight *w, int64_t n0, int64_t kc0, int64_t kc,
                                          float *dst)
{
    const int8_t *row[16];
    int64_t gr[16];
    float sv[16];
    for (int j = 0; j < 16; j++) {
        const int64_t n = n0 + j < w->n ? n0 + j : w->n - 1;
        row[j] = w->q + n * w->kp;
        gr[j] = numla_qlinear_grid_row(w, n) * w->scale_cols;
    }
    for (int64_t t = 0; t < kc; t += 16) {
        const int64_t c = kc0 + t; /* a multiple of 16, so within one 128-column block */
        if (t % NUMLA_QLINEAR_BLOCK == 0)
            for (int j = 0; j < 16; j++)
                sv[j] = w->scales[gr[j] + c / NUMLA_QLINEAR_BLOCK] * 256.0f; /* exact */
        const __m256 s0 = _mm256_loadu_ps(sv), s1 = _mm256_loadu_ps(sv + 8);
        __m128i r[16];
        for (int j = 0; j < 16; j++)
            r[j] = _mm_loadu_si128((const __m128i *)(const void *)(row[j] + c));
        numla_qlinear_avx2_transpose16_(r);
        float *d = dst + t * NUMLA_QLINEAR_AVX2_P_NR;
        for (int cc = 0; cc < 16; cc++) {
            __m256i h = _mm256_cvtepi8_epi16(r[cc]);
            h = _mm256_and_si256(_mm256_slli_epi16(h, 7), _mm256_set1_epi16((short)0xBFFF));
            _mm256_store_ps(d + cc * 16, _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), s0));
            _mm256_store_ps(d + cc * 16 + 8, _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), s1));
        }
    }
}

/* y[i][0 .. cols) (+)= Σ_{t < kc} x[i][t] · pw[t][0 .. cols) for i < mr, one fused
 * multiply-add per t in t order, from y (load) or from 0. 12 accumulators, 2 weight vectors and
 * a broadcast take 15 of the 16 ymm registers, so the column masks are made only around the loop
 * (kept live across it, they pushed accumulators onto the stack). */
static inline __attribute__((always_inline)) __m256i numla_qlinear_avx2_cols_(int cols)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(cols), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline __attribute__((always_inline)) void numla_qlinear_avx2_micro_(const int mr, int64_t kc, const float *xp,
                                                                            const float *pw, float *y, int64_t ldy,
                                                                            int cols, int load)
{
    __m256 c0[NUMLA_QLINEAR_AVX2_P_MR], c1[NUMLA_QLINEAR_AVX2_P_MR];
    if (load) {
        const __m256i m0 = numla_qlinear_avx2_cols_(cols), m1 = numla_qlinear_avx2_cols_(cols - 8);
        #pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            c0[i] = _mm256_maskload_ps(y + i * ldy, m0);
            c1[i] = _mm256_maskload_ps(y + i * ldy + 8, m1);
        }
    } else {
        #pragma GCC unroll 8
        for (int i = 0; i < mr; i++)
            c0[i] = c1[i] = _mm256_setzero_ps();
    }
    for (int64_t t = 0; t < kc; t++) {
        const __m256 w0 = _mm256_load_ps(pw + t * NUMLA_QLINEAR_AVX2_P_NR);
        const __m256 w1 = _mm256_load_ps(pw + t * NUMLA_QLINEAR_AVX2_P_NR + 8);
        #pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            const __m256 b = _mm256_broadcast_ss(xp + t * NUMLA_QLINEAR_AVX2_P_MR + i);
            c0[i] = _mm256_fmadd_ps(w0, b, c0[i]);
            c1[i] = _mm256_fmadd_ps(w1, b, c1[i]);
        }
    }
    const __m256i m0 = numla_qlinear_avx2_cols_(cols), m1 = numla_qlinear_avx2_cols_(cols - 8);
    #pragma GCC unroll 8
    for (int i = 0; i < mr; i++) {
        _mm256_maskstore_ps(y + i * ldy, m0, c0[i]);
        _mm256_maskstore_ps(y + i * ldy + 8, m1, c1[i]);
    }
}

static void numla_qlinear_avx2_micro_any_(int mr, int64_t kc, const float *xp, const float *pw, float *y, int64_t ldy,
                                          int cols, int load)
{
    switch (mr) {
#define NUMLA_QLINEAR_AVX2_MICRO_CASE(R)                                                           \
    case R:                                                                                        \
        numla_qlinear_avx2_micro_(R, kc, xp, pw, y, ldy, cols, load);                              \
        break;
        NUMLA_QLINEAR_AVX2_MICRO_CASE(1)
        NUMLA_QLINEAR_AVX2_MICRO_CASE(2)
        NUMLA_QLINEAR_AVX2_MICRO_CASE(3)
        NUMLA_QLINEAR_AVX2_MICRO_CASE(4)
        NUMLA_QLINEAR_AVX2_MICRO_CASE(5)
        NUMLA_QLINEAR_AVX2_MICRO_CASE(6)
#undef NUMLA_QLINEAR_AVX2_MICRO_CASE
    default:
        break;
    }
}

_Static_assert(NUMLA_QLINEAR_AVX2_P_MR == 6 && NUMLA_QLINEAR_PANEL_KC % 128 == 0 &&
                   NUMLA_QLINEAR_PANEL_NC % NUMLA_QLINEAR_AVX2_P_NR == 0,
               "the micro-kernel cases, whole scale blocks per K block, whole panels per N block");

/* One thread's rows [r0, r1) of y for all m rows of x; panel: its KC x NC scratch (the layout
 * of numla_qlinear_panel_bytes, here NC / 16 panels of KC x 16), xp its x micro-panel (KC x 6
 * of the room for KC x PANEL_MR floats). Per K block: the weights dequantized, then per group of
 * 6 x rows the group packed k-major (its rows' addresses may alias in L1: ldx a multiple of
 * 4 KiB), and every 16-column panel run over it. */
static void numla_qlinear_avx2_panel_rows_(const numla_qlinear_weight *w, int64_t m, const float *x, int64_t ldx,
                                           float *y, int64_t ldy, int accumulate, int64_t r0, int64_t r1,
                                           float *panel, float *xp)
{
    const int64_t k = w->k, NC = numla_qlinear_panel_nc(w), KC = NUMLA_QLINEAR_PANEL_KC;
    for (int64_t n0 = r0; n0 < r1; n0 += NC) {
        const int64_t nc = r1 - n0 < NC ? r1 - n0 : NC;
        for (int64_t k0 = 0; k0 < k; k0 += KC) {
            const int64_t kc = k - k0 < KC ? k - k0 : KC;
            for (int64_t j = 0; j < nc; j += 16)
                numla_qlinear_avx2_dequant16_(w, n0 + j, k0, kc, panel + (j / 16) * KC * 16);
            const int load = accumulate || k0 > 0;
            for (int64_t i0 = 0; i0 < m; i0 += NUMLA_QLINEAR_AVX2_P_MR) {
                const int mr = m - i0 < NUMLA_QLINEAR_AVX2_P_MR ? (int)(m - i0) : NUMLA_QLINEAR_AVX2_P_MR;
                #pragma GCC unroll 8
                for (int i = 0; i < mr; i++) {
                    const float *xi = x + (i0 + i) * ldx + k0;
                    for (int64_t t = 0; t < kc; t++)
                        xp[t * NUMLA_QLINEAR_AVX2_P_MR + i] = xi[t];
                }
                for (int64_t j = 0; j < nc; j += 16)
                    numla_qlinear_avx2_micro_any_(mr, kc, xp, panel + (j / 16) * KC * 16, y + i0 * ldy + n0 + j, ldy,
                                                  nc - j < 16 ? (int)(nc - j) : 16, load);
            }
        }
    }
}

void numla_qlinear_gemm_avx2(const numla_qlinear_weight *w, int64_t m, const float *x, int64_t ldx, float *y,
                             int64_t ldy, int accumulate, void *workspace, int max_threads)
{
    unsigned char *base = (unsigned char *)(((uintptr_t)workspace + 63) & ~(uintptr_t)63);
    const size_t per = numla_qlinear_gemm_thread_bytes(w);
    int nt = omp_get_max_threads();
    if (nt > max_threads)
        nt = max_threads;
#pragma omp parallel num_threads(nt)
    {
        const int ith = omp_get_thread_num();
        int64_t r0, r1;
        numla_qlinear_split(w->n, ith, omp_get_num_threads(), &r0, &r1);
        float *panel = (float *)(void *)(base + (size_t)ith * per);
        numla_qlinear_avx2_panel_rows_(w, m, x, ldx, y, ldy, accumulate, r0, r1, panel,
                                       panel + numla_qlinear_panel_bytes(w) / sizeof(float));
    }
}
