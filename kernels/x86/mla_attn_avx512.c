/* kernels/x86/mla_attn_avx512.c — the AVX-512 MLA attention chunk kernel (its plan:
 * mla_attn_avx512_internal.h), compiled once, with the avx512 flags. The avx512 level runs it
 * as it is: fp32 FMA for Q·K and P·V over cache rows widened in registers. The amx level runs
 * the same body with its tile steps (kernels/x86/mla_attn_avx512_amx.c). */
#include "kernels/x86/mla_attn_avx512_internal.h"

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/x86/exp_avx512.h"
#include "kernels/x86/mla_attn_amx.h"

#define NUMLA_MLA_INLINE static inline __attribute__((always_inline))

NUMLA_MLA_INLINE __m512 numla_mla_bf16x16(const uint16_t *p)
{
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}

/* ---- step 1: scores ------------------------------------------------------------------- */

/* Pull a cache row into L1 ahead of use: the blocks of a sequence are scattered, so the
 * hardware prefetchers only catch up within a block. */
NUMLA_MLA_INLINE void numla_mla_prefetch_row(const char *row, size_t bytes)
{
    for (size_t o = 0; o < bytes; o += 64)
        _mm_prefetch(row + o, _MM_HINT_T0);
}

/* Sixteen 16-lane partial sums v[h] -> one vector of their totals, lane h. */
NUMLA_MLA_INLINE __m512 numla_mla_reduce16r(const __m512 *v)
{
    __m512 w[8], x[4], y[2];
    for (int i = 0; i < 8; i++)
        w[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                             _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    for (int i = 0; i < 4; i++) {
        __m512d a = _mm512_castps_pd(w[2 * i]), b = _mm512_castps_pd(w[2 * i + 1]);
        x[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    for (int i = 0; i < 2; i++)
        y[i] = _mm512_add_ps(_mm512_shuffle_f32x4(x[2 * i], x[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(x[2 * i], x[2 * i + 1], 0xdd));
    return _mm512_add_ps(_mm512_shuffle_f32x4(y[0], y[1], 0x88), _mm512_shuffle_f32x4(y[0], y[1], 0xdd));
}

/* 16 values of a cache row from dim d, widened to fp32 (kind 0 f32, 1 bf16, 2 f16). */
NUMLA_MLA_INLINE __m512 numla_mla_ld16(const void *row, int64_t d, const int kind)
{
    if (kind == 1)
        return numla_mla_bf16x16((const uint16_t *)row + d);
    if (kind == 2)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + d)));
    return _mm512_loadu_ps((const float *)row + d);
}

/* S[h] = Σ_d q_h[d] · row[d] for one key and NH rows, lanes along d, widening the row once
 * (no fp32 copy of the tile); q is fp32 blocked as (width / 16, 16 rows, 16) so one pointer
 * walks all rows. */
NUMLA_MLA_INLINE void numla_mla_qk_row(const float *qr, int64_t width, const void *row, float *S,
                                       const int kind, const int NH)
{
    __m512 acc[16];
    for (int h = 0; h < 16; h++)
        acc[h] = _mm512_setzero_ps();
    for (int64_t d = 0; d < width; d += 16) {
        __m512 k = numla_mla_ld16(row, d, kind);
        for (int h = 0; h < NH; h++)
            acc[h] = _mm512_fmadd_ps(_mm512_load_ps(qr + d * 16 + h * 16), k, acc[h]);
    }
    _mm512_store_ps(S, numla_mla_reduce16r(acc));
}

static void numla_mla_qk_rows(const float *qr, int64_t width, const char *const *rows, int64_t nt,
                              float *S, int kind, int nrows)
{
    const size_t rowbytes = (size_t)width * (kind ? 2 : 4);
#define NUMLA_MLA_QK_ROWS(K, NH)                                                                 \
    for (int64_t i = 0; i < nt; i++) {                                                           \
        if (NUMLA_MLA_PREFETCH && i + 2 < nt)                                                    \
            numla_mla_prefetch_row(rows[i + 2], rowbytes);                                       \
        numla_mla_qk_row(qr, width, rows[i], S + 16 * i, K, NH);                                 \
    }
    if (nrows > 8) {
        if (kind == 1) { NUMLA_MLA_QK_ROWS(1, 16) } else if (kind == 2) { NUMLA_MLA_QK_ROWS(2, 16) } else { NUMLA_MLA_QK_ROWS(0, 16) }
    } else if (nrows > 4) {
        if (kind == 1) { NUMLA_MLA_QK_ROWS(1, 8) } else if (kind == 2) { NUMLA_MLA_QK_ROWS(2, 8) } else { NUMLA_MLA_QK_ROWS(0, 8) }
    } else {
        if (kind == 1) { NUMLA_MLA_QK_ROWS(1, 4) } else if (kind == 2) { NUMLA_MLA_QK_ROWS(2, 4) } else { NUMLA_MLA_QK_ROWS(0, 4) }
    }
#undef NUMLA_MLA_QK_ROWS
}

/* ---- step 3: P·V ---------------------------------------------------------------------- */

/* O[h][d] (h < NH, row stride dc) = O·corr + Σ_t P[t][h] v_t[d], RD zmm of d at a time.
 * vbf: V row kind (0 f32, 1 bf16, 2 f16), widened here. */
NUMLA_MLA_INLINE void numla_mla_pv(float *O, int64_t dc, const float *P, const float *corr,
                                   int fresh, int rescale, const void *const *vrows, int64_t nt,
                                   const int vbf, const int NH, const int RD)
{
    for (int64_t d = 0; d < dc; d += 16 * RD) {
        __m512 o[16][4];
        for (int h = 0; h < NH; h++)
            for (int k = 0; k < RD; k++) {
                if (fresh) {
                    o[h][k] = _mm512_setzero_ps();
                } else {
                    o[h][k] = _mm512_load_ps(O + h * dc + d + 16 * k);
                    if (rescale)
                        o[h][k] = _mm512_mul_ps(o[h][k], _mm512_set1_ps(corr[h]));
                }
            }
        for (int64_t t = 0; t < nt; t++) {
            __m512 v[4];
            for (int k = 0; k < RD; k++)
                v[k] = numla_mla_ld16(vrows[t], d + 16 * k, vbf);
            const float *pt = P + 16 * t;
            for (int h = 0; h < NH; h++)
                for (int k = 0; k < RD; k++)
                    o[h][k] = _mm512_fmadd_ps(_mm512_set1_ps(pt[h]), v[k], o[h][k]);
        }
        for (int h = 0; h < NH; h++)
            for (int k = 0; k < RD; k++)
                _mm512_store_ps(O + h * dc + d + 16 * k, o[h][k]);
    }
}

/* Dispatch on the compile-time shape (heads in registers) for the item's row count. */
static void numla_mla_pv_any(float *O, int64_t dc, const float *P, const float *corr, int fresh,
                             int rescale, const void *const *vrows, int64_t nt, int kind, int nrows)
{
#define NUMLA_MLA_PV_CASE(NH, RD)                                                                \
    if (kind == 1)                                                                               \
        numla_mla_pv(O, dc, P, corr, fresh, rescale, vrows, nt, 1, NH, RD);                      \
    else if (kind == 2)                                                                          \
        numla_mla_pv(O, dc, P, corr, fresh, rescale, vrows, nt, 2, NH, RD);                      \
    else                                                                                         \
        numla_mla_pv(O, dc, P, corr, fresh, rescale, vrows, nt, 0, NH, RD);
    if (nrows > 8) {
        NUMLA_MLA_PV_CASE(16, 1)
    } else if (nrows > 4) {
        NUMLA_MLA_PV_CASE(8, 2)
    } else {
        NUMLA_MLA_PV_CASE(4, 2)
    }
#undef NUMLA_MLA_PV_CASE
}

/* ---- the chunk kernel ----------------------------------------------------------------- */

typedef struct numla_mla_scratch_layout {
    size_t q, S, rows, stage, pv, total;
} numla_mla_scratch_layout;

static numla_mla_scratch_layout numla_mla_layout(const numla_mla_tile_steps *tiles,
                                                 const numla_mla_attn_args *a)
{
    numla_mla_scratch_layout L;
    size_t w = (size_t)a->kv_lora_rank + (size_t)a->rope_dim;
    size_t off = 0;
    L.q = off;
    off += (w * 16 * sizeof(float) + 63) & ~(size_t)63;
    L.S = off;
    off += NUMLA_MLA_KT * 16 * sizeof(float) + 64;
    L.rows = off;
    off += NUMLA_MLA_KT * sizeof(void *);
    off = (off + 63) & ~(size_t)63;
    L.stage = off;
    if (tiles) {
        off += 64 * w * sizeof(uint16_t); /* AMX staging of 4 groups of 16 rows */
        L.pv = off;
        off += NUMLA_MLA_PV_AMX_STAGE * sizeof(uint16_t); /* AMX P·V tiles */
    } else {
        L.pv = off;
    }
    L.total = off;
    return L;
}

size_t numla_mla_avx512_scratch_bytes(const numla_mla_tile_steps *tiles, const numla_mla_attn_args *a)
{
    return numla_mla_layout(tiles, a).total;
}

int numla_mla_avx512_supports(const void *args)
{
    const numla_mla_attn_args *a = args;
    return a->kv_lora_rank % 32 == 0 && a->rope_dim % 16 == 0;
}

/* Pack the item's q rows as (w / 16, 16 rows, 16) fp32; rows past nrows are zero. The softmax
 * scale is applied to the scores. */
static void numla_mla_pack_q(const numla_mla_attn_chunk *c, void *qbuf)
{
    const numla_mla_attn_args *a = c->a;
    int64_t w = (int64_t)a->kv_lora_rank + a->rope_dim;
    float *qr = qbuf;
    memset(qr, 0, (size_t)w * 16 * sizeof(float));
    for (int32_t r = 0; r < c->nrows; r++) {
        size_t base = (size_t)(c->row0 + r) * (size_t)w;
        float *dst = qr + (size_t)r * 16;
        for (int64_t d = 0; d < w; d += 16) {
            __m512 v;
            if (a->q_dtype == NUMLA_DTYPE_F32)
                v = _mm512_loadu_ps((const float *)a->q + base + d);
            else if (a->q_dtype == NUMLA_DTYPE_BF16)
                v = numla_mla_bf16x16((const uint16_t *)a->q + base + d);
            else
                v = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)a->q + base + d)));
            _mm512_store_ps(dst + d * 16, v);
        }
    }
}

void numla_mla_avx512_chunk(const numla_mla_tile_steps *tiles, const numla_mla_attn_chunk *c,
                            float *acc, float *m, float *l, void *scratch)
{
    const numla_mla_attn_args *a = c->a;
    const int64_t dc = a->kv_lora_rank, w = dc + a->rope_dim;
    /* With the tile steps (the amx variant, which applies only to a bf16 cache and whole
     * 32-element slices): Q·K on the tiles, exact products and fp32 accumulation. A bf16 q is
     * used as is; an fp32 / fp16 q (what the engine passes) as bf16 hi + lo, two products per
     * key tile (tiles->pack_q). P·V on tiles too (V exact; P split hi + lo), whatever q is,
     * when Dc % 64 == 0. */
    const int amx = tiles != NULL;
    const int amx_pv = amx && a->kv_lora_rank % 64 == 0 && NUMLA_MLA_KT <= 64;
    const int kind = a->kv_dtype == NUMLA_DTYPE_BF16 ? 1 : a->kv_dtype == NUMLA_DTYPE_F16 ? 2 : 0;
    numla_mla_scratch_layout L = numla_mla_layout(tiles, a);
    char *s = scratch;
    void *qbuf = s + L.q;
    /* q's lo pairs right after its hi pairs (tiles->pack_q), when q is not bf16 */
    const uint32_t *qlo =
        amx && a->q_dtype != NUMLA_DTYPE_BF16 ? (const uint32_t *)qbuf + w / 2 * 16 : NULL;
    float *S = (float *)(((uintptr_t)(s + L.S) + 63) & ~(uintptr_t)63);
    const char **rows = (const char **)(s + L.rows);

    int32_t lim32[16] __attribute__((aligned(64)));
    int64_t kend = c->k0;
    for (int r = 0; r < 16; r++) {
        int64_t lr = r < c->nrows ? c->lim[r] : c->k0;
        lim32[r] = (int32_t)lr;
        kend = lr > kend ? lr : kend;
    }
    __m512 mv = _mm512_set1_ps(-INFINITY), lv = _mm512_setzero_ps();
    if (kend <= c->k0) {
        _mm512_storeu_ps(m, mv);
        _mm512_storeu_ps(l, lv);
        memset(acc, 0, (size_t)c->nrows * (size_t)dc * sizeof(float));
        return;
    }
    if (c->q_ready)
        ;
    else if (amx)
        tiles->pack_q(c, qbuf);
    else
        numla_mla_pack_q(c, qbuf);
    if (amx)
        tiles->begin();
    const __m512i limv = _mm512_load_si512(lim32);
    float corr[16] __attribute__((aligned(64)));
    const size_t rowbytes = (size_t)w * numla_dtype_size(a->kv_dtype);
    const int32_t *tab = a->block_tables + (int64_t)c->seq * a->max_blocks_per_seq;
    const int64_t bs = a->block_size;
    int fresh = 1;
    for (int64_t t0 = c->k0; t0 < kend; t0 += NUMLA_MLA_KT) {
        const int64_t nt = kend - t0 < NUMLA_MLA_KT ? kend - t0 : NUMLA_MLA_KT;
        {
            int64_t bi = t0 / bs, off = t0 % bs;
            for (int64_t i = 0; i < nt; i++) {
                rows[i] = (const char *)a->kv_cache +
                          ((size_t)tab[bi] * (size_t)bs + (size_t)off) * rowbytes;
                if (++off == bs)
                    off = 0, bi++;
            }
        }
        /* 1. scores */
        if (amx) {
            for (int64_t i = 0; i < nt; i += 64)
                tiles->qk(qbuf, qlo, w, rows + i, nt - i < 64 ? nt - i : 64, S + 16 * i,
                          (uint16_t *)(s + L.stage));
        } else {
            numla_mla_qk_rows(qbuf, w, rows, nt, S, kind, c->nrows);
        }
        /* 2. online softmax over the tile */
        __m512 tmax = _mm512_set1_ps(-INFINITY);
        const __m512 scale = _mm512_set1_ps(a->scale);
        for (int64_t i = 0; i < nt; i++) {
            __mmask16 keep = _mm512_cmpgt_epi32_mask(limv, _mm512_set1_epi32((int32_t)(t0 + i)));
            __m512 si = _mm512_mask_mul_ps(_mm512_set1_ps(-INFINITY), keep,
                                           _mm512_load_ps(S + 16 * i), scale);
            _mm512_store_ps(S + 16 * i, si);
            tmax = _mm512_max_ps(tmax, si);
        }
        __m512 mnew = _mm512_max_ps(mv, tmax);
        /* A row with no key yet keeps m = -inf; subtract 0 there so e^(-inf - 0) = 0. */
        __m512 muse = _mm512_mask_mov_ps(mnew, _mm512_cmp_ps_mask(mnew, _mm512_set1_ps(-INFINITY),
                                                                  _CMP_EQ_OQ),
                                         _mm512_setzero_ps());
        __m512 cv = numla_exp512(_mm512_sub_ps(mv, muse));
        int rescale = _mm512_cmp_ps_mask(cv, _mm512_set1_ps(1.0f), _CMP_NEQ_UQ) != 0;
        _mm512_store_ps(corr, cv);
        __m512 psum = _mm512_setzero_ps();
        for (int64_t i = 0; i < nt; i++) {
            __m512 p = numla_exp512(_mm512_sub_ps(_mm512_load_ps(S + 16 * i), muse));
            _mm512_store_ps(S + 16 * i, p);
            psum = _mm512_add_ps(psum, p);
        }
        lv = _mm512_fmadd_ps(lv, cv, psum);
        mv = mnew;
        /* 3. P·V */
        if (amx_pv)
            tiles->pv(acc, dc, S, corr, fresh, rescale, rows, nt, (uint16_t *)(void *)(s + L.pv),
                      /* the shared pack holds 64-key tiles of the range */
                      c->vshare && NUMLA_MLA_KT == 64
                          ? c->vshare + (size_t)((t0 - c->k0) / 64) * (size_t)dc * 64
                          : NULL,
                      c->vshare_fill);
        else
            numla_mla_pv_any(acc, dc, S, corr, fresh, rescale, (const void *const *)rows, nt,
                             kind, c->nrows);
        fresh = 0;
    }
    if (amx)
        tiles->end();
    if (amx_pv)
        tiles->unpermute(acc, c->nrows, dc);
    float mo[16], lo[16];
    _mm512_storeu_ps(mo, mv);
    _mm512_storeu_ps(lo, lv);
    for (int r = 0; r < c->nrows; r++)
        m[r] = mo[r], l[r] = lo[r];
}

void numla_mla_avx512_qk_f32(const float *qr, int64_t width, const char *const *rows, int64_t nt,
                             float *S, int nrows)
{
    numla_mla_qk_rows(qr, width, rows, nt, S, 0, nrows);
}

void numla_mla_avx512_pv_f32(float *O, int64_t dc, const float *P, const float *corr, int fresh,
                             int rescale, const void *const *vrows, int64_t nt, int nrows)
{
    numla_mla_pv_any(O, dc, P, corr, fresh, rescale, vrows, nt, 0, nrows);
}

void numla_mla_avx512_qk_bf16(const float *qr, int64_t width, const char *const *rows, int64_t nt,
                              float *S, int nrows)
{
    numla_mla_qk_rows(qr, width, rows, nt, S, 1, nrows);
}

void numla_mla_avx512_pv_bf16(float *O, int64_t dc, const float *P, const float *corr, int fresh,
                              int rescale, const void *const *vrows, int64_t nt, int nrows)
{
    numla_mla_pv_any(O, dc, P, corr, fresh, rescale, vrows, nt, 1, nrows);
}

static void numla_mla_chunk_avx512_(const numla_mla_attn_chunk *c, float *acc, float *m, float *l,
                                    void *scratch)
{
    numla_mla_avx512_chunk(NULL, c, acc, m, l, scratch);
}

static size_t numla_mla_scratch_avx512_(const numla_mla_attn_args *a)
{
    return numla_mla_avx512_scratch_bytes(NULL, a);
}

const numla_mla_attn_kernel numla_mla_attn_kernel_avx512 = {
    .v = {"avx512", 0, numla_mla_avx512_supports},
    .chunk = numla_mla_chunk_avx512_,
    .scratch_bytes = numla_mla_scratch_avx512_,
};
