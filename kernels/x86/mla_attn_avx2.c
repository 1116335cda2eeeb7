/* kernels/x86/mla_attn_avx2.c — AVX2+FMA+F16C MLA attention chunk kernel.
 *
 * Same plan as the AVX-512 kernel (mla_attn_avx512_internal.h) at 8 lanes with 16 registers:
 * per tile of NUMLA_MLA_AVX2_KT keys the cache rows are widened to fp32 once (fp32 caches are used
 * in place) and reused for Q·K and P·V; scores keep the item's 16 rows in two ymm per key
 * (each cache element broadcast into FMAs against q packed [dim][row]); online softmax per
 * tile; P·V in register blocks of 4 rows × 16 dims, lanes along d.
 * The chunk's keys are a key range, or an index list (numla_mla_attn_chunk.keys: DSA's sparse
 * attention at this level, kernels/x86/dsa_avx2.c).
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/mla_attn_internal.h"
#include "kernels/x86/exp_avx2.h"
#include "kernels/x86/mla_attn_avx2_internal.h"

#define NUMLA_MLA_AVX2_INLINE static inline __attribute__((always_inline))

/* O[h0 + h][d] = O·corr + Σ_t P[t][h0 + h] v_t[d] for 4 rows, 16 dims at a time. */
NUMLA_MLA_AVX2_INLINE void numla_mla_avx2_pv4(float *O, int64_t dc, int h0, const float *P,
                                      const float *corr, int fresh, int rescale,
                                      const float *const *vrows, int64_t nt)
{
    for (int64_t d = 0; d < dc; d += 16) {
        __m256 o[4][2];
        for (int h = 0; h < 4; h++)
            for (int k = 0; k < 2; k++) {
                if (fresh) {
                    o[h][k] = _mm256_setzero_ps();
                } else {
                    o[h][k] = _mm256_load_ps(O + (h0 + h) * dc + d + 8 * k);
                    if (rescale)
                        o[h][k] = _mm256_mul_ps(o[h][k], _mm256_set1_ps(corr[h0 + h]));
                }
            }
        for (int64_t t = 0; t < nt; t++) {
            __m256 v0 = _mm256_loadu_ps(vrows[t] + d), v1 = _mm256_loadu_ps(vrows[t] + d + 8);
            const float *pt = P + 16 * t + h0;
            for (int h = 0; h < 4; h++) {
                __m256 p = _mm256_broadcast_ss(pt + h);
                o[h][0] = _mm256_fmadd_ps(p, v0, o[h][0]);
                o[h][1] = _mm256_fmadd_ps(p, v1, o[h][1]);
            }
        }
        for (int h = 0; h < 4; h++)
            for (int k = 0; k < 2; k++)
                _mm256_store_ps(O + (h0 + h) * dc + d + 8 * k, o[h][k]);
    }
}

typedef struct numla_mla_avx2_layout {
    size_t q, S, rows, tile, total;
} numla_mla_avx2_layout;

static numla_mla_avx2_layout numla_mla_avx2_layout_of(const numla_mla_attn_args *a)
{
    numla_mla_avx2_layout L;
    size_t w = (size_t)a->kv_lora_rank + (size_t)a->rope_dim, off = 0;
    L.q = off;
    off += (w * 16 * sizeof(float) + 63) & ~(size_t)63;
    L.S = off;
    off += NUMLA_MLA_AVX2_KT * 16 * sizeof(float);
    L.rows = off;
    off += 2 * NUMLA_MLA_AVX2_KT * sizeof(void *);
    L.tile = off;
    if (a->kv_dtype != NUMLA_DTYPE_F32)
        off += (size_t)NUMLA_MLA_AVX2_KT * w * sizeof(float);
    L.total = off;
    return L;
}

static size_t numla_mla_avx2_scratch_bytes(const numla_mla_attn_args *a) { return numla_mla_avx2_layout_of(a).total; }

static int numla_mla_avx2_supports(const void *args)
{
    const numla_mla_attn_args *a = args;
    return a->kv_lora_rank % 32 == 0 && a->rope_dim % 16 == 0;
}

static void numla_mla_avx2_chunk(const numla_mla_attn_chunk *c, float *acc, float *m, float *l,
                             void *scratch)
{
    const numla_mla_attn_args *a = c->a;
    const int64_t dc = a->kv_lora_rank, w = dc + a->rope_dim;
    numla_mla_avx2_layout L = numla_mla_avx2_layout_of(a);
    char *s = scratch;
    float *qt = (float *)(s + L.q), *S = (float *)(s + L.S), *tile = (float *)(s + L.tile);
    const char **rows = (const char **)(s + L.rows);
    const float **frows = (const float **)(rows + NUMLA_MLA_AVX2_KT);

    int32_t lim32[16] __attribute__((aligned(32)));
    int64_t kend = c->k0;
    for (int r = 0; r < 16; r++) {
        int64_t lr = r < c->nrows ? c->lim[r] : c->k0;
        lim32[r] = (int32_t)lr;
        kend = lr > kend ? lr : kend;
    }
    float mo[16] __attribute__((aligned(32))), lo[16] __attribute__((aligned(32)));
    float corr[16] __attribute__((aligned(32)));
    for (int r = 0; r < 16; r++)
        mo[r] = -INFINITY, lo[r] = 0.0f;
    if (kend <= c->k0) {
        for (int r = 0; r < c->nrows; r++)
            m[r] = mo[r], l[r] = lo[r];
        memset(acc, 0, (size_t)c->nrows * (size_t)dc * sizeof(float));
        return;
    }
    memset(qt, 0, (size_t)w * 16 * sizeof(float));
    for (int32_t r = 0; r < c->nrows; r++) {
        size_t base = (size_t)(c->row0 + r) * (size_t)w;
        for (int64_t d = 0; d < w; d++)
            qt[d * 16 + r] = numla_load_f32(a->q, a->q_dtype, base + (size_t)d);
    }
    const size_t rowbytes = (size_t)w * numla_dtype_size(a->kv_dtype);
    const int32_t *tab = a->block_tables + (int64_t)c->seq * a->max_blocks_per_seq;
    const int64_t bs = a->block_size;
    const __m256 ninf = _mm256_set1_ps(-INFINITY), scale = _mm256_set1_ps(a->scale);
    const int hv2 = c->nrows > 8;
    int fresh = 1;
    for (int64_t t0 = c->k0; t0 < kend; t0 += NUMLA_MLA_AVX2_KT) {
        const int64_t nt = kend - t0 < NUMLA_MLA_AVX2_KT ? kend - t0 : NUMLA_MLA_AVX2_KT;
        if (c->keys) { /* an index list (DSA's sparse attention): each key's own block */
            for (int64_t i = 0; i < nt; i++) {
                const int64_t t = c->keys[t0 + i];
                rows[i] = (const char *)a->kv_cache +
                          ((size_t)tab[t / bs] * (size_t)bs + (size_t)(t % bs)) * rowbytes;
            }
        } else {
            int64_t bi = t0 / bs, off = t0 % bs;
            for (int64_t i = 0; i < nt; i++) {
                rows[i] = (const char *)a->kv_cache + ((size_t)tab[bi] * (size_t)bs + (size_t)off) * rowbytes;
                if (++off == bs)
                    off = 0, bi++;
            }
        }
        for (int64_t i = 0; i < nt; i++) {
            if (a->kv_dtype == NUMLA_DTYPE_F32) {
                frows[i] = (const float *)rows[i];
                continue;
            }
            float *dst = tile + i * w;
            const uint16_t *src = (const uint16_t *)rows[i];
            for (int64_t d = 0; d < w; d += 8) {
                __m128i h = _mm_loadu_si128((const __m128i *)(src + d));
                __m256 f = a->kv_dtype == NUMLA_DTYPE_BF16
                               ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
                               : _mm256_cvtph_ps(h);
                _mm256_storeu_ps(dst + d, f);
            }
            frows[i] = dst;
        }
        /* 1. scores */
        int64_t i = 0;
        if (hv2) {
            for (; i + 4 <= nt; i += 4)
                numla_mla_avx2_qk(qt, w, frows + i, S + 16 * i, 4, 2);
            for (; i < nt; i++)
                numla_mla_avx2_qk(qt, w, frows + i, S + 16 * i, 1, 2);
        } else {
            for (; i + 8 <= nt; i += 8)
                numla_mla_avx2_qk(qt, w, frows + i, S + 16 * i, 8, 1);
            for (; i < nt; i++)
                numla_mla_avx2_qk(qt, w, frows + i, S + 16 * i, 1, 1);
        }
        /* 2. online softmax */
        __m256 mnew[2], cv[2], psum[2];
        int rescale = 0;
        for (int hh = 0; hh < 2; hh++) {
            __m256i limv = _mm256_load_si256((const __m256i *)(lim32 + 8 * hh));
            __m256 tmax = ninf;
            for (int64_t k = 0; k < nt; k++) {
                __m256 keep = _mm256_castsi256_ps(
                    _mm256_cmpgt_epi32(limv, _mm256_set1_epi32((int32_t)(t0 + k))));
                __m256 sk = _mm256_blendv_ps(ninf, _mm256_mul_ps(_mm256_load_ps(S + 16 * k + 8 * hh), scale), keep);
                _mm256_store_ps(S + 16 * k + 8 * hh, sk);
                tmax = _mm256_max_ps(tmax, sk);
            }
            __m256 mv = _mm256_load_ps(mo + 8 * hh);
            mnew[hh] = _mm256_max_ps(mv, tmax);
            __m256 muse = _mm256_blendv_ps(mnew[hh], _mm256_setzero_ps(),
                                           _mm256_cmp_ps(mnew[hh], ninf, _CMP_EQ_OQ));
            cv[hh] = numla_exp256(_mm256_sub_ps(mv, muse));
            rescale |= _mm256_movemask_ps(_mm256_cmp_ps(cv[hh], _mm256_set1_ps(1.0f), _CMP_NEQ_UQ));
            psum[hh] = _mm256_setzero_ps();
            for (int64_t k = 0; k < nt; k++) {
                __m256 p = numla_exp256(_mm256_sub_ps(_mm256_load_ps(S + 16 * k + 8 * hh), muse));
                _mm256_store_ps(S + 16 * k + 8 * hh, p);
                psum[hh] = _mm256_add_ps(psum[hh], p);
            }
            _mm256_store_ps(corr + 8 * hh, cv[hh]);
            _mm256_store_ps(lo + 8 * hh, _mm256_fmadd_ps(_mm256_load_ps(lo + 8 * hh), cv[hh], psum[hh]));
            _mm256_store_ps(mo + 8 * hh, mnew[hh]);
        }
        /* 3. P·V */
        for (int h0 = 0; h0 < c->nrows; h0 += 4)
            numla_mla_avx2_pv4(acc, dc, h0, S, corr, fresh, rescale, frows, nt);
        fresh = 0;
    }
    for (int r = 0; r < c->nrows; r++)
        m[r] = mo[r], l[r] = lo[r];
}

const numla_mla_attn_kernel numla_mla_attn_kernel_avx2 = {
    .v = {"avx2", 0, numla_mla_avx2_supports},
    .chunk = numla_mla_avx2_chunk,
    .scratch_bytes = numla_mla_avx2_scratch_bytes,
};
