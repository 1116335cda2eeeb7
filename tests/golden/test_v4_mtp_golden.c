/* Golden tests (label golden) of DeepSeek-V4's multi-token-prediction layer
 * (numla_v4_mtp_forward, engine/model/model_v4.c; docs/design.md §5.9) against
 * scripts/make_v4_mtp_golden.py's reference, written from DeepSeek's published MTPBlock with the
 * block run by transformers 5.25, on tests/golden/v4/mtp_fp32 (the tiny V4 model of
 * tests/golden/v4/model_fp32 plus an `mtp.0.*` layer: sliding-window attention, routed MoE, its
 * own hyper-head and norm):
 *   - prompts of 140 and 9 tokens prefilled as one step; their MTP rows (positions 0..n-2, the
 *     main streams of the same row, the next prompt token) in two MTP steps of both sequences,
 *     the second reading the MTP layer's cache of the first (the 140-token prompt's past its
 *     128-row window); then one chained row per prompt (position n-1 from the block output of
 *     n-2): every logit within LOGIT_TOL;
 *   - the same at 1 rank at the reference ISA, and at 2 and 3 in-process ranks (heads by
 *     o_groups, experts, vocabulary sharded), each rank's vocabulary slice gathered;
 *   - the published FP8 + FP4 form (tests/golden/v4/mtp_fp8) at 1 and 2 ranks;
 *   - refusals: a checkpoint without the layer, a model loaded without it, a hidden row of
 *     another position, a chained row past the last MTP step's;
 *   - the prefix cache with drafts (test_prefix_spec) at 2 in-process ranks: a sampled first
 *     turn and its second turn through the scheduler with speculative decoding, every
 *     rank's numla_v4_seqs keeping prefix states that carry the MTP layer's cache: the second
 *     turn starts from 256 cached tokens and gives the tokens, logprobs and draft counts of the
 *     same turn run without the prefix cache. */
#include "v4_golden_harness.h"

#include "engine/formats/gguf.h"
#include "engine/formats/gguf_deepseek4.h"
#include "engine/serving/scheduler.h"
#include "kernels/qblock.h"

#define MTP_PROMPTS 2

typedef struct mtp_gold {
    golden g;
    int32_t chain[MTP_PROMPTS];
    const float *mtp[MTP_PROMPTS];   /* (n_p - 1, V) */
    const float *chained[MTP_PROMPTS]; /* (1, V) */
} mtp_gold;

static int mtp_gold_load(mtp_gold *d, const char *sub)
{
    memset(d, 0, sizeof *d);
    if (golden_load_file(&d->g, "v4", sub, "expected.safetensors"))
        return -1;
    char path[1200];
    snprintf(path, sizeof path, "%s/expected.json", d->g.dir);
    json_t *j = json_load_file(path, 0, NULL);
    json_t *ct = j ? json_object_get(j, "chain_tokens") : NULL;
    int bad = !ct || json_array_size(ct) != MTP_PROMPTS || d->g.nprompts != MTP_PROMPTS;
    for (int p = 0; !bad && p < MTP_PROMPTS; p++) {
        d->chain[p] = (int32_t)json_integer_value(json_array_get(ct, (size_t)p));
        char name[64];
        int64_t rows = 0;
        snprintf(name, sizeof name, "mtp_logits_%d", p);
        d->mtp[p] = st_f32(d->g.expected, name, &rows, NULL);
        bad |= !d->mtp[p] || rows != d->g.len[p] - 1;
        snprintf(name, sizeof name, "chain_logits_%d", p);
        d->chained[p] = st_f32(d->g.expected, name, &rows, NULL);
        bad |= !d->chained[p] || rows != 1;
    }
    json_decref(j);
    return bad ? -1 : 0;
}

/* One rank's run of the case above: writes its vocabulary slice of every MTP row into out[p]
 * ((n_p - 1) + 1 rows of V: the rows at positions 0..n_p-2, then the chained row). */
typedef struct mtp_rank {
    const numla_v4_model *m;
    const mtp_gold *d;
    float *out[MTP_PROMPTS];
    int ok;
} mtp_rank;

static void *mtp_rank_main(void *arg)
{
    mtp_rank *r = arg;
    const mtp_gold *d = r->d;
    const numla_shard *sh = numla_v4_model_shard(r->m);
    const int64_t V = numla_v4_model_config(r->m)->vocab_size, vc = sh->vocab_count;
    numla_v4_seq *s[MTP_PROMPTS] = {0};
    const int32_t *toks[MTP_PROMPTS];
    int64_t ns[MTP_PROMPTS];
    int ok = 1;
    for (int p = 0; p < MTP_PROMPTS; p++) {
        ok &= numla_v4_seq_create(r->m, &s[p]) == NUMLA_STATUS_OK;
        toks[p] = d->g.tokens[p];
        ns[p] = d->g.len[p];
    }
    ok = ok && numla_v4_forward_rows(r->m, MTP_PROMPTS, s, toks, ns, 0, NULL, NULL) == NUMLA_STATUS_OK;
    if (!ok)
        fprintf(stderr, "\n    prefill: %s", numla_error_message());
    /* two MTP steps over positions [0, h) and [h, n - 1), then the chained row */
    int32_t *src[MTP_PROMPTS] = {0};
    float *buf = malloc(sizeof(float) * 160 * (size_t)vc);
    for (int p = 0; p < MTP_PROMPTS; p++) {
        src[p] = malloc(sizeof(int32_t) * (size_t)d->g.len[p]);
        for (int i = 0; i < d->g.len[p]; i++)
            src[p][i] = i;
    }
    for (int step = 0; ok && step < 3; step++) {
        const int32_t *mt[MTP_PROMPTS], *ms[MTP_PROMPTS];
        int64_t mn[MTP_PROMPTS], at[MTP_PROMPTS];
        int32_t chain_src[MTP_PROMPTS];
        for (int p = 0; p < MTP_PROMPTS; p++) {
            const int n = d->g.len[p], h = (n - 1) / 2;
            if (step < 2) {
                at[p] = step ? h : 0;
                mn[p] = step ? n - 1 - h : h;
                mt[p] = d->g.tokens[p] + at[p] + 1;
                ms[p] = src[p] + at[p];
            } else { /* the block output of position n - 2: the last row of step 1 */
                at[p] = n - 1;
                mn[p] = 1;
                mt[p] = &d->chain[p];
                chain_src[p] = (int32_t)(-1 - (n - 2 - h));
                ms[p] = &chain_src[p];
            }
        }
        numla_status st = numla_v4_mtp_forward(r->m, MTP_PROMPTS, s, mt, ms, mn, -1, NULL, buf);
        if (st) {
            fprintf(stderr, "\n    MTP step %d: %s", step, numla_error_message());
            ok = 0;
            break;
        }
        for (int p = 0, row = 0; p < MTP_PROMPTS; p++)
            for (int64_t i = 0; i < mn[p]; i++, row++)
                memcpy(r->out[p] + (size_t)(at[p] + i) * V + sh->vocab_begin, buf + (size_t)row * vc,
                       sizeof(float) * (size_t)vc);
    }
    for (int p = 0; ok && p < MTP_PROMPTS; p++)
        ok = numla_v4_seq_mtp_len(s[p]) == d->g.len[p] && numla_v4_seq_len(s[p]) == d->g.len[p];
    for (int p = 0; p < MTP_PROMPTS; p++) {
        free(src[p]);
        numla_v4_seq_destroy(&s[p]);
    }
    free(buf);
    r->ok = ok;
    return NULL;
}

/* The case on the model of cfg and st (what names it), held to sub's reference within tol;
 * keep (when not NULL) takes every prompt's logits ((n_p) x V each: the MTP rows, then the
 * chained one). */
static void check_mtp_st(const char *sub, const char *what, numla_model_config *cfg,
                         numla_safetensors_model *st, numla_isa isa, int R, double tol,
                         float **keep)
{
    mtp_gold d;
    if (mtp_gold_load(&d, sub)) {
        CU_FAIL("golden data");
        golden_free(&d.g);
        return;
    }
    CU_ASSERT_EQUAL_FATAL(numla_v4_config_enable_mtp(cfg), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(cfg->v4.attn[cfg->num_hidden_layers], NUMLA_V4_ATTN_SLIDING);
    const int64_t V = cfg->vocab_size;
    v4_team t;
    if (v4_team_load(&t, cfg, st, isa, R)) {
        golden_free(&d.g);
        return;
    }
    float *all[MTP_PROMPTS];
    for (int p = 0; p < MTP_PROMPTS; p++)
        all[p] = calloc((size_t)d.g.len[p] * (size_t)V, sizeof(float));
    mtp_rank rk[V4_MAX_RANKS];
    for (int r = 0; r < R; r++)
        rk[r] = (mtp_rank){.m = t.m[r], .d = &d, .out = {all[0], all[1]}};
    v4_team_run(&t, mtp_rank_main, rk, sizeof rk[0]);
    for (int r = 0; r < R; r++)
        CU_ASSERT_TRUE(rk[r].ok);
    v4_team_free(&t);
    double worst = 0, worst_chain = 0;
    for (int p = 0; p < MTP_PROMPTS; p++) {
        const size_t n = (size_t)d.g.len[p];
        worst = fmax(worst, maxabs_diff(all[p], d.mtp[p], (n - 1) * (size_t)V, NULL));
        worst_chain = fmax(worst_chain, maxabs_diff(all[p] + (n - 1) * (size_t)V, d.chained[p],
                                                    (size_t)V, NULL));
    }
    NUMLA_ASSERT_MSG(worst <= tol && worst_chain <= tol,
                     "v4 MTP %s %d ranks (%s): max err %g, chained %g", what, R,
                     numla_isa_name(isa), worst, worst_chain);
    fprintf(stderr, "\n    golden v4 MTP %s %d rank%s (%s): logits max abs err %.3g, chained %.3g",
            what, R, R > 1 ? "s" : "", numla_isa_name(isa), worst, worst_chain);
    for (int p = 0; p < MTP_PROMPTS; p++) {
        if (keep)
            keep[p] = all[p];
        else
            free(all[p]);
    }
    golden_free(&d.g);
}

/* The GGUF model gguf and its MTP layer's file mtp_gguf (under tests/golden/v4): *cfg, the view
 * in *st, the files in g[2]. */
static void open_gguf_pair(const char *gguf, const char *mtp_gguf, numla_model_config *cfg,
                           numla_gguf **g, numla_safetensors_model **st)
{
    char path[1200], mpath[1200];
    snprintf(path, sizeof path, "%s/%s", numla_test_source_path("tests/golden/v4"), gguf);
    snprintf(mpath, sizeof mpath, "%s/%s", numla_test_source_path("tests/golden/v4"), mtp_gguf);
    CU_ASSERT_EQUAL_FATAL(numla_model_config_load_gguf_mtp(path, mpath, cfg), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_gguf_open(path, &g[0]), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_gguf_open(mpath, &g[1]), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_gguf_deepseek4_view_mtp(g[0], g[1], st), NUMLA_STATUS_OK);
}

/* The case on sub's checkpoint, or (gguf, mtp_gguf given) on the GGUF pair. */
static void check_mtp_from(const char *sub, const char *gguf, const char *mtp_gguf,
                           numla_isa isa, int R, double tol, float **keep)
{
    numla_model_config cfg;
    numla_safetensors_model *st = NULL;
    numla_gguf *g[2] = {0};
    char what[160];
    snprintf(what, sizeof what, "%s", sub);
    if (gguf) {
        snprintf(what, sizeof what, "%s + %s", gguf, mtp_gguf);
        open_gguf_pair(gguf, mtp_gguf, &cfg, g, &st);
    } else {
        char dir[1200];
        snprintf(dir, sizeof dir, "%s/%s", numla_test_source_path("tests/golden/v4"), sub);
        CU_ASSERT_EQUAL_FATAL(numla_model_config_load(dir, &cfg), NUMLA_STATUS_OK);
        CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(dir, &st), NUMLA_STATUS_OK);
    }
    check_mtp_st(sub, what, &cfg, st, isa, R, tol, keep);
    numla_safetensors_close(&st);
    numla_gguf_close(&g[1]);
    numla_gguf_close(&g[0]);
}

static void check_mtp(const char *sub, numla_isa isa, int R)
{
    check_mtp_from(sub, NULL, NULL, isa, R, LOGIT_TOL, NULL);
}

static void test_mtp_fp32(void) { check_mtp("mtp_fp32", numla_isa_best(), 1); }
static void test_mtp_ref(void) { check_mtp("mtp_fp32", NUMLA_ISA_REF, 1); }
static void test_mtp_ranks(void)
{
    check_mtp("mtp_fp32", numla_isa_best(), 2);
    check_mtp("mtp_fp32", numla_isa_best(), 3);
}
/* the published FP8 + FP4 form (v4/model_fp8's main model, the MTP layer's e_proj, h_proj and
 * projections FP8, its experts FP4): 1 and 2 ranks */
static void test_mtp_fp8(void)
{
    check_mtp("mtp_fp8", numla_isa_best(), 1);
    check_mtp("mtp_fp8", numla_isa_best(), 2);
}

/* llama.cpp's GGUF form (scripts/make_v4_gguf_golden.py): its converter writes the MTP layer as
 * a file of its own (convert_hf_to_gguf.py --mtp); model_fp8.gguf is mtp_fp8's main model (the
 * same tensors as model_fp8) and mtp_fp8_mtp.gguf its layer with the checkpoint's values (FP8 as
 * bf16, e_proj and h_proj side by side in nextn.eh_proj, kept bf16): mtp_fp8's reference at 1
 * and 2 ranks, and on one rank the safetensors directory's own logits within LOGIT_TOL / 2 (bf16
 * linears here, FP8 there). mtp_fp8_mtp_q8.gguf is the converter's default, eh_proj in Q8_0 (a
 * second rounding: the logits move by up to about 0.6, so the reference does not hold): the
 * logits of its Q8_0 halves (each a column slice of whole blocks) against those of the same
 * values dequantized to fp32 within LOGIT_TOL / 2. */
static void test_mtp_gguf(void)
{
    float *st[MTP_PROMPTS] = {0}, *gg[MTP_PROMPTS] = {0}, *q8[MTP_PROMPTS] = {0};
    check_mtp_from("mtp_fp8", NULL, NULL, numla_isa_best(), 1, LOGIT_TOL, st);
    check_mtp_from("mtp_fp8", "model_fp8.gguf", "mtp_fp8_mtp.gguf", numla_isa_best(), 1,
                   LOGIT_TOL, gg);
    check_mtp_from("mtp_fp8", "model_fp8.gguf", "mtp_fp8_mtp.gguf", numla_isa_best(), 2,
                   LOGIT_TOL, NULL);
    /* the Q8_0 file, and the same with its eh_proj dequantized to fp32 beside the other tensors
     * (numla_qblock_dequant_ref, the block reference the GGUF goldens hold to the gguf
     * package's): the split of the Q8_0 tensor's columns against the plain fp32 halves */
    float *deq[MTP_PROMPTS] = {0};
    {
        numla_model_config cfg;
        numla_safetensors_model *view = NULL, *plain = NULL;
        numla_gguf *g[2] = {0};
        open_gguf_pair("model_fp8.gguf", "mtp_fp8_mtp_q8.gguf", &cfg, g, &view);
        const int64_t n = numla_safetensors_count(view);
        numla_safetensors_tensor *e = calloc((size_t)n, sizeof *e);
        float *eh = NULL;
        for (int64_t i = 0; i < n; i++) {
            e[i] = *numla_safetensors_at(view, i);
            if (strcmp(e[i].name, "mtp.0.eh_proj.weight"))
                continue;
            numla_qblock_type qt;
            CU_ASSERT_EQUAL_FATAL(e[i].ggml_type, NUMLA_GGML_Q8_0);
            CU_ASSERT_EQUAL_FATAL(numla_qblock_from_ggml(e[i].ggml_type, &qt), NUMLA_STATUS_OK);
            const int64_t rows = e[i].shape[0], cols = e[i].shape[1];
            const size_t rb = e[i].nbytes / (size_t)rows;
            eh = malloc(sizeof(float) * (size_t)(rows * cols));
            for (int64_t r = 0; r < rows; r++)
                CU_ASSERT_EQUAL(numla_qblock_dequant_ref(qt, (const char *)e[i].data + r * rb, cols,
                                                         eh + r * cols), NUMLA_STATUS_OK);
            e[i].dtype = NUMLA_DTYPE_F32;
            e[i].ggml_type = 0;
            e[i].data = eh;
            e[i].nbytes = sizeof(float) * (size_t)(rows * cols);
        }
        CU_ASSERT_PTR_NOT_NULL_FATAL(eh);
        CU_ASSERT_EQUAL_FATAL(numla_safetensors_view_create(e, n, "eh_proj as fp32", &plain),
                              NUMLA_STATUS_OK);
        numla_model_config cfg2 = cfg;
        check_mtp_st("mtp_fp8", "model_fp8.gguf + mtp_fp8_mtp_q8.gguf", &cfg, view,
                     numla_isa_best(), 1, 1e9, q8);
        check_mtp_st("mtp_fp8", "the same, eh_proj as fp32", &cfg2, plain, numla_isa_best(), 1,
                     1e9, deq);
        numla_safetensors_close(&plain);
        numla_safetensors_close(&view);
        free(e);
        free(eh);
        numla_gguf_close(&g[1]);
        numla_gguf_close(&g[0]);
    }
    mtp_gold d;
    CU_ASSERT_EQUAL_FATAL(mtp_gold_load(&d, "mtp_fp8"), 0);
    numla_model_config cfg;
    CU_ASSERT_EQUAL_FATAL(numla_model_config_load(d.g.dir, &cfg), NUMLA_STATUS_OK);
    const int64_t V = cfg.vocab_size;
    double same = 0, q8err = 0;
    for (int p = 0; p < MTP_PROMPTS; p++) {
        const size_t n = (size_t)d.g.len[p] * (size_t)V;
        if (st[p] && gg[p])
            same = fmax(same, maxabs_diff(gg[p], st[p], n, NULL));
        if (q8[p] && deq[p])
            q8err = fmax(q8err, maxabs_diff(q8[p], deq[p], n, NULL));
        NUMLA_ASSERT_MSG(st[p] && gg[p] && q8[p] && deq[p], "prompt %d: a run failed", p);
        free(st[p]);
        free(gg[p]);
        free(q8[p]);
        free(deq[p]);
    }
    golden_free(&d.g);
    NUMLA_ASSERT_MSG(same <= LOGIT_TOL / 2, "v4 MTP: GGUF against safetensors max err %g", same);
    NUMLA_ASSERT_MSG(q8err <= LOGIT_TOL / 2, "v4 MTP: Q8_0 eh_proj against its fp32 values max "
                     "err %g", q8err);
    fprintf(stderr, "\n    golden v4 MTP GGUF against safetensors: max abs diff %.3g; Q8_0 "
            "eh_proj against its fp32 values: %.3g", same, q8err);
}

static void test_mtp_refusals(void)
{
    /* the main model's directory ships no MTP layer */
    numla_model_config cfg;
    char dir[1200];
    snprintf(dir, sizeof dir, "%s", numla_test_source_path("tests/golden/v4/model_fp32"));
    CU_ASSERT_EQUAL_FATAL(numla_model_config_load(dir, &cfg), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_v4_config_enable_mtp(&cfg), NUMLA_STATUS_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "num_nextn_predict_layers"));
    /* a model loaded without its layer; then bad rows on one with it */
    snprintf(dir, sizeof dir, "%s", numla_test_source_path("tests/golden/v4/mtp_fp32"));
    CU_ASSERT_EQUAL_FATAL(numla_model_config_load(dir, &cfg), NUMLA_STATUS_OK);
    numla_safetensors_model *st = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(dir, &st), NUMLA_STATUS_OK);
    for (int with = 0; with < 2; with++) {
        if (with)
            CU_ASSERT_EQUAL_FATAL(numla_v4_config_enable_mtp(&cfg), NUMLA_STATUS_OK);
        numla_v4_model *m = NULL;
        CU_ASSERT_EQUAL_FATAL(numla_v4_model_load(&cfg, st, numla_isa_best(), &m), NUMLA_STATUS_OK);
        numla_v4_seq *s = NULL;
        CU_ASSERT_EQUAL_FATAL(numla_v4_seq_create(m, &s), NUMLA_STATUS_OK);
        const int32_t tk[4] = {5, 6, 7, 8};
        CU_ASSERT_EQUAL_FATAL(numla_v4_forward_rows(m, 1, &s, (const int32_t *[]){tk},
                                                    (int64_t[]){4}, 0, NULL, NULL),
                              NUMLA_STATUS_OK);
        float logits[2 * 96];
        const int32_t *toks[1] = {tk + 1};
        if (!with) {
            const int32_t src0[1] = {0};
            CU_ASSERT_EQUAL(numla_v4_mtp_forward(m, 1, &s, toks, (const int32_t *[]){src0},
                                                 (int64_t[]){1}, -1, NULL, logits),
                            NUMLA_STATUS_INVALID_ARG);
            CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "without its MTP layer"));
        } else {
            const int32_t wrong[1] = {1}, far[1] = {-1}, ok2[2] = {0, 1};
            CU_ASSERT_EQUAL(numla_v4_mtp_forward(m, 1, &s, toks, (const int32_t *[]){wrong},
                                                 (int64_t[]){1}, -1, NULL, logits),
                            NUMLA_STATUS_INVALID_ARG);
            CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "another position"));
            CU_ASSERT_EQUAL(numla_v4_mtp_forward(m, 1, &s, toks, (const int32_t *[]){far},
                                                 (int64_t[]){1}, -1, NULL, logits),
                            NUMLA_STATUS_INVALID_ARG);
            CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "chained row"));
            CU_ASSERT_EQUAL(numla_v4_seq_mtp_len(s), 0);
            CU_ASSERT_EQUAL(numla_v4_mtp_forward(m, 1, &s, toks, (const int32_t *[]){ok2},
                                                 (int64_t[]){2}, -1, NULL, logits),
                            NUMLA_STATUS_OK);
            CU_ASSERT_EQUAL(numla_v4_seq_mtp_len(s), 2);
        }
        numla_v4_seq_destroy(&s);
        numla_v4_model_destroy(&m);
    }
    numla_safetensors_close(&st);
}

/* Rolling back rejected drafts: the 250-token prompt of tests/golden/v4/model_fp32 decoded 16
 * tokens (past the HCA entry at 256 and several CSA windows) one per step (A), and as verify
 * steps of 4 rows whose first a rows are the true tokens and the rest junk, truncated back to
 * a + 1 rows each time (B): every true row's logits of B within 1e-3 of A's. Then the MTP
 * layer's cache: two chained rows undone before the final rows that follow give the logits of a
 * run without them. */
static void test_truncate(void)
{
    golden g;
    numla_model_config cfg;
    numla_v4_model *m = NULL;
    if (v4_golden_open(&g, "model_fp32", &cfg, &m))
        return;
    const int64_t V = cfg.vocab_size;
    const int p = 3, n = g.len[p];
    CU_ASSERT_EQUAL_FATAL(n, 250);
    numla_v4_seq *a = NULL, *b = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_v4_seq_create(m, &a), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_v4_seq_create(m, &b), NUMLA_STATUS_OK);
    float *la = malloc(sizeof(float) * (size_t)(N_GREEDY + 1) * (size_t)V);
    float *lb = malloc(sizeof(float) * 4 * (size_t)V);
    float *pre = malloc(sizeof(float) * (size_t)n * (size_t)V);
    CU_ASSERT_EQUAL_FATAL(numla_v4_forward(m, a, g.tokens[p], n, pre), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_v4_forward(m, b, g.tokens[p], n, pre), NUMLA_STATUS_OK);
    for (int i = 0; i < N_GREEDY; i++)
        CU_ASSERT_EQUAL_FATAL(numla_v4_forward(m, a, &g.greedy[p][i], 1, la + (size_t)i * V),
                              NUMLA_STATUS_OK);
    double worst = 0;
    int rounds = 0;
    for (int i = 0, acc = 0; i < N_GREEDY; acc = (acc + 1) % 4, rounds++) {
        int32_t rows[4];
        for (int r = 0; r < 4; r++)
            rows[r] = r <= acc && i + r < N_GREEDY ? g.greedy[p][i + r]
                                                   : (g.greedy[p][i] + 11 + 5 * r) % (int32_t)V;
        const int64_t len0 = numla_v4_seq_len(b);
        CU_ASSERT_EQUAL_FATAL(numla_v4_seq_mark(b), NUMLA_STATUS_OK);
        CU_ASSERT_EQUAL_FATAL(numla_v4_forward(m, b, rows, 4, lb), NUMLA_STATUS_OK);
        int keep = acc + 1 < N_GREEDY - i ? acc + 1 : N_GREEDY - i;
        for (int r = 0; r < keep; r++)
            worst = fmax(worst, maxabs_diff(lb + (size_t)r * V, la + (size_t)(i + r) * V,
                                            (size_t)V, NULL));
        CU_ASSERT_EQUAL_FATAL(numla_v4_seq_truncate(b, len0 + keep), NUMLA_STATUS_OK);
        CU_ASSERT_EQUAL(numla_v4_seq_len(b), len0 + keep);
        i += keep;
    }
    NUMLA_ASSERT_MSG(worst <= 1e-3, "v4 verify + truncate: logits max err %g over %d rounds",
                     worst, rounds);
    fprintf(stderr, "\n    v4 verify + truncate: %d rounds, logits max abs err %.3g", rounds, worst);
    /* refusals: before the mark, past 16 rows */
    CU_ASSERT_EQUAL(numla_v4_seq_truncate(b, numla_v4_seq_len(b) - 30), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_v4_seq_mark(b), NUMLA_STATUS_OK);
    int32_t many[20];
    for (int r = 0; r < 20; r++)
        many[r] = 5 + r;
    float *l20 = malloc(sizeof(float) * 20 * (size_t)V);
    CU_ASSERT_EQUAL(numla_v4_forward(m, b, many, 20, l20), NUMLA_STATUS_OK);
    CU_ASSERT_FALSE(numla_v4_seq_can_truncate(b, numla_v4_seq_len(b) - 19));
    CU_ASSERT_EQUAL(numla_v4_seq_truncate(b, numla_v4_seq_len(b) - 19), NUMLA_STATUS_INVALID_ARG);
    free(l20);
    free(la);
    free(lb);
    free(pre);
    numla_v4_seq_destroy(&a);
    numla_v4_seq_destroy(&b);
    numla_v4_model_destroy(&m);
    golden_free(&g);

    /* the MTP layer's cache */
    mtp_gold d;
    if (mtp_gold_load(&d, "mtp_fp32")) {
        CU_FAIL("golden data");
        golden_free(&d.g);
        return;
    }
    if (v4_load(d.g.dir, numla_isa_best(), 1, &cfg, &m)) {
        golden_free(&d.g);
        return;
    }
    const int q = 0, nq = d.g.len[q], h = nq / 2;
    CU_ASSERT_EQUAL_FATAL(numla_v4_seq_create(m, &b), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_v4_forward_rows(m, 1, &b, (const int32_t *[]){d.g.tokens[q]},
                                                (int64_t[]){nq}, 0, NULL, NULL), NUMLA_STATUS_OK);
    int32_t *src = malloc(sizeof(int32_t) * (size_t)nq);
    for (int i = 0; i < nq; i++)
        src[i] = i;
    float *lm = malloc(sizeof(float) * (size_t)nq * (size_t)V);
    /* rows [0, h), mark, two chained rows, back to h, rows [h, nq - 1) */
    CU_ASSERT_EQUAL_FATAL(numla_v4_mtp_forward(m, 1, &b, (const int32_t *[]){d.g.tokens[q] + 1},
                                               (const int32_t *[]){src}, (int64_t[]){h}, -1, NULL,
                                               lm), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_v4_seq_mtp_mark(b), NUMLA_STATUS_OK);
    for (int c = 0; c < 2; c++) {
        const int32_t tk[1] = {7 + c}, ch[1] = {c ? -1 : -h};
        CU_ASSERT_EQUAL_FATAL(numla_v4_mtp_forward(m, 1, &b, (const int32_t *[]){tk},
                                                   (const int32_t *[]){ch}, (int64_t[]){1}, -1,
                                                   NULL, lm + (size_t)h * V), NUMLA_STATUS_OK);
    }
    CU_ASSERT_EQUAL(numla_v4_seq_mtp_len(b), h + 2);
    CU_ASSERT_EQUAL_FATAL(numla_v4_seq_mtp_truncate(b, h), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_v4_mtp_forward(m, 1, &b, (const int32_t *[]){d.g.tokens[q] + h + 1},
                                               (const int32_t *[]){src + h}, (int64_t[]){nq - 1 - h},
                                               -1, NULL, lm + (size_t)h * V), NUMLA_STATUS_OK);
    const double werr = maxabs_diff(lm, d.mtp[q], (size_t)(nq - 1) * (size_t)V, NULL);
    NUMLA_ASSERT_MSG(werr <= LOGIT_TOL, "v4 MTP after undoing chained rows: max err %g", werr);
    free(src);
    free(lm);
    numla_v4_seq_destroy(&b);
    numla_v4_model_destroy(&m);
    golden_free(&d.g);
}

/* ---- the prefix cache with drafts (numla_v4_seqs_enable_prefix + numla_v4_step_mtp) on R
 * ranks in one process ---- */

typedef struct ps_rank {
    v4_rank_step k;            /* its sequences, the step, its logits slice, its status */
    const int32_t *hidden;     /* NULL: a main step */
} ps_rank;

enum { PS_REQS = 2, PS_MAX_OUT = 16 };

typedef struct ps_ctx {
    v4_team team;
    ps_rank rk[V4_MAX_RANKS];
    int64_t V;
    int done;
    char err[600];
    int32_t nout[PS_REQS], out[PS_REQS][PS_MAX_OUT], cached[PS_REQS], accepted[PS_REQS];
    float lp[PS_REQS][PS_MAX_OUT];
} ps_ctx;

static void *ps_rank_main(void *arg)
{
    ps_rank *r = arg;
    v4_rank_step *k = &r->k;
    k->s = r->hidden ? numla_v4_step_mtp(k->t, k->st, r->hidden, k->buf)
                     : numla_v4_step_forward(k->t, k->st, k->buf);
    return NULL;
}

static numla_status ps_run(ps_ctx *c, const numla_step *st, const int32_t *hidden, float *logits)
{
    for (int r = 0; r < c->team.R; r++)
        c->rk[r].hidden = hidden;
    return v4_team_step(&c->team, ps_rank_main, c->rk, sizeof c->rk[0], st, c->V, logits);
}

static numla_status ps_exec(void *ctx, const numla_step *st, float *logits)
{
    return ps_run(ctx, st, NULL, logits);
}

static numla_status ps_mtp_exec(void *ctx, const numla_step *st, const int32_t *hidden,
                                float *logits)
{
    return ps_run(ctx, st, hidden, logits);
}

static void ps_done(void *ctx, const numla_sched_output *o)
{
    ps_ctx *c = ctx;
    const int i = (int)(intptr_t)o->user;
    c->done++;
    c->nout[i] = o->num_output < PS_MAX_OUT ? o->num_output : PS_MAX_OUT;
    for (int32_t k = 0; k < c->nout[i]; k++) {
        c->out[i][k] = o->output_tokens[k];
        c->lp[i][k] = o->logprobs ? o->logprobs[k].logprob : NAN;
    }
    c->cached[i] = o->cached_tokens;
    c->accepted[i] = o->spec_accepted;
    if (o->error)
        snprintf(c->err, sizeof c->err, "request %d: %s", i, o->error);
}

/* One run on R ranks: with the prefix cache (first NULL), golden prompt 3 (250 tokens) sampled
 * at temperature 8 (where the random MTP layer's drafts are often accepted), 16 tokens with
 * mtp:2 drafts, one token a step, then its second turn, prompt 3 + the first 8 of those tokens,
 * submitted once the first turn is answered; without it (first: that run), the same second turn
 * alone. */
static void ps_once(const numla_model_config *cfg, numla_safetensors_model *st, const golden *g,
                    int R, const ps_ctx *first, ps_ctx *c)
{
    const int cache = !first;
    memset(c, 0, sizeof *c);
    if (v4_team_load(&c->team, cfg, st, numla_isa_best(), R))
        return;
    c->V = cfg->vocab_size;
    const int32_t bs = 16;
    /* each rank's CSA entries and index keys in its own pool (the MTP layer's stay its
     * cache's); rank 0's allocator is the scheduler's */
    numla_kv_cache *kvs[V4_MAX_RANKS] = {0};
    const numla_dtype dt = numla_v4_model_cache_dtype(c->team.m[0]);
    for (int r = 0; r < R; r++) {
        CU_ASSERT_EQUAL_FATAL(numla_v4_seqs_create(c->team.m[r], &c->rk[r].k.t),
                              NUMLA_STATUS_OK);
        CU_ASSERT_EQUAL_FATAL(numla_v4_seqs_enable_prefix(c->rk[r].k.t, bs), NUMLA_STATUS_OK);
        numla_v4_pool pool;
        CU_ASSERT_EQUAL_FATAL(numla_kv_cache_create_for_model(cfg, bs, 96, dt, dt, &kvs[r]),
                              NUMLA_STATUS_OK);
        CU_ASSERT_EQUAL_FATAL(numla_kv_cache_v4_pool(kvs[r], &pool), NUMLA_STATUS_OK);
        CU_ASSERT_EQUAL_FATAL(numla_v4_seqs_use_pool(c->rk[r].k.t, &pool), NUMLA_STATUS_OK);
    }
    numla_kv_cache *kv = kvs[0];
    numla_sched_options so = {.max_batch_tokens = 64, .max_seqs = 1, .prefill_chunk = 1,
                              .vocab_size = cfg->vocab_size, .prefix_salt = 7,
                              .no_prefix_cache = !cache,
                              .prefix_stride = numla_v4_prefix_stride(cfg, 1), .spec_k = 2,
                              .mtp_exec = ps_mtp_exec};
    numla_sched *s = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_sched_create(&so, kv, ps_exec, c, ps_done, c, &s), NUMLA_STATUS_OK);
    const int src[PS_REQS] = {3, 3}, extra[PS_REQS] = {0, 8};
    int32_t *toks[PS_REQS] = {0};
    numla_request rq[PS_REQS];
    for (int i = first ? 1 : 0; i < PS_REQS; i++) {
        if (i == 1 && !first) { /* the second turn, once the first is answered */
            for (int guard = 0; numla_sched_busy(s) && guard < 20000; guard++)
                NUMLA_ASSERT_MSG(numla_sched_step(s) == NUMLA_STATUS_OK, "%d ranks: %s", R,
                                 numla_error_message());
            if (c->done != 1 || c->nout[0] < extra[1])
                break;
        }
        const int p = src[i], n = g->len[p] + extra[i];
        toks[i] = malloc(sizeof(int32_t) * (size_t)n);
        memcpy(toks[i], g->tokens[p], sizeof(int32_t) * (size_t)g->len[p]);
        memcpy(toks[i] + g->len[p], (first ? first : c)->out[0],
               sizeof(int32_t) * (size_t)extra[i]);
        memset(&rq[i], 0, sizeof rq[i]);
        rq[i].line = i + 1;
        rq[i].num_prompt = n;
        rq[i].prompt_tokens = toks[i];
        numla_sampling_params_default(&rq[i].params);
        rq[i].params.temperature = 8;
        rq[i].params.seed = 5 + (uint64_t)i;
        rq[i].params.has_seed = 1;
        rq[i].params.logprobs = 0;
        rq[i].params.max_tokens = PS_MAX_OUT - extra[i];
        rq[i].params.ignore_eos = 1;
        CU_ASSERT_EQUAL(numla_sched_submit(s, &rq[i], (void *)(intptr_t)i), NUMLA_STATUS_OK);
    }
    for (int guard = 0; numla_sched_busy(s) && guard < 20000; guard++)
        NUMLA_ASSERT_MSG(numla_sched_step(s) == NUMLA_STATUS_OK, "%d ranks: %s", R,
                         numla_error_message());
    NUMLA_ASSERT_MSG(c->done == (first ? 1 : PS_REQS) && !c->err[0], "%d ranks, cache %s: %d "
                     "answered; %s", R, cache ? "on" : "off", c->done, c->err);
    if (cache) { /* every rank keeps the same states */
        const int32_t kept = numla_v4_seqs_prefix_count(c->rk[0].k.t);
        NUMLA_ASSERT_MSG(kept == 2, "%d ranks: %d prefix states kept, not 2 (128, 256)", R, kept);
        for (int r = 1; r < R; r++)
            CU_ASSERT_EQUAL(numla_v4_seqs_prefix_count(c->rk[r].k.t), kept);
        CU_ASSERT_EQUAL(numla_v4_seqs_prefix_bytes(c->rk[0].k.t),
                        (size_t)kept * numla_v4_prefix_bytes_for(c->team.m[0], 128, bs));
        CU_ASSERT_EQUAL(numla_v4_prefix_bytes_cfg(cfg, 128, bs, dt),
                        numla_v4_prefix_bytes_for(c->team.m[0], 128, bs));
    }
    numla_sched_destroy(&s);
    for (int r = 0; r < R; r++) {
        numla_v4_seqs_destroy(&c->rk[r].k.t);
        numla_kv_cache_destroy(&kvs[r]);
        free(c->rk[r].k.buf);
        c->rk[r].k.buf = NULL;
    }
    for (int i = 0; i < PS_REQS; i++)
        free(toks[i]);
    v4_team_free(&c->team);
}

static void check_prefix_spec(int R)
{
    golden g;
    if (v4_golden_load(&g, "model_fp32")) /* its prompts; the model is mtp_fp32's */
        return;
    char dir[1200];
    snprintf(dir, sizeof dir, "%s", numla_test_source_path("tests/golden/v4/mtp_fp32"));
    numla_model_config cfg;
    numla_safetensors_model *st = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_model_config_load(dir, &cfg), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_v4_config_enable_mtp(&cfg), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(dir, &st), NUMLA_STATUS_OK);
    ps_ctx *on = calloc(1, sizeof *on), *off = calloc(1, sizeof *off);
    CU_ASSERT_PTR_NOT_NULL_FATAL(on);
    CU_ASSERT_PTR_NOT_NULL_FATAL(off);
    ps_once(&cfg, st, &g, R, NULL, on);
    ps_once(&cfg, st, &g, R, on, off);
    const int32_t want_cached[PS_REQS] = {0, 256};
    for (int i = 0; i < PS_REQS; i++)
        NUMLA_ASSERT_MSG(on->cached[i] == want_cached[i], "%d ranks: request %d: %d tokens "
                         "cached, not %d", R, i, on->cached[i], want_cached[i]);
    for (int i = 1; i < PS_REQS; i++) {
        NUMLA_ASSERT_MSG(on->nout[i] == off->nout[i] && on->accepted[i] == off->accepted[i] &&
                             !memcmp(on->out[i], off->out[i], sizeof on->out[i]) &&
                             !memcmp(on->lp[i], off->lp[i], sizeof on->lp[i]),
                         "%d ranks: request %d: with the prefix cache %d tokens, %d drafts "
                         "accepted, without %d and %d, or other tokens or logprobs", R, i,
                         on->nout[i], on->accepted[i], off->nout[i], off->accepted[i]);
    }
    NUMLA_ASSERT_MSG(on->accepted[0] > 0, "%d ranks: no draft accepted in the first turn", R);
    fprintf(stderr, "\n    v4 prefix cache with drafts, %d rank%s: drafts accepted %d, %d", R,
            R > 1 ? "s" : "", on->accepted[0], on->accepted[1]);
    free(on);
    free(off);
    numla_safetensors_close(&st);
    golden_free(&g);
}

/* 2 ranks in one process (1 rank and 2 MPI ranks: tests/mpi/v4_speculative_test.sh) */
static void test_prefix_spec(void) { check_prefix_spec(2); }

NUMLA_TEST_SUITE(v4_mtp_golden, NULL, NULL, NUMLA_TEST(test_mtp_fp32), NUMLA_TEST(test_mtp_ref),
                 NUMLA_TEST(test_mtp_ranks), NUMLA_TEST(test_mtp_fp8), NUMLA_TEST(test_mtp_refusals),
                 NUMLA_TEST(test_truncate), NUMLA_TEST(test_mtp_gguf),
                 NUMLA_TEST(test_prefix_spec));
