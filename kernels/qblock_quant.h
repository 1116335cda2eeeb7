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
 * Per block of 256 (searched scales, the method of llama.cpp's reference k-quant rows
 * quantize_row_q4_K_ref / quantize_row_q6_K_ref without an importance matrix; round() below
 * rounds half to even):
 *   Q4_K  sub-block j of 32, weights w = rms(sub-block) + |x|: lo = min(0, min x), hi = max x;
 *         the min/max fit (x ≈ s·q + b with b = lo, s = (hi - lo) / 15, q = round((x - lo) /
 *         s)), then 21 trials t = -1, -0.9, ..., 1 in turn, each rounding the codes
 *         round((x - b) · (15 + t) / (hi - b)) from the offset b of the best fit so far and
 *         refitting (s, b) to them by weighted least squares (b held at 0 if it comes out
 *         positive); the least Σ w (x - x̂)² gives scale_j = s, min_j = -b.
 *         d = max scale_j / 63, dmin = max min_j / 63 stored fp16 (D, DM);
 *         sc_j = min(63, round(63 · scale_j / max scale)), m_j likewise from min_j;
 *         q = clamp(round((x + DM·m_j) / (D·sc_j)), 0, 15).
 *         Error: |x - x̂| <= D·sc_j / 2 + 7.5·D + DM / 2 where the codes do not clip (half a
 *         step, plus what rounding sc_j and m_j moves the range by); a fitted scale may clip
 *         the ends of the sub-block's range, where the weighted error says it pays.
 *   Q6_K  group g of 16, m = the value of largest |x|: codes round(x · -(32 + t) / m) clamped
 *         to -32..31 for t = 0, ±0.1, ..., ±0.9, each with its least-squares scale
 *         s = Σ x²·x·q / Σ x²·q² (weights x²); the greatest (Σ x²·x·q)² / Σ x²·q² gives s_g
 *         (signed: m's side takes code -32). S = the s_g of largest |s_g|; d = S / -128 stored
 *         fp16 (D); sc_g = clamp(round(-128 · s_g / S), -128, 127) (int8, S's own group -128);
 *         q = clamp(round(x / (D·sc_g)), -32, 31).
 *         Error: |x - x̂| <= |D·sc_g| / 2 where no code clips.
 * Both are llama.cpp's algorithm, not its bytes: float sums in another order (and FMA
 * contraction where its build allows it) can turn a near-tie of two trials or a code's rounding
 * the other way.
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
