/* kernels/quant.c — whole-matrix 8-bit quantization and dequantization over the row functions
 * of kernels/ref/quant_ref.c (kernels/quant.h). */
#include "kernels/quant.h"

#include <stdio.h>

numla_status numla_quant_fp8_block(int64_t n, int64_t k, const float *w, int64_t ldw, uint8_t *q,
                                   float *scale_inv)
{
    if (n < 1 || k < 1 || ldw < k || !w || !q || !scale_inv)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "quant fp8: bad matrix %lld x %lld (ld %lld)",
                   (long long)n, (long long)k, (long long)ldw);
    const int64_t nb = numla_quant_blocks(k);
    for (int64_t r0 = 0; r0 < n; r0 += NUMLA_QUANT_FP8_BLOCK) {
        int64_t rows = n - r0 < NUMLA_QUANT_FP8_BLOCK ? n - r0 : NUMLA_QUANT_FP8_BLOCK;
        float *s = scale_inv + (r0 / NUMLA_QUANT_FP8_BLOCK) * nb;
        numla_status st = numla_quant_fp8_band_scales(rows, k, w + r0 * ldw, ldw, s);
        if (st != NUMLA_STATUS_OK) {
            char why[512];
            snprintf(why, sizeof why, "%s", numla_error_message());
            NUMLA_FAIL(st, "quant fp8: band at row %lld of a %lld x %lld weight: %s",
                       (long long)r0, (long long)n, (long long)k, why);
        }
        for (int64_t r = r0; r < r0 + rows; r++)
            numla_quant_fp8_encode_row(k, w + r * ldw, s, q + r * k);
    }
    return NUMLA_STATUS_OK;
}

numla_status numla_quant_int8_rows(int64_t n, int64_t k, const float *w, int64_t ldw, int8_t *q,
                                   float *scale)
{
    if (n < 1 || k < 1 || ldw < k || !w || !q || !scale)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "quant int8: bad matrix %lld x %lld (ld %lld)",
                   (long long)n, (long long)k, (long long)ldw);
    for (int64_t r = 0; r < n; r++) {
        numla_status st = numla_quant_int8_row_scale(k, w + r * ldw, &scale[r]);
        if (st != NUMLA_STATUS_OK) {
            char why[512];
            snprintf(why, sizeof why, "%s", numla_error_message());
            NUMLA_FAIL(st, "quant int8: row %lld of a %lld x %lld weight: %s", (long long)r,
                       (long long)n, (long long)k, why);
        }
        numla_quant_int8_encode_row(k, w + r * ldw, scale[r], q + r * k);
    }
    return NUMLA_STATUS_OK;
}

void numla_dequant_fp8_block(int64_t n, int64_t k, const uint8_t *q, const float *scale_inv,
                             float *out)
{
    const int64_t nb = numla_quant_blocks(k);
    for (int64_t r = 0; r < n; r++) {
        const float *s = scale_inv + (r / NUMLA_QUANT_FP8_BLOCK) * nb;
        for (int64_t c = 0; c < k; c++)
            out[r * k + c] = numla_e4m3_to_f32(q[r * k + c]) * s[c / NUMLA_QUANT_FP8_BLOCK];
    }
}

void numla_dequant_int8_rows(int64_t n, int64_t k, const int8_t *q, const float *scale,
                             float *out)
{
    for (int64_t r = 0; r < n; r++)
        for (int64_t c = 0; c < k; c++)
            out[r * k + c] = (float)q[r * k + c] * scale[r];
}
