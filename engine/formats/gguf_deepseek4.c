/* engine/formats/gguf_deepseek4.c — deepseek4 GGUF keys -> a plain struct, the tensor set
 * checked against them, and the tensors under DeepSeek's names. The mapping is documented key
 * by key and tensor by tensor in gguf_deepseek4.h. */
#define _GNU_SOURCE
#include "engine/formats/gguf_deepseek4.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define P_ "%.300s"
#define T_ "%.200s"

/* Bounds well above any published model, so products of them stay far inside int64. */
#define D4_MAX_VOCAB ((int64_t)1 << 24)
#define D4_MAX_HIDDEN ((int64_t)1 << 16)
#define D4_MAX_HEADS ((int64_t)1 << 10)
#define D4_MAX_RANK ((int64_t)1 << 14)
#define D4_MAX_HEAD_DIM ((int64_t)1 << 12)
#define D4_MAX_INTER ((int64_t)1 << 20)
#define D4_MAX_EXPERTS ((int64_t)1 << 14)
#define D4_MAX_POSITIONS ((int64_t)1 << 24)
#define D4_MAX_RATE ((int64_t)1 << 16)

static const char *k4_(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "deepseek4.%s", name);
    return buf;
}

/* A required integer in [lo, hi]. */
static numla_status d4_int_(const numla_gguf *g, const char *name, int64_t lo, int64_t hi,
                            int64_t *out)
{
    char key[128];
    k4_(key, sizeof key, name);
    int64_t v;
    NUMLA_CHECK(numla_gguf_get_i64(g, key, &v));
    if (v < lo || v > hi)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": key '%s' = %lld is outside [%lld, %lld]",
                   numla_gguf_path(g), key, (long long)v, (long long)lo, (long long)hi);
    *out = v;
    return NUMLA_STATUS_OK;
}

static numla_status d4_int_opt_(const numla_gguf *g, const char *name, int64_t lo, int64_t hi,
                                int64_t def, int64_t *out)
{
    char key[128];
    if (!numla_gguf_find(g, k4_(key, sizeof key, name))) {
        *out = def;
        return NUMLA_STATUS_OK;
    }
    return d4_int_(g, name, lo, hi, out);
}

/* A real: required (def ignored) or def when absent; finite, and positive when `positive`. */
static numla_status d4_real_(const numla_gguf *g, const char *name, int required, double def,
                             int positive, double *out)
{
    char key[128];
    k4_(key, sizeof key, name);
    if (!required && !numla_gguf_find(g, key)) {
        *out = def;
        return NUMLA_STATUS_OK;
    }
    NUMLA_CHECK(numla_gguf_get_f64(g, key, out));
    if (!(*out == *out) || *out > 1e300 || *out < -1e300 || (positive && !(*out > 0.0)))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": key '%s' = %g must be finite%s",
                   numla_gguf_path(g), key, *out, positive ? " and positive" : "");
    return NUMLA_STATUS_OK;
}

/* One numeric element of an array value as a double. */
static double arr_at_(const numla_gguf_value *a, uint64_t i)
{
    const void *p = a->v.arr.items;
    switch (a->v.arr.type) {
    case NUMLA_GGUF_UINT8: return ((const uint8_t *)p)[i];
    case NUMLA_GGUF_INT8: return ((const int8_t *)p)[i];
    case NUMLA_GGUF_UINT16: return ((const uint16_t *)p)[i];
    case NUMLA_GGUF_INT16: return ((const int16_t *)p)[i];
    case NUMLA_GGUF_UINT32: return ((const uint32_t *)p)[i];
    case NUMLA_GGUF_INT32: return ((const int32_t *)p)[i];
    case NUMLA_GGUF_UINT64: return (double)((const uint64_t *)p)[i];
    case NUMLA_GGUF_INT64: return (double)((const int64_t *)p)[i];
    case NUMLA_GGUF_FLOAT32: return ((const float *)p)[i];
    case NUMLA_GGUF_FLOAT64: return ((const double *)p)[i];
    default: return NAN;
    }
}

/* A required numeric array with at least n entries. */
static numla_status d4_array_(const numla_gguf *g, const char *name, int64_t n,
                              const numla_gguf_value **out)
{
    char key[128];
    k4_(key, sizeof key, name);
    NUMLA_CHECK(numla_gguf_get_array(g, key, NUMLA_GGUF_VTYPE_COUNT, out));
    const numla_gguf_value *a = *out;
    if (a->v.arr.type == NUMLA_GGUF_STRING || a->v.arr.type == NUMLA_GGUF_ARRAY ||
        a->v.arr.type == NUMLA_GGUF_BOOL)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": key '%s' is an array of %s, not numbers",
                   numla_gguf_path(g), key, numla_gguf_vtype_name(a->v.arr.type));
    if ((int64_t)a->v.arr.count < n)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": key '%s' has %llu entries, block_count "
                   "is %lld", numla_gguf_path(g), key, (unsigned long long)a->v.arr.count,
                   (long long)n);
    return NUMLA_STATUS_OK;
}

/* ---- the tensor table ---- */

enum { TK_FLOAT = 0, TK_ANY, TK_I32, TK_EXPERTS };

typedef struct d4_tensor {
    const char *gguf; /* after "blk.L." (layer tensors) or the whole name */
    const char *ds;   /* after "layers.L." or the whole name; "%lld" is the expert */
    int kind;         /* TK_FLOAT: read as fp32; a vector F32/F16/BF16 only, a matrix (mHC's
                       * fn, the compressors' ape) also in blocks, as llama-quantize leaves
                       * them; TK_ANY: a matrix of any type; TK_I32: I32 only; TK_EXPERTS:
                       * stacked {K, N, E}, any type */
} d4_tensor;

enum {
    R_EMBD, R_OUT, R_OUT_NORM, R_HC_FN, R_HC_BASE, R_HC_SCALE, R_COUNT
};
static const d4_tensor ROOT[R_COUNT] = {
    [R_EMBD] = {"token_embd.weight", "embed.weight", TK_ANY},
    [R_OUT] = {"output.weight", "head.weight", TK_ANY},
    [R_OUT_NORM] = {"output_norm.weight", "norm.weight", TK_FLOAT},
    [R_HC_FN] = {"output_hc_fn.weight", "hc_head_fn", TK_FLOAT},
    [R_HC_BASE] = {"output_hc_base.weight", "hc_head_base", TK_FLOAT},
    [R_HC_SCALE] = {"output_hc_scale.weight", "hc_head_scale", TK_FLOAT},
};

enum {
    L_ATTN_NORM, L_FFN_NORM, L_HCA_FN, L_HCA_BASE, L_HCA_SCALE, L_HCF_FN, L_HCF_BASE,
    L_HCF_SCALE, L_Q_A, L_Q_A_NORM, L_Q_B, L_KV, L_KV_NORM, L_SINKS, L_O_A, L_O_B, L_C_KV,
    L_C_GATE, L_C_APE, L_C_NORM, L_I_KV, L_I_GATE, L_I_APE, L_I_NORM, L_I_QB, L_I_PROJ,
    L_GATE_INP, L_BIAS, L_TID2EID, L_EXP_GATE, L_EXP_DOWN, L_EXP_UP, L_SH_GATE, L_SH_DOWN,
    L_SH_UP, L_COUNT
};
static const d4_tensor LAYER[L_COUNT] = {
    [L_ATTN_NORM] = {"attn_norm.weight", "attn_norm.weight", TK_FLOAT},
    [L_FFN_NORM] = {"ffn_norm.weight", "ffn_norm.weight", TK_FLOAT},
    [L_HCA_FN] = {"hc_attn_fn.weight", "hc_attn_fn", TK_FLOAT},
    [L_HCA_BASE] = {"hc_attn_base.weight", "hc_attn_base", TK_FLOAT},
    [L_HCA_SCALE] = {"hc_attn_scale.weight", "hc_attn_scale", TK_FLOAT},
    [L_HCF_FN] = {"hc_ffn_fn.weight", "hc_ffn_fn", TK_FLOAT},
    [L_HCF_BASE] = {"hc_ffn_base.weight", "hc_ffn_base", TK_FLOAT},
    [L_HCF_SCALE] = {"hc_ffn_scale.weight", "hc_ffn_scale", TK_FLOAT},
    [L_Q_A] = {"attn_q_a.weight", "attn.wq_a.weight", TK_ANY},
    [L_Q_A_NORM] = {"attn_q_a_norm.weight", "attn.q_norm.weight", TK_FLOAT},
    [L_Q_B] = {"attn_q_b.weight", "attn.wq_b.weight", TK_ANY},
    [L_KV] = {"attn_kv.weight", "attn.wkv.weight", TK_ANY},
    [L_KV_NORM] = {"attn_kv_a_norm.weight", "attn.kv_norm.weight", TK_FLOAT},
    [L_SINKS] = {"attn_sinks.weight", "attn.attn_sink", TK_FLOAT},
    [L_O_A] = {"attn_output_a.weight", "attn.wo_a.weight", TK_ANY},
    [L_O_B] = {"attn_output_b.weight", "attn.wo_b.weight", TK_ANY},
    [L_C_KV] = {"attn_compressor_kv.weight", "attn.compressor.wkv.weight", TK_ANY},
    [L_C_GATE] = {"attn_compressor_gate.weight", "attn.compressor.wgate.weight", TK_ANY},
    [L_C_APE] = {"attn_compressor_ape.weight", "attn.compressor.ape", TK_FLOAT},
    [L_C_NORM] = {"attn_compressor_norm.weight", "attn.compressor.norm.weight", TK_FLOAT},
    [L_I_KV] = {"indexer_compressor_kv.weight", "attn.indexer.compressor.wkv.weight", TK_ANY},
    [L_I_GATE] = {"indexer_compressor_gate.weight", "attn.indexer.compressor.wgate.weight",
                  TK_ANY},
    [L_I_APE] = {"indexer_compressor_ape.weight", "attn.indexer.compressor.ape", TK_FLOAT},
    [L_I_NORM] = {"indexer_compressor_norm.weight", "attn.indexer.compressor.norm.weight",
                  TK_FLOAT},
    [L_I_QB] = {"indexer.attn_q_b.weight", "attn.indexer.wq_b.weight", TK_ANY},
    [L_I_PROJ] = {"indexer.proj.weight", "attn.indexer.weights_proj.weight", TK_ANY},
    [L_GATE_INP] = {"ffn_gate_inp.weight", "ffn.gate.weight", TK_ANY},
    [L_BIAS] = {"exp_probs_b.bias", "ffn.gate.bias", TK_FLOAT},
    [L_TID2EID] = {"ffn_gate_tid2eid.weight", "ffn.gate.tid2eid", TK_I32},
    [L_EXP_GATE] = {"ffn_gate_exps.weight", "ffn.experts.%lld.w1.weight", TK_EXPERTS},
    [L_EXP_DOWN] = {"ffn_down_exps.weight", "ffn.experts.%lld.w2.weight", TK_EXPERTS},
    [L_EXP_UP] = {"ffn_up_exps.weight", "ffn.experts.%lld.w3.weight", TK_EXPERTS},
    [L_SH_GATE] = {"ffn_gate_shexp.weight", "ffn.shared_experts.w1.weight", TK_ANY},
    [L_SH_DOWN] = {"ffn_down_shexp.weight", "ffn.shared_experts.w2.weight", TK_ANY},
    [L_SH_UP] = {"ffn_up_shexp.weight", "ffn.shared_experts.w3.weight", TK_ANY},
};

/* The ggml ne of layer l's tensor `id` from the keys; 0 when layer l has none. */
static int layer_ne(const numla_gguf_deepseek4 *d, int id, int64_t l, int64_t *ne, int32_t *nd)
{
    const int64_t D = d->hidden_size, H = d->num_attention_heads, Dh = d->head_dim;
    const int64_t n = d->hc_mult, nm = (2 + n) * n, Rq = d->q_lora_rank, G = d->o_groups;
    const int64_t Ro = d->o_lora_rank, E = d->n_routed_experts, I = d->moe_intermediate_size;
    const int64_t Hi = d->index_n_heads, Di = d->index_head_dim;
    const int32_t r = d->compress_ratios[l];
    const int csa = r == 4, hca = r != 0 && r != 4, hash = l < d->num_hash_layers;
    const int64_t cw = csa ? 2 * Dh : Dh, rate = csa ? 4 : r;
#define NE1(a) (*nd = 1, ne[0] = (a), 1)
#define NE2(a, b) (*nd = 2, ne[0] = (a), ne[1] = (b), 1)
#define NE3(a, b, c) (*nd = 3, ne[0] = (a), ne[1] = (b), ne[2] = (c), 1)
    switch (id) {
    case L_ATTN_NORM: case L_FFN_NORM: return NE1(D);
    case L_HCA_FN: case L_HCF_FN: return NE2(n * D, nm);
    case L_HCA_BASE: case L_HCF_BASE: return NE1(nm);
    case L_HCA_SCALE: case L_HCF_SCALE: return NE1(3);
    case L_Q_A: return NE2(D, Rq);
    case L_Q_A_NORM: return NE1(Rq);
    case L_Q_B: return NE2(Rq, H * Dh);
    case L_KV: return NE2(D, Dh);
    case L_KV_NORM: return NE1(Dh);
    case L_SINKS: return NE1(H);
    case L_O_A: return NE2(H * Dh / G, G * Ro);
    case L_O_B: return NE2(G * Ro, D);
    case L_C_KV: case L_C_GATE: return (csa || hca) && NE2(D, cw);
    case L_C_APE: return (csa || hca) && NE2(cw, rate);
    case L_C_NORM: return (csa || hca) && NE1(Dh);
    case L_I_KV: case L_I_GATE: return csa && NE2(D, 2 * Di);
    case L_I_APE: return csa && NE2(2 * Di, rate);
    case L_I_NORM: return csa && NE1(Di);
    case L_I_QB: return csa && NE2(Rq, Hi * Di);
    case L_I_PROJ: return csa && NE2(D, Hi);
    case L_GATE_INP: return NE2(D, E);
    case L_BIAS: return !hash && NE1(E);
    case L_TID2EID: return hash && NE2(d->num_experts_per_tok, d->vocab_size);
    case L_EXP_GATE: case L_EXP_UP: return NE3(D, I, E);
    case L_EXP_DOWN: return NE3(I, D, E);
    case L_SH_GATE: case L_SH_UP: return NE2(D, I * d->n_shared_experts);
    case L_SH_DOWN: return NE2(I * d->n_shared_experts, D);
    default: return 0;
    }
#undef NE1
#undef NE2
#undef NE3
}

static int is_float_type(uint32_t t)
{
    return t == NUMLA_GGML_F32 || t == NUMLA_GGML_F16 || t == NUMLA_GGML_BF16;
}

/* The tensor `name` with ne[0..nd), of the kind's types. */
static numla_status expect_(const numla_gguf *g, const char *name, int kind, int32_t nd,
                            const int64_t *ne)
{
    const numla_gguf_tensor *t;
    NUMLA_CHECK(numla_gguf_tensor_expect(g, name, nd, ne, &t));
    const numla_ggml_type_info *ti = numla_ggml_type_get(t->type);
    const char *tn = ti ? ti->name : "?";
    if (kind == TK_FLOAT && nd == 1 && !is_float_type(t->type))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": tensor '" T_ "' is %s (F32, F16 or BF16 "
                   "expected)", t->file, name, tn);
    if (kind == TK_I32 && t->type != NUMLA_GGML_I32)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": tensor '" T_ "' is %s (I32 expected)",
                   t->file, name, tn);
    if ((kind == TK_ANY || kind == TK_EXPERTS) &&
        (t->type == NUMLA_GGML_I8 || t->type == NUMLA_GGML_I32 || t->type == NUMLA_GGML_I16 ||
         t->type == NUMLA_GGML_I64 || t->type == NUMLA_GGML_F64))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": tensor '" T_ "' is %s (a float or block "
                   "type expected)", t->file, name, tn);
    return NUMLA_STATUS_OK;
}

int numla_gguf_is_deepseek4(const numla_gguf *g)
{
    const numla_gguf_value *v = numla_gguf_find(g, "general.architecture");
    return v && v->type == NUMLA_GGUF_STRING && !strcmp(v->v.str.s, "deepseek4");
}

static numla_status read_keys_(const numla_gguf *g, numla_gguf_deepseek4 *o)
{
    const char *path = numla_gguf_path(g);
    const char *arch = NULL;
    NUMLA_CHECK(numla_gguf_get_str(g, "general.architecture", &arch));
    if (strcmp(arch, "deepseek4"))
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "gguf: " P_ ": architecture '%.100s' is not "
                   "deepseek4", path, arch);
    NUMLA_CHECK(d4_int_(g, "block_count", 1, NUMLA_GGUF_DS4_MAX_LAYERS, &o->num_hidden_layers));
    NUMLA_CHECK(d4_int_(g, "embedding_length", 1, D4_MAX_HIDDEN, &o->hidden_size));
    NUMLA_CHECK(d4_int_(g, "context_length", 1, D4_MAX_POSITIONS, &o->max_position_embeddings));
    NUMLA_CHECK(d4_int_(g, "attention.head_count", 1, D4_MAX_HEADS, &o->num_attention_heads));
    int64_t kvh, vl;
    NUMLA_CHECK(d4_int_opt_(g, "attention.head_count_kv", 0, D4_MAX_HEADS, 1, &kvh));
    if (kvh != 1)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": key 'deepseek4.attention.head_count_kv' "
                   "= %lld, expected 1 (one shared KV row)", path, (long long)kvh);
    NUMLA_CHECK(d4_int_(g, "attention.key_length", 1, D4_MAX_HEAD_DIM, &o->head_dim));
    NUMLA_CHECK(d4_int_opt_(g, "attention.value_length", 0, D4_MAX_HEAD_DIM, o->head_dim, &vl));
    if (vl != o->head_dim)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": key 'deepseek4.attention.value_length' = "
                   "%lld differs from key_length = %lld (the KV row is key and value)", path,
                   (long long)vl, (long long)o->head_dim);
    NUMLA_CHECK(d4_real_(g, "attention.layer_norm_rms_epsilon", 1, 0, 1, &o->rms_norm_eps));
    NUMLA_CHECK(d4_int_(g, "attention.q_lora_rank", 1, D4_MAX_RANK, &o->q_lora_rank));
    NUMLA_CHECK(d4_int_(g, "attention.sliding_window", 1, D4_MAX_POSITIONS, &o->sliding_window));
    NUMLA_CHECK(d4_int_(g, "attention.output_group_count", 1, D4_MAX_HEADS, &o->o_groups));
    NUMLA_CHECK(d4_int_(g, "attention.output_lora_rank", 1, D4_MAX_RANK, &o->o_lora_rank));
    NUMLA_CHECK(d4_int_(g, "rope.dimension_count", 2, o->head_dim, &o->qk_rope_head_dim));
    if (o->num_attention_heads % o->o_groups || (o->num_attention_heads * o->head_dim) % o->o_groups)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": key 'deepseek4.attention."
                   "output_group_count' = %lld does not divide head_count = %lld", path,
                   (long long)o->o_groups, (long long)o->num_attention_heads);
    const int64_t L = o->num_hidden_layers;
    const numla_gguf_value *cr;
    NUMLA_CHECK(d4_array_(g, "attention.compress_ratios", L, &cr));
    int any_csa = 0;
    o->hca_rate = 0;
    for (int64_t l = 0; l < L; l++) {
        const double r = arr_at_(cr, (uint64_t)l);
        if (!(r >= 0 && r <= (double)D4_MAX_RATE) || r != (double)(int64_t)r)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": key 'deepseek4.attention."
                       "compress_ratios' entry %lld = %g is not a rate in [0, %lld]", path,
                       (long long)l, r, (long long)D4_MAX_RATE);
        o->compress_ratios[l] = (int32_t)r;
        any_csa |= r == 4;
        if (r != 0 && r != 4) {
            if (o->hca_rate && o->hca_rate != (int64_t)r)
                NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "gguf: " P_ ": key 'deepseek4.attention."
                           "compress_ratios' holds two HCA rates (%lld and %g)", path,
                           (long long)o->hca_rate, r);
            o->hca_rate = (int64_t)r;
        }
    }
    if (!o->hca_rate)
        o->hca_rate = 128;
    NUMLA_CHECK(d4_real_(g, "attention.compress_rope_freq_base", 1, 0, 1, &o->compress_rope_theta));
    NUMLA_CHECK(d4_real_(g, "rope.freq_base", 0, 10000.0, 1, &o->rope_theta));
    if (any_csa) {
        NUMLA_CHECK(d4_int_(g, "attention.indexer.head_count", 1, D4_MAX_HEADS, &o->index_n_heads));
        NUMLA_CHECK(d4_int_(g, "attention.indexer.key_length", o->qk_rope_head_dim,
                            D4_MAX_HEAD_DIM, &o->index_head_dim));
        NUMLA_CHECK(d4_int_(g, "attention.indexer.top_k", 1, D4_MAX_POSITIONS, &o->index_topk));
    }
    const numla_gguf_value *st = numla_gguf_find(g, "deepseek4.rope.scaling.type");
    o->rope_yarn = 0;
    o->rope_factor = 1.0;
    if (st) {
        const char *s;
        NUMLA_CHECK(numla_gguf_get_str(g, "deepseek4.rope.scaling.type", &s));
        if (!strcmp(s, "yarn"))
            o->rope_yarn = 1;
        else if (strcmp(s, "none"))
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "gguf: " P_ ": key 'deepseek4.rope.scaling.type' "
                       "= '%.40s' (yarn or none)", path, s);
    }
    if (o->rope_yarn) {
        NUMLA_CHECK(d4_real_(g, "rope.scaling.factor", 1, 0, 1, &o->rope_factor));
        NUMLA_CHECK(d4_int_opt_(g, "rope.scaling.original_context_length", 1, D4_MAX_POSITIONS,
                                o->max_position_embeddings,
                                &o->rope_original_max_position_embeddings));
        NUMLA_CHECK(d4_real_(g, "rope.scaling.yarn_beta_fast", 0, 32.0, 1, &o->rope_beta_fast));
        NUMLA_CHECK(d4_real_(g, "rope.scaling.yarn_beta_slow", 0, 1.0, 1, &o->rope_beta_slow));
    }
    NUMLA_CHECK(d4_int_(g, "expert_count", 1, D4_MAX_EXPERTS, &o->n_routed_experts));
    NUMLA_CHECK(d4_int_(g, "expert_used_count", 1, o->n_routed_experts, &o->num_experts_per_tok));
    NUMLA_CHECK(d4_int_(g, "expert_shared_count", 0, 64, &o->n_shared_experts));
    NUMLA_CHECK(d4_int_(g, "expert_feed_forward_length", 1, D4_MAX_INTER, &o->moe_intermediate_size));
    int64_t gating;
    NUMLA_CHECK(d4_int_opt_(g, "expert_gating_func", 0, 1 << 20, 4, &gating));
    if (gating != 4)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "gguf: " P_ ": key 'deepseek4.expert_gating_func' = "
                   "%lld (DeepSeek-V4 scores with sqrtsoftplus, 4)", path, (long long)gating);
    NUMLA_CHECK(d4_real_(g, "expert_weights_scale", 0, 1.0, 1, &o->routed_scaling_factor));
    o->norm_topk_prob = 0;
    if (numla_gguf_find(g, "deepseek4.expert_weights_norm"))
        NUMLA_CHECK(numla_gguf_get_bool(g, "deepseek4.expert_weights_norm", &o->norm_topk_prob));
    static const char *const clamp[2] = {"swiglu_clamp_exp", "swiglu_clamp_shexp"};
    o->swiglu_limit = 0;
    for (int c = 0; c < 2; c++) {
        const numla_gguf_value *a;
        NUMLA_CHECK(d4_array_(g, clamp[c], L, &a));
        for (int64_t l = 0; l < L; l++) {
            const double v = arr_at_(a, (uint64_t)l);
            if (c == 0 && l == 0)
                o->swiglu_limit = v;
            if (!(v > 0) || v != o->swiglu_limit)
                NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "gguf: " P_ ": key 'deepseek4.%s' entry "
                           "%lld = %g: numla runs one positive swiglu_limit for every layer and "
                           "both expert kinds (%g)", path, clamp[c], (long long)l, v,
                           o->swiglu_limit);
        }
    }
    NUMLA_CHECK(d4_int_(g, "hyper_connection.count", 1, 16, &o->hc_mult));
    NUMLA_CHECK(d4_int_(g, "hyper_connection.sinkhorn_iterations", 1, 1 << 16, &o->hc_sinkhorn_iters));
    NUMLA_CHECK(d4_real_(g, "hyper_connection.epsilon", 1, 0, 1, &o->hc_eps));
    NUMLA_CHECK(d4_int_opt_(g, "hash_layer_count", 0, L, 0, &o->num_hash_layers));
    const numla_gguf_value *toks = numla_gguf_find(g, "tokenizer.ggml.tokens");
    if (numla_gguf_find(g, "deepseek4.vocab_size"))
        NUMLA_CHECK(d4_int_(g, "vocab_size", 1, D4_MAX_VOCAB, &o->vocab_size));
    else if (toks && toks->type == NUMLA_GGUF_ARRAY && toks->v.arr.count > 0 &&
             toks->v.arr.count <= (uint64_t)D4_MAX_VOCAB)
        o->vocab_size = (int64_t)toks->v.arr.count;
    else
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": neither key 'deepseek4.vocab_size' nor a "
                   "tokenizer.ggml.tokens array of 1 to %lld entries gives the vocabulary size",
                   path, (long long)D4_MAX_VOCAB);
    int64_t id;
    o->bos_token_id = o->eos_token_id = -1;
    if (numla_gguf_find(g, "tokenizer.ggml.bos_token_id")) {
        NUMLA_CHECK(numla_gguf_get_i64(g, "tokenizer.ggml.bos_token_id", &id));
        o->bos_token_id = id >= 0 && id < o->vocab_size ? (int32_t)id : -1;
    }
    if (numla_gguf_find(g, "tokenizer.ggml.eos_token_id")) {
        NUMLA_CHECK(numla_gguf_get_i64(g, "tokenizer.ggml.eos_token_id", &id));
        o->eos_token_id = id >= 0 && id < o->vocab_size ? (int32_t)id : -1;
    }
    return NUMLA_STATUS_OK;
}

numla_status numla_gguf_deepseek4_read(const numla_gguf *g, numla_gguf_deepseek4 *out)
{
    numla_gguf_deepseek4 o;
    memset(&o, 0, sizeof o);
    NUMLA_CHECK(read_keys_(g, &o));
    const int64_t D = o.hidden_size, V = o.vocab_size, n = o.hc_mult;
    o.tie_word_embeddings = numla_gguf_tensor_find(g, ROOT[R_OUT].gguf) == NULL;
    const int64_t root_ne[R_COUNT][2] = {
        [R_EMBD] = {D, V}, [R_OUT] = {D, V}, [R_OUT_NORM] = {D, 1}, [R_HC_FN] = {n * D, n},
        [R_HC_BASE] = {n, 1}, [R_HC_SCALE] = {1, 1},
    };
    for (int r = 0; r < R_COUNT; r++) {
        if (r == R_OUT && o.tie_word_embeddings)
            continue;
        const int32_t nd = r == R_EMBD || r == R_OUT || r == R_HC_FN ? 2 : 1;
        NUMLA_CHECK(expect_(g, ROOT[r].gguf, ROOT[r].kind, nd, root_ne[r]));
    }
    char name[256];
    for (int64_t l = 0; l < o.num_hidden_layers; l++)
        for (int id = 0; id < L_COUNT; id++) {
            int64_t ne[3];
            int32_t nd;
            if (!layer_ne(&o, id, l, ne, &nd))
                continue;
            snprintf(name, sizeof name, "blk.%lld.%s", (long long)l, LAYER[id].gguf);
            NUMLA_CHECK(expect_(g, name, LAYER[id].kind, nd, ne));
        }
    *out = o;
    return NUMLA_STATUS_OK;
}

/* The MTP file's own tensors (blk.L.nextn.* and its hyper-head at the root), under mtp.0.*. */
enum { M_EH, M_ENORM, M_HNORM, M_NORM, M_COUNT };
static const d4_tensor NEXTN[M_COUNT] = {
    [M_EH] = {"nextn.eh_proj.weight", "eh_proj.weight", TK_ANY},
    [M_ENORM] = {"nextn.enorm.weight", "enorm.weight", TK_FLOAT},
    [M_HNORM] = {"nextn.hnorm.weight", "hnorm.weight", TK_FLOAT},
    [M_NORM] = {"nextn.shared_head_norm.weight", "norm.weight", TK_FLOAT},
};

numla_status numla_gguf_deepseek4_read_mtp(const numla_gguf *mtp, const numla_gguf_deepseek4 *main,
                                           int32_t *mtp_ratio)
{
    const char *path = numla_gguf_path(mtp);
    numla_gguf_deepseek4 d;
    memset(&d, 0, sizeof d);
    if (!numla_gguf_is_deepseek4(mtp))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": not a deepseek4 file (the MTP file of a "
                   "deepseek4 model is one, as llama.cpp's convert_hf_to_gguf.py --mtp writes it)",
                   path);
    int64_t nextn = 0;
    NUMLA_CHECK(d4_int_opt_(mtp, "nextn_predict_layers", 0, 1 << 10, 0, &nextn));
    if (nextn != 1)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "gguf: " P_ ": key 'deepseek4.nextn_predict_layers' "
                   "is %lld: not an MTP file with one layer (llama.cpp's convert_hf_to_gguf.py "
                   "--mtp writes one)", path, (long long)nextn);
    NUMLA_CHECK(read_keys_(mtp, &d));
    numla_gguf_deepseek4 own; /* main NULL: the file's own keys stand for the model's */
    if (!main) {
        own = d;
        own.num_hidden_layers = d.num_hidden_layers - 1;
        main = &own;
    }
    const int64_t L = main->num_hidden_layers;
    if (d.num_hidden_layers != L + 1)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": key 'deepseek4.block_count' = %lld, the "
                   "model's %lld layers and its MTP layer are %lld", path,
                   (long long)d.num_hidden_layers, (long long)L, (long long)(L + 1));
    /* the shapes the layer shares with the model */
    const struct {
        const char *key;
        int64_t a, b;
    } same[] = {
        {"embedding_length", d.hidden_size, main->hidden_size},
        {"vocab_size", d.vocab_size, main->vocab_size},
        {"attention.head_count", d.num_attention_heads, main->num_attention_heads},
        {"attention.key_length", d.head_dim, main->head_dim},
        {"rope.dimension_count", d.qk_rope_head_dim, main->qk_rope_head_dim},
        {"attention.q_lora_rank", d.q_lora_rank, main->q_lora_rank},
        {"attention.output_group_count", d.o_groups, main->o_groups},
        {"attention.output_lora_rank", d.o_lora_rank, main->o_lora_rank},
        {"attention.sliding_window", d.sliding_window, main->sliding_window},
        {"expert_count", d.n_routed_experts, main->n_routed_experts},
        {"expert_used_count", d.num_experts_per_tok, main->num_experts_per_tok},
        {"expert_shared_count", d.n_shared_experts, main->n_shared_experts},
        {"expert_feed_forward_length", d.moe_intermediate_size, main->moe_intermediate_size},
        {"hyper_connection.count", d.hc_mult, main->hc_mult},
        {"attention.indexer.head_count", d.index_n_heads, main->index_n_heads},
        {"attention.indexer.key_length", d.index_head_dim, main->index_head_dim},
    };
    for (size_t i = 0; i < sizeof same / sizeof *same; i++)
        if (same[i].a != same[i].b)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": key 'deepseek4.%s' = %lld, the "
                       "model's is %lld (an MTP file of another model?)", path, same[i].key,
                       (long long)same[i].a, (long long)same[i].b);
    const int32_t r = d.compress_ratios[L];
    if (r != 0 && r != 4 && r != main->hca_rate)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "gguf: " P_ ": key 'deepseek4.attention."
                   "compress_ratios' entry %lld (the MTP layer's) = %d is not 0, 4 or the "
                   "model's HCA rate %lld", path, (long long)L, (int)r, (long long)main->hca_rate);
    if (r == 4 && !main->index_n_heads)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "gguf: " P_ ": the MTP layer is CSA but the model "
                   "has no indexer keys", path);
    if (L < d.num_hash_layers)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "gguf: " P_ ": key 'deepseek4.hash_layer_count' = "
                   "%lld makes the MTP layer a hash layer", path, (long long)d.num_hash_layers);
    char name[256];
    for (int id = 0; id < L_COUNT; id++) {
        int64_t ne[3];
        int32_t nd;
        if (!layer_ne(&d, id, L, ne, &nd))
            continue;
        snprintf(name, sizeof name, "blk.%lld.%s", (long long)L, LAYER[id].gguf);
        NUMLA_CHECK(expect_(mtp, name, LAYER[id].kind, nd, ne));
    }
    const int64_t D = d.hidden_size, n = d.hc_mult;
    for (int id = 0; id < M_COUNT; id++) {
        snprintf(name, sizeof name, "blk.%lld.%s", (long long)L, NEXTN[id].gguf);
        const int64_t ne[2] = {id == M_EH ? 2 * D : D, D};
        NUMLA_CHECK(expect_(mtp, name, NEXTN[id].kind, id == M_EH ? 2 : 1, ne));
    }
    const int64_t hc_ne[3][2] = {{n * D, n}, {n, 1}, {1, 1}};
    for (int k = 0; k < 3; k++)
        NUMLA_CHECK(expect_(mtp, ROOT[R_HC_FN + k].gguf, TK_FLOAT, k ? 1 : 2, hc_ne[k]));
    *mtp_ratio = r;
    return NUMLA_STATUS_OK;
}

/* One view entry of GGUF tensor t: rows [row0, row0 + rows) of its 2-D (or 1-D) form. */
static void view_entry_(const numla_gguf_tensor *t, int64_t row0, int64_t rows, char *name,
                        numla_safetensors_tensor *e)
{
    const numla_ggml_type_info *ti = numla_ggml_type_get(t->type);
    const size_t row_bytes = (size_t)(t->ne[0] / ti->block) * ti->bytes;
    memset(e, 0, sizeof *e);
    e->name = name;
    e->file = t->file;
    switch (t->type) {
    case NUMLA_GGML_F32: e->dtype = NUMLA_DTYPE_F32; break;
    case NUMLA_GGML_F16: e->dtype = NUMLA_DTYPE_F16; break;
    case NUMLA_GGML_BF16: e->dtype = NUMLA_DTYPE_BF16; break;
    case NUMLA_GGML_I32: e->dtype = NUMLA_DTYPE_I32; break;
    default: e->dtype = NUMLA_DTYPE_END; e->ggml_type = t->type; break;
    }
    e->data = (const char *)t->data + (size_t)row0 * row_bytes;
    e->nbytes = (size_t)rows * row_bytes;
    if (t->ndim == 1) {
        e->ndim = 1;
        e->shape[0] = t->ne[0];
    } else {
        e->ndim = 2;
        e->shape[0] = rows;
        e->shape[1] = t->ne[0];
    }
}

/* Entries of g's tensors at e[*n..] (names at 96 bytes each from names): the model's (mtp 0:
 * the table's tensors of layers below L and the root), or the MTP file's (mtp 1: layer L's
 * tensors, its nextn.* and its root hyper-head, under mtp.0.*). */
static numla_status collect_(const numla_gguf *g, int64_t L, int mtp, numla_safetensors_tensor *e,
                             char *names, int64_t *n)
{
    const int64_t nt = numla_gguf_tensor_count(g);
    for (int64_t i = 0; i < nt; i++) {
        const numla_gguf_tensor *t = numla_gguf_tensor_at(g, i);
        const d4_tensor *d = NULL;
        long long layer = -1;
        int used = 0, nextn = 0;
        if (sscanf(t->name, "blk.%lld.%n", &layer, &used) == 1 && used > 0) {
            for (int id = 0; id < L_COUNT && !d; id++)
                if (!strcmp(t->name + used, LAYER[id].gguf))
                    d = &LAYER[id];
            for (int id = 0; mtp && id < M_COUNT && !d; id++)
                if (!strcmp(t->name + used, NEXTN[id].gguf))
                    d = &NEXTN[id], nextn = 1;
        } else {
            for (int r = 0; r < R_COUNT && !d; r++)
                if (!strcmp(t->name, ROOT[r].gguf))
                    d = &ROOT[r];
            /* the MTP file's root: its own hyper-head; its embedding, head and norm are the
             * model's (a copy) */
            if (mtp && d && !(d >= &ROOT[R_HC_FN] && d <= &ROOT[R_HC_SCALE]))
                d = NULL;
        }
        /* the model: layers below L and the root; the MTP file: layer L and its hyper-head */
        if (!d || (!mtp && layer >= L) || (mtp && layer >= 0 && layer != L) || (!mtp && nextn))
            continue;
        if (t->ndim > (d->kind == TK_EXPERTS ? 3 : 2))
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": tensor '" T_ "' has %d dimensions",
                       t->file, t->name, t->ndim);
        char pre[32];
        if (mtp)
            snprintf(pre, sizeof pre, "mtp.0.");
        else if (layer >= 0)
            snprintf(pre, sizeof pre, "layers.%lld.", layer);
        else
            pre[0] = 0;
        if (d->kind == TK_EXPERTS) {
            for (int64_t x = 0; x < t->ne[2]; x++) {
                char *nm = names + 96 * *n, ds[80];
                snprintf(ds, sizeof ds, d->ds, (long long)x);
                snprintf(nm, 96, "%s%s", pre, ds);
                view_entry_(t, x * t->ne[1], t->ne[1], nm, &e[(*n)++]);
            }
            continue;
        }
        char *nm = names + 96 * *n;
        snprintf(nm, 96, "%s%s", pre, d->ds);
        view_entry_(t, 0, t->ndim == 1 ? 1 : t->ne[1], nm, &e[(*n)++]);
    }
    return NUMLA_STATUS_OK;
}

static int64_t entries_cap_(const numla_gguf *g)
{
    int64_t cap = 0;
    for (int64_t i = 0; g && i < numla_gguf_tensor_count(g); i++) {
        const numla_gguf_tensor *t = numla_gguf_tensor_at(g, i);
        cap += t->ndim == 3 ? t->ne[2] : 1;
    }
    return cap;
}

static numla_status view_(const numla_gguf *g, const numla_gguf *mtp, numla_safetensors_model **out)
{
    *out = NULL;
    int64_t L;
    NUMLA_CHECK(numla_gguf_get_i64(g, "deepseek4.block_count", &L));
    const int64_t cap = entries_cap_(g) + entries_cap_(mtp);
    numla_safetensors_tensor *e = calloc((size_t)(cap > 0 ? cap : 1), sizeof *e);
    char *names = calloc((size_t)(cap > 0 ? cap : 1), 96);
    if (!e || !names) {
        free(e);
        free(names);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "gguf: " P_ ": no memory for the tensor view",
                   numla_gguf_path(g));
    }
    int64_t n = 0;
    numla_status s = collect_(g, L, 0, e, names, &n);
    if (s == NUMLA_STATUS_OK && mtp)
        s = collect_(mtp, L, 1, e, names, &n);
    if (s == NUMLA_STATUS_OK)
        s = numla_safetensors_view_create(e, n, numla_gguf_path(g), out);
    free(e);
    free(names);
    if (s != NUMLA_STATUS_OK) {
        numla_error_frame(__FILE__, __LINE__, __func__);
        return s;
    }
    return NUMLA_STATUS_OK;
}

numla_status numla_gguf_deepseek4_view(const numla_gguf *g, numla_safetensors_model **out)
{
    NUMLA_CHECK(view_(g, NULL, out));
    return NUMLA_STATUS_OK;
}

numla_status numla_gguf_deepseek4_view_mtp(const numla_gguf *g, const numla_gguf *mtp,
                                           numla_safetensors_model **out)
{
    NUMLA_CHECK(view_(g, mtp, out));
    return NUMLA_STATUS_OK;
}
