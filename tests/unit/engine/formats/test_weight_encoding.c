/* engine/formats/weight_encoding.h: the one table of weight encodings agrees with what reads
 * and writes them: the block kernels' rows (kernels/qblock_types.c) and the ggml type table
 * (common/ggml_types.h, the GGUF reader's view) name the same types with the same shapes, the scale grids and byte counts numla quantize writes (kernels/quant.h's 128 x 128
 * fp8 blocks, int8 rows), and the config's / quantizer's names for the same enum. */
#include "engine/formats/gguf.h"
#include "engine/formats/weight_encoding.h"
#include "engine/model/config.h"
#include "engine/synth/quantized_checkpoint.h"
#include "kernels/qblock.h"
#include "kernels/quant.h"
#include "test_util.h"

static void test_table(void)
{
    int blocks = 0;
    for (int e = 0; e < NUMLA_ENCODING_COUNT; e++) {
        const numla_weight_encoding_info *in = numla_weight_encoding_get((numla_weight_encoding)e);
        CU_ASSERT_PTR_NOT_NULL_FATAL(in);
        if (in->scales != NUMLA_SCALES_IN_BLOCK)
            continue;
        blocks++;
        numla_qblock_type qt;
        CU_ASSERT_EQUAL_FATAL(numla_qblock_from_ggml(in->ggml_type, &qt), NUMLA_STATUS_OK);
        const numla_qblock_info *qi = numla_qblock_info_get(qt);
        const numla_ggml_type_info *gi = numla_ggml_type_get(in->ggml_type);
        CU_ASSERT_STRING_EQUAL(qi->name, in->name);
        CU_ASSERT_STRING_EQUAL(gi->name, in->name);
        CU_ASSERT_EQUAL(qi->block, in->block_cols);
        CU_ASSERT_EQUAL(qi->bytes, in->block_bytes);
        CU_ASSERT_EQUAL(gi->block, in->block_cols);
        CU_ASSERT_EQUAL(gi->bytes, in->block_bytes);
        numla_weight_encoding back;
        CU_ASSERT_TRUE(numla_weight_encoding_from_ggml(in->ggml_type, &back));
        CU_ASSERT_EQUAL((int)back, (int)e);
        CU_ASSERT_EQUAL(numla_weight_encoding_bytes((numla_weight_encoding)e, 3, 2 * in->block_cols, 0),
                        6 * in->block_bytes);
        CU_ASSERT_EQUAL(numla_weight_encoding_bytes((numla_weight_encoding)e, 3, in->block_cols + 1, 0),
                        -1);
    }
    CU_ASSERT_EQUAL(blocks, NUMLA_QBLOCK_TYPE_COUNT);
    CU_ASSERT_PTR_NULL(numla_weight_encoding_get(NUMLA_ENCODING_COUNT));
    numla_weight_encoding x;
    CU_ASSERT_FALSE(numla_weight_encoding_from_ggml(NUMLA_GGML_F32, &x));
    CU_ASSERT_FALSE(numla_weight_encoding_from_ggml(NUMLA_GGML_Q8_1, &x)); /* ggml's, never a weight's */
}

/* The three tables agree (issue 41): every block type of the kernels (kernels/qblock_types.c) is
 * a ggml type (common/ggml_types.h, the GGUF reader's view) and an encoding with the same name,
 * block elements and bytes, and no two rows of a table name the same ggml type. */
static void test_tables_agree(void)
{
    for (int t = 0; t < NUMLA_QBLOCK_TYPE_COUNT; t++) {
        const numla_qblock_info *qi = numla_qblock_info_get((numla_qblock_type)t);
        CU_ASSERT_PTR_NOT_NULL_FATAL(qi);
        const numla_ggml_type_info *gi = numla_ggml_type_get(qi->ggml_type);
        CU_ASSERT_PTR_NOT_NULL_FATAL(gi);
        CU_ASSERT_EQUAL(gi->code, qi->ggml_type);
        numla_weight_encoding e;
        NUMLA_ASSERT_MSG(numla_weight_encoding_from_ggml(qi->ggml_type, &e), "%s has no encoding row", qi->name);
        const numla_weight_encoding_info *in = numla_weight_encoding_get(e);
        CU_ASSERT_PTR_NOT_NULL_FATAL(in);
        CU_ASSERT_STRING_EQUAL(in->name, qi->name);
        CU_ASSERT_STRING_EQUAL(gi->name, qi->name);
        CU_ASSERT_EQUAL(in->block_rows, 1);
        CU_ASSERT_EQUAL(in->block_cols, qi->block);
        CU_ASSERT_EQUAL(in->block_bytes, qi->bytes);
        CU_ASSERT_EQUAL(gi->block, qi->block);
        CU_ASSERT_EQUAL(gi->bytes, qi->bytes);
        CU_ASSERT_EQUAL(in->scales, NUMLA_SCALES_IN_BLOCK);
        for (int u = t + 1; u < NUMLA_QBLOCK_TYPE_COUNT; u++)
            CU_ASSERT_NOT_EQUAL(numla_qblock_info_get((numla_qblock_type)u)->ggml_type, qi->ggml_type);
    }
    for (int e = 0; e < NUMLA_ENCODING_COUNT; e++)
        for (int f = e + 1; f < NUMLA_ENCODING_COUNT; f++) {
            const numla_weight_encoding_info *a = numla_weight_encoding_get((numla_weight_encoding)e),
                                             *b = numla_weight_encoding_get((numla_weight_encoding)f);
            CU_ASSERT(a->ggml_type == UINT32_MAX || a->ggml_type != b->ggml_type);
        }
    /* a ggml code's row is at its code, and the reader refuses the codes ggml removed */
    int known = 0;
    for (uint32_t c = 0; c < NUMLA_GGML_TYPE_LIMIT; c++) {
        const numla_ggml_type_info *gi = numla_ggml_type_get(c);
        if (!gi)
            continue;
        known++;
        CU_ASSERT_EQUAL(gi->code, c);
        CU_ASSERT(gi->block >= 1 && gi->bytes >= 1);
    }
    CU_ASSERT_EQUAL(known, 34);
}

static void test_separate_scales(void)
{
    /* one enum: the config's and the quantizer's names are the table's */
    CU_ASSERT_EQUAL(NUMLA_WEIGHT_FORMAT_FP8, NUMLA_ENCODING_FP8);
    CU_ASSERT_EQUAL(NUMLA_QCKPT_INT8, NUMLA_ENCODING_INT8);
    CU_ASSERT_STRING_EQUAL(numla_weight_encoding_get(NUMLA_ENCODING_FP8)->name,
                           numla_model_config_format_name(NUMLA_WEIGHT_FORMAT_FP8));
    CU_ASSERT_EQUAL(numla_weight_encoding_get(NUMLA_ENCODING_FP8)->block_rows,
                    NUMLA_QUANT_FP8_BLOCK);
    int64_t g[2];
    numla_weight_encoding_scale_grid(NUMLA_ENCODING_FP8, 300, 129, g);
    CU_ASSERT_EQUAL(g[0], numla_quant_blocks(300));
    CU_ASSERT_EQUAL(g[1], numla_quant_blocks(129));
    numla_weight_encoding_scale_grid(NUMLA_ENCODING_INT8, 300, 129, g);
    CU_ASSERT_EQUAL(g[0], 300);
    CU_ASSERT_EQUAL(g[1], 1);
    CU_ASSERT_EQUAL(numla_qckpt_bytes(NUMLA_QCKPT_FP8, 300, 129), 300 * 129 + 4 * 3 * 2);
    CU_ASSERT_EQUAL(numla_qckpt_bytes(NUMLA_QCKPT_INT8, 300, 129), 300 * 129 + 4 * 300);
    CU_ASSERT_EQUAL(numla_weight_encoding_bytes(NUMLA_ENCODING_NONE, 4, 5, 2), 40);
    /* DeepSeek-V4's fp4: 16 code bytes and one e8m0 byte per 32; int4: 16 and a bf16 */
    CU_ASSERT_EQUAL(numla_weight_encoding_bytes(NUMLA_ENCODING_FP4, 3, 64, 0), 3 * 2 * 17);
    CU_ASSERT_EQUAL(numla_weight_encoding_bytes(NUMLA_ENCODING_INT4, 3, 64, 0), 3 * 2 * 18);
    CU_ASSERT_EQUAL(numla_weight_encoding_bytes(NUMLA_ENCODING_FP4, 3, 48, 0), -1);
    numla_weight_encoding_scale_grid(NUMLA_ENCODING_FP4, 2048, 4096, g); /* V4-Flash's w1.scale */
    CU_ASSERT(g[0] == 2048 && g[1] == 128);
    char nm[64];
    numla_qckpt_scale_name(NUMLA_QCKPT_FP8, "a.weight", nm, sizeof nm);
    CU_ASSERT_STRING_EQUAL(nm, "a.weight_scale_inv");
    numla_qckpt_scale_name(NUMLA_QCKPT_INT8, "a.weight", nm, sizeof nm);
    CU_ASSERT_STRING_EQUAL(nm, "a.weight_scale");
}

/* One parser of the option names (--weights, numla quantize --to), from the table. */
static void test_option_names(void)
{
    numla_weight_encoding e;
    CU_ASSERT_TRUE(numla_weight_encoding_parse("q4_k", NUMLA_ENCODING_AT_LOAD, &e));
    CU_ASSERT_EQUAL(e, NUMLA_ENCODING_Q4_K);
    CU_ASSERT_TRUE(numla_weight_encoding_parse("bf16", NUMLA_ENCODING_AT_LOAD, &e));
    CU_ASSERT_EQUAL(e, NUMLA_ENCODING_NONE);
    CU_ASSERT_FALSE(numla_weight_encoding_parse("q4_k", NUMLA_ENCODING_BY_QUANTIZE, &e));
    CU_ASSERT_FALSE(numla_weight_encoding_parse("Q4_K", NUMLA_ENCODING_AT_LOAD, &e));
    CU_ASSERT_FALSE(numla_weight_encoding_parse(NULL, NUMLA_ENCODING_AT_LOAD, &e));
    numla_qckpt_format f;
    CU_ASSERT_TRUE(numla_qckpt_format_parse("int8", &f));
    CU_ASSERT_EQUAL(f, NUMLA_QCKPT_INT8);
    CU_ASSERT_FALSE(numla_qckpt_format_parse("bf16", &f));
    char buf[128];
    numla_weight_encoding_option_list(NUMLA_ENCODING_AT_LOAD, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "bf16, fp8, int8, q8_0, q4_0 or q4_k");
    numla_weight_encoding_option_list(NUMLA_ENCODING_BY_QUANTIZE, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "fp8 or int8");
    for (int i = 0; i < NUMLA_ENCODING_COUNT; i++) {
        const numla_weight_encoding_info *in = numla_weight_encoding_get((numla_weight_encoding)i);
        CU_ASSERT(!in->made == !in->option);
    }
}

NUMLA_TEST_SUITE(weight_encoding, NULL, NULL, NUMLA_TEST(test_table), NUMLA_TEST(test_tables_agree),
                 NUMLA_TEST(test_option_names),
                 NUMLA_TEST(test_separate_scales))
