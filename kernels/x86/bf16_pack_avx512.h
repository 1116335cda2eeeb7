/* kernels/x86/bf16_pack_avx512.h — the register-level packing the AMX kernels share (MLA
 * attention, expanded-form prefill): split fp32 into bf16 hi + lo, and transpose 16 x 16 words
 * into the tile layouts (kernels/x86/transpose16_avx512.h). Include from files built with the avx512bf16 flags. */
#ifndef NUMLA_KERNELS_X86_BF16_PACK_AVX512_H
#define NUMLA_KERNELS_X86_BF16_PACK_AVX512_H

#include <immintrin.h>

#include "kernels/x86/transpose16_avx512.h"

/* x0 (elements 0-15), x1 (16-31) -> hi = bf16(x) and lo = bf16(x - hi), each 32 bf16 in element
 * order, i.e. 16 words of consecutive pairs. |x - hi - lo| <= 2^-17 |x|. */
static inline __attribute__((always_inline)) void
numla_x86_split_bf16(__m512 x0, __m512 x1, __m512i *hi, __m512i *lo)
{
    const __m512bh h = _mm512_cvtne2ps_pbh(x1, x0);
    const __m512 h0 = _mm512_cvtpbh_ps((__m256bh)_mm512_castsi512_si256((__m512i)h));
    const __m512 h1 = _mm512_cvtpbh_ps((__m256bh)_mm512_extracti64x4_epi64((__m512i)h, 1));
    *hi = (__m512i)h;
    *lo = (__m512i)_mm512_cvtne2ps_pbh(_mm512_sub_ps(x1, h1), _mm512_sub_ps(x0, h0));
}

/* 32 fp32 values (x0: the first 16, x1: the next 16) as hi + mid + lo, three bf16 rows (32
 * each): hi = bf16(x), mid = bf16(x - hi), lo = bf16(x - hi - mid), each difference exact in
 * fp32, so |x - hi - mid - lo| <= 2^-26 |x| (round to nearest even throughout; 0 unless lo's
 * rounding drops bits: x keeps 24 significant bits, as many as fp32 has). */
static inline __attribute__((always_inline)) void
numla_x86_split3_bf16(__m512 x0, __m512 x1, __m512i *hi, __m512i *mid, __m512i *lo)
{
    const __m512bh h = _mm512_cvtne2ps_pbh(x1, x0);
    const __m512 r0 = _mm512_sub_ps(x0, _mm512_cvtpbh_ps((__m256bh)_mm512_castsi512_si256((__m512i)h)));
    const __m512 r1 = _mm512_sub_ps(x1, _mm512_cvtpbh_ps((__m256bh)_mm512_extracti64x4_epi64((__m512i)h, 1)));
    *hi = (__m512i)h;
    numla_x86_split_bf16(r0, r1, mid, lo);
}

#endif
