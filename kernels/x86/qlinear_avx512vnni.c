/* kernels/x86/qlinear_avx512vnni.c — W8A8 int8 linear layers with vpdpbusd (AVX512-VNNI).
 *
 * Activations are quantized per row (the rule of kernels/qlinear.h, bit for bit the reference)
 * into the workspace as u8 = q + 128, because vpdpbusd multiplies u8 by s8; the offset adds
 * 128 · Σ_k w[r][k], which the row sums computed at pack time take back out. The padding
 * of both operands is harmless: weights are zero there. */
#include "kernels/qlinear_internal.h"

#include <immintrin.h>
#include <omp.h>

#include "kernels/x86/qlinear_quant_avx512.h"

enum {
    NUMLA_QLINEAR_VNNI_NW = 4, /* weight rows per tile */
    NUMLA_QLINEAR_VNNI_MR = 4, /* x rows per tile: 16 accumulators, 8 loads per 16 vpdpbusd */
};

/* numla_qlinear_quantize_row_ref, vectorised (kernels/x86/qlinear_quant_avx512.h); q + 128 is
 * q with its sign bit flipped. */
static float numla_qlinear_quantize_row_vnni_(const float *x, int64_t k, int64_t kp, uint8_t *xq)
{
    float inv;
    const float sx = numla_qlinear_row_scale_avx512(x, k, &inv);
    const __m512 vinv = _mm512_set1_ps(inv);
    const __m128i off = _mm_set1_epi8((char)0x80);
    for (int64_t c = 0; c < kp; c += 16) {
        const __m128i q = numla_qlinear_quant16_avx512(x + c, numla_qlinear_mask16(k, c), vinv);
        _mm_storeu_si128((__m128i *)(void *)(xq + c), _mm_xor_si128(q, off));
    }
    return sx;
}

/* out[j][i] = Σ_k q[i][k] w[r + j][k] for j < nw, i < mr (compile-time constants after
 * inlining): per 64 bytes, nw weight loads and mr x loads feed nw x mr vpdpbusd, one chain
 * each (M = 1 still has nw = 4 independent chains). */
static inline __attribute__((always_inline)) void
numla_qlinear_vnni_tile_(const numla_qlinear_weight *w, int64_t r, const uint8_t *xq, int64_t kp,
                         const int nw, const int mr, int32_t out[NUMLA_QLINEAR_VNNI_NW][NUMLA_QLINEAR_VNNI_MR])
{
    __m512i a[NUMLA_QLINEAR_VNNI_NW][NUMLA_QLINEAR_VNNI_MR];
    for (int j = 0; j < nw; j++)
        for (int i = 0; i < mr; i++)
            a[j][i] = _mm512_setzero_si512();
    /* Per 64 bytes, one prefetch per row of the next tile's line at the same column: a tile's
     * rows are one contiguous nw · kp span, and rows of 2 KiB are too short for the hardware
     * prefetcher to ramp up on each (as in kernels/x86/qlinear_avx512.c). */
    const int8_t *wr = w->q + r * kp;
    const int8_t *pf = r + 3 * nw <= w->n ? wr + 2 * nw * kp : wr;
    for (int64_t c = 0; c < kp; c += 64) {
        for (int j = 0; j < nw; j++)
            _mm_prefetch((const char *)(pf + j * kp + c), _MM_HINT_T0);
        __m512i xv[NUMLA_QLINEAR_VNNI_MR];
        for (int i = 0; i < mr; i++)
            xv[i] = _mm512_load_si512((const void *)(xq + i * kp + c));
        for (int j = 0; j < nw; j++) {
            __m512i wv = _mm512_load_si512((const void *)(wr + j * kp + c));
            for (int i = 0; i < mr; i++)
                a[j][i] = _mm512_dpbusd_epi32(a[j][i], xv[i], wv);
        }
    }
    for (int j = 0; j < nw; j++)
        for (int i = 0; i < mr; i++)
            out[j][i] = _mm512_reduce_add_epi32(a[j][i]) - 128 * w->row_sums[r + j];
}

/* Σ_k q[k] w[r][k] for one row (M = 1): the rows are read one after another, so each thread's
 * weights are one sequential stream, with four accumulator chains and a prefetch a fixed
 * distance ahead in that stream. */
static inline int32_t numla_qlinear_vnni_row_(const int8_t *wr, const int8_t *end,
                                              const uint8_t *xq, int64_t kp)
{
    enum { AHEAD = 8192 };
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    int64_t c = 0;
    for (; c + 256 <= kp; c += 256) {
        for (int l = 0; l < 256; l += 64)
            if (wr + c + l + AHEAD < end)
                _mm_prefetch((const char *)(wr + c + l + AHEAD), _MM_HINT_T0);
        a0 = _mm512_dpbusd_epi32(a0, _mm512_load_si512((const void *)(xq + c)),
                                 _mm512_load_si512((const void *)(wr + c)));
        a1 = _mm512_dpbusd_epi32(a1, _mm512_load_si512((const void *)(xq + c + 64)),
                                 _mm512_load_si512((const void *)(wr + c + 64)));
        a2 = _mm512_dpbusd_epi32(a2, _mm512_load_si512((const void *)(xq + c + 128)),
                                 _mm512_load_si512((const void *)(wr + c + 128)));
        a3 = _mm512_dpbusd_epi32(a3, _mm512_load_si512((const void *)(xq + c + 192)),
                                 _mm512_load_si512((const void *)(wr + c + 192)));
    }
    for (; c < kp; c += 64) {
        if (wr + c + AHEAD < end)
            _mm_prefetch((const char *)(wr + c + AHEAD), _MM_HINT_T0);
        a0 = _mm512_dpbusd_epi32(a0, _mm512_load_si512((const void *)(xq + c)),
                                 _mm512_load_si512((const void *)(wr + c)));
    }
    return _mm512_reduce_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)));
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
        int32_t out[NUMLA_QLINEAR_VNNI_NW][NUMLA_QLINEAR_VNNI_MR];
        if (m == 1) { /* a GEMV: one weight stream per thread */
            const int8_t *end = w->q + r1 * kp;
            for (int64_t r = r0; r < r1; r++) {
                const int32_t acc = numla_qlinear_vnni_row_(w->q + r * kp, end, xq, kp) -
                                    128 * w->row_sums[r];
                y[r] = numla_qlinear_w8a8_out(acc, sx[0], w->scales[r], y[r], accumulate);
            }
            r0 = r1;
        }
        for (int64_t r = r0; r < r1;) {
            const int nw = r1 - r >= NUMLA_QLINEAR_VNNI_NW ? NUMLA_QLINEAR_VNNI_NW : 1;
            for (int64_t i0 = 0, mr; i0 < m; i0 += mr) {
                const uint8_t *xi = xq + i0 * kp;
                mr = m - i0 >= NUMLA_QLINEAR_VNNI_MR ? NUMLA_QLINEAR_VNNI_MR : 1;
                if (nw == NUMLA_QLINEAR_VNNI_NW && mr == NUMLA_QLINEAR_VNNI_MR)
                    numla_qlinear_vnni_tile_(w, r, xi, kp, NUMLA_QLINEAR_VNNI_NW, NUMLA_QLINEAR_VNNI_MR, out);
                else if (nw == NUMLA_QLINEAR_VNNI_NW)
                    numla_qlinear_vnni_tile_(w, r, xi, kp, NUMLA_QLINEAR_VNNI_NW, 1, out);
                else if (mr == NUMLA_QLINEAR_VNNI_MR)
                    numla_qlinear_vnni_tile_(w, r, xi, kp, 1, NUMLA_QLINEAR_VNNI_MR, out);
                else
                    numla_qlinear_vnni_tile_(w, r, xi, kp, 1, 1, out);
                for (int j = 0; j < nw; j++)
                    for (int i = 0; i < mr; i++) {
                        float *yo = y + (i0 + i) * ldy + r + j;
                        *yo = numla_qlinear_w8a8_out(out[j][i], sx[i0 + i], w->scales[r + j], *yo, accumulate);
                    }
            }
            r += nw;
        }
    }
}
