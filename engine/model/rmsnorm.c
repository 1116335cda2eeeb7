/* engine/model/rmsnorm.c — RMSNorm (model_testing.h), the normalisation before attention, before
 * the MLP, of the latent q and kv, and before the lm_head. */
#include <math.h>

#include "engine/model/model_testing.h"

void numla_model_rmsnorm(float *y, const float *x, const float *w, int64_t n, double eps)
{
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++)
        ss += (double)x[i] * (double)x[i];
    float r = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (int64_t i = 0; i < n; i++)
        y[i] = w[i] * (x[i] * r);
}

