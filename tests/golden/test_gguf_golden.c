/* GGUF model goldens (label golden): numla on tests/golden/<model>/gguf_<variant>/model.gguf
 * against transformers run on the gguf package's dequantization of the same file
 * (scripts/make_gguf_model_golden.py; tests/golden/README.md "GGUF variants"):
 *   v2lite/gguf_q8_0   Q8_0 linears and embedding, split MLA layout (attn_k_b + attn_v_b)
 *   v2lite/gguf_q4_0   Q4_0, attn_kv_b layout
 *   v2lite/gguf_q4_0_split  the same file split in two parts (split.* keys), opened by part 1
 *   v2/gguf_q8_0       the V2 shape (q_lora_rank, group-limited routing, YaRN from
 *                      rope_parameters) in Q8_0, split layout
 *   kq/gguf_mixed      width 256: Q4_K, Q5_K, Q6_K, IQ4_XS, Q2_K, Q3_K, Q8_0, Q4_0 (embedding
 *                      Q6_K, lm_head Q4_K), split layout
 *   v2lite/model_int4  a compressed-tensors pack-quantized checkpoint (Kimi-K2-Thinking's
 *                      format): routed experts' gate/up int4 in groups of 32, the rest bf16 in
 *                      `ignore` (scripts/make_int4_golden.py, packed by the package itself),
 *                      against transformers on scale · q
 * Checks, at the best kernel level and at ref:
 *   - with fp32 activations (weights.h qblock_fp32_act) the engine computes the reference's
 *     function exactly up to summation order: logits at every prompt position within
 *     LOGIT_TOL (make_golden.py's fp32 tolerance, README), and 16 greedy tokens through the KV
 *     cache identical while the reference margin exceeds 2 LOGIT_TOL;
 *   - 2 and 3 in-process ranks (heads, experts, MLP slices and vocabulary sharded on the
 *     blocks), the same tolerance;
 *   - the default mode, activations quantized to int8 per 256 columns where the linear allows
 *     (kernels/qblock.h Q8 mode: kq's, the Q8_0 and Q4_0 variants' linears): a different function from the
 *     reference's (each quantized input moves a product by up to 1/254 of its block's largest
 *     |x|; over 3 layers the logits, std ~8, move by ~0.1-0.5, and a moved expert choice in a
 *     long prompt moves everything after it by more), held as a bf16 KV cache is in
 *     test_model_golden.c: at most LOGIT_FRAC_Q8 of a prompt's positions above LOGIT_TOL_Q8,
 *     none above LOGIT_MAX_Q8, and greedy tokens identical while the margin exceeds
 *     2 LOGIT_TOL_Q8. A wrong block layout or scale gives errors of O(10) everywhere. */
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model_golden_harness.h"

#define LOGIT_TOL_Q8 1.0
#define LOGIT_MAX_Q8 4.0
#define LOGIT_FRAC_Q8 0.2

/* A variant's golden data (model_golden_harness.h) and the model path the engine opens: the
 * dir's model.gguf, the first part of a split set, or the dir itself (safetensors). */
typedef struct gg {
    golden ref;
    char model[1100];
    double q8_max, q8_frac; /* the default mode's limits: LOGIT_MAX_Q8, LOGIT_FRAC_Q8 unless said */
    double q8_frac_absorbed; /* the same with every prompt in the absorbed form */
} gg;

static void gg_free(gg *g) { golden_free(&g->ref); }

/* variant: "<model>/<subdir>" under tests/golden */
static int gg_load(gg *g, const char *variant)
{
    memset(g, 0, sizeof *g);
    char model[64];
    const char *slash = strchr(variant, '/');
    snprintf(model, sizeof model, "%.*s", (int)(slash - variant), variant);
    if (golden_load_file(&g->ref, model, slash + 1, "expected.safetensors"))
        return -1;
    const char *dir = g->ref.dir;
    snprintf(g->model, sizeof g->model, "%s/model.gguf", dir);
    glob_t gl;
    char pat[1200];
    snprintf(pat, sizeof pat, "%s/model-00001-of-*.gguf", dir);
    if (access(g->model, R_OK) != 0 && glob(pat, 0, NULL, &gl) == 0) { /* a split set */
        snprintf(g->model, sizeof g->model, "%s", gl.gl_pathv[0]);
        globfree(&gl);
    } else if (access(g->model, R_OK) != 0) { /* a safetensors directory (model_int4) */
        snprintf(g->model, sizeof g->model, "%s", dir);
    }
    return 0;
}

static const float *gg_logits(const gg *g, int p, int64_t *V)
{
    char name[64];
    snprintf(name, sizeof name, "prompt%d.logits", p);
    return st_f32(g->ref.expected, name, NULL, V);
}

/* Whether level isa runs layer 0's W_UV (head 0) in Q8 activation mode, asked of the block
 * kernels (numla_qblock_act_for), not of the engine: a level without Q8 kernels for its
 * encoding keeps fp32 activations, and then nothing downstream may round to bf16. */
static int gg_uv_q8(const eng *e, numla_isa isa)
{
    const numla_model_linear *uv = &e->w->layers[0].uv[0];
    return uv->kind == NUMLA_MODEL_LINEAR_QBLOCK &&
           numla_qblock_act_for(isa, uv->qb.type, uv->k) == NUMLA_QBLOCK_ACT_Q8;
}

/* One engine's logits at every prompt position and its greedy tokens; form: the prefill form
 * (AUTO: the engine's choice); *bf16_tokens (when not NULL): model_stats' absorbed_bf16_tokens,
 * and *uv_q8 gg_uv_q8's answer at isa. */
static double gg_one_form(const gg *g, numla_isa isa, int fp32_act, double tol, const char *what,
                          numla_prefill_form form, int64_t *bf16_tokens, int *uv_q8)
{
    eng e;
    eng_qblock_fp32_act = fp32_act;
    numla_model_options mo = eng_model_options(isa);
    if (form != NUMLA_PREFILL_FORM_AUTO)
        mo.prefill_form = form;
    int opened = eng_open_rank_opts(&e, g->model, NUMLA_DTYPE_F32, &mo, 0, 1) == 0;
    eng_qblock_fp32_act = 1;
    CU_ASSERT_TRUE_FATAL(opened);
    double worst = 0;
    for (int p = 0; p < g->ref.nprompts; p++) {
        int64_t V = 0;
        const float *ref = gg_logits(g, p, &V);
        CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
        CU_ASSERT_EQUAL_FATAL(V, e.cfg.vocab_size);
        float *lg = malloc(sizeof(float) * (size_t)(g->ref.len[p] * V));
        numla_kv_seq s = {0};
        const int32_t *tk[1] = {g->ref.tokens[p]};
        int n[1] = {g->ref.len[p]};
        CU_ASSERT_EQUAL_FATAL(eng_step(&e, 1, &s, tk, n, lg), 0);
        numla_kv_seq_release(e.kv, &s);
        double err = 0;
        int above = 0;
        for (int64_t t = 0; t < g->ref.len[p]; t++) {
            double et = 0;
            for (int64_t i = t * V; i < (t + 1) * V; i++)
                et = fmax(et, fabs((double)lg[i] - (double)ref[i]));
            above += et > tol;
            err = fmax(err, et);
        }
        free(lg);
        worst = fmax(worst, err);
        if (fp32_act)
            NUMLA_ASSERT_MSG(err <= tol, "%s %s prompt %d: logits max err %g > %g", g->ref.dir, what,
                             p, err, tol);
        else
            NUMLA_ASSERT_MSG(err <= g->q8_max &&
                                 above <= (form == NUMLA_PREFILL_FORM_ABSORBED ? g->q8_frac_absorbed : g->q8_frac) *
                                              g->ref.len[p],
                             "%s %s prompt %d: logits max err %g, %d of %d positions above %g",
                             g->ref.dir, what, p, err, above, g->ref.len[p], tol);
        int compared = 0;
        NUMLA_ASSERT_MSG(greedy_check(&e, &g->ref, p, tol, &compared) == 0, "%s %s prompt %d: greedy tokens differ",
                         g->ref.dir, what, p);
    }
    if (bf16_tokens) {
        numla_model_stats ms;
        numla_model_get_stats(e.m, &ms);
        *bf16_tokens = ms.absorbed_bf16_tokens;
        *uv_q8 = gg_uv_q8(&e, isa);
    }
    eng_close(&e);
    return worst;
}

static double gg_one(const gg *g, numla_isa isa, int fp32_act, double tol, const char *what)
{
    return gg_one_form(g, isa, fp32_act, tol, what, NUMLA_PREFILL_FORM_AUTO, NULL, NULL);
}

typedef struct gg_job {
    const gg *g;
    int prompt;
} gg_job;

static void *gg_rank_main(void *arg)
{
    rank_ctx *rc = arg;
    const gg_job *j = rc->job;
    numla_kv_seq s = {0};
    const int32_t *tk[1] = {j->g->ref.tokens[j->prompt]};
    int n[1] = {j->g->ref.len[j->prompt]};
    rc->ok = eng_step(&rc->e, 1, &s, tk, n, rc->logits) == 0;
    numla_kv_seq_release(rc->e.kv, &s);
    return NULL;
}

/* R in-process ranks (fp32 activations), every prompt's logits. */
static double gg_sharded(const gg *g, int R)
{
    shm_reduce sh = {.nranks = R};
    pthread_barrier_init(&sh.bar, NULL, (unsigned)R);
    rank_ctx rc[4];
    pthread_t th[4];
    int opened = 1;
    for (int r = 0; r < R && opened; r++) {
        rc[r] = (rank_ctx){.sh = &sh, .rank = r};
        opened = eng_open_rank(&rc[r].e, g->model, NUMLA_DTYPE_F32, numla_isa_best(), r, R) == 0;
        if (!opened)
            break;
        numla_model_set_reduce(rc[r].e.m, shm_reduce_fn, &rc[r]);
        sh.cap = 128 * rc[r].e.cfg.hidden_size;
        sh.slot[r] = malloc(sizeof(float) * (size_t)sh.cap);
        rc[r].logits = malloc(sizeof(float) * 128 * (size_t)rc[r].e.w->shard.vocab_count);
    }
    CU_ASSERT_TRUE_FATAL(opened);
    double worst = 0;
    for (int p = 0; p < g->ref.nprompts; p++) {
        gg_job job = {g, p};
        for (int r = 0; r < R; r++) {
            rc[r].job = &job;
            pthread_create(&th[r], NULL, gg_rank_main, &rc[r]);
        }
        for (int r = 0; r < R; r++)
            pthread_join(th[r], NULL);
        int64_t V = 0;
        const float *ref = gg_logits(g, p, &V);
        CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
        double err = 0;
        for (int r = 0; r < R; r++) {
            CU_ASSERT_TRUE(rc[r].ok);
            const numla_shard *s = &rc[r].e.w->shard;
            for (int64_t t = 0; t < g->ref.len[p]; t++)
                for (int64_t v = 0; v < s->vocab_count; v++)
                    err = fmax(err, fabs(rc[r].logits[t * s->vocab_count + v] -
                                         ref[t * V + s->vocab_begin + v]));
        }
        worst = fmax(worst, err);
        NUMLA_ASSERT_MSG(err <= LOGIT_TOL, "%s %d ranks prompt %d: logits max err %g", g->ref.dir, R,
                         p, err);
    }
    for (int r = 0; r < R; r++) {
        free(rc[r].logits);
        free(sh.slot[r]);
        eng_close(&rc[r].e);
    }
    pthread_barrier_destroy(&sh.bar);
    return worst;
}

/* attn_bf16: whether the variant's W_UV quantizes its input in the default mode, so that its
 * absorbed attention gives bf16 output (engine/model/attention.c): checked with every prompt
 * prefilled in the absorbed form, at the default mode's tolerances, where the best level has
 * Q8 kernels for W_UV's encoding (an AVX2-only CPU may not: then no bf16 attention either). */
static void gg_check_q8(const char *variant, double q8_max, double q8_frac, double q8_frac_absorbed,
                        int attn_bf16)
{
    gg g;
    if (gg_load(&g, variant)) {
        CU_FAIL("golden data");
        gg_free(&g);
        return;
    }
    g.q8_max = q8_max;
    g.q8_frac = q8_frac;
    g.q8_frac_absorbed = q8_frac_absorbed;
    const int team = omp_get_max_threads();
    double e_best = gg_one(&g, numla_isa_best(), 1, LOGIT_TOL, "fp32 act, best isa");
    omp_set_num_threads(1);
    double e_ref = gg_one(&g, NUMLA_ISA_REF, 1, LOGIT_TOL, "fp32 act, ref isa");
    double e_q8 = gg_one(&g, numla_isa_best(), 0, LOGIT_TOL_Q8, "default act, best isa");
    int64_t bf16_tokens = 0;
    int uv_q8 = 0;
    double e_q8a = gg_one_form(&g, numla_isa_best(), 0, LOGIT_TOL_Q8, "default act, absorbed",
                               NUMLA_PREFILL_FORM_ABSORBED, &bf16_tokens, &uv_q8);
    const int expect_bf16 = attn_bf16 && uv_q8;
    NUMLA_ASSERT_MSG((bf16_tokens > 0) == expect_bf16,
                     "%s: %lld tokens of bf16 attention, expected %s (W_UV %s Q8 mode at %s)", variant,
                     (long long)bf16_tokens, expect_bf16 ? "some" : "none", uv_q8 ? "in" : "not in",
                     numla_isa_name(numla_isa_best()));
    double e2 = gg_sharded(&g, 2), e3 = gg_sharded(&g, 3);
    omp_set_num_threads(team);
    fprintf(stderr, "\n    golden %-17s logits max abs err: fp32 act %.3g (ref %.3g), "
            "default act %.3g (absorbed form%s: %.3g), 2 ranks %.3g, 3 ranks %.3g", variant, e_best,
            e_ref, e_q8, expect_bf16 ? ", bf16 attention" : "", e_q8a, e2, e3);
    gg_free(&g);
}

static void gg_check(const char *variant, int attn_bf16)
{
    gg_check_q8(variant, LOGIT_MAX_Q8, LOGIT_FRAC_Q8, LOGIT_FRAC_Q8, attn_bf16);
}

static void test_v2lite_q8_0(void) { gg_check("v2lite/gguf_q8_0", 1); }
/* Q4_0 takes Q8 activations from K % 32 (as Q5_0, IQ4_NL and Q8_0), so these variants' W_UV
 * (Q4_0, K 32) quantizes its input and their absorbed attention gives bf16 output */
static void test_v2lite_q4_0(void) { gg_check("v2lite/gguf_q4_0", 1); }
static void test_kq_mixed(void) { gg_check("kq/gguf_mixed", 1); }
/* v2's Q8_0 linears (K 96, 64, 32: Q8 mode from K % 32) quantize x in every layer of a model
 * that amplifies any change more than kq: the default mode moves its logits by up to 4.7 and
 * past 1.0 at 36 % of one prompt's positions (llama.cpp's own Q8_0 activations move them by up
 * to 14, tests/golden/README.md); greedy tokens are held as for the others. */
/* In the absorbed form its attention output is bf16 (W_UV quantizes it next); the positions
 * past 1.0 then move from prompt to prompt: 35 of the 141 (16 of prompt 2's 33; max 2.8) where
 * an fp32 output gives 46 (12 of 33, 34 of 100; max 4.6). Either is this model's amplified
 * noise; its per-prompt limit in that form is 0.5. */
static void test_v2_q8_0(void) { gg_check_q8("v2/gguf_q8_0", 6.0, 0.4, 0.5, 1); }
static void test_v2lite_int4(void) { gg_check("v2lite/model_int4", 0); }
static void test_v2lite_q4_0_split(void) { gg_check("v2lite/gguf_q4_0_split", 1); }

/* llama.cpp on the same file (scripts/make_gguf_llamacpp_check.py, llama-cpp-python, its tokens
 * in llamacpp.json): numla's greedy tokens, generated from its own choices, equal llama.cpp's
 * over the prefix where llama.cpp's equal the reference's (llama.cpp quantizes activations to
 * Q8_0, so on these sensitive models it parts from the reference at the first close call; the
 * file says where), and that prefix is not empty. */
static void test_v2_llamacpp(void)
{
    gg g;
    CU_ASSERT_EQUAL_FATAL(gg_load(&g, "v2/gguf_q8_0"), 0);
    char path[1200];
    snprintf(path, sizeof path, "%s/llamacpp.json", g.ref.dir);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    NUMLA_ASSERT_MSG(root != NULL, "%s: %s", path, jerr.text);
    const json_t *prompts = json_object_get(root, "prompts");
    CU_ASSERT_EQUAL_FATAL((int)json_array_size(prompts), g.ref.nprompts);
    eng e;
    CU_ASSERT_TRUE_FATAL(eng_open(&e, g.model, NUMLA_DTYPE_F32, numla_isa_best()) == 0);
    const int V = (int)e.cfg.vocab_size;
    float *lg = malloc(sizeof(float) * (size_t)V * 128);
    int total = 0;
    for (int p = 0; p < g.ref.nprompts; p++) {
        const json_t *jp = json_array_get(prompts, (size_t)p), *jg = json_object_get(jp, "greedy");
        const int agree = (int)json_integer_value(json_object_get(jp, "agree"));
        numla_kv_seq sq = {0};
        const int32_t *tk[1] = {g.ref.tokens[p]};
        int n[1] = {g.ref.len[p]};
        CU_ASSERT_EQUAL_FATAL(eng_step(&e, 1, &sq, tk, n, lg), 0);
        const float *row = lg + (size_t)(g.ref.len[p] - 1) * V;
        for (int i = 0; i < agree; i++) {
            int32_t best = 0;
            for (int v = 1; v < V; v++)
                if (row[v] > row[best])
                    best = v;
            const int32_t want = (int32_t)json_integer_value(json_array_get(jg, (size_t)i));
            NUMLA_ASSERT_MSG(best == want, "prompt %d token %d: numla %d, llama.cpp %d", p, i, best, want);
            if (best != want)
                break;
            total++;
            const int32_t *nt[1] = {&best};
            int one[1] = {1};
            CU_ASSERT_EQUAL_FATAL(eng_step(&e, 1, &sq, nt, one, lg), 0);
            row = lg;
        }
        numla_kv_seq_release(e.kv, &sq);
    }
    CU_ASSERT(total > 0);
    fprintf(stderr, "\n    v2/gguf_q8_0: %d greedy tokens equal to llama.cpp's ", total);
    free(lg);
    eng_close(&e);
    json_decref(root);
    gg_free(&g);
}

NUMLA_TEST_SUITE(gguf_golden, NULL, NULL, NUMLA_TEST(test_v2lite_q8_0), NUMLA_TEST(test_v2_q8_0), NUMLA_TEST(test_v2_llamacpp),
                 NUMLA_TEST(test_v2lite_q4_0), NUMLA_TEST(test_kq_mixed),
                 NUMLA_TEST(test_v2lite_int4), NUMLA_TEST(test_v2lite_q4_0_split))
