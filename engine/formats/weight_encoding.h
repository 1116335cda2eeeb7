/* engine/formats/weight_encoding.h — the one table of weight encodings numla reads and writes:
 * how a weight tensor's values are stored (codes, block shape, bytes, where the scales live)
 * and where its reference dequantization is. The loader (engine/model/weights*.c), the
 * quantizer (`numla quantize`, engine/synth/quantized_checkpoint.c) and the benchmarks' byte
 * counting (bench/bench_model_costs.c) all ask this table; a ggml block encoding's name, block
 * and bytes are the ggml table's (common/ggml_types.h, NUMLA_GGML_ROW), as are the block
 * kernels' (kernels/qblock.h); config.json's quantization_config
 * (numla_weight_format) and the quantizer's format (numla_qckpt_format) are this enum under
 * their old names.
 *
 *   encoding  name     block (rows x cols)  bytes a block    scales                 reference dequant
 *   NONE      "bf16"   1 x 1                2 (the file's F32 / F16 / BF16)         common/dtype.h
 *   FP8       "fp8"    128 x 128            128·128 codes    fp32 per block, tensor kernels/quant.h
 *                                                            X.weight_scale_inv     (code · scale)
 *   INT8      "int8"   1 x K (a row)        K codes          fp32 per row, tensor   kernels/quant.h
 *                                                            X.weight_scale
 *   Q8_0      "Q8_0"   1 x 32               34               in the block (fp16 d)  kernels/qblock.h
 *   Q4_0      "Q4_0"   1 x 32               18               in the block           (numla_qblock_
 *   Q4_K      "Q4_K"   1 x 256              144              in the block           dequant_ref,
 *   Q5_K      "Q5_K"   1 x 256              176              in the block           the ggml layouts
 *   Q6_K      "Q6_K"   1 x 256              210              in the block           byte for byte)
 *   IQ4_XS    "IQ4_XS" 1 x 256              136              in the block
 *   Q2_K      "Q2_K"   1 x 256              84               in the block
 *   Q3_K      "Q3_K"   1 x 256              110              in the block
 *   Q5_0      "Q5_0"   1 x 32               22               in the block
 *   IQ4_NL    "IQ4_NL" 1 x 32               18               in the block
 *   Q5_1      "Q5_1"   1 x 32               24               in the block
 *   INT4      "int4"   1 x 32               16 (8 per int32) scale per group,       weights.c
 *                                                            tensor X.weight_scale  (scale · q)
 *            compressed-tensors pack-quantized, symmetric: q in [-8, 7] stored as q + 8, element
 *            e of a row at bits 4(e % 8) of int32 word e / 8 (X.weight_packed, (N, K/8)); the
 *            scale in the model's dtype (N, K/32); X.weight_shape (2) the unpacked (N, K)
 *   MXFP4     "MXFP4"  1 x 32               17               in the block (E8M0 e)  kernels/qblock.h
 *   FP4       "fp4"    1 x 32               16 (2 per byte)  E8M0 per 32, tensor    kernels/qblock_quant.h
 *                                                            P.scale for P.weight   (repacked to MXFP4)
 *            DeepSeek-V4's routed experts as published (config.json: quantization_config fp8 with
 *            scale_fmt ue8m0, top-level expert_dtype "fp4"): P.weight I8 (N, K/2), byte j of a row
 *            holding element 2j in its low nibble and 2j+1 in its high one, each an e2m1 code
 *            (sign bit 3; magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6); P.scale F8_E8M0 (N, K/32), the
 *            scale of elements [32b, 32b + 32) being 2^(s - 127); w = e2m1 · 2^(s - 127)
 *            (docs/quantization.md gives the sources). It is repacked losslessly into MXFP4
 *            blocks (the same scale byte, the nibbles reordered; e2m1's -0 becomes +0).
 * Blocks never span rows, so a row shard is always whole blocks; a column (K) shard is whole
 * blocks only when it starts and ends on block_cols (engine/model/weights.c says what happens
 * otherwise). Pure data; not collective.
 */
#ifndef NUMLA_ENGINE_FORMATS_WEIGHT_ENCODING_H
#define NUMLA_ENGINE_FORMATS_WEIGHT_ENCODING_H

#include <stddef.h>
#include <stdint.h>

typedef enum numla_weight_encoding {
    NUMLA_ENCODING_NONE = 0, /* float: F32 / F16 / BF16 as the file stores it */
    NUMLA_ENCODING_FP8,      /* DeepSeek's published fp8: e4m3 + 128 x 128 block scales */
    NUMLA_ENCODING_INT8,     /* SGLang's w8a8_int8: int8 + one scale per row */
    NUMLA_ENCODING_Q8_0,     /* ggml block encodings (GGUF files) */
    NUMLA_ENCODING_Q4_0,
    NUMLA_ENCODING_Q4_K,
    NUMLA_ENCODING_Q5_K,
    NUMLA_ENCODING_Q6_K,
    NUMLA_ENCODING_IQ4_XS,
    NUMLA_ENCODING_Q2_K,
    NUMLA_ENCODING_Q3_K,
    NUMLA_ENCODING_INT4,     /* compressed-tensors pack-quantized: int4 + a scale per 32 */
    NUMLA_ENCODING_Q5_0,     /* llama-quantize's fallbacks where K is not a multiple of 256 */
    NUMLA_ENCODING_IQ4_NL,
    NUMLA_ENCODING_Q5_1,     /* and Q5_K's */
    NUMLA_ENCODING_Q4_1,
    NUMLA_ENCODING_MXFP4,    /* ggml's MXFP4 (GGUF deepseek4 experts) */
    NUMLA_ENCODING_FP4,      /* DeepSeek-V4's published FP4 experts: e2m1 pairs + e8m0 per 32 */
    NUMLA_ENCODING_COUNT,
} numla_weight_encoding;

typedef enum numla_scale_place {
    NUMLA_SCALES_NONE = 0,   /* float values */
    NUMLA_SCALES_TENSOR,     /* a separate fp32 tensor, X + scale_suffix */
    NUMLA_SCALES_IN_BLOCK,   /* inside each block (ggml) */
} numla_scale_place;

typedef struct numla_weight_encoding_info {
    const char *name;         /* "bf16", "fp8", "int8", "Q4_K" (ggml's spelling) */
    int32_t block_rows;       /* rows a block (or a scale) covers */
    int32_t block_cols;       /* columns; 0: the whole row */
    int32_t block_bytes;      /* bytes of a block's codes (and in-block scales); 0: per element */
    int32_t code_bytes;       /* NONE: 0 (the file's dtype); FP8 / INT8: 1 per weight */
    numla_scale_place scales;
    const char *scale_suffix; /* NUMLA_SCALES_TENSOR: "_scale_inv" / "_scale" */
    uint32_t ggml_type;       /* the GGUF tensor type code; UINT32_MAX when none */
    const char *dequant;      /* where its reference dequantization is */
    const char *option;       /* how `--weights` and `numla quantize --to` spell it ("bf16", "q4_k");
                               * NULL: numla never makes it */
    uint8_t made;             /* who makes it: NUMLA_ENCODING_AT_LOAD | NUMLA_ENCODING_BY_QUANTIZE */
    int32_t scale_bytes;      /* NUMLA_SCALES_TENSOR with block_bytes: one scale's bytes (int4's
                               * bf16 2 when 0; fp4's e8m0 1) */
} numla_weight_encoding_info;

/* Who makes an encoding from a float checkpoint (bf16: dequantizes an 8-bit one at load). */
enum {
    NUMLA_ENCODING_AT_LOAD = 1,     /* numla run / serve / bench --weights NAME, while loading */
    NUMLA_ENCODING_BY_QUANTIZE = 2, /* numla quantize --to NAME (and numla synth --weights) */
};

/* The row of the table; NULL for a value out of range. */
const numla_weight_encoding_info *numla_weight_encoding_get(numla_weight_encoding e);
/* The one parser of the option names: the encoding named s among those `made` makes (a mask of
 * NUMLA_ENCODING_AT_LOAD / BY_QUANTIZE); 0 when none. */
int numla_weight_encoding_parse(const char *s, unsigned made, numla_weight_encoding *out);
/* Their names for a message, "bf16, fp8, int8, q8_0, q4_0 or q4_k", into buf (cap bytes). */
void numla_weight_encoding_option_list(unsigned made, char *buf, size_t cap);
/* The encoding of a GGUF type code (block encodings only); 0 when none. */
int numla_weight_encoding_from_ggml(uint32_t ggml_type, numla_weight_encoding *out);
/* The separate scale grid of an (n, k) tensor: FP8 (ceil(n/128), ceil(k/128)), INT8 (n, 1),
 * otherwise (0, 0). */
void numla_weight_encoding_scale_grid(numla_weight_encoding e, int64_t n, int64_t k,
                                      int64_t shape[2]);
/* Bytes an (n, k) tensor takes in a file: codes (NONE: elem_bytes each, the file's dtype) and
 * its scales; -1 when k does not fall on the block. */
int64_t numla_weight_encoding_bytes(numla_weight_encoding e, int64_t n, int64_t k,
                                    int32_t elem_bytes);

#endif
