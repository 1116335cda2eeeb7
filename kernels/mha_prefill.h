/* kernels/mha_prefill.h — causal multi-head attention over expanded keys and values, the
 * "naive" (expanded) MLA prefill form of docs/design.md §5: per head k = [k_nope | rope(k_pe)] and
 * v = W_UV c' have already been formed by the caller, so this is plain MHA with a query width
 * (Dqk, 192 for DeepSeek) different from the value width (Dv, 128).
 *
 * Layout (f32, row-major, heads innermost but one):
 *   q[rows][H][Dqk]   query rows; sequence b owns rows q_start[b] .. q_start[b] + q_len[b] - 1
 *   k[rows][H][Dqk]   key rows;   sequence b owns rows k_start[b] .. k_start[b] + prefix[b] + q_len[b] - 1
 *   v[rows][H][Dv]    value rows, indexed like k
 *   out[rows][H][Dv]  indexed like q
 *   lse[rows][H]      indexed like q (optional)
 * Row strides are given per tensor (elements, >= H·D) so q/out may be views into wider buffers.
 * Sequences may leave gaps between their rows (a step that mixes forms skips some).
 *
 * Causal with a prefix: query i of sequence b sits at position prefix[b] + i and sees its
 * sequence's keys 0 ..= prefix[b] + i. out = Σ softmax(scale · q·k) v with fp32 softmax;
 * lse = natural log of Σ exp(scale · q·k). Every query sees at least one key, so there is no
 * empty-row case.
 *
 * Rules:
 *   - q, k, v, out, lse must not alias.
 *   - Threading: the call opens its own OpenMP region over (sequence, head, query block),
 *     dynamically scheduled (causal work is triangular).
 *   - No allocation: numla_mha_prefill_workspace_size() bytes of scratch are passed in
 *     (the call uses omp_get_max_threads() threads).
 *   - Numerics: fp32 throughout in the vector variants (avx2, avx512; amx splits the products'
 *     operands into bf16 pairs, kernels/x86/mha_prefill_amx.h) with an online softmax over key
 *     blocks at fixed positions (multiples of NUMLA_MHA_PREFILL_KB from key 0); the reference
 *     accumulates in double. A row's bits depend only on its query and the keys it sees, never
 *     on the other rows of the call, how its sequence's rows are split into calls, or the
 *     thread count. Not collective.
 *   - Vector variants take value widths that are multiples of 8 (avx2) or 16 (avx512); the
 *     reference runs the others. Any query width.
 */
#ifndef NUMLA_KERNELS_MHA_PREFILL_H
#define NUMLA_KERNELS_MHA_PREFILL_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "kernels/isa.h"

typedef struct numla_mha_prefill_args {
    int32_t num_seqs;        /* B */
    int32_t num_heads;       /* H >= 1 */
    int32_t qk_dim;          /* Dqk >= 1 */
    int32_t v_dim;           /* Dv >= 1 */
    const int32_t *q_start;  /* (B) first query/out row of each sequence */
    const int32_t *q_len;    /* (B) new tokens of each sequence, >= 0 */
    const int32_t *k_start;  /* (B) first key/value row of each sequence */
    const int32_t *prefix;   /* (B) cached tokens before the new ones, >= 0 */
    float scale;             /* softmax scale, docs/design.md §5 (includes m²) */

    const float *q;          /* (rows, H, Dqk), row stride q_stride */
    int64_t q_stride;
    const float *k;          /* (rows, H, Dqk), row stride k_stride */
    int64_t k_stride;
    const float *v;          /* (rows, H, Dv), row stride v_stride */
    int64_t v_stride;
    float *out;              /* (rows, H, Dv), row stride out_stride */
    int64_t out_stride;
    float *lse;              /* (rows, H) or NULL; row stride H */
} numla_mha_prefill_args;

size_t numla_mha_prefill_workspace_size(numla_isa isa, const numla_mha_prefill_args *args,
                                        int num_threads);

/* Validates (negative lengths, strides below H·D, NULL pointers: NUMLA_STATUS_INVALID_ARG),
 * then runs. Not collective. */
numla_status numla_mha_prefill(numla_isa isa, const numla_mha_prefill_args *args, void *workspace,
                               size_t workspace_bytes);

#endif
