/* kernels/ref/dsa_ref.c — scalar reference inner kernels of DSA (kernels/dsa_internal.h): the
 * indexer's key-block scoring and the sparse MLA chunk (any dims, any dtypes). Correctness
 * reference, not tuned. */
#include "kernels/dsa_internal.h"

#include <math.h>
#include <string.h>

static size_t numla_dsa_index_ref_scratch(const numla_dsa_index_args *a)
{
    return (size_t)a->head_dim * sizeof(float); /* one key row in fp32 */
}

static size_t numla_dsa_index_ref_packed(const numla_dsa_index_args *a)
{
    return (size_t)a->head_dim * (size_t)a->num_heads * sizeof(float); /* qt as it is */
}

static void numla_dsa_index_ref_prepare(const numla_dsa_index_args *a, const float *qt, float *ws,
                                        void *packed)
{
    (void)ws;
    memcpy(packed, qt, numla_dsa_index_ref_packed(a));
}

static void numla_dsa_index_ref_scores(const numla_dsa_index_args *a, const void *packed,
                                       const float *ws, int32_t seq, int64_t k0, int64_t k1,
                                       float *out, void *scratch)
{
    const int32_t H = a->num_heads, D = a->head_dim;
    const float *qt = packed;
    float *k = scratch;
    for (int64_t t = k0; t < k1; t++) {
        const void *row = numla_dsa_k_row(a, seq, t);
        for (int32_t d = 0; d < D; d++)
            k[d] = numla_load_f32(row, a->k_dtype, (size_t)d);
        float s = 0.0f;
        for (int32_t h = 0; h < H; h++) {
            float dot = 0.0f;
            for (int32_t d = 0; d < D; d++)
                dot += qt[(size_t)d * H + h] * k[d];
            s += ws[h] * (dot > 0.0f ? dot : 0.0f);
        }
        out[t - k0] = s;
    }
}

static int numla_dsa_index_ref_supports(const void *args)
{
    const numla_dsa_index_args *a = args;
    return a->k_dtype != NUMLA_DTYPE_I8;
}

const numla_dsa_index_kernel numla_dsa_index_kernel_ref = {
    .v = {"ref", 0, numla_dsa_index_ref_supports},
    .prepare = numla_dsa_index_ref_prepare,
    .packed_bytes = numla_dsa_index_ref_packed,
    .scores = numla_dsa_index_ref_scores,
    .scratch_bytes = numla_dsa_index_ref_scratch,
};

/* ---- int8 scoring (I8 index keys), the numerics every int8 variant matches ---------------- */

static size_t numla_dsa_index_i8_ref_packed(const numla_dsa_index_args *a)
{
    return (size_t)a->head_dim * (size_t)a->num_heads; /* codes (Hi, Di) */
}

/* Each head's column of qt quantized by the shared rule; its scale folded into ws. */
static void numla_dsa_index_i8_ref_prepare(const numla_dsa_index_args *a, const float *qt,
                                           float *ws, void *packed)
{
    const int32_t H = a->num_heads, D = a->head_dim;
    int8_t *qc = packed;
    for (int32_t h = 0; h < H; h++)
        ws[h] *= numla_dsa_quantize_row(qt + h, (size_t)H, D, qc + (size_t)h * D, NULL);
}

static void numla_dsa_index_i8_ref_scores(const numla_dsa_index_args *a, const void *packed,
                                          const float *ws, int32_t seq, int64_t k0, int64_t k1,
                                          float *out, void *scratch)
{
    (void)scratch;
    const int32_t H = a->num_heads, D = a->head_dim;
    const int8_t *qc = packed;
    for (int64_t t = k0; t < k1; t++) {
        const char *row = numla_dsa_k_row(a, seq, t);
        const int8_t *kc = (const int8_t *)row;
        float s = 0.0f;
        for (int32_t h = 0; h < H; h++) {
            int32_t dot = 0;
            for (int32_t d = 0; d < D; d++)
                dot += (int32_t)qc[(size_t)h * D + d] * kc[d];
            s += ws[h] * (float)(dot > 0 ? dot : 0);
        }
        out[t - k0] = numla_dsa_i8_row_scale(row, D) * s;
    }
}

static int numla_dsa_index_i8_ref_supports(const void *args)
{
    const numla_dsa_index_args *a = args;
    return a->k_dtype == NUMLA_DTYPE_I8;
}

const numla_dsa_index_kernel numla_dsa_index_kernel_i8_ref = {
    .v = {"i8-ref", 0, numla_dsa_index_i8_ref_supports},
    .prepare = numla_dsa_index_i8_ref_prepare,
    .packed_bytes = numla_dsa_index_i8_ref_packed,
    .scores = numla_dsa_index_i8_ref_scores,
    .scratch_bytes = NULL,
};

static size_t numla_dsa_attn_ref_scratch(const numla_dsa_attn_args *a)
{
    size_t w = (size_t)a->kv_lora_rank + (size_t)a->rope_dim;
    return (NUMLA_DSA_ROWS + 1) * w * sizeof(float); /* q rows + one cache row */
}

static void numla_dsa_attn_ref_chunk(const numla_dsa_attn_args *a, int32_t seq, int64_t row0,
                                     int32_t nrows, const int32_t *idx, int32_t n, float *acc,
                                     float *m, float *l, void *scratch)
{
    const size_t dc = (size_t)a->kv_lora_rank, w = dc + (size_t)a->rope_dim;
    float *q = scratch, *k = q + (size_t)NUMLA_DSA_ROWS * w;
    for (int32_t r = 0; r < nrows; r++) {
        for (size_t d = 0; d < w; d++)
            q[(size_t)r * w + d] = numla_load_f32(a->q, a->q_dtype, (size_t)(row0 + r) * w + d);
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    memset(acc, 0, (size_t)nrows * dc * sizeof(float));
    for (int32_t j = 0; j < n; j++) {
        const void *row = numla_dsa_kv_row(a, seq, idx[j]);
        for (size_t d = 0; d < w; d++)
            k[d] = numla_load_f32(row, a->kv_dtype, d);
        for (int32_t r = 0; r < nrows; r++) {
            const float *qr = q + (size_t)r * w;
            float s = 0.0f;
            for (size_t d = 0; d < w; d++)
                s += qr[d] * k[d];
            s *= a->scale;
            float *ar = acc + (size_t)r * dc;
            if (s > m[r]) {
                const float corr = expf(m[r] - s); /* 0 on the first row (m = -inf) */
                for (size_t d = 0; d < dc; d++)
                    ar[d] *= corr;
                l[r] *= corr;
                m[r] = s;
            }
            const float p = expf(s - m[r]);
            l[r] += p;
            for (size_t d = 0; d < dc; d++)
                ar[d] += p * k[d];
        }
    }
}

const numla_dsa_attn_kernel numla_dsa_attn_kernel_ref = {
    .v = {"ref", 0, NULL},
    .chunk = numla_dsa_attn_ref_chunk,
    .scratch_bytes = numla_dsa_attn_ref_scratch,
};
