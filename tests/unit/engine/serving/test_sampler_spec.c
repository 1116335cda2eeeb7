/* Speculative sampling (numla_sampler_speculate, docs/speculative.md): on a vocabulary of 6,
 * drafts drawn from a distribution q unlike the model's, the tokens that come out must have the
 * model's distribution p as the request's sampler defines it (temperature with top_k, or with
 * top_p), computed here independently: a chi-square test over 40000 verify calls of two drafts
 * each, for the first token (always emitted), the second (emitted when the first draft was
 * accepted) and the third (both accepted), tokens outside top_k / top_p never, and the first
 * draft accepted with probability sum_i min(p_i, q_i). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "engine/serving/sampler.h"

enum { SV = 6, SK = 2, TRIALS = 40000 };

/* The request's distribution of one row (vLLM's order): softmax(x / t), the top_k best
 * renormalised, then the shortest prefix of them (logit descending) reaching top_p,
 * renormalised. */
static void target_probs(const float *x, double t, int top_k, double top_p, double *p)
{
    int order[SV];
    for (int i = 0; i < SV; i++)
        order[i] = i;
    for (int i = 0; i < SV; i++) /* insertion sort, logit descending (no ties here) */
        for (int j = i; j > 0 && x[order[j]] > x[order[j - 1]]; j--) {
            int s = order[j];
            order[j] = order[j - 1];
            order[j - 1] = s;
        }
    int keep = top_k > 0 ? top_k : SV;
    double z = 0;
    for (int r = 0; r < keep; r++)
        z += exp(x[order[r]] / t);
    if (top_p < 1) {
        double cum = 0;
        for (int r = 0; r < keep; r++) {
            cum += exp(x[order[r]] / t) / z;
            if (cum >= top_p) {
                keep = r + 1;
                break;
            }
        }
    }
    double zk = 0;
    for (int r = 0; r < keep; r++)
        zk += exp(x[order[r]] / t);
    for (int i = 0; i < SV; i++)
        p[i] = 0;
    for (int r = 0; r < keep; r++)
        p[order[r]] = exp(x[order[r]] / t) / zk;
}

static int draw_test(numla_test_rng *r, const float *q)
{
    double u = (double)(numla_test_rng_u64(r) >> 11) * 0x1.0p-53, cum = 0;
    for (int i = 0; i < SV; i++) {
        cum += q[i];
        if (u < cum)
            return i;
    }
    return SV - 1;
}

/* Pearson's chi-square of counts against p over the cells p > 0; cells with p = 0 must be 0. */
static double chi2(const long *count, const double *p, long n, int *df, int *impossible)
{
    double c = 0;
    *df = -1;
    *impossible = 0;
    for (int i = 0; i < SV; i++) {
        if (p[i] == 0) {
            *impossible += count[i] != 0;
            continue;
        }
        const double e = p[i] * (double)n;
        c += (count[i] - e) * (count[i] - e) / e;
        (*df)++;
    }
    return c;
}

/* 0.999 quantiles of chi-square with 1..5 degrees of freedom */
static const double chi2_crit[6] = {0, 10.83, 13.82, 16.27, 18.47, 20.52};

static void check_config(double temperature, int top_k, double top_p, uint64_t seed)
{
    /* the model's rows after the known tokens, after draft 1 and after draft 2 */
    float rows[SK + 1][SV] = {{1.0f, 0.2f, -0.5f, 2.0f, 0.7f, -1.5f},
                              {-0.3f, 1.4f, 0.9f, -2.0f, 0.1f, 1.1f},
                              {0.5f, -0.8f, 1.9f, 0.4f, -0.1f, 1.2f}};
    /* the drafts' distributions: deliberately unlike the model's (mass where p has none) */
    float q[SK][SV] = {{0.05f, 0.30f, 0.25f, 0.10f, 0.10f, 0.20f},
                       {0.30f, 0.05f, 0.15f, 0.20f, 0.25f, 0.05f}};
    double p[SK + 1][SV];
    for (int j = 0; j <= SK; j++)
        target_probs(rows[j], temperature, top_k, top_p, p[j]);
    numla_sampling_params sp;
    numla_sampling_params_default(&sp);
    sp.temperature = temperature;
    sp.top_k = top_k;
    sp.top_p = top_p;
    sp.seed = seed;
    sp.has_seed = 1;
    numla_sampler *s = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_sampler_create(&sp, SV, &s), NUMLA_STATUS_OK);
    numla_test_rng r = {seed ^ 0x5eed};
    long count[SK + 1][SV] = {{0}}, n[SK + 1] = {0}, accepted1 = 0;
    for (long t = 0; t < TRIALS; t++) {
        int32_t draft[SK] = {draw_test(&r, q[0]), draw_test(&r, q[1])}, out[SK + 1], nout = 0;
        float lg[SK + 1][SV];
        memcpy(lg, rows, sizeof lg);
        if (numla_sampler_speculate(s, &lg[0][0], draft, &q[0][0], SK, out, &nout, NULL) !=
            NUMLA_STATUS_OK) {
            CU_FAIL("numla_sampler_speculate");
            break;
        }
        CU_ASSERT_TRUE(nout >= 1 && nout <= SK + 1);
        for (int j = 0; j < nout; j++) {
            count[j][out[j]]++;
            n[j]++;
            if (j < nout - 1)
                CU_ASSERT_EQUAL(out[j], draft[j]); /* emitted before the last: accepted drafts */
        }
        accepted1 += nout >= 2;
        CU_ASSERT_EQUAL(memcmp(lg, rows, sizeof lg), 0); /* the logits read as given */
    }
    for (int j = 0; j <= SK; j++) {
        int df, impossible;
        const double c = chi2(count[j], p[j], n[j], &df, &impossible);
        NUMLA_ASSERT_MSG(df >= 1 && c < chi2_crit[df], "T %g top_k %d top_p %g: token %d: "
                         "chi-square %.2f over %d dof (critical %.2f) from %ld draws", temperature,
                         top_k, top_p, j + 1, c, df, df >= 1 ? chi2_crit[df] : 0, n[j]);
        NUMLA_ASSERT_MSG(impossible == 0, "token %d: %d tokens outside the sampler's set drawn",
                         j + 1, impossible);
    }
    /* P(draft 1 accepted) = sum_i min(p_i, q_i), within 4 standard deviations */
    double a = 0;
    for (int i = 0; i < SV; i++)
        a += fmin(p[0][i], q[0][i]);
    const double sd = sqrt(a * (1 - a) / TRIALS);
    NUMLA_ASSERT_MSG(fabs((double)accepted1 / TRIALS - a) < 4 * sd, "acceptance %.4f, expected "
                     "%.4f", (double)accepted1 / TRIALS, a);
    numla_sampler_destroy(&s);
}

static void test_speculate_top_k(void) { check_config(0.8, 5, 1.0, 11); }
static void test_speculate_top_p(void) { check_config(1.3, 0, 0.85, 12); }

/* numla_sampler_probs against the same independent distribution. */
static void test_probs(void)
{
    float x[SV] = {1.0f, 0.2f, -0.5f, 2.0f, 0.7f, -1.5f};
    const struct { double t; int k; double p; } cfg[] = {{0.8, 5, 1.0}, {1.3, 0, 0.85},
                                                          {1.0, 3, 0.9}, {0.5, 0, 1.0}};
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        numla_sampling_params sp;
        numla_sampling_params_default(&sp);
        sp.temperature = cfg[c].t;
        sp.top_k = cfg[c].k;
        sp.top_p = cfg[c].p;
        numla_sampler *s = NULL;
        CU_ASSERT_EQUAL_FATAL(numla_sampler_create(&sp, SV, &s), NUMLA_STATUS_OK);
        float got[SV];
        double want[SV];
        CU_ASSERT_EQUAL(numla_sampler_probs(s, x, got), NUMLA_STATUS_OK);
        target_probs(x, cfg[c].t, cfg[c].k, cfg[c].p, want);
        for (int i = 0; i < SV; i++)
            NUMLA_ASSERT_MSG(fabs(got[i] - want[i]) < 1e-5, "config %zu token %d: %g, want %g", c,
                             i, got[i], want[i]);
        numla_sampler_destroy(&s);
    }
}

NUMLA_TEST_SUITE(sampler_spec, NULL, NULL, NUMLA_TEST(test_speculate_top_k),
                 NUMLA_TEST(test_speculate_top_p), NUMLA_TEST(test_probs));
