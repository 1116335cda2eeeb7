/* Tests for common/dtype: conversions against exhaustive and hand-picked references. */
#include "test_util.h"

#include "common/dtype.h"

#include <math.h>
#include <stdio.h>

/* bf16 -> f32 -> bf16 is the identity on every non-NaN pattern. */
static void test_bf16_roundtrip_exhaustive(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = numla_bf16_to_f32((uint16_t)h);
        if (isnan(f))
            continue;
        if (numla_f32_to_bf16(f) != h)
            bad++;
    }
    NUMLA_ASSERT_MSG(bad == 0, "%d bf16 patterns did not round-trip", bad);
}

/* f16 -> f32 -> f16 is the identity on every non-NaN pattern, and values match ldexp. */
static void test_f16_roundtrip_exhaustive(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = numla_f16_to_f32((uint16_t)h);
        uint32_t e = (h >> 10) & 31, m = h & 1023;
        double ref = e == 0 ? ldexp((double)m, -24) : e == 31 ? (m ? NAN : INFINITY)
                                                              : ldexp(1024.0 + m, (int)e - 25);
        if (h & 0x8000)
            ref = -ref;
        if (isnan(ref)) {
            bad += !isnan(f);
            continue;
        }
        if ((double)f != ref || numla_f32_to_f16(f) != h)
            bad++;
    }
    NUMLA_ASSERT_MSG(bad == 0, "%d f16 patterns wrong", bad);
}

/* Rounding is to nearest, ties to even, for both narrow types. */
static void test_round_nearest_even(void)
{
    /* 1 + 2^-8 is halfway between bf16 1.0 and 1 + 2^-7: ties to even -> 1.0 */
    CU_ASSERT_EQUAL(numla_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
    /* 1 + 3·2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6: -> 1 + 2^-6 */
    CU_ASSERT_EQUAL(numla_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
    CU_ASSERT_EQUAL(numla_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
    CU_ASSERT_EQUAL(numla_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
    CU_ASSERT_EQUAL(numla_f32_to_f16(65520.0f), 0x7c00); /* overflows to inf */
    CU_ASSERT_EQUAL(numla_f32_to_f16(65504.0f), 0x7bff);
    CU_ASSERT_EQUAL(numla_f32_to_f16(0x1p-25f), 0x0000); /* tie to even zero */
    CU_ASSERT_EQUAL(numla_f32_to_f16(0x1.8p-25f), 0x0001);
    CU_ASSERT(isnan(numla_bf16_to_f32(numla_f32_to_bf16(NAN))));
}

/* e4m3fn code -> value from the format's definition: bias 7, 3 mantissa bits, exponent 0
 * subnormal (man · 2^-9), S.1111.111 NaN, no infinities. */
static double e4m3_ref_value(unsigned b)
{
    unsigned e = (b >> 3) & 15, m = b & 7;
    double v = (b & 0x7f) == 0x7f ? NAN : e == 0 ? ldexp((double)m, -9) : ldexp(8.0 + m, (int)e - 10);
    return (b & 0x80) ? -v : v;
}

/* Every one of the 256 codes decodes to its defined value, and encodes back to itself (NaN
 * codes: to 0x7f with their sign). Sizes and names of the 1-byte types. */
static void test_e4m3_all_codes(void)
{
    int bad = 0;
    for (unsigned b = 0; b < 256; b++) {
        double ref = e4m3_ref_value(b);
        float f = numla_e4m3_to_f32((uint8_t)b);
        if (isnan(ref)) {
            bad += !isnan(f) || numla_f32_to_e4m3(f) != b || !!signbit(f) != !!(b & 0x80);
            continue;
        }
        if ((double)f != ref || !!signbit(f) != !!(b & 0x80) || numla_f32_to_e4m3(f) != b) {
            if (bad++ < 5)
                fprintf(stderr, "\n    code 0x%02x: got %g (-> 0x%02x), want %g\n", b, (double)f,
                        numla_f32_to_e4m3(f), ref);
        }
        uint8_t one = (uint8_t)b;
        bad += numla_load_f32(&one, NUMLA_DTYPE_F8_E4M3, 0) != f && !isnan(ref);
    }
    NUMLA_ASSERT_MSG(bad == 0, "%d e4m3 codes wrong", bad);
    CU_ASSERT_EQUAL(numla_e4m3_to_f32(0x7e), 448.0f);
    CU_ASSERT_EQUAL(numla_e4m3_to_f32(0x01), 0x1p-9f);
    CU_ASSERT_EQUAL(numla_dtype_size(NUMLA_DTYPE_F8_E4M3), 1u);
    CU_ASSERT_EQUAL(numla_dtype_size(NUMLA_DTYPE_I8), 1u);
    CU_ASSERT_EQUAL(numla_dtype_size(NUMLA_DTYPE_BF16), 2u);
    CU_ASSERT_EQUAL(numla_dtype_size(NUMLA_DTYPE_F32), 4u);
    CU_ASSERT_STRING_EQUAL(numla_dtype_name(NUMLA_DTYPE_F8_E4M3), "f8_e4m3");
    CU_ASSERT_STRING_EQUAL(numla_dtype_name(NUMLA_DTYPE_I8), "i8");
    CU_ASSERT(numla_dtype_valid(NUMLA_DTYPE_I8) && numla_dtype_valid(NUMLA_DTYPE_BF16));
    CU_ASSERT(!numla_dtype_valid(NUMLA_DTYPE_COUNT) && !numla_dtype_valid(NUMLA_DTYPE_END));
    int8_t q[4];
    numla_store_f32(q, NUMLA_DTYPE_I8, 0, 2.5f);   /* ties to even */
    numla_store_f32(q, NUMLA_DTYPE_I8, 1, -300.f); /* saturates */
    numla_store_f32(q, NUMLA_DTYPE_I8, 2, NAN);
    numla_store_f32(q, NUMLA_DTYPE_I8, 3, -3.5f);
    CU_ASSERT(q[0] == 2 && q[1] == -128 && q[2] == 0 && q[3] == -4);
    CU_ASSERT_EQUAL(numla_load_f32(q, NUMLA_DTYPE_I8, 1), -128.0f);
}

/* f32 -> e4m3 against a brute-force reference: the nearest of the 127 finite magnitudes plus
 * 480 (the value the NaN pattern 0x7f would have), ties to the even code; 0x7f is NaN. That is
 * torch's `.to(torch.float8_e4m3fn)`: no saturation, overflow past 464 is NaN. Checked on
 * every midpoint and its float neighbours, plus random values over the whole range. */
static uint8_t e4m3_ref_encode(float x)
{
    if (isnan(x))
        return (uint8_t)(signbit(x) ? 0xff : 0x7f);
    double a = fabs((double)x);
    if (a >= 480.0) /* nearest is the NaN pattern (also where a - 448 == a - 480 in doubles) */
        return (uint8_t)(signbit(x) ? 0xff : 0x7f);
    unsigned best = 0;
    double bd = INFINITY;
    for (unsigned c = 0; c <= 0x7f; c++) {
        double v = c == 0x7f ? 480.0 : e4m3_ref_value(c);
        double d = fabs(a - v);
        if (d < bd || (d == bd && !(c & 1))) {
            bd = d;
            best = c;
        }
    }
    return (uint8_t)(best | (signbit(x) ? 0x80u : 0u));
}

static void test_e4m3_encode_rounding(void)
{
    int bad = 0, n = 0;
    float probes[4096];
    for (unsigned c = 0; c < 0x7f; c++) {
        float lo = (float)e4m3_ref_value(c), hi = c + 1 == 0x7f ? 480.0f : (float)e4m3_ref_value(c + 1);
        float mid = (float)(0.5 * ((double)lo + (double)hi));
        probes[n++] = lo;
        probes[n++] = mid;
        probes[n++] = nextafterf(mid, 0.0f);
        probes[n++] = nextafterf(mid, 1000.0f);
    }
    probes[n++] = 1000.0f;
    probes[n++] = 1e30f;
    probes[n++] = INFINITY;
    probes[n++] = 0x1p-12f; /* below half the smallest subnormal: 0 */
    probes[n++] = 0x1p-10f; /* exactly half of 2^-9: ties to even 0 */
    probes[n++] = 3 * 0x1p-10f;
    probes[n++] = 1e-30f;
    numla_test_rng rng = {7};
    while (n < 4096)
        probes[n++] = (float)ldexp(numla_test_rng_uniform(&rng, 1.0, 2.0),
                                   (int)numla_test_rng_uniform(&rng, -14.0, 10.0));
    for (int i = 0; i < n; i++)
        for (int sgn = 0; sgn < 2; sgn++) {
            float x = sgn ? -probes[i] : probes[i];
            uint8_t got = numla_f32_to_e4m3(x), want = e4m3_ref_encode(x);
            if (got != want && bad++ < 5)
                fprintf(stderr, "\n    %a -> 0x%02x, want 0x%02x\n", (double)x, got, want);
        }
    NUMLA_ASSERT_MSG(bad == 0, "%d e4m3 encodings wrong", bad);
    CU_ASSERT_EQUAL(numla_f32_to_e4m3(-0.0f), 0x80);
    CU_ASSERT_EQUAL(numla_f32_to_e4m3(464.0f), 0x7e);   /* tie: to 448 (even) */
    CU_ASSERT_EQUAL(numla_f32_to_e4m3(465.0f), 0x7f);   /* past the tie: NaN */
    CU_ASSERT_EQUAL(numla_f32_to_e4m3(-INFINITY), 0xff);
    CU_ASSERT_EQUAL(numla_f32_to_e4m3(NAN), 0x7f);
}

/* E8M0 (OCP MX scales): every code against its definition 2^(e - 127), 0xff NaN; the encoder
 * gives the smallest power of two >= v. */
static void test_e8m0(void)
{
    int bad = 0;
    for (int e = 0; e < 256; e++) {
        const float f = numla_e8m0_to_f32((uint8_t)e);
        if (e == 255 ? !isnan(f) : (double)f != ldexp(1.0, e - 127))
            bad++;
        if (e < 255 && numla_f32_to_e8m0(f) != e)
            bad++;
    }
    NUMLA_ASSERT_MSG(bad == 0, "%d e8m0 codes wrong", bad);
    CU_ASSERT_EQUAL(numla_f32_to_e8m0(3.0f), 128 + 1);         /* 4 */
    CU_ASSERT_EQUAL(numla_f32_to_e8m0(0x1.000002p-3f), 127 - 2); /* just above 1/8: 1/4 */
    CU_ASSERT_EQUAL(numla_f32_to_e8m0(0x1p-140f), 0);            /* below 2^-127: 2^-127 */
    CU_ASSERT(numla_f32_to_e8m0(0.0f) == 255 && numla_f32_to_e8m0(-1.0f) == 255 &&
              numla_f32_to_e8m0(NAN) == 255 && numla_f32_to_e8m0(INFINITY) == 255);
    CU_ASSERT_EQUAL(numla_dtype_size(NUMLA_DTYPE_F8_E8M0), 1u);
    CU_ASSERT_STRING_EQUAL(numla_dtype_name(NUMLA_DTYPE_F8_E8M0), "f8_e8m0");
    CU_ASSERT(numla_dtype_valid(NUMLA_DTYPE_F8_E8M0));
    uint8_t b[2] = {0, 0};
    numla_store_f32(b, NUMLA_DTYPE_F8_E8M0, 1, 0.5f);
    CU_ASSERT(b[0] == 0 && b[1] == 126 && numla_load_f32(b, NUMLA_DTYPE_F8_E8M0, 1) == 0.5f);
}

NUMLA_TEST_SUITE(dtype, NULL, NULL, NUMLA_TEST(test_bf16_roundtrip_exhaustive), NUMLA_TEST(test_e8m0),
                 NUMLA_TEST(test_e4m3_all_codes), NUMLA_TEST(test_e4m3_encode_rounding),
                 NUMLA_TEST(test_f16_roundtrip_exhaustive), NUMLA_TEST(test_round_nearest_even))
