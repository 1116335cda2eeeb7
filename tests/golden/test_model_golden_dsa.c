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
    /* With a bf16 KV cache (latent rows and index keys rounded to bf16) the indexer's scores
     * move by ~1e-3 relative and the router's inputs by as much, enough to swap a near-tied 16th
     * and 17th key or expert (the generator keeps ties out only at fp32 precision), and one swap
     * moves a tiny random model's logits far beyond any tolerance (seen: up to 25). So those
     * configurations assert only that prefill-then-decode equals the whole prefill; their
     * distance to the reference is reported (docs/sparse_attention.md). The bf16 latent path
     * itself is held to the reference by the V2/V3 goldens. */
    check_model_dirs(model, "model_fp32", 1);
    check_sharded_dir(model, "model_fp32", 3, LOGIT_TOL);
    check_sharded_dir(model, "model_bf16", 3, LOGIT_TOL);
    if (fp8)
        check_quant(model, "fp8");
}

static void test_v32(void) { check_dsa("v32", 1); }
static void test_glm5(void) { check_dsa("glm5", 0); }

NUMLA_TEST_SUITE(model_golden_dsa, NULL, NULL, NUMLA_TEST(test_v32), NUMLA_TEST(test_glm5))
