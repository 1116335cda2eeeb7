/* engine/serving/sampler.h — turning one row of logits into the next token, per request.
 *
 * Per request: greedy when temperature == 0 (argmax, lowest id on ties); otherwise logits /
 * temperature → top_k (0 = off) → softmax → top_p (1 = off: keep the smallest set of most
 * likely tokens whose mass reaches top_p, at least one) → draw from the request's own PRNG
 * (xoshiro256**, seeded from `seed`, so a request reproduces regardless of what else runs).
 * Logprobs are the log-softmax of the raw logits (before temperature / filtering), as
 * serving APIs report them: the chosen token's value and the top-N (ties: lower id first).
 * Stop rules: a generated token in stop_token_ids, or an EOS id unless ignore_eos, ends the
 * request with "stop" (the stop token is part of the output); the scheduler ends it with "length"
 * at max_tokens. The front ends validate every field once (engine/serving/request_io.h:
 * numla_request_parse_sampling, numla_request_fit_context); create only asserts what it needs.
 * Not collective (rank 0 samples and broadcasts the tokens); one sampler per request.
 *
 * Cost per call, vocabulary V: one vectorised pass over the logits (NaN check and max) for
 * greedy; one more (weights) for a draw over the whole vocabulary; top_p without top_k selects
 * its nucleus by partitioning (expected O(V)) and sorts only the nucleus; top_k keeps a sorted
 * list of k. So a batch of requests costs microseconds per row, not a sort of the vocabulary.
 */
#ifndef NUMLA_ENGINE_SAMPLER_H
#define NUMLA_ENGINE_SAMPLER_H

#include <stdint.h>

#include "common/status.h"

enum { NUMLA_SAMPLER_MAX_STOP = 64, NUMLA_SAMPLER_MAX_LOGPROBS = 20 };

typedef struct numla_sampling_params {
    double temperature;        /* 0: greedy */
    int32_t top_k;             /* <= 0: off */
    double top_p;              /* in (0, 1]; 1: off */
    uint64_t seed;
    int has_seed;              /* 0: seed taken from a per-process counter + clock */
    int32_t max_tokens;        /* >= 0 (the scheduler's, not the sampler's) */
    int ignore_eos;
    int32_t num_stop;
    int32_t stop_token_ids[NUMLA_SAMPLER_MAX_STOP];
    int32_t logprobs;          /* < 0: none; N >= 0: the chosen token plus the top N */
} numla_sampling_params;

/* Defaults matching common serving APIs: temperature 1, top_k off, top_p 1, max_tokens 16. */
void numla_sampling_params_default(numla_sampling_params *p);

typedef struct numla_logprob_entry {
    int32_t token;
    float logprob;
    int32_t num_top;
    int32_t top_tokens[NUMLA_SAMPLER_MAX_LOGPROBS]; /* (num_top) */
    float top_logprobs[NUMLA_SAMPLER_MAX_LOGPROBS]; /* (num_top) */
} numla_logprob_entry;

/* Logits are scanned in blocks of this many: a block's max (greedy) or weight sum (a draw)
 * says in which block the answer lies, and only that block is walked one token at a time. */
enum { NUMLA_SAMPLER_BLOCK = 512 };

typedef struct numla_sampler {
    numla_sampling_params p;
    int32_t vocab;
    uint64_t rng[4];           /* xoshiro256** state */
    float *prob;               /* (vocab) scratch: weights by token id, or by rank (top_k) */
    int32_t *order;            /* (vocab) scratch: token ids */
    float *block_max;          /* (ceil(vocab / NUMLA_SAMPLER_BLOCK)) */
    double *block_sum;         /* (ceil(vocab / NUMLA_SAMPLER_BLOCK)) */
} numla_sampler;

numla_status numla_sampler_create(const numla_sampling_params *p, int32_t vocab,
                                  numla_sampler **out);
void numla_sampler_destroy(numla_sampler **s);

/* Pick the next token from logits (vocab). lp (may be NULL) receives logprobs when requested. */
numla_status numla_sampler_sample(numla_sampler *s, const float *logits, int32_t *token,
                                  numla_logprob_entry *lp);

/* Whether `token` ends the request (stop_token_ids, or one of eos[num_eos] unless ignore_eos). */
int numla_sampler_is_stop(const numla_sampler *s, int32_t token, const int32_t *eos,
                          int32_t num_eos);

/* Uniform double in [0, 1) from the request's PRNG (exposed for tests). */
double numla_sampler_uniform(numla_sampler *s);

#endif
