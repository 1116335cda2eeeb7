/* engine/model/weights.h — one rank's shard of a DeepSeek V2/V3 model, copied out of the mapped
 * safetensors into anonymous memory this struct owns (docs/design.md §2, §3).
 *
 * How the tensors are split over the ranks: engine/model/shard.h.
 *
 * Linear layers (numla_model_linear) are either float weights packed with numla_linear_pack
 * (kernels/linear.h) for the chosen ISA, or 8-bit weights packed with numla_qlinear_pack
 * (kernels/qlinear.h), 1 byte each plus their scales, never expanded: fp8 e4m3 with 128 x 128
 * block scales (FP8_BLOCK), int8 with one scale per row run as W8A8 (activations quantized per
 * token). A tensor is 8-bit when the checkpoint stores it so (config quantization_config,
 * F8_E4M3 / I8 next to its `_scale_inv` / `_scale`) or when numla_weights_options asks for it
 * (quantized while loading, the same values `numla quantize` writes: kernels/quant.h on the
 * full tensor's blocks and rows). Norm weights, the router gate and the bias are fp32; the
 * embedding keeps the file's dtype.
 * kv_b_proj is split per head for the absorbed attention (docs/design.md §5):
 *   uk_t[h] = W_UK,hᵀ packed as a (Dc, nope) linear so that q̃ = uk_t · q_nope,
 *   uv[h]   = W_UV,h  packed as a (v, Dc) linear so that o_h = uv · ctx.
 * An 8-bit kv_b_proj keeps them 8-bit, run with fp32 activations (fp8, or int8 as INT8_ROW,
 * never W8A8: the products stay fp32-class and independent of the rank count):
 *   uv[h]   rows h·(nope+v) + nope.. of kv_b_proj, packed from its codes and full scale grid;
 *   uk_t[h] the head's nope rows transposed. fp8: when nope and nope + v are multiples of 128
 *           the rows are whole 128-row scale blocks, so the transpose is an fp8 (Dc, nope)
 *           matrix whose grid is that block row transposed (numla_weights_uk_q8). int8: the
 *           scale of original row j multiplies column j of the transpose, so it is folded into
 *           the input instead, q̃ = Σ_j q[j][·] (s_j q_nope[j]): codes with unit row scales, and
 *           the s_j in uk_in_scale.
 * fp8 shapes where the nope rows cut a scale block (nope or nope + v not a multiple of 128)
 * fall back to uk_t dequantized once, at load, into fp32 (uv stays fp8); --weights bf16 on an
 * 8-bit checkpoint dequantizes both into fp32. The expanded form's kv_b stays 8-bit.
 */
#ifndef NUMLA_ENGINE_WEIGHTS_H
#define NUMLA_ENGINE_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/status.h"
#include "engine/model/config.h"
#include "engine/model/model_linear.h"
#include "engine/model/shard.h"
#include "engine/formats/gguf.h"
#include "engine/formats/safetensors.h"
#include "kernels/isa.h"
#include "kernels/linear.h"
#include "kernels/qlinear.h"

/* Whether uk_t (W_UK,hᵀ) is kept 8-bit for an 8-bit kv_b_proj of format f (see above): int8
 * always; fp8 when qk_nope_head_dim and qk_nope_head_dim + v_head_dim are multiples of 128. */
int numla_weights_uk_q8(const numla_model_config *c, numla_weight_format f);

typedef struct numla_weights_mlp {  /* SiLU-gated MLP slice: I_r = its intermediate slice */
    int64_t inter;                  /* I_r (may be 0 on ranks that own none of it) */
    numla_model_linear gate;        /* (I_r, hidden) */
    numla_model_linear up;          /* (I_r, hidden) */
    numla_model_linear down;        /* (hidden, I_r) */
} numla_weights_mlp;

typedef struct numla_weights_layer {
    float *input_norm;              /* (hidden) */
    float *post_attn_norm;          /* (hidden) */

    /* attention: H_r = shard.head_count */
    numla_model_linear q_proj;      /* (H_r · q_head_dim, hidden); when q_lora_rank == 0 */
    numla_model_linear q_a_proj;    /* (q_lora_rank, hidden); when q_lora_rank > 0 */
    float *q_a_norm;                /* (q_lora_rank) */
    numla_model_linear q_b_proj;    /* (H_r · q_head_dim, q_lora_rank) */
    numla_model_linear kv_a_proj;   /* (Dc + Dr, hidden) */
    float *kv_a_norm;               /* (Dc) */
    numla_model_linear *uk_t;       /* [H_r] each (Dc, nope) = W_UK,hᵀ */
    float *uk_in_scale;             /* (H_r, nope): int8 uk_t only (else NULL): kv_b_proj's row
                                     * scales of each head's nope rows, applied to q_nope */
    numla_model_linear *uv;         /* [H_r] each (v_head_dim, Dc) = W_UV,h */
    numla_model_linear kv_b;        /* (H_r · (nope + v_head_dim), Dc): the owned heads' kv_b_proj
                                     * rows, for the expanded prefill form ([k_nope | v] per head) */
    numla_model_linear o_proj;      /* (hidden, H_r · v_head_dim): the owned heads' columns */

    /* DSA lightning indexer (cfg.dsa, layers whose indexer_full is set; zero otherwise),
     * replicated on every rank: Hi = index_n_heads, Di = index_head_dim. Kept as the file
     * stores them (never quantized at load: the selection is what they decide). */
    int has_indexer;
    numla_model_linear idx_wq_b;    /* (Hi · Di, q_lora_rank) */
    numla_model_linear idx_wk;      /* (Di, hidden) */
    float *idx_k_norm_w;            /* (Di) LayerNorm weight */
    float *idx_k_norm_b;            /* (Di) LayerNorm bias */
    numla_model_linear idx_weights; /* (Hi, hidden) weights_proj */

    /* MLP: dense layers use `dense`; MoE layers the rest */
    int is_moe;
    numla_weights_mlp dense;        /* intermediate slice of intermediate_size */
    numla_model_linear router;      /* (n_routed_experts, hidden) fp32, replicated */
    float *router_bias;             /* (n_routed_experts) e_score_correction_bias, V3 only */
    numla_weights_mlp *experts;     /* [expert_count]: experts expert_begin.. */
    numla_weights_mlp shared;       /* slice of n_shared · moe_intermediate (inter 0 if none) */
} numla_weights_layer;

/* The multi-token-prediction layer (cfg.mtp_enabled; docs/speculative.md): its decoder block
 * is layers[num_hidden_layers]; the embedding and the output head are the main model's (the
 * checkpoint's model.layers.N.embed_tokens and shared_head.head are copies of them and are not
 * read). eh_proj's output rows are split over the ranks like the vocabulary (each rank writes
 * its slice of the hidden vector and the allreduce assembles it); its input, the whole
 * [enorm(emb) | hnorm(h)], is on every rank. */
typedef struct numla_weights_mtp {
    float *enorm;                   /* (hidden) */
    float *hnorm;                   /* (hidden) */
    float *head_norm;               /* (hidden) shared_head.norm */
    int64_t row_begin, row_count;   /* eh_proj rows (hidden outputs) this rank owns */
    numla_model_linear eh_proj;     /* (row_count, 2 · hidden) */
} numla_weights_mtp;

typedef struct numla_model_weights {
    numla_model_config cfg;
    numla_shard shard;
    numla_isa isa;
    numla_weight_format format;     /* the 8-bit format the projections run in (NONE: float) */
    int lm_head_q8;                 /* lm_head is 8-bit */
    numla_dtype embed_dtype;        /* when !embed_blocks */
    int embed_blocks;               /* a GGUF embedding kept in blocks of embed_qtype */
    numla_qblock_type embed_qtype;
    size_t embed_row_bytes;         /* bytes of one token's row */
    void *embed;                    /* (vocab_size, hidden): embed_dtype, or rows of blocks */
    numla_weights_layer *layers;    /* [num_hidden_layers (+ 1: the MTP block when
                                     * cfg.mtp_enabled)] */
    float *final_norm;              /* (hidden) */
    numla_model_linear lm_head;     /* (vocab_count, hidden): rows vocab_begin.. */
    numla_weights_mtp mtp;          /* when cfg.mtp_enabled */

    void *arena;                    /* anonymous mapping holding everything above */
    size_t arena_bytes;
    size_t loaded_bytes;            /* bytes of weights copied (for bandwidth bounds) */
} numla_model_weights;

/* What to load the weights as. */
typedef struct numla_weights_options {
    /* -1: as the checkpoint is; NONE: float (an 8-bit checkpoint is dequantized to bf16);
     * FP8 / INT8: a float checkpoint's projections are quantized while loading (the checkpoint
     * must be float or already in that format). */
    int format;
    int keep_lm_head;               /* with FP8 / INT8 on a float checkpoint: lm_head stays bf16 */
    int qblock_fp32_act;            /* GGUF blocks: every linear keeps fp32 activations (default:
                                     * int8 per 256 columns where weights.c says so) */
    numla_linear_act linear_act;    /* bf16 linears' activations (kernels/linear.h): F32 (default,
                                     * fp32-class) or BF16 (x rounded to bf16; --linear-act bf16) */
    int qblock_q8_act;              /* DeepSeek-V4: its block-quantized linears (FP4 experts, a GGUF
                                     * file's blocks) take int8 activations per 256 (or 32) columns
                                     * where the level has the Q8 kernel, as llama.cpp runs them
                                     * (--linear-act q8; default: exact fp32 activations). The
                                     * other models' GGUF blocks: qblock_fp32_act above */
} numla_weights_options;

/* format -1, keep_lm_head 0, linear_act F32. */
numla_weights_options numla_weights_options_default(void);
/* The command-line spelling (`--weights`: the encodings the table makes at load, "bf16" (NONE),
 * "fp8", "int8", "q8_0", "q4_0", "q4_k"; numla_weight_encoding_parse) -> o->format; 0 when it is
 * none. */
int numla_weights_format_parse(const char *s, numla_weights_options *o);

/* Load the shard for (rank, nranks) from an open safetensors model, validating the shape of
 * every tensor it needs; a failure lists every missing or mis-shaped tensor. Packs for `isa`.
 * Progress goes to stderr when stderr is a terminal. Not collective (each rank loads its own). */
numla_status numla_weights_load(const numla_model_config *cfg, const numla_safetensors_model *st,
                                int32_t rank, int32_t nranks, numla_isa isa,
                                numla_model_weights **out);
/* The same with options (NULL: the defaults). 8-bit tensors are checked: a missing scale, a
 * scale of the wrong shape or dtype, a NaN/inf or zero scale, an e4m3 NaN code, an 8-bit
 * tensor in a checkpoint without the matching quantization_config are FORMAT errors naming
 * the tensor, and nothing stays loaded. Not collective. */
numla_status numla_weights_load_ex(const numla_model_config *cfg, const numla_safetensors_model *st,
                                   int32_t rank, int32_t nranks, numla_isa isa,
                                   const numla_weights_options *opts, numla_model_weights **out);
/* The same from an open GGUF deepseek2 file (cfg from numla_model_config_load on the same path):
 * ggml block tensors stay in their encoding (model_linear.h QBLOCK), F32/F16/BF16 ones load as
 * a safetensors checkpoint's; stacked experts, both MLA layouts and the sharding rules on
 * blocks: weights_gguf.c and ld_linear_qblock in weights.c. --weights bf16 dequantizes the
 * blocks into fp32; fp8 / int8 are refused. Not collective. */
numla_status numla_weights_load_gguf(const numla_model_config *cfg, const numla_gguf *g,
                                     int32_t rank, int32_t nranks, numla_isa isa,
                                     const numla_weights_options *opts, numla_model_weights **out);
/* Open path (a model directory of safetensors, or a .gguf file / first part of a split set),
 * load the shard and close the files. Not collective. */
numla_status numla_weights_load_path(const numla_model_config *cfg, const char *path,
                                     int32_t rank, int32_t nranks, numla_isa isa,
                                     const numla_weights_options *opts, numla_model_weights **out);
void numla_weights_destroy(numla_model_weights **w);

#endif
