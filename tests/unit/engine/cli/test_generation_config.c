/* Tests for engine/cli/generation_config.c and its use by numla run / serve: the fields read
 * (eos as an integer or a list, bos, temperature, top_p, top_k, do_sample), the errors naming the
 * file and the field, the request defaults (JSONL and HTTP parsers) and, end to end, a
 * generation_config.json EOS that stops a greedy request where the model would go on
 * (--generation-config none ignores it) and a file's top_k 1 that makes requests greedy. */
#define _GNU_SOURCE
#include "test_util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cli/engine_opts.h"
#include "engine/cli/generation_config.h"
#include "engine/cli/run_cmd.h"
#include "engine/http/openai.h"
#include "engine/serving/request_io.h"
#include "engine/synth/synth.h"

static char model_dir[1024];

static int suite_init(void)
{
    if (numla_test_mpi_init())
        return 1;
    snprintf(model_dir, sizeof model_dir, "%s/gen_cfg", numla_test_tmpdir());
    numla_synth_options o = {.preset = "tiny", .out_dir = model_dir, .seed = 5,
                             .dtype = NUMLA_DTYPE_F32};
    return numla_synth_write(&o, NULL) != NUMLA_STATUS_OK;
}

static numla_status parse(const char *text, numla_generation_config *g)
{
    return numla_generation_config_parse(text, strlen(text), "gen.json", 1000, g);
}

/* DeepSeek-V3's layout (an integer eos, sampling on) and GLM's (a list of eos). */
static void test_fields(void)
{
    numla_generation_config g;
    CU_ASSERT_EQUAL_FATAL(parse("{\"_from_model_config\": true, \"bos_token_id\": 0, "
                                "\"eos_token_id\": 1, \"do_sample\": true, \"temperature\": 0.6, "
                                "\"top_p\": 0.95, \"transformers_version\": \"4.46.3\"}", &g),
                          NUMLA_STATUS_OK);
    CU_ASSERT(g.found);
    CU_ASSERT_EQUAL(g.bos_token_id, 0);
    CU_ASSERT_EQUAL(g.num_eos, 1);
    CU_ASSERT_EQUAL(g.eos_token_ids[0], 1);
    CU_ASSERT(g.has_temperature && g.temperature == 0.6);
    CU_ASSERT(g.has_top_p && g.top_p == 0.95);
    CU_ASSERT(!g.has_top_k);
    CU_ASSERT(g.has_do_sample && g.do_sample);
    CU_ASSERT_EQUAL_FATAL(parse("{\"eos_token_id\": [820, 827, 829], \"top_k\": 40, "
                                "\"pad_token_id\": 820, \"max_length\": "
                                "1000000000000000019884624838656}", &g), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(g.bos_token_id, -1);
    CU_ASSERT_EQUAL(g.num_eos, 3);
    CU_ASSERT_EQUAL(g.eos_token_ids[2], 829);
    CU_ASSERT(g.has_top_k && g.top_k == 40);
    CU_ASSERT(!g.has_temperature && !g.has_do_sample);
    /* nulls are absent */
    CU_ASSERT_EQUAL_FATAL(parse("{\"eos_token_id\": null, \"temperature\": null}", &g),
                          NUMLA_STATUS_OK);
    CU_ASSERT(g.num_eos == 0 && !g.has_temperature);
}

/* A field numla uses, wrong: an error naming the file and the field. */
static void test_errors(void)
{
    static const struct {
        const char *text, *field;
    } bad[] = {
        {"{\"temperature\": -0.5}", "temperature"},
        {"{\"temperature\": \"hot\"}", "temperature"},
        {"{\"top_p\": 0}", "top_p"},
        {"{\"top_p\": 1.5}", "top_p"},
        {"{\"top_k\": 2.5}", "top_k"},
        {"{\"top_k\": 1000000000000000019884624838656}", "top_k"},
        {"{\"do_sample\": 1}", "do_sample"},
        {"{\"eos_token_id\": 1000}", "eos_token_id"},
        {"{\"eos_token_id\": [1, -2]}", "eos_token_id[1]"},
        {"{\"eos_token_id\": [1, 1000000000000000019884624838656]}", "eos_token_id[1]"},
        {"{\"eos_token_id\": \"</s>\"}", "eos_token_id"},
        {"{\"bos_token_id\": 1000}", "bos_token_id"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        numla_generation_config g;
        CU_ASSERT_EQUAL(parse(bad[i].text, &g), NUMLA_STATUS_FORMAT);
        const char *msg = numla_error_message();
        int ok = strstr(msg, "gen.json") && strstr(msg, bad[i].field);
        if (!ok)
            fprintf(stderr, "generation_config: %s: %s\n", bad[i].text, msg);
        CU_ASSERT(ok);
    }
    numla_generation_config g;
    CU_ASSERT_EQUAL(parse("[1, 2]", &g), NUMLA_STATUS_FORMAT);
    CU_ASSERT_EQUAL(parse("{\"temperature\": ", &g), NUMLA_STATUS_FORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "gen.json:1:"));
}

/* The defaults: the file's values over the sampler's, do_sample false is greedy, EOS ids join
 * the config's once each. */
static void test_defaults_and_eos(void)
{
    numla_generation_config g;
    numla_sampling_params p;
    CU_ASSERT_EQUAL_FATAL(parse("{\"temperature\": 0.6, \"top_p\": 0.95, \"top_k\": 20}", &g),
                          NUMLA_STATUS_OK);
    numla_sampling_params_default(&p);
    numla_generation_config_defaults(&g, &p);
    CU_ASSERT(p.temperature == 0.6 && p.top_p == 0.95 && p.top_k == 20 && p.max_tokens == 16);
    char what[256];
    numla_generation_config_describe(&g, what, sizeof what);
    CU_ASSERT_STRING_EQUAL(what, "temperature 0.6, top_p 0.95, top_k 20");
    CU_ASSERT_EQUAL_FATAL(parse("{\"do_sample\": false, \"eos_token_id\": [5, 2]}", &g),
                          NUMLA_STATUS_OK);
    numla_sampling_params_default(&p);
    numla_generation_config_defaults(&g, &p);
    CU_ASSERT(p.temperature == 0.0 && p.top_p == 1.0);
    numla_generation_config_describe(&g, what, sizeof what);
    CU_ASSERT_STRING_EQUAL(what, "greedy (do_sample false); stop tokens 5, 2");
    numla_model_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.num_eos = 1;
    cfg.eos_token_ids[0] = 2;
    CU_ASSERT_EQUAL(numla_generation_config_add_eos(&g, &cfg), 1);
    CU_ASSERT_EQUAL(cfg.num_eos, 2);
    CU_ASSERT_EQUAL(cfg.eos_token_ids[1], 5);
    CU_ASSERT_EQUAL(numla_generation_config_add_eos(&g, &cfg), 0);
    /* an empty file: nothing taken, nothing said */
    CU_ASSERT_EQUAL_FATAL(parse("{}", &g), NUMLA_STATUS_OK);
    numla_generation_config_describe(&g, what, sizeof what);
    CU_ASSERT_STRING_EQUAL(what, "");
}

/* Both request parsers start from the defaults; a request's own field wins. */
static void test_request_parsers_use_defaults(void)
{
    numla_sampling_params d;
    numla_sampling_params_default(&d);
    d.temperature = 0.25;
    d.top_p = 0.5;
    numla_request_limits lim = {.vocab_size = 100, .max_context = 64, .defaults = &d};
    numla_request r;
    const char *line = "{\"id\": 1, \"prompt_tokens\": [1, 2], \"top_p\": 0.9}";
    CU_ASSERT_EQUAL_FATAL(numla_request_parse(line, strlen(line), 1, &lim, &r), NUMLA_STATUS_OK);
    CU_ASSERT_STRING_EQUAL(r.error, "");
    CU_ASSERT(r.params.temperature == 0.25 && r.params.top_p == 0.9);
    numla_request_free(&r);
    numla_openai_limits ol = {.vocab_size = 100, .max_context = 64, .defaults = &d};
    numla_openai_request q;
    numla_openai_error e;
    const char *body = "{\"model\": \"m\", \"prompt\": [1, 2], \"temperature\": 1.5}";
    CU_ASSERT_EQUAL_FATAL(numla_openai_parse(NUMLA_OPENAI_COMPLETIONS, body, strlen(body), &ol,
                                             &q, &e), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(e.status, 0);
    CU_ASSERT(q.params.temperature == 1.5 && q.params.top_p == 0.5);
    numla_openai_request_free(&q);
    ol.defaults = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_openai_parse(NUMLA_OPENAI_COMPLETIONS, body, strlen(body), &ol,
                                             &q, &e), NUMLA_STATUS_OK);
    CU_ASSERT(q.params.top_p == 1.0);
    numla_openai_request_free(&q);
}

static int write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs(text, f);
    return fclose(f);
}

/* numla run over model_dir: the output tokens and finish reason of each request, by id. */
static json_t *run(const char *name, const char *requests, const char *gen_mode)
{
    char in[1200], out[1200];
    snprintf(in, sizeof in, "%s/%s.in.jsonl", numla_test_tmpdir(), name);
    snprintf(out, sizeof out, "%s/%s.out.jsonl", numla_test_tmpdir(), name);
    if (write_text(in, requests))
        return NULL;
    char *argv[] = {"run", "--model", model_dir, "--input", in, "--output", out, "--threads",
                    "1", "--kv-blocks", "256", "--no-progress", "--generation-config",
                    (char *)gen_mode, NULL};
    if (numla_run_main(14, argv) != 0)
        return NULL;
    FILE *f = fopen(out, "r");
    if (!f)
        return NULL;
    json_t *by_id = json_object();
    char line[1 << 14];
    while (fgets(line, sizeof line, f)) {
        json_t *r = json_loads(line, 0, NULL);
        const char *id = json_string_value(json_object_get(r, "id"));
        if (id)
            json_object_set(by_id, id, r);
        json_decref(r);
    }
    fclose(f);
    return by_id;
}

/* The greedy continuation's first token, as the file's EOS, stops the request there. */
static void test_run_eos_and_defaults(void)
{
    const char *greedy = "{\"id\": \"g\", \"prompt_tokens\": [1, 2, 3], \"max_tokens\": 4, "
                         "\"temperature\": 0}\n";
    char path[1200];
    snprintf(path, sizeof path, "%s/generation_config.json", model_dir);
    remove(path);
    json_t *base = run("gen_base", greedy, "auto");
    CU_ASSERT_PTR_NOT_NULL_FATAL(base);
    json_t *toks = json_object_get(json_object_get(base, "g"), "output_tokens");
    CU_ASSERT_EQUAL_FATAL(json_array_size(toks), 4);
    json_int_t first = json_integer_value(json_array_get(toks, 0));
    char text[512];
    snprintf(text, sizeof text, "{\"bos_token_id\": 0, \"eos_token_id\": [%lld], \"top_k\": 1, "
             "\"max_length\": 1000000000000000019884624838656}", (long long)first);
    CU_ASSERT_EQUAL_FATAL(write_text(path, text), 0);
    /* auto: stops at the file's EOS; a request without sampling fields is greedy (top_k 1) */
    char reqs[1024];
    snprintf(reqs, sizeof reqs, "%s{\"id\": \"d\", \"prompt_tokens\": [1, 2, 3], "
             "\"max_tokens\": 4, \"ignore_eos\": true}\n", greedy);
    json_t *a = run("gen_auto", reqs, "auto");
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    json_t *g = json_object_get(a, "g");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(g, "finish_reason")), "stop");
    CU_ASSERT_EQUAL(json_array_size(json_object_get(g, "output_tokens")), 1);
    CU_ASSERT(json_equal(json_object_get(json_object_get(a, "d"), "output_tokens"), toks));
    /* none: the file is ignored */
    json_t *n = run("gen_none", greedy, "none");
    CU_ASSERT_PTR_NOT_NULL_FATAL(n);
    CU_ASSERT_STRING_EQUAL(
        json_string_value(json_object_get(json_object_get(n, "g"), "finish_reason")), "length");
    /* a bad file refuses the model, naming the file and the field */
    CU_ASSERT_EQUAL_FATAL(write_text(path, "{\"top_p\": 2}"), 0);
    CU_ASSERT_PTR_NULL(run("gen_bad", greedy, "auto"));
    remove(path);
    json_decref(base);
    json_decref(a);
    json_decref(n);
}

NUMLA_TEST_SUITE(generation_config, suite_init, numla_test_mpi_finalize, NUMLA_TEST(test_fields),
                 NUMLA_TEST(test_errors), NUMLA_TEST(test_defaults_and_eos),
                 NUMLA_TEST(test_request_parsers_use_defaults),
                 NUMLA_TEST(test_run_eos_and_defaults))
