/* engine/synth/quantized_checkpoint.h — writing 8-bit checkpoints in the published formats,
 * tensor by tensor (the writer behind `numla quantize`; numla_qckpt_* is its prefix).
 *
 * FP8 as DeepSeek-V3/R1 publish it: config.json quantization_config {"quant_method": "fp8",
 * "fmt": "e4m3", "weight_block_size": [128, 128], "activation_scheme": "dynamic"}; each
 * quantized `X.weight` is F8_E4M3 (N, K) next to `X.weight_scale_inv` F32 (ceil(N/128),
 * ceil(K/128)). INT8 as SGLang's w8a8_int8 loads it (the "Channel-INT8" DeepSeek checkpoints):
 * quantization_config {"quant_method": "w8a8_int8", "activation_scheme": "dynamic"}; `X.weight`
 * I8 (N, K) next to `X.weight_scale` F32 (N, 1). Values: kernels/quant.h.
 *
 * Quantized: the 2-D `.weight` of the attention and MLP projections (q_proj, q_a_proj,
 * q_b_proj, kv_a_proj_with_mqa, kv_b_proj, o_proj, gate_proj, up_proj, down_proj: dense,
 * routed experts and shared experts) and the DSA indexer's wq_b and wk (as DeepSeek-V3.2's FP8
 * file has them). Kept in their own dtype: the indexer's weights_proj and k_norm,
 * embed_tokens, every norm, the
 * router `mlp.gate.weight` and `e_score_correction_bias`, and lm_head — always for FP8 (as
 * DeepSeek publishes it, so other engines load the files), and for INT8 only with
 * keep_lm_head (by default INT8 quantizes lm_head too, as llama.cpp's Q8_0 does; SGLang's
 * w8a8_int8 then needs "lm_head" out of its `ignore` list, which we never write).
 *
 * Whole weights are never held in memory: scales come from one pass over the source in bands
 * of 128 rows, and the codes are made chunk by chunk while the safetensors writer writes.
 * Not collective.
 */
#ifndef NUMLA_ENGINE_QUANTIZED_CHECKPOINT_H
#define NUMLA_ENGINE_QUANTIZED_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/status.h"
#include "engine/formats/safetensors.h"
#include "engine/formats/weight_encoding.h"

/* What numla quantize writes: an encoding of engine/formats/weight_encoding.h (one enum). */
typedef numla_weight_encoding numla_qckpt_format;
#define NUMLA_QCKPT_NONE NUMLA_ENCODING_NONE
#define NUMLA_QCKPT_FP8 NUMLA_ENCODING_FP8
#define NUMLA_QCKPT_INT8 NUMLA_ENCODING_INT8

/* "fp8" / "int8" -> format; 0 when the name is neither. */
int numla_qckpt_format_parse(const char *s, numla_qckpt_format *out);

/* Whether `name` (a tensor with ndim dimensions) is stored quantized in format f. */
int numla_qckpt_quantizes(numla_qckpt_format f, const char *name, int32_t ndim, int keep_lm_head);

/* The scale tensor's name for weight `name` ("X.weight_scale_inv" / "X.weight_scale") and its
 * shape for an (n, k) weight. */
void numla_qckpt_scale_name(numla_qckpt_format f, const char *name, char *buf, size_t cap);
void numla_qckpt_scale_shape(numla_qckpt_format f, int64_t n, int64_t k, int64_t shape[2]);
/* Bytes of codes + scales of an (n, k) weight. */
int64_t numla_qckpt_bytes(numla_qckpt_format f, int64_t n, int64_t k);

/* Set config's "quantization_config" for format f. */
numla_status numla_qckpt_config_set(json_t *config, numla_qckpt_format f);

/* Rows [r0, r1) of the source weight, as fp32 (r1 - r0, k) into dst. */
typedef numla_status (*numla_qckpt_rows_fn)(void *ctx, int64_t r0, int64_t r1, float *dst);

typedef struct numla_qckpt_tensor numla_qckpt_tensor;

/* Read the source once for the scales (a non-finite weight is an error naming the tensor).
 * ctx must outlive the tensor. */
numla_status numla_qckpt_tensor_create(numla_qckpt_format f, const char *name, int64_t n, int64_t k,
                                       numla_qckpt_rows_fn rows, void *ctx,
                                       numla_qckpt_tensor **out);
/* Add the weight (codes, produced at write time) and its scale tensor to w. The tensor must
 * outlive numla_safetensors_writer_write. */
numla_status numla_qckpt_tensor_add(numla_qckpt_tensor *t, numla_safetensors_writer *w);
void numla_qckpt_tensor_destroy(numla_qckpt_tensor **t);

/* numla quantize: read the bf16/fp16/fp32 checkpoint in model_dir and write it to out_dir in
 * format f: quantized weights + scales, other tensors copied in their own dtype, shards of at
 * most shard_bytes (0: 4 GiB) named by model.safetensors.index.json, config.json with the
 * quantization_config, and every other file of model_dir (tokenizer, generation config, code)
 * copied. A checkpoint that is already quantized is UNSUPPORTED. `total_bytes` may be NULL. */
numla_status numla_qckpt_quantize_model(const char *model_dir, const char *out_dir,
                                        numla_qckpt_format f, int keep_lm_head,
                                        int64_t shard_bytes, int64_t *total_bytes);

/* Copy the file src to dst (created or truncated); the error names the path that failed. */
numla_status numla_qckpt_copy_file(const char *src, const char *dst);

#endif
