/* engine/model/config_v4.c — parse the DeepSeek-V4 fields of config.json (config_v4.h). */
#include "engine/model/config_v4.h"
#include "engine/model/config.h"
#include "engine/model/rope.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

_Static_assert(NUMLA_V4_MAX_LAYERS == NUMLA_CONFIG_MAX_LAYERS,
               "config_v4.h's per-layer lists hold every layer a config may have");
_Static_assert(NUMLA_V4_MAX_ROPE_DIM == NUMLA_CONFIG_MAX_ROPE_DIM, "one rope dimension bound");

/* An integer field of obj (errors name pre + key): absent -> dflt, or an error when required;
 * null, not an integer or outside [lo, hi] -> error. */
static numla_status v4_int(const char *src, const json_t *obj, const char *pre, const char *key,
                           int required, int64_t dflt, int64_t lo, int64_t hi, int64_t *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v) {
        if (required)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: missing field %s%s", src, pre, key);
        *out = dflt;
        return NUMLA_STATUS_OK;
    }
    if (!json_is_integer(v))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %s%s is not an integer", src, pre, key);
    int64_t x = (int64_t)json_integer_value(v);
    if (x < lo || x > hi)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %s%s = %lld outside %lld ..= %lld", src, pre,
                   key, (long long)x, (long long)lo, (long long)hi);
    *out = x;
    return NUMLA_STATUS_OK;
}

/* A real field: absent or null -> dflt; not a number, not finite or outside [lo, hi] -> error;
 * lo_open excludes lo itself. */
static numla_status v4_real(const char *src, const json_t *obj, const char *pre, const char *key,
                            double dflt, double lo, int lo_open, double hi, double *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return NUMLA_STATUS_OK;
    }
    if (!json_is_number(v))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %s%s is not a number", src, pre, key);
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || (lo_open && x == lo) || x > hi)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %s%s = %g outside %s%g, %g]", src, pre, key, x,
                   lo_open ? "(" : "[", lo, hi);
    *out = x;
    return NUMLA_STATUS_OK;
}

const char *numla_v4_attn_name(numla_v4_attn a)
{
    switch (a) {
    case NUMLA_V4_ATTN_SLIDING: return "sliding_attention";
    case NUMLA_V4_ATTN_CSA: return "compressed_sparse_attention";
    case NUMLA_V4_ATTN_HCA: return "heavily_compressed_attention";
    }
    return "?";
}

/* compress_rates (dict) or the legacy compress_rate_csa / compress_rate_hca. */
static numla_status v4_rates(const char *src, const json_t *root, numla_v4_config *o)
{
    o->csa_rate = 4;
    o->hca_rate = 128;
    json_t *cr = json_object_get(root, "compress_rates");
    if (cr && !json_is_null(cr)) {
        if (!json_is_object(cr))
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field compress_rates is not an object", src);
        const char *k;
        json_t *v;
        json_object_foreach(cr, k, v) {
            if (strcmp(k, "compressed_sparse_attention") && strcmp(k, "heavily_compressed_attention"))
                NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                           "%s: field compress_rates.%s is not a V4 layer type (compressed_sparse_"
                           "attention, heavily_compressed_attention)", src, k);
        }
        NUMLA_CHECK(v4_int(src, cr, "compress_rates.", "compressed_sparse_attention", 0, 4, 1,
                           NUMLA_V4_MAX_RATE, &o->csa_rate));
        NUMLA_CHECK(v4_int(src, cr, "compress_rates.", "heavily_compressed_attention", 0, 128, 1,
                           NUMLA_V4_MAX_RATE, &o->hca_rate));
    }
    NUMLA_CHECK(v4_int(src, root, "", "compress_rate_csa", 0, o->csa_rate, 1, NUMLA_V4_MAX_RATE,
                       &o->csa_rate));
    NUMLA_CHECK(v4_int(src, root, "", "compress_rate_hca", 0, o->hca_rate, 1, NUMLA_V4_MAX_RATE,
                       &o->hca_rate));
    if (o->csa_rate == o->hca_rate)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                   "%s: fields compress_rates: the CSA and HCA rates are both %lld (a compress_ratios "
                   "entry could not say which layer type it means)", src, (long long)o->csa_rate);
    return NUMLA_STATUS_OK;
}

/* layer_types, else compress_ratios, else transformers' default schedule. */
static numla_status v4_layer_types(const char *src, const json_t *root, numla_v4_config *o)
{
    const int64_t n = o->num_layers;
    json_t *lt = json_object_get(root, "layer_types");
    json_t *cr = json_object_get(root, "compress_ratios");
    if (lt && !json_is_null(lt)) {
        if (!json_is_array(lt))
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field layer_types is not a list", src);
        if ((int64_t)json_array_size(lt) != n)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                       "%s: field layer_types has %zu entries, num_hidden_layers is %lld", src,
                       json_array_size(lt), (long long)n);
        for (int64_t i = 0; i < n; i++) {
            const char *s = json_string_value(json_array_get(lt, (size_t)i));
            int a = -1;
            for (int k = NUMLA_V4_ATTN_SLIDING; k <= NUMLA_V4_ATTN_HCA; k++)
                if (s && !strcmp(s, numla_v4_attn_name((numla_v4_attn)k)))
                    a = k;
            if (a < 0)
                NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                           "%s: field layer_types[%lld] is not \"sliding_attention\", "
                           "\"compressed_sparse_attention\" or \"heavily_compressed_attention\"",
                           src, (long long)i);
            o->attn[i] = (uint8_t)a;
        }
        return NUMLA_STATUS_OK;
    }
    if (cr && !json_is_null(cr)) {
        if (!json_is_array(cr))
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field compress_ratios is not a list", src);
        /* entries past num_hidden_layers are the MTP layers' */
        if ((int64_t)json_array_size(cr) < n)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                       "%s: field compress_ratios has %zu entries, num_hidden_layers is %lld", src,
                       json_array_size(cr), (long long)n);
        for (int64_t i = 0; i < n; i++) {
            json_t *v = json_array_get(cr, (size_t)i);
            int64_t r = json_is_integer(v) ? (int64_t)json_integer_value(v) : -1;
            if (r == 0)
                o->attn[i] = NUMLA_V4_ATTN_SLIDING;
            else if (r == o->csa_rate)
                o->attn[i] = NUMLA_V4_ATTN_CSA;
            else if (r == o->hca_rate)
                o->attn[i] = NUMLA_V4_ATTN_HCA;
            else
                NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                           "%s: field compress_ratios[%lld] is not 0, %lld (CSA) or %lld (HCA)",
                           src, (long long)i, (long long)o->csa_rate, (long long)o->hca_rate);
        }
        return NUMLA_STATUS_OK;
    }
    for (int64_t i = 0; i < n; i++)
        o->attn[i] = i < 2 ? NUMLA_V4_ATTN_HCA : (i - 2) % 2 ? NUMLA_V4_ATTN_CSA : NUMLA_V4_ATTN_HCA;
    return NUMLA_STATUS_OK;
}

static numla_status v4_mlp_types(const char *src, const json_t *root, numla_v4_config *o)
{
    const int64_t n = o->num_layers;
    json_t *ml = json_object_get(root, "mlp_layer_types");
    if (ml && !json_is_null(ml)) {
        if (!json_is_array(ml))
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field mlp_layer_types is not a list", src);
        if ((int64_t)json_array_size(ml) != n)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                       "%s: field mlp_layer_types has %zu entries, num_hidden_layers is %lld", src,
                       json_array_size(ml), (long long)n);
        for (int64_t i = 0; i < n; i++) {
            const char *s = json_string_value(json_array_get(ml, (size_t)i));
            if (s && !strcmp(s, "hash_moe"))
                o->hash_moe[i] = 1;
            else if (s && !strcmp(s, "moe"))
                o->hash_moe[i] = 0;
            else
                NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                           "%s: field mlp_layer_types[%lld] is not \"hash_moe\" or \"moe\"", src,
                           (long long)i);
        }
        return NUMLA_STATUS_OK;
    }
    int64_t nh = 3;
    NUMLA_CHECK(v4_int(src, root, "", "num_hash_layers", 0, 3, 0, NUMLA_V4_MAX_LAYERS, &nh));
    for (int64_t i = 0; i < n; i++)
        o->hash_moe[i] = i < nh;
    return NUMLA_STATUS_OK;
}

/* The MTP layer's (index num_layers) attention and MoE types (docs/design.md §5.9): its
 * compress_ratios entry when the list has one (the published lists do), else sliding; routed MoE
 * (its index is past num_hash_layers). Nothing when the checkpoint ships no MTP layer or the
 * layer count leaves no room (numla_v4_config_enable_mtp then refuses). */
static numla_status v4_mtp_types(const char *src, const json_t *root, numla_v4_config *o)
{
    const int64_t n = o->num_layers;
    if (o->num_nextn_predict_layers < 1 || n >= NUMLA_V4_MAX_LAYERS)
        return NUMLA_STATUS_OK;
    o->attn[n] = NUMLA_V4_ATTN_SLIDING;
    o->hash_moe[n] = 0;
    json_t *lt = json_object_get(root, "layer_types");
    json_t *cr = json_object_get(root, "compress_ratios");
    if ((lt && !json_is_null(lt)) || !json_is_array(cr) || (int64_t)json_array_size(cr) <= n)
        return NUMLA_STATUS_OK;
    json_t *v = json_array_get(cr, (size_t)n);
    int64_t r = json_is_integer(v) ? (int64_t)json_integer_value(v) : -1;
    if (r == o->csa_rate)
        o->attn[n] = NUMLA_V4_ATTN_CSA;
    else if (r == o->hca_rate)
        o->attn[n] = NUMLA_V4_ATTN_HCA;
    else if (r != 0)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                   "%s: field compress_ratios[%lld] (the MTP layer's) is not 0, %lld (CSA) or %lld "
                   "(HCA)", src, (long long)n, (long long)o->csa_rate, (long long)o->hca_rate);
    if (o->attn[n] == NUMLA_V4_ATTN_CSA && o->rope_dim > o->index_head_dim)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                   "%s: field index_head_dim = %lld is below the rope dimension %lld (the MTP "
                   "layer's indexer)", src, (long long)o->index_head_dim, (long long)o->rope_dim);
    return NUMLA_STATUS_OK;
}

/* The rope dimension: head_dim · partial_rotary_factor, qk_rope_head_dim, or head_dim / 8. */
static numla_status v4_rope_dim(const char *src, const json_t *root, numla_v4_config *o)
{
    int64_t qk = 0;
    NUMLA_CHECK(v4_int(src, root, "", "qk_rope_head_dim", 0, 0, 1, NUMLA_V4_MAX_ROPE_DIM, &qk));
    double prf = 0;
    NUMLA_CHECK(v4_real(src, root, "", "partial_rotary_factor", 0, 0, 1, 1, &prf));
    int64_t from_prf = prf > 0 ? (int64_t)((double)o->head_dim * prf) : 0;
    if (from_prf && qk && from_prf != qk)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                   "%s: fields partial_rotary_factor (%g x head_dim %lld = %lld) and "
                   "qk_rope_head_dim (%lld) disagree", src, prf, (long long)o->head_dim,
                   (long long)from_prf, (long long)qk);
    o->rope_dim = from_prf ? from_prf : qk ? qk : o->head_dim / 8;
    if (o->rope_dim < 2 || o->rope_dim % 2 || o->rope_dim > o->head_dim ||
        o->rope_dim > NUMLA_V4_MAX_ROPE_DIM)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                   "%s: the rope dimension (qk_rope_head_dim / partial_rotary_factor) = %lld must "
                   "be even, at least 2 and at most head_dim %lld", src, (long long)o->rope_dim,
                   (long long)o->head_dim);
    return NUMLA_STATUS_OK;
}

/* The compress RoPE: compress_rope_theta (or rope_parameters.compress.rope_theta) with the YaRN
 * of rope_scaling / rope_parameters (flat or .compress), attention factor 1 unless written. */
static numla_status v4_rope(const char *src, const json_t *root, double rope_theta,
                            int64_t max_pos, numla_v4_config *o)
{
    NUMLA_CHECK(v4_real(src, root, "", "compress_rope_theta", 160000.0, 1, 1,
                        NUMLA_CONFIG_MAX_ROPE_THETA, &o->compress_rope_theta));
    json_t *rs = json_object_get(root, "rope_scaling");
    const char *pre = "rope_scaling.";
    json_t *rp = json_object_get(root, "rope_parameters");
    if ((!rs || json_is_null(rs)) && rp && !json_is_null(rp)) {
        rs = rp;
        pre = "rope_parameters.";
        json_t *comp = json_object_get(rp, "compress");
        if (json_is_object(comp)) { /* transformers' nested form */
            rs = comp;
            pre = "rope_parameters.compress.";
            NUMLA_CHECK(v4_real(src, rs, pre, "rope_theta", o->compress_rope_theta, 1, 1,
                                NUMLA_CONFIG_MAX_ROPE_THETA, &o->compress_rope_theta));
        }
    }
    const int64_t d = o->rope_dim;
    for (int64_t i = 0; i < d / 2; i++)
        o->main_inv_freq[i] = 1.0 / pow(rope_theta, (double)(2 * i) / (double)d);
    o->compress_attention_factor = 1.0;
    numla_rope_inv_freq(d, o->compress_rope_theta, 0, 1.0, 1.0, 32, 1, o->compress_inv_freq);
    if (!rs || json_is_null(rs))
        return NUMLA_STATUS_OK;
    if (!json_is_object(rs))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %.*s must be an object or null", src,
                   (int)strlen(pre) - 1, pre);
    const char *t = json_string_value(json_object_get(rs, "rope_type"));
    if (!t)
        t = json_string_value(json_object_get(rs, "type"));
    if (!t || !strcmp(t, "default"))
        return NUMLA_STATUS_OK;
    if (strcmp(t, "yarn"))
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "%s: field %stype \"%s\" is not supported (yarn)",
                   src, pre, t);
    int64_t l0 = max_pos;
    NUMLA_CHECK(v4_int(src, rs, pre, "original_max_position_embeddings", 0, max_pos, 1,
                       NUMLA_CONFIG_MAX_POSITIONS, &l0));
    double factor = 0, bf = 32, bs = 1, af = 1.0;
    NUMLA_CHECK(v4_real(src, rs, pre, "factor", (double)max_pos / (double)l0, 1, 0,
                        NUMLA_CONFIG_MAX_ROPE_FACTOR, &factor));
    NUMLA_CHECK(v4_real(src, rs, pre, "beta_fast", 32, 0, 1, 1e6, &bf));
    NUMLA_CHECK(v4_real(src, rs, pre, "beta_slow", 1, 0, 1, 1e6, &bs));
    NUMLA_CHECK(v4_real(src, rs, pre, "attention_factor", 1.0, 0, 1, NUMLA_CONFIG_MAX_MSCALE, &af));
    json_t *tr = json_object_get(rs, "truncate");
    if (tr && !json_is_boolean(tr))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %struncate is not true/false", src, pre);
    numla_rope_inv_freq_ex(d, o->compress_rope_theta, factor, (double)l0, bf, bs,
                           tr ? json_is_true(tr) : 1, o->compress_inv_freq);
    o->compress_attention_factor = af;
    return NUMLA_STATUS_OK;
}

static numla_status v4_parse(const char *src, const json_t *root, numla_v4_config *o)
{
    if (!json_is_object(root))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: top level is not a JSON object", src);
    const char *mt = json_string_value(json_object_get(root, "model_type"));
    if (!mt || strcmp(mt, "deepseek_v4"))
        return NUMLA_STATUS_OK; /* enabled = 0 */
    o->enabled = 1;
    NUMLA_CHECK(v4_int(src, root, "", "num_hidden_layers", 1, 0, 1, NUMLA_V4_MAX_LAYERS,
                       &o->num_layers));
    int64_t heads = 0, kvh = 1, max_pos = 0;
    NUMLA_CHECK(v4_int(src, root, "", "num_attention_heads", 1, 0, 1, NUMLA_CONFIG_MAX_HEADS,
                       &heads));
    NUMLA_CHECK(v4_int(src, root, "", "max_position_embeddings", 0, 1048576, 1,
                       NUMLA_CONFIG_MAX_POSITIONS, &max_pos));
    NUMLA_CHECK(v4_int(src, root, "", "num_key_value_heads", 0, 1, 1, NUMLA_CONFIG_MAX_HEADS, &kvh));
    if (kvh != 1)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                   "%s: field num_key_value_heads = %lld is not supported (V4's one shared KV row: 1)",
                   src, (long long)kvh);
    NUMLA_CHECK(v4_int(src, root, "", "head_dim", 1, 0, 2, NUMLA_CONFIG_MAX_HEAD_DIM, &o->head_dim));
    NUMLA_CHECK(v4_int(src, root, "", "q_lora_rank", 1, 0, 1, NUMLA_CONFIG_MAX_LORA_RANK,
                       &o->q_lora_rank));
    NUMLA_CHECK(v4_int(src, root, "", "o_groups", 0, 8, 1, NUMLA_CONFIG_MAX_HEADS, &o->o_groups));
    NUMLA_CHECK(v4_int(src, root, "", "o_lora_rank", 0, 1024, 1, NUMLA_CONFIG_MAX_LORA_RANK,
                       &o->o_lora_rank));
    if (heads % o->o_groups)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                   "%s: field o_groups = %lld does not divide num_attention_heads = %lld", src,
                   (long long)o->o_groups, (long long)heads);
    NUMLA_CHECK(v4_int(src, root, "", "sliding_window", 0, 128, 1, NUMLA_CONFIG_MAX_POSITIONS,
                       &o->sliding_window));
    NUMLA_CHECK(v4_int(src, root, "", "index_n_heads", 0, 64, 1, NUMLA_CONFIG_MAX_HEADS,
                       &o->index_n_heads));
    NUMLA_CHECK(v4_int(src, root, "", "index_head_dim", 0, 128, 1, NUMLA_CONFIG_MAX_HEAD_DIM,
                       &o->index_head_dim));
    NUMLA_CHECK(v4_int(src, root, "", "index_topk", 0, 512, 1, NUMLA_V4_MAX_TOPK, &o->index_topk));
    NUMLA_CHECK(v4_int(src, root, "", "hc_mult", 0, 4, 1, NUMLA_V4_MAX_HC, &o->hc_mult));
    NUMLA_CHECK(v4_int(src, root, "", "hc_sinkhorn_iters", 0, 20, 1, 1000, &o->hc_sinkhorn_iters));
    NUMLA_CHECK(v4_real(src, root, "", "hc_eps", 1e-6, 0, 0, 1, &o->hc_eps));
    NUMLA_CHECK(v4_real(src, root, "", "swiglu_limit", 10.0, 0, 1, 1e30, &o->swiglu_limit));
    NUMLA_CHECK(v4_int(src, root, "", "num_nextn_predict_layers", 0, 1, 0, NUMLA_V4_MAX_LAYERS,
                       &o->num_nextn_predict_layers));
    NUMLA_CHECK(v4_rope_dim(src, root, o));
    NUMLA_CHECK(v4_rates(src, root, o));
    NUMLA_CHECK(v4_layer_types(src, root, o));
    NUMLA_CHECK(v4_mlp_types(src, root, o));
    NUMLA_CHECK(v4_mtp_types(src, root, o));
    int any_csa = 0;
    for (int64_t i = 0; i < o->num_layers; i++)
        any_csa |= o->attn[i] == NUMLA_V4_ATTN_CSA;
    if (any_csa && o->rope_dim > o->index_head_dim)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                   "%s: field index_head_dim = %lld is below the rope dimension %lld (the indexer "
                   "rotates its trailing rope-dimension values)", src, (long long)o->index_head_dim,
                   (long long)o->rope_dim);
    double rope_theta = 10000.0;
    NUMLA_CHECK(v4_real(src, root, "", "rope_theta", 10000.0, 1, 1, NUMLA_CONFIG_MAX_ROPE_THETA,
                        &rope_theta));
    json_t *rp = json_object_get(root, "rope_parameters");
    if (json_is_object(json_object_get(rp, "main")))
        NUMLA_CHECK(v4_real(src, json_object_get(rp, "main"), "rope_parameters.main.", "rope_theta",
                            rope_theta, 1, 1, NUMLA_CONFIG_MAX_ROPE_THETA, &rope_theta));
    o->main_rope_theta = rope_theta;
    NUMLA_CHECK(v4_rope(src, root, rope_theta, max_pos, o));
    for (int64_t i = 0; i < o->rope_dim / 2; i++)
        if (!isnormal(o->compress_inv_freq[i]) || !isnormal(o->main_inv_freq[i]))
            NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                       "%s: fields rope_theta / compress_rope_theta / rope_scaling give RoPE "
                       "frequency %lld = %g / %g", src, (long long)i, o->main_inv_freq[i],
                       o->compress_inv_freq[i]);
    return NUMLA_STATUS_OK;
}

numla_status numla_v4_config_from_json(const json_t *root, const char *source, numla_v4_config *out)
{
    if (!root || !out)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_config_from_json: NULL argument");
    numla_v4_config o;
    memset(&o, 0, sizeof o);
    NUMLA_CHECK(v4_parse(source ? source : "config.json", root, &o));
    *out = o;
    return NUMLA_STATUS_OK;
}

/* FP8 bytes of a (rows, cols) matrix: a byte a weight and an E8M0 byte per 128 x 128 block. */
static double v4_fp8_bytes(double rows, double cols)
{
    return rows * cols + ceil(rows / 128.0) * ceil(cols / 128.0);
}

void numla_v4_config_sizes(const numla_model_config *cfg, numla_v4_sizes *out)
{
    const numla_v4_config *v = &cfg->v4;
    const double D = (double)cfg->hidden_size, H = (double)cfg->num_attention_heads;
    const double V = (double)cfg->vocab_size, E = (double)cfg->n_routed_experts;
    const double k = (double)cfg->num_experts_per_tok, I = (double)cfg->moe_intermediate_size;
    const double S = (double)cfg->n_shared_experts * I;
    const double Dh = (double)v->head_dim, Rq = (double)v->q_lora_rank;
    const double G = (double)v->o_groups, Ro = (double)v->o_lora_rank;
    const double Hi = (double)v->index_n_heads, Di = (double)v->index_head_dim;
    const double n = (double)v->hc_mult, W = (double)v->sliding_window;
    const double mix = (2 + n) * n; /* mHC's y: pre, post and the n x n matrix */
    numla_v4_sizes z = {0};
    /* whole-model tensors: embedding and head bf16 (one embedding row read), the final norm and
     * the hyper-head fp32 */
    z.params = 2 * V * D + D + n * n * D + n + 1;
    z.bytes = 2 * (2 * V * D) + 4 * (D + n * n * D + n + 1);
    z.active_params = z.params - (V - 1) * D;
    z.active_bytes = z.bytes - 2 * (V - 1) * D;
    z.replicated_bytes = 4 * (D + n * n * D + n + 1);
    for (int64_t l = 0; l < v->num_layers; l++) {
        const int a = v->attn[l];
        /* FP8: wq_a, wq_b, wkv, wo_a, wo_b, the shared expert; CSA's indexer wq_b */
        double p8 = Rq * D + H * Dh * Rq + Dh * D + G * Ro * (H * Dh / G) + D * G * Ro + 3 * S * D;
        double b8_all = v4_fp8_bytes(Rq, D) + v4_fp8_bytes(Dh, D); /* wq_a, wkv */
        double b8 = b8_all + v4_fp8_bytes(H * Dh, Rq) + v4_fp8_bytes(G * Ro, H * Dh / G) +
                    v4_fp8_bytes(D, G * Ro) + 2 * v4_fp8_bytes(S, D) + v4_fp8_bytes(D, S);
        /* bf16: the router; fp32: the norms (attn, ffn, q, kv), mHC of both blocks, sinks */
        double p16 = E * D, p32 = 2 * D + Rq + Dh + 2 * (mix * n * D + mix + 3) + H;
        if (a == NUMLA_V4_ATTN_CSA) {
            const double m = (double)v->csa_rate;
            p8 += Hi * Di * Rq;
            b8 += v4_fp8_bytes(Hi * Di, Rq);
            b8_all += v4_fp8_bytes(Hi * Di, Rq);
            /* compressor wkv, wgate (2·Dh, D); the indexer's compressor at Di and its
             * weights_proj (Hi, D); their norms and ape fp32 */
            p16 += 2 * (2 * Dh * D) + 2 * (2 * Di * D) + Hi * D;
            p32 += Dh + Di + m * 2 * Dh + m * 2 * Di;
            z.cache_per_token += (Dh + Di) / m;
            z.cache_per_seq += 2 * (2 * m) * (2 * Dh) + 2 * (2 * m) * (2 * Di);
        } else if (a == NUMLA_V4_ATTN_HCA) {
            const double m = (double)v->hca_rate;
            p16 += 2 * (Dh * D);
            p32 += Dh + m * Dh;
            z.cache_per_token += Dh / m;
            z.cache_per_seq += 2 * (2 * m) * Dh;
        }
        z.cache_per_seq += W * Dh;
        const double routed = E * 3 * I * D, hash = v->hash_moe[l] ? V * k : 0;
        if (!v->hash_moe[l])
            p32 += E; /* the router's bias */
        z.params += p8 + p16 + p32 + routed + hash;
        z.bytes += b8 + 2 * p16 + 4 * p32 + routed * 17.0 / 32.0 + 8 * hash;
        z.active_params += p8 + p16 + p32 + routed * k / E + (hash > 0 ? k : 0);
        z.active_bytes += b8 + 2 * p16 + 4 * p32 + routed * (k / E) * 17.0 / 32.0 +
                          (hash > 0 ? 8 * k : 0);
        z.replicated_bytes += b8_all + 2 * p16 + 4 * (p32 - H) + (hash > 0 ? 8 * k : 0);
    }
    *out = z;
}

numla_status numla_v4_config_enable_mtp(numla_model_config *cfg)
{
    if (!cfg || cfg->arch != NUMLA_MODEL_ARCH_DEEPSEEK_V4 || !cfg->v4.enabled)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_config_enable_mtp: not a deepseek_v4 config");
    if (cfg->v4.num_nextn_predict_layers < 1)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "%s: the checkpoint has no multi-token-prediction "
                   "layer (num_nextn_predict_layers is 0), so --speculative mtp cannot draft",
                   cfg->model_type);
    if (cfg->v4.num_layers >= NUMLA_V4_MAX_LAYERS)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "%s: %lld layers leave no room for the MTP layer",
                   cfg->model_type, (long long)cfg->v4.num_layers);
    cfg->mtp_enabled = 1;
    return NUMLA_STATUS_OK;
}
