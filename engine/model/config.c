/* engine/model/config.c — config.json → numla_model_config (see config.h; docs/design.md §5). */
#include "engine/model/config.h"
#include "engine/json/model_json.h"
#include "engine/model/config_internal.h"
#include "engine/model/rope.h"

#include "common/log.h"

#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- field readers: every error names the file and the field ---- */

typedef struct cfg_ctx {
    const char *src;
    json_t *root;
} cfg_ctx;

/* One integer field of config.json: its name, whether it must be written, what it reads as when
 * absent or null, and the range it must lie in. Errors name `prefix` + name. */
typedef struct cfg_int_spec {
    const char *name;
    int required;         /* absent is an error */
    int nullable;         /* null is allowed and reads as null_value (else an error) */
    int64_t absent_value; /* value when absent and not required */
    int64_t null_value;
    int64_t min, max;     /* accepted range, both inclusive (checked on written values only) */
} cfg_int_spec;

static numla_status cfg_int(const cfg_ctx *c, json_t *obj, const char *prefix,
                            const cfg_int_spec *f, int64_t *out)
{
    json_t *v = json_object_get(obj, f->name);
    if (!v) {
        if (f->required)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: missing field %s%s", c->src, prefix, f->name);
        *out = f->absent_value;
        return NUMLA_STATUS_OK;
    }
    if (json_is_null(v)) {
        if (!f->nullable)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %s%s is null, expected an integer", c->src,
                       prefix, f->name);
        *out = f->null_value;
        return NUMLA_STATUS_OK;
    }
    int64_t x;
    if (json_is_real(v)) {
        /* a real, or an integer beyond 64 bits that the reader turned into one (model_json.h) */
        double d = json_real_value(v);
        if (d != floor(d))
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %s%s = %g is not an integer", c->src,
                       prefix, f->name, d);
        if (fabs(d) > 9e15 || d < (double)f->min || d > (double)f->max)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %s%s = %g is outside [%lld, %lld]", c->src,
                       prefix, f->name, d, (long long)f->min, (long long)f->max);
        x = (int64_t)d;
    } else if (json_is_integer(v)) {
        x = (int64_t)json_integer_value(v);
    } else {
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %s%s has the wrong type, expected an integer",
                   c->src, prefix, f->name);
    }
    if (x < f->min || x > f->max)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %s%s = %lld is outside [%lld, %lld]", c->src,
                   prefix, f->name, (long long)x, (long long)f->min, (long long)f->max);
    *out = x;
    return NUMLA_STATUS_OK;
}

/* One real field: name, default when absent or null, and range (NaN and infinities are never
 * accepted). min_exclusive: the value must be > min. */
typedef struct cfg_real_spec {
    const char *name;
    int required;
    double absent_value;
    double min, max;
    int min_exclusive;
} cfg_real_spec;

static numla_status cfg_real(const cfg_ctx *c, json_t *obj, const char *prefix,
                             const cfg_real_spec *f, double *out)
{
    json_t *v = json_object_get(obj, f->name);
    if (!v || json_is_null(v)) {
        if (f->required)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: missing field %s%s", c->src, prefix, f->name);
        *out = f->absent_value;
        return NUMLA_STATUS_OK;
    }
    if (!json_is_number(v))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %s%s has the wrong type, expected a number",
                   c->src, prefix, f->name);
    double x = json_number_value(v);
    if (!isfinite(x))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %s%s is not finite", c->src, prefix, f->name);
    if (x < f->min || (f->min_exclusive && x == f->min) || x > f->max)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %s%s = %g is outside %s%g, %g]", c->src,
                   prefix, f->name, x, f->min_exclusive ? "(" : "[", f->min, f->max);
    *out = x;
    return NUMLA_STATUS_OK;
}

static numla_status cfg_bool(const cfg_ctx *c, json_t *obj, const char *prefix, const char *name,
                             int dflt, int *out)
{
    json_t *v = json_object_get(obj, name);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return NUMLA_STATUS_OK;
    }
    if (!json_is_boolean(v))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %s%s has the wrong type, expected true/false",
                   c->src, prefix, name);
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

/* A named string choice (topk_method, scoring_func, ...). */
typedef struct cfg_choice {
    const char *name;
    int value;
} cfg_choice;

static numla_status cfg_enum(const cfg_ctx *c, const char *field, const char *s,
                             const cfg_choice *choices, int n, const char *allowed, int *out)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(s, choices[i].name)) {
            *out = choices[i].value;
            return NUMLA_STATUS_OK;
        }
    NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "%s: field %s = \"%s\" is not supported (%s)", c->src,
               field, s, allowed);
}

/* ---- parse, one step per part of the config (docs/design.md §5) ---- */

/* The required sizes at the top level, each a positive count capped by config.h's bounds. */
static const struct {
    cfg_int_spec spec;
    size_t offset; /* of the int64_t field in numla_model_config */
} size_fields[] = {
    {{.name = "vocab_size", .required = 1, .min = 1, .max = NUMLA_CONFIG_MAX_VOCAB},
     offsetof(numla_model_config, vocab_size)},
    {{.name = "hidden_size", .required = 1, .min = 1, .max = NUMLA_CONFIG_MAX_HIDDEN},
     offsetof(numla_model_config, hidden_size)},
    {{.name = "num_hidden_layers", .required = 1, .min = 1, .max = NUMLA_CONFIG_MAX_LAYERS},
     offsetof(numla_model_config, num_hidden_layers)},
    {{.name = "num_attention_heads", .required = 1, .min = 1, .max = NUMLA_CONFIG_MAX_HEADS},
     offsetof(numla_model_config, num_attention_heads)},
    {{.name = "intermediate_size", .required = 1, .min = 1, .max = NUMLA_CONFIG_MAX_INTERMEDIATE},
     offsetof(numla_model_config, intermediate_size)},
    {{.name = "max_position_embeddings", .required = 1, .min = 1,
      .max = NUMLA_CONFIG_MAX_POSITIONS},
     offsetof(numla_model_config, max_position_embeddings)},
    /* MLA; q_lora_rank is read apart (null is allowed, absence is not) */
    {{.name = "kv_lora_rank", .required = 1, .min = 1, .max = NUMLA_CONFIG_MAX_LORA_RANK},
     offsetof(numla_model_config, kv_lora_rank)},
    {{.name = "qk_nope_head_dim", .required = 1, .min = 1, .max = NUMLA_CONFIG_MAX_HEAD_DIM},
     offsetof(numla_model_config, qk_nope_head_dim)},
    {{.name = "qk_rope_head_dim", .required = 1, .min = 1, .max = NUMLA_CONFIG_MAX_ROPE_DIM},
     offsetof(numla_model_config, qk_rope_head_dim)},
    {{.name = "v_head_dim", .required = 1, .min = 1, .max = NUMLA_CONFIG_MAX_HEAD_DIM},
     offsetof(numla_model_config, v_head_dim)},
    /* the multi-token-prediction layers the checkpoint ships (model.layers.N.*, loaded only for
     * speculative decoding: mtp_enabled) */
    {{.name = "num_nextn_predict_layers", .nullable = 1, .null_value = 0, .min = 0,
      .max = NUMLA_CONFIG_MAX_LAYERS},
     offsetof(numla_model_config, num_nextn_predict_layers)},
};

static numla_status parse_model_type(const cfg_ctx *c, json_t *root, numla_model_config *o)
{
    /* Kimi K2 (kimi_k2) is DeepSeek-V3's architecture under another name
     * (architectures: DeepseekV3ForCausalLM); its router is V3's noaux_tc/sigmoid. */
    static const cfg_choice archs[] = {{"deepseek_v2", NUMLA_MODEL_ARCH_DEEPSEEK_V2},
                                       {"deepseek_v3", NUMLA_MODEL_ARCH_DEEPSEEK_V3},
                                       {"kimi_k2", NUMLA_MODEL_ARCH_DEEPSEEK_V3},
                                       {"deepseek_v32", NUMLA_MODEL_ARCH_DEEPSEEK_V3},
                                       {"glm_moe_dsa", NUMLA_MODEL_ARCH_DEEPSEEK_V3},
                                       {"deepseek_v4", NUMLA_MODEL_ARCH_DEEPSEEK_V4}};
    const char *mt;
    NUMLA_CHECK(cfg_str(c, root, "", "model_type", &mt));
    if (!mt)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: missing field model_type", c->src);
    int arch = 0;
    NUMLA_CHECK(cfg_enum(c, "model_type", mt, archs, 6,
                         "deepseek_v2, deepseek_v3, kimi_k2, kimi_k25 (text_config), deepseek_v32, "
                         "glm_moe_dsa, deepseek_v4", &arch));
    o->arch = (numla_model_arch)arch;
    snprintf(o->model_type, sizeof o->model_type, "%s", mt);
    return NUMLA_STATUS_OK;
}

static numla_status parse_sizes(const cfg_ctx *c, json_t *root, numla_model_config *o)
{
    for (size_t i = 0; i < sizeof size_fields / sizeof size_fields[0]; i++)
        NUMLA_CHECK(cfg_int(c, root, "", &size_fields[i].spec,
                            (int64_t *)((char *)o + size_fields[i].offset)));
    NUMLA_CHECK(cfg_real(c, root, "",
                         &(cfg_real_spec){.name = "rms_norm_eps", .required = 1, .min = 0,
                                          .min_exclusive = 1, .max = 1},
                         &o->rms_norm_eps));
    NUMLA_CHECK(cfg_bool(c, root, "", "tie_word_embeddings", 0, &o->tie_word_embeddings));
    return NUMLA_STATUS_OK;
}

/* Features written in config.json that the forward pass does not implement. */
static numla_status parse_unsupported(const cfg_ctx *c, json_t *root)
{
    const char *act;
    NUMLA_CHECK(cfg_str(c, root, "", "hidden_act", &act));
    if (act && strcmp(act, "silu"))
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "%s: field hidden_act = \"%s\" is not supported (silu)",
                   c->src, act);
    int attn_bias = 0;
    NUMLA_CHECK(cfg_bool(c, root, "", "attention_bias", 0, &attn_bias));
    if (attn_bias)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "%s: field attention_bias = true is not supported",
                   c->src);
    return NUMLA_STATUS_OK;
}

static numla_status parse_mla(const cfg_ctx *c, json_t *root, numla_model_config *o)
{
    /* q_lora_rank must be written out: see config.h. */
    if (!json_object_get(root, "q_lora_rank"))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                   "%s: missing field q_lora_rank (write null for a plain q_proj; the HF class "
                   "would silently default it to 1536)", c->src);
    NUMLA_CHECK(cfg_int(c, root, "",
                        &(cfg_int_spec){.name = "q_lora_rank", .required = 1, .nullable = 1,
                                        .null_value = 0, .min = 1,
                                        .max = NUMLA_CONFIG_MAX_LORA_RANK},
                        &o->q_lora_rank));
    /* The vector attention / cache kernels need these multiples (kernels/mla_attn.h). */
    if (o->kv_lora_rank % 32)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                   "%s: field kv_lora_rank = %lld is not a multiple of 32 (the attention kernels "
                   "need that)", c->src, (long long)o->kv_lora_rank);
    if (o->qk_rope_head_dim % 16)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                   "%s: field qk_rope_head_dim = %lld is not a multiple of 16 (the attention "
                   "kernels need that)", c->src, (long long)o->qk_rope_head_dim);
    o->q_head_dim = o->qk_nope_head_dim + o->qk_rope_head_dim;
    return NUMLA_STATUS_OK;
}

/* topk_method and scoring_func: written or the architecture's default, and the pairs each
 * architecture's router implements. */
static numla_status parse_moe_methods(const cfg_ctx *c, json_t *root, numla_model_config *o)
{
    static const cfg_choice methods[] = {
        {"greedy", NUMLA_TOPK_METHOD_GREEDY},
        {"group_limited_greedy", NUMLA_TOPK_METHOD_GROUP_LIMITED_GREEDY},
        {"noaux_tc", NUMLA_TOPK_METHOD_NOAUX_TC}};
    static const cfg_choice funcs[] = {{"softmax", NUMLA_SCORING_FUNC_SOFTMAX},
                                       {"sigmoid", NUMLA_SCORING_FUNC_SIGMOID}};
    int v3 = o->arch == NUMLA_MODEL_ARCH_DEEPSEEK_V3;
    const char *tm, *sf;
    NUMLA_CHECK(cfg_str(c, root, "", "topk_method", &tm));
    NUMLA_CHECK(cfg_str(c, root, "", "scoring_func", &sf));
    if (!tm)
        tm = v3 ? "noaux_tc" : "greedy";
    if (!sf)
        sf = v3 ? "sigmoid" : "softmax";
    int m = 0, f = 0;
    NUMLA_CHECK(cfg_enum(c, "topk_method", tm, methods, 3,
                         "greedy, group_limited_greedy, noaux_tc", &m));
    NUMLA_CHECK(cfg_enum(c, "scoring_func", sf, funcs, 2, "softmax, sigmoid", &f));
    o->topk_method = (numla_topk_method)m;
    o->scoring_func = (numla_scoring_func)f;
    if (o->topk_method == NUMLA_TOPK_METHOD_NOAUX_TC && !v3)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                   "%s: field topk_method = \"noaux_tc\" needs model_type deepseek_v3", c->src);
    if (o->topk_method != NUMLA_TOPK_METHOD_NOAUX_TC && v3)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                   "%s: field topk_method = \"%s\" with model_type deepseek_v3 (only noaux_tc)",
                   c->src, tm);
    if (v3 && o->scoring_func != NUMLA_SCORING_FUNC_SIGMOID)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                   "%s: field scoring_func must be \"sigmoid\" for deepseek_v3", c->src);
    if (!v3 && o->scoring_func != NUMLA_SCORING_FUNC_SOFTMAX)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                   "%s: field scoring_func must be \"softmax\" for deepseek_v2", c->src);
    return NUMLA_STATUS_OK;
}

/* n_group / topk_group: required by the grouped methods; when a greedy config writes them they
 * must still be consistent (a greedy router ignores groups, but a config that lies is refused). */
static numla_status parse_moe_groups(const cfg_ctx *c, json_t *root, numla_model_config *o)
{
    const int64_t E = o->n_routed_experts;
    int grouped = o->topk_method != NUMLA_TOPK_METHOD_GREEDY;
    NUMLA_CHECK(cfg_int(c, root, "",
                        &(cfg_int_spec){.name = "n_group", .required = grouped, .nullable = 1,
                                        .absent_value = 1, .null_value = 1, .min = 1, .max = E},
                        &o->n_group));
    NUMLA_CHECK(cfg_int(c, root, "",
                        &(cfg_int_spec){.name = "topk_group", .required = grouped, .nullable = 1,
                                        .absent_value = o->n_group, .null_value = o->n_group,
                                        .min = 1, .max = E},
                        &o->topk_group));
    if (E % o->n_group)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                   "%s: field n_group = %lld does not divide n_routed_experts = %lld", c->src,
                   (long long)o->n_group, (long long)E);
    if (o->topk_group > o->n_group)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field topk_group = %lld exceeds n_group = %lld",
                   c->src, (long long)o->topk_group, (long long)o->n_group);
    if (!grouped)
        return NUMLA_STATUS_OK;
    int64_t per = E / o->n_group;
    if (o->topk_method == NUMLA_TOPK_METHOD_NOAUX_TC && per < 2)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                   "%s: field n_group = %lld leaves fewer than 2 experts per group "
                   "(noaux_tc scores a group by its top 2)", c->src, (long long)o->n_group);
    if (o->topk_group * per < o->num_experts_per_tok)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                   "%s: field num_experts_per_tok = %lld exceeds the %lld experts in "
                   "topk_group = %lld groups", c->src, (long long)o->num_experts_per_tok,
                   (long long)(o->topk_group * per), (long long)o->topk_group);
    return NUMLA_STATUS_OK;
}

static numla_status parse_moe(const cfg_ctx *c, json_t *root, numla_model_config *o)
{
    NUMLA_CHECK(cfg_int(c, root, "",
                        &(cfg_int_spec){.name = "n_routed_experts", .nullable = 1, .min = 0,
                                        .max = NUMLA_CONFIG_MAX_EXPERTS},
                        &o->n_routed_experts));
    NUMLA_CHECK(cfg_int(c, root, "",
                        &(cfg_int_spec){.name = "n_shared_experts", .nullable = 1, .min = 0,
                                        .max = NUMLA_CONFIG_MAX_SHARED_EXPERTS},
                        &o->n_shared_experts));
    NUMLA_CHECK(cfg_int(c, root, "",
                        &(cfg_int_spec){.name = "first_k_dense_replace", .nullable = 1, .min = 0,
                                        .max = NUMLA_CONFIG_MAX_LAYERS},
                        &o->first_k_dense_replace));
    NUMLA_CHECK(cfg_int(c, root, "",
                        &(cfg_int_spec){.name = "moe_layer_freq", .nullable = 1,
                                        .absent_value = 1, .null_value = 1,
                                        .min = INT64_MIN, .max = NUMLA_CONFIG_MAX_LAYERS},
                        &o->moe_layer_freq));
    NUMLA_CHECK(cfg_real(c, root, "",
                         &(cfg_real_spec){.name = "routed_scaling_factor", .absent_value = 1.0,
                                          .min = -INFINITY, .max = 1e6},
                         &o->routed_scaling_factor));
    NUMLA_CHECK(cfg_bool(c, root, "", "norm_topk_prob", 0, &o->norm_topk_prob));
    o->moe_weight_rule = o->arch == NUMLA_MODEL_ARCH_DEEPSEEK_V3
                             ? NUMLA_MOE_WEIGHT_RULE_NORM_THEN_SCALE
                             : NUMLA_MOE_WEIGHT_RULE_NORM_OR_SCALE;
    o->num_experts_per_tok = 0;
    o->moe_intermediate_size = 0;
    o->n_group = 1;
    o->topk_group = 1;
    o->topk_method = NUMLA_TOPK_METHOD_GREEDY;
    o->scoring_func = NUMLA_SCORING_FUNC_SOFTMAX;
    if (o->n_routed_experts == 0)
        return NUMLA_STATUS_OK; /* every layer dense: the MoE fields are not read */

    NUMLA_CHECK(cfg_int(c, root, "",
                        &(cfg_int_spec){.name = "num_experts_per_tok", .required = 1, .min = 1,
                                        .max = INT64_MAX},
                        &o->num_experts_per_tok));
    if (o->num_experts_per_tok > o->n_routed_experts)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                   "%s: field num_experts_per_tok = %lld exceeds n_routed_experts = %lld", c->src,
                   (long long)o->num_experts_per_tok, (long long)o->n_routed_experts);
    NUMLA_CHECK(cfg_int(c, root, "",
                        &(cfg_int_spec){.name = "moe_intermediate_size", .required = 1, .min = 1,
                                        .max = NUMLA_CONFIG_MAX_INTERMEDIATE},
                        &o->moe_intermediate_size));
    if (o->moe_layer_freq < 1)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field moe_layer_freq = %lld must be positive",
                   c->src, (long long)o->moe_layer_freq);
    if (!(o->routed_scaling_factor > 0))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field routed_scaling_factor must be positive", c->src);
    NUMLA_CHECK(parse_moe_methods(c, root, o));
    NUMLA_CHECK(parse_moe_groups(c, root, o));
    return NUMLA_STATUS_OK;
}

static numla_status parse_rope_scaling(const cfg_ctx *c, json_t *root, numla_model_config *o)
{
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
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %s must be an object or null", c->src, field);
    if (rs == rp && json_object_get(rs, "rope_theta") && !json_object_get(root, "rope_theta"))
        NUMLA_CHECK(cfg_real(c, rs, "rope_parameters.",
                             &(cfg_real_spec){.name = "rope_theta", .required = 1, .min = 1,
                                              .min_exclusive = 1,
                                              .max = NUMLA_CONFIG_MAX_ROPE_THETA},
                             &o->rope_theta));
    const char *type = NULL, *rtype = NULL;
    char pre[32];
    snprintf(pre, sizeof pre, "%s.", field);
    NUMLA_CHECK(cfg_str(c, rs, pre, "type", &type));
    NUMLA_CHECK(cfg_str(c, rs, pre, "rope_type", &rtype));
    const char *t = rtype ? rtype : type;
    if (!t)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: missing field %stype", c->src, pre);
    if (!strcmp(t, "default"))
        return NUMLA_STATUS_OK;
    if (strcmp(t, "yarn"))
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                   "%s: %stype \"%s\" is not supported (only \"yarn\")", c->src, pre, t);
    o->rope_yarn = 1;
    const cfg_int_spec l0_spec = {.name = "original_max_position_embeddings",
                                  .absent_value = o->max_position_embeddings, .min = 1,
                                  .max = NUMLA_CONFIG_MAX_POSITIONS};
    NUMLA_CHECK(cfg_int(c, rs, pre, &l0_spec, &o->rope_original_max_position_embeddings));
    /* A missing factor is the ratio max_position_embeddings / original (transformers' rule;
     * docs/design.md §5 trap). A present factor is used as written. */
    json_t *fv = json_object_get(rs, "factor");
    double ratio = (double)o->max_position_embeddings /
                   (double)o->rope_original_max_position_embeddings;
    if ((!fv || json_is_null(fv)) && json_object_get(rs, "original_max_position_embeddings"))
        o->rope_factor = ratio;
    else
        NUMLA_CHECK(cfg_real(c, rs, pre,
                             &(cfg_real_spec){.name = "factor", .required = 1, .min = 1,
                                              .max = NUMLA_CONFIG_MAX_ROPE_FACTOR},
                             &o->rope_factor));
    if (o->rope_factor < 1.0 || o->rope_factor > NUMLA_CONFIG_MAX_ROPE_FACTOR)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %sfactor = %g is outside [1, %g]", c->src, pre,
                   o->rope_factor, NUMLA_CONFIG_MAX_ROPE_FACTOR);
    NUMLA_CHECK(cfg_bool(c, rs, pre, "truncate", 1, &o->rope_truncate));
    const struct {
        cfg_real_spec spec;
        double *out;
    } reals[] = {
        {{.name = "attention_factor", .min = 0, .max = NUMLA_CONFIG_MAX_MSCALE},
         &o->rope_explicit_attention_factor},
        {{.name = "beta_fast", .absent_value = 32.0, .min = 0, .min_exclusive = 1, .max = 1e6},
         &o->rope_beta_fast},
        {{.name = "beta_slow", .absent_value = 1.0, .min = 0, .min_exclusive = 1, .max = 1e6},
         &o->rope_beta_slow},
        {{.name = "mscale", .absent_value = 1.0, .min = 0, .max = NUMLA_CONFIG_MAX_MSCALE},
         &o->rope_mscale},
        {{.name = "mscale_all_dim", .absent_value = 0.0, .min = 0, .max = NUMLA_CONFIG_MAX_MSCALE},
         &o->rope_mscale_all_dim},
    };
    for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++)
        NUMLA_CHECK(cfg_real(c, rs, pre, &reals[i].spec, reals[i].out));
    return NUMLA_STATUS_OK;
}

static numla_status parse_rope(const cfg_ctx *c, json_t *root, numla_model_config *o)
{
    NUMLA_CHECK(cfg_real(c, root, "",
                         &(cfg_real_spec){.name = "rope_theta", .absent_value = 10000.0, .min = 1,
                                          .min_exclusive = 1, .max = NUMLA_CONFIG_MAX_ROPE_THETA},
                         &o->rope_theta));
    return parse_rope_scaling(c, root, o);
}

static numla_status parse_special_tokens(const cfg_ctx *c, json_t *root, numla_model_config *o)
{
    int64_t bos;
    NUMLA_CHECK(cfg_int(c, root, "",
                        &(cfg_int_spec){.name = "bos_token_id", .nullable = 1, .absent_value = -1,
                                        .null_value = -1, .min = -1, .max = o->vocab_size - 1},
                        &bos));
    o->bos_token_id = (int32_t)bos;
    o->num_eos = 0;
    json_t *v = json_object_get(root, "eos_token_id");
    if (!v || json_is_null(v))
        return NUMLA_STATUS_OK;
    if (!json_is_integer(v) && !json_is_array(v))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field eos_token_id must be an integer or a list",
                   c->src);
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_is_array(v) ? json_array_get(v, i) : v;
        if (!json_is_integer(e))
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field eos_token_id[%zu] is not an integer",
                       c->src, i);
        json_int_t id = json_integer_value(e);
        if (id < 0 || id >= o->vocab_size)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field eos_token_id = %lld outside the vocabulary",
                       c->src, (long long)id);
        if (o->num_eos < NUMLA_CONFIG_MAX_EOS)
            o->eos_token_ids[o->num_eos++] = (int32_t)id;
    }
    return NUMLA_STATUS_OK;
}

/* Derived values, docs/design.md §5; the ranges above keep them finite, and the check after says so
 * by name should a combination of in-range values still break them. */
static numla_status derive(const cfg_ctx *c, numla_model_config *o)
{
    double m = 1.0;
    if (o->rope_yarn && o->rope_mscale_all_dim != 0.0)
        m = numla_rope_yarn_mscale(o->rope_factor, o->rope_mscale_all_dim);
    o->softmax_scale = pow((double)o->q_head_dim, -0.5) * m * m;
    o->rope_attention_factor = 1.0;
    if (o->rope_yarn)
        o->rope_attention_factor =
            o->rope_explicit_attention_factor > 0
                ? o->rope_explicit_attention_factor
                : numla_rope_yarn_mscale(o->rope_factor, o->rope_mscale) /
                      numla_rope_yarn_mscale(o->rope_factor, o->rope_mscale_all_dim);
    numla_rope_inv_freq(o->qk_rope_head_dim, o->rope_theta, o->rope_yarn, o->rope_factor,
                        (double)o->rope_original_max_position_embeddings, o->rope_beta_fast,
                        o->rope_beta_slow, o->rope_inv_freq);
    if (o->rope_yarn && !o->rope_truncate) /* rare: unrounded correction range */
        numla_rope_inv_freq_ex(o->qk_rope_head_dim, o->rope_theta, o->rope_factor,
                               (double)o->rope_original_max_position_embeddings,
                               o->rope_beta_fast, o->rope_beta_slow, 0, o->rope_inv_freq);
    if (!isfinite(o->softmax_scale) || !(o->softmax_scale > 0))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: fields rope_scaling.factor / mscale_all_dim give a "
                   "softmax scale of %g", c->src, o->softmax_scale);
    if (!isfinite(o->rope_attention_factor) || !(o->rope_attention_factor > 0))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: fields rope_scaling.factor / mscale / mscale_all_dim "
                   "/ attention_factor give an attention factor of %g", c->src,
                   o->rope_attention_factor);
    for (int64_t i = 0; i < o->qk_rope_head_dim / 2; i++)
        if (!isnormal(o->rope_inv_freq[i]) || !(o->rope_inv_freq[i] > 0))
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: fields rope_theta / rope_scaling.factor give "
                       "RoPE frequency %lld = %g", c->src, (long long)i, o->rope_inv_freq[i]);
    return NUMLA_STATUS_OK;
}

numla_status numla_model_config_derive(const char *source, numla_model_config *o)
{
    cfg_ctx c = {source, NULL};
    return derive(&c, o);
}

const char *numla_model_config_format_name(numla_weight_format f)
{
    const numla_weight_encoding_info *in = numla_weight_encoding_get(f);
    return in ? in->name : "bf16"; /* the encoding table's names */
}

/* quantization_config of compressed-tensors (config.h INT4): format pack-quantized, every
 * config group's weights int, 4 bits, symmetric, strategy group, group_size 32, no activation
 * quantization. The `ignore` list needs no reading: an ignored layer is stored as X.weight. */
static numla_status parse_compressed_tensors(const cfg_ctx *c, json_t *q, numla_model_config *o)
{
    static const char *const pre = "quantization_config.";
    const char *fmt;
    NUMLA_CHECK(cfg_str(c, q, pre, "format", &fmt));
    if (!fmt || strcmp(fmt, "pack-quantized"))
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "%s: field %sformat = \"%s\" is not supported "
                   "(compressed-tensors: pack-quantized)", c->src, pre, fmt ? fmt : "(missing)");
    json_t *groups = json_object_get(q, "config_groups");
    if (!json_is_object(groups) || json_object_size(groups) == 0)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %sconfig_groups must be a non-empty object",
                   c->src, pre);
    const char *gname;
    json_t *g;
    json_object_foreach(groups, gname, g) {
        json_t *w = json_object_get(g, "weights"), *in = json_object_get(g, "input_activations");
        json_t *bits = json_object_get(w, "num_bits"), *gs = json_object_get(w, "group_size");
        const char *type = json_string_value(json_object_get(w, "type"));
        const char *strat = json_string_value(json_object_get(w, "strategy"));
        if (!json_is_object(w) || !json_is_integer(bits) || json_integer_value(bits) != 4 ||
            !type || strcmp(type, "int") || !json_is_true(json_object_get(w, "symmetric")) ||
            !strat || strcmp(strat, "group") || !json_is_integer(gs) ||
            json_integer_value(gs) != 32)
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "%s: field %sconfig_groups.%s.weights is not "
                       "supported (int, num_bits 4, symmetric, strategy group, group_size 32)",
                       c->src, pre, gname);
        if (in && !json_is_null(in))
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "%s: field %sconfig_groups.%s.input_activations "
                       "is not supported (weights-only int4)", c->src, pre, gname);
    }
    o->weight_format = NUMLA_ENCODING_INT4;
    return NUMLA_STATUS_OK;
}

/* quantization_config: absent/null, or one of the published formats (config.h). */
static numla_status parse_quantization(const cfg_ctx *c, json_t *root, numla_model_config *o)
{
    static const char *const pre = "quantization_config.";
    json_t *q = json_object_get(root, "quantization_config");
    o->weight_format = NUMLA_WEIGHT_FORMAT_NONE;
    if (!q || json_is_null(q))
        return NUMLA_STATUS_OK;
    if (!json_is_object(q))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field quantization_config must be an object or null",
                   c->src);
    const char *method, *fmt, *act;
    NUMLA_CHECK(cfg_str(c, q, pre, "quant_method", &method));
    NUMLA_CHECK(cfg_str(c, q, pre, "fmt", &fmt));
    NUMLA_CHECK(cfg_str(c, q, pre, "activation_scheme", &act));
    if (!method)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: missing field %squant_method", c->src, pre);
    if (!strcmp(method, "compressed-tensors"))
        return parse_compressed_tensors(c, q, o);
    static const cfg_choice methods[] = {{"fp8", NUMLA_WEIGHT_FORMAT_FP8},
                                         {"w8a8_int8", NUMLA_WEIGHT_FORMAT_INT8}};
    int f = 0;
    NUMLA_CHECK(cfg_enum(c, "quantization_config.quant_method", method, methods, 2,
                         "fp8, w8a8_int8, compressed-tensors", &f));
    if (act && strcmp(act, "dynamic"))
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                   "%s: field %sactivation_scheme = \"%s\" is not supported (dynamic)", c->src,
                   pre, act);
    /* DeepSeek-V3.1 writes scale_fmt "ue8m0": its block scales are powers of two (UE8M0, the
     * format its FP8 training used), still stored as F32 weight_scale_inv, so loading and
     * dequantizing are unchanged. Any other value is refused. */
    const char *sfmt;
    NUMLA_CHECK(cfg_str(c, q, pre, "scale_fmt", &sfmt));
    if (sfmt && strcmp(sfmt, "ue8m0"))
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                   "%s: field %sscale_fmt = \"%s\" is not supported (ue8m0, or absent)", c->src,
                   pre, sfmt);
    if (sfmt && method && strcmp(method, "fp8"))
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                   "%s: field %sscale_fmt = \"%s\" needs quant_method fp8", c->src, pre, sfmt);
    json_t *bs = json_object_get(q, "weight_block_size");
    if (f == NUMLA_WEIGHT_FORMAT_FP8) {
        if (fmt && strcmp(fmt, "e4m3"))
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                       "%s: field %sfmt = \"%s\" is not supported (e4m3)", c->src, pre, fmt);
        if (!bs || json_is_null(bs))
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                       "%s: missing field %sweight_block_size (fp8 needs [128, 128] blocks; "
                       "per-tensor fp8 is not supported)", c->src, pre);
    }
    if (bs && !json_is_null(bs)) {
        json_t *b0 = json_array_get(bs, 0), *b1 = json_array_get(bs, 1);
        if (f != NUMLA_WEIGHT_FORMAT_FP8 || !json_is_array(bs) || json_array_size(bs) != 2 ||
            !json_is_integer(b0) || !json_is_integer(b1) || json_integer_value(b0) != 128 ||
            json_integer_value(b1) != 128)
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                       "%s: field %sweight_block_size is not supported (fp8 with [128, 128])",
                       c->src, pre);
    }
    o->weight_format = (numla_weight_format)f;
    return NUMLA_STATUS_OK;
}

/* DeepSeek-V4 (config_v4.h, docs/design.md §5.9): its own fields first, then the common ones
 * the rest of numla reads, filled as config.h says. */
static numla_status parse_v4(const cfg_ctx *c, json_t *root, numla_model_config *o)
{
    NUMLA_CHECK(numla_v4_config_from_json(root, c->src, &o->v4));
    const numla_v4_config *v = &o->v4;
    static const cfg_int_spec sizes[] = {
        {.name = "vocab_size", .required = 1, .min = 1, .max = NUMLA_CONFIG_MAX_VOCAB},
        {.name = "hidden_size", .required = 1, .min = 1, .max = NUMLA_CONFIG_MAX_HIDDEN},
        {.name = "max_position_embeddings", .absent_value = 1048576, .min = 1,
         .max = NUMLA_CONFIG_MAX_POSITIONS},
        {.name = "n_routed_experts", .required = 1, .min = 1, .max = NUMLA_CONFIG_MAX_EXPERTS},
        {.name = "num_experts_per_tok", .required = 1, .min = 1, .max = NUMLA_CONFIG_MAX_EXPERTS},
        {.name = "moe_intermediate_size", .required = 1, .min = 1,
         .max = NUMLA_CONFIG_MAX_INTERMEDIATE},
        {.name = "n_shared_experts", .absent_value = 1, .min = 1, .max = 1},
    };
    int64_t *outs[] = {&o->vocab_size, &o->hidden_size, &o->max_position_embeddings,
                       &o->n_routed_experts, &o->num_experts_per_tok, &o->moe_intermediate_size,
                       &o->n_shared_experts};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        NUMLA_CHECK(cfg_int(c, root, "", &sizes[i], outs[i]));
    if (o->num_experts_per_tok > o->n_routed_experts)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                   "%s: field num_experts_per_tok = %lld exceeds n_routed_experts = %lld", c->src,
                   (long long)o->num_experts_per_tok, (long long)o->n_routed_experts);
    json_t *heads = json_object_get(root, "num_attention_heads");
    o->num_attention_heads = (int64_t)json_integer_value(heads); /* config_v4.c checked it */
    o->num_hidden_layers = v->num_layers;
    NUMLA_CHECK(cfg_real(c, root, "",
                         &(cfg_real_spec){.name = "rms_norm_eps", .absent_value = 1e-6, .min = 0,
                                          .min_exclusive = 1, .max = 1},
                         &o->rms_norm_eps));
    NUMLA_CHECK(cfg_bool(c, root, "", "tie_word_embeddings", 0, &o->tie_word_embeddings));
    NUMLA_CHECK(parse_unsupported(c, root));
    /* the attention's widths in the MLA fields' terms */
    o->q_lora_rank = v->q_lora_rank;
    o->kv_lora_rank = o->v_head_dim = o->q_head_dim = v->head_dim;
    o->qk_rope_head_dim = v->rope_dim;
    o->qk_nope_head_dim = v->head_dim - v->rope_dim;
    /* MoE: every layer; one shared expert of moe_intermediate_size; no groups */
    o->intermediate_size = o->moe_intermediate_size;
    o->first_k_dense_replace = 0;
    o->moe_layer_freq = 1;
    o->n_group = o->topk_group = 1;
    o->norm_topk_prob = 1; /* transformers' V4 routers always normalise */
    o->moe_weight_rule = NUMLA_MOE_WEIGHT_RULE_NORM_THEN_SCALE;
    o->topk_method = NUMLA_TOPK_METHOD_NOAUX_TC;
    o->scoring_func = NUMLA_SCORING_FUNC_SQRTSOFTPLUS;
    NUMLA_CHECK(cfg_real(c, root, "",
                         &(cfg_real_spec){.name = "routed_scaling_factor", .absent_value = 1.5,
                                          .min = 0, .min_exclusive = 1, .max = 1e6},
                         &o->routed_scaling_factor));
    const char *tm, *sf;
    NUMLA_CHECK(cfg_str(c, root, "", "topk_method", &tm));
    NUMLA_CHECK(cfg_str(c, root, "", "scoring_func", &sf));
    if (tm && strcmp(tm, "noaux_tc"))
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                   "%s: field topk_method = \"%s\" with model_type deepseek_v4 (only noaux_tc)",
                   c->src, tm);
    if (sf && strcmp(sf, "sqrtsoftplus"))
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                   "%s: field scoring_func = \"%s\" with model_type deepseek_v4 (only "
                   "sqrtsoftplus)", c->src, sf);
    json_t *ng = json_object_get(root, "n_group");
    if (json_is_integer(ng) && json_integer_value(ng) > 1)
        NUMLA_INFO("%s: deepseek_v4: n_group = %lld is ignored (V4's router has no groups, as "
                   "transformers' implementation)", c->src, (long long)json_integer_value(ng));
    /* RoPE: the main theta; the compress table serves numla_rope_cos_sin */
    o->rope_theta = v->main_rope_theta;
    o->rope_yarn = 0;
    o->rope_factor = 1.0;
    memcpy(o->rope_inv_freq, v->compress_inv_freq, sizeof o->rope_inv_freq);
    o->rope_attention_factor = v->compress_attention_factor;
    o->softmax_scale = pow((double)v->head_dim, -0.5);
    return NUMLA_STATUS_OK;
}

/* expert_dtype (top level or in quantization_config): the experts' own format; fp4 is the
 * published one (docs/quantization.md "DeepSeek-V4's FP4 experts"), read by model_v4.c. */
static numla_status parse_v4_expert_dtype(const cfg_ctx *c, json_t *root)
{
    const char *ed = json_string_value(json_object_get(root, "expert_dtype"));
    json_t *q = json_object_get(root, "quantization_config");
    if (!ed && json_is_object(q))
        ed = json_string_value(json_object_get(q, "expert_dtype"));
    if (ed && strcmp(ed, "bf16") && strcmp(ed, "fp8") && strcmp(ed, "fp4"))
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                   "%s: field expert_dtype = \"%s\" is not supported (bf16, fp8, fp4)", c->src, ed);
    return NUMLA_STATUS_OK;
}

static numla_status parse_root(const cfg_ctx *c, json_t *root, numla_model_config *o)
{
    if (!json_is_object(root))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: top level is not a JSON object", c->src);
    /* Kimi K2.5 wraps the K2 language model with a vision tower: the text model's fields are in
     * text_config (its weights under "language_model."); images are not served, so the vision
     * tower is ignored. quantization_config may sit at either level. */
    json_t *outer = root;
    char text_src[4200];
    cfg_ctx text_ctx = *c;
    const char *top_type = json_string_value(json_object_get(root, "model_type"));
    if (top_type && strcmp(top_type, "kimi_k25") == 0) {
        json_t *tc = json_object_get(root, "text_config");
        if (!json_is_object(tc))
            NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                       "%s: model_type kimi_k25 needs an object field text_config", c->src);
        if (!json_object_get(tc, "model_type"))
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: missing field text_config.model_type", c->src);
        if (json_object_get(root, "vision_config"))
            NUMLA_INFO("%s: kimi_k25: serving the text model of text_config; vision_config "
                       "(the vision tower) is ignored", c->src);
        root = tc;
        snprintf(text_src, sizeof text_src, "%s text_config", c->src);
        text_ctx.src = text_src;
        c = &text_ctx;
    }
    NUMLA_CHECK(parse_model_type(c, root, o));
    if (root != outer) {
        if (o->arch != NUMLA_MODEL_ARCH_DEEPSEEK_V3)
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                       "%s: field text_config.model_type = \"%s\" is not supported in kimi_k25 "
                       "(kimi_k2, deepseek_v3)", c->src, o->model_type);
        snprintf(o->model_type, sizeof o->model_type, "kimi_k25");
        snprintf(o->tensor_prefix, sizeof o->tensor_prefix, "language_model.");
    }
    if (o->arch == NUMLA_MODEL_ARCH_DEEPSEEK_V4) {
        NUMLA_CHECK(parse_v4(c, root, o));
        NUMLA_CHECK(parse_special_tokens(c, root, o));
        NUMLA_CHECK(parse_v4_expert_dtype(c, root));
        NUMLA_CHECK(parse_quantization(c, root, o));
        return NUMLA_STATUS_OK;
    }
    NUMLA_CHECK(parse_sizes(c, root, o));
    NUMLA_CHECK(parse_unsupported(c, root));
    NUMLA_CHECK(parse_mla(c, root, o));
    NUMLA_CHECK(parse_moe(c, root, o));
    NUMLA_CHECK(parse_rope(c, root, o));
    NUMLA_CHECK(parse_special_tokens(c, root, o));
    NUMLA_CHECK(parse_quantization(
        c, root != outer && !json_object_get(root, "quantization_config") ? outer : root, o));
    NUMLA_CHECK(derive(c, o));
    return NUMLA_STATUS_OK;
}

numla_status numla_model_config_parse(const char *json_text, const char *source,
                                      numla_model_config *out)
{
    if (!json_text || !out)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_model_config_parse: NULL argument");
    cfg_ctx c = {source ? source : "config.json", NULL};
    NUMLA_CHECK(numla_json_text_parse(json_text, strlen(json_text), JSON_REJECT_DUPLICATES, c.src,
                                      &c.root));
    numla_model_config tmp;
    memset(&tmp, 0, sizeof tmp);
    numla_status s = parse_root(&c, c.root, &tmp);
    /* the sparse-attention fields (enabled = 0 for the other model types) */
    if (s == NUMLA_STATUS_OK)
        s = numla_dsa_config_from_json(c.root, c.src, &tmp.dsa);
    json_decref(c.root);
    if (s == NUMLA_STATUS_OK && tmp.v4.enabled && tmp.v4.num_nextn_predict_layers > 0)
        NUMLA_INFO("%s: deepseek_v4: the %lld multi-token-prediction layer%s (num_nextn_predict_"
                   "layers, mtp.*) %s loaded only with --speculative mtp", c.src,
                   (long long)tmp.v4.num_nextn_predict_layers,
                   tmp.v4.num_nextn_predict_layers > 1 ? "s" : "",
                   tmp.v4.num_nextn_predict_layers > 1 ? "are" : "is");
    if (s == NUMLA_STATUS_OK && tmp.num_nextn_predict_layers > 0)
        NUMLA_INFO("%s: %s: the %lld multi-token-prediction layer%s (num_nextn_predict_layers, "
                   "model.layers.%lld.*) %s loaded only for speculative decoding "
                   "(--speculative mtp)", c.src, tmp.model_type,
                   (long long)tmp.num_nextn_predict_layers,
                   tmp.num_nextn_predict_layers > 1 ? "s" : "", (long long)tmp.num_hidden_layers,
                   tmp.num_nextn_predict_layers > 1 ? "are" : "is");
    if (s != NUMLA_STATUS_OK) {
        numla_error_frame(__FILE__, __LINE__, __func__);
        return s;
    }
    *out = tmp;
    return NUMLA_STATUS_OK;
}

numla_status numla_model_config_load(const char *dir, numla_model_config *out)
{
    if (numla_model_path_is_gguf(dir))
        return numla_model_config_load_gguf(dir, out);
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

_Static_assert(NUMLA_DSA_MAX_LAYERS == NUMLA_CONFIG_MAX_LAYERS,
               "config_dsa.h's per-layer lists hold every layer a config may have");

int numla_model_config_is_moe_layer(const numla_model_config *c, int64_t layer)
{
    /* the MTP layer (index num_hidden_layers) is an MoE block in every published model */
    if (layer == c->num_hidden_layers && c->mtp_enabled)
        return c->n_routed_experts > 0;
    if (c->dsa.enabled)
        return layer >= 0 && layer < c->dsa.num_layers && c->dsa.mlp_moe[layer];
    return c->n_routed_experts > 0 && layer >= c->first_k_dense_replace &&
           layer % c->moe_layer_freq == 0;
}

int64_t numla_model_config_kv_layers(const numla_model_config *c)
{
    return c->num_hidden_layers + (c->mtp_enabled ? 1 : 0);
}

numla_status numla_model_config_enable_mtp(numla_model_config *c)
{
    if (c->arch == NUMLA_MODEL_ARCH_DEEPSEEK_V4) /* its own layer: mtp.0.* */
        return numla_v4_config_enable_mtp(c);
    if (c->num_nextn_predict_layers < 1)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "%s: the checkpoint has no multi-token-prediction "
                   "layer (num_nextn_predict_layers is 0), so --speculative mtp cannot draft",
                   c->model_type);
    if (c->num_hidden_layers + 1 > NUMLA_CONFIG_MAX_LAYERS)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "%s: %lld layers leave no room for the MTP layer",
                   c->model_type, (long long)c->num_hidden_layers);
    c->mtp_enabled = 1;
    if (c->dsa.enabled) { /* the MTP block has its own indexer and an MoE MLP */
        c->dsa.indexer_full[c->num_hidden_layers] = 1;
        c->dsa.mlp_moe[c->num_hidden_layers] = c->n_routed_experts > 0;
    }
    return NUMLA_STATUS_OK;
}
