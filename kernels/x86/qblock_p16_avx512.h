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

/* The fp32 steps shared by the panel GEMM and the small-M kernels of the 32-element types, so
 * that they give the same bits. Per 32-column sub-block, for 16 rows and one x row: is its exact int32 sums, sv and mv
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

/* The piece form of the types with integer sub-block scales (their row's int_scales: Q4_K and
 * Q5_K here, Q2_K, IQ4_XS and Q3_K below), shared by the panel GEMM (both levels) and the stored
 * panels' kernels, so they give the same bits. Per 256-column piece, for 16 weight rows and one x
 * row, with IS_j the exact int32 Σ q · x of 32-column sub-block j, XS_j its Σ x (the quantized
 * codes), sc_j and m_j the rows' 6-bit scale and min:
 *   S = Σ_j sc_j IS_j,  Z = Σ_j m_j XS_j          (exact in int32: |S| < 8 · 63 · 32 · 31 · 127)
 *   acc = fma(float(S) · d - float(Z) · dmin, dx, acc)
 * the difference one fmsub of float(S), d and the rounded float(Z) · dmin. Z is four vpdpwssd: the
 * rows' m of sub-blocks 2p and 2p + 1 as word pairs (numla_qblock_k4_mpair_) against the x row's
 * XS of the same two as a broadcast word pair (numla_qblock_k4_xpairs_; |XS| <= 32 · 127). */
static inline __attribute__((always_inline)) __m512i numla_qblock_k4_mpair_(const uint8_t *m_even, const uint8_t *m_odd)
{
    const __m512i a = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)m_even));
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)m_odd));
    return _mm512_or_si512(a, _mm512_slli_epi32(b, 16));
}

/* An x row's XS pairs of one piece from its per-16 sums bs16[16]: out[p] = XS_2p | XS_2p+1 << 16
 * (as words). */
static inline __attribute__((always_inline)) void numla_qblock_k4_xpairs_(const int32_t *bs16, int32_t out[4])
{
    for (int p = 0; p < 4; p++) {
        const uint32_t a = (uint32_t)(bs16[4 * p] + bs16[4 * p + 1]), c = (uint32_t)(bs16[4 * p + 2] + bs16[4 * p + 3]);
        out[p] = (int32_t)((a & 0xFFFFu) | c << 16);
    }
}

/* Z of one x row: the four pairs' products. */
static inline __attribute__((always_inline)) __m512i numla_qblock_k4_z_(const __m512i mp[4], const int32_t xp[4])
{
    __m512i z = _mm512_dpwssd_epi32(_mm512_setzero_si512(), mp[0], _mm512_set1_epi32(xp[0]));
    z = _mm512_dpwssd_epi32(z, mp[1], _mm512_set1_epi32(xp[1]));
    z = _mm512_dpwssd_epi32(z, mp[2], _mm512_set1_epi32(xp[2]));
    return _mm512_dpwssd_epi32(z, mp[3], _mm512_set1_epi32(xp[3]));
}

/* The piece's step into acc. */
static inline __attribute__((always_inline)) __m512 numla_qblock_k4_piece_(__m512 acc, __m512i S, __m512i Z, __m512 d,
                                                                            __m512 dmin, float dx)
{
    const __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(Z), dmin);
    return _mm512_fmadd_ps(_mm512_fmsub_ps(_mm512_cvtepi32_ps(S), d, t), _mm512_set1_ps(dx), acc);
}

/* Q2_K, with 16 sub-blocks of 16 columns, takes the same form with its 4-bit sc and m: S over its
 * 16 sums, Z over its 16 Σ x (the quantization's per-16 sums as they are, |XS| <= 16 · 127) in
 * eight pairs. A 16-column sum fits a word (|Σ q · x| <= 16 · 3 · 127), so it may join S by one
 * vpdpwssd with sc as a word (the high word of its int32 is 0). */
static inline __attribute__((always_inline)) void numla_qblock_k16_xpairs_(const int32_t *bs16, int32_t out[8])
{
    for (int p = 0; p < 8; p++)
        out[p] = (int32_t)(((uint32_t)bs16[2 * p] & 0xFFFFu) | (uint32_t)bs16[2 * p + 1] << 16);
}

static inline __attribute__((always_inline)) __m512i numla_qblock_k16_z_(const __m512i mp[8], const int32_t xp[8])
{
    __m512i z = _mm512_dpwssd_epi32(_mm512_setzero_si512(), mp[0], _mm512_set1_epi32(xp[0]));
    for (int p = 1; p < 8; p++)
        z = _mm512_dpwssd_epi32(z, mp[p], _mm512_set1_epi32(xp[p]));
    return z;
}

/* The rows' m of sub-blocks 2p and 2p + 1 (int32 lanes, signed or not) as word pairs. */
static inline __attribute__((always_inline)) __m512i numla_qblock_k16_mpair_(__m512i m_even, __m512i m_odd)
{
    return _mm512_or_si512(_mm512_and_si512(m_even, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(m_odd, 16));
}

/* Q3_K's form (NUMLA_QBLOCK_FORM_Q3): its codes are q + 4 (unsigned) under a signed 6-bit s = s6 - 32
 * per 16-column sub-block, so a piece's U = Σ_j s_j Σ q x = Σ_j s_j (IS_j - 4 XS_j) is an
 * integer below 2^23 in magnitude (16 · 32 · 16 · 4 · 127): exact in fp32 however it is summed,
 * with fp32 fmas of float(IS_j - 4 XS_j) and float(s_j) (on the pipes vpdpbusd leaves free);
 *   acc = fma(float(U), d · dx, acc)
 * The area holds d (fp32) and s as floats ([16][16] from NUMLA_QBLOCK_K4_SC). */

/* IQ4_XS takes the form too: its codes are its book's values + 128 (unsigned) and its scale s =
 * ls - 32 a signed 6-bit integer, so S = Σ_j s_j Σ (c + 128) x and Z = Σ_j s_j XS_j with dmin =
 * 128 d (w = d s c = d s (c + 128) - 128 d s); the word pairs of s are signed
 * (numla_qblock_k16_mpair_ masks the low word). */

/* The unpacked panel's scale area for these types (kernels/qblock_internal.h): per piece b,
 * NUMLA_QBLOCK_K4_PIECE_FLOATS floats from float b · that: d[16] and dmin[16] (fp32), then the
 * 16 rows' sc as int32 per sub-block ([8][16]; Q2_K [16][16]) and the m word pairs ([4][16];
 * Q2_K [8][16] from NUMLA_QBLOCK_K16_MP). */
enum {
    NUMLA_QBLOCK_K4_D = 0,
    NUMLA_QBLOCK_K4_DMIN = 16,
    NUMLA_QBLOCK_K4_SC = 32,
    NUMLA_QBLOCK_K4_MP = 32 + 8 * 16,
    NUMLA_QBLOCK_K4_PIECE_FLOATS = 512, /* the area's share of a piece: 2 · 16 sub-blocks of 16 */
    /* Q2_K's: sc [16][16], m word pairs [8][16] */
    NUMLA_QBLOCK_K16_MP = 32 + 16 * 16,
};
_Static_assert(NUMLA_QBLOCK_K4_MP + 4 * 16 <= NUMLA_QBLOCK_K4_PIECE_FLOATS, "a piece's integer scales fit its area");
_Static_assert(NUMLA_QBLOCK_K16_MP + 8 * 16 <= NUMLA_QBLOCK_K4_PIECE_FLOATS, "a piece's integer scales fit its area");

/* Into the piece area at pa: d and dmin (fp32), the sc and m bytes of the 16 rows per sub-block
 * (16 bytes each, sub-block j at sc8 + sstride j and m8 + sstride j). */
static inline __attribute__((always_inline)) void numla_qblock_k4_put_(float *pa, __m512 d, __m512 dmin, const uint8_t *sc8,
                                                                        const uint8_t *m8, int64_t sstride)
{
    _mm512_store_ps(pa + NUMLA_QBLOCK_K4_D, d);
    _mm512_store_ps(pa + NUMLA_QBLOCK_K4_DMIN, dmin);
    int32_t *iv = (int32_t *)(void *)pa;
    for (int j = 0; j < 8; j++)
        _mm512_store_si512((void *)(iv + NUMLA_QBLOCK_K4_SC + 16 * j),
                           _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(sc8 + sstride * j))));
    for (int p = 0; p < 4; p++)
        _mm512_store_si512((void *)(iv + NUMLA_QBLOCK_K4_MP + 16 * p),
                           numla_qblock_k4_mpair_(m8 + sstride * 2 * p, m8 + sstride * (2 * p + 1)));
}

/* How each form's scaled codes become byte planes (the form: its type row's int_scales), and S
 * from their products:
 *   K4   lo = q · (sc & 7), hi = q · (sc >> 3) (q at most 31: unsigned); S = lo + 8 hi
 *   Q2   one plane q · sc (at most 45); S = lo
 *   IQ4  w = (c - 128) · s with its codes c (the book + 128) and signed s (|w| <= 4064): lo = w &
 *        63, hi = w >> 6 (signed); S = lo + 64 hi + 128 Z (the vnni level's S counts the + 128)
 *   Q3   w = (c - 4) · s (codes c = q + 4, signed s = s6 - 32; -124 <= w <= 128): lo = w & 63,
 *        hi = w >> 6 (signed); U = lo + 64 hi */

/* The unpacked panel at pan (codes, then the piece form's area) into its planes: lo over the codes,
 * hi at hip (16 k bytes; not for Q2_K), k-quad q at 64 q. The amx level's tiles take every kind;
 * the vnni panel GEMM takes Q2_K's one plane (a piece's S straight from vpdpbusd). */
static inline void numla_qblock_k4_planes_(uint8_t *pan, int64_t k, uint8_t *hip, int kind)
{
    static const int16_t rows2[32] __attribute__((aligned(64))) = {
        0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15};
    const __m512i idx = _mm512_load_si512((const void *)rows2), lob = _mm512_set1_epi16(0xFF);
    const int32_t *area = (const int32_t *)(const void *)(pan + 16 * k);
    const int spb = kind == NUMLA_QBLOCK_FORM_Q2 || kind == NUMLA_QBLOCK_FORM_Q3 ? 16 : 8, qs = 64 / spb; /* sub-blocks, quads */
    for (int64_t b = 0; b < k / 256; b++)
        for (int g = 0; g < spb; g++) {
            /* the 16 rows' sc, as words with word i row i / 2's (a unit's bytes 2 i, 2 i + 1) */
            const int32_t *sp = area + b * NUMLA_QBLOCK_K4_PIECE_FLOATS + NUMLA_QBLOCK_K4_SC + 16 * g;
            const __m512i sc = kind == NUMLA_QBLOCK_FORM_Q3 ? _mm512_cvtps_epi32(_mm512_load_ps((const float *)(const void *)sp))
                                                          : _mm512_load_si512((const void *)sp);
            const __m512i f0 = _mm512_permutexvar_epi16(
                idx, _mm512_castsi256_si512(_mm512_cvtepi32_epi16(
                         kind == NUMLA_QBLOCK_FORM_K4 ? _mm512_and_si512(sc, _mm512_set1_epi32(7)) : sc)));
            const __m512i f1 =
                _mm512_permutexvar_epi16(idx, _mm512_castsi256_si512(_mm512_cvtepi32_epi16(_mm512_srli_epi32(sc, 3))));
            for (int64_t q = 64 * b + qs * g; q < 64 * b + qs * g + qs; q++) {
                const __m512i v = _mm512_load_si512((const void *)(pan + 64 * q));
                __m512i ve = _mm512_and_si512(v, lob), vo = _mm512_srli_epi16(v, 8);
                if (kind == NUMLA_QBLOCK_FORM_IQ4 || kind == NUMLA_QBLOCK_FORM_Q3) { /* the signed values */
                    const __m512i off = _mm512_set1_epi16(kind == NUMLA_QBLOCK_FORM_Q3 ? 4 : 128);
                    ve = _mm512_sub_epi16(ve, off);
                    vo = _mm512_sub_epi16(vo, off);
                }
                const __m512i we = _mm512_mullo_epi16(ve, f0), wo = _mm512_mullo_epi16(vo, f0);
                if (kind != NUMLA_QBLOCK_FORM_K4 && kind != NUMLA_QBLOCK_FORM_Q2) { /* signed: split as Q6_K's planes */
                    _mm512_store_si512((void *)(pan + 64 * q),
                                       _mm512_ternarylogic_epi32(_mm512_and_si512(we, _mm512_set1_epi16(63)),
                                                                 _mm512_slli_epi16(wo, 8), _mm512_set1_epi16(63 << 8), 0xF8));
                    _mm512_store_si512((void *)(hip + 64 * q),
                                       _mm512_ternarylogic_epi32(_mm512_slli_epi16(_mm512_srai_epi16(wo, 6), 8),
                                                                 _mm512_srai_epi16(we, 6), lob, 0xF8));
                    continue;
                }
                _mm512_store_si512((void *)(pan + 64 * q), _mm512_or_si512(we, _mm512_slli_epi16(wo, 8)));
                if (kind == NUMLA_QBLOCK_FORM_K4)
                    _mm512_store_si512((void *)(hip + 64 * q),
                                       _mm512_or_si512(_mm512_mullo_epi16(ve, f1),
                                                       _mm512_slli_epi16(_mm512_mullo_epi16(vo, f1), 8)));
            }
        }
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
