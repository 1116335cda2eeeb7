/* Tests for engine/weights + engine/model against the independent double-precision expanded
 * reference of model_testlib.h, on tiny random models (V2 greedy / V2 group-limited + q_lora /
 * V3 noaux_tc): all-at-once prefill, prefill-then-decode, two sequences batched in one step with
 * shuffled block tables, and a bf16 cache. */
#include "model_testlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/config.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/weights.h"

typedef struct eng {
    numla_model_config cfg;
    numla_st_model *st;
    numla_model_weights *w;
    numla_model *m;
    numla_kv_cache *kv;
} eng;

static int eng_open(eng *e, const char *dir, numla_dtype kv_dtype, numla_isa isa)
{
    memset(e, 0, sizeof *e);
    if (numla_model_config_load(dir, &e->cfg) || numla_st_open(dir, &e->st) ||
        numla_weights_load(&e->cfg, e->st, 0, 1, isa, &e->w) ||
        numla_model_create(e->w, isa, 2, &e->m) ||
        numla_kv_cache_create((int32_t)e->cfg.num_hidden_layers, (int32_t)e->cfg.kv_lora_rank,
                              (int32_t)e->cfg.qk_rope_head_dim, 4, 64, kv_dtype, &e->kv)) {
        fprintf(stderr, "\n    engine open failed: %s\n%s", numla_error_message(), numla_error_trace());
        return -1;
    }
    /* Shuffle the free list so block tables are not in order (DESIGN.md §3). */
    numla_test_rng r = {99};
    for (int64_t i = e->kv->num_free - 1; i > 0; i--) {
        int64_t j = (int64_t)(numla_test_rng_u64(&r) % (uint64_t)(i + 1));
        int32_t t = e->kv->free_blocks[i];
        e->kv->free_blocks[i] = e->kv->free_blocks[j];
        e->kv->free_blocks[j] = t;
    }
    return 0;
}

static void eng_close(eng *e)
{
    numla_kv_cache_destroy(&e->kv);
    numla_model_destroy(&e->m);
    numla_weights_destroy(&e->w);
    numla_st_close(&e->st);
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

static double max_err(const float *a, const double *ref, size_t n, double *ref_max)
{
    double e = 0, rm = 0;
    for (size_t i = 0; i < n; i++) {
        e = fmax(e, fabs((double)a[i] - ref[i]));
        rm = fmax(rm, fabs(ref[i]));
    }
    if (ref_max)
        *ref_max = rm;
    return e;
}

static const int32_t PROMPT_A[11] = {5, 17, 99, 3, 42, 150, 7, 7, 88, 120, 64};
static const int32_t PROMPT_B[7] = {2, 140, 33, 61, 9, 77, 101};

static void check_variant(int variant, numla_dtype wdtype, numla_dtype kv_dtype, double tol)
{
    tl_model *tm = malloc(sizeof *tm);
    tl_build(tm, variant, 1234 + (uint64_t)variant);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/ref_v%d_%s", numla_test_tmpdir(), variant, numla_dtype_name(wdtype));
    CU_ASSERT_EQUAL_FATAL(tl_write(tm, dir, wdtype), 0);
    if (wdtype == NUMLA_DTYPE_BF16) /* the reference sees the rounded weights */
        for (int i = 0; i < tm->nt; i++) {
            int64_t n = tm->t[i].ndim == 1 ? tm->t[i].shape[0] : tm->t[i].shape[0] * tm->t[i].shape[1];
            for (int64_t j = 0; j < n; j++)
                tm->t[i].data[j] = numla_bf16_to_f32(numla_f32_to_bf16(tm->t[i].data[j]));
        }
    const int V = tm->vocab;
    double *refA = malloc(sizeof(double) * 11 * V), *refB = malloc(sizeof(double) * 7 * V);
    tl_forward(tm, PROMPT_A, 11, refA);
    tl_forward(tm, PROMPT_B, 7, refB);

    numla_isa isas[NUMLA_ISA_COUNT];
    int nisa = numla_test_isas(isas);
    for (int ii = 0; ii < nisa; ii++) {
        numla_isa isa = isas[ii];
        /* bf16 weights on avx512bf16 round activations for M >= 16 only; our steps are small. */
        eng e;
        if (eng_open(&e, dir, kv_dtype, isa)) {
            CU_FAIL("engine open");
            break;
        }
        float *out = malloc(sizeof(float) * 18 * V);
        double rm;
        /* 1. all-at-once prefill */
        numla_kv_seq sa = {0};
        const int32_t *toks[2] = {PROMPT_A, PROMPT_B};
        int n1[1] = {11};
        CU_ASSERT_EQUAL_FATAL(eng_step(&e, 1, &sa, toks, n1, out), 0);
        double err = max_err(out, refA, (size_t)11 * V, &rm);
        NUMLA_ASSERT_MSG(err < tol * fmax(1.0, rm), "variant %d %s kv %s isa %s: prefill max err %g (|ref| %g)",
                         variant, numla_dtype_name(wdtype), numla_dtype_name(kv_dtype),
                         numla_isa_name(isa), err, rm);
        numla_kv_seq_release(e.kv, &sa);

        /* 2. prefill 6 then decode one at a time, and B batched alongside (prefill 4 + 3) */
        numla_kv_seq s2[2] = {{0}, {0}};
        int n2[2] = {6, 4};
        CU_ASSERT_EQUAL_FATAL(eng_step(&e, 2, s2, toks, n2, out), 0);
        double e2 = max_err(out, refA, (size_t)6 * V, NULL);
        e2 = fmax(e2, max_err(out + 6 * V, refB, (size_t)4 * V, NULL));
        int nb = 3;
        const int32_t *tb[1] = {PROMPT_B + 4};
        for (int j = 6; j < 11; j++) {
            const int32_t *ta[2] = {PROMPT_A + j, PROMPT_B + 4};
            int nn[2] = {1, nb};
            int ns = j == 6 ? 2 : 1; /* first decode step also finishes B's prefill */
            CU_ASSERT_EQUAL_FATAL(eng_step(&e, ns, s2, ta, nn, out), 0);
            e2 = fmax(e2, max_err(out, refA + (size_t)j * V, (size_t)V, NULL));
            if (ns == 2)
                e2 = fmax(e2, max_err(out + V, refB + (size_t)4 * V, (size_t)3 * V, NULL));
        }
        (void)tb;
        NUMLA_ASSERT_MSG(e2 < tol * fmax(1.0, rm), "variant %d isa %s: chunked/decode/batched max err %g",
                         variant, numla_isa_name(isa), e2);
        if (getenv("NUMLA_TEST_VERBOSE"))
            fprintf(stderr, "\n    variant %d w %s kv %s isa %s: prefill err %.3g, chunked/decode err %.3g, |ref| %.3g",
                    variant, numla_dtype_name(wdtype), numla_dtype_name(kv_dtype), numla_isa_name(isa), err, e2, rm);
        numla_kv_seq_release(e.kv, &s2[0]);
        numla_kv_seq_release(e.kv, &s2[1]);
        CU_ASSERT_EQUAL(e.kv->num_free, e.kv->num_blocks);
        free(out);
        eng_close(&e);
    }
    free(refA);
    free(refB);
    tl_free(tm);
    free(tm);
}

static void test_v2_greedy_f32(void) { check_variant(0, NUMLA_DTYPE_F32, NUMLA_DTYPE_F32, 2e-4); }
static void test_v2_grouped_qlora_f32(void) { check_variant(1, NUMLA_DTYPE_F32, NUMLA_DTYPE_F32, 2e-4); }
static void test_v3_noaux_f32(void) { check_variant(2, NUMLA_DTYPE_F32, NUMLA_DTYPE_F32, 2e-4); }
static void test_v3_bf16_weights_bf16_cache(void) { check_variant(2, NUMLA_DTYPE_BF16, NUMLA_DTYPE_BF16, 3e-2); }

static void test_missing_tensors_listed(void)
{
    tl_model *tm = malloc(sizeof *tm);
    tl_build(tm, 0, 7);
    /* drop two tensors and mis-shape one */
    for (int i = 0; i < tm->nt; i++) {
        if (!strcmp(tm->t[i].name, "model.layers.1.mlp.experts.3.up_proj.weight"))
            strcpy(tm->t[i].name, "unused.a");
        if (!strcmp(tm->t[i].name, "model.norm.weight"))
            strcpy(tm->t[i].name, "unused.b");
        if (!strcmp(tm->t[i].name, "model.layers.0.self_attn.kv_a_layernorm.weight"))
            tm->t[i].shape[0] = 31;
    }
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/ref_missing", numla_test_tmpdir());
    CU_ASSERT_EQUAL_FATAL(tl_write(tm, dir, NUMLA_DTYPE_F32), 0);
    numla_model_config cfg;
    numla_st_model *st = NULL;
    numla_model_weights *w = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_model_config_load(dir, &cfg), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_st_open(dir, &st), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_weights_load(&cfg, st, 0, 1, NUMLA_ISA_REF, &w), NUMLA_STATUS_FORMAT);
    const char *msg = numla_error_message();
    NUMLA_ASSERT_MSG(strstr(msg, "model.layers.1.mlp.experts.3.up_proj.weight") &&
                         strstr(msg, "model.norm.weight") && strstr(msg, "kv_a_layernorm") &&
                         strstr(msg, "3 tensor problems"),
                     "message: %s", msg);
    CU_ASSERT_PTR_NULL(w);
    /* more ranks than heads is an error */
    CU_ASSERT_EQUAL(numla_weights_load(&cfg, st, 0, 5, NUMLA_ISA_REF, &w), NUMLA_STATUS_INVALID_ARG);
    numla_st_close(&st);
    tl_free(tm);
    free(tm);
}

static void test_shard_ranges(void)
{
    /* 5 heads on 2 ranks: 3 + 2 (DESIGN.md §2) */
    int64_t b, c;
    numla_shard_range(5, 0, 2, &b, &c);
    CU_ASSERT(b == 0 && c == 3);
    numla_shard_range(5, 1, 2, &b, &c);
    CU_ASSERT(b == 3 && c == 2);
    for (int R = 1; R <= 7; R++) {
        int64_t next = 0;
        for (int r = 0; r < R; r++) {
            numla_shard_range(23, r, R, &b, &c);
            CU_ASSERT_EQUAL(b, next);
            next = b + c;
        }
        CU_ASSERT_EQUAL(next, 23);
    }
}

NUMLA_TEST_SUITE(model_ref, NULL, NULL, NUMLA_TEST(test_v2_greedy_f32),
                 NUMLA_TEST(test_v2_grouped_qlora_f32), NUMLA_TEST(test_v3_noaux_f32),
                 NUMLA_TEST(test_v3_bf16_weights_bf16_cache), NUMLA_TEST(test_missing_tensors_listed),
                 NUMLA_TEST(test_shard_ranges))
