/* engine/formats/weight_encoding.c — the table of weight encodings (weight_encoding.h). */
#include "engine/formats/weight_encoding.h"

#include "common/ggml_types.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* A ggml block encoding: its name, block and bytes are the ggml table's (common/ggml_types.h). */
#define NUMLA_ENCODING_GGML_(T)                                                                    \
    .name = #T, .block_rows = 1, .block_cols = NUMLA_GGML_BLOCK_##T, .block_bytes = NUMLA_GGML_BYTES_##T, \
    .scales = NUMLA_SCALES_IN_BLOCK, .ggml_type = NUMLA_GGML_##T,                                  \
    .dequant = "kernels/qblock.h numla_qblock_dequant_ref"

static const numla_weight_encoding_info table_[NUMLA_ENCODING_COUNT] = {
    [NUMLA_ENCODING_NONE] = {"bf16", 1, 1, 0, 0, NUMLA_SCALES_NONE, NULL, UINT32_MAX,
                             "common/dtype.h numla_load_f32", "bf16", NUMLA_ENCODING_AT_LOAD, 0},
    [NUMLA_ENCODING_FP8] = {"fp8", 128, 128, 0, 1, NUMLA_SCALES_TENSOR, "_scale_inv", UINT32_MAX,
                            "kernels/quant.h (e4m3 code x block scale)", "fp8",
                            NUMLA_ENCODING_AT_LOAD | NUMLA_ENCODING_BY_QUANTIZE, 0},
    [NUMLA_ENCODING_INT8] = {"int8", 1, 0, 0, 1, NUMLA_SCALES_TENSOR, "_scale", UINT32_MAX,
                             "kernels/quant.h (int8 code x row scale)", "int8",
                             NUMLA_ENCODING_AT_LOAD | NUMLA_ENCODING_BY_QUANTIZE, 0},
    /* --weights q8_0 | q4_0 | q4_k quantize to blocks while loading (q4_k: llama.cpp's Q4_K_M
     * recipe, engine/model/quant_recipe.c) */
    [NUMLA_ENCODING_Q8_0] = {NUMLA_ENCODING_GGML_(Q8_0), .option = "q8_0", .made = NUMLA_ENCODING_AT_LOAD},
    [NUMLA_ENCODING_Q4_0] = {NUMLA_ENCODING_GGML_(Q4_0), .option = "q4_0", .made = NUMLA_ENCODING_AT_LOAD},
    [NUMLA_ENCODING_Q4_K] = {NUMLA_ENCODING_GGML_(Q4_K), .option = "q4_k", .made = NUMLA_ENCODING_AT_LOAD},
    [NUMLA_ENCODING_Q5_K] = {NUMLA_ENCODING_GGML_(Q5_K)},
    [NUMLA_ENCODING_Q6_K] = {NUMLA_ENCODING_GGML_(Q6_K)},
    [NUMLA_ENCODING_IQ4_XS] = {NUMLA_ENCODING_GGML_(IQ4_XS)},
    [NUMLA_ENCODING_Q2_K] = {NUMLA_ENCODING_GGML_(Q2_K)},
    [NUMLA_ENCODING_Q3_K] = {NUMLA_ENCODING_GGML_(Q3_K)},
    [NUMLA_ENCODING_INT4] = {"int4", 1, 32, 16, 0, NUMLA_SCALES_TENSOR, "_scale", UINT32_MAX,
                             "engine/model/weights.c (scale x q, as Q4_0 blocks)", NULL, 0, 0},
    [NUMLA_ENCODING_Q5_0] = {NUMLA_ENCODING_GGML_(Q5_0)},
    [NUMLA_ENCODING_IQ4_NL] = {NUMLA_ENCODING_GGML_(IQ4_NL)},
    [NUMLA_ENCODING_Q5_1] = {NUMLA_ENCODING_GGML_(Q5_1)},
    [NUMLA_ENCODING_Q4_1] = {NUMLA_ENCODING_GGML_(Q4_1)},
    [NUMLA_ENCODING_MXFP4] = {NUMLA_ENCODING_GGML_(MXFP4)},
    [NUMLA_ENCODING_FP4] = {"fp4", 1, 32, 16, 0, NUMLA_SCALES_TENSOR, NULL, UINT32_MAX,
                            "kernels/qblock_quant.h numla_qblock_mxfp4_from_e2m1 (then MXFP4's)", NULL, 0,
                            .scale_bytes = 1},
};

const numla_weight_encoding_info *numla_weight_encoding_get(numla_weight_encoding e)
{
    return (unsigned)e < NUMLA_ENCODING_COUNT ? &table_[e] : NULL;
}

int numla_weight_encoding_parse(const char *s, unsigned made, numla_weight_encoding *out)
{
    for (int e = 0; s && e < NUMLA_ENCODING_COUNT; e++)
        if ((table_[e].made & made) && !strcmp(table_[e].option, s)) {
            *out = (numla_weight_encoding)e;
            return 1;
        }
    return 0;
}

void numla_weight_encoding_option_list(unsigned made, char *buf, size_t cap)
{
    int n = 0, k = 0;
    for (int e = 0; e < NUMLA_ENCODING_COUNT; e++)
        n += (table_[e].made & made) != 0;
    size_t at = 0;
    if (cap)
        buf[0] = 0;
    for (int e = 0; e < NUMLA_ENCODING_COUNT && at < cap; e++) {
        if (!(table_[e].made & made))
            continue;
        k++;
        const int w = snprintf(buf + at, cap - at, "%s%s", k == 1 ? "" : k == n ? " or " : ", ", table_[e].option);
        at += w > 0 ? (size_t)w : 0;
    }
}

int numla_weight_encoding_from_ggml(uint32_t ggml_type, numla_weight_encoding *out)
{
    for (int e = 0; e < NUMLA_ENCODING_COUNT; e++)
        if (table_[e].ggml_type == ggml_type) {
            *out = (numla_weight_encoding)e;
            return 1;
        }
    return 0;
}

void numla_weight_encoding_scale_grid(numla_weight_encoding e, int64_t n, int64_t k,
                                      int64_t shape[2])
{
    const numla_weight_encoding_info *in = numla_weight_encoding_get(e);
    shape[0] = shape[1] = 0;
    if (!in || in->scales != NUMLA_SCALES_TENSOR)
        return;
    shape[0] = (n + in->block_rows - 1) / in->block_rows;
    shape[1] = in->block_cols ? (k + in->block_cols - 1) / in->block_cols : 1;
}

int64_t numla_weight_encoding_bytes(numla_weight_encoding e, int64_t n, int64_t k,
                                    int32_t elem_bytes)
{
    const numla_weight_encoding_info *in = numla_weight_encoding_get(e);
    if (!in)
        return -1;
    if (in->scales == NUMLA_SCALES_IN_BLOCK)
        return k % in->block_cols ? -1 : n * (k / in->block_cols) * in->block_bytes;
    if (in->scales == NUMLA_SCALES_NONE)
        return n * k * elem_bytes;
    int64_t g[2];
    numla_weight_encoding_scale_grid(e, n, k, g);
    if (in->block_bytes) /* int4, fp4: packed blocks, one scale each (int4's bf16 by default) */
        return k % in->block_cols ? -1 : n * (k / in->block_cols) * (in->block_bytes + (in->scale_bytes ? in->scale_bytes : 2));
    return n * k * in->code_bytes + 4 * g[0] * g[1];
}
