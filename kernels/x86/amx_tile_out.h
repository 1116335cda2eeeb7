/* kernels/x86/amx_tile_out.h — the output side the 8-bit AMX linears share
 * (kernels/x86/qlinear_amx.c, qlinear_fp8_amx.c, qlinear_int8row_amx.c), which compute
 * Yᵀ = W · Xᵀ in 16-row weight blocks: where a block starts, and a finished 16 n x 16 m fp32
 * block transposed into y's rows. Include from files built with AVX-512 flags. */
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

#endif
