/* engine/formats/gguf.c — mmap-backed GGUF reader (single file or a gguf-split set). The format
 * and the checks are described in gguf.h. Parsing copies the metadata and the tensor table
 * into an arena owned by the set; the tensor bytes stay in the mappings. */
#define _GNU_SOURCE
#include "engine/formats/gguf.h"
#include "engine/formats/map_release.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Formats for file, key and tensor names inside error messages: hostile names can be huge. */
#define P_ "%.300s"
#define K_ "%.200s"

/* Part counts beyond this are not a model (DeepSeek's largest sets have tens of parts). */
enum { NUMLA_GGUF_MAX_PARTS = 9999 };

const char *numla_gguf_vtype_name(uint32_t t)
{
    static const char *const names[NUMLA_GGUF_VTYPE_COUNT] = {
        "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
        "bool", "string", "array", "uint64", "int64", "float64"};
    return t < NUMLA_GGUF_VTYPE_COUNT ? names[t] : "?";
}

/* Bytes of one scalar of type t in the file (0 for STRING and ARRAY, which have lengths). */
static size_t numla_gguf_scalar_size_(uint32_t t)
{
    static const unsigned char sizes[NUMLA_GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < NUMLA_GGUF_VTYPE_COUNT ? sizes[t] : 0;
}

/* ---------------------------------------------------------------------------------------- */
/* arena                                                                                     */

typedef struct numla_gguf_chunk {
    struct numla_gguf_chunk *next;
    size_t used, cap;
    max_align_t data[];
} numla_gguf_chunk;

typedef struct numla_gguf_part {
    char *path;
    void *map;   /* whole file, read-only (NULL for an empty file) */
    size_t size;
} numla_gguf_part;

struct numla_gguf {
    numla_gguf_part *parts;
    int32_t nparts;
    uint32_t version, alignment;
    numla_gguf_kv *kvs;          /* the first part's */
    int64_t nkv;
    int64_t *kv_sorted;          /* kv indices sorted by key */
    numla_gguf_tensor *tensors;  /* every part's, in order */
    int64_t ntensors, tensors_cap;
    int64_t *tensor_sorted;      /* tensor indices sorted by name */
    numla_gguf_chunk *arena;
};

static void *numla_gguf_alloc_(numla_gguf *g, size_t bytes)
{
    bytes = (bytes + 15) & ~(size_t)15;
    if (bytes == 0)
        bytes = 16;
    numla_gguf_chunk *c = g->arena;
    if (!c || c->cap - c->used < bytes) {
        size_t cap = bytes > ((size_t)1 << 20) ? bytes : ((size_t)1 << 20);
        c = malloc(sizeof *c + cap);
        if (!c)
            return NULL;
        c->next = g->arena;
        c->used = 0;
        c->cap = cap;
        g->arena = c;
    }
    void *p = (char *)c->data + c->used;
    c->used += bytes;
    return p;
}

/* ---------------------------------------------------------------------------------------- */
/* the cursor                                                                                */

typedef struct numla_gguf_cursor {
    const unsigned char *base, *p, *end;
    const char *path;
} numla_gguf_cursor;

static size_t numla_gguf_left_(const numla_gguf_cursor *c) { return (size_t)(c->end - c->p); }

static numla_status numla_gguf_truncated_(const numla_gguf_cursor *c, const char *what)
{
    NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ " is truncated: %s at byte %zu runs past the end (%zu bytes)",
               c->path, what, (size_t)(c->p - c->base), (size_t)(c->end - c->base));
}

static numla_status numla_gguf_read_(numla_gguf_cursor *c, void *dst, size_t n, const char *what)
{
    if (numla_gguf_left_(c) < n)
        return numla_gguf_truncated_(c, what);
    memcpy(dst, c->p, n); /* little-endian host (x86): the file's byte order */
    c->p += n;
    return NUMLA_STATUS_OK;
}

static numla_status numla_gguf_u32_(numla_gguf_cursor *c, uint32_t *v, const char *what)
{
    return numla_gguf_read_(c, v, 4, what);
}

static numla_status numla_gguf_u64_(numla_gguf_cursor *c, uint64_t *v, const char *what)
{
    return numla_gguf_read_(c, v, 8, what);
}

/* A string into the arena; names (keys, tensor names) may not hold NUL bytes. */
static numla_status numla_gguf_string_(numla_gguf *g, numla_gguf_cursor *c, numla_gguf_str *out,
                                       int is_name, const char *what)
{
    uint64_t len = 0;
    NUMLA_CHECK(numla_gguf_u64_(c, &len, what));
    if (len > numla_gguf_left_(c))
        return numla_gguf_truncated_(c, what);
    if (is_name && memchr(c->p, 0, (size_t)len))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": %s at byte %zu holds a NUL byte", c->path, what,
                   (size_t)(c->p - c->base));
    char *s = numla_gguf_alloc_(g, (size_t)len + 1);
    if (!s)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "gguf: no memory for %s of " P_, what, c->path);
    memcpy(s, c->p, (size_t)len);
    s[len] = 0;
    c->p += len;
    out->s = s;
    out->len = len;
    return NUMLA_STATUS_OK;
}

static numla_status numla_gguf_value_(numla_gguf *g, numla_gguf_cursor *c, uint32_t type,
                                      numla_gguf_value *out, const char *key, int depth);

/* A scalar of numeric type t from the file into the value. */
static void numla_gguf_scalar_decode_(uint32_t t, const unsigned char *p, numla_gguf_value *v)
{
    v->type = (numla_gguf_vtype)t;
    switch (t) {
    case NUMLA_GGUF_UINT8: v->v.u = p[0]; break;
    case NUMLA_GGUF_INT8: v->v.i = (int8_t)p[0]; break;
    case NUMLA_GGUF_UINT16: { uint16_t x; memcpy(&x, p, 2); v->v.u = x; break; }
    case NUMLA_GGUF_INT16: { int16_t x; memcpy(&x, p, 2); v->v.i = x; break; }
    case NUMLA_GGUF_UINT32: { uint32_t x; memcpy(&x, p, 4); v->v.u = x; break; }
    case NUMLA_GGUF_INT32: { int32_t x; memcpy(&x, p, 4); v->v.i = x; break; }
    case NUMLA_GGUF_FLOAT32: { float x; memcpy(&x, p, 4); v->v.f = x; break; }
    case NUMLA_GGUF_BOOL: v->v.b = p[0] != 0; break;
    case NUMLA_GGUF_UINT64: memcpy(&v->v.u, p, 8); break;
    case NUMLA_GGUF_INT64: memcpy(&v->v.i, p, 8); break;
    case NUMLA_GGUF_FLOAT64: memcpy(&v->v.f, p, 8); break;
    default: break;
    }
}

static numla_status numla_gguf_array_(numla_gguf *g, numla_gguf_cursor *c, numla_gguf_value *out,
                                      const char *key, int depth)
{
    uint32_t et = 0;
    uint64_t count = 0;
    NUMLA_CHECK(numla_gguf_u32_(c, &et, "an array's element type"));
    NUMLA_CHECK(numla_gguf_u64_(c, &count, "an array's length"));
    if (et >= NUMLA_GGUF_VTYPE_COUNT)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": key '" K_ "': array element type %u is unknown",
                   c->path, key, et);
    if (et == NUMLA_GGUF_ARRAY && depth + 1 >= NUMLA_GGUF_MAX_NESTING)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": key '" K_ "': arrays nested deeper than %d",
                   c->path, key, (int)NUMLA_GGUF_MAX_NESTING);
    /* Each element takes at least this many bytes of the file: the count cannot ask for more
     * memory than the file could describe. */
    const size_t esz = numla_gguf_scalar_size_(et);
    const size_t min_bytes = esz ? esz : et == NUMLA_GGUF_STRING ? 8 : 12;
    if (count > numla_gguf_left_(c) / min_bytes)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                   "gguf: " P_ " is truncated: key '" K_ "': array of %llu %s elements at byte %zu "
                   "runs past the end",
                   c->path, key, (unsigned long long)count, numla_gguf_vtype_name(et),
                   (size_t)(c->p - c->base));
    out->type = NUMLA_GGUF_ARRAY;
    out->v.arr.type = (numla_gguf_vtype)et;
    out->v.arr.count = count;
    if (esz) {
        /* Native widths equal the file's for every numeric type; bool is one byte, 0 or 1. */
        unsigned char *items = numla_gguf_alloc_(g, (size_t)count * esz);
        if (!items)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "gguf: no memory for key '" K_ "' of " P_, key, c->path);
        memcpy(items, c->p, (size_t)count * esz);
        if (et == NUMLA_GGUF_BOOL)
            for (uint64_t i = 0; i < count; i++)
                items[i] = items[i] != 0;
        c->p += count * esz;
        out->v.arr.items = items;
    } else if (et == NUMLA_GGUF_STRING) {
        numla_gguf_str *items = numla_gguf_alloc_(g, (size_t)count * sizeof *items);
        if (!items)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "gguf: no memory for key '" K_ "' of " P_, key, c->path);
        for (uint64_t i = 0; i < count; i++)
            NUMLA_CHECK(numla_gguf_string_(g, c, &items[i], 0, "a string in an array"));
        out->v.arr.items = items;
    } else {
        numla_gguf_value *items = numla_gguf_alloc_(g, (size_t)count * sizeof *items);
        if (!items)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "gguf: no memory for key '" K_ "' of " P_, key, c->path);
        for (uint64_t i = 0; i < count; i++)
            NUMLA_CHECK(numla_gguf_value_(g, c, NUMLA_GGUF_ARRAY, &items[i], key, depth + 1));
        out->v.arr.items = items;
    }
    return NUMLA_STATUS_OK;
}

static numla_status numla_gguf_value_(numla_gguf *g, numla_gguf_cursor *c, uint32_t type,
                                      numla_gguf_value *out, const char *key, int depth)
{
    if (type >= NUMLA_GGUF_VTYPE_COUNT)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": key '" K_ "': value type %u is unknown", c->path,
                   key, type);
    if (type == NUMLA_GGUF_STRING) {
        out->type = NUMLA_GGUF_STRING;
        return numla_gguf_string_(g, c, &out->v.str, 0, "a string value");
    }
    if (type == NUMLA_GGUF_ARRAY)
        return numla_gguf_array_(g, c, out, key, depth);
    const size_t n = numla_gguf_scalar_size_(type);
    if (numla_gguf_left_(c) < n)
        return numla_gguf_truncated_(c, "a value");
    numla_gguf_scalar_decode_(type, c->p, out);
    c->p += n;
    return NUMLA_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* lookups                                                                                   */

static const numla_gguf *numla_gguf_sort_ctx_;

static int numla_gguf_kv_cmp_(const void *a, const void *b)
{
    const numla_gguf *g = numla_gguf_sort_ctx_;
    return strcmp(g->kvs[*(const int64_t *)a].key, g->kvs[*(const int64_t *)b].key);
}

static int numla_gguf_tensor_cmp_(const void *a, const void *b)
{
    const numla_gguf *g = numla_gguf_sort_ctx_;
    return strcmp(g->tensors[*(const int64_t *)a].name, g->tensors[*(const int64_t *)b].name);
}

/* Sorted index over n entries; the comparison reads the set through a file-scope pointer, so
 * opening is not reentrant across threads (one open at a time; lookups are). */
static numla_status numla_gguf_index_(numla_gguf *g, int64_t n, int (*cmp)(const void *, const void *),
                                      int64_t **out)
{
    int64_t *idx = numla_gguf_alloc_(g, (size_t)(n ? n : 1) * sizeof *idx);
    if (!idx)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "gguf: no memory for the index of " P_, g->parts[0].path);
    for (int64_t i = 0; i < n; i++)
        idx[i] = i;
    numla_gguf_sort_ctx_ = g;
    qsort(idx, (size_t)n, sizeof *idx, cmp);
    numla_gguf_sort_ctx_ = NULL;
    *out = idx;
    return NUMLA_STATUS_OK;
}

const numla_gguf_value *numla_gguf_find(const numla_gguf *g, const char *key)
{
    if (!g || !key)
        return NULL;
    int64_t lo = 0, hi = g->nkv;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(g->kvs[g->kv_sorted[mid]].key, key);
        if (c == 0)
            return &g->kvs[g->kv_sorted[mid]].value;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const numla_gguf_tensor *numla_gguf_tensor_find(const numla_gguf *g, const char *name)
{
    if (!g || !name)
        return NULL;
    int64_t lo = 0, hi = g->ntensors;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(g->tensors[g->tensor_sorted[mid]].name, name);
        if (c == 0)
            return &g->tensors[g->tensor_sorted[mid]];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* one part                                                                                  */

static numla_status numla_gguf_map_(numla_gguf_part *part, const char *path)
{
    part->path = strdup(path);
    if (!part->path)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "gguf: no memory opening " P_, path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        NUMLA_FAIL(NUMLA_STATUS_IO, "gguf: cannot open " P_ ": %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        NUMLA_FAIL(NUMLA_STATUS_IO, "gguf: cannot stat " P_ ": %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        NUMLA_FAIL(NUMLA_STATUS_IO, "gguf: " P_ " is not a regular file", path);
    }
    part->size = (size_t)st.st_size;
    if (part->size > 0) {
        void *p = mmap(NULL, part->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            NUMLA_FAIL(NUMLA_STATUS_IO, "gguf: cannot mmap " P_ " (%zu bytes): %s", path, part->size,
                       strerror(e));
        }
        part->map = p;
    }
    close(fd);
    return NUMLA_STATUS_OK;
}

static int numla_gguf_offset_cmp_(const void *a, const void *b)
{
    const numla_gguf_tensor *x = *(const numla_gguf_tensor *const *)a, *y = *(const numla_gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Parse part `ip` (mapped): its metadata (kept when it is the first part, else only checked)
 * and its tensors (appended). */
static numla_status numla_gguf_parse_(numla_gguf *g, int32_t ip, numla_gguf_kv **kvs_out, int64_t *nkv_out)
{
    const numla_gguf_part *part = &g->parts[ip];
    /* An empty file has no mapping: parse an empty buffer (it fails at the magic). */
    const unsigned char *base = part->map ? (const unsigned char *)part->map : (const unsigned char *)"";
    numla_gguf_cursor c = {base, base, base + (part->map ? part->size : 0), part->path};
    unsigned char magic[4];
    NUMLA_CHECK(numla_gguf_read_(&c, magic, 4, "the magic"));
    if (memcmp(magic, "GGUF", 4))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ " is not a GGUF file: magic %02x %02x %02x %02x, not \"GGUF\"",
                   part->path, magic[0], magic[1], magic[2], magic[3]);
    uint32_t version = 0;
    NUMLA_CHECK(numla_gguf_u32_(&c, &version, "the version"));
    if (version == 1)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "gguf: " P_ ": version 1 (32-bit counts) is not supported; "
                   "convert it with a current llama.cpp", part->path);
    if (version >= 0x10000 && __builtin_bswap32(version) >= 1 && __builtin_bswap32(version) <= 3)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "gguf: " P_ " is a big-endian GGUF (version %u): not supported",
                   part->path, __builtin_bswap32(version));
    if (version != 2 && version != 3)
        NUMLA_FAIL(version > 3 ? NUMLA_STATUS_UNSUPPORTED : NUMLA_STATUS_FORMAT,
                   "gguf: " P_ ": version %u is not supported (2 and 3 are)", part->path, version);
    if (ip == 0)
        g->version = version;
    uint64_t ntensors = 0, nkv = 0;
    NUMLA_CHECK(numla_gguf_u64_(&c, &ntensors, "the tensor count"));
    NUMLA_CHECK(numla_gguf_u64_(&c, &nkv, "the key count"));
    /* A key takes at least 13 bytes (length, type, a 1-byte value), a tensor 24. */
    if (nkv > numla_gguf_left_(&c) / 13)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ " is truncated: %llu keys cannot fit in %zu bytes",
                   part->path, (unsigned long long)nkv, numla_gguf_left_(&c));
    if (ntensors > numla_gguf_left_(&c) / 24)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ " is truncated: %llu tensors cannot fit in %zu bytes",
                   part->path, (unsigned long long)ntensors, numla_gguf_left_(&c));

    numla_gguf_kv *kvs = numla_gguf_alloc_(g, (size_t)(nkv ? nkv : 1) * sizeof *kvs);
    if (!kvs)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "gguf: no memory for the keys of " P_, part->path);
    uint32_t alignment = NUMLA_GGUF_DEFAULT_ALIGNMENT;
    for (uint64_t i = 0; i < nkv; i++) {
        numla_gguf_str key;
        NUMLA_CHECK(numla_gguf_string_(g, &c, &key, 1, "a key"));
        uint32_t type = 0;
        NUMLA_CHECK(numla_gguf_u32_(&c, &type, "a value type"));
        kvs[i].key = key.s;
        NUMLA_CHECK(numla_gguf_value_(g, &c, type, &kvs[i].value, key.s, 0));
        if (!strcmp(key.s, "general.alignment")) {
            const numla_gguf_value *v = &kvs[i].value;
            /* ggml writes a uint32; any unsigned integer is taken. */
            int is_uint = v->type == NUMLA_GGUF_UINT8 || v->type == NUMLA_GGUF_UINT16 ||
                          v->type == NUMLA_GGUF_UINT32 || v->type == NUMLA_GGUF_UINT64;
            if (!is_uint || v->v.u == 0 || (v->v.u & (v->v.u - 1)) || v->v.u > (1u << 30))
                NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                           "gguf: " P_ ": key 'general.alignment' must be an unsigned power of two "
                           "up to 2^30 (it is a %s%s)",
                           part->path, numla_gguf_vtype_name(v->type), is_uint ? " out of range" : "");
            alignment = (uint32_t)v->v.u;
        }
    }
    if (ip == 0)
        g->alignment = alignment;

    if (!g->tensors || g->ntensors + (int64_t)ntensors > g->tensors_cap) {
        int64_t cap = g->ntensors + (int64_t)ntensors;
        numla_gguf_tensor *t = realloc(g->tensors, (size_t)(cap ? cap : 1) * sizeof *t);
        if (!t)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "gguf: no memory for the tensors of " P_, part->path);
        g->tensors = t;
        g->tensors_cap = cap;
    }
    numla_gguf_tensor *first = g->tensors + g->ntensors;
    for (uint64_t i = 0; i < ntensors; i++) {
        numla_gguf_tensor *t = &first[i];
        memset(t, 0, sizeof *t);
        numla_gguf_str name;
        NUMLA_CHECK(numla_gguf_string_(g, &c, &name, 1, "a tensor name"));
        t->name = name.s;
        t->file = part->path;
        uint32_t ndim = 0;
        NUMLA_CHECK(numla_gguf_u32_(&c, &ndim, "a tensor's n_dims"));
        if (ndim > NUMLA_GGUF_MAX_DIMS)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": tensor '" K_ "' has %u dimensions (at most %d)",
                       part->path, t->name, ndim, (int)NUMLA_GGUF_MAX_DIMS);
        t->ndim = (int32_t)ndim;
        for (int d = 0; d < NUMLA_GGUF_MAX_DIMS; d++)
            t->ne[d] = 1;
        for (uint32_t d = 0; d < ndim; d++) {
            uint64_t ne = 0;
            NUMLA_CHECK(numla_gguf_u64_(&c, &ne, "a tensor dimension"));
            if (ne > (uint64_t)INT64_MAX)
                NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": tensor '" K_ "': dimension %u is negative (%lld)",
                           part->path, t->name, d, (long long)(int64_t)ne);
            t->ne[d] = (int64_t)ne;
        }
        NUMLA_CHECK(numla_gguf_u32_(&c, &t->type, "a tensor type"));
        NUMLA_CHECK(numla_gguf_u64_(&c, &t->offset, "a tensor offset"));
        const numla_ggml_type_info *ti = numla_ggml_type_get(t->type);
        if (!ti)
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "gguf: " P_ ": tensor '" K_ "' has unknown ggml type %u",
                       part->path, t->name, t->type);
        /* Element count and bytes, checked for overflow; any zero dimension gives 0 bytes. */
        uint64_t elems = 1;
        int zero = 0;
        for (int d = 0; d < NUMLA_GGUF_MAX_DIMS; d++) {
            if (t->ne[d] == 0)
                zero = 1;
            else if (__builtin_mul_overflow(elems, (uint64_t)t->ne[d], &elems) || elems > (uint64_t)INT64_MAX)
                NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                           "gguf: " P_ ": tensor '" K_ "': dimensions %lld x %lld x %lld x %lld overflow",
                           part->path, t->name, (long long)t->ne[0], (long long)t->ne[1],
                           (long long)t->ne[2], (long long)t->ne[3]);
        }
        if (t->ne[0] % ti->block)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                       "gguf: " P_ ": tensor '" K_ "': ne[0] = %lld is not a multiple of %s's block of %d",
                       part->path, t->name, (long long)t->ne[0], ti->name, ti->block);
        uint64_t bytes = 0;
        if (!zero && __builtin_mul_overflow(elems / (uint64_t)ti->block, (uint64_t)ti->bytes, &bytes))
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": tensor '" K_ "': byte count overflows", part->path,
                       t->name);
        t->nbytes = (size_t)bytes;
        if (t->offset % alignment)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": tensor '" K_ "': offset %llu is not a multiple of "
                       "the alignment %u", part->path, t->name, (unsigned long long)t->offset, alignment);
    }

    /* The data section starts at the next multiple of the alignment. */
    size_t pos = (size_t)(c.p - c.base);
    size_t data = (pos + alignment - 1) / alignment * alignment;
    size_t avail = data <= part->size ? part->size - data : 0;
    for (uint64_t i = 0; i < ntensors; i++) {
        numla_gguf_tensor *t = &first[i];
        if (t->offset > avail || t->nbytes > avail - t->offset)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                       "gguf: " P_ ": tensor '" K_ "' [%llu, %llu) lies past the end of the data section "
                       "(%zu bytes from byte %zu)",
                       part->path, t->name, (unsigned long long)t->offset,
                       (unsigned long long)t->offset + (unsigned long long)t->nbytes, avail, data);
        t->data = (const unsigned char *)part->map + data + t->offset;
    }
    if (ntensors > 1) {
        numla_gguf_tensor **by = malloc((size_t)ntensors * sizeof *by);
        if (!by)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "gguf: no memory checking the tensors of " P_, part->path);
        for (uint64_t i = 0; i < ntensors; i++)
            by[i] = &first[i];
        qsort(by, (size_t)ntensors, sizeof *by, numla_gguf_offset_cmp_);
        for (uint64_t i = 1; i < ntensors; i++) {
            const numla_gguf_tensor *a = by[i - 1], *b = by[i];
            if (a->nbytes && b->nbytes && a->offset + a->nbytes > b->offset) {
                numla_status s = numla_error_set(
                    NUMLA_STATUS_FORMAT, __FILE__, __LINE__, __func__,
                    "gguf: " P_ ": tensors '" K_ "' and '" K_ "' overlap at offset %llu", part->path,
                    a->name, b->name, (unsigned long long)b->offset);
                free(by);
                return s;
            }
        }
        free(by);
    }
    g->ntensors += (int64_t)ntensors;
    *kvs_out = kvs;
    *nkv_out = (int64_t)nkv;
    return NUMLA_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* typed getters                                                                             */

static int numla_gguf_is_uint_(numla_gguf_vtype t)
{
    return t == NUMLA_GGUF_UINT8 || t == NUMLA_GGUF_UINT16 || t == NUMLA_GGUF_UINT32 || t == NUMLA_GGUF_UINT64;
}

static int numla_gguf_is_int_(numla_gguf_vtype t)
{
    return t == NUMLA_GGUF_INT8 || t == NUMLA_GGUF_INT16 || t == NUMLA_GGUF_INT32 || t == NUMLA_GGUF_INT64;
}

static numla_status numla_gguf_lookup_(const numla_gguf *g, const char *key, const numla_gguf_value **v)
{
    if (!g || !key)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "gguf: NULL %s", !g ? "file" : "key");
    *v = numla_gguf_find(g, key);
    if (!*v)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": key '" K_ "' is missing", g->parts[0].path, key);
    return NUMLA_STATUS_OK;
}

static numla_status numla_gguf_kind_(const numla_gguf *g, const char *key, const numla_gguf_value *v,
                                     const char *want)
{
    NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": key '" K_ "' is a %s, expected %s", g->parts[0].path, key,
               numla_gguf_vtype_name(v->type), want);
}

/* Any integer value as a signed 64-bit one plus a flag for unsigned values past INT64_MAX. */
static numla_status numla_gguf_int_(const numla_gguf *g, const char *key, int64_t *out, int *huge)
{
    const numla_gguf_value *v;
    NUMLA_CHECK(numla_gguf_lookup_(g, key, &v));
    *huge = 0;
    if (numla_gguf_is_uint_(v->type)) {
        *huge = v->v.u > (uint64_t)INT64_MAX;
        *out = (int64_t)v->v.u;
    } else if (numla_gguf_is_int_(v->type)) {
        *out = v->v.i;
    } else {
        return numla_gguf_kind_(g, key, v, "an integer");
    }
    return NUMLA_STATUS_OK;
}

numla_status numla_gguf_get_i64(const numla_gguf *g, const char *key, int64_t *out)
{
    int64_t x = 0;
    int huge = 0;
    NUMLA_CHECK(numla_gguf_int_(g, key, &x, &huge));
    if (huge)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": key '" K_ "' = %llu does not fit an int64",
                   g->parts[0].path, key, (unsigned long long)x);
    *out = x;
    return NUMLA_STATUS_OK;
}

numla_status numla_gguf_get_u64(const numla_gguf *g, const char *key, uint64_t *out)
{
    int64_t x = 0;
    int huge = 0;
    NUMLA_CHECK(numla_gguf_int_(g, key, &x, &huge));
    if (!huge && x < 0)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": key '" K_ "' = %lld is negative", g->parts[0].path,
                   key, (long long)x);
    *out = (uint64_t)x;
    return NUMLA_STATUS_OK;
}

numla_status numla_gguf_get_u32(const numla_gguf *g, const char *key, uint32_t *out)
{
    uint64_t x = 0;
    NUMLA_CHECK(numla_gguf_get_u64(g, key, &x));
    if (x > UINT32_MAX)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": key '" K_ "' = %llu does not fit a uint32",
                   g->parts[0].path, key, (unsigned long long)x);
    *out = (uint32_t)x;
    return NUMLA_STATUS_OK;
}

numla_status numla_gguf_get_f64(const numla_gguf *g, const char *key, double *out)
{
    const numla_gguf_value *v;
    NUMLA_CHECK(numla_gguf_lookup_(g, key, &v));
    if (v->type == NUMLA_GGUF_FLOAT32 || v->type == NUMLA_GGUF_FLOAT64)
        *out = v->v.f;
    else if (numla_gguf_is_uint_(v->type))
        *out = (double)v->v.u;
    else if (numla_gguf_is_int_(v->type))
        *out = (double)v->v.i;
    else
        return numla_gguf_kind_(g, key, v, "a number");
    return NUMLA_STATUS_OK;
}

numla_status numla_gguf_get_f32(const numla_gguf *g, const char *key, float *out)
{
    double x = 0;
    NUMLA_CHECK(numla_gguf_get_f64(g, key, &x));
    *out = (float)x;
    return NUMLA_STATUS_OK;
}

numla_status numla_gguf_get_bool(const numla_gguf *g, const char *key, int *out)
{
    const numla_gguf_value *v;
    NUMLA_CHECK(numla_gguf_lookup_(g, key, &v));
    if (v->type != NUMLA_GGUF_BOOL)
        return numla_gguf_kind_(g, key, v, "a bool");
    *out = v->v.b;
    return NUMLA_STATUS_OK;
}

numla_status numla_gguf_get_str(const numla_gguf *g, const char *key, const char **out)
{
    const numla_gguf_value *v;
    NUMLA_CHECK(numla_gguf_lookup_(g, key, &v));
    if (v->type != NUMLA_GGUF_STRING)
        return numla_gguf_kind_(g, key, v, "a string");
    *out = v->v.str.s;
    return NUMLA_STATUS_OK;
}

numla_status numla_gguf_get_array(const numla_gguf *g, const char *key, numla_gguf_vtype elem,
                                  const numla_gguf_value **out)
{
    const numla_gguf_value *v;
    NUMLA_CHECK(numla_gguf_lookup_(g, key, &v));
    if (v->type != NUMLA_GGUF_ARRAY)
        return numla_gguf_kind_(g, key, v, "an array");
    if (elem != NUMLA_GGUF_VTYPE_COUNT && v->v.arr.type != elem)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": key '" K_ "' is an array of %s, expected %s",
                   g->parts[0].path, key, numla_gguf_vtype_name(v->v.arr.type), numla_gguf_vtype_name(elem));
    *out = v;
    return NUMLA_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* open / close                                                                              */

/* Split names: "PREFIX-%05d-of-%05d.gguf". On a match, the prefix length. */
static int numla_gguf_split_name_(const char *path, size_t *prefix_len)
{
    size_t n = strlen(path);
    const size_t tail = strlen("-00001-of-00009.gguf");
    if (n < tail)
        return 0;
    const char *s = path + n - tail;
    for (int i = 0; i < 20; i++) {
        char want = "-#####-of-#####.gguf"[i];
        if (want == '#' ? (s[i] < '0' || s[i] > '9') : s[i] != want)
            return 0;
    }
    *prefix_len = n - tail;
    return 1;
}

/* A split key of part ip as an integer, or -1 when absent. */
static numla_status numla_gguf_split_key_(const numla_gguf_kv *kvs, int64_t nkv, const char *path,
                                          const char *key, int64_t *out)
{
    *out = -1;
    for (int64_t i = 0; i < nkv; i++) {
        if (strcmp(kvs[i].key, key))
            continue;
        const numla_gguf_value *v = &kvs[i].value;
        if (numla_gguf_is_uint_(v->type) && v->v.u <= (uint64_t)INT32_MAX)
            *out = (int64_t)v->v.u;
        else if (numla_gguf_is_int_(v->type) && v->v.i >= 0 && v->v.i <= INT32_MAX)
            *out = v->v.i;
        else
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": key '%s' must be a small non-negative integer "
                       "(it is a %s)", path, key, numla_gguf_vtype_name(v->type));
    }
    return NUMLA_STATUS_OK;
}

static numla_status numla_gguf_add_part_(numla_gguf *g, const char *path, numla_gguf_kv **kvs, int64_t *nkv)
{
    numla_gguf_part *parts = realloc(g->parts, (size_t)(g->nparts + 1) * sizeof *parts);
    if (!parts)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "gguf: no memory opening " P_, path);
    g->parts = parts;
    numla_gguf_part *part = &g->parts[g->nparts++];
    memset(part, 0, sizeof *part);
    NUMLA_CHECK(numla_gguf_map_(part, path));
    NUMLA_CHECK(numla_gguf_parse_(g, g->nparts - 1, kvs, nkv));
    return NUMLA_STATUS_OK;
}

static numla_status numla_gguf_open_(numla_gguf *g, const char *path)
{
    numla_gguf_kv *kvs;
    int64_t nkv;
    NUMLA_CHECK(numla_gguf_add_part_(g, path, &kvs, &nkv));
    int64_t count, no, total;
    NUMLA_CHECK(numla_gguf_split_key_(kvs, nkv, path, "split.count", &count));
    NUMLA_CHECK(numla_gguf_split_key_(kvs, nkv, path, "split.no", &no));
    if (count <= 1) {
        if (no > 0)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": split.no = %lld but split.count = %lld", path,
                       (long long)no, (long long)count);
        g->kvs = kvs;
        g->nkv = nkv;
        return NUMLA_STATUS_OK;
    }
    size_t plen;
    if (!numla_gguf_split_name_(path, &plen))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ " is part of a %lld-part split set, but its name does not "
                   "end in -NNNNN-of-NNNNN.gguf, so its other parts cannot be found",
                   path, (long long)count);
    if (count > NUMLA_GGUF_MAX_PARTS || no < 0 || no >= count ||
        strtol(path + plen + 10, NULL, 10) != count)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": split.no = %lld, split.count = %lld disagree with its "
                   "name", path, (long long)no, (long long)count);
    /* Start over from the first part, which holds the metadata. */
    for (int32_t i = 0; i < g->nparts; i++) {
        if (g->parts[i].map)
            munmap(g->parts[i].map, g->parts[i].size);
        free(g->parts[i].path);
    }
    g->nparts = 0;
    g->ntensors = 0;
    char *name = malloc(plen + 32);
    if (!name)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "gguf: no memory opening " P_, path);
    numla_status s = NUMLA_STATUS_OK;
    for (int64_t i = 0; i < count && s == NUMLA_STATUS_OK; i++) {
        snprintf(name, plen + 32, "%.*s-%05lld-of-%05lld.gguf", (int)plen, path, (long long)i + 1,
                 (long long)count);
        numla_gguf_kv *pk;
        int64_t pn, pcount, pno;
        s = numla_gguf_add_part_(g, name, &pk, &pn);
        if (s == NUMLA_STATUS_IO && access(name, F_OK) != 0) {
            s = numla_error_set(NUMLA_STATUS_IO, __FILE__, __LINE__, __func__,
                                "gguf: split part %lld of %lld is missing: " P_ " (opening " P_ ")",
                                (long long)i + 1, (long long)count, name, path);
            break;
        }
        if (s == NUMLA_STATUS_OK)
            s = numla_gguf_split_key_(pk, pn, name, "split.count", &pcount);
        if (s == NUMLA_STATUS_OK)
            s = numla_gguf_split_key_(pk, pn, name, "split.no", &pno);
        if (s == NUMLA_STATUS_OK && (pcount != count || pno != i))
            s = numla_error_set(NUMLA_STATUS_FORMAT, __FILE__, __LINE__, __func__,
                                "gguf: " P_ ": split.no = %lld, split.count = %lld, expected %lld and %lld",
                                name, (long long)pno, (long long)pcount, (long long)i, (long long)count);
        if (s == NUMLA_STATUS_OK && i == 0) {
            g->kvs = pk;
            g->nkv = pn;
        }
    }
    free(name);
    NUMLA_CHECK(s);
    NUMLA_CHECK(numla_gguf_split_key_(g->kvs, g->nkv, g->parts[0].path, "split.tensors.count", &total));
    if (total >= 0 && total != g->ntensors)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": split.tensors.count = %lld but the %lld parts hold %lld "
                   "tensors", g->parts[0].path, (long long)total, (long long)count, (long long)g->ntensors);
    return NUMLA_STATUS_OK;
}

numla_status numla_gguf_open(const char *path, numla_gguf **out)
{
    if (!path || !out)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "gguf: NULL %s", !path ? "path" : "out");
    *out = NULL;
    numla_gguf *g = calloc(1, sizeof *g);
    if (!g)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "gguf: no memory opening " P_, path);
    numla_status s;
    NUMLA_CHECK_GOTO(numla_gguf_open_(g, path), s, fail);
    NUMLA_CHECK_GOTO(numla_gguf_index_(g, g->nkv, numla_gguf_kv_cmp_, &g->kv_sorted), s, fail);
    for (int64_t i = 1; i < g->nkv; i++)
        if (!strcmp(g->kvs[g->kv_sorted[i - 1]].key, g->kvs[g->kv_sorted[i]].key)) {
            s = numla_error_set(NUMLA_STATUS_FORMAT, __FILE__, __LINE__, __func__,
                                "gguf: " P_ ": key '" K_ "' appears twice", g->parts[0].path,
                                g->kvs[g->kv_sorted[i]].key);
            goto fail;
        }
    NUMLA_CHECK_GOTO(numla_gguf_index_(g, g->ntensors, numla_gguf_tensor_cmp_, &g->tensor_sorted), s, fail);
    for (int64_t i = 1; i < g->ntensors; i++) {
        const numla_gguf_tensor *a = &g->tensors[g->tensor_sorted[i - 1]], *b = &g->tensors[g->tensor_sorted[i]];
        if (!strcmp(a->name, b->name)) {
            s = numla_error_set(NUMLA_STATUS_FORMAT, __FILE__, __LINE__, __func__,
                                "gguf: tensor '" K_ "' appears twice: in " P_ " and " P_, a->name, a->file,
                                b->file);
            goto fail;
        }
    }
    *out = g;
    return NUMLA_STATUS_OK;
fail:
    numla_gguf_close(&g);
    return s;
}

void numla_gguf_release(const numla_gguf *g, const void *p, size_t n)
{
    for (int32_t i = 0; g && i < g->nparts; i++)
        if (numla_map_release(g->parts[i].map, g->parts[i].size, p, n))
            return;
}

void numla_gguf_close(numla_gguf **gp)
{
    if (!gp || !*gp)
        return;
    numla_gguf *g = *gp;
    for (int32_t i = 0; i < g->nparts; i++) {
        if (g->parts[i].map)
            munmap(g->parts[i].map, g->parts[i].size);
        free(g->parts[i].path);
    }
    free(g->parts);
    free(g->tensors);
    while (g->arena) {
        numla_gguf_chunk *next = g->arena->next;
        free(g->arena);
        g->arena = next;
    }
    free(g);
    *gp = NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* accessors                                                                                 */

const char *numla_gguf_path(const numla_gguf *g) { return g && g->nparts ? g->parts[0].path : ""; }
uint32_t numla_gguf_version(const numla_gguf *g) { return g ? g->version : 0; }
int32_t numla_gguf_part_count(const numla_gguf *g) { return g ? g->nparts : 0; }
uint32_t numla_gguf_alignment(const numla_gguf *g) { return g ? g->alignment : 0; }
int64_t numla_gguf_kv_count(const numla_gguf *g) { return g ? g->nkv : 0; }
int64_t numla_gguf_tensor_count(const numla_gguf *g) { return g ? g->ntensors : 0; }

const numla_gguf_kv *numla_gguf_kv_at(const numla_gguf *g, int64_t i)
{
    return g && i >= 0 && i < g->nkv ? &g->kvs[i] : NULL;
}

const numla_gguf_tensor *numla_gguf_tensor_at(const numla_gguf *g, int64_t i)
{
    return g && i >= 0 && i < g->ntensors ? &g->tensors[i] : NULL;
}

numla_status numla_gguf_tensor_expect(const numla_gguf *g, const char *name, int32_t ndim,
                                      const int64_t *ne, const numla_gguf_tensor **out)
{
    if (!g || !name || (ndim > 0 && !ne) || ndim < 0 || ndim > NUMLA_GGUF_MAX_DIMS)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "gguf: bad arguments expecting tensor '" K_ "'", name ? name : "?");
    const numla_gguf_tensor *t = numla_gguf_tensor_find(g, name);
    if (!t)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "gguf: " P_ ": tensor '" K_ "' is missing", g->parts[0].path, name);
    int ok = 1;
    for (int d = 0; d < NUMLA_GGUF_MAX_DIMS; d++)
        ok &= t->ne[d] == (d < ndim ? ne[d] : 1);
    if (!ok)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                   "gguf: " P_ ": tensor '" K_ "' has ne = [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld, %lld]",
                   t->file, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                   (long long)t->ne[3], (long long)(ndim > 0 ? ne[0] : 1), (long long)(ndim > 1 ? ne[1] : 1),
                   (long long)(ndim > 2 ? ne[2] : 1), (long long)(ndim > 3 ? ne[3] : 1));
    if (out)
        *out = t;
    return NUMLA_STATUS_OK;
}
