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

#include "chat_golden_cases.h"

static void test_golden_renders(void)
{
    chat_golden_check_cases("tests/golden/chat_dsv32/cases.json", "deepseek-v3.2", 25);
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
