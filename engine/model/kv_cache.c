/* engine/model/kv_cache.c — paged latent KV pool and block allocator (see kv_cache.h). */
#include "engine/model/kv_cache.h"

#include <numa.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

numla_status numla_kv_cache_create(int32_t num_layers, int32_t kv_lora_rank, int32_t rope_dim,
                                   int32_t block_size, int64_t num_blocks, numla_dtype dtype,
                                   numla_kv_cache **out)
{
    *out = NULL;
    if (num_layers < 1 || kv_lora_rank < 1 || rope_dim < 0 || block_size < 1 || num_blocks < 1 ||
        num_blocks > INT32_MAX || dtype >= NUMLA_DTYPE_COUNT)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "kv cache: bad geometry (layers %d, Dc %d, Dr %d, block %d, blocks %lld)",
                   num_layers, kv_lora_rank, rope_dim, block_size, (long long)num_blocks);
    numla_kv_cache *c = calloc(1, sizeof *c);
    if (!c)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "kv cache: no memory");
    c->num_layers = num_layers;
    c->kv_lora_rank = kv_lora_rank;
    c->rope_dim = rope_dim;
    c->block_size = block_size;
    c->num_blocks = num_blocks;
    c->dtype = dtype;
    size_t row = (size_t)(kv_lora_rank + rope_dim) * numla_dtype_size(dtype);
    c->layer_bytes = ((size_t)num_blocks * (size_t)block_size * row + 4095) & ~(size_t)4095;
    c->data_bytes = c->layer_bytes * (size_t)num_layers;
    c->data = mmap(NULL, c->data_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (c->data == MAP_FAILED) {
        size_t bytes = c->data_bytes;
        free(c);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "kv cache: cannot map %zu bytes", bytes);
    }
#ifdef MADV_HUGEPAGE
    (void)madvise(c->data, c->data_bytes, MADV_HUGEPAGE);
#endif
    c->free_blocks = malloc((size_t)num_blocks * sizeof *c->free_blocks);
    if (!c->free_blocks) {
        munmap(c->data, c->data_bytes);
        free(c);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "kv cache: no memory for the free list");
    }
    c->refcount = calloc((size_t)num_blocks, sizeof *c->refcount);
    if (!c->refcount) {
        free(c->free_blocks);
        munmap(c->data, c->data_bytes);
        free(c);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "kv cache: no memory for the reference counts");
    }
    /* Pop order 0, 1, 2, ...: stack holds them reversed. */
    for (int64_t i = 0; i < num_blocks; i++)
        c->free_blocks[i] = (int32_t)(num_blocks - 1 - i);
    c->num_free = num_blocks;
    *out = c;
    return NUMLA_STATUS_OK;
}

void numla_kv_cache_destroy(numla_kv_cache **pc)
{
    if (!pc || !*pc)
        return;
    numla_kv_cache *c = *pc;
    if (c->data && c->data != MAP_FAILED)
        munmap(c->data, c->data_bytes);
    if (c->index_data)
        munmap(c->index_data, c->index_data_bytes);
    free(c->free_blocks);
    free(c->refcount);
    free(c);
    *pc = NULL;
}

void *numla_kv_cache_layer(const numla_kv_cache *c, int32_t layer)
{
    return (char *)c->data + (size_t)layer * c->layer_bytes;
}

numla_status numla_kv_cache_add_index(numla_kv_cache *c, int32_t index_dim, numla_dtype dtype)
{
    if (!c || index_dim < 1 || c->index_data || dtype >= NUMLA_DTYPE_COUNT)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "kv cache: bad index-key cache (index_dim %d, or one exists already)", index_dim);
    const size_t row = (size_t)index_dim * numla_dtype_size(dtype);
    const size_t layer = ((size_t)c->num_blocks * (size_t)c->block_size * row + 4095) & ~(size_t)4095;
    void *p = mmap(NULL, layer * (size_t)c->num_layers, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "kv cache: cannot map %zu bytes of index keys",
                   layer * (size_t)c->num_layers);
#ifdef MADV_HUGEPAGE
    (void)madvise(p, layer * (size_t)c->num_layers, MADV_HUGEPAGE);
#endif
    c->index_dim = index_dim;
    c->index_dtype = dtype;
    c->index_data = p;
    c->index_layer_bytes = layer;
    c->index_data_bytes = layer * (size_t)c->num_layers;
    return NUMLA_STATUS_OK;
}

void *numla_kv_cache_index_layer(const numla_kv_cache *c, int32_t layer)
{
    return c->index_data ? (char *)c->index_data + (size_t)layer * c->index_layer_bytes : NULL;
}

size_t numla_kv_index_block_bytes(int32_t num_layers, int32_t index_dim, int32_t block_size,
                                  numla_dtype dtype)
{
    return (size_t)num_layers * (size_t)block_size * (size_t)index_dim * numla_dtype_size(dtype);
}

numla_status numla_kv_cache_alloc_block(numla_kv_cache *c, int32_t *block)
{
    if (c->num_free == 0)
        return NUMLA_STATUS_KV_FULL; /* expected under load: the scheduler preempts, no message */
    *block = c->free_blocks[--c->num_free];
    c->refcount[*block] = 1;
    return NUMLA_STATUS_OK;
}

void numla_kv_cache_ref_block(numla_kv_cache *c, int32_t block)
{
    if (block >= 0 && block < c->num_blocks && c->refcount[block] > 0)
        c->refcount[block]++;
}

void numla_kv_cache_free_block(numla_kv_cache *c, int32_t block)
{
    if (block < 0 || block >= c->num_blocks || c->refcount[block] == 0)
        return; /* not allocated: a double free must not put a block on the list twice */
    if (--c->refcount[block] == 0 && c->num_free < c->num_blocks)
        c->free_blocks[c->num_free++] = block;
}

size_t numla_kv_block_bytes(int32_t num_layers, int32_t kv_lora_rank, int32_t rope_dim,
                            int32_t block_size, numla_dtype dtype)
{
    return (size_t)num_layers * (size_t)block_size * (size_t)(kv_lora_rank + rope_dim) *
           numla_dtype_size(dtype);
}

size_t numla_kv_cache_node_free_bytes(int node)
{
    long long free_b = -1;
    if (node >= 0 && numa_available() >= 0 && node <= numa_max_node())
        (void)numa_node_size64(node, &free_b);
    if (free_b < 0) {
        long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        free_b = pages > 0 && psz > 0 ? (long long)pages * psz : 0;
    }
    return (size_t)free_b;
}

size_t numla_kv_cache_share_bytes(size_t node_free, double fraction, int sharers)
{
    return (size_t)((double)node_free * fraction / (double)(sharers > 1 ? sharers : 1));
}

size_t numla_kv_cache_default_bytes(int node, double fraction)
{
    return numla_kv_cache_share_bytes(numla_kv_cache_node_free_bytes(node), fraction, 1);
}

int64_t numla_kv_cache_pool_blocks(size_t bytes, size_t block_bytes, int32_t block_size,
                                   int32_t max_seqs, int64_t max_context)
{
    if (block_bytes == 0 || block_size < 1)
        return 0;
    int64_t nb = (int64_t)(bytes / block_bytes);
    if (max_seqs > 0 && max_context > 0) {
        int64_t cap = (int64_t)max_seqs * ((max_context + block_size - 1) / block_size);
        nb = nb < cap ? nb : cap;
    }
    return nb > INT32_MAX ? INT32_MAX : nb;
}

int64_t numla_kv_seq_blocks_needed(const numla_kv_cache *c, const numla_kv_seq *s, int64_t new_len)
{
    int64_t need = (new_len + c->block_size - 1) / c->block_size - s->num_blocks;
    return need > 0 ? need : 0;
}

numla_status numla_kv_seq_reserve(numla_kv_cache *c, numla_kv_seq *s, int64_t new_len)
{
    int64_t need = (new_len + c->block_size - 1) / c->block_size;
    if (need <= s->num_blocks)
        return NUMLA_STATUS_OK;
    if (need - s->num_blocks > c->num_free)
        NUMLA_FAIL(NUMLA_STATUS_KV_FULL, "kv cache: %lld blocks needed, %lld free",
                   (long long)(need - s->num_blocks), (long long)c->num_free);
    if (need > s->capacity) {
        int64_t cap = s->capacity ? s->capacity : 8;
        while (cap < need)
            cap *= 2;
        int32_t *t = realloc(s->block_table, (size_t)cap * sizeof *t);
        if (!t)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "kv cache: no memory for a block table");
        s->block_table = t;
        s->capacity = (int32_t)cap;
    }
    while (s->num_blocks < need) {
        int32_t b;
        NUMLA_CHECK(numla_kv_cache_alloc_block(c, &b));
        s->block_table[s->num_blocks++] = b;
    }
    return NUMLA_STATUS_OK;
}

void numla_kv_seq_release(numla_kv_cache *c, numla_kv_seq *s)
{
    for (int32_t i = s->num_blocks - 1; i >= 0; i--)
        numla_kv_cache_free_block(c, s->block_table[i]);
    free(s->block_table);
    memset(s, 0, sizeof *s);
}

int64_t numla_kv_seq_slot(const numla_kv_cache *c, const numla_kv_seq *s, int64_t pos)
{
    return (int64_t)s->block_table[pos / c->block_size] * c->block_size + pos % c->block_size;
}
