/* kernels/x86/mla_attn_avx512_amx.c — the AVX-512 MLA attention chunk kernel in its AMX form,
 * the amx level's variant: with a bf16 cache and rows of whole 32-element slices, Q·K runs on
 * AMX tiles (kernels/x86/mla_attn_amx.c; an fp32 q split into bf16 hi + lo), and P·V too when
 * Dc % 64 == 0. Other arguments, or a process the OS refused the tiles, run the avx512
 * variant (numla_mla_amx_supports). Built with the AMX flags (name ends in _amx). */
#define NUMLA_MLA_AMX 1
#include "kernels/x86/mla_attn_avx512_internal.h"

const numla_mla_attn_kernel numla_mla_attn_kernel_amx = {
    .v = {"amx", NUMLA_CPU_AMX_BF16, numla_mla_amx_supports},
    .chunk = numla_mla_chunk,
    .scratch_bytes = numla_mla_scratch_bytes,
};
