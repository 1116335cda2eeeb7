/* kernels/x86/qlinear_quant_avx512.h — the W8A8 activation quantization of kernels/qlinear.h,
 * vectorised, shared by the x86 W8A8 variants (kernels/x86/qlinear_avx512vnni.c stores q + 128
 * as u8 for vpdpbusd, kernels/x86/qlinear_amx.c stores q as s8 for TDPBSSD). Bit for bit
 * numla_qlinear_quantize_row_ref: max is exact in any order, the product is the same fp32
 * multiply, and the conversion rounds half to even like the reference. For files built with
 * the avx512 flags or more. */
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

/* A row's scale: returns sx = amax / 127 and sets *inv = 127 / amax. */
static inline float numla_qlinear_row_scale_avx512(const float *x, int64_t k, float *inv)
{
    __m512 vmax = _mm512_setzero_ps();
    for (int64_t c = 0; c < k; c += 16)
        vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_maskz_loadu_ps(numla_qlinear_mask16(k, c), x + c)));
    const float amax = fmaxf(_mm512_reduce_max_ps(vmax), 1e-7f);
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

#endif
