/* kernels/x86/qblock_avx2_internal.h — the weight-row walk the two AVX2 levels of the
 * block-quantized linear share: Q8 activation mode (kernels/x86/qblock_avx2.c) and F32 mode
 * (kernels/x86/qblock_f32_avx2.c). Private to those two files. */
#ifndef NUMLA_KERNELS_X86_QBLOCK_AVX2_INTERNAL_H
#define NUMLA_KERNELS_X86_QBLOCK_AVX2_INTERNAL_H

#include "kernels/qblock_internal.h"

/* y's values of weight row r against x rows [i0, i0 + mr) into v[0 .. mr); job: the level's
 * forward call. */
typedef void (*numla_qblock_avx2_row_fn)(const void *job, int64_t r, int64_t i0, int mr, float *v);

/* Thread ith of nth's share of w's rows against m x rows, y's row i at y + i · ldy (added to
 * where accumulate). The rows go in chunks of about NUMLA_QBLOCK_AVX2_CHUNK bytes, kept in L2
 * while every tile of up to NUMLA_QBLOCK_AVX2_MR x rows passes. Inlined with its level's row,
 * a constant, which then inlines too. */
static inline __attribute__((always_inline)) void
numla_qblock_avx2_walk_(const numla_qblock_weight *w, int64_t m, float *y, int64_t ldy, int accumulate, int ith,
                        int nth, numla_qblock_avx2_row_fn row, const void *job)
{
    int64_t lo, hi;
    numla_qblock_split_(w->n, ith, nth, &lo, &hi);
    int64_t chunk = NUMLA_QBLOCK_AVX2_CHUNK / w->ld;
    if (chunk < 1)
        chunk = 1;
    for (int64_t r0 = lo; r0 < hi; r0 += chunk) {
        const int64_t r1 = r0 + chunk < hi ? r0 + chunk : hi;
        for (int64_t i0 = 0; i0 < m; i0 += NUMLA_QBLOCK_AVX2_MR) {
            const int mr = m - i0 < NUMLA_QBLOCK_AVX2_MR ? (int)(m - i0) : NUMLA_QBLOCK_AVX2_MR;
            for (int64_t r = r0; r < r1; r++) {
                float v[NUMLA_QBLOCK_AVX2_MR];
                row(job, r, i0, mr, v);
                for (int i = 0; i < mr; i++) {
                    float *yo = y + (i0 + i) * ldy + r;
                    *yo = accumulate ? *yo + v[i] : v[i];
                }
            }
        }
    }
}

#endif
