/* engine/serving/sampler.h — turning one row of logits into the next token, per request.
 *
 * Per request, in vLLM's order (its v1 sampler):
 *   1. logit_bias: logit[t] += bias[t] for the request's entries;
 *   2. repetition_penalty r (vLLM's; 1 = off), over the tokens of the prompt AND those generated:
 *      logit > 0 → logit / r, else logit · r;
 *   3. frequency_penalty f and presence_penalty p (OpenAI's; 0 = off), over the tokens generated
 *      so far: logit[t] -= f · count_t + p · [count_t > 0];
 *   4. greedy when temperature == 0 (argmax of the adjusted logits, lowest id on ties: a greedy
 *      request sees 1-3 too); otherwise logits / temperature → min_p (drop tokens whose
 *      probability is below min_p · the largest; 0 = off) → top_k (0 = off) → softmax → top_p
 *      (1 = off: keep the smallest set of most likely tokens whose mass reaches top_p, at least
 *      one) → draw from the request's own PRNG (xoshiro256**, seeded from `seed`, so a request
 *      reproduces regardless of what else runs).
 * The sequence's tokens reach the sampler through numla_sampler_add_tokens (the scheduler: the
 * prompt once, then each token it appends), which keeps the distinct tokens seen with their
 * generated counts in a small hash table; only these and the logit_bias entries are adjusted
 * (in place, and put back before numla_sampler_sample returns), never the whole vocabulary.
 * Logprobs are the log-softmax of the raw logits (before bias, penalties, temperature and
 * filtering: the model's distribution, as vLLM returns them by default), as serving APIs
 * report them: the chosen token's value and the top-N (ties: lower id first).
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
 * Penalties and logit_bias add O(distinct tokens seen + bias entries) per call (twice: adjust,
 * put back), and a second max pass when logprobs are asked for too; min_p adds no pass (it is a
 * threshold on the weights the draw computes anyway); none set: the same passes as before.
 */
#ifndef NUMLA_ENGINE_SAMPLER_H
#define NUMLA_ENGINE_SAMPLER_H

#include <stdint.h>

#include "common/status.h"
#include "engine/serving/grammar.h"

/* MAX_LOGIT_BIAS: a request's logit_bias entries (OpenAI's API documents no limit, vLLM has
 * none; 1024 keeps the fixed arrays below at 8 KiB per request and the per-step cost at most
 * 1024 adds, while a ban or boost list of a few hundred words' tokens fits). */
enum { NUMLA_SAMPLER_MAX_STOP = 64, NUMLA_SAMPLER_MAX_LOGPROBS = 20,
       NUMLA_SAMPLER_MAX_LOGIT_BIAS = 1024 };

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
    double presence_penalty;   /* [-2, 2], 0: off (generated tokens) */
    double frequency_penalty;  /* [-2, 2], 0: off (generated tokens, per occurrence) */
    double repetition_penalty; /* > 0, 1: off (prompt and generated tokens) */
    double min_p;              /* [0, 1], 0: off */
    int32_t num_logit_bias;    /* 0..NUMLA_SAMPLER_MAX_LOGIT_BIAS, distinct tokens */
    int32_t logit_bias_tokens[NUMLA_SAMPLER_MAX_LOGIT_BIAS]; /* (num_logit_bias) */
    float logit_bias_values[NUMLA_SAMPLER_MAX_LOGIT_BIAS];   /* (num_logit_bias) in [-100, 100] */
} numla_sampling_params;

/* Defaults matching common serving APIs: temperature 1, top_k off, top_p 1, max_tokens 16,
 * penalties, min_p and logit_bias off (repetition_penalty 1). */
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
    /* the sequence's tokens, for the penalties (all NULL / 0 when none is set) */
    int32_t *seen_tok;         /* (cap_seen) distinct tokens, first seen first: the prompt's
                                  (repetition_penalty only) and the generated ones */
    int32_t *seen_gen;         /* (cap_seen) times each was generated */
    float *seen_saved;         /* (cap_seen) its logit before this call's penalties */
    int32_t num_seen, cap_seen;
    int32_t *seen_slot;        /* (2 cap_seen) open addressing by token: index into seen_*, -1 */
    float *bias_saved;         /* (p.num_logit_bias) the logits before the bias */
    /* response_format (all NULL when none: numla_sampler_set_grammar) */
    numla_grammar_matcher *gm; /* the grammar's state, advanced by each generated token */
    const numla_grammar_vocab *gv; /* borrowed */
    uint64_t *gmask;           /* ((vocab + 63) / 64) the tokens allowed this step */
    float *gmasked;            /* (vocab) the logits with the others at -inf */
    float *spec_p;             /* (vocab) speculative sampling's target distribution, made at
                                  the first numla_sampler_speculate */
} numla_sampler;

numla_status numla_sampler_create(const numla_sampling_params *p, int32_t vocab,
                                  numla_sampler **out);
void numla_sampler_destroy(numla_sampler **s);

/* Record the sequence's tokens: its prompt (generated 0; kept only with a repetition_penalty)
 * or tokens it generated (1: counted for every penalty). The scheduler adds the prompt once
 * after create and each token it appends to the sequence; the sampler never records its own
 * draws. Only running out of memory (and a token outside the vocabulary) is an error. */
numla_status numla_sampler_add_tokens(numla_sampler *s, const int32_t *tokens, int32_t n,
                                      int generated);

/* Constrain the request to grammar g (a response_format) over vocabulary v (both borrowed,
 * must outlive the sampler; v's size is the sampler's vocab): before step 1 every token the
 * grammar does not allow next gets -inf (greedy and draws alike), so only a document of the
 * grammar can come out; an end (EOS) token only once it is complete. Each generated token added
 * (numla_sampler_add_tokens, generated 1) advances the grammar; numla_sampler_grammar_closed
 * says when the document is closed (nothing may follow: the request ends there, its last token
 * part of the text). Cost per step: the mask walk (grammar.h) and one more pass
 * over the logits. */
numla_status numla_sampler_set_grammar(numla_sampler *s, const numla_grammar *g,
                                       const numla_grammar_vocab *v);

/* Pick the next token from logits (vocab), given the tokens added so far. The entries that
 * logit_bias and the penalties touch are adjusted in place and put back before returning, so
 * logits reads as given afterwards. lp (may be NULL) receives logprobs when requested. */
numla_status numla_sampler_sample(numla_sampler *s, float *logits, int32_t *token,
                                  numla_logprob_entry *lp);

/* lp: the raw log-softmax value of `token` in one row of logits (vocab) and its top n
 * (0..NUMLA_SAMPLER_MAX_LOGPROBS; ties: lower id first), the values numla_sampler_sample
 * reports for a drawn token; nothing else of the sampler changes (its scratch is used). A
 * prompt row's logprobs (the scheduler's prompt_logprobs). A NaN logit is an error. */
numla_status numla_sampler_logprob_of(numla_sampler *s, const float *logits, int32_t token,
                                      int32_t n, numla_logprob_entry *lp);

/* Speculative sampling (docs/speculative.md). probs (vocab) = the distribution
 * numla_sampler_sample draws from for this row of logits, given the tokens added so far: the
 * grammar mask, logit_bias and penalties, then at temperature 0 all the mass on the greedy
 * token, else softmax(logits / temperature) restricted by min_p, top_k and top_p as the draw
 * restricts it (the kept tokens' weights renormalised). O(vocab), plus a sort of the vocabulary
 * with top_k or top_p. logits reads as given afterwards. */
numla_status numla_sampler_probs(numla_sampler *s, float *logits, float *probs);
/* A token drawn from probs (vocab, summing to about 1) with the request's PRNG. */
int32_t numla_sampler_draw(numla_sampler *s, const float *probs);
/* Verify k >= 0 draft tokens drawn from the distributions q (k, vocab): rows (k + 1, vocab)
 * are the model's logits after the known tokens and after each draft. Row j's target p is
 * numla_sampler_probs with the sampler as it is after drafts 1..j; draft j + 1 is accepted with
 * probability min(1, p(d) / q(d)) (it is then added to the sampler, generated), and at the
 * first rejection the token is drawn from the normalised residual max(0, p - q); when all k are
 * accepted, one more is drawn from row k's p. So the tokens come out with exactly the
 * distribution numla_sampler_sample gives, one row at a time (Leviathan et al. 2023; Chen et
 * al. 2023). out (k + 1) receives the accepted drafts and that last token (*n_out of them, 1 to
 * k + 1; the last is not added to the sampler); lps (k + 1, may be NULL) their logprobs as
 * numla_sampler_sample reports them. */
numla_status numla_sampler_speculate(numla_sampler *s, float *rows, const int32_t *draft,
                                     const float *q, int32_t k, int32_t *out, int32_t *n_out,
                                     numla_logprob_entry *lps);

/* Whether `token` ends the request (stop_token_ids, or one of eos[num_eos] unless ignore_eos). */
int numla_sampler_is_stop(const numla_sampler *s, int32_t token, const int32_t *eos,
                          int32_t num_eos);

/* With a grammar: its document is closed by the tokens added (no token but an end one may
 * follow). 0 without a grammar. */
int numla_sampler_grammar_closed(const numla_sampler *s);

/* Uniform double in [0, 1) from the request's PRNG (exposed for tests). */
double numla_sampler_uniform(numla_sampler *s);

#endif
