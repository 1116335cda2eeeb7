/* kernels/x86/qlinear_avx512vnni.c — W8A8 int8 linear layers with vpdpbusd (AVX512-VNNI).
 *
 * Activations are quantized per row (the rule of kernels/qlinear.h, bit for bit the reference)
 * into the workspace as u8 = q + 128, because vpdpbusd multiplies u8 by s8; the offset adds
 * 128 · Σ_k w[r][k], which the row sums computed at pack time take back out. The padding
 * of both operands is harmless: weights are zero there. */
#include "kernels/qlinear_internal.h"

#include <immintrin.h>
#include <math.h>
#include <omp.h>

enum { NUMLA_QLINEAR_VNNI_MR = 4 };

/* numla_qlinear_quantize_row_ref, vectorised: max is exact in any order, the product is the
 * same fp32 multiply, and the conversion rounds half to even like the reference. */
static float numla_qlinear_quantize_row_vnni_(const float *x, int64_t k, int64_t kp, uint8_t *xq)
{
    __m512 vmax = _mm512_setzero_ps();
    for (int64_t c = 0; c < k; c += 16) {
        __mmask16 msk = k - c >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (k - c)) - 1);
        vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_maskz_loadu_ps(msk, x + c)));
    }
    float amax = fmaxf(_mm512_reduce_max_ps(vmax), 1e-7f);
    const float sx = amax / 127.0f, inv = 127.0f / amax;
    const __m512 vinv = _mm512_set1_ps(inv);
    const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127), off = _mm512_set1_epi32(128);
    int64_t c = 0;
    for (; c < k; c += 16) {
        __mmask16 msk = k - c >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (k - c)) - 1);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(msk, x + c), vinv);
        __m512i q = _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q = _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(q, lo), hi), off);
        _mm_storeu_si128((__m128i *)(void *)(xq + c), _mm512_cvtepi32_epi8(q));
    }
    for (; c < kp; c++)
        xq[c] = 128;
    return sx;
}

static inline __attribute__((always_inline)) void
numla_qlinear_vnni_tile_(const numla_qlinear_weight *w, int64_t r, const uint8_t *xq, int64_t kp,
                         const int mr, int32_t *out)
{
    enum { A = 2 };
    const int8_t *wr = w->q + r * kp;
    __m512i a[NUMLA_QLINEAR_VNNI_MR][A];
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < A; j++)
            a[i][j] = _mm512_setzero_si512();
    int64_t c = 0;
    for (; c + 128 <= kp; c += 128)
        for (int j = 0; j < A; j++) {
            __m512i wv = _mm512_load_si512((const void *)(wr + c + 64 * j));
            for (int i = 0; i < mr; i++)
                a[i][j] = _mm512_dpbusd_epi32(a[i][j], _mm512_load_si512((const void *)(xq + i * kp + c + 64 * j)), wv);
        }
    if (c < kp) {
        __m512i wv = _mm512_load_si512((const void *)(wr + c));
        for (int i = 0; i < mr; i++)
            a[i][0] = _mm512_dpbusd_epi32(a[i][0], _mm512_load_si512((const void *)(xq + i * kp + c)), wv);
    }
    for (int i = 0; i < mr; i++)
        out[i] = _mm512_reduce_add_epi32(_mm512_add_epi32(a[i][0], a[i][1])) - 128 * w->row_sums[r];
}

void numla_qlinear_forward_avx512vnni(const numla_qlinear_weight *w, int64_t m, const float *x,
                                      int64_t ldx, float *y, int64_t ldy, int accumulate,
                                      void *workspace)
{
    uint8_t *xq = numla_qlinear_ws_xq(workspace);
    float *sx = numla_qlinear_ws_sx(workspace, w, m);
    const int64_t kp = w->kp;
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int64_t i = 0; i < m; i++)
            sx[i] = numla_qlinear_quantize_row_vnni_(x + i * ldx, w->k, kp, xq + i * kp);
        int64_t r0, r1;
        numla_qlinear_split(w->n, omp_get_thread_num(), omp_get_num_threads(), &r0, &r1);
        int32_t out[NUMLA_QLINEAR_VNNI_MR];
        for (int64_t r = r0; r < r1; r++)
            for (int64_t i0 = 0; i0 < m; i0 += NUMLA_QLINEAR_VNNI_MR) {
                const uint8_t *xi = xq + i0 * kp;
                const int64_t mr = m - i0 < NUMLA_QLINEAR_VNNI_MR ? m - i0 : NUMLA_QLINEAR_VNNI_MR;
                switch (mr) {
                case 1: numla_qlinear_vnni_tile_(w, r, xi, kp, 1, out); break;
                case 2: numla_qlinear_vnni_tile_(w, r, xi, kp, 2, out); break;
                case 3: numla_qlinear_vnni_tile_(w, r, xi, kp, 3, out); break;
                default: numla_qlinear_vnni_tile_(w, r, xi, kp, 4, out); break;
                }
                for (int64_t i = 0; i < mr; i++) {
                    float *yo = y + (i0 + i) * ldy + r;
                    *yo = numla_qlinear_w8a8_out(out[i], sx[i0 + i], w->scales[r], *yo, accumulate);
                }
            }
    }
}
