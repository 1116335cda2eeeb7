/* bench/bench_http.c — HTTP levels of `numla bench serve --http` (see bench_http.h). Each client
 * thread takes the next request, sends it as a streamed POST /v1/completions over a fresh
 * loopback connection (Connection: close), reads the Server-Sent Events to the end, and records
 * the time to its first event with a token and its completion tokens (from the usage chunk). */
#include "bench/bench_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench/bench.h"
#include "engine/cli/engine_opts.h"
#include "engine/http/backend.h"
#include "engine/http/metrics.h"
#include "engine/http/serving_adapter.h"
#include "engine/http/server.h"
#include "engine/serving/serve_loop.h"

typedef struct bh_shared {
    const numla_request *rq;
    int n, port;
    atomic_int next, done, failed;
    double *t_send, *t_first, *t_end;   /* (n) */
    int32_t *tokens;                    /* (n) completion tokens */
} bh_shared;

static int bh_send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return 0;
        p += w;
        n -= (size_t)w;
    }
    return 1;
}

/* One request; returns 1 on a 200 answer that ended with [DONE]. */
static int bh_request(bh_shared *sh, int i)
{
    const numla_request *q = &sh->rq[i];
    size_t cap = 256 + 12 * (size_t)q->num_prompt;
    char *body = malloc(cap), *req = malloc(cap + 256);
    char buf[65536];
    int ok = 0;
    if (!body || !req)
        goto out;
    size_t len = (size_t)snprintf(body, cap, "{\"prompt\":[");
    for (int32_t t = 0; t < q->num_prompt; t++)
        len += (size_t)snprintf(body + len, cap - len, "%s%d", t ? "," : "", q->prompt_tokens[t]);
    len += (size_t)snprintf(body + len, cap - len,
                            "],\"max_tokens\":%d,\"temperature\":0,\"ignore_eos\":true,"
                            "\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
                            q->params.max_tokens);
    int rl = snprintf(req, cap + 256, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                      "Content-Type: application/json\r\nContent-Length: %zu\r\n"
                                      "Connection: close\r\n\r\n%s", len, body);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)sh->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sh->t_send[i] = numla_now_s();
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        !bh_send_all(fd, req, (size_t)rl)) {
        if (fd >= 0)
            close(fd);
        goto out;
    }
    /* keep the last bytes across reads to find markers split between them */
    char tail[512] = "";
    size_t tl = 0;
    int status_ok = -1, done = 0;
    for (;;) {
        ssize_t r = recv(fd, buf, sizeof buf - 1, 0);
        if (r <= 0)
            break;
        buf[r] = '\0';
        if (status_ok < 0)
            status_ok = !strncmp(buf, "HTTP/1.1 200", 12);
        if (sh->t_first[i] == 0 && strstr(buf, "\"text\":\""))
            sh->t_first[i] = numla_now_s();
        char scan[sizeof tail + sizeof buf];
        memcpy(scan, tail, tl);
        memcpy(scan + tl, buf, (size_t)r + 1);
        const char *u = strstr(scan, "\"completion_tokens\":");
        if (u)
            sh->tokens[i] = (int32_t)atoi(u + 20);
        if (strstr(scan, "data: [DONE]"))
            done = 1;
        size_t sl = tl + (size_t)r, keep = sl < sizeof tail - 1 ? sl : sizeof tail - 1;
        memmove(tail, scan + sl - keep, keep);
        tl = keep;
    }
    sh->t_end[i] = numla_now_s();
    close(fd);
    ok = status_ok == 1 && done;
out:
    free(body);
    free(req);
    return ok;
}

static void *bh_client(void *arg)
{
    bh_shared *sh = arg;
    for (;;) {
        int i = atomic_fetch_add(&sh->next, 1);
        if (i >= sh->n)
            break;
        if (!bh_request(sh, i))
            atomic_fetch_add(&sh->failed, 1);
        atomic_fetch_add(&sh->done, 1);
    }
    return NULL;
}

numla_status numla_bench_http_run(numla_engine *eng, const numla_sched_options *sched,
                                  const numla_request *rq, int n, int c,
                                  numla_bench_http_level *out)
{
    numla_http_backend *backend = NULL;
    numla_http_metrics *metrics = NULL;
    numla_http_server *server = NULL;
    numla_http_adapter *adapter = NULL;
    numla_serve_loop *loop = NULL;
    pthread_t *th = calloc((size_t)c, sizeof *th);
    bh_shared sh = {.rq = rq, .n = n};
    sh.t_send = calloc((size_t)n, sizeof(double));
    sh.t_first = calloc((size_t)n, sizeof(double));
    sh.t_end = calloc((size_t)n, sizeof(double));
    sh.tokens = calloc((size_t)n, sizeof(int32_t));
    double *v = calloc((size_t)n, sizeof(double));
    int started = 0;
    numla_status s = NUMLA_STATUS_OK;
    if (!th || !sh.t_send || !sh.t_first || !sh.t_end || !sh.tokens || !v) {
        s = numla_error_set(NUMLA_STATUS_NO_MEMORY, __FILE__, __LINE__, __func__,
                            "bench http: no memory");
        goto done;
    }
    const numla_model_config *cfg = numla_engine_config(eng);
    NUMLA_CHECK_GOTO(numla_http_backend_create(n + c, &backend), s, done);
    NUMLA_CHECK_GOTO(numla_http_metrics_create(&metrics), s, done);
    numla_http_server_options so = {.port = 0, .model_name = "bench",
                                    .vocab_size = cfg->vocab_size, .max_body = 16 << 20};
    NUMLA_CHECK_GOTO(numla_http_server_start(&so, backend, metrics, &server), s, done);
    numla_http_adapter_options go = {.backend = backend, .metrics = metrics, .wait_ms = 1};
    NUMLA_CHECK_GOTO(numla_http_adapter_create(&go, &adapter), s, done);
    numla_serve_options lo = {.sched = *sched, .kv = numla_engine_kv_cache(eng),
                              .exec = numla_cli_engine_exec, .exec_ctx = eng, .max_waiting = c,
                              .latency_window = n}; /* every request of the level */
    lo.sched.max_seqs = c;
    numla_serve_source src = numla_http_adapter_source(adapter);
    numla_serve_sink sink = numla_http_adapter_sink(adapter);
    NUMLA_CHECK_GOTO(numla_serve_loop_create(&lo, &src, &sink, &loop), s, done);
    numla_http_adapter_set_loop(adapter, loop);
    numla_http_server_set_ready(server, 1);
    sh.port = numla_http_server_port(server);
    const double t0 = numla_now_s();
    for (; started < c; started++)
        if (pthread_create(&th[started], NULL, bh_client, &sh) != 0)
            break;
    while (atomic_load(&sh.done) < n) {
        numla_http_adapter_poll(adapter);
        NUMLA_CHECK_GOTO(numla_serve_loop_run_once(loop, NULL, NULL), s, done);
    }
    const double wall = numla_now_s() - t0;
    int64_t toks = 0;
    int m = 0;
    double client_e2e = 0;
    for (int i = 0; i < n; i++) {
        toks += sh.tokens[i];
        client_e2e += sh.t_end[i] - sh.t_send[i];
    }
    for (int i = 0; i < n; i++)
        if (sh.t_first[i] > 0)
            v[m++] = sh.t_first[i] - sh.t_send[i];
    *out = (numla_bench_http_level){.wall = wall, .tps = (double)toks / wall, .out_tokens = toks,
                                    .failed = atomic_load(&sh.failed)};
    out->ttft50 = 1e3 * numla_bench_percentile(v, m, 50);
    out->ttft99 = 1e3 * numla_bench_percentile(v, m, 99);
    m = 0;
    for (int i = 0; i < n; i++)
        if (sh.t_first[i] > 0 && sh.tokens[i] > 1)
            v[m++] = (sh.t_end[i] - sh.t_first[i]) / (sh.tokens[i] - 1);
    out->tpot50 = 1e3 * numla_bench_percentile(v, m, 50);
    out->tpot99 = 1e3 * numla_bench_percentile(v, m, 99);
    /* the loop's own end-to-end time per request: TTFT + TPOT x (tokens - 1) */
    const double *lt, *lp;
    int64_t nlt, nlp;
    numla_serve_loop_latencies(loop, &lt, &nlt, &lp, &nlp);
    double loop_e2e = 0;
    for (int64_t i = 0; i < nlt; i++)
        loop_e2e += lt[i];
    for (int64_t i = 0; i < nlp; i++)
        loop_e2e += lp[i] * (double)(rq[0].params.max_tokens - 1);
    out->overhead_ms = nlt > 0 ? 1e3 * (client_e2e / n - loop_e2e / (double)nlt) : 0;
done:
    /* on an error the clients still waiting get 503s, so every thread ends */
    if (backend)
        numla_http_backend_close(backend, "the benchmark is over");
    numla_http_adapter_destroy(&adapter);
    numla_http_server_stop(&server);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    numla_serve_loop_destroy(&loop);
    numla_http_backend_destroy(&backend);
    numla_http_metrics_destroy(&metrics);
    free(th);
    free(sh.t_send);
    free(sh.t_first);
    free(sh.t_end);
    free(sh.tokens);
    free(v);
    return s;
}
