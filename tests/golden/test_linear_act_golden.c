/* Golden test (label golden) of the opt-in bf16 activations of the linear layers
 * (--linear-act bf16; kernels/linear.h NUMLA_LINEAR_ACT_BF16) against the Hugging Face
 * reference data of tests/golden/v2lite (checks: model_golden_harness.h). */
#include "model_golden_harness.h"

/* The bf16 V2-Lite model at the best level: every bf16 linear carries the mode after loading;
 * where the level has vdpbf16ps the logits differ from the default run's (the path changed).
 * x rounded to bf16 adds up to 2^-8 of sum |x w| to every linear output (the fp32 class of the
 * default path: 2^-17), which moves logits by ~0.1-0.3 on these random 4-layer models and, like
 * a bf16 KV cache, can flip a near-tied expert choice and the positions after it (2.1 at one
 * position of the 33-token prompt). So the logits are held to the bf16-KV rule
 * (LOGIT_TOL_BF16KV at most positions, LOGIT_MAX_BF16KV at every one), and the greedy tokens
 * must match the reference's while its margin exceeds 2 x LOGIT_TOL_BF16ACT_GREEDY. */
#define LOGIT_TOL_BF16ACT_GREEDY 0.25
static void test_v2lite_bf16_activations(void)
{
    numla_isa isas[NUMLA_ISA_COUNT];
    const numla_isa best = isas[numla_test_isas(isas) - 1];
    golden g;
    if (golden_load_file(&g, "v2lite", "model_bf16", "expected.safetensors")) {
        CU_FAIL("golden data");
        golden_free(&g);
        return;
    }
    eng e[2]; /* 0: default activations, 1: bf16 */
    for (int a = 0; a < 2; a++) {
        numla_model_options mo = eng_model_options(best);
        mo.single_thread_below_bytes = 0;
        eng_linear_act = a ? NUMLA_LINEAR_ACT_BF16 : NUMLA_LINEAR_ACT_F32;
        const int bad = eng_open_rank_opts(&e[a], g.dir, NUMLA_DTYPE_F32, &mo, 0, 1);
        eng_linear_act = NUMLA_LINEAR_ACT_F32;
        if (bad) {
            CU_FAIL("engine open");
            if (a)
                eng_close(&e[0]);
            golden_free(&g);
            return;
        }
    }
    const numla_weights_layer *L0 = &e[1].w->layers[0];
    CU_ASSERT_EQUAL(L0->o_proj.lin.dtype, NUMLA_DTYPE_BF16);
    CU_ASSERT_EQUAL(L0->o_proj.lin.act, NUMLA_LINEAR_ACT_BF16);
    CU_ASSERT_EQUAL(e[0].w->layers[0].o_proj.lin.act, NUMLA_LINEAR_ACT_F32);
    const int V = (int)e[1].cfg.vocab_size;
    double worst = 0, moved = 0;
    int compared = 0;
    for (int p = 0; p < g.nprompts; p++) {
        char name[64];
        snprintf(name, sizeof name, "prompt%d.logits", p);
        int64_t r = 0, k = 0;
        const float *ref = st_f32(g.expected, name, &r, &k);
        CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
        float *lg[2];
        for (int a = 0; a < 2; a++) {
            lg[a] = malloc(sizeof(float) * (size_t)r * V);
            numla_kv_seq s = {0};
            const int32_t *tk[1] = {g.tokens[p]};
            int n[1] = {g.len[p]};
            CU_ASSERT_EQUAL_FATAL(eng_step(&e[a], 1, &s, tk, n, lg[a]), 0);
            numla_kv_seq_release(e[a].kv, &s);
        }
        const double err = maxabs_diff(lg[1], ref, (size_t)r * V, NULL);
        const int above = rows_above(lg[1], ref, r, V, LOGIT_TOL_BF16KV);
        worst = fmax(worst, err);
        NUMLA_ASSERT_MSG(above <= LOGIT_FRAC_BF16KV * (double)r && err <= LOGIT_MAX_BF16KV,
                         "v2lite bf16 activations prompt %d: %d of %lld positions off by more "
                         "than %g, worst %g (at most %g)", p, above, (long long)r,
                         LOGIT_TOL_BF16KV, err, LOGIT_MAX_BF16KV);
        moved = fmax(moved, maxabs_diff(lg[1], lg[0], (size_t)r * V, NULL));
        int cmp = 0;
        NUMLA_ASSERT_MSG(greedy_check(&e[1], &g, p, LOGIT_TOL_BF16ACT_GREEDY, &cmp) == 0,
                         "v2lite bf16 activations prompt %d: greedy mismatch", p);
        compared += cmp;
        free(lg[0]);
        free(lg[1]);
    }
    fprintf(stderr, "\n    golden v2lite bf16 activations at %s: logits max abs err %.3g, "
                    "%.3g from the default path, greedy tokens compared %d",
            numla_isa_name(best), worst, moved, compared);
    if (best >= NUMLA_ISA_AVX512BF16)
        NUMLA_ASSERT_MSG(moved > 0, "bf16 activations gave the default path's logits at %s",
                         numla_isa_name(best));
    CU_ASSERT(compared > 0);
    eng_close(&e[0]);
    eng_close(&e[1]);
    golden_free(&g);
}

NUMLA_TEST_SUITE(linear_act_golden, NULL, NULL, NUMLA_TEST(test_v2lite_bf16_activations))
