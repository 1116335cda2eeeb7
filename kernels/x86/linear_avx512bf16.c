/* kernels/x86/linear_avx512bf16.c — the avx512bf16 linear level's own variant: bf16 weights
 * with bf16 activations (kernels/linear.h NUMLA_LINEAR_ACT_BF16). x is rounded to bf16 once
 * (round to nearest even) and one vdpbf16ps multiplies a broadcast x pair into the packed
 * weight pairs of 16 outputs (kernels/linear_internal.h: one k-pair of a panel is exactly one
 * B operand): 32 MACs per instruction, fp32 accumulation; bf16 x bf16 products are exact in
 * fp32, vdpbf16ps adds them with round to nearest even and flushes denormal inputs and
 * results. Weights with fp32-class activations (the default) run the avx512 widen+FMA path:
 * splitting x into bf16 hi + lo, as the AMX level does, costs two vdpbf16ps per 32 MACs, the
 * FMA path's count, and measured a tie with it on Zen 4 (docs/linear.md), so it was not kept.
 *
 * Every M runs here, so a row's y is the same sequence of vdpbf16ps whatever the batch, the
 * team size or the tile it lands in (bitwise batch-invariant; tests/unit/kernels/test_linear.c).
 *
 * x is packed into the workspace in blocks of MR rows, pair-major: xp (ceil(M/MR), Kp/2, MR)
 * 32-bit words (a bf16 pair each), so a tile's broadcasts read one sequential stream. Register
 * tile: up to 12 rows x 2 panels (24 fp32 accumulators). For more than MR rows the K loop is
 * blocked (NUMLA_LINEAR_KC) so the tile's two panels stay in L1 while the row blocks of x stream
 * from L2; with one row block each panel is streamed once over all of K (decode). Threads split
 * N in panel pairs; the team packs x first, split by row blocks. */
#include <immintrin.h>
#include <omp.h>

#include "kernels/linear_internal.h"

#define MR NUMLA_LINEAR_AVX512_MR
#define NR NUMLA_LINEAR_NR

static inline __mmask16 numla_linear_bf16_mask_(int64_t nvalid)
{
    return nvalid >= NR ? (__mmask16)0xFFFF : nvalid <= 0 ? 0 : (__mmask16)((1u << nvalid) - 1u);
}

int numla_linear_avx512bf16_applies(const numla_linear_weight *w, int64_t m)
{
    (void)m;
    return w->dtype == NUMLA_DTYPE_BF16 && w->act == NUMLA_LINEAR_ACT_BF16;
}

size_t numla_linear_workspace_avx512bf16(const numla_linear_weight *w, int64_t m, int num_threads)
{
    (void)num_threads; /* one x pack shared by the team */
    const size_t blocks = (size_t)((m + MR - 1) / MR);
    /* + 64: forward aligns the start itself, so callers need not. */
    return blocks * (size_t)(numla_linear_kp(w->k) / 2) * MR * sizeof(uint32_t) + 64;
}

/* Thread ith's share of the row blocks of x into xp as bf16 pairs (rows past M are left
 * unwritten: the tiles read only a block's real rows). */
static void numla_linear_bf16_pack_x_(int64_t m, int64_t k, const float *x, int64_t ldx,
                                      uint32_t *xp, int ith, int nth)
{
    const int64_t kh = numla_linear_kp(k) / 2;
    int64_t b0, b1;
    numla_linear_split((m + MR - 1) / MR, ith, nth, &b0, &b1);
    /* word j of a 32-k chunk (pair j) goes MR words after word j - 1 */
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
                                                             12, 13, 14, 15),
                                           _mm512_set1_epi32(MR));
    for (int64_t b = b0; b < b1; b++) {
        uint32_t *dst = xp + (size_t)b * (size_t)kh * MR;
        for (int r = 0; r < MR && b * MR + r < m; r++) {
            const float *xr = x + (b * MR + r) * ldx;
            for (int64_t c = 0; c < k; c += 32) {
                const __m512 x0 = _mm512_maskz_loadu_ps(numla_linear_bf16_mask_(k - c), xr + c);
                const __m512 x1 =
                    _mm512_maskz_loadu_ps(numla_linear_bf16_mask_(k - c - 16), xr + c + 16);
                _mm512_mask_i32scatter_epi32(dst + (size_t)(c / 2) * MR + (size_t)r,
                                             numla_linear_bf16_mask_((k - c + 1) / 2), idx,
                                             (__m512i)_mm512_cvtne2ps_pbh(x1, x0), 4);
            }
        }
    }
}

/* y[0..mr)[0..16*np) (+)= x rows . panels^T over k-pairs [h0, h1); b points at panel p0's
 * k-pair 0, xw at the row block's k-pair 0 (MR words per pair). */
static inline __attribute__((always_inline)) void
numla_linear_bf16_tile_(const int mr, const int np, const uint16_t *b, size_t pstride, int64_t h0,
                        int64_t h1, const uint32_t *xw, float *y, int64_t ldy, int load_c,
                        __mmask16 mk0, __mmask16 mk1)
{
    __m512 acc[MR][2];
    const __mmask16 mk[2] = {mk0, mk1};
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 2
        for (int j = 0; j < np; j++)
            acc[i][j] = load_c ? _mm512_maskz_loadu_ps(mk[j], y + i * ldy + j * NR) : _mm512_setzero_ps();
    for (int64_t kk = h0; kk < h1; kk++) {
        const uint16_t *bk = b + (size_t)kk * 2 * NR;
        const uint32_t *xk = xw + (size_t)kk * MR;
        __m512bh bv[2];
#pragma GCC unroll 2
        for (int j = 0; j < np; j++)
            bv[j] = (__m512bh)_mm512_load_si512((const void *)(bk + j * pstride));
#pragma GCC unroll 16
        for (int i = 0; i < mr; i++) {
            const __m512bh xv = (__m512bh)_mm512_set1_epi32((int)xk[i]);
#pragma GCC unroll 2
            for (int j = 0; j < np; j++)
                acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, bv[j]);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 2
        for (int j = 0; j < np; j++)
            _mm512_mask_storeu_ps(y + i * ldy + j * NR, mk[j], acc[i][j]);
}

/* Fixed (mr, np) instantiations so every accumulator is a register. */
#define NUMLA_LINEAR_BF16_CASE(R)                                                                \
    case R:                                                                                      \
        if (np == 2)                                                                             \
            numla_linear_bf16_tile_(R, 2, b, pstride, h0, h1, xw, y, ldy, load_c, mk0, mk1);     \
        else                                                                                     \
            numla_linear_bf16_tile_(R, 1, b, pstride, h0, h1, xw, y, ldy, load_c, mk0, mk1);     \
        break;

static void numla_linear_bf16_tile_any_(int mr, int np, const uint16_t *b, size_t pstride,
                                        int64_t h0, int64_t h1, const uint32_t *xw, float *y,
                                        int64_t ldy, int load_c, __mmask16 mk0, __mmask16 mk1)
{
    switch (mr) {
        NUMLA_LINEAR_BF16_CASE(1)
        NUMLA_LINEAR_BF16_CASE(2)
        NUMLA_LINEAR_BF16_CASE(3)
        NUMLA_LINEAR_BF16_CASE(4)
        NUMLA_LINEAR_BF16_CASE(5)
        NUMLA_LINEAR_BF16_CASE(6)
        NUMLA_LINEAR_BF16_CASE(7)
        NUMLA_LINEAR_BF16_CASE(8)
        NUMLA_LINEAR_BF16_CASE(9)
        NUMLA_LINEAR_BF16_CASE(10)
        NUMLA_LINEAR_BF16_CASE(11)
        NUMLA_LINEAR_BF16_CASE(12)
    default: break;
    }
}

/* One thread's panels [p0, p1) over all rows. */
static void numla_linear_bf16_panels_(const numla_linear_weight *w, int64_t m, const uint32_t *xp,
                                      float *y, int64_t ldy, int accumulate, int64_t p0, int64_t p1)
{
    const size_t pe = numla_linear_panel_elems(w);
    const int64_t kh = numla_linear_kp(w->k) / 2;
    /* One row block: stream each panel once over all of K. */
    const int64_t hc = m <= MR ? kh : NUMLA_LINEAR_KC / 2;
    for (int64_t h0 = 0; h0 < kh; h0 += hc) {
        const int64_t h1 = h0 + hc < kh ? h0 + hc : kh;
        const int load_c = accumulate || h0 > 0;
        for (int64_t p = p0; p < p1; p += 2) {
            const int np = p + 1 < p1 ? 2 : 1;
            const int64_t n0 = p * NR;
            const __mmask16 mk0 = numla_linear_bf16_mask_(w->n - n0);
            const __mmask16 mk1 = numla_linear_bf16_mask_(w->n - n0 - NR);
            const uint16_t *b = (const uint16_t *)w->packed + (size_t)p * pe;
            for (int64_t i0 = 0; i0 < m; i0 += MR) {
                const int mr = (int)(m - i0 < MR ? m - i0 : MR);
                numla_linear_bf16_tile_any_(mr, np, b, pe, h0, h1,
                                            xp + (size_t)(i0 / MR) * (size_t)kh * MR,
                                            y + i0 * ldy + n0, ldy, load_c, mk0, mk1);
            }
        }
    }
}

void numla_linear_forward_avx512bf16(const numla_linear_weight *w, int64_t m, const float *x,
                                     int64_t ldx, float *y, int64_t ldy, int accumulate,
                                     void *workspace)
{
    const int64_t panels = numla_linear_panels(w->n);
    const int64_t pairs = (panels + 1) / 2;
    uint32_t *xp = (uint32_t *)(((uintptr_t)workspace + 63) & ~(uintptr_t)63);
#pragma omp parallel
    {
        const int ith = omp_get_thread_num(), nth = omp_get_num_threads();
        numla_linear_bf16_pack_x_(m, w->k, x, ldx, xp, ith, nth);
#pragma omp barrier
        int64_t lo, hi;
        numla_linear_split(pairs, ith, nth, &lo, &hi);
        const int64_t p1 = 2 * hi < panels ? 2 * hi : panels;
        if (2 * lo < p1)
            numla_linear_bf16_panels_(w, m, xp, y, ldy, accumulate, 2 * lo, p1);
    }
}
