/* bench/bench_model_bytes.c — the weight bytes a batch-1 decode token reads, counted from the
 * weights as loaded (bench/bench_model.h numla_bench_model_costs_loaded). */
#include "bench/bench_model.h"

#include "engine/model/model_linear.h"
#include "engine/model/model_v4.h"
#include "engine/model/weights.h"

static double lin(const numla_model_linear *w) { return (double)numla_model_linear_bytes(w); }

static double mlp(const numla_weights_mlp *m)
{
    return lin(&m->gate) + lin(&m->up) + lin(&m->down);
}

numla_status numla_bench_model_costs_loaded(const numla_model_weights *w, numla_dtype kv_dtype,
                                            numla_bench_model_costs *out)
{
    const numla_model_config *c = &w->cfg;
    /* FLOP and KV fields from the config (they do not depend on the encoding) */
    NUMLA_CHECK(numla_bench_model_costs_get(c, w->isa, NUMLA_DTYPE_BF16, NUMLA_DTYPE_BF16,
                                            kv_dtype, out));
    const numla_shard *sh = &w->shard;
    double attn = 0, ml = 0;
    for (int64_t l = 0; l < c->num_hidden_layers; l++) {
        const numla_weights_layer *lw = &w->layers[l];
        attn += lin(&lw->q_proj) + lin(&lw->q_a_proj) + lin(&lw->q_b_proj) + lin(&lw->kv_a_proj) +
                lin(&lw->o_proj);
        for (int64_t h = 0; h < sh->head_count; h++)
            attn += lin(&lw->uk_t[h]) + lin(&lw->uv[h]);
        if (lw->has_indexer)
            attn += lin(&lw->idx_wq_b) + lin(&lw->idx_wk) + lin(&lw->idx_weights);
        if (!lw->is_moe) {
            ml += mlp(&lw->dense);
            continue;
        }
        ml += lin(&lw->router) + mlp(&lw->shared);
        /* k routed experts a token, at the average size of this rank's experts */
        double ex = 0;
        for (int64_t e = 0; e < sh->expert_count; e++)
            ex += mlp(&lw->experts[e]);
        if (sh->expert_count > 0)
            ml += ex / (double)sh->expert_count * (double)c->num_experts_per_tok;
    }
    out->attn_weight_bytes = attn;
    out->mlp_weight_bytes = ml;
    out->lm_head_bytes = lin(&w->lm_head) + (double)w->embed_row_bytes;
    out->weight_bytes = attn + ml + out->lm_head_bytes;
    return NUMLA_STATUS_OK;
}

/* DeepSeek-V4's costs (bench_model.h). The weights from the loaded model
 * (numla_v4_model_token_costs); per context row, what a decode token reads beyond the window's
 * W rows: each CSA layer's index keys (Di, fp32) and each HCA layer's entries (Dh, fp32) per
 * rate tokens, and their FLOPs (the indexer's 2·Hi·Di, HCA's 4·H·Dh per entry). The CSA
 * entries its top-k picks are a bounded cost, left out. */
numla_status numla_bench_model_costs_v4(const numla_v4_model *v4, numla_bench_model_costs *co)
{
    const numla_model_config *c = numla_v4_model_config(v4);
    numla_v4_token_costs tc;
    numla_v4_model_token_costs(v4, &tc);
    *co = (numla_bench_model_costs){.attn_weight_bytes = tc.attn_bytes,
                                    .mlp_weight_bytes = tc.mlp_bytes,
                                    .lm_head_bytes = tc.head_bytes,
                                    .linear_flops = tc.linear_flops};
    co->weight_bytes = tc.attn_bytes + tc.mlp_bytes + tc.head_bytes;
    const numla_v4_config *v = &c->v4;
    for (int64_t l = 0; l < c->num_hidden_layers; l++) {
        if (v->attn[l] == NUMLA_V4_ATTN_CSA) {
            co->kv_bytes_per_ctx += 4.0 * (double)v->index_head_dim / (double)v->csa_rate;
            co->attn_flops_per_ctx += 2.0 * (double)(v->index_n_heads * v->index_head_dim) /
                                      (double)v->csa_rate;
        } else if (v->attn[l] == NUMLA_V4_ATTN_HCA) {
            co->kv_bytes_per_ctx += 4.0 * (double)v->head_dim / (double)v->hca_rate;
            co->attn_flops_per_ctx += 4.0 * (double)(c->num_attention_heads * v->head_dim) /
                                      (double)v->hca_rate;
        }
    }
    return NUMLA_STATUS_OK;
}
