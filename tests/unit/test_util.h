/* tests/unit/test_util.h — the shared CUnit runner's registry and helpers.
 *
 * A test file registers exactly one suite, named after the file (test_<suite>.c):
 *
 *   static void test_roundtrip(void) { CU_ASSERT_EQUAL(...); }
 *   NUMLA_TEST_SUITE(kv_write, NULL, NULL,
 *                    NUMLA_TEST(test_roundtrip), NUMLA_TEST(test_bad_slot))
 *
 * build/numla_unit [--suite NAME] [--list] runs all suites or one; the exit status is the
 * number of failures (a missing suite is a failure).
 */
#ifndef NUMLA_TESTS_TEST_UTIL_H
#define NUMLA_TESTS_TEST_UTIL_H

#include <CUnit/CUnit.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/isa.h"

typedef struct numla_test_case {
    const char *name;
    void (*fn)(void);
} numla_test_case;

void numla_test_register(const char *suite, int (*init)(void), int (*cleanup)(void),
                         const numla_test_case *cases, int num_cases);

#define NUMLA_TEST(fn) {#fn, fn}
#define NUMLA_TEST_SUITE(suite, init, cleanup, ...)                                      \
    static const numla_test_case numla_test_cases_##suite[] = {__VA_ARGS__};              \
    __attribute__((constructor)) static void numla_test_register_##suite(void)          \
    {                                                                                     \
        numla_test_register(#suite, init, cleanup, numla_test_cases_##suite,              \
                            (int)(sizeof numla_test_cases_##suite /                       \
                                  sizeof numla_test_cases_##suite[0]));                  \
    }

/* Deterministic PRNG (splitmix64) for test data. */
typedef struct numla_test_rng {
    uint64_t s;
} numla_test_rng;
uint64_t numla_test_rng_u64(numla_test_rng *r);
/* Uniform in [lo, hi). */
double numla_test_rng_uniform(numla_test_rng *r, double lo, double hi);
/* Standard normal. */
double numla_test_rng_normal(numla_test_rng *r);
/* One seeded mutation of a JSON text in buf (len bytes, room for len): 1-4 edits among byte
 * flips, digit and bracket overwrites, deletions and truncations, never touching the first
 * `keep` bytes. Returns the new length. */
size_t numla_test_mutate_json(uint8_t *buf, size_t len, size_t keep, numla_test_rng *rng);

/* The ISA levels this CPU supports, ascending from ref; returns the count. */
int numla_test_isas(numla_isa out[NUMLA_ISA_COUNT]);

/* The exhaustive kernel sweeps. With NUMLA_TEST_SWEEP=full in the environment (the `slow`
 * label's slow.<suite>_full tests, tests/CMakeLists.txt) every case of a sweep runs; otherwise
 * (the default `unit` run) a sweep runs a representative subset, and with NUMLA_TEST_SWEEP=lean
 * (scripts/test's sanitizer and clang passes, which look for memory errors, undefined
 * behaviour and a second compiler's and OpenMP runtime's differences, not for rounding) a
 * sparser one. numla_test_sweep_full() and numla_test_sweep_lean() say which.
 * numla_test_sweep_keep(&counter, stride) is the subset of a nested loop: 1 for every case when
 * full, else for one case in `stride` (lean: in 2 * stride + 1) in loop order (*counter counts
 * the cases seen). A stride coprime with the number of cases inside each loop keeps every value
 * of every loop in the subset. */
int numla_test_sweep_full(void);
int numla_test_sweep_lean(void);
int numla_test_sweep_keep(unsigned *counter, unsigned stride);

/* Path under the source tree (NUMLA_SOURCE_DIR), in a static buffer. */
const char *numla_test_source_path(const char *rel);

/* MPI started for a suite that runs numla's commands in this process (numla_run_main and the
 * like, which start and finish MPI themselves only when nobody else did: several calls in one
 * process need the suite to own it), unless something started it already; 0 when it runs. */
int numla_test_mpi_init(void);
/* The pair of numla_test_mpi_init: MPI finalized unless it is already; 0 when all is well. */
int numla_test_mpi_finalize(void);

/* The whole file at path, malloc'd with a NUL after its bytes (the caller frees); *len (when
 * len is not NULL) its size. NULL when it cannot be read. */
char *numla_test_read_file(const char *path, size_t *len);
/* A fresh temporary directory for this process (created once, removed at exit unless
 * NUMLA_TEST_KEEP is set). */
const char *numla_test_tmpdir(void);

/* Assert with a message: CU_ASSERT_FATAL-free so one failing case reports and the suite goes on. */
#define NUMLA_ASSERT_MSG(cond, ...)                                                       \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "\n    %s:%d: ", __FILE__, __LINE__);                        \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fprintf(stderr, "\n");                                                        \
        }                                                                                 \
        CU_ASSERT(cond);                                                                  \
    } while (0)

#endif
