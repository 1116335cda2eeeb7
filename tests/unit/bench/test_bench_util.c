/* Tests for bench/bench_util.c statistics: percentile interpolation and median, on unsorted
 * input that must be left untouched; the distinct ids of consecutive rows (expert unions). */
#include "test_util.h"

#include "bench/bench.h"

#include <math.h>
#include <string.h>

static void test_percentile(void)
{
    const double v[5] = {40, 10, 30, 50, 20}; /* sorted: 10 20 30 40 50 */
    double copy[5];
    memcpy(copy, v, sizeof v);
    CU_ASSERT_DOUBLE_EQUAL(numla_bench_percentile(v, 5, 0), 10, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(numla_bench_percentile(v, 5, 100), 50, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(numla_bench_percentile(v, 5, 50), 30, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(numla_bench_percentile(v, 5, 25), 20, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(numla_bench_percentile(v, 5, 90), 46, 1e-12); /* 40 + 0.6 * 10 */
    CU_ASSERT_DOUBLE_EQUAL(numla_bench_percentile(v, 5, 12.5), 15, 1e-12);
    CU_ASSERT_EQUAL(memcmp(v, copy, sizeof v), 0);
}

static void test_median(void)
{
    const double odd[3] = {3, 1, 2}, even[4] = {4, 1, 3, 2}, one[1] = {7};
    CU_ASSERT_DOUBLE_EQUAL(numla_bench_median(odd, 3), 2, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(numla_bench_median(even, 4), 2.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(numla_bench_median(one, 1), 7, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(numla_bench_percentile(one, 1, 99), 7, 1e-12);
}

/* The distinct routed experts of w consecutive rows: worked by hand on a small case, and on
 * independent uniform draws of k distinct experts of E per row against the expectation
 * E · (1 - (1 - k/E)^w) (each expert is in a row with probability k/E, independently). */
static void test_union_mean(void)
{
    const int32_t ids[4 * 2] = {0, 1, 1, 2, 3, 4, 4, 3}; /* rows {0,1} {1,2} {3,4} {3,4} */
    CU_ASSERT_DOUBLE_EQUAL(numla_bench_union_mean(ids, 4, 2, 8, 1), 2.0, 1e-12);
    /* {0,1,2} 3, {1,2,3,4} 4, {3,4} 2 */
    CU_ASSERT_DOUBLE_EQUAL(numla_bench_union_mean(ids, 4, 2, 8, 2), 3.0, 1e-12);
    /* {0..4} 5, {1..4} 4 */
    CU_ASSERT_DOUBLE_EQUAL(numla_bench_union_mean(ids, 4, 2, 8, 3), 4.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(numla_bench_union_mean(ids, 4, 2, 8, 4), 5.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(numla_bench_union_mean(ids, 4, 2, 8, 5), 0.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(numla_bench_union_mean(ids, 4, 2, 8, 0), 0.0, 1e-12);
    /* ids outside [0, range) (a row routed nowhere) and repeats within a row count nothing */
    const int32_t odd[3 * 2] = {-1, 5, 5, 5, 9, 2}; /* range 8: {5} {5} {2} */
    CU_ASSERT_DOUBLE_EQUAL(numla_bench_union_mean(odd, 3, 2, 8, 1), 1.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(numla_bench_union_mean(odd, 3, 2, 8, 2), 1.5, 1e-12);

    enum { N = 20000, K = 8, E = 256 };
    static int32_t r[N * K];
    uint32_t s = 12345;
    for (int t = 0; t < N; t++)
        for (int j = 0; j < K; j++) {
            int32_t e, dup;
            do {
                s = s * 1664525u + 1013904223u;
                e = (int32_t)(s >> 24); /* the LCG's top byte: E = 256 */
                dup = 0;
                for (int i = 0; i < j; i++)
                    dup |= r[t * K + i] == e;
            } while (dup);
            r[t * K + j] = e;
        }
    for (int w = 1; w <= 4; w++) {
        /* within 4 standard errors: E binomial indicators per window, ~N / w independent
         * windows */
        const double p = 1.0 - pow(1.0 - (double)K / E, w), want = E * p;
        const double tol = 4.0 * sqrt(E * p * (1.0 - p) * w / N) + 1e-9;
        const double got = numla_bench_union_mean(r, N, K, E, w);
        NUMLA_ASSERT_MSG(fabs(got - want) < tol, "w %d: %.4f, expected %.4f +- %.4f", w, got,
                         want, tol);
    }
}

NUMLA_TEST_SUITE(bench_util, NULL, NULL, NUMLA_TEST(test_percentile), NUMLA_TEST(test_median),
                 NUMLA_TEST(test_union_mean))
