/* Golden tests for the tiktoken tokenizer (engine/text/tokenizer_tiktoken.c) against the
 * reference tiktoken package (tests/golden/kimi_tok/, made by scripts/make_kimi_golden.py):
 * Kimi's pattern's character classes on every code point, ids and decodes on every golden
 * string, the 1 MB mixed text, and the loader's errors on bad files. */
#include "test_util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/tokenizer.h"
#include "engine/text/tokenizer_testing.h"

static const char *kdir(const char *file)
{
    static char buf[8192];
    char rel[512];
    snprintf(rel, sizeof rel, "tests/golden/kimi_tok/%.400s", file);
    snprintf(buf, sizeof buf, "%.4000s", numla_test_source_path(rel));
    return buf;
}

static numla_tokenizer *kload(void)
{
    numla_tokenizer *t = NULL;
    numla_status s = numla_tokenizer_load_for_model(kdir(""), 0, &t);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OK, "load kimi_tok: %s", numla_error_message());
    return t;
}

static int in_ranges(json_t *r, uint32_t cp)
{
    size_t lo = 0, hi = json_array_size(r);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((uint32_t)json_integer_value(json_array_get(json_array_get(r, mid), 1)) < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < json_array_size(r) &&
           (uint32_t)json_integer_value(json_array_get(json_array_get(r, lo), 0)) <= cp;
}

/* Every code point: numla's Han, White_Space and general categories (the classes the matcher is
 * built from) against the classes tiktoken's regex engine uses. */
static void test_classes_every_code_point(void)
{
    json_error_t err;
    json_t *root = json_load_file(kdir("classes.json"), 0, &err);
    NUMLA_ASSERT_MSG(root != NULL, "classes.json: %s", err.text);
    if (!root)
        return;
    json_t *cl = json_object_get(root, "classes");
    static const char *const names[] = {"Han", "L", "N", "M", "Lu", "Ll", "Lt", "Lm", "Lo", "s"};
    json_t *r[10];
    for (int k = 0; k < 10; k++) {
        r[k] = json_object_get(cl, names[k]);
        CU_ASSERT_FATAL(json_is_array(r[k]));
    }
    long bad[10] = {0};
    for (uint32_t cp = 0; cp < 0x110000; cp++) {
        if (cp >= 0xd800 && cp < 0xe000)
            continue;
        utf8proc_category_t g = numla_tokenizer_unicode_category(cp);
        int L = g >= UTF8PROC_CATEGORY_LU && g <= UTF8PROC_CATEGORY_LO;
        int M = g >= UTF8PROC_CATEGORY_MN && g <= UTF8PROC_CATEGORY_ME;
        int N = g >= UTF8PROC_CATEGORY_ND && g <= UTF8PROC_CATEGORY_NO;
        int mine[10] = {numla_tokenizer_kimi_is_han(cp), L, N, M, g == UTF8PROC_CATEGORY_LU,
                        g == UTF8PROC_CATEGORY_LL, g == UTF8PROC_CATEGORY_LT,
                        g == UTF8PROC_CATEGORY_LM, g == UTF8PROC_CATEGORY_LO,
                        numla_tokenizer_kimi_is_ws(cp)};
        for (int k = 0; k < 10; k++)
            if (mine[k] != in_ranges(r[k], cp) && bad[k]++ < 3)
                fprintf(stderr, "\n    U+%04X: class %s numla %d, tiktoken %d", cp, names[k],
                        mine[k], !mine[k]);
    }
    for (int k = 0; k < 10; k++)
        NUMLA_ASSERT_MSG(bad[k] == 0, "class %s differs on %ld code points", names[k], bad[k]);
    json_decref(root);
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

/* Every golden string: ids (special tokens in the text matched), decode, skip-special decode,
 * and the streaming decoder's pieces concatenated. */
static void test_golden_cases(void)
{
    numla_tokenizer *t = kload();
    json_error_t err;
    json_t *root = json_load_file(kdir("cases.json"), JSON_ALLOW_NUL, &err);
    NUMLA_ASSERT_MSG(root != NULL, "cases.json: %s", err.text);
    if (!t || !root) {
        numla_tokenizer_destroy(&t);
        json_decref(root);
        return;
    }
    json_t *cases = json_object_get(root, "cases");
    size_t total = json_array_size(cases), ok_ids = 0, ok_dec = 0, ok_skip = 0, ok_stream = 0;
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        json_t *tx = json_object_get(c, "text");
        const char *text = json_string_value(tx);
        size_t len = json_string_length(tx);
        int32_t *ids = NULL;
        int64_t n = 0;
        numla_status s = numla_tokenizer_encode(t, text, len, 0, &ids, &n);
        int a = s == NUMLA_STATUS_OK && ids_equal(ids, n, json_object_get(c, "ids"));
        ok_ids += (size_t)a;
        if (!a && total - ok_ids < 10)
            fprintf(stderr, "\n    case %zu ids differ: %.80s", i, text);
        json_t *want = json_object_get(c, "ids");
        int64_t wn = (int64_t)json_array_size(want);
        int32_t *wids = malloc((size_t)(wn ? wn : 1) * sizeof *wids);
        for (int64_t k = 0; k < wn; k++)
            wids[k] = (int32_t)json_integer_value(json_array_get(want, (size_t)k));
        char *d = NULL, *d2 = NULL;
        size_t dl = 0, dl2 = 0;
        json_t *wd = json_object_get(c, "decoded"), *wd2 = json_object_get(c, "decoded_skip");
        if (numla_tokenizer_decode(t, wids, wn, 0, &d, &dl) == NUMLA_STATUS_OK &&
            dl == json_string_length(wd) && memcmp(d, json_string_value(wd), dl) == 0)
            ok_dec++;
        if (numla_tokenizer_decode(t, wids, wn, 1, &d2, &dl2) == NUMLA_STATUS_OK &&
            dl2 == json_string_length(wd2) && memcmp(d2, json_string_value(wd2), dl2) == 0)
            ok_skip++;
        numla_tokenizer_stream *st = NULL;
        if (numla_tokenizer_stream_create(t, 0, &st) == NUMLA_STATUS_OK) {
            char *acc = malloc(3 * dl + 16);
            size_t an = 0;
            int fine = acc != NULL;
            for (int64_t k = 0; fine && k <= wn; k++) {
                const char *piece;
                size_t pl;
                numla_status ps = k < wn ? numla_tokenizer_stream_push(st, wids[k], &piece, &pl)
                                         : numla_tokenizer_stream_flush(st, &piece, &pl);
                if (ps != NUMLA_STATUS_OK || an + pl > 3 * dl + 16)
                    fine = 0;
                else {
                    memcpy(acc + an, piece, pl);
                    an += pl;
                }
            }
            if (fine && an == json_string_length(wd) && memcmp(acc, json_string_value(wd), an) == 0)
                ok_stream++;
            free(acc);
            numla_tokenizer_stream_destroy(&st);
        }
        free(ids);
        free(wids);
        free(d);
        free(d2);
    }
    fprintf(stderr, "\n    kimi_tok: ids %zu/%zu, decode %zu/%zu, skip-special %zu/%zu, stream "
                    "%zu/%zu identical\n", ok_ids, total, ok_dec, total, ok_skip, total,
            ok_stream, total);
    NUMLA_ASSERT_MSG(total >= 3000 && ok_ids == total && ok_dec == total && ok_skip == total &&
                         ok_stream == total, "kimi_tok: golden mismatches");
    CU_ASSERT_EQUAL(numla_tokenizer_bos(t), numla_tokenizer_token_id(t, "[BOS]"));
    CU_ASSERT_EQUAL(numla_tokenizer_eos(t), numla_tokenizer_token_id(t, "[EOS]"));
    CU_ASSERT_EQUAL(numla_tokenizer_vocab_size(t), 1200 + 256);
    CU_ASSERT(numla_tokenizer_is_special(t, numla_tokenizer_token_id(t, "<|im_end|>")));
    CU_ASSERT_EQUAL(numla_tokenizer_token_id(t, "<|reserved_token_1205|>"), 1205);
    json_decref(root);
    numla_tokenizer_destroy(&t);
}

static uint64_t fnv1a64(const int32_t *ids, int64_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int64_t i = 0; i < n; i++)
        for (int b = 0; b < 4; b++) {
            h ^= (uint8_t)((uint32_t)ids[i] >> (8 * b));
            h *= 0x100000001b3ull;
        }
    return h;
}

static size_t put_utf8(char *o, uint32_t c)
{
    if (c < 0x80) {
        o[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (char)(0xc0 | (c >> 6));
        o[1] = (char)(0x80 | (c & 0x3f));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (char)(0xe0 | (c >> 12));
        o[1] = (char)(0x80 | ((c >> 6) & 0x3f));
        o[2] = (char)(0x80 | (c & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (c >> 18));
    o[1] = (char)(0x80 | ((c >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3f));
    o[3] = (char)(0x80 | (c & 0x3f));
    return 4;
}

static void b64_put(char *o, const uint8_t *b, int n)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    uint32_t w = (uint32_t)b[0] << 16 | (n > 1 ? (uint32_t)b[1] << 8 : 0);
    o[0] = a[w >> 18];
    o[1] = a[(w >> 12) & 63];
    o[2] = n > 1 ? a[(w >> 6) & 63] : '=';
    o[3] = '=';
}

/* The generator's pair vocabulary (make_kimi_golden.py pair_ranks): the 256 bytes, then every
 * byte pair (a, b) at rank 256 + ((256 a + b) * 40503) mod 65536. */
static numla_tokenizer *pair_tokenizer(void)
{
    size_t cap = (256 + 65536) * 16, n = 0;
    char *m = malloc(cap);
    for (int i = 0; i < 256 + 65536; i++) {
        uint8_t b[2];
        int len, rank;
        if (i < 256) {
            b[0] = (uint8_t)i;
            len = 1;
            rank = i;
        } else {
            int v = i - 256;
            b[0] = (uint8_t)(v >> 8);
            b[1] = (uint8_t)v;
            len = 2;
            rank = 256 + (int)(((uint32_t)v * 40503u) % 65536u);
        }
        b64_put(m + n, b, len);
        n += 4;
        n += (size_t)snprintf(m + n, cap - n, " %d\n", rank);
    }
    numla_tokenizer *t = NULL;
    numla_status s = numla_tokenizer_load_tiktoken_text(m, n, NULL, 0, "pairs", &t);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OK, "pair vocabulary: %s", numla_error_message());
    free(m);
    return t;
}

/* Every code point through the whole encoder, in the context of every_code_point.json (each
 * "{c}" replaced by the code point), a chunk of code points at a time: the hash of numla's ids
 * equals the hash of tiktoken's, with the trained vocabulary and with the pair vocabulary
 * (where every piece boundary changes the ids). */
static void every_code_point(numla_tokenizer *t, const char *key)
{
    json_error_t err;
    json_t *root = json_load_file(kdir("every_code_point.json"), 0, &err);
    NUMLA_ASSERT_MSG(root != NULL, "every_code_point.json: %s", err.text);
    if (!t || !root) {
        numla_tokenizer_destroy(&t);
        json_decref(root);
        return;
    }
    const char *ctx = json_string_value(json_object_get(root, "context"));
    int chunk = (int)json_integer_value(json_object_get(root, "chunk"));
    json_t *hashes = json_object_get(root, key);
    CU_ASSERT_FATAL(ctx && chunk > 0 && json_array_size(hashes) > 200);
    size_t ctx_len = strlen(ctx);
    char *text = malloc((size_t)chunk * (ctx_len * 4 + 8));
    uint32_t cp = 0;
    size_t bad = 0, k = 0;
    for (; k < json_array_size(hashes); k++) {
        size_t n = 0;
        uint32_t first = cp;
        for (int i = 0; i < chunk && cp < 0x110000; i++, cp++) {
            if (cp == 0xd800)
                cp = 0xe000;
            for (size_t j = 0; j < ctx_len; j++) {
                if (!strncmp(ctx + j, "{c}", 3)) {
                    n += put_utf8(text + n, cp);
                    j += 2;
                } else {
                    text[n++] = ctx[j];
                }
            }
        }
        int32_t *ids = NULL;
        int64_t nid = 0;
        char got[20] = "";
        if (numla_tokenizer_encode(t, text, n, 0, &ids, &nid) == NUMLA_STATUS_OK)
            snprintf(got, sizeof got, "%016llx", (unsigned long long)fnv1a64(ids, nid));
        free(ids);
        const char *want = json_string_value(json_array_get(hashes, k));
        if (!want || strcmp(got, want)) {
            if (bad++ < 5)
                fprintf(stderr, "\n    %s: code points from U+%04X: ids differ", key, first);
        }
    }
    NUMLA_ASSERT_MSG(cp == 0x110000, "chunks end at U+%04X", cp);
    NUMLA_ASSERT_MSG(bad == 0, "%s: %zu of %zu chunks differ", key, bad, k);
    free(text);
    json_decref(root);
    numla_tokenizer_destroy(&t);
}

static void test_every_code_point(void)
{
    every_code_point(kload(), "fnv1a64");
    every_code_point(pair_tokenizer(), "fnv1a64_pairs");
}

/* The 1 MB mixed text (tests/golden/tokenizer/mixed_1mb.txt) against tiktoken's ids. */
static void test_mixed_1mb(void)
{
    numla_tokenizer *t = kload();
    char rel[256];
    snprintf(rel, sizeof rel, "tests/golden/tokenizer/mixed_1mb.txt");
    FILE *f = fopen(numla_test_source_path(rel), "rb");
    FILE *g = fopen(kdir("mixed_1mb.ids"), "rb");
    CU_ASSERT_FATAL(t && f && g);
    fseek(f, 0, SEEK_END);
    long fl = ftell(f);
    fseek(f, 0, SEEK_SET);
    fseek(g, 0, SEEK_END);
    long gl = ftell(g);
    fseek(g, 0, SEEK_SET);
    char *text = malloc((size_t)fl);
    int32_t *want = malloc((size_t)gl);
    CU_ASSERT_FATAL(text && want && fread(text, 1, (size_t)fl, f) == (size_t)fl &&
                    fread(want, 1, (size_t)gl, g) == (size_t)gl);
    int32_t *ids = NULL;
    int64_t n = 0;
    CU_ASSERT_EQUAL_FATAL(numla_tokenizer_encode(t, text, (size_t)fl, 0, &ids, &n),
                          NUMLA_STATUS_OK);
    int64_t wn = gl / 4, first_bad = -1;
    for (int64_t i = 0; i < n && i < wn && first_bad < 0; i++)
        if (ids[i] != want[i])
            first_bad = i;
    NUMLA_ASSERT_MSG(n == wn && first_bad < 0, "%lld ids (want %lld), first difference at %lld",
                     (long long)n, (long long)wn, (long long)first_bad);
    free(ids);
    free(text);
    free(want);
    fclose(f);
    fclose(g);
    numla_tokenizer_destroy(&t);
}

static void expect_load_error(const char *model, const char *config, const char *needle)
{
    numla_tokenizer *t = NULL;
    numla_status s =
        numla_tokenizer_load_tiktoken_text(model, strlen(model), config, 0, "tk.model", &t);
    NUMLA_ASSERT_MSG(s != NUMLA_STATUS_OK && t == NULL, "accepted: %s", needle);
    NUMLA_ASSERT_MSG(strstr(numla_error_message(), needle) != NULL, "message '%s' lacks '%s'",
                     numla_error_message(), needle);
}

/* A file with the 256 single bytes as ranks 0..255, then extra lines. */
static char *bytes_model(const char *extra)
{
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t cap = 256 * 16 + strlen(extra) + 1, n = 0;
    char *m = malloc(cap);
    for (int b = 0; b < 256; b++)
        n += (size_t)snprintf(m + n, cap - n, "%c%c== %d\n", b64[b >> 2], b64[(b & 3) << 4], b);
    snprintf(m + n, cap - n, "%s", extra);
    return m;
}

static void test_load_errors(void)
{
    char *m;
    /* "aGk=" is "hi", "aGk" is not padded */
    expect_load_error((m = bytes_model("aGk=\n")), NULL, "tk.model:257: expected '<base64 token> <rank>'"), free(m);
    expect_load_error((m = bytes_model("aGk= 256 7\n")), NULL, "tk.model:257: expected"), free(m);
    expect_load_error((m = bytes_model("aGk 256\n")), NULL, "tk.model:257: token 'aGk' is not base64"), free(m);
    expect_load_error((m = bytes_model("a*k= 256\n")), NULL, "tk.model:257: token"), free(m);
    expect_load_error((m = bytes_model("aGk= -1\n")), NULL, "tk.model:257: rank '-1'"), free(m);
    expect_load_error((m = bytes_model("aGk= 1x\n")), NULL, "tk.model:257: rank '1x'"), free(m);
    expect_load_error((m = bytes_model("aGk= 5\n")), NULL, "tk.model:257: rank 5 already given on line 6"), free(m);
    expect_load_error((m = bytes_model("\naGk= 257\n")), NULL, "tk.model:258: rank 257 leaves rank 256 unused"), free(m);
    expect_load_error((m = bytes_model("aGk= 256\naGk= 257\n")), NULL, "tk.model:258: the token of rank 257 is the token of rank 256 (line 257)"), free(m);
    expect_load_error("", NULL, "tk.model: no tokens");
    expect_load_error("QQ== 0\n", NULL, "no token for the single byte 0x00");
    /* specials: id inside the ranks, outside the 256 special ids, same bytes as a BPE token */
    m = bytes_model("aGk= 256\n");
    expect_load_error(m, "{\"added_tokens_decoder\": {\"12\": {\"content\": \"<x>\"}}}",
                      "special token '<x>' has id 12, the id of the BPE token of rank 12 "
                      "(tk.model:13)");
    expect_load_error(m, "{\"added_tokens_decoder\": {\"900\": {\"content\": \"<x>\"}}}",
                      "special token '<x>' has id 900, outside the 256 special ids [257, 513)");
    expect_load_error(m, "{\"added_tokens_decoder\": {\"300\": {\"content\": \"hi\"}}}",
                      "special token 'hi' (id 300) is also the BPE token of rank 256 (tk.model:257)");
    expect_load_error(m, "{\"added_tokens_decoder\": {\"300\": {\"content\": \"<y>\"}, "
                         "\"301\": {\"content\": \"<y>\"}}}", "special token '<y>' has two ids");
    expect_load_error(m, "{\"added_tokens_decoder\": {\"abc\": {\"content\": \"<y>\"}}}",
                      "key 'abc' is not an id");
    expect_load_error(m, "[1]", "not a JSON object");
    /* the good file loads, and CRLF line ends are fine */
    numla_tokenizer *t = NULL;
    CU_ASSERT_EQUAL(numla_tokenizer_load_tiktoken_text(m, strlen(m), NULL, 0, NULL, &t),
                    NUMLA_STATUS_OK);
    int32_t *ids = NULL;
    int64_t n = 0;
    if (t && numla_tokenizer_encode(t, "hi", 2, 0, &ids, &n) == NUMLA_STATUS_OK) {
        CU_ASSERT_EQUAL(n, 1);
        CU_ASSERT_EQUAL(ids[0], 256);
    }
    free(ids);
    numla_tokenizer_destroy(&t);
    /* the model's vocab_size bounds ranks + 256 specials */
    CU_ASSERT_NOT_EQUAL(numla_tokenizer_load_tiktoken_text(m, strlen(m), NULL, 500, NULL, &t),
                        NUMLA_STATUS_OK);
    CU_ASSERT(strstr(numla_error_message(), "vocab_size 500") != NULL);
    free(m);
}

NUMLA_TEST_SUITE(kimi_tokenizer_golden, NULL, NULL, NUMLA_TEST(test_classes_every_code_point),
                 NUMLA_TEST(test_golden_cases), NUMLA_TEST(test_every_code_point),
                 NUMLA_TEST(test_mixed_1mb),
                 NUMLA_TEST(test_load_errors))
