/* kernels/x86/mha_prefill_avx2.c — mha_prefill, AVX2 + FMA variant (kernels/mha_prefill.h).
 *
 * The avx512 variant's plan (kernels/x86/mha_prefill_avx512.c) at 8 lanes with 16 registers,
 * over the same packing (the dispatcher's: Kt (Dqk, KB) per key block, zero-padded, then the
 * block's value rows) and the same blocking (QB queries per task, KB keys per online-softmax
 * step, kernels/blocking.h):
 *   1. scores in tiles of SR query rows × 16 keys (12 ymm accumulators fed by a broadcast
 *      q[r][d] and two Kt loads per d), one 16-key column of Kt (Dqk × 64 bytes, in L1) at a
 *      time for every row tile;
 *   2. online softmax per query row, masking keys past its causal limit; P = e^(S - m)
 *      (kernels/x86/exp_avx2.h) written over S, O and l rescaled by e^(m_old - m_new);
 *   3. O[i][:] += Σ_j P[i][j] · v_j, two query rows × up to 48 value dims (12 ymm) at a time.
 * A row's arithmetic depends only on its own query and the keys, never on the rows it shares a
 * task with (each accumulator holds one row). Dv must be a multiple of 8 (the entry's applies;
 * the reference runs the rest); Dqk is any width.
 */
#include "kernels/mha_prefill_internal.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/x86/exp_avx2.h"

#define QB NUMLA_MHA_PREFILL_QB
#define KB NUMLA_MHA_PREFILL_KB
#define SR 6 /* query rows per score tile */
#define PV 6 /* value vectors (8 dims each) per P·V tile */
#define INLINE static inline __attribute__((always_inline))

_Static_assert(KB % 16 == 0, "the score tiles are 16 keys wide");

int numla_mha_prefill_avx2_applies(const numla_mha_prefill_args *a) { return a->v_dim % 8 == 0; }

/* S[r][0..16) = Σ_{d < D} q_r[d] · Kt[d][0..16) for R query rows (R <= SR); Kt and S point at
 * the tile's first key. */
INLINE void scores_tile(const int R, const float *const *q, const float *Kt, int32_t D, float *S)
{
    __m256 acc[SR][2];
    for (int r = 0; r < R; r++)
        acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int32_t d = 0; d < D; d++) {
        const float *kt = Kt + (size_t)d * KB;
        const __m256 k0 = _mm256_load_ps(kt), k1 = _mm256_load_ps(kt + 8);
        for (int r = 0; r < R; r++) {
            const __m256 qv = _mm256_broadcast_ss(q[r] + d);
            acc[r][0] = _mm256_fmadd_ps(qv, k0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(qv, k1, acc[r][1]);
        }
    }
    for (int r = 0; r < R; r++) {
        _mm256_store_ps(S + (size_t)r * KB, acc[r][0]);
        _mm256_store_ps(S + (size_t)r * KB + 8, acc[r][1]);
    }
}

static void scores_block(const float *const *qrow, int32_t nq, const float *Kt, int32_t D,
                         float *S)
{
    for (int32_t c = 0; c < KB; c += 16) {
        int32_t i = 0;
        for (; i + SR <= nq; i += SR)
            scores_tile(SR, qrow + i, Kt + c, D, S + (size_t)i * KB + c);
        switch (nq - i) {
        case 5: scores_tile(5, qrow + i, Kt + c, D, S + (size_t)i * KB + c); break;
        case 4: scores_tile(4, qrow + i, Kt + c, D, S + (size_t)i * KB + c); break;
        case 3: scores_tile(3, qrow + i, Kt + c, D, S + (size_t)i * KB + c); break;
        case 2: scores_tile(2, qrow + i, Kt + c, D, S + (size_t)i * KB + c); break;
        case 1: scores_tile(1, qrow + i, Kt + c, D, S + (size_t)i * KB + c); break;
        default: break;
        }
    }
}

/* O[r][0 .. 8·NV) += Σ_{j < nk} P[r][j] · v_j[0 .. 8·NV) for R in {1, 2} rows (P rows KB apart,
 * O rows Dv apart, v rows vs apart). */
INLINE void pv_tile(const int R, const int NV, const float *P, const float *v, int64_t vs,
                    int32_t nk, float *O, int32_t Dv)
{
    __m256 acc[2][PV];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < NV; c++)
            acc[r][c] = _mm256_loadu_ps(O + (size_t)r * Dv + 8 * c);
    for (int32_t j = 0; j < nk; j++) {
        const float *vj = v + j * vs;
        const __m256 p0 = _mm256_broadcast_ss(P + j);
        const __m256 p1 = R > 1 ? _mm256_broadcast_ss(P + KB + j) : p0;
        for (int c = 0; c < NV; c++) {
            const __m256 vv = _mm256_loadu_ps(vj + 8 * c);
            acc[0][c] = _mm256_fmadd_ps(p0, vv, acc[0][c]);
            if (R > 1)
                acc[1][c] = _mm256_fmadd_ps(p1, vv, acc[1][c]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < NV; c++)
            _mm256_storeu_ps(O + (size_t)r * Dv + 8 * c, acc[r][c]);
}

/* pv_tile with R and NV as constants, so the accumulators stay in registers. */
INLINE void pv_tile_r(const int R, int NV, const float *P, const float *v, int64_t vs, int32_t nk,
                      float *O, int32_t Dv)
{
    switch (NV) {
    case 6: pv_tile(R, 6, P, v, vs, nk, O, Dv); break;
    case 5: pv_tile(R, 5, P, v, vs, nk, O, Dv); break;
    case 4: pv_tile(R, 4, P, v, vs, nk, O, Dv); break;
    case 3: pv_tile(R, 3, P, v, vs, nk, O, Dv); break;
    case 2: pv_tile(R, 2, P, v, vs, nk, O, Dv); break;
    default: pv_tile(R, 1, P, v, vs, nk, O, Dv); break;
    }
}

static void pv_block(const float *S, int32_t nq, const float *v, int64_t vs, int32_t nk, float *O,
                     int32_t Dv)
{
    for (int32_t c0 = 0; c0 < Dv; c0 += 8 * PV) {
        const int NV = (Dv - c0) >= 8 * PV ? PV : (Dv - c0) / 8;
        int32_t i = 0;
        for (; i + 2 <= nq; i += 2)
            pv_tile_r(2, NV, S + (size_t)i * KB, v + c0, vs, nk, O + (size_t)i * Dv + c0, Dv);
        if (i < nq)
            pv_tile_r(1, NV, S + (size_t)i * KB, v + c0, vs, nk, O + (size_t)i * Dv + c0, Dv);
    }
}

static inline float hmax8(__m256 x)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

static inline float hsum8(__m256 x)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

void numla_mha_prefill_avx2(const numla_mha_prefill_args *a, int32_t b, int32_t h, int32_t i0,
                            int32_t i1, float *scratch, const float *kt)
{
    const int32_t D = a->qk_dim, Dv = a->v_dim, P = a->prefix[b], nq = i1 - i0;
    float *S = scratch;             /* (QB, KB) */
    float *O = S + (size_t)QB * KB; /* (QB, Dv) */
    float *mrow = O + (size_t)QB * Dv, *lrow = mrow + QB;
    memset(O, 0, (size_t)nq * Dv * sizeof *O);
    for (int32_t i = 0; i < nq; i++) {
        mrow[i] = -INFINITY;
        lrow[i] = 0;
    }
    const float *qrow[QB] = {0}; /* rows past nq: never read */
    for (int32_t i = 0; i < nq; i++)
        qrow[i] = a->q + ((int64_t)a->q_start[b] + i0 + i) * a->q_stride + (int64_t)h * D;
    const int32_t nkeys = P + i1; /* the last query's limit, exclusive */
    const __m256 scale = _mm256_set1_ps(a->scale), ninf = _mm256_set1_ps(-INFINITY);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int32_t j0 = 0; j0 < nkeys; j0 += KB) {
        const int32_t kb = nkeys - j0 < KB ? nkeys - j0 : KB;
        const float *Kt = kt + (size_t)(j0 / KB) * numla_mha_prefill_kv_block_floats(a);
        /* 1. scores against the pre-transposed block */
        scores_block(qrow, nq, Kt, D, S);
        /* 2. online softmax; key j0 + j is visible to query row i iff j0 + j <= P + i0 + i */
        for (int32_t i = 0; i < nq; i++) {
            float *s = S + (size_t)i * KB;
            int32_t lim = P + i0 + i - j0 + 1; /* visible keys of this block */
            if (lim <= 0) { /* nothing visible in this block: zero P, keep m and l */
                memset(s, 0, KB * sizeof *s);
                continue;
            }
            if (lim > kb)
                lim = kb;
            const __m256i limv = _mm256_set1_epi32(lim);
            __m256 sv[KB / 8];
            __m256 mx = ninf;
            for (int c = 0; c < KB / 8; c++) {
                const __m256i idx = _mm256_add_epi32(lane, _mm256_set1_epi32(8 * c));
                const __m256 vis = _mm256_castsi256_ps(_mm256_cmpgt_epi32(limv, idx));
                sv[c] = _mm256_blendv_ps(ninf, _mm256_mul_ps(_mm256_load_ps(s + 8 * c), scale), vis);
                mx = _mm256_max_ps(mx, sv[c]);
            }
            const float bm = hmax8(mx);
            const float mnew = bm > mrow[i] ? bm : mrow[i];
            const float corr = expf(mrow[i] - mnew);
            const __m256 mv = _mm256_set1_ps(mnew);
            __m256 sum = _mm256_setzero_ps();
            for (int c = 0; c < KB / 8; c++) {
                const __m256 p = numla_exp256(_mm256_sub_ps(sv[c], mv));
                sum = _mm256_add_ps(sum, p);
                _mm256_store_ps(s + 8 * c, p);
            }
            lrow[i] = lrow[i] * corr + hsum8(sum);
            mrow[i] = mnew;
            if (corr != 1.0f) {
                float *o = O + (size_t)i * Dv;
                const __m256 cv = _mm256_set1_ps(corr);
                for (int32_t d = 0; d < Dv; d += 8)
                    _mm256_storeu_ps(o + d, _mm256_mul_ps(cv, _mm256_loadu_ps(o + d)));
            }
        }
        /* 3. O += P · V over the block's kb value rows */
        pv_block(S, nq, Kt + (size_t)D * KB, Dv, kb, O, Dv);
    }
    for (int32_t i = 0; i < nq; i++) {
        const int64_t qr = (int64_t)a->q_start[b] + i0 + i;
        float *o = a->out + qr * a->out_stride + (int64_t)h * Dv;
        const __m256 inv = _mm256_set1_ps(1.0f / lrow[i]);
        for (int32_t d = 0; d < Dv; d += 8)
            _mm256_storeu_ps(o + d, _mm256_mul_ps(inv, _mm256_loadu_ps(O + (size_t)i * Dv + d)));
        if (a->lse)
            a->lse[qr * a->num_heads + h] = mrow[i] + logf(lrow[i]);
    }
}
