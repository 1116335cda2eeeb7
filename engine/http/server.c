/* engine/http/server.c — the libmicrohttpd front end (see server.h). */
#define _GNU_SOURCE /* POLLRDHUP, vasprintf */
#include "engine/http/server.h"

#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/strbuf.h"
#include "engine/http/emitter.h"
#include "engine/http/reasoning.h"
#include "engine/http/responses.h"
#include "engine/text/tool_calls.h"

enum { NUMLA_HTTP_WAIT_MS = 100 }; /* how often a waiting thread looks for a gone client */

struct numla_http_server {
    struct MHD_Daemon *daemon;
    numla_http_backend *backend;
    numla_http_metrics *metrics;
    numla_http_server_options opt;
    char *host, *api_key, *model_name;
    char **names;               /* (num_names) the served names split out of model_name */
    int num_names;
    int port;
    int64_t started;            /* Unix seconds */
    pthread_mutex_t mu;
    pthread_cond_t cv;          /* signalled when in_flight drops */
    int ready, stopping;
    int32_t in_flight;
    uint64_t next_id;
};

typedef enum route {
    ROUTE_NONE,
    ROUTE_COMPLETIONS,
    ROUTE_CHAT,
    ROUTE_TOKENIZE,             /* vLLM's /tokenize: encoded on the loop's thread */
    ROUTE_DETOKENIZE,           /* vLLM's /detokenize: decoded here (decoding is thread-safe) */
    ROUTE_RESPONSES,            /* /v1/responses: a chat request, answered in its own shapes */
} route;

/* Per job, what this connection has taken from it so far. */
typedef struct job_view {
    numla_http_emitter *emitter;
    int32_t tokens_seen;        /* tokens consumed */
    int32_t logprobs_sent;      /* tokens whose logprobs went out */
    size_t text_seen;           /* pushed bytes consumed */
    int text_done;              /* the final text (and finish_reason) is out */
    int engine_done;            /* the loop finished it; usage known */
    char finish_reason[16];
    numla_strbuf text;          /* non-streamed: accumulated output */
    int reasoning_ready;        /* reasoning below was set up (at the job's first output) */
    numla_http_reasoning *reasoning; /* chat of a thinking model, else NULL (reasoning.h) */
    numla_strbuf rtext;         /* non-streamed: accumulated reasoning */
    numla_tool_calls *tools;    /* chat of a template family with a tool-call syntax: the
                                   calls read out of the content (tool_calls.h), else NULL */
    int echo_ready;             /* echo below holds the prompt's text */
    int echo_sent;              /* streamed: the echoed prompt's chunk is out */
    numla_strbuf echo;          /* completions' echo: the prompt's text */
} job_view;

typedef struct conn {
    numla_http_server *s;
    route route;
    numla_strbuf body;          /* the request body as it arrives */
    int too_large;
    int fd;
    numla_http_call *call;
    job_view *views;            /* (call->num_jobs) */
    int counted;                /* counted in s->in_flight */
    int role_sent, usage_sent, done_sent, failed;
    char id[48];
    int64_t created;
    numla_strbuf out;           /* streamed bytes for libmicrohttpd, handed over from out_pos */
    size_t out_pos;
    numla_http_outcome outcome;
    int has_outcome;
    numla_responses_stream rs;  /* /v1/responses streamed: its events so far */
} conn;

/* A chat request (chat completions, or the Responses API over it). */
static int is_chat(const conn *c)
{
    return c->route == ROUTE_CHAT || c->route == ROUTE_RESPONSES;
}

/* ---- small helpers ---- */

static int secret_equal(const char *given, const char *expected)
{
    size_t lg = strlen(given), le = strlen(expected);
    unsigned diff = lg != le;
    /* Every byte of the expected value is compared whatever the given one holds, so the time
     * depends only on the key's length. */
    for (size_t i = 0; i < le; i++)
        diff |= (unsigned)((unsigned char)(i < lg ? given[i] : 0) ^ (unsigned char)expected[i]);
    return diff == 0;
}

static int client_gone(int fd)
{
    if (fd < 0)
        return 0;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

static void set_outcome(conn *c, numla_http_outcome o)
{
    if (!c->has_outcome) {
        c->outcome = o;
        c->has_outcome = 1;
    }
}

static enum MHD_Result respond(struct MHD_Connection *mc, unsigned status, char *body,
                               const char *content_type, const char *retry_after)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(body ? strlen(body) : 0, body,
                                                             MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    if (retry_after)
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, retry_after);
    enum MHD_Result ok = MHD_queue_response(mc, status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result respond_error(conn *c, struct MHD_Connection *mc,
                                     const numla_openai_error *given)
{
    numla_openai_error mapped = *given;
    const numla_openai_error *err = &mapped;
    if (c->route == ROUTE_RESPONSES) /* the loop's refusals name chat's fields */
        numla_responses_error_param(&mapped);
    char *body = NULL;
    if (numla_openai_format_error(err, &body) != NUMLA_STATUS_OK)
        return MHD_NO;
    numla_http_outcome o = err->status == 401   ? NUMLA_HTTP_OUTCOME_UNAUTHORIZED
                           : err->status == 413 ? NUMLA_HTTP_OUTCOME_TOO_LARGE
                           : err->status == 429 || err->status == 503
                               ? NUMLA_HTTP_OUTCOME_REJECTED
                           : err->status >= 400 && err->status < 500
                               ? NUMLA_HTTP_OUTCOME_BAD_REQUEST
                               : NUMLA_HTTP_OUTCOME_ERROR;
    set_outcome(c, o);
    return respond(mc, (unsigned)err->status, body, "application/json",
                   err->status == 429 ? "1" : NULL);
}

static enum MHD_Result respond_json_text(struct MHD_Connection *mc, unsigned status,
                                         const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static enum MHD_Result respond_json_text(struct MHD_Connection *mc, unsigned status,
                                         const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *body = NULL;
    int n = vasprintf(&body, fmt, ap);
    va_end(ap);
    if (n < 0)
        return MHD_NO;
    return respond(mc, status, body, "application/json", NULL);
}

static int out_append(conn *c, const char *s, size_t n)
{
    return numla_strbuf_append(&c->out, s, n) == NUMLA_STATUS_OK;
}

static int append_buf(numla_strbuf *b, const char *s, size_t n)
{
    return numla_strbuf_append(b, s, n) == NUMLA_STATUS_OK;
}

/* Job i's reasoning splitter, set up at its first output from the mode the loop gave the job
 * (chat only). Returns 0 on no memory. */
static int view_reasoning(conn *c, int32_t i)
{
    job_view *v = &c->views[i];
    if (v->reasoning_ready)
        return 1;
    v->reasoning_ready = 1;
    /* tool_choice "none": no call is read out; one naming a function: the output is its
     * arguments (constrained by their schema), wrapped as the call */
    const numla_openai_request *rq = &c->call->req;
    const numla_tool_syntax *ts = is_chat(c) && !rq->tool_choice_none
                                      ? c->call->jobs[i].tool_syntax
                                      : NULL;
    const int forced =
        is_chat(c) && (rq->tool_choice_name || rq->tool_choice_required);
    if (ts || forced) {
        uint64_t seed = 1469598103934665603ull; /* the call ids follow from the reply's id */
        for (const char *p = c->id; *p; p++)
            seed = (seed ^ (unsigned char)*p) * 1099511628211ull;
        seed += (uint64_t)i * 7919;
        if ((forced ? numla_tool_calls_create_forced(rq->tool_choice_name, seed, &v->tools)
                    : numla_tool_calls_create(ts, rq->tools_json, seed, &v->tools)) !=
            NUMLA_STATUS_OK)
            return 0;
    }
    int mode = is_chat(c) ? c->call->jobs[i].reasoning_mode : 0;
    if (mode == NUMLA_HTTP_REASONING_OFF)
        return 1;
    if (numla_http_reasoning_create((numla_http_reasoning_mode)mode, &v->reasoning) !=
        NUMLA_STATUS_OK)
        return 0;
    return 1;
}

/* The content events of a tool-call parser's push or finish onto b. */
static int append_events(numla_strbuf *b, const numla_tool_event *ev, int32_t ne,
                         const char *base)
{
    for (int32_t e = 0; e < ne; e++)
        if (ev[e].call < 0 && !append_buf(b, base + ev[e].off, ev[e].len))
            return 0;
    return 1;
}

/* Non-streamed: content of job i, its tool calls read out (final: the end of the content;
 * the finish_reason becomes "tool_calls" when the model ended with calls). */
static int append_content(job_view *v, const char *t, size_t tl, int final)
{
    if (!v->tools)
        return append_buf(&v->text, t, tl);
    const numla_tool_event *ev;
    int32_t ne;
    const char *base;
    if (numla_tool_calls_push(v->tools, t, tl, &ev, &ne, &base) != NUMLA_STATUS_OK ||
        !append_events(&v->text, ev, ne, base))
        return 0;
    if (!final)
        return 1;
    if (numla_tool_calls_finish(v->tools, &ev, &ne, &base) != NUMLA_STATUS_OK ||
        !append_events(&v->text, ev, ne, base))
        return 0;
    const char *fr = numla_tool_calls_finish_reason(v->tools, v->finish_reason);
    if (fr != v->finish_reason)
        snprintf(v->finish_reason, sizeof v->finish_reason, "%s", fr);
    return 1;
}

/* Non-streamed: final text of job i, its reasoning split off (final: the end of the text). */
static int append_text_final(job_view *v, const char *s, size_t n, int final)
{
    if (!v->reasoning)
        return append_content(v, s, n, final);
    const char *r, *t;
    size_t rl, tl;
    if (numla_http_reasoning_push(v->reasoning, s, n, &r, &rl, &t, &tl) != NUMLA_STATUS_OK ||
        !append_buf(&v->rtext, r, rl) ||
        !append_content(v, t, tl, 0))
        return 0;
    if (final &&
        (numla_http_reasoning_finish(v->reasoning, &r, &rl, &t, &tl) != NUMLA_STATUS_OK ||
         !append_buf(&v->rtext, r, rl) ||
         !append_content(v, t, tl, 1)))
        return 0;
    return 1;
}

static numla_openai_reply reply_of(const conn *c);

/* Job i's prompt text for completions' echo: as sent, or a token-id prompt decoded with the
 * model's tokenizer (none: empty, the logprobs still name the tokens). 0: no memory. */
static int view_echo(conn *c, int32_t i)
{
    job_view *v = &c->views[i];
    if (v->echo_ready)
        return 1;
    v->echo_ready = 1;
    const numla_openai_prompt *p = numla_http_job_prompt(&c->call->jobs[i]);
    if (!p)
        return 1;
    if (p->text)
        return append_buf(&v->echo, p->text, p->text_len);
    if (!c->s->opt.tokenizer || p->num_tokens == 0)
        return 1;
    char *t = NULL;
    size_t n = 0;
    if (numla_tokenizer_decode(c->s->opt.tokenizer, p->tokens, p->num_tokens, 0, &t, &n) !=
        NUMLA_STATUS_OK) {
        numla_error_clear(); /* ids were checked against the vocabulary: none is unknown */
        return 1;
    }
    int ok = append_buf(&v->echo, t, n);
    free(t);
    return ok;
}

/* Streamed echo: job i's prompt as its first chunk (with its logprobs when asked). */
static int stream_echo(conn *c, int32_t i)
{
    numla_http_job *j = &c->call->jobs[i];
    job_view *v = &c->views[i];
    if (!view_echo(c, i))
        return 0;
    numla_openai_reply r = reply_of(c);
    numla_openai_choice ch = {.text = numla_strbuf_str(&v->echo), .text_len = v->echo.len};
    if (c->call->req.params.logprobs >= 0) {
        static const numla_logprob_entry none;
        ch.logprobs = j->prompt_logprobs ? j->prompt_logprobs : &none;
        ch.num_logprobs = j->num_prompt_logprobs;
    }
    char *s = NULL;
    if (numla_openai_format_chunk(&r, i, &ch, 0, &s) != NUMLA_STATUS_OK)
        return 0;
    int ok = out_append(c, s, strlen(s));
    free(s);
    return ok;
}

static numla_openai_reply reply_of(const conn *c)
{
    const char *asked = c->call ? c->call->req.model : NULL; /* one of the served names */
    return (numla_openai_reply){.endpoint = is_chat(c) ? NUMLA_OPENAI_CHAT
                                                       : NUMLA_OPENAI_COMPLETIONS,
                                .id = c->id,
                                .created = c->created,
                                .model = asked ? asked : c->s->names[0],
                                .tokenizer = c->call && c->call->req.tokens_as_ids
                                                 ? NULL
                                                 : c->s->opt.tokenizer};
}

/* 1 when name is one of the served names. */
static int served_name(const numla_http_server *s, const char *name)
{
    for (int i = 0; i < s->num_names; i++)
        if (!strcmp(s->names[i], name))
            return 1;
    return 0;
}

static int stream_chunk_split(conn *c, int32_t i, const char *text, size_t len,
                              const char *reasoning, size_t reasoning_len, const char *finish,
                              const numla_tool_call_out *call, int32_t call_index, int first);

/* Chunks of job i's events (content, calls) after its reasoning r; a call gives two chunks:
 * id, type, name and arguments "", then its arguments. *sent counts the chunks. */
static int stream_events(conn *c, int32_t i, const numla_tool_event *ev, int32_t ne,
                         const char *base, const char *r, size_t rl, int *sent)
{
    job_view *v = &c->views[i];
    for (int32_t e = 0; e < ne; e++) {
        if (ev[e].call < 0) {
            if (!stream_chunk_split(c, i, base + ev[e].off, ev[e].len, r, rl, NULL, NULL, 0, 0))
                return 0;
        } else {
            const numla_tool_call_out *t = numla_tool_calls_get(v->tools, ev[e].call);
            if ((rl && !stream_chunk_split(c, i, "", 0, r, rl, NULL, NULL, 0, 0)) ||
                !stream_chunk_split(c, i, "", 0, NULL, 0, NULL, t, ev[e].call, 1) ||
                !stream_chunk_split(c, i, "", 0, NULL, 0, NULL, t, ev[e].call, 0))
                return 0;
        }
        r = NULL;
        rl = 0;
        ++*sent;
    }
    if (rl) {
        ++*sent;
        return stream_chunk_split(c, i, "", 0, r, rl, NULL, NULL, 0, 0);
    }
    return 1;
}

/* SSE chunks for job i's content t (after the reasoning split) and reasoning r, its tool calls
 * read out of the content; finish: the last chunk, with the finish_reason ("tool_calls" when
 * the model ended with calls). */
static int stream_content(conn *c, int32_t i, const char *t, size_t tl, const char *r, size_t rl,
                          const char *finish)
{
    job_view *v = &c->views[i];
    if (!v->tools)
        return stream_chunk_split(c, i, t, tl, r, rl, finish, NULL, 0, 0);
    const numla_tool_event *ev;
    int32_t ne;
    const char *base;
    int sent = 0;
    if (numla_tool_calls_push(v->tools, t, tl, &ev, &ne, &base) != NUMLA_STATUS_OK ||
        !stream_events(c, i, ev, ne, base, r, rl, &sent))
        return 0;
    if (!finish) /* nothing placed yet: the chunk of this token (its logprobs) all the same */
        return sent || stream_chunk_split(c, i, "", 0, NULL, 0, NULL, NULL, 0, 0);
    if (numla_tool_calls_finish(v->tools, &ev, &ne, &base) != NUMLA_STATUS_OK ||
        !stream_events(c, i, ev, ne, base, NULL, 0, &sent))
        return 0;
    const char *fr = numla_tool_calls_finish_reason(v->tools, finish);
    if (fr != v->finish_reason)
        snprintf(v->finish_reason, sizeof v->finish_reason, "%s", fr);
    return stream_chunk_split(c, i, "", 0, NULL, 0, v->finish_reason, NULL, 0, 0);
}

/* One SSE chunk for job i: text (its reasoning split off for a thinking model), the logprobs of
 * the tokens not yet reported, finish_reason. */
static int stream_chunk(conn *c, int32_t i, const char *text, size_t len, const char *finish)
{
    job_view *v = &c->views[i];
    if (!v->reasoning)
        return stream_content(c, i, text, len, NULL, 0, finish);
    const char *r, *t;
    size_t rl, tl;
    if (numla_http_reasoning_push(v->reasoning, text, len, &r, &rl, &t, &tl) != NUMLA_STATUS_OK)
        return 0;
    if (!finish)
        return stream_content(c, i, t, tl, r, rl, NULL);
    if ((rl || tl) && !stream_content(c, i, t, tl, r, rl, NULL))
        return 0;
    if (numla_http_reasoning_finish(v->reasoning, &r, &rl, &t, &tl) != NUMLA_STATUS_OK)
        return 0;
    return stream_content(c, i, t, tl, r, rl, finish);
}

static int stream_chunk_split(conn *c, int32_t i, const char *text, size_t len,
                              const char *reasoning, size_t reasoning_len, const char *finish,
                              const numla_tool_call_out *call, int32_t call_index, int first)
{
    numla_http_job *j = &c->call->jobs[i];
    job_view *v = &c->views[i];
    numla_openai_reply r = reply_of(c);
    if (c->route == ROUTE_RESPONSES) { /* reasoning and text deltas now; calls at the end */
        (void)finish, (void)call, (void)call_index, (void)first;
        return append_buf(&v->text, text, len) && append_buf(&v->rtext, reasoning, reasoning_len) &&
               numla_responses_stream_reasoning(&c->rs, &r, reasoning, reasoning_len, &c->out) ==
                   NUMLA_STATUS_OK &&
               numla_responses_stream_text(&c->rs, &r, text, len, numla_strbuf_str(&v->rtext), v->rtext.len,
                                           &c->out) == NUMLA_STATUS_OK;
    }
    numla_openai_choice ch = {.text = text, .text_len = len, .finish_reason = finish,
                              .has_reasoning = v->reasoning != NULL, .reasoning = reasoning,
                              .reasoning_len = reasoning_len, .tool_delta = call,
                              .tool_index = call_index, .tool_first = first};
    if (c->call->req.params.logprobs >= 0 && j->logprobs) {
        ch.logprobs = j->logprobs + v->logprobs_sent;
        ch.num_logprobs = v->tokens_seen - v->logprobs_sent;
        v->logprobs_sent = v->tokens_seen;
    }
    char *s = NULL;
    if (numla_openai_format_chunk(&r, i, &ch, 0, &s) != NUMLA_STATUS_OK)
        return 0;
    int ok = out_append(c, s, strlen(s));
    free(s);
    return ok;
}

/* Job i's last chunk or text; observes its TTFT and TPOT. */
static int finish_job_text(conn *c, int32_t i, int stream)
{
    numla_http_job *j = &c->call->jobs[i];
    job_view *v = &c->views[i];
    const char *tail = "";
    size_t tail_len = 0;
    if (numla_http_emitter_finish(v->emitter, &tail, &tail_len) != NUMLA_STATUS_OK)
        return 0;
    v->text_done = 1;
    if (j->error.status) {
        c->failed = 1;
        if (stream && c->route == ROUTE_RESPONSES) {
            numla_openai_error e = j->error;
            numla_responses_error_param(&e);
            return numla_responses_stream_error(&c->rs, &e, &c->out) == NUMLA_STATUS_OK;
        }
        if (stream) {
            char *e = NULL;
            if (numla_openai_format_error(&j->error, &e) != NUMLA_STATUS_OK)
                return 0;
            int ok = out_append(c, "data: ", 6) && out_append(c, e, strlen(e)) &&
                     out_append(c, "\n\n", 2);
            free(e);
            return ok;
        }
        return 1;
    }
    if (!v->finish_reason[0])
        snprintf(v->finish_reason, sizeof v->finish_reason, "%s",
                 j->stop_hit ? "stop" : j->finish_reason);
    if (!view_reasoning(c, i))
        return 0;
    if (stream)
        return stream_chunk(c, i, tail, tail_len, v->finish_reason);
    return append_text_final(v, tail, tail_len, 1);
}

/* Take whatever the loop pushed since the last look (call->mu held). Returns -1 on no memory,
 * else whether anything changed. */
static int advance_locked(conn *c, int stream)
{
    numla_http_call *call = c->call;
    int changed = 0;
    for (int32_t i = 0; i < call->num_jobs; i++) {
        numla_http_job *j = &call->jobs[i];
        job_view *v = &c->views[i];
        if (stream && call->req.echo && !v->echo_sent) {
            /* the prompt first, once the loop took the job (an error it finds first keeps its
             * own status), and with logprobs once they are known (at the job's end) */
            if (!j->finished && (call->req.params.logprobs >= 0 || j->num_tokens == 0))
                continue;
            if (!j->error.status && !stream_echo(c, i))
                return -1;
            v->echo_sent = 1;
            changed = 1;
        }
        /* A chunk per new token even without new text when the tokens are all a client gets
         * (a model without a tokenizer) or it asked for their logprobs: such a stream takes
         * the tokens one at a time, however many the loop pushed since the last look, each
         * with the bytes pushed with it (numla_http_job.text_ends). */
        const int want_lp = c->call->req.params.logprobs >= 0;
        const int per_token = stream && (j->text.len == 0 || want_lp);
        while (!v->text_done && (j->text.len > v->text_seen || j->num_tokens > v->tokens_seen)) {
            int32_t tok_end = j->num_tokens;
            size_t text_end = j->text.len;
            if (per_token && v->tokens_seen < j->num_tokens) {
                tok_end = v->tokens_seen + 1;
                text_end = j->text_ends[v->tokens_seen];
                if (text_end < v->text_seen)
                    text_end = v->text_seen;
            }
            const char *piece = "";
            size_t piece_len = 0;
            int stopped = 0;
            if (!view_reasoning(c, i))
                return -1;
            if (numla_http_emitter_push(v->emitter, numla_strbuf_str(&j->text) + v->text_seen,
                                        text_end - v->text_seen, &piece, &piece_len,
                                        &stopped) != NUMLA_STATUS_OK)
                return -1;
            const int token_chunk = tok_end > v->tokens_seen && (j->text.len == 0 || want_lp);
            v->text_seen = text_end;
            v->tokens_seen = tok_end;
            changed = 1;
            if (stopped) {
                j->stop_hit = 1; /* the loop reads it through numla_http_job_cancelled */
                snprintf(v->finish_reason, sizeof v->finish_reason, "stop");
            }
            if (stream && (piece_len > 0 || token_chunk) && !stopped &&
                !stream_chunk(c, i, piece, piece_len, NULL))
                return -1;
            if (stream && stopped && !stream_chunk(c, i, piece, piece_len, "stop"))
                return -1;
            if (!stream && !append_text_final(v, piece, piece_len, stopped))
                return -1;
            if (stopped)
                v->text_done = 1;
        }
        if (!v->text_done && j->finished) {
            if (!finish_job_text(c, i, stream))
                return -1;
            changed = 1;
        }
        if (!v->engine_done && j->finished) {
            v->engine_done = 1;
            changed = 1;
            if (!j->error.status && c->route != ROUTE_TOKENIZE) {
                numla_http_metrics_add_tokens(c->s->metrics, j->prompt_tokens,
                                              j->completion_tokens);
                if (j->t_first > 0) {
                    numla_http_metrics_observe_ttft(c->s->metrics, j->t_first - call->t_arrival);
                    if (j->completion_tokens > 1 && j->t_finish > j->t_first)
                        numla_http_metrics_observe_tpot(
                            c->s->metrics,
                            (j->t_finish - j->t_first) / (double)(j->completion_tokens - 1));
                }
            }
        }
    }
    return changed;
}

static int all_done(const conn *c)
{
    for (int32_t i = 0; i < c->call->num_jobs; i++)
        if (!c->views[i].text_done || !c->views[i].engine_done)
            return 0;
    return 1;
}

static int any_output(const conn *c)
{
    for (int32_t i = 0; i < c->call->num_jobs; i++)
        if (c->call->jobs[i].num_tokens > 0 || c->call->jobs[i].finished)
            return 1;
    return 0;
}

/* Wait until `until(c)` holds or the client goes (-1), taking the loop's output as it comes.
 * Returns 1 when something changed, 0 when until() holds, -1 gone, -2 no memory. */
static int wait_progress(conn *c, int stream, int (*until)(const conn *))
{
    numla_http_call *call = c->call;
    pthread_mutex_lock(&call->mu);
    int rc;
    for (;;) {
        int ch = advance_locked(c, stream);
        if (ch < 0) {
            rc = -2;
            break;
        }
        if (ch > 0 && (stream ? c->out.len > c->out_pos : 1)) {
            rc = 1;
            break;
        }
        if (until(c)) {
            rc = 0;
            break;
        }
        if (client_gone(c->fd)) {
            call->cancelled = 1;
            rc = -1;
            break;
        }
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += NUMLA_HTTP_WAIT_MS * 1000000L;
        if (t.tv_nsec >= 1000000000L) {
            t.tv_sec++;
            t.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&call->cv, &call->mu, &t);
    }
    pthread_mutex_unlock(&call->mu);
    return rc;
}

static numla_openai_usage usage_of(const conn *c)
{
    numla_openai_usage u = {0};
    for (int32_t i = 0; i < c->call->num_jobs; i++) {
        u.prompt_tokens += c->call->jobs[i].prompt_tokens;
        u.completion_tokens += c->call->jobs[i].completion_tokens;
        u.cached_tokens += c->call->jobs[i].cached_tokens;
        u.speculative |= c->call->jobs[i].speculative;
        u.spec_steps += c->call->jobs[i].spec_steps;
        u.spec_drafted += c->call->jobs[i].spec_drafted;
        u.spec_accepted += c->call->jobs[i].spec_accepted;
    }
    return u;
}

/* ---- streamed responses ---- */

/* The one choice of a Responses call, as the loop and the views left it. */
static numla_openai_choice responses_choice(const conn *c)
{
    const job_view *v = &c->views[0];
    numla_openai_choice ch = {.text = numla_strbuf_str(&v->text), .text_len = v->text.len,
                              .finish_reason = v->finish_reason,
                              .has_reasoning = v->reasoning != NULL,
                              .reasoning = v->rtext.len ? numla_strbuf_str(&v->rtext) : NULL,
                              .reasoning_len = v->rtext.len};
    if (v->tools) {
        ch.num_tool_calls = numla_tool_calls_count(v->tools);
        ch.tool_calls = numla_tool_calls_get(v->tools, 0);
    }
    return ch;
}

static numla_openai_usage usage_of(const conn *c);

/* A Responses stream's closing events. 0: no memory. */
static int responses_stream_end(conn *c)
{
    numla_openai_reply r = reply_of(c);
    numla_openai_choice ch = responses_choice(c);
    numla_openai_usage u = usage_of(c);
    return numla_responses_stream_end(&c->rs, &r, c->call->req.responses_settings, &ch, &u,
                                      &c->out) == NUMLA_STATUS_OK;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    conn *c = cls;
    while (c->out_pos == c->out.len) {
        c->out_pos = 0;
        numla_strbuf_clear(&c->out);
        if (c->done_sent)
            return MHD_CONTENT_READER_END_OF_STREAM;
        int rc = wait_progress(c, 1, all_done);
        if (rc == -1 || rc == -2) {
            set_outcome(c, rc == -1 ? NUMLA_HTTP_OUTCOME_CANCELLED : NUMLA_HTTP_OUTCOME_ERROR);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (rc == 0 && c->route == ROUTE_RESPONSES) { /* the closing events */
            if (!c->failed && !responses_stream_end(c))
                return MHD_CONTENT_READER_END_WITH_ERROR;
            c->done_sent = 1;
            set_outcome(c, c->failed ? NUMLA_HTTP_OUTCOME_ERROR : NUMLA_HTTP_OUTCOME_OK);
            continue;
        }
        if (rc == 0) { /* every job done */
            if (c->call->req.include_usage && !c->usage_sent) {
                numla_openai_reply r = reply_of(c);
                numla_openai_usage u = usage_of(c);
                char *s = NULL;
                if (numla_openai_format_usage_chunk(&r, &u, &s) != NUMLA_STATUS_OK ||
                    !out_append(c, s, strlen(s))) {
                    free(s);
                    return MHD_CONTENT_READER_END_WITH_ERROR;
                }
                free(s);
                c->usage_sent = 1;
            }
            if (!out_append(c, NUMLA_OPENAI_SSE_DONE, strlen(NUMLA_OPENAI_SSE_DONE)))
                return MHD_CONTENT_READER_END_WITH_ERROR;
            c->done_sent = 1;
            set_outcome(c, c->failed ? NUMLA_HTTP_OUTCOME_ERROR : NUMLA_HTTP_OUTCOME_OK);
        }
    }
    size_t n = c->out.len - c->out_pos < max ? c->out.len - c->out_pos : max;
    memcpy(buf, c->out.p + c->out_pos, n);
    c->out_pos += n;
    return (ssize_t)n;
}

/* A chat stream's first chunk: the delta that carries the role. */
static int role_chunk(conn *c)
{
    numla_openai_reply r = reply_of(c);
    numla_openai_choice ch = {0};
    char *s = NULL;
    int ok = numla_openai_format_chunk(&r, 0, &ch, 1, &s) == NUMLA_STATUS_OK &&
             out_append(c, s, strlen(s));
    free(s);
    c->role_sent = ok;
    return ok;
}

static enum MHD_Result start_stream(conn *c, struct MHD_Connection *mc)
{
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, c, NULL);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result ok = MHD_queue_response(mc, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ok;
}

/* Non-streamed echo: each job's echo buffer becomes prompt + completion, and its prompt
 * logprobs prompt + generated entries (the entries the response shows); call->mu held.
 * 0: no memory. */
static int echo_choices(conn *c)
{
    for (int32_t i = 0; i < c->call->num_jobs; i++) {
        numla_http_job *j = &c->call->jobs[i];
        job_view *v = &c->views[i];
        if (!view_echo(c, i) || !append_buf(&v->echo, numla_strbuf_str(&v->text), v->text.len))
            return 0;
        if (c->call->req.params.logprobs < 0)
            continue;
        const int32_t np = j->num_prompt_logprobs, n = np + j->num_tokens;
        numla_logprob_entry *all = malloc(((size_t)n + 1) * sizeof *all);
        if (!all)
            return 0;
        if (np)
            memcpy(all, j->prompt_logprobs, (size_t)np * sizeof *all);
        if (j->num_tokens)
            memcpy(all + np, j->logprobs, (size_t)j->num_tokens * sizeof *all);
        free(j->prompt_logprobs);
        j->prompt_logprobs = all;
        j->num_prompt_logprobs = n;
    }
    return 1;
}

/* ---- /tokenize and /detokenize (vLLM's shapes) ---- */

/* {"count", "max_model_len", "tokens", "token_strs"} of the finished tokenize job; token_strs
 * (return_token_strs) holds each token's own text (bytes that are only part of a character:
 * U+FFFD), null otherwise. */
static enum MHD_Result tokenize_response(conn *c, struct MHD_Connection *mc)
{
    const numla_http_job *j = &c->call->jobs[0];
    json_t *ids = json_array(), *strs = c->call->req.token_strs ? json_array() : json_null();
    for (int32_t i = 0; ids && i < j->num_tokens; i++) {
        json_array_append_new(ids, json_integer(j->tokens[i]));
        if (c->call->req.token_strs) {
            char *t = NULL;
            size_t n = 0;
            if (numla_tokenizer_decode(c->s->opt.tokenizer, &j->tokens[i], 1, 0, &t, &n) !=
                NUMLA_STATUS_OK)
                numla_error_clear();
            json_array_append_new(strs, json_stringn(t ? t : "", t ? n : 0));
            free(t);
        }
    }
    json_t *o = ids && strs ? json_pack("{s:i, s:I, s:o, s:o}", "count", (int)j->num_tokens,
                                        "max_model_len", (json_int_t)c->s->opt.max_context,
                                        "tokens", ids, "token_strs", strs)
                            : NULL;
    char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!body)
        return MHD_NO;
    set_outcome(c, NUMLA_HTTP_OUTCOME_OK);
    return respond(mc, MHD_HTTP_OK, body, "application/json", NULL);
}

/* {"prompt": text} of the ids, decoded with the model's tokenizer (special tokens kept). */
static enum MHD_Result detokenize(conn *c, struct MHD_Connection *mc, numla_openai_request *req)
{
    numla_openai_error err;
    const numla_openai_prompt *p = &req->prompts[0];
    char *t = NULL;
    size_t n = 0;
    if (!c->s->opt.tokenizer) {
        numla_openai_request_free(req);
        numla_openai_error_set(&err, 400, "tokens", "invalid_value",
                               "this model has no tokenizer.json: nothing to detokenize with");
        return respond_error(c, mc, &err);
    }
    numla_status st = numla_tokenizer_decode(c->s->opt.tokenizer, p->tokens, p->num_tokens, 0,
                                             &t, &n);
    numla_openai_request_free(req);
    if (st != NUMLA_STATUS_OK) {
        numla_openai_error_set(&err, st == NUMLA_STATUS_NO_MEMORY ? 500 : 400, "tokens",
                               "invalid_value", "'tokens' cannot be decoded: %.300s",
                               numla_error_message());
        numla_error_clear();
        return respond_error(c, mc, &err);
    }
    json_t *o = json_pack("{s:s%}", "prompt", t, n);
    free(t);
    char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!body)
        return MHD_NO;
    set_outcome(c, NUMLA_HTTP_OUTCOME_OK);
    return respond(mc, MHD_HTTP_OK, body, "application/json", NULL);
}

/* ---- one generation request ---- */

static int first_event(const conn *c)
{
    return any_output(c);
}

static int first_error(const conn *c, numla_openai_error *err)
{
    for (int32_t i = 0; i < c->call->num_jobs; i++)
        if (c->call->jobs[i].error.status) {
            *err = c->call->jobs[i].error;
            return 1;
        }
    return 0;
}

static enum MHD_Result generate(conn *c, struct MHD_Connection *mc)
{
    numla_http_server *s = c->s;
    numla_openai_error err;
    numla_openai_request req;
    numla_openai_limits lim = {.vocab_size = s->opt.vocab_size, .max_context = s->opt.max_context,
                               .defaults = s->opt.sampling_defaults};
    numla_openai_endpoint ep = c->route == ROUTE_CHAT         ? NUMLA_OPENAI_CHAT
                               : c->route == ROUTE_TOKENIZE   ? NUMLA_OPENAI_TOKENIZE
                               : c->route == ROUTE_DETOKENIZE ? NUMLA_OPENAI_DETOKENIZE
                               : c->route == ROUTE_RESPONSES  ? NUMLA_OPENAI_RESPONSES
                                                              : NUMLA_OPENAI_COMPLETIONS;
    if (numla_openai_parse(ep, numla_strbuf_str(&c->body), c->body.len, &lim, &req, &err) !=
        NUMLA_STATUS_OK)
        return MHD_NO;
    if (err.status)
        return respond_error(c, mc, &err);
    if (req.model && !served_name(s, req.model)) {
        numla_openai_error_set(&err, 404, "model", "model_not_found",
                               "The model '%.200s' does not exist (served: %.200s)", req.model,
                               s->model_name);
        numla_openai_request_free(&req);
        return respond_error(c, mc, &err);
    }
    pthread_mutex_lock(&s->mu);
    int ready = s->ready && !s->stopping;
    if (ready) {
        s->in_flight++;
        c->counted = 1;
    }
    pthread_mutex_unlock(&s->mu);
    if (!ready) {
        numla_openai_request_free(&req);
        numla_openai_error_set(&err, 503, NULL, "unavailable",
                               "the server is not ready (loading the model, or stopping)");
        return respond_error(c, mc, &err);
    }
    if (c->route == ROUTE_DETOKENIZE)
        return detokenize(c, mc, &req);
    if (numla_http_call_create(&req, &c->call) != NUMLA_STATUS_OK) {
        numla_openai_request_free(&req);
        return MHD_NO;
    }
    c->views = calloc((uint32_t)c->call->num_jobs, sizeof *c->views);
    if (!c->views)
        return MHD_NO;
    for (int32_t i = 0; i < c->call->num_jobs; i++)
        if (numla_http_emitter_create((const char *const *)c->call->req.stop_strings,
                                      c->call->req.num_stop_strings,
                                      &c->views[i].emitter) != NUMLA_STATUS_OK)
            return MHD_NO;
    pthread_mutex_lock(&s->mu);
    snprintf(c->id, sizeof c->id, "%s%016llx",
             c->route == ROUTE_RESPONSES ? "resp_" : ep == NUMLA_OPENAI_CHAT ? "chatcmpl-" : "cmpl-",
             (unsigned long long)(s->next_id++ * 0x9E3779B97F4A7C15ull));
    pthread_mutex_unlock(&s->mu);
    c->created = (int64_t)time(NULL);
    if (numla_http_backend_submit(s->backend, c->call, &err))
        return respond_error(c, mc, &err);
    numla_http_metrics_set_waiting(s->metrics, numla_http_backend_waiting(s->backend));

    if (c->call->req.stream) {
        /* Wait for the first token, so an error the loop finds first (a prompt longer than the
         * context) still gets its own status. */
        if (c->route == ROUTE_CHAT && !role_chunk(c))
            return MHD_NO;
        if (c->route == ROUTE_RESPONSES) { /* response.created, response.in_progress first */
            numla_openai_reply r = reply_of(c);
            if (numla_responses_stream_start(&c->rs, &r, c->call->req.responses_settings,
                                             &c->out) != NUMLA_STATUS_OK)
                return MHD_NO;
        }
        int rc;
        while ((rc = wait_progress(c, 1, first_event)) == 1 && !any_output(c))
            ;
        if (rc < 0) {
            set_outcome(c, rc == -1 ? NUMLA_HTTP_OUTCOME_CANCELLED : NUMLA_HTTP_OUTCOME_ERROR);
            return MHD_NO;
        }
        if (!c->call->jobs[0].num_tokens && first_error(c, &err) && c->call->num_jobs == 1)
            return respond_error(c, mc, &err);
        return start_stream(c, mc);
    }
    int rc;
    while ((rc = wait_progress(c, 0, all_done)) == 1)
        ;
    if (rc < 0) {
        set_outcome(c, rc == -1 ? NUMLA_HTTP_OUTCOME_CANCELLED : NUMLA_HTTP_OUTCOME_ERROR);
        return MHD_NO;
    }
    if (first_error(c, &err))
        return respond_error(c, mc, &err);
    if (c->route == ROUTE_TOKENIZE)
        return tokenize_response(c, mc);
    numla_openai_choice *ch = calloc((uint32_t)c->call->num_jobs, sizeof *ch);
    if (!ch)
        return MHD_NO;
    if (c->call->req.echo) {
        pthread_mutex_lock(&c->call->mu);
        const int ok = echo_choices(c);
        pthread_mutex_unlock(&c->call->mu);
        if (!ok) {
            free(ch);
            return MHD_NO;
        }
    }
    for (int32_t i = 0; i < c->call->num_jobs; i++) {
        numla_http_job *j = &c->call->jobs[i];
        ch[i] = (numla_openai_choice){.text = numla_strbuf_str(&c->views[i].text),
                                      .text_len = c->views[i].text.len,
                                      .finish_reason = c->views[i].finish_reason,
                                      .has_reasoning = c->views[i].reasoning != NULL,
                                      .reasoning = c->views[i].rtext.len
                                                       ? numla_strbuf_str(&c->views[i].rtext)
                                                       : NULL,
                                      .reasoning_len = c->views[i].rtext.len};
        if (c->views[i].tools) {
            ch[i].num_tool_calls = numla_tool_calls_count(c->views[i].tools);
            ch[i].tool_calls = numla_tool_calls_get(c->views[i].tools, 0);
        }
        if (c->call->req.params.logprobs >= 0) {
            ch[i].logprobs = j->logprobs;
            ch[i].num_logprobs = j->num_tokens;
            if (c->call->req.echo) { /* the prompt's entries first */
                ch[i].logprobs = j->prompt_logprobs;
                ch[i].num_logprobs = j->num_prompt_logprobs;
            }
        }
        if (c->call->req.echo) {
            ch[i].text = numla_strbuf_str(&c->views[i].echo);
            ch[i].text_len = c->views[i].echo.len;
        }
    }
    numla_openai_reply r = reply_of(c);
    numla_openai_usage u = usage_of(c);
    char *body = NULL;
    numla_status st;
    if (c->route == ROUTE_RESPONSES) {
        numla_openai_choice one = responses_choice(c);
        st = numla_responses_format(&r, c->call->req.responses_settings, &one, &u, &body);
    } else {
        st = numla_openai_format_response(&r, ch, c->call->num_jobs, &u, &body);
    }
    free(ch);
    if (st != NUMLA_STATUS_OK)
        return MHD_NO;
    set_outcome(c, NUMLA_HTTP_OUTCOME_OK);
    return respond(mc, MHD_HTTP_OK, body, "application/json", NULL);
}

/* ---- routing ---- */

static enum MHD_Result get_route(numla_http_server *s, struct MHD_Connection *mc, const char *url)
{
    if (!strcmp(url, "/health")) {
        pthread_mutex_lock(&s->mu);
        int ok = s->ready && !s->stopping;
        pthread_mutex_unlock(&s->mu);
        return respond_json_text(mc, ok ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE,
                                 "{\"status\":\"%s\"}", ok ? "ok" : s->stopping ? "stopping"
                                                                               : "loading");
    }
    if (!strcmp(url, "/metrics")) {
        char *text = NULL;
        numla_http_metrics_set_waiting(s->metrics, numla_http_backend_waiting(s->backend));
        if (numla_http_metrics_render(s->metrics, &text) != NUMLA_STATUS_OK)
            return MHD_NO;
        return respond(mc, MHD_HTTP_OK, text, "text/plain; version=0.0.4; charset=utf-8", NULL);
    }
    if (!strcmp(url, "/v1/models")) {
        json_t *o = json_pack("{s:s, s:[]}", "object", "list", "data");
        for (int i = 0; o && i < s->num_names; i++)
            if (json_array_append_new(json_object_get(o, "data"),
                                      json_pack("{s:s, s:s, s:I, s:s, s:I}", "id", s->names[i],
                                                "object", "model", "created",
                                                (json_int_t)s->started, "owned_by", "numla",
                                                "max_model_len",
                                                (json_int_t)s->opt.max_context))) {
                json_decref(o);
                o = NULL;
            }
        char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        if (!body)
            return MHD_NO;
        return respond(mc, MHD_HTTP_OK, body, "application/json", NULL);
    }
    numla_openai_error err;
    numla_openai_error_set(&err, 404, NULL, "not_found", "no such endpoint: GET %.200s", url);
    char *body = NULL;
    if (numla_openai_format_error(&err, &body) != NUMLA_STATUS_OK)
        return MHD_NO;
    return respond(mc, MHD_HTTP_NOT_FOUND, body, "application/json", NULL);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *mc, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_data_size, void **con_cls)
{
    (void)version;
    numla_http_server *s = cls;
    conn *c = *con_cls;
    if (!c) {
        numla_openai_error err;
        int is_post = !strcmp(method, MHD_HTTP_METHOD_POST);
        route rt = !strcmp(url, "/v1/completions")        ? ROUTE_COMPLETIONS
                   : !strcmp(url, "/v1/chat/completions") ? ROUTE_CHAT
                   : !strcmp(url, "/tokenize")            ? ROUTE_TOKENIZE
                   : !strcmp(url, "/detokenize")          ? ROUTE_DETOKENIZE
                   : !strcmp(url, "/v1/responses")        ? ROUTE_RESPONSES
                                                          : ROUTE_NONE;
        if (s->api_key && (!strncmp(url, "/v1/", 4) || rt != ROUTE_NONE)) {
            const char *auth = MHD_lookup_connection_value(mc, MHD_HEADER_KIND,
                                                           MHD_HTTP_HEADER_AUTHORIZATION);
            const char *tok = auth && !strncmp(auth, "Bearer ", 7) ? auth + 7 : "";
            if (!secret_equal(tok, s->api_key)) {
                numla_openai_error_set(&err, 401, NULL, "invalid_api_key",
                                       "missing or wrong API key (send Authorization: Bearer KEY)");
                numla_http_metrics_request_done(s->metrics, NUMLA_HTTP_OUTCOME_UNAUTHORIZED);
                char *body = NULL;
                if (numla_openai_format_error(&err, &body) != NUMLA_STATUS_OK)
                    return MHD_NO;
                return respond(mc, MHD_HTTP_UNAUTHORIZED, body, "application/json", NULL);
            }
        }
        if (!strcmp(method, MHD_HTTP_METHOD_GET) || !strcmp(method, MHD_HTTP_METHOD_HEAD)) {
            if (rt != ROUTE_NONE)
                return respond_json_text(mc, MHD_HTTP_METHOD_NOT_ALLOWED,
                                         "{\"error\":{\"message\":\"use POST\",\"type\":"
                                         "\"invalid_request_error\",\"param\":null,\"code\":null}}");
            return get_route(s, mc, url);
        }
        if (!is_post || rt == ROUTE_NONE) {
            numla_openai_error_set(&err, is_post ? 404 : 405, NULL, "not_found",
                                   "no such endpoint: %.16s %.200s", method, url);
            char *body = NULL;
            if (numla_openai_format_error(&err, &body) != NUMLA_STATUS_OK)
                return MHD_NO;
            return respond(mc, (unsigned)err.status, body, "application/json", NULL);
        }
        c = calloc(1, sizeof *c);
        if (!c)
            return MHD_NO;
        c->s = s;
        c->route = rt;
        c->fd = -1;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (ci)
            c->fd = ci->connect_fd;
        *con_cls = c;
        const char *cl = MHD_lookup_connection_value(mc, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > s->opt.max_body)
            c->too_large = 1; /* answered below, before reading the body */
        else
            return MHD_YES;
    }
    if (*upload_data_size > 0 && !c->too_large) {
        size_t n = *upload_data_size;
        if (c->body.len + n > s->opt.max_body)
            c->too_large = 1;
        else if (numla_strbuf_append(&c->body, upload_data, n) != NUMLA_STATUS_OK)
            return MHD_NO;
    }
    if (c->too_large && !c->has_outcome) {
        *upload_data_size = 0;
        numla_openai_error err;
        numla_openai_error_set(&err, 413, NULL, "body_too_large",
                               "the request body is larger than the limit of %zu bytes",
                               s->opt.max_body);
        return respond_error(c, mc, &err);
    }
    if (*upload_data_size > 0 || c->too_large) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    return generate(c, mc);
}

static void completed(void *cls, struct MHD_Connection *mc, void **con_cls,
                      enum MHD_RequestTerminationCode toe)
{
    (void)mc;
    numla_http_server *s = cls;
    conn *c = *con_cls;
    if (!c)
        return;
    *con_cls = NULL;
    if (c->call) {
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK || !all_done(c)) {
            numla_http_call_cancel(c->call);
            if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
                set_outcome(c, NUMLA_HTTP_OUTCOME_CANCELLED);
        }
        for (int32_t i = 0; i < c->call->num_jobs && c->views; i++) {
            numla_http_emitter_destroy(&c->views[i].emitter);
            numla_http_reasoning_destroy(&c->views[i].reasoning);
            numla_tool_calls_destroy(&c->views[i].tools);
            numla_strbuf_free(&c->views[i].text);
            numla_strbuf_free(&c->views[i].rtext);
            numla_strbuf_free(&c->views[i].echo);
        }
        numla_http_call_release(&c->call);
    }
    set_outcome(c, NUMLA_HTTP_OUTCOME_ERROR);
    numla_http_metrics_request_done(s->metrics, c->outcome);
    free(c->views);
    numla_strbuf_free(&c->body);
    numla_strbuf_free(&c->out);
    if (c->counted) {
        pthread_mutex_lock(&s->mu);
        s->in_flight--;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
    free(c);
}

/* ---- lifetime ---- */

/* model_name's comma-separated names into names[]; an empty name is an error. */
static numla_status split_names(numla_http_server *s)
{
    int n = 1;
    for (const char *p = s->model_name; *p; p++)
        n += *p == ',';
    s->names = calloc((size_t)n, sizeof *s->names);
    if (!s->names)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for the served model names");
    const char *p = s->model_name;
    for (int i = 0; i < n; i++) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == 0)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "served model names '%s': an empty name",
                       s->model_name);
        if (!(s->names[i] = strndup(p, len)))
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for the served model names");
        s->num_names = i + 1;
        p = e ? e + 1 : p + len;
    }
    return NUMLA_STATUS_OK;
}

static void server_free(numla_http_server *s)
{
    free(s->host);
    free(s->api_key);
    free(s->model_name);
    for (int i = 0; i < s->num_names; i++)
        free(s->names[i]);
    free(s->names);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

numla_status numla_http_server_start(const numla_http_server_options *opt,
                                     numla_http_backend *backend, numla_http_metrics *metrics,
                                     numla_http_server **out)
{
    *out = NULL;
    numla_http_server *s = calloc(1, sizeof *s);
    if (!s)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for the HTTP server");
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->opt = *opt;
    s->backend = backend;
    s->metrics = metrics;
    s->host = strdup(opt->host ? opt->host : "127.0.0.1");
    s->model_name = strdup(opt->model_name ? opt->model_name : "numla");
    s->api_key = opt->api_key && opt->api_key[0] ? strdup(opt->api_key) : NULL;
    if (!s->opt.max_body)
        s->opt.max_body = 1 << 20;
    s->started = (int64_t)time(NULL);
    s->next_id = (uint64_t)s->started << 20;
    if (!s->host || !s->model_name || (opt->api_key && opt->api_key[0] && !s->api_key)) {
        server_free(s);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for the HTTP server");
    }
    numla_status ns = split_names(s);
    if (ns != NUMLA_STATUS_OK) {
        server_free(s);
        return ns;
    }
    if (opt->port < 0 || opt->port > 65535) {
        int port = opt->port;
        server_free(s);
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "--port %d is not in 0..65535", port);
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", opt->port);
    int gai = getaddrinfo(s->host, port, &hints, &ai);
    if (gai) {
        char host[256];
        snprintf(host, sizeof host, "%s", s->host);
        server_free(s);
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "--host %s: %s", host, gai_strerror(gai));
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                     MHD_USE_POLL | MHD_USE_ITC;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    s->daemon = MHD_start_daemon(flags, (uint16_t)opt->port, NULL, NULL, handle, s,
                                 MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_NOTIFY_COMPLETED,
                                 completed, s, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600,
                                 MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->daemon) {
        int e = errno;
        char host[256];
        snprintf(host, sizeof host, "%s", s->host);
        server_free(s);
        NUMLA_FAIL(NUMLA_STATUS_IO, "cannot listen on %s port %d: %s", host, opt->port,
                   strerror(e));
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : opt->port;
    *out = s;
    return NUMLA_STATUS_OK;
}

int numla_http_server_port(const numla_http_server *s)
{
    return s->port;
}

void numla_http_server_set_ready(numla_http_server *s, int ready)
{
    pthread_mutex_lock(&s->mu);
    s->ready = ready;
    pthread_mutex_unlock(&s->mu);
}

int32_t numla_http_server_in_flight(numla_http_server *s)
{
    pthread_mutex_lock(&s->mu);
    int32_t n = s->in_flight;
    pthread_mutex_unlock(&s->mu);
    return n;
}

void numla_http_server_stop(numla_http_server **sp)
{
    numla_http_server *s = *sp;
    if (!s)
        return;
    *sp = NULL;
    MHD_socket ls = MHD_quiesce_daemon(s->daemon);
    if (ls != MHD_INVALID_SOCKET)
        close(ls);
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    while (s->in_flight > 0)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    MHD_stop_daemon(s->daemon);
    server_free(s);
}
