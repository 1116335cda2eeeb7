/* engine/http/metrics.h — the server's counters, gauges and histograms, and their Prometheus
 * text exposition (GET /metrics, format version 0.0.4).
 *
 * Series (all prefixed numla_):
 *   requests_total{outcome="ok"|"bad_request"|"unauthorized"|"too_large"|"rejected"|
 *                  "cancelled"|"error"}                     counter
 *   prompt_tokens_total, generation_tokens_total               counters
 *   time_to_first_token_seconds, time_per_output_token_seconds histograms
 *   requests_running, requests_waiting                         gauges
 *   kv_blocks_used, kv_blocks_free                             gauges
 *   preemptions_total                                          counter
 * Every update takes the object's mutex, so HTTP threads and the serving loop may update at once.
 * Not collective (rank 0).
 */
#ifndef NUMLA_ENGINE_HTTP_METRICS_H
#define NUMLA_ENGINE_HTTP_METRICS_H

#include <stdint.h>

#include "common/status.h"

typedef enum numla_http_outcome {
    NUMLA_HTTP_OUTCOME_OK,
    NUMLA_HTTP_OUTCOME_BAD_REQUEST,    /* 400 */
    NUMLA_HTTP_OUTCOME_UNAUTHORIZED,   /* 401 */
    NUMLA_HTTP_OUTCOME_TOO_LARGE,      /* 413 */
    NUMLA_HTTP_OUTCOME_REJECTED,       /* 429: queue full, or 503: not ready / shutting down */
    NUMLA_HTTP_OUTCOME_CANCELLED,      /* the client went away */
    NUMLA_HTTP_OUTCOME_ERROR,          /* the engine failed the request */
    NUMLA_HTTP_OUTCOME_COUNT
} numla_http_outcome;

typedef struct numla_http_metrics numla_http_metrics;

numla_status numla_http_metrics_create(numla_http_metrics **out);
void numla_http_metrics_destroy(numla_http_metrics **m);

void numla_http_metrics_request_done(numla_http_metrics *m, numla_http_outcome outcome);
void numla_http_metrics_add_tokens(numla_http_metrics *m, int64_t prompt, int64_t generated);
void numla_http_metrics_observe_ttft(numla_http_metrics *m, double seconds);
void numla_http_metrics_observe_tpot(numla_http_metrics *m, double seconds);
/* The serving loop's view, set once per step: running requests, KV blocks used and free. */
void numla_http_metrics_set_engine(numla_http_metrics *m, int64_t running, int64_t kv_used,
                                   int64_t kv_free);
void numla_http_metrics_set_waiting(numla_http_metrics *m, int64_t waiting);
void numla_http_metrics_add_preemptions(numla_http_metrics *m, int64_t n);

/* The exposition text; *out is malloc'ed and NUL-terminated. */
numla_status numla_http_metrics_render(numla_http_metrics *m, char **out);

#endif
