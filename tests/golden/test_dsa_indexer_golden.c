/* Golden test of the DSA lightning indexer against transformers 5.25 (scripts/make_dsa_golden.py,
 * tests/golden/dsa/): from the module's projected inputs, numla's preparation
 * (engine/model/indexer.c: k LayerNorm with bias, RoPE half split for deepseek_v32 and
 * interleaved for glm_moe_dsa, w · Hi^-0.5) must give the module's q and k, and the scoring +
 * top-k kernel (kernels/dsa.h) over a paged cache with a shuffled table must select exactly the
 * module's top-16 for every causal query of a 40-token prompt (at every ISA). The data also
 * must tell the two RoPE flavours apart: the other flavour selects differently. */
#include "test_util.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/formats/safetensors.h"
#include "engine/model/indexer.h"
#include "kernels/dsa.h"

typedef struct dsa_golden {
    int32_t S, Hi, Di, Dr, topk;
    float *q_proj, *k_proj, *w_proj, *k_norm_w, *k_norm_b, *cos_sin, *q_ref, *k_ref, *topk_ref;
} dsa_golden;

static float *golden_tensor(const numla_safetensors_model *m, const char *name, int64_t *d0, int64_t *d1)
{
    const numla_safetensors_tensor *t = numla_safetensors_find(m, name);
    if (!t || t->dtype != NUMLA_DTYPE_F32)
        return NULL;
    float *p = malloc(t->nbytes);
    memcpy(p, t->data, t->nbytes);
    if (d0)
        *d0 = t->shape[0];
    if (d1)
        *d1 = t->ndim > 1 ? t->shape[1] : 1;
    return p;
}

static int golden_load(const char *file, dsa_golden *g)
{
    numla_safetensors_model *m = NULL;
    if (numla_safetensors_open(numla_test_source_path(file), &m) != NUMLA_STATUS_OK)
        return 0;
    int64_t s = 0, hd = 0, di = 0, hi = 0, dr = 0, k = 0;
    g->q_proj = golden_tensor(m, "q_proj", &s, &hd);
    g->k_proj = golden_tensor(m, "k_proj", NULL, &di);
    g->w_proj = golden_tensor(m, "w_proj", NULL, &hi);
    g->k_norm_w = golden_tensor(m, "k_norm_w", NULL, NULL);
    g->k_norm_b = golden_tensor(m, "k_norm_b", NULL, NULL);
    g->cos_sin = golden_tensor(m, "cos_sin", NULL, &dr);
    g->q_ref = golden_tensor(m, "q_ref", NULL, NULL);
    g->k_ref = golden_tensor(m, "k_ref", NULL, NULL);
    g->topk_ref = golden_tensor(m, "topk", NULL, &k);
    numla_safetensors_close(&m);
    g->S = (int32_t)s, g->Hi = (int32_t)hi, g->Di = (int32_t)di, g->Dr = (int32_t)dr, g->topk = (int32_t)k;
    return g->q_proj && g->k_proj && g->w_proj && g->k_norm_w && g->k_norm_b && g->cos_sin &&
           g->q_ref && g->k_ref && g->topk_ref && hd == hi * di;
}

static void golden_free(dsa_golden *g)
{
    free(g->q_proj), free(g->k_proj), free(g->w_proj), free(g->k_norm_w), free(g->k_norm_b);
    free(g->cos_sin), free(g->q_ref), free(g->k_ref), free(g->topk_ref);
}

/* Prepare with `flavour`, score through a paged fp32 cache at isa; returns the number of
 * queries whose selection differs from the golden one, or -1 on an error. */
static int golden_selection_diffs(const dsa_golden *g, numla_dsa_rope flavour, numla_isa isa,
                                  int check_qk)
{
    const int32_t S = g->S, Hi = g->Hi, Di = g->Di, bs = 4, nblk = (S + bs - 1) / bs + 3;
    float *q = malloc(sizeof(float) * S * Hi * Di), *k = malloc(sizeof(float) * S * Di);
    float *w = malloc(sizeof(float) * S * Hi);
    memcpy(q, g->q_proj, sizeof(float) * S * Hi * Di);
    memcpy(k, g->k_proj, sizeof(float) * S * Di);
    memcpy(w, g->w_proj, sizeof(float) * S * Hi);
    numla_indexer_prep_args pa = {.num_tokens = S, .num_heads = Hi, .head_dim = Di,
                                  .rope_dim = g->Dr, .rope = flavour, .cos_sin = g->cos_sin,
                                  .k_norm_w = g->k_norm_w, .k_norm_b = g->k_norm_b, .q = q,
                                  .k = k, .w = w};
    int diffs = -1;
    if (numla_indexer_prepare(&pa) != NUMLA_STATUS_OK)
        goto out;
    if (check_qk) {
        double worst = 0;
        for (int64_t i = 0; i < (int64_t)S * Hi * Di; i++)
            worst = fmax(worst, fabs(q[i] - g->q_ref[i]) / (1 + fabs(g->q_ref[i])));
        for (int64_t i = 0; i < (int64_t)S * Di; i++)
            worst = fmax(worst, fabs(k[i] - g->k_ref[i]) / (1 + fabs(g->k_ref[i])));
        if (worst > 1e-5) {
            fprintf(stderr, "indexer q/k differ from transformers by %.3g\n", worst);
            goto out;
        }
    }
    /* paged cache, blocks in reverse order with a spare block of NaN between */
    float *cache = malloc(sizeof(float) * nblk * bs * Di);
    for (int64_t i = 0; i < (int64_t)nblk * bs * Di; i++)
        cache[i] = NAN;
    int32_t table[64], lens[1] = {S}, qsl[2] = {0, S};
    for (int32_t j = 0; j < (S + bs - 1) / bs; j++)
        table[j] = nblk - 1 - j;
    for (int32_t t = 0; t < S; t++)
        memcpy(cache + ((size_t)table[t / bs] * bs + t % bs) * Di, k + (size_t)t * Di,
               sizeof(float) * Di);
    int32_t *ix = malloc(sizeof(int32_t) * S * g->topk), *cnt = malloc(sizeof(int32_t) * S);
    numla_dsa_index_args a = {.num_seqs = 1, .num_heads = Hi, .head_dim = Di, .block_size = bs,
                              .num_blocks = nblk, .max_blocks_per_seq = (S + bs - 1) / bs,
                              .topk = g->topk, .q = q, .q_dtype = NUMLA_DTYPE_F32, .w = w,
                              .kcache = cache, .k_dtype = NUMLA_DTYPE_F32, .block_tables = table,
                              .seq_lens = lens, .query_start_loc = qsl, .causal = 1,
                              .scale = 1.0f / sqrtf((float)Di), .indices = ix, .counts = cnt};
    size_t wsb = numla_dsa_index_workspace_size(isa, &a, omp_get_max_threads());
    void *ws = malloc(wsb);
    if (numla_dsa_index(isa, &a, ws, wsb) == NUMLA_STATUS_OK) {
        diffs = 0;
        for (int32_t s = 0; s < S; s++) {
            /* the golden row: kept positions (future ones were set to -1), sorted */
            int32_t want[64], n = 0;
            for (int32_t j = 0; j < g->topk; j++) {
                float v = g->topk_ref[(size_t)s * g->topk + j];
                if (v >= 0)
                    want[n++] = (int32_t)v;
            }
            for (int32_t i = 1; i < n; i++)
                for (int32_t j = i; j > 0 && want[j - 1] > want[j]; j--) {
                    int32_t t = want[j];
                    want[j] = want[j - 1];
                    want[j - 1] = t;
                }
            int same = cnt[s] == n;
            for (int32_t j = 0; same && j < n; j++)
                same = ix[(size_t)s * g->topk + j] == want[j];
            diffs += !same;
        }
    }
    free(ws), free(ix), free(cnt), free(cache);
out:
    free(q), free(k), free(w);
    return diffs;
}

static void golden_case(const char *file, numla_dsa_rope flavour, numla_dsa_rope other)
{
    dsa_golden g = {0};
    CU_ASSERT_TRUE_FATAL(golden_load(file, &g));
    CU_ASSERT_EQUAL(g.topk, 16);
    CU_ASSERT_TRUE(g.S > g.topk); /* queries past topk really drop tokens */
    numla_isa isas[NUMLA_ISA_COUNT];
    int ni = numla_test_isas(isas);
    for (int i = 0; i < ni; i++) {
        int d = golden_selection_diffs(&g, flavour, isas[i], 1);
        if (d != 0)
            fprintf(stderr, "%s [%s]: %d queries select differently\n", file,
                    numla_isa_name(isas[i]), d);
        CU_ASSERT_EQUAL(d, 0);
    }
    /* the other flavour must not pass: the data tells them apart */
    CU_ASSERT_TRUE(golden_selection_diffs(&g, other, NUMLA_ISA_REF, 0) > 0);
    golden_free(&g);
}

static void test_v32_indexer(void)
{
    golden_case("tests/golden/dsa/v32_indexer.safetensors", NUMLA_DSA_ROPE_HALF,
                NUMLA_DSA_ROPE_INTERLEAVED);
}

static void test_glm5_indexer(void)
{
    golden_case("tests/golden/dsa/glm5_indexer.safetensors", NUMLA_DSA_ROPE_INTERLEAVED,
                NUMLA_DSA_ROPE_HALF);
}

NUMLA_TEST_SUITE(dsa_indexer_golden, NULL, NULL, NUMLA_TEST(test_v32_indexer),
                 NUMLA_TEST(test_glm5_indexer))
