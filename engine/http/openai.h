/* engine/http/openai.h — the OpenAI API's request bodies in, its response objects out.
 *
 * Parsing: POST /v1/completions and POST /v1/chat/completions bodies become one
 * numla_openai_request. Supported, completions:
 *   model, prompt (string | [string, ...] | [id, ...] | [[id, ...], ...]), max_tokens
 *   (default 16), temperature, top_p, top_k, seed, stop (string | [string, ...]), logprobs
 *   (0..20 | null), stream, stream_options.include_usage, user (ignored), and numla's own
 *   ignore_eos and stop_token_ids (as `numla run` takes them, engine/serving/request_io.h), and
 *   vLLM's return_tokens_as_token_ids (both endpoints). Both endpoints also take
 *   presence_penalty and frequency_penalty ([-2, 2]), logit_bias ({"<token id>": [-100, 100]},
 *   at most 1024 entries), and vLLM's repetition_penalty (> 0) and min_p ([0, 1]), checked by
 *   numla_request_parse_sampling and applied by the sampler (docs/serving.md). Both take
 *   response_format ({"type": "text" | "json_object"} | {"type": "json_schema", "json_schema":
 *   {"name", "schema", "strict"?, "description"?}}): the output is constrained to the schema's
 *   grammar (engine/serving/grammar.h, numla_request_parse_response_format); a schema outside
 *   the subset is a 400 naming response_format and the keyword.
 * chat: model, messages ([{role: system|user|assistant|tool, content: string, name?}] with
 *   an assistant's tool_calls ([{id?, type?: "function", function: {name, arguments: string}}];
 *   its content may then be null) and reasoning_content (string | null), a tool message's
 *   tool_call_id), tools ([{type: "function", function: {name, description?, parameters?:
 *   object, strict?: bool}}]), tool_choice ("auto" | null | "none" | "required" |
 *   {"type": "function", "function": {"name"}}: docs/serving.md), parallel_tool_calls (bool | null),
 *   chat_template_kwargs ({thinking?: bool, enable_thinking?: bool}, the same switch as vLLM and
 *   SGLang take it for DeepSeek-V3.1), reasoning_effort (string | null: the values a family's
 *   template renders, deepseek-v4's "high" and "max"; a given effort means thinking unless
 *   chat_template_kwargs turns it off), max_tokens / max_completion_tokens (default: up to the
 *   context, max_tokens_given = 0), temperature, top_p, top_k, seed, stop, logprobs (bool),
 *   top_logprobs (0..20), stream, stream_options.include_usage, user, ignore_eos,
 *   stop_token_ids. Whether the model's chat template can render tools, tool calls, tool
 *   messages, the thinking switch and the reasoning effort is checked by the serving adapter (it knows the template).
 * Both: n (1..128 choices per prompt, prompts x n at most 128) and best_of (equal to n).
 * vLLM's POST /tokenize: {model?, prompt: string, add_special_tokens? (true),
 *   return_token_strs?} or {model?, messages, add_generation_prompt? (true),
 *   continue_final_message? (false only), add_special_tokens? (false), tools?,
 *   chat_template_kwargs?, return_token_strs?}: one job whose prompt (prompts[0]) or messages
 *   the serving loop's thread encodes (the tokenizer's scratch is the loop's); POST /detokenize:
 *   {model?, tokens: [id, ...]} (prompts[0].tokens; an empty list is allowed).
 * Completions: echo (bool): the prompt (its text; a token-id prompt decoded) comes back before
 * the completion, and with logprobs its tokens' logprobs come first (the first null, as OpenAI
 * and vLLM return them; max_tokens may be 0): what lm-evaluation-harness's loglikelihood tasks
 * send.
 * Fields the API defines but numla does not serve (best_of other than n, suffix,
 * functions, ...) are a 400 naming the field;
 * so are unknown fields and invalid values. A failed parse fills a numla_openai_error (an HTTP
 * status and an OpenAI-style message naming the field) and still returns OK: only running out
 * of memory is an error status.
 *
 * Formatting: non-streamed `text_completion` / `chat.completion` objects, streamed chunks
 * ("data: {...}\n\n" Server-Sent Events: `text_completion` chunks, or `chat.completion.chunk`
 * with a first delta carrying the role and later deltas the content, the reasoning_content and
 * the tool calls the server read out of the model's text), the final usage chunk and
 * the error object {"error": {"message", "type", "param", "code"}}. Logprob tokens are named as
 * OpenAI names them, by their text and bytes, with the reply's tokenizer; "token_id:N" without
 * one, or when the request asked so (return_tokens_as_token_ids, vLLM's field).
 * Not collective; no state.
 */
#ifndef NUMLA_ENGINE_HTTP_OPENAI_H
#define NUMLA_ENGINE_HTTP_OPENAI_H

#include <stddef.h>
#include <stdint.h>

#include "engine/text/tokenizer.h"
#include "engine/text/tool_calls.h"
#include "common/status.h"
#include "engine/serving/sampler.h"

typedef enum numla_openai_endpoint {
    NUMLA_OPENAI_COMPLETIONS,   /* POST /v1/completions */
    NUMLA_OPENAI_CHAT,          /* POST /v1/chat/completions */
    NUMLA_OPENAI_TOKENIZE,      /* POST /tokenize (vLLM's) */
    NUMLA_OPENAI_DETOKENIZE,    /* POST /detokenize (vLLM's) */
    NUMLA_OPENAI_RESPONSES,     /* POST /v1/responses: parsed as a chat request (responses.h) */
} numla_openai_endpoint;

typedef enum numla_openai_role {
    NUMLA_OPENAI_ROLE_SYSTEM,
    NUMLA_OPENAI_ROLE_USER,
    NUMLA_OPENAI_ROLE_ASSISTANT,
    NUMLA_OPENAI_ROLE_TOOL,
} numla_openai_role;

enum {
    NUMLA_OPENAI_MAX_STOP = 16,
    NUMLA_OPENAI_MAX_PROMPTS = 64,
    NUMLA_OPENAI_MAX_CHOICES = 128, /* n (OpenAI's own limit), and prompts x n per request */
};

/* One completions prompt: text (tokens == NULL) or token ids (text == NULL). */
typedef struct numla_openai_prompt {
    char *text;                 /* NUL-terminated valid UTF-8, may be empty */
    size_t text_len;
    int32_t *tokens;            /* (num_tokens) */
    int32_t num_tokens;
} numla_openai_prompt;

/* One entry of an assistant message's tool_calls. */
typedef struct numla_openai_tool_call {
    char *id;                   /* NULL: not given */
    char *name;                 /* function.name, non-empty */
    char *arguments;            /* function.arguments, the JSON text as sent */
} numla_openai_tool_call;

typedef struct numla_openai_message {
    numla_openai_role role;
    char *content;              /* NUL-terminated valid UTF-8; NULL: null (an assistant message
                                   with tool_calls only) */
    size_t content_len;
    char *name;                 /* NULL: not given */
    char *tool_call_id;         /* tool messages; NULL: not given */
    char *reasoning_content;    /* assistant messages; NULL: not given or null */
    int has_tool_calls;         /* assistant: "tool_calls" was given (a list, maybe empty) */
    int32_t num_tool_calls;
    numla_openai_tool_call *tool_calls;     /* (num_tool_calls) */
} numla_openai_message;

typedef struct numla_openai_request {
    numla_openai_endpoint endpoint;
    char *model;                /* NULL when not given */
    int32_t num_prompts;        /* completions: >= 1 */
    numla_openai_prompt *prompts;           /* (num_prompts) */
    int32_t num_messages;       /* chat: >= 1 */
    numla_openai_message *messages;         /* (num_messages) */
    numla_sampling_params params;           /* logprobs < 0: none */
    int max_tokens_given;       /* 0 (chat only): up to the context, set after tokenization */
    int32_t num_stop_strings;
    char *stop_strings[NUMLA_OPENAI_MAX_STOP]; /* (num_stop_strings) non-empty */
    int stream;
    int include_usage;          /* stream_options.include_usage */
    int32_t n;                  /* choices per prompt (n; best_of, when given, must equal it):
                                   each its own sequence, the prompt shared through the prefix
                                   cache; choice index = prompt index x n + j */
    int tokens_as_ids;          /* return_tokens_as_token_ids: logprobs name tokens "token_id:N" */
    int add_special;            /* tokenize: add_special_tokens (prompt: default 1, as the
                                   completions endpoint encodes; messages: default 0, the
                                   render holds the BOS) */
    int add_generation_prompt;  /* tokenize messages: default 1 */
    int token_strs;             /* tokenize: return_token_strs */
    int responses;              /* a /v1/responses body (endpoint is then NUMLA_OPENAI_CHAT) */
    char *responses_settings;   /* its settings the response object echoes (compact JSON) */
    int echo;                   /* completions: the prompt comes back before the completion in
                                   text and, with logprobs, its tokens' logprobs (the first
                                   one null) before the generated ones */
    char *tools_json;           /* chat: the "tools" list as compact JSON text (key order kept);
                                   NULL: none or an empty list */
    int32_t num_tools;
    int thinking;               /* chat_template_kwargs.thinking (or enable_thinking): 1 / 0;
                                   -1: not given */
    char *reasoning_effort;     /* chat: "reasoning_effort" as given (a string), NULL: absent or
                                   null; the serving adapter checks it against the template */
    numla_grammar *grammar;     /* response_format (json_object / json_schema), or the forced
                                   call's arguments (tool_choice_name): a reference each choice's
                                   request takes one of; NULL: none */
    int tool_choice_none;       /* chat: tool_choice "none": no call is read out of the output */
    char *tool_choice_name;     /* chat: the function tool_choice forces (named, or "required"
                                   with one tool): the output is its arguments, wrapped by the
                                   server as the call; NULL: none */
    int tool_choice_required;   /* chat: "required" over several tools: the output is
                                   {"name": N, "arguments": ...}, wrapped as the call of N */
} numla_openai_request;

typedef struct numla_openai_limits {
    int64_t vocab_size;         /* token ids must be below it; 0: not checked */
    int64_t max_context;        /* not read by the parser: the context is checked once, after
                                   tokenization (numla_request_fit_context, from the serving adapter) */
    const numla_sampling_params *defaults; /* a request's sampling before its own fields (the
                                              model's generation_config.json); NULL:
                                              numla_sampling_params_default */
} numla_openai_limits;

typedef struct numla_openai_error {
    int status;                 /* HTTP status; 0: no error */
    char message[512];
    char param[96];             /* the field, "" when none */
    char code[48];              /* "invalid_json", "unknown_field", "unsupported_field", ... */
} numla_openai_error;

/* Parse a body of `len` bytes (need not be NUL-terminated). On a bad body, err->status is set
 * and out holds nothing to free; otherwise err->status is 0. Release with numla_openai_request_free. */
numla_status numla_openai_parse(numla_openai_endpoint endpoint, const char *body, size_t len,
                                const numla_openai_limits *lim, numla_openai_request *out,
                                numla_openai_error *err);
void numla_openai_request_free(numla_openai_request *r);

/* Fill err (status, message, param, code); returns err for chaining. */
numla_openai_error *numla_openai_error_set(numla_openai_error *err, int status, const char *param,
                                           const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* {"error": {"message", "type", "param", "code"}}; type is "invalid_request_error" for 4xx
 * and "server_error" otherwise. *out is malloc'ed, NUL-terminated. */
numla_status numla_openai_format_error(const numla_openai_error *err, char **out);

/* What every response object of one request shares. */
typedef struct numla_openai_reply {
    numla_openai_endpoint endpoint;
    const char *id;             /* "cmpl-..." / "chatcmpl-..." */
    int64_t created;            /* Unix seconds */
    const char *model;
    const numla_tokenizer *tokenizer; /* names logprobs' tokens (text, bytes); NULL: "token_id:N" */
} numla_openai_reply;

typedef struct numla_openai_usage {
    int64_t prompt_tokens;
    int64_t completion_tokens;
    int64_t cached_tokens;      /* of prompt_tokens, served from the prefix cache:
                                   usage.prompt_tokens_details.cached_tokens */
    int speculative;            /* speculative decoding on: usage.speculative (the choices'
                                   verify steps, draft tokens checked and accepted, summed) */
    int64_t spec_steps, spec_drafted, spec_accepted;
} numla_openai_usage;

typedef struct numla_openai_choice {
    const char *text;           /* valid UTF-8 */
    size_t text_len;
    const char *finish_reason;  /* "stop", "length", NULL (chunks before the last) */
    int32_t num_logprobs;       /* entries in logprobs; 0 with logprobs NULL: "logprobs": null;
                                   an entry with num_top < 0 (an echoed prompt's first token) has
                                   null token_logprobs and top_logprobs */
    const numla_logprob_entry *logprobs;    /* (num_logprobs) or NULL */
    int has_reasoning;          /* chat of a thinking model: "reasoning_content" is written */
    const char *reasoning;      /* valid UTF-8 reasoning (reasoning.h); NULL: null */
    size_t reasoning_len;
    /* chat, non-streamed: message.tool_calls [{id, type: "function", function: {name,
       arguments}}] (engine/text/tool_calls.h); with calls, an empty content is null */
    int32_t num_tool_calls;
    const numla_tool_call_out *tool_calls; /* (num_tool_calls) */
    /* chat chunk: delta.tool_calls [{index: tool_index, ...}] for this call (NULL: none): its
       first chunk (tool_first) carries id, type, function.name and function.arguments "", the
       next ones function.arguments */
    const numla_tool_call_out *tool_delta;
    int32_t tool_index;
    int tool_first;
} numla_openai_choice;

/* The non-streamed object: `text_completion` (choices[i].text) or `chat.completion`
 * (choices[i].message {role: assistant, content, reasoning_content?, tool_calls?}), with
 * usage. */
numla_status numla_openai_format_response(const numla_openai_reply *r,
                                          const numla_openai_choice *choices, int32_t num_choices,
                                          const numla_openai_usage *usage, char **out);

/* One Server-Sent Event "data: {...}\n\n" for choice `index`: completions carry the text; chat
 * carries delta {"role": "assistant"} when role_delta, else delta {"content": text} (an empty
 * delta {} when text_len is 0 and finish_reason is set), and delta.tool_calls when tool_delta
 * is set (then no empty content). "usage": null is omitted. */
numla_status numla_openai_format_chunk(const numla_openai_reply *r, int32_t index,
                                       const numla_openai_choice *choice, int role_delta,
                                       char **out);

/* The final usage chunk of stream_options.include_usage: choices [] and usage. */
numla_status numla_openai_format_usage_chunk(const numla_openai_reply *r,
                                             const numla_openai_usage *usage, char **out);

/* The stream's last event. */
#define NUMLA_OPENAI_SSE_DONE "data: [DONE]\n\n"

#endif
