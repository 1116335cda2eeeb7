/* kernels/ref/sink_attn_ref.c — the scalar sink attention (kernels/sink_attn.h), fp32 or bf16
 * rows (one entry per kind, one body): per (query, head), the online softmax straight into the
 * output row, its maximum starting at the sink (whose weight e^(sink - m) joins the sum but
 * carries no value). */
#include "kernels/sink_attn_internal.h"

#include <math.h>
#include <string.h>

#include "common/dtype.h"

/* Value d of a row of fp32 (bf16 0) or bf16 (bf16 1) values, as fp32 (exact). */
static inline float numla_sink_attn_ref_ld(const char *r, int64_t d, int bf16)
{
    return bf16 ? numla_bf16_to_f32(((const uint16_t *)(const void *)r)[d])
                : ((const float *)(const void *)r)[d];
}

static void numla_sink_attn_ref_rows(const numla_sink_attn_args *a, int64_t t, int32_t h0,
                                     int32_t nh, const int bf16)
{
    const int64_t D = a->head_dim, n = (int64_t)a->win_len[t] + a->ent_len[t];
    for (int32_t h = h0; h < h0 + nh; h++) {
        const float *q = a->q + (t * a->num_heads + h) * D;
        float *o = a->out + (t * a->num_heads + h) * D;
        float m = a->sink[h], l = 1.0f; /* the sink: e^(sink - m) with m = sink */
        memset(o, 0, sizeof(float) * (size_t)D);
        for (int64_t j = 0; j < n; j++) {
            const char *r = numla_sink_attn_row(a, t, j, bf16 ? 2 : 4);
            float s = 0;
            for (int64_t d = 0; d < D; d++)
                s += q[d] * numla_sink_attn_ref_ld(r, d, bf16);
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
                o[d] += p * numla_sink_attn_ref_ld(r, d, bf16);
        }
        for (int64_t d = 0; d < D; d++)
            o[d] /= l;
    }
}

static void numla_sink_attn_ref_item(const numla_sink_attn_args *a, int64_t t, int32_t h0,
                                     int32_t nh, void *scratch)
{
    (void)scratch;
    numla_sink_attn_ref_rows(a, t, h0, nh, 0);
}

static void numla_sink_attn_ref_item_bf16(const numla_sink_attn_args *a, int64_t t, int32_t h0,
                                          int32_t nh, void *scratch)
{
    (void)scratch;
    numla_sink_attn_ref_rows(a, t, h0, nh, 1);
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

const numla_sink_attn_kernel numla_sink_attn_kernel_ref_bf16 = {
    .v = {"ref_bf16", 0, NULL},
    .item = numla_sink_attn_ref_item_bf16,
    .scratch_bytes = numla_sink_attn_ref_scratch,
};
