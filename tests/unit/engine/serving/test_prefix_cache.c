/* tests/unit/engine/serving/test_prefix_cache.c — automatic prefix caching: the pool's hash
 * table, LRU and eviction (engine/model/kv_cache.h), and the scheduler serving from it
 * (engine/serving/scheduler.h).
 *
 * Identity: the same requests served with the cache and without it (numla_sched_options
 * no_prefix_cache) give the same tokens AND the same logprobs to the bit: a shared-prefix mix,
 * then a second conversation turn (prompt = first prompt + answer + a new message), with
 * chunked prefill, on a roomy pool and on a pool so small that sequences are preempted and
 * cached blocks evicted, with shuffled free lists, on bf16 and int8 weights. The comparison is
 * exact, so it runs at the best kernel level whose linear layers keep activations in fp32
 * (avx512bf16 rounds them to bf16 for many rows, and then a row's logits depend on the step's
 * size, with or without the cache; tests/unit/engine/serving/test_scheduler.c covers that level
 * with margins). The multi-rank version is tests/mpi/prefix_cache.cmake. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/formats/safetensors.h"
#include "engine/model/config.h"
#include "engine/model/kv_cache.h"
#include "engine/model/model.h"
#include "engine/model/weights.h"
#include "engine/parallel/engine.h"
#include "engine/serving/scheduler.h"
#include "engine/synth/synth.h"
#include "test_util.h"

/* ---- the pool's table ---- */

static void fill(int32_t *t, int32_t n, int32_t v)
{
    for (int32_t i = 0; i < n; i++)
        t[i] = v + i;
}

static void test_kv_prefix_table(void)
{
    numla_kv_cache *c = NULL;
    enum { BS = 4, NB = 6 };
    CU_ASSERT_EQUAL_FATAL(numla_kv_cache_create(1, 32, 16, BS, NB, NUMLA_DTYPE_BF16, &c),
                          NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_kv_cache_prefix_lookup(c, (numla_kv_hash){1, 2}, (numla_kv_hash){0, 0},
                                                 (int32_t[BS]){0}),
                    -1); /* off: nothing */
    CU_ASSERT_EQUAL_FATAL(numla_kv_cache_prefix_enable(c, 7), NUMLA_STATUS_OK);
    numla_kv_hash root = numla_kv_cache_prefix_root(c);
    int32_t tok[NB][BS];
    numla_kv_hash h[NB];
    int32_t blk[NB];
    for (int i = 0; i < NB; i++) {
        fill(tok[i], BS, 10 * i);
        h[i] = numla_kv_hash_block(i ? h[i - 1] : root, tok[i], BS);
        CU_ASSERT_EQUAL(numla_kv_cache_alloc_block(c, &blk[i]), NUMLA_STATUS_OK);
        CU_ASSERT_EQUAL(numla_kv_cache_prefix_insert(c, blk[i], h[i], i ? h[i - 1] : root, tok[i]),
                        1);
    }
    CU_ASSERT_EQUAL(c->num_cached, NB);
    /* the same identity twice: the second block stays plain */
    CU_ASSERT_EQUAL(numla_kv_cache_prefix_insert(c, blk[1], h[1], h[0], tok[1]), 0);
    /* the chain: a block's hash depends on its parent, and so does its lookup */
    numla_kv_hash other = numla_kv_hash_block(root, tok[1], BS);
    CU_ASSERT(other.a != h[1].a && other.b != h[1].b);
    CU_ASSERT_EQUAL(numla_kv_cache_prefix_lookup(c, h[1], h[0], tok[1]), blk[1]);
    CU_ASSERT_EQUAL(numla_kv_cache_prefix_lookup(c, h[1], root, tok[1]), -1);
    /* a forged hash with other token ids (a collision) is a miss, never a hit */
    int32_t forged[BS];
    fill(forged, BS, 10);
    forged[2] = 99;
    CU_ASSERT_EQUAL(numla_kv_cache_prefix_lookup(c, h[1], h[0], forged), -1);
    /* the salt is part of the identity */
    numla_kv_cache *c2 = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_kv_cache_create(1, 32, 16, BS, NB, NUMLA_DTYPE_BF16, &c2),
                          NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_kv_cache_prefix_enable(c2, 8), NUMLA_STATUS_OK);
    CU_ASSERT(numla_kv_cache_prefix_root(c2).a != root.a);
    numla_kv_cache_destroy(&c2);

    /* all held: nothing available */
    CU_ASSERT_EQUAL(numla_kv_cache_available(c), 0);
    int32_t x;
    CU_ASSERT_EQUAL(numla_kv_cache_alloc_block(c, &x), NUMLA_STATUS_KV_FULL);
    /* release in the order 3, 0, 5, 1: they become idle in that LRU order */
    const int order[] = {3, 0, 5, 1};
    for (int i = 0; i < 4; i++)
        numla_kv_cache_free_block(c, blk[order[i]]);
    CU_ASSERT_EQUAL(c->num_idle, 4);
    CU_ASSERT_EQUAL(c->num_free, 0);
    CU_ASSERT_EQUAL(numla_kv_cache_available(c), 4);
    /* a hit on block 0 takes it off the LRU list */
    CU_ASSERT_EQUAL(numla_kv_cache_prefix_lookup(c, h[0], root, tok[0]), blk[0]);
    numla_kv_cache_prefix_acquire(c, blk[0]);
    CU_ASSERT_EQUAL(c->refcount[blk[0]], 1);
    CU_ASSERT_EQUAL(c->num_idle, 3);
    /* allocation evicts the least recently used idle block: 3, then 5 */
    CU_ASSERT_EQUAL(numla_kv_cache_alloc_block(c, &x), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(x, blk[3]);
    CU_ASSERT_EQUAL(c->evictions, 1);
    CU_ASSERT(!numla_kv_cache_prefix_is_cached(c, blk[3]));
    CU_ASSERT_EQUAL(numla_kv_cache_prefix_lookup(c, h[3], h[2], tok[3]), -1);
    CU_ASSERT_EQUAL(numla_kv_cache_alloc_block(c, &x), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(x, blk[5]);
    /* the others are still found after the removals */
    CU_ASSERT_EQUAL(numla_kv_cache_prefix_lookup(c, h[1], h[0], tok[1]), blk[1]);
    CU_ASSERT_EQUAL(numla_kv_cache_prefix_lookup(c, h[2], h[1], tok[2]), blk[2]);
    CU_ASSERT_EQUAL(numla_kv_cache_prefix_lookup(c, h[4], h[3], tok[4]), blk[4]);
    CU_ASSERT_EQUAL(c->num_cached, NB - 2);
    /* a plain block freed goes to the free list, not the LRU list */
    numla_kv_cache_free_block(c, blk[3]);
    CU_ASSERT_EQUAL(c->num_free, 1);
    CU_ASSERT_EQUAL(c->num_idle, 1);
    numla_kv_cache_destroy(&c);
}

/* Many blocks whose hashes share a home slot: deletion in the middle of a probe run must keep
 * every other entry reachable (backward shift). */
static void test_kv_prefix_table_churn(void)
{
    numla_kv_cache *c = NULL;
    enum { BS = 2, NB = 64 };
    CU_ASSERT_EQUAL_FATAL(numla_kv_cache_create(1, 8, 0, BS, NB, NUMLA_DTYPE_BF16, &c),
                          NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_kv_cache_prefix_enable(c, 1), NUMLA_STATUS_OK);
    numla_test_rng r = {3};
    numla_kv_hash h[NB];
    int32_t tok[NB][BS], blk[NB];
    int live[NB];
    for (int i = 0; i < NB; i++) {
        /* low bits equal in groups of 8: long probe runs */
        h[i] = (numla_kv_hash){((uint64_t)(i % 8)) | (numla_test_rng_u64(&r) << 8),
                               numla_test_rng_u64(&r)};
        tok[i][0] = i;
        tok[i][1] = -i;
        CU_ASSERT_EQUAL(numla_kv_cache_alloc_block(c, &blk[i]), NUMLA_STATUS_OK);
        CU_ASSERT_EQUAL(numla_kv_cache_prefix_insert(c, blk[i], h[i], h[i], tok[i]), 1);
        numla_kv_cache_free_block(c, blk[i]);
        live[i] = 1;
    }
    for (int round = 0; round < 200; round++) {
        int32_t b;
        CU_ASSERT_EQUAL_FATAL(numla_kv_cache_alloc_block(c, &b), NUMLA_STATUS_OK); /* evicts */
        for (int i = 0; i < NB; i++)
            if (blk[i] == b && live[i])
                live[i] = 0;
        /* put it back under a new identity */
        int i = (int)(numla_test_rng_u64(&r) % NB);
        if (!live[i]) {
            blk[i] = b;
            CU_ASSERT_EQUAL(numla_kv_cache_prefix_insert(c, b, h[i], h[i], tok[i]), 1);
            live[i] = 1;
        }
        numla_kv_cache_free_block(c, b);
        for (int k = 0; k < NB; k++)
            NUMLA_ASSERT_MSG(numla_kv_cache_prefix_lookup(c, h[k], h[k], tok[k]) ==
                                 (live[k] ? blk[k] : -1),
                             "round %d: entry %d", round, k);
    }
    CU_ASSERT_EQUAL(numla_kv_cache_available(c), NB);
    numla_kv_cache_destroy(&c);
}

/* ---- a tiny model served locally ---- */

typedef struct pc_eng {
    numla_model_config cfg;
    numla_safetensors_model *st;
    numla_model_weights *w;
    numla_model *m;
    numla_kv_cache *kv;
} pc_eng;

static char pc_dir_bf16[4096], pc_dir_int8[4096];

static int pc_init(void)
{
    snprintf(pc_dir_bf16, sizeof pc_dir_bf16, "%s/prefix_tiny", numla_test_tmpdir());
    snprintf(pc_dir_int8, sizeof pc_dir_int8, "%s/prefix_tiny_int8", numla_test_tmpdir());
    numla_synth_options so = {.preset = "tiny", .out_dir = pc_dir_bf16, .seed = 21,
                              .dtype = NUMLA_DTYPE_BF16};
    if (numla_synth_write(&so, NULL) != NUMLA_STATUS_OK)
        return -1;
    so.out_dir = pc_dir_int8;
    so.weights = NUMLA_QCKPT_INT8;
    return numla_synth_write(&so, NULL) == NUMLA_STATUS_OK ? 0 : -1;
}

static int pc_open(pc_eng *e, const char *dir, numla_isa isa, int64_t blocks, uint64_t shuffle)
{
    memset(e, 0, sizeof *e);
    numla_model_options mo = numla_model_options_default(isa);
    mo.num_threads = 2;
    mo.prefill_form = numla_engine_options_default().kernels.prefill_form;
    if (numla_model_config_load(dir, &e->cfg) || numla_safetensors_open(dir, &e->st) ||
        numla_weights_load(&e->cfg, e->st, 0, 1, isa, &e->w) ||
        numla_model_create(e->w, &mo, &e->m) ||
        numla_kv_cache_create((int32_t)e->cfg.num_hidden_layers, (int32_t)e->cfg.kv_lora_rank,
                              (int32_t)e->cfg.qk_rope_head_dim, 16, blocks, NUMLA_DTYPE_BF16,
                              &e->kv)) {
        fprintf(stderr, "\n    open failed: %s\n%s", numla_error_message(), numla_error_trace());
        return -1;
    }
    numla_test_rng r = {shuffle};
    for (int64_t i = e->kv->num_free - 1; shuffle && i > 0; i--) {
        int64_t j = (int64_t)(numla_test_rng_u64(&r) % (uint64_t)(i + 1));
        int32_t t = e->kv->free_blocks[i];
        e->kv->free_blocks[i] = e->kv->free_blocks[j];
        e->kv->free_blocks[j] = t;
    }
    return 0;
}

static void pc_close(pc_eng *e)
{
    numla_kv_cache_destroy(&e->kv);
    numla_model_destroy(&e->m);
    numla_weights_destroy(&e->w);
    numla_safetensors_close(&e->st);
}

static numla_status pc_exec(void *ctx, const numla_step *st, float *logits)
{
    pc_eng *e = ctx;
    return numla_model_forward(e->m, e->kv, st, logits);
}

enum { PC_MAXOUT = 24 };

typedef struct pc_res {
    int done;
    int32_t n, cached;
    int32_t tok[PC_MAXOUT];
    numla_logprob_entry lp[PC_MAXOUT];
    char reason[16];
    char error[256];
} pc_res;

static void pc_done(void *ctx, const numla_sched_output *o)
{
    pc_res *r = &((pc_res *)ctx)[(intptr_t)o->user];
    r->done++;
    r->n = o->num_output < PC_MAXOUT ? o->num_output : PC_MAXOUT;
    r->cached = o->cached_tokens;
    for (int32_t i = 0; i < r->n; i++) {
        r->tok[i] = o->output_tokens[i];
        if (o->logprobs)
            r->lp[i] = o->logprobs[i];
    }
    snprintf(r->reason, sizeof r->reason, "%s", o->finish_reason);
    snprintf(r->error, sizeof r->error, "%s", o->error ? o->error : "");
}

static void pc_request(numla_request *rq, int64_t line, const int32_t *tok, int32_t n,
                       int32_t max_tokens)
{
    memset(rq, 0, sizeof *rq);
    rq->line = line;
    rq->num_prompt = n;
    rq->prompt_tokens = malloc((size_t)n * sizeof(int32_t));
    memcpy(rq->prompt_tokens, tok, (size_t)n * sizeof(int32_t));
    numla_sampling_params_default(&rq->params);
    rq->params.temperature = 0;
    rq->params.max_tokens = max_tokens;
    rq->params.ignore_eos = 1;
    rq->params.logprobs = 3;
}

/* Serve rq[0..n) on a scheduler with options o, waves of `wave` requests: each wave is submitted
 * when the previous one has finished (so later waves can hit what earlier ones cached). */
static int pc_serve(pc_eng *e, numla_request *rq, int n, int wave, const numla_sched_options *o,
                    pc_res *res, numla_sched_stats *st)
{
    numla_sched *s = NULL;
    memset(res, 0, sizeof *res * (size_t)n);
    numla_sched_options so = *o;
    so.vocab_size = e->cfg.vocab_size;
    so.num_eos = e->cfg.num_eos;
    so.eos_token_ids = e->cfg.eos_token_ids;
    if (numla_sched_create(&so, e->kv, pc_exec, e, pc_done, res, &s))
        return -1;
    for (int w0 = 0; w0 < n; w0 += wave) {
        for (int i = w0; i < n && i < w0 + wave; i++)
            if (numla_sched_submit(s, &rq[i], (void *)(intptr_t)i))
                return -1;
        int64_t guard = 0;
        while (numla_sched_busy(s) && guard++ < 100000)
            if (numla_sched_step(s)) {
                fprintf(stderr, "\n    step: %s\n", numla_error_message());
                return -1;
            }
    }
    numla_sched_stats_get(s, st);
    numla_sched_destroy(&s);
    CU_ASSERT_EQUAL(numla_kv_cache_available(e->kv), e->kv->num_blocks);
    return 0;
}

/* exact: tokens, finish reasons and logprobs (chosen and top) equal to the bit. Otherwise the
 * tokens are equal while the reference's top-1/top-2 margin is above tol (past a near-tie both
 * continuations are legitimate); returns the number of near-tie exits. */
static int pc_compare(const pc_res *ref, const pc_res *got, int n, int exact, float tol,
                      const char *what)
{
    int ties = 0;
    for (int i = 0; i < n; i++) {
        NUMLA_ASSERT_MSG(got[i].done == 1 && !got[i].error[0], "%s: request %d: done %d %s",
                         what, i, got[i].done, got[i].error);
        if (exact)
            NUMLA_ASSERT_MSG(got[i].n == ref[i].n && !strcmp(got[i].reason, ref[i].reason),
                             "%s: request %d: %d tokens (%s) vs %d (%s)", what, i, got[i].n,
                             got[i].reason, ref[i].n, ref[i].reason);
        for (int32_t g = 0; g < ref[i].n && g < got[i].n; g++) {
            const numla_logprob_entry *a = &ref[i].lp[g], *b = &got[i].lp[g];
            const float margin = a->num_top >= 2 ? a->top_logprobs[0] - a->top_logprobs[1]
                                                 : INFINITY;
            int same = got[i].tok[g] == ref[i].tok[g];
            if (exact)
                same = same && a->token == b->token &&
                       !memcmp(&a->logprob, &b->logprob, sizeof a->logprob) &&
                       a->num_top == b->num_top &&
                       !memcmp(a->top_tokens, b->top_tokens, (size_t)a->num_top * 4) &&
                       !memcmp(a->top_logprobs, b->top_logprobs, (size_t)a->num_top * 4);
            else if (!same && margin < tol) {
                ties++;
                break;
            }
            if (!same) {
                NUMLA_ASSERT_MSG(0, "%s: request %d token %d: %d (%.9g) vs %d (%.9g)", what, i, g,
                                 got[i].tok[g], (double)b->logprob, ref[i].tok[g],
                                 (double)a->logprob);
                break;
            }
            if (!exact && margin < tol)
                break;
        }
    }
    return ties;
}

static numla_isa pc_exact_isa(void)
{
    numla_isa isas[NUMLA_ISA_COUNT];
    int n = numla_test_isas(isas);
    numla_isa exact = NUMLA_ISA_REF;
    for (int i = 0; i < n; i++)
        if (isas[i] != NUMLA_ISA_AVX512BF16 && isas[i] != NUMLA_ISA_AMX)
            exact = isas[i];
    return exact;
}

enum { PC_SHARED = 12, PC_TURNS = PC_SHARED, PC_N = PC_SHARED + PC_TURNS };

/* Wave 1: PC_SHARED requests = one of three shared prefixes (70, 33, 130 tokens) + 1..40 own
 * tokens. Wave 2 (after wave 1's answers are known, taken from `ref`): each wave-1 request's
 * next turn = its prompt + its answer + 1..20 new tokens. */
static void pc_make_wave1(numla_request *rq, int64_t vocab, uint64_t seed)
{
    numla_test_rng r = {seed};
    static int32_t pre[3][130];
    const int32_t plen[3] = {70, 33, 130};
    for (int k = 0; k < 3; k++)
        for (int32_t t = 0; t < plen[k]; t++)
            pre[k][t] = (int32_t)(numla_test_rng_u64(&r) % (uint64_t)vocab);
    for (int i = 0; i < PC_SHARED; i++) {
        int k = i % 3;
        int32_t own = 1 + (int32_t)(numla_test_rng_u64(&r) % 40), tok[200];
        memcpy(tok, pre[k], (size_t)plen[k] * 4);
        for (int32_t t = 0; t < own; t++)
            tok[plen[k] + t] = (int32_t)(numla_test_rng_u64(&r) % (uint64_t)vocab);
        pc_request(&rq[i], i + 1, tok, plen[k] + own,
                   4 + (int32_t)(numla_test_rng_u64(&r) % (PC_MAXOUT - 4)));
    }
}

static void pc_make_wave2(numla_request *rq, const pc_res *ref, int64_t vocab, uint64_t seed)
{
    numla_test_rng r = {seed};
    for (int i = 0; i < PC_TURNS; i++) {
        const numla_request *a = &rq[i];
        int32_t tok[300], n = 0;
        memcpy(tok, a->prompt_tokens, (size_t)a->num_prompt * 4);
        n = a->num_prompt;
        memcpy(tok + n, ref[i].tok, (size_t)ref[i].n * 4);
        n += ref[i].n;
        int32_t more = 1 + (int32_t)(numla_test_rng_u64(&r) % 20);
        for (int32_t t = 0; t < more; t++)
            tok[n++] = (int32_t)(numla_test_rng_u64(&r) % (uint64_t)vocab);
        pc_request(&rq[PC_SHARED + i], PC_SHARED + i + 1, tok, n, 6);
    }
}

/* Serve rq (wave 1, then wave 2) with the options `o` on a pool of `blocks` (shuffled with
 * `shuffle`); stats in *st. */
static int pc_serve_waves(const char *dir, numla_isa isa, int64_t blocks, uint64_t shuffle,
                          numla_request *rq, const numla_sched_options *o, pc_res *res,
                          numla_sched_stats *st)
{
    pc_eng e;
    if (pc_open(&e, dir, isa, blocks, shuffle))
        return -1;
    int rc = pc_serve(&e, rq, PC_N, PC_SHARED, o, res, st);
    pc_close(&e);
    return rc;
}

/* exact: one token per step (max_seqs 1, prefill_chunk 1), so every row, cached or not, is
 * computed by a step of the same shape as without the cache: bits must match. Otherwise
 * batches of up to 16 sequences in chunks of 48: the engine's rows depend on the step's shape
 * by rounding, with or without the cache, so the comparison is test_scheduler's (margins). */
static void identity_on(const char *dir, const char *name, int exact)
{
    const numla_isa isa = pc_exact_isa();
    static numla_request rq[PC_N];
    static pc_res ref[PC_N], got[PC_N];
    numla_sched_stats st;
    const numla_sched_options off =
        exact ? (numla_sched_options){.max_batch_tokens = 1, .max_seqs = 1, .prefill_chunk = 1,
                                      .no_prefix_cache = 1}
              : (numla_sched_options){.max_batch_tokens = 256, .max_seqs = 16,
                                      .prefill_chunk = 48, .no_prefix_cache = 1};
    numla_sched_options on = off;
    on.no_prefix_cache = 0;
    const float tol = 0.05f;
    char what[128];

    /* reference: no cache; wave 2 is built from wave 1's answers */
    pc_eng e;
    if (pc_open(&e, dir, isa, 4096, 0)) {
        CU_FAIL("open");
        return;
    }
    pc_make_wave1(rq, e.cfg.vocab_size, 77);
    CU_ASSERT_EQUAL_FATAL(pc_serve(&e, rq, PC_SHARED, PC_SHARED, &off, ref, &st), 0);
    pc_make_wave2(rq, ref, e.cfg.vocab_size, 78);
    CU_ASSERT_EQUAL_FATAL(pc_serve(&e, rq + PC_SHARED, PC_TURNS, PC_TURNS, &off, ref + PC_SHARED,
                                   &st), 0);
    CU_ASSERT_EQUAL(st.prefix_hit_tokens, 0);
    CU_ASSERT_EQUAL(e.kv->num_cached, 0);
    pc_close(&e);

    /* cached, roomy pool, shuffled blocks */
    CU_ASSERT_EQUAL_FATAL(pc_serve_waves(dir, isa, 4096, 5, rq, &on, got, &st), 0);
    snprintf(what, sizeof what, "%s, %s, %s, roomy pool", name, numla_isa_name(isa),
             exact ? "exact" : "batched");
    int ties = pc_compare(ref, got, PC_N, exact, tol, what);
    NUMLA_ASSERT_MSG(ties <= PC_N / 8, "%s: %d near-tie exits", what, ties);
    int64_t hit1 = 0, hit2 = 0;
    for (int i = 0; i < PC_SHARED; i++)
        hit1 += got[i].cached;
    for (int i = PC_SHARED; i < PC_N; i++) {
        hit2 += got[i].cached;
        /* a second turn finds at least its first turn's full prompt blocks */
        NUMLA_ASSERT_MSG(got[i].cached >= rq[i - PC_SHARED].num_prompt / 16 * 16,
                         "%s: turn 2 of %d: %d cached of %d", what, i - PC_SHARED, got[i].cached,
                         rq[i - PC_SHARED].num_prompt);
        CU_ASSERT(got[i].cached % 16 == 0 && got[i].cached < rq[i].num_prompt);
    }
    /* the first step admits several requests before any block is cached; later ones hit */
    NUMLA_ASSERT_MSG(hit1 >= 16 * 10, "%s: wave 1 cached only %lld tokens", what, (long long)hit1);
    CU_ASSERT_EQUAL(st.cached_prompt_tokens, hit1 + hit2);
    CU_ASSERT(st.prefix_hit_tokens == hit1 + hit2 && st.prefix_lookup_tokens > st.prefix_hit_tokens);
    CU_ASSERT(st.kv_blocks_cached > 0 && st.kv_blocks_cached_idle == st.kv_blocks_cached);

    /* cached, a pool just big enough for the largest request: eviction (and preemption when
     * batched) */
    int64_t need = 0;
    for (int i = 0; i < PC_N; i++) {
        int64_t b = (rq[i].num_prompt + rq[i].params.max_tokens + 15) / 16;
        need = b > need ? b : need;
    }
    numla_sched_options tight = on;
    if (!exact)
        tight = (numla_sched_options){.max_batch_tokens = 128, .max_seqs = 12, .prefill_chunk = 40};
    CU_ASSERT_EQUAL_FATAL(pc_serve_waves(dir, isa, need + 2, 9, rq, &tight, got, &st), 0);
    snprintf(what, sizeof what, "%s, %s, %s, small pool", name, numla_isa_name(isa),
             exact ? "exact" : "batched");
    ties = pc_compare(ref, got, PC_N, exact, tol, what);
    NUMLA_ASSERT_MSG(ties <= PC_N / 8, "%s: %d near-tie exits", what, ties);
    NUMLA_ASSERT_MSG((exact || st.preemptions >= 5) && st.kv_evictions >= 5 &&
                         st.prefix_hit_tokens > 0,
                     "%s: %lld preemptions, %lld evictions, %lld hit tokens", what,
                     (long long)st.preemptions, (long long)st.kv_evictions,
                     (long long)st.prefix_hit_tokens);
    if (getenv("PC_VERBOSE"))
        fprintf(stderr, "\n    %s: %lld preemptions, %lld evictions, %lld/%lld hit, %d ties", what,
                (long long)st.preemptions, (long long)st.kv_evictions,
                (long long)st.prefix_hit_tokens, (long long)st.prefix_lookup_tokens, ties);
    for (int i = 0; i < PC_N; i++)
        numla_request_free(&rq[i]);
}

static void test_identity_bf16(void) { identity_on(pc_dir_bf16, "bf16", 1); }
static void test_identity_int8(void) { identity_on(pc_dir_int8, "int8", 1); }
static void test_margins_bf16(void) { identity_on(pc_dir_bf16, "bf16", 0); }
static void test_margins_int8(void) { identity_on(pc_dir_int8, "int8", 0); }

/* What may be served from the cache: a prompt that differs in one token in the middle reuses
 * only the blocks before that token; one that starts differently reuses nothing; a block whose
 * tokens were cached under another prefix is not reused (the chain); a whole cached prompt
 * still computes its last block. Each answer equals the uncached one to the bit. */
static void test_what_hits(void)
{
    const numla_isa isa = pc_exact_isa();
    pc_eng e;
    if (pc_open(&e, pc_dir_bf16, isa, 256, 3)) {
        CU_FAIL("open");
        return;
    }
    enum { N = 7, L = 100 };
    numla_test_rng r = {12};
    int32_t a[L], t[L];
    for (int i = 0; i < L; i++)
        a[i] = (int32_t)(numla_test_rng_u64(&r) % (uint64_t)e.cfg.vocab_size);
    numla_request rq[N];
    pc_request(&rq[0], 1, a, L, 8);                 /* A: computed, cached */
    memcpy(t, a, sizeof t);
    t[50] = (t[50] + 1) % (int32_t)e.cfg.vocab_size; /* B: one token changed in block 3 */
    pc_request(&rq[1], 2, t, L, 8);
    memcpy(t, a, sizeof t);
    t[0] = (t[0] + 1) % (int32_t)e.cfg.vocab_size;   /* C: first token changed, and one of */
    t[20] = (t[20] + 1) % (int32_t)e.cfg.vocab_size; /*    block 1 (so C's block 1 is not A's) */
    pc_request(&rq[2], 3, t, L, 8);
    /* D: C's first block + A's second block (the same tokens as A's block 1, under another
     * parent): only D's first block may come from the cache (C's) */
    memcpy(t, rq[2].prompt_tokens, 16 * 4);
    memcpy(t + 16, a + 16, 16 * 4);
    for (int i = 32; i < 60; i++)
        t[i] = (int32_t)(numla_test_rng_u64(&r) % (uint64_t)e.cfg.vocab_size);
    pc_request(&rq[3], 4, t, 60, 8);
    pc_request(&rq[4], 5, a, 96, 8);                /* E: A's first 96 tokens, all cached */
    pc_request(&rq[5], 6, a, 97, 8);                /* F: 96 cached + 1 */
    pc_request(&rq[6], 7, a, 15, 8);                /* G: shorter than a block */
    static pc_res ref[N], got[N];
    numla_sched_stats st;
    /* one token per step: cached or not, every row comes from a step of the same shape */
    numla_sched_options o = {.max_batch_tokens = 1, .max_seqs = 1, .prefill_chunk = 1,
                             .no_prefix_cache = 1};
    CU_ASSERT_EQUAL_FATAL(pc_serve(&e, rq, N, 1, &o, ref, &st), 0);
    pc_close(&e);
    if (pc_open(&e, pc_dir_bf16, isa, 256, 4)) {
        CU_FAIL("open");
        return;
    }
    o.no_prefix_cache = 0;
    CU_ASSERT_EQUAL_FATAL(pc_serve(&e, rq, N, 1, &o, got, &st), 0);
    pc_compare(ref, got, N, 1, 0, "what hits");
    const int32_t want[N] = {0, 48, 0, 16, 80, 96, 0};
    for (int i = 0; i < N; i++)
        NUMLA_ASSERT_MSG(got[i].cached == want[i], "request %c: %d cached tokens, want %d",
                         'A' + i, got[i].cached, want[i]);
    pc_close(&e);
    for (int i = 0; i < N; i++)
        numla_request_free(&rq[i]);
}



/* A burst of requests with one long prefix, all submitted at once: the first computes the
 * prefix, the others wait for its blocks instead of computing them again, so the prefix's
 * full blocks are computed once (and the answers do not change). */
static void test_burst(void)
{
    const numla_isa isa = pc_exact_isa();
    pc_eng e;
    if (pc_open(&e, pc_dir_bf16, isa, 512, 6)) {
        CU_FAIL("open");
        return;
    }
    enum { N = 8, PRE = 100 };
    numla_test_rng r = {31};
    numla_request rq[N];
    int64_t own = 0;
    int32_t pre[PRE], t[PRE + 32];
    for (int i = 0; i < PRE; i++)
        pre[i] = (int32_t)(numla_test_rng_u64(&r) % (uint64_t)e.cfg.vocab_size);
    for (int i = 0; i < N; i++) {
        int32_t n = 5 + (int32_t)(numla_test_rng_u64(&r) % 20);
        memcpy(t, pre, sizeof pre);
        for (int32_t k = 0; k < n; k++)
            t[PRE + k] = (int32_t)(numla_test_rng_u64(&r) % (uint64_t)e.cfg.vocab_size);
        pc_request(&rq[i], i + 1, t, PRE + n, 6);
        own += n;
    }
    static pc_res ref[N], got[N];
    numla_sched_stats st;
    numla_sched_options o = {.max_batch_tokens = 512, .max_seqs = N, .prefill_chunk = 32,
                             .no_prefix_cache = 1};
    CU_ASSERT_EQUAL_FATAL(pc_serve(&e, rq, N, N, &o, ref, &st), 0);
    CU_ASSERT_EQUAL(st.prefill_tokens, N * PRE + own);
    o.no_prefix_cache = 0;
    CU_ASSERT_EQUAL_FATAL(pc_serve(&e, rq, N, N, &o, got, &st), 0);
    pc_compare(ref, got, N, 0, 0.05f, "burst");
    /* the first request computes everything; each other one its last 4 prefix tokens (the
     * block holding them also holds its own tokens) and its own */
    NUMLA_ASSERT_MSG(st.prefill_tokens == PRE + (N - 1) * (PRE - PRE / 16 * 16) + own,
                     "burst: %lld prompt tokens computed, %lld cached",
                     (long long)st.prefill_tokens, (long long)st.cached_prompt_tokens);
    CU_ASSERT_EQUAL(st.cached_prompt_tokens, (N - 1) * (PRE / 16 * 16));
    pc_close(&e);
    for (int i = 0; i < N; i++)
        numla_request_free(&rq[i]);
}

NUMLA_TEST_SUITE(prefix_cache, pc_init, NULL, NUMLA_TEST(test_kv_prefix_table),
                 NUMLA_TEST(test_kv_prefix_table_churn), NUMLA_TEST(test_what_hits), NUMLA_TEST(test_burst),
                 NUMLA_TEST(test_identity_bf16), NUMLA_TEST(test_identity_int8),
                 NUMLA_TEST(test_margins_bf16), NUMLA_TEST(test_margins_int8))
