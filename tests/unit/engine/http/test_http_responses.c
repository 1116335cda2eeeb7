/* Tests for engine/http/responses.c, OpenAI's Responses API over the chat path: bodies become
 * the chat bodies written out here by hand (input forms, instructions, developer, function
 * calls and their outputs, tools, tool_choice, text.format), what is not served is a 400
 * naming the Responses field, and the response object and the stream's events have the shapes
 * OpenAI documents (compared with hand-written objects). */
#include "test_util.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "engine/http/responses.h"

#define EXPECT_STR(got, want)                                                              \
    do {                                                                                   \
        const char *g_ = (got);                                                            \
        NUMLA_ASSERT_MSG(g_ && !strcmp(g_, want), "got %s, want %s", g_ ? g_ : "(none)", want); \
    } while (0)

static json_t *jload(const char *text)
{
    json_error_t je;
    json_t *o = json_loads(text, 0, &je);
    NUMLA_ASSERT_MSG(o != NULL, "test JSON: %s (%s)", je.text, text);
    return o;
}

/* body -> chat must equal want (and settings contain want_settings' keys with those values). */
static void expect_chat(const char *body, const char *want, const char *want_settings)
{
    json_t *b = jload(body), *w = jload(want), *chat = NULL, *settings = NULL;
    numla_openai_error err = {0};
    int ok = numla_responses_to_chat(b, &chat, &settings, &err);
    NUMLA_ASSERT_MSG(ok, "%s: %s", body, err.message);
    if (ok) {
        char *got = json_dumps(chat, JSON_COMPACT | JSON_SORT_KEYS);
        NUMLA_ASSERT_MSG(json_equal(chat, w), "%s\n      got  %s\n      want %s", body, got, want);
        free(got);
        if (want_settings) {
            json_t *ws = jload(want_settings);
            const char *k;
            json_t *v;
            json_object_foreach(ws, k, v) {
                NUMLA_ASSERT_MSG(json_equal(json_object_get(settings, k), v), "%s: settings.%s",
                                 body, k);
            }
            json_decref(ws);
        }
    }
    json_decref(b);
    json_decref(w);
    json_decref(chat);
    json_decref(settings);
}

static void expect_refused(const char *body, const char *param, const char *code)
{
    json_t *b = jload(body), *chat = NULL, *settings = NULL;
    numla_openai_error err = {0};
    int ok = numla_responses_to_chat(b, &chat, &settings, &err);
    NUMLA_ASSERT_MSG(!ok && err.status == 400 && !strcmp(err.param, param) &&
                         (!code || !strcmp(err.code, code)),
                     "%s: ok %d status %d param '%s' code '%s' (want '%s' '%s'): %s", body, ok,
                     err.status, err.param, err.code, param, code ? code : "", err.message);
    CU_ASSERT_PTR_NULL(chat);
    CU_ASSERT_PTR_NULL(settings);
    json_decref(b);
}

static void test_to_chat(void)
{
    expect_chat("{\"model\": \"m\", \"input\": \"Hi\", \"max_output_tokens\": 7, \"temperature\": 0,"
                " \"top_p\": 0.5, \"stream\": true, \"user\": \"u\", \"store\": true}",
                "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}],"
                " \"max_tokens\": 7, \"temperature\": 0, \"top_p\": 0.5, \"stream\": true,"
                " \"user\": \"u\"}",
                "{\"max_output_tokens\": 7, \"temperature\": 0, \"top_p\": 0.5, \"store\": false,"
                " \"instructions\": null, \"tools\": [], \"tool_choice\": \"auto\","
                " \"text\": {\"format\": {\"type\": \"text\"}}, \"metadata\": {}}");
    expect_chat("{\"instructions\": \"Be brief.\", \"input\": [{\"role\": \"developer\","
                " \"content\": \"d\"}, {\"type\": \"message\", \"role\": \"user\", \"content\":"
                " [{\"type\": \"input_text\", \"text\": \"a\"}, {\"type\": \"input_text\","
                " \"text\": \"b\"}]}, {\"role\": \"assistant\", \"id\": \"msg_1\", \"status\":"
                " \"completed\", \"content\": [{\"type\": \"output_text\", \"text\": \"c\"}]},"
                " {\"type\": \"reasoning\", \"id\": \"rs_1\", \"summary\": []},"
                " {\"type\": \"function_call\", \"call_id\": \"c1\", \"name\": \"f\","
                " \"arguments\": \"{}\"}, {\"type\": \"function_call\", \"call_id\": \"c2\","
                " \"name\": \"g\", \"arguments\": \"{\\\"x\\\":1}\"}, {\"type\":"
                " \"function_call_output\", \"call_id\": \"c1\", \"output\": \"one\"}],"
                " \"metadata\": {\"k\": \"v\"}}",
                "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
                " {\"role\": \"system\", \"content\": \"d\"}, {\"role\": \"user\", \"content\":"
                " \"ab\"}, {\"role\": \"assistant\", \"content\": \"c\"}, {\"role\": \"assistant\","
                " \"content\": null, \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\","
                " \"function\": {\"name\": \"f\", \"arguments\": \"{}\"}}, {\"id\": \"c2\", \"type\":"
                " \"function\", \"function\": {\"name\": \"g\", \"arguments\": \"{\\\"x\\\":1}\"}}]},"
                " {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"one\"}]}",
                "{\"instructions\": \"Be brief.\", \"metadata\": {\"k\": \"v\"}}");
    expect_chat("{\"input\": \"w\", \"tools\": [{\"type\": \"function\", \"name\": \"f\","
                " \"description\": \"d\", \"parameters\": {\"type\": \"object\"}, \"strict\": true}],"
                " \"tool_choice\": {\"type\": \"function\", \"name\": \"f\"},"
                " \"parallel_tool_calls\": false, \"text\": {\"format\": {\"type\": \"json_schema\","
                " \"name\": \"s\", \"schema\": {\"type\": \"object\"}, \"strict\": true}}}",
                "{\"messages\": [{\"role\": \"user\", \"content\": \"w\"}], \"tools\": [{\"type\":"
                " \"function\", \"function\": {\"name\": \"f\", \"description\": \"d\","
                " \"parameters\": {\"type\": \"object\"}, \"strict\": true}}], \"tool_choice\":"
                " {\"type\": \"function\", \"function\": {\"name\": \"f\"}},"
                " \"parallel_tool_calls\": false, \"response_format\": {\"type\": \"json_schema\","
                " \"json_schema\": {\"name\": \"s\", \"schema\": {\"type\": \"object\"},"
                " \"strict\": true}}}",
                "{\"tool_choice\": {\"type\": \"function\", \"name\": \"f\"},"
                " \"parallel_tool_calls\": false}");
    expect_chat("{\"input\": \"w\", \"tool_choice\": \"required\", \"text\": {\"format\": {\"type\":"
                " \"json_object\"}, \"verbosity\": null}, \"reasoning\": null, \"truncation\":"
                " \"disabled\", \"include\": [], \"background\": false}",
                "{\"messages\": [{\"role\": \"user\", \"content\": \"w\"}], \"tool_choice\":"
                " \"required\", \"response_format\": {\"type\": \"json_object\"}}", NULL);
    /* reasoning.effort is chat's reasoning_effort (its values are the adapter's check), echoed
     * in the settings; a null effort or a summary alone asks nothing */
    expect_chat("{\"input\": \"w\", \"reasoning\": {\"effort\": \"max\", \"summary\": null}}",
                "{\"messages\": [{\"role\": \"user\", \"content\": \"w\"}],"
                " \"reasoning_effort\": \"max\"}",
                "{\"reasoning\": {\"effort\": \"max\", \"summary\": null}}");
    expect_chat("{\"input\": \"w\", \"reasoning\": {\"effort\": null, \"summary\": \"auto\"}}",
                "{\"messages\": [{\"role\": \"user\", \"content\": \"w\"}]}",
                "{\"reasoning\": {\"effort\": null, \"summary\": null}}");
}

static void test_refusals(void)
{
    expect_refused("{}", "input", NULL);
    expect_refused("{\"input\": []}", "input", NULL);
    expect_refused("{\"input\": 5}", "input", NULL);
    expect_refused("{\"input\": \"x\", \"frobnicate\": 1}", "frobnicate", "unknown_field");
    expect_refused("{\"input\": \"x\", \"previous_response_id\": \"resp_1\"}",
                   "previous_response_id", "unsupported_field");
    expect_refused("{\"input\": \"x\", \"background\": true}", "background", "unsupported_field");
    expect_refused("{\"input\": \"x\", \"truncation\": \"auto\"}", "truncation",
                   "unsupported_field");
    expect_refused("{\"input\": \"x\", \"include\": [\"reasoning.encrypted_content\"]}", "include",
                   "unsupported_field");
    expect_refused("{\"input\": \"x\", \"reasoning\": {\"effort\": 3}}", "reasoning.effort",
                   "invalid_value");
    expect_refused("{\"input\": \"x\", \"reasoning\": {\"effort\": \"high\", \"budget\": 1}}",
                   "reasoning.budget", "unknown_field");
    expect_refused("{\"input\": \"x\", \"reasoning\": \"high\"}", "reasoning", "invalid_value");
    expect_refused("{\"input\": \"x\", \"instructions\": 3}", "instructions", NULL);
    expect_refused("{\"input\": [{\"role\": \"moderator\", \"content\": \"x\"}]}", "input[0].role",
                   NULL);
    expect_refused("{\"input\": [{\"role\": \"user\", \"content\": [{\"type\": \"input_image\","
                   " \"image_url\": \"u\"}]}]}", "input[0].content[0].type", "unsupported_field");
    expect_refused("{\"input\": [{\"role\": \"user\", \"content\": \"x\", \"extra\": 1}]}",
                   "input[0].extra", "unknown_field");
    expect_refused("{\"input\": [{\"type\": \"function_call\", \"name\": \"f\"}]}", "input[0]",
                   NULL);
    expect_refused("{\"input\": [{\"type\": \"web_search_call\"}]}", "input[0].type",
                   "unsupported_field");
    expect_refused("{\"input\": \"x\", \"tools\": [{\"type\": \"web_search\"}]}", "tools[0]",
                   "unsupported_field");
    expect_refused("{\"input\": \"x\", \"tools\": [{\"type\": \"function\", \"name\": \"f\","
                   " \"function\": {}}]}", "tools[0].function", "unknown_field");
    expect_refused("{\"input\": \"x\", \"tool_choice\": {\"type\": \"web_search\"}}",
                   "tool_choice", NULL);
    expect_refused("{\"input\": \"x\", \"text\": {\"format\": \"json\"}}", "text.format", NULL);
    expect_refused("{\"input\": \"x\", \"text\": {\"verbosity\": \"high\"}}", "text.verbosity",
                   "unsupported_field");
    expect_refused("{\"input\": \"x\", \"metadata\": [1]}", "metadata", NULL);

    /* a chat parser's param in the Responses request's terms */
    numla_openai_error e = {0};
    numla_openai_error_set(&e, 400, "max_tokens", "invalid_value", "'max_tokens' must be >= 0");
    numla_responses_error_param(&e);
    CU_ASSERT_STRING_EQUAL(e.param, "max_output_tokens");
    CU_ASSERT_STRING_EQUAL(e.message, "'max_output_tokens' must be >= 0");
    numla_openai_error_set(&e, 400, "messages[2].content", "invalid_value", "'messages[2].content' x");
    numla_responses_error_param(&e);
    CU_ASSERT_STRING_EQUAL(e.param, "input");
    numla_openai_error_set(&e, 400, "response_format", "invalid_value", "'response_format' y");
    numla_responses_error_param(&e);
    CU_ASSERT_STRING_EQUAL(e.param, "text.format");
    numla_openai_error_set(&e, 400, "reasoning_effort", "invalid_value",
                           "'reasoning_effort' \"low\" is not one");
    numla_responses_error_param(&e);
    CU_ASSERT_STRING_EQUAL(e.param, "reasoning.effort");
    CU_ASSERT_STRING_EQUAL(e.message, "'reasoning.effort' \"low\" is not one");
    numla_openai_error_set(&e, 400, "tools[0].function.parameters", "invalid_value", "z");
    numla_responses_error_param(&e);
    CU_ASSERT_STRING_EQUAL(e.param, "tools[0].function.parameters");
}

static void test_object_and_stream(void)
{
    const numla_openai_reply r = {.endpoint = NUMLA_OPENAI_CHAT, .id = "resp_abc", .created = 7,
                                  .model = "m"};
    numla_tool_call_out call = {.id = "call_1", .name = "f", .arguments = "{\"a\":1}"};
    numla_openai_choice c = {.text = "Hi", .text_len = 2, .finish_reason = "tool_calls",
                             .has_reasoning = 1, .reasoning = "think", .reasoning_len = 5,
                             .num_tool_calls = 1, .tool_calls = &call};
    numla_openai_usage u = {.prompt_tokens = 10, .completion_tokens = 4, .cached_tokens = 2};
    const char *settings = "{\"instructions\": null, \"temperature\": 1.0, \"store\": false}";
    char *s = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_responses_format(&r, settings, &c, &u, &s), NUMLA_STATUS_OK);
    json_t *got = jload(s);
    json_t *want = jload(
        "{\"id\": \"resp_abc\", \"object\": \"response\", \"created_at\": 7, \"status\":"
        " \"completed\", \"model\": \"m\", \"incomplete_details\": null, \"output\": ["
        "{\"id\": \"rs_abc\", \"type\": \"reasoning\", \"summary\": [], \"content\": [{\"type\":"
        " \"reasoning_text\", \"text\": \"think\"}]},"
        "{\"id\": \"msg_abc\", \"type\": \"message\", \"status\": \"completed\", \"role\":"
        " \"assistant\", \"content\": [{\"type\": \"output_text\", \"text\": \"Hi\","
        " \"annotations\": []}]},"
        "{\"id\": \"fc_abc_0\", \"type\": \"function_call\", \"status\": \"completed\","
        " \"call_id\": \"call_1\", \"name\": \"f\", \"arguments\": \"{\\\"a\\\":1}\"}],"
        " \"usage\": {\"input_tokens\": 10, \"input_tokens_details\": {\"cached_tokens\": 2},"
        " \"output_tokens\": 4, \"output_tokens_details\": {\"reasoning_tokens\": 0},"
        " \"total_tokens\": 14}, \"instructions\": null, \"temperature\": 1.0, \"store\": false}");
    NUMLA_ASSERT_MSG(json_equal(got, want), "%s", s);
    json_decref(got);
    json_decref(want);
    free(s);
    /* cut by max_output_tokens: incomplete */
    numla_openai_choice cut = {.text = "ab", .text_len = 2, .finish_reason = "length"};
    CU_ASSERT_EQUAL_FATAL(numla_responses_format(&r, NULL, &cut, &u, &s), NUMLA_STATUS_OK);
    got = jload(s);
    EXPECT_STR(json_string_value(json_object_get(got, "status")), "incomplete");
    EXPECT_STR(json_string_value(json_object_get(json_object_get(got, "incomplete_details"),
                                                 "reason")), "max_output_tokens");
    json_decref(got);
    free(s);

    /* the stream: event types in order, sequence numbers 0.., the deltas add up to the text */
    numla_responses_stream st;
    numla_strbuf out = {0};
    CU_ASSERT_EQUAL(numla_responses_stream_start(&st, &r, settings, &out), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_responses_stream_text(&st, &r, "H", 1, NULL, 0, &out), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_responses_stream_text(&st, &r, "", 0, NULL, 0, &out), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_responses_stream_text(&st, &r, "i", 1, NULL, 0, &out), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_responses_stream_end(&st, &r, settings, &c, &u, &out), NUMLA_STATUS_OK);
    static const char *const types[] = {
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done",
        "response.completed"};
    const char *p = numla_strbuf_str(&out);
    char deltas[16] = "";
    size_t n = 0;
    for (; n < sizeof types / sizeof *types; n++) {
        char head[96];
        snprintf(head, sizeof head, "event: %s\ndata: ", types[n]);
        NUMLA_ASSERT_MSG(!strncmp(p, head, strlen(head)), "event %zu: want %s at: %.80s", n,
                         types[n], p);
        if (strncmp(p, head, strlen(head)))
            break;
        p += strlen(head);
        const char *end = strstr(p, "\n\n");
        CU_ASSERT_PTR_NOT_NULL_FATAL(end);
        json_t *ev = json_loadb(p, (size_t)(end - p), 0, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(ev);
        EXPECT_STR(json_string_value(json_object_get(ev, "type")), types[n]);
        CU_ASSERT_EQUAL(json_integer_value(json_object_get(ev, "sequence_number")), (json_int_t)n);
        if (!strcmp(types[n], "response.output_text.delta"))
            strncat(deltas, json_string_value(json_object_get(ev, "delta")), 4);
        if (!strcmp(types[n], "response.output_text.done"))
            EXPECT_STR(json_string_value(json_object_get(ev, "text")), "Hi");
        if (!strcmp(types[n], "response.function_call_arguments.done"))
            EXPECT_STR(json_string_value(json_object_get(ev, "arguments")), "{\"a\":1}");
        if (!strcmp(types[n], "response.completed"))
            EXPECT_STR(json_string_value(json_object_get(json_object_get(ev, "response"),
                                                         "status")), "completed");
        json_decref(ev);
        p = end + 2;
    }
    CU_ASSERT_STRING_EQUAL(deltas, "Hi");
    CU_ASSERT_STRING_EQUAL(p, ""); /* nothing after the last event: no [DONE] */
    numla_strbuf_clear(&out);
    numla_openai_error e = {0};
    numla_openai_error_set(&e, 500, NULL, "server_error", "engine step failed");
    CU_ASSERT_EQUAL(numla_responses_stream_error(&st, &e, &out), NUMLA_STATUS_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_strbuf_str(&out), "event: error\ndata: {"));
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_strbuf_str(&out), "\"message\":\"engine step failed\""));
    numla_strbuf_free(&out);
}

/* Checks out against the event types of want (n of them) in order, sequence numbers from 0,
 * and each event's output_index against idx (-1: none); returns the events' JSON, in order
 * (the caller frees them). */
static int stream_events(const char *p, const char *const *want, const int *idx, size_t n, json_t **evs)
{
    for (size_t i = 0; i < n; i++) {
        char head[96];
        snprintf(head, sizeof head, "event: %s\ndata: ", want[i]);
        NUMLA_ASSERT_MSG(!strncmp(p, head, strlen(head)), "event %zu: want %s at: %.80s", i, want[i], p);
        if (strncmp(p, head, strlen(head)))
            return 0;
        p += strlen(head);
        const char *end = strstr(p, "\n\n");
        CU_ASSERT_PTR_NOT_NULL_FATAL(end);
        evs[i] = json_loadb(p, (size_t)(end - p), 0, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(evs[i]);
        CU_ASSERT_EQUAL(json_integer_value(json_object_get(evs[i], "sequence_number")), (json_int_t)i);
        if (idx[i] >= 0)
            NUMLA_ASSERT_MSG(json_integer_value(json_object_get(evs[i], "output_index")) == idx[i],
                             "event %zu (%s): output_index %lld, want %d", i, want[i],
                             (long long)json_integer_value(json_object_get(evs[i], "output_index")), idx[i]);
        p = end + 2;
    }
    CU_ASSERT_STRING_EQUAL(p, "");
    return 1;
}

/* A thinking model's stream: the reasoning item first (its deltas add up to the reasoning,
 * closed with the whole text when the answer begins), then the message at output_index 1;
 * reasoning that arrives after the answer began is not streamed (it is in the final object);
 * a reasoning-only answer closes its item at the end. */
static void test_stream_reasoning(void)
{
    const numla_openai_reply r = {.endpoint = NUMLA_OPENAI_CHAT, .id = "resp_abc", .created = 7, .model = "m"};
    numla_openai_choice c = {.text = "Hi", .text_len = 2, .finish_reason = "stop",
                             .has_reasoning = 1, .reasoning = "Think", .reasoning_len = 5};
    numla_openai_usage u = {.prompt_tokens = 3, .completion_tokens = 4};
    numla_responses_stream st;
    numla_strbuf out = {0};
    CU_ASSERT_EQUAL(numla_responses_stream_start(&st, &r, NULL, &out), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_responses_stream_reasoning(&st, &r, "Th", 2, &out), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_responses_stream_reasoning(&st, &r, "", 0, &out), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_responses_stream_reasoning(&st, &r, "ink", 3, &out), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_responses_stream_text(&st, &r, "H", 1, "Think", 5, &out), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_responses_stream_reasoning(&st, &r, "late", 4, &out), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_responses_stream_text(&st, &r, "i", 1, "Think", 5, &out), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_responses_stream_end(&st, &r, NULL, &c, &u, &out), NUMLA_STATUS_OK);
    static const char *const types[] = {
        "response.created", "response.in_progress", "response.output_item.added",
        "response.reasoning_text.delta", "response.reasoning_text.delta", "response.reasoning_text.done",
        "response.output_item.done", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done", "response.completed"};
    static const int idx[] = {-1, -1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, -1};
    enum { N = sizeof types / sizeof *types };
    json_t *ev[N] = {0};
    if (stream_events(numla_strbuf_str(&out), types, idx, N, ev)) {
        EXPECT_STR(json_string_value(json_object_get(json_object_get(ev[2], "item"), "type")), "reasoning");
        EXPECT_STR(json_string_value(json_object_get(json_object_get(ev[2], "item"), "id")), "rs_abc");
        EXPECT_STR(json_string_value(json_object_get(ev[3], "item_id")), "rs_abc");
        EXPECT_STR(json_string_value(json_object_get(ev[3], "delta")), "Th");
        EXPECT_STR(json_string_value(json_object_get(ev[4], "delta")), "ink");
        EXPECT_STR(json_string_value(json_object_get(ev[5], "text")), "Think");
        json_t *done = json_object_get(ev[6], "item");
        EXPECT_STR(json_string_value(json_object_get(done, "status")), "completed");
        EXPECT_STR(json_string_value(json_object_get(json_array_get(json_object_get(done, "content"), 0), "text")),
                   "Think");
        EXPECT_STR(json_string_value(json_object_get(json_object_get(ev[7], "item"), "type")), "message");
        EXPECT_STR(json_string_value(json_object_get(ev[11], "text")), "Hi");
        json_t *o = json_object_get(json_object_get(ev[14], "response"), "output");
        EXPECT_STR(json_string_value(json_object_get(json_array_get(o, 0), "type")), "reasoning");
        EXPECT_STR(json_string_value(json_object_get(json_array_get(o, 1), "type")), "message");
    }
    for (int i = 0; i < N; i++)
        json_decref(ev[i]);

    /* reasoning only (cut by max_output_tokens before the answer): closed at the end */
    numla_strbuf_clear(&out);
    numla_openai_choice cut = {.text = "", .text_len = 0, .finish_reason = "length",
                               .has_reasoning = 1, .reasoning = "Hmm", .reasoning_len = 3};
    CU_ASSERT_EQUAL(numla_responses_stream_start(&st, &r, NULL, &out), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_responses_stream_reasoning(&st, &r, "Hmm", 3, &out), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_responses_stream_end(&st, &r, NULL, &cut, &u, &out), NUMLA_STATUS_OK);
    static const char *const types2[] = {
        "response.created", "response.in_progress", "response.output_item.added",
        "response.reasoning_text.delta", "response.reasoning_text.done", "response.output_item.done",
        "response.output_item.added", "response.content_part.added", "response.output_text.done",
        "response.content_part.done", "response.output_item.done", "response.incomplete"};
    static const int idx2[] = {-1, -1, 0, 0, 0, 0, 1, 1, 1, 1, 1, -1};
    enum { N2 = sizeof types2 / sizeof *types2 };
    json_t *ev2[N2] = {0};
    if (stream_events(numla_strbuf_str(&out), types2, idx2, N2, ev2))
        EXPECT_STR(json_string_value(json_object_get(ev2[4], "text")), "Hmm");
    for (int i = 0; i < N2; i++)
        json_decref(ev2[i]);
    numla_strbuf_free(&out);
}

/* With speculative decoding on, usage carries chat's usage.speculative (docs/speculative.md),
 * in the object and in the stream's response.completed: 4 verify steps checked 8 drafts and
 * accepted 6, so acceptance 6 / 8 and (6 + 4) / 4 tokens a step. Without it, none (the
 * object compared whole in test_object_and_stream). */
static void test_usage_speculative(void)
{
    const numla_openai_reply r = {.endpoint = NUMLA_OPENAI_CHAT, .id = "resp_s", .created = 1,
                                  .model = "m"};
    numla_openai_choice c = {.text = "ok", .text_len = 2, .finish_reason = "stop"};
    numla_openai_usage u = {.prompt_tokens = 5, .completion_tokens = 9, .speculative = 1,
                            .spec_steps = 4, .spec_drafted = 8, .spec_accepted = 6};
    json_t *want = jload("{\"input_tokens\": 5, \"input_tokens_details\": {\"cached_tokens\": 0},"
                         " \"output_tokens\": 9, \"output_tokens_details\": {\"reasoning_tokens\": 0},"
                         " \"total_tokens\": 14, \"speculative\": {\"verify_steps\": 4,"
                         " \"draft_tokens\": 8, \"accepted_tokens\": 6, \"acceptance_rate\": 0.75,"
                         " \"mean_accepted_length\": 2.5}}");
    char *s = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_responses_format(&r, NULL, &c, &u, &s), NUMLA_STATUS_OK);
    json_t *got = jload(s);
    NUMLA_ASSERT_MSG(json_equal(json_object_get(got, "usage"), want), "%s", s);
    json_decref(got);
    free(s);

    numla_responses_stream st;
    numla_strbuf out = {0};
    CU_ASSERT_EQUAL(numla_responses_stream_start(&st, &r, NULL, &out), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_responses_stream_text(&st, &r, "ok", 2, NULL, 0, &out), NUMLA_STATUS_OK);
    numla_strbuf_clear(&out);
    CU_ASSERT_EQUAL(numla_responses_stream_end(&st, &r, NULL, &c, &u, &out), NUMLA_STATUS_OK);
    const char *head = "event: response.completed\ndata: ";
    const char *p = strstr(numla_strbuf_str(&out), head);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    p += strlen(head);
    const char *end = strstr(p, "\n\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(end);
    json_t *ev = json_loadb(p, (size_t)(end - p), 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ev);
    NUMLA_ASSERT_MSG(json_equal(json_object_get(json_object_get(ev, "response"), "usage"), want),
                     "%.*s", (int)(end - p), p);
    json_decref(ev);
    json_decref(want);
    numla_strbuf_free(&out);
}

NUMLA_TEST_SUITE(http_responses, NULL, NULL, NUMLA_TEST(test_to_chat), NUMLA_TEST(test_refusals),
                 NUMLA_TEST(test_object_and_stream), NUMLA_TEST(test_stream_reasoning),
                 NUMLA_TEST(test_usage_speculative))
