/* bench/bench_allreduce.c — `numla bench allreduce [--json] [--reps N] [--min BYTES] [--max BYTES]`:
 * latency of the in-place fp32 allreduce per message size on the shm and mpi paths, measured
 * in the same run with the two paths interleaved rep by rep (so machine noise hits both), and
 * the shm/mpi speedup. Run under `mpirun -n 2` (or more); MPI is initialised here if needed.
 * A rep times a batch of back-to-back allreduces; its per-call time is the slowest rank's;
 * the figure reported is the median over reps (the best rep is printed too). Which path goes
 * first in a rep alternates, so neither always runs right after the other's barrier.
 * Prints, never asserts. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/bench_opts.h"
#include "comm/comm.h"
#include "common/log.h"
#include "engine/cli/cli.h"
#include "engine/cli/settings.h"

/* Seconds per call of `batch` back-to-back allreduces, max over ranks. Collective. */
static numla_status bench_rep_(numla_comm *c, numla_comm_allreduce_path path, float *x, size_t n,
                               int batch, double *out)
{
    NUMLA_CHECK(numla_comm_barrier(c));
    double t0 = numla_now_s();
    for (int b = 0; b < batch; b++)
        NUMLA_CHECK(numla_comm_allreduce_sum_f32_path(c, x, n, path));
    double dt = (numla_now_s() - t0) / batch, mx;
    MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, numla_comm_mpi(c));
    *out = mx;
    return NUMLA_STATUS_OK;
}

static double bench_min_(const double *t, int n)
{
    double m = t[0];
    for (int i = 1; i < n; i++)
        m = t[i] < m ? t[i] : m;
    return m;
}

static int bench_allreduce_main(int argc, char **argv)
{
    int json = 0, reps = 0;
    size_t min_bytes = 8 << 10, max_bytes = 4 << 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (!strcmp(argv[i], "--reps")) {
            if (!numla_bench_int_opt("numla bench allreduce", argc, argv, &i, &reps))
                return 2;
        } else if (!strcmp(argv[i], "--min") && i + 1 < argc)
            min_bytes = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--max") && i + 1 < argc)
            max_bytes = strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: numla bench allreduce [--json] [--reps N] [--min BYTES] "
                            "[--max BYTES]\n");
            return 2;
        }
    }
    if (min_bytes < 4 || max_bytes < min_bytes) {
        fprintf(stderr, "numla bench allreduce: need 4 <= --min <= --max\n");
        return 2;
    }

    numla_comm_session mpi;
    numla_settings set;
    numla_status s = numla_settings_start(&set, &mpi);
    if (s != NUMLA_STATUS_OK)
        numla_comm_abort(NULL, s, "bench allreduce: %s", numla_error_message());
    numla_comm *c = mpi.comm;
    int rank = numla_comm_rank(c), size = numla_comm_size(c);
    int have_shm = numla_comm_shm_available(c);
    if (rank == 0 && size == 1)
        fprintf(stderr, "numla bench allreduce: 1 rank — allreduce is a no-op; run under "
                        "`mpirun -n 2`\n");
    if (rank == 0 && !json)
        printf("allreduce latency, %d ranks, median (best) us per call (slowest rank)\n"
               "%10s %20s %20s %9s\n", size, "bytes", "mpi_us", "shm_us", "speedup");

    float *x = calloc(max_bytes / sizeof(float) + 1, sizeof(float));
    double *t_mpi = NULL, *t_shm = NULL;
    if (!x)
        numla_comm_abort(c, NUMLA_STATUS_NO_MEMORY, "bench allreduce: out of memory");
    for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
        size_t n = bytes / sizeof(float);
        /* Aim for ~20 ms of work per path per size on a quiet machine: small messages get
         * large batches so clock and barrier overheads vanish. */
        int batch = bytes <= (64 << 10) ? 50 : bytes <= (1 << 20) ? 10 : 3;
        int r = reps > 0 ? reps : bytes <= (64 << 10) ? 41 : 15;
        t_mpi = realloc(t_mpi, (size_t)r * sizeof *t_mpi);
        t_shm = realloc(t_shm, (size_t)r * sizeof *t_shm);
        for (size_t k = 0; k < n && k < 64; k++)
            x[k] = 1.0f;
        /* Warm-up: first touch of the shm buffers, MPI connection setup. */
        for (int w = 0; w < 3; w++) {
            if ((s = numla_comm_allreduce_sum_f32_path(c, x, n, NUMLA_COMM_ALLREDUCE_PATH_MPI)))
                numla_comm_abort(c, s, "bench allreduce: %s", numla_error_message());
            if (have_shm &&
                (s = numla_comm_allreduce_sum_f32_path(c, x, n, NUMLA_COMM_ALLREDUCE_PATH_SHM)))
                numla_comm_abort(c, s, "bench allreduce: %s", numla_error_message());
        }
        for (int k = 0; k < r; k++)
            for (int j = 0; j < 2; j++) {
                int shm = (j ^ k) & 1;
                if (shm && !have_shm)
                    continue;
                s = bench_rep_(c, shm ? NUMLA_COMM_ALLREDUCE_PATH_SHM : NUMLA_COMM_ALLREDUCE_PATH_MPI,
                               x, n, batch, shm ? &t_shm[k] : &t_mpi[k]);
                if (s)
                    numla_comm_abort(c, s, "bench allreduce: %s", numla_error_message());
            }
        if (rank != 0)
            continue;
        double mpi_best = 1e6 * bench_min_(t_mpi, r);
        double shm_best = have_shm ? 1e6 * bench_min_(t_shm, r) : 0.0;
        double mpi_us = 1e6 * numla_bench_median(t_mpi, r);
        double shm_us = have_shm ? 1e6 * numla_bench_median(t_shm, r) : 0.0;
        if (json) {
            printf("{\"path\": \"mpi\", \"bytes\": %zu, \"ranks\": %d, \"us\": %.3f, "
                   "\"us_best\": %.3f}\n", bytes, size, mpi_us, mpi_best);
            if (have_shm)
                printf("{\"path\": \"shm\", \"bytes\": %zu, \"ranks\": %d, \"us\": %.3f, "
                       "\"us_best\": %.3f, \"speedup_vs_mpi\": %.3f}\n",
                       bytes, size, shm_us, shm_best, shm_us > 0 ? mpi_us / shm_us : 0.0);
        } else if (have_shm) {
            printf("%10zu %10.2f (%7.2f) %10.2f (%7.2f) %8.2fx\n", bytes, mpi_us, mpi_best, shm_us,
                   shm_best, shm_us > 0 ? mpi_us / shm_us : 0.0);
        } else {
            printf("%10zu %10.2f (%7.2f) %20s %9s\n", bytes, mpi_us, mpi_best, "n/a", "n/a");
        }
        fflush(stdout);
    }
    free(x);
    free(t_mpi);
    free(t_shm);
    numla_comm_world_finalize(&mpi);
    return 0;
}

NUMLA_CLI_COMMAND("bench allreduce", bench_allreduce_main,
                  "allreduce latency per size, shm vs MPI paths (run under mpirun -n 2) [--json]")
