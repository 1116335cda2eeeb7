/* engine/model/config.c — config.json → numla_model_config (see config.h; DESIGN.md §5). */
#include "engine/model/config.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- field readers: every error names the file and the field ---- */

typedef struct cfg_ctx {
    const char *src;
    json_t *root;
} cfg_ctx;

/* Integer field. `required` = 1: missing is an error. `nullable` = 1: null gives *out = null_val. */
static numla_status cfg_int(const cfg_ctx *c, json_t *obj, const char *prefix, const char *name,
                            int required, int nullable, int64_t dflt, int64_t null_val,
                            int64_t *out)
{
    json_t *v = json_object_get(obj, name);
    if (!v) {
        if (required)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: missing field %s%s", c->src, prefix, name);
        *out = dflt;
        return NUMLA_STATUS_OK;
    }
    if (json_is_null(v)) {
        if (!nullable)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %s%s is null, expected an integer", c->src,
                       prefix, name);
        *out = null_val;
        return NUMLA_STATUS_OK;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d != floor(d) || fabs(d) > 9e15)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %s%s = %g is not an integer", c->src,
                       prefix, name, d);
        *out = (int64_t)d;
        return NUMLA_STATUS_OK;
    }
    if (!json_is_integer(v))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %s%s has the wrong type, expected an integer",
                   c->src, prefix, name);
    *out = (int64_t)json_integer_value(v);
    return NUMLA_STATUS_OK;
}

static numla_status cfg_real(const cfg_ctx *c, json_t *obj, const char *prefix, const char *name,
                             int required, double dflt, double *out)
{
    json_t *v = json_object_get(obj, name);
    if (!v || json_is_null(v)) {
        if (required)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: missing field %s%s", c->src, prefix, name);
        *out = dflt;
        return NUMLA_STATUS_OK;
    }
    if (!json_is_number(v))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %s%s has the wrong type, expected a number",
                   c->src, prefix, name);
    *out = json_number_value(v);
    if (!isfinite(*out))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %s%s is not finite", c->src, prefix, name);
    return NUMLA_STATUS_OK;
}

static numla_status cfg_bool(const cfg_ctx *c, json_t *obj, const char *name, int dflt, int *out)
{
    json_t *v = json_object_get(obj, name);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return NUMLA_STATUS_OK;
    }
    if (!json_is_boolean(v))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %s has the wrong type, expected true/false",
                   c->src, name);
    *out = json_is_true(v);
    return NUMLA_STATUS_OK;
}

/* String field; *out = NULL when absent or null. */
static numla_status cfg_str(const cfg_ctx *c, json_t *obj, const char *prefix, const char *name,
                            const char **out)
{
    json_t *v = json_object_get(obj, name);
    *out = NULL;
    if (!v || json_is_null(v))
        return NUMLA_STATUS_OK;
    if (!json_is_string(v))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %s%s has the wrong type, expected a string",
                   c->src, prefix, name);
    *out = json_string_value(v);
    return NUMLA_STATUS_OK;
}

#define POSITIVE(field, name)                                                                   \
    do {                                                                                        \
        if ((field) <= 0)                                                                       \
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %s = %lld must be positive", c.src,     \
                       name, (long long)(field));                                               \
    } while (0)

/* ---- YaRN (DESIGN.md §5) ---- */

double numla_yarn_get_mscale(double factor, double mscale)
{
    if (factor <= 1.0)
        return 1.0;
    return 0.1 * mscale * log(factor) + 1.0;
}

static double yarn_correction_dim(double rotations, int64_t d, double theta, double l0)
{
    return (double)d * log(l0 / (rotations * 2.0 * M_PI)) / (2.0 * log(theta));
}

void numla_rope_compute_inv_freq(int64_t d, double theta, int yarn, double factor,
                                 double original_max_pos, double beta_fast, double beta_slow,
                                 double *inv_freq)
{
    if (yarn && factor > 1.0) {
        numla_rope_compute_inv_freq_ex(d, theta, factor, original_max_pos, beta_fast, beta_slow,
                                       1, inv_freq);
        return;
    }
    for (int64_t i = 0; i < d / 2; i++)
        inv_freq[i] = 1.0 / pow(theta, (double)(2 * i) / (double)d);
}

void numla_rope_compute_inv_freq_ex(int64_t d, double theta, double factor,
                                    double original_max_pos, double beta_fast, double beta_slow,
                                    int truncate, double *inv_freq)
{
    int64_t half = d / 2;
    double low = 0, high = 1;
    int scaled = factor > 1.0;
    if (scaled) {
        low = yarn_correction_dim(beta_fast, d, theta, original_max_pos);
        high = yarn_correction_dim(beta_slow, d, theta, original_max_pos);
        if (truncate) {
            low = floor(low);
            high = ceil(high);
        }
        if (low < 0)
            low = 0;
        if (high > (double)(d - 1))
            high = (double)(d - 1);
        if (low == high)
            high += 0.001;
    }
    for (int64_t i = 0; i < half; i++) {
        double base = pow(theta, (double)(2 * i) / (double)d);
        if (!scaled) {
            inv_freq[i] = 1.0 / base;
            continue;
        }
        double ramp = ((double)i - low) / (high - low);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        inv_freq[i] = ramp / (factor * base) + (1.0 - ramp) / base;
    }
}

/* ---- parse ---- */

static numla_status parse_rope_scaling(const cfg_ctx *cc, json_t *root, numla_model_config *o)
{
    cfg_ctx c = *cc;
    o->rope_yarn = 0;
    o->rope_factor = 1.0;
    o->rope_truncate = 1;
    o->rope_explicit_attention_factor = 0.0;
    o->rope_original_max_position_embeddings = o->max_position_embeddings;
    o->rope_beta_fast = 32.0;
    o->rope_beta_slow = 1.0;
    o->rope_mscale = 1.0;
    o->rope_mscale_all_dim = 0.0;
    /* transformers >= 5 writes "rope_parameters" (with rope_theta inside) instead of
     * "rope_scaling"; both spell the same YaRN fields. */
    const char *field = "rope_scaling";
    json_t *rs = json_object_get(root, "rope_scaling");
    json_t *rp = json_object_get(root, "rope_parameters");
    if ((!rs || json_is_null(rs)) && rp && !json_is_null(rp)) {
        field = "rope_parameters";
        rs = rp;
    }
    if (!rs || json_is_null(rs))
        return NUMLA_STATUS_OK;
    if (!json_is_object(rs))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %s must be an object or null", c.src, field);
    if (rs == rp && json_object_get(rs, "rope_theta") && !json_object_get(root, "rope_theta"))
        NUMLA_CHECK(cfg_real(&c, rs, "rope_parameters.", "rope_theta", 1, 0, &o->rope_theta));
    const char *type = NULL, *rtype = NULL;
    char pre[32];
    snprintf(pre, sizeof pre, "%s.", field);
    NUMLA_CHECK(cfg_str(&c, rs, pre, "type", &type));
    NUMLA_CHECK(cfg_str(&c, rs, pre, "rope_type", &rtype));
    const char *t = rtype ? rtype : type;
    if (!t)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: missing field %stype", c.src, pre);
    if (!strcmp(t, "default"))
        return NUMLA_STATUS_OK;
    if (strcmp(t, "yarn"))
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                   "%s: %stype \"%s\" is not supported (only \"yarn\")", c.src, pre, t);
    o->rope_yarn = 1;
    /* A missing factor is the ratio max_position_embeddings / original (transformers' rule;
     * DESIGN.md §5 trap). A present factor is used as written. */
    json_t *fv = json_object_get(rs, "factor");
    if ((!fv || json_is_null(fv)) && json_object_get(rs, "original_max_position_embeddings")) {
        int64_t l0;
        NUMLA_CHECK(cfg_int(&c, rs, pre, "original_max_position_embeddings", 1, 0, 0, 0, &l0));
        POSITIVE(l0, "rope_scaling.original_max_position_embeddings");
        o->rope_factor = (double)o->max_position_embeddings / (double)l0;
    } else {
        NUMLA_CHECK(cfg_real(&c, rs, pre, "factor", 1, 1.0, &o->rope_factor));
    }
    NUMLA_CHECK(cfg_bool(&c, rs, "truncate", 1, &o->rope_truncate));
    o->rope_explicit_attention_factor = 0.0;
    NUMLA_CHECK(cfg_real(&c, rs, pre, "attention_factor", 0, 0.0,
                         &o->rope_explicit_attention_factor));
    if (o->rope_factor < 1.0)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %sfactor = %g must be >= 1", c.src, pre,
                   o->rope_factor);
    NUMLA_CHECK(cfg_int(&c, rs, pre, "original_max_position_embeddings", 0, 0,
                        o->max_position_embeddings, 0, &o->rope_original_max_position_embeddings));
    POSITIVE(o->rope_original_max_position_embeddings,
             "rope_scaling.original_max_position_embeddings");
    NUMLA_CHECK(cfg_real(&c, rs, pre, "beta_fast", 0, 32.0, &o->rope_beta_fast));
    NUMLA_CHECK(cfg_real(&c, rs, pre, "beta_slow", 0, 1.0, &o->rope_beta_slow));
    NUMLA_CHECK(cfg_real(&c, rs, pre, "mscale", 0, 1.0, &o->rope_mscale));
    NUMLA_CHECK(cfg_real(&c, rs, pre, "mscale_all_dim", 0, 0.0,
                         &o->rope_mscale_all_dim));
    if (o->rope_beta_fast <= 0 || o->rope_beta_slow <= 0)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: %sbeta_fast/beta_slow must be positive", c.src,
                   pre);
    return NUMLA_STATUS_OK;
}

static numla_status parse_eos(const cfg_ctx *cc, json_t *root, numla_model_config *o)
{
    cfg_ctx c = *cc;
    int64_t bos;
    NUMLA_CHECK(cfg_int(&c, root, "", "bos_token_id", 0, 1, -1, -1, &bos));
    o->bos_token_id = (int32_t)bos;
    o->num_eos = 0;
    json_t *v = json_object_get(root, "eos_token_id");
    if (!v || json_is_null(v))
        return NUMLA_STATUS_OK;
    if (json_is_integer(v)) {
        o->eos_token_ids[o->num_eos++] = (int32_t)json_integer_value(v);
    } else if (json_is_array(v)) {
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) {
            if (!json_is_integer(e))
                NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field eos_token_id[%zu] is not an integer",
                           c.src, i);
            if (o->num_eos < NUMLA_CONFIG_MAX_EOS)
                o->eos_token_ids[o->num_eos++] = (int32_t)json_integer_value(e);
        }
    } else {
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field eos_token_id must be an integer or a list",
                   c.src);
    }
    for (int i = 0; i < o->num_eos; i++)
        if (o->eos_token_ids[i] < 0 || o->eos_token_ids[i] >= o->vocab_size)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field eos_token_id = %d outside the vocabulary",
                       c.src, o->eos_token_ids[i]);
    return NUMLA_STATUS_OK;
}

static numla_status parse_root(const cfg_ctx *cc, json_t *root, numla_model_config *o)
{
    cfg_ctx c = *cc;
    if (!json_is_object(root))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: top level is not a JSON object", c.src);
    const char *mt;
    NUMLA_CHECK(cfg_str(&c, root, "", "model_type", &mt));
    if (!mt)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: missing field model_type", c.src);
    if (!strcmp(mt, "deepseek_v2"))
        o->arch = NUMLA_MODEL_ARCH_DEEPSEEK_V2;
    else if (!strcmp(mt, "deepseek_v3"))
        o->arch = NUMLA_MODEL_ARCH_DEEPSEEK_V3;
    else
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                   "%s: field model_type = \"%s\" is not supported (deepseek_v2, deepseek_v3)",
                   c.src, mt);
    snprintf(o->model_type, sizeof o->model_type, "%s", mt);
    int v3 = o->arch == NUMLA_MODEL_ARCH_DEEPSEEK_V3;

    NUMLA_CHECK(cfg_int(&c, root, "", "vocab_size", 1, 0, 0, 0, &o->vocab_size));
    NUMLA_CHECK(cfg_int(&c, root, "", "hidden_size", 1, 0, 0, 0, &o->hidden_size));
    NUMLA_CHECK(cfg_int(&c, root, "", "num_hidden_layers", 1, 0, 0, 0, &o->num_hidden_layers));
    NUMLA_CHECK(cfg_int(&c, root, "", "num_attention_heads", 1, 0, 0, 0, &o->num_attention_heads));
    NUMLA_CHECK(cfg_int(&c, root, "", "intermediate_size", 1, 0, 0, 0, &o->intermediate_size));
    NUMLA_CHECK(cfg_real(&c, root, "", "rms_norm_eps", 1, 0, &o->rms_norm_eps));
    NUMLA_CHECK(cfg_int(&c, root, "", "max_position_embeddings", 1, 0, 0, 0,
                        &o->max_position_embeddings));
    NUMLA_CHECK(cfg_bool(&c, root, "tie_word_embeddings", 0, &o->tie_word_embeddings));
    POSITIVE(o->vocab_size, "vocab_size");
    POSITIVE(o->hidden_size, "hidden_size");
    POSITIVE(o->num_hidden_layers, "num_hidden_layers");
    POSITIVE(o->num_attention_heads, "num_attention_heads");
    POSITIVE(o->intermediate_size, "intermediate_size");
    POSITIVE(o->max_position_embeddings, "max_position_embeddings");
    if (!(o->rms_norm_eps > 0))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field rms_norm_eps must be positive", c.src);
    if (o->vocab_size > INT32_MAX)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field vocab_size = %lld does not fit int32", c.src,
                   (long long)o->vocab_size);

    const char *act;
    NUMLA_CHECK(cfg_str(&c, root, "", "hidden_act", &act));
    if (act && strcmp(act, "silu"))
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "%s: field hidden_act = \"%s\" is not supported (silu)",
                   c.src, act);
    int attn_bias = 0;
    NUMLA_CHECK(cfg_bool(&c, root, "attention_bias", 0, &attn_bias));
    if (attn_bias)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "%s: field attention_bias = true is not supported",
                   c.src);

    /* MLA. q_lora_rank must be written out: see config.h. */
    if (!json_object_get(root, "q_lora_rank"))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                   "%s: missing field q_lora_rank (write null for a plain q_proj; the HF class "
                   "would silently default it to 1536)", c.src);
    NUMLA_CHECK(cfg_int(&c, root, "", "q_lora_rank", 1, 1, 0, 0, &o->q_lora_rank));
    if (o->q_lora_rank < 0)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field q_lora_rank = %lld must be null or positive",
                   c.src, (long long)o->q_lora_rank);
    NUMLA_CHECK(cfg_int(&c, root, "", "kv_lora_rank", 1, 0, 0, 0, &o->kv_lora_rank));
    NUMLA_CHECK(cfg_int(&c, root, "", "qk_nope_head_dim", 1, 0, 0, 0, &o->qk_nope_head_dim));
    NUMLA_CHECK(cfg_int(&c, root, "", "qk_rope_head_dim", 1, 0, 0, 0, &o->qk_rope_head_dim));
    NUMLA_CHECK(cfg_int(&c, root, "", "v_head_dim", 1, 0, 0, 0, &o->v_head_dim));
    POSITIVE(o->kv_lora_rank, "kv_lora_rank");
    POSITIVE(o->qk_nope_head_dim, "qk_nope_head_dim");
    POSITIVE(o->qk_rope_head_dim, "qk_rope_head_dim");
    POSITIVE(o->v_head_dim, "v_head_dim");
    /* The vector attention / cache kernels need these multiples (kernels/mla_attn.h). */
    if (o->kv_lora_rank % 32)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                   "%s: field kv_lora_rank = %lld is not a multiple of 32 (the attention kernels "
                   "need that)", c.src, (long long)o->kv_lora_rank);
    if (o->qk_rope_head_dim % 16)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                   "%s: field qk_rope_head_dim = %lld is not a multiple of 16 (the attention "
                   "kernels need that)", c.src, (long long)o->qk_rope_head_dim);
    if (o->qk_rope_head_dim > NUMLA_CONFIG_MAX_ROPE_DIM)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "%s: field qk_rope_head_dim = %lld exceeds %d",
                   c.src, (long long)o->qk_rope_head_dim, NUMLA_CONFIG_MAX_ROPE_DIM);
    o->q_head_dim = o->qk_nope_head_dim + o->qk_rope_head_dim;

    /* MoE */
    NUMLA_CHECK(cfg_int(&c, root, "", "n_routed_experts", 0, 1, 0, 0, &o->n_routed_experts));
    NUMLA_CHECK(cfg_int(&c, root, "", "n_shared_experts", 0, 1, 0, 0, &o->n_shared_experts));
    NUMLA_CHECK(cfg_int(&c, root, "", "first_k_dense_replace", 0, 1, 0, 0,
                        &o->first_k_dense_replace));
    NUMLA_CHECK(cfg_int(&c, root, "", "moe_layer_freq", 0, 1, 1, 1, &o->moe_layer_freq));
    NUMLA_CHECK(cfg_real(&c, root, "", "routed_scaling_factor", 0, 1.0, &o->routed_scaling_factor));
    NUMLA_CHECK(cfg_bool(&c, root, "norm_topk_prob", 0, &o->norm_topk_prob));
    o->moe_weight_rule = v3 ? NUMLA_MOE_WEIGHT_RULE_NORM_THEN_SCALE
                            : NUMLA_MOE_WEIGHT_RULE_NORM_OR_SCALE;
    if (o->n_routed_experts < 0 || o->n_shared_experts < 0 || o->first_k_dense_replace < 0)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                   "%s: fields n_routed_experts / n_shared_experts / first_k_dense_replace must "
                   "not be negative", c.src);
    o->num_experts_per_tok = 0;
    o->moe_intermediate_size = 0;
    o->n_group = 1;
    o->topk_group = 1;
    o->topk_method = NUMLA_TOPK_METHOD_GREEDY;
    o->scoring_func = NUMLA_SCORING_FUNC_SOFTMAX;
    if (o->n_routed_experts > 0) {
        NUMLA_CHECK(cfg_int(&c, root, "", "num_experts_per_tok", 1, 0, 0, 0,
                            &o->num_experts_per_tok));
        NUMLA_CHECK(cfg_int(&c, root, "", "moe_intermediate_size", 1, 0, 0, 0,
                            &o->moe_intermediate_size));
        POSITIVE(o->num_experts_per_tok, "num_experts_per_tok");
        POSITIVE(o->moe_intermediate_size, "moe_intermediate_size");
        POSITIVE(o->moe_layer_freq, "moe_layer_freq");
        if (o->num_experts_per_tok > o->n_routed_experts)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                       "%s: field num_experts_per_tok = %lld exceeds n_routed_experts = %lld",
                       c.src, (long long)o->num_experts_per_tok, (long long)o->n_routed_experts);
        if (!(o->routed_scaling_factor > 0))
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field routed_scaling_factor must be positive",
                       c.src);

        const char *tm, *sf;
        NUMLA_CHECK(cfg_str(&c, root, "", "topk_method", &tm));
        NUMLA_CHECK(cfg_str(&c, root, "", "scoring_func", &sf));
        if (!tm)
            tm = v3 ? "noaux_tc" : "greedy";
        if (!sf)
            sf = v3 ? "sigmoid" : "softmax";
        if (!strcmp(tm, "greedy"))
            o->topk_method = NUMLA_TOPK_METHOD_GREEDY;
        else if (!strcmp(tm, "group_limited_greedy"))
            o->topk_method = NUMLA_TOPK_METHOD_GROUP_LIMITED_GREEDY;
        else if (!strcmp(tm, "noaux_tc"))
            o->topk_method = NUMLA_TOPK_METHOD_NOAUX_TC;
        else
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                       "%s: field topk_method = \"%s\" is not supported (greedy, "
                       "group_limited_greedy, noaux_tc)", c.src, tm);
        if (!strcmp(sf, "softmax"))
            o->scoring_func = NUMLA_SCORING_FUNC_SOFTMAX;
        else if (!strcmp(sf, "sigmoid"))
            o->scoring_func = NUMLA_SCORING_FUNC_SIGMOID;
        else
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                       "%s: field scoring_func = \"%s\" is not supported (softmax, sigmoid)", c.src,
                       sf);
        if (o->topk_method == NUMLA_TOPK_METHOD_NOAUX_TC && !v3)
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                       "%s: field topk_method = \"noaux_tc\" needs model_type deepseek_v3", c.src);
        if (o->topk_method != NUMLA_TOPK_METHOD_NOAUX_TC && v3)
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                       "%s: field topk_method = \"%s\" with model_type deepseek_v3 (only noaux_tc)",
                       c.src, tm);
        if (v3 && o->scoring_func != NUMLA_SCORING_FUNC_SIGMOID)
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                       "%s: field scoring_func must be \"sigmoid\" for deepseek_v3", c.src);
        if (!v3 && o->scoring_func != NUMLA_SCORING_FUNC_SOFTMAX)
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                       "%s: field scoring_func must be \"softmax\" for deepseek_v2", c.src);

        int grouped = o->topk_method != NUMLA_TOPK_METHOD_GREEDY;
        NUMLA_CHECK(cfg_int(&c, root, "", "n_group", grouped, 1, 1, 1, &o->n_group));
        NUMLA_CHECK(cfg_int(&c, root, "", "topk_group", grouped, 1, o->n_group, o->n_group,
                            &o->topk_group));
        POSITIVE(o->n_group, "n_group");
        POSITIVE(o->topk_group, "topk_group");
        if (grouped) {
            if (o->n_routed_experts % o->n_group)
                NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                           "%s: field n_group = %lld does not divide n_routed_experts = %lld",
                           c.src, (long long)o->n_group, (long long)o->n_routed_experts);
            if (o->topk_group > o->n_group)
                NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                           "%s: field topk_group = %lld exceeds n_group = %lld", c.src,
                           (long long)o->topk_group, (long long)o->n_group);
            int64_t per = o->n_routed_experts / o->n_group;
            if (o->topk_method == NUMLA_TOPK_METHOD_NOAUX_TC && per < 2)
                NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                           "%s: field n_group = %lld leaves fewer than 2 experts per group "
                           "(noaux_tc scores a group by its top 2)", c.src, (long long)o->n_group);
            if (o->topk_group * per < o->num_experts_per_tok)
                NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                           "%s: field num_experts_per_tok = %lld exceeds the %lld experts in "
                           "topk_group = %lld groups", c.src, (long long)o->num_experts_per_tok,
                           (long long)(o->topk_group * per), (long long)o->topk_group);
        }
    }

    /* RoPE */
    NUMLA_CHECK(cfg_real(&c, root, "", "rope_theta", 0, 10000.0, &o->rope_theta));
    if (!(o->rope_theta > 1.0))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field rope_theta = %g must be > 1", c.src,
                   o->rope_theta);
    NUMLA_CHECK(parse_rope_scaling(&c, root, o));
    NUMLA_CHECK(parse_eos(&c, root, o));

    /* Derived values, DESIGN.md §5. */
    double m = 1.0;
    if (o->rope_yarn && o->rope_mscale_all_dim != 0.0)
        m = numla_yarn_get_mscale(o->rope_factor, o->rope_mscale_all_dim);
    o->softmax_scale = pow((double)o->q_head_dim, -0.5) * m * m;
    o->rope_attention_factor = 1.0;
    if (o->rope_yarn)
        o->rope_attention_factor =
            o->rope_explicit_attention_factor > 0
                ? o->rope_explicit_attention_factor
                : numla_yarn_get_mscale(o->rope_factor, o->rope_mscale) /
                      numla_yarn_get_mscale(o->rope_factor, o->rope_mscale_all_dim);
    numla_rope_compute_inv_freq(o->qk_rope_head_dim, o->rope_theta, o->rope_yarn, o->rope_factor,
                                (double)o->rope_original_max_position_embeddings,
                                o->rope_beta_fast, o->rope_beta_slow, o->rope_inv_freq);
    if (o->rope_yarn && !o->rope_truncate) /* rare: unrounded correction range */
        numla_rope_compute_inv_freq_ex(o->qk_rope_head_dim, o->rope_theta, o->rope_factor,
                                       (double)o->rope_original_max_position_embeddings,
                                       o->rope_beta_fast, o->rope_beta_slow, 0, o->rope_inv_freq);
    return NUMLA_STATUS_OK;
}

numla_status numla_model_config_parse(const char *json_text, const char *source,
                                      numla_model_config *out)
{
    if (!json_text || !out)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_model_config_parse: NULL argument");
    cfg_ctx c = {source ? source : "config.json", NULL};
    json_error_t err;
    c.root = json_loads(json_text, JSON_REJECT_DUPLICATES, &err);
    if (!c.root)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s:%d:%d: invalid JSON: %s", c.src, err.line, err.column,
                   err.text);
    numla_model_config tmp;
    memset(&tmp, 0, sizeof tmp);
    numla_status s = parse_root(&c, c.root, &tmp);
    json_decref(c.root);
    if (s != NUMLA_STATUS_OK) {
        numla_error_frame(__FILE__, __LINE__, __func__);
        return s;
    }
    *out = tmp;
    return NUMLA_STATUS_OK;
}

numla_status numla_model_config_load(const char *dir, numla_model_config *out)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f)
        NUMLA_FAIL(NUMLA_STATUS_IO, "%s: cannot open", path);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 65536 > cap) {
            cap = cap ? cap * 2 : 65536;
            if (cap > (64u << 20)) {
                free(buf);
                fclose(f);
                NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: larger than 64 MiB", path);
            }
            char *nb = realloc(buf, cap + 1);
            if (!nb) {
                free(buf);
                fclose(f);
                NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "%s: out of memory", path);
            }
            buf = nb;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0)
            break;
    }
    int rerr = ferror(f);
    fclose(f);
    if (rerr) {
        free(buf);
        NUMLA_FAIL(NUMLA_STATUS_IO, "%s: read error", path);
    }
    buf[len] = 0;
    numla_status s = numla_model_config_parse(buf, path, out);
    free(buf);
    NUMLA_CHECK(s);
    return NUMLA_STATUS_OK;
}

int numla_model_config_is_moe_layer(const numla_model_config *c, int64_t layer)
{
    return c->n_routed_experts > 0 && layer >= c->first_k_dense_replace &&
           layer % c->moe_layer_freq == 0;
}
