/* engine/model/shard.h — which part of the model one rank holds (docs/design.md §2).
 *
 * Shard of rank r of R (numla_shard_range splits n items into R contiguous, near-even ranges):
 *   heads            [head_begin, +head_count)      q_b/q_proj rows, kv_b rows, o_proj columns
 *   dense MLP        [inter_begin, +inter_count)    gate/up rows, down columns
 *   shared experts   [shared_begin, +shared_count)  same, over n_shared · moe_intermediate
 *   routed experts   [expert_begin, +expert_count)  whole experts
 *   vocab            [vocab_begin, +vocab_count)    lm_head rows
 * Replicated: embed_tokens, q_a_proj + q_a_layernorm, kv_a_proj_with_mqa + kv_a_layernorm, the
 * router gate (+ e_score_correction_bias), every RMSNorm weight.
 * A rank that would own zero heads (R > H) is an error, not a crash. Other ranges may be empty
 * (e.g. more ranks than experts): code paths handle count == 0.
 */
#ifndef NUMLA_ENGINE_SHARD_H
#define NUMLA_ENGINE_SHARD_H

#include <stdint.h>

#include "common/status.h"
#include "engine/model/config.h"

typedef struct numla_shard {
    int32_t rank, nranks;
    int64_t head_begin, head_count;     /* of num_attention_heads */
    int64_t inter_begin, inter_count;   /* of intermediate_size */
    int64_t shared_begin, shared_count; /* of n_shared_experts · moe_intermediate_size */
    int64_t expert_begin, expert_count; /* of n_routed_experts */
    int64_t vocab_begin, vocab_count;   /* of vocab_size */
} numla_shard;

/* [begin, begin + count) of n items for `rank` of `nranks`: the first n % nranks ranks get one
 * extra item. Local (pure arithmetic). */
void numla_shard_range(int64_t n, int32_t rank, int32_t nranks, int64_t *begin, int64_t *count);
/* Fill the shard of (rank, nranks) for a config; error when the rank would own no head. Local. */
numla_status numla_shard_plan(const numla_model_config *cfg, int32_t rank, int32_t nranks,
                              numla_shard *out);

#endif
