/* Tests for engine/formats/gguf_deepseek2: the deepseek2 keys of the two small models the gguf
 * package wrote (tests/golden/gguf/tiny-deepseek2*.gguf: the k_b/v_b layout without q_lora and
 * with softmax gating; the kv_b layout with q_lora, sigmoid gating and the score bias) read into
 * the struct, byte-patched copies that lose a key, rename a tensor or change a width (each an
 * error naming the file and the key or tensor), and the GGUF -> HF tensor names. */
#define _GNU_SOURCE
#include "test_util.h"

#include "engine/formats/gguf_deepseek2.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *ds_golden(const char *name)
{
    static char buf[512];
    snprintf(buf, sizeof buf, "%s/%s", numla_test_source_path("tests/golden/gguf"), name);
    return buf;
}

static void test_split_layout(void)
{
    numla_gguf *g = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_gguf_open(ds_golden("tiny-deepseek2.gguf"), &g), NUMLA_STATUS_OK);
    numla_gguf_deepseek2 c;
    numla_status s = numla_gguf_deepseek2_read(g, &c);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OK, "%s", numla_error_message());
    CU_ASSERT_EQUAL(c.num_hidden_layers, 3);
    CU_ASSERT_EQUAL(c.hidden_size, 32);
    CU_ASSERT_EQUAL(c.intermediate_size, 48);
    CU_ASSERT_EQUAL(c.num_attention_heads, 5);
    CU_ASSERT_EQUAL(c.max_position_embeddings, 4096);
    CU_ASSERT(fabs(c.rms_norm_eps - 1e-6) < 1e-12);
    CU_ASSERT_EQUAL(c.q_lora_rank, 0);
    CU_ASSERT_EQUAL(c.kv_lora_rank, 16);
    CU_ASSERT_EQUAL(c.qk_nope_head_dim, 8);
    CU_ASSERT_EQUAL(c.qk_rope_head_dim, 4);
    CU_ASSERT_EQUAL(c.v_head_dim, 6);
    CU_ASSERT_EQUAL(c.vocab_size, 40);
    CU_ASSERT_EQUAL(c.n_routed_experts, 6);
    CU_ASSERT_EQUAL(c.num_experts_per_tok, 3);
    CU_ASSERT_EQUAL(c.n_shared_experts, 1);
    CU_ASSERT_EQUAL(c.moe_intermediate_size, 10);
    CU_ASSERT_EQUAL(c.first_k_dense_replace, 1);
    CU_ASSERT_EQUAL(c.n_group, 2);
    CU_ASSERT_EQUAL(c.topk_group, 1);
    CU_ASSERT_EQUAL(c.scoring_sigmoid, 0);
    CU_ASSERT_EQUAL(c.score_bias, 0);
    CU_ASSERT_EQUAL(c.norm_topk_prob, 0);
    CU_ASSERT_EQUAL(c.routed_scaling_factor, 2.5);
    CU_ASSERT_EQUAL(c.rope_theta, 10000.0);
    CU_ASSERT_EQUAL(c.rope_yarn, 1);
    CU_ASSERT_EQUAL(c.rope_factor, 40.0);
    CU_ASSERT_EQUAL(c.rope_original_max_position_embeddings, 4096);
    CU_ASSERT_EQUAL(c.rope_beta_fast, 32.0);
    CU_ASSERT_EQUAL(c.rope_beta_slow, 1.0);
    CU_ASSERT(fabs(c.rope_mscale_all_dim - 0.707) < 1e-6 && c.rope_mscale == c.rope_mscale_all_dim);
    CU_ASSERT_EQUAL(c.attn_layout, NUMLA_GGUF_MLA_SPLIT);
    CU_ASSERT_EQUAL(c.tie_word_embeddings, 0);
    CU_ASSERT_EQUAL(c.bos_token_id, 0);
    CU_ASSERT_EQUAL(c.eos_token_id, 1);
    CU_ASSERT_STRING_EQUAL(c.tokenizer_model, "gpt2");
    CU_ASSERT_STRING_EQUAL(c.tokenizer_pre, "deepseek-llm");
    numla_gguf_close(&g);
}

static void test_kvb_layout(void)
{
    numla_gguf *g = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_gguf_open(ds_golden("tiny-deepseek2-kvb.gguf"), &g), NUMLA_STATUS_OK);
    numla_gguf_deepseek2 c;
    numla_status s = numla_gguf_deepseek2_read(g, &c);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OK, "%s", numla_error_message());
    CU_ASSERT_EQUAL(c.q_lora_rank, 24);
    CU_ASSERT_EQUAL(c.qk_nope_head_dim, 8);
    CU_ASSERT_EQUAL(c.v_head_dim, 6);
    CU_ASSERT_EQUAL(c.attn_layout, NUMLA_GGUF_MLA_KV_B);
    CU_ASSERT_EQUAL(c.scoring_sigmoid, 1);
    CU_ASSERT_EQUAL(c.score_bias, 1);
    CU_ASSERT_EQUAL(c.norm_topk_prob, 1);
    CU_ASSERT_STRING_EQUAL(c.tokenizer_pre, "deepseek-v3");
    numla_gguf_close(&g);
}

/* Copy a golden file with `from` replaced by `to` (same length) at its first occurrence, or with
 * the u32 value that follows key `from` (after its u32 type) set to `value` when to is NULL. */
static const char *ds_patched(const char *golden, const char *from, const char *to, uint32_t value)
{
    FILE *f = fopen(ds_golden(golden), "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n);
    CU_ASSERT_EQUAL_FATAL(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    unsigned char *hit = memmem(b, (size_t)n, from, strlen(from));
    CU_ASSERT_PTR_NOT_NULL_FATAL(hit);
    if (to)
        memcpy(hit, to, strlen(to));
    else
        memcpy(hit + strlen(from) + 4, &value, 4);
    static char path[512];
    snprintf(path, sizeof path, "%s/ds-patched.gguf", numla_test_tmpdir());
    unlink(path);
    f = fopen(path, "wb");
    CU_ASSERT_EQUAL(fwrite(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    free(b);
    return path;
}

static void ds_expect_error(const char *path, numla_status want, const char *words)
{
    numla_gguf *g = NULL;
    numla_status s = numla_gguf_open(path, &g);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OK, "%s", numla_error_message());
    if (!g)
        return;
    numla_gguf_deepseek2 c;
    s = numla_gguf_deepseek2_read(g, &c);
    NUMLA_ASSERT_MSG(s == want, "status %d, want %d: %s", (int)s, (int)want, numla_error_message());
    NUMLA_ASSERT_MSG(strstr(numla_error_message(), words) != NULL, "'%s' not in: %s", words, numla_error_message());
    NUMLA_ASSERT_MSG(strstr(numla_error_message(), "ds-patched.gguf") != NULL, "no file in: %s", numla_error_message());
    numla_gguf_close(&g);
}

static void test_bad_files(void)
{
    ds_expect_error(ds_patched("tiny-deepseek2.gguf", "deepseek2.block_count", "deepseek2.block_counX", 0),
                    NUMLA_STATUS_FORMAT, "key 'deepseek2.block_count' is missing");
    ds_expect_error(ds_patched("tiny-deepseek2.gguf", "blk.2.attn_output.weight", "blk.2.attn_outpuX.weight", 0),
                    NUMLA_STATUS_FORMAT, "tensor 'blk.2.attn_output.weight' is missing");
    ds_expect_error(ds_patched("tiny-deepseek2.gguf", "deepseek2.embedding_length", NULL, 33), NUMLA_STATUS_FORMAT,
                    "'token_embd.weight' has ne = [32, 40, 1, 1], expected [33, 40, 1, 1]");
    ds_expect_error(ds_patched("tiny-deepseek2.gguf", "deepseek2.expert_used_count", NULL, 7), NUMLA_STATUS_FORMAT,
                    "key 'deepseek2.expert_used_count' = 7 is outside [1, 6]");
    ds_expect_error(ds_patched("tiny-deepseek2.gguf", "deepseek2.rope.dimension_count", NULL, 3), NUMLA_STATUS_FORMAT,
                    "must be even");
    ds_expect_error(ds_patched("tiny-deepseek2.gguf", "deepseek2.attention.key_length_mla", NULL, 4),
                    NUMLA_STATUS_FORMAT, "leaves no room for the non-rope part");
    ds_expect_error(ds_patched("tiny-deepseek2.gguf", "deepseek2.expert_group_count", NULL, 4), NUMLA_STATUS_FORMAT,
                    "does not divide expert_count = 6");
    ds_expect_error(ds_patched("tiny-deepseek2.gguf", "yarn", "YARN", 0), NUMLA_STATUS_UNSUPPORTED,
                    "rope.scaling.type' = 'YARN'");
    ds_expect_error(ds_patched("tiny-deepseek2-kvb.gguf", "blk.2.exp_probs_b.bias", "blk.2.exp_probs_X.bias", 0),
                    NUMLA_STATUS_FORMAT, "1 of the 2 MoE layers have exp_probs_b.bias");
    ds_expect_error(ds_patched("tiny-deepseek2.gguf", "deepseek2", "deepseek3", 0), NUMLA_STATUS_UNSUPPORTED,
                    "general.architecture is 'deepseek3'");
}

static void test_hf_names(void)
{
    static const struct {
        const char *gguf, *hf;
        int experts, part;
    } cases[] = {
        {"token_embd.weight", "model.embed_tokens.weight", 0, 0},
        {"output.weight", "lm_head.weight", 0, 0},
        {"output_norm.weight", "model.norm.weight", 0, 0},
        {"blk.0.attn_kv_a_mqa.weight", "model.layers.0.self_attn.kv_a_proj_with_mqa.weight", 0, 0},
        {"blk.12.attn_q_b.weight", "model.layers.12.self_attn.q_b_proj.weight", 0, 0},
        {"blk.3.attn_k_b.weight", "model.layers.3.self_attn.kv_b_proj.weight", 0, 1},
        {"blk.3.attn_v_b.weight", "model.layers.3.self_attn.kv_b_proj.weight", 0, 2},
        {"blk.60.ffn_down_exps.weight", "model.layers.60.mlp.experts.{E}.down_proj.weight", 1, 0},
        {"blk.1.ffn_up_shexp.weight", "model.layers.1.mlp.shared_experts.up_proj.weight", 0, 0},
        {"blk.1.exp_probs_b.bias", "model.layers.1.mlp.gate.e_score_correction_bias", 0, 0},
        {"blk.0.ffn_norm.weight", "model.layers.0.post_attention_layernorm.weight", 0, 0},
        /* the MTP layer's (gguf-py tensor_mapping.py: NEXTN_* <- model.layers.{bid}.*) */
        {"blk.61.nextn.eh_proj.weight", "model.layers.61.eh_proj.weight", 0, 0},
        {"blk.61.nextn.enorm.weight", "model.layers.61.enorm.weight", 0, 0},
        {"blk.61.nextn.hnorm.weight", "model.layers.61.hnorm.weight", 0, 0},
        {"blk.61.nextn.shared_head_norm.weight", "model.layers.61.shared_head.norm.weight", 0, 0},
        {"blk.61.nextn.shared_head_head.weight", "model.layers.61.shared_head.head.weight", 0, 0},
        {"blk.61.nextn.embed_tokens.weight", "model.layers.61.embed_tokens.weight", 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        numla_gguf_hf_name h;
        CU_ASSERT_EQUAL(numla_gguf_deepseek2_hf_name(cases[i].gguf, &h), NUMLA_STATUS_OK);
        CU_ASSERT_STRING_EQUAL(h.hf, cases[i].hf);
        CU_ASSERT_EQUAL(h.stacked_experts, cases[i].experts);
        CU_ASSERT_EQUAL(h.kv_b_part, cases[i].part);
    }
    numla_gguf_hf_name h;
    CU_ASSERT_EQUAL(numla_gguf_deepseek2_hf_name("blk.x.attn_q.weight", &h), NUMLA_STATUS_UNSUPPORTED);
    CU_ASSERT_EQUAL(numla_gguf_deepseek2_hf_name("blk.0.attn_qq.weight", &h), NUMLA_STATUS_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "'blk.0.attn_qq.weight'"));
    /* every tensor of both golden models has a name */
    const char *files[] = {"tiny-deepseek2.gguf", "tiny-deepseek2-kvb.gguf"};
    for (int f = 0; f < 2; f++) {
        numla_gguf *g = NULL;
        CU_ASSERT_EQUAL_FATAL(numla_gguf_open(ds_golden(files[f]), &g), NUMLA_STATUS_OK);
        for (int64_t i = 0; i < numla_gguf_tensor_count(g); i++) {
            const char *name = numla_gguf_tensor_at(g, i)->name;
            const numla_status st = numla_gguf_deepseek2_hf_name(name, &h);
            NUMLA_ASSERT_MSG(st == NUMLA_STATUS_OK, "%s", name);
        }
        numla_gguf_close(&g);
    }
}

numla_status numla_fuzz_gguf_run(const uint8_t *data, size_t size);

/* The GGUF fuzz target's deepseek2 checks over seeded mutations of its nextn seed
 * (tests/fuzz/corpus/gguf/deepseek2-nextn.gguf: one decoder layer, one MTP block): bit flips,
 * byte overwrites with small counts and type codes, truncations, most in the keys and the
 * tensor table. A crash or a wrong status aborts inside the target. */
static void test_nextn_fuzz_mutations(void)
{
    size_t n0 = 0;
    unsigned char *seed = (unsigned char *)numla_test_read_file(
        numla_test_source_path("tests/fuzz/corpus/gguf/deepseek2-nextn.gguf"), &n0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(seed);
    CU_ASSERT_EQUAL_FATAL(numla_fuzz_gguf_run(seed, n0), NUMLA_STATUS_OK);
    static const unsigned char values[] = {0, 1, 2, 3, 4, 5, 8, 16, 0x7f, 0x80, 0xff};
    unsigned char *buf = malloc(n0);
    numla_test_rng rng = {4343};
    int ok = 0, bad = 0;
    for (int it = 0; it < 600; it++) {
        size_t n = n0;
        memcpy(buf, seed, n0);
        for (int k = 0; k < 1 + (int)(numla_test_rng_u64(&rng) % 2); k++) {
            const uint64_t r = numla_test_rng_u64(&rng);
            const size_t pos = (size_t)((r >> 8) % (n < 4096 ? n : 4096));
            if (r % 8 == 0)
                n = pos;
            else if (r % 8 < 4)
                buf[pos] ^= (unsigned char)(1u << ((r >> 40) & 7));
            else
                buf[pos] = values[(r >> 48) % sizeof values];
        }
        const numla_status st = numla_fuzz_gguf_run(buf, n);
        ok += st == NUMLA_STATUS_OK;
        bad += st == NUMLA_STATUS_FORMAT || st == NUMLA_STATUS_UNSUPPORTED;
    }
    NUMLA_ASSERT_MSG(ok > 30 && bad > 100, "ok %d, refused %d", ok, bad);
    free(buf);
    free(seed);
}

/* llama.cpp's layout of a model that keeps its MTP layer (tests/golden/mtp/v3_gguf):
 * block_count 4 with nextn_predict_layers 1 is 3 decoder layers, then the MTP block; a count
 * that leaves no decoder layer is refused; a file without the key has none. */
static void test_nextn(void)
{
    const char *mtp = "../mtp/v3_gguf/model.gguf";
    numla_gguf *g = NULL;
    numla_gguf_deepseek2 c;
    CU_ASSERT_EQUAL_FATAL(numla_gguf_open(ds_golden(mtp), &g), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_gguf_deepseek2_read(g, &c), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(c.num_hidden_layers, 3);
    CU_ASSERT_EQUAL(c.nextn_predict_layers, 1);
    numla_gguf_close(&g);
    CU_ASSERT_EQUAL_FATAL(numla_gguf_open(ds_golden("tiny-deepseek2.gguf"), &g), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_gguf_deepseek2_read(g, &c), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(c.nextn_predict_layers, 0);
    numla_gguf_close(&g);
    CU_ASSERT_EQUAL_FATAL(numla_gguf_open(numla_test_source_path(
                              "tests/fuzz/corpus/gguf/deepseek2-nextn.gguf"), &g), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_gguf_deepseek2_read(g, &c), NUMLA_STATUS_OK);
    CU_ASSERT(c.num_hidden_layers == 1 && c.nextn_predict_layers == 1);
    numla_gguf_close(&g);
    ds_expect_error(ds_patched(mtp, "deepseek2.nextn_predict_layers", NULL, 4), NUMLA_STATUS_FORMAT,
                    "key 'deepseek2.nextn_predict_layers' = 4 is outside [0, 3]");
}

NUMLA_TEST_SUITE(gguf_deepseek2, NULL, NULL, NUMLA_TEST(test_nextn),
                 NUMLA_TEST(test_nextn_fuzz_mutations), NUMLA_TEST(test_split_layout), NUMLA_TEST(test_kvb_layout),
                 NUMLA_TEST(test_bad_files), NUMLA_TEST(test_hf_names))
