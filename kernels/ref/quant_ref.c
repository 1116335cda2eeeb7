/* kernels/ref/quant_ref.c — scalar 8-bit weight quantization (definitions in kernels/quant.h). */
#include "kernels/quant.h"

#include <math.h>

static numla_status numla_quant_nonfinite_(int64_t row, int64_t col, float v)
{
    NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "quant: weight at row %lld, column %lld is %g: not finite",
               (long long)row, (long long)col, (double)v);
}

numla_status numla_quant_fp8_band_scales(int64_t rows, int64_t k, const float *w, int64_t ldw,
                                         float *scale_inv)
{
    if (rows < 1 || rows > NUMLA_QUANT_FP8_BLOCK || k < 1 || ldw < k)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "quant fp8: band of %lld rows x %lld (ld %lld)",
                   (long long)rows, (long long)k, (long long)ldw);
    const int64_t nb = numla_quant_blocks(k);
    for (int64_t j = 0; j < nb; j++)
        scale_inv[j] = 0.0f;
    for (int64_t r = 0; r < rows; r++) {
        const float *row = w + r * ldw;
        for (int64_t c = 0; c < k; c++) {
            float a = fabsf(row[c]);
            if (!(a <= 3.4028235e38f))
                return numla_quant_nonfinite_(r, c, row[c]);
            float *m = &scale_inv[c / NUMLA_QUANT_FP8_BLOCK];
            *m = a > *m ? a : *m;
        }
    }
    for (int64_t j = 0; j < nb; j++)
        scale_inv[j] = numla_quant_fp8_scale(scale_inv[j]);
    return NUMLA_STATUS_OK;
}

void numla_quant_fp8_encode_row(int64_t k, const float *w, const float *scale_inv, uint8_t *q)
{
    for (int64_t c = 0; c < k; c++)
        q[c] = numla_quant_fp8_code(w[c], scale_inv[c / NUMLA_QUANT_FP8_BLOCK]);
}

numla_status numla_quant_int8_row_scale(int64_t k, const float *w, float *scale)
{
    float m = 0.0f;
    for (int64_t c = 0; c < k; c++) {
        float a = fabsf(w[c]);
        if (!(a <= 3.4028235e38f))
            return numla_quant_nonfinite_(0, c, w[c]);
        m = a > m ? a : m;
    }
    *scale = numla_quant_int8_scale(m);
    return NUMLA_STATUS_OK;
}

void numla_quant_int8_encode_row(int64_t k, const float *w, float scale, int8_t *q)
{
    for (int64_t c = 0; c < k; c++)
        q[c] = numla_quant_int8_code(w[c], scale);
}
