/* kernels/x86/amx_tile_out.h — the output side the 8-bit AMX linears share
 * (kernels/x86/qlinear_amx.c, qlinear_fp8_amx.c, qlinear_int8row_amx.c), which compute
 * Yᵀ = W · Xᵀ in 16-row weight blocks: where a block starts, the walk over a finished group of
 * blocks' output tiles (the partial last weight block and the partial last x tile), and a
 * finished 16 n x 16 m fp32 block transposed into y's rows. Include from files built with
 * AVX-512 flags. */
#ifndef NUMLA_KERNELS_X86_AMX_TILE_OUT_H
#define NUMLA_KERNELS_X86_AMX_TILE_OUT_H

#include <immintrin.h>
#include <stdint.h>

/* First weight row of 16-row block b: 16·b, or N - 16 for a partial last block (which then
 * overlaps the block before it and stores only the rows that block did not). */
static inline int64_t numla_amx_block_row0(int64_t b, int64_t n) { return 16 * b + 16 <= n ? 16 * b : n - 16; }

/* y[m0 + j][n0 + r] (+)= t[r][j] for r in [skip, 16), j < mc (t: 16 n x 16 m fp32, already
 * rounded: the add is a plain fp32 add of stored values). */
static inline void numla_amx_tile_to_rows(const float *t, int64_t n0, int skip, int64_t m0, int mc, float *y,
                                          int64_t ldy, int accumulate)
{
    const __mmask16 rows = (__mmask16)(0xFFFFu << skip);
    const __m512i col = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32(16));
    for (int j = 0; j < mc; j++) {
        __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), rows, col, t + j, 4);
        float *yo = y + (m0 + j) * ldy + n0;
        if (accumulate)
            v = _mm512_add_ps(_mm512_maskz_loadu_ps(rows, yo), v);
        _mm512_mask_storeu_ps(yo, rows, v);
    }
}

/* Writes one finished output tile: weight rows [n0 + skip, n0 + 16) x x rows [m0, m0 + mc); j, h:
 * the tile's weight block in its group and x tile in its row range. */
typedef void (*numla_amx_tile_out_fn)(void *ctx, int j, int64_t h, int64_t n0, int skip, int64_t m0, int mc);

/* The epilogue of a finished group of nn 16-row weight blocks b0, b0 + 1, ... (block j's first
 * row r[j] = numla_amx_block_row0(b0 + j, n)) over nt x tiles, 16 rows each from row i0, of the
 * rows that end at i1: out(ctx, j, h, r[j], skip, m0, mc) for each tile, skip the rows a partial
 * last block leaves to the block before it (which stored them), m0 = i0 + 16 h, mc its rows
 * below i1 (at most 16). The kernels differ only in out (inlined: a constant out is a call of a
 * known static function). */
static inline __attribute__((always_inline)) void numla_amx_blocks_out(int64_t b0, const int64_t *r, int nn, int64_t i0,
                                                                       int64_t i1, int64_t nt, numla_amx_tile_out_fn out,
                                                                       void *ctx)
{
    for (int j = 0; j < nn; j++) {
        const int skip = (int)(16 * (b0 + j) - r[j]);
        for (int64_t h = 0; h < nt; h++) {
            const int64_t m0 = i0 + 16 * h;
            out(ctx, j, h, r[j], skip, m0, (int)(i1 - m0 < 16 ? i1 - m0 : 16));
        }
    }
}

#endif
