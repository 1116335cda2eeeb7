/* Golden tests for DeepSeek-V3.2's chat encoding in engine/text/chat_template_dsv32.c: every
 * conversation of tests/golden/chat_dsv32/cases.json (multi-turn, reasoning, developer
 * messages, tools on a system message or on one put in front, DSML tool calls with arguments
 * of every JSON type, tool results, refusals) rendered by DeepSeek's encode_messages in chat and
 * thinking mode (scripts/make_dsv32_chat_golden.py), byte for byte; what it refuses is refused
 * too. */
#include "test_util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/chat_template.h"

#include "chat_golden_conv.h"

static json_t *load_cases(void)
{
    const char *rel = "tests/golden/chat_dsv32/cases.json";
    json_error_t err;
    json_t *j = json_load_file(numla_test_source_path(rel), 0, &err);
    NUMLA_ASSERT_MSG(j != NULL, "%s: %s", rel, err.text);
    return j;
}

static numla_status render_case(numla_chat_template *t, json_t *convs, json_t *r, char **got,
                                size_t *len)
{
    int ci = (int)json_integer_value(json_object_get(r, "conversation"));
    conv_msgs c = messages_of(json_array_get(convs, (size_t)ci));
    numla_chat_options o = {.add_generation_prompt = 1,
                            .thinking = json_is_true(json_object_get(r, "thinking")),
                            .thinking_given = 1,
                            .tools_json = c.tools};
    numla_status s = numla_chat_template_render_opts(t, c.m, c.n, &o, got, len);
    conv_free(&c);
    return s;
}

static void test_golden_renders(void)
{
    json_t *cases = load_cases();
    if (!cases)
        return;
    numla_chat_template *t = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_chat_template_load_builtin("deepseek-v3.2", &t),
                          NUMLA_STATUS_OK);
    json_t *convs = json_object_get(cases, "conversations");
    json_t *renders = json_object_get(cases, "renders");
    NUMLA_ASSERT_MSG(json_array_size(renders) >= 25, "only %zu golden renders",
                     json_array_size(renders));
    size_t i, ok = 0;
    json_t *r;
    json_array_foreach(renders, i, r) {
        char *got = NULL;
        size_t len = 0;
        numla_status s = render_case(t, convs, r, &got, &len);
        const char *want = json_string_value(json_object_get(r, "text"));
        size_t wlen = json_string_length(json_object_get(r, "text"));
        int same = s == NUMLA_STATUS_OK && len == wlen && memcmp(got, want, len) == 0 &&
                   got[len] == 0;
        if (!same) {
            fprintf(stderr, "\n    conversation %d thinking=%d: status %d %s\n",
                    (int)json_integer_value(json_object_get(r, "conversation")),
                    json_is_true(json_object_get(r, "thinking")), (int)s,
                    s ? numla_error_message() : "");
            if (s == NUMLA_STATUS_OK) {
                size_t k = 0;
                while (k < len && k < wlen && got[k] == want[k])
                    k++;
                fprintf(stderr, "      first difference at byte %zu: got \"%.60s\" want "
                                "\"%.60s\"\n", k, got + k, want + k);
            }
        }
        ok += (size_t)same;
        free(got);
    }
    NUMLA_ASSERT_MSG(ok == json_array_size(renders), "%zu of %zu golden renders match", ok,
                     json_array_size(renders));
    size_t refused = 0;
    json_array_foreach(json_object_get(cases, "errors"), i, r) {
        char *got = NULL;
        size_t len = 0;
        numla_status s = render_case(t, convs, r, &got, &len);
        refused += s != NUMLA_STATUS_OK && got == NULL && numla_error_message()[0];
        if (s == NUMLA_STATUS_OK)
            fprintf(stderr, "\n    conversation %d thinking=%d: rendered, the encoding refused\n",
                    (int)json_integer_value(json_object_get(r, "conversation")),
                    json_is_true(json_object_get(r, "thinking")));
        free(got);
    }
    NUMLA_ASSERT_MSG(refused == json_array_size(json_object_get(cases, "errors")),
                     "%zu of %zu refusals refused", refused,
                     json_array_size(json_object_get(cases, "errors")));
    numla_chat_template_destroy(&t);
    json_decref(cases);
}

/* The name, the model_type mapping, no Jinja source (a tokenizer_config.json is never
 * recognised as it), thinks(), the EOS ending a turn, and the refusals the goldens cannot
 * show: a null user content (the encoding would write "None"), arguments that are not a JSON
 * object, a tool without "function". */
static void test_dsv32_api(void)
{
    CU_ASSERT_STRING_EQUAL(numla_chat_template_builtin_for_model_type("deepseek_v32"),
                           "deepseek-v3.2");
    CU_ASSERT_PTR_NULL(numla_chat_template_builtin_for_model_type("deepseek_v3"));
    CU_ASSERT_PTR_NULL(numla_chat_template_builtin_for_model_type(NULL));
    CU_ASSERT_PTR_NULL(numla_chat_template_source("deepseek-v3.2"));
    CU_ASSERT(numla_chat_template_known("deepseek-v3.2") && numla_chat_template_known("glm-5"));
    CU_ASSERT(!numla_chat_template_known("deepseek-v3.3") && !numla_chat_template_known(NULL));
    numla_chat_template *t = NULL;
    CU_ASSERT_EQUAL(numla_chat_template_load_builtin("deepseek-v9", &t),
                    NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT(strstr(numla_error_message(), "deepseek-v3.2") != NULL);
    /* a config with some other template is not taken for V3.2 */
    CU_ASSERT_EQUAL(numla_chat_template_load_json("{\"chat_template\": \"{{ x }}\"}", NULL, &t),
                    NUMLA_STATUS_UNSUPPORTED);
    CU_ASSERT_EQUAL_FATAL(numla_chat_template_load_builtin("deepseek-v3.2", &t),
                          NUMLA_STATUS_OK);
    CU_ASSERT_STRING_EQUAL(numla_chat_template_name(t), "deepseek-v3.2");
    CU_ASSERT_EQUAL(numla_chat_template_thinks(t), 1);
    CU_ASSERT_PTR_NULL(numla_chat_template_end_of_turn(t));
    CU_ASSERT_PTR_NULL(numla_chat_template_stop_tokens(t)[0]);

    numla_chat_message m[3] = {{.role = "user", .content = NULL}};
    numla_chat_options o = {.add_generation_prompt = 1};
    char *out = NULL;
    size_t len = 0;
    CU_ASSERT_EQUAL(numla_chat_template_render_opts(t, m, 1, &o, &out, &len),
                    NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT(strstr(numla_error_message(), "messages[0].content") != NULL);
    CU_ASSERT_PTR_NULL(out);

    numla_chat_tool_call call = {.name = "f", .arguments = "[1, 2]"};
    m[0].content = "q";
    m[1] = (numla_chat_message){.role = "assistant", .content = "", .has_tool_calls = 1,
                                .num_tool_calls = 1, .tool_calls = &call};
    m[2] = (numla_chat_message){.role = "tool", .content = "r"};
    CU_ASSERT_EQUAL(numla_chat_template_render_opts(t, m, 3, &o, &out, &len),
                    NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT(strstr(numla_error_message(), "messages[1].tool_calls[0].function.arguments") !=
              NULL);
    CU_ASSERT_PTR_NULL(out);
    call.arguments = "{\"x\": [1, {\"y\": null}], \"s\": \"v\"}";
    CU_ASSERT_EQUAL_FATAL(numla_chat_template_render_opts(t, m, 3, &o, &out, &len),
                          NUMLA_STATUS_OK);
    CU_ASSERT_STRING_EQUAL(out, "<｜begin▁of▁sentence｜><｜User｜>q<｜Assistant｜></think>\n\n"
                                "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"f\">\n"
                                "<｜DSML｜parameter name=\"x\" string=\"false\">[1, {\"y\": null}]"
                                "</｜DSML｜parameter>\n<｜DSML｜parameter name=\"s\" "
                                "string=\"true\">v</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
                                "</｜DSML｜function_calls><｜end▁of▁sentence｜>\n\n"
                                "<function_results>\n<result>r</result>\n</function_results>"
                                "\n\n</think>");
    free(out);
    out = NULL;
    o.tools_json = "[{\"type\": \"function\"}]";
    CU_ASSERT_EQUAL(numla_chat_template_render_opts(t, m, 1, &o, &out, &len),
                    NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT(strstr(numla_error_message(), "tools[0].function") != NULL);
    CU_ASSERT_PTR_NULL(out);
    numla_chat_template_destroy(&t);
}

NUMLA_TEST_SUITE(chat_dsv32_golden, NULL, NULL, NUMLA_TEST(test_golden_renders),
                 NUMLA_TEST(test_dsv32_api))
