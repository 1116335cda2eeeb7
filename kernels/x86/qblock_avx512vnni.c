/* kernels/x86/qblock_avx512vnni.c — block-quantized linear layers in Q8 activation mode
 * (kernels/qblock.h) with vpdpbusd (AVX512-VNNI): every encoding (Q8_0, Q4_0, Q4_K, Q5_K,
 * Q6_K, Q2_K, Q3_K; Q5_0, IQ4_NL and IQ4_XS: kernels/x86/qblock_gemm_avx512vnni.c).
 *
 * The x rows are quantized first (numla_qblock_gemm_vnni_quantize_: the scalar rule of
 * numla_qblock_quantize_rows_ in vectors, the same bits) into int8 codes, a scale per 256
 * columns and the sum of the codes per 16 columns.
 * Then per weight row and x row, per 256-element block, the weight codes are laid out as 64
 * unsigned bytes in element order and multiplied into 16 int32 lanes by vpdpbusd; each lane
 * then covers 4 elements of one sub-block, so the sub-block scales multiply the lanes (vpmulld
 * with the scales permuted into place), and the block's int32 sum is converted once and
 * scaled by d · dx. Where the encoding subtracts something from every code (the mins of Q5_K
 * and Q2_K; the offset of Q3_K (4)), the term is the per-16 code sums of x times that
 * constant, summed apart and taken off at the end (exact in int32 up to the last scaling);
 * Q4_0's 8 comes off each lane in int32 through a second vpdpbusd of x with 8s. Q4_0 runs 8
 * blocks of 32 to a 256-column step, its codes in their 128-bit lanes (low nibbles of both
 * halves, then high) and the x row's 64 bytes put in that order instead (one vshufi32x4).
 *
 * Q4_K, Q6_K and Q8_0, and Q5_0, IQ4_NL and IQ4_XS, run the kernels of
 * kernels/x86/qblock_gemm_avx512vnni.c for every M (one x row is a tile of one: measured as fast
 * as a kernel of its own), and from NUMLA_QBLOCK_PANEL_MIN_M rows the panel GEMM of
 * kernels/x86/qblock_panel_avx512vnni.c where it takes the type; Q4_K's x rows are first put
 * in its kernel's order (numla_qblock_vnni_q4_k_order_). The other types run each x row alone.
 * Weights stored as 16-row panels (PANEL16: what the engine loads Q4_K, Q6_K, IQ4_XS, Q5_0,
 * IQ4_NL and Q8_0 as at this level) run kernels/x86/qblock_p16_avx512vnni.c below the panel
 * GEMM's threshold (Q6_K, which the panel GEMM does not take: at every M) and the panel GEMM
 * from it, split over the threads by whole panels.
 * Results do not depend on the thread count; below the panel GEMM's threshold not on M either
 * (PANEL16: at no M).
 */
#include "kernels/qblock_internal.h"

#include <immintrin.h>
#include <omp.h>

static inline float numla_qblock_vh_(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

static inline __m512i numla_qblock_join_(__m256i lo, __m256i hi)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* Rows [0, m) of the quantized x (k columns) into the order the Q4_K kernel of
 * qblock_gemm_avx512vnni.c reads: in
 * each 256 columns the 32-column pieces 0 2 1 3 4 6 5 7 (pieces 1 and 2, 5 and 6 swapped). Done
 * once per call, in place; the per-16 sums stay in column order. */
static void numla_qblock_vnni_q4_k_order_(int8_t *xq, int64_t m, int64_t k)
{
    for (int64_t i = 0; i < m * (k / 256); i++) {
        int8_t *xb = xq + 256 * i;
        for (int h = 0; h < 2; h++) {
            const __m256i a = _mm256_loadu_si256((const __m256i *)(const void *)(xb + 128 * h + 32));
            const __m256i c = _mm256_loadu_si256((const __m256i *)(const void *)(xb + 128 * h + 64));
            _mm256_storeu_si256((__m256i *)(void *)(xb + 128 * h + 32), c);
            _mm256_storeu_si256((__m256i *)(void *)(xb + 128 * h + 64), a);
        }
    }
}

/* 64 codes of two 32-element halves a, b, each 16 bytes of nibbles (low nibbles its elements
 * 0-15, high 16-31), as 64 unsigned bytes in the order a 0-15, b 0-15, a 16-31, b 16-31 (no
 * lane crossing); numla_qblock_x64_ puts the x row's 64 bytes in the same order. */
static inline __m512i numla_qblock_nib64_(__m256i q)
{
    const __m256i m4 = _mm256_set1_epi8(15);
    return numla_qblock_join_(_mm256_and_si256(q, m4), _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
}

static inline __m512i numla_qblock_x64_(const int8_t *x)
{
    const __m512i v = _mm512_loadu_si512(x);
    return _mm512_shuffle_i32x4(v, v, 0xd8); /* 128-bit quarters 0, 2, 1, 3 */
}

/* Σ over 256-column steps of one Q4_0 row (8 blocks a step) · one quantized x row. The codes
 * stay unsigned (q + 8); 8 · Σ x per 4 elements is taken off in int32 (a second vpdpbusd with 8s),
 * and each block's scale reaches its 8 lanes through one permute of the step's 8 scales. */
float numla_qblock_q8_dot_q4_0_avx512vnni(const uint8_t *row, int64_t nb, const int8_t *xq, const float *dx,
                                      const int32_t *bs)
{
    (void)bs;
    const __m512i eight = _mm512_set1_epi8(8);
    /* lanes 0-3 and 8-11 hold block 2u, 4-7 and 12-15 block 2u + 1 */
    const __m512i pidx[4] = {
        _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1),
        _mm512_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3, 2, 2, 2, 2, 3, 3, 3, 3),
        _mm512_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5, 4, 4, 4, 4, 5, 5, 5, 5),
        _mm512_setr_epi32(6, 6, 6, 6, 7, 7, 7, 7, 6, 6, 6, 6, 7, 7, 7, 7),
    };
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = row + 8 * 18 * b;
        const int8_t *xb = xq + 256 * b;
        uint16_t hs[8];
        for (int j = 0; j < 8; j++)
            memcpy(&hs[j], blk + 18 * j, 2);
        const __m256 d8 = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)hs)),
                                        _mm256_set1_ps(dx[b]));
        const __m512 dv = _mm512_castps256_ps512(d8);
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) {
            const uint8_t *pa = blk + 18 * (2 * u), *pb = pa + 18;
            const __m512i w = numla_qblock_nib64_(_mm256_set_m128i(_mm_loadu_si128((const __m128i *)(const void *)(pb + 2)),
                                                                   _mm_loadu_si128((const __m128i *)(const void *)(pa + 2))));
            const __m512i xv = numla_qblock_x64_(xb + 64 * u);
            const __m512i dp = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w, xv),
                                                _mm512_dpbusd_epi32(_mm512_setzero_si512(), eight, xv));
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), _mm512_permutexvar_ps(pidx[u], dv), acc);
        }
    }
    return _mm512_reduce_add_ps(acc);
}

static inline int32_t numla_qblock_hsum256_(__m256i v)
{
    const __m128i h4 = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    const __m128i h2 = _mm_add_epi32(h4, _mm_shuffle_epi32(h4, 0x4E));
    return _mm_cvtsi128_si32(_mm_add_epi32(h2, _mm_shuffle_epi32(h2, 0xB1)));
}

/* nt 32-element blocks of a Q4_0 or Q5_1 row against quantized x in one x group (scale dxl), one
 * block at a time: Q4_0's blocks past a row's last whole 256 columns (K not a multiple of 256),
 * and Q5_1's whole rows in the ROWS layout (its panels are the fast path). */
static float numla_qblock_vnni_b32_blocks_(numla_qblock_type type, const uint8_t *blk, int64_t nt, const int8_t *xq,
                                           float dxl)
{
    const int q51 = type == NUMLA_QBLOCK_Q5_1, bb = q51 ? 24 : 18;
    float s = 0.0f;
    for (int64_t t = 0; t < nt; t++, blk += bb, xq += 32) {
        const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(blk + (q51 ? 8 : 2)));
        __m256i q = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), _mm_set1_epi8(15)),
                                     _mm_and_si128(v, _mm_set1_epi8(15))); /* columns 0-15, 16-31 */
        const __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)xq);
        if (q51) { /* the fifth bits: bit j of qh for column j */
            uint32_t qh;
            memcpy(&qh, blk + 4, 4);
            q = _mm256_mask_add_epi8(q, (__mmask32)qh, q, _mm256_set1_epi8(16));
        }
        const int32_t sq = numla_qblock_hsum256_(_mm256_dpbusd_epi32(_mm256_setzero_si256(), q, x));
        const int32_t sx = numla_qblock_hsum256_(_mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), x));
        /* Q4_0: d (q - 8); Q5_1: d q + m */
        s += q51 ? ((float)sq * numla_qblock_vh_(blk) + (float)sx * numla_qblock_vh_(blk + 2)) * dxl
                 : (float)(sq - 8 * sx) * (numla_qblock_vh_(blk) * dxl);
    }
    return s;
}

/* Σ over the blocks of one Q5_1 row (nb whole 256-column groups) · one quantized x row. */
float numla_qblock_q8_dot_q5_1_avx512vnni(const uint8_t *row, int64_t nb, const int8_t *xq, const float *dx,
                                      const int32_t *bs)
{
    (void)bs;
    float s = 0.0f;
    for (int64_t b = 0; b < nb; b++)
        s += numla_qblock_vnni_b32_blocks_(NUMLA_QBLOCK_Q5_1, row + 8 * 24 * b, 8, xq + 256 * b, dx[b]);
    return s;
}

/* Σ over blocks of one Q5_K row · one quantized x row: Q4_K's with the fifth bit of each code
 * (bit e / 32 of qh[e % 32]) set as 16 in its byte before the product. */
float numla_qblock_q8_dot_q5_k_avx512vnni(const uint8_t *row, int64_t nb, const int8_t *xq, const float *dx,
                                      const int32_t *bs)
{
    const __m256i m4 = _mm256_set1_epi8(15), b16 = _mm256_set1_epi8(16);
    const __m512i idx[4] = {
        _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
        _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3),
        _mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5),
        _mm512_setr_epi32(6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7),
    };
    const __m512i midx = _mm512_setr_epi32(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    __m512 acc = _mm512_setzero_ps(), accm = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = row + 176 * b;
        uint32_t s0, s1, s2;
        memcpy(&s0, blk + 4, 4);
        memcpy(&s1, blk + 8, 4);
        memcpy(&s2, blk + 12, 4);
        const uint32_t sc_lo = s0 & 0x3f3f3f3fu, m_lo = s1 & 0x3f3f3f3fu;
        const uint32_t sc_hi = (s2 & 0x0f0f0f0fu) | ((s0 >> 6) & 0x03030303u) << 4;
        const uint32_t m_hi = ((s2 >> 4) & 0x0f0f0f0fu) | ((s1 >> 6) & 0x03030303u) << 4;
        const __m512i smv = _mm512_cvtepu8_epi32(_mm_setr_epi32((int)sc_lo, (int)sc_hi, (int)m_lo, (int)m_hi));
        const __m256i hb = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 16));
        const int8_t *xb = xq + 256 * b;
        __m512i iacc = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 48 + 32 * c));
            const __m256i ka = _mm256_set1_epi8((char)(1 << (2 * c))), kb = _mm256_set1_epi8((char)(2 << (2 * c)));
            const __m256i ha = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, ka), ka), b16);
            const __m256i hh = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, kb), kb), b16);
            const __m512i w = numla_qblock_join_(_mm256_or_si256(_mm256_and_si256(q, m4), ha),
                                                 _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), hh));
            const __m512i dp = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, _mm512_loadu_si512(xb + 64 * c));
            iacc = _mm512_add_epi32(iacc, _mm512_mullo_epi32(dp, _mm512_permutexvar_epi32(idx[c], smv)));
        }
        const float d = numla_qblock_vh_(blk) * dx[b], dmin = numla_qblock_vh_(blk + 2) * dx[b];
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc), _mm512_set1_ps(d), acc);
        const __m512i mm = _mm512_mullo_epi32(_mm512_loadu_si512(bs + 16 * b), _mm512_permutexvar_epi32(midx, smv));
        accm = _mm512_fmadd_ps(_mm512_cvtepi32_ps(mm), _mm512_set1_ps(dmin), accm);
    }
    return _mm512_reduce_add_ps(acc) - _mm512_reduce_add_ps(accm);
}

/* Σ over blocks of one Q2_K row · one quantized x row: the 2-bit codes of elements
 * 128h + 64p + j (chunk 2h + p) are bits 4p, 4p + 2 of qs[32h..32h+32); lane L of chunk c
 * covers group 4c + L / 4, whose 4-bit scale multiplies the lane and whose 4-bit min goes with
 * that group's code sum of x. */
float numla_qblock_q8_dot_q2_k_avx512vnni(const uint8_t *row, int64_t nb, const int8_t *xq, const float *dx,
                                      const int32_t *bs)
{
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m512i idx[4] = {
        _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
        _mm512_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7),
        _mm512_setr_epi32(8, 8, 8, 8, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11),
        _mm512_setr_epi32(12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15),
    };
    const __m512i k15 = _mm512_set1_epi32(15);
    __m512 acc = _mm512_setzero_ps(), accm = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = row + 84 * b, *qs = blk + 16;
        const __m512i sv = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)blk));
        const __m512i sc = _mm512_and_si512(sv, k15), mn = _mm512_srli_epi32(sv, 4);
        const int8_t *xb = xq + 256 * b;
        __m512i iacc = _mm512_setzero_si512();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(const void *)(qs + 32 * h));
            const __m512i w0 = numla_qblock_join_(_mm256_and_si256(q, m3), _mm256_and_si256(_mm256_srli_epi16(q, 2), m3));
            const __m512i w1 = numla_qblock_join_(_mm256_and_si256(_mm256_srli_epi16(q, 4), m3),
                                                  _mm256_and_si256(_mm256_srli_epi16(q, 6), m3));
            const __m512i d0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w0, _mm512_loadu_si512(xb + 128 * h));
            const __m512i d1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w1, _mm512_loadu_si512(xb + 128 * h + 64));
            iacc = _mm512_add_epi32(iacc, _mm512_mullo_epi32(d0, _mm512_permutexvar_epi32(idx[2 * h], sc)));
            iacc = _mm512_add_epi32(iacc, _mm512_mullo_epi32(d1, _mm512_permutexvar_epi32(idx[2 * h + 1], sc)));
        }
        const float d = numla_qblock_vh_(blk + 80) * dx[b], dmin = numla_qblock_vh_(blk + 82) * dx[b];
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc), _mm512_set1_ps(d), acc);
        const __m512i mm = _mm512_mullo_epi32(_mm512_loadu_si512(bs + 16 * b), mn);
        accm = _mm512_fmadd_ps(_mm512_cvtepi32_ps(mm), _mm512_set1_ps(dmin), accm);
    }
    return _mm512_reduce_add_ps(acc) - _mm512_reduce_add_ps(accm);
}

/* Σ over blocks of one Q3_K row · one quantized x row: the unsigned code q + 4 is the 2 low
 * bits (as Q2_K's) with hmask's bit as 4; 4 · Σ_g sc_g Σ x q comes back out through the per-16
 * sums. The 16 signed 6-bit scales are unpacked four at a time in 32-bit words. */
float numla_qblock_q8_dot_q3_k_avx512vnni(const uint8_t *row, int64_t nb, const int8_t *xq, const float *dx,
                                      const int32_t *bs)
{
    const __m256i m3 = _mm256_set1_epi8(3), b4 = _mm256_set1_epi8(4);
    const __m512i idx[4] = {
        _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
        _mm512_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7),
        _mm512_setr_epi32(8, 8, 8, 8, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11),
        _mm512_setr_epi32(12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15),
    };
    const __m512i k32 = _mm512_set1_epi32(32);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = row + 110 * b, *qs = blk + 32;
        /* group g: low 4 bits from byte g % 8 (nibble g / 8), high 2 from byte 8 + g % 4 (bits
         * 2 (g / 4)): groups 0-3, 4-7, 8-11, 12-15 in words w0..w3 */
        uint32_t s0, s1, s2;
        memcpy(&s0, blk + 96, 4);
        memcpy(&s1, blk + 100, 4);
        memcpy(&s2, blk + 104, 4);
        const uint32_t w0 = (s0 & 0x0f0f0f0fu) | (s2 & 0x03030303u) << 4;
        const uint32_t w1 = (s1 & 0x0f0f0f0fu) | ((s2 >> 2) & 0x03030303u) << 4;
        const uint32_t w2 = ((s0 >> 4) & 0x0f0f0f0fu) | ((s2 >> 4) & 0x03030303u) << 4;
        const uint32_t w3 = ((s1 >> 4) & 0x0f0f0f0fu) | ((s2 >> 6) & 0x03030303u) << 4;
        const __m512i sc = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_setr_epi32((int)w0, (int)w1, (int)w2, (int)w3)), k32);
        const __m256i hm = _mm256_loadu_si256((const __m256i *)(const void *)blk);
        const int8_t *xb = xq + 256 * b;
        __m512i iacc = _mm512_setzero_si512();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(const void *)(qs + 32 * h));
            __m256i c4[4];
#pragma GCC unroll 4
            for (int s = 0; s < 4; s++) {
                const __m256i k = _mm256_set1_epi8((char)(1 << (4 * h + s)));
                const __m256i hb = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hm, k), k), b4);
                c4[s] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2 * s), m3), hb);
            }
            const __m512i d0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), numla_qblock_join_(c4[0], c4[1]),
                                                   _mm512_loadu_si512(xb + 128 * h));
            const __m512i d1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), numla_qblock_join_(c4[2], c4[3]),
                                                   _mm512_loadu_si512(xb + 128 * h + 64));
            iacc = _mm512_add_epi32(iacc, _mm512_mullo_epi32(d0, _mm512_permutexvar_epi32(idx[2 * h], sc)));
            iacc = _mm512_add_epi32(iacc, _mm512_mullo_epi32(d1, _mm512_permutexvar_epi32(idx[2 * h + 1], sc)));
        }
        const __m512i off = _mm512_mullo_epi32(sc, _mm512_loadu_si512(bs + 16 * b));
        iacc = _mm512_sub_epi32(iacc, _mm512_slli_epi32(off, 2));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc), _mm512_set1_ps(numla_qblock_vh_(blk + 108) * dx[b]), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

/* One forward call's work after x is quantized, for thread ith of nth. */
typedef struct numla_qblock_vnni_job_ {
    const numla_qblock_weight *w;
    int64_t m, ldy;
    const int8_t *xq;
    const float *dx;
    const int32_t *bs;
    float *y;
    int accumulate, panel, p16, gemm;
    numla_qblock_q8_dot_fn dot;
    char *pscratch; /* the panel GEMM's scratch, pbytes per thread */
    size_t pbytes;
    numla_qblock_panel_rows_fn panel_rows; /* the panel GEMM: vpdpbusd or tiles */
    numla_qblock_p16_rows_fn p16_rows;     /* the stored panels below it (and Q6_K's): the same */
} numla_qblock_vnni_job_;

static void numla_qblock_vnni_run_(const numla_qblock_vnni_job_ *j, int ith, int nth)
{
    const numla_qblock_weight *w = j->w;
    const int64_t k = w->k, nb = k / 256, m = j->m;
    int64_t lo, hi;
    if (j->p16) { /* whole panels to each thread: the stored panels below the panel GEMM's M */
        int64_t plo, phi;
        numla_qblock_split_((w->n + 15) / 16, ith, nth, &plo, &phi);
        if (!j->panel)
            j->p16_rows(w, plo, phi, m, j->xq, j->dx, j->bs, j->y, j->ldy, j->accumulate);
        lo = 16 * plo;
        hi = 16 * phi < w->n ? 16 * phi : w->n;
    } else {
        numla_qblock_split_(w->n, ith, nth, &lo, &hi);
    }
    if (j->panel)
        j->panel_rows(w, lo, hi, m, j->xq, j->dx, j->bs, j->y, j->ldy, j->accumulate,
                      j->pscratch + (size_t)ith * j->pbytes);
    else if (j->gemm && !j->p16)
        numla_qblock_gemm_vnni_rows_(w, lo, hi, m, j->xq, j->dx, j->bs, j->y, j->ldy, j->accumulate);
    else if (!j->p16) {
        /* Q4_0 and Q5_1 take any K of whole blocks: their blocks past the whole 256 columns
         * after the dot */
        const int64_t ng = numla_qblock_q8_groups_(k), nt = (k % 256) / 32;
        const int64_t bb = numla_qblock_info_get(w->type)->bytes;
        for (int64_t r = lo; r < hi; r++)
            for (int64_t i = 0; i < m; i++) {
                const uint8_t *row = w->q + r * w->ld;
                float v = j->dot(row, nb, j->xq + i * k, j->dx + i * ng, j->bs + i * (k / 16));
                if (nt)
                    v += numla_qblock_vnni_b32_blocks_(w->type, row + 8 * bb * nb, nt, j->xq + i * k + 256 * nb,
                                                       j->dx[i * ng + nb]);
                float *yo = j->y + i * j->ldy + r;
                *yo = j->accumulate ? *yo + v : v;
            }
    }
}

void numla_qblock_forward_avx512vnni(const numla_qblock_weight *w, int64_t m, const float *x, int64_t ldx,
                                     float *y, int64_t ldy, int accumulate, void *ws, size_t ws_bytes)
{
    numla_qblock_forward_vnni_with_(w, m, x, ldx, y, ldy, accumulate, ws, ws_bytes, numla_qblock_panel_rows_,
                                    numla_qblock_p16_rows_);
}

void numla_qblock_forward_vnni_with_(const numla_qblock_weight *w, int64_t m, const float *x, int64_t ldx, float *y,
                                     int64_t ldy, int accumulate, void *ws, size_t ws_bytes,
                                     numla_qblock_panel_rows_fn panel_rows, numla_qblock_p16_rows_fn p16_rows)
{
    const int64_t k = w->k;
    const int panel = numla_qblock_panel_applies_(w, m), p16 = w->layout == NUMLA_QBLOCK_LAYOUT_PANEL16;
    numla_qblock_gemm_vnni_quantize_(x, ldx, m, k, ws);
    if (w->type == NUMLA_QBLOCK_Q4_K && !panel && !p16)
        numla_qblock_vnni_q4_k_order_(numla_qblock_ws_xq_(ws), m, k);
    /* Q8_0 with K not a multiple of 256 runs the 32-element form of the many-row kernels at every M */
    const int q8s = w->type == NUMLA_QBLOCK_Q8_0 && k % 256 != 0;
    if ((numla_qblock_type_row_get(w->type)->x_offset || q8s) && !panel && !p16)
        numla_qblock_gemm_vnni_unsign_(numla_qblock_ws_xq_(ws), m * k);
    numla_qblock_vnni_job_ job = {
        .w = w, .m = m, .ldy = ldy, .xq = numla_qblock_ws_xq_(ws), .dx = numla_qblock_ws_dx_(ws, m, k),
        .bs = numla_qblock_ws_bs_(ws, m, k), .y = y, .accumulate = accumulate, .panel = panel, .p16 = p16,
        .gemm = q8s || numla_qblock_gemm_vnni_applies_(w->type, m), .dot = numla_qblock_type_row_get(w->type)->q8_dot,
        .pscratch = panel ? (char *)numla_qblock_ws_panel_(ws, m, k) : NULL,
        .pbytes = panel ? numla_qblock_panel_thread_bytes_(w) : 0, .panel_rows = panel_rows,
        .p16_rows = p16_rows,
    };
    int nt = omp_get_max_threads();
    if (panel && ws_bytes < (size_t)(job.pscratch - (char *)ws) + (size_t)nt * job.pbytes) /* a smaller team's workspace */
        nt = (int)((ws_bytes - (size_t)(job.pscratch - (char *)ws)) / job.pbytes);
    /* One thread, or called on a thread of a team (the per-head and per-expert linears of a
     * decode step): the work runs here, without opening a region of one thread (for which
     * libgomp would still build a team). */
    if (nt <= 1 || omp_in_parallel()) {
        numla_qblock_vnni_run_(&job, 0, 1);
        return;
    }
#pragma omp parallel num_threads(nt)
    numla_qblock_vnni_run_(&job, omp_get_thread_num(), omp_get_num_threads());
}
