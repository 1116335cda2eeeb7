/* engine/http/serving_adapter.h — the HTTP backend's jobs (backend.h) as the serving loop's
 * source and sink (engine/serving/serve_loop.h): what `numla serve` and `numla bench http` run on rank 0.
 *
 * Source: takes the oldest queued job and makes it a numla_request. A /tokenize job is
 * answered there instead (its prompt or messages encoded as below, pushed as its tokens and
 * finished), never handed to the loop: the tokenizer is used on the loop's thread only. Token-id prompts are used
 * as they are; text prompts are encoded with the tokenizer's BOS rules (as `numla run` encodes
 * "prompt"); chat messages are rendered with the chat template (add_generation_prompt, the
 * request's tools, tool calls, tool messages, names, reasoning_content and
 * chat_template_kwargs.thinking) and the result, which already holds the BOS token, is encoded
 * without adding special tokens. What the template cannot render (tools, tool calls or tool
 * messages it has no form for, a thinking switch it does not have) fails the job with 400
 * naming the field and the template; a thinking template's reasoning mode follows the rendered
 * prompt (reasoning.h). A prompt
 * that leaves no room in the context fails the job with 400 naming "prompt" (or "messages");
 * a given max_tokens that does not fit after it fails with 400 naming "max_tokens"; without
 * one (chat), max_tokens is what the context leaves. Stop strings are NOT handed to the loop:
 * the server applies them (emitter.h) and cancels the job when one matches, so they are applied
 * exactly once. The source waits up to wait_ms for a job when the loop is idle.
 * Sink: each token's id, logprobs and the text the loop made final are pushed to the job; done
 * pushes the text tail, then finishes the job (or fails it: 400 for a request the engine refuses,
 * e.g. one larger than the KV pool; 500 when the engine step failed) and releases it.
 *
 * Between rounds the front end calls numla_http_adapter_poll: jobs whose client went away (or
 * whose stop string matched) are cancelled in the loop, which frees their KV blocks before the
 * next step; the metrics' engine gauges (running, waiting, KV blocks used and free) and the
 * preemption counter are brought up to date (at most 10 times a second).
 *
 * Not thread-safe: every call comes from the serving loop's thread. Not collective (rank 0).
 */
#ifndef NUMLA_ENGINE_HTTP_SERVING_ADAPTER_H
#define NUMLA_ENGINE_HTTP_SERVING_ADAPTER_H

#include <stdint.h>

#include "common/status.h"
#include "engine/http/backend.h"
#include "engine/http/metrics.h"
#include "engine/serving/serve_loop.h"
#include "engine/text/chat_template.h"
#include "engine/text/tokenizer.h"

typedef struct numla_http_adapter_options {
    numla_http_backend *backend;        /* borrowed */
    numla_http_metrics *metrics;        /* borrowed; NULL: none kept */
    numla_tokenizer *tokenizer;         /* borrowed; NULL: token-id prompts only, no text */
    const numla_chat_template *chat;    /* borrowed; NULL: chat requests answer 400 */
    int64_t max_context;                /* prompt + max_tokens must fit */
    int32_t wait_ms;                    /* idle wait for a job; 0: 50 */
    int speculative;                    /* --speculative: its figures go to the metrics */
} numla_http_adapter_options;

typedef struct numla_http_adapter numla_http_adapter;

numla_status numla_http_adapter_create(const numla_http_adapter_options *o, numla_http_adapter **out);
/* Fails (503, "the server stopped") and releases the jobs still held; NULL is a no-op. */
void numla_http_adapter_destroy(numla_http_adapter **g);

/* The loop's source and sink (ctx: the adapter). Create the loop with them, then tell the
 * adapter. */
numla_serve_source numla_http_adapter_source(numla_http_adapter *g);
numla_serve_sink numla_http_adapter_sink(numla_http_adapter *g);
void numla_http_adapter_set_loop(numla_http_adapter *g, numla_serve_loop *loop);

/* Cancel the jobs whose client went away, update the metrics. */
void numla_http_adapter_poll(numla_http_adapter *g);
/* From now on the source says END once the queue is empty (shutdown: the server has stopped
 * taking requests). */
void numla_http_adapter_end(numla_http_adapter *g);
/* Jobs handed to the loop and not yet released. */
int32_t numla_http_adapter_held(const numla_http_adapter *g);

#endif
