/* engine/kv_cache.h — one rank's paged latent KV cache (DESIGN.md §3): per layer
 * kv[num_blocks][block_size][Dc + Dr] (bf16 by default), a free-list block allocator, and
 * per-sequence block tables (int32) that are the same for every layer.
 *
 * Nothing here assumes that every rank holds every sequence: a rank creates a numla_kv_seq
 * only for the sequences it serves, and block ids are local to this cache. The forward pass
 * gets block tables and slots through the step (engine/model.h), never from this struct.
 * Not collective; not thread-safe (the scheduler owns it).
 */
#ifndef NUMLA_ENGINE_KV_CACHE_H
#define NUMLA_ENGINE_KV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/status.h"

typedef struct numla_kv_cache {
    int32_t num_layers;
    int32_t kv_lora_rank;      /* Dc */
    int32_t rope_dim;          /* Dr */
    int32_t block_size;        /* tokens per block */
    int64_t num_blocks;
    numla_dtype dtype;
    void *data;                /* (num_layers, num_blocks, block_size, Dc + Dr), dtype */
    size_t layer_bytes;        /* bytes of one layer's pool */
    size_t data_bytes;         /* mapping size */
    int32_t *free_blocks;      /* (num_blocks) stack of free block ids */
    int64_t num_free;
} numla_kv_cache;

typedef struct numla_kv_seq {
    int32_t *block_table;      /* (capacity) block ids of this sequence, in token order */
    int32_t num_blocks;        /* entries in use */
    int32_t capacity;
    int64_t len;               /* tokens whose rows have been (or are being) written */
} numla_kv_seq;

numla_status numla_kv_cache_create(int32_t num_layers, int32_t kv_lora_rank, int32_t rope_dim,
                                   int32_t block_size, int64_t num_blocks, numla_dtype dtype,
                                   numla_kv_cache **out);
void numla_kv_cache_destroy(numla_kv_cache **c);
/* Pool of layer l: (num_blocks, block_size, Dc + Dr). */
void *numla_kv_cache_layer(const numla_kv_cache *c, int32_t layer);

numla_status numla_kv_cache_alloc_block(numla_kv_cache *c, int32_t *block);  /* KV_FULL when none */
void numla_kv_cache_free_block(numla_kv_cache *c, int32_t block);

/* Grow `s` so that it has blocks for new_len tokens (all or nothing: on KV_FULL nothing
 * changes). Does not change s->len. */
numla_status numla_kv_seq_reserve(numla_kv_cache *c, numla_kv_seq *s, int64_t new_len);
/* Return every block of `s` to the pool and reset it. */
void numla_kv_seq_release(numla_kv_cache *c, numla_kv_seq *s);
/* Slot of token position pos (must be < blocks reserved × block_size). */
int64_t numla_kv_seq_slot(const numla_kv_cache *c, const numla_kv_seq *s, int64_t pos);

#endif
