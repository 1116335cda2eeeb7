/* kernels/x86/qlinear_avx512.c — fp8-block and int8-row linear layers on AVX-512.
 *
 * Few rows (decode GEMV / skinny GEMM): each thread streams its rows of 1-byte weights once,
 * widens them to fp32 in registers and multiplies tiles of NUMLA_QLINEAR_NW rows by
 * NUMLA_QLINEAR_MR rows of x, or 2 x 4 for a few more rows of x (the weight rows stay in L1
 * across the x tiles). Each output lane sums the columns k = lane mod 16 in ascending order with
 * fused multiply-adds (per 128-wide block for fp8, fused into the total with the block scale);
 * the 16 lanes are then reduced.
 *
 * Many rows: widening every weight M / 2 times made prefill compute-bound on the conversion.
 *   int8-row (from NUMLA_QLINEAR_GEMM_MIN_M rows): x in blocks of rows kept in L2
 *   (NUMLA_QLINEAR_GEMM_XBYTES, >= 36 rows), each group of 4 weight rows run over the block in
 *   4 x 4 few-row tiles, each weight widened in registers once per 4 x rows. Every output is
 *   the few-row tile's own computation, so y has the same bits whatever M is and on any thread
 *   count. The engine relies on that for int8 models: W8A8 turns a last-bit difference in an
 *   int8-row output into a different quantized activation downstream, so batched and unbatched
 *   runs must agree to the bit. (It replaced a path that widened weight groups into fp32
 *   scratch and read them back with x from L2: on Zen 4 that was bound by L2 loads,
 *   docs/linear.md.)
 *   fp8: a GotoBLAS panel GEMM (below: weights dequantized once per call to fp32, k-major
 *   32-column panels, 12 x 32 outer-product tiles, KC = 256, NC = 512), about twice the
 *   widened-group path's rate. It sums each output in k order, so fp8 outputs for M >= 8 may
 *   differ in the last bits from M < 32 (both inside the bound of kernels/qlinear.h); nothing
 *   downstream of an fp8 layer quantizes activations. Figures in docs/linear.md.
 *
 * e4m3 -> fp32 without a table: the byte's 7 magnitude bits, shifted left by 7, are an fp16
 * with the same mantissa and the exponent field e read with bias 15 instead of 7 (subnormals
 * included, which vcvtph2ps converts exactly, DAZ or not), so the fp16 is the value · 2^-8; the sign
 * moves from bit 14 to 15 by sign-extending the byte first and clearing bit 14. The 2^8 goes
 * into the block scale (exact: a power of two). */
#include "kernels/qlinear_internal.h"

#include <immintrin.h>
#include <omp.h>

/* 16 e4m3 bytes -> 16 floats, each 2^-8 times the weight. */
static inline __m512 numla_qlinear_fp8x16_(const int8_t *p)
{
    __m256i h = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)p));
    h = _mm256_and_si256(_mm256_slli_epi16(h, 7), _mm256_set1_epi16((short)0xBFFF));
    return _mm512_cvtph_ps(h);
}

static inline __m512 numla_qlinear_i8x16_(const int8_t *p)
{
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)));
}

static inline __attribute__((always_inline)) __m512 numla_qlinear_widen_(const int8_t *p, const int fp8)
{
    return fp8 ? numla_qlinear_fp8x16_(p) : numla_qlinear_i8x16_(p);
}

/* out[j][i] = row r + j of W · x row i, for j < nw, i < mr (compile-time constants after
 * inlining). fp8: block by block, each block's sum times its scale; int8: one block, times the
 * row scale. */
static inline __attribute__((always_inline)) void
numla_qlinear_tile_(const numla_qlinear_weight *w, int64_t r, const float *x, int64_t ldx,
                    const int nw, const int mr, const int fp8, float out[NUMLA_QLINEAR_NW][NUMLA_QLINEAR_WIDE_MR],
                    const int pre, const float *wf)
{
    const int64_t k = w->k, B = fp8 ? NUMLA_QLINEAR_BLOCK : w->kp;
    const int8_t *wr[NUMLA_QLINEAR_NW], *pf[NUMLA_QLINEAR_NW];
    const float *s[NUMLA_QLINEAR_NW];
    __m512 tot[NUMLA_QLINEAR_NW][NUMLA_QLINEAR_WIDE_MR];
    for (int j = 0; j < nw; j++) {
        wr[j] = w->q + (r + j) * w->kp;
        pf[j] = r + nw + j < w->n ? wr[j] + nw * w->kp : wr[j];
        s[j] = fp8 ? w->scales + numla_qlinear_grid_row(w, r + j) * w->scale_cols : NULL;
        for (int i = 0; i < mr; i++)
            tot[j][i] = _mm512_setzero_ps();
    }
    for (int64_t k0 = 0; k0 < k; k0 += B) {
        const int64_t k1 = k0 + B < k ? k0 + B : k;
        __m512 a[NUMLA_QLINEAR_NW][NUMLA_QLINEAR_WIDE_MR];
        for (int j = 0; j < nw; j++)
            for (int i = 0; i < mr; i++)
                a[j][i] = _mm512_setzero_ps();
        int64_t c = k0;
        /* 64 at a time: per row one prefetch of the next tile's line at the same column (the
         * tile's rows are one contiguous nw · kp-byte span, so that is one span ahead: rows of
         * 2 KiB are too short for the hardware prefetcher to ramp up on each). fp8 widens 32
         * bytes to fp16 at once and converts twice; int8 widens 16 at a time. */
        for (; c + 64 <= k1; c += 64) {
            for (int j = 0; j < nw && !pre; j++)
                _mm_prefetch((const char *)(pf[j] + c), _MM_HINT_T0);
            for (int h = 0; h < 64; h += 32) {
                __m512 x0[NUMLA_QLINEAR_WIDE_MR], x1[NUMLA_QLINEAR_WIDE_MR];
                for (int i = 0; i < mr; i++) {
                    x0[i] = _mm512_loadu_ps(x + i * ldx + c + h);
                    x1[i] = _mm512_loadu_ps(x + i * ldx + c + h + 16);
                }
                for (int j = 0; j < nw; j++) {
                    __m512 w0, w1;
                    if (pre) {
                        w0 = _mm512_load_ps(wf + j * w->kp + c + h);
                        w1 = _mm512_load_ps(wf + j * w->kp + c + h + 16);
                    } else if (fp8) {
                        __m512i hw = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(const void *)(wr[j] + c + h)));
                        hw = _mm512_and_si512(_mm512_slli_epi16(hw, 7), _mm512_set1_epi16((short)0xBFFF));
                        w0 = _mm512_cvtph_ps(_mm512_castsi512_si256(hw));
                        w1 = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(hw, 1));
                    } else {
                        w0 = numla_qlinear_i8x16_(wr[j] + c + h);
                        w1 = numla_qlinear_i8x16_(wr[j] + c + h + 16);
                    }
                    for (int i = 0; i < mr; i++) {
                        a[j][i] = _mm512_fmadd_ps(w0, x0[i], a[j][i]);
                        a[j][i] = _mm512_fmadd_ps(w1, x1[i], a[j][i]);
                    }
                }
            }
        }
        /* 16 at a time; the packed rows are zero-padded to a multiple of 64 bytes, so only x
         * needs the mask at the end. */
        for (; c < k1; c += 16) {
            __mmask16 msk = k1 - c >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (k1 - c)) - 1);
            __m512 xv[NUMLA_QLINEAR_WIDE_MR];
            for (int i = 0; i < mr; i++)
                xv[i] = _mm512_maskz_loadu_ps(msk, x + i * ldx + c);
            for (int j = 0; j < nw; j++) {
                __m512 wv = pre ? _mm512_load_ps(wf + j * w->kp + c) : numla_qlinear_widen_(wr[j] + c, fp8);
                for (int i = 0; i < mr; i++)
                    a[j][i] = _mm512_fmadd_ps(wv, xv[i], a[j][i]);
            }
        }
        for (int j = 0; j < nw; j++) {
            const __m512 sv = _mm512_set1_ps(fp8 ? s[j][k0 / NUMLA_QLINEAR_BLOCK] * 256.0f : 1.0f);
            for (int i = 0; i < mr; i++)
                tot[j][i] = fp8 ? _mm512_fmadd_ps(a[j][i], sv, tot[j][i]) : _mm512_add_ps(a[j][i], tot[j][i]);
        }
    }
    for (int j = 0; j < nw; j++)
        for (int i = 0; i < mr; i++)
            out[j][i] = _mm512_reduce_add_ps(tot[j][i]) * (fp8 ? 1.0f : w->scales[r + j]);
}

static void numla_qlinear_rows_(const numla_qlinear_weight *w, int64_t m, const float *x,
                                int64_t ldx, float *y, int64_t ldy, int accumulate, int64_t r0,
                                int64_t r1, const int fp8)
{
    float out[NUMLA_QLINEAR_NW][NUMLA_QLINEAR_WIDE_MR];
    const int wide = m >= NUMLA_QLINEAR_WIDE_MR && m <= NUMLA_QLINEAR_WIDE_MAX_M;
    const int NW = wide ? NUMLA_QLINEAR_WIDE_NW : NUMLA_QLINEAR_NW;
    const int MR = wide ? NUMLA_QLINEAR_WIDE_MR : NUMLA_QLINEAR_MR;
    for (int64_t r = r0; r < r1;) {
        const int nw = r1 - r >= NW ? NW : 1;
        for (int64_t i0 = 0, mr; i0 < m; i0 += mr) {
            const float *xi = x + i0 * ldx;
            mr = m - i0 >= MR ? MR : 1;
            if (nw == NUMLA_QLINEAR_NW && mr == NUMLA_QLINEAR_MR)
                numla_qlinear_tile_(w, r, xi, ldx, NUMLA_QLINEAR_NW, NUMLA_QLINEAR_MR, fp8, out, 0, NULL);
            else if (nw == NUMLA_QLINEAR_NW)
                numla_qlinear_tile_(w, r, xi, ldx, NUMLA_QLINEAR_NW, 1, fp8, out, 0, NULL);
            else if (nw == NUMLA_QLINEAR_WIDE_NW && mr == NUMLA_QLINEAR_WIDE_MR)
                numla_qlinear_tile_(w, r, xi, ldx, NUMLA_QLINEAR_WIDE_NW, NUMLA_QLINEAR_WIDE_MR, fp8, out, 0, NULL);
            else if (nw == NUMLA_QLINEAR_WIDE_NW)
                numla_qlinear_tile_(w, r, xi, ldx, NUMLA_QLINEAR_WIDE_NW, 1, fp8, out, 0, NULL);
            else if (mr == NUMLA_QLINEAR_WIDE_MR)
                numla_qlinear_tile_(w, r, xi, ldx, 1, NUMLA_QLINEAR_WIDE_MR, fp8, out, 0, NULL);
            else if (mr == NUMLA_QLINEAR_MR)
                numla_qlinear_tile_(w, r, xi, ldx, 1, NUMLA_QLINEAR_MR, fp8, out, 0, NULL);
            else
                numla_qlinear_tile_(w, r, xi, ldx, 1, 1, fp8, out, 0, NULL);
            for (int j = 0; j < nw; j++)
                for (int i = 0; i < mr; i++) {
                    float *yo = y + (i0 + i) * ldy + r + j;
                    *yo = accumulate ? *yo + out[j][i] : out[j][i];
                }
        }
        r += nw;
    }
}

/* 32 fp8 weights at p, widened: w0 = the first 16, w1 = the next 16 (each 2^-8 times the
 * weight), as numla_qlinear_tile_ does. */
static inline __attribute__((always_inline)) void numla_qlinear_fp8x32_(const int8_t *p, __m512 *w0,
                                                                        __m512 *w1)
{
    __m512i hw = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(const void *)p));
    hw = _mm512_and_si512(_mm512_slli_epi16(hw, 7), _mm512_set1_epi16((short)0xBFFF));
    *w0 = _mm512_cvtph_ps(_mm512_castsi512_si256(hw));
    *w1 = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(hw, 1));
}

/* The fp8 GEMV (M = 1) one row at a time, so each thread's weights are one sequential stream
 * (rows of 2 KiB read four at a time are four short streams, which the hardware prefetcher
 * follows worse: docs/linear.md), with a software prefetch NUMLA_QLINEAR_ROW_AHEAD bytes ahead
 * in it. A row alone still has independent work: its 128-wide scale blocks are separate
 * accumulator chains until their scaled sums are added, so four full blocks run interleaved.
 * Every block's chain, and the order the blocks' sums are added in, are those of
 * numla_qlinear_tile_, so y has the same bits as the tiled paths. (Its prefetch distance and
 * blocks in flight: kernels/blocking.h.) */

static float numla_qlinear_fp8_row_(const numla_qlinear_weight *w, int64_t r, const float *x,
                                    const int8_t *end)
{
    const int64_t k = w->k, B = NUMLA_QLINEAR_BLOCK, full = k / B;
    const int8_t *wr = w->q + r * w->kp;
    const float *s = w->scales + numla_qlinear_grid_row(w, r) * w->scale_cols;
    __m512 tot = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + NUMLA_QLINEAR_ROW_BLOCKS <= full; b += NUMLA_QLINEAR_ROW_BLOCKS) {
        __m512 a[NUMLA_QLINEAR_ROW_BLOCKS];
        for (int j = 0; j < NUMLA_QLINEAR_ROW_BLOCKS; j++)
            a[j] = _mm512_setzero_ps();
        for (int64_t c = 0; c < B; c += 64) {
            for (int j = 0; j < NUMLA_QLINEAR_ROW_BLOCKS; j++) {
                const int8_t *pf = wr + (b + j) * B + c + NUMLA_QLINEAR_ROW_AHEAD;
                if (pf < end)
                    _mm_prefetch((const char *)pf, _MM_HINT_T0);
            }
            for (int h = 0; h < 64; h += 32)
                for (int j = 0; j < NUMLA_QLINEAR_ROW_BLOCKS; j++) {
                    const int64_t o = (b + j) * B + c + h;
                    __m512 w0, w1;
                    numla_qlinear_fp8x32_(wr + o, &w0, &w1);
                    a[j] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + o), a[j]);
                    a[j] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + o + 16), a[j]);
                }
        }
        for (int j = 0; j < NUMLA_QLINEAR_ROW_BLOCKS; j++)
            tot = _mm512_fmadd_ps(a[j], _mm512_set1_ps(s[b + j] * 256.0f), tot);
    }
    for (; b * B < k; b++) { /* the rest one block at a time, as the tile does it */
        const int64_t k0 = b * B, k1 = k0 + B < k ? k0 + B : k;
        __m512 a = _mm512_setzero_ps();
        int64_t c = k0;
        for (; c + 64 <= k1; c += 64) {
            if (wr + c + NUMLA_QLINEAR_ROW_AHEAD < end)
                _mm_prefetch((const char *)(wr + c + NUMLA_QLINEAR_ROW_AHEAD), _MM_HINT_T0);
            for (int h = 0; h < 64; h += 32) {
                __m512 w0, w1;
                numla_qlinear_fp8x32_(wr + c + h, &w0, &w1);
                a = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + c + h), a);
                a = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + c + h + 16), a);
            }
        }
        for (; c < k1; c += 16) {
            __mmask16 msk = k1 - c >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (k1 - c)) - 1);
            a = _mm512_fmadd_ps(numla_qlinear_fp8x16_(wr + c), _mm512_maskz_loadu_ps(msk, x + c), a);
        }
        tot = _mm512_fmadd_ps(a, _mm512_set1_ps(s[b] * 256.0f), tot);
    }
    return _mm512_reduce_add_ps(tot) * 1.0f;
}

/* ---- int8-row many rows (from NUMLA_QLINEAR_GEMM_MIN_M rows) ---- */

/* x rows per block: the block (mb, K) fp32 stays in L2 while each group of weight rows runs
 * over it; a multiple of the tile's rows. */
static int64_t numla_qlinear_gemm_mb_(const numla_qlinear_weight *w)
{
    const int64_t mb = NUMLA_QLINEAR_GEMM_XBYTES / (4 * w->kp) / NUMLA_QLINEAR_WIDE_MR * NUMLA_QLINEAR_WIDE_MR;
    return mb > NUMLA_QLINEAR_GEMM_MIN_MB ? mb : NUMLA_QLINEAR_GEMM_MIN_MB;
}

/* int8-row many rows, x-blocked few-row tiles: per block of x rows (numla_qlinear_gemm_mb_), each
 * group of 4 weight rows runs numla_qlinear_tile_ over the block (4 x 4 tiles, widened in
 * registers), so x is read from L2 rather than from L3 for every group, and every output is the
 * few-row path's own computation: the same bits by construction. No scratch. */
static void numla_qlinear_xblock_rows_(const numla_qlinear_weight *w, int64_t m, const float *x,
                                       int64_t ldx, float *y, int64_t ldy, int accumulate,
                                       int64_t r0, int64_t r1)
{
    float out[NUMLA_QLINEAR_NW][NUMLA_QLINEAR_WIDE_MR];
    const int64_t mb = numla_qlinear_gemm_mb_(w);
    for (int64_t b0 = 0; b0 < m; b0 += mb) {
        const int64_t b1 = m - b0 > mb ? b0 + mb : m;
        for (int64_t r = r0, nw; r < r1; r += nw) {
            nw = r1 - r >= NUMLA_QLINEAR_NW ? NUMLA_QLINEAR_NW : 1;
            for (int64_t i0 = b0, mr; i0 < b1; i0 += mr) {
                const float *xi = x + i0 * ldx;
                mr = b1 - i0 >= NUMLA_QLINEAR_WIDE_MR ? NUMLA_QLINEAR_WIDE_MR : b1 - i0;
                switch (mr * 8 + nw) {
#define NUMLA_QLINEAR_XB_CASE(MRC)                                                                 \
    case MRC * 8 + NUMLA_QLINEAR_NW:                                                               \
        numla_qlinear_tile_(w, r, xi, ldx, NUMLA_QLINEAR_NW, MRC, 0, out, 0, NULL);                \
        break;                                                                                     \
    case MRC * 8 + 1:                                                                              \
        numla_qlinear_tile_(w, r, xi, ldx, 1, MRC, 0, out, 0, NULL);                               \
        break;
                    NUMLA_QLINEAR_XB_CASE(1)
                    NUMLA_QLINEAR_XB_CASE(2)
                    NUMLA_QLINEAR_XB_CASE(3)
                    NUMLA_QLINEAR_XB_CASE(4)
#undef NUMLA_QLINEAR_XB_CASE
                default:
                    break;
                }
                for (int j = 0; j < nw; j++)
                    for (int i = 0; i < mr; i++) {
                        float *yo = y + (i0 + i) * ldy + r + j;
                        *yo = accumulate ? *yo + out[j][i] : out[j][i];
                    }
            }
        }
    }
}

void numla_qlinear_forward_avx512(const numla_qlinear_weight *w, int64_t m, const float *x,
                                  int64_t ldx, float *y, int64_t ldy, int accumulate,
                                  void *workspace)
{
    (void)workspace;
    const int fp8 = w->fmt == NUMLA_QLINEAR_FP8_BLOCK;
#pragma omp parallel
    {
        int64_t r0, r1;
        numla_qlinear_split(w->n, omp_get_thread_num(), omp_get_num_threads(), &r0, &r1);
        if (fp8 && m == 1) {
            const int8_t *end = w->q + r1 * w->kp;
            for (int64_t r = r0; r < r1; r++) {
                const float v = numla_qlinear_fp8_row_(w, r, x, end);
                y[r] = accumulate ? y[r] + v : v;
            }
        } else if (fp8)
            numla_qlinear_rows_(w, m, x, ldx, y, ldy, accumulate, r0, r1, 1);
        else if (m >= NUMLA_QLINEAR_GEMM_MIN_M)
            numla_qlinear_xblock_rows_(w, m, x, ldx, y, ldy, accumulate, r0, r1);
        else
            numla_qlinear_rows_(w, m, x, ldx, y, ldy, accumulate, r0, r1, 0);
    }
}


/* ---- fp8 many rows: the k-major panel GEMM ----
 *
 * fp8 only (int8-row keeps the widened-group path above, whose bits equal the few-row path's:
 * W8A8 models quantize what int8-row layers produce, so their last bits must not depend on M).
 * Each thread dequantizes KC x NC blocks of its weight rows into fp32 panels of NR columns,
 * element = fp32(e4m3 · 2^-8 · (256 · block scale)) = the fp32 dequantized weight exactly as
 * the reference forms it (one rounding of an exact product; a scale is never folded into
 * anything narrower), and runs an MR x NR register-blocked FMA micro-kernel over all M rows
 * (x broadcast, two weight vectors per k). Each output is a sequential fp32 sum over k of
 * exact products of fp32 values, inside the bound of kernels/qlinear.h, but in another order
 * than the M = 1 path: fp8 results may differ in the last bits between M below and above
 * NUMLA_QLINEAR_PANEL_MIN_M. The 16 x 64-byte transposes put each weight row into a panel
 * column. */
enum {
    NUMLA_QLINEAR_P_KC = NUMLA_QLINEAR_PANEL_KC,
    NUMLA_QLINEAR_P_NR = NUMLA_QLINEAR_PANEL_NR,
    NUMLA_QLINEAR_P_MR = NUMLA_QLINEAR_PANEL_MR,
};

/* 16 rows of 64 bytes -> 16 vectors of which o[c]'s 128-bit lane L holds column 16 L + c of
 * the 16 rows, in row order: the usual four unpack stages (8, 16, 32, 64 bits), each within
 * 128-bit lanes. */
static inline __attribute__((always_inline)) void numla_qlinear_transpose16x64_(__m512i r[16])
{
    __m512i s[16];
    for (int j = 0; j < 8; j++) {
        s[j] = _mm512_unpacklo_epi8(r[2 * j], r[2 * j + 1]);     /* columns 0..7 */
        s[j + 8] = _mm512_unpackhi_epi8(r[2 * j], r[2 * j + 1]); /* columns 8..15 */
    }
    for (int g = 0; g < 16; g += 8)
        for (int j = 0; j < 4; j++) {
            r[g + j] = _mm512_unpacklo_epi16(s[g + 2 * j], s[g + 2 * j + 1]);
            r[g + 4 + j] = _mm512_unpackhi_epi16(s[g + 2 * j], s[g + 2 * j + 1]);
        }
    /* r[4 g + j]: 32-bit unit u = column 4 g + u, rows 4 j .. 4 j + 3 */
    for (int g = 0; g < 16; g += 4) {
        s[g + 0] = _mm512_unpacklo_epi32(r[g + 0], r[g + 1]); /* rows 0..7, columns 4g+0,1 */
        s[g + 1] = _mm512_unpackhi_epi32(r[g + 0], r[g + 1]); /* rows 0..7, columns 4g+2,3 */
        s[g + 2] = _mm512_unpacklo_epi32(r[g + 2], r[g + 3]); /* rows 8..15, columns 4g+0,1 */
        s[g + 3] = _mm512_unpackhi_epi32(r[g + 2], r[g + 3]); /* rows 8..15, columns 4g+2,3 */
    }
    for (int g = 0; g < 16; g += 4) {
        r[g + 0] = _mm512_unpacklo_epi64(s[g + 0], s[g + 2]);
        r[g + 1] = _mm512_unpackhi_epi64(s[g + 0], s[g + 2]);
        r[g + 2] = _mm512_unpacklo_epi64(s[g + 1], s[g + 3]);
        r[g + 3] = _mm512_unpackhi_epi64(s[g + 1], s[g + 3]);
    }
}

/* Dequantizes fp8 weight rows [n0, n0 + 16) (rows past the weight repeat its last row: their
 * columns are never stored), columns [kc0, kc0 + kc) rounded up to 64, into dst: element
 * (row n0 + j, column kc0 + t) at dst[t · NR + j], as fp32(e4m3 · block scale). */
static inline __attribute__((always_inline)) void
numla_qlinear_dequant16_(const numla_qlinear_weight *w, int64_t n0, int64_t kc0, int64_t kc,
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
    for (int64_t t = 0; t < kc; t += 64) {
        const int64_t c = kc0 + t; /* a multiple of 64, so within one 128-column block */
        for (int j = 0; j < 16; j++)
            sv[j] = w->scales[gr[j] + c / NUMLA_QLINEAR_BLOCK] * 256.0f; /* exact */
        const __m512 s = _mm512_loadu_ps(sv);
        __m512i r[16];
        for (int j = 0; j < 16; j++)
            r[j] = _mm512_loadu_si512((const void *)(row[j] + c));
        numla_qlinear_transpose16x64_(r);
        float *d = dst + t * NUMLA_QLINEAR_P_NR;
        for (int cc = 0; cc < 16; cc++) {
            const __m512i mask = _mm512_set1_epi16((short)0xBFFF);
            __m512i lo = _mm512_cvtepi8_epi16(_mm512_castsi512_si256(r[cc]));
            __m512i hi = _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(r[cc], 1));
            lo = _mm512_and_si512(_mm512_slli_epi16(lo, 7), mask);
            hi = _mm512_and_si512(_mm512_slli_epi16(hi, 7), mask);
            const __m512 f[4] = {_mm512_cvtph_ps(_mm512_castsi512_si256(lo)),
                                 _mm512_cvtph_ps(_mm512_extracti64x4_epi64(lo, 1)),
                                 _mm512_cvtph_ps(_mm512_castsi512_si256(hi)),
                                 _mm512_cvtph_ps(_mm512_extracti64x4_epi64(hi, 1))};
            for (int l = 0; l < 4; l++)
                _mm512_store_ps(d + (16 * l + cc) * NUMLA_QLINEAR_P_NR, _mm512_mul_ps(f[l], s));
        }
    }
}

/* y[i][0 .. cols) (+)= Σ_{t < kc} xp[t][i] · pw[t][0 .. cols) for i < mr, one fused
 * multiply-add per t in t order, from y (load) or from 0. */
static inline __attribute__((always_inline)) void
numla_qlinear_micro_(const int mr, int64_t kc, const float *xp, const float *pw, float *y,
                     int64_t ldy, __mmask16 m0, __mmask16 m1, int load)
{
    __m512 c0[NUMLA_QLINEAR_P_MR], c1[NUMLA_QLINEAR_P_MR];
    for (int i = 0; i < mr; i++) {
        c0[i] = load ? _mm512_maskz_loadu_ps(m0, y + i * ldy) : _mm512_setzero_ps();
        c1[i] = load ? _mm512_maskz_loadu_ps(m1, y + i * ldy + 16) : _mm512_setzero_ps();
    }
    for (int64_t t = 0; t < kc; t++) {
        const __m512 w0 = _mm512_load_ps(pw + t * NUMLA_QLINEAR_P_NR);
        const __m512 w1 = _mm512_load_ps(pw + t * NUMLA_QLINEAR_P_NR + 16);
        for (int i = 0; i < mr; i++) {
            const __m512 b = _mm512_set1_ps(xp[t * NUMLA_QLINEAR_P_MR + i]);
            c0[i] = _mm512_fmadd_ps(w0, b, c0[i]);
            c1[i] = _mm512_fmadd_ps(w1, b, c1[i]);
        }
    }
    for (int i = 0; i < mr; i++) {
        _mm512_mask_storeu_ps(y + i * ldy, m0, c0[i]);
        _mm512_mask_storeu_ps(y + i * ldy + 16, m1, c1[i]);
    }
}

static void numla_qlinear_micro_any_(int mr, int64_t kc, const float *xp, const float *pw,
                                     float *y, int64_t ldy, __mmask16 m0, __mmask16 m1, int load)
{
    switch (mr) {
#define NUMLA_QLINEAR_MICRO_CASE(R)                                                                \
    case R:                                                                                        \
        numla_qlinear_micro_(R, kc, xp, pw, y, ldy, m0, m1, load);                                 \
        break;
        NUMLA_QLINEAR_MICRO_CASE(1)
        NUMLA_QLINEAR_MICRO_CASE(2)
        NUMLA_QLINEAR_MICRO_CASE(3)
        NUMLA_QLINEAR_MICRO_CASE(4)
        NUMLA_QLINEAR_MICRO_CASE(5)
        NUMLA_QLINEAR_MICRO_CASE(6)
        NUMLA_QLINEAR_MICRO_CASE(7)
        NUMLA_QLINEAR_MICRO_CASE(8)
        NUMLA_QLINEAR_MICRO_CASE(9)
        NUMLA_QLINEAR_MICRO_CASE(10)
        NUMLA_QLINEAR_MICRO_CASE(11)
        NUMLA_QLINEAR_MICRO_CASE(12)
#undef NUMLA_QLINEAR_MICRO_CASE
    default:
        break;
    }
}

_Static_assert(NUMLA_QLINEAR_P_MR == 12 && NUMLA_QLINEAR_P_NR == 32 && NUMLA_QLINEAR_P_KC % 128 == 0 &&
                   NUMLA_QLINEAR_PANEL_NC % NUMLA_QLINEAR_P_NR == 0,
               "the micro-kernel cases, the two-vector panel and the 64-column dequantization steps");

/* One thread's rows [r0, r1) of y for all m rows of x; panel and xp its scratch. */
static void numla_qlinear_panel_rows_(const numla_qlinear_weight *w, int64_t m, const float *x,
                                      int64_t ldx, float *y, int64_t ldy, int accumulate,
                                      int64_t r0, int64_t r1, float *panel, float *xp)
{
    const int64_t k = w->k, NC = numla_qlinear_panel_nc(w);
    for (int64_t n0 = r0; n0 < r1; n0 += NC) {
        const int64_t nc = r1 - n0 < NC ? r1 - n0 : NC;
        for (int64_t k0 = 0; k0 < k; k0 += NUMLA_QLINEAR_P_KC) {
            const int64_t kc = k - k0 < NUMLA_QLINEAR_P_KC ? k - k0 : NUMLA_QLINEAR_P_KC;
            for (int64_t j = 0; j < nc; j += 16)
                numla_qlinear_dequant16_(w, n0 + j, k0, kc,
                                         panel + (j / NUMLA_QLINEAR_P_NR) * NUMLA_QLINEAR_P_KC * NUMLA_QLINEAR_P_NR + j % NUMLA_QLINEAR_P_NR);
            const int load = accumulate || k0 > 0;
            for (int64_t i0 = 0; i0 < m; i0 += NUMLA_QLINEAR_P_MR) {
                const int mr = m - i0 < NUMLA_QLINEAR_P_MR ? (int)(m - i0) : NUMLA_QLINEAR_P_MR;
                for (int i = 0; i < mr; i++) {
                    const float *xi = x + (i0 + i) * ldx + k0;
                    for (int64_t t = 0; t < kc; t++)
                        xp[t * NUMLA_QLINEAR_P_MR + i] = xi[t];
                }
                for (int64_t j = 0; j < nc; j += NUMLA_QLINEAR_P_NR) {
                    const int64_t cols = nc - j < NUMLA_QLINEAR_P_NR ? nc - j : NUMLA_QLINEAR_P_NR;
                    const __mmask16 m0 = cols >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << cols) - 1);
                    const __mmask16 m1 = cols >= 32 ? (__mmask16)0xFFFF
                                         : cols > 16 ? (__mmask16)((1u << (cols - 16)) - 1) : (__mmask16)0;
                    numla_qlinear_micro_any_(mr, kc, xp, panel + (j / NUMLA_QLINEAR_P_NR) * NUMLA_QLINEAR_P_KC * NUMLA_QLINEAR_P_NR,
                                             y + i0 * ldy + n0 + j, ldy, m0, m1, load);
                }
            }
        }
    }
}

void numla_qlinear_gemm_avx512(const numla_qlinear_weight *w, int64_t m, const float *x,
                               int64_t ldx, float *y, int64_t ldy, int accumulate,
                               void *workspace, int max_threads)
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
        float *wf = (float *)(void *)(base + (size_t)ith * per);
        numla_qlinear_panel_rows_(w, m, x, ldx, y, ldy, accumulate, r0, r1, wf,
                                  wf + numla_qlinear_panel_bytes(w) / sizeof(float));
    }
}
