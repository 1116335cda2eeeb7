/* Tests for numla quantize (engine/synth/quantized_checkpoint.h): synthetic bf16 checkpoints (tiny: V2 with
 * q_proj; tiny-v3: q_lora, noaux_tc router bias) rewritten as FP8 and INT8. The layout is
 * checked against the published one spelled out here (which tensors carry scales, their names,
 * shapes and dtypes, config.json's quantization_config, the index over several shards, copied
 * side files), and every dequantized weight against its bf16 original within the format's
 * rounding error, with scales recomputed in double. */
#define _GNU_SOURCE
#include "test_util.h"

#include "engine/formats/safetensors.h"
#include "engine/synth/quantized_checkpoint.h"
#include "engine/synth/synth.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *qz_dir(const char *name)
{
    static char buf[8][512];
    static int k;
    char *p = buf[k++ & 7];
    snprintf(p, 512, "%s/quantize-%s", numla_test_tmpdir(), name);
    return p;
}

/* The published rule, independently: attention and MLP projections, never embeddings, norms,
 * router; lm_head only for int8 without keep. */
static int qz_expect_quant(const char *name, int int8, int keep)
{
    static const char *const suf[] = {".q_proj.weight", ".q_a_proj.weight", ".q_b_proj.weight",
                                      ".kv_a_proj_with_mqa.weight", ".kv_b_proj.weight",
                                      ".o_proj.weight", ".gate_proj.weight", ".up_proj.weight",
                                      ".down_proj.weight"};
    if (!strcmp(name, "lm_head.weight"))
        return int8 && !keep;
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof suf / sizeof suf[0]; i++) {
        size_t s = strlen(suf[i]);
        if (n > s && !strcmp(name + n - s, suf[i]))
            return 1;
    }
    return 0;
}

static double qz_e4m3(unsigned c)
{
    unsigned e = (c >> 3) & 15, m = c & 7;
    double v = (c & 0x7f) == 0x7f ? NAN : e == 0 ? ldexp((double)m, -9) : ldexp(8.0 + m, (int)e - 10);
    return (c & 0x80) ? -v : v;
}

static double qz_src(const numla_safetensors_tensor *t, size_t i)
{
    return numla_load_f32(t->data, t->dtype, i);
}

/* Check one quantized weight; returns the number of problems. */
static int qz_check_weight(const numla_safetensors_model *q, const numla_safetensors_tensor *src,
                           int int8)
{
    const int64_t n = src->shape[0], k = src->shape[1];
    const numla_safetensors_tensor *w = numla_safetensors_find(q, src->name);
    char sn[300];
    snprintf(sn, sizeof sn, "%s%s", src->name, int8 ? "_scale" : "_scale_inv");
    const numla_safetensors_tensor *s = numla_safetensors_find(q, sn);
    int64_t sr = int8 ? n : (n + 127) / 128, sc = int8 ? 1 : (k + 127) / 128;
    if (!w || !s || w->dtype != (int8 ? NUMLA_DTYPE_I8 : NUMLA_DTYPE_F8_E4M3) || w->ndim != 2 ||
        w->shape[0] != n || w->shape[1] != k || s->dtype != NUMLA_DTYPE_F32 || s->ndim != 2 ||
        s->shape[0] != sr || s->shape[1] != sc) {
        fprintf(stderr, "\n    %s: weight/scale missing or of the wrong dtype/shape\n", src->name);
        return 1;
    }
    float *scale = malloc(s->nbytes); /* mapped tensors are packed: not aligned */
    memcpy(scale, s->data, s->nbytes);
    int bad = 0;
    for (int64_t r = 0; r < n; r++)
        for (int64_t c = 0; c < k; c++) {
            double x = qz_src(src, (size_t)(r * k + c)), sv, deq, tol;
            if (int8) {
                sv = scale[r];
                deq = ((const int8_t *)w->data)[r * k + c] * sv;
                tol = 0.5 * sv + fabs(x) * 0x1p-22; /* + the fp32 quotient's rounding */
            } else {
                sv = scale[(r / 128) * sc + c / 128];
                deq = qz_e4m3(((const uint8_t *)w->data)[r * k + c]) * sv;
                tol = fmax(fabs(x) * 0x1p-4, 0x1p-10 * sv) + fabs(x) * 0x1p-22;
            }
            if (!(fabs(deq - x) <= tol * (1 + 1e-6)) && bad++ < 3)
                fprintf(stderr, "\n    %s (%lld,%lld): %g dequantizes to %g\n", src->name,
                        (long long)r, (long long)c, x, deq);
        }
    /* Scales: amax / 448 (per block) or / 127 (per row), in double. */
    for (int64_t i = 0; i < sr; i++)
        for (int64_t j = 0; j < sc; j++) {
            double amax = 0;
            for (int64_t r = int8 ? i : i * 128; r < n && r < (int8 ? i + 1 : i * 128 + 128); r++)
                for (int64_t c = int8 ? 0 : j * 128; c < k && c < (int8 ? k : j * 128 + 128); c++)
                    amax = fmax(amax, fabs(qz_src(src, (size_t)(r * k + c))));
            float want = amax > 0 ? (float)(amax / (int8 ? 127.0 : 448.0)) : 1.0f;
            if (scale[i * sc + j] != want && bad++ < 3)
                fprintf(stderr, "\n    %s: scale (%lld,%lld) %g, want %g\n", src->name,
                        (long long)i, (long long)j, (double)scale[i * sc + j], (double)want);
        }
    free(scale);
    return bad;
}

static void qz_run(const char *preset, int int8, int keep)
{
    char tag[64];
    snprintf(tag, sizeof tag, "%s-%s%s", preset, int8 ? "int8" : "fp8", keep ? "-keep" : "");
    const char *src = qz_dir(tag);
    char out[600];
    snprintf(out, sizeof out, "%s-out", src);
    numla_synth_options o = {.preset = preset, .out_dir = src, .seed = 5, .dtype = NUMLA_DTYPE_BF16};
    CU_ASSERT_EQUAL_FATAL(numla_synth_write(&o, NULL), NUMLA_STATUS_OK);
    char p[700];
    snprintf(p, sizeof p, "%s/tokenizer.json", src);
    FILE *f = fopen(p, "w");
    fputs("{\"model\": {\"type\": \"BPE\"}}\n", f);
    fclose(f);

    numla_error_clear();
    numla_status s = numla_qckpt_quantize_model(src, out, int8 ? NUMLA_QCKPT_INT8 : NUMLA_QCKPT_FP8,
                                                keep, 200000, NULL);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OK, "%s: %s", tag, numla_error_message());
    if (s != NUMLA_STATUS_OK)
        return;

    numla_safetensors_model *a = NULL, *q = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(src, &a), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(out, &q), NUMLA_STATUS_OK);
    int64_t nq = 0;
    int bad = 0;
    for (int64_t i = 0; i < numla_safetensors_count(a); i++) {
        const numla_safetensors_tensor *t = numla_safetensors_at(a, i);
        if (qz_expect_quant(t->name, int8, keep)) {
            nq++;
            bad += qz_check_weight(q, t, int8);
            continue;
        }
        const numla_safetensors_tensor *u = numla_safetensors_find(q, t->name);
        if (!u || u->dtype != t->dtype || u->nbytes != t->nbytes || u->ndim != t->ndim ||
            memcmp(u->data, t->data, t->nbytes)) {
            if (bad++ < 5)
                fprintf(stderr, "\n    %s: not copied as it was\n", t->name);
        }
    }
    NUMLA_ASSERT_MSG(bad == 0, "%s: %d problems", tag, bad);
    CU_ASSERT(nq > 5);
    CU_ASSERT_EQUAL(numla_safetensors_count(q), numla_safetensors_count(a) + nq);
    const numla_safetensors_tensor *lm = numla_safetensors_find(q, "lm_head.weight");
    CU_ASSERT(lm && lm->dtype == (int8 && !keep ? NUMLA_DTYPE_I8 : NUMLA_DTYPE_BF16));
    const numla_safetensors_tensor *g = numla_safetensors_find(q, "model.layers.1.mlp.gate.weight");
    CU_ASSERT(g && g->dtype == NUMLA_DTYPE_BF16);
    numla_safetensors_close(&a);
    numla_safetensors_close(&q);

    /* config.json: the source's fields plus the format's quantization_config. */
    snprintf(p, sizeof p, "%s/config.json", out);
    json_t *cfg = json_load_file(p, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    json_t *qc = json_object_get(cfg, "quantization_config");
    json_t *want = int8 ? json_pack("{s:s, s:s}", "quant_method", "w8a8_int8",
                                    "activation_scheme", "dynamic")
                        : json_pack("{s:s, s:s, s:[i,i], s:s}", "quant_method", "fp8", "fmt",
                                    "e4m3", "weight_block_size", 128, 128, "activation_scheme",
                                    "dynamic");
    NUMLA_ASSERT_MSG(qc && json_equal(qc, want), "%s: quantization_config differs", tag);
    json_decref(want);
    snprintf(p, sizeof p, "%s/config.json", src);
    json_t *orig = json_load_file(p, 0, NULL);
    json_object_del(cfg, "quantization_config");
    CU_ASSERT(orig && json_equal(orig, cfg));
    json_decref(orig);
    json_decref(cfg);
    /* Several shards, all named by the index; side files copied. */
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", out);
    json_t *idx = json_load_file(p, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(idx);
    const char *s0 = json_string_value(json_object_get(json_object_get(idx, "weight_map"),
                                                       "model.embed_tokens.weight"));
    const char *s1 = json_string_value(json_object_get(json_object_get(idx, "weight_map"),
                                                       "lm_head.weight"));
    CU_ASSERT(s0 && s1 && strcmp(s0, s1) != 0);
    json_decref(idx);
    snprintf(p, sizeof p, "%s/tokenizer.json", out);
    struct stat st, st0;
    CU_ASSERT(stat(p, &st) == 0);
    snprintf(p, sizeof p, "%s/tokenizer.json", src);
    CU_ASSERT(stat(p, &st0) == 0 && st.st_size == st0.st_size && st0.st_size > 10);

    /* An already quantized checkpoint is refused. */
    char again[700];
    snprintf(again, sizeof again, "%s-again", out);
    CU_ASSERT_EQUAL(numla_qckpt_quantize_model(out, again, NUMLA_QCKPT_INT8, 0, 0, NULL),
                    NUMLA_STATUS_UNSUPPORTED);
}

static void test_quantize_tiny_fp8(void) { qz_run("tiny", 0, 0); }
static void test_quantize_tiny_v3_fp8(void) { qz_run("tiny-v3", 0, 0); }
static void test_quantize_tiny_int8(void) { qz_run("tiny", 1, 0); }
static void test_quantize_tiny_v3_int8_keep_lm_head(void) { qz_run("tiny-v3", 1, 1); }

/* A non-finite weight is an error naming the tensor; nothing names a half-written model. */
static void test_quantize_bad_weight(void)
{
    const char *dir = qz_dir("nan"), *out = qz_dir("nan-out");
    mkdir(dir, 0755);
    char p[700];
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "w");
    fputs("{\"model_type\": \"deepseek_v2\"}\n", f);
    fclose(f);
    float v[2 * 3] = {1, 2, 3, 4, NAN, 6};
    const int64_t shape[2] = {2, 3};
    numla_safetensors_writer *w = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_writer_create(&w), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_safetensors_writer_add(w, "model.layers.0.self_attn.o_proj.weight",
                                                 NUMLA_DTYPE_F32, 2, shape, v), 0);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_writer_write(w, p), NUMLA_STATUS_OK);
    numla_safetensors_writer_destroy(&w);
    numla_error_clear();
    CU_ASSERT_EQUAL(numla_qckpt_quantize_model(dir, out, NUMLA_QCKPT_FP8, 0, 0, NULL),
                    NUMLA_STATUS_INVALID_ARG);
    NUMLA_ASSERT_MSG(strstr(numla_error_message(), "o_proj.weight") != NULL, "%s",
                     numla_error_message());
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", out);
    struct stat st;
    CU_ASSERT(stat(p, &st) != 0);
    CU_ASSERT_EQUAL(numla_qckpt_quantize_model(dir, dir, NUMLA_QCKPT_FP8, 0, 0, NULL),
                    NUMLA_STATUS_INVALID_ARG);
}

NUMLA_TEST_SUITE(quantize, NULL, NULL, NUMLA_TEST(test_quantize_tiny_fp8),
                 NUMLA_TEST(test_quantize_tiny_v3_fp8), NUMLA_TEST(test_quantize_tiny_int8),
                 NUMLA_TEST(test_quantize_tiny_v3_int8_keep_lm_head),
                 NUMLA_TEST(test_quantize_bad_weight))
