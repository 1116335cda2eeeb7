/* bench/peak_avx2.c — per-thread fp32 FMA peak loop on ymm (see bench_peak.h). */
#include "bench/bench_peak.h"

#include <immintrin.h>

float numla_bench_peak_avx2_loop(long iters)
{
    enum { N = NUMLA_BENCH_PEAK_ACC_YMM };
    const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-6f);
    __m256 acc[N];
    for (int i = 0; i < N; i++)
        acc[i] = _mm256_set1_ps((float)i);
    for (long it = 0; it < iters; it++) {
#pragma GCC unroll 32
        for (int i = 0; i < N; i++)
            acc[i] = _mm256_fmadd_ps(acc[i], x, y);
    }
    __m256 s = acc[0];
    for (int i = 1; i < N; i++)
        s = _mm256_add_ps(s, acc[i]);
    float v[8];
    _mm256_storeu_ps(v, s);
    return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
}
