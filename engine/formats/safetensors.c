/* engine/formats/safetensors.c — mmap-backed safetensors reader (single file or sharded through
 * model.safetensors.index.json); the writer is safetensors_writer.c. Owns the mappings, the
 * tensor table and the name hash; never copies tensor bytes (the weight loader does,
 * docs/design.md §3).
 *
 * Every header is treated as hostile: each length, offset and shape is checked in 64-bit with
 * overflow checks before any pointer is formed, so a bad file is a FORMAT error naming the file
 * and the tensor, never a read outside the mapping.
 */
#define _GNU_SOURCE
#include "engine/formats/safetensors.h"
#include "engine/formats/safetensors_internal.h"
#include "engine/formats/map_release.h"
#include "engine/json/model_json.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* A header this large is not a model header: V3's ~100k tensors need ~10 MB. */
enum { NUMLA_SAFETENSORS_HEADER_MAX = 100 * 1000 * 1000 };


typedef struct numla_safetensors_file {
    char *path;
    void *map;        /* whole file, read-only */
    size_t size;
} numla_safetensors_file;

struct numla_safetensors_model {
    char *dir;
    numla_safetensors_file *files;
    int nfiles, files_cap;
    numla_safetensors_tensor *tensors;
    int64_t n, cap;
    int64_t *hash;    /* open addressing: tensor index or -1; hash_cap is a power of two */
    size_t hash_cap;
};

/* ---------------------------------------------------------------------------------------- */
/* dtype names                                                                               */

static int numla_safetensors_dtype_parse(const char *s, numla_dtype *out)
{
    if (!strcmp(s, "F32")) *out = NUMLA_DTYPE_F32;
    else if (!strcmp(s, "F16")) *out = NUMLA_DTYPE_F16;
    else if (!strcmp(s, "BF16")) *out = NUMLA_DTYPE_BF16;
    else if (!strcmp(s, "F8_E4M3")) *out = NUMLA_DTYPE_F8_E4M3;
    else if (!strcmp(s, "I8")) *out = NUMLA_DTYPE_I8;
    else if (!strcmp(s, "I32")) *out = NUMLA_DTYPE_I32;
    else if (!strcmp(s, "I64")) *out = NUMLA_DTYPE_I64;
    else if (!strcmp(s, "F8_E8M0")) *out = NUMLA_DTYPE_F8_E8M0;
    else return 0;
    return 1;
}

/* dtypes the safetensors format defines but this engine cannot serve (yet). */
static int numla_safetensors_dtype_known_unsupported(const char *s)
{
    static const char *const names[] = {"BOOL", "U8", "I16", "U16", "U32",
                                        "U64", "F64", "F8_E5M2", "F6_E2M3",
                                        "F6_E3M2", "F4", "C64"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(s, names[i]))
            return 1;
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* name hash                                                                                 */

static uint64_t numla_safetensors_hash_str(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a, then a final mix so low bits are good */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    return h ^ (h >> 33);
}

/* Index of `name` or -1. */
static int64_t numla_safetensors_hash_find(const numla_safetensors_model *m, const char *name)
{
    if (!m->hash_cap)
        return -1;
    size_t mask = m->hash_cap - 1;
    for (size_t i = numla_safetensors_hash_str(name) & mask;; i = (i + 1) & mask) {
        int64_t t = m->hash[i];
        if (t < 0)
            return -1;
        if (!strcmp(m->tensors[t].name, name))
            return t;
    }
}

/* Build the table over all tensors; a duplicated name is an error naming both files. */
static numla_status numla_safetensors_hash_build(numla_safetensors_model *m)
{
    size_t cap = 16;
    while (cap < (size_t)m->n * 2)
        cap *= 2;
    m->hash = malloc(cap * sizeof *m->hash);
    if (!m->hash)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "safetensors: no memory for the name table of " P_,
                   m->dir);
    m->hash_cap = cap;
    for (size_t i = 0; i < cap; i++)
        m->hash[i] = -1;
    for (int64_t t = 0; t < m->n; t++) {
        const char *name = m->tensors[t].name;
        size_t i = numla_safetensors_hash_str(name) & (cap - 1);
        for (; m->hash[i] >= 0; i = (i + 1) & (cap - 1)) {
            const numla_safetensors_tensor *o = &m->tensors[m->hash[i]];
            if (!strcmp(o->name, name))
                NUMLA_FAIL(NUMLA_STATUS_FORMAT, "safetensors: tensor '" T_ "' appears twice: in "
                           P_ " and in " P_, name, o->file, m->tensors[t].file);
        }
        m->hash[i] = t;
    }
    return NUMLA_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* one file                                                                                  */

static numla_status numla_safetensors_map(numla_safetensors_model *m, const char *path, numla_safetensors_file **out)
{
    if (m->nfiles == m->files_cap) {
        int cap = m->files_cap ? 2 * m->files_cap : 4;
        numla_safetensors_file *f = realloc(m->files, (size_t)cap * sizeof *f);
        if (!f)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "safetensors: no memory opening " P_, path);
        m->files = f;
        m->files_cap = cap;
    }
    numla_safetensors_file *f = &m->files[m->nfiles];
    memset(f, 0, sizeof *f);
    f->path = strdup(path);
    if (!f->path)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "safetensors: no memory opening " P_, path);
    m->nfiles++; /* from here on, close() frees it */

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        NUMLA_FAIL(NUMLA_STATUS_IO, "safetensors: cannot open " P_ ": %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        NUMLA_FAIL(NUMLA_STATUS_IO, "safetensors: cannot stat " P_ ": %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        NUMLA_FAIL(NUMLA_STATUS_IO, "safetensors: " P_ " is not a regular file", path);
    }
    if (st.st_size < 8) {
        close(fd);
        NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                   "safetensors: " P_ " is %lld bytes, shorter than the 8-byte header length",
                   path, (long long)st.st_size);
    }
    f->size = (size_t)st.st_size;
    void *p = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED)
        NUMLA_FAIL(NUMLA_STATUS_IO, "safetensors: cannot mmap " P_ " (%zu bytes): %s", path,
                   f->size, strerror(e));
    f->map = p;
    *out = f;
    return NUMLA_STATUS_OK;
}

static numla_status numla_safetensors_push(numla_safetensors_model *m, numla_safetensors_tensor **out, const char *path)
{
    if (m->n == m->cap) {
        int64_t cap = m->cap ? 2 * m->cap : 64;
        numla_safetensors_tensor *t = realloc(m->tensors, (size_t)cap * sizeof *t);
        if (!t)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "safetensors: no memory for the tensors of " P_,
                       path);
        m->tensors = t;
        m->cap = cap;
    }
    *out = &m->tensors[m->n];
    memset(*out, 0, sizeof **out);
    return NUMLA_STATUS_OK;
}

/* A non-negative JSON integer, or -1 when `v` is anything else. */
static int64_t numla_safetensors_json_u63(const json_t *v)
{
    if (!json_is_integer(v))
        return -1;
    json_int_t x = json_integer_value(v);
    return x < 0 ? -1 : (int64_t)x;
}

/* Validate one header entry and append it (data offsets still relative to the data section:
 * the caller checks overlaps before forming pointers). */
static numla_status numla_safetensors_parse_entry(numla_safetensors_model *m, const numla_safetensors_file *f,
                                         const char *name, const json_t *e, size_t data_size,
                                         uint64_t *begin_out)
{
    const char *path = f->path;
    if (!json_is_object(e))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "safetensors: " P_ ": tensor '" T_
                   "': entry is not a JSON object", path, name);
    const json_t *jd = json_object_get(e, "dtype");
    const json_t *js = json_object_get(e, "shape");
    const json_t *jo = json_object_get(e, "data_offsets");
    if (!json_is_string(jd))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "safetensors: " P_ ": tensor '" T_
                   "': missing or non-string \"dtype\"", path, name);
    if (!json_is_array(js))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "safetensors: " P_ ": tensor '" T_
                   "': missing or non-array \"shape\"", path, name);
    if (!json_is_array(jo))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "safetensors: " P_ ": tensor '" T_
                   "': missing or non-array \"data_offsets\"", path, name);

    const char *ds = json_string_value(jd);
    numla_dtype dt;
    if (!numla_safetensors_dtype_parse(ds, &dt)) {
        if (numla_safetensors_dtype_known_unsupported(ds))
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "safetensors: " P_ ": tensor '" T_
                       "' has dtype %.40s; numla reads only F32, F16, BF16, F8_E4M3, F8_E8M0, I8, I32 and I64", path,
                       name, ds);
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "safetensors: " P_ ": tensor '" T_
                   "' has unknown dtype \"%.40s\"", path, name, ds);
    }

    size_t ndim = json_array_size(js);
    if (ndim > NUMLA_SAFETENSORS_MAX_DIMS)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "safetensors: " P_ ": tensor '" T_
                   "' has %zu dimensions (at most %d)", path, name, ndim, NUMLA_SAFETENSORS_MAX_DIMS);
    int64_t shape[NUMLA_SAFETENSORS_MAX_DIMS];
    uint64_t count = 1;
    int overflow = 0;
    for (size_t i = 0; i < ndim; i++) {
        shape[i] = numla_safetensors_json_u63(json_array_get(js, i));
        if (shape[i] < 0)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "safetensors: " P_ ": tensor '" T_
                       "': shape[%zu] is not a non-negative integer", path, name, i);
        overflow |= __builtin_mul_overflow(count, (uint64_t)shape[i], &count);
    }
    uint64_t nbytes = 0;
    overflow |= __builtin_mul_overflow(count, (uint64_t)numla_dtype_size(dt), &nbytes);
    /* A zero dimension makes the product 0 even after an overflowing prefix. */
    for (size_t i = 0; i < ndim; i++)
        if (shape[i] == 0)
            overflow = 0, nbytes = 0;
    if (overflow)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "safetensors: " P_ ": tensor '" T_
                   "': shape's element count overflows 64 bits", path, name);

    if (json_array_size(jo) != 2)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "safetensors: " P_ ": tensor '" T_
                   "': \"data_offsets\" must be [begin, end]", path, name);
    int64_t b = numla_safetensors_json_u63(json_array_get(jo, 0));
    int64_t en = numla_safetensors_json_u63(json_array_get(jo, 1));
    if (b < 0 || en < 0)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "safetensors: " P_ ": tensor '" T_
                   "': data_offsets are not non-negative integers", path, name);
    if (b > en)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "safetensors: " P_ ": tensor '" T_
                   "': data_offsets begin %lld > end %lld", path, name, (long long)b,
                   (long long)en);
    if ((uint64_t)en > data_size)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "safetensors: " P_ ": tensor '" T_
                   "': data_offsets [%lld, %lld) run past the data section (%zu bytes)", path,
                   name, (long long)b, (long long)en, data_size);
    if ((uint64_t)(en - b) != nbytes)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "safetensors: " P_ ": tensor '" T_
                   "': data_offsets hold %lld bytes but shape x %s needs %llu", path, name,
                   (long long)(en - b), ds, (unsigned long long)nbytes);

    numla_safetensors_tensor *t = NULL;
    NUMLA_CHECK(numla_safetensors_push(m, &t, path));
    t->name = strdup(name);
    if (!t->name)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "safetensors: no memory for tensor names of " P_, path);
    t->dtype = dt;
    t->ndim = (int32_t)ndim;
    memcpy(t->shape, shape, ndim * sizeof shape[0]);
    t->nbytes = (size_t)nbytes;
    t->file = f->path;
    m->n++;
    *begin_out = (uint64_t)b;
    return NUMLA_STATUS_OK;
}

typedef struct numla_safetensors_span {
    uint64_t begin, end;
    int64_t index;
} numla_safetensors_span;

static int numla_safetensors_span_cmp(const void *a, const void *b)
{
    const numla_safetensors_span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* Map `path` and append its tensors. */
static numla_status numla_safetensors_parse_file(numla_safetensors_model *m, const char *path)
{
    numla_safetensors_file *f = NULL;
    NUMLA_CHECK(numla_safetensors_map(m, path, &f));
    path = f->path;
    const unsigned char *base = f->map;
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)base[i] << (8 * i);
    if (hlen > f->size - 8)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "safetensors: " P_ ": header length %llu runs past the "
                   "end of the file (%zu bytes)", path, (unsigned long long)hlen, f->size);
    if (hlen > NUMLA_SAFETENSORS_HEADER_MAX)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "safetensors: " P_ ": header length %llu is absurd (> %d)",
                   path, (unsigned long long)hlen, NUMLA_SAFETENSORS_HEADER_MAX);
    size_t data_size = f->size - 8 - (size_t)hlen;
    const unsigned char *data = base + 8 + hlen;

    json_error_t jerr;
    json_t *root = json_loadb((const char *)base + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "safetensors: " P_ ": header is not valid JSON: %.200s "
                   "(header byte %d)", path, jerr.text, jerr.position);
    if (!json_is_object(root)) {
        json_decref(root);
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "safetensors: " P_ ": header is not a JSON object", path);
    }

    numla_status s = NUMLA_STATUS_OK;
    size_t nent = json_object_size(root);
    numla_safetensors_span *spans = malloc((nent ? nent : 1) * sizeof *spans);
    if (!spans) {
        json_decref(root);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "safetensors: no memory parsing " P_, path);
    }
    size_t ns = 0;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__")) {
            if (!json_is_object(val)) {
                s = numla_error_set(NUMLA_STATUS_FORMAT, __FILE__, __LINE__, __func__,
                                    "safetensors: " P_ ": \"__metadata__\" is not an object",
                                    path);
                goto done;
            }
            continue;
        }
        uint64_t begin = 0;
        NUMLA_CHECK_GOTO(numla_safetensors_parse_entry(m, f, key, val, data_size, &begin), s, done);
        spans[ns].begin = begin;
        spans[ns].end = begin + m->tensors[m->n - 1].nbytes;
        spans[ns].index = m->n - 1;
        ns++;
    }

    /* Overlaps: after sorting by begin, each non-empty span must start at or after the furthest
     * end seen so far. Empty tensors occupy no bytes and cannot overlap. */
    qsort(spans, ns, sizeof *spans, numla_safetensors_span_cmp);
    int64_t prev = -1;
    uint64_t prev_end = 0;
    for (size_t i = 0; i < ns; i++) {
        if (spans[i].begin == spans[i].end)
            continue;
        if (prev >= 0 && spans[i].begin < prev_end) {
            s = numla_error_set(NUMLA_STATUS_FORMAT, __FILE__, __LINE__, __func__,
                                "safetensors: " P_ ": tensor '" T_ "' [%llu, %llu) overlaps "
                                "tensor '" T_ "' (ends at %llu)", path,
                                m->tensors[spans[i].index].name,
                                (unsigned long long)spans[i].begin,
                                (unsigned long long)spans[i].end, m->tensors[prev].name,
                                (unsigned long long)prev_end);
            goto done;
        }
        if (spans[i].end > prev_end) {
            prev_end = spans[i].end;
            prev = spans[i].index;
        }
    }
    for (size_t i = 0; i < ns; i++)
        m->tensors[spans[i].index].data = data + spans[i].begin;

done:
    free(spans);
    json_decref(root);
    return s;
}

/* ---------------------------------------------------------------------------------------- */
/* open / close                                                                              */

static char *numla_safetensors_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (p) {
        memcpy(p, dir, a);
        p[a] = '/';
        memcpy(p + a + 1, name, b + 1);
    }
    return p;
}

/* A shard name from index.json must stay inside the model directory. */
static int numla_safetensors_shard_name_ok(const char *s)
{
    return s[0] && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

static numla_status numla_safetensors_open_sharded(numla_safetensors_model *m, const char *index_path)
{
    if (access(index_path, R_OK) != 0)
        NUMLA_FAIL(NUMLA_STATUS_IO, "safetensors: cannot read " P_ ": %s", index_path,
                   strerror(errno));
    json_t *root = NULL;
    NUMLA_CHECK(numla_json_file_read(index_path, JSON_REJECT_DUPLICATES, &root));
    numla_status s = NUMLA_STATUS_OK;
    char **shards = NULL;
    size_t nshards = 0;
    const json_t *wm = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    if (!json_is_object(wm)) {
        s = numla_error_set(NUMLA_STATUS_FORMAT, __FILE__, __LINE__, __func__,
                            "safetensors: " P_ ": missing \"weight_map\" object", index_path);
        goto done;
    }

    /* Distinct shard names, in first-seen order. */
    shards = calloc(json_object_size(wm) + 1, sizeof *shards);
    if (!shards) {
        s = numla_error_set(NUMLA_STATUS_NO_MEMORY, __FILE__, __LINE__, __func__,
                            "safetensors: no memory reading " P_, index_path);
        goto done;
    }
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)wm, key, val) {
        if (!json_is_string(val) || !numla_safetensors_shard_name_ok(json_string_value(val))) {
            s = numla_error_set(NUMLA_STATUS_FORMAT, __FILE__, __LINE__, __func__,
                                "safetensors: " P_ ": tensor '" T_ "' maps to an invalid shard "
                                "name (must be a file name in the model directory)",
                                index_path, key);
            goto done;
        }
        const char *sh = json_string_value(val);
        size_t i = 0;
        while (i < nshards && strcmp(shards[i], sh))
            i++;
        if (i == nshards)
            shards[nshards++] = (char *)sh;
    }
    for (size_t i = 0; i < nshards; i++) {
        char *p = numla_safetensors_join(m->dir, shards[i]);
        if (!p) {
            s = numla_error_set(NUMLA_STATUS_NO_MEMORY, __FILE__, __LINE__, __func__,
                                "safetensors: no memory reading " P_, index_path);
            goto done;
        }
        if (access(p, F_OK) != 0) {
            s = numla_error_set(NUMLA_STATUS_IO, __FILE__, __LINE__, __func__,
                                "safetensors: " P_ " names shard " P_ " which does not exist: %s",
                                index_path, p, strerror(errno));
            free(p);
            goto done;
        }
        s = numla_safetensors_parse_file(m, p);
        free(p);
        if (s != NUMLA_STATUS_OK) {
            numla_error_frame(__FILE__, __LINE__, __func__);
            goto done;
        }
    }
    NUMLA_CHECK_GOTO(numla_safetensors_hash_build(m), s, done);
    json_object_foreach((json_t *)wm, key, val) {
        int64_t t = numla_safetensors_hash_find(m, key);
        const char *sh = json_string_value(val);
        const char *file = t >= 0 ? m->tensors[t].file : NULL;
        size_t fl = file ? strlen(file) : 0, sl = strlen(sh);
        if (!file || fl < sl + 1 || strcmp(file + fl - sl, sh) || file[fl - sl - 1] != '/') {
            s = numla_error_set(NUMLA_STATUS_FORMAT, __FILE__, __LINE__, __func__,
                                "safetensors: " P_ " says tensor '" T_ "' is in %.200s, but "
                                "%s", index_path, key, sh,
                                file ? "it is in another shard" : "that shard does not hold it");
            goto done;
        }
    }
done:
    free(shards);
    json_decref(root);
    return s;
}

numla_status numla_safetensors_open(const char *dir, numla_safetensors_model **out)
{
    *out = NULL;
    numla_safetensors_model *m = calloc(1, sizeof *m);
    if (!m || !(m->dir = strdup(dir))) {
        free(m);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "safetensors: no memory opening " P_, dir);
    }
    numla_status s = NUMLA_STATUS_OK;
    struct stat st;
    char *single = NULL, *index = NULL;
    if (stat(dir, &st) != 0) {
        s = numla_error_set(NUMLA_STATUS_IO, __FILE__, __LINE__, __func__,
                            "safetensors: cannot open model " P_ ": %s", dir, strerror(errno));
        goto fail;
    }
    if (S_ISREG(st.st_mode)) {
        NUMLA_CHECK_GOTO(numla_safetensors_parse_file(m, dir), s, fail);
        NUMLA_CHECK_GOTO(numla_safetensors_hash_build(m), s, fail);
        *out = m;
        return NUMLA_STATUS_OK;
    }
    single = numla_safetensors_join(dir, "model.safetensors");
    index = numla_safetensors_join(dir, "model.safetensors.index.json");
    if (!single || !index) {
        s = numla_error_set(NUMLA_STATUS_NO_MEMORY, __FILE__, __LINE__, __func__,
                            "safetensors: no memory opening " P_, dir);
        goto fail;
    }
    /* Like transformers: the single file wins when both layouts are present. */
    if (access(single, F_OK) == 0) {
        NUMLA_CHECK_GOTO(numla_safetensors_parse_file(m, single), s, fail);
        NUMLA_CHECK_GOTO(numla_safetensors_hash_build(m), s, fail);
    } else if (access(index, F_OK) == 0) {
        NUMLA_CHECK_GOTO(numla_safetensors_open_sharded(m, index), s, fail);
    } else {
        s = numla_error_set(NUMLA_STATUS_IO, __FILE__, __LINE__, __func__,
                            "safetensors: " P_ " holds neither model.safetensors nor "
                            "model.safetensors.index.json", dir);
        goto fail;
    }
    free(single);
    free(index);
    *out = m;
    return NUMLA_STATUS_OK;
fail:
    free(single);
    free(index);
    numla_safetensors_close(&m);
    return s;
}

numla_status numla_safetensors_view_create(const numla_safetensors_tensor *tensors, int64_t n,
                                           const char *source, numla_safetensors_model **out)
{
    *out = NULL;
    numla_safetensors_model *m = calloc(1, sizeof *m);
    if (!m || !(m->dir = strdup(source ? source : "view")) ||
        !(m->tensors = calloc((size_t)(n > 0 ? n : 1), sizeof *m->tensors))) {
        if (m)
            free(m->dir);
        free(m);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "safetensors: no memory for a view of " P_, source);
    }
    m->cap = n;
    numla_status s = NUMLA_STATUS_OK;
    for (int64_t i = 0; i < n && s == NUMLA_STATUS_OK; i++) {
        m->tensors[i] = tensors[i];
        if (!(m->tensors[i].name = strdup(tensors[i].name)))
            s = numla_error_set(NUMLA_STATUS_NO_MEMORY, __FILE__, __LINE__, __func__,
                                "safetensors: no memory for a view of " P_, m->dir);
        else
            m->n = i + 1;
    }
    if (s == NUMLA_STATUS_OK)
        s = numla_safetensors_hash_build(m);
    if (s != NUMLA_STATUS_OK) {
        numla_safetensors_close(&m);
        numla_error_frame(__FILE__, __LINE__, __func__);
        return s;
    }
    *out = m;
    return NUMLA_STATUS_OK;
}

void numla_safetensors_release(const numla_safetensors_model *m, const void *p, size_t n)
{
    for (int i = 0; m && i < m->nfiles; i++)
        if (numla_map_release(m->files[i].map, m->files[i].size, p, n))
            return;
}

void numla_safetensors_close(numla_safetensors_model **pm)
{
    numla_safetensors_model *m = *pm;
    if (!m)
        return;
    for (int64_t i = 0; i < m->n; i++)
        free((char *)m->tensors[i].name);
    free(m->tensors);
    for (int i = 0; i < m->nfiles; i++) {
        if (m->files[i].map)
            munmap(m->files[i].map, m->files[i].size);
        free(m->files[i].path);
    }
    free(m->files);
    free(m->hash);
    free(m->dir);
    free(m);
    *pm = NULL;
}

const numla_safetensors_tensor *numla_safetensors_find(const numla_safetensors_model *m, const char *name)
{
    int64_t i = numla_safetensors_hash_find(m, name);
    return i < 0 ? NULL : &m->tensors[i];
}

int64_t numla_safetensors_count(const numla_safetensors_model *m) { return m->n; }

const numla_safetensors_tensor *numla_safetensors_at(const numla_safetensors_model *m, int64_t i)
{
    return i >= 0 && i < m->n ? &m->tensors[i] : NULL;
}

static void numla_safetensors_shape_str(char *buf, size_t cap, int32_t ndim, const int64_t *shape)
{
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int32_t i = 0; i < ndim && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < cap)
        snprintf(buf + k, cap - k, "]");
}

numla_status numla_safetensors_expect(const numla_safetensors_model *m, const char *name, int32_t ndim,
                             const int64_t *shape, const numla_safetensors_tensor **out)
{
    if (out)
        *out = NULL;
    const numla_safetensors_tensor *t = numla_safetensors_find(m, name);
    char want[256], have[256];
    numla_safetensors_shape_str(want, sizeof want, ndim, shape);
    if (!t)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "safetensors: model " P_ " has no tensor '" T_
                   "' (expected shape %s)", m->dir, name, want);
    int same = t->ndim == ndim;
    for (int32_t i = 0; same && i < ndim; i++)
        same = t->shape[i] == shape[i];
    if (!same) {
        numla_safetensors_shape_str(have, sizeof have, t->ndim, t->shape);
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "safetensors: " P_ ": tensor '" T_
                   "' has shape %s, expected %s", t->file, name, have, want);
    }
    if (out)
        *out = t;
    return NUMLA_STATUS_OK;
}
