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

NUMLA_TEST_SUITE(dtype, NULL, NULL, NUMLA_TEST(test_bf16_roundtrip_exhaustive),
                 NUMLA_TEST(test_f16_roundtrip_exhaustive), NUMLA_TEST(test_round_nearest_even))
