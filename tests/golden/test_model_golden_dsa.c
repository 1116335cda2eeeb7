/* Golden tests (label golden) of the sparse-attention model types against transformers 5.25
 * (scripts/make_dsa_model_golden.py; checks: model_golden_harness.h). */
#include "model_golden_harness.h"

/* Sparse attention (DSA): DeepSeek-V3.2 and GLM-5 shapes with index_topk 16, so the 33- and
 * 60-token prompts and the greedy continuations select (scripts/make_dsa_model_golden.py,
 * tests/golden/README.md "Sparse attention"): fp32 and bf16 weights through every
 * configuration of check_model, 2-3 in-process ranks, and V3.2's FP8 checkpoint (indexer
 * wq_b / wk in e4m3 too). */
static void check_dsa(const char *model, int fp8)
{
    check_model_dirs(model, "model_fp32");
    check_sharded_dir(model, "model_fp32", 3, LOGIT_TOL);
    check_sharded_dir(model, "model_bf16", 3, LOGIT_TOL);
    if (fp8)
        check_quant(model, "fp8");
}

static void test_v32(void) { check_dsa("v32", 1); }
static void test_glm5(void) { check_dsa("glm5", 0); }

NUMLA_TEST_SUITE(model_golden_dsa, NULL, NULL, NUMLA_TEST(test_v32), NUMLA_TEST(test_glm5))
