/* kernels/x86/transpose16_avx512.h — a 16 x 16 transpose of 32-bit words in zmm registers:
 * the AMX kernels' tile layouts (kernels/x86/bf16_pack_avx512.h) and the VNNI panel GEMMs'
 * k-quad interleave (16 rows of 4-byte quads into one vector per quad column). Include from
 * files built with AVX-512 flags. */
#ifndef NUMLA_KERNELS_X86_TRANSPOSE16_AVX512_H
#define NUMLA_KERNELS_X86_TRANSPOSE16_AVX512_H

#include <immintrin.h>

/* r[i] word e -> r[e] word i: a 16 x 16 transpose of 32-bit words, in place. */
static inline __attribute__((always_inline)) void numla_x86_transpose16(__m512i r[16])
{
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
        r[i + 4] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0x88);
        r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
        r[i + 12] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0xdd);
    }
}

#endif
