/* Tests for engine/http/serving_adapter.c, the HTTP jobs as the serving loop's source and sink,
 * driven by hand (no loop, no model): token-id prompts become requests in queue order with the
 * body's parameters; text prompts are encoded with BOS and chat messages rendered (DeepSeek-V3
 * template) and encoded without a second BOS; prompts that do not fit the context, text
 * without a tokenizer and chat without a template fail their job with 400 naming the field; a
 * job whose client left is finished unseen; the sink pushes tokens and the text tail and
 * finishes, or fails (500 for an engine step, 400 otherwise, without the loop's "line N: ");
 * destroy fails what it holds with 503. */
#include "test_util.h"

#include "common/clock.h"
#include "engine/http/serving_adapter.h"

#include <stdlib.h>
#include <string.h>

typedef struct adapter_fixture {
    numla_http_backend *b;
    numla_http_adapter *g;
    numla_serve_source src;
    numla_serve_sink sink;
} adapter_fixture;

static int fixture_open(adapter_fixture *f, int64_t max_context, numla_tokenizer *tok,
                        const numla_chat_template *chat, int32_t wait_ms)
{
    memset(f, 0, sizeof *f);
    CU_ASSERT_EQUAL_FATAL(numla_http_backend_create(16, &f->b), NUMLA_STATUS_OK);
    numla_http_adapter_options o = {.backend = f->b, .tokenizer = tok, .chat = chat,
                                 .max_context = max_context, .wait_ms = wait_ms};
    CU_ASSERT_EQUAL_FATAL(numla_http_adapter_create(&o, &f->g), NUMLA_STATUS_OK);
    f->src = numla_http_adapter_source(f->g);
    f->sink = numla_http_adapter_sink(f->g);
    return 1;
}

static void fixture_close(adapter_fixture *f)
{
    numla_http_adapter_destroy(&f->g);
    CU_ASSERT_PTR_NULL(f->g);
    numla_http_backend_destroy(&f->b);
}

/* Parse body for ep, make it a call and queue it. */
static numla_http_call *submit(adapter_fixture *f, numla_openai_endpoint ep, const char *body)
{
    numla_openai_request req;
    numla_openai_error err;
    const numla_openai_limits lim = {0};
    CU_ASSERT_EQUAL_FATAL(numla_openai_parse(ep, body, strlen(body), &lim, &req, &err),
                          NUMLA_STATUS_OK);
    NUMLA_ASSERT_MSG(err.status == 0, "body %s: %s", body, err.message);
    CU_ASSERT_FATAL(err.status == 0);
    numla_http_call *c = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_http_call_create(&req, &c), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_http_backend_submit(f->b, c, &err), 0);
    return c;
}

/* One pull: the request (caller frees with numla_request_free) and its user pointer. */
static numla_serve_pull pull(adapter_fixture *f, numla_request *req, void **user)
{
    memset(req, 0, sizeof *req);
    *user = NULL;
    numla_serve_pull what = (numla_serve_pull)-1;
    CU_ASSERT_EQUAL(f->src.next(f->src.ctx, req, user, &what), NUMLA_STATUS_OK);
    return what;
}

static int tokens_are(const numla_request *r, const int32_t *want, int32_t n)
{
    return r->num_prompt == n && r->prompt_tokens &&
           !memcmp(r->prompt_tokens, want, (size_t)n * sizeof *want);
}

/* The sink's done for a request with this outcome. */
static void done(adapter_fixture *f, void *user, const numla_request *req, const char *finish,
                 const char *error, int32_t num_output, const char *tail, int cancelled)
{
    numla_serve_done d = {.result = {.req = req, .num_output = num_output,
                                     .finish_reason = finish, .error = error},
                          .text_tail = tail, .text_tail_len = tail ? strlen(tail) : 0,
                          .cancelled = cancelled};
    CU_ASSERT_EQUAL(f->sink.done(f->sink.ctx, user, &d), NUMLA_STATUS_OK);
}

static void test_token_prompts_in_order(void)
{
    adapter_fixture f;
    fixture_open(&f, 64, NULL, NULL, 0);
    numla_http_call *c = submit(&f, NUMLA_OPENAI_COMPLETIONS,
                                "{\"prompt\": [[1, 2, 3], [4, 5]], \"max_tokens\": 5, "
                                "\"temperature\": 0}");
    numla_request r[2];
    void *user[2];
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_EQUAL(pull(&f, &r[i], &user[i]), NUMLA_SERVE_PULL_REQUEST);
        CU_ASSERT_PTR_EQUAL(user[i], &c->jobs[i]);
        CU_ASSERT_EQUAL(r[i].line, i + 1);
        CU_ASSERT_EQUAL(r[i].params.max_tokens, 5);
        CU_ASSERT_EQUAL(r[i].text_output, 0); /* no tokenizer */
        CU_ASSERT_EQUAL(r[i].num_stop_strings, 0);
    }
    const int32_t p0[] = {1, 2, 3}, p1[] = {4, 5};
    CU_ASSERT(tokens_are(&r[0], p0, 3));
    CU_ASSERT(tokens_are(&r[1], p1, 2));
    CU_ASSERT_EQUAL(numla_http_adapter_held(f.g), 2);
    numla_request none;
    void *u;
    CU_ASSERT_EQUAL(pull(&f, &none, &u), NUMLA_SERVE_PULL_NONE);
    numla_http_adapter_end(f.g);
    CU_ASSERT_EQUAL(pull(&f, &none, &u), NUMLA_SERVE_PULL_END);

    /* tokens go to the job; done finishes it with the loop's counts and lets it go */
    const numla_logprob_entry lp = {.token = 9, .logprob = -0.25f};
    numla_serve_token t = {.token = 9, .index = 0, .logprob = &lp, .text = "ab", .text_len = 2};
    f.sink.token(f.sink.ctx, user[0], &t);
    t.token = 8;
    t.text = NULL;
    t.text_len = 0;
    f.sink.token(f.sink.ctx, user[0], &t);
    CU_ASSERT_EQUAL(c->jobs[0].num_tokens, 2);
    CU_ASSERT_EQUAL(c->jobs[0].tokens[1], 8);
    done(&f, user[0], &r[0], "length", NULL, 2, "cd", 0);
    CU_ASSERT_EQUAL(c->jobs[0].text.len, 4);
    CU_ASSERT_EQUAL(memcmp(c->jobs[0].text.p, "abcd", 4), 0);
    CU_ASSERT_STRING_EQUAL(c->jobs[0].finish_reason, "length");
    CU_ASSERT_EQUAL(c->jobs[0].prompt_tokens, 3);
    CU_ASSERT_EQUAL(c->jobs[0].completion_tokens, 2);
    CU_ASSERT(c->jobs[0].released);
    CU_ASSERT_EQUAL(numla_http_adapter_held(f.g), 1);
    /* cancelled by the loop (client gone or stop string): answered as "stop" */
    done(&f, user[1], &r[1], "cancelled", NULL, 0, NULL, 1);
    CU_ASSERT_STRING_EQUAL(c->jobs[1].finish_reason, "stop");
    CU_ASSERT(c->jobs[1].released);
    CU_ASSERT_EQUAL(numla_http_adapter_held(f.g), 0);
    numla_http_adapter_poll(f.g); /* no loop set: nothing to do */
    for (int i = 0; i < 2; i++)
        numla_request_free(&r[i]);
    numla_http_call_release(&c);
    fixture_close(&f);
}

/* The loop's failures: an engine step is a 500, anything else (the request cannot be served)
 * a 400; the client's message loses the loop's "line N: " prefix. */
static void test_failures_from_the_loop(void)
{
    adapter_fixture f;
    fixture_open(&f, 0, NULL, NULL, 0);
    numla_http_call *c = submit(&f, NUMLA_OPENAI_COMPLETIONS, "{\"prompt\": [[1], [2]]}");
    numla_request r[2];
    void *user[2];
    for (int i = 0; i < 2; i++)
        CU_ASSERT_EQUAL(pull(&f, &r[i], &user[i]), NUMLA_SERVE_PULL_REQUEST);
    CU_ASSERT_EQUAL(r[0].params.max_tokens, 16); /* the API's default; no context to fill */
    done(&f, user[0], &r[0], "error", "line 1: engine step failed: rank 1 died", 0, NULL, 0);
    CU_ASSERT_EQUAL(c->jobs[0].error.status, 500);
    CU_ASSERT_STRING_EQUAL(c->jobs[0].error.message, "engine step failed: rank 1 died");
    done(&f, user[1], &r[1], "error", "line 2: needs 40 KV blocks, the pool has 32", 0, NULL, 0);
    CU_ASSERT_EQUAL(c->jobs[1].error.status, 400);
    CU_ASSERT_STRING_EQUAL(c->jobs[1].error.message, "needs 40 KV blocks, the pool has 32");
    CU_ASSERT(c->jobs[0].released && c->jobs[1].released);
    for (int i = 0; i < 2; i++)
        numla_request_free(&r[i]);
    numla_http_call_release(&c);
    fixture_close(&f);
}

/* Jobs the loop cannot take are failed with 400 naming the field and never reach the loop;
 * the pull goes on to the next job. */
static void test_refusals(void)
{
    adapter_fixture f;
    fixture_open(&f, 8, NULL, NULL, 0);
    numla_http_call *full = submit(&f, NUMLA_OPENAI_COMPLETIONS,
                                   "{\"prompt\": [1, 2, 3, 4, 5, 6, 7, 8]}");
    numla_http_call *over = submit(&f, NUMLA_OPENAI_COMPLETIONS,
                                   "{\"prompt\": [1, 2, 3, 4], \"max_tokens\": 5}");
    numla_http_call *text = submit(&f, NUMLA_OPENAI_COMPLETIONS, "{\"prompt\": \"hello\"}");
    numla_http_call *chat = submit(&f, NUMLA_OPENAI_CHAT,
                                   "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}");
    numla_http_call *fits = submit(&f, NUMLA_OPENAI_COMPLETIONS,
                                   "{\"prompt\": [1, 2, 3, 4], \"max_tokens\": 4}");
    numla_request r;
    void *user;
    CU_ASSERT_EQUAL(pull(&f, &r, &user), NUMLA_SERVE_PULL_REQUEST);
    CU_ASSERT_PTR_EQUAL(user, &fits->jobs[0]); /* the four before it were refused */
    CU_ASSERT_EQUAL(r.line, 5);

    const struct {
        numla_http_call *c;
        const char *param, *says;
    } want[] = {
        {full, "prompt", "the prompt (8 tokens) leaves no room to generate: it fills or exceeds the context of 8"},
        {over, "max_tokens", "'max_tokens' (5) + the prompt (4 tokens) exceeds the context of 8"},
        {text, "prompt", "this model has no tokenizer.json: send the prompt as token ids"},
        {chat, "messages", "this model has no tokenizer.json; chat completions are not served"},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        const numla_http_job *j = &want[i].c->jobs[0];
        CU_ASSERT_EQUAL(j->error.status, 400);
        CU_ASSERT(j->released);
        NUMLA_ASSERT_MSG(!strcmp(j->error.param, want[i].param), "case %zu: param '%s'", i,
                         j->error.param);
        NUMLA_ASSERT_MSG(strstr(j->error.message, want[i].says) != NULL,
                         "case %zu: message '%s'", i, j->error.message);
    }
    CU_ASSERT_EQUAL(numla_http_adapter_held(f.g), 1);
    done(&f, user, &r, "stop", NULL, 1, NULL, 0);
    numla_request_free(&r);
    numla_http_call *calls[] = {full, over, text, chat, fits};
    for (int i = 0; i < 5; i++)
        numla_http_call_release(&calls[i]);
    fixture_close(&f);
}

/* A client that left while its job waited: the job is finished without reaching the loop. */
static void test_cancelled_while_queued(void)
{
    adapter_fixture f;
    fixture_open(&f, 0, NULL, NULL, 0);
    numla_http_call *c = submit(&f, NUMLA_OPENAI_COMPLETIONS, "{\"prompt\": [3]}");
    numla_http_call_cancel(c);
    numla_request r;
    void *user;
    CU_ASSERT_EQUAL(pull(&f, &r, &user), NUMLA_SERVE_PULL_NONE);
    CU_ASSERT(c->jobs[0].finished && c->jobs[0].released);
    CU_ASSERT_STRING_EQUAL(c->jobs[0].finish_reason, "stop");
    CU_ASSERT_EQUAL(c->jobs[0].error.status, 0);
    CU_ASSERT_EQUAL(numla_http_adapter_held(f.g), 0);
    numla_http_call_release(&c);
    fixture_close(&f);
}

/* wait blocks up to wait_ms on an empty queue and keeps a job it finds for the next pull;
 * destroy fails the jobs it holds with 503. */
static void test_wait_and_destroy(void)
{
    adapter_fixture f;
    fixture_open(&f, 0, NULL, NULL, 30);
    double t0 = numla_now_s();
    f.src.wait(f.src.ctx);
    double waited = numla_now_s() - t0;
    NUMLA_ASSERT_MSG(waited >= 0.025 && waited < 5, "an idle 30 ms wait took %.3f s", waited);
    numla_http_call *c = submit(&f, NUMLA_OPENAI_COMPLETIONS, "{\"prompt\": [[1], [2]]}");
    f.src.wait(f.src.ctx); /* takes job 0 from the queue and keeps it */
    CU_ASSERT_EQUAL(numla_http_backend_waiting(f.b), 1);
    numla_request r;
    void *user;
    CU_ASSERT_EQUAL(pull(&f, &r, &user), NUMLA_SERVE_PULL_REQUEST);
    CU_ASSERT_PTR_EQUAL(user, &c->jobs[0]);
    numla_request_free(&r);
    f.src.wait(f.src.ctx); /* job 1 kept, not yet handed over */
    numla_http_adapter_destroy(&f.g);
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_EQUAL(c->jobs[i].error.status, 503);
        CU_ASSERT(c->jobs[i].released);
    }
    NUMLA_ASSERT_MSG(strstr(c->jobs[0].error.message, "before the request finished") != NULL,
                     "message: %s", c->jobs[0].error.message);
    numla_http_call_release(&c);
    fixture_close(&f);
}

/* With a tokenizer and a chat template: a text prompt is encoded with BOS; chat messages are
 * rendered (the text holds BOS) and encoded without adding another; without max_tokens, a chat
 * request gets what the context leaves. */
static void test_text_and_chat_prompts(void)
{
    const char *dir = numla_test_source_path("tests/golden/tokenizer/bpe1k");
    numla_tokenizer *tok = NULL;
    numla_chat_template *chat = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_tokenizer_load(dir, &tok), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_chat_template_load_json(NULL, "deepseek-v3", &chat),
                          NUMLA_STATUS_OK);
    adapter_fixture f;
    fixture_open(&f, 64, tok, chat, 0);
    numla_http_call *ct = submit(&f, NUMLA_OPENAI_COMPLETIONS,
                                 "{\"prompt\": \"hello world\", \"max_tokens\": 3}");
    numla_http_call *cc = submit(&f, NUMLA_OPENAI_CHAT,
                                 "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}");
    static const char text[] = "hello world";
    static const char rendered[] = "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜>";
    int32_t *want_t = NULL, *want_c = NULL;
    int64_t nt = 0, nc = 0;
    CU_ASSERT_EQUAL_FATAL(numla_tokenizer_encode(tok, text, strlen(text), 1, &want_t, &nt),
                          NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_tokenizer_encode(tok, rendered, strlen(rendered), 0, &want_c,
                                                 &nc), NUMLA_STATUS_OK);
    numla_request r[2];
    void *user[2];
    for (int i = 0; i < 2; i++)
        CU_ASSERT_EQUAL(pull(&f, &r[i], &user[i]), NUMLA_SERVE_PULL_REQUEST);
    CU_ASSERT_PTR_EQUAL(user[0], &ct->jobs[0]);
    CU_ASSERT(tokens_are(&r[0], want_t, (int32_t)nt));
    CU_ASSERT_EQUAL(r[0].text_output, 1);
    CU_ASSERT_EQUAL(r[0].params.max_tokens, 3);
    CU_ASSERT_PTR_EQUAL(user[1], &cc->jobs[0]);
    NUMLA_ASSERT_MSG(tokens_are(&r[1], want_c, (int32_t)nc),
                     "chat prompt: %d tokens, want %lld", r[1].num_prompt, (long long)nc);
    if (r[1].num_prompt > 1 && r[0].num_prompt > 0)
        CU_ASSERT_NOT_EQUAL(r[1].prompt_tokens[1], r[0].prompt_tokens[0]); /* one BOS */
    CU_ASSERT_EQUAL(r[1].params.max_tokens, 64 - (int32_t)nc);
    for (int i = 0; i < 2; i++) {
        done(&f, user[i], &r[i], "stop", NULL, 0, NULL, 0);
        numla_request_free(&r[i]);
    }
    free(want_t);
    free(want_c);
    numla_http_call_release(&ct);
    numla_http_call_release(&cc);
    fixture_close(&f);
    numla_chat_template_destroy(&chat);
    numla_tokenizer_destroy(&tok);
}

NUMLA_TEST_SUITE(http_serving_adapter, NULL, NULL, NUMLA_TEST(test_token_prompts_in_order),
                 NUMLA_TEST(test_failures_from_the_loop), NUMLA_TEST(test_refusals),
                 NUMLA_TEST(test_cancelled_while_queued), NUMLA_TEST(test_wait_and_destroy),
                 NUMLA_TEST(test_text_and_chat_prompts))
