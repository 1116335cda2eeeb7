/* kernels/x86/qlinear_wide_amx.c — fp8-block weights (e4m3, 128 x 128 fp32 scales) widened to
 * bf16 per tile on AMX-BF16 tiles (TDPBF16PS): the amx level of kernels/qlinear.c for fp8 and
 * int8-row when numla_qlinear_amx_wide_applies (N >= 16; fp8 from NUMLA_QLINEAR_AMX_WIDE_MIN_M
 * rows; int8-row at every M from NUMLA_QLINEAR_AMX_ROW_MIN_WEIGHTS weights, which this entry
 * hands to kernels/x86/qlinear_int8row_amx.c); the other shapes run the avx512 variant, called
 * directly.
 *
 * The unit test qlinear_fp8_amx_emu builds this file against the tile emulator
 * tests/support/amx_emulate.h (NUMLA_AMX_EMULATE renames the entry point) and checks it against
 * a double-precision reference on the dequantized weights within the bound below on any CPU;
 * amx_hardware checks that the real tiles give the emulated build's bits. Speed:
 * docs/linear.md.
 *
 * It computes Yᵀ = W · Xᵀ, so the weights are the A operand: an A tile is 16 weight rows x 32 k.
 * The packed weights stay 1 byte ((n, kp) e4m3, kernels/qlinear_internal.h); each A tile is
 * converted into a small L1 buffer as bf16 of the weight times 2^-8: the byte's 7 magnitude
 * bits shifted left by 7 are an fp16 of that value (subnormals included), widened exactly to
 * fp32 and narrowed exactly to bf16 (<= 4 significant bits). Every e4m3 value, the subnormals
 * m · 2^-9 included, is then a bf16 normal number (>= 2^-17), so the tiles' denormals-are-zero
 * never touches a weight. The 2^8 goes into the block scale (a power of two: exact).
 * B operand: x split into hi + lo bf16 (hi = bf16(x), lo = bf16(x - hi), round to nearest even,
 * as kernels/x86/linear_amx.c), packed per call into the workspace: for 16-row block mb and
 * 32-k block c, two 1 KiB tiles (hi, lo) of 16 k-pairs x (16 rows x 2 bf16),
 *   B[kk][2·mm + b] = x[16·mb + mm][32·c + 2·kk + b],   zero past M and past K,
 * built by a 16 x 16 transpose of 32-bit words (kernels/x86/bf16_pack_avx512.h).
 * Block scales: one C per 128-wide k block (4 k tiles x hi, lo = 8 TDPBF16PS into each C), then
 * sum += C · (256 · s[grid row of that C row][block]) in fp32 registers, one scale per C row: a
 * C row is one weight row, so a tile whose 16 rows straddle two grid rows (a shard whose row0
 * is not a multiple of 16, or the overlapping last tile) needs nothing special, and no scale is
 * ever folded into a bf16 weight.
 *
 * Precision (u = 2^-24): the products of w with each piece are exact in fp32 (bf16 x bf16) and
 * the tiles add at most 2·128 of them per block in fp32. The split leaves |x - hi - lo| <=
 * 2^-17 |x|, so against the dequantized weights in exact arithmetic
 *   |y - y_exact| <= (2^-17 + (2·min(K, 128) + K/128 + 2) u) · Σ_k |s w x|
 * (+ u |y| when accumulating). Not bit-identical to the ref and avx512 levels. Products or sums
 * below 2^-126 are flushed by the tiles (an absolute error under 2^-126 per term, i.e. none at
 * model scales).
 *
 * Tails: rows of x past M and k past K are zero in B (their C columns are not stored); the A
 * tiles of the last, partial 128-k block stop at the 32-k tile that holds K (the weight rows are
 * zero-padded to kp, so those bytes are zeros). An N that is not a multiple of 16 gets its last
 * A tile from rows [N - 16, N), overlapping the block before it, and stores only the rows that
 * block did not.
 *
 * Register blocking (kernels/x86/amx_bf16_block.h): 4 accumulators C (2 weight-row tiles x 2
 * x-row tiles: 32 n x 32 m), A in tiles 4/5, B in 6/7; per 32-k tile: 2 A loads, 4 B loads (hi,
 * lo), 8 TDPBF16PS.
 * Cache blocking: the team packs x in chunks of numla_qlinear_amx_wide_chunk rows (all of them
 * in the workspace, shared, so it stays in L2), then threads split N in pairs of 16-row weight
 * blocks. Per chunk and pair, per 128-k block: the pair's 8 A tiles are converted once (8 KiB)
 * and used by every x tile of the chunk; the pair's fp32 sums over the chunk (chunk x 32 floats)
 * stay in a stack buffer until the last block, then are scaled out into y by gathers. A larger
 * chunk amortizes the conversion over more tile products (chunk / 8 per A tile). */
#include <immintrin.h>
#include <omp.h>

#include "kernels/qlinear_internal.h"
#include "kernels/x86/amx.h"
#include "kernels/x86/amx_bf16_block.h"
#include "kernels/x86/amx_tile_out.h"
#include "kernels/x86/bf16_pack_avx512.h"

/* The emulated test build (NUMLA_AMX_EMULATE: tests/CMakeLists.txt force-includes the tile
 * emulator) gets its own entry point name, so it links next to this file's real build. */
#ifdef NUMLA_AMX_EMULATE
#define NUMLA_QLINEAR_AMX_WIDE_ENTRY numla_qlinear_forward_amx_wide_emulated
#define numla_qlinear_int8row_amx numla_qlinear_int8row_amx_emulated
void numla_qlinear_int8row_amx_emulated(const numla_qlinear_weight *w, int64_t m, const float *x, int64_t ldx,
                                        float *y, int64_t ldy, int accumulate, void *workspace);
void numla_qlinear_forward_amx_wide_emulated(const numla_qlinear_weight *w, int64_t m, const float *x,
                                            int64_t ldx, float *y, int64_t ldy, int accumulate,
                                            void *workspace);
#else
#define NUMLA_QLINEAR_AMX_WIDE_ENTRY numla_qlinear_forward_amx_wide
#endif

enum {
    TR = 16,                       /* rows of a tile */
    TK = 32,                       /* bf16 k values per tile row */
    TILE_ELEMS = TR * TK,          /* bf16 elements of one 1 KiB tile */
    KT_PER_BLOCK = NUMLA_QLINEAR_BLOCK / TK, /* 32-k tiles per 128-k scale block */
};

static inline __mmask16 numla_qlinear_wide_amx_mask_(int64_t k, int64_t c)
{
    return c >= k ? (__mmask16)0 : k - c >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (k - c)) - 1);
}

/* x rows [i, i + 16) of 32-k tile c as the hi and lo B tiles at dst (rows from M and k from K
 * are zeros). */
static void numla_qlinear_wide_amx_pack_tile_(const float *x, int64_t ldx, int64_t m, int64_t k,
                                             int64_t i, int64_t c, uint16_t *dst)
{
    __m512i hi[TR], lo[TR];
    const int64_t k0 = c * TK;
    const __mmask16 m0 = numla_qlinear_wide_amx_mask_(k, k0), m1 = numla_qlinear_wide_amx_mask_(k, k0 + 16);
    for (int r = 0; r < TR; r++) {
        if (i + r >= m) {
            hi[r] = lo[r] = _mm512_setzero_si512();
            continue;
        }
        const float *s = x + (i + r) * ldx + k0;
        numla_x86_split_bf16(_mm512_maskz_loadu_ps(m0, s), _mm512_maskz_loadu_ps(m1, s + 16), &hi[r], &lo[r]);
    }
    numla_x86_transpose16(hi);
    numla_x86_transpose16(lo);
    for (int r = 0; r < TR; r++) {
        _mm512_store_si512((void *)(dst + r * TK), hi[r]);
        _mm512_store_si512((void *)(dst + TILE_ELEMS + r * TK), lo[r]);
    }
}

/* 16 weight rows from a (stride kp), 32 e4m3 each -> one A tile of bf16 (value · 2^-8). */
static inline void numla_qlinear_wide_amx_widen_tile_(const int8_t *a, int64_t kp, uint16_t *dst)
{
    for (int r = 0; r < TR; r++) {
        __m512i h = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(const void *)(a + r * kp)));
        h = _mm512_and_si512(_mm512_slli_epi16(h, 7), _mm512_set1_epi16((short)0xBFFF));
        const __m512 f0 = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
        const __m512 f1 = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
        _mm512_store_si512((void *)(dst + r * TK), (__m512i)_mm512_cvtne2ps_pbh(f1, f0));
    }
}

/* sum (16 n x 16 m) (+)= c · sv[n], one fp32 scale per row (first: sum = c · sv). */
static inline void numla_qlinear_wide_amx_scale_add_(const float *c, const float *sv, float *sum, int first)
{
    for (int r = 0; r < TR; r++) {
        const __m512 v = _mm512_load_ps(c + r * TR), s = _mm512_set1_ps(sv[r]);
        _mm512_store_ps(sum + r * TR, first ? _mm512_mul_ps(v, s) : _mm512_fmadd_ps(v, s, _mm512_load_ps(sum + r * TR)));
    }
}

/* Weight blocks [b0, b1) x x rows [i0, i1) (i0 a multiple of 32; xb holds the chunk's packed
 * rows from i0). */
static void numla_qlinear_wide_amx_range_(const numla_qlinear_weight *w, const uint16_t *xb, int64_t i0,
                                         int64_t i1, int64_t b0, int64_t b1, float *y, int64_t ldy,
                                         int accumulate)
{
    uint16_t a[2 * KT_PER_BLOCK * TILE_ELEMS] __attribute__((aligned(64)));
    float c[4][TR * TR] __attribute__((aligned(64)));
    float sum[2][NUMLA_QLINEAR_AMX_WIDE_MAX_CHUNK / TR][TR * TR] __attribute__((aligned(64)));
    float sv[2][TR];
    const int64_t kp = w->kp, ks = (w->k + TK - 1) / TK;
    enum { P = 2 };
    const int64_t nkb = w->scale_cols; /* the scale grid's 128-k blocks */
    const int64_t xtiles = (i1 - i0 + TR - 1) / TR;
    for (int64_t b = b0; b < b1; b += 2) {
        const int nn = b + 1 < b1 ? 2 : 1;
        int64_t r[2];
        for (int j = 0; j < nn; j++)
            r[j] = numla_amx_block_row0(b + j, w->n);
        for (int64_t kb = 0; kb < nkb; kb++) {
            const int nt = (int)(ks - kb * KT_PER_BLOCK < KT_PER_BLOCK ? ks - kb * KT_PER_BLOCK : KT_PER_BLOCK);
            for (int j = 0; j < nn; j++) {
                for (int t = 0; t < nt; t++)
                    numla_qlinear_wide_amx_widen_tile_(w->q + r[j] * kp + kb * NUMLA_QLINEAR_BLOCK + t * TK, kp,
                                                      a + (size_t)(j * KT_PER_BLOCK + t) * TILE_ELEMS);
                for (int l = 0; l < TR; l++)
                    sv[j][l] = 256.0f * w->scales[numla_qlinear_grid_row(w, r[j] + l) * w->scale_cols + kb];
            }
            for (int64_t xt = 0; xt < xtiles; xt += 2) {
                const int nm = xt + 1 < xtiles ? 2 : 1;
                const uint16_t *bx0 = xb + ((size_t)xt * (size_t)ks + (size_t)kb * KT_PER_BLOCK) * P * TILE_ELEMS;
                const uint16_t *bx1 = bx0 + (size_t)ks * P * TILE_ELEMS;
                const int shape = (nn == 2) * 2 + (nm == 2);
                const size_t a1 = (size_t)KT_PER_BLOCK * TILE_ELEMS;
                switch (shape) { /* literal arguments: each case its own inlined loop */
                case 0: numla_amx_bf16_block(1, 1, P, a, a1, bx0, bx1, nt, 1, c[0], c[1], c[2], c[3]); break;
                case 1: numla_amx_bf16_block(1, 2, P, a, a1, bx0, bx1, nt, 1, c[0], c[1], c[2], c[3]); break;
                case 2: numla_amx_bf16_block(2, 1, P, a, a1, bx0, bx1, nt, 1, c[0], c[1], c[2], c[3]); break;
                default: numla_amx_bf16_block(2, 2, P, a, a1, bx0, bx1, nt, 1, c[0], c[1], c[2], c[3]); break;
                }
                for (int j = 0; j < nn; j++)
                    for (int h = 0; h < nm; h++)
                        numla_qlinear_wide_amx_scale_add_(c[2 * j + h], sv[j], sum[j][xt + h], kb == 0);
            }
        }
        for (int j = 0; j < nn; j++) {
            const int skip = (int)(TR * (b + j) - r[j]);
            for (int64_t xt = 0; xt < xtiles; xt++) {
                const int64_t m0 = i0 + TR * xt;
                const int mc = (int)(i1 - m0 < TR ? i1 - m0 : TR);
                numla_amx_tile_to_rows(sum[j][xt], r[j], skip, m0, mc, y, ldy, accumulate);
            }
        }
    }
}

void NUMLA_QLINEAR_AMX_WIDE_ENTRY(const numla_qlinear_weight *w, int64_t m, const float *x, int64_t ldx,
                                 float *y, int64_t ldy, int accumulate, void *workspace)
{
    if (!numla_qlinear_amx_wide_applies(w, m)) {
        numla_qlinear_forward_avx512(w, m, x, ldx, y, ldy, accumulate, workspace);
        return;
    }
    if (w->fmt == NUMLA_QLINEAR_INT8_ROW) {
        numla_qlinear_int8row_amx(w, m, x, ldx, y, ldy, accumulate, workspace);
        return;
    }
    uint16_t *xb = (uint16_t *)(void *)numla_qlinear_ws_xq(workspace); /* 64-aligned */
    const int64_t ks = (w->k + TK - 1) / TK, chunk = numla_qlinear_amx_wide_chunk(w);
    const int64_t blocks = (w->n + TR - 1) / TR, pairs = (blocks + 1) / 2;
#pragma omp parallel
    {
        /* The shared configuration (16 x 64-byte tiles), loaded here rather than through
         * numla_amx_tiles_begin so that the emulated build runs the same instructions. */
        _tile_loadconfig(&numla_amx_tile_config);
        int64_t lo, hi;
        numla_qlinear_split(pairs, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
        const int64_t b1 = 2 * hi < blocks ? 2 * hi : blocks;
        for (int64_t i0 = 0; i0 < m; i0 += chunk) { /* every thread: the barriers */
            const int64_t i1 = i0 + chunk < m ? i0 + chunk : m, xtiles = (i1 - i0 + TR - 1) / TR;
#pragma omp for schedule(static)
            for (int64_t t = 0; t < xtiles * ks; t++)
                numla_qlinear_wide_amx_pack_tile_(x, ldx, m, w->k, i0 + t / ks * TR, t % ks,
                                                 xb + (size_t)t * 2 * TILE_ELEMS);
            if (2 * lo < b1)
                numla_qlinear_wide_amx_range_(w, xb, i0, i1, 2 * lo, b1, y, ldy, accumulate);
#pragma omp barrier
        }
        _tile_release();
    }
}
