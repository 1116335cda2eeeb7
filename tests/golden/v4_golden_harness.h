/* tests/golden/v4_golden_harness.h — DeepSeek-V4 (engine/model/model_v4.c) against the reference
 * data of tests/golden/v4/ (tests/golden/README.md "DeepSeek-V4"), shared by the V4 golden suites
 * (test_model_golden_v4.c, test_v4_mtp_golden.c, test_model_golden_v4_gguf.c):
 *   - a golden directory's data and a checkpoint loaded whole (v4_golden_load, v4_load;
 *     both at once: v4_golden_open);
 *   - a team of R ranks in one process (threads, each with its shard, summing through
 *     model_golden_harness.h's shared-memory allreduce: v4_team_*; v4_team_open from a
 *     directory; v4_team_step runs a scheduler's step on every rank and gathers the logits);
 *   - every prompt of a golden directory run on such a team, the prompt's positions and the
 *     greedy steps fed the reference's tokens, each rank's vocabulary slice gathered
 *     (v4_run_prompts), and those logits held to the reference (v4_compare).
 * Header-only (static functions; a suite uses some of them). */
#ifndef NUMLA_TESTS_V4_GOLDEN_HARNESS_H
#define NUMLA_TESTS_V4_GOLDEN_HARNESS_H

#include "model_golden_harness.h"

#include "engine/model/config_v4.h"
#include "engine/model/model_v4.h"

enum { V4_MAX_RANKS = 4 };

/* tests/golden/v4/<sub>'s prompts, greedy tokens and expected.safetensors; on failure the test
 * is failed, nothing is held and -1 returned. */
static int v4_golden_load(golden *g, const char *sub)
{
    if (golden_load_file(g, "v4", sub, "expected.safetensors")) {
        CU_FAIL("golden data");
        golden_free(g);
        return -1;
    }
    return 0;
}

/* The checkpoint in dir (config.json and its safetensors) loaded whole at isa, with its MTP
 * layer when mtp; *cfg is its config. On failure the test is failed and -1 returned. */
static int v4_load(const char *dir, numla_isa isa, int mtp, numla_model_config *cfg,
                   numla_v4_model **m)
{
    char d[1200]; /* dir may be numla_test_source_path's buffer */
    snprintf(d, sizeof d, "%s", dir);
    *m = NULL;
    numla_status s = numla_model_config_load(d, cfg);
    if (!s && mtp)
        s = numla_v4_config_enable_mtp(cfg);
    numla_safetensors_model *st = NULL;
    if (!s)
        s = numla_safetensors_open(d, &st);
    if (!s)
        s = numla_v4_model_load(cfg, st, isa, m);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OK, "%s: %s", d, numla_error_message());
    numla_safetensors_close(&st);
    return s == NUMLA_STATUS_OK ? 0 : -1;
}

/* tests/golden/v4/<sub>'s data and the checkpoint beside it loaded whole at the best level
 * without its MTP layer: the start of most suites' tests. On failure the test is failed,
 * nothing is held and -1 returned. */
static int v4_golden_open(golden *g, const char *sub, numla_model_config *cfg, numla_v4_model **m)
{
    if (v4_golden_load(g, sub))
        return -1;
    if (v4_load(g->dir, numla_isa_best(), 0, cfg, m)) {
        golden_free(g);
        return -1;
    }
    return 0;
}

/* The index of the largest of a row's V logits (the first of a tie). */
static int v4_argmax(const float *row, int64_t V)
{
    int best = 0;
    for (int64_t v = 1; v < V; v++)
        best = row[v] > row[best] ? (int)v : best;
    return best;
}

/* R ranks of one checkpoint in one process: rank r's shard m[r], its allreduce through sh. */
typedef struct v4_team {
    int R;
    shm_reduce sh;
    rank_ctx rc[V4_MAX_RANKS];
    numla_v4_model *m[V4_MAX_RANKS];
} v4_team;

static void v4_team_free(v4_team *t)
{
    for (int r = 0; r < t->R; r++) {
        numla_v4_model_destroy(&t->m[r]);
        free(t->sh.slot[r]);
    }
    pthread_barrier_destroy(&t->sh.bar);
}

/* Loads the R shards of cfg's checkpoint at isa; with R > 1 each sums through the team's shared
 * memory. On failure the test is failed, the team freed and -1 returned. */
static int v4_team_load(v4_team *t, const numla_model_config *cfg, numla_safetensors_model *st,
                        numla_isa isa, int R)
{
    memset(t, 0, sizeof *t);
    t->R = R;
    t->sh.nranks = R;
    pthread_barrier_init(&t->sh.bar, NULL, (unsigned)R);
    t->sh.cap = 256 * cfg->hidden_size;
    for (int r = 0; r < R; r++) {
        numla_status ls = numla_v4_model_load_shard(cfg, st, isa, NULL, r, R, &t->m[r]);
        NUMLA_ASSERT_MSG(ls == NUMLA_STATUS_OK, "rank %d load: %s", r, numla_error_message());
        t->sh.slot[r] = malloc(sizeof(float) * (size_t)t->sh.cap);
        if (ls != NUMLA_STATUS_OK || !t->sh.slot[r]) {
            v4_team_free(t);
            return -1;
        }
        t->rc[r] = (rank_ctx){.sh = &t->sh, .rank = r};
        if (R > 1)
            numla_v4_model_set_reduce(t->m[r], shm_reduce_fn, &t->rc[r]);
    }
    return 0;
}

/* v4_team_load of the checkpoint in dir (config.json and its safetensors) into *cfg's R shards;
 * the files are closed once loaded. On failure the test is failed and -1 returned. */
static int v4_team_open(v4_team *t, const char *dir, numla_isa isa, int R,
                        numla_model_config *cfg)
{
    char d[1200]; /* dir may be numla_test_source_path's buffer */
    snprintf(d, sizeof d, "%s", dir);
    numla_status s = numla_model_config_load(d, cfg);
    numla_safetensors_model *st = NULL;
    if (!s)
        s = numla_safetensors_open(d, &st);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OK, "%s: %s", d, numla_error_message());
    const int bad = s != NUMLA_STATUS_OK || v4_team_load(t, cfg, st, isa, R);
    numla_safetensors_close(&st);
    return bad ? -1 : 0;
}

/* fn on one thread per rank, rank r given (char *)args + r * size; with R > 1 each rank's
 * OpenMP team is one thread (R rank threads already). */
static void v4_team_run(v4_team *t, void *(*fn)(void *), void *args, size_t size)
{
    const int team = omp_get_max_threads();
    if (t->R > 1)
        omp_set_num_threads(1);
    pthread_t th[V4_MAX_RANKS];
    for (int r = 0; r < t->R; r++)
        pthread_create(&th[r], NULL, fn, (char *)args + (size_t)r * size);
    for (int r = 0; r < t->R; r++)
        pthread_join(th[r], NULL);
    omp_set_num_threads(team);
}

/* One rank's part of a scheduler's step on a team (the first member of a suite's per-rank
 * struct): its sequences, the step, its vocabulary slice of the step's logit rows and its
 * status. */
typedef struct v4_rank_step {
    numla_v4_seqs *t;
    const numla_step *st;
    float *buf;               /* (num_logit_rows + 1, vocab_count) */
    numla_status s;
} v4_rank_step;

/* A scheduler's step st on team t: ranks holds R structs of `size` bytes, each beginning with
 * a v4_rank_step, which gets st and a buffer for its slice; fn runs each rank's forward (on
 * its struct, setting s); the slices are gathered into logits (num_logit_rows, V). The first
 * failing rank's status is returned (set as the error). */
static numla_status v4_team_step(v4_team *t, void *(*fn)(void *), void *ranks, size_t size,
                                 const numla_step *st, int64_t V, float *logits)
{
    for (int r = 0; r < t->R; r++) {
        v4_rank_step *k = (v4_rank_step *)(void *)((char *)ranks + (size_t)r * size);
        k->st = st;
        free(k->buf);
        k->buf = malloc(sizeof(float) * (size_t)(st->num_logit_rows + 1) *
                        (size_t)numla_v4_model_shard(t->m[r])->vocab_count);
        if (!k->buf)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "team step: no memory for rank %d's logits", r);
    }
    v4_team_run(t, fn, ranks, size);
    for (int r = 0; r < t->R; r++) {
        const v4_rank_step *k = (const v4_rank_step *)(const void *)((const char *)ranks +
                                                                      (size_t)r * size);
        NUMLA_CHECK(k->s);
        const numla_shard *sh = numla_v4_model_shard(t->m[r]);
        for (int32_t i = 0; i < st->num_logit_rows; i++)
            memcpy(logits + (size_t)i * (size_t)V + sh->vocab_begin,
                   k->buf + (size_t)i * (size_t)sh->vocab_count,
                   sizeof(float) * (size_t)sh->vocab_count);
    }
    return NUMLA_STATUS_OK;
}

/* The rows v4_run_prompts writes for g: each prompt's positions and its greedy steps. */
static size_t v4_prompt_rows(const golden *g)
{
    size_t rows = 0;
    for (int p = 0; p < g->nprompts; p++)
        rows += (size_t)(g->len[p] + N_GREEDY - 1);
    return rows;
}

/* One rank's run of one prompt: the prompt whole, then the N_GREEDY - 1 tokens of feed one per
 * step, its vocabulary slice of every row written into the full-vocabulary `logits`. */
typedef struct v4_prompt_job {
    const numla_v4_model *m;
    const int32_t *prompt;
    int n;
    const int32_t *feed;       /* (N_GREEDY) tokens fed after the prompt */
    float *logits;             /* (n + N_GREEDY - 1, V), shared, disjoint columns */
    int ok;
} v4_prompt_job;

static void *v4_prompt_main(void *arg)
{
    v4_prompt_job *r = arg;
    const numla_shard *sh = numla_v4_model_shard(r->m);
    const int64_t V = numla_v4_model_config(r->m)->vocab_size, vc = sh->vocab_count;
    float *buf = malloc(sizeof(float) * (size_t)r->n * (size_t)vc); /* (n, vocab_count) */
    numla_v4_seq *s = NULL;
    r->ok = buf && numla_v4_seq_create(r->m, &s) == NUMLA_STATUS_OK &&
            numla_v4_forward(r->m, s, r->prompt, r->n, buf) == NUMLA_STATUS_OK;
    for (int t = 0; r->ok && t < r->n; t++)
        memcpy(r->logits + (size_t)t * V + sh->vocab_begin, buf + (size_t)t * vc,
               sizeof(float) * (size_t)vc);
    for (int i = 0; r->ok && i + 1 < N_GREEDY; i++) {
        r->ok = numla_v4_forward(r->m, s, &r->feed[i], 1, buf) == NUMLA_STATUS_OK;
        memcpy(r->logits + (size_t)(r->n + i) * V + sh->vocab_begin, buf,
               sizeof(float) * (size_t)vc);
    }
    numla_v4_seq_destroy(&s);
    free(buf);
    return NULL;
}

/* Every prompt of g through cfg's checkpoint on R ranks at isa: the logits of the prompt's
 * positions and of the greedy steps fed g's tokens, all prompts one after another into *out
 * (allocated: v4_prompt_rows(g) rows of V). 0 on success; on failure the test is failed. */
static int v4_run_prompts(const numla_model_config *cfg, numla_safetensors_model *st,
                          numla_isa isa, const golden *g, int R, float **out)
{
    const int64_t V = cfg->vocab_size;
    float *all = calloc(v4_prompt_rows(g) * (size_t)V, sizeof(float));
    v4_team t;
    if (!all || v4_team_load(&t, cfg, st, isa, R)) {
        free(all);
        return -1;
    }
    v4_prompt_job rk[V4_MAX_RANKS];
    int bad = 0;
    size_t at = 0;
    for (int p = 0; p < g->nprompts && !bad; p++) {
        for (int r = 0; r < R; r++)
            rk[r] = (v4_prompt_job){.m = t.m[r], .prompt = g->tokens[p], .n = g->len[p],
                                    .feed = g->greedy[p], .logits = all + at * (size_t)V};
        v4_team_run(&t, v4_prompt_main, rk, sizeof rk[0]);
        for (int r = 0; r < R; r++)
            bad |= !rk[r].ok;
        at += (size_t)(g->len[p] + N_GREEDY - 1);
    }
    v4_team_free(&t);
    NUMLA_ASSERT_MSG(!bad, "%d ranks: %s", R, numla_error_message());
    if (bad) {
        free(all);
        return -1;
    }
    *out = all;
    return 0;
}

/* v4_run_prompts' logits `all` against the reference `expected` (prompt{p}.logits): the worst
 * error over every prompt position into *worst, and the greedy tokens (the argmax of each
 * prompt's last position and of its greedy steps) against g's: *cmp of them compared (those
 * whose reference margin exceeds twice LOGIT_TOL, or every one when every_token), *ok equal. */
static void v4_compare(const golden *g, numla_safetensors_model *expected, const float *all,
                       int64_t V, int every_token, double *worst, int *ok, int *cmp)
{
    *worst = 0;
    *ok = *cmp = 0;
    size_t at = 0;
    for (int p = 0; p < g->nprompts; p++) {
        const int n = g->len[p];
        const float *l = all + at * (size_t)V;
        char name[64];
        snprintf(name, sizeof name, "prompt%d.logits", p);
        const float *ref = st_f32(expected, name, NULL, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
        *worst = fmax(*worst, maxabs_diff(l, ref, (size_t)n * (size_t)V, NULL));
        for (int i = 0; i < N_GREEDY; i++) {
            if (!every_token && g->margin[p][i] <= 2 * LOGIT_TOL)
                continue;
            (*cmp)++;
            *ok += v4_argmax(l + (size_t)(n - 1 + i) * V, V) == g->greedy[p][i];
        }
        at += (size_t)(n + N_GREEDY - 1);
    }
}

#endif
