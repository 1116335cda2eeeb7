/* engine/http/server.h — numla's OpenAI-compatible HTTP front end (libmicrohttpd).
 *
 * Endpoints: GET /health (503 until numla_http_server_set_ready, and while stopping; 200 when
 * ready), GET /v1/models, GET /metrics (metrics.h), POST /v1/completions and
 * POST /v1/chat/completions (openai.h) and POST /v1/responses (responses.h: a chat request
 * answered in the Responses API's shapes), answered from the serving loop through backend.h;
 * vLLM's POST /tokenize (a job the loop's source answers on its thread: the tokenizer's encoder
 * is the loop's) and POST /detokenize (decoded on the connection's thread).
 * Streamed responses are Server-Sent Events: one chunk per decoded piece that is final
 * (emitter.h: no split characters, no partial stop strings), the usage chunk when
 * stream_options.include_usage, then "data: [DONE]".
 *
 * Guards: a body over max_body bytes answers 413; with an api_key, a /v1/ request without
 * "Authorization: Bearer <key>" answers 401 (compared in constant time; /health and /metrics stay
 * open for probes); a full queue answers 429 with Retry-After; bad bodies answer 400 naming the
 * field. A client that disconnects (seen while waiting for tokens) cancels its jobs, so the loop
 * frees their KV blocks.
 *
 * Threads: one libmicrohttpd thread per connection, which blocks on its call's condition
 * variable while the loop generates. Binds host (default 127.0.0.1) and port (0: ephemeral;
 * numla_http_server_port tells which). numla_http_server_stop stops accepting, lets the requests
 * in flight finish (the loop must keep serving them until it returns), then stops the threads.
 * Not collective: rank 0 only.
 */
#ifndef NUMLA_ENGINE_HTTP_SERVER_H
#define NUMLA_ENGINE_HTTP_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "engine/http/backend.h"
#include "engine/http/metrics.h"
#include "engine/serving/sampler.h"
#include "engine/text/tokenizer.h"

typedef struct numla_http_server_options {
    const char *host;           /* numeric address or name; NULL: "127.0.0.1" */
    int port;                   /* 0: ephemeral */
    const char *api_key;        /* NULL or "": no authentication */
    const char *model_name;     /* the served names, comma-separated: /v1/models lists each; a
                                   request's "model" must be one of them (else 404
                                   model_not_found) and its response carries that one; without
                                   "model" the first. NULL: "numla" */
    size_t max_body;            /* bytes; 0: 1 MiB */
    int64_t vocab_size;         /* token-id prompts are checked against these (0: not) */
    int64_t max_context;
    const numla_tokenizer *tokenizer; /* borrowed, outlives the server: names the tokens of
                                         logprobs (their text and bytes); NULL: "token_id:N" */
    const numla_sampling_params *sampling_defaults; /* borrowed, outlives the server: a
                                                       request's sampling before its own fields
                                                       (generation_config.json); NULL: the
                                                       sampler's defaults */
} numla_http_server_options;

typedef struct numla_http_server numla_http_server;

/* Start listening. The backend and metrics are borrowed and must outlive the server. */
numla_status numla_http_server_start(const numla_http_server_options *opt,
                                     numla_http_backend *backend, numla_http_metrics *metrics,
                                     numla_http_server **out);
/* The bound port (the ephemeral one when opt->port was 0). */
int numla_http_server_port(const numla_http_server *s);
/* 1: the model is loaded, /health answers 200 and generation requests are taken. */
void numla_http_server_set_ready(numla_http_server *s, int ready);
/* Requests being answered (parsed and queued, not yet fully sent). */
int32_t numla_http_server_in_flight(numla_http_server *s);
/* Stop accepting, wait for the requests in flight, stop and free. NULL is fine. */
void numla_http_server_stop(numla_http_server **s);

#endif
