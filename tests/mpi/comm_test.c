/* tests/mpi/comm_test.c — multi-rank tests of comm/ (run under mpiexec -n 1..4).
 *
 * Default mode checks allreduce on the shm and mpi paths against a reference every rank
 * computes locally (each rank can generate every peer's deterministic input), bitwise
 * identity across ranks, chunking and the reduce-scatter path, long back-to-back sequences,
 * bcast/gather/gatherv, and that MPI errors come back as statuses. Prints
 * "comm_test: N passed, M failed (R ranks)" and exits non-zero on any failure.
 *
 * Failure modes used by comm_kill.sh (the job must stop, never hang):
 *   --kill-shm / --kill-mpi  rank 1 raises SIGKILL inside an allreduce loop on that path
 *   --abort                  rank 1 calls numla_comm_abort mid-loop
 *   --stall                  rank 1 stops participating; the others hit the 3 s peer timeout
 */
#define _GNU_SOURCE
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "common/log.h"

static int g_rank, g_size, g_pass, g_fail;

#define CHECK(cond, ...)                                                                  \
    do {                                                                                  \
        if (cond) {                                                                       \
            g_pass++;                                                                     \
        } else {                                                                          \
            g_fail++;                                                                     \
            fprintf(stderr, "comm_test[rank %d] FAIL %s:%d: ", g_rank, __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fprintf(stderr, "\n");                                                        \
        }                                                                                 \
    } while (0)

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Rank q's input element i for test `seed`: mixed magnitudes, so a different summation order
 * gives a different float result and the bitwise checks have teeth. */
static float input(int q, size_t i, uint64_t seed)
{
    uint64_t h = mix(seed * 1000003ull + (uint64_t)q * 7919ull + mix(i));
    float mant = (float)(h & 0xffffff) / 16777216.0f - 0.5f;
    return ldexpf(mant, (int)((h >> 32) % 24) - 12);
}

static void fill(float *x, size_t n, int q, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        x[i] = input(q, i, seed);
}

/* The machines the communicator under test spans (test_fake_machines' contiguous groups:
 * rank q on machine q * g_machines / g_size); 1: one machine. */
static int g_machines = 1;

/* The float sum the shm path promises for element i: rank order inside each machine, then the
 * machines' sums in machine order (plain rank order on one machine); *mag = sum |x|. */
static float ordered_sum(size_t i, uint64_t seed, float *mag)
{
    float total = 0.0f, m = 0.0f;
    for (int h = 0; h < g_machines; h++) {
        float s = 0.0f;
        int first = 1;
        for (int q = 0; q < g_size; q++) {
            if ((int)((long)q * g_machines / g_size) != h)
                continue;
            float v = input(q, i, seed);
            s = first ? v : s + v;
            first = 0;
            m += fabsf(v);
        }
        total = h == 0 ? s : total + s;
    }
    *mag = m;
    return total;
}

/* The reference sums the shm path promises, and sum |x| for the MPI tolerance. */
static void reference(float *ref, float *mag, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        ref[i] = ordered_sum(i, seed, &mag[i]);
}

static uint64_t hash_bytes(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* 1 when every rank passed the same h. Collective over MPI_COMM_WORLD. */
static int same_on_all_ranks(uint64_t h)
{
    uint64_t *all = malloc((size_t)g_size * sizeof *all);
    MPI_Allgather(&h, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
    int ok = 1;
    for (int q = 0; q < g_size; q++)
        ok &= all[q] == h;
    free(all);
    return ok;
}

/* Allreduce n elements on `path`, compare with the reference; returns the result in out. */
static void check_allreduce(numla_comm *c, numla_comm_allreduce_path path, size_t n,
                            uint64_t seed, float *x, const float *ref, const float *mag)
{
    fill(x, n, g_rank, seed);
    numla_status s = numla_comm_allreduce_sum_f32_path(c, x, n, path);
    CHECK(s == NUMLA_STATUS_OK, "allreduce %s n=%zu: %s", numla_comm_allreduce_path_name(path),
          n, numla_error_message());
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        int ok;
        if (path == NUMLA_COMM_ALLREDUCE_PATH_SHM || g_size == 1)
            ok = !memcmp(&x[i], &ref[i], sizeof x[i]);
        else
            ok = fabsf(x[i] - ref[i]) <= 4e-7f * (float)g_size * mag[i];
        if (!ok && bad++ == 0)
            first = i;
    }
    CHECK(bad == 0, "allreduce %s n=%zu: %zu wrong elements, first [%zu] = %.9g, expected %.9g",
          numla_comm_allreduce_path_name(path), n, bad, first, bad ? x[first] : 0.0,
          bad ? ref[first] : 0.0);
    CHECK(same_on_all_ranks(hash_bytes(x, n * sizeof *x)),
          "allreduce %s n=%zu: results differ between ranks", numla_comm_allreduce_path_name(path),
          n);
}

static void test_allreduce_sizes(numla_comm *c, const size_t *sizes, int nsizes, uint64_t seed0)
{
    size_t maxn = 0;
    for (int k = 0; k < nsizes; k++)
        maxn = sizes[k] > maxn ? sizes[k] : maxn;
    float *x = malloc(maxn * sizeof *x), *y = malloc(maxn * sizeof *y);
    float *ref = malloc(maxn * sizeof *ref), *mag = malloc(maxn * sizeof *mag);
    for (int k = 0; k < nsizes; k++) {
        size_t n = sizes[k];
        uint64_t seed = seed0 + (uint64_t)k;
        reference(ref, mag, n, seed);
        check_allreduce(c, NUMLA_COMM_ALLREDUCE_PATH_MPI, n, seed, y, ref, mag);
        if (numla_comm_shm_available(c)) {
            check_allreduce(c, NUMLA_COMM_ALLREDUCE_PATH_SHM, n, seed, x, ref, mag);
            size_t bad = 0;
            for (size_t i = 0; i < n; i++)
                bad += !(fabsf(x[i] - y[i]) <= 4e-7f * (float)g_size * mag[i]);
            CHECK(bad == 0, "n=%zu: shm and mpi paths disagree in %zu elements", n, bad);
        }
        /* The default entry point agrees with the path it reports. */
        fill(x, n, g_rank, seed);
        CHECK(numla_comm_allreduce_sum_f32(c, x, n) == NUMLA_STATUS_OK, "default allreduce");
        if (numla_comm_allreduce_path_get(c) == NUMLA_COMM_ALLREDUCE_PATH_SHM || g_size == 1)
            CHECK(!memcmp(x, ref, n * sizeof *x), "default (shm) allreduce n=%zu differs", n);
    }
    free(x);
    free(y);
    free(ref);
    free(mag);
}

/* Many steps in a row with changing sizes: exercises the double-buffered flags (no barrier
 * between steps) and, on a small-buffer communicator, alternating small/reduce-scatter steps. */
static void test_back_to_back(numla_comm *c, numla_comm_allreduce_path path, int iters,
                              size_t maxn)
{
    float *x = malloc(maxn * sizeof *x), *ref = malloc(maxn * sizeof *ref);
    float *mag = malloc(maxn * sizeof *mag);
    int bad_iters = 0, first_bad = -1;
    uint64_t acc = 0;
    for (int it = 0; it < iters; it++) {
        size_t n = 1 + (size_t)mix((uint64_t)it) % maxn;
        uint64_t seed = 5000 + (uint64_t)it;
        fill(x, n, g_rank, seed);
        if (numla_comm_allreduce_sum_f32_path(c, x, n, path) != NUMLA_STATUS_OK) {
            CHECK(0, "back-to-back %s iteration %d: %s", numla_comm_allreduce_path_name(path), it,
                  numla_error_message());
            break;
        }
        reference(ref, mag, n, seed);
        int bad = 0;
        for (size_t i = 0; i < n; i++)
            bad |= path == NUMLA_COMM_ALLREDUCE_PATH_SHM
                       ? memcmp(&x[i], &ref[i], sizeof x[i]) != 0
                       : !(fabsf(x[i] - ref[i]) <= 4e-7f * (float)g_size * mag[i]);
        if (bad && bad_iters++ == 0)
            first_bad = it;
        acc = mix(acc ^ hash_bytes(x, n * sizeof *x));
    }
    CHECK(bad_iters == 0, "back-to-back %s: %d of %d iterations wrong, first %d",
          numla_comm_allreduce_path_name(path), bad_iters, iters, first_bad);
    CHECK(same_on_all_ranks(acc), "back-to-back %s: results differ between ranks",
          numla_comm_allreduce_path_name(path));
    free(x);
    free(ref);
    free(mag);
}

/* A fixed cycle of sizes, repeated: small and reduce-scatter steps, chunked messages (which
 * shift the step count by more than one) and sizes on the 16-float sum and slice edges, so
 * every combination of buffer set, slot rotation and algorithm meets every other. Bitwise
 * against the rank-order reference each time. */
static void test_alternating(numla_comm *c, const size_t *cycle, int ncycle, int rounds)
{
    size_t maxn = 0;
    for (int k = 0; k < ncycle; k++)
        maxn = cycle[k] > maxn ? cycle[k] : maxn;
    float *x = malloc(maxn * sizeof *x), *ref = malloc(maxn * sizeof *ref);
    float *mag = malloc(maxn * sizeof *mag);
    int bad_calls = 0, calls = 0;
    size_t first_bad = 0;
    uint64_t acc = 0;
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < ncycle; k++, calls++) {
            size_t n = cycle[k];
            uint64_t seed = 9000 + (uint64_t)calls;
            fill(x, n, g_rank, seed);
            if (numla_comm_allreduce_sum_f32_path(c, x, n, NUMLA_COMM_ALLREDUCE_PATH_SHM)) {
                CHECK(0, "alternating call %d (n=%zu): %s", calls, n, numla_error_message());
                goto out;
            }
            reference(ref, mag, n, seed);
            if (memcmp(x, ref, n * sizeof *x) && bad_calls++ == 0)
                first_bad = n;
            acc = mix(acc ^ hash_bytes(x, n * sizeof *x));
        }
    CHECK(bad_calls == 0, "alternating sizes: %d of %d calls wrong, first with n=%zu", bad_calls,
          calls, first_bad);
    CHECK(same_on_all_ranks(acc), "alternating sizes: results differ between ranks");
out:
    free(x);
    free(ref);
    free(mag);
}

/* The latency-critical size (one token's hidden state) many times in a row, no barrier: any
 * race in the flag/slot protocol shows up as a wrong element sooner or later. */
static void test_hammer(numla_comm *c, size_t n, int iters)
{
    float *x = malloc(n * sizeof *x), *ref = malloc(n * sizeof *ref);
    int bad_iters = 0, first_bad = -1;
    for (int it = 0; it < iters; it++) {
        /* Cheap inputs (the reference must not dominate): exact small integers per rank and
         * iteration, plus one mixed-magnitude element whose rank order matters. */
        for (size_t i = 0; i < n; i++)
            x[i] = (float)((int)((i * 31u + (size_t)it * 7u + (size_t)g_rank * 1000u) % 4093u));
        x[it % n] = input(g_rank, (size_t)it, 77);
        if (numla_comm_allreduce_sum_f32_path(c, x, n, NUMLA_COMM_ALLREDUCE_PATH_SHM)) {
            CHECK(0, "hammer iteration %d: %s", it, numla_error_message());
            break;
        }
        for (size_t i = 0; i < n; i++) {
            float s = 0.0f;
            for (int q = 0; q < g_size; q++)
                s += (float)((int)((i * 31u + (size_t)it * 7u + (size_t)q * 1000u) % 4093u));
            ref[i] = s;
        }
        float mag;
        ref[it % n] = ordered_sum((size_t)it, 77, &mag);
        if (memcmp(x, ref, n * sizeof *x) && bad_iters++ == 0)
            first_bad = it;
    }
    CHECK(bad_iters == 0, "hammer n=%zu: %d of %d iterations wrong, first %d", n, bad_iters, iters,
          first_bad);
    free(x);
    free(ref);
}

static void test_bcast(numla_comm *c)
{
    const size_t sizes[] = {1, 1000, (size_t)3 << 20};
    unsigned char *buf = malloc(sizes[2]);
    for (int root = 0; root < g_size; root++)
        for (int k = 0; k < 3; k++) {
            size_t n = sizes[k];
            for (size_t i = 0; i < n; i++)
                buf[i] = g_rank == root ? (unsigned char)mix(i + 31u * (unsigned)root) : 0xee;
            numla_status s = numla_comm_bcast(c, buf, n, root);
            CHECK(s == NUMLA_STATUS_OK, "bcast: %s", numla_error_message());
            size_t bad = 0;
            for (size_t i = 0; i < n; i++)
                bad += buf[i] != (unsigned char)mix(i + 31u * (unsigned)root);
            CHECK(bad == 0, "bcast root %d %zu bytes: %zu wrong", root, n, bad);
        }
    CHECK(numla_comm_bcast(c, NULL, 0, 0) == NUMLA_STATUS_OK, "bcast of 0 bytes");
    free(buf);
}

static void test_gather(numla_comm *c)
{
    int root = g_size - 1;
    enum { B = 100 };
    unsigned char send[B], *recv = malloc((size_t)g_size * B);
    for (int i = 0; i < B; i++)
        send[i] = (unsigned char)(g_rank * 7 + i);
    CHECK(numla_comm_gather(c, send, B, recv, root) == NUMLA_STATUS_OK, "gather: %s",
          numla_error_message());
    if (g_rank == root) {
        int bad = 0;
        for (int q = 0; q < g_size; q++)
            for (int i = 0; i < B; i++)
                bad += recv[q * B + i] != (unsigned char)(q * 7 + i);
        CHECK(bad == 0, "gather: %d wrong bytes", bad);
    }
    free(recv);

    /* gatherv: rank q sends 3q+1 floats; root stores them in reverse rank order. */
    size_t n = 3 * (size_t)g_rank + 1, total = 0;
    size_t *counts = malloc((size_t)g_size * sizeof *counts);
    size_t *displs = malloc((size_t)g_size * sizeof *displs);
    for (int q = g_size - 1; q >= 0; q--) {
        counts[q] = 3 * (size_t)q + 1;
        displs[q] = total;
        total += counts[q];
    }
    float *fs = malloc(n * sizeof *fs), *fr = malloc(total * sizeof *fr);
    for (size_t i = 0; i < n; i++)
        fs[i] = input(g_rank, i, 77);
    CHECK(numla_comm_gatherv_f32(c, fs, n, fr, counts, displs, 0) == NUMLA_STATUS_OK,
          "gatherv_f32: %s", numla_error_message());
    if (g_rank == 0) {
        int bad = 0;
        for (int q = 0; q < g_size; q++)
            for (size_t i = 0; i < counts[q]; i++)
                bad += fr[displs[q] + i] != input(q, i, 77);
        CHECK(bad == 0, "gatherv_f32: %d wrong values", bad);
    }
    /* Same layout in bytes. */
    for (int q = 0; q < g_size; q++) {
        counts[q] *= sizeof(float);
        displs[q] *= sizeof(float);
    }
    memset(fr, 0, total * sizeof *fr);
    CHECK(numla_comm_gatherv(c, fs, n * sizeof *fs, fr, counts, displs, 0) == NUMLA_STATUS_OK,
          "gatherv: %s", numla_error_message());
    if (g_rank == 0) {
        int bad = 0;
        for (int q = 0; q < g_size; q++)
            for (size_t i = 0; i < counts[q] / sizeof(float); i++)
                bad += fr[displs[q] / sizeof(float) + i] != input(q, i, 77);
        CHECK(bad == 0, "gatherv (bytes): %d wrong values", bad);
    }
    float one = (float)g_rank, *all = malloc((size_t)g_size * sizeof *all);
    CHECK(numla_comm_gather_f32(c, &one, 1, all, 0) == NUMLA_STATUS_OK, "gather_f32");
    if (g_rank == 0)
        for (int q = 0; q < g_size; q++)
            CHECK(all[q] == (float)q, "gather_f32: [%d] = %g", q, all[q]);
    free(all);
    free(fs);
    free(fr);
    free(counts);
    free(displs);
    CHECK(numla_comm_barrier(c) == NUMLA_STATUS_OK, "barrier");
}

static void test_errors(numla_comm *c)
{
    /* An invalid root is caught by MPI itself; with MPI_ERRORS_RETURN on our duplicate it
     * must come back as a status with MPI's message, on every rank, and the job goes on. */
    char b = 0;
    numla_error_clear();
    numla_status s = numla_comm_bcast(c, &b, 1, g_size + 3);
    CHECK(s == NUMLA_STATUS_MPI, "bcast to root %d returned '%s', expected MPI error",
          g_size + 3, numla_status_name(s));
    CHECK(strstr(numla_error_message(), "MPI_Bcast") != NULL,
          "MPI error message names the call: '%s'", numla_error_message());
    s = numla_comm_gatherv(c, NULL, 4, NULL, NULL, NULL, 0);
    CHECK(s == NUMLA_STATUS_INVALID_ARG, "gatherv with NULL send: %s", numla_status_name(s));
    CHECK(numla_comm_barrier(c) == NUMLA_STATUS_OK, "communicator still works after errors");

    /* Ranks passing different sizes to the shm allreduce get a clear error (on every rank),
     * also when one side takes the small path and the other reduce-scatter, and the
     * communicator stays usable. */
    if (g_size > 1 && numla_comm_shm_available(c)) {
        const size_t mine[2][2] = {{100, 101}, {10, 300000}};
        float *v = calloc(300000, sizeof *v);
        for (int k = 0; k < 2; k++) {
            size_t n = g_rank == 0 ? mine[k][0] : mine[k][1];
            s = numla_comm_allreduce_sum_f32_path(c, v, n, NUMLA_COMM_ALLREDUCE_PATH_SHM);
            CHECK(s == NUMLA_STATUS_INVALID_ARG && strstr(numla_error_message(), "mismatch"),
                  "size mismatch %zu: %s '%s'", n, numla_status_name(s), numla_error_message());
        }
        for (int i = 0; i < 3; i++)
            v[i] = 1.0f;
        s = numla_comm_allreduce_sum_f32_path(c, v, 3, NUMLA_COMM_ALLREDUCE_PATH_SHM);
        CHECK(s == NUMLA_STATUS_OK && v[2] == (float)g_size, "shm allreduce after a mismatch");
        free(v);
    }

    /* Path choices, decided collectively at create time. */
    numla_comm *d = NULL;
    numla_comm_options o = {.allreduce = (numla_comm_allreduce_path)7};
    s = numla_comm_create(MPI_COMM_WORLD, &o, &d);
    CHECK(s == NUMLA_STATUS_INVALID_ARG && !d, "allreduce path 7: %s", numla_status_name(s));
    o.allreduce = NUMLA_COMM_ALLREDUCE_PATH_MPI;
    s = numla_comm_create(MPI_COMM_WORLD, &o, &d);
    CHECK(s == NUMLA_STATUS_OK && numla_comm_allreduce_path_get(d) == NUMLA_COMM_ALLREDUCE_PATH_MPI,
          "allreduce mpi");
    numla_comm_destroy(&d);
    CHECK(d == NULL, "destroy nulls the handle");
    o.allreduce = NUMLA_COMM_ALLREDUCE_PATH_SHM;
    s = numla_comm_create(MPI_COMM_WORLD, &o, &d);
    CHECK(s == NUMLA_STATUS_OK && numla_comm_allreduce_path_get(d) == NUMLA_COMM_ALLREDUCE_PATH_SHM,
          "allreduce shm on one machine: %s", numla_error_message());
    numla_comm_destroy(&d);
    if (g_size > 1 && (g_size < 4 || g_size % 2)) {
        /* Pretend the ranks span two machines, one rank or unequal counts on each: shm must be
         * refused clearly, auto falls back. (Even counts from 4: test_machines.) */
        o.test_fake_machines = 2;
        s = numla_comm_create(MPI_COMM_WORLD, &o, &d);
        CHECK(s == NUMLA_STATUS_UNSUPPORTED && strstr(numla_error_message(), "not all on one"),
              "allreduce shm across machines: %s '%s'", numla_status_name(s),
              numla_error_message());
        o.allreduce = NUMLA_COMM_ALLREDUCE_PATH_AUTO;
        s = numla_comm_create(MPI_COMM_WORLD, &o, &d);
        CHECK(s == NUMLA_STATUS_OK && !numla_comm_shm_available(d) &&
                  numla_comm_allreduce_path_get(d) == NUMLA_COMM_ALLREDUCE_PATH_MPI,
              "auto across machines picks mpi");
        float v[3] = {1, 2, 3};
        if (d) {
            s = numla_comm_allreduce_sum_f32_path(d, v, 3, NUMLA_COMM_ALLREDUCE_PATH_SHM);
            CHECK(s == NUMLA_STATUS_UNSUPPORTED, "forced shm call across machines: %s",
                  numla_status_name(s));
            CHECK(numla_comm_allreduce_sum_f32(d, v, 3) == NUMLA_STATUS_OK &&
                      v[2] == 3.0f * (float)g_size,
                  "mpi fallback sums");
        }
        numla_comm_destroy(&d);
    }
}

/* The ranks split into two machines of g_size / 2 (test_fake_machines): the hierarchical
 * path (shm inside each machine, MPI between them) is chosen, says so, and sums bitwise in
 * its promised order (ordered_sum) at every size, chunked, reduce-scatter or not, back to back;
 * forcing shm works; three machines of unequal size fall back to MPI. */
static void test_machines(void)
{
    if (g_size < 4 || g_size % 2)
        return;
    const numla_comm_options opts[2] = {
        {.timeout_s = 3, .test_fake_machines = 2, .allreduce = NUMLA_COMM_ALLREDUCE_PATH_SHM},
        {.timeout_s = 3, .test_fake_machines = 2, .shm_bytes = 4096, .shm_rs_bytes = 1024},
    };
    for (int k = 0; k < 2; k++) {
        numla_comm *c = NULL;
        numla_status s = numla_comm_create(MPI_COMM_WORLD, &opts[k], &c);
        CHECK(s == NUMLA_STATUS_OK, "two fake machines (%d): %s", k, numla_error_message());
        if (!c)
            return;
        CHECK(numla_comm_machines(c) == 2, "machines: %d", numla_comm_machines(c));
        CHECK(numla_comm_shm_available(c) &&
                  numla_comm_allreduce_path_get(c) == NUMLA_COMM_ALLREDUCE_PATH_SHM &&
                  !strncmp(numla_comm_allreduce_route(c), "shm+mpi", 7),
              "two machines of %d ranks: hierarchical path, got %s", g_size / 2,
              numla_comm_allreduce_route(c));
        g_machines = 2;
        if (k == 0) {
            const size_t sizes[] = {1, 3, 16, 17, 1000, 2048, 65535, 262144, 262145, 300007,
                                    1048583};
            test_allreduce_sizes(c, sizes, (int)(sizeof sizes / sizeof sizes[0]), 700);
            test_back_to_back(c, NUMLA_COMM_ALLREDUCE_PATH_SHM, 300, 600);
            test_hammer(c, 2048, 500);
        } else {
            const size_t cycle[] = {15, 16, 17, 256, 257, 1023, 1024, 1025, 2049, 47, 3073};
            test_alternating(c, cycle, (int)(sizeof cycle / sizeof cycle[0]), 5);
            test_back_to_back(c, NUMLA_COMM_ALLREDUCE_PATH_SHM, 200, 3000);
        }
        g_machines = 1;
        numla_comm_destroy(&c);
    }
    /* Three machines of 2, 1 and 1 ranks (4 ranks; 6: 2, 2, 2 is even): unequal -> MPI. */
    if (g_size == 4) {
        numla_comm_options o = {.timeout_s = 3, .test_fake_machines = 3};
        numla_comm *c = NULL;
        CHECK(numla_comm_create(MPI_COMM_WORLD, &o, &c) == NUMLA_STATUS_OK && c &&
                  numla_comm_machines(c) == 3 && !numla_comm_shm_available(c) &&
                  numla_comm_allreduce_path_get(c) == NUMLA_COMM_ALLREDUCE_PATH_MPI,
              "three unequal machines: mpi");
        numla_comm_destroy(&c);
    }
}

/* Failure modes for comm_kill.sh: never returns normally on the victim's peers. */
static int run_failure_mode(numla_comm *c, const char *mode)
{
    numla_comm_allreduce_path path = strcmp(mode, "--kill-mpi") ? NUMLA_COMM_ALLREDUCE_PATH_SHM
                                                                : NUMLA_COMM_ALLREDUCE_PATH_MPI;
    if (!numla_comm_shm_available(c))
        path = NUMLA_COMM_ALLREDUCE_PATH_MPI;
    float x[2048];
    for (long it = 0;; it++) {
        if (g_rank == 1 && it == 300) {
            fprintf(stderr, "comm_test[rank 1]: %s now (iteration %ld)\n", mode + 2, it);
            if (!strcmp(mode, "--abort"))
                numla_comm_abort(c, NUMLA_STATUS_INTERNAL, "test-requested abort at iteration %ld",
                                 it);
            if (!strcmp(mode, "--stall")) {
                sleep(300);
                return 1;
            }
            raise(SIGKILL);
        }
        fill(x, 2048, g_rank, (uint64_t)it);
        numla_status s = numla_comm_allreduce_sum_f32_path(c, x, 2048, path);
        if (s != NUMLA_STATUS_OK)
            numla_comm_abort(c, s, "allreduce failed: %s", numla_error_message());
    }
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);

    numla_comm *c = NULL;
    /* a short peer timeout, so the stall mode (comm_kill.sh) ends within seconds */
    const numla_comm_options opts = {.timeout_s = 3};
    numla_status s = numla_comm_create(MPI_COMM_WORLD, &opts, &c);
    if (s != NUMLA_STATUS_OK)
        numla_comm_abort(NULL, s, "numla_comm_create: %s", numla_error_message());
    if (argc > 1)
        return run_failure_mode(c, argv[1]);

    CHECK(numla_comm_rank(c) == g_rank && numla_comm_size(c) == g_size, "rank/size");
    CHECK(numla_comm_shm_available(c), "one machine: shm path available");
    if (g_rank == 0)
        printf("comm_test: %d ranks, default allreduce path %s\n", g_size,
               numla_comm_allreduce_path_name(numla_comm_allreduce_path_get(c)));

    /* Sizes in floats: 1 element to 8 MiB, odd sizes, around the 1 MiB reduce-scatter
     * threshold (262144 floats) and the 4 MiB buffer (1048576 floats, chunked above). */
    const size_t sizes[] = {1, 2, 3, 7, 15, 16, 17, 255, 1000, 2048, 4097, 16384, 65535,
                            262143, 262144, 262145, 300007, 1048576, 1048583, 2097152};
    test_allreduce_sizes(c, sizes, (int)(sizeof sizes / sizeof sizes[0]), 100);
    test_back_to_back(c, NUMLA_COMM_ALLREDUCE_PATH_SHM, 1000, 600);
    test_back_to_back(c, NUMLA_COMM_ALLREDUCE_PATH_MPI, 300, 600);
    if (numla_comm_shm_available(c)) {
        /* 5 entries plus a 2-chunk message: 7 steps per round, odd, so rounds shift parity. */
        const size_t cycle[] = {2048, 262145, 31, 1048583, 33};
        test_alternating(c, cycle, (int)(sizeof cycle / sizeof cycle[0]), 4);
        test_hammer(c, 2048, 3000);
    }
    test_bcast(c);
    test_gather(c);
    test_errors(c);

    /* A communicator with tiny buffers: every size is chunked, reduce-scatter starts at 1 KiB,
     * threads join at 2 KiB, so chunk boundaries, slice edges, thread splits and alternating
     * algorithms are all exercised quickly. */
    const numla_comm_options small_opts = {
        .timeout_s = 3, .shm_bytes = 4096, .shm_rs_bytes = 1024,
        .shm_par_bytes = 2048, /* threads (when OMP_NUM_THREADS > 1) */
    };
    numla_comm *small = NULL;
    s = numla_comm_create(MPI_COMM_WORLD, &small_opts, &small);
    CHECK(s == NUMLA_STATUS_OK, "small-buffer communicator: %s", numla_error_message());
    if (small) {
        const size_t small_sizes[] = {1, 255, 256, 257, 1023, 1024, 1025, 3001, 10000};
        test_allreduce_sizes(small, small_sizes, (int)(sizeof small_sizes / sizeof small_sizes[0]),
                             300);
        test_back_to_back(small, NUMLA_COMM_ALLREDUCE_PATH_SHM, 400, 3000);
        /* Around the 16-float sum vectors and the 256-float reduce-scatter switch, and 1024
         * floats (one chunk) +- 1: chunk counts of 1, 2 and 3 steps. */
        const size_t cycle[] = {15, 16, 17, 256, 257, 1023, 1024, 1025, 2049, 47, 3073};
        test_alternating(small, cycle, (int)(sizeof cycle / sizeof cycle[0]), 13);
        test_hammer(small, 1000, 2000);
    }
    numla_comm_destroy(&small);
    test_machines();

    int local[2] = {g_pass, g_fail}, total[2];
    MPI_Allreduce(local, total, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (g_rank == 0)
        printf("comm_test: %d passed, %d failed (%d ranks)\n", total[0], total[1], g_size);
    numla_comm_destroy(&c);
    MPI_Finalize();
    return total[1] ? 1 : 0;
}
