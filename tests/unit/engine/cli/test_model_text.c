/* engine/cli/model_text.c: a GGUF file's tokenizer.* keys become the tokenizer engine/text runs.
 * tests/golden/tokenizer/bpe8k_gguf/tokenizer.gguf holds bpe8k's vocabulary, merges and special
 * tokens as llama.cpp's converter writes them (scripts/make_gguf_model_golden.py); every case of
 * cases_bpe8k.json (made by the `tokenizers` library from bpe8k's tokenizer.json) must encode to
 * the same ids, with and without BOS, and decode back the same. The other two pre-tokenizers
 * (scripts/make_gguf_tokenizer_golden.py): deepseek_llm_gguf (a vocabulary trained with
 * DeepSeek-V2's pre-tokenizer, ids from `tokenizers`) and kimi_k2_gguf (kimi_tok's tiktoken
 * vocabulary as the converter writes Kimi-K2's, ids from tiktoken: kimi_tok/cases.json). Bad keys
 * are errors naming the key. */
#define _GNU_SOURCE /* memmem */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/cli/model_text.h"
#include "test_util.h"

numla_status numla_fuzz_gguf_tokenizer_run(const uint8_t *data, size_t size);

static void test_gguf_tokenizer_cases(void)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/tokenizer.gguf",
             numla_test_source_path("tests/golden/tokenizer/bpe8k_gguf"));
    numla_tokenizer *t = NULL;
    numla_status s = numla_model_text_tokenizer(path, 0, &t);
    if (s)
        fprintf(stderr, "\n    %s", numla_error_message());
    CU_ASSERT_EQUAL_FATAL(s, NUMLA_STATUS_OK);
    json_error_t err;
    json_t *doc = json_load_file(numla_test_source_path("tests/golden/tokenizer/cases_bpe8k.json"),
                                 JSON_ALLOW_NUL, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
    json_t *cases = json_object_get(doc, "cases");
    int bad = 0, n = 0, skipped = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i);
        const char *text = json_string_value(json_object_get(c, "text"));
        size_t len = json_string_length(json_object_get(c, "text"));
        /* GGUF keeps no lstrip / rstrip / single_word flags: bpe8k's two added tokens with one
         * (fim_hole strips spaces, tool_sep matches only as a single word) are matched as
         * written from a GGUF file (model_text.c), so the cases holding them are skipped */
        static const char fim[] = "<\xef\xbd\x9c" "fim\xe2\x96\x81" "hole\xef\xbd\x9c>";
        static const char sep[] = "<\xef\xbd\x9c" "tool\xe2\x96\x81" "sep\xef\xbd\x9c>";
        if (memmem(text, len, fim, sizeof fim - 1) || memmem(text, len, sep, sizeof sep - 1)) {
            skipped++;
            continue;
        }
        for (int special = 0; special < 2; special++) {
            json_t *want = json_object_get(c, special ? "ids_special" : "ids");
            int32_t *ids = NULL;
            int64_t k = 0;
            if (numla_tokenizer_encode(t, text, len, special, &ids, &k) != NUMLA_STATUS_OK) {
                bad++;
                continue;
            }
            int same = (size_t)k == json_array_size(want);
            for (int64_t j = 0; same && j < k; j++)
                same = ids[j] == json_integer_value(json_array_get(want, (size_t)j));
            if (!same && bad < 8)
                fprintf(stderr, "\n    case %zu (special %d): ids differ", i, special);
            bad += !same;
            n++;
            if (!special) {
                char *out = NULL;
                size_t ol = 0;
                const char *dec = json_string_value(json_object_get(c, "decoded"));
                if (numla_tokenizer_decode(t, ids, k, 0, &out, &ol) != NUMLA_STATUS_OK ||
                    ol != json_string_length(json_object_get(c, "decoded")) ||
                    memcmp(out, dec, ol)) {
                    fprintf(stderr, "\n    case %zu: decoded text differs", i);
                    bad++;
                }
                free(out);
            }
            free(ids);
        }
    }
    if (bad || skipped > 16)
        fprintf(stderr, "\n    %d differ, %d skipped", bad, skipped);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_TRUE(n > 1000);
    CU_ASSERT_TRUE(skipped <= 16);
    json_decref(doc);
    numla_tokenizer_destroy(&t);
}

/* Every case of cases_json ("text", "ids", "decoded") through the tokenizer of gguf: ids without
 * special handling, bos_id (>= 0) first with it, the decode of ids. Returns the cases run. */
static int gguf_cases(const char *gguf, const char *cases_json, int32_t bos_id)
{
    numla_tokenizer *t = NULL;
    numla_status s = numla_model_text_tokenizer(numla_test_source_path(gguf), 0, &t);
    if (s)
        fprintf(stderr, "\n    %s", numla_error_message());
    CU_ASSERT_EQUAL_FATAL(s, NUMLA_STATUS_OK);
    json_error_t err;
    json_t *doc = json_load_file(numla_test_source_path(cases_json), JSON_ALLOW_NUL, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
    json_t *cases = json_object_get(doc, "cases");
    int bad = 0, n = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i), *want = json_object_get(c, "ids");
        const char *text = json_string_value(json_object_get(c, "text"));
        size_t len = json_string_length(json_object_get(c, "text"));
        const size_t nw = json_array_size(want);
        for (int special = 0; special < (bos_id >= 0 ? 2 : 1); special++) {
            int32_t *ids = NULL;
            int64_t k = 0;
            if (numla_tokenizer_encode(t, text, len, special, &ids, &k) != NUMLA_STATUS_OK) {
                bad++;
                continue;
            }
            const int64_t off = special ? 1 : 0;
            int same = (size_t)k == nw + (size_t)off && (!special || ids[0] == bos_id);
            for (int64_t j = 0; same && j < (int64_t)nw; j++)
                same = ids[j + off] == json_integer_value(json_array_get(want, (size_t)j));
            if (!same && bad < 8)
                fprintf(stderr, "\n    %s case %zu (special %d): ids differ", gguf, i, special);
            bad += !same;
            if (!special) {
                char *out = NULL;
                size_t ol = 0;
                const char *dec = json_string_value(json_object_get(c, "decoded"));
                if (numla_tokenizer_decode(t, ids, k, 0, &out, &ol) != NUMLA_STATUS_OK ||
                    ol != json_string_length(json_object_get(c, "decoded")) || memcmp(out, dec, ol)) {
                    if (bad < 8)
                        fprintf(stderr, "\n    %s case %zu: decoded text differs", gguf, i);
                    bad++;
                }
                free(out);
                n++;
            }
            free(ids);
        }
    }
    CU_ASSERT_EQUAL(bad, 0);
    json_decref(doc);
    numla_tokenizer_destroy(&t);
    return n;
}

static void test_gguf_deepseek_llm(void)
{
    json_error_t err;
    json_t *doc = json_load_file(numla_test_source_path("tests/golden/tokenizer/deepseek_llm_gguf/cases.json"),
                                 JSON_ALLOW_NUL, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
    const int32_t bos = (int32_t)json_integer_value(json_object_get(doc, "bos_id"));
    json_decref(doc);
    CU_ASSERT_TRUE(gguf_cases("tests/golden/tokenizer/deepseek_llm_gguf/tokenizer.gguf",
                              "tests/golden/tokenizer/deepseek_llm_gguf/cases.json", bos) >= 692);
}

static void test_gguf_kimi_k2(void)
{
    CU_ASSERT_TRUE(gguf_cases("tests/golden/tokenizer/kimi_k2_gguf/tokenizer.gguf",
                              "tests/golden/kimi_tok/cases.json", -1) > 10000);
    /* the specials keep their names and ids; an unnamed one is the tiktoken loader's reserved */
    numla_tokenizer *t = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_model_text_tokenizer(
                              numla_test_source_path("tests/golden/tokenizer/kimi_k2_gguf/tokenizer.gguf"),
                              0, &t), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_tokenizer_token_id(t, "[BOS]"), 1200);
    CU_ASSERT_EQUAL(numla_tokenizer_bos(t), 1200);
    CU_ASSERT_TRUE(numla_tokenizer_is_special(t, 1202));
    CU_ASSERT_EQUAL(numla_tokenizer_token_id(t, "<|reserved_token_1455|>"), 1455);
    CU_ASSERT_EQUAL(numla_tokenizer_vocab_size(t), 1456);
    /* the file has no add_bos_token (as kimi_tok's config has none): no BOS is added */
    int32_t *a = NULL, *b = NULL;
    int64_t na = 0, nb = 0;
    CU_ASSERT_EQUAL(numla_tokenizer_encode(t, "Hello world", 11, 0, &a, &na), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_tokenizer_encode(t, "Hello world", 11, 1, &b, &nb), NUMLA_STATUS_OK);
    CU_ASSERT_TRUE(na > 0 && na == nb && memcmp(a, b, (size_t)na * sizeof *a) == 0);
    free(a);
    free(b);
    numla_tokenizer_destroy(&t);
}

static void test_gguf_tokenizer_bad(void)
{
    /* a pre-tokenizer numla does not know: refused naming key and value */
    char path[1200];
    snprintf(path, sizeof path, "%s/tokenizer.gguf",
             numla_test_source_path("tests/golden/tokenizer/bad_pre_gguf"));
    numla_tokenizer *t = NULL;
    CU_ASSERT_EQUAL(numla_model_text_tokenizer(path, 0, &t), NUMLA_STATUS_UNSUPPORTED);
    CU_ASSERT_PTR_NULL(t);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "tokenizer.ggml.pre"));
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "qwen2"));
    /* kimi-k2 with a special token past the 256 ids after the ranks */
    snprintf(path, sizeof path, "%s/kimi_late_special.gguf",
             numla_test_source_path("tests/golden/tokenizer/bad_pre_gguf"));
    CU_ASSERT_EQUAL(numla_model_text_tokenizer(path, 0, &t), NUMLA_STATUS_UNSUPPORTED);
    CU_ASSERT_PTR_NULL(t);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "tokenizer.ggml.tokens[556]"));
    numla_error_clear();
    snprintf(path, sizeof path, "%s/model.gguf",
             numla_test_source_path("tests/golden/v2lite/gguf_q8_0"));
    /* a forced chat template needs no keys */
    numla_chat_template *ct = NULL;
    CU_ASSERT_EQUAL(numla_model_text_chat_template(path, "deepseek-v3", &ct), NUMLA_STATUS_OK);
    numla_chat_template_destroy(&ct);
    numla_error_clear();
}

/* A deepseek4 GGUF (llama.cpp's converter writes its own Jinja approximation of DeepSeek-V4's
 * encoding) gets the built-in deepseek-v4 renderer: bpe8k's tokenizer file with
 * general.architecture set to deepseek4; the same file as deepseek2, which has no template,
 * gets none. */
static void test_gguf_deepseek4_chat(void)
{
    size_t n = 0;
    char *f = numla_test_read_file(
        numla_test_source_path("tests/golden/tokenizer/bpe8k_gguf/tokenizer.gguf"), &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    static const char key[] = "general.architecture\x08\0\0\0\x09\0\0\0\0\0\0\0deepseek2";
    char *at = memmem(f, n, key, sizeof key - 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(at);
    char path[1200];
    snprintf(path, sizeof path, "%s/numla_model_text_ds4_%d.gguf", numla_test_tmpdir(),
             (int)getpid());
    numla_chat_template *ct = NULL;
    for (int v4 = 0; v4 < 2; v4++) {
        at[sizeof key - 2] = v4 ? '4' : '2';
        FILE *w = fopen(path, "wb");
        CU_ASSERT_PTR_NOT_NULL_FATAL(w);
        CU_ASSERT_EQUAL(fwrite(f, 1, n, w), n);
        fclose(w);
        numla_status s = numla_model_text_chat_template(path, NULL, &ct);
        if (v4) {
            CU_ASSERT_EQUAL_FATAL(s, NUMLA_STATUS_OK);
            CU_ASSERT_STRING_EQUAL(numla_chat_template_name(ct), "deepseek-v4");
        } else {
            CU_ASSERT_EQUAL(s, NUMLA_STATUS_UNSUPPORTED);
            CU_ASSERT_PTR_NULL(ct);
        }
        numla_chat_template_destroy(&ct);
        numla_error_clear();
    }
    remove(path);
    free(f);
}

/* The fuzz target's checks (tests/fuzz/fuzz_gguf_tokenizer.c) over seeded mutations of the
 * kimi-k2 golden, most of them in its first 12 KiB (the pre-tokenizer key and the token
 * strings): bit flips, bytes set to 0 / 0x80 / 0xff / ASCII, truncation, span deletion. A crash
 * or a wrong status aborts inside the target. */
static void test_fuzz_mutations(void)
{
    FILE *f = fopen(numla_test_source_path("tests/golden/tokenizer/kimi_k2_gguf/tokenizer.gguf"), "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    static unsigned char seed[1 << 17], buf[1 << 17];
    const size_t n0 = fread(seed, 1, sizeof seed, f);
    fclose(f);
    CU_ASSERT_TRUE_FATAL(n0 > 0 && n0 < sizeof seed);
    CU_ASSERT_EQUAL_FATAL(numla_fuzz_gguf_tokenizer_run(seed, n0), NUMLA_STATUS_OK);
    static const unsigned char values[] = {0, 1, 3, 5, 0x20, 0x41, 0x7f, 0x80, 0xc4, 0xff};
    numla_test_rng rng = {20261205};
    int counts[NUMLA_STATUS_INTERNAL + 1] = {0};
    for (int it = 0; it < 2000; it++) {
        size_t n = n0;
        memcpy(buf, seed, n0);
        const int muts = 1 + (int)(numla_test_rng_u64(&rng) % 3);
        for (int k = 0; k < muts; k++) {
            const uint64_t r = numla_test_rng_u64(&rng);
            const size_t span = (r >> 60) & 1 ? n : (n < 12288 ? n : 12288);
            const size_t pos = span ? (size_t)((r >> 8) % span) : 0;
            const size_t len = 1 + (size_t)((r >> 40) % 8);
            switch (r % 8) {
            case 0:
            case 1: buf[pos] ^= (unsigned char)(1u << ((r >> 40) & 7)); break;
            case 2:
            case 3:
            case 4:
            case 5: buf[pos] = values[(r >> 48) % sizeof values]; break;
            case 6: n = pos; break;
            default:
                if (pos + len <= n) {
                    memmove(buf + pos, buf + pos + len, n - pos - len);
                    n -= len;
                }
                break;
            }
        }
        counts[numla_fuzz_gguf_tokenizer_run(buf, n)]++;
    }
    NUMLA_ASSERT_MSG(counts[NUMLA_STATUS_OK] > 100 && counts[NUMLA_STATUS_FORMAT] > 200,
                     "ok %d, format %d, unsupported %d", counts[NUMLA_STATUS_OK],
                     counts[NUMLA_STATUS_FORMAT], counts[NUMLA_STATUS_UNSUPPORTED]);
    if (getenv("NUMLA_TEST_VERBOSE"))
        fprintf(stderr, "\n    mutations: ok %d, format %d, unsupported %d",
                counts[NUMLA_STATUS_OK], counts[NUMLA_STATUS_FORMAT],
                counts[NUMLA_STATUS_UNSUPPORTED]);
}

NUMLA_TEST_SUITE(model_text, NULL, NULL, NUMLA_TEST(test_gguf_tokenizer_cases),
                 NUMLA_TEST(test_gguf_deepseek_llm), NUMLA_TEST(test_gguf_kimi_k2),
                 NUMLA_TEST(test_gguf_tokenizer_bad), NUMLA_TEST(test_gguf_deepseek4_chat),
                 NUMLA_TEST(test_fuzz_mutations))
