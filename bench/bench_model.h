/* bench/bench_model.h — cost accounting of one decode token of a DeepSeek MLA+MoE model, for
 * `numla bench model` (docs/design.md §7): the weight bytes a token actually reads, the FLOPs of its
 * linear layers and of its attention, and the KV bytes it reads, from the config and the packed
 * weight sizes (numla_linear_packed_size), summed over every rank of the model. */
#ifndef NUMLA_BENCH_BENCH_MODEL_H
#define NUMLA_BENCH_BENCH_MODEL_H

#include "common/dtype.h"
#include "common/status.h"
#include "engine/model/config.h"
#include "kernels/isa.h"

typedef struct numla_bench_model_costs {
    /* weight bytes read by one decode token (batch 1): attention projections (q or q_a + q_b,
     * kv_a, W_UK/W_UV per head, o_proj), dense MLPs, shared experts, the k routed experts a
     * token selects (k of n_routed, every one of them being the same size), the fp32 router,
     * lm_head, one embedding row. Norm weights are left out (< 0.1 %). */
    double weight_bytes;
    double attn_weight_bytes;    /* the attention part of it */
    double mlp_weight_bytes;     /* dense + shared + routed + router */
    double lm_head_bytes;        /* lm_head + embedding row */
    /* 2 · Σ N·K over the same layers (unpadded), router included */
    double linear_flops;
    /* per decode token and per cached context row: 2·(Dc+Dr) for q̃·k plus 2·Dc for p·v, per
     * head and layer */
    double attn_flops_per_ctx;
    /* KV bytes read per decode token and cached row: layers · (Dc + Dr) · kv element size */
    double kv_bytes_per_ctx;
    /* Sparse attention (DSA, docs/sparse_attention.md): a decode token's MLA reads at most
     * index_topk rows (0: dense, every row), and the indexers of the "full" layers score every
     * cached row: 2 · Hi · Di FLOPs and Di key elements per row and full layer. Their weights
     * (wq_b, wk, weights_proj) are in attn_weight_bytes and linear_flops. */
    int64_t index_topk;
    double index_flops_per_ctx;
    double index_bytes_per_ctx;
} numla_bench_model_costs;

/* Costs of cfg with linear weights packed for `isa` from `weight_dtype` sources (bf16 / f32),
 * embedding stored as `embed_dtype`, KV cache elements of `kv_dtype`. INVALID_ARG on a config
 * whose packed sizes come out 0. */
numla_status numla_bench_model_costs_get(const numla_model_config *cfg, numla_isa isa,
                                         numla_dtype weight_dtype, numla_dtype embed_dtype,
                                         numla_dtype kv_dtype, numla_bench_model_costs *out);
/* The same with the projections in 8-bit format fmt (NONE: weight_dtype), read as 1-byte
 * weights plus their scales; W_UV then 8-bit too, W_UK 8-bit where numla_weights_uk_q8 says so
 * (else fp32, dequantized at load: engine/model/weights.h); lm_head 8-bit when lm_head_q8,
 * else weight_dtype. */
numla_status numla_bench_model_costs_get_q(const numla_model_config *cfg, numla_isa isa,
                                           numla_dtype weight_dtype, numla_weight_format fmt,
                                           int lm_head_q8, numla_dtype embed_dtype,
                                           numla_dtype kv_dtype, numla_bench_model_costs *out);
/* The byte fields counted from weights as loaded (this rank's shard): every linear a decode
 * token reads at its packed size (numla_model_linear_bytes: float, 8-bit codes and scales,
 * whole ggml blocks, whatever mix of encodings a file or a --weights recipe gave), W_UK / W_UV
 * per head, the indexer of a DSA layer, the router, k routed experts at the average size of
 * the loaded ones, lm_head, one embedding row; FLOP and KV fields from the config as above.
 * Local. */
struct numla_model_weights;
/* DeepSeek-V4's costs on one rank (the whole model): the weights as loaded
 * (numla_v4_model_token_costs: every linear at its packed size, k routed experts at the mean
 * size, the head, one embedding row); per context row the index keys and HCA entries a decode
 * token reads beyond the window. Local. */
struct numla_v4_model;
numla_status numla_bench_model_costs_v4(const struct numla_v4_model *v4,
                                        numla_bench_model_costs *out);
numla_status numla_bench_model_costs_loaded(const struct numla_model_weights *w,
                                            numla_dtype kv_dtype, numla_bench_model_costs *out);
/* The same for a GGUF file (cfg from it): the byte fields count each tensor as the file stores
 * it (blocks are read as they are), W_UK / W_UV as the fp32 the loader makes of them, the
 * router as fp32, k of the routed experts, one embedding row; the FLOP and KV fields as above.
 * Whole model, not one rank's shard (a K split that cuts a block reads fp32 there: not
 * counted). IO / FORMAT naming the file. */
numla_status numla_bench_model_costs_gguf(const numla_model_config *cfg, const char *path,
                                          numla_dtype kv_dtype, numla_bench_model_costs *out);

#endif
