/* Tests for engine/synth's sparse-attention presets (tiny-v32, tiny-glm5, v32, glm5;
 * docs/sparse_attention.md): the tensor list with the indexer of every "full" layer and none in
 * the "shared" ones (expected names and shapes spelled out here from the preset numbers), the
 * dtypes (GLM-5's weights_proj F32), the indexer's LayerNorm values, config.json read back both
 * with jansson and through the engine's own DSA parser, the published numbers of the big
 * presets, and --weights fp8 quantizing wq_b and wk but not weights_proj or k_norm. */
#define _GNU_SOURCE
#include "test_util.h"

#include "common/dtype.h"
#include "engine/formats/safetensors.h"
#include "engine/model/config_dsa.h"
#include "engine/synth/synth.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *sd_dir(const char *name)
{
    static char buf[8][512];
    static int k;
    char *p = buf[k++ & 7];
    snprintf(p, 512, "%s/synth-dsa-%s", numla_test_tmpdir(), name);
    return p;
}

typedef struct sd_expect {
    char name[112];
    int64_t shape[2]; /* shape[1] == 0: a vector */
} sd_expect;

typedef struct sd_list {
    sd_expect e[1024];
    int n;
} sd_list;

static void sd_add(sd_list *l, int64_t r, int64_t c, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void sd_add(sd_list *l, int64_t r, int64_t c, const char *fmt, ...)
{
    sd_expect *e = &l->e[l->n++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->name, sizeof e->name, fmt, ap);
    va_end(ap);
    e->shape[0] = r;
    e->shape[1] = c;
}

/* The toys' shared numbers: hidden 64, 4 heads, q_lora 48, kv_lora 64, rope 16, nope 32,
 * dense 192, experts of 32, one shared expert, vocab 512, indexer 16 heads x 32. */
static void sd_expected(sd_list *l, int layers, int dense, int experts, int v, const int *full)
{
    const int d = 64, H = 4, ql = 48, kvl = 64, rope = 16, nope = 32, inter = 192, moe = 32;
    const int hi = 16, di = 32;
    l->n = 0;
    sd_add(l, 512, d, "model.embed_tokens.weight");
    for (int i = 0; i < layers; i++) {
        const char *p = "model.layers";
        sd_add(l, d, 0, "%s.%d.input_layernorm.weight", p, i);
        sd_add(l, d, 0, "%s.%d.post_attention_layernorm.weight", p, i);
        sd_add(l, ql, d, "%s.%d.self_attn.q_a_proj.weight", p, i);
        sd_add(l, ql, 0, "%s.%d.self_attn.q_a_layernorm.weight", p, i);
        sd_add(l, H * (nope + rope), ql, "%s.%d.self_attn.q_b_proj.weight", p, i);
        sd_add(l, kvl + rope, d, "%s.%d.self_attn.kv_a_proj_with_mqa.weight", p, i);
        sd_add(l, kvl, 0, "%s.%d.self_attn.kv_a_layernorm.weight", p, i);
        sd_add(l, H * (nope + v), kvl, "%s.%d.self_attn.kv_b_proj.weight", p, i);
        sd_add(l, d, H * v, "%s.%d.self_attn.o_proj.weight", p, i);
        if (full[i]) {
            sd_add(l, hi * di, ql, "%s.%d.self_attn.indexer.wq_b.weight", p, i);
            sd_add(l, di, d, "%s.%d.self_attn.indexer.wk.weight", p, i);
            sd_add(l, di, 0, "%s.%d.self_attn.indexer.k_norm.weight", p, i);
            sd_add(l, di, 0, "%s.%d.self_attn.indexer.k_norm.bias", p, i);
            sd_add(l, hi, d, "%s.%d.self_attn.indexer.weights_proj.weight", p, i);
        }
        if (i < dense) {
            sd_add(l, inter, d, "%s.%d.mlp.gate_proj.weight", p, i);
            sd_add(l, inter, d, "%s.%d.mlp.up_proj.weight", p, i);
            sd_add(l, d, inter, "%s.%d.mlp.down_proj.weight", p, i);
            continue;
        }
        sd_add(l, experts, d, "%s.%d.mlp.gate.weight", p, i);
        sd_add(l, experts, 0, "%s.%d.mlp.gate.e_score_correction_bias", p, i);
        for (int e = 0; e < experts; e++) {
            sd_add(l, moe, d, "%s.%d.mlp.experts.%d.gate_proj.weight", p, i, e);
            sd_add(l, moe, d, "%s.%d.mlp.experts.%d.up_proj.weight", p, i, e);
            sd_add(l, d, moe, "%s.%d.mlp.experts.%d.down_proj.weight", p, i, e);
        }
        sd_add(l, moe, d, "%s.%d.mlp.shared_experts.gate_proj.weight", p, i);
        sd_add(l, moe, d, "%s.%d.mlp.shared_experts.up_proj.weight", p, i);
        sd_add(l, d, moe, "%s.%d.mlp.shared_experts.down_proj.weight", p, i);
    }
    sd_add(l, d, 0, "model.norm.weight");
    sd_add(l, 512, d, "lm_head.weight");
}

/* The dtype a tensor of the toy must have in a `dt` model. */
static numla_dtype sd_want_dtype(const char *name, numla_dtype dt, int weights_proj_f32)
{
    if (strstr(name, "e_score_correction_bias"))
        return NUMLA_DTYPE_F32;
    if (weights_proj_f32 && strstr(name, "indexer.weights_proj"))
        return NUMLA_DTYPE_F32;
    return dt;
}

static void sd_check(const char *dir, const sd_list *l, numla_dtype dt, int weights_proj_f32)
{
    numla_safetensors_model *m = NULL;
    numla_status s = numla_safetensors_open(dir, &m);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OK, "open %s: %s", dir, numla_error_message());
    if (!m)
        return;
    NUMLA_ASSERT_MSG(numla_safetensors_count(m) == l->n, "%s: %lld tensors, expected %d", dir,
                     (long long)numla_safetensors_count(m), l->n);
    int bad = 0, nidx = 0;
    for (int i = 0; i < l->n; i++) {
        const numla_safetensors_tensor *t = NULL;
        int32_t nd = l->e[i].shape[1] ? 2 : 1;
        if (numla_safetensors_expect(m, l->e[i].name, nd, l->e[i].shape, &t) != NUMLA_STATUS_OK) {
            if (bad++ < 5)
                fprintf(stderr, "\n    %s\n", numla_error_message());
            continue;
        }
        numla_dtype want = sd_want_dtype(t->name, dt, weights_proj_f32);
        if (t->dtype != want && bad++ < 5)
            fprintf(stderr, "\n    %s has dtype %d, want %d\n", t->name, (int)t->dtype, (int)want);
        if (!strstr(t->name, "indexer.k_norm"))
            continue;
        /* the LayerNorm: weight near 1, bias small (not the linears' N(0, 1/fan_in)) */
        nidx++;
        int is_w = strstr(t->name, ".weight") != NULL;
        double lo = 1e9, hi = -1e9;
        for (int64_t j = 0; j < t->shape[0]; j++) {
            double x = numla_load_f32(t->data, t->dtype, (size_t)j);
            lo = x < lo ? x : lo;
            hi = x > hi ? x : hi;
        }
        int ok = is_w ? lo >= 0.89 && hi <= 1.11 : lo >= -0.11 && hi <= 0.11 && hi - lo > 0.01;
        if (!ok && bad++ < 5)
            fprintf(stderr, "\n    %s in [%g, %g]\n", t->name, lo, hi);
    }
    NUMLA_ASSERT_MSG(bad == 0, "%s: %d tensors missing or wrong", dir, bad);
    CU_ASSERT(nidx > 0);
    numla_safetensors_close(&m);
}

static numla_status sd_write(const char *preset, const char *dir, numla_dtype dt, int layers,
                             numla_qckpt_format weights)
{
    numla_synth_options o = {.preset = preset, .out_dir = dir, .seed = 3, .dtype = dt,
                             .layers = layers, .weights = weights};
    return numla_synth_write(&o, NULL);
}

static void test_dsa_tensors(void)
{
    static sd_list l;
    static const int all_full[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    /* GLM's rule with freq 2, offset 2: full where max(i - 1, 0) is even */
    static const int glm_full[8] = {1, 1, 0, 1, 0, 1, 0, 1};

    const char *v = sd_dir("tiny-v32");
    CU_ASSERT_EQUAL_FATAL(sd_write("tiny-v32", v, NUMLA_DTYPE_BF16, 0, NUMLA_QCKPT_NONE),
                          NUMLA_STATUS_OK);
    sd_expected(&l, 4, 1, 16, 32, all_full);
    sd_check(v, &l, NUMLA_DTYPE_BF16, 0);

    const char *g = sd_dir("tiny-glm5");
    CU_ASSERT_EQUAL_FATAL(sd_write("tiny-glm5", g, NUMLA_DTYPE_BF16, 0, NUMLA_QCKPT_NONE),
                          NUMLA_STATUS_OK);
    sd_expected(&l, 5, 2, 16, 48, glm_full);
    sd_check(g, &l, NUMLA_DTYPE_BF16, 1);

    /* f32 throughout; --layers recomputes which layers are shared */
    const char *g32 = sd_dir("tiny-glm5-f32-l8");
    CU_ASSERT_EQUAL_FATAL(sd_write("tiny-glm5", g32, NUMLA_DTYPE_F32, 8, NUMLA_QCKPT_NONE),
                          NUMLA_STATUS_OK);
    sd_expected(&l, 8, 2, 16, 48, glm_full);
    sd_check(g32, &l, NUMLA_DTYPE_F32, 1);
}

static json_t *sd_config(const char *dir, char **text)
{
    char path[700];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t err;
    json_t *j = json_load_file(path, 0, &err);
    NUMLA_ASSERT_MSG(j != NULL, "%s: %s", path, err.text);
    if (j && text)
        *text = json_dumps(j, 0);
    return j;
}

static int64_t sd_int(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    NUMLA_ASSERT_MSG(json_is_integer(v), "config field %s is not an integer", k);
    return json_integer_value(v);
}

static const char *sd_str(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    NUMLA_ASSERT_MSG(s != NULL, "config field %s is not a string", k);
    return s ? s : "";
}

/* list `k` of config `c` equals the n names of `want` */
static int sd_list_is(const json_t *c, const char *k, const char *const *want, size_t n)
{
    const json_t *a = json_object_get(c, k);
    if (!json_is_array(a) || json_array_size(a) != n)
        return 0;
    for (size_t i = 0; i < n; i++) {
        const char *s = json_string_value(json_array_get(a, i));
        if (!s || strcmp(s, want[i]))
            return 0;
    }
    return 1;
}

static void test_dsa_config(void)
{
    char *text = NULL;
    numla_dsa_config dsa;

    /* tiny-v32 (written by test_dsa_tensors) */
    json_t *c = sd_config(sd_dir("tiny-v32"), &text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_STRING_EQUAL(sd_str(c, "model_type"), "deepseek_v32");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_array_get(json_object_get(c, "architectures"), 0)),
                           "DeepseekV32ForCausalLM");
    CU_ASSERT_EQUAL(sd_int(c, "index_n_heads"), 16);
    CU_ASSERT_EQUAL(sd_int(c, "index_head_dim"), 32);
    CU_ASSERT_EQUAL(sd_int(c, "index_topk"), 16);
    CU_ASSERT_EQUAL(sd_int(c, "num_nextn_predict_layers"), 0);
    CU_ASSERT_PTR_NULL(json_object_get(c, "indexer_types")); /* V3.2 publishes none */
    CU_ASSERT_STRING_EQUAL(sd_str(json_object_get(c, "rope_scaling"), "type"), "yarn");
    CU_ASSERT_EQUAL_FATAL(numla_dsa_config_parse(text, "tiny-v32", &dsa), NUMLA_STATUS_OK);
    CU_ASSERT(dsa.enabled && dsa.index_n_heads == 16 && dsa.index_head_dim == 32 &&
              dsa.index_topk == 16 && dsa.num_layers == 4 && dsa.index_rope == NUMLA_DSA_ROPE_HALF);
    for (int i = 0; i < 4; i++)
        CU_ASSERT(dsa.indexer_full[i] == 1 && dsa.mlp_moe[i] == (i >= 1));
    free(text);
    json_decref(c);

    /* tiny-glm5: the lists written out, plain RoPE as transformers 5 spells it */
    c = sd_config(sd_dir("tiny-glm5"), &text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_STRING_EQUAL(sd_str(c, "model_type"), "glm_moe_dsa");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_array_get(json_object_get(c, "architectures"), 0)),
                           "GlmMoeDsaForCausalLM");
    static const char *const it[] = {"full", "full", "shared", "full", "shared"};
    static const char *const ml[] = {"dense", "dense", "sparse", "sparse", "sparse"};
    CU_ASSERT(sd_list_is(c, "indexer_types", it, 5));
    CU_ASSERT(sd_list_is(c, "mlp_layer_types", ml, 5));
    CU_ASSERT_EQUAL(sd_int(c, "v_head_dim"), 48);
    CU_ASSERT_EQUAL(sd_int(c, "n_group"), 1);
    const json_t *rp = json_object_get(c, "rope_parameters");
    CU_ASSERT_STRING_EQUAL(sd_str(rp, "rope_type"), "default");
    CU_ASSERT_DOUBLE_EQUAL(json_number_value(json_object_get(rp, "rope_theta")), 1e6, 0);
    CU_ASSERT_PTR_NULL(json_object_get(c, "rope_scaling"));
    CU_ASSERT_PTR_NULL(json_object_get(c, "rope_theta"));
    CU_ASSERT_EQUAL_FATAL(numla_dsa_config_parse(text, "tiny-glm5", &dsa), NUMLA_STATUS_OK);
    CU_ASSERT(dsa.enabled && dsa.index_n_heads == 16 && dsa.index_topk == 16 &&
              dsa.num_layers == 5 && dsa.index_rope == NUMLA_DSA_ROPE_INTERLEAVED);
    for (int i = 0; i < 5; i++)
        CU_ASSERT(dsa.indexer_full[i] == !strcmp(it[i], "full") &&
                  dsa.mlp_moe[i] == !strcmp(ml[i], "sparse"));
    free(text);
    json_decref(c);

    c = sd_config(sd_dir("tiny-glm5-f32-l8"), NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    static const char *const it8[] = {"full", "full", "shared", "full", "shared", "full",
                                      "shared", "full"};
    CU_ASSERT(sd_list_is(c, "indexer_types", it8, 8));
    json_decref(c);
}

/* The big presets against the published configs (DeepSeek-V3.2-Exp; zai-org/GLM-5 as
 * transformers 5.25's GlmMoeDsaConfig documents it). */
static void test_dsa_presets(void)
{
    numla_synth_config c;
    numla_synth_options o = {.preset = "v32", .dtype = NUMLA_DTYPE_BF16};
    CU_ASSERT_EQUAL_FATAL(numla_synth_config_get(&o, &c), NUMLA_STATUS_OK);
    CU_ASSERT(!strcmp(c.model_type, "deepseek_v32") &&
              !strcmp(c.architecture, "DeepseekV32ForCausalLM"));
    CU_ASSERT(c.hidden_size == 7168 && c.num_attention_heads == 128 && c.q_lora_rank == 1536);
    CU_ASSERT(c.num_hidden_layers == 61 && c.n_routed_experts == 256 && c.n_group == 8 &&
              c.topk_group == 4 && c.first_k_dense_replace == 3 && c.vocab_size == 129280);
    CU_ASSERT(c.index_n_heads == 64 && c.index_head_dim == 128 && c.index_topk == 2048);
    CU_ASSERT(c.yarn_factor == 40.0 && !c.index_weights_f32 && !c.layer_type_lists);

    o.preset = "glm5";
    CU_ASSERT_EQUAL_FATAL(numla_synth_config_get(&o, &c), NUMLA_STATUS_OK);
    CU_ASSERT(!strcmp(c.model_type, "glm_moe_dsa") &&
              !strcmp(c.architecture, "GlmMoeDsaForCausalLM"));
    CU_ASSERT(c.hidden_size == 6144 && c.num_hidden_layers == 78 && c.num_attention_heads == 64 &&
              c.num_key_value_heads == 64);
    CU_ASSERT(c.q_lora_rank == 2048 && c.kv_lora_rank == 512 && c.qk_nope_head_dim == 192 &&
              c.qk_rope_head_dim == 64 && c.v_head_dim == 256);
    CU_ASSERT(c.n_routed_experts == 256 && c.num_experts_per_tok == 8 && c.n_group == 1 &&
              c.topk_group == 1 && c.routed_scaling_factor == 2.5 && c.n_shared_experts == 1);
    CU_ASSERT(c.moe_intermediate_size == 2048 && c.intermediate_size == 12288 &&
              c.first_k_dense_replace == 3 && c.vocab_size == 154880);
    CU_ASSERT(c.index_n_heads == 32 && c.index_head_dim == 128 && c.index_topk == 2048);
    CU_ASSERT(c.rope_theta == 1e6 && c.yarn_factor == 0 && c.max_position_embeddings == 202752 &&
              c.rms_norm_eps == 1e-5);
    CU_ASSERT(c.index_weights_f32 && c.layer_type_lists && !strcmp(c.topk_method, "noaux_tc") &&
              !strcmp(c.scoring_func, "sigmoid"));

    o.preset = "tiny-v32";
    CU_ASSERT_EQUAL_FATAL(numla_synth_config_get(&o, &c), NUMLA_STATUS_OK);
    CU_ASSERT(c.index_n_heads == 16 && c.index_head_dim == 32 && c.index_topk == 16);
    o.preset = "tiny-glm5";
    o.experts = 3; /* top-4 of 3 */
    CU_ASSERT_EQUAL(numla_synth_config_get(&o, &c), NUMLA_STATUS_INVALID_ARG);
}

/* --weights fp8: wq_b and wk in F8_E4M3 with their 128x128 scale grid (DeepSeek-V3.2's FP8
 * file), weights_proj and k_norm untouched (GLM-5's weights_proj still F32). */
static void sd_check_fp8(const char *preset, int weights_proj_f32)
{
    char tag[64];
    snprintf(tag, sizeof tag, "fp8-%s", preset);
    const char *dir = sd_dir(tag);
    CU_ASSERT_EQUAL_FATAL(sd_write(preset, dir, NUMLA_DTYPE_BF16, 0, NUMLA_QCKPT_FP8),
                          NUMLA_STATUS_OK);
    numla_safetensors_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(dir, &m), NUMLA_STATUS_OK);
    int seen = 0, bad = 0;
    for (int64_t i = 0; i < numla_safetensors_count(m); i++) {
        const numla_safetensors_tensor *t = numla_safetensors_at(m, i);
        if (!strstr(t->name, ".indexer."))
            continue;
        seen++;
        numla_dtype want;
        if (strstr(t->name, "weight_scale_inv"))
            want = NUMLA_DTYPE_F32;
        else if (strstr(t->name, ".wq_b.") || strstr(t->name, ".wk."))
            want = NUMLA_DTYPE_F8_E4M3;
        else
            want = sd_want_dtype(t->name, NUMLA_DTYPE_BF16, weights_proj_f32);
        if (t->dtype != want && bad++ < 5)
            fprintf(stderr, "\n    %s: %s has dtype %d, want %d\n", tag, t->name, (int)t->dtype,
                    (int)want);
    }
    /* each full layer: wq_b + scale, wk + scale, k_norm weight and bias, weights_proj */
    const numla_safetensors_tensor *s = numla_safetensors_find(
        m, "model.layers.1.self_attn.indexer.wq_b.weight_scale_inv");
    CU_ASSERT(s && s->ndim == 2 && s->shape[0] == 4 && s->shape[1] == 1); /* 512 x 48 */
    CU_ASSERT_PTR_NOT_NULL(numla_safetensors_find(
        m, "model.layers.0.self_attn.indexer.wk.weight_scale_inv"));
    CU_ASSERT_PTR_NULL(numla_safetensors_find(
        m, "model.layers.0.self_attn.indexer.weights_proj.weight_scale_inv"));
    NUMLA_ASSERT_MSG(bad == 0 && seen > 0 && seen % 7 == 0, "%s: %d wrong of %d", tag, bad, seen);
    numla_safetensors_close(&m);
}

static void test_dsa_fp8(void)
{
    sd_check_fp8("tiny-v32", 0);
    sd_check_fp8("tiny-glm5", 1);
}

NUMLA_TEST_SUITE(synth_dsa, NULL, NULL, NUMLA_TEST(test_dsa_tensors), NUMLA_TEST(test_dsa_config),
                 NUMLA_TEST(test_dsa_presets), NUMLA_TEST(test_dsa_fp8))
