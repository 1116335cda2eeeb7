/* engine/http/serving_adapter.c — HTTP jobs as the serving loop's source and sink
 * (serving_adapter.h). */
#include "engine/http/serving_adapter.h"

#include "engine/http/reasoning.h"
#include "engine/text/tool_calls.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"

typedef struct adapter_held {
    numla_http_job *job;
    int cancel_sent;            /* numla_serve_loop_cancel was called for it */
    int push_failed;            /* a push ran out of memory: answer 500 */
} adapter_held;

struct numla_http_adapter {
    numla_http_adapter_options o;
    numla_serve_loop *loop;
    numla_http_job *peeked;     /* taken by wait, handed over by the next pull */
    adapter_held *held;            /* (num_held) jobs the loop has */
    int32_t num_held, cap_held;
    int ended;
    int64_t preemptions_seen;
    double t_metrics;           /* when the gauges were last set */
    int64_t line;               /* numbers the requests (the loop's messages say "line N") */
};

numla_status numla_http_adapter_create(const numla_http_adapter_options *o, numla_http_adapter **out)
{
    *out = NULL;
    if (!o->backend)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "HTTP adapter: no backend");
    numla_http_adapter *g = calloc(1, sizeof *g);
    if (!g)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for the HTTP adapter");
    g->o = *o;
    if (g->o.wait_ms <= 0)
        g->o.wait_ms = 50;
    /* the tool-call and think tags are read back out of the text: decode them even where the
     * tokenizer marks them special (Kimi's are) */
    const numla_tool_syntax *ts =
        o->chat ? numla_tool_syntax_for_template(numla_chat_template_name(o->chat)) : NULL;
    const char *markers[NUMLA_TOOL_SYNTAX_MAX_MARKERS];
    const int num_markers = ts && o->tokenizer ? numla_tool_syntax_markers(ts, markers) : 0;
    for (int k = 0; k < num_markers; k++)
        numla_tokenizer_keep_in_text(o->tokenizer, markers[k]);
    if (o->chat && o->tokenizer && numla_chat_template_thinks(o->chat)) {
        numla_tokenizer_keep_in_text(o->tokenizer, "<think>");
        numla_tokenizer_keep_in_text(o->tokenizer, "</think>");
    }
    *out = g;
    return NUMLA_STATUS_OK;
}

static void release_failed(numla_http_job **j, int status, const char *why)
{
    numla_http_job_fail(*j, status, why, NULL);
    numla_http_job_release(j);
}

void numla_http_adapter_destroy(numla_http_adapter **gp)
{
    numla_http_adapter *g = *gp;
    if (!g)
        return;
    *gp = NULL;
    if (g->peeked)
        release_failed(&g->peeked, 503, "the server stopped");
    for (int32_t i = 0; i < g->num_held; i++)
        release_failed(&g->held[i].job, 503, "the server stopped before the request finished");
    free(g->held);
    free(g);
}

void numla_http_adapter_set_loop(numla_http_adapter *g, numla_serve_loop *loop)
{
    g->loop = loop;
}

void numla_http_adapter_end(numla_http_adapter *g)
{
    g->ended = 1;
}

int32_t numla_http_adapter_held(const numla_http_adapter *g)
{
    return g->num_held;
}

static adapter_held *held_find(numla_http_adapter *g, const numla_http_job *j)
{
    for (int32_t i = 0; i < g->num_held; i++)
        if (g->held[i].job == j)
            return &g->held[i];
    return NULL;
}

static void held_remove(numla_http_adapter *g, const numla_http_job *j)
{
    for (int32_t i = 0; i < g->num_held; i++)
        if (g->held[i].job == j) {
            g->held[i] = g->held[--g->num_held];
            return;
        }
}

/* ---- the source ---- */

/* The prompt of job j as token ids into req; 0 when it is there, else the job was failed (the
 * status and message set in *status, *msg, *param). */
typedef struct adapter_refusal {
    int status;
    char msg[512];
    const char *param;
    char param_buf[96];         /* param points here when it names one message's field */
} adapter_refusal;

/* A 400 naming `field` (copied); returns OK so callers can `return refuse(...)`. */
static numla_status refuse(adapter_refusal *no, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static numla_status refuse(adapter_refusal *no, const char *field, const char *fmt, ...)
{
    *no = (adapter_refusal){.status = 400};
    snprintf(no->param_buf, sizeof no->param_buf, "%s", field);
    no->param = no->param_buf;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(no->msg, sizeof no->msg, fmt, ap);
    va_end(ap);
    return NUMLA_STATUS_OK;
}

/* What the request asks of the chat template that it cannot render: tools, tool calls, tool
 * messages, the thinking switch and a reasoning_effort it does not know, each where the family's row says its template has none
 * (engine/text/chat_template.c; the thinking templates without a switch always think, the
 * rest never do). Returns 1 with *no filled when refused. */
static int chat_unsupported(const numla_chat_template *t, const numla_openai_request *r,
                            adapter_refusal *no)
{
    const char *name = numla_chat_template_name(t);
    const int declares = numla_chat_template_can(t, NUMLA_CHAT_CAN_DECLARE_TOOLS),
              calls = numla_chat_template_can(t, NUMLA_CHAT_CAN_WRITE_TOOL_CALLS),
              results = numla_chat_template_can(t, NUMLA_CHAT_CAN_WRITE_TOOL_RESULTS);
    if (r->tools_json && !declares) {
        refuse(no, "tools", "'tools' cannot be given to this model: its %s chat template does not "
               "declare tools%s", name, calls ? " (describe them in the system message)" : "");
        return 1;
    }
    for (int32_t i = 0; i < r->num_messages; i++) {
        const numla_openai_message *m = &r->messages[i];
        char field[64];
        if (m->has_tool_calls && !calls) {
            snprintf(field, sizeof field, "messages[%d].tool_calls", (int)i);
            refuse(no, field, "'%s' cannot be given to this model: its %s chat template does not "
                   "write tool calls", field, name);
            return 1;
        }
        if (m->role == NUMLA_OPENAI_ROLE_TOOL && !results) {
            snprintf(field, sizeof field, "messages[%d].role", (int)i);
            refuse(no, field, "'%s' \"tool\" cannot be given to this model: its %s chat "
                   "template does not write tool messages", field, name);
            return 1;
        }
    }
    if (r->thinking >= 0 && !numla_chat_template_can(t, NUMLA_CHAT_CAN_SWITCH_THINKING)) {
        const int thinks = numla_chat_template_thinks(t);
        if (r->thinking != thinks) {
            refuse(no, "chat_template_kwargs.thinking", "'chat_template_kwargs.thinking' cannot "
                   "be %s for this model: its %s chat template %s", r->thinking ? "true" : "false",
                   name, thinks ? "always thinks" : "has no thinking mode");
            return 1;
        }
    }
    if (r->reasoning_effort) {
        const char *const *known = numla_chat_template_reasoning_efforts(t), *const *e = known;
        while (*e && strcmp(*e, r->reasoning_effort))
            e++;
        if (!known[0]) {
            refuse(no, "reasoning_effort", "'reasoning_effort' cannot be given to this model: "
                   "its %s chat template has no reasoning effort", name);
            return 1;
        }
        if (!*e) {
            char list[96] = "";
            for (e = known; *e; e++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s\"%s\"",
                         e == known ? "" : e[1] ? ", " : " or ", *e);
            refuse(no, "reasoning_effort", "'reasoning_effort' \"%.40s\" is not one this "
                   "model's %s chat template knows (%s)", r->reasoning_effort, name, list);
            return 1;
        }
    }
    return 0;
}

static numla_status encode(numla_http_adapter *g, const char *text, size_t len, int add_special,
                           numla_request *req, adapter_refusal *no, const char *param)
{
    int32_t *ids = NULL;
    int64_t n = 0;
    numla_status s = numla_tokenizer_encode(g->o.tokenizer, text, len, add_special, &ids, &n);
    if (s == NUMLA_STATUS_NO_MEMORY)
        return s;
    if (s != NUMLA_STATUS_OK) {
        free(ids);
        *no = (adapter_refusal){.status = 400, .param = param};
        snprintf(no->msg, sizeof no->msg, "'%s' cannot be encoded: %s", param,
                 numla_error_message());
        return NUMLA_STATUS_OK;
    }
    if (n > INT32_MAX) {
        free(ids);
        *no = (adapter_refusal){.status = 400, .param = param};
        snprintf(no->msg, sizeof no->msg, "'%s' is too long", param);
        return NUMLA_STATUS_OK;
    }
    req->prompt_tokens = ids;
    req->num_prompt = (int32_t)n;
    return NUMLA_STATUS_OK;
}

static numla_status chat_prompt(numla_http_adapter *g, const numla_openai_request *r,
                                numla_request *req, adapter_refusal *no, int *reasoning_mode)
{
    static const char *const roles[] = {"system", "user", "assistant", "tool"};
    if (!g->o.chat || !g->o.tokenizer) {
        *no = (adapter_refusal){.status = 400, .param = "messages"};
        snprintf(no->msg, sizeof no->msg, "this model has no %s; chat completions are not "
                 "served (start numla serve with --chat-template NAME)",
                 g->o.tokenizer ? "chat template" : "tokenizer.json");
        return NUMLA_STATUS_OK;
    }
    if (chat_unsupported(g->o.chat, r, no))
        return NUMLA_STATUS_OK;
    size_t num_calls = 0;
    for (int32_t i = 0; i < r->num_messages; i++)
        num_calls += (size_t)r->messages[i].num_tool_calls;
    const size_t n = r->num_messages > 0 ? (size_t)r->num_messages : 0; /* >= 1 once parsed */
    numla_chat_message *m = calloc(n + 1, sizeof *m);
    numla_chat_tool_call *calls = calloc(num_calls + 1, sizeof *calls);
    if (!m || !calls) {
        free(m);
        free(calls);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for %d chat messages", r->num_messages);
    }
    numla_chat_tool_call *c = calls;
    for (int32_t i = 0; i < r->num_messages; i++) {
        const numla_openai_message *om = &r->messages[i];
        m[i] = (numla_chat_message){.role = roles[om->role],
                                    .content = om->content,
                                    .has_tool_calls = om->has_tool_calls,
                                    .name = om->name,
                                    .tool_call_id = om->tool_call_id,
                                    .reasoning_content = om->reasoning_content,
                                    .num_tool_calls = om->num_tool_calls,
                                    .tool_calls = c};
        for (int32_t k = 0; k < om->num_tool_calls; k++)
            *c++ = (numla_chat_tool_call){.id = om->tool_calls[k].id,
                                          .name = om->tool_calls[k].name,
                                          .arguments = om->tool_calls[k].arguments};
    }
    /* V3.1's switch (chat_template_kwargs.thinking) is off unless asked for, as in its template */
    const int tok = r->endpoint == NUMLA_OPENAI_TOKENIZE; /* its own two switches */
    /* a reasoning effort asks for thinking unless the request turned it off */
    const int thinking = r->thinking >= 0 ? r->thinking : r->reasoning_effort ? 1 : -1;
    numla_chat_options opts = {.add_generation_prompt = tok ? r->add_generation_prompt : 1,
                               .thinking = thinking > 0, .thinking_given = thinking >= 0,
                               .tools_json = r->tools_json,
                               .reasoning_effort = r->reasoning_effort};
    char *text = NULL;
    size_t len = 0;
    numla_status s = numla_chat_template_render_opts(g->o.chat, m, r->num_messages, &opts, &text,
                                                     &len);
    free(m);
    free(calls);
    if (s == NUMLA_STATUS_NO_MEMORY)
        return s;
    if (s != NUMLA_STATUS_OK) {
        *no = (adapter_refusal){.status = 400, .param = "messages"};
        snprintf(no->msg, sizeof no->msg, "%s", numla_error_message());
        return NUMLA_STATUS_OK;
    }
    /* Kimi ends a turn with <|im_end|>, GLM-5 with <|user|> or <|observation|>, not with the
     * EOS: stop there too (unless ignore_eos) */
    numla_sampling_params *sp = &req->params;
    for (const char *const *st = numla_chat_template_stop_tokens(g->o.chat); *st; st++) {
        const int32_t eot_id = numla_tokenizer_token_id(g->o.tokenizer, *st);
        int have = 0;
        for (int32_t k = 0; k < sp->num_stop; k++)
            have |= sp->stop_token_ids[k] == eot_id;
        if (eot_id >= 0 && !sp->ignore_eos && !have && sp->num_stop < NUMLA_SAMPLER_MAX_STOP)
            sp->stop_token_ids[sp->num_stop++] = eot_id;
    }
    /* a thinking model's reasoning is split off as reasoning_content (reasoning.h) */
    *reasoning_mode = numla_chat_template_thinks(g->o.chat)
                          ? (int)numla_http_reasoning_mode_of_prompt(text, len)
                          : (int)NUMLA_HTTP_REASONING_OFF;
    /* the rendered text holds the BOS token already */
    s = encode(g, text, len, tok && r->add_special, req, no, "messages");
    free(text);
    return s;
}

static numla_status job_request(numla_http_adapter *g, numla_http_job *j, numla_request *req,
                                adapter_refusal *no)
{
    const numla_openai_request *r = numla_http_job_request(j);
    const numla_openai_prompt *p = numla_http_job_prompt(j);
    const char *what = r->endpoint == NUMLA_OPENAI_CHAT ? "messages" : "prompt";
    req->line = ++g->line;
    req->params = r->params;
    if (r->n > 1 && req->params.has_seed) /* choice j of a seeded request: its own stream */
        req->params.seed += (uint64_t)(j->index % r->n);
    req->text_output = g->o.tokenizer != NULL;
    if (r->echo && r->params.logprobs >= 0) { /* the echoed prompt's logprobs */
        req->prompt_logprobs = 1;
        req->prompt_logprobs_top = r->params.logprobs;
    }
    if (r->grammar && !g->o.tokenizer) {
        *no = (adapter_refusal){.status = 400, .param = "response_format"};
        snprintf(no->msg, sizeof no->msg, "'response_format' needs the model's tokenizer.json "
                 "(the grammar reads the tokens' bytes)");
        return NUMLA_STATUS_OK;
    }
    if (r->grammar) /* each choice's sampler follows it (a reference per request) */
        req->grammar = numla_grammar_ref(r->grammar);
    if (r->endpoint == NUMLA_OPENAI_CHAT) {
        NUMLA_CHECK(chat_prompt(g, r, req, no, &j->reasoning_mode));
        if (req->grammar) /* constrained from the first token: the output is the document, never
                             reasoning (no "</think>" can come to end it) */
            j->reasoning_mode = NUMLA_HTTP_REASONING_OFF;
        j->tool_syntax = g->o.chat ? numla_tool_syntax_for_template(
                                         numla_chat_template_name(g->o.chat))
                                   : NULL;
    } else if (p->tokens) {
        req->prompt_tokens = malloc(((size_t)p->num_tokens + 1) * sizeof *req->prompt_tokens);
        if (!req->prompt_tokens)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for a prompt of %d tokens",
                       p->num_tokens);
        memcpy(req->prompt_tokens, p->tokens, (size_t)p->num_tokens * sizeof *p->tokens);
        req->num_prompt = p->num_tokens;
    } else if (!g->o.tokenizer) {
        *no = (adapter_refusal){.status = 400, .param = "prompt"};
        snprintf(no->msg, sizeof no->msg, "this model has no tokenizer.json: send the prompt "
                 "as token ids");
    } else {
        NUMLA_CHECK(encode(g, p->text, p->text_len, 1, req, no, "prompt"));
    }
    if (no->status)
        return NUMLA_STATUS_OK;
    /* the one check against the context (engine/serving/request_io.h) */
    numla_request_field_error fe;
    if (!numla_request_fit_context(req->num_prompt, r->max_tokens_given, g->o.max_context,
                                   &req->params, &fe)) {
        const int is_prompt = !strcmp(fe.field, "prompt");
        *no = (adapter_refusal){.status = 400, .param = is_prompt ? what : "max_tokens"};
        if (is_prompt)
            snprintf(no->msg, sizeof no->msg, "the %s %s", what, fe.what);
        else
            snprintf(no->msg, sizeof no->msg, "'max_tokens' %s", fe.what);
    }
    return NUMLA_STATUS_OK;
}

/* POST /tokenize: the job's prompt or messages as the generation endpoints encode them, on
 * the loop's thread (the tokenizer's scratch is not shared), pushed as the job's tokens and
 * finished at once; never a request of the loop. Only running out of memory is an error. */
static numla_status tokenize_job(numla_http_adapter *g, numla_http_job *j)
{
    const numla_openai_request *r = numla_http_job_request(j);
    const numla_openai_prompt *p = numla_http_job_prompt(j);
    numla_request req = {0};
    adapter_refusal no = {0};
    numla_status s = NUMLA_STATUS_OK;
    if (!g->o.tokenizer) {
        refuse(&no, p ? "prompt" : "messages", "this model has no tokenizer.json: nothing to "
               "tokenize with");
    } else if (!p) {
        int mode;
        s = chat_prompt(g, r, &req, &no, &mode);
    } else {
        s = encode(g, p->text, p->text_len, r->add_special, &req, &no, "prompt");
    }
    if (s != NUMLA_STATUS_OK)
        release_failed(&j, 500, "the server ran out of memory");
    else if (no.status) {
        numla_http_job_fail(j, no.status, no.msg, no.param);
        numla_http_job_release(&j);
    } else if (numla_http_job_push(j, req.prompt_tokens, req.num_prompt, NULL, 0, NULL) !=
             NUMLA_STATUS_OK)
        release_failed(&j, 500, "the server ran out of memory for the tokens");
    else {
        numla_http_job_finish(j, "stop", 0, 0); /* no usage: nothing was generated */
        numla_http_job_release(&j);
    }
    numla_request_free(&req);
    return s;
}

static numla_status adapter_next(void *ctx, numla_request *req, void **user, numla_serve_pull *what)
{
    numla_http_adapter *g = ctx;
    for (;;) {
        numla_http_job *j = g->peeked ? g->peeked : numla_http_backend_next(g->o.backend, 0);
        g->peeked = NULL;
        if (!j) {
            *what = g->ended ? NUMLA_SERVE_PULL_END : NUMLA_SERVE_PULL_NONE;
            return NUMLA_STATUS_OK;
        }
        if (numla_http_job_cancelled(j)) { /* the client left while it waited */
            numla_http_job_finish(j, "stop", 0, 0);
            numla_http_job_release(&j);
            continue;
        }
        if (numla_http_job_request(j)->endpoint == NUMLA_OPENAI_TOKENIZE) {
            NUMLA_CHECK(tokenize_job(g, j));
            continue;
        }
        if (g->num_held == g->cap_held) {
            int32_t cap = g->cap_held ? 2 * g->cap_held : 64;
            adapter_held *h = realloc(g->held, (size_t)cap * sizeof *h);
            if (!h) {
                g->peeked = j;
                NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for the requests in flight");
            }
            g->held = h;
            g->cap_held = cap;
        }
        adapter_refusal no = {0};
        numla_status s = job_request(g, j, req, &no);
        if (s != NUMLA_STATUS_OK || no.status) {
            numla_request_free(req);
            memset(req, 0, sizeof *req);
            if (s != NUMLA_STATUS_OK) {
                release_failed(&j, 500, "the server ran out of memory");
                return s;
            }
            numla_http_job_fail(j, no.status, no.msg, no.param);
            numla_http_job_release(&j);
            continue;
        }
        g->held[g->num_held++] = (adapter_held){.job = j};
        *user = j;
        *what = NUMLA_SERVE_PULL_REQUEST;
        return NUMLA_STATUS_OK;
    }
}

static void adapter_wait(void *ctx)
{
    numla_http_adapter *g = ctx;
    if (!g->peeked && !g->ended)
        g->peeked = numla_http_backend_next(g->o.backend, g->o.wait_ms);
}

/* ---- the sink ---- */

static void adapter_token(void *ctx, void *user, const numla_serve_token *t)
{
    numla_http_adapter *g = ctx;
    numla_http_job *j = user;
    if (numla_http_job_push(j, &t->token, 1, t->text, t->text ? t->text_len : 0, t->logprob) !=
        NUMLA_STATUS_OK) {
        adapter_held *h = held_find(g, j);
        if (h)
            h->push_failed = 1;
        if (g->loop)
            numla_serve_loop_cancel(g->loop, j);
    }
}

/* A message of the loop without its "line N: " prefix (the client has no lines). */
static const char *no_line(const char *e)
{
    if (e && !strncmp(e, "line ", 5)) {
        const char *c = strstr(e, ": ");
        if (c)
            return c + 2;
    }
    return e;
}

static numla_status adapter_done(void *ctx, void *user, const numla_serve_done *d)
{
    numla_http_adapter *g = ctx;
    numla_http_job *j = user;
    adapter_held *h = held_find(g, j);
    const int push_failed = h && h->push_failed;
    const numla_result *res = &d->result;
    if (push_failed) {
        numla_http_job_fail(j, 500, "the server ran out of memory for the output", NULL);
    } else if (res->error) {
        const char *e = no_line(res->error);
        numla_http_job_fail(j, strstr(e, "engine step failed") ? 500 : 400, e, NULL);
    } else {
        if (d->text_tail_len > 0 &&
            numla_http_job_push(j, NULL, 0, d->text_tail, d->text_tail_len, NULL) !=
                NUMLA_STATUS_OK)
            numla_http_job_fail(j, 500, "the server ran out of memory for the output", NULL);
        numla_http_job_set_cached_tokens(j, res->cached_tokens);
        if (res->speculative)
            numla_http_job_set_speculative(j, res->spec_steps, res->spec_drafted,
                                           res->spec_accepted);
        if (res->prompt_logprobs && res->req &&
            numla_http_job_set_prompt_logprobs(j, res->prompt_logprobs, res->req->num_prompt) !=
                NUMLA_STATUS_OK)
            numla_http_job_fail(j, 500, "the server ran out of memory for the output", NULL);
        numla_http_job_finish(j, d->cancelled ? "stop" : res->finish_reason,
                              res->req ? res->req->num_prompt : 0, res->num_output);
    }
    held_remove(g, j);
    numla_http_job_release(&j);
    return NUMLA_STATUS_OK;
}

numla_serve_source numla_http_adapter_source(numla_http_adapter *g)
{
    return (numla_serve_source){.ctx = g, .next = adapter_next, .wait = adapter_wait};
}

numla_serve_sink numla_http_adapter_sink(numla_http_adapter *g)
{
    return (numla_serve_sink){.ctx = g, .token = adapter_token, .done = adapter_done};
}

void numla_http_adapter_poll(numla_http_adapter *g)
{
    if (!g->loop)
        return;
    for (int32_t i = 0; i < g->num_held; i++)
        if (!g->held[i].cancel_sent && numla_http_job_cancelled(g->held[i].job)) {
            g->held[i].cancel_sent = 1;
            numla_serve_loop_cancel(g->loop, g->held[i].job);
        }
    /* the loop's figures cost a sort of its latency samples: at most 10 times a second */
    const double now = numla_now_s();
    if (!g->o.metrics || now - g->t_metrics < 0.1)
        return;
    g->t_metrics = now;
    numla_serve_stats st;
    numla_serve_loop_stats_get(g->loop, &st);
    const numla_sched_stats *sc = &st.sched;
    numla_http_metrics_set_engine(g->o.metrics, sc->running, sc->kv_blocks_used,
                                  sc->kv_blocks_total - sc->kv_blocks_used);
    numla_http_metrics_set_waiting(g->o.metrics,
                                   (int64_t)sc->waiting +
                                       numla_http_backend_waiting(g->o.backend) +
                                       (g->peeked != NULL));
    const numla_http_prefix_figures pf = {
        .queried_tokens = sc->prefix_lookup_tokens, .hit_tokens = sc->prefix_hit_tokens,
        .prompt_cached = sc->cached_prompt_tokens, .prompt_computed = sc->prefill_tokens,
        .blocks_in_use = sc->kv_blocks_cached - sc->kv_blocks_cached_idle,
        .blocks_idle = sc->kv_blocks_cached_idle};
    numla_http_metrics_set_prefix(g->o.metrics, &pf);
    const numla_http_spec_figures sf = {.enabled = g->o.speculative,
                                        .verify_steps = sc->spec_steps,
                                        .draft_tokens = sc->spec_drafted,
                                        .accepted_tokens = sc->spec_accepted,
                                        .mtp_steps = sc->mtp_steps};
    numla_http_metrics_set_speculative(g->o.metrics, &sf);
    if (sc->preemptions > g->preemptions_seen) {
        numla_http_metrics_add_preemptions(g->o.metrics, sc->preemptions - g->preemptions_seen);
        g->preemptions_seen = sc->preemptions;
    }
}
