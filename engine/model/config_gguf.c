/* engine/model/config_gguf.c — numla_model_config from a GGUF file of architecture deepseek2.
 *
 * engine/formats/gguf_deepseek2.h reads the deepseek2.* keys into HF's field names and checks
 * the tensor set; this file turns that struct into the config the engine runs:
 *   DeepSeek-V3 (model_type deepseek_v3) when the gating function is sigmoid or the file holds
 *   exp_probs_b.bias (V3's noaux_tc score bias): topk_method noaux_tc, scoring sigmoid, weights
 *   normalised then scaled. A sigmoid file without the bias is UNSUPPORTED (no published model).
 *   Otherwise DeepSeek-V2 (deepseek_v2): softmax scoring, group_limited_greedy when the file
 *   has more than one expert group, else greedy; weights normalised or scaled (V2's rule).
 *   moe_layer_freq 1, the YaRN correction range rounded (rope_truncate), no explicit attention
 *   factor, weight_format NONE (the encodings are per tensor: weights.h), eos = the file's
 *   eos_token_id.
 * A `deepseek4` file (DeepSeek-V4, engine/formats/gguf_deepseek4.h) becomes the config.json
 * DeepSeek publishes for it (model_type deepseek_v4, its field names, compress_ratios with
 * compress_rate_csa 4 and compress_rate_hca the file's other rate, scoring sqrtsoftplus,
 * noaux_tc, no MTP layer unless the layer's own file is given: llama.cpp writes it apart,
 * numla_model_config_load_gguf_mtp), parsed by numla_model_config_parse: one validation for
 * both forms.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/formats/gguf.h"
#include "engine/formats/gguf_deepseek2.h"
#include "engine/formats/gguf_deepseek4.h"
#include "engine/model/config.h"
#include "engine/model/config_internal.h"

int numla_model_path_is_gguf(const char *path)
{
    struct stat st;
    const size_t n = path ? strlen(path) : 0;
    return n > 5 && !strcmp(path + n - 5, ".gguf") && stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* A deepseek4 file's keys as DeepSeek's config.json, parsed as one; with mtp (the layer's own
 * file), num_nextn_predict_layers 1 and its compress_ratios entry after the layers'. */
static numla_status config_from_deepseek4(const numla_gguf *g, const numla_gguf *mtp,
                                          const char *source, numla_model_config *out)
{
    numla_gguf_deepseek4 d;
    NUMLA_CHECK(numla_gguf_deepseek4_read(g, &d));
    int32_t mtp_ratio = 0;
    if (mtp)
        NUMLA_CHECK(numla_gguf_deepseek4_read_mtp(mtp, &d, &mtp_ratio));
    json_t *cr = json_array();
    for (int64_t l = 0; cr && l < d.num_hidden_layers; l++)
        json_array_append_new(cr, json_integer(d.compress_ratios[l]));
    if (cr && mtp)
        json_array_append_new(cr, json_integer(mtp_ratio));
    json_t *j = json_pack(
        "{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:o, s:f, s:f, "
        "s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:b, s:f, s:s, s:s, s:I, s:I, s:f, s:I, s:I}",
        "model_type", "deepseek_v4", "vocab_size", (json_int_t)d.vocab_size,
        "hidden_size", (json_int_t)d.hidden_size, "num_hidden_layers",
        (json_int_t)d.num_hidden_layers, "max_position_embeddings",
        (json_int_t)d.max_position_embeddings, "num_attention_heads",
        (json_int_t)d.num_attention_heads, "num_key_value_heads", (json_int_t)1, "head_dim",
        (json_int_t)d.head_dim, "qk_rope_head_dim", (json_int_t)d.qk_rope_head_dim,
        "q_lora_rank", (json_int_t)d.q_lora_rank, "o_groups", (json_int_t)d.o_groups,
        "o_lora_rank", (json_int_t)d.o_lora_rank, "rms_norm_eps", d.rms_norm_eps,
        "compress_ratios", cr, "compress_rope_theta", d.compress_rope_theta, "rope_theta",
        d.rope_theta, "sliding_window", (json_int_t)d.sliding_window, "n_routed_experts",
        (json_int_t)d.n_routed_experts, "num_experts_per_tok", (json_int_t)d.num_experts_per_tok,
        "n_shared_experts", (json_int_t)d.n_shared_experts, "moe_intermediate_size",
        (json_int_t)d.moe_intermediate_size, "num_hash_layers", (json_int_t)d.num_hash_layers,
        "hc_mult", (json_int_t)d.hc_mult, "hc_eps", d.hc_eps, "norm_topk_prob",
        d.norm_topk_prob, "routed_scaling_factor", d.routed_scaling_factor, "scoring_func",
        "sqrtsoftplus", "topk_method", "noaux_tc", "hc_sinkhorn_iters",
        (json_int_t)d.hc_sinkhorn_iters, "compress_rate_csa", (json_int_t)4, "swiglu_limit",
        d.swiglu_limit, "compress_rate_hca", (json_int_t)d.hca_rate, "num_nextn_predict_layers",
        (json_int_t)(mtp ? 1 : 0));
    numla_status s = j ? NUMLA_STATUS_OK : NUMLA_STATUS_NO_MEMORY;
    if (j && d.index_n_heads > 0) {
        json_object_set_new(j, "index_n_heads", json_integer(d.index_n_heads));
        json_object_set_new(j, "index_head_dim", json_integer(d.index_head_dim));
        json_object_set_new(j, "index_topk", json_integer(d.index_topk));
    }
    if (j && d.rope_yarn)
        json_object_set_new(j, "rope_scaling",
                            json_pack("{s:s, s:f, s:I, s:f, s:f}", "type", "yarn", "factor",
                                      d.rope_factor, "original_max_position_embeddings",
                                      (json_int_t)d.rope_original_max_position_embeddings,
                                      "beta_fast", d.rope_beta_fast, "beta_slow",
                                      d.rope_beta_slow));
    if (j) {
        json_object_set_new(j, "tie_word_embeddings", json_boolean(d.tie_word_embeddings));
        if (d.bos_token_id >= 0)
            json_object_set_new(j, "bos_token_id", json_integer(d.bos_token_id));
        if (d.eos_token_id >= 0)
            json_object_set_new(j, "eos_token_id", json_integer(d.eos_token_id));
    }
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!text)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "%s: no memory for the deepseek4 config", source);
    char src[512];
    snprintf(src, sizeof src, "%s (its deepseek4.* keys as config.json)", source);
    s = numla_model_config_parse(text, src, out);
    free(text);
    NUMLA_CHECK(s);
    return NUMLA_STATUS_OK;
}

numla_status numla_model_config_from_gguf(const numla_gguf *g, const char *source,
                                          numla_model_config *out)
{
    if (numla_gguf_is_deepseek4(g))
        return config_from_deepseek4(g, NULL, source, out);
    numla_gguf_deepseek2 d;
    NUMLA_CHECK(numla_gguf_deepseek2_read(g, &d));
    numla_model_config o;
    memset(&o, 0, sizeof o);
    const int v3 = d.scoring_sigmoid || d.score_bias;
    if (d.scoring_sigmoid && !d.score_bias)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "%s: key deepseek2.expert_gating_func is sigmoid "
                   "but the file has no blk.N.exp_probs_b.bias (numla runs sigmoid routing only "
                   "as DeepSeek-V3's noaux_tc)", source);
    if (d.score_bias && !d.scoring_sigmoid)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "%s: the file has blk.N.exp_probs_b.bias but key "
                   "deepseek2.expert_gating_func is not sigmoid", source);
    o.arch = v3 ? NUMLA_MODEL_ARCH_DEEPSEEK_V3 : NUMLA_MODEL_ARCH_DEEPSEEK_V2;
    snprintf(o.model_type, sizeof o.model_type, "%s", v3 ? "deepseek_v3" : "deepseek_v2");
    o.vocab_size = d.vocab_size;
    o.hidden_size = d.hidden_size;
    o.num_hidden_layers = d.num_hidden_layers;
    o.num_nextn_predict_layers = d.nextn_predict_layers;
    o.num_attention_heads = d.num_attention_heads;
    o.intermediate_size = d.intermediate_size;
    o.rms_norm_eps = d.rms_norm_eps;
    o.max_position_embeddings = d.max_position_embeddings;
    o.tie_word_embeddings = d.tie_word_embeddings;
    o.q_lora_rank = d.q_lora_rank;
    o.kv_lora_rank = d.kv_lora_rank;
    o.qk_nope_head_dim = d.qk_nope_head_dim;
    o.qk_rope_head_dim = d.qk_rope_head_dim;
    o.v_head_dim = d.v_head_dim;
    o.q_head_dim = d.qk_nope_head_dim + d.qk_rope_head_dim;
    o.n_routed_experts = d.n_routed_experts;
    o.n_shared_experts = d.n_shared_experts;
    o.num_experts_per_tok = d.num_experts_per_tok;
    o.moe_intermediate_size = d.moe_intermediate_size;
    o.first_k_dense_replace = d.first_k_dense_replace;
    o.moe_layer_freq = 1;
    o.n_group = d.n_group;
    o.topk_group = d.topk_group;
    o.topk_method = v3 ? NUMLA_TOPK_METHOD_NOAUX_TC
                    : d.n_group > 1 ? NUMLA_TOPK_METHOD_GROUP_LIMITED_GREEDY
                                    : NUMLA_TOPK_METHOD_GREEDY;
    o.scoring_func = v3 ? NUMLA_SCORING_FUNC_SIGMOID : NUMLA_SCORING_FUNC_SOFTMAX;
    o.norm_topk_prob = d.norm_topk_prob;
    o.routed_scaling_factor = d.routed_scaling_factor;
    o.moe_weight_rule = v3 ? NUMLA_MOE_WEIGHT_RULE_NORM_THEN_SCALE
                           : NUMLA_MOE_WEIGHT_RULE_NORM_OR_SCALE;
    o.rope_theta = d.rope_theta;
    o.rope_yarn = d.rope_yarn;
    o.rope_factor = d.rope_yarn ? d.rope_factor : 1.0;
    o.rope_original_max_position_embeddings = d.rope_original_max_position_embeddings > 0
                                                  ? d.rope_original_max_position_embeddings
                                                  : d.max_position_embeddings;
    o.rope_beta_fast = d.rope_beta_fast;
    o.rope_beta_slow = d.rope_beta_slow;
    o.rope_mscale = d.rope_mscale;
    o.rope_mscale_all_dim = d.rope_mscale_all_dim;
    o.rope_truncate = 1;
    o.weight_format = NUMLA_WEIGHT_FORMAT_NONE;
    o.bos_token_id = d.bos_token_id;
    o.num_eos = d.eos_token_id >= 0 ? 1 : 0;
    o.eos_token_ids[0] = d.eos_token_id;
    if (o.qk_rope_head_dim > NUMLA_CONFIG_MAX_ROPE_DIM || o.qk_rope_head_dim % 2)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: key deepseek2.rope.dimension_count = %lld must be "
                   "even and at most %d", source, (long long)o.qk_rope_head_dim,
                   NUMLA_CONFIG_MAX_ROPE_DIM);
    if (o.n_routed_experts > 0 && (o.n_group < 1 || o.n_routed_experts % o.n_group ||
                                   o.topk_group > o.n_group || o.topk_group < 1))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: keys deepseek2.expert_group_count = %lld / "
                   "expert_group_used_count = %lld do not split %lld experts", source,
                   (long long)o.n_group, (long long)o.topk_group, (long long)o.n_routed_experts);
    if (o.num_experts_per_tok > o.n_routed_experts)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: key deepseek2.expert_used_count = %lld exceeds "
                   "expert_count = %lld", source, (long long)o.num_experts_per_tok,
                   (long long)o.n_routed_experts);
    NUMLA_CHECK(numla_model_config_derive(source, &o));
    *out = o;
    return NUMLA_STATUS_OK;
}

numla_status numla_model_config_load_gguf_mtp(const char *path, const char *mtp_path,
                                              numla_model_config *out)
{
    numla_gguf *g = NULL, *m = NULL;
    NUMLA_CHECK(numla_gguf_open(path, &g));
    numla_status s = numla_gguf_open(mtp_path, &m);
    if (s == NUMLA_STATUS_OK && !numla_gguf_is_deepseek4(g))
        s = numla_error_set(NUMLA_STATUS_UNSUPPORTED, __FILE__, __LINE__, __func__,
                            "%s: an MTP file (%s) goes with a deepseek4 GGUF model; this one's "
                            "MTP layer, if any, is in the file itself", path, mtp_path);
    if (s == NUMLA_STATUS_OK)
        s = config_from_deepseek4(g, m, path, out);
    numla_gguf_close(&m);
    numla_gguf_close(&g);
    NUMLA_CHECK(s);
    return NUMLA_STATUS_OK;
}

numla_status numla_model_config_load_gguf(const char *path, numla_model_config *out)
{
    numla_gguf *g = NULL;
    NUMLA_CHECK(numla_gguf_open(path, &g));
    numla_status s = numla_model_config_from_gguf(g, path, out);
    numla_gguf_close(&g);
    NUMLA_CHECK(s);
    return NUMLA_STATUS_OK;
}
