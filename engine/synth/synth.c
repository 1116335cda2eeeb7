/* engine/synth/synth.c — synthetic DeepSeek-V2/V3 checkpoints (synth.h; the command: cli/synth_cmd.c).
 *
 * Owns the presets, the tensor plan (HF names and shapes), the deterministic weight generator
 * and the directory layout (config.json, single file or shards + index). The file format
 * itself is engine/formats/safetensors.c's; this file never writes safetensors bytes directly.
 *
 * Every weight element is a pure function of (seed, tensor name, element index): a counter-based
 * hash, not a sequential stream, so any thread split gives the same bytes.
 */
#define _GNU_SOURCE
#include "engine/synth/synth.h"
#include "engine/synth/quantized_checkpoint.h"
#include "engine/text/synthetic_vocab.h"
#include "engine/text/tokenizer.h"

#include "common/clock.h"
#include "common/log.h"
#include "engine/formats/safetensors.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NUMLA_SYNTH_SHARD_DEFAULT ((int64_t)2 << 30)

/* ---------------------------------------------------------------------------------------- */
/* presets                                                                                   */

static void numla_synth_preset_tiny(numla_synth_config *c)
{
    *c = (numla_synth_config){
        .model_type = "deepseek_v2", .architecture = "DeepseekV2ForCausalLM",
        .vocab_size = 512, .hidden_size = 64, .intermediate_size = 192,
        .moe_intermediate_size = 32, .num_hidden_layers = 3, .num_attention_heads = 6,
        .num_key_value_heads = 6, .n_shared_experts = 1, .n_routed_experts = 10,
        .num_experts_per_tok = 3, .routed_scaling_factor = 1.0, .topk_method = "greedy",
        .n_group = 1, .topk_group = 1, .scoring_func = "softmax", .norm_topk_prob = 0,
        .first_k_dense_replace = 1, .moe_layer_freq = 1, .kv_lora_rank = 64, .q_lora_rank = 0,
        .qk_rope_head_dim = 16, .qk_nope_head_dim = 32, .v_head_dim = 32,
        .max_position_embeddings = 4096, .rms_norm_eps = 1e-6, .rope_theta = 10000.0,
        .yarn_factor = 4.0, .yarn_original_max_position_embeddings = 1024,
        .yarn_beta_fast = 32.0, .yarn_beta_slow = 1.0, .yarn_mscale = 0.707,
        .yarn_mscale_all_dim = 0.707, .bos_token_id = 0, .eos_token_id = 1,
    };
}

/* deepseek-ai/DeepSeek-V2-Lite */
static void numla_synth_preset_v2_lite(numla_synth_config *c)
{
    *c = (numla_synth_config){
        .model_type = "deepseek_v2", .architecture = "DeepseekV2ForCausalLM",
        .vocab_size = 102400, .hidden_size = 2048, .intermediate_size = 10944,
        .moe_intermediate_size = 1408, .num_hidden_layers = 27, .num_attention_heads = 16,
        .num_key_value_heads = 16, .n_shared_experts = 2, .n_routed_experts = 64,
        .num_experts_per_tok = 6, .routed_scaling_factor = 1.0, .topk_method = "greedy",
        .n_group = 1, .topk_group = 1, .scoring_func = "softmax", .norm_topk_prob = 0,
        .first_k_dense_replace = 1, .moe_layer_freq = 1, .kv_lora_rank = 512, .q_lora_rank = 0,
        .qk_rope_head_dim = 64, .qk_nope_head_dim = 128, .v_head_dim = 128,
        .max_position_embeddings = 163840, .rms_norm_eps = 1e-6, .rope_theta = 10000.0,
        .yarn_factor = 40.0, .yarn_original_max_position_embeddings = 4096,
        .yarn_beta_fast = 32.0, .yarn_beta_slow = 1.0, .yarn_mscale = 0.707,
        .yarn_mscale_all_dim = 0.707, .bos_token_id = 100000, .eos_token_id = 100001,
    };
}

/* A V3-shaped toy: q_lora, sigmoid + noaux_tc group routing with the correction bias. */
static void numla_synth_preset_tiny_v3(numla_synth_config *c)
{
    *c = (numla_synth_config){
        .model_type = "deepseek_v3", .architecture = "DeepseekV3ForCausalLM",
        .vocab_size = 512, .hidden_size = 64, .intermediate_size = 192,
        .moe_intermediate_size = 32, .num_hidden_layers = 4, .num_attention_heads = 4,
        .num_key_value_heads = 4, .n_shared_experts = 1, .n_routed_experts = 16,
        .num_experts_per_tok = 4, .routed_scaling_factor = 2.5, .topk_method = "noaux_tc",
        .n_group = 4, .topk_group = 2, .scoring_func = "sigmoid", .norm_topk_prob = 1,
        .first_k_dense_replace = 1, .moe_layer_freq = 1, .kv_lora_rank = 64, .q_lora_rank = 48,
        .qk_rope_head_dim = 16, .qk_nope_head_dim = 32, .v_head_dim = 32,
        .max_position_embeddings = 4096, .rms_norm_eps = 1e-6, .rope_theta = 10000.0,
        .yarn_factor = 4.0, .yarn_original_max_position_embeddings = 1024,
        .yarn_beta_fast = 32.0, .yarn_beta_slow = 1.0, .yarn_mscale = 1.0,
        .yarn_mscale_all_dim = 1.0, .bos_token_id = 0, .eos_token_id = 1,
    };
}

/* deepseek-ai/DeepSeek-V3 (and R1, V3.1: the same shape), its multi-token-prediction layer
 * included */
static void numla_synth_preset_v3(numla_synth_config *c)
{
    *c = (numla_synth_config){
        .model_type = "deepseek_v3", .architecture = "DeepseekV3ForCausalLM",
        .vocab_size = 129280, .hidden_size = 7168, .intermediate_size = 18432,
        .moe_intermediate_size = 2048, .num_hidden_layers = 61, .num_attention_heads = 128,
        .num_key_value_heads = 128, .n_shared_experts = 1, .n_routed_experts = 256,
        .num_experts_per_tok = 8, .routed_scaling_factor = 2.5, .topk_method = "noaux_tc",
        .n_group = 8, .topk_group = 4, .scoring_func = "sigmoid", .norm_topk_prob = 1,
        .first_k_dense_replace = 3, .moe_layer_freq = 1, .kv_lora_rank = 512,
        .q_lora_rank = 1536, .qk_rope_head_dim = 64, .qk_nope_head_dim = 128, .v_head_dim = 128,
        .max_position_embeddings = 163840, .rms_norm_eps = 1e-6, .rope_theta = 10000.0,
        .yarn_factor = 40.0, .yarn_original_max_position_embeddings = 4096,
        .yarn_beta_fast = 32.0, .yarn_beta_slow = 1.0, .yarn_mscale = 1.0,
        .yarn_mscale_all_dim = 1.0, .bos_token_id = 0, .eos_token_id = 1,
        .num_nextn_predict_layers = 1,
    };
}

/* moonshotai/Kimi-K2-Instruct: V3's architecture with 384 routed experts, 64 heads, one dense
 * layer, one expert group (docs/kimi.md lists the fields and where they were checked) */
static void numla_synth_preset_kimi_k2(numla_synth_config *c)
{
    *c = (numla_synth_config){
        .model_type = "kimi_k2", .architecture = "DeepseekV3ForCausalLM",
        .vocab_size = 163840, .hidden_size = 7168, .intermediate_size = 18432,
        .moe_intermediate_size = 2048, .num_hidden_layers = 61, .num_attention_heads = 64,
        .num_key_value_heads = 64, .n_shared_experts = 1, .n_routed_experts = 384,
        .num_experts_per_tok = 8, .routed_scaling_factor = 2.827, .topk_method = "noaux_tc",
        .n_group = 1, .topk_group = 1, .scoring_func = "sigmoid", .norm_topk_prob = 1,
        .first_k_dense_replace = 1, .moe_layer_freq = 1, .kv_lora_rank = 512,
        .q_lora_rank = 1536, .qk_rope_head_dim = 64, .qk_nope_head_dim = 128, .v_head_dim = 128,
        .max_position_embeddings = 131072, .rms_norm_eps = 1e-6, .rope_theta = 50000.0,
        .yarn_factor = 32.0, .yarn_original_max_position_embeddings = 4096,
        .yarn_beta_fast = 1.0, .yarn_beta_slow = 1.0, .yarn_mscale = 1.0,
        .yarn_mscale_all_dim = 1.0, .bos_token_id = 163584, .eos_token_id = 163585,
    };
}

/* A Kimi-shaped toy: many small experts in one group, k 8, the Kimi routed scaling. */
static void numla_synth_preset_tiny_kimi(numla_synth_config *c)
{
    *c = (numla_synth_config){
        .model_type = "kimi_k2", .architecture = "DeepseekV3ForCausalLM",
        .vocab_size = 512, .hidden_size = 64, .intermediate_size = 192,
        .moe_intermediate_size = 16, .num_hidden_layers = 3, .num_attention_heads = 4,
        .num_key_value_heads = 4, .n_shared_experts = 1, .n_routed_experts = 48,
        .num_experts_per_tok = 8, .routed_scaling_factor = 2.827, .topk_method = "noaux_tc",
        .n_group = 1, .topk_group = 1, .scoring_func = "sigmoid", .norm_topk_prob = 1,
        .first_k_dense_replace = 1, .moe_layer_freq = 1, .kv_lora_rank = 64, .q_lora_rank = 48,
        .qk_rope_head_dim = 16, .qk_nope_head_dim = 32, .v_head_dim = 32,
        .max_position_embeddings = 4096, .rms_norm_eps = 1e-6, .rope_theta = 50000.0,
        .yarn_factor = 4.0, .yarn_original_max_position_embeddings = 1024,
        .yarn_beta_fast = 1.0, .yarn_beta_slow = 1.0, .yarn_mscale = 1.0,
        .yarn_mscale_all_dim = 1.0, .bos_token_id = 0, .eos_token_id = 1,
    };
}

/* deepseek-ai/DeepSeek-V3.2-Exp / DeepSeek-V3.2: V3's shape plus the lightning indexer
 * (64 heads x 128, top 2048) in every layer. */
static void numla_synth_preset_v32(numla_synth_config *c)
{
    numla_synth_preset_v3(c);
    c->model_type = "deepseek_v32";
    c->architecture = "DeepseekV32ForCausalLM";
    c->index_n_heads = 64;
    c->index_head_dim = 128;
    c->index_topk = 2048;
}

/* A V3.2-shaped toy: tiny-v3 with a 16 x 32 indexer keeping 16 tokens, so any prompt past 16
 * tokens runs sparse attention. */
static void numla_synth_preset_tiny_v32(numla_synth_config *c)
{
    numla_synth_preset_tiny_v3(c);
    c->model_type = "deepseek_v32";
    c->architecture = "DeepseekV32ForCausalLM";
    c->index_n_heads = 16;
    c->index_head_dim = 32;
    c->index_topk = 16;
}

/* zai-org/GLM-5, its multi-token-prediction layer included: MLA with 64 heads of 192 + 64 and
 * values of 256, one expert group, RoPE theta 1e6 without YaRN, an indexer of 32 x 128 in every
 * layer, weights_proj kept in F32. */
static void numla_synth_preset_glm5(numla_synth_config *c)
{
    *c = (numla_synth_config){
        .model_type = "glm_moe_dsa", .architecture = "GlmMoeDsaForCausalLM",
        .vocab_size = 154880, .hidden_size = 6144, .intermediate_size = 12288,
        .moe_intermediate_size = 2048, .num_hidden_layers = 78, .num_attention_heads = 64,
        .num_key_value_heads = 64, .n_shared_experts = 1, .n_routed_experts = 256,
        .num_experts_per_tok = 8, .routed_scaling_factor = 2.5, .topk_method = "noaux_tc",
        .n_group = 1, .topk_group = 1, .scoring_func = "sigmoid", .norm_topk_prob = 1,
        .first_k_dense_replace = 3, .moe_layer_freq = 1, .kv_lora_rank = 512,
        .q_lora_rank = 2048, .qk_rope_head_dim = 64, .qk_nope_head_dim = 192, .v_head_dim = 256,
        .max_position_embeddings = 202752, .rms_norm_eps = 1e-5, .rope_theta = 1000000.0,
        .yarn_factor = 0.0, .bos_token_id = 0, .eos_token_id = 154820,
        .index_n_heads = 32, .index_head_dim = 128, .index_topk = 2048, .index_topk_freq = 1,
        .index_skip_topk_offset = 2, .index_weights_f32 = 1, .layer_type_lists = 1,
        .num_nextn_predict_layers = 1,
    };
}

/* A GLM-5-shaped toy: values wider than the nope part, one expert group, no YaRN, a 16 x 32
 * indexer keeping 16 tokens, and every other layer from the third on "shared"
 * (full, full, shared, full, shared). */
static void numla_synth_preset_tiny_glm5(numla_synth_config *c)
{
    *c = (numla_synth_config){
        .model_type = "glm_moe_dsa", .architecture = "GlmMoeDsaForCausalLM",
        .vocab_size = 512, .hidden_size = 64, .intermediate_size = 192,
        .moe_intermediate_size = 32, .num_hidden_layers = 5, .num_attention_heads = 4,
        .num_key_value_heads = 4, .n_shared_experts = 1, .n_routed_experts = 16,
        .num_experts_per_tok = 4, .routed_scaling_factor = 2.5, .topk_method = "noaux_tc",
        .n_group = 1, .topk_group = 1, .scoring_func = "sigmoid", .norm_topk_prob = 1,
        .first_k_dense_replace = 2, .moe_layer_freq = 1, .kv_lora_rank = 64, .q_lora_rank = 48,
        .qk_rope_head_dim = 16, .qk_nope_head_dim = 32, .v_head_dim = 48,
        .max_position_embeddings = 4096, .rms_norm_eps = 1e-5, .rope_theta = 1000000.0,
        .yarn_factor = 0.0, .bos_token_id = 0, .eos_token_id = 1,
        .index_n_heads = 16, .index_head_dim = 32, .index_topk = 16, .index_topk_freq = 2,
        .index_skip_topk_offset = 2, .index_weights_f32 = 1, .layer_type_lists = 1,
    };
}

/* deepseek-ai/DeepSeek-V4-Flash (284B, 13B active), without the multi-token-prediction layer:
 * config.json as published (transformers 5.25's DeepseekV4Config defaults are these numbers; its
 * docstring names deepseek-ai/DeepSeek-V4-Flash-Base; docs/synth.md gives the sources): two
 * sliding-window layers, then CSA and HCA alternating, three hash-routed layers. */
static void numla_synth_preset_v4_flash(numla_synth_config *c)
{
    *c = (numla_synth_config){
        .model_type = "deepseek_v4", .architecture = "DeepseekV4ForCausalLM",
        .vocab_size = 129280, .hidden_size = 4096, .moe_intermediate_size = 2048,
        .num_hidden_layers = 43, .num_attention_heads = 64, .num_key_value_heads = 1,
        .n_shared_experts = 1, .n_routed_experts = 256, .num_experts_per_tok = 6,
        .routed_scaling_factor = 1.5, .topk_method = "noaux_tc", .n_group = 1, .topk_group = 1,
        .scoring_func = "sqrtsoftplus", .norm_topk_prob = 1, .moe_layer_freq = 1,
        .q_lora_rank = 1024, .qk_rope_head_dim = 64, .max_position_embeddings = 1048576,
        .rms_norm_eps = 1e-6, .rope_theta = 10000.0, .yarn_factor = 16.0,
        .yarn_original_max_position_embeddings = 65536, .yarn_beta_fast = 32.0,
        .yarn_beta_slow = 1.0, .bos_token_id = 0, .eos_token_id = 1, .index_n_heads = 64,
        .index_head_dim = 128, .index_topk = 512, .head_dim = 512, .o_groups = 8,
        .o_lora_rank = 1024, .sliding_window = 128, .v4_lead_layers = 2, .v4_lead_ratio = 0,
        .num_hash_layers = 3, .hc_mult = 4, .hc_sinkhorn_iters = 20, .hc_eps = 1e-6,
        .swiglu_limit = 10.0, .compress_rope_theta = 160000.0,
    };
}

/* deepseek-ai/DeepSeek-V4-Pro (1.6T, 49B active), without the MTP layer: Flash's design wider
 * (hidden 7168, 128 heads, q_lora 1536, 16 output groups, 384 experts of 3072, index_topk 1024,
 * routed scaling 2.5), 61 layers whose first two are HCA. */
static void numla_synth_preset_v4_pro(numla_synth_config *c)
{
    numla_synth_preset_v4_flash(c);
    c->hidden_size = 7168;
    c->moe_intermediate_size = 3072;
    c->num_hidden_layers = 61;
    c->num_attention_heads = 128;
    c->n_routed_experts = 384;
    c->routed_scaling_factor = 2.5;
    c->q_lora_rank = 1536;
    c->index_topk = 1024;
    c->o_groups = 16;
    c->v4_lead_ratio = 128;
}

/* A V4-shaped toy, the shape of tests/golden/v4: sliding, CSA, HCA, CSA; two hash layers;
 * 8 heads of 64 (RoPE 16) in 4 output groups of 16, an indexer of 16 x 32 keeping 8 entries. */
static void numla_synth_preset_tiny_v4(numla_synth_config *c)
{
    numla_synth_preset_v4_flash(c);
    c->vocab_size = 96;
    c->hidden_size = 64;
    c->moe_intermediate_size = 32;
    c->num_hidden_layers = 4;
    c->num_attention_heads = 8;
    c->n_routed_experts = 8;
    c->num_experts_per_tok = 2;
    c->q_lora_rank = 32;
    c->qk_rope_head_dim = 16;
    c->head_dim = 64;
    c->o_groups = 4;
    c->o_lora_rank = 16;
    c->index_n_heads = 16;
    c->index_head_dim = 32;
    c->index_topk = 8;
    c->v4_lead_layers = 1;
    c->num_hash_layers = 2;
}

static int numla_synth_is_v4(const numla_synth_config *c)
{
    return !strcmp(c->model_type, "deepseek_v4");
}

int32_t numla_synth_v4_ratio(const numla_synth_config *c, int32_t layer)
{
    if (layer >= c->num_hidden_layers) /* the MTP layer: sliding as V4-Flash's, or as asked */
        return c->v4_mtp_ratio;
    if (layer < c->v4_lead_layers)
        return c->v4_lead_ratio;
    return (layer - c->v4_lead_layers) % 2 ? 128 : 4;
}

/* Layer i of a DSA config runs its own indexer (transformers' GlmMoeDsaConfig rule; V3.2 and a
 * freq <= 1: every layer). */
static int numla_synth_indexer_full(const numla_synth_config *c, int32_t i)
{
    if (c->index_n_heads <= 0)
        return 0;
    int32_t freq = c->index_topk_freq > 1 ? c->index_topk_freq : 1;
    int32_t k = i - c->index_skip_topk_offset + 1;
    return (k > 0 ? k : 0) % freq == 0;
}

static int numla_synth_is_moe(const numla_synth_config *c, int32_t i)
{
    return c->n_routed_experts > 0 && i >= c->first_k_dense_replace && i % c->moe_layer_freq == 0;
}

numla_status numla_synth_config_get(const numla_synth_options *opt, numla_synth_config *c)
{
    const char *p = opt->preset ? opt->preset : "(null)";
    if (!strcmp(p, "tiny"))
        numla_synth_preset_tiny(c);
    else if (!strcmp(p, "v2-lite"))
        numla_synth_preset_v2_lite(c);
    else if (!strcmp(p, "v3"))
        numla_synth_preset_v3(c);
    else if (!strcmp(p, "tiny-v3"))
        numla_synth_preset_tiny_v3(c);
    else if (!strcmp(p, "kimi-k2"))
        numla_synth_preset_kimi_k2(c);
    else if (!strcmp(p, "tiny-kimi"))
        numla_synth_preset_tiny_kimi(c);
    else if (!strcmp(p, "v32"))
        numla_synth_preset_v32(c);
    else if (!strcmp(p, "tiny-v32"))
        numla_synth_preset_tiny_v32(c);
    else if (!strcmp(p, "glm5"))
        numla_synth_preset_glm5(c);
    else if (!strcmp(p, "tiny-glm5"))
        numla_synth_preset_tiny_glm5(c);
    else if (!strcmp(p, "v4-flash"))
        numla_synth_preset_v4_flash(c);
    else if (!strcmp(p, "v4-pro"))
        numla_synth_preset_v4_pro(c);
    else if (!strcmp(p, "tiny-v4"))
        numla_synth_preset_tiny_v4(c);
    else
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "synth: unknown preset '%s' (tiny, tiny-v3, v2-lite, "
                   "v3, kimi-k2, tiny-kimi, v32, tiny-v32, glm5, tiny-glm5, v4-flash, v4-pro, "
                   "tiny-v4)", p);
    if (opt->layers < 0 || opt->experts < 0)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "synth: layers (%d) and experts (%d) must be >= 0",
                   (int)opt->layers, (int)opt->experts);
    if (opt->layers > 0)
        c->num_hidden_layers = opt->layers;
    if (opt->experts > 0)
        c->n_routed_experts = opt->experts;
    if (opt->mtp < -1 || opt->mtp > 1)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "synth: mtp must be -1 (none), 0 (as the preset) or "
                   "1 (write the layer), not %d", (int)opt->mtp);
    if (opt->mtp)
        c->num_nextn_predict_layers = opt->mtp > 0;
    if (opt->mtp_ratio && (strcmp(c->model_type, "deepseek_v4") || c->num_nextn_predict_layers < 1 ||
                           (opt->mtp_ratio != 4 && opt->mtp_ratio != 128)))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "synth: an MTP layer of compress rate %d: only a "
                   "deepseek_v4 preset's MTP layer compresses, at 4 (CSA) or 128 (HCA)",
                   (int)opt->mtp_ratio);
    c->v4_mtp_ratio = opt->mtp_ratio;
    if (opt->tokenizer_dir) {
        numla_tokenizer *t = NULL;
        NUMLA_CHECK(numla_tokenizer_load(opt->tokenizer_dir, &t));
        int64_t v = numla_tokenizer_vocab_size(t);
        if (v > c->vocab_size)
            c->vocab_size = (v + 63) / 64 * 64;
        if (numla_tokenizer_bos(t) >= 0)
            c->bos_token_id = numla_tokenizer_bos(t);
        if (numla_tokenizer_eos(t) >= 0)
            c->eos_token_id = numla_tokenizer_eos(t);
        numla_tokenizer_destroy(&t);
    }
    if (opt->synthetic_tokenizer) {
        if (opt->tokenizer_dir)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "synth: a tokenizer directory and the synthetic "
                       "tokenizer exclude each other");
        if (c->vocab_size < NUMLA_SYNTHETIC_VOCAB_MIN || c->vocab_size > INT32_MAX)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "synth: preset %s: the synthetic tokenizer "
                       "needs a vocab_size of at least %d, not %lld", p,
                       (int)NUMLA_SYNTHETIC_VOCAB_MIN, (long long)c->vocab_size);
        numla_synthetic_vocab *v = NULL;
        NUMLA_CHECK(numla_synthetic_vocab_create((int32_t)c->vocab_size, &v));
        c->bos_token_id = numla_synthetic_vocab_bos(v);
        c->eos_token_id = numla_synthetic_vocab_eos(v);
        numla_synthetic_vocab_destroy(&v);
    }
    if (c->index_n_heads > 0) {
        /* what engine/model/config_dsa.c will require of the written config */
        if (c->q_lora_rank <= 0 || c->index_head_dim <= 0 || c->index_topk <= 0 ||
            c->qk_rope_head_dim > c->index_head_dim)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "synth: preset %s: the indexer needs q_lora_rank "
                       "> 0, index_head_dim >= qk_rope_head_dim and index_topk > 0", p);
        if (!numla_synth_indexer_full(c, 0))
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "synth: preset %s: layer 0 must run its own "
                       "indexer (index_skip_topk_offset / index_topk_freq)", p);
    }
    if (opt->dtype != NUMLA_DTYPE_BF16 && opt->dtype != NUMLA_DTYPE_F32)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "synth: dtype must be bf16 or f32");
    if (numla_synth_is_v4(c)) {
        /* what transformers' DeepseekV4 modules need of the written config */
        if (opt->weights != NUMLA_QCKPT_NONE && opt->weights != NUMLA_QCKPT_FP8)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "synth: preset %s: deepseek_v4 is written in bf16 / "
                       "f32 or, with --weights fp8, in its published FP8 + FP4 form (not int8)", p);
        if (c->hidden_size % 32 || c->moe_intermediate_size % 32)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "synth: preset %s: FP4 experts need hidden and "
                       "moe_intermediate_size multiples of 32", p);
        if (c->num_attention_heads % c->o_groups)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "synth: preset %s: %d heads do not split into "
                       "%d output groups", p, (int)c->num_attention_heads, (int)c->o_groups);
        if (c->qk_rope_head_dim % 2 || c->qk_rope_head_dim > c->head_dim)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "synth: preset %s: qk_rope_head_dim %d must be "
                       "even and at most head_dim %d", p, (int)c->qk_rope_head_dim,
                       (int)c->head_dim);
        if (c->num_experts_per_tok > 256)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "synth: preset %s: at most 256 experts per "
                       "token in a hash table row, not %d", p, (int)c->num_experts_per_tok);
    }
    int32_t e = c->n_routed_experts, k = c->num_experts_per_tok;
    if (k > e)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "synth: preset %s picks %d experts per token but "
                   "has only %d routed experts", p, (int)k, (int)e);
    if (strcmp(c->topk_method, "greedy")) {
        if (e % c->n_group)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "synth: %d routed experts do not split into %d "
                       "groups (preset %s)", (int)e, (int)c->n_group, p);
        int32_t per = e / c->n_group;
        if (!strcmp(c->topk_method, "noaux_tc") && per < 2)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "synth: noaux_tc scores a group by its top-2 "
                       "experts: need >= 2 experts per group, have %d (preset %s)", (int)per, p);
        if ((int64_t)per * c->topk_group < k)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "synth: %d kept groups of %d experts cannot "
                       "supply %d experts per token (preset %s)", (int)c->topk_group, (int)per,
                       (int)k, p);
    }
    return NUMLA_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* the tensor plan                                                                           */

typedef enum numla_synth_kind {
    NUMLA_SYNTH_KIND_LINEAR,  /* N(0, gain^2/fan_in), fan_in = shape[1] */
    NUMLA_SYNTH_KIND_NORM,    /* uniform in [0.9, 1.1] */
    NUMLA_SYNTH_KIND_BIAS,    /* uniform in [-0.1, 0.1] */
    NUMLA_SYNTH_KIND_LM_HEAD, /* LINEAR with a log-normal per-row gain: decisive logits */
    NUMLA_SYNTH_KIND_HASH,    /* I64 (vocab, k): k distinct experts in [0, range) per row (V4's
                               * tid2eid) */
} numla_synth_kind;

typedef struct numla_synth_tensor {
    char name[96];
    numla_dtype dtype;
    int32_t ndim;
    int64_t shape[2];         /* (rows, cols), or (n) when ndim == 1 */
    numla_synth_kind kind;
    float gain;
    int64_t range;            /* HASH: the number of experts */
    size_t nbytes;            /* in the file: codes + scales when quantized */
    numla_qckpt_format quant; /* NONE, or the format this tensor is written in */
    uint64_t seed;            /* derived from the global seed and the name */
    uint8_t v4q;              /* DeepSeek-V4's published form (numla_synth_v4q_kind): written as
                               * codes + an E8M0 `.scale` tensor, from the values the plan's
                               * dtype would hold */
    struct numla_synth_progress *progress;
} numla_synth_tensor;

typedef struct numla_synth_progress {
    int on;
    int64_t done, total;
    double t0, last;
} numla_synth_progress;

typedef struct numla_synth_plan {
    numla_synth_tensor *t;
    size_t n, cap;
} numla_synth_plan;

/* Output layer (docs/design.md §8): row r of lm_head has std GAIN·exp(SIGMA·z_r)/sqrt(hidden). The
 * gain makes logits O(GAIN) instead of O(1); the log-normal row spread gives the maximum a
 * heavier tail, so the top-1/top-2 gap grows faster than the logits' spread (the margins it
 * gives: docs/synth.md; test_synth checks a bound on them). */
#define NUMLA_SYNTH_LM_HEAD_GAIN 6.0f
#define NUMLA_SYNTH_LM_HEAD_ROW_SIGMA 0.7f
/* Router logits std: wider gaps between the k-th and (k+1)-th expert than N(0,1). */
#define NUMLA_SYNTH_ROUTER_GAIN 2.0f

static uint64_t numla_synth_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static numla_status numla_synth_add(numla_synth_plan *p, const numla_synth_options *opt,
                                    numla_synth_kind kind, float gain, int64_t rows, int64_t cols,
                                    const char *fmt, ...) __attribute__((format(printf, 7, 8)));

/* Append one tensor: cols == 0 makes a vector of `rows`. */
static numla_status numla_synth_add(numla_synth_plan *p, const numla_synth_options *opt,
                                    numla_synth_kind kind, float gain, int64_t rows, int64_t cols,
                                    const char *fmt, ...)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 256;
        numla_synth_tensor *t = realloc(p->t, cap * sizeof *t);
        if (!t)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "synth: no memory for the tensor plan");
        p->t = t;
        p->cap = cap;
    }
    numla_synth_tensor *t = &p->t[p->n++];
    memset(t, 0, sizeof *t);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    /* V3 keeps its router bias in fp32 whatever the weights are; so do we. */
    t->dtype = kind == NUMLA_SYNTH_KIND_BIAS ? NUMLA_DTYPE_F32 : opt->dtype;
    t->ndim = cols ? 2 : 1;
    t->shape[0] = rows;
    t->shape[1] = cols;
    t->kind = kind;
    t->gain = gain;
    t->nbytes = (size_t)rows * (size_t)(cols ? cols : 1) * numla_dtype_size(t->dtype);
    if (numla_qckpt_quantizes(opt->weights, t->name, t->ndim, opt->keep_lm_head)) {
        t->quant = opt->weights;
        t->nbytes = (size_t)numla_qckpt_bytes(t->quant, rows, cols);
    }
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *s = t->name; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    t->seed = numla_synth_mix(h ^ numla_synth_mix(opt->seed + 0x9e3779b97f4a7c15ull));
    return NUMLA_STATUS_OK;
}

/* Store the last planned tensor in `dt` (an unquantized one; quantized tensors keep their
 * format). */
static void numla_synth_last_dtype(numla_synth_plan *p, numla_dtype dt)
{
    numla_synth_tensor *t = &p->t[p->n - 1];
    t->dtype = dt;
    if (t->quant == NUMLA_QCKPT_NONE)
        t->nbytes = (size_t)t->shape[0] * (size_t)(t->ndim == 2 ? t->shape[1] : 1) *
                    numla_dtype_size(dt);
}

/* DeepSeek-V4's published FP8 + FP4 form (--weights fp8; docs/quantization.md): the attention
 * projections, the indexer's wq_b and the shared expert as F8_E4M3 with an F8_E8M0 `.scale` per
 * 128 x 128 block; the routed experts as I8 pairs of e2m1 codes (element 2j in byte j's low
 * nibble) with an F8_E8M0 `.scale` per 32 of a row; scales the smallest power of two that keeps
 * a block within 448 (e4m3) or 6 (e2m1), codes rounded to nearest. The rest as --dtype. */
enum { NUMLA_SYNTH_V4Q_NONE = 0, NUMLA_SYNTH_V4Q_FP8, NUMLA_SYNTH_V4Q_FP4 };

/* The file shapes of a V4-quantized (n, k) weight: its codes and its scale grid. */
static void numla_synth_v4q_shapes(int kind, int64_t n, int64_t k, int64_t codes[2], int64_t scales[2])
{
    codes[0] = scales[0] = n;
    codes[1] = kind == NUMLA_SYNTH_V4Q_FP4 ? k / 2 : k;
    if (kind == NUMLA_SYNTH_V4Q_FP4) {
        scales[1] = k / 32;
    } else {
        scales[0] = (n + 127) / 128;
        scales[1] = (k + 127) / 128;
    }
}

/* Mark the last planned tensor for the published form (kind) when --weights fp8 asks. */
static void numla_synth_v4q_mark(numla_synth_plan *p, const numla_synth_options *opt, int kind)
{
    numla_synth_tensor *t = &p->t[p->n - 1];
    if (opt->weights != NUMLA_QCKPT_FP8)
        return;
    int64_t c[2], s[2];
    numla_synth_v4q_shapes(kind, t->shape[0], t->shape[1], c, s);
    t->v4q = (uint8_t)kind;
    t->quant = NUMLA_QCKPT_NONE;
    t->nbytes = (size_t)(c[0] * c[1] + s[0] * s[1]);
}

/* DeepSeek-V4: DeepSeek's own names and shapes (the published checkpoints'; transformers 5.25's
 * conversion mapping "deepseek_v4" renames them on load). mHC, the sinks, the compressors' `ape`
 * and the router bias are F32 (transformers keeps them in fp32), tid2eid I64. */
static numla_status numla_synth_plan_build_v4(const numla_synth_config *c,
                                              const numla_synth_options *opt, numla_synth_plan *p)
{
    const numla_synth_kind L = NUMLA_SYNTH_KIND_LINEAR, N = NUMLA_SYNTH_KIND_NORM;
    const numla_synth_kind B = NUMLA_SYNTH_KIND_BIAS;
    const int64_t d = c->hidden_size, H = c->num_attention_heads, D = c->head_dim;
    const int64_t hc = c->hc_mult, mix = (2 + hc) * hc, moe = c->moe_intermediate_size;
    const int64_t shared = c->n_shared_experts * moe, E = c->n_routed_experts;
    const int64_t G = c->o_groups, r = c->o_lora_rank, ql = c->q_lora_rank;
    const int64_t hi = c->index_n_heads, di = c->index_head_dim;

    NUMLA_CHECK(numla_synth_add(p, opt, L, (float)sqrt((double)d), c->vocab_size, d, "embed.weight"));
    /* the layers, then the MTP layer's block as mtp.0.* (docs/design.md §5.9) */
    for (int32_t i = 0; i < c->num_hidden_layers + (c->num_nextn_predict_layers > 0); i++) {
        const int32_t ratio = numla_synth_v4_ratio(c, i);
        const int mtpl = i >= c->num_hidden_layers;
        const char *pfx = mtpl ? "mtp." : "layers.";
        const int32_t li = mtpl ? i - c->num_hidden_layers : i;
        NUMLA_CHECK(numla_synth_add(p, opt, N, 1, d, 0, "%s%d.attn_norm.weight", pfx, li));
        NUMLA_CHECK(numla_synth_add(p, opt, L, 1, ql, d, "%s%d.attn.wq_a.weight", pfx, li)); numla_synth_v4q_mark(p, opt, NUMLA_SYNTH_V4Q_FP8);
        NUMLA_CHECK(numla_synth_add(p, opt, N, 1, ql, 0, "%s%d.attn.q_norm.weight", pfx, li));
        NUMLA_CHECK(numla_synth_add(p, opt, L, 1, H * D, ql, "%s%d.attn.wq_b.weight", pfx, li)); numla_synth_v4q_mark(p, opt, NUMLA_SYNTH_V4Q_FP8);
        NUMLA_CHECK(numla_synth_add(p, opt, L, 1, D, d, "%s%d.attn.wkv.weight", pfx, li)); numla_synth_v4q_mark(p, opt, NUMLA_SYNTH_V4Q_FP8);
        NUMLA_CHECK(numla_synth_add(p, opt, N, 1, D, 0, "%s%d.attn.norm.weight", pfx, li));
        NUMLA_CHECK(numla_synth_add(p, opt, L, 1, G * r, H * D / G, "%s%d.attn.wo_a.weight", pfx, li)); numla_synth_v4q_mark(p, opt, NUMLA_SYNTH_V4Q_FP8);
        NUMLA_CHECK(numla_synth_add(p, opt, L, 1, d, G * r, "%s%d.attn.wo_b.weight", pfx, li)); numla_synth_v4q_mark(p, opt, NUMLA_SYNTH_V4Q_FP8);
        NUMLA_CHECK(numla_synth_add(p, opt, B, 1, H, 0, "%s%d.attn.attn_sink", pfx, li));
        if (ratio) {
            /* CSA's compressor keeps two series (2 x head_dim), HCA's one */
            const int64_t w = ratio == 4 ? 2 * D : D;
            NUMLA_CHECK(numla_synth_add(p, opt, L, 1, w, d, "%s%d.attn.compressor.wkv.weight", pfx, li));
            NUMLA_CHECK(numla_synth_add(p, opt, L, 1, w, d, "%s%d.attn.compressor.wgate.weight", pfx, li));
            NUMLA_CHECK(numla_synth_add(p, opt, B, 1, ratio, w, "%s%d.attn.compressor.ape", pfx, li));
            NUMLA_CHECK(numla_synth_add(p, opt, N, 1, D, 0, "%s%d.attn.compressor.norm.weight", pfx, li));
        }
        if (ratio == 4) {
            NUMLA_CHECK(numla_synth_add(p, opt, L, 1, hi * di, ql, "%s%d.attn.indexer.wq_b.weight", pfx, li)); numla_synth_v4q_mark(p, opt, NUMLA_SYNTH_V4Q_FP8);
            NUMLA_CHECK(numla_synth_add(p, opt, L, 1, hi, d, "%s%d.attn.indexer.weights_proj.weight", pfx, li));
            NUMLA_CHECK(numla_synth_add(p, opt, L, 1, 2 * di, d,
                                        "%s%d.attn.indexer.compressor.wkv.weight", pfx, li));
            NUMLA_CHECK(numla_synth_add(p, opt, L, 1, 2 * di, d,
                                        "%s%d.attn.indexer.compressor.wgate.weight", pfx, li));
            NUMLA_CHECK(numla_synth_add(p, opt, B, 1, ratio, 2 * di, "%s%d.attn.indexer.compressor.ape", pfx, li));
            NUMLA_CHECK(numla_synth_add(p, opt, N, 1, di, 0,
                                        "%s%d.attn.indexer.compressor.norm.weight", pfx, li));
        }
        static const char *const site[2] = {"attn", "ffn"};
        for (int k = 0; k < 2; k++) {
            NUMLA_CHECK(numla_synth_add(p, opt, L, 1, mix, hc * d, "%s%d.hc_%s_fn", pfx, li, site[k]));
            numla_synth_last_dtype(p, NUMLA_DTYPE_F32);
            NUMLA_CHECK(numla_synth_add(p, opt, B, 1, mix, 0, "%s%d.hc_%s_base", pfx, li, site[k]));
            NUMLA_CHECK(numla_synth_add(p, opt, N, 1, 3, 0, "%s%d.hc_%s_scale", pfx, li, site[k]));
            numla_synth_last_dtype(p, NUMLA_DTYPE_F32);
        }
        NUMLA_CHECK(numla_synth_add(p, opt, N, 1, d, 0, "%s%d.ffn_norm.weight", pfx, li));
        NUMLA_CHECK(numla_synth_add(p, opt, L, NUMLA_SYNTH_ROUTER_GAIN, E, d, "%s%d.ffn.gate.weight", pfx, li));
        if (i < c->num_hash_layers && !mtpl) {
            NUMLA_CHECK(numla_synth_add(p, opt, NUMLA_SYNTH_KIND_HASH, 1, c->vocab_size,
                                        c->num_experts_per_tok, "%s%d.ffn.gate.tid2eid", pfx, li));
            p->t[p->n - 1].range = E;
            numla_synth_last_dtype(p, NUMLA_DTYPE_I64);
        } else {
            NUMLA_CHECK(numla_synth_add(p, opt, B, 1, E, 0, "%s%d.ffn.gate.bias", pfx, li));
        }
        for (int64_t e = 0; e < E; e++) {
            NUMLA_CHECK(numla_synth_add(p, opt, L, 1, moe, d, "%s%d.ffn.experts.%lld.w1.weight",
                                        pfx, li, (long long)e));
            numla_synth_v4q_mark(p, opt, NUMLA_SYNTH_V4Q_FP4);
            NUMLA_CHECK(numla_synth_add(p, opt, L, 1, d, moe, "%s%d.ffn.experts.%lld.w2.weight",
                                        pfx, li, (long long)e));
            numla_synth_v4q_mark(p, opt, NUMLA_SYNTH_V4Q_FP4);
            NUMLA_CHECK(numla_synth_add(p, opt, L, 1, moe, d, "%s%d.ffn.experts.%lld.w3.weight",
                                        pfx, li, (long long)e));
            numla_synth_v4q_mark(p, opt, NUMLA_SYNTH_V4Q_FP4);
        }
        if (shared > 0) {
            NUMLA_CHECK(numla_synth_add(p, opt, L, 1, shared, d, "%s%d.ffn.shared_experts.w1.weight", pfx, li)); numla_synth_v4q_mark(p, opt, NUMLA_SYNTH_V4Q_FP8);
            NUMLA_CHECK(numla_synth_add(p, opt, L, 1, d, shared, "%s%d.ffn.shared_experts.w2.weight", pfx, li)); numla_synth_v4q_mark(p, opt, NUMLA_SYNTH_V4Q_FP8);
            NUMLA_CHECK(numla_synth_add(p, opt, L, 1, shared, d, "%s%d.ffn.shared_experts.w3.weight", pfx, li)); numla_synth_v4q_mark(p, opt, NUMLA_SYNTH_V4Q_FP8);
        }
    }
    if (c->num_nextn_predict_layers > 0) { /* the MTP layer's own tensors beside its block */
        NUMLA_CHECK(numla_synth_add(p, opt, L, 1, d, d, "mtp.0.e_proj.weight")); numla_synth_v4q_mark(p, opt, NUMLA_SYNTH_V4Q_FP8);
        NUMLA_CHECK(numla_synth_add(p, opt, L, 1, d, d, "mtp.0.h_proj.weight")); numla_synth_v4q_mark(p, opt, NUMLA_SYNTH_V4Q_FP8);
        NUMLA_CHECK(numla_synth_add(p, opt, N, 1, d, 0, "mtp.0.enorm.weight"));
        NUMLA_CHECK(numla_synth_add(p, opt, N, 1, d, 0, "mtp.0.hnorm.weight"));
        NUMLA_CHECK(numla_synth_add(p, opt, N, 1, d, 0, "mtp.0.norm.weight"));
        NUMLA_CHECK(numla_synth_add(p, opt, L, 1, hc, hc * d, "mtp.0.hc_head_fn"));
        numla_synth_last_dtype(p, NUMLA_DTYPE_F32);
        NUMLA_CHECK(numla_synth_add(p, opt, B, 1, hc, 0, "mtp.0.hc_head_base"));
        NUMLA_CHECK(numla_synth_add(p, opt, N, 1, 1, 0, "mtp.0.hc_head_scale"));
        numla_synth_last_dtype(p, NUMLA_DTYPE_F32);
    }
    NUMLA_CHECK(numla_synth_add(p, opt, N, 1, d, 0, "norm.weight"));
    NUMLA_CHECK(numla_synth_add(p, opt, NUMLA_SYNTH_KIND_LM_HEAD, NUMLA_SYNTH_LM_HEAD_GAIN,
                                c->vocab_size, d, "head.weight"));
    NUMLA_CHECK(numla_synth_add(p, opt, L, 1, hc, hc * d, "hc_head_fn"));
    numla_synth_last_dtype(p, NUMLA_DTYPE_F32);
    NUMLA_CHECK(numla_synth_add(p, opt, B, 1, hc, 0, "hc_head_base"));
    NUMLA_CHECK(numla_synth_add(p, opt, N, 1, 1, 0, "hc_head_scale"));
    numla_synth_last_dtype(p, NUMLA_DTYPE_F32);
    for (size_t i = 0; i < p->n; i++) /* the V3 names' fp8 rule never applies to V4 */
        if (p->t[i].quant != NUMLA_QCKPT_NONE) {
            p->t[i].quant = NUMLA_QCKPT_NONE;
            p->t[i].nbytes = (size_t)p->t[i].shape[0] * (size_t)p->t[i].shape[1] *
                             numla_dtype_size(p->t[i].dtype);
        }
    return NUMLA_STATUS_OK;
}

/* Decoder layer i's tensors (HF modeling_deepseek names): MoE or dense MLP, with or without the
 * DSA indexer. */
static numla_status numla_synth_plan_layer(const numla_synth_config *c,
                                           const numla_synth_options *opt, numla_synth_plan *p,
                                           int32_t i, int moe_mlp, int indexer)
{
    const numla_synth_kind L = NUMLA_SYNTH_KIND_LINEAR, N = NUMLA_SYNTH_KIND_NORM;
    int64_t d = c->hidden_size, H = c->num_attention_heads;
    int64_t qk = c->qk_nope_head_dim + c->qk_rope_head_dim;
    int64_t moe = c->moe_intermediate_size, shared = c->n_shared_experts * moe;
    int v3 = !strcmp(c->topk_method, "noaux_tc");
    const char *pre = "model.layers";
    NUMLA_CHECK(numla_synth_add(p, opt, N, 1, d, 0, "%s.%d.input_layernorm.weight", pre, i));
    if (c->q_lora_rank > 0) {
        NUMLA_CHECK(numla_synth_add(p, opt, L, 1, c->q_lora_rank, d,
                                    "%s.%d.self_attn.q_a_proj.weight", pre, i));
        NUMLA_CHECK(numla_synth_add(p, opt, N, 1, c->q_lora_rank, 0,
                                    "%s.%d.self_attn.q_a_layernorm.weight", pre, i));
        NUMLA_CHECK(numla_synth_add(p, opt, L, 1, H * qk, c->q_lora_rank,
                                    "%s.%d.self_attn.q_b_proj.weight", pre, i));
    } else {
        NUMLA_CHECK(numla_synth_add(p, opt, L, 1, H * qk, d, "%s.%d.self_attn.q_proj.weight",
                                    pre, i));
    }
    NUMLA_CHECK(numla_synth_add(p, opt, L, 1, c->kv_lora_rank + c->qk_rope_head_dim, d,
                                "%s.%d.self_attn.kv_a_proj_with_mqa.weight", pre, i));
    NUMLA_CHECK(numla_synth_add(p, opt, N, 1, c->kv_lora_rank, 0,
                                "%s.%d.self_attn.kv_a_layernorm.weight", pre, i));
    NUMLA_CHECK(numla_synth_add(p, opt, L, 1, H * (c->qk_nope_head_dim + c->v_head_dim),
                                c->kv_lora_rank, "%s.%d.self_attn.kv_b_proj.weight", pre, i));
    NUMLA_CHECK(numla_synth_add(p, opt, L, 1, d, H * c->v_head_dim,
                                "%s.%d.self_attn.o_proj.weight", pre, i));
    if (indexer) {
        /* transformers' DeepseekV32Indexer / GlmMoeDsaIndexer; "shared" layers have none */
        const int64_t hi = c->index_n_heads, di = c->index_head_dim;
        NUMLA_CHECK(numla_synth_add(p, opt, L, 1, hi * di, c->q_lora_rank,
                                    "%s.%d.self_attn.indexer.wq_b.weight", pre, i));
        NUMLA_CHECK(numla_synth_add(p, opt, L, 1, di, d, "%s.%d.self_attn.indexer.wk.weight",
                                    pre, i));
        NUMLA_CHECK(numla_synth_add(p, opt, N, 1, di, 0,
                                    "%s.%d.self_attn.indexer.k_norm.weight", pre, i));
        NUMLA_CHECK(numla_synth_add(p, opt, NUMLA_SYNTH_KIND_BIAS, 1, di, 0,
                                    "%s.%d.self_attn.indexer.k_norm.bias", pre, i));
        numla_synth_last_dtype(p, opt->dtype); /* a LayerNorm bias: the model's dtype */
        NUMLA_CHECK(numla_synth_add(p, opt, L, 1, hi, d,
                                    "%s.%d.self_attn.indexer.weights_proj.weight", pre, i));
        if (c->index_weights_f32)
            numla_synth_last_dtype(p, NUMLA_DTYPE_F32);
    }
    if (!moe_mlp) {
        int64_t f = c->intermediate_size;
        NUMLA_CHECK(numla_synth_add(p, opt, L, 1, f, d, "%s.%d.mlp.gate_proj.weight", pre, i));
        NUMLA_CHECK(numla_synth_add(p, opt, L, 1, f, d, "%s.%d.mlp.up_proj.weight", pre, i));
        NUMLA_CHECK(numla_synth_add(p, opt, L, 1, d, f, "%s.%d.mlp.down_proj.weight", pre, i));
    } else {
        NUMLA_CHECK(numla_synth_add(p, opt, L, NUMLA_SYNTH_ROUTER_GAIN, c->n_routed_experts, d,
                                    "%s.%d.mlp.gate.weight", pre, i));
        if (v3)
            NUMLA_CHECK(numla_synth_add(p, opt, NUMLA_SYNTH_KIND_BIAS, 1, c->n_routed_experts,
                                        0, "%s.%d.mlp.gate.e_score_correction_bias", pre, i));
        for (int32_t e = 0; e < c->n_routed_experts; e++) {
            NUMLA_CHECK(numla_synth_add(p, opt, L, 1, moe, d,
                                        "%s.%d.mlp.experts.%d.gate_proj.weight", pre, i, e));
            NUMLA_CHECK(numla_synth_add(p, opt, L, 1, moe, d,
                                        "%s.%d.mlp.experts.%d.up_proj.weight", pre, i, e));
            NUMLA_CHECK(numla_synth_add(p, opt, L, 1, d, moe,
                                        "%s.%d.mlp.experts.%d.down_proj.weight", pre, i, e));
        }
        if (shared > 0) {
            NUMLA_CHECK(numla_synth_add(p, opt, L, 1, shared, d,
                                        "%s.%d.mlp.shared_experts.gate_proj.weight", pre, i));
            NUMLA_CHECK(numla_synth_add(p, opt, L, 1, shared, d,
                                        "%s.%d.mlp.shared_experts.up_proj.weight", pre, i));
            NUMLA_CHECK(numla_synth_add(p, opt, L, 1, d, shared,
                                        "%s.%d.mlp.shared_experts.down_proj.weight", pre, i));
        }
    }
    NUMLA_CHECK(numla_synth_add(p, opt, N, 1, d, 0, "%s.%d.post_attention_layernorm.weight",
                                pre, i));
    return NUMLA_STATUS_OK;
}

/* Append a copy of plan tensor `src` (the same values) named `name`. */
static numla_status numla_synth_plan_copy(numla_synth_plan *p, const numla_synth_options *opt,
                                          size_t src, const char *name)
{
    const numla_synth_tensor t = p->t[src];
    NUMLA_CHECK(numla_synth_add(p, opt, t.kind, t.gain, t.shape[0], t.ndim == 2 ? t.shape[1] : 0,
                                "%s", name));
    p->t[p->n - 1].seed = t.seed;
    return NUMLA_STATUS_OK;
}

/* HF modeling_deepseek names and shapes, in checkpoint order. */
static numla_status numla_synth_plan_build(const numla_synth_config *c,
                                           const numla_synth_options *opt, numla_synth_plan *p)
{
    const numla_synth_kind L = NUMLA_SYNTH_KIND_LINEAR, N = NUMLA_SYNTH_KIND_NORM;
    int64_t d = c->hidden_size;
    if (numla_synth_is_v4(c))
        return numla_synth_plan_build_v4(c, opt, p);

    /* The embedding is a lookup, not a matmul: rows of unit variance (gain cancels 1/sqrt(d)). */
    const size_t embed = p->n;
    NUMLA_CHECK(numla_synth_add(p, opt, L, (float)sqrt((double)d), c->vocab_size, d,
                                "model.embed_tokens.weight"));
    for (int32_t i = 0; i < c->num_hidden_layers; i++)
        NUMLA_CHECK(numla_synth_plan_layer(c, opt, p, i, numla_synth_is_moe(c, i),
                                           numla_synth_indexer_full(c, i)));
    NUMLA_CHECK(numla_synth_add(p, opt, N, 1, d, 0, "model.norm.weight"));
    const size_t head = p->n;
    NUMLA_CHECK(numla_synth_add(p, opt, NUMLA_SYNTH_KIND_LM_HEAD, NUMLA_SYNTH_LM_HEAD_GAIN,
                                c->vocab_size, d, "lm_head.weight"));
    if (c->num_nextn_predict_layers > 0) {
        /* DeepSeek-V3's layer 61 (GLM-5's layer 78): an MoE decoder layer (with its own
         * indexer on a DSA model), the MTP projections and norms, and copies of the embedding
         * and lm_head (the checkpoints store them; numla reads the main ones) */
        const int32_t n = c->num_hidden_layers;
        char name[96];
        NUMLA_CHECK(numla_synth_plan_layer(c, opt, p, n, c->n_routed_experts > 0,
                                           c->index_n_heads > 0));
        NUMLA_CHECK(numla_synth_add(p, opt, N, 1, d, 0, "model.layers.%d.enorm.weight", n));
        NUMLA_CHECK(numla_synth_add(p, opt, N, 1, d, 0, "model.layers.%d.hnorm.weight", n));
        NUMLA_CHECK(numla_synth_add(p, opt, L, 1, d, 2 * d, "model.layers.%d.eh_proj.weight", n));
        snprintf(name, sizeof name, "model.layers.%d.embed_tokens.weight", (int)n);
        NUMLA_CHECK(numla_synth_plan_copy(p, opt, embed, name));
        NUMLA_CHECK(numla_synth_add(p, opt, N, 1, d, 0, "model.layers.%d.shared_head.norm.weight",
                                    n));
        snprintf(name, sizeof name, "model.layers.%d.shared_head.head.weight", (int)n);
        NUMLA_CHECK(numla_synth_plan_copy(p, opt, head, name));
    }
    return NUMLA_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* weight values                                                                             */

/* A 32-bit integer hash (good avalanche, vectorizes with SSE2). */
static inline uint32_t numla_synth_hash32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    return x ^ (x >> 16);
}

/* Element i's hash: tensors hold < 2^32 elements (V3's largest has 0.93e9). */
static inline uint32_t numla_synth_elem(uint32_t seed, size_t i)
{
    return numla_synth_hash32(seed ^ ((uint32_t)i * 0x9e3779b9u));
}

/* Uniform in [0, 1) from the top 24 bits. */
static inline float numla_synth_unit(uint32_t u) { return (float)(u >> 8) * 0x1.0p-24f; }

/* Approximately standard normal: Irwin-Hall sum of the four bytes of a hash, rescaled to unit
 * variance. One hash per element, 1021 levels, tails cut at ±3.46σ — plenty for synthetic
 * bf16 weights, and several times faster than Box-Muller for multi-GB models. */
static inline float numla_synth_gauss(uint32_t u)
{
    int32_t s = (int32_t)((u & 0xff) + ((u >> 8) & 0xff) + ((u >> 16) & 0xff) + (u >> 24));
    return ((float)s * (1.0f / 256.0f) - 2.0f) * 1.7320508f;
}

/* float -> bf16 round to nearest even, for the finite values generated here. */
static inline uint16_t numla_synth_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* One thread's share of a fill: rows [ra, rb) of the element range [e0, e1). */
typedef struct numla_synth_job {
    const numla_synth_tensor *t;
    void *dst;
    size_t e0, e1;
    int64_t ra, rb;
} numla_synth_job;

static void *numla_synth_rows(void *arg)
{
    const numla_synth_job *jb = arg;
    const numla_synth_tensor *t = jb->t;
    /* Vectors are `rows` rows of one element, which keeps the loops below uniform. */
    const size_t cols = t->ndim == 2 ? (size_t)t->shape[1] : 1;
    const size_t e0 = jb->e0, e1 = jb->e1;
    const uint32_t seed = (uint32_t)t->seed, row_seed = (uint32_t)(t->seed >> 32);
    const int f32 = t->dtype == NUMLA_DTYPE_F32;
    const numla_synth_kind kind = t->kind;
    const float base = t->gain / sqrtf((float)cols);
    /* Element rs + j goes to dst[rs + j - e0]; j >= j0 keeps the index >= 0. */
    float *of = jb->dst;
    uint16_t *ob = jb->dst;
    for (int64_t r = jb->ra; r < jb->rb; r++) {
        size_t rs = (size_t)r * cols;
        size_t j0 = rs < e0 ? e0 - rs : 0, j1 = rs + cols > e1 ? e1 - rs : cols;
        if (kind == NUMLA_SYNTH_KIND_HASH) {
            /* k distinct experts: hashed candidates, a repeat drawn again (k <= 256) */
            int64_t row[256], *oi = jb->dst;
            uint32_t draw = 0;
            for (size_t j = 0; j < cols; j++) {
                int64_t e;
                int seen;
                do {
                    e = (int64_t)(numla_synth_elem(seed ^ (uint32_t)r * 0x85ebca6bu, draw++) %
                                  (uint32_t)t->range);
                    seen = 0;
                    for (size_t q = 0; q < j; q++)
                        seen |= row[q] == e;
                } while (seen);
                row[j] = e;
            }
            for (size_t j = j0; j < j1; j++)
                oi[rs + j - e0] = row[j];
            continue;
        }
        if (kind == NUMLA_SYNTH_KIND_NORM || kind == NUMLA_SYNTH_KIND_BIAS) {
            float lo = kind == NUMLA_SYNTH_KIND_NORM ? 0.9f : -0.1f;
            for (size_t j = j0; j < j1; j++) {
                float v = lo + 0.2f * numla_synth_unit(numla_synth_elem(seed, rs + j));
                if (f32)
                    of[rs + j - e0] = v;
                else
                    ob[rs + j - e0] = numla_synth_bf16(v);
            }
            continue;
        }
        float scale = base;
        if (kind == NUMLA_SYNTH_KIND_LM_HEAD)
            scale *= expf(NUMLA_SYNTH_LM_HEAD_ROW_SIGMA *
                          numla_synth_gauss(numla_synth_elem(row_seed, (size_t)r)));
        if (f32)
            for (size_t j = j0; j < j1; j++)
                of[rs + j - e0] = scale * numla_synth_gauss(numla_synth_elem(seed, rs + j));
        else
            for (size_t j = j0; j < j1; j++)
                ob[rs + j - e0] =
                    numla_synth_bf16(scale * numla_synth_gauss(numla_synth_elem(seed, rs + j)));
    }
    return NULL;
}

/* Bytes [offset, offset + nbytes) of tensor `ctx` (see numla_safetensors_fill_fn).
 * Plain pthreads, not OpenMP: the writer's I/O thread runs between chunks, and OpenMP's
 * spin-waiting workers took its core (figures: docs/synth.md).
 * The thread count follows OMP_NUM_THREADS / omp_get_max_threads(). */
static numla_status numla_synth_fill(void *ctx, void *dst, size_t offset, size_t nbytes)
{
    const numla_synth_tensor *t = ctx;
    const size_t cols = t->ndim == 2 ? (size_t)t->shape[1] : 1;
    const size_t esz = numla_dtype_size(t->dtype);
    const size_t e0 = offset / esz, e1 = e0 + nbytes / esz;
    const int64_t r0 = (int64_t)(e0 / cols), r1 = (int64_t)((e1 + cols - 1) / cols);
    enum { MAX_THREADS = 256 };
    int nt = nbytes < ((size_t)256 << 10) ? 1 : omp_get_max_threads();
    nt = nt < 1 ? 1 : nt > MAX_THREADS ? MAX_THREADS : nt;
    if (nt > r1 - r0)
        nt = (int)(r1 - r0);
    numla_synth_job jobs[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    for (int k = 0; k < nt; k++) {
        jobs[k] = (numla_synth_job){.t = t, .dst = dst, .e0 = e0, .e1 = e1,
                                    .ra = r0 + (r1 - r0) * k / nt,
                                    .rb = r0 + (r1 - r0) * (k + 1) / nt};
        if (k > 0)
            started[k] = pthread_create(&th[k], NULL, numla_synth_rows, &jobs[k]) == 0;
    }
    numla_synth_rows(&jobs[0]);
    for (int k = 1; k < nt; k++) {
        if (started[k])
            pthread_join(th[k], NULL);
        else
            numla_synth_rows(&jobs[k]); /* no thread: do its share here */
    }

    numla_synth_progress *pr = t->progress;
    if (pr && pr->on) {
        pr->done += (int64_t)nbytes;
        double now = numla_now_s();
        if (now - pr->last > 0.25 || pr->done == pr->total) {
            pr->last = now;
            fprintf(stderr, "\rsynth: %6.2f / %.2f GB  (%.0f MB/s)  ", pr->done * 1e-9,
                    pr->total * 1e-9, pr->done * 1e-6 / (now - pr->t0 + 1e-9));
            if (pr->done == pr->total)
                fprintf(stderr, "\n");
        }
    }
    return NUMLA_STATUS_OK;
}

/* Rows [r0, r1) of a plan tensor as fp32: the values its unquantized file would hold (so a
 * quantized synthetic model is the quantization of the bf16/f32 one of the same seed). */
static numla_status numla_synth_src_rows(void *ctx, int64_t r0, int64_t r1, float *dst)
{
    const numla_synth_tensor *t = ctx;
    const size_t cols = (size_t)t->shape[1], n = (size_t)(r1 - r0) * cols;
    void *tmp = malloc(n * numla_dtype_size(t->dtype));
    if (!tmp)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "synth: no memory for rows of %s", t->name);
    numla_synth_job jb = {.t = t, .dst = tmp, .e0 = (size_t)r0 * cols, .e1 = (size_t)r1 * cols,
                          .ra = r0, .rb = r1};
    numla_synth_rows(&jb);
    for (size_t i = 0; i < n; i++)
        dst[i] = numla_load_f32(tmp, t->dtype, i);
    free(tmp);
    return NUMLA_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* files                                                                                     */

static numla_status numla_synth_mkdir(const char *dir)
{
    char buf[4096];
    if (strlen(dir) >= sizeof buf)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "synth: output path too long");
    strcpy(buf, dir);
    for (char *s = buf + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            NUMLA_FAIL(NUMLA_STATUS_IO, "synth: cannot create %s: %s", buf, strerror(errno));
        *s = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        NUMLA_FAIL(NUMLA_STATUS_IO, "synth: cannot create %s: %s", buf, strerror(errno));
    struct stat st;
    if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
        NUMLA_FAIL(NUMLA_STATUS_IO, "synth: %s is not a directory", buf);
    return NUMLA_STATUS_OK;
}

static numla_status numla_synth_json_save(json_t *root, const char *path)
{
    if (!root)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "synth: cannot build %s", path);
    int rc = json_dump_file(root, path, JSON_INDENT(2) | JSON_REAL_PRECISION(12));
    json_decref(root);
    if (rc != 0)
        NUMLA_FAIL(NUMLA_STATUS_IO, "synth: cannot write %s: %s", path, strerror(errno));
    return NUMLA_STATUS_OK;
}

/* The per-layer lists of a glm_moe_dsa config: `kind(c, i)` picks names[1] or names[0]. */
static json_t *numla_synth_layer_list(const numla_synth_config *c,
                                      int (*kind)(const numla_synth_config *, int32_t),
                                      const char *no, const char *yes)
{
    json_t *a = json_array();
    for (int32_t i = 0; a && i < c->num_hidden_layers; i++)
        if (json_array_append_new(a, json_string(kind(c, i) ? yes : no))) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* deepseek_v4's config.json in DeepSeek's published spelling: per-layer compress_ratios,
 * num_hash_layers, qk_rope_head_dim, rope_scaling (YaRN of the compressed layers) beside
 * rope_theta and compress_rope_theta. */
static numla_status numla_synth_config_write_v4(const numla_synth_config *c, numla_dtype dt,
                                                numla_qckpt_format weights, const char *path)
{
    json_t *o = json_object(), *cr = json_array();
    json_t *rs = json_pack("{s:s, s:f, s:I, s:f, s:f}", "type", "yarn", "factor", c->yarn_factor,
                           "original_max_position_embeddings",
                           (json_int_t)c->yarn_original_max_position_embeddings, "beta_fast",
                           c->yarn_beta_fast, "beta_slow", c->yarn_beta_slow);
    int bad = !o || !cr || !rs;
    /* one entry more for the MTP layer, as the published lists have */
    for (int32_t i = 0; !bad && i < c->num_hidden_layers + (c->num_nextn_predict_layers > 0); i++)
        bad |= json_array_append_new(cr, json_integer(numla_synth_v4_ratio(c, i)));
    if (bad) {
        json_decref(o);
        json_decref(cr);
        json_decref(rs);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "synth: cannot build %s", path);
    }
#define SET_(k, v) bad |= json_object_set_new(o, k, v)
    SET_("architectures", json_pack("[s]", c->architecture));
    SET_("model_type", json_string(c->model_type));
    SET_("vocab_size", json_integer(c->vocab_size));
    SET_("hidden_size", json_integer(c->hidden_size));
    SET_("moe_intermediate_size", json_integer(c->moe_intermediate_size));
    SET_("num_hidden_layers", json_integer(c->num_hidden_layers));
    SET_("num_attention_heads", json_integer(c->num_attention_heads));
    SET_("num_key_value_heads", json_integer(1));
    SET_("head_dim", json_integer(c->head_dim));
    SET_("qk_rope_head_dim", json_integer(c->qk_rope_head_dim));
    SET_("q_lora_rank", json_integer(c->q_lora_rank));
    SET_("o_groups", json_integer(c->o_groups));
    SET_("o_lora_rank", json_integer(c->o_lora_rank));
    SET_("sliding_window", json_integer(c->sliding_window));
    SET_("compress_ratios", cr);
    SET_("compress_rope_theta", json_real(c->compress_rope_theta));
    SET_("rope_theta", json_real(c->rope_theta));
    SET_("rope_scaling", rs);
    SET_("max_position_embeddings", json_integer(c->max_position_embeddings));
    SET_("index_n_heads", json_integer(c->index_n_heads));
    SET_("index_head_dim", json_integer(c->index_head_dim));
    SET_("index_topk", json_integer(c->index_topk));
    SET_("hc_mult", json_integer(c->hc_mult));
    SET_("hc_sinkhorn_iters", json_integer(c->hc_sinkhorn_iters));
    SET_("hc_eps", json_real(c->hc_eps));
    SET_("n_routed_experts", json_integer(c->n_routed_experts));
    SET_("n_shared_experts", json_integer(c->n_shared_experts));
    SET_("num_experts_per_tok", json_integer(c->num_experts_per_tok));
    SET_("num_hash_layers", json_integer(c->num_hash_layers));
    SET_("scoring_func", json_string(c->scoring_func));
    SET_("topk_method", json_string(c->topk_method));
    SET_("norm_topk_prob", json_boolean(c->norm_topk_prob));
    SET_("routed_scaling_factor", json_real(c->routed_scaling_factor));
    SET_("swiglu_limit", json_real(c->swiglu_limit));
    SET_("hidden_act", json_string("silu"));
    SET_("rms_norm_eps", json_real(c->rms_norm_eps));
    SET_("bos_token_id", json_integer(c->bos_token_id));
    SET_("eos_token_id", json_integer(c->eos_token_id));
    SET_("attention_bias", json_false());
    SET_("attention_dropout", json_real(0.0));
    SET_("initializer_range", json_real(0.02));
    SET_("num_nextn_predict_layers", json_integer(c->num_nextn_predict_layers > 0));
    SET_("tie_word_embeddings", json_false());
    SET_("use_cache", json_true());
    SET_("torch_dtype", json_string(dt == NUMLA_DTYPE_F32 ? "float32" : "bfloat16"));
    if (weights == NUMLA_QCKPT_FP8) {
        /* as V4-Flash / V4-Pro publish it */
        SET_("quantization_config",
             json_pack("{s:s, s:s, s:s, s:s, s:[i,i]}", "activation_scheme", "dynamic", "fmt", "e4m3",
                       "quant_method", "fp8", "scale_fmt", "ue8m0", "weight_block_size", 128, 128));
        SET_("expert_dtype", json_string("fp4"));
    }
#undef SET_
    if (bad) {
        json_decref(o);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "synth: cannot build %s", path);
    }
    return numla_synth_json_save(o, path);
}

static numla_status numla_synth_config_write(const numla_synth_config *c, numla_dtype dt,
                                             numla_qckpt_format weights, const char *path)
{
    if (numla_synth_is_v4(c))
        return numla_synth_config_write_v4(c, dt, weights, path);
    /* YaRN as DeepSeek publishes it (rope_scaling beside rope_theta), or plain RoPE the way
     * transformers 5 writes it (GLM-5: rope_parameters holding rope_theta) */
    json_t *rs = c->yarn_factor > 0
                     ? json_pack("{s:s, s:f, s:I, s:f, s:f, s:f, s:f}", "type", "yarn", "factor",
                                 c->yarn_factor, "original_max_position_embeddings",
                                 (json_int_t)c->yarn_original_max_position_embeddings,
                                 "beta_fast", c->yarn_beta_fast, "beta_slow", c->yarn_beta_slow,
                                 "mscale", c->yarn_mscale, "mscale_all_dim",
                                 c->yarn_mscale_all_dim)
                     : json_pack("{s:s, s:f}", "rope_type", "default", "rope_theta",
                                 c->rope_theta);
    json_t *o = json_object();
    if (!rs || !o) {
        json_decref(rs);
        json_decref(o);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "synth: cannot build %s", path);
    }
    int bad = 0;
#define SET_(k, v) bad |= json_object_set_new(o, k, v)
    SET_("architectures", json_pack("[s]", c->architecture));
    SET_("model_type", json_string(c->model_type));
    SET_("vocab_size", json_integer(c->vocab_size));
    SET_("hidden_size", json_integer(c->hidden_size));
    SET_("intermediate_size", json_integer(c->intermediate_size));
    SET_("moe_intermediate_size", json_integer(c->moe_intermediate_size));
    SET_("num_hidden_layers", json_integer(c->num_hidden_layers));
    SET_("num_attention_heads", json_integer(c->num_attention_heads));
    SET_("num_key_value_heads", json_integer(c->num_key_value_heads));
    SET_("n_shared_experts", json_integer(c->n_shared_experts));
    SET_("n_routed_experts", json_integer(c->n_routed_experts));
    SET_("num_experts_per_tok", json_integer(c->num_experts_per_tok));
    SET_("routed_scaling_factor", json_real(c->routed_scaling_factor));
    SET_("topk_method", json_string(c->topk_method));
    SET_("n_group", json_integer(c->n_group));
    SET_("topk_group", json_integer(c->topk_group));
    SET_("scoring_func", json_string(c->scoring_func));
    SET_("norm_topk_prob", json_boolean(c->norm_topk_prob));
    SET_("first_k_dense_replace", json_integer(c->first_k_dense_replace));
    SET_("moe_layer_freq", json_integer(c->moe_layer_freq));
    SET_("kv_lora_rank", json_integer(c->kv_lora_rank));
    SET_("q_lora_rank", c->q_lora_rank > 0 ? json_integer(c->q_lora_rank) : json_null());
    SET_("qk_rope_head_dim", json_integer(c->qk_rope_head_dim));
    SET_("qk_nope_head_dim", json_integer(c->qk_nope_head_dim));
    SET_("v_head_dim", json_integer(c->v_head_dim));
    SET_("max_position_embeddings", json_integer(c->max_position_embeddings));
    SET_("rms_norm_eps", json_real(c->rms_norm_eps));
    if (c->yarn_factor > 0) {
        SET_("rope_theta", json_real(c->rope_theta));
        SET_("rope_scaling", rs);
    } else {
        SET_("rope_parameters", rs);
    }
    SET_("bos_token_id", json_integer(c->bos_token_id));
    SET_("eos_token_id", json_integer(c->eos_token_id));
    SET_("tie_word_embeddings", json_false());
    SET_("hidden_act", json_string("silu"));
    SET_("attention_bias", json_false());
    SET_("attention_dropout", json_real(0.0));
    SET_("aux_loss_alpha", json_real(0.001));
    SET_("seq_aux", json_true());
    SET_("ep_size", json_integer(1));
    SET_("initializer_range", json_real(0.02));
    SET_("pretraining_tp", json_integer(1));
    SET_("use_cache", json_true());
    if (strcmp(c->model_type, "deepseek_v2") || c->num_nextn_predict_layers > 0)
        SET_("num_nextn_predict_layers", json_integer(c->num_nextn_predict_layers));
    if (c->index_n_heads > 0) {
        SET_("index_n_heads", json_integer(c->index_n_heads));
        SET_("index_head_dim", json_integer(c->index_head_dim));
        SET_("index_topk", json_integer(c->index_topk));
    }
    if (c->layer_type_lists) {
        json_t *it = numla_synth_layer_list(c, numla_synth_indexer_full, "shared", "full");
        json_t *ml = numla_synth_layer_list(c, numla_synth_is_moe, "dense", "sparse");
        bad |= !it || !ml;
        SET_("indexer_types", it ? it : json_null());
        SET_("mlp_layer_types", ml ? ml : json_null());
    }
    SET_("torch_dtype", json_string(dt == NUMLA_DTYPE_F32 ? "float32" : "bfloat16"));
#undef SET_
    if (!bad && weights != NUMLA_QCKPT_NONE && numla_qckpt_config_set(o, weights) != NUMLA_STATUS_OK)
        bad = 1;
    if (bad) {
        json_decref(o);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "synth: cannot build %s", path);
    }
    return numla_synth_json_save(o, path);
}

static char *numla_synth_path(const char *dir, const char *name)
{
    char *p = NULL;
    return asprintf(&p, "%s/%s", dir, name) < 0 ? NULL : p;
}

/* tokenizer.json and tokenizer_config.json of the synthetic vocabulary of V tokens. */
static numla_status numla_synth_tokenizer_write(const char *out_dir, int32_t V)
{
    numla_synthetic_vocab *v = NULL;
    json_t *tok = NULL, *cfg = NULL;
    char *pt = numla_synth_path(out_dir, "tokenizer.json");
    char *pc = numla_synth_path(out_dir, "tokenizer_config.json");
    numla_status s = pt && pc ? numla_synthetic_vocab_create(V, &v)
                              : numla_error_set(NUMLA_STATUS_NO_MEMORY, __FILE__, __LINE__,
                                                __func__, "synth: no memory");
    if (s == NUMLA_STATUS_OK)
        s = numla_synthetic_vocab_tokenizer_json(v, &tok, &cfg);
    if (s == NUMLA_STATUS_OK) {
        s = numla_synth_json_save(tok, pt); /* takes the reference */
        tok = NULL;
    }
    if (s == NUMLA_STATUS_OK) {
        s = numla_synth_json_save(cfg, pc);
        cfg = NULL;
    }
    if (s != NUMLA_STATUS_OK)
        numla_error_frame(__FILE__, __LINE__, __func__);
    json_decref(tok);
    json_decref(cfg);
    numla_synthetic_vocab_destroy(&v);
    free(pt);
    free(pc);
    return s;
}

/* ---- DeepSeek-V4's published form: scales, then codes chunk by chunk ------------------------ */

typedef struct numla_synth_v4q {
    const numla_synth_tensor *t;
    int64_t codes[2], grid[2]; /* file shapes: codes, scales */
    uint8_t *scales;           /* grid[0] x grid[1] E8M0 bytes */
} numla_synth_v4q;

/* The E8M0 byte of a block whose largest |w| is amax, for codes whose largest magnitude is top. */
static uint8_t numla_synth_v4q_scale(float amax, float top)
{
    return amax > 0 ? numla_f32_to_e8m0(amax / top) : 127;
}

/* The nearest e2m1 code of x (|x| <= 6 after scaling; the lower code on a tie): the number of
 * midpoints between the magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 that |x| passes. */
static uint8_t numla_synth_e2m1(float x)
{
    static const float mid[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    const float a = fabsf(x);
    int c = 0;
    for (int i = 0; i < 7; i++)
        c += a > mid[i];
    return (uint8_t)(c | (x < 0 && c ? 8 : 0));
}

static numla_status numla_synth_v4q_create(const numla_synth_tensor *t, numla_synth_v4q *q)
{
    const int64_t n = t->shape[0], k = t->shape[1];
    q->t = t;
    numla_synth_v4q_shapes(t->v4q, n, k, q->codes, q->grid);
    q->scales = calloc((size_t)(q->grid[0] * q->grid[1]), 1);
    float *band = malloc((size_t)128 * (size_t)k * sizeof *band);
    float *amax = calloc((size_t)q->grid[1], sizeof *amax);
    numla_status s = q->scales && band && amax ? NUMLA_STATUS_OK
                                               : numla_error_set(NUMLA_STATUS_NO_MEMORY, __FILE__, __LINE__,
                                                                 __func__, "synth: no memory for %s", t->name);
    for (int64_t r0 = 0; r0 < n && s == NUMLA_STATUS_OK; r0 += 128) {
        const int64_t nr = n - r0 < 128 ? n - r0 : 128;
        s = numla_synth_src_rows((void *)t, r0, r0 + nr, band);
        if (t->v4q == NUMLA_SYNTH_V4Q_FP4) {
            for (int64_t r = 0; r < nr; r++)
                for (int64_t b = 0; b < k / 32; b++) {
                    float m = 0;
                    for (int j = 0; j < 32; j++)
                        m = fmaxf(m, fabsf(band[r * k + 32 * b + j]));
                    q->scales[(r0 + r) * q->grid[1] + b] = numla_synth_v4q_scale(m, 6.0f);
                }
            continue;
        }
        memset(amax, 0, (size_t)q->grid[1] * sizeof *amax);
        for (int64_t r = 0; r < nr; r++)
            for (int64_t c = 0; c < k; c++)
                amax[c / 128] = fmaxf(amax[c / 128], fabsf(band[r * k + c]));
        for (int64_t b = 0; b < q->grid[1]; b++)
            q->scales[(r0 / 128) * q->grid[1] + b] = numla_synth_v4q_scale(amax[b], 448.0f);
    }
    free(band);
    free(amax);
    return s;
}

/* Bytes [offset, offset + nbytes) of the codes (numla_safetensors_fill_fn). */
static numla_status numla_synth_v4q_codes(void *ctx, void *dst, size_t offset, size_t nbytes)
{
    const numla_synth_v4q *q = ctx;
    const numla_synth_tensor *t = q->t;
    const int64_t k = t->shape[1], rb = q->codes[1];
    const int64_t r0 = (int64_t)offset / rb, r1 = ((int64_t)(offset + nbytes) + rb - 1) / rb;
    float *rows = malloc((size_t)((r1 - r0) * k) * sizeof *rows);
    uint8_t *codes = malloc((size_t)((r1 - r0) * rb));
    if (!rows || !codes) {
        free(rows);
        free(codes);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "synth: no memory for %s", t->name);
    }
    numla_status s = numla_synth_src_rows((void *)t, r0, r1, rows);
    for (int64_t r = r0; r < r1 && s == NUMLA_STATUS_OK; r++) {
        const float *x = rows + (r - r0) * k;
        uint8_t *o = codes + (r - r0) * rb;
        if (t->v4q == NUMLA_SYNTH_V4Q_FP4) {
            for (int64_t j = 0; j < k / 2; j++) {
                const float inv = 1.0f / numla_e8m0_to_f32(q->scales[r * q->grid[1] + 2 * j / 32]);
                o[j] = (uint8_t)(numla_synth_e2m1(x[2 * j] * inv) | numla_synth_e2m1(x[2 * j + 1] * inv) << 4);
            }
        } else {
            for (int64_t c = 0; c < k; c++)
                o[c] = numla_f32_to_e4m3(x[c] / numla_e8m0_to_f32(q->scales[(r / 128) * q->grid[1] + c / 128]));
        }
    }
    if (s == NUMLA_STATUS_OK)
        memcpy(dst, codes + (offset - (size_t)(r0 * rb)), nbytes);
    free(rows);
    free(codes);
    return s;
}

static numla_status numla_synth_v4q_scales(void *ctx, void *dst, size_t offset, size_t nbytes)
{
    const numla_synth_v4q *q = ctx;
    memcpy(dst, q->scales + offset, nbytes);
    return NUMLA_STATUS_OK;
}

/* The scale tensor's name: the weight's with `.weight` replaced by `.scale`. */
static void numla_synth_v4q_scale_name(const char *name, char *buf, size_t cap)
{
    const size_t n = strlen(name);
    snprintf(buf, cap, "%.*s.scale", (int)(n > 7 ? n - 7 : n), name);
}

/* Write plan tensors [begin, end) to `path` through the safetensors writer. */
static numla_status numla_synth_write_file(numla_synth_tensor *t, size_t begin, size_t end,
                                           const char *path)
{
    numla_safetensors_writer *w = NULL;
    NUMLA_CHECK(numla_safetensors_writer_create(&w));
    numla_status s = NUMLA_STATUS_OK;
    numla_qckpt_tensor **q = calloc(end - begin + 1, sizeof *q);
    numla_synth_v4q *v4 = calloc(end - begin + 1, sizeof *v4);
    char (*sname)[128] = calloc(end - begin + 1, sizeof *sname);
    if (!q || !v4 || !sname) {
        free(q);
        free(v4);
        free(sname);
        numla_safetensors_writer_destroy(&w);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "synth: no memory");
    }
    for (size_t i = begin; i < end; i++) {
        if (t[i].v4q) {
            numla_synth_v4q *x = &v4[i - begin];
            NUMLA_CHECK_GOTO(numla_synth_v4q_create(&t[i], x), s, done);
            numla_synth_v4q_scale_name(t[i].name, sname[i - begin], sizeof sname[0]);
            const numla_dtype cd = t[i].v4q == NUMLA_SYNTH_V4Q_FP4 ? NUMLA_DTYPE_I8 : NUMLA_DTYPE_F8_E4M3;
            NUMLA_CHECK_GOTO(numla_safetensors_writer_add_fill(w, t[i].name, cd, 2, x->codes,
                                                               numla_synth_v4q_codes, x), s, done);
            NUMLA_CHECK_GOTO(numla_safetensors_writer_add_fill(w, sname[i - begin], NUMLA_DTYPE_F8_E8M0, 2,
                                                               x->grid, numla_synth_v4q_scales, x), s, done);
            continue;
        }
        if (t[i].quant != NUMLA_QCKPT_NONE) {
            NUMLA_CHECK_GOTO(numla_qckpt_tensor_create(t[i].quant, t[i].name, t[i].shape[0],
                                                       t[i].shape[1], numla_synth_src_rows, &t[i],
                                                       &q[i - begin]), s, done);
            NUMLA_CHECK_GOTO(numla_qckpt_tensor_add(q[i - begin], w), s, done);
            continue;
        }
        NUMLA_CHECK_GOTO(numla_safetensors_writer_add_fill(w, t[i].name, t[i].dtype, t[i].ndim, t[i].shape,
                                                  numla_synth_fill, &t[i]),
                         s, done);
    }
    NUMLA_CHECK_GOTO(numla_safetensors_writer_write(w, path), s, done);
done:
    numla_safetensors_writer_destroy(&w);
    for (size_t i = begin; i < end; i++) {
        numla_qckpt_tensor_destroy(&q[i - begin]);
        free(v4[i - begin].scales);
    }
    free(q);
    free(v4);
    free(sname);
    return s;
}

/* Copy dir/name to out_dir/name; a missing optional file is fine. */
static numla_status numla_synth_copy_file(const char *dir, const char *out_dir, const char *name,
                                          int required)
{
    char src[4096], dst[4096];
    snprintf(src, sizeof src, "%s/%s", dir, name);
    snprintf(dst, sizeof dst, "%s/%s", out_dir, name);
    if (!required && access(src, F_OK) != 0 && errno == ENOENT)
        return NUMLA_STATUS_OK;
    return numla_qckpt_copy_file(src, dst);
}

numla_status numla_synth_write(const numla_synth_options *opt, int64_t *total_bytes)
{
    numla_synth_config c;
    NUMLA_CHECK(numla_synth_config_get(opt, &c));
    if (!opt->out_dir || !opt->out_dir[0])
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "synth: no output directory");
    NUMLA_CHECK(numla_synth_mkdir(opt->out_dir));

    numla_synth_plan plan = {0};
    numla_status s = NUMLA_STATUS_OK;
    size_t *cut = NULL; /* shard k holds plan tensors [cut[k], cut[k+1]) */
    char *path = NULL;
    json_t *wm = NULL;
    NUMLA_CHECK_GOTO(numla_synth_plan_build(&c, opt, &plan), s, done);

    int64_t limit = opt->shard_bytes > 0 ? opt->shard_bytes : NUMLA_SYNTH_SHARD_DEFAULT;
    int64_t total = 0, cur = 0;
    size_t nshards = 0;
    cut = malloc((plan.n + 2) * sizeof *cut);
    if (!cut) {
        s = numla_error_set(NUMLA_STATUS_NO_MEMORY, __FILE__, __LINE__, __func__,
                            "synth: no memory");
        goto done;
    }
    cut[0] = 0;
    for (size_t i = 0; i < plan.n; i++) {
        if (cur > 0 && cur + (int64_t)plan.t[i].nbytes > limit) {
            cut[++nshards] = i;
            cur = 0;
        }
        cur += (int64_t)plan.t[i].nbytes;
        total += (int64_t)plan.t[i].nbytes;
    }
    cut[++nshards] = plan.n;

    numla_synth_progress pr = {.on = opt->progress};
    for (size_t i = 0; i < plan.n; i++) /* quantized tensors do not report progress */
        pr.total += plan.t[i].quant == NUMLA_QCKPT_NONE && !plan.t[i].v4q ? (int64_t)plan.t[i].nbytes : 0;
    pr.t0 = pr.last = numla_now_s();
    for (size_t i = 0; i < plan.n; i++)
        plan.t[i].progress = &pr;

    if (!(path = numla_synth_path(opt->out_dir, "config.json"))) {
        s = numla_error_set(NUMLA_STATUS_NO_MEMORY, __FILE__, __LINE__, __func__,
                            "synth: no memory");
        goto done;
    }
    NUMLA_CHECK_GOTO(numla_synth_config_write(&c, opt->dtype, opt->weights, path), s, done);
    free(path);
    path = NULL;
    if (opt->tokenizer_dir) {
        /* tokenizer.json, or a tiktoken.model (Kimi) when there is none */
        char tj[4096];
        snprintf(tj, sizeof tj, "%s/tokenizer.json", opt->tokenizer_dir);
        int tiktoken = access(tj, F_OK) != 0;
        NUMLA_CHECK_GOTO(numla_synth_copy_file(opt->tokenizer_dir, opt->out_dir,
                                               tiktoken ? "tiktoken.model" : "tokenizer.json", 1),
                         s, done);
        NUMLA_CHECK_GOTO(numla_synth_copy_file(opt->tokenizer_dir, opt->out_dir,
                                               "tokenizer_config.json", 0), s, done);
    }
    if (opt->synthetic_tokenizer)
        NUMLA_CHECK_GOTO(numla_synth_tokenizer_write(opt->out_dir, (int32_t)c.vocab_size), s,
                         done);

    /* A stale file of either layout would shadow the new model (a single file wins over an
     * index); the index is written last, so a failed run never leaves one naming missing
     * shards. */
    char *single = numla_synth_path(opt->out_dir, "model.safetensors");
    char *index = numla_synth_path(opt->out_dir, "model.safetensors.index.json");
    if (!single || !index) {
        free(single);
        free(index);
        s = numla_error_set(NUMLA_STATUS_NO_MEMORY, __FILE__, __LINE__, __func__,
                            "synth: no memory");
        goto done;
    }
    unlink(index);
    unlink(single);
    if (nshards == 1) {
        s = numla_synth_write_file(plan.t, 0, plan.n, single);
        free(single);
        free(index);
        if (s != NUMLA_STATUS_OK) {
            numla_error_frame(__FILE__, __LINE__, __func__);
            goto done;
        }
    } else {
        free(single);
        wm = json_object();
        for (size_t k = 0; k < nshards && s == NUMLA_STATUS_OK; k++) {
            char name[64];
            snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, nshards);
            path = numla_synth_path(opt->out_dir, name);
            if (!path || !wm) {
                s = numla_error_set(NUMLA_STATUS_NO_MEMORY, __FILE__, __LINE__, __func__,
                                    "synth: no memory");
                break;
            }
            for (size_t i = cut[k]; i < cut[k + 1]; i++) {
                json_object_set_new(wm, plan.t[i].name, json_string(name));
                if (plan.t[i].quant != NUMLA_QCKPT_NONE || plan.t[i].v4q) {
                    char sn[128];
                    if (plan.t[i].v4q)
                        numla_synth_v4q_scale_name(plan.t[i].name, sn, sizeof sn);
                    else
                        numla_qckpt_scale_name(plan.t[i].quant, plan.t[i].name, sn, sizeof sn);
                    json_object_set_new(wm, sn, json_string(name));
                }
            }
            s = numla_synth_write_file(plan.t, cut[k], cut[k + 1], path);
            if (s != NUMLA_STATUS_OK)
                numla_error_frame(__FILE__, __LINE__, __func__);
            free(path);
            path = NULL;
        }
        if (s == NUMLA_STATUS_OK) {
            json_t *root = json_pack("{s:{s:I}, s:O}", "metadata", "total_size", (json_int_t)total,
                                     "weight_map", wm);
            s = numla_synth_json_save(root, index);
            if (s != NUMLA_STATUS_OK)
                numla_error_frame(__FILE__, __LINE__, __func__);
        }
        free(index);
        if (s != NUMLA_STATUS_OK)
            goto done;
    }
    if (total_bytes)
        *total_bytes = total;
done:
    json_decref(wm);
    free(path);
    free(cut);
    free(plan.t);
    return s;
}
