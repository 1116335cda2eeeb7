/* Tests for bench/bench_util.c statistics: percentile interpolation and median, on unsorted
 * input that must be left untouched. */
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

NUMLA_TEST_SUITE(bench_util, NULL, NULL, NUMLA_TEST(test_percentile), NUMLA_TEST(test_median))
