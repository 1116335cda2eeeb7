/* engine/formats/gguf_deepseek4.h — the `deepseek4` architecture of GGUF files (DeepSeek-V4
 * Flash and Pro as llama.cpp's converter writes them: conversion/deepseek.py DeepseekV4Model)
 * read into a plain struct with the names of DeepSeek's config.json, the tensor set checked
 * against it, and the file's tensors shown under DeepSeek's own tensor names (the names the
 * safetensors loader of engine/model/model_v4.c asks for) as a numla_safetensors_model view.
 *
 * Key mapping (every key is "deepseek4." + the name below unless it starts with "tokenizer.";
 * "required" keys missing are FORMAT naming the file and the key):
 *   general.architecture                 must be "deepseek4"
 *   block_count                          num_hidden_layers                         required
 *   embedding_length                     hidden_size                               required
 *   context_length                       max_position_embeddings                   required
 *   attention.head_count                 num_attention_heads                       required
 *   attention.head_count_kv              must be 1 when present (one shared KV row)
 *   attention.key_length                 head_dim                                  required
 *   attention.value_length               must equal key_length when present
 *   attention.layer_norm_rms_epsilon     rms_norm_eps                              required
 *   attention.q_lora_rank                q_lora_rank                               required
 *   attention.sliding_window             sliding_window                            required
 *   attention.output_group_count         o_groups                                  required
 *   attention.output_lora_rank           o_lora_rank                               required
 *   attention.compress_ratios            compress_ratios (int array, >= block_count entries;
 *                                        0 sliding, 4 CSA (llama.cpp's rule), any other
 *                                        value HCA at that rate)                   required
 *   attention.compress_rope_freq_base    compress_rope_theta                       required
 *   attention.indexer.head_count / key_length / top_k   index_n_heads / index_head_dim /
 *                                        index_topk                 required with a CSA layer
 *   rope.dimension_count                 qk_rope_head_dim                          required
 *   rope.freq_base                       rope_theta (sliding layers)               default 10000
 *   rope.scaling.type                    "yarn" gives rope_scaling (the compressed layers');
 *                                        "none"/absent: none; other types UNSUPPORTED
 *   rope.scaling.factor / original_context_length / yarn_beta_fast / yarn_beta_slow
 *                                        rope_scaling's factor (required with yarn),
 *                                        original_max_position_embeddings, beta_fast (32),
 *                                        beta_slow (1)
 *   expert_count / expert_used_count     n_routed_experts / num_experts_per_tok    required
 *   expert_shared_count                  n_shared_experts                          required
 *   expert_feed_forward_length           moe_intermediate_size                     required
 *   expert_gating_func                   must be 4 (sqrtsoftplus) when present
 *   expert_weights_scale                 routed_scaling_factor                     default 1
 *   expert_weights_norm                  norm_topk_prob                            default false
 *   swiglu_clamp_exp / swiglu_clamp_shexp  swiglu_limit: float arrays, one per layer, all
 *                                        equal (numla has one limit)               required
 *   hyper_connection.count / sinkhorn_iterations / epsilon   hc_mult / hc_sinkhorn_iters /
 *                                        hc_eps                                    required
 *   hash_layer_count                     num_hash_layers                           default 0
 *   vocab_size                           vocab_size (else tokenizer.ggml.tokens' length)
 *   tokenizer.ggml.bos_token_id / eos_token_id   bos / eos ids (-1 when absent)
 *   embedding_length_out and the chat template are not read.
 *
 * The MTP layer. llama.cpp's converter leaves `mtp.*` out of the model's file and writes the
 * layer as a file of its own (convert_hf_to_gguf.py --mtp, "mtp-<name>.gguf";
 * conversion/deepseek.py DeepseekV4Model with mtp_only): nextn_predict_layers 1, block_count
 * the model's layers + 1 (swiglu_clamp_* and compress_ratios as long), the same shape keys, the
 * layer's block as blk.L.* (L = the model's layer count), blk.L.nextn.eh_proj ({2D, D}:
 * e_proj and h_proj side by side, the converter's Q8_0), blk.L.nextn.enorm / hnorm /
 * shared_head_norm, the layer's own hyper-head as the root output_hc_* and a copy of the
 * model's token_embd, output and output_norm. numla_gguf_deepseek4_read_mtp checks it against
 * the model's keys; numla_gguf_deepseek4_view_mtp shows its tensors beside the model's as
 * DeepSeek's mtp.0.*: blk.L.X -> mtp.0.<X as above>, nextn.eh_proj -> mtp.0.eh_proj.weight
 * (the loader reads e_proj and h_proj as its two column halves), nextn.enorm / hnorm ->
 * mtp.0.enorm.weight / hnorm.weight, nextn.shared_head_norm -> mtp.0.norm.weight,
 * output_hc_{fn,base,scale} -> mtp.0.hc_head_{fn,base,scale}; its embedding, head and norm copy
 * are not shown (the model's are read).
 *
 * Tensors (ggml ne, reversed to PyTorch's shape in the view; names after "blk.L."):
 *   token_embd, output (absent: tied), output_norm -> embed.weight, head.weight, norm.weight
 *   output_hc_fn / _base / _scale           -> hc_head_fn / hc_head_base / hc_head_scale
 *   attn_norm, ffn_norm                     -> layers.L.attn_norm.weight, ffn_norm.weight
 *   hc_{attn,ffn}_{fn,base,scale}           -> layers.L.hc_{attn,ffn}_{fn,base,scale}
 *   attn_q_a, attn_q_a_norm, attn_q_b       -> attn.wq_a.weight, attn.q_norm.weight, attn.wq_b.weight
 *   attn_kv, attn_kv_a_norm, attn_sinks     -> attn.wkv.weight, attn.kv_norm.weight, attn.attn_sink
 *   attn_output_a, attn_output_b            -> attn.wo_a.weight, attn.wo_b.weight
 *   attn_compressor_{kv,gate,ape,norm}      -> attn.compressor.{wkv.weight, wgate.weight, ape,
 *                                              norm.weight}                 (CSA and HCA layers)
 *   indexer_compressor_{kv,gate,ape,norm}   -> attn.indexer.compressor.{...}      (CSA layers)
 *   indexer.attn_q_b, indexer.proj          -> attn.indexer.wq_b.weight, weights_proj.weight
 *   ffn_gate_inp, exp_probs_b.bias          -> ffn.gate.weight, ffn.gate.bias (routed layers)
 *   ffn_gate_tid2eid (I32 {k, vocab})       -> ffn.gate.tid2eid                   (hash layers)
 *   ffn_{gate,down,up}_exps ({K, N, E})     -> ffn.experts.E.w1/w2/w3.weight, one view each
 *   ffn_{gate,down,up}_shexp                -> ffn.shared_experts.w1/w2/w3.weight
 * Vectors (norms, sinks, mHC base/scale, the router bias) must be F32, F16 or BF16; matrices
 * may be any float or block type (llama-quantize also quantizes mHC's fn and the compressors'
 * ape, which the loader dequantizes). F32, F16 and BF16 tensors keep their dtype, I32 is
 * NUMLA_DTYPE_I32; any other ggml type is a block tensor (dtype NUMLA_DTYPE_END, its ggml code in ggml_type): the converter writes the
 * routed experts as MXFP4 (repacked losslessly from DeepSeek's FP4), the FP8 projections as
 * Q8_0 (dequantized, then requantized), BF16/F32 tensors as they were.
 *
 * Not collective.
 */
#ifndef NUMLA_ENGINE_FORMATS_GGUF_DEEPSEEK4_H
#define NUMLA_ENGINE_FORMATS_GGUF_DEEPSEEK4_H

#include <stdint.h>

#include "common/status.h"
#include "engine/formats/gguf.h"
#include "engine/formats/safetensors.h"

#define NUMLA_GGUF_DS4_MAX_LAYERS 1024

typedef struct numla_gguf_deepseek4 {
    int64_t vocab_size, hidden_size, num_hidden_layers, max_position_embeddings;
    int64_t num_attention_heads, head_dim, qk_rope_head_dim, q_lora_rank;
    int64_t o_groups, o_lora_rank, sliding_window;
    double rms_norm_eps;
    int32_t compress_ratios[NUMLA_GGUF_DS4_MAX_LAYERS]; /* (num_hidden_layers) */
    int64_t hca_rate;                  /* the non-4 nonzero ratio (128 when none) */
    double compress_rope_theta, rope_theta;
    int64_t index_n_heads, index_head_dim, index_topk; /* 0 without CSA layers */
    int rope_yarn;
    double rope_factor, rope_beta_fast, rope_beta_slow;
    int64_t rope_original_max_position_embeddings;
    int64_t n_routed_experts, num_experts_per_tok, n_shared_experts, moe_intermediate_size;
    double routed_scaling_factor;
    int norm_topk_prob;
    double swiglu_limit;
    int64_t hc_mult, hc_sinkhorn_iters;
    double hc_eps;
    int64_t num_hash_layers;
    int tie_word_embeddings;           /* no output.weight */
    int32_t bos_token_id, eos_token_id; /* -1 when absent */
} numla_gguf_deepseek4;

/* Whether g's general.architecture is "deepseek4". */
int numla_gguf_is_deepseek4(const numla_gguf *g);

/* Read and validate the keys, then check that every tensor the model needs exists with the
 * shape the keys give (FORMAT naming the file, the key or the GGUF tensor and both shapes).
 * Not collective. */
numla_status numla_gguf_deepseek4_read(const numla_gguf *g, numla_gguf_deepseek4 *out);

/* The view of g's tensors under DeepSeek's names (the table above), for the V4 loader; g must
 * outlive it (close it with numla_safetensors_close). Tensors the table does not name are left
 * out. Not collective. */
numla_status numla_gguf_deepseek4_view(const numla_gguf *g, numla_safetensors_model **out);

/* Check mtp, an MTP file as llama.cpp's --mtp conversion writes it (above), against the
 * model's keys `main` (numla_gguf_deepseek4_read of the model's file): nextn_predict_layers 1,
 * block_count one more than the model's, the shape keys equal, the layer's tensors with their
 * shapes. main NULL: the file alone (its own keys stand for the model's). *mtp_ratio: its compress_ratios entry (0, 4, or the model's HCA rate). FORMAT or
 * UNSUPPORTED naming the file and the key or tensor. Not collective. */
numla_status numla_gguf_deepseek4_read_mtp(const numla_gguf *mtp, const numla_gguf_deepseek4 *main,
                                           int32_t *mtp_ratio);

/* numla_gguf_deepseek4_view with mtp's layer added as mtp.0.* (above); both files must outlive
 * it. Not collective. */
numla_status numla_gguf_deepseek4_view_mtp(const numla_gguf *g, const numla_gguf *mtp,
                                           numla_safetensors_model **out);

#endif
