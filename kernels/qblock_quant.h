/* kernels/qblock_quant.h — making ggml blocks from fp32 weights (quantize at load, --weights
 * q8_0|q4_0|q4_k): scalar references, the rounding the gguf PyPI package's numpy quantizer (and
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
 * Per block of 256 (numla's own min/max rounding: no search over candidate scales as
 * llama.cpp's make_qkx2_quants / make_qx_quants do, so its error is somewhat larger):
 *   Q4_K  sub-block j of 32: lo = min(0, min x), hi = max x, scale_j = (hi - lo) / 15,
 *         min_j = -lo; d = max scale_j / 63, dmin = max min_j / 63 stored fp16 (D, DM);
 *         sc_j = min(63, round(scale_j / D)), m_j = min(63, round(min_j / DM));
 *         q = clamp(round((x + DM·m_j) / (D·sc_j)), 0, 15).
 *         Error: |x - x̂| <= D·sc_j / 2 + 7.5·D + DM / 2 (half a step, plus what rounding sc_j
 *         and m_j moves the range's ends by).
 *   Q6_K  group g of 16: s_g = max |x| / 31; d = max s_g / 127 stored fp16 (D);
 *         sc_g = min(127, round(s_g / D)) (int8); q = clamp(round(x / (D·sc_g)), -32, 31).
 *         Error: |x - x̂| <= D·sc_g / 2 + 15.5·D.
 * Not collective; no allocation.
 */
#ifndef NUMLA_KERNELS_QBLOCK_QUANT_H
#define NUMLA_KERNELS_QBLOCK_QUANT_H

#include <stdint.h>

#include "common/status.h"
#include "kernels/qblock.h"

/* Quantize one row of k values into k / block blocks of `type` (the types whose row in
 * kernels/qblock_types.c names a quantizer: Q8_0, Q4_0: k a multiple of 32;
 * Q4_K, Q6_K: of 256) at dst; UNSUPPORTED for other types, INVALID_ARG for a bad k. */
numla_status numla_qblock_quantize_row_ref(numla_qblock_type type, const float *x, int64_t k,
                                           void *dst);

/* DeepSeek-V4's published FP4 experts (engine/formats/weight_encoding.h NUMLA_ENCODING_FP4) as
 * MXFP4 blocks, losslessly: one row of k elements (k a multiple of 32) from its k / 2 code bytes
 * (element 2j in the low nibble of byte j, 2j + 1 in the high one, e2m1 codes) and k / 32 E8M0
 * scale bytes s (w = e2m1 · 2^(s - 127)) into k / 32 blocks at dst: each keeps its scale byte
 * (MXFP4's d = 2^(s - 128) times twice the e2m1 value: the same w, bit for bit, except that
 * code 8, e2m1's -0, reads as +0 from ggml's integer table) and holds element
 * j in the low nibble of qs[j], j + 16 in the high one (the codes themselves unchanged).
 * INVALID_ARG for a bad k or a scale byte 0xFF (E8M0's NaN), naming the block. */
numla_status numla_qblock_mxfp4_from_e2m1(const uint8_t *codes, const uint8_t *scales, int64_t k,
                                          void *dst);

#endif
