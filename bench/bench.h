/* bench/bench.h — shared pieces of the benchmark programs: statistics, the machine figures
 * every ratio is measured against (read/copy bandwidth, bf16 dot-product peak), and output in
 * table or JSON-lines form; times come from numla_now_s (common/clock.h). Benchmarks print
 * ratios measured in the same run (docs/design.md §7); they never pass or fail on time. */
#ifndef NUMLA_BENCH_BENCH_H
#define NUMLA_BENCH_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "common/clock.h" /* numla_now_s: the benchmarks' clock */
#include "kernels/isa.h"

/* Runs body(ctx, id, nt) on `threads` OpenMP threads at once (thread id of nt), `reps` times,
 * each repetition timed between barriers, after setup(ctx, id, nt) once per thread when not
 * NULL (first touch by the thread that will stream the memory); returns the shortest
 * repetition in seconds and, when
 * team is not NULL, the team size OpenMP gave. The bodies' results are summed into a sink so
 * their work is not optimised away. */
double numla_bench_parallel_best_s(int threads, int reps, void (*setup)(void *ctx, int id, int nt),
                                   float (*body)(void *ctx, int id, int nt), void *ctx, int *team);
/* The JSON Schema of an 8-property object (strings, an integer, a bounded string, an array of
 * strings, an enum, a number, a boolean, a nullable string; all required): `numla bench
 * grammar`'s document's schema, and what `numla bench serve --schema builtin` constrains to. */
extern const char numla_bench_schema_8prop[];
/* The same object with its strings, array and numbers bounded (a document of at most a few
 * dozen tokens): `numla bench grammar`'s `bounded` row, and `numla bench serve --schema
 * bounded`. */
extern const char numla_bench_schema_bounded[];
/* Median of n values (sorts a copy). */
double numla_bench_median(const double *v, int n);
/* The mean number of distinct values among the ids of w consecutive rows of ids (n, k), over
 * every start t in [0, n - w] (rows t..t+w-1); ids in [0, range), others ignored. What a
 * verify step of w rows reads of an MoE layer: the union of its rows' routed experts.
 * 0 when n < w or w < 1. */
double numla_bench_union_mean(const int32_t *ids, int64_t n, int64_t k, int64_t range, int64_t w);
/* Percentile p in [0, 100] of n values, linear interpolation (sorts a copy). */
double numla_bench_percentile(const double *v, int n, double p);

/* Last-level cache size in bytes (sysconf, falling back to 32 MiB). */
size_t numla_bench_llc_bytes(void);

/* Bytes of the streaming arrays for the bandwidth figures: max(2 GiB, 4x LLC), capped at
 * 6 GiB and at a quarter of the available memory (the machine is shared). */
size_t numla_bench_stream_bytes(void);
/* MemAvailable from /proc/meminfo in bytes (0 when unknown). */
size_t numla_bench_mem_available(void);
/* Page-aligned anonymous memory for big benchmark buffers; transparent huge pages only when
 * NUMLA_BENCH_HUGEPAGES=1 (their first touch is slow in VMs). Not touched: callers first-touch
 * it from the threads that will use it. NULL on failure. Free with numla_bench_free(p, bytes). */
void *numla_bench_alloc(size_t bytes);
void numla_bench_free(void *p, size_t bytes);

/* Read bandwidth in GB/s (1e9 B/s): all `threads` OpenMP threads sum disjoint slices of an
 * array of `bytes` (choose >= 4x the LLC), best of `reps`, the faster of a plain loop and (on
 * AVX-512 CPUs) the GEMV kernels' access pattern, vector loads with a software prefetch 8 KiB
 * ahead (numla_bench_read_avx512): the ceiling the decode fractions are taken against must not
 * be one the kernels beat. */
double numla_bench_read_gbps(int threads, size_t bytes, int reps);
/* Sum of `bytes` at p (any alignment) read as above (bench/read_avx512.c; AVX-512F only). */
float numla_bench_read_avx512(const void *p, size_t bytes);
/* memcpy bandwidth in GB/s counting bytes read + written, same conventions. */
double numla_bench_copy_gbps(int threads, size_t bytes, int reps);
/* The same two figures over a caller's buffer of `bytes` (numla_bench_alloc), which they
 * overwrite: a benchmark that needs big buffers anyway pays the first touch once (in a VM a
 * fresh gigabyte can take seconds to fault in). */
double numla_bench_read_gbps_in(int threads, void *buf, size_t bytes, int reps);
double numla_bench_copy_gbps_in(int threads, void *buf, size_t bytes, int reps);
/* Peak bf16 dot-product GFLOP/s (2 flops per multiply-add) reachable by the kernels of `isa`
 * on `threads` threads at once: on avx512bf16 the faster of vdpbf16ps and fp32 FMA (its kernels
 * may use either), fp32 FMA on avx512/avx2 (the bf16 kernels there widen to fp32), a scalar
 * FMA loop on ref. 16+ independent accumulators per thread, best of `reps`. */
double numla_bench_peak_gflops(numla_isa isa, int threads, int reps);
/* vdpbf16ps alone (0 when the CPU lacks it). */
double numla_bench_peak_dpbf16_gflops(int threads, int reps);
/* AMX-BF16 TDPBF16PS on 4 independent accumulator tiles per thread (0 when the CPU or OS does
 * not allow tiles): the ceiling of the linear layers' AMX GEMM, which does two tile products
 * (split-bf16 activations) per useful multiply-add. Short repetitions, best of `reps`: it
 * reports the clock before a sustained-AMX frequency drop (figures: docs/benchmarks.md). */
double numla_bench_peak_amx_gflops(int threads, int reps);
/* AMX-INT8 TDPBSSD the same way (0 without AMX-INT8), GOP/s: the ceiling of the int8 tile paths
 * (W8A8, int8-row's planes, the block encodings' Q8 mode), which take one (W8A8), two (the
 * block encodings' byte planes) or three (int8-row) tile products per useful multiply-add. */
double numla_bench_peak_amx_int8_gops(int threads, int reps);

#endif
