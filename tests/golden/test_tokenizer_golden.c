/* Golden tests for engine/tokenizer: ids, decoded text and BOS handling against the reference
 * `tokenizers` library (tests/golden/tokenizer/, made by scripts/make_tokenizer_golden.py),
 * plus the 1 MB input, invalid UTF-8, streaming decode and unsupported components. */
#include "test_util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/text/tokenizer.h"

static const char *const numla_golden_names[] = {"bpe8k", "bpe1k", "bpe1k_nfc", "bpe1k_gpt2",
                                                 "bpe2k_glm5"};

static const char *golden_dir(const char *name)
{
    static char buf[8192];
    char rel[512];
    snprintf(rel, sizeof rel, "tests/golden/tokenizer/%.400s", name);
    snprintf(buf, sizeof buf, "%.4000s", numla_test_source_path(rel));
    return buf;
}

static numla_tokenizer *load(const char *name)
{
    numla_tokenizer *t = NULL;
    numla_status s = numla_tokenizer_load(golden_dir(name), &t);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OK, "load %s: %s", name, numla_error_message());
    return t;
}

static json_t *load_cases(const char *name)
{
    char rel[256];
    snprintf(rel, sizeof rel, "cases_%s.json", name);
    json_error_t err;
    json_t *j = json_load_file(golden_dir(rel), JSON_ALLOW_NUL, &err);
    NUMLA_ASSERT_MSG(j != NULL, "%s: %s", rel, err.text);
    return j;
}

static int ids_equal(const int32_t *ids, int64_t n, json_t *want)
{
    if ((size_t)n != json_array_size(want))
        return 0;
    for (int64_t i = 0; i < n; i++)
        if (ids[i] != json_integer_value(json_array_get(want, (size_t)i)))
            return 0;
    return 1;
}

static int is_utf8(const char *s, size_t n) { return numla_utf8_invalid_offset(s, n) < 0; }

/* Every golden string: ids with and without special-token handling, both decodes. */
static void test_golden_cases(void)
{
    for (size_t k = 0; k < sizeof numla_golden_names / sizeof numla_golden_names[0]; k++) {
        const char *name = numla_golden_names[k];
        numla_tokenizer *t = load(name);
        json_t *root = load_cases(name);
        if (!t || !root)
            continue;
        json_t *cases = json_object_get(root, "cases");
        size_t total = json_array_size(cases), ok_ids = 0, ok_spec = 0, ok_dec = 0, ok_skip = 0;
        size_t i;
        json_t *c;
        json_array_foreach(cases, i, c) {
            json_t *tx = json_object_get(c, "text");
            const char *text = json_string_value(tx);
            size_t len = json_string_length(tx);
            int32_t *ids = NULL, *ids2 = NULL;
            int64_t n = 0, n2 = 0;
            numla_status s1 = numla_tokenizer_encode(t, text, len, 0, &ids, &n);
            numla_status s2 = numla_tokenizer_encode(t, text, len, 1, &ids2, &n2);
            int a = s1 == NUMLA_STATUS_OK && ids_equal(ids, n, json_object_get(c, "ids"));
            int b = s2 == NUMLA_STATUS_OK && ids_equal(ids2, n2, json_object_get(c, "ids_special"));
            ok_ids += (size_t)a;
            ok_spec += (size_t)b;
            if (!a)
                fprintf(stderr, "\n    %s case %zu ids differ: %.80s", name, i, text);
            char *d = NULL, *d2 = NULL;
            size_t dl = 0, dl2 = 0;
            json_t *wd = json_object_get(c, "decoded"), *wd2 = json_object_get(c, "decoded_skip");
            if (numla_tokenizer_decode(t, ids, n, 0, &d, &dl) == NUMLA_STATUS_OK &&
                dl == json_string_length(wd) && memcmp(d, json_string_value(wd), dl) == 0)
                ok_dec++;
            else
                fprintf(stderr, "\n    %s case %zu decode differs: %.80s", name, i, text);
            if (numla_tokenizer_decode(t, ids2, n2, 1, &d2, &dl2) == NUMLA_STATUS_OK &&
                dl2 == json_string_length(wd2) && memcmp(d2, json_string_value(wd2), dl2) == 0)
                ok_skip++;
            else
                fprintf(stderr, "\n    %s case %zu skip-special decode differs: %.80s", name, i,
                        text);
            free(ids);
            free(ids2);
            free(d);
            free(d2);
        }
        fprintf(stderr, "\n    %s: ids %zu/%zu, ids+special %zu/%zu, decode %zu/%zu, "
                        "decode skip-special %zu/%zu identical", name, ok_ids, total, ok_spec,
                total, ok_dec, total, ok_skip, total);
        NUMLA_ASSERT_MSG(total >= 300 && ok_ids == total && ok_spec == total && ok_dec == total &&
                             ok_skip == total, "%s: golden mismatches", name);
        json_decref(root);
        numla_tokenizer_destroy(&t);
    }
    fprintf(stderr, "\n");
}

/* Without a normalizer or removing split, decode(encode(x)) == x byte for byte. */
static void test_round_trip(void)
{
    const char *names[] = {"bpe8k", "bpe1k"};
    for (int k = 0; k < 2; k++) {
        numla_tokenizer *t = load(names[k]);
        json_t *root = load_cases(names[k]);
        if (!t || !root)
            continue;
        size_t i, bad = 0, skipped = 0;
        json_t *c;
        json_array_foreach(json_object_get(root, "cases"), i, c) {
            json_t *tx = json_object_get(c, "text");
            const char *text = json_string_value(tx);
            size_t len = json_string_length(tx);
            if (strstr(text, "fim▁hole")) { /* lstrip/rstrip eat the spaces around it */
                skipped++;
                continue;
            }
            int32_t *ids = NULL;
            int64_t n = 0;
            char *d = NULL;
            size_t dl = 0;
            if (numla_tokenizer_encode(t, text, len, 0, &ids, &n) != NUMLA_STATUS_OK ||
                numla_tokenizer_decode(t, ids, n, 0, &d, &dl) != NUMLA_STATUS_OK || dl != len ||
                memcmp(d, text, len) != 0)
                bad++;
            free(ids);
            free(d);
        }
        NUMLA_ASSERT_MSG(bad == 0 && skipped < 10, "%s: %zu strings do not round-trip", names[k],
                         bad);
        json_decref(root);
        numla_tokenizer_destroy(&t);
    }
}

static void test_special_tokens_in_text(void)
{
    numla_tokenizer *t = load("bpe8k");
    if (!t)
        return;
    int32_t bos = numla_tokenizer_bos(t), eos = numla_tokenizer_eos(t);
    CU_ASSERT_EQUAL(bos, numla_tokenizer_token_id(t, "<｜begin▁of▁sentence｜>"));
    CU_ASSERT_EQUAL(eos, numla_tokenizer_token_id(t, "<｜end▁of▁sentence｜>"));
    CU_ASSERT(numla_tokenizer_is_special(t, eos));
    const char *text = "Hi<｜end▁of▁sentence｜>there<｜end▁of▁sentence｜>";
    int32_t *ids = NULL, *a = NULL, *b = NULL;
    int64_t n = 0, na = 0, nb = 0;
    CU_ASSERT_EQUAL(numla_tokenizer_encode(t, text, strlen(text), 1, &ids, &n), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_tokenizer_encode(t, "Hi", 2, 0, &a, &na), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_tokenizer_encode(t, "there", 5, 0, &b, &nb), NUMLA_STATUS_OK);
    /* BOS, Hi, EOS, there, EOS: the special token splits the text and is one id */
    CU_ASSERT_EQUAL(n, 1 + na + 1 + nb + 1);
    if (n == 1 + na + 1 + nb + 1) {
        CU_ASSERT_EQUAL(ids[0], bos);
        CU_ASSERT(memcmp(ids + 1, a, (size_t)na * sizeof *a) == 0);
        CU_ASSERT_EQUAL(ids[1 + na], eos);
        CU_ASSERT(memcmp(ids + 2 + na, b, (size_t)nb * sizeof *b) == 0);
        CU_ASSERT_EQUAL(ids[n - 1], eos);
    }
    char *d = NULL;
    size_t dl = 0;
    CU_ASSERT_EQUAL(numla_tokenizer_decode(t, ids, n, 1, &d, &dl), NUMLA_STATUS_OK);
    CU_ASSERT(d && strcmp(d, "Hithere") == 0);
    free(d);
    free(ids);
    free(a);
    free(b);
    numla_tokenizer_destroy(&t);
}

static void test_empty_string(void)
{
    numla_tokenizer *t = load("bpe8k");
    if (!t)
        return;
    int32_t *ids = NULL;
    int64_t n = -1;
    CU_ASSERT_EQUAL(numla_tokenizer_encode(t, "", 0, 0, &ids, &n), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(n, 0);
    CU_ASSERT_PTR_NOT_NULL(ids);
    free(ids);
    CU_ASSERT_EQUAL(numla_tokenizer_encode(t, "", 0, 1, &ids, &n), NUMLA_STATUS_OK);
    CU_ASSERT(n == 1 && ids[0] == numla_tokenizer_bos(t));
    free(ids);
    char *d = NULL;
    size_t dl = 1;
    CU_ASSERT_EQUAL(numla_tokenizer_decode(t, NULL, 0, 0, &d, &dl), NUMLA_STATUS_OK);
    CU_ASSERT(d && dl == 0 && d[0] == 0);
    free(d);
    numla_tokenizer_destroy(&t);
}

/* The ~1 MB mixed text gives exactly the reference's ids. */
static void test_one_megabyte(void)
{
    numla_tokenizer *t = load("bpe8k");
    size_t tl = 0, il = 0;
    char *text = numla_test_read_file(golden_dir("mixed_1mb.txt"), &tl);
    char *want = numla_test_read_file(golden_dir("mixed_1mb_bpe8k.ids"), &il);
    NUMLA_ASSERT_MSG(text && want && tl >= 1000000, "missing 1 MB golden files");
    if (t && text && want) {
        int32_t *ids = NULL;
        int64_t n = 0;
        CU_ASSERT_EQUAL(numla_tokenizer_encode(t, text, tl, 0, &ids, &n), NUMLA_STATUS_OK);
        int64_t nw = (int64_t)(il / 4), first_bad = -1;
        for (int64_t i = 0; i < n && i < nw && first_bad < 0; i++) {
            int32_t w;
            memcpy(&w, want + 4 * i, 4); /* little-endian host */
            if (w != ids[i])
                first_bad = i;
        }
        NUMLA_ASSERT_MSG(n == nw && first_bad < 0, "1 MB: %lld ids vs %lld expected, first "
                         "difference at %lld", (long long)n, (long long)nw, (long long)first_bad);
        char *d = NULL;
        size_t dl = 0;
        CU_ASSERT_EQUAL(numla_tokenizer_decode(t, ids, n, 0, &d, &dl), NUMLA_STATUS_OK);
        CU_ASSERT(d && dl == tl && memcmp(d, text, tl) == 0);
        free(d);
        free(ids);
    }
    free(text);
    free(want);
    numla_tokenizer_destroy(&t);
}

static void test_invalid_utf8(void)
{
    numla_tokenizer *t = load("bpe1k");
    if (!t)
        return;
    static const struct { const char *s; size_t len; long off; } bad[] = {
        {"abc\xff", 4, 3},          {"ok \xc0\x80", 5, 3},     {"\xed\xa0\x80 surrogate", 13, 0},
        {"xy\xe4\xb8", 4, 2},       {"\xf4\x90\x80\x80", 4, 0}, {"caf\xc3", 4, 3},
        {"a\x80", 2, 1},            {"\xe4\xb8\xad\xe6", 4, 3},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int32_t *ids = NULL;
        int64_t n = 0;
        numla_status s = numla_tokenizer_encode(t, bad[i].s, bad[i].len, 0, &ids, &n);
        char want[64];
        snprintf(want, sizeof want, "offset %ld", bad[i].off);
        NUMLA_ASSERT_MSG(s == NUMLA_STATUS_FORMAT && strstr(numla_error_message(), want),
                         "case %zu: status %d, message '%s'", i, (int)s, numla_error_message());
        free(ids);
    }
    numla_tokenizer_destroy(&t);
}

/* One token at a time over emoji/CJK strings: every piece is valid UTF-8 and they add up. */
static void test_stream_decode(void)
{
    numla_tokenizer *t = load("bpe8k");
    json_t *root = load_cases("bpe8k");
    if (!t || !root)
        return;
    size_t i, checked = 0, held = 0, bad = 0;
    json_t *c;
    json_array_foreach(json_object_get(root, "cases"), i, c) {
        json_t *ids = json_object_get(c, "ids_special");
        json_t *want = json_object_get(c, "decoded_skip");
        numla_tokenizer_stream *s = NULL;
        CU_ASSERT_EQUAL(numla_tokenizer_stream_create(t, 1, &s), NUMLA_STATUS_OK);
        char *acc = malloc(json_string_length(want) * 3 + 16);
        size_t an = 0, k;
        json_t *idj;
        json_array_foreach(ids, k, idj) {
            const char *p;
            size_t pl;
            if (numla_tokenizer_stream_push(s, (int32_t)json_integer_value(idj), &p, &pl) !=
                    NUMLA_STATUS_OK || !is_utf8(p, pl) || an + pl > json_string_length(want)) {
                bad++;
                break;
            }
            if (pl == 0)
                held++;
            memcpy(acc + an, p, pl);
            an += pl;
        }
        const char *p;
        size_t pl;
        CU_ASSERT_EQUAL(numla_tokenizer_stream_flush(s, &p, &pl), NUMLA_STATUS_OK);
        if (is_utf8(p, pl) && an + pl <= json_string_length(want) + 3) {
            memcpy(acc + an, p, pl);
            an += pl;
        }
        if (an != json_string_length(want) || memcmp(acc, json_string_value(want), an) != 0)
            bad++;
        checked++;
        free(acc);
        numla_tokenizer_stream_destroy(&s);
    }
    NUMLA_ASSERT_MSG(bad == 0, "%zu of %zu streams broke", bad, checked);
    NUMLA_ASSERT_MSG(held > 0, "no token ever split a character: the test proves nothing");
    /* a dangling lead byte comes out as U+FFFD at the end, never as a broken byte */
    int32_t lead = -1;
    for (int32_t id = 0; id < numla_tokenizer_vocab_size(t) && lead < 0; id++) {
        const char *tok = numla_tokenizer_token(t, id);
        if (tok && strcmp(tok, "ä") == 0) /* byte-level char of byte 0xe4 */
            lead = id;
    }
    CU_ASSERT(lead >= 0);
    if (lead >= 0) {
        numla_tokenizer_stream *s = NULL;
        const char *p;
        size_t pl;
        numla_tokenizer_stream_create(t, 0, &s);
        CU_ASSERT_EQUAL(numla_tokenizer_stream_push(s, lead, &p, &pl), NUMLA_STATUS_OK);
        CU_ASSERT_EQUAL(pl, 0);
        CU_ASSERT_EQUAL(numla_tokenizer_stream_flush(s, &p, &pl), NUMLA_STATUS_OK);
        CU_ASSERT(pl == 3 && memcmp(p, "\xef\xbf\xbd", 3) == 0);
        numla_tokenizer_stream_destroy(&s);
    }
    json_decref(root);
    numla_tokenizer_destroy(&t);
}

/* Rewrite bpe1k's tokenizer.json with one component replaced and expect a named error. */
static void test_unsupported_component(void)
{
    static const struct { const char *field, *json, *name; } cases[] = {
        {"pre_tokenizer", "{\"type\": \"Metaspace\", \"replacement\": \"_\"}", "Metaspace"},
        {"normalizer", "{\"type\": \"Lowercase\"}", "Lowercase"},
        {"decoder", "{\"type\": \"WordPiece\", \"prefix\": \"##\"}", "WordPiece"},
        {"post_processor", "{\"type\": \"BertProcessing\"}", "BertProcessing"},
        {"model", "{\"type\": \"Unigram\", \"vocab\": []}", "Unigram"},
    };
    json_error_t err;
    char src[8300];
    snprintf(src, sizeof src, "%.8000s/tokenizer.json", golden_dir("bpe1k"));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *root = json_load_file(src, 0, &err);
        json_t *v = json_loads(cases[i].json, 0, &err);
        CU_ASSERT_PTR_NOT_NULL_FATAL(root);
        json_object_set_new(root, cases[i].field, v);
        char dir[4096], path[4200];
        snprintf(dir, sizeof dir, "%.4000s/unsupported_%zu", numla_test_tmpdir(), i);
        mkdir(dir, 0755);
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        CU_ASSERT_EQUAL(json_dump_file(root, path, 0), 0);
        json_decref(root);
        numla_tokenizer *t = NULL;
        numla_status s = numla_tokenizer_load(dir, &t);
        NUMLA_ASSERT_MSG(s == NUMLA_STATUS_UNSUPPORTED && strstr(numla_error_message(),
                                                                 cases[i].name),
                         "%s %s: status %d, '%s'", cases[i].field, cases[i].name, (int)s,
                         numla_error_message());
        CU_ASSERT_PTR_NULL(t);
        numla_tokenizer_destroy(&t);
    }
}

NUMLA_TEST_SUITE(tokenizer_golden, NULL, NULL, NUMLA_TEST(test_golden_cases),
                 NUMLA_TEST(test_round_trip), NUMLA_TEST(test_special_tokens_in_text),
                 NUMLA_TEST(test_empty_string), NUMLA_TEST(test_one_megabyte),
                 NUMLA_TEST(test_invalid_utf8), NUMLA_TEST(test_stream_decode),
                 NUMLA_TEST(test_unsupported_component))
