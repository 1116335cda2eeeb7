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
    /* paged (case_page): the listed rows moved into a pool of blocks of bs rows, each query's
     * blocks at shuffled ids among NaN-filled ones */
    int32_t bs;
    void *pool;                     /* (nblk, bs, D) of dt */
    int32_t *tabs;                  /* (T, per) */
    const int32_t **tabp;           /* (T) */
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

/* Move every query's listed rows into one pool of blocks of bs rows (2 spare blocks per query,
 * all NaN), each query's blocks at ids a shuffle picks; the call then reads them through the
 * tables. Query 2 keeps its contiguous array (a NULL table beside paged ones). */
static void case_page(case_data *c, int32_t bs, uint64_t seed)
{
    numla_test_rng r = {seed};
    const int32_t per = (c->nent + bs - 1) / bs, nblk = c->T * (per + 2), D = c->D;
    const size_t es = c->dt == NUMLA_DTYPE_BF16 ? 2 : 4;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)nblk);
    for (int32_t i = 0; i < nblk; i++)
        ids[i] = i;
    for (int32_t i = nblk - 1; i > 0; i--) {
        int32_t j = (int32_t)(numla_test_rng_u64(&r) % (uint64_t)(i + 1)), x = ids[i];
        ids[i] = ids[j], ids[j] = x;
    }
    c->bs = bs;
    c->pool = malloc(es * (size_t)nblk * (size_t)bs * (size_t)D);
    for (int64_t i = 0; i < (int64_t)nblk * bs * D; i++) {
        if (es == 2)
            ((uint16_t *)c->pool)[i] = numla_f32_to_bf16(NAN);
        else
            ((float *)c->pool)[i] = NAN;
    }
    c->tabs = malloc(sizeof(int32_t) * (size_t)(c->T * per));
    c->tabp = calloc((size_t)c->T, sizeof *c->tabp);
    for (int32_t t = 0; t < c->T; t++) {
        if (t == 2)
            continue;
        int32_t *tab = c->tabs + (int64_t)t * per;
        for (int32_t k = 0; k < per; k++)
            tab[k] = ids[t * per + k];
        for (int32_t e = 0; e < c->nent; e++)
            memcpy((char *)c->pool + es * (size_t)(((int64_t)tab[e / bs] * bs + e % bs) * D),
                   (const char *)c->entp[t] + es * (size_t)((int64_t)e * D), es * (size_t)D);
        c->tabp[t] = tab;
        c->entp[t] = c->pool;
    }
    free(ids);
}

static void case_free(case_data *c)
{
    free(c->q), free(c->out), free(c->sink), free(c->win), free(c->entp), free(c->win_len);
    free(c->ent_len), free(c->sel), free(c->rows), free(c->ent), free(c->winf), free(c->entf);
    free(c->rows16), free(c->ent16), free(c->pool), free(c->tabs), free(c->tabp);
}

static numla_sink_attn_args case_args(const case_data *c, float scale)
{
    return (numla_sink_attn_args){c->T,       c->H,       c->D,        c->q,        c->win,
                                  c->win_len, c->entp,    c->sel,      c->sel_stride,
                                  c->ent_len, c->sink,    scale,       c->out,      c->dt,
                                  (const int32_t *const *)c->tabp,     c->bs};
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

/* bs > 0: the listed rows paged in blocks of bs rows (case_page) */
static void run_levels(int32_t T, int32_t H, int32_t D, int use_sel, numla_dtype dt, int32_t bs,
                       uint64_t seed)
{
    numla_isa isas[NUMLA_ISA_COUNT];
    const int n = numla_test_isas(isas);
    case_data c;
    case_make(&c, T, H, D, use_sel, dt, seed);
    if (bs > 0)
        case_page(&c, bs, seed + 1000);
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
        snprintf(what, sizeof what, "%s (%s)%s %s rows%s", numla_isa_name(isas[i]),
                 numla_sink_attn_variant(isas[i], &a), use_sel ? " sel" : "", numla_dtype_name(dt),
                 bs ? " paged" : "");
        const int bad = case_check(&c, scale, what);
        NUMLA_ASSERT_MSG(bad == 0, "%s: %d elements off\n", what, bad);
        free(w);
    }
    case_free(&c);
}

/* Head counts around the 16-head blocks (1, 5 in one block; 20 across two; 64 as V4-Flash),
 * widths every vector level takes (32, 64, 512) and one avx512 leaves to avx2 (48), fp32 and
 * bf16 rows. */
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
                    run_levels(ds[di] == 512 ? 3 : 6, hs[hi], ds[di], sel, dts[ti], 0, seed);
                }
}

/* The listed rows read through block tables (DeepSeek-V4's entries in the pool's blocks):
 * blocks of 4 rows (CSA's entries in a block of 16 tokens), of 1 and of 7 (a last block cut
 * short), shuffled among NaN blocks, with and without a selection, fp32 and bf16 rows, and one
 * query of the call left contiguous: each level against the double reference of the rows as
 * listed. */
static void test_paged(void)
{
    static const int32_t bss[] = {4, 1, 7};
    static const numla_dtype dts[] = {NUMLA_DTYPE_F32, NUMLA_DTYPE_BF16};
    uint64_t seed = 500;
    for (size_t bi = 0; bi < sizeof bss / sizeof *bss; bi++)
        for (size_t ti = 0; ti < 2; ti++)
            for (int sel = 0; sel < 2; sel++, seed++)
                run_levels(5, bi == 0 ? 20 : 5, bi == 0 ? 64 : 32, sel, dts[ti], bss[bi], seed);
}

/* A query's bits do not depend on the call's other queries (kernels/sink_attn.h): each query of
 * a 6-query call (paged listed rows, a selection, fp32 and bf16 rows, 20 heads: a full and a
 * partial block of 16) run again alone gives the same bits, at every level. */
static void test_query_bits(void)
{
    static const numla_dtype dts[] = {NUMLA_DTYPE_F32, NUMLA_DTYPE_BF16};
    numla_isa isas[NUMLA_ISA_COUNT];
    const int n = numla_test_isas(isas);
    for (size_t ti = 0; ti < 2; ti++) {
        enum { T = 6, H = 20, D = 64 };
        case_data c;
        case_make(&c, T, H, D, 1, dts[ti], 900 + ti);
        case_page(&c, 4, 950 + ti);
        const float scale = (float)(1.0 / sqrt((double)D)) * 2.0f;
        float *one = malloc(sizeof(float) * H * D);
        for (int i = 0; i < n; i++) {
            numla_sink_attn_args a = case_args(&c, scale);
            size_t ws = numla_sink_attn_workspace_size(isas[i], &a, omp_get_max_threads());
            void *w = malloc(ws);
            CU_ASSERT_EQUAL_FATAL(numla_sink_attn(isas[i], &a, w, ws), NUMLA_STATUS_OK);
            for (int32_t t = 0; t < T; t++) {
                numla_sink_attn_args b = a;
                b.num_queries = 1;
                b.q = c.q + (int64_t)t * H * D;
                b.win = c.win + t, b.win_len = c.win_len + t;
                b.ent = c.entp + t, b.ent_len = c.ent_len + t;
                b.sel = c.sel + (int64_t)t * c.sel_stride;
                b.ent_blocks = (const int32_t *const *)c.tabp + t;
                b.out = one;
                CU_ASSERT_EQUAL_FATAL(numla_sink_attn(isas[i], &b, w, ws), NUMLA_STATUS_OK);
                NUMLA_ASSERT_MSG(!memcmp(one, c.out + (int64_t)t * H * D, sizeof(float) * H * D),
                                 "%s (%s) %s rows: query %d alone differs from the 6-query call\n",
                                 numla_isa_name(isas[i]), numla_sink_attn_variant(isas[i], &a),
                                 numla_dtype_name(dts[ti]), t);
            }
            free(w);
        }
        free(one);
        case_free(&c);
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
                                      bf ? NUMLA_DTYPE_BF16 : NUMLA_DTYPE_F32, NULL, 0};
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
                              NUMLA_DTYPE_F32, NULL, 0};
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
    /* a block table: a block size below 1, a negative block id for a listed row */
    int32_t tab[1] = {-1};
    const int32_t *tabs[1] = {tab};
    a.ent_blocks = tabs;
    a.ent_block_size = 0;
    CU_ASSERT_EQUAL(numla_sink_attn(NUMLA_ISA_REF, &a, NULL, 0), NUMLA_STATUS_INVALID_ARG);
    a.ent_block_size = 4;
    CU_ASSERT_EQUAL(numla_sink_attn(NUMLA_ISA_REF, &a, NULL, 0), NUMLA_STATUS_OUT_OF_RANGE);
    tab[0] = 0;
    CU_ASSERT_EQUAL(numla_sink_attn(NUMLA_ISA_REF, &a, NULL, 0), NUMLA_STATUS_OK);
    a.ent_blocks = NULL;
    a.q = NULL;
    CU_ASSERT_EQUAL(numla_sink_attn(NUMLA_ISA_REF, &a, NULL, 0), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_sink_attn(NUMLA_ISA_COUNT, &a, NULL, 0), NUMLA_STATUS_INVALID_ARG);
}

NUMLA_TEST_SUITE(sink_attn, NULL, NULL, NUMLA_TEST(test_against_double), NUMLA_TEST(test_paged),
                 NUMLA_TEST(test_query_bits), NUMLA_TEST(test_sink_closed_form), NUMLA_TEST(test_invalid_args))
