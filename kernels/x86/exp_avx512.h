/* kernels/x86/exp_avx512.h — the vector e^x the AVX-512 softmax kernels share (MLA attention,
 * expanded-form prefill). Include from files built with AVX-512F flags. */
#ifndef NUMLA_KERNELS_X86_EXP_AVX512_H
#define NUMLA_KERNELS_X86_EXP_AVX512_H

#include <immintrin.h>

/* e^x for x <= 0 (x = -inf gives exactly 0): 2^n · poly(f), |f| <= ln2/2. */
static inline __attribute__((always_inline)) __m512 numla_exp512(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-127.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    f = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), f);
    __m512 p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

#endif
