/* kernels/linear.h — linear layers: y[M][N] = x[M][K] · Wᵀ (+ y when accumulate), W (N, K)
 * row-major as Hugging Face stores it, fp32 activations, fp32 accumulation.
 *
 * Weights are packed once, at load time, into a layout of the kernel's choosing:
 *   bytes = numla_linear_packed_size(isa, N, K, src_dtype)
 *   numla_linear_pack(isa, N, K, src, src_dtype, ld_src, dst)   (dst: caller-owned, 64-byte aligned;
 *       packing runs on the calling OpenMP team, so first touch puts pages on the caller's node)
 * and described by numla_linear_weight. bf16 sources stay bf16; f16 and f32 sources are packed
 * as f32 (no precision is lost at pack time).
 *
 * Forward:
 *   - M small (decode): weight-bandwidth bound; a GEMV / skinny GEMM streams W once.
 *   - M large (prefill): compute bound; blocked GEMM.
 * The kernel chooses by M. Scratch: numla_linear_workspace_size(). Threading: own OpenMP
 * region, split over N (and M when large). x and y must not alias. Not collective.
 */
#ifndef NUMLA_KERNELS_LINEAR_H
#define NUMLA_KERNELS_LINEAR_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/status.h"
#include "kernels/isa.h"

/* The precision a bf16 weight may use for its activations. Bounds per output y[i][n], with
 * u = 2^-24 and S = |y0| + sum_k |x[i][k] W[n][k]|:
 *   F32 (the default, what numla_linear_pack sets): fp32-class. ref, avx2, avx512 and
 *     avx512bf16 compute in fp32 (|y - y_exact| <= (K + 2) u S); amx's tile GEMM splits x into
 *     bf16 hi + lo with |x - hi - lo| <= 2^-17 |x| and sums exact products in fp32:
 *     |y - y_exact| <= (2^-17 + (2K + 2) u (1 + 2^-8)) S.
 *   BF16 (opt-in, as llama.cpp, ik_llama.cpp and PyTorch's bf16 models compute): the avx512bf16
 *     level rounds x to bf16 once (round to nearest even, |x - bf16(x)| <= 2^-8 |x|) and sums the
 *     exact bf16 products in fp32: |y - y_exact| <= (2^-8 + (K + 2) u (1 + 2^-8)) S; a row's
 *     result does not depend on M or the team size. The other levels run their F32 arithmetic
 *     (inside that bound too): ref/avx2/avx512 with fp32 x, amx with its split tiles where they
 *     apply (else the avx512bf16 code).
 * vdpbf16ps and the AMX tiles flush denormal inputs and results. f32 weights ignore the field.
 *
 * Rows and M: whatever the team size, a row's result has the same bits; and up to
 * NUMLA_LINEAR_ROW_INVARIANT_M rows, at every level and in both modes, the bits it has in a
 * one-row call (the GEMV): the few-row paths keep the GEMV's per-row summation order (avx512 and
 * avx2: groups of rows, each output's even and odd k in two chains added at the end, the groups
 * sharing K blocks so the weights are still read once; amx: its tile GEMM only from
 * NUMLA_LINEAR_AMX_MIN_M = 13 rows, kernels/blocking.h). A speculative verify step relies on it
 * (docs/speculative.md). Past that M the GEMM paths sum in other orders. */
enum { NUMLA_LINEAR_ROW_INVARIANT_M = 12 };

typedef enum numla_linear_act {
    NUMLA_LINEAR_ACT_F32 = 0,
    NUMLA_LINEAR_ACT_BF16,
} numla_linear_act;

typedef struct numla_linear_weight {
    numla_isa isa;        /* the ISA it was packed at (one layout serves every level) */
    int64_t n;            /* output features N */
    int64_t k;            /* input features K */
    numla_dtype dtype;    /* packed element type: bf16 or f32 */
    const void *packed;   /* numla_linear_packed_size() bytes, layout private to the kernels */
    numla_linear_act act; /* activation precision; the caller may set BF16 after packing */
} numla_linear_weight;

size_t numla_linear_packed_size(numla_isa isa, int64_t n, int64_t k, numla_dtype src_dtype);
numla_status numla_linear_pack(numla_isa isa, int64_t n, int64_t k, const void *src,
                               numla_dtype src_dtype, int64_t ld_src, void *dst,
                               numla_linear_weight *out);

/* isa: the level to run (not w->isa): every level reads every packing, and a level whose
 * variant does not take this weight and M (amx: bf16, K % 32 == 0, M >= 13; avx512bf16: bf16 with bf16
 * activations)
 * runs the level below. The caller picks it, e.g. avx512 for exact fp32 activations where amx would split
 * them into two bf16 halves. */
size_t numla_linear_workspace_size(numla_isa isa, const numla_linear_weight *w, int64_t m,
                                   int num_threads);
/* y (M, ldy) = x (M, ldx) · Wᵀ at level isa; accumulate != 0 adds into y. */
/* Whether a forward of w on m rows at level isa runs on the AMX tiles: the level is amx and
 * the AMX variant takes this weight and M (else the avx512bf16 code runs it). For reports
 * (numla bench linear labels its rows by it); the result does not depend on the CPU. */
int numla_linear_uses_amx(numla_isa isa, const numla_linear_weight *w, int64_t m);
numla_status numla_linear_forward(numla_isa isa, const numla_linear_weight *w, int64_t m,
                                  const float *x, int64_t ldx, float *y, int64_t ldy,
                                  int accumulate, void *workspace, size_t workspace_bytes);

#endif
