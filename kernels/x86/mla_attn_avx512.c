/* kernels/x86/mla_attn_avx512.c — AVX-512 F/BW/VL/DQ MLA attention chunk kernel: fp32 FMA for
 * Q·K and P·V over cache rows widened in registers (see mla_attn_avx512_internal.h). */
#define NUMLA_MLA_AMX 0
#include "kernels/x86/mla_attn_avx512_internal.h"

const numla_mla_attn_kernel numla_mla_attn_kernel_avx512 = {
    .v = {"avx512", 0, numla_mla_supports},
    .chunk = numla_mla_chunk,
    .scratch_bytes = numla_mla_scratch_bytes,
};
