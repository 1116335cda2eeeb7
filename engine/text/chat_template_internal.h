/* engine/text/chat_template_internal.h — what the chat-template renderers share (private to
 * engine/text/ and its tests).
 *
 * chat_template.c keeps the one table of families, recognition, loading and the DeepSeek /
 * Kimi renderers; chat_template_glm.c renders GLM-5's template, chat_template_dsv32.c
 * DeepSeek-V3.2's Python encoding and chat_template_dsv4.c DeepSeek-V4's (the two share the
 * DSML tool-call writer). Every renderer appends to one numla_strbuf, whose oom flag
 * the caller checks once at the end. */
#ifndef NUMLA_ENGINE_CHAT_TEMPLATE_INTERNAL_H
#define NUMLA_ENGINE_CHAT_TEMPLATE_INTERNAL_H

#include <jansson.h>
#include <stddef.h>

#include "common/status.h"
#include "common/strbuf.h"
#include "engine/text/chat_template.h"
#include "engine/text/tool_calls.h"

typedef numla_status (*numla_chat_render_fn)(const numla_chat_template *t,
                                             const numla_chat_message *msgs, int n,
                                             const numla_chat_options *o, numla_strbuf *b);
typedef numla_status (*numla_chat_check_fn)(const numla_chat_template *t,
                                            const numla_chat_message *msgs, int n);

/* A row of the one table of chat-template families (chat_template.c). */
typedef struct numla_chat_family {
    const char *name;            /* --chat-template name; text/templates/<name>.jinja */
    numla_chat_render_fn render; /* the template as C */
    numla_chat_check_fn check;   /* what it refuses before rendering */
    const char *const *stop;     /* turn-ending tokens besides the EOS, NULL-terminated */
    const numla_tool_syntax *tools; /* its tool-call markers (tool_calls.c); NULL: none */
    unsigned flags;              /* numla_chat_ability bits and chat_template.c's own */
    const char *const *efforts;  /* the reasoning_effort values it renders, NULL-terminated;
                                    NULL: none */
} numla_chat_family;

/* The Jinja text of text/templates/<name>.jinja, compiled in by the build
 * (cmake/embed_files.cmake); NULL for any other name. Not collective. */
const char *numla_chat_jinja_source(const char *name);

/* The tool-call markers of a family (NULL: unknown name or none), and the i-th family's name
 * (NULL past the last). Not collective. */
const numla_tool_syntax *numla_chat_family_tool_markers(const char *name);
const char *numla_chat_family_name(int i);

/* The markers, one object per syntax (tool_calls.c). */
extern const numla_tool_syntax numla_tool_markers_deepseek_fenced; /* V3, R1 */
extern const numla_tool_syntax numla_tool_markers_deepseek;        /* V3.1 */
extern const numla_tool_syntax numla_tool_markers_kimi;            /* K2, K2-Thinking */
extern const numla_tool_syntax numla_tool_markers_dsml;            /* V3.2's DSML */
extern const numla_tool_syntax numla_tool_markers_dsml_v4;         /* V4's DSML */
extern const numla_tool_syntax numla_tool_markers_glm;             /* GLM-5 */

/* v as Python's json.dumps(v, ensure_ascii=False) writes it: ", " and ": " separators, keys in
 * their order, non-ASCII as is, floats as repr() writes them. Not collective. */
void numla_chat_put_py_json(numla_strbuf *b, json_t *v);

/* Jinja's truth of a JSON value: null, false, 0, "", [] and {} are false. Not collective. */
int numla_chat_json_truthy(const json_t *v);

/* Parse a request's tools (JSON text) for a renderer that needs an array: *out is NULL when
 * tools_json is NULL or not truthy, else a new reference to the array. Fails naming "tools"
 * when the text is not JSON or not an array. Not collective. */
numla_status numla_chat_tools_parse(const char *tools_json, const char *template_name,
                                    json_t **out);

/* Parse messages[i].tool_calls[k].function.arguments (JSON text) as the object whose keys the
 * GLM-5 and DeepSeek-V3.2 formats write one by one; fails naming the field otherwise.
 * Not collective. */
numla_status numla_chat_tool_arguments(const numla_chat_message *m, int i, int k,
                                       const char *template_name, json_t **out);

/* GLM-5 (glm_moe_dsa) and GLM-4.7's template; see chat_template_glm.c. Not collective. */
numla_status numla_chat_render_glm5(const numla_chat_message *msgs, int n,
                                    const numla_chat_options *o, numla_strbuf *b);

/* DeepSeek-V3.2's encode_messages; see chat_template_dsv32.c. Not collective. */
numla_status numla_chat_render_dsv32(const numla_chat_message *msgs, int n,
                                     const numla_chat_options *o, numla_strbuf *b);

/* DeepSeek-V4's encode_messages; see chat_template_dsv4.c. Not collective. */
numla_status numla_chat_render_dsv4(const numla_chat_message *msgs, int n,
                                    const numla_chat_options *o, numla_strbuf *b);

/* m's tool calls as a DSML block, as both DeepSeek encodings write it: "\n\n<｜DSML｜BLOCK>\n",
 * one <｜DSML｜invoke name="NAME"> per call (a line each), its arguments args[k] (a JSON object)
 * one <｜DSML｜parameter name="KEY" string="true|false"> a line (strings as is, the rest as
 * Python's json.dumps), then "\n</｜DSML｜BLOCK>". block: "function_calls" (V3.2),
 * "tool_calls" (V4). Not collective. */
void numla_chat_put_dsml_calls(numla_strbuf *b, const numla_chat_message *m,
                               json_t *const *args, const char *block);
/* numla_chat_tools_parse for the DSML encodings (V3.2, V4), which write each tool's
 * `function`: INVALID_ARG naming tools[i] and `encoding` when one has none. */
numla_status numla_chat_dsml_tools_parse(const char *tools_json, const char *encoding,
                                         json_t **tools);
/* The DSML encodings' tool declarations (V3.2, V4): "\n\n", head, each tool's `function`
 * as Python's json.dumps, a line each, then tail. Not collective. */
void numla_chat_put_dsml_tools(numla_strbuf *b, json_t *tools, const char *head,
                               const char *tail);

#endif
