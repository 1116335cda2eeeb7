/* kernels/x86/qblock_avx2.c — block-quantized linear layers in Q8 activation mode
 * (kernels/qblock.h) with AVX2: the level for CPUs without AVX-512 (AMD Zen 2 and 3, Intel
 * before Skylake-SP), and the Q8 mode of an AVX-512 CPU without VNNI.
 *
 * The x rows are quantized first (the rule of numla_qblock_quantize_rows_ in 8 lanes, the same
 * bits) into int8 codes |q| <= 127, a scale per 256 columns and the code sums per 16 columns.
 * Then each weight row's blocks are unpacked once per tile of up to NUMLA_QBLOCK_AVX2_MR x rows,
 * and for each x row of the tile a block's products are summed exactly in int32: vpmaddubsw
 * multiplies unsigned weight bytes by the signed x codes into int16 pair sums, vpmaddwd adds the
 * pairs into int32 lanes (times the sub-block's integer scale where the type has one). vpmaddubsw
 * saturates a pair sum past 32767; no operand here can reach it:
 *   unsigned codes (Q4_K, Q5_K: q <= 31; Q6_K: q + 32 <= 63; Q2_K: q <= 3; Q3_K: q + 4 <= 7;
 *   Q5_1: q <= 31) against x: |pair| <= 2 · 63 · 127 = 16002;
 *   signed codes (Q8_0 -128 .. 127, Q4_0 q - 8, Q5_0 q - 16, the IQ4 and MXFP4 code books): the
 *   sign trick, |w| as an unsigned byte (|-128| = 128) against x with w's sign moved onto it
 *   (vpsignb; x is never -128, so negating it cannot overflow): |pair| <= 2 · 128 · 127 = 32512.
 * Where a type offsets its codes (Q6_K's 32, Q3_K's 4) or has mins (Q4_K, Q5_K, Q2_K), the term
 * is the per-16 code sums of x times the constant (times the group's scale), exact in int32 and
 * taken off (or scaled apart) once per block. The block's int32 lanes are converted once and
 * multiplied into 8 fp32 lanes per x row by one fma with d · dx (the fp32 product of the block's
 * scale and the x group's), the mins by a second with dmin · dx; the 32-element types do this
 * per block (Q5_1 adds m · dx · Σ x in lane 0). The 8 lanes are summed in a fixed order at the
 * end of the row.
 *
 * Same bits whatever M and the thread count: each (weight row, x row) pair gets the same int32
 * lanes per block and the same fp32 operations in the same order whatever the tile height
 * (every fp32 step an explicit intrinsic; no product is left for the compiler to contract).
 * Weights in the PANEL16 layout (not what the engine packs for this level) are read back one
 * 256-column group at a time into the file's bytes and run the same kernels: the ROWS layout's
 * bits.
 */
#include "kernels/x86/qblock_avx2_internal.h"

#include <immintrin.h>
#include <omp.h>

#define NUMLA_A2_INLINE static inline __attribute__((always_inline))

static inline float numla_qblock_a2_h_(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

static inline __m256i numla_qblock_a2_ld_(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
static inline __m128i numla_qblock_a2_ld16_(const void *p) { return _mm_loadu_si128((const __m128i *)p); }

/* The 8 lanes' sum, always in this order. */
static inline float numla_qblock_a2_hsum_(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Σ w x over 32 bytes: w unsigned codes, x signed codes, pairs into int16 then int32 lanes
 * times the int16 multipliers s16 (exact: see the file's head). */
NUMLA_A2_INLINE __m256i numla_qblock_a2_dot_(__m256i u, const int8_t *x, __m256i s16)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, numla_qblock_a2_ld_(x)), s16);
}

/* The same for signed codes w (au = |w|): x takes w's sign. */
NUMLA_A2_INLINE __m256i numla_qblock_a2_sdot_(__m256i au, __m256i w, const int8_t *x, __m256i s16)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(au, _mm256_sign_epi8(numla_qblock_a2_ld_(x), w)), s16);
}

/* A 16-byte pair of scale bytes into int16 multipliers: lanes 0-7 byte 2j, 8-15 byte 2j + 1
 * (the two 16-column groups of a 32-byte vector), sign-extended. */
NUMLA_A2_INLINE __m256i numla_qblock_a2_pair16_(__m128i bytes, int j)
{
    const __m128i idx = _mm_setr_epi8((char)(2 * j), (char)(2 * j), (char)(2 * j), (char)(2 * j), (char)(2 * j),
                                      (char)(2 * j), (char)(2 * j), (char)(2 * j), (char)(2 * j + 1),
                                      (char)(2 * j + 1), (char)(2 * j + 1), (char)(2 * j + 1), (char)(2 * j + 1),
                                      (char)(2 * j + 1), (char)(2 * j + 1), (char)(2 * j + 1));
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(bytes, idx));
}

/* Σ over a block's 16 groups of 16 columns of c_g · bs_g (bs the x row's per-16 code sums of the
 * block, c0 the constants of groups 0-7, c1 of 8-15, as int32 lanes). */
NUMLA_A2_INLINE __m256i numla_qblock_a2_bsum_(const int32_t *bs, __m256i c0, __m256i c1)
{
    return _mm256_add_epi32(_mm256_mullo_epi32(numla_qblock_a2_ld_(bs), c0),
                            _mm256_mullo_epi32(numla_qblock_a2_ld_(bs + 8), c1));
}

/* The kernels' signature: one weight row's units (256-column blocks, or 32-element blocks for
 * the 32-element types) [b0, b0 + nu), their bytes at `blk`, against mr x rows (xq, dx, bs at
 * the first row's; rows k, the groups and k / 16 apart), adding into acc (mr x 8 fp32 lanes). */
#define NUMLA_A2_ARGS                                                                                           \
    const uint8_t *blk, int64_t b0, int64_t nu, int mr, const int8_t *xq, int64_t k, const float *dx,           \
        const int32_t *bs, float *accp

#define NUMLA_A2_ACC_LOAD                                                                                       \
    __m256 acc[NUMLA_QBLOCK_AVX2_MR];                                                                           \
    for (int i = 0; i < mr; i++)                                                                                \
        acc[i] = _mm256_loadu_ps(accp + 8 * i);                                                                 \
    const int64_t ng = numla_qblock_q8_groups_(k), nb16 = k / 16;                                               \
    (void)nb16;                                                                                                 \
    (void)ng;                                                                                                   \
    (void)bs

#define NUMLA_A2_ACC_STORE                                                                                      \
    for (int i = 0; i < mr; i++)                                                                                \
        _mm256_storeu_ps(accp + 8 * i, acc[i])

/* Σ over a 256-column block's 8 sub-blocks of 32 (unsigned codes u[j], int16 multipliers s16[j])
 * against the x codes xb of the block, in int32 lanes, sub-block 0 first. */
NUMLA_A2_INLINE __m256i numla_qblock_a2_dot8_(const __m256i u[8], const int8_t *xb, const __m256i s16[8])
{
    __m256i iacc = numla_qblock_a2_dot_(u[0], xb, s16[0]);
    for (int j = 1; j < 8; j++)
        iacc = _mm256_add_epi32(iacc, numla_qblock_a2_dot_(u[j], xb + 32 * j, s16[j]));
    return iacc;
}

/* The x rows of a tile (their codes xq, scales dx and code sums bs at the first row's, as in
 * NUMLA_A2_ARGS) against 256-column block b of a type with mins (Q4_K, Q5_K, Q2_K): per row the
 * integer dot times d · dx in one fma, then Σ_g m_g bs_g (m per 16 columns: mv0 groups 0-7, mv1
 * 8-15) times dmin · dx taken off in a second. */
NUMLA_A2_INLINE void numla_qblock_a2_rows_min_(__m256 *acc, int mr, const __m256i u[8], const __m256i s16[8],
                                               __m256i mv0, __m256i mv1, float d, float dmin, const int8_t *xq,
                                               int64_t k, const float *dx, const int32_t *bs, int64_t b)
{
    const int64_t ng = numla_qblock_q8_groups_(k), nb16 = k / 16;
    for (int i = 0; i < mr; i++) {
        const __m256i iacc = numla_qblock_a2_dot8_(u, xq + i * k + 256 * b, s16);
        const float dxi = dx[i * ng + b];
        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc), _mm256_set1_ps(d * dxi), acc[i]);
        const __m256i mm = numla_qblock_a2_bsum_(bs + i * nb16 + 16 * b, mv0, mv1);
        acc[i] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mm), _mm256_set1_ps(dmin * dxi), acc[i]);
    }
}

/* The same for a type whose unsigned codes are its signed ones plus 2^sh (Q6_K: 32, Q3_K: 4) with
 * 16 signed int8 scales scb, one per 16 columns: s16[j] the scales of sub-block j's two groups,
 * 2^sh · Σ_g sc_g bs_g taken off in int32, then times d · dx in one fma. */
NUMLA_A2_INLINE void numla_qblock_a2_rows_off_(__m256 *acc, int mr, const __m256i u[8], __m128i scb, int sh,
                                               float d, const int8_t *xq, int64_t k, const float *dx,
                                               const int32_t *bs, int64_t b)
{
    const int64_t ng = numla_qblock_q8_groups_(k), nb16 = k / 16;
    __m256i s16[8];
    for (int j = 0; j < 8; j++)
        s16[j] = numla_qblock_a2_pair16_(scb, j);
    const __m256i sc0 = _mm256_cvtepi8_epi32(scb), sc1 = _mm256_cvtepi8_epi32(_mm_srli_si128(scb, 8));
    for (int i = 0; i < mr; i++) {
        __m256i iacc = numla_qblock_a2_dot8_(u, xq + i * k + 256 * b, s16);
        const __m256i off = numla_qblock_a2_bsum_(bs + i * nb16 + 16 * b, sc0, sc1);
        iacc = _mm256_sub_epi32(iacc, _mm256_slli_epi32(off, sh));
        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc), _mm256_set1_ps(d * dx[i * ng + b]), acc[i]);
    }
}

/* Q4_K and Q5_K's 12 bytes of 6-bit scales and mins at p: sc[j] in every int16 lane of s16[j],
 * the mins per 16 columns (m[g / 2] for group g) as int32 lanes, mv[0] groups 0-7, mv[1] 8-15. */
NUMLA_A2_INLINE void numla_qblock_a2_k4_scales_(const uint8_t *p, __m256i s16[8], __m256i mv[2])
{
    uint32_t s0, s1, s2;
    memcpy(&s0, p, 4);
    memcpy(&s1, p + 4, 4);
    memcpy(&s2, p + 8, 4);
    const uint32_t sc_lo = s0 & 0x3f3f3f3fu, m_lo = s1 & 0x3f3f3f3fu;
    const uint32_t sc_hi = (s2 & 0x0f0f0f0fu) | ((s0 >> 6) & 0x03030303u) << 4;
    const uint32_t m_hi = ((s2 >> 4) & 0x0f0f0f0fu) | ((s1 >> 6) & 0x03030303u) << 4;
    const __m128i smb = _mm_setr_epi32((int)sc_lo, (int)sc_hi, (int)m_lo, (int)m_hi); /* sc[8], m[8] */
    const __m256i smv = _mm256_broadcastsi128_si256(smb);
    for (int j = 0; j < 8; j++) /* sc[j] in every int16 lane */
        s16[j] = _mm256_shuffle_epi8(smv, _mm256_set1_epi16((short)(0x8000 | j)));
    const __m128i mb = _mm_srli_si128(smb, 8);
    mv[0] = _mm256_cvtepu8_epi32(_mm_unpacklo_epi8(mb, mb));
    mv[1] = _mm256_cvtepu8_epi32(_mm_srli_si128(_mm_unpacklo_epi8(mb, mb), 8));
}

/* Q4_K (five 0) and Q5_K (five 1): 8 sub-blocks of 32, 6-bit scale and min each; chunk c of qs
 * holds sub-blocks 2c (low nibbles) and 2c + 1 (high), in column order. Q5_K is Q4_K with the
 * fifth bit of element e (bit e / 32 of qh[e % 32]) as 16 in its byte. */
NUMLA_A2_INLINE void numla_qblock_a2_k45_(const int five, NUMLA_A2_ARGS)
{
    NUMLA_A2_ACC_LOAD;
    const __m256i m4 = _mm256_set1_epi8(15), b16 = _mm256_set1_epi8(16);
    const int bytes = five ? 176 : 144, qs = five ? 48 : 16;
    for (int64_t t = 0; t < nu; t++, blk += bytes) {
        __m256i u[8], s16[8], mv[2];
        numla_qblock_a2_k4_scales_(blk + 4, s16, mv);
        const __m256i qh = five ? numla_qblock_a2_ld_(blk + 16) : _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            const __m256i q = numla_qblock_a2_ld_(blk + qs + 32 * c);
            u[2 * c] = _mm256_and_si256(q, m4);
            u[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (five) {
                const __m256i ka = _mm256_set1_epi8((char)(1 << (2 * c))), kb = _mm256_set1_epi8((char)(2 << (2 * c)));
                u[2 * c] = _mm256_or_si256(u[2 * c],
                                           _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, ka), ka), b16));
                u[2 * c + 1] = _mm256_or_si256(u[2 * c + 1],
                                               _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, kb), kb), b16));
            }
        }
        numla_qblock_a2_rows_min_(acc, mr, u, s16, mv[0], mv[1], numla_qblock_a2_h_(blk), numla_qblock_a2_h_(blk + 2),
                                  xq, k, dx, bs, b0 + t);
    }
    NUMLA_A2_ACC_STORE;
}

NUMLA_A2_INLINE void numla_qblock_a2_q4_k_(NUMLA_A2_ARGS)
{
    numla_qblock_a2_k45_(0, blk, b0, nu, mr, xq, k, dx, bs, accp);
}
NUMLA_A2_INLINE void numla_qblock_a2_q5_k_(NUMLA_A2_ARGS)
{
    numla_qblock_a2_k45_(1, blk, b0, nu, mr, xq, k, dx, bs, accp);
}

/* Q6_K: the 6-bit codes as q + 32 (0 .. 63) in column order; 32 · Σ_g sc_g bs_g comes off in
 * int32. */
NUMLA_A2_INLINE void numla_qblock_a2_q6_k_(NUMLA_A2_ARGS)
{
    NUMLA_A2_ACC_LOAD;
    const __m256i m4 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
    for (int64_t t = 0; t < nu; t++, blk += 210) {
        const uint8_t *ql = blk, *qh = blk + 128;
        __m256i u[8];
        for (int h = 0; h < 2; h++) {
            const __m256i l0 = numla_qblock_a2_ld_(ql + 64 * h), l1 = numla_qblock_a2_ld_(ql + 64 * h + 32);
            const __m256i hb = numla_qblock_a2_ld_(qh + 32 * h);
            u[4 * h] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(hb, m3), 4));
            u[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m3), 4));
            u[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m3), 4));
            u[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m3), 4));
        }
        numla_qblock_a2_rows_off_(acc, mr, u, numla_qblock_a2_ld16_(blk + 192), 5, numla_qblock_a2_h_(blk + 208), xq, k,
                                  dx, bs, b0 + t);
    }
    NUMLA_A2_ACC_STORE;
}

/* Q2_K: 2-bit codes, element 128h + 32s + l bits 2s of qs[32h + l]; group g (16 columns): scale
 * scales[g] & 15, min scales[g] >> 4. */
NUMLA_A2_INLINE void numla_qblock_a2_q2_k_(NUMLA_A2_ARGS)
{
    NUMLA_A2_ACC_LOAD;
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i k15 = _mm_set1_epi8(15);
    for (int64_t t = 0; t < nu; t++, blk += 84) {
        const __m128i sv = numla_qblock_a2_ld16_(blk);
        const __m128i scb = _mm_and_si128(sv, k15), mb = _mm_and_si128(_mm_srli_epi16(sv, 4), k15);
        __m256i u[8], s16[8];
        for (int h = 0; h < 2; h++) {
            const __m256i q = numla_qblock_a2_ld_(blk + 16 + 32 * h);
            u[4 * h] = _mm256_and_si256(q, m3);
            u[4 * h + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 2), m3);
            u[4 * h + 2] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m3);
            u[4 * h + 3] = _mm256_and_si256(_mm256_srli_epi16(q, 6), m3);
        }
        for (int j = 0; j < 8; j++)
            s16[j] = numla_qblock_a2_pair16_(scb, j);
        const __m256i mv0 = _mm256_cvtepu8_epi32(mb), mv1 = _mm256_cvtepu8_epi32(_mm_srli_si128(mb, 8));
        numla_qblock_a2_rows_min_(acc, mr, u, s16, mv0, mv1, numla_qblock_a2_h_(blk + 80), numla_qblock_a2_h_(blk + 82),
                                  xq, k, dx, bs, b0 + t);
    }
    NUMLA_A2_ACC_STORE;
}

/* Q3_K: the unsigned code q + 4 is Q2_K's 2 bits with hmask's bit (element e: bit e / 32 of
 * hmask[e % 32]) as 4; 4 · Σ_g sc_g bs_g comes off in int32. The 16 signed 6-bit scales are
 * unpacked four to a 32-bit word. */
NUMLA_A2_INLINE void numla_qblock_a2_q3_k_(NUMLA_A2_ARGS)
{
    NUMLA_A2_ACC_LOAD;
    const __m256i m3 = _mm256_set1_epi8(3), b4 = _mm256_set1_epi8(4);
    for (int64_t t = 0; t < nu; t++, blk += 110) {
        uint32_t s0, s1, s2;
        memcpy(&s0, blk + 96, 4);
        memcpy(&s1, blk + 100, 4);
        memcpy(&s2, blk + 104, 4);
        const uint32_t w0 = (s0 & 0x0f0f0f0fu) | (s2 & 0x03030303u) << 4;
        const uint32_t w1 = (s1 & 0x0f0f0f0fu) | ((s2 >> 2) & 0x03030303u) << 4;
        const uint32_t w2 = ((s0 >> 4) & 0x0f0f0f0fu) | ((s2 >> 4) & 0x03030303u) << 4;
        const uint32_t w3 = ((s1 >> 4) & 0x0f0f0f0fu) | ((s2 >> 6) & 0x03030303u) << 4;
        const __m128i scb = _mm_sub_epi8(_mm_setr_epi32((int)w0, (int)w1, (int)w2, (int)w3), _mm_set1_epi8(32));
        const __m256i hm = numla_qblock_a2_ld_(blk);
        __m256i u[8];
        for (int h = 0; h < 2; h++) {
            const __m256i q = numla_qblock_a2_ld_(blk + 32 + 32 * h);
            for (int s = 0; s < 4; s++) {
                const __m256i kb = _mm256_set1_epi8((char)(1 << (4 * h + s)));
                const __m256i hb = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hm, kb), kb), b4);
                u[4 * h + s] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2 * s), m3), hb);
            }
        }
        numla_qblock_a2_rows_off_(acc, mr, u, scb, 2, numla_qblock_a2_h_(blk + 108), xq, k, dx, bs, b0 + t);
    }
    NUMLA_A2_ACC_STORE;
}

/* IQ4_XS: the code book's signed values (sign trick); sub-block j's scale ls - 32 multiplies its
 * pairs in vpmaddwd, d · dx the block's int32 lanes. */
NUMLA_A2_INLINE void numla_qblock_a2_iq4_xs_(NUMLA_A2_ARGS)
{
    NUMLA_A2_ACC_LOAD;
    const __m128i m4 = _mm_set1_epi8(15);
    const __m256i book = _mm256_broadcastsi128_si256(numla_qblock_a2_ld16_(numla_qblock_iq4_values));
    for (int64_t t = 0; t < nu; t++, blk += 136) {
        const int64_t b = b0 + t;
        uint16_t sh;
        uint32_t sl;
        memcpy(&sh, blk + 2, 2);
        memcpy(&sl, blk + 4, 4);
        __m256i w[8], au[8], s16[8];
        for (int j = 0; j < 8; j++) {
            const __m128i q = numla_qblock_a2_ld16_(blk + 8 + 16 * j);
            const __m256i nib = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
            w[j] = _mm256_shuffle_epi8(book, nib);
            au[j] = _mm256_abs_epi8(w[j]);
            s16[j] = _mm256_set1_epi16((short)((int)(((sl >> (4 * j)) & 15) | ((sh >> (2 * j)) & 3) << 4) - 32));
        }
        const float d = numla_qblock_a2_h_(blk);
        for (int i = 0; i < mr; i++) {
            const int8_t *xb = xq + i * k + 256 * b;
            __m256i iacc = numla_qblock_a2_sdot_(au[0], w[0], xb, s16[0]);
            for (int j = 1; j < 8; j++)
                iacc = _mm256_add_epi32(iacc, numla_qblock_a2_sdot_(au[j], w[j], xb + 32 * j, s16[j]));
            acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc), _mm256_set1_ps(d * dx[i * ng + b]), acc[i]);
        }
    }
    NUMLA_A2_ACC_STORE;
}

/* The 32-element types: block t's 32 codes as signed bytes in column order (Q8_0 as stored,
 * Q4_0 q - 8, Q5_0 q - 16, IQ4_NL and MXFP4 their code books) and its scale; Q5_1's unsigned
 * 5-bit codes (its m apart). */
NUMLA_A2_INLINE __m256i numla_qblock_a2_nib32_(const uint8_t *qs)
{
    const __m128i q = numla_qblock_a2_ld16_(qs), m4 = _mm_set1_epi8(15);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
}

/* Bit j of the 32-bit qh as 16 in byte j. */
NUMLA_A2_INLINE __m256i numla_qblock_a2_bit5_(const uint8_t *p)
{
    uint32_t qh;
    memcpy(&qh, p, 4);
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh),
                                               _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2,
                                                                2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(16));
}

NUMLA_A2_INLINE __m256i numla_qblock_a2_b32_codes_(numla_qblock_type type, const uint8_t *p, __m256i book)
{
    switch (type) {
    case NUMLA_QBLOCK_Q8_0: return numla_qblock_a2_ld_(p + 2);
    case NUMLA_QBLOCK_Q4_0: return _mm256_sub_epi8(numla_qblock_a2_nib32_(p + 2), _mm256_set1_epi8(8));
    case NUMLA_QBLOCK_Q5_0:
        return _mm256_sub_epi8(_mm256_or_si256(numla_qblock_a2_nib32_(p + 6), numla_qblock_a2_bit5_(p + 2)),
                               _mm256_set1_epi8(16));
    case NUMLA_QBLOCK_Q5_1: return _mm256_or_si256(numla_qblock_a2_nib32_(p + 8), numla_qblock_a2_bit5_(p + 4));
    case NUMLA_QBLOCK_MXFP4: return _mm256_shuffle_epi8(book, numla_qblock_a2_nib32_(p + 1));
    default: return _mm256_shuffle_epi8(book, numla_qblock_a2_nib32_(p + 2)); /* IQ4_NL */
    }
}

NUMLA_A2_INLINE void numla_qblock_a2_b32_(numla_qblock_type type, NUMLA_A2_ARGS)
{
    NUMLA_A2_ACC_LOAD;
    const int bytes = numla_qblock_type_row_get(type)->info.bytes;
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i book = _mm256_broadcastsi128_si256(
        numla_qblock_a2_ld16_(type == NUMLA_QBLOCK_MXFP4 ? numla_qblock_mxfp4_values : numla_qblock_iq4_values));
    for (int64_t t = 0; t < nu; t++, blk += bytes) {
        const int64_t b = b0 + t; /* the block's columns 32b .. 32b + 31, in x group b / 8 */
        const __m256i w = numla_qblock_a2_b32_codes_(type, blk, book);
        const float d = type == NUMLA_QBLOCK_MXFP4 ? numla_qblock_e8m0_half_(blk[0]) : numla_qblock_a2_h_(blk);
        if (type == NUMLA_QBLOCK_Q5_1) { /* d q + m: m · dx · Σ x in lane 0 */
            const float m = numla_qblock_a2_h_(blk + 2);
            for (int i = 0; i < mr; i++) {
                const float dxi = dx[i * ng + b / 8];
                const __m256i p = numla_qblock_a2_dot_(w, xq + i * k + 32 * b, ones);
                acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d * dxi), acc[i]);
                const int32_t *sb = bs + i * nb16 + 2 * b;
                const __m256 sx = _mm256_cvtepi32_ps(_mm256_setr_epi32(sb[0] + sb[1], 0, 0, 0, 0, 0, 0, 0));
                acc[i] = _mm256_fmadd_ps(sx, _mm256_set1_ps(m * dxi), acc[i]);
            }
            continue;
        }
        const __m256i au = _mm256_abs_epi8(w);
        for (int i = 0; i < mr; i++) {
            const __m256i p = numla_qblock_a2_sdot_(au, w, xq + i * k + 32 * b, ones);
            acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d * dx[i * ng + b / 8]), acc[i]);
        }
    }
    NUMLA_A2_ACC_STORE;
}

#define NUMLA_A2_B32(T, TYPE)                                                                                   \
    NUMLA_A2_INLINE void numla_qblock_a2_##T##_(NUMLA_A2_ARGS)                                                  \
    {                                                                                                           \
        numla_qblock_a2_b32_(TYPE, blk, b0, nu, mr, xq, k, dx, bs, accp);                                       \
    }
NUMLA_A2_B32(q8_0, NUMLA_QBLOCK_Q8_0)
NUMLA_A2_B32(q4_0, NUMLA_QBLOCK_Q4_0)
NUMLA_A2_B32(q5_0, NUMLA_QBLOCK_Q5_0)
NUMLA_A2_B32(q5_1, NUMLA_QBLOCK_Q5_1)
NUMLA_A2_B32(iq4_nl, NUMLA_QBLOCK_IQ4_NL)
NUMLA_A2_B32(mxfp4, NUMLA_QBLOCK_MXFP4)
#undef NUMLA_A2_B32

/* One entry per type, mr a constant in each tile height. */
#define NUMLA_A2_ENTRY(T)                                                                                       \
    void numla_qblock_q8_rows_##T##_avx2(NUMLA_A2_ARGS)                                                         \
    {                                                                                                           \
        switch (mr) {                                                                                           \
        case 1: numla_qblock_a2_##T##_(blk, b0, nu, 1, xq, k, dx, bs, accp); break;                             \
        case 2: numla_qblock_a2_##T##_(blk, b0, nu, 2, xq, k, dx, bs, accp); break;                             \
        case 3: numla_qblock_a2_##T##_(blk, b0, nu, 3, xq, k, dx, bs, accp); break;                             \
        default: numla_qblock_a2_##T##_(blk, b0, nu, NUMLA_QBLOCK_AVX2_MR, xq, k, dx, bs, accp); break;         \
        }                                                                                                       \
    }
NUMLA_A2_ENTRY(q4_k)
NUMLA_A2_ENTRY(q5_k)
NUMLA_A2_ENTRY(q6_k)
NUMLA_A2_ENTRY(q2_k)
NUMLA_A2_ENTRY(q3_k)
NUMLA_A2_ENTRY(iq4_xs)
NUMLA_A2_ENTRY(q8_0)
NUMLA_A2_ENTRY(q4_0)
NUMLA_A2_ENTRY(q5_0)
NUMLA_A2_ENTRY(q5_1)
NUMLA_A2_ENTRY(iq4_nl)
NUMLA_A2_ENTRY(mxfp4)
#undef NUMLA_A2_ENTRY
_Static_assert(NUMLA_QBLOCK_AVX2_MR == 4, "the tile heights above are 1 .. 4");

/* kernels/qblock.h's Q8 quantization of x group t (row t / ng, columns 256 (t % ng) ..), as
 * numla_qblock_quantize_rows_ does it and with the same bits: the same amax (a maximum is exact
 * in any order), the same fp32 quotients, the same fp32 product x · inv rounded half to even by
 * vroundps (its rounding in the instruction, whatever MXCSR says), 16 columns a step. */
static inline void numla_qblock_a2_quantize_group_(const float *x, int64_t ldx, int64_t k, int64_t ng, int64_t t,
                                                   int8_t *xq, float *dx, int32_t *bs)
{
    const int64_t i = t / ng, b = t % ng;
    const int len = k - 256 * b < 256 ? (int)(k - 256 * b) : 256; /* a multiple of 32 */
    const float *xb = x + i * ldx + 256 * b;
    int8_t *q = xq + i * k + 256 * b;
    int32_t *sb = bs + i * (k / 16) + 16 * b;
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 mx = _mm256_setzero_ps();
    for (int j = 0; j < len; j += 8)
        mx = _mm256_max_ps(mx, _mm256_and_ps(_mm256_loadu_ps(xb + j), absm));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    dx[i * ng + b] = amax > 0.0f ? amax / 127.0f : 0.0f;
    const __m256 vinv = _mm256_set1_ps(inv), lim = _mm256_set1_ps(127.0f), nlim = _mm256_set1_ps(-127.0f);
    for (int j = 0; j < len; j += 16) {
        __m256i qi[2];
        for (int h = 0; h < 2; h++) {
            __m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(xb + j + 8 * h), vinv),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            v = _mm256_min_ps(_mm256_max_ps(v, nlim), lim);
            qi[h] = _mm256_cvtps_epi32(v); /* integral already: exact */
        }
        /* int32 -> int16 (lanes interleaved by 128 bits, put back in order) -> int8 */
        const __m256i w16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(qi[0], qi[1]), 0xd8);
        _mm_storeu_si128((__m128i *)(void *)(q + j),
                         _mm_packs_epi16(_mm256_castsi256_si128(w16), _mm256_extracti128_si256(w16, 1)));
        const __m256i s8 = _mm256_add_epi32(qi[0], qi[1]);
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
        sb[j / 16] = _mm_cvtsi128_si32(_mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1)));
    }
}

void numla_qblock_avx2_quantize_(const float *x, int64_t ldx, int64_t m, int64_t k, void *ws)
{
    numla_qblock_quantize_team_(x, ldx, m, k, ws, numla_qblock_a2_quantize_group_);
}

/* One forward call's work after x is quantized. */
typedef struct numla_qblock_a2_job_ {
    const numla_qblock_weight *w;
    int64_t m, ldy;
    const int8_t *xq;
    const float *dx;
    const int32_t *bs;
    float *y;
    int accumulate;
    numla_qblock_q8_avx2_fn fn;
} numla_qblock_a2_job_;

/* Weight row r against x rows [i0, i0 + mr): its units from the stored rows, or from the panels a
 * 256-column group at a time in the file's bytes. */
static void numla_qblock_a2_row_(const numla_qblock_a2_job_ *j, int64_t r, int64_t i0, int mr, float *acc)
{
    const numla_qblock_weight *w = j->w;
    const numla_qblock_info *info = numla_qblock_info_get(w->type);
    const int64_t k = w->k, nu = k / info->block, ng = numla_qblock_q8_groups_(k);
    const int8_t *xq = j->xq + i0 * k;
    const float *dx = j->dx + i0 * ng;
    const int32_t *bs = j->bs + i0 * (k / 16);
    if (w->layout == NUMLA_QBLOCK_LAYOUT_ROWS) {
        j->fn(w->q + r * w->ld, 0, nu, mr, xq, k, dx, bs, acc);
        return;
    }
    uint8_t raw[8 * 34]; /* 8 blocks of a 32-element type, or one 256-element block */
    const int64_t per = 256 / info->block;
    for (int64_t u = 0; u < nu; u += per) {
        const int64_t cnt = nu - u < per ? nu - u : per;
        for (int64_t t = 0; t < cnt; t++)
            numla_qblock_p16_block_(w, r, u + t, raw + t * info->bytes);
        j->fn(raw, u, cnt, mr, xq, k, dx, bs, acc);
    }
}

/* Weight row r against x rows [i0, i0 + mr): their 8 lanes each summed into v. */
static inline void numla_qblock_a2_tile_(const void *job, int64_t r, int64_t i0, int mr, float *v)
{
    float acc[NUMLA_QBLOCK_AVX2_MR * 8] = {0};
    numla_qblock_a2_row_(job, r, i0, mr, acc);
    for (int i = 0; i < mr; i++)
        v[i] = numla_qblock_a2_hsum_(_mm256_loadu_ps(acc + 8 * i));
}

static void numla_qblock_a2_run_(const numla_qblock_a2_job_ *j, int ith, int nth)
{
    numla_qblock_avx2_walk_(j->w, j->m, j->y, j->ldy, j->accumulate, ith, nth, numla_qblock_a2_tile_, j);
}

void numla_qblock_forward_avx2(const numla_qblock_weight *w, int64_t m, const float *x, int64_t ldx, float *y,
                               int64_t ldy, int accumulate, void *ws, size_t ws_bytes)
{
    (void)ws_bytes;
    const int64_t k = w->k;
    numla_qblock_avx2_quantize_(x, ldx, m, k, ws);
    const numla_qblock_a2_job_ job = {
        .w = w, .m = m, .ldy = ldy, .xq = numla_qblock_ws_xq_(ws), .dx = numla_qblock_ws_dx_(ws, m, k),
        .bs = numla_qblock_ws_bs_(ws, m, k), .y = y, .accumulate = accumulate,
        .fn = numla_qblock_type_row_get(w->type)->q8_avx2,
    };
    /* one thread, or called on a thread of a team (a decode step's per-expert linears): here,
     * without a region of one thread */
    if (omp_get_max_threads() <= 1 || omp_in_parallel()) {
        numla_qblock_a2_run_(&job, 0, 1);
        return;
    }
#pragma omp parallel
    numla_qblock_a2_run_(&job, omp_get_thread_num(), omp_get_num_threads());
}
