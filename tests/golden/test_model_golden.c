/* Golden tests (label golden): DeepSeek V2-Lite, V2, V3 and Kimi K2 shapes against the Hugging
 * Face reference data in tests/golden/{v2lite,v2,v3,kimi} (checks: model_golden_harness.h),
 * for fp32, bf16, fp8 and int8 weights, 1-4 in-process ranks. */
#include "model_golden_harness.h"

static void test_v2lite(void) { check_model("v2lite"); }
static void test_v2(void) { check_model("v2"); }
static void test_v3(void) { check_model("v3"); }
/* Kimi K2's shape (model_type kimi_k2, one expert group, routed scaling 2.827, one dense layer,
 * YaRN beta 1/1, scripts/make_kimi_model_golden.py): fp32 and bf16 */
static void test_kimi(void) { check_model("kimi"); }
static void test_v2_sharded(void) { check_sharded("v2"); }
static void test_v3_sharded(void) { check_sharded("v3"); }
static void test_kimi_sharded(void) { check_sharded_dir("kimi", "", 3, LOGIT_TOL); }
static void test_v2lite_fp8(void) { check_quant("v2lite", "fp8"); }
static void test_v2_fp8(void) { check_quant("v2", "fp8"); }
static void test_v3_fp8(void) { check_quant("v3", "fp8"); }
static void test_v2lite_int8(void) { check_quant("v2lite", "int8"); }
static void test_v2_int8(void) { check_quant("v2", "int8"); }
static void test_v3_int8(void) { check_quant("v3", "int8"); }

NUMLA_TEST_SUITE(model_golden, NULL, NULL, NUMLA_TEST(test_v2lite), NUMLA_TEST(test_v2),
                 NUMLA_TEST(test_v3), NUMLA_TEST(test_kimi), NUMLA_TEST(test_v2_sharded),
                 NUMLA_TEST(test_v3_sharded), NUMLA_TEST(test_kimi_sharded),
                 NUMLA_TEST(test_v2lite_fp8), NUMLA_TEST(test_v2_fp8), NUMLA_TEST(test_v3_fp8),
                 NUMLA_TEST(test_v2lite_int8), NUMLA_TEST(test_v2_int8),
                 NUMLA_TEST(test_v3_int8))
