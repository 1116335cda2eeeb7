/* engine/serving/request_io.h — JSON Lines requests in, JSON Lines results out (`numla run`).
 *
 * Input, one object per line:
 *   {"id": str|int, "prompt_tokens": [int, ...], "max_tokens": int >= 0 (default 16),
 *    "temperature": >= 0 (default 1; 0 = greedy), "top_k": int (<= 0 or -1: off),
 *    "top_p": (0, 1] (default 1; these three defaults: limits->defaults),
 *    "seed": int|null, "stop_token_ids": [int, ...],
 *    "ignore_eos": bool, "logprobs": int 0..20 | null,
 *    "prompt_logprobs": int 0..20 | null (vLLM's: each prompt token's logprob given the tokens
 *    before it, with the top N; the prompt is then computed whole, never from the prefix
 *    cache; max_tokens may then be 0),
 *    "presence_penalty", "frequency_penalty": [-2, 2] (default 0: off; OpenAI's, over the
 *    generated tokens), "repetition_penalty": > 0 (default 1: off; vLLM's, over prompt and
 *    generated tokens), "min_p": [0, 1] (default 0: off), "logit_bias": {"<token id>": bias in
 *    [-100, 100], ...} (at most NUMLA_SAMPLER_MAX_LOGIT_BIAS = 1024 entries; ids in decimal, no
 *    sign or leading zeros, inside the vocabulary; engine/serving/sampler.h applies them),
 *    "prompt": str (instead of prompt_tokens; needs the model's tokenizer.json),
 *    "stop": [str, ...] (end when the generated text contains one; it is not included),
 *    "response_format": {"type": "text" | "json_object"} | {"type": "json_schema",
 *    "json_schema": {"name", "schema", "strict"?, "description"?}} (OpenAI's; the output is
 *    constrained to the grammar, engine/serving/grammar.h; needs the tokenizer; the result
 *    then carries "text")}
 * A line that is not such an object (bad JSON, wrong types, unknown fields, a token id
 * outside the vocabulary, negative max_tokens, prompt + max_tokens beyond the context) yields a
 * request whose `error` says "line N: ..." and the run goes on. Blank lines are skipped.
 * Output, one object per request, flushed as each finishes:
 *   {"id", "output_tokens": [...], "finish_reason": "stop"|"length"|"error", "error"?,
 *    "usage": {"prompt_tokens", "completion_tokens", "prompt_tokens_details": {"cached_tokens"}},
 *    "logprobs"?: [{"token", "logprob", "top": [[token, logprob], ...]}, ...],
 *    "prompt_logprobs"?: [null, {"token", "logprob", "top"}, ...] (one per prompt token),
 *    "text"?: str (when the prompt was text or stop strings were given)}
 * A text prompt is encoded with the tokenizer's BOS rules; invalid UTF-8 is a per-request error
 * naming the byte offset.
 * Non-finite logprobs (a -inf logit) are written as -9999.0, since JSON has no infinities.
 * Not collective (rank 0 reads and writes).
 */
#ifndef NUMLA_ENGINE_REQUEST_IO_H
#define NUMLA_ENGINE_REQUEST_IO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "common/status.h"
#include "engine/serving/grammar.h"
#include "engine/serving/sampler.h"
#include "engine/text/tokenizer.h"

typedef struct numla_request_limits {
    int64_t vocab_size;
    int64_t max_context;        /* prompt + max_tokens must fit */
    numla_tokenizer *tokenizer; /* NULL: "prompt" text and "stop" strings are rejected */
    const numla_sampling_params *defaults; /* a request's values before its own fields (the
                                              model's generation_config.json sampling); NULL:
                                              numla_sampling_params_default */
} numla_request_limits;

enum { NUMLA_REQUEST_MAX_STOP = 16 };

typedef struct numla_request {
    int64_t line;               /* 1-based line of the input */
    void *id;                   /* json_t* of the "id" value (NULL: write null) */
    int32_t num_prompt;
    int32_t *prompt_tokens;     /* (num_prompt) */
    numla_sampling_params params;
    int32_t text_output;        /* 1: the result carries "text" */
    int32_t num_stop_strings;
    char *stop_strings[NUMLA_REQUEST_MAX_STOP]; /* (num_stop_strings) NUL-terminated, non-empty */
    numla_grammar *grammar;     /* response_format's (owned); NULL: unconstrained */
    int prompt_logprobs;        /* 1: the result carries every prompt token's logprob given the
                                   tokens before it (numla_sched_output.prompt_logprobs): the
                                   prompt is then computed whole, never from the prefix cache;
                                   max_tokens may be 0 */
    int32_t prompt_logprobs_top; /* 0..NUMLA_SAMPLER_MAX_LOGPROBS top entries per prompt token */
    char error[512];            /* non-empty: invalid request, "line N: ..." */
} numla_request;

/* Parse one line (`len` bytes, need not be NUL-terminated). Validation problems go to
 * out->error and return OK; only running out of memory is an error status. */
numla_status numla_request_parse(const char *text, size_t len, int64_t line,
                                 const numla_request_limits *lim, numla_request *out);
void numla_request_free(numla_request *r);

/* A JSON integer, or a real with an integral value below 9e15 ("3.0", not "3.5"), into *out;
 * 0 for anything else. The request parsers' (JSONL and HTTP) rule for integer fields. */
int numla_request_json_int(const json_t *v, int64_t *out);

/* ---- the one validation of a request's shared fields (JSONL here, HTTP in http/openai.c) ---- */

/* A field's problem: which field and what is wrong with it; each front end words it its way
 * (JSONL: `line N: field "F" WHAT`, HTTP: `'F' WHAT` with param). */
typedef struct numla_request_field_error {
    char field[64];            /* as written: "temperature", "stop_token_ids[3]" */
    char param[32];            /* the top-level field: "stop_token_ids" */
    char what[384];            /* "must be a number >= 0" */
} numla_request_field_error;

typedef struct numla_request_field_rules {
    int64_t vocab_size;        /* stop_token_ids and logit_bias ids below it; <= 0: not checked */
    const char *max_tokens_key; /* "max_tokens" (NULL) or "max_completion_tokens" (chat) */
    int logprobs_count;        /* 1: "logprobs" is a count 0..20 or null; 0: the caller's */
} numla_request_field_rules;

/* The sampling fields every front end shares, from object o into p (a field absent or null
 * keeps p's value): max_tokens (under rules->max_tokens_key; *max_tokens_given set when it is
 * there), temperature, top_k, top_p, seed, stop_token_ids, ignore_eos, logprobs as a count
 * when rules->logprobs_count, presence_penalty, frequency_penalty, repetition_penalty, min_p and
 * logit_bias (a bad key's field is `logit_bias["KEY"]`, param "logit_bias"; ids checked against
 * rules->vocab_size). Returns 1, or 0 with *err filled (the first bad field in that order).
 * Field names are not checked here (each API has its own set). */
int numla_request_parse_sampling(const json_t *o, const numla_request_field_rules *rules,
                                 numla_sampling_params *p, int *max_tokens_given,
                                 numla_request_field_error *err);

/* response_format (OpenAI's): null or {"type": "text"} leave *out NULL; {"type":
 * "json_object"} and {"type": "json_schema", "json_schema": {"name": str, "schema": object,
 * "strict": bool | null, "description": str}} compile a grammar into *out (the caller owns it).
 * A grammar needs end tokens: ignore_eos in p is refused with it. Returns 1, or 0 with *err
 * filled (param "response_format"; a schema outside the subset: field
 * "response_format.json_schema.schema" and the compiler's message naming the keyword). */
int numla_request_parse_response_format(const json_t *v, const numla_sampling_params *p,
                                        numla_grammar **out, numla_request_field_error *err);

/* The one check of a request against the context, after tokenization: the prompt must hold a
 * token and, with max_tokens given, prompt + max_tokens must fit in max_context; without it
 * (chat's default), max_tokens becomes what the context leaves. A prompt that leaves no room
 * is refused naming the prompt (unless max_tokens 0 is given and it fits exactly).
 * max_context <= 0: not checked. Returns 1, or 0 with *err filled (field "prompt" or
 * "max_tokens"). */
int numla_request_fit_context(int32_t num_prompt, int max_tokens_given, int64_t max_context,
                              numla_sampling_params *p, numla_request_field_error *err);

typedef struct numla_result {
    const numla_request *req;   /* id and prompt length come from here */
    const int32_t *output_tokens;           /* (num_output) */
    int32_t num_output;
    const char *finish_reason;  /* "stop", "length", "error" */
    const char *error;          /* NULL unless finish_reason is "error" */
    const numla_logprob_entry *logprobs;    /* (num_output) or NULL */
    const numla_logprob_entry *prompt_logprobs; /* (req->num_prompt) or NULL
                                                   (numla_sched_output's) */
    const char *text;           /* generated text, or NULL to omit the field */
    size_t text_len;
    int32_t cached_tokens;      /* prompt tokens served from the prefix cache */
    /* speculative decoding on (usage.speculative written): the request's verify steps, draft
     * tokens they checked and accepted (numla_sched_output) */
    int speculative;
    int32_t spec_steps, spec_drafted, spec_accepted;
} numla_result;

/* usage.speculative of a request: {"verify_steps", "draft_tokens", "accepted_tokens",
 * "acceptance_rate" (accepted / drafted, 0 without drafts), "mean_accepted_length" (tokens a
 * verify step gave: (accepted + steps) / steps, 0 without steps)}; NULL without memory. */
struct json_t;
struct json_t *numla_result_speculative_json(int32_t steps, int32_t drafted, int32_t accepted);

/* Write one result line and flush. */
numla_status numla_result_write(FILE *f, const numla_result *r);

#endif
