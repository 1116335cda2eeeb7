/* kernels/x86/mla_attn_avx2_internal.h — the Q·Kᵀ tile the AVX2 attention kernels share: the
 * MLA kernel (kernels/x86/mla_attn_avx2.c) and DeepSeek-V4's window + compressed-row kernel
 * (kernels/x86/sink_attn_avx2.c) score their keys with it, heads in the lanes. Private to the
 * x86 AVX2 attention files. */
#ifndef NUMLA_KERNELS_X86_MLA_ATTN_AVX2_INTERNAL_H
#define NUMLA_KERNELS_X86_MLA_ATTN_AVX2_INTERNAL_H

#include <immintrin.h>
#include <stdint.h>

/* S[i][0..16) = Σ_d qt[d][0..16) · row_i[d], NT keys, HV = 1 or 2 vectors of 8 rows. */
static inline __attribute__((always_inline)) void numla_mla_avx2_qk(const float *qt, int64_t width, const float *const *rows,
                                     float *S, const int NT, const int HV)
{
    __m256 acc[8][2];
    for (int i = 0; i < NT; i++)
        for (int h = 0; h < HV; h++)
            acc[i][h] = _mm256_setzero_ps();
    for (int64_t d = 0; d < width; d++) {
        __m256 q0 = _mm256_load_ps(qt + d * 16), q1 = q0;
        if (HV > 1)
            q1 = _mm256_load_ps(qt + d * 16 + 8);
        for (int i = 0; i < NT; i++) {
            __m256 k = _mm256_broadcast_ss(rows[i] + d);
            acc[i][0] = _mm256_fmadd_ps(q0, k, acc[i][0]);
            if (HV > 1)
                acc[i][1] = _mm256_fmadd_ps(q1, k, acc[i][1]);
        }
    }
    for (int i = 0; i < NT; i++) {
        _mm256_store_ps(S + 16 * i, acc[i][0]);
        _mm256_store_ps(S + 16 * i + 8, HV > 1 ? acc[i][1] : _mm256_setzero_ps());
    }
}

#endif
