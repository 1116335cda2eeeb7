/* kernels/x86/qblock_avx512vnni.c — block-quantized linear layers in Q8 activation mode
 * (kernels/qblock.h) with vpdpbusd (AVX512-VNNI): Q4_K, Q6_K and Q8_0, the Q4_K_M set.
 *
 * The x rows are quantized first (numla_qblock_quantize_rows_, the scalar rule every level
 * shares) into int8 codes, a scale per 256 columns and the sum of the codes per 16 columns.
 * Then per weight row and x row, per 256-element block, the weight codes are laid out as 64
 * unsigned bytes in element order and multiplied into 16 int32 lanes by vpdpbusd; each lane
 * then covers 4 elements of one sub-block, so the sub-block scales multiply the lanes (vpmulld
 * with the scales permuted into place), and the block's int32 sum is converted once and
 * scaled by d · dx. Where the encoding subtracts something from every code (Q4_K's min, Q6_K's
 * 32, Q8_0's sign offset of 128), the term is the per-16 code sums of x times that constant,
 * summed apart and taken off at the end (exact in int32 up to the last scaling).
 *
 * Q8_0 codes are signed, vpdpbusd wants one operand unsigned: the weights get +128 (their
 * sign bit flipped) and 128 · Σ x q comes back out through the per-16 sums.
 *
 * Q4_K (6-bit scales, codes of 4 bits) goes through 16 bits instead: vpmaddubsw and then
 * vpdpwssd with the scales, which applies them and accumulates in one instruction; its x rows
 * are reordered once per call so that two code chunks load as one vector
 * (numla_qblock_vnni_q4_k_). Both forms are exact in int32, so the per-block integer is the same
 * number; the float sums of its lanes may round differently.
 *
 * Each x row runs alone (M > 1 decodes every block once per row; a many-row path is future
 * work, docs/quantization.md), so results do not depend on M or the thread count.
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

/* Σ over blocks of one Q4_K row · one quantized x row whose 32-column pieces were put in
 * numla_qblock_vnni_q4_k_order_'s order. Two 32-byte code chunks are loaded as one vector:
 * their low nibbles are sub-blocks 4p and 4p + 2, their high nibbles 4p + 1 and 4p + 3, which
 * is where the reordered x has them. vpmaddubsw multiplies codes and x into 16-bit pairs (at
 * most 2 · 15 · 127, no saturation), vpdpwssd multiplies those by the sub-block scales (as
 * 16-bit lanes picked from the block's scale bytes by vpshufb) and accumulates in int32: one
 * instruction applies the scales and adds, where dpbusd needed a permute, a multiply and an
 * add per 64 codes. */
static float numla_qblock_vnni_q4_k_(const uint8_t *row, int64_t nb, const int8_t *xq, const float *dx,
                                     const int32_t *bs)
{
    const __m512i m4 = _mm512_set1_epi8(15);
    /* 16-bit scale lanes: the low half of the vector from byte a of each 128-bit lane of the
     * scale vector, the high half from byte b (0x80 in the high byte zeroes it) */
#define NUMLA_Q4K_SEL(a, b)                                                                             \
    _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16((short)(0x8000 | (a))),                       \
                            _mm512_set1_epi16((short)(0x8000 | (b))))
    const __m512i sel[4] = {NUMLA_Q4K_SEL(0, 2), NUMLA_Q4K_SEL(1, 3), NUMLA_Q4K_SEL(4, 6),
                            NUMLA_Q4K_SEL(5, 7)};
#undef NUMLA_Q4K_SEL
    /* the mins (bytes 8-15 of each 128-bit lane) as 32-bit lanes, two per sub-block, to go with
     * the per-16 sums of x */
    const __m512i msel = _mm512_setr_epi32((int)0x80808008, (int)0x80808008, (int)0x80808009, (int)0x80808009,
                                           (int)0x8080800a, (int)0x8080800a, (int)0x8080800b, (int)0x8080800b,
                                           (int)0x8080800c, (int)0x8080800c, (int)0x8080800d, (int)0x8080800d,
                                           (int)0x8080800e, (int)0x8080800e, (int)0x8080800f, (int)0x8080800f);
    __m512 acc = _mm512_setzero_ps(), accm = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = row + 144 * b;
        /* the 6-bit scales and mins (kernels/qblock.h), four at a time in 32-bit words, then
         * widened in registers (a store and a wide reload would stall store forwarding) */
        uint32_t s0, s1, s2;
        memcpy(&s0, blk + 4, 4);
        memcpy(&s1, blk + 8, 4);
        memcpy(&s2, blk + 12, 4);
        const uint32_t sc_lo = s0 & 0x3f3f3f3fu, m_lo = s1 & 0x3f3f3f3fu;
        const uint32_t sc_hi = (s2 & 0x0f0f0f0fu) | ((s0 >> 6) & 0x03030303u) << 4;
        const uint32_t m_hi = ((s2 >> 4) & 0x0f0f0f0fu) | ((s1 >> 6) & 0x03030303u) << 4;
        const __m512i smv = _mm512_broadcast_i32x4(_mm_setr_epi32((int)sc_lo, (int)sc_hi, (int)m_lo, (int)m_hi));
        const int8_t *xb = xq + 256 * b;
        __m512i iacc = _mm512_setzero_si512();
#pragma GCC unroll 2
        for (int p = 0; p < 2; p++) {
            const __m512i q = _mm512_loadu_si512(blk + 16 + 64 * p);
            const __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
            const __m512i plo = _mm512_maddubs_epi16(lo, _mm512_loadu_si512(xb + 128 * p));
            const __m512i phi = _mm512_maddubs_epi16(hi, _mm512_loadu_si512(xb + 128 * p + 64));
            iacc = _mm512_dpwssd_epi32(iacc, plo, _mm512_shuffle_epi8(smv, sel[2 * p]));
            iacc = _mm512_dpwssd_epi32(iacc, phi, _mm512_shuffle_epi8(smv, sel[2 * p + 1]));
        }
        const float d = numla_qblock_vh_(blk) * dx[b], dmin = numla_qblock_vh_(blk + 2) * dx[b];
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc), _mm512_set1_ps(d), acc);
        const __m512i mm = _mm512_mullo_epi32(_mm512_loadu_si512(bs + 16 * b), _mm512_shuffle_epi8(smv, msel));
        accm = _mm512_fmadd_ps(_mm512_cvtepi32_ps(mm), _mm512_set1_ps(dmin), accm);
    }
    return _mm512_reduce_add_ps(acc) - _mm512_reduce_add_ps(accm);
}

/* Rows [0, m) of the quantized x (k columns) into the order numla_qblock_vnni_q4_k_ reads: in
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

/* Σ over blocks of one Q6_K row · one quantized x row. */
static float numla_qblock_vnni_q6_k_(const uint8_t *row, int64_t nb, const int8_t *xq, const float *dx,
                                     const int32_t *bs)
{
    const __m256i m4 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
    /* the 64 elements 128h + 64p + j: lane L holds group 8h + 4p + L/4 */
    const __m512i idx[4] = {
        _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
        _mm512_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7),
        _mm512_setr_epi32(8, 8, 8, 8, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11),
        _mm512_setr_epi32(12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15),
    };
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = row + 210 * b, *ql = blk, *qh = blk + 128;
        const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(blk + 192)));
        const int8_t *xb = xq + 256 * b;
        __m512i iacc = _mm512_setzero_si512();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)(const void *)(ql + 64 * h));
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(const void *)(ql + 64 * h + 32));
            const __m256i hb = _mm256_loadu_si256((const __m256i *)(const void *)(qh + 32 * h));
            const __m256i q0 = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(hb, m3), 4));
            const __m256i q1 = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m3), 4));
            const __m256i q2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m3), 4));
            const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m3), 4));
            const __m512i w0 = numla_qblock_join_(q0, q1), w1 = numla_qblock_join_(q2, q3);
            const __m512i d0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w0, _mm512_loadu_si512(xb + 128 * h));
            const __m512i d1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w1, _mm512_loadu_si512(xb + 128 * h + 64));
            iacc = _mm512_add_epi32(iacc, _mm512_mullo_epi32(d0, _mm512_permutexvar_epi32(idx[2 * h], sc)));
            iacc = _mm512_add_epi32(iacc, _mm512_mullo_epi32(d1, _mm512_permutexvar_epi32(idx[2 * h + 1], sc)));
        }
        /* the codes are q + 32: take 32 · Σ_g sc_g Σ_{e in g} x q_e back out */
        const __m512i off = _mm512_mullo_epi32(sc, _mm512_loadu_si512(bs + 16 * b));
        iacc = _mm512_sub_epi32(iacc, _mm512_slli_epi32(off, 5));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc), _mm512_set1_ps(numla_qblock_vh_(blk + 208) * dx[b]), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

/* Σ over 256-column steps of one Q8_0 row (8 blocks a step) · one quantized x row. */
static float numla_qblock_vnni_q8_0_(const uint8_t *row, int64_t nb, const int8_t *xq, const float *dx,
                                     const int32_t *bs)
{
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512 acc = _mm512_setzero_ps();
    __m128 corr = _mm_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = row + 8 * 34 * b;
        const int8_t *xb = xq + 256 * b;
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) {
            const uint8_t *pa = blk + 34 * (2 * u), *pb = pa + 34;
            const float da = numla_qblock_vh_(pa) * dx[b], db = numla_qblock_vh_(pb) * dx[b];
            const __m512i w = _mm512_xor_si512(
                numla_qblock_join_(_mm256_loadu_si256((const __m256i *)(const void *)(pa + 2)),
                                   _mm256_loadu_si256((const __m256i *)(const void *)(pb + 2))),
                flip);
            const __m512i dp = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, _mm512_loadu_si512(xb + 64 * u));
            const __m512 dv = _mm512_insertf32x8(_mm512_set1_ps(da), _mm256_set1_ps(db), 1);
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), dv, acc);
            /* the 4 per-16 sums of the two blocks' columns */
            const __m128 bsum = _mm_cvtepi32_ps(_mm_loadu_si128((const __m128i *)(const void *)(bs + 16 * b + 4 * u)));
            corr = _mm_fmadd_ps(bsum, _mm_setr_ps(da, da, db, db), corr);
        }
    }
    const __m128 c2 = _mm_add_ps(corr, _mm_movehl_ps(corr, corr));
    return _mm512_reduce_add_ps(acc) - 128.0f * _mm_cvtss_f32(_mm_add_ss(c2, _mm_shuffle_ps(c2, c2, 1)));
}

typedef float (*numla_qblock_vnni_dot_fn)(const uint8_t *row, int64_t nb, const int8_t *xq, const float *dx,
                                          const int32_t *bs);

void numla_qblock_forward_avx512vnni(const numla_qblock_weight *w, int64_t m, const float *x, int64_t ldx,
                                     float *y, int64_t ldy, int accumulate, void *ws, size_t ws_bytes)
{
    (void)ws_bytes;
    const numla_qblock_vnni_dot_fn dot = w->type == NUMLA_QBLOCK_Q4_K   ? numla_qblock_vnni_q4_k_
                                         : w->type == NUMLA_QBLOCK_Q6_K ? numla_qblock_vnni_q6_k_
                                                                        : numla_qblock_vnni_q8_0_;
    const int64_t k = w->k, nb = k / 256;
    numla_qblock_quantize_rows_(x, ldx, m, k, ws);
    if (w->type == NUMLA_QBLOCK_Q4_K)
        numla_qblock_vnni_q4_k_order_(numla_qblock_ws_xq_(ws), m, k);
    const int8_t *xq = numla_qblock_ws_xq_(ws);
    const float *dx = numla_qblock_ws_dx_(ws, m, k);
    const int32_t *bs = numla_qblock_ws_bs_(ws, m, k);
#pragma omp parallel
    {
        int64_t lo, hi;
        numla_qblock_split_(w->n, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
        for (int64_t r = lo; r < hi; r++)
            for (int64_t i = 0; i < m; i++) {
                const float v = dot(w->q + r * w->ld, nb, xq + i * k, dx + i * nb, bs + i * (k / 16));
                float *yo = y + i * ldy + r;
                *yo = accumulate ? *yo + v : v;
            }
    }
}
