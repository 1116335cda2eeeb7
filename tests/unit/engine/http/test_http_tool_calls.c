/* engine/http/openai.c: the shapes of tool calls in responses, as OpenAI writes them:
 * message.tool_calls [{id, type: "function", function: {name, arguments}}] with content null
 * when there is none, and the streamed delta.tool_calls (a call's first chunk: index, id, type,
 * function.name, function.arguments ""; then {index, function.arguments}). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "engine/http/openai.h"
#include "test_util.h"

static void expect_json(const char *got, const char *want)
{
    json_t *g = json_loads(got, 0, NULL), *w = json_loads(want, 0, NULL);
    NUMLA_ASSERT_MSG(g && w && json_equal(g, w), "got %s\nwant %s", got, want);
    json_decref(g);
    json_decref(w);
}

static numla_tool_call_out calls[2] = {
    {.id = "functions.get_weather:0", .name = "get_weather", .arguments = "{\"city\": \"Paris\"}"},
    {.id = "call_ABCDEFGHIJKLMNOPQRSTUVWX", .name = "get_time", .arguments = "{}"}};

static void test_response_shape(void)
{
    numla_openai_reply rh = {NUMLA_OPENAI_CHAT, "chatcmpl-1", 1700000000, "tiny", NULL};
    numla_openai_usage u = {.prompt_tokens = 5, .completion_tokens = 3, .cached_tokens = 0};
    char *s = NULL;
    /* calls without text: content null */
    numla_openai_choice ch = {.text = "", .text_len = 0, .finish_reason = "tool_calls",
                              .num_tool_calls = 2, .tool_calls = calls};
    CU_ASSERT_EQUAL(numla_openai_format_response(&rh, &ch, 1, &u, &s), NUMLA_STATUS_OK);
    expect_json(s, "{\"id\": \"chatcmpl-1\", \"object\": \"chat.completion\", \"created\": "
                   "1700000000, \"model\": \"tiny\", \"choices\": [{\"index\": 0, \"message\": "
                   "{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": "
                   "\"functions.get_weather:0\", \"type\": \"function\", \"function\": {\"name\": "
                   "\"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}}, {\"id\": "
                   "\"call_ABCDEFGHIJKLMNOPQRSTUVWX\", \"type\": \"function\", \"function\": "
                   "{\"name\": \"get_time\", \"arguments\": \"{}\"}}]}, \"logprobs\": null, "
                   "\"finish_reason\": \"tool_calls\"}], \"usage\": {\"prompt_tokens\": 5, "
                   "\"completion_tokens\": 3, \"total_tokens\": 8, \"prompt_tokens_details\": "
                   "{\"cached_tokens\": 0}}}");
    free(s);
    /* text and a call, with reasoning */
    ch = (numla_openai_choice){.text = "Let me look.", .text_len = 12, .finish_reason = "tool_calls",
                               .has_reasoning = 1, .reasoning = "r", .reasoning_len = 1,
                               .num_tool_calls = 1, .tool_calls = calls};
    CU_ASSERT_EQUAL(numla_openai_format_response(&rh, &ch, 1, &u, &s), NUMLA_STATUS_OK);
    json_t *o = json_loads(s, 0, NULL);
    json_t *m = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "message");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(m, "content")), "Let me look.");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(m, "reasoning_content")), "r");
    CU_ASSERT_EQUAL(json_array_size(json_object_get(m, "tool_calls")), 1);
    json_decref(o);
    free(s);
    /* no calls: no tool_calls field, content "" stays a string */
    ch = (numla_openai_choice){.text = "", .text_len = 0, .finish_reason = "stop"};
    CU_ASSERT_EQUAL(numla_openai_format_response(&rh, &ch, 1, &u, &s), NUMLA_STATUS_OK);
    CU_ASSERT_PTR_NULL(strstr(s, "tool_calls"));
    CU_ASSERT_PTR_NOT_NULL(strstr(s, "\"content\":\"\""));
    free(s);
}

static void test_chunk_shape(void)
{
    numla_openai_reply rh = {NUMLA_OPENAI_CHAT, "chatcmpl-1", 1700000000, "tiny", NULL};
    char *s = NULL;
    numla_openai_choice ch = {.text = "", .text_len = 0, .tool_delta = &calls[1],
                              .tool_index = 1, .tool_first = 1};
    CU_ASSERT_EQUAL(numla_openai_format_chunk(&rh, 0, &ch, 0, &s), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(strncmp(s, "data: ", 6), 0);
    expect_json(s + 6, "{\"id\": \"chatcmpl-1\", \"object\": \"chat.completion.chunk\", "
                       "\"created\": 1700000000, \"model\": \"tiny\", \"choices\": [{\"index\": 0, "
                       "\"delta\": {\"tool_calls\": [{\"index\": 1, \"id\": "
                       "\"call_ABCDEFGHIJKLMNOPQRSTUVWX\", \"type\": \"function\", \"function\": "
                       "{\"name\": \"get_time\", \"arguments\": \"\"}}]}, \"logprobs\": null, "
                       "\"finish_reason\": null}]}");
    free(s);
    ch.tool_first = 0;
    ch.tool_delta = &calls[0];
    ch.tool_index = 0;
    CU_ASSERT_EQUAL(numla_openai_format_chunk(&rh, 0, &ch, 0, &s), NUMLA_STATUS_OK);
    expect_json(s + 6, "{\"id\": \"chatcmpl-1\", \"object\": \"chat.completion.chunk\", "
                       "\"created\": 1700000000, \"model\": \"tiny\", \"choices\": [{\"index\": 0, "
                       "\"delta\": {\"tool_calls\": [{\"index\": 0, \"function\": {\"arguments\": "
                       "\"{\\\"city\\\": \\\"Paris\\\"}\"}}]}, \"logprobs\": null, "
                       "\"finish_reason\": null}]}");
    free(s);
    /* the last chunk: empty delta, finish_reason tool_calls */
    ch = (numla_openai_choice){.text = "", .text_len = 0, .finish_reason = "tool_calls"};
    CU_ASSERT_EQUAL(numla_openai_format_chunk(&rh, 0, &ch, 0, &s), NUMLA_STATUS_OK);
    expect_json(s + 6, "{\"id\": \"chatcmpl-1\", \"object\": \"chat.completion.chunk\", "
                       "\"created\": 1700000000, \"model\": \"tiny\", \"choices\": [{\"index\": 0, "
                       "\"delta\": {}, \"logprobs\": null, \"finish_reason\": \"tool_calls\"}]}");
    free(s);
}

NUMLA_TEST_SUITE(http_tool_calls, NULL, NULL, NUMLA_TEST(test_response_shape),
                 NUMLA_TEST(test_chunk_shape))
