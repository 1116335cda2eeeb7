/* engine/model/indexer.h — the DSA lightning indexer's per-token preparation
 * (docs/sparse_attention.md): from the projected inputs q = wq_b(q_resid) (T, Hi, Di),
 * k = wk(x) (T, Di) and w = weights_proj(x) (T, Hi), produce what the kernels/dsa.h scoring
 * reads: q and k with RoPE on their first Dr values (half split for deepseek_v32, interleaved
 * for glm_moe_dsa), k LayerNorm'd (k_norm, with bias, eps 1e-6) before its RoPE, and
 * w · Hi^-0.5. The projections themselves are ordinary linears of the forward pass.
 * All local, pure functions.
 */
#ifndef NUMLA_ENGINE_INDEXER_H
#define NUMLA_ENGINE_INDEXER_H

#include <stdint.h>

#include "common/status.h"
#include "engine/model/config_dsa.h"

#define NUMLA_INDEXER_NORM_EPS 1e-6f

typedef struct numla_indexer_prep_args {
    int64_t num_tokens;        /* T */
    int32_t num_heads;         /* Hi */
    int32_t head_dim;          /* Di */
    int32_t rope_dim;          /* Dr <= Di, even */
    numla_dsa_rope rope;
    const float *cos_sin;      /* (T, Dr): the model's RoPE table (numla_rope_cos_sin) */
    const float *k_norm_w;     /* (Di) LayerNorm weight */
    const float *k_norm_b;     /* (Di) LayerNorm bias */
    float *q;                  /* (T, Hi, Di) in place */
    float *k;                  /* (T, Di) in place */
    float *w;                  /* (T, Hi) in place */
} numla_indexer_prep_args;

/* Rotate x[0 .. dr) in place by cos_sin (dr: cos then sin, dr/2 each). HALF:
 * x'_i = x_i cos_i - x_{i+h} sin_i, x'_{i+h} = x_{i+h} cos_i + x_i sin_i (h = dr/2);
 * INTERLEAVED: pairs (x_2i, x_2i+1) turned by angle i and stored de-interleaved, as
 * numla_rope_apply (dot products are what matter; q and k get the same layout). */
void numla_indexer_rope(numla_dsa_rope flavour, float *x, const float *cos_sin, int32_t dr);

/* Prepare q, k, w in place (see the top). Bad dims: INVALID_ARG naming them. Local. */
numla_status numla_indexer_prepare(const numla_indexer_prep_args *a);

#endif
