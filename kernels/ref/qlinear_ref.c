/* kernels/ref/qlinear_ref.c — scalar reference of the 8-bit linear layers (kernels/qlinear.h):
 * the oracle of the vector levels, and the level every format falls back to. */
#include "kernels/qlinear_internal.h"

#include <math.h>
#include <omp.h>

/* round(v) to nearest, ties to even, whatever the FPU rounding mode (|v| <= 127.x here). */
static float numla_qlinear_round_half_even_(float v)
{
    float f = floorf(v), d = v - f; /* exact: |v| < 2^23 */
    if (d > 0.5f || (d == 0.5f && fmodf(f, 2.0f) != 0.0f))
        f += 1.0f;
    return f;
}

float numla_qlinear_quantize_row_ref(const float *x, int64_t k, int64_t kp, uint8_t *xq)
{
    float amax = 0.0f;
    for (int64_t c = 0; c < k; c++)
        amax = fmaxf(amax, fabsf(x[c]));
    amax = fmaxf(amax, 1e-7f);
    const float sx = amax / 127.0f, inv = 127.0f / amax;
    for (int64_t c = 0; c < k; c++) {
        float q = numla_qlinear_round_half_even_(x[c] * inv);
        q = fminf(fmaxf(q, -127.0f), 127.0f); /* |x·inv| <= 127 (1 + 2^-23): a no-op guard */
        xq[c] = (uint8_t)((int)q + 128);
    }
    for (int64_t c = k; c < kp; c++)
        xq[c] = 128;
    return sx;
}

static void numla_qlinear_store_(float *y, int accumulate, float v) { *y = accumulate ? *y + v : v; }

void numla_qlinear_forward_ref(const numla_qlinear_weight *w, int64_t m, const float *x, int64_t ldx,
                               float *y, int64_t ldy, int accumulate, void *workspace)
{
    const int64_t n = w->n, k = w->k, kp = w->kp, B = NUMLA_QLINEAR_BLOCK;
    uint8_t *xq = NULL;
    float *sx = NULL;
    if (w->fmt == NUMLA_QLINEAR_INT8_W8A8) {
        xq = numla_qlinear_ws_xq(workspace);
        sx = numla_qlinear_ws_sx(workspace, w, m);
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < m; i++)
            sx[i] = numla_qlinear_quantize_row_ref(x + i * ldx, k, kp, xq + i * kp);
    }
    float lut[256];
    for (int b = 0; b < 256; b++)
        lut[b] = numla_qlinear_fp8_to_f32((uint8_t)b);

#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; r++) {
        const int8_t *wr = w->q + r * kp;
        for (int64_t i = 0; i < m; i++) {
            const float *xi = x + i * ldx;
            float v;
            if (w->fmt == NUMLA_QLINEAR_FP8_BLOCK) {
                const float *s = w->scales + numla_qlinear_grid_row(w, r) * w->scale_cols;
                v = 0.0f;
                for (int64_t b = 0; b * B < k; b++) {
                    float blk = 0.0f;
                    for (int64_t c = b * B; c < k && c < (b + 1) * B; c++)
                        blk += lut[(uint8_t)wr[c]] * xi[c];
                    v += blk * s[b];
                }
            } else if (w->fmt == NUMLA_QLINEAR_INT8_ROW) {
                float t = 0.0f;
                for (int64_t c = 0; c < k; c++)
                    t += (float)wr[c] * xi[c];
                v = t * w->scales[r];
            } else {
                const uint8_t *qi = xq + i * kp;
                int32_t acc = 0;
                for (int64_t c = 0; c < k; c++)
                    acc += ((int32_t)qi[c] - 128) * wr[c];
                float *yo = y + i * ldy + r;
                *yo = numla_qlinear_w8a8_out(acc, sx[i], w->scales[r], *yo, accumulate);
                continue;
            }
            numla_qlinear_store_(y + i * ldy + r, accumulate, v);
        }
    }
}
