/* engine/model/config_v4.h — the DeepSeek-V4 part of a config.json (model_type deepseek_v4):
 * the shared-KV attention's sizes, each layer's attention kind (sliding window, CSA, HCA) and
 * MoE kind (hash-routed or routed), the compressors' rates, the lightning indexer, mHC and the
 * two RoPE tables (docs/design.md §5.9). Parsed on its own so config.c keeps its shape; for any
 * other model_type it reports `enabled = 0` and reads nothing else. config.c fills the common
 * fields of numla_model_config from it (config_v4.c says which).
 *
 * Defaults follow transformers 5.25's DeepseekV4Config when a field is absent, except
 * head_dim and q_lora_rank, which must be written (a silent 512 / 1024 is no tiny model's
 * shape). Both spellings of the schedule are read:
 *   layer_types: exactly num_hidden_layers of "sliding_attention",
 *     "compressed_sparse_attention", "heavily_compressed_attention"; else the published
 *     files' compress_ratios (0, the CSA rate or the HCA rate per layer; entries past
 *     num_hidden_layers belong to the MTP layers and are ignored); else transformers' default
 *     (two HCA layers, then CSA on odd and HCA on even indices);
 *   compress_rates {"compressed_sparse_attention": m, "heavily_compressed_attention": m'}
 *     (4, 128), or the legacy compress_rate_csa / compress_rate_hca;
 *   mlp_layer_types: exactly num_hidden_layers of "hash_moe" / "moe"; else the first
 *     num_hash_layers (3) layers hash-routed;
 *   the rope dimension: head_dim · partial_rotary_factor, else qk_rope_head_dim, else
 *     head_dim / 8; when both are written they must agree.
 *   RoPE: rope_theta (main, sliding layers, never scaled) and compress_rope_theta with the
 *     YaRN of rope_scaling (or rope_parameters, flat or transformers' nested
 *     {"main": ..., "compress": ...}) for the CSA/HCA layers, attention factor 1 unless the
 *     compress parameters write one.
 * Refused, naming the field: num_key_value_heads other than 1, n_shared_experts other than 1
 * (transformers builds one shared expert of moe_intermediate_size), a scoring_func other than
 * sqrtsoftplus, o_groups not dividing num_attention_heads, an odd rope dimension or one above
 * head_dim or index_head_dim, a list of the wrong length or with an unknown entry, a
 * compress_ratios value that is neither 0 nor a rate, non-positive sizes and limits.
 */
#ifndef NUMLA_ENGINE_CONFIG_V4_H
#define NUMLA_ENGINE_CONFIG_V4_H

#include <stdint.h>

#include "common/status.h"

/* = NUMLA_CONFIG_MAX_LAYERS (config.c checks it) */
#define NUMLA_V4_MAX_LAYERS 1024
#define NUMLA_V4_MAX_HC 16          /* hc_mult upper bound */
#define NUMLA_V4_MAX_ROPE_DIM 256   /* rope dimension upper bound (= NUMLA_CONFIG_MAX_ROPE_DIM) */
#define NUMLA_V4_MAX_RATE ((int64_t)1 << 16)
#define NUMLA_V4_MAX_TOPK ((int64_t)1 << 20)

typedef enum numla_v4_attn {
    NUMLA_V4_ATTN_SLIDING = 0, /* "sliding_attention": the window only */
    NUMLA_V4_ATTN_CSA,         /* "compressed_sparse_attention": window + indexer-picked entries */
    NUMLA_V4_ATTN_HCA,         /* "heavily_compressed_attention": window + every entry */
} numla_v4_attn;

typedef struct numla_v4_config {
    int enabled;                   /* model_type deepseek_v4 */
    int64_t num_layers;            /* num_hidden_layers */
    int64_t head_dim;              /* Dh: q head width and the one KV row's width */
    int64_t rope_dim;              /* Dr: trailing values of q, kv and o the RoPE turns */
    int64_t q_lora_rank;           /* Rq */
    int64_t o_groups;              /* G */
    int64_t o_lora_rank;           /* Ro */
    int64_t sliding_window;        /* W */
    int64_t csa_rate;              /* m */
    int64_t hca_rate;              /* m' */
    int64_t index_n_heads;         /* Hi */
    int64_t index_head_dim;        /* Di */
    int64_t index_topk;            /* k */
    int64_t hc_mult;               /* n */
    int64_t hc_sinkhorn_iters;
    double hc_eps;
    double swiglu_limit;           /* L */
    double main_rope_theta;        /* rope_theta (or rope_parameters.main.rope_theta) */
    double compress_rope_theta;
    int64_t num_nextn_predict_layers; /* MTP layers the checkpoint ships (the first loaded on
                                       * request: numla_v4_config_enable_mtp) */
    uint8_t attn[NUMLA_V4_MAX_LAYERS];     /* (num_layers) numla_v4_attn */
    uint8_t hash_moe[NUMLA_V4_MAX_LAYERS]; /* (num_layers) 1 "hash_moe", 0 "moe" */
    /* derived: the two RoPE tables (docs/design.md §5.9) */
    double main_inv_freq[NUMLA_V4_MAX_ROPE_DIM / 2];     /* (rope_dim / 2) rope_theta, plain */
    double compress_inv_freq[NUMLA_V4_MAX_ROPE_DIM / 2]; /* (rope_dim / 2) compress theta + YaRN */
    double compress_attention_factor; /* cos/sin multiplier of the compress table (1 unless written) */
} numla_v4_config;

/* Parse the V4 fields of config.json already parsed by jansson; `source` names the file in
 * messages. enabled = 0 (and nothing read) for another model_type. Errors are
 * NUMLA_STATUS_FORMAT (malformed) or UNSUPPORTED, naming the field. Not collective. */
struct json_t;
numla_status numla_v4_config_from_json(const struct json_t *root, const char *source,
                                       numla_v4_config *out);

/* What a deepseek_v4 config implies, counted from its shapes (docs/design.md §5.9; the main
 * layers, the MTP layer left out). Bytes are those of the published form (docs/quantization.md):
 * routed experts FP4 (e2m1 codes plus one E8M0 byte per 32 of a row, 4.25 bits a weight); the
 * attention projections, the indexer's wq_b and the shared expert FP8 (a byte each plus an E8M0
 * byte per 128 x 128 block); embedding, head, router, compressors and the indexer's
 * weights_proj bf16; norms, mHC, sinks, ape and the router's bias fp32 and the hash tables int64
 * (as transformers 5.25 writes the published form: tests/golden/v4/model_fp8). */
typedef struct numla_v4_sizes {
    double params;             /* every parameter */
    double active_params;      /* those a token's forward reads: k routed experts of E, one
                                * embedding row, one hash-table row, everything else whole */
    double bytes;              /* the published form's bytes */
    double active_bytes;       /* of which a batch-1 decode step reads */
    double replicated_bytes;   /* of those, what every rank reads whatever the rank count (§5.9's
                                * sharding: wq_a, the KV row, compressors, indexer, router,
                                * norms and mHC run on every rank); a rank of R reads
                                * replicated + (active - replicated) / R */
    double cache_per_token;    /* cache values a sequence gains per token once long: (Dh + Di) / m
                                * per CSA layer (its entries and index keys), Dh / m' per HCA layer */
    double cache_per_seq;      /* cache values a sequence holds whatever its length (numla's
                                * layout, model_v4.c): per layer the W-row window ring of Dh, and
                                * each compressor's raw kv and gate rows of 2 windows (CSA: 2m rows
                                * of 2·Dh and of 2·Di; HCA: 2m' rows of Dh) */
} numla_v4_sizes;
struct numla_model_config;
void numla_v4_config_sizes(const struct numla_model_config *cfg, numla_v4_sizes *out);

/* Load a deepseek_v4 checkpoint's first MTP layer (`mtp.0.*`, docs/design.md §5.9) with the
 * model: sets cfg->mtp_enabled. UNSUPPORTED naming the reason when the checkpoint ships none or
 * the layer count leaves no room. Not collective. */
numla_status numla_v4_config_enable_mtp(struct numla_model_config *cfg);

/* Name of an attention kind ("sliding_attention", ...). */
const char *numla_v4_attn_name(numla_v4_attn a);

#endif
