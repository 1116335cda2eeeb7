/* bench/bench_linear_peak_avx512bf16.c — the vdpbf16ps peak that `numla bench linear` measures
 * its GEMM against: all threads at once, 24 independent accumulator chains per thread (more than
 * latency x throughput of current x86 cores), best of `reps` short (~1-2 ms) bursts, since the
 * machine is shared and a long run is always preempted. Compiled with avx512bf16 flags by
 * its file name; callers check numla_isa_supported(NUMLA_ISA_AVX512BF16) first.
 * To be unified with numla_bench_peak_gflops (bench/bench.h) at merge. */
#include <immintrin.h>
#include <omp.h>

#include "bench/bench.h"

double numla_bench_linear_peak_bf16_gflops(int threads, int reps);
double numla_bench_linear_peak_fma_gflops(int threads, int reps);

enum { NUMLA_BENCH_PEAK_ACC = 24 };

/* iters x 24 vdpbf16ps; the result is returned so the loop cannot be removed. */
static float numla_bench_linear_dp_loop_(long iters)
{
    __m512 acc[NUMLA_BENCH_PEAK_ACC];
    for (int j = 0; j < NUMLA_BENCH_PEAK_ACC; j++)
        acc[j] = _mm512_set1_ps((float)j);
    /* 2^-10 x 2^-10 per product: no overflow and no denormals over any iteration count used. */
    const __m512bh a = (__m512bh)_mm512_set1_epi16((short)0x3A80);
    const __m512bh b = (__m512bh)_mm512_set1_epi16((short)0x3A80);
    for (long it = 0; it < iters; it++) {
#pragma GCC unroll 24
        for (int j = 0; j < NUMLA_BENCH_PEAK_ACC; j++)
            acc[j] = _mm512_dpbf16_ps(acc[j], a, b);
    }
    __m512 s = acc[0];
    for (int j = 1; j < NUMLA_BENCH_PEAK_ACC; j++)
        s = _mm512_add_ps(s, acc[j]);
    return _mm512_reduce_add_ps(s);
}

/* The same for fp32 FMA (zmm): what the exact widen+FMA path can reach. */
static float numla_bench_linear_fma_loop_(long iters)
{
    __m512 acc[NUMLA_BENCH_PEAK_ACC];
    for (int j = 0; j < NUMLA_BENCH_PEAK_ACC; j++)
        acc[j] = _mm512_set1_ps((float)j);
    const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-4f);
    for (long it = 0; it < iters; it++) {
#pragma GCC unroll 24
        for (int j = 0; j < NUMLA_BENCH_PEAK_ACC; j++)
            acc[j] = _mm512_fmadd_ps(acc[j], a, b);
    }
    __m512 s = acc[0];
    for (int j = 1; j < NUMLA_BENCH_PEAK_ACC; j++)
        s = _mm512_add_ps(s, acc[j]);
    return _mm512_reduce_add_ps(s);
}

double numla_bench_linear_peak_fma_gflops(int threads, int reps)
{
    const long iters = 100000;
    double best = 0.0;
    volatile float sink = 0.0f;
    for (int r = 0; r < reps; r++) {
        float tot = 0.0f;
        double t0 = numla_bench_now();
#pragma omp parallel num_threads(threads) reduction(+ : tot)
        tot += numla_bench_linear_fma_loop_(iters);
        sink = tot;
        double t = numla_bench_now() - t0;
        double gf = (double)threads * (double)iters * NUMLA_BENCH_PEAK_ACC * 32.0 / t * 1e-9;
        if (gf > best)
            best = gf;
    }
    (void)sink;
    return best;
}

double numla_bench_linear_peak_bf16_gflops(int threads, int reps)
{
    const long iters = 100000;
    double best = 0.0;
    volatile float sink = 0.0f;
    for (int r = 0; r < reps; r++) {
        float tot = 0.0f;
        double t0 = numla_bench_now();
#pragma omp parallel num_threads(threads) reduction(+ : tot)
        tot += numla_bench_linear_dp_loop_(iters);
        sink = tot;
        double t = numla_bench_now() - t0;
        /* 16 lanes x 2 products x 2 flops per vdpbf16ps. */
        double gf = (double)threads * (double)iters * NUMLA_BENCH_PEAK_ACC * 64.0 / t * 1e-9;
        if (gf > best)
            best = gf;
    }
    (void)sink;
    return best;
}
