/* engine/model/moe.c — the MoE block (docs/design.md §5): the router (numla_model_moe_route), the
 * grouping of (token, expert) rows by local expert, the routed experts (one per thread in
 * decode, one at a time on the team in prefill) and the shared experts. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "engine/model/model_internal.h"
#include "kernels/act.h"
#include "kernels/linear.h"

/* Index of the largest of v[0..n) not yet taken (ties: lowest index); -1 when all are taken. */
static int64_t argmax_free(const float *v, const unsigned char *taken, int64_t n)
{
    int64_t best = -1;
    for (int64_t i = 0; i < n; i++)
        if (!taken[i] && (best < 0 || v[i] > v[best]))
            best = i;
    return best;
}

/* numla_model_moe_route's scratch: s, choice (E floats each), gscore (G floats), then the taken
 * flags of experts (E bytes) and groups (G bytes). */
static int64_t route_groups(const numla_model_config *c)
{
    return c->n_group > 1 ? c->n_group : 1;
}

size_t numla_model_moe_route_scratch_bytes(const numla_model_config *c)
{
    const size_t E = (size_t)c->n_routed_experts, G = (size_t)route_groups(c);
    return (2 * E + G) * sizeof(float) + E + G;
}

/* Scores from router logits: softmax or sigmoid (s), and the choice scores (+ bias for
 * noaux_tc). */
static void route_scores(const numla_model_config *c, const float *logits, const float *bias,
                         float *s, float *choice)
{
    const int64_t E = c->n_routed_experts;
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
}

/* Group-limited routing: keep the topk_group best groups (V2: by their best score; V3: by the
 * sum of their two best biased scores) and mask the other groups' choice scores. */
static void route_mask_groups(const numla_model_config *c, float *choice, float *gscore,
                              unsigned char *gtaken)
{
    const int64_t E = c->n_routed_experts, G = c->n_group, per = E / G;
    for (int64_t g = 0; g < G; g++) {
        const float *v = choice + g * per;
        if (c->topk_method == NUMLA_TOPK_METHOD_GROUP_LIMITED_GREEDY) {
            float mx = per > 0 ? v[0] : -INFINITY;
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
    memset(gtaken, 0, (size_t)G);
    for (int64_t r = 0; r < c->topk_group; r++) {
        int64_t g = argmax_free(gscore, gtaken, G);
        if (g < 0)
            break;
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

/* The routing weights' normalisation and scaling. V2 (DeepSeek's modeling code): normalise
 * only when k > 1, and then do not scale. V3: normalise whenever norm_topk_prob (k = 1 gives
 * weight 1), then scale. */
static void route_weights_scale(const numla_model_config *c, float *wts)
{
    const int64_t k = c->num_experts_per_tok;
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

void numla_model_moe_route(const numla_model_config *c, const float *logits, const float *bias,
                     int32_t *idx, float *wts, void *scratch)
{
    const int64_t E = c->n_routed_experts, k = c->num_experts_per_tok, G = route_groups(c);
    float *s = scratch, *choice = s + E, *gscore = choice + E;
    unsigned char *taken = (unsigned char *)(gscore + G), *gtaken = taken + E;
    route_scores(c, logits, bias, s, choice);
    if (c->topk_method != NUMLA_TOPK_METHOD_GREEDY && c->n_group > 1)
        route_mask_groups(c, choice, gscore, gtaken);
    memset(taken, 0, (size_t)E);
    for (int64_t j = 0; j < k; j++) {
        int64_t e = argmax_free(choice, taken, E);
        if (e < 0) { /* k > E: the rest routes nowhere */
            idx[j] = -1;
            wts[j] = 0.0f;
            continue;
        }
        taken[e] = 1;
        idx[j] = (int32_t)e;
        /* weights: unbiased scores (V3); for V2 the (masked) choice equals s */
        wts[j] = c->topk_method == NUMLA_TOPK_METHOD_NOAUX_TC ? s[e] : choice[e];
    }
    route_weights_scale(c, wts);
}

/* Decode (few rows per expert): one expert per thread at a time, each expert's three linears
 * on its thread alone (with its own workspace), instead of 3 team-wide kernel calls per expert
 * (an OpenMP region each). Outputs are added to h afterwards in expert order, so the numbers
 * are those of the one-expert-at-a-time path (a linear's outputs do not depend on how its rows
 * are split over threads). Returns 0 (nothing done) when the path does not apply; else 1 with
 * *st set. cnt: (ne + 1) prefix counts into m->ex_list. */
static int moe_experts_parallel(numla_model *m, const numla_weights_layer *lw, int64_t T,
                                const int32_t *cnt, numla_status *st, int *shared_up)
{
    /* The shared experts' gate and up projections (into m->g, m->u) join the same region as two
     * more jobs, after the routed experts: the jobs are taken in order by whichever thread is
     * free, and a routed expert's three linears are the larger job, so the two halves of the
     * shared one even out the threads' loads at the end (largest first). Their SiLU product and
     * their down projection (accumulating into h after the routed outputs, as the serial path
     * does) are left to the caller when *shared_up is 1. */
    const numla_weights_mlp *sw = &lw->shared;
    const int sh_jobs = sw->inter > 0 && T <= NUMLA_MODEL_PER_THREAD_ROWS ? 2 : 0;
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
    for (int64_t e = 0; e < ne; e++) {
        int64_t n = cnt[e + 1] - cnt[e];
        if (n == 0)
            continue;
        const numla_weights_mlp *w = &lw->experts[e];
        if (w->inter != I)
            return 0;
        const numla_model_linear *ws3[3] = {&w->gate, &w->up, &w->down};
        for (int j = 0; j < 3; j++) {
            size_t need = numla_model_linear_workspace_size(numla_model_lin_isa(m, ws3[j]), ws3[j], n, 1);
            ws_max = need > ws_max ? need : ws_max;
        }
        act[na++] = (int32_t)e;
    }
    if (sh_jobs) {
        const numla_model_linear *ws2[2] = {&sw->gate, &sw->up};
        for (int j = 0; j < 2; j++) {
            size_t need = numla_model_linear_workspace_size(numla_model_lin_isa(m, ws2[j]), ws2[j], T, 1);
            ws_max = need > ws_max ? need : ws_max;
        }
    }
    size_t stride;
    *st = numla_model_par_workspace(m, ws_max, m->num_threads, &stride);
    if (*st != NUMLA_STATUS_OK)
        return 1;
    double t0 = omp_get_wtime();
    numla_status bad = NUMLA_STATUS_OK;
#pragma omp parallel for num_threads(m->num_threads) schedule(dynamic, 1)
    for (int32_t jj = 0; jj < na + sh_jobs; jj++) {
        void *ws = (char *)m->par_ws + (size_t)omp_get_thread_num() * stride;
        if (jj >= na) { /* the shared experts' gate (first) or up projection */
            const int64_t Is = sw->inter;
            const int up = jj > na;
            const numla_model_linear *wj = up ? &sw->up : &sw->gate;
            numla_status s1 = numla_model_linear_forward(numla_model_lin_isa(m, wj), wj, T, m->x,
                                                         hid, up ? m->u : m->g, Is, 0, ws, stride);
            if (s1 != NUMLA_STATUS_OK) {
#pragma omp critical(numla_model_experts)
                bad = s1;
            }
            continue;
        }
        const int64_t e = act[jj], r0 = cnt[e], n = cnt[e + 1] - cnt[e];
        const numla_weights_mlp *w = &lw->experts[e];
        float *g = m->par_g + r0 * I, *u = m->par_u + r0 * I, *y = m->par_y + r0 * hid;
        float *x = m->par_x + r0 * hid;
        for (int64_t r = 0; r < n; r++) /* this expert's tokens, gathered on its thread */
            memcpy(x + r * hid, m->x + (m->ex_list[r0 + r] / k) * hid, (size_t)hid * sizeof(float));
        numla_status s1 =
            numla_model_linear_forward(numla_model_lin_isa(m, &w->gate), &w->gate, n, x, hid, g, I, 0, ws, stride);
        if (s1 == NUMLA_STATUS_OK)
            s1 = numla_model_linear_forward(numla_model_lin_isa(m, &w->up), &w->up, n, x, hid, u, I, 0, ws, stride);
        (void)numla_act_silu_mul(m->isa, n * I, g, u); /* args valid */
        if (s1 == NUMLA_STATUS_OK)
            s1 = numla_model_linear_forward(numla_model_lin_isa(m, &w->down), &w->down, n, g, I, y, hid, 0, ws, stride);
        if (s1 != NUMLA_STATUS_OK) {
#pragma omp critical(numla_model_experts)
            bad = s1;
        }
    }
    m->stats.linear_s += omp_get_wtime() - t0;
    m->stats.linear_flops += 6.0 * (double)rows * (double)I * (double)hid +
                       (sh_jobs ? 4.0 * (double)T * (double)sw->inter * (double)hid : 0.0);
    *st = bad;
    *shared_up = sh_jobs > 0;
    if (bad != NUMLA_STATUS_OK)
        return 1;
    if (sh_jobs)
        (void)numla_act_silu_mul(m->isa, T * sw->inter, m->g, m->u); /* args valid */
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

/* Router in fp32 (every rank computes the identical routing): topk_idx, topk_w per token. */
static numla_status moe_route_tokens(numla_model *m, const numla_weights_layer *lw, int64_t T)
{
    const numla_model_config *c = &m->cfg;
    const int64_t hid = c->hidden_size, E = c->n_routed_experts, k = c->num_experts_per_tok;
    NUMLA_CHECK(numla_model_lin(m, &lw->router, T, m->x, hid, m->router, E, 0));
    const size_t rstride = m->route_stride;
#pragma omp parallel for num_threads(m->num_threads) if (T > 1)
    for (int64_t t = 0; t < T; t++)
        numla_model_moe_route(c, m->router + t * E, lw->router_bias, m->topk_idx + t * k,
                        m->topk_w + t * k, (char *)m->route_scratch + (size_t)t * rstride);
    return NUMLA_STATUS_OK;
}

/* Group (token, j) pairs by local expert so each expert's weights stream once: ex_count
 * (ne + 1) prefix counts into ex_list. */
static void moe_group_by_expert(numla_model *m, int64_t T)
{
    const numla_shard *sh = &m->w->shard;
    const int64_t k = m->cfg.num_experts_per_tok;
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
}

/* Prefill (or one thread): one expert at a time on the whole team, its rows gathered into
 * ex_x and its weighted outputs added to h. */
static numla_status moe_experts_serial(numla_model *m, const numla_weights_layer *lw,
                                       const int32_t *cnt)
{
    const int64_t hid = m->cfg.hidden_size, k = m->cfg.num_experts_per_tok;
    const int64_t ne = m->w->shard.expert_count;
    for (int64_t e = 0; e < ne; e++) {
        int64_t n = cnt[e + 1] - cnt[e];
        if (n == 0)
            continue;
        const int32_t *list = m->ex_list + cnt[e];
        for (int64_t r = 0; r < n; r++)
            memcpy(m->ex_x + r * hid, m->x + (list[r] / k) * hid, (size_t)hid * sizeof(float));
        memset(m->ex_y, 0, (size_t)(n * hid) * sizeof(float));
        NUMLA_CHECK(numla_model_mlp(m, &lw->experts[e], n, m->ex_x, m->ex_y, hid));
        for (int64_t r = 0; r < n; r++) {
            float wgt = m->topk_w[list[r]];
            float *dst = m->h + (list[r] / k) * hid;
            const float *src = m->ex_y + r * hid;
            for (int64_t i = 0; i < hid; i++)
                dst[i] += wgt * src[i];
        }
    }
    return NUMLA_STATUS_OK;
}

numla_status numla_model_moe(numla_model *m, const numla_weights_layer *lw, int64_t T)
{
    const int64_t hid = m->cfg.hidden_size;
    double tp = omp_get_wtime();
    NUMLA_CHECK(moe_route_tokens(m, lw, T));
    moe_group_by_expert(m, T);
    numla_model_part_tick(m, NUMLA_MODEL_PART_ROUTER, &tp);

    numla_status s = NUMLA_STATUS_OK;
    int shared_up = 0;
    if (moe_experts_parallel(m, lw, T, m->ex_count, &s, &shared_up)) {
        NUMLA_CHECK(s);
        numla_model_part_tick(m, NUMLA_MODEL_PART_EXPERTS, &tp);
        if (shared_up)
            NUMLA_CHECK(numla_model_lin(m, &lw->shared.down, T, m->g, lw->shared.inter, m->h,
                                        hid, 1));
        else
            NUMLA_CHECK(numla_model_mlp(m, &lw->shared, T, m->x, m->h, hid));
        numla_model_part_tick(m, NUMLA_MODEL_PART_SHARED, &tp);
        return NUMLA_STATUS_OK;
    }
    NUMLA_CHECK(moe_experts_serial(m, lw, m->ex_count));
    numla_model_part_tick(m, NUMLA_MODEL_PART_EXPERTS, &tp);
    NUMLA_CHECK(numla_model_mlp(m, &lw->shared, T, m->x, m->h, hid));
    numla_model_part_tick(m, NUMLA_MODEL_PART_SHARED, &tp);
    return NUMLA_STATUS_OK;
}
