/* engine/text/chat_template_dsv32.c — DeepSeek-V3.2's chat encoding rendered in C.
 *
 * DeepSeek-V3.2 ships no Jinja chat template: its repository's encoding/encoding_dsv32.py
 * (encode_messages) builds the prompt in Python. This is that function for numla's messages
 * (sources and what was checked: tests/golden/chat_dsv32/README.md):
 *
 *   BOS, then each message in turn:
 *   system     its content; with tools, "\n\n" and the tools block (each tool's "function"
 *              as JSON, one a line)
 *   user       "<｜User｜>" content "<｜Assistant｜>", then "<think>" when it is the last user
 *              turn of a thinking-mode conversation, "</think>" otherwise
 *   developer  the same around "\n\n# The user's message is: " content
 *   assistant  in thinking mode after the last user turn, reasoning_content "</think>"; then
 *              content, the tool calls as a DSML <function_calls> block, "<｜end▁of▁sentence｜>"
 *   tool       "<result>" content "</result>" inside <function_results>, opened at the first
 *              result of the assistant's calls and closed after its last one (then "<think>"
 *              or "</think>" as for a user turn)
 *
 * The request's tools go where DeepSeek's own test puts them: onto the first message when it
 * is a system message, else onto an empty system message put in front. What the Python code
 * refuses (an assertion or an exception) is refused here, naming the message. */
#include <stdlib.h>
#include <string.h>

#include "engine/text/chat_template_internal.h"

#define D_BOS "<｜begin▁of▁sentence｜>"
#define D_EOS "<｜end▁of▁sentence｜>"
#define D_USER "<｜User｜>"
#define D_ASSISTANT "<｜Assistant｜>"
#define DSML "｜DSML｜"

static const char dsv32_tools_head[] =
    "## Tools\n\nYou have access to a set of tools you can use to answer the user's question.\n"
    "You can invoke functions by writing a \"<" DSML "function_calls>\" block like the "
    "following as part of your reply to the user:\n"
    "<" DSML "function_calls>\n"
    "<" DSML "invoke name=\"$FUNCTION_NAME\">\n"
    "<" DSML "parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" DSML
    "parameter>\n"
    "...\n"
    "</" DSML "invoke>\n"
    "<" DSML "invoke name=\"$FUNCTION_NAME2\">\n"
    "...\n"
    "</" DSML "invoke>\n"
    "</" DSML "function_calls>\n\n"
    "String and scalar parameters should be specified as is without any escaping or quotes, "
    "while lists and objects should use JSON format. The \"string\" attribute should be set to "
    "\"true\" for string type parameters and \"false\" for other types (numbers, booleans, "
    "arrays, objects).\n\n"
    "If the thinking_mode is enabled, then after function results you should strongly consider "
    "outputting a thinking block. Here is an example:\n\n"
    "<" DSML "function_calls>\n"
    "...\n"
    "</" DSML "function_calls>\n\n"
    "<function_results>\n"
    "...\n"
    "</function_results>\n\n"
    "<think>...thinking about results</think>\n\n"
    "Here are the functions available in JSONSchema format:\n"
    "<functions>\n";
static const char dsv32_tools_tail[] = "\n</functions>\n";

static int is(const numla_chat_message *m, const char *role) { return strcmp(m->role, role) == 0; }

/* The checks encode_messages makes (its asserts and exceptions), before anything is written;
 * msgs is the conversation the encoding sees (the tools' system message included). */
static numla_status dsv32_check(const numla_chat_message *msgs, int n, int shift, int thinking,
                                int last_user)
{
    for (int i = 0; i < n; i++) {
        const numla_chat_message *m = &msgs[i];
        int at = i - shift; /* the index in the request */
        if (is(m, "system") || is(m, "assistant")) {
            /* thinking mode wants reasoning (or tool calls) after the last user turn */
            if (is(m, "assistant") && thinking && i > last_user &&
                !(m->reasoning_content && *m->reasoning_content) && m->num_tool_calls == 0)
                NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                           "messages[%d]: an assistant message after the last user message "
                           "needs reasoning_content or tool_calls in the deepseek-v3.2 "
                           "encoding's thinking mode", at);
            continue;
        }
        if (!is(m, "user") && !is(m, "developer") && !is(m, "tool"))
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                       "messages[%d].role \"%s\" is not one the deepseek-v3.2 encoding renders "
                       "(system, user, developer, assistant, tool)", at, m->role);
        /* thinking mode drops every message before the last user turn that is not a user,
         * system, tool or assistant message, and then fails on the shortened list */
        if (is(m, "developer") && thinking && i < last_user)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                       "messages[%d]: a developer message before the last user message is not "
                       "accepted by the deepseek-v3.2 encoding's thinking mode", at);
        if (!m->content || (is(m, "developer") && !*m->content))
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "messages[%d].content is %s (the deepseek-v3.2 "
                       "encoding needs text there)", at, m->content ? "empty" : "null");
        if (is(m, "tool")) {
            int p = i - 1;
            while (p >= 0 && is(&msgs[p], "tool"))
                p--;
            if (p < 0 || !is(&msgs[p], "assistant") || msgs[p].num_tool_calls < i - p)
                NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                           "messages[%d]: a tool result must follow an assistant message with "
                           "a tool call for it (deepseek-v3.2 encoding)", at);
        }
    }
    return NUMLA_STATUS_OK;
}

void numla_chat_put_dsml_tools(numla_strbuf *b, json_t *tools, const char *head,
                               const char *tail)
{
    numla_strbuf_puts(b, "\n\n");
    numla_strbuf_puts(b, head);
    size_t t;
    json_t *e;
    json_array_foreach(tools, t, e) {
        if (t)
            numla_strbuf_puts(b, "\n");
        numla_chat_put_py_json(b, json_object_get(e, "function"));
    }
    numla_strbuf_puts(b, tail);
}

void numla_chat_put_dsml_calls(numla_strbuf *b, const numla_chat_message *m,
                               json_t *const *args, const char *block)
{
    numla_strbuf_puts(b, "\n\n<" DSML);
    numla_strbuf_puts(b, block);
    numla_strbuf_puts(b, ">\n");
    for (int k = 0; k < m->num_tool_calls; k++) {
        if (k)
            numla_strbuf_puts(b, "\n");
        numla_strbuf_puts(b, "<" DSML "invoke name=\"");
        numla_strbuf_puts(b, m->tool_calls[k].name);
        numla_strbuf_puts(b, "\">\n");
        const char *key;
        json_t *v;
        int first = 1;
        json_object_foreach(args[k], key, v) {
            if (!first)
                numla_strbuf_puts(b, "\n");
            first = 0;
            numla_strbuf_puts(b, "<" DSML "parameter name=\"");
            numla_strbuf_puts(b, key);
            numla_strbuf_puts(b, json_is_string(v) ? "\" string=\"true\">" : "\" string=\"false\">");
            if (json_is_string(v))
                numla_strbuf_append(b, json_string_value(v), json_string_length(v));
            else
                numla_chat_put_py_json(b, v);
            numla_strbuf_puts(b, "</" DSML "parameter>");
        }
        numla_strbuf_puts(b, "\n</" DSML "invoke>");
    }
    numla_strbuf_puts(b, "\n</" DSML);
    numla_strbuf_puts(b, block);
    numla_strbuf_puts(b, ">");
}

static void dsv32_render(const numla_chat_message *msgs, int n, int thinking, int last_user,
                         json_t *tools, json_t *const *args, numla_strbuf *b)
{
    numla_strbuf_puts(b, D_BOS);
    for (int i = 0; i < n; i++) {
        const numla_chat_message *m = &msgs[i];
        const char *open = thinking && i == last_user ? "<think>" : "</think>";
        if (is(m, "system")) {
            if (m->content)
                numla_strbuf_puts(b, m->content);
            if (i == 0 && tools)
                numla_chat_put_dsml_tools(b, tools, dsv32_tools_head, dsv32_tools_tail);
        } else if (is(m, "user") || is(m, "developer")) {
            numla_strbuf_puts(b, D_USER);
            if (is(m, "developer"))
                numla_strbuf_puts(b, "\n\n# The user's message is: ");
            numla_strbuf_puts(b, m->content);
            numla_strbuf_puts(b, D_ASSISTANT);
            numla_strbuf_puts(b, open);
        } else if (is(m, "tool")) {
            int p = i - 1;
            while (is(&msgs[p], "tool"))
                p--;
            if (i - p == 1)
                numla_strbuf_puts(b, "\n\n<function_results>");
            numla_strbuf_puts(b, "\n<result>");
            numla_strbuf_puts(b, m->content);
            numla_strbuf_puts(b, "</result>");
            if (i - p == msgs[p].num_tool_calls) {
                numla_strbuf_puts(b, "\n</function_results>\n\n");
                numla_strbuf_puts(b, thinking && i >= last_user ? "<think>" : "</think>");
            }
        } else { /* assistant */
            if (thinking && i > last_user) {
                if (m->reasoning_content)
                    numla_strbuf_puts(b, m->reasoning_content);
                numla_strbuf_puts(b, "</think>");
            }
            if (m->content)
                numla_strbuf_puts(b, m->content);
            if (m->num_tool_calls > 0)
                numla_chat_put_dsml_calls(b, m, args, "function_calls");
            numla_strbuf_puts(b, D_EOS);
        }
        args += m->num_tool_calls;
    }
}

numla_status numla_chat_dsml_tools_parse(const char *tools_json, const char *encoding,
                                         json_t **out)
{
    json_t *tools = NULL;
    NUMLA_CHECK(numla_chat_tools_parse(tools_json, encoding, &tools));
    size_t t;
    json_t *e;
    json_array_foreach(tools, t, e) {
        if (!json_is_object(json_object_get(e, "function"))) {
            json_decref(tools);
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "tools[%zu].function is missing (the "
                       "%s encoding writes each tool's function)", t, encoding);
        }
    }
    *out = tools;
    return NUMLA_STATUS_OK;
}

numla_status numla_chat_render_dsv32(const numla_chat_message *msgs, int n,
                                     const numla_chat_options *o, numla_strbuf *b)
{
    json_t *tools = NULL;
    NUMLA_CHECK(numla_chat_dsml_tools_parse(o->tools_json, "deepseek-v3.2", &tools));
    /* the tools ride on the first message when it is a system message, else on an empty
     * system message put in front */
    int shift = tools && !(n > 0 && is(&msgs[0], "system"));
    int total = 0;
    for (int i = 0; i < n; i++)
        total += msgs[i].num_tool_calls;
    numla_chat_message *all = calloc((size_t)n + 1, sizeof *all);
    json_t **args = calloc((size_t)total + 1, sizeof *args);
    if (!all || !args) {
        free(all);
        free(args);
        json_decref(tools);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "deepseek-v3.2: %d messages", n);
    }
    all[0] = (numla_chat_message){.role = "system"};
    memcpy(all + shift, msgs, (size_t)n * sizeof *msgs);
    int na = n + shift, last_user = -1;
    for (int i = 0; i < na; i++)
        if (is(&all[i], "user") || is(&all[i], "developer"))
            last_user = i;
    numla_status s = dsv32_check(all, na, shift, o->thinking, last_user);
    int used = 0;
    for (int i = 0; i < n && s == NUMLA_STATUS_OK; i++)
        for (int k = 0; k < msgs[i].num_tool_calls && s == NUMLA_STATUS_OK; k++)
            s = numla_chat_tool_arguments(&msgs[i], i, k, "deepseek-v3.2", &args[used++]);
    if (s == NUMLA_STATUS_OK)
        dsv32_render(all, na, o->thinking, last_user, tools, args, b);
    for (int k = 0; k < used; k++)
        json_decref(args[k]);
    free(args);
    free(all);
    json_decref(tools);
    return s;
}
