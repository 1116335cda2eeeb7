/* kernels/ref/act_ref.c — scalar reference of the gated SiLU (kernels/act.h), as written. */
#include <math.h>

#include "kernels/act.h"

void numla_act_silu_mul_ref(int64_t n, float *g, const float *u)
{
    for (int64_t i = 0; i < n; i++)
        g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}
