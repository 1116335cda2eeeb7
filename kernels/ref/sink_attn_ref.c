/* kernels/ref/sink_attn_ref.c — the scalar sink attention (kernels/sink_attn.h): per (query,
 * head), the online softmax straight into the output row, its maximum starting at the sink
 * (whose weight e^(sink - m) joins the sum but carries no value). */
#include "kernels/sink_attn_internal.h"

#include <math.h>
#include <string.h>

static void numla_sink_attn_ref_item(const numla_sink_attn_args *a, int64_t t, int32_t h0,
                                     int32_t nh, void *scratch)
{
    (void)scratch;
    const int64_t D = a->head_dim, n = (int64_t)a->win_len[t] + a->ent_len[t];
    for (int32_t h = h0; h < h0 + nh; h++) {
        const float *q = a->q + (t * a->num_heads + h) * D;
        float *o = a->out + (t * a->num_heads + h) * D;
        float m = a->sink[h], l = 1.0f; /* the sink: e^(sink - m) with m = sink */
        memset(o, 0, sizeof(float) * (size_t)D);
        for (int64_t j = 0; j < n; j++) {
            const float *r = numla_sink_attn_row(a, t, j);
            float s = 0;
            for (int64_t d = 0; d < D; d++)
                s += q[d] * r[d];
            s *= a->scale;
            if (s > m) {
                const float c = expf(m - s);
                l *= c;
                for (int64_t d = 0; d < D; d++)
                    o[d] *= c;
                m = s;
            }
            const float p = expf(s - m);
            l += p;
            for (int64_t d = 0; d < D; d++)
                o[d] += p * r[d];
        }
        for (int64_t d = 0; d < D; d++)
            o[d] /= l;
    }
}

static size_t numla_sink_attn_ref_scratch(const numla_sink_attn_args *a)
{
    (void)a;
    return 0;
}

const numla_sink_attn_kernel numla_sink_attn_kernel_ref = {
    .v = {"ref", 0, NULL},
    .item = numla_sink_attn_ref_item,
    .scratch_bytes = numla_sink_attn_ref_scratch,
};
