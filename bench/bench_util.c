/* bench/bench_util.c — clocks, statistics, big-buffer allocation and the machine figures
 * (read/copy bandwidth, dot-product peak) every benchmark ratio is taken against (bench.h).
 * The per-ISA peak loops live in peak_<isa>.c; the timing harness around them is here. */
#define _GNU_SOURCE
#include "bench/bench.h"
#include "bench/bench_peak.h"

#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

double numla_bench_parallel_best_s(int threads, int reps, void (*setup)(void *ctx, int id, int nt),
                                   float (*body)(void *ctx, int id, int nt), void *ctx, int *team)
{
    double best = 0.0;
    volatile float sink = 0.0f;
#pragma omp parallel num_threads(threads)
    {
        const int id = omp_get_thread_num(), nt = omp_get_num_threads();
        if (team && id == 0)
            *team = nt;
        if (setup)
            setup(ctx, id, nt);
        for (int r = 0; r < reps; r++) {
            double t0 = 0.0;
#pragma omp barrier
#pragma omp master
            t0 = numla_now_s();
#pragma omp barrier
            const float v = body(ctx, id, nt);
#pragma omp barrier
#pragma omp master
            {
                const double dt = numla_now_s() - t0;
                if (best == 0.0 || dt < best)
                    best = dt;
            }
#pragma omp atomic
            sink += v;
        }
    }
    (void)sink;
    return best;
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

double numla_bench_union_mean(const int32_t *ids, int64_t n, int64_t k, int64_t range, int64_t w)
{
    if (w < 1 || n < w || k < 1 || range < 1)
        return 0.0;
    /* a sliding window: cnt[e] rows of the window that hold e, distinct the number of cnt > 0 */
    int32_t *cnt = calloc((size_t)range, sizeof *cnt);
    if (!cnt)
        return 0.0;
    int64_t distinct = 0;
    double sum = 0.0;
    for (int64_t t = 0; t < n; t++) {
        for (int64_t j = 0; j < k; j++) { /* row t enters (an id twice in a row counts once) */
            const int32_t e = ids[t * k + j];
            int dup = 0;
            for (int64_t i = 0; i < j; i++)
                dup |= ids[t * k + i] == e;
            if (e >= 0 && e < range && !dup && cnt[e]++ == 0)
                distinct++;
        }
        if (t >= w) { /* row t - w leaves */
            for (int64_t j = 0; j < k; j++) {
                const int32_t e = ids[(t - w) * k + j];
                int dup = 0;
                for (int64_t i = 0; i < j; i++)
                    dup |= ids[(t - w) * k + i] == e;
                if (e >= 0 && e < range && !dup && --cnt[e] == 0)
                    distinct--;
            }
        }
        if (t >= w - 1)
            sum += (double)distinct;
    }
    free(cnt);
    return sum / (double)(n - w + 1);
}

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

size_t numla_bench_mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            break;
    fclose(f);
    return (size_t)kb * 1024;
}

size_t numla_bench_stream_bytes(void)
{
    const size_t gib = (size_t)1 << 30;
    size_t bytes = 4 * numla_bench_llc_bytes();
    if (bytes < 2 * gib)
        bytes = 2 * gib;
    if (bytes > 6 * gib)
        bytes = 6 * gib;
    size_t avail = numla_bench_mem_available();
    if (avail && bytes > avail / 4)
        bytes = avail / 4;
    return bytes & ~(size_t)0xfff;
}

void *numla_bench_alloc(size_t bytes)
{
    if (!bytes)
        return NULL;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    /* Opt-in only: in the VMs we run on, faulting in fresh transparent huge pages took several
     * times longer than 4 KiB pages (docs/benchmarks.md), which --short cannot afford. */
    const char *huge = getenv("NUMLA_BENCH_HUGEPAGES");
    if (huge && *huge && strcmp(huge, "0"))
        (void)madvise(p, bytes, MADV_HUGEPAGE); /* a hint; fine to be refused */
    return p;
}

void numla_bench_free(void *p, size_t bytes)
{
    if (p)
        munmap(p, bytes);
}

/* Thread i of n owns bytes [lo, hi) of an array of `words` uint64 — the same split for the
 * first touch and the timed passes, so each thread reads memory it placed. */
static void numla_bench_slice_(size_t words, int i, int n, size_t *lo, size_t *hi)
{
    *lo = words * (size_t)i / (size_t)n;
    *hi = words * (size_t)(i + 1) / (size_t)n;
}

/* Sum with eight independent lanes so the loop is bound by loads, not by one add chain
 * (integer adds vectorise without reassociation concerns). */
static uint64_t numla_bench_sum_(const uint64_t *p, size_t n)
{
    uint64_t s[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            s[k] += p[i + k];
    for (; i < n; i++)
        s[0] += p[i];
    return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

/* The read and copy loops: thread id of nt owns words [lo, hi) of src (and of dst), which it
 * first-touches in setup. */
typedef struct numla_bench_bw_ctx_ {
    uint64_t *src, *dst; /* dst: NULL for the read loop */
    size_t words;
} numla_bench_bw_ctx_;

static void numla_bench_bw_setup_(void *ctx, int id, int nt)
{
    const numla_bench_bw_ctx_ *c = ctx;
    size_t lo, hi;
    numla_bench_slice_(c->words, id, nt, &lo, &hi);
    for (size_t i = lo; i < hi; i++) {
        c->src[i] = i;
        if (c->dst)
            c->dst[i] = 0;
    }
}

static float numla_bench_read_body_(void *ctx, int id, int nt)
{
    const numla_bench_bw_ctx_ *c = ctx;
    size_t lo, hi;
    numla_bench_slice_(c->words, id, nt, &lo, &hi);
    return (float)numla_bench_sum_(c->src + lo, hi - lo);
}

static float numla_bench_copy_body_(void *ctx, int id, int nt)
{
    const numla_bench_bw_ctx_ *c = ctx;
    size_t lo, hi;
    numla_bench_slice_(c->words, id, nt, &lo, &hi);
    memcpy(c->dst + lo, c->src + lo, (hi - lo) * sizeof *c->src);
    return 0.0f;
}

static float numla_bench_read_avx512_body_(void *ctx, int id, int nt)
{
    const numla_bench_bw_ctx_ *c = ctx;
    size_t lo, hi;
    numla_bench_slice_(c->words, id, nt, &lo, &hi);
    return numla_bench_read_avx512(c->src + lo, (hi - lo) * sizeof *c->src);
}

double numla_bench_read_gbps_in(int threads, void *buf, size_t bytes, int reps)
{
    numla_bench_bw_ctx_ c = {buf, NULL, bytes / sizeof(uint64_t)};
    if (!buf || threads < 1 || c.words == 0)
        return 0.0;
    double t = numla_bench_parallel_best_s(threads, reps, numla_bench_bw_setup_,
                                           numla_bench_read_body_, &c, NULL);
    if (__builtin_cpu_supports("avx512f")) {
        const double tv = numla_bench_parallel_best_s(threads, reps, NULL,
                                                      numla_bench_read_avx512_body_, &c, NULL);
        t = tv > 0 && (t <= 0 || tv < t) ? tv : t;
    }
    return t > 0 ? (double)(c.words * sizeof(uint64_t)) / t * 1e-9 : 0.0;
}

double numla_bench_read_gbps(int threads, size_t bytes, int reps)
{
    void *buf = numla_bench_alloc(bytes);
    double g = numla_bench_read_gbps_in(threads, buf, bytes, reps);
    numla_bench_free(buf, bytes);
    return g;
}

double numla_bench_copy_gbps_in(int threads, void *buf, size_t bytes, int reps)
{
    /* Source and destination of bytes/2 each: both far beyond the LLC when bytes is. */
    const size_t words = bytes / 2 / sizeof(uint64_t);
    numla_bench_bw_ctx_ c = {buf, (uint64_t *)buf + words, words};
    if (!buf || threads < 1 || words == 0)
        return 0.0;
    const double t = numla_bench_parallel_best_s(threads, reps, numla_bench_bw_setup_,
                                                 numla_bench_copy_body_, &c, NULL);
    return t > 0 ? 2.0 * (double)(words * sizeof(uint64_t)) / t * 1e-9 : 0.0;
}

double numla_bench_copy_gbps(int threads, size_t bytes, int reps)
{
    void *buf = numla_bench_alloc(bytes);
    double g = numla_bench_copy_gbps_in(threads, buf, bytes, reps);
    numla_bench_free(buf, bytes);
    return g;
}

/* The ref kernels are scalar C, so their peak is a scalar multiply-add chain. The empty asm
 * keeps each accumulator in its own register, so the compiler cannot pack them into vectors. */
static float numla_bench_peak_ref_loop_(long iters)
{
    enum { N = 16 };
    float acc[N];
    const float x = 0.999999f, y = 1e-6f;
    for (int i = 0; i < N; i++)
        acc[i] = (float)i;
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < N; i++) {
            acc[i] = acc[i] * x + y;
            __asm__ volatile("" : "+x"(acc[i]));
        }
    float s = 0;
    for (int i = 0; i < N; i++)
        s += acc[i];
    return s;
}

static double numla_bench_peak_run_(float (*loop)(long), double flops_per_iter, int threads,
                                    int reps);

/* Peak of the one instruction kind `isa` names (vdpbf16ps, fp32 FMA or scalar). */
static double numla_bench_peak_one_(numla_isa isa, int threads, int reps)
{
    float (*loop)(long);
    double flops_per_iter;
    switch (isa) {
    case NUMLA_ISA_AVX512BF16:
        loop = numla_bench_peak_avx512bf16_loop;
        flops_per_iter = NUMLA_BENCH_PEAK_FLOPS_AVX512BF16;
        break;
    case NUMLA_ISA_AVX512:
        loop = numla_bench_peak_avx512_loop;
        flops_per_iter = NUMLA_BENCH_PEAK_FLOPS_AVX512;
        break;
    case NUMLA_ISA_AVX2:
        loop = numla_bench_peak_avx2_loop;
        flops_per_iter = NUMLA_BENCH_PEAK_FLOPS_AVX2;
        break;
    default:
        loop = numla_bench_peak_ref_loop_;
        flops_per_iter = 16 * 2.0;
        break;
    }
    if (threads < 1 || !numla_isa_supported(isa))
        return 0.0;
    return numla_bench_peak_run_(loop, flops_per_iter, threads, reps);
}

typedef struct numla_bench_peak_ctx_ {
    float (*loop)(long);
    long iters;
} numla_bench_peak_ctx_;

static float numla_bench_peak_body_(void *ctx, int id, int nt)
{
    const numla_bench_peak_ctx_ *c = ctx;
    (void)id, (void)nt;
    return c->loop(c->iters);
}

/* Runs loop on `threads` threads at once, ~20 ms per repetition, best of `reps`. */
static double numla_bench_peak_run_(float (*loop)(long), double flops_per_iter, int threads,
                                    int reps)
{
    /* Size a repetition to ~20 ms on one thread so clock and barrier costs vanish. */
    long iters = 1 << 14;
    volatile float sink = 0;
    for (;;) {
        double t0 = numla_now_s();
        sink += loop(iters);
        double dt = numla_now_s() - t0;
        if (dt > 2e-3 || iters > (1L << 40)) {
            iters = (long)((double)iters * 0.02 / (dt > 0 ? dt : 1e-9)) + 1;
            break;
        }
        iters *= 4;
    }
    (void)sink;
    numla_bench_peak_ctx_ loop_ctx = {loop, iters};
    int team = threads;
    const double t = numla_bench_parallel_best_s(threads, reps, NULL, numla_bench_peak_body_, &loop_ctx, &team);
    return t > 0 ? (double)team * (double)iters * flops_per_iter / t * 1e-9 : 0.0;
}

double numla_bench_peak_gflops(numla_isa isa, int threads, int reps)
{
    if (isa == NUMLA_ISA_AMX) /* its vector ceiling; the tile peak is numla_bench_peak_amx_gflops */
        isa = NUMLA_ISA_AVX512BF16;
    double p = numla_bench_peak_one_(isa, threads, reps);
    /* The avx512bf16 kernels may use fp32 FMA on widened bf16 instead of vdpbf16ps (they do
     * where vdpbf16ps issues at half the FMA rate, as on this development machine), so their
     * ceiling is the faster of the two: a roofline against vdpbf16ps alone would overstate
     * them. */
    if (isa == NUMLA_ISA_AVX512BF16) {
        double fma = numla_bench_peak_one_(NUMLA_ISA_AVX512, threads, reps);
        p = fma > p ? fma : p;
    }
    return p;
}

double numla_bench_peak_dpbf16_gflops(int threads, int reps)
{
    return numla_bench_peak_one_(NUMLA_ISA_AVX512BF16, threads, reps);
}

double numla_bench_peak_amx_gflops(int threads, int reps)
{
    if (threads < 1 || !numla_isa_supported(NUMLA_ISA_AVX512BF16) || !numla_bench_peak_amx_ok())
        return 0.0;
    return numla_bench_peak_run_(numla_bench_peak_amx_loop, NUMLA_BENCH_PEAK_FLOPS_AMX, threads,
                                 reps);
}

double numla_bench_peak_amx_int8_gops(int threads, int reps)
{
    if (threads < 1 || !numla_isa_supported(NUMLA_ISA_AVX512BF16) || !numla_bench_peak_amx_int8_ok())
        return 0.0;
    return numla_bench_peak_run_(numla_bench_peak_amx_int8_loop, NUMLA_BENCH_PEAK_OPS_AMX_INT8, threads,
                                 reps);
}
