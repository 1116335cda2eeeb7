/* kernels/x86/amx_bf16_block.h — the AMX-BF16 register blocks of the weight-as-A tile GEMMs
 * (kernels/x86/qlinear_fp8_amx.c, fp8; kernels/x86/qblock_f32_amx.c, F32 mode's bf16 tiles):
 * Yᵀ = W · Xᵀ with 16 weight rows x 32 k of bf16 as one A tile (row-major, 64 bytes a row, the
 * tiles of one weight-row tile consecutive along k) and x's pieces as B tiles (16 k-pairs x 16
 * rows x 2 bf16, 1 KiB each; per 32-k step the P pieces of an x tile follow one another).
 * Include from files built with the AMX flags, or over the tile emulator
 * (tests/support/amx_emulate.h). */
#ifndef NUMLA_KERNELS_X86_AMX_BF16_BLOCK_H
#define NUMLA_KERNELS_X86_AMX_BF16_BLOCK_H

#include <immintrin.h>
#include <stdint.h>

enum { NUMLA_AMX_BF16_TILE = 16 * 32 }; /* bf16 elements of one 1 KiB tile */

/* c_{2j+h} (16 n x 16 m fp32, 64-byte rows) (+)= Σ_t Σ_p A_j[t] · B_h[t][p] over nt 32-k steps:
 * NN weight-row tiles (A_0 at a, A_1 at a + a1 elements; step t at + t tiles) x NM x tiles
 * (b0, b1; step t's piece p at + (t·P + p) tiles). first: C starts at zero, else it is loaded
 * from c. Each C takes its products in the order t, then p. C in tiles 0-3, A in 4/5, B in 6/7
 * (literal tile numbers, as the intrinsics need); per step NN + NM·P tile loads for NN·NM·P
 * TDPBF16PS. */
static inline __attribute__((always_inline)) void
numla_amx_bf16_block(const int NN, const int NM, const int P, const uint16_t *a, size_t a1, const uint16_t *b0,
                     const uint16_t *b1, int nt, int first, float *c0, float *c1, float *c2, float *c3)
{
    enum { T = NUMLA_AMX_BF16_TILE, CS = 16 * 4 };
    if (first) {
        _tile_zero(0);
        if (NM > 1)
            _tile_zero(1);
        if (NN > 1) {
            _tile_zero(2);
            if (NM > 1)
                _tile_zero(3);
        }
    } else {
        _tile_loadd(0, c0, CS);
        if (NM > 1)
            _tile_loadd(1, c1, CS);
        if (NN > 1) {
            _tile_loadd(2, c2, CS);
            if (NM > 1)
                _tile_loadd(3, c3, CS);
        }
    }
    for (int t = 0; t < nt; t++) {
        const uint16_t *bh0 = b0 + (size_t)t * P * T, *bh1 = b1 + (size_t)t * P * T;
        _tile_loadd(4, a + (size_t)t * T, 64);
        if (NN > 1)
            _tile_loadd(5, a + a1 + (size_t)t * T, 64);
        for (int p = 0; p < P; p++) {
            if (NM == 1 && p % 2) { /* tile 7 is free: the next piece's load need not wait */
                _tile_loadd(7, bh0 + p * T, 64);
                _tile_dpbf16ps(0, 4, 7);
                if (NN > 1)
                    _tile_dpbf16ps(2, 5, 7);
                continue;
            }
            _tile_loadd(6, bh0 + p * T, 64);
            _tile_dpbf16ps(0, 4, 6);
            if (NN > 1)
                _tile_dpbf16ps(2, 5, 6);
            if (NM > 1) {
                _tile_loadd(7, bh1 + p * T, 64);
                _tile_dpbf16ps(1, 4, 7);
                if (NN > 1)
                    _tile_dpbf16ps(3, 5, 7);
            }
        }
    }
    _tile_stored(0, c0, CS);
    if (NM > 1)
        _tile_stored(1, c1, CS);
    if (NN > 1) {
        _tile_stored(2, c2, CS);
        if (NM > 1)
            _tile_stored(3, c3, CS);
    }
}

/* c_j (16 n x 16 m fp32, 64-byte rows) (+)= Σ_t (A_j[t] · B[t][0] + A_j[t] · B[t][1]) for j < NN
 * (1 to 4) weight-row tiles (A_j at a + j·a1 elements; step t at + t tiles) and one x tile of
 * two pieces (step t's piece p at b + (2t + p) tiles) over nt 32-k steps. first: C starts at
 * zero, else it is loaded from c_j. Each C takes its products in the same order as
 * numla_amx_bf16_block's (t, then p), so the two blocks give the same bits. C in tiles 0-3, the
 * pieces in 6/7, A alternating in 4/5; per step 2 + NN tile loads for 2·NN TDPBF16PS, the
 * pieces (an x tile: streamed from L2 in the GEMMs) loaded once for all NN weight tiles. */
static inline __attribute__((always_inline)) void
numla_amx_bf16_block_x1(const int NN, const uint16_t *a, size_t a1, const uint16_t *b, int nt, int first, float *c0,
                        float *c1, float *c2, float *c3)
{
    enum { T = NUMLA_AMX_BF16_TILE, CS = 16 * 4 };
    if (first) {
        _tile_zero(0);
        if (NN > 1)
            _tile_zero(1);
        if (NN > 2)
            _tile_zero(2);
        if (NN > 3)
            _tile_zero(3);
    } else {
        _tile_loadd(0, c0, CS);
        if (NN > 1)
            _tile_loadd(1, c1, CS);
        if (NN > 2)
            _tile_loadd(2, c2, CS);
        if (NN > 3)
            _tile_loadd(3, c3, CS);
    }
    for (int t = 0; t < nt; t++) {
        const uint16_t *bt = b + (size_t)t * 2 * T, *at = a + (size_t)t * T;
        _tile_loadd(6, bt, 64);
        _tile_loadd(7, bt + T, 64);
        _tile_loadd(4, at, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(0, 4, 7);
        if (NN > 1) {
            _tile_loadd(5, at + a1, 64);
            _tile_dpbf16ps(1, 5, 6);
            _tile_dpbf16ps(1, 5, 7);
        }
        if (NN > 2) {
            _tile_loadd(4, at + 2 * a1, 64);
            _tile_dpbf16ps(2, 4, 6);
            _tile_dpbf16ps(2, 4, 7);
        }
        if (NN > 3) {
            _tile_loadd(5, at + 3 * a1, 64);
            _tile_dpbf16ps(3, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
    }
    _tile_stored(0, c0, CS);
    if (NN > 1)
        _tile_stored(1, c1, CS);
    if (NN > 2)
        _tile_stored(2, c2, CS);
    if (NN > 3)
        _tile_stored(3, c3, CS);
}

#endif
