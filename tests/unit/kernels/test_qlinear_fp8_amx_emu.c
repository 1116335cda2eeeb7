/* Tests for the fp8-block linear on AMX-BF16 tiles (kernels/x86/qlinear_fp8_amx.c) on a CPU
 * without AMX: the kernel is built against the tile emulator (tests/support/amx_emulate.h;
 * tests/CMakeLists.txt makes numla_amx_emulated) and its y is checked against a
 * double-precision product with the dequantized weights, within the kernel's stated bound
 * (split-bf16 x: fp32-class), and against the ref level within both levels' bounds; for M
 * around the minimum and across x chunks, N and K off the tile sizes, shards whose first row is
 * not a multiple of 16 or 128 (a head's 192 rows), accumulate on and off, fp32 scales and
 * power-of-two ones (folded into the weights: their own bound, and a row's bits the same in
 * calls of other row counts); 1 and 2 threads give the same bits, and the emulator's count of
 * tile products is exactly the tile path's. The
 * emulator's TDPBF16PS is checked on products worked out by hand. */
#include "tests/support/amx_emulate.h"

#include "test_util.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/qlinear_internal.h"
#include "kernels/x86/amx.h"

void numla_qlinear_forward_amx_wide_emulated(const numla_qlinear_weight *w, int64_t m, const float *x,
                                            int64_t ldx, float *y, int64_t ldy, int accumulate,
                                            void *workspace);

#define SENTINEL 12345.0f

/* The emulated kernel's AVX-512 parts (and its avx512 fallback) run natively: AVX512-BF16, and
 * VBMI for fp8's widening. */
static int runnable(void)
{
    if (numla_isa_supported(NUMLA_ISA_AVX512BF16) && numla_cpu_has(NUMLA_CPU_VBMI))
        return 1;
    fprintf(stderr, "(no AVX512-BF16 and VBMI here, skipped) ");
    return 0;
}

/* The bf16 of an exactly representable float (its upper half). */
static uint16_t bf16_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

/* One TDPBF16PS on a 1 x 1 C (colsb 4) with K = 2 pairs: A 1 x 8 bytes {k0 even, k0 odd, k1 even,
 * k1 odd}, B 2 x 4 bytes. Returns C. */
static float dp_1x1(float c0, const uint16_t a[4], const uint16_t b[2][2])
{
    numla_amx_tilecfg cfg __attribute__((aligned(64))) = {.palette = 1};
    cfg.rows[0] = 1, cfg.colsb[0] = 4; /* C */
    cfg.rows[1] = 1, cfg.colsb[1] = 8; /* A */
    cfg.rows[2] = 2, cfg.colsb[2] = 4; /* B */
    float c = c0;
    _tile_loadconfig(&cfg);
    _tile_loadd(0, &c, 4);
    _tile_loadd(1, a, 8);
    _tile_loadd(2, b, 4);
    _tile_dpbf16ps(0, 1, 2);
    _tile_stored(0, &c, 4);
    _tile_release();
    return c;
}

/* TDPBF16PS worked out by hand: the layout on a 2 x 2 C, and one 1 x 1 case per rule of the
 * SDM's pseudo-code (two fp32 lane sums per element, added into C at the end; RNE; DAZ; FTZ). */
static void test_emulator_bf16_hand(void)
{
    /* Layout: C[m][n] += A[m][0] B[0][2n] + A[m][1] B[0][2n+1] (K = 1 pair). */
    numla_amx_tilecfg cfg __attribute__((aligned(64))) = {.palette = 1};
    cfg.rows[0] = 2, cfg.colsb[0] = 8; /* C: 2 x 2 fp32 */
    cfg.rows[1] = 2, cfg.colsb[1] = 4; /* A: 2 x 1 pair */
    cfg.rows[2] = 1, cfg.colsb[2] = 8; /* B: 1 pair-row x 2 */
    const uint16_t a[2][2] = {{bf16_of(1), bf16_of(2)}, {bf16_of(3), bf16_of(4)}};
    const uint16_t b[1][4] = {{bf16_of(5), bf16_of(6), bf16_of(7), bf16_of(8)}};
    const float c0[2][2] = {{1, 2}, {3, 4}};
    /* 1 + 1·5 + 2·6 = 18, 2 + 1·7 + 2·8 = 25, 3 + 3·5 + 4·6 = 42, 4 + 3·7 + 4·8 = 57 */
    const float want[2][2] = {{18, 25}, {42, 57}};
    float got[2][3];
    memset(got, 0x55, sizeof got);
    const long ops = numla_amx_emu_dp_ops;
    _tile_loadconfig(&cfg);
    _tile_loadd(0, c0, sizeof c0[0]);
    _tile_loadd(1, a, sizeof a[0]);
    _tile_loadd(2, b, sizeof b[0]);
    _tile_dpbf16ps(0, 1, 2);
    _tile_stored(0, got, sizeof got[0]);
    _tile_release();
    for (int m = 0; m < 2; m++) {
        for (int n = 0; n < 2; n++)
            NUMLA_ASSERT_MSG(got[m][n] == want[m][n], "C[%d][%d] = %g, want %g", m, n,
                             (double)got[m][n], (double)want[m][n]);
        uint32_t past;
        memcpy(&past, &got[m][2], 4);
        CU_ASSERT_EQUAL(past, 0x55555555u); /* past colsb: untouched */
    }
    CU_ASSERT_EQUAL(numla_amx_emu_dp_ops, ops + 1);

    const uint16_t one = bf16_of(1), zero = 0;
    const float u = ldexpf(1, -24), tiny = ldexpf(1, -126);
    struct {
        const char *what;
        float c0;
        uint16_t a[4], b[2][2];
        float want;
    } cases[] = {
        /* even = odd = 2^-24, their sum 2^-23 is added to 1 once; adding each product to C
         * would round 1 + 2^-24 back to 1 twice */
        {"lane sums added to C at the end", 1.0f, {one, one, zero, zero},
         {{bf16_of(u), bf16_of(u)}, {zero, zero}}, 1.0f + 2 * u},
        /* even = 2^24 + 1 -> 2^24 (tie to even), odd = -2^24: C = 0; a per-k pair sum (0, then 1)
         * or adding each product to C (2^24, 0, 1) gives 1 */
        {"even and odd lanes summed separately over k", 0.0f, {one, one, one, zero},
         {{bf16_of(16777216.0f), bf16_of(-16777216.0f)}, {one, zero}}, 0.0f},
        /* 1.5 + 2^-10 is fp32, not bf16 (bf16 keeps 8 bits: 1.5) */
        {"fp32 accumulation", 1.5f, {one, zero, zero, zero},
         {{bf16_of(ldexpf(1, -10)), zero}, {zero, zero}}, 1.5f + ldexpf(1, -10)},
        /* a bf16 denormal (2^-133) times 2^100 would be 2^-33 */
        {"denormal bf16 input is zero", 0.0f, {0x0001, zero, zero, zero},
         {{bf16_of(ldexpf(1, 100)), zero}, {zero, zero}}, 0.0f},
        /* 1.5·2^-126 - 2^-126 = 2^-127, a denormal result */
        {"denormal result flushed", 1.5f * tiny, {bf16_of(-ldexpf(1, -63)), zero, zero, zero},
         {{bf16_of(ldexpf(1, -63)), zero}, {zero, zero}}, 0.0f},
        /* C = 2^-130 (denormal) reads as 0: the result is the product 2^-125 alone */
        {"denormal C input is zero", ldexpf(1, -130), {one, zero, zero, zero},
         {{bf16_of(ldexpf(1, -125)), zero}, {zero, zero}}, ldexpf(1, -125)},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const float c = dp_1x1(cases[i].c0, cases[i].a, cases[i].b);
        NUMLA_ASSERT_MSG(memcmp(&c, &cases[i].want, 4) == 0, "%s: C = %a, want %a", cases[i].what,
                         (double)c, (double)cases[i].want);
    }
}

/* fp8 weights of a tensor (rows, k) with a random scale grid; no NaN encodings. */
typedef struct {
    int64_t rows, k, sr, sc;
    uint8_t *data;
    float *scales;
} tensor;

static tensor make_tensor(int64_t rows, int64_t k, int pow2, numla_test_rng *rng)
{
    tensor t = {rows, k, (rows + 127) / 128, (k + 127) / 128, malloc((size_t)(rows * k)), NULL};
    t.scales = malloc((size_t)(t.sr * t.sc) * sizeof *t.scales);
    CU_ASSERT_FATAL(t.data && t.scales);
    for (int64_t i = 0; i < rows * k; i++) {
        uint8_t b = (uint8_t)numla_test_rng_u64(rng);
        t.data[i] = (b & 0x7f) == 0x7f ? (uint8_t)(b ^ 1) : b;
    }
    for (int64_t i = 0; i < t.sr * t.sc; i++) /* spread over 100x: a wrong block is far off */
        t.scales[i] = pow2 ? ldexpf(1.0f, -10 + (int)(numla_test_rng_u64(rng) % 7))
                           : 1e-2f * (float)pow(10.0, numla_test_rng_uniform(rng, -1.0, 1.0));
    return t;
}

/* y of the emulated kernel for one shape on `threads` threads; *took gets its tile products. */
static void run_emulated(const numla_qlinear_weight *w, int64_t m, const float *x, int64_t ldx,
                         float *y, int64_t ldy, int accumulate, int threads, long *took)
{
    const size_t ws = numla_qlinear_workspace_size(w, m, 2);
    CU_ASSERT(ws >= (numla_qlinear_amx_wide_applies(w, m) ? 64 + numla_qlinear_amx_wide_ws_bytes(w, m) : 0));
    unsigned char *wsbuf = malloc(ws + 1); /* misaligned on purpose: the kernel aligns */
    CU_ASSERT_FATAL(wsbuf != NULL);
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    const long ops = numla_amx_emu_dp_ops;
    numla_qlinear_forward_amx_wide_emulated(w, m, x, ldx, y, ldy, accumulate, ws ? wsbuf + 1 : NULL);
    *took = numla_amx_emu_dp_ops - ops;
    omp_set_num_threads(saved);
    free(wsbuf);
}

/* One shape: rows [row0, row0 + n) of an fp8 tensor, K = k, fp32 or power-of-two scales. The
 * emulated amx kernel against the dequantized product in double and against the ref level; 1
 * and 2 threads bit for bit; the count of TDPBF16PS; pow2: rows [13, m) in a call of their own
 * (other tile neighbours, row count and chunking) bit for bit. Returns the number of failures. */
static int run_case_s(int64_t m, int64_t n, int64_t k, int64_t row0, int accumulate, int pow2, uint64_t seed)
{
    numla_test_rng rng = {seed};
    tensor t = make_tensor(row0 + n, k, pow2, &rng);
    const int64_t ldx = k + 3, ldy = n + 5;
    float *x = malloc((size_t)(m * ldx) * sizeof *x), *y0 = malloc((size_t)(m * ldy) * sizeof *y0);
    float *y1 = malloc((size_t)(m * ldy) * sizeof *y1), *y2 = malloc((size_t)(m * ldy) * sizeof *y2);
    float *yr = malloc((size_t)(m * ldy) * sizeof *yr);
    CU_ASSERT_FATAL(x && y0 && y1 && y2 && yr);
    for (int64_t i = 0; i < m * ldx; i++)
        x[i] = (float)numla_test_rng_normal(&rng) * (i % 7 == 0 ? 10.0f : 1.0f);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < ldy; j++)
            y0[i * ldy + j] = j < n ? (float)numla_test_rng_normal(&rng) : SENTINEL;
    memcpy(y1, y0, (size_t)(m * ldy) * sizeof *y0);
    memcpy(y2, y0, (size_t)(m * ldy) * sizeof *y0);
    memcpy(yr, y0, (size_t)(m * ldy) * sizeof *y0);

    numla_qlinear_source src = {NUMLA_QLINEAR_FP8_BLOCK, n, k, row0, 0, t.data + row0 * k, k,
                                t.scales, t.sr, t.sc};
    void *packed = aligned_alloc(64, numla_qlinear_align64(numla_qlinear_packed_size(src.fmt, n, k)));
    numla_qlinear_weight w;
    CU_ASSERT_FATAL(packed && numla_qlinear_pack(&src, packed, &w) == NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(w.scale_pow2, pow2);
    const size_t ws = numla_qlinear_workspace_size(&w, m, 2);
    void *wsbuf = malloc(ws + 1);
    CU_ASSERT_FATAL(wsbuf != NULL);
    CU_ASSERT(numla_qlinear_forward(NUMLA_ISA_REF, &w, m, x, ldx, yr, ldy, accumulate, wsbuf, ws) ==
              NUMLA_STATUS_OK);
    free(wsbuf);
    long took1, took2;
    run_emulated(&w, m, x, ldx, y1, ldy, accumulate, 1, &took1);
    run_emulated(&w, m, x, ldx, y2, ldy, accumulate, 2, &took2);

    int bad = 0;
    /* every (16-row weight block, 16-row x block, 32-k tile) twice (hi, lo); none on the
     * fallback */
    const long want_ops = numla_qlinear_amx_wide_applies(&w, m)
                              ? (long)((n + 15) / 16) * (long)((m + 15) / 16) * (long)((k + 31) / 32) * 2
                              : 0;
    if (took1 != want_ops || took2 != want_ops) {
        fprintf(stderr, "\n    M=%lld N=%lld K=%lld: %ld and %ld TDPBF16PS, want %ld\n", (long long)m,
                (long long)n, (long long)k, took1, took2, want_ops);
        bad++;
    }
    if (memcmp(y1, y2, (size_t)(m * ldy) * sizeof *y1) != 0) {
        fprintf(stderr, "\n    M=%lld N=%lld K=%lld row0=%lld: 1 and 2 threads differ\n", (long long)m,
                (long long)n, (long long)k, (long long)row0);
        bad++;
    }
    const double u = ldexp(1, -24);
    const double c_amx = pow2 ? ldexp(1, -17) + ((double)(k / 16) + 18) * u
                              : ldexp(1, -17) + (2.0 * (k < 128 ? k : 128) + (double)k / 128 + 2) * u;
    if (pow2 && m - 13 >= NUMLA_QLINEAR_AMX_WIDE_MIN_M && numla_qlinear_amx_wide_applies(&w, m)) { /* rows [13, m) on their own */
        float *y3 = malloc((size_t)(m * ldy) * sizeof *y3);
        CU_ASSERT_FATAL(y3 != NULL);
        memcpy(y3, y0, (size_t)(m * ldy) * sizeof *y0);
        long took3;
        run_emulated(&w, m - 13, x + 13 * ldx, ldx, y3 + 13 * ldy, ldy, accumulate, 2, &took3);
        if (memcmp(y3 + 13 * ldy, y1 + 13 * ldy, (size_t)((m - 13) * ldy) * sizeof *y1) != 0) {
            fprintf(stderr, "\n    M=%lld N=%lld K=%lld row0=%lld: rows [13, M) differ in a call of their own\n",
                    (long long)m, (long long)n, (long long)k, (long long)row0);
            bad++;
        }
        free(y3);
    }
    const double c_ref = ((double)k + 2.0 * (double)k / 128 + 2) * u;
    /* the slice's weights dequantized once (every row of x reads them) */
    double *wd = malloc((size_t)(n * k) * sizeof *wd);
    CU_ASSERT_FATAL(wd != NULL);
    for (int64_t r = 0; r < n; r++)
        for (int64_t c = 0; c < k; c++)
            wd[r * k + c] = (double)numla_qlinear_fp8_to_f32(t.data[(row0 + r) * k + c]) *
                            t.scales[(row0 + r) / 128 * t.sc + c / 128];
    for (int64_t i = 0; i < m; i++)
        for (int64_t r = 0; r < ldy; r++) {
            const float got = y1[i * ldy + r];
            if (r >= n) {
                if (got != SENTINEL && bad++ == 0)
                    fprintf(stderr, "\n    y[%lld][%lld] past N written\n", (long long)i, (long long)r);
                continue;
            }
            /* the dequantized product in double, and Σ|s w x| */
            double want = 0.0, mag = 0.0;
            for (int64_t c = 0; c < k; c++) {
                const double v = wd[r * k + c] * x[i * ldx + c];
                want += v;
                mag += fabs(v);
            }
            const double y0v = accumulate ? y0[i * ldy + r] : 0.0;
            want += y0v;
            const double acc = accumulate ? u * (fabs(want) + mag) : 0.0; /* the final add */
            const double tol_amx = 1.25 * c_amx * mag + acc, tol_ref = 1.25 * c_ref * mag + acc;
            const double ref = yr[i * ldy + r];
            if ((fabs(got - want) > tol_amx || fabs(got - ref) > tol_amx + tol_ref) && bad++ == 0)
                fprintf(stderr,
                        "\n    M=%lld N=%lld K=%lld row0=%lld acc=%d pow2=%d: y[%lld][%lld] = %.9g, exact %.9g "
                        "(tolerance %.3g), ref level %.9g\n",
                        (long long)m, (long long)n, (long long)k, (long long)row0, accumulate, pow2,
                        (long long)i, (long long)r, (double)got, want, tol_amx, ref);
        }
    free(wd);
    free(packed);
    free(t.data);
    free(t.scales);
    free(x);
    free(y0);
    free(y1);
    free(y2);
    free(yr);
    return bad;
}

static int run_case(int64_t m, int64_t n, int64_t k, int64_t row0, int accumulate, uint64_t seed)
{
    return run_case_s(m, n, k, row0, accumulate, 0, seed);
}

static void test_matches_dequantized(void)
{
    if (!runnable())
        return;
    const int64_t ms[] = {16, 17, 33, 100};
    const int64_t ns[] = {40, 77}; /* a partial third block; odd blocks */
    const int64_t ks[] = {100, 300};
    const int64_t row0s[] = {0, 120, 192}; /* 120: tiles straddle grid rows; 192: a head shard */
    int bad = 0;
    uint64_t seed = 170;
    unsigned kept = 0; /* a lean sweep: one case in 5, every value of every loop */
    for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++)
        for (size_t b = 0; b < sizeof ns / sizeof ns[0]; b++)
            for (size_t c = 0; c < sizeof ks / sizeof ks[0]; c++)
                for (size_t d = 0; d < sizeof row0s / sizeof row0s[0]; d++)
                    for (int acc = 0; acc < 2; acc++, seed++)
                        if (!numla_test_sweep_lean() || numla_test_sweep_keep(&kept, 2))
                            bad += run_case(ms[a], ns[b], ks[c], row0s[d], acc, seed);
    CU_ASSERT_EQUAL(bad, 0);
}

/* One 16 x 16 tile (N = 16, K = 64), a 200-row shard over three grid rows, K = 3000 with M in
 * two x chunks, M = 300 (a full 256-row chunk and a partial one), the fewest rows on the tiles
 * (NUMLA_QLINEAR_AMX_WIDE_MIN_M = 13: one padded x tile), and shapes below the tiles (M = 12,
 * N < 16), which take the avx512 variant. */
static void test_edges_chunks_and_fallback(void)
{
    if (!runnable())
        return;
    CU_ASSERT(numla_qlinear_amx_wide_chunk(&(numla_qlinear_weight){.k = 3000}) < 100);
    CU_ASSERT(numla_qlinear_amx_wide_chunk(&(numla_qlinear_weight){.k = 300}) < 300);
    CU_ASSERT(numla_qlinear_amx_wide_applies(&(numla_qlinear_weight){.fmt = NUMLA_QLINEAR_FP8_BLOCK, .n = 16}, 13) &&
              !numla_qlinear_amx_wide_applies(&(numla_qlinear_weight){.fmt = NUMLA_QLINEAR_FP8_BLOCK, .n = 16}, 12));
    CU_ASSERT(!numla_qlinear_amx_fp8_slabs(&(numla_qlinear_weight){.k = 3000}) &&
              numla_qlinear_amx_fp8_slabs(&(numla_qlinear_weight){.k = 4200}));
    int bad = 0;
    for (int acc = 0; acc < 2; acc++) {
        const uint64_t s = 900 + 10 * (uint64_t)acc;
        bad += run_case(16, 16, 64, 0, acc, s);
        bad += run_case(32, 200, 300, 120, acc, s + 1);
        bad += run_case(100, 40, 3000, 192, acc, s + 2);
        bad += run_case(300, 24, 200, 8, acc, s + 3);
        bad += run_case(12, 40, 300, 0, acc, s + 4);
        bad += run_case(13, 40, 300, 0, acc, s + 7);
        /* an odd number of 32-k tiles (11) whose last one, in k order, holds 13 columns */
        bad += run_case(33, 40, 333, 0, acc, s + 8);
        bad += run_case(64, 9, 300, 64, acc, s + 5);
        /* K past NUMLA_QLINEAR_AMX_FP8_SLAB_MIN_K: weights widened a slab at a time, partial
         * sums of five slabs (the last of 4 tiles) added in y (accumulating: the power-of-two
         * case below) */
        if (!acc)
            bad += run_case(48, 40, 4200, 120, acc, s + 6);
    }
    CU_ASSERT_EQUAL(bad, 0);
}

/* Power-of-two scales (DeepSeek-V4's E8M0, V3.1's ue8m0), folded into the widened weights: the
 * shapes above (one tile; a shard straddling grid rows; K = 3000 over two x chunks and several
 * k blocks of NUMLA_QLINEAR_AMX_FP8_KC; 300 rows; a row0 off 16) within the folded bound, and a
 * row's bits the same in a call of other rows. Which scales fold: 2^-117 .. 2^119 (every scaled
 * e4m3 value a normal bf16), not 2^-118, 2^120, a mantissa or a sign. */
static void test_pow2_scales(void)
{
    if (!runnable())
        return;
    int bad = 0;
    for (int acc = 0; acc < 2; acc++) {
        const uint64_t s = 1300 + 10 * (uint64_t)acc;
        bad += run_case_s(16, 16, 64, 0, acc, 1, s);
        bad += run_case_s(48, 200, 300, 120, acc, 1, s + 1);
        bad += run_case_s(100, 40, 3000, 192, acc, 1, s + 2);
        bad += run_case_s(300, 24, 200, 8, acc, 1, s + 3);
        bad += run_case_s(40, 77, 1000, 0, acc, 1, s + 4);
        bad += run_case_s(33, 40, 333, 8, acc, 1, s + 6);
        if (acc)
            bad += run_case_s(40, 40, 4200, 8, acc, 1, s + 5); /* slabs */
    }
    CU_ASSERT_EQUAL(bad, 0);
    const struct {
        float s;
        int pow2;
    } cases[] = {{1.0f, 1},           {ldexpf(1, -117), 1}, {ldexpf(1, 119), 1}, {ldexpf(1, -118), 0},
                 {ldexpf(1, 120), 0}, {1.5f, 0},            {-1.0f, 0},          {1e-3f, 0}};
    uint8_t q[16 * 256];
    memset(q, 0x38, sizeof q);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const float grid[2] = {0.25f, cases[i].s}; /* the second 128-column block's */
        numla_qlinear_source src = {NUMLA_QLINEAR_FP8_BLOCK, 16, 256, 0, 0, q, 256, grid, 1, 2};
        uint8_t packed[16 * 256 + 256] __attribute__((aligned(64)));
        numla_qlinear_weight w;
        CU_ASSERT_FATAL(numla_qlinear_packed_size(src.fmt, 16, 256) <= sizeof packed);
        CU_ASSERT_FATAL(numla_qlinear_pack(&src, packed, &w) == NUMLA_STATUS_OK);
        NUMLA_ASSERT_MSG(w.scale_pow2 == cases[i].pow2, "scale %a: scale_pow2 %d, want %d", (double)cases[i].s,
                         w.scale_pow2, cases[i].pow2);
    }
}

/* int8-row on AMX-INT8 tiles (x as three int8 planes, kernels/x86/qlinear_int8row_amx.c),
 * emulated: against the dequantized product in double within the planes' bound
 * (kernels/qlinear.h), and a row's bits the same in calls of 1, 2 and 3 rows (the VNNI rows
 * path) and of 5 and 40 rows (the tiles), accumulate on and off, N and K off the tile sizes. */
static void test_int8_row(void)
{
    if (!runnable())
        return;
    /* N, K: from NUMLA_QLINEAR_ROW_PLANES_MIN_WEIGHTS weights; a partial last block and k tile;
     * a long K (x's planes past L1 in the VNNI rows) */
    const int64_t shapes[][2] = {{520, 520}, {272, 1000}, {76, 5000}};
    CU_ASSERT(520 * 520 >= NUMLA_QLINEAR_ROW_PLANES_MIN_WEIGHTS && 272 * 1000 >= NUMLA_QLINEAR_ROW_PLANES_MIN_WEIGHTS &&
              76 * 5000 >= NUMLA_QLINEAR_ROW_PLANES_MIN_WEIGHTS);
    int bad = 0;
    uint64_t seed = 515;
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++)
        for (int acc = 0; acc < 2; acc++) {
            const int64_t n = shapes[sh][0], k = shapes[sh][1], M = 40, ldx = k + 3, ldy = n + 5;
            numla_test_rng rng = {seed++};
            int8_t *wq = malloc((size_t)(n * k));
            float *sc = malloc((size_t)n * sizeof *sc), *x = malloc((size_t)(M * ldx) * sizeof *x);
            float *y0 = malloc((size_t)(M * ldy) * sizeof *y0), *ya = malloc((size_t)(M * ldy) * sizeof *ya);
            float *yb = malloc((size_t)(M * ldy) * sizeof *yb);
            CU_ASSERT_FATAL(wq && sc && x && y0 && ya && yb);
            for (int64_t i = 0; i < n * k; i++)
                wq[i] = (int8_t)numla_test_rng_u64(&rng);
            for (int64_t i = 0; i < n; i++)
                sc[i] = 1e-2f * (float)pow(10.0, numla_test_rng_uniform(&rng, -1.0, 1.0));
            for (int64_t i = 0; i < M * ldx; i++)
                x[i] = (float)numla_test_rng_normal(&rng) * (i % 7 == 0 ? 10.0f : 1.0f);
            for (int64_t i = 0; i < M * ldy; i++)
                y0[i] = (float)numla_test_rng_normal(&rng);
            numla_qlinear_source src = {NUMLA_QLINEAR_INT8_ROW, n, k, 0, 0, wq, k, sc, n, 1};
            void *packed = aligned_alloc(64, numla_qlinear_align64(numla_qlinear_packed_size(src.fmt, n, k)));
            numla_qlinear_weight w;
            CU_ASSERT_FATAL(packed && numla_qlinear_pack(&src, packed, &w) == NUMLA_STATUS_OK);
            const size_t ws = numla_qlinear_workspace_size(&w, M, 2);
            unsigned char *wsbuf = malloc(ws + 1);
            CU_ASSERT_FATAL(wsbuf != NULL);
            memcpy(ya, y0, (size_t)(M * ldy) * sizeof *ya);
            memcpy(yb, y0, (size_t)(M * ldy) * sizeof *yb);
            long ops = numla_amx_emu_dp_ops;
            numla_qlinear_forward_amx_wide_emulated(&w, M, x, ldx, ya, ldy, acc, wsbuf + 1);
            /* three planes x every 64-k block of every (16 n, 16 m) tile pair */
            CU_ASSERT(numla_amx_emu_dp_ops - ops == (long)((n + 15) / 16) * ((M + 15) / 16) * ((k + 63) / 64) * 3);
            /* rows in calls of 1, 2, 3 (no tiles) and 5 (tiles) */
            const int64_t parts[] = {1, 2, 3, 5, 1, 3, 2, 5};
            ops = numla_amx_emu_dp_ops;
            for (int64_t i0 = 0, p = 0; i0 < M; i0 += parts[p % 8], p++) {
                const int64_t rows = i0 + parts[p % 8] <= M ? parts[p % 8] : M - i0;
                numla_qlinear_forward_amx_wide_emulated(&w, rows, x + i0 * ldx, ldx, yb + i0 * ldy, ldy, acc, wsbuf + 1);
            }
            CU_ASSERT(numla_amx_emu_dp_ops > ops); /* the 5-row calls took the tiles */
            /* the avx512bf16 level's planes on VNNI (rows below 4, the panel GEMM from 4) give
             * the tiles' bits: the whole call and the small ones, on the team and on one thread */
            float *yc = malloc((size_t)(M * ldy) * sizeof *yc);
            CU_ASSERT_FATAL(yc != NULL);
            const int vnni = numla_qlinear_level(NUMLA_ISA_AVX512BF16, NUMLA_QLINEAR_INT8_ROW) == NUMLA_ISA_AVX512BF16;
            for (int run = 0; vnni && run < 3; run++) {
                const int team = omp_get_max_threads();
                if (run == 2)
                    omp_set_num_threads(1);
                memcpy(yc, y0, (size_t)(M * ldy) * sizeof *yc);
                for (int64_t i0 = 0, p = 0; i0 < M; i0 += run ? parts[p % 8] : M, p++) {
                    const int64_t want_rows = run ? parts[p % 8] : M, rows = i0 + want_rows <= M ? want_rows : M - i0;
                    CU_ASSERT(numla_qlinear_forward(NUMLA_ISA_AVX512BF16, &w, rows, x + i0 * ldx, ldx, yc + i0 * ldy,
                                                    ldy, acc, wsbuf + 1, ws) == NUMLA_STATUS_OK);
                }
                omp_set_num_threads(team);
                for (int64_t i = 0; i < M; i++)
                    if (memcmp(yc + i * ldy, ya + i * ldy, (size_t)n * sizeof *yc) && bad++ == 0)
                        fprintf(stderr, "\n    int8-row N=%lld K=%lld acc=%d: row %lld on the avx512bf16 level's VNNI "
                                "planes (%s) differs from the tiles'\n", (long long)n, (long long)k, acc, (long long)i,
                                run == 0 ? "one call" : run == 1 ? "calls of 1-5 rows" : "one thread");
            }
            free(yc);
            for (int64_t i = 0; i < M; i++)
                for (int64_t r = 0; r < n; r++) {
                    double want = acc ? y0[i * ldy + r] : 0.0, sw = 0, amax = 0;
                    for (int64_t c = 0; c < k; c++) {
                        want += (double)wq[r * k + c] * sc[r] * x[i * ldx + c];
                        sw += fabs((double)wq[r * k + c] * sc[r]);
                        amax = fmax(amax, fabs((double)x[i * ldx + c]));
                    }
                    /* (2^-17 sx + 2^-23 max|x|) Σ|s w| + u |y| (+ the add's u) */
                    const double u = ldexp(1, -24);
                    const double tol = (ldexp(1, -17) * amax / 127 + ldexp(1, -23) * amax) * sw + 2 * u * fabs(want) +
                                       (acc ? u * fabs(y0[i * ldy + r]) : 0);
                    const float got = ya[i * ldy + r];
                    if ((fabs(got - want) > tol || memcmp(&got, &yb[i * ldy + r], sizeof got) != 0) && bad++ == 0)
                        fprintf(stderr, "\n    int8-row N=%lld K=%lld acc=%d: y[%lld][%lld] = %.9g in one call, %.9g in "
                                "small ones, exact %.9g (tolerance %.3g)\n", (long long)n, (long long)k, acc,
                                (long long)i, (long long)r, (double)got, (double)yb[i * ldy + r], want, tol);
                }
            free(wsbuf);
            free(packed);
            free(wq);
            free(sc);
            free(x);
            free(y0);
            free(ya);
            free(yb);
        }
    CU_ASSERT_EQUAL(bad, 0);
}

/* The amx level runs this variant for fp8 exactly when the tiles may run. */
static void test_dispatch(void)
{
    /* without tiles: the avx512bf16 level's fp8 GEMV where the CPU has VBMI, else avx512 */
    CU_ASSERT_EQUAL(numla_qlinear_level(NUMLA_ISA_AMX, NUMLA_QLINEAR_FP8_BLOCK),
                    numla_cpu_has(NUMLA_CPU_AMX_BF16) ? NUMLA_ISA_AMX
                    : numla_cpu_has(NUMLA_CPU_VBMI) ? NUMLA_ISA_AVX512BF16
                                                  : NUMLA_ISA_AVX512);
    /* int8-row: AMX-INT8 tiles and VNNI rows where the CPU has both, else the planes on VNNI
     * (the avx512bf16 level's variant) */
    CU_ASSERT_EQUAL(numla_qlinear_level(NUMLA_ISA_AMX, NUMLA_QLINEAR_INT8_ROW),
                    numla_cpu_has(NUMLA_CPU_AMX_INT8) && numla_cpu_has(NUMLA_CPU_VNNI) ? NUMLA_ISA_AMX
                    : numla_cpu_has(NUMLA_CPU_VNNI)                                    ? NUMLA_ISA_AVX512BF16
                                                                                     : NUMLA_ISA_AVX512);
}

NUMLA_TEST_SUITE(qlinear_fp8_amx_emu, NULL, NULL, NUMLA_TEST(test_emulator_bf16_hand),
                 NUMLA_TEST(test_matches_dequantized), NUMLA_TEST(test_edges_chunks_and_fallback),
                 NUMLA_TEST(test_pow2_scales),
                 NUMLA_TEST(test_dispatch), NUMLA_TEST(test_int8_row))
