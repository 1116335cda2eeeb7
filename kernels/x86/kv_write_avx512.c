/* kernels/x86/kv_write_avx512.c — concat_and_cache_mla, AVX-512 variant: 16 elements per step,
 * masked tails, conversions bit-identical to the scalar ones of common/dtype.h (bf16 rounding
 * is done in integers, because vcvtneps2bf16 flushes subnormal inputs to zero; NaN lanes are
 * rewritten to the scalar code's quiet NaN). */
#include "kernels/kv_write_internal.h"

#include <immintrin.h>
#include <string.h>

static inline __m512 numla_kvw512_load(const void *p, numla_dtype t, int64_t i, __mmask16 m)
{
    switch (t) {
    case NUMLA_DTYPE_F32: return _mm512_maskz_loadu_ps(m, (const float *)p + i);
    case NUMLA_DTYPE_BF16: {
        __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)p + i);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    default: return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)p + i));
    }
}

static inline void numla_kvw512_store(void *p, numla_dtype t, int64_t i, __m512 v, __mmask16 m)
{
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    const __m512i u = _mm512_castps_si512(v);
    switch (t) {
    case NUMLA_DTYPE_F32: _mm512_mask_storeu_ps((float *)p + i, m, v); break;
    case NUMLA_DTYPE_BF16: {
        __m512i hi = _mm512_srli_epi32(u, 16);
        __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                                         _mm512_and_si512(hi, _mm512_set1_epi32(1))));
        r = _mm512_srli_epi32(r, 16);
        r = _mm512_mask_or_epi32(r, nan, hi, _mm512_set1_epi32(0x40));
        _mm256_mask_storeu_epi16((uint16_t *)p + i, m, _mm512_cvtepi32_epi16(r));
        break;
    }
    default: {
        __m512i h = _mm512_cvtepu16_epi32(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        __m512i qnan = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x8000)),
                                       _mm512_set1_epi32(0x7e00));
        h = _mm512_mask_mov_epi32(h, nan, qnan);
        _mm256_mask_storeu_epi16((uint16_t *)p + i, m, _mm512_cvtepi32_epi16(h));
        break;
    }
    }
}

static void numla_kvw512_row(void *dst, numla_dtype dt, const void *src, numla_dtype st, int64_t n)
{
    if (dt == st) {
        memcpy(dst, src, (size_t)n * numla_dtype_size(dt));
        return;
    }
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        numla_kvw512_store(dst, dt, i, numla_kvw512_load(src, st, i, 0xffff), 0xffff);
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        numla_kvw512_store(dst, dt, i, numla_kvw512_load(src, st, i, m), m);
    }
}

void numla_kv_write_avx512(const numla_kv_write_args *a, int64_t t_begin, int64_t t_end)
{
    const size_t ss = numla_dtype_size(a->src_dtype), ks = numla_dtype_size(a->kv_dtype);
    const size_t row = (size_t)a->kv_lora_rank + (size_t)a->rope_dim;
    for (int64_t t = t_begin; t < t_end; t++) {
        int64_t slot = a->slot_mapping[t];
        if (slot < 0)
            continue;
        char *dst = (char *)a->kv_cache + (size_t)slot * row * ks;
        numla_kvw512_row(dst, a->kv_dtype, (const char *)a->kv_c + (size_t)t * (size_t)a->kv_c_stride * ss,
                         a->src_dtype, a->kv_lora_rank);
        if (a->rope_dim > 0)
            numla_kvw512_row(dst + (size_t)a->kv_lora_rank * ks, a->kv_dtype,
                             (const char *)a->k_pe + (size_t)t * (size_t)a->k_pe_stride * ss,
                             a->src_dtype, a->rope_dim);
    }
}
