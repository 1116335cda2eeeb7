/* kernels/quant.h — 8-bit weight quantization as the published checkpoints define it.
 *
 * FP8 (DeepSeek-V3/R1 checkpoints, quant_method "fp8", fmt "e4m3", weight_block_size
 * [128, 128]): a (N, K) weight is cut into 128x128 blocks (the last ones shorter when N or K
 * is not a multiple of 128). Block (i, j) has scale_inv[i][j] = amax / 448 in fp32 and codes
 * e4m3fn(w / scale_inv) (an fp32 division, then torch's rounding: common/dtype.h), as
 * DeepSeek's weight_quant kernel (inference/kernel.py) computes them; dequantized
 * w' = float(code) * scale_inv (their weight_dequant). scale_inv is F32 (ceil(N/128),
 * ceil(K/128)).
 *
 * INT8 (SGLang "w8a8_int8", the "Channel-INT8" DeepSeek checkpoints): one scale per output row,
 * scale = amax / 127 in fp32, codes clamp(round_half_even(w / scale), -127, 127) (the
 * weight_quant of Meituan's bf16_cast_channel_int8.py, evaluated in fp32); dequantized
 * w' = code * scale. scale is F32 (N, 1).
 *
 * An all-zero block or row (amax 0, or amax so small that amax / 448 underflows to 0) gets
 * scale 1 and all-zero codes. The reference scripts would divide 0 by 0 there (NaN codes, a
 * zero scale), which loaders reject; codes 0 with scale 1 dequantize to the same zeros.
 * A non-finite weight is INVALID_ARG naming its row and column: a scale cannot represent it.
 *
 * Pure scalar functions (kernels/ref/quant_ref.c), always compiled; no allocation. Weights
 * come in as fp32 rows with a leading dimension, so callers can feed any source dtype.
 */
#ifndef NUMLA_KERNELS_QUANT_H
#define NUMLA_KERNELS_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/status.h"

enum { NUMLA_QUANT_FP8_BLOCK = 128 };
#define NUMLA_QUANT_FP8_MAX 448.0f
#define NUMLA_QUANT_INT8_MAX 127.0f

/* Number of 128-wide blocks covering n. */
static inline int64_t numla_quant_blocks(int64_t n)
{
    return (n + NUMLA_QUANT_FP8_BLOCK - 1) / NUMLA_QUANT_FP8_BLOCK;
}

/* Scale from a block's (row's) largest |w|: amax / 448 (/ 127), or 1 when that is 0. */
static inline float numla_quant_fp8_scale(float amax)
{
    float s = amax / NUMLA_QUANT_FP8_MAX;
    return s > 0.0f ? s : 1.0f;
}
static inline float numla_quant_int8_scale(float amax)
{
    float s = amax / NUMLA_QUANT_INT8_MAX;
    return s > 0.0f ? s : 1.0f;
}

/* One weight's code under its scale. */
static inline uint8_t numla_quant_fp8_code(float w, float scale_inv)
{
    return numla_f32_to_e4m3(w / scale_inv);
}
static inline int8_t numla_quant_int8_code(float w, float scale)
{
    float r = __builtin_rintf(w / scale); /* the current rounding mode: nearest even */
    return (int8_t)(r < -NUMLA_QUANT_INT8_MAX ? -NUMLA_QUANT_INT8_MAX
                    : r > NUMLA_QUANT_INT8_MAX ? NUMLA_QUANT_INT8_MAX : r);
}

/* FP8, one band of `rows` (1..128) rows of a (rows, k) weight w (leading dimension ldw):
 * scale_inv[j] for each of the ceil(k/128) blocks of the band. */
numla_status numla_quant_fp8_band_scales(int64_t rows, int64_t k, const float *w, int64_t ldw,
                                         float *scale_inv);
/* FP8 codes of one row of k weights, given its band's ceil(k/128) scales. */
void numla_quant_fp8_encode_row(int64_t k, const float *w, const float *scale_inv, uint8_t *q);

/* INT8: scale of one row of k weights (INVALID_ARG on a non-finite weight). */
numla_status numla_quant_int8_row_scale(int64_t k, const float *w, float *scale);
/* INT8 codes of one row, given its scale. */
void numla_quant_int8_encode_row(int64_t k, const float *w, float scale, int8_t *q);

/* Whole matrices: w (n, k) with leading dimension ldw -> codes q (n, k) packed, scales
 * (ceil(n/128), ceil(k/128)) for fp8 and (n) for int8. */
numla_status numla_quant_fp8_block(int64_t n, int64_t k, const float *w, int64_t ldw, uint8_t *q,
                                   float *scale_inv);
numla_status numla_quant_int8_rows(int64_t n, int64_t k, const float *w, int64_t ldw, int8_t *q,
                                   float *scale);

/* Dequantization: out (n, k) packed fp32. */
void numla_dequant_fp8_block(int64_t n, int64_t k, const uint8_t *q, const float *scale_inv,
                             float *out);
void numla_dequant_int8_rows(int64_t n, int64_t k, const int8_t *q, const float *scale,
                             float *out);

#endif
