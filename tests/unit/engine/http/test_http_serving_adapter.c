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
#include "engine/http/reasoning.h"
#include "engine/http/responses.h"
#include "engine/http/serving_adapter.h"

#include <jansson.h>
#include <stdio.h>

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
        {full, "prompt",
         "the prompt (8 tokens) leaves no room to generate: it fills or exceeds the context of 8"},
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

/* A chat body's outcome through the adapter: the job's refusal (status, param) or, when it
 * reached the loop, its prompt tokens and reasoning mode. */
typedef struct chat_outcome {
    int parse_status, status;
    char param[96];
    numla_openai_error err; /* the 400, parse's or the adapter's */
    numla_request r;
    int reasoning_mode;
} chat_outcome;

/* body to endpoint (chat or Responses) through the parser and the adapter. */
static void run_body(adapter_fixture *f, numla_openai_endpoint endpoint, const char *body,
                     chat_outcome *o)
{
    memset(o, 0, sizeof *o);
    numla_openai_request req;
    numla_openai_error err;
    const numla_openai_limits lim = {0};
    CU_ASSERT_EQUAL_FATAL(numla_openai_parse(endpoint, body, strlen(body), &lim, &req, &err),
                          NUMLA_STATUS_OK);
    if (err.status) {
        o->parse_status = err.status;
        o->err = err;
        snprintf(o->param, sizeof o->param, "%s", err.param);
        return;
    }
    numla_http_call *c = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_http_call_create(&req, &c), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_http_backend_submit(f->b, c, &err), 0);
    void *user;
    if (pull(f, &o->r, &user) == NUMLA_SERVE_PULL_REQUEST) {
        CU_ASSERT_PTR_EQUAL(user, &c->jobs[0]);
        o->reasoning_mode = c->jobs[0].reasoning_mode;
        done(f, user, &o->r, "stop", NULL, 0, NULL, 0);
    } else {
        o->status = c->jobs[0].error.status;
        o->err = c->jobs[0].error;
        snprintf(o->param, sizeof o->param, "%s", c->jobs[0].error.param);
        CU_ASSERT(c->jobs[0].released);
    }
    numla_http_call_release(&c);
}

static void run_chat(adapter_fixture *f, const char *body, chat_outcome *o)
{
    run_body(f, NUMLA_OPENAI_CHAT, body, o);
}

/* r's prompt is v4's rendering of one user message "a" with the given thinking and effort, and
 * the effort paragraph is there exactly when `paragraph` says. */
static void expect_effort_prompt(const numla_chat_template *v4, numla_tokenizer *tok,
                                 const numla_request *r, int thinking, const char *effort,
                                 int paragraph)
{
    numla_chat_message m = {.role = "user", .content = "a"};
    numla_chat_options opts = {.add_generation_prompt = 1, .thinking = thinking,
                               .thinking_given = 1, .reasoning_effort = effort};
    char *text = NULL;
    size_t len = 0;
    int32_t *want = NULL;
    int64_t n = 0;
    CU_ASSERT_EQUAL_FATAL(numla_chat_template_render_opts(v4, &m, 1, &opts, &text, &len),
                          NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL((strstr(text, "Reasoning Effort: Absolute maximum") != NULL), paragraph);
    CU_ASSERT_EQUAL_FATAL(numla_tokenizer_encode(tok, text, len, 0, &want, &n), NUMLA_STATUS_OK);
    NUMLA_ASSERT_MSG(tokens_are(r, want, (int32_t)n),
                     "effort %s (thinking %d): the prompt is not the rendering with that effort",
                     effort ? effort : "none", thinking);
    free(text);
    free(want);
}


static json_t *load_kimi_golden(const char *file)
{
    char rel[256];
    snprintf(rel, sizeof rel, "tests/golden/chat_kimi/%s", file);
    json_error_t je;
    json_t *j = json_load_file(numla_test_source_path(rel), 0, &je);
    NUMLA_ASSERT_MSG(j != NULL, "%s: %s", rel, je.text);
    return j;
}

/* The golden conversations of tests/golden/chat_kimi (tools, tool calls and results, names,
 * reasoning_content) sent as chat bodies: the adapter's prompt is the golden render's tokens
 * (add_generation_prompt, V3.1's thinking switch from chat_template_kwargs), and what a
 * template cannot render is a 400 naming the field. */
static void test_chat_golden_tools(void)
{
    const char *dir = numla_test_source_path("tests/golden/tokenizer/bpe1k");
    numla_tokenizer *tok = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_tokenizer_load(dir, &tok), NUMLA_STATUS_OK);
    json_t *templates = load_kimi_golden("templates.json"), *cases = load_kimi_golden("cases.json");
    CU_ASSERT_FATAL(templates && cases);
    json_t *convs = json_object_get(cases, "conversations"), *rd;
    size_t i;
    int matched = 0, matched_tools = 0, refused = 0, thinking_open = 0;
    json_array_foreach(json_object_get(cases, "renders"), i, rd) {
        const char *name = json_string_value(json_object_get(rd, "template"));
        const int v31 = !strcmp(name, "deepseek-v3.1"), k2 = !strcmp(name, "kimi-k2");
        const int thinking = json_is_true(json_object_get(rd, "thinking"));
        if (!json_is_true(json_object_get(rd, "add_generation_prompt")) || (!v31 && thinking))
            continue; /* the server always adds the generation prompt; only V3.1 switches */
        json_t *conv = json_array_get(convs, (size_t)json_integer_value(
                                                 json_object_get(rd, "conversation")));
        json_t *tools = json_object_get(conv, "tools"), *msgs = json_object_get(conv, "messages");
        json_t *body = json_pack("{s:O}", "messages", msgs);
        if (tools && !v31) /* V3.1's template ignores tools: the calls are tested without */
            json_object_set(body, "tools", tools);
        if (v31)
            json_object_set_new(body, "chat_template_kwargs",
                                json_pack("{s:b}", "thinking", thinking));
        char *text = json_dumps(body, JSON_COMPACT);
        json_decref(body);
        /* what is expected of this pair */
        char want_param[64] = "";
        size_t k;
        json_t *m;
        json_array_foreach(msgs, k, m) {
            const char *role = json_string_value(json_object_get(m, "role"));
            if (!want_param[0] && strcmp(role, "system") && strcmp(role, "user") &&
                strcmp(role, "assistant") && strcmp(role, "tool"))
                snprintf(want_param, sizeof want_param, "messages[%zu].role", k);
        }
        json_array_foreach(msgs, k, m) {
            /* the API's assistant content is null only next to tool_calls */
            json_t *calls = json_object_get(m, "tool_calls");
            if (!want_param[0] && json_is_null(json_object_get(m, "content")) &&
                json_array_size(calls) == 0)
                snprintf(want_param, sizeof want_param, "messages[%zu].content", k);
            if (!want_param[0] && k2 && calls)
                snprintf(want_param, sizeof want_param, "messages[%zu].tool_calls", k);
        }
        json_t *tj = json_object_get(templates, name);
        json_t *cfg = json_pack("{s:O, s:O, s:O}", "bos_token", json_object_get(tj, "bos_token"),
                                "eos_token", json_object_get(tj, "eos_token"), "chat_template",
                                json_object_get(tj, "template"));
        char *cfg_text = json_dumps(cfg, 0);
        json_decref(cfg);
        numla_chat_template *chat = NULL;
        CU_ASSERT_EQUAL_FATAL(numla_chat_template_load_json(cfg_text, NULL, &chat),
                              NUMLA_STATUS_OK);
        free(cfg_text);
        adapter_fixture f;
        fixture_open(&f, 1 << 20, tok, chat, 0);
        chat_outcome o;
        run_chat(&f, text, &o);
        if (want_param[0]) {
            NUMLA_ASSERT_MSG((o.parse_status == 400 || o.status == 400) &&
                                 !strcmp(o.param, want_param),
                             "%s render %zu: status %d/%d param '%s', want 400 '%s'", name, i,
                             o.parse_status, o.status, o.param, want_param);
            refused++;
        } else {
            const char *g = json_string_value(json_object_get(rd, "text"));
            int32_t *want = NULL;
            int64_t n = 0;
            CU_ASSERT_EQUAL_FATAL(numla_tokenizer_encode(tok, g, strlen(g), 0, &want, &n),
                                  NUMLA_STATUS_OK);
            const int same = o.status == 0 && o.parse_status == 0 &&
                             tokens_are(&o.r, want, (int32_t)n);
            NUMLA_ASSERT_MSG(same, "%s render %zu (%s): status %d/%d param '%s', %d tokens, want "
                             "%lld", name, i, text, o.parse_status, o.status, o.param,
                             o.r.num_prompt, (long long)n);
            matched += same;
            matched_tools += same && (strstr(text, "\"tools\"") || strstr(text, "tool_calls"));
            /* V3.1 thinking opens the reasoning at once; the Kimi-K2-Thinking model opens it */
            const size_t gl = strlen(g);
            const int opened = gl >= 7 && !strcmp(g + gl - 7, "<think>");
            const int mode = v31 ? (opened ? NUMLA_HTTP_REASONING_OPEN
                                           : NUMLA_HTTP_REASONING_DETECT)
                             : k2 ? NUMLA_HTTP_REASONING_OFF : NUMLA_HTTP_REASONING_DETECT;
            NUMLA_ASSERT_MSG(o.reasoning_mode == mode, "%s render %zu: reasoning mode %d, want %d",
                             name, i, o.reasoning_mode, mode);
            thinking_open += o.reasoning_mode == NUMLA_HTTP_REASONING_OPEN;
            NUMLA_ASSERT_MSG(!v31 || !thinking || opened || json_array_size(msgs) == 0 ||
                                 strcmp(json_string_value(json_object_get(
                                            json_array_get(msgs, json_array_size(msgs) - 1),
                                            "role")), "user"),
                             "V3.1 render %zu: thinking after a user turn must open <think>", i);
            free(want);
        }
        numla_request_free(&o.r);
        free(text);
        fixture_close(&f);
        numla_chat_template_destroy(&chat);
    }
    /* 16 Kimi-K2 + 16 Kimi-K2-Thinking + 2 x 14 V3.1 generation-prompt renders, less refusals */
    NUMLA_ASSERT_MSG(matched >= 40 && matched_tools >= 12 && refused >= 8 && thinking_open >= 6,
                     "matched %d (with tools %d), refused %d, thinking %d", matched,
                     matched_tools, refused, thinking_open);
    json_decref(templates);
    json_decref(cases);
    numla_tokenizer_destroy(&tok);
}

/* The older DeepSeek templates render no tools, tool calls, tool messages or thinking switch:
 * a request with one is a 400 naming the field and the template, never a silent drop. */
static void test_chat_refused_by_template(void)
{
    const char *dir = numla_test_source_path("tests/golden/tokenizer/bpe1k");
    numla_tokenizer *tok = NULL;
    numla_chat_template *v3 = NULL, *v31 = NULL, *k2t = NULL, *v4 = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_tokenizer_load(dir, &tok), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_chat_template_load_builtin("deepseek-v4", &v4), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_chat_template_load_json(NULL, "deepseek-v3", &v3), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_chat_template_load_json(NULL, "deepseek-v3.1", &v31),
                          NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_chat_template_load_json(NULL, "kimi-k2-thinking", &k2t),
                          NUMLA_STATUS_OK);
#define U "{\"role\": \"user\", \"content\": \"a\"}"
    const struct {
        numla_chat_template *t;
        const char *body, *param, *says;
    } cases[] = {
        {v3, "{\"messages\": [" U "], \"tools\": [{\"type\": \"function\", \"function\": "
             "{\"name\": \"f\"}}]}", "tools", "deepseek-v3 chat template does not declare tools"},
        {v31, "{\"messages\": [" U "], \"tools\": [{\"type\": \"function\", \"function\": "
              "{\"name\": \"f\"}}]}", "tools", "deepseek-v3.1 chat template does not declare tools"},
        {v3, "{\"messages\": [" U ", {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": "
             "[{\"function\": {\"name\": \"f\", \"arguments\": \"{}\"}}]}]}",
         "messages[1].tool_calls", "deepseek-v3 chat template does not write tool calls"},
        {v3, "{\"messages\": [" U ", {\"role\": \"tool\", \"content\": \"x\"}]}", "messages[1].role",
         "deepseek-v3 chat template does not write tool messages"},
        {v3, "{\"messages\": [" U "], \"chat_template_kwargs\": {\"thinking\": true}}",
         "chat_template_kwargs.thinking", "deepseek-v3 chat template has no thinking mode"},
        {k2t, "{\"messages\": [" U "], \"chat_template_kwargs\": {\"enable_thinking\": false}}",
         "chat_template_kwargs.thinking", "kimi-k2-thinking chat template always thinks"},
        {k2t, "{\"messages\": [" U "], \"reasoning_effort\": \"high\"}", "reasoning_effort",
         "kimi-k2-thinking chat template has no reasoning effort"},
        {v4, "{\"messages\": [" U "], \"reasoning_effort\": \"low\"}", "reasoning_effort",
         "\"low\" is not one this model's deepseek-v4 chat template knows (\"high\" or \"max\")"},
        {v4, "{\"messages\": [" U "], \"reasoning_effort\": \"xhigh\"}", "reasoning_effort",
         "\"xhigh\" is not one"},
    };
#undef U
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        adapter_fixture f;
        fixture_open(&f, 4096, tok, cases[i].t, 0);
        numla_openai_request req;
        numla_openai_error err;
        const numla_openai_limits lim = {0};
        CU_ASSERT_EQUAL_FATAL(numla_openai_parse(NUMLA_OPENAI_CHAT, cases[i].body,
                                                 strlen(cases[i].body), &lim, &req, &err),
                              NUMLA_STATUS_OK);
        NUMLA_ASSERT_MSG(err.status == 0, "case %zu parse: %s", i, err.message);
        if (err.status) {
            fixture_close(&f);
            continue;
        }
        numla_http_call *c = NULL;
        CU_ASSERT_EQUAL_FATAL(numla_http_call_create(&req, &c), NUMLA_STATUS_OK);
        CU_ASSERT_EQUAL_FATAL(numla_http_backend_submit(f.b, c, &err), 0);
        numla_request r;
        void *user;
        CU_ASSERT_EQUAL(pull(&f, &r, &user), NUMLA_SERVE_PULL_NONE);
        const numla_http_job *j = &c->jobs[0];
        NUMLA_ASSERT_MSG(j->error.status == 400 && !strcmp(j->error.param, cases[i].param) &&
                             strstr(j->error.message, cases[i].says),
                         "case %zu: %d '%s' '%s'", i, j->error.status, j->error.param,
                         j->error.message);
        numla_http_call_release(&c);
        fixture_close(&f);
    }
    /* kimi-k2-thinking with thinking true (it always thinks) is served */
    adapter_fixture f;
    fixture_open(&f, 4096, tok, k2t, 0);
    chat_outcome o;
    run_chat(&f, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], "
                 "\"chat_template_kwargs\": {\"thinking\": true}}", &o);
    CU_ASSERT(o.status == 0 && o.parse_status == 0 && o.r.num_prompt > 0);
    CU_ASSERT_EQUAL(o.reasoning_mode, NUMLA_HTTP_REASONING_DETECT);
    numla_request_free(&o.r);
    fixture_close(&f);
    numla_chat_template_destroy(&v3);
    numla_chat_template_destroy(&v31);
    numla_chat_template_destroy(&k2t);
    numla_chat_template_destroy(&v4);
    numla_tokenizer_destroy(&tok);
}

/* GLM-5, DeepSeek-V3.2 and DeepSeek-V4 write tools, tool calls and tool messages and have a
 * thinking switch: such requests are served, rendered as the template renders them
 * (thinking_given reaches glm-5: enable_thinking false closes its think block), and a GLM-5
 * request stops at both of its end-of-turn tokens, <|user|> and <|observation|>. DeepSeek-V4
 * thinks when the request does not say: its reasoning is split off from the first token. */
static void test_chat_glm5_and_v32(void)
{
    const char *dir = numla_test_source_path("tests/golden/tokenizer/bpe2k_glm5");
    numla_tokenizer *tok = NULL;
    numla_chat_template *glm = NULL, *v32 = NULL, *v4 = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_tokenizer_load(dir, &tok), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_chat_template_load_builtin("glm-5", &glm), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_chat_template_load_builtin("deepseek-v3.2", &v32),
                          NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_chat_template_load_builtin("deepseek-v4", &v4),
                          NUMLA_STATUS_OK);
    const char *body =
        "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": "
        "\"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": \"c1\", \"function\": "
        "{\"name\": \"f\", \"arguments\": \"{}\"}}]}, {\"role\": \"tool\", "
        "\"tool_call_id\": \"c1\", \"content\": \"x\"}], \"tools\": [{\"type\": "
        "\"function\", \"function\": {\"name\": \"f\"}}], \"chat_template_kwargs\": "
        "{\"enable_thinking\": false}}";
    numla_chat_template *ts[3] = {glm, v32, v4};
    for (int i = 0; i < 3; i++) {
        adapter_fixture f;
        fixture_open(&f, 4096, tok, ts[i], 0);
        chat_outcome o;
        run_chat(&f, body, &o);
        NUMLA_ASSERT_MSG(o.status == 0 && o.parse_status == 0 && o.r.num_prompt > 0,
                         "%s: status %d/%d param '%s'", numla_chat_template_name(ts[i]),
                         o.parse_status, o.status, o.param);
        /* the prompt is the template's rendering with the request's options */
        numla_chat_message m[3] = {
            {.role = "user", .content = "a"},
            {.role = "assistant", .content = "", .has_tool_calls = 1, .num_tool_calls = 1,
             .tool_calls = &(numla_chat_tool_call){.id = "c1", .name = "f", .arguments = "{}"}},
            {.role = "tool", .content = "x", .tool_call_id = "c1"},
        };
        numla_chat_options opts = {.add_generation_prompt = 1, .thinking = 0,
                                   .thinking_given = 1,
                                   .tools_json = "[{\"type\": \"function\", \"function\": "
                                                 "{\"name\": \"f\"}}]"};
        char *text = NULL;
        size_t len = 0;
        CU_ASSERT_EQUAL_FATAL(numla_chat_template_render_opts(ts[i], m, 3, &opts, &text, &len),
                              NUMLA_STATUS_OK);
        int32_t *want = NULL;
        int64_t n = 0;
        CU_ASSERT_EQUAL_FATAL(numla_tokenizer_encode(tok, text, len, 0, &want, &n),
                              NUMLA_STATUS_OK);
        NUMLA_ASSERT_MSG(tokens_are(&o.r, want, (int32_t)n), "%s: prompt is not the rendering",
                         numla_chat_template_name(ts[i]));
        if (i == 2) /* thinking given as false: V4's answer opens after "</think>" */
            CU_ASSERT(len > 8 && !strcmp(text + len - 8, "</think>"));
        if (i == 0) {
            CU_ASSERT(strstr(text, "</think>") != NULL); /* thinking given as false */
            int found = 0;
            for (const char *const *st = numla_chat_template_stop_tokens(glm); *st; st++) {
                const int32_t id = numla_tokenizer_token_id(tok, *st);
                CU_ASSERT(id >= 0);
                for (int32_t k = 0; k < o.r.params.num_stop; k++)
                    found += o.r.params.stop_token_ids[k] == id;
            }
            CU_ASSERT_EQUAL(found, 2);
        }
        free(text);
        free(want);
        numla_request_free(&o.r);
        fixture_close(&f);
    }
    /* V4 without the switch: thinking, the reasoning split off from the first token */
    adapter_fixture f;
    fixture_open(&f, 4096, tok, v4, 0);
    chat_outcome o;
    run_chat(&f, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}", &o);
    CU_ASSERT(o.status == 0 && o.parse_status == 0 && o.r.num_prompt > 0);
    CU_ASSERT_EQUAL(o.reasoning_mode, NUMLA_HTTP_REASONING_OPEN);
    numla_request_free(&o.r);
    fixture_close(&f);
    /* V4's reasoning_effort reaches the template: "max" without the switch thinks and writes
     * the effort paragraph; with thinking turned off the encoding renders chat mode, without
     * it; "high" renders as no effort */
    const struct {
        const char *extra;
        int thinking, paragraph;
        const char *effort;
    } eff[] = {
        {", \"reasoning_effort\": \"max\"", 1, 1, "max"},
        {", \"reasoning_effort\": \"max\", \"chat_template_kwargs\": {\"thinking\": false}", 0, 0,
         "max"},
        {", \"reasoning_effort\": \"high\"", 1, 0, "high"},
    };
    for (size_t k = 0; k < sizeof eff / sizeof *eff; k++) {
        char body[256];
        snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"user\", \"content\": "
                                    "\"a\"}]%s}", eff[k].extra);
        fixture_open(&f, 4096, tok, v4, 0);
        run_chat(&f, body, &o);
        NUMLA_ASSERT_MSG(o.status == 0 && o.parse_status == 0 && o.r.num_prompt > 0,
                         "effort case %zu: status %d/%d param '%s'", k, o.parse_status, o.status,
                         o.param);
        expect_effort_prompt(v4, tok, &o.r, eff[k].thinking, eff[k].effort, eff[k].paragraph);
        CU_ASSERT_EQUAL(o.reasoning_mode == NUMLA_HTTP_REASONING_OPEN, eff[k].thinking);
        numla_request_free(&o.r);
        fixture_close(&f);
    }
    numla_chat_template_destroy(&glm);
    numla_chat_template_destroy(&v32);
    numla_chat_template_destroy(&v4);
    numla_tokenizer_destroy(&tok);
}

/* The Responses API's reasoning.effort is chat's reasoning_effort: for DeepSeek-V4 "max" thinks
 * and writes the effort paragraph, "high" renders as no effort (the prompt is the template's
 * rendering with that effort, as for chat); other values, and any value for a template without
 * an effort, are 400s that name reasoning.effort once in the Responses request's terms (as the
 * server maps the adapter's refusals, numla_responses_error_param). */
static void test_responses_reasoning_effort(void)
{
    numla_tokenizer *tok = NULL;
    numla_chat_template *v4 = NULL, *k2t = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_tokenizer_load(numla_test_source_path("tests/golden/tokenizer/bpe1k"),
                                               &tok), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_chat_template_load_builtin("deepseek-v4", &v4), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_chat_template_load_json(NULL, "kimi-k2-thinking", &k2t),
                          NUMLA_STATUS_OK);
    const struct {
        const char *effort;
        int paragraph;
    } eff[] = {{"max", 1}, {"high", 0}};
    adapter_fixture f;
    chat_outcome o;
    for (size_t k = 0; k < sizeof eff / sizeof *eff; k++) {
        char body[160];
        snprintf(body, sizeof body, "{\"input\": \"a\", \"reasoning\": {\"effort\": \"%s\", "
                 "\"summary\": null}}", eff[k].effort);
        fixture_open(&f, 4096, tok, v4, 0);
        run_body(&f, NUMLA_OPENAI_RESPONSES, body, &o);
        NUMLA_ASSERT_MSG(o.status == 0 && o.parse_status == 0 && o.r.num_prompt > 0,
                         "effort %s: status %d/%d: %s", eff[k].effort, o.parse_status, o.status,
                         o.err.message);
        expect_effort_prompt(v4, tok, &o.r, 1, eff[k].effort, eff[k].paragraph);
        CU_ASSERT_EQUAL(o.reasoning_mode, NUMLA_HTTP_REASONING_OPEN);
        numla_request_free(&o.r);
        fixture_close(&f);
    }
    const struct {
        numla_chat_template *t;
        const char *effort, *says;
    } no[] = {
        {v4, "\"low\"", "'reasoning.effort' \"low\" is not one this model's deepseek-v4 chat "
                        "template knows (\"high\" or \"max\")"},
        {k2t, "\"high\"", "'reasoning.effort' cannot be given to this model: its "
                          "kimi-k2-thinking chat template has no reasoning effort"},
        {v4, "\"\"", "'reasoning.effort' must be a non-empty string"},
        {v4, "3", "'reasoning.effort' must be a string or null"},
    };
    for (size_t k = 0; k < sizeof no / sizeof *no; k++) {
        char body[160];
        snprintf(body, sizeof body, "{\"input\": \"a\", \"reasoning\": {\"effort\": %s}}",
                 no[k].effort);
        fixture_open(&f, 4096, tok, no[k].t, 0);
        run_body(&f, NUMLA_OPENAI_RESPONSES, body, &o);
        numla_responses_error_param(&o.err); /* a no-op on what parse already mapped */
        NUMLA_ASSERT_MSG((o.status == 400 || o.parse_status == 400) &&
                             !strcmp(o.err.param, "reasoning.effort") &&
                             strstr(o.err.message, no[k].says),
                         "effort %s: %d/%d '%s' '%s'", no[k].effort, o.parse_status, o.status,
                         o.err.param, o.err.message);
        if (o.status == 0 && o.parse_status == 0)
            numla_request_free(&o.r);
        fixture_close(&f);
    }
    numla_chat_template_destroy(&k2t);
    numla_chat_template_destroy(&v4);
    numla_tokenizer_destroy(&tok);
}

/* Kimi's tokenizer marks its tool-call and think tags special: served with a Kimi template,
 * they are decoded where special tokens are skipped (the server reads them back out of the
 * text); other special tokens ([EOS], <|im_end|>) stay skipped, and a template without the
 * syntax keeps none. */
static void test_tool_tags_kept_in_text(void)
{
    static const char *const tags[] = {"<|tool_calls_section_begin|>", "<|tool_call_begin|>",
                                       "<|tool_call_argument_begin|>", "<|tool_call_end|>",
                                       "<|tool_calls_section_end|>", "<think>", "</think>"};
    const char *dir = numla_test_source_path("tests/golden/kimi_tok");
    for (int kimi = 0; kimi < 2; kimi++) {
        numla_tokenizer *tok = NULL;
        numla_chat_template *chat = NULL;
        CU_ASSERT_EQUAL_FATAL(numla_tokenizer_load(dir, &tok), NUMLA_STATUS_OK);
        CU_ASSERT_EQUAL_FATAL(numla_chat_template_load_json(NULL, kimi ? "kimi-k2-thinking"
                                                                      : "deepseek-v3", &chat),
                              NUMLA_STATUS_OK);
        adapter_fixture f;
        fixture_open(&f, 4096, tok, chat, 1);
        for (size_t k = 0; k < sizeof tags / sizeof *tags; k++) {
            int32_t id = numla_tokenizer_token_id(tok, tags[k]);
            CU_ASSERT_FATAL(id >= 0);
            CU_ASSERT(numla_tokenizer_is_special(tok, id));
            char *d = NULL;
            size_t dl = 0;
            CU_ASSERT_EQUAL(numla_tokenizer_decode(tok, &id, 1, 1, &d, &dl), NUMLA_STATUS_OK);
            NUMLA_ASSERT_MSG(d && !strcmp(d, kimi ? tags[k] : ""), "%s with %s: '%s'", tags[k],
                             kimi ? "kimi-k2-thinking" : "deepseek-v3", d ? d : "?");
            free(d);
        }
        int32_t end = numla_tokenizer_token_id(tok, "<|im_end|>");
        char *d = NULL;
        size_t dl = 0;
        CU_ASSERT_EQUAL(numla_tokenizer_decode(tok, &end, 1, 1, &d, &dl), NUMLA_STATUS_OK);
        CU_ASSERT(d && !strcmp(d, ""));
        free(d);
        fixture_close(&f);
        numla_chat_template_destroy(&chat);
        numla_tokenizer_destroy(&tok);
    }
}

/* POST /tokenize jobs are answered by the source on the loop's thread, never handed to the loop:
 * a prompt with and without add_special_tokens, messages with and without the generation
 * prompt, each the tokens the tokenizer gives the text (the template's render written out);
 * a generation request queued between them still reaches the loop; no tokenizer: 400. */
static void test_tokenize_jobs(void)
{
    const char *dir = numla_test_source_path("tests/golden/tokenizer/bpe1k");
    numla_tokenizer *tok = NULL;
    numla_chat_template *chat = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_tokenizer_load(dir, &tok), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_chat_template_load_json(NULL, "deepseek-v3", &chat),
                          NUMLA_STATUS_OK);
    adapter_fixture f;
    fixture_open(&f, 64, tok, chat, 0);
    static const struct {
        const char *body, *text;
        int special;
    } cases[] = {
        {"{\"prompt\": \"hello world\"}", "hello world", 1},
        {"{\"prompt\": \"hello world\", \"add_special_tokens\": false}", "hello world", 0},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}",
         "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜>", 0},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
         "\"add_generation_prompt\": false}", "<｜begin▁of▁sentence｜><｜User｜>hi", 0},
    };
    enum { NC = sizeof cases / sizeof cases[0] };
    numla_http_call *tc[NC];
    for (int i = 0; i < 2; i++)
        tc[i] = submit(&f, NUMLA_OPENAI_TOKENIZE, cases[i].body);
    numla_http_call *gen = submit(&f, NUMLA_OPENAI_COMPLETIONS, "{\"prompt\": [5, 6]}");
    for (int i = 2; i < NC; i++)
        tc[i] = submit(&f, NUMLA_OPENAI_TOKENIZE, cases[i].body);
    numla_request r;
    void *user;
    CU_ASSERT_EQUAL(pull(&f, &r, &user), NUMLA_SERVE_PULL_REQUEST);
    CU_ASSERT_PTR_EQUAL(user, &gen->jobs[0]);
    numla_request r2;
    void *user2;
    CU_ASSERT_EQUAL(pull(&f, &r2, &user2), NUMLA_SERVE_PULL_NONE);
    for (int i = 0; i < NC; i++) {
        int32_t *want = NULL;
        int64_t n = 0;
        CU_ASSERT_EQUAL_FATAL(numla_tokenizer_encode(tok, cases[i].text, strlen(cases[i].text),
                                                     cases[i].special, &want, &n),
                              NUMLA_STATUS_OK);
        const numla_http_job *j = &tc[i]->jobs[0];
        CU_ASSERT(j->released && j->finished);
        NUMLA_ASSERT_MSG(j->error.status == 0, "case %d: %s", i, j->error.message);
        NUMLA_ASSERT_MSG(j->num_tokens == n && !memcmp(j->tokens, want, (size_t)n * 4),
                         "case %d: %d tokens, want %lld", i, j->num_tokens, (long long)n);
        free(want);
        numla_http_call_release(&tc[i]);
    }
    done(&f, user, &r, "stop", NULL, 0, NULL, 0);
    numla_request_free(&r);
    numla_http_call_release(&gen);
    fixture_close(&f);

    /* without a tokenizer: 400 naming the prompt */
    fixture_open(&f, 64, NULL, NULL, 0);
    numla_http_call *c = submit(&f, NUMLA_OPENAI_TOKENIZE, "{\"prompt\": \"x\"}");
    CU_ASSERT_EQUAL(pull(&f, &r, &user), NUMLA_SERVE_PULL_NONE);
    CU_ASSERT_EQUAL(c->jobs[0].error.status, 400);
    CU_ASSERT_STRING_EQUAL(c->jobs[0].error.param, "prompt");
    numla_http_call_release(&c);
    fixture_close(&f);
    numla_chat_template_destroy(&chat);
    numla_tokenizer_destroy(&tok);
}

NUMLA_TEST_SUITE(http_serving_adapter, NULL, NULL, NUMLA_TEST(test_token_prompts_in_order),
                 NUMLA_TEST(test_tokenize_jobs),
                 NUMLA_TEST(test_tool_tags_kept_in_text),
                 NUMLA_TEST(test_failures_from_the_loop), NUMLA_TEST(test_refusals),
                 NUMLA_TEST(test_cancelled_while_queued), NUMLA_TEST(test_wait_and_destroy),
                 NUMLA_TEST(test_text_and_chat_prompts), NUMLA_TEST(test_chat_golden_tools),
                 NUMLA_TEST(test_chat_refused_by_template),
                 NUMLA_TEST(test_chat_glm5_and_v32),
                 NUMLA_TEST(test_responses_reasoning_effort))
