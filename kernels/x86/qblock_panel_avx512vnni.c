/* kernels/x86/qblock_panel_avx512vnni.c — Q8 activation mode (kernels/qblock.h) of every block
 * encoding but Q6_K (the encodings of Q4_K_M, IQ4_XS and the 2-bit files' prefill linears,
 * DeepSeek-V4's FP4 experts) for many x rows (prefill, MoE experts with many tokens): a
 * packed-panel GEMM on vpdpbusd.
 *
 * The tile kernels of qblock_gemm_avx512vnni.c run two multiply instructions per 64 products
 * (vpmaddubsw, then vpdpwssd with the sub-block scales) and reduce each output across 16 lanes.
 * Here each thread unpacks a chunk of its weight rows once per call into panels of 16 rows:
 *   codes  the codes as unsigned bytes (Q4_K's and Q4_0's 4 bits, Q5_K's and Q5_0's 5, Q2_K's 2
 *          (times sc: below), Q3_K's 3, Q8_0's and the IQ4 and MXFP4 code books' values + 128),
 *          k-quad-interleaved: panel byte 64 q + 4 c + b is row c's code at column 4 q + b, so
 *          one 64-byte load holds four columns of 16 rows;
 *   scale  the 32-element types, per 32-column sub-block g, 16 floats: Q4_0, Q5_0, Q8_0 and
 *          IQ4_NL d, MXFP4 2^(e - 128) (its E8M0 byte e; exact);
 *   min    per sub-block, 16 floats: Q4_0 8 · d and Q5_0 16 · d (their codes are q - 8, q - 16),
 *          Q5_1 -m, the others 128 · scale;
 *   the K-quants and IQ4_XS hold instead, per 256-column piece, d and dmin (fp32) and their rows'
 *          integer sub-block scales and mins (the piece form of kernels/x86/qblock_p16_avx512.h).
 * One broadcast 4-byte quad of a quantized x row feeds a vpdpbusd per panel (codes unsigned,
 * x signed, no offset to correct): 16 output rows in the lanes, no reduction. For the 32-element
 * types, after the eight quads of a sub-block its exact int32 sums go to fp32 once, into the
 * 256-column group's sum, which takes the group's x scale dx once:
 *   tb += float(Σ q · x) · scale - min · float(Σ x);   after the group: acc += tb · dx
 * with Σ x over the sub-block from the quantization's per-16 sums (their K need only be a
 * multiple of 64: its last group is K mod 256 columns, as the header's Q8 mode has it). The
 * others join a piece exactly before its one fp32 step: Q4_K, Q5_K and IQ4_XS each sub-block's
 * sums times the rows' sc (vpmulld), the mins as four vpdpwssd (numla_qblock_pn_tile_k4_); Q2_K
 * its codes already times sc, one vpdpbusd sum per piece; Q3_K in exact fp32
 * (numla_qblock_pn_tile_q3_). The register tile is NUMLA_QBLOCK_PN_MR x rows by
 * NUMLA_QBLOCK_PN_NR panels.
 *
 * Numerics: the integer part is exact; each sub-block (each piece) adds two rounded products into
 * the group's fp32 sum and each group one into the row's, within the header's Q8-mode bound. The
 * order differs from the 1-row kernels of the ROWS layout (which sum per 256-block in 16 lanes and
 * reduce at the end), so from NUMLA_QBLOCK_PANEL_MIN_M x rows a row's output may differ from the
 * one-row result in the last bits (kernels/qblock.h). */
#include "kernels/qblock_internal.h"

#include "common/dtype.h"

#include <immintrin.h>
#include <string.h>

#include "kernels/x86/qblock_p16_avx512.h"
#include "kernels/x86/transpose16_avx512.h"

/* One panel's bytes: codes (16 k), then scale and min (up to k / 16 sub-blocks x 16 floats each). */
size_t numla_qblock_pn_panel_bytes_(int64_t k)
{
    return (size_t)(16 * k) + 2 * (size_t)(k / 16) * 16 * sizeof(float);
}

/* Q2_K's and Q3_K's rows [r0, r0 + nr) into codes in element order (buf, k bytes a row; rows
 * past nr zero) and their scales (rows past nr 0), each weight d · s · code - dmin · m:
 *   Q2_K  code (qs[32 n + l] >> 2 j) & 3 at column 128 n + 32 j + l; sub-block 8 n + 2 j + l / 16
 *         has s = scales[sb] & 15, m = scales[sb] >> 4, in the piece form (area:
 *         kernels/x86/qblock_p16_avx512.h);
 *   Q3_K  code the same 2 bits + 4 where bit 4 n + j of hmask[l] is set (q + 4, unsigned), s =
 *         s6 - 32 with the sub-block's 6-bit s6 under d, in its form (the same header). */
static void numla_qblock_pn_pack_s16_(const numla_qblock_weight *w, int64_t r0, int nr, uint8_t *buf, float *area)
{
    const int64_t k = w->k, nb = k / 256;
    const int q3 = w->type == NUMLA_QBLOCK_Q3_K;
    const int64_t bb = q3 ? 110 : 84; /* block bytes */
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    for (int c = 0; c < 16; c++) {
        uint8_t *o = buf + (size_t)c * (size_t)k;
        if (c >= nr) {
            memset(o, 0, (size_t)k);
            for (int64_t b = 0; b < nb; b++) { /* (0.0f and 0 have the same bits) */
                float *pa = area + b * NUMLA_QBLOCK_K4_PIECE_FLOATS;
                int32_t *iv = (int32_t *)(void *)pa;
                pa[NUMLA_QBLOCK_K4_D + c] = pa[NUMLA_QBLOCK_K4_DMIN + c] = 0.0f;
                for (int sb = 0; sb < 16; sb++)
                    iv[NUMLA_QBLOCK_K4_SC + 16 * sb + c] = 0;
                for (int p = 0; p < 8; p++)
                    iv[NUMLA_QBLOCK_K16_MP + 16 * p + c] = 0;
            }
            continue;
        }
        const uint8_t *row = w->q + (r0 + c) * w->ld;
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *blk = row + bb * b, *qs = blk + (q3 ? 32 : 16);
            const __m256i hm = _mm256_loadu_si256((const __m256i *)(const void *)blk); /* Q3_K's hmask */
            for (int n = 0; n < 2; n++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(qs + 32 * n));
                for (int j = 0; j < 4; j++) {
                    __m256i code = _mm256_and_si256(_mm256_srli_epi16(v, 2 * j), m3);
                    if (q3)
                        code = _mm256_or_si256(code, _mm256_slli_epi16(
                                                         _mm256_and_si256(_mm256_srli_epi16(hm, 4 * n + j), one), 2));
                    _mm256_storeu_si256((__m256i *)(void *)(o + 256 * b + 128 * n + 32 * j), code);
                }
            }
            uint16_t h[2];
            if (q3) { /* Q3_K's form: d, and s = s6 - 32 as floats */
                float *pa = area + b * NUMLA_QBLOCK_K4_PIECE_FLOATS;
                memcpy(h, blk + 108, 2);
                pa[NUMLA_QBLOCK_K4_D + c] = numla_f16_to_f32(h[0]);
                for (int sb = 0; sb < 16; sb++) { /* 6-bit scales: low 4 bits from bytes 0-7, high 2 from 8-11 */
                    const uint8_t *sp = blk + 96;
                    const int lo = sb < 8 ? sp[sb] & 15 : sp[sb - 8] >> 4;
                    const int hi2 = (sp[8 + sb % 4] >> (2 * (sb / 4))) & 3;
                    pa[NUMLA_QBLOCK_K4_SC + 16 * sb + c] = (float)((lo | hi2 << 4) - 32);
                }
                continue;
            }
            memcpy(h, blk + 80, 4);
            const float d = numla_f16_to_f32(h[0]), dmin = numla_f16_to_f32(h[1]);
            float *pa = area + b * NUMLA_QBLOCK_K4_PIECE_FLOATS;
            int32_t *iv = (int32_t *)(void *)pa;
            pa[NUMLA_QBLOCK_K4_D + c] = d;
            pa[NUMLA_QBLOCK_K4_DMIN + c] = dmin;
            int ms[16];
            for (int sb = 0; sb < 16; sb++) {
                iv[NUMLA_QBLOCK_K4_SC + 16 * sb + c] = blk[sb] & 15;
                ms[sb] = blk[sb] >> 4;
            }
            for (int p = 0; p < 8; p++)
                iv[NUMLA_QBLOCK_K16_MP + 16 * p + c] =
                    (int32_t)(((uint32_t)ms[2 * p] & 0xFFFFu) | (uint32_t)ms[2 * p + 1] << 16);
        }
    }
}

size_t numla_qblock_panel_thread_bytes_(const numla_qblock_weight *w)
{
    /* NUMLA_QBLOCK_PANEL_NP panels, plus one panel's rows decoded in element order; for the types
     * with integer scales also the amx level's second byte plane of each panel
     * (kernels/x86/qblock_panel_amx.c) */
    const size_t planes = numla_qblock_type_row_get(w->type)->int_scales
                              ? (size_t)NUMLA_QBLOCK_PANEL_NP * (size_t)(16 * w->k)
                              : 0;
    return numla_qblock_align64_((size_t)NUMLA_QBLOCK_PANEL_NP * numla_qblock_pn_panel_bytes_(w->k)) +
           numla_qblock_align64_((size_t)(16 * w->k)) + planes + 64;
}

/* A stored PANEL16 panel (Q4_K, IQ4_XS; r0 a multiple of 16) into the panel at dst: each unit's
 * nibbles are already 16 rows side by side, so the codes only split (IQ4_XS: through the code
 * book + 128) and the scales widen, with the products the rows' path below computes. */
static void numla_qblock_pn_from_p16_b32_(const numla_qblock_weight *w, int64_t r0, uint8_t *dst)
{
    const int64_t k = w->k, ng = k / 32, sb = numla_qblock_p16_sb_(w->type), doff = numla_qblock_p16_b32_d_(w->type);
    const int q51 = w->type == NUMLA_QBLOCK_Q5_1;
    const int q5 = w->type == NUMLA_QBLOCK_Q5_0 || q51, q8 = w->type == NUMLA_QBLOCK_Q8_0, q40 = w->type == NUMLA_QBLOCK_Q4_0;
    const uint8_t *pan = w->q + (r0 / 16) * w->ld;
    const __m512i flip = _mm512_set1_epi8((char)0x80), book = numla_qblock_p16_book_();
    float *sc = (float *)(void *)(dst + 16 * k), *mn = sc + ng * 16;
    for (int64_t P = 0; P < k / 64; P++) {
        const uint8_t *pc = pan + P * sb;
        for (int t = 0; t < 2; t++) {
            for (int u = 0; q8 && u < 8; u++)
                _mm512_store_si512((void *)(dst + (16 * P + 8 * t + u) * 64),
                                   _mm512_xor_si512(_mm512_load_si512((const void *)(pc + (8 * t + u) * 64)), flip));
            for (int u = 0; !q8 && u < 4; u++) {
                __m512i lo, hi;
                numla_qblock_p16_unit_(pc + (4 * t + u) * 64,
                                       q5 ? NUMLA_QBLOCK_P16_BIT5 : q40 ? NUMLA_QBLOCK_P16_NIB : NUMLA_QBLOCK_P16_BOOK,
                                       pc + NUMLA_QBLOCK_P16_B32_MASKS + (4 * t + u) * 16, book, &lo, &hi);
                _mm512_store_si512((void *)(dst + (16 * P + 8 * t + u) * 64), lo);
                _mm512_store_si512((void *)(dst + (16 * P + 8 * t + 4 + u) * 64), hi);
            }
            const int64_t g = 2 * P + t;
            const __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(pc + doff + 32 * t)));
            _mm512_store_ps(sc + g * 16, d);
            _mm512_store_ps(mn + g * 16,
                            q51 ? _mm512_sub_ps(_mm512_setzero_ps(), _mm512_cvtph_ps(_mm256_load_si256(
                                                                         (const __m256i *)(const void *)(pc + doff + 64 + 32 * t))))
                                : _mm512_mul_ps(d, _mm512_set1_ps(q5 ? 16.0f : q40 ? 8.0f : 128.0f)));
        }
    }
}

/* A stored Q2_K or Q3_K panel: unit (n, u)'s four 2-bit fields are the quads 32n + 8j + u of the
 * piece (Q3_K: plus 4 where bit 4n + j of hmask unit u is set); Q2_K's per 16-column sub-block sc
 * & 15 and min sc >> 4 under d and dmin in the piece form, Q3_K's d and s - 32 in its form. */
static void numla_qblock_pn_from_p16_q2_(const numla_qblock_weight *w, int64_t r0, uint8_t *dst)
{
    const int64_t k = w->k, nb = k / 256;
    const int q3 = w->type == NUMLA_QBLOCK_Q3_K;
    const uint8_t *pan = w->q + (r0 / 16) * w->ld;
    const __m512i m3 = _mm512_set1_epi8(3), m15 = _mm512_set1_epi32(15), one = _mm512_set1_epi8(1);
    float *area = (float *)(void *)(dst + 16 * k); /* the piece form */
    for (int64_t b = 0; q3 && b < nb; b++) { /* Q3_K: the third bit from hmask unit u, bit 4n + j */
        const uint8_t *pc = pan + b * NUMLA_QBLOCK_P16_SB_Q3K;
        for (int i = 0; i < 16; i++) {
            const __m512i v = _mm512_load_si512((const void *)(pc + numla_qblock_p16_q3_qs_(i / 8, i % 8)));
            const __m512i hv = _mm512_load_si512((const void *)(pc + numla_qblock_p16_q3_h_(i % 8)));
            for (int j = 0; j < 4; j++) {
                const __m512i hb = _mm512_and_si512(_mm512_srli_epi16(hv, (unsigned)(4 * (i / 8) + j)), one);
                _mm512_store_si512((void *)(dst + 64 * (64 * b + 32 * (i / 8) + 8 * j + i % 8)),
                                   _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 2 * j), m3),
                                                   _mm512_slli_epi16(hb, 2)));
            }
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(pc + NUMLA_QBLOCK_P16_Q3_D)));
        float *pa = area + b * NUMLA_QBLOCK_K4_PIECE_FLOATS; /* Q3_K's form: d, s as floats */
        _mm512_store_ps(pa + NUMLA_QBLOCK_K4_D, d);
        for (int s = 0; s < 16; s++)
            _mm512_store_ps(pa + NUMLA_QBLOCK_K4_SC + 16 * s,
                            _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                _mm_load_si128((const __m128i *)(const void *)(pc + numla_qblock_p16_q3_sc_(s))))));
    }
    for (int64_t b = 0; !q3 && b < nb; b++) {
        const uint8_t *pc = pan + b * NUMLA_QBLOCK_P16_SB_Q2K;
        for (int i = 0; i < 16; i++) { /* unit (n, u) = (i / 8, i % 8) */
            const __m512i v = _mm512_load_si512((const void *)(pc + numla_qblock_p16_q2_qs_(i / 8, i % 8)));
            for (int j = 0; j < 4; j++)
                _mm512_store_si512((void *)(dst + 64 * (64 * b + 32 * (i / 8) + 8 * j + i % 8)),
                                   _mm512_and_si512(_mm512_srli_epi16(v, 2 * j), m3));
        }
        float *pa = area + b * NUMLA_QBLOCK_K4_PIECE_FLOATS;
        int32_t *iv = (int32_t *)(void *)pa;
        _mm512_store_ps(pa + NUMLA_QBLOCK_K4_D,
                        _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(pc + NUMLA_QBLOCK_P16_Q2_D))));
        _mm512_store_ps(pa + NUMLA_QBLOCK_K4_DMIN,
                        _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(pc + NUMLA_QBLOCK_P16_Q2_DMIN))));
        __m512i mv[16];
        for (int s = 0; s < 16; s++) {
            const __m512i v = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(const void *)(pc + numla_qblock_p16_q2_sc_(s))));
            _mm512_store_si512((void *)(iv + NUMLA_QBLOCK_K4_SC + 16 * s), _mm512_and_si512(v, m15));
            mv[s] = _mm512_srli_epi32(v, 4);
        }
        for (int p = 0; p < 8; p++)
            _mm512_store_si512((void *)(iv + NUMLA_QBLOCK_K16_MP + 16 * p), numla_qblock_k16_mpair_(mv[2 * p], mv[2 * p + 1]));
    }
}

/* A stored Q5_K panel: unit (h, u)'s nibbles with their fifth bits (bits 2h, 2h + 1 of qh unit u)
 * are the quads 16h + u and + 8 of the piece; Q4_K's scales and mins, in the piece form. */
static void numla_qblock_pn_from_p16_q5k_(const numla_qblock_weight *w, int64_t r0, uint8_t *dst)
{
    const int64_t k = w->k, nb = k / 256;
    const uint8_t *pan = w->q + (r0 / 16) * w->ld;
    const __m512i m4 = _mm512_set1_epi8(15), one = _mm512_set1_epi8(1);
    float *sc = (float *)(void *)(dst + 16 * k); /* the piece form's area */
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *pc = pan + b * NUMLA_QBLOCK_P16_SB_Q5K;
        for (int h = 0; h < 4; h++)
            for (int u = 0; u < 8; u++) {
                const __m512i v = _mm512_load_si512((const void *)(pc + NUMLA_QBLOCK_P16_Q5_QS + 64 * (8 * h + u)));
                const __m512i hv = _mm512_load_si512((const void *)(pc + NUMLA_QBLOCK_P16_Q5_QH + 64 * u));
                const __m512i b0 = _mm512_and_si512(_mm512_srli_epi16(hv, (unsigned)(2 * h)), one);
                const __m512i b1 = _mm512_and_si512(_mm512_srli_epi16(hv, (unsigned)(2 * h + 1)), one);
                const int64_t qlo = 64 * b + 16 * h + u;
                _mm512_store_si512((void *)(dst + qlo * 64), _mm512_or_si512(_mm512_and_si512(v, m4), _mm512_slli_epi16(b0, 4)));
                _mm512_store_si512((void *)(dst + (qlo + 8) * 64),
                                   _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), _mm512_slli_epi16(b1, 4)));
            }
        numla_qblock_k4_put_(sc + b * NUMLA_QBLOCK_K4_PIECE_FLOATS,
                             _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(pc + NUMLA_QBLOCK_P16_Q5_D))),
                             _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(pc + NUMLA_QBLOCK_P16_Q5_DMIN))),
                             pc + NUMLA_QBLOCK_P16_Q5_SC, pc + NUMLA_QBLOCK_P16_Q5_SC + 128, 16);
    }
}

static void numla_qblock_pn_from_p16_(const numla_qblock_weight *w, int64_t r0, uint8_t *dst)
{
    if (w->type == NUMLA_QBLOCK_Q5_K) {
        numla_qblock_pn_from_p16_q5k_(w, r0, dst);
        return;
    }
    if (numla_qblock_p16_b32_(w->type)) {
        numla_qblock_pn_from_p16_b32_(w, r0, dst);
        return;
    }
    if (w->type == NUMLA_QBLOCK_Q2_K || w->type == NUMLA_QBLOCK_Q3_K) {
        numla_qblock_pn_from_p16_q2_(w, r0, dst);
        return;
    }
    const int64_t k = w->k, nb = k / 256, sb = numla_qblock_p16_sb_(w->type);
    const int iq4 = w->type == NUMLA_QBLOCK_IQ4_XS;
    const uint8_t *pan = w->q + (r0 / 16) * w->ld;
    const __m512i book = numla_qblock_p16_book_();
    float *sc = (float *)(void *)(dst + 16 * k); /* the piece form's area */
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *pc = pan + b * sb;
        for (int h = 0; h < 4; h++)
            for (int u = 0; u < 8; u++) {
                __m512i lo, hi;
                numla_qblock_p16_unit_(pc + (h * 8 + u) * 64, iq4 ? NUMLA_QBLOCK_P16_BOOK : NUMLA_QBLOCK_P16_NIB, NULL,
                                       book, &lo, &hi);
                const int64_t qlo = iq4 ? 64 * b + 16 * h + 8 * (u / 4) + u % 4 : 64 * b + 16 * h + u;
                _mm512_store_si512((void *)(dst + qlo * 64), lo);
                _mm512_store_si512((void *)(dst + (qlo + (iq4 ? 4 : 8)) * 64), hi);
            }
        const __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(pc + NUMLA_QBLOCK_P16_D)));
        if (!iq4) { /* Q4_K */
            numla_qblock_k4_put_(sc + b * NUMLA_QBLOCK_K4_PIECE_FLOATS, d,
                                 _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(pc + NUMLA_QBLOCK_P16_DMIN))),
                                 pc + NUMLA_QBLOCK_P16_SC_Q4K, pc + NUMLA_QBLOCK_P16_SC_Q4K + 128, 16);
            continue;
        }
        /* IQ4_XS: s = ls - 32 (signed bytes), dmin = 128 d */
        float *pa = sc + b * NUMLA_QBLOCK_K4_PIECE_FLOATS;
        int32_t *iv = (int32_t *)(void *)pa;
        _mm512_store_ps(pa + NUMLA_QBLOCK_K4_D, d);
        _mm512_store_ps(pa + NUMLA_QBLOCK_K4_DMIN, _mm512_mul_ps(d, _mm512_set1_ps(128.0f)));
        __m512i lsv[8];
        for (int j = 0; j < 8; j++) {
            lsv[j] = _mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)(const void *)(pc + NUMLA_QBLOCK_P16_SC_IQ4 + 16 * j)));
            _mm512_store_si512((void *)(iv + NUMLA_QBLOCK_K4_SC + 16 * j), lsv[j]);
        }
        for (int p = 0; p < 4; p++)
            _mm512_store_si512((void *)(iv + NUMLA_QBLOCK_K4_MP + 16 * p), numla_qblock_k16_mpair_(lsv[2 * p], lsv[2 * p + 1]));
    }
}

/* Weight rows [r0, r0 + 16) (rows at or past hi: zero codes and scales) into one panel at dst;
 * buf: 16 k bytes of scratch. */
void numla_qblock_pn_pack_(const numla_qblock_weight *w, int64_t r0, int64_t hi, uint8_t *buf, uint8_t *dst)
{
    if (w->layout == NUMLA_QBLOCK_LAYOUT_PANEL16) {
        numla_qblock_pn_from_p16_(w, r0, dst);
        return;
    }
    const int64_t k = w->k, nb = k / 256, ng = k / 32;
    const int nr = hi - r0 < 16 ? (int)(hi - r0) : 16;
    const __m256i m4 = _mm256_set1_epi8(15);
    const int s16 = numla_qblock_pn_s16_(w->type);
    if (s16) /* codes into buf, and the piece form straight into the panel */
        numla_qblock_pn_pack_s16_(w, r0, nr, buf, (float *)(void *)(dst + 16 * k));
    const int q51 = w->type == NUMLA_QBLOCK_Q5_1, q5 = w->type == NUMLA_QBLOCK_Q5_0 || q51;
    const int q8 = w->type == NUMLA_QBLOCK_Q8_0;
    const int nl = w->type == NUMLA_QBLOCK_IQ4_NL, xs = w->type == NUMLA_QBLOCK_IQ4_XS;
    const int fp4 = w->type == NUMLA_QBLOCK_MXFP4; /* IQ4_NL's form: its own book, an E8M0 scale */
    const int q40 = w->type == NUMLA_QBLOCK_Q4_0, q5k = w->type == NUMLA_QBLOCK_Q5_K;
    int8_t lut[16];
    for (int j = 0; j < 16; j++) /* the code book + 128: unsigned */
        lut[j] = (int8_t)((fp4 ? numla_qblock_mxfp4_values[j] : numla_qblock_iq4_values[j]) + 128);
    const __m128i book = _mm_loadu_si128((const __m128i *)(const void *)lut), f15 = _mm_set1_epi8(15);
    /* codes in element order, one row of k bytes after the other */
    for (int c = 0; !s16 && c < 16; c++) {
        uint8_t *o = buf + (size_t)c * (size_t)k;
        if (c >= nr) {
            memset(o, 0, (size_t)k);
            continue;
        }
        const uint8_t *row = w->q + (r0 + c) * w->ld;
        for (int64_t g = 0; (nl || xs || fp4) && g < ng; g++) { /* low nibbles 0-15, high 16-31, looked up */
            const uint8_t *qs = nl ? row + 18 * g + 2 : fp4 ? row + 17 * g + 1 : row + 136 * (g / 8) + 8 + 16 * (g % 8);
            const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)qs);
            _mm_storeu_si128((__m128i *)(void *)(o + 32 * g), _mm_shuffle_epi8(book, _mm_and_si128(v, f15)));
            _mm_storeu_si128((__m128i *)(void *)(o + 32 * g + 16),
                             _mm_shuffle_epi8(book, _mm_and_si128(_mm_srli_epi16(v, 4), f15)));
        }
        for (int64_t g = 0; q8 && g < ng; g++) { /* Q8_0: q + 128, its sign bit flipped */
            const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(row + 34 * g + 2));
            _mm256_storeu_si256((__m256i *)(void *)(o + 32 * g), _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80)));
        }
        for (int64_t g = 0; q5 && g < ng; g++) { /* Q5_0, Q5_1: low nibbles 0-15, high 16-31, bit 4 from qh */
            const uint8_t *blk = row + (q51 ? 24 : 22) * g + (q51 ? 2 : 0); /* Q5_1: past its m */
            uint32_t qh;
            memcpy(&qh, blk + 2, 4);
            const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(blk + 6)), f = _mm_set1_epi8(15);
            const __m128i h16 = _mm_set1_epi8(16);
            _mm_storeu_si128((__m128i *)(void *)(o + 32 * g),
                             _mm_or_si128(_mm_and_si128(v, f), _mm_maskz_mov_epi8((__mmask16)(qh & 0xFFFF), h16)));
            _mm_storeu_si128((__m128i *)(void *)(o + 32 * g + 16),
                             _mm_or_si128(_mm_and_si128(_mm_srli_epi16(v, 4), f),
                                          _mm_maskz_mov_epi8((__mmask16)(qh >> 16), h16)));
        }
        for (int64_t g = 0; q40 && g < ng; g++) { /* Q4_0: low nibbles 0-15, high 16-31 */
            const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(row + 18 * g + 2));
            _mm_storeu_si128((__m128i *)(void *)(o + 32 * g), _mm_and_si128(v, f15));
            _mm_storeu_si128((__m128i *)(void *)(o + 32 * g + 16), _mm_and_si128(_mm_srli_epi16(v, 4), f15));
        }
        for (int64_t b = 0; q5k && b < nb; b++) {
            /* Q5_K: 64-element chunk h, low nibbles of qs[32 h ..] first, then the high ones; the
             * fifth bit of column l of the chunk's halves is bit 2 h (low) or 2 h + 1 of qh[l] */
            const uint8_t *qh = row + 176 * b + 16, *qs = row + 176 * b + 48;
            const __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)qh), one = _mm256_set1_epi8(1);
            for (int c = 0; c < 4; c++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(qs + 32 * c));
                const __m256i b0 = _mm256_and_si256(_mm256_srli_epi16(h, 2 * c), one);
                const __m256i b1 = _mm256_and_si256(_mm256_srli_epi16(h, 2 * c + 1), one);
                _mm256_storeu_si256((__m256i *)(void *)(o + 256 * b + 64 * c),
                                    _mm256_or_si256(_mm256_and_si256(v, m4), _mm256_slli_epi16(b0, 4)));
                _mm256_storeu_si256((__m256i *)(void *)(o + 256 * b + 64 * c + 32),
                                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
                                                    _mm256_slli_epi16(b1, 4)));
            }
        }
        for (int64_t b = 0; w->type == NUMLA_QBLOCK_Q4_K && b < nb; b++) {
            const uint8_t *qs = row + 144 * b + 16;
            for (int h = 0; h < 4; h++) { /* 64-element chunk h: low nibbles first, then high */
                const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(qs + 32 * h));
                _mm256_storeu_si256((__m256i *)(void *)(o + 256 * b + 64 * h), _mm256_and_si256(v, m4));
                _mm256_storeu_si256((__m256i *)(void *)(o + 256 * b + 64 * h + 32),
                                    _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
            }
        }
    }
    /* k-quad interleave: 64 columns of 16 rows at a time */
    for (int64_t c0 = 0; c0 < k; c0 += 64) {
        __m512i r[16];
        for (int c = 0; c < 16; c++)
            r[c] = _mm512_loadu_si512((const void *)(buf + (size_t)c * (size_t)k + c0));
        numla_x86_transpose16(r);
        for (int q = 0; q < 16; q++)
            _mm512_store_si512((void *)(dst + c0 * 16 + q * 64), r[q]);
    }
    if (s16)
        return;
    /* sub-block scales and mins of the 16 rows, lanes = rows: the 6-bit pairs of kernels/qblock.h
     * from the scale words gathered across the rows */
    float *sc = (float *)(void *)(dst + 16 * k), *mn = sc + ng * 16;
    const __mmask16 live = (__mmask16)((1u << nr) - 1);
    const __m512i rows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32((int)w->ld));
    const __m512i b6 = _mm512_set1_epi32(63), b4 = _mm512_set1_epi32(15), b2 = _mm512_set1_epi32(3);
    const uint8_t *base = w->q + r0 * w->ld;
    for (int64_t g = 0; (q5 || q8 || nl || q40) && g < ng; g++) {
        /* Q5_0: w = d · (q - 16); Q4_0: d · (q - 8); Q5_1: d · q + m (min -m); Q8_0 and IQ4_NL:
         * d · ((q + 128) - 128) */
        const __m512i dd = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, rows,
                                                       base + (q51 ? 24 : q5 ? 22 : q8 ? 34 : 18) * g, 1);
        const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd));
        _mm512_store_ps(sc + g * 16, d);
        _mm512_store_ps(mn + g * 16, q51 ? _mm512_sub_ps(_mm512_setzero_ps(),
                                                         _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16))))
                                         : _mm512_mul_ps(d, _mm512_set1_ps(q5 ? 16.0f : q40 ? 8.0f : 128.0f)));
    }
    for (int64_t g = 0; fp4 && g < ng; g++) /* MXFP4: 2^(e - 128) (the book is twice e2m1), min as IQ4_NL's */
        for (int c = 0; c < 16; c++) {
            const float d = c < nr ? numla_qblock_e8m0_half_(base[(size_t)c * (size_t)w->ld + 17 * (size_t)g]) : 0.0f;
            sc[g * 16 + c] = d;
            mn[g * 16 + c] = 128.0f * d;
        }
    for (int64_t b = 0; xs && b < nb; b++) { /* IQ4_XS: the piece form, s = ls - 32, dmin = 128 d */
        const uint8_t *blk = base + 136 * b;
        const __m512i z = _mm512_setzero_si512();
        const __m512i dh = _mm512_mask_i32gather_epi32(z, live, rows, blk, 1);     /* d, scales_h */
        const __m512i sl = _mm512_mask_i32gather_epi32(z, live, rows, blk + 4, 1); /* scales_l[4] */
        const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dh));
        int32_t *pa = (int32_t *)(void *)(sc + b * NUMLA_QBLOCK_K4_PIECE_FLOATS);
        _mm512_store_ps((float *)(void *)(pa + NUMLA_QBLOCK_K4_D), d);
        _mm512_store_ps((float *)(void *)(pa + NUMLA_QBLOCK_K4_DMIN), _mm512_mul_ps(d, _mm512_set1_ps(128.0f)));
        __m512i lsv[8];
        for (int j = 0; j < 8; j++) {
            const __m512i lo = _mm512_and_si512(_mm512_srli_epi32(sl, 8 * (j / 2) + 4 * (j % 2)), _mm512_set1_epi32(15));
            const __m512i hi = _mm512_and_si512(_mm512_srli_epi32(dh, 16 + 2 * j), _mm512_set1_epi32(3));
            lsv[j] = _mm512_maskz_sub_epi32(live, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), _mm512_set1_epi32(32));
            _mm512_store_si512((void *)(pa + NUMLA_QBLOCK_K4_SC + 16 * j), lsv[j]);
        }
        for (int p = 0; p < 4; p++)
            _mm512_store_si512((void *)(pa + NUMLA_QBLOCK_K4_MP + 16 * p), numla_qblock_k16_mpair_(lsv[2 * p], lsv[2 * p + 1]));
    }
    for (int64_t b = 0; (w->type == NUMLA_QBLOCK_Q4_K || q5k) && b < nb; b++) { /* Q5_K's scales are Q4_K's */
        const uint8_t *blk = base + (q5k ? 176 : 144) * b;
        const __m512i z = _mm512_setzero_si512();
        const __m512i dd = _mm512_mask_i32gather_epi32(z, live, rows, blk, 1);
        const __m512i s0 = _mm512_mask_i32gather_epi32(z, live, rows, blk + 4, 1);
        const __m512i s1 = _mm512_mask_i32gather_epi32(z, live, rows, blk + 8, 1);
        const __m512i s2 = _mm512_mask_i32gather_epi32(z, live, rows, blk + 12, 1);
        /* the piece form (kernels/x86/qblock_p16_avx512.h): d, dmin, sc as int32, m as word pairs */
        int32_t *pa = (int32_t *)(void *)(sc + b * NUMLA_QBLOCK_K4_PIECE_FLOATS);
        _mm512_store_ps((float *)(void *)(pa + NUMLA_QBLOCK_K4_D), _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd)));
        _mm512_store_ps((float *)(void *)(pa + NUMLA_QBLOCK_K4_DMIN),
                        _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16))));
        __m512i ms[8];
        for (int j = 0; j < 8; j++) {
            __m512i s, m;
            if (j < 4) {
                s = _mm512_and_si512(_mm512_srli_epi32(s0, 8 * j), b6);
                m = _mm512_and_si512(_mm512_srli_epi32(s1, 8 * j), b6);
            } else {
                const int e = 8 * (j - 4);
                const __m512i t2 = _mm512_srli_epi32(s2, e);
                s = _mm512_or_si512(_mm512_and_si512(t2, b4),
                                    _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(s0, e + 6), b2), 4));
                m = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(t2, 4), b4),
                                    _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(s1, e + 6), b2), 4));
            }
            ms[j] = m;
            _mm512_store_si512((void *)(pa + NUMLA_QBLOCK_K4_SC + 16 * j), s);
        }
        for (int p = 0; p < 4; p++)
            _mm512_store_si512((void *)(pa + NUMLA_QBLOCK_K4_MP + 16 * p),
                               _mm512_or_si512(ms[2 * p], _mm512_slli_epi32(ms[2 * p + 1], 16)));
    }
}

/* acc + vpdpbusd(u8 a, s8 b) in place (GCC otherwise copies the accumulator around each one in
 * a loop this wide). */
static inline __attribute__((always_inline)) __m512i numla_qblock_pn_dp_(__m512i acc, __m512i a, __m512i b)
{
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
    return acc;
}

/* The tile's products over k-quads [q0, q1): acc[i][j] += panel j's codes · x row i's quad, by
 * vpdpbusd (one broadcast quad of x feeds the nr panels). */
static inline __attribute__((always_inline)) void
numla_qblock_pn_quads_(__m512i acc[NUMLA_QBLOCK_PN_MR][NUMLA_QBLOCK_PN_NR], const uint8_t *pan, size_t pbytes,
                       const int8_t *xq, int64_t k, int64_t q0, int64_t q1, const int mr, const int nr)
{
    for (int64_t q = q0; q < q1; q++) {
        __m512i wv[NUMLA_QBLOCK_PN_NR];
        for (int j = 0; j < nr; j++)
            wv[j] = _mm512_load_si512((const void *)(pan + (size_t)j * pbytes + (size_t)q * 64));
        for (int i = 0; i < mr; i++) {
            int32_t quad;
            memcpy(&quad, xq + i * k + 4 * q, sizeof quad);
            const __m512i xb = _mm512_set1_epi32(quad);
            for (int j = 0; j < nr; j++)
                acc[i][j] = numla_qblock_pn_dp_(acc[i][j], wv[j], xb);
        }
    }
}

/* y rows [0, mr) (ldy apart), weight rows rr .. rr + 16 nr (stopping at hi) = acc (+ y). */
static inline __attribute__((always_inline)) void
numla_qblock_pn_store_(__m512 acc[NUMLA_QBLOCK_PN_MR][NUMLA_QBLOCK_PN_NR], int64_t rr, int64_t hi, float *y,
                       int64_t ldy, int accumulate, const int mr, const int nr)
{
    for (int j = 0; j < nr; j++) {
        const int64_t r = rr + 16 * j;
        if (r >= hi)
            break;
        const __mmask16 msk = hi - r >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (hi - r)) - 1);
        for (int i = 0; i < mr; i++) {
            float *yo = y + i * ldy + r;
            __m512 v = acc[i][j];
            if (accumulate)
                v = _mm512_add_ps(_mm512_maskz_loadu_ps(msk, yo), v);
            _mm512_mask_storeu_ps(yo, msk, v);
        }
    }
}

/* The same tile for the types with integer scales, in the piece form (kernels/x86/qblock_p16_avx512.h):
 * each sub-block's int32 sums times the rows' sc (vpmulld) into the piece's S, Z from the m word
 * pairs, one fp32 step per piece; pre (with s16): Q2_K, its codes already times sc (one plane,
 * numla_qblock_k4_planes_), so vpdpbusd sums S itself over its 16 sub-blocks of 16 columns. */
static inline __attribute__((always_inline)) void
numla_qblock_pn_tile_k4_(const uint8_t *pan, size_t pbytes, int64_t k, const int8_t *xq, const float *dx,
                         const int32_t *bs, int64_t rr, int64_t hi, float *y, int64_t ldy, int accumulate,
                         const int mr, const int nr, const int s16, const int pre)
{
    const int64_t nb = k / 256;
    __m512 acc[NUMLA_QBLOCK_PN_MR][NUMLA_QBLOCK_PN_NR];
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++)
            acc[i][j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512i S[NUMLA_QBLOCK_PN_MR][NUMLA_QBLOCK_PN_NR];
        for (int i = 0; i < mr; i++)
            for (int j = 0; j < nr; j++)
                S[i][j] = _mm512_setzero_si512();
        if (pre)
            numla_qblock_pn_quads_(S, pan, pbytes, xq, k, 64 * b, 64 * b + 64, mr, nr);
        for (int64_t g = 8 * b; !pre && g < 8 * b + 8; g++) {
            __m512i is[NUMLA_QBLOCK_PN_MR][NUMLA_QBLOCK_PN_NR];
            for (int i = 0; i < mr; i++)
                for (int j = 0; j < nr; j++)
                    is[i][j] = _mm512_setzero_si512();
            numla_qblock_pn_quads_(is, pan, pbytes, xq, k, 8 * g, 8 * g + 8, mr, nr);
            for (int j = 0; j < nr; j++) {
                const int32_t *pa = (const int32_t *)(const void *)(pan + (size_t)j * pbytes + (size_t)(16 * k)) +
                                    b * NUMLA_QBLOCK_K4_PIECE_FLOATS;
                const __m512i scv = _mm512_load_si512((const void *)(pa + NUMLA_QBLOCK_K4_SC + 16 * (g - 8 * b)));
                for (int i = 0; i < mr; i++)
                    S[i][j] = _mm512_add_epi32(S[i][j], _mm512_mullo_epi32(is[i][j], scv));
            }
        }
        int32_t xp[NUMLA_QBLOCK_PN_MR][8];
        for (int i = 0; i < mr; i++) {
            if (s16)
                numla_qblock_k16_xpairs_(bs + i * (k / 16) + 16 * b, xp[i]);
            else
                numla_qblock_k4_xpairs_(bs + i * (k / 16) + 16 * b, xp[i]);
        }
        for (int j = 0; j < nr; j++) {
            const float *pa = (const float *)(const void *)(pan + (size_t)j * pbytes + (size_t)(16 * k)) +
                              b * NUMLA_QBLOCK_K4_PIECE_FLOATS;
            const __m512 d = _mm512_load_ps(pa + NUMLA_QBLOCK_K4_D), dmin = _mm512_load_ps(pa + NUMLA_QBLOCK_K4_DMIN);
            __m512i mp[8];
            for (int p = 0; p < (s16 ? 8 : 4); p++)
                mp[p] = _mm512_load_si512((const void *)(pa + (s16 ? NUMLA_QBLOCK_K16_MP : NUMLA_QBLOCK_K4_MP) + 16 * p));
            for (int i = 0; i < mr; i++)
                acc[i][j] = numla_qblock_k4_piece_(acc[i][j], S[i][j],
                                                   s16 ? numla_qblock_k16_z_(mp, xp[i]) : numla_qblock_k4_z_(mp, xp[i]),
                                                   d, dmin, dx[i * nb + b]);
        }
    }
    numla_qblock_pn_store_(acc, rr, hi, y, ldy, accumulate, mr, nr);
}

/* Q3_K's tile, in its form (kernels/x86/qblock_p16_avx512.h): per 16-column sub-block, float(IS -
 * 4 XS) times float(s) into the piece's fp32 sum U, exact; acc = fma(U, d · dx, acc) per piece. */
static inline __attribute__((always_inline)) void
numla_qblock_pn_tile_q3_(const uint8_t *pan, size_t pbytes, int64_t k, const int8_t *xq, const float *dx,
                         const int32_t *bs, int64_t rr, int64_t hi, float *y, int64_t ldy, int accumulate,
                         const int mr, const int nr)
{
    const int64_t nb = k / 256, k16 = k / 16;
    __m512 acc[NUMLA_QBLOCK_PN_MR][NUMLA_QBLOCK_PN_NR];
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++)
            acc[i][j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512 U[NUMLA_QBLOCK_PN_MR][NUMLA_QBLOCK_PN_NR];
        for (int i = 0; i < mr; i++)
            for (int j = 0; j < nr; j++)
                U[i][j] = _mm512_setzero_ps();
        for (int64_t g = 16 * b; g < 16 * b + 16; g++) {
            __m512i is[NUMLA_QBLOCK_PN_MR][NUMLA_QBLOCK_PN_NR];
            for (int i = 0; i < mr; i++)
                for (int j = 0; j < nr; j++)
                    is[i][j] = _mm512_setzero_si512();
            numla_qblock_pn_quads_(is, pan, pbytes, xq, k, 4 * g, 4 * g + 4, mr, nr);
            for (int j = 0; j < nr; j++) {
                const float *pa = (const float *)(const void *)(pan + (size_t)j * pbytes + (size_t)(16 * k)) +
                                  b * NUMLA_QBLOCK_K4_PIECE_FLOATS;
                const __m512 sv = _mm512_load_ps(pa + NUMLA_QBLOCK_K4_SC + 16 * (g - 16 * b));
                for (int i = 0; i < mr; i++)
                    U[i][j] = _mm512_fmadd_ps(
                        _mm512_cvtepi32_ps(_mm512_sub_epi32(is[i][j], _mm512_set1_epi32(4 * bs[i * k16 + g]))), sv,
                        U[i][j]);
            }
        }
        for (int j = 0; j < nr; j++) {
            const float *pa = (const float *)(const void *)(pan + (size_t)j * pbytes + (size_t)(16 * k)) +
                              b * NUMLA_QBLOCK_K4_PIECE_FLOATS;
            const __m512 d = _mm512_load_ps(pa + NUMLA_QBLOCK_K4_D);
            for (int i = 0; i < mr; i++)
                acc[i][j] = _mm512_fmadd_ps(U[i][j], _mm512_mul_ps(d, _mm512_set1_ps(dx[i * nb + b])), acc[i][j]);
        }
    }
    numla_qblock_pn_store_(acc, rr, hi, y, ldy, accumulate, mr, nr);
}

/* y rows i0 .. i0 + mr, weight rows rr .. rr + 16 nr (stopping at hi) from the panels at pan: the
 * types whose sub-block scales are real numbers, one fp32 step per sub-block. */
static inline __attribute__((always_inline)) void
numla_qblock_pn_tile_(const uint8_t *pan, size_t pbytes, int64_t k, const int8_t *xq, const float *dx,
                      const int32_t *bs, int64_t rr, int64_t hi, float *y, int64_t ldy, int accumulate,
                      const int mr, const int nr)
{
    const int64_t ng = k / 32, nb = numla_qblock_q8_groups_(k);
    __m512 acc[NUMLA_QBLOCK_PN_MR][NUMLA_QBLOCK_PN_NR];
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++)
            acc[i][j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) { /* 256-column x groups (the last one may be shorter) */
        __m512 tb[NUMLA_QBLOCK_PN_MR][NUMLA_QBLOCK_PN_NR];
        for (int i = 0; i < mr; i++)
            for (int j = 0; j < nr; j++)
                tb[i][j] = _mm512_setzero_ps();
        const int64_t gend = 8 * b + 8 < ng ? 8 * b + 8 : ng;
        for (int64_t g = 8 * b; g < gend; g++) { /* its sub-blocks */
            __m512i is[NUMLA_QBLOCK_PN_MR][NUMLA_QBLOCK_PN_NR];
            for (int i = 0; i < mr; i++)
                for (int j = 0; j < nr; j++)
                    is[i][j] = _mm512_setzero_si512();
            numla_qblock_pn_quads_(is, pan, pbytes, xq, k, 8 * g, 8 * g + 8, mr, nr);
            for (int j = 0; j < nr; j++) {
                const float *sc = (const float *)(const void *)(pan + (size_t)j * pbytes + (size_t)(16 * k));
                const __m512 sv = _mm512_load_ps(sc + g * 16), mv = _mm512_load_ps(sc + (ng + g) * 16);
                for (int i = 0; i < mr; i++)
                    tb[i][j] = numla_qblock_panel_sub_(tb[i][j], is[i][j], sv, mv, bs + i * (k / 16) + 2 * g);
            }
        }
        for (int i = 0; i < mr; i++)
            for (int j = 0; j < nr; j++)
                acc[i][j] = numla_qblock_panel_group_(acc[i][j], tb[i][j], dx[i * nb + b]);
    }
    numla_qblock_pn_store_(acc, rr, hi, y, ldy, accumulate, mr, nr);
}

void numla_qblock_panel_rows_(const numla_qblock_weight *w, int64_t lo, int64_t hi, int64_t m, const int8_t *xq,
                              const float *dx, const int32_t *bs, float *y, int64_t ldy, int accumulate,
                              void *scratch)
{
    const int64_t k = w->k, nb = numla_qblock_q8_groups_(k);
    const size_t pbytes = numla_qblock_pn_panel_bytes_(k);
    const int form = numla_qblock_type_row_get(w->type)->int_scales, s16 = numla_qblock_pn_s16_(w->type);
    const int k4 = form != NUMLA_QBLOCK_FORM_NONE && form != NUMLA_QBLOCK_FORM_Q3; /* S and Z */
    const int pre = form == NUMLA_QBLOCK_FORM_Q2;
    uint8_t *pan = (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    uint8_t *buf = pan + numla_qblock_align64_((size_t)NUMLA_QBLOCK_PANEL_NP * pbytes);
    for (int64_t a = lo; a < hi; a += 16 * NUMLA_QBLOCK_PANEL_NP) {
        const int64_t ahi = a + 16 * NUMLA_QBLOCK_PANEL_NP < hi ? a + 16 * NUMLA_QBLOCK_PANEL_NP : hi;
        const int64_t np = (ahi - a + 15) / 16;
        for (int64_t p = 0; p < np; p++) {
            numla_qblock_pn_pack_(w, a + 16 * p, ahi, buf, pan + (size_t)p * pbytes);
            if (pre) /* Q2_K: its codes times sc, one plane */
                numla_qblock_k4_planes_(pan + (size_t)p * pbytes, k, NULL, NUMLA_QBLOCK_FORM_Q2);
        }
        for (int64_t i0 = 0; i0 < m; i0 += NUMLA_QBLOCK_PN_MR) {
            const int mr = m - i0 < NUMLA_QBLOCK_PN_MR ? (int)(m - i0) : NUMLA_QBLOCK_PN_MR;
            const int8_t *xi = xq + i0 * k;
            const float *di = dx + i0 * nb;
            const int32_t *bi = bs + i0 * (k / 16);
            float *yi = y + i0 * ldy;
            for (int64_t p = 0; p < np; p += NUMLA_QBLOCK_PN_NR) {
                const int nr = np - p < NUMLA_QBLOCK_PN_NR ? (int)(np - p) : NUMLA_QBLOCK_PN_NR;
                const uint8_t *pp = pan + (size_t)p * pbytes;
                const int64_t rr = a + 16 * p;
                switch (pre * 32 + k4 * 64 + s16 * 32 + mr * 4 + nr) {
#define NUMLA_QBLOCK_PN_CASE(MR)                                                                        \
    case MR * 4 + 1:                                                                                    \
        numla_qblock_pn_tile_(pp, pbytes, k, xi, di, bi, rr, ahi, yi, ldy, accumulate, MR, 1);          \
        break;                                                                                          \
    case MR * 4 + 2:                                                                                    \
        numla_qblock_pn_tile_(pp, pbytes, k, xi, di, bi, rr, ahi, yi, ldy, accumulate, MR, 2);          \
        break;                                                                                          \
    case 32 + MR * 4 + 1:                                                                               \
        numla_qblock_pn_tile_q3_(pp, pbytes, k, xi, di, bi, rr, ahi, yi, ldy, accumulate, MR, 1);       \
        break;                                                                                          \
    case 32 + MR * 4 + 2:                                                                               \
        numla_qblock_pn_tile_q3_(pp, pbytes, k, xi, di, bi, rr, ahi, yi, ldy, accumulate, MR, 2);       \
        break;                                                                                          \
    case 64 + MR * 4 + 1:                                                                               \
        numla_qblock_pn_tile_k4_(pp, pbytes, k, xi, di, bi, rr, ahi, yi, ldy, accumulate, MR, 1, 0, 0); \
        break;                                                                                          \
    case 64 + MR * 4 + 2:                                                                               \
        numla_qblock_pn_tile_k4_(pp, pbytes, k, xi, di, bi, rr, ahi, yi, ldy, accumulate, MR, 2, 0, 0); \
        break;                                                                                          \
    case 128 + MR * 4 + 1:                                                                              \
        numla_qblock_pn_tile_k4_(pp, pbytes, k, xi, di, bi, rr, ahi, yi, ldy, accumulate, MR, 1, 1, 1); \
        break;                                                                                          \
    case 128 + MR * 4 + 2:                                                                              \
        numla_qblock_pn_tile_k4_(pp, pbytes, k, xi, di, bi, rr, ahi, yi, ldy, accumulate, MR, 2, 1, 1); \
        break;
                    NUMLA_QBLOCK_PN_CASE(1)
                    NUMLA_QBLOCK_PN_CASE(2)
                    NUMLA_QBLOCK_PN_CASE(3)
                    NUMLA_QBLOCK_PN_CASE(4)
#undef NUMLA_QBLOCK_PN_CASE
                default:
                    break;
                }
            }
        }
    }
}

_Static_assert(NUMLA_QBLOCK_PN_MR <= 4 && NUMLA_QBLOCK_PN_NR <= 3, "the tile switch packs mr, nr as mr * 4 + nr");
