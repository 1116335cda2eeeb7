/* engine/model/model_testing.h — building blocks of the forward pass that the tests check on
 * their own against independent references (docs/design.md §5). The model uses them through
 * model_internal.h; nothing outside engine/model/ and the tests calls them. RoPE and YaRN are
 * public in rope.h (the config derives its tables with them). */
#ifndef NUMLA_ENGINE_MODEL_TESTING_H
#define NUMLA_ENGINE_MODEL_TESTING_H

#include <stddef.h>
#include <stdint.h>

#include "engine/model/config.h"

/* All local, pure functions (no allocation, no threads). */

/* y (n) = x · rsqrt(mean(x²) + eps) · w, in fp32. y may alias x. */
void numla_model_rmsnorm(float *y, const float *x, const float *w, int64_t n, double eps);
/* MoE routing for one token: scores from router logits (n_routed_experts) → top-k expert ids
 * and weights, per the config's topk_method / scoring_func / norm_topk_prob / scaling.
 * bias: e_score_correction_bias or NULL. scratch: numla_model_moe_route_scratch_bytes(c)
 * bytes, 4-byte aligned; nothing is allocated. k > n_routed_experts: the extra slots get id -1
 * and weight 0. */
void numla_model_moe_route(const numla_model_config *c, const float *logits, const float *bias,
                           int32_t *idx, float *wts, void *scratch);
/* Scratch bytes numla_model_moe_route needs for this config (any n_group, n_routed_experts). */
size_t numla_model_moe_route_scratch_bytes(const numla_model_config *c);

#endif
