/* kernels/x86/qlinear_avx512.c — fp8-block and int8-row linear layers on AVX-512: each thread
 * streams its rows of 1-byte weights once, widens them to fp32 in registers and multiplies
 * tiles of NUMLA_QLINEAR_NW rows by NUMLA_QLINEAR_MR rows of x, or 2 x 4 for a few more rows
 * of x (a decode GEMV / skinny GEMM; the weight rows stay in L1 across the x tiles). Large M
 * widens each weight M / 2 times: prefill is the AMX variant's job (not written yet).
 *
 * e4m3 -> fp32 without a table: the byte's 7 magnitude bits, shifted left by 7, are an fp16
 * with the same mantissa and the exponent field e read with bias 15 instead of 7 (subnormals
 * included, which vcvtph2ps converts exactly, DAZ or not), so the fp16 is the value · 2^-8; the sign
 * moves from bit 14 to 15 by sign-extending the byte first and clearing bit 14. The 2^8 goes
 * into the block scale (exact: a power of two). */
#include "kernels/qlinear_internal.h"

#include <immintrin.h>
#include <omp.h>

enum {
    NUMLA_QLINEAR_NW = 4, /* weight rows per tile: each x load feeds 4 FMAs, so x (43 KiB at
                             K = 10944, past L1) is read from L2 once per 4 rows, not per row */
    NUMLA_QLINEAR_MR = 2, /* x rows per tile: 4 x 2 accumulators + 4 x 2 totals in registers */
    NUMLA_QLINEAR_WIDE_NW = 2, /* M in [WIDE_MR, WIDE_MAX_M]: 2 weight rows x 4 x rows, so */
    NUMLA_QLINEAR_WIDE_MR = 4, /* each widened weight feeds 4 FMAs (widening is the cost) */
    NUMLA_QLINEAR_WIDE_MAX_M = 12, /* past this, reading x from L2 once per 2 weight rows costs
                                      more than the widening saved (measured on Zen 5) */
};

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
                    const int nw, const int mr, const int fp8, float out[NUMLA_QLINEAR_NW][NUMLA_QLINEAR_WIDE_MR])
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
            for (int j = 0; j < nw; j++)
                _mm_prefetch((const char *)(pf[j] + c), _MM_HINT_T0);
            for (int h = 0; h < 64; h += 32) {
                __m512 x0[NUMLA_QLINEAR_WIDE_MR], x1[NUMLA_QLINEAR_WIDE_MR];
                for (int i = 0; i < mr; i++) {
                    x0[i] = _mm512_loadu_ps(x + i * ldx + c + h);
                    x1[i] = _mm512_loadu_ps(x + i * ldx + c + h + 16);
                }
                for (int j = 0; j < nw; j++) {
                    __m512 w0, w1;
                    if (fp8) {
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
                __m512 wv = numla_qlinear_widen_(wr[j] + c, fp8);
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
                numla_qlinear_tile_(w, r, xi, ldx, NUMLA_QLINEAR_NW, NUMLA_QLINEAR_MR, fp8, out);
            else if (nw == NUMLA_QLINEAR_NW)
                numla_qlinear_tile_(w, r, xi, ldx, NUMLA_QLINEAR_NW, 1, fp8, out);
            else if (nw == NUMLA_QLINEAR_WIDE_NW && mr == NUMLA_QLINEAR_WIDE_MR)
                numla_qlinear_tile_(w, r, xi, ldx, NUMLA_QLINEAR_WIDE_NW, NUMLA_QLINEAR_WIDE_MR, fp8, out);
            else if (nw == NUMLA_QLINEAR_WIDE_NW)
                numla_qlinear_tile_(w, r, xi, ldx, NUMLA_QLINEAR_WIDE_NW, 1, fp8, out);
            else if (mr == NUMLA_QLINEAR_WIDE_MR)
                numla_qlinear_tile_(w, r, xi, ldx, 1, NUMLA_QLINEAR_WIDE_MR, fp8, out);
            else if (mr == NUMLA_QLINEAR_MR)
                numla_qlinear_tile_(w, r, xi, ldx, 1, NUMLA_QLINEAR_MR, fp8, out);
            else
                numla_qlinear_tile_(w, r, xi, ldx, 1, 1, fp8, out);
            for (int j = 0; j < nw; j++)
                for (int i = 0; i < mr; i++) {
                    float *yo = y + (i0 + i) * ldy + r + j;
                    *yo = accumulate ? *yo + out[j][i] : out[j][i];
                }
        }
        r += nw;
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
        if (fp8)
            numla_qlinear_rows_(w, m, x, ldx, y, ldy, accumulate, r0, r1, 1);
        else
            numla_qlinear_rows_(w, m, x, ldx, y, ldy, accumulate, r0, r1, 0);
    }
}
