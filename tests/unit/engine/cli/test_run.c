/* End-to-end test of `numla run` (engine/cli/run_cmd.c) on the golden v2lite model: a requests file
 * with good requests (greedy = the HF reference continuation, seeded sampling reproducible,
 * logprobs, max_tokens 0, stop tokens) and bad lines (malformed JSON, out-of-vocabulary token,
 * negative max_tokens, too long for the context, unknown field), each answered in order. */
#include "test_util.h"


#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cli/run_cmd.h"

static json_t *result_by_id(json_t **res, int n, const char *id)
{
    for (int i = 0; i < n; i++) {
        json_t *v = json_object_get(res[i], "id");
        if (json_is_string(v) && !strcmp(json_string_value(v), id))
            return res[i];
    }
    return NULL;
}

static void test_run_e2e(void)
{
    char model[1024], in[1024], out[1024];
    snprintf(model, sizeof model, "%s", numla_test_source_path("tests/golden/v2lite"));
    snprintf(in, sizeof in, "%s/run_requests.jsonl", numla_test_tmpdir());
    snprintf(out, sizeof out, "%s/run_results.jsonl", numla_test_tmpdir());

    /* prompt0 and its greedy continuation from the reference */
    char path[1200];
    snprintf(path, sizeof path, "%s/expected.json", model);
    json_t *exp = json_load_file(path, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(exp);
    json_t *p0 = json_array_get(json_object_get(exp, "prompts"), 0);
    char *toks = json_dumps(json_object_get(p0, "tokens"), JSON_COMPACT);
    json_t *greedy = json_object_get(p0, "greedy");

    FILE *f = fopen(in, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fprintf(f, "{\"id\": \"greedy\", \"prompt_tokens\": %s, \"max_tokens\": 16, \"temperature\": 0, \"ignore_eos\": true}\n", toks);
    fprintf(f, "{\"id\": \"bad-json\", \"prompt_tokens\": [1, 2\n");                          /* line 2 */
    fprintf(f, "{\"id\": \"s1\", \"prompt_tokens\": [5, 6, 7], \"max_tokens\": 8, \"temperature\": 0.9, \"top_k\": 50, \"top_p\": 0.95, \"seed\": 11, \"ignore_eos\": true, \"logprobs\": 2}\n");
    fprintf(f, "{\"id\": \"oov\", \"prompt_tokens\": [5, 256]}\n");                             /* line 4 */
    fprintf(f, "\n");                                                                            /* blank: skipped */
    fprintf(f, "{\"id\": \"s1-again\", \"prompt_tokens\": [5, 6, 7], \"max_tokens\": 8, \"temperature\": 0.9, \"top_k\": 50, \"top_p\": 0.95, \"seed\": 11, \"ignore_eos\": true, \"logprobs\": 2}\n");
    fprintf(f, "{\"id\": \"neg\", \"prompt_tokens\": [5], \"max_tokens\": -1}\n");              /* line 7 */
    fprintf(f, "{\"id\": \"long\", \"prompt_tokens\": [5, 6], \"max_tokens\": 100000}\n");     /* line 8 */
    fprintf(f, "{\"id\": \"zero\", \"prompt_tokens\": [5, 6], \"max_tokens\": 0}\n");
    fprintf(f, "{\"id\": \"stop\", \"prompt_tokens\": %s, \"max_tokens\": 16, \"temperature\": 0, \"stop_token_ids\": [%lld]}\n",
            toks, (long long)json_integer_value(json_array_get(greedy, 2)));
    fprintf(f, "{\"id\": \"typo\", \"prompt_tokens\": [5], \"max_token\": 3}\n");              /* line 11 */
    fclose(f);
    free(toks);

    char *argv[] = {"run", "--model", model, "--input", in, "--output", out, "--kv-dtype", "f32",
                    "--max-context", "256", "--threads", "1", NULL};
    int rc = numla_run_main(13, argv);
    CU_ASSERT_EQUAL(rc, 0);

    f = fopen(out, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    json_t *res[32];
    int n = 0;
    char line[65536];
    while (n < 32 && fgets(line, sizeof line, f)) {
        res[n] = json_loads(line, 0, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(res[n]);
        n++;
    }
    fclose(f);
    CU_ASSERT_EQUAL(n, 10); /* one per non-blank line, in completion order */

    json_t *g = result_by_id(res, n, "greedy");
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    CU_ASSERT_TRUE(json_equal(json_object_get(g, "output_tokens"), greedy));
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(g, "finish_reason")), "length");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(g, "usage"), "completion_tokens")), 16);

    json_t *s1 = result_by_id(res, n, "s1"), *s2 = result_by_id(res, n, "s1-again");
    CU_ASSERT_PTR_NOT_NULL_FATAL(s1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s2);
    CU_ASSERT_TRUE(json_equal(json_object_get(s1, "output_tokens"), json_object_get(s2, "output_tokens")));
    CU_ASSERT_EQUAL(json_array_size(json_object_get(s1, "output_tokens")), 8);
    json_t *lp = json_object_get(s1, "logprobs");
    CU_ASSERT_EQUAL(json_array_size(lp), 8);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(json_array_get(lp, 0), "top")), 2);
    CU_ASSERT_TRUE(json_real_value(json_object_get(json_array_get(lp, 0), "logprob")) <= 0);

    struct { const char *id, *needle; } errs[] = {
        {"oov", "line 4: "}, {"neg", "line 7: "}, {"long", "line 8: "}, {"typo", "line 11: "}};
    for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++) {
        json_t *r = result_by_id(res, n, errs[i].id);
        NUMLA_ASSERT_MSG(r != NULL, "no result for %s", errs[i].id);
        if (!r)
            continue;
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(r, "finish_reason")), "error");
        const char *msg = json_string_value(json_object_get(r, "error"));
        NUMLA_ASSERT_MSG(msg && strstr(msg, errs[i].needle) == msg, "%s: error '%s'", errs[i].id, msg ? msg : "(none)");
    }
    /* the malformed line has no readable id: exactly one record with a null id, naming line 2
     * (records come in completion order, so find it rather than index it) */
    int null_ids = 0;
    for (int i = 0; i < n; i++) {
        if (!json_is_null(json_object_get(res[i], "id")))
            continue;
        null_ids++;
        const char *msg = json_string_value(json_object_get(res[i], "error"));
        NUMLA_ASSERT_MSG(msg && strstr(msg, "line 2: ") == msg, "null-id error '%s'", msg ? msg : "(none)");
    }
    CU_ASSERT_EQUAL(null_ids, 1);

    json_t *z = result_by_id(res, n, "zero");
    CU_ASSERT_PTR_NOT_NULL_FATAL(z);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(z, "output_tokens")), 0);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(z, "finish_reason")), "length");

    json_t *st = result_by_id(res, n, "stop");
    CU_ASSERT_PTR_NOT_NULL_FATAL(st);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(st, "finish_reason")), "stop");
    CU_ASSERT_EQUAL(json_array_size(json_object_get(st, "output_tokens")), 3);

    for (int i = 0; i < n; i++)
        json_decref(res[i]);
    json_decref(exp);

    /* missing arguments / bad model dir: non-zero exit, no crash */
    char *bad1[] = {"run", "--model", model, NULL};
    CU_ASSERT_NOT_EQUAL(numla_run_main(3, bad1), 0);
    char *bad2[] = {"run", "--model", "/nonexistent", "--input", in, "--output", out, NULL};
    CU_ASSERT_NOT_EQUAL(numla_run_main(7, bad2), 0);
}


NUMLA_TEST_SUITE(run, numla_test_mpi_init, numla_test_mpi_finalize, NUMLA_TEST(test_run_e2e))
