/* Tests for engine/model/config_dsa: the DSA fields of deepseek_v32 and glm_moe_dsa configs
 * against transformers 5.25's config classes (expected lists computed by hand from their
 * rules, cross-checked with GlmMoeDsaConfig(...).indexer_types), the refusals, and seeded
 * mutations through the fuzz target. */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "engine/model/config_dsa.h"

int numla_fuzz_dsa_config_run(const uint8_t *data, size_t size, numla_dsa_config *out);

static numla_dsa_config cfg_;

static numla_status parse(const char *text) { return numla_dsa_config_parse(text, "t.json", &cfg_); }

static void expect_layers(const uint8_t *got, const char *want)
{
    for (size_t i = 0; want[i]; i++)
        CU_ASSERT_EQUAL(got[i], want[i] == '1');
}

static void test_v32(void)
{
    char *t = numla_test_read_file(numla_test_source_path("tests/fuzz/corpus/dsa_config/v32.json"), NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL_FATAL(parse(t), NUMLA_STATUS_OK);
    CU_ASSERT_TRUE(cfg_.enabled);
    CU_ASSERT_EQUAL(cfg_.index_rope, NUMLA_DSA_ROPE_HALF);
    CU_ASSERT_EQUAL(cfg_.index_n_heads, 16);
    CU_ASSERT_EQUAL(cfg_.index_head_dim, 32);
    CU_ASSERT_EQUAL(cfg_.index_topk, 16);
    CU_ASSERT_EQUAL(cfg_.rope_dim, 16);
    CU_ASSERT_EQUAL(cfg_.num_nextn_predict_layers, 1);
    expect_layers(cfg_.indexer_full, "1111");
    expect_layers(cfg_.mlp_moe, "0111"); /* first_k_dense_replace 1 */
    free(t);
    /* defaults of DeepseekV32Config */
    CU_ASSERT_EQUAL_FATAL(parse("{\"model_type\": \"deepseek_v32\", \"num_hidden_layers\": 5,"
                                " \"q_lora_rank\": 8, \"qk_rope_head_dim\": 64,"
                                " \"n_routed_experts\": 4}"), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(cfg_.index_n_heads, 64);
    CU_ASSERT_EQUAL(cfg_.index_head_dim, 128);
    CU_ASSERT_EQUAL(cfg_.index_topk, 2048);
    expect_layers(cfg_.mlp_moe, "00011");
}

static void test_glm5(void)
{
    char *t = numla_test_read_file(numla_test_source_path("tests/fuzz/corpus/dsa_config/glm5.json"), NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL_FATAL(parse(t), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(cfg_.index_rope, NUMLA_DSA_ROPE_INTERLEAVED);
    expect_layers(cfg_.indexer_full, "101001");
    expect_layers(cfg_.mlp_moe, "011011");
    free(t);
    /* index_topk_freq 3, offset 1: transformers gives full, shared, shared, full, shared, shared */
    t = numla_test_read_file(numla_test_source_path("tests/fuzz/corpus/dsa_config/glm5_freq.json"), NULL);
    CU_ASSERT_EQUAL_FATAL(parse(t), NUMLA_STATUS_OK);
    expect_layers(cfg_.indexer_full, "100100");
    CU_ASSERT_EQUAL(cfg_.index_n_heads, 32);
    free(t);
    /* freq 2, default offset 2: full, full, shared, full, shared, full */
    CU_ASSERT_EQUAL_FATAL(parse("{\"model_type\": \"glm_moe_dsa\", \"num_hidden_layers\": 6,"
                                " \"q_lora_rank\": 8, \"qk_rope_head_dim\": 16,"
                                " \"index_topk_freq\": 2, \"n_routed_experts\": 4}"),
                          NUMLA_STATUS_OK);
    expect_layers(cfg_.indexer_full, "110101");
    CU_ASSERT_EQUAL_FATAL(parse("{\"model_type\": \"glm_moe_dsa\", \"num_hidden_layers\": 5,"
                                " \"q_lora_rank\": 8, \"qk_rope_head_dim\": 16,"
                                " \"index_topk_pattern\": \"FSSFS\", \"n_routed_experts\": 4}"),
                          NUMLA_STATUS_OK);
    expect_layers(cfg_.indexer_full, "10010");
}

static void test_other_types(void)
{
    memset(&cfg_, 0x5a, sizeof cfg_);
    CU_ASSERT_EQUAL(parse("{\"model_type\": \"deepseek_v3\", \"index_topk\": \"junk\"}"), NUMLA_STATUS_OK);
    CU_ASSERT_FALSE(cfg_.enabled);
}

static void expect_refused(const char *text, const char *needle)
{
    numla_status s = parse(text);
    CU_ASSERT_NOT_EQUAL(s, NUMLA_STATUS_OK);
    if (s != NUMLA_STATUS_OK && !strstr(numla_error_message(), needle)) {
        fprintf(stderr, "message '%s' does not name '%s'\n", numla_error_message(), needle);
        CU_FAIL("message does not name the field");
    }
}

#define GLM_BASE "{\"model_type\": \"glm_moe_dsa\", \"num_hidden_layers\": 3, \"n_routed_experts\": 4, "

static void test_refusals(void)
{
    expect_refused(GLM_BASE "\"q_lora_rank\": 8, \"qk_rope_head_dim\": 16,"
                            " \"indexer_types\": [\"full\", \"shared\"]}", "indexer_types");
    expect_refused(GLM_BASE "\"q_lora_rank\": 8, \"qk_rope_head_dim\": 16,"
                            " \"indexer_types\": [\"full\", \"sometimes\", \"full\"]}", "indexer_types[1]");
    expect_refused(GLM_BASE "\"q_lora_rank\": 8, \"qk_rope_head_dim\": 16,"
                            " \"indexer_types\": [\"shared\", \"full\", \"full\"]}", "layer 0");
    expect_refused(GLM_BASE "\"q_lora_rank\": 8, \"qk_rope_head_dim\": 16,"
                            " \"index_topk_pattern\": \"FXS\"}", "index_topk_pattern[1]");
    expect_refused(GLM_BASE "\"q_lora_rank\": null, \"qk_rope_head_dim\": 16}", "q_lora_rank");
    expect_refused(GLM_BASE "\"q_lora_rank\": 8, \"qk_rope_head_dim\": 16, \"index_head_dim\": 8}",
                   "qk_rope_head_dim");
    expect_refused(GLM_BASE "\"q_lora_rank\": 8, \"qk_rope_head_dim\": 16, \"index_topk\": 0}",
                   "index_topk");
    expect_refused("{\"model_type\": \"deepseek_v32\", \"num_hidden_layers\": 2, \"q_lora_rank\": 8,"
                   " \"qk_rope_head_dim\": 16, \"mlp_layer_types\": [\"dense\", \"sparse\"]}",
                   "n_routed_experts");
    expect_refused("{\"model_type\": \"deepseek_v32\", \"q_lora_rank\": 8}", "num_hidden_layers");
    expect_refused("[1]", "t.json");
    expect_refused("{", "t.json");
}

/* Seeded mutations of each seed: accepted (and then the fuzz target's invariants held) or
 * refused with a message naming the file; both must occur. */
static void test_fuzz_mutations(void)
{
    static const char *seeds[3] = {"tests/fuzz/corpus/dsa_config/v32.json",
                                   "tests/fuzz/corpus/dsa_config/glm5.json",
                                   "tests/fuzz/corpus/dsa_config/glm5_freq.json"};
    int accepted = 0, rejected = 0;
    numla_test_rng rng = {26};
    for (int s = 0; s < 3; s++) {
        char *seed = numla_test_read_file(numla_test_source_path(seeds[s]), NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(seed);
        size_t n = strlen(seed);
        uint8_t *buf = malloc(n + 64);
        for (int it = 0; it < 1500; it++) {
            memcpy(buf, seed, n);
            size_t len = numla_test_mutate_json(buf, n, 0, &rng);
            int r = numla_fuzz_dsa_config_run(buf, len, NULL);
            CU_ASSERT_NOT_EQUAL_FATAL(r, -1);
            if (r)
                accepted++;
            else
                rejected++;
        }
        free(buf);
        free(seed);
    }
    CU_ASSERT_TRUE(accepted > 100);
    CU_ASSERT_TRUE(rejected > 100);
}

NUMLA_TEST_SUITE(config_dsa, NULL, NULL, NUMLA_TEST(test_v32), NUMLA_TEST(test_glm5),
                 NUMLA_TEST(test_other_types), NUMLA_TEST(test_refusals),
                 NUMLA_TEST(test_fuzz_mutations))
