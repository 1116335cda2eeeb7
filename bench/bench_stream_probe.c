/* bench/bench_stream_probe.c — driver of the stream probe (bench/bench_stream_probe.h): block
 * orders and the timed parallel run of one probe loop. */
#include "bench/bench_stream_probe.h"

#include <omp.h>
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

/* GB/s of one probe loop (bench_stream_probe.h) on all threads at once, each over its share of
 * the tiles, best of reps. vector != 0: numla_bench_probe_vector, else _tiles. */
double numla_bench_probe_gbps(int threads, const char *buf, const int64_t *order, int64_t tiles,
                              int vector, int arg, int reps)
{
    double best = 0.0;
    volatile float sink = 0.0f;
#pragma omp parallel num_threads(threads)
    {
        const int id = omp_get_thread_num(), nt = omp_get_num_threads();
        const int64_t t0 = tiles * id / nt, t1 = tiles * (id + 1) / nt;
        for (int r = 0; r < reps; r++) {
            double start = 0.0;
#pragma omp barrier
#pragma omp master
            start = numla_bench_now();
#pragma omp barrier
            float v = vector ? numla_bench_probe_vector(buf, order, t0, t1, arg)
                             : numla_bench_probe_tiles(buf, order, t0, t1, arg);
#pragma omp barrier
#pragma omp master
            {
                double g = (double)tiles * 4 * NUMLA_BENCH_PROBE_BLOCK_BYTES /
                           (numla_bench_now() - start) * 1e-9;
                if (g > best)
                    best = g;
            }
#pragma omp atomic
            sink += v;
        }
    }
    (void)sink;
    return best;
}

