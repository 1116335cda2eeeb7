/* engine/serving/serve_loop.c — the serving loop shared by every front end (see serve_loop.h):
 * requests in flight, their streamed text, cancellation, the stop rule and the summary
 * figures. Knows nothing of files, sockets or MPI: the source, the sink and exec do. */
#define _GNU_SOURCE /* memmem */
#include "engine/serving/serve_loop.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/strbuf.h"

/* One request in flight (owned here, borrowed by the scheduler as its `user`). */
typedef struct serve_req {
    numla_request rq;
    void *user;                 /* the front end's handle */
    struct serve_req *prev, *next;
    int32_t streamed;           /* output tokens passed to sink.token */
    int cancel;                 /* numla_serve_loop_cancel asked for it */
    /* text output (rq.text_output): generated text so far, decoded one token at a time */
    numla_tokenizer_stream *ts;
    numla_strbuf text;
    size_t text_streamed;       /* bytes of text passed to sink.token */
    int text_done;              /* a stop string ended it: text is final */
} serve_req;

/* The most recent `window` samples: grown up to the window, then a ring. */
typedef struct serve_samples {
    double *v;                  /* (cap) */
    int64_t n, cap, window;
    int64_t next;               /* ring slot the next sample overwrites once n == window */
} serve_samples;

struct numla_serve_loop {
    numla_serve_options o;
    numla_serve_source src;
    numla_serve_sink sink;
    numla_sched *sc;
    serve_req *head;            /* requests in flight */
    int ended;                  /* the source said END */
    int draining;               /* the first stop request was seen */
    int sink_failed;
    int finished;
    numla_serve_end why;
    int32_t pending_cancels;
    int64_t done, ok, errors, cancelled, prompt_tokens, output_tokens;
    serve_samples ttft, tpot;   /* seconds, per ok request */
};

/* ---- requests in flight ---- */

static void req_free(serve_req *r)
{
    numla_request_free(&r->rq);
    numla_tokenizer_stream_destroy(&r->ts);
    numla_strbuf_free(&r->text);
    free(r);
}

static void req_unlink(numla_serve_loop *l, serve_req *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        l->head = r->next;
    if (r->next)
        r->next->prev = r->prev;
}

static void req_link(numla_serve_loop *l, serve_req *r)
{
    r->next = l->head;
    if (l->head)
        l->head->prev = r;
    l->head = r;
}

/* ---- text: decoded token by token, cut at stop strings ---- */

static int text_append(serve_req *r, const char *piece, size_t len)
{
    return numla_strbuf_append(&r->text, piece, len) == NUMLA_STATUS_OK;
}

/* Decode `token` into the request's text; returns 1 when a stop string now appears (the text
 * is cut where it starts and is final). */
static int text_push(serve_req *r, int32_t token)
{
    const char *piece;
    size_t len;
    size_t before = r->text.len;
    if (numla_tokenizer_stream_push(r->ts, token, &piece, &len) != NUMLA_STATUS_OK ||
        !text_append(r, piece, len))
        return 0;
    for (int32_t i = 0; i < r->rq.num_stop_strings; i++) {
        const char *stop = r->rq.stop_strings[i];
        size_t sl = strlen(stop);
        /* only matches that end in the new piece are new */
        size_t from = before + 1 > sl ? before + 1 - sl : 0;
        char *hit =
            r->text.len >= sl ? memmem(r->text.p + from, r->text.len - from, stop, sl) : NULL;
        if (hit) {
            numla_strbuf_truncate(&r->text, (size_t)(hit - r->text.p));
            r->text_done = 1;
            return 1;
        }
    }
    return 0;
}

/* Bytes at the end of the text that may be the start of a stop string: not streamed yet. */
static size_t text_holdback(const serve_req *r)
{
    size_t hold = 0;
    for (int32_t i = 0; i < r->rq.num_stop_strings; i++) {
        const char *stop = r->rq.stop_strings[i];
        size_t sl = strlen(stop);
        for (size_t k = sl - 1; k > hold; k--)
            if (k <= r->text.len && !memcmp(r->text.p + r->text.len - k, stop, k)) {
                hold = k;
                break;
            }
    }
    return hold;
}

/* Pass output token `index` to sink.token with the text that became final. */
static void stream_token(numla_serve_loop *l, serve_req *r, int32_t token, int32_t index,
                         const numla_logprob_entry *lp)
{
    r->streamed = index + 1;
    numla_serve_token t = {.token = token, .index = index, .logprob = lp};
    if (r->rq.text_output) {
        size_t end = r->text_done ? r->text.len : r->text.len - text_holdback(r);
        if (end < r->text_streamed)
            end = r->text_streamed;
        t.text = numla_strbuf_str(&r->text) + r->text_streamed;
        t.text_len = end - r->text_streamed;
        r->text_streamed = end;
    }
    if (l->sink.token && !l->sink_failed)
        l->sink.token(l->sink.ctx, r->user, &t);
}

/* numla_sched_options.stop_check: every generated token except EOS and stop tokens. */
static int loop_on_token(void *ctx, void *user, const int32_t *out, int32_t n,
                         const numla_logprob_entry *lp)
{
    numla_serve_loop *l = ctx;
    serve_req *r = user;
    int stop = 0;
    if (r->rq.text_output && r->ts && !r->text_done && n >= 1)
        stop = text_push(r, out[n - 1]);
    stream_token(l, r, out[n - 1], n - 1, lp);
    return stop;
}

/* ---- results ---- */

static void samples_push(serve_samples *s, double v)
{
    if (s->n == s->window) {
        s->v[s->next] = v;
        s->next = (s->next + 1) % s->window;
        return;
    }
    if (s->n == s->cap) {
        int64_t c = s->cap ? 2 * s->cap : 256;
        c = c < s->window ? c : s->window;
        double *p = realloc(s->v, (size_t)c * sizeof *p);
        if (!p)
            return; /* a lost sample only thins the statistics */
        s->v = p;
        s->cap = c;
    }
    s->v[s->n++] = v;
}

static void count_result(numla_serve_loop *l, const numla_sched_output *o, int cancelled)
{
    l->done++;
    if (o->error) {
        l->errors++;
        return;
    }
    if (cancelled) {
        l->cancelled++;
        return;
    }
    l->ok++;
    l->prompt_tokens += o->req->num_prompt;
    l->output_tokens += o->num_output;
    if (o->first_token_s > 0) {
        samples_push(&l->ttft, o->first_token_s - o->arrival_s);
        if (o->num_output > 1)
            samples_push(&l->tpot, (o->finish_s - o->first_token_s) / (o->num_output - 1));
    }
}

/* The scheduler's done callback: stream what is left (a final EOS or stop token), close the
 * text, count, hand the result to the sink, forget the request. */
static void loop_on_done(void *ctx, const numla_sched_output *o)
{
    numla_serve_loop *l = ctx;
    serve_req *r = o->user;
    const int cancelled = o->finish_reason && !strcmp(o->finish_reason, "cancelled");
    numla_serve_done d = {.result = {.req = o->req, .output_tokens = o->output_tokens,
                                     .num_output = o->num_output,
                                     .finish_reason = o->finish_reason, .error = o->error,
                                     .logprobs = o->logprobs,
                                     .prompt_logprobs = o->prompt_logprobs,
                                     .cached_tokens = o->cached_tokens,
                                     .speculative = l->o.sched.spec_k > 0,
                                     .spec_steps = o->spec_steps,
                                     .spec_drafted = o->spec_drafted,
                                     .spec_accepted = o->spec_accepted},
                          .cancelled = cancelled};
    /* first the tokens the stop check never saw (they add no text), then the text's end */
    for (int32_t i = r->streamed; i < o->num_output; i++)
        stream_token(l, r, o->output_tokens[i], i, o->logprobs ? &o->logprobs[i] : NULL);
    if (r->rq.text_output && !o->error && r->ts && !r->text_done) {
        const char *piece = "";
        size_t len = 0;
        if (numla_tokenizer_stream_flush(r->ts, &piece, &len) == NUMLA_STATUS_OK)
            text_append(r, piece, len);
        r->text_done = 1;
    }
    if (r->rq.text_output && !o->error && r->ts) {
        d.result.text = numla_strbuf_str(&r->text);
        d.result.text_len = r->text.len;
        d.text_tail = d.result.text + r->text_streamed;
        d.text_tail_len = d.result.text_len - r->text_streamed;
    }
    count_result(l, o, cancelled);
    if (!l->sink_failed && l->sink.done(l->sink.ctx, r->user, &d) != NUMLA_STATUS_OK)
        l->sink_failed = 1;
    if (r->cancel)
        l->pending_cancels--;
    req_unlink(l, r);
    req_free(r);
}

/* ---- the loop ---- */

numla_status numla_serve_loop_create(const numla_serve_options *opts,
                                     const numla_serve_source *source,
                                     const numla_serve_sink *sink, numla_serve_loop **out)
{
    *out = NULL;
    if (!opts || !source || !source->next || !sink || !sink->done || !opts->kv || !opts->exec)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "serve loop: a source with next, a sink with done, a KV pool and exec are "
                   "required");
    numla_serve_loop *l = calloc(1, sizeof *l);
    if (!l)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "serve loop: no memory");
    l->o = *opts;
    l->src = *source;
    l->sink = *sink;
    if (l->o.max_waiting <= 0) {
        const int32_t seqs = l->o.sched.max_seqs > 0 ? l->o.sched.max_seqs : 64;
        l->o.max_waiting = 2 * seqs + 16;
    }
    if (l->o.latency_window < 0) {
        free(l);
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "serve loop: latency_window %lld is negative",
                   (long long)opts->latency_window);
    }
    if (l->o.latency_window == 0)
        l->o.latency_window = NUMLA_SERVE_LATENCY_WINDOW;
    l->ttft.window = l->tpot.window = l->o.latency_window;
    numla_sched_options so = l->o.sched;
    so.stop_check = loop_on_token;
    so.stop_ctx = l;
    if (!so.tokenizer)
        so.tokenizer = l->o.tokenizer;
    numla_status s = numla_sched_create(&so, l->o.kv, l->o.exec, l->o.exec_ctx, loop_on_done, l,
                                        &l->sc);
    if (s != NUMLA_STATUS_OK) {
        free(l);
        return s;
    }
    *out = l;
    return NUMLA_STATUS_OK;
}

void numla_serve_loop_destroy(numla_serve_loop **pl)
{
    if (!pl || !*pl)
        return;
    numla_serve_loop *l = *pl;
    numla_sched_destroy(&l->sc);
    while (l->head) {
        serve_req *r = l->head;
        l->head = r->next;
        req_free(r);
    }
    free(l->ttft.v);
    free(l->tpot.v);
    free(l);
    *pl = NULL;
}

int numla_serve_loop_cancel(numla_serve_loop *l, void *user)
{
    for (serve_req *r = l->head; r; r = r->next)
        if (r->user == user && !r->cancel) {
            r->cancel = 1;
            l->pending_cancels++;
            return 1;
        }
    return 0;
}

/* Cancellations asked for since the last step. A request the scheduler no longer holds (dropped
 * by the stop rule) is forgotten without an answer. */
static void apply_cancels(numla_serve_loop *l)
{
    serve_req *r = l->head;
    while (l->pending_cancels > 0 && r) {
        serve_req *next = r->next; /* r is freed by the done callback */
        if (r->cancel && !numla_sched_cancel(l->sc, r)) {
            l->pending_cancels--;
            req_unlink(l, r);
            req_free(r);
        }
        r = next;
    }
}

/* Take requests from the source while the waiting queue has room. */
static numla_status pull_requests(numla_serve_loop *l)
{
    while (!l->ended) {
        numla_sched_stats st;
        numla_sched_stats_get(l->sc, &st);
        if (st.waiting >= l->o.max_waiting)
            break;
        serve_req *r = calloc(1, sizeof *r);
        if (!r)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "serve loop: no memory for a request");
        numla_serve_pull what = NUMLA_SERVE_PULL_END;
        numla_status s = l->src.next(l->src.ctx, &r->rq, &r->user, &what);
        if (s != NUMLA_STATUS_OK || what != NUMLA_SERVE_PULL_REQUEST) {
            req_free(r);
            l->ended = s == NUMLA_STATUS_OK && what == NUMLA_SERVE_PULL_END;
            return s;
        }
        if (r->rq.text_output && !r->rq.error[0] && l->o.tokenizer) {
            s = numla_tokenizer_stream_create(l->o.tokenizer, 1, &r->ts);
            if (s != NUMLA_STATUS_OK) {
                req_free(r);
                return s;
            }
        }
        req_link(l, r);
        NUMLA_CHECK(numla_sched_submit(l->sc, &r->rq, r));
    }
    return NUMLA_STATUS_OK;
}

static void loop_finish(numla_serve_loop *l, numla_serve_end why)
{
    l->finished = 1;
    l->why = why;
}

/* Nothing runs and the source has nothing now: let it wait for a request. */
static void wait_idle(numla_serve_loop *l)
{
    if (l->src.wait) {
        l->src.wait(l->src.ctx);
        return;
    }
    struct timespec ts = {.tv_sec = 0, .tv_nsec = 1000000};
    nanosleep(&ts, NULL);
}

numla_status numla_serve_loop_run_once(numla_serve_loop *l, int *finished, numla_serve_end *why)
{
    const int stops = l->o.stop_requests ? (int)*l->o.stop_requests : 0;
    if (!l->finished && l->sink_failed)
        loop_finish(l, NUMLA_SERVE_END_SINK_FAILED);
    else if (!l->finished && stops >= 2)
        loop_finish(l, NUMLA_SERVE_END_STOPPED);
    if (!l->finished && stops == 1 && !l->draining) {
        l->draining = 1;
        int32_t dropped = numla_sched_drop_waiting(l->sc);
        if (l->sink.draining)
            l->sink.draining(l->sink.ctx, dropped);
    }
    if (!l->finished) {
        apply_cancels(l);
        if (!l->draining)
            NUMLA_CHECK(pull_requests(l));
        if (!numla_sched_busy(l->sc)) {
            if (l->draining)
                loop_finish(l, NUMLA_SERVE_END_DRAINED);
            else if (l->ended)
                loop_finish(l, NUMLA_SERVE_END_DONE);
            else
                wait_idle(l);
        } else {
            NUMLA_CHECK(numla_sched_step(l->sc));
            if (l->sink.after_step)
                l->sink.after_step(l->sink.ctx);
        }
    }
    if (finished)
        *finished = l->finished;
    if (why)
        *why = l->why;
    return NUMLA_STATUS_OK;
}

numla_status numla_serve_loop_run(numla_serve_loop *l, numla_serve_end *why)
{
    int finished = 0;
    while (!finished)
        NUMLA_CHECK(numla_serve_loop_run_once(l, &finished, why));
    return NUMLA_STATUS_OK;
}

/* ---- figures ---- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentiles p50 and p99 of s (sorted copy); 0 when empty. */
static void percentiles(const serve_samples *s, double *p50, double *p99)
{
    *p50 = *p99 = 0.0;
    double *v = s->n ? malloc((size_t)s->n * sizeof *v) : NULL;
    if (!v)
        return;
    memcpy(v, s->v, (size_t)s->n * sizeof *v);
    qsort(v, (size_t)s->n, sizeof *v, cmp_double);
    const double p[2] = {50, 99};
    double *outs[2] = {p50, p99};
    for (int i = 0; i < 2; i++) {
        int64_t k = (int64_t)ceil(p[i] / 100.0 * (double)s->n) - 1;
        *outs[i] = v[k < 0 ? 0 : k >= s->n ? s->n - 1 : k];
    }
    free(v);
}

void numla_serve_loop_stats_get(const numla_serve_loop *l, numla_serve_stats *out)
{
    *out = (numla_serve_stats){.done = l->done, .ok = l->ok, .errors = l->errors,
                               .cancelled = l->cancelled, .prompt_tokens = l->prompt_tokens,
                               .output_tokens = l->output_tokens};
    percentiles(&l->ttft, &out->ttft_p50_s, &out->ttft_p99_s);
    percentiles(&l->tpot, &out->tpot_p50_s, &out->tpot_p99_s);
    numla_sched_stats_get(l->sc, &out->sched);
}

void numla_serve_loop_latencies(const numla_serve_loop *l, const double **ttft, int64_t *n_ttft,
                                const double **tpot, int64_t *n_tpot)
{
    *ttft = l->ttft.v;
    *n_ttft = l->ttft.n;
    *tpot = l->tpot.v;
    *n_tpot = l->tpot.n;
}
