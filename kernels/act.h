/* kernels/act.h — the gated activation of the MLP and the experts (docs/design.md §5):
 *   g[i] = silu(g[i]) · u[i],  silu(x) = x / (1 + e^-x),  i in [0, n).
 * fp32 in place on g; u must not alias g. Relative error a few ulps beyond fp32 rounding of the
 * formula (the vector e^x has relative error below 2.5e-7); the avx2 and avx512 variants give
 * the same bits. Threading: none — the caller splits n (each thread calls on its own range), so
 * it can run inside the engine's per-expert threads. Not collective. */
#ifndef NUMLA_KERNELS_ACT_H
#define NUMLA_KERNELS_ACT_H

#include <stdint.h>

#include "common/status.h"
#include "kernels/isa.h"

numla_status numla_act_silu_mul(numla_isa isa, int64_t n, float *g, const float *u);

/* Variants, for the dispatcher and the tests (no validation). */
void numla_act_silu_mul_ref(int64_t n, float *g, const float *u);
void numla_act_silu_mul_avx2(int64_t n, float *g, const float *u);
void numla_act_silu_mul_avx512(int64_t n, float *g, const float *u);

#endif
