/* kernels/ref/mla_attn_ref.c — scalar reference chunk kernel for MLA attention (any Dc, Dr,
 * any dtypes). Key-outer loop: each cache row is converted to fp32 once and used for every row
 * of the item; per-key online softmax in fp32. Correctness reference, not tuned. */
#include "kernels/mla_attn_internal.h"

#include <math.h>
#include <string.h>

static size_t numla_mla_attn_ref_scratch(const numla_mla_attn_args *a)
{
    size_t w = (size_t)a->kv_lora_rank + (size_t)a->rope_dim;
    return (NUMLA_MLA_ATTN_ROWS + 1) * w * sizeof(float); /* q rows + one key row */
}

static void numla_mla_attn_ref_chunk(const numla_mla_attn_chunk *c, float *acc, float *m, float *l,
                                     void *scratch)
{
    const numla_mla_attn_args *a = c->a;
    size_t dc = (size_t)a->kv_lora_rank, w = dc + (size_t)a->rope_dim;
    float *q = scratch;                                 /* (nrows, w) */
    float *k = q + (size_t)NUMLA_MLA_ATTN_ROWS * w;     /* (w) */
    for (int32_t r = 0; r < c->nrows; r++) {
        for (size_t d = 0; d < w; d++)
            q[(size_t)r * w + d] = numla_load_f32(a->q, a->q_dtype, (size_t)(c->row0 + r) * w + d);
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    memset(acc, 0, (size_t)c->nrows * dc * sizeof(float));
    int64_t kend = c->k0;
    for (int32_t r = 0; r < c->nrows; r++)
        kend = c->lim[r] > kend ? c->lim[r] : kend;
    for (int64_t t = c->k0; t < kend; t++) {
        const void *row = numla_mla_attn_kv_row(a, c->seq, t);
        for (size_t d = 0; d < w; d++)
            k[d] = numla_load_f32(row, a->kv_dtype, d);
        for (int32_t r = 0; r < c->nrows; r++) {
            if (t >= c->lim[r])
                continue;
            const float *qr = q + (size_t)r * w;
            float s = 0.0f;
            for (size_t d = 0; d < w; d++)
                s += qr[d] * k[d];
            s *= a->scale;
            float *ar = acc + (size_t)r * dc;
            if (s > m[r]) {
                float corr = expf(m[r] - s); /* 0 on the first key (m = -inf) */
                for (size_t d = 0; d < dc; d++)
                    ar[d] *= corr;
                l[r] *= corr;
                m[r] = s;
            }
            float p = expf(s - m[r]);
            l[r] += p;
            for (size_t d = 0; d < dc; d++)
                ar[d] += p * k[d];
        }
    }
}

const numla_mla_attn_kernel numla_mla_attn_kernel_ref = {
    .v = {"ref", 0, NULL},
    .chunk = numla_mla_attn_ref_chunk,
    .scratch_bytes = numla_mla_attn_ref_scratch,
};
