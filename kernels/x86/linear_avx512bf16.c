/* kernels/x86/linear_avx512bf16.c — AVX-512 BF16 linear layer.
 *
 * bf16 weights, M >= NUMLA_LINEAR_AMX_MIN_M, K % 32 == 0, and AMX usable: the split-bf16 AMX
 * tile GEMM (kernels/x86/linear_amx.c; within the exact-path error bound for K >= 62).
 * Otherwise:
 *
 * M <= NUMLA_LINEAR_GEMV_MAX_M, or f32 weights: the exact fp32 widen+FMA path of
 * linear_avx512.c (decode is bound by the weight stream, so vdpbf16ps would gain nothing and
 * would cost x its fp32 precision).
 * Larger M with bf16 weights, when NUMLA_LINEAR_USE_DPBF16: x is rounded once per call to bf16
 * pairs in the workspace (round to nearest even, packed in 12-row blocks), then a blocked GEMM
 * of vdpbf16ps micro-kernels, 12 rows x 32 outputs of fp32 accumulators, K blocked by
 * NUMLA_LINEAR_KC. On the development CPU vdpbf16ps zmm issues at half the rate of fp32 FMA, so
 * the widen+FMA GEMM is ~2x faster there and NUMLA_LINEAR_USE_DPBF16 is 0 (docs/linear.md);
 * numla_linear_forward_dpbf16 keeps the kernel reachable for tests, benchmarks and CPUs where
 * it wins. Products of two bf16 are exact in fp32 and
 * accumulate in fp32, so the only extra error against the fp32 path is x's rounding: relative
 * 2^-8 per element (bf16 unit roundoff), so |err| <= (2^-8 + K u) sum_k |x_k w_k| with u = 2^-24;
 * on random data the observed error is ~2^-8 / sqrt(K) of that sum. vdpbf16ps treats bf16
 * denormals as zero. */
#include <immintrin.h>
#include <omp.h>
#include <string.h>

#include "kernels/linear_internal.h"

#define MR NUMLA_LINEAR_AVX512_MR
#define NR NUMLA_LINEAR_NR

static int numla_linear_bf16_use_dp_(const numla_linear_weight *w, int64_t m)
{
    return NUMLA_LINEAR_USE_DPBF16 && w->dtype == NUMLA_DTYPE_BF16 && m > NUMLA_LINEAR_GEMV_MAX_M;
}

size_t numla_linear_workspace_dpbf16(const numla_linear_weight *w, int64_t m)
{
    /* x as bf16 pairs in blocks of MR rows, pair-major: (ceil(M/MR), Kp/2, MR) pairs.
     * + 64: forward aligns the start itself, so callers need not. */
    return (size_t)((m + MR - 1) / MR) * MR * (size_t)numla_linear_kp(w->k) * 2 + 64;
}

size_t numla_linear_workspace_avx512bf16(const numla_linear_weight *w, int64_t m, int num_threads)
{
    if (numla_linear_amx_applies(w, m))
        return numla_linear_workspace_amx(w, m);
    return numla_linear_bf16_use_dp_(w, m) ? numla_linear_workspace_dpbf16(w, m)
                                           : numla_linear_workspace_avx512(w, m, num_threads);
}

static inline __mmask16 numla_linear_bf16_mask_(int64_t nvalid)
{
    return nvalid >= NR ? (__mmask16)0xFFFF : nvalid <= 0 ? 0 : (__mmask16)((1u << nvalid) - 1u);
}

/* Thread ith's share of the MR-row blocks of x, rounded to bf16 pairs: block b holds pair q of
 * its row i at 32-bit word q * MR + i, so a tile's broadcasts read one sequential stream. The pad
 * element of an odd K becomes +0. */
static void numla_linear_bf16_pack_x_(int64_t m, int64_t k, const float *x, int64_t ldx,
                                      uint16_t *xb, int ith, int nth)
{
    const int64_t kp = numla_linear_kp(k);
    int64_t b0, b1;
    numla_linear_split((m + MR - 1) / MR, ith, nth, &b0, &b1);
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
                                                             12, 13, 14, 15),
                                           _mm512_set1_epi32(MR));
    for (int64_t b = b0; b < b1; b++) {
        int32_t *dst = (int32_t *)(void *)(xb + (size_t)b * (size_t)kp * MR);
        for (int64_t i = b * MR; i < m && i < (b + 1) * MR; i++)
            for (int64_t c = 0; c < kp; c += 32) {
                const int64_t nl = k - c;
                const __mmask16 l0 = numla_linear_bf16_mask_(nl), l1 = numla_linear_bf16_mask_(nl - 16);
                const __m512 lo = _mm512_maskz_loadu_ps(l0, x + i * ldx + c);
                const __m512 hi = _mm512_maskz_loadu_ps(l1, x + i * ldx + c + 16);
                const __m512i v = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
                const __mmask16 sm = numla_linear_bf16_mask_((kp - c) / 2);
                _mm512_mask_i32scatter_epi32(dst + (size_t)(c / 2) * MR + (size_t)(i - b * MR), sm,
                                             idx, v, 4);
            }
    }
}

/* y[0..mr)[0..16*np) (+)= xb block rows [0..mr), pairs [q0, q1) . panel pairs^T. */
static inline __attribute__((always_inline)) void
numla_linear_bf16_tile_(const int mr, const int np, const uint16_t *b, size_t pstride, int64_t q0,
                        int64_t q1, const uint16_t *xb, float *y, int64_t ldy,
                        int load_c, __mmask16 mk0, __mmask16 mk1)
{
    __m512 acc[MR][2];
    const __mmask16 mk[2] = {mk0, mk1};
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 2
        for (int j = 0; j < np; j++)
            acc[i][j] = load_c ? _mm512_maskz_loadu_ps(mk[j], y + i * ldy + j * NR) : _mm512_setzero_ps();
    for (int64_t q = q0; q < q1; q++) {
        __m512bh bv[2];
#pragma GCC unroll 2
        for (int j = 0; j < np; j++)
            bv[j] = (__m512bh)_mm512_load_si512((const void *)(b + (size_t)q * 2 * NR + j * pstride));
#pragma GCC unroll 16
        for (int i = 0; i < mr; i++) {
            int32_t pair;
            memcpy(&pair, xb + ((size_t)q * MR + (size_t)i) * 2, 4);
            const __m512bh a = (__m512bh)_mm512_set1_epi32(pair);
#pragma GCC unroll 2
            for (int j = 0; j < np; j++)
                acc[i][j] = _mm512_dpbf16_ps(acc[i][j], a, bv[j]);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 2
        for (int j = 0; j < np; j++)
            _mm512_mask_storeu_ps(y + i * ldy + j * NR, mk[j], acc[i][j]);
}

#define NUMLA_LINEAR_BF16_CASE(R)                                                                \
    case R:                                                                                      \
        if (np == 2)                                                                             \
            numla_linear_bf16_tile_(R, 2, b, pstride, q0, q1, xb, y, ldy, load_c, mk0, mk1); \
        else                                                                                     \
            numla_linear_bf16_tile_(R, 1, b, pstride, q0, q1, xb, y, ldy, load_c, mk0, mk1); \
        break;

static void numla_linear_bf16_tile_any_(int mr, int np, const uint16_t *b, size_t pstride,
                                        int64_t q0, int64_t q1, const uint16_t *xb, float *y, int64_t ldy, int load_c, __mmask16 mk0,
                                        __mmask16 mk1)
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

/* One thread's panels [p0, p1) of the vdpbf16ps GEMM. */
static void numla_linear_bf16_gemm_(const numla_linear_weight *w, int64_t m, const uint16_t *xb,
                                    float *y, int64_t ldy, int accumulate, int64_t p0, int64_t p1)
{
    const size_t pe = numla_linear_panel_elems(w);
    const int64_t kp = numla_linear_kp(w->k), npairs = kp / 2, qc = NUMLA_LINEAR_KC / 2;
    const uint16_t *packed = (const uint16_t *)w->packed;
    for (int64_t q0 = 0; q0 < npairs; q0 += qc) {
        const int64_t q1 = q0 + qc < npairs ? q0 + qc : npairs;
        const int load_c = accumulate || q0 > 0;
        for (int64_t p = p0; p < p1; p += 2) {
            const int np = p + 1 < p1 ? 2 : 1;
            const int64_t n0 = p * NR;
            const __mmask16 mk0 = numla_linear_bf16_mask_(w->n - n0);
            const __mmask16 mk1 = numla_linear_bf16_mask_(w->n - n0 - NR);
            const uint16_t *b = packed + (size_t)p * pe;
            for (int64_t i0 = 0; i0 < m; i0 += MR) {
                const int mr = (int)(m - i0 < MR ? m - i0 : MR);
                numla_linear_bf16_tile_any_(mr, np, b, pe, q0, q1, xb + (size_t)(i0 / MR) * (size_t)kp * MR,
                                            y + i0 * ldy + n0, ldy, load_c, mk0, mk1);
            }
        }
    }
}

void numla_linear_forward_dpbf16(const numla_linear_weight *w, int64_t m, const float *x,
                                 int64_t ldx, float *y, int64_t ldy, int accumulate, void *workspace)
{
    const int64_t panels = numla_linear_panels(w->n);
    const int64_t pairs = (panels + 1) / 2;
    uint16_t *xb = (uint16_t *)(((uintptr_t)workspace + 63) & ~(uintptr_t)63);
#pragma omp parallel
    {
        const int ith = omp_get_thread_num(), nth = omp_get_num_threads();
        numla_linear_bf16_pack_x_(m, w->k, x, ldx, xb, ith, nth);
#pragma omp barrier
        int64_t lo, hi;
        numla_linear_split(pairs, ith, nth, &lo, &hi);
        const int64_t p1 = 2 * hi < panels ? 2 * hi : panels;
        if (2 * lo < p1)
            numla_linear_bf16_gemm_(w, m, xb, y, ldy, accumulate, 2 * lo, p1);
    }
}

void numla_linear_forward_avx512bf16(const numla_linear_weight *w, int64_t m, const float *x,
                                     int64_t ldx, float *y, int64_t ldy, int accumulate,
                                     void *workspace)
{
    if (numla_linear_amx_applies(w, m))
        numla_linear_forward_amx(w, m, x, ldx, y, ldy, accumulate, workspace);
    else if (numla_linear_bf16_use_dp_(w, m))
        numla_linear_forward_dpbf16(w, m, x, ldx, y, ldy, accumulate, workspace);
    else
        numla_linear_forward_avx512(w, m, x, ldx, y, ldy, accumulate, workspace);
}
