/* Tests for engine/sampler: greedy, temperature, top_k, top_p against closed-form
 * distributions, per-request seeds, stop rules, logprobs, bad parameters. */
#include "test_util.h"

#include <math.h>
#include <stdlib.h>

#include "engine/sampler.h"

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
static void check_freq(numla_sampler *s, const float *lg, int V, const double *want, int n)
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
    p.max_tokens = -2;
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
                 NUMLA_TEST(test_stop_rules), NUMLA_TEST(test_bad_params))
