/* kernels/x86/mla_attn_avx512bf16.c — the avx512bf16 level's MLA attention chunk kernel: both
 * products on vdpbf16ps (two bf16 products summed into each fp32 lane), for CPUs with
 * AVX512_BF16 and no AMX (AMD Zen 4 and later). Takes a bf16 cache (numla_mla16_supports); an
 * fp32 / fp16 cache runs the avx512 variant.
 *
 * One chunk = up to 16 (query, head) rows sharing one key range (mla_attn_internal.h). Keys go
 * in tiles of NUMLA_MLA16_KT; per tile:
 *   1. scores S[t][r] with lanes along rows: q is packed once per chunk as Q[j][r] = the bf16
 *      pair (q_r[2j], q_r[2j+1]), and each key's pair k_t[2j..2j+1] is broadcast from the
 *      cache row in place, so one vdpbf16ps adds 32 products (16 rows x 2 dims) and no
 *      horizontal reduction is needed. Sixteen keys are in flight (sixteen independent
 *      accumulators, one Q load per sixteen dot products); their rows must be contiguous
 *      (inside one cache block), else they are copied to a staging buffer first.
 *   2. online softmax on the tile in fp32 (as the avx512 variant), P = e^(S - m).
 *   3. O[r][d] += Σ_t P[t][r] · v_t[d] with lanes along d: two V rows interleaved into bf16 pairs
 *      (vpunpck{l,h}wd, which permutes the dims inside each 32-dim block; undone once at the end
 *      of the chunk) times the broadcast pair (P[t][r], P[t+1][r]), eight rows x 32 dims in
 *      registers per pass.
 *
 * Numerics (mla_attn.h): bf16 x bf16 products are exact in fp32 and every sum is fp32. A bf16 q
 * is used as is; an fp32 / fp16 q is split into bf16 hi + lo (|q - hi - lo| <= 2^-17 |q|, two
 * dot products per pair). P is split the same way unless the output is bf16: then P is rounded
 * once to bf16 (2^-9 relative per weight, which averages out below the output's own bf16
 * rounding). The softmax denominator and the LSE always use the fp32 P.
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/mla_attn_internal.h"
#include "kernels/x86/bf16_pack_avx512.h"
#include "kernels/x86/exp_avx512.h"

#define NUMLA_MLA16_INLINE static inline __attribute__((always_inline))

/* acc + Σ pairs a · (the bf16 pair at b, broadcast), the broadcast folded into the instruction
 * (compilers keep it as a separate vpbroadcastd, which needs a register per key in flight and
 * spills the sixteen accumulators). */
NUMLA_MLA16_INLINE __m512 numla_mla16_dpb(__m512 acc, __m512bh a, const uint32_t *b)
{
    __asm__("vdpbf16ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(a), "m"(*b));
    return acc;
}

/* ---- scratch ---------------------------------------------------------------------------- */

typedef struct numla_mla16_layout {
    size_t qhi, qlo, S, phi, plo, rows, stage, zero, red, total;
} numla_mla16_layout;

static size_t numla_mla16_al(size_t n) { return (n + 63) & ~(size_t)63; }

static numla_mla16_layout numla_mla16_layout_of(const numla_mla_attn_args *a)
{
    const size_t w = (size_t)a->kv_lora_rank + (size_t)a->rope_dim, np = (w + 31) / 32 * 16;
    numla_mla16_layout L;
    size_t off = 0;
    L.qhi = off, off += numla_mla16_al(np * 16 * sizeof(uint32_t)); /* (np, 16) bf16 pairs */
    L.qlo = off, off += numla_mla16_al(np * 16 * sizeof(uint32_t));
    L.S = off, off += NUMLA_MLA16_KT * 16 * sizeof(float);          /* (KT, 16) */
    L.phi = off, off += NUMLA_MLA16_KT / 2 * 16 * sizeof(uint32_t); /* (KT / 2, 16) pairs */
    L.plo = off, off += NUMLA_MLA16_KT / 2 * 16 * sizeof(uint32_t);
    L.rows = off, off += numla_mla16_al((NUMLA_MLA16_KT + 1) * sizeof(void *));
    L.stage = off, off += numla_mla16_al(NUMLA_MLA16_TB * np * 2 * sizeof(uint16_t)); /* (16, w) */
    L.zero = off, off += numla_mla16_al((size_t)a->kv_lora_rank * sizeof(uint16_t));
    L.red = off, off += 8 * NUMLA_MLA16_TB * 64; /* (8 rows, 16 keys) zmm sums */
    L.total = off + 64; /* the frame aligns scratch; slack for safety */
    return L;
}

static size_t numla_mla16_scratch_bytes(const numla_mla_attn_args *a)
{
    return numla_mla16_layout_of(a).total;
}

static int numla_mla16_supports(const void *args)
{
    const numla_mla_attn_args *a = args;
    return a->kv_dtype == NUMLA_DTYPE_BF16 && a->kv_lora_rank % 32 == 0 && a->rope_dim % 16 == 0;
}

/* ---- q packing -------------------------------------------------------------------------- */

/* Q[j][r] = pair j of row r (rows >= nrows and dims >= w are zero), hi and, for an fp32 / fp16
 * q, lo = bf16(q - hi). np = w rounded up to 32, halved. */
static void numla_mla16_pack_q(const numla_mla_attn_chunk *c, uint32_t *qhi, uint32_t *qlo)
{
    const numla_mla_attn_args *a = c->a;
    const int64_t w = (int64_t)a->kv_lora_rank + a->rope_dim;
    const int split = a->q_dtype != NUMLA_DTYPE_BF16;
    for (int64_t d0 = 0; d0 < w; d0 += 32) {
        const int64_t n = w - d0 < 32 ? w - d0 : 32; /* 16 or 32 */
        const __mmask16 m0 = 0xffff, m1 = n > 16 ? 0xffff : 0;
        __m512i rh[16], rl[16];
        for (int r = 0; r < 16; r++) {
            rh[r] = rl[r] = _mm512_setzero_si512();
            if (r >= c->nrows)
                continue;
            const size_t base = (size_t)(c->row0 + r) * (size_t)w + (size_t)d0;
            if (!split) {
                rh[r] = _mm512_maskz_loadu_epi16((__mmask32)(n > 16 ? 0xffffffffu : 0xffffu),
                                                 (const uint16_t *)a->q + base);
                continue;
            }
            __m512 x0, x1;
            if (a->q_dtype == NUMLA_DTYPE_F32) {
                x0 = _mm512_maskz_loadu_ps(m0, (const float *)a->q + base);
                x1 = _mm512_maskz_loadu_ps(m1, (const float *)a->q + base + 16);
            } else {
                const uint16_t *h = (const uint16_t *)a->q + base;
                x0 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m0, h));
                x1 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m1, h + 16));
            }
            numla_x86_split_bf16(x0, x1, &rh[r], &rl[r]);
        }
        numla_x86_transpose16(rh);
        for (int i = 0; i < 16; i++)
            _mm512_store_si512((void *)(qhi + (size_t)(d0 / 2 + i) * 16), rh[i]);
        if (split) {
            numla_x86_transpose16(rl);
            for (int i = 0; i < 16; i++)
                _mm512_store_si512((void *)(qlo + (size_t)(d0 / 2 + i) * 16), rl[i]);
        }
    }
}

/* ---- step 1: scores --------------------------------------------------------------------- */

/* S[t][r] = Σ_j Q[j][r] · k_t[j] for 16 keys whose rows are k + t·rs (rs in pairs), np pairs.
 * pf: the rows of the next 16 keys, prefetched one line per pair step (16 rows of rs pairs are
 * np lines when 4·rs = 64·lines per row). */
NUMLA_MLA16_INLINE void numla_mla16_qk16(const uint32_t *qhi, const uint32_t *qlo, int64_t np,
                                          const uint32_t *k, const int64_t rs, float *S,
                                          const char *const *pf, const int split)
{
    __m512 acc[NUMLA_MLA16_TB];
    for (int t = 0; t < NUMLA_MLA16_TB; t++)
        acc[t] = _mm512_setzero_ps();
    const int64_t lpr = rs / 16; /* prefetch lines per row */
    int64_t j = 0;
#define NUMLA_MLA16_QK_STEP                                                                      \
    {                                                                                            \
        const __m512bh qh = (__m512bh)_mm512_load_si512((const void *)(qhi + 16 * j));           \
        for (int t = 0; t < NUMLA_MLA16_TB; t++)                                                 \
            acc[t] = numla_mla16_dpb(acc[t], qh, k + t * rs + j);                              \
        if (split) {                                                                             \
            const __m512bh ql = (__m512bh)_mm512_load_si512((const void *)(qlo + 16 * j));       \
            for (int t = 0; t < NUMLA_MLA16_TB; t++)                                             \
                acc[t] = numla_mla16_dpb(acc[t], ql, k + t * rs + j);                            \
        }                                                                                        \
        j++;                                                                                     \
    }
    if (NUMLA_MLA16_PREFETCH && pf && lpr > 0)
        for (int t = 0; t < NUMLA_MLA16_TB; t++)
            for (int64_t i = 0; i < lpr; i++) {
                _mm_prefetch(pf[t] + 64 * i, _MM_HINT_T0);
                NUMLA_MLA16_QK_STEP
            }
    while (j < np)
        NUMLA_MLA16_QK_STEP
#undef NUMLA_MLA16_QK_STEP
    for (int t = 0; t < NUMLA_MLA16_TB; t++)
        _mm512_store_ps(S + 16 * t, acc[t]);
}

/* Sixteen 16-lane partial sums v[i] -> one vector of their totals, lane i. */
NUMLA_MLA16_INLINE __m512 numla_mla16_sum16(const __m512 *v)
{
    __m512 a[8], b[4], c[2];
    for (int i = 0; i < 8; i++) /* lanes of pairs: (v2i, v2i+1) interleaved by 32-bit word */
        a[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                             _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    for (int i = 0; i < 4; i++) {
        const __m512d x = _mm512_castps_pd(a[2 * i]), y = _mm512_castps_pd(a[2 * i + 1]);
        b[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
    }
    for (int i = 0; i < 2; i++)
        c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0xdd));
    return _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], 0x88), _mm512_shuffle_f32x4(c[0], c[1], 0xdd));
}

/* Scores for a chunk of R <= 8 rows (lanes along d, so no lane idles): S[t][r] = q_r · k_t for
 * the 16 keys kr[0..16), q_r = qh + r·qs (and ql, the lo part, when split), w dims; R x T
 * accumulators in registers, their horizontal sums through red (16 x 8 vectors). The few-row
 * chunks (decode with <= 8 heads a rank) would use R of 16 lanes in numla_mla16_qk16. */
NUMLA_MLA16_INLINE void numla_mla16_qk_few(const uint16_t *qh, const uint16_t *ql, int64_t qs,
                                            int64_t w, const uint16_t *const *kr, float *S,
                                            __m512 *red, const char *const *pf, const int split,
                                            const int R, const int T)
{
    const __mmask32 tail = w % 32 ? 0xffffu : 0xffffffffu; /* w % 32 is 0 or 16 */
    const int64_t wfull = w / 32 * 32;
    for (int t0 = 0; t0 < NUMLA_MLA16_TB; t0 += T) {
        __m512 acc[8][4];
        for (int r = 0; r < R; r++)
            for (int t = 0; t < T; t++)
                acc[r][t] = _mm512_setzero_ps();
        if (NUMLA_MLA16_PREFETCH && pf)
            for (int t = 0; t < T; t++)
                for (int64_t o = 0; o < 2 * w; o += 64)
                    _mm_prefetch(pf[t0 + t] + o, _MM_HINT_T0);
        for (int64_t d = 0; d < w; d += 32) {
            const __mmask32 mk = d < wfull ? 0xffffffffu : tail;
            __m512bh k[4];
            for (int t = 0; t < T; t++)
                k[t] = (__m512bh)_mm512_maskz_loadu_epi16(mk, kr[t0 + t] + d);
            for (int r = 0; r < R; r++) {
                const __m512bh q = (__m512bh)_mm512_maskz_loadu_epi16(mk, qh + r * qs + d);
                for (int t = 0; t < T; t++)
                    acc[r][t] = _mm512_dpbf16_ps(acc[r][t], q, k[t]);
                if (split) {
                    const __m512bh q2 = (__m512bh)_mm512_maskz_loadu_epi16(mk, ql + r * qs + d);
                    for (int t = 0; t < T; t++)
                        acc[r][t] = _mm512_dpbf16_ps(acc[r][t], q2, k[t]);
                }
            }
        }
        for (int r = 0; r < R; r++)
            for (int t = 0; t < T; t++)
                red[r * NUMLA_MLA16_TB + t0 + t] = acc[r][t];
    }
    for (int r = 0; r < R; r++) {
        float tot[16] __attribute__((aligned(64)));
        _mm512_store_ps(tot, numla_mla16_sum16(red + r * NUMLA_MLA16_TB));
        for (int t = 0; t < NUMLA_MLA16_TB; t++)
            S[16 * t + r] = tot[t];
    }
}

/* ---- step 3: P·V ------------------------------------------------------------------------ */

/* Rows [h0, h0 + NH) (NH <= 8) of O (row stride dc, dims permuted inside each 32-dim block) += Σ_pairs
 * P pair · V pair over npairs key pairs; vr[2p], vr[2p + 1] are the pair's rows (a zero row
 * stands in for a missing last key). */
NUMLA_MLA16_INLINE void numla_mla16_pv(float *O, int64_t dc, int h0, const uint32_t *phi,
                                         const uint32_t *plo, int64_t npairs,
                                         const uint16_t *const *vr, const float *corr, int fresh,
                                         int rescale, const int split, const int NH)
{
    for (int64_t d = 0; d < dc; d += 32) {
        __m512 o[8][2];
        for (int h = 0; h < NH; h++) {
            float *Oh = O + (size_t)(h0 + h) * (size_t)dc + d;
            if (fresh) {
                o[h][0] = o[h][1] = _mm512_setzero_ps();
            } else {
                o[h][0] = _mm512_load_ps(Oh);
                o[h][1] = _mm512_load_ps(Oh + 16);
                if (rescale) {
                    const __m512 cv = _mm512_set1_ps(corr[h0 + h]);
                    o[h][0] = _mm512_mul_ps(o[h][0], cv);
                    o[h][1] = _mm512_mul_ps(o[h][1], cv);
                }
            }
        }
        for (int64_t p = 0; p < npairs; p++) {
            const __m512i va = _mm512_loadu_si512((const void *)(vr[2 * p] + d));
            const __m512i vb = _mm512_loadu_si512((const void *)(vr[2 * p + 1] + d));
            const __m512bh lo = (__m512bh)_mm512_unpacklo_epi16(va, vb);
            const __m512bh hi = (__m512bh)_mm512_unpackhi_epi16(va, vb);
            const uint32_t *ph = phi + 16 * p + h0, *pl = plo + 16 * p + h0;
            for (int h = 0; h < NH; h++) {
                o[h][0] = numla_mla16_dpb(o[h][0], lo, ph + h);
                o[h][1] = numla_mla16_dpb(o[h][1], hi, ph + h);
                if (split) {
                    o[h][0] = numla_mla16_dpb(o[h][0], lo, pl + h);
                    o[h][1] = numla_mla16_dpb(o[h][1], hi, pl + h);
                }
            }
        }
        for (int h = 0; h < NH; h++) {
            float *Oh = O + (size_t)(h0 + h) * (size_t)dc + d;
            _mm512_store_ps(Oh, o[h][0]);
            _mm512_store_ps(Oh + 16, o[h][1]);
        }
    }
}

/* Undo the vpunpck{l,h}wd order of rows [0, nrows): in each 32-dim block the first 16 floats
 * hold dims 0-3, 8-11, 16-19, 24-27 and the next 16 dims 4-7, 12-15, 20-23, 28-31. */
static void numla_mla16_unpermute(float *O, int64_t dc, int nrows)
{
    const __m512i i0 = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    const __m512i i1 = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
    for (int r = 0; r < nrows; r++)
        for (int64_t d = 0; d < dc; d += 32) {
            float *p = O + (size_t)r * (size_t)dc + d;
            const __m512 lo = _mm512_load_ps(p), hi = _mm512_load_ps(p + 16);
            _mm512_store_ps(p, _mm512_permutex2var_ps(lo, i0, hi));
            _mm512_store_ps(p + 16, _mm512_permutex2var_ps(lo, i1, hi));
        }
}

/* P of keys (2p, 2p + 1) as bf16 pairs per row lane: phi = bf16(P), plo = bf16(P - phi). */
static void numla_mla16_pack_p(const float *S, int64_t nt, uint32_t *phi, uint32_t *plo, int split)
{
    const __m512i il = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                        23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    for (int64_t t = 0; t < nt; t += 2) {
        const __m512 p0 = _mm512_load_ps(S + 16 * t);
        const __m512 p1 = t + 1 < nt ? _mm512_load_ps(S + 16 * (t + 1)) : _mm512_setzero_ps();
        const __m512i h = (__m512i)_mm512_cvtne2ps_pbh(p1, p0); /* words 0-15: p0, 16-31: p1 */
        _mm512_store_si512((void *)(phi + 8 * t), _mm512_permutexvar_epi16(il, h));
        if (split) {
            const __m512 h0 = _mm512_cvtpbh_ps((__m256bh)_mm512_castsi512_si256(h));
            const __m512 h1 = _mm512_cvtpbh_ps((__m256bh)_mm512_extracti64x4_epi64(h, 1));
            const __m512i l =
                (__m512i)_mm512_cvtne2ps_pbh(_mm512_sub_ps(p1, h1), _mm512_sub_ps(p0, h0));
            _mm512_store_si512((void *)(plo + 8 * t), _mm512_permutexvar_epi16(il, l));
        }
    }
}

/* ---- the chunk kernel ------------------------------------------------------------------- */

/* pfr[t] = the cache row of key min(tk + t, kend - 1) for t < 16; 0 (nothing to prefetch)
 * when tk >= kend. */
static int numla_mla16_pf_rows(const numla_mla_attn_args *a, const int32_t *tab, int64_t tk,
                               int64_t kend, size_t rowel, const char **pfr, const int32_t *keys)
{
    if (tk >= kend)
        return 0;
    const int64_t bs = a->block_size;
    const uint16_t *kv = (const uint16_t *)a->kv_cache;
    for (int t = 0; t < NUMLA_MLA16_TB; t++) {
        int64_t key = tk + t < kend ? tk + t : kend - 1;
        key = keys ? keys[key] : key; /* an index list (c->keys) */
        pfr[t] = (const char *)(kv + ((size_t)tab[key / bs] * (size_t)bs + (size_t)(key % bs)) * rowel);
    }
    return 1;
}

NUMLA_MLA16_INLINE void numla_mla16_chunk_impl(const numla_mla_attn_chunk *c, float *acc, float *m,
                                                float *l, char *s, const int qsplit,
                                                const int psplit)
{
    const numla_mla_attn_args *a = c->a;
    const int64_t dc = a->kv_lora_rank, w = dc + a->rope_dim, np = (w + 31) / 32 * 16;
    const numla_mla16_layout L = numla_mla16_layout_of(a);
    uint32_t *qhi = (uint32_t *)(void *)(s + L.qhi), *qlo = (uint32_t *)(void *)(s + L.qlo);
    float *S = (float *)(void *)(s + L.S);
    uint32_t *phi = (uint32_t *)(void *)(s + L.phi), *plo = (uint32_t *)(void *)(s + L.plo);
    const uint16_t **rows = (const uint16_t **)(void *)(s + L.rows);
    uint16_t *stage = (uint16_t *)(void *)(s + L.stage), *zero = (uint16_t *)(void *)(s + L.zero);

    int32_t lim32[16] __attribute__((aligned(64)));
    int64_t kend = c->k0;
    for (int r = 0; r < 16; r++) {
        const int64_t lr = r < c->nrows ? c->lim[r] : c->k0;
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
    const int32_t *tab = a->block_tables + (int64_t)c->seq * a->max_blocks_per_seq;
    const int64_t bs = a->block_size;
    const uint16_t *kv = (const uint16_t *)a->kv_cache;
    const size_t rowel = (size_t)w; /* bf16 elements per cache row */
    if (NUMLA_MLA16_PREFETCH) { /* the first keys' rows arrive while q is packed */
        const int64_t n0 = kend - c->k0 < NUMLA_MLA16_TB ? kend - c->k0 : NUMLA_MLA16_TB;
        for (int64_t i = c->k0; i < c->k0 + n0; i++) {
            const int64_t t = c->keys ? c->keys[i] : i;
            const char *r = (const char *)(kv + ((size_t)tab[t / bs] * (size_t)bs + (size_t)(t % bs)) * rowel);
            for (size_t o = 0; o < rowel * sizeof(uint16_t); o += 64)
                _mm_prefetch(r + o, _MM_HINT_T0);
        }
    }
    /* few rows: q as plain rows (a bf16 q in place, else split into hi, lo rows) */
    const int few = c->nrows <= 8;
    const uint16_t *fqh = NULL, *fql = NULL;
    int64_t fqs = w;
    if (!few) {
        if (!c->q_ready)
            numla_mla16_pack_q(c, qhi, qlo);
    } else if (!qsplit) {
        fqh = (const uint16_t *)a->q + (size_t)c->row0 * (size_t)w;
    } else {
        uint16_t *h = (uint16_t *)(void *)qhi, *lo = (uint16_t *)(void *)qlo;
        fqs = np * 2;
        for (int32_t r = 0; r < (c->q_ready ? 0 : c->nrows); r++)
            for (int64_t d = 0; d < w; d += 32) {
                const size_t base = (size_t)(c->row0 + r) * (size_t)w + (size_t)d;
                const __mmask16 m1 = w - d > 16 ? 0xffff : 0;
                __m512 x0, x1;
                if (a->q_dtype == NUMLA_DTYPE_F32) {
                    x0 = _mm512_loadu_ps((const float *)a->q + base);
                    x1 = _mm512_maskz_loadu_ps(m1, (const float *)a->q + base + 16);
                } else {
                    const uint16_t *hp = (const uint16_t *)a->q + base;
                    x0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)hp));
                    x1 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m1, hp + 16));
                }
                __m512i vh, vl;
                numla_x86_split_bf16(x0, x1, &vh, &vl);
                _mm512_storeu_si512((void *)(h + (size_t)r * (size_t)fqs + d), vh);
                _mm512_storeu_si512((void *)(lo + (size_t)r * (size_t)fqs + d), vl);
            }
        fqh = h, fql = lo;
    }
    memset(zero, 0, (size_t)dc * sizeof(uint16_t));
    if (np * 2 > w) /* w % 32 == 16: the staged rows' last 16 dims meet zero q pairs */
        memset(stage, 0, NUMLA_MLA16_TB * (size_t)np * 2 * sizeof(uint16_t));

    const __m512i limv = _mm512_load_si512(lim32);
    float corr[16] __attribute__((aligned(64)));
    /* rows are read in place when a 16-key block sits in one cache block and w is whole pairs
     * of 32 (np pairs a row); otherwise staged with the same stride of np pairs */
    const int inplace_ok = np * 2 == w;
    int fresh = 1;
    for (int64_t t0 = c->k0; t0 < kend; t0 += NUMLA_MLA16_KT) {
        const int64_t nt = kend - t0 < NUMLA_MLA16_KT ? kend - t0 : NUMLA_MLA16_KT;
        if (c->keys) { /* an index list: each key's own block */
            for (int64_t i = 0; i < nt; i++) {
                const int64_t t = c->keys[t0 + i];
                rows[i] = kv + ((size_t)tab[t / bs] * (size_t)bs + (size_t)(t % bs)) * rowel;
            }
            rows[nt] = zero;
        } else {
            int64_t bi = t0 / bs, off = t0 % bs;
            for (int64_t i = 0; i < nt; i++) {
                rows[i] = kv + ((size_t)tab[bi] * (size_t)bs + (size_t)off) * rowel;
                if (++off == bs)
                    off = 0, bi++;
            }
            rows[nt] = zero; /* the partner of an odd last key */
        }
        /* 1. scores, sixteen keys at a time */
        for (int64_t i = 0; i < nt; i += NUMLA_MLA16_TB) {
            const int64_t n = nt - i < NUMLA_MLA16_TB ? nt - i : NUMLA_MLA16_TB;
            if (few) {
                const uint16_t *kr[NUMLA_MLA16_TB];
                const char *pfr[NUMLA_MLA16_TB];
                for (int t = 0; t < NUMLA_MLA16_TB; t++)
                    kr[t] = rows[i + (t < n ? t : n - 1)]; /* past the end: a repeat, masked later */
                if (!numla_mla16_pf_rows(a, tab, t0 + i + NUMLA_MLA16_PF_KEYS, kend, rowel, pfr, c->keys))
                    for (int t = 0; t < NUMLA_MLA16_TB; t++)
                        pfr[t] = (const char *)kr[t];
                __m512 *red = (__m512 *)(void *)(s + L.red);
#define NUMLA_MLA16_FEW(R, T)                                                                    \
    case R:                                                                                      \
        if (qsplit)                                                                              \
            numla_mla16_qk_few(fqh, fql, fqs, w, kr, S + 16 * i, red, pfr, 1, R, T);             \
        else                                                                                     \
            numla_mla16_qk_few(fqh, fql, fqs, w, kr, S + 16 * i, red, pfr, 0, R, T);             \
        break;
                switch (c->nrows) {
                    NUMLA_MLA16_FEW(1, 4) NUMLA_MLA16_FEW(2, 4) NUMLA_MLA16_FEW(3, 4)
                    NUMLA_MLA16_FEW(4, 4) NUMLA_MLA16_FEW(5, 4) NUMLA_MLA16_FEW(6, 4)
                    NUMLA_MLA16_FEW(7, 2) default: NUMLA_MLA16_FEW(8, 2)
                }
#undef NUMLA_MLA16_FEW
                continue;
            }
            int inplace = inplace_ok && n == NUMLA_MLA16_TB;
            for (int64_t t = 1; inplace && t < n; t++)
                inplace = rows[i + t] == rows[i] + (size_t)t * rowel;
            const uint16_t *k = rows[i];
            if (!inplace) {
                for (int64_t t = 0; t < NUMLA_MLA16_TB; t++) {
                    uint16_t *dst = stage + (size_t)t * (size_t)np * 2;
                    if (t < n)
                        memcpy(dst, rows[i + t], rowel * sizeof(uint16_t));
                    else
                        memset(dst, 0, rowel * sizeof(uint16_t));
                }
                k = stage;
            }
            /* prefetch the sixteen rows NUMLA_MLA16_PF_KEYS keys ahead */
            const char *pfr[NUMLA_MLA16_TB];
            const char *const *pf =
                numla_mla16_pf_rows(a, tab, t0 + i + NUMLA_MLA16_PF_KEYS, kend, rowel, pfr, c->keys) ? pfr : NULL;
            if (np == 288)
                numla_mla16_qk16(qhi, qlo, 288, (const uint32_t *)(const void *)k, 288, S + 16 * i,
                                 pf, qsplit);
            else
                numla_mla16_qk16(qhi, qlo, np, (const uint32_t *)(const void *)k, np, S + 16 * i,
                                 pf, qsplit);
        }
        /* 2. online softmax over the tile */
        __m512 tmax = _mm512_set1_ps(-INFINITY);
        const __m512 scale = _mm512_set1_ps(a->scale);
        for (int64_t i = 0; i < nt; i++) {
            const __mmask16 keep = _mm512_cmpgt_epi32_mask(limv, _mm512_set1_epi32((int32_t)(t0 + i)));
            const __m512 si = _mm512_mask_mul_ps(_mm512_set1_ps(-INFINITY), keep,
                                                 _mm512_load_ps(S + 16 * i), scale);
            _mm512_store_ps(S + 16 * i, si);
            tmax = _mm512_max_ps(tmax, si);
        }
        const __m512 mnew = _mm512_max_ps(mv, tmax);
        /* a row with no key yet keeps m = -inf; subtract 0 there so e^(-inf - 0) = 0 */
        const __m512 muse = _mm512_mask_mov_ps(
            mnew, _mm512_cmp_ps_mask(mnew, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ), _mm512_setzero_ps());
        const __m512 cv = numla_exp512(_mm512_sub_ps(mv, muse));
        const int rescale = _mm512_cmp_ps_mask(cv, _mm512_set1_ps(1.0f), _CMP_NEQ_UQ) != 0;
        _mm512_store_ps(corr, cv);
        __m512 psum = _mm512_setzero_ps();
        for (int64_t i = 0; i < nt; i++) {
            const __m512 p = numla_exp512(_mm512_sub_ps(_mm512_load_ps(S + 16 * i), muse));
            _mm512_store_ps(S + 16 * i, p);
            psum = _mm512_add_ps(psum, p);
        }
        lv = _mm512_fmadd_ps(lv, cv, psum);
        mv = mnew;
        /* 3. P·V */
        numla_mla16_pack_p(S, nt, phi, plo, psplit);
        for (int h0 = 0; h0 < c->nrows; h0 += 8) {
            const int nh = c->nrows - h0 < 8 ? c->nrows - h0 : 8;
#define NUMLA_MLA16_PV(NH)                                                                       \
    case NH:                                                                                     \
        numla_mla16_pv(acc, dc, h0, phi, plo, (nt + 1) / 2, rows, corr, fresh, rescale, psplit, NH); \
        break;
            switch (nh) {
                NUMLA_MLA16_PV(1) NUMLA_MLA16_PV(2) NUMLA_MLA16_PV(3) NUMLA_MLA16_PV(4)
                NUMLA_MLA16_PV(5) NUMLA_MLA16_PV(6) NUMLA_MLA16_PV(7) default: NUMLA_MLA16_PV(8)
            }
#undef NUMLA_MLA16_PV
        }
        fresh = 0;
    }
    numla_mla16_unpermute(acc, dc, c->nrows);
    float mo[16], lo[16];
    _mm512_storeu_ps(mo, mv);
    _mm512_storeu_ps(lo, lv);
    for (int r = 0; r < c->nrows; r++)
        m[r] = mo[r], l[r] = lo[r];
}

static void numla_mla16_chunk(const numla_mla_attn_chunk *c, float *acc, float *m, float *l,
                              void *scratch)
{
    char *s = (char *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    const int qsplit = c->a->q_dtype != NUMLA_DTYPE_BF16;
    const int psplit = c->a->out_dtype != NUMLA_DTYPE_BF16;
    if (qsplit) {
        if (psplit)
            numla_mla16_chunk_impl(c, acc, m, l, s, 1, 1);
        else
            numla_mla16_chunk_impl(c, acc, m, l, s, 1, 0);
    } else {
        if (psplit)
            numla_mla16_chunk_impl(c, acc, m, l, s, 0, 1);
        else
            numla_mla16_chunk_impl(c, acc, m, l, s, 0, 0);
    }
}

const numla_mla_attn_kernel numla_mla_attn_kernel_avx512bf16 = {
    .v = {"avx512bf16", 0, numla_mla16_supports},
    .chunk = numla_mla16_chunk,
    .scratch_bytes = numla_mla16_scratch_bytes,
};
