/* Tests for engine/synth: the tiny presets written to a temp dir and re-opened through
 * engine/safetensors; every expected HF tensor present with its shape (the expected list is
 * spelled out here from the preset numbers, not taken from synth.c); config.json read back with
 * jansson; determinism across runs and thread counts; sharding; weight statistics; and the
 * decisiveness of the output layer (docs/design.md §8). */
#define _GNU_SOURCE
#include "test_util.h"

#include "engine/formats/safetensors.h"
#include "engine/formats/safetensors_testing.h"
#include "engine/model/config.h"
#include "engine/model/config_v4.h"
#include "engine/model/model_v4.h"
#include "engine/synth/synth.h"

#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *sy_dir(const char *name)
{
    static char buf[8][512];
    static int k;
    char *p = buf[k++ & 7];
    snprintf(p, 512, "%s/synth-%s", numla_test_tmpdir(), name);
    return p;
}

static numla_status sy_write(const char *preset, const char *dir, uint64_t seed, numla_dtype dt,
                             int64_t shard_bytes)
{
    numla_synth_options o = {.preset = preset, .out_dir = dir, .seed = seed, .dtype = dt,
                             .shard_bytes = shard_bytes};
    return numla_synth_write(&o, NULL);
}

static unsigned char *sy_read(const char *dir, const char *name, size_t *n)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc(*n + 1);
    if (fread(p, 1, *n, f) != *n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    return p;
}

static int sy_same_file(const char *d1, const char *d2, const char *name)
{
    size_t n1 = 0, n2 = 0;
    unsigned char *a = sy_read(d1, name, &n1), *b = sy_read(d2, name, &n2);
    int same = a && b && n1 == n2 && memcmp(a, b, n1) == 0;
    free(a);
    free(b);
    return same;
}

/* ---------------------------------------------------------------------------------------- */
/* the expected tensor list, from the literal preset numbers                                 */

typedef struct sy_expect {
    char name[96];
    int32_t ndim;
    int64_t shape[2];
} sy_expect;

typedef struct sy_list {
    sy_expect e[1024];
    int n;
} sy_list;

static void sy_add(sy_list *l, int64_t r, int64_t c, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void sy_add(sy_list *l, int64_t r, int64_t c, const char *fmt, ...)
{
    sy_expect *e = &l->e[l->n++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->name, sizeof e->name, fmt, ap);
    va_end(ap);
    e->ndim = c ? 2 : 1;
    e->shape[0] = r;
    e->shape[1] = c;
}

/* HF modeling_deepseek: q_proj (H*(nope+rope), hidden); kv_a_proj_with_mqa (kv_lora+rope,
 * hidden); kv_b_proj (H*(nope+v), kv_lora); o_proj (hidden, H*v); experts (moe, hidden) and
 * (hidden, moe). */
static void sy_expected_mtp(sy_list *l, int layers, int dense, int H, int q_lora, int experts,
                            int shared, int bias, int mtp)
{
    const int d = 64, V = 512, kvl = 64, rope = 16, nope = 32, v = 32, inter = 192, moe = 32;
    l->n = 0;
    sy_add(l, V, d, "model.embed_tokens.weight");
    if (mtp) {
        /* DeepSeek-V3's model.safetensors.index.json, layer 61: a decoder layer (MoE: layer
         * `layers` >= dense below) plus these */
        sy_add(l, d, 0, "model.layers.%d.enorm.weight", layers);
        sy_add(l, d, 0, "model.layers.%d.hnorm.weight", layers);
        sy_add(l, d, 2 * d, "model.layers.%d.eh_proj.weight", layers);
        sy_add(l, V, d, "model.layers.%d.embed_tokens.weight", layers);
        sy_add(l, d, 0, "model.layers.%d.shared_head.norm.weight", layers);
        sy_add(l, V, d, "model.layers.%d.shared_head.head.weight", layers);
    }
    for (int i = 0; i < layers + mtp; i++) {
        sy_add(l, d, 0, "model.layers.%d.input_layernorm.weight", i);
        sy_add(l, d, 0, "model.layers.%d.post_attention_layernorm.weight", i);
        if (q_lora) {
            sy_add(l, q_lora, d, "model.layers.%d.self_attn.q_a_proj.weight", i);
            sy_add(l, q_lora, 0, "model.layers.%d.self_attn.q_a_layernorm.weight", i);
            sy_add(l, H * (nope + rope), q_lora, "model.layers.%d.self_attn.q_b_proj.weight", i);
        } else {
            sy_add(l, H * (nope + rope), d, "model.layers.%d.self_attn.q_proj.weight", i);
        }
        sy_add(l, kvl + rope, d, "model.layers.%d.self_attn.kv_a_proj_with_mqa.weight", i);
        sy_add(l, kvl, 0, "model.layers.%d.self_attn.kv_a_layernorm.weight", i);
        sy_add(l, H * (nope + v), kvl, "model.layers.%d.self_attn.kv_b_proj.weight", i);
        sy_add(l, d, H * v, "model.layers.%d.self_attn.o_proj.weight", i);
        if (i < dense) {
            sy_add(l, inter, d, "model.layers.%d.mlp.gate_proj.weight", i);
            sy_add(l, inter, d, "model.layers.%d.mlp.up_proj.weight", i);
            sy_add(l, d, inter, "model.layers.%d.mlp.down_proj.weight", i);
            continue;
        }
        sy_add(l, experts, d, "model.layers.%d.mlp.gate.weight", i);
        if (bias)
            sy_add(l, experts, 0, "model.layers.%d.mlp.gate.e_score_correction_bias", i);
        for (int e = 0; e < experts; e++) {
            sy_add(l, moe, d, "model.layers.%d.mlp.experts.%d.gate_proj.weight", i, e);
            sy_add(l, moe, d, "model.layers.%d.mlp.experts.%d.up_proj.weight", i, e);
            sy_add(l, d, moe, "model.layers.%d.mlp.experts.%d.down_proj.weight", i, e);
        }
        sy_add(l, shared * moe, d, "model.layers.%d.mlp.shared_experts.gate_proj.weight", i);
        sy_add(l, shared * moe, d, "model.layers.%d.mlp.shared_experts.up_proj.weight", i);
        sy_add(l, d, shared * moe, "model.layers.%d.mlp.shared_experts.down_proj.weight", i);
    }
    sy_add(l, d, 0, "model.norm.weight");
    sy_add(l, V, d, "lm_head.weight");
}

static void sy_expected(sy_list *l, int layers, int dense, int H, int q_lora, int experts,
                        int shared, int bias)
{
    sy_expected_mtp(l, layers, dense, H, q_lora, experts, shared, bias, 0);
}

static void sy_check_tensors(const char *dir, const sy_list *l, numla_dtype dt)
{
    numla_safetensors_model *m = NULL;
    numla_status s = numla_safetensors_open(dir, &m);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OK, "open %s: %s", dir, numla_error_message());
    if (!m)
        return;
    NUMLA_ASSERT_MSG(numla_safetensors_count(m) == l->n, "%s: %lld tensors, expected %d", dir,
                     (long long)numla_safetensors_count(m), l->n);
    int bad = 0;
    for (int i = 0; i < l->n; i++) {
        const numla_safetensors_tensor *t = NULL;
        if (numla_safetensors_expect(m, l->e[i].name, l->e[i].ndim, l->e[i].shape, &t) != NUMLA_STATUS_OK) {
            if (bad++ < 5)
                fprintf(stderr, "\n    %s\n", numla_error_message());
            continue;
        }
        numla_dtype want = strstr(t->name, "e_score_correction_bias") ? NUMLA_DTYPE_F32 : dt;
        if (t->dtype != want && bad++ < 5)
            fprintf(stderr, "\n    %s has dtype %d\n", t->name, (int)t->dtype);
    }
    NUMLA_ASSERT_MSG(bad == 0, "%s: %d tensors missing or wrong", dir, bad);
    numla_safetensors_close(&m);
}

/* ---------------------------------------------------------------------------------------- */

static void test_tiny_tensors(void)
{
    const char *dir = sy_dir("tiny");
    CU_ASSERT_EQUAL_FATAL(sy_write("tiny", dir, 1, NUMLA_DTYPE_BF16, 0), NUMLA_STATUS_OK);
    char path[700];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    struct stat st;
    CU_ASSERT(stat(path, &st) == 0);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    CU_ASSERT(stat(path, &st) != 0); /* small: one file, no index */
    static sy_list l;
    sy_expected(&l, 3, 1, 6, 0, 10, 1, 0);
    sy_check_tensors(dir, &l, NUMLA_DTYPE_BF16);

    const char *d32 = sy_dir("tiny-f32");
    CU_ASSERT_EQUAL_FATAL(sy_write("tiny", d32, 1, NUMLA_DTYPE_F32, 0), NUMLA_STATUS_OK);
    sy_check_tensors(d32, &l, NUMLA_DTYPE_F32);

    /* tiny-v3: q_lora path, router bias, 4 layers with 1 dense. --layers/--experts apply. */
    const char *dv3 = sy_dir("tiny-v3");
    numla_synth_options o = {.preset = "tiny-v3", .out_dir = dv3, .seed = 5,
                             .dtype = NUMLA_DTYPE_BF16, .layers = 3, .experts = 8};
    CU_ASSERT_EQUAL_FATAL(numla_synth_write(&o, NULL), NUMLA_STATUS_OK);
    sy_expected(&l, 3, 1, 4, 48, 8, 1, 1);
    sy_check_tensors(dv3, &l, NUMLA_DTYPE_BF16);
}

static json_t *sy_config(const char *dir)
{
    char path[700];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t err;
    json_t *j = json_load_file(path, 0, &err);
    NUMLA_ASSERT_MSG(j != NULL, "%s: %s", path, err.text);
    return j;
}

static int64_t sy_int(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    NUMLA_ASSERT_MSG(json_is_integer(v), "config field %s is not an integer", k);
    return json_integer_value(v);
}

static double sy_num(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    NUMLA_ASSERT_MSG(json_is_number(v), "config field %s is not a number", k);
    return json_number_value(v);
}

static const char *sy_str(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    NUMLA_ASSERT_MSG(s != NULL, "config field %s is not a string", k);
    return s ? s : "";
}

static void test_tiny_config(void)
{
    const char *dir = sy_dir("tiny"); /* written by test_tiny_tensors */
    json_t *c = sy_config(dir);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_STRING_EQUAL(sy_str(c, "model_type"), "deepseek_v2");
    CU_ASSERT_EQUAL(sy_int(c, "vocab_size"), 512);
    CU_ASSERT_EQUAL(sy_int(c, "hidden_size"), 64);
    CU_ASSERT_EQUAL(sy_int(c, "intermediate_size"), 192);
    CU_ASSERT_EQUAL(sy_int(c, "moe_intermediate_size"), 32);
    CU_ASSERT_EQUAL(sy_int(c, "num_hidden_layers"), 3);
    CU_ASSERT_EQUAL(sy_int(c, "num_attention_heads"), 6);
    CU_ASSERT_EQUAL(sy_int(c, "num_key_value_heads"), 6);
    CU_ASSERT_EQUAL(sy_int(c, "n_shared_experts"), 1);
    CU_ASSERT_EQUAL(sy_int(c, "n_routed_experts"), 10);
    CU_ASSERT_EQUAL(sy_int(c, "num_experts_per_tok"), 3);
    CU_ASSERT_DOUBLE_EQUAL(sy_num(c, "routed_scaling_factor"), 1.0, 0);
    CU_ASSERT_STRING_EQUAL(sy_str(c, "topk_method"), "greedy");
    CU_ASSERT_EQUAL(sy_int(c, "n_group"), 1);
    CU_ASSERT_EQUAL(sy_int(c, "topk_group"), 1);
    CU_ASSERT_STRING_EQUAL(sy_str(c, "scoring_func"), "softmax");
    CU_ASSERT(json_is_false(json_object_get(c, "norm_topk_prob")));
    CU_ASSERT_EQUAL(sy_int(c, "first_k_dense_replace"), 1);
    CU_ASSERT_EQUAL(sy_int(c, "moe_layer_freq"), 1);
    CU_ASSERT_EQUAL(sy_int(c, "kv_lora_rank"), 64);
    CU_ASSERT(json_is_null(json_object_get(c, "q_lora_rank")));
    CU_ASSERT_EQUAL(sy_int(c, "qk_rope_head_dim"), 16);
    CU_ASSERT_EQUAL(sy_int(c, "qk_nope_head_dim"), 32);
    CU_ASSERT_EQUAL(sy_int(c, "v_head_dim"), 32);
    CU_ASSERT_EQUAL(sy_int(c, "max_position_embeddings"), 4096);
    CU_ASSERT_DOUBLE_EQUAL(sy_num(c, "rms_norm_eps"), 1e-6, 0);
    CU_ASSERT_DOUBLE_EQUAL(sy_num(c, "rope_theta"), 10000.0, 0);
    CU_ASSERT_EQUAL(sy_int(c, "bos_token_id"), 0);
    CU_ASSERT_EQUAL(sy_int(c, "eos_token_id"), 1);
    CU_ASSERT(json_is_false(json_object_get(c, "tie_word_embeddings")));
    const json_t *rs = json_object_get(c, "rope_scaling");
    CU_ASSERT_FATAL(json_is_object(rs));
    CU_ASSERT_STRING_EQUAL(sy_str(rs, "type"), "yarn");
    CU_ASSERT_DOUBLE_EQUAL(sy_num(rs, "factor"), 4.0, 0);
    CU_ASSERT_EQUAL(sy_int(rs, "original_max_position_embeddings"), 1024);
    CU_ASSERT_DOUBLE_EQUAL(sy_num(rs, "beta_fast"), 32.0, 0);
    CU_ASSERT_DOUBLE_EQUAL(sy_num(rs, "beta_slow"), 1.0, 0);
    CU_ASSERT_DOUBLE_EQUAL(sy_num(rs, "mscale"), 0.707, 0);
    CU_ASSERT_DOUBLE_EQUAL(sy_num(rs, "mscale_all_dim"), 0.707, 0);
    /* The trap of docs/design.md §5: max_position / original must equal factor. */
    CU_ASSERT_DOUBLE_EQUAL(4096.0 / 1024.0, sy_num(rs, "factor"), 0);
    json_decref(c);

    c = sy_config(sy_dir("tiny-v3"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_STRING_EQUAL(sy_str(c, "model_type"), "deepseek_v3");
    CU_ASSERT_EQUAL(sy_int(c, "num_hidden_layers"), 3);
    CU_ASSERT_EQUAL(sy_int(c, "n_routed_experts"), 8);
    CU_ASSERT_EQUAL(sy_int(c, "q_lora_rank"), 48);
    CU_ASSERT_STRING_EQUAL(sy_str(c, "topk_method"), "noaux_tc");
    CU_ASSERT_STRING_EQUAL(sy_str(c, "scoring_func"), "sigmoid");
    CU_ASSERT(json_is_true(json_object_get(c, "norm_topk_prob")));
    CU_ASSERT_DOUBLE_EQUAL(sy_num(c, "routed_scaling_factor"), 2.5, 0);
    CU_ASSERT_EQUAL(sy_int(c, "n_group"), 4);
    CU_ASSERT_EQUAL(sy_int(c, "topk_group"), 2);
    json_decref(c);
}

/* The big presets are checked through their config (writing them takes GBs). */
static void test_presets_and_validation(void)
{
    numla_synth_config c;
    numla_synth_options o = {.preset = "v2-lite", .dtype = NUMLA_DTYPE_BF16};
    CU_ASSERT_EQUAL_FATAL(numla_synth_config_get(&o, &c), NUMLA_STATUS_OK);
    CU_ASSERT(c.hidden_size == 2048 && c.num_attention_heads == 16 && c.kv_lora_rank == 512);
    CU_ASSERT(c.qk_rope_head_dim == 64 && c.qk_nope_head_dim == 128 && c.v_head_dim == 128);
    CU_ASSERT(c.q_lora_rank == 0 && c.vocab_size == 102400 && c.intermediate_size == 10944);
    CU_ASSERT(c.moe_intermediate_size == 1408 && c.n_routed_experts == 64);
    CU_ASSERT(c.num_experts_per_tok == 6 && c.n_shared_experts == 2);
    CU_ASSERT(c.first_k_dense_replace == 1 && c.num_hidden_layers == 27);
    CU_ASSERT(c.yarn_factor == 40.0 && c.yarn_original_max_position_embeddings == 4096);
    CU_ASSERT(c.yarn_mscale == 0.707 && c.yarn_mscale_all_dim == 0.707);
    CU_ASSERT(c.max_position_embeddings == 163840 && !strcmp(c.scoring_func, "softmax"));
    /* docs/design.md §5: V2-Lite's softmax scale is ~0.11472 with m^2 = 1.5896. */
    double m = 0.1 * c.yarn_mscale_all_dim * log(c.yarn_factor) + 1.0;
    CU_ASSERT_DOUBLE_EQUAL(m * m, 1.5896, 1e-4);
    CU_ASSERT_DOUBLE_EQUAL(m * m / sqrt((double)(c.qk_nope_head_dim + c.qk_rope_head_dim)),
                           0.11472, 1e-5);

    o.preset = "v3";
    o.layers = 4;
    o.experts = 16;
    CU_ASSERT_EQUAL_FATAL(numla_synth_config_get(&o, &c), NUMLA_STATUS_OK);
    CU_ASSERT(c.hidden_size == 7168 && c.num_attention_heads == 128 && c.q_lora_rank == 1536);
    CU_ASSERT(c.n_routed_experts == 16 && c.num_hidden_layers == 4 && c.num_experts_per_tok == 8);
    CU_ASSERT(c.n_group == 8 && c.topk_group == 4 && !strcmp(c.topk_method, "noaux_tc"));
    CU_ASSERT(c.routed_scaling_factor == 2.5 && c.norm_topk_prob && c.first_k_dense_replace == 3);
    CU_ASSERT(!strcmp(c.model_type, "deepseek_v3") && !strcmp(c.scoring_func, "sigmoid"));

    /* Kimi K2 (docs/kimi.md): V3's architecture, 384 experts in one group, 64 heads */
    numla_synth_options ok = {.preset = "kimi-k2", .dtype = NUMLA_DTYPE_BF16};
    CU_ASSERT_EQUAL_FATAL(numla_synth_config_get(&ok, &c), NUMLA_STATUS_OK);
    CU_ASSERT(!strcmp(c.model_type, "kimi_k2") && !strcmp(c.architecture, "DeepseekV3ForCausalLM"));
    CU_ASSERT(c.hidden_size == 7168 && c.num_attention_heads == 64 && c.num_hidden_layers == 61);
    CU_ASSERT(c.n_routed_experts == 384 && c.num_experts_per_tok == 8 && c.n_shared_experts == 1);
    CU_ASSERT(c.n_group == 1 && c.topk_group == 1 && c.first_k_dense_replace == 1);
    CU_ASSERT(c.routed_scaling_factor == 2.827 && c.vocab_size == 163840);
    CU_ASSERT(c.moe_intermediate_size == 2048 && c.intermediate_size == 18432);
    CU_ASSERT(c.rope_theta == 50000.0 && c.yarn_factor == 32.0 && c.yarn_beta_fast == 1.0 &&
              c.yarn_beta_slow == 1.0 && c.max_position_embeddings == 131072);
    ok.preset = "tiny-kimi";
    CU_ASSERT_EQUAL_FATAL(numla_synth_config_get(&ok, &c), NUMLA_STATUS_OK);
    CU_ASSERT(c.n_routed_experts == 48 && c.n_group == 1 && c.num_experts_per_tok == 8 &&
              c.routed_scaling_factor == 2.827 && !strcmp(c.model_type, "kimi_k2"));

    o.experts = 8; /* one expert per group: noaux_tc's top-2 group score is undefined */
    CU_ASSERT_EQUAL(numla_synth_config_get(&o, &c), NUMLA_STATUS_INVALID_ARG);
    o.experts = 12; /* not divisible into 8 groups */
    CU_ASSERT_EQUAL(numla_synth_config_get(&o, &c), NUMLA_STATUS_INVALID_ARG);
    o = (numla_synth_options){.preset = "tiny", .experts = 2, .dtype = NUMLA_DTYPE_BF16};
    CU_ASSERT_EQUAL(numla_synth_config_get(&o, &c), NUMLA_STATUS_INVALID_ARG); /* top-3 of 2 */
    o = (numla_synth_options){.preset = "huge", .dtype = NUMLA_DTYPE_BF16};
    CU_ASSERT_EQUAL(numla_synth_config_get(&o, &c), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT(strstr(numla_error_message(), "huge") != NULL);
    o = (numla_synth_options){.preset = "tiny", .dtype = NUMLA_DTYPE_F16};
    CU_ASSERT_EQUAL(numla_synth_config_get(&o, &c), NUMLA_STATUS_INVALID_ARG);
    o = (numla_synth_options){.preset = "tiny", .dtype = NUMLA_DTYPE_BF16, .out_dir = "/proc/no"};
    CU_ASSERT_EQUAL(numla_synth_write(&o, NULL), NUMLA_STATUS_IO);
}

/* Same seed -> same bytes (also on one thread); different seed -> different weights, same
 * config. */
static void test_determinism(void)
{
    const char *a = sy_dir("det-a"), *b = sy_dir("det-b"), *c = sy_dir("det-c");
    CU_ASSERT_EQUAL_FATAL(sy_write("tiny", a, 77, NUMLA_DTYPE_BF16, 0), NUMLA_STATUS_OK);
    int threads = omp_get_max_threads();
    omp_set_num_threads(threads > 1 ? 1 : 3);
    numla_status s = sy_write("tiny", b, 77, NUMLA_DTYPE_BF16, 0);
    omp_set_num_threads(threads);
    CU_ASSERT_EQUAL_FATAL(s, NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(sy_write("tiny", c, 78, NUMLA_DTYPE_BF16, 0), NUMLA_STATUS_OK);
    CU_ASSERT(sy_same_file(a, b, "model.safetensors"));
    /* Chunks of the writer that cut rows anywhere (1 KB + 12 bytes) give the same bytes. */
    const char *d = sy_dir("det-d");
    numla_safetensors_testing_set_chunk_bytes(1036);
    s = sy_write("tiny", d, 77, NUMLA_DTYPE_BF16, 0);
    numla_safetensors_testing_set_chunk_bytes(0);
    CU_ASSERT_EQUAL_FATAL(s, NUMLA_STATUS_OK);
    CU_ASSERT(sy_same_file(a, d, "model.safetensors"));
    CU_ASSERT(sy_same_file(a, b, "config.json"));
    CU_ASSERT(sy_same_file(a, c, "config.json"));
    CU_ASSERT(!sy_same_file(a, c, "model.safetensors"));
    /* Not just somewhere: every weight tensor differs between seeds. */
    numla_safetensors_model *ma = NULL, *mc = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(a, &ma), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(c, &mc), NUMLA_STATUS_OK);
    int same = 0;
    for (int64_t i = 0; i < numla_safetensors_count(ma); i++) {
        const numla_safetensors_tensor *ta = numla_safetensors_at(ma, i), *tc = numla_safetensors_find(mc, ta->name);
        CU_ASSERT_FATAL(tc != NULL && tc->nbytes == ta->nbytes);
        same += memcmp(ta->data, tc->data, ta->nbytes) == 0;
    }
    NUMLA_ASSERT_MSG(same == 0, "%d tensors identical across seeds", same);
    /* ...and tensors of one model differ from each other (per-name streams). */
    const numla_safetensors_tensor *g = numla_safetensors_find(ma, "model.layers.1.mlp.experts.0.gate_proj.weight");
    const numla_safetensors_tensor *u = numla_safetensors_find(ma, "model.layers.1.mlp.experts.0.up_proj.weight");
    CU_ASSERT_FATAL(g && u);
    CU_ASSERT(memcmp(g->data, u->data, g->nbytes) != 0);
    numla_safetensors_close(&ma);
    numla_safetensors_close(&mc);
}

/* A small shard limit splits tiny into several files + index with the same tensor bytes; a
 * later single-file write into the same directory removes the stale index. */
static void test_sharded(void)
{
    const char *one = sy_dir("det-a"); /* seed 77, from test_determinism */
    const char *dir = sy_dir("sharded");
    CU_ASSERT_EQUAL_FATAL(sy_write("tiny", dir, 77, NUMLA_DTYPE_BF16, 200000), NUMLA_STATUS_OK);
    size_t n = 0;
    unsigned char *idx = sy_read(dir, "model.safetensors.index.json", &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(idx);
    free(idx);
    numla_safetensors_model *ms = NULL, *m1 = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(dir, &ms), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(one, &m1), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_safetensors_count(ms), numla_safetensors_count(m1));
    int diff = 0, files = 0;
    const char *last = "";
    for (int64_t i = 0; i < numla_safetensors_count(ms); i++) {
        const numla_safetensors_tensor *t = numla_safetensors_at(ms, i), *r = numla_safetensors_find(m1, t->name);
        diff += !r || r->nbytes != t->nbytes || memcmp(r->data, t->data, t->nbytes) != 0;
        if (strcmp(last, t->file)) {
            files++;
            last = t->file;
        }
        CU_ASSERT(strstr(t->file, "-of-0000") != NULL);
    }
    CU_ASSERT_EQUAL(diff, 0);
    NUMLA_ASSERT_MSG(files >= 4, "only %d shards", files); /* ~850 KB in 200 KB shards */
    numla_safetensors_close(&ms);
    numla_safetensors_close(&m1);

    CU_ASSERT_EQUAL_FATAL(sy_write("tiny", dir, 77, NUMLA_DTYPE_BF16, 0), NUMLA_STATUS_OK);
    CU_ASSERT(sy_read(dir, "model.safetensors.index.json", &n) == NULL);
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(dir, &ms), NUMLA_STATUS_OK);
    CU_ASSERT(strstr(numla_safetensors_at(ms, 0)->file, "/model.safetensors") != NULL);
    numla_safetensors_close(&ms);
}

static double sy_get(const numla_safetensors_tensor *t, size_t i)
{
    float v = 0;
    if (t->dtype == NUMLA_DTYPE_F32)
        memcpy(&v, (const char *)t->data + 4 * i, 4);
    else {
        uint16_t h;
        memcpy(&h, (const char *)t->data + 2 * i, 2);
        v = numla_bf16_to_f32(h);
    }
    return v;
}

static void sy_stats(const numla_safetensors_tensor *t, double *mean, double *sd, double *lo, double *hi)
{
    size_t n = t->nbytes / numla_dtype_size(t->dtype);
    double s = 0, s2 = 0;
    *lo = INFINITY;
    *hi = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        double v = sy_get(t, i);
        s += v;
        s2 += v * v;
        *lo = fmin(*lo, v);
        *hi = fmax(*hi, v);
    }
    *mean = s / (double)n;
    *sd = sqrt(fmax(s2 / (double)n - *mean * *mean, 0));
}

/* Weights ~ N(0, 1/fan_in), embeddings ~ N(0, 1), norms near 1, bias small; and the output
 * layer decisive: on RMS-normalised inputs, top-1/top-2 logit margins well above 1e-2. */
static void test_weight_statistics(void)
{
    numla_safetensors_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(sy_dir("tiny-f32"), &m), NUMLA_STATUS_OK);
    double mean, sd, lo, hi;
    static const struct {
        const char *name;
        double sd;
    } lin[] = {
        {"model.embed_tokens.weight", 1.0},
        {"model.layers.0.self_attn.q_proj.weight", 0.125},          /* 1/sqrt(64) */
        {"model.layers.0.self_attn.kv_b_proj.weight", 0.125},       /* 1/sqrt(kv_lora 64) */
        {"model.layers.0.self_attn.o_proj.weight", 0.0721687836},   /* 1/sqrt(192) */
        {"model.layers.0.mlp.down_proj.weight", 0.0721687836},      /* 1/sqrt(192) */
        {"model.layers.2.mlp.experts.9.down_proj.weight", 0.1767767}, /* 1/sqrt(32) */
    };
    for (size_t i = 0; i < sizeof lin / sizeof lin[0]; i++) {
        const numla_safetensors_tensor *t = numla_safetensors_find(m, lin[i].name);
        CU_ASSERT_FATAL(t != NULL);
        sy_stats(t, &mean, &sd, &lo, &hi);
        NUMLA_ASSERT_MSG(fabs(sd / lin[i].sd - 1) < 0.08 && fabs(mean) < 0.1 * lin[i].sd,
                         "%s: mean %g sd %g, want sd %g", lin[i].name, mean, sd, lin[i].sd);
    }
    /* The bf16 model is the f32 one rounded. */
    numla_safetensors_model *mb = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(sy_dir("tiny"), &mb), NUMLA_STATUS_OK);
    int mismatched = 0;
    for (int64_t i = 0; i < numla_safetensors_count(m); i++) {
        const numla_safetensors_tensor *tf = numla_safetensors_at(m, i), *tb = numla_safetensors_find(mb, tf->name);
        CU_ASSERT_FATAL(tb != NULL && tb->nbytes * 2 == tf->nbytes);
        for (size_t k = 0; k < tb->nbytes / 2; k++) {
            float f;
            uint16_t h;
            memcpy(&f, (const char *)tf->data + 4 * k, 4);
            memcpy(&h, (const char *)tb->data + 2 * k, 2);
            mismatched += numla_f32_to_bf16(f) != h;
        }
    }
    CU_ASSERT_EQUAL(mismatched, 0);
    numla_safetensors_close(&mb);

    const numla_safetensors_tensor *nw = numla_safetensors_find(m, "model.layers.1.input_layernorm.weight");
    CU_ASSERT_FATAL(nw != NULL);
    sy_stats(nw, &mean, &sd, &lo, &hi);
    NUMLA_ASSERT_MSG(lo >= 0.9 && hi <= 1.1 && sd > 0.01, "norm in [%g, %g]", lo, hi);

    /* Margins of lm_head · (norm ⊙ x) over random x with unit RMS. */
    const numla_safetensors_tensor *lm = numla_safetensors_find(m, "lm_head.weight");
    const numla_safetensors_tensor *fn = numla_safetensors_find(m, "model.norm.weight");
    CU_ASSERT_FATAL(lm && fn);
    enum { TRIALS = 1000, D = 64, V = 512 };
    static double margins[TRIALS];
    numla_test_rng rng = {99};
    int small = 0;
    for (int k = 0; k < TRIALS; k++) {
        double x[D], ss = 0;
        for (int j = 0; j < D; j++) {
            x[j] = numla_test_rng_normal(&rng);
            ss += x[j] * x[j];
        }
        for (int j = 0; j < D; j++)
            x[j] *= sy_get(fn, (size_t)j) / sqrt(ss / D);
        double best = -INFINITY, second = -INFINITY;
        for (int v = 0; v < V; v++) {
            double z = 0;
            for (int j = 0; j < D; j++)
                z += sy_get(lm, (size_t)v * D + (size_t)j) * x[j];
            if (z > best) {
                second = best;
                best = z;
            } else if (z > second)
                second = z;
        }
        margins[k] = best - second;
        small += margins[k] < 1e-2;
    }
    double sum = 0;
    for (int k = 0; k < TRIALS; k++)
        sum += margins[k];
    if (getenv("NUMLA_TEST_VERBOSE"))
        fprintf(stderr, "\n    lm_head margins: mean %.3f, %d of %d below 1e-2\n", sum / TRIALS,
                small, TRIALS);
    NUMLA_ASSERT_MSG(sum / TRIALS > 3.0 && small <= TRIALS / 200,
                     "lm_head margins: mean %.3f, %d of %d below 1e-2", sum / TRIALS, small,
                     TRIALS);
    numla_safetensors_close(&m);

    /* The V3 router bias is fp32 and small. */
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(sy_dir("tiny-v3"), &m), NUMLA_STATUS_OK);
    const numla_safetensors_tensor *b = numla_safetensors_find(m, "model.layers.1.mlp.gate.e_score_correction_bias");
    CU_ASSERT_FATAL(b != NULL);
    CU_ASSERT_EQUAL(b->dtype, NUMLA_DTYPE_F32);
    sy_stats(b, &mean, &sd, &lo, &hi);
    CU_ASSERT(lo >= -0.1 && hi <= 0.1 && sd > 0.01);
    numla_safetensors_close(&m);
}

/* --weights fp8|int8: the quantized synthetic model is, tensor for tensor and byte for byte,
 * the bf16 one of the same seed put through numla quantize (itself checked against the
 * published layout and an independent reference in test_quantize); config.json carries the
 * quantization_config. */
static void sy_check_quantized(const char *preset, numla_qckpt_format f, int keep)
{
    char tag[64];
    snprintf(tag, sizeof tag, "q-%s-%d-%d", preset, (int)f, keep);
    const char *dq = sy_dir(tag);
    char db[600], dqq[600];
    snprintf(db, sizeof db, "%s-bf16", dq);
    snprintf(dqq, sizeof dqq, "%s-quantized", dq);
    numla_synth_options o = {.preset = preset, .out_dir = dq, .seed = 9, .dtype = NUMLA_DTYPE_BF16,
                             .weights = f, .keep_lm_head = keep, .shard_bytes = 150000};
    CU_ASSERT_EQUAL_FATAL(numla_synth_write(&o, NULL), NUMLA_STATUS_OK);
    o.out_dir = db;
    o.weights = NUMLA_QCKPT_NONE;
    CU_ASSERT_EQUAL_FATAL(numla_synth_write(&o, NULL), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_qckpt_quantize_model(db, dqq, f, keep, 0, NULL), NUMLA_STATUS_OK);
    numla_safetensors_model *a = NULL, *b = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(dq, &a), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(dqq, &b), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_safetensors_count(a), numla_safetensors_count(b));
    int bad = 0, nq = 0;
    for (int64_t i = 0; i < numla_safetensors_count(b); i++) {
        const numla_safetensors_tensor *t = numla_safetensors_at(b, i);
        const numla_safetensors_tensor *u = numla_safetensors_find(a, t->name);
        nq += t->dtype == NUMLA_DTYPE_F8_E4M3 || t->dtype == NUMLA_DTYPE_I8;
        if ((!u || u->dtype != t->dtype || u->nbytes != t->nbytes ||
             memcmp(u->data, t->data, t->nbytes)) && bad++ < 5)
            fprintf(stderr, "\n    %s: %s differs from numla quantize's\n", tag, t->name);
    }
    NUMLA_ASSERT_MSG(bad == 0 && nq > 5, "%s: %d differences, %d quantized", tag, bad, nq);
    char ip[700];
    snprintf(ip, sizeof ip, "%s/model.safetensors.index.json", dq);
    json_t *idx = json_load_file(ip, 0, NULL); /* sharded: the index names every tensor */
    CU_ASSERT(idx && (int64_t)json_object_size(json_object_get(idx, "weight_map")) ==
                         numla_safetensors_count(a));
    json_decref(idx);
    numla_safetensors_close(&a);
    numla_safetensors_close(&b);
    char p[700];
    snprintf(p, sizeof p, "%s/config.json", dq);
    json_t *c1 = json_load_file(p, 0, NULL);
    snprintf(p, sizeof p, "%s/config.json", dqq);
    json_t *c2 = json_load_file(p, 0, NULL);
    CU_ASSERT(c1 && c2 && json_equal(c1, c2));
    json_t *qc = c1 ? json_object_get(c1, "quantization_config") : NULL;
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(qc, "quant_method")),
                           f == NUMLA_QCKPT_FP8 ? "fp8" : "w8a8_int8");
    json_decref(c1);
    json_decref(c2);
}

static void test_quantized_weights(void)
{
    sy_check_quantized("tiny-v3", NUMLA_QCKPT_FP8, 0);
    sy_check_quantized("tiny", NUMLA_QCKPT_INT8, 0);
    sy_check_quantized("tiny-v3", NUMLA_QCKPT_INT8, 1);
}

/* The multi-token-prediction layer (docs/speculative.md): written as layer N of an N-layer model
 * with the tensors of DeepSeek-V3's layer 61, its embed_tokens and shared_head.head copies of
 * the main ones, num_nextn_predict_layers 1; the presets that ship it write it by default. */
static int sy_same_tensor(const numla_safetensors_model *m, const char *a, const char *b)
{
    const numla_safetensors_tensor *x = numla_safetensors_find(m, a);
    const numla_safetensors_tensor *y = numla_safetensors_find(m, b);
    return x && y && x->nbytes == y->nbytes && x->dtype == y->dtype &&
           !memcmp(x->data, y->data, x->nbytes);
}

static void test_mtp_layer(void)
{
    const char *dir = sy_dir("tiny-v3-mtp");
    numla_synth_options o = {.preset = "tiny-v3", .out_dir = dir, .seed = 5,
                             .dtype = NUMLA_DTYPE_BF16, .layers = 3, .experts = 8, .mtp = 1};
    CU_ASSERT_EQUAL_FATAL(numla_synth_write(&o, NULL), NUMLA_STATUS_OK);
    static sy_list l;
    sy_expected_mtp(&l, 3, 1, 4, 48, 8, 1, 1, 1);
    sy_check_tensors(dir, &l, NUMLA_DTYPE_BF16);
    json_t *c = sy_config(dir);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_EQUAL(sy_int(c, "num_nextn_predict_layers"), 1);
    CU_ASSERT_EQUAL(sy_int(c, "num_hidden_layers"), 3);
    json_decref(c);
    numla_safetensors_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(dir, &m), NUMLA_STATUS_OK);
    CU_ASSERT(sy_same_tensor(m, "model.embed_tokens.weight", "model.layers.3.embed_tokens.weight"));
    CU_ASSERT(sy_same_tensor(m, "lm_head.weight", "model.layers.3.shared_head.head.weight"));
    /* the MTP layer's own weights are not another layer's */
    CU_ASSERT(!sy_same_tensor(m, "model.layers.2.mlp.gate.weight", "model.layers.3.mlp.gate.weight"));
    CU_ASSERT(!sy_same_tensor(m, "model.layers.3.enorm.weight", "model.layers.3.hnorm.weight"));
    numla_safetensors_close(&m);

    /* the main model's bytes do not change with the layer */
    const char *plain = sy_dir("tiny-v3-plain");
    o.out_dir = plain;
    o.mtp = 0; /* tiny-v3 ships none */
    CU_ASSERT_EQUAL_FATAL(numla_synth_write(&o, NULL), NUMLA_STATUS_OK);
    c = sy_config(plain);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_EQUAL(sy_int(c, "num_nextn_predict_layers"), 0);
    json_decref(c);
    numla_safetensors_model *a = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(plain, &a), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(dir, &m), NUMLA_STATUS_OK);
    const numla_safetensors_tensor *x = numla_safetensors_find(a, "model.layers.2.mlp.experts.7.up_proj.weight");
    const numla_safetensors_tensor *y = numla_safetensors_find(m, "model.layers.2.mlp.experts.7.up_proj.weight");
    CU_ASSERT(x && y && x->nbytes == y->nbytes && !memcmp(x->data, y->data, x->nbytes));
    numla_safetensors_close(&a);
    numla_safetensors_close(&m);

    /* a DSA model's MTP layer has its own indexer; the layer lists keep the main layers' */
    const char *glm = sy_dir("tiny-glm5-mtp");
    numla_synth_options og = {.preset = "tiny-glm5", .out_dir = glm, .seed = 2,
                              .dtype = NUMLA_DTYPE_BF16, .mtp = 1};
    CU_ASSERT_EQUAL_FATAL(numla_synth_write(&og, NULL), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(glm, &m), NUMLA_STATUS_OK);
    CU_ASSERT_PTR_NOT_NULL(numla_safetensors_find(m, "model.layers.5.self_attn.indexer.wq_b.weight"));
    CU_ASSERT_PTR_NOT_NULL(numla_safetensors_find(m, "model.layers.5.mlp.experts.15.down_proj.weight"));
    CU_ASSERT_PTR_NOT_NULL(numla_safetensors_find(m, "model.layers.5.eh_proj.weight"));
    CU_ASSERT_PTR_NULL(numla_safetensors_find(m, "model.layers.6.input_layernorm.weight"));
    numla_safetensors_close(&m);
    c = sy_config(glm);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(c, "indexer_types")), 5);
    CU_ASSERT_EQUAL(sy_int(c, "num_nextn_predict_layers"), 1);
    json_decref(c);

    /* the presets: DeepSeek-V3 / V3.2 and GLM-5 ship the layer, Kimi K2 does not */
    numla_synth_config cf;
    static const struct { const char *preset; int mtp; } ships[] = {
        {"v3", 1}, {"v32", 1}, {"glm5", 1}, {"kimi-k2", 0}, {"v2-lite", 0}, {"tiny-v3", 0}};
    for (size_t i = 0; i < sizeof ships / sizeof ships[0]; i++) {
        numla_synth_options op = {.preset = ships[i].preset, .dtype = NUMLA_DTYPE_BF16};
        CU_ASSERT_EQUAL_FATAL(numla_synth_config_get(&op, &cf), NUMLA_STATUS_OK);
        NUMLA_ASSERT_MSG(cf.num_nextn_predict_layers == ships[i].mtp, "%s: %d", ships[i].preset,
                         (int)cf.num_nextn_predict_layers);
        op.mtp = -1;
        CU_ASSERT_EQUAL_FATAL(numla_synth_config_get(&op, &cf), NUMLA_STATUS_OK);
        CU_ASSERT_EQUAL(cf.num_nextn_predict_layers, 0);
    }
    numla_synth_options bad = {.preset = "tiny-v3", .dtype = NUMLA_DTYPE_BF16, .mtp = 2};
    CU_ASSERT_EQUAL(numla_synth_config_get(&bad, &cf), NUMLA_STATUS_INVALID_ARG);
}

/* DeepSeek-V4's MTP layer (docs/design.md §5.9): `mtp.0.*` in DeepSeek's names, a sliding block
 * (compress_ratios one entry longer, 0), the main tensors' bytes unchanged, none by default; bf16
 * and the published FP8 + FP4 form both load with numla's V4 loader and draft finite logits. */
static void test_mtp_layer_v4(void)
{
    const char *dir = sy_dir("tiny-v4-mtp"), *plain = sy_dir("tiny-v4-plain");
    numla_synth_options o = {.preset = "tiny-v4", .out_dir = dir, .seed = 3,
                             .dtype = NUMLA_DTYPE_BF16, .mtp = 1};
    CU_ASSERT_EQUAL_FATAL(numla_synth_write(&o, NULL), NUMLA_STATUS_OK);
    numla_synth_options op = o;
    op.out_dir = plain;
    op.mtp = 0;
    CU_ASSERT_EQUAL_FATAL(numla_synth_write(&op, NULL), NUMLA_STATUS_OK);
    json_t *c = sy_config(dir);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_EQUAL(sy_int(c, "num_nextn_predict_layers"), 1);
    json_t *cr = json_object_get(c, "compress_ratios");
    CU_ASSERT_EQUAL(json_array_size(cr), (size_t)sy_int(c, "num_hidden_layers") + 1);
    CU_ASSERT_EQUAL(json_integer_value(json_array_get(cr, json_array_size(cr) - 1)), 0);
    json_decref(c);
    c = sy_config(plain);
    CU_ASSERT_EQUAL(sy_int(c, "num_nextn_predict_layers"), 0);
    json_decref(c);
    numla_safetensors_model *m = NULL, *a = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(dir, &m), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(plain, &a), NUMLA_STATUS_OK);
    static const char *const names[] = {"mtp.0.e_proj.weight", "mtp.0.h_proj.weight",
        "mtp.0.enorm.weight", "mtp.0.hnorm.weight", "mtp.0.norm.weight", "mtp.0.hc_head_fn",
        "mtp.0.hc_head_base", "mtp.0.hc_head_scale", "mtp.0.attn.wq_a.weight",
        "mtp.0.hc_attn_fn", "mtp.0.ffn.gate.bias", "mtp.0.ffn.experts.7.w2.weight"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        NUMLA_ASSERT_MSG(numla_safetensors_find(m, names[i]) != NULL, "%s", names[i]);
    CU_ASSERT_PTR_NULL(numla_safetensors_find(m, "mtp.0.attn.compressor.wkv.weight"));
    CU_ASSERT_PTR_NULL(numla_safetensors_find(m, "mtp.0.ffn.gate.tid2eid"));
    CU_ASSERT_PTR_NULL(numla_safetensors_find(m, "mtp.0.embed.weight"));
    for (int64_t i = 0; i < numla_safetensors_count(a); i++) { /* the main tensors: same bytes */
        const numla_safetensors_tensor *x = numla_safetensors_at(a, i);
        const numla_safetensors_tensor *y = numla_safetensors_find(m, x->name);
        NUMLA_ASSERT_MSG(y && x->nbytes == y->nbytes && !memcmp(x->data, y->data, x->nbytes),
                         "%s", x->name);
    }
    int64_t extra = 0; /* the rest: mtp.0.*, 21 block tensors of a sliding layer with a shared
                        * expert, 3 per routed expert, 8 of its own */
    for (int64_t i = 0; i < numla_safetensors_count(m); i++) {
        const char *nm = numla_safetensors_at(m, i)->name;
        if (!numla_safetensors_find(a, nm)) {
            extra++;
            NUMLA_ASSERT_MSG(!strncmp(nm, "mtp.0.", 6), "%s", nm);
        }
    }
    CU_ASSERT_EQUAL(extra, 21 + 3 * 8 + 8);
    numla_safetensors_close(&a);
    numla_safetensors_close(&m);
    numla_synth_config cf;
    op = (numla_synth_options){.preset = "v4-flash", .dtype = NUMLA_DTYPE_BF16};
    CU_ASSERT_EQUAL_FATAL(numla_synth_config_get(&op, &cf), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(cf.num_nextn_predict_layers, 0);
    /* both forms load with the layer and draft */
    const char *q = sy_dir("tiny-v4-mtp-fp8");
    op = o;
    op.out_dir = q;
    op.weights = NUMLA_QCKPT_FP8;
    CU_ASSERT_EQUAL_FATAL(numla_synth_write(&op, NULL), NUMLA_STATUS_OK);
    const char *dirs[2] = {dir, q};
    for (int k = 0; k < 2; k++) {
        numla_model_config cfg;
        CU_ASSERT_EQUAL_FATAL(numla_model_config_load(dirs[k], &cfg), NUMLA_STATUS_OK);
        CU_ASSERT_EQUAL_FATAL(numla_v4_config_enable_mtp(&cfg), NUMLA_STATUS_OK);
        CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(dirs[k], &m), NUMLA_STATUS_OK);
        if (k)
            CU_ASSERT_PTR_NOT_NULL(numla_safetensors_find(m, "mtp.0.e_proj.scale"));
        numla_v4_model *vm = NULL;
        numla_status ls = numla_v4_model_load(&cfg, m, numla_isa_best(), &vm);
        NUMLA_ASSERT_MSG(ls == NUMLA_STATUS_OK, "%s: %s", dirs[k], numla_error_message());
        numla_safetensors_close(&m);
        if (!vm)
            continue;
        numla_v4_seq *s = NULL;
        const int32_t tk[3] = {3, 4, 5}, src[2] = {0, 1};
        const int64_t V = cfg.vocab_size;
        float *lg = malloc(sizeof(float) * 2 * (size_t)V);
        CU_ASSERT_EQUAL_FATAL(numla_v4_seq_create(vm, &s), NUMLA_STATUS_OK);
        CU_ASSERT_EQUAL(numla_v4_forward_rows(vm, 1, &s, (const int32_t *[]){tk}, (int64_t[]){3},
                                              0, NULL, NULL), NUMLA_STATUS_OK);
        CU_ASSERT_EQUAL(numla_v4_mtp_forward(vm, 1, &s, (const int32_t *[]){tk + 1},
                                             (const int32_t *[]){src}, (int64_t[]){2}, -1, NULL,
                                             lg), NUMLA_STATUS_OK);
        int finite = 1;
        for (int64_t i = 0; i < 2 * V; i++)
            finite &= isfinite(lg[i]) != 0;
        CU_ASSERT(finite);
        free(lg);
        numla_v4_seq_destroy(&s);
        numla_v4_model_destroy(&vm);
    }
}

NUMLA_TEST_SUITE(synth, NULL, NULL, NUMLA_TEST(test_mtp_layer), NUMLA_TEST(test_mtp_layer_v4), NUMLA_TEST(test_quantized_weights), NUMLA_TEST(test_tiny_tensors), NUMLA_TEST(test_tiny_config),
                 NUMLA_TEST(test_presets_and_validation), NUMLA_TEST(test_determinism),
                 NUMLA_TEST(test_sharded), NUMLA_TEST(test_weight_statistics))
