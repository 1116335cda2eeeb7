/* Tests for kernels/qlinear (8-bit weights): every supported ISA level, on slices of larger
 * checkpoint tensors (unaligned first rows such as 192·h, a 128-aligned first column, N and K
 * not multiples of 128 or 16), M = 1, 3, 6, 7, 8, 17, 31, 32, 64 (the avx2 and avx512 few-row
 * tiles, and for fp8 from 13 rows their panel GEMMs, W8A8 from 32 its VNNI GEMM), accumulate on and off,
 * strided x and y. int8-row's many-row path (x-blocked 4 x 4 tiles from 4 rows) must also give
 * every output the same bits as the few-row path, whatever M, and on 1 or 2 threads (fp8: the
 * same bits on either side of its 8-row threshold and on any thread count, agreement within 2e-5 across it) (the engine
 * compares batched and unbatched runs, where W8A8 would turn a last-bit difference into a
 * different quantized activation).
 *
 * Oracles, computed here from the unpacked checkpoint bytes:
 *   fp8-block, int8-row: the dequantized weights (e4m3 decoded by this file's own formula)
 *     times x in double. Every level multiplies exactly and sums in fp32 in some order, plus
 *     one rounding per block scale, so with u = 2^-24 and mag = |y0| + Σ_k |w_k x_k|:
 *       |y - y_ref| <= (K + 2·ceil(K/128) + 4) u mag.
 *     The reference level is held to the same bound, and every level to twice it against the
 *     reference level.
 *   int8-w8a8: this file's own quantization (nearbyint in the default rounding mode: half to
 *     even), an exact int64 dot product and the fp32 scaling of the contract: every level must
 *     match it bit for bit. */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "kernels/qlinear.h"
#include "kernels/qlinear_internal.h" /* the many-row and amx workspace sizes */

#define SENTINEL 12345.0f

/* e4m3fn, written independently of the kernels: (-1)^s 2^(e-7) (1 + m/8), e = 0 subnormal. */
static double e4m3_value(uint8_t b)
{
    int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    double v = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
    return s ? -v : v;
}

/* A checkpoint tensor (N_total, K_total) with its full scale grid. */
typedef struct {
    numla_qlinear_format fmt;
    int64_t nt, kt, sr, sc;
    uint8_t *data;
    float *scales;
} tensor;

static tensor make_tensor(numla_qlinear_format fmt, int64_t nt, int64_t kt, numla_test_rng *rng)
{
    tensor t = {fmt, nt, kt, 0, 0, malloc((size_t)(nt * kt)), NULL};
    if (fmt == NUMLA_QLINEAR_FP8_BLOCK) {
        t.sr = (nt + 127) / 128;
        t.sc = (kt + 127) / 128;
    } else {
        t.sr = nt;
        t.sc = 1;
    }
    t.scales = malloc((size_t)(t.sr * t.sc) * sizeof(float));
    CU_ASSERT_FATAL(t.data && t.scales);
    for (int64_t i = 0; i < nt * kt; i++) {
        uint8_t b = (uint8_t)numla_test_rng_u64(rng);
        if (fmt == NUMLA_QLINEAR_FP8_BLOCK && (b & 0x7f) == 0x7f)
            b ^= 1; /* no NaN encodings: the loader rejects them */
        t.data[i] = b;
    }
    /* Scales spread over two decades, so a block applied to the wrong rows or columns shows. */
    for (int64_t i = 0; i < t.sr * t.sc; i++)
        t.scales[i] = (float)(fmt == NUMLA_QLINEAR_FP8_BLOCK ? 1e-3 : 1e-2) *
                      (float)pow(10.0, numla_test_rng_uniform(rng, -1.0, 1.0));
    return t;
}

static void free_tensor(tensor *t)
{
    free(t->data);
    free(t->scales);
}

static double deq(const tensor *t, int64_t row, int64_t col)
{
    uint8_t b = t->data[row * t->kt + col];
    if (t->fmt == NUMLA_QLINEAR_FP8_BLOCK)
        return e4m3_value(b) * t->scales[(row / 128) * t->sc + col / 128];
    return (double)(int8_t)b * t->scales[row];
}

typedef struct {
    int64_t nt, kt, row0, col0, n, k;
} slice;

/* The W8A8 oracle for one row of x: q (k) and sx. */
static float quantize_oracle(const float *x, int64_t k, int *q)
{
    float amax = 1e-7f;
    for (int64_t c = 0; c < k; c++)
        if (fabsf(x[c]) > amax)
            amax = fabsf(x[c]);
    float inv = 127.0f / amax;
    for (int64_t c = 0; c < k; c++)
        q[c] = (int)nearbyintf(x[c] * inv);
    return amax / 127.0f;
}

/* Runs one (format, slice, level, M, accumulate) case against the oracle and, unless isa is
 * ref, against the ref level on the same packed bytes; returns the number of bad outputs. */
static int run_case(numla_qlinear_format fmt, slice sl, numla_isa isa, int64_t m, int accumulate,
                    uint64_t seed)
{
    numla_test_rng rng = {seed};
    tensor t = make_tensor(fmt, sl.nt, sl.kt, &rng);
    const int64_t n = sl.n, k = sl.k, ldx = k + 5, ldy = n + 7;
    float *x = malloc((size_t)(m * ldx) * sizeof *x);
    float *y = malloc((size_t)(m * ldy) * sizeof *y), *yr = malloc((size_t)(m * ldy) * sizeof *yr);
    double *yo = malloc((size_t)(m * n) * sizeof *yo), *mag = malloc((size_t)(m * n) * sizeof *mag);
    double *xw = malloc((size_t)(m * n) * sizeof *xw); /* max|x| · Σ|s w|: int8-row's planes bound */
    int *q = malloc((size_t)k * sizeof *q);
    CU_ASSERT_FATAL(x && y && yr && yo && mag && xw && q);
    for (int64_t i = 0; i < m * ldx; i++)
        x[i] = (float)numla_test_rng_normal(&rng);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < ldy; j++)
            y[i * ldy + j] = yr[i * ldy + j] = j < n ? (float)numla_test_rng_normal(&rng) : SENTINEL;

    /* the slice's weights dequantized once (every row of x reads them), and Σ|s w| per row */
    double *wd = NULL, *sw_row = NULL;
    if (fmt != NUMLA_QLINEAR_INT8_W8A8) {
        wd = malloc((size_t)(n * k) * sizeof *wd);
        sw_row = malloc((size_t)n * sizeof *sw_row);
        CU_ASSERT_FATAL(wd && sw_row);
        for (int64_t j = 0; j < n; j++) {
            double sw = 0;
            for (int64_t c = 0; c < k; c++) {
                wd[j * k + c] = deq(&t, sl.row0 + j, sl.col0 + c);
                sw += fabs(wd[j * k + c]);
            }
            sw_row[j] = sw;
        }
    }
    for (int64_t i = 0; i < m; i++) {
        const float *xi = x + i * ldx;
        float sx = fmt == NUMLA_QLINEAR_INT8_W8A8 ? quantize_oracle(xi, k, q) : 0.0f;
        for (int64_t j = 0; j < n; j++) {
            const int64_t row = sl.row0 + j;
            double y0 = accumulate ? y[i * ldy + j] : 0.0;
            if (fmt == NUMLA_QLINEAR_INT8_W8A8) {
                int64_t acc = 0;
                for (int64_t c = 0; c < k; c++)
                    acc += (int64_t)q[c] * (int8_t)t.data[row * t.kt + sl.col0 + c];
                float v = (float)acc * sx * t.scales[row];
                yo[i * n + j] = accumulate ? (double)(float)(y[i * ldy + j] + v) : (double)v;
                mag[i * n + j] = 0.0;
                continue;
            }
            double s = y0, a = fabs(y0), amax = 0;
            const double *wj = wd + j * k;
            for (int64_t c = 0; c < k; c++) {
                double p = wj[c] * xi[c];
                s += p;
                a += fabs(p);
                amax = fmax(amax, fabs(xi[c]));
            }
            yo[i * n + j] = s;
            mag[i * n + j] = a;
            xw[i * n + j] = amax * sw_row[j];
        }
    }
    free(wd);
    free(sw_row);

    numla_qlinear_source src = {fmt, n, k, sl.row0, sl.col0, t.data + sl.row0 * t.kt + sl.col0,
                                t.kt, t.scales, t.sr, t.sc};
    size_t bytes = numla_qlinear_packed_size(fmt, n, k);
    CU_ASSERT_FATAL(bytes > 0);
    void *packed = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    CU_ASSERT_FATAL(packed != NULL);
    numla_qlinear_weight w;
    numla_status st = numla_qlinear_pack(&src, packed, &w);
    NUMLA_ASSERT_MSG(st == NUMLA_STATUS_OK, "pack failed: %s", numla_error_message());
    size_t ws = numla_qlinear_workspace_size(&w, m, 2);
    unsigned char *wsbuf = malloc(ws + 1); /* misaligned on purpose: the kernel aligns */
    st = numla_qlinear_forward(isa, &w, m, x, ldx, y, ldy, accumulate, ws ? wsbuf + 1 : NULL, ws);
    NUMLA_ASSERT_MSG(st == NUMLA_STATUS_OK, "forward failed: %s", numla_error_message());
    if (isa != NUMLA_ISA_REF) {
        st = numla_qlinear_forward(NUMLA_ISA_REF, &w, m, x, ldx, yr, ldy, accumulate,
                                   ws ? wsbuf + 1 : NULL, ws);
        CU_ASSERT(st == NUMLA_STATUS_OK);
    }

    const double rel_ref = (double)(k + 2 * ((k + 127) / 128) + 4) * ldexp(1.0, -24);
    /* fp8 and int8-row on the amx level's tiles: their own bounds (kernels/qlinear.h) */
    const int tiles = fmt != NUMLA_QLINEAR_INT8_W8A8 && numla_qlinear_uses_amx(isa, &w, m);
    /* fp8 M = 1-12 at the avx512bf16 level (VBMI): split-bf16 x, 2K exact products in fp32 */
    const int vbmi = fmt == NUMLA_QLINEAR_FP8_BLOCK && m <= NUMLA_QL16_MAX_M &&
                     w.kp <= NUMLA_QL16_MAX_K &&
                     numla_qlinear_level(isa, fmt) == NUMLA_ISA_AVX512BF16;
    /* int8-row as three int8 planes of x, exact integer sums (relative to max|x| Σ|s w|): the
     * avx512bf16 level with VNNI and the amx level, where its weight is large enough */
    const int planes = fmt == NUMLA_QLINEAR_INT8_ROW && numla_qlinear_int8row_planes_apply(&w) &&
                       numla_qlinear_level(isa, fmt) >= NUMLA_ISA_AVX512BF16;
    const double rel = planes ? 2 * ldexp(1.0, -24)
                       : tiles ? ldexp(1.0, -17) + (double)(2 * (k < 128 ? k : 128) + (k + 127) / 128 + 4) * ldexp(1.0, -24)
                       : vbmi  ? ldexp(1.0, -16) + 2 * rel_ref
                               : rel_ref;
    const double rel_xw = planes ? ldexp(1.0, -17) / 127 + ldexp(1.0, -23) : 0.0;
    int bad = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < ldy; j++) {
            float got = y[i * ldy + j];
            const char *why = NULL;
            double want = j < n ? yo[i * n + j] : SENTINEL, err = 0, tol = 0;
            if (j >= n) {
                if (got != SENTINEL)
                    why = "written past N";
            } else if (!isfinite(got)) {
                why = "not finite";
            } else if (fmt == NUMLA_QLINEAR_INT8_W8A8) {
                if ((double)got != want || (isa != NUMLA_ISA_REF && got != yr[i * ldy + j]))
                    why = "not bit-exact";
            } else {
                err = fabs(got - want);
                tol = rel * mag[i * n + j] + rel_xw * xw[i * n + j] + 1e-30;
                if (!(err <= tol))
                    why = "off the dequantized matmul";
                else if (isa != NUMLA_ISA_REF &&
                         !(fabs(got - yr[i * ldy + j]) <= tol + rel_ref * mag[i * n + j] + 1e-30))
                    why = "off the ref level";
            }
            if (why && bad++ == 0)
                fprintf(stderr,
                        "\n    %s %s slice %lldx%lld at (%lld,%lld) M=%lld acc=%d: y[%lld][%lld]=%.9g "
                        "want %.9g (ref level %.9g) err %.3g tol %.3g: %s\n",
                        numla_isa_name(isa), numla_qlinear_format_name(fmt), (long long)n, (long long)k,
                        (long long)sl.row0, (long long)sl.col0, (long long)m, accumulate, (long long)i,
                        (long long)j, got, want, yr[i * ldy + j], err, tol, why);
        }
    free(packed);
    free(wsbuf);
    free(x);
    free(y);
    free(yr);
    free(yo);
    free(mag);
    free(xw);
    free(q);
    free_tensor(&t);
    return bad;
}

static const slice slices[] = {
    {200, 300, 0, 0, 200, 300},    /* whole tensor, N and K not multiples of 128 or 16 */
    {576, 333, 192, 0, 192, 333},  /* head 1 of a 192-row-per-head projection */
    {300, 400, 61, 128, 77, 130},  /* rows from 61, columns from 128, block cut at the end */
    {40, 2048, 5, 0, 33, 2048},    /* a long K */
    {3, 17, 2, 0, 1, 17},          /* one row, one partial 16-chunk */
    {12, 4608, 0, 0, 9, 4500},     /* K past 4096: the avx512bf16 fp8 GEMV's row pairs */
    {600, 520, 10, 0, 530, 520},   /* int8-row's planes (NUMLA_QLINEAR_ROW_PLANES_MIN_WEIGHTS),
                                      a partial last 16-row block */
};

static void run_all(numla_qlinear_format fmt)
{
    numla_isa isas[NUMLA_ISA_COUNT];
    int ni = numla_test_isas(isas), bad = 0;
    const int64_t ms[] = {1, 3, 6, 7, 8, 17, 31, 32, 64}; /* 6: fp8's 2 x 4 tiles and their
                                                       tail, int8-row's 4 x 4 tiles and a 2-row
                                                       tail; fp8 from 8, W8A8 from 32: their
                                                       many-row paths */
    uint64_t seed = 1000 + (uint64_t)fmt * 100;
    unsigned kept = 0; /* one case in 5 by default, 11 when lean (2, 18 and 108 cases inside
                         the loops) */
    for (int a = 0; a < ni; a++)
        for (size_t s = 0; s < sizeof slices / sizeof slices[0]; s++)
            for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
                for (int acc = 0; acc < 2; acc++, seed++)
                    if (numla_test_sweep_keep(&kept, 5))
                        bad += run_case(fmt, slices[s], isas[a], ms[mi], acc, seed);
    CU_ASSERT_EQUAL(bad, 0);
}

/* Σ_k |w[j][k] x[k]| + |y0| for row j of slice sl (the scale of the kernels' error bounds). */
static double mag_row(const tensor *t, slice sl, int64_t j, const float *x, float y0)
{
    double a = fabs((double)y0);
    for (int64_t c = 0; c < sl.k; c++)
        a += fabs(deq(t, sl.row0 + j, sl.col0 + c) * (double)x[c]);
    return a;
}

/* The fp8 path numla_qlinear_forward takes for m rows of w at level isa: 0 one row at a time
 * (1 at the avx512bf16 level's split-bf16 GEMV, 1 to NUMLA_QL16_MAX_M rows), 2 the many-row panel GEMM, 3 the amx level's
 * tiles (4 with power-of-two scales folded into the weights). A row's bits depend only on its
 * path. */
static int fp8_path(const numla_qlinear_weight *w, numla_isa isa, int64_t m)
{
    const numla_isa level = numla_qlinear_level(isa, NUMLA_QLINEAR_FP8_BLOCK);
    if (level == NUMLA_ISA_AMX) /* below the tiles the amx level runs avx512's rows */
        return numla_qlinear_amx_wide_applies(w, m) ? (w->scale_pow2 ? 4 : 3) : 0;
    if (m >= (int64_t)NUMLA_QLINEAR_PANEL_MIN_M)
        return 2;
    return m <= NUMLA_QL16_MAX_M && w->kp <= NUMLA_QL16_MAX_K && level == NUMLA_ISA_AVX512BF16 ? 1 : 0;
}

/* The split-bf16 part of a path's bound (kernels/qlinear.h), relative to Σ|w x|; 0 where x
 * stays fp32. */
static double fp8_split_rel(int path, int64_t k)
{
    return path == 1 ? ldexp(1.0, -16) + (double)k * ldexp(1.0, -24)
           : path == 3 ? ldexp(1.0, -17) + (double)(2 * (k < 128 ? k : 128) + (k + 127) / 128 + 2) * ldexp(1.0, -24)
           : path == 4 ? ldexp(1.0, -17) + (double)(k / 16 + 18) * ldexp(1.0, -24)
                       : 0.0;
}

/* Bit-identity of one (format, slice, level; fp8 across a path boundary: agreement within the
 * two paths' bounds; pow2: fp8 scales 2^e, which the amx level folds into its tiles' weights):
 * y for M rows at once on 2 threads against each
 * row alone, 3 rows (below int8-row's 4-row threshold), the first 31 and 32 rows, 7 and 8 rows
 * (either side of fp8's), 13 and 15 rows (fp8's tiles at the amx level, one padded x tile), 32
 * rows elsewhere and all M on one thread; accumulate off and on.
 * Returns the number of differing outputs. */
static int run_invariance(numla_qlinear_format fmt, slice sl, numla_isa isa, int pow2, uint64_t seed)
{
    enum { M = 300 };
    numla_test_rng rng = {seed};
    tensor t = make_tensor(fmt, sl.nt, sl.kt, &rng);
    for (int64_t i = 0; pow2 && i < t.sr * t.sc; i++) /* 2^-14 .. 2^-7 */
        t.scales[i] = ldexpf(1.0f, -14 + (int)(numla_test_rng_u64(&rng) % 8));
    const int64_t n = sl.n, k = sl.k, ldx = k + 3, ldy = n + 5;
    numla_qlinear_source src = {fmt, n, k, sl.row0, sl.col0, t.data + sl.row0 * t.kt + sl.col0,
                                t.kt, t.scales, t.sr, t.sc};
    void *packed = aligned_alloc(64, (numla_qlinear_packed_size(fmt, n, k) + 63) & ~(size_t)63);
    float *x = malloc((size_t)(M * ldx) * sizeof *x), *y0 = malloc((size_t)(M * ldy) * sizeof *y0);
    float *y = malloc((size_t)(M * ldy) * sizeof *y), *ya = malloc((size_t)(M * ldy) * sizeof *ya);
    CU_ASSERT_FATAL(packed && x && y0 && y && ya);
    numla_qlinear_weight w;
    CU_ASSERT_FATAL(numla_qlinear_pack(&src, packed, &w) == NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(w.scale_pow2, pow2);
    for (int64_t i = 0; i < M * ldx; i++)
        x[i] = (float)numla_test_rng_normal(&rng);
    for (int64_t i = 0; i < M * ldy; i++)
        y0[i] = (float)numla_test_rng_normal(&rng);
    const size_t ws = numla_qlinear_workspace_size(&w, M, 2);
    unsigned char *wsbuf = malloc(ws + 1);
    const int team = omp_get_max_threads();
    int bad = 0;
    for (int acc = 0; acc < 2; acc++) {
        memcpy(ya, y0, (size_t)(M * ldy) * sizeof *ya);
        omp_set_num_threads(2);
        CU_ASSERT(numla_qlinear_forward(isa, &w, M, x, ldx, ya, ldy, acc, wsbuf + 1, ws) == NUMLA_STATUS_OK);
        /* (rows, first row, threads) of each comparison run */
        const int64_t runs[][3] = {{M, 0, 1}, {3, 11, 2},  {31, 0, 2}, {32, 0, 2},  {32, 268, 1}, {7, 3, 2},
                                   {8, 3, 2}, {13, 40, 2}, {15, 285, 1}, {1, 0, 2}, {1, 37, 2}, {1, 299, 1}};
        for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
            const int64_t rows = runs[r][0], i0 = runs[r][1];
            memcpy(y, y0, (size_t)(M * ldy) * sizeof *y);
            omp_set_num_threads((int)runs[r][2]);
            CU_ASSERT(numla_qlinear_forward(isa, &w, rows, x + i0 * ldx, ldx, y + i0 * ldy, ldy, acc,
                                            wsbuf + 1, ws) == NUMLA_STATUS_OK);
            /* fp8 sums in another order on each of its paths (one row at a time, the many-row
             * panel GEMM, the amx level's tiles): across a path boundary the two agree within
             * the kernels' bounds (accuracy itself: test_fp8_block), on one path to the bit */
            const int pr = fp8_path(&w, isa, rows), pa = fp8_path(&w, isa, M);
            const int across = fmt == NUMLA_QLINEAR_FP8_BLOCK && pr != pa;
            /* split-bf16 x (fp8 M = 1 at the avx512bf16 level, the amx level's tiles): add that
             * path's bound (kernels/qlinear.h) to the tolerance, relative to Σ|w x| */
            const double vrel = fp8_split_rel(pr, k) + fp8_split_rel(pa, k) +
                                4.0 * (double)(k + 2 * ((k + 127) / 128) + 4) * ldexp(1.0, -24);
            const int split = fp8_split_rel(pr, k) > 0 || fp8_split_rel(pa, k) > 0;
            for (int64_t i = i0; i < i0 + rows; i++)
                for (int64_t j = 0; j < n; j++)
                    if ((across ? !(fabsf(y[i * ldy + j] - ya[i * ldy + j]) <=
                                    2e-5f * (fabsf(ya[i * ldy + j]) + 1.0f) +
                                        (split ? vrel * mag_row(&t, sl, j, x + i * ldx, acc ? y0[i * ldy + j] : 0)
                                               : 0.0))
                                : memcmp(&y[i * ldy + j], &ya[i * ldy + j], sizeof(float)) != 0) &&
                        bad++ == 0)
                        fprintf(stderr,
                                "\n    %s %s %lldx%lld: %lld rows from %lld on %lld threads, acc=%d: "
                                "y[%lld][%lld] = %.9g, all %d rows on 2 threads gave %.9g\n",
                                numla_isa_name(isa), numla_qlinear_format_name(fmt), (long long)n,
                                (long long)k, (long long)rows, (long long)i0, (long long)runs[r][2], acc,
                                (long long)i, (long long)j, y[i * ldy + j], M, ya[i * ldy + j]);
        }
    }
    omp_set_num_threads(team);
    free(wsbuf);
    free(packed);
    free(x);
    free(y0);
    free(y);
    free(ya);
    free_tensor(&t);
    return bad;
}

/* fp8 M = 1 on 1, 2 and 3 threads: the same bits (past K = 4096 the avx512bf16 GEMV takes
 * rows in pairs, so a thread split moves rows between its pair and single-row code). */
static void test_fp8_gemv_threads(void)
{
    numla_isa isas[NUMLA_ISA_COUNT];
    int ni = numla_test_isas(isas), bad = 0;
    const slice sl = {12, 4608, 0, 0, 9, 4500};
    numla_test_rng rng = {4242};
    tensor t = make_tensor(NUMLA_QLINEAR_FP8_BLOCK, sl.nt, sl.kt, &rng);
    numla_qlinear_source src = {NUMLA_QLINEAR_FP8_BLOCK, sl.n, sl.k, 0, 0, t.data, t.kt, t.scales, t.sr, t.sc};
    void *packed = aligned_alloc(64, (numla_qlinear_packed_size(NUMLA_QLINEAR_FP8_BLOCK, sl.n, sl.k) + 63) & ~(size_t)63);
    float *x = malloc((size_t)sl.k * sizeof *x), y[3][9];
    CU_ASSERT_FATAL(packed && x);
    numla_qlinear_weight w;
    CU_ASSERT_FATAL(numla_qlinear_pack(&src, packed, &w) == NUMLA_STATUS_OK);
    for (int64_t i = 0; i < sl.k; i++)
        x[i] = (float)numla_test_rng_normal(&rng);
    const int team = omp_get_max_threads();
    for (int a = 0; a < ni; a++) {
        for (int th = 1; th <= 3; th++) {
            omp_set_num_threads(th);
            CU_ASSERT(numla_qlinear_forward(isas[a], &w, 1, x, sl.k, y[th - 1], sl.n, 0, NULL, 0) == NUMLA_STATUS_OK);
        }
        for (int th = 2; th <= 3; th++)
            if (memcmp(y[0], y[th - 1], sizeof y[0]) != 0 && bad++ == 0)
                fprintf(stderr, "\n    %s fp8 M=1 K=%lld: %d threads differ from 1\n",
                        numla_isa_name(isas[a]), (long long)sl.k, th);
    }
    omp_set_num_threads(team);
    CU_ASSERT_EQUAL(bad, 0);
    free(x);
    free(packed);
    free_tensor(&t);
}

static void test_row_invariance(void)
{
    numla_isa isas[NUMLA_ISA_COUNT];
    int ni = numla_test_isas(isas), bad = 0;
    const slice sl[] = {
        {300, 400, 61, 128, 77, 130}, /* rows from 61, a cut block, 77 rows (a 4-row tail) */
        {40, 2048, 5, 0, 33, 2048},   /* several x-row blocks on the many-row paths */
        {200, 333, 0, 0, 199, 333},   /* K not a multiple of 64 */
        /* from NUMLA_QLINEAR_ROW_PLANES_MIN_WEIGHTS: int8-row's planes, on the amx level's tiles
         * or the avx512bf16 level's VNNI GEMM, and below 4 rows the VNNI rows (a partial last
         * block; only there) */
        {560, 520, 10, 0, 530, 520},
    };
    uint64_t seed = 77;
    for (int a = 0; a < ni; a++)
        for (int f = 0; f < 2; f++) /* fp8-block, int8-row */
            for (size_t s = 0; s < sizeof sl / sizeof sl[0]; s++)
                if (s < 3 || (f == 1 && numla_qlinear_level(isas[a], NUMLA_QLINEAR_INT8_ROW) >= NUMLA_ISA_AVX512BF16))
                    bad += run_invariance((numla_qlinear_format)f, sl[s], isas[a], 0, seed++);
    /* fp8 with power-of-two scales (DeepSeek-V4's E8M0): the amx level's tiles fold them into the
     * weights and sum over all of K; and K past NUMLA_QLINEAR_AMX_FP8_SLAB_MIN_K (weights widened
     * a slab at a time), both kinds of scales */
    const slice slab = {40, 4200, 0, 0, 33, 4200};
    for (int a = 0; a < ni; a++)
        if (numla_qlinear_level(isas[a], NUMLA_QLINEAR_FP8_BLOCK) == NUMLA_ISA_AMX) {
            for (size_t s = 0; s < 3; s++)
                bad += run_invariance(NUMLA_QLINEAR_FP8_BLOCK, sl[s], isas[a], 1, seed++);
            for (int p2 = 0; p2 < 2; p2++)
                bad += run_invariance(NUMLA_QLINEAR_FP8_BLOCK, slab, isas[a], p2, seed++);
        }
    CU_ASSERT_EQUAL(bad, 0);
}

/* Up to 12 rows (a speculative verify step's 9 and more) every format gives each row, at every
 * level, the bits of its one-row call (kernels/qlinear.h): fp8 at avx512bf16 its split-bf16
 * GEMV's, elsewhere the few-row tiles'; rows 2-12 on 1 and 2 threads, accumulate off and on,
 * K a cut block, two and a half blocks, and past the GEMV's row pairs. */
static void test_small_m_row_invariant(void)
{
    enum { MMAX = 12 };
    numla_isa isas[NUMLA_ISA_COUNT];
    const int ni = numla_test_isas(isas);
    const slice sl[] = {{100, 400, 3, 128, 40, 130}, {64, 320, 0, 0, 33, 320}, {20, 4608, 0, 0, 17, 4500}};
    const int team = omp_get_max_threads();
    int bad = 0;
    numla_test_rng rng = {0x51ab};
    for (int f = 0; f < NUMLA_QLINEAR_FORMAT_COUNT; f++)
        for (size_t s = 0; s < sizeof sl / sizeof sl[0]; s++) {
            const numla_qlinear_format fmt = (numla_qlinear_format)f;
            tensor t = make_tensor(fmt, sl[s].nt, sl[s].kt, &rng);
            const int64_t n = sl[s].n, k = sl[s].k, ldx = k + 3, ldy = n + 5;
            numla_qlinear_source src = {fmt, n, k, sl[s].row0, sl[s].col0,
                                        t.data + sl[s].row0 * t.kt + sl[s].col0, t.kt, t.scales, t.sr, t.sc};
            void *packed = aligned_alloc(64, (numla_qlinear_packed_size(fmt, n, k) + 63) & ~(size_t)63);
            float *x = malloc((size_t)(MMAX * ldx) * sizeof *x), *y0 = malloc((size_t)(MMAX * ldy) * sizeof *y0);
            float *y1 = malloc((size_t)(MMAX * ldy) * sizeof *y1), *ym = malloc((size_t)(MMAX * ldy) * sizeof *ym);
            numla_qlinear_weight w;
            CU_ASSERT_FATAL(packed && x && y0 && y1 && ym && numla_qlinear_pack(&src, packed, &w) == NUMLA_STATUS_OK);
            for (int64_t i = 0; i < MMAX * ldx; i++)
                x[i] = (float)numla_test_rng_normal(&rng);
            for (int64_t i = 0; i < MMAX * ldy; i++)
                y0[i] = (float)numla_test_rng_normal(&rng);
            const size_t ws = numla_qlinear_workspace_size(&w, MMAX, 2);
            unsigned char *wsb = malloc(ws + 1);
            for (int a = 0; a < ni; a++)
                for (int acc = 0; acc < 2; acc++) {
                    omp_set_num_threads(1);
                    memcpy(y1, y0, (size_t)(MMAX * ldy) * sizeof *y1);
                    for (int64_t i = 0; i < MMAX; i++)
                        CU_ASSERT(numla_qlinear_forward(isas[a], &w, 1, x + i * ldx, ldx, y1 + i * ldy, ldy,
                                                        acc, wsb + 1, ws) == NUMLA_STATUS_OK);
                    for (int64_t m = 2; m <= MMAX; m++)
                        for (int nt = 1; nt <= 2; nt++) {
                            omp_set_num_threads(nt);
                            memcpy(ym, y0, (size_t)(MMAX * ldy) * sizeof *ym);
                            CU_ASSERT(numla_qlinear_forward(isas[a], &w, m, x, ldx, ym, ldy, acc, wsb + 1,
                                                            ws) == NUMLA_STATUS_OK);
                            for (int64_t i = 0; i < m; i++)
                                if (memcmp(ym + i * ldy, y1 + i * ldy, (size_t)n * sizeof *ym) && bad++ == 0)
                                    fprintf(stderr, "\n    %s %s %lldx%lld acc %d: row %lld of %lld rows "
                                            "(%d threads) differs from its one-row call\n",
                                            numla_isa_name(isas[a]), numla_qlinear_format_name(fmt),
                                            (long long)n, (long long)k, acc, (long long)i, (long long)m, nt);
                        }
                }
            free(wsb);
            free(packed);
            free(x);
            free(y0);
            free(y1);
            free(ym);
            free_tensor(&t);
        }
    omp_set_num_threads(team);
    CU_ASSERT_EQUAL(bad, 0);
}

/* W8A8's VNNI GEMM (from NUMLA_QLINEAR_VNNI_GEMM_MIN_M rows) packs its columns in chunks
 * (numla_qlinear_vnni_chunk: 64 columns at K = 5000): 150 columns from row 7 are three chunks,
 * the last two panels and partly past N, and 70 rows end on a 4-row micro-tile; 1 to 3 threads
 * (a thread's share of panels is then not a whole chunk). Bit for bit against the oracle. */
static void test_w8a8_gemm_chunks(void)
{
    numla_isa isas[NUMLA_ISA_COUNT];
    int ni = numla_test_isas(isas), bad = 0;
    const slice sl = {160, 5000, 7, 0, 150, 5000};
    const int64_t ms[] = {32, 70};
    const int team = omp_get_max_threads();
    uint64_t seed = 4711;
    for (int a = 0; a < ni; a++) {
        if (numla_qlinear_level(isas[a], NUMLA_QLINEAR_INT8_W8A8) != isas[a])
            continue; /* a level that inherits runs the same code as the one below */
        if (isas[a] == NUMLA_ISA_REF && numla_test_sweep_lean())
            continue; /* lean: the chunked levels only (the reference has no chunks; run_all
                         checks it on W8A8) */
        for (int th = 1; th <= 3; th++) {
            omp_set_num_threads(th);
            for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
                for (int acc = 0; acc < 2; acc++)
                    bad += run_case(NUMLA_QLINEAR_INT8_W8A8, sl, isas[a], ms[mi], acc, seed++);
        }
    }
    omp_set_num_threads(team);
    CU_ASSERT_EQUAL(bad, 0);
}

static void test_fp8_block(void) { run_all(NUMLA_QLINEAR_FP8_BLOCK); }
static void test_int8_row(void) { run_all(NUMLA_QLINEAR_INT8_ROW); }
static void test_int8_w8a8(void) { run_all(NUMLA_QLINEAR_INT8_W8A8); }

static void test_fp8_values(void)
{
    CU_ASSERT_EQUAL(numla_qlinear_fp8_to_f32(0x7e), 448.0f);
    CU_ASSERT_EQUAL(numla_qlinear_fp8_to_f32(0xfe), -448.0f);
    CU_ASSERT_EQUAL(numla_qlinear_fp8_to_f32(0x38), 1.0f);
    CU_ASSERT_EQUAL(numla_qlinear_fp8_to_f32(0x08), ldexpf(1.0f, -6)); /* smallest normal */
    CU_ASSERT_EQUAL(numla_qlinear_fp8_to_f32(0x01), ldexpf(1.0f, -9)); /* smallest subnormal */
    CU_ASSERT_EQUAL(numla_qlinear_fp8_to_f32(0x87), -ldexpf(7.0f, -9));
    CU_ASSERT(isnan(numla_qlinear_fp8_to_f32(0x7f)) && isnan(numla_qlinear_fp8_to_f32(0xff)));
    for (int b = 0; b < 256; b++)
        if ((b & 0x7f) != 0x7f)
            CU_ASSERT_EQUAL((double)numla_qlinear_fp8_to_f32((uint8_t)b), e4m3_value((uint8_t)b));
}

/* Ties go to even: with max|x| = 127, x·(127/amax) is x itself, and W = identity reads q back
 * (sx = s = 1). Half away from zero would give 1, 3, -1, -3 for 0.5, 2.5, -0.5, -2.5. */
static void test_w8a8_rounding(void)
{
    enum { K = 8 };
    const float x[K] = {127.0f, 0.5f, 1.5f, 2.5f, -0.5f, -2.5f, -1.5f, 3.49f};
    const float want[K] = {127.0f, 0.0f, 2.0f, 2.0f, 0.0f, -2.0f, -2.0f, 3.0f};
    int8_t wsrc[K * K] = {0};
    float sc[K];
    for (int i = 0; i < K; i++) {
        wsrc[i * K + i] = 1;
        sc[i] = 1.0f;
    }
    numla_qlinear_source src = {NUMLA_QLINEAR_INT8_W8A8, K, K, 0, 0, wsrc, K, sc, K, 1};
    void *packed = aligned_alloc(64, numla_qlinear_packed_size(src.fmt, K, K));
    numla_qlinear_weight w;
    CU_ASSERT_FATAL(numla_qlinear_pack(&src, packed, &w) == NUMLA_STATUS_OK);
    size_t ws = numla_qlinear_workspace_size(&w, 1, 1);
    void *wsbuf = malloc(ws);
    numla_isa isas[NUMLA_ISA_COUNT];
    int ni = numla_test_isas(isas);
    for (int a = 0; a < ni; a++) {
        float y[K];
        CU_ASSERT(numla_qlinear_forward(isas[a], &w, 1, x, K, y, K, 0, wsbuf, ws) == NUMLA_STATUS_OK);
        for (int i = 0; i < K; i++)
            NUMLA_ASSERT_MSG(y[i] == want[i], "%s: q(%g) = %g, want %g", numla_isa_name(isas[a]),
                             (double)x[i], (double)y[i], (double)want[i]);
    }
    free(wsbuf);
    free(packed);
}

/* Extreme codes at every level, on both sides of every path's row threshold (1, 5, 13, 40
 * rows): fp8 rows that cycle through all 254 non-NaN e4m3 codes (subnormals 0x01-0x07 and
 * 0x81-0x87, +-0, +-448) against the dequantized matmul in double; int8 rows of -128 only, of
 * -128 and 127 alternating, and of every code, with x rows of one magnitude (each q = +-127:
 * int16 pair sums of 2 · 128 · 127, where an unsigned-x product would saturate), W8A8 bit for bit
 * against this file's oracle, int8-row within the bound. */
static void test_extreme_codes(void)
{
    enum { N = 37, K = 300, MMAX = 40 };
    numla_isa isas[NUMLA_ISA_COUNT];
    const int ni = numla_test_isas(isas);
    const int64_t ms[] = {1, 5, 13, MMAX};
    uint8_t *data = malloc(N * K);
    float *x = malloc(MMAX * K * sizeof *x), *y = malloc(MMAX * N * sizeof *y);
    float scales[N * 3];
    int *q = malloc(K * sizeof *q);
    size_t pbytes = 0;
    for (int f = 0; f < NUMLA_QLINEAR_FORMAT_COUNT; f++) {
        const size_t b = numla_qlinear_packed_size((numla_qlinear_format)f, N, K);
        pbytes = b > pbytes ? b : pbytes;
    }
    void *packed = aligned_alloc(64, (pbytes + 63) & ~(size_t)63);
    CU_ASSERT_FATAL(data && x && y && q && packed);
    numla_test_rng rng = {0xe4e3};
    for (int i = 0; i < MMAX * K; i++) /* one magnitude per row (the max: q = +-127), random signs */
        x[i] = (numla_test_rng_u64(&rng) & 1 ? 1.0f : -1.0f) * (float)(1 + (i / K) % 7) * 0.37f;
    int bad = 0;
    for (int f = 0; f < NUMLA_QLINEAR_FORMAT_COUNT; f++) {
        const numla_qlinear_format fmt = (numla_qlinear_format)f;
        const int fp8 = fmt == NUMLA_QLINEAR_FP8_BLOCK;
        for (int r = 0; r < N; r++)
            for (int c = 0; c < K; c++) {
                uint8_t b;
                if (fp8) {
                    b = (uint8_t)((r * 41 + c) % 254); /* 0x00 .. 0x7e, 0x80 .. 0xfe */
                    b = b < 127 ? b : (uint8_t)(b + 1);
                } else {
                    b = r % 3 == 0 ? 0x80 : r % 3 == 1 ? (c & 1 ? 0x7f : 0x80) : (uint8_t)(r * 41 + c);
                }
                data[r * K + c] = b;
            }
        const int64_t sr = fp8 ? 1 : N, sc = fp8 ? 3 : 1;
        for (int i = 0; i < sr * sc; i++)
            scales[i] = fp8 ? ldexpf(1.0f, -10 + 3 * i) : 0.01f * (float)(1 + i % 5);
        numla_qlinear_source src = {fmt, N, K, 0, 0, data, K, scales, sr, sc};
        numla_qlinear_weight w;
        CU_ASSERT_FATAL(numla_qlinear_pack(&src, packed, &w) == NUMLA_STATUS_OK);
        const size_t ws = numla_qlinear_workspace_size(&w, MMAX, 2);
        void *wsbuf = malloc(ws + 1);
        for (int a = 0; a < ni; a++)
            for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
                const int64_t m = ms[mi];
                CU_ASSERT(numla_qlinear_forward(isas[a], &w, m, x, K, y, N, 0, (char *)wsbuf + 1, ws) == NUMLA_STATUS_OK);
                for (int64_t i = 0; i < m; i++) {
                    const float *xi = x + i * K;
                    const float sx = fmt == NUMLA_QLINEAR_INT8_W8A8 ? quantize_oracle(xi, K, q) : 0.0f;
                    for (int r = 0; r < N; r++) {
                        double want = 0, mag = 0;
                        int64_t acc = 0;
                        for (int c = 0; c < K; c++) {
                            const uint8_t b = data[r * K + c];
                            const double wd = fp8 ? e4m3_value(b) * scales[c / 128] : (double)(int8_t)b * scales[r];
                            want += wd * xi[c];
                            mag += fabs(wd * xi[c]);
                            acc += (int64_t)q[c] * (int8_t)b;
                        }
                        const float got = y[i * N + r];
                        int ok;
                        if (fmt == NUMLA_QLINEAR_INT8_W8A8)
                            ok = got == (float)acc * sx * scales[r];
                        else
                            ok = fabs(got - want) <= (double)(K + 2 * 3 + 4) * ldexp(1.0, -24) * mag + 1e-30;
                        if (!ok && bad++ == 0)
                            fprintf(stderr, "\n    %s %s M=%lld: y[%lld][%d] = %.9g, want %.9g\n",
                                    numla_isa_name(isas[a]), numla_qlinear_format_name(fmt), (long long)m,
                                    (long long)i, r, got, fmt == NUMLA_QLINEAR_INT8_W8A8 ? (double)((float)acc * sx * scales[r]) : want);
                    }
                }
            }
        free(wsbuf);
    }
    CU_ASSERT_EQUAL(bad, 0);
    free(packed);
    free(q);
    free(data);
    free(x);
    free(y);
}

static void test_validation(void)
{
    numla_test_rng rng = {7};
    tensor t = make_tensor(NUMLA_QLINEAR_FP8_BLOCK, 300, 300, &rng);
    void *packed = aligned_alloc(64, numla_qlinear_packed_size(NUMLA_QLINEAR_FP8_BLOCK, 300, 300) + 64);
    numla_qlinear_weight w;
    numla_qlinear_source ok = {NUMLA_QLINEAR_FP8_BLOCK, 100, 200, 100, 0, t.data + 100 * 300, 300,
                               t.scales, t.sr, t.sc};
    CU_ASSERT(numla_qlinear_pack(&ok, packed, &w) == NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(w.scale_rows, 2); /* rows 100..199 touch grid rows 0 and 1 */

    numla_qlinear_source s = ok;
    s.col0 = 64;
    CU_ASSERT(numla_qlinear_pack(&s, packed, &w) == NUMLA_STATUS_INVALID_ARG);
    s = ok;
    s.scale_rows = 1; /* rows up to 199 need two grid rows */
    CU_ASSERT(numla_qlinear_pack(&s, packed, &w) == NUMLA_STATUS_INVALID_ARG);
    s = ok;
    s.ld = 100;
    CU_ASSERT(numla_qlinear_pack(&s, packed, &w) == NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT(numla_qlinear_pack(&ok, (char *)packed + 8, &w) == NUMLA_STATUS_INVALID_ARG);
    s = ok;
    s.fmt = NUMLA_QLINEAR_INT8_ROW; /* the fp8 grid is not one scale per row */
    CU_ASSERT(numla_qlinear_pack(&s, packed, &w) == NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_qlinear_packed_size(NUMLA_QLINEAR_FORMAT_COUNT, 1, 1), 0);
    /* Every format has an avx2 variant; a level without one inherits the level below. */
    for (int f = 0; f < NUMLA_QLINEAR_FORMAT_COUNT; f++)
        CU_ASSERT_EQUAL(numla_qlinear_level(NUMLA_ISA_AVX2, (numla_qlinear_format)f), NUMLA_ISA_AVX2);
    /* fp8 has an avx512bf16 variant (M = 1) where the CPU has AVX512_VBMI */
    CU_ASSERT_EQUAL(numla_qlinear_level(NUMLA_ISA_AVX512BF16, NUMLA_QLINEAR_FP8_BLOCK),
                    numla_cpu_has(NUMLA_CPU_VBMI) ? NUMLA_ISA_AVX512BF16 : NUMLA_ISA_AVX512);
    CU_ASSERT(numla_qlinear_level(NUMLA_ISA_AVX512BF16, NUMLA_QLINEAR_INT8_W8A8) <= NUMLA_ISA_AVX512);
    CU_ASSERT_EQUAL(numla_qlinear_packed_size(NUMLA_QLINEAR_FP8_BLOCK, 0, 1), 0);

    CU_ASSERT_FATAL(numla_qlinear_pack(&ok, packed, &w) == NUMLA_STATUS_OK);
    float x[2 * 200] = {0}, y[2 * 100];
    CU_ASSERT(numla_qlinear_forward(NUMLA_ISA_REF, &w, 2, x, 199, y, 100, 0, NULL, 0) ==
              NUMLA_STATUS_INVALID_ARG); /* ldx < K */
    CU_ASSERT(numla_qlinear_forward(NUMLA_ISA_COUNT, &w, 2, x, 200, y, 100, 0, NULL, 0) ==
              NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT(numla_qlinear_forward(NUMLA_ISA_REF, &w, 2, x, 200, x + 10, 100, 0, NULL, 0) ==
              NUMLA_STATUS_INVALID_ARG); /* x and y overlap */
    CU_ASSERT(numla_qlinear_forward(NUMLA_ISA_REF, &w, 0, NULL, 200, NULL, 100, 0, NULL, 0) ==
              NUMLA_STATUS_OK);
    /* From NUMLA_QLINEAR_PANEL_MIN_M rows fp8 needs per-thread scratch: one thread's is enough
     * (the call then runs on one), none is an error; 2 rows to NUMLA_QL16_MAX_M the avx512bf16
     * rows' packed x (asked for at every level), one row none. */
    {
        enum { M = 32 };
        float *xm = calloc(M * 200, sizeof *xm), *ym = malloc(M * 100 * sizeof *ym);
        const size_t one = numla_qlinear_workspace_size(&w, M, 1), two = numla_qlinear_workspace_size(&w, M, 2);
        const size_t per = numla_qlinear_gemm_thread_bytes(&w);
        CU_ASSERT(one >= 64 + per && two >= 64 + 2 * per && two >= one);
        CU_ASSERT(numla_qlinear_workspace_size(&w, NUMLA_QLINEAR_PANEL_MIN_M, 1) >= 64 + per);
        CU_ASSERT(numla_qlinear_workspace_size(&w, 7, 2) >= numla_qlinear_fp8_rows_ws_bytes(&w, 7));
        CU_ASSERT(numla_qlinear_fp8_rows_ws_bytes(&w, 7) >= 7 * (size_t)w.kp * 4);
        CU_ASSERT_EQUAL(numla_qlinear_workspace_size(&w, 1, 2), 0u);
        void *wsm = malloc(one);
        CU_ASSERT(numla_qlinear_forward(numla_isa_best(), &w, M, xm, 200, ym, 100, 0, NULL, 0) ==
                  NUMLA_STATUS_INVALID_ARG);
        CU_ASSERT(numla_qlinear_forward(numla_isa_best(), &w, M, xm, 200, ym, 100, 0, wsm, one - 1) ==
                  NUMLA_STATUS_INVALID_ARG);
        CU_ASSERT(numla_qlinear_forward(numla_isa_best(), &w, M, xm, 200, ym, 100, 0, wsm, one) ==
                  NUMLA_STATUS_OK);
        numla_error_clear();
        free(wsm);
        free(xm);
        free(ym);
    }

    /* W8A8 needs its workspace. */
    tensor t8 = make_tensor(NUMLA_QLINEAR_INT8_W8A8, 300, 300, &rng);
    numla_qlinear_source i8 = {NUMLA_QLINEAR_INT8_W8A8, 100, 200, 0, 0, t8.data, 300, t8.scales,
                               t8.sr, t8.sc};
    CU_ASSERT_FATAL(numla_qlinear_pack(&i8, packed, &w) == NUMLA_STATUS_OK);
    CU_ASSERT(numla_qlinear_workspace_size(&w, 2, 1) > 0);
    CU_ASSERT(numla_qlinear_forward(NUMLA_ISA_REF, &w, 2, x, 200, y, 100, 0, NULL, 0) ==
              NUMLA_STATUS_INVALID_ARG);
    numla_error_clear();
    free(packed);
    free_tensor(&t);
    free_tensor(&t8);
}

NUMLA_TEST_SUITE(qlinear, NULL, NULL, NUMLA_TEST(test_fp8_values), NUMLA_TEST(test_fp8_block), NUMLA_TEST(test_fp8_gemv_threads), NUMLA_TEST(test_w8a8_gemm_chunks),
                 NUMLA_TEST(test_int8_row), NUMLA_TEST(test_int8_w8a8), NUMLA_TEST(test_row_invariance), NUMLA_TEST(test_small_m_row_invariant), NUMLA_TEST(test_w8a8_rounding), NUMLA_TEST(test_extreme_codes),
                 NUMLA_TEST(test_validation))
