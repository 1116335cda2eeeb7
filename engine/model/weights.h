/* engine/model/weights.h — one rank's shard of a DeepSeek V2/V3 model, copied out of the mapped
 * safetensors into anonymous memory this struct owns (DESIGN.md §2, §3).
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
 *
 * Linear layers are packed with numla_linear_pack (kernels/linear.h) for the chosen ISA; norm
 * weights, the router gate and the bias are fp32; the embedding keeps the file's dtype.
 * kv_b_proj is split per head for the absorbed attention (DESIGN.md §5):
 *   uk_t[h] = W_UK,hᵀ packed as a (Dc, nope) linear so that q̃ = uk_t · q_nope,
 *   uv[h]   = W_UV,h  packed as a (v, Dc) linear so that o_h = uv · ctx.
 */
#ifndef NUMLA_ENGINE_WEIGHTS_H
#define NUMLA_ENGINE_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/status.h"
#include "engine/model/config.h"
#include "engine/formats/safetensors.h"
#include "kernels/isa.h"
#include "kernels/linear.h"

typedef struct numla_shard {
    int32_t rank, nranks;
    int64_t head_begin, head_count;     /* of num_attention_heads */
    int64_t inter_begin, inter_count;   /* of intermediate_size */
    int64_t shared_begin, shared_count; /* of n_shared_experts · moe_intermediate_size */
    int64_t expert_begin, expert_count; /* of n_routed_experts */
    int64_t vocab_begin, vocab_count;   /* of vocab_size */
} numla_shard;

/* [begin, begin + count) of n items for `rank` of `nranks`: the first n % nranks ranks get one
 * extra item. */
void numla_shard_range(int64_t n, int32_t rank, int32_t nranks, int64_t *begin, int64_t *count);
/* Fill the shard of (rank, nranks) for a config; error when the rank would own no head. */
numla_status numla_shard_plan(const numla_model_config *cfg, int32_t rank, int32_t nranks,
                              numla_shard *out);

typedef struct numla_mlp_weights {  /* SiLU-gated MLP slice: I_r = its intermediate slice */
    int64_t inter;                  /* I_r (may be 0 on ranks that own none of it) */
    numla_linear_weight gate;       /* (I_r, hidden) */
    numla_linear_weight up;         /* (I_r, hidden) */
    numla_linear_weight down;       /* (hidden, I_r) */
} numla_mlp_weights;

typedef struct numla_layer_weights {
    float *input_norm;              /* (hidden) */
    float *post_attn_norm;          /* (hidden) */

    /* attention: H_r = shard.head_count */
    numla_linear_weight q_proj;     /* (H_r · q_head_dim, hidden); when q_lora_rank == 0 */
    numla_linear_weight q_a_proj;   /* (q_lora_rank, hidden); when q_lora_rank > 0 */
    float *q_a_norm;                /* (q_lora_rank) */
    numla_linear_weight q_b_proj;   /* (H_r · q_head_dim, q_lora_rank) */
    numla_linear_weight kv_a_proj;  /* (Dc + Dr, hidden) */
    float *kv_a_norm;               /* (Dc) */
    numla_linear_weight *uk_t;      /* [H_r] each (Dc, nope) = W_UK,hᵀ */
    numla_linear_weight *uv;        /* [H_r] each (v_head_dim, Dc) = W_UV,h */
    numla_linear_weight kv_b;       /* (H_r · (nope + v_head_dim), Dc): the owned heads' kv_b_proj
                                     * rows, for the expanded prefill form ([k_nope | v] per head) */
    numla_linear_weight o_proj;     /* (hidden, H_r · v_head_dim): the owned heads' columns */

    /* MLP: dense layers use `dense`; MoE layers the rest */
    int is_moe;
    numla_mlp_weights dense;        /* intermediate slice of intermediate_size */
    numla_linear_weight router;     /* (n_routed_experts, hidden) fp32, replicated */
    float *router_bias;             /* (n_routed_experts) e_score_correction_bias, V3 only */
    numla_mlp_weights *experts;     /* [expert_count]: experts expert_begin.. */
    numla_mlp_weights shared;       /* slice of n_shared · moe_intermediate (inter 0 if none) */
} numla_layer_weights;

typedef struct numla_model_weights {
    numla_model_config cfg;
    numla_shard shard;
    numla_isa isa;
    numla_dtype embed_dtype;
    void *embed;                    /* (vocab_size, hidden), embed_dtype */
    numla_layer_weights *layers;    /* [num_hidden_layers] */
    float *final_norm;              /* (hidden) */
    numla_linear_weight lm_head;    /* (vocab_count, hidden): rows vocab_begin.. */

    void *arena;                    /* anonymous mapping holding everything above */
    size_t arena_bytes;
    size_t loaded_bytes;            /* bytes of weights copied (for bandwidth bounds) */
} numla_model_weights;

/* Load the shard for (rank, nranks) from an open safetensors model, validating the shape of
 * every tensor it needs; a failure lists every missing or mis-shaped tensor. Packs for `isa`.
 * Progress goes to stderr when stderr is a terminal. Not collective (each rank loads its own). */
numla_status numla_weights_load(const numla_model_config *cfg, const numla_safetensors_model *st,
                                int32_t rank, int32_t nranks, numla_isa isa,
                                numla_model_weights **out);
void numla_weights_destroy(numla_model_weights **w);

#endif
