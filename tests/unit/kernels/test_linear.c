/* Tests for kernels/linear: every supported ISA level (amx included where the CPU and OS allow
 * tiles) against a double-precision reference computed here from the unpacked source weights,
 * over odd shapes, strides, all source dtypes, and accumulate on/off; plus argument validation.
 * Weights are packed at one level and run at another (one layout serves every level).
 *
 * Tolerances (u = 2^-24, mag = |y0| + sum_k |x_k w_k| per output; kernels/linear.h):
 *   exact fp32 paths (ref, avx2, avx512, avx512bf16, amx where its tile GEMM does not apply):
 *       |y - y_ref| <= (K + 2) u mag — the worst-case bound of any fp32 summation order.
 *   AMX split-bf16 GEMM:
 *       |y - y_ref| <= (2^-17 + (2K + 2) u (1 + 2^-8)) mag.
 *   bf16 x (NUMLA_LINEAR_ACT_BF16, bf16 weights): |y - y_ref| <= (2^-8 + (K + 2) u (1 + 2^-8))
 *       mag at every level; at avx512bf16, which rounds x to bf16, also within the fp32 bound
 *       of a reference computed from bf16(x) (round to nearest even), so a wrong rounding or a
 *       lost lo half cannot hide inside the looser bound.
 * Typical observed errors are far below these bounds (random signs cancel); a layout or
 * indexing bug gives errors of the order of mag itself. */
#include "test_util.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "kernels/linear.h"
#include "kernels/linear_internal.h"

#define SENTINEL 12345.0f

/* Cases that ran the AMX tile GEMM (so its tests can check they exercised it). */
static int amx_cases_run;

typedef struct {
    int64_t m, n, k;
} shape3;

/* Runs one case at level isa, the weight packed at level pack_isa; returns the number of bad
 * outputs (and reports the first). */
static int run_case_act(numla_isa pack_isa, numla_isa isa, numla_dtype dt, int64_t m, int64_t n,
                        int64_t k, int accumulate, uint64_t seed, numla_linear_act act)
{
    numla_test_rng rng = {seed};
    const int64_t lds = k + 3, ldx = k + 5, ldy = n + 7;
    const size_t es = numla_dtype_size(dt);
    unsigned char *src = malloc((size_t)n * (size_t)lds * es);
    float *x = malloc((size_t)m * (size_t)ldx * sizeof *x);
    float *y = malloc((size_t)m * (size_t)ldy * sizeof *y);
    double *yref = malloc((size_t)m * (size_t)n * sizeof *yref);
    double *mag = malloc((size_t)m * (size_t)n * sizeof *mag);
    double *yrb = malloc((size_t)m * (size_t)n * sizeof *yrb); /* from bf16(x) */
    double *magb = malloc((size_t)m * (size_t)n * sizeof *magb);
    CU_ASSERT_FATAL(src && x && y && yref && mag && yrb && magb);
    for (int64_t i = 0; i < n * lds; i++)
        numla_store_f32(src, dt, (size_t)i, (float)(0.1 * numla_test_rng_normal(&rng)));
    for (int64_t i = 0; i < m * ldx; i++)
        x[i] = (float)numla_test_rng_normal(&rng);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < ldy; j++)
            y[i * ldy + j] = j < n ? (float)numla_test_rng_normal(&rng) : SENTINEL;
    /* the weights and bf16(x) read once (every (row, column) pair reads them) */
    double *wd = malloc((size_t)n * (size_t)k * sizeof *wd);
    float *xb = malloc((size_t)m * (size_t)k * sizeof *xb);
    CU_ASSERT_FATAL(wd && xb);
    for (int64_t j = 0; j < n; j++)
        for (int64_t c = 0; c < k; c++)
            wd[j * k + c] = numla_load_f32(src, dt, (size_t)(j * lds + c));
    for (int64_t i = 0; i < m; i++)
        for (int64_t c = 0; c < k; c++)
            xb[i * k + c] = numla_bf16_to_f32(numla_f32_to_bf16(x[i * ldx + c]));
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = accumulate ? y[i * ldy + j] : 0.0, a = fabs(s), sb = s, ab = a;
            for (int64_t c = 0; c < k; c++) {
                const double wv = wd[j * k + c];
                double p = (double)x[i * ldx + c] * wv;
                double pb = (double)xb[i * k + c] * wv;
                s += p;
                a += fabs(p);
                sb += pb;
                ab += fabs(pb);
            }
            yref[i * n + j] = s;
            mag[i * n + j] = a;
            yrb[i * n + j] = sb;
            magb[i * n + j] = ab;
        }
    free(wd);
    free(xb);

    size_t bytes = numla_linear_packed_size(pack_isa, n, k, dt);
    CU_ASSERT_FATAL(bytes > 0);
    void *packed = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    numla_linear_weight w;
    CU_ASSERT_FATAL(numla_linear_pack(pack_isa, n, k, src, dt, lds, packed, &w) == NUMLA_STATUS_OK);
    CU_ASSERT(w.dtype == (dt == NUMLA_DTYPE_BF16 ? NUMLA_DTYPE_BF16 : NUMLA_DTYPE_F32));
    CU_ASSERT(w.act == NUMLA_LINEAR_ACT_F32);
    w.act = act;
    size_t ws = numla_linear_workspace_size(isa, &w, m, 2);
    /* Deliberately misaligned: the kernel aligns its workspace itself. */
    unsigned char *wsbuf = malloc(ws + 1);
    numla_status st = numla_linear_forward(isa, &w, m, x, ldx, y, ldy, accumulate,
                                           ws ? wsbuf + 1 : NULL, ws);
    NUMLA_ASSERT_MSG(st == NUMLA_STATUS_OK, "forward failed: %s", numla_error_message());

    const int amx = isa == NUMLA_ISA_AMX && numla_linear_amx_applies(&w, m);
    const int bw = w.dtype == NUMLA_DTYPE_BF16;
    const int split = amx;
    const int xbf16 = bw && act == NUMLA_LINEAR_ACT_BF16;
    const double u = ldexp(1.0, -24);
    const double rel = xbf16  ? ldexp(1.0, -8) + (double)(k + 2) * u * (1 + ldexp(1.0, -8))
                       : split ? ldexp(1.0, -17) + (double)(2 * k + 2) * u * (1 + ldexp(1.0, -8))
                               : (double)(k + 2) * u;
    /* the avx512bf16 code rounds x to bf16 itself: also held to the bf16(x) reference */
    const int tight = xbf16 && !amx && isa >= NUMLA_ISA_AVX512BF16;
    if (amx)
        amx_cases_run++;
    int bad = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < ldy; j++) {
            float got = y[i * ldy + j];
            if (j >= n) {
                if (got != SENTINEL && bad++ == 0)
                    fprintf(stderr, "\n    %s %s M=%lld N=%lld K=%lld: y[%lld][%lld] past N written\n",
                            numla_isa_name(isa), numla_dtype_name(dt), (long long)m, (long long)n,
                            (long long)k, (long long)i, (long long)j);
                continue;
            }
            double err = fabs((double)got - yref[i * n + j]), tol = rel * mag[i * n + j] + 1e-30;
            if (tight) {
                const double eb = fabs((double)got - yrb[i * n + j]);
                const double tb = (double)(k + 2) * u * magb[i * n + j] + 1e-30;
                if (!(eb <= tb) && bad++ == 0)
                    fprintf(stderr,
                            "\n    %s bf16-x M=%lld N=%lld K=%lld acc=%d: y[%lld][%lld]=%.9g bf16(x) ref %.9g err %.3g tol %.3g\n",
                            numla_isa_name(isa), (long long)m, (long long)n, (long long)k,
                            accumulate, (long long)i, (long long)j, got, yrb[i * n + j], eb, tb);
            }
            if (!(err <= tol) && bad++ == 0)
                fprintf(stderr,
                        "\n    %s %s M=%lld N=%lld K=%lld acc=%d: y[%lld][%lld]=%.9g ref %.9g err %.3g tol %.3g\n",
                        numla_isa_name(isa), numla_dtype_name(dt), (long long)m, (long long)n,
                        (long long)k, accumulate, (long long)i, (long long)j, got, yref[i * n + j],
                        err, tol);
        }
    free(src);
    free(x);
    free(y);
    free(yref);
    free(mag);
    free(yrb);
    free(magb);
    free(packed);
    free(wsbuf);
    return bad;
}

static int run_case(numla_isa pack_isa, numla_isa isa, numla_dtype dt, int64_t m, int64_t n,
                    int64_t k, int accumulate, uint64_t seed)
{
    return run_case_act(pack_isa, isa, dt, m, n, k, accumulate, seed, NUMLA_LINEAR_ACT_F32);
}

static void run_shapes(const shape3 *s, int ns)
{
    numla_isa isas[NUMLA_ISA_COUNT];
    int ni = numla_test_isas(isas);
    const numla_dtype dts[] = {NUMLA_DTYPE_BF16, NUMLA_DTYPE_F16, NUMLA_DTYPE_F32};
    int bad = 0, cases = 0;
    for (int a = 0; a < ni; a++)
        for (int d = 0; d < 3; d++)
            for (int i = 0; i < ns; i++)
                for (int acc = 0; acc < 2; acc++) {
                    uint64_t seed = 0x1234u + (uint64_t)(i * 7 + acc + 100 * d);
                    /* packed at this level, or at the next one down */
                    numla_isa pack = acc && a > 0 ? isas[a - 1] : isas[a];
                    bad += run_case(pack, isas[a], dts[d], s[i].m, s[i].n, s[i].k, acc, seed);
                    cases++;
                }
    NUMLA_ASSERT_MSG(bad == 0, "%d bad outputs over %d cases", bad, cases);
}

static void test_odd_shapes(void)
{
    static const shape3 s[] = {
        {1, 5, 7},   {2, 5, 7},    {3, 33, 130}, {1, 33, 130},  {7, 1, 1},    {1, 20, 2},
        {5, 16, 16}, {12, 32, 33}, {13, 48, 31}, {16, 17, 129}, {37, 300, 512}, {1, 300, 512},
        {20, 64, 1100}, {1, 96, 1100},
    };
    run_shapes(s, (int)(sizeof s / sizeof s[0]));
}

/* Every M from 1 to 64 crosses the GEMV / GEMM switch and every remainder of the row tiles;
 * the default run takes M up to 17 and around each multiple of 16 (every M under
 * NUMLA_TEST_SWEEP=full). */
static void test_all_m(void)
{
    shape3 s[2 * 64];
    int ns = 0;
    for (int m = 1; m <= 64; m++) {
        if (!numla_test_sweep_full() && m > 17 && m % 16 != 15 && m % 16 != 0 && m % 16 != 1)
            continue;
        s[ns++] = (shape3){m, 33, 130};
        s[ns++] = (shape3){m, 5, 7};
    }
    run_shapes(s, ns);
}

/* The split-bf16 AMX GEMM (amx level, bf16 W, K % 32 == 0, M >= NUMLA_LINEAR_AMX_MIN_M): one
 * row block and several, partial row/column tiles, an odd panel count, few panels with many
 * rows (the M split), and the orders for more than 32 rows: pair-major when a thread's packed x
 * fits NUMLA_LINEAR_AMX_PAIR_X_BYTES (with and without the next pair's L2 prefetch: 64 and 97
 * rows of all of K per thread, 200 rows split between the threads), two row groups when only
 * half the rows fit (200 x 100 x 2048 on an even team: 128 + 72 rows, each with all of N), and
 * the KC/NC blocks beyond that (260 x 560 x 2080: threads split N, each runs 260 rows over K
 * blocks of 2048 + 32 with C going through y between them, and N past the N block). Skipped
 * where the CPU or OS has no AMX. Also run at the avx512bf16 level (what the engine passes to
 * turn linear AMX off), which must then take the FMA path. */
static void test_amx(void)
{
    if (!numla_isa_supported(NUMLA_ISA_AMX)) {
        fprintf(stderr, "(no AMX here, skipped) ");
        return;
    }
    static const shape3 s[] = {
        {16, 16, 32},  {17, 17, 64},  {31, 33, 96},   {32, 48, 288},  {33, 300, 64},
        {64, 2100, 64}, {65, 40, 288}, {100, 33, 320}, {200, 64, 544}, {40, 16, 1024},
        {97, 120, 2080}, {200, 100, 2048}, {260, 560, 2080},
    };
    const int ns = (int)(sizeof s / sizeof s[0]);
    int bad = 0;
    amx_cases_run = 0;
    /* A team of 2 on any machine, so the thread splits named above are the ones that run. */
    const int team = omp_get_max_threads();
    omp_set_num_threads(2);
    for (int i = 0; i < ns; i++)
        for (int acc = 0; acc < 2; acc++)
            bad += run_case(NUMLA_ISA_AMX, NUMLA_ISA_AMX, NUMLA_DTYPE_BF16, s[i].m, s[i].n, s[i].k,
                            acc, 0x777u + (uint64_t)(2 * i + acc));
    omp_set_num_threads(team);
    NUMLA_ASSERT_MSG(bad == 0, "%d bad outputs", bad);
    NUMLA_ASSERT_MSG(amx_cases_run == 2 * ns, "only %d of %d cases ran on AMX", amx_cases_run, 2 * ns);
    amx_cases_run = 0;
    bad = 0;
    for (int i = 0; i < 3; i++)
        bad += run_case(NUMLA_ISA_AMX, NUMLA_ISA_AVX512BF16, NUMLA_DTYPE_BF16, s[i].m, s[i].n,
                        s[i].k, 1, 0x99u);
    CU_ASSERT_EQUAL(amx_cases_run, 0);
    NUMLA_ASSERT_MSG(bad == 0, "%d bad outputs at avx512bf16", bad);
}

/* NUMLA_LINEAR_ACT_BF16 at every level against both references (run_case_act): every M from
 * 1 to 40 (each remainder of the 12-row tiles, one and several row blocks), odd N and K, K
 * past the K block, accumulate on and off, on teams of 1 and 2 threads (the x pack and the N
 * split differ); f32 weights must ignore the mode and stay exact. */
static void test_bf16_activations(void)
{
    numla_isa isas[NUMLA_ISA_COUNT];
    const int ni = numla_test_isas(isas);
    static const shape3 s[] = {{13, 48, 31}, {37, 300, 512}, {1, 96, 1100}, {30, 70, 1101},
                               {100, 33, 130}, {5, 16, 16}};
    const int team = omp_get_max_threads();
    int bad = 0, cases = 0;
    for (int t = 1; t <= 2; t++) {
        omp_set_num_threads(t);
        for (int a = 0; a < ni; a++) {
            for (int i = 0; i < (int)(sizeof s / sizeof s[0]); i++)
                for (int acc = 0; acc < 2; acc++, cases++)
                    bad += run_case_act(isas[a], isas[a], NUMLA_DTYPE_BF16, s[i].m, s[i].n, s[i].k,
                                        acc, 0x4242u + (uint64_t)(i * 3 + acc + 17 * t),
                                        NUMLA_LINEAR_ACT_BF16);
            for (int m = 1; m <= 40; m++, cases++)
                bad += run_case_act(isas[a], isas[a], NUMLA_DTYPE_BF16, m, 33, 66, m & 1,
                                    0x51u + (uint64_t)m, NUMLA_LINEAR_ACT_BF16);
            bad += run_case_act(isas[a], isas[a], NUMLA_DTYPE_F32, 20, 40, 100, 0, 0x77u,
                                NUMLA_LINEAR_ACT_BF16);
            cases++;
        }
    }
    omp_set_num_threads(team);
    NUMLA_ASSERT_MSG(bad == 0, "%d bad outputs over %d cases", bad, cases);
}

/* At avx512bf16 a row's y in bf16-activation mode is the same sequence of vdpbf16ps whatever
 * the rows around it, the team size and the tile it lands in: each of 40 rows run alone on one
 * thread must give the bits of the 40-row call on two threads (docs/serving.md, "Numerics
 * across batch shapes"). */
static void test_bf16_activations_batch_invariant(void)
{
    if (!numla_isa_supported(NUMLA_ISA_AVX512BF16)) {
        fprintf(stderr, "(no avx512bf16 here, skipped) ");
        return;
    }
    enum { M = 40, N = 70, K = 1100 };
    numla_test_rng rng = {0xbeefu};
    uint16_t *src = malloc((size_t)N * K * 2);
    float *x = malloc((size_t)M * K * sizeof *x), *y = malloc((size_t)M * N * sizeof *y);
    float y1[N];
    for (int i = 0; i < N * K; i++)
        src[i] = numla_f32_to_bf16((float)(0.1 * numla_test_rng_normal(&rng)));
    for (int i = 0; i < M * K; i++)
        x[i] = (float)numla_test_rng_normal(&rng);
    const size_t bytes = numla_linear_packed_size(NUMLA_ISA_AVX512BF16, N, K, NUMLA_DTYPE_BF16);
    void *packed = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    numla_linear_weight w;
    CU_ASSERT_FATAL(numla_linear_pack(NUMLA_ISA_AVX512BF16, N, K, src, NUMLA_DTYPE_BF16, K, packed,
                                      &w) == NUMLA_STATUS_OK);
    w.act = NUMLA_LINEAR_ACT_BF16;
    const size_t ws = numla_linear_workspace_size(NUMLA_ISA_AVX512BF16, &w, M, 2);
    void *wsb = malloc(ws);
    const int team = omp_get_max_threads();
    omp_set_num_threads(2);
    CU_ASSERT_FATAL(numla_linear_forward(NUMLA_ISA_AVX512BF16, &w, M, x, K, y, N, 0, wsb, ws) ==
                    NUMLA_STATUS_OK);
    omp_set_num_threads(1);
    int differ = 0;
    for (int i = 0; i < M; i++) {
        CU_ASSERT_FATAL(numla_linear_forward(NUMLA_ISA_AVX512BF16, &w, 1, x + (size_t)i * K, K, y1,
                                             N, 0, wsb, ws) == NUMLA_STATUS_OK);
        differ += memcmp(y1, y + (size_t)i * N, sizeof y1) != 0;
    }
    omp_set_num_threads(team);
    NUMLA_ASSERT_MSG(differ == 0, "%d of %d rows differ from the 40-row call", differ, M);
    free(src);
    free(x);
    free(y);
    free(packed);
    free(wsb);
}

/* With fp32 activations, up to NUMLA_LINEAR_ROW_INVARIANT_M rows a row's y has the bits of the
 * one-row call at every level (kernels/linear.h: what a speculative verify step needs, every
 * row the bits a one-row decode step gives it): bf16 and f32 weights, K even and odd and past
 * the K block NUMLA_LINEAR_KC (the few-row groups carry their sums across blocks), N with a
 * partial and an odd last panel, with and without accumulate, rows 1 to 12 at one stride, on a
 * team of 2 and of 1. */
static void test_small_m_row_invariant(void)
{
    enum { MMAX = NUMLA_LINEAR_ROW_INVARIANT_M };
    numla_isa isas[NUMLA_ISA_COUNT];
    const int nl = numla_test_isas(isas);
    static const int64_t nk[][2] = {{40, 1201}, {33, 64}, {16, 2050}, {70, 7}};
    const int team = omp_get_max_threads();
    int bad = 0, cases = 0;
    for (int d = 0; d < 2; d++)
        for (size_t c = 0; c < sizeof nk / sizeof nk[0]; c++) {
            const numla_dtype dt = d ? NUMLA_DTYPE_F32 : NUMLA_DTYPE_BF16;
            const int64_t N = nk[c][0], K = nk[c][1], ldx = K + 3, ldy = N + 5;
            numla_test_rng rng = {0x5eedu + (uint64_t)(d * 10 + (int)c)};
            const size_t es = numla_dtype_size(dt);
            unsigned char *src = malloc((size_t)(N * K) * es);
            float *x = malloc((size_t)(MMAX * ldx) * sizeof *x);
            float *y0 = malloc((size_t)(MMAX * ldy) * sizeof *y0);
            float *y1 = malloc((size_t)(MMAX * ldy) * sizeof *y1), *ym = malloc((size_t)(MMAX * ldy) * sizeof *ym);
            CU_ASSERT_FATAL(src && x && y0 && y1 && ym);
            for (int64_t i = 0; i < N * K; i++)
                numla_store_f32(src, dt, (size_t)i, (float)(0.1 * numla_test_rng_normal(&rng)));
            for (int64_t i = 0; i < MMAX * ldx; i++)
                x[i] = (float)numla_test_rng_normal(&rng);
            for (int64_t i = 0; i < MMAX * ldy; i++)
                y0[i] = (float)numla_test_rng_normal(&rng);
            const size_t bytes = numla_linear_packed_size(NUMLA_ISA_REF, N, K, dt);
            void *packed = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
            numla_linear_weight w;
            CU_ASSERT_FATAL(numla_linear_pack(NUMLA_ISA_REF, N, K, src, dt, K, packed, &w) ==
                            NUMLA_STATUS_OK);
            for (int l = 0; l < nl; l++)
                for (int acc = 0; acc < 2; acc++) {
                    const numla_isa isa = isas[l];
                    const size_t ws = numla_linear_workspace_size(isa, &w, MMAX, 2);
                    void *wsb = malloc(ws + 1);
                    /* the one-row calls on one thread */
                    omp_set_num_threads(1);
                    memcpy(y1, y0, (size_t)(MMAX * ldy) * sizeof *y1);
                    for (int64_t i = 0; i < MMAX; i++)
                        CU_ASSERT_FATAL(numla_linear_forward(isa, &w, 1, x + i * ldx, ldx, y1 + i * ldy,
                                                             ldy, acc, wsb, ws) == NUMLA_STATUS_OK);
                    for (int64_t m = 2; m <= MMAX; m++)
                        for (int nt = 1; nt <= 2; nt++) {
                            omp_set_num_threads(nt);
                            memcpy(ym, y0, (size_t)(MMAX * ldy) * sizeof *ym);
                            CU_ASSERT_FATAL(numla_linear_forward(isa, &w, m, x, ldx, ym, ldy, acc,
                                                                 wsb, ws) == NUMLA_STATUS_OK);
                            cases++;
                            for (int64_t i = 0; i < m; i++)
                                if (memcmp(ym + i * ldy, y1 + i * ldy, (size_t)N * sizeof *ym)) {
                                    if (!bad++)
                                        fprintf(stderr, "\n    %s %s N %lld K %lld acc %d: row %lld "
                                                "of %lld rows (%d threads) differs from its "
                                                "one-row call", numla_isa_name(isa),
                                                numla_dtype_name(dt), (long long)N, (long long)K,
                                                acc, (long long)i, (long long)m, nt);
                                    break;
                                }
                        }
                    free(wsb);
                }
            free(src);
            free(x);
            free(y0);
            free(y1);
            free(ym);
            free(packed);
        }
    omp_set_num_threads(team);
    NUMLA_ASSERT_MSG(bad == 0, "%d of %d calls of 2-%d rows differ from one-row calls", bad, cases,
                     (int)MMAX);
}

/* Bad shapes, strides, alignment, aliasing and a missing workspace are reported, not run. */
static void test_validation(void)
{
    float x[8] = {0}, y[8] = {0};
    uint16_t src[8] = {0};
    void *packed = aligned_alloc(64, 4096);
    numla_linear_weight w;
    CU_ASSERT_EQUAL(numla_linear_pack(NUMLA_ISA_REF, 2, 4, src, NUMLA_DTYPE_BF16, 3, packed, &w),
                    NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "ld_src"));
    CU_ASSERT_EQUAL(numla_linear_pack(NUMLA_ISA_REF, 0, 4, src, NUMLA_DTYPE_BF16, 4, packed, &w),
                    NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_linear_pack(NUMLA_ISA_REF, 2, 4, src, NUMLA_DTYPE_BF16, 4,
                                      (char *)packed + 4, &w),
                    NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_linear_packed_size(NUMLA_ISA_REF, 2, 3, NUMLA_DTYPE_BF16), 16u * 4 * 2);
    CU_ASSERT_EQUAL(numla_linear_packed_size(NUMLA_ISA_REF, 17, 3, NUMLA_DTYPE_F16), 32u * 3 * 4);
    CU_ASSERT_EQUAL(numla_linear_pack(NUMLA_ISA_REF, 2, 4, src, NUMLA_DTYPE_BF16, 4, packed, &w),
                    NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_linear_forward(NUMLA_ISA_REF, &w, 1, x, 3, y, 2, 0, NULL, 0), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_linear_forward(NUMLA_ISA_REF, &w, 1, x, 4, y, 1, 0, NULL, 0), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_linear_forward(NUMLA_ISA_REF, &w, 1, x, 4, x + 2, 2, 0, NULL, 0), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "overlap"));
    CU_ASSERT_EQUAL(numla_linear_forward(NUMLA_ISA_REF, &w, 1, x, 4, y, 2, 0, NULL, 0), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_linear_forward(NUMLA_ISA_REF, &w, 0, NULL, 4, NULL, 2, 0, NULL, 0), NUMLA_STATUS_OK);
    /* the level to run is checked like the weight */
    CU_ASSERT_EQUAL(numla_linear_forward(NUMLA_ISA_COUNT, &w, 1, x, 4, y, 2, 0, NULL, 0),
                    NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "isa"));
    CU_ASSERT_EQUAL(numla_linear_workspace_size(NUMLA_ISA_COUNT, &w, 1, 2), 0u);
    if (numla_isa_supported(NUMLA_ISA_AVX512BF16)) {
        static float xl[64 * 4], yl[64 * 2];
        CU_ASSERT_EQUAL(numla_linear_pack(NUMLA_ISA_AVX512BF16, 2, 4, src, NUMLA_DTYPE_BF16, 4,
                                          packed, &w), NUMLA_STATUS_OK);
        size_t ws = numla_linear_workspace_size(NUMLA_ISA_AVX512BF16, &w, 64, 2);
        CU_ASSERT(ws >= 64 * 4 * 4);
        CU_ASSERT_EQUAL(numla_linear_forward(NUMLA_ISA_AVX512BF16, &w, 64, xl, 4, yl, 2, 0, NULL, 0),
                        NUMLA_STATUS_INVALID_ARG);
        CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "workspace"));
        /* fp32-class x: one row runs the FMA path (no workspace); bf16 x the vdpbf16ps code,
         * which packs x at every M; an unknown activation mode is refused */
        CU_ASSERT_EQUAL(numla_linear_workspace_size(NUMLA_ISA_AVX512BF16, &w, 1, 2), 0u);
        w.act = NUMLA_LINEAR_ACT_BF16;
        CU_ASSERT(numla_linear_workspace_size(NUMLA_ISA_AVX512BF16, &w, 1, 2) >= 2 * 4);
        w.act = (numla_linear_act)7;
        CU_ASSERT_EQUAL(numla_linear_forward(NUMLA_ISA_AVX512BF16, &w, 1, xl, 4, yl, 2, 0, NULL, 0),
                        NUMLA_STATUS_INVALID_ARG);
        CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "activation"));
    }
    free(packed);
}

NUMLA_TEST_SUITE(linear, NULL, NULL, NUMLA_TEST(test_odd_shapes), NUMLA_TEST(test_all_m),
                 NUMLA_TEST(test_amx), NUMLA_TEST(test_bf16_activations),
                 NUMLA_TEST(test_bf16_activations_batch_invariant),
                 NUMLA_TEST(test_small_m_row_invariant), NUMLA_TEST(test_validation))
