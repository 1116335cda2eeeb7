/* bench/peak_amx.c — per-thread AMX-BF16 and AMX-INT8 peak loops (see bench_peak.h): 4
 * independent C tiles, the accumulator count of the linear GEMM's micro-kernel
 * (kernels/x86/linear_amx.c) and of the block encodings' byte-plane tiles
 * (kernels/x86/qblock_panel_amx.c). */
#include "bench/bench_peak.h"

#include <immintrin.h>
#include <stdint.h>

#include "kernels/isa.h"
#include "kernels/x86/amx.h"

int numla_bench_peak_amx_ok(void) { return numla_cpu_has(NUMLA_CPU_AMX_BF16); }

int numla_bench_peak_amx_int8_ok(void) { return numla_cpu_has(NUMLA_CPU_AMX_INT8); }

/* A peak loop NAME: zero operand tiles of element type T (1024 bytes), 4 DP products an iteration
 * into 4 independent C tiles; C's first element (type CT) is returned, so the loop cannot be
 * dropped. */
#define NUMLA_BENCH_PEAK_AMX_LOOP(NAME, T, CT, DP)                                                  \
    float NAME(long iters)                                                                          \
    {                                                                                               \
        static const T zero[1024 / sizeof(T)] __attribute__((aligned(64)));                        \
        CT out[256] __attribute__((aligned(64)));                                                   \
        numla_amx_tiles_begin();                                                                    \
        _tile_zero(0);                                                                              \
        _tile_zero(1);                                                                              \
        _tile_zero(2);                                                                              \
        _tile_zero(3);                                                                              \
        _tile_loadd(4, zero, 64);                                                                   \
        _tile_loadd(5, zero, 64);                                                                   \
        _tile_loadd(6, zero, 64);                                                                   \
        _tile_loadd(7, zero, 64);                                                                   \
        for (long it = 0; it < iters; it++) {                                                       \
            DP(0, 4, 6);                                                                            \
            DP(1, 4, 7);                                                                            \
            DP(2, 5, 6);                                                                            \
            DP(3, 5, 7);                                                                            \
        }                                                                                           \
        _tile_stored(0, out, 64);                                                                   \
        numla_amx_tiles_end();                                                                      \
        return (float)out[0];                                                                       \
    }

NUMLA_BENCH_PEAK_AMX_LOOP(numla_bench_peak_amx_loop, uint16_t, float, _tile_dpbf16ps)
NUMLA_BENCH_PEAK_AMX_LOOP(numla_bench_peak_amx_int8_loop, int8_t, int32_t, _tile_dpbssd)
