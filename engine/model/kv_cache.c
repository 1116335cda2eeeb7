/* engine/model/kv_cache.c — paged latent KV pool and block allocator (see kv_cache.h). */
#include "engine/model/kv_cache.h"
#include "engine/model/config.h"
#include "engine/model/model_v4.h"
#include "kernels/dsa.h"

#include <numa.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The prefix cache's state (kv_cache.h): per block its identity and token ids, an open-addressing
 * table (linear probing, backward-shift deletion) from hash to block, and the LRU list of idle
 * cached blocks (doubly linked through prev/next, head = least recently used). */
typedef struct numla_kv_prefix {
    numla_kv_hash root;
    numla_kv_hash *hash;       /* (num_blocks) identity of a cached block */
    numla_kv_hash *parent;     /* (num_blocks) its parent's identity */
    int32_t *tokens;           /* (num_blocks, block_size) its token ids */
    uint8_t *cached;           /* (num_blocks) 1: in the table */
    int32_t *prev, *next;      /* (num_blocks) LRU links of idle cached blocks, -1: none */
    int32_t lru_head, lru_tail;
    int32_t *table;            /* (table_size) block ids, -1: empty */
    uint64_t table_mask;       /* table_size - 1, table_size a power of two >= 2 num_blocks */
} numla_kv_prefix;

static void prefix_free(numla_kv_prefix *p)
{
    if (!p)
        return;
    free(p->hash);
    free(p->parent);
    free(p->tokens);
    free(p->cached);
    free(p->prev);
    free(p->next);
    free(p->table);
    free(p);
}

/* A pool of num_blocks blocks; with rows 0 its allocator alone (DeepSeek-V4: no latent rows,
 * data NULL). */
static numla_status kv_create(int32_t num_layers, int32_t kv_lora_rank, int32_t rope_dim,
                              int32_t block_size, int64_t num_blocks, numla_dtype dtype, int rows,
                              numla_kv_cache **out)
{
    *out = NULL;
    if (num_layers < 1 || (rows && kv_lora_rank < 1) || rope_dim < 0 || block_size < 1 ||
        num_blocks < 1 || num_blocks > INT32_MAX || dtype >= NUMLA_DTYPE_COUNT)
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
    c->block_bytes = numla_kv_block_bytes(num_layers, kv_lora_rank, rope_dim, block_size, dtype);
    c->layer_bytes = rows ? ((size_t)num_blocks * (size_t)block_size * row + 4095) & ~(size_t)4095
                          : 0;
    c->data_bytes = c->layer_bytes * (size_t)num_layers;
    c->data = rows ? mmap(NULL, c->data_bytes, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                   : NULL;
    if (c->data == MAP_FAILED) {
        size_t bytes = c->data_bytes;
        free(c);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "kv cache: cannot map %zu bytes", bytes);
    }
#ifdef MADV_HUGEPAGE
    if (c->data)
        (void)madvise(c->data, c->data_bytes, MADV_HUGEPAGE);
#endif
    c->free_blocks = malloc((size_t)num_blocks * sizeof *c->free_blocks);
    if (!c->free_blocks) {
        if (c->data)
            munmap(c->data, c->data_bytes);
        free(c);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "kv cache: no memory for the free list");
    }
    c->refcount = calloc((size_t)num_blocks, sizeof *c->refcount);
    if (!c->refcount) {
        free(c->free_blocks);
        if (c->data)
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

numla_status numla_kv_cache_create(int32_t num_layers, int32_t kv_lora_rank, int32_t rope_dim,
                                   int32_t block_size, int64_t num_blocks, numla_dtype dtype,
                                   numla_kv_cache **out)
{
    return kv_create(num_layers, kv_lora_rank, rope_dim, block_size, num_blocks, dtype, 1, out);
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
    if (c->v4_data)
        munmap(c->v4_data, c->v4_data_bytes);
    if (c->v4_slots) {
        munmap(c->v4_slots->base, c->v4_slots->stride * (size_t)c->v4_slots->count);
        free(c->v4_slots->free);
        free(c->v4_slots);
    }
    free(c->v4_off);
    free(c->free_blocks);
    free(c->refcount);
    prefix_free(c->prefix);
    free(c);
    *pc = NULL;
}

void *numla_kv_cache_layer(const numla_kv_cache *c, int32_t layer)
{
    return c->data ? (char *)c->data + (size_t)layer * c->layer_bytes : NULL;
}

static void lru_unlink(numla_kv_cache *c, int32_t b)
{
    numla_kv_prefix *p = c->prefix;
    if (p->prev[b] >= 0)
        p->next[p->prev[b]] = p->next[b];
    else
        p->lru_head = p->next[b];
    if (p->next[b] >= 0)
        p->prev[p->next[b]] = p->prev[b];
    else
        p->lru_tail = p->prev[b];
    p->prev[b] = p->next[b] = -1;
    c->num_idle--;
}

static void lru_push_tail(numla_kv_cache *c, int32_t b)
{
    numla_kv_prefix *p = c->prefix;
    p->prev[b] = p->lru_tail;
    p->next[b] = -1;
    if (p->lru_tail >= 0)
        p->next[p->lru_tail] = b;
    else
        p->lru_head = b;
    p->lru_tail = b;
    c->num_idle++;
}

static uint64_t slot_of(const numla_kv_prefix *p, numla_kv_hash h) { return h.a & p->table_mask; }

static int hash_eq(numla_kv_hash x, numla_kv_hash y) { return x.a == y.a && x.b == y.b; }

/* Take block b out of the table (backward-shift deletion keeps every probe run unbroken). */
static void table_remove(numla_kv_cache *c, int32_t b)
{
    numla_kv_prefix *p = c->prefix;
    uint64_t i = slot_of(p, p->hash[b]);
    while (p->table[i] != b)
        i = (i + 1) & p->table_mask;
    uint64_t j = i;
    for (;;) {
        j = (j + 1) & p->table_mask;
        int32_t e = p->table[j];
        if (e < 0)
            break;
        uint64_t home = slot_of(p, p->hash[e]);
        /* e may move into the hole at i when its home is not in (i, j] cyclically */
        if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
            p->table[i] = e;
            i = j;
        }
    }
    p->table[i] = -1;
    p->cached[b] = 0;
    c->num_cached--;
}

numla_status numla_kv_cache_add_index(numla_kv_cache *c, int32_t index_dim, numla_dtype dtype)
{
    if (!c || index_dim < 1 || c->index_data || numla_dsa_key_row_bytes(dtype, index_dim) == 0 ||
        (dtype == NUMLA_DTYPE_I8 && index_dim % 4 != 0))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "kv cache: bad index-key cache (index_dim %d, dtype %s: a float type, or i8 with "
                   "index_dim a multiple of 4; or one exists already)", index_dim,
                   numla_dtype_name(dtype));
    const size_t row = numla_dsa_key_row_bytes(dtype, index_dim); /* i8: codes, scale, sum */
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
    c->block_bytes += (size_t)c->num_layers * (size_t)c->block_size * row;
    return NUMLA_STATUS_OK;
}

void *numla_kv_cache_index_layer(const numla_kv_cache *c, int32_t layer)
{
    return c->index_data ? (char *)c->index_data + (size_t)layer * c->index_layer_bytes : NULL;
}

size_t numla_kv_index_block_bytes(int32_t num_layers, int32_t index_dim, int32_t block_size,
                                  numla_dtype dtype)
{
    return (size_t)num_layers * (size_t)block_size * numla_dsa_key_row_bytes(dtype, index_dim);
}

numla_status numla_kv_cache_alloc_block(numla_kv_cache *c, int32_t *block)
{
    if (c->num_free == 0) {
        if (c->num_idle == 0) /* expected under load: the scheduler preempts, no message */
            return NUMLA_STATUS_KV_FULL;
        /* evict the least recently used idle cached block */
        int32_t b = c->prefix->lru_head;
        lru_unlink(c, b);
        table_remove(c, b);
        c->evictions++;
        c->refcount[b] = 1;
        *block = b;
        return NUMLA_STATUS_OK;
    }
    *block = c->free_blocks[--c->num_free];
    c->refcount[*block] = 1;
    return NUMLA_STATUS_OK;
}

int64_t numla_kv_cache_available(const numla_kv_cache *c) { return c->num_free + c->num_idle; }

void numla_kv_cache_ref_block(numla_kv_cache *c, int32_t block)
{
    if (block >= 0 && block < c->num_blocks && c->refcount[block] > 0)
        c->refcount[block]++;
}

void numla_kv_cache_free_block(numla_kv_cache *c, int32_t block)
{
    if (block < 0 || block >= c->num_blocks || c->refcount[block] == 0)
        return; /* not allocated: a double free must not put a block on the list twice */
    if (--c->refcount[block] != 0)
        return;
    if (c->prefix && c->prefix->cached[block])
        lru_push_tail(c, block);
    else if (c->num_free < c->num_blocks)
        c->free_blocks[c->num_free++] = block;
}

/* Two 64-bit lanes with different mixers and injections: a chain collides only when both do. */
static uint64_t mix_a(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint64_t mix_b(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

static numla_kv_hash hash_words(numla_kv_hash h, const uint64_t *w, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h.a = mix_a(h.a ^ (w[i] + 0x9e3779b97f4a7c15ULL * (i + 1)));
        h.b = mix_b((h.b + w[i]) * 0x2545f4914f6cdd1dULL + i);
    }
    h.a = mix_a(h.a ^ n);
    h.b = mix_b(h.b ^ (n << 1));
    return h;
}

numla_kv_hash numla_kv_hash_block(numla_kv_hash parent, const int32_t *tokens, int32_t block_size)
{
    numla_kv_hash h = parent;
    for (int32_t i = 0; i < block_size; i++) {
        uint64_t t = (uint64_t)(uint32_t)tokens[i];
        h.a = mix_a(h.a ^ (t + 0x9e3779b97f4a7c15ULL * (uint64_t)(i + 1)));
        h.b = mix_b((h.b + t) * 0x2545f4914f6cdd1dULL + (uint64_t)i);
    }
    h.a = mix_a(h.a ^ parent.b);
    h.b = mix_b(h.b ^ parent.a);
    return h;
}

numla_status numla_kv_cache_prefix_enable(numla_kv_cache *c, uint64_t salt)
{
    if (c->prefix)
        return NUMLA_STATUS_OK;
    numla_kv_prefix *p = calloc(1, sizeof *p);
    const size_t nb = (size_t)c->num_blocks;
    uint64_t ts = 16;
    while (ts < 2 * (uint64_t)nb)
        ts <<= 1;
    if (p) {
        p->hash = malloc(nb * sizeof *p->hash);
        p->parent = malloc(nb * sizeof *p->parent);
        p->tokens = malloc(nb * (size_t)c->block_size * sizeof *p->tokens);
        p->cached = calloc(nb, 1);
        p->prev = malloc(nb * sizeof *p->prev);
        p->next = malloc(nb * sizeof *p->next);
        p->table = malloc(ts * sizeof *p->table);
    }
    if (!p || !p->hash || !p->parent || !p->tokens || !p->cached || !p->prev || !p->next ||
        !p->table) {
        prefix_free(p);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "kv cache: no memory for the prefix cache of %zu blocks",
                   nb);
    }
    memset(p->prev, 0xff, nb * sizeof *p->prev);
    memset(p->next, 0xff, nb * sizeof *p->next);
    memset(p->table, 0xff, ts * sizeof *p->table);
    p->table_mask = ts - 1;
    p->lru_head = p->lru_tail = -1;
    const uint64_t id[] = {salt, (uint64_t)c->num_layers, (uint64_t)c->kv_lora_rank,
                           (uint64_t)c->rope_dim, (uint64_t)c->block_size, (uint64_t)c->dtype};
    p->root = hash_words((numla_kv_hash){0x6e756d6c61707265ULL, 0x666978636163686eULL}, id,
                         sizeof id / sizeof id[0]);
    c->prefix = p;
    return NUMLA_STATUS_OK;
}

numla_kv_hash numla_kv_cache_prefix_root(const numla_kv_cache *c) { return c->prefix->root; }

static int prefix_matches(const numla_kv_cache *c, int32_t b, numla_kv_hash h,
                          numla_kv_hash parent, const int32_t *tokens)
{
    const numla_kv_prefix *p = c->prefix;
    return hash_eq(p->hash[b], h) && hash_eq(p->parent[b], parent) &&
           !memcmp(p->tokens + (size_t)b * (size_t)c->block_size, tokens,
                   (size_t)c->block_size * sizeof *tokens);
}

int32_t numla_kv_cache_prefix_lookup(const numla_kv_cache *c, numla_kv_hash h,
                                     numla_kv_hash parent, const int32_t *tokens)
{
    const numla_kv_prefix *p = c->prefix;
    if (!p)
        return -1;
    for (uint64_t i = slot_of(p, h);; i = (i + 1) & p->table_mask) {
        int32_t b = p->table[i];
        if (b < 0)
            return -1;
        if (prefix_matches(c, b, h, parent, tokens))
            return b;
    }
}

void numla_kv_cache_prefix_acquire(numla_kv_cache *c, int32_t block)
{
    if (!c->prefix || block < 0 || block >= c->num_blocks || !c->prefix->cached[block])
        return;
    if (c->refcount[block] == 0)
        lru_unlink(c, block);
    c->refcount[block]++;
}

int numla_kv_cache_prefix_insert(numla_kv_cache *c, int32_t block, numla_kv_hash h,
                                 numla_kv_hash parent, const int32_t *tokens)
{
    numla_kv_prefix *p = c->prefix;
    if (!p || block < 0 || block >= c->num_blocks || p->cached[block] || c->refcount[block] == 0)
        return 0;
    uint64_t i = slot_of(p, h);
    for (; p->table[i] >= 0; i = (i + 1) & p->table_mask)
        if (prefix_matches(c, p->table[i], h, parent, tokens))
            return 0;
    p->table[i] = block;
    p->hash[block] = h;
    p->parent[block] = parent;
    memcpy(p->tokens + (size_t)block * (size_t)c->block_size, tokens,
           (size_t)c->block_size * sizeof *tokens);
    p->cached[block] = 1;
    c->num_cached++;
    return 1;
}

void numla_kv_cache_prefix_clear(numla_kv_cache *c)
{
    if (!c->prefix)
        return;
    while (c->num_idle > 0) {
        int32_t b = c->prefix->lru_head;
        lru_unlink(c, b);
        table_remove(c, b);
        c->free_blocks[c->num_free++] = b;
    }
}

int numla_kv_cache_prefix_is_cached(const numla_kv_cache *c, int32_t block)
{
    return c->prefix && block >= 0 && block < c->num_blocks && c->prefix->cached[block];
}

size_t numla_kv_block_bytes(int32_t num_layers, int32_t kv_lora_rank, int32_t rope_dim,
                            int32_t block_size, numla_dtype dtype)
{
    return (size_t)num_layers * (size_t)block_size * (size_t)(kv_lora_rank + rope_dim) *
           numla_dtype_size(dtype);
}

int64_t numla_kv_cache_meminfo_kib(const char *text, const char *field)
{
    const size_t n = strlen(field);
    for (const char *line = text; *line;) {
        const char *p = line, *next = strchr(line, '\n');
        line = next ? next + 1 : line + strlen(line);
        if (!strncmp(p, "Node ", 5)) { /* a node's file: "Node 3 MemFree:   123 kB" */
            p += 5;
            while (*p >= '0' && *p <= '9')
                p++;
            while (*p == ' ')
                p++;
        }
        if (strncmp(p, field, n) || p[n] != ':')
            continue;
        p += n + 1;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p < '0' || *p > '9')
            return -1;
        return strtoll(p, NULL, 10);
    }
    return -1;
}

/* The bytes the kernel can give a new anonymous mapping without swapping: free pages plus the
 * page cache (clean file pages are dropped on demand; the engine never runs from a mapped
 * file, §3.3). Read from the node's meminfo, or the machine's MemAvailable; -1 if unreadable. */
static long long kv_available_bytes(int node)
{
    char path[96], text[8192];
    if (node >= 0)
        snprintf(path, sizeof path, "/sys/devices/system/node/node%d/meminfo", node);
    else
        snprintf(path, sizeof path, "/proc/meminfo");
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = '\0';
    if (node < 0) {
        int64_t avail = numla_kv_cache_meminfo_kib(text, "MemAvailable");
        return avail < 0 ? -1 : (long long)avail * 1024;
    }
    int64_t free_k = numla_kv_cache_meminfo_kib(text, "MemFree");
    int64_t act = numla_kv_cache_meminfo_kib(text, "Active(file)");
    int64_t inact = numla_kv_cache_meminfo_kib(text, "Inactive(file)");
    if (free_k < 0 || act < 0 || inact < 0)
        return -1;
    return (long long)(free_k + act + inact) * 1024;
}

size_t numla_kv_cache_node_free_bytes(int node)
{
    const int numa = node >= 0 && numa_available() >= 0 && node <= numa_max_node();
    long long free_b = kv_available_bytes(numa ? node : -1);
    if (free_b < 0 && numa)
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

static numla_status seq_grow(numla_kv_seq *s, int64_t need)
{
    if (need <= s->capacity)
        return NUMLA_STATUS_OK;
    int64_t cap = s->capacity ? s->capacity : 8;
    while (cap < need)
        cap *= 2;
    int32_t *t = realloc(s->block_table, (size_t)cap * sizeof *t);
    if (!t)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "kv cache: no memory for a block table");
    s->block_table = t;
    s->capacity = (int32_t)cap;
    return NUMLA_STATUS_OK;
}

numla_status numla_kv_seq_reserve(numla_kv_cache *c, numla_kv_seq *s, int64_t new_len)
{
    int64_t need = (new_len + c->block_size - 1) / c->block_size;
    if (need <= s->num_blocks)
        return NUMLA_STATUS_OK;
    if (need - s->num_blocks > numla_kv_cache_available(c))
        NUMLA_FAIL(NUMLA_STATUS_KV_FULL, "kv cache: %lld blocks needed, %lld free",
                   (long long)(need - s->num_blocks), (long long)numla_kv_cache_available(c));
    NUMLA_CHECK(seq_grow(s, need));
    while (s->num_blocks < need) {
        int32_t b;
        NUMLA_CHECK(numla_kv_cache_alloc_block(c, &b));
        s->block_table[s->num_blocks++] = b;
    }
    return NUMLA_STATUS_OK;
}

numla_status numla_kv_seq_append(numla_kv_seq *s, int32_t block)
{
    NUMLA_CHECK(seq_grow(s, (int64_t)s->num_blocks + 1));
    s->block_table[s->num_blocks++] = block;
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

/* DeepSeek-V4's state slots (numla_kv_cache.v4_slots): one for each sequence the pool can
 * hold at once (each holds its seq_blocks blocks and at least one of its tokens'; one a block
 * where the scheduler is not charging them, seq_blocks 0), in a mapping of address space only
 * whose pages are touched as sequences write them, by the rank's own threads, and then stay. */
static numla_status kv_add_v4_slots(numla_kv_cache *c)
{
    const size_t need = c->v4_state_need;
    const size_t stride = (need + 4095) & ~(size_t)4095;
    int64_t count = c->num_blocks / ((int64_t)c->seq_blocks + 1);
    count = count < 1 ? 1 : count > INT32_MAX / 2 ? INT32_MAX / 2 : count;
    numla_v4_slots *sl = calloc(1, sizeof *sl);
    if (sl)
        sl->free = malloc(sizeof(int32_t) * (size_t)count);
    if (!sl || !sl->free) {
        if (sl)
            free(sl);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "kv cache: no memory");
    }
    void *p = stride ? mmap(NULL, stride * (size_t)count, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                     : MAP_FAILED;
    if (p == MAP_FAILED) {
        free(sl->free);
        free(sl);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "kv cache: cannot map %lld state slots of %zu bytes "
                   "for DeepSeek-V4's window rings and compressors' rows", (long long)count, stride);
    }
    sl->base = p;
    sl->stride = stride;
    sl->need = need;
    sl->count = (int32_t)count;
    for (int32_t i = 0; i < sl->count; i++) /* slot 0 taken first */
        sl->free[i] = sl->count - 1 - i;
    sl->nfree = sl->count;
    c->v4_slots = sl;
    return NUMLA_STATUS_OK;
}

/* DeepSeek-V4's entry regions (numla_kv_cache.v4_data): one mapping, each region 64-byte
 * aligned; pages are touched only as entries are written, by the rank's own threads. Then its
 * state slots. */
static numla_status kv_add_v4(numla_kv_cache *c, const numla_model_config *cfg)
{
    const int32_t L = (int32_t)cfg->v4.num_layers;
    c->v4_off = malloc(sizeof(size_t) * (size_t)(2 * L + 1));
    if (!c->v4_off)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "kv cache: no memory");
    c->v4_layers = L;
    size_t at = 0;
    for (int32_t l = 0; l < L; l++)
        for (int k = 0; k < 2; k++) {
            const size_t bb = numla_v4_pool_block_bytes(cfg, c->block_size, c->dtype, l, k);
            c->v4_off[2 * l + k] = bb ? at : SIZE_MAX;
            at += (bb * (size_t)c->num_blocks + 63) & ~(size_t)63;
        }
    c->v4_state_need = numla_v4_state_bytes(cfg, c->dtype);
    if (!at)
        return NUMLA_STATUS_OK;
    c->v4_data_bytes = (at + 4095) & ~(size_t)4095;
    void *p = mmap(NULL, c->v4_data_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (p == MAP_FAILED) {
        c->v4_data_bytes = 0;
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "kv cache: cannot map %zu bytes for DeepSeek-V4's "
                   "compressed entries (%lld blocks)", at, (long long)c->num_blocks);
    }
#ifdef MADV_HUGEPAGE
    (void)madvise(p, c->v4_data_bytes, MADV_HUGEPAGE);
#endif
    c->v4_data = p;
    return NUMLA_STATUS_OK;
}

numla_status numla_kv_cache_v4_pool(numla_kv_cache *c, numla_v4_pool *out)
{
    if (!c || !out || !c->v4_off)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_kv_cache_v4_pool: not a DeepSeek-V4 pool");
    memset(out, 0, sizeof *out);
    if (!c->v4_slots) /* after the pool's sizing set seq_blocks */
        NUMLA_CHECK(kv_add_v4_slots(c));
    out->block_size = c->block_size;
    out->num_blocks = c->num_blocks;
    out->dtype = c->dtype;
    out->slots = c->v4_slots;
    for (int32_t l = 0; l < c->v4_layers && l < NUMLA_V4_MAX_LAYERS; l++)
        for (int k = 0; k < 2; k++)
            out->entries[l][k] = c->v4_off[2 * l + k] == SIZE_MAX
                                     ? NULL
                                     : (char *)c->v4_data + c->v4_off[2 * l + k];
    return NUMLA_STATUS_OK;
}

numla_status numla_kv_cache_create_for_model(const numla_model_config *cfg, int32_t block_size,
                                             int64_t num_blocks, numla_dtype dtype,
                                             numla_dtype index_dtype, numla_kv_cache **out)
{
    if (!cfg || !out)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_kv_cache_create_for_model: NULL argument");
    if (cfg->v4.enabled) {
        /* DeepSeek-V4: blocks without latent rows; each block stands for its tokens' share of
         * the sequences' caches (numla_v4_cache_charge) */
        NUMLA_CHECK(kv_create((int32_t)numla_model_config_kv_layers(cfg), 0, 0, block_size,
                              num_blocks, dtype, 0, out));
        (*out)->block_bytes = numla_kv_block_bytes_for_model(cfg, block_size, dtype, index_dtype);
        numla_status s = kv_add_v4(*out, cfg);
        if (s != NUMLA_STATUS_OK) {
            numla_kv_cache_destroy(out);
            NUMLA_CHECK(s);
        }
        return NUMLA_STATUS_OK;
    }
    NUMLA_CHECK(numla_kv_cache_create((int32_t)numla_model_config_kv_layers(cfg),
                                      (int32_t)cfg->kv_lora_rank,
                                      (int32_t)cfg->qk_rope_head_dim, block_size, num_blocks,
                                      dtype, out));
    if (!cfg->dsa.enabled)
        return NUMLA_STATUS_OK;
    numla_status s = numla_kv_cache_add_index(*out, (int32_t)cfg->dsa.index_head_dim,
                                              index_dtype);
    if (s != NUMLA_STATUS_OK) {
        numla_kv_cache_destroy(out);
        NUMLA_CHECK(s);
    }
    return NUMLA_STATUS_OK;
}

void numla_kv_pool_charge(const numla_model_config *cfg, int32_t block_size, numla_dtype dtype,
                          numla_dtype index_dtype, int prefix_cache, size_t *block_bytes,
                          int32_t *seq_blocks, size_t *seq_bytes)
{
    size_t blk = numla_kv_block_bytes_for_model(cfg, block_size, dtype, index_dtype), seq = 0;
    int32_t seqb = 0;
    if (cfg->v4.enabled) {
        /* DeepSeek-V4 (docs/design.md §3.1): a block stands for its tokens' compressed entries
         * and index keys, plus, with the prefix cache, its share of the state kept per block
         * that ends a stride; each running sequence holds seqb blocks for its window rings and
         * compressors' rows. One block count then bounds all of V4's cache. */
        size_t per_block = 0;
        numla_v4_cache_charge(cfg, block_size, dtype, &per_block, &seq);
        if (prefix_cache) {
            const int64_t stride = numla_v4_prefix_stride(cfg, block_size);
            const size_t k = (size_t)(stride / block_size);
            blk += (numla_v4_prefix_bytes_cfg(cfg, stride, block_size, dtype) + k - 1) / k;
        }
        if (blk < seq / 256 + 1) /* few or no compressed layers: a sequence's own part is at
                                  * most 256 blocks (the pool stays a sensible count) */
            blk = seq / 256 + 1;
        seqb = (int32_t)((seq + blk - 1) / blk);
    }
    *block_bytes = blk;
    *seq_blocks = seqb;
    if (seq_bytes)
        *seq_bytes = seq;
}

int32_t numla_kv_default_block_size(const numla_model_config *cfg)
{
    if (!cfg || !cfg->v4.enabled)
        return 16;
    const int64_t s = numla_v4_prefix_stride(cfg, 16); /* lcm(16, every compress rate) */
    return s >= 16 && s <= 256 ? (int32_t)s : 16;
}

size_t numla_kv_block_bytes_for_model(const numla_model_config *cfg, int32_t block_size,
                                      numla_dtype dtype, numla_dtype index_dtype)
{
    if (cfg->v4.enabled) {
        size_t blk = 0, seq = 0;
        numla_v4_cache_charge(cfg, block_size, dtype, &blk, &seq);
        return blk;
    }
    const int32_t L = (int32_t)numla_model_config_kv_layers(cfg);
    size_t b = numla_kv_block_bytes(L, (int32_t)cfg->kv_lora_rank, (int32_t)cfg->qk_rope_head_dim,
                                    block_size, dtype);
    if (cfg->dsa.enabled)
        b += numla_kv_index_block_bytes(L, (int32_t)cfg->dsa.index_head_dim, block_size,
                                        index_dtype);
    return b;
}
