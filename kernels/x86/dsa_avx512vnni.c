/* kernels/x86/dsa_avx512vnni.c — the DSA indexer's int8 scoring (I8 index-key cache,
 * kernels/dsa.h) with vpdpbusd (AVX512-VNNI), at the avx512 level when the CPU has the bit.
 *
 * Heads in lanes, as the float variants: the query's codes are packed once per query into
 * (Di/4, Hi) words, each lane one head's four codes q[h][4d .. 4d+3]; a key's four codes
 * k[4d .. 4d+3] are one 32-bit word of its cache row, broadcast to every lane straight from
 * memory, and one vpdpbusd adds four products to each of 16 heads: 64 multiply-adds an
 * instruction, twice vdpbf16ps's, on half the key bytes.
 *
 * vpdpbusd multiplies an unsigned byte by a signed one. The broadcast key word is the signed
 * operand (memory may only be that one), so the query's codes are stored biased, q + 128 (in
 * 1 .. 255), and Σ (q + 128) · k = Σ q · k + 128 · Σ k: -128 · Σ k (the key's code sum, which
 * the cache row carries) is added to the accumulators before the relu. Sums stay in int32 exactly (|Σ| <= 255 · 127 · Di).
 * Then relu, the conversion to fp32 (exact below 2^24), the weights (w · scale · sq[h]) and the
 * key's scale sk. Needs Hi % 16 == 0; other shapes run the int8 reference, whose codes and
 * integer sums are the same (only the fp32 head sum is grouped differently).
 */
#include "kernels/dsa_internal.h"

#include <immintrin.h>
#include <string.h>

#include "kernels/x86/dsa_hsum_avx512.h"

/* acc + Σ4 a (unsigned bytes) · b (signed bytes), per lane. Written as one instruction with the
 * accumulator tied: with the intrinsic, GCC 12 copied every accumulator through another
 * register (and some through the stack) on each step of the loop below. */
static inline __attribute__((always_inline)) __m512i numla_dsa_vn_dp(__m512i acc, __m512i a, __m512i b)
{
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
    return acc;
}

static int numla_dsa_index_vnni_supports(const void *args)
{
    const numla_dsa_index_args *a = args; /* VNNI itself: the entry's needs */
    return a->k_dtype == NUMLA_DTYPE_I8 && a->num_heads % 16 == 0 && a->head_dim % 4 == 0;
}

static size_t numla_dsa_index_vnni_packed(const numla_dsa_index_args *a)
{
    /* the biased words (Di/4, Hi), then one head's codes while packing */
    return (size_t)a->head_dim * (size_t)a->num_heads + (size_t)a->head_dim;
}

static size_t numla_dsa_index_vnni_scratch(const numla_dsa_index_args *a)
{
    return numla_dsa_key_row_bytes(NUMLA_DTYPE_I8, a->head_dim) + 64; /* one zero key row */
}

static void numla_dsa_index_vnni_prepare(const numla_dsa_index_args *a, const float *qt, float *ws,
                                         void *packed)
{
    const int32_t H = a->num_heads, D = a->head_dim;
    uint8_t *qp = packed; /* word (d4, h) at bytes 4 · (d4 · H + h) */
    int8_t *codes = (int8_t *)qp + (size_t)D * H;
    for (int32_t h = 0; h < H; h++) {
        ws[h] *= numla_dsa_quantize_row(qt + h, (size_t)H, D, codes, NULL);
        for (int32_t d = 0; d < D; d++)
            qp[4 * ((size_t)(d / 4) * H + h) + (size_t)(d % 4)] = (uint8_t)(codes[d] + 128);
    }
}

/* Integer dots of the 4 keys kr with nv head vectors starting at head vector v0, then relu,
 * fp32 and the weights into tot. Not inlined: inside the caller, GCC kept values of the
 * caller's live across the loop and spilled query vectors to the stack on every step. */
static __attribute__((noinline)) void
numla_dsa_vn_group(const uint32_t *qp, const int32_t *const kr[NUMLA_DSA_VN_KEYS],
                   const int32_t corr[NUMLA_DSA_VN_KEYS], int32_t D4, int32_t H, int32_t v0, int nv,
                   const float *ws, __m512 tot[NUMLA_DSA_VN_KEYS])
{
    __m512i acc[NUMLA_DSA_VN_KEYS][4];
#pragma GCC unroll 4
    for (int j = 0; j < NUMLA_DSA_VN_KEYS; j++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            acc[j][v] = _mm512_setzero_si512();
    for (int32_t d = 0; d < D4; d++) {
        const uint32_t *qd = qp + (size_t)d * H + (size_t)v0 * 16;
        __m512i qv[4];
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            qv[v] = _mm512_loadu_si512((const void *)(qd + 16 * v));
#pragma GCC unroll 4
        for (int j = 0; j < NUMLA_DSA_VN_KEYS; j++) {
            const __m512i kb = _mm512_set1_epi32(kr[j][d]);
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++)
                acc[j][v] = numla_dsa_vn_dp(acc[j][v], qv[v], kb);
        }
    }
    for (int v = 0; v < nv; v++) {
        const __m512 wv = _mm512_loadu_ps(ws + (size_t)(v0 + v) * 16);
        for (int j = 0; j < NUMLA_DSA_VN_KEYS; j++)
            tot[j] = _mm512_fmadd_ps(
                _mm512_cvtepi32_ps(_mm512_max_epi32(_mm512_add_epi32(acc[j][v], _mm512_set1_epi32(corr[j])),
                                                    _mm512_setzero_si512())),
                wv, tot[j]);
    }
}

static void numla_dsa_index_vnni_scores(const numla_dsa_index_args *a, const void *packed,
                                        const float *ws, int32_t seq, int64_t k0, int64_t k1,
                                        float *out, void *scratch)
{
    const int32_t H = a->num_heads, D = a->head_dim, D4 = D / 4, NV = H / 16;
    const uint32_t *qp = packed;
    char *zero = scratch; /* codes 0, scale 0, sum 0 */
    memset(zero, 0, numla_dsa_key_row_bytes(NUMLA_DTYPE_I8, D));
    for (int64_t t0 = k0; t0 < k1; t0 += NUMLA_DSA_VN_KEYS) {
        const int64_t nk = k1 - t0 < NUMLA_DSA_VN_KEYS ? k1 - t0 : NUMLA_DSA_VN_KEYS;
        numla_dsa_k_prefetch(a, seq, t0 + NUMLA_DSA_PREFETCH_KEYS, NUMLA_DSA_VN_KEYS);
        const char *rows[NUMLA_DSA_VN_KEYS];
        numla_dsa_k_rows(a, seq, t0, (int32_t)nk, rows);
        const int32_t *kr[NUMLA_DSA_VN_KEYS];
        int32_t corr[NUMLA_DSA_VN_KEYS];
        float sk[NUMLA_DSA_VN_KEYS];
        for (int64_t j = 0; j < NUMLA_DSA_VN_KEYS; j++) {
            const char *row = j < nk ? rows[j] : zero;
            kr[j] = (const int32_t *)(const void *)row;
            corr[j] = -128 * numla_dsa_i8_row_sum(row, D);
            sk[j] = numla_dsa_i8_row_scale(row, D);
        }
        __m512 tot[NUMLA_DSA_VN_KEYS];
        for (int j = 0; j < NUMLA_DSA_VN_KEYS; j++)
            tot[j] = _mm512_setzero_ps();
        int32_t v0 = 0;
        for (; v0 + 4 <= NV; v0 += 4)
            numla_dsa_vn_group(qp, kr, corr, D4, H, v0, 4, ws, tot);
        switch (NV - v0) {
        case 3: numla_dsa_vn_group(qp, kr, corr, D4, H, v0, 3, ws, tot); break;
        case 2: numla_dsa_vn_group(qp, kr, corr, D4, H, v0, 2, ws, tot); break;
        case 1: numla_dsa_vn_group(qp, kr, corr, D4, H, v0, 1, ws, tot); break;
        default: break;
        }
        float s4[4];
        _mm_storeu_ps(s4, _mm_mul_ps(numla_dsa_hsum4(tot[0], tot[1], tot[2], tot[3]),
                                     _mm_loadu_ps(sk)));
        for (int64_t j = 0; j < nk; j++)
            out[t0 + j - k0] = s4[j];
    }
}

const numla_dsa_index_kernel numla_dsa_index_kernel_i8_avx512vnni = {
    .v = {"i8-avx512vnni", NUMLA_CPU_VNNI, numla_dsa_index_vnni_supports},
    .prepare = numla_dsa_index_vnni_prepare,
    .packed_bytes = numla_dsa_index_vnni_packed,
    .scores = numla_dsa_index_vnni_scores,
    .scratch_bytes = numla_dsa_index_vnni_scratch,
};
