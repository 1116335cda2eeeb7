/* kernels/x86/qblock_panel_amx.c — the block encodings in Q8 activation mode on AMX-INT8 tiles,
 * the amx level of kernels/qblock.c when the CPU has AMX-INT8 and VNNI: from
 * NUMLA_QBLOCK_PANEL_MIN_M x rows the panel GEMM of every type but Q6_K
 * (kernels/x86/qblock_panel_avx512vnni.c) and Q6_K's stored panels (below). Fewer x rows
 * (decode) and Q6_K's ROWS layout run the vnni level: the same forward
 * (numla_qblock_forward_vnni_with_), with this file's two rows functions in place of the
 * vpdpbusd ones.
 *
 * The unit test qblock_amx_emu builds this file against the tile emulator
 * (tests/support/amx_emulate.h; NUMLA_AMX_EMULATE renames the entry point) and checks its y bit
 * for bit against the vnni level's on any CPU; amx_hardware checks that the real tiles give the
 * emulated build's bits. Speed: docs/quantization.md.
 *
 * The unpacked panel (numla_qblock_pn_pack_, shared with the vpdpbusd GEMM) stores a 32-column
 * sub-block g of 16 weight rows as eight 64-byte k-quads, byte 64 q + 4 c + b = row c's code at
 * column 4 q + b: exactly a B tile of 8 rows x 64 bytes (K = 32 as 8 quads, N = 16 weight rows),
 * loaded with stride 64. The A tile is 16 x rows x the sub-block's quantized bytes, loaded
 * from the x rows themselves (stride k; a partial last block of x rows from a zero-padded copy).
 * TDPBSUD multiplies A signed (x) by B unsigned (the codes), so C[i][c] = Σ x · q, the exact int32
 * the vpdpbusd GEMM sums for x row i and weight row c; each C row then goes to fp32 through the
 * same functions (numla_qblock_panel_sub_, _group_) in the same order, so y has the vnni level's
 * bits at every M.
 *
 * The K-quants but Q6_K and IQ4_XS, whose sub-block scales are small integers, take them into the
 * weights instead: byte planes per panel and a piece's whole sum in four K = 64 products per plane
 * (numla_qblock_k4_rows_amx_, below); so do Q6_K's stored panels (numla_qblock_q6_rows_amx_).
 * The other types take one tile product per sub-block (their scales are real numbers that differ
 * per weight row, so their sums cannot share a tile): per 16 x rows and sub-block, one A load
 * (tiles 4 and 7 in turn, so a sub-block's x load need not wait for the previous one's
 * products), and per panel of the chunk
 * (NUMLA_QBLOCK_PANEL_NP, each its own C tile 0-3) one B load (tiles 5 and 6 in turn) and one
 * TDPBSUD, the sub-block's products all issued before its C tiles are stored. Sub-blocks go in
 * runs of NUMLA_QBLOCK_AMX_SB: the run's products first, then the fp32 steps per (panel, x row)
 * over the run, the partial sum in a register and the run's scales, mins and Σ x loaded once (2
 * sub-blocks a run measured faster than 1, 4 or 8 on the AMX machine; per-row chains in the same
 * order, so the same bits). */
#include "kernels/qblock_internal.h"

#include <immintrin.h>
#include <string.h>

#include "kernels/x86/amx.h"
#include "kernels/x86/qblock_p16_avx512.h"

/* The emulated test build (NUMLA_AMX_EMULATE: tests/CMakeLists.txt force-includes the tile
 * emulator) gets its own entry point name, so it links next to this file's real build. */
#ifdef NUMLA_AMX_EMULATE
#define NUMLA_QBLOCK_AMX_ENTRY numla_qblock_forward_amx_emulated
void numla_qblock_forward_amx_emulated(const numla_qblock_weight *w, int64_t m, const float *x, int64_t ldx, float *y,
                                       int64_t ldy, int accumulate, void *ws, size_t ws_bytes);
#else
#define NUMLA_QBLOCK_AMX_ENTRY numla_qblock_forward_amx
#endif

/* x rows per A tile, weight rows per panel; sub-blocks per run of tile products in the panel GEMM
 * (their C buffers: NUMLA_QBLOCK_AMX_SB x NUMLA_QBLOCK_PANEL_NP KiB on the stack) */
enum { NUMLA_QBLOCK_AMX_TR = 16, NUMLA_QBLOCK_AMX_SB = 2 };
/* Tile numbers: literals, which the intrinsics paste into the instruction. C tiles are 0 ..
 * NUMLA_QBLOCK_PANEL_NP - 1. */
#define NUMLA_QBLOCK_AMX_A 4  /* the x tile */
#define NUMLA_QBLOCK_AMX_A1 7 /* the panel GEMM's x tile of odd sub-blocks */
#define NUMLA_QBLOCK_AMX_B0 5 /* the panels' code tiles, in turn */
#define NUMLA_QBLOCK_AMX_B1 6
_Static_assert(NUMLA_QBLOCK_PANEL_NP <= NUMLA_QBLOCK_AMX_A, "one C tile per panel of a chunk");

/* Palette 1: C 16 x 64 bytes (16 x 16 int32), A 16 x 32 bytes (K = 32), B 8 x 64 bytes. */
static const numla_amx_tilecfg numla_qblock_amx_cfg_ __attribute__((aligned(64))) = {
    .palette = 1, .colsb = {64, 64, 64, 64, 32, 64, 64, 32}, .rows = {16, 16, 16, 16, 16, 8, 8, 16}};

/* C tile j (a literal, as the intrinsics need) = A · B over the sub-block at codes, stored to c. */
#define NUMLA_QBLOCK_AMX_PRODUCT(J, B, codes, c)                                                                       \
    do {                                                                                                               \
        _tile_zero(J);                                                                                                 \
        _tile_loadd(B, (codes), 64);                                                                                   \
        _tile_dpbsud(J, NUMLA_QBLOCK_AMX_A, B);                                                                        \
        _tile_stored(J, (c), 64);                                                                                      \
    } while (0)

/* One sub-block's products for the np panels: x tile AT (a literal: 4 and 7 in turn, so the next
 * sub-block's load need not wait for this one's products) from xa, panel j's codes at codes + j ·
 * pbytes into C tile j, every product issued before the first store of its C to cs[j]. */
#define NUMLA_QBLOCK_AMX_SUB_(AT, xa, lda, codes, pbytes, np, cs)                                                     \
    do {                                                                                                               \
        _tile_loadd(AT, (xa), (lda));                                                                                  \
        _tile_zero(0);                                                                                                 \
        _tile_loadd(NUMLA_QBLOCK_AMX_B0, (codes), 64);                                                                 \
        _tile_dpbsud(0, AT, NUMLA_QBLOCK_AMX_B0);                                                                      \
        if ((np) > 1) {                                                                                                \
            _tile_zero(1);                                                                                             \
            _tile_loadd(NUMLA_QBLOCK_AMX_B1, (codes) + (pbytes), 64);                                                  \
            _tile_dpbsud(1, AT, NUMLA_QBLOCK_AMX_B1);                                                                  \
        }                                                                                                              \
        if ((np) > 2) {                                                                                                \
            _tile_zero(2);                                                                                             \
            _tile_loadd(NUMLA_QBLOCK_AMX_B0, (codes) + 2 * (pbytes), 64);                                              \
            _tile_dpbsud(2, AT, NUMLA_QBLOCK_AMX_B0);                                                                  \
        }                                                                                                              \
        if ((np) > 3) {                                                                                                \
            _tile_zero(3);                                                                                             \
            _tile_loadd(NUMLA_QBLOCK_AMX_B1, (codes) + 3 * (pbytes), 64);                                              \
            _tile_dpbsud(3, AT, NUMLA_QBLOCK_AMX_B1);                                                                  \
        }                                                                                                              \
        _tile_stored(0, (cs)[0], 64);                                                                                  \
        if ((np) > 1)                                                                                                  \
            _tile_stored(1, (cs)[1], 64);                                                                              \
        if ((np) > 2)                                                                                                  \
            _tile_stored(2, (cs)[2], 64);                                                                              \
        if ((np) > 3)                                                                                                  \
            _tile_stored(3, (cs)[3], 64);                                                                              \
    } while (0)

/* The fp32 steps of a run of cnt sub-blocks (their C tiles in c[0 .. cnt), panel j's at c[.][j]) for
 * panel j and x rows [0, mr): per row, the sub-blocks' numla_qblock_panel_sub_f_ in order into tb
 * (from tbm[i] unless first), then after the group's last one acc[i] = fma(tb, dx[i]) (else tb
 * back to tbm[i]). The same operations on each (row, panel) chain as one sub-block at a time, so
 * the same bits; the chain's partial sum stays in a register over the run, and the sub-blocks'
 * scales, mins and Σ x (bsf[i][.], as floats) are loaded once per run, not per row and panel. */
static inline __attribute__((always_inline)) void
numla_qblock_amx_sub_run_(const int32_t (*c)[NUMLA_QBLOCK_PANEL_NP][NUMLA_QBLOCK_AMX_TR * NUMLA_QBLOCK_AMX_TR],
                          int64_t j, const int cnt, const float *sc, const float *mn, const int64_t *gidx,
                          const float (*bsf)[NUMLA_QBLOCK_AMX_SB], int mr, int first, int last, const float *dx,
                          int64_t nb, __m512 *tbm, __m512 *acc)
{
    __m512 sv[NUMLA_QBLOCK_AMX_SB], mv[NUMLA_QBLOCK_AMX_SB];
    for (int s = 0; s < cnt; s++) {
        sv[s] = _mm512_load_ps(sc + gidx[s] * 16);
        mv[s] = _mm512_load_ps(mn + gidx[s] * 16);
    }
    for (int i = 0; i < mr; i++) {
        __m512 tb = first ? _mm512_setzero_ps() : tbm[i];
#pragma GCC unroll 8
        for (int s = 0; s < cnt; s++)
            tb = numla_qblock_panel_sub_f_(tb, _mm512_load_si512((const void *)(c[s][j] + 16 * i)), sv[s], mv[s],
                                           bsf[i][s]);
        if (last)
            acc[i] = numla_qblock_panel_group_(acc[i], tb, dx[i * nb]);
        else
            tbm[i] = tb;
    }
}

/* x rows [i0, i0 + mr) against the np unpacked panels at pan (weight rows a + 16 j, stopping at
 * ahi); xt: the rows' quantized bytes, 16 rows k apart (rows past mr zero). Per x group, its
 * sub-blocks in runs of up to NUMLA_QBLOCK_AMX_SB: first every tile product of the run (each
 * stored to its own C buffer), then the fp32 steps per panel and row over the run. */
static void numla_qblock_amx_block_(const uint8_t *pan, size_t pbytes, int64_t np, int64_t k, const int8_t *xt,
                                    int mr, const float *dx, const int32_t *bs, int64_t a, int64_t ahi, float *y,
                                    int64_t ldy, int accumulate)
{
    enum { TR = NUMLA_QBLOCK_AMX_TR, SB = NUMLA_QBLOCK_AMX_SB };
    enum { sw = 32, spg = 256 / sw }; /* sub-block columns, sub-blocks per x group */
    const int64_t ng = k / sw, nb = numla_qblock_q8_groups_(k), k16 = k / 16;
    __m512 acc[NUMLA_QBLOCK_PANEL_NP][TR], tbm[NUMLA_QBLOCK_PANEL_NP][TR];
    int32_t c[SB][NUMLA_QBLOCK_PANEL_NP][TR * TR] __attribute__((aligned(64)));
    float bsf[TR][SB];
    int64_t gidx[SB];
    for (int64_t j = 0; j < np; j++)
        for (int i = 0; i < mr; i++)
            acc[j][i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) { /* 256-column x groups (the last one may be shorter) */
        const int64_t gend = spg * b + spg < ng ? spg * b + spg : ng;
        for (int64_t g0 = spg * b; g0 < gend; g0 += SB) { /* a run of its sub-blocks */
            const int cnt = (int)(gend - g0 < SB ? gend - g0 : SB);
            for (int s = 0; s < cnt; s++) {
                const int64_t g = g0 + s;
                gidx[s] = g;
                for (int i = 0; i < mr; i++)
                    bsf[i][s] = (float)(bs[i * k16 + 2 * g] + bs[i * k16 + 2 * g + 1]);
                if (s % 2 == 0)
                    NUMLA_QBLOCK_AMX_SUB_(NUMLA_QBLOCK_AMX_A, xt + sw * g, k, pan + (size_t)g * (size_t)(16 * sw), pbytes,
                                          np, c[s]);
                else
                    NUMLA_QBLOCK_AMX_SUB_(NUMLA_QBLOCK_AMX_A1, xt + sw * g, k, pan + (size_t)g * (size_t)(16 * sw),
                                          pbytes, np, c[s]);
            }
            const int first = g0 == spg * b, last = g0 + cnt == gend;
            for (int64_t j = 0; j < np; j++) {
                const float *sc = (const float *)(const void *)(pan + (size_t)j * pbytes + (size_t)(16 * k));
                if (cnt == SB)
                    numla_qblock_amx_sub_run_((const int32_t(*)[NUMLA_QBLOCK_PANEL_NP][TR * TR])c, j, SB, sc,
                                              sc + ng * 16, gidx, (const float(*)[SB])bsf, mr, first, last, dx + b,
                                              nb, tbm[j], acc[j]);
                else
                    numla_qblock_amx_sub_run_((const int32_t(*)[NUMLA_QBLOCK_PANEL_NP][TR * TR])c, j, cnt, sc,
                                              sc + ng * 16, gidx, (const float(*)[SB])bsf, mr, first, last, dx + b,
                                              nb, tbm[j], acc[j]);
            }
        }
    }
    for (int64_t j = 0; j < np; j++) {
        const int64_t r = a + 16 * j;
        if (r >= ahi)
            break;
        numla_qblock_p16_store_(acc[j], mr, r, ahi, y, ldy, accumulate);
    }
}

static void numla_qblock_k4_rows_amx_(const numla_qblock_weight *w, int64_t lo, int64_t hi, int64_t m,
                                      const int8_t *xq, const float *dx, const int32_t *bs, float *y, int64_t ldy,
                                      int accumulate, void *scratch);

/* numla_qblock_panel_rows_ on tiles: weight rows [lo, hi) against all m quantized x rows (the
 * integer-scale types on their byte planes, below). */
static void numla_qblock_panel_rows_amx_(const numla_qblock_weight *w, int64_t lo, int64_t hi, int64_t m,
                                         const int8_t *xq, const float *dx, const int32_t *bs, float *y, int64_t ldy,
                                         int accumulate, void *scratch)
{
    if (numla_qblock_type_row_get(w->type)->int_scales) {
        numla_qblock_k4_rows_amx_(w, lo, hi, m, xq, dx, bs, y, ldy, accumulate, scratch);
        return;
    }
    const int64_t k = w->k, nb = numla_qblock_q8_groups_(k);
    const size_t pbytes = numla_qblock_pn_panel_bytes_(k);
    uint8_t *pan = (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    uint8_t *buf = pan + numla_qblock_align64_((size_t)NUMLA_QBLOCK_PANEL_NP * pbytes);
    _tile_loadconfig(&numla_qblock_amx_cfg_);
    for (int64_t a = lo; a < hi; a += 16 * NUMLA_QBLOCK_PANEL_NP) {
        const int64_t ahi = a + 16 * NUMLA_QBLOCK_PANEL_NP < hi ? a + 16 * NUMLA_QBLOCK_PANEL_NP : hi;
        const int64_t np = (ahi - a + 15) / 16;
        for (int64_t p = 0; p < np; p++)
            numla_qblock_pn_pack_(w, a + 16 * p, ahi, buf, pan + (size_t)p * pbytes);
        for (int64_t i0 = 0; i0 < m; i0 += NUMLA_QBLOCK_AMX_TR) {
            const int mr = m - i0 < NUMLA_QBLOCK_AMX_TR ? (int)(m - i0) : NUMLA_QBLOCK_AMX_TR;
            const int8_t *xt = xq + i0 * k;
            if (mr < NUMLA_QBLOCK_AMX_TR) { /* an A tile reads 16 rows: the last ones from a padded copy
                                              * in buf (free once the chunk is unpacked) */
                memcpy(buf, xt, (size_t)(mr * k));
                memset(buf + mr * k, 0, (size_t)((NUMLA_QBLOCK_AMX_TR - mr) * k));
                xt = (const int8_t *)buf;
            }
            numla_qblock_amx_block_(pan, pbytes, np, k, xt, mr, dx + i0 * nb, bs + i0 * (k / 16), a, ahi,
                                    y + i0 * ldy, ldy, accumulate);
        }
    }
    _tile_release();
}

/* Q6_K's stored panels [plo, phi) against m >= NUMLA_QBLOCK_PANEL_MIN_M x rows on tiles, with the
 * arithmetic of numla_qblock_p16_q6_tile_ (kernels/x86/qblock_p16_avx512vnni.c): a piece's exact
 * int32 sum Σ_j sc_j Σ (q - 32) x goes to fp32 once,
 *   acc = fma(float(Σ (q - 32) · sc · x), d · dx, acc)
 * the same integers, so the same bits. Its weights' integer values w = (q - 32) · sc (|w| <= 4096,
 * 16-column sub-block scales sc) are split into two byte planes in column order, w = 64 · hi + lo
 * with lo = w & 63 (unsigned) and hi = w >> 6 (signed, -64 .. 61), so the piece's whole sum is
 * four K = 64 products per plane, TDPBSUD on lo and TDPBSSD on hi, instead of one K = 16 product
 * and one int32 scaling step per sub-block; per x row C_lo + 64 C_hi is the piece's sum. Each
 * piece's planes (8 KiB) are made once per run of NUMLA_QBLOCK_AMX_Q6_XB x tiles, which go in
 * pairs (each plane's B tile serving two x tiles); a partial last x tile reads its piece from a
 * zero-padded copy. */
enum { NUMLA_QBLOCK_AMX_Q6_XB = 8 };

/* Palette 1 with every tile 16 rows x 64 bytes (K = 64), for the byte planes (Q6_K's, and the
 * integer-scale types'). */
static const numla_amx_tilecfg numla_qblock_amx_planes_cfg_ __attribute__((aligned(64))) = {
    .palette = 1, .colsb = {64, 64, 64, 64, 64, 64, 64, 64}, .rows = {16, 16, 16, 16, 16, 16, 16, 16}};

/* The piece at pc (one 256-column piece of a stored Q6_K panel) as its two planes: lo and hi, 4 KiB
 * each, k-quad Q (columns 4 Q .. 4 Q + 3, sub-block Q / 4) at 64 Q, byte 4 c + b row c's. */
static void numla_qblock_q6_planes_(const uint8_t *pc, uint8_t *lo, uint8_t *hi)
{
    /* word i of a 64-byte unit holds bytes 2 i and 2 i + 1, both of row i / 2 */
    static const int16_t rows2[32] __attribute__((aligned(64))) = {
        0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15};
    const __m512i idx = _mm512_load_si512((const void *)rows2);
    __m512i scw[16]; /* per sub-block, its rows' scales as words, word i row i / 2's */
    for (int sb = 0; sb < 16; sb++)
        scw[sb] = _mm512_permutexvar_epi16(
            idx, _mm512_castsi256_si512(_mm256_cvtepi8_epi16(
                     _mm_loadu_si128((const __m128i *)(const void *)(pc + NUMLA_QBLOCK_P16_Q6_SC + 16 * sb)))));
    const __m512i off = _mm512_set1_epi16(32), lob = _mm512_set1_epi16(0xFF), m6 = _mm512_set1_epi16(63);
    const __m512i m6h = _mm512_set1_epi16(63 << 8);
    for (int g = 0; g < 16; g++) { /* group (n, v) = (g / 8, g % 8): quads 32 n + 8 s + v */
        __m512i op[4];
        numla_qblock_p16_q6_ops_(pc + 192 * g, op);
        for (int s4 = 0; s4 < 4; s4++) {
            const int q = 32 * (g / 8) + 8 * s4 + g % 8;
            const __m512i sc = scw[q / 4];
            /* the even bytes' and the odd bytes' w as words */
            const __m512i we = _mm512_mullo_epi16(_mm512_sub_epi16(_mm512_and_si512(op[s4], lob), off), sc);
            const __m512i wo = _mm512_mullo_epi16(_mm512_sub_epi16(_mm512_srli_epi16(op[s4], 8), off), sc);
            /* lo: (we & 63) | (wo & 63) << 8; hi: (we >> 6) & 255 | (wo >> 6) << 8 */
            _mm512_store_si512((void *)(lo + 64 * q),
                               _mm512_ternarylogic_epi32(_mm512_and_si512(we, m6), _mm512_slli_epi16(wo, 8), m6h, 0xF8));
            _mm512_store_si512((void *)(hi + 64 * q),
                               _mm512_ternarylogic_epi32(_mm512_slli_epi16(_mm512_srai_epi16(wo, 6), 8),
                                                         _mm512_srai_epi16(we, 6), lob, 0xF8));
        }
    }
}

/* One or two x tiles (a literal TWO) against a piece's planes (256 columns, 4 KiB each; the hi
 * plane only where TWO_PL, a literal, and signed where HS): C tiles 0 (lo) and 1 (hi) for the
 * tile at xa, 2 and 3 for the one at xb, stored to c[0 .. 4). */
#define NUMLA_QBLOCK_AMX_PLANES(TWO, TWO_PL, HS, xa, lda, xb, ldb, lo, hi, c)                                         \
    do {                                                                                                               \
        _tile_zero(0);                                                                                                 \
        if (TWO_PL)                                                                                                    \
            _tile_zero(1);                                                                                             \
        if (TWO) {                                                                                                     \
            _tile_zero(2);                                                                                             \
            if (TWO_PL)                                                                                                \
                _tile_zero(3);                                                                                         \
        }                                                                                                              \
        for (int kq = 0; kq < 4; kq++) {                                                                               \
            _tile_loadd(NUMLA_QBLOCK_AMX_A, (xa) + 64 * kq, (lda));                                                    \
            if (TWO)                                                                                                   \
                _tile_loadd(NUMLA_QBLOCK_AMX_A1, (xb) + 64 * kq, (ldb));                                               \
            _tile_loadd(NUMLA_QBLOCK_AMX_B0, (lo) + 1024 * kq, 64);                                                    \
            _tile_dpbsud(0, NUMLA_QBLOCK_AMX_A, NUMLA_QBLOCK_AMX_B0);                                                  \
            if (TWO)                                                                                                   \
                _tile_dpbsud(2, NUMLA_QBLOCK_AMX_A1, NUMLA_QBLOCK_AMX_B0);                                             \
            if (TWO_PL) {                                                                                              \
                _tile_loadd(NUMLA_QBLOCK_AMX_B1, (hi) + 1024 * kq, 64);                                                \
                if (HS)                                                                                                \
                    _tile_dpbssd(1, NUMLA_QBLOCK_AMX_A, NUMLA_QBLOCK_AMX_B1);                                          \
                else                                                                                                   \
                    _tile_dpbsud(1, NUMLA_QBLOCK_AMX_A, NUMLA_QBLOCK_AMX_B1);                                          \
                if (TWO) {                                                                                             \
                    if (HS)                                                                                            \
                        _tile_dpbssd(3, NUMLA_QBLOCK_AMX_A1, NUMLA_QBLOCK_AMX_B1);                                     \
                    else                                                                                               \
                        _tile_dpbsud(3, NUMLA_QBLOCK_AMX_A1, NUMLA_QBLOCK_AMX_B1);                                     \
                }                                                                                                      \
            }                                                                                                          \
        }                                                                                                              \
        _tile_stored(0, (c)[0], 64);                                                                                   \
        if (TWO_PL)                                                                                                    \
            _tile_stored(1, (c)[1], 64);                                                                               \
        if (TWO) {                                                                                                     \
            _tile_stored(2, (c)[2], 64);                                                                               \
            if (TWO_PL)                                                                                                \
                _tile_stored(3, (c)[3], 64);                                                                           \
        }                                                                                                              \
    } while (0)

static void numla_qblock_q6_rows_amx_(const numla_qblock_weight *w, int64_t plo, int64_t phi, int64_t m,
                                      const int8_t *xq, const float *dx, float *y, int64_t ldy, int accumulate)
{
    enum { TR = NUMLA_QBLOCK_AMX_TR, XB = NUMLA_QBLOCK_AMX_Q6_XB };
    const int64_t k = w->k, nb = k / 256;
    uint8_t lo[64 * 64] __attribute__((aligned(64))), hi[64 * 64] __attribute__((aligned(64)));
    int8_t xpad[TR * 256] __attribute__((aligned(64)));
    int32_t c[4][TR * TR] __attribute__((aligned(64)));
    __m512 acc[XB][TR];
    _tile_loadconfig(&numla_qblock_amx_planes_cfg_);
    for (int64_t p = plo; p < phi; p++) {
        const uint8_t *pan = w->q + p * w->ld;
        for (int64_t r0 = 0; r0 < m; r0 += XB * TR) { /* a run of x tiles */
            const int64_t rend = r0 + XB * TR < m ? r0 + XB * TR : m;
            const int nx = (int)((rend - r0 + TR - 1) / TR);
            for (int t = 0; t < nx; t++)
                for (int i = 0; i < TR; i++)
                    acc[t][i] = _mm512_setzero_ps();
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *pc = pan + b * NUMLA_QBLOCK_P16_SB_Q6K;
                numla_qblock_q6_planes_(pc, lo, hi);
                const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(pc + NUMLA_QBLOCK_P16_Q6_D)));
                for (int t = 0; t < nx; t += 2) {
                    const int two = t + 1 < nx;
                    const int8_t *xa[2];
                    int64_t lda[2];
                    int mr[2];
                    for (int u = 0; u < 1 + two; u++) {
                        const int64_t i0 = r0 + TR * (t + u);
                        mr[u] = m - i0 < TR ? (int)(m - i0) : TR;
                        xa[u] = xq + i0 * k + 256 * b;
                        lda[u] = k;
                        if (mr[u] < TR) { /* only the run's last tile, so never the first of a pair */
                            for (int i = 0; i < TR; i++)
                                if (i < mr[u])
                                    memcpy(xpad + 256 * i, xa[u] + i * k, 256);
                                else
                                    memset(xpad + 256 * i, 0, 256);
                            xa[u] = xpad;
                            lda[u] = 256;
                        }
                    }
                    if (two)
                        NUMLA_QBLOCK_AMX_PLANES(1, 1, 1, xa[0], lda[0], xa[1], lda[1], lo, hi, c);
                    else
                        NUMLA_QBLOCK_AMX_PLANES(0, 1, 1, xa[0], lda[0], xa[0], lda[0], lo, hi, c);
                    for (int u = 0; u < 1 + two; u++) {
                        const int64_t i0 = r0 + TR * (t + u);
                        for (int i = 0; i < mr[u]; i++) {
                            const __m512i tot = _mm512_add_epi32(
                                _mm512_load_si512((const void *)(c[2 * u] + TR * i)),
                                _mm512_slli_epi32(_mm512_load_si512((const void *)(c[2 * u + 1] + TR * i)), 6));
                            acc[t + u][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot),
                                                            _mm512_mul_ps(d, _mm512_set1_ps(dx[(i0 + i) * nb + b])),
                                                            acc[t + u][i]);
                        }
                    }
                }
            }
            for (int t = 0; t < nx; t++) {
                const int64_t i0 = r0 + TR * t;
                const int mr = m - i0 < TR ? (int)(m - i0) : TR;
                numla_qblock_p16_store_(acc[t], mr, 16 * p, w->n, y + i0 * ldy, ldy, accumulate);
            }
        }
    }
    _tile_release();
}

/* The panel GEMM of the types with integer scales (their row's int_scales: Q4_K, Q5_K, Q2_K,
 * IQ4_XS; Q3_K), in the forms of the vnni level (kernels/x86/qblock_p16_avx512.h): per 256-column
 * piece
 *   S = Σ_j sc_j Σ q · x,  Z = Σ_j m_j Σ x,   acc = fma(float(S) · d - float(Z) · dmin, dx, acc)
 * (Q3_K: acc = fma(float(U), d · dx, acc) with its U = Σ_j s_j Σ (c - 4) x), the same integers, so
 * the same bits. The scales go into the weights: an unpacked panel's codes become byte planes
 * (numla_qblock_k4_planes_: Q4_K's and Q5_K's codes, at most 31, as lo = q · (sc & 7) in place of
 * the codes and hi = q · (sc >> 3) beside, at most 217: unsigned; Q2_K's as one plane q · sc;
 * IQ4_XS's w = (c - 128) · s and Q3_K's (c - 4) · s as w & 63 and the signed w >> 6, TDPBSSD), so
 * S is a piece's whole sum, four K = 64 products per plane, where the fp32 panel GEMM takes a
 * product, a C store and an fp32 step per 32-column (16-column) sub-block. Z takes four (eight)
 * vpdpwssd per x row and piece. x tiles go in pairs (each B tile serves two), each pair over
 * every panel of the chunk, the pieces' x sums (word pairs) made once per pair and piece; a
 * partial last x tile reads a zero-padded copy. */

static void numla_qblock_k4_rows_amx_(const numla_qblock_weight *w, int64_t lo, int64_t hi, int64_t m,
                                      const int8_t *xq, const float *dx, const int32_t *bs, float *y, int64_t ldy,
                                      int accumulate, void *scratch)
{
    enum { TR = NUMLA_QBLOCK_AMX_TR, NP = NUMLA_QBLOCK_PANEL_NP };
    const int64_t k = w->k, nb = k / 256, k16 = k / 16;
    const int s16 = numla_qblock_pn_s16_(w->type);
    const int kind = numla_qblock_type_row_get(w->type)->int_scales, q3 = kind == NUMLA_QBLOCK_FORM_Q3;
    const size_t pbytes = numla_qblock_pn_panel_bytes_(k);
    uint8_t *pan = (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    uint8_t *buf = pan + numla_qblock_align64_((size_t)NP * pbytes);
    uint8_t *hip = buf + numla_qblock_align64_((size_t)(16 * k)); /* NP hi planes of 16 k bytes */
    int32_t c[4][TR * TR] __attribute__((aligned(64)));
    int32_t xp[2 * TR][8];
    __m512 acc[NP][2 * TR];
    _tile_loadconfig(&numla_qblock_amx_planes_cfg_);
    for (int64_t a = lo; a < hi; a += 16 * NP) {
        const int64_t ahi = a + 16 * NP < hi ? a + 16 * NP : hi;
        const int64_t np = (ahi - a + 15) / 16;
        for (int64_t p = 0; p < np; p++) {
            numla_qblock_pn_pack_(w, a + 16 * p, ahi, buf, pan + (size_t)p * pbytes);
            numla_qblock_k4_planes_(pan + (size_t)p * pbytes, k, hip + (size_t)p * (size_t)(16 * k), kind);
        }
        for (int64_t t0 = 0; t0 < m; t0 += 2 * TR) { /* a pair of x tiles (the last may be one) */
            const int two = t0 + TR < m;
            const int8_t *xa[2];
            int64_t lda[2];
            int mr[2] = {0, 0};
            for (int u = 0; u < 1 + two; u++) {
                const int64_t i0 = t0 + TR * u;
                mr[u] = m - i0 < TR ? (int)(m - i0) : TR;
                xa[u] = xq + i0 * k;
                lda[u] = k;
                if (mr[u] < TR) { /* the last tile: its rows from a zero-padded copy in buf (free
                                   * once the chunk is unpacked) */
                    memcpy(buf, xa[u], (size_t)(mr[u] * k));
                    memset(buf + mr[u] * k, 0, (size_t)((TR - mr[u]) * k));
                    xa[u] = (const int8_t *)buf;
                }
            }
            const int rows = mr[0] + mr[1];
            for (int64_t j = 0; j < np; j++)
                for (int i = 0; i < rows; i++)
                    acc[j][i] = _mm512_setzero_ps();
            for (int64_t b = 0; b < nb; b++) {
                for (int i = 0; !q3 && i < rows; i++) {
                    if (s16)
                        numla_qblock_k16_xpairs_(bs + (t0 + i) * k16 + 16 * b, xp[i]);
                    else
                        numla_qblock_k4_xpairs_(bs + (t0 + i) * k16 + 16 * b, xp[i]);
                }
                for (int64_t j = 0; j < np; j++) {
                    const uint8_t *lo_b = pan + (size_t)j * pbytes + 4096 * b;
                    const uint8_t *hi_b = hip + (size_t)j * (size_t)(16 * k) + 4096 * b;
                    /* the literals each kind takes */
#define NUMLA_QBLOCK_AMX_K4_(TWO_PL, HS)                                                                               \
    do {                                                                                                               \
        if (two)                                                                                                       \
            NUMLA_QBLOCK_AMX_PLANES(1, TWO_PL, HS, xa[0] + 256 * b, lda[0], xa[1] + 256 * b, lda[1], lo_b, hi_b, c);   \
        else                                                                                                           \
            NUMLA_QBLOCK_AMX_PLANES(0, TWO_PL, HS, xa[0] + 256 * b, lda[0], xa[0] + 256 * b, lda[0], lo_b, hi_b, c);   \
    } while (0)
                    if (kind == NUMLA_QBLOCK_FORM_K4)
                        NUMLA_QBLOCK_AMX_K4_(1, 0);
                    else if (kind == NUMLA_QBLOCK_FORM_IQ4 || kind == NUMLA_QBLOCK_FORM_Q3)
                        NUMLA_QBLOCK_AMX_K4_(1, 1);
                    else
                        NUMLA_QBLOCK_AMX_K4_(0, 0);
#undef NUMLA_QBLOCK_AMX_K4_
                    const float *pa = (const float *)(const void *)(pan + (size_t)j * pbytes + (size_t)(16 * k)) +
                                      b * NUMLA_QBLOCK_K4_PIECE_FLOATS;
                    const __m512 d = _mm512_load_ps(pa + NUMLA_QBLOCK_K4_D);
                    const __m512 dmin = _mm512_load_ps(pa + NUMLA_QBLOCK_K4_DMIN);
                    __m512i mp[8];
                    for (int q = 0; !q3 && q < (s16 ? 8 : 4); q++)
                        mp[q] = _mm512_load_si512(
                            (const void *)(pa + (s16 ? NUMLA_QBLOCK_K16_MP : NUMLA_QBLOCK_K4_MP) + 16 * q));
                    for (int u = 0; u < 1 + two; u++)
                        for (int i = 0; i < mr[u]; i++) {
                            const int r = TR * u + i;
                            __m512i S = _mm512_load_si512((const void *)(c[2 * u] + TR * i));
                            if (kind != NUMLA_QBLOCK_FORM_Q2) /* the hi plane weighs 8 (64 where signed) */
                                S = _mm512_add_epi32(S, _mm512_slli_epi32(
                                                            _mm512_load_si512((const void *)(c[2 * u + 1] + TR * i)),
                                                            kind == NUMLA_QBLOCK_FORM_K4 ? 3 : 6));
                            if (q3) { /* Q3_K's form: S is its U */
                                acc[j][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S),
                                                            _mm512_mul_ps(d, _mm512_set1_ps(dx[(t0 + r) * nb + b])),
                                                            acc[j][r]);
                                continue;
                            }
                            const __m512i Z = s16 ? numla_qblock_k16_z_(mp, xp[r]) : numla_qblock_k4_z_(mp, xp[r]);
                            if (kind == NUMLA_QBLOCK_FORM_IQ4) /* the vnni level's S counts the codes' + 128 */
                                S = _mm512_add_epi32(S, _mm512_slli_epi32(Z, 7));
                            acc[j][r] = numla_qblock_k4_piece_(acc[j][r], S, Z, d, dmin, dx[(t0 + r) * nb + b]);
                        }
                }
            }
            for (int64_t j = 0; j < np; j++)
                for (int u = 0; u < 1 + two; u++)
                    numla_qblock_p16_store_(acc[j] + TR * u, mr[u], a + 16 * j, ahi, y + (t0 + TR * u) * ldy, ldy,
                                            accumulate);
        }
    }
    _tile_release();
}

/* The stored panels: Q6_K's from NUMLA_QBLOCK_PANEL_MIN_M rows on tiles, the rest the vnni kernels. */
static void numla_qblock_p16_rows_amx_(const numla_qblock_weight *w, int64_t plo, int64_t phi, int64_t m,
                                       const int8_t *xq, const float *dx, const int32_t *bs, float *y, int64_t ldy,
                                       int accumulate)
{
    if (w->type == NUMLA_QBLOCK_Q6_K && m >= NUMLA_QBLOCK_PANEL_MIN_M)
        numla_qblock_q6_rows_amx_(w, plo, phi, m, xq, dx, y, ldy, accumulate);
    else
        numla_qblock_p16_rows_(w, plo, phi, m, xq, dx, bs, y, ldy, accumulate);
}

void NUMLA_QBLOCK_AMX_ENTRY(const numla_qblock_weight *w, int64_t m, const float *x, int64_t ldx, float *y,
                            int64_t ldy, int accumulate, void *ws, size_t ws_bytes)
{
    numla_qblock_forward_vnni_with_(w, m, x, ldx, y, ldy, accumulate, ws, ws_bytes, numla_qblock_panel_rows_amx_,
                                    numla_qblock_p16_rows_amx_);
}
