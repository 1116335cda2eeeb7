/* engine/http/backend.c — the job queue between HTTP threads and the serving loop (see backend.h). */
#include "engine/http/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"

struct numla_http_backend {
    pthread_mutex_t mu;
    pthread_cond_t cv;          /* signalled when a job is queued */
    numla_http_job *head, *tail;
    int32_t waiting, max_queue;
    int closed;
    char why[256];
};

numla_status numla_http_backend_create(int32_t max_queue, numla_http_backend **out)
{
    *out = NULL;
    if (max_queue < 1)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "HTTP backend: max_queue %d must be >= 1", max_queue);
    numla_http_backend *b = calloc(1, sizeof *b);
    if (!b)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for the HTTP backend");
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    b->max_queue = max_queue;
    *out = b;
    return NUMLA_STATUS_OK;
}

static numla_http_job *pop_locked(numla_http_backend *b)
{
    numla_http_job *j = b->head;
    if (j) {
        b->head = j->next;
        if (!b->head)
            b->tail = NULL;
        j->next = NULL;
        b->waiting--;
    }
    return j;
}

static void fail_queued_locked(numla_http_backend *b, const char *why)
{
    numla_http_job *j;
    while ((j = pop_locked(b))) {
        numla_http_job_fail(j, 503, why, NULL);
        numla_http_job_release(&j);
    }
}

void numla_http_backend_destroy(numla_http_backend **b)
{
    if (!*b)
        return;
    pthread_mutex_lock(&(*b)->mu);
    fail_queued_locked(*b, "the server is shutting down");
    pthread_mutex_unlock(&(*b)->mu);
    pthread_cond_destroy(&(*b)->cv);
    pthread_mutex_destroy(&(*b)->mu);
    free(*b);
    *b = NULL;
}

numla_http_job *numla_http_backend_next(numla_http_backend *b, int32_t wait_ms)
{
    pthread_mutex_lock(&b->mu);
    if (!b->head && wait_ms > 0 && !b->closed) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += wait_ms / 1000;
        until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        while (!b->head && !b->closed)
            if (pthread_cond_timedwait(&b->cv, &b->mu, &until))
                break;
    }
    numla_http_job *j = pop_locked(b);
    pthread_mutex_unlock(&b->mu);
    return j;
}

int32_t numla_http_backend_waiting(numla_http_backend *b)
{
    pthread_mutex_lock(&b->mu);
    int32_t n = b->waiting;
    pthread_mutex_unlock(&b->mu);
    return n;
}

void numla_http_backend_close(numla_http_backend *b, const char *why)
{
    pthread_mutex_lock(&b->mu);
    b->closed = 1;
    snprintf(b->why, sizeof b->why, "%s", why ? why : "the engine stopped");
    fail_queued_locked(b, b->why);
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

int numla_http_backend_submit(numla_http_backend *b, numla_http_call *c, numla_openai_error *err)
{
    pthread_mutex_lock(&b->mu);
    int rc = 0;
    if (b->closed) {
        numla_openai_error_set(err, 503, NULL, "unavailable", "%s", b->why);
        rc = 503;
    } else if (b->waiting + c->num_jobs > b->max_queue) {
        numla_openai_error_set(err, 429, NULL, "queue_full",
                               "the request queue is full (%d waiting, --max-queue %d); retry later",
                               b->waiting, b->max_queue);
        rc = 429;
    } else {
        pthread_mutex_lock(&c->mu);
        c->refs += c->num_jobs;
        pthread_mutex_unlock(&c->mu);
        for (int32_t i = 0; i < c->num_jobs; i++) {
            numla_http_job *j = &c->jobs[i];
            if (b->tail)
                b->tail->next = j;
            else
                b->head = j;
            b->tail = j;
            b->waiting++;
        }
        pthread_cond_broadcast(&b->cv);
    }
    pthread_mutex_unlock(&b->mu);
    return rc;
}

const numla_openai_request *numla_http_job_request(const numla_http_job *j)
{
    return &j->call->req;
}

int32_t numla_http_job_index(const numla_http_job *j)
{
    return j->index;
}

const numla_openai_prompt *numla_http_job_prompt(const numla_http_job *j)
{
    const numla_openai_request *r = &j->call->req;
    if (r->endpoint == NUMLA_OPENAI_COMPLETIONS)
        return &r->prompts[j->index / (r->n > 1 ? r->n : 1)];
    return r->num_prompts > 0 ? &r->prompts[0] : NULL; /* tokenize's prompt, detokenize's ids */
}

numla_status numla_http_job_push(numla_http_job *j, const int32_t *tokens, int32_t n,
                                 const char *text, size_t len, const numla_logprob_entry *lp)
{
    if (n < 0)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "HTTP job push: negative token count %d", n);
    numla_http_call *c = j->call;
    int want_lp = c->req.params.logprobs >= 0;
    numla_status st = NUMLA_STATUS_OK;
    pthread_mutex_lock(&c->mu);
    size_t need = (size_t)j->num_tokens + (size_t)n;
    if (j->finished) {
        pthread_mutex_unlock(&c->mu);
        return NUMLA_STATUS_OK; /* after fail: nothing more is shown */
    }
    if (need > (size_t)j->cap_tokens) { /* tokens, text ends, logprobs: one capacity */
        size_t cap = j->cap_tokens ? (size_t)j->cap_tokens : 16;
        while (cap < need)
            cap *= 2;
        int32_t *t = realloc(j->tokens, cap * sizeof *t);
        if (t)
            j->tokens = t;
        size_t *e = t ? realloc(j->text_ends, cap * sizeof *e) : NULL;
        if (e)
            j->text_ends = e;
        numla_logprob_entry *l = e && want_lp ? realloc(j->logprobs, cap * sizeof *l) : NULL;
        if (l)
            j->logprobs = l;
        if (!t || !e || (want_lp && !l) || cap > INT32_MAX)
            st = NUMLA_STATUS_NO_MEMORY;
        else
            j->cap_tokens = (int32_t)cap;
    }
    if (st == NUMLA_STATUS_OK && numla_strbuf_reserve(&j->text, len) != NUMLA_STATUS_OK)
        st = NUMLA_STATUS_NO_MEMORY;
    if (st == NUMLA_STATUS_OK) {
        if (n)
            memcpy(j->tokens + j->num_tokens, tokens, (size_t)n * sizeof *tokens);
        if (want_lp)
            for (int32_t i = 0; i < n; i++) {
                numla_logprob_entry *e = &j->logprobs[j->num_tokens + i];
                if (lp)
                    *e = lp[i];
                else
                    *e = (numla_logprob_entry){.token = tokens[i], .logprob = 0};
            }
        for (int32_t i = 0; i < n; i++)
            j->text_ends[j->num_tokens + i] = j->text.len + (i == n - 1 ? len : 0);
        j->num_tokens += n;
        numla_strbuf_append(&j->text, text, len); /* reserved above: cannot fail */
        if (n > 0 && j->t_first == 0)
            j->t_first = numla_now_s();
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    if (st != NUMLA_STATUS_OK)
        NUMLA_FAIL(st, "no memory for %d generated tokens of an HTTP request", n);
    return NUMLA_STATUS_OK;
}

void numla_http_job_finish(numla_http_job *j, const char *finish_reason, int32_t prompt_tokens,
                           int32_t completion_tokens)
{
    numla_http_call *c = j->call;
    pthread_mutex_lock(&c->mu);
    if (!j->finished) {
        j->finished = 1;
        snprintf(j->finish_reason, sizeof j->finish_reason, "%s",
                 j->stop_hit ? "stop" : finish_reason ? finish_reason : "stop");
        j->prompt_tokens = prompt_tokens;
        j->completion_tokens = completion_tokens;
        j->t_finish = numla_now_s();
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
}

void numla_http_job_set_speculative(numla_http_job *j, int32_t steps, int32_t drafted,
                                    int32_t accepted)
{
    numla_http_call *c = j->call;
    pthread_mutex_lock(&c->mu);
    j->speculative = 1;
    j->spec_steps = steps;
    j->spec_drafted = drafted;
    j->spec_accepted = accepted;
    pthread_mutex_unlock(&c->mu);
}

void numla_http_job_set_cached_tokens(numla_http_job *j, int32_t cached_tokens)
{
    numla_http_call *c = j->call;
    pthread_mutex_lock(&c->mu);
    j->cached_tokens = cached_tokens;
    pthread_mutex_unlock(&c->mu);
}

numla_status numla_http_job_set_prompt_logprobs(numla_http_job *j, const numla_logprob_entry *lp,
                                                int32_t n)
{
    numla_logprob_entry *copy = n > 0 ? malloc((size_t)n * sizeof *copy) : NULL;
    if (n > 0 && !copy)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for %d prompt logprobs", n);
    if (n > 0)
        memcpy(copy, lp, (size_t)n * sizeof *copy);
    numla_http_call *c = j->call;
    pthread_mutex_lock(&c->mu);
    free(j->prompt_logprobs);
    j->prompt_logprobs = copy;
    j->num_prompt_logprobs = n > 0 ? n : 0;
    pthread_mutex_unlock(&c->mu);
    return NUMLA_STATUS_OK;
}

void numla_http_job_fail(numla_http_job *j, int http_status, const char *message,
                         const char *param)
{
    numla_http_call *c = j->call;
    pthread_mutex_lock(&c->mu);
    if (!j->finished) {
        j->finished = 1;
        snprintf(j->finish_reason, sizeof j->finish_reason, "error");
        numla_openai_error_set(&j->error, http_status >= 400 ? http_status : 500, param,
                               http_status >= 400 && http_status < 500 ? "invalid_value"
                                                                       : "engine_error",
                               "%s", message ? message : "the engine failed the request");
        j->t_finish = numla_now_s();
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
}

int numla_http_job_cancelled(numla_http_job *j)
{
    pthread_mutex_lock(&j->call->mu);
    int r = j->call->cancelled || j->stop_hit;
    pthread_mutex_unlock(&j->call->mu);
    return r;
}

static void call_free(numla_http_call *c)
{
    for (int32_t i = 0; i < c->num_jobs; i++) {
        free(c->jobs[i].tokens);
        free(c->jobs[i].text_ends);
        free(c->jobs[i].logprobs);
        free(c->jobs[i].prompt_logprobs);
        numla_strbuf_free(&c->jobs[i].text);
    }
    free(c->jobs);
    numla_openai_request_free(&c->req);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* Drop one reference (c->mu held); frees the call and returns 1 when it was the last. */
static int unref_locked(numla_http_call *c)
{
    int last = --c->refs == 0;
    pthread_mutex_unlock(&c->mu);
    if (last)
        call_free(c);
    return last;
}

void numla_http_job_release(numla_http_job **jp)
{
    numla_http_job *j = *jp;
    if (!j)
        return;
    *jp = NULL;
    if (!j->finished)
        numla_http_job_fail(j, 500, "the engine dropped the request", NULL);
    numla_http_call *c = j->call;
    pthread_mutex_lock(&c->mu);
    j->released = 1;
    pthread_cond_broadcast(&c->cv);
    unref_locked(c);
}

numla_status numla_http_call_create(numla_openai_request *req, numla_http_call **out)
{
    *out = NULL;
    /* a job per choice: n per prompt (numla_openai_request.n, at least 1) */
    const int32_t per = req->n > 1 ? req->n : 1;
    int32_t n = (req->endpoint == NUMLA_OPENAI_COMPLETIONS ? req->num_prompts : 1) * per;
    if (n < 1)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "HTTP call without a prompt");
    numla_http_call *c = calloc(1, sizeof *c);
    numla_http_job *jobs = calloc((size_t)n, sizeof *jobs);
    if (!c || !jobs) {
        free(c);
        free(jobs);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for an HTTP call");
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->refs = 1;
    c->req = *req;
    memset(req, 0, sizeof *req);
    req->endpoint = c->req.endpoint;
    c->num_jobs = n;
    c->jobs = jobs;
    for (int32_t i = 0; i < n; i++) {
        jobs[i].call = c;
        jobs[i].index = i;
    }
    c->t_arrival = numla_now_s();
    *out = c;
    return NUMLA_STATUS_OK;
}

void numla_http_call_cancel(numla_http_call *c)
{
    pthread_mutex_lock(&c->mu);
    c->cancelled = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

void numla_http_call_release(numla_http_call **cp)
{
    numla_http_call *c = *cp;
    if (!c)
        return;
    *cp = NULL;
    pthread_mutex_lock(&c->mu);
    unref_locked(c);
}
