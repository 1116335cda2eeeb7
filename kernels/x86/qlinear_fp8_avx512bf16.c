/* kernels/x86/qlinear_fp8_avx512bf16.c — the fp8-block GEMV (M = 1 to 12) at the avx512bf16 level,
 * for CPUs with AVX512_VBMI as well (AMD Zen 4 and later; the table checks the CPUID bit,
 * NUMLA_CPU_VBMI): e4m3 widened to bf16 in registers and vdpbf16ps, instead of
 * widening to fp32 (vpmovsxbw, shift, vcvtph2ps) and fp32 FMA. 2 to NUMLA_QL16_MAX_M rows run
 * each row's GEMV arithmetic with every weight group widened once for all of them (x packed
 * once into the workspace, the weight rows taken a K-block at a time so that x stays in L1),
 * so a row's bits do not depend on M there. Other M run the avx512 variant.
 *
 * e4m3 -> bf16: the byte's low 7 bits index two 128-entry byte tables (vpermi2b, which ignores
 * the index's top bit) giving the bf16's high byte without the sign and its low byte; the
 * sign bit is copied over (vpternlogd) and vpunpck{l,h}bw pairs the bytes into words. Every
 * e4m3 value, subnormals included, is a normal bf16, so vdpbf16ps (which reads bf16
 * subnormals as zero) sees the exact weight. The unpack orders the 64 weights of a group as
 * {0-7, 16-23, 32-39, 48-55} and {8-15, 24-31, 40-47, 56-63}; x is packed once per thread in
 * that order.
 *
 * Numerics (kernels/qlinear.h): x (fp32) is split into bf16 hi + lo, |x - hi - lo| <= 2^-16 |x|
 * (each part rounds to nearest with 8 significant bits), and both parts multiply the exact
 * weights: the products are exact and summed in fp32, per 128-wide block, then times the
 * block's scale in fp32 as on every level. A row's bits do not depend on the thread count nor
 * on M up to NUMLA_QL16_MAX_M; they differ in the last bits from the avx512 variant's.
 */
#include "kernels/qlinear_internal.h"

#include <immintrin.h>
#include <omp.h>

#include "kernels/x86/fp8_bf16_lut.h"

#define NUMLA_QL16_FN __attribute__((target("avx512vbmi")))
_Static_assert(NUMLA_QL16_ROW_GROUP == 4, "numla_ql16_thread_rows' group sizes are 1 .. 4");
#define NUMLA_QL16_INLINE static inline __attribute__((always_inline, target("avx512vbmi")))

typedef struct numla_ql16_lut {
    __m512i h0, h1, l0, l1;
} numla_ql16_lut;

/* 64 e4m3 bytes -> 64 bf16 weights in the group order (w0, w1: see the file comment). */
NUMLA_QL16_INLINE void numla_ql16_widen(const int8_t *p, const numla_ql16_lut *t, __m512i *w0,
                                        __m512i *w1)
{
    const __m512i b = _mm512_loadu_si512((const void *)p);
    __m512i hi = _mm512_permutex2var_epi8(t->h0, b, t->h1);
    const __m512i lo = _mm512_permutex2var_epi8(t->l0, b, t->l1);
    hi = _mm512_ternarylogic_epi32(hi, b, _mm512_set1_epi8((char)0x80), 0xF8); /* hi | (b & 0x80) */
    *w0 = _mm512_unpacklo_epi8(lo, hi);
    *w1 = _mm512_unpackhi_epi8(lo, hi);
}

/* x[0, kp) (zero past k) as bf16 hi and lo in the group order: per 64 columns, 32 words
 * {0-7, 16-23, 32-39, 48-55} then 32 words {8-15, 24-31, 40-47, 56-63}. */
static NUMLA_QL16_FN void numla_ql16_pack_x(const float *x, int64_t k, int64_t kp, uint16_t *xh,
                                            uint16_t *xl)
{
    const __m512i i0 = _mm512_set_epi16(55, 54, 53, 52, 51, 50, 49, 48, 39, 38, 37, 36, 35, 34, 33, 32,
                                        23, 22, 21, 20, 19, 18, 17, 16, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i i1 = _mm512_add_epi16(i0, _mm512_set1_epi16(8));
    for (int64_t c = 0; c < kp; c += 64) {
        __m512 v[4];
        for (int i = 0; i < 4; i++) {
            const int64_t o = c + 16 * i, left = k - o;
            const __mmask16 mk = left >= 16 ? (__mmask16)0xFFFF
                                            : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1);
            v[i] = _mm512_maskz_loadu_ps(mk, x + o);
        }
        __m512i h[2], l[2];
        for (int i = 0; i < 2; i++) {
            const __m512bh hb = _mm512_cvtne2ps_pbh(v[2 * i + 1], v[2 * i]); /* words in order */
            const __m512 f0 = _mm512_cvtpbh_ps((__m256bh)_mm512_castsi512_si256((__m512i)hb));
            const __m512 f1 = _mm512_cvtpbh_ps((__m256bh)_mm512_extracti64x4_epi64((__m512i)hb, 1));
            h[i] = (__m512i)hb;
            l[i] = (__m512i)_mm512_cvtne2ps_pbh(_mm512_sub_ps(v[2 * i + 1], f1), _mm512_sub_ps(v[2 * i], f0));
        }
        _mm512_store_si512((void *)(xh + c), _mm512_permutex2var_epi16(h[0], i0, h[1]));
        _mm512_store_si512((void *)(xh + c + 32), _mm512_permutex2var_epi16(h[0], i1, h[1]));
        _mm512_store_si512((void *)(xl + c), _mm512_permutex2var_epi16(l[0], i0, l[1]));
        _mm512_store_si512((void *)(xl + c + 32), _mm512_permutex2var_epi16(l[0], i1, l[1]));
    }
}

/* Block b's 128 columns (two groups) of row wr into four chains (x hi, lo x two groups). */
NUMLA_QL16_INLINE void numla_ql16_block(const int8_t *wr, int64_t c0, const uint16_t *xh,
                                        const uint16_t *xl, const numla_ql16_lut *t,
                                        int64_t ngroups, __m512 a[4])
{
    for (int64_t g = 0; g < ngroups; g++) {
        const int64_t c = c0 + 64 * g;
        __m512i w0, w1;
        numla_ql16_widen(wr + c, t, &w0, &w1);
        a[0] = _mm512_dpbf16_ps(a[0], (__m512bh)w0, (__m512bh)_mm512_load_si512((const void *)(xh + c)));
        a[1] = _mm512_dpbf16_ps(a[1], (__m512bh)w1, (__m512bh)_mm512_load_si512((const void *)(xh + c + 32)));
        a[2] = _mm512_dpbf16_ps(a[2], (__m512bh)w0, (__m512bh)_mm512_load_si512((const void *)(xl + c)));
        a[3] = _mm512_dpbf16_ps(a[3], (__m512bh)w1, (__m512bh)_mm512_load_si512((const void *)(xl + c + 32)));
    }
}

/* y[r] for one row: NUMLA_QL16_BLOCKS blocks in flight, each its own four chains, each block's
 * sum times its scale added to the total in block order. */
NUMLA_QL16_INLINE float numla_ql16_row(const numla_qlinear_weight *w, int64_t r, const uint16_t *xh,
                                       const uint16_t *xl, const numla_ql16_lut *t, const int8_t *end)
{
    const int64_t B = NUMLA_QLINEAR_BLOCK, nb = (w->kp + B - 1) / B;
    const int8_t *wr = w->q + r * w->kp;
    const float *s = w->scales + numla_qlinear_grid_row(w, r) * w->scale_cols;
    __m512 tot = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + NUMLA_QL16_BLOCKS <= nb && (b + NUMLA_QL16_BLOCKS) * B <= w->kp; b += NUMLA_QL16_BLOCKS) {
        __m512 a[NUMLA_QL16_BLOCKS][4];
        for (int j = 0; j < NUMLA_QL16_BLOCKS; j++)
            for (int i = 0; i < 4; i++)
                a[j][i] = _mm512_setzero_ps();
        for (int64_t g = 0; g < 2; g++) {
            for (int j = 0; j < NUMLA_QL16_BLOCKS; j++) {
                const int8_t *pf = wr + (b + j) * B + 64 * g + NUMLA_QL16_AHEAD;
                if (pf < end)
                    _mm_prefetch((const char *)pf, _MM_HINT_T0);
            }
            for (int j = 0; j < NUMLA_QL16_BLOCKS; j++)
                numla_ql16_block(wr, (b + j) * B + 64 * g, xh, xl, t, 1, a[j]);
        }
        for (int j = 0; j < NUMLA_QL16_BLOCKS; j++) {
            const __m512 sum = _mm512_add_ps(_mm512_add_ps(a[j][0], a[j][1]), _mm512_add_ps(a[j][2], a[j][3]));
            tot = _mm512_fmadd_ps(sum, _mm512_set1_ps(s[b + j]), tot);
        }
    }
    for (; b < nb; b++) { /* the rest one block at a time; the last may be one group */
        __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        const int64_t c0 = b * B, groups = (w->kp - c0) / 64 < 2 ? (w->kp - c0) / 64 : 2;
        if (wr + c0 + NUMLA_QL16_AHEAD < end)
            _mm_prefetch((const char *)(wr + c0 + NUMLA_QL16_AHEAD), _MM_HINT_T0);
        numla_ql16_block(wr, c0, xh, xl, t, groups, a);
        const __m512 sum = _mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3]));
        tot = _mm512_fmadd_ps(sum, _mm512_set1_ps(s[b]), tot);
    }
    return _mm512_reduce_add_ps(tot);
}

/* y for rows r and r + 1 together: each x load feeds both rows, which halves the x traffic
 * from L2 once x (4 bytes a column) no longer fits L1 next to the weight stream. Each row's
 * chains, and the order its blocks' sums are added in, are numla_ql16_row's (two blocks in
 * flight a row instead of four), so every row has the same bits either way. */
NUMLA_QL16_INLINE void numla_ql16_row2(const numla_qlinear_weight *w, int64_t r, const uint16_t *xh,
                                       const uint16_t *xl, const numla_ql16_lut *t, const int8_t *end,
                                       float out[2])
{
    const int64_t B = NUMLA_QLINEAR_BLOCK, nb = (w->kp + B - 1) / B;
    const int8_t *wr[2] = {w->q + r * w->kp, w->q + (r + 1) * w->kp};
    const float *s[2] = {w->scales + numla_qlinear_grid_row(w, r) * w->scale_cols,
                         w->scales + numla_qlinear_grid_row(w, r + 1) * w->scale_cols};
    __m512 tot[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    int64_t b = 0;
    for (; b + 2 <= nb && (b + 2) * B <= w->kp; b += 2) {
        __m512 a[2][2][4];
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++)
                for (int c = 0; c < 4; c++)
                    a[i][j][c] = _mm512_setzero_ps();
        for (int64_t g = 0; g < 2; g++) {
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 2; j++) {
                    /* the next pair's rows at this column (rows are long here) */
                    const int8_t *pf = wr[i] + 2 * w->kp + (b + j) * B + 64 * g;
                    if (pf < end)
                        _mm_prefetch((const char *)pf, _MM_HINT_T0);
                }
            for (int j = 0; j < 2; j++) {
                const int64_t c = (b + j) * B + 64 * g;
                const __m512bh x0 = (__m512bh)_mm512_load_si512((const void *)(xh + c));
                const __m512bh x1 = (__m512bh)_mm512_load_si512((const void *)(xh + c + 32));
                const __m512bh x2 = (__m512bh)_mm512_load_si512((const void *)(xl + c));
                const __m512bh x3 = (__m512bh)_mm512_load_si512((const void *)(xl + c + 32));
                for (int i = 0; i < 2; i++) {
                    __m512i w0, w1;
                    numla_ql16_widen(wr[i] + c, t, &w0, &w1);
                    a[i][j][0] = _mm512_dpbf16_ps(a[i][j][0], (__m512bh)w0, x0);
                    a[i][j][1] = _mm512_dpbf16_ps(a[i][j][1], (__m512bh)w1, x1);
                    a[i][j][2] = _mm512_dpbf16_ps(a[i][j][2], (__m512bh)w0, x2);
                    a[i][j][3] = _mm512_dpbf16_ps(a[i][j][3], (__m512bh)w1, x3);
                }
            }
        }
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++) {
                const __m512 sum = _mm512_add_ps(_mm512_add_ps(a[i][j][0], a[i][j][1]),
                                                 _mm512_add_ps(a[i][j][2], a[i][j][3]));
                tot[i] = _mm512_fmadd_ps(sum, _mm512_set1_ps(s[i][b + j]), tot[i]);
            }
    }
    for (; b < nb; b++) /* the rest one block at a time, as numla_ql16_row */
        for (int i = 0; i < 2; i++) {
            __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
            const int64_t c0 = b * B, groups = (w->kp - c0) / 64 < 2 ? (w->kp - c0) / 64 : 2;
            numla_ql16_block(wr[i], c0, xh, xl, t, groups, a);
            const __m512 sum = _mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3]));
            tot[i] = _mm512_fmadd_ps(sum, _mm512_set1_ps(s[i][b]), tot[i]);
        }
    out[0] = _mm512_reduce_add_ps(tot[0]);
    out[1] = _mm512_reduce_add_ps(tot[1]);
}

/* Blocks [b0, b1) of weight row r for each of the m (1 .. NUMLA_QL16_ROW_GROUP, a constant after
 * inlining, so the 4 m chains and m totals stay in registers) x rows packed at xp (row i: hi at
 * xp + i·ld, lo at numla_ql16_lo_off words after it), carrying the rows' totals in tot: each x
 * row's chains, and the order its blocks' sums are added in, are numla_ql16_row's, so every row
 * has the one-row GEMV's bits; each weight group is widened once for the m rows. */
NUMLA_QL16_INLINE void numla_ql16_rows(const numla_qlinear_weight *w, int64_t r, const uint16_t *xp,
                                       int64_t ld, const int m, const numla_ql16_lut *t, const int8_t *end,
                                       int64_t b0, int64_t b1, __m512 *tot)
{
    const int64_t B = NUMLA_QLINEAR_BLOCK, kp = w->kp, lo = numla_ql16_lo_off(kp);
    const int8_t *wr = w->q + r * kp;
    const float *s = w->scales + numla_qlinear_grid_row(w, r) * w->scale_cols;
    __m512 tt[NUMLA_QL16_ROW_GROUP];
    for (int64_t i = 0; i < m; i++)
        tt[i] = tot[i];
    for (int64_t b = b0; b < b1; b++) {
        __m512 a[NUMLA_QL16_ROW_GROUP][4];
        for (int64_t i = 0; i < m; i++)
            for (int c = 0; c < 4; c++)
                a[i][c] = _mm512_setzero_ps();
        const int64_t c0 = b * B, groups = (kp - c0) / 64 < 2 ? (kp - c0) / 64 : 2;
        /* the same columns NUMLA_QL16_ROWS_AHEAD rows on (read that many slices later) */
        const int8_t *pf = wr + NUMLA_QL16_ROWS_AHEAD * kp + c0;
        if (pf + 64 * groups <= end) {
            _mm_prefetch((const char *)pf, _MM_HINT_T0);
            if (groups == 2)
                _mm_prefetch((const char *)(pf + 64), _MM_HINT_T0);
        }
        for (int64_t g = 0; g < groups; g++) {
            const int64_t c = c0 + 64 * g;
            __m512i w0, w1;
            numla_ql16_widen(wr + c, t, &w0, &w1);
            for (int64_t i = 0; i < m; i++) {
                const uint16_t *xh = xp + i * ld, *xl = xh + lo;
                a[i][0] = _mm512_dpbf16_ps(a[i][0], (__m512bh)w0, (__m512bh)_mm512_load_si512((const void *)(xh + c)));
                a[i][1] = _mm512_dpbf16_ps(a[i][1], (__m512bh)w1, (__m512bh)_mm512_load_si512((const void *)(xh + c + 32)));
                a[i][2] = _mm512_dpbf16_ps(a[i][2], (__m512bh)w0, (__m512bh)_mm512_load_si512((const void *)(xl + c)));
                a[i][3] = _mm512_dpbf16_ps(a[i][3], (__m512bh)w1, (__m512bh)_mm512_load_si512((const void *)(xl + c + 32)));
            }
        }
        for (int64_t i = 0; i < m; i++) {
            const __m512 sum = _mm512_add_ps(_mm512_add_ps(a[i][0], a[i][1]), _mm512_add_ps(a[i][2], a[i][3]));
            tt[i] = _mm512_fmadd_ps(sum, _mm512_set1_ps(s[b]), tt[i]);
        }
    }
    for (int64_t i = 0; i < m; i++)
        tot[i] = tt[i];
}

/* One thread's rows of y = W x for m = 2..NUMLA_QL16_MAX_M x rows packed at xp (rows ld words
 * apart). The rows go in runs of NUMLA_QL16_ROWS_RB, each run K-block by K-block
 * (numla_ql16_rows_kblocks: the m rows' packed x of a K-block stay in L1 while the run's weight
 * slices stream past), the runs' totals kept in T between K-blocks: x is read from L1, not L2,
 * once per weight row and x row. */
static NUMLA_QL16_FN __attribute__((noinline)) void numla_ql16_thread_rows(const numla_qlinear_weight *w,
                                                                          int64_t m, const uint16_t *xp,
                                                                          float *y, int64_t ldy,
                                                                          int accumulate, int ith, int nth)
{
    enum { RB = NUMLA_QL16_ROWS_RB, G = NUMLA_QL16_ROW_GROUP };
    const numla_ql16_lut t = {
        _mm512_load_si512((const void *)numla_fp8_bf16_hi), _mm512_load_si512((const void *)(numla_fp8_bf16_hi + 64)),
        _mm512_load_si512((const void *)numla_fp8_bf16_lo), _mm512_load_si512((const void *)(numla_fp8_bf16_lo + 64))};
    int64_t r0, r1;
    numla_qlinear_split(w->n, ith, nth, &r0, &r1);
    const int8_t *end = w->q + r1 * w->kp;
    const int64_t nb = (w->kp + NUMLA_QLINEAR_BLOCK - 1) / NUMLA_QLINEAR_BLOCK, kb = numla_ql16_rows_kblocks(m),
                  ld = numla_ql16_x_ld(w->kp);
    __m512 T[RB * NUMLA_QL16_MAX_M];
    for (int64_t rb0 = r0; rb0 < r1; rb0 += RB) {
        const int64_t rb1 = rb0 + RB < r1 ? rb0 + RB : r1;
        for (int64_t j = 0; j < (rb1 - rb0) * m; j++)
            T[j] = _mm512_setzero_ps();
        for (int64_t b0 = 0; b0 < nb; b0 += kb) {
            const int64_t b1 = b0 + kb < nb ? b0 + kb : nb;
            for (int64_t r = rb0; r < rb1; r++)
                for (int64_t i0 = 0; i0 < m; i0 += G) { /* the slice stays in L1 across groups */
                    const int64_t g = m - i0 < G ? m - i0 : G;
                    const uint16_t *xg = xp + i0 * ld;
                    __m512 *Tr = T + (r - rb0) * m + i0;
                    switch (g) {
                    case 4: numla_ql16_rows(w, r, xg, ld, 4, &t, end, b0, b1, Tr); break;
                    case 3: numla_ql16_rows(w, r, xg, ld, 3, &t, end, b0, b1, Tr); break;
                    case 2: numla_ql16_rows(w, r, xg, ld, 2, &t, end, b0, b1, Tr); break;
                    default: numla_ql16_rows(w, r, xg, ld, 1, &t, end, b0, b1, Tr); break;
                    }
                }
        }
        for (int64_t r = rb0; r < rb1; r++)
            for (int64_t i = 0; i < m; i++) {
                const float v = _mm512_reduce_add_ps(T[(r - rb0) * m + i]);
                y[i * ldy + r] = accumulate ? y[i * ldy + r] + v : v;
            }
    }
}

/* One thread's rows of y = W x (M = 1). A function of its own with the VBMI target: the
 * OpenMP region's outlined body does not inherit the caller's target attribute in every
 * compiler, so the VBMI code must not be inlined into it. */
static NUMLA_QL16_FN __attribute__((noinline)) void numla_ql16_thread(const numla_qlinear_weight *w,
                                                                     const float *x, float *y,
                                                                     int accumulate, int ith, int nth)
{
    uint16_t xh[NUMLA_QL16_MAX_K] __attribute__((aligned(64)));
    uint16_t xl[NUMLA_QL16_MAX_K] __attribute__((aligned(64)));
    const numla_ql16_lut t = {
        _mm512_load_si512((const void *)numla_fp8_bf16_hi), _mm512_load_si512((const void *)(numla_fp8_bf16_hi + 64)),
        _mm512_load_si512((const void *)numla_fp8_bf16_lo), _mm512_load_si512((const void *)(numla_fp8_bf16_lo + 64))};
    int64_t r0, r1;
    numla_qlinear_split(w->n, ith, nth, &r0, &r1);
    if (r0 >= r1)
        return;
    numla_ql16_pack_x(x, w->k, w->kp, xh, xl);
    const int8_t *end = w->q + r1 * w->kp;
    int64_t r = r0;
    if (w->kp > NUMLA_QL16_PAIR_K)
        for (; r + 2 <= r1; r += 2) {
            float v[2];
            numla_ql16_row2(w, r, xh, xl, &t, end, v);
            y[r] = accumulate ? y[r] + v[0] : v[0];
            y[r + 1] = accumulate ? y[r + 1] + v[1] : v[1];
        }
    for (; r < r1; r++) {
        const float v = numla_ql16_row(w, r, xh, xl, &t, end);
        y[r] = accumulate ? y[r] + v : v;
    }
}

void numla_qlinear_forward_fp8_avx512bf16(const numla_qlinear_weight *w, int64_t m, const float *x,
                                          int64_t ldx, float *y, int64_t ldy, int accumulate,
                                          void *workspace)
{
    if (m > 1 && numla_qlinear_fp8_rows_ws_bytes(w, m) > 0 && workspace) {
        uint16_t *xp = (uint16_t *)(((uintptr_t)workspace + 63) & ~(uintptr_t)63);
        const int64_t ld = numla_ql16_x_ld(w->kp);
        for (int64_t i = 0; i < m; i++)
            numla_ql16_pack_x(x + i * ldx, w->k, w->kp, xp + i * ld, xp + i * ld + numla_ql16_lo_off(w->kp));
#pragma omp parallel
        numla_ql16_thread_rows(w, m, xp, y, ldy, accumulate, omp_get_thread_num(), omp_get_num_threads());
        return;
    }
    if (m != 1 || w->kp > NUMLA_QL16_MAX_K) {
        numla_qlinear_forward_avx512(w, m, x, ldx, y, ldy, accumulate, workspace);
        return;
    }
#pragma omp parallel
    numla_ql16_thread(w, x, y, accumulate, omp_get_thread_num(), omp_get_num_threads());
}
