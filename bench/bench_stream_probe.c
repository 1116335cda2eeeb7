/* bench/bench_stream_probe.c — driver of the stream probe (bench/bench_stream_probe.h): block
 * orders and the timed parallel run of one probe loop. */
#include "bench/bench_stream_probe.h"

#include <stdlib.h>

#include "bench/bench.h"

int64_t *numla_bench_probe_order(size_t bytes, int shuffled, int64_t *tiles)
{
    const int64_t blocks = (int64_t)(bytes / NUMLA_BENCH_PROBE_BLOCK_BYTES) & ~(int64_t)3;
    *tiles = blocks / 4;
    int64_t *order = blocks >= 4 ? malloc((size_t)blocks * sizeof *order) : NULL;
    if (!order)
        return NULL;
    for (int64_t b = 0; b < blocks; b++)
        order[b] = b;
    uint64_t x = 0x9e3779b97f4a7c15ull; /* fixed-seed xorshift: the same shuffle every run */
    for (int64_t b = blocks - 1; shuffled && b > 0; b--) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int64_t j = (int64_t)(x % (uint64_t)(b + 1)), t = order[b];
        order[b] = order[j], order[j] = t;
    }
    return order;
}

typedef struct numla_bench_probe_ctx_ {
    const char *buf;
    const int64_t *order;
    int64_t tiles;
    int vector, arg;
} numla_bench_probe_ctx_;

static float numla_bench_probe_body_(void *ctx, int id, int nt)
{
    const numla_bench_probe_ctx_ *c = ctx;
    const int64_t t0 = c->tiles * id / nt, t1 = c->tiles * (id + 1) / nt;
    return c->vector ? numla_bench_probe_vector(c->buf, c->order, t0, t1, c->arg)
                     : numla_bench_probe_tiles(c->buf, c->order, t0, t1, c->arg);
}

double numla_bench_probe_gbps(int threads, const char *buf, const int64_t *order, int64_t tiles,
                              int vector, int arg, int reps)
{
    numla_bench_probe_ctx_ c = {buf, order, tiles, vector, arg};
    const double t = numla_bench_parallel_best_s(threads, reps, NULL, numla_bench_probe_body_, &c, NULL);
    return t > 0 ? (double)tiles * 4 * NUMLA_BENCH_PROBE_BLOCK_BYTES / t * 1e-9 : 0.0;
}
