/* Tests for kernels/mha_prefill (causal expanded-form attention), every ISA the CPU supports,
 * against a double-precision attention written here (a causal loop per query, no blocking).
 * Shapes: 5 heads (odd), several sequences per call with gaps between their rows (key rows
 * there NaN: never read) and row strides wider than H·D, prefix 0 and > 0, new lengths 1, 17
 * and 300 and around the 32-query and 64-key blocks, the DeepSeek widths (192 / 128), odd
 * query widths, value widths that are multiples of 8 but not 16 (avx2 runs them, avx512 falls
 * back). Then a row's result, bit for bit, whatever the split of its sequence into calls and
 * the thread count, with the keys past a call's last query NaN (causal limit). */
#include "test_util.h"

#include "kernels/mha_prefill.h"
#include "kernels/mha_prefill_internal.h" /* whether the avx2 and amx variants apply */

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
    /* the two key and value rows before each sequence's belong to none: never read */
    for (int32_t b = 0; b < B; b++)
        for (int64_t kr = k_start[b] - 2; kr < k_start[b]; kr++) {
            for (int64_t d = 0; d < ks; d++)
                k[kr * ks + d] = NAN;
            for (int64_t d = 0; d < vs; d++)
                v[kr * vs + d] = NAN;
        }
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
        /* the avx2 level runs its own variant where it applies, else the reference */
        const char *path = isas[ii] == NUMLA_ISA_AVX2 && !numla_mha_prefill_avx2_applies(&a)
                               ? " (reference)"
                               : "";
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
    /* a value width that is not a multiple of 8 (the vector variants fall back) */
    shape sh2 = {5, 13, 20, 3, len, pre};
    run_shape(&sh2, 13);
    /* value widths multiples of 8, not of 16 (avx2: its own variant, one P·V tile of 3 and of
     * 5 vectors; avx512: the reference), odd query widths down to 1 */
    shape sc = {3, 13, 24, 3, len, pre};
    run_shape(&sc, 17);
    shape sd = {2, 1, 40, 3, len, pre};
    run_shape(&sd, 18);
}

static void test_block_edges(void)
{
    /* query counts around the 32-row task and 6-row score tile, key counts around the 64-key
     * block (prefix + length = 63, 64, 65, 128, 129) */
    static const int32_t len[] = {31, 32, 33, 1, 64, 65, 7};
    static const int32_t pre[] = {32, 0, 31, 63, 64, 64, 58};
    shape sh = {3, 192, 128, 7, len, pre};
    run_shape(&sh, 19);
    shape so = {2, 23, 56, 7, len, pre};
    run_shape(&so, 20);
}

/* One sequence of n rows over a prefix P: the whole sequence in one call, against the same rows
 * split at `cut` into two calls (the first with the keys it must not see, positions P + cut
 * on, NaN), each on nt threads: every level, out and lse bit for bit. */
static void check_split(int32_t H, int32_t D, int32_t Dv, int32_t P, int32_t n, int32_t cut,
                        int nt, uint64_t seed)
{
    const int64_t L = (int64_t)P + n, qs = (int64_t)H * D, ks = qs, vs = (int64_t)H * Dv, os = vs;
    float *q = malloc((size_t)(n * qs) * sizeof *q), *k = malloc((size_t)(L * ks) * sizeof *k);
    float *v = malloc((size_t)(L * vs) * sizeof *v);
    float *kc = malloc((size_t)(L * ks) * sizeof *kc), *vc = malloc((size_t)(L * vs) * sizeof *vc);
    float *o1 = malloc((size_t)(n * os) * sizeof *o1), *o2 = malloc((size_t)(n * os) * sizeof *o2);
    float *l1 = malloc((size_t)(n * H) * sizeof *l1), *l2 = malloc((size_t)(n * H) * sizeof *l2);
    numla_test_rng r = {seed};
    for (int64_t i = 0; i < n * qs; i++)
        q[i] = (float)numla_test_rng_normal(&r);
    for (int64_t i = 0; i < L * ks; i++)
        k[i] = (float)numla_test_rng_normal(&r);
    for (int64_t i = 0; i < L * vs; i++)
        v[i] = (float)numla_test_rng_normal(&r);
    for (int64_t i = 0; i < L * ks; i++)
        kc[i] = i < (P + cut) * ks ? k[i] : NAN;
    for (int64_t i = 0; i < L * vs; i++)
        vc[i] = i < (P + cut) * vs ? v[i] : NAN;
    int32_t zero = 0, qst[2] = {0, cut}, qlen[3] = {n, cut, n - cut}, pre[3] = {P, P, P + cut};
    numla_mha_prefill_args a = {
        .num_seqs = 1, .num_heads = H, .qk_dim = D, .v_dim = Dv,
        .q_start = &zero, .q_len = &qlen[0], .k_start = &zero, .prefix = &pre[0],
        .scale = (float)(2.0 / sqrt((double)D)),
        .q = q, .q_stride = qs, .k = k, .k_stride = ks, .v = v, .v_stride = vs,
        .out = o1, .out_stride = os, .lse = l1,
    };
    numla_isa isas[NUMLA_ISA_COUNT];
    int ni = numla_test_isas(isas);
    const int nt0 = omp_get_max_threads();
    for (int ii = 0; ii < ni; ii++) {
        size_t wsb = numla_mha_prefill_workspace_size(isas[ii], &a, nt0 > nt ? nt0 : nt);
        void *ws = malloc(wsb);
        a.q_start = &zero, a.q_len = &qlen[0], a.prefix = &pre[0], a.k = k, a.v = v;
        a.out = o1, a.lse = l1;
        NUMLA_ASSERT_MSG(numla_mha_prefill(isas[ii], &a, ws, wsb) == NUMLA_STATUS_OK, "%s",
                         numla_isa_name(isas[ii]));
        omp_set_num_threads(nt);
        a.out = o2, a.lse = l2;
        for (int part = 0; part < 2; part++) {
            a.q_start = &qst[part], a.q_len = &qlen[1 + part], a.prefix = &pre[1 + part];
            a.k = part == 0 ? kc : k, a.v = part == 0 ? vc : v;
            NUMLA_ASSERT_MSG(numla_mha_prefill(isas[ii], &a, ws, wsb) == NUMLA_STATUS_OK,
                             "%s part %d", numla_isa_name(isas[ii]), part);
        }
        omp_set_num_threads(nt0);
        int64_t diff = 0;
        for (int64_t i = 0; i < n * os; i++)
            diff += !(o1[i] == o2[i]);
        for (int64_t i = 0; i < n * H; i++)
            diff += !(l1[i] == l2[i]);
        NUMLA_ASSERT_MSG(diff == 0,
                         "%s H=%d D=%d Dv=%d P=%d n=%d cut=%d threads %d: %lld values differ",
                         numla_isa_name(isas[ii]), H, D, Dv, P, n, cut, nt, (long long)diff);
        free(ws);
    }
    free(q);
    free(k);
    free(v);
    free(kc);
    free(vc);
    free(o1);
    free(o2);
    free(l1);
    free(l2);
}

static void test_rows_independent_of_split(void)
{
    check_split(2, 192, 128, 37, 150, 45, 1, 21);  /* cut inside a query block and a key block */
    check_split(2, 192, 128, 0, 100, 64, 2, 22);   /* cut on both blocks' edges */
    check_split(3, 13, 24, 5, 70, 1, 1, 23);       /* odd widths, a one-row first call */
    check_split(3, 40, 32, 100, 40, 39, 2, 24);    /* a one-row second call */
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
                 NUMLA_TEST(test_small_odd_widths), NUMLA_TEST(test_block_edges),
                 NUMLA_TEST(test_rows_independent_of_split), NUMLA_TEST(test_one_head_one_token),
                 NUMLA_TEST(test_bad_args))
