/* tests/unit/engine/serving/test_serve_loop.c — the serving loop (engine/serving/serve_loop.h)
 * over a fake step whose greedy continuation is known without any model: each logit row puts
 * its maximum on (last token + 1) mod V, so a prompt ending in t generates t+1, t+2, ...
 * Checked: per request the token callbacks come in output order, every token (the final EOS
 * included) before its one done callback; cancelling a running request frees its KV blocks
 * (the pool's free count) and cancelling a waiting one answers it with no tokens; the stop rule
 * (one request: finish the request in flight, drop the rest; two: stop at once). */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/kv_cache.h"
#include "engine/serving/serve_loop.h"
#include "test_util.h"

enum { SL_VOCAB = 64, SL_EOS = 13, SL_MAX_EVENTS = 512 };

static numla_status sl_exec(void *ctx, const numla_step *st, float *logits)
{
    (void)ctx;
    for (int32_t r = 0; r < st->num_logit_rows; r++) {
        float *row = logits + (size_t)r * SL_VOCAB;
        for (int v = 0; v < SL_VOCAB; v++)
            row[v] = 0.0f;
        row[(st->tokens[st->logit_rows[r]] + 1) % SL_VOCAB] = 10.0f;
    }
    return NUMLA_STATUS_OK;
}

/* A request to hand out: prompt 1..4 tokens, max_tokens, or an invalid one (error text). */
typedef struct sl_spec {
    int32_t prompt[4], num_prompt, max_tokens;
    const char *error;
} sl_spec;

typedef struct sl_event {
    int req;                    /* index into the specs */
    int done;                   /* 0: token event */
    int32_t token, index;
    char finish[16];
    int cancelled;
    int32_t num_output;
} sl_event;

typedef struct sl_test {
    const sl_spec *specs;
    int n, next;
    sl_event ev[SL_MAX_EVENTS];
    int nev;
    numla_serve_loop *loop;
    numla_kv_cache *kv;
    volatile sig_atomic_t stops;
    /* actions taken from the token callback: at request `at_req`'s output index `at_index` */
    int at_req, at_index;
    int cancel_req;             /* >= 0: cancel this request */
    int set_stops;              /* > 0: set stops to this */
    int64_t free_at_cancel;
    int cancel_found;
    int32_t dropped;
    int64_t latency_window;     /* passed to the loop (0: its default) */
} sl_test;

static numla_status sl_next(void *ctx, numla_request *req, void **user, numla_serve_pull *what)
{
    sl_test *t = ctx;
    if (t->next == t->n) {
        *what = NUMLA_SERVE_PULL_END;
        return NUMLA_STATUS_OK;
    }
    const int i = t->next++;
    const sl_spec *sp = &t->specs[i];
    req->line = i + 1;
    req->num_prompt = sp->num_prompt;
    req->prompt_tokens = malloc(4 * sizeof *req->prompt_tokens);
    memcpy(req->prompt_tokens, sp->prompt, 4 * sizeof *req->prompt_tokens);
    numla_sampling_params_default(&req->params);
    req->params.temperature = 0;
    req->params.max_tokens = sp->max_tokens;
    if (sp->error)
        snprintf(req->error, sizeof req->error, "%s", sp->error);
    *user = (void *)&t->specs[i]; /* the handle: the spec's address */
    *what = NUMLA_SERVE_PULL_REQUEST;
    return NUMLA_STATUS_OK;
}

static int sl_req_of(const sl_test *t, void *user) { return (int)((const sl_spec *)user - t->specs); }

static void sl_token(void *ctx, void *user, const numla_serve_token *tk)
{
    sl_test *t = ctx;
    const int r = sl_req_of(t, user);
    if (t->nev < SL_MAX_EVENTS)
        t->ev[t->nev++] = (sl_event){.req = r, .token = tk->token, .index = tk->index};
    if (r == t->at_req && tk->index == t->at_index) {
        if (t->cancel_req >= 0) {
            t->free_at_cancel = numla_kv_cache_available(t->kv);
            t->cancel_found = numla_serve_loop_cancel(t->loop, (void *)&t->specs[t->cancel_req]);
        }
        if (t->set_stops > 0)
            t->stops = t->set_stops;
    }
}

static numla_status sl_done(void *ctx, void *user, const numla_serve_done *d)
{
    sl_test *t = ctx;
    if (t->nev < SL_MAX_EVENTS) {
        sl_event *e = &t->ev[t->nev++];
        *e = (sl_event){.req = sl_req_of(t, user), .done = 1, .cancelled = d->cancelled,
                        .num_output = d->result.num_output};
        snprintf(e->finish, sizeof e->finish, "%s", d->result.finish_reason);
        for (int32_t i = 0; i < d->result.num_output; i++) /* done repeats the streamed tokens */
            CU_ASSERT_EQUAL(d->result.output_tokens[i],
                            (t->specs[e->req].prompt[t->specs[e->req].num_prompt - 1] + 1 + i) %
                                SL_VOCAB);
    }
    return NUMLA_STATUS_OK;
}

static void sl_draining(void *ctx, int32_t dropped) { ((sl_test *)ctx)->dropped = dropped; }

/* Serve specs[0..n) with max_seqs sequences and a pool of `blocks` blocks of 4 tokens. */
static numla_serve_end sl_run(sl_test *t, const sl_spec *specs, int n, int32_t max_seqs,
                              int64_t blocks)
{
    t->specs = specs;
    t->n = n;
    CU_ASSERT_EQUAL_FATAL(numla_kv_cache_create(1, 8, 8, 4, blocks, NUMLA_DTYPE_F32, &t->kv),
                          NUMLA_STATUS_OK);
    const int32_t eos = SL_EOS;
    numla_serve_options so = {.sched = {.max_batch_tokens = 64, .max_seqs = max_seqs,
                                        .prefill_chunk = 16, .vocab_size = SL_VOCAB,
                                        .num_eos = 1, .eos_token_ids = &eos},
                              .kv = t->kv, .exec = sl_exec, .stop_requests = &t->stops,
                              .latency_window = t->latency_window};
    numla_serve_source src = {.ctx = t, .next = sl_next};
    numla_serve_sink sink = {.ctx = t, .token = sl_token, .done = sl_done,
                             .draining = sl_draining};
    CU_ASSERT_EQUAL_FATAL(numla_serve_loop_create(&so, &src, &sink, &t->loop), NUMLA_STATUS_OK);
    numla_serve_end why = NUMLA_SERVE_END_DONE;
    CU_ASSERT_EQUAL(numla_serve_loop_run(t->loop, &why), NUMLA_STATUS_OK);
    return why;
}

static void sl_close(sl_test *t)
{
    numla_serve_loop_destroy(&t->loop);
    numla_kv_cache_destroy(&t->kv);
}

/* Request r's token events in order 0..n-1 with the expected tokens, then one done; returns
 * the done event (NULL when missing). */
static const sl_event *sl_check_request(const sl_test *t, int r)
{
    int32_t want = 0;
    const sl_event *done = NULL;
    const int32_t last = t->specs[r].prompt[t->specs[r].num_prompt - 1];
    for (int i = 0; i < t->nev; i++) {
        const sl_event *e = &t->ev[i];
        if (e->req != r)
            continue;
        NUMLA_ASSERT_MSG(!done, "request %d: an event after its done", r);
        if (e->done) {
            done = e;
            continue;
        }
        NUMLA_ASSERT_MSG(e->index == want, "request %d: token index %d, want %d", r, e->index,
                         want);
        CU_ASSERT_EQUAL(e->token, (last + 1 + want) % SL_VOCAB);
        want++;
    }
    if (done)
        NUMLA_ASSERT_MSG(done->num_output == want, "request %d: %d tokens streamed, %d in done",
                         r, want, done->num_output);
    return done;
}

static void test_stream_order(void)
{
    static const sl_spec specs[] = {
        {.prompt = {5}, .num_prompt = 1, .max_tokens = 4},
        {.prompt = {10, 11}, .num_prompt = 2, .max_tokens = 6}, /* 12, then EOS 13: "stop" */
        {.prompt = {1}, .num_prompt = 1, .max_tokens = 3, .error = "line 3: bad"},
        {.prompt = {20, 21, 22}, .num_prompt = 3, .max_tokens = 5},
    };
    sl_test t = {.at_req = -1, .cancel_req = -1};
    CU_ASSERT_EQUAL(sl_run(&t, specs, 4, 4, 32), NUMLA_SERVE_END_DONE);
    const char *finish[] = {"length", "stop", "error", "length"};
    const int32_t count[] = {4, 2, 0, 5};
    for (int r = 0; r < 4; r++) {
        const sl_event *d = sl_check_request(&t, r);
        NUMLA_ASSERT_MSG(d != NULL, "request %d: no done", r);
        if (!d)
            continue;
        CU_ASSERT_STRING_EQUAL(d->finish, finish[r]);
        CU_ASSERT_EQUAL(d->num_output, count[r]);
    }
    numla_serve_stats st;
    numla_serve_loop_stats_get(t.loop, &st);
    CU_ASSERT_EQUAL(st.done, 4);
    CU_ASSERT_EQUAL(st.ok, 3);
    CU_ASSERT_EQUAL(st.errors, 1);
    CU_ASSERT_EQUAL(st.output_tokens, 11);
    CU_ASSERT_EQUAL(st.prompt_tokens, 6);
    CU_ASSERT_EQUAL(numla_kv_cache_available(t.kv), 32);
    sl_close(&t);
}

/* The latency samples are a window of the most recent requests: 7 ok requests with a window of
 * 3 keep 3 of each kind, and the percentiles come from those; a negative window is refused. */
static void test_latency_window(void)
{
    static sl_spec specs[7];
    for (int i = 0; i < 7; i++)
        specs[i] = (sl_spec){.prompt = {(int32_t)(3 * i + 1)}, .num_prompt = 1, .max_tokens = 2};
    sl_test t = {.at_req = -1, .cancel_req = -1, .latency_window = 3};
    CU_ASSERT_EQUAL(sl_run(&t, specs, 7, 1, 32), NUMLA_SERVE_END_DONE);
    const double *ttft, *tpot;
    int64_t nttft = -1, ntpot = -1;
    numla_serve_loop_latencies(t.loop, &ttft, &nttft, &tpot, &ntpot);
    CU_ASSERT_EQUAL(nttft, 3);
    CU_ASSERT_EQUAL(ntpot, 3);
    numla_serve_stats st;
    numla_serve_loop_stats_get(t.loop, &st);
    CU_ASSERT_EQUAL(st.ok, 7);
    double hi = 0;
    for (int64_t i = 0; i < nttft; i++)
        hi = ttft[i] > hi ? ttft[i] : hi;
    CU_ASSERT(st.ttft_p99_s == hi); /* nearest rank 99 of 3 samples: their maximum */
    sl_close(&t);

    numla_kv_cache *kv = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_kv_cache_create(1, 8, 8, 4, 8, NUMLA_DTYPE_F32, &kv), NUMLA_STATUS_OK);
    numla_serve_options so = {.sched = {.max_batch_tokens = 8, .max_seqs = 1, .vocab_size = SL_VOCAB},
                              .kv = kv, .exec = sl_exec, .latency_window = -1};
    numla_serve_source src = {.ctx = &t, .next = sl_next};
    numla_serve_sink sink = {.ctx = &t, .done = sl_done};
    numla_serve_loop *l = NULL;
    CU_ASSERT_EQUAL(numla_serve_loop_create(&so, &src, &sink, &l), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_PTR_NULL(l);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "latency_window"));
    numla_error_clear();
    numla_kv_cache_destroy(&kv);
}

static void test_cancel_running_frees_kv(void)
{
    static const sl_spec specs[] = {
        {.prompt = {1, 2, 3, 4}, .num_prompt = 4, .max_tokens = 40}, /* cancelled at token 2 */
        {.prompt = {30}, .num_prompt = 1, .max_tokens = 12},
    };
    sl_test t = {.at_req = 0, .at_index = 2, .cancel_req = 0};
    CU_ASSERT_EQUAL(sl_run(&t, specs, 2, 4, 16), NUMLA_SERVE_END_DONE);
    CU_ASSERT_EQUAL(t.cancel_found, 1);
    CU_ASSERT(t.free_at_cancel < 16);
    const sl_event *a = sl_check_request(&t, 0), *b = sl_check_request(&t, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_STRING_EQUAL(a->finish, "cancelled");
    CU_ASSERT_EQUAL(a->cancelled, 1);
    CU_ASSERT_EQUAL(a->num_output, 3); /* cancelled before the next step */
    CU_ASSERT_STRING_EQUAL(b->finish, "length");
    CU_ASSERT_EQUAL(b->num_output, 12);
    /* A's blocks came back when it was cancelled: once B is done too, the pool is whole */
    int a_done = -1, b_done = -1;
    for (int i = 0; i < t.nev; i++) {
        if (t.ev[i].done && t.ev[i].req == 0)
            a_done = i;
        if (t.ev[i].done && t.ev[i].req == 1)
            b_done = i;
    }
    CU_ASSERT(a_done >= 0 && a_done < b_done);
    CU_ASSERT_EQUAL(numla_kv_cache_available(t.kv), 16);
    numla_serve_stats st;
    numla_serve_loop_stats_get(t.loop, &st);
    CU_ASSERT_EQUAL(st.cancelled, 1);
    CU_ASSERT_EQUAL(st.ok, 1);
    CU_ASSERT_EQUAL(numla_serve_loop_cancel(t.loop, (void *)&specs[0]), 0); /* answered */
    sl_close(&t);
}

/* The pool's free count right after a cancel round: run the loop round by round. */
static void test_cancel_returns_blocks_at_once(void)
{
    static const sl_spec specs[] = {{.prompt = {1, 2, 3, 4}, .num_prompt = 4, .max_tokens = 40}};
    sl_test t = {.at_req = -1, .cancel_req = -1, .specs = specs, .n = 1};
    CU_ASSERT_EQUAL_FATAL(numla_kv_cache_create(1, 8, 8, 4, 16, NUMLA_DTYPE_F32, &t.kv),
                          NUMLA_STATUS_OK);
    numla_serve_options so = {.sched = {.max_batch_tokens = 64, .max_seqs = 2,
                                        .prefill_chunk = 16, .vocab_size = SL_VOCAB},
                              .kv = t.kv, .exec = sl_exec};
    numla_serve_source src = {.ctx = &t, .next = sl_next};
    numla_serve_sink sink = {.ctx = &t, .token = sl_token, .done = sl_done};
    CU_ASSERT_EQUAL_FATAL(numla_serve_loop_create(&so, &src, &sink, &t.loop), NUMLA_STATUS_OK);
    int finished = 0;
    for (int i = 0; i < 6; i++) /* 6 tokens: 4 + 5 rows, 3 blocks */
        CU_ASSERT_EQUAL(numla_serve_loop_run_once(t.loop, &finished, NULL), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(finished, 0);
    CU_ASSERT_EQUAL(numla_kv_cache_available(t.kv), 16 - 3);
    CU_ASSERT_EQUAL(numla_serve_loop_cancel(t.loop, (void *)&specs[0]), 1);
    CU_ASSERT_EQUAL(numla_kv_cache_available(t.kv), 16 - 3); /* not inside the caller's call: at the next round */
    CU_ASSERT_EQUAL(numla_serve_loop_run_once(t.loop, &finished, NULL), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_kv_cache_available(t.kv), 16);
    const sl_event *a = sl_check_request(&t, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_STRING_EQUAL(a->finish, "cancelled");
    CU_ASSERT_EQUAL(a->num_output, 6);
    sl_close(&t);
}

static void test_cancel_waiting(void)
{
    static const sl_spec specs[] = {
        {.prompt = {1}, .num_prompt = 1, .max_tokens = 6},
        {.prompt = {40}, .num_prompt = 1, .max_tokens = 6}, /* waits: one sequence at a time */
    };
    sl_test t = {.at_req = 0, .at_index = 0, .cancel_req = 1};
    CU_ASSERT_EQUAL(sl_run(&t, specs, 2, 1, 16), NUMLA_SERVE_END_DONE);
    const sl_event *a = sl_check_request(&t, 0), *b = sl_check_request(&t, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_STRING_EQUAL(b->finish, "cancelled");
    CU_ASSERT_EQUAL(b->num_output, 0);
    CU_ASSERT_STRING_EQUAL(a->finish, "length");
    CU_ASSERT_EQUAL(a->num_output, 6);
    CU_ASSERT_EQUAL(numla_kv_cache_available(t.kv), 16);
    sl_close(&t);
}

static const sl_spec sl_four[] = {
    {.prompt = {1}, .num_prompt = 1, .max_tokens = 5},
    {.prompt = {20}, .num_prompt = 1, .max_tokens = 5},
    {.prompt = {30}, .num_prompt = 1, .max_tokens = 5},
    {.prompt = {40}, .num_prompt = 1, .max_tokens = 5},
};

static void test_drain_on_first_stop(void)
{
    sl_test t = {.at_req = 0, .at_index = 1, .cancel_req = -1, .set_stops = 1};
    CU_ASSERT_EQUAL(sl_run(&t, sl_four, 4, 1, 16), NUMLA_SERVE_END_DRAINED);
    const sl_event *a = sl_check_request(&t, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_STRING_EQUAL(a->finish, "length"); /* the request in flight is finished */
    CU_ASSERT_EQUAL(a->num_output, 5);
    for (int r = 1; r < 4; r++)
        NUMLA_ASSERT_MSG(sl_check_request(&t, r) == NULL, "dropped request %d was answered", r);
    CU_ASSERT_EQUAL(t.dropped, 3);
    sl_close(&t);
}

static void test_stop_on_second_stop(void)
{
    sl_test t = {.at_req = 0, .at_index = 1, .cancel_req = -1, .set_stops = 2};
    CU_ASSERT_EQUAL(sl_run(&t, sl_four, 4, 1, 16), NUMLA_SERVE_END_STOPPED);
    for (int r = 0; r < 4; r++)
        NUMLA_ASSERT_MSG(sl_check_request(&t, r) == NULL, "request %d answered after a stop", r);
    CU_ASSERT_EQUAL(t.nev, 2); /* tokens 0 and 1 of request 0, nothing after */
    sl_close(&t);               /* frees the requests in flight (the leak check watches) */
}

NUMLA_TEST_SUITE(serve_loop, NULL, NULL, NUMLA_TEST(test_stream_order), NUMLA_TEST(test_latency_window),
                 NUMLA_TEST(test_cancel_running_frees_kv),
                 NUMLA_TEST(test_cancel_returns_blocks_at_once), NUMLA_TEST(test_cancel_waiting),
                 NUMLA_TEST(test_drain_on_first_stop), NUMLA_TEST(test_stop_on_second_stop))
