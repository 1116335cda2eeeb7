/* engine/http/metrics.c — Prometheus counters, gauges and histograms (see metrics.h). */
#include "engine/http/metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/strbuf.h"

/* Bucket upper bounds in seconds (the +Inf bucket is implicit): TTFT spans a queued prompt on a
 * large model, TPOT a decode step. */
static const double TTFT_BOUNDS[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
static const double TPOT_BOUNDS[] = {0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5,
                                     1, 2.5};
enum { NUMLA_METRICS_MAX_BUCKETS = 16 };

typedef struct histogram {
    const double *bounds;
    int32_t num_bounds;
    uint64_t counts[NUMLA_METRICS_MAX_BUCKETS]; /* per bucket, not cumulative */
    uint64_t count;
    double sum;
} histogram;

struct numla_http_metrics {
    pthread_mutex_t mu;
    uint64_t requests[NUMLA_HTTP_OUTCOME_COUNT];
    uint64_t prompt_tokens, generation_tokens, preemptions;
    int64_t running, waiting, kv_used, kv_free;
    numla_http_prefix_figures prefix;
    numla_http_spec_figures spec;
    histogram ttft, tpot;
};

static const char *const OUTCOME_NAMES[NUMLA_HTTP_OUTCOME_COUNT] = {
    "ok", "bad_request", "unauthorized", "too_large", "rejected", "cancelled", "error"};

numla_status numla_http_metrics_create(numla_http_metrics **out)
{
    numla_http_metrics *m = calloc(1, sizeof *m);
    if (!m)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for the HTTP metrics");
    pthread_mutex_init(&m->mu, NULL);
    m->ttft.bounds = TTFT_BOUNDS;
    m->ttft.num_bounds = (int32_t)(sizeof TTFT_BOUNDS / sizeof TTFT_BOUNDS[0]);
    m->tpot.bounds = TPOT_BOUNDS;
    m->tpot.num_bounds = (int32_t)(sizeof TPOT_BOUNDS / sizeof TPOT_BOUNDS[0]);
    *out = m;
    return NUMLA_STATUS_OK;
}

void numla_http_metrics_destroy(numla_http_metrics **m)
{
    if (!*m)
        return;
    pthread_mutex_destroy(&(*m)->mu);
    free(*m);
    *m = NULL;
}

void numla_http_metrics_request_done(numla_http_metrics *m, numla_http_outcome outcome)
{
    if (outcome < 0 || outcome >= NUMLA_HTTP_OUTCOME_COUNT)
        outcome = NUMLA_HTTP_OUTCOME_ERROR;
    pthread_mutex_lock(&m->mu);
    m->requests[outcome]++;
    pthread_mutex_unlock(&m->mu);
}

void numla_http_metrics_add_tokens(numla_http_metrics *m, int64_t prompt, int64_t generated)
{
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += prompt > 0 ? (uint64_t)prompt : 0;
    m->generation_tokens += generated > 0 ? (uint64_t)generated : 0;
    pthread_mutex_unlock(&m->mu);
}

void numla_http_metrics_set_speculative(numla_http_metrics *m, const numla_http_spec_figures *f)
{
    pthread_mutex_lock(&m->mu);
    m->spec = *f;
    pthread_mutex_unlock(&m->mu);
}

void numla_http_metrics_set_prefix(numla_http_metrics *m, const numla_http_prefix_figures *f)
{
    pthread_mutex_lock(&m->mu);
    m->prefix = *f;
    pthread_mutex_unlock(&m->mu);
}

static void observe(numla_http_metrics *m, histogram *h, double v)
{
    int32_t b = 0;
    while (b < h->num_bounds && v > h->bounds[b])
        b++;
    pthread_mutex_lock(&m->mu);
    h->counts[b]++; /* b == num_bounds: only +Inf */
    h->count++;
    h->sum += v;
    pthread_mutex_unlock(&m->mu);
}

void numla_http_metrics_observe_ttft(numla_http_metrics *m, double seconds)
{
    observe(m, &m->ttft, seconds);
}

void numla_http_metrics_observe_tpot(numla_http_metrics *m, double seconds)
{
    observe(m, &m->tpot, seconds);
}

void numla_http_metrics_set_engine(numla_http_metrics *m, int64_t running, int64_t kv_used,
                                   int64_t kv_free)
{
    pthread_mutex_lock(&m->mu);
    m->running = running;
    m->kv_used = kv_used;
    m->kv_free = kv_free;
    pthread_mutex_unlock(&m->mu);
}

void numla_http_metrics_set_waiting(numla_http_metrics *m, int64_t waiting)
{
    pthread_mutex_lock(&m->mu);
    m->waiting = waiting;
    pthread_mutex_unlock(&m->mu);
}

void numla_http_metrics_add_preemptions(numla_http_metrics *m, int64_t n)
{
    pthread_mutex_lock(&m->mu);
    m->preemptions += n > 0 ? (uint64_t)n : 0;
    pthread_mutex_unlock(&m->mu);
}

static void put_histogram(numla_strbuf *t, const char *name, const char *help,
                          const histogram *h)
{
    numla_strbuf_printf(t, "# HELP numla_%s %s\n# TYPE numla_%s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int32_t b = 0; b < h->num_bounds; b++) {
        cum += h->counts[b];
        numla_strbuf_printf(t, "numla_%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[b],
                            (unsigned long long)cum);
    }
    numla_strbuf_printf(t, "numla_%s_bucket{le=\"+Inf\"} %llu\n", name,
                        (unsigned long long)h->count);
    numla_strbuf_printf(t, "numla_%s_sum %.9g\nnumla_%s_count %llu\n", name, h->sum, name,
                        (unsigned long long)h->count);
}

static void put_scalar(numla_strbuf *t, const char *name, const char *type, const char *help,
                       long long v)
{
    numla_strbuf_printf(t, "# HELP numla_%s %s\n# TYPE numla_%s %s\nnumla_%s %lld\n", name, help,
                        name, type, name, v);
}

numla_status numla_http_metrics_render(numla_http_metrics *m, char **out)
{
    *out = NULL;
    numla_strbuf t = {0}; /* a failed append sets t.oom and stops the later ones */
    pthread_mutex_lock(&m->mu);
    numla_strbuf_puts(&t, "# HELP numla_requests_total Finished HTTP generation requests by "
                          "outcome.\n# TYPE numla_requests_total counter\n");
    for (int o = 0; o < NUMLA_HTTP_OUTCOME_COUNT; o++)
        numla_strbuf_printf(&t, "numla_requests_total{outcome=\"%s\"} %llu\n", OUTCOME_NAMES[o],
                            (unsigned long long)m->requests[o]);
    put_scalar(&t, "prompt_tokens_total", "counter", "Prompt tokens of finished requests.",
               (long long)m->prompt_tokens);
    put_scalar(&t, "generation_tokens_total", "counter", "Generated tokens of finished requests.",
               (long long)m->generation_tokens);
    put_histogram(&t, "time_to_first_token_seconds",
                  "Seconds from a request's arrival to its first generated token.", &m->ttft);
    put_histogram(&t, "time_per_output_token_seconds",
                  "Mean seconds per generated token after the first, per request.", &m->tpot);
    put_scalar(&t, "requests_running", "gauge", "Requests the engine is generating for.",
               (long long)m->running);
    put_scalar(&t, "requests_waiting", "gauge", "Requests queued for the engine.",
               (long long)m->waiting);
    put_scalar(&t, "kv_blocks_used", "gauge", "KV cache blocks in use.", (long long)m->kv_used);
    put_scalar(&t, "kv_blocks_free", "gauge",
               "KV cache blocks free (or idle in the prefix cache, evictable).",
               (long long)m->kv_free);
    put_scalar(&t, "preemptions_total", "counter", "Requests preempted to free KV blocks.",
               (long long)m->preemptions);
    const numla_http_prefix_figures *p = &m->prefix;
    numla_strbuf_printf(&t,
                        "# HELP numla_prefix_cache_hit_rate Share of the tokens looked up at "
                        "admissions that were served from the prefix cache.\n"
                        "# TYPE numla_prefix_cache_hit_rate gauge\nnumla_prefix_cache_hit_rate "
                        "%.6f\n",
                        p->queried_tokens > 0 ? (double)p->hit_tokens / (double)p->queried_tokens
                                              : 0.0);
    put_scalar(&t, "prefix_cache_queried_tokens_total", "counter",
               "Tokens looked up in the prefix cache at admissions.", (long long)p->queried_tokens);
    put_scalar(&t, "prefix_cache_hit_tokens_total", "counter",
               "Tokens served from the prefix cache at admissions.", (long long)p->hit_tokens);
    put_scalar(&t, "prompt_tokens_cached_total", "counter",
               "Prompt tokens served from the prefix cache.", (long long)p->prompt_cached);
    put_scalar(&t, "prompt_tokens_computed_total", "counter",
               "Prompt tokens computed (not served from the prefix cache).",
               (long long)p->prompt_computed);
    put_scalar(&t, "kv_blocks_cached_in_use", "gauge",
               "Prefix-cache blocks held by running requests.", (long long)p->blocks_in_use);
    put_scalar(&t, "kv_blocks_cached_idle", "gauge",
               "Prefix-cache blocks held by no request (evicted when a block is needed).",
               (long long)p->blocks_idle);
    const numla_http_spec_figures *sp = &m->spec;
    if (sp->enabled) {
        numla_strbuf_printf(&t,
                            "# HELP numla_spec_acceptance_rate Share of the draft tokens "
                            "(speculative decoding) that were accepted.\n"
                            "# TYPE numla_spec_acceptance_rate gauge\nnumla_spec_acceptance_rate "
                            "%.6f\n",
                            sp->draft_tokens > 0
                                ? (double)sp->accepted_tokens / (double)sp->draft_tokens
                                : 0.0);
        numla_strbuf_printf(&t,
                            "# HELP numla_spec_mean_accepted_length Tokens a verify step gave "
                            "per sequence: (accepted + verify steps) / verify steps.\n"
                            "# TYPE numla_spec_mean_accepted_length gauge\n"
                            "numla_spec_mean_accepted_length %.6f\n",
                            sp->verify_steps > 0 ? (double)(sp->accepted_tokens +
                                                            sp->verify_steps) /
                                                       (double)sp->verify_steps
                                                 : 0.0);
        put_scalar(&t, "spec_verify_steps_total", "counter",
                   "Sequences' steps that verified draft tokens.", (long long)sp->verify_steps);
        put_scalar(&t, "spec_draft_tokens_total", "counter", "Draft tokens verified.",
                   (long long)sp->draft_tokens);
        put_scalar(&t, "spec_accepted_tokens_total", "counter", "Draft tokens accepted.",
                   (long long)sp->accepted_tokens);
        put_scalar(&t, "spec_mtp_steps_total", "counter", "Steps of the MTP layer run.",
                   (long long)sp->mtp_steps);
    }
    pthread_mutex_unlock(&m->mu);
    if (t.oom || !t.p) {
        numla_strbuf_free(&t);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for the metrics text");
    }
    *out = numla_strbuf_take(&t);
    return NUMLA_STATUS_OK;
}
