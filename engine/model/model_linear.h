/* engine/model/model_linear.h — one linear layer of the model as loaded (weights.h says how a
 * checkpoint tensor becomes one) and how it runs: float weights through kernels/linear.h,
 * 8-bit weights through kernels/qlinear.h, ggml block encodings (GGUF files) through
 * kernels/qblock.h, chosen per layer at run time.
 */
#ifndef NUMLA_ENGINE_MODEL_LINEAR_H
#define NUMLA_ENGINE_MODEL_LINEAR_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "kernels/isa.h"
#include "kernels/linear.h"
#include "kernels/qblock.h"
#include "kernels/qlinear.h"

typedef enum numla_model_linear_kind {
    NUMLA_MODEL_LINEAR_FLOAT = 0, /* lin: bf16/f32 (kernels/linear.h) */
    NUMLA_MODEL_LINEAR_Q8,        /* q: fp8 block / int8 W8A8 (kernels/qlinear.h) */
    NUMLA_MODEL_LINEAR_QBLOCK,    /* qb: ggml blocks, Q4_K ... (kernels/qblock.h), kept as the
                                     file stores them */
} numla_model_linear_kind;

/* One linear layer of the model: y (M, n) = x (M, k) · Wᵀ. An fp8 column slice that does not
 * start on a 128-column scale block (an o_proj or down_proj shard) is packed from the block
 * start with zero weights in its first kofs columns; the forward then runs on a copy of x
 * shifted right by kofs (scratch from the workspace). */
typedef struct numla_model_linear {
    numla_model_linear_kind kind;
    int64_t n, k;                 /* output and input features the forward sees */
    int64_t kofs;                 /* Q8: zero columns packed before the slice (fp8 only) */
    numla_linear_weight lin;      /* FLOAT: (n, k) */
    numla_qlinear_weight q;       /* Q8: (n, kofs + k) */
    numla_qblock_weight qb;       /* QBLOCK: (n, k), k whole blocks */
} numla_model_linear;

/* Scratch bytes numla_model_linear_forward needs for M rows on a team of nth threads. Local. */
size_t numla_model_linear_workspace_size(numla_isa isa, const numla_model_linear *w, int64_t M,
                                         int nth);
/* y (M, ldy) (+)= x (M, ldx) · Wᵀ at level isa, on its own OpenMP region (a single thread when
 * called inside a parallel region). Not collective. */
numla_status numla_model_linear_forward(numla_isa isa, const numla_model_linear *w, int64_t M,
                                        const float *x, int64_t ldx, float *y, int64_t ldy,
                                        int accumulate, void *ws, size_t ws_bytes);
/* Whether a forward rounds its input to 8 bits before the products (QBLOCK weights in Q8
 * activation mode, kernels/qblock.h): what feeds such a layer need not be rounded finer than
 * bf16 (engine/model/attention.c). Local. */
int numla_model_linear_quantizes_input(const numla_model_linear *w);
/* Bytes a forward reads of the weight (1-byte weights + scales for Q8, whole blocks for QBLOCK),
 * for bandwidth bounds.
 * Local. */
size_t numla_model_linear_bytes(const numla_model_linear *w);

#endif
