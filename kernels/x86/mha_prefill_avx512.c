/* kernels/x86/mha_prefill_avx512.c — mha_prefill, AVX-512 variant (kernels/mha_prefill.h).
 *
 * One task = up to QB queries of one (sequence, head). Keys go in blocks of KB:
 *   1. with the block's K transposed to Kt[d][KB] (done once per (sequence, head) by the
 *      dispatcher, zero-padded), scores of 4 queries × 64 keys are 16 zmm accumulators fed
 *      by a broadcast q[i][d] and four Kt row loads per d;
 *   2. online softmax per query row (masking keys past its causal limit), P = e^(S - m)
 *      written over S, O and l rescaled by e^(m_old - m_new);
 *   3. O[i][:] += Σ_j P[i][j] · v_j, two query rows × Dv (8 zmm at 128) at a time, from the
 *      block's values packed contiguously by the dispatcher.
 * O lives in the thread's scratch between key blocks. Dv must be a multiple of 16 (otherwise
 * the reference runs). The AMX form (numla_mha_prefill_avx512_amx, picked by the dispatcher at
 * the amx level) does steps 1 and 3 on tiles (kernels/x86/mha_prefill_amx.c) and shares step 2.
 */
#include "kernels/mha_prefill_internal.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/x86/amx.h"
#include "kernels/x86/exp_avx512.h"
#include "kernels/x86/mha_prefill_amx.h"

#define QB NUMLA_MHA_PREFILL_QB
#define KB NUMLA_MHA_PREFILL_KB
#define DC 64 /* query/key dims per score pass: a 16 KiB slice of Kt */
#define INLINE static inline __attribute__((always_inline))


/* S[r][0..KB) (+)= Σ_{d in [d0, d1)} q_r[d] · Kt[d][..] for R query rows (R <= 4). */
INLINE void scores_rows(int R, const float *const *q, const float *Kt, int32_t d0, int32_t d1,
                        int acc_in, float *S)
{
    __m512 acc[4][4];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < 4; c++)
            acc[r][c] = acc_in ? _mm512_load_ps(S + (size_t)r * KB + 16 * c) : _mm512_setzero_ps();
    for (int32_t d = d0; d < d1; d++) {
        const float *kt = Kt + (size_t)d * KB;
        __m512 k0 = _mm512_load_ps(kt), k1 = _mm512_load_ps(kt + 16);
        __m512 k2 = _mm512_load_ps(kt + 32), k3 = _mm512_load_ps(kt + 48);
        for (int r = 0; r < R; r++) {
            __m512 qv = _mm512_set1_ps(q[r][d]);
            acc[r][0] = _mm512_fmadd_ps(qv, k0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(qv, k1, acc[r][1]);
            acc[r][2] = _mm512_fmadd_ps(qv, k2, acc[r][2]);
            acc[r][3] = _mm512_fmadd_ps(qv, k3, acc[r][3]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < 4; c++)
            _mm512_store_ps(S + (size_t)r * KB + 16 * c, acc[r][c]);
}

/* O[r][:] += Σ_j P[r][j] · v_j over nk keys, R in {1, 2} rows, Dv = 16·NV (NV <= 8) at a time. */
INLINE void pv_rows(int R, int NV, const float *P, const float *v, int64_t vs, int32_t nk,
                    float *O, int32_t Dv)
{
    __m512 acc[2][8];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < NV; c++)
            acc[r][c] = _mm512_loadu_ps(O + (size_t)r * Dv + 16 * c);
    for (int32_t j = 0; j < nk; j++) {
        const float *vj = v + j * vs;
        __m512 p0 = _mm512_set1_ps(P[j]);
        __m512 p1 = R > 1 ? _mm512_set1_ps(P[KB + j]) : p0;
        for (int c = 0; c < NV; c++) {
            __m512 vv = _mm512_loadu_ps(vj + 16 * c);
            acc[0][c] = _mm512_fmadd_ps(p0, vv, acc[0][c]);
            if (R > 1)
                acc[1][c] = _mm512_fmadd_ps(p1, vv, acc[1][c]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < NV; c++)
            _mm512_storeu_ps(O + (size_t)r * Dv + 16 * c, acc[r][c]);
}

static void pv_block(const float *S, int32_t nq, const float *v, int64_t vs, int32_t nk, float *O,
                     int32_t Dv)
{
    for (int32_t c0 = 0; c0 < Dv; c0 += 128) {
        const int NV = (Dv - c0) >= 128 ? 8 : (Dv - c0) / 16;
        int32_t i = 0;
        for (; i + 2 <= nq; i += 2)
            pv_rows(2, NV, S + (size_t)i * KB, v + c0, vs, nk, O + (size_t)i * Dv + c0, Dv);
        if (i < nq)
            pv_rows(1, NV, S + (size_t)i * KB, v + c0, vs, nk, O + (size_t)i * Dv + c0, Dv);
    }
}

/* One task; amx: Q·Kᵀ and P·V on AMX tiles over the dispatcher's split-bf16 key and value tiles
 * (kernels/x86/mha_prefill_amx.h), else fp32 FMA over the transposed keys and value rows. */
INLINE void task(const numla_mha_prefill_args *a, int32_t b, int32_t h, int32_t i0, int32_t i1,
                 float *scratch, const float *kt, const int amx)
{
    const int32_t D = a->qk_dim, Dv = a->v_dim, P = a->prefix[b], nq = i1 - i0;
    if (Dv % 16 != 0) {
        numla_mha_prefill_ref(a, b, h, i0, i1, scratch, kt);
        return;
    }
    float *S = scratch;                         /* (QB, KB) */
    float *O = S + (size_t)QB * KB;             /* (QB, Dv) */
    float *mrow = O + (size_t)QB * Dv, *lrow = mrow + QB;
    /* (QB, Dqk, hi/lo) bf16, 64-byte aligned */
    uint16_t *qp = (uint16_t *)(((uintptr_t)(lrow + QB) + 63) & ~(uintptr_t)63);
    uint16_t *pp = qp + (size_t)QB * D * 2; /* (QB, KB, hi/lo) bf16 */
    memset(O, 0, (size_t)nq * Dv * sizeof *O);
    for (int32_t i = 0; i < nq; i++) {
        mrow[i] = -INFINITY;
        lrow[i] = 0;
    }
    const float *qrow[QB] = {0}; /* rows past nq: never read */
    for (int32_t i = 0; i < nq; i++)
        qrow[i] = a->q + ((int64_t)a->q_start[b] + i0 + i) * a->q_stride + (int64_t)h * D;
    const int32_t nkeys = P + i1; /* the last query's limit, exclusive */
    const __m512 scale = _mm512_set1_ps(a->scale);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    if (amx) {
        numla_mha_prefill_pack_q_amx(qrow, nq, D, qp);
        numla_amx_tiles_begin();
    }
    for (int32_t j0 = 0; j0 < nkeys; j0 += KB) {
        const int32_t kb = nkeys - j0 < KB ? nkeys - j0 : KB;
        /* 1. scores against the pre-transposed block (or its AMX tiles) */
        const float *Kt = kt + (size_t)(j0 / KB) * numla_mha_prefill_kv_block_floats(a);
        if (amx)
            numla_mha_prefill_scores_amx(qp, nq, D, (const uint16_t *)(const void *)Kt, S);
        /* dims in slices of DC so the slice of Kt (DC × KB) stays in L1 for all rows */
        int32_t i = 0;
        for (int32_t d0 = 0; d0 < D && !amx; d0 += DC) {
            const int32_t d1 = D - d0 < DC ? D : d0 + DC;
            for (i = 0; i + 4 <= nq; i += 4)
                scores_rows(4, qrow + i, Kt, d0, d1, d0 > 0, S + (size_t)i * KB);
            if (i < nq)
                scores_rows(nq - i, qrow + i, Kt, d0, d1, d0 > 0, S + (size_t)i * KB);
        }
        /* 2. online softmax; key j0 + j is visible to query row i iff j0 + j <= P + i0 + i */
        for (i = 0; i < nq; i++) {
            float *s = S + (size_t)i * KB;
            int32_t lim = P + i0 + i - j0 + 1; /* visible keys of this block */
            if (lim > kb)
                lim = kb;
            __m512 sv[4];
            __m512 mx = _mm512_set1_ps(-INFINITY);
            for (int c = 0; c < 4; c++) {
                __m512i idx = _mm512_add_epi32(lane, _mm512_set1_epi32(16 * c));
                __mmask16 vis = _mm512_cmplt_epi32_mask(idx, _mm512_set1_epi32(lim));
                sv[c] = _mm512_mask_mul_ps(_mm512_set1_ps(-INFINITY), vis, _mm512_load_ps(s + 16 * c),
                                           scale);
                mx = _mm512_max_ps(mx, sv[c]);
            }
            const float bm = _mm512_reduce_max_ps(mx);
            if (lim <= 0) { /* nothing visible in this block: zero P, keep m and l */
                memset(s, 0, KB * sizeof *s);
                continue;
            }
            const float mnew = bm > mrow[i] ? bm : mrow[i];
            const float corr = expf(mrow[i] - mnew);
            const __m512 mv = _mm512_set1_ps(mnew);
            __m512 sum = _mm512_setzero_ps();
            for (int c = 0; c < 4; c++) {
                __m512 p = numla_exp512(_mm512_sub_ps(sv[c], mv));
                sum = _mm512_add_ps(sum, p);
                _mm512_store_ps(s + 16 * c, p);
            }
            lrow[i] = lrow[i] * corr + _mm512_reduce_add_ps(sum);
            mrow[i] = mnew;
            if (corr != 1.0f) {
                float *o = O + (size_t)i * Dv;
                const __m512 cv = _mm512_set1_ps(corr);
                for (int32_t d = 0; d < Dv; d += 16)
                    _mm512_storeu_ps(o + d, _mm512_mul_ps(cv, _mm512_loadu_ps(o + d)));
            }
        }
        /* 3. O += P · V */
        if (amx)
            numla_mha_prefill_pv_amx(S, nq, (const uint16_t *)(const void *)(Kt + (size_t)D * KB),
                                     Dv, pp, O);
        else
            pv_block(S, nq, Kt + (size_t)D * KB, Dv, kb, O, Dv);
    }
    if (amx)
        numla_amx_tiles_end();
    for (int32_t i = 0; i < nq; i++) {
        const int64_t qr = (int64_t)a->q_start[b] + i0 + i;
        float *o = a->out + qr * a->out_stride + (int64_t)h * Dv;
        const __m512 inv = _mm512_set1_ps(1.0f / lrow[i]);
        for (int32_t d = 0; d < Dv; d += 16)
            _mm512_storeu_ps(o + d, _mm512_mul_ps(inv, _mm512_loadu_ps(O + (size_t)i * Dv + d)));
        if (a->lse)
            a->lse[qr * a->num_heads + h] = mrow[i] + logf(lrow[i]);
    }
}

void numla_mha_prefill_avx512(const numla_mha_prefill_args *a, int32_t b, int32_t h, int32_t i0,
                              int32_t i1, float *scratch, const float *kt)
{
    task(a, b, h, i0, i1, scratch, kt, 0);
}

/* Built without the AMX flags: the tile code lives in mha_prefill_amx.c. */
void numla_mha_prefill_avx512_amx(const numla_mha_prefill_args *a, int32_t b, int32_t h,
                                  int32_t i0, int32_t i1, float *scratch, const float *kt)
{
    task(a, b, h, i0, i1, scratch, kt, 1);
}
