/* kernels/x86/qlinear_avx512.c — fp8-block and int8-row linear layers on AVX-512: each thread
 * streams its rows of 1-byte weights once, widens them to fp32 in registers and multiplies
 * them with up to NUMLA_QLINEAR_MR rows of x (a decode GEMV / skinny GEMM; the weight row stays
 * in L1 across the x tiles).
 *
 * e4m3 -> fp32 without a table: the byte's 7 magnitude bits, shifted left by 7, are an fp16
 * with the same mantissa and the exponent field e read with bias 15 instead of 7 (subnormals
 * included, which vcvtph2ps converts exactly), so the fp16 is the value · 2^-8; the sign
 * moves from bit 14 to 15 by sign-extending the byte first and clearing bit 14. The 2^8 goes
 * into the block scale (exact: a power of two). */
#include "kernels/qlinear_internal.h"

#include <immintrin.h>
#include <omp.h>

enum {
    NUMLA_QLINEAR_MR = 4, /* x rows per tile: 4 x 2 accumulators + 4 totals stay in registers */
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

/* out[i] = row r of W · x row i, for i < mr (a compile-time constant after inlining). fp8:
 * block by block, each block's sum times its scale; int8: one block, times the row scale. A
 * (accumulators per x row) gives M = 1 four independent FMA chains. */
static inline __attribute__((always_inline)) void
numla_qlinear_tile_(const numla_qlinear_weight *w, int64_t r, const float *x, int64_t ldx,
                    const int mr, const int fp8, float *out)
{
    enum { A = 4 };
    const int na = mr == 1 ? 4 : 2;
    const int64_t k = w->k, B = fp8 ? NUMLA_QLINEAR_BLOCK : w->kp;
    const int8_t *wr = w->q + r * w->kp;
    const float *s = fp8 ? w->scales + numla_qlinear_grid_row(w, r) * w->scale_cols : NULL;
    __m512 tot[NUMLA_QLINEAR_MR];
    for (int i = 0; i < mr; i++)
        tot[i] = _mm512_setzero_ps();
    for (int64_t k0 = 0; k0 < k; k0 += B) {
        const int64_t k1 = k0 + B < k ? k0 + B : k;
        __m512 a[NUMLA_QLINEAR_MR][A];
        for (int i = 0; i < mr; i++)
            for (int j = 0; j < na; j++)
                a[i][j] = _mm512_setzero_ps();
        int64_t c = k0;
        for (; c + 16 * na <= k1; c += 16 * na)
            for (int j = 0; j < na; j++) {
                __m512 wv = numla_qlinear_widen_(wr + c + 16 * j, fp8);
                for (int i = 0; i < mr; i++)
                    a[i][j] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + i * ldx + c + 16 * j), a[i][j]);
            }
        /* The rest of the block, 16 at a time; the packed row is zero-padded to a multiple of
         * 64 bytes, so only x needs the mask. */
        for (; c < k1; c += 16) {
            __mmask16 msk = k1 - c >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (k1 - c)) - 1);
            __m512 wv = numla_qlinear_widen_(wr + c, fp8);
            for (int i = 0; i < mr; i++)
                a[i][0] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(msk, x + i * ldx + c), a[i][0]);
        }
        const __m512 sv = _mm512_set1_ps(fp8 ? s[k0 / NUMLA_QLINEAR_BLOCK] * 256.0f : 1.0f);
        for (int i = 0; i < mr; i++) {
            __m512 blk = a[i][0];
            for (int j = 1; j < na; j++)
                blk = _mm512_add_ps(blk, a[i][j]);
            tot[i] = fp8 ? _mm512_fmadd_ps(blk, sv, tot[i]) : _mm512_add_ps(blk, tot[i]);
        }
    }
    for (int i = 0; i < mr; i++)
        out[i] = _mm512_reduce_add_ps(tot[i]) * (fp8 ? 1.0f : w->scales[r]);
}

static void numla_qlinear_rows_(const numla_qlinear_weight *w, int64_t m, const float *x,
                                int64_t ldx, float *y, int64_t ldy, int accumulate, int64_t r0,
                                int64_t r1, const int fp8)
{
    float out[NUMLA_QLINEAR_MR];
    for (int64_t r = r0; r < r1; r++)
        for (int64_t i0 = 0; i0 < m; i0 += NUMLA_QLINEAR_MR) {
            const float *xi = x + i0 * ldx;
            const int64_t mr = m - i0 < NUMLA_QLINEAR_MR ? m - i0 : NUMLA_QLINEAR_MR;
            switch (mr) {
            case 1: numla_qlinear_tile_(w, r, xi, ldx, 1, fp8, out); break;
            case 2: numla_qlinear_tile_(w, r, xi, ldx, 2, fp8, out); break;
            case 3: numla_qlinear_tile_(w, r, xi, ldx, 3, fp8, out); break;
            default: numla_qlinear_tile_(w, r, xi, ldx, 4, fp8, out); break;
            }
            for (int64_t i = 0; i < mr; i++) {
                float *yo = y + (i0 + i) * ldy + r;
                *yo = accumulate ? *yo + out[i] : out[i];
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
        if (fp8)
            numla_qlinear_rows_(w, m, x, ldx, y, ldy, accumulate, r0, r1, 1);
        else
            numla_qlinear_rows_(w, m, x, ldx, y, ldy, accumulate, r0, r1, 0);
    }
}
