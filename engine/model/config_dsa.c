/* engine/model/config_dsa.c — parse the DSA fields of config.json (config_dsa.h). */
#include "engine/model/config_dsa.h"
#include "engine/model/config.h"
#include "engine/json/model_json.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

/* An integer field: absent -> dflt; null or not an integer, or outside [lo, hi] -> error. */
static numla_status dsa_int(const char *src, const json_t *root, const char *key, int64_t dflt,
                            int64_t lo, int64_t hi, int required, int64_t *out)
{
    json_t *v = json_object_get(root, key);
    if (!v) {
        if (required)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: missing field %s", src, key);
        *out = dflt;
        return NUMLA_STATUS_OK;
    }
    if (!json_is_integer(v))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %s is not an integer", src, key);
    int64_t x = (int64_t)json_integer_value(v);
    if (x < lo || x > hi)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %s = %lld outside %lld ..= %lld", src, key,
                   (long long)x, (long long)lo, (long long)hi);
    *out = x;
    return NUMLA_STATUS_OK;
}

/* A per-layer list of two names (names[1] -> 1, names[0] -> 0), exactly n entries. */
static numla_status dsa_layer_list(const char *src, const json_t *v, const char *key, int64_t n,
                                   const char *const names[2], uint8_t *out)
{
    if (!json_is_array(v))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %s is not a list", src, key);
    if ((int64_t)json_array_size(v) != n)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %s has %zu entries, num_hidden_layers is %lld",
                   src, key, json_array_size(v), (long long)n);
    for (int64_t i = 0; i < n; i++) {
        const char *s = json_string_value(json_array_get(v, (size_t)i));
        if (s && strcmp(s, names[1]) == 0)
            out[i] = 1;
        else if (s && strcmp(s, names[0]) == 0)
            out[i] = 0;
        else
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %s[%lld] is not \"%s\" or \"%s\"", src, key,
                       (long long)i, names[0], names[1]);
    }
    return NUMLA_STATUS_OK;
}

/* GLM-5's indexer schedule when indexer_types is absent (transformers' GlmMoeDsaConfig). */
static numla_status dsa_glm_schedule(const char *src, const json_t *root, numla_dsa_config *o)
{
    json_t *pat = json_object_get(root, "index_topk_pattern");
    if (pat && !json_is_null(pat)) {
        if (json_is_string(pat)) {
            const char *p = json_string_value(pat);
            if ((int64_t)strlen(p) != o->num_layers)
                NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                           "%s: field index_topk_pattern has %zu letters, num_hidden_layers is %lld",
                           src, strlen(p), (long long)o->num_layers);
            for (int64_t i = 0; i < o->num_layers; i++) {
                if (p[i] != 'F' && p[i] != 'S')
                    NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                               "%s: field index_topk_pattern[%lld] is '%c', not 'F' or 'S'", src,
                               (long long)i, p[i]);
                o->indexer_full[i] = p[i] == 'F';
            }
            return NUMLA_STATUS_OK;
        }
        static const char *const names[2] = {"shared", "full"};
        return dsa_layer_list(src, pat, "index_topk_pattern", o->num_layers, names, o->indexer_full);
    }
    int64_t freq = 1, offset = 2;
    NUMLA_CHECK(dsa_int(src, root, "index_topk_freq", 1, INT32_MIN, INT32_MAX, 0, &freq));
    NUMLA_CHECK(dsa_int(src, root, "index_skip_topk_offset", 2, INT32_MIN, INT32_MAX, 0, &offset));
    if (freq < 1)
        freq = 1; /* transformers: max(freq, 1) */
    for (int64_t i = 0; i < o->num_layers; i++) {
        int64_t x = i - offset + 1;
        o->indexer_full[i] = (x > 0 ? x : 0) % freq == 0;
    }
    return NUMLA_STATUS_OK;
}

static numla_status dsa_parse_root(const char *src, const json_t *root, numla_dsa_config *o)
{
    if (!json_is_object(root))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: top level is not a JSON object", src);
    const char *mt = json_string_value(json_object_get(root, "model_type"));
    const int v32 = mt && strcmp(mt, "deepseek_v32") == 0;
    const int glm = mt && strcmp(mt, "glm_moe_dsa") == 0;
    if (!v32 && !glm)
        return NUMLA_STATUS_OK; /* enabled = 0 */
    o->enabled = 1;
    o->index_rope = v32 ? NUMLA_DSA_ROPE_HALF : NUMLA_DSA_ROPE_INTERLEAVED;
    NUMLA_CHECK(dsa_int(src, root, "num_hidden_layers", 0, 1, NUMLA_CONFIG_MAX_LAYERS, 1,
                        &o->num_layers));
    NUMLA_CHECK(dsa_int(src, root, "index_n_heads", v32 ? 64 : 32, 1, NUMLA_CONFIG_MAX_HEADS, 0,
                        &o->index_n_heads));
    NUMLA_CHECK(dsa_int(src, root, "index_head_dim", 128, 1, NUMLA_CONFIG_MAX_HEAD_DIM, 0,
                        &o->index_head_dim));
    NUMLA_CHECK(dsa_int(src, root, "index_topk", 2048, 1, NUMLA_DSA_MAX_TOPK, 0, &o->index_topk));
    NUMLA_CHECK(dsa_int(src, root, "qk_rope_head_dim", 0, 1, NUMLA_CONFIG_MAX_ROPE_DIM, 1,
                        &o->rope_dim));
    if (o->rope_dim % 2 || o->rope_dim > o->index_head_dim)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                   "%s: field qk_rope_head_dim = %lld must be even and <= index_head_dim %lld "
                   "(the indexer rotates that many leading values)",
                   src, (long long)o->rope_dim, (long long)o->index_head_dim);
    json_t *ql = json_object_get(root, "q_lora_rank");
    if (!json_is_integer(ql) || json_integer_value(ql) < 1)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                   "%s: field q_lora_rank must be a positive integer for %s (the indexer's wq_b "
                   "reads the q latent)", src, mt);
    NUMLA_CHECK(dsa_int(src, root, "num_nextn_predict_layers", 0, 0, NUMLA_CONFIG_MAX_LAYERS, 0,
                        &o->num_nextn_predict_layers));

    json_t *it = json_object_get(root, "indexer_types");
    if (it && !json_is_null(it)) {
        static const char *const names[2] = {"shared", "full"};
        NUMLA_CHECK(dsa_layer_list(src, it, "indexer_types", o->num_layers, names, o->indexer_full));
    } else if (glm) {
        NUMLA_CHECK(dsa_glm_schedule(src, root, o));
    } else {
        memset(o->indexer_full, 1, (size_t)o->num_layers);
    }
    if (!o->indexer_full[0])
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                   "%s: layer 0 is \"shared\" (indexer_types): no earlier layer selects its tokens",
                   src);

    int64_t experts = 0;
    json_t *ne = json_object_get(root, "n_routed_experts");
    if (json_is_integer(ne))
        experts = (int64_t)json_integer_value(ne);
    json_t *ml = json_object_get(root, "mlp_layer_types");
    if (ml && !json_is_null(ml)) {
        static const char *const names[2] = {"dense", "sparse"};
        NUMLA_CHECK(dsa_layer_list(src, ml, "mlp_layer_types", o->num_layers, names, o->mlp_moe));
    } else {
        int64_t k = 3;
        NUMLA_CHECK(dsa_int(src, root, "first_k_dense_replace", 3, 0, NUMLA_CONFIG_MAX_LAYERS, 0, &k));
        for (int64_t i = 0; i < o->num_layers; i++)
            o->mlp_moe[i] = i >= k;
    }
    for (int64_t i = 0; i < o->num_layers; i++)
        if (o->mlp_moe[i] && experts < 1)
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                       "%s: layer %lld is \"sparse\" (mlp_layer_types) but n_routed_experts is "
                       "not a positive integer", src, (long long)i);
    return NUMLA_STATUS_OK;
}

numla_status numla_dsa_config_parse(const char *json_text, const char *source,
                                    numla_dsa_config *out)
{
    if (!json_text || !out)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_dsa_config_parse: NULL argument");
    const char *src = source ? source : "config.json";
    json_t *root = NULL;
    NUMLA_CHECK(numla_json_text_parse(json_text, strlen(json_text), JSON_REJECT_DUPLICATES, src,
                                      &root));
    numla_status s = numla_dsa_config_from_json(root, src, out);
    json_decref(root);
    if (s != NUMLA_STATUS_OK) {
        numla_error_frame(__FILE__, __LINE__, __func__);
        return s;
    }
    return NUMLA_STATUS_OK;
}

numla_status numla_dsa_config_from_json(const json_t *root, const char *source, numla_dsa_config *out)
{
    if (!root || !out)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_dsa_config_from_json: NULL argument");
    numla_dsa_config o;
    memset(&o, 0, sizeof o);
    NUMLA_CHECK(dsa_parse_root(source ? source : "config.json", root, &o));
    *out = o;
    return NUMLA_STATUS_OK;
}
