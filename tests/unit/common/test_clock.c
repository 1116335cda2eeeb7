/* Tests for common/clock: both readings are the same monotonic clock (against a direct
 * clock_gettime), never go back, and a sleep of 20 ms reads as at least 20 ms. */
#include "test_util.h"

#include "common/clock.h"

#include <time.h>

static double direct_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* numla_now_s and numla_now_ns lie between two direct readings taken around them. */
static void test_same_clock_as_monotonic(void)
{
    double a = direct_s();
    double s = numla_now_s();
    double ns = 1e-9 * (double)numla_now_ns();
    double b = direct_s();
    NUMLA_ASSERT_MSG(a <= s && s <= b, "now_s %.9f outside [%.9f, %.9f]", s, a, b);
    NUMLA_ASSERT_MSG(a - 1e-6 <= ns && ns <= b + 1e-6, "now_ns %.9f outside [%.9f, %.9f]", ns, a,
                     b);
}

static void test_monotonic_and_sleep(void)
{
    int64_t prev = numla_now_ns();
    int back = 0;
    for (int i = 0; i < 100000; i++) {
        int64_t t = numla_now_ns();
        back += t < prev;
        prev = t;
    }
    CU_ASSERT_EQUAL(back, 0);
    double t0 = numla_now_s();
    int64_t n0 = numla_now_ns();
    struct timespec d = {0, 20 * 1000 * 1000};
    while (nanosleep(&d, &d) != 0) {
    }
    double dt = numla_now_s() - t0;
    int64_t dn = numla_now_ns() - n0;
    NUMLA_ASSERT_MSG(dt >= 0.020 && dt < 5.0, "a 20 ms sleep read %.6f s", dt);
    NUMLA_ASSERT_MSG(dn >= 20000000 && dn < 5000000000LL, "a 20 ms sleep read %lld ns",
                     (long long)dn);
}

NUMLA_TEST_SUITE(clock, NULL, NULL, NUMLA_TEST(test_same_clock_as_monotonic),
                 NUMLA_TEST(test_monotonic_and_sleep))
