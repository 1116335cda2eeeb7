/* Tests for engine/http/backend.c, the job queue between HTTP threads and the serving loop:
 * FIFO order and the bounded queue (429 with its figures), waiting for a job (timeout and
 * wake-up from another thread), what push/finish/fail/release leave for the HTTP side
 * (tokens, text, logprobs only when asked, first-one-wins, 500 for a dropped job), cancel and
 * stop, close (503 with the reason, queued jobs failed), destroy with jobs still queued.
 * Calls are built from real request bodies through numla_openai_parse. */
#include "test_util.h"

#include "common/clock.h"
#include "engine/http/backend.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* A call for a completions (or chat) body; NULL when the body does not parse. */
static numla_http_call *call_of(numla_openai_endpoint ep, const char *body)
{
    numla_openai_request req;
    numla_openai_error err;
    const numla_openai_limits lim = {0}; /* nothing checked */
    CU_ASSERT_EQUAL_FATAL(numla_openai_parse(ep, body, strlen(body), &lim, &req, &err),
                          NUMLA_STATUS_OK);
    NUMLA_ASSERT_MSG(err.status == 0, "body %s: %s", body, err.message);
    if (err.status)
        return NULL;
    numla_http_call *c = NULL;
    CU_ASSERT_EQUAL(numla_http_call_create(&req, &c), NUMLA_STATUS_OK);
    CU_ASSERT_PTR_NULL(req.prompts); /* the call took the request */
    return c;
}

static void test_create_rejects_empty_queue(void)
{
    numla_http_backend *b = (numla_http_backend *)1;
    CU_ASSERT_EQUAL(numla_http_backend_create(0, &b), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_PTR_NULL(b);
    NUMLA_ASSERT_MSG(strstr(numla_error_message(), "max_queue 0") != NULL, "message: %s",
                     numla_error_message());
    numla_http_backend_destroy(&b); /* NULL: no-op */
}

/* Jobs come out oldest first, one per prompt; a call that does not fit whole is a 429 that
 * says how many wait and the limit; an empty queue gives NULL at once. */
static void test_fifo_and_bounded_queue(void)
{
    numla_http_backend *b = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_http_backend_create(3, &b), NUMLA_STATUS_OK);
    numla_http_call *c1 = call_of(NUMLA_OPENAI_COMPLETIONS, "{\"prompt\": [[1, 2], [3]]}");
    numla_http_call *c2 = call_of(NUMLA_OPENAI_COMPLETIONS, "{\"prompt\": [[4], [5]]}");
    numla_http_call *c3 = call_of(NUMLA_OPENAI_CHAT,
                                  "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(c1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c3);
    CU_ASSERT_EQUAL(c1->num_jobs, 2);
    CU_ASSERT_EQUAL(c3->num_jobs, 1);
    numla_openai_error err = {0};
    CU_ASSERT_EQUAL(numla_http_backend_submit(b, c1, &err), 0);
    CU_ASSERT_EQUAL(numla_http_backend_waiting(b), 2);
    CU_ASSERT_EQUAL(numla_http_backend_submit(b, c2, &err), 429);
    CU_ASSERT_EQUAL(err.status, 429);
    CU_ASSERT_STRING_EQUAL(err.code, "queue_full");
    NUMLA_ASSERT_MSG(strstr(err.message, "(2 waiting, --max-queue 3)") != NULL, "message: %s",
                     err.message);
    CU_ASSERT_EQUAL(numla_http_backend_waiting(b), 2);
    CU_ASSERT_EQUAL(numla_http_backend_submit(b, c3, &err), 0);
    CU_ASSERT_EQUAL(numla_http_backend_waiting(b), 3);

    numla_http_job *j[3];
    for (int i = 0; i < 3; i++)
        j[i] = numla_http_backend_next(b, 0);
    CU_ASSERT_PTR_EQUAL(j[0], &c1->jobs[0]);
    CU_ASSERT_PTR_EQUAL(j[1], &c1->jobs[1]);
    CU_ASSERT_PTR_EQUAL_FATAL(j[2], &c3->jobs[0]);
    CU_ASSERT_PTR_NULL(numla_http_backend_next(b, 0));
    CU_ASSERT_EQUAL(numla_http_backend_waiting(b), 0);
    /* what the loop reads of a job */
    CU_ASSERT_EQUAL(numla_http_job_index(j[1]), 1);
    const numla_openai_prompt *p = numla_http_job_prompt(j[1]);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL(p->num_tokens, 1);
    CU_ASSERT_EQUAL(p->tokens[0], 3);
    CU_ASSERT_PTR_NULL(numla_http_job_prompt(j[2])); /* chat: messages, no prompt */
    CU_ASSERT_EQUAL(numla_http_job_request(j[2])->num_messages, 1);
    /* with room again, the refused call goes in */
    CU_ASSERT_EQUAL(numla_http_backend_submit(b, c2, &err), 0);
    numla_http_job *k = numla_http_backend_next(b, 0);
    CU_ASSERT_PTR_EQUAL(k, &c2->jobs[0]);

    for (int i = 0; i < 3; i++) {
        numla_http_job_finish(j[i], "stop", 1, 0);
        numla_http_job_release(&j[i]);
        CU_ASSERT_PTR_NULL(j[i]);
    }
    numla_http_job_finish(k, "stop", 1, 0);
    numla_http_job_release(&k);
    numla_http_call_release(&c1);
    numla_http_call_release(&c3);
    numla_http_backend_destroy(&b); /* fails c2's second job, still queued */
    CU_ASSERT_PTR_NULL(b);
    CU_ASSERT_EQUAL(c2->jobs[1].error.status, 503);
    NUMLA_ASSERT_MSG(strstr(c2->jobs[1].error.message, "shutting down") != NULL, "message: %s",
                     c2->jobs[1].error.message);
    CU_ASSERT(c2->jobs[1].released);
    numla_http_call_release(&c2);
}

typedef struct late_submit {
    numla_http_backend *b;
    numla_http_call *c;
} late_submit;

static void *submit_later(void *arg)
{
    late_submit *ls = arg;
    struct timespec d = {0, 30 * 1000 * 1000};
    nanosleep(&d, NULL);
    numla_openai_error err;
    numla_http_backend_submit(ls->b, ls->c, &err);
    return NULL;
}

/* next waits up to wait_ms for a job: it times out on an empty queue, and a job submitted by
 * another thread while it waits wakes it before the time is up. */
static void test_next_waits(void)
{
    numla_http_backend *b = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_http_backend_create(4, &b), NUMLA_STATUS_OK);
    double t0 = numla_now_s();
    CU_ASSERT_PTR_NULL(numla_http_backend_next(b, 40));
    double waited = numla_now_s() - t0;
    NUMLA_ASSERT_MSG(waited >= 0.035 && waited < 5, "an empty 40 ms wait took %.3f s", waited);

    late_submit ls = {.b = b, .c = call_of(NUMLA_OPENAI_COMPLETIONS, "{\"prompt\": [7]}")};
    CU_ASSERT_PTR_NOT_NULL_FATAL(ls.c);
    pthread_t th;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, submit_later, &ls), 0);
    t0 = numla_now_s();
    numla_http_job *j = numla_http_backend_next(b, 10000);
    waited = numla_now_s() - t0;
    pthread_join(th, NULL);
    CU_ASSERT_PTR_EQUAL(j, &ls.c->jobs[0]);
    NUMLA_ASSERT_MSG(waited < 5, "a job submitted after 30 ms was taken after %.3f s", waited);
    if (j) {
        numla_http_job_finish(j, "length", 1, 0);
        numla_http_job_release(&j);
    }
    numla_http_call_release(&ls.c);
    numla_http_backend_destroy(&b);
}

/* Pushes accumulate tokens and bytes (a character may be split across pushes); logprobs are
 * kept only when the request asked for them; the first push with tokens stamps t_first. */
static void test_push_accumulates(void)
{
    numla_http_call *c = call_of(NUMLA_OPENAI_COMPLETIONS,
                                 "{\"prompt\": [[1], [2]], \"logprobs\": 1}");
    numla_http_call *plain = call_of(NUMLA_OPENAI_COMPLETIONS, "{\"prompt\": [1]}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_PTR_NOT_NULL_FATAL(plain);
    numla_http_job *j = &c->jobs[0];
    const int32_t t1[2] = {10, 11}, t2[1] = {12};
    const numla_logprob_entry lp[2] = {{.token = 10, .logprob = -0.5f},
                                       {.token = 11, .logprob = -1.5f}};
    CU_ASSERT_EQUAL(numla_http_job_push(j, NULL, 0, "", 0, NULL), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(j->t_first, 0); /* no token yet */
    CU_ASSERT_EQUAL(numla_http_job_push(j, t1, 2, "ab\xc3", 3, lp), NUMLA_STATUS_OK);
    CU_ASSERT(j->t_first > 0);
    CU_ASSERT_EQUAL(numla_http_job_push(j, t2, 1, "\xa9!", 2, NULL), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(j->num_tokens, 3);
    CU_ASSERT_EQUAL(j->tokens[0], 10);
    CU_ASSERT_EQUAL(j->tokens[2], 12);
    CU_ASSERT_EQUAL(j->text.len, 5);
    CU_ASSERT_EQUAL(memcmp(j->text.p, "ab\xc3\xa9!", 5), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j->logprobs);
    CU_ASSERT_DOUBLE_EQUAL(j->logprobs[1].logprob, -1.5, 1e-6);
    /* no logprobs given for a request that wants them: the token with logprob 0 */
    CU_ASSERT_EQUAL(j->logprobs[2].token, 12);
    CU_ASSERT_DOUBLE_EQUAL(j->logprobs[2].logprob, 0.0, 1e-12);
    /* many pushes grow past any first capacity */
    for (int32_t i = 0; i < 1000; i++)
        CU_ASSERT_EQUAL(numla_http_job_push(&c->jobs[1], &i, 1, "x", 1, NULL), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(c->jobs[1].num_tokens, 1000);
    CU_ASSERT_EQUAL(c->jobs[1].tokens[999], 999);
    CU_ASSERT_EQUAL(c->jobs[1].text.len, 1000);

    CU_ASSERT_EQUAL(numla_http_job_push(&plain->jobs[0], t1, 2, "ab", 2, lp), NUMLA_STATUS_OK);
    CU_ASSERT_PTR_NULL(plain->jobs[0].logprobs);
    CU_ASSERT_EQUAL(numla_http_job_push(&plain->jobs[0], t1, -1, NULL, 0, NULL),
                    NUMLA_STATUS_INVALID_ARG);

    /* after finish, pushes change nothing */
    numla_http_job_finish(j, "length", 4, 3);
    CU_ASSERT_EQUAL(numla_http_job_push(j, t2, 1, "z", 1, NULL), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(j->num_tokens, 3);
    CU_ASSERT_EQUAL(j->text.len, 5);
    numla_http_call_release(&c);
    numla_http_call_release(&plain);
}

/* finish and fail: the first one counts; fail's status picks the error code; a matched stop
 * string makes the reason "stop"; a job released unfinished reads as a 500. */
static void test_finish_fail_release(void)
{
    numla_http_backend *b = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_http_backend_create(8, &b), NUMLA_STATUS_OK);
    numla_http_call *c = call_of(NUMLA_OPENAI_COMPLETIONS, "{\"prompt\": [[1],[2],[3],[4],[5]]}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    numla_openai_error err;
    CU_ASSERT_EQUAL(numla_http_backend_submit(b, c, &err), 0);
    numla_http_job *j[5];
    for (int i = 0; i < 5; i++) {
        j[i] = numla_http_backend_next(b, 0);
        CU_ASSERT_PTR_NOT_NULL_FATAL(j[i]);
    }

    numla_http_job_finish(j[0], "length", 7, 16);
    numla_http_job_fail(j[0], 500, "too late", NULL);
    CU_ASSERT_STRING_EQUAL(c->jobs[0].finish_reason, "length");
    CU_ASSERT_EQUAL(c->jobs[0].prompt_tokens, 7);
    CU_ASSERT_EQUAL(c->jobs[0].completion_tokens, 16);
    CU_ASSERT_EQUAL(c->jobs[0].error.status, 0);
    CU_ASSERT(c->jobs[0].t_finish > 0);

    numla_http_job_fail(j[1], 400, "the prompt is longer than the context", "prompt");
    numla_http_job_finish(j[1], "stop", 1, 1);
    CU_ASSERT_EQUAL(c->jobs[1].error.status, 400);
    CU_ASSERT_STRING_EQUAL(c->jobs[1].error.code, "invalid_value");
    CU_ASSERT_STRING_EQUAL(c->jobs[1].error.param, "prompt");
    CU_ASSERT_STRING_EQUAL(c->jobs[1].error.message, "the prompt is longer than the context");
    CU_ASSERT_STRING_EQUAL(c->jobs[1].finish_reason, "error");

    numla_http_job_fail(j[2], 200, NULL, NULL); /* not an error status: 500 */
    CU_ASSERT_EQUAL(c->jobs[2].error.status, 500);
    CU_ASSERT_STRING_EQUAL(c->jobs[2].error.code, "engine_error");
    CU_ASSERT_STRING_EQUAL(c->jobs[2].error.message, "the engine failed the request");

    CU_ASSERT_EQUAL(numla_http_job_cancelled(j[3]), 0);
    c->jobs[3].stop_hit = 1; /* the server matched a stop string */
    CU_ASSERT_EQUAL(numla_http_job_cancelled(j[3]), 1);
    numla_http_job_finish(j[3], "length", 1, 2);
    CU_ASSERT_STRING_EQUAL(c->jobs[3].finish_reason, "stop");

    numla_http_job_release(&j[4]); /* never finished */
    CU_ASSERT(c->jobs[4].released);
    CU_ASSERT_EQUAL(c->jobs[4].error.status, 500);
    CU_ASSERT_STRING_EQUAL(c->jobs[4].error.message, "the engine dropped the request");

    numla_http_call_cancel(c);
    CU_ASSERT_EQUAL(numla_http_job_cancelled(j[0]), 1);
    for (int i = 0; i < 4; i++)
        numla_http_job_release(&j[i]);
    numla_http_call_release(&c);
    numla_http_backend_destroy(&b);
}

/* close fails what is queued and every later submission with 503 and the reason; jobs
 * already taken stay the loop's; next no longer waits. */
static void test_close(void)
{
    numla_http_backend *b = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_http_backend_create(8, &b), NUMLA_STATUS_OK);
    numla_http_call *c = call_of(NUMLA_OPENAI_COMPLETIONS, "{\"prompt\": [[1], [2]]}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    numla_openai_error err = {0};
    CU_ASSERT_EQUAL(numla_http_backend_submit(b, c, &err), 0);
    numla_http_job *taken = numla_http_backend_next(b, 0);
    numla_http_backend_close(b, "rank 1 died");
    CU_ASSERT_EQUAL(numla_http_backend_waiting(b), 0);
    CU_ASSERT_EQUAL(c->jobs[1].error.status, 503);
    CU_ASSERT_STRING_EQUAL(c->jobs[1].error.message, "rank 1 died");
    CU_ASSERT(c->jobs[1].released);
    CU_ASSERT_FALSE(c->jobs[0].finished); /* taken before the close: the loop's */

    numla_http_call *late = call_of(NUMLA_OPENAI_COMPLETIONS, "{\"prompt\": [3]}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(late);
    CU_ASSERT_EQUAL(numla_http_backend_submit(b, late, &err), 503);
    CU_ASSERT_EQUAL(err.status, 503);
    CU_ASSERT_STRING_EQUAL(err.message, "rank 1 died");
    double t0 = numla_now_s();
    CU_ASSERT_PTR_NULL(numla_http_backend_next(b, 5000));
    CU_ASSERT(numla_now_s() - t0 < 2.5);

    numla_http_job_finish(taken, "stop", 1, 0);
    numla_http_job_release(&taken);
    numla_http_call_release(&late);
    numla_http_call_release(&c);
    numla_http_backend_destroy(&b);
}

NUMLA_TEST_SUITE(http_backend, NULL, NULL, NUMLA_TEST(test_create_rejects_empty_queue),
                 NUMLA_TEST(test_fifo_and_bounded_queue), NUMLA_TEST(test_next_waits),
                 NUMLA_TEST(test_push_accumulates), NUMLA_TEST(test_finish_fail_release),
                 NUMLA_TEST(test_close))
