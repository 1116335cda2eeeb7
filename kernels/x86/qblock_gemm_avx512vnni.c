/* kernels/x86/qblock_gemm_avx512vnni.c — Q8 activation mode (kernels/qblock.h) with
 * AVX512-VNNI for Q4_K, Q6_K, Q8_0, Q5_0, IQ4_NL, IQ4_XS and MXFP4 at every M: the vnni level's only
 * kernels for these types (batch-1 decode included: a tile of one x row measured as fast as a
 * kernel of its own, which this file replaced).
 *
 * Each weight row's block is unpacked once (codes as unsigned bytes, its scales as 16-bit
 * lanes) and used for a tile of up to NUMLA_QBLOCK_GEMM_MR x rows, whose float accumulators
 * stay in registers; the weight rows a thread owns are walked in chunks that stay in L2 while
 * every x tile passes over them. From NUMLA_QBLOCK_PANEL_MIN_M rows the panel GEMM of
 * kernels/x86/qblock_panel_avx512vnni.c takes over where it has the type.
 *
 * Same bits whatever the tile height: each (weight row, x row) pair gets the same int32 per
 * lane for each block and then the same float operations in the same order (the block's scale
 * times dx as one fp32 product, one fma per block into 16 lanes; MXFP4: one fma per block
 * pair with the two scales, one per 256-column group with dx; the same reduction at the end),
 * so a row's output does not depend on M below the panel threshold.
 */
#include "kernels/qblock_internal.h"

#include <immintrin.h>
#include <omp.h>

static inline float numla_qblock_gh_(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

#define NUMLA_QBLOCK_GEMM_INLINE static inline __attribute__((always_inline))

/* One Q4_K weight row against mr quantized x rows (Q4_K's x order of qblock_avx512vnni.c: the
 * 32-column pieces 0 2 1 3 4 6 5 7 of each 256), out[i] = the row's dot with x row i. */
NUMLA_QBLOCK_GEMM_INLINE void numla_qblock_gemm_q4_k_(const uint8_t *row, int64_t nb, int mr, const int8_t *xq,
                                                      int64_t k, const float *dx, const int32_t *bs, float *out)
{
    const __m512i m4 = _mm512_set1_epi8(15);
#define NUMLA_Q4K_SEL(a, b)                                                                             \
    _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16((short)(0x8000 | (a))),                       \
                            _mm512_set1_epi16((short)(0x8000 | (b))))
    const __m512i sel0 = NUMLA_Q4K_SEL(0, 2), sel1 = NUMLA_Q4K_SEL(1, 3), sel2 = NUMLA_Q4K_SEL(4, 6),
                  sel3 = NUMLA_Q4K_SEL(5, 7);
#undef NUMLA_Q4K_SEL
    const __m512i msel = _mm512_setr_epi32((int)0x80808008, (int)0x80808008, (int)0x80808009, (int)0x80808009,
                                           (int)0x8080800a, (int)0x8080800a, (int)0x8080800b, (int)0x8080800b,
                                           (int)0x8080800c, (int)0x8080800c, (int)0x8080800d, (int)0x8080800d,
                                           (int)0x8080800e, (int)0x8080800e, (int)0x8080800f, (int)0x8080800f);
    __m512 acc[NUMLA_QBLOCK_GEMM_MR], accm[NUMLA_QBLOCK_GEMM_MR];
    for (int i = 0; i < mr; i++)
        acc[i] = accm[i] = _mm512_setzero_ps();
    const int64_t nb16 = k / 16;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = row + 144 * b;
        uint32_t s0, s1, s2;
        memcpy(&s0, blk + 4, 4);
        memcpy(&s1, blk + 8, 4);
        memcpy(&s2, blk + 12, 4);
        const uint32_t sc_lo = s0 & 0x3f3f3f3fu, m_lo = s1 & 0x3f3f3f3fu;
        const uint32_t sc_hi = (s2 & 0x0f0f0f0fu) | ((s0 >> 6) & 0x03030303u) << 4;
        const uint32_t m_hi = ((s2 >> 4) & 0x0f0f0f0fu) | ((s1 >> 6) & 0x03030303u) << 4;
        const __m512i smv = _mm512_broadcast_i32x4(_mm_setr_epi32((int)sc_lo, (int)sc_hi, (int)m_lo, (int)m_hi));
        const __m512i q0 = _mm512_loadu_si512(blk + 16), q1 = _mm512_loadu_si512(blk + 80);
        const __m512i lo0 = _mm512_and_si512(q0, m4), hi0 = _mm512_and_si512(_mm512_srli_epi16(q0, 4), m4);
        const __m512i lo1 = _mm512_and_si512(q1, m4), hi1 = _mm512_and_si512(_mm512_srli_epi16(q1, 4), m4);
        const __m512i sv0 = _mm512_shuffle_epi8(smv, sel0), sv1 = _mm512_shuffle_epi8(smv, sel1);
        const __m512i sv2 = _mm512_shuffle_epi8(smv, sel2), sv3 = _mm512_shuffle_epi8(smv, sel3);
        const __m512i mv = _mm512_shuffle_epi8(smv, msel);
        const float d16 = numla_qblock_gh_(blk), dm16 = numla_qblock_gh_(blk + 2);
        for (int i = 0; i < mr; i++) {
            const int8_t *xb = xq + i * k + 256 * b;
            __m512i iacc = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_maddubs_epi16(lo0, _mm512_loadu_si512(xb)), sv0);
            iacc = _mm512_dpwssd_epi32(iacc, _mm512_maddubs_epi16(hi0, _mm512_loadu_si512(xb + 64)), sv1);
            iacc = _mm512_dpwssd_epi32(iacc, _mm512_maddubs_epi16(lo1, _mm512_loadu_si512(xb + 128)), sv2);
            iacc = _mm512_dpwssd_epi32(iacc, _mm512_maddubs_epi16(hi1, _mm512_loadu_si512(xb + 192)), sv3);
            const float dxi = dx[i * nb + b];
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc), _mm512_set1_ps(d16 * dxi), acc[i]);
            const __m512i mm = _mm512_mullo_epi32(_mm512_loadu_si512(bs + i * nb16 + 16 * b), mv);
            accm[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(mm), _mm512_set1_ps(dm16 * dxi), accm[i]);
        }
    }
    for (int i = 0; i < mr; i++)
        out[i] = _mm512_reduce_add_ps(acc[i]) - _mm512_reduce_add_ps(accm[i]);
}

/* One Q6_K weight row against mr quantized x rows. */
NUMLA_QBLOCK_GEMM_INLINE void numla_qblock_gemm_q6_k_(const uint8_t *row, int64_t nb, int mr, const int8_t *xq,
                                                      int64_t k, const float *dx, const int32_t *bs, float *out)
{
    const __m256i m4 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
    /* 16-bit word j of the 64 elements 64c + ... (chunk c) takes group 4c + j / 8 */
    const __m512i widx[4] = {
        _mm512_set_epi16(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
        _mm512_set_epi16(7, 7, 7, 7, 7, 7, 7, 7, 6, 6, 6, 6, 6, 6, 6, 6, 5, 5, 5, 5, 5, 5, 5, 5, 4, 4, 4, 4, 4, 4, 4, 4),
        _mm512_set_epi16(11, 11, 11, 11, 11, 11, 11, 11, 10, 10, 10, 10, 10, 10, 10, 10, 9, 9, 9, 9, 9, 9, 9, 9, 8, 8,
                         8, 8, 8, 8, 8, 8),
        _mm512_set_epi16(15, 15, 15, 15, 15, 15, 15, 15, 14, 14, 14, 14, 14, 14, 14, 14, 13, 13, 13, 13, 13, 13, 13,
                         13, 12, 12, 12, 12, 12, 12, 12, 12),
    };
    __m512 acc[NUMLA_QBLOCK_GEMM_MR];
    for (int i = 0; i < mr; i++)
        acc[i] = _mm512_setzero_ps();
    const int64_t nb16 = k / 16;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = row + 210 * b, *ql = blk, *qh = blk + 128;
        const __m128i scb = _mm_loadu_si128((const __m128i *)(const void *)(blk + 192));
        const __m512i sc = _mm512_cvtepi8_epi32(scb);
        const __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(scb));
        __m512i w[4], sv[4];
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)(const void *)(ql + 64 * h));
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(const void *)(ql + 64 * h + 32));
            const __m256i hb = _mm256_loadu_si256((const __m256i *)(const void *)(qh + 32 * h));
            const __m256i c0 = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(hb, m3), 4));
            const __m256i c1 = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m3), 4));
            const __m256i c2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m3), 4));
            const __m256i c3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m3), 4));
            w[2 * h] = _mm512_inserti64x4(_mm512_castsi256_si512(c0), c1, 1);
            w[2 * h + 1] = _mm512_inserti64x4(_mm512_castsi256_si512(c2), c3, 1);
            sv[2 * h] = _mm512_permutexvar_epi16(widx[2 * h], sc16);
            sv[2 * h + 1] = _mm512_permutexvar_epi16(widx[2 * h + 1], sc16);
        }
        const float d16 = numla_qblock_gh_(blk + 208);
        for (int i = 0; i < mr; i++) {
            const int8_t *xb = xq + i * k + 256 * b;
            __m512i iacc = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_maddubs_epi16(w[0], _mm512_loadu_si512(xb)), sv[0]);
            iacc = _mm512_dpwssd_epi32(iacc, _mm512_maddubs_epi16(w[1], _mm512_loadu_si512(xb + 64)), sv[1]);
            iacc = _mm512_dpwssd_epi32(iacc, _mm512_maddubs_epi16(w[2], _mm512_loadu_si512(xb + 128)), sv[2]);
            iacc = _mm512_dpwssd_epi32(iacc, _mm512_maddubs_epi16(w[3], _mm512_loadu_si512(xb + 192)), sv[3]);
            /* the codes are q + 32 */
            const __m512i off = _mm512_mullo_epi32(sc, _mm512_loadu_si512(bs + i * nb16 + 16 * b));
            iacc = _mm512_sub_epi32(iacc, _mm512_slli_epi32(off, 5));
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc), _mm512_set1_ps(d16 * dx[i * nb + b]), acc[i]);
        }
    }
    for (int i = 0; i < mr; i++)
        out[i] = _mm512_reduce_add_ps(acc[i]);
}

/* One Q8_0 weight row (8 blocks per 256 columns) against mr quantized x rows. */
NUMLA_QBLOCK_GEMM_INLINE void numla_qblock_gemm_q8_0_(const uint8_t *row, int64_t nb, int mr, const int8_t *xq,
                                                      int64_t k, const float *dx, const int32_t *bs, float *out)
{
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    const __m512i didx = _mm512_setr_epi32(0, 0, 8, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    __m512 acc[NUMLA_QBLOCK_GEMM_MR];
    __m128 corr[NUMLA_QBLOCK_GEMM_MR];
    for (int i = 0; i < mr; i++) {
        acc[i] = _mm512_setzero_ps();
        corr[i] = _mm_setzero_ps();
    }
    const int64_t nb16 = k / 16;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = row + 8 * 34 * b;
        __m512i wv[4];
        __m512 sv[4];
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) {
            const uint8_t *pa = blk + 34 * (2 * u), *pb = pa + 34;
            wv[u] = _mm512_xor_si512(
                _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)(pa + 2))),
                                   _mm256_loadu_si256((const __m256i *)(const void *)(pb + 2)), 1),
                flip);
            sv[u] = _mm512_insertf32x8(_mm512_set1_ps(numla_qblock_gh_(pa)), _mm256_set1_ps(numla_qblock_gh_(pb)), 1);
        }
        for (int i = 0; i < mr; i++) {
            const int8_t *xb = xq + i * k + 256 * b;
            const __m512 dxv = _mm512_set1_ps(dx[i * nb + b]);
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) {
                /* lanes 0-7 d_a · dx, 8-15 d_b · dx: the 1-row kernel's products */
                const __m512 dv = _mm512_mul_ps(sv[u], dxv);
                const __m512i dp = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[u], _mm512_loadu_si512(xb + 64 * u));
                acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), dv, acc[i]);
                const __m128 bsum =
                    _mm_cvtepi32_ps(_mm_loadu_si128((const __m128i *)(const void *)(bs + i * nb16 + 16 * b + 4 * u)));
                /* (d_a, d_a, d_b, d_b) · dx from lanes 0, 0, 8, 8 */
                const __m128 d4 = _mm512_castps512_ps128(_mm512_permutexvar_ps(didx, dv));
                corr[i] = _mm_fmadd_ps(bsum, d4, corr[i]);
            }
        }
    }
    for (int i = 0; i < mr; i++) {
        const __m128 c2 = _mm_add_ps(corr[i], _mm_movehl_ps(corr[i], corr[i]));
        out[i] = _mm512_reduce_add_ps(acc[i]) - 128.0f * _mm_cvtss_f32(_mm_add_ss(c2, _mm_shuffle_ps(c2, c2, 1)));
    }
}


/* The 32-element types with a 5-bit or code-book code, Q5_0 and IQ4_NL (and Q8_0 where K is not
 * a multiple of 256: its bytes as they are): the x rows come as
 * unsigned bytes (q + 128, numla_qblock_gemm_vnni_unsign_), the weights as signed bytes (Q5_0:
 * its 5 bits - 16; IQ4_NL: its code book; MXFP4, below, the same way with twice the e2m1 values
 * and the E8M0 byte's 2^(e - 128)), two blocks to a vector in element order. vpdpbusd
 * then sums (q + 128) · c; the 128 · Σ c of each lane is known from the weights alone, so each
 * x row's sum starts from its negation (computed once per weight block pair). Lanes 0-7 hold
 * the first block, 8-15 the second; each block's scale · dx multiplies its lanes in one fma
 * per 64 columns. The row's last group may hold an odd number of blocks: the missing one has
 * scale 0, and x there is not read (masked load). These are the only kernels of the two types at this
 * level, so 1 x row runs the same code as many (mr = 1). */
NUMLA_QBLOCK_GEMM_INLINE __m512i numla_qblock_gemm_b32_codes_(numla_qblock_type type, const uint8_t *pa,
                                                              const uint8_t *pb)
{
    if (type == NUMLA_QBLOCK_Q8_0) { /* 32 signed bytes per block, as they are */
        const __m256i ca = _mm256_loadu_si256((const __m256i *)(const void *)(pa + 2));
        const __m256i cb = pb ? _mm256_loadu_si256((const __m256i *)(const void *)(pb + 2)) : _mm256_setzero_si256();
        return _mm512_inserti64x4(_mm512_castsi256_si512(ca), cb, 1);
    }
    /* 16 bytes of nibbles per block: low nibbles elements 0-15, high 16-31 */
    const int at = type == NUMLA_QBLOCK_Q5_0 ? 6 : 2;
    const __m128i qa = _mm_loadu_si128((const __m128i *)(const void *)(pa + at));
    const __m128i qb = pb ? _mm_loadu_si128((const __m128i *)(const void *)(pb + at)) : _mm_setzero_si128();
    const __m256i q = _mm256_set_m128i(qb, qa), m4 = _mm256_set1_epi8(15);
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(q, m4)),
                                         _mm256_and_si256(_mm256_srli_epi16(q, 4), m4), 1);
    /* quarters a-low, b-low, a-high, b-high -> a-low, a-high, b-low, b-high: element order */
    const __m512i nib = _mm512_shuffle_i32x4(v, v, 0xd8);
    if (type == NUMLA_QBLOCK_Q5_0) {
        uint32_t ha, hb = 0;
        memcpy(&ha, pa + 2, 4);
        if (pb)
            memcpy(&hb, pb + 2, 4);
        const __m512i hi = _mm512_maskz_mov_epi8((__mmask64)ha | (__mmask64)hb << 32, _mm512_set1_epi8(16));
        const __m512i code = _mm512_sub_epi8(_mm512_or_si512(nib, hi), _mm512_set1_epi8(16));
        return code;
    }
    const __m512i book = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)numla_qblock_iq4_values));
    return _mm512_shuffle_epi8(book, nib);
}


NUMLA_QBLOCK_GEMM_INLINE void numla_qblock_gemm_b32_(numla_qblock_type type, const uint8_t *row, int64_t k, int mr,
                                                     const uint8_t *xu, const float *dx, float *out)
{
    const int bytes = type == NUMLA_QBLOCK_Q5_0 ? 22 : type == NUMLA_QBLOCK_Q8_0 ? 34 : 18;
    const int64_t nblk = k / 32, ng = numla_qblock_q8_groups_(k);
    const __m512i k128 = _mm512_set1_epi8((char)0x80);
    __m512 acc[NUMLA_QBLOCK_GEMM_MR];
    for (int i = 0; i < mr; i++)
        acc[i] = _mm512_setzero_ps();
    for (int64_t j = 0; j < nblk; j += 2) {
        const uint8_t *pa = row + bytes * j, *pb = j + 1 < nblk ? pa + bytes : NULL;
        const __m512i wc = numla_qblock_gemm_b32_codes_(type, pa, pb);
        const __m512i wneg = _mm512_sub_epi32(_mm512_setzero_si512(),
                                              _mm512_dpbusd_epi32(_mm512_setzero_si512(), k128, wc));
        /* each block's scale: the fp16 d at its start */
        const __m512 sv = _mm512_insertf32x8(_mm512_set1_ps(numla_qblock_gh_(pa)),
                                             _mm256_set1_ps(pb ? numla_qblock_gh_(pb) : 0.0f), 1);
        const __mmask64 xm = pb ? ~(__mmask64)0 : 0xFFFFFFFFull;
        const int64_t g = j / 8;
        for (int i = 0; i < mr; i++) {
            const __m512i xv = _mm512_maskz_loadu_epi8(xm, xu + i * k + 32 * j);
            const __m512i dp = _mm512_dpbusd_epi32(wneg, xv, wc);
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), _mm512_mul_ps(sv, _mm512_set1_ps(dx[i * ng + g])), acc[i]);
        }
    }
    for (int i = 0; i < mr; i++)
        out[i] = _mm512_reduce_add_ps(acc[i]);
}




/* One IQ4_XS weight row against mr x rows, as the 32-element types above (x as q + 128, the
 * code book signed, lanes 0-7 sub-block 2u and 8-15 sub-block 2u + 1): each sub-block's scale
 * d · (ls - 32) is exact in fp32 (an 11-bit d times a 6-bit integer). */
NUMLA_QBLOCK_GEMM_INLINE void numla_qblock_gemm_iq4_xs_(const uint8_t *row, int64_t nb, int mr, const int8_t *xq,
                                                        int64_t k, const float *dx, const int32_t *bs, float *out)
{
    (void)bs;
    const uint8_t *xu = (const uint8_t *)xq;
    const __m512i k128 = _mm512_set1_epi8((char)0x80), m4 = _mm512_set1_epi8(15);
    int8_t lut[16];
    for (int j = 0; j < 16; j++)
        lut[j] = numla_qblock_iq4_values[j];
    const __m512i book = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)lut));
    __m512 acc[NUMLA_QBLOCK_GEMM_MR];
    for (int i = 0; i < mr; i++)
        acc[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = row + 136 * b, *qs = blk + 8;
        const float d = numla_qblock_gh_(blk);
        uint16_t sh;
        uint32_t sl;
        memcpy(&sh, blk + 2, 2);
        memcpy(&sl, blk + 4, 4);
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) {
            /* sub-blocks 2u, 2u + 1: 16 nibble bytes each, low nibbles elements 0-15 */
            const __m512i q = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)(qs + 32 * u)));
            const __m512i v = _mm512_inserti64x4(_mm512_and_si512(q, m4),
                                                 _mm256_and_si256(_mm256_srli_epi16(_mm512_castsi512_si256(q), 4),
                                                                  _mm256_set1_epi8(15)), 1);
            const __m512i wc = _mm512_shuffle_epi8(book, _mm512_shuffle_i32x4(v, v, 0xd8));
            const __m512i wneg = _mm512_sub_epi32(_mm512_setzero_si512(),
                                                  _mm512_dpbusd_epi32(_mm512_setzero_si512(), k128, wc));
            const int la = (int)(((sl >> (8 * u)) & 15) | ((sh >> (4 * u)) & 3) << 4) - 32;
            const int lb = (int)(((sl >> (8 * u + 4)) & 15) | ((sh >> (4 * u + 2)) & 3) << 4) - 32;
            const __m512 sv = _mm512_insertf32x8(_mm512_set1_ps(d * (float)la), _mm256_set1_ps(d * (float)lb), 1);
            for (int i = 0; i < mr; i++) {
                const __m512i dp = _mm512_dpbusd_epi32(wneg, _mm512_loadu_si512(xu + i * k + 256 * b + 64 * u), wc);
                acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), _mm512_mul_ps(sv, _mm512_set1_ps(dx[i * nb + b])),
                                         acc[i]);
            }
        }
    }
    for (int i = 0; i < mr; i++)
        out[i] = _mm512_reduce_add_ps(acc[i]);
}

/* kernels/qblock.h's Q8 quantization of rows [0, m) of x, as numla_qblock_quantize_rows_ does
 * it and with the same bits: the same amax, the same fp32 quotients, the same fp32 product
 * x · inv, rounded half to even by vrndscaleps (its rounding in the instruction, whatever
 * MXCSR says), 16 columns a vector (one per-16 sum each). Runs on the calling team from
 * NUMLA_QBLOCK_QUANT_TEAM_GROUPS groups; fewer (a decode step's row: 8 groups at K 2048), or
 * when called on a thread of a team, on the calling thread, which saves an OpenMP region per
 * linear. */
/* Group t (row t / ng, columns 256 (t % ng) ..) of the quantization. */
static inline void numla_qblock_vnni_quantize_group_(const float *x, int64_t ldx, int64_t k, int64_t ng, int64_t t,
                                                    int8_t *xq, float *dx, int32_t *bs)
{
    const int64_t i = t / ng, b = t % ng;
    const int len = k - 256 * b < 256 ? (int)(k - 256 * b) : 256; /* a multiple of 32 */
    const float *xb = x + i * ldx + 256 * b;
    int8_t *q = xq + i * k + 256 * b;
    int32_t *sb = bs + i * (k / 16) + 16 * b;
    __m512 mx = _mm512_setzero_ps();
    for (int j = 0; j < len; j += 16)
        mx = _mm512_max_ps(mx, _mm512_abs_ps(_mm512_loadu_ps(xb + j)));
    const float amax = _mm512_reduce_max_ps(mx);
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    dx[i * ng + b] = amax > 0.0f ? amax / 127.0f : 0.0f;
    const __m512 vinv = _mm512_set1_ps(inv), lim = _mm512_set1_ps(127.0f), nlim = _mm512_set1_ps(-127.0f);
    for (int j = 0; j < len; j += 16) {
        __m512 v = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(xb + j), vinv),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v = _mm512_min_ps(_mm512_max_ps(v, nlim), lim);
        const __m512i qi = _mm512_cvtps_epi32(v); /* integral already: exact */
        _mm_storeu_si128((__m128i *)(void *)(q + j), _mm512_cvtsepi32_epi8(qi));
        sb[j / 16] = _mm512_reduce_add_epi32(qi);
    }
}

void numla_qblock_gemm_vnni_quantize_(const float *x, int64_t ldx, int64_t m, int64_t k, void *ws)
{
    numla_qblock_quantize_team_(x, ldx, m, k, ws, numla_qblock_vnni_quantize_group_);
}

void numla_qblock_gemm_vnni_unsign_(int8_t *xq, int64_t n)
{
    const __m512i k128 = _mm512_set1_epi8((char)0x80);
    int64_t i = 0;
    for (; i + 64 <= n; i += 64)
        _mm512_storeu_si512(xq + i, _mm512_xor_si512(_mm512_loadu_si512(xq + i), k128));
    for (; i < n; i++)
        xq[i] = (int8_t)((uint8_t)xq[i] ^ 0x80);
}

/* The 32-element types in the tile signature (Q8_0 where K is not a multiple of 256: its last
 * group K mod 256, numla_qblock_q8_takes). */
#define NUMLA_QBLOCK_GEMM_B32(T, TYPE)                                                                          \
    NUMLA_QBLOCK_GEMM_INLINE void numla_qblock_gemm_##T##_(const uint8_t *row, int64_t nb, int mr, const int8_t *xq, \
                                                           int64_t k, const float *dx, const int32_t *bs, float *out) \
    {                                                                                                           \
        (void)nb;                                                                                               \
        (void)bs;                                                                                               \
        numla_qblock_gemm_b32_(TYPE, row, k, mr, (const uint8_t *)xq, dx, out);                                 \
    }
NUMLA_QBLOCK_GEMM_B32(q5_0, NUMLA_QBLOCK_Q5_0)
NUMLA_QBLOCK_GEMM_B32(q8_0s, NUMLA_QBLOCK_Q8_0)
NUMLA_QBLOCK_GEMM_B32(iq4_nl, NUMLA_QBLOCK_IQ4_NL)
#undef NUMLA_QBLOCK_GEMM_B32

/* MXFP4 (17-byte blocks: the E8M0 byte, then 16 nibble bytes) against mr x rows, two blocks a
 * step as the 32-element types above with fewer operations a block: the two blocks' nibble
 * bytes go to the quarters [a, a, b, b] in one lane shuffle and the second and fourth are
 * shifted down a nibble in place (vpsrlvw), so one vpshufb gives the codes in element order;
 * each block's scale 2^(e - 128) is a broadcast load from numla_qblock_e8m0h_bits_; and a
 * 256-column group is summed per x row (one fma a step: the int32 lanes as floats times the
 * two blocks' scales) before the group's dx multiplies it (one fma a group). Every x row gets
 * the same operations in the same order whatever mr, so the same bits at every tile height. */
NUMLA_QBLOCK_GEMM_INLINE void numla_qblock_gemm_mxfp4_(const uint8_t *row, int64_t nb, int mr, const int8_t *xq,
                                                       int64_t k, const float *dx, const int32_t *bs, float *out)
{
    (void)nb;
    (void)bs;
    const uint8_t *xu = (const uint8_t *)xq;
    const int64_t nblk = k / 32, ng = numla_qblock_q8_groups_(k);
    const __m512i k128 = _mm512_set1_epi8((char)0x80), m4 = _mm512_set1_epi8(15);
    const long long s4 = 0x0004000400040004ll; /* the high-nibble quarters' words: >> 4 */
    const __m512i sh = _mm512_set_epi64(s4, s4, 0, 0, s4, s4, 0, 0);
    const __m512i book = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)numla_qblock_mxfp4_values));
    __m512 acc[NUMLA_QBLOCK_GEMM_MR];
    for (int i = 0; i < mr; i++)
        acc[i] = _mm512_setzero_ps();
    for (int64_t g = 0; g < ng; g++) {
        __m512 gacc[NUMLA_QBLOCK_GEMM_MR];
        for (int i = 0; i < mr; i++)
            gacc[i] = _mm512_setzero_ps();
        const int64_t j1 = 8 * g + 8 < nblk ? 8 * g + 8 : nblk;
        for (int64_t j = 8 * g; j < j1; j += 2) {
            const uint8_t *pa = row + 17 * j;
            const int two = j + 1 < j1; /* the row's last block may be alone */
            const __m128i qa = _mm_loadu_si128((const __m128i *)(const void *)(pa + 1));
            const __m128i qb = two ? _mm_loadu_si128((const __m128i *)(const void *)(pa + 18)) : _mm_setzero_si128();
            __m512i q = _mm512_castsi256_si512(_mm256_set_m128i(qb, qa));
            q = _mm512_and_si512(_mm512_srlv_epi16(_mm512_shuffle_i32x4(q, q, 0x50), sh), m4);
            const __m512i wc = _mm512_shuffle_epi8(book, q);
            const __m512i wneg = _mm512_sub_epi32(_mm512_setzero_si512(),
                                                  _mm512_dpbusd_epi32(_mm512_setzero_si512(), k128, wc));
            const __m512 sa = _mm512_castsi512_ps(_mm512_set1_epi32((int)numla_qblock_e8m0h_bits_[pa[0]]));
            const __m256 sb = two ? _mm256_castsi256_ps(_mm256_set1_epi32((int)numla_qblock_e8m0h_bits_[pa[17]]))
                                  : _mm256_setzero_ps();
            const __m512 sv = _mm512_insertf32x8(sa, sb, 1);
            for (int i = 0; i < mr; i++) {
                const uint8_t *xp = xu + i * k + 32 * j;
                const __m512i xv = two ? _mm512_loadu_si512((const void *)xp)
                                       : _mm512_maskz_loadu_epi8(0xFFFFFFFFull, xp);
                const __m512i dp = _mm512_dpbusd_epi32(wneg, xv, wc);
                gacc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), sv, gacc[i]);
            }
        }
        for (int i = 0; i < mr; i++)
            acc[i] = _mm512_fmadd_ps(gacc[i], _mm512_set1_ps(dx[i * ng + g]), acc[i]);
    }
    for (int i = 0; i < mr; i++)
        out[i] = _mm512_reduce_add_ps(acc[i]);
}

/* One entry per (type, tile height): the tile loops with mr a constant (the partial tiles take
 * 1 .. MR - 1 rows; a case above MR - 1 is never reached). */
#define NUMLA_QBLOCK_GEMM_TILES(T)                                                                              \
    void numla_qblock_q8_gemm_##T##_full_avx512vnni(const uint8_t *row, int64_t nb, const int8_t *xq, int64_t k, \
                                                    const float *dx, const int32_t *bs, float *out)             \
    {                                                                                                           \
        numla_qblock_gemm_##T##_(row, nb, NUMLA_QBLOCK_GEMM_MR, xq, k, dx, bs, out);                            \
    }                                                                                                           \
    void numla_qblock_q8_gemm_##T##_part_avx512vnni(const uint8_t *row, int64_t nb, const int8_t *xq, int64_t k, \
                                                    const float *dx, const int32_t *bs, float *out, int mr)     \
    {                                                                                                           \
        switch (mr) {                                                                                           \
        case 1: numla_qblock_gemm_##T##_(row, nb, 1, xq, k, dx, bs, out); break;                              \
        case 2: numla_qblock_gemm_##T##_(row, nb, 2, xq, k, dx, bs, out); break;                              \
        case 3: numla_qblock_gemm_##T##_(row, nb, 3, xq, k, dx, bs, out); break;                              \
        case 4: numla_qblock_gemm_##T##_(row, nb, NUMLA_QBLOCK_GEMM_MR > 4 ? 4 : 1, xq, k, dx, bs, out); break;                              \
        case 5: numla_qblock_gemm_##T##_(row, nb, NUMLA_QBLOCK_GEMM_MR > 5 ? 5 : 1, xq, k, dx, bs, out); break;                              \
        case 6: numla_qblock_gemm_##T##_(row, nb, NUMLA_QBLOCK_GEMM_MR > 6 ? 6 : 1, xq, k, dx, bs, out); break;                              \
        default: numla_qblock_gemm_##T##_(row, nb, NUMLA_QBLOCK_GEMM_MR > 7 ? 7 : 1, xq, k, dx, bs, out); break;                             \
        }                                                                                                       \
    }

NUMLA_QBLOCK_GEMM_TILES(q4_k)
NUMLA_QBLOCK_GEMM_TILES(q6_k)
NUMLA_QBLOCK_GEMM_TILES(q8_0)
NUMLA_QBLOCK_GEMM_TILES(q5_0)
NUMLA_QBLOCK_GEMM_TILES(q8_0s)
NUMLA_QBLOCK_GEMM_TILES(iq4_nl)
NUMLA_QBLOCK_GEMM_TILES(mxfp4)
NUMLA_QBLOCK_GEMM_TILES(iq4_xs)
_Static_assert(NUMLA_QBLOCK_GEMM_MR <= 8, "the partial tiles above cover 1 .. 7 rows");

int numla_qblock_gemm_vnni_applies_(numla_qblock_type type, int64_t m)
{
    const numla_qblock_type_row *row = numla_qblock_type_row_get(type);
    /* the x_offset types have no other kernel at this level: every m */
    return row->q8_gemm.full && (row->x_offset || m >= NUMLA_QBLOCK_GEMM_MIN_M);
}

void numla_qblock_gemm_vnni_rows_(const numla_qblock_weight *w, int64_t lo, int64_t hi, int64_t m, const int8_t *xq,
                                  const float *dx, const int32_t *bs, float *y, int64_t ldy, int accumulate)
{
    /* the row's tiles; where K is not a multiple of 256, its short-group form (Q8_0's) */
    const numla_qblock_type_row *trow = numla_qblock_type_row_get(w->type);
    const int short_k = w->k % 256 && trow->q8_gemm_short.full;
    const numla_qblock_q8_gemm_full_fn full = short_k ? trow->q8_gemm_short.full : trow->q8_gemm.full;
    const numla_qblock_q8_gemm_part_fn part = short_k ? trow->q8_gemm_short.part : trow->q8_gemm.part;
    const int64_t k = w->k, nb = numla_qblock_q8_groups_(k), nb16 = k / 16;
    int64_t chunk = NUMLA_QBLOCK_GEMM_CHUNK / w->ld;
    if (chunk < 1)
        chunk = 1;
    for (int64_t r0 = lo; r0 < hi; r0 += chunk) {
        const int64_t r1 = r0 + chunk < hi ? r0 + chunk : hi;
        for (int64_t i0 = 0; i0 < m; i0 += NUMLA_QBLOCK_GEMM_MR) {
            const int mr = m - i0 < NUMLA_QBLOCK_GEMM_MR ? (int)(m - i0) : NUMLA_QBLOCK_GEMM_MR;
            for (int64_t r = r0; r < r1; r++) {
                float v[NUMLA_QBLOCK_GEMM_MR];
                if (mr == NUMLA_QBLOCK_GEMM_MR)
                    full(w->q + r * w->ld, nb, xq + i0 * k, k, dx + i0 * nb, bs + i0 * nb16, v);
                else
                    part(w->q + r * w->ld, nb, xq + i0 * k, k, dx + i0 * nb, bs + i0 * nb16, v, mr);
                for (int i = 0; i < mr; i++) {
                    float *yo = y + (i0 + i) * ldy + r;
                    *yo = accumulate ? *yo + v[i] : v[i];
                }
            }
        }
    }
}
