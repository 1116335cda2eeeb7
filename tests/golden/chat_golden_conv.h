/* tests/golden/chat_golden_conv.h — the chat-template golden suites' conversations: one
 * conversation of a cases.json (`messages` with role, content, name, reasoning_content,
 * tool_call_id, tool_calls [{id, function: {name, arguments}}]; `tools`) as the
 * numla_chat_message array a renderer takes. Header-only, shared by test_chat_kimi_golden.c,
 * test_chat_glm5_golden.c and chat_golden_cases.h (the DeepSeek encodings' suites and
 * test_chat_template_golden.c). */
#ifndef NUMLA_TESTS_CHAT_GOLDEN_CONV_H
#define NUMLA_TESTS_CHAT_GOLDEN_CONV_H

#include <jansson.h>
#include <stdlib.h>

#include "engine/text/chat_template.h"

typedef struct conv_msgs {
    numla_chat_message *m;      /* (n) messages, pointing into the JSON (keep it alive) */
    numla_chat_tool_call *calls; /* (num_calls) every message's tool calls */
    char **args;                /* (num_calls) an arguments object dumped as JSON text, or NULL */
    size_t num_calls;
    int n;
    char *tools;                /* `tools` as compact JSON text, or NULL */
} conv_msgs;

/* conv: an object with `messages` (and `tools`), or a bare array of messages. A call's
 * arguments: a JSON string as written (the OpenAI form), an object dumped compact (the form the
 * GLM-5 template reads). */
static conv_msgs messages_of(json_t *conv)
{
    conv_msgs c = {0};
    json_t *ms = json_is_array(conv) ? conv : json_object_get(conv, "messages");
    c.n = (int)json_array_size(ms);
    c.m = calloc((size_t)c.n + 1, sizeof *c.m);
    size_t total = 0, i;
    json_t *e;
    json_array_foreach(ms, i, e) total += json_array_size(json_object_get(e, "tool_calls"));
    c.calls = calloc(total + 1, sizeof *c.calls);
    c.args = calloc(total + 1, sizeof *c.args);
    json_array_foreach(ms, i, e) {
        numla_chat_message *m = &c.m[i];
        m->role = json_string_value(json_object_get(e, "role"));
        m->content = json_string_value(json_object_get(e, "content"));
        m->name = json_string_value(json_object_get(e, "name"));
        m->tool_call_id = json_string_value(json_object_get(e, "tool_call_id"));
        m->reasoning_content = json_string_value(json_object_get(e, "reasoning_content"));
        json_t *tc = json_object_get(e, "tool_calls");
        if (!json_is_array(tc))
            continue;
        m->has_tool_calls = 1;
        m->num_tool_calls = (int)json_array_size(tc);
        m->tool_calls = c.calls + c.num_calls;
        size_t k;
        json_t *x;
        json_array_foreach(tc, k, x) {
            json_t *f = json_object_get(x, "function"), *a = json_object_get(f, "arguments");
            const char *text = json_string_value(a);
            if (!text && a)
                text = c.args[c.num_calls] = json_dumps(a, JSON_COMPACT | JSON_ENCODE_ANY);
            c.calls[c.num_calls++] = (numla_chat_tool_call){
                .id = json_string_value(json_object_get(x, "id")),
                .name = json_string_value(json_object_get(f, "name")), .arguments = text};
        }
    }
    json_t *tools = json_object_get(conv, "tools");
    if (tools)
        c.tools = json_dumps(tools, JSON_COMPACT | JSON_ENCODE_ANY);
    return c;
}

static void conv_free(conv_msgs *c)
{
    for (size_t k = 0; k < c->num_calls; k++)
        free(c->args[k]);
    free(c->args);
    free(c->m);
    free(c->calls);
    free(c->tools);
}

#endif
