/* Slow tests for engine/synth: the real DeepSeek-V2-Lite shape (2 layers, ~2.25 GB in bf16,
 * so it crosses the 2 GiB shard limit) written and re-opened; shapes spelled out from the
 * published V2-Lite config. Label `slow`: not part of the default CI run. */
#define _GNU_SOURCE
#include "test_util.h"

#include "common/clock.h"
#include "engine/formats/safetensors.h"
#include "engine/synth/synth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void sl_expect(const numla_safetensors_model *m, const char *name, int64_t r, int64_t c, int *bad)
{
    const int64_t shape[2] = {r, c};
    if (numla_safetensors_expect(m, name, c ? 2 : 1, shape, NULL) != NUMLA_STATUS_OK) {
        fprintf(stderr, "\n    %s\n", numla_error_message());
        (*bad)++;
    }
}

static void test_v2_lite_two_layers(void)
{
    char dir[600];
    snprintf(dir, sizeof dir, "%s/synth-v2-lite", numla_test_tmpdir());
    numla_synth_options o = {.preset = "v2-lite", .out_dir = dir, .layers = 2, .seed = 3,
                             .dtype = NUMLA_DTYPE_BF16};
    int64_t bytes = 0;
    const double t0 = numla_now_s();
    numla_status s = numla_synth_write(&o, &bytes);
    const double sec = numla_now_s() - t0;
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OK, "%s", numla_error_message());
    if (s != NUMLA_STATUS_OK)
        return;
    fprintf(stderr, "\n    v2-lite x2 layers: %.2f GB in %.1f s (%.0f MB/s)\n", bytes * 1e-9, sec,
            bytes * 1e-6 / sec);

    numla_safetensors_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(dir, &m), NUMLA_STATUS_OK);
    const int64_t d = 2048, H = 16, V = 102400;
    int bad = 0;
    sl_expect(m, "model.embed_tokens.weight", V, d, &bad);
    sl_expect(m, "lm_head.weight", V, d, &bad);
    sl_expect(m, "model.norm.weight", d, 0, &bad);
    for (int i = 0; i < 2; i++) {
        char n[128];
#define L_(fmt) (snprintf(n, sizeof n, "model.layers.%d." fmt, i), n)
        sl_expect(m, L_("input_layernorm.weight"), d, 0, &bad);
        sl_expect(m, L_("post_attention_layernorm.weight"), d, 0, &bad);
        sl_expect(m, L_("self_attn.q_proj.weight"), H * 192, d, &bad);
        sl_expect(m, L_("self_attn.kv_a_proj_with_mqa.weight"), 576, d, &bad);
        sl_expect(m, L_("self_attn.kv_a_layernorm.weight"), 512, 0, &bad);
        sl_expect(m, L_("self_attn.kv_b_proj.weight"), H * 256, 512, &bad);
        sl_expect(m, L_("self_attn.o_proj.weight"), d, H * 128, &bad);
#undef L_
    }
    sl_expect(m, "model.layers.0.mlp.gate_proj.weight", 10944, d, &bad);
    sl_expect(m, "model.layers.0.mlp.up_proj.weight", 10944, d, &bad);
    sl_expect(m, "model.layers.0.mlp.down_proj.weight", d, 10944, &bad);
    sl_expect(m, "model.layers.1.mlp.gate.weight", 64, d, &bad);
    sl_expect(m, "model.layers.1.mlp.experts.63.gate_proj.weight", 1408, d, &bad);
    sl_expect(m, "model.layers.1.mlp.experts.63.down_proj.weight", d, 1408, &bad);
    sl_expect(m, "model.layers.1.mlp.shared_experts.up_proj.weight", 2816, d, &bad);
    sl_expect(m, "model.layers.1.mlp.shared_experts.down_proj.weight", d, 2816, &bad);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_PTR_NULL(numla_safetensors_find(m, "model.layers.1.self_attn.q_a_proj.weight"));
    CU_ASSERT_PTR_NULL(numla_safetensors_find(m, "model.layers.1.mlp.gate.e_score_correction_bias"));
    /* 3 + 2*7 attention/norms + 3 dense + 1 router + 64*3 experts + 3 shared = 216. */
    CU_ASSERT_EQUAL(numla_safetensors_count(m), 216);
    const char *f0 = numla_safetensors_find(m, "model.embed_tokens.weight")->file;
    const char *f1 = numla_safetensors_find(m, "lm_head.weight")->file;
    CU_ASSERT(strcmp(f0, f1) != 0 && strstr(f1, "-of-00002") != NULL);
    numla_safetensors_close(&m);
}

/* `numla synth --preset v3 --layers 2 --weights fp8 --mtp off`: the published DeepSeek-V3 FP8 layout
 * (F8_E4M3 weights, F32 weight_scale_inv per 128x128 block, shapes as in DeepSeek-V3's
 * model.safetensors.index.json; embeddings, norms and lm_head in bf16). */
static void sl_expect_q(const numla_safetensors_model *m, const char *name, int64_t r, int64_t c,
                        int *bad)
{
    sl_expect(m, name, r, c, bad);
    char sn[160];
    snprintf(sn, sizeof sn, "%s_scale_inv", name);
    sl_expect(m, sn, (r + 127) / 128, (c + 127) / 128, bad);
    const numla_safetensors_tensor *w = numla_safetensors_find(m, name), *s = numla_safetensors_find(m, sn);
    if (!w || !s || w->dtype != NUMLA_DTYPE_F8_E4M3 || s->dtype != NUMLA_DTYPE_F32) {
        fprintf(stderr, "\n    %s: wrong dtypes\n", name);
        (*bad)++;
    }
}

static void test_v3_fp8_two_layers(void)
{
    char dir[600];
    snprintf(dir, sizeof dir, "%s/synth-v3-fp8", numla_test_tmpdir());
    numla_synth_options o = {.preset = "v3", .out_dir = dir, .layers = 2, .seed = 3,
                             .dtype = NUMLA_DTYPE_BF16, .weights = NUMLA_QCKPT_FP8, .mtp = -1};
    numla_status s = numla_synth_write(&o, NULL);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OK, "%s", numla_error_message());
    if (s != NUMLA_STATUS_OK)
        return;
    numla_safetensors_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(dir, &m), NUMLA_STATUS_OK);
    const int64_t d = 7168, V = 129280;
    int bad = 0;
    sl_expect(m, "model.embed_tokens.weight", V, d, &bad);
    sl_expect(m, "lm_head.weight", V, d, &bad);
    CU_ASSERT_EQUAL(numla_safetensors_find(m, "lm_head.weight")->dtype, NUMLA_DTYPE_BF16);
    CU_ASSERT_EQUAL(numla_safetensors_find(m, "model.embed_tokens.weight")->dtype, NUMLA_DTYPE_BF16);
    for (int i = 0; i < 2; i++) {
        char n[128];
#define L_(fmt) (snprintf(n, sizeof n, "model.layers.%d." fmt, i), n)
        sl_expect(m, L_("input_layernorm.weight"), d, 0, &bad);
        sl_expect_q(m, L_("self_attn.q_a_proj.weight"), 1536, d, &bad);
        sl_expect(m, L_("self_attn.q_a_layernorm.weight"), 1536, 0, &bad);
        sl_expect_q(m, L_("self_attn.q_b_proj.weight"), 24576, 1536, &bad);
        sl_expect_q(m, L_("self_attn.kv_a_proj_with_mqa.weight"), 576, d, &bad);
        sl_expect_q(m, L_("self_attn.kv_b_proj.weight"), 32768, 512, &bad);
        sl_expect_q(m, L_("self_attn.o_proj.weight"), d, 16384, &bad);
        sl_expect_q(m, L_("mlp.gate_proj.weight"), 18432, d, &bad);
        sl_expect_q(m, L_("mlp.up_proj.weight"), 18432, d, &bad);
        sl_expect_q(m, L_("mlp.down_proj.weight"), d, 18432, &bad);
        CU_ASSERT_EQUAL(numla_safetensors_find(m, L_("input_layernorm.weight"))->dtype,
                        NUMLA_DTYPE_BF16);
#undef L_
    }
    CU_ASSERT_EQUAL(bad, 0);
    /* embed, final norm, lm_head + 2 * (4 norms + 8 weights + 8 scales) */
    CU_ASSERT_EQUAL(numla_safetensors_count(m), 3 + 2 * 20);
    numla_safetensors_close(&m);
}

NUMLA_TEST_SUITE(synth_slow, NULL, NULL, NUMLA_TEST(test_v2_lite_two_layers),
                 NUMLA_TEST(test_v3_fp8_two_layers))
