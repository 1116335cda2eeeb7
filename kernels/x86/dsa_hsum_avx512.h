/* kernels/x86/dsa_hsum_avx512.h — the DSA indexer variants' closing step: four keys' per-lane
 * partial scores (one zmm each, heads in lanes) summed across lanes together, so a key costs
 * about two shuffles and two adds instead of a full horizontal reduction of its own.
 * Include only from files compiled with AVX-512 flags. */
#ifndef NUMLA_KERNELS_X86_DSA_HSUM_AVX512_H
#define NUMLA_KERNELS_X86_DSA_HSUM_AVX512_H

#include <immintrin.h>

/* (Σ lanes of a, Σ b, Σ c, Σ d). */
static inline __attribute__((always_inline)) __m128 numla_dsa_hsum4(__m512 a, __m512 b, __m512 c,
                                                                     __m512 d)
{
    /* 128-bit quarters: ab = [a0+a2, a1+a3, b0+b2, b1+b3], cd likewise */
    const __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                                    _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(1, 0, 1, 0)),
                                    _mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(3, 2, 3, 2)));
    /* quarters [a, b, c, d], four partial sums each */
    __m512 x = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(3, 1, 3, 1)));
    x = _mm512_add_ps(x, _mm512_permute_ps(x, _MM_SHUFFLE(2, 3, 0, 1)));
    x = _mm512_add_ps(x, _mm512_permute_ps(x, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm512_castps512_ps128(
        _mm512_permutexvar_ps(_mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0), x));
}

#endif
