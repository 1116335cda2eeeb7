/* Tests for the forward's building blocks (engine/model/model.h, engine/model/config.h): RMSNorm, YaRN
 * inverse frequencies and scales recomputed here from docs/design.md §5, the RoPE pairing/layout,
 * and MoE routing variants on small hand-computed cases. */
#include "test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/config.h"
#include "engine/model/model.h"
#include "engine/model/model_testing.h"
#include "engine/model/rope.h"

static void test_rmsnorm(void)
{
    float x[4] = {1, 2, 3, 4}, w[4] = {1, 0.5f, 2, 1}, y[4];
    numla_model_rmsnorm(y, x, w, 4, 0.0);
    double r = 1.0 / sqrt(7.5);
    CU_ASSERT_DOUBLE_EQUAL(y[0], 1 * r, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(y[1], 0.5 * 2 * r, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(y[2], 2 * 3 * r, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(y[3], 4 * r, 1e-6);
    /* eps matters for tiny inputs; in place works */
    float z[2] = {1e-4f, -1e-4f}, one[2] = {1, 1};
    numla_model_rmsnorm(z, z, one, 2, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(z[0], 1e-4 / sqrt(1e-8 + 1e-6), 1e-6);
}

/* V2-Lite rope: d 64, θ 1e4, factor 40, L0 4096, beta 32/1; recomputed from the formula. */
static void test_yarn_v2lite(void)
{
    const int d = 64;
    const double th = 10000, f = 40, L0 = 4096;
    double low = floor(d * log(L0 / (2 * M_PI * 32)) / (2 * log(th)));
    double high = ceil(d * log(L0 / (2 * M_PI * 1)) / (2 * log(th)));
    CU_ASSERT_DOUBLE_EQUAL(low, 10, 0);  /* corr(32) = 10.47 */
    CU_ASSERT_DOUBLE_EQUAL(high, 23, 0); /* corr(1) = 22.51 */
    double inv[32];
    numla_rope_inv_freq(d, th, 1, f, L0, 32, 1, inv);
    for (int i = 0; i < d / 2; i++) {
        double ramp = (i - low) / (high - low);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        double base = pow(th, 2.0 * i / d);
        double want = ramp / (f * base) + (1 - ramp) / base;
        NUMLA_ASSERT_MSG(fabs(inv[i] - want) <= 1e-12 * want, "inv_freq[%d] %g vs %g", i, inv[i], want);
    }
    CU_ASSERT_DOUBLE_EQUAL(inv[0], 1.0, 1e-15);                         /* ramp 0: unscaled */
    CU_ASSERT_DOUBLE_EQUAL(inv[31], pow(th, -62.0 / 64) / 40, 1e-15);   /* ramp 1: / factor */
    /* m and the softmax scale (docs/design.md §5: m² = 1.5896, scale ≈ 0.11472) */
    double m = numla_rope_yarn_mscale(40, 0.707);
    CU_ASSERT_DOUBLE_EQUAL(m * m, 1.5896, 1e-4);
    CU_ASSERT_DOUBLE_EQUAL(m * m / sqrt(192.0), 0.11472, 1e-5);
    CU_ASSERT_DOUBLE_EQUAL(numla_rope_yarn_mscale(1.0, 0.707), 1.0, 0);
    /* low == high gets high += 0.001: θ chosen so both corrections round alike is hard; check
     * the unscaled path instead */
    numla_rope_inv_freq(16, 500, 0, 4, 128, 32, 1, inv);
    CU_ASSERT_DOUBLE_EQUAL(inv[3], pow(500, -6.0 / 16), 1e-15);
}

static void test_rope_layout(void)
{
    numla_model_config c;
    memset(&c, 0, sizeof c);
    c.qk_rope_head_dim = 4;
    c.rope_attention_factor = 1.5;
    c.rope_inv_freq[0] = 0.3;
    c.rope_inv_freq[1] = 0.05;
    float cs[4], out[4];
    numla_rope_cos_sin(&c, 7, cs);
    float a0 = 7 * 0.3f, a1 = 7 * 0.05f;
    CU_ASSERT_DOUBLE_EQUAL(cs[0], 1.5 * cos(a0), 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(cs[3], 1.5 * sin(a1), 1e-6);
    /* pair (x0, x1) rotates by a0, (x2, x3) by a1; stored [y0, y2, y1, y3] */
    float x[4] = {1, 2, 3, 4};
    numla_rope_apply(out, x, cs, 4);
    CU_ASSERT_DOUBLE_EQUAL(out[0], 1.5 * (1 * cos(a0) - 2 * sin(a0)), 1e-5);
    CU_ASSERT_DOUBLE_EQUAL(out[2], 1.5 * (2 * cos(a0) + 1 * sin(a0)), 1e-5);
    CU_ASSERT_DOUBLE_EQUAL(out[1], 1.5 * (3 * cos(a1) - 4 * sin(a1)), 1e-5);
    CU_ASSERT_DOUBLE_EQUAL(out[3], 1.5 * (4 * cos(a1) + 3 * sin(a1)), 1e-5);
}

static numla_model_config moe_cfg(int v3, int E, int k, int G, int TG, int norm, double rsf)
{
    numla_model_config c;
    memset(&c, 0, sizeof c);
    c.arch = v3 ? NUMLA_MODEL_ARCH_DEEPSEEK_V3 : NUMLA_MODEL_ARCH_DEEPSEEK_V2;
    c.n_routed_experts = E;
    c.num_experts_per_tok = k;
    c.n_group = G;
    c.topk_group = TG;
    c.norm_topk_prob = norm;
    c.routed_scaling_factor = rsf;
    c.scoring_func = v3 ? NUMLA_SCORING_FUNC_SIGMOID : NUMLA_SCORING_FUNC_SOFTMAX;
    c.topk_method = v3 ? NUMLA_TOPK_METHOD_NOAUX_TC
                       : G > 1 ? NUMLA_TOPK_METHOD_GROUP_LIMITED_GREEDY : NUMLA_TOPK_METHOD_GREEDY;
    c.moe_weight_rule = v3 ? NUMLA_MOE_WEIGHT_RULE_NORM_THEN_SCALE : NUMLA_MOE_WEIGHT_RULE_NORM_OR_SCALE;
    return c;
}

/* Expect the chosen set {a, b} (any order) with weights wa, wb. */
static void expect2(const int32_t *idx, const float *w, int a, int b, double wa, double wb)
{
    int ia = idx[0] == a ? 0 : 1, ib = 1 - ia;
    NUMLA_ASSERT_MSG(idx[ia] == a && idx[ib] == b, "chose {%d, %d}, want {%d, %d}", idx[0], idx[1], a, b);
    CU_ASSERT_DOUBLE_EQUAL(w[ia], wa, 1e-5);
    CU_ASSERT_DOUBLE_EQUAL(w[ib], wb, 1e-5);
}

static void test_moe_v2(void)
{
    float lg[4] = {1, 2, 0, 3}, scr[64], w[4];
    int32_t idx[4];
    double z = exp(1) + exp(2) + 1 + exp(3), s3 = exp(3) / z, s1 = exp(2) / z;
    /* greedy, no norm: softmax scores × routed_scaling_factor */
    numla_model_config c = moe_cfg(0, 4, 2, 1, 1, 0, 2.0);
    numla_model_moe_route(&c, lg, NULL, idx, w, scr);
    expect2(idx, w, 3, 1, 2 * s3, 2 * s1);
    /* norm_topk_prob (DeepSeek's V2 rule): normalised, *not* scaled */
    c = moe_cfg(0, 4, 2, 1, 1, 1, 2.0);
    numla_model_moe_route(&c, lg, NULL, idx, w, scr);
    expect2(idx, w, 3, 1, s3 / (s3 + s1), s1 / (s3 + s1));
    /* group_limited_greedy: groups of 2, keep 1 group by max → experts 0 and 1 (not 0 and 2) */
    float g[8] = {5, 0, 4.9f, 4.8f, 0, 0, 0, 4.7f};
    double zz = 0;
    for (int i = 0; i < 8; i++)
        zz += exp(g[i]);
    c = moe_cfg(0, 8, 2, 4, 1, 0, 1.0);
    numla_model_moe_route(&c, g, NULL, idx, w, scr);
    expect2(idx, w, 0, 1, exp(5) / zz, 1 / zz);
    /* same without groups picks 0 and 2 */
    c = moe_cfg(0, 8, 2, 1, 1, 0, 1.0);
    numla_model_moe_route(&c, g, NULL, idx, w, scr);
    expect2(idx, w, 0, 2, exp(5) / zz, exp(4.9) / zz);
}

static void test_moe_v3(void)
{
    float lg[8] = {0}, scr[64], w[4];
    int32_t idx[4];
    /* sigmoid(0) = 0.5 everywhere; biased b = [.51 .6 .8 .3 .5 .55 0 .9]; group sums of top 2:
     * 1.11, 1.1, 1.05, 0.9 → keep groups 0 and 1 → experts 2 (.8) and 1 (.6); expert 7 (.9)
     * is the best single score but its group is dropped. Weights from the unbiased 0.5,
     * normalised to 0.5 each, × 2.5. */
    float bias[8] = {0.01f, 0.1f, 0.3f, -0.2f, 0.0f, 0.05f, -0.5f, 0.4f};
    numla_model_config c = moe_cfg(1, 8, 2, 4, 2, 1, 2.5);
    numla_model_moe_route(&c, lg, bias, idx, w, scr);
    expect2(idx, w, 2, 1, 1.25, 1.25);
    /* without norm: 0.5 × 2.5 */
    c = moe_cfg(1, 8, 2, 4, 2, 0, 2.5);
    numla_model_moe_route(&c, lg, bias, idx, w, scr);
    expect2(idx, w, 2, 1, 1.25, 1.25);
    /* negative biased scores in the kept group: dropped experts are -inf, not 0, so the kept
     * group's -0.1s still win over a dropped expert (b = .5 - 2.5 < 0 there anyway, and the
     * 0.0 masking bug would pick it) */
    float lg4[4] = {0, 0, 1.0f, 0}, b4[4] = {-0.6f, -0.6f, -0.73106f + 0.4f, -2.5f};
    /* b = [-0.1, -0.1, 0.4, -2.0]: g0 = -0.2, g1 = -1.6 → keep g0 */
    c = moe_cfg(1, 4, 2, 2, 1, 1, 1.0);
    numla_model_moe_route(&c, lg4, b4, idx, w, scr);
    expect2(idx, w, 0, 1, 0.5, 0.5);
    /* k = 1 with norm: V3 normalises whenever norm_topk_prob → weight = routed_scaling_factor */
    c = moe_cfg(1, 4, 1, 1, 1, 1, 2.5);
    float lgk[4] = {0.3f, 2.0f, -1.0f, 0.0f};
    numla_model_moe_route(&c, lgk, (float[]){0, 0, 0, 0}, idx, w, scr);
    CU_ASSERT_EQUAL(idx[0], 1);
    CU_ASSERT_DOUBLE_EQUAL(w[0], 2.5, 1e-6);
}

/* ---- routing at sizes beyond any fixed array: an independent sort-based reference ---- */

static const float *ref_sort_key; /* values the index comparator sorts by (descending) */

/* Descending by value, ties by the lower index (the order a "first largest" pick gives). */
static int ref_cmp_desc(const void *pa, const void *pb)
{
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    float va = ref_sort_key[a], vb = ref_sort_key[b];
    if (va != vb)
        return va > vb ? -1 : 1;
    return a < b ? -1 : a > b;
}

static void ref_sort(int32_t *ord, int64_t n, const float *key)
{
    for (int64_t i = 0; i < n; i++)
        ord[i] = (int32_t)i;
    ref_sort_key = key;
    qsort(ord, (size_t)n, sizeof *ord, ref_cmp_desc);
}

/* Route one token the way the model cards describe it, by sorting: score every expert, rank
 * the groups (V2: best score; V3: sum of the two best biased scores), keep the topk_group
 * best, then take the k best experts of the kept groups; weights per the V2/V3 rule. */
static void ref_route(const numla_model_config *c, const float *logits, const float *bias,
                      int32_t *idx, double *wts)
{
    const int64_t E = c->n_routed_experts, G = c->n_group, per = E / G, k = c->num_experts_per_tok;
    const int v3 = c->topk_method == NUMLA_TOPK_METHOD_NOAUX_TC;
    float *s = malloc((size_t)E * sizeof *s), *choice = malloc((size_t)E * sizeof *choice);
    float *gs = malloc((size_t)G * sizeof *gs);
    int32_t *ord = malloc((size_t)E * sizeof *ord), *gord = malloc((size_t)G * sizeof *gord);
    unsigned char *keep = calloc((size_t)G, 1);
    if (v3) {
        for (int64_t e = 0; e < E; e++) {
            s[e] = 1.0f / (1.0f + expf(-logits[e]));
            choice[e] = s[e] + bias[e];
        }
    } else {
        double mx = -INFINITY, sum = 0;
        for (int64_t e = 0; e < E; e++)
            mx = fmax(mx, logits[e]);
        for (int64_t e = 0; e < E; e++)
            sum += exp((double)logits[e] - mx);
        for (int64_t e = 0; e < E; e++)
            s[e] = choice[e] = (float)(exp((double)logits[e] - mx) / sum);
    }
    for (int64_t g = 0; g < G; g++) {
        ref_sort(ord, per, choice + g * per);
        gs[g] = v3 ? choice[g * per + ord[0]] + choice[g * per + ord[1]] : choice[g * per + ord[0]];
    }
    ref_sort(gord, G, gs);
    for (int64_t r = 0; r < c->topk_group; r++)
        keep[gord[r]] = 1;
    for (int64_t e = 0; e < E; e++)
        if (!keep[e / per])
            choice[e] = -INFINITY;
    ref_sort(ord, E, choice);
    double sum = 0;
    for (int64_t j = 0; j < k; j++) {
        idx[j] = ord[j];
        wts[j] = s[ord[j]];
        sum += wts[j];
    }
    const int norm = v3 ? c->norm_topk_prob : c->norm_topk_prob && k > 1;
    for (int64_t j = 0; j < k; j++) {
        if (norm)
            wts[j] /= sum;
        if (!norm || v3)
            wts[j] *= c->routed_scaling_factor;
    }
    free(s); free(choice); free(gs); free(ord); free(gord); free(keep);
}

/* 4096 experts in 512 groups (beyond the 256 groups and 1024 experts the router once kept
 * on its stack), V2 group_limited_greedy and V3 noaux_tc: the same experts and weights as the
 * sort-based reference, and groups past the 256th really win. Distinct logits (a shuffled
 * ramp) so no two experts tie. */
static void check_route_large(int v3)
{
    enum { E = 4096, G = 512, K = 8, TG = 4, TOKENS = 16 };
    numla_model_config c = moe_cfg(v3, E, K, G, TG, 1, 2.5);
    float *lg = malloc(E * sizeof *lg), *bias = malloc(E * sizeof *bias);
    void *scr = malloc(numla_model_moe_route_scratch_bytes(&c));
    CU_ASSERT_PTR_NOT_NULL_FATAL(scr);
    numla_test_rng r = {v3 ? 11u : 5u};
    int high = 0, bad = 0;
    double werr = 0;
    for (int t = 0; t < TOKENS; t++) {
        for (int e = 0; e < E; e++) {
            lg[e] = (float)(e - E / 2) * (v3 ? 2e-3f : 4e-3f);
            bias[e] = (float)numla_test_rng_uniform(&r, -0.05, 0.05);
        }
        for (int e = E - 1; e > 0; e--) { /* shuffle */
            int j = (int)(numla_test_rng_u64(&r) % (uint64_t)(e + 1));
            float tmp = lg[e]; lg[e] = lg[j]; lg[j] = tmp;
        }
        int32_t idx[K], ridx[K];
        float w[K];
        double rw[K];
        numla_model_moe_route(&c, lg, v3 ? bias : NULL, idx, w, scr);
        ref_route(&c, lg, bias, ridx, rw);
        for (int j = 0; j < K; j++) { /* same set: the reference lists by score too */
            int found = -1;
            for (int i = 0; i < K; i++)
                if (idx[i] == ridx[j])
                    found = i;
            if (found < 0) {
                bad++;
                continue;
            }
            werr = fmax(werr, fabs(w[found] - rw[j]) / fabs(rw[j]));
            high += ridx[j] / (E / G) >= 256;
        }
    }
    NUMLA_ASSERT_MSG(bad == 0, "%s: %d of %d experts differ from the sorted reference",
                     v3 ? "noaux_tc" : "group_limited_greedy", bad, TOKENS * K);
    NUMLA_ASSERT_MSG(werr < 1e-5, "%s: weight error %g", v3 ? "noaux_tc" : "group_limited_greedy",
                     werr);
    NUMLA_ASSERT_MSG(high > 0, "no expert from a group past the 256th was chosen");
    free(lg); free(bias); free(scr);
}

static void test_moe_route_large_v2(void) { check_route_large(0); }
static void test_moe_route_large_v3(void) { check_route_large(1); }

NUMLA_TEST_SUITE(model_ops, NULL, NULL, NUMLA_TEST(test_rmsnorm), NUMLA_TEST(test_yarn_v2lite),
                 NUMLA_TEST(test_rope_layout), NUMLA_TEST(test_moe_v2), NUMLA_TEST(test_moe_v3),
                 NUMLA_TEST(test_moe_route_large_v2), NUMLA_TEST(test_moe_route_large_v3))
