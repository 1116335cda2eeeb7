/* Tests for DeepSeek-V4's FP4 experts in the block kernels: numla_qblock_mxfp4_from_e2m1 repacks
 * the published layout (e2m1 pairs in I8 bytes, element 2j in the low nibble; E8M0 scale per 32)
 * into MXFP4 blocks whose dequantization (reference, and every level's linear) equals the
 * published formula w = e2m1[code] · 2^(s - 127), written out here on its own (transformers 5.25's
 * Fp8Dequantize._unpack_fp4 and its ue8m0 scale rule, docs/quantization.md), bit for bit (e2m1's
 * -0 reads as +0); bad
 * shapes and the NaN scale are refused. (MXFP4 against the gguf package's dequantization:
 * test_qblock's golden; its vector kernels against the reference: test_qblock's sweep.) */
#include "test_util.h"

#include "kernels/qblock.h"
#include "kernels/qblock_quant.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* The published value of element e of a row: its nibble of byte e / 2 (low for even e) through
 * the e2m1 table, times 2^(s - 127) of its block of 32. */
static float published_fp4(const uint8_t *codes, const uint8_t *scales, int64_t e)
{
    static const float e2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                   -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
    const int nib = e % 2 ? codes[e / 2] >> 4 : codes[e / 2] & 15;
    return (float)((double)e2m1[nib] * ldexp(1.0, (int)scales[e / 32] - 127));
}

static void test_repack_dequant(void)
{
    numla_test_rng rng = {20261206};
    enum { N = 5, K = 224 }; /* 7 blocks a row */
    uint8_t codes[N][K / 2], scales[N][K / 32], blocks[N][K / 32 * 17];
    /* scales across the whole range but NaN, the subnormal ends included */
    static const uint8_t edge[] = {0, 1, 2, 126, 127, 128, 200, 250};
    for (int r = 0; r < N; r++) {
        for (int j = 0; j < K / 2; j++)
            codes[r][j] = (uint8_t)numla_test_rng_u64(&rng);
        for (int b = 0; b < K / 32; b++)
            scales[r][b] = r == 0 && b < 7 ? edge[b] : (uint8_t)(100 + numla_test_rng_u64(&rng) % 40);
        CU_ASSERT_EQUAL_FATAL(numla_qblock_mxfp4_from_e2m1(codes[r], scales[r], K, blocks[r]),
                              NUMLA_STATUS_OK);
    }
    static float got[N * K];
    CU_ASSERT_EQUAL_FATAL(numla_qblock_dequant_ref(NUMLA_QBLOCK_MXFP4, blocks, N * K, got),
                          NUMLA_STATUS_OK);
    int bad = 0, zeros = 0;
    for (int r = 0; r < N; r++)
        for (int e = 0; e < K; e++) {
            const float want = published_fp4(codes[r], scales[r], e);
            zeros += want == 0.0f;
            /* bit for bit, but for e2m1's -0 (code 8), which MXFP4's integer table reads as +0 */
            const int same = want == 0.0f ? got[r * K + e] == 0.0f : !memcmp(&want, &got[r * K + e], 4);
            if (!same && bad++ < 5)
                fprintf(stderr, "\n    row %d element %d: %g, published %g\n", r, e, got[r * K + e],
                        want);
        }
    NUMLA_ASSERT_MSG(bad == 0, "%d of %d repacked values differ from the published formula", bad,
                     N * K);
    CU_ASSERT(zeros > 0 && zeros < N * K / 4);

    /* the linear on the repacked blocks at every level, against the published values in double */
    numla_isa isas[NUMLA_ISA_COUNT];
    const int nisa = numla_test_isas(isas);
    float x[3][K], y[3][N];
    for (int i = 0; i < 3; i++)
        for (int e = 0; e < K; e++)
            x[i][e] = (float)((int64_t)(numla_test_rng_u64(&rng) % 2001) - 1000) / 1000.0f;
    const size_t bytes = numla_qblock_packed_size(NUMLA_QBLOCK_MXFP4, N - 1, K);
    void *dst = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    /* rows 1..4: row 0's extreme scales would dominate every sum */
    numla_qblock_source s = {.type = NUMLA_QBLOCK_MXFP4, .n = N - 1, .k = K, .data = blocks[1],
                             .ld = K / 32 * 17};
    numla_qblock_weight w;
    CU_ASSERT_EQUAL_FATAL(numla_qblock_pack(&s, dst, &w), NUMLA_STATUS_OK);
    for (int l = 0; l < nisa; l++) {
        CU_ASSERT_EQUAL_FATAL(numla_qblock_forward(isas[l], &w, 3, &x[0][0], K, &y[0][0], N, 0, NULL, 0),
                              NUMLA_STATUS_OK);
        for (int i = 0; i < 3; i++)
            for (int r = 1; r < N; r++) {
                double ref = 0, mag = 0;
                for (int e = 0; e < K; e++) {
                    const double p = (double)published_fp4(codes[r], scales[r], e) * x[i][e];
                    ref += p;
                    mag += fabs(p);
                }
                NUMLA_ASSERT_MSG(fabs(y[i][r - 1] - ref) <= (K + 2) * 0x1p-24 * mag + 1e-30,
                                 "level %s row %d x %d: %.9g vs %.9g", numla_isa_name(isas[l]), r, i,
                                 y[i][r - 1], ref);
            }
    }
    free(dst);
}

/* Every E8M0 byte a block can carry (0 .. 250: 2^-128 .. 2^122; above, 12 · 2^(e-128) sums
 * overflow), one row each, through every level's linear at M = 3 (a two-row pass, then a one-row
 * pass; K = 288: one 8-block step and a block after it), against the MXFP4 formula in double
 * (docs/quantization.md: low nibbles are elements 0-15, high 16-31; w = 2^(e - 128) · twice the
 * e2m1 value). Catches a wrong scale at any byte, the subnormal ends included. */
static void test_every_scale_byte(void)
{
    static const double tab[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    enum { N = 251, K = 288, NB = K / 32, M = 3 };
    numla_test_rng rng = {20261207};
    static uint8_t blocks[N][NB * 17];
    static double wref[N][K];
    for (int r = 0; r < N; r++)
        for (int b = 0; b < NB; b++) {
            uint8_t *p = blocks[r] + 17 * b;
            p[0] = (uint8_t)r;
            for (int j = 0; j < 16; j++) {
                p[1 + j] = (uint8_t)numla_test_rng_u64(&rng);
                wref[r][32 * b + j] = ldexp(tab[p[1 + j] & 15], r - 128);
                wref[r][32 * b + 16 + j] = ldexp(tab[p[1 + j] >> 4], r - 128);
            }
        }
    static float x[M][K], y[M][N];
    for (int i = 0; i < M; i++)
        for (int e = 0; e < K; e++)
            x[i][e] = (float)((int64_t)(numla_test_rng_u64(&rng) % 2001) - 1000) / 1024000.0f;
    const size_t bytes = numla_qblock_packed_size(NUMLA_QBLOCK_MXFP4, N, K);
    void *dst = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    numla_qblock_source s = {.type = NUMLA_QBLOCK_MXFP4, .n = N, .k = K, .data = blocks,
                             .ld = NB * 17};
    numla_qblock_weight w;
    CU_ASSERT_EQUAL_FATAL(numla_qblock_pack(&s, dst, &w), NUMLA_STATUS_OK);
    numla_isa isas[NUMLA_ISA_COUNT];
    const int nisa = numla_test_isas(isas);
    for (int l = 0; l < nisa; l++) {
        CU_ASSERT_EQUAL_FATAL(numla_qblock_forward(isas[l], &w, M, &x[0][0], K, &y[0][0], N, 0, NULL, 0),
                              NUMLA_STATUS_OK);
        int bad = 0;
        for (int i = 0; i < M; i++)
            for (int r = 0; r < N; r++) {
                double ref = 0, mag = 0;
                for (int e = 0; e < K; e++) {
                    ref += wref[r][e] * x[i][e];
                    mag += fabs(wref[r][e] * x[i][e]);
                }
                /* fp32 sums of K products, and the subnormal spacing at the low end */
                if (!(fabs(y[i][r] - ref) <= (K + 2) * 0x1p-24 * mag + K * 0x1p-149) && bad++ < 3)
                    fprintf(stderr, "\n    level %s scale byte %d x %d: %.9g vs %.9g",
                            numla_isa_name(isas[l]), r, i, y[i][r], ref);
            }
        NUMLA_ASSERT_MSG(bad == 0, "level %s: %d outputs off", numla_isa_name(isas[l]), bad);
    }
    free(dst);
}

/* numla_qblock_rows: slices of rows (any boundaries, as a team's split of several experts' rows
 * gives them) run through every level's linear give those rows of the whole weight's output with
 * the same bits, one slice at a time and from inside an OpenMP team; the whole output is also
 * checked against the MXFP4 formula in double, so a slice that read other rows' blocks could not
 * match by accident. Bad ranges and the PANEL16 layout are refused. */
static void test_rows_slice(void)
{
    static const double tab[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    enum { N = 77, K = 544, NB = K / 32 };
    numla_test_rng rng = {20261208};
    static uint8_t blocks[N][NB * 17];
    static double wref[N][K];
    static float x[K], yw[N], ys[N];
    for (int r = 0; r < N; r++)
        for (int b = 0; b < NB; b++) {
            uint8_t *p = blocks[r] + 17 * b;
            p[0] = (uint8_t)(110 + numla_test_rng_u64(&rng) % 30);
            for (int j = 0; j < 16; j++) {
                p[1 + j] = (uint8_t)numla_test_rng_u64(&rng);
                wref[r][32 * b + j] = ldexp(tab[p[1 + j] & 15], p[0] - 128);
                wref[r][32 * b + 16 + j] = ldexp(tab[p[1 + j] >> 4], p[0] - 128);
            }
        }
    for (int e = 0; e < K; e++)
        x[e] = (float)((int64_t)(numla_test_rng_u64(&rng) % 2001) - 1000) / 1000.0f;
    const size_t bytes = numla_qblock_packed_size(NUMLA_QBLOCK_MXFP4, N, K);
    void *dst = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    numla_qblock_source s = {.type = NUMLA_QBLOCK_MXFP4, .n = N, .k = K, .data = blocks, .ld = NB * 17};
    numla_qblock_weight w, v;
    CU_ASSERT_EQUAL_FATAL(numla_qblock_pack(&s, dst, &w), NUMLA_STATUS_OK);
    static const int cuts[][2] = {{0, N}, {0, 1}, {1, 2}, {5, 40}, {40, N}, {76, 77}, {13, 64}};
    numla_isa isas[NUMLA_ISA_COUNT];
    const int nisa = numla_test_isas(isas);
    for (int l = 0; l < nisa; l++) {
        CU_ASSERT_EQUAL_FATAL(numla_qblock_forward(isas[l], &w, 1, x, K, yw, N, 0, NULL, 0), NUMLA_STATUS_OK);
        int bad = 0;
        for (int r = 0; r < N; r++) {
            double ref = 0, mag = 0;
            for (int e = 0; e < K; e++) {
                ref += wref[r][e] * x[e];
                mag += fabs(wref[r][e] * x[e]);
            }
            bad += !(fabs(yw[r] - ref) <= (K + 2) * 0x1p-24 * mag);
        }
        NUMLA_ASSERT_MSG(bad == 0, "level %s: %d whole-weight outputs off", numla_isa_name(isas[l]), bad);
        for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
            const int r0 = cuts[c][0], r1 = cuts[c][1];
            memset(ys, 0xFF, sizeof ys);
            CU_ASSERT_EQUAL_FATAL(numla_qblock_rows(&w, r0, r1, &v), NUMLA_STATUS_OK);
            CU_ASSERT_EQUAL(v.n, r1 - r0);
            CU_ASSERT_EQUAL_FATAL(numla_qblock_forward(isas[l], &v, 1, x, K, ys + r0, r1 - r0, 0, NULL, 0),
                                  NUMLA_STATUS_OK);
            NUMLA_ASSERT_MSG(!memcmp(ys + r0, yw + r0, sizeof(float) * (size_t)(r1 - r0)),
                             "level %s: rows [%d, %d) differ from the whole weight's", numla_isa_name(isas[l]), r0, r1);
        }
        /* two threads, each its slice (the caller's own split) */
        memset(ys, 0xFF, sizeof ys);
        int fails = 0;
#pragma omp parallel num_threads(2) reduction(+ : fails)
        {
            const int t = omp_get_thread_num(), nt = omp_get_num_threads();
            const int r0 = N * t / nt, r1 = N * (t + 1) / nt;
            numla_qblock_weight mine;
            fails += numla_qblock_rows(&w, r0, r1, &mine) != NUMLA_STATUS_OK ||
                     numla_qblock_forward(isas[l], &mine, 1, x, K, ys + r0, r1 - r0, 0, NULL, 0) != NUMLA_STATUS_OK;
        }
        CU_ASSERT_EQUAL(fails, 0);
        NUMLA_ASSERT_MSG(!memcmp(ys, yw, sizeof ys), "level %s: the team's slices differ", numla_isa_name(isas[l]));
    }
    CU_ASSERT_EQUAL(numla_qblock_rows(&w, -1, 3, &v), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_qblock_rows(&w, 3, 3, &v), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_qblock_rows(&w, 0, N + 1, &v), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_qblock_rows(NULL, 0, 1, &v), NUMLA_STATUS_INVALID_ARG);
    numla_qblock_weight p16 = w;
    p16.layout = NUMLA_QBLOCK_LAYOUT_PANEL16;
    CU_ASSERT_EQUAL(numla_qblock_rows(&p16, 0, 16, &v), NUMLA_STATUS_UNSUPPORTED);
    free(dst);
}

static void test_repack_refuses(void)
{
    uint8_t codes[32] = {0}, scales[2] = {127, 0xFF}, out[34];
    CU_ASSERT_EQUAL(numla_qblock_mxfp4_from_e2m1(codes, scales, 48, out), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_qblock_mxfp4_from_e2m1(codes, scales, -32, out), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_qblock_mxfp4_from_e2m1(codes, scales, 64, out), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "block 1"));
    CU_ASSERT_EQUAL(numla_qblock_mxfp4_from_e2m1(codes, scales, 32, out), NUMLA_STATUS_OK);
}

NUMLA_TEST_SUITE(qblock_mxfp4, NULL, NULL, NUMLA_TEST(test_repack_dequant),
                  NUMLA_TEST(test_every_scale_byte), NUMLA_TEST(test_rows_slice),
                  NUMLA_TEST(test_repack_refuses))
