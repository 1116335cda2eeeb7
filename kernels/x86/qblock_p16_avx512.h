/* kernels/x86/qblock_p16_avx512.h — what the kernels reading stored PANEL16 panels share (the
 * small-M kernels of qblock_p16_avx512vnni.c and the panel GEMM's unpacking in
 * qblock_panel_avx512vnni.c): the code book, a unit's codes as two vpdpbusd operands, and the
 * masked store of a panel's 16 outputs. Layout: kernels/qblock.h, kernels/qblock_internal.h. */
#ifndef NUMLA_KERNELS_X86_QBLOCK_P16_AVX512_H
#define NUMLA_KERNELS_X86_QBLOCK_P16_AVX512_H

#include "kernels/qblock_internal.h"

#include <immintrin.h>

/* The IQ4 code book + 128 (so the codes are unsigned) in each 128-bit lane, for vpshufb. */
static inline __m512i numla_qblock_p16_book_(void)
{
    int8_t lut[16];
    for (int j = 0; j < 16; j++)
        lut[j] = (int8_t)(numla_qblock_iq4_values[j] + 128);
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)lut));
}

/* How a unit's nibbles become codes. */
enum {
    NUMLA_QBLOCK_P16_NIB = 0,  /* as they are: Q4_K */
    NUMLA_QBLOCK_P16_BOOK = 1, /* through the code book + 128: IQ4_XS, IQ4_NL */
    NUMLA_QBLOCK_P16_BIT5 = 2, /* plus a fifth bit from two 64-bit masks: Q5_0 */
};

/* The 64-byte unit at u (16 rows x 4 code bytes) as two operands of unsigned codes, its low
 * nibbles and its high ones; masks: Q5_0's two masks (low, high) for the unit. */
static inline __attribute__((always_inline)) void numla_qblock_p16_unit_(const uint8_t *u, int how, const uint8_t *masks,
                                                                         __m512i book, __m512i *lo, __m512i *hi)
{
    const __m512i m4 = _mm512_set1_epi8(15), v = _mm512_load_si512((const void *)u);
    __m512i l = _mm512_and_si512(v, m4), h = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    if (how == NUMLA_QBLOCK_P16_BOOK) {
        l = _mm512_shuffle_epi8(book, l);
        h = _mm512_shuffle_epi8(book, h);
    } else if (how == NUMLA_QBLOCK_P16_BIT5) {
        uint64_t kl, kh;
        memcpy(&kl, masks, 8);
        memcpy(&kh, masks + 8, 8);
        const __m512i h16 = _mm512_set1_epi8(16);
        l = _mm512_mask_add_epi8(l, (__mmask64)kl, l, h16);
        h = _mm512_mask_add_epi8(h, (__mmask64)kh, h, h16);
    }
    *lo = l;
    *hi = h;
}

/* Q6_K's group of three units at gp (ql (n, v), ql (n, v + 8), qh (n, v): kernels/qblock_internal.h)
 * as four operands of 6-bit codes q + 32, unsigned: op[s] holds the x quad 32 n + 8 s + v of the
 * 256-column piece (sub-block 8 n + 2 s + v / 4). Code = low 4 bits | the qh field moved to bits
 * 4-5 (ternary logic 0xF8: a | (b & c)). */
static inline __attribute__((always_inline)) void numla_qblock_p16_q6_ops_(const uint8_t *gp, __m512i op[4])
{
    const __m512i m4 = _mm512_set1_epi8(15), m30 = _mm512_set1_epi8(0x30);
    const __m512i lv = _mm512_loadu_si512((const void *)gp);
    const __m512i lw = _mm512_loadu_si512((const void *)(gp + 64));
    const __m512i hb = _mm512_loadu_si512((const void *)(gp + 128));
    op[0] = _mm512_ternarylogic_epi32(_mm512_and_si512(lv, m4), _mm512_slli_epi16(hb, 4), m30, 0xF8);
    op[1] = _mm512_ternarylogic_epi32(_mm512_and_si512(lw, m4), _mm512_slli_epi16(hb, 2), m30, 0xF8);
    op[2] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(lv, 4), m4), hb, m30, 0xF8);
    op[3] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(lw, 4), m4), _mm512_srli_epi16(hb, 2), m30,
                                      0xF8);
}

/* Q4_K's and Q5_K's 16 rows' scale d · sc and min dmin · m in fp32, from the bytes sc[16] at sp
 * and m[16] at sp + 128 (their panels' layout). */
static inline __attribute__((always_inline)) void numla_qblock_p16_k4_scales_(const uint8_t *sp, __m512 d, __m512 dmin,
                                                                              __m512 *sv, __m512 *mv)
{
    const __m128i s8 = _mm_load_si128((const __m128i *)(const void *)sp);
    const __m128i m8 = _mm_load_si128((const __m128i *)(const void *)(sp + 128));
    *sv = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(s8)));
    *mv = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(m8)));
}

/* A K-quant piece's sub-block j (0-7): its 16 rows' scale and min in fp32, from the piece's d
 * and dmin (fp32) and its scale bytes (Q4_K: d · sc, dmin · m; IQ4_XS: d · (ls - 32), 128 times
 * that). The panel GEMM's unpacking stores these; the small-M kernels use them in registers. */
static inline __attribute__((always_inline)) void numla_qblock_p16_kq_scales_(const uint8_t *pc, int iq4, int j, __m512 d,
                                                                              __m512 dmin, __m512 *sv, __m512 *mv)
{
    if (!iq4) {
        numla_qblock_p16_k4_scales_(pc + NUMLA_QBLOCK_P16_SC_Q4K + 16 * j, d, dmin, sv, mv);
        return;
    }
    const __m128i s8 = _mm_load_si128((const __m128i *)(const void *)(pc + NUMLA_QBLOCK_P16_SC_IQ4 + 16 * j));
    *sv = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(s8)));
    *mv = _mm512_mul_ps(*sv, _mm512_set1_ps(128.0f));
}

/* The fp32 steps shared by the panel GEMM and the small-M kernels, so that they give the same
 * bits. Per 32-column sub-block, for 16 rows and one x row: is its exact int32 sums, sv and mv
 * the rows' scale and min, bs2 the x row's two per-16 code sums there, summed into the 256-column
 * group's partial tb (without the group's x scale):
 *   tb + float(is) · sv - mv · float(Σ x)
 * and once per group, with its x scale dx:  acc + tb · dx. */
static inline __attribute__((always_inline)) __m512 numla_qblock_panel_sub_f_(__m512 tb, __m512i is, __m512 sv, __m512 mv,
                                                                               float bsum)
{
    tb = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), sv, tb);
    return _mm512_fnmadd_ps(mv, _mm512_set1_ps(bsum), tb);
}

/* The same with Σ x from the two per-16 sums bs2 (the float of an exact integer: the same bits
 * as a caller that converted it before). */
static inline __attribute__((always_inline)) __m512 numla_qblock_panel_sub_(__m512 tb, __m512i is, __m512 sv, __m512 mv,
                                                                             const int32_t *bs2)
{
    return numla_qblock_panel_sub_f_(tb, is, sv, mv, (float)(bs2[0] + bs2[1]));
}

static inline __attribute__((always_inline)) __m512 numla_qblock_panel_group_(__m512 acc, __m512 tb, float dx)
{
    return _mm512_fmadd_ps(tb, _mm512_set1_ps(dx), acc);
}

/* y rows [0, mr) (ldy apart) at columns r .. r + 16 (stopping at n) = acc (+ y). */
static inline __attribute__((always_inline)) void numla_qblock_p16_store_(const __m512 *acc, int mr, int64_t r, int64_t n,
                                                                          float *y, int64_t ldy, int accumulate)
{
    const int64_t left = n - r;
    const __mmask16 msk = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
    for (int i = 0; i < mr; i++) {
        float *yo = y + i * ldy + r;
        __m512 v = acc[i];
        if (accumulate)
            v = _mm512_add_ps(_mm512_maskz_loadu_ps(msk, yo), v);
        _mm512_mask_storeu_ps(yo, msk, v);
    }
}

#endif
