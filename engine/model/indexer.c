/* engine/model/indexer.c — the DSA indexer's per-token preparation (indexer.h). */
#include "engine/model/indexer.h"

#include <math.h>

#include "engine/model/rope.h"

void numla_indexer_rope(numla_dsa_rope flavour, float *x, const float *cos_sin, int32_t dr)
{
    const int32_t h = dr / 2;
    if (flavour == NUMLA_DSA_ROPE_HALF) {
        for (int32_t i = 0; i < h; i++) {
            const float a = x[i], b = x[i + h], c = cos_sin[i], s = cos_sin[h + i];
            x[i] = a * c - b * s;
            x[i + h] = b * c + a * s;
        }
        return;
    }
    float tmp[NUMLA_CONFIG_MAX_ROPE_DIM];
    for (int32_t i = 0; i < dr; i++)
        tmp[i] = x[i];
    numla_rope_apply(x, tmp, cos_sin, dr);
}

numla_status numla_indexer_prepare(const numla_indexer_prep_args *a)
{
    if (a->num_tokens < 0 || a->num_heads < 1 || a->head_dim < 1 || a->rope_dim < 0 ||
        a->rope_dim % 2 || a->rope_dim > a->head_dim || a->rope_dim > NUMLA_CONFIG_MAX_ROPE_DIM)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "indexer: bad dims (tokens %lld, heads %d, head_dim %d, rope_dim %d)",
                   (long long)a->num_tokens, a->num_heads, a->head_dim, a->rope_dim);
    const int32_t H = a->num_heads, D = a->head_dim, R = a->rope_dim;
    const float wscale = 1.0f / sqrtf((float)H);
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < a->num_tokens; t++) {
        const float *cs = a->cos_sin + t * R;
        for (int32_t h = 0; h < H; h++)
            numla_indexer_rope(a->rope, a->q + (t * H + h) * D, cs, R);
        float *k = a->k + t * D;
        double mean = 0, var = 0;
        for (int32_t d = 0; d < D; d++)
            mean += k[d];
        mean /= D;
        for (int32_t d = 0; d < D; d++)
            var += (k[d] - mean) * (k[d] - mean);
        var /= D;
        const float inv = (float)(1.0 / sqrt(var + NUMLA_INDEXER_NORM_EPS));
        for (int32_t d = 0; d < D; d++)
            k[d] = (float)(k[d] - mean) * inv * a->k_norm_w[d] + a->k_norm_b[d];
        numla_indexer_rope(a->rope, k, cs, R);
        for (int32_t h = 0; h < H; h++)
            a->w[t * H + h] *= wscale;
    }
    return NUMLA_STATUS_OK;
}
