/* engine/formats/gguf_deepseek2.h — the `deepseek2` architecture of GGUF files (DeepSeek-V2,
 * V2-Lite, V2.5, V3, R1, V3.1 and Kimi K2, which llama.cpp converts under this one name) read into
 * a plain struct with numla's (Hugging Face's) field names, the tensor set checked against it,
 * and GGUF tensor names mapped to the HF names the engine's loader knows. Fills values only:
 * the model room turns the struct into its numla_model_config (not done yet: see
 * docs/quantization.md, "GGUF").
 *
 * Key mapping (every key is "deepseek2." + the name below unless it starts with "tokenizer." or
 * "general."; "required" keys missing are FORMAT naming the file and the key):
 *   general.architecture            must be "deepseek2"
 *   block_count                     num_hidden_layers + nextn_predict_layers  required
 *   nextn_predict_layers            num_nextn_predict_layers: the last blocks are the MTP
 *                                   layers (default 0), with blk.N.nextn.* beside a decoder
 *                                   layer's tensors, as llama.cpp's converter writes them
 *   embedding_length                hidden_size                           required
 *   feed_forward_length             intermediate_size (dense MLP)         required
 *   context_length                  max_position_embeddings               required
 *   attention.head_count            num_attention_heads                   required
 *   attention.head_count_kv         not used (1 in files with the k_b/v_b layout, MLA as MQA)
 *   attention.layer_norm_rms_epsilon rms_norm_eps                         required
 *   attention.q_lora_rank           q_lora_rank; 0 means a plain attn_q. llama.cpp does not
 *                                   read it for 26- or 27-layer models (V2-Lite), which write
 *                                   none; here a missing key means 0 when attn_q exists
 *   attention.kv_lora_rank          kv_lora_rank                          required
 *   rope.dimension_count            qk_rope_head_dim                      required
 *   attention.key_length_mla        qk_nope_head_dim + qk_rope_head_dim (files with k_b/v_b,
 *                                   whose key_length is kv_lora_rank + rope dim, the MQA view)
 *   attention.key_length            the same in files without key_length_mla (legacy kv_b)
 *   attention.value_length_mla      v_head_dim (else attention.value_length)
 *   vocab_size                      vocab_size (else the length of tokenizer.ggml.tokens)
 *   expert_count                    n_routed_experts                      required
 *   expert_used_count               num_experts_per_tok                   required
 *   expert_shared_count             n_shared_experts                      required
 *   expert_feed_forward_length      moe_intermediate_size                 required
 *   leading_dense_block_count       first_k_dense_replace                 default 0
 *   expert_group_count              n_group                               default 1
 *   expert_group_used_count         topk_group                            default n_group
 *   expert_gating_func              scoring_func: 1 softmax, 2 sigmoid; absent (older V2 files)
 *                                   means softmax, as llama.cpp reads it
 *   expert_weights_scale            routed_scaling_factor                 default 1
 *   expert_weights_norm             norm_topk_prob                        default false
 *   rope.freq_base                  rope_theta                            default 10000
 *   rope.scaling.type               "yarn" sets rope_yarn; "none"/absent: no scaling; other
 *                                   types are UNSUPPORTED
 *   rope.scaling.factor             rope_scaling.factor                   required with yarn
 *   rope.scaling.original_context_length  original_max_position_embeddings (default
 *                                   context_length)
 *   rope.scaling.yarn_beta_fast / yarn_beta_slow  beta_fast / beta_slow (default 32 / 1)
 *   rope.scaling.yarn_log_multiplier  0.1 · mscale_all_dim (the converter writes it so; llama.cpp
 *                                   divides by 0.1). GGUF has no separate `mscale`: it is taken
 *                                   equal to mscale_all_dim, which holds for every published
 *                                   DeepSeek config (V2: 0.707 and 0.707; V3: 1 and 1), so
 *                                   the rope attention factor is 1. Absent: both 0 (no m²).
 *   tokenizer.ggml.bos_token_id / eos_token_id   bos / eos ids (-1 when absent)
 *   tokenizer.ggml.model, tokenizer.ggml.pre    kept as strings ("gpt2"; "deepseek-llm",
 *                                   "deepseek-v3", "kimi-k2")
 * Derived from the tensors: tie_word_embeddings (no output.weight), the MoE routing of V3
 * (blk.N.exp_probs_b.bias present: the noaux_tc score bias), the attention layout below.
 *
 * Attention layouts: older files hold blk.N.attn_kv_b.weight (HF kv_b_proj, ggml ne
 * {kv_lora_rank, H·(qk_nope + v_head)}); files from llama.cpp's MLA converter (2025 on) hold
 * blk.N.attn_k_b.weight, ne {qk_nope, kv_lora_rank, H} (per head, kv_b_proj's k_nope rows
 * transposed) and blk.N.attn_v_b.weight, ne {kv_lora_rank, v_head, H} (per head, its v rows);
 * some hold both. NUMLA_GGUF_MLA_SPLIT wins when both are there.
 *
 * Not collective.
 */
#ifndef NUMLA_ENGINE_FORMATS_GGUF_DEEPSEEK2_H
#define NUMLA_ENGINE_FORMATS_GGUF_DEEPSEEK2_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "engine/formats/gguf.h"

typedef enum numla_gguf_mla_layout {
    NUMLA_GGUF_MLA_KV_B = 0, /* attn_kv_b: kv_b_proj as HF stores it */
    NUMLA_GGUF_MLA_SPLIT,    /* attn_k_b + attn_v_b */
} numla_gguf_mla_layout;

typedef struct numla_gguf_deepseek2 {
    int64_t vocab_size;
    int64_t hidden_size;
    int64_t num_hidden_layers;    /* block_count less the MTP blocks */
    int64_t nextn_predict_layers; /* MTP blocks after them (blk.N.nextn.*) */
    int64_t num_attention_heads;
    int64_t intermediate_size;
    double rms_norm_eps;
    int64_t max_position_embeddings;
    int tie_word_embeddings;

    int64_t q_lora_rank;          /* 0: plain attn_q */
    int64_t kv_lora_rank;
    int64_t qk_nope_head_dim;
    int64_t qk_rope_head_dim;
    int64_t v_head_dim;

    int64_t n_routed_experts;
    int64_t n_shared_experts;
    int64_t num_experts_per_tok;
    int64_t moe_intermediate_size;
    int64_t first_k_dense_replace;
    int64_t n_group;
    int64_t topk_group;
    int scoring_sigmoid;          /* expert_gating_func 2 (V3), else softmax (V2) */
    int score_bias;               /* exp_probs_b.bias tensors present (V3's noaux_tc) */
    int norm_topk_prob;
    double routed_scaling_factor;

    double rope_theta;
    int rope_yarn;
    double rope_factor;           /* 1 without scaling */
    int64_t rope_original_max_position_embeddings;
    double rope_beta_fast, rope_beta_slow;
    double rope_mscale, rope_mscale_all_dim;

    numla_gguf_mla_layout attn_layout;

    int32_t bos_token_id, eos_token_id; /* -1 when absent */
    char tokenizer_model[32];
    char tokenizer_pre[32];
} numla_gguf_deepseek2;

/* Read and validate the keys (sizes positive and within bounds), detect the layout, then check
 * every tensor the model needs exists with the shape the keys give (FORMAT naming the file,
 * the tensor and both shapes). Not collective. */
numla_status numla_gguf_deepseek2_read(const numla_gguf *g, numla_gguf_deepseek2 *out);

/* What a GGUF tensor is in the HF checkpoint: `hf` its name ("model.layers.3.mlp.gate.weight");
 * for the stacked expert tensors (ffn_*_exps, ne[2] = expert) the name has "{E}" where the
 * expert index goes; attn_k_b / attn_v_b map to kv_b_proj with `kv_b_part` 1 (k_nope rows,
 * transposed per head) or 2 (v rows). */
typedef struct numla_gguf_hf_name {
    char hf[160];
    int stacked_experts;
    int kv_b_part;
} numla_gguf_hf_name;

/* NUMLA_STATUS_UNSUPPORTED naming the tensor when deepseek2 has no such tensor. Not collective. */
numla_status numla_gguf_deepseek2_hf_name(const char *gguf_name, numla_gguf_hf_name *out);

#endif
