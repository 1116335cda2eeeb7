/* Golden tests for DeepSeek-V4's chat encoding in engine/text/chat_template_dsv4.c: every
 * conversation of tests/golden/chat_dsv4/cases.json (V3.2's golden set and V4's own cases:
 * tool results merged into user turns and sorted by the calls' order, runs of user messages,
 * tools on a system or developer message or on one put in front, DSML tool calls, arguments
 * that are not JSON, roles left out in thinking mode, refusals, reasoning_effort "high" and
 * "max" and a refused "low") rendered by DeepSeek's encode_messages in chat and thinking mode
 * (scripts/make_dsv4_chat_golden.py), byte for byte;
 * what it refuses is refused too; and the tool calls DeepSeek's code wrote into them read back
 * by the deepseek-v4 tool-call parser as the calls they were. */
#include "chat_golden_cases.h"

#include "engine/text/tool_calls.h"

static void test_golden_renders(void)
{
    chat_golden_check_cases("tests/golden/chat_dsv4/cases.json", "deepseek-v4", 81);
}

/* What DeepSeek's code wrote reads back: every golden render parsed whole by the deepseek-v4
 * tool-call syntax gives exactly the conversation's calls, in order, with their arguments as
 * the encoding wrote them (a JSON object, or text that is not JSON as {"arguments": text});
 * the tools block's example block, whose string="true|false" is no value, stays content. */
static void test_calls_read_back(void)
{
    json_t *cases = chat_golden_load("tests/golden/chat_dsv4/cases.json");
    if (!cases)
        return;
    json_t *convs = json_object_get(cases, "conversations");
    size_t i, checked = 0;
    json_t *r;
    json_array_foreach(json_object_get(cases, "renders"), i, r) {
        json_t *conv = json_array_get(convs, (size_t)json_integer_value(
                                                 json_object_get(r, "conversation")));
        json_t *want = json_array();
        size_t k;
        json_t *msg;
        json_array_foreach(json_object_get(conv, "messages"), k, msg) {
            size_t c;
            json_t *call;
            json_array_foreach(json_object_get(msg, "tool_calls"), c, call) {
                json_t *f = json_object_get(call, "function");
                const char *a = json_string_value(json_object_get(f, "arguments"));
                json_t *args = json_loads(a, JSON_DECODE_ANY, NULL);
                if (!args)
                    args = json_pack("{s:s}", "arguments", a);
                json_array_append_new(want, json_pack("[O, o]", json_object_get(f, "name"), args));
            }
        }
        numla_tool_calls *p = NULL;
        CU_ASSERT_EQUAL_FATAL(numla_tool_calls_create(
                                  numla_tool_syntax_for_template("deepseek-v4"), NULL, 1, &p),
                              NUMLA_STATUS_OK);
        const numla_tool_event *ev;
        int32_t ne;
        const char *t;
        const char *text = json_string_value(json_object_get(r, "text"));
        CU_ASSERT_EQUAL(numla_tool_calls_push(p, text, strlen(text), &ev, &ne, &t),
                        NUMLA_STATUS_OK);
        CU_ASSERT_EQUAL(numla_tool_calls_finish(p, &ev, &ne, &t), NUMLA_STATUS_OK);
        json_t *got = json_array();
        for (int32_t c = 0; c < numla_tool_calls_count(p); c++) {
            const numla_tool_call_out *o = numla_tool_calls_get(p, c);
            json_t *args = json_loads(o->arguments, 0, NULL);
            json_array_append_new(got, json_pack("[s, o]", o->name, args ? args : json_null()));
        }
        if (!json_equal(got, want)) {
            char *g = json_dumps(got, 0), *w = json_dumps(want, 0);
            NUMLA_ASSERT_MSG(0, "conversation %d thinking=%d: read back %s, wrote %s",
                             (int)json_integer_value(json_object_get(r, "conversation")),
                             json_is_true(json_object_get(r, "thinking")), g, w);
            free(g);
            free(w);
        }
        checked += json_array_size(want) > 0;
        json_decref(got);
        json_decref(want);
        numla_tool_calls_destroy(&p);
    }
    NUMLA_ASSERT_MSG(checked >= 15, "only %zu renders with calls", checked);
    json_decref(cases);
}

/* The model_type mapping, no Jinja source, thinks(), the EOS ending a turn, thinking on when
 * the request does not give it, and the refusals the goldens cannot show: a null user or tool
 * content (the encoding fails, or writes "None"), a tool without "function". */
static void test_dsv4_api(void)
{
    CU_ASSERT_STRING_EQUAL(numla_chat_template_builtin_for_model_type("deepseek_v4"),
                           "deepseek-v4");
    CU_ASSERT_STRING_EQUAL(numla_chat_template_builtin_for_model_type("deepseek_v32"),
                           "deepseek-v3.2");
    CU_ASSERT_PTR_NULL(numla_chat_template_builtin_for_model_type("deepseek_v3"));
    CU_ASSERT_PTR_NULL(numla_chat_template_source("deepseek-v4"));
    numla_chat_template *t = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_chat_template_load_builtin("deepseek-v4", &t), NUMLA_STATUS_OK);
    CU_ASSERT_STRING_EQUAL(numla_chat_template_name(t), "deepseek-v4");
    CU_ASSERT_EQUAL(numla_chat_template_thinks(t), 1);
    CU_ASSERT(numla_chat_template_can(t, NUMLA_CHAT_CAN_DECLARE_TOOLS |
                                             NUMLA_CHAT_CAN_WRITE_TOOL_CALLS |
                                             NUMLA_CHAT_CAN_WRITE_TOOL_RESULTS |
                                             NUMLA_CHAT_CAN_SWITCH_THINKING));
    CU_ASSERT_PTR_NULL(numla_chat_template_stop_tokens(t)[0]);

    numla_chat_message m[3] = {{.role = "user", .content = "hi"}};
    numla_chat_options o = {.add_generation_prompt = 1};
    char *out = NULL;
    size_t len = 0;
    /* thinking not given: on (vLLM's default for V4); given as false: off */
    CU_ASSERT_EQUAL_FATAL(numla_chat_template_render_opts(t, m, 1, &o, &out, &len),
                          NUMLA_STATUS_OK);
    CU_ASSERT_STRING_EQUAL(out, "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜><think>");
    free(out);
    o.thinking_given = 1;
    CU_ASSERT_EQUAL_FATAL(numla_chat_template_render_opts(t, m, 1, &o, &out, &len),
                          NUMLA_STATUS_OK);
    CU_ASSERT_STRING_EQUAL(out, "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜></think>");
    free(out);
    out = NULL;

    m[0].content = NULL;
    CU_ASSERT_EQUAL(numla_chat_template_render_opts(t, m, 1, &o, &out, &len),
                    NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT(strstr(numla_error_message(), "messages[0].content") != NULL);
    CU_ASSERT_PTR_NULL(out);

    numla_chat_tool_call call = {.id = "c", .name = "f", .arguments = "{}"};
    m[0].content = "q";
    m[1] = (numla_chat_message){.role = "assistant", .content = "", .has_tool_calls = 1,
                                .num_tool_calls = 1, .tool_calls = &call};
    m[2] = (numla_chat_message){.role = "tool", .content = NULL, .tool_call_id = "c"};
    CU_ASSERT_EQUAL(numla_chat_template_render_opts(t, m, 3, &o, &out, &len),
                    NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT(strstr(numla_error_message(), "messages[2].content") != NULL);
    CU_ASSERT_PTR_NULL(out);

    m[2].content = "r";
    o.tools_json = "[{\"type\": \"function\"}]";
    CU_ASSERT_EQUAL(numla_chat_template_render_opts(t, m, 3, &o, &out, &len),
                    NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT(strstr(numla_error_message(), "tools[0].function") != NULL);
    CU_ASSERT_PTR_NULL(out);
    numla_chat_template_destroy(&t);
}

NUMLA_TEST_SUITE(chat_dsv4_golden, NULL, NULL, NUMLA_TEST(test_golden_renders),
                 NUMLA_TEST(test_calls_read_back), NUMLA_TEST(test_dsv4_api))
