/* bench/bench_peak.h — private to bench/: the per-thread peak loops, one per ISA, each in a
 * file named for its ISA so it is compiled with that ISA's flags (bench/peak_<isa>.c). The
 * timing harness (bench_util.c) runs one on every thread inside a single parallel region. */
#ifndef NUMLA_BENCH_BENCH_PEAK_H
#define NUMLA_BENCH_BENCH_PEAK_H

/* Independent accumulators per thread: enough to cover latency x issue width on current x86
 * (docs/design.md §7: 8 under-reports Zen 5 by a third). 32 zmm registers leave room for 24; the
 * 16 ymm registers of AVX2 for 14 at most (two hold the operands), and 12 already cover a
 * 4-cycle FMA on two ports with margin. */
enum { NUMLA_BENCH_PEAK_ACC_ZMM = 24, NUMLA_BENCH_PEAK_ACC_YMM = 12 };

/* Run `iters` iterations of that many independent multiply-adds on full
 * vectors and return a value depending on all of them (so none is optimised away). */
float numla_bench_peak_avx512bf16_loop(long iters);
float numla_bench_peak_avx512_loop(long iters);
float numla_bench_peak_avx2_loop(long iters);

/* AMX (bench/peak_amx.c): 4 TDPBF16PS (16 x 16 x 32 each) per iteration; the loop configures
 * and releases the tiles itself. _ok: whether tiles may be used (CPU and OS). */
float numla_bench_peak_amx_loop(long iters);
int numla_bench_peak_amx_ok(void);
#define NUMLA_BENCH_PEAK_FLOPS_AMX (4 * 2.0 * 16 * 16 * 32)
/* AMX-INT8: 4 TDPBSSD (16 x 16 x 64 each) per iteration, 2 ops per multiply-add; _ok as above. */
float numla_bench_peak_amx_int8_loop(long iters);
int numla_bench_peak_amx_int8_ok(void);
#define NUMLA_BENCH_PEAK_OPS_AMX_INT8 (4 * 2.0 * 16 * 16 * 64)

/* Flops per iteration of each loop (2 per multiply-add). */
#define NUMLA_BENCH_PEAK_FLOPS_AVX512BF16 (NUMLA_BENCH_PEAK_ACC_ZMM * 64.0) /* 16 lanes x 2 pairs */
#define NUMLA_BENCH_PEAK_FLOPS_AVX512 (NUMLA_BENCH_PEAK_ACC_ZMM * 32.0)     /* 16 lanes */
#define NUMLA_BENCH_PEAK_FLOPS_AVX2 (NUMLA_BENCH_PEAK_ACC_YMM * 16.0)       /* 8 lanes */

#endif
