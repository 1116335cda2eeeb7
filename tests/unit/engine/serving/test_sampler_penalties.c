/* Tests for the sampler's logit processing (engine/serving/sampler.h): logit_bias,
 * repetition_penalty, frequency_penalty, presence_penalty and min_p, alone and together, greedy
 * and sampled, against a reference written here: plain double-precision code that applies each
 * rule to the logits as docs/serving.md states it (vLLM's order) and gives the next token's
 * probabilities. Greedy rows must pick the reference's argmax; sampled rows are checked with a
 * chi-square test of many seeded draws against the reference's probabilities (and a token the
 * reference excludes must never come). Also: the logits read as given after a call, the
 * returned logprobs are of the raw logits, tokens reach the penalties only through
 * numla_sampler_add_tokens, and create refuses out-of-range values. */
#include "test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/serving/sampler.h"

/* ---- the reference ------------------------------------------------------------------------ */

typedef struct ref_hist {
    const int32_t *prompt;
    int np;
    const int32_t *gen;
    int ng;
} ref_hist;

static const double *ref_sort_key_;
static int ref_desc_(const void *a, const void *b)
{
    const int i = *(const int *)a, j = *(const int *)b;
    if (ref_sort_key_[i] != ref_sort_key_[j])
        return ref_sort_key_[i] > ref_sort_key_[j] ? -1 : 1;
    return i - j;
}

/* The adjusted logits x (V): bias, then repetition over prompt and generated tokens, then
 * frequency and presence over the generated ones. */
static void ref_adjust(const float *lg, int V, const numla_sampling_params *p, const ref_hist *h,
                       double *x)
{
    int *cnt = calloc((size_t)V, sizeof *cnt), *in_prompt = calloc((size_t)V, sizeof *in_prompt);
    for (int i = 0; i < h->np; i++)
        in_prompt[h->prompt[i]] = 1;
    for (int i = 0; i < h->ng; i++)
        cnt[h->gen[i]]++;
    for (int i = 0; i < V; i++)
        x[i] = lg[i];
    for (int i = 0; i < p->num_logit_bias; i++)
        x[p->logit_bias_tokens[i]] += p->logit_bias_values[i];
    for (int i = 0; i < V; i++) {
        if (in_prompt[i] || cnt[i] > 0) {
            if (x[i] > 0)
                x[i] /= p->repetition_penalty;
            else
                x[i] *= p->repetition_penalty;
        }
        x[i] -= p->frequency_penalty * cnt[i];
        if (cnt[i] > 0)
            x[i] -= p->presence_penalty;
    }
    free(cnt);
    free(in_prompt);
}

/* prob (V): the next token's probabilities under p after history h (greedy: 1 on the argmax,
 * lowest id on ties). */
static void ref_probs(const float *lg, int V, const numla_sampling_params *p, const ref_hist *h,
                      double *prob)
{
    double *x = malloc((size_t)V * sizeof *x), *pr = malloc((size_t)V * sizeof *pr);
    int *ord = malloc((size_t)V * sizeof *ord), *keep = calloc((size_t)V, sizeof *keep);
    ref_adjust(lg, V, p, h, x);
    int best = 0;
    for (int i = 1; i < V; i++)
        if (x[i] > x[best])
            best = i;
    for (int i = 0; i < V; i++)
        prob[i] = 0;
    if (p->temperature == 0) {
        prob[best] = 1;
        goto out;
    }
    /* temperature, softmax */
    double z = 0;
    for (int i = 0; i < V; i++)
        z += exp((x[i] - x[best]) / p->temperature);
    for (int i = 0; i < V; i++)
        pr[i] = exp((x[i] - x[best]) / p->temperature) / z;
    /* min_p: below min_p times the largest probability goes */
    int n = 0;
    for (int i = 0; i < V; i++)
        ord[i] = i;
    ref_sort_key_ = x;
    qsort(ord, (size_t)V, sizeof *ord, ref_desc_);
    for (int r = 0; r < V; r++)
        if (pr[ord[r]] >= p->min_p * pr[best])
            ord[n++] = ord[r]; /* still in descending order */
    /* top_k */
    if (p->top_k > 0 && p->top_k < n)
        n = p->top_k;
    /* top_p over what is left, renormalised */
    double kept = 0;
    for (int r = 0; r < n; r++)
        kept += pr[ord[r]];
    double cum = 0;
    int m = 0;
    while (m < n) {
        cum += pr[ord[m++]] / kept;
        if (cum >= p->top_p)
            break;
    }
    double zz = 0;
    for (int r = 0; r < m; r++)
        zz += pr[ord[r]];
    for (int r = 0; r < m; r++)
        prob[ord[r]] = pr[ord[r]] / zz;
out:
    free(x);
    free(pr);
    free(ord);
    free(keep);
}

/* ---- helpers ------------------------------------------------------------------------------ */

static numla_sampler *mk(const numla_sampling_params *p, int V, const ref_hist *h)
{
    numla_sampler *s = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_sampler_create(p, V, &s), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_sampler_add_tokens(s, h->prompt, h->np, 0), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_sampler_add_tokens(s, h->gen, h->ng, 1), NUMLA_STATUS_OK);
    return s;
}

static void params(numla_sampling_params *p, double temp, uint64_t seed)
{
    numla_sampling_params_default(p);
    p->temperature = temp;
    p->seed = seed;
    p->has_seed = 1;
}

static void bias(numla_sampling_params *p, int32_t tok, float b)
{
    p->logit_bias_tokens[p->num_logit_bias] = tok;
    p->logit_bias_values[p->num_logit_bias++] = b;
}

/* The chi-square statistic's 1e-4 upper quantile for df degrees of freedom (Wilson-Hilferty). */
static double chi2_crit(int df)
{
    const double a = 2.0 / (9.0 * df), zq = 3.719;
    return df * pow(1 - a + zq * sqrt(a), 3);
}

/* n seeded draws from s against want (V): tokens of probability 0 never, the rest by a
 * chi-square test at 1e-4; the logits read as given after every call. */
static void check_draws(numla_sampler *s, float *lg, int V, const double *want, int n,
                        const char *what)
{
    int *cnt = calloc((size_t)V, sizeof *cnt);
    float *copy = malloc((size_t)V * sizeof *copy);
    memcpy(copy, lg, (size_t)V * sizeof *copy);
    int changed = 0;
    for (int d = 0; d < n; d++) {
        int32_t t = -1;
        CU_ASSERT_EQUAL_FATAL(numla_sampler_sample(s, lg, &t, NULL), NUMLA_STATUS_OK);
        CU_ASSERT_FATAL(t >= 0 && t < V);
        cnt[t]++;
        changed |= memcmp(copy, lg, (size_t)V * sizeof *copy) != 0;
    }
    NUMLA_ASSERT_MSG(!changed, "%s: the logits changed", what);
    double chi2 = 0;
    int df = -1;
    for (int i = 0; i < V; i++) {
        if (want[i] == 0) {
            NUMLA_ASSERT_MSG(cnt[i] == 0, "%s: token %d drawn %d times, reference excludes it",
                             what, i, cnt[i]);
            continue;
        }
        const double e = want[i] * n;
        chi2 += (cnt[i] - e) * (cnt[i] - e) / e;
        df++;
    }
    if (df > 0)
        NUMLA_ASSERT_MSG(chi2 < chi2_crit(df), "%s: chi-square %.1f over %d df (limit %.1f)",
                         what, chi2, df, chi2_crit(df));
    free(cnt);
    free(copy);
}

/* ---- a small vocabulary: every field alone and together ---------------------------------- */

enum { SV = 12 };
static const float SMALL_LG[SV] = {2.0f, 1.6f, 1.2f, 0.9f, 0.5f, 0.1f,
                                   -0.3f, -0.8f, -1.5f, 1.4f, 0.7f, -INFINITY};
static const int32_t SMALL_PROMPT[] = {0, 3, 3, 7, 9, 8};
static const int32_t SMALL_GEN[] = {1, 1, 1, 4, 9, 6};
static const ref_hist SMALL_H = {SMALL_PROMPT, 6, SMALL_GEN, 6};

typedef struct small_case {
    const char *name;
    double temp, pres, freq, rep, min_p, top_p;
    int32_t top_k;
    int with_bias;
} small_case;

static const small_case SMALL_CASES[] = {
    {"none", 1.0, 0, 0, 1, 0, 1, 0, 0},
    {"presence", 1.0, 1.0, 0, 1, 0, 1, 0, 0},
    {"presence -2", 1.0, -2.0, 0, 1, 0, 1, 0, 0},
    {"frequency", 1.0, 0, 0.6, 1, 0, 1, 0, 0},
    {"frequency -1", 0.8, 0, -1.0, 1, 0, 1, 0, 0},
    {"repetition 1.8", 1.0, 0, 0, 1.8, 0, 1, 0, 0},
    {"repetition 0.5", 1.0, 0, 0, 0.5, 0, 1, 0, 0},
    {"logit_bias", 1.0, 0, 0, 1, 0, 1, 0, 1},
    {"min_p", 0.7, 0, 0, 1, 0.15, 1, 0, 0},
    {"min_p top_k top_p", 1.3, 0, 0, 1, 0.3, 0.8, 5, 0},
    {"all, top_k", 0.9, 0.4, 0.3, 1.3, 0.05, 0.95, 6, 1},
    {"all, nucleus", 1.1, -0.5, 0.7, 1.5, 0.1, 0.9, 0, 1},
    {"all, whole vocabulary", 1.0, 2.0, -0.5, 0.8, 0.02, 1, 0, 1},
};

static void small_params(const small_case *c, numla_sampling_params *p, uint64_t seed)
{
    params(p, c->temp, seed);
    p->presence_penalty = c->pres;
    p->frequency_penalty = c->freq;
    p->repetition_penalty = c->rep;
    p->min_p = c->min_p;
    p->top_p = c->top_p;
    p->top_k = c->top_k;
    if (c->with_bias) {
        bias(p, 5, 2.5f);   /* up */
        bias(p, 0, -3.0f);  /* down, and in the prompt */
        bias(p, 11, 50.0f); /* -inf stays -inf */
        bias(p, 8, -100.0f);
    }
}

static void test_sampled_small(void)
{
    float lg[SV];
    memcpy(lg, SMALL_LG, sizeof lg);
    for (size_t c = 0; c < sizeof SMALL_CASES / sizeof SMALL_CASES[0]; c++) {
        numla_sampling_params p;
        small_params(&SMALL_CASES[c], &p, 1000 + c);
        double want[SV];
        ref_probs(lg, SV, &p, &SMALL_H, want);
        numla_sampler *s = mk(&p, SV, &SMALL_H);
        check_draws(s, lg, SV, want, 30000, SMALL_CASES[c].name);
        numla_sampler_destroy(&s);
    }
}

static void test_greedy_small(void)
{
    float lg[SV];
    memcpy(lg, SMALL_LG, sizeof lg);
    for (size_t c = 0; c < sizeof SMALL_CASES / sizeof SMALL_CASES[0]; c++) {
        numla_sampling_params p;
        small_params(&SMALL_CASES[c], &p, 1);
        p.temperature = 0;
        double want[SV];
        ref_probs(lg, SV, &p, &SMALL_H, want);
        numla_sampler *s = mk(&p, SV, &SMALL_H);
        int32_t t = -1;
        CU_ASSERT_EQUAL(numla_sampler_sample(s, lg, &t, NULL), NUMLA_STATUS_OK);
        NUMLA_ASSERT_MSG(t >= 0 && want[t] == 1, "%s: greedy picked %d", SMALL_CASES[c].name, t);
        CU_ASSERT_EQUAL(memcmp(lg, SMALL_LG, sizeof lg), 0);
        numla_sampler_destroy(&s);
    }
}

/* Each rule's meaning on hand-made rows, greedy: the answer written out, not computed. */
static void test_greedy_rules(void)
{
    numla_sampling_params p;
    int32_t t = -1;
    numla_sampler *s;
    /* logit_bias forces a token, even the least likely one; -100 bans the best */
    float a[4] = {3.0f, 1.0f, 0.5f, -4.0f};
    params(&p, 0, 1);
    bias(&p, 3, 10.0f);
    s = mk(&p, 4, &(ref_hist){0});
    CU_ASSERT(numla_sampler_sample(s, a, &t, NULL) == NUMLA_STATUS_OK && t == 3);
    numla_sampler_destroy(&s);
    params(&p, 0, 1);
    bias(&p, 0, -100.0f);
    s = mk(&p, 4, &(ref_hist){0});
    CU_ASSERT(numla_sampler_sample(s, a, &t, NULL) == NUMLA_STATUS_OK && t == 1);
    numla_sampler_destroy(&s);
    /* repetition: a positive logit is divided, a negative one multiplied (both lower it) */
    float b[3] = {2.0f, 1.5f, -0.1f};
    const int32_t pr0[] = {0};
    params(&p, 0, 1);
    p.repetition_penalty = 2.0; /* 2 / 2 = 1 < 1.5 */
    s = mk(&p, 3, &(ref_hist){pr0, 1, NULL, 0});
    CU_ASSERT(numla_sampler_sample(s, b, &t, NULL) == NUMLA_STATUS_OK && t == 1);
    numla_sampler_destroy(&s);
    float c[2] = {-1.0f, -1.2f}; /* -1 · 1.5 = -1.5 < -1.2; dividing would keep token 0 */
    params(&p, 0, 1);
    p.repetition_penalty = 1.5;
    s = mk(&p, 2, &(ref_hist){pr0, 1, NULL, 0});
    CU_ASSERT(numla_sampler_sample(s, c, &t, NULL) == NUMLA_STATUS_OK && t == 1);
    numla_sampler_destroy(&s);
    /* ... and it counts generated tokens too */
    params(&p, 0, 1);
    p.repetition_penalty = 1.5;
    s = mk(&p, 2, &(ref_hist){NULL, 0, pr0, 1});
    CU_ASSERT(numla_sampler_sample(s, c, &t, NULL) == NUMLA_STATUS_OK && t == 1);
    numla_sampler_destroy(&s);
    /* frequency and presence count generated tokens only, never the prompt */
    float d[3] = {1.0f, 0.7f, 0.2f};
    const int32_t many0[] = {0, 0, 0, 0, 0, 0, 0, 0};
    params(&p, 0, 1);
    p.frequency_penalty = 2.0;
    p.presence_penalty = 2.0;
    s = mk(&p, 3, &(ref_hist){many0, 8, NULL, 0});
    CU_ASSERT(numla_sampler_sample(s, d, &t, NULL) == NUMLA_STATUS_OK && t == 0);
    numla_sampler_destroy(&s);
    /* frequency scales with the count: once 1 - 0.2 = 0.8 > 0.7; twice 0.6 < 0.7 */
    params(&p, 0, 1);
    p.frequency_penalty = 0.2;
    s = mk(&p, 3, &(ref_hist){NULL, 0, many0, 1});
    CU_ASSERT(numla_sampler_sample(s, d, &t, NULL) == NUMLA_STATUS_OK && t == 0);
    CU_ASSERT_EQUAL(numla_sampler_add_tokens(s, many0, 1, 1), NUMLA_STATUS_OK);
    CU_ASSERT(numla_sampler_sample(s, d, &t, NULL) == NUMLA_STATUS_OK && t == 1);
    numla_sampler_destroy(&s);
    /* presence does not: 0.25 once or eight times leaves 0.75 > 0.7 */
    params(&p, 0, 1);
    p.presence_penalty = 0.25;
    s = mk(&p, 3, &(ref_hist){NULL, 0, many0, 8});
    CU_ASSERT(numla_sampler_sample(s, d, &t, NULL) == NUMLA_STATUS_OK && t == 0);
    numla_sampler_destroy(&s);
    params(&p, 0, 1);
    p.presence_penalty = 0.35;
    s = mk(&p, 3, &(ref_hist){NULL, 0, many0, 1});
    CU_ASSERT(numla_sampler_sample(s, d, &t, NULL) == NUMLA_STATUS_OK && t == 1);
    numla_sampler_destroy(&s);
    /* the bias comes before the repetition penalty: (-1 + 2) / 2 = 0.5 > 0.3 (the other way
     * round: -1 · 2 + 2 = 0 < 0.3) */
    float e[3] = {-1.0f, 0.3f, 0.2f};
    params(&p, 0, 1);
    p.repetition_penalty = 2.0;
    bias(&p, 0, 2.0f);
    s = mk(&p, 3, &(ref_hist){pr0, 1, NULL, 0});
    CU_ASSERT(numla_sampler_sample(s, e, &t, NULL) == NUMLA_STATUS_OK && t == 0);
    numla_sampler_destroy(&s);
    float f[2] = {0.6f, 1.0f}; /* (0.6 + 1) / 2 = 0.8 < 1 (the other way round: 1.3 > 1) */
    params(&p, 0, 1);
    p.repetition_penalty = 2.0;
    bias(&p, 0, 1.0f);
    s = mk(&p, 2, &(ref_hist){pr0, 1, NULL, 0});
    CU_ASSERT(numla_sampler_sample(s, f, &t, NULL) == NUMLA_STATUS_OK && t == 1);
    numla_sampler_destroy(&s);
    /* min_p does not change the argmax (vLLM: argmax-invariant) */
    params(&p, 0, 1);
    p.min_p = 1;
    s = mk(&p, 3, &(ref_hist){0});
    CU_ASSERT(numla_sampler_sample(s, d, &t, NULL) == NUMLA_STATUS_OK && t == 0);
    numla_sampler_destroy(&s);
}

/* A greedy sequence fed back token by token (as the scheduler does) with a frequency penalty
 * against the reference with the same history: the counts accumulate. */
static void test_greedy_sequence(void)
{
    float lg[6] = {2.0f, 1.8f, 1.5f, 1.4f, 0.0f, -1.0f};
    const int32_t prompt[] = {0, 1, 2};
    numla_sampling_params p;
    params(&p, 0, 1);
    p.frequency_penalty = 0.35;
    p.presence_penalty = 0.1;
    p.repetition_penalty = 1.1;
    int32_t gen[40];
    numla_sampler *s = mk(&p, 6, &(ref_hist){prompt, 3, NULL, 0});
    int distinct = 0, seen[6] = {0};
    for (int i = 0; i < 40; i++) {
        double want[6];
        ref_probs(lg, 6, &p, &(ref_hist){prompt, 3, gen, i}, want);
        int32_t t = -1;
        CU_ASSERT_EQUAL_FATAL(numla_sampler_sample(s, lg, &t, NULL), NUMLA_STATUS_OK);
        NUMLA_ASSERT_MSG(t >= 0 && want[t] == 1, "step %d: picked %d", i, t);
        if (t < 0)
            break;
        gen[i] = t;
        distinct += !seen[t];
        seen[t] = 1;
        CU_ASSERT_EQUAL_FATAL(numla_sampler_add_tokens(s, &t, 1, 1), NUMLA_STATUS_OK);
    }
    CU_ASSERT(distinct >= 4); /* without the penalty every step would be token 0 */
    numla_sampler_destroy(&s);
}

/* The logprobs are of the raw logits whatever the processing, and the row is as given. */
static void test_logprobs_raw(void)
{
    float lg[5] = {1.0f, 3.0f, 2.0f, 2.5f, -2.0f};
    float copy[5];
    memcpy(copy, lg, sizeof lg);
    double z = 0;
    for (int i = 0; i < 5; i++)
        z += exp(lg[i]);
    const int32_t gen[] = {1, 1};
    for (int temp = 0; temp < 2; temp++) {
        numla_sampling_params p;
        params(&p, temp ? 1.0 : 0.0, 5);
        p.logprobs = 2;
        p.frequency_penalty = 2.0; /* token 1: 3 - 4 = -1 */
        bias(&p, 4, 20.0f);        /* token 4: 18, drawn always */
        numla_sampler *s = mk(&p, 5, &(ref_hist){NULL, 0, gen, 2});
        numla_logprob_entry e;
        int32_t t = -1;
        CU_ASSERT_EQUAL(numla_sampler_sample(s, lg, &t, &e), NUMLA_STATUS_OK);
        CU_ASSERT(t == 4 && e.token == 4);
        CU_ASSERT_DOUBLE_EQUAL(e.logprob, -2.0 - log(z), 1e-5);
        CU_ASSERT(e.num_top == 2 && e.top_tokens[0] == 1 && e.top_tokens[1] == 3);
        CU_ASSERT_DOUBLE_EQUAL(e.top_logprobs[0], 3.0 - log(z), 1e-5);
        CU_ASSERT_EQUAL(memcmp(lg, copy, sizeof lg), 0);
        numla_sampler_destroy(&s);
    }
}

/* A token touched by both the bias and a penalty, and a bias entry given twice, are put back
 * exactly; the bias adds up as given. */
static void test_restore(void)
{
    float lg[4] = {0.3f, -0.7f, 1.1f, 0.2f};
    float copy[4];
    memcpy(copy, lg, sizeof lg);
    numla_sampling_params p;
    params(&p, 0, 1);
    p.repetition_penalty = 3.0;
    p.frequency_penalty = 0.5;
    bias(&p, 1, 1.0f);
    bias(&p, 1, 1.0f);
    bias(&p, 2, -0.5f);
    const int32_t prompt[] = {1, 2}, gen[] = {2};
    numla_sampler *s = mk(&p, 4, &(ref_hist){prompt, 2, gen, 1});
    int32_t t = -1;
    CU_ASSERT_EQUAL(numla_sampler_sample(s, lg, &t, NULL), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(t, 1); /* (-0.7 + 2) / 3 = 0.43 > 0.3 */
    CU_ASSERT_EQUAL(memcmp(lg, copy, sizeof lg), 0);
    numla_sampler_destroy(&s);
}

/* Tokens reach the penalties only as far as they matter: none without a penalty (logit_bias
 * and min_p need no history), the prompt only with a repetition_penalty; a token outside the
 * vocabulary is refused. */
static void test_add_tokens(void)
{
    const int32_t toks[] = {1, 2, 2, 3};
    numla_sampling_params p;
    params(&p, 1.0, 1);
    p.min_p = 0.5;
    bias(&p, 2, 1.0f);
    numla_sampler *s = mk(&p, 8, &(ref_hist){toks, 4, toks, 4});
    CU_ASSERT(s->num_seen == 0 && s->seen_tok == NULL);
    numla_sampler_destroy(&s);
    params(&p, 1.0, 1);
    p.presence_penalty = 0.5;
    s = mk(&p, 8, &(ref_hist){toks, 4, NULL, 0});
    CU_ASSERT_EQUAL(s->num_seen, 0);
    CU_ASSERT_EQUAL(numla_sampler_add_tokens(s, toks, 4, 1), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(s->num_seen, 3);
    CU_ASSERT_EQUAL(numla_sampler_add_tokens(s, (const int32_t[]){8}, 1, 1),
                    NUMLA_STATUS_INVALID_ARG);
    numla_sampler_destroy(&s);
    params(&p, 1.0, 1);
    p.repetition_penalty = 1.2;
    s = mk(&p, 8, &(ref_hist){toks, 4, NULL, 0});
    CU_ASSERT_EQUAL(s->num_seen, 3);
    numla_sampler_destroy(&s);
}

/* ---- a vocabulary of many blocks, many distinct tokens (the table grows) ------------------ */

enum { BV = 3000 };

static uint32_t lcg_(uint32_t *x)
{
    *x = *x * 1664525u + 1013904223u;
    return *x >> 8;
}

static void test_big_vocab(void)
{
    static float lg[BV];
    static int32_t prompt[2000], gen[600];
    static double want[BV];
    uint32_t r = 7;
    for (int i = 0; i < BV; i++) /* a flat tail in -2..2, and 60 tokens (ids 0..59) in 5..8 */
        lg[i] = i < 60 ? 5.0f + (float)(lcg_(&r) % 3000) * 1e-3f
                       : (float)(lcg_(&r) % 4000) * 1e-3f - 2.0f;
    for (int i = 0; i < 2000; i++)
        prompt[i] = (int32_t)(lcg_(&r) % BV);
    for (int i = 0; i < 600; i++) /* repeats: the top tokens, often */
        gen[i] = (int32_t)(i % 3 ? lcg_(&r) % BV : lcg_(&r) % 40);
    const ref_hist h = {prompt, 2000, gen, 600};
    numla_sampling_params p;
    for (int round = 0; round < 6; round++) {
        params(&p, 0, 40 + round);
        p.repetition_penalty = 1.0 + 0.15 * round;
        p.frequency_penalty = 0.3 * (round % 3);
        p.presence_penalty = round % 2 ? 0.5 : -0.3;
        for (int i = 0; i < 300; i++)
            bias(&p, (int32_t)((i * 7919 + round) % BV), (float)((i % 11) - 5) * 0.3f);
        ref_probs(lg, BV, &p, &h, want);
        numla_sampler *s = mk(&p, BV, &h);
        CU_ASSERT(s->num_seen > (round ? 1000 : 300)); /* round 0: no repetition_penalty */
        int32_t t = -1;
        CU_ASSERT_EQUAL(numla_sampler_sample(s, lg, &t, NULL), NUMLA_STATUS_OK);
        NUMLA_ASSERT_MSG(t >= 0 && want[t] == 1, "round %d: greedy picked %d", round, t);
        numla_sampler_destroy(&s);
    }
    /* sampled: min_p over the whole vocabulary (the blocked draw), with top_p (the nucleus),
     * with top_k; the reference's support holds a few dozen tokens */
    static const struct {
        double temp, min_p, top_p;
        int32_t top_k;
    } sc[] = {{1.0, 0.05, 1.0, 0}, {0.8, 0.02, 0.9, 0}, {1.2, 0.1, 0.95, 30}};
    for (size_t c = 0; c < sizeof sc / sizeof sc[0]; c++) {
        params(&p, sc[c].temp, 77 + c);
        p.min_p = sc[c].min_p;
        p.top_p = sc[c].top_p;
        p.top_k = sc[c].top_k;
        p.repetition_penalty = 1.3;
        p.frequency_penalty = 0.2;
        p.presence_penalty = 0.4;
        bias(&p, 5, 3.0f);
        bias(&p, 2999, 6.0f);
        ref_probs(lg, BV, &p, &h, want);
        int support = 0;
        for (int i = 0; i < BV; i++)
            support += want[i] > 0;
        NUMLA_ASSERT_MSG(support >= 10 && support <= 300, "case %zu: support %d", c, support);
        numla_sampler *s = mk(&p, BV, &h);
        char name[32];
        snprintf(name, sizeof name, "big vocabulary %zu", c);
        check_draws(s, lg, BV, want, 40000, name);
        numla_sampler_destroy(&s);
    }
}

static void test_bad_params(void)
{
    numla_sampling_params p;
    numla_sampler *s = NULL;
    params(&p, 1, 1);
    p.presence_penalty = 2.5;
    CU_ASSERT_EQUAL(numla_sampler_create(&p, 8, &s), NUMLA_STATUS_INVALID_ARG);
    params(&p, 1, 1);
    p.frequency_penalty = -2.01;
    CU_ASSERT_EQUAL(numla_sampler_create(&p, 8, &s), NUMLA_STATUS_INVALID_ARG);
    params(&p, 1, 1);
    p.repetition_penalty = 0;
    CU_ASSERT_EQUAL(numla_sampler_create(&p, 8, &s), NUMLA_STATUS_INVALID_ARG);
    params(&p, 1, 1);
    p.repetition_penalty = NAN;
    CU_ASSERT_EQUAL(numla_sampler_create(&p, 8, &s), NUMLA_STATUS_INVALID_ARG);
    params(&p, 1, 1);
    p.min_p = 1.5;
    CU_ASSERT_EQUAL(numla_sampler_create(&p, 8, &s), NUMLA_STATUS_INVALID_ARG);
    params(&p, 1, 1);
    bias(&p, 8, 1.0f);
    CU_ASSERT_EQUAL(numla_sampler_create(&p, 8, &s), NUMLA_STATUS_INVALID_ARG);
    params(&p, 1, 1);
    bias(&p, 3, 101.0f);
    CU_ASSERT_EQUAL(numla_sampler_create(&p, 8, &s), NUMLA_STATUS_INVALID_ARG);
    params(&p, 1, 1);
    p.num_logit_bias = NUMLA_SAMPLER_MAX_LOGIT_BIAS + 1;
    CU_ASSERT_EQUAL(numla_sampler_create(&p, 8, &s), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_PTR_NULL(s);
    /* the ends of the ranges are fine */
    params(&p, 1, 1);
    p.presence_penalty = -2;
    p.frequency_penalty = 2;
    p.repetition_penalty = 1e-3;
    p.min_p = 1;
    bias(&p, 7, -100.0f);
    bias(&p, 0, 100.0f);
    CU_ASSERT_EQUAL(numla_sampler_create(&p, 8, &s), NUMLA_STATUS_OK);
    numla_sampler_destroy(&s);
}

NUMLA_TEST_SUITE(sampler_penalties, NULL, NULL, NUMLA_TEST(test_greedy_rules),
                 NUMLA_TEST(test_greedy_small), NUMLA_TEST(test_sampled_small),
                 NUMLA_TEST(test_greedy_sequence), NUMLA_TEST(test_logprobs_raw),
                 NUMLA_TEST(test_restore), NUMLA_TEST(test_add_tokens),
                 NUMLA_TEST(test_big_vocab), NUMLA_TEST(test_bad_params))
