/* tests/unit/kernels/mla_attn_check.h — problem builder, double-precision reference and
 * comparison for the mla_attn and mla_attn_slow suites (shared, header-only; the reference is
 * written from docs/design.md §4/§5 and mla_attn.h, independent of kernels/).
 *
 * Tolerances (element-wise |x - ref| <= atol + rtol·|ref| AND over the whole output
 * 1 - 2Σxy/Σ(x² + y²) < cos):
 *   bf16 output:  atol 1e-2, rtol 1.6e-2, cos 1e-5
 *   fp16 output:  atol 2e-3, rtol 2e-3,   cos 1e-6
 *   fp32 output:  atol 1e-4, rtol 1e-4,   cos 1e-8
 *   lse:          1e-4 + 1e-5·|lse|
 * The same for every ISA level (amx included where the CPU and OS allow tiles): amx forms
 * exact bf16 x bf16 products of a bf16 q, or of an fp32 / fp16 q split into bf16 hi + lo
 * (2^-17 relative), and every path accumulates in fp32.
 */
#ifndef NUMLA_TESTS_MLA_ATTN_CHECK_H
#define NUMLA_TESTS_MLA_ATTN_CHECK_H

#include "test_util.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "kernels/mla_attn.h"

typedef struct mla_case {
    int32_t B, H, Dc, Dr, bs;
    const int32_t *lens; /* (B) keys per sequence */
    const int32_t *nq;   /* (B) queries per sequence, NULL: decode */
    int causal;
    numla_dtype qt, kvt;
    uint64_t seed;
} mla_case;

typedef struct mla_problem {
    mla_case c;
    int32_t T;           /* query rows */
    int64_t num_blocks;
    int32_t mbps;        /* max blocks per seq */
    int32_t *lens;       /* (B) */
    int32_t *qsl;        /* (B + 1) or NULL */
    int32_t *tables;     /* (B, mbps) */
    void *q;             /* (T, H, Dc + Dr) */
    void *kv;            /* (num_blocks, bs, Dc + Dr) */
    float scale;
    double *ref;         /* (T, H, Dc) */
    double *ref_lse;     /* (T, H) */
} mla_problem;

static void mla_store(void *p, numla_dtype t, size_t i, float v) { numla_store_f32(p, t, i, v); }

static void mla_store_nan(void *p, numla_dtype t, size_t i)
{
    if (t == NUMLA_DTYPE_F32)
        ((float *)p)[i] = NAN;
    else
        ((uint16_t *)p)[i] = t == NUMLA_DTYPE_BF16 ? 0x7fc0 : 0x7e00;
}

static int64_t mla_case_limit(const mla_problem *p, int32_t b, int32_t i)
{
    int32_t n = p->c.nq ? p->c.nq[b] : 1;
    if (p->c.nq && p->c.causal)
        return (int64_t)p->c.lens[b] - n + i + 1;
    return p->c.lens[b];
}

/* Build inputs: shuffled block tables over a pool with spare blocks; rows past each
 * sequence's end and blocks nobody owns hold NaN. */
static mla_problem *mla_problem_make(const mla_case *c)
{
    mla_problem *p = calloc(1, sizeof *p);
    p->c = *c;
    numla_test_rng rng = {c->seed};
    int32_t B = c->B, W = c->Dc + c->Dr;
    p->lens = malloc(sizeof(int32_t) * (size_t)(B > 0 ? B : 1));
    int64_t used = 0;
    p->mbps = 1;
    for (int32_t b = 0; b < B; b++) {
        p->lens[b] = c->lens[b];
        int32_t nb = (c->lens[b] + c->bs - 1) / c->bs;
        used += nb;
        p->mbps = nb + 1 > p->mbps ? nb + 1 : p->mbps; /* one spare column, never read */
    }
    if (c->nq) {
        p->qsl = malloc(sizeof(int32_t) * (size_t)(B + 1));
        p->qsl[0] = 0;
        for (int32_t b = 0; b < B; b++)
            p->qsl[b + 1] = p->qsl[b] + c->nq[b];
        p->T = p->qsl[B];
    } else {
        p->T = B;
    }
    p->num_blocks = used + used / 4 + 3;
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)p->num_blocks);
    for (int64_t i = 0; i < p->num_blocks; i++)
        perm[i] = (int32_t)i;
    for (int64_t i = p->num_blocks - 1; i > 0; i--) {
        int64_t j = (int64_t)(numla_test_rng_u64(&rng) % (uint64_t)(i + 1));
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    p->tables = malloc(sizeof(int32_t) * (size_t)B * (size_t)p->mbps + 4);
    size_t kvn = (size_t)p->num_blocks * (size_t)c->bs * (size_t)W;
    p->kv = malloc(kvn * numla_dtype_size(c->kvt));
    for (size_t i = 0; i < kvn; i++)
        mla_store_nan(p->kv, c->kvt, i);
    /* Per-dimension offsets make outputs O(1) rather than averaging to ~0. */
    float *off = malloc(sizeof(float) * (size_t)W);
    for (int32_t d = 0; d < W; d++)
        off[d] = (float)(0.5 * numla_test_rng_normal(&rng));
    int64_t next = 0;
    for (int32_t b = 0; b < B; b++) {
        for (int32_t j = 0; j < p->mbps; j++)
            p->tables[(size_t)b * p->mbps + j] = -7; /* beyond the sequence: never read */
        int32_t nb = (c->lens[b] + c->bs - 1) / c->bs;
        for (int32_t j = 0; j < nb; j++) {
            int32_t blk = perm[next++];
            p->tables[(size_t)b * p->mbps + j] = blk;
            for (int32_t o = 0; o < c->bs && (int64_t)j * c->bs + o < c->lens[b]; o++)
                for (int32_t d = 0; d < W; d++)
                    mla_store(p->kv, c->kvt, ((size_t)blk * c->bs + o) * W + d,
                              (float)(off[d] + numla_test_rng_normal(&rng)));
        }
    }
    size_t qn = (size_t)p->T * c->H * W;
    p->q = malloc(qn * numla_dtype_size(c->qt) + 4);
    for (size_t i = 0; i < qn; i++)
        mla_store(p->q, c->qt, i, (float)(0.6 * numla_test_rng_normal(&rng)));
    p->scale = (float)(1.5896 / sqrt(192.0));
    free(off);
    free(perm);
    return p;
}

static double mla_ld(const void *p, numla_dtype t, size_t i) { return numla_load_f32(p, t, i); }

/* Double-precision softmax attention, one (query, head) row at a time. */
static void mla_problem_reference(mla_problem *p)
{
    const mla_case *c = &p->c;
    int32_t H = c->H, Dc = c->Dc, W = c->Dc + c->Dr;
    p->ref = calloc((size_t)p->T * H * Dc + 1, sizeof(double));
    p->ref_lse = calloc((size_t)p->T * H + 1, sizeof(double));
    int64_t rows = (int64_t)p->T * H;
    /* the cache read as float once (exact for every cache dtype): each row below reads every
     * key it sees twice, and each key is seen by H rows or more */
    const size_t kvn = (size_t)p->num_blocks * (size_t)c->bs * (size_t)W;
    float *kvf = malloc(sizeof(float) * kvn + 4);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < kvn; i++)
        kvf[i] = numla_load_f32(p->kv, c->kvt, i);
#pragma omp parallel
    {
        int64_t maxl = 1;
        for (int32_t b = 0; b < c->B; b++)
            maxl = c->lens[b] > maxl ? c->lens[b] : maxl;
        double *s = malloc(sizeof(double) * (size_t)maxl);
        double *qd = malloc(sizeof(double) * (size_t)W);
#pragma omp for schedule(dynamic, 1)
        for (int64_t row = 0; row < rows; row++) {
            int32_t qi = (int32_t)(row / H);
            int32_t b = 0, i = 0;
            if (p->qsl) {
                while (p->qsl[b + 1] <= qi)
                    b++;
                i = qi - p->qsl[b];
            } else {
                b = qi;
            }
            int64_t lim = mla_case_limit(p, b, i);
            double *o = p->ref + (size_t)row * Dc;
            for (int32_t d = 0; d < W; d++)
                qd[d] = mla_ld(p->q, c->qt, (size_t)row * W + d);
            if (lim <= 0) {
                p->ref_lse[row] = -INFINITY;
                continue;
            }
            double mx = -INFINITY;
            for (int64_t t = 0; t < lim; t++) {
                int32_t blk = p->tables[(size_t)b * p->mbps + t / c->bs];
                size_t base = ((size_t)blk * c->bs + (size_t)(t % c->bs)) * W;
                double acc = 0;
                for (int32_t d = 0; d < W; d++)
                    acc += qd[d] * (double)kvf[base + d];
                s[t] = acc * p->scale;
                mx = s[t] > mx ? s[t] : mx;
            }
            double sum = 0;
            for (int64_t t = 0; t < lim; t++) {
                double e = exp(s[t] - mx);
                sum += e;
                int32_t blk = p->tables[(size_t)b * p->mbps + t / c->bs];
                size_t base = ((size_t)blk * c->bs + (size_t)(t % c->bs)) * W;
                for (int32_t d = 0; d < Dc; d++)
                    o[d] += e * (double)kvf[base + d];
            }
            for (int32_t d = 0; d < Dc; d++)
                o[d] /= sum;
            p->ref_lse[row] = mx + log(sum);
        }
        free(s);
        free(qd);
    }
    free(kvf);
}

static void mla_problem_free(mla_problem *p)
{
    if (!p)
        return;
    free(p->lens);
    free(p->qsl);
    free(p->tables);
    free(p->q);
    free(p->kv);
    free(p->ref);
    free(p->ref_lse);
    free(p);
}

static numla_mla_attn_args mla_problem_args(const mla_problem *p, void *out, numla_dtype ot, float *lse)
{
    return (numla_mla_attn_args){
        .num_seqs = p->c.B, .num_heads = p->c.H, .kv_lora_rank = p->c.Dc, .rope_dim = p->c.Dr,
        .block_size = p->c.bs, .num_blocks = p->num_blocks, .max_blocks_per_seq = p->mbps,
        .q = p->q, .q_dtype = p->c.qt, .kv_cache = p->kv, .kv_dtype = p->c.kvt,
        .block_tables = p->tables, .seq_lens = p->lens, .query_start_loc = p->qsl,
        .causal = p->c.causal, .scale = p->scale, .out = out, .out_dtype = ot, .lse = lse};
}

/* Run the kernel at `isa` with output dtype `ot` and compare; returns 1 when it passes. */
static int mla_problem_check(const mla_problem *p, numla_isa isa, numla_dtype ot, const char *label)
{
    const mla_case *c = &p->c;
    size_t nout = (size_t)p->T * c->H * c->Dc, nrow = (size_t)p->T * c->H;
    void *out = malloc(nout * numla_dtype_size(ot) + 4);
    float *lse = malloc(sizeof(float) * nrow + 4);
    memset(out, 0xff, nout * numla_dtype_size(ot)); /* NaN pattern in every dtype */
    for (size_t i = 0; i < nrow; i++)
        lse[i] = NAN;
    numla_mla_attn_args a = mla_problem_args(p, out, ot, lse);
    int threads = 1;
#pragma omp parallel
#pragma omp single
    threads = omp_get_num_threads();
    size_t wsb = numla_mla_attn_workspace_size(isa, &a, threads);
    void *ws = malloc(wsb);
    numla_status st = numla_mla_attn(isa, &a, ws, wsb);
    /* lse is optional: without it the same call must give the same bits in out */
    int same_without_lse = 1;
    if (st == NUMLA_STATUS_OK) {
        void *out2 = malloc(nout * numla_dtype_size(ot) + 4);
        memset(out2, 0xff, nout * numla_dtype_size(ot));
        numla_mla_attn_args a2 = mla_problem_args(p, out2, ot, NULL);
        same_without_lse = numla_mla_attn(isa, &a2, ws, wsb) == NUMLA_STATUS_OK &&
                           memcmp(out, out2, nout * numla_dtype_size(ot)) == 0;
        free(out2);
    }
    free(ws);
    double atol = 1e-4, rtol = 1e-4, ctol = 1e-8;
    if (ot == NUMLA_DTYPE_BF16)
        atol = 1e-2, rtol = 1.6e-2, ctol = 1e-5;
    else if (ot == NUMLA_DTYPE_F16)
        atol = 2e-3, rtol = 2e-3, ctol = 1e-6;
    int ok = st == NUMLA_STATUS_OK;
    if (!ok)
        fprintf(stderr, "\n    %s [%s]: status %s: %s\n", label, numla_isa_name(isa),
                numla_status_name(st), numla_error_message());
    double sxy = 0, sxx = 0, worst = 0;
    size_t bad = 0, nonfinite = 0, first_bad = 0;
    for (size_t i = 0; ok && i < nout; i++) {
        double x = numla_load_f32(out, ot, i), y = p->ref[i];
        if (!isfinite(x)) {
            nonfinite++;
            continue;
        }
        double e = fabs(x - y), lim = atol + rtol * fabs(y);
        if (e > lim && !bad++)
            first_bad = i;
        worst = e / lim > worst ? e / lim : worst;
        sxy += x * y;
        sxx += x * x + y * y;
    }
    double cosm = sxx > 0 ? 1.0 - 2.0 * sxy / sxx : 0.0;
    size_t lbad = 0;
    double lworst = 0;
    for (size_t r = 0; ok && r < nrow; r++) {
        double x = lse[r], y = p->ref_lse[r];
        if (isinf(y) && y < 0) {
            lbad += !(isinf(x) && x < 0);
            continue;
        }
        double lim = 1e-4 + 1e-5 * fabs(y), e = fabs(x - y);
        lbad += !(e <= lim);
        lworst = e > lworst ? e : lworst;
    }
    if (ok && (bad || nonfinite || cosm >= ctol || lbad || !same_without_lse)) {
        ok = 0;
        fprintf(stderr,
                "\n    %s [%s q=%s kv=%s out=%s]: %zu/%zu elements off (first %zu: %g vs %g), "
                "%zu non-finite, 1-cos %.3g (limit %.1g), %zu lse off (worst %.3g)%s\n",
                label, numla_isa_name(isa), numla_dtype_name(c->qt), numla_dtype_name(c->kvt),
                numla_dtype_name(ot), bad, nout, first_bad,
                bad ? numla_load_f32(out, ot, first_bad) : 0.0, bad ? p->ref[first_bad] : 0.0,
                nonfinite, cosm, ctol, lbad, lworst,
                same_without_lse ? "" : "; with lse = NULL the output differs");
    }
    if (getenv("NUMLA_TEST_VERBOSE"))
        fprintf(stderr, "\n    %s [%s q=%s kv=%s out=%s]: worst err/limit %.3f, 1-cos %.3g, lse err %.3g",
                label, numla_isa_name(isa), numla_dtype_name(c->qt), numla_dtype_name(c->kvt),
                numla_dtype_name(ot), worst, cosm, lworst);
    CU_ASSERT(ok);
    free(out);
    free(lse);
    return ok;
}

/* Build, reference once, then check every supported ISA for each output dtype in `ots`. */
/* Multiply-adds of the case's Q·K: (query, head) rows times the keys each sees, times the row
 * width. */
static double mla_problem_work(const mla_problem *p)
{
    double keys = 0;
    for (int32_t b = 0; b < p->c.B; b++) {
        const int32_t n = p->c.nq ? p->c.nq[b] : 1;
        for (int32_t i = 0; i < n; i++)
            keys += (double)mla_case_limit(p, b, i);
    }
    return keys * p->c.H * (p->c.Dc + p->c.Dr);
}

/* A lean sweep (the sanitizer and clang passes) runs the scalar reference variant on the cases
 * up to this much work (the small-dims, block-size, head-count, dtype and multi-token cases,
 * and (3, 1234, 16)); the larger ones (past 128k keys, head groups, causal Dc 512) at the
 * vector levels only, which go through the same frame and work split. Under the sanitizers the
 * scalar variant was half the suite's time. The default sweep runs it on every case. */
#define MLA_LEAN_REF_WORK 7e7

/* Every level the CPU has, each output dtype. A level whose variant does not take the case runs
 * the level below's (numla_mla_attn_variant: amx and avx512bf16 run avx512's on an fp32 or fp16
 * cache), the same code on the same inputs: that variant is checked once. */
__attribute__((unused)) static void mla_check_case(const mla_case *c, const numla_dtype *ots, int nots, const char *label)
{
    mla_problem *p = mla_problem_make(c);
    mla_problem_reference(p);
    const int ref_too = !numla_test_sweep_lean() || mla_problem_work(p) <= MLA_LEAN_REF_WORK;
    numla_isa isas[NUMLA_ISA_COUNT];
    const char *done[NUMLA_ISA_COUNT];
    int n = numla_test_isas(isas), ndone = 0;
    for (int i = 0; i < n; i++) {
        if (isas[i] == NUMLA_ISA_REF && !ref_too)
            continue;
        const numla_mla_attn_args a = mla_problem_args(p, NULL, ots[0], NULL);
        const char *v = numla_mla_attn_variant(isas[i], &a);
        int seen = 0;
        for (int k = 0; k < ndone; k++)
            seen |= !strcmp(done[k], v);
        if (seen)
            continue;
        done[ndone++] = v;
        for (int j = 0; j < nots; j++)
            mla_problem_check(p, isas[i], ots[j], label);
    }
    mla_problem_free(p);
}

#endif
