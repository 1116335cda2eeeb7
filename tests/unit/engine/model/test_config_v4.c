/* Tests for the deepseek_v4 configs (engine/model/config_v4.c and config.c's V4 path) against
 * transformers 5.25's DeepseekV4Config and DeepseekV4RotaryEmbedding. The seeds are in
 * tests/fuzz/corpus/config/: v4_flash_shape.json and v4_pro_shape.json are hand-made with
 * V4-Flash's and V4-Pro's shapes in the published files' legacy spelling (compress_ratios,
 * num_hash_layers, qk_rope_head_dim, rope_scaling) — not the published files themselves, which
 * were not at hand; v4_tiny.json is DeepseekV4Config(...).to_dict() of a tiny model (nested
 * rope_parameters, compress_rates, layer_types, mlp_layer_types). Every expected value below was
 * printed by transformers from the same file (layer_types, mlp_layer_types, qk_rope_head_dim,
 * the "main" and "compress" inv_freq and attention scaling). */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "engine/model/config.h"
#include "engine/model/kv_cache.h"
#include "engine/model/model_v4.h"
#include "engine/formats/safetensors.h"

int numla_fuzz_config_run(const uint8_t *data, size_t size, numla_model_config *out);

static numla_model_config cfg_;

static char *seed(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "tests/fuzz/corpus/config/%s", name);
    return numla_test_read_file(numla_test_source_path(path), NULL);
}

static numla_status parse(const char *text) { return numla_model_config_parse(text, "t.json", &cfg_); }

/* s, c, h per layer as transformers' layer_types; 1 = hash_moe. */
static void expect_layers(const char *attn, const char *hash)
{
    CU_ASSERT_EQUAL_FATAL((int64_t)strlen(attn), cfg_.v4.num_layers);
    for (size_t i = 0; attn[i]; i++) {
        int want = attn[i] == 's' ? NUMLA_V4_ATTN_SLIDING
                   : attn[i] == 'c' ? NUMLA_V4_ATTN_CSA : NUMLA_V4_ATTN_HCA;
        NUMLA_ASSERT_MSG(cfg_.v4.attn[i] == want, "layer %zu: %s, transformers: %c", i,
                         numla_v4_attn_name((numla_v4_attn)cfg_.v4.attn[i]), attn[i]);
        CU_ASSERT_EQUAL(cfg_.v4.hash_moe[i], hash[i] == '1');
    }
}

static void expect_freq(const double *got, const double *want, int n)
{
    for (int i = 0; i < n; i++)
        NUMLA_ASSERT_MSG(fabs(got[i] - want[i]) <= 2e-7 * want[i] + 1e-12,
                         "inv_freq[%d] = %.9g, transformers %.9g", i, got[i], want[i]);
}

/* transformers' inv_freq (fp32) for rope dim 64: theta 10000 plain, and 160000 with YaRN
 * factor 16 over 65536 positions (beta 32 / 1) */
static const double MAIN64[32] = {
    1, 0.749894202, 0.562341332, 0.421696514, 0.316227764, 0.237137362, 0.177827939,
    0.133352146, 0.100000001, 0.0749894157, 0.0562341288, 0.0421696492, 0.0316227786,
    0.0237137359, 0.0177827943, 0.0133352149, 0.00999999978, 0.00749894232, 0.00562341325,
    0.00421696482, 0.00316227786, 0.00237137382, 0.00177827943, 0.00133352145, 0.00100000005,
    0.000749894185, 0.000562341302, 0.000421696488, 0.000316227786, 0.000237137385,
    0.00017782794, 0.00013335215};
static const double COMPRESS64[32] = {
    1, 0.687656045, 0.472870797, 0.325172454, 0.223606795, 0.153764561, 0.10573712,
    0.0727107748, 0.0500000007, 0.0343828015, 0.0236435402, 0.0162586235, 0.0111803403,
    0.00768822804, 0.00528685655, 0.00363553851, 0.00226562493, 0.00139680132, 0.000849689706,
    0.000508081983, 0.000296977785, 0.000168179977, 9.08678412e-05, 4.54442306e-05,
    1.95312532e-05, 5.37231244e-06, 3.69430336e-06, 2.5404097e-06, 1.74692821e-06,
    1.20128561e-06, 8.260713e-07, 5.6805294e-07};

static void test_flash_shape(void)
{
    char *t = seed("v4_flash_shape.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL_FATAL(parse(t), NUMLA_STATUS_OK);
    free(t);
    const numla_v4_config *v = &cfg_.v4;
    CU_ASSERT_EQUAL(cfg_.arch, NUMLA_MODEL_ARCH_DEEPSEEK_V4);
    CU_ASSERT_TRUE(v->enabled);
    CU_ASSERT_EQUAL(cfg_.hidden_size, 4096);
    CU_ASSERT_EQUAL(cfg_.num_hidden_layers, 43);
    CU_ASSERT_EQUAL(cfg_.num_attention_heads, 64);
    CU_ASSERT_EQUAL(v->head_dim, 512);
    CU_ASSERT_EQUAL(v->rope_dim, 64);
    CU_ASSERT_EQUAL(cfg_.qk_rope_head_dim, 64);
    CU_ASSERT_EQUAL(cfg_.qk_nope_head_dim, 448);
    CU_ASSERT_EQUAL(v->q_lora_rank, 1024);
    CU_ASSERT_EQUAL(v->o_groups, 8);
    CU_ASSERT_EQUAL(v->o_lora_rank, 1024);
    CU_ASSERT_EQUAL(v->sliding_window, 128);
    CU_ASSERT_EQUAL(v->csa_rate, 4);
    CU_ASSERT_EQUAL(v->hca_rate, 128);
    CU_ASSERT_EQUAL(v->index_n_heads, 64);
    CU_ASSERT_EQUAL(v->index_head_dim, 128);
    CU_ASSERT_EQUAL(v->index_topk, 512);
    CU_ASSERT_EQUAL(v->hc_mult, 4);
    CU_ASSERT_EQUAL(v->hc_sinkhorn_iters, 20);
    CU_ASSERT_DOUBLE_EQUAL(v->hc_eps, 1e-6, 0);
    CU_ASSERT_DOUBLE_EQUAL(v->swiglu_limit, 10.0, 0);
    CU_ASSERT_EQUAL(v->num_nextn_predict_layers, 1);
    CU_ASSERT_EQUAL(cfg_.n_routed_experts, 256);
    CU_ASSERT_EQUAL(cfg_.num_experts_per_tok, 6);
    CU_ASSERT_EQUAL(cfg_.moe_intermediate_size, 2048);
    CU_ASSERT_EQUAL(cfg_.intermediate_size, 2048);
    CU_ASSERT_EQUAL(cfg_.scoring_func, NUMLA_SCORING_FUNC_SQRTSOFTPLUS);
    CU_ASSERT_DOUBLE_EQUAL(cfg_.routed_scaling_factor, 1.5, 0);
    CU_ASSERT_DOUBLE_EQUAL(cfg_.softmax_scale, 1.0 / sqrt(512.0), 1e-15);
    for (int64_t l = 0; l < 43; l++)
        CU_ASSERT_TRUE(numla_model_config_is_moe_layer(&cfg_, l));
    /* compress_ratios has 44 entries (the last is the MTP layer's) */
    expect_layers("sschchchchchchchchchchchchchchchchchchchchc",
                  "1110000000000000000000000000000000000000000");
    expect_freq(v->main_inv_freq, MAIN64, 32);
    expect_freq(v->compress_inv_freq, COMPRESS64, 32);
    CU_ASSERT_DOUBLE_EQUAL(v->compress_attention_factor, 1.0, 0);
    CU_ASSERT_DOUBLE_EQUAL(cfg_.rope_attention_factor, 1.0, 0);
    expect_freq(cfg_.rope_inv_freq, COMPRESS64, 32);
}

static void test_pro_shape(void)
{
    char *t = seed("v4_pro_shape.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL_FATAL(parse(t), NUMLA_STATUS_OK);
    free(t);
    const numla_v4_config *v = &cfg_.v4;
    CU_ASSERT_EQUAL(cfg_.hidden_size, 7168);
    CU_ASSERT_EQUAL(cfg_.num_attention_heads, 128);
    CU_ASSERT_EQUAL(v->o_groups, 16);
    CU_ASSERT_EQUAL(v->index_topk, 1024);
    CU_ASSERT_EQUAL(v->rope_dim, 64); /* 512 x partial_rotary_factor 0.125 */
    CU_ASSERT_EQUAL(cfg_.n_routed_experts, 384);
    CU_ASSERT_DOUBLE_EQUAL(cfg_.routed_scaling_factor, 2.5, 0);
    /* no schedule written: transformers' default, two HCA layers then CSA/HCA; 3 hash layers */
    expect_layers("hhhchchchchchchchchchchchchchchchchchchchchchchchchchchchchch",
                  "1110000000000000000000000000000000000000000000000000000000000");
    expect_freq(v->main_inv_freq, MAIN64, 32);
    expect_freq(v->compress_inv_freq, COMPRESS64, 32);
}

static void test_tiny_nested(void)
{
    char *t = seed("v4_tiny.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL_FATAL(parse(t), NUMLA_STATUS_OK);
    free(t);
    const numla_v4_config *v = &cfg_.v4;
    CU_ASSERT_EQUAL(v->head_dim, 32);
    CU_ASSERT_EQUAL(v->rope_dim, 8);
    CU_ASSERT_EQUAL(v->csa_rate, 4);
    CU_ASSERT_EQUAL(v->hca_rate, 8);
    CU_ASSERT_EQUAL(v->hc_mult, 3);
    CU_ASSERT_EQUAL(v->hc_sinkhorn_iters, 7);
    CU_ASSERT_DOUBLE_EQUAL(v->swiglu_limit, 7.0, 0);
    CU_ASSERT_DOUBLE_EQUAL(v->main_rope_theta, 500.0, 0);
    CU_ASSERT_DOUBLE_EQUAL(v->compress_rope_theta, 20000.0, 0);
    expect_layers("schc", "1001");
    static const double main8[4] = {1, 0.21147424, 0.0447213612, 0.0094574159};
    static const double comp8[4] = {1, 0.0210224111, 0.00176776701, 0.000148650885};
    expect_freq(v->main_inv_freq, main8, 4);
    expect_freq(v->compress_inv_freq, comp8, 4);
}

/* Each refusal names its field. */
static void test_refusals(void)
{
    char *t = seed("v4_tiny.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    static const struct {
        const char *from, *to, *names;
    } cases[] = {
        {"\"num_key_value_heads\": 1", "\"num_key_value_heads\": 2", "num_key_value_heads"},
        {"\"n_shared_experts\": 1", "\"n_shared_experts\": 2", "n_shared_experts"},
        {"\"scoring_func\": \"sqrtsoftplus\"", "\"scoring_func\": \"sigmoid\"", "scoring_func"},
        {"\"o_groups\": 2", "\"o_groups\": 3", "o_groups"},
        {"\"head_dim\": 32,", "", "head_dim"},
        {"\"q_lora_rank\": 16,", "", "q_lora_rank"},
        {"\"index_head_dim\": 16", "\"index_head_dim\": 4", "index_head_dim"},
        {"\"swiglu_limit\": 7.0", "\"swiglu_limit\": 0", "swiglu_limit"},
        {"\"hc_mult\": 3", "\"hc_mult\": 17", "hc_mult"},
        {"\"sliding_attention\",", "\"full_attention\",", "layer_types[0]"},
        {"\"hash_moe\",", "", "mlp_layer_types"},
        {"\"qk_rope_head_dim\": 8", "\"qk_rope_head_dim\": 6", "qk_rope_head_dim"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *at = strstr(t, cases[i].from);
        NUMLA_ASSERT_MSG(at != NULL, "case %zu: '%s' not in the seed", i, cases[i].from);
        if (!at)
            continue;
        size_t n = strlen(t) + strlen(cases[i].to) + 1;
        char *m = malloc(n);
        size_t pre = (size_t)(at - t);
        memcpy(m, t, pre);
        strcpy(m + pre, cases[i].to);
        strcat(m, at + strlen(cases[i].from));
        numla_status s = parse(m);
        NUMLA_ASSERT_MSG(s != NUMLA_STATUS_OK && strstr(numla_error_message(), cases[i].names),
                         "case %zu (%s): status %d, '%s'", i, cases[i].names, (int)s,
                         numla_error_message());
        free(m);
    }
    free(t);
    /* a compress_ratios entry that is no rate; the published FP8 + FP4 quantization_config is
     * read, another expert_dtype refused */
    t = seed("v4_flash_shape.json");
    char *at = strstr(t, "[\n  0,\n  0,\n  4");
    CU_ASSERT_PTR_NOT_NULL_FATAL(at);
    at[14] = '8'; /* the first 4 becomes 8 */
    CU_ASSERT_NOT_EQUAL(parse(t), NUMLA_STATUS_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "compress_ratios[2]"));
    at[14] = '4';
    char *q = strstr(t, "\"rope_scaling\"");
    CU_ASSERT_PTR_NOT_NULL_FATAL(q);
    size_t n = strlen(t) + 512;
    char *m = malloc(n);
    size_t pre = (size_t)(q - t);
    memcpy(m, t, pre);
    strcpy(m + pre, "\"quantization_config\": {\"quant_method\": \"fp8\", \"fmt\": \"e4m3\", "
                    "\"weight_block_size\": [128, 128], \"scale_fmt\": \"ue8m0\", "
                    "\"expert_dtype\": \"fp4\"}, ");
    strcat(m, q);
    CU_ASSERT_EQUAL(parse(m), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(cfg_.weight_format, NUMLA_WEIGHT_FORMAT_FP8);
    char *e4 = strstr(m, "\"fp4\"");
    CU_ASSERT_PTR_NOT_NULL_FATAL(e4);
    memcpy(e4, "\"int\"", 5);
    CU_ASSERT_NOT_EQUAL(parse(m), NUMLA_STATUS_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "expert_dtype"));
    free(m);
    free(t);
}

/* Seeded mutations of the tiny and Flash-shaped configs through the fuzz target (its V4
 * invariants): both outcomes occur and every rejection names the file. */
static void test_fuzz_mutations(void)
{
    static const char *const seeds[] = {"v4_tiny.json", "v4_flash_shape.json"};
    int accepted = 0, rejected = 0;
    numla_test_rng rng = {39};
    for (size_t s = 0; s < 2; s++) {
        char *t = seed(seeds[s]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(t);
        size_t n = strlen(t);
        uint8_t *buf = malloc(n + 64);
        for (int it = 0; it < 600; it++) {
            memcpy(buf, t, n);
            size_t len = numla_test_mutate_json(buf, n, 0, &rng);
            int r = numla_fuzz_config_run(buf, len, NULL);
            CU_ASSERT_NOT_EQUAL_FATAL(r, -1);
            if (r)
                accepted++;
            else
                rejected++;
        }
        free(buf);
        free(t);
    }
    NUMLA_ASSERT_MSG(accepted > 50 && rejected > 300, "accepted %d, rejected %d", accepted,
                     rejected);
}

/* numla_v4_config_sizes against two independent counts: the tensors transformers 5.25 wrote for
 * the tiny golden model (tests/golden/v4: model_bf16's element count, model_fp8's bytes in the
 * published FP8 + FP4 form) and the published headline sizes (V4-Flash 284B parameters with
 * 13B active, V4-Pro 1.6T with 49B); the cache per token by hand from the layer schedules. */
static void test_sizes(void)
{
    numla_v4_sizes z;
    char *t = seed("v4_flash_shape.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL_FATAL(parse(t), NUMLA_STATUS_OK);
    free(t);
    numla_v4_config_sizes(&cfg_, &z);
    NUMLA_ASSERT_MSG(fabs(z.params / 284e9 - 1) < 0.01, "V4-Flash: %.4g parameters", z.params);
    NUMLA_ASSERT_MSG(fabs(z.active_params / 13e9 - 1) < 0.04, "V4-Flash: %.4g active",
                     z.active_params);
    /* 21 CSA layers (512 + 128) / 4, 20 HCA layers 512 / 128 */
    CU_ASSERT_DOUBLE_EQUAL(z.cache_per_token, 21 * 160 + 20 * 4, 1e-9);
    /* 43 windows of 128 x 512; CSA 2 x 8 x 1024 + 2 x 8 x 256, HCA 2 x 256 x 512 */
    CU_ASSERT_DOUBLE_EQUAL(z.cache_per_seq, 43 * 65536 + 21 * (16384 + 4096) + 20 * 262144, 1e-9);
    t = seed("v4_pro_shape.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL_FATAL(parse(t), NUMLA_STATUS_OK);
    free(t);
    numla_v4_config_sizes(&cfg_, &z);
    NUMLA_ASSERT_MSG(fabs(z.params / 1.6e12 - 1) < 0.02, "V4-Pro: %.4g parameters", z.params);
    NUMLA_ASSERT_MSG(fabs(z.active_params / 49e9 - 1) < 0.02, "V4-Pro: %.4g active",
                     z.active_params);
    CU_ASSERT_DOUBLE_EQUAL(z.cache_per_token, 29 * 160 + 32 * 4, 1e-9);
    static const char *const golden[] = {"tests/golden/v4/model_bf16", "tests/golden/v4/model_fp8"};
    double count[2] = {0, 0}, bytes[2] = {0, 0};
    for (int g = 0; g < 2; g++) {
        CU_ASSERT_EQUAL_FATAL(numla_model_config_load(numla_test_source_path(golden[g]), &cfg_),
                              NUMLA_STATUS_OK);
        numla_safetensors_model *st = NULL;
        CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(numla_test_source_path(golden[g]), &st),
                              NUMLA_STATUS_OK);
        for (int64_t i = 0; i < numla_safetensors_count(st); i++) {
            const numla_safetensors_tensor *x = numla_safetensors_at(st, i);
            double c = 1;
            for (int d = 0; d < x->ndim; d++)
                c *= (double)x->shape[d];
            count[g] += c;
            bytes[g] += (double)x->nbytes;
        }
        numla_safetensors_close(&st);
    }
    numla_v4_config_sizes(&cfg_, &z); /* the same shapes in both directories */
    NUMLA_ASSERT_MSG(z.params == count[0], "tiny-v4: %.0f parameters, the file holds %.0f",
                     z.params, count[0]);
    NUMLA_ASSERT_MSG(z.bytes == bytes[1], "tiny-v4: %.0f bytes, the FP8 + FP4 file holds %.0f",
                     z.bytes, bytes[1]);
}

/* What a V4-Flash sequence costs the pool (numla_v4_cache_charge, docs/design.md §3.1), by hand:
 * per block of 16 tokens at bf16 the paper's entries and index keys, 21 CSA layers of
 * 16 · (512 + 128) / 4 and 20 HCA layers of 16 · 512 / 128 values (= 16 tokens at
 * cache_per_token); per sequence 43 window rings of 128 x 512 bf16 values, and each compressor's
 * fp32 raw kv and gate rows of two windows, the entry being made (fp32) and, for HCA, whose
 * entries the sequence keeps itself (128 does not divide the block), the last page of its
 * entries' mapping: CSA 2 x 8 rows of 2 x 512 and of 2 x 128, HCA 2 x 256 rows of 512. CSA's
 * entries and index keys are the pool's blocks' (numla_v4_pool_block_bytes: 4 entries a block
 * of 16 tokens, 2 of 8; none for HCA, the sliding layers, or past the layers). */
static void test_pool_charge(void)
{
    char *t = seed("v4_flash_shape.json");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL_FATAL(parse(t), NUMLA_STATUS_OK);
    free(t);
    size_t blk = 0, seq = 0;
    numla_v4_cache_charge(&cfg_, 16, NUMLA_DTYPE_BF16, &blk, &seq);
    CU_ASSERT_EQUAL(blk, (size_t)(2 * (21 * 16 * (512 + 128) / 4 + 20 * 16 * 512 / 128)));
    numla_v4_sizes z;
    numla_v4_config_sizes(&cfg_, &z);
    CU_ASSERT_DOUBLE_EQUAL((double)blk, 2 * 16 * z.cache_per_token, 1e-9);
    const size_t csa = 4 * (2 * 8 * 2 * 512 + 512) + 4 * (2 * 8 * 2 * 128 + 128);
    const size_t hca = 4 * (2 * 256 * 512 + 512) + 4096;
    CU_ASSERT_EQUAL(seq, 43 * (size_t)(128 * 512 * 2) + 21 * csa + 20 * hca);
    /* an fp32 cache: twice the entries; a block of 8 tokens: half */
    numla_v4_cache_charge(&cfg_, 8, NUMLA_DTYPE_F32, &blk, &seq);
    CU_ASSERT_EQUAL(blk, (size_t)(4 * (21 * 8 * (512 + 128) / 4 + 20 * 8 * 512 / 128)));
    int64_t csa_l = -1, hca_l = -1, swa_l = -1;
    for (int64_t l = 0; l < cfg_.v4.num_layers; l++) {
        const int a = cfg_.v4.attn[l];
        *(a == NUMLA_V4_ATTN_CSA ? &csa_l : a == NUMLA_V4_ATTN_HCA ? &hca_l : &swa_l) = l;
    }
    CU_ASSERT_FATAL(csa_l >= 0 && hca_l >= 0 && swa_l >= 0);
    CU_ASSERT_EQUAL(numla_v4_pool_block_bytes(&cfg_, 16, NUMLA_DTYPE_BF16, csa_l, 0), 2 * 4 * 512);
    CU_ASSERT_EQUAL(numla_v4_pool_block_bytes(&cfg_, 16, NUMLA_DTYPE_BF16, csa_l, 1), 2 * 4 * 128);
    CU_ASSERT_EQUAL(numla_v4_pool_block_bytes(&cfg_, 8, NUMLA_DTYPE_F32, csa_l, 0), 4 * 2 * 512);
    CU_ASSERT_EQUAL(numla_v4_pool_block_bytes(&cfg_, 16, NUMLA_DTYPE_BF16, hca_l, 0), 0);
    CU_ASSERT_EQUAL(numla_v4_pool_block_bytes(&cfg_, 256, NUMLA_DTYPE_BF16, hca_l, 0), 2 * 2 * 512);
    CU_ASSERT_EQUAL(numla_v4_pool_block_bytes(&cfg_, 16, NUMLA_DTYPE_BF16, hca_l, 1), 0);
    CU_ASSERT_EQUAL(numla_v4_pool_block_bytes(&cfg_, 16, NUMLA_DTYPE_BF16, swa_l, 0), 0);
    CU_ASSERT_EQUAL(numla_v4_pool_block_bytes(&cfg_, 16, NUMLA_DTYPE_BF16, cfg_.v4.num_layers, 0), 0);
    CU_ASSERT_EQUAL(numla_v4_pool_block_bytes(&cfg_, 6, NUMLA_DTYPE_BF16, csa_l, 0), 0);
    /* the default block: 128 tokens, every compressor's entries in the pool's blocks; the
     * state slot is the charge's fixed part without the HCA mappings' last pages */
    const int32_t bs = numla_kv_default_block_size(&cfg_);
    CU_ASSERT_EQUAL(bs, 128);
    CU_ASSERT_EQUAL(numla_v4_pool_block_bytes(&cfg_, bs, NUMLA_DTYPE_BF16, hca_l, 0), 2 * 512);
    numla_v4_cache_charge(&cfg_, 16, NUMLA_DTYPE_BF16, &blk, &seq);
    CU_ASSERT_EQUAL(numla_v4_state_bytes(&cfg_, NUMLA_DTYPE_BF16), seq - 20 * 4096);
    numla_v4_cache_charge(&cfg_, bs, NUMLA_DTYPE_BF16, &blk, &seq);
    CU_ASSERT_EQUAL(numla_v4_state_bytes(&cfg_, NUMLA_DTYPE_BF16), seq);
    numla_model_config other = cfg_;
    other.v4.enabled = 0;
    CU_ASSERT_EQUAL(numla_kv_default_block_size(&other), 16);
}

NUMLA_TEST_SUITE(config_v4, NULL, NULL, NUMLA_TEST(test_flash_shape), NUMLA_TEST(test_pro_shape),
                 NUMLA_TEST(test_tiny_nested), NUMLA_TEST(test_refusals),
                 NUMLA_TEST(test_fuzz_mutations), NUMLA_TEST(test_sizes),
                 NUMLA_TEST(test_pool_charge))
