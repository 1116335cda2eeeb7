/* tests/unit/kernels/exp_probe.h — the vector e^x headers (kernels/x86/exp_avx2.h,
 * exp_avx512.h) over an array, one entry point per header, each built with its level's flags
 * by its file's name (exp_probe_avx2.c, exp_probe_avx512.c) so test_exp.c, built without them,
 * can call them where the CPU has the level. */
#ifndef NUMLA_TESTS_UNIT_KERNELS_EXP_PROBE_H
#define NUMLA_TESTS_UNIT_KERNELS_EXP_PROBE_H

#include <stdint.h>

/* y[i] = e^x[i], n a multiple of the header's lane count (8, 16). */
void exp_probe_avx2(int64_t n, const float *x, float *y);
void exp_probe_avx512(int64_t n, const float *x, float *y);

#endif
