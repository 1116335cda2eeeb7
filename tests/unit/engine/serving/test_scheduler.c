/* tests/unit/engine/serving/test_scheduler.c — the continuous-batching scheduler (engine/serving/scheduler.h)
 * and the KV block reference counts (engine/model/kv_cache.h).
 *
 * Results must not depend on batching: greedy requests served one at a time (max_seqs 1), in
 * batches of up to 64 with mixed prompt lengths and chunked prefill, and under a KV pool so
 * small that preemption (and recomputation) happens again and again, give the same tokens.
 * Near-ties are handled as docs/design.md §8 says: tokens are compared while the one-at-a-time
 * run's top-1/top-2 margin (from its logprobs) is above the tolerance. Model: the tiny synth
 * preset (context 4096), served by a local numla_model_forward (the multi-rank version of this
 * test is tests/mpi/serve.cmake). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/config.h"
#include "engine/model/kv_cache.h"
#include "engine/model/model.h"
#include "engine/formats/safetensors.h"
#include "engine/serving/scheduler.h"
#include "engine/synth/synth.h"
#include "engine/model/weights.h"
#include "engine/parallel/engine.h"
#include "test_util.h"

static void test_kv_refcount(void)
{
    numla_kv_cache *c = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_kv_cache_create(1, 32, 16, 4, 3, NUMLA_DTYPE_BF16, &c), NUMLA_STATUS_OK);
    int32_t a, b, d, e;
    CU_ASSERT_EQUAL(numla_kv_cache_alloc_block(c, &a), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_kv_cache_alloc_block(c, &b), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_kv_cache_alloc_block(c, &d), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_kv_cache_alloc_block(c, &e), NUMLA_STATUS_KV_FULL);
    CU_ASSERT(a != b && b != d && a != d);
    numla_kv_cache_ref_block(c, a); /* two holders */
    numla_kv_cache_free_block(c, a);
    CU_ASSERT_EQUAL(c->num_free, 0); /* still held once */
    numla_kv_cache_free_block(c, a);
    CU_ASSERT_EQUAL(c->num_free, 1);
    numla_kv_cache_free_block(c, a); /* double free: ignored, not listed twice */
    numla_kv_cache_free_block(c, 99);
    numla_kv_cache_free_block(c, -1);
    CU_ASSERT_EQUAL(c->num_free, 1);
    CU_ASSERT_EQUAL(numla_kv_cache_alloc_block(c, &e), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(e, a);
    CU_ASSERT_EQUAL(c->refcount[e], 1);
    /* a sequence's release drops only its own hold */
    numla_kv_seq s = {0};
    numla_kv_cache_free_block(c, b);
    CU_ASSERT_EQUAL(numla_kv_seq_blocks_needed(c, &s, 4), 1);
    CU_ASSERT_EQUAL(numla_kv_seq_reserve(c, &s, 4), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_kv_seq_blocks_needed(c, &s, 4), 0);
    CU_ASSERT_EQUAL(numla_kv_seq_blocks_needed(c, &s, 9), 2);
    numla_kv_cache_ref_block(c, s.block_table[0]);
    int32_t shared = s.block_table[0];
    numla_kv_seq_release(c, &s);
    CU_ASSERT_EQUAL(c->num_free, 0);
    CU_ASSERT_EQUAL(c->refcount[shared], 1);
    CU_ASSERT(numla_kv_block_bytes(2, 32, 16, 4, NUMLA_DTYPE_BF16) == 2 * 4 * 48 * 2);
    CU_ASSERT(numla_kv_cache_default_bytes(-1, 0.5) > 0);
    numla_kv_cache_destroy(&c);
}

/* ---- a tiny model served locally ---- */

typedef struct sc_eng {
    numla_model_config cfg;
    numla_safetensors_model *st;
    numla_model_weights *w;
    numla_model *m;
    numla_kv_cache *kv;
} sc_eng;

static char sc_dir[4096];

static int sc_init(void)
{
    snprintf(sc_dir, sizeof sc_dir, "%s/sched_tiny", numla_test_tmpdir());
    numla_synth_options so = {.preset = "tiny", .out_dir = sc_dir, .seed = 5,
                              .dtype = NUMLA_DTYPE_BF16};
    return numla_synth_write(&so, NULL) == NUMLA_STATUS_OK ? 0 : -1;
}

static int sc_open(sc_eng *e, numla_isa isa, int64_t blocks)
{
    memset(e, 0, sizeof *e);
    numla_model_options mo = numla_model_options_default(isa);
    mo.num_threads = 2;
    mo.prefill_form = numla_engine_options_default().kernels.prefill_form;
    if (numla_model_config_load(sc_dir, &e->cfg) || numla_safetensors_open(sc_dir, &e->st) ||
        numla_weights_load(&e->cfg, e->st, 0, 1, isa, &e->w) ||
        numla_model_create(e->w, &mo, &e->m) ||
        numla_kv_cache_create((int32_t)e->cfg.num_hidden_layers, (int32_t)e->cfg.kv_lora_rank,
                              (int32_t)e->cfg.qk_rope_head_dim, 16, blocks, NUMLA_DTYPE_BF16,
                              &e->kv)) {
        fprintf(stderr, "\n    open failed: %s\n%s", numla_error_message(), numla_error_trace());
        return -1;
    }
    numla_test_rng r = {11};
    for (int64_t i = e->kv->num_free - 1; i > 0; i--) {
        int64_t j = (int64_t)(numla_test_rng_u64(&r) % (uint64_t)(i + 1));
        int32_t t = e->kv->free_blocks[i];
        e->kv->free_blocks[i] = e->kv->free_blocks[j];
        e->kv->free_blocks[j] = t;
    }
    return 0;
}

static void sc_close(sc_eng *e)
{
    numla_kv_cache_destroy(&e->kv);
    numla_model_destroy(&e->m);
    numla_weights_destroy(&e->w);
    numla_safetensors_close(&e->st);
}

/* sc_poison: the exec call (counted from 1) whose second logits row is made NaN, once the
 * step has at least two rows; 0: none. sc_calls counts exec calls. */
static int sc_poison, sc_calls;

static numla_status sc_exec(void *ctx, const numla_step *st, float *logits)
{
    sc_eng *e = ctx;
    numla_status s = numla_model_forward(e->m, e->kv, st, logits);
    if (s == NUMLA_STATUS_OK && ++sc_calls >= sc_poison && sc_poison > 0 &&
        st->num_logit_rows >= 2) {
        logits[e->cfg.vocab_size + 3] = NAN;
        sc_poison = 0;
    }
    return s;
}

typedef struct sc_res {
    int done;
    int32_t n;
    int32_t tok[64];
    float margin[64];        /* top-1 minus top-2 logprob of each step */
    char reason[16];
    char error[512];
} sc_res;

typedef struct sc_run_ctx {
    sc_res *res;
    int64_t order;
    int64_t *finish_order;
} sc_run_ctx;

static void sc_done(void *ctx, const numla_sched_output *o)
{
    sc_run_ctx *c = ctx;
    sc_res *r = &c->res[(intptr_t)o->user];
    r->done++;
    r->n = o->num_output < 64 ? o->num_output : 64;
    for (int32_t i = 0; i < r->n; i++) {
        r->tok[i] = o->output_tokens[i];
        r->margin[i] = o->logprobs && o->logprobs[i].num_top >= 2
                           ? o->logprobs[i].top_logprobs[0] - o->logprobs[i].top_logprobs[1]
                           : INFINITY;
    }
    snprintf(r->reason, sizeof r->reason, "%s", o->finish_reason);
    snprintf(r->error, sizeof r->error, "%s", o->error ? o->error : "");
    c->finish_order[(intptr_t)o->user] = c->order++;
}

enum { SC_N = 64 };

static void sc_make_requests(numla_request *rq, int n, int64_t vocab, uint64_t seed)
{
    numla_test_rng r = {seed};
    for (int i = 0; i < n; i++) {
        memset(&rq[i], 0, sizeof rq[i]);
        rq[i].line = i + 1;
        /* mixed lengths: mostly short, some longer than a prefill chunk */
        int32_t P = i % 8 == 0 ? 100 + (int32_t)(numla_test_rng_u64(&r) % 80)
                               : 1 + (int32_t)(numla_test_rng_u64(&r) % 40);
        rq[i].num_prompt = P;
        rq[i].prompt_tokens = malloc((size_t)P * sizeof(int32_t));
        for (int32_t t = 0; t < P; t++)
            rq[i].prompt_tokens[t] = (int32_t)(numla_test_rng_u64(&r) % (uint64_t)vocab);
        numla_sampling_params_default(&rq[i].params);
        rq[i].params.temperature = 0;
        rq[i].params.max_tokens = 1 + (int32_t)(numla_test_rng_u64(&r) % 16);
        rq[i].params.ignore_eos = 1;
        rq[i].params.logprobs = 2;
    }
}

/* Serve all requests; returns the scheduler's stats. */
static int sc_serve(sc_eng *e, numla_request *rq, int n, const numla_sched_options *o,
                    sc_res *res, int64_t *finish_order, numla_sched_stats *st)
{
    numla_sched *s = NULL;
    sc_run_ctx ctx = {.res = res, .finish_order = finish_order};
    memset(res, 0, sizeof *res * (size_t)n);
    numla_sched_options so = *o;
    so.vocab_size = e->cfg.vocab_size;
    so.num_eos = e->cfg.num_eos;
    so.eos_token_ids = e->cfg.eos_token_ids;
    if (numla_sched_create(&so, e->kv, sc_exec, e, sc_done, &ctx, &s))
        return -1;
    for (int i = 0; i < n; i++)
        if (numla_sched_submit(s, &rq[i], (void *)(intptr_t)i))
            return -1;
    int64_t guard = 0;
    while (numla_sched_busy(s) && guard++ < 100000)
        if (numla_sched_step(s)) {
            fprintf(stderr, "\n    step: %s\n", numla_error_message());
            return -1;
        }
    numla_sched_stats_get(s, st);
    numla_sched_destroy(&s);
    /* every block came back (free, or idle in the prefix cache) */
    CU_ASSERT_EQUAL(numla_kv_cache_available(e->kv), e->kv->num_blocks);
    return 0;
}

/* Same tokens while the reference is decisive; returns the number of near-tie exits. */
static int sc_compare(const sc_res *ref, const sc_res *got, int n, float tol, const char *what)
{
    int ties = 0;
    for (int i = 0; i < n; i++) {
        NUMLA_ASSERT_MSG(got[i].done == 1, "%s: request %d answered %d times", what, i, got[i].done);
        NUMLA_ASSERT_MSG(!got[i].error[0], "%s: request %d: %s", what, i, got[i].error);
        for (int32_t g = 0; g < ref[i].n; g++) {
            if (g >= got[i].n || got[i].tok[g] != ref[i].tok[g]) {
                NUMLA_ASSERT_MSG(ref[i].margin[g] < tol,
                                 "%s: request %d token %d: %d vs %d (reference margin %g)", what,
                                 i, g, g < got[i].n ? got[i].tok[g] : -1, ref[i].tok[g],
                                 (double)ref[i].margin[g]);
                ties++;
                break;
            }
            if (ref[i].margin[g] < tol)
                break; /* past a near-tie both continuations are legitimate */
        }
        if (got[i].n == ref[i].n && !memcmp(got[i].tok, ref[i].tok, (size_t)got[i].n * 4))
            NUMLA_ASSERT_MSG(!strcmp(got[i].reason, ref[i].reason), "%s: request %d reason %s vs %s",
                             what, i, got[i].reason, ref[i].reason);
    }
    return ties;
}

static void invariance_on(numla_isa isa)
{
    sc_eng e;
    if (sc_open(&e, isa, 4096)) {
        CU_FAIL("open");
        return;
    }
    numla_request rq[SC_N];
    sc_make_requests(rq, SC_N, e.cfg.vocab_size, 2024);
    static sc_res ref[SC_N], got[SC_N];
    int64_t ord[SC_N];
    numla_sched_stats st;
    /* Every linear path keeps fp32-class error whatever the step's size (the AMX GEMM splits x
     * into two bf16 parts, kernels/x86/linear_amx.c), so batching changes logits by rounding
     * only: tokens must match wherever the reference's top-1/top-2 margin is above 0.05. */
    const float tol = 0.05f;
    numla_sched_options one = {.max_batch_tokens = 512, .max_seqs = 1, .prefill_chunk = 512};
    CU_ASSERT_EQUAL_FATAL(sc_serve(&e, rq, SC_N, &one, ref, ord, &st), 0);
    for (int i = 0; i < SC_N; i++)
        CU_ASSERT_EQUAL(ord[i], i); /* one at a time: FCFS completion */

    numla_sched_options batch = {.max_batch_tokens = 1024, .max_seqs = 64, .prefill_chunk = 64};
    CU_ASSERT_EQUAL_FATAL(sc_serve(&e, rq, SC_N, &batch, got, ord, &st), 0);
    NUMLA_ASSERT_MSG(st.steps < 200, "batch of 64: %lld steps (batching did not happen)",
                     (long long)st.steps);
    int ties = sc_compare(ref, got, SC_N, tol, "batch 64");
    NUMLA_ASSERT_MSG(ties <= SC_N / 8, "batch 64: %d near-tie exits", ties);
    sc_close(&e);

    /* A pool just big enough for the largest request: preemption all the time. */
    int64_t need = 0;
    for (int i = 0; i < SC_N; i++) {
        int64_t b = (rq[i].num_prompt + rq[i].params.max_tokens + 15) / 16;
        need = b > need ? b : need;
    }
    if (sc_open(&e, isa, need + 3)) {
        CU_FAIL("open");
        return;
    }
    numla_sched_options tight = {.max_batch_tokens = 256, .max_seqs = 32, .prefill_chunk = 48};
    CU_ASSERT_EQUAL_FATAL(sc_serve(&e, rq, SC_N, &tight, got, ord, &st), 0);
    NUMLA_ASSERT_MSG(st.preemptions >= 10, "small pool: only %lld preemptions",
                     (long long)st.preemptions);
    NUMLA_ASSERT_MSG(st.recompute_tokens > 0, "small pool: nothing recomputed");
    ties = sc_compare(ref, got, SC_N, tol, "small pool");
    if (getenv("SC_VERBOSE"))
        fprintf(stderr, "\n    %s: %lld preemptions, %lld recomputed, %d ties", numla_isa_name(isa), (long long)st.preemptions, (long long)st.recompute_tokens, ties);
    NUMLA_ASSERT_MSG(ties <= SC_N / 8, "small pool: %d near-tie exits", ties);
    sc_close(&e);
    for (int i = 0; i < SC_N; i++)
        numla_request_free(&rq[i]);
}

static void test_batch_invariance(void)
{
    numla_isa isas[NUMLA_ISA_COUNT];
    int n = numla_test_isas(isas);
    /* the best exact-activation level, and avx512bf16 when present */
    numla_isa exact = NUMLA_ISA_REF;
    for (int i = 0; i < n; i++)
        if (isas[i] != NUMLA_ISA_AVX512BF16)
            exact = isas[i];
    invariance_on(exact);
    if (isas[n - 1] == NUMLA_ISA_AVX512BF16)
        invariance_on(NUMLA_ISA_AVX512BF16);
}

/* A request that cannot fit in the whole pool gets its own error; the rest are served. Also:
 * invalid requests and max_tokens 0 are answered at once, and FCFS admission. */
static void test_errors_and_limits(void)
{
    numla_isa isa = numla_isa_best();
    sc_eng e;
    if (sc_open(&e, isa, 8)) { /* 128 tokens */
        CU_FAIL("open");
        return;
    }
    numla_request rq[5];
    sc_make_requests(rq, 5, e.cfg.vocab_size, 7);
    for (int i = 0; i < 5; i++) {
        free(rq[i].prompt_tokens);
        rq[i].num_prompt = 20;
        rq[i].prompt_tokens = calloc(20, sizeof(int32_t));
        rq[i].params.max_tokens = 8;
    }
    free(rq[1].prompt_tokens);
    rq[1].num_prompt = 200; /* 200 + 8 tokens > 128 */
    rq[1].prompt_tokens = calloc(200, sizeof(int32_t));
    snprintf(rq[2].error, sizeof rq[2].error, "line 3: bad request");
    rq[3].params.max_tokens = 0;
    static sc_res res[5];
    int64_t ord[5];
    numla_sched_stats st;
    numla_sched_options o = {.max_batch_tokens = 64, .max_seqs = 4, .prefill_chunk = 16};
    CU_ASSERT_EQUAL_FATAL(sc_serve(&e, rq, 5, &o, res, ord, &st), 0);
    for (int i = 0; i < 5; i++)
        CU_ASSERT_EQUAL(res[i].done, 1);
    CU_ASSERT_STRING_EQUAL(res[1].reason, "error");
    NUMLA_ASSERT_MSG(strstr(res[1].error, "line 2") && strstr(res[1].error, "KV blocks"),
                     "error: %s", res[1].error);
    CU_ASSERT_STRING_EQUAL(res[2].reason, "error");
    CU_ASSERT_STRING_EQUAL(res[2].error, "line 3: bad request");
    CU_ASSERT_STRING_EQUAL(res[3].reason, "length");
    CU_ASSERT_EQUAL(res[3].n, 0);
    CU_ASSERT_STRING_EQUAL(res[0].reason, "length");
    CU_ASSERT_EQUAL(res[0].n, 8);
    CU_ASSERT_STRING_EQUAL(res[4].reason, "length");
    CU_ASSERT_EQUAL(res[4].n, 8);
    /* the same prompt gives the same greedy tokens whatever ran next to it */
    CU_ASSERT_EQUAL(memcmp(res[0].tok, res[4].tok, 8 * sizeof(int32_t)), 0);
    sc_close(&e);
    for (int i = 0; i < 5; i++)
        numla_request_free(&rq[i]);

    /* options the scheduler refuses */
    numla_sched *s = NULL;
    numla_kv_cache *kv = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_kv_cache_create(1, 32, 16, 4, 4, NUMLA_DTYPE_BF16, &kv), NUMLA_STATUS_OK);
    numla_sched_options bad = {.max_batch_tokens = 8, .max_seqs = 16, .vocab_size = 10};
    CU_ASSERT_EQUAL(numla_sched_create(&bad, kv, sc_exec, NULL, sc_done, NULL, &s),
                    NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_PTR_NULL(s);
    numla_kv_cache_destroy(&kv);
}

/* A pool whose running sequences each hold seq_blocks blocks of their own beside their tokens'
 * (DeepSeek-V4's window rings and compressors' rows, numla_kv_pool_charge): admission counts
 * them (a pool of 14 blocks of 4 with 6 a sequence runs one 10-token prompt at a time: 3 + 6
 * blocks at admission, 4 + 6 at its end, where two would fit without them), a finished one gives them
 * back, and a request whose tokens' blocks and own blocks exceed the whole pool is refused at
 * once, naming the cache bytes against the pool's. The scheduler's first step, and no other,
 * frees what the engine holds (release_all: an earlier scheduler's sequences). A stand-in exec:
 * token 3 always wins. */
typedef struct sb_ctx {
    numla_kv_cache *kv;
    int32_t max_seqs_seen;
    int64_t max_used;
    int32_t steps, release_all_at; /* steps run; 1 + the step with release_all set, -1 two */
} sb_ctx;

static numla_status sb_exec(void *ctx, const numla_step *st, float *logits)
{
    sb_ctx *c = ctx;
    if (st->num_seqs > c->max_seqs_seen)
        c->max_seqs_seen = st->num_seqs;
    const int64_t used = c->kv->num_blocks - numla_kv_cache_available(c->kv);
    if (used > c->max_used)
        c->max_used = used;
    if (st->release_all)
        c->release_all_at = c->release_all_at ? -1 : c->steps + 1;
    c->steps++;
    memset(logits, 0, sizeof(float) * 10 * (size_t)st->num_logit_rows);
    for (int32_t r = 0; r < st->num_logit_rows; r++)
        logits[r * 10 + 3] = 1.0f;
    return NUMLA_STATUS_OK;
}

static void test_seq_blocks(void)
{
    numla_kv_cache *kv = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_kv_cache_create(1, 32, 16, 4, 14, NUMLA_DTYPE_BF16, &kv),
                          NUMLA_STATUS_OK);
    kv->seq_blocks = 6;
    kv->block_bytes = 1000;
    numla_request rq[3];
    for (int i = 0; i < 3; i++) {
        memset(&rq[i], 0, sizeof rq[i]);
        rq[i].line = i + 1;
        rq[i].num_prompt = i == 2 ? 30 : 10; /* 30 + 4: 9 blocks + 6 > 14 */
        rq[i].prompt_tokens = calloc((size_t)rq[i].num_prompt, sizeof(int32_t));
        numla_sampling_params_default(&rq[i].params);
        rq[i].params.temperature = 0;
        rq[i].params.max_tokens = 4;
        rq[i].params.ignore_eos = 1;
    }
    static sc_res res[3];
    int64_t ord[3];
    sc_run_ctx rc = {res, 0, ord};
    sb_ctx c = {kv, 0, 0, 0, 0};
    numla_sched_options o = {.max_batch_tokens = 64, .max_seqs = 4, .prefill_chunk = 16,
                             .vocab_size = 10};
    numla_sched *s = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_sched_create(&o, kv, sb_exec, &c, sc_done, &rc, &s),
                          NUMLA_STATUS_OK);
    for (int i = 0; i < 3; i++)
        CU_ASSERT_EQUAL(numla_sched_submit(s, &rq[i], (void *)(intptr_t)i), NUMLA_STATUS_OK);
    /* refused at once, naming the bytes */
    CU_ASSERT_STRING_EQUAL(res[2].reason, "error");
    NUMLA_ASSERT_MSG(strstr(res[2].error, "line 3: the request's cache needs 0.01 MiB") &&
                         strstr(res[2].error, "9 blocks of 4 tokens, and 6 blocks for the "
                                              "sequence's window") &&
                         strstr(res[2].error, "but the whole KV pool is 0.01 MiB (14 blocks)"),
                     "error: %s", res[2].error);
    for (int guard = 0; numla_sched_busy(s) && guard < 1000; guard++)
        CU_ASSERT_EQUAL_FATAL(numla_sched_step(s), NUMLA_STATUS_OK);
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_STRING_EQUAL(res[i].reason, "length");
        CU_ASSERT_EQUAL(res[i].n, 4);
    }
    NUMLA_ASSERT_MSG(c.max_seqs_seen == 1, "%d sequences ran together in 14 blocks",
                     c.max_seqs_seen);
    NUMLA_ASSERT_MSG(c.max_used == 10, "%lld blocks held at most (want 4 + 6)",
                     (long long)c.max_used);
    NUMLA_ASSERT_MSG(c.steps > 1 && c.release_all_at == 1, "release_all: %d (of %d steps)",
                     c.release_all_at, c.steps);
    numla_sched_stats st;
    numla_sched_stats_get(s, &st);
    CU_ASSERT_EQUAL(st.kv_blocks_used, 0); /* every sequence's own blocks given back */
    numla_sched_destroy(&s);
    numla_kv_cache_destroy(&kv);
    for (int i = 0; i < 3; i++)
        numla_request_free(&rq[i]);
}

/* The step's rows are sampled on the team: a sampler error in one row (NaN logits) gives
 * that request an error record with the sampler's own message, and the others go on. */
static void test_sampling_error_in_step(void)
{
    numla_isa isa = numla_isa_best();
    sc_eng e;
    if (sc_open(&e, isa, 64)) {
        CU_FAIL("open");
        return;
    }
    enum { N = 6 };
    numla_request rq[N];
    sc_make_requests(rq, N, e.cfg.vocab_size, 99);
    for (int i = 0; i < N; i++)
        rq[i].params.max_tokens = 6;
    static sc_res res[N];
    int64_t ord[N];
    numla_sched_stats st;
    numla_sched_options o = {.max_batch_tokens = 512, .max_seqs = N, .prefill_chunk = 512};
    sc_calls = 0;
    sc_poison = 2; /* a step where every sequence decodes */
    CU_ASSERT_EQUAL_FATAL(sc_serve(&e, rq, N, &o, res, ord, &st), 0);
    CU_ASSERT_EQUAL(sc_poison, 0); /* it fired */
    int errors = 0;
    for (int i = 0; i < N; i++) {
        CU_ASSERT_EQUAL(res[i].done, 1);
        if (!strcmp(res[i].reason, "error")) {
            errors++;
            char want[32];
            snprintf(want, sizeof want, "line %d: ", i + 1);
            NUMLA_ASSERT_MSG(strstr(res[i].error, want) &&
                                 strstr(res[i].error, "sampler: logit 3 is NaN"),
                             "request %d: %s", i, res[i].error);
        } else {
            CU_ASSERT_STRING_EQUAL(res[i].reason, "length");
            CU_ASSERT_EQUAL(res[i].n, 6);
        }
    }
    CU_ASSERT_EQUAL(errors, 1);
    sc_close(&e);
    for (int i = 0; i < N; i++)
        numla_request_free(&rq[i]);
}


/* ---- prompt logprobs (numla_request.prompt_logprobs) ---- */

enum { PL_LEN = 37 };

typedef struct pl_res {
    int done;
    int have;                       /* prompt_logprobs came back */
    numla_logprob_entry plp[PL_LEN];
    numla_logprob_entry lp[4];
    int32_t tok[4];
    int32_t n, cached;
    char reason[16];
} pl_res;

static void pl_done(void *ctx, const numla_sched_output *o)
{
    pl_res *r = &((pl_res *)ctx)[(intptr_t)o->user];
    r->done++;
    r->have = o->prompt_logprobs != NULL;
    if (o->prompt_logprobs)
        memcpy(r->plp, o->prompt_logprobs, (size_t)o->req->num_prompt * sizeof *r->plp);
    r->n = o->num_output < 4 ? o->num_output : 4;
    for (int32_t i = 0; i < r->n; i++) {
        r->tok[i] = o->output_tokens[i];
        if (o->logprobs)
            r->lp[i] = o->logprobs[i];
    }
    r->cached = o->cached_tokens;
    snprintf(r->reason, sizeof r->reason, "%s", o->finish_reason);
}

static int pl_serve(sc_eng *e, numla_request *rq, int n, numla_sched_options so, pl_res *res)
{
    numla_sched *s = NULL;
    memset(res, 0, sizeof *res * (size_t)n);
    so.vocab_size = e->cfg.vocab_size;
    so.num_eos = e->cfg.num_eos;
    so.eos_token_ids = e->cfg.eos_token_ids;
    if (numla_sched_create(&so, e->kv, sc_exec, e, pl_done, res, &s))
        return -1;
    for (int i = 0; i < n; i++)
        if (numla_sched_submit(s, &rq[i], (void *)(intptr_t)i))
            return -1;
    int64_t guard = 0;
    while (numla_sched_busy(s) && guard++ < 100000)
        if (numla_sched_step(s))
            return -1;
    numla_sched_destroy(&s);
    CU_ASSERT_EQUAL(numla_kv_cache_available(e->kv), e->kv->num_blocks);
    return 0;
}

/* Entry `got` against the reference `ref` (a forced draw's logprobs of the same row). */
static void pl_check(const numla_logprob_entry *got, const numla_logprob_entry *ref, float tol,
                     const char *what, int k)
{
    NUMLA_ASSERT_MSG(got->token == ref->token, "%s: prompt token %d: token %d vs %d", what, k,
                     got->token, ref->token);
    NUMLA_ASSERT_MSG(fabsf(got->logprob - ref->logprob) <= tol,
                     "%s: prompt token %d: logprob %g vs %g", what, k, (double)got->logprob,
                     (double)ref->logprob);
    NUMLA_ASSERT_MSG(got->num_top == ref->num_top, "%s: prompt token %d: %d top vs %d", what, k,
                     got->num_top, ref->num_top);
    for (int32_t j = 0; j < got->num_top && j < ref->num_top; j++) {
        NUMLA_ASSERT_MSG(fabsf(got->top_logprobs[j] - ref->top_logprobs[j]) <= tol,
                         "%s: prompt token %d top %d: %g vs %g", what, k, j,
                         (double)got->top_logprobs[j], (double)ref->top_logprobs[j]);
        /* the same ids unless two of them are tied within the tolerance */
        if (got->top_tokens[j] != ref->top_tokens[j])
            NUMLA_ASSERT_MSG(j + 1 < ref->num_top &&
                                 ref->top_logprobs[j] - ref->top_logprobs[j + 1] <= tol,
                             "%s: prompt token %d top %d: id %d vs %d", what, k, j,
                             got->top_tokens[j], ref->top_tokens[j]);
    }
}

/* Every prompt token's logprob equals what a request of the prompt's first k tokens reports
 * for token k when a logit_bias forces it (the sampler's logprobs are the raw model's): one
 * token per step on both sides (the same step shapes: equal to the bit), then batched with
 * chunked prefill and a small per-step row budget (equal up to rounding: within 0.05, the
 * tolerance of every batching test here); a prompt whose
 * blocks the prefix cache holds is still computed whole; max_tokens 0 and 2. */
static void test_prompt_logprobs(void)
{
    sc_eng e;
    if (sc_open(&e, numla_isa_best(), 256)) {
        CU_FAIL("open");
        return;
    }
    const int32_t V = (int32_t)e.cfg.vocab_size;
    numla_test_rng r = {31};
    int32_t P[PL_LEN];
    for (int k = 0; k < PL_LEN; k++)
        P[k] = (int32_t)(numla_test_rng_u64(&r) % (uint64_t)V);
    /* 0: the prompt with prompt_logprobs (max_tokens 0); 1..PL_LEN-1: the references */
    numla_request rq[PL_LEN];
    for (int i = 0; i < PL_LEN; i++) {
        memset(&rq[i], 0, sizeof rq[i]);
        rq[i].line = i + 1;
        numla_sampling_params_default(&rq[i].params);
        rq[i].params.temperature = 0;
        rq[i].params.ignore_eos = 1;
        const int32_t len = i == 0 ? PL_LEN : i;
        rq[i].num_prompt = len;
        rq[i].prompt_tokens = malloc((size_t)len * sizeof(int32_t));
        memcpy(rq[i].prompt_tokens, P, (size_t)len * sizeof(int32_t));
        if (i == 0) {
            rq[i].params.max_tokens = 0;
            rq[i].prompt_logprobs = 1;
            rq[i].prompt_logprobs_top = 3;
        } else {
            rq[i].params.max_tokens = 1;
            rq[i].params.logprobs = 3;
            rq[i].params.num_logit_bias = 1;
            rq[i].params.logit_bias_tokens[0] = P[i];
            rq[i].params.logit_bias_values[0] = 100;
        }
    }
    static pl_res one[PL_LEN], got[3];
    numla_sched_options step1 = {.max_batch_tokens = 1, .max_seqs = 1, .prefill_chunk = 1,
                                 .no_prefix_cache = 1};
    CU_ASSERT_EQUAL_FATAL(pl_serve(&e, rq, PL_LEN, step1, one), 0);
    CU_ASSERT_EQUAL(one[0].done, 1);
    CU_ASSERT_STRING_EQUAL(one[0].reason, "length");
    CU_ASSERT_EQUAL(one[0].n, 0);
    CU_ASSERT_FATAL(one[0].have);
    CU_ASSERT_EQUAL(one[0].plp[0].num_top, -1); /* the first token has none */
    CU_ASSERT_EQUAL(one[0].plp[0].token, P[0]);
    /* the random model's logits span ~100: where the bias could not force P[k], only the
     * reference's top entries are compared (its chosen token is another) */
    int forced = 0;
    for (int k = 1; k < PL_LEN; k++) {
        CU_ASSERT_EQUAL_FATAL(one[k].n, 1);
        numla_logprob_entry ref = one[k].lp[0];
        if (one[k].tok[0] == P[k])
            forced++;
        else
            ref.token = P[k], ref.logprob = one[0].plp[k].logprob;
        pl_check(&one[0].plp[k], &ref, 0.0f, "one token per step", k);
        one[k].lp[0] = ref;
    }
    NUMLA_ASSERT_MSG(forced >= (PL_LEN - 1) * 3 / 4, "only %d of %d references forced", forced,
                     PL_LEN - 1);

    /* batched: request 1 fills the prefix cache with the prompt's blocks first (max_seqs 1
     * serves in order), then the same prompt with prompt_logprobs and 2 tokens to generate,
     * chunks of 16 and 5 prompt rows per step; and a plain twin of the same prompt */
    numla_request b[3];
    memset(b, 0, sizeof b);
    for (int i = 0; i < 3; i++) {
        b[i].line = i + 1;
        numla_sampling_params_default(&b[i].params);
        b[i].params.temperature = 0;
        b[i].params.ignore_eos = 1;
        b[i].params.max_tokens = 2;
        b[i].params.logprobs = 3;
        b[i].num_prompt = PL_LEN;
        b[i].prompt_tokens = malloc(PL_LEN * sizeof(int32_t));
        memcpy(b[i].prompt_tokens, P, sizeof P);
    }
    b[1].prompt_logprobs = 1;
    b[1].prompt_logprobs_top = 3;
    numla_sched_options batched = {.max_batch_tokens = 64, .max_seqs = 1, .prefill_chunk = 16,
                                   .prompt_logit_rows = 5};
    CU_ASSERT_EQUAL_FATAL(pl_serve(&e, b, 3, batched, got), 0);
    CU_ASSERT_FATAL(got[1].have);
    CU_ASSERT(!got[0].have && !got[2].have);
    CU_ASSERT_EQUAL(got[1].cached, 0);   /* computed whole */
    NUMLA_ASSERT_MSG(got[2].cached >= 32, "the plain twin took %d cached tokens", got[2].cached);
    for (int k = 1; k < PL_LEN; k++)
        pl_check(&got[1].plp[k], &one[k].lp[0], 0.05f, "batched, cached prefix", k);
    CU_ASSERT_EQUAL(got[1].n, 2);
    CU_ASSERT_EQUAL(got[1].tok[0], got[0].tok[0]); /* then it generates as the plain request */
    CU_ASSERT_EQUAL(got[1].tok[1], got[0].tok[1]);
    sc_close(&e);
    for (int i = 0; i < PL_LEN; i++)
        numla_request_free(&rq[i]);
    for (int i = 0; i < 3; i++)
        numla_request_free(&b[i]);
}

/* ---- prompt rows' full logits (the prompt_rows hook): every row once, in order, as a whole-prompt forward ---- */

enum { PR_N = 12, PR_MAXP = 120 };

typedef struct pr_ctx {
    int64_t vocab;
    int32_t next[PR_N];          /* next position expected per request */
    int calls[PR_N];
    float *rows[PR_N];           /* (num_prompt, vocab) as reported */
    int bad_order;
    int fail_user;               /* the request whose callback fails (-1: none) */
} pr_ctx;

static numla_status pr_rows(void *ctx, void *user, int32_t first, int32_t n, const float *logits)
{
    pr_ctx *c = ctx;
    const int i = (int)(intptr_t)user;
    c->calls[i]++;
    if (first != c->next[i] || n < 1)
        c->bad_order++;
    if (i == c->fail_user)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "test consumer refuses rows %d..%d", first,
                   first + n - 1);
    if (first >= 0 && first + n <= PR_MAXP)
        memcpy(c->rows[i] + (size_t)first * (size_t)c->vocab, logits,
               (size_t)n * (size_t)c->vocab * sizeof *logits);
    c->next[i] = first + n;
    return NUMLA_STATUS_OK;
}

/* The logits of every row of one prompt from one forward over a fresh sequence. */
static int pr_reference(sc_eng *e, const numla_request *rq, float *out)
{
    const int32_t P = rq->num_prompt;
    numla_kv_seq seq = {0};
    int32_t pos[PR_MAXP], rows[PR_MAXP], qsl[2] = {0, P}, len = P;
    int64_t slots[PR_MAXP];
    if (numla_kv_seq_reserve(e->kv, &seq, P))
        return -1;
    for (int32_t p = 0; p < P; p++) {
        pos[p] = rows[p] = p;
        slots[p] = numla_kv_seq_slot(e->kv, &seq, p);
    }
    numla_step st = {.num_seqs = 1, .num_tokens = P, .tokens = rq->prompt_tokens,
                     .positions = pos, .slots = slots, .query_start_loc = qsl, .seq_lens = &len,
                     .block_tables = seq.block_table, .max_blocks_per_seq = seq.num_blocks,
                     .num_logit_rows = P, .logit_rows = rows};
    numla_status s = numla_model_forward(e->m, e->kv, &st, out);
    numla_kv_seq_release(e->kv, &seq);
    return s == NUMLA_STATUS_OK ? 0 : -1;
}

static void test_prompt_rows(void)
{
    sc_eng e;
    if (sc_open(&e, numla_isa_best(), 24)) { /* 24 blocks of 16: preemption under load */
        CU_FAIL("open");
        return;
    }
    const int64_t V = e.cfg.vocab_size;
    static numla_request rq[PR_N];
    static sc_res res[PR_N];
    int64_t order[PR_N];
    numla_test_rng r = {77};
    pr_ctx c = {.vocab = V, .fail_user = 9};
    float *ref = malloc((size_t)PR_MAXP * (size_t)V * sizeof *ref);
    for (int i = 0; i < PR_N; i++) {
        memset(&rq[i], 0, sizeof rq[i]);
        rq[i].line = i + 1;
        int32_t P = 20 + (int32_t)(numla_test_rng_u64(&r) % 100);
        /* request 11 repeats request 10's prompt: its rows must not come from the prefix cache */
        if (i == 11)
            P = rq[10].num_prompt;
        rq[i].num_prompt = P;
        rq[i].prompt_tokens = malloc((size_t)P * sizeof(int32_t));
        for (int32_t t = 0; t < P; t++)
            rq[i].prompt_tokens[t] = i == 11 ? rq[10].prompt_tokens[t]
                                             : (int32_t)(numla_test_rng_u64(&r) % (uint64_t)V);
        numla_sampling_params_default(&rq[i].params);
        rq[i].params.temperature = 0;
        rq[i].params.ignore_eos = 1;
        rq[i].params.max_tokens = i % 3 == 0 ? 0 : 24; /* decode growth makes preemptions */
        rq[i].prompt_logprobs = i != 5;                /* one ordinary request among them */
        c.rows[i] = calloc((size_t)P * (size_t)V, sizeof(float));
    }
    numla_sched_options o = {.max_batch_tokens = 96, .max_seqs = 8, .prefill_chunk = 23,
                             .prompt_logit_rows = 40, .prompt_rows = pr_rows,
                             .prompt_rows_ctx = &c};
    numla_sched_stats st;
    CU_ASSERT_EQUAL_FATAL(sc_serve(&e, rq, PR_N, &o, res, order, &st), 0);
    NUMLA_ASSERT_MSG(st.preemptions > 0, "no preemption happened (%lld)", (long long)st.preemptions);
    CU_ASSERT_EQUAL(c.bad_order, 0);
    double worst = 0;
    for (int i = 0; i < PR_N; i++) {
        NUMLA_ASSERT_MSG(res[i].done == 1, "request %d answered %d times", i, res[i].done);
        if (i == 9) { /* the consumer's error ends that request only */
            NUMLA_ASSERT_MSG(!strcmp(res[i].reason, "error") &&
                                 strstr(res[i].error, "test consumer refuses rows"),
                             "request 9: %s %s", res[i].reason, res[i].error);
            continue;
        }
        NUMLA_ASSERT_MSG(!res[i].error[0], "request %d: %s", i, res[i].error);
        if (i == 5) {
            CU_ASSERT_EQUAL(c.calls[i], 0);
            continue;
        }
        NUMLA_ASSERT_MSG(c.next[i] == rq[i].num_prompt - 1, "request %d: rows up to %d of %d", i,
                         c.next[i], rq[i].num_prompt);
        if (rq[i].params.max_tokens == 0) {
            CU_ASSERT_STRING_EQUAL(res[i].reason, "length");
            CU_ASSERT_EQUAL(res[i].n, 0);
        } else {
            CU_ASSERT_EQUAL(res[i].n, rq[i].params.max_tokens);
        }
        CU_ASSERT_EQUAL_FATAL(pr_reference(&e, &rq[i], ref), 0);
        const int64_t P = rq[i].num_prompt;
        for (int64_t k = 0; k < (P - 1) * V; k++) {
            double d = fabs((double)ref[k] - (double)c.rows[i][k]);
            worst = d > worst ? d : worst;
        }
    }
    /* chunked and batched vs one whole-prompt forward: bf16 activations round differently */
    NUMLA_ASSERT_MSG(worst < 5e-2, "prompt rows differ from a whole-prompt forward by %g", worst);
    for (int i = 0; i < PR_N; i++) {
        free(c.rows[i]);
        numla_request_free(&rq[i]);
    }
    free(ref);
    sc_close(&e);
}

NUMLA_TEST_SUITE(scheduler, sc_init, NULL, NUMLA_TEST(test_kv_refcount),
                 NUMLA_TEST(test_errors_and_limits), NUMLA_TEST(test_prompt_logprobs), NUMLA_TEST(test_batch_invariance),
                 NUMLA_TEST(test_sampling_error_in_step), NUMLA_TEST(test_prompt_rows),
                 NUMLA_TEST(test_seq_blocks))
