/* tests/unit/engine/model_testlib.h — tiny random DeepSeek-style models for engine tests, and an
 * independent double-precision reference forward written straight from docs/design.md §5 in the
 * *expanded* form (k_nope and v from kv_b_proj, interleaved RoPE output, sort-based top-k), so
 * it shares no code with engine/model/model.c's absorbed path.
 * Header-only (static functions) so each test file that includes it stays self-contained.
 */
#ifndef NUMLA_TESTS_MODEL_TESTLIB_H
#define NUMLA_TESTS_MODEL_TESTLIB_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/formats/safetensors.h"
#include "test_util.h"

typedef struct tl_tensor {
    char name[160];
    int ndim;
    int64_t shape[2];
    float *data;
} tl_tensor;

typedef struct tl_model {
    /* config */
    int v3, q_lora, layers, hidden, heads, inter, vocab, dc, nope, dr, vd;
    int experts, k, shared, moe_inter, first_dense, n_group, topk_group, norm_topk;
    int grouped; /* V2: group_limited_greedy */
    double rsf, theta, factor, mscale, mscale_all, eps;
    int max_pos, orig_max_pos;
    int tie;
    /* tensors */
    tl_tensor t[512];
    int nt;
} tl_model;

static float *tl_add(tl_model *m, numla_test_rng *rng, const char *name, int ndim, int64_t d0,
                     int64_t d1, double scale, double offset)
{
    tl_tensor *t = &m->t[m->nt++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = d1;
    int64_t n = ndim == 1 ? d0 : d0 * d1;
    t->data = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        t->data[i] = (float)(offset + scale * numla_test_rng_normal(rng));
    return t->data;
}

static const float *tl_get(const tl_model *m, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static const float *tl_get(const tl_model *m, const char *fmt, ...)
{
    char name[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    for (int i = 0; i < m->nt; i++)
        if (!strcmp(m->t[i].name, name))
            return m->t[i].data;
    fprintf(stderr, "tl_get: no tensor %s\n", name);
    abort();
}

static void tl_free(tl_model *m)
{
    for (int i = 0; i < m->nt; i++)
        free(m->t[i].data);
    m->nt = 0;
}

/* variant: 0 = V2 greedy, plain q_proj; 1 = V2 group_limited_greedy + q_lora; 2 = V3 noaux_tc */
static void tl_build(tl_model *m, int variant, uint64_t seed)
{
    memset(m, 0, sizeof *m);
    m->v3 = variant == 2;
    m->q_lora = variant >= 1 ? 48 : 0;
    m->layers = 3;
    m->hidden = 64;
    m->heads = 4;
    m->inter = 96;
    m->vocab = 160;
    m->dc = 32;
    m->nope = 16;
    m->dr = 16;
    m->vd = 24;
    m->experts = 8;
    m->k = 3;
    m->shared = variant == 1 ? 2 : 1;
    m->moe_inter = 32;
    m->first_dense = 1;
    m->grouped = variant == 1;
    m->n_group = variant == 0 ? 1 : 4;
    m->topk_group = variant == 0 ? 1 : 2;
    m->norm_topk = variant != 1;
    m->rsf = variant == 0 ? 1.0 : variant == 1 ? 16.0 : 2.5;
    m->theta = 10000.0;
    m->factor = 4.0;
    m->mscale = variant == 2 ? 1.0 : 0.707;
    m->mscale_all = variant == 2 ? 0.8 : 0.707;
    m->eps = 1e-6;
    m->max_pos = 512;
    m->orig_max_pos = 128;
    m->tie = 0;
    numla_test_rng rng = {seed};
    const int H = m->heads, qhd = m->nope + m->dr, hid = m->hidden;
    tl_add(m, &rng, "model.embed_tokens.weight", 2, m->vocab, hid, 1.0, 0.0);
    char n[160];
    for (int l = 0; l < m->layers; l++) {
#define N(...) (snprintf(n, sizeof n, __VA_ARGS__), n)
        tl_add(m, &rng, N("model.layers.%d.input_layernorm.weight", l), 1, hid, 0, 0.1, 1.0);
        tl_add(m, &rng, N("model.layers.%d.post_attention_layernorm.weight", l), 1, hid, 0, 0.1, 1.0);
        if (m->q_lora) {
            tl_add(m, &rng, N("model.layers.%d.self_attn.q_a_proj.weight", l), 2, m->q_lora, hid, 0.15, 0);
            tl_add(m, &rng, N("model.layers.%d.self_attn.q_a_layernorm.weight", l), 1, m->q_lora, 0, 0.1, 1.0);
            tl_add(m, &rng, N("model.layers.%d.self_attn.q_b_proj.weight", l), 2, H * qhd, m->q_lora, 0.15, 0);
        } else {
            tl_add(m, &rng, N("model.layers.%d.self_attn.q_proj.weight", l), 2, H * qhd, hid, 0.15, 0);
        }
        tl_add(m, &rng, N("model.layers.%d.self_attn.kv_a_proj_with_mqa.weight", l), 2, m->dc + m->dr, hid, 0.15, 0);
        tl_add(m, &rng, N("model.layers.%d.self_attn.kv_a_layernorm.weight", l), 1, m->dc, 0, 0.1, 1.0);
        tl_add(m, &rng, N("model.layers.%d.self_attn.kv_b_proj.weight", l), 2, H * (m->nope + m->vd), m->dc, 0.2, 0);
        tl_add(m, &rng, N("model.layers.%d.self_attn.o_proj.weight", l), 2, hid, H * m->vd, 0.1, 0);
        if (l < m->first_dense) {
            tl_add(m, &rng, N("model.layers.%d.mlp.gate_proj.weight", l), 2, m->inter, hid, 0.15, 0);
            tl_add(m, &rng, N("model.layers.%d.mlp.up_proj.weight", l), 2, m->inter, hid, 0.15, 0);
            tl_add(m, &rng, N("model.layers.%d.mlp.down_proj.weight", l), 2, hid, m->inter, 0.1, 0);
        } else {
            tl_add(m, &rng, N("model.layers.%d.mlp.gate.weight", l), 2, m->experts, hid, 0.3, 0);
            if (m->v3)
                tl_add(m, &rng, N("model.layers.%d.mlp.gate.e_score_correction_bias", l), 1, m->experts, 0, 0.1, 0);
            for (int e = 0; e < m->experts; e++) {
                tl_add(m, &rng, N("model.layers.%d.mlp.experts.%d.gate_proj.weight", l, e), 2, m->moe_inter, hid, 0.15, 0);
                tl_add(m, &rng, N("model.layers.%d.mlp.experts.%d.up_proj.weight", l, e), 2, m->moe_inter, hid, 0.15, 0);
                tl_add(m, &rng, N("model.layers.%d.mlp.experts.%d.down_proj.weight", l, e), 2, hid, m->moe_inter, 0.1, 0);
            }
            int si = m->shared * m->moe_inter;
            tl_add(m, &rng, N("model.layers.%d.mlp.shared_experts.gate_proj.weight", l), 2, si, hid, 0.15, 0);
            tl_add(m, &rng, N("model.layers.%d.mlp.shared_experts.up_proj.weight", l), 2, si, hid, 0.15, 0);
            tl_add(m, &rng, N("model.layers.%d.mlp.shared_experts.down_proj.weight", l), 2, hid, si, 0.1, 0);
        }
#undef N
    }
    tl_add(m, &rng, "model.norm.weight", 1, hid, 0, 0.1, 1.0);
    tl_add(m, &rng, "lm_head.weight", 2, m->vocab, hid, 0.5, 0);
}

/* Write config.json + model.safetensors (weights in `dtype`) into dir. Returns 0 on success. */
static int tl_write(const tl_model *m, const char *dir, numla_dtype dtype)
{
    mkdir(dir, 0755);
    char path[1100];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f,
            "{\"model_type\": \"%s\", \"vocab_size\": %d, \"hidden_size\": %d,"
            " \"intermediate_size\": %d, \"moe_intermediate_size\": %d, \"num_hidden_layers\": %d,"
            " \"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"n_shared_experts\": %d,"
            " \"n_routed_experts\": %d, \"routed_scaling_factor\": %g, \"kv_lora_rank\": %d,",
            m->v3 ? "deepseek_v3" : "deepseek_v2", m->vocab, m->hidden, m->inter, m->moe_inter,
            m->layers, m->heads, m->heads, m->shared, m->experts, m->rsf, m->dc);
    if (m->q_lora)
        fprintf(f, " \"q_lora_rank\": %d,", m->q_lora);
    else
        fprintf(f, " \"q_lora_rank\": null,");
    fprintf(f,
            " \"qk_rope_head_dim\": %d, \"v_head_dim\": %d, \"qk_nope_head_dim\": %d,"
            " \"topk_method\": \"%s\", \"n_group\": %d, \"topk_group\": %d,"
            " \"num_experts_per_tok\": %d, \"moe_layer_freq\": 1, \"first_k_dense_replace\": %d,"
            " \"norm_topk_prob\": %s, \"scoring_func\": \"%s\", \"hidden_act\": \"silu\","
            " \"max_position_embeddings\": %d, \"rms_norm_eps\": %g, \"rope_theta\": %g,"
            " \"rope_scaling\": {\"beta_fast\": 32, \"beta_slow\": 1, \"factor\": %g,"
            " \"mscale\": %g, \"mscale_all_dim\": %g, \"original_max_position_embeddings\": %d,"
            " \"type\": \"yarn\"}, \"bos_token_id\": 0, \"eos_token_id\": 1,"
            " \"tie_word_embeddings\": false, \"attention_bias\": false}\n",
            m->dr, m->vd, m->nope,
            m->v3 ? "noaux_tc" : m->grouped ? "group_limited_greedy" : "greedy", m->n_group,
            m->topk_group, m->k, m->first_dense, m->norm_topk ? "true" : "false",
            m->v3 ? "sigmoid" : "softmax", m->max_pos, m->eps, m->theta, m->factor, m->mscale,
            m->mscale_all, m->orig_max_pos);
    fclose(f);
    numla_safetensors_writer *w = NULL;
    if (numla_safetensors_writer_create(&w) != NUMLA_STATUS_OK)
        return -1;
    int rc = 0;
    for (int i = 0; i < m->nt && !rc; i++) {
        const tl_tensor *t = &m->t[i];
        int64_t n = t->ndim == 1 ? t->shape[0] : t->shape[0] * t->shape[1];
        void *buf = malloc((size_t)n * 4);
        for (int64_t j = 0; j < n; j++)
            numla_store_f32(buf, dtype, (size_t)j, t->data[j]);
        rc = numla_safetensors_writer_add(w, t->name, dtype, t->ndim, t->shape, buf) != NUMLA_STATUS_OK;
        free(buf);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (!rc)
        rc = numla_safetensors_writer_write(w, path) != NUMLA_STATUS_OK;
    numla_safetensors_writer_destroy(&w);
    return rc;
}

/* ---- the reference forward (double precision, expanded MLA) ---- */

static void tl_matvec(double *y, const float *W, const double *x, int n, int k)
{
    for (int i = 0; i < n; i++) {
        double s = 0;
        for (int j = 0; j < k; j++)
            s += (double)W[(size_t)i * k + j] * x[j];
        y[i] = s;
    }
}

static void tl_rms(double *y, const double *x, const float *w, int n, double eps)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++)
        y[i] = x[i] * r * w[i];
}

static double tl_mscale(double f, double ms) { return f <= 1 ? 1.0 : 0.1 * ms * log(f) + 1.0; }

/* YaRN inv_freq straight from docs/design.md §5. */
static void tl_inv_freq(const tl_model *m, double *inv)
{
    int d = m->dr;
    double L0 = m->orig_max_pos;
    double cf = d * log(L0 / (32.0 * 2 * M_PI)) / (2 * log(m->theta));
    double cs = d * log(L0 / (1.0 * 2 * M_PI)) / (2 * log(m->theta));
    double low = floor(cf), high = ceil(cs);
    if (low < 0) low = 0;
    if (high > d - 1) high = d - 1;
    if (low == high) high += 0.001;
    for (int i = 0; i < d / 2; i++) {
        double ramp = (i - low) / (high - low);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        double b = pow(m->theta, 2.0 * i / d);
        inv[i] = ramp / (m->factor * b) + (1 - ramp) / b;
    }
}

/* Interleaved output: (x_2i, x_2i+1) rotated in place. */
static void tl_rope(double *x, int d, int pos, const double *inv, double af)
{
    for (int i = 0; i < d / 2; i++) {
        double a = x[2 * i], b = x[2 * i + 1], ang = pos * inv[i];
        x[2 * i] = (a * cos(ang) - b * sin(ang)) * af;
        x[2 * i + 1] = (b * cos(ang) + a * sin(ang)) * af;
    }
}

static const double *tl_sort_vals_;
static int tl_cmp_desc(const void *a, const void *b)
{
    int i = *(const int *)a, j = *(const int *)b;
    if (tl_sort_vals_[i] != tl_sort_vals_[j])
        return tl_sort_vals_[i] > tl_sort_vals_[j] ? -1 : 1;
    return i - j;
}

/* Reference routing (docs/design.md §5 + the reference's masking with 0.0). */
static void tl_route(const tl_model *m, const double *logits, const float *bias, int *idx, double *w)
{
    int E = m->experts;
    double s[256], ch[256];
    int ord[256];
    if (m->v3) {
        for (int e = 0; e < E; e++)
            s[e] = 1 / (1 + exp(-logits[e]));
    } else {
        double mx = logits[0], z = 0;
        for (int e = 1; e < E; e++) mx = fmax(mx, logits[e]);
        for (int e = 0; e < E; e++) z += exp(logits[e] - mx);
        for (int e = 0; e < E; e++) s[e] = exp(logits[e] - mx) / z;
    }
    for (int e = 0; e < E; e++)
        ch[e] = s[e] + (m->v3 ? bias[e] : 0.0);
    if ((m->v3 || m->grouped) && m->n_group > 1) {
        int G = m->n_group, per = E / G, gord[64];
        double gs[64];
        for (int g = 0; g < G; g++) {
            for (int j = 0; j < per; j++) ord[j] = g * per + j;
            tl_sort_vals_ = ch;
            qsort(ord, (size_t)per, sizeof(int), tl_cmp_desc);
            gs[g] = m->v3 ? ch[ord[0]] + ch[ord[1]] : ch[ord[0]];
            gord[g] = g;
        }
        tl_sort_vals_ = gs;
        qsort(gord, (size_t)G, sizeof(int), tl_cmp_desc);
        for (int r = m->topk_group; r < G; r++)
            for (int j = 0; j < per; j++)
                ch[gord[r] * per + j] = m->v3 ? -INFINITY : 0.0;
    }
    for (int e = 0; e < E; e++) ord[e] = e;
    tl_sort_vals_ = ch;
    qsort(ord, (size_t)E, sizeof(int), tl_cmp_desc);
    double sum = 0;
    for (int j = 0; j < m->k; j++) {
        idx[j] = ord[j];
        w[j] = m->v3 ? s[ord[j]] : ch[ord[j]];
        sum += w[j];
    }
    int norm = m->norm_topk && (m->v3 || m->k > 1);
    for (int j = 0; j < m->k; j++) {
        if (norm) w[j] /= sum + 1e-20;
        if (!norm || m->v3) w[j] *= m->rsf;
    }
}

static void tl_mlp(const tl_model *m, const char *prefix, int inter, const double *x, double *y)
{
    int hid = m->hidden;
    double *g = malloc(sizeof(double) * inter), *u = malloc(sizeof(double) * inter);
    double *o = malloc(sizeof(double) * hid);
    tl_matvec(g, tl_get(m, "%sgate_proj.weight", prefix), x, inter, hid);
    tl_matvec(u, tl_get(m, "%sup_proj.weight", prefix), x, inter, hid);
    for (int i = 0; i < inter; i++) g[i] = g[i] / (1 + exp(-g[i])) * u[i];
    tl_matvec(o, tl_get(m, "%sdown_proj.weight", prefix), g, hid, inter);
    for (int i = 0; i < hid; i++) y[i] = o[i];
    free(g); free(u); free(o);
}

/* Logits (n, vocab) for every position of one sequence `tok` (n tokens), causal. */
static void tl_forward(const tl_model *m, const int32_t *tok, int n, double *logits)
{
    const int hid = m->hidden, H = m->heads, qhd = m->nope + m->dr, dc = m->dc, dr = m->dr;
    const int nope = m->nope, vd = m->vd;
    double inv[128];
    tl_inv_freq(m, inv);
    double af = tl_mscale(m->factor, m->mscale) / tl_mscale(m->factor, m->mscale_all);
    double mm = m->mscale_all != 0 ? tl_mscale(m->factor, m->mscale_all) : 1.0;
    double scale = mm * mm / sqrt((double)qhd);
    double *h = calloc((size_t)n * hid, sizeof(double));
    double *x = malloc(sizeof(double) * hid), *ao = malloc(sizeof(double) * (size_t)n * hid);
    double *q = malloc(sizeof(double) * (size_t)n * H * qhd);
    double *K = malloc(sizeof(double) * (size_t)n * H * qhd);
    double *V = malloc(sizeof(double) * (size_t)n * H * vd);
    double *att = malloc(sizeof(double) * H * vd), *p = malloc(sizeof(double) * n);
    double *y = malloc(sizeof(double) * hid), *acc = malloc(sizeof(double) * hid);
    const float *emb = tl_get(m, "model.embed_tokens.weight");
    for (int t = 0; t < n; t++)
        for (int i = 0; i < hid; i++)
            h[(size_t)t * hid + i] = emb[(size_t)tok[t] * hid + i];
    char pre[160];
    for (int l = 0; l < m->layers; l++) {
        for (int t = 0; t < n; t++) {
            double *ht = h + (size_t)t * hid;
            tl_rms(x, ht, tl_get(m, "model.layers.%d.input_layernorm.weight", l), hid, m->eps);
            double *qt = q + (size_t)t * H * qhd;
            if (m->q_lora) {
                double qa[256];
                tl_matvec(qa, tl_get(m, "model.layers.%d.self_attn.q_a_proj.weight", l), x, m->q_lora, hid);
                tl_rms(qa, qa, tl_get(m, "model.layers.%d.self_attn.q_a_layernorm.weight", l), m->q_lora, m->eps);
                tl_matvec(qt, tl_get(m, "model.layers.%d.self_attn.q_b_proj.weight", l), qa, H * qhd, m->q_lora);
            } else {
                tl_matvec(qt, tl_get(m, "model.layers.%d.self_attn.q_proj.weight", l), x, H * qhd, hid);
            }
            double kva[512], c[512], kvb[4096];
            tl_matvec(kva, tl_get(m, "model.layers.%d.self_attn.kv_a_proj_with_mqa.weight", l), x, dc + dr, hid);
            tl_rms(c, kva, tl_get(m, "model.layers.%d.self_attn.kv_a_layernorm.weight", l), dc, m->eps);
            tl_rope(kva + dc, dr, t, inv, af);
            tl_matvec(kvb, tl_get(m, "model.layers.%d.self_attn.kv_b_proj.weight", l), c, H * (nope + vd), dc);
            for (int hh = 0; hh < H; hh++) {
                tl_rope(qt + hh * qhd + nope, dr, t, inv, af);
                double *kt = K + ((size_t)t * H + hh) * qhd;
                memcpy(kt, kvb + hh * (nope + vd), sizeof(double) * nope);
                memcpy(kt + nope, kva + dc, sizeof(double) * dr);
                memcpy(V + ((size_t)t * H + hh) * vd, kvb + hh * (nope + vd) + nope, sizeof(double) * vd);
            }
        }
        for (int t = 0; t < n; t++) {
            for (int hh = 0; hh < H; hh++) {
                const double *qt = q + ((size_t)t * H + hh) * qhd;
                double mx = -INFINITY, z = 0;
                for (int s = 0; s <= t; s++) {
                    const double *ks = K + ((size_t)s * H + hh) * qhd;
                    double d = 0;
                    for (int i = 0; i < qhd; i++) d += qt[i] * ks[i];
                    p[s] = d * scale;
                    mx = fmax(mx, p[s]);
                }
                for (int s = 0; s <= t; s++) { p[s] = exp(p[s] - mx); z += p[s]; }
                for (int i = 0; i < vd; i++) {
                    double a = 0;
                    for (int s = 0; s <= t; s++) a += p[s] / z * V[((size_t)s * H + hh) * vd + i];
                    att[hh * vd + i] = a;
                }
            }
            tl_matvec(ao + (size_t)t * hid, tl_get(m, "model.layers.%d.self_attn.o_proj.weight", l), att, hid, H * vd);
        }
        /* residual after every token has read this layer's input */
        for (size_t i = 0; i < (size_t)n * hid; i++)
            h[i] += ao[i];
        for (int t = 0; t < n; t++) {
            double *ht = h + (size_t)t * hid;
            tl_rms(x, ht, tl_get(m, "model.layers.%d.post_attention_layernorm.weight", l), hid, m->eps);
            if (l < m->first_dense) {
                snprintf(pre, sizeof pre, "model.layers.%d.mlp.", l);
                tl_mlp(m, pre, m->inter, x, y);
                for (int i = 0; i < hid; i++) ht[i] += y[i];
            } else {
                double lg[256], w[16];
                int idx[16];
                tl_matvec(lg, tl_get(m, "model.layers.%d.mlp.gate.weight", l), x, m->experts, hid);
                tl_route(m, lg, m->v3 ? tl_get(m, "model.layers.%d.mlp.gate.e_score_correction_bias", l) : NULL, idx, w);
                for (int i = 0; i < hid; i++) acc[i] = 0;
                for (int j = 0; j < m->k; j++) {
                    snprintf(pre, sizeof pre, "model.layers.%d.mlp.experts.%d.", l, idx[j]);
                    tl_mlp(m, pre, m->moe_inter, x, y);
                    for (int i = 0; i < hid; i++) acc[i] += w[j] * y[i];
                }
                snprintf(pre, sizeof pre, "model.layers.%d.mlp.shared_experts.", l);
                tl_mlp(m, pre, m->shared * m->moe_inter, x, y);
                for (int i = 0; i < hid; i++) ht[i] += acc[i] + y[i];
            }
        }
    }
    for (int t = 0; t < n; t++) {
        tl_rms(x, h + (size_t)t * hid, tl_get(m, "model.norm.weight"), hid, m->eps);
        tl_matvec(logits + (size_t)t * m->vocab, tl_get(m, "lm_head.weight"), x, m->vocab, hid);
    }
    free(h); free(x); free(ao); free(q); free(K); free(V); free(att); free(p); free(y); free(acc);
}

#endif
