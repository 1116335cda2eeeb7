/* kernels/ref/linear_ref.c — scalar reference of the linear layer: reads the packed layout of
 * kernels/linear_internal.h element by element, fp32 accumulation in k order. Always built; the
 * level every other ISA inherits from when it has no variant of its own. */
#include "kernels/linear_internal.h"

void numla_linear_forward_ref(const numla_linear_weight *w, int64_t m, const float *x, int64_t ldx,
                              float *y, int64_t ldy, int accumulate, void *workspace)
{
    (void)workspace; /* the reference needs none; the table's signature has it */
    const size_t pe = numla_linear_panel_elems(w);
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < w->n; n++) {
        const int64_t p = n / NUMLA_LINEAR_NR, j = n % NUMLA_LINEAR_NR;
        for (int64_t i = 0; i < m; i++) {
            const float *xr = x + i * ldx;
            float acc = 0.0f;
            if (w->dtype == NUMLA_DTYPE_BF16) {
                const uint16_t *b = (const uint16_t *)w->packed + (size_t)p * pe + (size_t)j * 2;
                for (int64_t c = 0; c < w->k; c++)
                    acc += xr[c] * numla_bf16_to_f32(b[(size_t)(c >> 1) * 2 * NUMLA_LINEAR_NR + (size_t)(c & 1)]);
            } else {
                const float *b = (const float *)w->packed + (size_t)p * pe + (size_t)j;
                for (int64_t c = 0; c < w->k; c++)
                    acc += xr[c] * b[(size_t)c * NUMLA_LINEAR_NR];
            }
            y[i * ldy + n] = accumulate ? y[i * ldy + n] + acc : acc;
        }
    }
}
