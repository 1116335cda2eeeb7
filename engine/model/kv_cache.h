/* engine/model/kv_cache.h — one rank's paged latent KV cache (docs/design.md §3): per layer
 * kv[num_blocks][block_size][Dc + Dr] (bf16 by default), a free-list block allocator with a
 * reference count per block (a block returns to the free list when its count drops to 0, so
 * sequences may later share prefix blocks), per-sequence block tables (int32) that are the same
 * for every layer, and the pool sizing rule of `numla run` (numla_kv_cache_default_bytes).
 *
 * Prefix cache (rank 0's pool only; docs/design.md §3, docs/serving.md): a full block may be kept
 * under a 128-bit hash chained over its parent block's hash and its own token ids, rooted in the
 * pool's identity (geometry, KV dtype and the caller's model salt), with its token ids stored so
 * that a hit compares them (and the parent's hash) too: a hash collision is a miss, never wrong
 * KV. A cached block no one holds stays in the pool, on an LRU list, and is evicted (taken back
 * as a fresh block) only when the free list is empty. A cached block is never written: its rows
 * are complete when it is cached, and the scheduler only writes rows after a hit.
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
    int32_t *refcount;         /* (num_blocks) holders of each block; 0 = free or cached idle */
    /* prefix cache: NULL / 0 until numla_kv_cache_prefix_enable */
    struct numla_kv_prefix *prefix;
    int64_t num_cached;        /* blocks in the prefix cache (held or idle) */
    int64_t num_idle;          /* cached blocks no one holds (on the LRU list, evictable) */
    int64_t evictions;         /* cached blocks taken back as fresh blocks */
    /* Sparse attention (DSA, docs/sparse_attention.md): the indexer's keys beside the latent
     * rows, same blocks and block tables; absent (index_dim 0, index_data NULL) otherwise. */
    int32_t index_dim;         /* Di (index_head_dim), 0: no index-key cache */
    numla_dtype index_dtype;
    void *index_data;          /* (num_layers, num_blocks, block_size, row), row =
                                  numla_dsa_key_row_bytes(index_dtype, Di) */
    size_t index_layer_bytes;
    size_t index_data_bytes;
    /* DeepSeek-V4 (docs/design.md §3.1): the compressed entries and index keys in the pool's
     * blocks, one mapping; per layer l and compressor k (0: attention, 1: indexer) a region of
     * (num_blocks, block_size / rate, width) values of dtype at v4_off[2 l + k]
     * (numla_v4_pool_block_bytes a block; SIZE_MAX where the sequences keep that compressor's
     * entries themselves). NULL / 0 for the other models. */
    void *v4_data;
    size_t v4_data_bytes;
    size_t *v4_off;            /* (2 · v4_layers) */
    int32_t v4_layers;
    /* and the sequences' fixed state (window rings, compressors' raw rows): a slot each while
     * it runs (model_v4.h, numla_v4_slots; made by the first numla_kv_cache_v4_pool), of
     * v4_state_need bytes (numla_v4_state_bytes) */
    struct numla_v4_slots *v4_slots;
    size_t v4_state_need;
    /* What one block stands for in the pool's sizing (bytes, index keys included): its rows,
     * or for DeepSeek-V4, whose pool has no rows (data NULL), its tokens' share of the
     * sequences' caches and of the prefix states (docs/design.md §3.1); and the blocks each
     * running sequence holds beside its tokens' (DeepSeek-V4's window rings and compressors'
     * rows; 0 otherwise). The engine sets them; the scheduler charges them. */
    size_t block_bytes;
    int32_t seq_blocks;
} numla_kv_cache;

/* A block's identity in the prefix cache: two independent 64-bit lanes. */
typedef struct numla_kv_hash {
    uint64_t a, b;
} numla_kv_hash;

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

/* The cache model cfg needs: latent rows (kv_lora_rank + qk_rope_head_dim) of `dtype` for every
 * layer (numla_model_config_kv_layers: the MTP layer's too when it is loaded) and, for a
 * sparse-attention model (cfg->dsa.enabled), the index-key pool (index_head_dim values a
 * token) of `index_dtype` (the engine uses the latent rows' dtype). For DeepSeek-V4 no latent
 * rows: the regions of its compressed entries and index keys (v4_data), mapped once here and
 * touched as entries are written.
 * Not collective. */
struct numla_model_config;
numla_status numla_kv_cache_create_for_model(const struct numla_model_config *cfg,
                                             int32_t block_size, int64_t num_blocks,
                                             numla_dtype dtype, numla_dtype index_dtype,
                                             numla_kv_cache **out);
/* DeepSeek-V4: the view of c's entry regions and state slots the sequences address (model_v4.h,
 * numla_v4_seqs_use_pool). The first call maps the slots: one for each sequence the scheduler
 * can hold at once, num_blocks / (seq_blocks + 1), so the pool's sizing (seq_blocks) comes
 * first. c must outlive the sequences that use the view (destroying one gives its slot back).
 * INVALID_ARG if c was not made for a V4 config. Not collective. */
struct numla_v4_pool;
numla_status numla_kv_cache_v4_pool(numla_kv_cache *c, struct numla_v4_pool *out);
/* The block size a pool for cfg gets when none is asked for: 16 tokens; DeepSeek-V4's, the
 * least multiple of 16 that each of its compress rates divides (128 for V4-Flash and V4-Pro,
 * which is also where its prefixes are reused), so every compressed entry (HCA's one per 128
 * tokens too) lives in the pool's blocks. Not collective. */
int32_t numla_kv_default_block_size(const struct numla_model_config *cfg);
/* Bytes of one block of that cache over all layers (index keys included). */
size_t numla_kv_block_bytes_for_model(const struct numla_model_config *cfg, int32_t block_size,
                                      numla_dtype dtype, numla_dtype index_dtype);

/* What one block of cfg's pool stands for in its sizing (*block_bytes: numla_kv_block_bytes_for_model,
 * and for DeepSeek-V4 plus, with prefix_cache, a block's share of the prefix states) and the
 * blocks each running sequence holds beside its tokens' (*seq_blocks: DeepSeek-V4's window rings
 * and compressors' rows, *seq_bytes of them; 0 for the other models). docs/design.md §3.1. */
void numla_kv_pool_charge(const struct numla_model_config *cfg, int32_t block_size,
                          numla_dtype dtype, numla_dtype index_dtype, int prefix_cache,
                          size_t *block_bytes, int32_t *seq_blocks, size_t *seq_bytes);

/* Add the DSA index-key cache: per layer (num_blocks, block_size, index_dim) of `dtype` (a float
 * type, or NUMLA_DTYPE_I8: the quantized option, rows of numla_dsa_key_row_bytes written by
 * numla_dsa_key_quantize, kernels/dsa.h), paged
 * by the same blocks (and so the same block tables and slots) as the latent rows. Once per
 * cache; an index_dim < 1 or a second call is INVALID_ARG. Freed by numla_kv_cache_destroy. */
numla_status numla_kv_cache_add_index(numla_kv_cache *c, int32_t index_dim, numla_dtype dtype);
/* Index-key pool of layer l: (num_blocks, block_size, index_dim); NULL without one. */
void *numla_kv_cache_index_layer(const numla_kv_cache *c, int32_t layer);
/* Bytes of one block's index keys over all layers (add to numla_kv_block_bytes when sizing a
 * DSA model's pool). */
size_t numla_kv_index_block_bytes(int32_t num_layers, int32_t index_dim, int32_t block_size,
                                  numla_dtype dtype);

/* Take a free block with reference count 1; when the free list is empty, the least recently
 * used idle cached block is evicted and taken. KV_FULL (no message: expected under load) when
 * neither is left. */
numla_status numla_kv_cache_alloc_block(numla_kv_cache *c, int32_t *block);
/* One more holder of an allocated block (prefix sharing). */
void numla_kv_cache_ref_block(numla_kv_cache *c, int32_t block);
/* Drop one holder; when none is left the block returns to the free list, or, when it is in the
 * prefix cache, becomes idle (the most recently used end of the LRU list). Ids outside the pool
 * and blocks already free are ignored. */
void numla_kv_cache_free_block(numla_kv_cache *c, int32_t block);
/* Blocks a sequence can still take: free ones plus idle cached ones (evictable). */
int64_t numla_kv_cache_available(const numla_kv_cache *c);

/* ---- prefix cache (rank 0) ---- */

/* Allocate the prefix cache's tables (idempotent). `salt` stands for everything outside the
 * pool that changes a block's rows (the model and its weights' format); the pool's geometry
 * and KV dtype are added here. */
numla_status numla_kv_cache_prefix_enable(numla_kv_cache *c, uint64_t salt);
/* The hash a chain starts from (the parent of a sequence's first block). Needs the cache
 * enabled. */
numla_kv_hash numla_kv_cache_prefix_root(const numla_kv_cache *c);
/* Hash of a block of block_size token ids under `parent`. */
numla_kv_hash numla_kv_hash_block(numla_kv_hash parent, const int32_t *tokens, int32_t block_size);
/* The cached block with this hash, parent hash and token ids (block_size of them), or -1. Does
 * not change the block's holders nor its place in the LRU list. */
int32_t numla_kv_cache_prefix_lookup(const numla_kv_cache *c, numla_kv_hash h,
                                     numla_kv_hash parent, const int32_t *tokens);
/* One more holder of a cached block found by lookup (an idle one leaves the LRU list). */
void numla_kv_cache_prefix_acquire(numla_kv_cache *c, int32_t block);
/* Put a held, completely written block into the cache under (h, parent, tokens). Returns 1
 * when cached, 0 when a block with the same identity is cached already (this one stays a
 * plain block) or the block is cached already or the cache is off. */
int numla_kv_cache_prefix_insert(numla_kv_cache *c, int32_t block, numla_kv_hash h,
                                 numla_kv_hash parent, const int32_t *tokens);
/* Forget every idle cached block (they go to the free list); cached blocks still held stay.
 * For benchmarks that compare runs from the same empty cache. */
void numla_kv_cache_prefix_clear(numla_kv_cache *c);
/* Whether `block` is in the prefix cache. */
int numla_kv_cache_prefix_is_cached(const numla_kv_cache *c, int32_t block);

/* Bytes of one block over all layers. */
size_t numla_kv_block_bytes(int32_t num_layers, int32_t kv_lora_rank, int32_t rope_dim,
                            int32_t block_size, numla_dtype dtype);
/* Memory of NUMA node `node` that a new pool can have: its free pages plus its page cache
 * (MemFree + Active(file) + Inactive(file) of /sys/devices/system/node/nodeN/meminfo), or the
 * machine's MemAvailable (/proc/meminfo) when node < 0 or libnuma is unavailable; libnuma's and
 * then sysconf's free pages when those files cannot be read. The page cache counts: on a
 * server that has just read a checkpoint it can hold most of the memory, and the kernel drops
 * it for anonymous pages on demand. */
size_t numla_kv_cache_node_free_bytes(int node);
/* The value in KiB of `field` ("MemFree", "Active(file)", ...) in a meminfo text, either
 * /proc/meminfo's lines ("MemFree:   123 kB") or a node's ("Node 0 MemFree:   123 kB"); -1 when
 * the field is absent or not a number. */
int64_t numla_kv_cache_meminfo_kib(const char *text, const char *field);
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
 * changes; idle cached blocks count as available and are evicted as needed). Does not change
 * s->len. */
numla_status numla_kv_seq_reserve(numla_kv_cache *c, numla_kv_seq *s, int64_t new_len);
/* Blocks `s` would have to take from the pool to hold new_len tokens (0 if it already can). */
int64_t numla_kv_seq_blocks_needed(const numla_kv_cache *c, const numla_kv_seq *s, int64_t new_len);
/* Append a block the caller already holds a reference on (a prefix-cache hit). */
numla_status numla_kv_seq_append(numla_kv_seq *s, int32_t block);
/* Drop `s`'s hold on every block (blocks no one else holds return to the pool, or become idle
 * cached blocks, last block first so that a prefix's first blocks are evicted last) and reset
 * it. */
void numla_kv_seq_release(numla_kv_cache *c, numla_kv_seq *s);
/* Slot of token position pos (must be < blocks reserved × block_size). */
int64_t numla_kv_seq_slot(const numla_kv_cache *c, const numla_kv_seq *s, int64_t pos);

#endif
