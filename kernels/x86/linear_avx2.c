/* kernels/x86/linear_avx2.c — AVX2 linear layer in exact fp32: bf16 weights widened in
 * registers (shift / mask of each packed pair) and FMA against fp32 x. Register tile: up to 4
 * rows of x x 1 panel (16 outputs = 2 ymm); a second accumulator set for the odd k when the tile
 * is short (decode) so enough FMA chains are in flight. K blocked by NUMLA_LINEAR_KC when M
 * needs more than one row block. */
#include <immintrin.h>
#include <omp.h>

#include "kernels/linear_internal.h"

#define MR NUMLA_LINEAR_AVX2_MR
#define NR NUMLA_LINEAR_NR

static inline __attribute__((always_inline)) void
numla_linear_avx2_tile_(const int mr, const int split, const int bf16, const void *bv, int64_t k0,
                        int64_t k1, const float *x, int64_t ldx, float *y, int64_t ldy, int load_c,
                        int64_t nvalid, __m256 *carry, int carry_in, int carry_out)
{
    __m256 acc[MR][2], acc2[MR][2];
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i mk[2] = {_mm256_cmpgt_epi32(_mm256_set1_epi32((int)nvalid), iota),
                           _mm256_cmpgt_epi32(_mm256_set1_epi32((int)nvalid - 8), iota)};
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
        for (int h = 0; h < 2; h++) {
            if (carry && carry_in) {
                acc[i][h] = carry[(i * 2 + h) * 2];
                acc2[i][h] = carry[(i * 2 + h) * 2 + 1];
                continue;
            }
            acc[i][h] = load_c ? _mm256_maskload_ps(y + i * ldy + 8 * h, mk[h]) : _mm256_setzero_ps();
            acc2[i][h] = _mm256_setzero_ps();
        }
    if (bf16) {
        const uint16_t *b = (const uint16_t *)bv;
        const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
        const int64_t kend = k0 + ((k1 - k0) & ~(int64_t)1);
        for (int64_t kk = k0; kk < kend; kk += 2) {
            __m256 be[2], bo[2];
            for (int h = 0; h < 2; h++) {
                __m256i v = _mm256_load_si256((const __m256i *)(const void *)(b + (size_t)kk * NR + 16 * h));
                be[h] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
                bo[h] = _mm256_castsi256_ps(_mm256_and_si256(v, hi));
            }
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) {
                const __m256 xe = _mm256_broadcast_ss(x + i * ldx + kk);
                const __m256 xo = _mm256_broadcast_ss(x + i * ldx + kk + 1);
                for (int h = 0; h < 2; h++) {
                    acc[i][h] = _mm256_fmadd_ps(xe, be[h], acc[i][h]);
                    if (split)
                        acc2[i][h] = _mm256_fmadd_ps(xo, bo[h], acc2[i][h]);
                    else
                        acc[i][h] = _mm256_fmadd_ps(xo, bo[h], acc[i][h]);
                }
            }
        }
        if (kend < k1) { /* odd K: the partner of the last k is zero padding */
            for (int h = 0; h < 2; h++) {
                __m256 be = _mm256_castsi256_ps(_mm256_slli_epi32(
                    _mm256_load_si256((const __m256i *)(const void *)(b + (size_t)kend * NR + 16 * h)), 16));
#pragma GCC unroll 8
                for (int i = 0; i < mr; i++)
                    acc[i][h] = _mm256_fmadd_ps(_mm256_broadcast_ss(x + i * ldx + kend), be, acc[i][h]);
            }
        }
    } else {
        const float *b = (const float *)bv;
        int64_t k = k0;
        for (; k + 1 < k1; k += 2) {
            __m256 b0[2], b1[2];
            for (int h = 0; h < 2; h++) {
                b0[h] = _mm256_load_ps(b + (size_t)k * NR + 8 * h);
                b1[h] = _mm256_load_ps(b + (size_t)(k + 1) * NR + 8 * h);
            }
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) {
                const __m256 x0 = _mm256_broadcast_ss(x + i * ldx + k);
                const __m256 x1 = _mm256_broadcast_ss(x + i * ldx + k + 1);
                for (int h = 0; h < 2; h++) {
                    acc[i][h] = _mm256_fmadd_ps(x0, b0[h], acc[i][h]);
                    if (split)
                        acc2[i][h] = _mm256_fmadd_ps(x1, b1[h], acc2[i][h]);
                    else
                        acc[i][h] = _mm256_fmadd_ps(x1, b1[h], acc[i][h]);
                }
            }
        }
        if (k < k1) {
            for (int h = 0; h < 2; h++) {
                __m256 b0 = _mm256_load_ps(b + (size_t)k * NR + 8 * h);
#pragma GCC unroll 8
                for (int i = 0; i < mr; i++)
                    acc[i][h] = _mm256_fmadd_ps(_mm256_broadcast_ss(x + i * ldx + k), b0, acc[i][h]);
            }
        }
    }
    if (carry && carry_out) {
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++)
            for (int h = 0; h < 2; h++) {
                carry[(i * 2 + h) * 2] = acc[i][h];
                carry[(i * 2 + h) * 2 + 1] = acc2[i][h];
            }
        return;
    }
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
        for (int h = 0; h < 2; h++)
            _mm256_maskstore_ps(y + i * ldy + 8 * h, mk[h],
                                split ? _mm256_add_ps(acc[i][h], acc2[i][h]) : acc[i][h]);
}

static void numla_linear_avx2_tile_any_(int mr, int bf16, const void *b, int64_t k0, int64_t k1,
                                        const float *x, int64_t ldx, float *y, int64_t ldy,
                                        int load_c, int64_t nvalid)
{
    __m256 *const carry = NULL;
    const int cin = 0, cout = 0;
#define NUMLA_LINEAR_AVX2_CASE(R, S)                                                             \
    case R:                                                                                      \
        if (bf16)                                                                                \
            numla_linear_avx2_tile_(R, S, 1, b, k0, k1, x, ldx, y, ldy, load_c, nvalid, carry,   \
                                    cin, cout);                                                  \
        else                                                                                     \
            numla_linear_avx2_tile_(R, S, 0, b, k0, k1, x, ldx, y, ldy, load_c, nvalid, carry,   \
                                    cin, cout);                                                  \
        break;
    switch (mr) {
        NUMLA_LINEAR_AVX2_CASE(1, 1)
        NUMLA_LINEAR_AVX2_CASE(2, 1)
        NUMLA_LINEAR_AVX2_CASE(3, 0)
        NUMLA_LINEAR_AVX2_CASE(4, 0)
    default: break;
    }
}

/* The few-row tiles: 1 or 2 rows, split like the one-row tile (the even k in one accumulator
 * chain, the odd k in a second, added at the end), carrying the chains between K blocks. */
static void numla_linear_avx2_tile_rows_(int mr, int bf16, const void *b, int64_t k0, int64_t k1,
                                         const float *x, int64_t ldx, float *y, int64_t ldy,
                                         int load_c, int64_t nvalid, __m256 *carry, int cin,
                                         int cout)
{
    switch (mr) {
        NUMLA_LINEAR_AVX2_CASE(1, 1)
        NUMLA_LINEAR_AVX2_CASE(2, 1)
    default: break;
    }
}
#undef NUMLA_LINEAR_AVX2_CASE

/* M in (ROW_GROUP, ROWS_MAX_M]: groups of ROW_GROUP rows over K blocks of NUMLA_LINEAR_KC that
 * the groups share (a panel's block stays in L1), so the weights are read from memory once and
 * every row gets the bits it gets alone (kernels/linear.h). */
static void numla_linear_avx2_row_groups_(const numla_linear_weight *w, int64_t m, const float *x,
                                          int64_t ldx, float *y, int64_t ldy, int accumulate,
                                          int64_t p0, int64_t p1)
{
    enum { G = NUMLA_LINEAR_AVX2_ROW_GROUP, NG = (NUMLA_LINEAR_AVX2_ROWS_MAX_M + G - 1) / G };
    _Static_assert(G == 2, "the cases of numla_linear_avx2_tile_rows_");
    const int bf16 = w->dtype == NUMLA_DTYPE_BF16;
    const size_t pe = numla_linear_panel_elems(w), es = bf16 ? 2 : 4;
    __m256 carry[NG][G * 2 * 2];
    for (int64_t p = p0; p < p1; p++) {
        const void *b = (const char *)w->packed + (size_t)p * pe * es;
        const int64_t nvalid = w->n - p * NR < NR ? w->n - p * NR : NR;
        for (int64_t k0 = 0; k0 < w->k; k0 += NUMLA_LINEAR_KC) {
            const int64_t k1 = k0 + NUMLA_LINEAR_KC < w->k ? k0 + NUMLA_LINEAR_KC : w->k;
            for (int64_t i0 = 0; i0 < m; i0 += G)
                numla_linear_avx2_tile_rows_((int)(m - i0 < G ? m - i0 : G), bf16, b, k0, k1,
                                             x + i0 * ldx, ldx, y + i0 * ldy + p * NR, ldy,
                                             accumulate, nvalid, carry[i0 / G], k0 > 0, k1 < w->k);
        }
    }
}

void numla_linear_forward_avx2(const numla_linear_weight *w, int64_t m, const float *x, int64_t ldx,
                               float *y, int64_t ldy, int accumulate, void *workspace)
{
    (void)workspace; /* packs nothing; the table's signature has it */
    const int bf16 = w->dtype == NUMLA_DTYPE_BF16;
    const size_t pe = numla_linear_panel_elems(w), es = bf16 ? 2 : 4;
    const int64_t panels = numla_linear_panels(w->n);
    const int64_t kc = m <= MR ? w->k : NUMLA_LINEAR_KC;
#pragma omp parallel
    {
        int64_t p0, p1;
        numla_linear_split(panels, omp_get_thread_num(), omp_get_num_threads(), &p0, &p1);
        if (m > NUMLA_LINEAR_AVX2_ROW_GROUP && m <= NUMLA_LINEAR_AVX2_ROWS_MAX_M) {
            numla_linear_avx2_row_groups_(w, m, x, ldx, y, ldy, accumulate, p0, p1);
            p1 = p0; /* done */
        }
        for (int64_t k0 = 0; k0 < w->k; k0 += kc) {
            const int64_t k1 = k0 + kc < w->k ? k0 + kc : w->k;
            const int load_c = accumulate || k0 > 0;
            for (int64_t p = p0; p < p1; p++) {
                const void *b = (const char *)w->packed + (size_t)p * pe * es;
                for (int64_t i0 = 0; i0 < m; i0 += MR) {
                    const int mr = (int)(m - i0 < MR ? m - i0 : MR);
                    numla_linear_avx2_tile_any_(mr, bf16, b, k0, k1, x + i0 * ldx, ldx,
                                                y + i0 * ldy + p * NR, ldy, load_c,
                                                w->n - p * NR < NR ? w->n - p * NR : NR);
                }
            }
        }
    }
}
