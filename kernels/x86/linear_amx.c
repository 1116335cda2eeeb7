/* kernels/x86/linear_amx.c — AMX-BF16 GEMM for bf16 weights, the amx linear level, when the
 * CPU and OS allow tiles (the entry's needs, kernels/isa.c), K is a multiple of 32 and M is large enough
 * (NUMLA_LINEAR_AMX_MIN_M); other weights and M run the avx512 path.
 *
 * Precision: split-bf16 activations. Each fp32 x is written as hi + lo, hi = bf16(x) and
 * lo = bf16(x - hi) (round to nearest even), and y = W·hi + W·lo, both products on the tiles.
 * Weights are exact bf16, so bf16 x bf16 products are exact and the tiles sum them in fp32;
 * the only error beyond an fp32 sum is lo's rounding, |x - hi - lo| <= 2^-17 |x| (attained
 * near x = 1 + 2^-9 + 2^-17, where lo's rounding is a tie). So
 * |y - y_exact| <= (2^-17 + (2K + 2) 2^-24 (1 + 2^-8)) · Σ|x w| (2K products summed in
 * fp32): the error class of an fp32 GEMM, where plain bf16 x would add 2^-8 · Σ|x w|. It costs
 * twice the tile work of plain bf16 x, which is still far faster than any AVX-512 GEMM on a CPU
 * with tiles (docs/linear.md).
 * Tiles flush denormal results, like vdpbf16ps.
 *
 * B operand: the packed weight panels are already in the tile layout. Panel p stores, for each
 * k-pair kk, its 16 rows' pairs as 64 bytes (kernels/linear_internal.h), so 16 consecutive kk
 * (32 k) of one panel are one contiguous 1 KiB B tile (16 rows of 64 bytes, stride 64).
 * A operand: x packed per call into the workspace as 1 KiB tiles, (ceil(M/16), K/32, 2, 16, 32)
 * bf16 — block of 16 rows, k-block of 32, hi then lo — so a tile load is one sequential 1 KiB.
 *
 * Register blocking: 4 accumulators C (2 row tiles x 2 panels, 32 x 32 fp32), A in tiles 4/5,
 * B in 6/7. Per k-block: 6 tile loads for 8 TDPBF16PS, ordered hi(rows 0-15), hi(16-31),
 * lo(0-15), lo(16-31) so the two products into one C are three instructions apart.
 * Cache blocking: with one row block (M <= 32) each C runs over the whole K and every weight
 * byte is read once (bandwidth-bound, like the GEMV). With more rows, K is cut into
 * NUMLA_LINEAR_AMX_KC blocks and N into NUMLA_LINEAR_AMX_NC panels: the thread's B block (NC
 * panels x KC) and the block's C stay in L2 across the row blocks; the next k-block's B tiles
 * are prefetched into L1 while the current one computes (docs/linear.md). When a
 * thread's packed x fits NUMLA_LINEAR_AMX_PAIR_X_BYTES (an expert's 33-128 rows), it instead
 * runs pair-major over all of K: a panel pair's W comes from memory once and from L2 for its
 * other row blocks, and with three or more row blocks the next pair's W is prefetched into L2 a
 * few lines per k-block, so the weight stream keeps going during the tile work instead of
 * adding to it (docs/linear.md).
 * Threads split N (panel pairs) when there are enough panels, else the 32-row blocks of M; when
 * all rows' x is too large for the pair-major order but a share of the rows is not, they split
 * both (numla_linear_amx_row_groups_). */
/* The emulated test build (NUMLA_AMX_EMULATE: tests/CMakeLists.txt force-includes the tile
 * emulator) gets its own names, so it links next to this file's real build (suite
 * amx_hardware compares the two). */
#ifdef NUMLA_AMX_EMULATE
#define numla_linear_amx_applies numla_linear_amx_applies_emulated
#define numla_linear_forward_amx numla_linear_forward_amx_emulated
#define numla_linear_workspace_amx numla_linear_workspace_amx_emulated
#endif

#include <immintrin.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/linear_internal.h"
#include "kernels/x86/amx.h"
#include "kernels/x86/bf16_pack_avx512.h"

enum {
    TR = 16,                 /* rows of a tile */
    TKB = 32,                /* k values (bf16) per tile row */
    TILE_ELEMS = TR * TKB,   /* bf16 elements of one 1 KiB tile */
};

/* An L2 prefetch stream spread over a block's k-blocks: `lines` cache lines per k-block from
 * cur (and as many at cur + twin, the pair's second panel, when twin is not 0) up to end. */
typedef struct {
    const char *cur, *end;
    size_t twin;
    int lines;
} numla_linear_amx_l2pf;

int numla_linear_amx_applies(const numla_linear_weight *w, int64_t m)
{
    return w->dtype == NUMLA_DTYPE_BF16 && m >= NUMLA_LINEAR_AMX_MIN_M && w->k % TKB == 0;
}

/* Bytes of packed x for `rows` rows: whole 16-row tiles of K values, hi and lo bf16. */
static int64_t numla_linear_amx_x_bytes_(int64_t rows, int64_t k)
{
    return (rows + TR - 1) / TR * TR * k * 2 /* hi, lo */ * 2 /* bytes */;
}

size_t numla_linear_workspace_amx(const numla_linear_weight *w, int64_t m, int num_threads)
{
    (void)num_threads; /* packed x is shared by the team */
    return (size_t)numla_linear_amx_x_bytes_(m, w->k) + 64;
}

/* Thread ith's share of the 16-row blocks of x as hi/lo bf16 tiles (rows past M are zeros). */
static void numla_linear_amx_pack_x_(int64_t m, int64_t k, const float *x, int64_t ldx,
                                     uint16_t *xp, int ith, int nth)
{
    const int64_t kb = k / TKB;
    int64_t b0, b1;
    numla_linear_split((m + TR - 1) / TR, ith, nth, &b0, &b1);
    for (int64_t b = b0; b < b1; b++)
        for (int r = 0; r < TR; r++) {
            const int64_t i = b * TR + r;
            for (int64_t c = 0; c < kb; c++) {
                uint16_t *hi = xp + ((size_t)(b * kb + c) * 2) * TILE_ELEMS + (size_t)r * TKB;
                uint16_t *lo = hi + TILE_ELEMS;
                if (i >= m) {
                    _mm512_storeu_si512((void *)hi, _mm512_setzero_si512());
                    _mm512_storeu_si512((void *)lo, _mm512_setzero_si512());
                    continue;
                }
                const float *s = x + i * ldx + c * TKB;
                __m512i h, l;
                numla_x86_split_bf16(_mm512_loadu_ps(s), _mm512_loadu_ps(s + 16), &h, &l);
                _mm512_storeu_si512((void *)hi, h);
                _mm512_storeu_si512((void *)lo, l);
            }
        }
}

/* C tile t (16 rows x 16 fp32) <- y block, or zeros. full: all 16 rows and columns valid. */
static inline __attribute__((always_inline)) void
numla_linear_amx_load_c_(const int t, const float *y, int64_t ldy, int rows, int cols, int load,
                         float *scratch)
{
    if (!load) {
        if (t == 0)
            _tile_zero(0);
        else if (t == 1)
            _tile_zero(1);
        else if (t == 2)
            _tile_zero(2);
        else
            _tile_zero(3);
        return;
    }
    const void *src = y;
    size_t stride = (size_t)ldy * sizeof(float);
    if (rows < TR || cols < 16) {
        memset(scratch, 0, TR * 16 * sizeof(float));
        for (int r = 0; r < rows; r++)
            memcpy(scratch + r * 16, y + r * ldy, (size_t)cols * sizeof(float));
        src = scratch;
        stride = 64;
    }
    if (t == 0)
        _tile_loadd(0, src, stride);
    else if (t == 1)
        _tile_loadd(1, src, stride);
    else if (t == 2)
        _tile_loadd(2, src, stride);
    else
        _tile_loadd(3, src, stride);
}

static inline __attribute__((always_inline)) void
numla_linear_amx_store_c_(const int t, float *y, int64_t ldy, int rows, int cols, float *scratch)
{
    const int direct = rows == TR && cols == 16;
    void *dst = direct ? (void *)y : (void *)scratch;
    const size_t stride = direct ? (size_t)ldy * sizeof(float) : 64;
    if (t == 0)
        _tile_stored(0, dst, stride);
    else if (t == 1)
        _tile_stored(1, dst, stride);
    else if (t == 2)
        _tile_stored(2, dst, stride);
    else
        _tile_stored(3, dst, stride);
    if (!direct)
        for (int r = 0; r < rows; r++)
            memcpy(y + r * ldy, scratch + r * 16, (size_t)cols * sizeof(float));
}

/* Block of NM row tiles (1 or 2) x NN panels (1 or 2), k-blocks [c0, c1):
 * y[0..rows)[0..cols) (+)= x rows · W panels. a0/a1: the row tiles' packed x (k-block 0);
 * b0/b1: the panels (k-pair 0). */
static inline __attribute__((always_inline)) void
numla_linear_amx_block_(const int NM, const int NN, const int PF, const uint16_t *a0, const uint16_t *a1,
                        const uint16_t *b0, const uint16_t *b1, int64_t c0, int64_t c1, float *y,
                        int64_t ldy, int rows, int cols, int load, float *scratch,
                        numla_linear_amx_l2pf *l2)
{
    const int r0 = rows < TR ? rows : TR, r1 = rows - TR;
    const int n0 = cols < 16 ? cols : 16, n1 = cols - 16;
    numla_linear_amx_load_c_(0, y, ldy, r0, n0, load, scratch);
    if (NN > 1)
        numla_linear_amx_load_c_(1, y + 16, ldy, r0, n1, load, scratch);
    if (NM > 1) {
        numla_linear_amx_load_c_(2, y + TR * ldy, ldy, r1, n0, load, scratch);
        if (NN > 1)
            numla_linear_amx_load_c_(3, y + TR * ldy + 16, ldy, r1, n1, load, scratch);
    }
    for (int64_t c = c0; c < c1; c++) {
        const uint16_t *ah0 = a0 + (size_t)c * 2 * TILE_ELEMS;
        if (PF) { /* next k-block's B tiles, L2 -> L1, while this one computes */
            const char *n0 = (const char *)(b0 + (size_t)(c + 1) * TILE_ELEMS);
            const char *n1 = (const char *)(b1 + (size_t)(c + 1) * TILE_ELEMS);
            for (int l = 0; l < 16; l++) {
                _mm_prefetch(n0 + 64 * l, _MM_HINT_T0);
                if (NN > 1)
                    _mm_prefetch(n1 + 64 * l, _MM_HINT_T0);
            }
        }
        for (int l = 0; l < l2->lines && l2->cur < l2->end; l++, l2->cur += 64) {
            _mm_prefetch(l2->cur, _MM_HINT_T1);
            if (l2->twin)
                _mm_prefetch(l2->cur + l2->twin, _MM_HINT_T1);
        }
        _tile_loadd(6, b0 + (size_t)c * TILE_ELEMS, 64);
        if (NN > 1)
            _tile_loadd(7, b1 + (size_t)c * TILE_ELEMS, 64);
        _tile_loadd(4, ah0, 64);
        _tile_dpbf16ps(0, 4, 6);
        if (NN > 1)
            _tile_dpbf16ps(1, 4, 7);
        if (NM > 1) {
            const uint16_t *ah1 = a1 + (size_t)c * 2 * TILE_ELEMS;
            _tile_loadd(5, ah1, 64);
            _tile_dpbf16ps(2, 5, 6);
            if (NN > 1)
                _tile_dpbf16ps(3, 5, 7);
            _tile_loadd(4, ah0 + TILE_ELEMS, 64);
            _tile_dpbf16ps(0, 4, 6);
            if (NN > 1)
                _tile_dpbf16ps(1, 4, 7);
            _tile_loadd(5, ah1 + TILE_ELEMS, 64);
            _tile_dpbf16ps(2, 5, 6);
            if (NN > 1)
                _tile_dpbf16ps(3, 5, 7);
        } else {
            _tile_loadd(5, ah0 + TILE_ELEMS, 64);
            _tile_dpbf16ps(0, 5, 6);
            if (NN > 1)
                _tile_dpbf16ps(1, 5, 7);
        }
    }
    numla_linear_amx_store_c_(0, y, ldy, r0, n0, scratch);
    if (NN > 1)
        numla_linear_amx_store_c_(1, y + 16, ldy, r0, n1, scratch);
    if (NM > 1) {
        numla_linear_amx_store_c_(2, y + TR * ldy, ldy, r1, n0, scratch);
        if (NN > 1)
            numla_linear_amx_store_c_(3, y + TR * ldy + 16, ldy, r1, n1, scratch);
    }
}

/* Rows [i0, i1) (i0 a multiple of 32) x panels [p0, p1) of y, k-blocks [c0, c1). */
static void numla_linear_amx_range_(const numla_linear_weight *w, const uint16_t *xp, float *y,
                                    int64_t ldy, int64_t i0, int64_t i1, int64_t p0, int64_t p1,
                                    int64_t c0, int64_t c1, int load, float *scratch,
                                    numla_linear_amx_l2pf *l2)
{
    const size_t pe = numla_linear_panel_elems(w);
    const int64_t kb = w->k / TKB;
    const uint16_t *packed = (const uint16_t *)w->packed;
    for (int64_t i = i0; i < i1; i += 2 * TR) {
        const int rows = (int)(i1 - i < 2 * TR ? i1 - i : 2 * TR);
        const uint16_t *a0 = xp + (size_t)(i / TR) * (size_t)kb * 2 * TILE_ELEMS;
        const uint16_t *a1 = a0 + (size_t)kb * 2 * TILE_ELEMS;
        for (int64_t p = p0; p < p1; p += 2) {
            const int64_t n0 = p * NUMLA_LINEAR_NR;
            const int64_t left = w->n - n0;
            const int cols = (int)(left < 32 ? left : 32);
            const uint16_t *b0 = packed + (size_t)p * pe, *b1 = b0 + pe;
            float *yb = y + i * ldy + n0;
            const int nn = p + 1 < p1 ? 2 : 1, nm = rows > TR ? 2 : 1;
            if (nm == 2 && nn == 2)
                numla_linear_amx_block_(2, 2, 1, a0, a1, b0, b1, c0, c1, yb, ldy, rows, cols, load, scratch, l2);
            else if (nm == 2)
                numla_linear_amx_block_(2, 1, 1, a0, a1, b0, b1, c0, c1, yb, ldy, rows, cols, load, scratch, l2);
            else if (nn == 2)
                numla_linear_amx_block_(1, 2, 1, a0, a1, b0, b1, c0, c1, yb, ldy, rows, cols, load, scratch, l2);
            else
                numla_linear_amx_block_(1, 1, 1, a0, a1, b0, b1, c0, c1, yb, ldy, rows, cols, load, scratch, l2);
        }
    }
}

/* One thread's rows [i0, i1) x panels [p0, p1), all of K. */
static void numla_linear_amx_part_(const numla_linear_weight *w, int64_t m, const uint16_t *xp,
                                   float *y, int64_t ldy, int accumulate, int64_t i0, int64_t i1,
                                   int64_t p0, int64_t p1)
{
    float scratch[TR * 16] __attribute__((aligned(64)));
    const int64_t kb = w->k / TKB;
    numla_linear_amx_l2pf l2 = {0};
    if (m <= 2 * TR) { /* one row block: C stays in tiles over all of K, W read once */
        numla_linear_amx_range_(w, xp, y, ldy, i0, i1, p0, p1, 0, kb, accumulate, scratch, &l2);
        return;
    }
    if (numla_linear_amx_x_bytes_(i1 - i0, w->k) <= NUMLA_LINEAR_AMX_PAIR_X_BYTES) {
        /* Pair-major: the thread's packed x stays in L2; each panel pair's W is read from memory
         * by the first row block and from L2 by the rest. With three or more row blocks the
         * next pair's W is prefetched into L2, ceil(16 / row blocks) lines per panel and
         * k-block (with two it slows the pair's own stream: docs/linear.md). */
        const size_t pe = numla_linear_panel_elems(w);
        const uint16_t *packed = (const uint16_t *)w->packed;
        const int64_t nrb = (i1 - i0 + 2 * TR - 1) / (2 * TR);
        for (int64_t p = p0; p < p1; p += 2) {
            const int64_t pq = p + 2 < p1 ? p + 2 : p1;
            l2 = (numla_linear_amx_l2pf){0};
            if (pq < p1 && nrb >= 3) {
                l2.cur = (const char *)(packed + (size_t)pq * pe);
                l2.end = l2.cur + (size_t)kb * TILE_ELEMS * 2;
                l2.twin = pq + 1 < p1 ? pe * 2 : 0;
                l2.lines = (int)((16 + nrb - 1) / nrb);
            }
            for (int64_t i = i0; i < i1; i += 2 * TR) {
                const int64_t ie = i + 2 * TR < i1 ? i + 2 * TR : i1;
                numla_linear_amx_range_(w, xp, y, ldy, i, ie, p, pq, 0, kb, accumulate, scratch,
                                        &l2);
            }
        }
        return;
    }
    const int64_t kc = NUMLA_LINEAR_AMX_KC / TKB, nc = NUMLA_LINEAR_AMX_NC;
    for (int64_t pn = p0; pn < p1; pn += nc) {
        const int64_t pe = pn + nc < p1 ? pn + nc : p1;
        for (int64_t c = 0; c < kb; c += kc) {
            const int64_t ce = c + kc < kb ? c + kc : kb;
            for (int64_t i = i0; i < i1; i += 2 * TR) {
                const int64_t ie = i + 2 * TR < i1 ? i + 2 * TR : i1;
                numla_linear_amx_range_(w, xp, y, ldy, i, ie, pn, pe, c, ce, accumulate || c > 0,
                                        scratch, &l2);
            }
        }
    }
}

/* Row groups of the team: 2 when all M rows' packed x exceeds NUMLA_LINEAR_AMX_PAIR_X_BYTES
 * but half of the 32-row blocks fit it (an expert's ~130-250 rows at K = 2048) and the team
 * splits evenly in two, so every thread runs pair-major on half the rows and part of N; else 1
 * (threads split N, or M when N is too narrow). Each group reads all of W, which these
 * compute-bound shapes hide (docs/linear.md, "Two row groups"). More groups (larger M) would multiply the weight traffic, so the KC/NC
 * blocks keep those. */
static int numla_linear_amx_row_groups_(int64_t m, int64_t k, int64_t rblocks, int nth)
{
    if (m <= 2 * TR || nth < 2 || nth % 2 || rblocks < 2 ||
        numla_linear_amx_x_bytes_(m, k) <= NUMLA_LINEAR_AMX_PAIR_X_BYTES)
        return 1;
    return numla_linear_amx_x_bytes_((rblocks + 1) / 2 * 2 * TR, k) <= NUMLA_LINEAR_AMX_PAIR_X_BYTES
               ? 2
               : 1;
}

void numla_linear_forward_amx(const numla_linear_weight *w, int64_t m, const float *x, int64_t ldx,
                              float *y, int64_t ldy, int accumulate, void *workspace)
{
    const int64_t panels = numla_linear_panels(w->n);
    const int64_t pairs = (panels + 1) / 2, rblocks = (m + 2 * TR - 1) / (2 * TR);
    uint16_t *xp = (uint16_t *)(((uintptr_t)workspace + 63) & ~(uintptr_t)63);
#pragma omp parallel
    {
        const int ith = omp_get_thread_num(), nth = omp_get_num_threads();
        numla_linear_amx_pack_x_(m, w->k, x, ldx, xp, ith, nth);
        numla_amx_tiles_begin();
#pragma omp barrier
        int64_t lo, hi;
        const int groups = numla_linear_amx_row_groups_(m, w->k, rblocks, nth);
        if (groups > 1) { /* groups of rows x parts of N */
            int64_t r0, r1;
            numla_linear_split(rblocks, ith % groups, groups, &r0, &r1);
            numla_linear_split(pairs, ith / groups, nth / groups, &lo, &hi);
            const int64_t i1 = r1 * 2 * TR < m ? r1 * 2 * TR : m, p1 = 2 * hi < panels ? 2 * hi : panels;
            if (r0 * 2 * TR < i1 && 2 * lo < p1)
                numla_linear_amx_part_(w, m, xp, y, ldy, accumulate, r0 * 2 * TR, i1, 2 * lo, p1);
        } else if (pairs >= 2 * nth || rblocks < nth) { /* split N in panel pairs */
            numla_linear_split(pairs, ith, nth, &lo, &hi);
            const int64_t p1 = 2 * hi < panels ? 2 * hi : panels;
            if (2 * lo < p1)
                numla_linear_amx_part_(w, m, xp, y, ldy, accumulate, 0, m, 2 * lo, p1);
        } else { /* few panels, many rows: split M in 32-row blocks */
            numla_linear_split(rblocks, ith, nth, &lo, &hi);
            const int64_t i1 = hi * 2 * TR < m ? hi * 2 * TR : m;
            if (lo * 2 * TR < i1)
                numla_linear_amx_part_(w, m, xp, y, ldy, accumulate, lo * 2 * TR, i1, 0, panels);
        }
        numla_amx_tiles_end();
    }
}
