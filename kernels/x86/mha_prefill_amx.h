/* kernels/x86/mha_prefill_amx.h — AMX-BF16 Q·Kᵀ and P·V for the amx mha_prefill variant
 * (kernels/x86/mha_prefill_amx.c, built with -mamx-tile -mamx-bf16). Private to mha_prefill.
 *
 * Precision: q and k (and P and v) are each split into bf16 hi + lo (hi = bf16(x),
 * lo = bf16(x - hi)) and a score is q_hi·k_hi + q_lo·k_hi + q_hi·k_lo on the tiles, in fp32: only lo·lo
 * (<= 2^-17 |q_d k_d| per product) and lo's own rounding are dropped, an error of the fp32
 * class (the fp32 FMA variant's error bound holds to within a small factor). */
#ifndef NUMLA_KERNELS_X86_MHA_PREFILL_AMX_H
#define NUMLA_KERNELS_X86_MHA_PREFILL_AMX_H

#include <stdint.h>

#include "kernels/mha_prefill.h"

/* Keys of one block as B tiles: n (<= KB) rows of k (row stride ks floats, D dims each) into
 * kp, (D/32 dim blocks, KB/16 key groups, hi/lo, 16 dim pairs, 16 keys, 2) bf16, keys past n
 * zero. kp holds D · KB · 2 bf16 (the footprint of the fp32 transposed block). */
void numla_mha_prefill_pack_k_amx(const float *k, int64_t ks, int32_t n, int32_t D, uint16_t *kp);

/* Queries of one task as A tiles: nq (<= QB) rows qrow[i] into qp, (QB/16 row tiles, D/32 dim
 * blocks, hi/lo, 16 rows, 32) bf16, rows past nq zero. qp holds QB · D · 2 bf16. */
void numla_mha_prefill_pack_q_amx(const float *const *qrow, int32_t nq, int32_t D, uint16_t *qp);

/* Values of one block as B tiles: n (<= KB) rows of v (row stride vs floats, Dv dims each) into
 * vp, (KB/32 key groups, Dv/16 value blocks, hi/lo, 16 key pairs, 16 dims, 2) bf16, keys past n
 * zero. vp holds KB · Dv · 2 bf16 (the footprint of the fp32 block rows). */
void numla_mha_prefill_pack_v_amx(const float *v, int64_t vs, int32_t n, int32_t Dv, uint16_t *vp);

/* O (QB, Dv) fp32 rows 0 .. ceil(nq/16)·16 += P · V for one key block: P = S (QB, KB) fp32
 * (rows past nq and keys past the block's end must be finite; they are zeroed here), V the
 * block's packed tiles. pp: scratch for P's tiles, QB · KB · 2 bf16. Tiles configured by the
 * caller. Split-bf16 on both sides, like the scores. */
void numla_mha_prefill_pv_amx(const float *S, int32_t nq, const uint16_t *vp, int32_t Dv,
                              uint16_t *pp, float *O);

/* S (QB, KB) fp32 rows 0 .. ceil(nq/16)·16 = q · kᵀ for one key block (no scale). The caller
 * has configured the tiles (numla_amx_tiles_begin, kernels/x86/amx.h). */
void numla_mha_prefill_scores_amx(const uint16_t *qp, int32_t nq, int32_t D, const uint16_t *kp,
                                  float *S);

#endif
