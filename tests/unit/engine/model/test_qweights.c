/* Tests for 8-bit weights in engine/model (weights.h): synthetic fp8 (DeepSeek block-scaled) and
 * int8 (w8a8_int8) checkpoints load and run; fp8 logits match numla running the same weights
 * dequantized to f32 (written next to them by this test) within fp32-class error; int8 (W8A8,
 * activations rounded per token) within its documented tolerance; quantizing at load
 * (numla_weights_options) gives bit-identical logits to `numla quantize` output (round trip);
 * every bad-input case is an error naming the tensor or field, with nothing loaded. */
#include <pthread.h>

#include "engine/engine_harness.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/synth/quantized_checkpoint.h"
#include "engine/synth/synth.h"
#include "kernels/quant.h"

static const int32_t QW_PROMPT[9] = {5, 17, 99, 3, 42, 150, 7, 88, 120};

static int qw_synth(const char *dir, const char *preset, numla_qckpt_format f)
{
    numla_synth_options o = {.preset = preset, .out_dir = dir, .seed = 11,
                             .dtype = NUMLA_DTYPE_F32, .weights = f};
    return numla_synth_write(&o, NULL) != NUMLA_STATUS_OK;
}

/* What a test does to one tensor of a copied checkpoint: data is an f32 (or raw) copy the
 * callback may edit; return 0 to drop the tensor. */
typedef int (*qw_edit_fn)(const char *name, numla_dtype *dt, int64_t *shape, void *data);

/* Copy src to dst: with dequant, 8-bit weights become f32 (code x scale), scales are dropped and
 * config.json loses its quantization_config; edit (may be NULL) changes tensors. */
static int qw_copy(const char *src, const char *dst, int dequant, qw_edit_fn edit,
                   const char *config_edit)
{
    numla_safetensors_model *st = NULL;
    numla_safetensors_writer *w = NULL;
    if (numla_safetensors_open(src, &st) || numla_safetensors_writer_create(&w))
        return -1;
    mkdir(dst, 0755);
    int rc = 0;
    for (int64_t i = 0; i < numla_safetensors_count(st) && !rc; i++) {
        const numla_safetensors_tensor *t = numla_safetensors_at(st, i);
        size_t nl = strlen(t->name);
        int is_scale = (nl > 10 && !strcmp(t->name + nl - 10, "_scale_inv")) ||
                       (nl > 6 && !strcmp(t->name + nl - 6, "_scale"));
        if (dequant && is_scale)
            continue;
        int64_t shape[2] = {t->shape[0], t->ndim > 1 ? t->shape[1] : 1};
        int64_t cnt = t->ndim == 1 ? shape[0] : shape[0] * shape[1];
        numla_dtype dt = t->dtype;
        void *buf = malloc((size_t)cnt * 4 + 8);
        if (dequant && (dt == NUMLA_DTYPE_F8_E4M3 || dt == NUMLA_DTYPE_I8)) {
            char sn[300];
            snprintf(sn, sizeof sn, "%s%s", t->name,
                     dt == NUMLA_DTYPE_F8_E4M3 ? "_scale_inv" : "_scale");
            const numla_safetensors_tensor *s = numla_safetensors_find(st, sn);
            float *sc = malloc(s->nbytes);
            memcpy(sc, s->data, s->nbytes);
            if (dt == NUMLA_DTYPE_F8_E4M3)
                numla_dequant_fp8_block(shape[0], shape[1], t->data, sc, buf);
            else
                numla_dequant_int8_rows(shape[0], shape[1], t->data, sc, buf);
            free(sc);
            dt = NUMLA_DTYPE_F32;
        } else {
            memcpy(buf, t->data, t->nbytes);
        }
        int keep = edit ? edit(t->name, &dt, shape, buf) : 1;
        if (keep)
            rc = numla_safetensors_writer_add(w, t->name, dt, t->ndim, shape, buf) != 0;
        free(buf);
    }
    char path[1200];
    snprintf(path, sizeof path, "%s/model.safetensors", dst);
    if (!rc)
        rc = numla_safetensors_writer_write(w, path) != 0;
    numla_safetensors_writer_destroy(&w);
    numla_safetensors_close(&st);
    /* config.json */
    snprintf(path, sizeof path, "%s/config.json", src);
    json_t *cfg = json_load_file(path, 0, NULL);
    if (!cfg)
        return -1;
    if (dequant)
        json_object_del(cfg, "quantization_config");
    if (config_edit) {
        json_t *q = json_loads(config_edit, JSON_DECODE_ANY, NULL);
        json_object_set_new(cfg, "quantization_config", q);
    }
    snprintf(path, sizeof path, "%s/config.json", dst);
    rc |= json_dump_file(cfg, path, JSON_INDENT(1)) != 0;
    json_decref(cfg);
    return rc;
}

/* Logits (9 + 2 rows, vocab) of the prompt's prefill and two decode steps, f32 KV cache. */
static int qw_logits(const char *dir, const numla_weights_options *wo, numla_isa isa, float *out,
                     int64_t *vocab)
{
    eng e;
    memset(&e, 0, sizeof e);
    numla_model_options mo = eng_model_options(isa);
    if (numla_model_config_load(dir, &e.cfg) || numla_safetensors_open(dir, &e.st) ||
        numla_weights_load_ex(&e.cfg, e.st, 0, 1, isa, wo, &e.w) ||
        numla_model_create(e.w, &mo, &e.m) ||
        numla_kv_cache_create((int32_t)e.cfg.num_hidden_layers, (int32_t)e.cfg.kv_lora_rank,
                              (int32_t)e.cfg.qk_rope_head_dim, 4, 64, NUMLA_DTYPE_F32, &e.kv)) {
        fprintf(stderr, "\n    open %s failed: %s\n", dir, numla_error_message());
        eng_close(&e);
        return -1;
    }
    const int64_t V = e.cfg.vocab_size;
    *vocab = V;
    numla_kv_seq s = {0};
    const int32_t *tok[1] = {QW_PROMPT};
    int n[1] = {9};
    int rc = eng_step(&e, 1, &s, tok, n, out);
    for (int j = 0; j < 2 && !rc; j++) {
        const int32_t *t1[1] = {QW_PROMPT + j};
        int n1[1] = {1};
        rc = eng_step(&e, 1, &s, t1, n1, out + (9 + j) * V);
    }
    numla_kv_seq_release(e.kv, &s);
    eng_close(&e);
    return rc;
}

enum { QW_ROWS = 11, QW_MAXV = 1024 };

static double qw_max_abs(const float *a, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i]));
    return m;
}

/* Quantized checkpoint vs the same weights dequantized to f32; rel: tolerance relative to
 * max(1, max |logit|). Returns the worst relative error. */
static double qw_vs_dequant(const char *preset, numla_qckpt_format f, numla_isa isa, double rel)
{
    char q[1024], d[1024];
    const char *fn = f == NUMLA_QCKPT_FP8 ? "fp8" : "int8";
    snprintf(q, sizeof q, "%s/qw_%s_%s", numla_test_tmpdir(), preset, fn);
    snprintf(d, sizeof d, "%s/qw_%s_%s_deq", numla_test_tmpdir(), preset, fn);
    CU_ASSERT_EQUAL_FATAL(qw_synth(q, preset, f), 0);
    CU_ASSERT_EQUAL_FATAL(qw_copy(q, d, 1, NULL, NULL), 0);
    float *a = malloc(sizeof(float) * QW_ROWS * QW_MAXV), *b = malloc(sizeof(float) * QW_ROWS * QW_MAXV);
    int64_t V = 0;
    numla_weights_options wo = numla_weights_options_default();
    CU_ASSERT_EQUAL_FATAL(qw_logits(q, &wo, isa, a, &V), 0);
    CU_ASSERT_EQUAL_FATAL(qw_logits(d, &wo, isa, b, &V), 0);
    double err = 0, mx = qw_max_abs(b, (size_t)(QW_ROWS * V));
    for (int64_t i = 0; i < QW_ROWS * V; i++)
        err = fmax(err, fabs((double)a[i] - (double)b[i]));
    err /= fmax(1.0, mx);
    NUMLA_ASSERT_MSG(err < rel, "%s %s isa %s: logits differ from the dequantized model by %.3g "
                     "relative (tolerance %.3g)", preset, fn, numla_isa_name(isa), err, rel);
    if (getenv("NUMLA_TEST_VERBOSE"))
        fprintf(stderr, "\n    %s %s %s: rel err %.3g (|logit| %.3g)", preset, fn,
                numla_isa_name(isa), err, mx);
    free(a);
    free(b);
    return err;
}

/* fp8 weights, fp32 activations: exact products summed in fp32, so fp32-class against the
 * dequantized weights (the f32 model's own summation order differs: 1e-4 relative). */
static void test_fp8_matches_dequantized(void)
{
    numla_isa isas[NUMLA_ISA_COUNT];
    int n = numla_test_isas(isas);
    for (int i = 0; i < n; i++) {
        qw_vs_dequant("tiny", NUMLA_QCKPT_FP8, isas[i], 1e-4);
        qw_vs_dequant("tiny-v3", NUMLA_QCKPT_FP8, isas[i], 1e-4);
    }
}

/* W8A8 rounds every activation row to int8 (kernels/qlinear.h): against the dequantized weights
 * with fp32 activations the logits of `tiny` move by that rounding, measured 3 % of max |logit|
 * (hidden 64, so a row's amax sets a coarse step); 8 % is stated. tiny-v3 is left out here:
 * there the rounding flips V3 routing choices (sigmoid scores + bias, near-ties) and the
 * logits move by 20-35 % while the same weights run with fp32 activations (INT8_ROW) stay at
 * 2e-6: comparing it needs a reference with the same activation rounding. A wrong scale, row
 * or sum shifts `tiny` by order 1. */
static void test_int8_w8a8_near_dequantized(void)
{
    numla_isa isas[NUMLA_ISA_COUNT];
    int n = numla_test_isas(isas);
    for (int i = 0; i < n; i++) {
        qw_vs_dequant("tiny", NUMLA_QCKPT_INT8, isas[i], 8e-2);
    }
}

/* numla quantize output vs the source quantized while loading: the same codes and scales, so
 * bit-identical logits (fp8 keeps lm_head in the file's dtype, so --keep-lm-head). */
static void check_round_trip(numla_qckpt_format f)
{
    char src[1024], out[1024];
    snprintf(src, sizeof src, "%s/qw_rt_src", numla_test_tmpdir());
    snprintf(out, sizeof out, "%s/qw_rt_%d", numla_test_tmpdir(), (int)f);
    CU_ASSERT_EQUAL_FATAL(qw_synth(src, "tiny-v3", NUMLA_QCKPT_NONE), 0);
    CU_ASSERT_EQUAL_FATAL(numla_qckpt_quantize_model(src, out, f, 0, 0, NULL), NUMLA_STATUS_OK);
    float *a = malloc(sizeof(float) * QW_ROWS * QW_MAXV), *b = malloc(sizeof(float) * QW_ROWS * QW_MAXV);
    int64_t V = 0;
    numla_weights_options ck = numla_weights_options_default();
    numla_weights_options ld = {.format = f == NUMLA_QCKPT_FP8 ? NUMLA_WEIGHT_FORMAT_FP8
                                                               : NUMLA_WEIGHT_FORMAT_INT8,
                                .keep_lm_head = f == NUMLA_QCKPT_FP8};
    const numla_isa isa = numla_isa_best();
    CU_ASSERT_EQUAL_FATAL(qw_logits(out, &ck, isa, a, &V), 0);
    CU_ASSERT_EQUAL_FATAL(qw_logits(src, &ld, isa, b, &V), 0);
    CU_ASSERT_EQUAL(memcmp(a, b, sizeof(float) * (size_t)(QW_ROWS * V)), 0);
    /* and quantizing really changed the numbers */
    numla_weights_options none = numla_weights_options_default();
    CU_ASSERT_EQUAL_FATAL(qw_logits(src, &none, isa, b, &V), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(a, b, sizeof(float) * (size_t)(QW_ROWS * V)), 0);
    free(a);
    free(b);
}

static void test_round_trip_fp8(void) { check_round_trip(NUMLA_QCKPT_FP8); }
static void test_round_trip_int8(void) { check_round_trip(NUMLA_QCKPT_INT8); }

/* ---- bad input ---- */

static const char *qw_target_;  /* tensor the edit applies to */
static int qw_kind_;            /* which edit */

static int qw_edit(const char *name, numla_dtype *dt, int64_t *shape, void *data)
{
    if (strcmp(name, qw_target_))
        return 1;
    switch (qw_kind_) {
    case 0: return 0;                                   /* drop */
    case 1: shape[0] += 1; return 1;                    /* wrong shape (reads past: data has slack) */
    case 2: *dt = NUMLA_DTYPE_BF16; return 1;           /* wrong dtype */
    case 3: ((float *)data)[0] = NAN; return 1;
    case 4: ((float *)data)[0] = INFINITY; return 1;
    case 5: ((float *)data)[0] = 0.0f; return 1;
    case 6: ((uint8_t *)data)[shape[1] + 3] = 0xff; return 1; /* e4m3 NaN (S.1111.111) */
    default: return 1;
    }
}

static void check_bad(const char *src, const char *target, int kind, const char *config,
                      const char *must_name)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/qw_bad", numla_test_tmpdir());
    qw_target_ = target;
    qw_kind_ = kind;
    CU_ASSERT_EQUAL_FATAL(qw_copy(src, dir, 0, qw_edit, config), 0);
    numla_model_config cfg;
    numla_safetensors_model *st = NULL;
    numla_model_weights *w = NULL;
    numla_status s = numla_model_config_load(dir, &cfg);
    if (s == NUMLA_STATUS_OK) {
        CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(dir, &st), NUMLA_STATUS_OK);
        s = numla_weights_load(&cfg, st, 0, 1, numla_isa_best(), &w);
        numla_safetensors_close(&st);
    }
    CU_ASSERT_NOT_EQUAL(s, NUMLA_STATUS_OK);
    CU_ASSERT_PTR_NULL(w);
    NUMLA_ASSERT_MSG(strstr(numla_error_message(), must_name) != NULL,
                     "case %d on %s: the error does not name %s: %s", kind, target, must_name,
                     numla_error_message());
    numla_weights_destroy(&w);
}

static void test_bad_input_named(void)
{
    char f8[1024], i8[1024];
    snprintf(f8, sizeof f8, "%s/qw_bad_fp8", numla_test_tmpdir());
    snprintf(i8, sizeof i8, "%s/qw_bad_int8", numla_test_tmpdir());
    CU_ASSERT_EQUAL_FATAL(qw_synth(f8, "tiny-v3", NUMLA_QCKPT_FP8), 0);
    CU_ASSERT_EQUAL_FATAL(qw_synth(i8, "tiny", NUMLA_QCKPT_INT8), 0);
    const char *s8 = "model.layers.1.self_attn.o_proj.weight_scale_inv";
    const char *si = "model.layers.0.mlp.down_proj.weight_scale";
    for (int kind = 0; kind <= 5; kind++) {
        check_bad(f8, s8, kind, NULL, s8);
        check_bad(i8, si, kind, NULL, si);
    }
    check_bad(f8, "model.layers.0.self_attn.q_b_proj.weight", 6, NULL,
              "model.layers.0.self_attn.q_b_proj.weight");
    /* 8-bit tensors without a quantization_config, and unknown formats */
    check_bad(f8, "-", 9, "null", "model.layers.0.self_attn.q_a_proj.weight");
    check_bad(f8, "-", 9, "{\"quant_method\": \"awq\"}", "quant_method");
    check_bad(f8, "-", 9,
              "{\"quant_method\": \"fp8\", \"fmt\": \"e4m3\", \"weight_block_size\": [64, 64]}",
              "weight_block_size");
    check_bad(f8, "-", 9, "{\"quant_method\": \"fp8\", \"fmt\": \"e5m2\", "
                          "\"weight_block_size\": [128, 128]}", "fmt");
    check_bad(i8, "-", 9, "{\"quant_method\": \"fp8\", \"fmt\": \"e4m3\", "
                          "\"weight_block_size\": [128, 128]}",
              "model.layers.0.self_attn.q_proj.weight is i8");
}

/* engine_harness.h's in-process reduce is for multi-rank suites */
static void *qw_unused_ __attribute__((unused)) = (void *)shm_reduce_fn;

NUMLA_TEST_SUITE(qweights, NULL, NULL, NUMLA_TEST(test_fp8_matches_dequantized),
                 NUMLA_TEST(test_int8_w8a8_near_dequantized), NUMLA_TEST(test_round_trip_fp8),
                 NUMLA_TEST(test_round_trip_int8), NUMLA_TEST(test_bad_input_named));
