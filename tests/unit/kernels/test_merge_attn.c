/* Tests for kernels/merge_attn (merge_attn_states), every ISA the CPU supports.
 * The partial results come from a small double-precision attention written here: a context
 * split at every position and merged must give the unsplit attention; the ±inf rules, exact
 * pass-through of a lone side, and in-place use (out == a, out == b) are checked separately. */
#include "test_util.h"

#include "kernels/merge_attn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { H = 3, DK = 24, L = 40 };

typedef struct attn_data {
    int32_t dim;
    double q[H][DK];
    double k[L][DK];
    double *v; /* (L, dim) */
} attn_data;

static void attn_init(attn_data *d, int32_t dim, uint64_t seed)
{
    numla_test_rng r = {seed};
    d->dim = dim;
    for (int h = 0; h < H; h++)
        for (int j = 0; j < DK; j++)
            d->q[h][j] = numla_test_rng_normal(&r);
    for (int t = 0; t < L; t++)
        for (int j = 0; j < DK; j++)
            d->k[t][j] = numla_test_rng_normal(&r);
    d->v = malloc((size_t)L * (size_t)dim * sizeof *d->v);
    for (size_t i = 0; i < (size_t)L * (size_t)dim; i++)
        d->v[i] = numla_test_rng_normal(&r);
}

/* Attention of every head over keys [lo, hi): out (H, dim) and natural-log LSE (H). The
 * 0.6 scale spreads the scores over several units so the weights are far from uniform.
 * An empty range gives zeros and -inf, like a kernel that saw no key. */
static void attn_partial(const attn_data *d, int lo, int hi, double *out, double *lse)
{
    for (int h = 0; h < H; h++) {
        double *o = out + (size_t)h * (size_t)d->dim;
        memset(o, 0, (size_t)d->dim * sizeof *o);
        if (lo >= hi) {
            lse[h] = -INFINITY;
            continue;
        }
        double s[L], m = -INFINITY, sum = 0;
        for (int t = lo; t < hi; t++) {
            s[t] = 0;
            for (int j = 0; j < DK; j++)
                s[t] += d->q[h][j] * d->k[t][j];
            s[t] *= 0.6;
            m = s[t] > m ? s[t] : m;
        }
        for (int t = lo; t < hi; t++)
            sum += exp(s[t] - m);
        for (int t = lo; t < hi; t++) {
            double p = exp(s[t] - m) / sum;
            for (int i = 0; i < d->dim; i++)
                o[i] += p * d->v[(size_t)t * (size_t)d->dim + i];
        }
        lse[h] = m + log(sum);
    }
}

static void to_f32(float *dst, const double *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = (float)src[i];
}

/* Compare a merged float result with the double reference; returns the number of bad values. */
static int check_close(const char *what, numla_isa isa, int split, int32_t dim, const float *out,
                       const float *lse, const double *ref, const double *ref_lse)
{
    int bad = 0;
    for (int h = 0; h < H; h++) {
        if (!(fabs(lse[h] - ref_lse[h]) <= 4e-6 * fmax(1.0, fabs(ref_lse[h])))) {
            NUMLA_ASSERT_MSG(0, "%s %s dim=%d split=%d head %d: lse %.9g, want %.9g", what,
                             numla_isa_name(isa), dim, split, h, lse[h], ref_lse[h]);
            bad++;
        }
        for (int i = 0; i < dim && bad < 4; i++) {
            double want = ref[(size_t)h * (size_t)dim + i], got = out[(size_t)h * (size_t)dim + i];
            if (!(fabs(got - want) <= 2e-6 + 2e-6 * fabs(want))) {
                NUMLA_ASSERT_MSG(0, "%s %s dim=%d split=%d head %d elem %d: %.9g, want %.9g", what,
                                 numla_isa_name(isa), dim, split, h, i, got, want);
                bad++;
            }
        }
    }
    return bad;
}

static void split_everywhere(int32_t dim, uint64_t seed)
{
    numla_isa isas[NUMLA_ISA_COUNT];
    int n = numla_test_isas(isas);
    attn_data d;
    attn_init(&d, dim, seed);
    const size_t sz = (size_t)H * (size_t)dim;
    double *full = malloc(sz * sizeof *full), full_lse[H];
    double *pa = malloc(sz * sizeof *pa), *pb = malloc(sz * sizeof *pb), la[H], lb[H];
    float *fa = malloc(sz * sizeof *fa), *fb = malloc(sz * sizeof *fb), *fo = malloc(sz * sizeof *fo);
    float fla[H], flb[H], flo[H];
    attn_partial(&d, 0, L, full, full_lse);
    int bad = 0;
    for (int i = 0; i < n; i++)
        for (int p = 0; p <= L && bad < 8; p++) {
            attn_partial(&d, 0, p, pa, la);
            attn_partial(&d, p, L, pb, lb);
            to_f32(fa, pa, sz);
            to_f32(fb, pb, sz);
            to_f32(fla, la, H);
            to_f32(flb, lb, H);
            /* Both argument orders: the merge is symmetric. */
            for (int swap = 0; swap < 2; swap++) {
                numla_status s = swap ? numla_merge_attn_states(isas[i], H, dim, fo, flo, fb, flb, fa, fla)
                                      : numla_merge_attn_states(isas[i], H, dim, fo, flo, fa, fla, fb, flb);
                CU_ASSERT_EQUAL(s, NUMLA_STATUS_OK);
                bad += check_close("split", isas[i], p, dim, fo, flo, full, full_lse);
                if (p == 0 || p == L) { /* one side empty: the other comes through bit for bit */
                    const float *whole = p == 0 ? fb : fa, *whole_lse = p == 0 ? flb : fla;
                    CU_ASSERT_EQUAL(memcmp(fo, whole, sz * sizeof *fo), 0);
                    CU_ASSERT_EQUAL(memcmp(flo, whole_lse, sizeof flo), 0);
                }
            }
        }
    /* Three pieces, merged pairwise: the merged LSE must itself be right to merge again. */
    float *fc = malloc(sz * sizeof *fc), flc[H];
    double *pc = malloc(sz * sizeof *pc), lc[H];
    for (int i = 0; i < n; i++)
        for (int p1 = 0; p1 <= L && bad < 8; p1 += 3)
            for (int p2 = p1; p2 <= L && bad < 8; p2 += 5) {
                attn_partial(&d, 0, p1, pa, la);
                attn_partial(&d, p1, p2, pb, lb);
                attn_partial(&d, p2, L, pc, lc);
                to_f32(fa, pa, sz);
                to_f32(fb, pb, sz);
                to_f32(fc, pc, sz);
                to_f32(fla, la, H);
                to_f32(flb, lb, H);
                to_f32(flc, lc, H);
                CU_ASSERT_EQUAL(numla_merge_attn_states(isas[i], H, dim, fo, flo, fa, fla, fb, flb), NUMLA_STATUS_OK);
                CU_ASSERT_EQUAL(numla_merge_attn_states(isas[i], H, dim, fo, flo, fo, flo, fc, flc), NUMLA_STATUS_OK);
                bad += check_close("3-way", isas[i], p1 * 100 + p2, dim, fo, flo, full, full_lse);
            }
    CU_ASSERT_EQUAL(bad, 0);
    free(pc);
    free(fc);
    free(fo);
    free(fb);
    free(fa);
    free(pb);
    free(pa);
    free(full);
    free(d.v);
}

static void test_split_every_position_dim512(void) { split_everywhere(512, 11); }
static void test_split_every_position_odd_dims(void)
{
    split_everywhere(37, 12); /* vector tail */
    split_everywhere(5, 13);  /* shorter than a vector */
    split_everywhere(1, 14);
}

/* Rows with infinite LSEs; the values of an empty side are NaN, which must never leak. */
static void test_infinite_lse(void)
{
    enum { R = 7, D = 21 };
    const float inf = INFINITY;
    const float la[R] = {-inf, inf, inf, -inf, 1.5f, inf, -2.0f};
    const float lb[R] = {-inf, -inf, inf, inf, -inf, 0.25f, -inf};
    numla_isa isas[NUMLA_ISA_COUNT];
    int n = numla_test_isas(isas);
    for (int i = 0; i < n; i++) {
        float a[R * D], b[R * D], out[R * D], lse[R];
        numla_test_rng r = {99};
        for (int row = 0; row < R; row++)
            for (int j = 0; j < D; j++) {
                int a_empty = isinf(la[row]), b_empty = isinf(lb[row]);
                a[row * D + j] = a_empty ? NAN : (float)numla_test_rng_normal(&r);
                b[row * D + j] = b_empty ? NAN : (float)numla_test_rng_normal(&r);
            }
        memset(out, 0x7f, sizeof out);
        CU_ASSERT_EQUAL(numla_merge_attn_states(isas[i], R, D, out, lse, a, la, b, lb), NUMLA_STATUS_OK);
        for (int row = 0; row < R; row++) {
            int a_empty = isinf(la[row]), b_empty = isinf(lb[row]);
            if (a_empty && b_empty) {
                NUMLA_ASSERT_MSG(lse[row] == -inf, "%s row %d: lse %g, want -inf", numla_isa_name(isas[i]), row, lse[row]);
                for (int j = 0; j < D; j++)
                    NUMLA_ASSERT_MSG(out[row * D + j] == 0.0f, "%s row %d elem %d: %g, want 0",
                                     numla_isa_name(isas[i]), row, j, out[row * D + j]);
            } else {
                const float *want = a_empty ? b : a, want_lse = a_empty ? lb[row] : la[row];
                NUMLA_ASSERT_MSG(lse[row] == want_lse, "%s row %d: lse %g, want %g", numla_isa_name(isas[i]),
                                 row, lse[row], want_lse);
                NUMLA_ASSERT_MSG(!memcmp(out + row * D, want + row * D, D * sizeof(float)),
                                 "%s row %d: lone side not passed through exactly", numla_isa_name(isas[i]), row);
            }
        }
        /* out_lse may be NULL. */
        CU_ASSERT_EQUAL(numla_merge_attn_states(isas[i], R, D, out, NULL, a, la, b, lb), NUMLA_STATUS_OK);
        CU_ASSERT_EQUAL(out[0], 0.0f);
    }
}

/* out == a (and out_lse == a_lse), then out == b: same bits as the separate-output merge. */
static void test_aliasing(void)
{
    enum { R = 300, D = 512 }; /* > the dispatcher's threading threshold */
    numla_test_rng r = {5};
    float *a = malloc(R * D * sizeof *a), *b = malloc(R * D * sizeof *b);
    float *want = malloc(R * D * sizeof *want), *buf = malloc(R * D * sizeof *buf);
    float la[R], lb[R], want_lse[R], buf_lse[R];
    for (int i = 0; i < R * D; i++) {
        a[i] = (float)numla_test_rng_normal(&r);
        b[i] = (float)numla_test_rng_normal(&r);
    }
    for (int i = 0; i < R; i++) {
        la[i] = (float)numla_test_rng_uniform(&r, -30, 30);
        lb[i] = i % 11 == 0 ? -INFINITY : (float)numla_test_rng_uniform(&r, -30, 30);
    }
    numla_isa isas[NUMLA_ISA_COUNT];
    int n = numla_test_isas(isas);
    for (int i = 0; i < n; i++) {
        CU_ASSERT_EQUAL(numla_merge_attn_states(isas[i], R, D, want, want_lse, a, la, b, lb), NUMLA_STATUS_OK);
        /* The separate-output result itself, against double arithmetic. */
        int bad = 0;
        for (int row = 0; row < R && bad < 4; row++) {
            double m = fmax(la[row], lb[row]), ea = exp(la[row] - m), eb = exp((double)lb[row] - m);
            double lse = m + log(ea + eb);
            if (fabs(want_lse[row] - lse) > 4e-6 * fmax(1, fabs(lse)))
                bad++;
            for (int j = 0; j < D; j++) {
                double v = ea / (ea + eb) * a[row * D + j] +
                           (eb > 0 ? eb / (ea + eb) * b[row * D + j] : 0.0);
                if (fabs(want[row * D + j] - v) > 2e-6 + 2e-6 * fabs(v))
                    bad++;
            }
        }
        NUMLA_ASSERT_MSG(bad == 0, "%s: %d values off", numla_isa_name(isas[i]), bad);
        memcpy(buf, a, R * D * sizeof *buf);
        memcpy(buf_lse, la, sizeof la);
        CU_ASSERT_EQUAL(numla_merge_attn_states(isas[i], R, D, buf, buf_lse, buf, buf_lse, b, lb), NUMLA_STATUS_OK);
        CU_ASSERT_EQUAL(memcmp(buf, want, R * D * sizeof *buf), 0);
        CU_ASSERT_EQUAL(memcmp(buf_lse, want_lse, sizeof buf_lse), 0);
        memcpy(buf, b, R * D * sizeof *buf);
        memcpy(buf_lse, lb, sizeof lb);
        CU_ASSERT_EQUAL(numla_merge_attn_states(isas[i], R, D, buf, buf_lse, a, la, buf, buf_lse), NUMLA_STATUS_OK);
        CU_ASSERT_EQUAL(memcmp(buf, want, R * D * sizeof *buf), 0);
        CU_ASSERT_EQUAL(memcmp(buf_lse, want_lse, sizeof buf_lse), 0);
    }
    free(buf);
    free(want);
    free(b);
    free(a);
}

static void test_invalid_args(void)
{
    float x[4] = {0}, l[1] = {0};
    CU_ASSERT_EQUAL(numla_merge_attn_states(NUMLA_ISA_REF, 1, 0, x, l, x, l, x, l), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_merge_attn_states(NUMLA_ISA_REF, -1, 4, x, l, x, l, x, l), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_merge_attn_states(NUMLA_ISA_REF, 1, 4, x, l, NULL, l, x, l), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_merge_attn_states(NUMLA_ISA_COUNT, 1, 4, x, l, x, l, x, l), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_merge_attn_states(NUMLA_ISA_REF, 0, 4, NULL, NULL, NULL, NULL, NULL, NULL), NUMLA_STATUS_OK);
}

NUMLA_TEST_SUITE(merge_attn, NULL, NULL, NUMLA_TEST(test_split_every_position_dim512),
                 NUMLA_TEST(test_split_every_position_odd_dims), NUMLA_TEST(test_infinite_lse),
                 NUMLA_TEST(test_aliasing), NUMLA_TEST(test_invalid_args))
