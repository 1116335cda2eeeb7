/* kernels/x86/act_avx2.c — gated SiLU (kernels/act.h) 8 lanes at a time, the AVX2 twin of
 * act_avx512.c: the sigmoid from e = e^-|x| <= 1 (kernels/x86/exp_avx2.h, the same e^x lane for
 * lane), σ(x) = 1/(1+e) for x >= 0 and e/(1+e) below, so a large |x| saturates cleanly. */
#include <immintrin.h>

#include "kernels/act.h"
#include "kernels/x86/exp_avx2.h"

static inline __m256 numla_act_silu_mul8_(__m256 x, __m256 u)
{
    const __m256 ax = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
    const __m256 e = numla_exp256(_mm256_sub_ps(_mm256_setzero_ps(), ax));
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 d = _mm256_add_ps(one, e);
    const __m256 neg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
    const __m256 num = _mm256_blendv_ps(one, e, neg);
    return _mm256_mul_ps(_mm256_mul_ps(x, _mm256_div_ps(num, d)), u);
}

void numla_act_silu_mul_avx2(int64_t n, float *g, const float *u)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(g + i, numla_act_silu_mul8_(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
    if (i < n) {
        /* lanes below n - i: masked loads read nothing past the end, the masked store writes
         * nothing there */
        const __m256i k = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i)),
                                             _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        const __m256 x = _mm256_maskload_ps(g + i, k), uu = _mm256_maskload_ps(u + i, k);
        _mm256_maskstore_ps(g + i, k, numla_act_silu_mul8_(x, uu));
    }
}
