/* Tests for kernels/isa: parsing and the NUMLA_ISA override. */
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

static void test_parse(void)
{
    numla_isa isa;
    CU_ASSERT_EQUAL(numla_isa_parse("avx512bf16", &isa), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(isa, NUMLA_ISA_AVX512BF16);
    CU_ASSERT_EQUAL(numla_isa_parse("ref", &isa), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(isa, NUMLA_ISA_REF);
    CU_ASSERT_EQUAL(numla_isa_parse("sse9", &isa), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "sse9"));
}

static void test_select_env(void)
{
    numla_isa isa;
    setenv("NUMLA_ISA", "ref", 1);
    CU_ASSERT_EQUAL(numla_isa_select(&isa), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(isa, NUMLA_ISA_REF);
    setenv("NUMLA_ISA", "bogus", 1);
    CU_ASSERT_EQUAL(numla_isa_select(&isa), NUMLA_STATUS_INVALID_ARG);
    /* A level the CPU lacks is an error, not a fallback. */
    for (int i = 0; i < NUMLA_ISA_COUNT; i++) {
        if (numla_isa_supported((numla_isa)i))
            continue;
        setenv("NUMLA_ISA", numla_isa_name((numla_isa)i), 1);
        CU_ASSERT_EQUAL(numla_isa_select(&isa), NUMLA_STATUS_UNSUPPORTED);
    }
    unsetenv("NUMLA_ISA");
    CU_ASSERT_EQUAL(numla_isa_select(&isa), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(isa, numla_isa_best());
}

NUMLA_TEST_SUITE(isa, NULL, NULL, NUMLA_TEST(test_parse), NUMLA_TEST(test_select_env))
