/* kernels/kv_write.h — concat_and_cache_mla: write latent rows into the paged cache (docs/design.md §3).
 *
 * For each token t with slot = slot_mapping[t] >= 0:
 *   kv_cache[slot / block_size][slot % block_size][0 .. Dc)      = kv_c[t][0 .. Dc)
 *   kv_cache[slot / block_size][slot % block_size][Dc .. Dc + Dr) = k_pe[t][0 .. Dr)
 * converted to the cache dtype (round to nearest even). A negative slot is padding: nothing is
 * written. Any slot >= num_blocks * block_size makes the whole call fail with
 * NUMLA_STATUS_OUT_OF_RANGE before anything is written. Inputs may not alias the cache.
 * Threading: own OpenMP region over tokens. Not collective.
 */
#ifndef NUMLA_KERNELS_KV_WRITE_H
#define NUMLA_KERNELS_KV_WRITE_H

#include <stdint.h>

#include "common/dtype.h"
#include "common/status.h"
#include "kernels/isa.h"

typedef struct numla_kv_write_args {
    int64_t num_tokens;           /* T */
    int32_t kv_lora_rank;         /* Dc */
    int32_t rope_dim;             /* Dr */
    const void *kv_c;             /* (T, kv_c_stride) elements, first Dc used; src_dtype */
    int64_t kv_c_stride;
    const void *k_pe;             /* (T, k_pe_stride) elements, first Dr used; src_dtype */
    int64_t k_pe_stride;
    numla_dtype src_dtype;
    const int64_t *slot_mapping;  /* (T) */
    void *kv_cache;               /* (num_blocks, block_size, Dc + Dr), kv_dtype */
    numla_dtype kv_dtype;
    int64_t num_blocks;
    int32_t block_size;
} numla_kv_write_args;

numla_status numla_concat_and_cache_mla(numla_isa isa, const numla_kv_write_args *args);

#endif
