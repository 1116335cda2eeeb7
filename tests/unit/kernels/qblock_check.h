/* tests/unit/kernels/qblock_check.h — random blocks of every encoding for the qblock and
 * qblock_amx_emu suites (shared, header-only): random bytes with finite fp16 scales. */
#ifndef NUMLA_TESTS_QBLOCK_CHECK_H
#define NUMLA_TESTS_QBLOCK_CHECK_H

#include "test_util.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/qblock.h"

/* Byte offsets of each encoding's fp16 scale fields in a block. */
static inline int qb_halves(numla_qblock_type t, int out[2])
{
    switch (t) {
    case NUMLA_QBLOCK_Q8_0: case NUMLA_QBLOCK_Q4_0: case NUMLA_QBLOCK_IQ4_XS:
    case NUMLA_QBLOCK_Q5_0: case NUMLA_QBLOCK_IQ4_NL: out[0] = 0; return 1;
    case NUMLA_QBLOCK_Q4_K: case NUMLA_QBLOCK_Q5_K: out[0] = 0; out[1] = 2; return 2;
    case NUMLA_QBLOCK_Q6_K: out[0] = 208; return 1;
    case NUMLA_QBLOCK_Q5_1: out[0] = 0; out[1] = 2; return 2;
    case NUMLA_QBLOCK_Q2_K: out[0] = 80; out[1] = 82; return 2;
    case NUMLA_QBLOCK_Q3_K: out[0] = 108; return 1;
    default: return 0;
    }
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
    *row_bytes = k / info->block * info->bytes;
    return p;
}

#endif
