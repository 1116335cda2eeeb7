/* engine/http/metrics.h — the server's counters, gauges and histograms, and their Prometheus
 * text exposition (GET /metrics, format version 0.0.4).
 *
 * Series (all prefixed numla_):
 *   requests_total{outcome="ok"|"bad_request"|"unauthorized"|"too_large"|"rejected"|
 *                  "cancelled"|"error"}                     counter
 *   prompt_tokens_total, generation_tokens_total               counters
 *   time_to_first_token_seconds, time_per_output_token_seconds histograms
 *   requests_running, requests_waiting                         gauges
 *   kv_blocks_used, kv_blocks_free (free or idle cached)       gauges
 *   preemptions_total                                          counter
 *   prefix_cache_hit_rate (hit / queried tokens since start)   gauge
 *   prefix_cache_queried_tokens_total, prefix_cache_hit_tokens_total   counters
 *   prompt_tokens_cached_total, prompt_tokens_computed_total   counters
 *   kv_blocks_cached_in_use, kv_blocks_cached_idle             gauges
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

/* The prefix cache's figures as the scheduler counts them (numla_sched_stats), set as totals. */
typedef struct numla_http_prefix_figures {
    int64_t queried_tokens;     /* tokens known at admissions */
    int64_t hit_tokens;         /* of those, served from the cache */
    int64_t prompt_cached;      /* prompt tokens served from the cache (first admissions) */
    int64_t prompt_computed;    /* prompt tokens computed (first time) */
    int64_t blocks_in_use;      /* cached blocks held by running requests */
    int64_t blocks_idle;        /* cached blocks held by none (evictable) */
} numla_http_prefix_figures;
void numla_http_metrics_set_prefix(numla_http_metrics *m, const numla_http_prefix_figures *f);

/* Speculative decoding's figures (numla_sched_stats), set as totals; rendered when enabled. */
typedef struct numla_http_spec_figures {
    int enabled;                /* --speculative given */
    int64_t verify_steps;       /* sequences' steps that verified drafts */
    int64_t draft_tokens;       /* drafts checked */
    int64_t accepted_tokens;    /* drafts accepted */
    int64_t mtp_steps;          /* MTP layer steps run */
} numla_http_spec_figures;
void numla_http_metrics_set_speculative(numla_http_metrics *m, const numla_http_spec_figures *f);

/* The exposition text; *out is malloc'ed and NUL-terminated. */
numla_status numla_http_metrics_render(numla_http_metrics *m, char **out);

#endif
