/* A model directory whose JSON files carry integers beyond 64 bits (issue 38): transformers
 * writes tokenizer_config.json's "model_max_length" as 1000000000000000019884624838656 when no
 * length was set, and jansson refuses such an integer. Every model file is read through
 * engine/json/model_json.h, so such a directory loads and serves (token ids, text prompts, the
 * tokenizer's bos/eos, the chat template, numla quantize), while a field numla uses that is out
 * of range (max_position_embeddings = 1e30) is an error naming the file and the field. */
#define _GNU_SOURCE
#include "test_util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cli/model_text.h"
#include "engine/cli/run_cmd.h"
#include "engine/model/config.h"
#include "engine/synth/quantized_checkpoint.h"
#include "engine/synth/synth.h"
#include "engine/text/chat_template.h"
#include "engine/text/tokenizer.h"

#define SENTINEL "1000000000000000019884624838656"

static char v2_dir[1024], kimi_dir[1024];

static int spit(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int rc = fputs(text, f) < 0;
    return fclose(f) != 0 || rc ? -1 : 0;
}

/* dir/file with `"key": value` as its first field, or its value replaced when the key is there
 * (as a number). The value is written as text: jansson could not write the sentinel. */
static int set_number(const char *dir, const char *file, const char *key, const char *value)
{
    char path[1200], pat[128];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    snprintf(pat, sizeof pat, "\"%s\":", key);
    char *text = numla_test_read_file(path, NULL), *out = NULL;
    if (!text)
        return -1;
    char *at = strstr(text, pat);
    int rc;
    if (at) {
        char *v = at + strlen(pat);
        while (*v == ' ')
            v++;
        char *e = v;
        while (*e == '-' || (*e >= '0' && *e <= '9') || *e == '.' || *e == 'e' || *e == 'E')
            e++;
        rc = asprintf(&out, "%.*s%s%s", (int)(v - text), text, value, e);
    } else {
        char *brace = strchr(text, '{');
        if (!brace) {
            free(text);
            return -1;
        }
        rc = asprintf(&out, "%.*s\"%s\": %s, %s", (int)(brace + 1 - text), text, key, value,
                      brace + 1);
    }
    free(text);
    if (rc < 0)
        return -1;
    rc = spit(path, out);
    free(out);
    return rc;
}

static int suite_init(void)
{
    if (numla_test_mpi_init())
        return 1;
    snprintf(v2_dir, sizeof v2_dir, "%s/huge_int_v2", numla_test_tmpdir());
    char tok[1024];
    snprintf(tok, sizeof tok, "%s", numla_test_source_path("tests/golden/tokenizer/bpe1k"));
    numla_synth_options o = {.preset = "tiny", .out_dir = v2_dir, .seed = 5,
                             .dtype = NUMLA_DTYPE_F32, .tokenizer_dir = tok};
    if (numla_synth_write(&o, NULL) != NUMLA_STATUS_OK)
        return 1;
    /* Kimi K2's shape with Kimi's own tokenizer files (tiktoken.model, its
     * tokenizer_config.json layout with added_tokens_decoder) */
    snprintf(kimi_dir, sizeof kimi_dir, "%s/huge_int_kimi", numla_test_tmpdir());
    snprintf(tok, sizeof tok, "%s", numla_test_source_path("tests/golden/kimi_tok"));
    numla_synth_options k = {.preset = "tiny-kimi", .out_dir = kimi_dir, .seed = 7,
                             .dtype = NUMLA_DTYPE_F32, .tokenizer_dir = tok};
    if (numla_synth_write(&k, NULL) != NUMLA_STATUS_OK)
        return 1;
    /* the published sentinel in tokenizer_config.json, and in config.json a field numla does
     * not read */
    return set_number(v2_dir, "tokenizer_config.json", "model_max_length", SENTINEL) ||
           set_number(v2_dir, "config.json", "model_max_length", SENTINEL) ||
           set_number(kimi_dir, "tokenizer_config.json", "model_max_length", SENTINEL);
}

/* numla run over `model` with one token-id request and one text request: both answered. */
static void run_both(const char *model, const char *name)
{
    char in[1200], out[1200];
    snprintf(in, sizeof in, "%s/%s.in.jsonl", numla_test_tmpdir(), name);
    snprintf(out, sizeof out, "%s/%s.out.jsonl", numla_test_tmpdir(), name);
    CU_ASSERT_EQUAL_FATAL(spit(in, "{\"id\": \"ids\", \"prompt_tokens\": [5, 17, 99], "
                                   "\"max_tokens\": 3}\n"
                                   "{\"id\": \"text\", \"prompt\": \"hello world\", "
                                   "\"max_tokens\": 3}\n"), 0);
    char *argv[] = {"run", "--model", (char *)model, "--input", in, "--output", out,
                    "--threads", "1", "--kv-blocks", "256", "--no-progress", NULL};
    CU_ASSERT_EQUAL_FATAL(numla_run_main(12, argv), 0);
    FILE *f = fopen(out, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    char line[1 << 14];
    int ok_ids = 0, ok_text = 0;
    while (fgets(line, sizeof line, f)) {
        json_t *r = json_loads(line, 0, NULL);
        CU_ASSERT_PTR_NOT_NULL(r);
        const char *id = json_string_value(json_object_get(r, "id"));
        int ok = !json_object_get(r, "error") &&
                 json_array_size(json_object_get(r, "output_tokens")) == 3;
        if (id && !strcmp(id, "ids"))
            ok_ids = ok;
        if (id && !strcmp(id, "text"))
            ok_text = ok && json_is_string(json_object_get(r, "text"));
        json_decref(r);
    }
    fclose(f);
    CU_ASSERT(ok_ids);
    CU_ASSERT(ok_text);
}

static void test_run_v2(void) { run_both(v2_dir, "huge_int_v2"); }

static void test_run_kimi(void) { run_both(kimi_dir, "huge_int_kimi"); }

/* The tokenizers load with the bos/eos tokenizer_config.json names. */
static void test_tokenizers(void)
{
    numla_tokenizer *t = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_tokenizer_load(kimi_dir, &t), NUMLA_STATUS_OK);
    CU_ASSERT_STRING_EQUAL(numla_tokenizer_token(t, numla_tokenizer_bos(t)), "[BOS]");
    CU_ASSERT_STRING_EQUAL(numla_tokenizer_token(t, numla_tokenizer_eos(t)), "[EOS]");
    numla_tokenizer_destroy(&t);
    CU_ASSERT_EQUAL_FATAL(numla_tokenizer_load(v2_dir, &t), NUMLA_STATUS_OK);
    CU_ASSERT(numla_tokenizer_bos(t) >= 0);
    numla_tokenizer_destroy(&t);
}

/* A tokenizer_config.json with a chat template and the sentinel: the template is recognised
 * (before, serve found "no chat template" and a chat request failed). */
static void test_chat_template(void)
{
    char dir[1200], path[1300];
    snprintf(dir, sizeof dir, "%s/huge_int_chat", numla_test_tmpdir());
    char cmd[2600];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
    json_t *cfg = json_pack("{s:b,s:s,s:s,s:s}", "add_bos_token", 1, "bos_token",
                            "<｜begin▁of▁sentence｜>", "eos_token", "<｜end▁of▁sentence｜>",
                            "chat_template", numla_chat_template_source("deepseek-v3"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    CU_ASSERT_EQUAL_FATAL(json_dump_file(cfg, path, JSON_INDENT(2)), 0);
    json_decref(cfg);
    CU_ASSERT_EQUAL_FATAL(set_number(dir, "tokenizer_config.json", "model_max_length", SENTINEL),
                          0);
    numla_chat_template *t = NULL;
    numla_status s = numla_model_text_chat_template(dir, NULL, &t);
    CU_ASSERT_EQUAL(s, NUMLA_STATUS_OK);
    if (s != NUMLA_STATUS_OK)
        fprintf(stderr, "model_dir_json: %s\n", numla_error_message());
    CU_ASSERT(t && !strcmp(numla_chat_template_name(t), "deepseek-v3"));
    numla_chat_template_destroy(&t);
}

/* numla quantize reads the config.json with the sentinel. */
static void test_quantize(void)
{
    char out[1200];
    snprintf(out, sizeof out, "%s/huge_int_v2_int8", numla_test_tmpdir());
    numla_status s = numla_qckpt_quantize_model(v2_dir, out, NUMLA_QCKPT_INT8, 0, 0, NULL);
    CU_ASSERT_EQUAL(s, NUMLA_STATUS_OK);
    if (s != NUMLA_STATUS_OK)
        fprintf(stderr, "model_dir_json: %s\n", numla_error_message());
    numla_model_config c;
    CU_ASSERT_EQUAL(numla_model_config_load(out, &c), NUMLA_STATUS_OK);
}

/* A field numla uses, out of range: an error naming config.json and the field. */
static void test_used_field_out_of_range(void)
{
    char dir[1200], cmd[4096];
    snprintf(dir, sizeof dir, "%s/huge_int_positions", numla_test_tmpdir());
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s/config.json' '%s/'", dir, v2_dir, dir);
    CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
    CU_ASSERT_EQUAL_FATAL(set_number(dir, "config.json", "max_position_embeddings", SENTINEL), 0);
    numla_model_config c;
    CU_ASSERT_EQUAL(numla_model_config_load(dir, &c), NUMLA_STATUS_FORMAT);
    const char *msg = numla_error_message();
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "config.json"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "max_position_embeddings"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "outside"));
    CU_ASSERT_EQUAL_FATAL(set_number(dir, "config.json", "max_position_embeddings", "4096"), 0);
    CU_ASSERT_EQUAL(numla_model_config_load(dir, &c), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(set_number(dir, "config.json", "vocab_size", "-" SENTINEL), 0);
    CU_ASSERT_EQUAL(numla_model_config_load(dir, &c), NUMLA_STATUS_FORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "vocab_size"));
}

NUMLA_TEST_SUITE(model_dir_json, suite_init, numla_test_mpi_finalize, NUMLA_TEST(test_run_v2),
                 NUMLA_TEST(test_run_kimi), NUMLA_TEST(test_tokenizers),
                 NUMLA_TEST(test_chat_template), NUMLA_TEST(test_quantize),
                 NUMLA_TEST(test_used_field_out_of_range))
