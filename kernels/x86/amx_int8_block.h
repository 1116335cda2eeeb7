/* kernels/x86/amx_int8_block.h — the AMX-INT8 register block the 8-bit linears share
 * (kernels/x86/qlinear_amx.c, W8A8; kernels/x86/qlinear_int8row_amx.c, int8-row's planes):
 * Yᵀ = W · Xᵀ with the packed int8 weights as the A operand (16 rows x 64 k, stride kp) and x's
 * s8 B tiles (16 k-quads x 16 rows x 4 bytes, 1 KiB each, consecutive along k). Include from
 * files built with the AMX flags, or over the tile emulator (tests/support/amx_emulate.h). */
#ifndef NUMLA_KERNELS_X86_AMX_INT8_BLOCK_H
#define NUMLA_KERNELS_X86_AMX_INT8_BLOCK_H

#include <immintrin.h>
#include <stdint.h>

/* c[2·j + h] (16 n x 16 m int32) = A_j · B_h over kb 64-k blocks: NN weight-row tiles (a0, a1,
 * stride kp) x NM x tiles (b0, b1). C in tiles 0-3, A in 4/5, B in 6/7 (literal tile numbers,
 * as the intrinsics need); per 64-k block 2 + 2 tile loads for 4 TDPBSSD, the next block's A
 * rows (16 strided lines per tile) prefetched into L1 while this one computes. */
static inline __attribute__((always_inline)) void
numla_amx_int8_block(const int NN, const int NM, const int8_t *a0, const int8_t *a1, int64_t kp, const int8_t *b0,
                     const int8_t *b1, int64_t kb, int32_t c[4][256])
{
    enum { TR = 16, TKB = 64, TILE_BYTES = TR * TKB };
    _tile_zero(0);
    if (NM > 1)
        _tile_zero(1);
    if (NN > 1) {
        _tile_zero(2);
        if (NM > 1)
            _tile_zero(3);
    }
    for (int64_t cb = 0; cb < kb; cb++) {
        if (cb + 1 < kb) /* the next k-block's A rows, strided: L2 (or memory) -> L1 */
            for (int l = 0; l < TR; l++) {
                _mm_prefetch((const char *)(a0 + l * kp + (cb + 1) * TKB), _MM_HINT_T0);
                if (NN > 1)
                    _mm_prefetch((const char *)(a1 + l * kp + (cb + 1) * TKB), _MM_HINT_T0);
            }
        _tile_loadd(4, a0 + cb * TKB, kp);
        _tile_loadd(6, b0 + cb * TILE_BYTES, TKB);
        _tile_dpbssd(0, 4, 6);
        if (NM > 1) {
            _tile_loadd(7, b1 + cb * TILE_BYTES, TKB);
            _tile_dpbssd(1, 4, 7);
        }
        if (NN > 1) {
            _tile_loadd(5, a1 + cb * TKB, kp);
            _tile_dpbssd(2, 5, 6);
            if (NM > 1)
                _tile_dpbssd(3, 5, 7);
        }
    }
    _tile_stored(0, c[0], TR * 4);
    if (NM > 1)
        _tile_stored(1, c[1], TR * 4);
    if (NN > 1) {
        _tile_stored(2, c[2], TR * 4);
        if (NM > 1)
            _tile_stored(3, c[3], TR * 4);
    }
}

#endif
