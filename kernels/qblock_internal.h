/* kernels/qblock_internal.h — private to the block-quantized linear kernels (kernels/qblock.c,
 * kernels/ref/qblock_ref.c, kernels/x86/qblock_<isa>.c): the per-ISA entry points of the
 * dispatch table and the helpers they share. */
#ifndef NUMLA_KERNELS_QBLOCK_INTERNAL_H
#define NUMLA_KERNELS_QBLOCK_INTERNAL_H

#include "kernels/qblock.h"

#include <string.h>

/* One entry point per (level, type). Arguments are validated by kernels/qblock.c. */
typedef void (*numla_qblock_forward_fn)(const numla_qblock_weight *w, int64_t m, const float *x,
                                        int64_t ldx, float *y, int64_t ldy, int accumulate);

void numla_qblock_forward_ref(const numla_qblock_weight *w, int64_t m, const float *x, int64_t ldx,
                              float *y, int64_t ldy, int accumulate);
/* AVX-512 (kernels/x86/qblock_avx512.c): every type. */
void numla_qblock_forward_avx512(const numla_qblock_weight *w, int64_t m, const float *x, int64_t ldx,
                                 float *y, int64_t ldy, int accumulate);

/* One block of `type` -> its `block` floats (the reference rounding of kernels/qblock.h). */
void numla_qblock_dequant_block_ref(numla_qblock_type type, const uint8_t *b, float *out);

/* IQ4_NL / IQ4_XS code book. */
extern const int8_t numla_qblock_iq4_values[16];

/* IEEE half -> float, exactly (subnormals, inf and NaN included). */
static inline float numla_qblock_f16_(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 31, mant = h & 1023;
    uint32_t bits;
    if (e == 0) {
        if (mant == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int sh = 0;
            uint32_t mm = mant;
            while (!(mm & 1024)) {
                mm <<= 1;
                sh++;
            }
            bits = sign | (uint32_t)(127 - 15 - sh + 1) << 23 | (mm & 1023) << 13;
        }
    } else if (e == 31) {
        bits = sign | 0x7f800000u | mant << 13;
    } else {
        bits = sign | (e + 127 - 15) << 23 | mant << 13;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Q4_K / Q5_K: 6-bit scale and min of sub-block j from the 12 packed bytes. */
static inline void numla_qblock_k4_scale_min_(const uint8_t *s, int j, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* Q3_K: signed 6-bit scale of group g (0..15), minus its bias of 32. */
static inline int numla_qblock_q3k_scale_(const uint8_t *s, int g)
{
    int lo = (s[g % 8] >> (4 * (g / 8))) & 15, hi = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
    return (lo | hi << 4) - 32;
}

/* Split [0, total) into nth near-equal ranges; range of thread ith. */
static inline void numla_qblock_split_(int64_t total, int ith, int nth, int64_t *lo, int64_t *hi)
{
    int64_t q = total / nth, r = total % nth;
    *lo = ith * q + (ith < r ? ith : r);
    *hi = *lo + q + (ith < r ? 1 : 0);
}

#endif
