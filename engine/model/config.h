/* engine/model/config.h — the model blueprint: numla_model_config parsed from a Hugging Face
 * config.json (model_type deepseek_v2 / deepseek_v3, Kimi's kimi_k2 / kimi_k25 which are V3's
 * architecture, docs/kimi.md; deepseek_v32 and glm_moe_dsa, V3 plus sparse attention,
 * docs/sparse_attention.md), validated, with the derived values the
 * forward pass needs (softmax scale with YaRN m², YaRN inverse frequencies, attention factor).
 * docs/design.md §5 is the spec. Owns no memory: the struct is plain values.
 *
 * Traps handled here (docs/design.md §5):
 *   - q_lora_rank must be present (null or an integer): DeepseekV2Config silently defaults a
 *     missing key to 1536, which no tiny test model wants.
 *   - num_experts_per_tok must be present when the model has routed experts (HF default None).
 *   - rope_scaling.factor is used as written; only when it is absent is it the ratio
 *     max_position_embeddings / original_max_position_embeddings (transformers' rule). L0 of
 *     the YaRN correction range is original_max_position_embeddings (else
 *     max_position_embeddings).
 *   - transformers >= 5 writes "rope_parameters" (rope_theta inside) instead of "rope_scaling",
 *     and "head_dim" = qk_rope_head_dim, which is ignored here.
 *   - quantization_config: only the two published 8-bit formats (numla_weight_format); any
 *     other quant_method, fmt, weight_block_size or activation_scheme is UNSUPPORTED naming
 *     the field, never silently read as bf16.
 *   - MoE weights: V2 follows DeepSeek's code (normalise if norm_topk_prob and k > 1, else
 *     scale), V3 normalises if norm_topk_prob, then scales (tests/golden/README.md).
 */
#ifndef NUMLA_ENGINE_CONFIG_H
#define NUMLA_ENGINE_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "engine/formats/weight_encoding.h"
#include "engine/model/config_dsa.h"
#include "engine/model/config_v4.h"

enum {
    NUMLA_CONFIG_MAX_ROPE_DIM = 256, /* qk_rope_head_dim upper bound (inv_freq array size × 2) */
    NUMLA_CONFIG_MAX_EOS = 8,
};

/* Upper bounds config validation enforces, each well above any published DeepSeek-style model
 * and low enough that the products the code forms (weight shapes vocab × hidden, experts ×
 * moe_intermediate × hidden; KV sizes positions × layers × (kv_lora_rank + rope dim); int32
 * casts of layer and rank counts) stay far inside int64. A config beyond one is rejected with
 * an error naming the field. */
#define NUMLA_CONFIG_MAX_VOCAB ((int64_t)1 << 24)
#define NUMLA_CONFIG_MAX_HIDDEN ((int64_t)1 << 16)        /* hidden_size */
#define NUMLA_CONFIG_MAX_LAYERS ((int64_t)1 << 10)        /* num_hidden_layers */
#define NUMLA_CONFIG_MAX_HEADS ((int64_t)1 << 10)         /* num_attention_heads */
#define NUMLA_CONFIG_MAX_INTERMEDIATE ((int64_t)1 << 20)  /* (moe_)intermediate_size */
#define NUMLA_CONFIG_MAX_POSITIONS ((int64_t)1 << 24)     /* max_position_embeddings */
#define NUMLA_CONFIG_MAX_LORA_RANK ((int64_t)1 << 14)     /* q_lora_rank, kv_lora_rank */
#define NUMLA_CONFIG_MAX_HEAD_DIM ((int64_t)1 << 12)      /* qk_nope_head_dim, v_head_dim */
#define NUMLA_CONFIG_MAX_EXPERTS ((int64_t)1 << 14)       /* n_routed_experts (n_group <= it) */
#define NUMLA_CONFIG_MAX_SHARED_EXPERTS ((int64_t)1 << 10)
#define NUMLA_CONFIG_MAX_ROPE_THETA 1e12
#define NUMLA_CONFIG_MAX_ROPE_FACTOR 1e6                  /* rope_scaling.factor */
#define NUMLA_CONFIG_MAX_MSCALE 1e3                       /* rope_scaling.mscale(_all_dim) */

typedef enum numla_model_arch {
    NUMLA_MODEL_ARCH_DEEPSEEK_V2 = 0, /* model_type "deepseek_v2" */
    NUMLA_MODEL_ARCH_DEEPSEEK_V3,     /* model_type "deepseek_v3", "kimi_k2", kimi_k25's text, and
                                         the sparse-attention types "deepseek_v32" and
                                         "glm_moe_dsa" (V3's MLA and router plus `dsa`) */
    NUMLA_MODEL_ARCH_DEEPSEEK_V4,     /* model_type "deepseek_v4": shared-KV attention, mHC,
                                         sqrtsoftplus MoE (`v4`, docs/design.md §5.9) */
} numla_model_arch;

typedef enum numla_topk_method {
    NUMLA_TOPK_METHOD_GREEDY = 0,           /* top-k of all scores */
    NUMLA_TOPK_METHOD_GROUP_LIMITED_GREEDY, /* V2: keep topk_group groups by per-group max */
    NUMLA_TOPK_METHOD_NOAUX_TC,             /* V3: biased scores, group = sum of top-2 */
} numla_topk_method;

typedef enum numla_scoring_func {
    NUMLA_SCORING_FUNC_SOFTMAX = 0,
    NUMLA_SCORING_FUNC_SIGMOID,
    NUMLA_SCORING_FUNC_SQRTSOFTPLUS, /* V4: sqrt(softplus(logit)) */
} numla_scoring_func;

/* How norm_topk_prob and routed_scaling_factor combine (references differ, docs/design.md §5). */
typedef enum numla_moe_weight_rule {
    /* DeepSeek-V2 modeling code: normalise if norm_topk_prob && k > 1, *else* scale. */
    NUMLA_MOE_WEIGHT_RULE_NORM_OR_SCALE = 0,
    /* DeepSeek-V3 modeling code: normalise if norm_topk_prob && k > 1, *then* scale. */
    NUMLA_MOE_WEIGHT_RULE_NORM_THEN_SCALE,
} numla_moe_weight_rule;

/* The checkpoint's weight format (config.json quantization_config): the weight encodings of
 * engine/formats/weight_encoding.h (one enum), under the names the config knows:
 *   NONE  no quantization_config: bf16/fp16/fp32 weights
 *   FP8   quant_method "fp8", fmt "e4m3", weight_block_size [128, 128], activation_scheme
 *         "dynamic" (DeepSeek-V3/R1 as published): F8_E4M3 X.weight + F32 X.weight_scale_inv
 *   INT8  quant_method "w8a8_int8" (SGLang's channel INT8), activation scheme "dynamic":
 *         I8 X.weight + F32 X.weight_scale (N, 1), run as W8A8
 * (GGUF files carry an encoding per tensor instead: weights.h.) */
typedef numla_weight_encoding numla_weight_format;
#define NUMLA_WEIGHT_FORMAT_NONE NUMLA_ENCODING_NONE
#define NUMLA_WEIGHT_FORMAT_FP8 NUMLA_ENCODING_FP8
#define NUMLA_WEIGHT_FORMAT_INT8 NUMLA_ENCODING_INT8

/* "bf16" for NONE, "fp8", "int8". */
const char *numla_model_config_format_name(numla_weight_format f);

typedef struct numla_model_config {
    numla_model_arch arch;
    char model_type[32];          /* as written; "kimi_k25" for a K2.5 text_config */
    char tensor_prefix[32];       /* prefix of every tensor name: "" , or "language_model."
                                     for kimi_k25 (its text model inside a vision model) */

    /* sizes */
    int64_t vocab_size;
    int64_t hidden_size;
    int64_t num_hidden_layers;
    int64_t num_attention_heads;  /* H */
    int64_t intermediate_size;    /* dense MLP */
    double rms_norm_eps;
    int64_t max_position_embeddings;
    int tie_word_embeddings;

    /* MLA */
    int64_t q_lora_rank;          /* 0 when null: plain q_proj (V2-Lite) */
    int64_t kv_lora_rank;         /* Dc */
    int64_t qk_nope_head_dim;
    int64_t qk_rope_head_dim;     /* Dr */
    int64_t v_head_dim;
    int64_t q_head_dim;           /* derived: nope + rope */

    /* MoE (n_routed_experts == 0: every layer dense) */
    int64_t n_routed_experts;
    int64_t n_shared_experts;     /* 0 when null */
    int64_t num_experts_per_tok;  /* k */
    int64_t moe_intermediate_size;
    int64_t first_k_dense_replace;
    int64_t moe_layer_freq;
    int64_t n_group;              /* 1 when null */
    int64_t topk_group;           /* n_group when null */
    numla_topk_method topk_method;
    numla_scoring_func scoring_func;
    int norm_topk_prob;
    double routed_scaling_factor;
    numla_moe_weight_rule moe_weight_rule; /* from arch */

    /* RoPE */
    double rope_theta;
    int rope_yarn;                /* rope_scaling present with type/rope_type "yarn" */
    double rope_factor;           /* 1 when no scaling */
    int64_t rope_original_max_position_embeddings; /* L0 (max_position_embeddings if absent) */
    double rope_beta_fast;        /* default 32 */
    double rope_beta_slow;        /* default 1 */
    double rope_mscale;           /* default 1 */
    double rope_mscale_all_dim;   /* default 0 */
    int rope_truncate;            /* default 1: floor/ceil the correction range */
    double rope_explicit_attention_factor; /* rope_scaling.attention_factor, 0 when absent */

    /* multi-token prediction (docs/speculative.md): the layers the file ships, and whether the
     * first one is loaded (numla_model_config_enable_mtp; 0 from the parser): then it is layer
     * num_hidden_layers of the weights and of the KV pool */
    int64_t num_nextn_predict_layers;
    int mtp_enabled;

    /* weights */
    numla_weight_format weight_format; /* quantization_config; NONE when absent or null */

    /* sparse attention (DSA): enabled for deepseek_v32 / glm_moe_dsa (config_dsa.h); its
     * mlp_moe then says which layers are MoE */
    numla_dsa_config dsa;

    /* DeepSeek-V4 (config_v4.h): enabled for deepseek_v4. Its common fields above are filled
     * from it: kv_lora_rank = v_head_dim = q_head_dim = head_dim, qk_rope_head_dim = the rope
     * dimension, qk_nope_head_dim = the rest, intermediate_size = moe_intermediate_size (the
     * shared expert's width), every layer MoE, rope_theta the main theta, rope_inv_freq and
     * rope_attention_factor the compress table's, softmax_scale head_dim^-0.5. */
    numla_v4_config v4;

    /* tokens */
    int32_t bos_token_id;         /* -1 when absent */
    int32_t num_eos;
    int32_t eos_token_ids[NUMLA_CONFIG_MAX_EOS];

    /* derived (docs/design.md §5) */
    double softmax_scale;         /* q_head_dim^-0.5 · m² */
    double rope_attention_factor; /* cos/sin multiplier: mscale(f, mscale) / mscale(f, mscale_all_dim) */
    double rope_inv_freq[NUMLA_CONFIG_MAX_ROPE_DIM / 2]; /* (qk_rope_head_dim / 2) */
} numla_model_config;

/* Parse and validate config.json text. `source` names the file in error messages.
 * Errors (NUMLA_STATUS_FORMAT / UNSUPPORTED) name the field. Not collective. */
numla_status numla_model_config_parse(const char *json_text, const char *source,
                                      numla_model_config *out);
/* Read dir/config.json and parse it; when dir is a GGUF file (numla_model_path_is_gguf), the
 * config comes from its deepseek2.* keys (numla_model_config_from_gguf). Not collective. */
numla_status numla_model_config_load(const char *dir, numla_model_config *out);

/* Whether path names a GGUF model: a regular file whose name ends in ".gguf". Local. */
int numla_model_path_is_gguf(const char *path);
/* The config of an open GGUF file of architecture deepseek2 (config_gguf.c says how each key
 * maps); `source` names the file in errors. Not collective. */
struct numla_gguf;
numla_status numla_model_config_from_gguf(const struct numla_gguf *g, const char *source,
                                          numla_model_config *out);
/* The config of the deepseek4 GGUF model at path with the MTP layer of mtp_path, the file
 * llama.cpp's convert_hf_to_gguf.py --mtp writes (engine/formats/gguf_deepseek4.h): its
 * num_nextn_predict_layers is then 1 and the layer's attention type the file's. Errors name the
 * file and the key or tensor that does not match. Not collective. */
numla_status numla_model_config_load_gguf_mtp(const char *path, const char *mtp_path,
                                              numla_model_config *out);

/* Whether layer l has an MoE block (else the dense MLP): mlp_layer_types for the DSA types,
 * else first_k_dense_replace and moe_layer_freq. */
int numla_model_config_is_moe_layer(const numla_model_config *c, int64_t layer);

/* Layers of the KV pool: num_hidden_layers, plus the MTP layer's when mtp_enabled. */
int64_t numla_model_config_kv_layers(const numla_model_config *c);
/* Load the first MTP layer with the model (sets mtp_enabled; for DSA models the layer's indexer
 * and MoE flags). UNSUPPORTED naming why when the checkpoint has none or the family is not
 * supported. Local. */
numla_status numla_model_config_enable_mtp(numla_model_config *c);

#endif
