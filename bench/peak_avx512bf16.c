/* bench/peak_avx512bf16.c — per-thread bf16 dot-product peak loop: vdpbf16ps on zmm, the
 * instruction the avx512bf16 decode kernel's Q·K and P·V use (see bench_peak.h). */
#include "bench/bench_peak.h"

#include <immintrin.h>

float numla_bench_peak_avx512bf16_loop(long iters)
{
    enum { N = NUMLA_BENCH_PEAK_ACC_ZMM };
    /* Small products keep the sums normal and far from overflow for any iteration count. */
    const __m512bh x = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(0.5f));
    const __m512bh y = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0x1p-24f), _mm512_set1_ps(0x1p-24f));
    __m512 acc[N];
    for (int i = 0; i < N; i++)
        acc[i] = _mm512_set1_ps((float)i);
    for (long it = 0; it < iters; it++) {
#pragma GCC unroll 32
        for (int i = 0; i < N; i++)
            acc[i] = _mm512_dpbf16_ps(acc[i], x, y);
    }
    __m512 s = acc[0];
    for (int i = 1; i < N; i++)
        s = _mm512_add_ps(s, acc[i]);
    return _mm512_reduce_add_ps(s);
}
