/* bench/bench_model_costs.c — per-token byte and FLOP accounting (bench/bench_model.h). */
#include "bench/bench_model.h"

#include "kernels/linear.h"

typedef struct costs_acc {
    numla_isa isa;
    numla_dtype dt;
    int bad;
} costs_acc;

/* Packed bytes of an (n, k) linear; adds its FLOPs (2·n·k per token) to *flops. */
static double linear_cost(costs_acc *a, int64_t n, int64_t k, double *flops)
{
    if (n <= 0 || k <= 0)
        return 0;
    size_t b = numla_linear_packed_size(a->isa, n, k, a->dt);
    if (b == 0)
        a->bad = 1;
    *flops += 2.0 * (double)n * (double)k;
    return (double)b;
}

numla_status numla_bench_model_costs_get(const numla_model_config *c, numla_isa isa,
                                         numla_dtype weight_dtype, numla_dtype embed_dtype,
                                         numla_dtype kv_dtype, numla_bench_model_costs *out)
{
    costs_acc a = {.isa = isa, .dt = weight_dtype};
    numla_bench_model_costs r = {0};
    const int64_t H = c->num_attention_heads, hid = c->hidden_size, dc = c->kv_lora_rank;
    const int64_t dr = c->qk_rope_head_dim, qhd = c->q_head_dim, nope = c->qk_nope_head_dim;
    const int64_t vd = c->v_head_dim, L = c->num_hidden_layers;
    double fl = 0;
    for (int64_t l = 0; l < L; l++) {
        double at = 0, ml = 0;
        if (c->q_lora_rank == 0) {
            at += linear_cost(&a, H * qhd, hid, &fl);
        } else {
            at += linear_cost(&a, c->q_lora_rank, hid, &fl);
            at += linear_cost(&a, H * qhd, c->q_lora_rank, &fl);
        }
        at += linear_cost(&a, dc + dr, hid, &fl);
        for (int64_t h = 0; h < H; h++) {
            at += linear_cost(&a, dc, nope, &fl); /* uk_t[h] */
            at += linear_cost(&a, vd, dc, &fl);   /* uv[h] */
        }
        at += linear_cost(&a, hid, H * vd, &fl);
        if (numla_model_config_is_moe_layer(c, l)) {
            const int64_t mi = c->moe_intermediate_size, E = c->n_routed_experts;
            const int64_t k = c->num_experts_per_tok, si = c->n_shared_experts * mi;
            ml += (double)(E * hid) * 4.0; /* fp32 router */
            fl += 2.0 * (double)E * (double)hid;
            for (int64_t j = 0; j < k; j++) {
                ml += linear_cost(&a, mi, hid, &fl);
                ml += linear_cost(&a, mi, hid, &fl);
                ml += linear_cost(&a, hid, mi, &fl);
            }
            ml += linear_cost(&a, si, hid, &fl);
            ml += linear_cost(&a, si, hid, &fl);
            ml += linear_cost(&a, hid, si, &fl);
        } else {
            const int64_t I = c->intermediate_size;
            ml += linear_cost(&a, I, hid, &fl);
            ml += linear_cost(&a, I, hid, &fl);
            ml += linear_cost(&a, hid, I, &fl);
        }
        r.attn_weight_bytes += at;
        r.mlp_weight_bytes += ml;
    }
    r.lm_head_bytes = linear_cost(&a, c->vocab_size, hid, &fl) +
                      (double)hid * (double)numla_dtype_size(embed_dtype);
    if (a.bad || numla_dtype_size(embed_dtype) == 0 || numla_dtype_size(kv_dtype) == 0)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "bench model: no packed size for this config "
                   "(isa %d, dtype %d)", (int)isa, (int)weight_dtype);
    r.weight_bytes = r.attn_weight_bytes + r.mlp_weight_bytes + r.lm_head_bytes;
    r.linear_flops = fl;
    r.attn_flops_per_ctx = (double)L * (double)H * (2.0 * (double)(dc + dr) + 2.0 * (double)dc);
    r.kv_bytes_per_ctx = (double)L * (double)(dc + dr) * (double)numla_dtype_size(kv_dtype);
    *out = r;
    return NUMLA_STATUS_OK;
}
