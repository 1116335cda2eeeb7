/* engine/text/chat_template_glm.c — GLM-5's chat template rendered in C.
 *
 * The template (zai-org/GLM-5's chat_template.jinja, the same text as GLM-4.7's; source:
 * tests/golden/chat_glm5/README.md) read for numla's messages under transformers' settings
 * (trim_blocks, lstrip_blocks): what each role writes, the reasoning it keeps, and the Python
 * string methods it calls (str.strip() strips Unicode whitespace, rstrip/lstrip('\n') only
 * newlines). Checked byte for byte against tests/golden/chat_glm5/. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/chat_template_internal.h"

#define G_SYS "<|system|>"
#define G_USER "<|user|>"
#define G_ASSISTANT "<|assistant|>"
#define G_OBSERVATION "<|observation|>"

/* The tools block the template writes when `tools` is truthy: each tool as tojson. */
static const char glm_tools_head[] =
    G_SYS "\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
          "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n";
static const char glm_tools_tail[] =
    "</tools>\n\nFor each function call, output the function name and arguments within the "
    "following XML format:\n<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key>"
    "<arg_value>{arg-value-1}</arg_value><arg_key>{arg-key-2}</arg_key><arg_value>{arg-value-2}"
    "</arg_value>...</tool_call>";

/* The code point at s (n bytes left; 0 when n == 0), its length in *len (1 for a bad byte). */
static uint32_t utf8_at(const unsigned char *s, size_t n, size_t *len)
{
    *len = n ? 1 : 0;
    if (!n)
        return 0;
    uint32_t c = s[0];
    size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (k <= 1 || k > n)
        return c;
    uint32_t v = c & (0x7Fu >> k);
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return c;
        v = v << 6 | (s[i] & 0x3F);
    }
    *len = k;
    return v;
}

/* Python's str.isspace() for one code point. */
static int py_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Python's s.strip(): [*a, *e) of s[0, n). */
static void py_strip(const char *s, size_t n, size_t *a, size_t *e)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, len;
    while (i < n && py_space(utf8_at(u + i, n - i, &len)))
        i += len;
    size_t j = n;
    while (j > i) {
        size_t k = j - 1;
        while (k > i && (u[k] & 0xC0) == 0x80)
            k--;
        if (!py_space(utf8_at(u + k, j - k, &len)) || k + len != j)
            break;
        j = k;
    }
    *a = i;
    *e = j;
}

static void put_py_stripped(numla_strbuf *b, const char *s, size_t n)
{
    size_t a, e;
    py_strip(s, n, &a, &e);
    numla_strbuf_append(b, s + a, e - a);
}

/* The last occurrence of pat in s[0, n), NULL when none. */
static const char *last_of(const char *s, size_t n, const char *pat)
{
    const char *hit = NULL;
    size_t m = strlen(pat);
    for (const char *p = s; (size_t)(p - s) + m <= n; p++) {
        p = memchr(p, pat[0], n - (size_t)(p - s));
        if (!p || (size_t)(p - s) + m > n)
            break;
        if (memcmp(p, pat, m) == 0)
            hit = p;
    }
    return hit;
}

/* One assistant turn: its reasoning (kept or reduced to "</think>"), content and tool calls. */
static void glm_assistant(const numla_chat_message *m, int keep, json_t *const *args,
                          numla_strbuf *b)
{
    const char *c = m->content ? m->content : "";
    size_t cn = strlen(c);
    const char *rc = "";
    size_t rn = 0;
    if (m->reasoning_content) {
        rc = m->reasoning_content;
        rn = strlen(rc);
    } else {
        const char *close = strstr(c, "</think>");
        if (close) {
            /* reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1]
             *             .lstrip('\n'); content = content.split('</think>')[-1].lstrip('\n') */
            size_t before = (size_t)(close - c);
            while (before > 0 && c[before - 1] == '\n')
                before--;
            const char *open = last_of(c, before, "<think>");
            rc = open ? open + strlen("<think>") : c;
            rn = (size_t)(c + before - rc);
            while (rn > 0 && *rc == '\n') {
                rc++;
                rn--;
            }
            const char *after = last_of(c, cn, "</think>") + strlen("</think>");
            while (*after == '\n')
                after++;
            cn -= (size_t)(after - c);
            c = after;
        }
    }
    if (keep && rn > 0) {
        numla_strbuf_puts(b, "<think>");
        put_py_stripped(b, rc, rn);
        numla_strbuf_puts(b, "</think>");
    } else {
        numla_strbuf_puts(b, "</think>");
    }
    put_py_stripped(b, c, cn);
    for (int k = 0; k < m->num_tool_calls; k++) {
        numla_strbuf_puts(b, "<tool_call>");
        numla_strbuf_puts(b, m->tool_calls[k].name);
        const char *key;
        json_t *v;
        json_object_foreach(args[k], key, v) {
            numla_strbuf_puts(b, "<arg_key>");
            numla_strbuf_puts(b, key);
            numla_strbuf_puts(b, "</arg_key><arg_value>");
            if (json_is_string(v))
                numla_strbuf_append(b, json_string_value(v), json_string_length(v));
            else
                numla_chat_put_py_json(b, v);
            numla_strbuf_puts(b, "</arg_value>");
        }
        numla_strbuf_puts(b, "</tool_call>");
    }
}

static int is(const numla_chat_message *m, const char *role) { return strcmp(m->role, role) == 0; }

numla_status numla_chat_render_glm5(const numla_chat_message *msgs, int n,
                                    const numla_chat_options *o, numla_strbuf *b)
{
    json_t *tools = NULL;
    NUMLA_CHECK(numla_chat_tools_parse(o->tools_json, "glm-5", &tools));
    /* every tool call's arguments, parsed before anything is written */
    int total = 0;
    for (int i = 0; i < n; i++)
        total += msgs[i].num_tool_calls;
    json_t **args = calloc((size_t)total + 1, sizeof *args);
    if (!args) {
        json_decref(tools);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "glm-5: %d tool calls", total);
    }
    numla_status s = NUMLA_STATUS_OK;
    int used = 0;
    for (int i = 0; i < n && s == NUMLA_STATUS_OK; i++)
        for (int k = 0; k < msgs[i].num_tool_calls && s == NUMLA_STATUS_OK; k++)
            s = numla_chat_tool_arguments(&msgs[i], i, k, "glm-5", &args[used++]);
    if (s == NUMLA_STATUS_OK) {
        numla_strbuf_puts(b, "[gMASK]<sop>");
        if (tools) {
            numla_strbuf_puts(b, glm_tools_head);
            size_t t;
            json_t *e;
            json_array_foreach(tools, t, e) {
                numla_chat_put_py_json(b, e);
                numla_strbuf_puts(b, "\n");
            }
            numla_strbuf_puts(b, glm_tools_tail);
        }
        int last_user = -1;
        for (int i = 0; i < n; i++)
            if (is(&msgs[i], "user"))
                last_user = i;
        json_t **call_args = args;
        for (int i = 0; i < n; i++) {
            const numla_chat_message *m = &msgs[i];
            /* a null content is dropped before the template sees it: it writes nothing */
            const char *c = m->content ? m->content : "";
            if (is(m, "user")) {
                numla_strbuf_puts(b, G_USER);
                numla_strbuf_puts(b, c);
            } else if (is(m, "assistant")) {
                numla_strbuf_puts(b, G_ASSISTANT);
                glm_assistant(m, o->keep_reasoning || i > last_user, call_args, b);
                call_args += m->num_tool_calls;
            } else if (is(m, "tool")) {
                /* a run of tool results shares one <|observation|>; a null one (not a string)
                 * opens its own and writes nothing */
                if (!m->content || i == 0 || !is(&msgs[i - 1], "tool"))
                    numla_strbuf_puts(b, G_OBSERVATION);
                if (m->content) {
                    numla_strbuf_puts(b, "<tool_response>");
                    numla_strbuf_puts(b, m->content);
                    numla_strbuf_puts(b, "</tool_response>");
                }
            } else if (is(m, "system")) {
                numla_strbuf_puts(b, G_SYS);
                numla_strbuf_puts(b, c);
            }
        }
        if (o->add_generation_prompt) {
            numla_strbuf_puts(b, G_ASSISTANT);
            numla_strbuf_puts(b, o->thinking_given && !o->thinking ? "</think>" : "<think>");
        }
    }
    for (int k = 0; k < used; k++)
        json_decref(args[k]);
    free(args);
    json_decref(tools);
    return s;
}
