/* Golden tests for the GLM-5 chat template of engine/text/chat_template_glm.c: every
 * conversation of tests/golden/chat_glm5/cases.json (system prompts, reasoning kept or dropped,
 * <think> inside content, tool declarations, tool calls, tool results, null contents, Unicode
 * whitespace) rendered by transformers' apply_chat_template with enable_thinking and
 * clear_thinking absent or set (scripts/make_glm5_chat_golden.py), byte for byte, the template
 * recognised from a tokenizer_config.json holding its string; what transformers refuses is
 * refused too. */
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
    snprintf(rel, sizeof rel, "tests/golden/chat_glm5/%s", file);
    return chat_golden_load(rel);
}

/* The template recognised from a tokenizer_config.json holding its text (line ends as given). */
static numla_chat_template *load_recognised(const char *tmpl)
{
    json_t *cfg = json_pack("{s:s, s:s}", "eos_token", "<|endoftext|>", "chat_template", tmpl);
    char *text = json_dumps(cfg, 0);
    json_decref(cfg);
    numla_chat_template *t = NULL;
    numla_status s = numla_chat_template_load_json(text, NULL, &t);
    free(text);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OK, "load glm-5: %s", numla_error_message());
    if (t)
        NUMLA_ASSERT_MSG(strcmp(numla_chat_template_name(t), "glm-5") == 0,
                         "glm-5 recognised as %s", numla_chat_template_name(t));
    return t;
}

static numla_status render_case(void *t, json_t *convs, json_t *r, char **got, size_t *len)
{
    int ci = (int)json_integer_value(json_object_get(r, "conversation"));
    conv_msgs c = messages_of(json_array_get(convs, (size_t)ci));
    json_t *think = json_object_get(r, "enable_thinking");
    numla_chat_options o = {
        .add_generation_prompt = json_is_true(json_object_get(r, "add_generation_prompt")),
        .thinking = json_is_true(think),
        .thinking_given = json_is_boolean(think),
        .keep_reasoning = json_is_false(json_object_get(r, "clear_thinking")),
        .tools_json = c.tools};
    numla_status s = numla_chat_template_render_opts(t, c.m, c.n, &o, got, len);
    conv_free(&c);
    return s;
}

static void show_case(json_t *r, numla_status s)
{
    fprintf(stderr, "\n    conversation %d agp=%d enable_thinking=%s clear_thinking=%s: status %d %s\n",
            (int)json_integer_value(json_object_get(r, "conversation")),
            json_is_true(json_object_get(r, "add_generation_prompt")),
            json_is_boolean(json_object_get(r, "enable_thinking"))
                ? (json_is_true(json_object_get(r, "enable_thinking")) ? "true" : "false")
                : "unset",
            json_is_false(json_object_get(r, "clear_thinking")) ? "false" : "unset", (int)s,
            s ? numla_error_message() : "");
}

static void test_golden_renders(void)
{
    json_t *templates = load_golden("templates.json"), *cases = load_golden("cases.json");
    if (!templates || !cases)
        return;
    const char *tmpl =
        json_string_value(json_object_get(json_object_get(templates, "glm-5"), "template"));
    numla_chat_template *t = load_recognised(tmpl);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    chat_golden_check_renders(cases, 150, render_case, t, show_case);
    chat_golden_check_refusals(cases, render_case, t, show_case);
    numla_chat_template_destroy(&t);
    json_decref(templates);
    json_decref(cases);
}

/* Recognition of a CRLF copy, forcing by name, thinks(), the stop tokens, and what is refused:
 * arguments that are not a JSON object (the template calls .items() on them) and tools that are
 * not a list. */
static void test_glm5_api(void)
{
    json_t *templates = load_golden("templates.json");
    if (!templates)
        return;
    const char *tmpl =
        json_string_value(json_object_get(json_object_get(templates, "glm-5"), "template"));
    CU_ASSERT_STRING_EQUAL(numla_chat_template_source("glm-5"), tmpl);
    size_t n = strlen(tmpl), k = 0;
    char *crlf = malloc(2 * n + 1);
    for (size_t i = 0; i < n; i++) {
        if (tmpl[i] == '\n')
            crlf[k++] = '\r';
        crlf[k++] = tmpl[i];
    }
    crlf[k] = 0;
    numla_chat_template *t = load_recognised(crlf);
    free(crlf);
    numla_chat_template_destroy(&t);

    CU_ASSERT_EQUAL_FATAL(numla_chat_template_load_builtin("glm-5", &t), NUMLA_STATUS_OK);
    CU_ASSERT_STRING_EQUAL(numla_chat_template_name(t), "glm-5");
    CU_ASSERT_EQUAL(numla_chat_template_thinks(t), 1);
    CU_ASSERT_STRING_EQUAL(numla_chat_template_end_of_turn(t), "<|user|>");
    const char *const *stops = numla_chat_template_stop_tokens(t);
    CU_ASSERT(stops[0] && !strcmp(stops[0], "<|user|>") && stops[1] &&
              !strcmp(stops[1], "<|observation|>") && !stops[2]);

    numla_chat_tool_call call = {.name = "f", .arguments = "\"{\\\"a\\\": 1}\""};
    numla_chat_message m[2] = {{.role = "user", .content = "q"},
                               {.role = "assistant", .content = "",
                                .has_tool_calls = 1, .num_tool_calls = 1, .tool_calls = &call}};
    numla_chat_options o = {.add_generation_prompt = 1};
    char *out = NULL;
    size_t len = 0;
    CU_ASSERT_EQUAL(numla_chat_template_render_opts(t, m, 2, &o, &out, &len),
                    NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT(strstr(numla_error_message(), "messages[1].tool_calls[0].function.arguments") !=
              NULL);
    CU_ASSERT_PTR_NULL(out);
    call.arguments = "{\"a\": 1, \"b\": \"x\"}";
    CU_ASSERT_EQUAL(numla_chat_template_render_opts(t, m, 2, &o, &out, &len), NUMLA_STATUS_OK);
    if (out)
        CU_ASSERT_STRING_EQUAL(out, "[gMASK]<sop><|user|>q<|assistant|></think><tool_call>f"
                                    "<arg_key>a</arg_key><arg_value>1</arg_value><arg_key>b"
                                    "</arg_key><arg_value>x</arg_value></tool_call>"
                                    "<|assistant|><think>");
    free(out);
    out = NULL;
    o.tools_json = "{\"type\": \"function\"}";
    CU_ASSERT_EQUAL(numla_chat_template_render_opts(t, m, 1, &o, &out, &len),
                    NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT(strstr(numla_error_message(), "tools") != NULL);
    CU_ASSERT_PTR_NULL(out);
    numla_chat_template_destroy(&t);
    json_decref(templates);
}

/* A model directory as GLM-5 ships it: tokenizer_config.json without a chat_template and the
 * template in chat_template.jinja beside it. */
static void test_glm5_model_dir(void)
{
    char dir[] = "/tmp/numla-glm5-XXXXXX";
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    char cfg[256], jin[256];
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
    snprintf(jin, sizeof jin, "%s/chat_template.jinja", dir);
    FILE *f = fopen(cfg, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("{\"eos_token\": \"<|endoftext|>\", \"pad_token\": \"<|endoftext|>\"}", f);
    fclose(f);
    f = fopen(jin, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs(numla_chat_template_source("glm-5"), f);
    fclose(f);
    numla_chat_template *t = NULL;
    CU_ASSERT_EQUAL(numla_chat_template_load(dir, NULL, &t), NUMLA_STATUS_OK);
    if (t) {
        CU_ASSERT_STRING_EQUAL(numla_chat_template_name(t), "glm-5");
        numla_chat_message m = {.role = "user", .content = "hi"};
        numla_chat_options o = {.add_generation_prompt = 1, .thinking_given = 1};
        char *out = NULL;
        size_t len = 0;
        CU_ASSERT_EQUAL(numla_chat_template_render_opts(t, &m, 1, &o, &out, &len),
                        NUMLA_STATUS_OK);
        if (out)
            CU_ASSERT_STRING_EQUAL(out, "[gMASK]<sop><|user|>hi<|assistant|></think>");
        free(out);
    }
    numla_chat_template_destroy(&t);
    unlink(cfg);
    unlink(jin);
    rmdir(dir);
}

NUMLA_TEST_SUITE(chat_glm5_golden, NULL, NULL, NUMLA_TEST(test_golden_renders),
                 NUMLA_TEST(test_glm5_api), NUMLA_TEST(test_glm5_model_dir))
