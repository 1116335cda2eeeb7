/* kernels/x86/merge_attn_avx2.c — merge_attn_states, AVX2 variant: per row two scalar weights,
 * then one FMA per element, 8 lanes, scalar tail with the same fused arithmetic. */
#include "kernels/merge_attn_internal.h"

#include <immintrin.h>

void numla_merge_attn_avx2(int64_t r_begin, int64_t r_end, int32_t dim, float *out, float *out_lse,
                           const float *a, const float *a_lse, const float *b, const float *b_lse)
{
    for (int64_t r = r_begin; r < r_end; r++) {
        const size_t off = (size_t)r * (size_t)dim;
        float ea = 0, eb = 0, s = 1, lse;
        numla_merge_case c = numla_merge_row_case(a_lse[r], b_lse[r], &ea, &eb, &s, &lse);
        if (!numla_merge_row_trivial(c, dim, out + off, a + off, b + off)) {
            const float fa = ea / s, fb = eb / s;
            const __m256 wa = _mm256_set1_ps(fa), wb = _mm256_set1_ps(fb);
            const float *ar = a + off, *br = b + off;
            float *o = out + off;
            int32_t i = 0;
            for (; i + 8 <= dim; i += 8)
                _mm256_storeu_ps(o + i, _mm256_fmadd_ps(wa, _mm256_loadu_ps(ar + i),
                                                        _mm256_mul_ps(wb, _mm256_loadu_ps(br + i))));
            for (; i < dim; i++)
                o[i] = fmaf(fa, ar[i], fb * br[i]);
        }
        if (out_lse)
            out_lse[r] = lse;
    }
}
