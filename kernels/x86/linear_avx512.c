/* kernels/x86/linear_avx512.c — AVX-512 linear layer in exact fp32: bf16 weights are widened to
 * fp32 in registers (a shift for the even k, a mask for the odd k of each packed pair — exact)
 * and multiplied against fp32 x with FMA. Register tile: up to 12 rows of x x 2 panels (32
 * outputs). For M <= 12 (decode) each panel is streamed once over the full K, so the path runs at
 * memory bandwidth (one x row: a software prefetch NUMLA_LINEAR_ROW_AHEAD bytes ahead in each
 * panel's stream, which one core's hardware prefetcher alone did not keep at its share); for larger M the K loop is blocked (NUMLA_LINEAR_KC) so the two panels of a
 * tile stay in L1 while the rows of x stream from L2. avx512bf16 runs this path, and amx runs it
 * for the weights and M its tile GEMM does not take. */
#include <immintrin.h>
#include <omp.h>

#include "kernels/linear_internal.h"

#define MR NUMLA_LINEAR_AVX512_MR
#define NR NUMLA_LINEAR_NR

static inline __mmask16 numla_linear_avx512_mask_(int64_t nvalid)
{
    return nvalid >= NR ? (__mmask16)0xFFFF : nvalid <= 0 ? 0 : (__mmask16)((1u << nvalid) - 1u);
}

/* A tile's accumulators, even-k (acc) and odd-k (acc2) chains, at the start of its K range:
 * the previous K block's chains (carry_in), else y (load_c) or zero. The bf16 and f32 tiles
 * share it and numla_linear_avx512_acc_end_. */
static inline __attribute__((always_inline)) void
numla_linear_avx512_acc_start_(const int mr, const int np, __m512 acc[MR][2], __m512 acc2[MR][2],
                               const __mmask16 mk[2], const float *y, int64_t ldy, int load_c,
                               const __m512 *carry, int carry_in)
{
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 2
        for (int j = 0; j < np; j++) {
            if (carry && carry_in) {
                acc[i][j] = carry[(i * 2 + j) * 2];
                acc2[i][j] = carry[(i * 2 + j) * 2 + 1];
                continue;
            }
            acc[i][j] = load_c ? _mm512_maskz_loadu_ps(mk[j], y + i * ldy + j * NR) : _mm512_setzero_ps();
            acc2[i][j] = _mm512_setzero_ps();
        }
}

/* ... and at its end: the chains kept for the next K block (carry_out), else their sum (split:
 * the odd chains added last) stored into y. */
static inline __attribute__((always_inline)) void
numla_linear_avx512_acc_end_(const int mr, const int np, const int split, __m512 acc[MR][2], __m512 acc2[MR][2],
                             const __mmask16 mk[2], float *y, int64_t ldy, __m512 *carry, int carry_out)
{
    if (carry && carry_out) {
#pragma GCC unroll 16
        for (int i = 0; i < mr; i++)
#pragma GCC unroll 2
            for (int j = 0; j < np; j++) {
                carry[(i * 2 + j) * 2] = acc[i][j];
                carry[(i * 2 + j) * 2 + 1] = acc2[i][j];
            }
        return;
    }
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 2
        for (int j = 0; j < np; j++)
            _mm512_mask_storeu_ps(y + i * ldy + j * NR, mk[j],
                                  split ? _mm512_add_ps(acc[i][j], acc2[i][j]) : acc[i][j]);
}

/* y[0..mr)[0..16*np) (+)= x[0..mr)[k0..k1) . panel^T; b points at panel p0, k0 even.
 * split: a second accumulator set for the odd k, so a short tile (decode) has enough
 * independent FMA chains to cover the FMA latency. */
static inline __attribute__((always_inline)) void
numla_linear_avx512_tile_bf16_(const int mr, const int np, const int split, const uint16_t *b,
                               size_t pstride, int64_t k0, int64_t k1, const float *x, int64_t ldx, int64_t xsk,
                               float *y, int64_t ldy, int load_c, __mmask16 mk0, __mmask16 mk1,
                               __m512 *carry, int carry_in, int carry_out)
{
    __m512 acc[MR][2], acc2[MR][2];
    const __mmask16 mk[2] = {mk0, mk1};
    numla_linear_avx512_acc_start_(mr, np, acc, acc2, mk, y, ldy, load_c, carry, carry_in);
    const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);
    const int64_t kpair_end = k0 + ((k1 - k0) & ~(int64_t)1);
    for (int64_t kk = k0; kk < kpair_end; kk += 2) {
        const uint16_t *bk = b + (size_t)kk * NR;
        __m512 be[2], bo[2];
#pragma GCC unroll 2
        for (int j = 0; j < np && mr == 1; j++) /* decode: one stream per panel */
            _mm_prefetch((const char *)(bk + j * pstride) + NUMLA_LINEAR_ROW_AHEAD, _MM_HINT_T0);
#pragma GCC unroll 2
        for (int j = 0; j < np; j++) {
            __m512i v = _mm512_load_si512((const void *)(bk + j * pstride));
            be[j] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
            bo[j] = _mm512_castsi512_ps(_mm512_and_si512(v, hi));
        }
#pragma GCC unroll 16
        for (int i = 0; i < mr; i++) {
            const __m512 xe = _mm512_set1_ps(x[i * ldx + kk * xsk]);
            const __m512 xo = _mm512_set1_ps(x[i * ldx + (kk + 1) * xsk]);
#pragma GCC unroll 2
            for (int j = 0; j < np; j++) {
                acc[i][j] = _mm512_fmadd_ps(xe, be[j], acc[i][j]);
                if (split)
                    acc2[i][j] = _mm512_fmadd_ps(xo, bo[j], acc2[i][j]);
                else
                    acc[i][j] = _mm512_fmadd_ps(xo, bo[j], acc[i][j]);
            }
        }
    }
    if (kpair_end < k1) { /* odd K: the last pair holds one real k (its partner is zero padding) */
        const uint16_t *bk = b + (size_t)kpair_end * NR;
#pragma GCC unroll 2
        for (int j = 0; j < np; j++) {
            __m512 be = _mm512_castsi512_ps(
                _mm512_slli_epi32(_mm512_load_si512((const void *)(bk + j * pstride)), 16));
#pragma GCC unroll 16
            for (int i = 0; i < mr; i++)
                acc[i][j] = _mm512_fmadd_ps(_mm512_set1_ps(x[i * ldx + kpair_end * xsk]), be, acc[i][j]);
        }
    }
    numla_linear_avx512_acc_end_(mr, np, split, acc, acc2, mk, y, ldy, carry, carry_out);
}

static inline __attribute__((always_inline)) void
numla_linear_avx512_tile_f32_(const int mr, const int np, const int split, const float *b,
                              size_t pstride, int64_t k0, int64_t k1, const float *x, int64_t ldx, int64_t xsk,
                              float *y, int64_t ldy, int load_c, __mmask16 mk0, __mmask16 mk1,
                              __m512 *carry, int carry_in, int carry_out)
{
    __m512 acc[MR][2], acc2[MR][2];
    const __mmask16 mk[2] = {mk0, mk1};
    numla_linear_avx512_acc_start_(mr, np, acc, acc2, mk, y, ldy, load_c, carry, carry_in);
    int64_t k = k0;
    for (; k + 1 < k1; k += 2) {
        __m512 b0[2], b1[2];
#pragma GCC unroll 2
        for (int j = 0; j < np; j++) {
            b0[j] = _mm512_load_ps(b + (size_t)k * NR + j * pstride);
            b1[j] = _mm512_load_ps(b + (size_t)(k + 1) * NR + j * pstride);
            /* in registers: folded into each row's FMA, a 2-3-row tile read every weight
             * vector once per row and ran slower than 4 rows */
            __asm__("" : "+v"(b0[j]), "+v"(b1[j]));
        }
#pragma GCC unroll 16
        for (int i = 0; i < mr; i++) {
            const __m512 x0 = _mm512_set1_ps(x[i * ldx + k * xsk]);
            const __m512 x1 = _mm512_set1_ps(x[i * ldx + (k + 1) * xsk]);
#pragma GCC unroll 2
            for (int j = 0; j < np; j++) {
                acc[i][j] = _mm512_fmadd_ps(x0, b0[j], acc[i][j]);
                if (split)
                    acc2[i][j] = _mm512_fmadd_ps(x1, b1[j], acc2[i][j]);
                else
                    acc[i][j] = _mm512_fmadd_ps(x1, b1[j], acc[i][j]);
            }
        }
    }
    if (k < k1) {
#pragma GCC unroll 2
        for (int j = 0; j < np; j++) {
            __m512 b0 = _mm512_load_ps(b + (size_t)k * NR + j * pstride);
#pragma GCC unroll 16
            for (int i = 0; i < mr; i++)
                acc[i][j] = _mm512_fmadd_ps(_mm512_set1_ps(x[i * ldx + k * xsk]), b0, acc[i][j]);
        }
    }
    numla_linear_avx512_acc_end_(mr, np, split, acc, acc2, mk, y, ldy, carry, carry_out);
}

/* Fixed (mr, np) instantiations so every accumulator is a register. Split (two chains per
 * output): every tile of up to ROW_GROUP rows (2 panels) or 8 rows (1 panel), so up to ROW_GROUP
 * rows a row sums as the one-row tile does. */
_Static_assert(NUMLA_LINEAR_AVX512_ROW_GROUP <= 8, "a split tile of 1 panel covers ROW_GROUP rows");
#define NUMLA_LINEAR_AVX512_CASE(R)                                                              \
    case R:                                                                                      \
        if (bf16) {                                                                              \
            if (np == 2)                                                                         \
                numla_linear_avx512_tile_bf16_(R, 2, R <= NUMLA_LINEAR_AVX512_ROW_GROUP,         \
                                               (const uint16_t *)b, pstride, k0, k1, x, ldx, xsk, \
                                               y, ldy, load_c, mk0, mk1, NULL, 0, 0);            \
            else                                                                                 \
                numla_linear_avx512_tile_bf16_(R, 1, R <= 8, (const uint16_t *)b, pstride, k0, k1, \
                                               x, ldx, xsk, y, ldy, load_c, mk0, mk1, NULL, 0, 0); \
        } else {                                                                                 \
            if (np == 2)                                                                         \
                numla_linear_avx512_tile_f32_(R, 2, R <= NUMLA_LINEAR_AVX512_ROW_GROUP,          \
                                              (const float *)b, pstride, k0, k1, x, ldx, xsk, y, \
                                              ldy, load_c, mk0, mk1, NULL, 0, 0);                \
            else                                                                                 \
                numla_linear_avx512_tile_f32_(R, 1, R <= 8, (const float *)b, pstride, k0, k1, x, \
                                              ldx, xsk, y, ldy, load_c, mk0, mk1, NULL, 0, 0);   \
        }                                                                                        \
        break;

static void numla_linear_avx512_tile_(int mr, int np, int bf16, const void *b, size_t pstride,
                                      int64_t k0, int64_t k1, const float *x, int64_t ldx, int64_t xsk,
                                      float *y, int64_t ldy, int load_c, __mmask16 mk0,
                                      __mmask16 mk1)
{
    switch (mr) {
        NUMLA_LINEAR_AVX512_CASE(1)
        NUMLA_LINEAR_AVX512_CASE(2)
        NUMLA_LINEAR_AVX512_CASE(3)
        NUMLA_LINEAR_AVX512_CASE(4)
        NUMLA_LINEAR_AVX512_CASE(5)
        NUMLA_LINEAR_AVX512_CASE(6)
        NUMLA_LINEAR_AVX512_CASE(7)
        NUMLA_LINEAR_AVX512_CASE(8)
        NUMLA_LINEAR_AVX512_CASE(9)
        NUMLA_LINEAR_AVX512_CASE(10)
        NUMLA_LINEAR_AVX512_CASE(11)
        NUMLA_LINEAR_AVX512_CASE(12)
    default: break;
    }
}

/* The few-row tiles (up to NUMLA_LINEAR_AVX512_ROW_GROUP rows, every tile split): one output
 * row's sums are the one-row tile's, the even k in one accumulator chain and the odd k in a
 * second, added at the end, whatever the other rows. carry: the chains between K blocks. */
#define NUMLA_LINEAR_AVX512_ROWS_CASE(R)                                                         \
    case R:                                                                                      \
        if (bf16) {                                                                              \
            if (np == 2)                                                                         \
                numla_linear_avx512_tile_bf16_(R, 2, 1, (const uint16_t *)b, pstride, k0, k1, x, \
                                               ldx, 1, y, ldy, load_c, mk0, mk1, carry, cin, cout); \
            else                                                                                 \
                numla_linear_avx512_tile_bf16_(R, 1, 1, (const uint16_t *)b, pstride, k0, k1, x, \
                                               ldx, 1, y, ldy, load_c, mk0, mk1, carry, cin, cout); \
        } else {                                                                                 \
            if (np == 2)                                                                         \
                numla_linear_avx512_tile_f32_(R, 2, 1, (const float *)b, pstride, k0, k1, x, ldx, \
                                              1, y, ldy, load_c, mk0, mk1, carry, cin, cout);     \
            else                                                                                 \
                numla_linear_avx512_tile_f32_(R, 1, 1, (const float *)b, pstride, k0, k1, x, ldx, \
                                              1, y, ldy, load_c, mk0, mk1, carry, cin, cout);     \
        }                                                                                        \
        break;

static void numla_linear_avx512_tile_rows_(int mr, int np, int bf16, const void *b, size_t pstride,
                                           int64_t k0, int64_t k1, const float *x, int64_t ldx,
                                           float *y, int64_t ldy, int load_c, __mmask16 mk0,
                                           __mmask16 mk1, __m512 *carry, int cin, int cout)
{
    _Static_assert(NUMLA_LINEAR_AVX512_ROW_GROUP == 6, "the cases below");
    switch (mr) {
        NUMLA_LINEAR_AVX512_ROWS_CASE(1)
        NUMLA_LINEAR_AVX512_ROWS_CASE(2)
        NUMLA_LINEAR_AVX512_ROWS_CASE(3)
        NUMLA_LINEAR_AVX512_ROWS_CASE(4)
        NUMLA_LINEAR_AVX512_ROWS_CASE(5)
        NUMLA_LINEAR_AVX512_ROWS_CASE(6)
    default: break;
    }
}

/* M in (ROW_GROUP, MR]: ceil(M / ROW_GROUP) groups of as even a size as they can be (7 rows:
 * 4 + 3, not 6 + 1: a group of few rows is bound by the FMA latency, not by its FMAs), each in
 * the few-row tiles' order, over K blocks of NUMLA_LINEAR_KC that the groups share (a block of
 * the two panels stays in L1, bf16, or L2, f32), so the weights are read from memory once and
 * every row gets the bits it gets alone (kernels/linear.h). */
static void numla_linear_avx512_row_groups_(const numla_linear_weight *w, int64_t m, const float *x,
                                            int64_t ldx, float *y, int64_t ldy, int accumulate,
                                            int64_t p0, int64_t p1)
{
    enum { G = NUMLA_LINEAR_AVX512_ROW_GROUP, NG = (MR + G - 1) / G };
    const int bf16 = w->dtype == NUMLA_DTYPE_BF16;
    const size_t pe = numla_linear_panel_elems(w);
    const size_t es = bf16 ? 2 : 4;
    const int64_t ng = (m + G - 1) / G;
    __m512 carry[NG][G * 2 * 2];
    for (int64_t p = p0; p < p1; p += 2) {
        const int np = p + 1 < p1 ? 2 : 1;
        const int64_t n0 = p * NR;
        const __mmask16 mk0 = numla_linear_avx512_mask_(w->n - n0);
        const __mmask16 mk1 = numla_linear_avx512_mask_(w->n - n0 - NR);
        const void *b = (const char *)w->packed + (size_t)p * pe * es;
        for (int64_t k0 = 0; k0 < w->k; k0 += NUMLA_LINEAR_KC) {
            const int64_t k1 = k0 + NUMLA_LINEAR_KC < w->k ? k0 + NUMLA_LINEAR_KC : w->k;
            for (int64_t g = 0, i0 = 0; g < ng; i0 += m / ng + (g < m % ng), g++)
                numla_linear_avx512_tile_rows_((int)(m / ng + (g < m % ng)), np, bf16, b, pe, k0,
                                               k1, x + i0 * ldx, ldx, y + i0 * ldy + n0, ldy,
                                               accumulate, mk0, mk1, carry[g], k0 > 0, k1 < w->k);
        }
    }
}

size_t numla_linear_workspace_avx512(const numla_linear_weight *w, int64_t m, int num_threads)
{
    (void)num_threads; /* one x pack shared by the team */
    if (m <= MR)
        return 0;
    /* + 64: forward aligns the start itself, so callers need not. */
    return (size_t)((m + MR - 1) / MR) * MR * (size_t)w->k * sizeof(float) + 64;
}

void numla_linear_avx512_pack_x(int64_t m, int64_t k, const float *x, int64_t ldx, float *xp, int ith,
                                int nth)
{
    int64_t b0, b1;
    numla_linear_split((m + MR - 1) / MR, ith, nth, &b0, &b1);
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
                                                             12, 13, 14, 15),
                                           _mm512_set1_epi32(MR));
    for (int64_t b = b0; b < b1; b++) {
        float *dst = xp + (size_t)b * (size_t)k * MR;
        for (int64_t i = b * MR; i < m && i < (b + 1) * MR; i++)
            for (int64_t c = 0; c < k; c += 16) {
                const __mmask16 mk = numla_linear_avx512_mask_(k - c);
                const __m512 v = _mm512_maskz_loadu_ps(mk, x + i * ldx + c);
                _mm512_mask_i32scatter_ps(dst + (size_t)c * MR + (size_t)(i - b * MR), mk, idx, v, 4);
            }
    }
}

void numla_linear_avx512_panels(const numla_linear_weight *w, int64_t m, const float *x, int64_t ldx,
                                const float *xp, float *y, int64_t ldy, int accumulate, int64_t p0,
                                int64_t p1)
{
    if (!xp && m > NUMLA_LINEAR_AVX512_ROW_GROUP) {
        numla_linear_avx512_row_groups_(w, m, x, ldx, y, ldy, accumulate, p0, p1);
        return;
    }
    const int bf16 = w->dtype == NUMLA_DTYPE_BF16;
    const size_t pe = numla_linear_panel_elems(w);
    const size_t es = bf16 ? 2 : 4;
    /* M <= ROW_GROUP: one tile covers all of M, split like the one-row tile: stream each panel
     * once over the whole K. */
    const int64_t kc = m <= MR ? w->k : NUMLA_LINEAR_KC;
    for (int64_t k0 = 0; k0 < w->k; k0 += kc) {
        const int64_t k1 = k0 + kc < w->k ? k0 + kc : w->k;
        const int load_c = accumulate || k0 > 0;
        for (int64_t p = p0; p < p1; p += 2) {
            const int np = p + 1 < p1 ? 2 : 1;
            const int64_t n0 = p * NR;
            const __mmask16 mk0 = numla_linear_avx512_mask_(w->n - n0);
            const __mmask16 mk1 = numla_linear_avx512_mask_(w->n - n0 - NR);
            const void *b = (const char *)w->packed + (size_t)p * pe * es;
            for (int64_t i0 = 0; i0 < m; i0 += MR) {
                const int mr = (int)(m - i0 < MR ? m - i0 : MR);
                if (xp)
                    numla_linear_avx512_tile_(mr, np, bf16, b, pe, k0, k1,
                                              xp + (size_t)(i0 / MR) * (size_t)w->k * MR, 1, MR,
                                              y + i0 * ldy + n0, ldy, load_c, mk0, mk1);
                else
                    numla_linear_avx512_tile_(mr, np, bf16, b, pe, k0, k1, x + i0 * ldx, ldx, 1,
                                              y + i0 * ldy + n0, ldy, load_c, mk0, mk1);
            }
        }
    }
}

void numla_linear_forward_avx512(const numla_linear_weight *w, int64_t m, const float *x,
                                 int64_t ldx, float *y, int64_t ldy, int accumulate, void *workspace)
{
    const int64_t panels = numla_linear_panels(w->n);
    const int64_t pairs = (panels + 1) / 2;
    float *xp = m > MR ? (float *)(((uintptr_t)workspace + 63) & ~(uintptr_t)63) : NULL;
#pragma omp parallel
    {
        const int ith = omp_get_thread_num(), nth = omp_get_num_threads();
        if (xp) {
            numla_linear_avx512_pack_x(m, w->k, x, ldx, xp, ith, nth);
#pragma omp barrier
        }
        int64_t lo, hi;
        numla_linear_split(pairs, ith, nth, &lo, &hi);
        const int64_t p1 = 2 * hi < panels ? 2 * hi : panels;
        if (2 * lo < p1)
            numla_linear_avx512_panels(w, m, x, ldx, xp, y, ldy, accumulate, 2 * lo, p1);
    }
}
