/* engine/model/weights_quantize.c — the 8-bit side of loading (weights_internal.h): reading an
 * fp8/int8 tensor's codes and scale grid from the checkpoint, quantizing a float tensor while
 * loading (--weights fp8|int8, the same values `numla quantize` writes: kernels/quant.h), and
 * dequantizing codes for --weights bf16.
 */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/weights_internal.h"
#include "kernels/quant.h"

numla_qlinear_format numla_weights_q8_format(numla_weight_format f)
{
    return f == NUMLA_WEIGHT_FORMAT_FP8 ? NUMLA_QLINEAR_FP8_BLOCK : NUMLA_QLINEAR_INT8_W8A8;
}

/* Pass 1: codes of rows [r0, r0 + n) (all full_k columns, ld full_k) and the full scale grid
 * (grid_rows, grid_cols) of an 8-bit tensor, from the file or quantized now. *codes_own /
 * *grid are malloc'd by us (codes_own NULL when the codes are the file's). */
numla_status numla_weights_q8_rows(const numla_weights_tensor *d, int64_t r0, int64_t n,
                                   const uint8_t **codes, uint8_t **codes_own, float **grid)
{
    const char *name = d->t->name;
    const int64_t K = d->full_k, gcnt = d->grid_rows * d->grid_cols;
    *codes_own = NULL;
    *grid = malloc((size_t)gcnt * sizeof(float));
    if (!*grid)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "%s: no memory for its scales", name);
    if (d->mode != NUMLA_WEIGHTS_Q8_MAKE) {
        memcpy(*grid, d->scale->data, (size_t)gcnt * sizeof(float));
        *codes = (const uint8_t *)d->t->data + (size_t)r0 * (size_t)K;
        if (d->fmt == NUMLA_QLINEAR_FP8_BLOCK) { /* e4m3 NaN codes: S.1111.111 */
            for (int64_t r = 0; r < n; r++)
                for (int64_t c = 0; c < K; c++)
                    if (((*codes)[r * K + c] & 0x7f) == 0x7f) {
                        free(*grid);
                        *grid = NULL;
                        NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                                   "%s: e4m3 NaN code 0x%02x at row %lld, column %lld", name,
                                   (*codes)[r * K + c], (long long)(r0 + r), (long long)c);
                    }
        }
        return NUMLA_STATUS_OK;
    }
    /* Quantize while loading, exactly as numla quantize does (kernels/quant.h): fp8 scales
     * over the full 128 x 128 blocks the rows touch, int8 over each full row. */
    for (int64_t i = 0; i < gcnt; i++)
        (*grid)[i] = 1.0f;
    uint8_t *q = malloc((size_t)(n > 0 ? n : 1) * (size_t)K);
    if (!q) {
        free(*grid);
        *grid = NULL;
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "%s: no memory to quantize it", name);
    }
    const numla_dtype dt = d->t->dtype;
    const int fp8 = d->fmt == NUMLA_QLINEAR_FP8_BLOCK;
    const int64_t B = NUMLA_QUANT_FP8_BLOCK;
    const int64_t u0 = fp8 ? r0 / B : r0, u1 = fp8 ? (r0 + n + B - 1) / B : r0 + n;
    numla_status bad = NUMLA_STATUS_OK;
    int64_t bad_row = -1;
#pragma omp parallel
    {
        float *buf = malloc((size_t)(fp8 ? B : 1) * (size_t)K * sizeof(float));
#pragma omp for schedule(dynamic, 1)
        for (int64_t u = u0; u < u1; u++) {
            if (!buf) {
#pragma omp critical(numla_weights_quant)
                bad = NUMLA_STATUS_NO_MEMORY;
                continue;
            }
            const int64_t a = fp8 ? u * B : u;
            const int64_t b = fp8 ? (a + B < d->full_n ? a + B : d->full_n) : u + 1;
            for (int64_t r = a; r < b; r++)
                for (int64_t c = 0; c < K; c++)
                    buf[(r - a) * K + c] = numla_load_f32(d->t->data, dt, (size_t)(r * K + c));
            float *sc = *grid + (fp8 ? u * d->grid_cols : u);
            numla_status s1 = fp8 ? numla_quant_fp8_band_scales(b - a, K, buf, K, sc)
                                  : numla_quant_int8_row_scale(K, buf, sc);
            if (s1 != NUMLA_STATUS_OK) {
#pragma omp critical(numla_weights_quant)
                {
                    bad = s1;
                    bad_row = a;
                }
                continue;
            }
            for (int64_t r = a > r0 ? a : r0; r < b && r < r0 + n; r++) {
                if (fp8)
                    numla_quant_fp8_encode_row(K, buf + (r - a) * K, sc, q + (r - r0) * K);
                else
                    numla_quant_int8_encode_row(K, buf, *sc, (int8_t *)(q + (r - r0) * K));
            }
        }
        free(buf);
    }
    if (bad != NUMLA_STATUS_OK) {
        free(q);
        free(*grid);
        *grid = NULL;
        NUMLA_FAIL(bad, "%s: cannot quantize it (rows from %lld: a non-finite weight, or no "
                   "memory)", name, (long long)bad_row);
    }
    *codes = q;
    *codes_own = q;
    return NUMLA_STATUS_OK;
}
/* Dequantized value of code (r, c) of rows starting at global row r0. */
float numla_weights_q8_dequant(const numla_weights_tensor *d, const uint8_t *codes,
                               const float *grid, int64_t r0, int64_t r, int64_t c)
{
    const uint8_t b = codes[(r - r0) * d->full_k + c];
    if (d->fmt == NUMLA_QLINEAR_FP8_BLOCK)
        return numla_qlinear_fp8_to_f32(b) *
               grid[(r / NUMLA_QLINEAR_BLOCK) * d->grid_cols + c / NUMLA_QLINEAR_BLOCK];
    return (float)(int8_t)b * grid[r];
}
