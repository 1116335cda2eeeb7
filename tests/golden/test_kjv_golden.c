/* Golden test (label golden) of the trained model models/kjv-v3 (scripts/train_small_model.py)
 * against transformers (tests/golden/kjv/model_bf16/, scripts/make_kjv_golden.py): real-text
 * prompts' logits at every position within LOGIT_TOL and the 16-token greedy continuations, for
 * the committed bf16 weights at 1 rank (exact and default activations, ref kernels, a bf16 KV
 * cache) and at 2-3 in-process ranks (4 heads split 2+1+1 at 3); the model's tokenizer gives
 * the reference's prompt ids and decodes the greedy tokens to the reference's text. */
#include "model_golden_harness.h"

#include "engine/text/tokenizer.h"

#define KJV_DIR "kjv"
#define KJV_SUB "model_bf16"

static void test_kjv_bf16(void)
{
    numla_isa isas[NUMLA_ISA_COUNT];
    int nisa = numla_test_isas(isas);
    numla_isa best = isas[nisa - 1];
    const golden_cfg cfgs[] = {
        {1, best, 1, NUMLA_DTYPE_F32, LOGIT_TOL, 1 << 30, 0, 1, "bf16 weights, exact activations",
         NUMLA_PREFILL_FORM_AUTO, 0},
        {1, best, 0, NUMLA_DTYPE_F32, LOGIT_TOL, 1 << 30, 0, 1, "bf16 weights, default linears",
         NUMLA_PREFILL_FORM_AUTO, 0},
        {1, NUMLA_ISA_REF, 1, NUMLA_DTYPE_F32, LOGIT_TOL, 1 << 30, 0, 0, "bf16 weights, ref isa",
         NUMLA_PREFILL_FORM_AUTO, 0},
        {1, best, 0, NUMLA_DTYPE_BF16, LOGIT_TOL_BF16KV, 1 << 30, 0, 1, "bf16 weights, bf16 kv",
         NUMLA_PREFILL_FORM_AUTO, 0},
    };
    golden g;
    if (golden_load_file(&g, KJV_DIR, KJV_SUB, "expected.safetensors")) {
        CU_FAIL("golden data");
        golden_free(&g);
        return;
    }
    CU_ASSERT_EQUAL(g.nprompts, 3);
    int team = omp_get_max_threads();
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        if (i > 0)
            omp_set_num_threads(1); /* as check_model_dirs: 2 cores shared by CTest jobs */
        run_cfg(KJV_DIR, &g, &cfgs[i]);
        omp_set_num_threads(team);
    }
    golden_free(&g);
}

static void test_kjv_sharded(void) { check_sharded_dir(KJV_DIR, KJV_SUB, 3, LOGIT_TOL); }

/* The model's tokenizer (numla's BPE) against the reference's ids and greedy text. */
static void test_kjv_tokenizer(void)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/" KJV_SUB "/expected.json",
             numla_test_source_path("tests/golden/" KJV_DIR));
    json_error_t err;
    json_t *j = json_load_file(path, 0, &err);
    NUMLA_ASSERT_MSG(j != NULL, "%s: %s", path, err.text);
    if (!j)
        return;
    numla_tokenizer *t = NULL;
    numla_status s = numla_tokenizer_load(numla_test_source_path("models/kjv-v3"), &t);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OK, "models/kjv-v3 tokenizer: %s", numla_error_message());
    json_t *ps = json_object_get(j, "prompts");
    CU_ASSERT_EQUAL(json_array_size(ps), 3);
    for (size_t p = 0; t && p < json_array_size(ps); p++) {
        json_t *pr = json_array_get(ps, p);
        const char *kind = json_string_value(json_object_get(pr, "kind"));
        const char *text = json_string_value(json_object_get(pr, "text"));
        json_t *want = json_object_get(pr, "tokens");
        CU_ASSERT_PTR_NOT_NULL_FATAL(text);
        int chat = kind && !strcmp(kind, "chat");
        char buf[2048];
        /* the chat prompt: DeepSeek-V3's template for one user turn */
        snprintf(buf, sizeof buf, "%s%s%s", chat ? "<｜User｜>" : "", text,
                 chat ? "<｜Assistant｜>" : "");
        int32_t *ids = NULL;
        int64_t n = 0;
        CU_ASSERT_EQUAL_FATAL(numla_tokenizer_encode(t, buf, strlen(buf), 1, &ids, &n),
                              NUMLA_STATUS_OK);
        int same = (size_t)n == json_array_size(want);
        for (int64_t i = 0; same && i < n; i++)
            same = ids[i] == json_integer_value(json_array_get(want, (size_t)i));
        NUMLA_ASSERT_MSG(same, "prompt %zu: numla's %lld ids differ from the reference's %zu", p,
                         (long long)n, json_array_size(want));
        free(ids);
        json_t *gr = json_object_get(pr, "greedy");
        int32_t gids[N_GREEDY];
        for (int i = 0; i < N_GREEDY; i++)
            gids[i] = (int32_t)json_integer_value(json_array_get(gr, (size_t)i));
        char *dec = NULL;
        size_t len = 0;
        CU_ASSERT_EQUAL_FATAL(numla_tokenizer_decode(t, gids, N_GREEDY, 0, &dec, &len),
                              NUMLA_STATUS_OK);
        const char *ref = json_string_value(json_object_get(pr, "greedy_text"));
        NUMLA_ASSERT_MSG(ref && !strcmp(dec, ref), "prompt %zu: greedy text \"%s\" vs \"%s\"", p,
                         dec, ref ? ref : "(none)");
        free(dec);
    }
    numla_tokenizer_destroy(&t);
    json_decref(j);
}

NUMLA_TEST_SUITE(kjv_golden, NULL, NULL, NUMLA_TEST(test_kjv_bf16), NUMLA_TEST(test_kjv_sharded),
                 NUMLA_TEST(test_kjv_tokenizer))
