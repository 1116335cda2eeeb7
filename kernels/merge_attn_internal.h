/* kernels/merge_attn_internal.h — private to the merge_attn family: the variant signature, the
 * table entries, and the per-row weight rule every variant shares, so the ±inf cases of
 * kernels/merge_attn.h are decided in one place. */
#ifndef NUMLA_KERNELS_MERGE_ATTN_INTERNAL_H
#define NUMLA_KERNELS_MERGE_ATTN_INTERNAL_H

#include <math.h>
#include <string.h>

#include "kernels/merge_attn.h"
#include "kernels/blocking.h"

/* Merge rows [r_begin, r_end) of validated arguments; no OpenMP inside (the dispatcher splits). */
typedef void (*numla_merge_attn_fn)(int64_t r_begin, int64_t r_end, int32_t dim, float *out,
                                    float *out_lse, const float *a, const float *a_lse,
                                    const float *b, const float *b_lse);

void numla_merge_attn_ref(int64_t r_begin, int64_t r_end, int32_t dim, float *out, float *out_lse,
                          const float *a, const float *a_lse, const float *b, const float *b_lse);
void numla_merge_attn_avx2(int64_t r_begin, int64_t r_end, int32_t dim, float *out, float *out_lse,
                           const float *a, const float *a_lse, const float *b, const float *b_lse);
void numla_merge_attn_avx512(int64_t r_begin, int64_t r_end, int32_t dim, float *out, float *out_lse,
                             const float *a, const float *a_lse, const float *b, const float *b_lse);

typedef enum numla_merge_case {
    NUMLA_MERGE_CASE_EMPTY,  /* both sides empty: zeros, lse -inf */
    NUMLA_MERGE_CASE_A_ONLY, /* b empty: out = a exactly, lse = la */
    NUMLA_MERGE_CASE_B_ONLY, /* a empty: out = b exactly, lse = lb */
    NUMLA_MERGE_CASE_BOTH,   /* out = ea/s·a + eb/s·b */
} numla_merge_case;

/* Decide one row. An empty side is copied around rather than weighted by 0, so whatever its
 * values hold (NaN from a kernel that skipped it) cannot leak into the result, and the other
 * side comes through bit for bit. ea, eb: e^(l-m); s = ea + eb. */
static inline numla_merge_case numla_merge_row_case(float la, float lb, float *ea, float *eb,
                                                    float *s, float *lse)
{
    if (la == INFINITY) /* some prefill kernels mark an empty row with +inf */
        la = -INFINITY;
    if (lb == INFINITY)
        lb = -INFINITY;
    if (la == -INFINITY && lb == -INFINITY) {
        *lse = -INFINITY;
        return NUMLA_MERGE_CASE_EMPTY;
    }
    if (lb == -INFINITY) {
        *lse = la;
        return NUMLA_MERGE_CASE_A_ONLY;
    }
    if (la == -INFINITY) {
        *lse = lb;
        return NUMLA_MERGE_CASE_B_ONLY;
    }
    float m = la > lb ? la : lb;
    if (isnan(la) || isnan(lb))
        m = NAN; /* propagate, do not let max() hide it */
    *ea = expf(la - m);
    *eb = expf(lb - m);
    *s = *ea + *eb;
    *lse = m + logf(*s);
    return NUMLA_MERGE_CASE_BOTH;
}

/* The non-weighted cases, shared by every variant. Returns 1 when the row is done. */
static inline int numla_merge_row_trivial(numla_merge_case c, int32_t dim, float *o, const float *a,
                                          const float *b)
{
    switch (c) {
    case NUMLA_MERGE_CASE_EMPTY: memset(o, 0, (size_t)dim * sizeof *o); return 1;
    case NUMLA_MERGE_CASE_A_ONLY:
        if (o != a)
            memcpy(o, a, (size_t)dim * sizeof *o);
        return 1;
    case NUMLA_MERGE_CASE_B_ONLY:
        if (o != b)
            memcpy(o, b, (size_t)dim * sizeof *o);
        return 1;
    default: return 0;
    }
}

#endif
