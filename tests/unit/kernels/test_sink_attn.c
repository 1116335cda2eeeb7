/* Tests for kernels/sink_attn (shared-KV attention with a per-head sink over a window plus
 * listed rows), every ISA the CPU supports and both row types (fp32, bf16), against a
 * double-precision two-pass softmax written here from the contract (the sink a column of the
 * softmax with no value) over the row values as the call sees them (a bf16 case rounds its rows
 * to bf16 first and hands the kernel their bf16 copies). Rows the call must not read (around
 * the window, the unlisted ones) hold NaN. */
#include "test_util.h"

#include "common/dtype.h"
#include "kernels/sink_attn.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct case_data {
    int32_t T, H, D, nent; /* nent: rows of each query's listed array */
    float *q, *rows, *ent, *sink, *out;
    const void **win, **entp;       /* what the call gets: fp32 rows, or their bf16 copies */
    const float **winf, **entf;     /* the same rows as fp32 values, for the reference */
    uint16_t *rows16, *ent16;       /* bf16 copies of rows and ent (bf16 cases) */
    int32_t *win_len, *ent_len, *sel, sel_stride;
    int64_t win_total;
    numla_dtype dt;                 /* the rows' type */
} case_data;

/* The bf16 copy of n fp32 values, the fp32 values rounded to it in place (NaN stays NaN). */
static uint16_t *case_bf16(float *x, int64_t n)
{
    uint16_t *h = malloc(sizeof(uint16_t) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++) {
        h[i] = numla_f32_to_bf16(x[i]);
        x[i] = numla_bf16_to_f32(h[i]);
    }
    return h;
}

/* Query t: window rows win[t] .. (win_len[t] of them, from one array with NaN rows around each
 * window), listed rows of ent (with sel: a random subset in random order; the rest NaN). */
static void case_make(case_data *c, int32_t T, int32_t H, int32_t D, int use_sel, numla_dtype dt,
                      uint64_t seed)
{
    numla_test_rng r = {seed};
    memset(c, 0, sizeof *c);
    c->T = T, c->H = H, c->D = D, c->nent = 40, c->dt = dt;
    c->q = malloc(sizeof(float) * (size_t)(T * H * D));
    c->out = malloc(sizeof(float) * (size_t)(T * H * D));
    c->sink = malloc(sizeof(float) * (size_t)H);
    c->win = calloc((size_t)T, sizeof *c->win);
    c->entp = calloc((size_t)T, sizeof *c->entp);
    c->winf = calloc((size_t)T, sizeof *c->winf);
    c->entf = calloc((size_t)T, sizeof *c->entf);
    c->win_len = calloc((size_t)T, sizeof *c->win_len);
    c->ent_len = calloc((size_t)T, sizeof *c->ent_len);
    c->sel_stride = c->nent;
    c->sel = use_sel ? malloc(sizeof(int32_t) * (size_t)(T * c->nent)) : NULL;
    for (int64_t i = 0; i < (int64_t)T * H * D; i++)
        c->q[i] = (float)numla_test_rng_normal(&r);
    for (int32_t h = 0; h < H; h++)
        c->sink[h] = (float)numla_test_rng_uniform(&r, -1.0, 4.0);
    /* window lengths 0 .. 150 (past one 64-row tile, twice), query 0 none */
    int64_t tot = 1;
    for (int32_t t = 0; t < T; t++) {
        c->win_len[t] = t == 0 ? 0 : (int32_t)(numla_test_rng_u64(&r) % 151);
        tot += c->win_len[t] + 1;
    }
    c->win_total = tot;
    c->rows = malloc(sizeof(float) * (size_t)(tot * D));
    for (int64_t i = 0; i < tot * D; i++)
        c->rows[i] = NAN;
    c->ent = malloc(sizeof(float) * (size_t)(T * c->nent * D));
    for (int64_t i = 0; i < (int64_t)T * c->nent * D; i++)
        c->ent[i] = use_sel ? NAN : (float)numla_test_rng_normal(&r);
    int64_t at = 1;
    for (int32_t t = 0; t < T; t++) {
        c->winf[t] = c->rows + at * D;
        for (int64_t i = 0; i < (int64_t)c->win_len[t] * D; i++)
            c->rows[at * D + i] = (float)numla_test_rng_normal(&r);
        at += c->win_len[t] + 1;
        float *e = c->ent + (int64_t)t * c->nent * D;
        c->entf[t] = e;
        c->ent_len[t] = t == 1 ? 0 : (int32_t)(numla_test_rng_u64(&r) % (uint64_t)(c->nent + 1));
        if (use_sel) { /* a random subset: shuffle 0..nent-1, keep the first ent_len */
            int32_t *s = c->sel + (int64_t)t * c->nent;
            for (int32_t i = 0; i < c->nent; i++)
                s[i] = i;
            for (int32_t i = c->nent - 1; i > 0; i--) {
                int32_t j = (int32_t)(numla_test_rng_u64(&r) % (uint64_t)(i + 1)), x = s[i];
                s[i] = s[j], s[j] = x;
            }
            for (int32_t i = 0; i < c->ent_len[t]; i++)
                for (int32_t d = 0; d < D; d++)
                    e[(int64_t)s[i] * D + d] = (float)numla_test_rng_normal(&r);
        }
    }
    if (dt == NUMLA_DTYPE_BF16) {
        c->rows16 = case_bf16(c->rows, tot * D);
        c->ent16 = case_bf16(c->ent, (int64_t)T * c->nent * D);
    }
    for (int32_t t = 0; t < T; t++) {
        c->win[t] = c->rows16 ? (const void *)(c->rows16 + (c->winf[t] - c->rows))
                              : (const void *)c->winf[t];
        c->entp[t] = c->ent16 ? (const void *)(c->ent16 + (c->entf[t] - c->ent))
                              : (const void *)c->entf[t];
    }
}

static void case_free(case_data *c)
{
    free(c->q), free(c->out), free(c->sink), free(c->win), free(c->entp), free(c->win_len);
    free(c->ent_len), free(c->sel), free(c->rows), free(c->ent), free(c->winf), free(c->entf);
    free(c->rows16), free(c->ent16);
}

static numla_sink_attn_args case_args(const case_data *c, float scale)
{
    return (numla_sink_attn_args){c->T, c->H, c->D, c->q, c->win, c->win_len, c->entp, c->sel,
                                  c->sel_stride, c->ent_len, c->sink, scale, c->out, c->dt};
}

/* The contract in double: scores, a softmax over them and the sink, the value-less sink
 * dropped. Returns how many elements miss by more than tol · max|row| (plus 1e-6). */
static int case_check(const case_data *c, float scale, const char *what)
{
    int bad = 0;
    const int32_t D = c->D;
    for (int32_t t = 0; t < c->T; t++) {
        const int32_t nw = c->win_len[t], n = nw + c->ent_len[t];
        const float **rr = malloc(sizeof *rr * (size_t)(n + 1));
        for (int32_t j = 0; j < n; j++)
            rr[j] = j < nw ? c->winf[t] + (int64_t)j * D
                           : c->entf[t] + (int64_t)(c->sel ? c->sel[(int64_t)t * c->sel_stride + j - nw]
                                                           : j - nw) * D;
        double *s = malloc(sizeof(double) * (size_t)(n + 1)), amax = 0;
        for (int32_t j = 0; j < n; j++)
            for (int32_t d = 0; d < D; d++)
                amax = fmax(amax, fabs((double)rr[j][d]));
        for (int32_t h = 0; h < c->H; h++) {
            const float *q = c->q + ((int64_t)t * c->H + h) * D;
            double mx = c->sink[h], sum = 0;
            for (int32_t j = 0; j < n; j++) {
                s[j] = 0;
                for (int32_t d = 0; d < D; d++)
                    s[j] += (double)q[d] * rr[j][d];
                s[j] *= scale;
                mx = fmax(mx, s[j]);
            }
            sum = exp((double)c->sink[h] - mx);
            for (int32_t j = 0; j < n; j++)
                sum += exp(s[j] - mx);
            for (int32_t d = 0; d < D; d++) {
                double want = 0;
                for (int32_t j = 0; j < n; j++)
                    want += exp(s[j] - mx) / sum * rr[j][d];
                const double got = c->out[((int64_t)t * c->H + h) * D + d];
                if (!(fabs(got - want) <= 2e-5 * amax + 1e-6)) {
                    if (bad++ < 5)
                        fprintf(stderr, "\n    %s: T %d H %d D %d: query %d head %d elem %d: %.8g, "
                                        "want %.8g", what, c->T, c->H, D, t, h, d, got, want);
                }
            }
        }
        free(s);
        free(rr);
    }
    return bad;
}

static void run_levels(int32_t T, int32_t H, int32_t D, int use_sel, numla_dtype dt, uint64_t seed)
{
    numla_isa isas[NUMLA_ISA_COUNT];
    const int n = numla_test_isas(isas);
    case_data c;
    case_make(&c, T, H, D, use_sel, dt, seed);
    const float scale = (float)(1.0 / sqrt((double)D)) * 2.0f; /* peaked weights */
    for (int i = 0; i < n; i++) {
        numla_sink_attn_args a = case_args(&c, scale);
        const int nth = omp_get_max_threads();
        const size_t ws = numla_sink_attn_workspace_size(isas[i], &a, nth);
        void *w = malloc(ws + 1);
        for (int64_t k = 0; k < (int64_t)T * H * D; k++)
            c.out[k] = NAN;
        CU_ASSERT_EQUAL_FATAL(numla_sink_attn(isas[i], &a, w, ws), NUMLA_STATUS_OK);
        char what[64];
        snprintf(what, sizeof what, "%s (%s)%s %s rows", numla_isa_name(isas[i]),
                 numla_sink_attn_variant(isas[i], &a), use_sel ? " sel" : "", numla_dtype_name(dt));
        const int bad = case_check(&c, scale, what);
        NUMLA_ASSERT_MSG(bad == 0, "%s: %d elements off\n", what, bad);
        free(w);
    }
    case_free(&c);
}

/* Head counts around the 16-head blocks (1, 5 in one block; 20 across two; 64 as V4-Flash),
 * widths the vector level takes (32, 64, 512) and one it leaves to ref (48), fp32 and bf16
 * rows. */
static void test_against_double(void)
{
    static const int32_t hs[] = {1, 5, 20, 64}, ds[] = {32, 48, 64, 512};
    static const numla_dtype dts[] = {NUMLA_DTYPE_F32, NUMLA_DTYPE_BF16};
    unsigned keep = 0;
    uint64_t seed = 1;
    for (size_t ti = 0; ti < 2; ti++)
        for (size_t hi = 0; hi < sizeof hs / sizeof *hs; hi++)
            for (size_t di = 0; di < sizeof ds / sizeof *ds; di++)
                for (int sel = 0; sel < 2; sel++, seed++) {
                    if (!numla_test_sweep_keep(&keep, 3) && !(hs[hi] == 64 && ds[di] == 512))
                        continue;
                    run_levels(ds[di] == 512 ? 3 : 6, hs[hi], ds[di], sel, dts[ti], seed);
                }
}

/* The sink dilutes: with no rows the output is zeros; with one row r and score s, the output is
 * r · e^s / (e^s + e^sink) (checked exactly against that closed form). */
static void test_sink_closed_form(void)
{
    enum { D = 64, H = 2 };
    numla_isa isas[NUMLA_ISA_COUNT];
    const int n = numla_test_isas(isas);
    float q[H * D], row[D], out[H * D], sink[H] = {0.5f, -3.0f};
    uint16_t row16[D];
    for (int d = 0; d < D; d++) {
        row[d] = (float)(d % 7) - 3.0f; /* exact in bf16 */
        row16[d] = numla_f32_to_bf16(row[d]);
        q[d] = d == 0 ? 0.25f : 0.0f; /* head 0: s = 0.25 · row[0] = -0.75 */
        q[D + d] = d == 1 ? 1.0f : 0.0f; /* head 1: s = row[1] = -2 */
    }
    const void *win[2] = {row, row16}, *ent[1] = {NULL};
    for (int i = 0; i < n; i++)
        for (int32_t k = 0; k < 4; k++) {
            const int32_t el = 0, wl = k & 1, bf = k >> 1;
            numla_sink_attn_args a = {1,   H,  D,   q,    win + bf, &wl, ent,
                                      NULL, 0, &el, sink, 1.0f, out,
                                      bf ? NUMLA_DTYPE_BF16 : NUMLA_DTYPE_F32};
            const size_t ws = numla_sink_attn_workspace_size(isas[i], &a, omp_get_max_threads());
            void *w = malloc(ws);
            CU_ASSERT_EQUAL_FATAL(numla_sink_attn(isas[i], &a, w, ws), NUMLA_STATUS_OK);
            for (int h = 0; h < H; h++) {
                const double s = h ? -2.0 : -0.75, p = wl ? exp(s) / (exp(s) + exp(sink[h])) : 0;
                for (int d = 0; d < D; d++)
                    NUMLA_ASSERT_MSG(fabs(out[h * D + d] - p * row[d]) <= 1e-6,
                                     "%s %s win %d head %d elem %d: %g, want %g\n",
                                     numla_isa_name(isas[i]), bf ? "bf16" : "f32", wl, h, d,
                                     out[h * D + d], p * row[d]);
            }
            free(w);
        }
}

static void test_invalid_args(void)
{
    float q[32] = {0}, out[32], sink[1] = {0};
    const void *win[1] = {NULL}, *ent[1] = {NULL};
    int32_t wl = 0, el = 1, bad_sel[1] = {-1};
    numla_sink_attn_args a = {1, 1, 32, q, win, &wl, ent, NULL, 0, &wl, sink, 1.0f, out,
                              NUMLA_DTYPE_F32};
    CU_ASSERT_EQUAL(numla_sink_attn(NUMLA_ISA_REF, &a, NULL, 0), NUMLA_STATUS_OK);
    a.rows_dtype = NUMLA_DTYPE_F16; /* not a row type the kernel reads */
    CU_ASSERT_EQUAL(numla_sink_attn(NUMLA_ISA_REF, &a, NULL, 0), NUMLA_STATUS_INVALID_ARG);
    a.rows_dtype = NUMLA_DTYPE_BF16;
    CU_ASSERT_EQUAL(numla_sink_attn(NUMLA_ISA_REF, &a, NULL, 0), NUMLA_STATUS_OK);
    a.rows_dtype = NUMLA_DTYPE_F32;
    a.num_heads = 0;
    CU_ASSERT_EQUAL(numla_sink_attn(NUMLA_ISA_REF, &a, NULL, 0), NUMLA_STATUS_INVALID_ARG);
    a.num_heads = 1;
    a.ent_len = &el; /* a listed row but no array */
    CU_ASSERT_EQUAL(numla_sink_attn(NUMLA_ISA_REF, &a, NULL, 0), NUMLA_STATUS_INVALID_ARG);
    ent[0] = q;
    a.sel = bad_sel;
    a.sel_stride = 1;
    CU_ASSERT_EQUAL(numla_sink_attn(NUMLA_ISA_REF, &a, NULL, 0), NUMLA_STATUS_OUT_OF_RANGE);
    a.sel_stride = 0;
    CU_ASSERT_EQUAL(numla_sink_attn(NUMLA_ISA_REF, &a, NULL, 0), NUMLA_STATUS_INVALID_ARG);
    a.sel = NULL;
    a.q = NULL;
    CU_ASSERT_EQUAL(numla_sink_attn(NUMLA_ISA_REF, &a, NULL, 0), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_sink_attn(NUMLA_ISA_COUNT, &a, NULL, 0), NUMLA_STATUS_INVALID_ARG);
}

NUMLA_TEST_SUITE(sink_attn, NULL, NULL, NUMLA_TEST(test_against_double),
                 NUMLA_TEST(test_sink_closed_form), NUMLA_TEST(test_invalid_args))
