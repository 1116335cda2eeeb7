/* tests/unit/engine/http/test_http_server.c — the HTTP server (engine/http/server.h) on an
 * ephemeral loopback port, with a fake serving loop on a thread (token k has the text "t<k> ",
 * a short pause per step) and a small socket client speaking HTTP/1.0 (the body ends at close).
 * Every wait is a bounded loop; nothing asserts a time. */
#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "engine/http/reasoning.h"
#include "engine/http/server.h"
#include "engine/text/tool_calls.h"
#include "test_util.h"

#define EXPECT_JSTR(v, want)                                                               \
    do {                                                                                   \
        const char *s_ = json_string_value(v);                                             \
        NUMLA_ASSERT_MSG(s_ && !strcmp(s_, want), "got %s, want %s", s_ ? s_ : "(none)", want); \
    } while (0)

/* ---- the fake serving loop ---- */

typedef struct fake_loop {
    numla_http_backend *b;
    pthread_t th;
    atomic_int stop, paused;
    atomic_int paused_ack;      /* the loop has seen paused and takes no more jobs */
    atomic_int cancelled_seen;  /* jobs the loop found cancelled */
    atomic_int finished;        /* jobs it finished normally */
} fake_loop;

enum { FAKE_MAX_ACTIVE = 128 };

static void sleep_ms(int ms)
{
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static int32_t prompt_len(numla_http_job *j)
{
    const numla_openai_prompt *p = numla_http_job_prompt(j);
    if (!p)
        return numla_http_job_request(j)->num_messages;
    return p->tokens ? p->num_tokens : (int32_t)p->text_len;
}

static void *fake_loop_main(void *arg)
{
    fake_loop *f = arg;
    numla_http_job *active[FAKE_MAX_ACTIVE];
    int32_t done[FAKE_MAX_ACTIVE];
    int n = 0;
    while (!atomic_load(&f->stop) || n > 0) {
        if (!atomic_load(&f->paused))
            while (n < FAKE_MAX_ACTIVE) {
                numla_http_job *j = numla_http_backend_next(f->b, n ? 0 : 20);
                if (!j)
                    break;
                const numla_openai_prompt *p = numla_http_job_prompt(j);
                if (p && p->text && !strcmp(p->text, "FAIL")) { /* e.g. longer than the context */
                    numla_http_job_fail(j, 400, "the prompt is longer than the context", "prompt");
                    numla_http_job_release(&j);
                    continue;
                }
                const numla_openai_request *rq = numla_http_job_request(j);
                const char *last = rq->num_messages ? rq->messages[rq->num_messages - 1].content
                                                    : "";
                /* chat "think..." plays a thinking model: the adapter would set the mode from the
                 * template and the rendered prompt */
                if (!strcmp(last, "think"))
                    j->reasoning_mode = NUMLA_HTTP_REASONING_DETECT;
                else if (!strncmp(last, "think", 5))
                    j->reasoning_mode = NUMLA_HTTP_REASONING_OPEN;
                /* chat "...tool..." plays Kimi-K2 writing tool calls */
                if (strstr(last, "tool"))
                    j->tool_syntax = numla_tool_syntax_for_template("kimi-k2-thinking");
                done[n] = 0;
                active[n++] = j;
            }
        else {
            atomic_store(&f->paused_ack, 1);
            sleep_ms(5);
        }
        for (int i = 0; i < n; i++) {
            numla_http_job *j = active[i];
            const numla_openai_request *r = numla_http_job_request(j);
            const numla_openai_prompt *p = numla_http_job_prompt(j);
            int end = 0;
            if (numla_http_job_cancelled(j)) {
                atomic_fetch_add(&f->cancelled_seen, 1);
                numla_http_job_finish(j, "stop", prompt_len(j), done[i]);
                end = 1;
            } else if (!p && r->num_messages &&
                       strstr(r->messages[r->num_messages - 1].content, "tool") &&
                       done[i] == 3 && r->params.max_tokens > 3) { /* the model's end */
                numla_http_job_finish(j, "stop", prompt_len(j), done[i]);
                atomic_fetch_add(&f->finished, 1);
                end = 1;
            } else if (done[i] >= r->params.max_tokens) {
                if (r->echo && r->params.logprobs >= 0 && p && p->tokens) {
                    /* the scheduler's prompt logprobs: entry k = -k, the first without one */
                    numla_logprob_entry plp[16];
                    for (int32_t k = 0; k < p->num_tokens && k < 16; k++)
                        plp[k] = (numla_logprob_entry){.token = p->tokens[k],
                                                       .logprob = -(float)k,
                                                       .num_top = k ? 1 : -1,
                                                       .top_tokens = {p->tokens[k] + 1},
                                                       .top_logprobs = {-0.5f}};
                    CU_ASSERT_EQUAL(numla_http_job_set_prompt_logprobs(
                                        j, plp, p->num_tokens < 16 ? p->num_tokens : 16),
                                    NUMLA_STATUS_OK);
                }
                numla_http_job_finish(j, "length", prompt_len(j), done[i]);
                atomic_fetch_add(&f->finished, 1);
                end = 1;
            } else {
                char text[256];
                int32_t tok = done[i];
                const char *last = !p && r->num_messages
                                       ? r->messages[r->num_messages - 1].content : "";
                static const char *const think[] = {"<thi", "nk>", "I reason", " \xc3\xa9</th",
                                                    "ink>", "Answer", "!"};
                static const char *const open_[] = {"r1 ", "r2</think>", "a"};
                static const char *const cut[] = {"abc", "</thi"};
                /* two calls after text, cut inside the markers */
                static const char *const tool[] = {
                    "Let me look.<|tool_calls_sec",
                    "tion_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argu",
                    "ment_begin|>{\"city\": \"Paris\"}<|tool_call_end|><|tool_call_begin|>"
                    "functions.get_time:1<|tool_call_argument_begin|>{}<|tool_call_end|>"
                    "<|tool_calls_section_end|>"};
                /* reasoning, then content and a call */
                static const char *const thinktool[] = {
                    "plan", "</think>Hi<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0",
                    "<|tool_call_argument_begin|>{\"a\": 1}<|tool_call_end|><|tool_calls_section_end|>"};
                /* bad arguments: content as written */
                static const char *const toolbad[] = {
                    "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0",
                    "<|tool_call_argument_begin|>{bad<|tool_call_end|>",
                    "<|tool_calls_section_end|>"};
                if (!strcmp(last, "tool"))
                    snprintf(text, sizeof text, "%s", tool[done[i] % 3]);
                else if (!strcmp(last, "thinktool"))
                    snprintf(text, sizeof text, "%s", thinktool[done[i] % 3]);
                else if (!strcmp(last, "toolbad"))
                    snprintf(text, sizeof text, "%s", toolbad[done[i] % 3]);
                else if (!strcmp(last, "think"))
                    snprintf(text, sizeof text, "%s", think[done[i] % 7]);
                else if (!strcmp(last, "thinkopen"))
                    snprintf(text, sizeof text, "%s", open_[done[i] % 3]);
                else if (!strcmp(last, "thinkcut"))
                    snprintf(text, sizeof text, "%s", cut[done[i] % 2]);
                else if (p && p->text && !strcmp(p->text, "notext")) /* tokens only, no tokenizer */
                    text[0] = '\0';
                else if (p && p->text && !strcmp(p->text, "utf8")) /* € cut into its three bytes */
                    snprintf(text, sizeof text, "%s", done[i] < 3 ? (const char *[]){"\xe2", "\x82", "\xac"}[done[i]] : "!");
                else
                    snprintf(text, sizeof text, "t%d ", done[i]);
                numla_logprob_entry lp = {.token = tok, .logprob = -1.0f, .num_top = 1,
                                          .top_tokens = {tok}, .top_logprobs = {-1.0f}};
                if (p && p->text && !strcmp(p->text, "burst") && r->params.max_tokens <= 16) {
                    /* every token in one push, without text: a writer that lags behind */
                    int32_t toks[16];
                    numla_logprob_entry lps[16];
                    int32_t nb = r->params.max_tokens - done[i];
                    for (int32_t k = 0; k < nb; k++) {
                        toks[k] = tok + k;
                        lps[k] = lp;
                        lps[k].token = lps[k].top_tokens[0] = toks[k];
                    }
                    CU_ASSERT_EQUAL(numla_http_job_push(j, toks, nb, "", 0, lps),
                                    NUMLA_STATUS_OK);
                    done[i] += nb;
                    continue;
                }
                CU_ASSERT_EQUAL(numla_http_job_push(j, &tok, 1, text, strlen(text), &lp),
                                NUMLA_STATUS_OK);
                done[i]++;
            }
            if (end) {
                numla_http_job_release(&active[i]);
                active[i] = active[--n];
                done[i] = done[n];
                i--;
            }
        }
        if (n)
            sleep_ms(2);
    }
    return NULL;
}

typedef struct fixture {
    numla_http_backend *b;
    numla_http_metrics *m;
    numla_http_server *s;
    fake_loop loop;
    int port;
} fixture;

static void fixture_start(fixture *fx, int32_t max_queue, const char *api_key, size_t max_body)
{
    memset(fx, 0, sizeof *fx);
    CU_ASSERT_EQUAL_FATAL(numla_http_backend_create(max_queue, &fx->b), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_http_metrics_create(&fx->m), NUMLA_STATUS_OK);
    numla_http_server_options o = {.port = 0, .api_key = api_key, .model_name = "tiny,tiny-alias",
                                   .max_body = max_body, .vocab_size = 1000, .max_context = 4096};
    CU_ASSERT_EQUAL_FATAL(numla_http_server_start(&o, fx->b, fx->m, &fx->s), NUMLA_STATUS_OK);
    fx->port = numla_http_server_port(fx->s);
    CU_ASSERT(fx->port > 0);
    fx->loop.b = fx->b;
    pthread_create(&fx->loop.th, NULL, fake_loop_main, &fx->loop);
    numla_http_server_set_ready(fx->s, 1);
}

static void fixture_stop(fixture *fx)
{
    numla_http_server_stop(&fx->s);
    CU_ASSERT_PTR_NULL(fx->s);
    atomic_store(&fx->loop.stop, 1);
    atomic_store(&fx->loop.paused, 0);
    pthread_join(fx->loop.th, NULL);
    numla_http_backend_destroy(&fx->b);
    numla_http_metrics_destroy(&fx->m);
}

/* ---- the client ---- */

typedef struct reply {
    int status;
    char head[2048];
    char *body;                 /* malloc'ed, NUL-terminated */
} reply;

static int dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    /* a server that never answers fails the test instead of hanging it */
    struct timeval tv = {.tv_sec = 60};
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a)) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

static void send_request(int fd, const char *method, const char *path, const char *extra,
                         const char *body)
{
    char head[1024];
    int n = snprintf(head, sizeof head, "%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\n%s"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n", method, path,
                     extra ? extra : "", body ? strlen(body) : 0);
    CU_ASSERT(send(fd, head, (size_t)n, MSG_NOSIGNAL) == n);
    if (body && *body)
        CU_ASSERT(send(fd, body, strlen(body), MSG_NOSIGNAL) == (ssize_t)strlen(body));
}

/* One request, read until the server closes. */
static reply http(int port, const char *method, const char *path, const char *extra,
                  const char *body)
{
    reply r = {0};
    int fd = dial(port);
    CU_ASSERT_FATAL(fd >= 0);
    send_request(fd, method, path, extra, body);
    size_t cap = 4096, len = 0;
    char *all = malloc(cap);
    ssize_t k;
    while ((k = recv(fd, all + len, cap - len - 1, 0)) > 0) {
        len += (size_t)k;
        if (cap - len < 1024)
            all = realloc(all, cap *= 2);
    }
    close(fd);
    all[len] = 0;
    sscanf(all, "HTTP/1.%*d %d", &r.status);
    char *sep = strstr(all, "\r\n\r\n");
    size_t hl = sep ? (size_t)(sep - all) : len;
    snprintf(r.head, sizeof r.head, "%.*s", (int)hl, all);
    r.body = strdup(sep ? sep + 4 : "");
    free(all);
    return r;
}

static json_t *body_json(const reply *r)
{
    json_error_t e;
    json_t *o = json_loads(r->body, 0, &e);
    NUMLA_ASSERT_MSG(o != NULL, "not JSON: %s", r->body);
    return o;
}

/* The error's param, or "" (and the type must be invalid_request_error for a 4xx). */
static const char *error_param(json_t *o)
{
    json_t *e = json_object_get(o, "error");
    CU_ASSERT_PTR_NOT_NULL(json_object_get(e, "message"));
    const char *p = json_string_value(json_object_get(e, "param"));
    return p ? p : "";
}

/* The SSE events of a streamed body: their JSON in order, and whether [DONE] ended it. */
static json_t *events(const char *body, int *done)
{
    json_t *arr = json_array();
    *done = 0;
    const char *p = body;
    while ((p = strstr(p, "data: "))) {
        p += 6;
        const char *end = strstr(p, "\n\n");
        CU_ASSERT_PTR_NOT_NULL_FATAL(end);
        NUMLA_ASSERT_MSG(!*done, "an event after [DONE]");
        if (!strncmp(p, "[DONE]", 6)) {
            *done = 1;
        } else {
            json_error_t e;
            json_t *o = json_loadb(p, (size_t)(end - p), 0, &e);
            NUMLA_ASSERT_MSG(o != NULL, "event not JSON: %.*s", (int)(end - p), p);
            json_array_append_new(arr, o);
        }
        p = end + 2;
    }
    return arr;
}

static void free_reply(reply *r)
{
    free(r->body);
    r->body = NULL;
}

/* ---- tests ---- */

static void test_health_and_models(void)
{
    fixture fx;
    fixture_start(&fx, 64, NULL, 0);
    numla_http_server_set_ready(fx.s, 0);
    reply r = http(fx.port, "GET", "/health", NULL, NULL);
    CU_ASSERT_EQUAL(r.status, 503);
    free_reply(&r);
    r = http(fx.port, "POST", "/v1/completions", NULL, "{\"prompt\": \"a\"}");
    CU_ASSERT_EQUAL(r.status, 503);
    free_reply(&r);
    numla_http_server_set_ready(fx.s, 1);
    r = http(fx.port, "GET", "/health", NULL, NULL);
    CU_ASSERT_EQUAL(r.status, 200);
    free_reply(&r);
    r = http(fx.port, "GET", "/v1/models", NULL, NULL);
    CU_ASSERT_EQUAL(r.status, 200);
    json_t *o = body_json(&r);
    EXPECT_JSTR((json_object_get(o, "object")), "list");
    CU_ASSERT_EQUAL(json_array_size(json_object_get(o, "data")), 2); /* the name and its alias */
    EXPECT_JSTR((json_object_get(json_array_get(json_object_get(o, "data"), 0), "id")), "tiny");
    EXPECT_JSTR((json_object_get(json_array_get(json_object_get(o, "data"), 1), "id")), "tiny-alias");
    json_decref(o);
    free_reply(&r);
    /* a model that is not served: OpenAI's 404 model_not_found, for either endpoint */
    r = http(fx.port, "POST", "/v1/completions", NULL, "{\"model\": \"gpt-4\", \"prompt\": \"a\"}");
    CU_ASSERT_EQUAL(r.status, 404);
    o = body_json(&r);
    EXPECT_JSTR((json_object_get(json_object_get(o, "error"), "code")), "model_not_found");
    EXPECT_JSTR((json_object_get(json_object_get(o, "error"), "type")), "invalid_request_error");
    NUMLA_ASSERT_MSG(!strcmp(error_param(o), "model"), "param %s", error_param(o));
    json_decref(o);
    free_reply(&r);
    r = http(fx.port, "POST", "/v1/chat/completions", NULL,
             "{\"model\": \"tiny-\", \"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}");
    CU_ASSERT_EQUAL(r.status, 404);
    free_reply(&r);
    r = http(fx.port, "GET", "/nowhere", NULL, NULL);
    CU_ASSERT_EQUAL(r.status, 404);
    free_reply(&r);
    fixture_stop(&fx);
}

static void test_completion_plain(void)
{
    fixture fx;
    fixture_start(&fx, 64, NULL, 0);
    reply r = http(fx.port, "POST", "/v1/completions", NULL,
                   "{\"model\": \"tiny\", \"prompt\": \"hello\", \"max_tokens\": 3, \"logprobs\": 1}");
    NUMLA_ASSERT_MSG(r.status == 200, "status %d: %s", r.status, r.body);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.head, "application/json"));
    json_t *o = body_json(&r);
    json_t *c0 = json_array_get(json_object_get(o, "choices"), 0);
    EXPECT_JSTR((json_object_get(o, "object")), "text_completion");
    EXPECT_JSTR((json_object_get(c0, "text")), "t0 t1 t2 ");
    EXPECT_JSTR((json_object_get(c0, "finish_reason")), "length");
    CU_ASSERT_EQUAL(json_array_size(json_object_get(json_object_get(c0, "logprobs"), "tokens")), 3);
    json_t *u = json_object_get(o, "usage");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(u, "prompt_tokens")), 5);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(u, "completion_tokens")), 3);
    json_decref(o);
    free_reply(&r);
    /* an alias is served, and the response names the model the request asked for */
    r = http(fx.port, "POST", "/v1/completions", NULL,
             "{\"model\": \"tiny-alias\", \"prompt\": \"hello\", \"max_tokens\": 1}");
    NUMLA_ASSERT_MSG(r.status == 200, "status %d: %s", r.status, r.body);
    o = body_json(&r);
    EXPECT_JSTR((json_object_get(o, "model")), "tiny-alias");
    json_decref(o);
    free_reply(&r);

    /* two prompts: two choices; a stop string cuts the text and ends the job early */
    r = http(fx.port, "POST", "/v1/completions", NULL,
             "{\"prompt\": [\"ab\", \"cd\"], \"max_tokens\": 50, \"stop\": [\"t2\"]}");
    CU_ASSERT_EQUAL(r.status, 200);
    o = body_json(&r);
    json_t *ch = json_object_get(o, "choices");
    CU_ASSERT_EQUAL(json_array_size(ch), 2);
    for (size_t i = 0; i < 2; i++) {
        EXPECT_JSTR((json_object_get(json_array_get(ch, i), "text")), "t0 t1 ");
        EXPECT_JSTR((json_object_get(json_array_get(ch, i), "finish_reason")), "stop");
        CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_array_get(ch, i), "index")), (json_int_t)i);
    }
    CU_ASSERT(json_integer_value(json_object_get(json_object_get(o, "usage"), "completion_tokens")) < 100);
    json_decref(o);
    free_reply(&r);
    CU_ASSERT(atomic_load(&fx.loop.cancelled_seen) >= 2); /* the stop reached the loop */

    /* n choices per prompt: prompts x n jobs, choice index = prompt index x n + j, each its own
     * sequence; usage sums the jobs */
    r = http(fx.port, "POST", "/v1/completions", NULL,
             "{\"prompt\": [\"ab\", \"cd\"], \"max_tokens\": 2, \"n\": 2, \"best_of\": 2}");
    NUMLA_ASSERT_MSG(r.status == 200, "status %d: %s", r.status, r.body);
    o = body_json(&r);
    ch = json_object_get(o, "choices");
    CU_ASSERT_EQUAL(json_array_size(ch), 4);
    for (size_t i = 0; i < json_array_size(ch); i++) {
        CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_array_get(ch, i), "index")), (json_int_t)i);
        EXPECT_JSTR((json_object_get(json_array_get(ch, i), "text")), "t0 t1 ");
    }
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(o, "usage"), "completion_tokens")), 8);
    json_decref(o);
    free_reply(&r);
    r = http(fx.port, "POST", "/v1/chat/completions", NULL,
             "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 1, \"n\": 3}");
    NUMLA_ASSERT_MSG(r.status == 200, "status %d: %s", r.status, r.body);
    o = body_json(&r);
    ch = json_object_get(o, "choices");
    CU_ASSERT_EQUAL(json_array_size(ch), 3);
    for (size_t i = 0; i < json_array_size(ch); i++)
        CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_array_get(ch, i), "index")), (json_int_t)i);
    json_decref(o);
    free_reply(&r);
    fixture_stop(&fx);
}

static void test_streams(void)
{
    fixture fx;
    fixture_start(&fx, 64, NULL, 0);
    int done;
    reply r = http(fx.port, "POST", "/v1/completions", NULL,
                   "{\"prompt\": \"utf8\", \"max_tokens\": 5, \"stream\": true, "
                   "\"stream_options\": {\"include_usage\": true}}");
    CU_ASSERT_EQUAL(r.status, 200);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.head, "text/event-stream"));
    json_t *ev = events(r.body, &done);
    CU_ASSERT(done);
    char text[256] = "";
    size_t n = json_array_size(ev);
    CU_ASSERT_FATAL(n >= 3);
    for (size_t i = 0; i + 1 < n; i++) {
        json_t *c = json_array_get(json_object_get(json_array_get(ev, i), "choices"), 0);
        EXPECT_JSTR((json_object_get(json_array_get(ev, i), "object")), "text_completion");
        strcat(text, json_string_value(json_object_get(c, "text")));
        /* no event carries part of the € (jansson rejects invalid UTF-8, so each is whole) */
        CU_ASSERT(i + 2 == n ? json_is_string(json_object_get(c, "finish_reason"))
                             : json_is_null(json_object_get(c, "finish_reason")));
    }
    CU_ASSERT_STRING_EQUAL(text, "\xe2\x82\xac!!");
    json_t *last = json_array_get(ev, n - 1);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(last, "choices")), 0);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(json_object_get(last, "usage"), "completion_tokens")), 5);
    json_decref(ev);
    free_reply(&r);

    r = http(fx.port, "POST", "/v1/chat/completions", NULL,
             "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", "
             "\"content\": \"u\"}], \"max_tokens\": 4, \"stream\": true}");
    CU_ASSERT_EQUAL(r.status, 200);
    ev = events(r.body, &done);
    CU_ASSERT(done);
    n = json_array_size(ev);
    CU_ASSERT_FATAL(n >= 2);
    json_t *d0 = json_object_get(json_array_get(json_object_get(json_array_get(ev, 0), "choices"), 0), "delta");
    EXPECT_JSTR((json_object_get(d0, "role")), "assistant");
    text[0] = 0;
    const char *finish = NULL;
    for (size_t i = 1; i < n; i++) {
        json_t *o = json_array_get(ev, i);
        EXPECT_JSTR((json_object_get(o, "object")), "chat.completion.chunk");
        json_t *c = json_array_get(json_object_get(o, "choices"), 0);
        json_t *content = json_object_get(json_object_get(c, "delta"), "content");
        if (content)
            strcat(text, json_string_value(content));
        if (json_is_string(json_object_get(c, "finish_reason")))
            finish = json_string_value(json_object_get(c, "finish_reason"));
    }
    CU_ASSERT_STRING_EQUAL(text, "t0 t1 t2 t3 ");
    CU_ASSERT(finish && !strcmp(finish, "length"));
    CU_ASSERT(!strstr(r.body, "\"usage\"")); /* not asked for */
    json_decref(ev);
    free_reply(&r);

    /* non-streamed chat */
    r = http(fx.port, "POST", "/v1/chat/completions", NULL,
             "{\"messages\": [{\"role\": \"user\", \"content\": \"u\"}], \"max_tokens\": 2}");
    CU_ASSERT_EQUAL(r.status, 200);
    json_t *o = body_json(&r);
    json_t *msg = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "message");
    EXPECT_JSTR((json_object_get(msg, "content")), "t0 t1 ");
    EXPECT_JSTR((json_object_get(msg, "role")), "assistant");
    json_decref(o);
    free_reply(&r);
    fixture_stop(&fx);
}

/* Chat text of a thinking model: reasoning_content split off at "</think>", streamed or not;
 * "<think>" opening the output (mode DETECT) or the prompt (OPEN); cut off while thinking. */
static void chat_reasoning(int port, const char *msg, int max_tokens, int stream,
                           const char *want_reasoning, const char *want_content)
{
    char body[256];
    snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"user\", \"content\": \"%s\"}], "
             "\"max_tokens\": %d, \"stream\": %s}", msg, max_tokens, stream ? "true" : "false");
    reply r = http(port, "POST", "/v1/chat/completions", NULL, body);
    CU_ASSERT_EQUAL(r.status, 200);
    char rs[256] = "", cs[256] = "";
    if (stream) {
        int done;
        json_t *ev = events(r.body, &done);
        CU_ASSERT(done);
        for (size_t i = 1; i < json_array_size(ev); i++) {
            json_t *d = json_object_get(json_array_get(json_object_get(json_array_get(ev, i),
                                                                       "choices"), 0), "delta");
            json_t *x = json_object_get(d, "reasoning_content"), *y = json_object_get(d, "content");
            if (x)
                strncat(rs, json_string_value(x), sizeof rs - strlen(rs) - 1);
            if (y)
                strncat(cs, json_string_value(y), sizeof cs - strlen(cs) - 1);
        }
        json_decref(ev);
        NUMLA_ASSERT_MSG(!strcmp(rs, want_reasoning) && !strcmp(cs, want_content),
                         "%s streamed: reasoning '%s' content '%s'", msg, rs, cs);
    } else {
        json_t *o = body_json(&r);
        json_t *m = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "message");
        json_t *x = json_object_get(m, "reasoning_content");
        CU_ASSERT(x != NULL);
        const char *got_r = json_is_null(x) ? "(null)" : json_string_value(x);
        const char *got_c = json_string_value(json_object_get(m, "content"));
        NUMLA_ASSERT_MSG(got_r && got_c && !strcmp(got_r, want_reasoning) &&
                             !strcmp(got_c, want_content),
                         "%s: reasoning '%s' content '%s'", msg, got_r ? got_r : "?",
                         got_c ? got_c : "?");
        json_decref(o);
    }
    free_reply(&r);
}

static void test_reasoning_content(void)
{
    fixture fx;
    fixture_start(&fx, 64, NULL, 0);
    for (int stream = 0; stream < 2; stream++) {
        chat_reasoning(fx.port, "think", 7, stream, "I reason \xc3\xa9", "Answer!");
        chat_reasoning(fx.port, "thinkopen", 3, stream, "r1 r2", "a");
        chat_reasoning(fx.port, "thinkcut", 2, stream, "abc</thi", stream ? "" : "");
        /* DETECT without "<think>": all content, reasoning null */
        chat_reasoning(fx.port, "think", 0, stream, stream ? "" : "(null)", "");
    }
    /* a model that does not think: no reasoning_content at all */
    reply r = http(fx.port, "POST", "/v1/chat/completions", NULL,
                   "{\"messages\": [{\"role\": \"user\", \"content\": \"u\"}], \"max_tokens\": 2}");
    CU_ASSERT_PTR_NULL(strstr(r.body, "reasoning_content"));
    free_reply(&r);
    fixture_stop(&fx);
}

/* Chat of a model writing tool calls (the fake loop plays Kimi-K2): message.tool_calls, or the
 * streamed delta.tool_calls (a call's first chunk: index, id, type, name, arguments ""; then its
 * arguments), content and reasoning_content around them, finish_reason. want_calls: a JSON
 * array of [id, name, arguments]; want_content NULL: null. */
static void chat_tools(int port, const char *msg, int stream, const char *want_reasoning,
                       const char *want_content, const char *want_calls, const char *want_finish)
{
    char body[256];
    snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"user\", \"content\": \"%s\"}], "
             "\"max_tokens\": 9, \"stream\": %s}", msg, stream ? "true" : "false");
    reply r = http(port, "POST", "/v1/chat/completions", NULL, body);
    CU_ASSERT_EQUAL(r.status, 200);
    char rs[256] = "", cs[256] = "";
    const char *finish = NULL;
    int has_content = 0, has_reasoning = 0;
    json_t *calls = json_array(), *ev = NULL, *o = NULL;
    if (stream) {
        int done;
        ev = events(r.body, &done);
        CU_ASSERT(done);
        for (size_t i = 1; i < json_array_size(ev); i++) {
            json_t *ch = json_array_get(json_object_get(json_array_get(ev, i), "choices"), 0);
            json_t *d = json_object_get(ch, "delta");
            json_t *x = json_object_get(d, "reasoning_content"), *y = json_object_get(d, "content");
            if (x)
                strncat(rs, json_string_value(x), sizeof rs - strlen(rs) - 1);
            if (y)
                strncat(cs, json_string_value(y), sizeof cs - strlen(cs) - 1);
            has_reasoning |= x != NULL;
            has_content |= y != NULL && json_string_length(y) > 0;
            if (json_string_value(json_object_get(ch, "finish_reason")))
                finish = json_string_value(json_object_get(ch, "finish_reason"));
            json_t *tc = json_object_get(d, "tool_calls");
            if (!tc)
                continue;
            CU_ASSERT_EQUAL(json_array_size(tc), 1);
            json_t *t = json_array_get(tc, 0), *fn = json_object_get(t, "function");
            size_t idx = (size_t)json_integer_value(json_object_get(t, "index"));
            const char *args = json_string_value(json_object_get(fn, "arguments"));
            CU_ASSERT_PTR_NOT_NULL_FATAL(args);
            if (idx == json_array_size(calls)) { /* a call's first chunk */
                EXPECT_JSTR(json_object_get(t, "type"), "function");
                CU_ASSERT_STRING_EQUAL(args, "");
                json_array_append_new(calls, json_pack("[O, O, s]", json_object_get(t, "id"),
                                                       json_object_get(fn, "name"), ""));
            } else {
                CU_ASSERT_FATAL(idx + 1 == json_array_size(calls));
                CU_ASSERT_PTR_NULL(json_object_get(t, "id"));
                CU_ASSERT_PTR_NULL(json_object_get(fn, "name"));
                json_t *c = json_array_get(calls, idx);
                char a[256];
                snprintf(a, sizeof a, "%s%s", json_string_value(json_array_get(c, 2)), args);
                json_array_set_new(c, 2, json_string(a));
            }
        }
    } else {
        o = body_json(&r);
        json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
        json_t *m = json_object_get(ch, "message");
        json_t *x = json_object_get(m, "reasoning_content"), *y = json_object_get(m, "content");
        has_reasoning = x != NULL && !json_is_null(x);
        if (has_reasoning)
            snprintf(rs, sizeof rs, "%s", json_string_value(x));
        CU_ASSERT_PTR_NOT_NULL(y);
        has_content = json_is_string(y);
        if (has_content)
            snprintf(cs, sizeof cs, "%s", json_string_value(y));
        finish = json_string_value(json_object_get(ch, "finish_reason"));
        size_t k;
        json_t *t;
        json_array_foreach(json_object_get(m, "tool_calls"), k, t) {
            json_t *fn = json_object_get(t, "function");
            EXPECT_JSTR(json_object_get(t, "type"), "function");
            json_array_append_new(calls, json_pack("[O, O, O]", json_object_get(t, "id"),
                                                   json_object_get(fn, "name"),
                                                   json_object_get(fn, "arguments")));
        }
        /* no calls: no tool_calls field at all */
        CU_ASSERT(json_object_get(m, "tool_calls") == NULL || json_array_size(calls) > 0);
    }
    /* arguments compared as JSON */
    size_t k;
    json_t *c;
    json_array_foreach(calls, k, c) {
        json_t *a = json_loads(json_string_value(json_array_get(c, 2)), 0, NULL);
        NUMLA_ASSERT_MSG(json_is_object(a), "%s: arguments '%s'", msg,
                         json_string_value(json_array_get(c, 2)));
        json_array_set_new(c, 2, a ? a : json_null());
    }
    json_t *want = json_loads(want_calls, 0, NULL);
    char *got = json_dumps(calls, JSON_ENSURE_ASCII);
    NUMLA_ASSERT_MSG(json_equal(calls, want), "%s%s: calls %s, want %s", msg,
                     stream ? " streamed" : "", got, want_calls);
    free(got);
    NUMLA_ASSERT_MSG(want_content ? has_content && !strcmp(cs, want_content) : !has_content,
                     "%s%s: content '%s'", msg, stream ? " streamed" : "", cs);
    NUMLA_ASSERT_MSG(want_reasoning ? has_reasoning && !strcmp(rs, want_reasoning)
                                    : !has_reasoning,
                     "%s%s: reasoning '%s'", msg, stream ? " streamed" : "", rs);
    NUMLA_ASSERT_MSG(finish && !strcmp(finish, want_finish), "%s%s: finish_reason %s", msg,
                     stream ? " streamed" : "", finish ? finish : "(none)");
    json_decref(want);
    json_decref(calls);
    json_decref(ev);
    json_decref(o);
    free_reply(&r);
}

static void test_tool_calls(void)
{
    fixture fx;
    fixture_start(&fx, 64, NULL, 0);
    for (int stream = 0; stream < 2; stream++) {
        chat_tools(fx.port, "tool", stream, NULL, "Let me look.",
                   "[[\"functions.get_weather:0\", \"get_weather\", {\"city\": \"Paris\"}], "
                   "[\"functions.get_time:1\", \"get_time\", {}]]",
                   "tool_calls");
        chat_tools(fx.port, "thinktool", stream, "plan", "Hi",
                   "[[\"functions.f:0\", \"f\", {\"a\": 1}]]", "tool_calls");
        chat_tools(fx.port, "toolbad", stream, NULL,
                   "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0"
                   "<|tool_call_argument_begin|>{bad<|tool_call_end|><|tool_calls_section_end|>",
                   "[]", "stop");
    }
    fixture_stop(&fx);
}

/* The SSE events of a Responses stream ("event: T\ndata: {...}"): their JSON in order; each
 * event line names the data's type. */
static json_t *responses_events(const char *body)
{
    json_t *arr = json_array();
    const char *p = body;
    while ((p = strstr(p, "event: "))) {
        const char *nl = strchr(p, '\n');
        CU_ASSERT_FATAL(nl && !strncmp(nl, "\ndata: ", 7));
        char type[96];
        snprintf(type, sizeof type, "%.*s", (int)(nl - p - 7), p + 7);
        const char *d = nl + 7, *end = strstr(d, "\n\n");
        CU_ASSERT_PTR_NOT_NULL_FATAL(end);
        json_t *o = json_loadb(d, (size_t)(end - d), 0, NULL);
        NUMLA_ASSERT_MSG(o && !strcmp(json_string_value(json_object_get(o, "type")), type),
                         "event %s: %.*s", type, (int)(end - d), d);
        json_array_append_new(arr, o);
        p = end + 2;
    }
    CU_ASSERT_PTR_NULL(strstr(body, "[DONE]"));
    return arr;
}

/* POST /v1/responses through the server: the response object (text, usage, the settings
 * echoed), its stream (created .. completed, deltas adding up to the text), a model's tool
 * calls as function_call items after the message, reasoning as a reasoning item, a loop's
 * refusal and the parser's 400s naming the Responses field. */
static void test_responses(void)
{
    fixture fx;
    fixture_start(&fx, 64, NULL, 0);
    reply r = http(fx.port, "POST", "/v1/responses", NULL,
                   "{\"model\": \"tiny\", \"input\": \"hello\", \"max_output_tokens\": 3,"
                   " \"instructions\": \"be brief\"}");
    NUMLA_ASSERT_MSG(r.status == 200, "status %d: %s", r.status, r.body);
    json_t *o = body_json(&r);
    EXPECT_JSTR(json_object_get(o, "object"), "response");
    EXPECT_JSTR(json_object_get(o, "status"), "incomplete"); /* max_output_tokens reached */
    EXPECT_JSTR(json_object_get(json_object_get(o, "incomplete_details"), "reason"),
                "max_output_tokens");
    CU_ASSERT_PTR_NOT_NULL(strstr(json_string_value(json_object_get(o, "id")), "resp_"));
    EXPECT_JSTR(json_object_get(o, "instructions"), "be brief");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(o, "max_output_tokens")), 3);
    json_t *out = json_object_get(o, "output");
    CU_ASSERT_EQUAL(json_array_size(out), 1);
    json_t *msg = json_array_get(out, 0);
    EXPECT_JSTR(json_object_get(msg, "type"), "message");
    EXPECT_JSTR(json_object_get(msg, "role"), "assistant");
    EXPECT_JSTR(json_object_get(json_array_get(json_object_get(msg, "content"), 0), "text"),
                "t0 t1 t2 ");
    json_t *u = json_object_get(o, "usage");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(u, "output_tokens")), 3);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(u, "input_tokens")), 2); /* 2 messages */
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(u, "total_tokens")), 5);
    json_decref(o);
    free_reply(&r);

    r = http(fx.port, "POST", "/v1/responses", NULL,
             "{\"input\": \"hello\", \"max_output_tokens\": 3, \"stream\": true}");
    NUMLA_ASSERT_MSG(r.status == 200, "status %d: %s", r.status, r.body);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.head, "text/event-stream"));
    json_t *ev = responses_events(r.body);
    CU_ASSERT_FATAL(json_array_size(ev) >= 8);
    EXPECT_JSTR(json_object_get(json_array_get(ev, 0), "type"), "response.created");
    EXPECT_JSTR(json_object_get(json_array_get(ev, 1), "type"), "response.in_progress");
    char text[64] = "";
    for (size_t i = 0; i < json_array_size(ev); i++) {
        json_t *e = json_array_get(ev, i);
        CU_ASSERT_EQUAL(json_integer_value(json_object_get(e, "sequence_number")), (json_int_t)i);
        if (!strcmp(json_string_value(json_object_get(e, "type")), "response.output_text.delta"))
            strncat(text, json_string_value(json_object_get(e, "delta")), 16);
    }
    CU_ASSERT_STRING_EQUAL(text, "t0 t1 t2 ");
    json_t *last = json_array_get(ev, json_array_size(ev) - 1);
    EXPECT_JSTR(json_object_get(last, "type"), "response.incomplete");
    EXPECT_JSTR(json_object_get(json_array_get(json_object_get(json_array_get(json_object_get(
                    json_object_get(last, "response"), "output"), 0), "content"), 0), "text"),
                "t0 t1 t2 ");
    json_decref(ev);
    free_reply(&r);

    /* the model's calls (the fake loop writes Kimi's) and reasoning, streamed and not */
    for (int stream = 0; stream < 2; stream++) {
        char body[160];
        snprintf(body, sizeof body, "{\"input\": [{\"role\": \"user\", \"content\": "
                 "\"thinktool\"}], \"max_output_tokens\": 10%s}", stream ? ", \"stream\": true" : "");
        r = http(fx.port, "POST", "/v1/responses", NULL, body);
        NUMLA_ASSERT_MSG(r.status == 200, "status %d: %s", r.status, r.body);
        if (stream) {
            ev = responses_events(r.body);
            o = json_incref(json_object_get(json_array_get(ev, json_array_size(ev) - 1),
                                            "response"));
            json_decref(ev);
        } else {
            o = body_json(&r);
        }
        EXPECT_JSTR(json_object_get(o, "status"), "completed");
        out = json_object_get(o, "output");
        CU_ASSERT_EQUAL_FATAL(json_array_size(out), 3);
        EXPECT_JSTR(json_object_get(json_array_get(out, 0), "type"), "reasoning");
        EXPECT_JSTR(json_object_get(json_array_get(json_object_get(json_array_get(out, 0),
                                                                   "content"), 0), "text"), "plan");
        EXPECT_JSTR(json_object_get(json_array_get(json_object_get(json_array_get(out, 1),
                                                                   "content"), 0), "text"), "Hi");
        json_t *fc = json_array_get(out, 2);
        EXPECT_JSTR(json_object_get(fc, "type"), "function_call");
        EXPECT_JSTR(json_object_get(fc, "call_id"), "functions.f:0");
        EXPECT_JSTR(json_object_get(fc, "name"), "f");
        EXPECT_JSTR(json_object_get(fc, "arguments"), "{\"a\": 1}");
        json_decref(o);
        free_reply(&r);
    }

    /* refusals: the loop's (named in the Responses field), the parser's, an unknown endpoint */
    r = http(fx.port, "POST", "/v1/responses", NULL, "{\"input\": \"FAIL\"}");
    CU_ASSERT_EQUAL(r.status, 200); /* the fake loop fails completions prompts only */
    free_reply(&r);
    static const char *const bad[][2] = {
        {"{\"input\": \"x\", \"max_output_tokens\": -1}", "max_output_tokens"},
        {"{\"input\": \"x\", \"previous_response_id\": \"resp_1\"}", "previous_response_id"},
        {"{\"input\": [{\"role\": \"user\", \"content\": 5}]}", "input[0].content"},
        {"{\"input\": \"x\", \"text\": {\"format\": {\"type\": \"json_schema\", \"name\": \"s\","
         " \"schema\": {\"type\": \"object\", \"not\": {}}}}}", "text.format"},
        {"{\"input\": \"x\", \"tools\": [{\"type\": \"file_search\"}]}", "tools[0]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        r = http(fx.port, "POST", "/v1/responses", NULL, bad[i][0]);
        NUMLA_ASSERT_MSG(r.status == 400, "%s: %d", bad[i][0], r.status);
        o = body_json(&r);
        NUMLA_ASSERT_MSG(!strcmp(error_param(o), bad[i][1]), "%s: param %s", bad[i][0],
                         error_param(o));
        json_decref(o);
        free_reply(&r);
    }
    r = http(fx.port, "POST", "/v1/embeddings", NULL, "{\"input\": \"x\", \"model\": \"tiny\"}");
    CU_ASSERT_EQUAL(r.status, 404);
    o = body_json(&r);
    EXPECT_JSTR(json_object_get(json_object_get(o, "error"), "type"), "invalid_request_error");
    json_decref(o);
    free_reply(&r);
    fixture_stop(&fx);
}

typedef struct client_arg {
    int port, index, ok;
} client_arg;

static void *client_main(void *p)
{
    client_arg *a = p;
    char body[128];
    snprintf(body, sizeof body, "{\"prompt\": \"c%d\", \"max_tokens\": %d%s}", a->index,
             4 + a->index % 5, a->index % 2 ? ", \"stream\": true" : "");
    reply r = http(a->port, "POST", "/v1/completions", NULL, body);
    char want[128] = "";
    for (int k = 0; k < 4 + a->index % 5; k++)
        sprintf(want + strlen(want), "t%d ", k);
    if (a->index % 2) {
        a->ok = r.status == 200 && strstr(r.body, "data: [DONE]\n\n") != NULL;
        char *p2 = r.body, got[128] = "";
        while (a->ok && (p2 = strstr(p2, "\"text\":\""))) { /* compact JSON from jansson */
            p2 += 8;
            strncat(got, p2, (size_t)(strchr(p2, '"') - p2));
        }
        a->ok = a->ok && !strcmp(got, want);
    } else {
        json_error_t e;
        json_t *o = json_loads(r.body, 0, &e);
        const char *t = json_string_value(json_object_get(json_array_get(json_object_get(o, "choices"), 0), "text"));
        a->ok = r.status == 200 && t && !strcmp(t, want);
        json_decref(o);
    }
    free_reply(&r);
    return NULL;
}

/* Tokens without text (a model served without a tokenizer) still stream one event each. */
static void test_token_chunks(void)
{
    fixture fx;
    fixture_start(&fx, 64, NULL, 0);
    int done;
    reply r = http(fx.port, "POST", "/v1/completions", NULL,
                   "{\"prompt\": \"notext\", \"max_tokens\": 6, \"stream\": true}");
    CU_ASSERT_EQUAL(r.status, 200);
    json_t *ev = events(r.body, &done);
    CU_ASSERT(done);
    NUMLA_ASSERT_MSG(json_array_size(ev) >= 6, "%zu events for 6 tokens without text",
                     json_array_size(ev));
    json_decref(ev);
    free_reply(&r);
    /* the loop pushes the 6 tokens at once, as a writer that lags behind sees them: still an
     * event per token, and with logprobs each event carries its own token's */
    for (int lp = 0; lp < 2; lp++) {
        r = http(fx.port, "POST", "/v1/completions", NULL,
                 lp ? "{\"prompt\": \"burst\", \"max_tokens\": 6, \"stream\": true, \"logprobs\": 1}"
                    : "{\"prompt\": \"burst\", \"max_tokens\": 6, \"stream\": true}");
        CU_ASSERT_EQUAL(r.status, 200);
        ev = events(r.body, &done);
        CU_ASSERT(done);
        size_t with_token = 0, k;
        json_t *e;
        json_array_foreach(ev, k, e) {
            json_t *lps = json_object_get(json_array_get(json_object_get(e, "choices"), 0),
                                          "logprobs");
            size_t nt = json_array_size(json_object_get(lps, "tokens"));
            NUMLA_ASSERT_MSG(nt <= 1, "event %zu carries %zu tokens' logprobs", k, nt);
            with_token += nt;
        }
        NUMLA_ASSERT_MSG(json_array_size(ev) >= 6, "%zu events for 6 tokens pushed at once",
                         json_array_size(ev));
        if (lp)
            CU_ASSERT_EQUAL(with_token, 6);
        json_decref(ev);
        free_reply(&r);
    }
    fixture_stop(&fx);
}

static void test_32_concurrent_clients(void)
{
    fixture fx;
    fixture_start(&fx, 64, NULL, 0);
    pthread_t th[32];
    client_arg a[32];
    for (int i = 0; i < 32; i++) {
        a[i] = (client_arg){.port = fx.port, .index = i};
        pthread_create(&th[i], NULL, client_main, &a[i]);
    }
    int ok = 0;
    for (int i = 0; i < 32; i++) {
        pthread_join(th[i], NULL);
        ok += a[i].ok;
    }
    CU_ASSERT_EQUAL(ok, 32);
    /* the fake loop counts a job after finishing it, so its last answers may be read first */
    for (int w = 0; w < 2000 && atomic_load(&fx.loop.finished) < 32; w++)
        sleep_ms(1);
    CU_ASSERT_EQUAL(atomic_load(&fx.loop.finished), 32);
    fixture_stop(&fx);
}

/* Poll until the metric line reaches at least `want` (bounded: about 10 s). */
static int metric_reaches(int port, const char *line, double want)
{
    for (int tries = 0; tries < 1000; tries++) {
        reply r = http(port, "GET", "/metrics", NULL, NULL);
        const char *p = strstr(r.body, line);
        double v = p ? atof(p + strlen(line)) : -1;
        free_reply(&r);
        if (v >= want)
            return 1;
        sleep_ms(10);
    }
    return 0;
}

static void test_disconnect_cancels(void)
{
    fixture fx;
    fixture_start(&fx, 64, NULL, 0);
    int fd = dial(fx.port);
    CU_ASSERT_FATAL(fd >= 0);
    send_request(fd, "POST", "/v1/completions", NULL,
                 "{\"prompt\": \"long\", \"max_tokens\": 100000, \"stream\": true}");
    char buf[512];
    size_t got = 0;
    while (got < 200) { /* some of the stream */
        ssize_t k = recv(fd, buf, sizeof buf, 0);
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    CU_ASSERT(got >= 200);
    close(fd);
    int seen = 0;
    for (int tries = 0; tries < 1000 && !seen; tries++) {
        seen = atomic_load(&fx.loop.cancelled_seen) >= 1;
        if (!seen)
            sleep_ms(10);
    }
    CU_ASSERT(seen);
    CU_ASSERT(metric_reaches(fx.port, "numla_requests_total{outcome=\"cancelled\"} ", 1));

    /* not streamed: nothing is written until the end, so the server must notice the close */
    fd = dial(fx.port);
    CU_ASSERT_FATAL(fd >= 0);
    send_request(fd, "POST", "/v1/completions", NULL,
                 "{\"prompt\": \"long\", \"max_tokens\": 100000}");
    for (int tries = 0; tries < 1000 && numla_http_server_in_flight(fx.s) < 1; tries++)
        sleep_ms(5);
    close(fd);
    seen = 0;
    for (int tries = 0; tries < 1000 && !seen; tries++) {
        seen = atomic_load(&fx.loop.cancelled_seen) >= 2;
        if (!seen)
            sleep_ms(10);
    }
    CU_ASSERT(seen);
    CU_ASSERT(metric_reaches(fx.port, "numla_requests_total{outcome=\"cancelled\"} ", 2));
    CU_ASSERT_EQUAL(atomic_load(&fx.loop.finished), 0);
    fixture_stop(&fx);
}

static void test_rejections(void)
{
    fixture fx;
    fixture_start(&fx, 1, "sekret", 1000);
    const char *auth = "Authorization: Bearer sekret\r\n";
    reply r = http(fx.port, "POST", "/v1/completions", NULL, "{\"prompt\": \"a\"}");
    CU_ASSERT_EQUAL(r.status, 401);
    free_reply(&r);
    r = http(fx.port, "POST", "/v1/completions", "Authorization: Bearer sekreT\r\n", "{\"prompt\": \"a\"}");
    CU_ASSERT_EQUAL(r.status, 401);
    free_reply(&r);
    r = http(fx.port, "POST", "/v1/completions", "Authorization: Bearer sekret2\r\n", "{\"prompt\": \"a\"}");
    CU_ASSERT_EQUAL(r.status, 401);
    free_reply(&r);
    r = http(fx.port, "GET", "/v1/models", NULL, NULL);
    CU_ASSERT_EQUAL(r.status, 401);
    free_reply(&r);
    r = http(fx.port, "GET", "/health", NULL, NULL); /* probes need no key */
    CU_ASSERT_EQUAL(r.status, 200);
    free_reply(&r);
    r = http(fx.port, "POST", "/v1/completions", auth, "{\"prompt\": \"a\", \"max_tokens\": 1}");
    CU_ASSERT_EQUAL(r.status, 200);
    free_reply(&r);

    /* 400s name the field */
    r = http(fx.port, "POST", "/v1/completions", auth, "{\"prompt\": \"a\", \"n\": 0}");
    CU_ASSERT_EQUAL(r.status, 400);
    json_t *o = body_json(&r);
    NUMLA_ASSERT_MSG(!strcmp(error_param(o), "n"), "param %s", error_param(o));
    EXPECT_JSTR((json_object_get(json_object_get(o, "error"), "type")), "invalid_request_error");
    json_decref(o);
    free_reply(&r);
    r = http(fx.port, "POST", "/v1/chat/completions", auth, "{\"messages\": [{\"role\": \"user\", \"content\": 1}]}");
    CU_ASSERT_EQUAL(r.status, 400);
    o = body_json(&r);
    NUMLA_ASSERT_MSG(!strcmp(error_param(o), "messages[0].content"), "param %s", error_param(o));
    json_decref(o);
    free_reply(&r);
    r = http(fx.port, "POST", "/v1/completions", auth, "{not json");
    CU_ASSERT_EQUAL(r.status, 400);
    free_reply(&r);
    /* the loop's own 400 (a prompt longer than the context), streamed or not */
    r = http(fx.port, "POST", "/v1/completions", auth, "{\"prompt\": \"FAIL\", \"stream\": true}");
    CU_ASSERT_EQUAL(r.status, 400);
    o = body_json(&r);
    NUMLA_ASSERT_MSG(!strcmp(error_param(o), "prompt"), "param %s", error_param(o));
    json_decref(o);
    free_reply(&r);

    /* 413 */
    char big[2100];
    memset(big, ' ', sizeof big - 1);
    big[sizeof big - 1] = 0;
    memcpy(big, "{\"prompt\": \"a\"}", 15);
    r = http(fx.port, "POST", "/v1/completions", auth, big);
    CU_ASSERT_EQUAL(r.status, 413);
    free_reply(&r);

    /* 429: the loop takes nothing, one job fills the queue */
    atomic_store(&fx.loop.paused, 1);
    for (int tries = 0; tries < 1000 && !atomic_load(&fx.loop.paused_ack); tries++)
        sleep_ms(10);
    int fd = dial(fx.port);
    CU_ASSERT_FATAL(fd >= 0);
    send_request(fd, "POST", "/v1/completions", auth, "{\"prompt\": \"q\", \"max_tokens\": 2}");
    for (int tries = 0; tries < 1000 && numla_http_backend_waiting(fx.b) < 1; tries++)
        sleep_ms(10);
    CU_ASSERT_EQUAL(numla_http_backend_waiting(fx.b), 1);
    r = http(fx.port, "POST", "/v1/completions", auth, "{\"prompt\": \"a\"}");
    CU_ASSERT_EQUAL(r.status, 429);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.head, "Retry-After: 1"));
    free_reply(&r);
    atomic_store(&fx.loop.paused, 0);
    char buf[4096];
    size_t got = 0;
    ssize_t k;
    while ((k = recv(fd, buf + got, sizeof buf - got - 1, 0)) > 0)
        got += (size_t)k;
    buf[got] = 0;
    close(fd);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, " 200 "));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "t0 t1 "));

    CU_ASSERT(metric_reaches(fx.port, "numla_requests_total{outcome=\"unauthorized\"} ", 4));
    CU_ASSERT(metric_reaches(fx.port, "numla_requests_total{outcome=\"too_large\"} ", 1));
    CU_ASSERT(metric_reaches(fx.port, "numla_requests_total{outcome=\"rejected\"} ", 1));
    CU_ASSERT(metric_reaches(fx.port, "numla_requests_total{outcome=\"bad_request\"} ", 4));
    CU_ASSERT(metric_reaches(fx.port, "numla_requests_total{outcome=\"ok\"} ", 2));
    CU_ASSERT(metric_reaches(fx.port, "\nnumla_generation_tokens_total ", 3));
    fixture_stop(&fx);
}

typedef struct stream_arg {
    int port;
    reply r;
} stream_arg;

static void *stream_main(void *p)
{
    stream_arg *a = p;
    a->r = http(a->port, "POST", "/v1/completions", NULL,
                "{\"prompt\": \"s\", \"max_tokens\": 40, \"stream\": true}");
    return NULL;
}

/* Stopping waits for the request in flight, which ends with [DONE]; then nothing is accepted. */
static void test_shutdown_finishes_in_flight(void)
{
    fixture fx;
    fixture_start(&fx, 64, NULL, 0);
    stream_arg a = {.port = fx.port};
    pthread_t th;
    pthread_create(&th, NULL, stream_main, &a);
    for (int tries = 0; tries < 1000 && numla_http_server_in_flight(fx.s) < 1; tries++)
        sleep_ms(5);
    CU_ASSERT_EQUAL(numla_http_server_in_flight(fx.s), 1);
    int port = fx.port;
    numla_http_server_stop(&fx.s);
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(a.r.status, 200);
    CU_ASSERT_PTR_NOT_NULL(strstr(a.r.body, "t39 "));
    CU_ASSERT_PTR_NOT_NULL(strstr(a.r.body, "data: [DONE]\n\n"));
    free_reply(&a.r);
    CU_ASSERT(dial(port) < 0); /* no longer listening */
    fixture_stop(&fx);
}

/* completions' echo: the prompt before the completion in text, and with logprobs the prompt's
 * entries first (the first null, the tokens named by id without a tokenizer), streamed (the
 * prompt's chunk first) and not; max_tokens 0 gives the prompt alone. */
static void test_echo(void)
{
    fixture fx;
    fixture_start(&fx, 64, NULL, 0);
    reply r = http(fx.port, "POST", "/v1/completions", NULL,
                   "{\"prompt\": \"hello\", \"max_tokens\": 2, \"echo\": true}");
    NUMLA_ASSERT_MSG(r.status == 200, "status %d: %s", r.status, r.body);
    json_t *o = body_json(&r);
    json_t *c0 = json_array_get(json_object_get(o, "choices"), 0);
    EXPECT_JSTR((json_object_get(c0, "text")), "hellot0 t1 ");
    CU_ASSERT(json_is_null(json_object_get(c0, "logprobs")));
    json_decref(o);
    free_reply(&r);

    r = http(fx.port, "POST", "/v1/completions", NULL,
             "{\"prompt\": [7, 8, 9], \"max_tokens\": 1, \"echo\": true, \"logprobs\": 1, "
             "\"n\": 2}");
    NUMLA_ASSERT_MSG(r.status == 200, "status %d: %s", r.status, r.body);
    o = body_json(&r);
    json_error_t je;
    json_t *want = json_loads(
        "{\"tokens\": [\"token_id:7\", \"token_id:8\", \"token_id:9\", \"token_id:0\"], "
        "\"token_logprobs\": [null, -1.0, -2.0, -1.0], \"top_logprobs\": [null, "
        "{\"token_id:9\": -0.5}, {\"token_id:10\": -0.5}, {\"token_id:0\": -1.0}], "
        "\"text_offset\": [0, 10, 20, 30]}", 0, &je);
    CU_ASSERT_PTR_NOT_NULL_FATAL(want);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(o, "choices")), 2);
    for (size_t i = 0; i < 2; i++) {
        json_t *c = json_array_get(json_object_get(o, "choices"), i);
        char *got = json_dumps(json_object_get(c, "logprobs"), JSON_COMPACT);
        NUMLA_ASSERT_MSG(json_equal(json_object_get(c, "logprobs"), want), "choice %zu: %s", i,
                         got);
        free(got);
        EXPECT_JSTR((json_object_get(c, "text")), "t0 "); /* no tokenizer: the ids' text is "" */
    }
    json_decref(o);
    free_reply(&r);

    /* max_tokens 0: the prompt's logprobs only */
    r = http(fx.port, "POST", "/v1/completions", NULL,
             "{\"prompt\": [7, 8], \"max_tokens\": 0, \"echo\": true, \"logprobs\": 0}");
    NUMLA_ASSERT_MSG(r.status == 200, "status %d: %s", r.status, r.body);
    o = body_json(&r);
    c0 = json_array_get(json_object_get(o, "choices"), 0);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(json_object_get(c0, "logprobs"), "tokens")), 2);
    CU_ASSERT(json_is_null(json_array_get(
        json_object_get(json_object_get(c0, "logprobs"), "token_logprobs"), 0)));
    EXPECT_JSTR((json_object_get(c0, "finish_reason")), "length");
    json_decref(o);
    free_reply(&r);

    /* streamed: the prompt's chunk (and its logprobs) first, then the completion's */
    for (int lp = 0; lp < 2; lp++) {
        r = http(fx.port, "POST", "/v1/completions", NULL,
                 lp ? "{\"prompt\": [7, 8, 9], \"max_tokens\": 2, \"echo\": true, \"logprobs\": 1,"
                      " \"stream\": true}"
                    : "{\"prompt\": \"hello\", \"max_tokens\": 2, \"echo\": true, \"stream\": true}");
        NUMLA_ASSERT_MSG(r.status == 200, "status %d: %s", r.status, r.body);
        int done = 0;
        json_t *ev = events(r.body, &done);
        CU_ASSERT(done);
        CU_ASSERT_FATAL(json_array_size(ev) >= 2);
        json_t *first = json_array_get(json_object_get(json_array_get(ev, 0), "choices"), 0);
        EXPECT_JSTR((json_object_get(first, "text")), lp ? "" : "hello");
        if (lp) {
            json_t *l = json_object_get(first, "logprobs");
            CU_ASSERT_EQUAL(json_array_size(json_object_get(l, "tokens")), 3);
            CU_ASSERT(json_is_null(json_array_get(json_object_get(l, "token_logprobs"), 0)));
            CU_ASSERT_DOUBLE_EQUAL(
                json_real_value(json_array_get(json_object_get(l, "token_logprobs"), 2)), -2.0, 0);
        }
        char rest[64] = "";
        for (size_t e = 1; e < json_array_size(ev); e++) {
            json_t *c = json_array_get(json_object_get(json_array_get(ev, e), "choices"), 0);
            strncat(rest, json_string_value(json_object_get(c, "text")),
                    sizeof rest - strlen(rest) - 1);
        }
        CU_ASSERT_STRING_EQUAL(rest, "t0 t1 ");
        json_decref(ev);
        free_reply(&r);
    }

    /* echo is completions' alone (chat takes false) */
    r = http(fx.port, "POST", "/v1/chat/completions", NULL,
             "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"echo\": true}");
    CU_ASSERT_EQUAL(r.status, 400);
    o = body_json(&r);
    CU_ASSERT_STRING_EQUAL(error_param(o), "echo");
    json_decref(o);
    free_reply(&r);
    r = http(fx.port, "POST", "/v1/completions", NULL, "{\"prompt\": \"a\", \"echo\": 1}");
    CU_ASSERT_EQUAL(r.status, 400);
    o = body_json(&r);
    CU_ASSERT_STRING_EQUAL(error_param(o), "echo");
    json_decref(o);
    free_reply(&r);
    json_decref(want);
    fixture_stop(&fx);
}

NUMLA_TEST_SUITE(http_server, NULL, NULL, NUMLA_TEST(test_health_and_models), NUMLA_TEST(test_echo),
                 NUMLA_TEST(test_responses),
                 NUMLA_TEST(test_reasoning_content), NUMLA_TEST(test_tool_calls),
                 NUMLA_TEST(test_completion_plain), NUMLA_TEST(test_streams),
                 NUMLA_TEST(test_token_chunks),
                 NUMLA_TEST(test_32_concurrent_clients), NUMLA_TEST(test_disconnect_cancels),
                 NUMLA_TEST(test_rejections), NUMLA_TEST(test_shutdown_finishes_in_flight))
