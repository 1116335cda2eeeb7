/* tests/unit/kernels/qblock_check.h — random blocks of every encoding for the qblock and
 * qblock_amx_emu suites (shared, header-only): random bytes with finite fp16 scales. */
#ifndef NUMLA_TESTS_QBLOCK_CHECK_H
#define NUMLA_TESTS_QBLOCK_CHECK_H

#include "test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/qblock.h"
#include "kernels/qblock_types.h"

/* Byte offsets of each encoding's fp16 scale fields in a block (its row, kernels/qblock_types.h). */
static inline int qb_halves(numla_qblock_type t, int out[2])
{
    const numla_qblock_type_row *row = numla_qblock_type_row_get(t);
    for (int i = 0; i < row->f16_count; i++)
        out[i] = row->f16_at[i];
    return row->f16_count;
}

/* n rows of k elements of random blocks, scales finite fp16 of either sign in [2^-7, 2^-4). */
static inline uint8_t *qb_random(numla_qblock_type t, int64_t n, int64_t k, numla_test_rng *rng, int64_t *row_bytes)
{
    const numla_qblock_info *info = numla_qblock_info_get(t);
    const int64_t nb = n * k / info->block;
    uint8_t *p = malloc((size_t)(nb * info->bytes));
    for (int64_t i = 0; i < nb * info->bytes; i++)
        p[i] = (uint8_t)numla_test_rng_u64(rng);
    int off[2];
    const int nh = qb_halves(t, off);
    for (int64_t b = 0; b < nb; b++)
        for (int h = 0; h < nh; h++) {
            uint64_t r = numla_test_rng_u64(rng);
            uint16_t bits = (uint16_t)(((r & 1) << 15) | ((8 + (r >> 1) % 3) << 10) | ((r >> 8) & 1023));
            memcpy(p + b * info->bytes + off[h], &bits, 2);
        }
    if (numla_qblock_type_row_get(t)->e8m0) /* MXFP4: d = 2^(e - 128) in [2^-7, 2^-4] */
        for (int64_t b = 0; b < nb; b++)
            p[b * info->bytes] = (uint8_t)(121 + numla_test_rng_u64(rng) % 4);
    *row_bytes = k / info->block * info->bytes;
    return p;
}

/* Row i, output r of y = x · Wᵀ (+ y0 where acc) against the dequantized weights wd (n x k) in
 * double: whether it is within kernels/qblock.h's F32-mode bound (K + 2) u Σ|w x| (+ |y0|);
 * *ref and *bound say what it was held to. */
static inline int qb_f32_within(const float *wd, int64_t k, const float *x, int64_t ldx, const float *y0,
                                int64_t ldy, int acc, int64_t i, int64_t r, float got, double *ref,
                                double *bound)
{
    double s = acc ? y0[i * ldy + r] : 0.0, mag = fabs(s);
    for (int64_t c = 0; c < k; c++) {
        s += (double)wd[r * k + c] * x[i * ldx + c];
        mag += fabs((double)wd[r * k + c] * x[i * ldx + c]);
    }
    *ref = s;
    *bound = (double)(k + 2) * ldexp(1.0, -24) * mag + 1e-30;
    return fabs(got - s) <= *bound;
}

#endif
