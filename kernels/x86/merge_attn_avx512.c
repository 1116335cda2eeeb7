/* kernels/x86/merge_attn_avx512.c — merge_attn_states, AVX-512 variant: per row two scalar
 * weights, then one FMA per element, 16 lanes, masked tail. */
#include "kernels/merge_attn_internal.h"

#include <immintrin.h>

void numla_merge_attn_avx512(int64_t r_begin, int64_t r_end, int32_t dim, float *out,
                             float *out_lse, const float *a, const float *a_lse, const float *b,
                             const float *b_lse)
{
    for (int64_t r = r_begin; r < r_end; r++) {
        const size_t off = (size_t)r * (size_t)dim;
        float ea = 0, eb = 0, s = 1, lse;
        numla_merge_case c = numla_merge_row_case(a_lse[r], b_lse[r], &ea, &eb, &s, &lse);
        if (!numla_merge_row_trivial(c, dim, out + off, a + off, b + off)) {
            const __m512 wa = _mm512_set1_ps(ea / s), wb = _mm512_set1_ps(eb / s);
            const float *ar = a + off, *br = b + off;
            float *o = out + off;
            int32_t i = 0;
            for (; i + 16 <= dim; i += 16)
                _mm512_storeu_ps(o + i, _mm512_fmadd_ps(wa, _mm512_loadu_ps(ar + i),
                                                        _mm512_mul_ps(wb, _mm512_loadu_ps(br + i))));
            if (i < dim) {
                const __mmask16 m = (__mmask16)((1u << (dim - i)) - 1u);
                _mm512_mask_storeu_ps(o + i, m, _mm512_fmadd_ps(wa, _mm512_maskz_loadu_ps(m, ar + i),
                                                                _mm512_mul_ps(wb, _mm512_maskz_loadu_ps(m, br + i))));
            }
        }
        if (out_lse)
            out_lse[r] = lse;
    }
}
