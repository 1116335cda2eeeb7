/* Tests for bench/bench_model_costs.c: per-token weight bytes, FLOPs and KV bytes of the tiny
 * preset (engine/synth/synth.c "tiny": V 512, hidden 64, I 192, moe_I 32, 3 layers (layer 0 dense),
 * 6 heads, 1 shared + 10 routed experts, k 3, Dc 64, Dr 16, nope 32, v 32, no q_lora) against
 * numbers worked out by hand below. The packed layout pads N to panels of 16 rows (and K to
 * even for bf16), which the vocab-500 case exercises. */
#include "test_util.h"

#include "bench/bench_model.h"
#include "engine/model/weights.h"
#include "engine/synth/synth.h"

#include <stdio.h>

static numla_model_config tiny(void)
{
    numla_model_config c = {0};
    c.vocab_size = 512;
    c.hidden_size = 64;
    c.num_hidden_layers = 3;
    c.num_attention_heads = 6;
    c.intermediate_size = 192;
    c.q_lora_rank = 0;
    c.kv_lora_rank = 64;
    c.qk_nope_head_dim = 32;
    c.qk_rope_head_dim = 16;
    c.v_head_dim = 32;
    c.q_head_dim = 48;
    c.n_routed_experts = 10;
    c.n_shared_experts = 1;
    c.num_experts_per_tok = 3;
    c.moe_intermediate_size = 32;
    c.first_k_dense_replace = 1;
    c.moe_layer_freq = 1;
    c.n_group = 1;
    c.topk_group = 1;
    return c;
}

/* Per layer, bf16 (2 bytes per element, every N a multiple of 16 so no padding):
 *   q_proj 288x64 = 36864 B, kv_a 80x64 = 10240, uk_t 6 x 64x32 = 24576, uv 6 x 32x64 = 24576,
 *   o_proj 64x192 = 24576  -> attention 120832 B per layer, 362496 for 3 layers;
 *   layer 0 dense: 3 x 192x64 x 2 = 73728;
 *   layers 1, 2: router 10x64 fp32 = 2560, 3 experts x 3 x 32x64 x 2 = 36864, shared 12288
 *   -> 51712 each, 103424;
 *   lm_head 512x64 x 2 = 65536 + one bf16 embedding row 128 = 65664.
 * Total 605312 B. FLOPs: 2 per weight element, router 2 x 10 x 64 = 1280 per MoE layer:
 *   362496 + 73728 + 2 x (1280 + 36864 + 12288) + 65536 = 602624.
 * Attention per cached row: 3 layers x 6 heads x (2 x 80 + 2 x 64) = 5184 FLOPs; KV bytes
 * per cached row: 3 x 80 x 2 = 480. */
static void test_tiny_bf16(void)
{
    numla_model_config c = tiny();
    numla_bench_model_costs k;
    CU_ASSERT_EQUAL_FATAL(numla_bench_model_costs_get(&c, NUMLA_ISA_REF, NUMLA_DTYPE_BF16,
                                                      NUMLA_DTYPE_BF16, NUMLA_DTYPE_BF16, &k),
                          NUMLA_STATUS_OK);
    CU_ASSERT_DOUBLE_EQUAL(k.attn_weight_bytes, 362496, 0.5);
    CU_ASSERT_DOUBLE_EQUAL(k.mlp_weight_bytes, 73728 + 103424, 0.5);
    CU_ASSERT_DOUBLE_EQUAL(k.lm_head_bytes, 65664, 0.5);
    CU_ASSERT_DOUBLE_EQUAL(k.weight_bytes, 605312, 0.5);
    CU_ASSERT_DOUBLE_EQUAL(k.linear_flops, 602624, 0.5);
    CU_ASSERT_DOUBLE_EQUAL(k.attn_flops_per_ctx, 5184, 0.5);
    CU_ASSERT_DOUBLE_EQUAL(k.kv_bytes_per_ctx, 480, 0.5);
}

/* f32 weights and embedding, f32 KV: every packed byte count doubles except the (already fp32)
 * router: attention 724992, dense 147456, MoE 2 x (2560 + 73728 + 24576), lm_head 131072 +
 * embedding row 256 -> 1205504. FLOPs do not change; KV per row 960. */
static void test_tiny_f32(void)
{
    numla_model_config c = tiny();
    numla_bench_model_costs k;
    CU_ASSERT_EQUAL_FATAL(numla_bench_model_costs_get(&c, NUMLA_ISA_REF, NUMLA_DTYPE_F32,
                                                      NUMLA_DTYPE_F32, NUMLA_DTYPE_F32, &k),
                          NUMLA_STATUS_OK);
    CU_ASSERT_DOUBLE_EQUAL(k.weight_bytes, 1205504, 0.5);
    CU_ASSERT_DOUBLE_EQUAL(k.linear_flops, 602624, 0.5);
    CU_ASSERT_DOUBLE_EQUAL(k.kv_bytes_per_ctx, 960, 0.5);
}

/* Vocab 500: the lm_head packs 32 panels of 16 rows (512 rows, 65536 B) but does 2 x 500 x 64
 * FLOPs; and one layer fewer (a dense + one MoE layer). */
static void test_padding_and_layers(void)
{
    numla_model_config c = tiny();
    c.vocab_size = 500;
    c.num_hidden_layers = 2;
    numla_bench_model_costs k;
    CU_ASSERT_EQUAL_FATAL(numla_bench_model_costs_get(&c, NUMLA_ISA_REF, NUMLA_DTYPE_BF16,
                                                      NUMLA_DTYPE_BF16, NUMLA_DTYPE_BF16, &k),
                          NUMLA_STATUS_OK);
    CU_ASSERT_DOUBLE_EQUAL(k.lm_head_bytes, 65536 + 128, 0.5);
    CU_ASSERT_DOUBLE_EQUAL(k.weight_bytes, 2 * 120832 + 73728 + 51712 + 65664, 0.5);
    CU_ASSERT_DOUBLE_EQUAL(k.linear_flops,
                           2 * 120832 + 73728 + (1280 + 36864 + 12288) + 64000, 0.5);
    CU_ASSERT_DOUBLE_EQUAL(k.attn_flops_per_ctx, 2 * 6 * 288, 0.5);
}

/* 8-bit projections: attention bytes per layer as the loader keeps them (engine/model/weights.h).
 * fp8 (1 byte per weight + 4 per 128 x 128 block), nope 32: W_UK stays fp32 (its rows cut a
 * scale block), W_UV is a per-head fp8 row slice inside one block row:
 *   q_proj 288x64 18432 + 3 blocks 12 = 18444, kv_a 80x64 5120 + 4 = 5124,
 *   uk_t 6 x 64x32x4 = 49152, uv 6 x (32x64 + 4) = 12312, o_proj 64x192 12288 + 8 = 12296
 *   -> 97328 per layer, 291984 for 3.
 * int8 (1 byte + an fp32 scale and an int32 row sum per row): W_UK is 8-bit with unit row
 * scales plus its nope input scales:
 *   q_proj 18432 + 2304 = 20736, kv_a 5120 + 640 = 5760, uk_t 6 x (2048 + 512 + 128) = 16128,
 *   uv 6 x (2048 + 256) = 13824, o_proj 12288 + 512 = 12800 -> 69248 per layer, 207744.
 * fp8 with nope = v = 128 (q_head_dim 144): W_UK 8-bit, one block per head:
 *   q_proj 864x64 55296 + 7 blocks 28 = 55324, kv_a 5124, uk_t 6 x (64x128 + 4) = 49176,
 *   uv 6 x (128x64 + 4) = 49176, o_proj 64x768 49152 + 6 blocks 24 = 49176
 *   -> 207976 per layer, 623928. */
static void test_tiny_8bit_attention(void)
{
    numla_model_config c = tiny();
    numla_bench_model_costs k;
    CU_ASSERT_EQUAL_FATAL(numla_bench_model_costs_get_q(&c, NUMLA_ISA_REF, NUMLA_DTYPE_BF16,
                                                        NUMLA_WEIGHT_FORMAT_FP8, 0,
                                                        NUMLA_DTYPE_BF16, NUMLA_DTYPE_BF16, &k),
                          NUMLA_STATUS_OK);
    CU_ASSERT_DOUBLE_EQUAL(k.attn_weight_bytes, 291984, 0.5);
    CU_ASSERT_EQUAL_FATAL(numla_bench_model_costs_get_q(&c, NUMLA_ISA_REF, NUMLA_DTYPE_BF16,
                                                        NUMLA_WEIGHT_FORMAT_INT8, 0,
                                                        NUMLA_DTYPE_BF16, NUMLA_DTYPE_BF16, &k),
                          NUMLA_STATUS_OK);
    CU_ASSERT_DOUBLE_EQUAL(k.attn_weight_bytes, 207744, 0.5);
    c.qk_nope_head_dim = 128;
    c.v_head_dim = 128;
    c.q_head_dim = 144;
    CU_ASSERT_EQUAL_FATAL(numla_bench_model_costs_get_q(&c, NUMLA_ISA_REF, NUMLA_DTYPE_BF16,
                                                        NUMLA_WEIGHT_FORMAT_FP8, 0,
                                                        NUMLA_DTYPE_BF16, NUMLA_DTYPE_BF16, &k),
                          NUMLA_STATUS_OK);
    CU_ASSERT_DOUBLE_EQUAL(k.attn_weight_bytes, 623928, 0.5);
}

/* numla_bench_model_costs_loaded on the tiny preset as loaded: bf16 gives the hand count above
 * (605312 B; every tensor is bf16 but the fp32 router); --weights q4_0 (32-value blocks of 18
 * bytes; hidden 64 = 2 blocks a row, 192 = 6, 32 = 1) reads
 *   q_proj 288 x 36 = 10368, kv_a 80 x 36 = 2880, o_proj 64 x 6 x 18 = 6912 a layer, uk_t and
 *   uv as the checkpoint's bf16 (kv_b_proj is not quantized at load: 6 x 2 x 2048 x 2 = 49152)
 *   -> 69312 a layer, 207936 attention;
 *   layer 0 dense 2 x 192 x 36 + 64 x 6 x 18 = 20736; layers 1, 2: router 2560, 3 experts x
 *   (2 x 32 x 36 + 64 x 18) = 10368, shared 3456 -> 16384 each;
 *   lm_head 512 x 36 = 18432 + one bf16 embedding row 128 = 18560.
 * The config-based count (numla_bench_model_costs_get_q) cannot see such a mix. */
static void test_loaded_weights(void)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/acct_tiny", numla_test_tmpdir());
    numla_synth_options o = {.preset = "tiny", .out_dir = dir, .seed = 3, .dtype = NUMLA_DTYPE_BF16};
    CU_ASSERT_EQUAL_FATAL(numla_synth_write(&o, NULL), NUMLA_STATUS_OK);
    numla_model_config c;
    CU_ASSERT_EQUAL_FATAL(numla_model_config_load(dir, &c), NUMLA_STATUS_OK);
    for (int q4 = 0; q4 <= 1; q4++) {
        numla_weights_options wo = numla_weights_options_default();
        if (q4)
            CU_ASSERT_FATAL(numla_weights_format_parse("q4_0", &wo));
        numla_model_weights *w = NULL;
        CU_ASSERT_EQUAL_FATAL(numla_weights_load_path(&c, dir, 0, 1, NUMLA_ISA_REF, &wo, &w),
                              NUMLA_STATUS_OK);
        numla_bench_model_costs k;
        CU_ASSERT_EQUAL_FATAL(numla_bench_model_costs_loaded(w, NUMLA_DTYPE_BF16, &k),
                              NUMLA_STATUS_OK);
        NUMLA_ASSERT_MSG(fabs(k.weight_bytes - (q4 ? 207936 + 20736 + 2 * 16384 + 18560 : 605312))
                             < 0.5,
                         "%s: %.0f bytes (attention %.0f, mlp %.0f, lm_head %.0f)",
                         q4 ? "q4_0" : "bf16", k.weight_bytes, k.attn_weight_bytes,
                         k.mlp_weight_bytes, k.lm_head_bytes);
        CU_ASSERT_DOUBLE_EQUAL(k.kv_bytes_per_ctx, 480, 0.5);
        numla_weights_destroy(&w);
    }
}

/* Sparse attention (DSA): tiny with a q latent of 48 and an indexer of 16 heads x 32 in layers 0
 * and 2 ("shared" layer 1). Against the same config without DSA, each full layer adds the bf16
 * wq_b 512x48 + wk 32x64 + weights_proj 16x64 = 27648 elements (55296 B; N multiples of 16, no
 * padding), 2 x 55296 = 110592 B and 2 x 27648 x 2 = 110592 FLOPs; per cached row the indexers
 * score 2 x (2 x 16 x 32) = 2048 FLOPs on 2 x 32 x 2 = 128 key bytes, and the MLA reads at most
 * index_topk 16 rows. */
static void test_tiny_dsa(void)
{
    numla_model_config c = tiny();
    c.q_lora_rank = 48;
    numla_bench_model_costs d, k;
    CU_ASSERT_EQUAL_FATAL(numla_bench_model_costs_get(&c, NUMLA_ISA_REF, NUMLA_DTYPE_BF16,
                                                      NUMLA_DTYPE_BF16, NUMLA_DTYPE_BF16, &d),
                          NUMLA_STATUS_OK);
    CU_ASSERT(d.index_topk == 0 && d.index_flops_per_ctx == 0 && d.index_bytes_per_ctx == 0);
    c.dsa.enabled = 1;
    c.dsa.num_layers = 3;
    c.dsa.index_n_heads = 16;
    c.dsa.index_head_dim = 32;
    c.dsa.index_topk = 16;
    c.dsa.indexer_full[0] = c.dsa.indexer_full[2] = 1;
    c.dsa.mlp_moe[1] = c.dsa.mlp_moe[2] = 1; /* as first_k_dense_replace 1 */
    CU_ASSERT_EQUAL_FATAL(numla_bench_model_costs_get(&c, NUMLA_ISA_REF, NUMLA_DTYPE_BF16,
                                                      NUMLA_DTYPE_BF16, NUMLA_DTYPE_BF16, &k),
                          NUMLA_STATUS_OK);
    CU_ASSERT_DOUBLE_EQUAL(k.attn_weight_bytes - d.attn_weight_bytes, 110592, 0.5);
    CU_ASSERT_DOUBLE_EQUAL(k.mlp_weight_bytes, d.mlp_weight_bytes, 0.5);
    CU_ASSERT_DOUBLE_EQUAL(k.linear_flops - d.linear_flops, 110592, 0.5);
    CU_ASSERT_DOUBLE_EQUAL(k.attn_flops_per_ctx, d.attn_flops_per_ctx, 0.5);
    CU_ASSERT_DOUBLE_EQUAL(k.index_flops_per_ctx, 2048, 0.5);
    CU_ASSERT_DOUBLE_EQUAL(k.index_bytes_per_ctx, 128, 0.5);
    CU_ASSERT_EQUAL(k.index_topk, 16);
}

NUMLA_TEST_SUITE(bench_model_accounting, NULL, NULL, NUMLA_TEST(test_tiny_bf16),
                 NUMLA_TEST(test_tiny_f32), NUMLA_TEST(test_padding_and_layers),
                 NUMLA_TEST(test_tiny_8bit_attention), NUMLA_TEST(test_loaded_weights),
                 NUMLA_TEST(test_tiny_dsa))
