/* Tests for engine/formats/gguf_deepseek4: the deepseek4 keys of tests/golden/v4/model_fp8.gguf
 * (llama.cpp's converter's output for tests/golden/v4/model_fp8) and of the fuzz seed
 * tests/fuzz/corpus/gguf/deepseek4-tiny.gguf (every tensor type the converter writes, 3 layers)
 * read into the struct; the view under DeepSeek's names; byte-patched copies that lose a key,
 * rename a tensor, change a width or a value numla refuses (each an error naming the file and
 * the key or tensor); and the gguf fuzz target over seeded mutations of the deepseek4 seed. */
#define _GNU_SOURCE
#include "test_util.h"

#include "engine/formats/gguf_deepseek4.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

numla_status numla_fuzz_gguf_run(const uint8_t *data, size_t size);

static const char *d4_path(const char *rel)
{
    static char buf[512];
    snprintf(buf, sizeof buf, "%s", numla_test_source_path(rel));
    return buf;
}
#define SEED "tests/fuzz/corpus/gguf/deepseek4-tiny.gguf"
#define GOLDEN "tests/golden/v4/model_fp8.gguf"

static void test_golden_keys(void)
{
    numla_gguf *g = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_gguf_open(d4_path(GOLDEN), &g), NUMLA_STATUS_OK);
    CU_ASSERT_TRUE(numla_gguf_is_deepseek4(g));
    numla_gguf_deepseek4 d;
    numla_status s = numla_gguf_deepseek4_read(g, &d);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OK, "%s", numla_error_message());
    /* tests/golden/v4/model_fp8/config.json */
    CU_ASSERT_EQUAL(d.vocab_size, 96);
    CU_ASSERT_EQUAL(d.hidden_size, 64);
    CU_ASSERT_EQUAL(d.num_hidden_layers, 4);
    CU_ASSERT_EQUAL(d.max_position_embeddings, 1048576);
    CU_ASSERT_EQUAL(d.num_attention_heads, 8);
    CU_ASSERT_EQUAL(d.head_dim, 64);
    CU_ASSERT_EQUAL(d.qk_rope_head_dim, 16);
    CU_ASSERT_EQUAL(d.q_lora_rank, 32);
    CU_ASSERT_EQUAL(d.o_groups, 4);
    CU_ASSERT_EQUAL(d.o_lora_rank, 16);
    CU_ASSERT_EQUAL(d.sliding_window, 128);
    CU_ASSERT(fabs(d.rms_norm_eps - 1e-6) < 1e-12);
    const int32_t ratios[4] = {0, 4, 128, 4};
    CU_ASSERT_EQUAL(memcmp(d.compress_ratios, ratios, sizeof ratios), 0);
    CU_ASSERT_EQUAL(d.hca_rate, 128);
    CU_ASSERT_EQUAL(d.compress_rope_theta, 160000.0);
    CU_ASSERT_EQUAL(d.rope_theta, 10000.0);
    CU_ASSERT_EQUAL(d.index_n_heads, 16);
    CU_ASSERT_EQUAL(d.index_head_dim, 32);
    CU_ASSERT_EQUAL(d.index_topk, 8);
    CU_ASSERT_EQUAL(d.rope_yarn, 1);
    CU_ASSERT_EQUAL(d.rope_factor, 16.0);
    CU_ASSERT_EQUAL(d.rope_original_max_position_embeddings, 65536);
    CU_ASSERT_EQUAL(d.rope_beta_fast, 32.0);
    CU_ASSERT_EQUAL(d.rope_beta_slow, 1.0);
    CU_ASSERT_EQUAL(d.n_routed_experts, 8);
    CU_ASSERT_EQUAL(d.num_experts_per_tok, 2);
    CU_ASSERT_EQUAL(d.n_shared_experts, 1);
    CU_ASSERT_EQUAL(d.moe_intermediate_size, 32);
    CU_ASSERT_EQUAL(d.routed_scaling_factor, 1.5);
    CU_ASSERT_EQUAL(d.norm_topk_prob, 1);
    CU_ASSERT_EQUAL(d.swiglu_limit, 3.0);
    CU_ASSERT_EQUAL(d.hc_mult, 4);
    CU_ASSERT_EQUAL(d.hc_sinkhorn_iters, 20);
    CU_ASSERT(fabs(d.hc_eps - 1e-6) < 1e-12);
    CU_ASSERT_EQUAL(d.num_hash_layers, 2);
    CU_ASSERT_EQUAL(d.tie_word_embeddings, 0);
    CU_ASSERT_EQUAL(d.bos_token_id, 0);
    CU_ASSERT_EQUAL(d.eos_token_id, 1);
    numla_gguf_close(&g);
}

/* The view: DeepSeek's names, PyTorch's shapes, each expert a slice of the stacked tensor. */
static void test_view(void)
{
    numla_gguf *g = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_gguf_open(d4_path(SEED), &g), NUMLA_STATUS_OK);
    numla_gguf_deepseek4 d;
    numla_status s = numla_gguf_deepseek4_read(g, &d);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OK, "%s", numla_error_message());
    CU_ASSERT_EQUAL(d.hca_rate, 8);
    CU_ASSERT_EQUAL(d.num_hash_layers, 1);
    numla_safetensors_model *v = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_gguf_deepseek4_view(g, &v), NUMLA_STATUS_OK);
    static const struct {
        const char *name;
        numla_dtype dt;
        uint32_t ggml;
        int32_t nd;
        int64_t s0, s1;
        const char *gguf;
    } cases[] = {
        {"embed.weight", NUMLA_DTYPE_F16, 0, 2, 8, 32, "token_embd.weight"},
        {"head.weight", NUMLA_DTYPE_F16, 0, 2, 8, 32, "output.weight"},
        {"hc_head_fn", NUMLA_DTYPE_F32, 0, 2, 2, 64, "output_hc_fn.weight"},
        {"hc_head_scale", NUMLA_DTYPE_F32, 0, 1, 1, 0, "output_hc_scale.weight"},
        {"layers.0.hc_attn_fn", NUMLA_DTYPE_F32, 0, 2, 8, 64, "blk.0.hc_attn_fn.weight"},
        {"layers.1.attn.wq_b.weight", NUMLA_DTYPE_END, NUMLA_GGML_Q8_0, 2, 64, 32,
         "blk.1.attn_q_b.weight"},
        {"layers.1.attn.kv_norm.weight", NUMLA_DTYPE_F32, 0, 1, 32, 0, "blk.1.attn_kv_a_norm.weight"},
        {"layers.2.attn.attn_sink", NUMLA_DTYPE_F32, 0, 1, 2, 0, "blk.2.attn_sinks.weight"},
        {"layers.1.attn.compressor.ape", NUMLA_DTYPE_F32, 0, 2, 4, 64,
         "blk.1.attn_compressor_ape.weight"},
        {"layers.2.attn.compressor.ape", NUMLA_DTYPE_F32, 0, 2, 8, 32,
         "blk.2.attn_compressor_ape.weight"},
        {"layers.1.attn.indexer.weights_proj.weight", NUMLA_DTYPE_F16, 0, 2, 2, 32,
         "blk.1.indexer.proj.weight"},
        {"layers.0.ffn.gate.tid2eid", NUMLA_DTYPE_I32, 0, 2, 8, 1, "blk.0.ffn_gate_tid2eid.weight"},
        {"layers.1.ffn.gate.bias", NUMLA_DTYPE_F32, 0, 1, 2, 0, "blk.1.exp_probs_b.bias"},
        {"layers.2.ffn.shared_experts.w2.weight", NUMLA_DTYPE_F16, 0, 2, 32, 32,
         "blk.2.ffn_down_shexp.weight"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const numla_safetensors_tensor *t = numla_safetensors_find(v, cases[i].name);
        NUMLA_ASSERT_MSG(t != NULL, "no %s", cases[i].name);
        if (!t)
            continue;
        const numla_gguf_tensor *src = numla_gguf_tensor_find(g, cases[i].gguf);
        CU_ASSERT_PTR_NOT_NULL_FATAL(src);
        NUMLA_ASSERT_MSG(t->dtype == cases[i].dt && t->ggml_type == cases[i].ggml &&
                         t->ndim == cases[i].nd && t->shape[0] == cases[i].s0 &&
                         (t->ndim == 1 || t->shape[1] == cases[i].s1) && t->data == src->data &&
                         t->nbytes == src->nbytes,
                         "%s: dtype %d ggml %u shape (%lld, %lld) nbytes %zu", cases[i].name,
                         (int)t->dtype, t->ggml_type, (long long)t->shape[0],
                         (long long)t->shape[1], t->nbytes);
    }
    /* expert 1 of the stacked MXFP4 tensor {32, 32, 2}: its 32 rows of 17 bytes, after
     * expert 0's */
    const numla_gguf_tensor *up = numla_gguf_tensor_find(g, "blk.2.ffn_up_exps.weight");
    const numla_safetensors_tensor *e1 = numla_safetensors_find(v, "layers.2.ffn.experts.1.w3.weight");
    CU_ASSERT_PTR_NOT_NULL_FATAL(up);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e1);
    CU_ASSERT_EQUAL(e1->ggml_type, NUMLA_GGML_MXFP4);
    CU_ASSERT_EQUAL(e1->shape[0], 32);
    CU_ASSERT_EQUAL(e1->shape[1], 32);
    CU_ASSERT_EQUAL(e1->nbytes, 32 * 17);
    CU_ASSERT_PTR_EQUAL(e1->data, (const char *)up->data + 32 * 17);
    CU_ASSERT_PTR_NULL(numla_safetensors_find(v, "layers.2.ffn.experts.2.w3.weight"));
    CU_ASSERT_PTR_NULL(numla_safetensors_find(v, "layers.0.attn.compressor.ape"));
    numla_safetensors_close(&v);
    numla_gguf_close(&g);
}

/* A copy of the seed with `from` replaced by `to` (same length) at its first occurrence, or the
 * u32 value after key `from` (past its u32 type) set to `value` when to is NULL. */
static const char *d4_patched_after(const char *anchor, const char *from, const char *to,
                                    uint32_t value)
{
    size_t n = 0;
    unsigned char *b = (unsigned char *)numla_test_read_file(d4_path(SEED), &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    unsigned char *at = anchor ? memmem(b, n, anchor, strlen(anchor)) : b;
    CU_ASSERT_PTR_NOT_NULL_FATAL(at);
    unsigned char *hit = memmem(at, n - (size_t)(at - b), from, strlen(from));
    CU_ASSERT_PTR_NOT_NULL_FATAL(hit);
    if (to)
        memcpy(hit, to, strlen(to));
    else
        memcpy(hit + strlen(from) + 4, &value, 4);
    static char path[512];
    snprintf(path, sizeof path, "%s/d4-patched.gguf", numla_test_tmpdir());
    unlink(path);
    FILE *f = fopen(path, "wb");
    CU_ASSERT_EQUAL(fwrite(b, 1, n, f), n);
    fclose(f);
    free(b);
    return path;
}

static const char *d4_patched(const char *from, const char *to, uint32_t value)
{
    return d4_patched_after(NULL, from, to, value);
}

static void d4_expect_error(const char *path, numla_status want, const char *words)
{
    numla_gguf *g = NULL;
    numla_status s = numla_gguf_open(path, &g);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OK, "%s", numla_error_message());
    if (!g)
        return;
    numla_gguf_deepseek4 d;
    s = numla_gguf_deepseek4_read(g, &d);
    NUMLA_ASSERT_MSG(s == want, "status %d, want %d: %s", (int)s, (int)want, numla_error_message());
    NUMLA_ASSERT_MSG(strstr(numla_error_message(), words) != NULL, "'%s' not in: %s", words,
                     numla_error_message());
    NUMLA_ASSERT_MSG(strstr(numla_error_message(), "d4-patched.gguf") != NULL, "no file in: %s",
                     numla_error_message());
    numla_gguf_close(&g);
}

static void test_bad_files(void)
{
    d4_expect_error(d4_patched("deepseek4.block_count", "deepseek4.block_counX", 0),
                    NUMLA_STATUS_FORMAT, "key 'deepseek4.block_count' is missing");
    d4_expect_error(d4_patched("deepseek4.attention.output_lora_rank",
                               "deepseek4.attention.output_lora_ranX", 0),
                    NUMLA_STATUS_FORMAT, "key 'deepseek4.attention.output_lora_rank' is missing");
    d4_expect_error(d4_patched("blk.2.attn_kv.weight", "blk.2.attn_kX.weight", 0),
                    NUMLA_STATUS_FORMAT, "tensor 'blk.2.attn_kv.weight' is missing");
    d4_expect_error(d4_patched("blk.1.indexer.proj.weight", "blk.1.indexer.proX.weight", 0),
                    NUMLA_STATUS_FORMAT, "tensor 'blk.1.indexer.proj.weight' is missing");
    d4_expect_error(d4_patched("blk.0.ffn_gate_tid2eid", "blk.0.ffn_gate_tid2eiX", 0),
                    NUMLA_STATUS_FORMAT, "tensor 'blk.0.ffn_gate_tid2eid.weight' is missing");
    d4_expect_error(d4_patched("deepseek4.embedding_length", NULL, 64), NUMLA_STATUS_FORMAT,
                    "'token_embd.weight' has ne = [32, 8, 1, 1], expected [64, 8, 1, 1]");
    d4_expect_error(d4_patched("deepseek4.expert_feed_forward_length", NULL, 64),
                    NUMLA_STATUS_FORMAT, "'blk.0.ffn_gate_exps.weight' has ne = [32, 32, 2, 1], "
                    "expected [32, 64, 2, 1]");
    d4_expect_error(d4_patched("deepseek4.attention.head_count_kv", NULL, 2), NUMLA_STATUS_FORMAT,
                    "head_count_kv' = 2, expected 1");
    d4_expect_error(d4_patched("deepseek4.expert_gating_func", NULL, 2), NUMLA_STATUS_UNSUPPORTED,
                    "expert_gating_func' = 2");
    d4_expect_error(d4_patched("deepseek4.expert_used_count", NULL, 3), NUMLA_STATUS_FORMAT,
                    "key 'deepseek4.expert_used_count' = 3 is outside [1, 2]");
    d4_expect_error(d4_patched("deepseek4.attention.output_group_count", NULL, 3),
                    NUMLA_STATUS_FORMAT, "output_group_count' = 3 does not divide head_count");
    d4_expect_error(d4_patched_after("deepseek4.rope.scaling.type", "yarn", "YARN", 0),
                    NUMLA_STATUS_UNSUPPORTED,
                    "rope.scaling.type' = 'YARN'");
    d4_expect_error(d4_patched("deepseek4", "deepseek5", 0), NUMLA_STATUS_UNSUPPORTED,
                    "architecture 'deepseek5' is not deepseek4");
    /* the block count past the compress_ratios array */
    d4_expect_error(d4_patched("deepseek4.block_count", NULL, 4), NUMLA_STATUS_FORMAT,
                    "compress_ratios' has 3 entries, block_count is 4");
}

/* The gguf fuzz target's deepseek4 path over seeded mutations of the seed (most of them in its
 * header and tables, where parsing happens). */
static void test_fuzz_mutations(void)
{
    size_t n0 = 0;
    unsigned char *seed = (unsigned char *)numla_test_read_file(d4_path(SEED), &n0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(seed);
    CU_ASSERT_EQUAL_FATAL(numla_fuzz_gguf_run(seed, n0), NUMLA_STATUS_OK);
    static const unsigned char values[] = {0, 1, 2, 3, 4, 8, 9, 16, 32, 64, 0x7f, 0x80, 0xff};
    unsigned char *buf = malloc(n0 + 64);
    numla_test_rng rng = {20261206};
    int counts[NUMLA_STATUS_INTERNAL + 1] = {0};
    const size_t span = n0 < 8192 ? n0 : 8192; /* the metadata and tensor table, about 7 KB */
    for (int it = 0; it < 400; it++) {
        size_t n = n0;
        memcpy(buf, seed, n0);
        uint64_t r = numla_test_rng_u64(&rng);
        size_t pos = (size_t)((r >> 8) % span);
        if (r % 3 == 0)
            buf[pos] ^= (unsigned char)(1u << ((r >> 40) & 7));
        else
            buf[pos] = values[(r >> 48) % sizeof values];
        counts[numla_fuzz_gguf_run(buf, n)]++;
    }
    NUMLA_ASSERT_MSG(counts[NUMLA_STATUS_OK] > 20 && counts[NUMLA_STATUS_FORMAT] > 20,
                     "ok %d, format %d, unsupported %d", counts[NUMLA_STATUS_OK],
                     counts[NUMLA_STATUS_FORMAT], counts[NUMLA_STATUS_UNSUPPORTED]);
    free(buf);
    free(seed);
}

/* The MTP layer's own file (tests/fuzz/corpus/gguf/deepseek4-mtp.gguf: the seed model's layer
 * as llama.cpp's --mtp conversion writes it; tests/golden/v4/mtp_fp8_mtp.gguf the converter's
 * own): checked against the model's keys, shown beside the model's tensors as mtp.0.* (eh_proj
 * whole, shared_head_norm as the layer's norm, the root output_hc_* as its hyper-head, the
 * file's copy of the embedding left out); a model file as the MTP file, and an MTP file of
 * another model, refused naming the key; the fuzz target's MTP path over mutations of it. */
static void test_mtp_file(void)
{
    numla_gguf *g = NULL, *m = NULL, *other = NULL;
    char tiny[512];
    snprintf(tiny, sizeof tiny, "%s", d4_path(SEED));
    CU_ASSERT_EQUAL_FATAL(numla_gguf_open(tiny, &g), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_gguf_open(d4_path("tests/fuzz/corpus/gguf/deepseek4-mtp.gguf"),
                                          &m), NUMLA_STATUS_OK);
    numla_gguf_deepseek4 d;
    CU_ASSERT_EQUAL_FATAL(numla_gguf_deepseek4_read(g, &d), NUMLA_STATUS_OK);
    int32_t r = -1;
    numla_status s = numla_gguf_deepseek4_read_mtp(m, &d, &r);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OK && r == 0, "%s", numla_error_message());
    CU_ASSERT_EQUAL(numla_gguf_deepseek4_read_mtp(m, NULL, &r), NUMLA_STATUS_OK);
    numla_safetensors_model *v = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_gguf_deepseek4_view_mtp(g, m, &v), NUMLA_STATUS_OK);
    const numla_safetensors_tensor *t = numla_safetensors_find(v, "mtp.0.eh_proj.weight");
    CU_ASSERT(t && t->ndim == 2 && t->shape[0] == 32 && t->shape[1] == 64 &&
              t->ggml_type == NUMLA_GGML_Q8_0);
    static const char *const mtp_names[] = {
        "mtp.0.enorm.weight", "mtp.0.hnorm.weight", "mtp.0.norm.weight", "mtp.0.hc_head_fn",
        "mtp.0.hc_head_base", "mtp.0.hc_head_scale", "mtp.0.attn.wq_b.weight",
        "mtp.0.attn.kv_norm.weight", "mtp.0.hc_ffn_fn", "mtp.0.ffn.gate.bias",
        "mtp.0.ffn.experts.1.w2.weight", "mtp.0.ffn.shared_experts.w3.weight"};
    for (size_t k = 0; k < sizeof mtp_names / sizeof *mtp_names; k++) {
        t = numla_safetensors_find(v, mtp_names[k]);
        NUMLA_ASSERT_MSG(t && strstr(t->file, "deepseek4-mtp.gguf"), "%s", mtp_names[k]);
    }
    /* the model's own root and layers come from the model's file; no blk.3 as a layer */
    t = numla_safetensors_find(v, "hc_head_fn");
    CU_ASSERT(t && !strcmp(t->file, tiny));
    t = numla_safetensors_find(v, "embed.weight");
    CU_ASSERT(t && !strcmp(t->file, tiny));
    CU_ASSERT_PTR_NULL(numla_safetensors_find(v, "layers.3.attn.wq_b.weight"));
    CU_ASSERT_PTR_NULL(numla_safetensors_find(v, "mtp.0.attn.compressor.ape"));
    numla_safetensors_close(&v);
    /* the model's file given as the MTP file */
    CU_ASSERT_EQUAL(numla_gguf_deepseek4_read_mtp(g, &d, &r), NUMLA_STATUS_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "nextn_predict_layers' is 0"));
    /* another model's MTP file: the golden's layer (block_count 5) against the seed (3 + 1) */
    CU_ASSERT_EQUAL_FATAL(numla_gguf_open(d4_path("tests/golden/v4/mtp_fp8_mtp.gguf"), &other),
                          NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_gguf_deepseek4_read_mtp(other, &d, &r), NUMLA_STATUS_FORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "block_count' = 5, the model's 3 "
                                                         "layers and its MTP layer are 4"));
    numla_gguf_deepseek4 d5 = d;
    d5.num_hidden_layers = 4;
    CU_ASSERT_EQUAL(numla_gguf_deepseek4_read_mtp(other, &d5, &r), NUMLA_STATUS_FORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "embedding_length' = 64, the model's "
                                                         "is 32"));
    numla_gguf_close(&other);
    numla_gguf_close(&m);
    numla_gguf_close(&g);

    size_t n0 = 0;
    unsigned char *seed = (unsigned char *)numla_test_read_file(
        d4_path("tests/fuzz/corpus/gguf/deepseek4-mtp.gguf"), &n0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(seed);
    CU_ASSERT_EQUAL_FATAL(numla_fuzz_gguf_run(seed, n0), NUMLA_STATUS_OK);
    unsigned char *buf = malloc(n0);
    numla_test_rng rng = {20261207};
    int counts[NUMLA_STATUS_INTERNAL + 1] = {0};
    const size_t span = n0 < 4096 ? n0 : 4096;
    for (int it = 0; it < 300; it++) {
        memcpy(buf, seed, n0);
        uint64_t x = numla_test_rng_u64(&rng);
        buf[(x >> 8) % span] ^= (unsigned char)(1u << ((x >> 40) & 7));
        counts[numla_fuzz_gguf_run(buf, n0)]++;
    }
    NUMLA_ASSERT_MSG(counts[NUMLA_STATUS_OK] > 10 && counts[NUMLA_STATUS_FORMAT] > 10,
                     "ok %d, format %d, unsupported %d", counts[NUMLA_STATUS_OK],
                     counts[NUMLA_STATUS_FORMAT], counts[NUMLA_STATUS_UNSUPPORTED]);
    free(buf);
    free(seed);
}

NUMLA_TEST_SUITE(gguf_deepseek4, NULL, NULL, NUMLA_TEST(test_golden_keys), NUMLA_TEST(test_view),
                 NUMLA_TEST(test_bad_files), NUMLA_TEST(test_fuzz_mutations),
                 NUMLA_TEST(test_mtp_file))
