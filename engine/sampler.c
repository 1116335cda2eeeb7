/* engine/sampler.c — per-request sampling, stop rules and logprobs (see sampler.h). */
#include "engine/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void numla_sampling_params_default(numla_sampling_params *p)
{
    memset(p, 0, sizeof *p);
    p->temperature = 1.0;
    p->top_k = 0;
    p->top_p = 1.0;
    p->max_tokens = 16;
    p->logprobs = -1;
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t *s)
{
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

double numla_sampler_uniform(numla_sampler *s)
{
    return (double)(xoshiro_next(s->rng) >> 11) * 0x1.0p-53;
}

numla_status numla_sampler_create(const numla_sampling_params *p, int32_t vocab,
                                  numla_sampler **out)
{
    *out = NULL;
    if (vocab < 1)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "sampler: vocab %d", vocab);
    if (!(p->temperature >= 0) || !isfinite(p->temperature))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "sampler: temperature %g must be >= 0", p->temperature);
    if (!(p->top_p > 0 && p->top_p <= 1))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "sampler: top_p %g must be in (0, 1]", p->top_p);
    if (p->max_tokens < 0)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "sampler: max_tokens %d must be >= 0", p->max_tokens);
    if (p->logprobs > NUMLA_SAMPLER_MAX_LOGPROBS)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "sampler: logprobs %d exceeds %d", p->logprobs,
                   NUMLA_SAMPLER_MAX_LOGPROBS);
    numla_sampler *s = calloc(1, sizeof *s);
    if (!s)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "sampler: no memory");
    s->p = *p;
    s->vocab = vocab;
    s->prob = malloc((size_t)vocab * sizeof *s->prob);
    s->order = malloc((size_t)vocab * sizeof *s->order);
    if (!s->prob || !s->order) {
        numla_sampler_destroy(&s);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "sampler: no memory for %d-token scratch", vocab);
    }
    uint64_t seed = p->seed;
    if (!p->has_seed) {
        static uint64_t counter; /* only the serving thread creates samplers */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (++counter * 0x9e3779b97f4a7c15ull);
    }
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix64(&seed);
    *out = s;
    return NUMLA_STATUS_OK;
}

void numla_sampler_destroy(numla_sampler **ps)
{
    if (!ps || !*ps)
        return;
    free((*ps)->prob);
    free((*ps)->order);
    free(*ps);
    *ps = NULL;
}

static _Thread_local const float *sort_key_; /* qsort has no context argument */
static int cmp_desc(const void *a, const void *b)
{
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    float x = sort_key_[i], y = sort_key_[j];
    if (x != y)
        return x > y ? -1 : 1;
    return i < j ? -1 : i > j;
}

/* Indices of the n largest keys (descending, ties by id) into s->order[0..n). */
static void top_n(numla_sampler *s, const float *key, int32_t n)
{
    const int32_t V = s->vocab;
    if (n >= V) {
        for (int32_t i = 0; i < V; i++)
            s->order[i] = i;
        sort_key_ = key;
        qsort(s->order, (size_t)V, sizeof *s->order, cmp_desc);
        return;
    }
    /* insertion into a small sorted list: n is small (top_k / logprobs) */
    int32_t m = 0;
    for (int32_t i = 0; i < V; i++) {
        float v = key[i];
        if (m == n && !(v > key[s->order[m - 1]]))
            continue;
        int32_t at = m < n ? m++ : n - 1;
        while (at > 0 && v > key[s->order[at - 1]]) {
            s->order[at] = s->order[at - 1];
            at--;
        }
        s->order[at] = i;
    }
}

numla_status numla_sampler_sample(numla_sampler *s, const float *logits, int32_t *token,
                                  numla_logprob_entry *lp)
{
    const int32_t V = s->vocab;
    for (int32_t i = 0; i < V; i++)
        if (isnan(logits[i]))
            NUMLA_FAIL(NUMLA_STATUS_INTERNAL, "sampler: logit %d is NaN", i);
    int32_t pick = 0;
    if (s->p.temperature == 0.0) {
        for (int32_t i = 1; i < V; i++)
            if (logits[i] > logits[pick])
                pick = i;
    } else {
        const double inv_t = 1.0 / s->p.temperature;
        int32_t n = V;
        if (s->p.top_k > 0 && s->p.top_k < V)
            n = s->p.top_k;
        int need_sorted = n < V || s->p.top_p < 1.0;
        if (need_sorted) {
            top_n(s, logits, n);
        } else {
            for (int32_t i = 0; i < V; i++)
                s->order[i] = i;
        }
        float mx = logits[s->order[0]];
        if (!need_sorted)
            for (int32_t i = 1; i < V; i++)
                mx = logits[i] > mx ? logits[i] : mx;
        double z = 0;
        for (int32_t r = 0; r < n; r++) {
            double e = exp(((double)logits[s->order[r]] - mx) * inv_t);
            s->prob[r] = (float)e;
            z += e;
        }
        if (s->p.top_p < 1.0) { /* order is descending here */
            double cum = 0;
            int32_t keep = n;
            for (int32_t r = 0; r < n; r++) {
                cum += s->prob[r] / z;
                if (cum >= s->p.top_p) {
                    keep = r + 1;
                    break;
                }
            }
            n = keep;
            z = 0;
            for (int32_t r = 0; r < n; r++)
                z += s->prob[r];
        }
        double u = numla_sampler_uniform(s) * z, cum = 0;
        pick = s->order[n - 1];
        for (int32_t r = 0; r < n; r++) {
            cum += s->prob[r];
            if (u < cum) {
                pick = s->order[r];
                break;
            }
        }
    }
    *token = pick;
    if (lp && s->p.logprobs >= 0) {
        float mx = logits[0];
        for (int32_t i = 1; i < V; i++)
            mx = logits[i] > mx ? logits[i] : mx;
        double z = 0;
        for (int32_t i = 0; i < V; i++)
            z += exp((double)logits[i] - mx);
        double lse = mx + log(z);
        lp->token = pick;
        lp->logprob = (float)((double)logits[pick] - lse);
        lp->num_top = s->p.logprobs;
        if (lp->num_top > V)
            lp->num_top = V;
        if (lp->num_top > 0) {
            top_n(s, logits, lp->num_top);
            for (int32_t r = 0; r < lp->num_top; r++) {
                lp->top_tokens[r] = s->order[r];
                lp->top_logprobs[r] = (float)((double)logits[s->order[r]] - lse);
            }
        }
    }
    return NUMLA_STATUS_OK;
}

int numla_sampler_is_stop(const numla_sampler *s, int32_t token, const int32_t *eos,
                          int32_t num_eos)
{
    for (int32_t i = 0; i < s->p.num_stop; i++)
        if (s->p.stop_token_ids[i] == token)
            return 1;
    if (!s->p.ignore_eos)
        for (int32_t i = 0; i < num_eos; i++)
            if (eos[i] == token)
                return 1;
    return 0;
}
