/* kernels/x86/qlinear_wide_amx.c — the amx level's entry of kernels/qlinear.c for fp8 and
 * int8-row (the weight-only formats, whose x stays fp32-class): where
 * numla_qlinear_amx_wide_applies (N >= 16; fp8 from NUMLA_QLINEAR_AMX_WIDE_MIN_M rows; int8-row
 * at every M from NUMLA_QLINEAR_ROW_PLANES_MIN_WEIGHTS weights) it runs the tile kernels, fp8 on
 * AMX-BF16 (kernels/x86/qlinear_fp8_amx.c) and int8-row as three int8 planes on AMX-INT8
 * (kernels/x86/qlinear_int8row_amx.c); the other shapes run the avx512 variant, called
 * directly. Built with the tile kernels a second time over the emulator for the tests
 * (qlinear_fp8_amx_emu, amx_hardware). */
#include "kernels/qlinear_internal.h"

/* The emulated test build (NUMLA_AMX_EMULATE: tests/CMakeLists.txt force-includes the tile
 * emulator) gets its own entry point name, so it links next to this file's real build; it calls
 * the emulated builds of the tile kernels. */
#ifdef NUMLA_AMX_EMULATE
#define NUMLA_QLINEAR_AMX_WIDE_ENTRY numla_qlinear_forward_amx_wide_emulated
#define numla_qlinear_int8row_amx numla_qlinear_int8row_amx_emulated
#define numla_qlinear_fp8_amx numla_qlinear_fp8_amx_emulated
void numla_qlinear_int8row_amx_emulated(const numla_qlinear_weight *w, int64_t m, const float *x, int64_t ldx,
                                        float *y, int64_t ldy, int accumulate, void *workspace);
void numla_qlinear_fp8_amx_emulated(const numla_qlinear_weight *w, int64_t m, const float *x, int64_t ldx, float *y,
                                    int64_t ldy, int accumulate, void *workspace);
void numla_qlinear_forward_amx_wide_emulated(const numla_qlinear_weight *w, int64_t m, const float *x,
                                            int64_t ldx, float *y, int64_t ldy, int accumulate,
                                            void *workspace);
#else
#define NUMLA_QLINEAR_AMX_WIDE_ENTRY numla_qlinear_forward_amx_wide
#endif

void NUMLA_QLINEAR_AMX_WIDE_ENTRY(const numla_qlinear_weight *w, int64_t m, const float *x, int64_t ldx,
                                 float *y, int64_t ldy, int accumulate, void *workspace)
{
    if (!numla_qlinear_amx_wide_applies(w, m))
        numla_qlinear_forward_avx512(w, m, x, ldx, y, ldy, accumulate, workspace);
    else if (w->fmt == NUMLA_QLINEAR_INT8_ROW)
        numla_qlinear_int8row_amx(w, m, x, ldx, y, ldy, accumulate, workspace);
    else
        numla_qlinear_fp8_amx(w, m, x, ldx, y, ldy, accumulate, workspace);
}
