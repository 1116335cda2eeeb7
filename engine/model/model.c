/* engine/model/model.c — forward pass of one batched step (see model.h; math: DESIGN.md §5).
 * Reads top to bottom like the paper: embed → layers (attention, MLP/MoE) → norm → lm_head. */
#include "engine/model/model.h"


#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/act.h"
#include "kernels/kv_write.h"
#include "kernels/linear.h"
#include "kernels/merge_attn.h"
#include "kernels/mha_prefill.h"
#include "kernels/mla_attn.h"

/* q_a_layernorm and kv_a_layernorm use eps 1e-6 whatever rms_norm_eps says: both DeepSeek's
 * modeling code and transformers build them with the RMSNorm default (tests/golden/README.md). */
#define NUMLA_LATENT_NORM_EPS 1e-6

/* Below this many bytes of weights a step is a few hundred microseconds of work split over
 * ~100 kernel calls per token; waking an OpenMP team for each costs more than it saves (on a
 * loaded 2-core machine, ~1 ms per region: 800x slower measured on the tiny preset), so small
 * models run on the calling thread. */
#define NUMLA_MODEL_SMALL_WEIGHT_BYTES ((size_t)32 << 20)

/* ---- building blocks ---- */

void numla_rmsnorm(float *y, const float *x, const float *w, int64_t n, double eps)
{
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++)
        ss += (double)x[i] * (double)x[i];
    float r = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (int64_t i = 0; i < n; i++)
        y[i] = w[i] * (x[i] * r);
}

void numla_rope_cos_sin(const numla_model_config *c, int32_t pos, float *cos_sin)
{
    int64_t half = c->qk_rope_head_dim / 2;
    float af = (float)c->rope_attention_factor;
    for (int64_t i = 0; i < half; i++) {
        /* fp32 angle like the reference (positions × fp32 inv_freq). */
        float ang = (float)pos * (float)c->rope_inv_freq[i];
        cos_sin[i] = (float)cos((double)ang) * af;
        cos_sin[half + i] = (float)sin((double)ang) * af;
    }
}

void numla_rope_apply(float *out, const float *x, const float *cos_sin, int64_t dr)
{
    int64_t half = dr / 2;
    for (int64_t i = 0; i < half; i++) {
        float a = x[2 * i], b = x[2 * i + 1], cs = cos_sin[i], sn = cos_sin[half + i];
        out[i] = a * cs - b * sn;
        out[half + i] = b * cs + a * sn;
    }
}

/* Index of the largest of v[0..n) not yet taken (ties: lowest index). */
static int64_t argmax_free(const float *v, const unsigned char *taken, int64_t n)
{
    int64_t best = -1;
    for (int64_t i = 0; i < n; i++)
        if (!taken[i] && (best < 0 || v[i] > v[best]))
            best = i;
    return best;
}

void numla_moe_route(const numla_model_config *c, const float *logits, const float *bias,
                     int32_t *idx, float *wts, float *scratch)
{
    const int64_t E = c->n_routed_experts, k = c->num_experts_per_tok;
    float *s = scratch, *choice = scratch + E;
    if (c->scoring_func == NUMLA_SCORING_FUNC_SOFTMAX) {
        float mx = logits[0];
        for (int64_t e = 1; e < E; e++)
            mx = logits[e] > mx ? logits[e] : mx;
        double sum = 0;
        for (int64_t e = 0; e < E; e++) {
            s[e] = expf(logits[e] - mx);
            sum += s[e];
        }
        for (int64_t e = 0; e < E; e++)
            s[e] = (float)(s[e] / sum);
    } else {
        for (int64_t e = 0; e < E; e++)
            s[e] = 1.0f / (1.0f + expf(-logits[e]));
    }
    for (int64_t e = 0; e < E; e++)
        choice[e] = s[e] + (c->topk_method == NUMLA_TOPK_METHOD_NOAUX_TC && bias ? bias[e] : 0.0f);

    unsigned char taken[1024];
    unsigned char *tk = E <= 1024 ? taken : calloc((size_t)E, 1);
    if (!tk) { /* cannot happen for real configs (E <= 1024); degrade to greedy without groups */
        tk = taken;
    }
    if (c->topk_method != NUMLA_TOPK_METHOD_GREEDY && c->n_group > 1) {
        const int64_t G = c->n_group, per = E / G;
        float gscore[256];
        for (int64_t g = 0; g < G && g < 256; g++) {
            const float *v = choice + g * per;
            if (c->topk_method == NUMLA_TOPK_METHOD_GROUP_LIMITED_GREEDY) {
                float mx = v[0];
                for (int64_t j = 1; j < per; j++)
                    mx = v[j] > mx ? v[j] : mx;
                gscore[g] = mx;
            } else { /* noaux_tc: sum of the top 2 biased scores */
                float a = -INFINITY, b = -INFINITY;
                for (int64_t j = 0; j < per; j++) {
                    if (v[j] > a) {
                        b = a;
                        a = v[j];
                    } else if (v[j] > b) {
                        b = v[j];
                    }
                }
                gscore[g] = a + b;
            }
        }
        unsigned char gtaken[256] = {0};
        for (int64_t r = 0; r < c->topk_group; r++) {
            int64_t g = argmax_free(gscore, gtaken, G);
            gtaken[g] = 1;
        }
        /* Dropped groups: V3 (DeepSeek's inference code, transformers' DeepseekV3) masks with
         * -inf, so only kept groups can be picked even when biased scores are negative; V2's
         * group_limited_greedy masks with 0.0, which is the same for softmax scores > 0. */
        const float masked = c->topk_method == NUMLA_TOPK_METHOD_NOAUX_TC ? -INFINITY : 0.0f;
        for (int64_t g = 0; g < G; g++)
            if (!gtaken[g])
                for (int64_t j = 0; j < per; j++)
                    choice[g * per + j] = masked;
    }
    memset(tk, 0, (size_t)E);
    for (int64_t j = 0; j < k; j++) {
        int64_t e = argmax_free(choice, tk, E);
        tk[e] = 1;
        idx[j] = (int32_t)e;
        /* weights: unbiased scores (V3); for V2 the (masked) choice equals s */
        wts[j] = c->topk_method == NUMLA_TOPK_METHOD_NOAUX_TC ? s[e] : choice[e];
    }
    if (tk != taken)
        free(tk);
    /* V2 (DeepSeek's modeling code): normalise only when k > 1, and then do not scale.
     * V3: normalise whenever norm_topk_prob (k = 1 gives weight 1), then scale. */
    int norm = c->moe_weight_rule == NUMLA_MOE_WEIGHT_RULE_NORM_THEN_SCALE
                   ? c->norm_topk_prob
                   : c->norm_topk_prob && k > 1;
    if (norm) {
        float sum = 0;
        for (int64_t j = 0; j < k; j++)
            sum += wts[j];
        sum += 1e-20f;
        for (int64_t j = 0; j < k; j++)
            wts[j] /= sum;
    }
    if (!norm || c->moe_weight_rule == NUMLA_MOE_WEIGHT_RULE_NORM_THEN_SCALE)
        for (int64_t j = 0; j < k; j++)
            wts[j] *= (float)c->routed_scaling_factor;
}

/* ---- model object ---- */

void numla_model_destroy(numla_model **pm)
{
    if (!pm || !*pm)
        return;
    numla_model *m = *pm;
    float **fs[] = {&m->h, &m->x, &m->qa, &m->q, &m->kva, &m->ckv, &m->kpe, &m->qabs, &m->ctx,
                    &m->o, &m->g, &m->u, &m->moe_out, &m->ex_x, &m->ex_y, &m->router, &m->topk_w,
                    &m->cos_sin, &m->xl, &m->par_x, &m->par_y, &m->par_g, &m->par_u};
    for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++)
        free(*fs[i]);
    free(m->topk_idx);
    free(m->ex_count);
    free(m->ex_cursor);
    free(m->ex_act);
    free(m->route_scratch);
    free(m->ex_list);
    free(m->lin_ws);
    free(m->par_ws);
    free(m->attn_ws);
    free(m->ctx2);
    free(m->lse_pre);
    free(m->lse_new);
    free(m->new_kv);
    free(m->new_tables);
    free(m->pre_lens);
    free(m->new_lens);
    free(m->sub_rows);
    free(m->sub_meta);
    free(m->sub_slots);
    free(m->sub_q);
    free(m->sub_cs);
    free(m->sub_o);
    free(m->xp_lat);
    free(m->xp_kv);
    free(m->xp_k);
    free(m->xp_v);
    free(m->xp_q);
    free(m->xp_seq);
    free(m->xp_ws);
    free(m);
    *pm = NULL;
}

numla_status numla_model_create(const numla_model_weights *w, numla_isa isa, int num_threads,
                                numla_model **out)
{
    *out = NULL;
    numla_model *m = calloc(1, sizeof *m);
    if (!m)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "model: no memory");
    m->w = w;
    m->cfg = w->cfg;
    m->isa = isa;
    m->num_threads = num_threads > 0 ? num_threads : 1;
    m->single_thread_below_bytes = NUMLA_MODEL_SMALL_WEIGHT_BYTES;
    m->isa_linear = m->isa_mla = m->isa_mha = isa;
    m->ex_count = calloc((size_t)(w->cfg.n_routed_experts + 2), sizeof *m->ex_count);
    m->ex_cursor = calloc((size_t)(w->cfg.n_routed_experts + 2), sizeof *m->ex_cursor);
    m->ex_act = calloc((size_t)(w->cfg.n_routed_experts + 2), sizeof *m->ex_act);
    if (!m->ex_count || !m->ex_cursor || !m->ex_act) {
        numla_model_destroy(&m);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "model: no memory");
    }
    *out = m;
    return NUMLA_STATUS_OK;
}

void numla_model_configure(numla_model *m, const numla_model_options *o)
{
    const numla_isa below_amx = numla_isa_min(m->isa, NUMLA_ISA_AVX512BF16);
    m->isa_linear = o->linear_amx ? m->isa : below_amx;
    m->isa_mla = o->mla_amx ? m->isa : below_amx;
    m->isa_mha = o->mha_amx ? m->isa : below_amx;
    m->prefill_form = o->prefill_form;
}

static int grow(void **p, size_t bytes)
{
    void *n = realloc(*p, bytes ? bytes : 1);
    if (!n)
        return 0;
    *p = n;
    return 1;
}

static numla_status ensure_capacity(numla_model *m, int64_t T, int64_t R)
{
    const numla_model_config *c = &m->cfg;
    const numla_shard *sh = &m->w->shard;
    if (T <= m->cap_tokens && R <= T)
        return NUMLA_STATUS_OK;
    int64_t cap = T > R ? T : R;
    if (cap < 2 * m->cap_tokens)
        cap = 2 * m->cap_tokens;
    const size_t n = (size_t)cap, hid = (size_t)c->hidden_size, Hr = (size_t)sh->head_count;
    const size_t dc = (size_t)c->kv_lora_rank, dr = (size_t)c->qk_rope_head_dim;
    size_t inter = (size_t)sh->inter_count;
    if ((size_t)sh->shared_count > inter)
        inter = (size_t)sh->shared_count;
    if ((size_t)c->moe_intermediate_size > inter)
        inter = (size_t)c->moe_intermediate_size;
    const size_t E = (size_t)c->n_routed_experts, k = (size_t)c->num_experts_per_tok;
    int ok = 1;
    ok &= grow((void **)&m->h, n * hid * 4);
    ok &= grow((void **)&m->x, n * hid * 4);
    ok &= grow((void **)&m->qa, n * (size_t)c->q_lora_rank * 4);
    ok &= grow((void **)&m->q, n * Hr * (size_t)c->q_head_dim * 4);
    ok &= grow((void **)&m->kva, n * (dc + dr) * 4);
    ok &= grow((void **)&m->ckv, n * dc * 4);
    ok &= grow((void **)&m->kpe, n * dr * 4);
    ok &= grow((void **)&m->qabs, n * Hr * (dc + dr) * 4);
    ok &= grow((void **)&m->ctx, n * Hr * dc * 4);
    ok &= grow((void **)&m->o, n * Hr * (size_t)c->v_head_dim * 4);
    ok &= grow((void **)&m->g, n * inter * 4);
    ok &= grow((void **)&m->u, n * inter * 4);
    ok &= grow((void **)&m->moe_out, n * hid * 4);
    ok &= grow((void **)&m->ex_x, n * hid * 4);
    ok &= grow((void **)&m->ex_y, n * hid * 4);
    ok &= grow((void **)&m->router, n * (E + 1) * 4);
    ok &= grow((void **)&m->topk_idx, n * (k + 1) * 4);
    ok &= grow((void **)&m->topk_w, n * (k + 1) * 4);
    ok &= grow((void **)&m->ex_list, n * (k + 1) * 4);
    ok &= grow((void **)&m->route_scratch, n * (2 * E + 1) * 4);
    ok &= grow((void **)&m->cos_sin, n * dr * 4);
    ok &= grow((void **)&m->xl, n * hid * 4);
    const size_t pr = n * k < NUMLA_MODEL_PAR_ROWS ? n * k : NUMLA_MODEL_PAR_ROWS, mi = (size_t)c->moe_intermediate_size;
    ok &= grow((void **)&m->par_x, pr * hid * 4);
    ok &= grow((void **)&m->par_y, pr * hid * 4);
    ok &= grow((void **)&m->par_g, pr * (mi ? mi : 1) * 4);
    ok &= grow((void **)&m->par_u, pr * (mi ? mi : 1) * 4);
    if (!ok)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "model: no memory for %lld tokens of scratch",
                   (long long)cap);
    m->cap_tokens = cap;
    return NUMLA_STATUS_OK;
}

static int expand_seq(const numla_model *m, int32_t n, int32_t L);
static int32_t expanded_seqs(const numla_model *m, const numla_step *st);

/* m->sub := the sequences of st that expand_seq() leaves absorbed, as a step of their own
 * (rows compacted in order; m->sub_rows maps them back). Only the fields the absorbed form
 * reads are set. */
static numla_status build_sub_step(numla_model *m, const numla_step *st)
{
    const int64_t B = st->num_seqs, T = st->num_tokens, mb = st->max_blocks_per_seq;
    const int64_t Hr = m->w->shard.head_count, dr = m->cfg.qk_rope_head_dim;
    int ok = 1;
    if (T > m->sub_cap_tokens) {
        ok &= grow((void **)&m->sub_rows, (size_t)T * 4);
        ok &= grow((void **)&m->sub_slots, (size_t)T * 8);
        ok &= grow((void **)&m->sub_q, (size_t)(T * Hr * m->cfg.q_head_dim) * 4);
        ok &= grow((void **)&m->sub_cs, (size_t)(T * dr) * 4);
        ok &= grow((void **)&m->sub_o, (size_t)(T * Hr * m->cfg.v_head_dim) * 4);
        if (ok)
            m->sub_cap_tokens = T;
    }
    const int64_t meta = 2 * B + 1 + B * mb;
    if (ok && meta > m->sub_cap_meta) {
        ok &= grow((void **)&m->sub_meta, (size_t)meta * 4);
        if (ok)
            m->sub_cap_meta = meta;
    }
    if (!ok)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "model: no memory for the absorbed part of a mixed "
                   "step of %lld tokens", (long long)T);
    int32_t *qsl = m->sub_meta, *lens = qsl + B + 1, *tables = lens + B;
    int32_t ba = 0, ta = 0;
    qsl[0] = 0;
    for (int64_t b = 0; b < B; b++) {
        const int32_t q0 = st->query_start_loc[b], n = st->query_start_loc[b + 1] - q0;
        if (expand_seq(m, n, st->seq_lens[b]))
            continue;
        for (int32_t i = 0; i < n; i++) {
            m->sub_rows[ta + i] = q0 + i;
            m->sub_slots[ta + i] = st->slots[q0 + i];
        }
        memcpy(tables + (int64_t)ba * mb, st->block_tables + b * mb, (size_t)mb * 4);
        lens[ba] = st->seq_lens[b];
        ta += n;
        qsl[++ba] = ta;
    }
    m->sub = (numla_step){
        .num_seqs = ba, .num_tokens = ta, .slots = m->sub_slots, .query_start_loc = qsl,
        .seq_lens = lens, .block_tables = tables, .max_blocks_per_seq = st->max_blocks_per_seq,
    };
    return NUMLA_STATUS_OK;
}

/* Scratch of the two-part attention for this step (sizes depend on the step's sequences), the
 * step's attention form (m->split, m->all_expanded; the absorbed sub-step when split), and
 * the per-sequence prefix lengths and new-row block tables every layer reuses. */
static numla_status ensure_step_scratch(numla_model *m, const numla_kv_cache *cache,
                                        const numla_step *st)
{
    const int64_t T = st->num_tokens, B = st->num_seqs, NB = NUMLA_MODEL_NEW_BLOCK;
    const int64_t Hr = m->w->shard.head_count, dc = m->cfg.kv_lora_rank;
    const size_t row_bytes = (size_t)(dc + m->cfg.qk_rope_head_dim) * numla_dtype_size(cache->dtype);
    int64_t nmax = 1, blocks = 0;
    for (int64_t b = 0; b < B; b++) {
        int64_t n = st->query_start_loc[b + 1] - st->query_start_loc[b];
        int64_t nb = (n + NB - 1) / NB;
        nmax = nb > nmax ? nb : nmax;
        blocks += nb;
    }
    int ok = 1;
    if (T > m->cap_seqs) { /* T >= B: sized by tokens, so it grows rarely */
        size_t n = (size_t)T;
        ok &= grow((void **)&m->ctx2, n * (size_t)(Hr * dc) * 4);
        ok &= grow((void **)&m->lse_pre, n * (size_t)Hr * 4);
        ok &= grow((void **)&m->lse_new, n * (size_t)Hr * 4);
        ok &= grow((void **)&m->pre_lens, n * 4);
        ok &= grow((void **)&m->new_lens, n * 4);
        if (ok)
            m->cap_seqs = T;
    }
    if (ok && B * nmax > m->cap_new_tables) {
        ok &= grow((void **)&m->new_tables, (size_t)(B * nmax) * 4);
        if (ok)
            m->cap_new_tables = B * nmax;
    }
    if (ok && (size_t)blocks * (size_t)NB * row_bytes > m->new_kv_bytes) {
        size_t bytes = (size_t)blocks * (size_t)NB * row_bytes * 2;
        ok &= grow(&m->new_kv, bytes);
        if (ok)
            m->new_kv_bytes = bytes;
    }
    if (!ok)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "model: no memory for the attention scratch of %lld "
                   "tokens", (long long)T);
    /* The absorbed form's step: the whole step, or its absorbed sequences compacted. */
    const int32_t ne = expanded_seqs(m, st);
    m->split = ne > 0 && ne < B;
    m->all_expanded = B > 0 && ne == B;
    const numla_step *ab = st;
    if (m->split) {
        NUMLA_CHECK(build_sub_step(m, st));
        ab = &m->sub;
    }
    /* the table stride is cap_new_tables / B: keep every row of the table valid (the
     * sub-step's Ba <= B rows fit in the same table) */
    const int64_t AB = ab->num_seqs;
    const int64_t stride = m->cap_new_tables / (AB > 0 ? AB : 1);
    int32_t next = 0;
    for (int64_t b = 0; b < AB; b++) {
        int32_t n = ab->query_start_loc[b + 1] - ab->query_start_loc[b];
        m->new_lens[b] = n;
        m->pre_lens[b] = ab->seq_lens[b] - n;
        int32_t nb = (n + (int32_t)NB - 1) / (int32_t)NB;
        for (int64_t j = 0; j < stride; j++)
            m->new_tables[b * stride + j] = j < nb ? next + (int32_t)j : next;
        next += nb;
    }
    return NUMLA_STATUS_OK;
}

numla_status numla_model_reduce(numla_model *m, float *buf, int64_t count)
{
    /* With one rank the partial sum is already the total. */
    if (m->w->shard.nranks == 1)
        return NUMLA_STATUS_OK;
    if (!m->reduce)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "model: %d ranks but no allreduce was set (create the "
                   "model through numla_engine_create)", m->w->shard.nranks);
    double t0 = omp_get_wtime();
    NUMLA_CHECK(m->reduce(m->reduce_ctx, buf, count));
    m->reduce_s += omp_get_wtime() - t0;
    m->reduces++;
    return NUMLA_STATUS_OK;
}

/* The level the linear layers run at: with exact_activations at most avx512 (it widens bf16
 * weights and keeps activations fp32 at every M; every level reads the one packed layout). */
static numla_isa lin_isa(const numla_model *m)
{
    return m->exact_activations ? numla_isa_min(m->isa_linear, NUMLA_ISA_AVX512) : m->isa_linear;
}

/* Grow a 64-byte aligned kernel workspace (*buf, *bytes) to at least need bytes; its old
 * contents are not kept. what names it in the error. */
static numla_status grow_workspace(void **buf, size_t *bytes, size_t need, const char *what)
{
    if (need <= *bytes)
        return NUMLA_STATUS_OK;
    free(*buf);
    *buf = aligned_alloc(64, need ? (need + 63) & ~(size_t)63 : 64);
    *bytes = *buf ? need : 0;
    if (!*buf)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "model: no memory for the %s (%zu bytes)", what, need);
    return NUMLA_STATUS_OK;
}

/* Linear calls made one per thread inside our own parallel region (each then runs on its
 * thread alone): nth workspaces of `each` bytes (rounded to 64) in m->par_ws. */
static numla_status par_workspace(numla_model *m, size_t each, int nth, size_t *stride)
{
    *stride = (each + 63) & ~(size_t)63;
    return grow_workspace(&m->par_ws, &m->par_ws_bytes, *stride * (size_t)nth,
                          "per-thread linear workspaces");
}

const char *const numla_model_part_names[NUMLA_MODEL_PART_COUNT] = {
    "embed_norm", "attention", "dense_mlp", "router", "experts", "shared", "reduce", "lm_head"};

/* Charges the time since *t to part p and restarts the clock. */
static void part_tick(numla_model *m, numla_model_part p, double *t)
{
    double now = omp_get_wtime();
    m->part_s[p] += now - *t;
    *t = now;
}

/* y (M, ldy) (+)= x (M, ldx) · Wᵀ, growing the shared workspace outside the kernel. */
static numla_status lin(numla_model *m, const numla_linear_weight *w, int64_t M, const float *x,
                        int64_t ldx, float *y, int64_t ldy, int acc)
{
    if (M == 0 || w->n == 0)
        return NUMLA_STATUS_OK;
    const numla_isa isa = lin_isa(m);
    NUMLA_CHECK(grow_workspace(&m->lin_ws, &m->lin_ws_bytes,
                               numla_linear_workspace_size(isa, w, M, m->num_threads),
                               "linear workspace"));
    double t0 = omp_get_wtime();
    NUMLA_CHECK(numla_linear_forward(isa, w, M, x, ldx, y, ldy, acc, m->lin_ws, m->lin_ws_bytes));
    m->linear_s += omp_get_wtime() - t0;
    m->linear_flops += 2.0 * (double)M * (double)w->n * (double)w->k;
    return NUMLA_STATUS_OK;
}

/* The per-head W_UK / W_UV products: Hr small linears on strided column blocks of x and y
 * (head h reads x + h·xoff, writes y + h·yoff). In decode each is a tiny GEMV/skinny GEMM
 * (Dc x nope): one kernel call per head would open 2·Hr OpenMP regions per layer, so for few
 * rows the heads are split over one team instead, each call running on its thread alone
 * (nested regions are inactive) with its own workspace. With many rows (prefill) the calls are
 * big enough to use the whole team each. */
static numla_status per_head(numla_model *m, const numla_linear_weight *w, int64_t Hr, int64_t T,
                             const float *x, int64_t ldx, int64_t xoff, float *y, int64_t ldy,
                             int64_t yoff)
{
    if (Hr == 0 || T == 0)
        return NUMLA_STATUS_OK;
    if (m->num_threads <= 1 || Hr < 2 || omp_get_max_active_levels() > 1 ||
        T > NUMLA_MODEL_PER_THREAD_ROWS) {
        for (int64_t h = 0; h < Hr; h++)
            NUMLA_CHECK(lin(m, &w[h], T, x + h * xoff, ldx, y + h * yoff, ldy, 0));
        return NUMLA_STATUS_OK;
    }
    const numla_isa isa = lin_isa(m);
    size_t stride;
    NUMLA_CHECK(par_workspace(m, numla_linear_workspace_size(isa, &w[0], T, 1), m->num_threads,
                              &stride));
    double t0 = omp_get_wtime();
    numla_status st = NUMLA_STATUS_OK;
#pragma omp parallel for num_threads(m->num_threads) schedule(static)
    for (int64_t h = 0; h < Hr; h++) {
        const numla_linear_weight *wh = &w[h];
        size_t need = numla_linear_workspace_size(isa, wh, T, 1);
        char *ws = (char *)m->par_ws + (size_t)omp_get_thread_num() * stride;
        numla_status s1 = need > stride
                              ? NUMLA_STATUS_INTERNAL
                              : numla_linear_forward(isa, wh, T, x + h * xoff, ldx, y + h * yoff, ldy,
                                                     0, need ? ws : NULL, need);
        if (s1 != NUMLA_STATUS_OK) {
#pragma omp critical(numla_model_per_head)
            st = s1;
        }
    }
    if (st == NUMLA_STATUS_INTERNAL)
        NUMLA_FAIL(st, "model: per-head weights of different shapes");
    NUMLA_CHECK(st);
    m->linear_s += omp_get_wtime() - t0;
    m->linear_flops += 2.0 * (double)T * (double)w[0].n * (double)w[0].k * (double)Hr;
    return NUMLA_STATUS_OK;
}

/* SiLU-gated MLP slice on rows x (M, hidden), accumulating into y (M, ldy). */
static numla_status mlp(numla_model *m, const numla_mlp_weights *w, int64_t M, const float *x,
                        float *y, int64_t ldy)
{
    const int64_t hid = m->cfg.hidden_size, I = w->inter;
    if (I == 0 || M == 0)
        return NUMLA_STATUS_OK;
    NUMLA_CHECK(lin(m, &w->gate, M, x, hid, m->g, I, 0));
    NUMLA_CHECK(lin(m, &w->up, M, x, hid, m->u, I, 0));
    const int64_t n = M * I;
    const int nt = n > 65536 ? m->num_threads : 1;
#pragma omp parallel num_threads(nt)
    {
        const int64_t i0 = n * omp_get_thread_num() / omp_get_num_threads(),
                      i1 = n * (omp_get_thread_num() + 1) / omp_get_num_threads();
        (void)numla_act_silu_mul(m->isa, i1 - i0, m->g + i0, m->u + i0); /* args valid */
    }
    NUMLA_CHECK(lin(m, &w->down, M, m->g, I, y, ldy, 1));
    return NUMLA_STATUS_OK;
}

static numla_status attention_absorbed(numla_model *m, const numla_layer_weights *lw,
                                       int32_t layer, numla_kv_cache *cache, const numla_step *st,
                                       const float *q, const float *cos_sin, float *o);
static numla_status attention_split(numla_model *m, const numla_layer_weights *lw, int32_t layer,
                                    numla_kv_cache *cache, const numla_step *st);
static numla_status attention_expanded(numla_model *m, const numla_layer_weights *lw,
                                       int32_t layer, numla_kv_cache *cache, const numla_step *st);

static numla_status attention(numla_model *m, const numla_layer_weights *lw, int32_t layer,
                              numla_kv_cache *cache, const numla_step *st)
{
    const numla_model_config *c = &m->cfg;
    const int64_t T = st->num_tokens, hid = c->hidden_size;
    const int64_t Hr = m->w->shard.head_count, qhd = c->q_head_dim;
    const int64_t dc = c->kv_lora_rank, dr = c->qk_rope_head_dim, vd = c->v_head_dim;
    const int64_t qw = Hr * qhd, aw = dc + dr;

    /* q = W_q x, or W_qb · RMSNorm_qa(W_qa x) */
    if (c->q_lora_rank == 0) {
        NUMLA_CHECK(lin(m, &lw->q_proj, T, m->x, hid, m->q, qw, 0));
    } else {
        const int64_t r = c->q_lora_rank;
        NUMLA_CHECK(lin(m, &lw->q_a_proj, T, m->x, hid, m->qa, r, 0));
#pragma omp parallel for num_threads(m->num_threads) if (T > 1)
        for (int64_t t = 0; t < T; t++)
            numla_rmsnorm(m->qa + t * r, m->qa + t * r, lw->q_a_norm, r, NUMLA_LATENT_NORM_EPS);
        NUMLA_CHECK(lin(m, &lw->q_b_proj, T, m->qa, r, m->q, qw, 0));
    }
    /* [c | k_pe] = W_kva x; c' = RMSNorm_kva(c); rope(k_pe) */
    NUMLA_CHECK(lin(m, &lw->kv_a_proj, T, m->x, hid, m->kva, aw, 0));
#pragma omp parallel for num_threads(m->num_threads) if (T > 1)
    for (int64_t t = 0; t < T; t++) {
        numla_rmsnorm(m->ckv + t * dc, m->kva + t * aw, lw->kv_a_norm, dc, NUMLA_LATENT_NORM_EPS);
        numla_rope_apply(m->kpe + t * dr, m->kva + t * aw + dc, m->cos_sin + t * dr, dr);
    }
    numla_kv_write_args kw = {
        .num_tokens = T, .kv_lora_rank = (int32_t)dc, .rope_dim = (int32_t)dr,
        .kv_c = m->ckv, .kv_c_stride = dc, .k_pe = m->kpe, .k_pe_stride = dr,
        .src_dtype = NUMLA_DTYPE_F32, .slot_mapping = st->slots,
        .kv_cache = numla_kv_cache_layer(cache, layer), .kv_dtype = cache->dtype,
        .num_blocks = cache->num_blocks, .block_size = cache->block_size,
    };
    NUMLA_CHECK(numla_concat_and_cache_mla(m->isa, &kw));

    /* Per sequence, the form expand_seq() picks: decode rows (and short chunks over a long
     * prefix) absorbed, the other prefill chunks expanded. A step with both runs each form
     * over its own sequences (ensure_step_scratch set m->split and built the absorbed part). */
    double ta = omp_get_wtime();
    if (m->split)
        NUMLA_CHECK(attention_split(m, lw, layer, cache, st));
    else if (m->all_expanded)
        NUMLA_CHECK(attention_expanded(m, lw, layer, cache, st));
    else
        NUMLA_CHECK(attention_absorbed(m, lw, layer, cache, st, m->q, m->cos_sin, m->o));
    m->attn_s += omp_get_wtime() - ta;

    /* h (+)= W_o · concat(o_h) */
    NUMLA_CHECK(lin(m, &lw->o_proj, T, m->o, Hr * vd, m->h, hid, 1));
    return NUMLA_STATUS_OK;
}

/* A mixed step: the expanded sequences write their rows of m->o directly; the absorbed ones
 * run as the compacted step m->sub over gathered rows of m->q and m->cos_sin, and their
 * output rows are scattered back into m->o. */
static numla_status attention_split(numla_model *m, const numla_layer_weights *lw, int32_t layer,
                                    numla_kv_cache *cache, const numla_step *st)
{
    NUMLA_CHECK(attention_expanded(m, lw, layer, cache, st));
    const int64_t Ta = m->sub.num_tokens, Hr = m->w->shard.head_count;
    const int64_t qw = Hr * m->cfg.q_head_dim, dr = m->cfg.qk_rope_head_dim;
    const int64_t ow = Hr * m->cfg.v_head_dim;
    for (int64_t i = 0; i < Ta; i++) {
        const int64_t t = m->sub_rows[i];
        memcpy(m->sub_q + i * qw, m->q + t * qw, (size_t)qw * sizeof(float));
        memcpy(m->sub_cs + i * dr, m->cos_sin + t * dr, (size_t)dr * sizeof(float));
    }
    NUMLA_CHECK(attention_absorbed(m, lw, layer, cache, &m->sub, m->sub_q, m->sub_cs, m->sub_o));
    for (int64_t i = 0; i < Ta; i++)
        memcpy(m->o + (int64_t)m->sub_rows[i] * ow, m->sub_o + i * ow, (size_t)ow * sizeof(float));
    return NUMLA_STATUS_OK;
}

/* Absorbed form (DESIGN.md §5) over every row of the step st: reads q (T, H_r · q_head_dim)
 * and cos_sin (T, Dr), writes o (T, H_r · v). */
static numla_status attention_absorbed(numla_model *m, const numla_layer_weights *lw,
                                       int32_t layer, numla_kv_cache *cache, const numla_step *st,
                                       const float *q, const float *cos_sin, float *o)
{
    const numla_model_config *c = &m->cfg;
    const int64_t T = st->num_tokens;
    const int64_t Hr = m->w->shard.head_count, qhd = c->q_head_dim, nope = c->qk_nope_head_dim;
    const int64_t dc = c->kv_lora_rank, dr = c->qk_rope_head_dim, vd = c->v_head_dim;
    const int64_t qw = Hr * qhd, aw = dc + dr;

    /* Absorbed queries: q̃_h = W_UK,hᵀ q_nope,h, then rope(q_pe,h). */
    NUMLA_CHECK(per_head(m, lw->uk_t, Hr, T, q, qw, qhd, m->qabs, Hr * aw, aw));
#pragma omp parallel for num_threads(m->num_threads) collapse(2) if (T * Hr > 1)
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < Hr; h++)
            numla_rope_apply(m->qabs + (t * Hr + h) * aw + dc, q + t * qw + h * qhd + nope,
                             cos_sin + t * dr, dr);

    /* Attention in two parts merged by LSE (DESIGN.md §4): the cached prefix of each sequence
     * (every new query sees all of it) and, causally, the step's own new rows, copied from the
     * paged cache into per-sequence blocks so the numbers match whatever chunking wrote them. */
    const int32_t B = st->num_seqs, NB = NUMLA_MODEL_NEW_BLOCK;
    const size_t row_bytes = (size_t)aw * numla_dtype_size(cache->dtype);
    const char *layer_kv = numla_kv_cache_layer(cache, layer);
    int32_t nmax = (int32_t)(m->cap_new_tables / (B > 0 ? B : 1));
#pragma omp parallel for num_threads(m->num_threads) if (T > 16)
    for (int32_t b = 0; b < B; b++) {
        int32_t q0 = st->query_start_loc[b], n = st->query_start_loc[b + 1] - q0;
        int32_t blk0 = m->new_tables[(int64_t)b * nmax];
        for (int32_t i = 0; i < n; i++) {
            char *dst = (char *)m->new_kv + ((size_t)blk0 * NB + (size_t)i) * row_bytes;
            int64_t slot = st->slots[q0 + i];
            if (slot >= 0)
                memcpy(dst, layer_kv + (size_t)slot * row_bytes, row_bytes);
            else
                memset(dst, 0, row_bytes); /* padding: never written to the cache */
        }
    }
    numla_mla_attn_args pre = {
        .num_seqs = B, .num_heads = (int32_t)Hr, .kv_lora_rank = (int32_t)dc,
        .rope_dim = (int32_t)dr, .block_size = cache->block_size, .num_blocks = cache->num_blocks,
        .max_blocks_per_seq = st->max_blocks_per_seq,
        .q = m->qabs, .q_dtype = NUMLA_DTYPE_F32,
        .kv_cache = layer_kv, .kv_dtype = cache->dtype,
        .block_tables = st->block_tables, .seq_lens = m->pre_lens,
        .query_start_loc = st->query_start_loc, .causal = 0,
        .scale = (float)c->softmax_scale, .out = m->ctx, .out_dtype = NUMLA_DTYPE_F32,
        .lse = m->lse_pre,
    };
    numla_mla_attn_args cur = pre;
    cur.block_size = NB;
    cur.num_blocks = (int64_t)(m->new_kv_bytes / row_bytes / NB);
    cur.max_blocks_per_seq = nmax;
    cur.kv_cache = m->new_kv;
    cur.block_tables = m->new_tables;
    cur.seq_lens = m->new_lens;
    cur.causal = 1;
    cur.out = m->ctx2;
    cur.lse = m->lse_new;
    size_t need = numla_mla_attn_workspace_size(m->isa_mla, &pre, m->num_threads);
    size_t need2 = numla_mla_attn_workspace_size(m->isa_mla, &cur, m->num_threads);
    NUMLA_CHECK(grow_workspace(&m->attn_ws, &m->attn_ws_bytes, need2 > need ? need2 : need,
                               "attention workspace"));
    double tk = omp_get_wtime();
    NUMLA_CHECK(numla_mla_attn(m->isa_mla, &pre, m->attn_ws, m->attn_ws_bytes));
    NUMLA_CHECK(numla_mla_attn(m->isa_mla, &cur, m->attn_ws, m->attn_ws_bytes));
    NUMLA_CHECK(numla_merge_attn_states(m->isa, T * Hr, (int32_t)dc, m->ctx, NULL, m->ctx,
                                        m->lse_pre, m->ctx2, m->lse_new));
    m->attn_kernel_s += omp_get_wtime() - tk;

    /* o_h = W_UV,h · ctx_h */
    NUMLA_CHECK(per_head(m, lw->uv, Hr, T, m->ctx, Hr * dc, dc, o, Hr * vd, vd));
    return NUMLA_STATUS_OK;
}

/* Does a sequence with n new tokens and L keys after the step take the expanded form? (see
 * numla_prefill_form). AUTO compares the two forms' extra work: the expanded form runs kv_b
 * over the P = L - n prefix rows the absorbed form never expands, and saves a fixed time per
 * causal (query, key) pair; it wins when pairs > P · NUMLA_MODEL_EXPAND_PAIRS_PER_ROW. */
static int expand_seq(const numla_model *m, int32_t n, int32_t L)
{
    if (n < 2) /* decode rows stay absorbed */
        return 0;
    switch (m->prefill_form) {
    case NUMLA_PREFILL_FORM_ABSORBED: return 0;
    case NUMLA_PREFILL_FORM_EXPANDED: return 1;
    default: {
        if (m->isa < NUMLA_ISA_AVX512) /* mha_prefill has no vector variant below AVX-512 */
            return 0;
        const int64_t P = (int64_t)L - n;
        const int64_t pairs = (int64_t)n * P + (int64_t)n * (n + 1) / 2;
        return pairs > P * (int64_t)NUMLA_MODEL_EXPAND_PAIRS_PER_ROW;
    }
    }
}

static int32_t expanded_seqs(const numla_model *m, const numla_step *st)
{
    int32_t k = 0;
    for (int32_t b = 0; b < st->num_seqs; b++)
        k += expand_seq(m, st->query_start_loc[b + 1] - st->query_start_loc[b], st->seq_lens[b]);
    return k;
}

/* Expanded form (DESIGN.md §5) for the sequences expand_seq() picks: every key row of such a
 * sequence (cached prefix and this step's rows, read back from the paged cache so the numbers
 * match the absorbed form's) is expanded by kv_b_proj into per-head [k_nope | v] in one GEMM,
 * k = [k_nope | rope(k_pe)], q = [q_nope | rope(q_pe)], and numla_mha_prefill writes the
 * sequences' rows of m->o (T, H_r · v) directly. */
static numla_status attention_expanded(numla_model *m, const numla_layer_weights *lw,
                                       int32_t layer, numla_kv_cache *cache, const numla_step *st)
{
    const numla_model_config *c = &m->cfg;
    const int64_t T = st->num_tokens, B = st->num_seqs;
    const int64_t Hr = m->w->shard.head_count, qhd = c->q_head_dim, nope = c->qk_nope_head_dim;
    const int64_t dc = c->kv_lora_rank, dr = c->qk_rope_head_dim, vd = c->v_head_dim;
    const int64_t aw = dc + dr, kvw = Hr * (nope + vd);
    if (Hr == 0)
        return NUMLA_STATUS_OK;
    int64_t K = 0, Te = 0;
    for (int64_t b = 0; b < B; b++) {
        int32_t n = st->query_start_loc[b + 1] - st->query_start_loc[b];
        if (expand_seq(m, n, st->seq_lens[b])) {
            K += st->seq_lens[b];
            Te += n;
        }
    }
    int ok = 1;
    if (K > m->xp_cap_keys) {
        int64_t cap = K > 2 * m->xp_cap_keys ? K : 2 * m->xp_cap_keys;
        ok &= grow((void **)&m->xp_lat, (size_t)(cap * aw) * 4);
        ok &= grow((void **)&m->xp_kv, (size_t)(cap * kvw) * 4);
        ok &= grow((void **)&m->xp_k, (size_t)(cap * Hr * qhd) * 4);
        ok &= grow((void **)&m->xp_v, (size_t)(cap * Hr * vd) * 4);
        if (ok)
            m->xp_cap_keys = cap;
    }
    if (ok && T > m->xp_cap_tokens) {
        ok &= grow((void **)&m->xp_q, (size_t)(T * Hr * qhd) * 4);
        if (ok)
            m->xp_cap_tokens = T;
    }
    if (ok && B > m->xp_cap_seqs) {
        ok &= grow((void **)&m->xp_seq, (size_t)(4 * B) * 4);
        if (ok)
            m->xp_cap_seqs = B;
    }
    if (!ok)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "model: no memory for the expanded attention of %lld "
                   "key rows", (long long)K);
    int32_t *q_start = m->xp_seq, *q_len = q_start + B, *k_start = q_len + B, *prefix = k_start + B;
    int32_t ne = 0, k0 = 0;
    for (int32_t b = 0; b < (int32_t)B; b++) {
        int32_t n = st->query_start_loc[b + 1] - st->query_start_loc[b];
        if (!expand_seq(m, n, st->seq_lens[b]))
            continue;
        q_start[ne] = st->query_start_loc[b];
        q_len[ne] = n;
        k_start[ne] = k0;
        prefix[ne] = st->seq_lens[b] - n;
        k0 += st->seq_lens[b];
        ne++;
    }
    /* latent rows: the prefix through the block table, the new rows through their slots (a
     * padding slot was never written: zeros, as in the absorbed form) */
    const char *layer_kv = numla_kv_cache_layer(cache, layer);
    const numla_dtype kdt = cache->dtype;
    const int32_t bs = cache->block_size;
    for (int32_t e = 0, b = 0; b < (int32_t)B; b++) {
        int32_t n = st->query_start_loc[b + 1] - st->query_start_loc[b];
        if (!expand_seq(m, n, st->seq_lens[b]))
            continue;
        const int32_t L = st->seq_lens[b], P = L - n;
        const int32_t *table = st->block_tables + (int64_t)b * st->max_blocks_per_seq;
        float *lat = m->xp_lat + (int64_t)k_start[e] * aw;
#pragma omp parallel for num_threads(m->num_threads) schedule(static) if (L > 64)
        for (int32_t t = 0; t < L; t++) {
            int64_t slot = t < P ? (int64_t)table[t / bs] * bs + t % bs
                                 : st->slots[st->query_start_loc[b] + (t - P)];
            float *dst = lat + (int64_t)t * aw;
            if (slot < 0) {
                memset(dst, 0, (size_t)aw * sizeof *dst);
                continue;
            }
            const char *row = layer_kv + (size_t)slot * (size_t)aw * numla_dtype_size(kdt);
            for (int64_t d = 0; d < aw; d++)
                dst[d] = numla_load_f32(row, kdt, (size_t)d);
        }
        e++;
    }
    /* [k_nope | v] per head for every key row: one GEMM (K, Dc) x (Dc, H_r · (nope + v)) */
    NUMLA_CHECK(lin(m, &lw->kv_b, K, m->xp_lat, aw, m->xp_kv, kvw, 0));
    const int64_t qhw = Hr * qhd, vw = Hr * vd;
#pragma omp parallel for num_threads(m->num_threads) schedule(static) if (K > 64)
    for (int64_t r = 0; r < K; r++)
        for (int64_t h = 0; h < Hr; h++) {
            const float *src = m->xp_kv + r * kvw + h * (nope + vd);
            float *kd = m->xp_k + r * qhw + h * qhd;
            memcpy(kd, src, (size_t)nope * sizeof *kd);
            memcpy(kd + nope, m->xp_lat + r * aw + dc, (size_t)dr * sizeof *kd);
            memcpy(m->xp_v + r * vw + h * vd, src + nope, (size_t)vd * sizeof *kd);
        }
    /* q = [q_nope | rope(q_pe)] for the expanded sequences' rows */
    const int64_t qw = Hr * qhd;
    for (int32_t e = 0; e < ne; e++) {
#pragma omp parallel for num_threads(m->num_threads) schedule(static) if (q_len[e] > 16)
        for (int32_t i = 0; i < q_len[e]; i++) {
            const int64_t t = (int64_t)q_start[e] + i;
            for (int64_t h = 0; h < Hr; h++) {
                const float *src = m->q + t * qw + h * qhd;
                float *qd = m->xp_q + t * qhw + h * qhd;
                memcpy(qd, src, (size_t)nope * sizeof *qd);
                numla_rope_apply(qd + nope, src + nope, m->cos_sin + t * dr, dr);
            }
        }
    }
    numla_mha_prefill_args a = {
        .num_seqs = ne, .num_heads = (int32_t)Hr, .qk_dim = (int32_t)qhd, .v_dim = (int32_t)vd,
        .q_start = q_start, .q_len = q_len, .k_start = k_start, .prefix = prefix,
        .scale = (float)c->softmax_scale,
        .q = m->xp_q, .q_stride = qhw, .k = m->xp_k, .k_stride = qhw,
        .v = m->xp_v, .v_stride = vw, .out = m->o, .out_stride = vw, .lse = NULL,
    };
    NUMLA_CHECK(grow_workspace(&m->xp_ws, &m->xp_ws_bytes,
                               numla_mha_prefill_workspace_size(m->isa_mha, &a, omp_get_max_threads()),
                               "mha_prefill workspace"));
    double tk = omp_get_wtime();
    NUMLA_CHECK(numla_mha_prefill(m->isa_mha, &a, m->xp_ws, m->xp_ws_bytes));
    m->attn_kernel_s += omp_get_wtime() - tk;
    m->expanded_tokens += Te;
    return NUMLA_STATUS_OK;
}

/* Decode (few rows per expert): one expert per thread at a time, each expert's three linears
 * on its thread alone (with its own workspace), instead of 3 team-wide kernel calls per expert
 * (an OpenMP region each). Outputs are added to h afterwards in expert order, so the numbers
 * are those of the one-expert-at-a-time path (a linear's outputs do not depend on how its rows
 * are split over threads). Returns 0 (nothing done) when the path does not apply; else 1 with
 * *st set. cnt: (ne + 1) prefix counts into m->ex_list. */
static int moe_experts_parallel(numla_model *m, const numla_layer_weights *lw, int64_t T,
                                const int32_t *cnt, numla_status *st, int *shared_up)
{
    /* The shared experts' gate and up projections (into m->g) join the same region as one more
     * job, the largest, taken first; their down projection (accumulating into h after the
     * routed outputs, as the serial path does) is left to the caller when *shared_up is 1. */
    const numla_mlp_weights *sw = &lw->shared;
    const int sh_job = sw->inter > 0 && T <= NUMLA_MODEL_PER_THREAD_ROWS;
    *shared_up = 0;
    const numla_shard *sh = &m->w->shard;
    const int64_t hid = m->cfg.hidden_size, k = m->cfg.num_experts_per_tok;
    const int64_t ne = sh->expert_count, I = m->cfg.moe_intermediate_size;
    const int64_t rows = cnt[ne];
    if (m->num_threads <= 1 || rows < 2 || rows > NUMLA_MODEL_PAR_ROWS ||
        omp_get_max_active_levels() > 1)
        return 0;
    int32_t *act = m->ex_act, na = 0; /* active local experts */
    size_t ws_max = 0;
    const numla_isa isa = lin_isa(m);
    for (int64_t e = 0; e < ne; e++) {
        int64_t n = cnt[e + 1] - cnt[e];
        if (n == 0)
            continue;
        const numla_mlp_weights *w = &lw->experts[e];
        if (w->inter != I)
            return 0;
        const numla_linear_weight *ws3[3] = {&w->gate, &w->up, &w->down};
        for (int j = 0; j < 3; j++) {
            size_t need = numla_linear_workspace_size(isa, ws3[j], n, 1);
            ws_max = need > ws_max ? need : ws_max;
        }
        act[na++] = (int32_t)e;
    }
    if (sh_job) {
        const numla_linear_weight *ws2[2] = {&sw->gate, &sw->up};
        for (int j = 0; j < 2; j++) {
            size_t need = numla_linear_workspace_size(isa, ws2[j], T, 1);
            ws_max = need > ws_max ? need : ws_max;
        }
    }
    size_t stride;
    *st = par_workspace(m, ws_max, m->num_threads, &stride);
    if (*st != NUMLA_STATUS_OK)
        return 1;
    double t0 = omp_get_wtime();
    numla_status bad = NUMLA_STATUS_OK;
#pragma omp parallel for num_threads(m->num_threads) schedule(dynamic, 1)
    for (int32_t jj = 0; jj < na + sh_job; jj++) {
        void *ws = (char *)m->par_ws + (size_t)omp_get_thread_num() * stride;
        if (sh_job && jj == 0) {
            const int64_t Is = sw->inter;
            numla_status s1 = numla_linear_forward(isa, &sw->gate, T, m->x, hid, m->g, Is, 0,
                                                   ws, stride);
            if (s1 == NUMLA_STATUS_OK)
                s1 = numla_linear_forward(isa, &sw->up, T, m->x, hid, m->u, Is, 0, ws, stride);
            (void)numla_act_silu_mul(m->isa, T * Is, m->g, m->u); /* args valid */
            if (s1 != NUMLA_STATUS_OK) {
#pragma omp critical(numla_model_experts)
                bad = s1;
            }
            continue;
        }
        const int32_t j = jj - sh_job;
        const int64_t e = act[j], r0 = cnt[e], n = cnt[e + 1] - cnt[e];
        const numla_mlp_weights *w = &lw->experts[e];
        float *g = m->par_g + r0 * I, *u = m->par_u + r0 * I, *y = m->par_y + r0 * hid;
        float *x = m->par_x + r0 * hid;
        for (int64_t r = 0; r < n; r++) /* this expert's tokens, gathered on its thread */
            memcpy(x + r * hid, m->x + (m->ex_list[r0 + r] / k) * hid, (size_t)hid * sizeof(float));
        numla_status s1 = numla_linear_forward(isa, &w->gate, n, x, hid, g, I, 0, ws, stride);
        if (s1 == NUMLA_STATUS_OK)
            s1 = numla_linear_forward(isa, &w->up, n, x, hid, u, I, 0, ws, stride);
        (void)numla_act_silu_mul(m->isa, n * I, g, u); /* args valid */
        if (s1 == NUMLA_STATUS_OK)
            s1 = numla_linear_forward(isa, &w->down, n, g, I, y, hid, 0, ws, stride);
        if (s1 != NUMLA_STATUS_OK) {
#pragma omp critical(numla_model_experts)
            bad = s1;
        }
    }
    m->linear_s += omp_get_wtime() - t0;
    m->linear_flops += 6.0 * (double)rows * (double)I * (double)hid +
                       (sh_job ? 4.0 * (double)T * (double)sw->inter * (double)hid : 0.0);
    *st = bad;
    *shared_up = sh_job;
    if (bad != NUMLA_STATUS_OK)
        return 1;
    /* Rows are added in expert order, as the one-expert-at-a-time path does; the team splits
     * the hidden columns, so every sum keeps that order. */
#pragma omp parallel num_threads(m->num_threads) if (rows * hid >= 65536)
    {
        const int nth = omp_get_num_threads(), ith = omp_get_thread_num();
        const int64_t c0 = hid * ith / nth, c1 = hid * (ith + 1) / nth;
        for (int64_t r = 0; r < rows; r++) {
            const float wgt = m->topk_w[m->ex_list[r]];
            float *dst = m->h + (m->ex_list[r] / k) * hid;
            const float *src = m->par_y + r * hid;
            for (int64_t i = c0; i < c1; i++)
                dst[i] += wgt * src[i];
        }
    }
    return 1;
}

static numla_status moe(numla_model *m, const numla_layer_weights *lw, int64_t T)
{
    const numla_model_config *c = &m->cfg;
    const numla_shard *sh = &m->w->shard;
    const int64_t hid = c->hidden_size, E = c->n_routed_experts, k = c->num_experts_per_tok;
    double tp = omp_get_wtime();

    /* Router in fp32 (every rank computes the identical routing). */
    NUMLA_CHECK(lin(m, &lw->router, T, m->x, hid, m->router, E, 0));
    float *scr = m->route_scratch;
#pragma omp parallel for num_threads(m->num_threads) if (T > 1)
    for (int64_t t = 0; t < T; t++)
        numla_moe_route(c, m->router + t * E, lw->router_bias, m->topk_idx + t * k,
                        m->topk_w + t * k, scr + t * 2 * E);

    /* Group (token, j) pairs by local expert so each expert's weights stream once. */
    const int64_t ne = sh->expert_count, e0 = sh->expert_begin;
    int32_t *cnt = m->ex_count;
    memset(cnt, 0, (size_t)(ne + 1) * sizeof *cnt);
    for (int64_t i = 0; i < T * k; i++) {
        int64_t e = m->topk_idx[i] - e0;
        if (e >= 0 && e < ne)
            cnt[e + 1]++;
    }
    for (int64_t e = 0; e < ne; e++)
        cnt[e + 1] += cnt[e];
    int32_t *cursor = m->ex_cursor;
    memcpy(cursor, cnt, (size_t)(ne + 1) * sizeof *cursor);
    for (int64_t i = 0; i < T * k; i++) {
        int64_t e = m->topk_idx[i] - e0;
        if (e >= 0 && e < ne)
            m->ex_list[cursor[e]++] = (int32_t)i;
    }

    part_tick(m, NUMLA_MODEL_PART_ROUTER, &tp);

    numla_status s = NUMLA_STATUS_OK;
    int shared_up = 0;
    if (moe_experts_parallel(m, lw, T, cnt, &s, &shared_up)) {
        NUMLA_CHECK(s);
        part_tick(m, NUMLA_MODEL_PART_EXPERTS, &tp);
        if (shared_up)
            NUMLA_CHECK(lin(m, &lw->shared.down, T, m->g, lw->shared.inter, m->h, hid, 1));
        else
            NUMLA_CHECK(mlp(m, &lw->shared, T, m->x, m->h, hid));
        part_tick(m, NUMLA_MODEL_PART_SHARED, &tp);
        return NUMLA_STATUS_OK;
    }
    for (int64_t e = 0; e < ne && s == NUMLA_STATUS_OK; e++) {
        int64_t n = cnt[e + 1] - cnt[e];
        if (n == 0)
            continue;
        const int32_t *list = m->ex_list + cnt[e];
        for (int64_t r = 0; r < n; r++)
            memcpy(m->ex_x + r * hid, m->x + (list[r] / k) * hid, (size_t)hid * sizeof(float));
        memset(m->ex_y, 0, (size_t)(n * hid) * sizeof(float));
        s = mlp(m, &lw->experts[e], n, m->ex_x, m->ex_y, hid);
        if (s != NUMLA_STATUS_OK)
            break;
        for (int64_t r = 0; r < n; r++) {
            float wgt = m->topk_w[list[r]];
            float *dst = m->h + (list[r] / k) * hid;
            const float *src = m->ex_y + r * hid;
            for (int64_t i = 0; i < hid; i++)
                dst[i] += wgt * src[i];
        }
    }
    NUMLA_CHECK(s);
    part_tick(m, NUMLA_MODEL_PART_EXPERTS, &tp);
    NUMLA_CHECK(mlp(m, &lw->shared, T, m->x, m->h, hid));
    part_tick(m, NUMLA_MODEL_PART_SHARED, &tp);
    return NUMLA_STATUS_OK;
}

static numla_status check_step(const numla_model *m, const numla_step *st)
{
    if (st->num_seqs < 1 || st->num_tokens < 1 || !st->query_start_loc ||
        st->query_start_loc[0] != 0 || st->query_start_loc[st->num_seqs] != st->num_tokens)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "step: %d sequences / %d tokens do not match "
                   "query_start_loc", st->num_seqs, st->num_tokens);
    for (int32_t b = 0; b < st->num_seqs; b++) {
        int32_t n = st->query_start_loc[b + 1] - st->query_start_loc[b];
        if (n < 1 || st->seq_lens[b] < n)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "step: sequence %d has %d new tokens and "
                       "seq_len %d", b, n, st->seq_lens[b]);
    }
    for (int32_t t = 0; t < st->num_tokens; t++)
        if (st->tokens[t] < 0 || st->tokens[t] >= m->cfg.vocab_size)
            NUMLA_FAIL(NUMLA_STATUS_OUT_OF_RANGE, "step: token %d outside the vocabulary (%lld)",
                       st->tokens[t], (long long)m->cfg.vocab_size);
    for (int32_t r = 0; r < st->num_logit_rows; r++)
        if (st->logit_rows[r] < 0 || st->logit_rows[r] >= st->num_tokens)
            NUMLA_FAIL(NUMLA_STATUS_OUT_OF_RANGE, "step: logit row %d outside the step",
                       st->logit_rows[r]);
    return NUMLA_STATUS_OK;
}

static numla_status forward_impl(numla_model *m, numla_kv_cache *cache, const numla_step *st,
                                 float *logits)
{
    const numla_model_config *c = &m->cfg;
    const numla_model_weights *w = m->w;
    NUMLA_CHECK(check_step(m, st));
    /* The kernels open their own parallel regions with the OpenMP default team size; size
     * their workspaces (and our loops) by that. */
    m->num_threads = omp_get_max_threads();
    if (cache->kv_lora_rank != c->kv_lora_rank || cache->rope_dim != c->qk_rope_head_dim ||
        cache->num_layers < c->num_hidden_layers)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "model: KV cache geometry does not match the model");
    const int64_t T = st->num_tokens, hid = c->hidden_size, dr = c->qk_rope_head_dim;
    NUMLA_CHECK(ensure_capacity(m, T, st->num_logit_rows));
    NUMLA_CHECK(ensure_step_scratch(m, cache, st));
    const int lead = w->shard.rank == 0; /* adds the residual before the reduce (DESIGN.md §2) */

    double tp = omp_get_wtime();
    /* embedding (replicated) and per-token RoPE tables shared by every layer */
#pragma omp parallel for num_threads(m->num_threads) if (T > 1)
    for (int64_t t = 0; t < T; t++) {
        for (int64_t i = 0; i < hid; i++)
            m->h[t * hid + i] = numla_load_f32(w->embed, w->embed_dtype,
                                               (size_t)st->tokens[t] * (size_t)hid + (size_t)i);
        numla_rope_cos_sin(c, st->positions[t], m->cos_sin + t * dr);
    }

    for (int32_t l = 0; l < c->num_hidden_layers; l++) {
        const numla_layer_weights *lw = &w->layers[l];
#pragma omp parallel for num_threads(m->num_threads) if (T > 1)
        for (int64_t t = 0; t < T; t++)
            numla_rmsnorm(m->x + t * hid, m->h + t * hid, lw->input_norm, hid, c->rms_norm_eps);
        if (!lead)
            memset(m->h, 0, (size_t)(T * hid) * sizeof(float));
        part_tick(m, NUMLA_MODEL_PART_EMBED_NORM, &tp);
        NUMLA_CHECK(attention(m, lw, l, cache, st));
        part_tick(m, NUMLA_MODEL_PART_ATTENTION, &tp);
        NUMLA_CHECK(numla_model_reduce(m, m->h, T * hid));
        part_tick(m, NUMLA_MODEL_PART_REDUCE, &tp);

#pragma omp parallel for num_threads(m->num_threads) if (T > 1)
        for (int64_t t = 0; t < T; t++)
            numla_rmsnorm(m->x + t * hid, m->h + t * hid, lw->post_attn_norm, hid,
                          c->rms_norm_eps);
        if (!lead)
            memset(m->h, 0, (size_t)(T * hid) * sizeof(float));
        part_tick(m, NUMLA_MODEL_PART_EMBED_NORM, &tp);
        if (lw->is_moe) {
            NUMLA_CHECK(moe(m, lw, T)); /* ticks its own parts */
            tp = omp_get_wtime();
        } else {
            NUMLA_CHECK(mlp(m, &lw->dense, T, m->x, m->h, hid));
            part_tick(m, NUMLA_MODEL_PART_DENSE_MLP, &tp);
        }
        NUMLA_CHECK(numla_model_reduce(m, m->h, T * hid));
        part_tick(m, NUMLA_MODEL_PART_REDUCE, &tp);
        if (m->hook)
            m->hook(m->hook_ctx, l, m->h, (int32_t)T, hid);
    }

    const int64_t R = st->num_logit_rows;
    for (int64_t r = 0; r < R; r++)
        numla_rmsnorm(m->xl + r * hid, m->h + (int64_t)st->logit_rows[r] * hid, w->final_norm,
                      hid, c->rms_norm_eps);
    NUMLA_CHECK(lin(m, &w->lm_head, R, m->xl, hid, logits, w->shard.vocab_count, 0));
    part_tick(m, NUMLA_MODEL_PART_LM_HEAD, &tp);
    return NUMLA_STATUS_OK;
}


numla_status numla_model_forward(numla_model *m, numla_kv_cache *cache, const numla_step *st,
                                 float *logits)
{
    int team = omp_get_max_threads();
    int small = m->w->loaded_bytes < m->single_thread_below_bytes && team > 1;
    if (small)
        omp_set_num_threads(1);
    numla_status s = forward_impl(m, cache, st, logits);
    if (small)
        omp_set_num_threads(team);
    if (s != NUMLA_STATUS_OK)
        numla_error_frame(__FILE__, __LINE__, __func__);
    return s;
}
