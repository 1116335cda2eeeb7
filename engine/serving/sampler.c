/* engine/serving/sampler.c — per-request sampling, stop rules and logprobs (see sampler.h). */
#include "engine/serving/sampler.h"

#include <float.h>
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
    p->repetition_penalty = 1.0;
}

/* Whether any penalty needs the sequence's tokens. */
static int penalties_on_(const numla_sampling_params *p)
{
    return p->presence_penalty != 0.0 || p->frequency_penalty != 0.0 ||
           p->repetition_penalty != 1.0;
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
    if (p->logprobs > NUMLA_SAMPLER_MAX_LOGPROBS)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "sampler: logprobs %d exceeds %d", p->logprobs,
                   NUMLA_SAMPLER_MAX_LOGPROBS);
    if (!(p->presence_penalty >= -2 && p->presence_penalty <= 2))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "sampler: presence_penalty %g must be in [-2, 2]",
                   p->presence_penalty);
    if (!(p->frequency_penalty >= -2 && p->frequency_penalty <= 2))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "sampler: frequency_penalty %g must be in [-2, 2]",
                   p->frequency_penalty);
    if (!(p->repetition_penalty > 0) || !isfinite(p->repetition_penalty))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "sampler: repetition_penalty %g must be > 0",
                   p->repetition_penalty);
    if (!(p->min_p >= 0 && p->min_p <= 1))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "sampler: min_p %g must be in [0, 1]", p->min_p);
    if (p->num_logit_bias < 0 || p->num_logit_bias > NUMLA_SAMPLER_MAX_LOGIT_BIAS)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "sampler: %d logit_bias entries (0..%d)",
                   p->num_logit_bias, NUMLA_SAMPLER_MAX_LOGIT_BIAS);
    for (int32_t i = 0; i < p->num_logit_bias; i++)
        if (p->logit_bias_tokens[i] < 0 || p->logit_bias_tokens[i] >= vocab ||
            !(fabsf(p->logit_bias_values[i]) <= 100))
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                       "sampler: logit_bias entry %d (token %d, bias %g) is not a token id "
                       "below %d with a bias in [-100, 100]", i, p->logit_bias_tokens[i],
                       (double)p->logit_bias_values[i], vocab);
    numla_sampler *s = calloc(1, sizeof *s);
    if (!s)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "sampler: no memory");
    s->p = *p;
    s->vocab = vocab;
    const size_t nb = ((size_t)vocab + NUMLA_SAMPLER_BLOCK - 1) / NUMLA_SAMPLER_BLOCK;
    s->prob = malloc((size_t)vocab * sizeof *s->prob);
    s->order = malloc((size_t)vocab * sizeof *s->order);
    s->block_max = malloc(nb * sizeof *s->block_max);
    s->block_sum = malloc(nb * sizeof *s->block_sum);
    if (p->num_logit_bias > 0)
        s->bias_saved = malloc((size_t)p->num_logit_bias * sizeof *s->bias_saved);
    if (!s->prob || !s->order || !s->block_max || !s->block_sum ||
        (p->num_logit_bias > 0 && !s->bias_saved)) {
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
    free((*ps)->block_max);
    free((*ps)->block_sum);
    free((*ps)->seen_tok);
    free((*ps)->seen_gen);
    free((*ps)->seen_saved);
    free((*ps)->seen_slot);
    free((*ps)->bias_saved);
    numla_grammar_matcher_destroy(&(*ps)->gm);
    free((*ps)->gmask);
    free((*ps)->gmasked);
    free((*ps)->spec_p);
    free(*ps);
    *ps = NULL;
}

/* ---- the sequence's tokens: a hash table of the distinct ones (token → index into seen_*) ----
 * Open addressing with linear probing over 2 cap_seen slots (at most half full). */

static uint32_t seen_hash_(int32_t t, uint32_t mask)
{
    uint32_t h = (uint32_t)t * 2654435761u;
    return (h ^ (h >> 15)) & mask;
}

/* Room for cap distinct tokens (a power of two): the arrays grown, the slots rebuilt. */
static int seen_grow_(numla_sampler *s, int32_t cap)
{
    int32_t *tok = realloc(s->seen_tok, (size_t)cap * sizeof *tok);
    if (tok)
        s->seen_tok = tok;
    int32_t *gen = realloc(s->seen_gen, (size_t)cap * sizeof *gen);
    if (gen)
        s->seen_gen = gen;
    float *saved = realloc(s->seen_saved, (size_t)cap * sizeof *saved);
    if (saved)
        s->seen_saved = saved;
    int32_t *slot = malloc(2 * (size_t)cap * sizeof *slot);
    if (!tok || !gen || !saved || !slot) {
        free(slot);
        return 0;
    }
    const uint32_t mask = 2 * (uint32_t)cap - 1;
    for (uint32_t h = 0; h <= mask; h++)
        slot[h] = -1;
    for (int32_t i = 0; i < s->num_seen; i++) {
        uint32_t h = seen_hash_(s->seen_tok[i], mask);
        while (slot[h] >= 0)
            h = (h + 1) & mask;
        slot[h] = i;
    }
    free(s->seen_slot);
    s->seen_slot = slot;
    s->cap_seen = cap;
    return 1;
}

/* Index of token t in seen_*, added (generated 0) when new; -1: no memory. */
static int32_t seen_get_(numla_sampler *s, int32_t t)
{
    if (s->num_seen == s->cap_seen && !seen_grow_(s, s->cap_seen ? 2 * s->cap_seen : 64))
        return -1;
    const uint32_t mask = 2 * (uint32_t)s->cap_seen - 1;
    uint32_t h = seen_hash_(t, mask);
    for (; s->seen_slot[h] >= 0; h = (h + 1) & mask)
        if (s->seen_tok[s->seen_slot[h]] == t)
            return s->seen_slot[h];
    const int32_t i = s->num_seen++;
    s->seen_slot[h] = i;
    s->seen_tok[i] = t;
    s->seen_gen[i] = 0;
    return i;
}

numla_status numla_sampler_add_tokens(numla_sampler *s, const int32_t *tokens, int32_t n,
                                      int generated)
{
    if (s->gm && generated) /* the grammar follows the generated tokens */
        for (int32_t k = 0; k < n; k++)
            NUMLA_CHECK(numla_grammar_matcher_accept_token(s->gm, s->gv, tokens[k]));
    /* the prompt matters to repetition_penalty only; nothing matters with no penalty */
    if (!penalties_on_(&s->p) || (!generated && s->p.repetition_penalty == 1.0))
        return NUMLA_STATUS_OK;
    for (int32_t k = 0; k < n; k++) {
        const int32_t t = tokens[k];
        if (t < 0 || t >= s->vocab)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "sampler: token %d is outside the vocabulary "
                       "(0..%d)", t, s->vocab - 1);
        const int32_t i = seen_get_(s, t);
        if (i < 0)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "sampler: no memory for %d distinct tokens",
                       s->num_seen + 1);
        s->seen_gen[i] += generated != 0;
    }
    return NUMLA_STATUS_OK;
}

/* logit_bias, then repetition, frequency and presence penalties (vLLM's order) on the entries
 * they touch, each one's logit saved first. */
static void adjust_(numla_sampler *s, float *lg)
{
    const numla_sampling_params *p = &s->p;
    for (int32_t i = 0; i < p->num_logit_bias; i++) {
        const int32_t t = p->logit_bias_tokens[i];
        s->bias_saved[i] = lg[t];
        lg[t] = (float)((double)lg[t] + (double)p->logit_bias_values[i]);
    }
    const double r = p->repetition_penalty, f = p->frequency_penalty, pr = p->presence_penalty;
    for (int32_t i = 0; i < s->num_seen; i++) {
        const int32_t t = s->seen_tok[i];
        const float x = lg[t];
        s->seen_saved[i] = x;
        double v = x;
        if (r != 1.0)
            v = v > 0 ? v / r : v * r;
        if (s->seen_gen[i] > 0)
            v -= f * s->seen_gen[i] + pr;
        lg[t] = (float)v;
    }
}

/* Put back what adjust_ changed, last change first (so a token touched twice ends as given). */
static void restore_(numla_sampler *s, float *lg)
{
    for (int32_t i = s->num_seen - 1; i >= 0; i--)
        lg[s->seen_tok[i]] = s->seen_saved[i];
    for (int32_t i = s->p.num_logit_bias - 1; i >= 0; i--)
        lg[s->p.logit_bias_tokens[i]] = s->bias_saved[i];
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

static int32_t blocks_of_(int32_t V) { return (V + NUMLA_SAMPLER_BLOCK - 1) / NUMLA_SAMPLER_BLOCK; }

/* One past the last token of block j. */
static int32_t block_end_(int32_t V, int32_t j)
{
    return V - j * NUMLA_SAMPLER_BLOCK < NUMLA_SAMPLER_BLOCK ? V : (j + 1) * NUMLA_SAMPLER_BLOCK;
}

/* Indices of the n largest keys (descending, ties by id) into s->order[0..n). bmax: each
 * block's max of key (blocks no larger than the list's last entry are skipped), or NULL. */
static void top_n(numla_sampler *s, const float *key, int32_t n, const float *bmax)
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
    for (int32_t j = 0; j < blocks_of_(V); j++) {
        if (bmax && m == n && !(bmax[j] > key[s->order[n - 1]]))
            continue;
        for (int32_t i = j * NUMLA_SAMPLER_BLOCK; i < block_end_(V, j); i++) {
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
}

/* ---- vectorisable scans over the vocabulary ----------------------------------------------
 * The engine is built for the baseline ISA without fast-math; `omp simd` lets the compiler
 * vectorise these reductions (max, |, +) anyway. Blocks of NUMLA_SAMPLER_BLOCK tokens. */

/* Max of x[0..V) into *mx and each block's max into bmax; returns 1 when some x is NaN. */
static int scan_max_(const float *x, int32_t V, float *bmax, float *mx)
{
    float all = -INFINITY;
    int nan = 0;
    for (int32_t j = 0; j < blocks_of_(V); j++) {
        const int32_t i0 = j * NUMLA_SAMPLER_BLOCK;
        const int32_t i1 = block_end_(V, j);
        float m = -INFINITY;
        int bad = 0;
#pragma omp simd reduction(max : m) reduction(| : bad)
        for (int32_t i = i0; i < i1; i++) {
            m = x[i] > m ? x[i] : m;
            bad |= x[i] != x[i];
        }
        /* The reduction's private copies start at the max identity: -inf with GCC, -FLT_MAX
         * with clang. A block of -inf must give -inf (first_max_ looks for the max among the
         * logits), so when only the identity can be left, look again without it. */
        if (m == -FLT_MAX) {
            m = -INFINITY;
            for (int32_t i = i0; i < i1; i++)
                m = x[i] > m ? x[i] : m;
        }
        bmax[j] = m;
        all = m > all ? m : all;
        nan |= bad;
    }
    *mx = all;
    return nan;
}

/* The lowest id whose logit equals mx, the max found by scan_max_ (its block maxima bmax). */
static int32_t first_max_(const float *x, const float *bmax, float mx)
{
    int32_t j = 0;
    while (!(bmax[j] == mx))
        j++;
    int32_t i = j * NUMLA_SAMPLER_BLOCK;
    while (!(x[i] == mx))
        i++;
    return i;
}

/* exp(a) for a <= 0 (or -inf) in float: 2^n · e^r with n = round(a / ln 2), |r| <= ln 2 / 2,
 * e^r by its degree-6 Taylor polynomial (relative error < 2e-7); 0 below -87 (where exp(a)
 * is ~1e-38 of the largest weight, which is 1), so a -inf logit has weight exactly 0.
 * Branch-free: loops over it vectorise (sampler.c is built with -fno-trapping-math). */
static inline float exp_nonpos_(float a)
{
    const float big = 12582912.0f; /* 1.5 · 2^23: adding and subtracting it rounds to integer */
    const float c = a > -87.0f ? a : -87.0f;
    const float n = (c * 1.44269504f + big) - big;
    const float r = (c - n * 0.693145752f) - n * 1.42860677e-6f; /* ln 2 = hi + lo */
    const float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 +
                                                   r * (1.0f / 120 + r * (1.0f / 720))))));
    const int32_t bits = a < -87.0f ? 0 : ((int32_t)n + 127) << 23; /* scale 2^n, or 0 */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* w[i] = exp((x[i] - mx) · inv_t) (the largest is 1), 0 where that is below floor (min_p: a
 * probability below min_p times the largest), each block's weight sum (double) and max;
 * returns the total. */
static double weights_(const float *x, int32_t V, float mx, float inv_t, float floor, float *w,
                       double *bsum, float *bmax)
{
    double z = 0;
    for (int32_t j = 0; j < blocks_of_(V); j++) {
        const int32_t i0 = j * NUMLA_SAMPLER_BLOCK;
        const int32_t i1 = block_end_(V, j);
        if (floor > 0) {
            for (int32_t i = i0; i < i1; i++) {
                const float e = exp_nonpos_((x[i] - mx) * inv_t);
                w[i] = e >= floor ? e : 0.0f;
            }
        } else {
            for (int32_t i = i0; i < i1; i++) /* vectorises without `omp simd`: no reduction */
                w[i] = exp_nonpos_((x[i] - mx) * inv_t);
        }
        double sum = 0;
        float m = 0;
#pragma omp simd reduction(+ : sum) reduction(max : m)
        for (int32_t i = i0; i < i1; i++) {
            sum += w[i];
            m = w[i] > m ? w[i] : m;
        }
        bsum[j] = sum;
        bmax[j] = m;
        z += sum;
    }
    return z;
}

/* A draw u in [0, total weight) over tokens 0..V-1 in id order: the block whose running sum
 * passes u, then the token inside it. Never returns a token of weight 0. */
static int32_t draw_blocked_(const float *w, int32_t V, const double *bsum, double u)
{
    const int32_t nb = blocks_of_(V);
    double cum = 0;
    int32_t j = 0, last = -1; /* last: the last block with weight (u past the end by rounding) */
    for (; j < nb; j++) {
        if (bsum[j] > 0)
            last = j;
        if (u < cum + bsum[j])
            break;
        cum += bsum[j];
    }
    if (j == nb)
        j = last;
    const int32_t i0 = j * NUMLA_SAMPLER_BLOCK;
    const int32_t i1 = block_end_(V, j);
    int32_t pick = -1;
    for (int32_t i = i0; i < i1; i++) {
        if (w[i] > 0)
            pick = i;
        cum += w[i];
        if (u < cum && w[i] > 0)
            break;
    }
    return pick;
}

static void swap_(int32_t *a, int32_t *b)
{
    int32_t t = *a;
    *a = *b;
    *b = t;
}

static int cmp_id_(const void *a, const void *b)
{
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    return i < j ? -1 : i > j;
}

/* Reorders ids[0..n) so that ids[0..r) is the shortest prefix, in the order (logit x
 * descending, id ascending), whose weight reaches target, and returns r (n when all of them do
 * not reach it). Weight: w[id], or 1 per token when w is NULL (then target is a count).
 * Three-way quickselect on the logit, expected O(n); only the final small range is sorted. */
static int32_t select_prefix_(int32_t *ids, int32_t n, const float *x, const float *w,
                              double target)
{
    int32_t lo = 0, hi = n;
    double acc = 0; /* weight of ids[0..lo), all in the prefix */
    while (hi - lo > 16) {
        float a = x[ids[lo]], b = x[ids[lo + (hi - lo) / 2]], c = x[ids[hi - 1]];
        float pv = a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
        /* [lo, g) > pv, [g, i) == pv, [e, hi) < pv */
        int32_t g = lo, i = lo, e = hi;
        double mg = 0, me = 0;
        while (i < e) {
            const float v = x[ids[i]];
            if (v > pv) {
                mg += w ? w[ids[i]] : 1.0;
                swap_(&ids[g++], &ids[i++]);
            } else if (v < pv) {
                swap_(&ids[i], &ids[--e]);
            } else {
                me += w ? w[ids[i]] : 1.0;
                i++;
            }
        }
        if (acc + mg >= target) { /* the prefix ends among the larger ones */
            hi = g;
            continue;
        }
        if (acc + mg + me >= target) { /* ... among the ties: lower ids first */
            qsort(ids + g, (size_t)(e - g), sizeof *ids, cmp_id_);
            acc += mg;
            for (int32_t t = g; t < e; t++) {
                acc += w ? w[ids[t]] : 1.0;
                if (acc >= target)
                    return t + 1;
            }
            return e;
        }
        acc += mg + me;
        lo = e;
    }
    sort_key_ = x;
    qsort(ids + lo, (size_t)(hi - lo), sizeof *ids, cmp_desc);
    for (int32_t t = lo; t < hi; t++) {
        acc += w ? w[ids[t]] : 1.0;
        if (acc >= target)
            return t + 1;
    }
    return hi;
}

/* Draw from the tokens order[0..n) (total weight z) with the request's PRNG. Weights: by
 * token id in w, or by rank in s->prob when w is NULL. */
static int32_t draw_ranked_(numla_sampler *s, int32_t n, double z, const float *w)
{
    const double u = numla_sampler_uniform(s) * z;
    double cum = 0;
    for (int32_t r = 0; r < n; r++) {
        cum += w ? w[s->order[r]] : s->prob[r];
        if (u < cum)
            return s->order[r];
    }
    for (int32_t r = n - 1; r > 0; r--) /* u past the end by rounding */
        if ((w ? w[s->order[r]] : s->prob[r]) > 0)
            return s->order[r];
    return s->order[0];
}

/* The token for logits (adjusted already): greedy, or a draw. *mx: the logits' max. */
static numla_status pick_(numla_sampler *s, const float *logits, int32_t *token, float *mx_out)
{
    const int32_t V = s->vocab;
    float mx;
    if (scan_max_(logits, V, s->block_max, &mx)) {
        int32_t i = 0;
        while (!isnan(logits[i]))
            i++;
        NUMLA_FAIL(NUMLA_STATUS_INTERNAL, "sampler: logit %d is NaN", i);
    }
    int32_t pick = first_max_(logits, s->block_max, mx); /* greedy */
    if (s->p.temperature != 0.0) {
        if (!isfinite(mx))
            NUMLA_FAIL(NUMLA_STATUS_INTERNAL, "sampler: the largest logit (token %d) is %g",
                       pick, mx);
        const double inv_t = 1.0 / s->p.temperature;
        const int32_t k = s->p.top_k > 0 && s->p.top_k < V ? s->p.top_k : V;
        if (k < V) {
            /* top_k: the k best by rank, weights by rank, then top_p inside them */
            if (k <= 256) {
                top_n(s, logits, k, s->block_max); /* the logits' block maxima */
            } else {
                for (int32_t i = 0; i < V; i++)
                    s->order[i] = i;
                select_prefix_(s->order, V, logits, NULL, (double)k);
                sort_key_ = logits;
                qsort(s->order, (size_t)k, sizeof *s->order, cmp_desc);
            }
            double z = 0;
            for (int32_t r = 0; r < k; r++) {
                double e = exp(((double)logits[s->order[r]] - mx) * inv_t);
                s->prob[r] = (float)e;
                z += e;
            }
            int32_t n = k;
            if (s->p.min_p > 0) { /* by rank: the kept ones are a prefix; the first has 1 */
                while (n > 1 && (double)s->prob[n - 1] < s->p.min_p)
                    n--;
                z = 0;
                for (int32_t r = 0; r < n; r++)
                    z += s->prob[r];
            }
            if (s->p.top_p < 1.0) {
                const int32_t m = n;
                double cum = 0;
                for (int32_t r = 0; r < m; r++) {
                    cum += s->prob[r] / z;
                    if (cum >= s->p.top_p) {
                        n = r + 1;
                        break;
                    }
                }
                z = 0;
                for (int32_t r = 0; r < n; r++)
                    z += s->prob[r];
            }
            pick = draw_ranked_(s, n, z, NULL);
        } else {
            float *w = s->prob; /* by token id here */
            const double z = weights_(logits, V, mx, (float)inv_t, (float)s->p.min_p, w,
                                      s->block_sum, s->block_max);
            if (s->p.top_p >= 1.0) {
                pick = draw_blocked_(w, V, s->block_sum, numla_sampler_uniform(s) * z);
            } else {
                /* nucleus: candidates from the blocks that can hold a weight >= thr, for
                 * thr = 1/2, 1/4, 1/16, 1/256, ... until they carry top_p of the mass, then
                 * the shortest (logit, id)-ordered prefix reaching it by selection. The draw
                 * walks the nucleus in the selection's order, which is deterministic: a
                 * request still reproduces from its seed, and no sort is needed. */
                const double target = s->p.top_p * z;
                const int32_t nb = blocks_of_(V);
                float thr = 0.5f;
                int carried = 0;
                for (int it = 0; it < 7 && !carried; it++) {
                    if (it > 0)
                        thr *= thr;
                    double mass = 0;
                    for (int32_t j = 0; j < nb; j++) {
                        if (!(s->block_max[j] >= thr))
                            continue;
                        const int32_t i0 = j * NUMLA_SAMPLER_BLOCK;
                        const int32_t i1 = block_end_(V, j);
                        double m = 0;
#pragma omp simd reduction(+ : m)
                        for (int32_t i = i0; i < i1; i++)
                            m += w[i] >= thr ? w[i] : 0.0f;
                        mass += m;
                    }
                    carried = mass >= target * (1.0 + 1e-9);
                }
                /* collect a hair below thr (the float exp may order two nearly equal logits
                 * the other way by an ulp, and a larger logit must not be left out); when not
                 * even 2^-64 carried the mass, every token */
                thr = carried ? thr * (1.0f - 1e-6f) : 0.0f;
                int32_t c = 0;
                for (int32_t j = 0; j < nb; j++) {
                    if (!(s->block_max[j] >= thr))
                        continue;
                    const int32_t i0 = j * NUMLA_SAMPLER_BLOCK;
                    const int32_t i1 = block_end_(V, j);
                    for (int32_t i = i0; i < i1; i++)
                        if (w[i] >= thr)
                            s->order[c++] = i;
                }
                const int32_t n = select_prefix_(s->order, c, logits, w, target);
                double zn = 0;
                for (int32_t r = 0; r < n; r++)
                    zn += w[s->order[r]];
                pick = draw_ranked_(s, n, zn, w);
            }
        }
    }
    *token = pick;
    *mx_out = mx;
    return NUMLA_STATUS_OK;
}

numla_status numla_sampler_set_grammar(numla_sampler *s, const numla_grammar *g,
                                       const numla_grammar_vocab *v)
{
    if (numla_grammar_vocab_size(v) != s->vocab)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "sampler: a grammar vocabulary of %d tokens for %d",
                   numla_grammar_vocab_size(v), s->vocab);
    NUMLA_CHECK(numla_grammar_matcher_create(g, &s->gm));
    s->gv = v;
    s->gmask = malloc(((size_t)s->vocab + 63) / 64 * sizeof *s->gmask);
    s->gmasked = malloc((size_t)s->vocab * sizeof *s->gmasked);
    if (!s->gmask || !s->gmasked)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "sampler: no memory for a grammar mask");
    return NUMLA_STATUS_OK;
}

/* The logits with every token the grammar does not allow now at -inf, into s->gmasked. */
static numla_status grammar_mask_(numla_sampler *s, const float *logits)
{
    NUMLA_CHECK(numla_grammar_matcher_fill_mask(s->gm, s->gv, s->gmask));
    const int32_t V = s->vocab;
    uint64_t any = 0;
    for (int32_t w = 0; w < (V + 63) / 64; w++) {
        const uint64_t m = s->gmask[w];
        any |= m;
        const int32_t base = w * 64, end = base + 64 < V ? base + 64 : V;
        if (m == 0) /* most words in most states: none allowed */
            for (int32_t i = base; i < end; i++)
                s->gmasked[i] = -INFINITY;
        else if (m == ~(uint64_t)0)
            memcpy(s->gmasked + base, logits + base, (size_t)(end - base) * sizeof *logits);
        else
            for (int32_t i = base; i < end; i++)
                s->gmasked[i] = (m >> (i - base) & 1) ? logits[i] : -INFINITY;
    }
    if (!any)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                   "response_format: no token of the vocabulary continues the document");
    return NUMLA_STATUS_OK;
}

/* lp: token's raw log-softmax value and the top n (ties: lower id first) of logits; *mx is
 * their max with s->block_max its block maxima (NULL: found here). Uses s's scratch. */
static void logprob_entry_(numla_sampler *s, const float *logits, int32_t token, int32_t n,
                           const float *mx_known, numla_logprob_entry *lp)
{
    const int32_t V = s->vocab;
    /* log-softmax of the raw logits: weights at temperature 1 (into the scratch, which the
     * draw no longer needs); their max again when the draw saw adjusted ones */
    float mx;
    if (mx_known)
        mx = *mx_known;
    else
        scan_max_(logits, V, s->block_max, &mx);
    double z = isfinite(mx) ? weights_(logits, V, mx, 1.0f, 0.0f, s->prob, s->block_sum,
                                       s->block_max)
                            : 1.0;
    double lse = mx + log(z);
    lp->token = token;
    lp->logprob = (float)((double)logits[token] - lse);
    lp->num_top = n > NUMLA_SAMPLER_MAX_LOGPROBS ? NUMLA_SAMPLER_MAX_LOGPROBS : n;
    if (lp->num_top > V)
        lp->num_top = V;
    if (lp->num_top > 0) {
        top_n(s, logits, lp->num_top, NULL); /* block_max may hold weights now */
        for (int32_t r = 0; r < lp->num_top; r++) {
            lp->top_tokens[r] = s->order[r];
            lp->top_logprobs[r] = (float)((double)logits[s->order[r]] - lse);
        }
    }
}

numla_status numla_sampler_logprob_of(numla_sampler *s, const float *logits, int32_t token,
                                      int32_t n, numla_logprob_entry *lp)
{
    if (token < 0 || token >= s->vocab)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "sampler: token %d outside the vocabulary of %d",
                   token, s->vocab);
    float mx;
    if (scan_max_(logits, s->vocab, s->block_max, &mx)) {
        int32_t i = 0;
        while (!isnan(logits[i]))
            i++;
        NUMLA_FAIL(NUMLA_STATUS_INTERNAL, "sampler: logit %d of a prompt row is NaN", i);
    }
    logprob_entry_(s, logits, token, n < 0 ? 0 : n, &mx, lp);
    return NUMLA_STATUS_OK;
}

numla_status numla_sampler_sample(numla_sampler *s, float *logits, int32_t *token,
                                  numla_logprob_entry *lp)
{
    float *raw = logits;
    if (s->gm) {
        NUMLA_CHECK(grammar_mask_(s, logits));
        logits = s->gmasked;
    }
    const int adjusted = s->p.num_logit_bias > 0 || s->num_seen > 0;
    if (adjusted)
        adjust_(s, logits);
    float mx;
    int32_t pick = -1;
    const numla_status st = pick_(s, logits, &pick, &mx);
    if (adjusted)
        restore_(s, logits);
    if (st != NUMLA_STATUS_OK)
        return st;
    *token = pick;
    logits = raw;
    if (lp && s->p.logprobs >= 0)
        logprob_entry_(s, logits, pick, s->p.logprobs, adjusted || s->gm ? NULL : &mx, lp);
    return NUMLA_STATUS_OK;
}

/* probs = the distribution the draw would use for the adjusted logits x (pick_'s rules). */
static numla_status probs_(numla_sampler *s, const float *x, float *probs)
{
    const int32_t V = s->vocab;
    float mx;
    if (scan_max_(x, V, s->block_max, &mx))
        NUMLA_FAIL(NUMLA_STATUS_INTERNAL, "sampler: a NaN logit");
    if (!isfinite(mx))
        NUMLA_FAIL(NUMLA_STATUS_INTERNAL, "sampler: the largest logit is %g", mx);
    if (s->p.temperature == 0.0) {
        memset(probs, 0, (size_t)V * sizeof *probs);
        probs[first_max_(x, s->block_max, mx)] = 1.0f;
        return NUMLA_STATUS_OK;
    }
    const double inv_t = 1.0 / s->p.temperature;
    for (int32_t i = 0; i < V; i++) {
        const double e = exp(((double)x[i] - mx) * inv_t);
        probs[i] = (float)e >= (float)s->p.min_p ? (float)e : 0.0f; /* min_p: the largest is 1 */
    }
    const int32_t k = s->p.top_k > 0 && s->p.top_k < V ? s->p.top_k : V;
    if (k < V || s->p.top_p < 1.0) {
        /* the (logit descending, id ascending) order; keep its first k, then the shortest
         * prefix of those whose mass reaches top_p */
        for (int32_t i = 0; i < V; i++)
            s->order[i] = i;
        sort_key_ = x;
        qsort(s->order, (size_t)V, sizeof *s->order, cmp_desc);
        double z = 0;
        for (int32_t r = 0; r < k; r++)
            z += probs[s->order[r]];
        int32_t n = k;
        if (s->p.top_p < 1.0) {
            double cum = 0;
            for (int32_t r = 0; r < k; r++) {
                cum += probs[s->order[r]] / z;
                if (cum >= s->p.top_p) {
                    n = r + 1;
                    break;
                }
            }
        }
        for (int32_t r = n; r < V; r++)
            probs[s->order[r]] = 0.0f;
    }
    double z = 0;
    for (int32_t i = 0; i < V; i++)
        z += probs[i];
    const float inv_z = (float)(1.0 / z);
    for (int32_t i = 0; i < V; i++)
        probs[i] *= inv_z;
    return NUMLA_STATUS_OK;
}

numla_status numla_sampler_probs(numla_sampler *s, float *logits, float *probs)
{
    if (s->gm) {
        NUMLA_CHECK(grammar_mask_(s, logits));
        logits = s->gmasked;
    }
    const int adjusted = s->p.num_logit_bias > 0 || s->num_seen > 0;
    if (adjusted)
        adjust_(s, logits);
    const numla_status st = probs_(s, logits, probs);
    if (adjusted)
        restore_(s, logits);
    return st;
}

int32_t numla_sampler_draw(numla_sampler *s, const float *probs)
{
    double z = 0;
    for (int32_t i = 0; i < s->vocab; i++)
        z += probs[i];
    const double u = numla_sampler_uniform(s) * z;
    double cum = 0;
    int32_t last = 0;
    for (int32_t i = 0; i < s->vocab; i++) {
        if (probs[i] > 0)
            last = i;
        cum += probs[i];
        if (u < cum && probs[i] > 0)
            return i;
    }
    return last; /* u past the end by rounding */
}

numla_status numla_sampler_speculate(numla_sampler *s, float *rows, const int32_t *draft,
                                     const float *q, int32_t k, int32_t *out, int32_t *n_out,
                                     numla_logprob_entry *lps)
{
    const int32_t V = s->vocab;
    *n_out = 0;
    if (!s->spec_p && !(s->spec_p = malloc((size_t)V * sizeof *s->spec_p)))
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "sampler: no memory for a distribution of %d", V);
    float *p = s->spec_p;
    for (int32_t j = 0; j <= k; j++) {
        float *row = rows + (size_t)j * (size_t)V;
        NUMLA_CHECK(numla_sampler_probs(s, row, p));
        int32_t tok;
        int accepted = 0;
        if (j == k) {
            tok = numla_sampler_draw(s, p);
        } else {
            const float *qj = q + (size_t)j * (size_t)V;
            tok = draft[j];
            /* accept with probability min(1, p(d) / q(d)): u · q(d) < p(d), u in [0, 1) */
            accepted = numla_sampler_uniform(s) * (double)qj[tok] < (double)p[tok];
            if (!accepted) { /* the residual max(0, p - q); all 0 only if p = q (then u < 1) */
                double z = 0;
                for (int32_t i = 0; i < V; i++) {
                    const float r = p[i] - qj[i];
                    z += r > 0 ? r : 0;
                }
                for (int32_t i = 0; z > 0 && i < V; i++)
                    p[i] = p[i] > qj[i] ? p[i] - qj[i] : 0.0f;
                tok = numla_sampler_draw(s, p);
            }
        }
        out[(*n_out)++] = tok;
        if (lps && s->p.logprobs >= 0)
            logprob_entry_(s, row, tok, s->p.logprobs, NULL, &lps[j]);
        if (!accepted)
            break;
        NUMLA_CHECK(numla_sampler_add_tokens(s, &tok, 1, 1));
    }
    return NUMLA_STATUS_OK;
}

int numla_sampler_grammar_closed(const numla_sampler *s)
{
    return s->gm && numla_grammar_matcher_is_closed(s->gm);
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
