/* kernels/x86/kv_write_avx2.c — concat_and_cache_mla, AVX2 variant: 8 elements per step, a
 * scalar tail through common/dtype.h; conversions bit-identical to the scalar ones (see
 * kv_write_avx512.c for why bf16 rounds in integers and NaN lanes are rewritten). */
#include "kernels/kv_write_internal.h"

#include <immintrin.h>
#include <string.h>

static inline __m256 numla_kvw256_load(const void *p, numla_dtype t, int64_t i)
{
    switch (t) {
    case NUMLA_DTYPE_F32: return _mm256_loadu_ps((const float *)p + i);
    case NUMLA_DTYPE_BF16: {
        __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    default: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i)));
    }
}

/* Eight u32 lanes holding 16-bit values -> eight u16 in one 128-bit register. */
static inline __m128i numla_kvw256_pack(__m256i r)
{
    __m256i p = _mm256_packus_epi32(r, r); /* per 128-bit lane: [r0..3 r0..3] [r4..7 r4..7] */
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(p, 0x08));
}

static inline void numla_kvw256_store(void *p, numla_dtype t, int64_t i, __m256 v)
{
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    const __m256i u = _mm256_castps_si256(v);
    switch (t) {
    case NUMLA_DTYPE_F32: _mm256_storeu_ps((float *)p + i, v); break;
    case NUMLA_DTYPE_BF16: {
        __m256i hi = _mm256_srli_epi32(u, 16);
        __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff),
                                                         _mm256_and_si256(hi, _mm256_set1_epi32(1))));
        r = _mm256_srli_epi32(r, 16);
        r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
        _mm_storeu_si128((__m128i *)((uint16_t *)p + i), numla_kvw256_pack(r));
        break;
    }
    default: {
        __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m128i qnan = _mm_or_si128(_mm_and_si128(numla_kvw256_pack(_mm256_srli_epi32(u, 16)),
                                                  _mm_set1_epi16((short)0x8000)),
                                    _mm_set1_epi16(0x7e00));
        h = _mm_blendv_epi8(h, qnan, numla_kvw256_pack(_mm256_srli_epi32(nan, 16)));
        _mm_storeu_si128((__m128i *)((uint16_t *)p + i), h);
        break;
    }
    }
}

static void numla_kvw256_row(void *dst, numla_dtype dt, const void *src, numla_dtype st, int64_t n)
{
    if (dt == st) {
        memcpy(dst, src, (size_t)n * numla_dtype_size(dt));
        return;
    }
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        numla_kvw256_store(dst, dt, i, numla_kvw256_load(src, st, i));
    for (; i < n; i++)
        numla_store_f32(dst, dt, (size_t)i, numla_load_f32(src, st, (size_t)i));
}

void numla_kv_write_avx2(const numla_kv_write_args *a, int64_t t_begin, int64_t t_end)
{
    const size_t ss = numla_dtype_size(a->src_dtype), ks = numla_dtype_size(a->kv_dtype);
    const size_t row = (size_t)a->kv_lora_rank + (size_t)a->rope_dim;
    for (int64_t t = t_begin; t < t_end; t++) {
        int64_t slot = a->slot_mapping[t];
        if (slot < 0)
            continue;
        char *dst = (char *)a->kv_cache + (size_t)slot * row * ks;
        numla_kvw256_row(dst, a->kv_dtype, (const char *)a->kv_c + (size_t)t * (size_t)a->kv_c_stride * ss,
                         a->src_dtype, a->kv_lora_rank);
        if (a->rope_dim > 0)
            numla_kvw256_row(dst + (size_t)a->kv_lora_rank * ks, a->kv_dtype,
                             (const char *)a->k_pe + (size_t)t * (size_t)a->k_pe_stride * ss,
                             a->src_dtype, a->rope_dim);
    }
}
