/* tests/unit/engine/engine_harness.h — open a model dir into a ready engine (config, weights,
 * model, KV cache with a shuffled free list) and run steps of several sequences; shared by the
 * engine unit tests and the golden tests. Header-only (static functions). */
#ifndef NUMLA_TESTS_ENGINE_HARNESS_H
#define NUMLA_TESTS_ENGINE_HARNESS_H

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/config.h"
#include "engine/model/kv_cache.h"
#include "engine/model/model.h"
#include "engine/formats/safetensors.h"
#include "engine/model/weights.h"
#include "engine/parallel/engine.h"
#include "test_util.h"

typedef struct eng {
    numla_model_config cfg;
    numla_safetensors_model *st;
    numla_model_weights *w;
    numla_model *m;
    numla_kv_cache *kv;
} eng;

/* The tests' model options: 2 threads, the prefill form the engine would take (from
 * NUMLA_PREFILL_FORM, so the suites can be run under each form). */
static numla_model_options eng_model_options(numla_isa isa)
{
    numla_model_options o = numla_model_options_default(isa);
    o.num_threads = 2;
    o.prefill_form = numla_engine_options_default().kernels.prefill_form;
    return o;
}

/* GGUF models: whether their block linears keep fp32 activations (weights.h qblock_fp32_act). */
static int eng_qblock_fp32_act = 1;

/* Load the model's MTP layer too (numla_model_config_enable_mtp): a test sets it around its
 * eng_open calls. */
static int eng_mtp = 0;

/* bf16 linears' activations (weights.h linear_act): F32 unless a test asks for BF16. */
static numla_linear_act eng_linear_act = NUMLA_LINEAR_ACT_F32;

/* The weights' format at load (numla_weights_options.format): -1 keeps the checkpoint's. */
static int eng_weights_format = -1;

/* Rank `rank` of `nranks` (the shard it loads), with model options mo; dir is a model
 * directory or a GGUF file. */
static int eng_open_rank_opts(eng *e, const char *dir, numla_dtype kv_dtype,
                              const numla_model_options *mo, int rank, int nranks)
{
    memset(e, 0, sizeof *e);
    numla_weights_options wo = numla_weights_options_default();
    wo.qblock_fp32_act = eng_qblock_fp32_act;
    wo.linear_act = eng_linear_act;
    wo.format = eng_weights_format;
    const int gguf = numla_model_path_is_gguf(dir); /* a GGUF file: no safetensors kept open */
    if (numla_model_config_load(dir, &e->cfg) ||
        (eng_mtp && numla_model_config_enable_mtp(&e->cfg)) ||
        (gguf ? numla_weights_load_path(&e->cfg, dir, rank, nranks, mo->isa, &wo, &e->w)
              : (numla_safetensors_open(dir, &e->st) ||
                 numla_weights_load_ex(&e->cfg, e->st, rank, nranks, mo->isa, &wo, &e->w))) ||
        numla_model_create(e->w, mo, &e->m) ||
        numla_kv_cache_create_for_model(&e->cfg, 4, 128, kv_dtype, kv_dtype, &e->kv)) {
        fprintf(stderr, "\n    engine open failed: %s\n%s", numla_error_message(), numla_error_trace());
        return -1;
    }
    /* Shuffle the free list so block tables are not in order (docs/design.md §3). */
    numla_test_rng r = {99};
    for (int64_t i = e->kv->num_free - 1; i > 0; i--) {
        int64_t j = (int64_t)(numla_test_rng_u64(&r) % (uint64_t)(i + 1));
        int32_t t = e->kv->free_blocks[i];
        e->kv->free_blocks[i] = e->kv->free_blocks[j];
        e->kv->free_blocks[j] = t;
    }
    return 0;
}

/* Rank `rank` of `nranks` with eng_model_options. */
static int eng_open_rank(eng *e, const char *dir, numla_dtype kv_dtype, numla_isa isa, int rank,
                         int nranks)
{
    numla_model_options mo = eng_model_options(isa);
    return eng_open_rank_opts(e, dir, kv_dtype, &mo, rank, nranks);
}

static inline int eng_open(eng *e, const char *dir, numla_dtype kv_dtype, numla_isa isa)
{
    return eng_open_rank(e, dir, kv_dtype, isa, 0, 1);
}

static void eng_close(eng *e)
{
    numla_kv_cache_destroy(&e->kv);
    numla_model_destroy(&e->m);
    numla_weights_destroy(&e->w);
    numla_safetensors_close(&e->st);
}

/* One step over `ns` sequences: sequence i appends n[i] tokens tok[i] to seqs[i]; logits for
 * every new token, rows in step order, into out (sum n, vocab). */
static int eng_step(eng *e, int ns, numla_kv_seq *seqs, const int32_t *const *tok, const int *n,
                    float *out)
{
    int T = 0, maxb = 0;
    for (int i = 0; i < ns; i++) {
        if (numla_kv_seq_reserve(e->kv, &seqs[i], seqs[i].len + n[i]))
            return -1;
        T += n[i];
        maxb = seqs[i].num_blocks > maxb ? seqs[i].num_blocks : maxb;
    }
    int32_t *tokens = malloc(sizeof(int32_t) * T), *pos = malloc(sizeof(int32_t) * T);
    int64_t *slots = malloc(sizeof(int64_t) * T);
    int32_t *qsl = malloc(sizeof(int32_t) * (ns + 1)), *lens = malloc(sizeof(int32_t) * ns);
    int32_t *bt = calloc((size_t)ns * maxb, sizeof(int32_t)), *rows = malloc(sizeof(int32_t) * T);
    int t = 0;
    qsl[0] = 0;
    for (int i = 0; i < ns; i++) {
        for (int j = 0; j < n[i]; j++, t++) {
            tokens[t] = tok[i][j];
            pos[t] = (int32_t)(seqs[i].len + j);
            slots[t] = numla_kv_seq_slot(e->kv, &seqs[i], seqs[i].len + j);
            rows[t] = t;
        }
        qsl[i + 1] = t;
        seqs[i].len += n[i];
        lens[i] = (int32_t)seqs[i].len;
        memcpy(bt + (size_t)i * maxb, seqs[i].block_table, sizeof(int32_t) * seqs[i].num_blocks);
    }
    numla_step st = {.num_seqs = ns, .num_tokens = T, .tokens = tokens, .positions = pos,
                     .slots = slots, .query_start_loc = qsl, .seq_lens = lens,
                     .block_tables = bt, .max_blocks_per_seq = maxb, .num_logit_rows = T,
                     .logit_rows = rows};
    numla_status s = numla_model_forward(e->m, e->kv, &st, out);
    if (s)
        fprintf(stderr, "\n    forward failed: %s\n%s", numla_error_message(), numla_error_trace());
    free(tokens); free(pos); free(slots); free(qsl); free(lens); free(bt); free(rows);
    return s ? -1 : 0;
}

/* In-process stand-in for the MPI allreduce: R engines in R threads sum through shared
 * memory, in rank order, so every rank gets identical sums. */
typedef struct shm_reduce {
    int nranks;
    pthread_barrier_t bar;
    float *slot[8];
    int64_t cap;
} shm_reduce;

typedef struct rank_ctx {
    shm_reduce *sh;
    int rank;
    eng e;
    float *logits; /* (T, vocab_count of this rank) */
    int ok;
    const void *job; /* what the rank thread runs (test-defined) */
} rank_ctx;

static numla_status shm_reduce_fn(void *ctx, float *buf, int64_t count)
{
    rank_ctx *rc = ctx;
    shm_reduce *sh = rc->sh;
    if (count > sh->cap)
        NUMLA_FAIL(NUMLA_STATUS_INTERNAL, "test reduce: %lld values exceed %lld", (long long)count,
                   (long long)sh->cap);
    memcpy(sh->slot[rc->rank], buf, (size_t)count * sizeof(float));
    pthread_barrier_wait(&sh->bar);
    for (int64_t i = 0; i < count; i++) {
        float s = 0;
        for (int r = 0; r < sh->nranks; r++) /* same order on every rank: identical sums */
            s += sh->slot[r][i];
        buf[i] = s;
    }
    pthread_barrier_wait(&sh->bar);
    return NUMLA_STATUS_OK;
}

#endif
