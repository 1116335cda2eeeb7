/* kernels/x86/exp_avx2.h — the vector e^x of the AVX2 kernels (softmax, activations), the 8-lane
 * twin of kernels/x86/exp_avx512.h: the same reduction and polynomial, so the same error bound
 * (relative error below 2.5e-7 where the result is a normal float) and, lane for lane, the same
 * results (tests/unit/kernels/test_exp.c). Include from files built with AVX2 + FMA flags. */
#ifndef NUMLA_KERNELS_X86_EXP_AVX2_H
#define NUMLA_KERNELS_X86_EXP_AVX2_H

#include <immintrin.h>

/* e^x for x <= 0 (x = -inf gives exactly 0; so does NaN): 2^n · poly(f), |f| <= ln2/2. AVX2 has
 * no vscalefps: 2^n is applied as two exact powers of two, 2^(n>>1) then 2^(n - (n>>1)), each a
 * normal float for n in [-184, 128], so the product rounds once, into the subnormals or to 0
 * where e^x is that small, as scalef does. */
static inline __attribute__((always_inline)) __m256 numla_exp256(__m256 x)
{
    x = _mm256_max_ps(x, _mm256_set1_ps(-127.0f));
    x = _mm256_min_ps(x, _mm256_set1_ps(88.75f)); /* n <= 128: the integer part stays in range */
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 f = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    f = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), f);
    __m256 p = _mm256_set1_ps(1.0f / 720.0f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    const __m256i ni = _mm256_cvtps_epi32(n); /* exact: n is an integer in [-184, 128] */
    const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

#endif
