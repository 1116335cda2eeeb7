/* Tests for the vector e^x headers (kernels/x86/exp_avx2.h, exp_avx512.h, through exp_probe.h)
 * on the CPU's levels: against double exp over x in [-130, 0], the softmax and activation
 * range (within 2.5e-7 relative, plus one subnormal step near and below FLT_MIN); -inf, NaN
 * and x <= -127 giving exactly 0; and, where the CPU has AVX-512, the 8-lane e^x giving the
 * 16-lane one's bits. */
#include "test_util.h"

#include "exp_probe.h"
#include "kernels/isa.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { N = 1 << 16 }; /* a multiple of 16 */

/* x[0..N): specials first, then a uniform sweep of [-130, 0] and random points of [-1, 0]. */
static void fill(float *x)
{
    const float special[] = {-INFINITY, NAN, 0.0f, -0.0f, -1e-30f, -FLT_MIN, -0.3465736f,
                             -0.3465737f, -87.33654f, -87.3366f, -100.0f, -103.2789f, -103.9721f,
                             -104.0f, -127.0f, -127.5f, -1e30f, -FLT_MAX};
    const int ns = (int)(sizeof special / sizeof special[0]);
    numla_test_rng r = {7};
    for (int i = 0; i < N; i++)
        x[i] = i < ns ? special[i]
               : i < N / 2 ? (float)(-130.0 * (i - ns) / (N / 2 - ns))
                           : (float)numla_test_rng_uniform(&r, -1.0, 0.0);
}

static void check(const char *name, const float *x, const float *y)
{
    int bad = 0;
    double worst = 0;
    for (int i = 0; i < N && bad < 5; i++) {
        if (isnan(x[i]) || x[i] == -INFINITY || x[i] <= -127.0f) {
            if (y[i] != 0.0f) {
                NUMLA_ASSERT_MSG(0, "%s: e^%g = %g, want 0", name, x[i], y[i]);
                bad++;
            }
            continue;
        }
        const double ref = exp((double)x[i]), err = fabs(y[i] - ref);
        /* relative, plus one subnormal step where e^x is near or below FLT_MIN */
        const double tol = 2.5e-7 * ref + 0x1p-149;
        if (ref >= FLT_MIN && err / ref > worst)
            worst = err / ref;
        if (!(err <= tol)) {
            NUMLA_ASSERT_MSG(0, "%s: e^%.9g = %.9g, want %.9g", name, x[i], y[i], ref);
            bad++;
        }
    }
    NUMLA_ASSERT_MSG(worst < 2.5e-7, "%s: worst relative error %g", name, worst);
}

static void test_against_double(void)
{
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    fill(x);
    if (numla_isa_supported(NUMLA_ISA_AVX2)) {
        exp_probe_avx2(N, x, y);
        check("avx2", x, y);
    }
    if (numla_isa_supported(NUMLA_ISA_AVX512)) {
        exp_probe_avx512(N, x, y);
        check("avx512", x, y);
    }
    free(x);
    free(y);
}

static void test_avx2_matches_avx512(void)
{
    if (!numla_isa_supported(NUMLA_ISA_AVX512))
        return; /* needs both levels */
    float *x = malloc(N * sizeof *x), *y2 = malloc(N * sizeof *y2), *y5 = malloc(N * sizeof *y5);
    fill(x);
    exp_probe_avx2(N, x, y2);
    exp_probe_avx512(N, x, y5);
    int bad = 0;
    for (int i = 0; i < N && bad < 5; i++)
        if (memcmp(&y2[i], &y5[i], sizeof(float)) != 0) {
            NUMLA_ASSERT_MSG(0, "e^%.9g: avx2 %.9g, avx512 %.9g", x[i], y2[i], y5[i]);
            bad++;
        }
    free(x);
    free(y2);
    free(y5);
}

NUMLA_TEST_SUITE(exp, NULL, NULL, NUMLA_TEST(test_against_double),
                 NUMLA_TEST(test_avx2_matches_avx512))
