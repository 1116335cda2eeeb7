/* engine/synth/synth.h — synthetic DeepSeek-V2/V3/V3.2, Kimi and GLM-5 checkpoints with
 * deterministic random weights.
 *
 * numla_synth_write writes a Hugging Face style model directory: `config.json` (model_type
 * deepseek_v2, deepseek_v3, kimi_k2, deepseek_v32, glm_moe_dsa or deepseek_v4, every field
 * docs/design.md §5 and docs/sparse_attention.md read) and `model.safetensors`, or
 * `model-0000k-of-0000n.safetensors` shards plus `model.safetensors.index.json` once the
 * weights pass the shard size. Tensor names and shapes follow HF modeling_deepseek (deepseek_v4:
 * DeepSeek's own names and config spelling, as the published V4 checkpoints have them). Weights are
 * a pure function of (preset, overrides, seed, dtype): the same options give the same bytes on
 * any machine and thread count. The model is made *decisive* (docs/design.md §8): the lm_head rows
 * are scaled so top-1/top-2 logit margins are typically far above 1e-2.
 * Generation streams tensor by tensor (multithreaded with OpenMP): at most one tensor is in
 * memory. Not collective; used by `numla synth` and by tests.
 */
#ifndef NUMLA_ENGINE_SYNTH_H
#define NUMLA_ENGINE_SYNTH_H

#include <stdint.h>

#include "common/dtype.h"
#include "common/status.h"
#include "engine/synth/quantized_checkpoint.h"

/* The model shape, as written to config.json. */
typedef struct numla_synth_config {
    const char *model_type;            /* "deepseek_v2", "deepseek_v3", "kimi_k2", "deepseek_v32"
                                        * or "glm_moe_dsa" */
    const char *architecture;          /* "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM",
                                        * "DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM" */
    int64_t vocab_size;
    int64_t hidden_size;
    int64_t intermediate_size;         /* dense MLP layers */
    int64_t moe_intermediate_size;     /* per routed expert; shared: n_shared_experts times it */
    int32_t num_hidden_layers;
    int32_t num_attention_heads;
    int32_t num_key_value_heads;
    int32_t n_shared_experts;
    int32_t n_routed_experts;
    int32_t num_experts_per_tok;
    double routed_scaling_factor;
    const char *topk_method;           /* "greedy", "group_limited_greedy" or "noaux_tc" */
    int32_t n_group;
    int32_t topk_group;
    const char *scoring_func;          /* "softmax" or "sigmoid" */
    int norm_topk_prob;
    int32_t first_k_dense_replace;
    int32_t moe_layer_freq;
    int64_t kv_lora_rank;
    int64_t q_lora_rank;               /* 0: none (config.json null; V2-Lite uses q_proj) */
    int64_t qk_rope_head_dim;
    int64_t qk_nope_head_dim;
    int64_t v_head_dim;
    int64_t max_position_embeddings;
    double rms_norm_eps;
    double rope_theta;
    double yarn_factor;                /* rope_scaling: type "yarn"; 0: no scaling (config.json
                                        * gets rope_parameters {rope_type "default", rope_theta}) */
    int64_t yarn_original_max_position_embeddings;
    double yarn_beta_fast;
    double yarn_beta_slow;
    double yarn_mscale;
    double yarn_mscale_all_dim;
    int64_t bos_token_id;
    int64_t eos_token_id;
    /* DeepSeek Sparse Attention (deepseek_v32 / glm_moe_dsa; docs/sparse_attention.md): the
     * lightning indexer of every "full" layer. index_n_heads 0: no indexer (the other types). */
    int64_t index_n_heads;
    int64_t index_head_dim;
    int64_t index_topk;
    int32_t index_topk_freq;           /* glm_moe_dsa: layer i runs its own indexer ("full") when
                                        * max(i - offset + 1, 0) % freq == 0, else "shared" */
    int32_t index_skip_topk_offset;    /* the offset of that rule (transformers' default 2) */
    int index_weights_f32;             /* indexer.weights_proj in F32 whatever the dtype (GLM-5's
                                        * checkpoints keep it so) */
    int layer_type_lists;              /* write indexer_types and mlp_layer_types (glm_moe_dsa) */
    /* DeepSeek-V4 (deepseek_v4; model_type decides): one shared KV row of head_dim per token
     * (key and value), RoPE on its last qk_rope_head_dim channels, q through q_lora_rank, the
     * grouped output projection (o_groups x o_lora_rank), per-layer compress ratios
     * (numla_synth_v4_ratio: 0 sliding window only, 4 CSA with the indexer above, 128 HCA),
     * hash-routed first layers, mHC. yarn_* (mscale unused) apply to the compressed layers,
     * rope_theta to the sliding ones. */
    int64_t head_dim;
    int64_t o_groups;
    int64_t o_lora_rank;
    int32_t sliding_window;
    int32_t v4_lead_layers;            /* layers [0, v4_lead_layers) have v4_lead_ratio; the rest
                                        * alternate 4, 128, 4, ... */
    int32_t v4_lead_ratio;
    int32_t v4_mtp_ratio;              /* the MTP layer's compress rate: 0 (sliding), 4, 128 */
    int32_t num_hash_layers;           /* layers [0, num_hash_layers) route by tid2eid */
    int32_t hc_mult;
    int32_t hc_sinkhorn_iters;
    double hc_eps;
    double swiglu_limit;
    double compress_rope_theta;
    /* 1: the multi-token-prediction layer is written as layer num_hidden_layers (DeepSeek's
     * "layer 61" of V3: a full decoder layer, MoE, with its own indexer on a DSA model, plus
     * enorm, hnorm, eh_proj, shared_head.norm and the copies embed_tokens and shared_head.head
     * of the main model's embedding and lm_head) and config.json says
     * num_nextn_predict_layers 1 (docs/speculative.md); 0: none */
    int32_t num_nextn_predict_layers;
} numla_synth_config;

typedef struct numla_synth_options {
    const char *preset;     /* "tiny", "tiny-v3" (V3-shaped toy), "v2-lite", "v3", "kimi-k2",
                               "tiny-kimi" (Kimi-shaped toy: 48 experts, one group, k 8),
                               "v32" (DeepSeek-V3.2), "glm5" (GLM-5), "tiny-v32" / "tiny-glm5"
                               (DSA toys: indexer 16 x 32, index_topk 16; tiny-glm5 has
                               "shared" indexer layers), "v4-flash" / "v4-pro" (DeepSeek-V4),
                               "tiny-v4" (V4-shaped toy: sliding, CSA, HCA, CSA layers; the
                               shape of tests/golden/v4) */
    const char *out_dir;    /* created if missing; existing model files in it are replaced */
    int32_t layers;         /* > 0: override num_hidden_layers (layers below
                             * first_k_dense_replace are dense: v3 needs >= 4 for an MoE layer) */
    int32_t experts;        /* > 0: override n_routed_experts */
    int32_t mtp;            /* 0: the MTP layer as the preset ships it (v3, v32, glm5 do);
                             * 1: write it (deepseek_v4: `mtp.0.*`, a sliding-window block as
                             * V4-Flash's, docs/design.md §5.9); -1: leave it out */
    int32_t mtp_ratio;      /* deepseek_v4 with the MTP layer: its compress rate, 0 (sliding,
                             * the default), 4 (CSA) or 128 (HCA) */
    uint64_t seed;
    numla_dtype dtype;      /* BF16 or F32 (V3's e_score_correction_bias is always F32) */
    numla_qckpt_format weights; /* FP8 / INT8 (deepseek_v4: FP8 only, its published FP8 + FP4
                             * form, docs/synth.md): the linear weights are written quantized in the
                             * published layout (quantized_checkpoint.h) from the values the dtype model would
                             * hold, config.json gets the quantization_config; NONE: dtype */
    int keep_lm_head;       /* INT8: leave lm_head in dtype (FP8 always does) */
    int64_t shard_bytes;    /* > 0: start a new shard before one would pass this; 0: 2 GiB */
    int progress;           /* non-zero: progress lines on stderr */
    const char *tokenizer_dir; /* non-NULL: copy its tokenizer.json (+ tokenizer_config.json)
                             * into out_dir; the vocabulary grows to cover it and BOS/EOS follow
                             * it, so text requests work on the synthetic model */
    int synthetic_tokenizer; /* non-zero (not with tokenizer_dir): write tokenizer.json and
                             * tokenizer_config.json of the synthetic vocabulary of the preset's
                             * vocab_size (engine/text/synthetic_vocab.h: DeepSeek-V3's 129,280
                             * for v3), BOS/EOS its special tokens: a servable model with a
                             * real-sized vocabulary */
} numla_synth_options;

/* The config a preset describes after the layers/experts overrides, validated (INVALID_ARG
 * naming the problem: unknown preset, experts not divisible into groups, top-k too large...). */
numla_status numla_synth_config_get(const numla_synth_options *opt, numla_synth_config *out);

/* The compress ratio of deepseek_v4 layer `layer`: 0 (sliding window only), 4 (CSA) or 128
 * (HCA); what config.json's compress_ratios lists. */
int32_t numla_synth_v4_ratio(const numla_synth_config *c, int32_t layer);

/* Write config.json and the weights into opt->out_dir. `total_bytes` (may be NULL) receives
 * the number of weight bytes written. */
numla_status numla_synth_write(const numla_synth_options *opt, int64_t *total_bytes);

#endif
