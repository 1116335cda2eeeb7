/* Tests for engine/config: good configs (V2-Lite, V2-style, V3-style) and one bad field at a time. */
#include "test_util.h"

#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/config.h"

static const char *V2LITE =
    "{\"model_type\": \"deepseek_v2\", \"vocab_size\": 102400, \"hidden_size\": 2048,"
    " \"intermediate_size\": 10944, \"moe_intermediate_size\": 1408, \"num_hidden_layers\": 27,"
    " \"num_attention_heads\": 16, \"num_key_value_heads\": 16, \"n_shared_experts\": 2,"
    " \"n_routed_experts\": 64, \"routed_scaling_factor\": 1.0, \"kv_lora_rank\": 512,"
    " \"q_lora_rank\": null, \"qk_rope_head_dim\": 64, \"v_head_dim\": 128,"
    " \"qk_nope_head_dim\": 128, \"topk_method\": \"greedy\", \"n_group\": 1, \"topk_group\": 1,"
    " \"num_experts_per_tok\": 6, \"moe_layer_freq\": 1, \"first_k_dense_replace\": 1,"
    " \"norm_topk_prob\": false, \"scoring_func\": \"softmax\", \"hidden_act\": \"silu\","
    " \"max_position_embeddings\": 163840, \"rms_norm_eps\": 1e-06, \"rope_theta\": 10000,"
    " \"rope_scaling\": {\"beta_fast\": 32, \"beta_slow\": 1, \"factor\": 40, \"mscale\": 0.707,"
    " \"mscale_all_dim\": 0.707, \"original_max_position_embeddings\": 4096, \"type\": \"yarn\"},"
    " \"bos_token_id\": 100000, \"eos_token_id\": 100001, \"tie_word_embeddings\": false,"
    " \"attention_bias\": false}";

static const char *V3 =
    "{\"model_type\": \"deepseek_v3\", \"vocab_size\": 129280, \"hidden_size\": 7168,"
    " \"intermediate_size\": 18432, \"moe_intermediate_size\": 2048, \"num_hidden_layers\": 61,"
    " \"num_attention_heads\": 128, \"n_shared_experts\": 1, \"n_routed_experts\": 256,"
    " \"routed_scaling_factor\": 2.5, \"kv_lora_rank\": 512, \"q_lora_rank\": 1536,"
    " \"qk_rope_head_dim\": 64, \"v_head_dim\": 128, \"qk_nope_head_dim\": 128,"
    " \"topk_method\": \"noaux_tc\", \"n_group\": 8, \"topk_group\": 4,"
    " \"num_experts_per_tok\": 8, \"moe_layer_freq\": 1, \"first_k_dense_replace\": 3,"
    " \"norm_topk_prob\": true, \"scoring_func\": \"sigmoid\", \"hidden_act\": \"silu\","
    " \"max_position_embeddings\": 163840, \"rms_norm_eps\": 1e-06, \"rope_theta\": 10000,"
    " \"rope_scaling\": {\"beta_fast\": 32, \"beta_slow\": 1, \"factor\": 40, \"mscale\": 1.0,"
    " \"mscale_all_dim\": 1.0, \"original_max_position_embeddings\": 4096, \"type\": \"yarn\"},"
    " \"bos_token_id\": 0, \"eos_token_id\": [1, 2], \"tie_word_embeddings\": false}";

static void test_v2lite(void)
{
    numla_model_config c;
    CU_ASSERT_EQUAL_FATAL(numla_model_config_parse(V2LITE, "v2lite", &c), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(c.arch, NUMLA_MODEL_ARCH_DEEPSEEK_V2);
    CU_ASSERT_EQUAL(c.q_lora_rank, 0);
    CU_ASSERT_EQUAL(c.q_head_dim, 192);
    CU_ASSERT_EQUAL(c.n_routed_experts, 64);
    CU_ASSERT_EQUAL(c.n_shared_experts, 2);
    CU_ASSERT_EQUAL(c.num_experts_per_tok, 6);
    CU_ASSERT_EQUAL(c.topk_method, NUMLA_TOPK_METHOD_GREEDY);
    CU_ASSERT_EQUAL(c.moe_weight_rule, NUMLA_MOE_WEIGHT_RULE_NORM_OR_SCALE);
    CU_ASSERT_EQUAL(c.rope_yarn, 1);
    CU_ASSERT_EQUAL(c.rope_original_max_position_embeddings, 4096);
    /* docs/design.md §5: m² = 1.5896, scale ≈ 0.11472 */
    double m = 0.1 * 0.707 * log(40.0) + 1.0;
    NUMLA_ASSERT_MSG(fabs(m * m - 1.5896) < 1e-4, "m^2 %f", m * m);
    NUMLA_ASSERT_MSG(fabs(c.softmax_scale - 0.11472) < 1e-5, "scale %f", c.softmax_scale);
    CU_ASSERT_DOUBLE_EQUAL(c.rope_attention_factor, 1.0, 1e-12); /* mscale == mscale_all_dim */
    CU_ASSERT_EQUAL(c.num_eos, 1);
    CU_ASSERT_EQUAL(c.eos_token_ids[0], 100001);
    CU_ASSERT_FALSE(numla_model_config_is_moe_layer(&c, 0));
    CU_ASSERT_TRUE(numla_model_config_is_moe_layer(&c, 1));
    CU_ASSERT_TRUE(numla_model_config_is_moe_layer(&c, 26));
}

static void test_v3(void)
{
    numla_model_config c;
    CU_ASSERT_EQUAL_FATAL(numla_model_config_parse(V3, "v3", &c), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(c.arch, NUMLA_MODEL_ARCH_DEEPSEEK_V3);
    CU_ASSERT_EQUAL(c.q_lora_rank, 1536);
    CU_ASSERT_EQUAL(c.topk_method, NUMLA_TOPK_METHOD_NOAUX_TC);
    CU_ASSERT_EQUAL(c.scoring_func, NUMLA_SCORING_FUNC_SIGMOID);
    CU_ASSERT_EQUAL(c.moe_weight_rule, NUMLA_MOE_WEIGHT_RULE_NORM_THEN_SCALE);
    CU_ASSERT_EQUAL(c.n_group, 8);
    CU_ASSERT_EQUAL(c.topk_group, 4);
    CU_ASSERT_TRUE(c.norm_topk_prob);
    CU_ASSERT_DOUBLE_EQUAL(c.routed_scaling_factor, 2.5, 1e-12);
    CU_ASSERT_EQUAL(c.num_eos, 2);
    double m = 0.1 * log(40.0) + 1.0;
    CU_ASSERT_DOUBLE_EQUAL(c.softmax_scale, m * m / sqrt(192.0), 1e-9);
    CU_ASSERT_FALSE(numla_model_config_is_moe_layer(&c, 2));
    CU_ASSERT_TRUE(numla_model_config_is_moe_layer(&c, 3));
}

static void test_no_rope_scaling_dense(void)
{
    json_t *o = json_loads(V2LITE, 0, NULL);
    json_object_set_new(o, "rope_scaling", json_null());
    json_object_set_new(o, "n_routed_experts", json_null());
    json_object_del(o, "num_experts_per_tok");
    char *s = json_dumps(o, 0);
    numla_model_config c;
    CU_ASSERT_EQUAL(numla_model_config_parse(s, "x", &c), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(c.rope_yarn, 0);
    CU_ASSERT_DOUBLE_EQUAL(c.softmax_scale, 1.0 / sqrt(192.0), 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(c.rope_inv_freq[1], pow(10000.0, -2.0 / 64.0), 1e-12);
    CU_ASSERT_FALSE(numla_model_config_is_moe_layer(&c, 5));
    free(s);
    json_decref(o);
}

/* Mutate one field of `base` (NULL value: delete it), expect failure naming `needle`. */
static void expect_bad(const char *base, const char *field, json_t *value, const char *needle)
{
    json_t *o = json_loads(base, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(o);
    const char *dot = strchr(field, '.');
    json_t *target = o;
    const char *key = field;
    char head[64];
    if (dot) {
        snprintf(head, sizeof head, "%.*s", (int)(dot - field), field);
        target = json_object_get(o, head);
        key = dot + 1;
    }
    if (value)
        json_object_set_new(target, key, value);
    else
        json_object_del(target, key);
    char *s = json_dumps(o, 0);
    numla_model_config c;
    numla_status st = numla_model_config_parse(s, "cfg.json", &c);
    NUMLA_ASSERT_MSG(st != NUMLA_STATUS_OK, "%s: accepted", field);
    NUMLA_ASSERT_MSG(strstr(numla_error_message(), needle) != NULL,
                     "%s: message '%s' lacks '%s'", field, numla_error_message(), needle);
    free(s);
    json_decref(o);
}

static void test_bad_fields(void)
{
    expect_bad(V2LITE, "model_type", json_string("llama"), "model_type");
    expect_bad(V2LITE, "model_type", NULL, "model_type");
    expect_bad(V2LITE, "hidden_size", NULL, "hidden_size");
    expect_bad(V2LITE, "hidden_size", json_string("big"), "hidden_size");
    expect_bad(V2LITE, "hidden_size", json_integer(0), "hidden_size");
    expect_bad(V2LITE, "vocab_size", json_integer(-3), "vocab_size");
    expect_bad(V2LITE, "num_hidden_layers", json_real(2.5), "num_hidden_layers");
    expect_bad(V2LITE, "q_lora_rank", NULL, "q_lora_rank");
    expect_bad(V2LITE, "q_lora_rank", json_integer(-1), "q_lora_rank");
    expect_bad(V2LITE, "kv_lora_rank", json_integer(500), "kv_lora_rank");
    expect_bad(V2LITE, "kv_lora_rank", NULL, "kv_lora_rank");
    expect_bad(V2LITE, "qk_rope_head_dim", json_integer(24), "qk_rope_head_dim");
    expect_bad(V2LITE, "qk_nope_head_dim", json_integer(0), "qk_nope_head_dim");
    expect_bad(V2LITE, "v_head_dim", NULL, "v_head_dim");
    expect_bad(V2LITE, "num_experts_per_tok", json_integer(65), "num_experts_per_tok");
    expect_bad(V2LITE, "num_experts_per_tok", NULL, "num_experts_per_tok");
    expect_bad(V2LITE, "num_experts_per_tok", json_null(), "num_experts_per_tok");
    expect_bad(V2LITE, "moe_intermediate_size", NULL, "moe_intermediate_size");
    expect_bad(V2LITE, "topk_method", json_string("gready"), "topk_method");
    expect_bad(V2LITE, "topk_method", json_string("noaux_tc"), "topk_method");
    expect_bad(V2LITE, "scoring_func", json_string("sigmoid"), "scoring_func");
    expect_bad(V2LITE, "hidden_act", json_string("gelu"), "hidden_act");
    expect_bad(V2LITE, "attention_bias", json_true(), "attention_bias");
    expect_bad(V2LITE, "rms_norm_eps", NULL, "rms_norm_eps");
    expect_bad(V2LITE, "moe_layer_freq", json_integer(0), "moe_layer_freq");
    expect_bad(V2LITE, "norm_topk_prob", json_string("yes"), "norm_topk_prob");
    expect_bad(V2LITE, "eos_token_id", json_integer(102400), "eos_token_id");
    expect_bad(V2LITE, "rope_scaling.type", json_string("ntk"), "rope_scaling.type");
    expect_bad(V2LITE, "rope_scaling.factor", json_real(0.5), "rope_scaling.factor");
    expect_bad(V2LITE, "rope_scaling", json_integer(3), "rope_scaling");
    expect_bad(V3, "n_group", json_integer(7), "n_group");
    expect_bad(V3, "n_group", NULL, "n_group");
    expect_bad(V3, "topk_group", json_integer(9), "topk_group");
    expect_bad(V3, "topk_method", json_string("greedy"), "topk_method");
    expect_bad(V3, "scoring_func", json_string("softmax"), "scoring_func");
}

/* Values that used to overflow or cost minutes later: each is refused at parse time, naming
 * its field (issue 19 defect 8: 2^62 positions overflowed a signed multiply, factor 1e308 gave
 * non-finite frequencies, a greedy config with topk_group > n_group passed, 1e6 layers took 17 s
 * and 2.5 GB before failing). */
static void test_out_of_range(void)
{
    expect_bad(V2LITE, "max_position_embeddings", json_integer((json_int_t)1 << 62),
               "max_position_embeddings");
    expect_bad(V2LITE, "max_position_embeddings", json_real(1e300), "max_position_embeddings");
    expect_bad(V2LITE, "rope_scaling.factor", json_real(1e308), "rope_scaling.factor");
    expect_bad(V2LITE, "rope_scaling.mscale", json_real(1e308), "rope_scaling.mscale");
    expect_bad(V2LITE, "rope_scaling.mscale_all_dim", json_real(1e308),
               "rope_scaling.mscale_all_dim");
    expect_bad(V2LITE, "rope_scaling.mscale_all_dim", json_real(-20), "mscale_all_dim");
    expect_bad(V2LITE, "rope_scaling.attention_factor", json_real(1e308), "attention_factor");
    expect_bad(V2LITE, "rope_scaling.beta_fast", json_real(1e308), "beta_fast");
    expect_bad(V2LITE, "rope_scaling.original_max_position_embeddings",
               json_integer((json_int_t)1 << 62), "original_max_position_embeddings");
    expect_bad(V2LITE, "rope_theta", json_real(1e308), "rope_theta");
    expect_bad(V2LITE, "topk_group", json_integer(2), "topk_group"); /* greedy, n_group 1 */
    expect_bad(V2LITE, "n_group", json_integer(3), "n_group");       /* 64 % 3 */
    expect_bad(V2LITE, "n_group", json_integer(128), "n_group");     /* more groups than experts */
    expect_bad(V2LITE, "num_hidden_layers", json_integer(1000000), "num_hidden_layers");
    expect_bad(V2LITE, "num_hidden_layers", json_integer(NUMLA_CONFIG_MAX_LAYERS + 1),
               "num_hidden_layers");
    expect_bad(V2LITE, "vocab_size", json_integer((json_int_t)1 << 40), "vocab_size");
    expect_bad(V2LITE, "hidden_size", json_integer((json_int_t)1 << 40), "hidden_size");
    expect_bad(V2LITE, "intermediate_size", json_integer((json_int_t)1 << 40), "intermediate_size");
    expect_bad(V2LITE, "moe_intermediate_size", json_integer((json_int_t)1 << 40),
               "moe_intermediate_size");
    expect_bad(V2LITE, "num_attention_heads", json_integer((json_int_t)1 << 40),
               "num_attention_heads");
    expect_bad(V2LITE, "kv_lora_rank", json_integer((json_int_t)1 << 40), "kv_lora_rank");
    expect_bad(V2LITE, "q_lora_rank", json_integer((json_int_t)1 << 40), "q_lora_rank");
    expect_bad(V2LITE, "v_head_dim", json_integer((json_int_t)1 << 40), "v_head_dim");
    expect_bad(V2LITE, "qk_nope_head_dim", json_integer((json_int_t)1 << 40), "qk_nope_head_dim");
    expect_bad(V2LITE, "n_routed_experts", json_integer((json_int_t)1 << 40), "n_routed_experts");
    expect_bad(V2LITE, "n_shared_experts", json_integer((json_int_t)1 << 40), "n_shared_experts");
    expect_bad(V2LITE, "first_k_dense_replace", json_integer((json_int_t)1 << 40),
               "first_k_dense_replace");
    expect_bad(V2LITE, "routed_scaling_factor", json_real(1e308), "routed_scaling_factor");
    expect_bad(V2LITE, "rms_norm_eps", json_real(1e308), "rms_norm_eps");
    /* ids that an int32 cast would wrap into the vocabulary */
    expect_bad(V2LITE, "eos_token_id", json_integer(((json_int_t)1 << 32) + 5), "eos_token_id");
    expect_bad(V2LITE, "bos_token_id", json_integer(((json_int_t)1 << 32) + 5), "bos_token_id");
    expect_bad(V2LITE, "bos_token_id", json_integer(102400), "bos_token_id");
    /* at the caps: accepted */
    json_t *o = json_loads(V2LITE, 0, NULL);
    json_object_set_new(o, "max_position_embeddings", json_integer(NUMLA_CONFIG_MAX_POSITIONS));
    json_object_set_new(o, "num_hidden_layers", json_integer(NUMLA_CONFIG_MAX_LAYERS));
    char *s = json_dumps(o, 0);
    numla_model_config c;
    CU_ASSERT_EQUAL(numla_model_config_parse(s, "caps.json", &c), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(c.max_position_embeddings, NUMLA_CONFIG_MAX_POSITIONS);
    CU_ASSERT_EQUAL(c.num_hidden_layers, NUMLA_CONFIG_MAX_LAYERS);
    free(s);
    json_decref(o);
}

/* Parse V3 with its routing fields replaced; returns the status. */
static numla_status parse_v3_routing(json_int_t experts, json_int_t groups, json_int_t topk_group,
                                     json_int_t k, numla_model_config *c)
{
    json_t *o = json_loads(V3, 0, NULL);
    json_object_set_new(o, "n_routed_experts", json_integer(experts));
    json_object_set_new(o, "n_group", json_integer(groups));
    json_object_set_new(o, "topk_group", json_integer(topk_group));
    json_object_set_new(o, "num_experts_per_tok", json_integer(k));
    char *s = json_dumps(o, 0);
    numla_status st = numla_model_config_parse(s, "route.json", c);
    free(s);
    json_decref(o);
    return st;
}

/* Issue 16 item 6 / 19 defect 13: many groups and experts are served with consistent shapes
 * (the router sizes its scratch from the config), or refused naming the field. */
static void test_many_groups(void)
{
    numla_model_config c;
    CU_ASSERT_EQUAL_FATAL(parse_v3_routing(4096, 512, 8, 8, &c), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(c.n_routed_experts, 4096);
    CU_ASSERT_EQUAL(c.n_group, 512);
    CU_ASSERT_EQUAL(c.topk_group, 8);
    CU_ASSERT_EQUAL(c.num_experts_per_tok, 8);
    CU_ASSERT_EQUAL(c.n_routed_experts % c.n_group, 0);
    CU_ASSERT_TRUE(c.topk_group * (c.n_routed_experts / c.n_group) >= c.num_experts_per_tok);
    CU_ASSERT_EQUAL(parse_v3_routing(4096, 2048, 512, 64, &c), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(c.n_group, 2048);
    struct {
        json_int_t e, g, tg, k;
        const char *needle;
    } bad[] = {
        {4096, 8192, 8, 8, "n_group"},              /* more groups than experts */
        {4096, 4096, 8, 8, "n_group"},              /* noaux_tc needs 2 per group */
        {4096, 512, 513, 8, "topk_group"},          /* more kept groups than groups */
        {4096, 512, 1, 9, "num_experts_per_tok"},   /* k beyond the kept groups' experts */
        {4096, 512, 8, 4097, "num_experts_per_tok"}, /* k beyond the experts */
        {4096, 3, 1, 8, "n_group"},                 /* does not divide */
        {NUMLA_CONFIG_MAX_EXPERTS * 2, 512, 8, 8, "n_routed_experts"},
        {4096, (json_int_t)1 << 40, 8, 8, "n_group"},
        {4096, 512, (json_int_t)1 << 40, 8, "topk_group"},
        {4096, 512, 8, (json_int_t)1 << 40, "num_experts_per_tok"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        numla_status st = parse_v3_routing(bad[i].e, bad[i].g, bad[i].tg, bad[i].k, &c);
        NUMLA_ASSERT_MSG(st != NUMLA_STATUS_OK && strstr(numla_error_message(), bad[i].needle),
                         "case %zu: status %d, message '%s' (want '%s')", i, (int)st,
                         numla_error_message(), bad[i].needle);
    }
}

/* transformers-5 layout (rope_parameters with rope_theta inside); a missing factor is the ratio
 * max_position_embeddings / original_max_position_embeddings (docs/design.md §5 trap). */
static void test_rope_parameters(void)
{
    json_t *o = json_loads(V2LITE, 0, NULL);
    json_t *rs = json_deep_copy(json_object_get(o, "rope_scaling"));
    json_object_del(rs, "factor");
    json_object_set_new(rs, "rope_theta", json_real(50000.0));
    json_object_set_new(rs, "rope_type", json_string("yarn"));
    json_object_set_new(o, "rope_parameters", rs);
    json_object_del(o, "rope_scaling");
    json_object_del(o, "rope_theta");
    json_object_set_new(o, "max_position_embeddings", json_integer(8192));
    char *s = json_dumps(o, 0);
    numla_model_config c;
    CU_ASSERT_EQUAL_FATAL(numla_model_config_parse(s, "v5.json", &c), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(c.rope_yarn, 1);
    CU_ASSERT_DOUBLE_EQUAL(c.rope_factor, 2.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(c.rope_theta, 50000.0, 1e-9);
    free(s);
    json_decref(o);
}

static void test_bad_json(void)
{
    numla_model_config c;
    CU_ASSERT_EQUAL(numla_model_config_parse("{\"model_type\": ", "trunc.json", &c),
                    NUMLA_STATUS_FORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "trunc.json"));
    CU_ASSERT_EQUAL(numla_model_config_parse("[1,2]", "arr.json", &c), NUMLA_STATUS_FORMAT);
    CU_ASSERT_EQUAL(numla_model_config_parse("", "empty.json", &c), NUMLA_STATUS_FORMAT);
    CU_ASSERT_NOT_EQUAL(numla_model_config_load("/nonexistent/dir", &c), NUMLA_STATUS_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "config.json"));
}


int numla_fuzz_config_run(const uint8_t *data, size_t size, numla_model_config *out);

/* Fields compared with the seed's parse when a mutated config still writes them unchanged. */
static const struct {
    const char *key;
    size_t offset; /* of an int64_t in numla_model_config */
    int moe;       /* read only when the model has routed experts */
} fuzz_int_fields[] = {
    {"vocab_size", offsetof(numla_model_config, vocab_size), 0},
    {"hidden_size", offsetof(numla_model_config, hidden_size), 0},
    {"num_hidden_layers", offsetof(numla_model_config, num_hidden_layers), 0},
    {"num_attention_heads", offsetof(numla_model_config, num_attention_heads), 0},
    {"intermediate_size", offsetof(numla_model_config, intermediate_size), 0},
    {"max_position_embeddings", offsetof(numla_model_config, max_position_embeddings), 0},
    {"q_lora_rank", offsetof(numla_model_config, q_lora_rank), 0},
    {"kv_lora_rank", offsetof(numla_model_config, kv_lora_rank), 0},
    {"qk_nope_head_dim", offsetof(numla_model_config, qk_nope_head_dim), 0},
    {"qk_rope_head_dim", offsetof(numla_model_config, qk_rope_head_dim), 0},
    {"v_head_dim", offsetof(numla_model_config, v_head_dim), 0},
    {"n_routed_experts", offsetof(numla_model_config, n_routed_experts), 0},
    {"n_shared_experts", offsetof(numla_model_config, n_shared_experts), 0},
    {"num_experts_per_tok", offsetof(numla_model_config, num_experts_per_tok), 1},
    {"moe_intermediate_size", offsetof(numla_model_config, moe_intermediate_size), 1},
    {"first_k_dense_replace", offsetof(numla_model_config, first_k_dense_replace), 0},
    {"moe_layer_freq", offsetof(numla_model_config, moe_layer_freq), 0},
    {"n_group", offsetof(numla_model_config, n_group), 1},
    {"topk_group", offsetof(numla_model_config, topk_group), 1},
};

/* A rejection must say what it rejects: the JSON position, or a field the seed writes. */
static int fuzz_message_names_something(const char *msg, json_t *seed)
{
    if (!strstr(msg, "fuzz.json"))
        return 0;
    if (strstr(msg, "invalid JSON") || strstr(msg, "top level"))
        return 1;
    const char *key;
    json_t *v;
    json_object_foreach(seed, key, v) {
        if (strstr(msg, key))
            return 1;
        const char *sub;
        json_t *sv;
        if (json_is_object(v))
            json_object_foreach(v, sub, sv) if (strstr(msg, sub)) return 1;
    }
    return 0;
}

/* Seeded mutations of a valid config (byte flips, digit and bracket insertions, deletions and
 * truncations) through the fuzz target's invariant checks. Each is either accepted, and then
 * every field the mutation left as written equals the seed's, or rejected with a message naming
 * the JSON position or a field. Both outcomes must occur: a parser rejecting everything fails. */
static void test_fuzz_mutations(void)
{
    const char *seed = V3;
    size_t n = strlen(seed);
    numla_model_config orig;
    CU_ASSERT_EQUAL_FATAL(numla_model_config_parse(seed, "seed", &orig), NUMLA_STATUS_OK);
    json_t *seed_json = json_loads(seed, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(seed_json);
    uint8_t *buf = malloc(n + 64);
    char *text = malloc(n + 65);
    numla_test_rng rng = {2026};
    int accepted = 0, rejected = 0, compared = 0;
    for (int it = 0; it < 3000; it++) {
        memcpy(buf, seed, n);
        size_t len = n;
        len = numla_test_mutate_json(buf, len, 0, &rng);
        numla_model_config c;
        int r = numla_fuzz_config_run(buf, len, &c);
        CU_ASSERT_NOT_EQUAL_FATAL(r, -1);
        if (r == 0) {
            rejected++;
            NUMLA_ASSERT_MSG(fuzz_message_names_something(numla_error_message(), seed_json),
                             "mutation %d rejected with '%s'", it, numla_error_message());
            continue;
        }
        accepted++;
        memcpy(text, buf, len);
        text[len] = 0;
        json_t *mj = json_loads(text, JSON_REJECT_DUPLICATES, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(mj);
        for (size_t f = 0; f < sizeof fuzz_int_fields / sizeof fuzz_int_fields[0]; f++) {
            json_t *mv = json_object_get(mj, fuzz_int_fields[f].key);
            if (!mv || !json_equal(mv, json_object_get(seed_json, fuzz_int_fields[f].key)) ||
                (fuzz_int_fields[f].moe && c.n_routed_experts == 0))
                continue;
            int64_t got = *(const int64_t *)((const char *)&c + fuzz_int_fields[f].offset);
            int64_t want = *(const int64_t *)((const char *)&orig + fuzz_int_fields[f].offset);
            compared++;
            NUMLA_ASSERT_MSG(got == want, "mutation %d: %s = %lld, the seed's is %lld", it,
                             fuzz_int_fields[f].key, (long long)got, (long long)want);
        }
        json_t *mr = json_object_get(mj, "routed_scaling_factor");
        if (mr && json_equal(mr, json_object_get(seed_json, "routed_scaling_factor")))
            CU_ASSERT_DOUBLE_EQUAL(c.routed_scaling_factor, orig.routed_scaling_factor, 0);
        if (json_equal(json_object_get(mj, "rope_scaling"),
                       json_object_get(seed_json, "rope_scaling")) &&
            json_equal(json_object_get(mj, "rope_theta"), json_object_get(seed_json, "rope_theta")))
            CU_ASSERT_DOUBLE_EQUAL(c.rope_inv_freq[5], orig.rope_inv_freq[5], 0);
        json_decref(mj);
    }
    free(buf);
    free(text);
    json_decref(seed_json);
    /* observed with this seed: 305 accepted, 2695 rejected, 5611 fields compared */
    NUMLA_ASSERT_MSG(accepted >= 150 && rejected >= 1000, "accepted %d, rejected %d of 3000",
                     accepted, rejected);
    NUMLA_ASSERT_MSG(compared >= 2000, "only %d fields compared with the seed", compared);
}

NUMLA_TEST_SUITE(config, NULL, NULL, NUMLA_TEST(test_v2lite), NUMLA_TEST(test_v3),
                 NUMLA_TEST(test_no_rope_scaling_dense), NUMLA_TEST(test_bad_fields), NUMLA_TEST(test_out_of_range),
                 NUMLA_TEST(test_many_groups),
                 NUMLA_TEST(test_rope_parameters), NUMLA_TEST(test_bad_json), NUMLA_TEST(test_fuzz_mutations))
