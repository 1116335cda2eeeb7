/* engine/formats/gguf_deepseek2.c — deepseek2 GGUF keys -> a plain struct, the tensor set
 * checked against them, and GGUF -> HF tensor names. The mapping is documented key by key in
 * gguf_deepseek2.h. */
#define _GNU_SOURCE
#include "engine/formats/gguf_deepseek2.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define P_ "%.300s"
#define T_ "%.200s"

/* Bounds on the sizes, well above any published model (the same as the engine's config
 * validation), so products of them stay far inside int64. */
#define DS_MAX_VOCAB ((int64_t)1 << 24)
#define DS_MAX_HIDDEN ((int64_t)1 << 16)
#define DS_MAX_LAYERS ((int64_t)1 << 10)
#define DS_MAX_HEADS ((int64_t)1 << 10)
#define DS_MAX_INTER ((int64_t)1 << 20)
#define DS_MAX_RANK ((int64_t)1 << 14)
#define DS_MAX_HEAD_DIM ((int64_t)1 << 12)
#define DS_MAX_ROPE_DIM 256
#define DS_MAX_EXPERTS ((int64_t)1 << 14)
#define DS_MAX_POSITIONS ((int64_t)1 << 24)

static const char *ds_key_(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "deepseek2.%s", name);
    return buf;
}

/* A required integer in [lo, hi]. */
static numla_status ds_int_(const numla_gguf *g, const char *name, int64_t lo, int64_t hi, int64_t *out)
{
    char key[128];
    ds_key_(key, sizeof key, name);
    int64_t v;
    NUMLA_CHECK(numla_gguf_get_i64(g, key, &v));
    if (v < lo || v > hi)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": key '%s' = %lld is outside [%lld, %lld]", numla_gguf_path(g),
                   key, (long long)v, (long long)lo, (long long)hi);
    *out = v;
    return NUMLA_STATUS_OK;
}

/* An optional integer: def when the key is absent. */
static numla_status ds_int_opt_(const numla_gguf *g, const char *name, int64_t lo, int64_t hi, int64_t def,
                                int64_t *out)
{
    char key[128];
    if (!numla_gguf_find(g, ds_key_(key, sizeof key, name))) {
        *out = def;
        return NUMLA_STATUS_OK;
    }
    return ds_int_(g, name, lo, hi, out);
}

static numla_status ds_f64_opt_(const numla_gguf *g, const char *name, double def, double *out)
{
    char key[128];
    ds_key_(key, sizeof key, name);
    if (!numla_gguf_find(g, key)) {
        *out = def;
        return NUMLA_STATUS_OK;
    }
    NUMLA_CHECK(numla_gguf_get_f64(g, key, out));
    if (!(*out == *out) || *out > 1e300 || *out < -1e300)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": key '%s' is not finite", numla_gguf_path(g), key);
    return NUMLA_STATUS_OK;
}

static numla_status ds_positive_(const numla_gguf *g, const char *key, double v)
{
    if (!(v > 0.0))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": key 'deepseek2.%s' = %g must be positive", numla_gguf_path(g),
                   key, v);
    return NUMLA_STATUS_OK;
}

static numla_status ds_keys_(const numla_gguf *g, numla_gguf_deepseek2 *c)
{
    const char *path = numla_gguf_path(g), *arch = NULL;
    NUMLA_CHECK(numla_gguf_get_str(g, "general.architecture", &arch));
    if (strcmp(arch, "deepseek2"))
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "gguf: " P_ ": general.architecture is '%.100s', not 'deepseek2'", path,
                   arch);
    NUMLA_CHECK(ds_int_(g, "block_count", 1, DS_MAX_LAYERS, &c->num_hidden_layers));
    /* the MTP layers are the last nextn_predict_layers blocks (blk.N.nextn.*) */
    NUMLA_CHECK(ds_int_opt_(g, "nextn_predict_layers", 0, c->num_hidden_layers - 1, 0,
                            &c->nextn_predict_layers));
    c->num_hidden_layers -= c->nextn_predict_layers;
    NUMLA_CHECK(ds_int_(g, "embedding_length", 1, DS_MAX_HIDDEN, &c->hidden_size));
    NUMLA_CHECK(ds_int_(g, "feed_forward_length", 1, DS_MAX_INTER, &c->intermediate_size));
    NUMLA_CHECK(ds_int_(g, "context_length", 1, DS_MAX_POSITIONS, &c->max_position_embeddings));
    NUMLA_CHECK(ds_int_(g, "attention.head_count", 1, DS_MAX_HEADS, &c->num_attention_heads));
    NUMLA_CHECK(numla_gguf_get_f64(g, "deepseek2.attention.layer_norm_rms_epsilon", &c->rms_norm_eps));
    NUMLA_CHECK(ds_positive_(g, "attention.layer_norm_rms_epsilon", c->rms_norm_eps));
    NUMLA_CHECK(ds_int_(g, "attention.kv_lora_rank", 1, DS_MAX_RANK, &c->kv_lora_rank));
    NUMLA_CHECK(ds_int_(g, "rope.dimension_count", 2, DS_MAX_ROPE_DIM, &c->qk_rope_head_dim));
    if (c->qk_rope_head_dim % 2)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": key 'deepseek2.rope.dimension_count' = %lld must be even",
                   path, (long long)c->qk_rope_head_dim);
    /* q_lora_rank: absent means a plain attn_q (V2-Lite files have none). */
    NUMLA_CHECK(ds_int_opt_(g, "attention.q_lora_rank", 0, DS_MAX_RANK, -1, &c->q_lora_rank));
    if (c->q_lora_rank < 0) {
        if (!numla_gguf_tensor_find(g, "blk.0.attn_q.weight"))
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": key 'deepseek2.attention.q_lora_rank' is missing and "
                       "there is no blk.0.attn_q.weight", path);
        c->q_lora_rank = 0;
    }
    /* Head widths: the _mla keys where the file has them (k_b/v_b files), else the plain ones. */
    char key[128];
    int64_t klen, vlen;
    const int mla = numla_gguf_find(g, ds_key_(key, sizeof key, "attention.key_length_mla")) != NULL;
    NUMLA_CHECK(ds_int_(g, mla ? "attention.key_length_mla" : "attention.key_length", 1,
                        DS_MAX_HEAD_DIM + DS_MAX_ROPE_DIM, &klen));
    NUMLA_CHECK(ds_int_(g, mla ? "attention.value_length_mla" : "attention.value_length", 1, DS_MAX_HEAD_DIM, &vlen));
    if (klen <= c->qk_rope_head_dim)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": key 'deepseek2.%s' = %lld leaves no room for the non-rope "
                   "part beside rope.dimension_count = %lld", path,
                   mla ? "attention.key_length_mla" : "attention.key_length", (long long)klen,
                   (long long)c->qk_rope_head_dim);
    c->qk_nope_head_dim = klen - c->qk_rope_head_dim;
    c->v_head_dim = vlen;

    const numla_gguf_value *tokens = numla_gguf_find(g, "tokenizer.ggml.tokens");
    int64_t vocab_def = tokens && tokens->type == NUMLA_GGUF_ARRAY ? (int64_t)tokens->v.arr.count : -1;
    NUMLA_CHECK(ds_int_opt_(g, "vocab_size", 1, DS_MAX_VOCAB, vocab_def, &c->vocab_size));
    if (c->vocab_size < 1 || c->vocab_size > DS_MAX_VOCAB)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": neither key 'deepseek2.vocab_size' nor a usable "
                   "tokenizer.ggml.tokens gives the vocabulary size", path);

    NUMLA_CHECK(ds_int_(g, "expert_count", 1, DS_MAX_EXPERTS, &c->n_routed_experts));
    NUMLA_CHECK(ds_int_(g, "expert_used_count", 1, c->n_routed_experts, &c->num_experts_per_tok));
    NUMLA_CHECK(ds_int_(g, "expert_shared_count", 0, 1024, &c->n_shared_experts));
    NUMLA_CHECK(ds_int_(g, "expert_feed_forward_length", 1, DS_MAX_INTER, &c->moe_intermediate_size));
    NUMLA_CHECK(ds_int_opt_(g, "leading_dense_block_count", 0, c->num_hidden_layers, 0, &c->first_k_dense_replace));
    NUMLA_CHECK(ds_int_opt_(g, "expert_group_count", 1, c->n_routed_experts, 1, &c->n_group));
    if (c->n_routed_experts % c->n_group)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": key 'deepseek2.expert_group_count' = %lld does not divide "
                   "expert_count = %lld", path, (long long)c->n_group, (long long)c->n_routed_experts);
    NUMLA_CHECK(ds_int_opt_(g, "expert_group_used_count", 1, c->n_group, c->n_group, &c->topk_group));
    int64_t gating;
    NUMLA_CHECK(ds_int_opt_(g, "expert_gating_func", 0, 2, 0, &gating));
    c->scoring_sigmoid = gating == 2; /* 0 (absent in older V2 files) reads as softmax */
    NUMLA_CHECK(ds_f64_opt_(g, "expert_weights_scale", 1.0, &c->routed_scaling_factor));
    NUMLA_CHECK(ds_positive_(g, "expert_weights_scale", c->routed_scaling_factor));
    c->norm_topk_prob = 0;
    if (numla_gguf_find(g, ds_key_(key, sizeof key, "expert_weights_norm")))
        NUMLA_CHECK(numla_gguf_get_bool(g, key, &c->norm_topk_prob));

    NUMLA_CHECK(ds_f64_opt_(g, "rope.freq_base", 10000.0, &c->rope_theta));
    NUMLA_CHECK(ds_positive_(g, "rope.freq_base", c->rope_theta));
    const char *stype = "none";
    if (numla_gguf_find(g, ds_key_(key, sizeof key, "rope.scaling.type")))
        NUMLA_CHECK(numla_gguf_get_str(g, key, &stype));
    c->rope_factor = 1.0;
    c->rope_original_max_position_embeddings = c->max_position_embeddings;
    c->rope_beta_fast = 32.0;
    c->rope_beta_slow = 1.0;
    c->rope_mscale = c->rope_mscale_all_dim = 0.0;
    if (!strcmp(stype, "yarn")) {
        c->rope_yarn = 1;
        NUMLA_CHECK(numla_gguf_get_f64(g, "deepseek2.rope.scaling.factor", &c->rope_factor));
        NUMLA_CHECK(ds_positive_(g, "rope.scaling.factor", c->rope_factor));
        NUMLA_CHECK(ds_int_opt_(g, "rope.scaling.original_context_length", 1, DS_MAX_POSITIONS,
                                c->max_position_embeddings, &c->rope_original_max_position_embeddings));
        NUMLA_CHECK(ds_f64_opt_(g, "rope.scaling.yarn_beta_fast", 32.0, &c->rope_beta_fast));
        NUMLA_CHECK(ds_f64_opt_(g, "rope.scaling.yarn_beta_slow", 1.0, &c->rope_beta_slow));
        double log_mul;
        NUMLA_CHECK(ds_f64_opt_(g, "rope.scaling.yarn_log_multiplier", 0.0, &log_mul));
        c->rope_mscale = c->rope_mscale_all_dim = log_mul / 0.1;
    } else if (strcmp(stype, "none")) {
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "gguf: " P_ ": key 'deepseek2.rope.scaling.type' = '%.40s' (only yarn "
                   "and none are supported)", path, stype);
    }

    int64_t id;
    c->bos_token_id = c->eos_token_id = -1;
    if (numla_gguf_find(g, "tokenizer.ggml.bos_token_id")) {
        uint32_t v;
        NUMLA_CHECK(numla_gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &v));
        id = v;
        if (id >= c->vocab_size)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": tokenizer.ggml.bos_token_id = %lld >= vocab %lld", path,
                       (long long)id, (long long)c->vocab_size);
        c->bos_token_id = (int32_t)id;
    }
    if (numla_gguf_find(g, "tokenizer.ggml.eos_token_id")) {
        uint32_t v;
        NUMLA_CHECK(numla_gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &v));
        id = v;
        if (id >= c->vocab_size)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": tokenizer.ggml.eos_token_id = %lld >= vocab %lld", path,
                       (long long)id, (long long)c->vocab_size);
        c->eos_token_id = (int32_t)id;
    }
    const char *s;
    if (numla_gguf_find(g, "tokenizer.ggml.model") && numla_gguf_get_str(g, "tokenizer.ggml.model", &s) == 0)
        snprintf(c->tokenizer_model, sizeof c->tokenizer_model, "%s", s);
    if (numla_gguf_find(g, "tokenizer.ggml.pre") && numla_gguf_get_str(g, "tokenizer.ggml.pre", &s) == 0)
        snprintf(c->tokenizer_pre, sizeof c->tokenizer_pre, "%s", s);
    numla_error_clear();
    return NUMLA_STATUS_OK;
}

static numla_status ds_expect_(const numla_gguf *g, const char *name, int32_t ndim, int64_t a, int64_t b, int64_t c)
{
    const int64_t ne[3] = {a, b, c};
    NUMLA_CHECK(numla_gguf_tensor_expect(g, name, ndim, ne, NULL));
    return NUMLA_STATUS_OK;
}

static numla_status ds_tensors_(const numla_gguf *g, numla_gguf_deepseek2 *c)
{
    const int64_t E = c->hidden_size, V = c->vocab_size, H = c->num_attention_heads, QL = c->q_lora_rank;
    const int64_t KV = c->kv_lora_rank, R = c->qk_rope_head_dim, NP = c->qk_nope_head_dim, VH = c->v_head_dim;
    const int64_t X = c->n_routed_experts, FE = c->moe_intermediate_size, S = c->n_shared_experts;
    NUMLA_CHECK(ds_expect_(g, "token_embd.weight", 2, E, V, 1));
    NUMLA_CHECK(ds_expect_(g, "output_norm.weight", 1, E, 1, 1));
    c->tie_word_embeddings = numla_gguf_tensor_find(g, "output.weight") == NULL;
    if (!c->tie_word_embeddings)
        NUMLA_CHECK(ds_expect_(g, "output.weight", 2, E, V, 1));
    c->attn_layout = numla_gguf_tensor_find(g, "blk.0.attn_k_b.weight") ? NUMLA_GGUF_MLA_SPLIT : NUMLA_GGUF_MLA_KV_B;
    int bias_layers = 0, moe_layers = 0;
    char n[96];
#define DS_T(suffix) (snprintf(n, sizeof n, "blk.%lld." suffix, (long long)l), n)
    for (int64_t l = 0; l < c->num_hidden_layers; l++) {
        NUMLA_CHECK(ds_expect_(g, DS_T("attn_norm.weight"), 1, E, 1, 1));
        if (QL > 0) {
            NUMLA_CHECK(ds_expect_(g, DS_T("attn_q_a.weight"), 2, E, QL, 1));
            NUMLA_CHECK(ds_expect_(g, DS_T("attn_q_a_norm.weight"), 1, QL, 1, 1));
            NUMLA_CHECK(ds_expect_(g, DS_T("attn_q_b.weight"), 2, QL, H * (NP + R), 1));
        } else {
            NUMLA_CHECK(ds_expect_(g, DS_T("attn_q.weight"), 2, E, H * (NP + R), 1));
        }
        NUMLA_CHECK(ds_expect_(g, DS_T("attn_kv_a_mqa.weight"), 2, E, KV + R, 1));
        NUMLA_CHECK(ds_expect_(g, DS_T("attn_kv_a_norm.weight"), 1, KV, 1, 1));
        if (c->attn_layout == NUMLA_GGUF_MLA_SPLIT) {
            NUMLA_CHECK(ds_expect_(g, DS_T("attn_k_b.weight"), 3, NP, KV, H));
            NUMLA_CHECK(ds_expect_(g, DS_T("attn_v_b.weight"), 3, KV, VH, H));
        } else {
            NUMLA_CHECK(ds_expect_(g, DS_T("attn_kv_b.weight"), 2, KV, H * (NP + VH), 1));
        }
        NUMLA_CHECK(ds_expect_(g, DS_T("attn_output.weight"), 2, H * VH, E, 1));
        NUMLA_CHECK(ds_expect_(g, DS_T("ffn_norm.weight"), 1, E, 1, 1));
        if (l < c->first_k_dense_replace) {
            const int64_t F = c->intermediate_size;
            NUMLA_CHECK(ds_expect_(g, DS_T("ffn_gate.weight"), 2, E, F, 1));
            NUMLA_CHECK(ds_expect_(g, DS_T("ffn_up.weight"), 2, E, F, 1));
            NUMLA_CHECK(ds_expect_(g, DS_T("ffn_down.weight"), 2, F, E, 1));
            continue;
        }
        moe_layers++;
        NUMLA_CHECK(ds_expect_(g, DS_T("ffn_gate_inp.weight"), 2, E, X, 1));
        if (numla_gguf_tensor_find(g, DS_T("exp_probs_b.bias"))) {
            NUMLA_CHECK(ds_expect_(g, n, 1, X, 1, 1));
            bias_layers++;
        }
        NUMLA_CHECK(ds_expect_(g, DS_T("ffn_gate_exps.weight"), 3, E, FE, X));
        NUMLA_CHECK(ds_expect_(g, DS_T("ffn_up_exps.weight"), 3, E, FE, X));
        NUMLA_CHECK(ds_expect_(g, DS_T("ffn_down_exps.weight"), 3, FE, E, X));
        if (S > 0) {
            NUMLA_CHECK(ds_expect_(g, DS_T("ffn_gate_shexp.weight"), 2, E, FE * S, 1));
            NUMLA_CHECK(ds_expect_(g, DS_T("ffn_up_shexp.weight"), 2, E, FE * S, 1));
            NUMLA_CHECK(ds_expect_(g, DS_T("ffn_down_shexp.weight"), 2, FE * S, E, 1));
        }
    }
#undef DS_T
    if (bias_layers && bias_layers != moe_layers)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": %d of the %d MoE layers have exp_probs_b.bias", numla_gguf_path(g),
                   bias_layers, moe_layers);
    c->score_bias = bias_layers > 0;
    return NUMLA_STATUS_OK;
}

numla_status numla_gguf_deepseek2_read(const numla_gguf *g, numla_gguf_deepseek2 *out)
{
    if (!g || !out)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "gguf deepseek2: NULL %s", !g ? "file" : "out");
    numla_gguf_deepseek2 c;
    memset(&c, 0, sizeof c);
    NUMLA_CHECK(ds_keys_(g, &c));
    NUMLA_CHECK(ds_tensors_(g, &c));
    *out = c;
    return NUMLA_STATUS_OK;
}

/* GGUF suffix (after "blk.N.") -> HF suffix (after "model.layers.N."). */
static const struct {
    const char *gguf, *hf;
    int experts, kv_b_part;
} ds_names_[] = {
    {"attn_norm.weight", "input_layernorm.weight", 0, 0},
    {"attn_q.weight", "self_attn.q_proj.weight", 0, 0},
    {"attn_q_a.weight", "self_attn.q_a_proj.weight", 0, 0},
    {"attn_q_a_norm.weight", "self_attn.q_a_layernorm.weight", 0, 0},
    {"attn_q_b.weight", "self_attn.q_b_proj.weight", 0, 0},
    {"attn_kv_a_mqa.weight", "self_attn.kv_a_proj_with_mqa.weight", 0, 0},
    {"attn_kv_a_norm.weight", "self_attn.kv_a_layernorm.weight", 0, 0},
    {"attn_kv_b.weight", "self_attn.kv_b_proj.weight", 0, 0},
    {"attn_k_b.weight", "self_attn.kv_b_proj.weight", 0, 1},
    {"attn_v_b.weight", "self_attn.kv_b_proj.weight", 0, 2},
    {"attn_output.weight", "self_attn.o_proj.weight", 0, 0},
    {"ffn_norm.weight", "post_attention_layernorm.weight", 0, 0},
    {"ffn_gate.weight", "mlp.gate_proj.weight", 0, 0},
    {"ffn_up.weight", "mlp.up_proj.weight", 0, 0},
    {"ffn_down.weight", "mlp.down_proj.weight", 0, 0},
    {"ffn_gate_inp.weight", "mlp.gate.weight", 0, 0},
    {"exp_probs_b.bias", "mlp.gate.e_score_correction_bias", 0, 0},
    {"ffn_gate_exps.weight", "mlp.experts.{E}.gate_proj.weight", 1, 0},
    {"ffn_up_exps.weight", "mlp.experts.{E}.up_proj.weight", 1, 0},
    {"ffn_down_exps.weight", "mlp.experts.{E}.down_proj.weight", 1, 0},
    {"ffn_gate_shexp.weight", "mlp.shared_experts.gate_proj.weight", 0, 0},
    {"ffn_up_shexp.weight", "mlp.shared_experts.up_proj.weight", 0, 0},
    {"ffn_down_shexp.weight", "mlp.shared_experts.down_proj.weight", 0, 0},
    {"nextn.eh_proj.weight", "eh_proj.weight", 0, 0},
    {"nextn.enorm.weight", "enorm.weight", 0, 0},
    {"nextn.hnorm.weight", "hnorm.weight", 0, 0},
    {"nextn.shared_head_norm.weight", "shared_head.norm.weight", 0, 0},
    {"nextn.shared_head_head.weight", "shared_head.head.weight", 0, 0},
    {"nextn.embed_tokens.weight", "embed_tokens.weight", 0, 0},
};

numla_status numla_gguf_deepseek2_hf_name(const char *name, numla_gguf_hf_name *out)
{
    if (!name || !out)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "gguf deepseek2: NULL %s", !name ? "name" : "out");
    memset(out, 0, sizeof *out);
    static const struct {
        const char *gguf, *hf;
    } top[] = {{"token_embd.weight", "model.embed_tokens.weight"},
               {"output_norm.weight", "model.norm.weight"},
               {"output.weight", "lm_head.weight"}};
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (!strcmp(name, top[i].gguf)) {
            snprintf(out->hf, sizeof out->hf, "%s", top[i].hf);
            return NUMLA_STATUS_OK;
        }
    char *end = NULL;
    if (!strncmp(name, "blk.", 4) && name[4] >= '0' && name[4] <= '9') {
        long layer = strtol(name + 4, &end, 10);
        if (end && *end == '.' && layer >= 0 && layer < DS_MAX_LAYERS)
            for (size_t i = 0; i < sizeof ds_names_ / sizeof ds_names_[0]; i++)
                if (!strcmp(end + 1, ds_names_[i].gguf)) {
                    snprintf(out->hf, sizeof out->hf, "model.layers.%ld.%s", layer, ds_names_[i].hf);
                    out->stacked_experts = ds_names_[i].experts;
                    out->kv_b_part = ds_names_[i].kv_b_part;
                    return NUMLA_STATUS_OK;
                }
    }
    NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "gguf deepseek2: tensor '" T_ "' is not part of the architecture", name);
}
