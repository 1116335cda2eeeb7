/* bench/bench_machine.c — `numla bench machine`: the machine figures alone (read and copy
 * bandwidth, dot-product peak of every supported ISA) on the current OpenMP threads, the
 * denominators of every other benchmark's ratios. */
#include "bench/bench.h"
#include "engine/cli.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int numla_bench_machine_main(int argc, char **argv)
{
    int threads = omp_get_max_threads(), reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            threads = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = atoi(argv[++i]);
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
    printf("read  %8.2f GB/s\n", numla_bench_read_gbps_in(threads, buf, bytes, reps));
    printf("copy  %8.2f GB/s (read + written)\n", numla_bench_copy_gbps_in(threads, buf, bytes, reps));
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
