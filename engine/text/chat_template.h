/* engine/text/chat_template.h — DeepSeek and Kimi chat templates rendered natively (no Jinja).
 *
 * A model's tokenizer_config.json carries its chat template as a Jinja string. Debian has no C
 * Jinja engine, so numla recognises the DeepSeek family's templates and renders each with C code
 * that gives, byte for byte, what Hugging Face transformers' apply_chat_template(messages,
 * tokenize=False, add_generation_prompt=...) gives (checked against tests/golden/chat/, made by
 * scripts/make_chat_golden.py).
 *
 *   deepseek-v2    DeepSeek-V2-Chat, DeepSeek-V2-Lite-Chat ("User: ...\n\nAssistant: ...")
 *   deepseek-v2.5  DeepSeek-V2.5 (also DeepSeek-Coder-V2-Instruct): the last system message,
 *                  "<｜User｜>"/"<｜Assistant｜>" turns; each system message also emits the
 *                  8 spaces the template has before its {% set %}, ahead of the BOS token
 *   deepseek-v3    DeepSeek-V3: all system messages joined by "\n\n"
 *   deepseek-r1    DeepSeek-R1: as V3, earlier assistant turns lose everything up to the last
 *                  "</think>", and the generation prompt opens "<think>\n"
 *   deepseek-v3.1  DeepSeek-V3.1: thinking / non-thinking (`thinking` option: the generation
 *                  prompt ends "<think>" or "</think>"), tool calls and tool outputs
 *   kimi-k2        Kimi-K2-Instruct (first release): "<|im_user|>user<|im_middle|>..." turns, a
 *                  default system prompt, tools declared as JSON (tool calls are not written)
 *   kimi-k2-thinking  Kimi-K2-Thinking: names, tool calls and tool results, reasoning_content
 *                  kept after the last plain assistant turn and "<think></think>" before it
 * (tests/golden/chat_kimi/ for the last three, made by scripts/make_kimi_chat_golden.py)
 *   glm-5          GLM-5 (glm_moe_dsa; the same text as GLM-4.7's): "[gMASK]<sop>", "<|system|>",
 *                  "<|user|>", "<|assistant|>" turns, reasoning kept after the last user turn
 *                  (all of it with keep_reasoning, the template's clear_thinking=false), tools
 *                  declared as JSON, tool calls as <tool_call>name<arg_key>..</arg_value>, tool
 *                  results under "<|observation|>" (tests/golden/chat_glm5/, made by
 *                  scripts/make_glm5_chat_golden.py)
 *   deepseek-v3.2  DeepSeek-V3.2: no Jinja template; DeepSeek's Python encode_messages
 *                  (encoding/encoding_dsv32.py) in chat or thinking mode, tools in the system
 *                  prompt, tool calls in its DSML markup, tool results as <function_results>
 *                  (tests/golden/chat_dsv32/, made by scripts/make_dsv32_chat_golden.py). Only
 *                  chosen by name (--chat-template, or numla_chat_template_builtin_for_model_type
 *                  for a config.json model_type "deepseek_v32")
 *   deepseek-v4    DeepSeek-V4 (Flash, Pro): no Jinja template; DeepSeek's Python encode_messages
 *                  (encoding/encoding_dsv4.py): tool results merged into user turns as
 *                  <tool_result> blocks, tools in the first system or developer message, tool
 *                  calls in DSML under <｜DSML｜tool_calls>, thinking unless turned off
 *                  (tests/golden/chat_dsv4/, made by scripts/make_dsv4_chat_golden.py); chosen by
 *                  name or for a config.json model_type "deepseek_v4"
 *
 * Recognition: the template string is compared with the known ones after normalising line ends
 * (CRLF to LF), the two-character escape \n to a newline (the same string in Jinja) and
 * leading/trailing whitespace. bos_token and eos_token come from the same tokenizer_config.json
 * (a string, or an object with "content"); absent ones render as "" as in transformers.
 *
 * Messages: roles "system", "user", "assistant", and "tool" (tool outputs, plain text, for the
 * templates that have them). Other roles render nothing, as in the templates (deepseek-v3.2
 * also reads "developer" and refuses any other role, as its encoding does). Tool calls (an
 * assistant message with tool_calls, or with null content) render in deepseek-v3.1,
 * kimi-k2-thinking, glm-5 and deepseek-v3.2 (the last two need each call's arguments to be a
 * JSON object, whose keys they write one by one); the other templates refuse them, naming the
 * message index and field.
 *
 * Threading: a loaded template is read-only; render may run concurrently. Not collective.
 */
#ifndef NUMLA_ENGINE_CHAT_TEMPLATE_H
#define NUMLA_ENGINE_CHAT_TEMPLATE_H

#include <stddef.h>

#include "common/status.h"

typedef struct numla_chat_template numla_chat_template;

/* One entry of an assistant message's tool_calls (OpenAI form). */
typedef struct numla_chat_tool_call {
    const char *id;        /* "functions.get_weather:0"; NULL: absent */
    const char *name;      /* function.name */
    const char *arguments; /* function.arguments, the JSON text as the client sent it */
} numla_chat_tool_call;

typedef struct numla_chat_message {
    const char *role;    /* "system", "user", "assistant", "tool"; NUL-terminated */
    const char *content; /* UTF-8, NUL-terminated; NULL is JSON null (fails: tool calls) */
    int has_tool_calls;  /* nonzero when the message carried tool_calls (fails, except in the
                            kimi-k2-thinking and deepseek-v3.1 templates) */
    /* Used by kimi-k2-thinking / deepseek-v3.1 (kimi-k2 ignores tool calls); NULL/0 absent. */
    const char *name;              /* the message's "name" */
    const char *tool_call_id;      /* a tool message's "tool_call_id" */
    const char *reasoning_content; /* an assistant message's "reasoning_content" */
    int num_tool_calls;
    const numla_chat_tool_call *tool_calls; /* (num_tool_calls) */
} numla_chat_message;

/* What the templates read besides the messages. */
typedef struct numla_chat_options {
    int add_generation_prompt; /* deepseek-v3.2 has no such switch: a user turn always ends
                                  with the assistant's opening */
    int thinking;           /* `thinking` / `enable_thinking` (chat_template_kwargs): deepseek-v3.1
                               and deepseek-v3.2 think only when it is set (default 0) */
    int thinking_given;     /* nonzero when the request gave `thinking` at all: glm-5 and
                               deepseek-v4 think unless it was given as false */
    int keep_reasoning;     /* glm-5's clear_thinking=false: every assistant turn keeps its
                               reasoning, not only those after the last user turn */
    const char *tools_json; /* the request's "tools" as JSON text (an array), NULL: none; the
                               Kimi, GLM-5 and DeepSeek-V3.2/V4 templates write it back as
                               Python's json.dumps would */
    const char *reasoning_effort; /* the request's reasoning_effort, NULL: not given; only a
                                     family that lists it (numla_chat_template_reasoning_efforts)
                                     renders one: deepseek-v4's "high" or "max" (the latter a
                                     paragraph after the BOS in thinking mode); any other value
                                     fails INVALID_ARG naming "reasoning_effort" */
} numla_chat_options;

/* Load the chat template of <model_dir>/tokenizer_config.json. force_name (NULL or a built-in
 * name, e.g. from --chat-template) picks the renderer regardless of the file's template; the
 * file is then optional (missing: DeepSeek's bos/eos strings). Without force_name, a missing
 * file or template, or one that is not recognised, fails with NUMLA_STATUS_UNSUPPORTED naming
 * the file and the built-in names. Not collective. */
numla_status numla_chat_template_load(const char *model_dir, const char *force_name,
                                      numla_chat_template **out);
/* A built-in renderer by name, without any file (bos/eos: DeepSeek's strings; glm-5 and
 * deepseek-v3.2 write their own). Fails naming the built-in names when name is unknown.
 * Not collective. */
numla_status numla_chat_template_load_builtin(const char *name, numla_chat_template **out);
/* The built-in name for a config.json model_type whose model ships no Jinja template
 * ("deepseek_v32" -> "deepseek-v3.2", "deepseek_v4" -> "deepseek-v4"), NULL otherwise.
 * Not collective. */
const char *numla_chat_template_builtin_for_model_type(const char *model_type);
/* The same from the text of a tokenizer_config.json (json may be NULL when force_name is set). */
numla_status numla_chat_template_load_json(const char *json, const char *force_name,
                                           numla_chat_template **out);
/* Free and NULL the handle (NULL is fine). */
void numla_chat_template_destroy(numla_chat_template **t);
/* The built-in name the template was recognised as ("deepseek-v3", ...). */
const char *numla_chat_template_name(const numla_chat_template *t);

/* Render n messages. *out is malloc'd and NUL-terminated (caller frees), *len excludes the NUL.
 * An unsupported message fails with NUMLA_STATUS_UNSUPPORTED naming "messages[i].field";
 * on failure *out is NULL. Not collective. */
numla_status numla_chat_template_render(const numla_chat_template *t,
                                        const numla_chat_message *msgs, int n,
                                        int add_generation_prompt, char **out, size_t *len);

/* The same with the options above (numla_chat_template_render is this with only
 * add_generation_prompt). Not collective. */
numla_status numla_chat_template_render_opts(const numla_chat_template *t,
                                             const numla_chat_message *msgs, int n,
                                             const numla_chat_options *opts, char **out,
                                             size_t *len);

/* The special token that ends an assistant turn when it is not the model's EOS ("<|im_end|>" for
 * the Kimi templates, "<|user|>" for glm-5), NULL when the EOS does: a server stops generation
 * there too. */
const char *numla_chat_template_end_of_turn(const numla_chat_template *t);
/* Every such token, NULL-terminated (empty when the EOS alone ends a turn): glm-5's assistant
 * turn ends at "<|user|>" or at "<|observation|>" (a tool call waits for its result).
 * Not collective. */
const char *const *numla_chat_template_stop_tokens(const numla_chat_template *t);

/* What a family's template can write besides plain turns (bits). */
typedef enum numla_chat_ability {
    NUMLA_CHAT_CAN_DECLARE_TOOLS = 1,      /* the request's tools (Kimi, glm-5, deepseek-v3.2) */
    NUMLA_CHAT_CAN_WRITE_TOOL_CALLS = 2,   /* assistant tool_calls in the history */
    NUMLA_CHAT_CAN_WRITE_TOOL_RESULTS = 4, /* "tool" messages */
    NUMLA_CHAT_CAN_SWITCH_THINKING = 8,    /* the thinking switch (chat_template_kwargs) */
} numla_chat_ability;

/* 1 when the template can write `what` (every bit of it). Not collective. */
int numla_chat_template_can(const numla_chat_template *t, numla_chat_ability what);

/* The reasoning_effort values the template renders, NULL-terminated (empty when it has none:
 * every family but deepseek-v4, whose encoding knows "high" and "max"). Not collective. */
const char *const *numla_chat_template_reasoning_efforts(const numla_chat_template *t);

/* 1 when the template's model writes its reasoning before the answer (deepseek-r1,
 * deepseek-v3.1, kimi-k2-thinking, glm-5, deepseek-v3.2, deepseek-v4): the server splits it off
 * as reasoning_content. */
int numla_chat_template_thinks(const numla_chat_template *t);

/* The built-in names, NULL-terminated, whether a name is one of them, and the Jinja source of
 * one (NULL when unknown, and for deepseek-v3.2 and deepseek-v4, which have none). Not
 * collective. */
const char *const *numla_chat_template_names(void);
int numla_chat_template_known(const char *name);
const char *numla_chat_template_source(const char *name);

#endif
