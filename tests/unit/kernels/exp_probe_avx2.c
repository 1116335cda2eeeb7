/* tests/unit/kernels/exp_probe_avx2.c — numla_exp256 (kernels/x86/exp_avx2.h) over an array
 * (exp_probe.h), built with the avx2 flags by its name. */
#include "exp_probe.h"

#include "kernels/x86/exp_avx2.h"

void exp_probe_avx2(int64_t n, const float *x, float *y)
{
    for (int64_t i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, numla_exp256(_mm256_loadu_ps(x + i)));
}
