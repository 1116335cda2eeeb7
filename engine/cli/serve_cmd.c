/* engine/cli/serve_cmd.c — `numla serve`: an OpenAI-compatible HTTP server (engine/http/server.h)
 * in front of the serving loop (engine/serving/serve_loop.h), on one or more ranks.
 *
 * Rank 0 starts the HTTP server before the model loads (GET /health answers 503 until it is
 * ready), loads the tokenizer and the chat template, then runs the serving loop with the HTTP
 * jobs as its source and sink (engine/http/serving_adapter.h); the other ranks run the engine's
 * worker loop, as for `numla run` (and ignore SIGINT/SIGTERM: rank 0 decides when to stop).
 * Once ready it prints "numla serve: ready on http://HOST:PORT" on stderr (with --port 0 the
 * port is the ephemeral one the system picked).
 *
 * Chat template: --chat-template NAME forces a built-in one; otherwise the model's
 * tokenizer_config.json "chat_template" must be one numla recognises (a clear error at start-up
 * when it is not). A model without any chat template serves completions only (chat requests
 * answer 400 naming "messages").
 *
 * SIGTERM/SIGINT: stop accepting connections, finish every request already accepted (queued
 * or generating), then exit 0. A second signal stops at once: the requests still open get 503
 * and the exit status is 128 + the signal number. A rank that dies takes the job down through
 * the comm layer (MPI abort), which ends this process too, so no client waits forever.
 * Exit status: 0 stopped by a signal after draining, 1 fatal error, 2 usage, 128 + N stopped by
 * a second signal N.
 * Collective over MPI_COMM_WORLD (initialises MPI when the caller has not).
 */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "common/clock.h"
#include "common/log.h"
#include "engine/cli/cli.h"
#include "engine/cli/engine_opts.h"
#include "engine/cli/model_text.h"
#include "engine/cli/settings.h"
#include "engine/cli/stop.h"
#include "engine/http/backend.h"
#include "engine/http/metrics.h"
#include "engine/http/serving_adapter.h"
#include "engine/http/server.h"
#include "engine/json/model_json.h"
#include "engine/model/config.h"
#include "engine/model/kv_cache.h"
#include "engine/parallel/engine.h"
#include "engine/serving/serve_loop.h"
#include "engine/text/chat_template.h"
#include "engine/text/tokenizer.h"

typedef struct serve_opts {
    numla_cli_engine_opts e;    /* model, threads, batching, KV pool (engine_opts.h) */
    const char *host;
    int port;
    const char *api_key;
    int32_t max_queue;
    const char *chat_template;  /* --chat-template NAME, or NULL */
    const char *served_name;    /* --served-model-name, or NULL: the model directory's name */
    int64_t max_body;
} serve_opts;

static void usage(FILE *f)
{
    fprintf(f, "usage: numla serve --model DIR [--host 127.0.0.1] [--port 8000] [--api-key KEY]\n"
               "                   [--max-queue N (256)] [--max-body BYTES (1 MiB)]\n"
               "                   [--chat-template NAME] [--served-model-name NAME[,ALIAS...]]\n");
    numla_cli_engine_opts_usage(f, 19);
    fprintf(f, "Endpoints: POST /v1/completions, POST /v1/chat/completions, GET /v1/models,\n"
               "GET /health, GET /metrics. Chat templates:");
    for (const char *const *n = numla_chat_template_names(); *n; n++)
        fprintf(f, " %s", *n);
    fprintf(f, ".\nSIGTERM/SIGINT: stop accepting, finish the requests accepted, exit 0 (a\n"
               "second signal stops at once: exit 128+N). Exit: 1 fatal error, 2 usage.\n");
}

static int parse_int(const char *a, const char *v, long long lo, long long hi, long long *out)
{
    char *end = NULL;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || errno || x < lo || x > hi) {
        fprintf(stderr, "numla serve: option %s: '%s' is not a whole number in %lld..%lld\n", a,
                v, lo, hi);
        return 0;
    }
    *out = x;
    return 1;
}

/* Returns -1 to go on, else the exit code. */
static int parse_opts(int argc, char **argv, serve_opts *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        const char *v = NULL;
        const int r = numla_cli_engine_opts_next("numla serve", &o->e, argc, argv, &i, &v);
        if (r == NUMLA_CLI_OPT_BAD) {
            usage(stderr);
            return 2;
        }
        if (r != NUMLA_CLI_OPT_NONE)
            continue;
        long long x = 0;
        if (!strcmp(a, "--host")) {
            o->host = v;
        } else if (!strcmp(a, "--port")) {
            if (!parse_int(a, v, 0, 65535, &x))
                return 2;
            o->port = (int)x;
        } else if (!strcmp(a, "--api-key")) {
            o->api_key = v;
        } else if (!strcmp(a, "--max-queue")) {
            if (!parse_int(a, v, 1, 1 << 20, &x))
                return 2;
            o->max_queue = (int32_t)x;
        } else if (!strcmp(a, "--max-body")) {
            if (!parse_int(a, v, 1024, (long long)1 << 32, &x))
                return 2;
            o->max_body = x;
        } else if (!strcmp(a, "--chat-template")) {
            if (!numla_chat_template_known(v)) {
                fprintf(stderr, "numla serve: --chat-template %s is not a built-in template (",
                        v);
                for (const char *const *n = numla_chat_template_names(); *n; n++)
                    fprintf(stderr, "%s%s", n == numla_chat_template_names() ? "" : ", ", *n);
                fprintf(stderr, ")\n");
                return 2;
            }
            o->chat_template = v;
        } else if (!strcmp(a, "--served-model-name")) {
            o->served_name = v;
        } else {
            fprintf(stderr, "numla serve: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!o->e.model) {
        usage(stderr);
        return 2;
    }
    return numla_cli_engine_opts_check("numla serve", &o->e);
}

/* ---- rank 0 ---- */

typedef struct serve_job {
    serve_opts *o;
    numla_model_config cfg;
    numla_tokenizer *tok;
    numla_chat_template *chat;
    numla_http_backend *backend;
    numla_http_metrics *metrics;
    numla_http_server *server;
    numla_http_adapter *adapter;
    numla_serve_loop *loop;
    char name[256];             /* the served model name */
    /* shutdown: a thread stops the server (which waits for the requests in flight) while the
     * loop keeps serving them */
    pthread_t stopper;
    int stopper_started;
    volatile int stopper_done;  /* set by the stopper thread under mu */
    pthread_mutex_t mu;
} serve_job;

static int serve_fail(void) { return numla_cli_fail("numla serve"); }

/* The chat template: forced, the model's, or none (when the model has none at all). */
static numla_status serve_chat_load(serve_job *j)
{
    const serve_opts *o = j->o;
    if (o->chat_template)
        return numla_model_text_chat_template(o->e.model, o->chat_template, &j->chat);
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", o->e.model);
    json_t *cfg = NULL;
    if (numla_json_file_read(path, 0, &cfg) != NUMLA_STATUS_OK)
        numla_error_clear(); /* absent or unreadable: no chat template (the tokenizer says why) */
    const int has = cfg && json_object_get(cfg, "chat_template") &&
                    !json_is_null(json_object_get(cfg, "chat_template"));
    json_decref(cfg);
    if (!has) {
        fprintf(stderr, "numla serve: %s has no chat template: serving completions only (give "
                        "--chat-template NAME for chat)\n", o->e.model);
        return NUMLA_STATUS_OK;
    }
    numla_status s = numla_model_text_chat_template(o->e.model, NULL, &j->chat);
    if (s != NUMLA_STATUS_OK)
        NUMLA_FAIL(s, "%s (give --chat-template NAME to use a built-in template)",
                   numla_error_message());
    return NUMLA_STATUS_OK;
}

/* Before the model loads: the config (vocabulary, context), the tokenizer, the chat template,
 * then the server, listening but not ready. */
static numla_status serve_prepare(serve_job *j)
{
    serve_opts *o = j->o;
    NUMLA_CHECK(numla_model_config_load(o->e.model, &j->cfg));
    NUMLA_CHECK(numla_cli_engine_opts_model("numla serve", &o->e, &j->cfg));
    if (numla_model_text_present(o->e.model)) /* tokenizer.json, tiktoken.model or GGUF keys */
        NUMLA_CHECK(numla_model_text_tokenizer(o->e.model, j->cfg.vocab_size, &j->tok));
    else
        fprintf(stderr, "numla serve: %s has no tokenizer.json: prompts must be token ids\n",
                o->e.model);
    NUMLA_CHECK(serve_chat_load(j));
    if (o->served_name) {
        snprintf(j->name, sizeof j->name, "%s", o->served_name);
    } else {
        const char *m = o->e.model;
        size_t n = strlen(m);
        while (n > 1 && m[n - 1] == '/')
            n--;
        size_t b = n;
        while (b > 0 && m[b - 1] != '/')
            b--;
        snprintf(j->name, sizeof j->name, "%.*s", (int)(n - b), m + b);
    }
    NUMLA_CHECK(numla_http_backend_create(o->max_queue, &j->backend));
    NUMLA_CHECK(numla_http_metrics_create(&j->metrics));
    numla_http_server_options so = {.host = o->host, .port = o->port, .api_key = o->api_key,
                                    .model_name = j->name, .max_body = (size_t)o->max_body,
                                    .vocab_size = j->cfg.vocab_size,
                                    .max_context = o->e.max_context,
                                    .sampling_defaults = &o->e.sampling_defaults,
                                    .tokenizer = j->tok};
    NUMLA_CHECK(numla_http_server_start(&so, j->backend, j->metrics, &j->server));
    fprintf(stderr, "numla serve: listening on %s port %d; loading %s\n", o->host,
            numla_http_server_port(j->server), o->e.model);
    return NUMLA_STATUS_OK;
}

static void *serve_stopper(void *arg)
{
    serve_job *j = arg;
    numla_http_server_stop(&j->server);
    pthread_mutex_lock(&j->mu);
    j->stopper_done = 1;
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

static int serve_stopper_done(serve_job *j)
{
    pthread_mutex_lock(&j->mu);
    int d = j->stopper_done;
    pthread_mutex_unlock(&j->mu);
    return d;
}

static numla_status serve_loop_create(serve_job *j, numla_engine *eng)
{
    const serve_opts *o = j->o;
    numla_http_adapter_options go = {.backend = j->backend, .metrics = j->metrics,
                                  .tokenizer = j->tok, .chat = j->chat,
                                  .max_context = o->e.max_context,
                                  .speculative = o->e.spec_k > 0};
    NUMLA_CHECK(numla_http_adapter_create(&go, &j->adapter));
    numla_serve_options so = {.sched = numla_cli_sched_options(&o->e, &j->cfg),
                              .kv = numla_engine_kv_cache(eng), .exec = numla_cli_engine_exec,
                              .exec_ctx = eng, .tokenizer = j->tok,
                              .max_waiting = o->e.max_seqs};
    numla_serve_source src = numla_http_adapter_source(j->adapter);
    numla_serve_sink sink = numla_http_adapter_sink(j->adapter);
    NUMLA_CHECK(numla_serve_loop_create(&so, &src, &sink, &j->loop));
    numla_http_adapter_set_loop(j->adapter, j->loop);
    return NUMLA_STATUS_OK;
}

/* Serve until a signal (drain) or a second one (stop now). Returns the exit code, or -1 with
 * the error set. */
static int serve_requests(serve_job *j)
{
    numla_cli_stop_saved saved;
    numla_cli_stop_install(&saved, 1);
    numla_http_server_set_ready(j->server, 1);
    fprintf(stderr, "numla serve: ready on http://%s%s%s:%d (model \"%s\")\n",
            strchr(j->o->host, ':') ? "[" : "", j->o->host, strchr(j->o->host, ':') ? "]" : "",
            numla_http_server_port(j->server), j->name);
    int rc = 0, finished = 0;
    numla_status s = NUMLA_STATUS_OK;
    while (!finished) {
        numla_http_adapter_poll(j->adapter);
        if (numla_cli_stop_requests >= 1 && !j->stopper_started) {
            fprintf(stderr, "numla serve: signal %d: no new requests; finishing the %d in "
                            "flight (signal again to stop now)\n", (int)numla_cli_stop_signal,
                    numla_http_server_in_flight(j->server));
            if (pthread_create(&j->stopper, NULL, serve_stopper, j) != 0) {
                numla_error_set(NUMLA_STATUS_IO, __FILE__, __LINE__, __func__,
                                "cannot start the thread that stops the server");
                rc = -1;
                break;
            }
            j->stopper_started = 1;
        }
        if (j->stopper_started && serve_stopper_done(j))
            numla_http_adapter_end(j->adapter); /* every accepted request is answered */
        if (numla_cli_stop_requests >= 2) {
            fprintf(stderr, "numla serve: signal %d again: stopping now (%d requests "
                            "unfinished)\n", (int)numla_cli_stop_signal, numla_http_adapter_held(j->adapter));
            rc = 128 + (int)numla_cli_stop_signal;
            break;
        }
        s = numla_serve_loop_run_once(j->loop, &finished, NULL);
        if (s != NUMLA_STATUS_OK) {
            rc = -1;
            break;
        }
    }
    numla_cli_stop_restore(&saved);
    return rc;
}

static void serve_summary(const serve_job *j)
{
    if (!j->loop)
        return;
    numla_serve_stats st;
    numla_serve_loop_stats_get(j->loop, &st);
    fprintf(stderr, "numla serve: summary: %lld requests (%lld ok, %lld errors, %lld cancelled); "
                    "prompt tokens %lld, output tokens %lld; TTFT p50 %.1f ms p99 %.1f ms; TPOT "
                    "p50 %.2f ms p99 %.2f ms; %lld preemptions; prefix cache hit rate %.1f %%\n",
            (long long)st.done, (long long)st.ok, (long long)st.errors, (long long)st.cancelled,
            (long long)st.prompt_tokens, (long long)st.output_tokens, 1e3 * st.ttft_p50_s,
            1e3 * st.ttft_p99_s, 1e3 * st.tpot_p50_s, 1e3 * st.tpot_p99_s,
            (long long)st.sched.preemptions,
            st.sched.prefix_lookup_tokens > 0
                ? 100.0 * (double)st.sched.prefix_hit_tokens / (double)st.sched.prefix_lookup_tokens
                : 0.0);
    if (j->o->e.spec_k > 0)
        fprintf(stderr, "numla serve:   speculative mtp:%d: acceptance %.1f %% (%lld of %lld draft "
                        "tokens), mean accepted length %.2f tokens per verify step\n",
                j->o->e.spec_k,
                st.sched.spec_drafted > 0
                    ? 100.0 * (double)st.sched.spec_accepted / (double)st.sched.spec_drafted
                    : 0.0,
                (long long)st.sched.spec_accepted, (long long)st.sched.spec_drafted,
                st.sched.spec_steps > 0 ? (double)(st.sched.spec_accepted + st.sched.spec_steps) /
                                              (double)st.sched.spec_steps
                                        : 0.0);
}

/* Everything rank 0 holds, in the order that lets every HTTP thread finish: queued jobs fail,
 * held jobs fail, the server stops (it waits for its connections), then the rest. */
static void serve_job_close(serve_job *j, const char *why)
{
    if (j->backend)
        numla_http_backend_close(j->backend, why);
    numla_http_adapter_destroy(&j->adapter);
    if (j->stopper_started)
        pthread_join(j->stopper, NULL);
    else
        numla_http_server_stop(&j->server);
    numla_serve_loop_destroy(&j->loop);
    numla_http_backend_destroy(&j->backend);
    numla_http_metrics_destroy(&j->metrics);
    numla_chat_template_destroy(&j->chat);
    numla_tokenizer_destroy(&j->tok);
    pthread_mutex_destroy(&j->mu);
}

static int serve_rank0(serve_job *j, numla_engine *eng, numla_comm *comm, double t_load)
{
    const numla_kv_cache *kv = numla_engine_kv_cache(eng);
    fprintf(stderr, "numla serve: %s loaded in %.2f s: %d rank%s, %d threads, context %lld, KV "
                    "%lld blocks of %d\n", j->o->e.model, numla_now_s() - t_load,
            numla_comm_size(comm), numla_comm_size(comm) > 1 ? "s" : "",
            numla_engine_num_threads(eng), (long long)j->o->e.max_context,
            (long long)kv->num_blocks, kv->block_size);
    if (serve_loop_create(j, eng) != NUMLA_STATUS_OK)
        return serve_fail();
    int rc = serve_requests(j);
    if (rc < 0)
        rc = serve_fail();
    serve_summary(j);
    return rc;
}

static int serve_front_prepare(void *ctx)
{
    return serve_prepare(ctx) == NUMLA_STATUS_OK ? -1 : serve_fail();
}
static int serve_front_serve(void *ctx, numla_engine *eng, numla_comm *comm, double t_load)
{
    return serve_rank0(ctx, eng, comm, t_load);
}
static void serve_front_close(void *ctx, int *rc)
{
    serve_job_close(ctx, *rc == 0 ? "the server is shutting down" : "the engine stopped");
}

int numla_serve_main(int argc, char **argv)
{
    serve_opts o = {.host = "127.0.0.1", .port = 8000, .max_queue = 256};
    numla_cli_engine_opts_default(&o.e);
    int rc = parse_opts(argc, argv, &o);
    if (rc >= 0)
        return rc;
    numla_settings set;
    numla_comm_session mpi;
    if (numla_settings_start(&set, &mpi) != NUMLA_STATUS_OK)
        return serve_fail();
    signal(SIGPIPE, SIG_IGN); /* a client that went away is seen by the server, not a signal */
    serve_job j = {.o = &o};
    pthread_mutex_init(&j.mu, NULL);
    /* rank 0 listens before the model loads; every rank waits for its verdict */
    const numla_cli_front f = {.cmd = "numla serve", .ctx = &j, .prepare = serve_front_prepare,
                               .serve = serve_front_serve, .close = serve_front_close};
    rc = numla_cli_engine_serve(&o.e, &set, &mpi, &f);
    if (numla_comm_rank(mpi.comm) != 0)
        pthread_mutex_destroy(&j.mu);
    numla_comm_world_finalize(&mpi);
    return rc;
}

NUMLA_CLI_COMMAND("serve", numla_serve_main,
                  "an OpenAI-compatible HTTP server (--model DIR [--host] [--port] [--api-key])")
