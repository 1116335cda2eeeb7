/* engine/formats/weight_encoding.c — the table of weight encodings (weight_encoding.h). */
#include "engine/formats/weight_encoding.h"

#include <stddef.h>

static const numla_weight_encoding_info table_[NUMLA_ENCODING_COUNT] = {
    [NUMLA_ENCODING_NONE] = {"bf16", 1, 1, 0, 0, NUMLA_SCALES_NONE, NULL, UINT32_MAX,
                             "common/dtype.h numla_load_f32"},
    [NUMLA_ENCODING_FP8] = {"fp8", 128, 128, 0, 1, NUMLA_SCALES_TENSOR, "_scale_inv", UINT32_MAX,
                            "kernels/quant.h (e4m3 code x block scale)"},
    [NUMLA_ENCODING_INT8] = {"int8", 1, 0, 0, 1, NUMLA_SCALES_TENSOR, "_scale", UINT32_MAX,
                             "kernels/quant.h (int8 code x row scale)"},
    [NUMLA_ENCODING_Q8_0] = {"Q8_0", 1, 32, 34, 0, NUMLA_SCALES_IN_BLOCK, NULL, 8,
                             "kernels/qblock.h numla_qblock_dequant_ref"},
    [NUMLA_ENCODING_Q4_0] = {"Q4_0", 1, 32, 18, 0, NUMLA_SCALES_IN_BLOCK, NULL, 2,
                             "kernels/qblock.h numla_qblock_dequant_ref"},
    [NUMLA_ENCODING_Q4_K] = {"Q4_K", 1, 256, 144, 0, NUMLA_SCALES_IN_BLOCK, NULL, 12,
                             "kernels/qblock.h numla_qblock_dequant_ref"},
    [NUMLA_ENCODING_Q5_K] = {"Q5_K", 1, 256, 176, 0, NUMLA_SCALES_IN_BLOCK, NULL, 13,
                             "kernels/qblock.h numla_qblock_dequant_ref"},
    [NUMLA_ENCODING_Q6_K] = {"Q6_K", 1, 256, 210, 0, NUMLA_SCALES_IN_BLOCK, NULL, 14,
                             "kernels/qblock.h numla_qblock_dequant_ref"},
    [NUMLA_ENCODING_IQ4_XS] = {"IQ4_XS", 1, 256, 136, 0, NUMLA_SCALES_IN_BLOCK, NULL, 23,
                               "kernels/qblock.h numla_qblock_dequant_ref"},
    [NUMLA_ENCODING_Q2_K] = {"Q2_K", 1, 256, 84, 0, NUMLA_SCALES_IN_BLOCK, NULL, 10,
                             "kernels/qblock.h numla_qblock_dequant_ref"},
    [NUMLA_ENCODING_Q3_K] = {"Q3_K", 1, 256, 110, 0, NUMLA_SCALES_IN_BLOCK, NULL, 11,
                             "kernels/qblock.h numla_qblock_dequant_ref"},
    [NUMLA_ENCODING_INT4] = {"int4", 1, 32, 16, 0, NUMLA_SCALES_TENSOR, "_scale", UINT32_MAX,
                             "engine/model/weights.c (scale x q, as Q4_0 blocks)"},
    [NUMLA_ENCODING_Q5_0] = {"Q5_0", 1, 32, 22, 0, NUMLA_SCALES_IN_BLOCK, NULL, 6,
                             "kernels/qblock.h numla_qblock_dequant_ref"},
    [NUMLA_ENCODING_IQ4_NL] = {"IQ4_NL", 1, 32, 18, 0, NUMLA_SCALES_IN_BLOCK, NULL, 20,
                               "kernels/qblock.h numla_qblock_dequant_ref"},
    [NUMLA_ENCODING_Q5_1] = {"Q5_1", 1, 32, 24, 0, NUMLA_SCALES_IN_BLOCK, NULL, 7,
                             "kernels/qblock.h numla_qblock_dequant_ref"},
};

const numla_weight_encoding_info *numla_weight_encoding_get(numla_weight_encoding e)
{
    return (unsigned)e < NUMLA_ENCODING_COUNT ? &table_[e] : NULL;
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
    if (in->block_bytes) /* int4: packed blocks, one bf16 scale each */
        return k % in->block_cols ? -1 : n * (k / in->block_cols) * (in->block_bytes + 2);
    return n * k * in->code_bytes + 4 * g[0] * g[1];
}
