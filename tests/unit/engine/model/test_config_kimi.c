/* Tests for engine/model/config.c on Kimi K2 / K2.5 and DeepSeek-V3.1 configs: the published
 * shapes read as V3's architecture, K2.5's text_config, V3.1's scale_fmt, and the errors. */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/model/config.h"

/* moonshotai/Kimi-K2-Instruct config.json, the fields numla reads (docs/kimi.md lists where
 * each value was checked). */
#define KIMI_K2_FIELDS                                                                          \
    "\"vocab_size\": 163840, \"hidden_size\": 7168, \"intermediate_size\": 18432,"            \
    " \"moe_intermediate_size\": 2048, \"num_hidden_layers\": 61, \"num_attention_heads\": 64," \
    " \"num_key_value_heads\": 64, \"n_shared_experts\": 1, \"n_routed_experts\": 384,"         \
    " \"routed_scaling_factor\": 2.827, \"kv_lora_rank\": 512, \"q_lora_rank\": 1536,"          \
    " \"qk_rope_head_dim\": 64, \"v_head_dim\": 128, \"qk_nope_head_dim\": 128,"                \
    " \"topk_method\": \"noaux_tc\", \"n_group\": 1, \"topk_group\": 1,"                        \
    " \"num_experts_per_tok\": 8, \"moe_layer_freq\": 1, \"first_k_dense_replace\": 1,"         \
    " \"norm_topk_prob\": true, \"scoring_func\": \"sigmoid\", \"hidden_act\": \"silu\","       \
    " \"max_position_embeddings\": 131072, \"rms_norm_eps\": 1e-06, \"rope_theta\": 50000.0,"   \
    " \"rope_scaling\": {\"beta_fast\": 1.0, \"beta_slow\": 1.0, \"factor\": 32.0,"             \
    " \"mscale\": 1.0, \"mscale_all_dim\": 1.0, \"original_max_position_embeddings\": 4096,"    \
    " \"type\": \"yarn\"}, \"bos_token_id\": 163584, \"eos_token_id\": 163585,"                 \
    " \"tie_word_embeddings\": false, \"attention_bias\": false"

static const char *KIMI_K2 =
    "{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"model_type\": \"kimi_k2\", " KIMI_K2_FIELDS
    "}";

static const char *KIMI_K25 =
    "{\"architectures\": [\"KimiK25ForConditionalGeneration\"], \"model_type\": \"kimi_k25\","
    " \"vision_config\": {\"model_type\": \"moonvit\", \"hidden_size\": 1152},"
    " \"text_config\": {\"architectures\": [\"DeepseekV3ForCausalLM\"], \"model_type\": "
    "\"kimi_k2\", " KIMI_K2_FIELDS "}}";

static void check_kimi_shapes(const numla_model_config *c)
{
    CU_ASSERT_EQUAL(c->arch, NUMLA_MODEL_ARCH_DEEPSEEK_V3);
    CU_ASSERT_EQUAL(c->vocab_size, 163840);
    CU_ASSERT_EQUAL(c->hidden_size, 7168);
    CU_ASSERT_EQUAL(c->num_hidden_layers, 61);
    CU_ASSERT_EQUAL(c->num_attention_heads, 64);
    CU_ASSERT_EQUAL(c->q_lora_rank, 1536);
    CU_ASSERT_EQUAL(c->kv_lora_rank, 512);
    CU_ASSERT_EQUAL(c->q_head_dim, 192);
    CU_ASSERT_EQUAL(c->n_routed_experts, 384);
    CU_ASSERT_EQUAL(c->num_experts_per_tok, 8);
    CU_ASSERT_EQUAL(c->n_shared_experts, 1);
    CU_ASSERT_EQUAL(c->first_k_dense_replace, 1);
    CU_ASSERT_EQUAL(c->n_group, 1);
    CU_ASSERT_EQUAL(c->topk_group, 1);
    CU_ASSERT_EQUAL(c->topk_method, NUMLA_TOPK_METHOD_NOAUX_TC);
    CU_ASSERT_EQUAL(c->scoring_func, NUMLA_SCORING_FUNC_SIGMOID);
    CU_ASSERT_EQUAL(c->moe_weight_rule, NUMLA_MOE_WEIGHT_RULE_NORM_THEN_SCALE);
    CU_ASSERT(fabs(c->routed_scaling_factor - 2.827) < 1e-12);
    CU_ASSERT(fabs(c->rope_theta - 50000.0) < 1e-9);
    CU_ASSERT_EQUAL(c->rope_yarn, 1);
    CU_ASSERT(fabs(c->rope_factor - 32.0) < 1e-12);
    CU_ASSERT_EQUAL(c->rope_original_max_position_embeddings, 4096);
    /* mscale = mscale_all_dim = 1: m = 0.1 ln(32) + 1, softmax scale 192^-0.5 m² */
    double m = 0.1 * log(32.0) + 1.0;
    NUMLA_ASSERT_MSG(fabs(c->softmax_scale - m * m / sqrt(192.0)) < 1e-12, "scale %.15f",
                     c->softmax_scale);
    CU_ASSERT_EQUAL(c->bos_token_id, 163584);
    CU_ASSERT_EQUAL(c->num_eos, 1);
    CU_ASSERT_EQUAL(c->eos_token_ids[0], 163585);
    CU_ASSERT_EQUAL(c->weight_format, NUMLA_WEIGHT_FORMAT_NONE);
}

static void test_kimi_k2(void)
{
    numla_model_config c;
    CU_ASSERT_EQUAL_FATAL(numla_model_config_parse(KIMI_K2, "k2", &c), NUMLA_STATUS_OK);
    check_kimi_shapes(&c);
    CU_ASSERT_STRING_EQUAL(c.model_type, "kimi_k2");
    CU_ASSERT_STRING_EQUAL(c.tensor_prefix, "");
}

static void test_kimi_k25(void)
{
    numla_model_config c;
    CU_ASSERT_EQUAL_FATAL(numla_model_config_parse(KIMI_K25, "k25", &c), NUMLA_STATUS_OK);
    check_kimi_shapes(&c);
    CU_ASSERT_STRING_EQUAL(c.model_type, "kimi_k25");
    CU_ASSERT_STRING_EQUAL(c.tensor_prefix, "language_model.");
}

static void expect_fail(const char *json, numla_status want, const char *needle)
{
    numla_model_config c;
    numla_status s = numla_model_config_parse(json, "cfg.json", &c);
    NUMLA_ASSERT_MSG(s == want, "status %d, want %d (%s)", (int)s, (int)want,
                     numla_error_message());
    NUMLA_ASSERT_MSG(strstr(numla_error_message(), needle) != NULL, "message '%s' lacks '%s'",
                     numla_error_message(), needle);
}

static void test_kimi_k25_bad(void)
{
    expect_fail("{\"model_type\": \"kimi_k25\"}", NUMLA_STATUS_FORMAT, "text_config");
    expect_fail("{\"model_type\": \"kimi_k25\", \"text_config\": 3}", NUMLA_STATUS_FORMAT,
                "text_config");
    expect_fail("{\"model_type\": \"kimi_k25\", \"text_config\": {\"hidden_size\": 8}}",
                NUMLA_STATUS_FORMAT, "text_config.model_type");
    /* a text field's error names text_config */
    expect_fail("{\"model_type\": \"kimi_k25\", \"text_config\": {\"model_type\": \"kimi_k2\"}}",
                NUMLA_STATUS_FORMAT, "text_config: missing field vocab_size");
    expect_fail("{\"model_type\": \"kimi_k3\", " KIMI_K2_FIELDS "}", NUMLA_STATUS_UNSUPPORTED,
                "kimi_k2");
}

/* DeepSeek-V3.1: V3's config with quantization_config.scale_fmt "ue8m0". */
static void test_v31_scale_fmt(void)
{
    char buf[4096];
    const char *q = "\"quantization_config\": {\"activation_scheme\": \"dynamic\", \"fmt\": "
                    "\"e4m3\", \"quant_method\": \"fp8\", \"scale_fmt\": \"%s\", "
                    "\"weight_block_size\": [128, 128]}";
    char qb[512];
    snprintf(qb, sizeof qb, q, "ue8m0");
    snprintf(buf, sizeof buf, "{\"model_type\": \"deepseek_v3\", %s, %s}", KIMI_K2_FIELDS, qb);
    numla_model_config c;
    CU_ASSERT_EQUAL_FATAL(numla_model_config_parse(buf, "v31", &c), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(c.weight_format, NUMLA_WEIGHT_FORMAT_FP8);
    snprintf(qb, sizeof qb, q, "e8m0fnu");
    snprintf(buf, sizeof buf, "{\"model_type\": \"deepseek_v3\", %s, %s}", KIMI_K2_FIELDS, qb);
    expect_fail(buf, NUMLA_STATUS_UNSUPPORTED, "quantization_config.scale_fmt = \"e8m0fnu\"");
    /* K2.5: quantization_config written beside text_config applies to the text model */
    snprintf(qb, sizeof qb, q, "ue8m0");
    snprintf(buf, sizeof buf,
             "{\"model_type\": \"kimi_k25\", %s, \"text_config\": {\"model_type\": \"kimi_k2\", "
             "%s}}", qb, KIMI_K2_FIELDS);
    CU_ASSERT_EQUAL_FATAL(numla_model_config_parse(buf, "k25q", &c), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(c.weight_format, NUMLA_WEIGHT_FORMAT_FP8);
}

NUMLA_TEST_SUITE(config_kimi, NULL, NULL, NUMLA_TEST(test_kimi_k2), NUMLA_TEST(test_kimi_k25),
                 NUMLA_TEST(test_kimi_k25_bad), NUMLA_TEST(test_v31_scale_fmt))
