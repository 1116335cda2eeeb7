/* kernels/x86/qblock_f32_amx.c — block encodings in F32 activation mode on AMX-BF16 tiles
 * (TDPBF16PS): the amx level of kernels/qblock.c for F32 mode when the type's row names a bf16
 * tile decoder (kernels/qblock_types.h `bf16_tile`: a type whose values bf16 holds exactly;
 * MXFP4 today) and the CPU has AMX-BF16. From NUMLA_QBLOCK_AMX_F32_MIN_M x rows and N >= 16;
 * the other calls run the avx512 level's F32 kernels, called directly.
 *
 * The unit test qblock_amx_emu builds this file against the tile emulator
 * (tests/support/amx_emulate.h; NUMLA_AMX_EMULATE renames the entry point) and checks it against
 * a double-precision reference on the dequantized weights within the bound below, and that a
 * row's bits do not depend on M or on the other rows, on any CPU with AVX512-BF16;
 * amx_hardware checks that the real tiles give the emulated build's bits.
 *
 * It computes Yᵀ = W · Xᵀ, as kernels/x86/qlinear_fp8_amx.c does for fp8: the weights are the
 * A operand, one A tile = 16 weight rows x one 32-column block, decoded per tile into a
 * per-thread buffer as bf16 (row-major, 32 bf16 a row). MXFP4's values e2m1 · 2^(e - 127) have
 * at most 2 significant bits, so they are the reference dequantization's fp32 values exactly
 * (the scale folded in; no per-block scale step, unlike fp8's 128-column blocks); values below
 * 2^-126 (E8M0 below 2: not in published checkpoints) are flushed to zero by the conversion
 * and the tiles.
 * B operand: x split into hi + lo bf16 (hi = bf16(x), lo = bf16(x - hi), round to nearest
 * even; kernels/x86/bf16_pack_avx512.h), packed per call into the workspace: for 16-row block
 * mb and 32-column block c, two 1 KiB tiles (hi, lo),
 *   B[kk][2·mm + b] = x[16·mb + mm][32·c + 2·kk + b],   zero past M,
 * built by a 16 x 16 transpose of 32-bit words.
 *
 * Precision (u = 2^-24), the bound kernels/qblock.h states for this path: each product of a
 * weight with a piece is exact in fp32; TDPBF16PS sums 16 pairs per lane with one rounding a
 * step, adds the two lanes and then C (2 more), and C runs through 2·K/32 instructions, so a
 * term passes at most K/16 + 18 roundings; with the split's |x - hi - lo| <= 2^-17 |x|,
 *   |y - y_exact| <= (2^-17 + (K/16 + 18) u) · Σ_k |w x|   (+ u |y| when accumulating).
 * The C sums are stored and reloaded exactly between K blocks, and each output element's
 * arithmetic does not depend on which x rows or weight rows share its tiles, so from
 * NUMLA_QBLOCK_AMX_F32_MIN_M rows a row's bits are the same at every M and thread count (they
 * differ from the avx512 path's, which fewer rows run, within both bounds).
 *
 * Tails: rows of x past M are zero in B (their C columns are not stored). An N that is not a
 * multiple of 16 takes its last A tile from rows [N - 16, N), overlapping the block before it,
 * and stores only the rows that block did not. K is a multiple of the 32-column block.
 *
 * Register blocking (kernels/x86/amx_bf16_block.h, shared with fp8's tiles): 4 accumulators C
 * (2 weight-row tiles x 2 x-row tiles: 32 n x 32 m), A in tiles 4/5, B in 6/7; per 32-column
 * block: 2 A loads, 4 B loads (hi, lo), 8 TDPBF16PS.
 * Cache blocking (kernels/blocking.h): the team packs x in chunks of up to
 * NUMLA_QBLOCK_AMX_F32_CHUNK rows (shared, in the workspace), then threads split N in pairs of
 * 16-row weight blocks; per pair and NUMLA_QBLOCK_AMX_F32_KC columns, the pair's A tiles are
 * decoded once and used by every x tile of the chunk (C loaded from and stored to the thread's
 * fp32 sums between K blocks), so the chunk's packed x slice for those columns stays in L2. */
#include "kernels/qblock_internal.h"

#include <immintrin.h>
#include <omp.h>

#include "kernels/x86/amx.h"
#include "kernels/x86/amx_bf16_block.h"
#include "kernels/x86/amx_tile_out.h"
#include "kernels/x86/bf16_pack_avx512.h"

/* The emulated test build (NUMLA_AMX_EMULATE: tests/CMakeLists.txt force-includes the tile
 * emulator) gets its own entry point name, so it links next to this file's real build; it
 * decodes with the real build's tile decoders (the type rows name them; they use no tiles). */
#ifdef NUMLA_AMX_EMULATE
#define NUMLA_QBLOCK_F32_AMX_ENTRY numla_qblock_forward_f32_amx_emulated
void numla_qblock_forward_f32_amx_emulated(const numla_qblock_weight *w, int64_t m, const float *x, int64_t ldx,
                                           float *y, int64_t ldy, int accumulate, void *ws, size_t ws_bytes);
#else
#define NUMLA_QBLOCK_F32_AMX_ENTRY numla_qblock_forward_f32_amx
#endif

enum {
    TR = 16,              /* rows of a tile */
    TK = 32,              /* bf16 k values per tile row: one 32-column block */
    TILE_ELEMS = TR * TK, /* bf16 elements of one 1 KiB tile */
    KT = NUMLA_QBLOCK_AMX_F32_KC / TK, /* 32-column blocks per K block */
    XT_MAX = NUMLA_QBLOCK_AMX_F32_CHUNK / TR,
};

#ifndef NUMLA_AMX_EMULATE
/* MXFP4: 16 rows' blocks (ld bytes apart) -> one A tile, row r = the block's 32 values in bf16:
 * the code book (twice e2m1) times ggml's half scale 2^(e - 128) in fp32, exact, then narrowed
 * exactly (at most 2 significant bits). */
void numla_qblock_bf16_tile_mxfp4_amx(const uint8_t *b, int64_t ld, uint16_t *dst)
{
    const __m512 book = _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)numla_qblock_mxfp4_values)));
    for (int r = 0; r < TR; r++) {
        const uint8_t *p = b + r * ld;
        const __m512 t = _mm512_mul_ps(book, _mm512_set1_ps(numla_qblock_e8m0_half_(p[0])));
        const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p + 1)));
        /* vpermps reads the index's low 4 bits: the low nibble as is, the high one shifted down */
        const __m512 lo = _mm512_permutexvar_ps(q, t), hi = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), t);
        _mm512_store_si512((void *)(dst + r * TK), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
}
#endif

/* x rows [i, i + 16) of 32-column block c as the hi and lo B tiles at dst (rows from M zero). */
static void numla_qblock_f32_amx_pack_tile_(const float *x, int64_t ldx, int64_t m, int64_t i, int64_t c,
                                            uint16_t *dst)
{
    __m512i hi[TR], lo[TR];
    for (int r = 0; r < TR; r++) {
        if (i + r >= m) {
            hi[r] = lo[r] = _mm512_setzero_si512();
            continue;
        }
        const float *s = x + (i + r) * ldx + c * TK;
        numla_x86_split_bf16(_mm512_loadu_ps(s), _mm512_loadu_ps(s + 16), &hi[r], &lo[r]);
    }
    numla_x86_transpose16(hi);
    numla_x86_transpose16(lo);
    for (int r = 0; r < TR; r++) {
        _mm512_store_si512((void *)(dst + r * TK), hi[r]);
        _mm512_store_si512((void *)(dst + TILE_ELEMS + r * TK), lo[r]);
    }
}

/* Weight blocks [b0, b1) x x rows [i0, i1) (xb: the chunk's packed rows from i0). a: the
 * thread's A tiles (2 · KT); sum: its fp32 sums (2 · XT_MAX tiles). */
static void numla_qblock_f32_amx_range_(const numla_qblock_weight *w, numla_qblock_bf16_tile_fn dec,
                                        const uint16_t *xb, int64_t i0, int64_t i1, int64_t b0, int64_t b1, float *y,
                                        int64_t ldy, int accumulate, uint16_t *a, float *sum)
{
    const int64_t ks = w->k / TK, xtiles = (i1 - i0 + TR - 1) / TR, bytes = numla_qblock_type_row_get(w->type)->info.bytes;
    for (int64_t b = b0; b < b1; b += 2) {
        const int nn = b + 1 < b1 ? 2 : 1;
        int64_t r[2];
        for (int j = 0; j < nn; j++)
            r[j] = numla_amx_block_row0(b + j, w->n);
        for (int64_t kb = 0; kb < ks; kb += KT) {
            const int nt = (int)(ks - kb < KT ? ks - kb : KT);
            for (int j = 0; j < nn; j++)
                for (int t = 0; t < nt; t++)
                    dec(w->q + r[j] * w->ld + (kb + t) * bytes, w->ld, a + (size_t)(j * KT + t) * TILE_ELEMS);
            for (int64_t xt = 0; xt < xtiles; xt += 2) {
                const int nm = xt + 1 < xtiles ? 2 : 1;
                const uint16_t *bx0 = xb + ((size_t)xt * (size_t)ks + (size_t)kb) * 2 * TILE_ELEMS;
                const uint16_t *bx1 = bx0 + (size_t)ks * 2 * TILE_ELEMS;
                float *s00 = sum + (size_t)xt * TR * TR, *s01 = s00 + TR * TR;
                float *s10 = s00 + (size_t)XT_MAX * TR * TR, *s11 = s10 + TR * TR;
                const int first = kb == 0;
                const size_t a1 = (size_t)KT * TILE_ELEMS;
                switch ((nn == 2) * 2 + (nm == 2)) { /* literal arguments: each case its own inlined loop */
                case 0: numla_amx_bf16_block(1, 1, 2, a, a1, bx0, bx1, nt, first, s00, s01, s10, s11); break;
                case 1: numla_amx_bf16_block(1, 2, 2, a, a1, bx0, bx1, nt, first, s00, s01, s10, s11); break;
                case 2: numla_amx_bf16_block(2, 1, 2, a, a1, bx0, bx1, nt, first, s00, s01, s10, s11); break;
                default: numla_amx_bf16_block(2, 2, 2, a, a1, bx0, bx1, nt, first, s00, s01, s10, s11); break;
                }
            }
        }
        for (int j = 0; j < nn; j++) {
            const int skip = (int)(TR * (b + j) - r[j]);
            for (int64_t xt = 0; xt < xtiles; xt++) {
                const int64_t m0 = i0 + TR * xt;
                const int mc = (int)(i1 - m0 < TR ? i1 - m0 : TR);
                numla_amx_tile_to_rows(sum + ((size_t)j * XT_MAX + (size_t)xt) * TR * TR, r[j], skip, m0, mc, y, ldy,
                                       accumulate);
            }
        }
    }
}

void NUMLA_QBLOCK_F32_AMX_ENTRY(const numla_qblock_weight *w, int64_t m, const float *x, int64_t ldx, float *y,
                                int64_t ldy, int accumulate, void *ws, size_t ws_bytes)
{
    const size_t xbytes = numla_qblock_amx_f32_x_bytes_(m, w->k), per = numla_qblock_amx_f32_thread_bytes_();
    if (!numla_qblock_amx_f32_applies_(w, m) || !ws || ws_bytes < 64 + xbytes + per) {
        numla_qblock_forward_avx512(w, m, x, ldx, y, ldy, accumulate, ws, ws_bytes);
        return;
    }
    const size_t fit = (ws_bytes - 64 - xbytes) / per;
    const int team = omp_get_max_threads(), nth = (size_t)team < fit ? team : (int)fit;
    uint8_t *base = (uint8_t *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
    uint16_t *xb = (uint16_t *)(void *)base;
    const numla_qblock_bf16_tile_fn dec = numla_qblock_type_row_get(w->type)->bf16_tile;
    const int64_t ks = w->k / TK, blocks = (w->n + TR - 1) / TR, pairs = (blocks + 1) / 2;
#pragma omp parallel num_threads(nth)
    {
        /* The shared configuration (16 x 64-byte tiles), loaded here rather than through
         * numla_amx_tiles_begin so that the emulated build runs the same instructions. */
        _tile_loadconfig(&numla_amx_tile_config);
        const int t = omp_get_thread_num();
        uint16_t *a = (uint16_t *)(void *)(base + xbytes + (size_t)t * per);
        float *sum = (float *)(void *)((uint8_t *)a + (size_t)2 * KT * TILE_ELEMS * sizeof(uint16_t));
        int64_t lo, hi;
        numla_qblock_split_(pairs, t, omp_get_num_threads(), &lo, &hi);
        const int64_t b1 = 2 * hi < blocks ? 2 * hi : blocks;
        for (int64_t i0 = 0; i0 < m; i0 += NUMLA_QBLOCK_AMX_F32_CHUNK) { /* every thread: the barriers */
            const int64_t i1 = i0 + NUMLA_QBLOCK_AMX_F32_CHUNK < m ? i0 + NUMLA_QBLOCK_AMX_F32_CHUNK : m;
            const int64_t xtiles = (i1 - i0 + TR - 1) / TR;
#pragma omp for schedule(static)
            for (int64_t u = 0; u < xtiles * ks; u++)
                numla_qblock_f32_amx_pack_tile_(x, ldx, m, i0 + u / ks * TR, u % ks, xb + (size_t)u * 2 * TILE_ELEMS);
            if (2 * lo < b1)
                numla_qblock_f32_amx_range_(w, dec, xb, i0, i1, 2 * lo, b1, y, ldy, accumulate, a, sum);
#pragma omp barrier
        }
        _tile_release();
    }
}
