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
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/formats/gguf.h"
#include "engine/formats/gguf_deepseek2.h"
#include "engine/model/config.h"
#include "engine/model/config_internal.h"

int numla_model_path_is_gguf(const char *path)
{
    struct stat st;
    const size_t n = path ? strlen(path) : 0;
    return n > 5 && !strcmp(path + n - 5, ".gguf") && stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

numla_status numla_model_config_from_gguf(const numla_gguf *g, const char *source,
                                          numla_model_config *out)
{
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

numla_status numla_model_config_load_gguf(const char *path, numla_model_config *out)
{
    numla_gguf *g = NULL;
    NUMLA_CHECK(numla_gguf_open(path, &g));
    numla_status s = numla_model_config_from_gguf(g, path, out);
    numla_gguf_close(&g);
    NUMLA_CHECK(s);
    return NUMLA_STATUS_OK;
}
