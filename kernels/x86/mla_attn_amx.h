/* kernels/x86/mla_attn_amx.h — AMX-BF16 Q·K and P·V for the amx MLA attention variant
 * (kernels/x86/mla_attn_amx.c, built with -mamx-tile -mamx-bf16). Private to the x86 MLA
 * kernels. */
#ifndef NUMLA_KERNELS_X86_MLA_ATTN_AMX_H
#define NUMLA_KERNELS_X86_MLA_ATTN_AMX_H

#include <stddef.h>
#include <stdint.h>

/* Configure the tiles for numla_mla_qk_amx on this thread (once per chunk), and release them. */
void numla_mla_amx_begin(void);
void numla_mla_amx_end(void);

/* S[t][r] (t < nt <= 64, 16 lanes per key) = Σ_j pair_j(q_r) · pair_j(row t), unscaled.
 * qv: (w / 2, 16) bf16 pairs of q, rows past the item's zeroed; qlo: NULL, or the same layout
 * holding q's lo part (q = qv + qlo, split from an fp32 q), added with a second product per key
 * tile; rows[t]: bf16 cache rows of w elements (w % 32 == 0); stage: 64·w bf16 of scratch,
 * used when 16 consecutive keys are not contiguous rows of one block. */
void numla_mla_qk_amx(const uint32_t *qv, const uint32_t *qlo, int64_t w, const char *const *rows,
                      int64_t nt, float *S, uint16_t *stage);

/* P·V on the tiles: O (16 rows, Dc; row stride dc, fp32, 64-byte aligned, in the permuted
 * column order below) = (fresh ? 0 :
 * O·corr[row] if rescale, else O) + Σ_t P[t][row] · v_t, v_t the first dc bf16 of vrows[t].
 * P: S as (nt, 16) fp32 (nt <= 64), split into bf16 hi + lo (error <= 2^-17 relative per
 * element; V is exact bf16), so fp32 outputs keep their tolerance. dc % 64 == 0. stage:
 * NUMLA_MLA_PV_AMX_STAGE bf16 of scratch, 64-byte aligned. Tiles configured by
 * numla_mla_amx_begin. */
/* Software prefetch of the next key tile (before Q·K, or spread over P·V's d-groups) was
 * slower, and a one-line prefetch per block of the next tile made no difference
 * (docs/decode.md, "Tried and not kept"). What bounds the kernel (its Q·K tile loads stream
 * shuffled blocks well below read bandwidth, and tile work does not overlap the stream):
 * docs/decode.md, from `numla bench machine`'s stream probe. */
enum { NUMLA_MLA_PV_AMX_STAGE = 2 * 2 * 512 + 2 * 4 * 512 };
/* vpre: NULL, or (Dc / 64, 2, 4, 16, 32) bf16 of this tile's V as B tiles, packed into it by
 * this call (vfill = 1) or by an earlier call over the same keys (vfill = 0: vrows unread). */
void numla_mla_pv_amx(float *O, int64_t dc, const float *S, const float *corr, int fresh,
                      int rescale, const char *const *vrows, int64_t nt, uint16_t *stage,
                      uint16_t *vpre, int vfill);
/* O as numla_mla_pv_amx leaves it keeps each 32-dim block in a permuted column order (V is
 * paired by a one-uop unpack): dims 0-3, 8-11, 16-19, 24-27, then 4-7, 12-15, 20-23, 28-31.
 * This puts rows [0, rows) of O (row stride dc, 64-byte aligned) back in dim order; call it
 * once after the last tile. */
void numla_mla_pv_amx_unpermute(float *O, int64_t rows, int64_t dc);

#endif
