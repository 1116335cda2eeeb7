/* kernels/x86/mla_attn_avx512_internal.h — the AVX-512 MLA attention chunk kernel: one body,
 * compiled once (kernels/x86/mla_attn_avx512.c, the avx512 flags), run by two variants. The
 * avx512 level runs it as it is; the amx level (kernels/x86/mla_attn_avx512_amx.c, the AMX
 * flags) passes its tile steps, the functions of its entry, and the body calls them where the
 * avx512 level computes with FMAs. Private to the x86 MLA kernels.
 *
 * One item = up to 16 (query, head) rows sharing one key range. Keys go in tiles of
 * NUMLA_MLA_KT rows; per tile:
 *   1. scores S[t][r] (one zmm per key, lane = row): lanes along d: each 16-element piece of
 *      the row is widened once and FMA'd into all rows' accumulators (q blocked by 16 dims),
 *      then a 16-way transpose-add gives the key's score vector. With the tile steps (bf16
 *      cache, (Dc + Dr) % 32 == 0: the amx entry's applies) the scores come from AMX tiles
 *      instead (kernels/x86/mla_attn_amx.c; the C tile is exactly this [key][row] layout).
 *      The scale is applied to the fp32 scores.
 *   2. online softmax on the tile (masking keys past each row's limit), P = e^(S - m).
 *   3. O[r][d] += Σ_t P[t][r] · v_t[d] with lanes along d, all rows of the item in registers
 *      so each V element is loaded (and widened) once per item (with the tile steps and
 *      Dc % 64 == 0: on the tiles, P split into bf16 hi + lo).
 * Cache rows are read in place (never copied), so each block is read once from memory and
 * its lines are reused from L1/L2 by step 3.
 * The chunk's O lives in the frame's acc buffer (rows, Dc) between tiles.
 */
#ifndef NUMLA_KERNELS_X86_MLA_ATTN_AVX512_INTERNAL_H
#define NUMLA_KERNELS_X86_MLA_ATTN_AVX512_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/mla_attn_internal.h"

/* What the amx variant does on the tiles (kernels/x86/mla_attn_amx.h has their contracts).
 * pack_q: the item's q rows as [pair][16] bf16 pairs at qbuf, an fp32 or fp16 q split into hi
 * and, right after it (w / 2 · 16 pairs further), lo; begin / end: configure and release the
 * tiles, once per chunk; qk: the scores of up to 64 keys; pv: P·V of one key tile into O, in
 * the permuted column order that unpermute puts back once after the last tile. */
typedef struct numla_mla_tile_steps {
    void (*pack_q)(const numla_mla_attn_chunk *c, void *qbuf);
    void (*begin)(void);
    void (*end)(void);
    void (*qk)(const uint32_t *qv, const uint32_t *qlo, int64_t w, const char *const *rows,
               int64_t nt, float *S, uint16_t *stage);
    void (*pv)(float *O, int64_t dc, const float *S, const float *corr, int fresh, int rescale,
               const char *const *vrows, int64_t nt, uint16_t *stage, uint16_t *vpre, int vfill);
    void (*unpermute)(float *O, int64_t rows, int64_t dc);
} numla_mla_tile_steps;

/* The chunk kernel (numla_mla_attn_chunk_fn) and its per-thread scratch bytes; tiles: NULL
 * (the avx512 variant) or the amx variant's steps. */
void numla_mla_avx512_chunk(const numla_mla_tile_steps *tiles, const numla_mla_attn_chunk *c,
                            float *acc, float *m, float *l, void *scratch);
size_t numla_mla_avx512_scratch_bytes(const numla_mla_tile_steps *tiles,
                                      const numla_mla_attn_args *a);
/* The shapes the body takes (Dc % 32 == 0, Dr % 16 == 0): the avx512 entry's applies. */
int numla_mla_avx512_supports(const void *args);

/* The body's FMA steps over row pointers, for other kernels whose rows are both key and value
 * (kernels/x86/sink_attn_avx512.c; fp32 rows, or bf16 rows widened as loaded: _bf16). qk: S[16·i + h] = q_h · rows[i] for nt rows,
 * q packed as (width / 16, 16 heads, 16), width % 16 == 0. pv: O[h][d] (row stride dc, 64-byte
 * aligned) = (fresh ? 0 : O · corr[h] where rescale) + Σ_i P[16·i + h] · vrows[i][d] over the
 * first dc values, dc % 32 == 0. nrows: heads in use (1 ..= 16). */
void numla_mla_avx512_qk_f32(const float *qr, int64_t width, const char *const *rows, int64_t nt,
                             float *S, int nrows);
void numla_mla_avx512_pv_f32(float *O, int64_t dc, const float *P, const float *corr, int fresh,
                             int rescale, const void *const *vrows, int64_t nt, int nrows);
void numla_mla_avx512_qk_bf16(const float *qr, int64_t width, const char *const *rows, int64_t nt,
                              float *S, int nrows);
void numla_mla_avx512_pv_bf16(float *O, int64_t dc, const float *P, const float *corr, int fresh,
                              int rescale, const void *const *vrows, int64_t nt, int nrows);

#endif
