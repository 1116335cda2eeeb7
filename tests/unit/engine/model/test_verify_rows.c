/* Row invariance of a speculative verify step (docs/speculative.md): after a prompt, a step of
 * n = 2..9 rows of one sequence must give each row the bits that n one-row decode steps give it
 * (every layer's residual stream, the cache rows it writes, the logits), so that greedy decoding
 * with drafts emits exactly the tokens and logprobs of decoding without them. Models: the
 * trained models/kjv-v3 (bf16 weights), the tiny random DeepSeek-V3 of tests/golden/mtp/v3 (fp32)
 * and its GGUF file (F32 tensors), the tiny random DeepSeek-V3.2 of tests/golden/mtp/v32 and
 * GLM-5 of tests/golden/glm5/model_bf16 (sparse attention, also steps whose rows straddle
 * index_topk), and kjv-v3 quantized at load to fp8 blocks, int8 and Q4_K; every
 * level this CPU runs, and from avx512 at 1 and 2 in-process ranks
 * (the shared-memory sum of engine_harness.h, in rank order as comm/ sums), on the calling
 * thread (what these small models get) and on a team of 2 threads (the multi-threaded paths:
 * per-head and per-expert jobs). Prompts of 20 and 300 tokens (the latter splits the attention
 * over the cached prefix into several key chunks). */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_harness.h"

enum { VR_ROWS = 9, VR_MAX_RANKS = 2 };

/* The residual stream after each layer, for every row of the step (the layer hook). */
typedef struct vr_capture {
    float *h; /* (layers, VR_ROWS, hidden) */
    int64_t hidden;
} vr_capture;

static void vr_hook(void *ctx, int32_t layer, const float *h, int32_t tokens, int64_t hidden)
{
    vr_capture *c = ctx;
    if (tokens <= VR_ROWS)
        memcpy(c->h + ((int64_t)layer * VR_ROWS) * hidden, h,
               (size_t)tokens * (size_t)hidden * sizeof(float));
}

typedef struct vr_job {
    int prompt_len;
    const int32_t *prompt; /* prompt_len tokens */
    const int32_t *draft;  /* VR_ROWS tokens decoded after it */
    /* results (rank 0's are reported) */
    int mismatches;
    char first[256];
} vr_job;

typedef struct vr_ctx {
    rank_ctx rc;
    vr_job *job;
} vr_ctx;

/* The cache rows of positions [p0, p0 + n) of every layer, (layers, n, row bytes). */
static void vr_cache_rows(const eng *e, const numla_kv_seq *s, int p0, int n, char *out)
{
    const size_t rb = (size_t)(e->kv->kv_lora_rank + e->kv->rope_dim) * numla_dtype_size(e->kv->dtype);
    const int32_t L = numla_model_config_kv_layers(&e->cfg);
    for (int32_t l = 0; l < L; l++)
        for (int i = 0; i < n; i++)
            memcpy(out + ((size_t)l * VR_ROWS + (size_t)i) * rb,
                   (const char *)numla_kv_cache_layer(e->kv, l) +
                       (size_t)numla_kv_seq_slot(e->kv, s, p0 + i) * rb,
                   rb);
}

static int vr_run(eng *e, vr_job *job)
{
    const numla_model_config *c = &e->cfg;
    const int64_t hid = c->hidden_size, Vr = e->w->shard.vocab_count;
    const int layers = (int)c->num_hidden_layers, P = job->prompt_len;
    const size_t rb = (size_t)(e->kv->kv_lora_rank + e->kv->rope_dim) * numla_dtype_size(e->kv->dtype);
    const size_t kvb = (size_t)numla_model_config_kv_layers(c) * VR_ROWS * rb;
    const size_t hb = (size_t)layers * VR_ROWS * (size_t)hid;
    float *ref_h = calloc(hb, sizeof(float)), *ref_lg = calloc((size_t)(VR_ROWS * Vr), sizeof(float));
    float *lg = malloc(sizeof(float) * (size_t)(P > VR_ROWS ? P : VR_ROWS) * (size_t)Vr);
    char *ref_kv = calloc(kvb, 1), *got_kv = calloc(kvb, 1);
    vr_capture cap = {.h = calloc(hb, sizeof(float)), .hidden = hid};
    numla_kv_seq s = {0};
    int ok = ref_h && ref_lg && lg && ref_kv && got_kv && cap.h;
    const int32_t *tk[1] = {job->prompt};
    int n1[1] = {P};
    ok = ok && eng_step(e, 1, &s, tk, n1, lg) == 0;
    /* the reference: one row per step */
    numla_model_set_layer_hook(e->m, vr_hook, &cap);
    for (int i = 0; i < VR_ROWS && ok; i++) {
        const int32_t *t1[1] = {job->draft + i};
        int one[1] = {1};
        ok = eng_step(e, 1, &s, t1, one, lg) == 0;
        for (int l = 0; l < layers; l++)
            memcpy(ref_h + ((size_t)l * VR_ROWS + (size_t)i) * (size_t)hid,
                   cap.h + (size_t)l * VR_ROWS * (size_t)hid, sizeof(float) * (size_t)hid);
        memcpy(ref_lg + (size_t)i * (size_t)Vr, lg, sizeof(float) * (size_t)Vr);
    }
    if (ok)
        vr_cache_rows(e, &s, P, VR_ROWS, ref_kv);
    /* verify steps of n rows over the same prefix: the sequence is cut back to the prompt */
    static const int ns[] = {2, 3, 4, 9};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0] && ok; k++) {
        const int n = ns[k];
        s.len = P;
        const int32_t *tn[1] = {job->draft};
        int nn[1] = {n};
        ok = eng_step(e, 1, &s, tn, nn, lg) == 0;
        vr_cache_rows(e, &s, P, n, got_kv);
        for (int j = 0; j < n && ok; j++) {
            int bad_layer = -1;
            double d = 0;
            for (int l = 0; l < layers && bad_layer < 0; l++) {
                const float *a = ref_h + ((size_t)l * VR_ROWS + (size_t)j) * (size_t)hid;
                const float *b = cap.h + ((size_t)l * VR_ROWS + (size_t)j) * (size_t)hid;
                if (memcmp(a, b, sizeof(float) * (size_t)hid)) {
                    bad_layer = l;
                    for (int64_t i = 0; i < hid; i++)
                        d = fmax(d, fabs((double)a[i] - (double)b[i]));
                }
            }
            int bad_kv = -1;
            for (int32_t l = 0; l < numla_model_config_kv_layers(c) && bad_kv < 0; l++)
                if (memcmp(ref_kv + ((size_t)l * VR_ROWS + (size_t)j) * rb,
                           got_kv + ((size_t)l * VR_ROWS + (size_t)j) * rb, rb))
                    bad_kv = l;
            const int bad_lg = memcmp(ref_lg + (size_t)j * (size_t)Vr, lg + (size_t)j * (size_t)Vr,
                                      sizeof(float) * (size_t)Vr) != 0;
            if (bad_layer >= 0 || bad_kv >= 0 || bad_lg) {
                if (!job->mismatches++)
                    snprintf(job->first, sizeof job->first,
                             "step of %d rows, row %d: first layer output differing %d (max abs "
                             "%.3g), cache row of layer %d, logits %s", n, j, bad_layer, d, bad_kv,
                             bad_lg ? "differ" : "equal");
            }
        }
    }
    numla_model_set_layer_hook(e->m, NULL, NULL);
    numla_kv_seq_release(e->kv, &s);
    free(ref_h); free(ref_lg); free(lg); free(ref_kv); free(got_kv); free(cap.h);
    return ok ? 0 : -1;
}

static void *vr_rank_main(void *arg)
{
    vr_ctx *x = arg;
    x->rc.ok = vr_run(&x->rc.e, x->job) == 0;
    return NULL;
}

/* The microarchitecture the engine tunes for in vr_check (NUMLA_UARCH_COUNT: the detected
 * one): it picks the 8-bit linears' level (numla_model_options_level). */
static numla_uarch vr_uarch = NUMLA_UARCH_COUNT;

/* One model at one level, R ranks, `threads` OpenMP threads per rank (1: the small-model
 * switch as the engine has it; 2: that switch off, so the team paths run). */
static void vr_check(const char *path, numla_isa isa, int R, int threads, int prompt_len)
{
    const int team = omp_get_max_threads();
    omp_set_num_threads(threads);
    numla_model_config cfg;
    CU_ASSERT_EQUAL_FATAL(numla_model_config_load(path, &cfg), 0);
    numla_test_rng rng = {(uint64_t)prompt_len * 31 + 7};
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)prompt_len), draft[VR_ROWS];
    for (int i = 0; i < prompt_len; i++)
        prompt[i] = (int32_t)(numla_test_rng_u64(&rng) % (uint64_t)cfg.vocab_size);
    for (int i = 0; i < VR_ROWS; i++)
        draft[i] = (int32_t)(numla_test_rng_u64(&rng) % (uint64_t)cfg.vocab_size);
    shm_reduce sh = {.nranks = R};
    pthread_barrier_init(&sh.bar, NULL, (unsigned)R);
    vr_ctx ctx[VR_MAX_RANKS];
    vr_job jobs[VR_MAX_RANKS];
    pthread_t th[VR_MAX_RANKS];
    int opened = 1;
    for (int r = 0; r < R; r++) {
        ctx[r] = (vr_ctx){.rc = {.sh = &sh, .rank = r}, .job = &jobs[r]};
        jobs[r] = (vr_job){.prompt_len = prompt_len, .prompt = prompt, .draft = draft};
        numla_model_options mo = eng_model_options(isa);
        if (vr_uarch != NUMLA_UARCH_COUNT)
            mo.uarch = vr_uarch;
        if (threads > 1)
            mo.single_thread_below_bytes = 0;
        opened = opened && eng_open_rank_opts(&ctx[r].rc.e, path, NUMLA_DTYPE_F32, &mo, r, R) == 0;
        if (!opened)
            break;
        numla_model_set_reduce(ctx[r].rc.e.m, shm_reduce_fn, &ctx[r].rc);
        sh.cap = (int64_t)(prompt_len + VR_ROWS) * cfg.hidden_size;
        sh.slot[r] = malloc(sizeof(float) * (size_t)sh.cap);
    }
    CU_ASSERT_TRUE_FATAL(opened);
    for (int r = 0; r < R; r++)
        pthread_create(&th[r], NULL, vr_rank_main, &ctx[r]);
    int ok = 1;
    for (int r = 0; r < R; r++) {
        pthread_join(th[r], NULL);
        ok &= ctx[r].rc.ok;
    }
    CU_ASSERT_TRUE(ok);
    NUMLA_ASSERT_MSG(jobs[0].mismatches == 0, "%s, level %s (%s), %d rank(s), %d thread(s), prompt %d: "
                     "%d rows differ from one-row steps; first: %s", path, numla_isa_name(isa),
                     vr_uarch != NUMLA_UARCH_COUNT ? numla_uarch_name(vr_uarch) : "detected", R,
                     threads, prompt_len, jobs[0].mismatches, jobs[0].first);
    for (int r = 0; r < R; r++) {
        eng_close(&ctx[r].rc.e);
        free(sh.slot[r]);
    }
    pthread_barrier_destroy(&sh.bar);
    free(prompt);
    omp_set_num_threads(team);
}

/* Every level on one rank and thread; from avx512 (what the engine runs on x86 with AVX-512)
 * also 2 ranks and 2 threads; the best level also the long prompt. lean: the best level only.
 * A DSA model's also a prompt of index_topk - 2 tokens (straddle), so that the steps of 3, 4
 * and 9 rows straddle index_topk: their first rows have at most index_topk keys (one-row steps
 * there attend to every key, in the dense form), the others more (one-row steps select). */
static void vr_model_at(const char *rel, int with_long, int straddle)
{
    numla_isa isas[NUMLA_ISA_COUNT];
    const int n = numla_test_isas(isas);
    const char *path = numla_test_source_path(rel);
    char p[1200];
    snprintf(p, sizeof p, "%s", path);
    for (int i = numla_test_sweep_lean() ? n - 1 : 0; i < n; i++) {
        vr_check(p, isas[i], 1, 1, 20);
        if (straddle)
            vr_check(p, isas[i], 1, 1, straddle);
        if (isas[i] < NUMLA_ISA_AVX512)
            continue;
        vr_check(p, isas[i], 2, 1, 20);
        vr_check(p, isas[i], 1, 2, 20);
        if (straddle) {
            vr_check(p, isas[i], 2, 1, straddle);
            vr_check(p, isas[i], 1, 2, straddle);
        }
        if (with_long && i == n - 1)
            vr_check(p, isas[i], 1, 1, 300);
    }
}
static void vr_model(const char *rel, int with_long) { vr_model_at(rel, with_long, 0); }

static void test_kjv(void) { vr_model("models/kjv-v3", 1); }

/* The weight formats a float checkpoint is quantized to at load (--weights), whose kernels keep
 * a row's bits up to a verify step's rows (kernels/qlinear.h, qblock.h). */
static void test_kjv_formats(void)
{
    static const char *const fmts[] = {"fp8", "int8", "q4_k"};
    for (size_t f = 0; f < sizeof fmts / sizeof fmts[0]; f++) {
        numla_weights_options wo = numla_weights_options_default();
        CU_ASSERT_FATAL(numla_weights_format_parse(fmts[f], &wo));
        eng_weights_format = wo.format;
        /* quantizing at load costs more than the steps: one rank; fp8 (whose paths differ by
         * level) every level from avx512, the others the best one */
        numla_isa isas[NUMLA_ISA_COUNT];
        const int n = numla_test_isas(isas);
        for (int i = 0; i < n; i++)
            if (i == n - 1 || (f == 0 && isas[i] >= NUMLA_ISA_AVX512))
                vr_check(numla_test_source_path("models/kjv-v3"), isas[i], 1, 1, 20);
        /* fp8 at avx512bf16 under both rules of numla_model_options_level: the split-bf16
         * GEMV for every row count (generic), the FMA one (intel) */
        static const numla_uarch uarchs[] = {NUMLA_UARCH_GENERIC, NUMLA_UARCH_INTEL};
        for (int i = 0; f == 0 && i < n; i++)
            for (size_t u = 0; isas[i] == NUMLA_ISA_AVX512BF16 && u < 2; u++) {
                vr_uarch = uarchs[u];
                vr_check(numla_test_source_path("models/kjv-v3"), isas[i], 1, 1, 20);
            }
        vr_uarch = NUMLA_UARCH_COUNT;
    }
    eng_weights_format = -1;
}
static void test_tiny_v3(void) { vr_model("tests/golden/mtp/v3/model", 1); }
static void test_tiny_v3_gguf(void) { vr_model("tests/golden/mtp/v3_gguf/model.gguf", 0); }
/* DeepSeek-V3.2's sparse attention: its index_topk is 16, so after 20 and 300 tokens every
 * step selects, and after 14 the steps of 3, 4 and 9 rows straddle index_topk. */
static void test_tiny_v32(void) { vr_model_at("tests/golden/mtp/v32/model", 1, 14); }
/* GLM-5's (index_topk 16; its "shared" layers reuse the last full layer's selection). */
static void test_tiny_glm5(void) { vr_model_at("tests/golden/glm5/model_bf16", 0, 14); }

NUMLA_TEST_SUITE(verify_rows, NULL, NULL, NUMLA_TEST(test_kjv), NUMLA_TEST(test_kjv_formats), NUMLA_TEST(test_tiny_v3),
                 NUMLA_TEST(test_tiny_v3_gguf), NUMLA_TEST(test_tiny_v32), NUMLA_TEST(test_tiny_glm5))
