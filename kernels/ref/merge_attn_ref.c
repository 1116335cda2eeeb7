/* kernels/ref/merge_attn_ref.c — scalar reference of merge_attn_states (kernels/merge_attn.h),
 * the formula as written: (ea·a + eb·b) / (ea + eb). */
#include "kernels/merge_attn_internal.h"

void numla_merge_attn_ref(int64_t r_begin, int64_t r_end, int32_t dim, float *out, float *out_lse,
                          const float *a, const float *a_lse, const float *b, const float *b_lse)
{
    for (int64_t r = r_begin; r < r_end; r++) {
        const size_t off = (size_t)r * (size_t)dim;
        float ea = 0, eb = 0, s = 1, lse;
        numla_merge_case c = numla_merge_row_case(a_lse[r], b_lse[r], &ea, &eb, &s, &lse);
        if (!numla_merge_row_trivial(c, dim, out + off, a + off, b + off))
            for (int32_t i = 0; i < dim; i++)
                out[off + i] = (ea * a[off + i] + eb * b[off + i]) / s;
        if (out_lse)
            out_lse[r] = lse; /* after reading a_lse[r], b_lse[r]: they may alias */
    }
}
