/* engine/text/chat_template_internal.h — what the chat-template renderers share (private to
 * engine/text/ and its tests).
 *
 * chat_template.c keeps the built-in table, recognition, loading and the DeepSeek / Kimi
 * renderers; chat_template_glm.c renders GLM-5's template and chat_template_dsv32.c
 * DeepSeek-V3.2's Python encoding. Every renderer appends to one numla_strbuf, whose oom flag
 * the caller checks once at the end. */
#ifndef NUMLA_ENGINE_CHAT_TEMPLATE_INTERNAL_H
#define NUMLA_ENGINE_CHAT_TEMPLATE_INTERNAL_H

#include <jansson.h>
#include <stddef.h>

#include "common/status.h"
#include "common/strbuf.h"
#include "engine/text/chat_template.h"

typedef enum numla_chat_kind {
    NUMLA_CHAT_KIND_V2,
    NUMLA_CHAT_KIND_V2_5,
    NUMLA_CHAT_KIND_V3,
    NUMLA_CHAT_KIND_R1,
    NUMLA_CHAT_KIND_V3_1,
    NUMLA_CHAT_KIND_KIMI_K2,
    NUMLA_CHAT_KIND_KIMI_K2_THINKING,
    NUMLA_CHAT_KIND_GLM_5,
    NUMLA_CHAT_KIND_DEEPSEEK_V3_2,
} numla_chat_kind;

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

/* GLM-5's chat_template.jinja (the text recognised in a tokenizer_config.json). */
extern const char numla_chat_tmpl_glm5[];

/* GLM-5 (glm_moe_dsa) and GLM-4.7's template; see chat_template_glm.c. Not collective. */
numla_status numla_chat_render_glm5(const numla_chat_message *msgs, int n,
                                    const numla_chat_options *o, numla_strbuf *b);

/* DeepSeek-V3.2's encode_messages; see chat_template_dsv32.c. Not collective. */
numla_status numla_chat_render_dsv32(const numla_chat_message *msgs, int n,
                                     const numla_chat_options *o, numla_strbuf *b);

#endif
