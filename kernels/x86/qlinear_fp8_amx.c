/* kernels/x86/qlinear_fp8_amx.c — fp8-block weights (e4m3, 128 x 128 block scales) on AMX-BF16
 * tiles (TDPBF16PS), M >= NUMLA_QLINEAR_AMX_WIDE_MIN_M and N >= 16: called by the amx level's
 * entry (kernels/x86/qlinear_wide_amx.c), on CPUs with AMX-BF16 and AVX512_VBMI (the entry's
 * needs).
 *
 * The unit test qlinear_fp8_amx_emu builds this file against the tile emulator
 * tests/support/amx_emulate.h (NUMLA_AMX_EMULATE renames the entry point) and checks it against
 * a double-precision reference on the dequantized weights within the bounds below on any CPU
 * with AVX512-BF16 and VBMI; amx_hardware checks that the real tiles give the emulated build's
 * bits. Speed: docs/linear.md.
 *
 * It computes Yᵀ = W · Xᵀ, so the weights are the A operand: an A tile is 16 weight rows x 32 k
 * of bf16. The packed weights stay 1 byte ((n, kp) e4m3, kernels/qlinear_internal.h); the A
 * tiles are widened into a per-thread L1 buffer two at a time from 64 bytes of a row: two
 * vpermi2b look up the bf16's low and high bytes (kernels/x86/fp8_bf16_lut.h) where the bytes
 * stand, the sign bit is copied onto the high byte, and an in-lane unpack of low and high bytes
 * gives each tile's words, so the two tiles of 64 k hold their k in the order
 * numla_fp8_amx_k_ names (x's tiles use the same order; a lone last tile of an odd number is
 * widened in k order, each byte doubled by vpermb first). Every e4m3 value, the subnormals
 * m · 2^-9 included, is then a normal bf16, so the tiles' denormals-are-zero never touches a
 * weight. Two ways to apply the block scales:
 *   * fp32 scales (DeepSeek-V2/V3's weight_scale_inv): one C per 128-wide k block (4 k tiles x
 *     hi, lo = 8 TDPBF16PS into each C), then sum += C · s[grid row of that C row][block] in
 *     fp32 registers, one scale per C row; a tile whose 16 rows straddle two grid rows needs
 *     nothing special, and no scale is folded into a bf16 weight.
 *   * power-of-two scales (numla_qlinear_weight.scale_pow2: DeepSeek-V4's E8M0 scales, V3.1's
 *     ue8m0): s · w is a normal bf16 exactly (the exponent added to each non-zero word), so
 *     the scale is folded into the A tile and each C runs over the whole K in fp32 on the
 *     tiles (stored and reloaded exactly every 128 columns, or every NUMLA_QLINEAR_AMX_FP8_KC
 *     in the slabs below), as the bf16 GEMM does: no per-block vector step.
 * B operand: x split into hi + lo bf16 (hi = bf16(x), lo = bf16(x - hi), round to nearest even,
 * as kernels/x86/linear_amx.c), packed per call into the workspace: for 16-row block mb and
 * 32-k block c, two 1 KiB tiles (hi, lo) of 16 k-pairs x (16 rows x 2 bf16),
 *   B[kk][2·mm + b] = x[16·mb + mm][κ(c, 2·kk + b)],   zero past M and past K,
 * κ the tiles' k order (numla_fp8_amx_k_: 64c' + 16·(q / 8) + 8h + q % 8 for tile 2c' + h),
 * built by a 16 x 16 transpose of 32-bit words (kernels/x86/bf16_pack_avx512.h). Which k
 * share a tile only orders the fp32 sums: the bounds below do not depend on it.
 *
 * Precision (u = 2^-24): the products of a weight (or s · weight) with each piece are exact in
 * fp32 (bf16 x bf16) and the split leaves |x - hi - lo| <= 2^-17 |x|, so against the
 * dequantized weights in exact arithmetic
 *   fp32 scales: |y - y_exact| <= (2^-17 + (2·min(K, 128) + K/128 + 2) u) · Σ_k |s w x|
 *   power-of-two scales: TDPBF16PS sums 16 pairs per lane with one rounding a step, adds the
 *     two lanes and then C (2 more), and C runs through 2·K/32 instructions, so a term passes
 *     at most K/16 + 18 roundings: |y - y_exact| <= (2^-17 + (K/16 + 18) u) · Σ_k |s w x|
 * (+ u |y| when accumulating). Not bit-identical to the ref and avx512 levels. Products or sums
 * below 2^-126 are flushed by the tiles (an absolute error under 2^-126 per term, i.e. none at
 * model scales). Each output element's arithmetic does not depend on which x rows or weight
 * rows share its tiles, nor on the chunking of M, so a row's bits are the same at every M from
 * NUMLA_QLINEAR_AMX_WIDE_MIN_M and every thread count.
 *
 * Tails: rows of x past M and k past K are zero in B (their C columns are not stored); the A
 * tiles of the last, partial 128-k block stop at the 32-k tile that holds K (the weight rows are
 * zero-padded to kp, so those bytes are zeros). An N that is not a multiple of 16 gets its last
 * A tile from rows [N - 16, N), overlapping the block before it, and stores only the rows that
 * block did not.
 *
 * Register blocking (K up to NUMLA_QLINEAR_AMX_FP8_SLAB_MIN_K): numla_amx_bf16_block_x1 of
 * kernels/x86/amx_bf16_block.h, 4 weight-row tiles x 1 x tile (64 n x 16 m): per 32-k tile the
 * x tile's two pieces are loaded once (from L2) for 4 A loads (from L1) and 8 TDPBF16PS, where
 * 2 x 2 tiles loaded 4 pieces from L2 for the same work; each C takes its products in the same
 * order, so the bits are those of the 2 x 2 block. The slabs below keep 2 x 2
 * (numla_amx_bf16_block).
 * Cache blocking (K up to NUMLA_QLINEAR_AMX_FP8_SLAB_MIN_K): the team packs x in chunks of
 * numla_qlinear_amx_wide_chunk rows (all of them in the workspace, shared, so it stays in L2),
 * then threads split N in groups of four 16-row weight blocks. A thread walks its groups' k
 * blocks (128 columns: one scale block) in order; each block's A tiles are widened once and used
 * by every x tile of the chunk. The widening of the next block is spread over the current
 * block's x tiles (two 16 KiB A buffers in L1), and the bytes of the block after that are
 * prefetched into L2 the same way (into L1 they were lost to the x tiles streaming through it
 * before they were widened). The group's fp32 sums over the chunk (chunk x 64 floats) stay in
 * a stack buffer until its last block, then go into y (numla_amx_blocks_out,
 * kernels/x86/amx_tile_out.h, the epilogue the int8 tile kernels share).
 * Where the time goes (docs/linear.md): on the AMX machine the tile products and the vector
 * work (widening, the fp32 scale step) did not overlap, so each costs its own time; the scale
 * step (a C store and 16 FMAs per 8 TDPBF16PS) and the widening (5 vector instructions per 64
 * weights, once per x chunk) are what the bf16 GEMM does not pay.
 * Larger K (numla_qlinear_amx_fp8_slabs): a chunk of all of K would hold only 32-64 rows, so
 * each A tile would serve 2-4 x tiles and widening would dominate. There the weights are
 * widened once per call, a slab of NUMLA_QLINEAR_AMX_FP8_KS columns at a time, into the
 * workspace (NUMLA_QLINEAR_AMX_FP8_NB rows at once; each thread widens and then reads only its
 * own pairs, so no barrier), x is packed whole (up to NUMLA_QLINEAR_AMX_FP8_X_ALL; more rows
 * take passes that widen again) and walked in L2 chunks of one slab's columns, and each slab's
 * partial sums go into y (the first as the call's output, the rest added): the rounding steps
 * per term stay inside both bounds above, and do not depend on M. */
#include <immintrin.h>
#include <omp.h>
#include <string.h>

#include "kernels/qlinear_internal.h"
#include "kernels/x86/amx.h"
#include "kernels/x86/amx_bf16_block.h"
#include "kernels/x86/amx_tile_out.h"
#include "kernels/x86/bf16_pack_avx512.h"
#include "kernels/x86/fp8_bf16_lut.h"

/* The emulated test build (NUMLA_AMX_EMULATE: tests/CMakeLists.txt force-includes the tile
 * emulator) gets its own entry point name, so it links next to this file's real build. */
#ifdef NUMLA_AMX_EMULATE
#define numla_qlinear_fp8_amx numla_qlinear_fp8_amx_emulated
void numla_qlinear_fp8_amx_emulated(const numla_qlinear_weight *w, int64_t m, const float *x, int64_t ldx, float *y,
                                    int64_t ldy, int accumulate, void *workspace);
#endif

#define NUMLA_FP8_AMX_FN __attribute__((target("avx512vbmi")))
#define NUMLA_FP8_AMX_INLINE static inline __attribute__((always_inline, target("avx512vbmi")))

enum {
    TR = 16,                                  /* rows of a tile */
    TK = 32,                                  /* bf16 k values per tile row */
    TILE = TR * TK,                           /* bf16 elements of one 1 KiB tile */
    KT_BLOCK = NUMLA_QLINEAR_BLOCK / TK,      /* 32-k tiles per 128-k scale block */
    KT_POW2 = NUMLA_QLINEAR_AMX_FP8_KC / TK,  /* 32-k tiles per C pass of a slab, power-of-two scales */
    XT_MAX = NUMLA_QLINEAR_AMX_WIDE_MAX_CHUNK / TR,
    GROUP = 4,                                /* weight tiles a chunk's x tile meets at once */
};
_Static_assert(NUMLA_QLINEAR_AMX_FP8_KC % NUMLA_QLINEAR_BLOCK == 0, "a k block holds whole scale blocks");

typedef struct {
    __m512i h0, h1, l0, l1, dup;
} numla_fp8_amx_lut;

/* 32 e4m3 bytes -> 32 bf16 in order; POW2: e, the power-of-two scale's exponent << 7 as a
 * 16-bit add, added to every non-zero word. */
NUMLA_FP8_AMX_INLINE __m512i numla_fp8_amx_widen32_(const int POW2, const int8_t *p, const numla_fp8_amx_lut *t,
                                                    __m512i e)
{
    const __m512i b = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)p));
    const __m512i d = _mm512_permutexvar_epi8(t->dup, b); /* word j: (b_j, b_j) */
    const __m512i hi = _mm512_permutex2var_epi8(t->h0, d, t->h1);
    const __m512i lo = _mm512_permutex2var_epi8(t->l0, d, t->l1);
    __m512i v = _mm512_mask_blend_epi8((__mmask64)0xAAAAAAAAAAAAAAAAull, lo, hi);
    v = _mm512_ternarylogic_epi32(v, d, _mm512_set1_epi16((short)0x8000), 0xF8); /* v | (d & sign) */
    return POW2 ? _mm512_mask_add_epi16(v, _mm512_test_epi16_mask(d, _mm512_set1_epi16(0x7F00)), v, e) : v;
}

/* One k block of a group of weight tiles: the A tiles to widen (or prefetch). */
typedef struct {
    int64_t p;              /* first weight tile of the group */
    int64_t r[GROUP];       /* first weight row of each 16-row tile */
    int nn;                 /* weight tiles (1 to GROUP) */
    int64_t t0;             /* first 32-k tile */
    int nt;                 /* 32-k tiles */
} numla_fp8_amx_blk;

/* The exponent add of row r (packed) over 32-k tile t, power-of-two scales; 0 otherwise. */
static inline short numla_fp8_amx_eadd_(const numla_qlinear_weight *w, int64_t r, int64_t t)
{
    if (!w->scale_pow2)
        return 0;
    uint32_t bits;
    memcpy(&bits, &w->scales[numla_qlinear_grid_row(w, r) * w->scale_cols + t / KT_BLOCK], 4);
    return (short)(((int)(bits >> 23) - 127) * 128);
}

/* 64 e4m3 bytes (32-k tiles 2g and 2g + 1) -> the two tiles' 32 bf16 each in their k order
 * (numla_fp8_amx_k_): word q of tile h is byte 16·(q / 8) + 8·h + q % 8. Each byte is looked up
 * where it stands (two vpermi2b), its sign copied onto the high byte, and one in-lane unpack per
 * tile interleaves low and high bytes: 4 shuffles per 64 weights where the in-order widening
 * takes 6 and two blends. POW2: e, the scale's exponent << 7, added to every non-zero word. */
NUMLA_FP8_AMX_INLINE void numla_fp8_amx_widen64_(const int POW2, const int8_t *p, const numla_fp8_amx_lut *t, __m512i e,
                                                 __m512i *v0, __m512i *v1)
{
    const __m512i b = _mm512_loadu_si512((const void *)p);
    const __m512i lo = _mm512_permutex2var_epi8(t->l0, b, t->l1);
    __m512i hi = _mm512_permutex2var_epi8(t->h0, b, t->h1);
    hi = _mm512_ternarylogic_epi32(hi, b, _mm512_set1_epi8((char)0x80), 0xF8); /* hi | (b & sign) */
    __m512i u0 = _mm512_unpacklo_epi8(lo, hi), u1 = _mm512_unpackhi_epi8(lo, hi);
    if (POW2) {
        const __m512i mag = _mm512_set1_epi16(0x7FFF);
        u0 = _mm512_mask_add_epi16(u0, _mm512_test_epi16_mask(u0, mag), u0, e);
        u1 = _mm512_mask_add_epi16(u1, _mm512_test_epi16_mask(u1, mag), u1, e);
    }
    *v0 = u0;
    *v1 = u1;
}

/* Weight row r's 32-k tiles [t0, t0 + nt) (t0 even: a k block's or a slab's first) widened into
 * dst (tile t at + t tiles), pairs of tiles in their k order, the lone last tile of an odd
 * number of tiles in k order (numla_fp8_amx_k_). */
NUMLA_FP8_AMX_INLINE void numla_fp8_amx_widen_row_(const numla_qlinear_weight *w, int64_t r, int64_t t0, int nt,
                                                   uint16_t *dst, const numla_fp8_amx_lut *lut)
{
    const int8_t *src = w->q + r * w->kp + t0 * TK;
    __m512i v0, v1;
    if (!w->scale_pow2) {
        const __m512i z = _mm512_setzero_si512();
        for (int t = 0; t + 1 < nt; t += 2) {
            numla_fp8_amx_widen64_(0, src + t * TK, lut, z, &v0, &v1);
            _mm512_store_si512((void *)(dst + (size_t)t * TILE), v0);
            _mm512_store_si512((void *)(dst + (size_t)(t + 1) * TILE), v1);
        }
        if (nt % 2)
            _mm512_store_si512((void *)(dst + (size_t)(nt - 1) * TILE),
                               numla_fp8_amx_widen32_(0, src + (nt - 1) * TK, lut, z));
        return;
    }
    __m512i e = _mm512_setzero_si512();
    for (int t = 0; t < nt; t += 2) { /* a pair never straddles a scale block (KT_BLOCK even) */
        if (t == 0 || (t0 + t) % KT_BLOCK == 0)
            e = _mm512_set1_epi16(numla_fp8_amx_eadd_(w, r, t0 + t));
        if (t + 1 == nt) {
            _mm512_store_si512((void *)(dst + (size_t)t * TILE), numla_fp8_amx_widen32_(1, src + t * TK, lut, e));
            break;
        }
        numla_fp8_amx_widen64_(1, src + t * TK, lut, e, &v0, &v1);
        _mm512_store_si512((void *)(dst + (size_t)t * TILE), v0);
        _mm512_store_si512((void *)(dst + (size_t)(t + 1) * TILE), v1);
    }
}

/* Rows [l0, l1) of the block's 16·nn (tile j = row / 16) into a: tile (j, t) at a + (j·kt + t)
 * tiles, kt the buffer's tiles per weight tile. */
NUMLA_FP8_AMX_INLINE void numla_fp8_amx_widen_rows_(const numla_qlinear_weight *w, const numla_fp8_amx_blk *b,
                                                   int l0, int l1, uint16_t *a, int kt,
                                                   const numla_fp8_amx_lut *lut)
{
    if (l1 > 16 * b->nn)
        l1 = 16 * b->nn;
    for (int row = l0; row < l1; row++) {
        const int j = row / TR, l = row % TR;
        numla_fp8_amx_widen_row_(w, b->r[j] + l, b->t0, b->nt, a + (size_t)j * kt * TILE + (size_t)l * TK, lut);
    }
}

/* Rows [l0, l1) of the block's bytes into L2 (64-byte lines; L1 would lose them to the x
 * tiles streaming through it before they are widened). */
static inline void numla_fp8_amx_prefetch_rows_(const numla_qlinear_weight *w, const numla_fp8_amx_blk *b, int l0,
                                                int l1)
{
    for (int row = l0; row < l1 && row < 16 * b->nn; row++) {
        const char *src = (const char *)(w->q + (b->r[row / TR] + row % TR) * w->kp + b->t0 * TK);
        for (int o = 0; o < b->nt * TK; o += 64)
            _mm_prefetch(src + o, _MM_HINT_T1);
    }
}

/* The 16 rows from r, 32-k tiles [t0, t0 + nt), widened into consecutive A tiles at a. */
static NUMLA_FP8_AMX_FN void numla_fp8_amx_widen_tiles_(const numla_qlinear_weight *w, int64_t r, int64_t t0, int nt,
                                                       uint16_t *a, const numla_fp8_amx_lut *lut)
{
    for (int l = 0; l < TR; l++)
        numla_fp8_amx_widen_row_(w, r + l, t0, nt, a + (size_t)l * TK, lut);
}

/* The k of word q (0-31) of 32-k tile c, ks tiles in all (numla_fp8_amx_k_): tiles pair up
 * within 64 k, tile 2g + h holding k = 64g + 16·(q / 8) + 8h + q % 8, the order in which
 * numla_fp8_amx_widen64_ lays out a 64-byte weight row; the last tile of an odd ks alone, in k
 * order, 32c + q. A and B agree on it, so each product is w[k] · x[k]; it decides only which
 * k share a TDPBF16PS lane pair and a tile (the order of the fp32 sums). */
static inline int64_t numla_fp8_amx_k_(int64_t c, int q, int64_t ks)
{
    if (ks % 2 && c == ks - 1)
        return TK * c + q;
    return 64 * (c / 2) + 16 * (q / 8) + 8 * (c % 2) + q % 8;
}

/* x rows [i, i + 16) of 32-k tile c (of ks) as the hi and lo B tiles at dst, k in the tile's
 * order (rows from M and k from K are zeros). */
static inline __mmask16 numla_fp8_amx_mask_(int64_t k, int64_t c)
{
    return c >= k ? (__mmask16)0 : k - c >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (k - c)) - 1);
}

static void numla_fp8_amx_pack_tile_(const float *x, int64_t ldx, int64_t m, int64_t k, int64_t i, int64_t c,
                                     int64_t ks, uint16_t *dst)
{
    __m512i hi[TR], lo[TR];
    const int alone = ks % 2 && c == ks - 1;
    /* in k order: 32 from k0; paired: four runs of 8 from k0, 16 apart */
    const int64_t k0 = alone ? TK * c : numla_fp8_amx_k_(c, 0, ks);
    const __mmask16 m0 = numla_fp8_amx_mask_(k, k0), m1 = numla_fp8_amx_mask_(k, k0 + 16);
    const __mmask16 m2 = numla_fp8_amx_mask_(k, k0 + 32), m3 = numla_fp8_amx_mask_(k, k0 + 48);
    for (int r = 0; r < TR; r++) {
        if (i + r >= m) {
            hi[r] = lo[r] = _mm512_setzero_si512();
            continue;
        }
        const float *s = x + (i + r) * ldx + k0;
        __m512 x0, x1;
        if (alone) {
            x0 = _mm512_maskz_loadu_ps(m0, s);
            x1 = _mm512_maskz_loadu_ps(m1, s + 16);
        } else {
            x0 = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_maskz_loadu_ps((__mmask8)m0, s)),
                                    _mm256_maskz_loadu_ps((__mmask8)m1, s + 16), 1);
            x1 = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_maskz_loadu_ps((__mmask8)m2, s + 32)),
                                    _mm256_maskz_loadu_ps((__mmask8)m3, s + 48), 1);
        }
        numla_x86_split_bf16(x0, x1, &hi[r], &lo[r]);
    }
    numla_x86_transpose16(hi);
    numla_x86_transpose16(lo);
    for (int r = 0; r < TR; r++) {
        _mm512_store_si512((void *)(dst + r * TK), hi[r]);
        _mm512_store_si512((void *)(dst + TILE + r * TK), lo[r]);
    }
}

/* sum (16 n x 16 m) (+)= c · sv[n], one fp32 scale per row (first: sum = c · sv). */
static inline void numla_fp8_amx_scale_add_(const float *c, const float *sv, float *sum, int first)
{
    for (int r = 0; r < TR; r++) {
        const __m512 v = _mm512_load_ps(c + r * TR), s = _mm512_set1_ps(sv[r]);
        _mm512_store_ps(sum + r * TR, first ? _mm512_mul_ps(v, s) : _mm512_fmadd_ps(v, s, _mm512_load_ps(sum + r * TR)));
    }
}

/* The block of the group from weight tile p (up to GROUP tiles below b1) at 32-k tile t0. */
static inline numla_fp8_amx_blk numla_fp8_amx_blk_at_(const numla_qlinear_weight *w, int64_t p, int64_t b1, int64_t t0,
                                                      int kt, int64_t ks)
{
    numla_fp8_amx_blk b;
    b.p = p;
    b.nn = (int)(b1 - p < GROUP ? b1 - p : GROUP);
    for (int j = 0; j < GROUP; j++)
        b.r[j] = numla_amx_block_row0(p + (j < b.nn ? j : 0), w->n);
    b.t0 = t0;
    b.nt = (int)(ks - t0 < kt ? ks - t0 : kt);
    return b;
}

/* The block after c in the thread's walk: the group's next k block, or the next group's first. */
static inline numla_fp8_amx_blk numla_fp8_amx_blk_next_(const numla_qlinear_weight *w, const numla_fp8_amx_blk *c,
                                                        int64_t b1, int kt, int64_t ks)
{
    return c->t0 + kt < ks ? numla_fp8_amx_blk_at_(w, c->p, b1, c->t0 + kt, kt, ks)
                           : numla_fp8_amx_blk_at_(w, c->p + GROUP, b1, 0, kt, ks);
}

/* The epilogue's out (numla_amx_blocks_out): tile (j, h) of sums[j][h] into y. */
typedef struct {
    float (*sum)[XT_MAX][TR * TR];
    float *y;
    int64_t ldy;
    int accumulate;
} numla_fp8_amx_out;

static inline void numla_fp8_amx_out_(void *ctx, int j, int64_t h, int64_t n0, int skip, int64_t m0, int mc)
{
    const numla_fp8_amx_out *o = ctx;
    numla_amx_tile_to_rows(o->sum[j][h], n0, skip, m0, mc, o->y, o->ldy, o->accumulate);
}

/* Weight blocks [b0, b1) x x rows [i0, i1) (xb holds the chunk's packed rows from i0), GROUP
 * weight tiles at a time, 128 k columns a block. */
static NUMLA_FP8_AMX_FN void numla_fp8_amx_range_(const numla_qlinear_weight *w, const uint16_t *xb, int64_t i0,
                                                 int64_t i1, int64_t b0, int64_t b1, float *y, int64_t ldy,
                                                 int accumulate)
{
    uint16_t a[2][GROUP * KT_BLOCK * TILE] __attribute__((aligned(64)));
    float c[GROUP][TR * TR] __attribute__((aligned(64)));
    float sum[GROUP][XT_MAX][TR * TR] __attribute__((aligned(64)));
    float sv[GROUP][TR];
    const numla_fp8_amx_lut lut = {
        _mm512_load_si512((const void *)numla_fp8_bf16_hi), _mm512_load_si512((const void *)(numla_fp8_bf16_hi + 64)),
        _mm512_load_si512((const void *)numla_fp8_bf16_lo), _mm512_load_si512((const void *)(numla_fp8_bf16_lo + 64)),
        _mm512_set_epi8(31, 31, 30, 30, 29, 29, 28, 28, 27, 27, 26, 26, 25, 25, 24, 24, 23, 23, 22, 22, 21, 21, 20, 20,
                        19, 19, 18, 18, 17, 17, 16, 16, 15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8, 7,
                        7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0)};
    const int pow2 = w->scale_pow2, kt = KT_BLOCK; /* 32-k tiles per k block */
    const int64_t ks = (w->k + TK - 1) / TK, nkb = (ks + kt - 1) / kt;
    const int64_t xtiles = (i1 - i0 + TR - 1) / TR;
    const int64_t total = (b1 - b0 + GROUP - 1) / GROUP * nkb; /* blocks of the walk */
    const size_t a1 = (size_t)kt * TILE;
    numla_fp8_amx_out out = {sum, y, ldy, accumulate};
    numla_fp8_amx_blk cur = numla_fp8_amx_blk_at_(w, b0, b1, 0, kt, ks);
    numla_fp8_amx_blk nx1 = numla_fp8_amx_blk_next_(w, &cur, b1, kt, ks), nx2;
    numla_fp8_amx_widen_rows_(w, &cur, 0, GROUP * TR, a[0], kt, &lut);
    if (total > 1)
        numla_fp8_amx_prefetch_rows_(w, &nx1, 0, GROUP * TR);
    for (int64_t n = 0; n < total; n++) {
        const int64_t kb = cur.t0 / KT_BLOCK; /* the scale column */
        const uint16_t *an = a[n % 2];
        const int have1 = n + 1 < total, have2 = n + 2 < total;
        nx2 = numla_fp8_amx_blk_next_(w, &nx1, b1, kt, ks);
        if (!pow2)
            for (int j = 0; j < cur.nn; j++)
                for (int l = 0; l < TR; l++)
                    sv[j][l] = w->scales[numla_qlinear_grid_row(w, cur.r[j] + l) * w->scale_cols + kb];
        for (int64_t xt = 0; xt < xtiles; xt++) {
            /* the next block's share of rows widened, the one after prefetched */
            const int l0 = (int)(GROUP * TR * xt / xtiles), l1 = (int)(GROUP * TR * (xt + 1) / xtiles);
            if (have1)
                numla_fp8_amx_widen_rows_(w, &nx1, l0, l1, a[(n + 1) % 2], kt, &lut);
            if (have2)
                numla_fp8_amx_prefetch_rows_(w, &nx2, l0, l1);
            const uint16_t *bx = xb + ((size_t)xt * (size_t)ks + (size_t)cur.t0) * 2 * TILE;
            /* fp32 scales: C over this block, then sum (+)= C · s; power-of-two: C is the sum */
            float *o0 = pow2 ? sum[0][xt] : c[0], *o1 = pow2 ? sum[1][xt] : c[1];
            float *o2 = pow2 ? sum[2][xt] : c[2], *o3 = pow2 ? sum[3][xt] : c[3];
            const int first = !pow2 || cur.t0 == 0;
            switch (cur.nn) { /* literal arguments: each case its own inlined loop */
            case 1: numla_amx_bf16_block_x1(1, an, a1, bx, cur.nt, first, o0, o1, o2, o3); break;
            case 2: numla_amx_bf16_block_x1(2, an, a1, bx, cur.nt, first, o0, o1, o2, o3); break;
            case 3: numla_amx_bf16_block_x1(3, an, a1, bx, cur.nt, first, o0, o1, o2, o3); break;
            default: numla_amx_bf16_block_x1(4, an, a1, bx, cur.nt, first, o0, o1, o2, o3); break;
            }
            if (!pow2)
                for (int j = 0; j < cur.nn; j++)
                    numla_fp8_amx_scale_add_(c[j], sv[j], sum[j][xt], cur.t0 == 0);
        }
        if (cur.t0 + kt >= ks) /* the group's last block */
            numla_amx_blocks_out(cur.p, cur.r, cur.nn, i0, i1, xtiles, numla_fp8_amx_out_, &out);
        cur = nx1;
        nx1 = nx2;
    }
}

/* Weight tiles [b0, b1) (a pair at a time; ab: their widened slab, tile b at ab + (b - b0) · st
 * tiles) x the chunk's rows [i0, i1) (xb: packed from row i0, ks tiles a row block) over the
 * slab's 32-k tiles [t0, t0 + nt): y (+)= the slab's partial sums (the call's first slab adds to
 * y only when accumulating). */
static void numla_fp8_amx_slab_range_(const numla_qlinear_weight *w, const uint16_t *ab, int64_t st, const uint16_t *xb,
                                 int64_t ks, int64_t i0, int64_t i1, int64_t b0, int64_t b1, int64_t t0, int nt,
                                 float *y, int64_t ldy, int accumulate)
{
    float c[4][TR * TR] __attribute__((aligned(64)));
    float sum[2][XT_MAX][TR * TR] __attribute__((aligned(64)));
    float sv[2][TR];
    enum { P = 2 };
    numla_fp8_amx_out out = {sum, y, ldy, accumulate || t0 > 0};
    const int pow2 = w->scale_pow2;
    const int kt = pow2 ? KT_POW2 : KT_BLOCK; /* 32-k tiles per C pass */
    const int64_t xtiles = (i1 - i0 + TR - 1) / TR, xpairs = (xtiles + 1) / 2;
    const size_t a1 = (size_t)st * TILE;
    for (int64_t b = b0; b < b1; b += 2) {
        const int nn = b + 1 < b1 ? 2 : 1;
        int64_t r[2];
        for (int j = 0; j < nn; j++)
            r[j] = numla_amx_block_row0(b + j, w->n);
        const uint16_t *ap = ab + (size_t)(b - b0) * a1;
        for (int t = 0; t < nt; t += kt) {
            const int ntb = nt - t < kt ? nt - t : kt, first = t == 0;
            const uint16_t *an = ap + (size_t)t * TILE;
            if (!pow2)
                for (int j = 0; j < nn; j++)
                    for (int l = 0; l < TR; l++)
                        sv[j][l] = w->scales[numla_qlinear_grid_row(w, r[j] + l) * w->scale_cols + (t0 + t) / KT_BLOCK];
            /* the next pass's A tiles (nn x kt tiles of 16 lines), L2 -> L1, a share per x pair */
            const int64_t next = t + kt < nt ? (int64_t)nn * (nt - t - kt < kt ? nt - t - kt : kt) * TR : 0;
            for (int64_t xp = 0; xp < xpairs; xp++) {
                const int64_t xt = 2 * xp;
                for (int64_t o = xp; o < next; o += xpairs) {
                    const int64_t per = next / nn; /* lines per weight tile */
                    _mm_prefetch((const char *)(an + (size_t)kt * TILE + (size_t)(o / per) * a1 + (size_t)(o % per) * TK),
                                 _MM_HINT_T0);
                }
                const int nm = xt + 1 < xtiles ? 2 : 1;
                const uint16_t *bx0 = xb + ((size_t)xt * (size_t)ks + (size_t)(t0 + t)) * P * TILE;
                const uint16_t *bx1 = bx0 + (size_t)ks * P * TILE;
                float *o0 = pow2 ? sum[0][xt] : c[0], *o1 = pow2 ? sum[0][xt + 1] : c[1];
                float *o2 = pow2 ? sum[1][xt] : c[2], *o3 = pow2 ? sum[1][xt + 1] : c[3];
                const int fc = !pow2 || first;
                switch ((nn == 2) * 2 + (nm == 2)) { /* literal arguments: each case its own inlined loop */
                case 0: numla_amx_bf16_block(1, 1, P, an, a1, bx0, bx1, ntb, fc, o0, o1, o2, o3); break;
                case 1: numla_amx_bf16_block(1, 2, P, an, a1, bx0, bx1, ntb, fc, o0, o1, o2, o3); break;
                case 2: numla_amx_bf16_block(2, 1, P, an, a1, bx0, bx1, ntb, fc, o0, o1, o2, o3); break;
                default: numla_amx_bf16_block(2, 2, P, an, a1, bx0, bx1, ntb, fc, o0, o1, o2, o3); break;
                }
                if (!pow2)
                    for (int j = 0; j < nn; j++)
                        for (int h = 0; h < nm; h++)
                            numla_fp8_amx_scale_add_(c[2 * j + h], sv[j], sum[j][xt + h], first);
            }
        }
        numla_amx_blocks_out(b, r, nn, i0, i1, xtiles, numla_fp8_amx_out_, &out);
    }
}

/* K past NUMLA_QLINEAR_AMX_FP8_SLAB_MIN_K: the weights widened a slab at a time, once per call
 * (x packed whole, up to numla_qlinear_amx_fp8_rows rows at once). */
static void numla_fp8_amx_slabs_(const numla_qlinear_weight *w, int64_t m, const float *x, int64_t ldx, float *y,
                                 int64_t ldy, int accumulate, void *workspace)
{
    const int64_t ks = (w->k + TK - 1) / TK, chunk = numla_qlinear_amx_fp8_slab_chunk();
    const int64_t st = NUMLA_QLINEAR_AMX_FP8_KS / TK, rows = numla_qlinear_amx_fp8_rows(w, m);
    const int64_t nbt = numla_qlinear_amx_fp8_nb(w) / TR; /* weight tiles widened at once */
    const int64_t blocks = (w->n + TR - 1) / TR;
    uint16_t *xb = (uint16_t *)(void *)numla_qlinear_ws_xq(workspace); /* 64-aligned */
    uint16_t *ab = xb + numla_qlinear_align64((size_t)rows * (size_t)ks * 128) / sizeof(uint16_t);
#pragma omp parallel
    {
        /* The shared configuration (16 x 64-byte tiles), loaded here rather than through
         * numla_amx_tiles_begin so that the emulated build runs the same instructions. */
        _tile_loadconfig(&numla_amx_tile_config);
        const numla_fp8_amx_lut lut = {
            _mm512_load_si512((const void *)numla_fp8_bf16_hi), _mm512_load_si512((const void *)(numla_fp8_bf16_hi + 64)),
            _mm512_load_si512((const void *)numla_fp8_bf16_lo), _mm512_load_si512((const void *)(numla_fp8_bf16_lo + 64)),
            _mm512_set_epi8(31, 31, 30, 30, 29, 29, 28, 28, 27, 27, 26, 26, 25, 25, 24, 24, 23, 23, 22, 22, 21, 21, 20,
                            20, 19, 19, 18, 18, 17, 17, 16, 16, 15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8,
                            8, 7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0)};
        for (int64_t s0 = 0; s0 < m; s0 += rows) { /* every thread: the barriers */
            const int64_t s1 = s0 + rows < m ? s0 + rows : m, xtiles = (s1 - s0 + TR - 1) / TR;
#pragma omp for schedule(static)
            for (int64_t t = 0; t < xtiles * ks; t++)
                numla_fp8_amx_pack_tile_(x, ldx, m, w->k, s0 + t / ks * TR, t % ks, ks, xb + (size_t)t * 2 * TILE);
            /* each thread widens and runs its own pairs of each block of nbt weight tiles */
            for (int64_t g0 = 0; g0 < blocks; g0 += nbt) {
                const int64_t g1 = g0 + nbt < blocks ? g0 + nbt : blocks, pairs = (g1 - g0 + 1) / 2;
                int64_t lo, hi;
                numla_qlinear_split(pairs, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
                const int64_t b0 = g0 + 2 * lo, b1 = g0 + 2 * hi < g1 ? g0 + 2 * hi : g1;
                for (int64_t t0 = 0; b0 < b1 && t0 < ks; t0 += st) {
                    const int nt = (int)(ks - t0 < st ? ks - t0 : st);
                    uint16_t *abt = ab + (size_t)(b0 - g0) * (size_t)st * TILE;
                    for (int64_t b = b0; b < b1; b++)
                        numla_fp8_amx_widen_tiles_(w, numla_amx_block_row0(b, w->n), t0, nt,
                                                   abt + (size_t)(b - b0) * (size_t)st * TILE, &lut);
                    for (int64_t i0 = s0; i0 < s1; i0 += chunk) {
                        const int64_t i1 = i0 + chunk < s1 ? i0 + chunk : s1;
                        numla_fp8_amx_slab_range_(w, abt, st, xb + (size_t)((i0 - s0) / TR) * (size_t)ks * 2 * TILE,
                                                  ks, i0, i1, b0, b1, t0, nt, y, ldy, accumulate);
                    }
                }
            }
#pragma omp barrier
        }
        _tile_release();
    }
}

void numla_qlinear_fp8_amx(const numla_qlinear_weight *w, int64_t m, const float *x, int64_t ldx, float *y,
                           int64_t ldy, int accumulate, void *workspace)
{
    if (numla_qlinear_amx_fp8_slabs(w)) {
        numla_fp8_amx_slabs_(w, m, x, ldx, y, ldy, accumulate, workspace);
        return;
    }
    uint16_t *xb = (uint16_t *)(void *)numla_qlinear_ws_xq(workspace); /* 64-aligned */
    const int64_t ks = (w->k + TK - 1) / TK, chunk = numla_qlinear_amx_wide_chunk(w);
    const int64_t blocks = (w->n + TR - 1) / TR, groups = (blocks + GROUP - 1) / GROUP;
#pragma omp parallel
    {
        /* The shared configuration (16 x 64-byte tiles), loaded here rather than through
         * numla_amx_tiles_begin so that the emulated build runs the same instructions. */
        _tile_loadconfig(&numla_amx_tile_config);
        int64_t lo, hi;
        numla_qlinear_split(groups, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
        const int64_t b1 = GROUP * hi < blocks ? GROUP * hi : blocks;
        for (int64_t i0 = 0; i0 < m; i0 += chunk) { /* every thread: the barriers */
            const int64_t i1 = i0 + chunk < m ? i0 + chunk : m, xtiles = (i1 - i0 + TR - 1) / TR;
#pragma omp for schedule(static)
            for (int64_t t = 0; t < xtiles * ks; t++)
                numla_fp8_amx_pack_tile_(x, ldx, m, w->k, i0 + t / ks * TR, t % ks, ks, xb + (size_t)t * 2 * TILE);
            if (GROUP * lo < b1)
                numla_fp8_amx_range_(w, xb, i0, i1, GROUP * lo, b1, y, ldy, accumulate);
#pragma omp barrier
        }
        _tile_release();
    }
}
