/* engine/model/kv_cache.h — one rank's paged latent KV cache (DESIGN.md §3): per layer
 * kv[num_blocks][block_size][Dc + Dr] (bf16 by default), a free-list block allocator with a
 * reference count per block (a block returns to the free list when its count drops to 0, so
 * sequences may later share prefix blocks), per-sequence block tables (int32) that are the same
 * for every layer, and the pool sizing rule of `numla run` (numla_kv_cache_default_bytes).
 *
 * Nothing here assumes that every rank holds every sequence: a rank creates a numla_kv_seq
 * only for the sequences it serves, and block ids are local to this cache. The forward pass
 * gets block tables and slots through the step (engine/model/model.h), never from this struct.
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
    int32_t *refcount;         /* (num_blocks) holders of each block; 0 = on the free list */
    /* Sparse attention (DSA, docs/sparse_attention.md): the indexer's keys beside the latent
     * rows, same blocks and block tables; absent (index_dim 0, index_data NULL) otherwise. */
    int32_t index_dim;         /* Di (index_head_dim), 0: no index-key cache */
    numla_dtype index_dtype;
    void *index_data;          /* (num_layers, num_blocks, block_size, Di), index_dtype */
    size_t index_layer_bytes;
    size_t index_data_bytes;
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

/* Add the DSA index-key cache: per layer (num_blocks, block_size, index_dim) of `dtype`, paged
 * by the same blocks (and so the same block tables and slots) as the latent rows. Once per
 * cache; an index_dim < 1 or a second call is INVALID_ARG. Freed by numla_kv_cache_destroy. */
numla_status numla_kv_cache_add_index(numla_kv_cache *c, int32_t index_dim, numla_dtype dtype);
/* Index-key pool of layer l: (num_blocks, block_size, index_dim); NULL without one. */
void *numla_kv_cache_index_layer(const numla_kv_cache *c, int32_t layer);
/* Bytes of one block's index keys over all layers (add to numla_kv_block_bytes when sizing a
 * DSA model's pool). */
size_t numla_kv_index_block_bytes(int32_t num_layers, int32_t index_dim, int32_t block_size,
                                  numla_dtype dtype);

/* Take a free block with reference count 1. KV_FULL (no message: expected under load) when
 * none is free. */
numla_status numla_kv_cache_alloc_block(numla_kv_cache *c, int32_t *block);
/* One more holder of an allocated block (prefix sharing). */
void numla_kv_cache_ref_block(numla_kv_cache *c, int32_t block);
/* Drop one holder; the block returns to the free list when none is left. Ids outside the pool
 * and blocks already free are ignored. */
void numla_kv_cache_free_block(numla_kv_cache *c, int32_t block);

/* Bytes of one block over all layers. */
size_t numla_kv_block_bytes(int32_t num_layers, int32_t kv_lora_rank, int32_t rope_dim,
                            int32_t block_size, numla_dtype dtype);
/* Free memory of NUMA node `node` as libnuma reports it (numa_node_size64), or of the whole
 * machine (sysconf available pages) when node < 0 or libnuma is unavailable. */
size_t numla_kv_cache_node_free_bytes(int node);
/* Default pool size of one rank: `fraction` (numla run: NUMLA_KV_MEMORY_FRACTION = 0.9) of the
 * node's free memory (numla_kv_cache_node_free_bytes), divided among the `sharers` ranks that
 * draw on that node (1 or more). Call it after every rank on the node has loaded its weights,
 * so that "free" excludes them. */
#define NUMLA_KV_MEMORY_FRACTION 0.9
size_t numla_kv_cache_share_bytes(size_t node_free, double fraction, int sharers);
/* numla_kv_cache_share_bytes(numla_kv_cache_node_free_bytes(node), fraction, 1). */
size_t numla_kv_cache_default_bytes(int node, double fraction);
/* Blocks of a pool of `bytes` (block_bytes each), capped when max_seqs > 0 at what max_seqs
 * sequences of max_context tokens use (ceil(max_context / block_size) blocks each), and at
 * INT32_MAX. */
int64_t numla_kv_cache_pool_blocks(size_t bytes, size_t block_bytes, int32_t block_size,
                                   int32_t max_seqs, int64_t max_context);

/* Grow `s` so that it has blocks for new_len tokens (all or nothing: on KV_FULL nothing
 * changes). Does not change s->len. */
numla_status numla_kv_seq_reserve(numla_kv_cache *c, numla_kv_seq *s, int64_t new_len);
/* Blocks `s` would have to take from the pool to hold new_len tokens (0 if it already can). */
int64_t numla_kv_seq_blocks_needed(const numla_kv_cache *c, const numla_kv_seq *s, int64_t new_len);
/* Drop `s`'s hold on every block (blocks no one else holds return to the pool) and reset it. */
void numla_kv_seq_release(numla_kv_cache *c, numla_kv_seq *s);
/* Slot of token position pos (must be < blocks reserved × block_size). */
int64_t numla_kv_seq_slot(const numla_kv_cache *c, const numla_kv_seq *s, int64_t pos);

#endif
