/* engine/text/chat_template_dsv4.c — DeepSeek-V4's chat encoding rendered in C.
 *
 * DeepSeek-V4 (Flash and Pro) ships no Jinja chat template: its repository's
 * encoding/encoding_dsv4.py (encode_messages) builds the prompt in Python. This is that
 * function for numla's messages with drop_thinking at its default (sources and what was
 * checked: tests/golden/chat_dsv4/README.md). It differs from V3.2's
 * (chat_template_dsv32.c) in where the turns open and in tool results; the DSML tool-call block
 * is the same writer with the block named "tool_calls":
 *
 *   BOS, then (thinking mode, reasoning_effort "max", at least one message left to render)
 *   the encoding's REASONING_EFFORT_MAX paragraph, then the messages after three passes:
 *   merge      every run of user and tool messages is one user turn whose blocks are the
 *              users' texts and the tools' "<tool_result>" content "</tool_result>", joined by
 *              "\n\n"
 *   sort       in a user turn holding two or more results, the results take the order of the
 *              latest assistant's calls (by tool_call_id; an unknown id sorts as the first call)
 *   drop       thinking mode without tools: a developer message (or any other role) before
 *              the last user turn is left out
 *   system     its content; with tools, "\n\n" and the tools block (each tool's "function" as
 *              JSON, one a line)
 *   user       "<｜User｜>" and its blocks
 *   developer  "<｜User｜>" content, the tools block when it carries them
 *   assistant  in thinking mode, when it comes after the last user turn (or tools were given),
 *              reasoning_content "</think>"; then content, the calls, "<｜end▁of▁sentence｜>"
 *   after a user or developer turn that the conversation ends with or an assistant follows:
 *              "<｜Assistant｜>" then "<think>" (thinking mode, the last user turn, or any turn
 *              when tools were given) or "</think>"
 *
 * The request's tools go where vLLM's DeepSeek-V4 tokenizer puts them: onto the first message
 * when it is a system or developer message, else onto a system message without content put in
 * front. thinking: on unless the request gave it as false (vLLM's default for V4).
 * reasoning_effort: "high" renders nothing of its own, "max" the paragraph above (the values
 * are checked by numla_chat_template_render_opts from the families table). What the
 * Python code refuses is refused here, naming the message; so are a null user or tool content
 * (Python would fail, or write "None"). */
#include <stdlib.h>
#include <string.h>

#include "engine/text/chat_template_internal.h"

#define D_BOS "<｜begin▁of▁sentence｜>"
#define D_EOS "<｜end▁of▁sentence｜>"
#define D_USER "<｜User｜>"
#define D_ASSISTANT "<｜Assistant｜>"
#define DSML "｜DSML｜"

static const char dsv4_tools_head[] =
    "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can "
    "invoke tools by writing a \"<" DSML "tool_calls>\" block like the following:\n\n"
    "<" DSML "tool_calls>\n"
    "<" DSML "invoke name=\"$TOOL_NAME\">\n"
    "<" DSML "parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" DSML
    "parameter>\n"
    "...\n"
    "</" DSML "invoke>\n"
    "<" DSML "invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</" DSML "invoke>\n"
    "</" DSML "tool_calls>\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types "
    "(numbers, booleans, arrays, objects), pass the value in JSON format and set "
    "`string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning "
    "inside <think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n";
static const char dsv4_tools_tail[] =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke "
    "tool calls.\n";

/* A user turn's piece: a user's text or a tool's result. */
typedef struct v4_block {
    const char *text;
    const char *id; /* a result's tool_call_id (NULL: none) */
    int result;
} v4_block;

/* A message as the encoding renders it. */
typedef struct v4_msg {
    const char *role;
    const numla_chat_message *m; /* NULL for a merged user turn and the tools' system message */
    int at;                      /* the request's index (of a user turn's first message), -1 */
    int tools;                   /* it carries the request's tools */
    int block0, num_blocks;      /* a user turn's blocks */
    json_t *const *args;         /* an assistant's calls' arguments */
} v4_msg;

static int is(const char *role, const char *r) { return strcmp(role, r) == 0; }

/* encode_arguments_to_dsml: arguments that are not JSON are the one string "arguments"; JSON
 * that is not an object fails there (.items()). */
static numla_status dsv4_arguments(const numla_chat_message *m, int i, int k, json_t **out)
{
    *out = json_loads(m->tool_calls[k].arguments, JSON_DECODE_ANY, NULL);
    if (!*out) {
        *out = json_pack("{s:s}", "arguments", m->tool_calls[k].arguments);
        if (!*out)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "messages[%d].tool_calls[%d].function."
                       "arguments is not UTF-8 text", i, k);
        return NUMLA_STATUS_OK;
    }
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "messages[%d].tool_calls[%d].function.arguments is JSON but not an object "
                   "(the deepseek-v4 encoding writes its keys one by one)", i, k);
    }
    return NUMLA_STATUS_OK;
}

/* sort_tool_results_by_call_order's key: the last of calls' positions with this id (Python's
 * dict keeps the last), 0 when none has it. */
static int dsv4_call_order(const numla_chat_message *calls, const char *id)
{
    int order = 0;
    for (int k = 0; calls && id && *id && k < calls->num_tool_calls; k++)
        if (calls->tool_calls[k].id && strcmp(calls->tool_calls[k].id, id) == 0)
            order = k;
    return order;
}

static int dsv4_calls_have_ids(const numla_chat_message *calls)
{
    for (int k = 0; calls && k < calls->num_tool_calls; k++)
        if (calls->tool_calls[k].id && *calls->tool_calls[k].id)
            return 1;
    return 0;
}

/* Put a turn's results in the order of the latest calls (a stable sort; texts keep their
 * places). */
static numla_status dsv4_sort_results(v4_block *bl, int nb, const numla_chat_message *calls)
{
    int results = 0;
    for (int j = 0; j < nb; j++)
        results += bl[j].result;
    if (results < 2 || !dsv4_calls_have_ids(calls))
        return NUMLA_STATUS_OK;
    v4_block *r = malloc((size_t)results * sizeof *r);
    if (!r)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "deepseek-v4: %d tool results", results);
    int k = 0;
    for (int j = 0; j < nb; j++)
        if (bl[j].result) {
            v4_block x = bl[j];
            int key = dsv4_call_order(calls, x.id), p = k++;
            while (p > 0 && dsv4_call_order(calls, r[p - 1].id) > key) {
                r[p] = r[p - 1];
                p--;
            }
            r[p] = x;
        }
    k = 0;
    for (int j = 0; j < nb; j++)
        if (bl[j].result)
            bl[j] = r[k++];
    free(r);
    return NUMLA_STATUS_OK;
}

/* encoding_dsv4.py's REASONING_EFFORT_MAX, written before the first message it renders */
static const char dsv4_effort_max[] =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate "
    "step, considered alternative, and rejected hypothesis to ensure absolutely no assumption "
    "is left unchecked.\n\n";

/* render_message for every message of L (n of them); effort_max: the paragraph above before
 * message 0 (thinking mode only, as render_message does). */
static void dsv4_render(const v4_msg *L, int n, const v4_block *bl, int thinking, int drop,
                        int effort_max, json_t *tools, numla_strbuf *b)
{
    int last_user = -1;
    for (int i = 0; i < n; i++)
        if (is(L[i].role, "user") || is(L[i].role, "developer"))
            last_user = i;
    numla_strbuf_puts(b, D_BOS);
    if (n > 0 && thinking && effort_max)
        numla_strbuf_puts(b, dsv4_effort_max);
    for (int i = 0; i < n; i++) {
        const v4_msg *x = &L[i];
        const numla_chat_message *m = x->m;
        if (is(x->role, "system")) {
            if (m && m->content)
                numla_strbuf_puts(b, m->content);
            if (x->tools)
                numla_chat_put_dsml_tools(b, tools, dsv4_tools_head, dsv4_tools_tail);
        } else if (is(x->role, "developer")) {
            numla_strbuf_puts(b, D_USER);
            numla_strbuf_puts(b, m->content);
            if (x->tools)
                numla_chat_put_dsml_tools(b, tools, dsv4_tools_head, dsv4_tools_tail);
        } else if (is(x->role, "user")) {
            numla_strbuf_puts(b, D_USER);
            for (int j = 0; j < x->num_blocks; j++) {
                const v4_block *k = &bl[x->block0 + j];
                if (j)
                    numla_strbuf_puts(b, "\n\n");
                if (k->result)
                    numla_strbuf_puts(b, "<tool_result>");
                numla_strbuf_puts(b, k->text);
                if (k->result)
                    numla_strbuf_puts(b, "</tool_result>");
            }
        } else { /* assistant */
            if (thinking && (!drop || i > last_user)) {
                if (m->reasoning_content)
                    numla_strbuf_puts(b, m->reasoning_content);
                numla_strbuf_puts(b, "</think>");
            }
            if (m->content)
                numla_strbuf_puts(b, m->content);
            if (m->num_tool_calls > 0)
                numla_chat_put_dsml_calls(b, m, x->args, "tool_calls");
            numla_strbuf_puts(b, D_EOS);
        }
        /* the assistant's opening, after a user turn that ends the conversation or that an
         * assistant answers */
        if (i + 1 < n && !is(L[i + 1].role, "assistant"))
            continue;
        if (is(x->role, "user") || is(x->role, "developer")) {
            numla_strbuf_puts(b, D_ASSISTANT);
            numla_strbuf_puts(b, thinking && (!drop || i >= last_user) ? "<think>" : "</think>");
        }
    }
}

/* The passes and the checks, then the render; L, bl and args are the caller's (sized n + 1). */
static numla_status dsv4_encode(const numla_chat_message *msgs, int n, int thinking,
                                int effort_max, json_t *tools, v4_msg *L, v4_block *bl,
                                json_t *const *args, numla_strbuf *b)
{
    /* the request's tools ride on a leading system or developer message */
    int nl = 0, nb = 0;
    int on_first = tools && n > 0 && (is(msgs[0].role, "system") || is(msgs[0].role, "developer"));
    if (tools && !on_first)
        L[nl++] = (v4_msg){.role = "system", .at = -1, .tools = 1};
    /* merge: runs of user and tool messages become one user turn */
    for (int i = 0; i < n; i++) {
        const numla_chat_message *m = &msgs[i];
        int result = is(m->role, "tool");
        if (result || is(m->role, "user")) {
            if (!m->content)
                NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "messages[%d].content is null (the "
                           "deepseek-v4 encoding needs text there)", i);
            if (!(nl > 0 && is(L[nl - 1].role, "user")))
                L[nl++] = (v4_msg){.role = "user", .at = i, .block0 = nb};
            bl[nb++] = (v4_block){.text = m->content, .id = m->tool_call_id, .result = result};
            L[nl - 1].num_blocks++;
        } else {
            L[nl++] = (v4_msg){.role = m->role, .m = m, .at = i, .tools = i == 0 && on_first,
                               .args = args};
        }
        args += m->num_tool_calls;
    }
    /* sort each turn's results by the latest calls */
    const numla_chat_message *calls = NULL;
    for (int i = 0; i < nl; i++) {
        if (is(L[i].role, "assistant") && L[i].m->num_tool_calls > 0)
            calls = L[i].m;
        else if (is(L[i].role, "user"))
            NUMLA_CHECK(dsv4_sort_results(bl + L[i].block0, L[i].num_blocks, calls));
    }
    /* drop: thinking mode without tools leaves out what is neither a user, system nor
     * assistant message before the last user turn */
    int drop = tools == NULL;
    if (thinking && drop) {
        int last_user = -1, k = 0;
        for (int i = 0; i < nl; i++)
            if (is(L[i].role, "user") || is(L[i].role, "developer"))
                last_user = i;
        for (int i = 0; i < nl; i++)
            if (i >= last_user || is(L[i].role, "user") || is(L[i].role, "system") ||
                is(L[i].role, "assistant"))
                L[k++] = L[i];
        nl = k;
    }
    for (int i = 0; i < nl; i++) {
        const char *r = L[i].role;
        if (!is(r, "system") && !is(r, "user") && !is(r, "developer") && !is(r, "assistant"))
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                       "messages[%d].role \"%s\" is not one the deepseek-v4 encoding renders "
                       "(system, user, developer, assistant, tool)", L[i].at, r);
        if (is(r, "developer") && !(L[i].m->content && *L[i].m->content))
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "messages[%d].content is %s (the deepseek-v4 "
                       "encoding needs text in a developer message)", L[i].at,
                       L[i].m->content ? "empty" : "null");
    }
    dsv4_render(L, nl, bl, thinking, drop, effort_max, tools, b);
    return NUMLA_STATUS_OK;
}

numla_status numla_chat_render_dsv4(const numla_chat_message *msgs, int n,
                                    const numla_chat_options *o, numla_strbuf *b)
{
    json_t *tools = NULL;
    NUMLA_CHECK(numla_chat_dsml_tools_parse(o->tools_json, "deepseek-v4", &tools));
    int total = 0;
    for (int i = 0; i < n; i++)
        total += msgs[i].num_tool_calls;
    v4_msg *L = calloc((size_t)n + 1, sizeof *L);
    v4_block *bl = calloc((size_t)n + 1, sizeof *bl);
    json_t **args = calloc((size_t)total + 1, sizeof *args);
    numla_status s = NUMLA_STATUS_OK;
    if (!L || !bl || !args)
        s = numla_error_set(NUMLA_STATUS_NO_MEMORY, __FILE__, __LINE__, __func__,
                            "deepseek-v4: %d messages", n);
    int used = 0;
    for (int i = 0; i < n && s == NUMLA_STATUS_OK; i++)
        for (int k = 0; k < msgs[i].num_tool_calls && s == NUMLA_STATUS_OK; k++)
            s = dsv4_arguments(&msgs[i], i, k, &args[used++]);
    /* thinking is on unless the request turned it off */
    const int thinking = o->thinking_given ? o->thinking != 0 : 1;
    const int effort_max = o->reasoning_effort && !strcmp(o->reasoning_effort, "max");
    if (s == NUMLA_STATUS_OK)
        s = dsv4_encode(msgs, n, thinking, effort_max, tools, L, bl, args, b);
    for (int k = 0; k < used; k++)
        json_decref(args[k]);
    free(args);
    free(bl);
    free(L);
    json_decref(tools);
    return s;
}
