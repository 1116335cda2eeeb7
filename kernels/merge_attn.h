/* kernels/merge_attn.h — merge two partial attention results by their LSE (docs/design.md §4).
 *
 * For each row r (a (token, head) pair) with m = max(la, lb):
 *   out[r] = (e^(la-m)·a[r] + e^(lb-m)·b[r]) / (e^(la-m) + e^(lb-m))
 *   out_lse[r] = m + log(e^(la-m) + e^(lb-m))
 * An LSE of +inf is treated as -inf (empty row). When both sides are -inf, out[r] = 0 and
 * out_lse[r] = -inf — never NaN. out may alias a or b (element-wise in place); out_lse may alias
 * a_lse or b_lse; out_lse may be NULL. Values are f32 rows of `dim` elements, row stride `dim`.
 * Threading: own OpenMP region over rows. Not collective.
 */
#ifndef NUMLA_KERNELS_MERGE_ATTN_H
#define NUMLA_KERNELS_MERGE_ATTN_H

#include <stdint.h>

#include "common/status.h"
#include "kernels/isa.h"

numla_status numla_merge_attn_states(numla_isa isa, int64_t rows, int32_t dim, float *out,
                                     float *out_lse, const float *a, const float *a_lse,
                                     const float *b, const float *b_lse);

#endif
