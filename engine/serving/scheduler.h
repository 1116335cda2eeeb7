/* engine/serving/scheduler.h — continuous batching on rank 0: which sequences run in the next step,
 * with how many tokens each, and what happens to their KV blocks.
 *
 * Each step (numla_sched_step) packs, in this order and up to max_batch_tokens tokens and
 * max_seqs sequences:
 *   1. every running sequence, oldest admission first: one decode token, or the next chunk of
 *      at most prefill_chunk tokens of its prompt (or of its recomputation, below);
 *   2. waiting requests, first come first served, while the budget and free KV blocks allow
 *      (the head of the queue is never overtaken, so nothing starves).
 * The whole step is one numla_step (engine/model/model.h): its linear layers run as one GEMM with
 * M = step tokens. The step carries the block tables, so every rank applies rank 0's decision,
 * and each sequence's identity (seq_ids: its admission number, new at each admission) with the
 * identities whose admission ended since the last step run (released: finished, cancelled,
 * preempted), for models that keep a cache per sequence (DeepSeek-V4).
 *
 * KV: blocks come from the rank-0 pool (engine/model/kv_cache.h) as a sequence grows. When a running
 * sequence needs a block and none is free, the most recently admitted running sequence is
 * preempted: its blocks are freed and it goes back to the waiting queue (in arrival order, so
 * ahead of newer requests). When admitted again it recomputes its prompt plus the tokens it
 * had generated (chunked like a prefill) and then continues sampling with its own sampler, so
 * greedy output is the same as if it had never been preempted. A request whose prompt +
 * max_tokens cannot fit in the whole pool is finished at once with a per-request error; the
 * others go on. Nothing else turns a full pool into a failure.
 *
 * Prefix cache (on unless no_prefix_cache; engine/model/kv_cache.h, docs/serving.md): when a
 * sequence is admitted with no KV blocks (a new request, or one preempted), the longest run of
 * cached full blocks matching the start of its known tokens is taken from the pool and its
 * computation starts after them. At most (known - 1) / block_size blocks are taken, so the
 * computed part starts at a block boundary with at least one token (there are logits to sample
 * and no cached block is ever written). After every step each block a sequence has completely
 * written (prompt or generated tokens) is put in the cache, so a later request that repeats the
 * prefix, or the next turn of a conversation, or the same sequence after a preemption, finds it.
 * When the block the queue's head would compute first is being computed by a running sequence,
 * admission waits for it (a burst sharing one system prompt computes it once). Idle cached
 * blocks count as free for admission and preemption: they are evicted (least
 * recently used first) only when a fresh block is needed. Since every rank follows rank 0's
 * block tables, the other ranks need no cache state of their own.
 *
 * Prompt logprobs (a request's prompt_logprobs, request_io.h): every prompt row's logits are
 * asked of the engine as well (rank 0 gets the full vocabulary row, as for sampling) and
 * reduced at once to the next prompt token's logprob and the top N, so a long prompt costs
 * num_prompt small entries, never num_prompt vocabulary rows. Such a request takes no blocks
 * from the prefix cache until its prompt rows are all computed (it computes its whole prompt;
 * its blocks are cached for others as usual), and with max_tokens 0 it finishes ("length")
 * once its prompt is computed, without sampling.
 *
 * Speculative decoding (spec_k > 0, docs/speculative.md): after each step the MTP layer runs
 * over the rows the step made final (mtp_exec; its hidden states are that step's rows), and for
 * a greedy sequence in decode the last such row and K - 1 chained rows propose K draft tokens.
 * The next step feeds the sequence's last token and its drafts (they count against the token
 * budget, never preempt anyone and never pass max_tokens); its rows are sampled in order, each
 * with the sampler as it would be without speculation, and a greedy request's drafts are
 * accepted while the sampled token equals them: the output is the tokens of decoding without
 * drafts. A sampled request draws each draft from the sampler's distribution of its MTP row and
 * accepts it with probability min(1, p/q) (numla_sampler_speculate): its tokens have exactly
 * the distribution of decoding without drafts (not the same draws). Rows past the
 * first disagreement leave no trace: they are beyond the sequence's length (the next step
 * writes over them), never in the prefix cache, never counted, sampled or reported.
 *
 * Results come back through the done callback in completion order. Requests are borrowed: the
 * caller keeps each numla_request alive until its callback (or until the scheduler is
 * destroyed, for requests dropped by numla_sched_drop_waiting).
 *
 * Not collective itself: exec (numla_engine_step on rank 0, or a local numla_model_forward)
 * is the collective part. Not thread-safe.
 */
#ifndef NUMLA_ENGINE_SCHEDULER_H
#define NUMLA_ENGINE_SCHEDULER_H

#include <stdint.h>

#include "common/status.h"
#include "engine/model/kv_cache.h"
#include "engine/model/model.h"
#include "engine/serving/request_io.h"
#include "engine/serving/sampler.h"

/* Run one step on every rank; logits: (step->num_logit_rows, vocab) fp32, the full vocabulary. */
typedef numla_status (*numla_sched_exec_fn)(void *ctx, const numla_step *step, float *logits);
/* Run one step of the model's MTP layer on every rank (numla_engine_mtp_step: hidden_rows
 * (step->num_tokens) as there); ctx is exec's. */
typedef numla_status (*numla_sched_mtp_fn)(void *ctx, const numla_step *step,
                                           const int32_t *hidden_rows, float *logits);

/* The most draft tokens a step verifies per sequence (--speculative mtp:K); with its token, at
 * most the rows whose bits the model keeps equal to one-row steps' (model.h). */
enum { NUMLA_SCHED_MAX_DRAFT = 8 };
_Static_assert((int)NUMLA_SCHED_MAX_DRAFT + 1 <= (int)NUMLA_MODEL_VERIFY_MAX_ROWS,
               "a verify step's rows (engine/model/model.h)");

typedef struct numla_sched_output {
    const numla_request *req;
    void *user;                             /* as passed to numla_sched_submit */
    const int32_t *output_tokens;           /* (num_output) */
    int32_t num_output;
    const numla_logprob_entry *logprobs;    /* (num_output) or NULL */
    const numla_logprob_entry *prompt_logprobs; /* (req->num_prompt) when req->prompt_logprobs
                                               and the prompt was computed, else NULL: entry p
                                               is prompt token p's raw logprob given tokens
                                               0..p-1 with the top prompt_logprobs_top; entry 0
                                               has none (num_top -1: the APIs' null) */
    const char *finish_reason;              /* "stop", "length", "error", "cancelled" */
    const char *error;                      /* NULL unless "error" */
    double arrival_s, first_token_s, finish_s; /* numla_now_s(); first_token_s 0: none */
    int32_t preemptions;                    /* times this request was preempted */
    int32_t cached_tokens;                  /* prompt tokens served from the prefix cache at
                                               the first admission */
    /* speculative decoding (spec_k > 0): verify steps that checked drafts, draft tokens they
     * checked and accepted (mean accepted length: (accepted + steps) / steps tokens a step) */
    int32_t spec_steps, spec_drafted, spec_accepted;
} numla_sched_output;

/* Called once per request, in completion order; `o` is valid during the call only. */
typedef void (*numla_sched_done_fn)(void *ctx, const numla_sched_output *o);

typedef struct numla_sched_options {
    int32_t max_batch_tokens;  /* tokens per step; 0: 2048 */
    int32_t max_seqs;          /* sequences per step (and running at once); 0: 64 */
    int32_t prefill_chunk;     /* prompt tokens of one sequence per step; 0: 512 */
    int64_t vocab_size;
    int32_t num_eos;
    const int32_t *eos_token_ids; /* (num_eos), copied */
    /* Optional: called after each generated token of a request that is not an EOS or stop
     * token (user as passed to numla_sched_submit, tokens generated so far, the newest
     * token's logprobs or NULL); returning 1 finishes it with "stop" (text stop strings live
     * here, outside the scheduler). NULL: none. */
    int (*stop_check)(void *ctx, void *user, const int32_t *output_tokens, int32_t num_output,
                      const numla_logprob_entry *logprob);
    void *stop_ctx;
    int no_prefix_cache;       /* 1: neither look blocks up nor cache them (--no-prefix-cache) */
    uint64_t prefix_salt;      /* the model's identity in the prefix cache's block hashes */
    int64_t prefix_stride;     /* > 0: a cached prefix is taken only up to a multiple of this
                                  many tokens and of the block size (DeepSeek-V4: its compress
                                  rates, numla_v4_prefix_stride; the engine keeps its state
                                  there only); 0: any block */
    /* The tokens' bytes for requests with a response_format grammar (borrowed; the serve loop
     * passes its tokenizer): the scheduler builds the grammar vocabulary (a trie of the
     * vocab_size tokens, special ones excluded, the EOS ids as end tokens) at the first such
     * request. NULL: such a request finishes with an error (unless grammar_vocab is set). */
    const numla_tokenizer *tokenizer;
    /* A grammar vocabulary built beforehand (borrowed; numla_grammar_vocab_from_tokenizer over
     * vocab_size with the EOS ids), used instead of building one: a front end that serves
     * several schedulers in turn builds the trie once. NULL: built as above. */
    const numla_grammar_vocab *grammar_vocab;
    /* Logit rows per step for the prompt rows of requests with prompt_logprobs (beside one
     * row per sequence): such a sequence's prompt chunk is cut to the rows left, so the
     * logits buffer grows by at most this many vocabulary rows (at the first such request).
     * 0: 128. */
    int32_t prompt_logit_rows;
    /* Optional: the full logits of those prompt rows as they are computed (a perplexity run
     * scores and keeps whole distributions): after each step that computed some of a
     * prompt_logprobs request's rows, called once for them, in position order: positions
     * first .. first + n - 1, logits (n, vocab_size) fp32, valid during the call only; row p is
     * the distribution of prompt token p + 1. Every row 0 .. num_prompt - 2 comes exactly once
     * (a preempted request's recomputed rows are not reported again). A status other than OK
     * finishes that request with "error" and the message. NULL: none. */
    numla_status (*prompt_rows)(void *ctx, void *user, int32_t first, int32_t n,
                                const float *logits);
    void *prompt_rows_ctx;
    /* Speculative decoding with the model's MTP layer (docs/speculative.md): 1..
     * NUMLA_SCHED_MAX_DRAFT draft tokens per sequence and step, run by mtp_exec (with exec's
     * ctx); 0 (default): off. Greedy requests draft the MTP rows' most likely tokens, sampled
     * ones draw their drafts and verify them by speculative sampling's rule
     * (numla_sampler_speculate). */
    int32_t spec_k;
    numla_sched_mtp_fn mtp_exec;
} numla_sched_options;

typedef struct numla_sched_stats {
    int64_t steps;
    int64_t step_tokens;       /* all tokens run (prefill + decode + recomputation) */
    int64_t prefill_tokens;    /* prompt tokens run for the first time */
    int64_t recompute_tokens;  /* tokens run again after a preemption */
    int64_t decode_tokens;     /* generated tokens fed back */
    int64_t preemptions;
    int64_t prefix_lookup_tokens; /* tokens known at admissions with the cache on */
    int64_t prefix_hit_tokens;    /* of those, served from the cache (hit rate: hit / lookup) */
    int64_t cached_prompt_tokens; /* prompt tokens served from the cache at first admissions */
    int32_t running, waiting;
    int64_t kv_blocks_used, kv_blocks_total; /* used: held by sequences */
    int64_t kv_blocks_cached;     /* in the prefix cache (held or idle) */
    int64_t kv_blocks_cached_idle; /* cached, held by no sequence (evictable) */
    int64_t kv_evictions;         /* idle cached blocks taken back as fresh blocks */
    double exec_s;             /* time inside exec */
    /* speculative decoding: verify steps (sequences that had drafts), draft tokens checked,
     * accepted; MTP steps run and their time (in mtp_exec) */
    int64_t spec_steps, spec_drafted, spec_accepted;
    int64_t mtp_steps;
    double mtp_s;
} numla_sched_stats;

typedef struct numla_sched numla_sched;

/* kv: the rank-0 pool the scheduler allocates from (borrowed). */
numla_status numla_sched_create(const numla_sched_options *opts, numla_kv_cache *kv,
                                numla_sched_exec_fn exec, void *exec_ctx,
                                numla_sched_done_fn done, void *done_ctx, numla_sched **out);
void numla_sched_destroy(numla_sched **s);

/* Queue a request. An invalid request (req->error set), one with max_tokens 0 or one that cannot
 * fit in the pool is answered through the done callback right away. Only running out of memory
 * is an error status. */
numla_status numla_sched_submit(numla_sched *s, const numla_request *req, void *user);

/* Plan and run one step (no-op when there is nothing to do). A failing exec finishes the
 * step's requests with an error and returns OK (the run goes on); only running out of memory
 * is an error status. */
numla_status numla_sched_step(numla_sched *s);

/* Whether any request is waiting or running. */
int numla_sched_busy(const numla_sched *s);

/* Forget waiting requests that never produced a token (for a clean stop: the ones in flight
 * finish, the rest are left for --resume). Returns how many were dropped; their done callback
 * is never called. */
int32_t numla_sched_drop_waiting(numla_sched *s);

/* Take the request submitted with `user` out of the queue or the running batch, free its KV
 * blocks and answer it through the done callback with finish_reason "cancelled". Returns 1
 * when found, 0 when no such request is waiting or running. Not from inside a callback (a
 * step is iterating its sequences then). */
int numla_sched_cancel(numla_sched *s, void *user);

void numla_sched_stats_get(const numla_sched *s, numla_sched_stats *out);

#endif
