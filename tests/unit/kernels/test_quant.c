/* Tests for kernels/quant: FP8 128x128 block and INT8 per-row quantization against an
 * independent double-precision reference (block amax, the fp32 scale and quotient rounded
 * once from double, the e4m3 code as the nearest of all codes by search), on shapes that are
 * not multiples of 128, with outliers at block edges, an all-zero block and row, and ties. */
#include "test_util.h"

#include "kernels/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* e4m3fn value of a code from the format's definition (bias 7, 3 mantissa bits). */
static double q_e4m3_value(unsigned c)
{
    unsigned e = (c >> 3) & 15, m = c & 7;
    double v = (c & 0x7f) == 0x7f ? NAN : e == 0 ? ldexp((double)m, -9) : ldexp(8.0 + m, (int)e - 10);
    return (c & 0x80) ? -v : v;
}

/* Nearest code by search, ties to the even code; past 464 the NaN code (torch's rule). */
static unsigned q_e4m3_nearest(double x)
{
    double a = fabs(x);
    if (a > 464.0)
        return x < 0 ? 0xff : 0x7f;
    unsigned best = 0;
    double bd = INFINITY;
    for (unsigned c = 0; c < 0x7f; c++) {
        double d = fabs(a - q_e4m3_value(c));
        if (d < bd || (d == bd && !(c & 1))) {
            bd = d;
            best = c;
        }
    }
    return best | (signbit(x) ? 0x80u : 0u);
}

static float *q_matrix(int64_t n, int64_t k, uint64_t seed)
{
    numla_test_rng rng = {seed};
    float *w = malloc((size_t)(n * k) * sizeof *w);
    for (int64_t i = 0; i < n * k; i++)
        w[i] = (float)(0.02 * numla_test_rng_normal(&rng));
    return w;
}

/* FP8: codes and scales bit-exact against the reference, dequantized error within half an
 * e4m3 step of each value. */
static int q_check_fp8(int64_t n, int64_t k, const float *w, const char *what)
{
    const int64_t nbr = numla_quant_blocks(n), nbc = numla_quant_blocks(k);
    CU_ASSERT_EQUAL(nbr, (n + 127) / 128);
    uint8_t *q = malloc((size_t)(n * k));
    float *s = malloc((size_t)(nbr * nbc) * sizeof *s), *d = malloc((size_t)(n * k) * sizeof *d);
    numla_status st = numla_quant_fp8_block(n, k, w, k, q, s);
    NUMLA_ASSERT_MSG(st == NUMLA_STATUS_OK, "%s: %s", what, numla_error_message());
    numla_dequant_fp8_block(n, k, q, s, d);
    int bad = 0;
    for (int64_t bi = 0; bi < nbr; bi++)
        for (int64_t bj = 0; bj < nbc; bj++) {
            double amax = 0;
            for (int64_t r = bi * 128; r < n && r < bi * 128 + 128; r++)
                for (int64_t c = bj * 128; c < k && c < bj * 128 + 128; c++)
                    amax = fmax(amax, fabs((double)w[r * k + c]));
            float sref = amax > 0 ? (float)(amax / 448.0) : 1.0f;
            if (s[bi * nbc + bj] != sref && bad++ < 5)
                fprintf(stderr, "\n    %s: block (%lld,%lld) scale %a, want %a\n", what,
                        (long long)bi, (long long)bj, (double)s[bi * nbc + bj], (double)sref);
            for (int64_t r = bi * 128; r < n && r < bi * 128 + 128; r++)
                for (int64_t c = bj * 128; c < k && c < bj * 128 + 128; c++) {
                    double x = w[r * k + c];
                    unsigned want = q_e4m3_nearest((double)(float)(x / (double)sref));
                    double deq = q_e4m3_value(want) * sref;
                    double tol = fmax(fabs(x) * 0x1p-4, 0x1p-10 * sref) * (1 + 1e-6);
                    if ((q[r * k + c] != want || d[r * k + c] != (float)deq ||
                         fabs(deq - x) > tol) && bad++ < 5)
                        fprintf(stderr, "\n    %s: (%lld,%lld) %g -> 0x%02x (%g), want 0x%02x\n",
                                what, (long long)r, (long long)c, x, q[r * k + c],
                                (double)d[r * k + c], want);
                }
        }
    NUMLA_ASSERT_MSG(bad == 0, "%s: %d fp8 mismatches", what, bad);
    free(q);
    free(s);
    free(d);
    return bad;
}

static int q_check_int8(int64_t n, int64_t k, const float *w, const char *what)
{
    int8_t *q = malloc((size_t)(n * k));
    float *s = malloc((size_t)n * sizeof *s), *d = malloc((size_t)(n * k) * sizeof *d);
    numla_status st = numla_quant_int8_rows(n, k, w, k, q, s);
    NUMLA_ASSERT_MSG(st == NUMLA_STATUS_OK, "%s: %s", what, numla_error_message());
    numla_dequant_int8_rows(n, k, q, s, d);
    int bad = 0;
    for (int64_t r = 0; r < n; r++) {
        double amax = 0;
        for (int64_t c = 0; c < k; c++)
            amax = fmax(amax, fabs((double)w[r * k + c]));
        float sref = amax > 0 ? (float)(amax / 127.0) : 1.0f;
        if (s[r] != sref && bad++ < 5)
            fprintf(stderr, "\n    %s: row %lld scale %a, want %a\n", what, (long long)r,
                    (double)s[r], (double)sref);
        for (int64_t c = 0; c < k; c++) {
            double x = w[r * k + c];
            double qq = nearbyint((double)(float)(x / (double)sref)); /* ties to even */
            qq = fmin(127.0, fmax(-127.0, qq));
            if ((q[r * k + c] != (int8_t)qq || d[r * k + c] != (float)(qq * sref) ||
                 fabs(qq * sref - x) > 0.5 * sref * (1 + 1e-6)) && bad++ < 5)
                fprintf(stderr, "\n    %s: (%lld,%lld) %g -> %d, want %g\n", what, (long long)r,
                        (long long)c, x, q[r * k + c], qq);
        }
    }
    NUMLA_ASSERT_MSG(bad == 0, "%s: %d int8 mismatches", what, bad);
    free(q);
    free(s);
    free(d);
    return bad;
}

static void test_fp8_blocks(void)
{
    const int64_t shapes[][2] = {{1, 1}, {128, 128}, {300, 200}, {129, 257}, {64, 1000}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int64_t n = shapes[i][0], k = shapes[i][1];
        float *w = q_matrix(n, k, 11 + i);
        char what[64];
        snprintf(what, sizeof what, "fp8 %lldx%lld", (long long)n, (long long)k);
        q_check_fp8(n, k, w, what);
        free(w);
    }
    /* Outliers on both sides of the row-128 and column-128 edges: each goes to its own block's
     * scale only; block (1, 0) all zeros; a subnormal-range value; values in every binade. */
    int64_t n = 300, k = 200;
    float *w = q_matrix(n, k, 99);
    w[127 * k + 127] = 5.0f;
    w[128 * k + 128] = -3.0f;
    w[127 * k + 128] = 0.75f;
    w[128 * k + 127] = 1e-3f;
    for (int64_t r = 128; r < 256; r++)
        for (int64_t c = 0; c < 128; c++)
            w[r * k + c] = 0.0f;
    for (int64_t c = 0; c < 60; c++)
        w[5 * k + c] = ldexpf(1.3f, (int)c / 3 - 18) * (c & 1 ? -1.0f : 1.0f);
    CU_ASSERT_EQUAL(q_check_fp8(n, k, w, "fp8 edges"), 0);
    uint8_t *q = malloc((size_t)(n * k));
    float s[3 * 2];
    CU_ASSERT_EQUAL(numla_quant_fp8_block(n, k, w, k, q, s), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(s[0 * 2 + 0], 5.0f / 448.0f);
    CU_ASSERT_EQUAL(s[1 * 2 + 1], 3.0f / 448.0f);
    CU_ASSERT_EQUAL(s[1 * 2 + 0], 1.0f);           /* all-zero block */
    CU_ASSERT_EQUAL(q[127 * k + 127], 0x7e);       /* the block's amax is 448 */
    CU_ASSERT_EQUAL(q[128 * k + 128], 0xfe);
    CU_ASSERT_EQUAL(q[200 * k + 5], 0x00);
    /* A non-finite weight is refused, naming where it is. */
    w[130 * k + 150] = INFINITY;
    numla_error_clear();
    CU_ASSERT_EQUAL(numla_quant_fp8_block(n, k, w, k, q, s), NUMLA_STATUS_INVALID_ARG);
    NUMLA_ASSERT_MSG(strstr(numla_error_message(), "column 150") != NULL, "%s", numla_error_message());
    w[130 * k + 150] = NAN;
    CU_ASSERT_EQUAL(numla_quant_fp8_block(n, k, w, k, q, s), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_quant_fp8_block(0, k, w, k, q, s), NUMLA_STATUS_INVALID_ARG);
    free(q);
    free(w);
}

static void test_int8_rows(void)
{
    const int64_t shapes[][2] = {{1, 1}, {7, 128}, {130, 300}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int64_t n = shapes[i][0], k = shapes[i][1];
        float *w = q_matrix(n, k, 21 + i);
        char what[64];
        snprintf(what, sizeof what, "int8 %lldx%lld", (long long)n, (long long)k);
        q_check_int8(n, k, w, what);
        free(w);
    }
    /* Ties to even, the amax at ±127, an all-zero row. */
    float w[3 * 6] = {127.0f, 2.5f, 3.5f, -2.5f, -0.5f, 1.5f,
                      0, 0, 0, 0, 0, 0,
                      -254.0f, 5.0f, 7.0f, 1.0f, 3.0f, -1.0f};
    int8_t q[18];
    float s[3];
    CU_ASSERT_EQUAL_FATAL(numla_quant_int8_rows(3, 6, w, 6, q, s), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(s[0], 1.0f);
    CU_ASSERT(q[0] == 127 && q[1] == 2 && q[2] == 4 && q[3] == -2 && q[4] == 0 && q[5] == 2);
    CU_ASSERT_EQUAL(s[1], 1.0f);
    for (int c = 0; c < 6; c++)
        CU_ASSERT_EQUAL(q[6 + c], 0);
    CU_ASSERT_EQUAL(s[2], 2.0f);
    CU_ASSERT(q[12] == -127 && q[13] == 2 && q[14] == 4 && q[15] == 0 && q[16] == 2 && q[17] == 0);
    CU_ASSERT_EQUAL(q_check_int8(3, 6, w, "int8 ties"), 0);
    w[8] = NAN;
    CU_ASSERT_EQUAL(numla_quant_int8_rows(3, 6, w, 6, q, s), NUMLA_STATUS_INVALID_ARG);
    NUMLA_ASSERT_MSG(strstr(numla_error_message(), "row 1") != NULL, "%s", numla_error_message());
}

NUMLA_TEST_SUITE(quant, NULL, NULL, NUMLA_TEST(test_fp8_blocks), NUMLA_TEST(test_int8_rows))
