/* Tests for engine/synth's DeepSeek-V4 presets (tiny-v4, v4-flash, v4-pro): tiny-v4 written in
 * f32 has exactly the tensor names, shapes and dtypes of the checkpoint transformers 5.25 wrote
 * for tests/golden/v4 (DeepSeek's names: scripts/make_v4_golden.py), and its config.json the
 * golden's values; in bf16 the tensors transformers keeps in fp32 stay F32; the hash tables hold
 * k distinct experts per token; the big presets carry the published numbers and layer pattern;
 * bad requests are refused. */
#define _GNU_SOURCE
#include "test_util.h"

#include "common/dtype.h"
#include "engine/formats/safetensors.h"
#include "engine/synth/synth.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *sv_dir(const char *name)
{
    static char buf[4][512];
    static int k;
    char *p = buf[k++ & 3];
    snprintf(p, 512, "%s/synth-v4-%s", numla_test_tmpdir(), name);
    return p;
}

static numla_status sv_write(const char *preset, const char *dir, numla_dtype dt, int layers)
{
    numla_synth_options o = {.preset = preset, .out_dir = dir, .seed = 5, .dtype = dt,
                             .layers = layers};
    return numla_synth_write(&o, NULL);
}

/* Kept in fp32 by transformers (and so written F32 in a bf16 model). */
static int sv_f32_kept(const char *name)
{
    return !strncmp(name, "hc_head_", 8) || strstr(name, ".hc_attn_") ||
           strstr(name, ".hc_ffn_") || strstr(name, "attn_sink") || strstr(name, ".ape") ||
           strstr(name, "gate.bias");
}

/* Every tensor of the golden checkpoint is in `dir` with its shape (and dtype when `same_dtype`),
 * and `dir` has no other. */
static void sv_against_golden(const char *dir, int same_dtype)
{
    numla_safetensors_model *m = NULL, *g = NULL;
    const numla_status sm = numla_safetensors_open(dir, &m); /* once: the macro reads its test twice */
    NUMLA_ASSERT_MSG(sm == NUMLA_STATUS_OK, "open %s: %s", dir, numla_error_message());
    const char *gd = numla_test_source_path("tests/golden/v4/model_fp32");
    const numla_status sg = numla_safetensors_open(gd, &g);
    NUMLA_ASSERT_MSG(sg == NUMLA_STATUS_OK, "open %s: %s", gd, numla_error_message());
    if (!m || !g) {
        numla_safetensors_close(&m);
        numla_safetensors_close(&g);
        return;
    }
    CU_ASSERT_EQUAL(numla_safetensors_count(m), numla_safetensors_count(g));
    int bad = 0;
    for (int64_t i = 0; i < numla_safetensors_count(g); i++) {
        const numla_safetensors_tensor *want = numla_safetensors_at(g, i);
        const numla_safetensors_tensor *t = numla_safetensors_find(m, want->name);
        int ok = t && t->ndim == want->ndim;
        for (int32_t k = 0; ok && k < t->ndim; k++)
            ok = t->shape[k] == want->shape[k];
        numla_dtype wd = want->dtype;
        if (!same_dtype && wd == NUMLA_DTYPE_F32 && !sv_f32_kept(want->name))
            wd = NUMLA_DTYPE_BF16;
        ok = ok && t->dtype == wd;
        if (!ok && bad++ < 5)
            fprintf(stderr, "\n    %s: %s %s\n", dir, want->name,
                    t ? "has another shape or dtype" : "missing");
    }
    NUMLA_ASSERT_MSG(bad == 0, "%s: %d tensors differ from the golden checkpoint", dir, bad);

    /* hash tables: k distinct expert ids in [0, E) per token id */
    const numla_safetensors_tensor *h = numla_safetensors_find(m, "layers.1.ffn.gate.tid2eid");
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    const int64_t *ids = h->data;
    int64_t hist[8] = {0};
    for (int64_t r = 0; r < h->shape[0]; r++) {
        int64_t a = ids[2 * r], b = ids[2 * r + 1];
        NUMLA_ASSERT_MSG(a >= 0 && a < 8 && b >= 0 && b < 8 && a != b, "tid2eid row %lld: %lld %lld",
                         (long long)r, (long long)a, (long long)b);
        if (a >= 0 && a < 8)
            hist[a]++;
    }
    for (int e = 0; e < 8; e++) /* 96 rows: every expert picked first a few times */
        NUMLA_ASSERT_MSG(hist[e] >= 2, "expert %d first in %lld rows", e, (long long)hist[e]);
    CU_ASSERT_PTR_NULL(numla_safetensors_find(m, "layers.1.ffn.gate.bias"));
    CU_ASSERT_PTR_NOT_NULL(numla_safetensors_find(m, "layers.2.ffn.gate.bias"));

    /* norms near 1, sinks small (not the linears' N(0, 1/fan_in)) */
    const numla_safetensors_tensor *n = numla_safetensors_find(m, "layers.2.attn.compressor.norm.weight");
    CU_ASSERT_PTR_NOT_NULL_FATAL(n);
    for (int64_t j = 0; j < n->shape[0]; j++) {
        double x = numla_load_f32(n->data, n->dtype, (size_t)j);
        CU_ASSERT(x >= 0.89 && x <= 1.11);
    }
    numla_safetensors_close(&m);
    numla_safetensors_close(&g);
}

static void test_v4_tensors(void)
{
    const char *f = sv_dir("tiny-f32");
    CU_ASSERT_EQUAL_FATAL(sv_write("tiny-v4", f, NUMLA_DTYPE_F32, 0), NUMLA_STATUS_OK);
    sv_against_golden(f, 1);
    const char *b = sv_dir("tiny-bf16");
    CU_ASSERT_EQUAL_FATAL(sv_write("tiny-v4", b, NUMLA_DTYPE_BF16, 0), NUMLA_STATUS_OK);
    sv_against_golden(b, 0);
}

static json_t *sv_config(const char *dir)
{
    char path[700];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t err;
    json_t *j = json_load_file(path, 0, &err);
    NUMLA_ASSERT_MSG(j != NULL, "%s: %s", path, err.text);
    return j;
}

/* a and b equal, numbers compared by value (16 and 16.0 alike) */
static int sv_same(const json_t *a, const json_t *b)
{
    if (json_is_number(a) && json_is_number(b))
        return json_number_value(a) == json_number_value(b);
    if (json_is_array(a) && json_is_array(b)) {
        if (json_array_size(a) != json_array_size(b))
            return 0;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!sv_same(json_array_get(a, i), json_array_get(b, i)))
                return 0;
        return 1;
    }
    if (json_is_object(a) && json_is_object(b)) {
        const char *k;
        const json_t *v;
        if (json_object_size(a) != json_object_size(b))
            return 0;
        json_object_foreach((json_t *)a, k, v) if (!sv_same(v, json_object_get(b, k))) return 0;
        return 1;
    }
    return json_equal((json_t *)a, (json_t *)b);
}

/* tiny-v4's config.json has every value of the golden's (DeepSeek's spelling), except the
 * golden's smaller swiglu_limit (3, so the clamp shows in its logits) and its dtype. */
static void test_v4_config(void)
{
    json_t *c = sv_config(sv_dir("tiny-f32"));
    json_t *g = sv_config(numla_test_source_path("tests/golden/v4/model_fp32"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    const char *k;
    json_t *v;
    int n = 0;
    json_object_foreach(g, k, v) {
        if (!strcmp(k, "swiglu_limit"))
            continue;
        n++;
        NUMLA_ASSERT_MSG(sv_same(v, json_object_get(c, k)), "config.json field %s differs from "
                         "the golden's", k);
    }
    CU_ASSERT(n >= 40);
    CU_ASSERT_DOUBLE_EQUAL(json_number_value(json_object_get(c, "swiglu_limit")), 10.0, 0);
    json_decref(c);
    json_decref(g);
}

/* The published V4-Flash / V4-Pro config.json numbers (docs/synth.md gives the sources). */
static void test_v4_presets(void)
{
    numla_synth_config c;
    numla_synth_options o = {.preset = "v4-flash", .dtype = NUMLA_DTYPE_BF16};
    CU_ASSERT_EQUAL_FATAL(numla_synth_config_get(&o, &c), NUMLA_STATUS_OK);
    CU_ASSERT(!strcmp(c.model_type, "deepseek_v4") &&
              !strcmp(c.architecture, "DeepseekV4ForCausalLM"));
    CU_ASSERT(c.vocab_size == 129280 && c.hidden_size == 4096 && c.num_hidden_layers == 43 &&
              c.num_attention_heads == 64 && c.head_dim == 512 && c.qk_rope_head_dim == 64);
    CU_ASSERT(c.q_lora_rank == 1024 && c.o_groups == 8 && c.o_lora_rank == 1024 &&
              c.sliding_window == 128 && c.index_n_heads == 64 && c.index_head_dim == 128 &&
              c.index_topk == 512);
    CU_ASSERT(c.n_routed_experts == 256 && c.n_shared_experts == 1 && c.num_experts_per_tok == 6 &&
              c.moe_intermediate_size == 2048 && c.routed_scaling_factor == 1.5 &&
              c.num_hash_layers == 3 && !strcmp(c.scoring_func, "sqrtsoftplus"));
    CU_ASSERT(c.hc_mult == 4 && c.hc_sinkhorn_iters == 20 && c.hc_eps == 1e-6 &&
              c.swiglu_limit == 10.0 && c.rope_theta == 10000.0 &&
              c.compress_rope_theta == 160000.0 && c.yarn_factor == 16.0 &&
              c.yarn_original_max_position_embeddings == 65536 &&
              c.max_position_embeddings == 1048576);
    /* compress_ratios [0, 0, 4, 128, ..., 4]: 2 sliding, 21 CSA, 20 HCA */
    int n0 = 0, n4 = 0, n128 = 0;
    for (int i = 0; i < 43; i++) {
        int r = numla_synth_v4_ratio(&c, i);
        n0 += r == 0;
        n4 += r == 4;
        n128 += r == 128;
    }
    CU_ASSERT(numla_synth_v4_ratio(&c, 0) == 0 && numla_synth_v4_ratio(&c, 1) == 0 &&
              numla_synth_v4_ratio(&c, 2) == 4 && numla_synth_v4_ratio(&c, 3) == 128 &&
              numla_synth_v4_ratio(&c, 42) == 4);
    CU_ASSERT(n0 == 2 && n4 == 21 && n128 == 20);

    o.preset = "v4-pro";
    CU_ASSERT_EQUAL_FATAL(numla_synth_config_get(&o, &c), NUMLA_STATUS_OK);
    CU_ASSERT(c.hidden_size == 7168 && c.num_hidden_layers == 61 && c.num_attention_heads == 128 &&
              c.head_dim == 512 && c.q_lora_rank == 1536 && c.o_groups == 16 &&
              c.o_lora_rank == 1024 && c.index_topk == 1024 && c.n_routed_experts == 384 &&
              c.moe_intermediate_size == 3072 && c.num_experts_per_tok == 6 &&
              c.routed_scaling_factor == 2.5 && c.num_hash_layers == 3 && c.vocab_size == 129280);
    /* compress_ratios [128, 128, 4, 128, ..., 4]: 30 CSA, 31 HCA */
    n0 = n4 = n128 = 0;
    for (int i = 0; i < 61; i++) {
        int r = numla_synth_v4_ratio(&c, i);
        n0 += r == 0;
        n4 += r == 4;
        n128 += r == 128;
    }
    CU_ASSERT(numla_synth_v4_ratio(&c, 0) == 128 && numla_synth_v4_ratio(&c, 1) == 128 &&
              numla_synth_v4_ratio(&c, 2) == 4 && numla_synth_v4_ratio(&c, 60) == 4);
    CU_ASSERT(n0 == 0 && n4 == 30 && n128 == 31);

    /* --layers keeps the pattern's start */
    o.preset = "v4-flash";
    o.layers = 5;
    CU_ASSERT_EQUAL_FATAL(numla_synth_config_get(&o, &c), NUMLA_STATUS_OK);
    CU_ASSERT(c.num_hidden_layers == 5 && numla_synth_v4_ratio(&c, 4) == 4);

    /* refused: top-6 of 4 experts, int8 weights */
    o.experts = 4;
    CU_ASSERT_EQUAL(numla_synth_config_get(&o, &c), NUMLA_STATUS_INVALID_ARG);
    o.experts = 0;
    o.weights = NUMLA_QCKPT_INT8;
    CU_ASSERT_EQUAL(numla_synth_config_get(&o, &c), NUMLA_STATUS_INVALID_ARG);
    o.weights = NUMLA_QCKPT_FP8;
    CU_ASSERT_EQUAL(numla_synth_config_get(&o, &c), NUMLA_STATUS_OK);
}

/* --layers on the toy: the written compress_ratios and the tensors follow it */
static void test_v4_layers(void)
{
    const char *d = sv_dir("tiny-l6");
    CU_ASSERT_EQUAL_FATAL(sv_write("tiny-v4", d, NUMLA_DTYPE_BF16, 6), NUMLA_STATUS_OK);
    json_t *c = sv_config(d);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    static const int want[6] = {0, 4, 128, 4, 128, 4};
    const json_t *cr = json_object_get(c, "compress_ratios");
    CU_ASSERT_EQUAL_FATAL(json_array_size(cr), 6);
    for (int i = 0; i < 6; i++)
        CU_ASSERT_EQUAL(json_integer_value(json_array_get(cr, (size_t)i)), want[i]);
    json_decref(c);
    numla_safetensors_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(d, &m), NUMLA_STATUS_OK);
    CU_ASSERT_PTR_NOT_NULL(numla_safetensors_find(m, "layers.5.attn.indexer.wq_b.weight"));
    const numla_safetensors_tensor *a = numla_safetensors_find(m, "layers.4.attn.compressor.ape");
    CU_ASSERT(a && a->shape[0] == 128 && a->shape[1] == 64 && a->dtype == NUMLA_DTYPE_F32);
    CU_ASSERT_PTR_NULL(numla_safetensors_find(m, "layers.4.attn.indexer.wq_b.weight"));
    numla_safetensors_close(&m);
}

/* e2m1 code -> value, from the format (sign bit 3; 0, 0.5, 1, 1.5, 2, 3, 4, 6). */
static double sv_e2m1(int c)
{
    static const double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    return c & 8 ? -mag[c & 7] : mag[c & 7];
}

/* --weights fp8: the published FP8 + FP4 form. Its layout is tests/golden/v4/model_fp8's (which
 * transformers' own FP8 loader reads): every name, shape, and the codes' and scales' dtypes; the
 * quantization_config as published; the values, decoded here by the published formulas, within
 * half a code step of the bf16 model of the same seed, each scale the smallest power of two that
 * fits its block; shards name the scales in their index. */
static void test_v4_fp8(void)
{
    const char *q = sv_dir("tiny-fp8");
    numla_synth_options o = {.preset = "tiny-v4", .out_dir = q, .seed = 5, .dtype = NUMLA_DTYPE_BF16,
                             .weights = NUMLA_QCKPT_FP8, .shard_bytes = 200000};
    CU_ASSERT_EQUAL_FATAL(numla_synth_write(&o, NULL), NUMLA_STATUS_OK);
    numla_safetensors_model *m = NULL, *g = NULL, *b = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(q, &m), NUMLA_STATUS_OK); /* through the index */
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(numla_test_source_path("tests/golden/v4/model_fp8"), &g),
                          NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(sv_dir("tiny-bf16"), &b), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_safetensors_count(m), numla_safetensors_count(g));
    int bad = 0, n8 = 0, n4 = 0;
    for (int64_t i = 0; i < numla_safetensors_count(g); i++) {
        const numla_safetensors_tensor *want = numla_safetensors_at(g, i);
        const numla_safetensors_tensor *t = numla_safetensors_find(m, want->name);
        int ok = t && t->ndim == want->ndim;
        for (int32_t k = 0; ok && k < t->ndim; k++)
            ok = t->shape[k] == want->shape[k];
        const int coded = want->dtype == NUMLA_DTYPE_F8_E4M3 || want->dtype == NUMLA_DTYPE_I8 ||
                          want->dtype == NUMLA_DTYPE_F8_E8M0;
        ok = ok && (coded || want->dtype == NUMLA_DTYPE_I64 ? t->dtype == want->dtype
                                                            : t->dtype == NUMLA_DTYPE_BF16 || t->dtype == NUMLA_DTYPE_F32);
        if (!ok && bad++ < 5)
            fprintf(stderr, "\n    %s: %s\n", want->name, t ? "another shape or dtype" : "missing");
        if (!ok || (t->dtype != NUMLA_DTYPE_F8_E4M3 && t->dtype != NUMLA_DTYPE_I8))
            continue;
        /* decode by the published formulas against the bf16 model's values */
        char sn[160];
        snprintf(sn, sizeof sn, "%.*s.scale", (int)strlen(t->name) - 7, t->name);
        const numla_safetensors_tensor *sc = numla_safetensors_find(m, sn), *src = numla_safetensors_find(b, t->name);
        CU_ASSERT_FATAL(sc && src && sc->dtype == NUMLA_DTYPE_F8_E8M0);
        const int fp4 = t->dtype == NUMLA_DTYPE_I8;
        n4 += fp4;
        n8 += !fp4;
        const int64_t n = src->shape[0], k = src->shape[1];
        const uint8_t *codes = t->data, *s = sc->data;
        double worst = 0, amax_ratio_lo = 1e30, amax_ratio_hi = 0;
        for (int64_t bi = 0; bi < sc->shape[0]; bi++)
            for (int64_t bj = 0; bj < sc->shape[1]; bj++) {
                const double scale = ldexp(1.0, s[bi * sc->shape[1] + bj] - 127);
                const int64_t rs = fp4 ? 1 : 128, cs = fp4 ? 32 : 128;
                double amax = 0;
                for (int64_t r = bi * rs; r < (bi + 1) * rs && r < n; r++)
                    for (int64_t c = bj * cs; c < (bj + 1) * cs && c < k; c++) {
                        const double w = numla_load_f32(src->data, src->dtype, (size_t)(r * k + c));
                        double v;
                        if (fp4) {
                            const uint8_t byte = codes[r * (k / 2) + c / 2];
                            v = sv_e2m1(c % 2 ? byte >> 4 : byte & 15) * scale;
                        } else {
                            v = numla_e4m3_to_f32(codes[r * k + c]) * scale;
                        }
                        /* half a step: e2m1's steps are at most 2 (of 6) at this scale; e4m3's
                         * 2^-3 relative, or 2^-9 absolute below 2^-6 */
                        const double half = fp4 ? (fabs(w) / scale > 4 ? 1.0 : fabs(w) / scale > 2 ? 0.5 : 0.25) * scale
                                                : fmax(fabs(w) * 0x1p-4, 0x1p-10 * scale);
                        worst = fmax(worst, fabs(v - w) / half);
                        amax = fmax(amax, fabs(w));
                    }
                const double r = amax / scale;
                amax_ratio_lo = fmin(amax_ratio_lo, r);
                amax_ratio_hi = fmax(amax_ratio_hi, r);
            }
        const double top = fp4 ? 6.0 : 448.0;
        NUMLA_ASSERT_MSG(worst <= 1.0 + 1e-6 && amax_ratio_hi <= top && amax_ratio_lo > top / 2,
                         "%s: error %.3g half-steps, amax / scale in [%g, %g]", t->name, worst, amax_ratio_lo,
                         amax_ratio_hi);
    }
    NUMLA_ASSERT_MSG(bad == 0, "%d tensors differ from the golden's layout", bad);
    CU_ASSERT(n8 == 34 && n4 == 96); /* as tests/golden/v4/model_fp8/expected.json counts them */
    numla_safetensors_close(&m);
    numla_safetensors_close(&g);
    numla_safetensors_close(&b);

    json_t *c = sv_config(q), *gc = sv_config(numla_test_source_path("tests/golden/v4/model_fp8"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_PTR_NOT_NULL_FATAL(gc);
    CU_ASSERT(sv_same(json_object_get(c, "quantization_config"), json_object_get(gc, "quantization_config")));
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(c, "expert_dtype")), "fp4");
    json_decref(c);
    json_decref(gc);
}

NUMLA_TEST_SUITE(synth_v4, NULL, NULL, NUMLA_TEST(test_v4_tensors), NUMLA_TEST(test_v4_config),
                 NUMLA_TEST(test_v4_presets), NUMLA_TEST(test_v4_layers), NUMLA_TEST(test_v4_fp8))
