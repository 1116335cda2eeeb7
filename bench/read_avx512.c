/* bench/read_avx512.c — the read-bandwidth loop with the access pattern of numla's GEMV kernels:
 * 64-byte vector loads, and a software prefetch of the line 8 KiB ahead (the distance the
 * 8-bit GEMVs use), so the read probe is not held below what the kernels reach by a hardware
 * prefetcher that ramps up slowly (bench.h, numla_bench_read_gbps). */
#include "bench/bench.h"

#include <immintrin.h>

float numla_bench_read_avx512(const void *p, size_t bytes)
{
    enum { AHEAD = 8192 };
    const char *b = p;
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 256 <= bytes; i += 256) {
        _mm_prefetch(b + i + AHEAD, _MM_HINT_T0);
        _mm_prefetch(b + i + AHEAD + 64, _MM_HINT_T0);
        _mm_prefetch(b + i + AHEAD + 128, _MM_HINT_T0);
        _mm_prefetch(b + i + AHEAD + 192, _MM_HINT_T0);
        a0 = _mm512_add_epi64(a0, _mm512_loadu_si512((const void *)(b + i)));
        a1 = _mm512_add_epi64(a1, _mm512_loadu_si512((const void *)(b + i + 64)));
        a2 = _mm512_add_epi64(a2, _mm512_loadu_si512((const void *)(b + i + 128)));
        a3 = _mm512_add_epi64(a3, _mm512_loadu_si512((const void *)(b + i + 192)));
    }
    a0 = _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3));
    return (float)_mm512_reduce_add_epi64(a0);
}
