/* Golden tests (label golden) of DeepSeek-V4 from a GGUF `deepseek4` file as llama.cpp's own
 * converter writes it (engine/formats/gguf_deepseek4.h; docs/design.md §10):
 * tests/golden/v4/model_fp8.gguf is tests/golden/v4/model_fp8 (the published FP8 + FP4 form)
 * converted by llama.cpp's convert_hf_to_gguf.py (scripts/make_v4_gguf.py --fp8-as-bf16: the FP8
 * projections handed over as the exact bf16 of their values, so the converter keeps them BF16;
 * the routed experts repacked by the converter to ggml MXFP4, the hash tables I32, the rest
 * BF16/F32). The file holds model_fp8's values exactly, so:
 *   - its logits at every prompt position are within LOGIT_TOL of transformers' (model_fp8's
 *     expected.safetensors) and its greedy tokens are transformers' (all of them), at 1 and 2
 *     ranks (in one process, a shared-memory sum);
 *   - and they are within SAME_TOL of numla's logits on the safetensors checkpoint at the same
 *     ISA and rank count (the same values through the GGUF view: names, shapes, MXFP4 blocks;
 *     not bit for bit, since the safetensors FP8 projections run on kernels/qlinear.h's FP8
 *     kernels and the file's BF16 copies on kernels/linear.h, which sum in other orders).
 * tests/golden/v4/model_fp8_q8.gguf is the same checkpoint converted as the converter does by
 * default (FP8 projections dequantized and stored as Q8_0, a second rounding, which moves the
 * logits by O(1) on these unit-gain weights): its tensors load as Q8_0 blocks
 * (kernels/qblock.h) and its logits and greedy tokens are held to a numpy float64 forward
 * (scripts/check_v4_golden.py's) over the values the gguf package reads from that file; so is
 * model_fp8_q4km.gguf, llama-quantize's Q4_K_M of model_fp8.gguf (K-quants, Q5_0 where a width
 * is not a multiple of 256, mHC's fn and the compressors' ape in blocks too). */
#include "v4_golden_harness.h"

#include "engine/formats/gguf.h"
#include "engine/formats/gguf_deepseek4.h"

/* GGUF (BF16 projections) against safetensors (the same values as FP8): the two linear
 * families' summation orders and, on the amx level, their split-bf16 activations (about 7e-4
 * here); a tensor read wrongly through the GGUF view moves the logits by O(1) */
#define SAME_TOL (LOGIT_TOL / 2)

typedef struct v4_src {
    numla_gguf *g;                 /* NULL: a safetensors directory */
    numla_safetensors_model *st;
    numla_model_config cfg;
} v4_src;

static int src_open(v4_src *s, const char *path)
{
    memset(s, 0, sizeof *s);
    numla_status st = numla_model_config_load(path, &s->cfg);
    NUMLA_ASSERT_MSG(st == NUMLA_STATUS_OK, "%s config: %s", path, numla_error_message());
    if (st)
        return 1;
    if (numla_model_path_is_gguf(path)) {
        st = numla_gguf_open(path, &s->g);
        if (!st)
            st = numla_gguf_deepseek4_view(s->g, &s->st);
    } else {
        st = numla_safetensors_open(path, &s->st);
    }
    NUMLA_ASSERT_MSG(st == NUMLA_STATUS_OK, "%s: %s", path, numla_error_message());
    return st != NUMLA_STATUS_OK;
}

static void src_close(v4_src *s)
{
    numla_safetensors_close(&s->st);
    numla_gguf_close(&s->g);
}

/* The GGUF file against transformers and against the safetensors checkpoint, at R ranks. */
static void check_gguf(int R)
{
    golden g;
    if (v4_golden_load(&g, "model_fp8"))
        return;
    v4_src gs, ss;
    char path[1200];
    snprintf(path, sizeof path, "%s", numla_test_source_path("tests/golden/v4/model_fp8.gguf"));
    if (src_open(&gs, path)) {
        golden_free(&g);
        return;
    }
    CU_ASSERT_EQUAL(gs.cfg.arch, NUMLA_MODEL_ARCH_DEEPSEEK_V4);
    CU_ASSERT_DOUBLE_EQUAL(gs.cfg.softmax_scale, g.softmax_scale, 1e-12);
    for (int i = 0; i < g.n_inv && i < gs.cfg.v4.rope_dim / 2; i++)
        CU_ASSERT_DOUBLE_EQUAL(gs.cfg.v4.main_inv_freq[i], g.inv_freq[i], 1e-7 * g.inv_freq[i]);
    float *lg = NULL, *ls = NULL;
    int bad = v4_run_prompts(&gs.cfg, gs.st, numla_isa_best(), &g, R, &lg);
    src_close(&gs);
    if (!bad && !src_open(&ss, g.dir)) {
        /* the same config from the keys as from config.json (GGUF keeps the epsilons in
         * float32) */
        CU_ASSERT_DOUBLE_EQUAL(gs.cfg.v4.hc_eps, ss.cfg.v4.hc_eps, 1e-7 * ss.cfg.v4.hc_eps);
        CU_ASSERT_DOUBLE_EQUAL(gs.cfg.rms_norm_eps, ss.cfg.rms_norm_eps, 1e-7 * ss.cfg.rms_norm_eps);
        numla_v4_config a = gs.cfg.v4;
        a.hc_eps = ss.cfg.v4.hc_eps;
        CU_ASSERT_EQUAL(memcmp(&ss.cfg.v4, &a, sizeof a), 0);
        CU_ASSERT_EQUAL(ss.cfg.num_experts_per_tok, gs.cfg.num_experts_per_tok);
        CU_ASSERT_DOUBLE_EQUAL(ss.cfg.routed_scaling_factor, gs.cfg.routed_scaling_factor, 0);
        bad = v4_run_prompts(&ss.cfg, ss.st, numla_isa_best(), &g, R, &ls);
        src_close(&ss);
    }
    CU_ASSERT_FALSE(bad);
    double worst = 0;
    int ok = 0, cmp = 0;
    double same = 0; /* the largest difference from the safetensors run's logits */
    if (!bad) {
        const size_t n = v4_prompt_rows(&g) * (size_t)gs.cfg.vocab_size;
        v4_compare(&g, g.expected, lg, gs.cfg.vocab_size, 0, &worst, &ok, &cmp);
        same = maxabs_diff(lg, ls, n, NULL);
    }
    NUMLA_ASSERT_MSG(worst <= LOGIT_TOL, "v4 gguf %d ranks: logits max err %g", R, worst);
    NUMLA_ASSERT_MSG(ok == cmp && cmp == g.nprompts * N_GREEDY, "v4 gguf %d ranks: %d of %d "
                     "greedy tokens", R, ok, cmp);
    NUMLA_ASSERT_MSG(same <= SAME_TOL, "v4 gguf %d ranks: logits %g from the safetensors "
                     "checkpoint's", R, same);
    fprintf(stderr, "\n    golden v4 gguf %d rank%s: logits max abs err %.3g, greedy %d/%d, "
            "from safetensors' %.3g", R, R > 1 ? "s" : "", worst, ok, cmp, same);
    free(lg);
    free(ls);
    golden_free(&g);
}

static void test_gguf_1rank(void) { check_gguf(1); }
static void test_gguf_2ranks(void) { check_gguf(2); }

/* A GGUF file held to the numpy float64 forward over the values the gguf package reads from it
 * (NAME.expected.safetensors, scripts/make_v4_gguf_golden.py), at 1 and 2 ranks: every prompt
 * position's logits within LOGIT_TOL and every greedy token (the reference's own, fed back). */
static void check_gguf_numpy(const char *name)
{
    golden g;
    if (v4_golden_load(&g, "model_fp8"))
        return;
    numla_safetensors_model *exp = NULL;
    char path[1200], rel[256];
    snprintf(rel, sizeof rel, "tests/golden/v4/%s.expected.safetensors", name);
    snprintf(path, sizeof path, "%s", numla_test_source_path(rel));
    CU_ASSERT_EQUAL_FATAL(open_file_as_model(path, name, &exp), NUMLA_STATUS_OK);
    v4_src gs;
    snprintf(rel, sizeof rel, "tests/golden/v4/%s.gguf", name);
    snprintf(path, sizeof path, "%s", numla_test_source_path(rel));
    if (src_open(&gs, path)) {
        numla_safetensors_close(&exp);
        golden_free(&g);
        return;
    }
    /* the reference's own greedy tokens are what the ranks are fed */
    for (int p = 0; p < g.nprompts; p++) {
        char tn[64];
        snprintf(tn, sizeof tn, "prompt%d.greedy", p);
        const numla_safetensors_tensor *gt = numla_safetensors_find(exp, tn);
        CU_ASSERT_PTR_NOT_NULL_FATAL(gt);
        CU_ASSERT_EQUAL_FATAL(gt->nbytes, sizeof g.greedy[p]);
        memcpy(g.greedy[p], gt->data, sizeof g.greedy[p]);
    }
    for (int R = 1; R <= 2; R++) {
        float *lg = NULL;
        if (v4_run_prompts(&gs.cfg, gs.st, numla_isa_best(), &g, R, &lg)) {
            CU_FAIL("gguf run");
            continue;
        }
        double worst = 0;
        int ok = 0, cmp = 0;
        v4_compare(&g, exp, lg, gs.cfg.vocab_size, 1, &worst, &ok, &cmp);
        NUMLA_ASSERT_MSG(worst <= LOGIT_TOL, "v4 %s %d ranks: logits max err %g", name, R, worst);
        NUMLA_ASSERT_MSG(ok == cmp, "v4 %s %d ranks: %d of %d greedy tokens", name, R, ok, cmp);
        fprintf(stderr, "\n    golden v4 %s %d rank%s: logits max abs err %.3g, greedy %d/%d",
                name, R, R > 1 ? "s" : "", worst, ok, cmp);
        free(lg);
    }
    src_close(&gs);
    numla_safetensors_close(&exp);
    golden_free(&g);
}

/* The type a tensor of the file has in the view. */
static void expect_type(const char *file, const char *tensor, uint32_t ggml)
{
    char rel[256];
    snprintf(rel, sizeof rel, "tests/golden/v4/%s", file);
    numla_gguf *g = NULL;
    numla_safetensors_model *v = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_gguf_open(numla_test_source_path(rel), &g), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_gguf_deepseek4_view(g, &v), NUMLA_STATUS_OK);
    const numla_safetensors_tensor *t = numla_safetensors_find(v, tensor);
    NUMLA_ASSERT_MSG(t && t->dtype == NUMLA_DTYPE_END && t->ggml_type == ggml, "%s: %s is %u", file,
                     tensor, t ? t->ggml_type : 0);
    numla_safetensors_close(&v);
    numla_gguf_close(&g);
}

/* The converter's default form: Q8_0 projections (FP8 dequantized and requantized), MXFP4
 * experts. */
static void test_gguf_q8(void)
{
    expect_type("model_fp8_q8.gguf", "layers.0.attn.wq_b.weight", NUMLA_GGML_Q8_0);
    expect_type("model_fp8_q8.gguf", "layers.2.ffn.experts.7.w2.weight", NUMLA_GGML_MXFP4);
    check_gguf_numpy("model_fp8_q8");
}

/* llama-quantize Q4_K_M of model_fp8.gguf: mHC's fn in Q4_K, the compressors' ape, the
 * embedding and most projections in Q5_0 (widths not a multiple of 256), all read. */
static void test_gguf_q4km(void)
{
    expect_type("model_fp8_q4km.gguf", "layers.1.hc_attn_fn", NUMLA_GGML_Q4_K);
    expect_type("model_fp8_q4km.gguf", "layers.1.attn.compressor.ape", NUMLA_GGML_Q5_0);
    expect_type("model_fp8_q4km.gguf", "embed.weight", NUMLA_GGML_Q5_0);
    check_gguf_numpy("model_fp8_q4km");
}

NUMLA_TEST_SUITE(model_golden_v4_gguf, NULL, NULL, NUMLA_TEST(test_gguf_1rank),
                 NUMLA_TEST(test_gguf_2ranks), NUMLA_TEST(test_gguf_q8),
                 NUMLA_TEST(test_gguf_q4km))
