/* engine/model/model_linear.c — running one of the model's linear layers (model_linear.h): the
 * float or 8-bit kernel by the layer's kind, with an fp8 column slice's shifted input. */
#include "engine/model/model_linear.h"

#include <string.h>

static size_t q8_ws(const numla_model_linear *w, int64_t M, int nth)
{
    return (numla_qlinear_workspace_size(&w->q, M, nth) + 63) & ~(size_t)63;
}

size_t numla_model_linear_workspace_size(numla_isa isa, const numla_model_linear *w, int64_t M,
                                         int nth)
{
    if (w->kind == NUMLA_MODEL_LINEAR_FLOAT)
        return numla_linear_workspace_size(isa, &w->lin, M, nth);
    if (w->kind == NUMLA_MODEL_LINEAR_QBLOCK)
        return numla_qblock_workspace_size(&w->qb, M, nth);
    return q8_ws(w, M, nth) + (w->kofs ? (size_t)M * (size_t)(w->kofs + w->k) * sizeof(float) : 0);
}

numla_status numla_model_linear_forward(numla_isa isa, const numla_model_linear *w, int64_t M,
                                        const float *x, int64_t ldx, float *y, int64_t ldy,
                                        int accumulate, void *ws, size_t ws_bytes)
{
    if (w->kind == NUMLA_MODEL_LINEAR_FLOAT)
        return numla_linear_forward(isa, &w->lin, M, x, ldx, y, ldy, accumulate, ws, ws_bytes);
    if (w->kind == NUMLA_MODEL_LINEAR_QBLOCK)
        return numla_qblock_forward(isa, &w->qb, M, x, ldx, y, ldy, accumulate, ws, ws_bytes);
    if (w->kofs) { /* x shifted right by kofs; the packed weights are zero there */
        const int64_t kk = w->kofs + w->k;
        const size_t xsb = (size_t)M * (size_t)kk * sizeof(float);
        if (ws_bytes < q8_ws(w, M, 1) + xsb)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "linear: workspace of %zu bytes is too small",
                       ws_bytes);
        const size_t qb = (ws_bytes - xsb) & ~(size_t)63; /* the kernel's, for as many threads as fit */
        float *xs = (float *)(void *)((char *)ws + qb);
        for (int64_t r = 0; r < M; r++) {
            memset(xs + r * kk, 0, (size_t)w->kofs * sizeof(float));
            memcpy(xs + r * kk + w->kofs, x + r * ldx, (size_t)w->k * sizeof(float));
        }
        return numla_qlinear_forward(isa, &w->q, M, xs, kk, y, ldy, accumulate, ws, qb);
    }
    return numla_qlinear_forward(isa, &w->q, M, x, ldx, y, ldy, accumulate, ws, ws_bytes);
}

int numla_model_linear_quantizes_input(const numla_model_linear *w)
{
    return w->kind == NUMLA_MODEL_LINEAR_QBLOCK && w->qb.act == NUMLA_QBLOCK_ACT_Q8;
}

size_t numla_model_linear_bytes(const numla_model_linear *w)
{
    if (w->n == 0 || w->k == 0)
        return 0;
    if (w->kind == NUMLA_MODEL_LINEAR_FLOAT)
        return (size_t)(w->n * w->k) * numla_dtype_size(w->lin.dtype);
    if (w->kind == NUMLA_MODEL_LINEAR_QBLOCK) {
        /* the bytes a forward reads: a row's blocks (not the padding to 64), or whole panels */
        const numla_qblock_info *in = numla_qblock_info_get(w->qb.type);
        if (w->qb.layout == NUMLA_QBLOCK_LAYOUT_PANEL16)
            return numla_qblock_layout_size(w->qb.type, w->qb.layout, w->n, w->k);
        return in ? (size_t)w->n * (size_t)(w->k / in->block) * (size_t)in->bytes : 0;
    }
    return (size_t)(w->n * (w->kofs + w->k)) +
           (size_t)(w->q.scale_rows * w->q.scale_cols) * sizeof(float) +
           (w->q.row_sums ? (size_t)w->n * sizeof(int32_t) : 0);
}
