/* engine/model/projections.c — the forward pass's linear building blocks (model_internal.h): one
 * linear layer on the shared workspace, the per-head products of the absorbed attention, and
 * the SiLU-gated MLP. */
#include <omp.h>

#include "engine/model/model_internal.h"
#include "kernels/act.h"
#include "kernels/linear.h"

/* y (M, ldy) (+)= x (M, ldx) · Wᵀ, growing the shared workspace outside the kernel. */
numla_status numla_model_lin(numla_model *m, const numla_model_linear *w, int64_t M,
                             const float *x, int64_t ldx, float *y, int64_t ldy, int acc)
{
    if (M == 0 || w->n == 0 || w->k == 0)
        return NUMLA_STATUS_OK;
    const numla_isa isa = numla_model_lin_isa(m, w);
    NUMLA_CHECK(numla_model_grow_workspace(
        &m->lin_ws, &m->lin_ws_bytes, numla_model_linear_workspace_size(isa, w, M, m->num_threads),
        "linear workspace"));
    double t0 = omp_get_wtime();
    NUMLA_CHECK(numla_model_linear_forward(isa, w, M, x, ldx, y, ldy, acc, m->lin_ws,
                                           m->lin_ws_bytes));
    m->stats.linear_s += omp_get_wtime() - t0;
    m->stats.linear_flops += 2.0 * (double)M * (double)w->n * (double)w->k;
    return NUMLA_STATUS_OK;
}

/* x_h (T, k) · xs_h elementwise into dst (T, k): the per-head input scales of an int8 uk_t. */
static void scale_rows(float *dst, const float *x, int64_t ldx, const float *xs, int64_t T,
                       int64_t k)
{
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < k; j++)
            dst[t * k + j] = x[t * ldx + j] * xs[j];
}

/* The per-head W_UK / W_UV products: Hr small linears (float or 8-bit) on strided column
 * blocks of x and y (head h reads x + h·xoff, writes y + h·yoff); xs (Hr, k) or NULL: head h's
 * input is first multiplied by row h of xs (an int8 uk_t's folded scales, weights.h). In
 * decode each is a tiny GEMV/skinny GEMM (Dc x nope): one kernel call per head would open
 * 2·Hr OpenMP regions per layer, so for few rows the heads are split over one team instead,
 * each call running on its thread alone (nested regions are inactive) with its own workspace
 * (and its own scaled input). With many rows (prefill) the calls are big enough to use the
 * whole team each. */
numla_status numla_model_per_head(numla_model *m, const numla_model_linear *w, const float *xs,
                                  int64_t Hr, int64_t T, const float *x, int64_t ldx,
                                  int64_t xoff, float *y, int64_t ldy, int64_t yoff)
{
    if (Hr == 0 || T == 0)
        return NUMLA_STATUS_OK;
    const int64_t k = w[0].k;
    const size_t xs_bytes = xs ? (((size_t)(T * k) * sizeof(float) + 63) & ~(size_t)63) : 0;
    if (m->num_threads <= 1 || Hr < 2 || omp_get_max_active_levels() > 1 ||
        T > NUMLA_MODEL_PER_THREAD_ROWS) {
        if (xs)
            NUMLA_CHECK(numla_model_grow_workspace(&m->par_ws, &m->par_ws_bytes, xs_bytes,
                                                   "scaled per-head input"));
        for (int64_t h = 0; h < Hr; h++) {
            const float *xh = x + h * xoff;
            int64_t ldh = ldx;
            if (xs) {
                scale_rows(m->par_ws, xh, ldx, xs + h * k, T, k);
                xh = m->par_ws;
                ldh = k;
            }
            NUMLA_CHECK(numla_model_lin(m, &w[h], T, xh, ldh, y + h * yoff, ldy, 0));
        }
        return NUMLA_STATUS_OK;
    }
    const numla_isa isa = numla_model_lin_isa(m, &w[0]); /* the heads' linears are of one kind */
    size_t stride;
    const size_t each = numla_model_linear_workspace_size(isa, &w[0], T, 1);
    NUMLA_CHECK(numla_model_par_workspace(m, xs_bytes + each, m->num_threads, &stride));
    double t0 = omp_get_wtime();
    numla_status st = NUMLA_STATUS_OK;
#pragma omp parallel for num_threads(m->num_threads) schedule(static)
    for (int64_t h = 0; h < Hr; h++) {
        const numla_model_linear *wh = &w[h];
        size_t need = numla_model_linear_workspace_size(isa, wh, T, 1);
        char *ws = (char *)m->par_ws + (size_t)omp_get_thread_num() * stride;
        const float *xh = x + h * xoff;
        int64_t ldh = ldx;
        if (xs) {
            scale_rows((float *)(void *)ws, xh, ldx, xs + h * k, T, k);
            xh = (const float *)(void *)ws;
            ldh = k;
        }
        numla_status s1 = need + xs_bytes > stride || wh->k != k
                              ? NUMLA_STATUS_INTERNAL
                              : numla_model_linear_forward(isa, wh, T, xh, ldh, y + h * yoff,
                                                           ldy, 0, need ? ws + xs_bytes : NULL,
                                                           need);
        if (s1 != NUMLA_STATUS_OK) {
#pragma omp critical(numla_model_per_head)
            st = s1;
        }
    }
    if (st == NUMLA_STATUS_INTERNAL)
        NUMLA_FAIL(st, "model: per-head weights of different shapes");
    NUMLA_CHECK(st);
    m->stats.linear_s += omp_get_wtime() - t0;
    m->stats.linear_flops += 2.0 * (double)T * (double)w[0].n * (double)w[0].k * (double)Hr;
    return NUMLA_STATUS_OK;
}

/* SiLU-gated MLP slice on rows x (M, hidden), accumulating into y (M, ldy). */
numla_status numla_model_mlp(numla_model *m, const numla_weights_mlp *w, int64_t M,
                             const float *x, float *y, int64_t ldy)
{
    const int64_t hid = m->cfg.hidden_size, I = w->inter;
    if (I == 0 || M == 0)
        return NUMLA_STATUS_OK;
    NUMLA_CHECK(numla_model_lin(m, &w->gate, M, x, hid, m->g, I, 0));
    NUMLA_CHECK(numla_model_lin(m, &w->up, M, x, hid, m->u, I, 0));
    const int64_t n = M * I;
    const int nt = n > 65536 ? m->num_threads : 1;
#pragma omp parallel num_threads(nt)
    {
        const int64_t i0 = n * omp_get_thread_num() / omp_get_num_threads(),
                      i1 = n * (omp_get_thread_num() + 1) / omp_get_num_threads();
        (void)numla_act_silu_mul(m->isa, i1 - i0, m->g + i0, m->u + i0); /* args valid */
    }
    NUMLA_CHECK(numla_model_lin(m, &w->down, M, m->g, I, y, ldy, 1));
    return NUMLA_STATUS_OK;
}
