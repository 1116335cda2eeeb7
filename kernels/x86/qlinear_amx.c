/* kernels/x86/qlinear_amx.c — W8A8 int8 linear layers on AMX-INT8 tiles (TDPBSSD), the amx
 * level of kernels/qlinear.c when the CPU has AMX-INT8 (NUMLA_CPU_AMX_INT8) and
 * numla_qlinear_amx_applies (M >= NUMLA_QLINEAR_AMX_MIN_M, N >= 16); smaller M or N run the
 * VNNI variant, called directly.
 *
 * The unit test qlinear_amx_emu builds this file against the tile emulator
 * tests/support/amx_emulate.h (NUMLA_AMX_EMULATE, which also renames the entry point so both
 * builds link into numla_unit) and checks it bit for bit against the ref level on any CPU;
 * amx_hardware checks that the real tiles give the emulated build's bits. Speed:
 * docs/linear.md.
 *
 * It computes Yᵀ = W · Xᵀ, so the packed weights (kernels/qlinear_internal.h: (n, kp) int8,
 * kp a multiple of 64, rows 64-byte aligned) are the A operand as they are, with no repacking:
 * an A tile is 16 weight rows x 64 k, loaded with stride kp.
 * B operand: x quantized per row by the rule of kernels/qlinear.h (the shared vector quantizer,
 * kernels/x86/qlinear_quant_avx512.h) and stored as s8 — TDPBSSD multiplies s8 by s8, so no
 * row-sum correction as in the u8 x s8 VNNI path — straight into B tiles in the workspace:
 * for 16-row block mb and 64-k block c, one 1 KiB tile of 16 k-quads x (16 rows x 4 bytes),
 *   B[kk][4·mm + b] = q[16·mb + mm][64·c + 4·kk + b],   zero rows past M,
 * so a B tile load is one sequential 1 KiB (stride 64); a 16-row block is packed at once, each
 * row's 64 bytes of a k-block one vector and a 16 x 16 transpose of 4-byte words making them
 * the tile's rows (one 1 KiB store instead of a scatter per 16 values).
 * C tiles are 16 (n) x 16 (m) int32; the int32 sums are exact, and each
 * y[m][n] = numla_qlinear_w8a8_out(acc, sx[m], s[n]) in the same fp32 steps, so y is
 * bit-identical to the ref and VNNI levels.
 *
 * Tails: rows of x past M are zero in B (their C columns are not stored). An N that is not a
 * multiple of 16 gets its last A tile from rows [N - 16, N), overlapping the block before it,
 * and stores only the rows that block did not (so no tile reads past the weights).
 *
 * Register blocking: 4 accumulators C (2 weight-row tiles x 2 x-row tiles: 32 n x 32 m), A in
 * tiles 4/5, B in 6/7: per 64-k block, 4 tile loads for 4 TDPBSSD. The next k-block's A rows
 * (16 strided lines per tile) are prefetched into L1 while the current one computes; B tiles
 * are sequential.
 * Cache blocking: threads split N in pairs of 16-row weight blocks. A thread runs its x rows in
 * chunks of NUMLA_QLINEAR_AMX_X_BYTES of packed x (all 512 rows up to K = 2048), and per chunk
 * its weight-row pairs in order, each over all of the chunk's rows and all of K: the pair's
 * 32 x kp weights come from memory once per chunk and from L2 for the chunk's other x rows,
 * and the chunk's packed x stays in L2 across the pairs. C stays in the tiles over all of K
 * (the int32 sums are converted once), so there is no K blocking.
 * Epilogue per C tile: stored to a stack scratch, scaled per n row with the 16 x scales
 * (vector fp32, the contract's order), transposed by gathers into y's rows. */
#include <immintrin.h>
#include <omp.h>

#include "kernels/qlinear_internal.h"
#include "kernels/x86/amx.h"
#include "kernels/x86/amx_int8_block.h"
#include "kernels/x86/amx_tile_out.h"
#include "kernels/x86/qlinear_quant_avx512.h"
#include "kernels/x86/transpose16_avx512.h"

/* The emulated test build (NUMLA_AMX_EMULATE: tests/CMakeLists.txt force-includes the tile
 * emulator) gets its own entry point name, so it links next to this file's real build. */
#ifdef NUMLA_AMX_EMULATE
#define NUMLA_QLINEAR_AMX_ENTRY numla_qlinear_forward_amx_emulated
void numla_qlinear_forward_amx_emulated(const numla_qlinear_weight *w, int64_t m, const float *x,
                                        int64_t ldx, float *y, int64_t ldy, int accumulate,
                                        void *workspace);
#else
#define NUMLA_QLINEAR_AMX_ENTRY numla_qlinear_forward_amx
#endif

enum {
    TR = 16,               /* rows of a tile */
    TKB = 64,              /* int8 k values (bytes) per tile row */
    TILE_BYTES = TR * TKB, /* one 1 KiB tile */
};

/* Quantizes x rows [i0, i0 + 16) (16-row block i0 / 16; rows past m zero) into their B tiles
 * (kb k-blocks), their scales into sx. Per 64-k block each row's 64 bytes (16 k-quads) are one
 * vector; a 16 x 16 transpose of 4-byte words makes them the tile's 16 k-quad rows, stored as
 * one sequential 1 KiB. The bytes are the per-row quantizer's, wherever they are written. */
static void numla_qlinear_amx_pack_block_(const float *x, int64_t ldx, int64_t k, int64_t kb, int64_t m, int64_t i0,
                                          int8_t *xb, float *sx)
{
    __m512 vinv[TR];
    const int nr = (int)(m - i0 < TR ? m - i0 : TR);
    for (int r = 0; r < nr; r++) {
        float inv;
        sx[i0 + r] = numla_qlinear_row_scale_avx512(x + (i0 + r) * ldx, k, &inv);
        vinv[r] = _mm512_set1_ps(inv);
    }
    int8_t *blk = xb + (size_t)(i0 / TR) * (size_t)kb * TILE_BYTES;
    for (int64_t c = 0; c < kb * TKB; c += TKB) {
        __m512i v[TR];
        for (int r = 0; r < TR; r++) {
            if (r >= nr) {
                v[r] = _mm512_setzero_si512();
                continue;
            }
            const float *xr = x + (i0 + r) * ldx;
            __m512i q = _mm512_castsi128_si512(numla_qlinear_quant16_avx512(xr + c, numla_qlinear_mask16(k, c), vinv[r]));
            q = _mm512_inserti32x4(q, numla_qlinear_quant16_avx512(xr + c + 16, numla_qlinear_mask16(k, c + 16), vinv[r]), 1);
            q = _mm512_inserti32x4(q, numla_qlinear_quant16_avx512(xr + c + 32, numla_qlinear_mask16(k, c + 32), vinv[r]), 2);
            v[r] = _mm512_inserti32x4(q, numla_qlinear_quant16_avx512(xr + c + 48, numla_qlinear_mask16(k, c + 48), vinv[r]), 3);
        }
        numla_x86_transpose16(v); /* v[kk]: k-quad kk of the 16 rows */
        int8_t *t = blk + (size_t)(c / TKB) * TILE_BYTES;
        for (int kk = 0; kk < TR; kk++)
            _mm512_store_si512((void *)(t + kk * TKB), v[kk]);
    }
}

/* y[m0 + j][n0 + r] for r in [skip, 16), j < mc, from acc (16 n x 16 m int32): the contract's
 * (float)acc · sx[m] · s[n] (+ y0), each step one fp32 rounding as numla_qlinear_w8a8_out. */
static void numla_qlinear_amx_out_(const int32_t *acc, int64_t n0, int skip, int64_t m0, int mc,
                                   const float *sx, const float *s, float *y, int64_t ldy,
                                   int accumulate)
{
    float t[TR * TR] __attribute__((aligned(64)));
    const __m512 vsx = _mm512_maskz_loadu_ps(numla_qlinear_mask16(mc, 0), sx + m0);
    for (int r = skip; r < TR; r++) {
        __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512((const void *)(acc + r * TR))), vsx);
        v = _mm512_mul_ps(v, _mm512_set1_ps(s[n0 + r]));
        _mm512_store_ps(t + r * TR, v);
    }
    numla_amx_tile_to_rows(t, n0, skip, m0, mc, y, ldy, accumulate);
}

/* The epilogue's out (numla_amx_blocks_out): tile (j, h) of the int32 sums into y. */
typedef struct {
    int32_t (*c)[TR * TR];
    const float *sx, *s;
    float *y;
    int64_t ldy;
    int accumulate;
} numla_qlinear_amx_outs;

static void numla_qlinear_amx_tile_out_(void *ctx, int j, int64_t h, int64_t n0, int skip, int64_t m0, int mc)
{
    const numla_qlinear_amx_outs *o = ctx;
    numla_qlinear_amx_out_(o->c[2 * j + h], n0, skip, m0, mc, o->sx, o->s, o->y, o->ldy, o->accumulate);
}

/* Weight blocks [b0, b1) x x rows [i0, i1) (i0 a multiple of 16). */
static void numla_qlinear_amx_range_(const numla_qlinear_weight *w, const int8_t *xb, const float *sx,
                                     int64_t m, int64_t i0, int64_t i1, int64_t b0, int64_t b1,
                                     float *y, int64_t ldy, int accumulate)
{
    int32_t c[4][TR * TR] __attribute__((aligned(64)));
    numla_qlinear_amx_outs out = {c, sx, w->scales, y, ldy, accumulate};
    const int64_t kp = w->kp, kb = kp / TKB;
    for (int64_t b = b0; b < b1; b += 2) {
        const int nn = b + 1 < b1 ? 2 : 1;
        int64_t r[2];
        const int8_t *a[2];
        for (int j = 0; j < nn; j++) {
            r[j] = numla_amx_block_row0(b + j, w->n);
            a[j] = w->q + r[j] * kp;
        }
        if (nn == 1)
            a[1] = a[0];
        for (int64_t i = i0; i < i1; i += 2 * TR) {
            const int nm = i + TR < i1 ? 2 : 1;
            const int8_t *bx0 = xb + (size_t)(i / TR) * (size_t)kb * TILE_BYTES;
            const int8_t *bx1 = bx0 + (size_t)kb * TILE_BYTES;
            if (nn == 2 && nm == 2)
                numla_amx_int8_block(2, 2, a[0], a[1], kp, bx0, bx1, kb, c);
            else if (nn == 2)
                numla_amx_int8_block(2, 1, a[0], a[1], kp, bx0, bx1, kb, c);
            else if (nm == 2)
                numla_amx_int8_block(1, 2, a[0], a[1], kp, bx0, bx1, kb, c);
            else
                numla_amx_int8_block(1, 1, a[0], a[1], kp, bx0, bx1, kb, c);
            numla_amx_blocks_out(b, r, nn, i, m, nm, numla_qlinear_amx_tile_out_, &out);
        }
    }
}

void NUMLA_QLINEAR_AMX_ENTRY(const numla_qlinear_weight *w, int64_t m, const float *x, int64_t ldx,
                             float *y, int64_t ldy, int accumulate, void *workspace)
{
    if (!numla_qlinear_amx_applies(w, m)) {
        numla_qlinear_forward_avx512vnni(w, m, x, ldx, y, ldy, accumulate, workspace);
        return;
    }
    int8_t *xb = (int8_t *)numla_qlinear_ws_xq(workspace);
    float *sx = numla_qlinear_ws_sx(workspace, w, m);
    const int64_t kb = w->kp / TKB, m16 = (m + TR - 1) / TR * TR;
    const int64_t blocks = (w->n + TR - 1) / TR, pairs = (blocks + 1) / 2;
    int64_t chunk = NUMLA_QLINEAR_AMX_X_BYTES / w->kp / (2 * TR) * (2 * TR);
    if (chunk < 2 * TR)
        chunk = 2 * TR;
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int64_t i = 0; i < m16; i += TR)
            numla_qlinear_amx_pack_block_(x, ldx, w->k, kb, m, i, xb, sx);
        /* The shared configuration (16 x 64-byte tiles), loaded here rather than through
         * numla_amx_tiles_begin so that the emulated build runs the same instructions. */
        _tile_loadconfig(&numla_amx_tile_config);
        int64_t lo, hi;
        numla_qlinear_split(pairs, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
        const int64_t b1 = 2 * hi < blocks ? 2 * hi : blocks;
        for (int64_t i = 0; i < m && 2 * lo < b1; i += chunk)
            numla_qlinear_amx_range_(w, xb, sx, m, i, i + chunk < m ? i + chunk : m, 2 * lo, b1, y,
                                     ldy, accumulate);
        _tile_release();
    }
}
