/* Tests for engine/sampler: greedy, temperature, top_k, top_p against closed-form
 * distributions, per-request seeds, stop rules, logprobs, bad parameters. */
#include "test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/serving/sampler.h"

static numla_sampler *mk(double temp, int32_t top_k, double top_p, uint64_t seed, int32_t vocab)
{
    numla_sampling_params p;
    numla_sampling_params_default(&p);
    p.temperature = temp;
    p.top_k = top_k;
    p.top_p = top_p;
    p.seed = seed;
    p.has_seed = 1;
    numla_sampler *s = NULL;
    CU_ASSERT_EQUAL(numla_sampler_create(&p, vocab, &s), NUMLA_STATUS_OK);
    return s;
}

static void test_greedy(void)
{
    float lg[6] = {0.1f, 2.0f, -1.0f, 2.0f, 1.9f, 0.0f};
    numla_sampler *s = mk(0.0, 0, 1.0, 1, 6);
    int32_t t = -1;
    CU_ASSERT_EQUAL(numla_sampler_sample(s, lg, &t, NULL), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(t, 1); /* tie 1 vs 3: lowest id */
    numla_sampler_destroy(&s);
    CU_ASSERT_PTR_NULL(s);
}

/* Empirical frequencies over n draws vs expected probabilities. */
static void check_freq(numla_sampler *s, float *lg, int V, const double *want, int n)
{
    int cnt[16] = {0};
    for (int i = 0; i < n; i++) {
        int32_t t;
        numla_sampler_sample(s, lg, &t, NULL);
        CU_ASSERT_FATAL(t >= 0 && t < V);
        cnt[t]++;
    }
    for (int v = 0; v < V; v++) {
        double f = (double)cnt[v] / n;
        NUMLA_ASSERT_MSG(fabs(f - want[v]) < 0.015 || (want[v] == 0 && cnt[v] == 0),
                         "token %d: freq %.4f want %.4f", v, f, want[v]);
    }
}

static void test_distributions(void)
{
    float lg[4] = {logf(0.5f), logf(0.3f), logf(0.2f), -INFINITY};
    const int N = 20000;
    numla_sampler *s = mk(1.0, 0, 1.0, 42, 4);
    check_freq(s, lg, 4, (double[]){0.5, 0.3, 0.2, 0}, N);
    numla_sampler_destroy(&s);
    /* temperature 0.5: p^2 normalised */
    double z = 0.25 + 0.09 + 0.04;
    s = mk(0.5, 0, 1.0, 43, 4);
    check_freq(s, lg, 4, (double[]){0.25 / z, 0.09 / z, 0.04 / z, 0}, N);
    numla_sampler_destroy(&s);
    /* top_k 2 */
    s = mk(1.0, 2, 1.0, 44, 4);
    check_freq(s, lg, 4, (double[]){0.625, 0.375, 0, 0}, N);
    numla_sampler_destroy(&s);
    /* top_p 0.6: 0.5 < 0.6 <= 0.8 keeps two */
    s = mk(1.0, 0, 0.6, 45, 4);
    check_freq(s, lg, 4, (double[]){0.625, 0.375, 0, 0}, N);
    numla_sampler_destroy(&s);
    /* top_p 0.4 keeps one */
    s = mk(1.0, 0, 0.4, 46, 4);
    check_freq(s, lg, 4, (double[]){1, 0, 0, 0}, 2000);
    numla_sampler_destroy(&s);
    /* top_k 1 = greedy at any temperature */
    s = mk(3.0, 1, 1.0, 47, 4);
    check_freq(s, lg, 4, (double[]){1, 0, 0, 0}, 2000);
    numla_sampler_destroy(&s);
}

static void test_seed_reproducible(void)
{
    float lg[8];
    for (int i = 0; i < 8; i++)
        lg[i] = 0.1f * (float)i;
    numla_sampler *a = mk(1.0, 0, 1.0, 7, 8), *b = mk(1.0, 0, 1.0, 7, 8), *c = mk(1.0, 0, 1.0, 8, 8);
    int same = 1, diff = 0;
    for (int i = 0; i < 64; i++) {
        int32_t x, y, z;
        numla_sampler_sample(a, lg, &x, NULL);
        numla_sampler_sample(b, lg, &y, NULL);
        numla_sampler_sample(c, lg, &z, NULL);
        same &= x == y;
        diff |= x != z;
    }
    CU_ASSERT_TRUE(same);
    CU_ASSERT_TRUE(diff);
    numla_sampler_destroy(&a);
    numla_sampler_destroy(&b);
    numla_sampler_destroy(&c);
}

/* ---- vocabularies of many blocks (NUMLA_SAMPLER_BLOCK tokens each) ---------------------- */

enum { BIG_V = 5000 };

static uint32_t lcg_(uint32_t *x)
{
    *x = *x * 1664525u + 1013904223u;
    return *x >> 8;
}

static void test_big_vocab_greedy(void)
{
    static float lg[BIG_V];
    uint32_t r = 1;
    for (int i = 0; i < BIG_V; i++)
        lg[i] = (float)(lcg_(&r) % 10000) * 1e-3f - 5.0f;
    lg[4321] = 9.0f;
    lg[2345] = 9.0f; /* tie in another block: the lower id */
    numla_sampler *s = mk(0.0, 0, 1.0, 1, BIG_V);
    int32_t t = -1;
    CU_ASSERT_EQUAL(numla_sampler_sample(s, lg, &t, NULL), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(t, 2345);
    lg[4999] = 9.5f; /* the last token, in the last (partial) block */
    CU_ASSERT_EQUAL(numla_sampler_sample(s, lg, &t, NULL), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(t, 4999);
    for (int i = 0; i < BIG_V; i++)
        lg[i] = -INFINITY;
    CU_ASSERT_EQUAL(numla_sampler_sample(s, lg, &t, NULL), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(t, 0);
    lg[4998] = NAN; /* named by its index */
    CU_ASSERT_EQUAL(numla_sampler_sample(s, lg, &t, NULL), NUMLA_STATUS_INTERNAL);
    NUMLA_ASSERT_MSG(strstr(numla_error_message(), "logit 4998 is NaN") != NULL, "message: %s",
                     numla_error_message());
    numla_sampler_destroy(&s);
    /* a draw needs a finite largest logit */
    s = mk(1.0, 0, 1.0, 2, BIG_V);
    for (int i = 0; i < BIG_V; i++)
        lg[i] = 0;
    lg[700] = INFINITY;
    CU_ASSERT_EQUAL(numla_sampler_sample(s, lg, &t, NULL), NUMLA_STATUS_INTERNAL);
    for (int i = 0; i < BIG_V; i++)
        lg[i] = -INFINITY;
    CU_ASSERT_EQUAL(numla_sampler_sample(s, lg, &t, NULL), NUMLA_STATUS_INTERNAL);
    numla_sampler_destroy(&s);
}

/* Frequencies of the listed tokens over n draws vs want[]; every draw must be one of them. */
static void check_big_freq(numla_sampler *s, float *lg, int nt, const int *tok,
                           const double *want, int n)
{
    int cnt[8] = {0}, other = 0;
    for (int d = 0; d < n; d++) {
        int32_t t = -1;
        CU_ASSERT_EQUAL_FATAL(numla_sampler_sample(s, lg, &t, NULL), NUMLA_STATUS_OK);
        int j = 0;
        while (j < nt && tok[j] != t)
            j++;
        if (j < nt)
            cnt[j]++;
        else
            other++;
    }
    CU_ASSERT_EQUAL(other, 0);
    for (int j = 0; j < nt; j++) {
        double f = (double)cnt[j] / n;
        NUMLA_ASSERT_MSG(fabs(f - want[j]) < 0.015, "token %d: freq %.4f want %.4f", tok[j], f,
                         want[j]);
    }
}

static void test_big_vocab_distributions(void)
{
    static float lg[BIG_V];
    const int N = 20000;
    /* five tokens in different blocks carry 0.999 of the mass, the other 4995 share 0.001 */
    const int hot[5] = {7, 600, 1500, 2600, 4999};
    const double ph[5] = {0.3, 0.25, 0.2, 0.15, 0.099};
    for (int i = 0; i < BIG_V; i++)
        lg[i] = logf(0.001f / (BIG_V - 5));
    for (int j = 0; j < 5; j++)
        lg[hot[j]] = logf((float)ph[j]);
    /* no filter: the weights of every block, drawn through the block sums */
    numla_sampler *s = mk(1.0, 0, 1.0, 11, BIG_V);
    int tail = 0, cnt[5] = {0};
    for (int d = 0; d < N; d++) {
        int32_t t;
        CU_ASSERT_EQUAL_FATAL(numla_sampler_sample(s, lg, &t, NULL), NUMLA_STATUS_OK);
        int j = 0;
        while (j < 5 && hot[j] != t)
            j++;
        if (j < 5)
            cnt[j]++;
        else
            tail++;
    }
    NUMLA_ASSERT_MSG(tail < N / 200, "tail drawn %d times of %d (mass 0.001)", tail, N);
    for (int j = 0; j < 5; j++)
        NUMLA_ASSERT_MSG(fabs((double)cnt[j] / N - ph[j]) < 0.015, "token %d: freq %.4f want %.4f",
                         hot[j], (double)cnt[j] / N, ph[j]);
    numla_sampler_destroy(&s);
    /* top_p 0.6: 0.55 < 0.6 <= 0.75 keeps three */
    s = mk(1.0, 0, 0.6, 13, BIG_V);
    check_big_freq(s, lg, 3, hot, (double[]){0.4, 0.25 / 0.75, 0.2 / 0.75}, N);
    numla_sampler_destroy(&s);
    /* top_p 0.95 keeps the five (0.9 < 0.95 <= 0.999), never the tail */
    s = mk(1.0, 0, 0.95, 14, BIG_V);
    check_big_freq(s, lg, 5, hot,
                   (double[]){0.3 / 0.999, 0.25 / 0.999, 0.2 / 0.999, 0.15 / 0.999, 0.099 / 0.999},
                   N);
    numla_sampler_destroy(&s);
    /* top_k 2 (the sorted small list, which skips blocks below its last entry) */
    s = mk(1.0, 2, 1.0, 18, BIG_V);
    check_big_freq(s, lg, 2, hot, (double[]){0.3 / 0.55, 0.25 / 0.55}, N);
    numla_sampler_destroy(&s);
    /* ties across blocks: three tokens of 0.3 each; top_p 0.5 keeps the two lowest ids */
    for (int i = 0; i < BIG_V; i++)
        lg[i] = logf(0.1f / (BIG_V - 3));
    lg[100] = lg[2000] = lg[3000] = logf(0.3f);
    s = mk(1.0, 0, 0.5, 15, BIG_V);
    check_big_freq(s, lg, 2, (int[]){100, 2000}, (double[]){0.5, 0.5}, N);
    numla_sampler_destroy(&s);
    /* ties at the nucleus boundary among more candidates than the final sort handles: 10
     * tokens of logit 1 between 40 of logit 0; top_p 0.62 keeps the 10 and the 15 lowest ids
     * of the 40 (0.6135 < 0.62 <= 0.628), however the selection has shuffled them */
    for (int i = 0; i < BIG_V; i++)
        lg[i] = -30.0f;
    for (int j = 0; j < 10; j++)
        lg[400 * j + 50] = 1.0f;
    for (int j = 0; j < 40; j++)
        lg[100 * j + 3] = 0.0f;
    s = mk(1.0, 0, 0.62, 17, BIG_V);
    static int drawn[BIG_V];
    memset(drawn, 0, sizeof drawn);
    for (int d = 0; d < N; d++) {
        int32_t t;
        CU_ASSERT_EQUAL_FATAL(numla_sampler_sample(s, lg, &t, NULL), NUMLA_STATUS_OK);
        drawn[t]++;
    }
    int outside = 0, kept_zero = 0;
    for (int i = 0; i < BIG_V; i++) {
        int high = lg[i] == 1.0f, zero_in = lg[i] == 0.0f && i / 100 < 15;
        outside += drawn[i] && !high && !zero_in;
        kept_zero += zero_in && drawn[i] > 0;
    }
    CU_ASSERT_EQUAL(outside, 0);
    CU_ASSERT_EQUAL(kept_zero, 15); /* ~470 draws each */
    numla_sampler_destroy(&s);
    /* top_k beyond the small-list path: 301 equal tokens, top_k 300 keeps the 300 lowest ids */
    for (int i = 0; i < BIG_V; i++)
        lg[i] = -30.0f;
    for (int j = 0; j < 301; j++)
        lg[16 * j] = 0.0f;
    s = mk(1.0, 300, 1.0, 16, BIG_V);
    static int seen[BIG_V];
    memset(seen, 0, sizeof seen);
    for (int d = 0; d < N; d++) {
        int32_t t;
        numla_sampler_sample(s, lg, &t, NULL);
        seen[t]++;
    }
    int bad = 0, missed = 0;
    for (int i = 0; i < BIG_V; i++) {
        int in = i % 16 == 0 && i / 16 < 300;
        bad += !in && seen[i];
        missed += in && !seen[i];
    }
    CU_ASSERT_EQUAL(bad, 0);    /* nothing outside the top 300 (token 4800 is the 301st) */
    CU_ASSERT_EQUAL(missed, 0); /* ~67 draws each */
    numla_sampler_destroy(&s);
}

static const float *ref_key_;
static int ref_cmp_(const void *a, const void *b)
{
    int i = *(const int *)a, j = *(const int *)b;
    if (ref_key_[i] != ref_key_[j])
        return ref_key_[i] > ref_key_[j] ? -1 : 1;
    return i - j;
}

/* top_p on spread-out logits against a nucleus computed here by a full sort in double. */
static void test_nucleus_reference(void)
{
    static float lg[BIG_V];
    static int ord[BIG_V], in[BIG_V];
    uint32_t r = 99;
    for (int i = 0; i < BIG_V; i++)
        lg[i] = (float)(lcg_(&r) % 100000) * 1e-4f * 6.0f; /* 0..6: a long, flat tail */
    const double temp = 0.5, top_p = 0.9;
    for (int i = 0; i < BIG_V; i++)
        ord[i] = i;
    ref_key_ = lg;
    qsort(ord, BIG_V, sizeof *ord, ref_cmp_);
    double z = 0;
    for (int i = 0; i < BIG_V; i++)
        z += exp((lg[i] - lg[ord[0]]) / temp);
    double cum = 0;
    int n = 0;
    while (n < BIG_V) {
        cum += exp((lg[ord[n]] - lg[ord[0]]) / temp) / z;
        in[ord[n++]] = 1;
        if (cum >= top_p)
            break;
    }
    NUMLA_ASSERT_MSG(n > 50 && n < BIG_V, "nucleus of %d tokens (want a few hundred)", n);
    numla_sampler *s = mk(temp, 0, top_p, 21, BIG_V);
    const int N = 20000;
    int outside = 0, top = 0;
    for (int d = 0; d < N; d++) {
        int32_t t;
        CU_ASSERT_EQUAL_FATAL(numla_sampler_sample(s, lg, &t, NULL), NUMLA_STATUS_OK);
        outside += !in[t];
        top += t == ord[0];
    }
    CU_ASSERT_EQUAL(outside, 0);
    const double want = 1.0 / (cum * z); /* the top token's share of the nucleus */
    NUMLA_ASSERT_MSG(fabs((double)top / N - want) < 0.01, "top token freq %.4f want %.4f",
                     (double)top / N, want);
    numla_sampler_destroy(&s);
}

static void test_logprobs(void)
{
    float lg[5] = {1.0f, 3.0f, 2.0f, 3.0f, -2.0f};
    numla_sampling_params p;
    numla_sampling_params_default(&p);
    p.temperature = 0;
    p.logprobs = 3;
    numla_sampler *s = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_sampler_create(&p, 5, &s), NUMLA_STATUS_OK);
    numla_logprob_entry e;
    int32_t t;
    CU_ASSERT_EQUAL(numla_sampler_sample(s, lg, &t, &e), NUMLA_STATUS_OK);
    double z = 0;
    for (int i = 0; i < 5; i++)
        z += exp(lg[i]);
    CU_ASSERT_EQUAL(t, 1);
    CU_ASSERT_EQUAL(e.token, 1);
    CU_ASSERT_DOUBLE_EQUAL(e.logprob, 3.0 - log(z), 1e-5);
    CU_ASSERT_EQUAL(e.num_top, 3);
    CU_ASSERT_EQUAL(e.top_tokens[0], 1);
    CU_ASSERT_EQUAL(e.top_tokens[1], 3);
    CU_ASSERT_EQUAL(e.top_tokens[2], 2);
    CU_ASSERT_DOUBLE_EQUAL(e.top_logprobs[2], 2.0 - log(z), 1e-5);
    numla_sampler_destroy(&s);
}

static void test_stop_rules(void)
{
    numla_sampling_params p;
    numla_sampling_params_default(&p);
    p.num_stop = 2;
    p.stop_token_ids[0] = 5;
    p.stop_token_ids[1] = 9;
    numla_sampler *s = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_sampler_create(&p, 16, &s), NUMLA_STATUS_OK);
    int32_t eos[1] = {2};
    CU_ASSERT_TRUE(numla_sampler_is_stop(s, 9, eos, 1));
    CU_ASSERT_TRUE(numla_sampler_is_stop(s, 2, eos, 1));
    CU_ASSERT_FALSE(numla_sampler_is_stop(s, 3, eos, 1));
    s->p.ignore_eos = 1;
    CU_ASSERT_FALSE(numla_sampler_is_stop(s, 2, eos, 1));
    CU_ASSERT_TRUE(numla_sampler_is_stop(s, 5, eos, 1));
    numla_sampler_destroy(&s);
}

static void test_bad_params(void)
{
    numla_sampling_params p;
    numla_sampler *s = NULL;
    numla_sampling_params_default(&p);
    p.temperature = -1;
    CU_ASSERT_EQUAL(numla_sampler_create(&p, 8, &s), NUMLA_STATUS_INVALID_ARG);
    numla_sampling_params_default(&p);
    p.top_p = 0;
    CU_ASSERT_EQUAL(numla_sampler_create(&p, 8, &s), NUMLA_STATUS_INVALID_ARG);
    numla_sampling_params_default(&p);
    p.logprobs = 1000;
    CU_ASSERT_EQUAL(numla_sampler_create(&p, 8, &s), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_PTR_NULL(s);
    numla_sampling_params_default(&p);
    CU_ASSERT_EQUAL_FATAL(numla_sampler_create(&p, 2, &s), NUMLA_STATUS_OK);
    float nan_lg[2] = {NAN, 0};
    int32_t t;
    CU_ASSERT_NOT_EQUAL(numla_sampler_sample(s, nan_lg, &t, NULL), NUMLA_STATUS_OK);
    numla_sampler_destroy(&s);
}

NUMLA_TEST_SUITE(sampler, NULL, NULL, NUMLA_TEST(test_greedy), NUMLA_TEST(test_distributions),
                 NUMLA_TEST(test_seed_reproducible), NUMLA_TEST(test_logprobs),
                 NUMLA_TEST(test_stop_rules), NUMLA_TEST(test_bad_params),
                 NUMLA_TEST(test_big_vocab_greedy), NUMLA_TEST(test_big_vocab_distributions),
                 NUMLA_TEST(test_nucleus_reference))
