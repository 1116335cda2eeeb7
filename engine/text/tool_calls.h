/* engine/text/tool_calls.h — the tool calls a model writes in its chat template's own syntax,
 * read back as OpenAI tool calls (id, name, arguments as JSON text).
 *
 * One table (tool_calls.c) gives each chat-template family's markers, the same strings the
 * templates write for tool-call history (chat_template.c, chat_template_glm.c,
 * chat_template_dsv32.c). Two kinds of syntax read them:
 *
 *   SEP   a call is  CALL_BEGIN head SEP arguments CALL_END  inside SECTION_BEGIN .. SECTION_END;
 *         the arguments are JSON text, kept as the model wrote it (whitespace around trimmed).
 *         deepseek-v3 / deepseek-r1  head "function", then "<｜tool▁sep｜>NAME\n```json\nARGS\n```"
 *         deepseek-v3.1              head NAME, "<｜tool▁sep｜>ARGS"
 *         kimi-k2 / kimi-k2-thinking head "functions.NAME:IDX" (also the call's id, as Kimi's API
 *                                    returns it), "<|tool_call_argument_begin|>ARGS"
 *   TAGS  a call is  CALL_BEGIN name NAME_END (KEY_OPEN key KEY_CLOSE VALUE_OPEN value
 *         VALUE_CLOSE)* CALL_END; the arguments are assembled into a JSON object.
 *         deepseek-v3.2 (DSML)  <｜DSML｜function_calls> <｜DSML｜invoke name="NAME"> ...
 *                               <｜DSML｜parameter name="K" string="true|false">V</｜DSML｜parameter>:
 *                               string="true" values are strings as written, string="false"
 *                               values JSON
 *         deepseek-v4 (DSML)    the same inside <｜DSML｜tool_calls> .. </｜DSML｜tool_calls>
 *         glm-5                 <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>
 *                               </tool_call>, no section: a value (trimmed) is a string when the
 *                               request's tool declares that parameter "type": "string", else
 *                               its JSON when it parses as JSON, else a string (vLLM's glm4_moe)
 *
 * Text outside the calls is content. The parser is incremental: text arrives in pieces cut
 * anywhere (a marker may be split), and the events it gives (content, call) are the same,
 * concatenated, whatever the cuts. A possible start of a marker is held back, never given as
 * content; a call comes out whole when its end marker arrives. Whitespace between calls and
 * after the last one is dropped. Malformed input is never lost: a call that does not parse (no
 * separator, a name that is empty or holds markup, quotes, whitespace or control characters,
 * arguments that are not a JSON object, a DSML string="false" value that is not JSON) is
 * returned as content, exactly as written (with what opened its section while the section has given no call yet);
 * so is a call or section still open at the end, and a section without calls.
 * Ids: Kimi's own; otherwise "call_" and 24 letters/digits made from the seed and the call's
 * index. Not thread-safe (one per choice); not collective.
 */
#ifndef NUMLA_ENGINE_TEXT_TOOL_CALLS_H
#define NUMLA_ENGINE_TEXT_TOOL_CALLS_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

typedef struct numla_tool_syntax numla_tool_syntax;
typedef struct numla_tool_calls numla_tool_calls;

/* One parsed call; the strings are NUL-terminated and live as long as the parser. */
typedef struct numla_tool_call_out {
    char *id;        /* "call_..." or Kimi's "functions.NAME:IDX" */
    char *name;      /* function.name */
    char *arguments; /* function.arguments: a JSON object's text */
} numla_tool_call_out;

/* What one push or finish gives, in order: content (call < 0: text[off, off + len) of the
 * call's content buffer) or the call with that index (numla_tool_calls_get). */
typedef struct numla_tool_event {
    int32_t call;
    size_t off, len;
} numla_tool_event;

/* The syntax of a chat template's family (its built-in name, numla_chat_template_name), NULL
 * when the family has none (deepseek-v2, deepseek-v2.5). Not collective. */
const numla_tool_syntax *numla_tool_syntax_for_template(const char *template_name);
/* The family names the table covers, NULL-terminated (for tests and docs). */
const char *const *numla_tool_syntax_families(void);
/* The syntax's marker strings (section, call, separator and argument tags) into out; returns
 * how many. Those that are single special tokens must reach the decoded text
 * (numla_tokenizer_keep_in_text). Not collective. */
#define NUMLA_TOOL_SYNTAX_MAX_MARKERS 10
int numla_tool_syntax_markers(const numla_tool_syntax *syn,
                              const char *out[NUMLA_TOOL_SYNTAX_MAX_MARKERS]);

/* tools_json: the request's "tools" (JSON array text; NULL: none), read for GLM-5's parameter
 * types. id_seed: where the "call_" ids start. */
numla_status numla_tool_calls_create(const numla_tool_syntax *syn, const char *tools_json,
                                     uint64_t id_seed, numla_tool_calls **out);
/* A parser for a call the server wraps (tool_choice naming a function, whose arguments a
 * response grammar constrains): everything pushed is held; finish gives one call `name` with
 * the text (trimmed) as its arguments when it is a JSON object, else the text as content (a
 * document cut short by max_tokens). name NULL ("required" over several tools): the text is
 * {"name": N, "arguments": {...}} and gives the call N with those arguments (compact). Not
 * collective. */
numla_status numla_tool_calls_create_forced(const char *name, uint64_t id_seed,
                                            numla_tool_calls **out);
void numla_tool_calls_destroy(numla_tool_calls **p);

/* Append text (any bytes); *events (valid until the next call) gets what is known now, *text
 * the content the events point into. */
numla_status numla_tool_calls_push(numla_tool_calls *p, const char *s, size_t len,
                                   const numla_tool_event **events, int32_t *num_events,
                                   const char **text);
/* The end: what was held back comes out (as content when it is not a whole call). */
numla_status numla_tool_calls_finish(numla_tool_calls *p, const numla_tool_event **events,
                                     int32_t *num_events, const char **text);

/* Calls parsed so far, and call i of them. */
int32_t numla_tool_calls_count(const numla_tool_calls *p);
const numla_tool_call_out *numla_tool_calls_get(const numla_tool_calls *p, int32_t i);

/* The finish_reason to report: "tool_calls" when the model ended ("stop") with calls, else
 * reason as given (a call cut off by "length" is content, and "length" stays). */
const char *numla_tool_calls_finish_reason(const numla_tool_calls *p, const char *reason);

#endif
