/* Golden tests for the DeepSeek-V3.1, Kimi-K2 and Kimi-K2-Thinking chat templates of
 * engine/text/chat_template.c: every conversation of tests/golden/chat_kimi/cases.json (tool
 * declarations, tool calls and results, names, reasoning_content, V3.1's thinking switch)
 * rendered by transformers' apply_chat_template (scripts/make_kimi_chat_golden.py), byte for
 * byte, each template recognised from a tokenizer_config.json holding its string; the
 * combinations transformers refuses are refused too. */
#include "test_util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/text/chat_template.h"

#include "chat_golden_cases.h"

static json_t *load_golden(const char *file)
{
    char rel[256];
    snprintf(rel, sizeof rel, "tests/golden/chat_kimi/%s", file);
    return chat_golden_load(rel);
}

static numla_chat_template *load_named(json_t *templates, const char *name)
{
    json_t *e = json_object_get(templates, name);
    json_t *cfg = json_pack("{s:s, s:s, s:s}", "bos_token",
                            json_string_value(json_object_get(e, "bos_token")), "eos_token",
                            json_string_value(json_object_get(e, "eos_token")), "chat_template",
                            json_string_value(json_object_get(e, "template")));
    char *text = json_dumps(cfg, 0);
    json_decref(cfg);
    numla_chat_template *t = NULL;
    numla_status s = numla_chat_template_load_json(text, NULL, &t);
    free(text);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OK, "load %s: %s", name, numla_error_message());
    if (t)
        NUMLA_ASSERT_MSG(strcmp(numla_chat_template_name(t), name) == 0,
                         "template %s recognised as %s", name, numla_chat_template_name(t));
    return t;
}

static numla_status render_case(void *templates, json_t *convs, json_t *r, char **got,
                                size_t *len)
{
    const char *name = json_string_value(json_object_get(r, "template"));
    int ci = (int)json_integer_value(json_object_get(r, "conversation"));
    numla_chat_template *t = load_named(templates, name);
    conv_msgs c = messages_of(json_array_get(convs, (size_t)ci));
    numla_chat_options o = {.add_generation_prompt =
                                json_is_true(json_object_get(r, "add_generation_prompt")),
                            .thinking = json_is_true(json_object_get(r, "thinking")),
                            .tools_json = c.tools};
    numla_status s = t ? numla_chat_template_render_opts(t, c.m, c.n, &o, got, len)
                       : NUMLA_STATUS_INTERNAL;
    conv_free(&c);
    numla_chat_template_destroy(&t);
    return s;
}

static void show_case(json_t *r, numla_status s)
{
    fprintf(stderr, "\n    %s conversation %d agp=%d thinking=%d: status %d %s\n",
            json_string_value(json_object_get(r, "template")),
            (int)json_integer_value(json_object_get(r, "conversation")),
            json_is_true(json_object_get(r, "add_generation_prompt")),
            json_is_true(json_object_get(r, "thinking")), (int)s, s ? numla_error_message() : "");
}

static void test_golden_renders(void)
{
    json_t *templates = load_golden("templates.json"), *cases = load_golden("cases.json");
    if (!templates || !cases)
        return;
    chat_golden_check_renders(cases, 150, render_case, templates, show_case);
    /* what transformers refused, numla refuses with a message; except a null content that
     * transformers 5 drops before the template sees it (null_content_twin: the conversation
     * with "" there, whose golden text numla must give) */
    json_t *convs = json_object_get(cases, "conversations");
    json_t *renders = json_object_get(cases, "renders"), *r;
    size_t i, refused = 0;
    json_array_foreach(json_object_get(cases, "errors"), i, r) {
        char *got = NULL;
        size_t len = 0;
        numla_status s = render_case(templates, convs, r, &got, &len);
        json_t *conv = json_array_get(convs, (size_t)json_integer_value(
                                                 json_object_get(r, "conversation")));
        json_t *twin = json_object_get(conv, "null_content_twin");
        if (s == NUMLA_STATUS_OK && twin) {
            size_t k;
            json_t *w;
            json_array_foreach(renders, k, w) {
                if (json_equal(json_object_get(w, "template"), json_object_get(r, "template")) &&
                    json_equal(json_object_get(w, "conversation"), twin) &&
                    json_equal(json_object_get(w, "add_generation_prompt"),
                               json_object_get(r, "add_generation_prompt")) &&
                    json_equal(json_object_get(w, "thinking"), json_object_get(r, "thinking"))) {
                    json_t *want = json_object_get(w, "text");
                    refused += len == json_string_length(want) &&
                               memcmp(got, json_string_value(want), len) == 0;
                }
            }
            free(got);
            continue;
        }
        refused += s != NUMLA_STATUS_OK && got == NULL && numla_error_message()[0];
        if (s == NUMLA_STATUS_OK)
            fprintf(stderr, "\n    %s conversation %d: rendered, transformers refused\n",
                    json_string_value(json_object_get(r, "template")),
                    (int)json_integer_value(json_object_get(r, "conversation")));
        free(got);
    }
    NUMLA_ASSERT_MSG(refused == json_array_size(json_object_get(cases, "errors")),
                     "%zu of %zu refusals refused", refused,
                     json_array_size(json_object_get(cases, "errors")));
    json_decref(templates);
    json_decref(cases);
}

/* Names, recognition of a CRLF copy, thinks(), and forcing by name. */
static void test_names_and_thinking(void)
{
    json_t *templates = load_golden("templates.json");
    if (!templates)
        return;
    static const char *const names[] = {"deepseek-v3.1", "kimi-k2", "kimi-k2-thinking"};
    static const int thinks[] = {1, 0, 1};
    for (int k = 0; k < 3; k++) {
        numla_chat_template *t = load_named(templates, names[k]);
        if (t) {
            CU_ASSERT_EQUAL(numla_chat_template_thinks(t), thinks[k]);
            const char *eot = numla_chat_template_end_of_turn(t);
            CU_ASSERT(k == 0 ? eot == NULL : eot && !strcmp(eot, "<|im_end|>"));
        }
        numla_chat_template_destroy(&t);
        const char *src = json_string_value(json_object_get(json_object_get(templates, names[k]),
                                                            "template"));
        CU_ASSERT_STRING_EQUAL(numla_chat_template_source(names[k]), src);
        CU_ASSERT_EQUAL(numla_chat_template_load_json(NULL, names[k], &t), NUMLA_STATUS_OK);
        if (t)
            CU_ASSERT_STRING_EQUAL(numla_chat_template_name(t), names[k]);
        numla_chat_template_destroy(&t);
    }
    /* tools that are not JSON are refused naming the field */
    numla_chat_template *t = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_chat_template_load_json(NULL, "kimi-k2-thinking", &t),
                          NUMLA_STATUS_OK);
    numla_chat_message m = {.role = "user", .content = "hi"};
    numla_chat_options o = {.add_generation_prompt = 1, .tools_json = "[{"};
    char *out = NULL;
    size_t len = 0;
    CU_ASSERT_EQUAL(numla_chat_template_render_opts(t, &m, 1, &o, &out, &len),
                    NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT(strstr(numla_error_message(), "tools") != NULL);
    CU_ASSERT_PTR_NULL(out);
    /* floats in tools are written as Python writes them */
    o.tools_json = "[{\"a\": 0.1, \"b\": 1e-05, \"c\": 3.0, \"d\": 1e16, \"e\": -2.5e-7, "
                   "\"f\": 123456.789, \"g\": \"\\u0001\\/\"}]";
    CU_ASSERT_EQUAL_FATAL(numla_chat_template_render_opts(t, &m, 1, &o, &out, &len),
                          NUMLA_STATUS_OK);
    NUMLA_ASSERT_MSG(strstr(out, "[{\"a\": 0.1, \"b\": 1e-05, \"c\": 3.0, \"d\": 1e+16, \"e\": "
                                 "-2.5e-07, \"f\": 123456.789, \"g\": \"\\u0001/\"}]") != NULL,
                     "tools written as %s", out);
    free(out);
    numla_chat_template_destroy(&t);
    json_decref(templates);
}

/* A model dir whose tokenizer_config.json has no chat_template and a chat_template.jinja beside
 * it (as Kimi-K2-Thinking ships): the file's template is recognised; without it, an error. */
static void test_jinja_file(void)
{
    char dir[] = "/tmp/numla-chat-jinja-XXXXXX";
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    char cfg[256], jin[256];
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
    snprintf(jin, sizeof jin, "%s/chat_template.jinja", dir);
    FILE *f = fopen(cfg, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("{\"bos_token\": \"[BOS]\", \"eos_token\": \"[EOS]\"}", f);
    fclose(f);
    numla_chat_template *t = NULL;
    CU_ASSERT_EQUAL(numla_chat_template_load(dir, NULL, &t), NUMLA_STATUS_UNSUPPORTED);
    CU_ASSERT(strstr(numla_error_message(), "no chat_template") != NULL);
    f = fopen(jin, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs(numla_chat_template_source("kimi-k2-thinking"), f);
    fclose(f);
    CU_ASSERT_EQUAL(numla_chat_template_load(dir, NULL, &t), NUMLA_STATUS_OK);
    if (t)
        CU_ASSERT_STRING_EQUAL(numla_chat_template_name(t), "kimi-k2-thinking");
    numla_chat_template_destroy(&t);
    unlink(cfg);
    unlink(jin);
    rmdir(dir);
}

NUMLA_TEST_SUITE(chat_kimi_golden, NULL, NULL, NUMLA_TEST(test_golden_renders),
                 NUMLA_TEST(test_names_and_thinking), NUMLA_TEST(test_jinja_file))
