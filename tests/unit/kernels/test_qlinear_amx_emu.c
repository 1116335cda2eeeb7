/* Tests for the AMX-INT8 W8A8 linear (kernels/x86/qlinear_amx.c) on a CPU without AMX: the
 * kernel is built against the tile emulator (tests/support/amx_emulate.h; tests/CMakeLists.txt
 * makes numla_amx_emulated) and its y must be bit-identical to the ref level's on the
 * same packed weights, for M around the 16-row tiles (16, 17, 31, 32, 33, 100, 512), N and K off
 * the tile sizes, accumulate on and off, 1 and 2 threads; the emulator's count of tile products
 * must be exactly what the tile path takes (so the tiles, not the VNNI fallback, produced y).
 * The emulator itself is checked on a tile product computed by hand. */
#define NUMLA_AMX_EMU_DEFINE
#include "tests/support/amx_emulate.h"

#include "test_util.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/qlinear_internal.h"
#include "kernels/x86/amx.h"

void numla_qlinear_forward_amx_emulated(const numla_qlinear_weight *w, int64_t m, const float *x,
                                        int64_t ldx, float *y, int64_t ldy, int accumulate,
                                        void *workspace);

#define SENTINEL 12345.0f

/* The emulated kernel's AVX-512 parts (and its VNNI fallback) run natively. */
static int runnable(void)
{
    if (numla_isa_supported(NUMLA_ISA_AVX512BF16) && numla_cpu_has(NUMLA_CPU_VNNI))
        return 1;
    fprintf(stderr, "(no AVX512-BF16 + VNNI here, skipped) ");
    return 0;
}

/* TDPBSSD on a 2 x 2 int32 C (colsb 8), A 2 x 12 bytes (K = 3 quads), B 3 x 8 bytes, worked
 * out by hand; C[0][1] starts at INT32_MIN + 100 and wraps. The store writes rows x colsb
 * bytes and nothing past them. */
static void test_emulator_hand_product(void)
{
    numla_amx_tilecfg cfg __attribute__((aligned(64))) = {.palette = 1};
    cfg.rows[0] = 2, cfg.colsb[0] = 8;  /* C */
    cfg.rows[1] = 2, cfg.colsb[1] = 12; /* A */
    cfg.rows[2] = 3, cfg.colsb[2] = 8;  /* B */
    const int8_t a[2][12] = {{1, -2, 3, -4, 5, 6, -7, 8, -128, 127, 0, 1},
                             {-1, -1, -1, -1, 2, 0, 0, 2, 100, -100, 50, -50}};
    const int8_t b[3][8] = {{1, 1, 1, 1, -1, 2, -3, 4},
                            {2, -2, 0, 1, 10, 0, 0, -10},
                            {-128, -128, 3, 3, 1, -1, 1, -1}};
    const int32_t c0[2][2] = {{10, INT32_MIN + 100}, {-5, 0}};
    /* C[0][0] = 10 + (1-2+3-4) + (10-12+0+8) + (16384-16256+0+3) = 10 - 2 + 6 + 131 = 145
     * C[0][1] = INT32_MIN + 100 + (-1-4-9-16) + (50-80) + (-128-127-1) = INT32_MIN - 216,
     *           which wraps to INT32_MAX - 215
     * C[1][0] = -5 + (-4) + (4+2) + (-12800+12800+150-150) = -3
     * C[1][1] = 0 + (1-2+3-4) + (20-20) + (100+100+50+50) = 298 */
    const int32_t want[2][2] = {{145, INT32_MAX - 215}, {-3, 298}};
    const long ops = numla_amx_emu_dp_ops;
    _tile_loadconfig(&cfg);
    _tile_loadd(0, c0, sizeof c0[0]);
    _tile_loadd(1, a, sizeof a[0]);
    _tile_loadd(2, b, sizeof b[0]);
    _tile_dpbssd(0, 1, 2);
    int32_t got[2][3];
    memset(got, 0x55, sizeof got);
    _tile_stored(0, got, sizeof got[0]);
    _tile_release();
    for (int m = 0; m < 2; m++) {
        for (int n = 0; n < 2; n++)
            NUMLA_ASSERT_MSG(got[m][n] == want[m][n], "C[%d][%d] = %d, want %d", m, n, got[m][n],
                             want[m][n]);
        CU_ASSERT_EQUAL(got[m][2], 0x55555555); /* past colsb: untouched */
    }
    CU_ASSERT_EQUAL(numla_amx_emu_dp_ops, ops + 1);
}

/* One shape: the emulated amx kernel against the ref level, bit for bit, on `threads`
 * threads; also the count of TDPBSSD when the tiles apply. Returns the number of bad y. */
static int run_case(int64_t m, int64_t n, int64_t k, int accumulate, int threads, uint64_t seed)
{
    numla_test_rng rng = {seed};
    const int64_t ldx = k + 3, ldy = n + 5;
    int8_t *wsrc = malloc((size_t)(n * k));
    float *scales = malloc((size_t)n * sizeof *scales);
    float *x = malloc((size_t)(m * ldx) * sizeof *x);
    float *y = malloc((size_t)(m * ldy) * sizeof *y), *yr = malloc((size_t)(m * ldy) * sizeof *yr);
    CU_ASSERT_FATAL(wsrc && scales && x && y && yr);
    for (int64_t i = 0; i < n * k; i++)
        wsrc[i] = (int8_t)numla_test_rng_u64(&rng);
    for (int64_t i = 0; i < n; i++)
        scales[i] = 1e-2f * (float)pow(10.0, numla_test_rng_uniform(&rng, -1.0, 1.0));
    for (int64_t i = 0; i < m * ldx; i++)
        x[i] = (float)numla_test_rng_normal(&rng) * (i % 7 == 0 ? 10.0f : 1.0f);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < ldy; j++)
            y[i * ldy + j] = yr[i * ldy + j] = j < n ? (float)numla_test_rng_normal(&rng) : SENTINEL;

    numla_qlinear_source src = {NUMLA_QLINEAR_INT8_W8A8, n, k, 0, 0, wsrc, k, scales, n, 1};
    void *packed = aligned_alloc(64, numla_qlinear_align64(numla_qlinear_packed_size(src.fmt, n, k)));
    numla_qlinear_weight w;
    CU_ASSERT_FATAL(packed && numla_qlinear_pack(&src, packed, &w) == NUMLA_STATUS_OK);
    const size_t ws = numla_qlinear_workspace_size(&w, m, 2);
    unsigned char *wsbuf = malloc(ws + 1); /* misaligned on purpose: the kernel aligns */
    CU_ASSERT_FATAL(wsbuf != NULL);
    CU_ASSERT(numla_qlinear_forward(NUMLA_ISA_REF, &w, m, x, ldx, yr, ldy, accumulate, wsbuf + 1, ws) ==
              NUMLA_STATUS_OK);

    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    const long ops = numla_amx_emu_dp_ops;
    numla_qlinear_forward_amx_emulated(&w, m, x, ldx, y, ldy, accumulate, wsbuf + 1);
    const long took = numla_amx_emu_dp_ops - ops;
    omp_set_num_threads(saved);

    int bad = 0;
    /* every (16-row weight block, 16-row x block, 64-k block) once; none on the fallback */
    const long want_ops = numla_qlinear_amx_applies(&w, m)
                              ? (long)((n + 15) / 16) * (long)((m + 15) / 16) * (long)(w.kp / 64)
                              : 0;
    if (took != want_ops) {
        fprintf(stderr, "\n    M=%lld N=%lld K=%lld: %ld TDPBSSD, want %ld\n", (long long)m,
                (long long)n, (long long)k, took, want_ops);
        bad++;
    }
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < ldy; j++) {
            const float got = y[i * ldy + j], want = yr[i * ldy + j];
            if (memcmp(&got, &want, sizeof got) != 0 && bad++ == 0)
                fprintf(stderr,
                        "\n    M=%lld N=%lld K=%lld acc=%d threads=%d: y[%lld][%lld] = %.9g, ref level "
                        "%.9g%s\n",
                        (long long)m, (long long)n, (long long)k, accumulate, threads, (long long)i,
                        (long long)j, (double)got, (double)want, j >= n ? " (past N)" : "");
        }
    free(wsbuf);
    free(packed);
    free(wsrc);
    free(scales);
    free(x);
    free(y);
    free(yr);
    return bad;
}

static void test_matches_ref(void)
{
    if (!runnable())
        return;
    const int64_t ms[] = {16, 17, 31, 32, 33, 100, 512};
    const int64_t ns[] = {16, 40, 77, 200}; /* one tile; a partial third block; odd blocks */
    const int64_t ks[] = {64, 100, 300};
    int bad = 0;
    uint64_t seed = 17;
    unsigned kept = 0; /* a lean sweep: one case in 5, every value of every loop */
    for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++)
        for (size_t b = 0; b < sizeof ns / sizeof ns[0]; b++)
            for (size_t c = 0; c < sizeof ks / sizeof ks[0]; c++)
                for (int acc = 0; acc < 2; acc++)
                    for (int th = 1; th <= 2; th++, seed++)
                        if (!numla_test_sweep_lean() || numla_test_sweep_keep(&kept, 2))
                            bad += run_case(ms[a], ns[b], ks[c], acc, th, seed);
    CU_ASSERT_EQUAL(bad, 0);
}

/* K = 3000 at M = 512: packed x exceeds NUMLA_QLINEAR_AMX_X_BYTES, so the rows run in chunks;
 * and shapes below the tiles (M < 16, N < 16), which take the VNNI variant. */
static void test_chunks_and_fallback(void)
{
    if (!runnable())
        return;
    CU_ASSERT(512 * numla_qlinear_kp(3000) > NUMLA_QLINEAR_AMX_X_BYTES);
    int bad = 0;
    for (int acc = 0; acc < 2; acc++)
        for (int th = 1; th <= 2; th++) {
            bad += run_case(512, 40, 3000, acc, th, 900 + (uint64_t)(acc * 2 + th));
            bad += run_case(5, 40, 300, acc, th, 910 + (uint64_t)(acc * 2 + th));
            bad += run_case(64, 9, 300, acc, th, 920 + (uint64_t)(acc * 2 + th));
        }
    CU_ASSERT_EQUAL(bad, 0);
}

NUMLA_TEST_SUITE(qlinear_amx_emu, NULL, NULL, NUMLA_TEST(test_emulator_hand_product),
                 NUMLA_TEST(test_matches_ref), NUMLA_TEST(test_chunks_and_fallback))
