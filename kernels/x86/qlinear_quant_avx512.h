/* kernels/x86/qlinear_quant_avx512.h — the activation quantizations of kernels/qlinear.h,
 * vectorised: W8A8's, shared by the x86 W8A8 variants (kernels/x86/qlinear_avx512vnni.c stores
 * q + 128 as u8 for vpdpbusd, kernels/x86/qlinear_amx.c stores q as s8 for TDPBSSD), bit for
 * bit numla_qlinear_quantize_row_ref (max is exact in any order, the product is the same fp32
 * multiply, and the conversion rounds half to even like the reference); and int8-row's three
 * int8 planes with their output rule, shared by its VNNI rows and GEMM
 * (kernels/x86/qlinear_avx512vnni.c) and its AMX tiles (kernels/x86/qlinear_int8row_amx.c),
 * which is why those two give the same bits. For files built with the avx512 flags or more. */
#ifndef NUMLA_KERNELS_X86_QLINEAR_QUANT_AVX512_H
#define NUMLA_KERNELS_X86_QLINEAR_QUANT_AVX512_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

/* Lanes of x[c .. c + 16) inside [0, k): all, the tail, or none past k. */
static inline __mmask16 numla_qlinear_mask16(int64_t k, int64_t c)
{
    return c >= k ? (__mmask16)0 : k - c >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (k - c)) - 1);
}

/* max_k |x[k]| over [0, k) (exact in any order). */
static inline float numla_qlinear_row_amax_avx512(const float *x, int64_t k)
{
    __m512 vmax = _mm512_setzero_ps();
    for (int64_t c = 0; c < k; c += 16)
        vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_maskz_loadu_ps(numla_qlinear_mask16(k, c), x + c)));
    return _mm512_reduce_max_ps(vmax);
}

/* A row's scale: returns sx = amax / 127 and sets *inv = 127 / amax. */
static inline float numla_qlinear_row_scale_avx512(const float *x, int64_t k, float *inv)
{
    const float amax = fmaxf(numla_qlinear_row_amax_avx512(x, k), 1e-7f);
    *inv = 127.0f / amax;
    return amax / 127.0f;
}

/* q of the 16 values x[0 .. 16) under msk (0 where masked off) as 16 s8 bytes. */
static inline __m128i numla_qlinear_quant16_avx512(const float *x, __mmask16 msk, __m512 vinv)
{
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(msk, x), vinv);
    __m512i q = _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q = _mm512_min_epi32(_mm512_max_epi32(q, _mm512_set1_epi32(-127)), _mm512_set1_epi32(127));
    return _mm512_cvtepi32_epi8(q);
}

/* ---- int8-row's planes ----
 * Per x row, sx = amax / 127 and t = x · (127 / amax) in fp32 (|t| <= 127), then
 *   q1 = rint(t),  q2 = rint((t - q1) · 254),  q3 = rint(((t - q1) · 254 - q2) · 254)
 * (every difference exact in fp32, every rounding to nearest even, each |q| <= 127), so
 * t = q1 + q2/254 + q3/254² + r with |r| <= 2^-17 (the last residual over 254², plus the
 * products' fp32 roundings). Per output, the three int32 sums C_p = Σ_k w_k q_p,k are exact
 * (|C_p| <= 127 · 128 · K < 2^31 for K <= 65536, the packer's bound), and
 *   y = (float)(((C1 · 254² + C2 · 254 + C3) · sx · s) / 254²)   (+ y0 in fp32)
 * in double: the combination is an exact integer below 2^53, then three correctly rounded
 * double steps in that order and one rounding to fp32. So against the dequantized weights in
 * exact arithmetic
 *   |y - y_exact| <= (2^-17 · sx + 2^-23 max|x|) · Σ_k |s w_k| + 2^-24 |y|   (+ the add)
 * with sx = max|x| / 127: about 2^-23 of max|x| · Σ|s w| — the error of an fp32 GEMM's
 * accumulation, made deterministic: the sums are exact integers in any order, so every kernel
 * that takes these planes gives a row the same bits whatever M, the thread count or the path. */
enum { NUMLA_INT8ROW_PLANES = 3 };
#define NUMLA_INT8ROW_BASE 254.0 /* the planes' radix */

/* A row's scale: returns sx = amax / 127, *inv = 127 / amax (amax floored at 1e-30). */
static inline float numla_int8row_scale_row(const float *x, int64_t k, __m512 *inv)
{
    const float amax = fmaxf(numla_qlinear_row_amax_avx512(x, k), 1e-30f);
    *inv = _mm512_set1_ps(127.0f / amax);
    return amax / 127.0f;
}

/* The three planes of x[c .. c + 16) (zeros past k) as 16 s8 bytes each. */
static inline void numla_int8row_quant16(const float *x, int64_t k, int64_t c, __m512 inv,
                                         __m128i q[NUMLA_INT8ROW_PLANES])
{
    enum { RNE = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC };
    const __m512 base = _mm512_set1_ps((float)NUMLA_INT8ROW_BASE);
    const __m512 t = _mm512_mul_ps(_mm512_maskz_loadu_ps(numla_qlinear_mask16(k, c), x + c), inv);
    const __m512 f1 = _mm512_roundscale_ps(t, RNE);
    const __m512 r1 = _mm512_mul_ps(_mm512_sub_ps(t, f1), base);
    const __m512 f2 = _mm512_roundscale_ps(r1, RNE);
    const __m512 r2 = _mm512_mul_ps(_mm512_sub_ps(r1, f2), base);
    const __m512 f3 = _mm512_roundscale_ps(r2, RNE);
    q[0] = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(f1));
    q[1] = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(f2));
    q[2] = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(f3));
}

/* One x row's planes as u8 (q + 128, vpdpbusd's unsigned operand), plane p's kp bytes at
 * xq + p · ld (zeros past k: code 128); returns sx. */
static inline float numla_int8row_planes_row(const float *x, int64_t k, int64_t kp, uint8_t *xq, int64_t ld)
{
    __m512 inv;
    const float sx = numla_int8row_scale_row(x, k, &inv);
    for (int64_t c = 0; c < kp; c += 16) {
        __m128i q[NUMLA_INT8ROW_PLANES];
        numla_int8row_quant16(x, k, c, inv, q);
        for (int p = 0; p < NUMLA_INT8ROW_PLANES; p++)
            _mm_storeu_si128((__m128i *)(void *)(xq + p * ld + c), _mm_xor_si128(q[p], _mm_set1_epi8((char)0x80)));
    }
    return sx;
}

/* The planes' int32 sums of 8 outputs -> double, exactly: C1 · 254² + C2 · 254 + C3. */
static inline __m512d numla_int8row_combine(__m256i c1, __m256i c2, __m256i c3)
{
    const __m512d b = _mm512_set1_pd(NUMLA_INT8ROW_BASE);
    const __m512d hi = _mm512_mul_pd(_mm512_cvtepi32_pd(c1), _mm512_set1_pd(NUMLA_INT8ROW_BASE * NUMLA_INT8ROW_BASE));
    return _mm512_add_pd(_mm512_add_pd(hi, _mm512_mul_pd(_mm512_cvtepi32_pd(c2), b)), _mm512_cvtepi32_pd(c3));
}

/* ((v · sx) · s) / 254² rounded to fp32, the one scaling rule of every planes kernel. */
static inline __m256 numla_int8row_scale(__m512d v, __m512d sx, __m512d s)
{
    v = _mm512_mul_pd(_mm512_mul_pd(v, sx), s);
    return _mm512_cvtpd_ps(_mm512_div_pd(v, _mm512_set1_pd(NUMLA_INT8ROW_BASE * NUMLA_INT8ROW_BASE)));
}

/* 16 outputs from the planes' exact sums cs[p] (offsets removed): sx one x row's scale, s the
 * 16 weight rows' scales. */
static inline __m512 numla_int8row_out16(const __m512i cs[NUMLA_INT8ROW_PLANES], float sx, __m512 s)
{
    const __m512d vsx = _mm512_set1_pd((double)sx);
    const __m512d s0 = _mm512_cvtps_pd(_mm512_castps512_ps256(s));
    const __m512d s1 = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)));
    const __m256 lo = numla_int8row_scale(numla_int8row_combine(_mm512_castsi512_si256(cs[0]),
                                                                _mm512_castsi512_si256(cs[1]),
                                                                _mm512_castsi512_si256(cs[2])),
                                          vsx, s0);
    const __m256 hi = numla_int8row_scale(numla_int8row_combine(_mm512_extracti64x4_epi64(cs[0], 1),
                                                                _mm512_extracti64x4_epi64(cs[1], 1),
                                                                _mm512_extracti64x4_epi64(cs[2], 1)),
                                          vsx, s1);
    return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
}

#endif
