/* tests/support/amx_emulate.h — a test-only emulator of the AMX tile intrinsics, so an AMX
 * kernel's tile logic runs (slowly) on a CPU without AMX. Never part of a production build:
 * tests/CMakeLists.txt force-includes it (-include) into a test build of a kernel file,
 * compiled with -DNUMLA_AMX_EMULATE, and into the tests that check it.
 *
 * It includes <immintrin.h> (the kernel's AVX-512 code still runs natively) and then replaces
 * the tile intrinsics with C over a thread-local tile register file, with the architectural
 * semantics of the Intel SDM (vol. 2, LDTILECFG, TILELOADD, TILESTORED, TILEZERO, TDPB[SU]{2}D,
 * TILERELEASE):
 *   - _tile_loadconfig reads the 64-byte TILECFG (palette 1: colsb[0..7] at byte 16, rows[0..7]
 *     at byte 48) and zeroes every tile; palette 0 releases. A bad configuration (rows > 16,
 *     colsb > 64, rows == 0 xor colsb == 0, reserved bytes set) faults, as #GP does.
 *   - _tile_loadd(t, base, stride): rows[t] rows of colsb[t] bytes from base + r·stride; the
 *     rest of the tile zeroed. _tile_stored writes rows[t] x colsb[t] bytes. _tile_zero.
 *   - _tile_dpbssd(c, a, b) (and dpbsud, dpbusd, dpbuud): M = rows[c], N = colsb[c] / 4,
 *     K = colsb[a] / 4; needs rows[a] = M, rows[b] = K, colsb[b] = colsb[c], distinct tiles;
 *       C[m][n] += Σ_{k<K} Σ_{b<4} ext(A[m][4k+b]) · ext(B[k][4n+b])
 *     with ext sign or zero extension per the mnemonic's s/u letters, int32 wrap-around.
 *   - _tile_dpbf16ps(c, a, b): the same shapes, each 32-bit element a pair of bf16. The SDM's
 *     current pseudo-code (TDPBF16PS, "Operation"), not the older one of the intrinsics guide
 *     (which adds each product straight into C): per C element, two fp32 partial sums start at
 *     0, even = FMA(A[m][2k], B[k][2n], even) and odd = FMA(A[m][2k+1], B[k][2n+1], odd) for
 *     k = 0, 1, ...; then C[m][n] = C[m][n] + (even + odd). Every step is one fp32 rounding to
 *     nearest even with DAZ = FTZ = 1: denormal inputs (bf16 or C) read as zero, denormal
 *     results are flushed to zero; MXCSR is not used.
 *   - Any tile instruction before a configuration, or on a tile its shape does not allow, faults
 *     (the emulator prints what and aborts: the hardware raises #UD or #GP).
 * Every TDPB*D and TDPBF16PS adds one to numla_amx_emu_dp_ops (all threads), so a test can check that a
 * kernel ran its tile path and how many tile products it took.
 *
 * The state is defined in exactly one translation unit, the one that defines
 * NUMLA_AMX_EMU_DEFINE before including this header (the emulator's unit test). */
#ifndef NUMLA_TESTS_SUPPORT_AMX_EMULATE_H
#define NUMLA_TESTS_SUPPORT_AMX_EMULATE_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NUMLA_AMX_EMU_TILES = 8, NUMLA_AMX_EMU_ROWS = 16, NUMLA_AMX_EMU_COLSB = 64 };

typedef struct numla_amx_emu_state {
    int configured;
    uint16_t colsb[NUMLA_AMX_EMU_TILES];
    uint8_t rows[NUMLA_AMX_EMU_TILES];
    uint8_t t[NUMLA_AMX_EMU_TILES][NUMLA_AMX_EMU_ROWS][NUMLA_AMX_EMU_COLSB];
} numla_amx_emu_state;

/* The calling thread's tile file. A function, not the thread-local object itself: gcc 12's
 * -fsanitize=null check on the object's address inlined into the kernels passed the checker 0
 * (a false "member access within null pointer" in the sanitizer build). */
numla_amx_emu_state *numla_amx_emu_self(void);
extern long numla_amx_emu_dp_ops; /* atomic adds */

#ifdef NUMLA_AMX_EMU_DEFINE
static _Thread_local numla_amx_emu_state numla_amx_emu_;
__attribute__((noinline)) numla_amx_emu_state *numla_amx_emu_self(void) { return &numla_amx_emu_; }
long numla_amx_emu_dp_ops;
#endif

static inline void numla_amx_emu_fault_(const char *op, int t, const char *why)
{
    fprintf(stderr, "amx emulator: %s on tile %d: %s\n", op, t, why);
    abort();
}

static inline numla_amx_emu_state *numla_amx_emu_tile_(const char *op, int t)
{
    numla_amx_emu_state *s = numla_amx_emu_self();
    if (!s->configured)
        numla_amx_emu_fault_(op, t, "tiles not configured (no LDTILECFG)");
    if (t < 0 || t >= NUMLA_AMX_EMU_TILES)
        numla_amx_emu_fault_(op, t, "no such tile");
    if (s->rows[t] == 0)
        numla_amx_emu_fault_(op, t, "tile not configured (0 rows)");
    return s;
}

static inline void numla_amx_emu_loadconfig(const void *cfg)
{
    const uint8_t *c = cfg;
    numla_amx_emu_state *s = numla_amx_emu_self();
    memset(s, 0, sizeof *s);
    if (c[0] == 0)
        return; /* palette 0: the init state */
    if (c[0] != 1)
        numla_amx_emu_fault_("ldtilecfg", -1, "palette is not 0 or 1");
    for (int i = 1; i < 16; i++) /* start_row must be 0 (nothing here restarts) and reserved */
        if (c[i])
            numla_amx_emu_fault_("ldtilecfg", -1, "start_row or reserved bytes 1-15 not zero");
    for (int t = 0; t < 16; t++) {
        const uint16_t colsb = (uint16_t)(c[16 + 2 * t] | c[17 + 2 * t] << 8);
        const uint8_t rows = c[48 + t];
        if (t >= NUMLA_AMX_EMU_TILES) {
            if (colsb || rows)
                numla_amx_emu_fault_("ldtilecfg", t, "palette 1 has 8 tiles");
            continue;
        }
        if (rows > NUMLA_AMX_EMU_ROWS || colsb > NUMLA_AMX_EMU_COLSB || (rows == 0) != (colsb == 0))
            numla_amx_emu_fault_("ldtilecfg", t, "rows > 16, colsb > 64, or only one of them 0");
        s->rows[t] = rows;
        s->colsb[t] = colsb;
    }
    s->configured = 1;
}

static inline void numla_amx_emu_release(void) { memset(numla_amx_emu_self(), 0, sizeof(numla_amx_emu_state)); }

static inline void numla_amx_emu_zero(int t)
{
    numla_amx_emu_state *s = numla_amx_emu_tile_("tilezero", t);
    memset(s->t[t], 0, sizeof s->t[t]);
}

static inline void numla_amx_emu_loadd(int t, const void *base, long stride)
{
    numla_amx_emu_state *s = numla_amx_emu_tile_("tileloadd", t);
    memset(s->t[t], 0, sizeof s->t[t]);
    for (int r = 0; r < s->rows[t]; r++)
        memcpy(s->t[t][r], (const uint8_t *)base + (long)r * stride, s->colsb[t]);
}

static inline void numla_amx_emu_stored(int t, void *base, long stride)
{
    numla_amx_emu_state *s = numla_amx_emu_tile_("tilestored", t);
    for (int r = 0; r < s->rows[t]; r++)
        memcpy((uint8_t *)base + (long)r * stride, s->t[t][r], s->colsb[t]);
}

/* TDPB{a_signed ? S : U}{b_signed ? S : U}D c, a, b. */
static inline void numla_amx_emu_dp(int c, int a, int b, int a_signed, int b_signed)
{
    numla_amx_emu_state *s = numla_amx_emu_tile_("tdpb*d", c);
    numla_amx_emu_tile_("tdpb*d (A)", a);
    numla_amx_emu_tile_("tdpb*d (B)", b);
    if (a == b || a == c || b == c)
        numla_amx_emu_fault_("tdpb*d", c, "tiles not distinct");
    const int M = s->rows[c], N = s->colsb[c] / 4, K = s->colsb[a] / 4;
    if (s->colsb[c] % 4 || s->colsb[a] % 4 || s->rows[a] != M || s->rows[b] != K ||
        s->colsb[b] != s->colsb[c])
        numla_amx_emu_fault_("tdpb*d", c, "A, B and C shapes do not fit (M x 4K, K x 4N, M x 4N)");
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            uint32_t acc;
            memcpy(&acc, &s->t[c][m][4 * n], 4);
            for (int k = 0; k < K; k++)
                for (int i = 0; i < 4; i++) {
                    const uint8_t x = s->t[a][m][4 * k + i], y = s->t[b][k][4 * n + i];
                    const int32_t xa = a_signed ? (int32_t)(int8_t)x : (int32_t)x;
                    const int32_t yb = b_signed ? (int32_t)(int8_t)y : (int32_t)y;
                    acc += (uint32_t)(xa * yb); /* |product| <= 2^15: no overflow before the wrap */
                }
            memcpy(&s->t[c][m][4 * n], &acc, 4);
        }
    for (int m = 0; m < NUMLA_AMX_EMU_ROWS; m++) /* past the shape: zeroed, as the SDM writes */
        memset(&s->t[c][m][m < M ? 4 * N : 0], 0, (size_t)(NUMLA_AMX_EMU_COLSB - (m < M ? 4 * N : 0)));
    __atomic_fetch_add(&numla_amx_emu_dp_ops, 1, __ATOMIC_RELAXED);
}

/* One fp32 value as the AMX-BF16 unit reads it and writes it (DAZ, FTZ): a denormal is a zero
 * of its sign. */
static inline float numla_amx_emu_ftz_(float v)
{
    return fpclassify(v) == FP_SUBNORMAL ? copysignf(0.0f, v) : v;
}

static inline float numla_amx_emu_bf16_(const uint8_t *p)
{
    const uint32_t u = (uint32_t)(p[0] | p[1] << 8) << 16;
    float f;
    memcpy(&f, &u, 4);
    return numla_amx_emu_ftz_(f);
}

/* TDPBF16PS c, a, b (the SDM's current pseudo-code: see the header comment). fmaf is the exact
 * fused multiply-add rounded once, whatever the compiler's contraction settings. */
static inline void numla_amx_emu_dpbf16ps(int c, int a, int b)
{
    numla_amx_emu_state *s = numla_amx_emu_tile_("tdpbf16ps", c);
    numla_amx_emu_tile_("tdpbf16ps (A)", a);
    numla_amx_emu_tile_("tdpbf16ps (B)", b);
    if (a == b || a == c || b == c)
        numla_amx_emu_fault_("tdpbf16ps", c, "tiles not distinct");
    const int M = s->rows[c], N = s->colsb[c] / 4, K = s->colsb[a] / 4;
    if (s->colsb[c] % 4 || s->colsb[a] % 4 || s->rows[a] != M || s->rows[b] != K ||
        s->colsb[b] != s->colsb[c])
        numla_amx_emu_fault_("tdpbf16ps", c, "A, B and C shapes do not fit (M x 4K, K x 4N, M x 4N)");
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            float even = 0.0f, odd = 0.0f, acc;
            for (int k = 0; k < K; k++) {
                even = numla_amx_emu_ftz_(fmaf(numla_amx_emu_bf16_(&s->t[a][m][4 * k]),
                                               numla_amx_emu_bf16_(&s->t[b][k][4 * n]), even));
                odd = numla_amx_emu_ftz_(fmaf(numla_amx_emu_bf16_(&s->t[a][m][4 * k + 2]),
                                              numla_amx_emu_bf16_(&s->t[b][k][4 * n + 2]), odd));
            }
            memcpy(&acc, &s->t[c][m][4 * n], 4);
            const float pair = numla_amx_emu_ftz_(even + odd);
            acc = numla_amx_emu_ftz_(numla_amx_emu_ftz_(acc) + pair);
            memcpy(&s->t[c][m][4 * n], &acc, 4);
        }
    for (int m = 0; m < NUMLA_AMX_EMU_ROWS; m++) /* past the shape: zeroed, as the SDM writes */
        memset(&s->t[c][m][m < M ? 4 * N : 0], 0, (size_t)(NUMLA_AMX_EMU_COLSB - (m < M ? 4 * N : 0)));
    __atomic_fetch_add(&numla_amx_emu_dp_ops, 1, __ATOMIC_RELAXED);
}

#undef _tile_loadd
#undef _tile_stream_loadd
#undef _tile_stored
#undef _tile_zero
#undef _tile_dpbssd
#undef _tile_dpbsud
#undef _tile_dpbusd
#undef _tile_dpbuud
#undef _tile_dpbf16ps
#undef _tile_loadconfig
#undef _tile_release
#define _tile_loadconfig(cfg) numla_amx_emu_loadconfig(cfg)
#define _tile_release() numla_amx_emu_release()
#define _tile_loadd(t, base, stride) numla_amx_emu_loadd((t), (base), (long)(stride))
#define _tile_stream_loadd(t, base, stride) numla_amx_emu_loadd((t), (base), (long)(stride))
#define _tile_stored(t, base, stride) numla_amx_emu_stored((t), (base), (long)(stride))
#define _tile_zero(t) numla_amx_emu_zero(t)
#define _tile_dpbssd(c, a, b) numla_amx_emu_dp((c), (a), (b), 1, 1)
#define _tile_dpbsud(c, a, b) numla_amx_emu_dp((c), (a), (b), 1, 0)
#define _tile_dpbusd(c, a, b) numla_amx_emu_dp((c), (a), (b), 0, 1)
#define _tile_dpbuud(c, a, b) numla_amx_emu_dp((c), (a), (b), 0, 0)
#define _tile_dpbf16ps(c, a, b) numla_amx_emu_dpbf16ps((c), (a), (b))

#endif
