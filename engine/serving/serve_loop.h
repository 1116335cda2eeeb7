/* engine/serving/serve_loop.h — the serving loop on rank 0: read requests, submit them to the
 * scheduler (engine/serving/scheduler.h), step, write results. Every front end (`numla run`'s
 * JSONL files, `numla bench serve`'s synthetic requests, an HTTP server) is this loop with its
 * own source and sink:
 *
 *   source.next   pull: a request, none for now, or the end of the requests
 *   sink.token    each generated token as it is drawn, with the text it made final (streaming)
 *   sink.done     each request's result, in completion order
 *   numla_serve_loop_cancel   a request is no longer wanted (an HTTP client went away): its
 *                 KV blocks are freed before the next step and sink.done sees "cancelled"
 *
 * The loop owns the scheduler, the requests in flight, their text (decoded through the
 * tokenizer's stream, cut at stop strings; streamed text never holds a partial UTF-8 character
 * nor the start of a stop string that may still complete), the stop rule and the summary
 * figures (TTFT/TPOT percentiles, tokens, preemptions).
 *
 * Stop rule (*stop_requests, typically counted by a signal handler): at 1 the loop stops
 * pulling, drops the requests that have not produced a token (they never reach sink.done: a
 * batch job leaves them for --resume) and finishes the ones in flight; at 2 or more it returns
 * after the current step, leaving the rest unanswered.
 *
 * Per token, in order: sink.token for indices 0, 1, ... of the output, then sink.done once.
 * Every output token is streamed before done, including a final EOS or stop token (its text is
 * empty: stop tokens are not part of the text).
 *
 * Not collective itself: exec (numla_engine_step on rank 0, or a local numla_model_forward) is.
 * Not thread-safe: every call, numla_serve_loop_cancel included, comes from the loop's thread
 * (callbacks may call numla_serve_loop_cancel; it takes effect before the next step).
 */
#ifndef NUMLA_ENGINE_SERVE_LOOP_H
#define NUMLA_ENGINE_SERVE_LOOP_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "engine/model/kv_cache.h"
#include "engine/serving/request_io.h"
#include "engine/serving/scheduler.h"
#include "engine/text/tokenizer.h"

typedef enum numla_serve_pull {
    NUMLA_SERVE_PULL_REQUEST = 0, /* *req holds a request */
    NUMLA_SERVE_PULL_NONE,        /* nothing now; ask again after the next step */
    NUMLA_SERVE_PULL_END,         /* no more requests */
} numla_serve_pull;

typedef struct numla_serve_source {
    void *ctx;
    /* Fill *req (zeroed by the loop; the loop owns it from then on and frees it with
     * numla_request_free) and *user (the front end's handle, passed back to the sink and to
     * numla_serve_loop_cancel), or say NONE or END. A request with req->error set is answered
     * at once. An error status stops the loop with that status. */
    numla_status (*next)(void *ctx, numla_request *req, void **user, numla_serve_pull *what);
    /* Optional: called when nothing is running and next said NONE; returns when a request may
     * be there (or a stop was requested). NULL: the loop sleeps 1 ms and asks again. */
    void (*wait)(void *ctx);
} numla_serve_source;

typedef struct numla_serve_token {
    int32_t token;                      /* the generated token id */
    int32_t index;                      /* its position in the output, 0-based */
    const numla_logprob_entry *logprob; /* NULL unless the request asked for logprobs */
    const char *text;                   /* text this token made final (text_output requests; */
    size_t text_len;                    /*   may be empty: bytes held back), else NULL, 0 */
} numla_serve_token;

typedef struct numla_serve_done {
    numla_result result;          /* what numla_result_write writes; text NULL unless text_output */
    const char *text_tail;        /* the end of result.text no sink.token carried */
    size_t text_tail_len;
    int cancelled;                /* finished by numla_serve_loop_cancel ("cancelled") */
} numla_serve_done;

typedef struct numla_serve_sink {
    void *ctx;
    /* Optional: each generated token (user as the source gave it). */
    void (*token)(void *ctx, void *user, const numla_serve_token *t);
    /* Each request's result. An error status (the output is gone) stops the loop before its
     * next step; no sink call follows. */
    numla_status (*done)(void *ctx, void *user, const numla_serve_done *d);
    /* Optional: the first stop request was seen; `dropped` requests that had not started were
     * dropped. */
    void (*draining)(void *ctx, int32_t dropped);
    /* Optional: called after every step (progress lines; rate-limit there). */
    void (*after_step)(void *ctx);
} numla_serve_sink;

typedef struct numla_serve_options {
    numla_sched_options sched;    /* stop_check and stop_ctx are the loop's: leave them NULL */
    numla_kv_cache *kv;           /* the rank-0 pool (borrowed) */
    numla_sched_exec_fn exec;     /* runs a step on every rank */
    void *exec_ctx;
    numla_tokenizer *tokenizer;   /* borrowed; NULL: requests cannot ask for text */
    int32_t max_waiting;          /* pull only while fewer wait; 0: 2 * max_seqs + 16 */
    const volatile sig_atomic_t *stop_requests; /* NULL: never stops early (see above) */
    int64_t latency_window;       /* latency samples kept per kind (TTFT, TPOT): the most
                                     recent ones, so a server that runs for months holds and
                                     sorts a bounded set; 0: NUMLA_SERVE_LATENCY_WINDOW */
} numla_serve_options;

enum { NUMLA_SERVE_LATENCY_WINDOW = 65536 };

typedef enum numla_serve_end {
    NUMLA_SERVE_END_DONE = 0,     /* the source ended and every request was answered */
    NUMLA_SERVE_END_DRAINED,      /* one stop request: the requests in flight were finished */
    NUMLA_SERVE_END_STOPPED,      /* two stop requests: stopped after the current step */
    NUMLA_SERVE_END_SINK_FAILED,  /* sink.done returned an error */
} numla_serve_end;

typedef struct numla_serve_stats {
    int64_t done, ok, errors, cancelled; /* requests answered (ok + errors + cancelled) */
    int64_t prompt_tokens, output_tokens; /* of the ok requests */
    double ttft_p50_s, ttft_p99_s, tpot_p50_s, tpot_p99_s; /* nearest rank over the latency
                                                            window; 0 without samples */
    numla_sched_stats sched;      /* steps, preemptions, running/waiting, KV use */
} numla_serve_stats;

typedef struct numla_serve_loop numla_serve_loop;

/* The sink's and source's callbacks are copied. Not collective. */
numla_status numla_serve_loop_create(const numla_serve_options *opts,
                                     const numla_serve_source *source,
                                     const numla_serve_sink *sink, numla_serve_loop **out);
/* Free the scheduler (and the KV blocks it held) and the requests still in flight, unanswered.
 * Sets *l to NULL; NULL is a no-op. */
void numla_serve_loop_destroy(numla_serve_loop **l);

/* One round: apply cancellations and the stop rule, pull requests while the queue has room,
 * run one step. *finished (may be NULL) is set when the loop is over, with *why saying why
 * (may be NULL). Only running out of memory, the source's errors and a failing step's
 * out-of-memory are error statuses. */
numla_status numla_serve_loop_run_once(numla_serve_loop *l, int *finished, numla_serve_end *why);
/* Rounds until finished. */
numla_status numla_serve_loop_run(numla_serve_loop *l, numla_serve_end *why);

/* Cancel the request the source handed over with `user`: before the next step it leaves the
 * scheduler, its KV blocks are freed and sink.done gets it with finish_reason "cancelled".
 * Returns 1 when such a request is in flight, 0 otherwise (already answered: nothing to do). */
int numla_serve_loop_cancel(numla_serve_loop *l, void *user);

/* Figures so far; the percentiles cost a sort of the latency window. */
void numla_serve_loop_stats_get(const numla_serve_loop *l, numla_serve_stats *out);
/* The raw latency samples of the ok requests in the window (seconds, in no particular order
 * once more than the window were taken; valid until the next round), for a front end that
 * wants other statistics than the nearest-rank percentiles. */
void numla_serve_loop_latencies(const numla_serve_loop *l, const double **ttft, int64_t *n_ttft,
                                const double **tpot, int64_t *n_tpot);

#endif
