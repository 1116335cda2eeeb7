/* Hardware against emulator, for every AMX kernel (runs where the CPU has AMX; skipped, saying
 * so, elsewhere). The tile emulator (tests/support/amx_emulate.h) is what the *_amx_emu suites
 * trust on machines without AMX; this suite is the evidence that it may be trusted:
 *   - instructions: TDPBF16PS and the four TDPB[SU][SU]D on the hardware (amx_probe_amx.c) and
 *     on the emulator (the same amx_probe.h built here), bit for bit, on ordinary values and on
 *     the edges where an fp32 dot product can be computed in more than one way: products and
 *     sums near and below 2^-126 (DAZ, FTZ), bf16 and C denormals, cancellation of large terms
 *     (the order of the sums and where they round), exponents over the whole range, int32
 *     wrap-around, and partial tile shapes;
 *   - kernels: each AMX kernel file's real build (numla_kernels) and its build over the emulator
 *     (numla_amx_emulated, tests/CMakeLists.txt) on the same inputs, bit for bit: the bf16 GEMM
 *     (linear_amx.c), W8A8 (qlinear_amx.c), fp8 with fp32 and power-of-two scales
 *     (qlinear_fp8_amx.c) and int8-row (qlinear_int8row_amx.c, its few-row AVX-512 path with
 *     the tiles' arithmetic included), both through qlinear_wide_amx.c, every block encoding in
 *     both layouts (qblock_panel_amx.c), the MLA decode kernel's Q·K and P·V
 *     (mla_attn_amx.c) and MHA prefill's scores and P·V (mha_prefill_amx.c).
 * What the comparison found is docs/design.md §4 ("AMX on the hardware and in the emulator"). */
#include "tests/support/amx_emulate.h" /* (its state is defined in test_qlinear_amx_emu.c) */

#include "test_util.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amx_probe.h"
#include "kernels/linear_internal.h"
#include "kernels/mha_prefill_internal.h"
#include "kernels/qblock_internal.h"
#include "kernels/qlinear_internal.h"
#include "kernels/x86/mha_prefill_amx.h"
#include "kernels/x86/mla_attn_amx.h"
#include "qblock_check.h"

/* the real tiles (amx_probe_amx.c) */
void amx_probe_dp_hardware(amx_probe_op op, int rows, int colsb_c, int colsb_a, void *c, const void *a,
                           const void *b);

/* the emulated builds (NUMLA_AMX_EMULATE renames each file's entry points) */
void numla_linear_forward_amx_emulated(const numla_linear_weight *w, int64_t m, const float *x, int64_t ldx,
                                       float *y, int64_t ldy, int accumulate, void *workspace);
void numla_qlinear_forward_amx_emulated(const numla_qlinear_weight *w, int64_t m, const float *x, int64_t ldx,
                                        float *y, int64_t ldy, int accumulate, void *workspace);
void numla_qlinear_forward_amx_wide_emulated(const numla_qlinear_weight *w, int64_t m, const float *x,
                                            int64_t ldx, float *y, int64_t ldy, int accumulate,
                                            void *workspace);
void numla_qblock_forward_amx_emulated(const numla_qblock_weight *w, int64_t m, const float *x, int64_t ldx, float *y,
                                       int64_t ldy, int accumulate, void *ws, size_t ws_bytes);
void numla_qblock_forward_f32_amx_emulated(const numla_qblock_weight *w, int64_t m, const float *x, int64_t ldx,
                                           float *y, int64_t ldy, int accumulate, void *ws, size_t ws_bytes);
void numla_mla_amx_begin_emulated(void);
void numla_mla_amx_end_emulated(void);
void numla_mla_qk_amx_emulated(const uint32_t *qv, const uint32_t *qlo, int64_t w, const char *const *rows,
                               int64_t nt, float *S, uint16_t *stage);
void numla_mla_pv_amx_emulated(float *O, int64_t dc, const float *S, const float *corr, int fresh, int rescale,
                               const char *const *vrows, int64_t nt, uint16_t *stage, uint16_t *vpre, int vfill);
void numla_mha_prefill_scores_amx_emulated(const uint16_t *qp, int32_t nq, int32_t D, const uint16_t *kp, float *S);
void numla_mha_prefill_pv_amx_emulated(const float *S, int32_t nq, const uint16_t *vp, int32_t Dv, uint16_t *pp,
                                       float *O);

/* The hardware side needs AMX-BF16 (and AMX-INT8 for the integer products); the emulated
 * kernels' AVX-512 parts need AVX512-BF16 and VNNI. */
static int runnable(int int8)
{
    if (!numla_cpu_has(int8 ? NUMLA_CPU_AMX_INT8 : NUMLA_CPU_AMX_BF16)) {
        fprintf(stderr, "(no AMX%s tiles here: nothing to compare the emulator with, skipped) ", int8 ? "-INT8" : "");
        return 0;
    }
    return 1;
}

/* Equal bits over n floats (or int32s); prints the first difference under `what`. */
static int same_bits(const char *what, const void *hw, const void *emu, size_t n)
{
    const uint32_t *a = hw, *b = emu;
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) {
            float fa, fb;
            memcpy(&fa, &a[i], 4);
            memcpy(&fb, &b[i], 4);
            fprintf(stderr, "\n    %s: element %zu: hardware %08x (%a), emulator %08x (%a)\n", what, i, a[i],
                    (double)fa, b[i], (double)fb);
            return 1;
        }
    return 0;
}

/* ---- instructions ---- */

/* A bf16 with a random sign and mantissa and a biased exponent field in [elo, ehi] (0: a
 * denormal or zero). */
static uint16_t rand_bf16(numla_test_rng *rng, int elo, int ehi)
{
    const uint64_t r = numla_test_rng_u64(rng);
    const int e = elo + (int)((r >> 8) % (uint64_t)(ehi - elo + 1));
    return (uint16_t)((r & 1) << 15 | (uint16_t)e << 7 | ((r >> 1) & 0x7f));
}

static float rand_f32(numla_test_rng *rng, int elo, int ehi)
{
    const uint64_t r = numla_test_rng_u64(rng);
    const uint32_t e = (uint32_t)(elo + (int)((r >> 40) % (uint64_t)(ehi - elo + 1)));
    const uint32_t u = (uint32_t)(r & 1) << 31 | e << 23 | (uint32_t)((r >> 1) & 0x7fffff);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

typedef struct {
    const char *what;
    int a_lo, a_hi, b_lo, b_hi, c_lo, c_hi; /* biased exponent fields of A, B (bf16) and C (fp32) */
} bf16_range;

static void test_instructions_bf16(void)
{
    if (!runnable(0))
        return;
    const bf16_range ranges[] = {
        {"ordinary values", 120, 134, 120, 134, 118, 136},
        {"products near 2^-126", 127 - 70, 127 - 50, 127 - 80, 127 - 60, 0, 127 - 120},
        {"denormal bf16 inputs", 0, 3, 120, 135, 0, 2},
        {"denormal and tiny C", 110, 140, 0, 20, 0, 1},
        {"cancellation of large terms", 150, 160, 150, 160, 170, 185},
        {"exponents over the range", 0, 190, 0, 185, 0, 250},
    };
    const int shapes[][3] = {{16, 64, 64}, {7, 20, 24}, {1, 4, 4}, {16, 64, 8}}; /* rows, colsb C, colsb A */
    numla_test_rng rng = {2024};
    static uint16_t a[16][32] __attribute__((aligned(64))), b[16][32] __attribute__((aligned(64)));
    static float c0[16][16] __attribute__((aligned(64))), ch[16][16] __attribute__((aligned(64))),
        ce[16][16] __attribute__((aligned(64)));
    int bad = 0;
    long compared = 0;
    for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int it = 0; it < 40; it++) {
                const bf16_range *g = &ranges[r];
                for (int i = 0; i < 16; i++)
                    for (int j = 0; j < 32; j++) {
                        a[i][j] = rand_bf16(&rng, g->a_lo, g->a_hi);
                        b[i][j] = rand_bf16(&rng, g->b_lo, g->b_hi);
                    }
                /* the ordinary mix: some zeros and exact cancellations too */
                if (it % 4 == 1)
                    for (int i = 0; i < 16; i++)
                        b[i][(i * 7) % 32] = 0, a[i][(i * 5) % 32] ^= 0x8000;
                for (int i = 0; i < 16; i++)
                    for (int j = 0; j < 16; j++)
                        c0[i][j] = rand_f32(&rng, g->c_lo, g->c_hi);
                memcpy(ch, c0, sizeof c0);
                memcpy(ce, c0, sizeof c0);
                amx_probe_dp_hardware(AMX_PROBE_BF16PS, shapes[s][0], shapes[s][1], shapes[s][2], ch, a, b);
                amx_probe_dp(AMX_PROBE_BF16PS, shapes[s][0], shapes[s][1], shapes[s][2], ce, a, b);
                char what[160];
                snprintf(what, sizeof what, "TDPBF16PS, %s, %d x %d bytes, A %d bytes", g->what, shapes[s][0],
                         shapes[s][1], shapes[s][2]);
                bad += same_bits(what, ch, ce, sizeof ch / 4);
                compared += shapes[s][0] * shapes[s][1] / 4;
            }
    CU_ASSERT(compared > 10000);
    CU_ASSERT_EQUAL(bad, 0);
}

static void test_instructions_int8(void)
{
    if (!runnable(1))
        return;
    const int shapes[][3] = {{16, 64, 64}, {5, 24, 36}, {16, 4, 64}};
    numla_test_rng rng = {7};
    static int8_t a[16][64] __attribute__((aligned(64))), b[16][64] __attribute__((aligned(64)));
    static int32_t c0[16][16] __attribute__((aligned(64))), ch[16][16] __attribute__((aligned(64))),
        ce[16][16] __attribute__((aligned(64)));
    int bad = 0;
    for (int op = AMX_PROBE_SSD; op <= AMX_PROBE_UUD; op++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int it = 0; it < 40; it++) {
                for (int i = 0; i < 16; i++)
                    for (int j = 0; j < 64; j++) {
                        /* extremes (-128, 127, 255) often: the largest products */
                        const uint64_t r = numla_test_rng_u64(&rng);
                        a[i][j] = (int8_t)(it % 3 == 0 ? (r & 1 ? 0x80 : 0x7f) : r);
                        b[i][j] = (int8_t)(it % 3 == 0 ? (r & 2 ? 0xff : 0x80) : r >> 8);
                    }
                for (int i = 0; i < 16; i++)
                    for (int j = 0; j < 16; j++) { /* near the int32 limits: the sums wrap */
                        const uint64_t r = numla_test_rng_u64(&rng);
                        c0[i][j] = it % 2 ? (int32_t)r : (int32_t)(r & 1 ? 0x7fff0000u + (r >> 48) : 0x80000000u + (r >> 48));
                    }
                memcpy(ch, c0, sizeof c0);
                memcpy(ce, c0, sizeof c0);
                amx_probe_dp_hardware((amx_probe_op)op, shapes[s][0], shapes[s][1], shapes[s][2], ch, a, b);
                amx_probe_dp((amx_probe_op)op, shapes[s][0], shapes[s][1], shapes[s][2], ce, a, b);
                static const char *names[] = {"", "TDPBSSD", "TDPBSUD", "TDPBUSD", "TDPBUUD"};
                char what[96];
                snprintf(what, sizeof what, "%s, %d x %d bytes, A %d bytes", names[op], shapes[s][0], shapes[s][1],
                         shapes[s][2]);
                bad += same_bits(what, ch, ce, sizeof ch / 4);
            }
    CU_ASSERT_EQUAL(bad, 0);
}

/* ---- kernels ---- */

static float *rand_x(numla_test_rng *rng, int64_t count)
{
    float *x = malloc((size_t)count * sizeof *x);
    CU_ASSERT_FATAL(x != NULL);
    for (int64_t i = 0; i < count; i++) /* a spread of magnitudes, a few near fp32's bottom */
        x[i] = (float)numla_test_rng_normal(rng) * (i % 7 == 0 ? 10.0f : i % 101 == 0 ? 1e-39f : 1.0f);
    return x;
}

/* y0 copied into two outputs; runs hw into the first and emu into the second on `threads`
 * threads; their bits compared. */
typedef void (*linear_like_fn)(const void *w, int64_t m, const float *x, int64_t ldx, float *y, int64_t ldy,
                               int acc, void *ws, size_t ws_bytes);

/* An entry point's real build (fn) and its emulated twin (fn##_emulated) as two
 * linear_like_fn: NAME_hw and NAME_emu. WS: how the entry takes its workspace. */
#define AMX_PAIR(NAME, fn, WS)                                                                                       \
    static void NAME##_hw(const void *w, int64_t m, const float *x, int64_t ldx, float *y, int64_t ldy, int acc,      \
                          void *ws, size_t wsb)                                                                      \
    {                                                                                                                \
        (void)wsb;                                                                                                   \
        fn(w, m, x, ldx, y, ldy, acc, WS);                                                                           \
    }                                                                                                                \
    static void NAME##_emu(const void *w, int64_t m, const float *x, int64_t ldx, float *y, int64_t ldy, int acc,     \
                           void *ws, size_t wsb)                                                                     \
    {                                                                                                                \
        (void)wsb;                                                                                                   \
        fn##_emulated(w, m, x, ldx, y, ldy, acc, WS);                                                                \
    }
#define AMX_WS ws
#define AMX_WS_BYTES ws, wsb
AMX_PAIR(bf16, numla_linear_forward_amx, AMX_WS)
AMX_PAIR(w8a8, numla_qlinear_forward_amx, AMX_WS)
AMX_PAIR(wide, numla_qlinear_forward_amx_wide, AMX_WS)
AMX_PAIR(qblock, numla_qblock_forward_amx, AMX_WS_BYTES)
AMX_PAIR(qblock_f32, numla_qblock_forward_f32_amx, AMX_WS_BYTES)

/* One GEMM shape through both builds: M rows of x (row stride k + 3) into y (row stride n + 5),
 * accumulate on or off, on 2 threads. Returns 1 on any differing bit. */
static int compare_gemm(const char *what, linear_like_fn hw, linear_like_fn emu, const void *w, int64_t m,
                        int64_t n, int64_t k, int acc, size_t ws_bytes, numla_test_rng *rng)
{
    const int64_t ldx = k + 3, ldy = n + 5;
    float *x = rand_x(rng, m * ldx);
    float *yh = malloc((size_t)(m * ldy) * sizeof *yh), *ye = malloc((size_t)(m * ldy) * sizeof *ye);
    unsigned char *ws = aligned_alloc(64, (ws_bytes + 64 + 63) & ~(size_t)63);
    CU_ASSERT_FATAL(yh && ye && ws);
    for (int64_t i = 0; i < m * ldy; i++)
        yh[i] = ye[i] = (float)numla_test_rng_normal(rng);
    const int team = omp_get_max_threads();
    omp_set_num_threads(2);
    hw(w, m, x, ldx, yh, ldy, acc, ws, ws_bytes);
    emu(w, m, x, ldx, ye, ldy, acc, ws, ws_bytes);
    omp_set_num_threads(team);
    char full[200];
    snprintf(full, sizeof full, "%s M=%lld N=%lld K=%lld acc=%d", what, (long long)m, (long long)n, (long long)k, acc);
    const int bad = same_bits(full, yh, ye, (size_t)(m * ldy));
    free(ws);
    free(x);
    free(yh);
    free(ye);
    return bad;
}

static void test_linear_bf16(void)
{
    if (!runnable(0))
        return;
    const int64_t shapes[][3] = {{NUMLA_LINEAR_AMX_MIN_M, 40, 64}, {33, 100, 256}, {130, 64, 2048}, {300, 48, 96}, {64, 1040, 512}};
    numla_test_rng rng = {11};
    int bad = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        uint16_t *src = malloc((size_t)(n * k) * sizeof *src);
        CU_ASSERT_FATAL(src != NULL);
        for (int64_t i = 0; i < n * k; i++)
            src[i] = rand_bf16(&rng, 118, 130);
        void *packed = aligned_alloc(64, (numla_linear_packed_size(NUMLA_ISA_AMX, n, k, NUMLA_DTYPE_BF16) + 63) & ~(size_t)63);
        numla_linear_weight w;
        CU_ASSERT_FATAL(packed && numla_linear_pack(NUMLA_ISA_AMX, n, k, src, NUMLA_DTYPE_BF16, k, packed, &w) ==
                                      NUMLA_STATUS_OK);
        CU_ASSERT_FATAL(numla_linear_amx_applies(&w, m));
        const size_t ws = numla_linear_workspace_amx(&w, m, 2);
        for (int acc = 0; acc < 2; acc++)
            bad += compare_gemm("bf16 linear_amx", bf16_hw, bf16_emu, &w, m, n, k, acc, ws, &rng);
        free(packed);
        free(src);
    }
    CU_ASSERT_EQUAL(bad, 0);
}

/* fp8 (e4m3 bytes, no NaN code) or int8 weights with random scales (pow2: fp8's as powers of
 * two, which the fp8 tiles fold into the weights), packed as the loader does. */
static int qlinear_case_s(numla_qlinear_format fmt, int64_t m, int64_t n, int64_t k, int64_t row0, int pow2,
                          numla_test_rng *rng)
{
    const int64_t rows = row0 + n, sr = fmt == NUMLA_QLINEAR_FP8_BLOCK ? (rows + 127) / 128 : rows;
    const int64_t sc = fmt == NUMLA_QLINEAR_FP8_BLOCK ? (k + 127) / 128 : 1;
    uint8_t *data = malloc((size_t)(rows * k));
    float *scales = malloc((size_t)(sr * sc) * sizeof *scales);
    CU_ASSERT_FATAL(data && scales);
    for (int64_t i = 0; i < rows * k; i++) {
        const uint8_t b = (uint8_t)numla_test_rng_u64(rng);
        data[i] = fmt == NUMLA_QLINEAR_FP8_BLOCK && (b & 0x7f) == 0x7f ? (uint8_t)(b ^ 1) : b;
    }
    for (int64_t i = 0; i < sr * sc; i++)
        scales[i] = pow2 ? ldexpf(1.0f, -12 + (int)(numla_test_rng_u64(rng) % 9))
                         : 1e-2f * (float)pow(10.0, numla_test_rng_uniform(rng, -1.0, 1.0));
    numla_qlinear_source src = {fmt, n, k, row0, 0, data + row0 * k, k, scales, sr, sc};
    void *packed = aligned_alloc(64, numla_qlinear_align64(numla_qlinear_packed_size(fmt, n, k)));
    numla_qlinear_weight w;
    CU_ASSERT_FATAL(packed && numla_qlinear_pack(&src, packed, &w) == NUMLA_STATUS_OK);
    const int wide = fmt != NUMLA_QLINEAR_INT8_W8A8; /* fp8, int8-row: the qlinear_wide_amx.c entry */
    CU_ASSERT(wide ? numla_qlinear_amx_wide_applies(&w, m) : numla_qlinear_amx_applies(&w, m));
    CU_ASSERT_EQUAL(w.scale_pow2, pow2);
    const size_t ws = numla_qlinear_workspace_size(&w, m, 2);
    int bad = 0;
    for (int acc = 0; acc < 2; acc++)
        bad += compare_gemm(fmt == NUMLA_QLINEAR_FP8_BLOCK  ? (pow2 ? "fp8 (2^e scales) qlinear_fp8_amx" : "fp8 qlinear_fp8_amx")
                            : fmt == NUMLA_QLINEAR_INT8_ROW ? "int8-row qlinear_int8row_amx"
                                                            : "W8A8 qlinear_amx",
                            wide ? wide_hw : w8a8_hw, wide ? wide_emu : w8a8_emu, &w, m, n, k, acc, ws, rng);
    free(packed);
    free(data);
    free(scales);
    return bad;
}

static int qlinear_case(numla_qlinear_format fmt, int64_t m, int64_t n, int64_t k, int64_t row0, numla_test_rng *rng)
{
    return qlinear_case_s(fmt, m, n, k, row0, 0, rng);
}

static void test_qlinear_wide(void)
{
    if (!runnable(0))
        return;
    numla_test_rng rng = {12};
    int bad = 0;
    bad += qlinear_case(NUMLA_QLINEAR_FP8_BLOCK, 16, 16, 64, 0, &rng);
    bad += qlinear_case(NUMLA_QLINEAR_FP8_BLOCK, 77, 300, 400, 0, &rng);
    bad += qlinear_case(NUMLA_QLINEAR_FP8_BLOCK, 100, 40, 3000, 192, &rng);
    bad += qlinear_case(NUMLA_QLINEAR_FP8_BLOCK, 300, 24, 200, 120, &rng);
    bad += qlinear_case_s(NUMLA_QLINEAR_FP8_BLOCK, 16, 16, 64, 0, 1, &rng);
    bad += qlinear_case_s(NUMLA_QLINEAR_FP8_BLOCK, 77, 300, 400, 0, 1, &rng);
    bad += qlinear_case_s(NUMLA_QLINEAR_FP8_BLOCK, 100, 40, 3000, 192, 1, &rng);
    /* K past NUMLA_QLINEAR_AMX_FP8_SLAB_MIN_K: the weights widened a slab at a time */
    bad += qlinear_case_s(NUMLA_QLINEAR_FP8_BLOCK, 40, 40, 4200, 8, 0, &rng);
    bad += qlinear_case_s(NUMLA_QLINEAR_FP8_BLOCK, 40, 40, 4200, 8, 1, &rng);
    /* int8-row: the tiles' arithmetic in AVX-512 below 4 rows, the tiles from 4 */
    bad += qlinear_case(NUMLA_QLINEAR_INT8_ROW, 1, 520, 520, 0, &rng);
    bad += qlinear_case(NUMLA_QLINEAR_INT8_ROW, 3, 272, 1000, 0, &rng);
    bad += qlinear_case(NUMLA_QLINEAR_INT8_ROW, 40, 520, 520, 0, &rng);
    CU_ASSERT_EQUAL(bad, 0);
}

static void test_qlinear_w8a8(void)
{
    if (!runnable(1))
        return;
    numla_test_rng rng = {13};
    int bad = 0;
    bad += qlinear_case(NUMLA_QLINEAR_INT8_W8A8, 16, 16, 64, 0, &rng);
    bad += qlinear_case(NUMLA_QLINEAR_INT8_W8A8, 40, 77, 300, 0, &rng);
    bad += qlinear_case(NUMLA_QLINEAR_INT8_W8A8, 300, 160, 5000, 0, &rng);
    CU_ASSERT_EQUAL(bad, 0);
}

static void test_qblock(void)
{
    if (!runnable(1) || !numla_cpu_has(NUMLA_CPU_VNNI))
        return;
    numla_test_rng rng = {14};
    const numla_qblock_type types[] = {NUMLA_QBLOCK_Q4_K, NUMLA_QBLOCK_IQ4_XS, NUMLA_QBLOCK_Q5_0, NUMLA_QBLOCK_Q8_0,
                                       NUMLA_QBLOCK_IQ4_NL, NUMLA_QBLOCK_Q4_0, NUMLA_QBLOCK_Q5_K,
                                       NUMLA_QBLOCK_Q2_K, NUMLA_QBLOCK_Q3_K, NUMLA_QBLOCK_Q6_K, NUMLA_QBLOCK_Q5_1};
    const int64_t shapes[][3] = {{16, 16, 256}, {40, 77, 1280}, {150, 40, 512}};
    int bad = 0, cases = 0;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
        for (int lay = 0; lay < 2; lay++)
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
                const int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
                const numla_qblock_layout layout = lay ? NUMLA_QBLOCK_LAYOUT_PANEL16 : NUMLA_QBLOCK_LAYOUT_ROWS;
                if (!numla_qblock_q8_takes(types[t], k) || (lay && !numla_qblock_layout_size(types[t], layout, n, k)))
                    continue;
                int64_t rb;
                uint8_t *src = qb_random(types[t], n, k, &rng, &rb);
                const size_t bytes = lay ? numla_qblock_layout_size(types[t], layout, n, k)
                                         : numla_qblock_packed_size(types[t], n, k);
                void *packed = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
                numla_qblock_weight w;
                numla_qblock_source qs = {.type = types[t], .n = n, .k = k, .data = src, .ld = rb,
                                          .act = NUMLA_QBLOCK_ACT_Q8, .layout = layout};
                CU_ASSERT_FATAL(packed != NULL);
                CU_ASSERT_EQUAL_FATAL(numla_qblock_pack(&qs, packed, &w), NUMLA_STATUS_OK);
                char what[64];
                snprintf(what, sizeof what, "%s layout %d", numla_qblock_info_get(types[t])->name, lay);
                bad += compare_gemm(what, qblock_hw, qblock_emu, &w, m, n, k, (int)(s % 2),
                                    numla_qblock_workspace_size(&w, m, 2), &rng);
                cases++;
                free(packed);
                free(src);
            }
    CU_ASSERT(cases >= 40);
    /* F32 mode on bf16 tiles (MXFP4): a partial weight tile, a ragged K block, several chunks */
    const int64_t f32_shapes[][3] = {{8, 16, 32}, {40, 77, 1056}, {300, 40, 96}};
    for (size_t s = 0; s < sizeof f32_shapes / sizeof f32_shapes[0]; s++) {
        const int64_t m = f32_shapes[s][0], n = f32_shapes[s][1], k = f32_shapes[s][2];
        int64_t rb;
        uint8_t *src = qb_random(NUMLA_QBLOCK_MXFP4, n, k, &rng, &rb);
        void *packed = aligned_alloc(64, numla_qblock_packed_size(NUMLA_QBLOCK_MXFP4, n, k));
        numla_qblock_weight w;
        numla_qblock_source qs = {.type = NUMLA_QBLOCK_MXFP4, .n = n, .k = k, .data = src, .ld = rb};
        CU_ASSERT_FATAL(packed != NULL);
        CU_ASSERT_EQUAL_FATAL(numla_qblock_pack(&qs, packed, &w), NUMLA_STATUS_OK);
        bad += compare_gemm("MXFP4 F32", qblock_f32_hw, qblock_f32_emu, &w, m, n, k, (int)(s % 2),
                            numla_qblock_workspace_size(&w, m, 2), &rng);
        free(packed);
        free(src);
    }
    CU_ASSERT_EQUAL(bad, 0);
}

/* MLA decode: Q·K over paged bf16 cache rows (one contiguous 16-key group, the others
 * gathered; a partial last group), with and without q's lo half; P·V fresh, accumulating and
 * rescaling, with and without the packed-V cache, then unpermuted. */
static void test_mla(void)
{
    if (!runnable(0))
        return;
    enum { W = 576, DC = 512, NT = 64 };
    numla_test_rng rng = {15};
    uint16_t *cache = aligned_alloc(64, (size_t)2 * NT * W * sizeof *cache);
    uint32_t *qv = aligned_alloc(64, (size_t)W / 2 * 16 * 4), *qlo = aligned_alloc(64, (size_t)W / 2 * 16 * 4);
    uint16_t *stage = aligned_alloc(64, (size_t)64 * W * 2);
    float *sh = aligned_alloc(64, 4 * 256 * 4), *se = aligned_alloc(64, 4 * 256 * 4);
    CU_ASSERT_FATAL(cache && qv && qlo && stage && sh && se);
    for (int64_t i = 0; i < 2 * NT * W; i++)
        cache[i] = rand_bf16(&rng, 118, 130);
    for (int64_t i = 0; i < W / 2 * 16; i++) {
        qv[i] = (uint32_t)rand_bf16(&rng, 120, 132) | (uint32_t)rand_bf16(&rng, 120, 132) << 16;
        qlo[i] = (uint32_t)rand_bf16(&rng, 110, 118) | (uint32_t)rand_bf16(&rng, 110, 118) << 16;
    }
    const char *rows[NT];
    for (int t = 0; t < NT; t++) /* keys 0-15 contiguous, the rest from scattered pages */
        rows[t] = (const char *)(cache + (size_t)(t < 16 ? t : 2 * NT - 1 - 2 * (t - 16) % (2 * NT - 20)) * W);
    int bad = 0;
    const int64_t nts[] = {64, 37};
    for (size_t a = 0; a < 2; a++)
        for (int lo = 0; lo < 2; lo++) {
            memset(sh, 0, 4 * 256 * 4);
            memset(se, 0, 4 * 256 * 4);
            numla_mla_amx_begin();
            numla_mla_qk_amx(qv, lo ? qlo : NULL, W, rows, nts[a], sh, stage);
            numla_mla_amx_end();
            numla_mla_amx_begin_emulated();
            numla_mla_qk_amx_emulated(qv, lo ? qlo : NULL, W, rows, nts[a], se, stage);
            numla_mla_amx_end_emulated();
            char what[64];
            snprintf(what, sizeof what, "mla Q·K nt=%lld lo=%d", (long long)nts[a], lo);
            bad += same_bits(what, sh, se, (size_t)(nts[a] + 15) / 16 * 256);
        }

    float *S = aligned_alloc(64, (size_t)NT * 16 * 4), corr[16];
    float *oh = aligned_alloc(64, (size_t)16 * DC * 4), *oe = aligned_alloc(64, (size_t)16 * DC * 4);
    uint16_t *pst = aligned_alloc(64, (size_t)NUMLA_MLA_PV_AMX_STAGE * 2);
    uint16_t *vph = aligned_alloc(64, (size_t)DC / 64 * 2 * 4 * 16 * 32 * 2);
    uint16_t *vpe = aligned_alloc(64, (size_t)DC / 64 * 2 * 4 * 16 * 32 * 2);
    CU_ASSERT_FATAL(S && oh && oe && pst && vph && vpe);
    for (int i = 0; i < 16; i++)
        corr[i] = (float)numla_test_rng_uniform(&rng, 0.1, 1.0);
    for (int64_t i = 0; i < 16 * DC; i++)
        oh[i] = oe[i] = (float)numla_test_rng_normal(&rng);
    /* fresh, then accumulate, rescale, with the packed V filled and then reused */
    const struct { int64_t nt; int fresh, rescale, vpre, vfill; } steps[] = {
        {64, 1, 0, 0, 0}, {23, 0, 0, 0, 0}, {64, 0, 1, 1, 1}, {64, 0, 0, 1, 0}, {64, 0, 1, 0, 0}};
    for (size_t st = 0; st < sizeof steps / sizeof steps[0]; st++) {
        for (int64_t i = 0; i < NT * 16; i++)
            S[i] = (float)numla_test_rng_uniform(&rng, 0.0, 1.0) * (i % 13 == 0 ? 1e-3f : 1.0f);
        numla_mla_amx_begin();
        numla_mla_pv_amx(oh, DC, S, corr, steps[st].fresh, steps[st].rescale, rows, steps[st].nt, pst,
                         steps[st].vpre ? vph : NULL, steps[st].vfill);
        numla_mla_amx_end();
        numla_mla_amx_begin_emulated();
        numla_mla_pv_amx_emulated(oe, DC, S, corr, steps[st].fresh, steps[st].rescale, rows, steps[st].nt, pst,
                                  steps[st].vpre ? vpe : NULL, steps[st].vfill);
        numla_mla_amx_end_emulated();
        char what[64];
        snprintf(what, sizeof what, "mla P·V step %zu", st);
        bad += same_bits(what, oh, oe, (size_t)16 * DC);
    }
    numla_mla_pv_amx_unpermute(oh, 16, DC);
    numla_mla_pv_amx_unpermute(oe, 16, DC);
    bad += same_bits("mla P·V unpermuted", oh, oe, (size_t)16 * DC);
    CU_ASSERT_EQUAL(bad, 0);
    free(cache);
    free(qv);
    free(qlo);
    free(stage);
    free(sh);
    free(se);
    free(S);
    free(oh);
    free(oe);
    free(pst);
    free(vph);
    free(vpe);
}

/* MHA prefill: one query task's scores against a key block and P·V into the accumulator, full
 * and partial (13 queries, 40 keys), V2/V3's head dims. */
static void test_mha(void)
{
    if (!runnable(0))
        return;
    enum { QB = NUMLA_MHA_PREFILL_QB, KB = NUMLA_MHA_PREFILL_KB, D = 192, DV = 128 };
    numla_test_rng rng = {16};
    float *q = rand_x(&rng, QB * D), *k = rand_x(&rng, KB * D), *v = rand_x(&rng, KB * DV);
    uint16_t *qp = aligned_alloc(64, (size_t)QB * D * 2 * 2), *kp = aligned_alloc(64, (size_t)D * KB * 2 * 2);
    uint16_t *vp = aligned_alloc(64, (size_t)KB * DV * 2 * 2), *pp = aligned_alloc(64, (size_t)QB * KB * 2 * 2);
    float *sh = aligned_alloc(64, (size_t)QB * KB * 4), *se = aligned_alloc(64, (size_t)QB * KB * 4);
    float *oh = aligned_alloc(64, (size_t)QB * DV * 4), *oe = aligned_alloc(64, (size_t)QB * DV * 4);
    CU_ASSERT_FATAL(qp && kp && vp && pp && sh && se && oh && oe);
    const float *qrow[QB];
    for (int i = 0; i < QB; i++)
        qrow[i] = q + (size_t)i * D;
    int bad = 0;
    const int32_t cases[][2] = {{QB, KB}, {13, 40}}; /* queries, keys */
    for (size_t c = 0; c < 2; c++) {
        const int32_t nq = cases[c][0], n = cases[c][1];
        numla_mha_prefill_pack_q_amx(qrow, nq, D, qp);
        numla_mha_prefill_pack_k_amx(k, D, n, D, kp);
        numla_mha_prefill_pack_v_amx(v, DV, n, DV, vp);
        numla_amx_tiles_begin();
        numla_mha_prefill_scores_amx(qp, nq, D, kp, sh);
        numla_amx_tiles_end();
        _tile_loadconfig(&numla_amx_tile_config);
        numla_mha_prefill_scores_amx_emulated(qp, nq, D, kp, se);
        _tile_release();
        const size_t rows = (size_t)(nq + 15) / 16 * 16;
        char what[64];
        snprintf(what, sizeof what, "mha scores nq=%d keys=%d", nq, n);
        bad += same_bits(what, sh, se, rows * KB);
        for (int64_t i = 0; i < QB * KB; i++) /* softmax-like weights */
            sh[i] = (float)exp(-fabs(numla_test_rng_normal(&rng)) * 3.0);
        memcpy(se, sh, (size_t)QB * KB * 4);
        for (int64_t i = 0; i < QB * DV; i++)
            oh[i] = oe[i] = (float)numla_test_rng_normal(&rng);
        numla_amx_tiles_begin();
        numla_mha_prefill_pv_amx(sh, nq, vp, DV, pp, oh);
        numla_amx_tiles_end();
        _tile_loadconfig(&numla_amx_tile_config);
        numla_mha_prefill_pv_amx_emulated(se, nq, vp, DV, pp, oe);
        _tile_release();
        snprintf(what, sizeof what, "mha P·V nq=%d keys=%d", nq, n);
        bad += same_bits(what, oh, oe, rows * DV);
    }
    CU_ASSERT_EQUAL(bad, 0);
    free(q);
    free(k);
    free(v);
    free(qp);
    free(kp);
    free(vp);
    free(pp);
    free(sh);
    free(se);
    free(oh);
    free(oe);
}

NUMLA_TEST_SUITE(amx_hardware, NULL, NULL, NUMLA_TEST(test_instructions_bf16), NUMLA_TEST(test_instructions_int8),
                 NUMLA_TEST(test_linear_bf16), NUMLA_TEST(test_qlinear_wide), NUMLA_TEST(test_qlinear_w8a8),
                 NUMLA_TEST(test_qblock), NUMLA_TEST(test_mla), NUMLA_TEST(test_mha))
