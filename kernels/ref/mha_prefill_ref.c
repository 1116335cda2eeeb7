/* kernels/ref/mha_prefill_ref.c — scalar reference of mha_prefill (kernels/mha_prefill.h): per
 * query, all visible scores, max, exp, sum, weighted values, accumulated in double. */
#include "kernels/mha_prefill_internal.h"

#include <math.h>

void numla_mha_prefill_ref(const numla_mha_prefill_args *a, int32_t b, int32_t h, int32_t i0,
                           int32_t i1, float *scratch, const float *kt)
{
    (void)scratch;
    (void)kt; /* reads k in place */
    const int32_t D = a->qk_dim, Dv = a->v_dim, P = a->prefix[b];
    for (int32_t i = i0; i < i1; i++) {
        const int64_t qr = (int64_t)a->q_start[b] + i;
        const float *q = a->q + qr * a->q_stride + (int64_t)h * D;
        const int32_t nk = P + i + 1;
        double mx = -INFINITY;
        for (int32_t j = 0; j < nk; j++) {
            const float *k = a->k + ((int64_t)a->k_start[b] + j) * a->k_stride + (int64_t)h * D;
            double s = 0;
            for (int32_t d = 0; d < D; d++)
                s += (double)q[d] * (double)k[d];
            s *= a->scale;
            mx = s > mx ? s : mx;
        }
        double sum = 0, acc[Dv];
        for (int32_t d = 0; d < Dv; d++)
            acc[d] = 0;
        for (int32_t j = 0; j < nk; j++) {
            const int64_t kr = (int64_t)a->k_start[b] + j;
            const float *k = a->k + kr * a->k_stride + (int64_t)h * D;
            const float *v = a->v + kr * a->v_stride + (int64_t)h * Dv;
            double s = 0;
            for (int32_t d = 0; d < D; d++)
                s += (double)q[d] * (double)k[d];
            double p = exp(s * a->scale - mx);
            sum += p;
            for (int32_t d = 0; d < Dv; d++)
                acc[d] += p * (double)v[d];
        }
        float *o = a->out + qr * a->out_stride + (int64_t)h * Dv;
        for (int32_t d = 0; d < Dv; d++)
            o[d] = (float)(acc[d] / sum);
        if (a->lse)
            a->lse[qr * a->num_heads + h] = (float)(mx + log(sum));
    }
}
