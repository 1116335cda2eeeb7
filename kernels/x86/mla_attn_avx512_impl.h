/* kernels/x86/mla_attn_avx512_impl.h — the AVX-512 MLA attention chunk kernel, included by
 * mla_attn_avx512.c (NUMLA_MLA_BF16DOT 0) and mla_attn_avx512bf16.c (NUMLA_MLA_BF16DOT 1),
 * which supply the compiler flags. Private to those two files.
 *
 * One item = up to 16 (query, head) rows sharing one key range. Keys go in tiles of
 * NUMLA_MLA_KT rows; per tile:
 *   1. scores S[t][r] (a zmm per key, lanes = rows): bf16 q and cache with BF16DOT: vdpbf16ps
 *      of the q pairs (packed once per item as [pair][row]) against the cache row's pairs
 *      broadcast straight from the cache (exact products); otherwise the tile is converted to
 *      fp32 once (fp32 caches are used in place) and each element is broadcast into an FMA
 *      against q packed as [dim][row]. The scale is applied to the fp32 scores.
 *   2. online softmax on the tile (masking keys past each row's limit), P = e^(S - m).
 *   3. O[r][d] += Σ_t P[t][r] · v_t[d] with lanes along d, all rows of the item in registers
 *      so each V element is loaded (and, from bf16, widened) once per item.
 * The chunk's O lives in the frame's acc buffer (rows, Dc) between tiles.
 */
#ifndef NUMLA_KERNELS_X86_MLA_ATTN_AVX512_IMPL_H
#define NUMLA_KERNELS_X86_MLA_ATTN_AVX512_IMPL_H

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/mla_attn_internal.h"

#ifndef NUMLA_MLA_BF16DOT
#error "define NUMLA_MLA_BF16DOT before including mla_attn_avx512_impl.h"
#endif

/* Blocking (overridable for tuning builds): keys per tile, keys per score register block. */
#ifndef NUMLA_MLA_KT
#define NUMLA_MLA_KT 64
#endif
#ifndef NUMLA_MLA_QK_NT
#define NUMLA_MLA_QK_NT 8
#endif
#ifndef NUMLA_MLA_QK_DOT
#define NUMLA_MLA_QK_DOT 1
#endif

#define NUMLA_MLA_INLINE static inline __attribute__((always_inline))

/* e^x for x <= 0 (x = -inf gives exactly 0). */
NUMLA_MLA_INLINE __m512 numla_mla_exp512(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-127.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    f = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), f);
    __m512 p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

NUMLA_MLA_INLINE __m512 numla_mla_bf16x16(const uint16_t *p)
{
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}

/* ---- step 1: scores ------------------------------------------------------------------- */

#if NUMLA_MLA_BF16DOT
/* S[i] = Σ_j qv[j] · pair_j(row i), NT keys at once, NA partial sums per key. */
NUMLA_MLA_INLINE void numla_mla_qk_bf16(const uint32_t *qv, int64_t pairs,
                                        const char *const *rows, float *S, const int NT, const int NA)
{
    __m512 acc[16][8];
    const uint32_t *rp[16];
    for (int i = 0; i < NT; i++) {
        rp[i] = (const uint32_t *)rows[i];
        for (int k = 0; k < NA; k++)
            acc[i][k] = _mm512_setzero_ps();
    }
    for (int64_t j = 0; j < pairs; j += NA) {
        for (int k = 0; k < NA; k++) {
            __m512bh q = (__m512bh)_mm512_load_si512((const void *)(qv + (j + k) * 16));
            for (int i = 0; i < NT; i++)
                acc[i][k] = _mm512_dpbf16_ps(acc[i][k], q,
                                             (__m512bh)_mm512_set1_epi32((int)rp[i][j + k]));
        }
    }
    for (int i = 0; i < NT; i++) {
        __m512 s = acc[i][0];
        for (int k = 1; k < NA; k++)
            s = _mm512_add_ps(s, acc[i][k]);
        _mm512_store_ps(S + 16 * i, s);
    }
}
#endif

/* S[i] = Σ_d qt[d] · row_i[d] over fp32 rows. */
NUMLA_MLA_INLINE void numla_mla_qk_f32(const float *qt, int64_t width, const float *const *rows,
                                       float *S, const int NT, const int NA)
{
    __m512 acc[16][8];
    for (int i = 0; i < NT; i++)
        for (int k = 0; k < NA; k++)
            acc[i][k] = _mm512_setzero_ps();
    for (int64_t d = 0; d < width; d += NA) {
        for (int k = 0; k < NA; k++) {
            __m512 q = _mm512_load_ps(qt + (d + k) * 16);
            for (int i = 0; i < NT; i++)
                acc[i][k] = _mm512_fmadd_ps(q, _mm512_set1_ps(rows[i][d + k]), acc[i][k]);
        }
    }
    for (int i = 0; i < NT; i++) {
        __m512 s = acc[i][0];
        for (int k = 1; k < NA; k++)
            s = _mm512_add_ps(s, acc[i][k]);
        _mm512_store_ps(S + 16 * i, s);
    }
}

/* Sixteen 16-lane partial sums v[h] -> one vector of their totals, lane h. */
NUMLA_MLA_INLINE __m512 numla_mla_reduce16(const float *v)
{
    __m512 w[8], x[4], y[2];
    for (int i = 0; i < 8; i++) {
        __m512 a = _mm512_load_ps(v + 32 * i), b = _mm512_load_ps(v + 32 * i + 16);
        w[i] = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    }
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

/* S[i][h] = Σ_d q_h[d] · row_i[d] for NT <= 4 keys with lanes along d: register blocks of 4 rows
 * × NT keys reuse every loaded vector 4 (or NT) times, then a transpose-add per key. q rows are
 * fp32 (16, width); Sp is (4, 16, 16) scratch whose rows >= 4·nhg stay zero. */
NUMLA_MLA_INLINE void numla_mla_qk_dot(const float *qr, int64_t width, int nhg,
                                       const float *const *rows, float *S, float *Sp, const int NT)
{
    for (int hg = 0; hg < nhg; hg++) {
        __m512 acc[4][4];
        for (int h = 0; h < 4; h++)
            for (int i = 0; i < NT; i++)
                acc[h][i] = _mm512_setzero_ps();
        const float *q0 = qr + (size_t)(4 * hg) * (size_t)width;
        for (int64_t d = 0; d < width; d += 16) {
            __m512 k[4];
            for (int i = 0; i < NT; i++)
                k[i] = _mm512_loadu_ps(rows[i] + d);
            for (int h = 0; h < 4; h++) {
                __m512 q = _mm512_load_ps(q0 + h * width + d);
                for (int i = 0; i < NT; i++)
                    acc[h][i] = _mm512_fmadd_ps(q, k[i], acc[h][i]);
            }
        }
        for (int h = 0; h < 4; h++)
            for (int i = 0; i < NT; i++)
                _mm512_store_ps(Sp + (i * 16 + 4 * hg + h) * 16, acc[h][i]);
    }
    for (int i = 0; i < NT; i++)
        _mm512_store_ps(S + 16 * i, numla_mla_reduce16(Sp + i * 256));
}

/* ---- step 3: P·V ---------------------------------------------------------------------- */

/* O[h][d] (h < NH, row stride dc) = O·corr + Σ_t P[t][h] v_t[d], RD zmm of d at a time.
 * vbf: V rows are bf16 (widened here) else fp32. */
NUMLA_MLA_INLINE void numla_mla_pv(float *O, int64_t dc, const float *P, const float *corr,
                                   int fresh, int rescale, const void *const *vrows, int64_t nt,
                                   const int vbf, const int NH, const int RD)
{
    /* Rows h0.. are handled by the caller offsetting O, P and corr. */
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
                v[k] = vbf ? numla_mla_bf16x16((const uint16_t *)vrows[t] + d + 16 * k)
                           : _mm512_loadu_ps((const float *)vrows[t] + d + 16 * k);
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
                             int rescale, const void *const *vrows, int64_t nt, int vbf, int nrows)
{
#ifdef NUMLA_MLA_PV_NH
    if (nrows > 8) {
        for (int h0 = 0; h0 < nrows; h0 += NUMLA_MLA_PV_NH) {
            if (vbf)
                numla_mla_pv(O + h0 * dc, dc, P + h0, corr + h0, fresh, rescale, vrows, nt, 1,
                             NUMLA_MLA_PV_NH, NUMLA_MLA_PV_RD);
            else
                numla_mla_pv(O + h0 * dc, dc, P + h0, corr + h0, fresh, rescale, vrows, nt, 0,
                             NUMLA_MLA_PV_NH, NUMLA_MLA_PV_RD);
        }
        return;
    }
#endif
    if (nrows > 8) {
        if (vbf)
            numla_mla_pv(O, dc, P, corr, fresh, rescale, vrows, nt, 1, 16, 1);
        else
            numla_mla_pv(O, dc, P, corr, fresh, rescale, vrows, nt, 0, 16, 1);
    } else if (nrows > 4) {
        if (vbf)
            numla_mla_pv(O, dc, P, corr, fresh, rescale, vrows, nt, 1, 8, 2);
        else
            numla_mla_pv(O, dc, P, corr, fresh, rescale, vrows, nt, 0, 8, 2);
    } else {
        if (vbf)
            numla_mla_pv(O, dc, P, corr, fresh, rescale, vrows, nt, 1, 4, 2);
        else
            numla_mla_pv(O, dc, P, corr, fresh, rescale, vrows, nt, 0, 4, 2);
    }
}

/* ---- the chunk kernel ----------------------------------------------------------------- */

typedef struct numla_mla_scratch_layout {
    size_t q, S, Sp, rows, tile, total;
} numla_mla_scratch_layout;

static int numla_mla_uses_bf16dot(const numla_mla_attn_args *a)
{
    /* Only when q is bf16 too: then vdpbf16ps products are exact. Rounding an fp32/fp16 q to
     * bf16 costs ~2e-3 in the scores (visible in peaked softmaxes), and since vdpbf16ps runs at
     * half the fp32 FMA rate on the machines measured, the widened-fp32 path is no slower. */
    return NUMLA_MLA_BF16DOT && a->kv_dtype == NUMLA_DTYPE_BF16 && a->q_dtype == NUMLA_DTYPE_BF16;
}

static numla_mla_scratch_layout numla_mla_layout(const numla_mla_attn_args *a)
{
    numla_mla_scratch_layout L;
    size_t w = (size_t)a->kv_lora_rank + (size_t)a->rope_dim;
    size_t off = 0;
    L.q = off;
    off += (w * 16 * sizeof(float) + 63) & ~(size_t)63;
    L.S = off;
    off += NUMLA_MLA_KT * 16 * sizeof(float) + 64;
    L.Sp = off;
    off += 4 * 16 * 16 * sizeof(float);
    L.rows = off;
    off += 2 * NUMLA_MLA_KT * sizeof(void *);
    L.tile = off;
    if (!numla_mla_uses_bf16dot(a) && a->kv_dtype != NUMLA_DTYPE_F32)
        off += (size_t)NUMLA_MLA_KT * w * sizeof(float);
    L.total = off;
    return L;
}

static size_t numla_mla_scratch_bytes(const numla_mla_attn_args *a) { return numla_mla_layout(a).total; }

static int numla_mla_supports(const numla_mla_attn_args *a)
{
    return a->kv_lora_rank % 32 == 0 && a->rope_dim % 16 == 0;
}

/* Pack the item's q rows as [dim][16] fp32 or (bf16 q) [pair][16] bf16 pairs; rows past nrows
 * are zero. The softmax scale is applied to the scores. */
static void numla_mla_pack_q(const numla_mla_attn_chunk *c, void *qbuf, int bf16dot)
{
    const numla_mla_attn_args *a = c->a;
    int64_t w = (int64_t)a->kv_lora_rank + a->rope_dim;
#if NUMLA_MLA_BF16DOT
    if (bf16dot) {
        uint32_t *qv = qbuf;
        memset(qv, 0, (size_t)w / 2 * 16 * sizeof(uint32_t));
        for (int32_t r = 0; r < c->nrows; r++) {
            const uint32_t *src = (const uint32_t *)a->q + (size_t)(c->row0 + r) * (size_t)w / 2;
            for (int64_t j = 0; j < w / 2; j++)
                qv[j * 16 + r] = src[j];
        }
        return;
    }
#endif
#if NUMLA_MLA_QK_DOT
    {
        float *qr = qbuf;
        memset(qr, 0, (size_t)w * 16 * sizeof(float));
        for (int32_t r = 0; r < c->nrows; r++) {
            size_t base = (size_t)(c->row0 + r) * (size_t)w;
            float *dst = qr + (size_t)r * (size_t)w;
            for (int64_t d = 0; d < w; d += 16) {
                __m512 v;
                if (a->q_dtype == NUMLA_DTYPE_F32)
                    v = _mm512_loadu_ps((const float *)a->q + base + d);
                else if (a->q_dtype == NUMLA_DTYPE_BF16)
                    v = numla_mla_bf16x16((const uint16_t *)a->q + base + d);
                else
                    v = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)a->q + base + d)));
                _mm512_store_ps(dst + d, v);
            }
        }
    }
#else
    {
        float *qt = qbuf;
        memset(qt, 0, (size_t)w * 16 * sizeof(float));
        for (int32_t r = 0; r < c->nrows; r++) {
            size_t base = (size_t)(c->row0 + r) * (size_t)w;
            for (int64_t d = 0; d < w; d++)
                qt[d * 16 + r] = numla_load_f32(a->q, a->q_dtype, base + (size_t)d);
        }
    }
#endif
}

/* Convert nt cache rows to fp32 rows of `w` (bf16 or fp16 cache). */
static void numla_mla_convert_tile(const numla_mla_attn_args *a, const char *const *rows,
                                   int64_t nt, int64_t w, float *tile, const float **frows)
{
    for (int64_t i = 0; i < nt; i++) {
        float *dst = tile + i * w;
        const uint16_t *src = (const uint16_t *)rows[i];
        if (a->kv_dtype == NUMLA_DTYPE_BF16) {
            for (int64_t d = 0; d < w; d += 16)
                _mm512_storeu_ps(dst + d, numla_mla_bf16x16(src + d));
        } else {
            for (int64_t d = 0; d < w; d += 16)
                _mm512_storeu_ps(dst + d,
                                 _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + d))));
        }
        frows[i] = dst;
    }
}

static void numla_mla_chunk(const numla_mla_attn_chunk *c, float *acc, float *m, float *l,
                            void *scratch)
{
    const numla_mla_attn_args *a = c->a;
    const int64_t dc = a->kv_lora_rank, w = dc + a->rope_dim;
    const int bf16dot = numla_mla_uses_bf16dot(a);
    numla_mla_scratch_layout L = numla_mla_layout(a);
    char *s = scratch;
    void *qbuf = s + L.q;
    float *S = (float *)(((uintptr_t)(s + L.S) + 63) & ~(uintptr_t)63);
    const char **rows = (const char **)(s + L.rows);
    const float **frows = (const float **)(rows + NUMLA_MLA_KT);
    float *tile = (float *)(s + L.tile);
    float *Sp = (float *)(s + L.Sp);
    const int nhg = (c->nrows + 3) / 4;
    memset(Sp, 0, 4 * 16 * 16 * sizeof(float));

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
    numla_mla_pack_q(c, qbuf, bf16dot);
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
        if (bf16dot) {
#if NUMLA_MLA_BF16DOT
            const uint32_t *qv = qbuf;
            int64_t i = 0;
            for (; i + NUMLA_MLA_QK_NT <= nt; i += NUMLA_MLA_QK_NT)
                numla_mla_qk_bf16(qv, w / 2, rows + i, S + 16 * i, NUMLA_MLA_QK_NT, 1);
            for (; i + 4 <= nt; i += 4)
                numla_mla_qk_bf16(qv, w / 2, rows + i, S + 16 * i, 4, 2);
            for (; i < nt; i++)
                numla_mla_qk_bf16(qv, w / 2, rows + i, S + 16 * i, 1, 8);
#endif
        } else {
            if (a->kv_dtype == NUMLA_DTYPE_F32) {
                for (int64_t i = 0; i < nt; i++)
                    frows[i] = (const float *)rows[i];
            } else {
                numla_mla_convert_tile(a, rows, nt, w, tile, frows);
            }
            int64_t i = 0;
#if NUMLA_MLA_QK_DOT
            const float *qr = qbuf;
            for (; i + 4 <= nt; i += 4)
                numla_mla_qk_dot(qr, w, nhg, frows + i, S + 16 * i, Sp, 4);
            for (; i < nt; i++)
                numla_mla_qk_dot(qr, w, nhg, frows + i, S + 16 * i, Sp, 1);
#else
            const float *qt = qbuf;
            for (; i + NUMLA_MLA_QK_NT <= nt; i += NUMLA_MLA_QK_NT)
                numla_mla_qk_f32(qt, w, frows + i, S + 16 * i, NUMLA_MLA_QK_NT, 1);
            for (; i + 4 <= nt; i += 4)
                numla_mla_qk_f32(qt, w, frows + i, S + 16 * i, 4, 2);
            for (; i < nt; i++)
                numla_mla_qk_f32(qt, w, frows + i, S + 16 * i, 1, 8);
#endif
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
        __m512 cv = numla_mla_exp512(_mm512_sub_ps(mv, muse));
        int rescale = _mm512_cmp_ps_mask(cv, _mm512_set1_ps(1.0f), _CMP_NEQ_UQ) != 0;
        _mm512_store_ps(corr, cv);
        __m512 psum = _mm512_setzero_ps();
        for (int64_t i = 0; i < nt; i++) {
            __m512 p = numla_mla_exp512(_mm512_sub_ps(_mm512_load_ps(S + 16 * i), muse));
            _mm512_store_ps(S + 16 * i, p);
            psum = _mm512_add_ps(psum, p);
        }
        lv = _mm512_fmadd_ps(lv, cv, psum);
        mv = mnew;
        /* 3. P·V */
        if (bf16dot)
            numla_mla_pv_any(acc, dc, S, corr, fresh, rescale, (const void *const *)rows, nt, 1,
                             c->nrows);
        else
            numla_mla_pv_any(acc, dc, S, corr, fresh, rescale, (const void *const *)frows, nt, 0,
                             c->nrows);
        fresh = 0;
    }
    float mo[16], lo[16];
    _mm512_storeu_ps(mo, mv);
    _mm512_storeu_ps(lo, lv);
    for (int r = 0; r < c->nrows; r++)
        m[r] = mo[r], l[r] = lo[r];
}

#endif
