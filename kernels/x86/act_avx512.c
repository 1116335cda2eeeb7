/* kernels/x86/act_avx512.c — gated SiLU (kernels/act.h) 16 lanes at a time. The sigmoid is
 * taken from e = e^-|x| <= 1, which never overflows: σ(x) = 1/(1+e) for x >= 0 and e/(1+e)
 * below, so a large |x| saturates cleanly (σ → 1 or → 0) instead of dividing by e^|x|. */
#include <immintrin.h>

#include "kernels/act.h"
#include "kernels/x86/exp_avx512.h"

static inline __m512 numla_act_silu_mul16_(__m512 x, __m512 u)
{
    const __m512 ax = _mm512_abs_ps(x);
    const __m512 e = numla_exp512(_mm512_sub_ps(_mm512_setzero_ps(), ax));
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 d = _mm512_add_ps(one, e);
    const __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
    const __m512 num = _mm512_mask_blend_ps(neg, one, e);
    return _mm512_mul_ps(_mm512_mul_ps(x, _mm512_div_ps(num, d)), u);
}

void numla_act_silu_mul_avx512(int64_t n, float *g, const float *u)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(g + i, numla_act_silu_mul16_(_mm512_loadu_ps(g + i), _mm512_loadu_ps(u + i)));
    if (i < n) {
        const __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        const __m512 x = _mm512_maskz_loadu_ps(k, g + i), uu = _mm512_maskz_loadu_ps(k, u + i);
        _mm512_mask_storeu_ps(g + i, k, numla_act_silu_mul16_(x, uu));
    }
}
