/* Published model files (tests/golden/configs/<model>/, README.md there says where each came
 * from) read by numla's loaders with the values the files state: config.json through the config
 * loader (engine/model/config.c), compared field by field with the file read independently here
 * with jansson; generation_config.json through engine/cli/generation_config.c. Every model
 * directory there is checked; a new fixture needs no code. */
#include "test_util.h"

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/cli/generation_config.h"
#include "engine/model/config.h"

static int64_t int_or(const json_t *o, const char *key, int64_t dflt)
{
    const json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
}

static double num_or(const json_t *o, const char *key, double dflt)
{
    const json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : dflt;
}

/* The fields of config.json that numla reads, compared with what the loader made of them. */
static void check_config(const char *name, const char *dir)
{
    char path[1700];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    numla_model_config c;
    numla_status s = numla_model_config_load(dir, &c);
    CU_ASSERT_EQUAL(s, NUMLA_STATUS_OK);
    if (s != NUMLA_STATUS_OK) {
        fprintf(stderr, "published_configs: %s: %s\n", name, numla_error_message());
        json_decref(root);
        return;
    }
    /* Kimi K2.5 keeps its text model's fields in text_config */
    const json_t *t = root;
    const char *mt = json_string_value(json_object_get(root, "model_type"));
    if (mt && !strcmp(mt, "kimi_k25"))
        t = json_object_get(root, "text_config");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_STRING_EQUAL(c.model_type, mt);
    static const struct {
        const char *key;
        size_t off;
    } ints[] = {
        {"vocab_size", offsetof(numla_model_config, vocab_size)},
        {"hidden_size", offsetof(numla_model_config, hidden_size)},
        {"num_hidden_layers", offsetof(numla_model_config, num_hidden_layers)},
        {"num_attention_heads", offsetof(numla_model_config, num_attention_heads)},
        {"intermediate_size", offsetof(numla_model_config, intermediate_size)},
        {"max_position_embeddings", offsetof(numla_model_config, max_position_embeddings)},
        {"kv_lora_rank", offsetof(numla_model_config, kv_lora_rank)},
        {"qk_nope_head_dim", offsetof(numla_model_config, qk_nope_head_dim)},
        {"qk_rope_head_dim", offsetof(numla_model_config, qk_rope_head_dim)},
        {"v_head_dim", offsetof(numla_model_config, v_head_dim)},
        {"n_routed_experts", offsetof(numla_model_config, n_routed_experts)},
        {"n_shared_experts", offsetof(numla_model_config, n_shared_experts)},
        {"num_experts_per_tok", offsetof(numla_model_config, num_experts_per_tok)},
        {"moe_intermediate_size", offsetof(numla_model_config, moe_intermediate_size)},
        {"first_k_dense_replace", offsetof(numla_model_config, first_k_dense_replace)},
        {"n_group", offsetof(numla_model_config, n_group)},
        {"topk_group", offsetof(numla_model_config, topk_group)},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        const json_t *v = json_object_get(t, ints[i].key);
        if (!json_is_integer(v))
            continue; /* absent or null: the loader's default, checked by the unit suites */
        int64_t got = *(const int64_t *)((const char *)&c + ints[i].off);
        if (got != json_integer_value(v))
            fprintf(stderr, "published_configs: %s: %s = %lld, the file says %lld\n", name,
                    ints[i].key, (long long)got, (long long)json_integer_value(v));
        CU_ASSERT_EQUAL(got, json_integer_value(v));
    }
    const json_t *q = json_object_get(t, "q_lora_rank");
    CU_ASSERT_EQUAL(c.q_lora_rank, json_is_null(q) ? 0 : json_integer_value(q));
    CU_ASSERT_EQUAL(c.q_head_dim,
                    int_or(t, "qk_nope_head_dim", 0) + int_or(t, "qk_rope_head_dim", 0));
    CU_ASSERT_DOUBLE_EQUAL(c.rms_norm_eps, num_or(t, "rms_norm_eps", -1), 0);
    CU_ASSERT_DOUBLE_EQUAL(c.routed_scaling_factor, num_or(t, "routed_scaling_factor", 1.0), 0);
    CU_ASSERT_EQUAL(c.norm_topk_prob, json_is_true(json_object_get(t, "norm_topk_prob")));
    CU_ASSERT_EQUAL(c.tie_word_embeddings, json_is_true(json_object_get(t, "tie_word_embeddings")));
    /* router */
    const char *tm = json_string_value(json_object_get(t, "topk_method"));
    if (tm)
        CU_ASSERT_EQUAL(c.topk_method, !strcmp(tm, "noaux_tc") ? NUMLA_TOPK_METHOD_NOAUX_TC
                                       : !strcmp(tm, "group_limited_greedy")
                                           ? NUMLA_TOPK_METHOD_GROUP_LIMITED_GREEDY
                                           : NUMLA_TOPK_METHOD_GREEDY);
    const char *sf = json_string_value(json_object_get(t, "scoring_func"));
    if (sf)
        CU_ASSERT_EQUAL(c.scoring_func, !strcmp(sf, "sigmoid") ? NUMLA_SCORING_FUNC_SIGMOID
                                                               : NUMLA_SCORING_FUNC_SOFTMAX);
    /* RoPE: rope_theta at the top or inside rope_parameters, YaRN's fields */
    const json_t *rs = json_object_get(t, "rope_scaling");
    if (!json_is_object(rs))
        rs = json_object_get(t, "rope_parameters");
    double theta = num_or(t, "rope_theta", num_or(rs, "rope_theta", 10000.0));
    CU_ASSERT_DOUBLE_EQUAL(c.rope_theta, theta, 0);
    const char *rt = json_string_value(json_object_get(rs, "type"));
    if (json_string_value(json_object_get(rs, "rope_type")))
        rt = json_string_value(json_object_get(rs, "rope_type"));
    CU_ASSERT_EQUAL(c.rope_yarn, rt && !strcmp(rt, "yarn"));
    if (c.rope_yarn) {
        CU_ASSERT_DOUBLE_EQUAL(c.rope_factor, num_or(rs, "factor", -1), 0);
        CU_ASSERT_EQUAL(c.rope_original_max_position_embeddings,
                        int_or(rs, "original_max_position_embeddings", -1));
        CU_ASSERT_DOUBLE_EQUAL(c.rope_beta_fast, num_or(rs, "beta_fast", 32.0), 0);
        CU_ASSERT_DOUBLE_EQUAL(c.rope_beta_slow, num_or(rs, "beta_slow", 1.0), 0);
        CU_ASSERT_DOUBLE_EQUAL(c.rope_mscale, num_or(rs, "mscale", 1.0), 0);
        CU_ASSERT_DOUBLE_EQUAL(c.rope_mscale_all_dim, num_or(rs, "mscale_all_dim", 0.0), 0);
    }
    /* tokens */
    CU_ASSERT_EQUAL(c.bos_token_id, int_or(t, "bos_token_id", -1));
    const json_t *eos = json_object_get(t, "eos_token_id");
    if (json_is_integer(eos)) {
        CU_ASSERT_EQUAL(c.num_eos, 1);
        CU_ASSERT_EQUAL(c.eos_token_ids[0], json_integer_value(eos));
    } else if (json_is_array(eos)) {
        CU_ASSERT_EQUAL(c.num_eos, (int32_t)json_array_size(eos));
        for (size_t i = 0; i < json_array_size(eos) && i < NUMLA_CONFIG_MAX_EOS; i++)
            CU_ASSERT_EQUAL(c.eos_token_ids[i], json_integer_value(json_array_get(eos, i)));
    }
    /* weights */
    const json_t *qc = json_object_get(root, "quantization_config");
    if (!qc)
        qc = json_object_get(t, "quantization_config");
    const char *qm = json_string_value(json_object_get(qc, "quant_method"));
    CU_ASSERT_EQUAL(c.weight_format, !qm                             ? NUMLA_WEIGHT_FORMAT_NONE
                                     : !strcmp(qm, "fp8")            ? NUMLA_WEIGHT_FORMAT_FP8
                                     : !strcmp(qm, "w8a8_int8")      ? NUMLA_WEIGHT_FORMAT_INT8
                                                                     : NUMLA_ENCODING_INT4);
    json_decref(root);
}

/* generation_config.json: the EOS ids and sampling fields numla reads. */
static void check_generation_config(const char *name, const char *dir)
{
    char path[1700];
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    json_error_t err;
    json_t *root = json_load_file(path, JSON_DECODE_INT_AS_REAL, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    numla_generation_config g;
    numla_status s = numla_generation_config_load(dir, 0, &g);
    CU_ASSERT_EQUAL(s, NUMLA_STATUS_OK);
    if (s != NUMLA_STATUS_OK) {
        fprintf(stderr, "published_configs: %s: %s\n", name, numla_error_message());
        json_decref(root);
        return;
    }
    CU_ASSERT(g.found);
    const json_t *eos = json_object_get(root, "eos_token_id");
    size_t n = json_is_array(eos) ? json_array_size(eos) : json_is_number(eos) ? 1 : 0;
    CU_ASSERT_EQUAL((size_t)g.num_eos, n);
    for (size_t i = 0; i < n && i < NUMLA_CONFIG_MAX_EOS; i++)
        CU_ASSERT_EQUAL(g.eos_token_ids[i],
                        (int32_t)json_number_value(json_is_array(eos) ? json_array_get(eos, i)
                                                                      : eos));
    CU_ASSERT_EQUAL(g.has_temperature, json_is_number(json_object_get(root, "temperature")));
    CU_ASSERT_DOUBLE_EQUAL(g.temperature, num_or(root, "temperature", 0), 0);
    CU_ASSERT_EQUAL(g.has_top_p, json_is_number(json_object_get(root, "top_p")));
    CU_ASSERT_DOUBLE_EQUAL(g.top_p, num_or(root, "top_p", 0), 0);
    CU_ASSERT_EQUAL(g.has_top_k, json_is_number(json_object_get(root, "top_k")));
    CU_ASSERT_EQUAL(g.top_k, (int32_t)num_or(root, "top_k", 0));
    const json_t *ds = json_object_get(root, "do_sample");
    CU_ASSERT_EQUAL(g.has_do_sample, json_is_boolean(ds));
    CU_ASSERT_EQUAL(g.do_sample, json_is_true(ds));
    json_decref(root);
}

static void test_every_fixture(void)
{
    char base[1200];
    snprintf(base, sizeof base, "%s", numla_test_source_path("tests/golden/configs"));
    DIR *d = opendir(base);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    int configs = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char dir[1600], path[1700];
        snprintf(dir, sizeof dir, "%s/%s", base, e->d_name);
        struct stat st;
        if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
            continue;
        snprintf(path, sizeof path, "%s/config.json", dir);
        if (stat(path, &st) == 0) {
            check_config(e->d_name, dir);
            configs++;
        }
        snprintf(path, sizeof path, "%s/generation_config.json", dir);
        if (stat(path, &st) == 0)
            check_generation_config(e->d_name, dir);
    }
    closedir(d);
    CU_ASSERT(configs >= 1);
}

NUMLA_TEST_SUITE(published_configs, NULL, NULL, NUMLA_TEST(test_every_fixture))
