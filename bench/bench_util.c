/* bench/bench_util.c — clocks and statistics for the benchmarks (see bench.h). */
#define _GNU_SOURCE
#include "bench/bench.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double numla_bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int numla_bench_cmp_(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double numla_bench_percentile(const double *v, int n, double p)
{
    if (n <= 0)
        return 0.0;
    double *c = malloc((size_t)n * sizeof *c);
    if (!c)
        return 0.0;
    memcpy(c, v, (size_t)n * sizeof *c);
    qsort(c, (size_t)n, sizeof *c, numla_bench_cmp_);
    double pos = p / 100.0 * (n - 1);
    int lo = (int)pos;
    int hi = lo + 1 < n ? lo + 1 : lo;
    double r = c[lo] + (pos - lo) * (c[hi] - c[lo]);
    free(c);
    return r;
}

double numla_bench_median(const double *v, int n) { return numla_bench_percentile(v, n, 50.0); }

size_t numla_bench_llc_bytes(void)
{
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (l3 > 0)
        return (size_t)l3;
    if (l2 > 0)
        return (size_t)l2;
    return (size_t)32 << 20;
}
