/* Tests for text requests in numla run (engine/cli/run_cmd.c, engine/serving/request_io.c): "prompt" text encoded
 * by the model's tokenizer, "text" in the results, "stop" strings. The references are the
 * tokenizer itself (encode/decode, checked against Hugging Face in the tokenizer golden suite)
 * and a run of the same greedy request without stop strings. */
#include "test_util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cli/run_cmd.h"
#include "engine/synth/synth.h"
#include "engine/text/tokenizer.h"

static char model_dir[1024];

static int suite_init(void)
{
    if (numla_test_mpi_init())
        return 1;
    snprintf(model_dir, sizeof model_dir, "%s/tiny_text", numla_test_tmpdir());
    char tok_dir[1024];
    snprintf(tok_dir, sizeof tok_dir, "%s", numla_test_source_path("tests/golden/tokenizer/bpe1k"));
    numla_synth_options o = {.preset = "tiny", .out_dir = model_dir, .seed = 5,
                             .dtype = NUMLA_DTYPE_F32, .tokenizer_dir = tok_dir};
    return numla_synth_write(&o, NULL) != NUMLA_STATUS_OK;
}

/* Run the requests (one JSON object per line) and return the results keyed by id. */
static json_t *run_requests(const char *name, const char *requests)
{
    char in[1200], out[1200];
    snprintf(in, sizeof in, "%s/%s.in.jsonl", numla_test_tmpdir(), name);
    snprintf(out, sizeof out, "%s/%s.out.jsonl", numla_test_tmpdir(), name);
    FILE *f = fopen(in, "w");
    if (!f)
        return NULL;
    fputs(requests, f);
    fclose(f);
    char *argv[] = {"run", "--model", model_dir, "--input", in, "--output", out, "--threads", "1",
                    "--kv-blocks", "256", "--no-progress", NULL};
    if (numla_run_main(12, argv) != 0)
        return NULL;
    f = fopen(out, "r");
    if (!f)
        return NULL;
    json_t *by_id = json_object();
    char line[1 << 16];
    while (fgets(line, sizeof line, f)) {
        json_t *r = json_loads(line, 0, NULL);
        CU_ASSERT_PTR_NOT_NULL(r);
        json_t *id = r ? json_object_get(r, "id") : NULL;
        if (id && json_is_string(id))
            json_object_set(by_id, json_string_value(id), r);
        json_decref(r);
    }
    fclose(f);
    return by_id;
}

static int32_t *tokens_of(json_t *r, int64_t *n)
{
    json_t *a = json_object_get(r, "output_tokens");
    *n = (int64_t)json_array_size(a);
    int32_t *t = malloc((size_t)(*n + 1) * sizeof *t);
    for (int64_t i = 0; i < *n; i++)
        t[i] = (int32_t)json_integer_value(json_array_get(a, (size_t)i));
    return t;
}

static void test_text_prompt_and_output(void)
{
    const char *prompt = "Hello, world! The quick brown fox 123";
    json_t *res = run_requests("text",
        "{\"id\": \"text\", \"prompt\": \"Hello, world! The quick brown fox 123\", \"max_tokens\": 12,"
        " \"temperature\": 0, \"ignore_eos\": true}\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(res);
    json_t *r = json_object_get(res, "text");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(r, "finish_reason")), "length");

    numla_tokenizer *tok = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_tokenizer_load(model_dir, &tok), NUMLA_STATUS_OK);
    int32_t *ids = NULL;
    int64_t nids = 0;
    CU_ASSERT_EQUAL_FATAL(numla_tokenizer_encode(tok, prompt, strlen(prompt), 1, &ids, &nids),
                          NUMLA_STATUS_OK);
    json_t *usage = json_object_get(r, "usage");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(usage, "prompt_tokens")), nids);

    /* "text" is the decoded output tokens */
    int64_t n = 0;
    int32_t *out = tokens_of(r, &n);
    CU_ASSERT_EQUAL(n, 12);
    char *text = NULL;
    size_t len = 0;
    CU_ASSERT_EQUAL(numla_tokenizer_decode(tok, out, n, 1, &text, &len), NUMLA_STATUS_OK);
    const char *got = json_string_value(json_object_get(r, "text"));
    NUMLA_ASSERT_MSG(got && text && !strcmp(got, text), "text '%s' vs decode '%s'", got ? got : "(none)", text ? text : "(none)");

    /* the same prompt sent as ids gives the same tokens */
    char idbuf[4096] = "[";
    for (int64_t i = 0; i < nids; i++)
        snprintf(idbuf + strlen(idbuf), sizeof idbuf - strlen(idbuf), "%s%d", i ? "," : "", ids[i]);
    strcat(idbuf, "]");
    char req[8192];
    snprintf(req, sizeof req, "{\"id\": \"ids\", \"prompt_tokens\": %s, \"max_tokens\": 12, "
             "\"temperature\": 0, \"ignore_eos\": true}\n", idbuf);
    json_t *res2 = run_requests("ids", req);
    CU_ASSERT_PTR_NOT_NULL_FATAL(res2);
    json_t *r2 = json_object_get(res2, "ids");
    CU_ASSERT_TRUE(json_equal(json_object_get(r2, "output_tokens"), json_object_get(r, "output_tokens")));
    CU_ASSERT_PTR_NULL(json_object_get(r2, "text")); /* token requests get no text */

    free(text);
    free(out);
    free(ids);
    numla_tokenizer_destroy(&tok);
    json_decref(res);
    json_decref(res2);
}

/* A stop string ends generation at the first token that completes it, and is cut from the text. */
static void test_stop_strings(void)
{
    const char *base = "{\"id\": \"free\", \"prompt\": \"The quick brown fox jumps\", \"max_tokens\": 24,"
                       " \"temperature\": 0, \"ignore_eos\": true}\n";
    json_t *res = run_requests("free", base);
    CU_ASSERT_PTR_NOT_NULL_FATAL(res);
    json_t *r = json_object_get(res, "free");
    const char *full = json_string_value(json_object_get(r, "text"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(full);
    size_t flen = strlen(full);
    CU_ASSERT_FATAL(flen >= 6);
    /* a stop string taken from the middle of the free-running text */
    /* one whole UTF-8 character from the middle (a cut character would not be valid JSON) */
    char stop[8];
    size_t at = flen / 2;
    while (at > 0 && ((unsigned char)full[at] & 0xc0) == 0x80)
        at--;
    unsigned char lead = (unsigned char)full[at];
    size_t cl = lead < 0x80 ? 1 : lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
    memcpy(stop, full + at, cl);
    stop[cl] = '\0';
    const char *first = strstr(full, stop);
    CU_ASSERT_PTR_NOT_NULL_FATAL(first);
    json_t *sj = json_string(stop);
    char *stop_json = json_dumps(sj, JSON_ENCODE_ANY);
    CU_ASSERT_PTR_NOT_NULL_FATAL(stop_json);
    char req[1024];
    snprintf(req, sizeof req, "{\"id\": \"stopped\", \"prompt\": \"The quick brown fox jumps\", "
             "\"max_tokens\": 24, \"temperature\": 0, \"ignore_eos\": true, \"stop\": [\"@@never@@\", %s]}\n",
             stop_json);
    json_t *res2 = run_requests("stopped", req);
    CU_ASSERT_PTR_NOT_NULL_FATAL(res2);
    json_t *r2 = json_object_get(res2, "stopped");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r2);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(r2, "finish_reason")), "stop");
    const char *cut = json_string_value(json_object_get(r2, "text"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(cut);
    /* text = the free run's text up to the first occurrence, stop string excluded */
    NUMLA_ASSERT_MSG(strlen(cut) == (size_t)(first - full) && !strncmp(cut, full, strlen(cut)),
                     "stop '%s': text '%s', free text '%s'", stop, cut, full);
    /* tokens: a prefix of the free run, ending at the token that completed the stop string */
    int64_t n1 = 0, n2 = 0;
    int32_t *t1 = tokens_of(r, &n1), *t2 = tokens_of(r2, &n2);
    CU_ASSERT_TRUE(n2 >= 1 && n2 <= n1 && !memcmp(t1, t2, (size_t)n2 * sizeof *t1));
    numla_tokenizer *tok = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_tokenizer_load(model_dir, &tok), NUMLA_STATUS_OK);
    char *before = NULL;
    size_t blen = 0;
    CU_ASSERT_EQUAL(numla_tokenizer_decode(tok, t2, n2 - 1, 1, &before, &blen), NUMLA_STATUS_OK);
    CU_ASSERT_PTR_NULL(before ? strstr(before, stop) : (char *)1);
    free(before);
    numla_tokenizer_destroy(&tok);
    free(t1);
    free(t2);
    free(stop_json);
    json_decref(sj);
    json_decref(res);
    json_decref(res2);
}

/* Text errors are per request and name the problem. */
static void test_text_errors(void)
{
    json_t *res = run_requests("errs",
        "{\"id\": \"both\", \"prompt\": \"x\", \"prompt_tokens\": [1]}\n"
        "{\"id\": \"notstr\", \"prompt\": 5}\n"
        "{\"id\": \"emptystop\", \"prompt\": \"x\", \"stop\": [\"\"]}\n"
        "{\"id\": \"ok\", \"prompt\": \"fine\", \"max_tokens\": 2, \"temperature\": 0}\n"
        "{\"id\": \"raw\", \"prompt\": \"ab\xff\xfe\"}\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(res);
    struct { const char *id, *needle; } cases[] = {
        {"both", "line 1: give either"}, {"notstr", "line 2: field \"prompt\" must be a string"},
        {"emptystop", "line 3: stop[0]"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *r = json_object_get(res, cases[i].id);
        const char *e = r ? json_string_value(json_object_get(r, "error")) : NULL;
        NUMLA_ASSERT_MSG(e && strstr(e, cases[i].needle) == e, "%s: '%s'", cases[i].id, e ? e : "(none)");
    }
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(res, "ok"), "finish_reason")),
                           "length");
    /* the line with raw invalid UTF-8 has no readable id: its record has a null id and names the
     * byte (offset 27 of line 5: after {"id": "raw", "prompt": "ab) */
    int found = 0;
    char path[1200];
    snprintf(path, sizeof path, "%s/errs.out.jsonl", numla_test_tmpdir());
    FILE *f = fopen(path, "r");
    char line[4096];
    while (f && fgets(line, sizeof line, f))
        found |= strstr(line, "\"line 5: invalid UTF-8 at byte offset 27 of the line\"") != NULL;
    if (f)
        fclose(f);
    CU_ASSERT_TRUE(found);
    json_decref(res);
}

NUMLA_TEST_SUITE(run_text, suite_init, numla_test_mpi_finalize, NUMLA_TEST(test_text_prompt_and_output),
                 NUMLA_TEST(test_stop_strings), NUMLA_TEST(test_text_errors))
