/* tests/unit/kernels/exp_probe_avx512.c — numla_exp512 (kernels/x86/exp_avx512.h) over an
 * array (exp_probe.h), built with the avx512 flags by its name. */
#include "exp_probe.h"

#include "kernels/x86/exp_avx512.h"

void exp_probe_avx512(int64_t n, const float *x, float *y)
{
    for (int64_t i = 0; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, numla_exp512(_mm512_loadu_ps(x + i)));
}
