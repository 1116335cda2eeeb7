/* kernels/x86/sink_attn_avx2.c — AVX2+FMA sink attention (kernels/sink_attn.h): one item is a
 * query and up to 16 of its heads, the plan of the MLA avx2 chunk kernel
 * (kernels/x86/mla_attn_avx2.c) at 8 lanes over row pointers. The query's rows (window, then
 * listed rows) go in tiles of NUMLA_MLA_AVX2_KT; per tile:
 *   1. scores with lanes along the heads: each row element is broadcast once into FMAs against
 *      q packed (D, 16 heads), two ymm of scores per row (one when the item has <= 8 heads);
 *   2. the online softmax on the tile (the e^x of kernels/x86/exp_avx2.h), its running maximum
 *      starting at each head's sink with weight 1 (e^(sink - sink)), so the sink dilutes
 *      without a value;
 *   3. O[h][d] += Σ_i P[i][h] · row_i[d], lanes along d, register blocks of 4 heads × 16 values.
 * bf16 rows (the kind NUMLA_SINK_ATTN_BF16) are widened exactly to fp32 once per tile into the
 * scratch and both steps read the widened copy; fp32 rows are read in place.
 * Per (query, head) the arithmetic is one lane's sequence (Q·K over d, P·V over the rows in
 * order), the same whatever the item's other heads or the call's other queries are. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/blocking.h"
#include "kernels/sink_attn_internal.h"
#include "kernels/x86/mla_attn_avx2_internal.h"
#include "kernels/x86/exp_avx2.h"

#define NUMLA_SINK_AVX2_INLINE static inline __attribute__((always_inline))

/* O[h0 + h][d] = (fresh ? 0 : O · corr[h0 + h] where rescale) + Σ_i P[16·i + h0 + h] · rows[i][d]
 * for NH (1..4) heads, 16 values of d at a time (D % 16 == 0). */
NUMLA_SINK_AVX2_INLINE void numla_sink_attn_avx2_pv(float *O, int64_t D, int h0, const float *P,
                                                    const float *corr, int fresh, int rescale,
                                                    const float *const *rows, int64_t nt,
                                                    const int NH)
{
    for (int64_t d = 0; d < D; d += 16) {
        __m256 o[4][2];
        for (int h = 0; h < NH; h++)
            for (int k = 0; k < 2; k++) {
                if (fresh) {
                    o[h][k] = _mm256_setzero_ps();
                } else {
                    o[h][k] = _mm256_load_ps(O + (h0 + h) * D + d + 8 * k);
                    if (rescale)
                        o[h][k] = _mm256_mul_ps(o[h][k], _mm256_set1_ps(corr[h0 + h]));
                }
            }
        for (int64_t i = 0; i < nt; i++) {
            const __m256 v0 = _mm256_loadu_ps(rows[i] + d), v1 = _mm256_loadu_ps(rows[i] + d + 8);
            const float *pi = P + 16 * i + h0;
            for (int h = 0; h < NH; h++) {
                const __m256 p = _mm256_broadcast_ss(pi + h);
                o[h][0] = _mm256_fmadd_ps(p, v0, o[h][0]);
                o[h][1] = _mm256_fmadd_ps(p, v1, o[h][1]);
            }
        }
        for (int h = 0; h < NH; h++)
            for (int k = 0; k < 2; k++)
                _mm256_store_ps(O + (h0 + h) * D + d + 8 * k, o[h][k]);
    }
}

/* Scratch offsets: q packed (D, 16), scores (KT, 16), KT row pointers, O (16, D), and for bf16
 * rows the tile's widened rows (KT, D). */
typedef struct numla_sink_attn_avx2_layout {
    size_t qt, S, rows, O, tile, total;
} numla_sink_attn_avx2_layout;

static size_t numla_sink_attn_avx2_a64(size_t n) { return (n + 63) & ~(size_t)63; }

static numla_sink_attn_avx2_layout numla_sink_attn_avx2_layout_of(const numla_sink_attn_args *a,
                                                                  int bf16)
{
    const size_t D = (size_t)a->head_dim;
    numla_sink_attn_avx2_layout L;
    L.qt = 0;
    L.S = L.qt + numla_sink_attn_avx2_a64(D * 16 * sizeof(float));
    L.rows = L.S + NUMLA_MLA_AVX2_KT * 16 * sizeof(float);
    L.O = L.rows + numla_sink_attn_avx2_a64(NUMLA_MLA_AVX2_KT * sizeof(void *));
    L.tile = L.O + 16 * D * sizeof(float);
    L.total = L.tile + (bf16 ? NUMLA_MLA_AVX2_KT * D * sizeof(float) : 0);
    return L;
}

static size_t numla_sink_attn_avx2_scratch(const numla_sink_attn_args *a)
{
    return numla_sink_attn_avx2_layout_of(a, 0).total;
}

static size_t numla_sink_attn_avx2_scratch_bf16(const numla_sink_attn_args *a)
{
    return numla_sink_attn_avx2_layout_of(a, 1).total;
}

static int numla_sink_attn_avx2_applies(const void *call)
{
    const numla_sink_attn_args *a = call;
    return a->head_dim % 16 == 0;
}

/* One item over fp32 (bf16 0) or bf16 (bf16 1) rows. */
NUMLA_SINK_AVX2_INLINE void numla_sink_attn_avx2_rows(const numla_sink_attn_args *a, int64_t t,
                                                      int32_t h0, int32_t nh, void *scratch,
                                                      const int bf16)
{
    const int64_t D = a->head_dim, H = a->num_heads;
    const int64_t n = (int64_t)a->win_len[t] + a->ent_len[t];
    const numla_sink_attn_avx2_layout L = numla_sink_attn_avx2_layout_of(a, bf16);
    char *s = scratch;
    float *qt = (float *)(void *)(s + L.qt), *S = (float *)(void *)(s + L.S);
    const float **rows = (const float **)(void *)(s + L.rows);
    float *O = (float *)(void *)(s + L.O), *tile = (float *)(void *)(s + L.tile);
    if (n == 0) { /* no row: zeros */
        for (int32_t r = 0; r < nh; r++)
            memset(a->out + (t * H + h0 + r) * D, 0, sizeof(float) * (size_t)D);
        return;
    }
    memset(qt, 0, sizeof(float) * (size_t)(D * 16));
    for (int32_t r = 0; r < nh; r++) {
        const float *q = a->q + (t * H + h0 + r) * D;
        for (int64_t d = 0; d < D; d++)
            qt[d * 16 + r] = q[d];
    }
    float mo[16] __attribute__((aligned(32))) = {0}, lo[16] __attribute__((aligned(32)));
    float corr[16] __attribute__((aligned(32)));
    for (int32_t r = 0; r < nh; r++)
        mo[r] = a->sink[h0 + r]; /* lanes past nh: sink 0, scores 0 (q is zero there) */
    for (int r = 0; r < 16; r++)
        lo[r] = 1.0f;
    const __m256 scale = _mm256_set1_ps(a->scale);
    const int hv2 = nh > 8;
    int fresh = 1;
    for (int64_t t0 = 0; t0 < n; t0 += NUMLA_MLA_AVX2_KT) {
        const int64_t nt = n - t0 < NUMLA_MLA_AVX2_KT ? n - t0 : NUMLA_MLA_AVX2_KT;
        for (int64_t i = 0; i < nt; i++) {
            const char *r = numla_sink_attn_row(a, t, t0 + i, bf16 ? 2 : 4);
            if (!bf16) {
                rows[i] = (const float *)(const void *)r;
                continue;
            }
            float *dst = tile + i * D;
            const uint16_t *src = (const uint16_t *)(const void *)r;
            for (int64_t d = 0; d < D; d += 8) {
                const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(src + d));
                _mm256_store_ps(dst + d, _mm256_castsi256_ps(
                                             _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
            }
            rows[i] = dst;
        }
        /* 1. scores */
        int64_t i = 0;
        if (hv2) {
            for (; i + 4 <= nt; i += 4)
                numla_mla_avx2_qk(qt, D, rows + i, S + 16 * i, 4, 2);
            for (; i < nt; i++)
                numla_mla_avx2_qk(qt, D, rows + i, S + 16 * i, 1, 2);
        } else {
            for (; i + 8 <= nt; i += 8)
                numla_mla_avx2_qk(qt, D, rows + i, S + 16 * i, 8, 1);
            for (; i < nt; i++)
                numla_mla_avx2_qk(qt, D, rows + i, S + 16 * i, 1, 1);
        }
        /* 2. online softmax (finite throughout: the maximum starts at the sink) */
        int rescale = 0;
        for (int hh = 0; hh < 1 + hv2; hh++) {
            __m256 tmax = _mm256_set1_ps(-INFINITY);
            for (int64_t k = 0; k < nt; k++) {
                const __m256 sk = _mm256_mul_ps(_mm256_load_ps(S + 16 * k + 8 * hh), scale);
                _mm256_store_ps(S + 16 * k + 8 * hh, sk);
                tmax = _mm256_max_ps(tmax, sk);
            }
            const __m256 mv = _mm256_load_ps(mo + 8 * hh), mnew = _mm256_max_ps(mv, tmax);
            const __m256 cv = numla_exp256(_mm256_sub_ps(mv, mnew));
            rescale |= _mm256_movemask_ps(_mm256_cmp_ps(cv, _mm256_set1_ps(1.0f), _CMP_NEQ_UQ));
            __m256 psum = _mm256_setzero_ps();
            for (int64_t k = 0; k < nt; k++) {
                const __m256 p =
                    numla_exp256(_mm256_sub_ps(_mm256_load_ps(S + 16 * k + 8 * hh), mnew));
                _mm256_store_ps(S + 16 * k + 8 * hh, p);
                psum = _mm256_add_ps(psum, p);
            }
            _mm256_store_ps(corr + 8 * hh, cv);
            _mm256_store_ps(lo + 8 * hh, _mm256_fmadd_ps(_mm256_load_ps(lo + 8 * hh), cv, psum));
            _mm256_store_ps(mo + 8 * hh, mnew);
        }
        /* 3. P·V, the item's heads in blocks of 4 */
        int hb = 0;
        for (; hb + 4 <= nh; hb += 4)
            numla_sink_attn_avx2_pv(O, D, hb, S, corr, fresh, rescale, rows, nt, 4);
        switch (nh - hb) {
        case 3:
            numla_sink_attn_avx2_pv(O, D, hb, S, corr, fresh, rescale, rows, nt, 3);
            break;
        case 2:
            numla_sink_attn_avx2_pv(O, D, hb, S, corr, fresh, rescale, rows, nt, 2);
            break;
        case 1:
            numla_sink_attn_avx2_pv(O, D, hb, S, corr, fresh, rescale, rows, nt, 1);
            break;
        default:
            break;
        }
        fresh = 0;
    }
    for (int32_t r = 0; r < nh; r++) {
        float *o = a->out + (t * H + h0 + r) * D;
        const __m256 inv = _mm256_set1_ps(1.0f / lo[r]);
        for (int64_t d = 0; d < D; d += 8)
            _mm256_storeu_ps(o + d, _mm256_mul_ps(_mm256_load_ps(O + r * D + d), inv));
    }
}

static void numla_sink_attn_avx2_item(const numla_sink_attn_args *a, int64_t t, int32_t h0,
                                      int32_t nh, void *scratch)
{
    numla_sink_attn_avx2_rows(a, t, h0, nh, scratch, 0);
}

static void numla_sink_attn_avx2_item_bf16(const numla_sink_attn_args *a, int64_t t, int32_t h0,
                                           int32_t nh, void *scratch)
{
    numla_sink_attn_avx2_rows(a, t, h0, nh, scratch, 1);
}

const numla_sink_attn_kernel numla_sink_attn_kernel_avx2 = {
    .v = {"avx2", 0, numla_sink_attn_avx2_applies},
    .item = numla_sink_attn_avx2_item,
    .scratch_bytes = numla_sink_attn_avx2_scratch,
};

const numla_sink_attn_kernel numla_sink_attn_kernel_avx2_bf16 = {
    .v = {"avx2_bf16", 0, numla_sink_attn_avx2_applies},
    .item = numla_sink_attn_avx2_item_bf16,
    .scratch_bytes = numla_sink_attn_avx2_scratch_bf16,
};
