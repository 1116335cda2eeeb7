/* The block type each tensor gets from --weights q8_0|q4_0|q4_k (engine/model/quant_recipe.h):
 * the down_proj layers of llama.cpp's Q4_K_M recipe, listed by hand from its use_more_bits rule
 * for DeepSeek-V2-Lite's 27 layers and V3's 61. */
#include "engine/model/quant_recipe.h"

#include <stdio.h>

#include "test_util.h"

/* The layers of `layers` whose down_proj takes Q6_K, as a 0/1 string. */
static void q6k_layers(int64_t layers, char *out)
{
    for (int64_t i = 0; i < layers; i++) {
        char name[96];
        snprintf(name, sizeof name, "model.layers.%lld.mlp.experts.3.down_proj.weight", (long long)i);
        out[i] = numla_quant_recipe_type(NUMLA_ENCODING_Q4_K, layers, name, 0, 1536) ==
                         NUMLA_QBLOCK_Q6_K
                     ? '1'
                     : '0';
    }
    out[layers] = 0;
}

static void test_q4_k_m_layers(void)
{
    char got[128];
    /* 27 layers: i < 3, i >= 23, and (i - 3) % 3 == 2: 5, 8, 11, 14, 17, 20 */
    q6k_layers(27, got);
    CU_ASSERT_STRING_EQUAL(got, "111001001001001001001001111");
    /* 61 layers: i < 7, i >= 53, and (i - 7) % 3 == 2: 9, 12, ..., 51 */
    q6k_layers(61, got);
    CU_ASSERT_STRING_EQUAL(got, "1111111001001001001001001001001001001001001001001001011111111");
}

static void test_tensor_kinds(void)
{
    CU_ASSERT_EQUAL(numla_quant_recipe_type(NUMLA_ENCODING_Q4_K, 27, "lm_head.weight", 0, 2048),
                    NUMLA_QBLOCK_Q6_K);
    CU_ASSERT_EQUAL(numla_quant_recipe_type(NUMLA_ENCODING_Q4_K, 27,
                                            "model.layers.4.self_attn.q_proj.weight", 0, 2048),
                    NUMLA_QBLOCK_Q4_K);
    CU_ASSERT_EQUAL(numla_quant_recipe_type(NUMLA_ENCODING_Q4_K, 27,
                                            "model.layers.4.mlp.shared_experts.down_proj.weight",
                                            0, 2816),
                    NUMLA_QBLOCK_Q4_K); /* layer 4 is not one use_more_bits picks */
    CU_ASSERT_EQUAL(numla_quant_recipe_type(NUMLA_ENCODING_Q4_K, 27,
                                            "model.layers.0.mlp.down_proj.weight", 0, 10944),
                    NUMLA_QBLOCK_Q8_0); /* 10944 columns are not whole blocks of 256 */
    CU_ASSERT_EQUAL(numla_quant_recipe_type(NUMLA_ENCODING_Q4_K, 27,
                                            "model.layers.4.self_attn.o_proj.weight", 128, 1024),
                    NUMLA_QBLOCK_Q8_0); /* a K slice from column 128 */
    CU_ASSERT_EQUAL(numla_quant_recipe_type(NUMLA_ENCODING_Q8_0, 27, "lm_head.weight", 0, 2048),
                    NUMLA_QBLOCK_Q8_0);
    CU_ASSERT_EQUAL(numla_quant_recipe_type(NUMLA_ENCODING_Q4_0, 27,
                                            "model.layers.0.mlp.down_proj.weight", 0, 96),
                    NUMLA_QBLOCK_Q4_0);
}

NUMLA_TEST_SUITE(quant_recipe, NULL, NULL, NUMLA_TEST(test_q4_k_m_layers),
                 NUMLA_TEST(test_tensor_kinds))
