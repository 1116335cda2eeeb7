/* kernels/x86/qlinear_int8row_amx.c — int8-row (int8 weights, one fp32 scale per row, fp32
 * activations) at the amx level: x written exactly enough as three int8 planes, the products
 * summed exactly in int32 on AMX-INT8 tiles (TDPBSSD) or, for a few rows, with AVX512-VNNI
 * (vpdpbusd), and one scaling step in double. Reached through numla_qlinear_forward_amx_wide
 * (kernels/x86/qlinear_wide_amx.c) when numla_qlinear_amx_wide_applies; the level needs
 * AMX-INT8 and AVX512-VNNI.
 *
 * Planes and the output rule: kernels/x86/qlinear_quant_avx512.h (x written as three int8
 * planes of its row maximum, the products summed exactly in int32, one scaling step in double:
 * about 2^-23 of max|x| · Σ|s w|, deterministic). Because the sums are exact integers, the tiles
 * and the VNNI kernels (numla_qlinear_int8row_rows_vnni, the avx512bf16 level's GEMM) give the
 * same bits, so a row's output does not depend on M, the thread count or the level (the W8A8
 * models' batch invariance needs that: their next layer quantizes this output).
 *
 * Tiles (M >= NUMLA_QLINEAR_AMX_ROW_TILE_MIN_M): Yᵀ = W · Xᵀ as in kernels/x86/qlinear_amx.c —
 * the packed weights are the A operand as they are (16 rows x 64 k, stride kp), the planes are
 * packed per call into B tiles, for 16-row block mb, plane p and 64-k block c one 1 KiB tile
 * B[kk][4·mm + b] = q_p[16·mb + mm][64·c + 4·kk + b] (zero rows past M, zero k past K), the
 * planes of a block one after the other so each plane's k-blocks are one sequential stream.
 * A 16-row block is packed at once: per 64-k block and plane, the rows' 64 bytes are transposed
 * as 16 x 16 words into the tile's rows (stores of 1 KiB, no scatter).
 * Register blocking: 4 int32 accumulators (2 weight-row tiles x 2 x-row tiles), A in 4/5, B in
 * 6/7, over all of K once per plane (the pair's weights come from L2 for planes 2 and 3).
 * Cache blocking: x rows in chunks whose planes fit NUMLA_QLINEAR_AMX_X_BYTES (they stay in L2
 * across a thread's weight pairs); threads split N in pairs of 16-row blocks.
 * Few rows (decode): numla_qlinear_int8row_rows_vnni (kernels/x86/qlinear_avx512vnni.c).
 *
 * The unit test qlinear_fp8_amx_emu builds this file over the tile emulator
 * (NUMLA_AMX_EMULATE renames the entry point) and checks it against the planes' bound and the
 * VNNI rows' and the avx512bf16 level's bits against the tiles'; amx_hardware checks the real
 * tiles give the emulated bits. Speed: docs/linear.md. */
#include <immintrin.h>
#include <math.h>
#include <omp.h>

#ifdef NUMLA_AMX_EMULATE
#define numla_qlinear_int8row_amx numla_qlinear_int8row_amx_emulated
#endif

#include "kernels/qlinear_internal.h"
#include "kernels/x86/amx.h"
#include "kernels/x86/amx_int8_block.h"
#include "kernels/x86/amx_tile_out.h"
#include "kernels/x86/qlinear_quant_avx512.h"
#include "kernels/x86/transpose16_avx512.h"

enum {
    TR = 16,               /* rows of a tile */
    TKB = 64,              /* int8 k values per tile row */
    TILE_BYTES = TR * TKB, /* one 1 KiB tile */
    PLANES = NUMLA_INT8ROW_PLANES,
};

/* ---- tiles ---- */

/* Writes the three planes of x rows [i0, i0 + 16) (rows i0 + j of x, chunk-relative 16-row
 * block b; rows past m zero) into block b's B tiles, their scales into sx[i0 ..]. Per 64-k block
 * and plane each row's 64 bytes (16 k-quads) are one vector; a 16 x 16 transpose of 4-byte words
 * makes them the tile's 16 k-quad rows, stored as one sequential 1 KiB. */
static void numla_int8row_pack_block_(const float *x, int64_t ldx, int64_t k, int64_t kp, int64_t m, int64_t i0,
                                      int64_t b, int8_t *xb, float *sx)
{
    const int64_t kb = kp / TKB;
    const int nr = (int)(m - i0 < TR ? m - i0 : TR);
    __m512 inv[TR];
    for (int r = 0; r < nr; r++)
        sx[i0 + r] = numla_int8row_scale_row(x + (i0 + r) * ldx, k, &inv[r]);
    int8_t *blk = xb + (size_t)b * PLANES * (size_t)kb * TILE_BYTES;
    for (int64_t c = 0; c < kp; c += TKB) {
        __m512i v[PLANES][TR];
        for (int r = 0; r < TR; r++) {
            if (r >= nr) {
                for (int p = 0; p < PLANES; p++)
                    v[p][r] = _mm512_setzero_si512();
                continue;
            }
            const float *xr = x + (i0 + r) * ldx;
            __m128i q[4][PLANES];
            for (int j = 0; j < 4; j++)
                numla_int8row_quant16(xr, k, c + 16 * j, inv[r], q[j]);
            for (int p = 0; p < PLANES; p++) {
                __m512i t = _mm512_castsi128_si512(q[0][p]);
                t = _mm512_inserti32x4(t, q[1][p], 1);
                t = _mm512_inserti32x4(t, q[2][p], 2);
                v[p][r] = _mm512_inserti32x4(t, q[3][p], 3);
            }
        }
        for (int p = 0; p < PLANES; p++) {
            numla_x86_transpose16(v[p]); /* v[p][kk]: k-quad kk of the 16 rows */
            int8_t *t = blk + ((size_t)p * (size_t)kb + (size_t)(c / TKB)) * TILE_BYTES;
            for (int kk = 0; kk < TR; kk++)
                _mm512_store_si512((void *)(t + kk * TKB), v[p][kk]);
        }
    }
}

/* y[m0 + j][n0 + r] (+)= the rule above for r in [skip, 16), j < mc; cp[p]: plane p's 16 n x
 * 16 m sums. */
static void numla_int8row_out_(const int32_t *const cp[PLANES], int64_t n0, int skip, int64_t m0, int mc,
                               const float *sx, const float *s, float *y, int64_t ldy, int accumulate)
{
    float t[TR * TR] __attribute__((aligned(64)));
    const __m512 vsx = _mm512_maskz_loadu_ps(numla_qlinear_mask16(mc, 0), sx + m0);
    const __m512d sx0 = _mm512_cvtps_pd(_mm512_castps512_ps256(vsx));
    const __m512d sx1 = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(vsx), 1)));
    for (int r = skip; r < TR; r++) {
        const __m512d sn = _mm512_set1_pd((double)s[n0 + r]);
        for (int h = 0; h < 2; h++) {
            const __m512d v = numla_int8row_combine(
                _mm256_load_si256((const __m256i *)(const void *)(cp[0] + r * TR + 8 * h)),
                _mm256_load_si256((const __m256i *)(const void *)(cp[1] + r * TR + 8 * h)),
                _mm256_load_si256((const __m256i *)(const void *)(cp[2] + r * TR + 8 * h)));
            _mm256_store_ps(t + r * TR + 8 * h, numla_int8row_scale(v, h ? sx1 : sx0, sn));
        }
    }
    numla_amx_tile_to_rows(t, n0, skip, m0, mc, y, ldy, accumulate);
}

/* The epilogue's out (numla_amx_blocks_out): tile (j, h) of the three planes' sums into y. */
typedef struct {
    int32_t (*c)[4][TR * TR];
    const float *sx, *s;
    float *y;
    int64_t ldy;
    int accumulate;
} numla_int8row_outs;

static void numla_int8row_tile_out_(void *ctx, int j, int64_t h, int64_t n0, int skip, int64_t m0, int mc)
{
    const numla_int8row_outs *o = ctx;
    const int32_t *cp[PLANES] = {o->c[0][2 * j + h], o->c[1][2 * j + h], o->c[2][2 * j + h]};
    numla_int8row_out_(cp, n0, skip, m0, mc, o->sx, o->s, o->y, o->ldy, o->accumulate);
}

/* Weight blocks [b0, b1) x x rows [i0, i1) (xb: the chunk's B tiles from row i0). */
static void numla_int8row_range_(const numla_qlinear_weight *w, const int8_t *xb, const float *sx, int64_t m,
                                 int64_t i0, int64_t i1, int64_t b0, int64_t b1, float *y, int64_t ldy,
                                 int accumulate)
{
    int32_t c[PLANES][4][TR * TR] __attribute__((aligned(64)));
    numla_int8row_outs out = {c, sx, w->scales, y, ldy, accumulate};
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
            for (int p = 0; p < PLANES; p++) {
                const int8_t *bx0 = xb + ((size_t)((i - i0) / TR) * PLANES + (size_t)p) * (size_t)kb * TILE_BYTES;
                const int8_t *bx1 = bx0 + (size_t)PLANES * (size_t)kb * TILE_BYTES;
                if (nn == 2 && nm == 2)
                    numla_amx_int8_block(2, 2, a[0], a[1], kp, bx0, bx1, kb, c[p]);
                else if (nn == 2)
                    numla_amx_int8_block(2, 1, a[0], a[1], kp, bx0, bx1, kb, c[p]);
                else if (nm == 2)
                    numla_amx_int8_block(1, 2, a[0], a[1], kp, bx0, bx1, kb, c[p]);
                else
                    numla_amx_int8_block(1, 1, a[0], a[1], kp, bx0, bx1, kb, c[p]);
            }
            numla_amx_blocks_out(b, r, nn, i, m, nm, numla_int8row_tile_out_, &out);
        }
    }
}

void numla_qlinear_int8row_amx(const numla_qlinear_weight *w, int64_t m, const float *x, int64_t ldx, float *y,
                               int64_t ldy, int accumulate, void *workspace)
{
    const int64_t kp = w->kp, blocks = (w->n + TR - 1) / TR, pairs = (blocks + 1) / 2;
    int8_t *xb = (int8_t *)numla_qlinear_ws_xq(workspace); /* 64-aligned */
    if (m < NUMLA_QLINEAR_AMX_ROW_TILE_MIN_M) {
        /* each row's planes as u8 (q + 128) rows of kp bytes, then sx */
        uint8_t *xq = (uint8_t *)xb;
        float *sx = (float *)(void *)(xb + numla_qlinear_align64((size_t)(m * PLANES * kp)));
        for (int64_t i = 0; i < m; i++)
            sx[i] = numla_int8row_planes_row(x + i * ldx, w->k, kp, xq + i * PLANES * kp, kp);
#pragma omp parallel
        {
            int64_t lo, hi;
            numla_qlinear_split(w->n, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
            numla_qlinear_int8row_rows_vnni(w, m, xq, sx, lo, hi, y, ldy, accumulate);
        }
        return;
    }
    /* one chunk of rows' B tiles at a time, then sx of every row */
    const int64_t chunk = numla_qlinear_int8row_amx_chunk(w);
    float *sx = (float *)(void *)(xb + numla_qlinear_align64((size_t)((m < chunk ? (m + TR - 1) / TR * TR : chunk) *
                                                                       PLANES * kp)));
#pragma omp parallel
    {
        /* the shared configuration, loaded here so the emulated build runs the same code */
        _tile_loadconfig(&numla_amx_tile_config);
        int64_t lo, hi;
        numla_qlinear_split(pairs, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
        const int64_t b1 = 2 * hi < blocks ? 2 * hi : blocks;
        for (int64_t i0 = 0; i0 < m; i0 += chunk) { /* every thread: the barriers */
            const int64_t i1 = i0 + chunk < m ? i0 + chunk : m, r16 = (i1 - i0 + TR - 1) / TR * TR;
#pragma omp for schedule(static)
            for (int64_t i = 0; i < r16; i += TR)
                numla_int8row_pack_block_(x, ldx, w->k, kp, m, i0 + i, i / TR, xb, sx);
            if (2 * lo < b1)
                numla_int8row_range_(w, xb, sx, m, i0, i1, 2 * lo, b1, y, ldy, accumulate);
#pragma omp barrier
        }
        _tile_release();
    }
}
