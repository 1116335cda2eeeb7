/* kernels/x86/mla_attn_avx512bf16.c — AVX-512-BF16 MLA attention chunk kernel: over a bf16
 * cache, Q·K with vdpbf16ps straight from the cache rows (q rounded to bf16 once per item) and
 * P·V in fp32; other caches take the fp32 path (see mla_attn_avx512_impl.h). */
#define NUMLA_MLA_BF16DOT 1
#include "kernels/x86/mla_attn_avx512_impl.h"

const numla_mla_attn_kernel numla_mla_attn_kernel_avx512bf16 = {
    .name = "avx512bf16",
    .chunk = numla_mla_chunk,
    .scratch_bytes = numla_mla_scratch_bytes,
    .supports = numla_mla_supports,
};
