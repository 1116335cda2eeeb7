/* Kimi K2.5 checkpoints (engine/model/config.c, weights.c): the K2 text model inside a vision
 * model, its fields in config.json's text_config and its tensors under "language_model.". A
 * tiny-kimi synthetic model rewritten that way (plus a vision tensor, ignored) must give the
 * same logits bit for bit as the plain one; without the prefix the load fails naming the
 * tensor it looked for. */
#include "engine/engine_harness.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/synth/synth.h"

static const int32_t K25_PROMPT[6] = {5, 17, 99, 3, 42, 150};

/* the harness's rank helpers are not used here (one rank) */
static numla_status (*const k25_harness_keep_)(void *, float *, int64_t)
    __attribute__((unused)) = shm_reduce_fn;

/* dst: src's tensors renamed prefix + name (and one vision tensor), config.json wrapped as
 * kimi_k25's text_config. */
static int k25_rewrite(const char *src, const char *dst, const char *prefix)
{
    numla_safetensors_model *st = NULL;
    numla_safetensors_writer *w = NULL;
    if (numla_safetensors_open(src, &st) || numla_safetensors_writer_create(&w))
        return -1;
    mkdir(dst, 0755);
    int rc = 0;
    for (int64_t i = 0; i < numla_safetensors_count(st) && !rc; i++) {
        const numla_safetensors_tensor *t = numla_safetensors_at(st, i);
        char name[400];
        snprintf(name, sizeof name, "%s%s", prefix, t->name);
        int64_t shape[2] = {t->shape[0], t->ndim > 1 ? t->shape[1] : 1};
        rc = numla_safetensors_writer_add(w, name, t->dtype, t->ndim, shape, t->data) != 0;
    }
    float patch[12] = {0};
    int64_t ps[2] = {3, 4};
    rc |= numla_safetensors_writer_add(w, "vision_tower.patch_embed.proj.weight",
                                       NUMLA_DTYPE_F32, 2, ps, patch) != 0;
    char path[1200];
    snprintf(path, sizeof path, "%s/model.safetensors", dst);
    if (!rc)
        rc = numla_safetensors_writer_write(w, path) != 0;
    numla_safetensors_writer_destroy(&w);
    numla_safetensors_close(&st);
    snprintf(path, sizeof path, "%s/config.json", src);
    json_t *text = json_load_file(path, 0, NULL);
    if (!text)
        return -1;
    json_t *cfg = json_pack("{s:[s], s:s, s:o, s:{s:s, s:i}}", "architectures",
                            "KimiK25ForConditionalGeneration", "model_type", "kimi_k25",
                            "text_config", text, "vision_config", "model_type", "moonvit",
                            "hidden_size", 1152);
    snprintf(path, sizeof path, "%s/config.json", dst);
    rc |= !cfg || json_dump_file(cfg, path, JSON_INDENT(1)) != 0;
    json_decref(cfg);
    return rc;
}

/* Logits (6 rows, vocab) of the prompt's prefill; -1 when the model does not open. */
static int k25_logits(const char *dir, float *out)
{
    eng e;
    memset(&e, 0, sizeof e);
    if (eng_open(&e, dir, NUMLA_DTYPE_F32, NUMLA_ISA_REF)) {
        eng_close(&e);
        return -1;
    }
    numla_kv_seq s = {0};
    const int32_t *tok[1] = {K25_PROMPT};
    int n[1] = {6};
    int rc = eng_step(&e, 1, &s, tok, n, out);
    numla_kv_seq_release(e.kv, &s);
    eng_close(&e);
    return rc;
}

static void test_k25_same_logits(void)
{
    char base[] = "/tmp/numla-k25-XXXXXX";
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(base));
    char k2[128], k25[128], bad[128];
    snprintf(k2, sizeof k2, "%s/k2", base);
    snprintf(k25, sizeof k25, "%s/k25", base);
    snprintf(bad, sizeof bad, "%s/bad", base);
    numla_synth_options o = {.preset = "tiny-kimi", .out_dir = k2, .seed = 5,
                             .dtype = NUMLA_DTYPE_F32};
    CU_ASSERT_EQUAL_FATAL(numla_synth_write(&o, NULL), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(k25_rewrite(k2, k25, "language_model."), 0);
    CU_ASSERT_EQUAL_FATAL(k25_rewrite(k2, bad, ""), 0);
    numla_model_config c;
    CU_ASSERT_EQUAL_FATAL(numla_model_config_load(k2, &c), NUMLA_STATUS_OK);
    const int64_t V = c.vocab_size;
    CU_ASSERT_STRING_EQUAL(c.model_type, "kimi_k2");
    CU_ASSERT_EQUAL(c.n_routed_experts, 48);
    float *a = calloc((size_t)(6 * V), sizeof *a), *b = calloc((size_t)(6 * V), sizeof *b);
    CU_ASSERT_EQUAL_FATAL(k25_logits(k2, a), 0);
    CU_ASSERT_EQUAL_FATAL(k25_logits(k25, b), 0);
    NUMLA_ASSERT_MSG(memcmp(a, b, (size_t)(6 * V) * sizeof *a) == 0,
                     "K2.5 logits differ from the same weights as K2");
    /* the unprefixed copy: the loader looks for language_model.* and says so */
    CU_ASSERT_NOT_EQUAL(k25_logits(bad, b), 0);
    NUMLA_ASSERT_MSG(strstr(numla_error_message(), "missing language_model.model.") != NULL,
                     "message: %s", numla_error_message());
    free(a);
    free(b);
    const char *dirs[] = {k2, k25, bad};
    for (int i = 0; i < 3; i++) {
        char p[256];
        snprintf(p, sizeof p, "%s/model.safetensors", dirs[i]);
        unlink(p);
        snprintf(p, sizeof p, "%s/config.json", dirs[i]);
        unlink(p);
        rmdir(dirs[i]);
    }
    rmdir(base);
}

NUMLA_TEST_SUITE(kimi_k25, NULL, NULL, NUMLA_TEST(test_k25_same_logits))
