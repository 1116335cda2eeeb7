/* Tests for the AMX-INT8 kernels of the block encodings (kernels/x86/qblock_panel_amx.c: the panel
 * GEMM, and Q6_K's stored panels) on a CPU without AMX: the file is built against the tile
 * emulator (tests/support/amx_emulate.h; tests/CMakeLists.txt adds it to the emulated object) and
 * its y must be bit-identical to the vnni level's (the vpdpbusd kernels, themselves checked
 * against the dequantized weights by the qblock suite) for every type, in both weight layouts, M
 * around the 16-row tiles and past a run of x tiles, N off the panels, K with a short last x
 * group, accumulate on and off, 1 and 3 threads. The emulator's count of tile products must be
 * exactly what the tile path takes (one per panel, 16 x rows and sub-block of 32 columns; the
 * byte planes of the integer-scale types and Q6_K also one per 32 columns, Q2_K's one plane one
 * per 64), so the tiles, not the vnni fallback,
 * produced y; below 16 x rows, and for Q6_K's ROWS layout, it must take none. Also the amx level's
 * place in the dispatch table and its layout. The F32 mode's bf16 tiles (kernels/x86/qblock_f32_amx.c, MXFP4) against a double reference
 * within their bound, with their row invariance. */
#include "tests/support/amx_emulate.h" /* (its state is defined in test_qlinear_amx_emu.c) */

#include "test_util.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/qblock_internal.h"
#include "kernels/x86/amx.h"
#include "qblock_check.h"

void numla_qblock_forward_amx_emulated(const numla_qblock_weight *w, int64_t m, const float *x, int64_t ldx, float *y,
                                       int64_t ldy, int accumulate, void *ws, size_t ws_bytes);
void numla_qblock_forward_f32_amx_emulated(const numla_qblock_weight *w, int64_t m, const float *x, int64_t ldx,
                                           float *y, int64_t ldy, int accumulate, void *ws, size_t ws_bytes);

/* The emulated kernel's AVX-512 parts and the vnni level it is compared with run natively. */
static int runnable(void)
{
    if (numla_isa_supported(NUMLA_ISA_AVX512BF16) && numla_cpu_has(NUMLA_CPU_VNNI))
        return 1;
    fprintf(stderr, "(no AVX512-BF16 + VNNI here, skipped) ");
    return 0;
}

/* One shape: the emulated tiles against the vnni level, bit for bit. Returns the number of bad
 * y (and of a wrong count of tile products). */
static int run_case(numla_qblock_type type, numla_qblock_layout layout, int64_t m, int64_t n, int64_t k,
                    int accumulate, int threads, numla_test_rng *rng)
{
    const int64_t ldx = k + 3, ldy = n + 5;
    int64_t rb;
    uint8_t *src = qb_random(type, n, k, rng, &rb);
    const size_t bytes = layout == NUMLA_QBLOCK_LAYOUT_PANEL16 ? numla_qblock_layout_size(type, layout, n, k)
                                                                : numla_qblock_packed_size(type, n, k);
    void *packed = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    numla_qblock_weight w;
    numla_qblock_source s = {.type = type, .n = n, .k = k, .data = src, .ld = rb, .act = NUMLA_QBLOCK_ACT_Q8,
                             .layout = layout};
    CU_ASSERT_FATAL(packed != NULL);
    CU_ASSERT_EQUAL_FATAL(numla_qblock_pack(&s, packed, &w), NUMLA_STATUS_OK);
    float *x = malloc((size_t)(m * ldx) * sizeof *x);
    float *y = malloc((size_t)(m * ldy) * sizeof *y), *yv = malloc((size_t)(m * ldy) * sizeof *yv);
    CU_ASSERT_FATAL(x && y && yv);
    for (int64_t i = 0; i < m * ldx; i++)
        x[i] = (float)numla_test_rng_normal(rng) * (i % 9 == 0 ? 5.0f : 1.0f);
    for (int64_t i = 0; i < m * ldy; i++)
        y[i] = yv[i] = (float)numla_test_rng_normal(rng);
    const size_t wsb = numla_qblock_workspace_size(&w, m, threads);
    unsigned char *ws = malloc(wsb + 1); /* misaligned on purpose */
    CU_ASSERT_FATAL(ws != NULL);

    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    CU_ASSERT_EQUAL(numla_qblock_forward(NUMLA_ISA_AVX512BF16, &w, m, x, ldx, yv, ldy, accumulate, ws + 1, wsb),
                    NUMLA_STATUS_OK);
    const long ops = numla_amx_emu_dp_ops;
    numla_qblock_forward_amx_emulated(&w, m, x, ldx, y, ldy, accumulate, ws + 1, wsb);
    const long took = numla_amx_emu_dp_ops - ops;
    omp_set_num_threads(saved);

    int bad = 0;
    /* one thread: every (panel, 16 x rows, sub-block) once; with more, each thread's rows start
     * a panel of their own, so at least that many */
    /* Q6_K: tiles for its stored panels only (its ROWS layout has no panel GEMM) */
    const int tiles = m >= NUMLA_QBLOCK_PANEL_MIN_M && (type != NUMLA_QBLOCK_Q6_K || layout == NUMLA_QBLOCK_LAYOUT_PANEL16);
    /* Q4_K, Q5_K, Q3_K, IQ4_XS and Q6_K: two byte planes, four K = 64 products each per 256
     * columns, one per 32 columns; Q2_K one plane, one per 64 */
    const int64_t sw = type == NUMLA_QBLOCK_Q2_K ? 64 : 32;
    const long want = tiles ? (long)((n + 15) / 16) * (long)((m + 15) / 16) * (long)(k / sw) : 0;
    if (threads == 1 ? took != want : (took < want || (want == 0 && took != 0))) {
        fprintf(stderr, "\n    %s layout %d M=%lld N=%lld K=%lld threads=%d: %ld TDPBSUD, want %s%ld\n",
                numla_qblock_info_get(type)->name, (int)layout, (long long)m, (long long)n, (long long)k, threads,
                took, threads == 1 ? "" : ">= ", want);
        bad++;
    }
    for (int64_t i = 0; i < m * ldy; i++)
        if (memcmp(&y[i], &yv[i], sizeof y[i]) != 0 && bad++ == 0)
            fprintf(stderr, "\n    %s layout %d M=%lld N=%lld K=%lld acc=%d threads=%d: y[%lld][%lld] = %.9g, vnni %.9g\n",
                    numla_qblock_info_get(type)->name, (int)layout, (long long)m, (long long)n, (long long)k,
                    accumulate, threads, (long long)(i / ldy), (long long)(i % ldy), (double)y[i], (double)yv[i]);
    free(ws);
    free(x);
    free(y);
    free(yv);
    free(packed);
    free(src);
    return bad;
}

static void test_matches_vnni(void)
{
    if (!runnable())
        return;
    numla_test_rng rng = {4242};
    const numla_qblock_type types[] = {NUMLA_QBLOCK_Q4_K, NUMLA_QBLOCK_IQ4_XS, NUMLA_QBLOCK_Q5_0, NUMLA_QBLOCK_Q8_0,
                                       NUMLA_QBLOCK_IQ4_NL, NUMLA_QBLOCK_Q4_0, NUMLA_QBLOCK_Q5_K,
                                       NUMLA_QBLOCK_Q2_K, NUMLA_QBLOCK_Q3_K, NUMLA_QBLOCK_Q6_K, NUMLA_QBLOCK_Q5_1};
    const int64_t ms[] = {16, 17, 40, 150}, ns[] = {16, 77}, ks[] = {256, 320, 1280};
    int bad = 0, cases = 0;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
        for (int lay = 0; lay < 2; lay++)
            for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++)
                for (size_t b = 0; b < sizeof ns / sizeof ns[0]; b++)
                    for (size_t c = 0; c < sizeof ks / sizeof ks[0]; c++) {
                        const numla_qblock_layout layout = lay ? NUMLA_QBLOCK_LAYOUT_PANEL16 : NUMLA_QBLOCK_LAYOUT_ROWS;
                        if (!numla_qblock_q8_takes(types[t], ks[c]) ||
                            (lay && !numla_qblock_layout_size(types[t], layout, ns[b], ks[c])))
                            continue; /* Q8 mode: K % 256 but for three types; PANEL16 what it takes */
                        const int acc = (int)((a + b + c) % 2), th = (a + c) % 2 ? 3 : 1;
                        bad += run_case(types[t], layout, ms[a], ns[b], ks[c], acc, th, &rng);
                        cases++;
                    }
    CU_ASSERT(cases > 50);
    CU_ASSERT_EQUAL(bad, 0);
}

/* Below the panel GEMM's M, and for Q6_K in the ROWS layout (no panel GEMM), the amx entry is the
 * vnni level: the same bits and no tile product. */
static void test_fallback(void)
{
    if (!runnable())
        return;
    numla_test_rng rng = {77};
    int bad = 0;
    for (int th = 1; th <= 3; th += 2) {
        bad += run_case(NUMLA_QBLOCK_Q4_K, NUMLA_QBLOCK_LAYOUT_PANEL16, 15, 40, 512, 1, th, &rng);
        bad += run_case(NUMLA_QBLOCK_Q8_0, NUMLA_QBLOCK_LAYOUT_ROWS, 1, 40, 512, 0, th, &rng);
    }
    bad += run_case(NUMLA_QBLOCK_Q6_K, NUMLA_QBLOCK_LAYOUT_ROWS, 33, 40, 512, 0, 1, &rng);
    bad += run_case(NUMLA_QBLOCK_Q6_K, NUMLA_QBLOCK_LAYOUT_PANEL16, 5, 40, 512, 0, 1, &rng);
    CU_ASSERT_EQUAL(bad, 0);
}

/* F32 mode on bf16 tiles (kernels/x86/qblock_f32_amx.c), MXFP4, M x N x K from x rows ldx = K + 3
 * apart: y against the dequantized weights in double within kernels/qblock.h's bound for the
 * path, (2^-17 + (K/16 + 18) u) Σ|w x| (+ u |y| accumulating), u = 2^-24; exactly two TDPBF16PS
 * (hi, lo) per 16 weight rows, 16 x rows of a chunk and 32 columns, so the tiles produced y;
 * the same bits on 1 and 3 threads, and rows [i0, i0 + 8) of the call have the bits of a call on
 * those rows alone (a row's bits do not depend on M or on the other rows). Returns the number
 * of failures. */
static int run_f32_case(int64_t m, int64_t n, int64_t k, int accumulate, numla_test_rng *rng)
{
    const numla_qblock_type type = NUMLA_QBLOCK_MXFP4;
    const int64_t ldx = k + 3, ldy = n + 5;
    int64_t rb;
    uint8_t *src = qb_random(type, n, k, rng, &rb);
    void *packed = aligned_alloc(64, numla_qblock_packed_size(type, n, k));
    float *wd = malloc((size_t)(n * k) * sizeof *wd), *x = malloc((size_t)(m * ldx) * sizeof *x);
    float *y0 = malloc((size_t)(m * ldy) * sizeof *y0), *y = malloc((size_t)(m * ldy) * sizeof *y);
    float *y3 = malloc((size_t)(m * ldy) * sizeof *y3), *ys = malloc((size_t)(m * ldy) * sizeof *ys);
    CU_ASSERT_FATAL(packed && wd && x && y0 && y && y3 && ys);
    numla_qblock_weight w;
    numla_qblock_source s = {.type = type, .n = n, .k = k, .data = src, .ld = rb};
    CU_ASSERT_EQUAL_FATAL(numla_qblock_pack(&s, packed, &w), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_qblock_dequant_ref(type, src, n * k, wd), NUMLA_STATUS_OK);
    for (int64_t i = 0; i < m * ldx; i++)
        x[i] = (float)numla_test_rng_normal(rng) * (i % 7 == 0 ? 9.0f : 1.0f);
    for (int64_t i = 0; i < m * ldy; i++)
        y0[i] = (float)numla_test_rng_normal(rng);
    memcpy(y, y0, (size_t)(m * ldy) * sizeof *y);
    memcpy(y3, y0, (size_t)(m * ldy) * sizeof *y);
    memcpy(ys, y0, (size_t)(m * ldy) * sizeof *y);
    const size_t wsb = numla_qblock_workspace_size(&w, m, 3);
    unsigned char *ws = malloc(wsb + 1); /* misaligned on purpose */
    CU_ASSERT_FATAL(ws != NULL);
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    const long ops = numla_amx_emu_dp_ops;
    numla_qblock_forward_f32_amx_emulated(&w, m, x, ldx, y, ldy, accumulate, ws + 1, wsb);
    const long took = numla_amx_emu_dp_ops - ops;
    const int64_t i0 = (m - 8) / 2; /* rows [i0, i0 + 8) alone, on one thread */
    numla_qblock_forward_f32_amx_emulated(&w, 8, x + i0 * ldx, ldx, ys + i0 * ldy, ldy, accumulate, ws + 1, wsb);
    omp_set_num_threads(3);
    numla_qblock_forward_f32_amx_emulated(&w, m, x, ldx, y3, ldy, accumulate, ws + 1, wsb);
    omp_set_num_threads(saved);

    int bad = 0;
    long want = 0; /* 2 per (weight tile, x tile of a chunk, 32 columns) */
    for (int64_t c0 = 0; c0 < m; c0 += NUMLA_QBLOCK_AMX_F32_CHUNK) {
        const int64_t rows = m - c0 < NUMLA_QBLOCK_AMX_F32_CHUNK ? m - c0 : NUMLA_QBLOCK_AMX_F32_CHUNK;
        want += 2 * ((n + 15) / 16) * ((rows + 15) / 16) * (k / 32);
    }
    if (took != want) {
        fprintf(stderr, "\n    MXFP4 F32 M=%lld N=%lld K=%lld: %ld TDPBF16PS, want %ld\n", (long long)m, (long long)n,
                (long long)k, took, want);
        bad++;
    }
    const double u = ldexp(1.0, -24), rel = ldexp(1.0, -17) + (double)(k / 16 + 18) * u;
    for (int64_t i = 0; i < m; i++)
        for (int64_t r = 0; r < n; r++) {
            double ref = accumulate ? y0[i * ldy + r] : 0.0, mag = 0.0;
            for (int64_t c = 0; c < k; c++) {
                ref += (double)wd[r * k + c] * x[i * ldx + c];
                mag += fabs((double)wd[r * k + c] * x[i * ldx + c]);
            }
            const double bound = rel * mag + (accumulate ? u * (fabs(y0[i * ldy + r]) + mag) : 0.0) + 1e-30;
            if (!(fabs(y[i * ldy + r] - ref) <= bound) && bad++ < 3)
                fprintf(stderr, "\n    MXFP4 F32 M=%lld N=%lld K=%lld acc=%d: y[%lld][%lld] = %.9g, want %.9g +- %.3g\n",
                        (long long)m, (long long)n, (long long)k, accumulate, (long long)i, (long long)r,
                        (double)y[i * ldy + r], ref, bound);
        }
    for (int64_t i = 0; i < m * ldy; i++) /* the padding past N included: left alone */
        if (memcmp(&y[i], &y3[i], sizeof y[i]) != 0 && bad++ < 3)
            fprintf(stderr, "\n    MXFP4 F32 M=%lld N=%lld K=%lld: y[%lld] differs on 3 threads\n", (long long)m,
                    (long long)n, (long long)k, (long long)i);
    for (int64_t i = 0; i < m * ldy; i++) {
        const int in = i / ldy >= i0 && i / ldy < i0 + 8 && i % ldy < n;
        if (memcmp(in ? &y[i] : &y0[i], &ys[i], sizeof y[i]) != 0 && bad++ < 3)
            fprintf(stderr, "\n    MXFP4 F32 M=%lld N=%lld K=%lld: y[%lld][%lld] of 8 rows alone differs\n",
                    (long long)m, (long long)n, (long long)k, (long long)(i / ldy), (long long)(i % ldy));
    }
    free(ws);
    free(ys);
    free(y3);
    free(y);
    free(y0);
    free(x);
    free(wd);
    free(packed);
    free(src);
    return bad;
}

/* MXFP4's F32 tiles: M around the 16-row tiles and past a chunk, N off the 16-row tiles (the
 * overlapping last tile), K of one block, of a few, and past a K block with a ragged end. */
static void test_f32_tiles(void)
{
    if (!numla_isa_supported(NUMLA_ISA_AVX512BF16)) {
        fprintf(stderr, "(no AVX512-BF16 here, skipped) ");
        return;
    }
    numla_test_rng rng = {3939};
    const int64_t shapes[][3] = {{8, 16, 32},   {9, 17, 96},   {33, 77, 1056}, {16, 40, 2080},
                                 {31, 16, 288}, {300, 33, 96}, {47, 2 * 16 + 5, 64}};
    int bad = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        bad += run_f32_case(shapes[s][0], shapes[s][1], shapes[s][2], (int)(s % 2), &rng);
    CU_ASSERT_EQUAL(bad, 0);
}

/* The F32 entry below NUMLA_QBLOCK_AMX_F32_MIN_M rows: the tiles, which sum in another order,
 * take none of them (no TDPBF16PS), so every row of those calls has the bits of a one-row call
 * on it (kernels/qblock.h; a speculative verify step's rows, docs/speculative.md). */
static void test_f32_few_rows(void)
{
    if (!numla_isa_supported(NUMLA_ISA_AVX512BF16)) {
        fprintf(stderr, "(no AVX512-BF16 here, skipped) ");
        return;
    }
    enum { MMAX = NUMLA_QBLOCK_AMX_F32_MIN_M - 1, N = 40, K = 256 };
    numla_test_rng rng = {1313};
    const int64_t ldx = K + 3, ldy = N + 5;
    int64_t rb;
    uint8_t *src = qb_random(NUMLA_QBLOCK_MXFP4, N, K, &rng, &rb);
    void *packed = aligned_alloc(64, numla_qblock_packed_size(NUMLA_QBLOCK_MXFP4, N, K));
    float *x = malloc((size_t)(MMAX * ldx) * sizeof *x), *y = malloc((size_t)(MMAX * ldy) * sizeof *y);
    float *y1 = malloc((size_t)ldy * sizeof *y1);
    CU_ASSERT_FATAL(src && packed && x && y && y1);
    numla_qblock_weight w;
    numla_qblock_source s = {.type = NUMLA_QBLOCK_MXFP4, .n = N, .k = K, .data = src, .ld = rb};
    CU_ASSERT_EQUAL_FATAL(numla_qblock_pack(&s, packed, &w), NUMLA_STATUS_OK);
    for (int64_t i = 0; i < MMAX * ldx; i++)
        x[i] = (float)numla_test_rng_normal(&rng);
    /* a workspace for the tiles' 16 rows, so only M decides */
    const size_t wsb = numla_qblock_workspace_size(&w, 16, omp_get_max_threads());
    void *ws = malloc(wsb);
    CU_ASSERT_FATAL(ws != NULL);
    int bad = 0;
    for (int64_t m = 1; m <= MMAX; m++) {
        const long ops = numla_amx_emu_dp_ops;
        numla_qblock_forward_f32_amx_emulated(&w, m, x, ldx, y, ldy, 0, ws, wsb);
        if (numla_amx_emu_dp_ops != ops && bad++ < 3)
            fprintf(stderr, "\n    MXFP4 F32 M=%lld: %ld TDPBF16PS, want none\n", (long long)m,
                    numla_amx_emu_dp_ops - ops);
        for (int64_t i = 0; i < m; i++) {
            numla_qblock_forward_f32_amx_emulated(&w, 1, x + i * ldx, ldx, y1, ldy, 0, ws, wsb);
            if (memcmp(y1, y + i * ldy, (size_t)N * sizeof *y) != 0 && bad++ < 3)
                fprintf(stderr, "\n    MXFP4 F32: row %lld of %lld rows differs from its one-row call\n",
                        (long long)i, (long long)m);
        }
    }
    CU_ASSERT_EQUAL(bad, 0);
    free(ws);
    free(y1);
    free(y);
    free(x);
    free(packed);
    free(src);
}

/* The amx level holds every type in Q8 mode, taken only where the CPU has AMX-INT8 (and VNNI),
 * and in F32 mode the types whose row names a bf16 tile decoder (MXFP4), where it has AMX-BF16;
 * the others' F32 mode inherits the avx512 level. */
static void test_table(void)
{
    const int int8 = numla_cpu_has(NUMLA_CPU_AMX_INT8 | NUMLA_CPU_VNNI);
    const numla_qblock_type tiles[] = {NUMLA_QBLOCK_Q4_K, NUMLA_QBLOCK_IQ4_XS, NUMLA_QBLOCK_Q5_0, NUMLA_QBLOCK_Q8_0,
                                       NUMLA_QBLOCK_IQ4_NL, NUMLA_QBLOCK_Q4_0, NUMLA_QBLOCK_Q5_K,
                                       NUMLA_QBLOCK_Q2_K, NUMLA_QBLOCK_Q3_K, NUMLA_QBLOCK_Q6_K, NUMLA_QBLOCK_Q5_1};
    for (size_t t = 0; t < sizeof tiles / sizeof tiles[0]; t++) {
        CU_ASSERT_EQUAL(numla_qblock_level(NUMLA_ISA_AMX, tiles[t], NUMLA_QBLOCK_ACT_Q8) == NUMLA_ISA_AMX, int8);
        CU_ASSERT_NOT_EQUAL(numla_qblock_level(NUMLA_ISA_AMX, tiles[t], NUMLA_QBLOCK_ACT_F32), NUMLA_ISA_AMX);
        /* decode at the amx level runs the vnni kernels on the stored panels (where there are) */
        if (numla_cpu_has(NUMLA_CPU_VNNI) && numla_qblock_layout_size(tiles[t], NUMLA_QBLOCK_LAYOUT_PANEL16, 16, 2048))
            CU_ASSERT_EQUAL(numla_qblock_layout_for(NUMLA_ISA_AMX, tiles[t], NUMLA_QBLOCK_ACT_Q8, 2048),
                            NUMLA_QBLOCK_LAYOUT_PANEL16);
    }
    CU_ASSERT_EQUAL(numla_qblock_level(NUMLA_ISA_AMX, NUMLA_QBLOCK_MXFP4, NUMLA_QBLOCK_ACT_F32) == NUMLA_ISA_AMX,
                    numla_cpu_has(NUMLA_CPU_AMX_BF16));
    CU_ASSERT_EQUAL(numla_qblock_layout_for(NUMLA_ISA_AMX, NUMLA_QBLOCK_MXFP4, NUMLA_QBLOCK_ACT_F32, 2048),
                    NUMLA_QBLOCK_LAYOUT_ROWS);
}

NUMLA_TEST_SUITE(qblock_amx_emu, NULL, NULL, NUMLA_TEST(test_matches_vnni), NUMLA_TEST(test_fallback),
                 NUMLA_TEST(test_f32_tiles), NUMLA_TEST(test_f32_few_rows),
                 NUMLA_TEST(test_table))
