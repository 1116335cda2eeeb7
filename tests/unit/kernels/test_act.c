/* Tests for kernels/act (gated SiLU), every ISA the CPU supports, against silu(x)·u computed
 * in double here: values over the whole useful range (|x| up to 100, where σ saturates), every
 * tail length 0..16 of the vector loops (8 and 16 lanes), the vector levels' bits against
 * avx2's, and the argument checks. */
#include "test_util.h"

#include "kernels/act.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double silu_mul_ref(double x, double u) { return x / (1.0 + exp(-x)) * u; }

/* n values: a mix of small (|x| < 4), moderate and large magnitudes, and exact zeros. */
static void fill(numla_test_rng *r, int64_t n, float *x, float *u)
{
    for (int64_t i = 0; i < n; i++) {
        double s = (i % 5 == 0) ? 30.0 : (i % 3 == 0) ? 8.0 : 2.0;
        x[i] = (i % 17 == 0) ? 0.0f : (float)(s * numla_test_rng_normal(r));
        u[i] = (float)numla_test_rng_normal(r);
    }
}

static void test_against_double(void)
{
    numla_isa isas[NUMLA_ISA_COUNT];
    int ni = numla_test_isas(isas);
    numla_test_rng r = {42};
    for (int64_t n = 0; n <= 1000; n += (n < 40 ? 1 : 97)) {
        float *x = malloc((size_t)(n + 1) * sizeof *x), *u = malloc((size_t)(n + 1) * sizeof *u);
        float *g = malloc((size_t)(n + 1) * sizeof *g), *g2 = malloc((size_t)(n + 1) * sizeof *g2);
        fill(&r, n, x, u);
        for (int k = 0; k < ni; k++) {
            for (int64_t i = 0; i < n; i++)
                g[i] = x[i];
            g[n] = 12345.0f; /* past the end: must stay untouched */
            CU_ASSERT_EQUAL(numla_act_silu_mul(isas[k], n, g, u), NUMLA_STATUS_OK);
            int bad = 0;
            for (int64_t i = 0; i < n && bad < 3; i++) {
                double ref = silu_mul_ref(x[i], u[i]);
                double tol = 4e-7 * fabs(ref) + 1e-30;
                if (!(fabs(g[i] - ref) <= tol)) {
                    NUMLA_ASSERT_MSG(0, "%s n %lld i %lld: x %g u %g got %.9g want %.9g",
                                     numla_isa_name(isas[k]), (long long)n, (long long)i, x[i],
                                     u[i], g[i], ref);
                    bad++;
                }
            }
            NUMLA_ASSERT_MSG(g[n] == 12345.0f, "%s n %lld: wrote past the end",
                             numla_isa_name(isas[k]), (long long)n);
            /* every vector level shares avx2's e^x and formula: the same bits */
            if (isas[k] == NUMLA_ISA_AVX2)
                memcpy(g2, g, (size_t)n * sizeof *g);
            else if (isas[k] > NUMLA_ISA_AVX2)
                NUMLA_ASSERT_MSG(n == 0 || memcmp(g, g2, (size_t)n * sizeof *g) == 0,
                                 "%s n %lld: bits differ from avx2's", numla_isa_name(isas[k]),
                                 (long long)n);
        }
        free(x);
        free(u);
        free(g);
        free(g2);
    }
}

static void test_saturation(void)
{
    /* σ → 1 for large x (silu(x) = x), → 0 for very negative x (a tiny negative number or 0) */
    numla_isa isas[NUMLA_ISA_COUNT];
    int ni = numla_test_isas(isas);
    for (int k = 0; k < ni; k++) {
        float g[4] = {100.0f, 1e30f, -100.0f, -1e30f}, u[4] = {1, 2, 1, 1};
        CU_ASSERT_EQUAL(numla_act_silu_mul(isas[k], 4, g, u), NUMLA_STATUS_OK);
        NUMLA_ASSERT_MSG(g[0] == 100.0f && g[1] == 2e30f, "%s: %g %g", numla_isa_name(isas[k]),
                         g[0], g[1]);
        NUMLA_ASSERT_MSG(g[2] <= 0.0f && g[2] > -1e-40f && g[3] <= 0.0f && !isnan(g[3]),
                         "%s: %g %g", numla_isa_name(isas[k]), g[2], g[3]);
    }
}

static void test_bad_args(void)
{
    float g[1] = {0}, u[1] = {0};
    CU_ASSERT_EQUAL(numla_act_silu_mul(NUMLA_ISA_REF, -1, g, u), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_act_silu_mul(NUMLA_ISA_REF, 1, NULL, u), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_act_silu_mul((numla_isa)99, 1, g, u), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_act_silu_mul(NUMLA_ISA_REF, 0, NULL, NULL), NUMLA_STATUS_OK);
}

NUMLA_TEST_SUITE(act, NULL, NULL, NUMLA_TEST(test_against_double), NUMLA_TEST(test_saturation),
                 NUMLA_TEST(test_bad_args))
