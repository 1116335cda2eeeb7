/* Golden test (label golden) of the multi-token-prediction layer (numla_model_mtp_forward,
 * docs/speculative.md) against scripts/make_mtp_golden.py's reference, written from DeepSeek's
 * description of the layer (tests/golden/mtp/<name>/): the trained model models/kjv-v3 with its
 * trained MTP layer (bf16 weights), tiny random DeepSeek-V3 and V3.2 models (fp32), and the V3
 * one as a GGUF file with its nextn tensors. Per
 * model, at 1, 2 and 3 in-process ranks (heads, experts, vocabulary and eh_proj's rows split),
 * two prompts are prefilled in one main step; then the MTP layer runs over each prompt's
 * positions 0..n-2 in two MTP steps (so the second reads the MTP layer's cache rows the first
 * wrote), its hidden states read from the main step's rows; then one chained draft row per
 * prompt at position n-1 whose hidden state is the previous MTP step's block output. Every MTP
 * logit row must be within LOGIT_TOL of the reference. */
#include "model_golden_harness.h"

enum { MTP_PROMPTS = 2, MTP_MAX_RANKS = 3, MTP_MAX_LEN = 32 };

typedef struct mtp_golden {
    char model_dir[1200];
    int n;                                  /* prompts */
    int len[MTP_PROMPTS];
    int32_t tok[MTP_PROMPTS][MTP_MAX_LEN];
    int32_t chain_tok[MTP_PROMPTS];
    numla_safetensors_model *expected;
} mtp_golden;

static int mtp_golden_load(mtp_golden *g, const char *name)
{
    memset(g, 0, sizeof *g);
    char dir[1200], path[1300];
    snprintf(dir, sizeof dir, "%s/%s", numla_test_source_path("tests/golden/mtp"), name);
    snprintf(path, sizeof path, "%s/expected.json", dir);
    json_error_t err;
    json_t *j = json_load_file(path, 0, &err);
    if (!j) {
        fprintf(stderr, "\n    %s: %s\n", path, err.text);
        return -1;
    }
    snprintf(g->model_dir, sizeof g->model_dir, "%s",
             numla_test_source_path(json_string_value(json_object_get(j, "model"))));
    json_t *ps = json_object_get(j, "prompts"), *ct = json_object_get(j, "chain_tokens");
    for (size_t p = 0; p < json_array_size(ps) && p < MTP_PROMPTS; p++) {
        json_t *pr = json_array_get(ps, p);
        g->len[p] = (int)json_array_size(pr);
        for (int i = 0; i < g->len[p] && i < MTP_MAX_LEN; i++)
            g->tok[p][i] = (int32_t)json_integer_value(json_array_get(pr, (size_t)i));
        g->chain_tok[p] = (int32_t)json_integer_value(json_array_get(ct, p));
        g->n++;
    }
    json_decref(j);
    snprintf(path, sizeof path, "%s/expected.safetensors", dir);
    char tag[64];
    snprintf(tag, sizeof tag, "mtp_%s", name);
    return g->n == MTP_PROMPTS && open_file_as_model(path, tag, &g->expected) == 0 ? 0 : -1;
}

/* What one rank computes: the MTP logits of every prompt's rows 0..n-2 then its chained row,
 * in this rank's vocabulary slice: out[p] (n_p, vocab_count). */
typedef struct mtp_job {
    const mtp_golden *g;
    float *out[MTP_PROMPTS];
} mtp_job;

/* One MTP step: sequence p gets rows at positions pos0[p] .. pos0[p]+cnt[p]-1 whose tokens are
 * the prompt's tokens at position + 1 (or tok_override[p] where not negative), hidden rows
 * hid[p][j]; the logits of every row into out (rows, vocab_count). */
static int mtp_run_step(eng *e, numla_kv_seq *seqs, const mtp_golden *g, const int *pos0,
                        const int *cnt, const int32_t *tok_override,
                        const int32_t (*hid)[MTP_MAX_LEN], float *out)
{
    int32_t tokens[2 * MTP_MAX_LEN], pos[2 * MTP_MAX_LEN], rows[2 * MTP_MAX_LEN], hrow[2 * MTP_MAX_LEN];
    int64_t slots[2 * MTP_MAX_LEN];
    int32_t qsl[MTP_PROMPTS + 1], lens[MTP_PROMPTS];
    int maxb = 0, t = 0;
    for (int p = 0; p < g->n; p++)
        maxb = seqs[p].num_blocks > maxb ? seqs[p].num_blocks : maxb;
    int32_t *bt = calloc((size_t)(g->n * maxb), sizeof *bt);
    qsl[0] = 0;
    for (int p = 0; p < g->n; p++) {
        for (int j = 0; j < cnt[p]; j++, t++) {
            const int i = pos0[p] + j;
            tokens[t] = tok_override[p] >= 0 ? tok_override[p] : g->tok[p][i + 1];
            pos[t] = i;
            slots[t] = numla_kv_seq_slot(e->kv, &seqs[p], i);
            rows[t] = t;
            hrow[t] = hid[p][j];
        }
        qsl[p + 1] = t;
        lens[p] = pos0[p] + cnt[p];
        memcpy(bt + (size_t)p * maxb, seqs[p].block_table, sizeof(int32_t) * seqs[p].num_blocks);
    }
    numla_step st = {.num_seqs = g->n, .num_tokens = t, .tokens = tokens, .positions = pos,
                     .slots = slots, .query_start_loc = qsl, .seq_lens = lens,
                     .block_tables = bt, .max_blocks_per_seq = maxb, .num_logit_rows = t,
                     .logit_rows = rows};
    numla_status s = numla_model_mtp_forward(e->m, e->kv, &st, hrow, out);
    if (s)
        fprintf(stderr, "\n    MTP forward failed: %s\n%s", numla_error_message(), numla_error_trace());
    free(bt);
    return s ? -1 : 0;
}

/* The whole sequence of steps on one rank (file comment). */
static int mtp_job_run(eng *e, mtp_job *job)
{
    const mtp_golden *g = job->g;
    const int64_t Vr = e->w->shard.vocab_count;
    numla_kv_seq seqs[MTP_PROMPTS] = {{0}};
    const int32_t *tk[MTP_PROMPTS];
    int n[MTP_PROMPTS], start[MTP_PROMPTS], total = 0;
    for (int p = 0; p < g->n; p++) {
        tk[p] = g->tok[p];
        n[p] = g->len[p];
        start[p] = total; /* main-step row of the prompt's position 0 */
        total += n[p];
    }
    float *main_lg = malloc(sizeof(float) * (size_t)total * (size_t)Vr);
    float *lg = malloc(sizeof(float) * 2 * MTP_MAX_LEN * (size_t)Vr);
    int ok = eng_step(e, g->n, seqs, tk, n, main_lg) == 0;
    /* MTP step A: positions 0..k-1; step B: k..n-2 (hidden rows from the main step) */
    int pos0[MTP_PROMPTS], cnt[MTP_PROMPTS], none[MTP_PROMPTS] = {-1, -1};
    int32_t hid[MTP_PROMPTS][MTP_MAX_LEN];
    for (int half = 0; half < 2 && ok; half++) {
        for (int p = 0; p < g->n; p++) {
            const int k = (n[p] - 1) / 2;
            pos0[p] = half ? k : 0;
            cnt[p] = half ? n[p] - 1 - k : k;
            for (int j = 0; j < cnt[p]; j++)
                hid[p][j] = start[p] + pos0[p] + j;
        }
        /* a sequence may have no rows in step A: run each half over the prompts that have */
        ok = mtp_run_step(e, seqs, g, pos0, cnt, none, hid, lg) == 0;
        int t = 0;
        for (int p = 0; p < g->n && ok; p++)
            for (int j = 0; j < cnt[p]; j++, t++)
                memcpy(job->out[p] + (int64_t)(pos0[p] + j) * Vr, lg + (int64_t)t * Vr,
                       sizeof(float) * (size_t)Vr);
    }
    /* the chained row: position n-1, hidden = step B's block output of position n-2 */
    if (ok) {
        int row = 0;
        for (int p = 0; p < g->n; p++) {
            row += cnt[p];
            pos0[p] = n[p] - 1;
            hid[p][0] = -1 - (row - 1);
        }
        int one[MTP_PROMPTS] = {1, 1};
        ok = mtp_run_step(e, seqs, g, pos0, one, g->chain_tok, hid, lg) == 0;
        for (int p = 0; p < g->n && ok; p++)
            memcpy(job->out[p] + (int64_t)(n[p] - 1) * Vr, lg + (int64_t)p * Vr,
                   sizeof(float) * (size_t)Vr);
    }
    for (int p = 0; p < g->n; p++)
        numla_kv_seq_release(e->kv, &seqs[p]);
    free(main_lg);
    free(lg);
    return ok ? 0 : -1;
}

static void *mtp_rank_main(void *arg)
{
    rank_ctx *rc = arg;
    rc->ok = mtp_job_run(&rc->e, (mtp_job *)rc->job) == 0;
    return NULL;
}

static void check_mtp(const char *name)
{
    mtp_golden g;
    if (mtp_golden_load(&g, name)) {
        CU_FAIL("golden data");
        numla_safetensors_close(&g.expected);
        return;
    }
    int team = omp_get_max_threads();
    double worst = 0;
    eng_mtp = 1;
    for (int R = 1; R <= MTP_MAX_RANKS; R++) {
        if (R > 1)
            omp_set_num_threads(1);
        shm_reduce sh = {.nranks = R};
        pthread_barrier_init(&sh.bar, NULL, (unsigned)R);
        rank_ctx rc[MTP_MAX_RANKS];
        mtp_job jobs[MTP_MAX_RANKS];
        pthread_t th[MTP_MAX_RANKS];
        int opened = 1;
        for (int r = 0; r < R && opened; r++) {
            rc[r] = (rank_ctx){.sh = &sh, .rank = r, .job = &jobs[r]};
            opened = eng_open_rank(&rc[r].e, g.model_dir, NUMLA_DTYPE_F32, numla_isa_best(), r,
                                   R) == 0;
            if (!opened)
                break;
            numla_model_set_reduce(rc[r].e.m, shm_reduce_fn, &rc[r]);
            sh.cap = 2 * MTP_MAX_LEN * rc[r].e.cfg.hidden_size;
            sh.slot[r] = malloc(sizeof(float) * (size_t)sh.cap);
            jobs[r].g = &g;
            for (int p = 0; p < g.n; p++)
                jobs[r].out[p] = malloc(sizeof(float) * (size_t)g.len[p] *
                                        (size_t)rc[r].e.w->shard.vocab_count);
        }
        CU_ASSERT_TRUE_FATAL(opened);
        for (int r = 0; r < R; r++)
            pthread_create(&th[r], NULL, mtp_rank_main, &rc[r]);
        for (int r = 0; r < R; r++)
            pthread_join(th[r], NULL);
        for (int p = 0; p < g.n; p++) {
            char tn[64], cn[64];
            snprintf(tn, sizeof tn, "mtp_logits_%d", p);
            snprintf(cn, sizeof cn, "chain_logits_%d", p);
            int64_t rows = 0, V = 0, crows = 0, cV = 0;
            const float *ref = st_f32(g.expected, tn, &rows, &V);
            const float *cref = st_f32(g.expected, cn, &crows, &cV);
            CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
            CU_ASSERT_PTR_NOT_NULL_FATAL(cref);
            CU_ASSERT_EQUAL_FATAL(rows, g.len[p] - 1);
            double err = 0, cerr = 0;
            for (int r = 0; r < R; r++) {
                CU_ASSERT_TRUE(rc[r].ok);
                const numla_shard *s = &rc[r].e.w->shard;
                for (int64_t t = 0; t <= rows; t++)
                    for (int64_t v = 0; v < s->vocab_count; v++) {
                        const double got = jobs[r].out[p][t * s->vocab_count + v];
                        if (t < rows)
                            err = fmax(err, fabs(got - ref[t * V + s->vocab_begin + v]));
                        else
                            cerr = fmax(cerr, fabs(got - cref[s->vocab_begin + v]));
                    }
            }
            worst = fmax(worst, fmax(err, cerr));
            NUMLA_ASSERT_MSG(err <= LOGIT_TOL, "mtp %s %d rank(s) prompt %d: MTP logits max err %g",
                             name, R, p, err);
            NUMLA_ASSERT_MSG(cerr <= LOGIT_TOL, "mtp %s %d rank(s) prompt %d: chained draft "
                             "logits max err %g", name, R, p, cerr);
        }
        for (int r = 0; r < R; r++) {
            for (int p = 0; p < g.n; p++)
                free(jobs[r].out[p]);
            free(sh.slot[r]);
            eng_close(&rc[r].e);
        }
        pthread_barrier_destroy(&sh.bar);
        omp_set_num_threads(team);
    }
    eng_mtp = 0;
    fprintf(stderr, "\n    golden mtp %-4s 1-%d ranks (f32 kv): MTP logits max abs err %.3g", name,
            MTP_MAX_RANKS, worst);
    numla_safetensors_close(&g.expected);
}

static void test_mtp_kjv(void) { check_mtp("kjv"); }
static void test_mtp_v3(void) { check_mtp("v3"); }
static void test_mtp_v32(void) { check_mtp("v32"); }

/* The v3 model as a deepseek2 GGUF file with its nextn tensors (scripts/make_mtp_gguf_golden.py,
 * F32, the same values): the same reference at 1-3 ranks, and on one rank the same logits as the
 * safetensors directory's within 1e-5. */
static void test_mtp_v3_gguf(void)
{
    check_mtp("v3_gguf");
    mtp_golden g[2];
    const char *const names[2] = {"v3", "v3_gguf"};
    float *out[2][MTP_PROMPTS] = {{0}};
    int64_t V = 0;
    eng_mtp = 1;
    for (int m = 0; m < 2; m++) {
        eng e;
        mtp_job job = {.g = &g[m]};
        CU_ASSERT_EQUAL_FATAL(mtp_golden_load(&g[m], names[m]), 0);
        CU_ASSERT_EQUAL_FATAL(eng_open(&e, g[m].model_dir, NUMLA_DTYPE_F32, numla_isa_best()), 0);
        V = e.w->shard.vocab_count;
        for (int p = 0; p < g[m].n; p++)
            out[m][p] = job.out[p] = malloc(sizeof(float) * (size_t)g[m].len[p] * (size_t)V);
        CU_ASSERT_EQUAL(mtp_job_run(&e, &job), 0);
        eng_close(&e);
        numla_safetensors_close(&g[m].expected);
    }
    eng_mtp = 0;
    double err = 0;
    for (int p = 0; p < MTP_PROMPTS; p++) {
        CU_ASSERT_EQUAL_FATAL(g[0].len[p], g[1].len[p]);
        for (int64_t i = 0; i < (int64_t)g[0].len[p] * V; i++)
            err = fmax(err, fabs((double)out[0][p][i] - out[1][p][i]));
        free(out[0][p]);
        free(out[1][p]);
    }
    NUMLA_ASSERT_MSG(err <= 1e-5, "MTP logits: GGUF against safetensors max err %g", err);
    fprintf(stderr, "\n    golden mtp v3 GGUF against safetensors: max abs diff %.3g", err);
}

NUMLA_TEST_SUITE(mtp_golden, NULL, NULL, NUMLA_TEST(test_mtp_kjv), NUMLA_TEST(test_mtp_v3),
                 NUMLA_TEST(test_mtp_v32), NUMLA_TEST(test_mtp_v3_gguf));
