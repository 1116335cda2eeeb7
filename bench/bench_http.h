/* bench/bench_http.h — one level of `numla bench serve --http`: the same requests as the plain
 * level, sent by closed-loop HTTP clients (plain sockets, streamed /v1/completions with token-id
 * prompts) on 127.0.0.1 to an in-process `numla serve` stack (engine/http/server.h + serving_adapter.h
 * + the serving loop) on rank 0. Not collective itself (the steps are). */
#ifndef NUMLA_BENCH_HTTP_H
#define NUMLA_BENCH_HTTP_H

#include "common/status.h"
#include "engine/parallel/engine.h"
#include "engine/serving/request_io.h"
#include "engine/serving/scheduler.h"

typedef struct numla_bench_http_level {
    double wall, tps;                         /* s, output tok/s */
    double ttft50, ttft99, tpot50, tpot99;    /* ms, as the clients see them */
    double overhead_ms;   /* mean client end-to-end minus mean loop end-to-end, per request */
    int64_t out_tokens;
    int failed;           /* requests that did not answer 200 */
} numla_bench_http_level;

/* Serve rq[0..n) through HTTP with c clients (and c sequences in flight). */
numla_status numla_bench_http_run(numla_engine *eng, const numla_sched_options *sched,
                                  const numla_request *rq, int n, int c,
                                  numla_bench_http_level *out);

#endif
