/* kernels/x86/qblock_p16_avx512vnni.c — every encoding's stored panels in Q8 activation
 * mode, stored in the PANEL16 layout (kernels/qblock.h), below NUMLA_QBLOCK_PANEL_MIN_M x rows: batch-1 decode and
 * the small batches of decode steps and lightly loaded MoE experts; Q6_K at every M (its own
 * arithmetic, below: it has no panel GEMM).
 *
 * A 64-byte unit of a panel holds four code bytes of each of 16 rows; its low and its high
 * nibbles are each one vpdpbusd operand (16 rows x 4 columns, unsigned; IQ4_XS's codes go
 * through the code book + 128 first) against a broadcast quad of a quantized x row (signed).
 * The 16 output rows stay in the lanes, so nothing is reduced across lanes, and a 144-byte
 * Q4_K block costs about a quarter of the instructions of a row-at-a-time kernel. After the
 * eight units of a 64-column chunk, each of its two 32-column sub-blocks has an exact int32 sum
 * per row, which goes to fp32 as the panel GEMM of kernels/x86/qblock_panel_avx512vnni.c does
 * it, through the same functions (kernels/x86/qblock_p16_avx512.h): Q4_K and Q5_K in the piece
 * form (the sums times the rows' integer scales into the piece's int32 sum, one fp32 step per
 * piece), IQ4_XS and the 32-element types per sub-block (numla_qblock_panel_sub_ and _group_:
 *   tb = fma(float(Σ q · x), scale, tb);  tb = fnma(min, float(Σ x), tb)
 * sub-blocks in column order, and after each 256-column x group acc = fma(tb, dx, acc)). So a row's output
 * has the same bits here as in a panel GEMM call of any M, and the layout's results do not
 * depend on M at all.
 * Register tile: one panel by up to NUMLA_QBLOCK_P16_MR x rows. One panel at a time keeps a
 * thread on one sequential stream of memory: tiles over 2 or 4 panels (4 streams) read at
 * 0.6 of the bandwidth in batch-1 decode where one stream reads at 1.0 (docs/quantization.md),
 * and fewer than 3 x rows split each sub-block's sums in two to keep enough vpdpbusd chains in
 * flight. */
#include "kernels/x86/qblock_p16_avx512.h"

#define NUMLA_QBLOCK_P16_INLINE static inline __attribute__((always_inline))

/* acc + vpdpbusd(u8 a, s8 b) in place (GCC otherwise copies the accumulator around each one). */
NUMLA_QBLOCK_P16_INLINE __m512i numla_qblock_p16_dp_(__m512i acc, __m512i a, __m512i b)
{
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
    return acc;
}

/* The same with b the x quad at q as the instruction's {1to16} memory operand: one
 * instruction where a register broadcast is two. Q4_K's loop streams faster from memory this
 * way on Zen 4; Q8_0's slows by a quarter and the other types' do not change (one thread,
 * docs/quantization.md), so they keep the register. */
NUMLA_QBLOCK_P16_INLINE __m512i numla_qblock_p16_dpm_(__m512i acc, __m512i a, const int8_t *q)
{
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(a), "m"(*(const int32_t *)(const void *)q));
    return acc;
}

NUMLA_QBLOCK_P16_INLINE __m512i numla_qblock_p16_quad_(const int8_t *x, int64_t q)
{
    int32_t v;
    memcpy(&v, x + 4 * q, sizeof v);
    return _mm512_set1_epi32(v);
}

/* The end of a Q4_K or Q5_K piece: its d and dmin (16 fp16 each at dh, dmh), the rows' m bytes
 * (16 per sub-block from m8), x row i's per-16 sums at bs + i nb16 and scale at dx[i nb]: acc[i]
 * takes the piece's step from S[i]. */
NUMLA_QBLOCK_P16_INLINE void numla_qblock_p16_k4_end_(__m512 *acc, const __m512i *S, const int mr, const uint8_t *dh,
                                                      const uint8_t *dmh, const uint8_t *m8, const int32_t *bs,
                                                      int64_t nb16, const float *dx, int64_t nb)
{
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)dh));
    const __m512 dm = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)dmh));
    __m512i mp[4];
    for (int q = 0; q < 4; q++)
        mp[q] = numla_qblock_k4_mpair_(m8 + 32 * q, m8 + 32 * q + 16);
    for (int i = 0; i < mr; i++) {
        int32_t xp[4];
        numla_qblock_k4_xpairs_(bs + i * nb16, xp);
        acc[i] = numla_qblock_k4_piece_(acc[i], S[i], numla_qblock_k4_z_(mp, xp), d, dm, dx[i * nb]);
    }
}

/* Q4_K: x rows [0, mr) (xq, dx, bs already at the tile's first row) against panel p, in the piece
 * form (kernels/x86/qblock_p16_avx512.h). Per 64-column chunk h, the low nibbles of its eight
 * units are sub-block 2h and the high ones, kept in place (v & 0xF0: 16 q), sub-block 2h + 1,
 * each against its x quad as vpdpbusd's {1to16} memory operand; each sum times the rows' sc
 * (vpmulld) goes into the piece's even or odd sum, and S = S_even + (S_odd >> 4), exact (S_odd
 * is 16 times the odd sub-blocks' part, below 2^28). */
NUMLA_QBLOCK_P16_INLINE void numla_qblock_p16_q4k_tile_(const numla_qblock_weight *w, int64_t p, const int8_t *xq,
                                                        const float *dx, const int32_t *bs, float *y, int64_t ldy,
                                                        int accumulate, const int mr)
{
    const int64_t k = w->k, nb = k / 256, nb16 = k / 16, sb = numla_qblock_p16_sb_(w->type);
    const uint8_t *pan = w->q + p * w->ld;
    const __m512i m4 = _mm512_set1_epi8(15), m4h = _mm512_set1_epi8((char)0xF0);
    /* with fewer than 3 x rows, odd units go to a second set of sums: enough independent
     * vpdpbusd chains to hide its latency (integer sums: the same result) */
    const int split = mr < 3;
    __m512 acc[NUMLA_QBLOCK_P16_MR];
    for (int i = 0; i < mr; i++)
        acc[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *pc = pan + b * sb; /* this 256-column piece */
        const uint8_t *sc8 = pc + NUMLA_QBLOCK_P16_SC_Q4K;
        __m512i se[NUMLA_QBLOCK_P16_MR], so[NUMLA_QBLOCK_P16_MR];
        for (int i = 0; i < mr; i++)
            se[i] = so[i] = _mm512_setzero_si512();
        for (int h = 0; h < 4; h++) {
            /* sums of sub-blocks 2h and 2h + 1 per x row: [0] even units, [1] odd (split) */
            __m512i s0[NUMLA_QBLOCK_P16_MR][2], s1[NUMLA_QBLOCK_P16_MR][2];
            for (int i = 0; i < mr; i++)
                s0[i][0] = s0[i][1] = s1[i][0] = s1[i][1] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int u = 0; u < 8; u++) {
                const __m512i v = _mm512_load_si512((const void *)(pc + (h * 8 + u) * 64));
                const __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(v, m4h);
                const int64_t qlo = 64 * b + 16 * h + u;
                const int e = split && (u & 1);
                for (int i = 0; i < mr; i++) {
                    s0[i][e] = numla_qblock_p16_dpm_(s0[i][e], lo, xq + i * k + 4 * qlo);
                    s1[i][e] = numla_qblock_p16_dpm_(s1[i][e], hi, xq + i * k + 4 * (qlo + 8));
                }
            }
            const __m512i sce = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(const void *)(sc8 + 32 * h)));
            const __m512i sco = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(const void *)(sc8 + 32 * h + 16)));
            for (int i = 0; i < mr; i++) {
                se[i] = _mm512_add_epi32(se[i], _mm512_mullo_epi32(_mm512_add_epi32(s0[i][0], s0[i][1]), sce));
                so[i] = _mm512_add_epi32(so[i], _mm512_mullo_epi32(_mm512_add_epi32(s1[i][0], s1[i][1]), sco));
            }
        }
        __m512i S[NUMLA_QBLOCK_P16_MR];
        for (int i = 0; i < mr; i++)
            S[i] = _mm512_add_epi32(se[i], _mm512_srai_epi32(so[i], 4));
        numla_qblock_p16_k4_end_(acc, S, mr, pc + NUMLA_QBLOCK_P16_D, pc + NUMLA_QBLOCK_P16_DMIN, sc8 + 128,
                                 bs + 16 * b, nb16, dx + b, nb);
    }
    numla_qblock_p16_store_(acc, mr, 16 * p, w->n, y, ldy, accumulate);
}

/* IQ4_XS: x rows [0, mr) (xq, dx, bs already at the tile's first row) against panel p, in the piece
 * form (kernels/x86/qblock_p16_avx512.h): units 0-3 of a 64-column chunk h are sub-block 2h, 4-7
 * 2h + 1, their codes through the code book + 128; each sub-block's sum times the rows' signed
 * s = ls - 32 (vpmulld) into the piece's S, Z from the word pairs of s, dmin = 128 d. */
NUMLA_QBLOCK_P16_INLINE void numla_qblock_p16_iq4xs_tile_(const numla_qblock_weight *w, int64_t p, const int8_t *xq,
                                                          const float *dx, const int32_t *bs, float *y, int64_t ldy,
                                                          int accumulate, const int mr)
{
    const int64_t k = w->k, nb = k / 256, nb16 = k / 16, sb = numla_qblock_p16_sb_(w->type);
    const uint8_t *pan = w->q + p * w->ld;
    const __m512i book = numla_qblock_p16_book_();
    const int split = mr < 3; /* as Q4_K's */
    __m512 acc[NUMLA_QBLOCK_P16_MR];
    for (int i = 0; i < mr; i++)
        acc[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *pc = pan + b * sb; /* this 256-column piece */
        __m512i S[NUMLA_QBLOCK_P16_MR], sv[8];
        for (int i = 0; i < mr; i++)
            S[i] = _mm512_setzero_si512();
        for (int h = 0; h < 4; h++) {
            __m512i s0[NUMLA_QBLOCK_P16_MR][2], s1[NUMLA_QBLOCK_P16_MR][2];
            for (int i = 0; i < mr; i++)
                s0[i][0] = s0[i][1] = s1[i][0] = s1[i][1] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int u = 0; u < 8; u++) {
                __m512i lo, hi;
                numla_qblock_p16_unit_(pc + (h * 8 + u) * 64, NUMLA_QBLOCK_P16_BOOK, NULL, book, &lo, &hi);
                const int64_t qlo = 64 * b + 16 * h + 8 * (u / 4) + u % 4; /* the low nibbles' x quad */
                const int e = split && (u & 1);
                for (int i = 0; i < mr; i++) {
                    __m512i *sp = u < 4 ? &s0[i][e] : &s1[i][e];
                    *sp = numla_qblock_p16_dp_(*sp, lo, numla_qblock_p16_quad_(xq + i * k, qlo));
                    *sp = numla_qblock_p16_dp_(*sp, hi, numla_qblock_p16_quad_(xq + i * k, qlo + 4));
                }
            }
            for (int s = 0; s < 2; s++) {
                sv[2 * h + s] = _mm512_cvtepi8_epi32(
                    _mm_load_si128((const __m128i *)(const void *)(pc + NUMLA_QBLOCK_P16_SC_IQ4 + 16 * (2 * h + s))));
                for (int i = 0; i < mr; i++) {
                    const __m512i is = s ? _mm512_add_epi32(s1[i][0], s1[i][1]) : _mm512_add_epi32(s0[i][0], s0[i][1]);
                    S[i] = _mm512_add_epi32(S[i], _mm512_mullo_epi32(is, sv[2 * h + s]));
                }
            }
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(pc + NUMLA_QBLOCK_P16_D)));
        const __m512 dmin = _mm512_mul_ps(d, _mm512_set1_ps(128.0f));
        __m512i mp[4];
        for (int q = 0; q < 4; q++)
            mp[q] = numla_qblock_k16_mpair_(sv[2 * q], sv[2 * q + 1]);
        for (int i = 0; i < mr; i++) {
            int32_t xp[4];
            numla_qblock_k4_xpairs_(bs + i * nb16 + 16 * b, xp);
            acc[i] = numla_qblock_k4_piece_(acc[i], S[i], numla_qblock_k4_z_(mp, xp), d, dmin, dx[i * nb + b]);
        }
    }
    numla_qblock_p16_store_(acc, mr, 16 * p, w->n, y, ldy, accumulate);
}

/* The 32-element types (kind 0 IQ4_NL, 1 Q5_0, 2 Q8_0, 3 Q4_0, 4 Q5_1): x rows [0, mr) against
 * panel p, 64 columns (two blocks) a piece; each block's exact int32 sum goes to fp32 as the panel
 * GEMM's tile does it (scale d, min 16 d for Q5_0's q - 16, 8 d for Q4_0's q - 8, -m for Q5_1's
 * d q + m, 128 d for the others' codes + 128). */
NUMLA_QBLOCK_P16_INLINE void numla_qblock_p16_b32_tile_(const numla_qblock_weight *w, int64_t p, const int8_t *xq,
                                                        const float *dx, const int32_t *bs, float *y, int64_t ldy,
                                                        int accumulate, const int mr, const int kind)
{
    const int64_t k = w->k, ng = numla_qblock_q8_groups_(k), nb16 = k / 16, sb = numla_qblock_p16_sb_(w->type);
    const int64_t doff = numla_qblock_p16_b32_d_(w->type);
    const uint8_t *pan = w->q + p * w->ld;
    const __m512i flip = _mm512_set1_epi8((char)0x80), book = numla_qblock_p16_book_();
    const int split = mr < 3;
    __m512 acc[NUMLA_QBLOCK_P16_MR], tb[NUMLA_QBLOCK_P16_MR];
    for (int i = 0; i < mr; i++)
        acc[i] = tb[i] = _mm512_setzero_ps();
    for (int64_t P = 0; P < k / 64; P++) {
        const uint8_t *pc = pan + P * sb;
        __m512i sm[NUMLA_QBLOCK_P16_MR][2][2]; /* x row, block, even / odd units */
        for (int i = 0; i < mr; i++)
            sm[i][0][0] = sm[i][0][1] = sm[i][1][0] = sm[i][1][1] = _mm512_setzero_si512();
        for (int t = 0; t < 2; t++) {
            if (kind == 2) {
#pragma GCC unroll 8
                for (int u = 0; u < 8; u++) {
                    const __m512i v = _mm512_xor_si512(_mm512_load_si512((const void *)(pc + (8 * t + u) * 64)), flip);
                    const int e = split && (u & 1);
                    for (int i = 0; i < mr; i++)
                        sm[i][t][e] = numla_qblock_p16_dp_(sm[i][t][e], v, numla_qblock_p16_quad_(xq + i * k, 16 * P + 8 * t + u));
                }
                continue;
            }
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) {
                __m512i lo, hi;
                numla_qblock_p16_unit_(pc + (4 * t + u) * 64,
                                       kind == 1 || kind == 4 ? NUMLA_QBLOCK_P16_BIT5
                                       : kind == 3            ? NUMLA_QBLOCK_P16_NIB
                                                              : NUMLA_QBLOCK_P16_BOOK,
                                       pc + NUMLA_QBLOCK_P16_B32_MASKS + (4 * t + u) * 16, book, &lo, &hi);
                const int e = split && (u & 1);
                for (int i = 0; i < mr; i++) {
                    sm[i][t][e] = numla_qblock_p16_dp_(sm[i][t][e], lo, numla_qblock_p16_quad_(xq + i * k, 16 * P + 8 * t + u));
                    sm[i][t][e] = numla_qblock_p16_dp_(sm[i][t][e], hi, numla_qblock_p16_quad_(xq + i * k, 16 * P + 8 * t + 4 + u));
                }
            }
        }
        for (int t = 0; t < 2; t++) {
            const int64_t g = 2 * P + t;
            const __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(pc + doff + 32 * t)));
            /* Q5_1's min is the block's m, added: mv = -m */
            const __m512 mv =
                kind == 4 ? _mm512_sub_ps(_mm512_setzero_ps(),
                                          _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(pc + doff + 64 + 32 * t))))
                          : _mm512_mul_ps(d, _mm512_set1_ps(kind == 1 ? 16.0f : kind == 3 ? 8.0f : 128.0f));
            for (int i = 0; i < mr; i++)
                tb[i] = numla_qblock_panel_sub_(tb[i], _mm512_add_epi32(sm[i][t][0], sm[i][t][1]), d, mv,
                                                bs + i * nb16 + 2 * g);
        }
        if (P % 4 == 3 || P == k / 64 - 1) /* the end of a 256-column x group */
            for (int i = 0; i < mr; i++) {
                acc[i] = numla_qblock_panel_group_(acc[i], tb[i], dx[i * ng + P / 4]);
                tb[i] = _mm512_setzero_ps();
            }
    }
    numla_qblock_p16_store_(acc, mr, 16 * p, w->n, y, ldy, accumulate);
}

/* Q6_K: x rows [0, mr) against panel p. A group's ql units (n, v) and (n, v + 8) and qh unit
 * (n, v) make four operands of 6-bit codes (q + 32, unsigned), the x quads 32n + 8s + v (s = 0 .. 3) of
 * the 256-column piece, which fall in sub-blocks 8n + 2s + v / 4. Each sub-block's sum starts
 * at -32 Σ x over its 16 columns, so after its four vpdpbusd it is Σ (q - 32) x exactly; it is
 * multiplied by the rows' scales (vpmulld) into the block's int32 sum (exact: at most 16 · 128 ·
 * 32 · 127 · 16 in magnitude), which goes to fp32 once per block:
 *   acc = fma(float(Σ_j sc_j Σ (q - 32) x), d · dx, acc)
 * the arithmetic of every M (this kernel runs Q6_K panels at every M). */
NUMLA_QBLOCK_P16_INLINE void numla_qblock_p16_q6_tile_(const numla_qblock_weight *w, int64_t p, const int8_t *xq,
                                                       const float *dx, const int32_t *bs, float *y, int64_t ldy,
                                                       int accumulate, const int mr)
{
    const int64_t k = w->k, nb = k / 256, nb16 = k / 16;
    const uint8_t *pan = w->q + p * w->ld;
    __m512 acc[NUMLA_QBLOCK_P16_MR];
    for (int i = 0; i < mr; i++)
        acc[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *pc = pan + b * NUMLA_QBLOCK_P16_SB_Q6K;
        __m512i tot[NUMLA_QBLOCK_P16_MR];
        for (int i = 0; i < mr; i++)
            tot[i] = _mm512_setzero_si512();
        for (int n = 0; n < 2; n++)
            for (int half = 0; half < 2; half++) {
                /* sub-blocks 8n + 2s + half, s = 0 .. 3, per x row */
                __m512i sum[NUMLA_QBLOCK_P16_MR][4];
                for (int i = 0; i < mr; i++)
                    for (int s = 0; s < 4; s++)
                        sum[i][s] = _mm512_set1_epi32(-32 * bs[i * nb16 + 16 * b + 8 * n + 2 * s + half]);
#pragma GCC unroll 4
                for (int vv = 0; vv < 4; vv++) {
                    const int v = 4 * half + vv;
                    __m512i op[4];
                    numla_qblock_p16_q6_ops_(pc + 192 * (8 * n + v), op);
                    for (int i = 0; i < mr; i++)
                        for (int s = 0; s < 4; s++)
                            sum[i][s] = numla_qblock_p16_dp_(sum[i][s], op[s],
                                                             numla_qblock_p16_quad_(xq + i * k, 64 * b + 32 * n + 8 * s + v));
                }
                for (int s = 0; s < 4; s++) {
                    const int j = 8 * n + 2 * s + half;
                    const __m512i sc = _mm512_cvtepi8_epi32(
                        _mm_loadu_si128((const __m128i *)(const void *)(pc + NUMLA_QBLOCK_P16_Q6_SC + 16 * j)));
                    for (int i = 0; i < mr; i++)
                        tot[i] = _mm512_add_epi32(tot[i], _mm512_mullo_epi32(sum[i][s], sc));
                }
            }
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(pc + NUMLA_QBLOCK_P16_Q6_D)));
        for (int i = 0; i < mr; i++)
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot[i]), _mm512_mul_ps(d, _mm512_set1_ps(dx[i * nb + b])), acc[i]);
    }
    numla_qblock_p16_store_(acc, mr, 16 * p, w->n, y, ldy, accumulate);
}

/* Q2_K: x rows [0, mr) against panel p, in the piece form (kernels/x86/qblock_p16_avx512.h).
 * Unit (n, u) of a piece holds four 2-bit fields per code byte; field j, kept in place (v & 3 <<
 * 2j: 4^j q, so its sum is 4^j Σ q x, exact in int32), is the x quad 32n + 8j + u (sub-block
 * 8n + 2j + u / 4), against it as vpdpbusd's {1to16} memory operand: one load, four ands and
 * four products per unit. Each sub-block's sum, shifted back by 2j (exact), joins the piece's S
 * times the rows' sc in one vpdpwssd (it fits a word); Z from the rows' m (sc >> 4) as word
 * pairs. */
NUMLA_QBLOCK_P16_INLINE void numla_qblock_p16_q2_tile_(const numla_qblock_weight *w, int64_t p, const int8_t *xq,
                                                       const float *dx, const int32_t *bs, float *y, int64_t ldy,
                                                       int accumulate, const int mr)
{
    const int64_t k = w->k, nb = k / 256, nb16 = k / 16;
    const uint8_t *pan = w->q + p * w->ld;
    const __m512i m15 = _mm512_set1_epi32(15);
    const int split = mr < 3;
    __m512 acc[NUMLA_QBLOCK_P16_MR];
    for (int i = 0; i < mr; i++)
        acc[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *pc = pan + b * NUMLA_QBLOCK_P16_SB_Q2K;
        __m512i S[NUMLA_QBLOCK_P16_MR], mv[16];
        for (int i = 0; i < mr; i++)
            S[i] = _mm512_setzero_si512();
        for (int n = 0; n < 2; n++)
            for (int half = 0; half < 2; half++) {
                __m512i s[NUMLA_QBLOCK_P16_MR][4][2];
                for (int i = 0; i < mr; i++)
                    for (int j = 0; j < 4; j++)
                        s[i][j][0] = s[i][j][1] = _mm512_setzero_si512();
#pragma GCC unroll 4
                for (int uu = 0; uu < 4; uu++) {
                    const int u = 4 * half + uu, e = split && (uu & 1);
                    const __m512i v = _mm512_load_si512((const void *)(pc + numla_qblock_p16_q2_qs_(n, u)));
                    __m512i op[4];
                    for (int j = 0; j < 4; j++)
                        op[j] = _mm512_and_si512(v, _mm512_set1_epi8((char)(3 << (2 * j))));
                    for (int i = 0; i < mr; i++)
                        for (int j = 0; j < 4; j++)
                            s[i][j][e] = numla_qblock_p16_dpm_(s[i][j][e], op[j],
                                                               xq + i * k + 4 * (64 * b + 32 * n + 8 * j + u));
                }
                for (int j = 0; j < 4; j++) {
                    const int sb = 8 * n + 2 * j + half;
                    const __m512i v = _mm512_cvtepu8_epi32(
                        _mm_load_si128((const __m128i *)(const void *)(pc + numla_qblock_p16_q2_sc_(sb))));
                    const __m512i scv = _mm512_and_si512(v, m15);
                    mv[sb] = _mm512_srli_epi32(v, 4);
                    for (int i = 0; i < mr; i++)
                        S[i] = _mm512_dpwssd_epi32(
                            S[i], _mm512_srai_epi32(_mm512_add_epi32(s[i][j][0], s[i][j][1]), (unsigned)(2 * j)), scv);
                }
            }
        const __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(pc + NUMLA_QBLOCK_P16_Q2_D)));
        const __m512 dmin =
            _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(pc + NUMLA_QBLOCK_P16_Q2_DMIN)));
        __m512i mp[8];
        for (int q = 0; q < 8; q++)
            mp[q] = numla_qblock_k16_mpair_(mv[2 * q], mv[2 * q + 1]);
        for (int i = 0; i < mr; i++) {
            int32_t xp[8];
            numla_qblock_k16_xpairs_(bs + i * nb16 + 16 * b, xp);
            acc[i] = numla_qblock_k4_piece_(acc[i], S[i], numla_qblock_k16_z_(mp, xp), d, dmin, dx[i * nb + b]);
        }
    }
    numla_qblock_p16_store_(acc, mr, 16 * p, w->n, y, ldy, accumulate);
}

/* Shift left by e, or right by -e (an exact multiple, so exact either way). */
NUMLA_QBLOCK_P16_INLINE __m512i numla_qblock_p16_shift_(__m512i v, int e)
{
    return e >= 0 ? _mm512_slli_epi32(v, (unsigned)e) : _mm512_srai_epi32(v, (unsigned)-e);
}

/* Q5_K: x rows [0, mr) against panel p. Q4_K's units (h, u) with the low nibbles as they are
 * and the high ones in place (v & 0xF0: 16 q), and the fifth bits of both from qh unit u in
 * place too (bits 2h and 2h + 1), each against its x quad as a {1to16} memory operand into its
 * own sum; the sub-block sums join exactly,
 *   S_lo = A_lo + 16 (B_lo >> 2h),  S_hi = (A_hi >> 4) + 16 (B_hi >> (2h + 1)),
 * and times the rows' sc into the piece's S, in the piece form (Q4_K's scales and mins). */
NUMLA_QBLOCK_P16_INLINE void numla_qblock_p16_q5k_tile_(const numla_qblock_weight *w, int64_t p, const int8_t *xq,
                                                        const float *dx, const int32_t *bs, float *y, int64_t ldy,
                                                        int accumulate, const int mr)
{
    const int64_t k = w->k, nb = k / 256, nb16 = k / 16;
    const uint8_t *pan = w->q + p * w->ld;
    const __m512i m4 = _mm512_set1_epi8(15), m4h = _mm512_set1_epi8((char)0xF0);
    __m512 acc[NUMLA_QBLOCK_P16_MR];
    for (int i = 0; i < mr; i++)
        acc[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *pc = pan + b * NUMLA_QBLOCK_P16_SB_Q5K;
        const uint8_t *sc8 = pc + NUMLA_QBLOCK_P16_Q5_SC;
        __m512i S[NUMLA_QBLOCK_P16_MR];
        for (int i = 0; i < mr; i++)
            S[i] = _mm512_setzero_si512();
        for (int h = 0; h < 4; h++) {
            __m512i al[NUMLA_QBLOCK_P16_MR], bl[NUMLA_QBLOCK_P16_MR], ah[NUMLA_QBLOCK_P16_MR], bh[NUMLA_QBLOCK_P16_MR];
            for (int i = 0; i < mr; i++)
                al[i] = bl[i] = ah[i] = bh[i] = _mm512_setzero_si512();
            const __m512i ml = _mm512_set1_epi8((char)(1 << (2 * h))), mh = _mm512_set1_epi8((char)(1 << (2 * h + 1)));
#pragma GCC unroll 8
            for (int u = 0; u < 8; u++) {
                const __m512i v = _mm512_load_si512((const void *)(pc + NUMLA_QBLOCK_P16_Q5_QS + 64 * (8 * h + u)));
                const __m512i hv = _mm512_load_si512((const void *)(pc + NUMLA_QBLOCK_P16_Q5_QH + 64 * u));
                const __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(v, m4h);
                const __m512i l5 = _mm512_and_si512(hv, ml), h5 = _mm512_and_si512(hv, mh);
                const int64_t qlo = 64 * b + 16 * h + u;
                for (int i = 0; i < mr; i++) {
                    const int8_t *xl = xq + i * k + 4 * qlo, *xh = xl + 32;
                    al[i] = numla_qblock_p16_dpm_(al[i], lo, xl);
                    bl[i] = numla_qblock_p16_dpm_(bl[i], l5, xl);
                    ah[i] = numla_qblock_p16_dpm_(ah[i], hi, xh);
                    bh[i] = numla_qblock_p16_dpm_(bh[i], h5, xh);
                }
            }
            for (int s = 0; s < 2; s++) {
                const __m512i scv =
                    _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(const void *)(sc8 + 16 * (2 * h + s))));
                for (int i = 0; i < mr; i++) {
                    const __m512i is = s ? _mm512_add_epi32(_mm512_srai_epi32(ah[i], 4),
                                                            numla_qblock_p16_shift_(bh[i], 4 - (2 * h + 1)))
                                         : _mm512_add_epi32(al[i], numla_qblock_p16_shift_(bl[i], 4 - 2 * h));
                    S[i] = _mm512_add_epi32(S[i], _mm512_mullo_epi32(is, scv));
                }
            }
        }
        numla_qblock_p16_k4_end_(acc, S, mr, pc + NUMLA_QBLOCK_P16_Q5_D, pc + NUMLA_QBLOCK_P16_Q5_DMIN, sc8 + 128,
                                 bs + 16 * b, nb16, dx + b, nb);
    }
    numla_qblock_p16_store_(acc, mr, 16 * p, w->n, y, ldy, accumulate);
}

/* Q3_K: x rows [0, mr) against panel p, in its form (kernels/x86/qblock_p16_avx512.h). As Q2_K,
 * with each code's third bit from the hmask unit u (bit 4n + j of its byte) kept in place too and
 * summed apart (h & 1 << (4n + j): its sum is 2^(4n + j) Σ hbit x): Σ code x = (S2 >> 2j) + 4 (SH
 * >> (4n + j)), exact; the code is q + 4 (unsigned), so Σ q x takes 4 Σ x off, and times the
 * rows' s - 32 (floats) goes into the piece's exact fp32 U. */
NUMLA_QBLOCK_P16_INLINE void numla_qblock_p16_q3_tile_(const numla_qblock_weight *w, int64_t p, const int8_t *xq,
                                                       const float *dx, const int32_t *bs, float *y, int64_t ldy,
                                                       int accumulate, const int mr)
{
    const int64_t k = w->k, nb = k / 256, nb16 = k / 16;
    const uint8_t *pan = w->q + p * w->ld;
    __m512 acc[NUMLA_QBLOCK_P16_MR];
    for (int i = 0; i < mr; i++)
        acc[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *pc = pan + b * NUMLA_QBLOCK_P16_SB_Q3K;
        const __m512 d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(pc + NUMLA_QBLOCK_P16_Q3_D)));
        __m512 U[NUMLA_QBLOCK_P16_MR];
        for (int i = 0; i < mr; i++)
            U[i] = _mm512_setzero_ps();
        for (int n = 0; n < 2; n++)
            for (int half = 0; half < 2; half++) {
                __m512i s2[NUMLA_QBLOCK_P16_MR][4], sh[NUMLA_QBLOCK_P16_MR][4];
                for (int i = 0; i < mr; i++)
                    for (int j = 0; j < 4; j++)
                        s2[i][j] = sh[i][j] = _mm512_setzero_si512();
#pragma GCC unroll 4
                for (int uu = 0; uu < 4; uu++) {
                    const int u = 4 * half + uu;
                    const __m512i v = _mm512_load_si512((const void *)(pc + numla_qblock_p16_q3_qs_(n, u)));
                    const __m512i hv = _mm512_load_si512((const void *)(pc + numla_qblock_p16_q3_h_(u)));
                    for (int j = 0; j < 4; j++) {
                        const __m512i lo = _mm512_and_si512(v, _mm512_set1_epi8((char)(3 << (2 * j))));
                        const __m512i hb = _mm512_and_si512(hv, _mm512_set1_epi8((char)(1 << (4 * n + j))));
                        for (int i = 0; i < mr; i++) {
                            const int8_t *q = xq + i * k + 4 * (64 * b + 32 * n + 8 * j + u);
                            s2[i][j] = numla_qblock_p16_dpm_(s2[i][j], lo, q);
                            sh[i][j] = numla_qblock_p16_dpm_(sh[i][j], hb, q);
                        }
                    }
                }
                for (int j = 0; j < 4; j++) {
                    const int sb = 8 * n + 2 * j + half, e = 4 * n + j; /* e: the hmask bit */
                    const __m512 sv = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                        _mm_load_si128((const __m128i *)(const void *)(pc + numla_qblock_p16_q3_sc_(sb)))));
                    for (int i = 0; i < mr; i++) {
                        const __m512i h4 = e >= 2 ? _mm512_srai_epi32(sh[i][j], (unsigned)(e - 2))
                                                  : _mm512_slli_epi32(sh[i][j], (unsigned)(2 - e));
                        const __m512i is = _mm512_add_epi32(_mm512_srai_epi32(s2[i][j], (unsigned)(2 * j)), h4);
                        const __m512i iq = _mm512_sub_epi32(is, _mm512_set1_epi32(4 * bs[i * nb16 + 16 * b + sb]));
                        U[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iq), sv, U[i]);
                    }
                }
            }
        for (int i = 0; i < mr; i++)
            acc[i] = _mm512_fmadd_ps(U[i], _mm512_mul_ps(d, _mm512_set1_ps(dx[i * nb + b])), acc[i]);
    }
    numla_qblock_p16_store_(acc, mr, 16 * p, w->n, y, ldy, accumulate);
}

/* Each type's stored-panel rows (its row's p16_vnni, kernels/qblock_types.h): panels [plo, phi)
 * in chunks, tiles of up to NUMLA_QBLOCK_P16_MR x rows, TILE(MR) the type's tile. */
#define NUMLA_QBLOCK_P16_ROWS_(NAME, TILE)                                                                      \
    void numla_qblock_p16_rows_##NAME##_avx512vnni(const numla_qblock_weight *w, int64_t plo, int64_t phi,     \
                                                   int64_t m, const int8_t *xq, const float *dx,                \
                                                   const int32_t *bs, float *y, int64_t ldy, int accumulate)    \
    {                                                                                                           \
        const int64_t k = w->k, nb = numla_qblock_q8_groups_(k), nb16 = k / 16;                                 \
        int64_t chunk = NUMLA_QBLOCK_P16_CHUNK / w->ld;                                                         \
        if (chunk < 1)                                                                                          \
            chunk = 1;                                                                                          \
        for (int64_t c0 = plo; c0 < phi; c0 += chunk) {                                                         \
            const int64_t c1 = c0 + chunk < phi ? c0 + chunk : phi;                                             \
            for (int64_t i0 = 0; i0 < m; i0 += NUMLA_QBLOCK_P16_MR) {                                           \
                const int mr = m - i0 < NUMLA_QBLOCK_P16_MR ? (int)(m - i0) : NUMLA_QBLOCK_P16_MR;              \
                const int8_t *xi = xq + i0 * k;                                                                 \
                const float *di = dx + i0 * nb;                                                                 \
                const int32_t *bi = bs + i0 * nb16;                                                             \
                float *yi = y + i0 * ldy;                                                                       \
                for (int64_t p = c0; p < c1; p++)                                                               \
                    switch (mr) {                                                                               \
                    case 1: TILE(1); break;                                                                     \
                    case 2: TILE(2); break;                                                                     \
                    default: TILE(3); break;                                                                    \
                    }                                                                                           \
            }                                                                                                   \
        }                                                                                                       \
    }
#define NUMLA_QBLOCK_P16_T_Q4K_(MR) numla_qblock_p16_q4k_tile_(w, p, xi, di, bi, yi, ldy, accumulate, MR)
#define NUMLA_QBLOCK_P16_T_IQ4XS_(MR) numla_qblock_p16_iq4xs_tile_(w, p, xi, di, bi, yi, ldy, accumulate, MR)
#define NUMLA_QBLOCK_P16_T_IQ4NL_(MR) numla_qblock_p16_b32_tile_(w, p, xi, di, bi, yi, ldy, accumulate, MR, 0)
#define NUMLA_QBLOCK_P16_T_Q50_(MR) numla_qblock_p16_b32_tile_(w, p, xi, di, bi, yi, ldy, accumulate, MR, 1)
#define NUMLA_QBLOCK_P16_T_Q80_(MR) numla_qblock_p16_b32_tile_(w, p, xi, di, bi, yi, ldy, accumulate, MR, 2)
#define NUMLA_QBLOCK_P16_T_Q40_(MR) numla_qblock_p16_b32_tile_(w, p, xi, di, bi, yi, ldy, accumulate, MR, 3)
#define NUMLA_QBLOCK_P16_T_Q51_(MR) numla_qblock_p16_b32_tile_(w, p, xi, di, bi, yi, ldy, accumulate, MR, 4)
#define NUMLA_QBLOCK_P16_T_Q6K_(MR) numla_qblock_p16_q6_tile_(w, p, xi, di, bi, yi, ldy, accumulate, MR)
#define NUMLA_QBLOCK_P16_T_Q2K_(MR) numla_qblock_p16_q2_tile_(w, p, xi, di, bi, yi, ldy, accumulate, MR)
#define NUMLA_QBLOCK_P16_T_Q3K_(MR) numla_qblock_p16_q3_tile_(w, p, xi, di, bi, yi, ldy, accumulate, MR)
#define NUMLA_QBLOCK_P16_T_Q5K_(MR) numla_qblock_p16_q5k_tile_(w, p, xi, di, bi, yi, ldy, accumulate, MR)
NUMLA_QBLOCK_P16_ROWS_(q4_k, NUMLA_QBLOCK_P16_T_Q4K_)
NUMLA_QBLOCK_P16_ROWS_(iq4_xs, NUMLA_QBLOCK_P16_T_IQ4XS_)
NUMLA_QBLOCK_P16_ROWS_(iq4_nl, NUMLA_QBLOCK_P16_T_IQ4NL_)
NUMLA_QBLOCK_P16_ROWS_(q5_0, NUMLA_QBLOCK_P16_T_Q50_)
NUMLA_QBLOCK_P16_ROWS_(q8_0, NUMLA_QBLOCK_P16_T_Q80_)
NUMLA_QBLOCK_P16_ROWS_(q4_0, NUMLA_QBLOCK_P16_T_Q40_)
NUMLA_QBLOCK_P16_ROWS_(q5_1, NUMLA_QBLOCK_P16_T_Q51_)
NUMLA_QBLOCK_P16_ROWS_(q6_k, NUMLA_QBLOCK_P16_T_Q6K_)
NUMLA_QBLOCK_P16_ROWS_(q2_k, NUMLA_QBLOCK_P16_T_Q2K_)
NUMLA_QBLOCK_P16_ROWS_(q3_k, NUMLA_QBLOCK_P16_T_Q3K_)
NUMLA_QBLOCK_P16_ROWS_(q5_k, NUMLA_QBLOCK_P16_T_Q5K_)

void numla_qblock_p16_rows_(const numla_qblock_weight *w, int64_t plo, int64_t phi, int64_t m, const int8_t *xq,
                            const float *dx, const int32_t *bs, float *y, int64_t ldy, int accumulate)
{
    numla_qblock_type_row_get(w->type)->p16_vnni(w, plo, phi, m, xq, dx, bs, y, ldy, accumulate);
}

_Static_assert(NUMLA_QBLOCK_P16_MR == 3, "the tile switch covers 1 .. 3 x rows");
