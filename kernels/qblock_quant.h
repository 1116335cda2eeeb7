/* kernels/qblock_quant.h — making ggml blocks from fp32 weights (quantize at load, --weights
 * q8_0|q4_0): scalar references, the rounding the gguf PyPI package's numpy quantizer (and
 * llama.cpp's reference rows) use, so a row quantized here has the bytes that package writes
 * (tests/unit/kernels/test_qblock_quant.c checks it on tests/golden/gguf/quant.gguf).
 *
 * Per block of 32 (x finite):
 *   Q8_0  amax = max |x|; d = amax / 127, id = 1 / d (fp32; 0 when d = 0);
 *         q = round_half_away(x · id); stored d = fp16(d).
 *         Error: |x - fp16(d)·q| <= d/2 + 127·|d - fp16(d)|, with |d - fp16(d)| <=
 *         max(2^-11 d, 2^-25) (2^-25: half the step of fp16's subnormals, d < 2^-14).
 *   Q4_0  m = the first x of largest |x| (its sign kept); d = m / -8, id = 1 / d;
 *         q = min(15, trunc(x · id + 8.5))
 *         (0..15), element j in the low nibble of byte j, j + 16 in the high; stored fp16(d).
 *         Error: |x - fp16(d)·(q - 8)| <= |d| + 8·|d - fp16(d)| (half a step, plus a step on
 *         the side opposite m, where code 15 = +7 steps caps values up to 8 steps), with
 *         |d - fp16(d)| as for Q8_0.
 * Not collective; no allocation.
 */
#ifndef NUMLA_KERNELS_QBLOCK_QUANT_H
#define NUMLA_KERNELS_QBLOCK_QUANT_H

#include <stdint.h>

#include "common/status.h"
#include "kernels/qblock.h"

/* Quantize one row of k values (k a multiple of 32) into k / 32 blocks of `type` (Q8_0 or Q4_0)
 * at dst; UNSUPPORTED for other types, INVALID_ARG for a bad k. */
numla_status numla_qblock_quantize_row_ref(numla_qblock_type type, const float *x, int64_t k,
                                           void *dst);

#endif
