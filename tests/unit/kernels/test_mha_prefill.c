/* Tests for kernels/mha_prefill (causal expanded-form attention), every ISA the CPU supports,
 * against a double-precision attention written here (a causal loop per query, no blocking).
 * Shapes: 5 heads (odd), several sequences per call with gaps between their rows and row
 * strides wider than H·D, prefix 0 and > 0, new lengths 1, 17 and 300, the DeepSeek widths
 * (192 / 128) and a small odd query width. */
#include "test_util.h"

#include "kernels/mha_prefill.h"
#include "kernels/mha_prefill_internal.h" /* whether the amx variant applies */

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct shape {
    int32_t H, D, Dv;
    int32_t nseq;
    const int32_t *len;    /* new tokens per sequence */
    const int32_t *prefix; /* cached tokens per sequence */
} shape;

/* Double reference: out (rows, H, Dv) with the kernel's row indexing, lse (rows, H). */
static void reference(const numla_mha_prefill_args *a, double *out, double *lse)
{
    const int32_t H = a->num_heads, D = a->qk_dim, Dv = a->v_dim;
    for (int32_t b = 0; b < a->num_seqs; b++)
        for (int32_t i = 0; i < a->q_len[b]; i++)
            for (int32_t h = 0; h < H; h++) {
                const int64_t qr = a->q_start[b] + i;
                const float *q = a->q + qr * a->q_stride + h * D;
                const int32_t nk = a->prefix[b] + i + 1;
                double *s = malloc((size_t)nk * sizeof *s), m = -INFINITY, sum = 0;
                for (int32_t j = 0; j < nk; j++) {
                    const float *k = a->k + (a->k_start[b] + j) * a->k_stride + h * D;
                    double acc = 0;
                    for (int32_t d = 0; d < D; d++)
                        acc += (double)q[d] * k[d];
                    s[j] = acc * (double)a->scale;
                    m = s[j] > m ? s[j] : m;
                }
                for (int32_t j = 0; j < nk; j++)
                    sum += exp(s[j] - m);
                double *o = out + (qr * H + h) * Dv;
                for (int32_t d = 0; d < Dv; d++)
                    o[d] = 0;
                for (int32_t j = 0; j < nk; j++) {
                    const float *v = a->v + (a->k_start[b] + j) * a->v_stride + h * Dv;
                    const double p = exp(s[j] - m) / sum;
                    for (int32_t d = 0; d < Dv; d++)
                        o[d] += p * v[d];
                }
                lse[qr * H + h] = m + log(sum);
                free(s);
            }
}

static void run_shape(const shape *sh, uint64_t seed)
{
    const int32_t H = sh->H, D = sh->D, Dv = sh->Dv, B = sh->nseq;
    int32_t q_start[8], k_start[8], q_len[8], prefix[8];
    int64_t qrows = 0, krows = 0;
    for (int32_t b = 0; b < B; b++) {
        qrows += 3; /* a gap of rows no sequence owns: must stay untouched */
        q_start[b] = (int32_t)qrows;
        q_len[b] = sh->len[b];
        prefix[b] = sh->prefix[b];
        qrows += q_len[b];
        krows += 2;
        k_start[b] = (int32_t)krows;
        krows += prefix[b] + q_len[b];
    }
    const int64_t qs = (int64_t)H * D + 7, ks = (int64_t)H * D + 5, vs = (int64_t)H * Dv + 3,
                  os = (int64_t)H * Dv + 16;
    float *q = malloc((size_t)(qrows * qs) * sizeof *q);
    float *k = malloc((size_t)(krows * ks) * sizeof *k);
    float *v = malloc((size_t)(krows * vs) * sizeof *v);
    float *out = malloc((size_t)(qrows * os) * sizeof *out);
    float *lse = malloc((size_t)(qrows * H) * sizeof *lse);
    double *rout = malloc((size_t)(qrows * H * Dv) * sizeof *rout);
    double *rlse = malloc((size_t)(qrows * H) * sizeof *rlse);
    numla_test_rng r = {seed};
    /* query and key entries of size ~1 and a scale giving scores of a few units, so the
     * softmax is far from uniform and far from one-hot */
    for (int64_t i = 0; i < qrows * qs; i++)
        q[i] = (float)numla_test_rng_normal(&r);
    for (int64_t i = 0; i < krows * ks; i++)
        k[i] = (float)numla_test_rng_normal(&r);
    for (int64_t i = 0; i < krows * vs; i++)
        v[i] = (float)numla_test_rng_normal(&r);
    numla_mha_prefill_args a = {
        .num_seqs = B, .num_heads = H, .qk_dim = D, .v_dim = Dv,
        .q_start = q_start, .q_len = q_len, .k_start = k_start, .prefix = prefix,
        .scale = (float)(2.0 / sqrt((double)D)),
        .q = q, .q_stride = qs, .k = k, .k_stride = ks, .v = v, .v_stride = vs,
        .out = out, .out_stride = os, .lse = lse,
    };
    reference(&a, rout, rlse);
    /* every ISA level: amx (where the CPU and OS allow tiles) runs AMX scores where they apply,
     * avx512bf16 (what the engine passes to turn them off) the fp32 path */
    numla_isa isas[NUMLA_ISA_COUNT];
    int ni = numla_test_isas(isas);
    for (int ii = 0; ii < ni; ii++) {
        /* split-bf16 scores (kernels/x86/mha_prefill_amx.h) drop terms of 2^-17 relative per
         * product: ~1e-5 here, against ~1e-6 for the fp32 paths */
        const double tol = isas[ii] == NUMLA_ISA_AMX && numla_mha_prefill_amx_applies(&a)
                               ? 1e-4
                               : 2e-5;
        for (int64_t i = 0; i < qrows * os; i++)
            out[i] = NAN;
        for (int64_t i = 0; i < qrows * H; i++)
            lse[i] = NAN;
        size_t wsb = numla_mha_prefill_workspace_size(isas[ii], &a, omp_get_max_threads());
        void *ws = malloc(wsb);
        numla_status st = numla_mha_prefill(isas[ii], &a, ws, wsb);
        NUMLA_ASSERT_MSG(st == NUMLA_STATUS_OK, "%s: status %d", numla_isa_name(isas[ii]), st);
        double worst = 0, worst_l = 0;
        int64_t bad_gap = 0;
        for (int32_t b = 0; b < B; b++)
            for (int32_t i = 0; i < q_len[b]; i++)
                for (int32_t h = 0; h < H; h++) {
                    const int64_t qr = q_start[b] + i;
                    for (int32_t d = 0; d < Dv; d++) {
                        double e = fabs(out[qr * os + h * Dv + d] - rout[(qr * H + h) * Dv + d]);
                        worst = e > worst || isnan(e) ? e : worst;
                    }
                    double e = fabs(lse[qr * H + h] - rlse[qr * H + h]);
                    worst_l = e > worst_l || isnan(e) ? e : worst_l;
                }
        /* rows in the gaps and the stride padding are never written */
        for (int32_t b = 0; b < B; b++)
            for (int64_t qr = q_start[b] - 3; qr < q_start[b]; qr++)
                for (int64_t d = 0; d < os; d++)
                    bad_gap += !isnan(out[qr * os + d]);
        const char *path = "";
        NUMLA_ASSERT_MSG(worst < tol && !isnan(worst), "%s%s H=%d D=%d Dv=%d: max |out err| %g",
                         numla_isa_name(isas[ii]), path, H, D, Dv, worst);
        NUMLA_ASSERT_MSG(worst_l < tol && !isnan(worst_l), "%s%s: max |lse err| %g",
                         numla_isa_name(isas[ii]), path, worst_l);
        NUMLA_ASSERT_MSG(bad_gap == 0, "%s: %lld values written outside the sequences' rows",
                         numla_isa_name(isas[ii]), (long long)bad_gap);
        free(ws);
    }
    free(q);
    free(k);
    free(v);
    free(out);
    free(lse);
    free(rout);
    free(rlse);
}

static void test_deepseek_widths(void)
{
    /* lengths 1, 17, 300 with prefix 0 and > 0 (one call, gaps between sequences) */
    static const int32_t len[] = {1, 17, 300, 1, 17, 300};
    static const int32_t pre[] = {0, 0, 0, 5, 64, 129};
    shape sh = {5, 192, 128, 6, len, pre};
    run_shape(&sh, 11);
}

static void test_small_odd_widths(void)
{
    static const int32_t len[] = {300, 17, 1};
    static const int32_t pre[] = {70, 0, 33};
    shape sh = {5, 40, 32, 3, len, pre};
    run_shape(&sh, 12);
    /* AMX widths other than DeepSeek's: 64 / 96 (one 64-dim P·V group and a 32-dim rest) and
     * 32 / 32 (the rest path only) */
    shape sa = {3, 64, 96, 3, len, pre};
    run_shape(&sa, 15);
    shape sb = {3, 32, 32, 3, len, pre};
    run_shape(&sb, 16);
    /* a value width that is not a multiple of 16 (the vector variant falls back) */
    shape sh2 = {5, 13, 20, 3, len, pre};
    run_shape(&sh2, 13);
}

static void test_one_head_one_token(void)
{
    static const int32_t len[] = {1};
    static const int32_t pre[] = {0};
    shape sh = {1, 192, 128, 1, len, pre};
    run_shape(&sh, 14);
}

static void test_bad_args(void)
{
    int32_t z = 0, one = 1, neg = -1;
    float x[64] = {0};
    numla_mha_prefill_args a = {
        .num_seqs = 1, .num_heads = 1, .qk_dim = 4, .v_dim = 4,
        .q_start = &z, .q_len = &one, .k_start = &z, .prefix = &neg, .scale = 1,
        .q = x, .q_stride = 4, .k = x, .k_stride = 4, .v = x, .v_stride = 4,
        .out = x + 32, .out_stride = 4,
    };
    char ws[4096];
    CU_ASSERT_EQUAL(numla_mha_prefill(NUMLA_ISA_REF, &a, ws, sizeof ws), NUMLA_STATUS_INVALID_ARG);
    a.prefix = &z;
    a.q_stride = 3;
    CU_ASSERT_EQUAL(numla_mha_prefill(NUMLA_ISA_REF, &a, ws, sizeof ws), NUMLA_STATUS_INVALID_ARG);
    a.q_stride = 4;
    CU_ASSERT_EQUAL(numla_mha_prefill(NUMLA_ISA_REF, &a, ws, 1), NUMLA_STATUS_INVALID_ARG);
}

NUMLA_TEST_SUITE(mha_prefill, NULL, NULL, NUMLA_TEST(test_deepseek_widths),
                 NUMLA_TEST(test_small_odd_widths), NUMLA_TEST(test_one_head_one_token),
                 NUMLA_TEST(test_bad_args))
