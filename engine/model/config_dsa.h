/* engine/model/config_dsa.h — the sparse-attention (DSA) part of a config.json: the lightning
 * indexer's sizes, its RoPE flavour, which layers run their own indexer, and the per-layer MLP
 * kind, for model_type deepseek_v32 (DeepSeek-V3.2) and glm_moe_dsa (GLM-5)
 * (docs/sparse_attention.md). Parsed on its own so config.c keeps its shape; for any other
 * model_type it reports `enabled = 0` and reads nothing else.
 *
 * Defaults follow transformers 5.25's config classes when a field is absent:
 *   index_n_heads 64 (V3.2) / 32 (GLM-5), index_head_dim 128, index_topk 2048;
 *   indexer_types: V3.2 all "full"; GLM-5 from index_topk_pattern ("F"/"S" string or list)
 *     else layer i is "full" when max(i - offset + 1, 0) % freq == 0 with freq =
 *     index_topk_freq (1), offset = index_skip_topk_offset (2);
 *   mlp_layer_types: min(first_k_dense_replace (3), layers) "dense", the rest "sparse".
 * Refused (naming the field): a list whose length is not num_hidden_layers, an unknown entry,
 * a first layer that is "shared" (nothing to share), qk_rope_head_dim odd or above
 * index_head_dim (the indexer rotates that many leading values), a null or missing
 * q_lora_rank (wq_b reads the q latent), "sparse" layers without n_routed_experts.
 */
#ifndef NUMLA_ENGINE_CONFIG_DSA_H
#define NUMLA_ENGINE_CONFIG_DSA_H

#include <stdint.h>

#include "common/status.h"

typedef enum numla_dsa_rope {
    NUMLA_DSA_ROPE_HALF = 0,    /* deepseek_v32: rotate_half over the first Dr values */
    NUMLA_DSA_ROPE_INTERLEAVED, /* glm_moe_dsa: interleaved pairs (x0, x1), (x2, x3), ... */
} numla_dsa_rope;

#define NUMLA_DSA_MAX_TOPK ((int64_t)1 << 20)
/* = NUMLA_CONFIG_MAX_LAYERS (config.h includes this header and checks it) */
#define NUMLA_DSA_MAX_LAYERS 1024

typedef struct numla_dsa_config {
    int enabled;                   /* model_type deepseek_v32 or glm_moe_dsa */
    int64_t num_layers;            /* num_hidden_layers */
    int64_t index_n_heads;         /* Hi */
    int64_t index_head_dim;        /* Di */
    int64_t index_topk;
    int64_t rope_dim;              /* qk_rope_head_dim: leading values of q, k the RoPE turns */
    numla_dsa_rope index_rope;
    int64_t num_nextn_predict_layers; /* MTP layers the checkpoint ships (config.c reads it
                                       * too: numla_model_config's) */
    uint8_t indexer_full[NUMLA_DSA_MAX_LAYERS];    /* (num_layers) 1 "full", 0 "shared" */
    uint8_t mlp_moe[NUMLA_DSA_MAX_LAYERS];         /* (num_layers) 1 "sparse" (MoE), 0 "dense" */
} numla_dsa_config;

/* Parse the DSA fields of config.json text; `source` names the file in messages. Errors are
 * NUMLA_STATUS_FORMAT (malformed) or UNSUPPORTED, naming the field. Not collective. */
numla_status numla_dsa_config_parse(const char *json_text, const char *source,
                                    numla_dsa_config *out);
/* The same from config.json already parsed by jansson (config.c reads the file once). */
struct json_t;
numla_status numla_dsa_config_from_json(const struct json_t *root, const char *source,
                                        numla_dsa_config *out);

#endif
