/* kernels/x86/mla_attn_avx512bf16.c — AVX-512-BF16 MLA attention chunk kernel. With
 * NUMLA_MLA_VDPBF16=1 in the environment it forms Q·K with vdpbf16ps straight from bf16 cache
 * rows (bf16 q, exact products), P·V in fp32. By default it runs the fp32 path of the AVX-512
 * kernel, which measured faster on the host it was tuned on (see numla_mla_uses_bf16dot in
 * mla_attn_avx512_impl.h). With bf16 q and cache on a CPU with AMX-BF16 (and NUMLA_MLA_AMX not
 * "0"), Q·K runs on AMX tiles instead (kernels/x86/mla_attn_amx.c). */
#define NUMLA_MLA_BF16DOT 1
#include "kernels/x86/mla_attn_avx512_impl.h"

const numla_mla_attn_kernel numla_mla_attn_kernel_avx512bf16 = {
    .name = "avx512bf16",
    .chunk = numla_mla_chunk,
    .scratch_bytes = numla_mla_scratch_bytes,
    .supports = numla_mla_supports,
};
