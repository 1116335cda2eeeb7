/* Tests for engine/weights + engine/model against the independent double-precision expanded
 * reference of model_testlib.h, on tiny random models (V2 greedy / V2 group-limited + q_lora /
 * V3 noaux_tc): all-at-once prefill, prefill-then-decode, two sequences batched in one step with
 * shuffled block tables, and a bf16 cache. */
#include "engine/model_testlib.h"
#include "engine/engine_harness.h"

#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/config.h"
#include "engine/model/kv_cache.h"
#include "engine/model/model.h"
#include "engine/model/weights.h"

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
        /* bf16 weights on avx512bf16: M >= 3 runs the split-bf16 AMX GEMM (2^-17 class) */
        eng e;
        numla_model_options mo = eng_model_options(isa);
        /* the best ISA also runs with the OpenMP team, as a large model would */
        if (ii == nisa - 1)
            mo.single_thread_below_bytes = 0;
        if (eng_open_rank_opts(&e, dir, kv_dtype, &mo, 0, 1)) {
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
    numla_safetensors_model *st = NULL;
    numla_model_weights *w = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_model_config_load(dir, &cfg), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_safetensors_open(dir, &st), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_weights_load(&cfg, st, 0, 1, NUMLA_ISA_REF, &w), NUMLA_STATUS_FORMAT);
    const char *msg = numla_error_message();
    NUMLA_ASSERT_MSG(strstr(msg, "model.layers.1.mlp.experts.3.up_proj.weight") &&
                         strstr(msg, "model.norm.weight") && strstr(msg, "kv_a_layernorm") &&
                         strstr(msg, "3 tensor problems"),
                     "message: %s", msg);
    CU_ASSERT_PTR_NULL(w);
    /* more ranks than heads is an error */
    CU_ASSERT_EQUAL(numla_weights_load(&cfg, st, 0, 5, NUMLA_ISA_REF, &w), NUMLA_STATUS_INVALID_ARG);
    numla_safetensors_close(&st);
    tl_free(tm);
    free(tm);
}

static void test_shard_ranges(void)
{
    /* 5 heads on 2 ranks: 3 + 2 (docs/design.md §2) */
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


/* ---- sharded ranks in one process: R engines, each with its own shard and KV cache, run the
 * same steps in R threads; numla_model_reduce sums through shared memory (an in-process
 * stand-in for the MPI allreduce). Logits slices concatenated must equal the one-rank run. */
static void *rank_main(void *arg)
{
    rank_ctx *rc = arg;
    numla_kv_seq s[2] = {{0}, {0}};
    const int32_t *toks[2] = {PROMPT_A, PROMPT_B};
    int n[2] = {11, 7};
    rc->ok = eng_step(&rc->e, 2, s, toks, n, rc->logits) == 0;
    /* one decode step on A */
    int32_t next = 9;
    const int32_t *t1[1] = {&next};
    int one[1] = {1};
    if (rc->ok)
        rc->ok = eng_step(&rc->e, 1, s, t1, one, rc->logits + (size_t)18 * rc->e.w->shard.vocab_count) == 0;
    numla_kv_seq_release(rc->e.kv, &s[0]);
    numla_kv_seq_release(rc->e.kv, &s[1]);
    return NULL;
}

static void test_sharded_ranks(void)
{
    tl_model *tm = malloc(sizeof *tm);
    tl_build(tm, 1, 555); /* q_lora + grouped routing + 2 shared experts */
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/ref_sharded", numla_test_tmpdir());
    CU_ASSERT_EQUAL_FATAL(tl_write(tm, dir, NUMLA_DTYPE_F32), 0);
    const int V = tm->vocab, rows = 19;
    numla_isa isa = numla_isa_best();
    /* one rank */
    eng e1;
    CU_ASSERT_EQUAL_FATAL(eng_open(&e1, dir, NUMLA_DTYPE_F32, isa), 0);
    float *ref = malloc(sizeof(float) * rows * V);
    {
        rank_ctx one = {.e = e1, .logits = ref};
        shm_reduce sh = {.nranks = 1};
        one.sh = &sh;
        rank_main(&one);
        CU_ASSERT_TRUE_FATAL(one.ok);
    }
    eng_close(&e1);
    int team = omp_get_max_threads();
    omp_set_num_threads(1); /* R rank threads already share the 2 CI cores */
    for (int R = 2; R <= 4; R++) {
        shm_reduce sh = {.nranks = R, .cap = (int64_t)64 * tm->hidden};
        pthread_barrier_init(&sh.bar, NULL, (unsigned)R);
        rank_ctx rc[4];
        pthread_t th[4];
        int opened = 1;
        for (int r = 0; r < R; r++) {
            sh.slot[r] = malloc(sizeof(float) * (size_t)sh.cap);
            rc[r] = (rank_ctx){.sh = &sh, .rank = r};
            if (eng_open_rank(&rc[r].e, dir, NUMLA_DTYPE_F32, isa, r, R)) {
                opened = 0;
                break;
            }
            numla_model_set_reduce(rc[r].e.m, shm_reduce_fn, &rc[r]);
            rc[r].logits = malloc(sizeof(float) * rows * (size_t)rc[r].e.w->shard.vocab_count);
        }
        CU_ASSERT_TRUE_FATAL(opened);
        for (int r = 0; r < R; r++)
            pthread_create(&th[r], NULL, rank_main, &rc[r]);
        for (int r = 0; r < R; r++)
            pthread_join(th[r], NULL);
        double err = 0;
        int heads = 0;
        int64_t experts = 0;
        for (int r = 0; r < R; r++) {
            CU_ASSERT_TRUE(rc[r].ok);
            const numla_shard *s = &rc[r].e.w->shard;
            heads += (int)s->head_count;
            experts += s->expert_count;
            for (int t = 0; t < rows; t++)
                for (int64_t v = 0; v < s->vocab_count; v++)
                    err = fmax(err, fabs(rc[r].logits[(size_t)t * s->vocab_count + v] -
                                         ref[(size_t)t * V + s->vocab_begin + v]));
        }
        CU_ASSERT_EQUAL(heads, tm->heads);
        CU_ASSERT_EQUAL(experts, tm->experts);
        NUMLA_ASSERT_MSG(err < 1e-4, "%d ranks: logits differ from one rank by %g", R, err);
        if (getenv("NUMLA_TEST_VERBOSE"))
            fprintf(stderr, "\n    %d ranks: max |logit diff| vs 1 rank %.3g", R, err);
        for (int r = 0; r < R; r++) {
            free(rc[r].logits);
            free(sh.slot[r]);
            eng_close(&rc[r].e);
        }
        pthread_barrier_destroy(&sh.bar);
    }
    omp_set_num_threads(team);
    free(ref);
    tl_free(tm);
    free(tm);
}

NUMLA_TEST_SUITE(model_ref, NULL, NULL, NUMLA_TEST(test_v2_greedy_f32),
                 NUMLA_TEST(test_v2_grouped_qlora_f32), NUMLA_TEST(test_v3_noaux_f32),
                 NUMLA_TEST(test_v3_bf16_weights_bf16_cache), NUMLA_TEST(test_missing_tensors_listed),
                 NUMLA_TEST(test_shard_ranges), NUMLA_TEST(test_sharded_ranks))
