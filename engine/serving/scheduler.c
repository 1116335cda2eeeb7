/* engine/serving/scheduler.c — continuous batching with chunked prefill and preemption by
 * recomputation (see scheduler.h). Owns the per-sequence state (tokens so far, sampler, KV
 * blocks) and the step arrays handed to exec; never touches the model or MPI itself. */
#include "engine/serving/scheduler.h"

#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"

typedef struct sched_seq {
    const numla_request *req;
    void *user;
    int64_t arrival;           /* FCFS order */
    int64_t admitted;          /* admission stamp: the largest is preempted first */
    int32_t *tokens;           /* (num_prompt + max_tokens) prompt then generated */
    int32_t num_tokens;        /* known: prompt + generated */
    int32_t num_computed;      /* tokens whose KV rows are in the cache */
    int32_t num_gen;
    int32_t preemptions;
    int32_t recompute_end;     /* tokens known at the last preemption (accounting only) */
    numla_kv_seq kv;
    numla_kv_seq own;          /* while admitted: the pool's seq_blocks blocks that stand for
                                  its own cache (DeepSeek-V4's window rings and compressors'
                                  rows); never in a step's table */
    numla_kv_hash *hashes;     /* (ceil((num_prompt + max_tokens) / block_size)) chained hashes of
                                  the full blocks of tokens, prefix cache on only */
    int32_t num_hashed;        /* entries of hashes computed */
    int32_t num_registered;    /* leading blocks of kv offered to the prefix cache */
    int32_t cached_tokens;     /* prompt tokens served from the cache at the first admission */
    int admitted_once;         /* admitted at least once */
    int holding;               /* its admission's id (admitted) is known to the engine */
    numla_sampler *smp;        /* NULL until first admitted */
    numla_logprob_entry *lps;  /* (max_tokens) or NULL */
    numla_logprob_entry *plps; /* (num_prompt) req->prompt_logprobs: entry p for prompt token p,
                                  entry 0 empty (num_top -1); else NULL */
    int32_t plp_done;          /* entries 1..plp_done are filled */
    double arrival_s, first_token_s;
    /* this step */
    int32_t step_n;            /* tokens in the current step, 0: not in it */
    int32_t step_row;          /* logit row, -1: none */
    int32_t step_plp_row;      /* first logit row of its prompt rows (entries plp_done + 1...) */
    int32_t step_plp_n;        /* how many, 0: none */
    /* speculative decoding (spec_k > 0) */
    int spec;                  /* this request drafts */
    int32_t draft[NUMLA_SCHED_MAX_DRAFT]; /* (num_draft) proposed tokens after the known ones */
    float *draft_q;            /* (spec_k, vocab) sampled requests: the distribution each draft
                                  was drawn from (numla_sampler_probs of its MTP row) */
    int32_t num_draft;
    int32_t step_draft;        /* drafts this step verifies (rows after the last known token) */
    int32_t step_c0;           /* num_computed before this step */
    int32_t step_q0;           /* the step row of its first token */
    int32_t mtp_row;           /* row in the last MTP step whose block output chains, -1 none */
    int32_t spec_steps, spec_drafted, spec_accepted;
} sched_seq;

/* One step sequence's draw: the tokens (one, or with drafts the accepted ones and the token
 * sampled after them), or the status and the worker thread's message. */
typedef struct sched_draw {
    int32_t ntok;
    int32_t toks[NUMLA_SCHED_MAX_DRAFT + 1];
    numla_status st;
    char msg[512];
} sched_draw;

struct numla_sched {
    numla_sched_options o;
    int32_t eos[16];
    numla_grammar_vocab *gvocab; /* built at the first request with a grammar */
    numla_kv_cache *kv;
    numla_sched_exec_fn exec;
    void *exec_ctx;
    numla_sched_done_fn done;
    void *done_ctx;

    sched_seq **waiting;       /* (num_waiting) sorted by arrival */
    int32_t num_waiting, cap_waiting;
    sched_seq **running;       /* (num_running) in admission order */
    int32_t num_running;
    int64_t next_arrival, next_admit;

    /* step arrays */
    sched_seq **step_seqs;     /* (max_seqs) */
    int32_t *tokens;           /* (max_batch_tokens) */
    int32_t *positions;        /* (max_batch_tokens) */
    int64_t *slots;            /* (max_batch_tokens) */
    int32_t *qsl;              /* (max_seqs + 1) */
    int32_t *seq_lens;         /* (max_seqs) */
    int32_t *logit_rows;       /* (cap_rows) */
    int32_t cap_rows;          /* base_rows, + prompt_logit_rows once a request wants them */
    int32_t base_rows;         /* max_seqs · (1 + spec_k): a row per sequence and draft */
    int32_t *hidden_rows;      /* (max_batch_tokens) an MTP step's hidden rows */
    sched_draw *draws;         /* (max_seqs) each step sequence's token, drawn on the team */
    int32_t *tables;           /* (max_seqs, cap_tables) */
    int64_t cap_tables;
    float *logits;             /* (cap_rows, vocab) */
    int64_t *seq_ids;          /* (max_seqs) each step sequence's admission (numla_step) */
    int64_t *released;         /* (num_released) admissions ended since the last step run */
    int32_t num_released, cap_released;
    int fresh;                 /* no step has run: the first frees whatever the engine holds
                                  (numla_step.release_all; an earlier scheduler's sequences) */

    numla_sched_stats st;
};

/* q's admission is over (finished, cancelled, preempted): the next step tells the engine, which
 * frees whatever it keeps for it (numla_step.released). Without memory the id is only not
 * passed on (the engine frees it with itself). */
static void seq_release(numla_sched *s, sched_seq *q)
{
    if (!q->holding)
        return;
    q->holding = 0;
    if (s->num_released == s->cap_released) {
        const int32_t cap = s->cap_released ? 2 * s->cap_released : 64;
        int64_t *r = realloc(s->released, (size_t)cap * sizeof *r);
        if (!r)
            return;
        s->released = r;
        s->cap_released = cap;
    }
    s->released[s->num_released++] = q->admitted;
}

static void seq_free(numla_sched *s, sched_seq *q)
{
    if (!q)
        return;
    seq_release(s, q);
    numla_kv_seq_release(s->kv, &q->kv);
    numla_kv_seq_release(s->kv, &q->own);
    numla_sampler_destroy(&q->smp);
    free(q->hashes);
    free(q->tokens);
    free(q->lps);
    free(q->plps);
    free(q->draft_q);
    free(q);
}

/* A request's response_format: its sampler masks with the grammar over the vocabulary. */
static numla_status grammar_attach(numla_sched *s, sched_seq *q)
{
    if (s->o.grammar_vocab)
        return numla_sampler_set_grammar(q->smp, q->req->grammar, s->o.grammar_vocab);
    if (!s->o.tokenizer)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "response_format needs the model's tokenizer");
    if (!s->gvocab)
        NUMLA_CHECK(numla_grammar_vocab_from_tokenizer(s->o.tokenizer, s->o.vocab_size, s->eos,
                                                       s->o.num_eos, &s->gvocab));
    return numla_sampler_set_grammar(q->smp, q->req->grammar, s->gvocab);
}

void numla_sched_destroy(numla_sched **ps)
{
    if (!ps || !*ps)
        return;
    numla_sched *s = *ps;
    for (int32_t i = 0; i < s->num_waiting; i++)
        seq_free(s, s->waiting[i]);
    numla_grammar_vocab_destroy(&s->gvocab);
    for (int32_t i = 0; i < s->num_running; i++)
        seq_free(s, s->running[i]);
    free(s->waiting);
    free(s->running);
    free(s->step_seqs);
    free(s->tokens);
    free(s->positions);
    free(s->slots);
    free(s->qsl);
    free(s->seq_lens);
    free(s->logit_rows);
    free(s->hidden_rows);
    free(s->draws);
    free(s->tables);
    free(s->logits);
    free(s->seq_ids);
    free(s->released);
    free(s);
    *ps = NULL;
}

numla_status numla_sched_create(const numla_sched_options *opts, numla_kv_cache *kv,
                                numla_sched_exec_fn exec, void *exec_ctx,
                                numla_sched_done_fn done, void *done_ctx, numla_sched **out)
{
    *out = NULL;
    numla_sched_options o = *opts;
    if (o.max_batch_tokens == 0)
        o.max_batch_tokens = 2048;
    if (o.max_seqs == 0)
        o.max_seqs = 64;
    if (o.prefill_chunk == 0)
        o.prefill_chunk = 512;
    if (o.prompt_logit_rows == 0)
        o.prompt_logit_rows = 128;
    if (o.max_batch_tokens < 1 || o.max_seqs < 1 || o.prefill_chunk < 1 || o.vocab_size < 1 ||
        o.prompt_logit_rows < 1 ||
        o.num_eos < 0 || o.num_eos > 16 || !kv || !exec || !done)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "scheduler: bad options (max_batch_tokens %d, max_seqs %d, prefill_chunk %d, "
                   "vocab %lld, %d eos ids)",
                   o.max_batch_tokens, o.max_seqs, o.prefill_chunk, (long long)o.vocab_size,
                   o.num_eos);
    if (o.spec_k < 0 || o.spec_k > NUMLA_SCHED_MAX_DRAFT || (o.spec_k > 0 && !o.mtp_exec))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "scheduler: %d draft tokens (speculative decoding "
                   "takes 1 to %d, and an MTP step to run)", o.spec_k, NUMLA_SCHED_MAX_DRAFT);
    if (o.max_batch_tokens < o.max_seqs)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "scheduler: --max-batch-tokens %d is below --max-seqs %d (every running "
                   "sequence needs a token per step)", o.max_batch_tokens, o.max_seqs);
    numla_sched *s = calloc(1, sizeof *s);
    if (!s)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "scheduler: no memory");
    s->o = o;
    s->fresh = 1;
    if (o.num_eos)
        memcpy(s->eos, o.eos_token_ids, (size_t)o.num_eos * sizeof *s->eos);
    s->o.eos_token_ids = s->eos;
    s->kv = kv;
    s->exec = exec;
    s->exec_ctx = exec_ctx;
    s->done = done;
    s->done_ctx = done_ctx;
    const size_t T = (size_t)o.max_batch_tokens, B = (size_t)o.max_seqs;
    s->running = calloc(B, sizeof *s->running);
    s->step_seqs = calloc(B, sizeof *s->step_seqs);
    s->tokens = malloc(T * sizeof *s->tokens);
    s->positions = malloc(T * sizeof *s->positions);
    s->slots = malloc(T * sizeof *s->slots);
    s->qsl = malloc((B + 1) * sizeof *s->qsl);
    s->seq_lens = malloc(B * sizeof *s->seq_lens);
    const size_t rows = B * (size_t)(1 + o.spec_k);
    s->logit_rows = malloc(rows * sizeof *s->logit_rows);
    s->hidden_rows = malloc(T * sizeof *s->hidden_rows);
    s->draws = malloc(B * sizeof *s->draws);
    s->logits = malloc(rows * (size_t)o.vocab_size * sizeof *s->logits);
    s->seq_ids = malloc(B * sizeof *s->seq_ids);
    s->cap_rows = s->base_rows = (int32_t)rows;
    if (!s->running || !s->step_seqs || !s->tokens || !s->positions || !s->slots || !s->qsl ||
        !s->seq_lens || !s->logit_rows || !s->logits || !s->draws || !s->seq_ids ||
        !s->hidden_rows) {
        numla_sched_destroy(&s);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "scheduler: no memory for %d tokens x %d sequences",
                   o.max_batch_tokens, o.max_seqs);
    }
    s->st.kv_blocks_total = kv->num_blocks;
    if (!o.no_prefix_cache) {
        numla_status ps = numla_kv_cache_prefix_enable(kv, o.prefix_salt);
        if (ps != NUMLA_STATUS_OK) {
            numla_sched_destroy(&s);
            return ps;
        }
    }
    *out = s;
    return NUMLA_STATUS_OK;
}

static void finish(numla_sched *s, sched_seq *q, const char *reason, const char *error)
{
    numla_sched_output o = {
        .req = q->req, .user = q->user, .output_tokens = q->tokens ? q->tokens + q->req->num_prompt : NULL,
        .num_output = q->num_gen, .logprobs = q->lps, .finish_reason = reason, .error = error,
        .prompt_logprobs = q->plps && q->plp_done == q->req->num_prompt - 1 ? q->plps : NULL,
        .arrival_s = q->arrival_s, .first_token_s = q->first_token_s, .finish_s = numla_now_s(),
        .preemptions = q->preemptions, .cached_tokens = q->cached_tokens,
        .spec_steps = q->spec_steps, .spec_drafted = q->spec_drafted,
        .spec_accepted = q->spec_accepted,
    };
    s->done(s->done_ctx, &o);
}

/* Answer a request that never enters the queue. */
static void answer_now(numla_sched *s, const numla_request *req, void *user, const char *reason,
                       const char *error)
{
    double t = numla_now_s();
    numla_sched_output o = {.req = req, .user = user, .finish_reason = reason, .error = error,
                            .arrival_s = t, .finish_s = t};
    s->done(s->done_ctx, &o);
}

/* Insert into the waiting queue keeping arrival order (preempted sequences go back ahead of
 * the requests that arrived after them). */
static numla_status waiting_insert(numla_sched *s, sched_seq *q)
{
    if (s->num_waiting == s->cap_waiting) {
        int32_t cap = s->cap_waiting ? 2 * s->cap_waiting : 64;
        sched_seq **w = realloc(s->waiting, (size_t)cap * sizeof *w);
        if (!w)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "scheduler: no memory for the waiting queue");
        s->waiting = w;
        s->cap_waiting = cap;
    }
    int32_t i = s->num_waiting;
    while (i > 0 && s->waiting[i - 1]->arrival > q->arrival) {
        s->waiting[i] = s->waiting[i - 1];
        i--;
    }
    s->waiting[i] = q;
    s->num_waiting++;
    return NUMLA_STATUS_OK;
}

/* Room for the prompt rows of prompt_logprobs requests: the logit rows and the logits buffer
 * grow once, by prompt_logit_rows. */
static numla_status grow_rows(numla_sched *s)
{
    const int32_t want = s->base_rows + s->o.prompt_logit_rows;
    if (s->cap_rows >= want)
        return NUMLA_STATUS_OK;
    int32_t *r = realloc(s->logit_rows, (size_t)want * sizeof *r);
    if (r)
        s->logit_rows = r;
    float *l = r ? realloc(s->logits, (size_t)want * (size_t)s->o.vocab_size * sizeof *l) : NULL;
    if (!l)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "scheduler: no memory for %d logit rows of %lld",
                   want, (long long)s->o.vocab_size);
    s->logits = l;
    s->cap_rows = want;
    return NUMLA_STATUS_OK;
}

/* Prompt rows q still needs logits of (prompt_logprobs): positions plp_done..num_prompt-2. */
static int plp_pending(const sched_seq *q)
{
    return q->plps && q->plp_done < q->req->num_prompt - 1;
}

/* The longest chunk of at most n tokens from position c whose prompt rows needing logits fit
 * in *rows_left (taken from it). 0: none fits this step. */
static int32_t plp_fit(const sched_seq *q, int32_t c, int32_t n, int32_t *rows_left)
{
    if (!plp_pending(q))
        return n;
    const int32_t start = c > q->plp_done ? c : q->plp_done, end = q->req->num_prompt - 1;
    if (start + *rows_left < c + n && start + *rows_left < end)
        n = start + *rows_left - c;
    const int32_t hi = c + n < end ? c + n : end;
    if (hi > start)
        *rows_left -= hi - start;
    return n;
}

numla_status numla_sched_submit(numla_sched *s, const numla_request *req, void *user)
{
    if (req->error[0]) {
        answer_now(s, req, user, "error", req->error);
        return NUMLA_STATUS_OK;
    }
    const int32_t maxt = req->params.max_tokens;
    if (maxt == 0 && !req->prompt_logprobs) {
        answer_now(s, req, user, "length", NULL);
        return NUMLA_STATUS_OK;
    }
    if (req->num_prompt < 1) {
        char msg[128];
        snprintf(msg, sizeof msg, "line %lld: empty prompt", (long long)req->line);
        answer_now(s, req, user, "error", msg);
        return NUMLA_STATUS_OK;
    }
    /* The last generated token is never fed back: prompt + max_tokens - 1 rows at most (the
     * prompt's rows with max_tokens 0). */
    int64_t rows = (int64_t)req->num_prompt + (maxt > 0 ? maxt - 1 : 0);
    int64_t blocks = (rows + s->kv->block_size - 1) / s->kv->block_size;
    if (blocks + s->kv->seq_blocks > s->kv->num_blocks) {
        char msg[512];
        if (s->kv->seq_blocks > 0) /* DeepSeek-V4: the cache's bytes (docs/design.md §3.1) */
            snprintf(msg, sizeof msg,
                     "line %lld: the request's cache needs %.2f MiB (%d prompt + %d max_tokens "
                     "tokens: %lld blocks of %d tokens, and %d blocks for the sequence's window "
                     "and compressors' rows, at %zu bytes a block) but the whole KV pool is "
                     "%.2f MiB (%lld blocks); raise --kv-memory/--kv-blocks or lower max_tokens",
                     (long long)req->line,
                     (double)(blocks + s->kv->seq_blocks) * (double)s->kv->block_bytes / 1048576.0,
                     req->num_prompt, maxt, (long long)blocks, s->kv->block_size,
                     s->kv->seq_blocks, s->kv->block_bytes,
                     (double)s->kv->num_blocks * (double)s->kv->block_bytes / 1048576.0,
                     (long long)s->kv->num_blocks);
        else
            snprintf(msg, sizeof msg,
                     "line %lld: the request needs %lld KV blocks (%d prompt + %d max_tokens "
                     "tokens, %d per block) but the whole pool has %lld; raise "
                     "--kv-memory/--kv-blocks or lower max_tokens",
                     (long long)req->line, (long long)blocks, req->num_prompt, maxt,
                     s->kv->block_size, (long long)s->kv->num_blocks);
        answer_now(s, req, user, "error", msg);
        return NUMLA_STATUS_OK;
    }
    sched_seq *q = calloc(1, sizeof *q);
    if (q)
        q->tokens = malloc(((size_t)req->num_prompt + (size_t)maxt) * sizeof *q->tokens);
    if (q && q->tokens && req->params.logprobs >= 0)
        q->lps = calloc((size_t)maxt, sizeof *q->lps);
    if (q && q->tokens && !s->o.no_prefix_cache)
        q->hashes = malloc((size_t)(rows / s->kv->block_size + 1) * sizeof *q->hashes);
    if (q && q->tokens && req->prompt_logprobs) {
        q->plps = calloc((size_t)req->num_prompt, sizeof *q->plps);
        if (q->plps) {
            q->plps[0] = (numla_logprob_entry){.token = req->prompt_tokens[0], .num_top = -1};
            if (grow_rows(s) != NUMLA_STATUS_OK) {
                seq_free(s, q);
                return NUMLA_STATUS_NO_MEMORY;
            }
        }
    }
    if (!q || !q->tokens || (req->params.logprobs >= 0 && !q->lps) ||
        (!s->o.no_prefix_cache && !q->hashes) || (req->prompt_logprobs && !q->plps)) {
        seq_free(s, q);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "scheduler: no memory for a request of %d + %d tokens",
                   req->num_prompt, maxt);
    }
    q->req = req;
    q->user = user;
    q->arrival = s->next_arrival++;
    q->arrival_s = numla_now_s();
    memcpy(q->tokens, req->prompt_tokens, (size_t)req->num_prompt * sizeof *q->tokens);
    q->num_tokens = req->num_prompt;
    q->spec = s->o.spec_k > 0;
    if (q->spec && req->params.temperature != 0 &&
        !(q->draft_q = malloc((size_t)s->o.spec_k * (size_t)s->o.vocab_size * sizeof(float)))) {
        seq_free(s, q);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "scheduler: no memory for %d draft distributions",
                   s->o.spec_k);
    }
    numla_status st = waiting_insert(s, q);
    if (st != NUMLA_STATUS_OK)
        seq_free(s, q);
    return st;
}

int numla_sched_busy(const numla_sched *s) { return s->num_waiting > 0 || s->num_running > 0; }

int32_t numla_sched_drop_waiting(numla_sched *s)
{
    int32_t kept = 0, dropped = 0;
    for (int32_t i = 0; i < s->num_waiting; i++) {
        sched_seq *q = s->waiting[i];
        if (q->num_gen == 0) {
            seq_free(s, q);
            dropped++;
        } else {
            s->waiting[kept++] = q;
        }
    }
    s->num_waiting = kept;
    return dropped;
}

static void remove_running(numla_sched *s, sched_seq *q);

int numla_sched_cancel(numla_sched *s, void *user)
{
    sched_seq *q = NULL;
    for (int32_t i = 0; i < s->num_waiting && !q; i++)
        if (s->waiting[i]->user == user) {
            q = s->waiting[i];
            memmove(s->waiting + i, s->waiting + i + 1,
                    (size_t)(s->num_waiting - i - 1) * sizeof *s->waiting);
            s->num_waiting--;
        }
    for (int32_t i = 0; i < s->num_running && !q; i++)
        if (s->running[i]->user == user) {
            q = s->running[i];
            remove_running(s, q);
        }
    if (!q)
        return 0;
    finish(s, q, "cancelled", NULL);
    seq_free(s, q);
    return 1;
}

void numla_sched_stats_get(const numla_sched *s, numla_sched_stats *out)
{
    *out = s->st;
    out->running = s->num_running;
    out->waiting = s->num_waiting;
    out->kv_blocks_total = s->kv->num_blocks;
    out->kv_blocks_used = s->kv->num_blocks - numla_kv_cache_available(s->kv);
    out->kv_blocks_cached = s->kv->num_cached;
    out->kv_blocks_cached_idle = s->kv->num_idle;
    out->kv_evictions = s->kv->evictions;
}

/* Free the blocks of the most recently admitted running sequence and queue it again; it will
 * recompute everything it knows (prompt + generated). */
static numla_status preempt_last(numla_sched *s)
{
    sched_seq *q = s->running[--s->num_running];
    seq_release(s, q);
    numla_kv_seq_release(s->kv, &q->kv);
    numla_kv_seq_release(s->kv, &q->own);
    q->num_computed = 0;
    q->num_registered = 0;
    q->num_draft = 0; /* drafted again once it is recomputed */
    q->recompute_end = q->num_tokens;
    q->preemptions++;
    s->st.preemptions++;
    NUMLA_DEBUG("scheduler: preempted line %lld (%d tokens known, %d generated)",
                    (long long)q->req->line, q->num_tokens, q->num_gen);
    return waiting_insert(s, q);
}

/* Chained hashes of q's first `blocks` full blocks of known tokens. */
static void seq_hash_upto(const numla_sched *s, sched_seq *q, int32_t blocks)
{
    const int32_t bs = s->kv->block_size;
    for (int32_t i = q->num_hashed; i < blocks; i++)
        q->hashes[i] = numla_kv_hash_block(i ? q->hashes[i - 1] : numla_kv_cache_prefix_root(s->kv),
                                           q->tokens + (size_t)i * (size_t)bs, bs);
    if (blocks > q->num_hashed)
        q->num_hashed = blocks;
}

/* Blocks a taken prefix is a multiple of (prefix_stride; 1 without). */
static int32_t prefix_group(const numla_sched *s)
{
    const int64_t bs = s->kv->block_size, st = s->o.prefix_stride;
    if (st <= 0)
        return 1;
    int64_t a = st, b = bs; /* lcm(st, bs) / bs */
    while (b) {
        const int64_t t = a % b;
        a = b;
        b = t;
    }
    return (int32_t)(st / a);
}

/* The cached blocks q could start from (q holds no blocks): how many, and how many of them are
 * idle (taking those uses up pool that admission must account for). */
static int32_t prefix_hits(const numla_sched *s, sched_seq *q, int32_t *idle)
{
    *idle = 0;
    if (s->o.no_prefix_cache || q->kv.num_blocks > 0 || plp_pending(q))
        return 0; /* prompt logprobs: every prompt row is computed */
    const int32_t bs = s->kv->block_size, maxb = (q->num_tokens - 1) / bs;
    seq_hash_upto(s, q, maxb);
    int32_t n = 0;
    for (; n < maxb; n++) {
        int32_t b = numla_kv_cache_prefix_lookup(
            s->kv, q->hashes[n], n ? q->hashes[n - 1] : numla_kv_cache_prefix_root(s->kv),
            q->tokens + (size_t)n * (size_t)bs);
        if (b < 0)
            break;
    }
    n -= n % prefix_group(s);
    for (int32_t i = 0; i < n; i++)
        *idle += s->kv->refcount[numla_kv_cache_prefix_lookup(
                     s->kv, q->hashes[i], i ? q->hashes[i - 1] : numla_kv_cache_prefix_root(s->kv),
                     q->tokens + (size_t)i * (size_t)bs)] == 0;
    return n;
}

/* Whether the block q would compute first (after its `hits` cached ones) is being computed by a
 * running sequence, which will cache it: then q waits for it rather than compute it again (a
 * burst of requests with one system prompt computes it once). Running sequences advance every
 * step, so the wait ends. */
static int prefix_pending(const numla_sched *s, sched_seq *q, int32_t hits)
{
    /* with prefix_stride, the next prefix q could take ends `g` blocks further */
    const int32_t g = prefix_group(s), bs = s->kv->block_size, end = (hits + g) * bs;
    if (s->o.no_prefix_cache || end > q->num_tokens - 1 || plp_pending(q))
        return 0; /* that block would be computed anyway (the last prompt token's block) */
    seq_hash_upto(s, q, hits + g);
    const numla_kv_hash h = q->hashes[hits + g - 1];
    for (int32_t i = 0; i < s->num_running; i++) {
        sched_seq *r = s->running[i];
        if (r->num_tokens < end || r->num_computed >= end)
            continue;
        seq_hash_upto(s, r, hits + g);
        if (r->hashes[hits + g - 1].a == h.a && r->hashes[hits + g - 1].b == h.b)
            return 1;
    }
    return 0;
}

/* Take the first `hits` cached blocks of q's tokens (found by prefix_hits just before). */
static numla_status prefix_take(numla_sched *s, sched_seq *q, int32_t hits)
{
    const int32_t bs = s->kv->block_size;
    for (int32_t n = 0; n < hits; n++) {
        int32_t b = numla_kv_cache_prefix_lookup(
            s->kv, q->hashes[n], n ? q->hashes[n - 1] : numla_kv_cache_prefix_root(s->kv),
            q->tokens + (size_t)n * (size_t)bs);
        numla_kv_cache_prefix_acquire(s->kv, b);
        NUMLA_CHECK(numla_kv_seq_append(&q->kv, b));
    }
    q->num_computed = hits * bs;
    q->num_registered = hits;
    return NUMLA_STATUS_OK;
}

/* Whether the engine keeps a prefix's state by stride with the MTP layer's cache in it
 * (DeepSeek-V4 drafting, docs/serving.md "DeepSeek-V4's cache"): then a block is offered to the
 * prefix cache only once the MTP step has run its rows too (spec_draft), so a cached block's
 * state is complete; a sequence that ends in the step that wrote its last rows leaves those
 * blocks uncached. */
static int prefix_after_mtp(const numla_sched *s)
{
    return s->o.spec_k > 0 && s->o.prefix_stride > 0;
}

/* Offer q's blocks whose rows are all written to the prefix cache. */
static void prefix_register(numla_sched *s, sched_seq *q)
{
    if (s->o.no_prefix_cache)
        return;
    const int32_t bs = s->kv->block_size, full = q->num_computed / bs;
    if (full <= q->num_registered)
        return;
    seq_hash_upto(s, q, full);
    for (int32_t i = q->num_registered; i < full; i++)
        numla_kv_cache_prefix_insert(s->kv, q->kv.block_table[i], q->hashes[i],
                                     i ? q->hashes[i - 1] : numla_kv_cache_prefix_root(s->kv),
                                     q->tokens + (size_t)i * (size_t)bs);
    q->num_registered = full;
}

static int32_t chunk_for(const numla_sched *s, const sched_seq *q, int32_t budget)
{
    int32_t n = q->num_tokens - q->num_computed;
    if (n > s->o.prefill_chunk)
        n = s->o.prefill_chunk;
    return n < budget ? n : budget;
}

/* How many of q's drafts this step verifies, q feeding n known tokens: the last known token
 * only, and what the budget leaves after one token for each of the `after` running sequences
 * behind it and the free blocks allow (drafts never preempt). */
static int32_t draft_fit(const numla_sched *s, const sched_seq *q, int32_t n, int32_t budget,
                         int32_t after)
{
    if (q->num_draft == 0 || n != 1 || q->num_computed + 1 != q->num_tokens)
        return 0;
    int32_t k = q->num_draft, spare = budget - 1 - after;
    k = k < spare ? k : (spare > 0 ? spare : 0);
    while (k > 0 && numla_kv_seq_blocks_needed(s->kv, &q->kv, q->num_computed + 1 + k) >
                        numla_kv_cache_available(s->kv))
        k--;
    return k;
}

/* Decide this step's sequences and token counts; blocks are reserved here. */
static numla_status plan(numla_sched *s, int32_t *num_seqs)
{
    int32_t budget = s->o.max_batch_tokens, B = 0, preempted = 0;
    int32_t rows_left = s->o.prompt_logit_rows; /* prompt_logprobs rows this step */
    for (int32_t i = 0; i < s->num_running && budget > 0; i++) {
        sched_seq *q = s->running[i];
        int32_t n = plp_fit(q, q->num_computed, chunk_for(s, q, budget), &rows_left);
        if (n == 0)
            continue; /* its prompt rows wait for the next step */
        q->step_draft = draft_fit(s, q, n, budget, s->num_running - i - 1);
        n += q->step_draft;
        int64_t need;
        while ((need = numla_kv_seq_blocks_needed(s->kv, &q->kv, q->num_computed + n)) >
                   numla_kv_cache_available(s->kv) &&
               s->num_running > i) {
            int last = s->running[s->num_running - 1] == q;
            NUMLA_CHECK(preempt_last(s));
            preempted = 1;
            if (last)
                break;
        }
        if (i >= s->num_running)
            break; /* q itself was the newest and is queued again */
        NUMLA_CHECK(numla_kv_seq_reserve(s->kv, &q->kv, q->num_computed + n));
        q->step_n = n;
        s->step_seqs[B++] = q;
        budget -= n;
    }
    /* Admission, strictly FCFS; none in a step that had to preempt (it would thrash). */
    while (!preempted && s->num_waiting > 0 && s->num_running < s->o.max_seqs && budget > 0) {
        sched_seq *q = s->waiting[0];
        int32_t idle = 0, hits = prefix_hits(s, q, &idle);
        if (prefix_pending(s, q, hits))
            break;
        const int32_t hit_tokens = hits * s->kv->block_size;
        q->step_draft = 0;
        int32_t n = q->num_tokens - hit_tokens;
        n = n < s->o.prefill_chunk ? n : s->o.prefill_chunk;
        n = n < budget ? n : budget;
        int32_t rows_after = rows_left;
        n = plp_fit(q, hit_tokens, n, &rows_after);
        if (n == 0)
            break;
        const int64_t fresh = (hit_tokens + n + s->kv->block_size - 1) / s->kv->block_size - hits;
        if (fresh + idle + s->kv->seq_blocks > numla_kv_cache_available(s->kv))
            break;
        if (!q->smp) {
            numla_status st = numla_sampler_create(&q->req->params, (int32_t)s->o.vocab_size,
                                                   &q->smp);
            if (st == NUMLA_STATUS_OK) /* the prompt, for a repetition_penalty */
                st = numla_sampler_add_tokens(q->smp, q->req->prompt_tokens, q->req->num_prompt,
                                              0);
            if (st == NUMLA_STATUS_OK && q->req->grammar)
                st = grammar_attach(s, q);
            if (st != NUMLA_STATUS_OK) {
                char msg[600];
                snprintf(msg, sizeof msg, "line %lld: %s", (long long)q->req->line,
                         numla_error_message());
                memmove(s->waiting, s->waiting + 1, (size_t)--s->num_waiting * sizeof *s->waiting);
                finish(s, q, "error", msg);
                seq_free(s, q);
                if (st == NUMLA_STATUS_NO_MEMORY)
                    return st;
                continue;
            }
        }
        const int first = !q->admitted_once;
        q->admitted_once = 1;
        if (!s->o.no_prefix_cache) {
            s->st.prefix_lookup_tokens += q->num_tokens;
            s->st.prefix_hit_tokens += hit_tokens;
            if (first) {
                q->cached_tokens = hit_tokens;
                s->st.cached_prompt_tokens += hit_tokens;
            }
        }
        rows_left = rows_after;
        NUMLA_CHECK(prefix_take(s, q, hits));
        NUMLA_CHECK(numla_kv_seq_reserve(s->kv, &q->kv, hit_tokens + n));
        /* after its cached blocks are held (fresh blocks may evict idle ones) */
        NUMLA_CHECK(numla_kv_seq_reserve(s->kv, &q->own,
                                         (int64_t)s->kv->seq_blocks * s->kv->block_size));
        memmove(s->waiting, s->waiting + 1, (size_t)--s->num_waiting * sizeof *s->waiting);
        q->admitted = s->next_admit++;
        q->holding = 1;
        s->running[s->num_running++] = q;
        q->step_n = n;
        s->step_seqs[B++] = q;
        budget -= n;
    }
    *num_seqs = B;
    return NUMLA_STATUS_OK;
}

static void remove_running(numla_sched *s, sched_seq *q)
{
    for (int32_t i = 0; i < s->num_running; i++)
        if (s->running[i] == q) {
            memmove(s->running + i, s->running + i + 1,
                    (size_t)(s->num_running - i - 1) * sizeof *s->running);
            s->num_running--;
            return;
        }
}

/* Append the sampled token tok to q's output; the sampler sees it (add: the verify loop has
 * not added it yet), then the stop rules. *reason: NULL to go on, else how q finishes
 * ("error": the message in d->msg). Only running out of memory is an error status. */
static numla_status emit(numla_sched *s, sched_seq *q, sched_draw *d, int32_t tok, int add,
                         double t1, const char **reason)
{
    q->tokens[q->num_tokens++] = tok;
    q->num_gen++;
    /* the sampler's penalties count what the sequence generated (and its grammar follows
     * it: a token the grammar refuses ends this request with an error, not the loop) */
    const numla_status ast = add ? numla_sampler_add_tokens(q->smp, &tok, 1, 1) : NUMLA_STATUS_OK;
    if (ast == NUMLA_STATUS_NO_MEMORY)
        return ast;
    if (ast != NUMLA_STATUS_OK) {
        snprintf(d->msg, sizeof d->msg, "line %lld: %s", (long long)q->req->line,
                 numla_error_message());
        *reason = "error";
        return NUMLA_STATUS_OK;
    }
    if (q->num_gen == 1)
        q->first_token_s = t1;
    if (numla_sampler_is_stop(q->smp, tok, s->eos, s->o.num_eos))
        *reason = "stop";
    else if (s->o.stop_check &&
             s->o.stop_check(s->o.stop_ctx, q->user, q->tokens + q->req->num_prompt, q->num_gen,
                             q->lps ? &q->lps[q->num_gen - 1] : NULL))
        *reason = "stop";
    else if (numla_sampler_grammar_closed(q->smp)) /* response_format: the document closed */
        *reason = "stop";
    else if (q->num_gen >= q->req->params.max_tokens)
        *reason = "length";
    return NUMLA_STATUS_OK;
}

/* The most drafts q may propose now: spec_k, less what would pass max_tokens (a verify step
 * gives at most drafts + 1 tokens). */
static int32_t draft_room(const numla_sched *s, const sched_seq *q)
{
    const int32_t left = q->req->params.max_tokens - q->num_gen - 1;
    return left < s->o.spec_k ? (left > 0 ? left : 0) : s->o.spec_k;
}

/* Greedy draft: the most likely token of an MTP logits row (lowest id on ties). */
static int32_t draft_argmax(const float *lg, int64_t V)
{
    int32_t best = 0;
    for (int64_t v = 1; v < V; v++)
        if (lg[v] > lg[best])
            best = (int32_t)v;
    return best;
}

/* An MTP step failed: its sequences cannot draft consistently any more; they end with the
 * error, as a failed step's do. */
static void spec_fail(numla_sched *s, int32_t B)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "MTP step failed: %s", numla_error_message());
    NUMLA_ERROR("scheduler: %s", msg);
    for (int32_t b = 0; b < B; b++) {
        sched_seq *q = s->step_seqs[b];
        if (!q || !q->spec)
            continue;
        char m2[1100];
        snprintf(m2, sizeof m2, "line %lld: %s", (long long)q->req->line, msg);
        remove_running(s, q);
        finish(s, q, "error", m2);
        seq_free(s, q);
        s->step_seqs[b] = NULL;
    }
}

/* After a step: the MTP layer over the rows the step made final for every drafting sequence
 * (hidden states: those rows of the step; tokens: the next known ones), then the drafts of the
 * sequences in decode: the last row's most likely token and K - 1 chained rows (each fed the
 * previous draft and the previous row's block output). The step arrays are reused. */
static numla_status spec_draft(numla_sched *s, int32_t B)
{
    int32_t n = 0, T = 0, R = 0, K = 0;
    int64_t maxblk = 1;
    for (int32_t b = 0; b < B; b++) {
        sched_seq *q = s->step_seqs[b];
        if (!q || !q->spec || q->num_computed <= q->step_c0)
            continue;
        const int32_t want = q->num_computed + 1 == q->num_tokens ? draft_room(s, q) : 0;
        /* the chained rows' slots (positions up to num_tokens + want - 3) must be reserved */
        int32_t k = want;
        while (k > 1 && numla_kv_seq_blocks_needed(s->kv, &q->kv, q->num_tokens + k - 2) >
                            numla_kv_cache_available(s->kv))
            k--;
        if (k > 1)
            NUMLA_CHECK(numla_kv_seq_reserve(s->kv, &q->kv, q->num_tokens + k - 2));
        q->num_draft = k; /* how many to draft, set to what was drafted below */
        K = k > K ? k : K;
        s->step_seqs[n++] = q;
        maxblk = q->kv.num_blocks > maxblk ? q->kv.num_blocks : maxblk;
        s->qsl[n - 1] = T;
        for (int32_t p = q->step_c0; p < q->num_computed; p++, T++) {
            s->tokens[T] = q->tokens[p + 1];
            s->positions[T] = p;
            s->slots[T] = numla_kv_seq_slot(s->kv, &q->kv, p);
            s->hidden_rows[T] = q->step_q0 + (p - q->step_c0);
        }
        s->seq_lens[n - 1] = q->num_computed;
        q->mtp_row = -1;
        if (k > 0) {
            q->mtp_row = T - 1;
            s->logit_rows[R++] = T - 1;
        }
    }
    if (n == 0)
        return NUMLA_STATUS_OK;
    if (maxblk > s->cap_tables) {
        int32_t *t = realloc(s->tables, (size_t)maxblk * (size_t)s->o.max_seqs * sizeof *t);
        if (!t)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "scheduler: no memory for block tables");
        s->tables = t;
        s->cap_tables = maxblk;
    }
    const int64_t V = s->o.vocab_size;
    for (int32_t c = 0; c < (K > 0 ? K : 1); c++) {
        if (c > 0) { /* chained rows: one per sequence still drafting */
            int32_t m = 0;
            T = R = 0;
            for (int32_t i = 0; i < n; i++) {
                sched_seq *q = s->step_seqs[i];
                if (q->mtp_row < 0 || q->num_draft <= c)
                    continue;
                const int32_t p = q->num_tokens - 2 + c;
                s->step_seqs[m++] = q;
                s->qsl[m - 1] = T;
                s->tokens[T] = q->draft[c - 1];
                s->positions[T] = p;
                s->slots[T] = numla_kv_seq_slot(s->kv, &q->kv, p);
                s->hidden_rows[T] = -1 - q->mtp_row;
                s->seq_lens[m - 1] = p + 1;
                q->mtp_row = T;
                s->logit_rows[R++] = T++;
            }
            n = m;
            if (n == 0)
                break;
        }
        s->qsl[n] = T;
        for (int32_t i = 0; i < n; i++) {
            const sched_seq *q = s->step_seqs[i];
            s->seq_ids[i] = q->admitted; /* DeepSeek-V4 keeps its MTP cache by sequence */
            int32_t *row = s->tables + (int64_t)i * maxblk;
            memcpy(row, q->kv.block_table, (size_t)q->kv.num_blocks * sizeof *row);
            for (int64_t j = q->kv.num_blocks; j < maxblk; j++)
                row[j] = row[0];
        }
        numla_step step = {.num_seqs = n, .num_tokens = T, .tokens = s->tokens,
                           .positions = s->positions, .slots = s->slots,
                           .query_start_loc = s->qsl, .seq_lens = s->seq_lens,
                           .block_tables = s->tables, .max_blocks_per_seq = (int32_t)maxblk,
                           .num_logit_rows = R, .logit_rows = s->logit_rows,
                           .seq_ids = s->seq_ids};
        const double t0 = numla_now_s();
        const numla_status est = s->o.mtp_exec(s->exec_ctx, &step, s->hidden_rows, s->logits);
        s->st.mtp_s += numla_now_s() - t0;
        s->st.mtp_steps++;
        if (est != NUMLA_STATUS_OK) {
            spec_fail(s, n);
            return est == NUMLA_STATUS_NO_MEMORY ? est : NUMLA_STATUS_OK;
        }
        for (int32_t i = 0; c == 0 && prefix_after_mtp(s) && i < n; i++)
            prefix_register(s, s->step_seqs[i]); /* their final rows' MTP rows are run now */
        for (int32_t i = 0, r = 0; i < n; i++) {
            sched_seq *q = s->step_seqs[i];
            if (q->mtp_row < 0)
                continue;
            float *lg = s->logits + (size_t)r * (size_t)V;
            r++;
            if (!q->draft_q) {
                q->draft[c] = draft_argmax(lg, V);
                continue;
            }
            /* sampled: a draw from the sampler's distribution of the MTP row, kept for the
             * acceptance test (a failure, e.g. a grammar that allows nothing, only ends the
             * drafts) */
            float *qc = q->draft_q + (size_t)c * (size_t)V;
            if (numla_sampler_probs(q->smp, lg, qc) != NUMLA_STATUS_OK) {
                q->num_draft = c;
                q->mtp_row = c > 0 ? q->mtp_row : -1;
                continue;
            }
            q->draft[c] = numla_sampler_draw(q->smp, qc);
        }
    }
    return NUMLA_STATUS_OK;
}

numla_status numla_sched_step(numla_sched *s)
{
    int32_t B = 0;
    NUMLA_CHECK(plan(s, &B));
    if (B == 0)
        return NUMLA_STATUS_OK;
    /* Build the step: tokens sequence after sequence, block tables padded to the longest. */
    int64_t maxblk = 1;
    for (int32_t b = 0; b < B; b++)
        if (s->step_seqs[b]->kv.num_blocks > maxblk)
            maxblk = s->step_seqs[b]->kv.num_blocks;
    if (maxblk > s->cap_tables) {
        int32_t *t = realloc(s->tables, (size_t)maxblk * (size_t)s->o.max_seqs * sizeof *t);
        if (!t)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "scheduler: no memory for block tables");
        s->tables = t;
        s->cap_tables = maxblk;
    }
    int32_t T = 0, R = 0;
    for (int32_t b = 0; b < B; b++) {
        sched_seq *q = s->step_seqs[b];
        s->qsl[b] = T;
        q->step_c0 = q->num_computed;
        q->step_q0 = T;
        for (int32_t i = 0; i < q->step_n; i++) {
            int32_t p = q->num_computed + i;
            s->tokens[T] = p < q->num_tokens ? q->tokens[p] : q->draft[p - q->num_tokens];
            s->positions[T] = p;
            s->slots[T] = numla_kv_seq_slot(s->kv, &q->kv, p);
            T++;
        }
        s->seq_lens[b] = q->num_computed + q->step_n;
        s->seq_ids[b] = q->admitted;
        int32_t *row = s->tables + (int64_t)b * maxblk;
        memcpy(row, q->kv.block_table, (size_t)q->kv.num_blocks * sizeof *row);
        for (int64_t j = q->kv.num_blocks; j < maxblk; j++)
            row[j] = row[0];
        q->step_row = -1;
        q->step_plp_n = 0;
        if (plp_pending(q)) { /* prompt rows: logits of positions plp_done..num_prompt-2 */
            const int32_t hi = s->seq_lens[b] < q->req->num_prompt - 1 ? s->seq_lens[b]
                                                                       : q->req->num_prompt - 1;
            q->step_plp_row = R;
            for (int32_t p = q->num_computed > q->plp_done ? q->num_computed : q->plp_done;
                 p < hi; p++)
                s->logit_rows[R++] = s->qsl[b] + (p - q->num_computed);
            q->step_plp_n = R - q->step_plp_row;
        }
        if (s->seq_lens[b] - q->step_draft == q->num_tokens && q->req->params.max_tokens > 0) {
            q->step_row = R; /* the last known token's row, then one per draft */
            for (int32_t j = q->step_draft; j >= 0; j--)
                s->logit_rows[R++] = T - 1 - j;
        }
        /* accounting: first-time prompt tokens, recomputation, decode feed-back (drafts are
         * counted when accepted) */
        int32_t lo = q->num_computed, hi = q->num_computed + q->step_n - q->step_draft;
        int32_t P = q->req->num_prompt, E = q->recompute_end;
        int32_t clip_lo = lo > E ? lo : E, clip_hi = hi > E ? hi : E;
        s->st.recompute_tokens += (hi < E ? hi : E) - (lo < E ? lo : E);
        s->st.prefill_tokens += (clip_hi < P ? clip_hi : P) - (clip_lo < P ? clip_lo : P);
        s->st.decode_tokens += (clip_hi > P ? clip_hi : P) - (clip_lo > P ? clip_lo : P);
    }
    s->qsl[B] = T;
    numla_step step = {.num_seqs = B, .num_tokens = T, .tokens = s->tokens,
                       .positions = s->positions, .slots = s->slots, .query_start_loc = s->qsl,
                       .seq_lens = s->seq_lens, .block_tables = s->tables,
                       .max_blocks_per_seq = (int32_t)maxblk, .num_logit_rows = R,
                       .logit_rows = s->logit_rows, .seq_ids = s->seq_ids,
                       .num_released = s->num_released, .released = s->released,
                       .release_all = s->fresh};
    double t0 = numla_now_s();
    numla_status est = s->exec(s->exec_ctx, &step, s->logits);
    const int32_t sent = s->num_released;
    s->st.exec_s += numla_now_s() - t0;
    s->st.steps++;
    s->st.step_tokens += T;
    if (est != NUMLA_STATUS_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "engine step failed: %s", numla_error_message());
        NUMLA_ERROR("scheduler: %s", msg);
        for (int32_t b = 0; b < B; b++) {
            sched_seq *q = s->step_seqs[b];
            char m2[1100];
            snprintf(m2, sizeof m2, "line %lld: %s", (long long)q->req->line, msg);
            remove_running(s, q);
            finish(s, q, "error", m2);
            seq_free(s, q);
        }
        return est == NUMLA_STATUS_NO_MEMORY ? est : NUMLA_STATUS_OK;
    }
    /* the engine has freed those (ones released during this step wait for the next) */
    s->fresh = 0;
    if (sent > 0) {
        memmove(s->released, s->released + sent,
                (size_t)(s->num_released - sent) * sizeof *s->released);
        s->num_released -= sent;
    }
    const double t1 = numla_now_s();
    /* Draw the step's tokens on the rank's team: each sequence has its own sampler and PRNG,
     * so the tokens do not depend on how the rows are split; a worker's error message is
     * thread-local and is copied out for the serial pass below. */
#pragma omp parallel for schedule(dynamic, 1) if (B > 1)
    for (int32_t b = 0; b < B; b++) {
        sched_seq *q = s->step_seqs[b];
        sched_draw *d = &s->draws[b];
        d->st = NUMLA_STATUS_OK;
        /* prompt_logprobs: each prompt row reduced to the next prompt token's entry */
        for (int32_t k = 0; k < q->step_plp_n && d->st == NUMLA_STATUS_OK; k++) {
            const int32_t at = q->plp_done + 1 + k;
            d->st = numla_sampler_logprob_of(
                q->smp, s->logits + (size_t)(q->step_plp_row + k) * (size_t)s->o.vocab_size,
                q->tokens[at], q->req->prompt_logprobs_top, &q->plps[at]);
        }
        d->ntok = 0;
        if (q->step_row >= 0 && d->st == NUMLA_STATUS_OK && q->step_draft > 0 && q->draft_q)
            d->st = numla_sampler_speculate( /* sampled: speculative sampling's rule */
                q->smp, s->logits + (size_t)q->step_row * (size_t)s->o.vocab_size, q->draft,
                q->draft_q, q->step_draft, d->toks, &d->ntok, q->lps ? &q->lps[q->num_gen] : NULL);
        /* greedy (or no drafts): row j, the token after the known ones and j drafts, sampled
         * with the sampler as it is after those tokens; draft j is accepted when it is that
         * token */
        for (int32_t j = 0; q->step_row >= 0 && d->st == NUMLA_STATUS_OK && j <= q->step_draft &&
                            !(q->step_draft > 0 && q->draft_q);
             j++) {
            float *lg = s->logits + (size_t)(q->step_row + j) * (size_t)s->o.vocab_size;
            int32_t tok = -1;
            d->st = numla_sampler_sample(q->smp, lg, &tok,
                                         q->lps ? &q->lps[q->num_gen + j] : NULL);
            if (d->st != NUMLA_STATUS_OK)
                break;
            d->toks[d->ntok++] = tok;
            if (j == q->step_draft || tok != q->draft[j])
                break;
            d->st = numla_sampler_add_tokens(q->smp, &tok, 1, 1); /* accepted: the next row's
                                                                     sampler has seen it */
        }
        if (d->st != NUMLA_STATUS_OK)
            snprintf(d->msg, sizeof d->msg, "%s", numla_error_message());
    }
    /* The prompt rows' full logits to their consumer, serially, in step order. */
    for (int32_t b = 0; b < B && s->o.prompt_rows; b++) {
        sched_seq *q = s->step_seqs[b];
        sched_draw *d = &s->draws[b];
        if (q->step_plp_n == 0 || d->st != NUMLA_STATUS_OK)
            continue;
        d->st = s->o.prompt_rows(s->o.prompt_rows_ctx, q->user, q->plp_done, q->step_plp_n,
                                 s->logits + (size_t)q->step_plp_row * (size_t)s->o.vocab_size);
        if (d->st != NUMLA_STATUS_OK)
            snprintf(d->msg, sizeof d->msg, "%s", numla_error_message());
    }
    for (int32_t b = 0; b < B; b++) {
        sched_seq *q = s->step_seqs[b];
        /* the known rows, and the drafts' rows up to the last accepted one */
        const int32_t acc = s->draws[b].st == NUMLA_STATUS_OK && s->draws[b].ntok > 0
                                ? s->draws[b].ntok - 1 : 0;
        q->num_computed += q->step_n - q->step_draft + acc;
        q->step_n = 0;
        q->num_draft = 0;
        if (q->step_draft > 0 && s->draws[b].st == NUMLA_STATUS_OK) {
            q->spec_steps++;
            q->spec_drafted += q->step_draft;
            q->spec_accepted += acc;
            s->st.spec_steps++;
            s->st.spec_drafted += q->step_draft;
            s->st.spec_accepted += acc;
            s->st.decode_tokens += acc;
        }
        /* the accepted drafts' rows are computed now: their tokens first (emit appends the
         * same ones below), so that the blocks they fill are cached under them */
        for (int32_t k = 0; k < acc; k++)
            q->tokens[q->num_tokens + k] = s->draws[b].toks[k];
        if (!prefix_after_mtp(s))
            prefix_register(s, q);
        if (s->draws[b].st == NUMLA_STATUS_OK)
            q->plp_done += q->step_plp_n;
        if (q->step_row < 0 && s->draws[b].st == NUMLA_STATUS_OK) {
            if (q->req->params.max_tokens == 0 && q->num_computed == q->num_tokens) {
                remove_running(s, q); /* prompt_logprobs alone: the prompt is computed */
                finish(s, q, "length", NULL);
                seq_free(s, q);
                s->step_seqs[b] = NULL;
            }
            continue;
        }
        if (s->draws[b].st != NUMLA_STATUS_OK) {
            char msg[600];
            snprintf(msg, sizeof msg, "line %lld: %s", (long long)q->req->line, s->draws[b].msg);
            remove_running(s, q);
            finish(s, q, "error", msg);
            seq_free(s, q);
            s->step_seqs[b] = NULL;
            continue;
        }
        const char *reason = NULL;
        for (int32_t k = 0; k < s->draws[b].ntok && !reason; k++) {
            numla_status ast = emit(s, q, &s->draws[b], s->draws[b].toks[k],
                                    k + 1 == s->draws[b].ntok, t1, &reason);
            if (ast == NUMLA_STATUS_NO_MEMORY)
                return ast;
        }
        if (reason) {
            remove_running(s, q);
            finish(s, q, reason, reason[0] == 'e' ? s->draws[b].msg : NULL);
            seq_free(s, q);
            s->step_seqs[b] = NULL;
        }
    }
    if (s->o.spec_k > 0)
        return spec_draft(s, B);
    return NUMLA_STATUS_OK;
}

