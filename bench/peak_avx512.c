/* bench/peak_avx512.c — per-thread fp32 FMA peak loop on zmm: the arithmetic the avx512 decode
 * kernel uses after widening bf16 to fp32 (see bench_peak.h). */
#include "bench/bench_peak.h"

#include <immintrin.h>

float numla_bench_peak_avx512_loop(long iters)
{
    enum { N = NUMLA_BENCH_PEAK_ACC_ZMM };
    const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-6f); /* bounded: acc -> 1 */
    __m512 acc[N];
    for (int i = 0; i < N; i++)
        acc[i] = _mm512_set1_ps((float)i);
    for (long it = 0; it < iters; it++) {
#pragma GCC unroll 32
        for (int i = 0; i < N; i++)
            acc[i] = _mm512_fmadd_ps(acc[i], x, y);
    }
    __m512 s = acc[0];
    for (int i = 1; i < N; i++)
        s = _mm512_add_ps(s, acc[i]);
    return _mm512_reduce_add_ps(s);
}
