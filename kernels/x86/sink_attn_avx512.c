/* kernels/x86/sink_attn_avx512.c — AVX-512 sink attention (kernels/sink_attn.h): one item is
 * a query and up to 16 of its heads. It walks the query's rows (window, then listed rows) in
 * tiles of NUMLA_MLA_KT row pointers and runs the MLA avx512 kernel's own steps on them
 * (kernels/x86/mla_attn_avx512_internal.h: numla_mla_avx512_qk_f32, _pv_f32): Q·K with lanes
 * along d and a 16-way transpose-add (each row loaded once for all heads), the online softmax in
 * registers, P·V with every head's accumulators in registers so each row element is loaded once
 * per item. bf16 rows (the kind NUMLA_SINK_ATTN_BF16) are read in place and widened in
 * registers by the same steps (_bf16), each once per item. The value is the whole row (the MLA kernel's Dc = D, Dr = 0); the running maximum starts at each head's sink
 * with weight 1 (e^(sink - sink)), so the sink dilutes without a value. */
#include "kernels/x86/mla_attn_avx512_internal.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/blocking.h"
#include "kernels/x86/exp_avx512.h"
#include "kernels/sink_attn_internal.h"

/* Scratch: q packed (D / 16, 16 heads, 16), scores (KT, 16), KT row pointers, O (16, D). */
static size_t numla_sink_attn_avx512_scratch(const numla_sink_attn_args *a)
{
    const size_t D = (size_t)a->head_dim;
    return D * 16 * sizeof(float) + NUMLA_MLA_KT * 16 * sizeof(float) +
           ((NUMLA_MLA_KT * sizeof(void *) + 63) & ~(size_t)63) + 16 * D * sizeof(float);
}

static int numla_sink_attn_avx512_applies(const void *call)
{
    const numla_sink_attn_args *a = call;
    return a->head_dim % 32 == 0;
}

/* One item over fp32 (bf16 0) or bf16 (bf16 1) rows. */
static inline __attribute__((always_inline)) void
numla_sink_attn_avx512_rows(const numla_sink_attn_args *a, int64_t t, int32_t h0, int32_t nh,
                            void *scratch, const int bf16)
{
    const int64_t D = a->head_dim, H = a->num_heads;
    const int64_t n = (int64_t)a->win_len[t] + a->ent_len[t];
    float *qr = scratch;                                   /* (D / 16, 16, 16) */
    float *S = qr + D * 16;                                /* (KT, 16) */
    const char **rows = (const char **)(void *)(S + NUMLA_MLA_KT * 16);
    float *O = (float *)(void *)((char *)rows + ((NUMLA_MLA_KT * sizeof(void *) + 63) & ~(size_t)63));
    memset(qr, 0, sizeof(float) * (size_t)(D * 16));
    for (int32_t r = 0; r < nh; r++) {
        const float *q = a->q + (t * H + h0 + r) * D;
        for (int64_t d = 0; d < D; d += 16)
            _mm512_store_ps(qr + d * 16 + r * 16, _mm512_loadu_ps(q + d));
    }
    float sk[16] __attribute__((aligned(64))) = {0}, corr[16] __attribute__((aligned(64)));
    for (int32_t r = 0; r < nh; r++)
        sk[r] = a->sink[h0 + r];
    __m512 mv = _mm512_load_ps(sk), lv = _mm512_set1_ps(1.0f);
    const __m512 scale = _mm512_set1_ps(a->scale);
    int fresh = 1;
    for (int64_t t0 = 0; t0 < n; t0 += NUMLA_MLA_KT) {
        const int64_t nt = n - t0 < NUMLA_MLA_KT ? n - t0 : NUMLA_MLA_KT;
        for (int64_t i = 0; i < nt; i++)
            rows[i] = numla_sink_attn_row(a, t, t0 + i, bf16 ? 2 : 4);
        if (bf16)
            numla_mla_avx512_qk_bf16(qr, D, rows, nt, S, nh);
        else
            numla_mla_avx512_qk_f32(qr, D, rows, nt, S, nh);
        __m512 tmax = _mm512_set1_ps(-INFINITY);
        for (int64_t i = 0; i < nt; i++) {
            const __m512 si = _mm512_mul_ps(_mm512_load_ps(S + 16 * i), scale);
            _mm512_store_ps(S + 16 * i, si);
            tmax = _mm512_max_ps(tmax, si);
        }
        const __m512 mnew = _mm512_max_ps(mv, tmax); /* finite: it starts at the sink */
        const __m512 cv = numla_exp512(_mm512_sub_ps(mv, mnew));
        const int rescale = _mm512_cmp_ps_mask(cv, _mm512_set1_ps(1.0f), _CMP_NEQ_UQ) != 0;
        _mm512_store_ps(corr, cv);
        __m512 psum = _mm512_setzero_ps();
        for (int64_t i = 0; i < nt; i++) {
            const __m512 p = numla_exp512(_mm512_sub_ps(_mm512_load_ps(S + 16 * i), mnew));
            _mm512_store_ps(S + 16 * i, p);
            psum = _mm512_add_ps(psum, p);
        }
        lv = _mm512_fmadd_ps(lv, cv, psum);
        mv = mnew;
        if (bf16)
            numla_mla_avx512_pv_bf16(O, D, S, corr, fresh, rescale, (const void *const *)rows, nt,
                                     nh);
        else
            numla_mla_avx512_pv_f32(O, D, S, corr, fresh, rescale, (const void *const *)rows, nt,
                                    nh);
        fresh = 0;
    }
    float lsum[16] __attribute__((aligned(64)));
    _mm512_store_ps(lsum, lv);
    for (int32_t r = 0; r < nh; r++) {
        float *o = a->out + (t * H + h0 + r) * D;
        if (fresh) { /* no row: zeros */
            memset(o, 0, sizeof(float) * (size_t)D);
            continue;
        }
        const __m512 inv = _mm512_set1_ps(1.0f / lsum[r]);
        for (int64_t d = 0; d < D; d += 16)
            _mm512_storeu_ps(o + d, _mm512_mul_ps(_mm512_load_ps(O + r * D + d), inv));
    }
}

static void numla_sink_attn_avx512_item(const numla_sink_attn_args *a, int64_t t, int32_t h0,
                                        int32_t nh, void *scratch)
{
    numla_sink_attn_avx512_rows(a, t, h0, nh, scratch, 0);
}

static void numla_sink_attn_avx512_item_bf16(const numla_sink_attn_args *a, int64_t t, int32_t h0,
                                             int32_t nh, void *scratch)
{
    numla_sink_attn_avx512_rows(a, t, h0, nh, scratch, 1);
}

const numla_sink_attn_kernel numla_sink_attn_kernel_avx512 = {
    .v = {"avx512", 0, numla_sink_attn_avx512_applies},
    .item = numla_sink_attn_avx512_item,
    .scratch_bytes = numla_sink_attn_avx512_scratch,
};

const numla_sink_attn_kernel numla_sink_attn_kernel_avx512_bf16 = {
    .v = {"avx512_bf16", 0, numla_sink_attn_avx512_applies},
    .item = numla_sink_attn_avx512_item_bf16,
    .scratch_bytes = numla_sink_attn_avx512_scratch,
};
