/* bench/bench_machine.c — `numla bench machine`: the machine figures alone (read and copy
 * bandwidth, dot-product peak of every supported ISA) on the current OpenMP threads, the
 * denominators of every other benchmark's ratios. */
#include "bench/bench.h"
#include "bench/bench_opts.h"
#include "bench/bench_peak.h"
#include "bench/bench_stream_probe.h"
#include "engine/cli/cli.h"

#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The stream probe: the decode kernel's cache layout streamed with vector loads and with AMX
 * tile loads, blocks in memory order and shuffled (bench_stream_probe.h). It measures what
 * bounds the AMX decode kernel on a given machine (docs/decode.md). */
static void numla_bench_stream_probe_(int threads, void *buf, size_t bytes, double read_gbps,
                                      int reps)
{
    int64_t tiles = 0;
    int64_t *order = numla_bench_probe_order(bytes, 0, &tiles);
    int64_t *shuffled = numla_bench_probe_order(bytes, 1, &tiles);
    if (!order || !shuffled) {
        free(order);
        free(shuffled);
        return;
    }
    /* bf16 1.0 everywhere, first-touched by the threads that stream it */
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < (int64_t)(bytes / 2); i++)
        ((uint16_t *)buf)[i] = 0x3f80;
    static const struct {
        const char *what;
        int shuffled, vector, arg;
    } probes[] = {
        {"vector loads, blocks in order", 0, 1, 0},
        {"vector loads, blocks shuffled", 1, 1, 0},
        {"vector loads in order + 18 L1 tile-load groups per tile", 0, 1, 1},
        {"AMX Q.K tile loads, blocks in order", 0, 0, 0},
        {"AMX Q.K tile loads, blocks shuffled", 1, 0, 0},
        {"AMX Q.K tile loads, shuffled + prefetch of next tile", 1, 0, NUMLA_BENCH_PROBE_PREFETCH},
        {"AMX Q.K tile loads, shuffled, blocks read slice-major", 1, 0,
         NUMLA_BENCH_PROBE_SLICE_MAJOR},
    };
    printf("stream probe: decode-kernel cache layout (16-row blocks of 1152 bytes, 64-key "
           "tiles), %lld tiles\n",
           (long long)tiles);
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        double g = numla_bench_probe_gbps(threads, buf, probes[i].shuffled ? shuffled : order,
                                          tiles, probes[i].vector, probes[i].arg, reps);
        printf("  %-58s %8.2f GB/s  %.2f of read\n", probes[i].what, g,
               read_gbps > 0 ? g / read_gbps : 0.0);
    }
    free(order);
    free(shuffled);
}

static int numla_bench_machine_main(int argc, char **argv)
{
    int threads = omp_get_max_threads(), reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") || !strcmp(argv[i], "--reps")) {
            if (!numla_bench_int_opt("numla bench machine", argc, argv, &i,
                                     !strcmp(argv[i], "--threads") ? &threads : &reps))
                return 2;
        } else {
            fprintf(stderr, "usage: numla bench machine [--threads N] [--reps N]\n");
            return 2;
        }
    }
    if (threads < 1 || reps < 1) {
        fprintf(stderr, "numla bench machine: --threads and --reps must be >= 1\n");
        return 2;
    }
    size_t bytes = numla_bench_stream_bytes();
    printf("threads %d, LLC %.0f MiB, stream arrays %.2f GiB, best of %d\n", threads,
           (double)numla_bench_llc_bytes() / (1 << 20), (double)bytes / (1 << 30), reps);
    void *buf = numla_bench_alloc(bytes); /* one buffer for both: one first touch */
    if (!buf) {
        fprintf(stderr, "numla bench machine: cannot map %zu bytes\n", bytes);
        return 1;
    }
    const double read_gbps = numla_bench_read_gbps_in(threads, buf, bytes, reps);
    printf("read  %8.2f GB/s\n", read_gbps);
    printf("copy  %8.2f GB/s (read + written)\n", numla_bench_copy_gbps_in(threads, buf, bytes, reps));
    if (numla_isa_supported(NUMLA_ISA_AVX512BF16) && numla_bench_peak_amx_ok())
        numla_bench_stream_probe_(threads, buf, bytes, read_gbps, reps);
    numla_bench_free(buf, bytes);
    for (int i = 0; i < NUMLA_ISA_COUNT; i++)
        if (numla_isa_supported((numla_isa)i))
            printf("peak  %8.1f GFLOP/s  %s\n", numla_bench_peak_gflops((numla_isa)i, threads, reps),
                   numla_isa_name((numla_isa)i));
    if (numla_isa_supported(NUMLA_ISA_AVX512BF16)) {
        printf("peak  %8.1f GFLOP/s  vdpbf16ps alone\n", numla_bench_peak_dpbf16_gflops(threads, reps));
        printf("peak  %8.1f GFLOP/s  AMX-BF16 tiles (0: not usable)\n",
               numla_bench_peak_amx_gflops(threads, reps));
    }
    return 0;
}

NUMLA_CLI_COMMAND("bench machine", numla_bench_machine_main,
                  "read/copy bandwidth and dot-product peak of this machine [--threads N]")
