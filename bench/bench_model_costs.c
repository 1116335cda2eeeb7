/* bench/bench_model_costs.c — per-token byte and FLOP accounting (bench/bench_model.h). */
#include "bench/bench_model.h"

#include <string.h>

#include "engine/formats/gguf.h"
#include "engine/formats/weight_encoding.h"
#include "engine/model/weights.h"
#include "kernels/linear.h"

typedef struct costs_acc {
    numla_isa isa;
    numla_dtype dt;
    numla_weight_format fmt; /* the projections' 8-bit format (NONE: dt) */
    int bad;
} costs_acc;

/* Bytes an 8-bit (n, k) linear reads: its codes and scales as the encoding table gives them
 * (engine/formats/weight_encoding.h), plus, for int8 (run as W8A8), the packed int32 row sums. */
static double q8_bytes(numla_weight_format f, int64_t n, int64_t k)
{
    const double b = (double)numla_weight_encoding_bytes(f, n, k, 0);
    return f == NUMLA_WEIGHT_FORMAT_INT8 ? b + 4.0 * (double)n : b;
}

/* Bytes of rows [r0, r0 + n) of an 8-bit (N, k) tensor packed alone (the scale-grid rows those
 * rows touch: weights.h's per-head W_UV slices). */
static double q8_slice_bytes(numla_weight_format f, int64_t r0, int64_t n, int64_t k)
{
    const numla_weight_encoding_info *in = numla_weight_encoding_get(f);
    if (!in || in->block_rows <= 1)
        return q8_bytes(f, n, k);
    const int64_t B = in->block_rows;
    int64_t g[2];
    numla_weight_encoding_scale_grid(f, n, k, g);
    const int64_t grid_rows = (r0 + n - 1) / B - r0 / B + 1;
    return (double)n * (double)k * in->code_bytes + 4.0 * (double)grid_rows * (double)g[1];
}

/* Packed bytes of an (n, k) linear; adds its FLOPs (2·n·k per token) to *flops. */
static double linear_cost(costs_acc *a, int64_t n, int64_t k, double *flops)
{
    if (n <= 0 || k <= 0)
        return 0;
    *flops += 2.0 * (double)n * (double)k;
    if (a->fmt != NUMLA_WEIGHT_FORMAT_NONE)
        return q8_bytes(a->fmt, n, k);
    size_t b = numla_linear_packed_size(a->isa, n, k, a->dt);
    if (b == 0)
        a->bad = 1;
    return (double)b;
}

/* A float (n, k) linear of dtype dt whatever the projections' format. */
static double float_cost(costs_acc *a, int64_t n, int64_t k, numla_dtype dt, double *flops)
{
    costs_acc f = *a;
    f.fmt = NUMLA_WEIGHT_FORMAT_NONE;
    f.dt = dt;
    double b = linear_cost(&f, n, k, flops);
    a->bad |= f.bad;
    return b;
}

numla_status numla_bench_model_costs_get(const numla_model_config *c, numla_isa isa,
                                         numla_dtype weight_dtype, numla_dtype embed_dtype,
                                         numla_dtype kv_dtype, numla_bench_model_costs *out)
{
    return numla_bench_model_costs_get_q(c, isa, weight_dtype, NUMLA_WEIGHT_FORMAT_NONE, 0,
                                         embed_dtype, kv_dtype, out);
}

numla_status numla_bench_model_costs_get_q(const numla_model_config *c, numla_isa isa,
                                           numla_dtype weight_dtype, numla_weight_format fmt,
                                           int lm_head_q8, numla_dtype embed_dtype,
                                           numla_dtype kv_dtype, numla_bench_model_costs *out)
{
    costs_acc a = {.isa = isa, .dt = weight_dtype, .fmt = fmt};
    /* W_UK / W_UV of an 8-bit kv_b_proj stay 8-bit (weights.h): W_UV a row slice, W_UK the
     * transposed codes (int8: plus the head's nope input scales) where numla_weights_uk_q8
     * says so, else fp32 dequantized at load */
    const int q8 = fmt != NUMLA_WEIGHT_FORMAT_NONE, uk8 = q8 && numla_weights_uk_q8(c, fmt);
    const numla_dtype uk_dt = q8 ? NUMLA_DTYPE_F32 : weight_dtype;
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
            if (uk8) { /* uk_t[h] */
                fl += 2.0 * (double)dc * (double)nope;
                at += q8_bytes(fmt, dc, nope) +
                      (fmt == NUMLA_WEIGHT_FORMAT_INT8 ? 4.0 * (double)nope : 0.0);
            } else {
                at += float_cost(&a, dc, nope, uk_dt, &fl);
            }
            if (q8) { /* uv[h] */
                fl += 2.0 * (double)vd * (double)dc;
                at += q8_slice_bytes(fmt, h * (nope + vd) + nope, vd, dc);
            } else {
                at += float_cost(&a, vd, dc, uk_dt, &fl);
            }
        }
        at += linear_cost(&a, hid, H * vd, &fl);
        if (c->dsa.enabled && c->dsa.indexer_full[l]) { /* wq_b, wk, weights_proj */
            const int64_t hi = c->dsa.index_n_heads, di = c->dsa.index_head_dim;
            at += linear_cost(&a, hi * di, c->q_lora_rank, &fl);
            at += linear_cost(&a, di, hid, &fl);
            at += linear_cost(&a, hi, hid, &fl);
            r.index_flops_per_ctx += 2.0 * (double)hi * (double)di;
            r.index_bytes_per_ctx += (double)di * (double)numla_dtype_size(kv_dtype);
        }
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
    r.lm_head_bytes = (lm_head_q8 ? linear_cost(&a, c->vocab_size, hid, &fl)
                                  : float_cost(&a, c->vocab_size, hid, weight_dtype, &fl)) +
                      (double)hid * (double)numla_dtype_size(embed_dtype);
    if (a.bad || numla_dtype_size(embed_dtype) == 0 || numla_dtype_size(kv_dtype) == 0)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "bench model: no packed size for this config "
                   "(isa %d, dtype %d)", (int)isa, (int)weight_dtype);
    r.weight_bytes = r.attn_weight_bytes + r.mlp_weight_bytes + r.lm_head_bytes;
    r.linear_flops = fl;
    r.attn_flops_per_ctx = (double)L * (double)H * (2.0 * (double)(dc + dr) + 2.0 * (double)dc);
    r.kv_bytes_per_ctx = (double)L * (double)(dc + dr) * (double)numla_dtype_size(kv_dtype);
    r.index_topk = c->dsa.enabled ? c->dsa.index_topk : 0;
    *out = r;
    return NUMLA_STATUS_OK;
}

numla_status numla_bench_model_costs_gguf(const numla_model_config *c, const char *path,
                                          numla_dtype kv_dtype, numla_bench_model_costs *out)
{
    numla_bench_model_costs r;
    NUMLA_CHECK(numla_bench_model_costs_get_q(c, NUMLA_ISA_REF, NUMLA_DTYPE_F32,
                                              NUMLA_WEIGHT_FORMAT_NONE, 0, NUMLA_DTYPE_F32,
                                              kv_dtype, &r));
    numla_gguf *g = NULL;
    NUMLA_CHECK(numla_gguf_open(path, &g));
    const double k_of_e = c->n_routed_experts > 0
                              ? (double)c->num_experts_per_tok / (double)c->n_routed_experts
                              : 0.0;
    double at = 0, ml = 0, lm = -1, emb = 0, kvb = 0;
    int split_layout = 0;
    for (int64_t i = 0; i < numla_gguf_tensor_count(g); i++) {
        const numla_gguf_tensor *t = numla_gguf_tensor_at(g, i);
        const double b = (double)t->nbytes;
        const char *n = t->name, *dot = strchr(n, '.');
        if (!strcmp(n, "token_embd.weight"))
            emb = b / (double)(t->ne[1] > 0 ? t->ne[1] : 1);
        else if (!strcmp(n, "output.weight"))
            lm = b;
        else if (strncmp(n, "blk.", 4) || !dot || !(dot = strchr(dot + 1, '.')))
            continue;
        else if (strstr(n, ".attn_q") || strstr(n, ".attn_kv_a_mqa.weight") ||
                 strstr(n, ".attn_output.weight"))
            at += strstr(n, "_norm.") ? 0 : b;
        else if (strstr(n, ".attn_k_b.weight") || strstr(n, ".attn_v_b.weight")) {
            at += b; /* W_UKᵀ and W_UV, kept in their blocks */
            split_layout = 1;
        } else if (strstr(n, ".attn_kv_b.weight"))
            kvb += b;
        else if (strstr(n, "_exps.weight"))
            ml += b * k_of_e;
        else if (strstr(n, ".ffn_gate_inp.weight"))
            ml += (double)(t->ne[0] * t->ne[1]) * 4.0; /* packed fp32 */
        else if (strstr(n, ".ffn_gate") || strstr(n, ".ffn_up") || strstr(n, ".ffn_down"))
            ml += strstr(n, "_norm.") ? 0 : b;
    }
    numla_gguf_close(&g);
    /* attn_kv_b (the older layout): W_UV's rows stay in their blocks, W_UK is made fp32 per
     * head (engine/model/weights.c ld_kv_b) */
    if (!split_layout)
        at += kvb * (double)c->v_head_dim / (double)(c->qk_nope_head_dim + c->v_head_dim) +
              (double)c->num_hidden_layers * (double)c->num_attention_heads *
                  (double)(c->kv_lora_rank * c->qk_nope_head_dim) * 4.0;
    if (lm < 0) /* tied: lm_head is the embedding's blocks */
        lm = emb * (double)c->vocab_size;
    r.attn_weight_bytes = at;
    r.mlp_weight_bytes = ml;
    r.lm_head_bytes = lm + emb;
    r.weight_bytes = at + ml + r.lm_head_bytes;
    *out = r;
    return NUMLA_STATUS_OK;
}
