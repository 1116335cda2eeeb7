/* engine/formats/safetensors_writer.c — the safetensors writer (safetensors.h): tensors added
 * from memory or from a fill callback, the header sorted by name, the data written in chunks
 * (the fill of the next chunk overlapping the write of this one). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/formats/safetensors.h"
#include "engine/formats/safetensors_internal.h"
#include "engine/formats/safetensors_testing.h"

static const char *numla_safetensors_dtype_str(numla_dtype t)
{
    switch (t) {
    case NUMLA_DTYPE_F32: return "F32";
    case NUMLA_DTYPE_F16: return "F16";
    case NUMLA_DTYPE_F8_E4M3: return "F8_E4M3";
    case NUMLA_DTYPE_I8: return "I8";
    case NUMLA_DTYPE_I32: return "I32";
    case NUMLA_DTYPE_I64: return "I64";
    case NUMLA_DTYPE_F8_E8M0: return "F8_E8M0";
    default: return "BF16";
    }
}

/* ---------------------------------------------------------------------------------------- */
/* writer                                                                                    */

typedef struct numla_safetensors_wentry {
    char *name;
    numla_dtype dtype;
    int32_t ndim;
    int64_t shape[NUMLA_SAFETENSORS_MAX_DIMS];
    size_t nbytes;
    void *data;             /* owned copy, or NULL when fill is set */
    numla_safetensors_fill_fn fill;
    void *ctx;
} numla_safetensors_wentry;

struct numla_safetensors_writer {
    numla_safetensors_wentry *e;
    size_t n, cap;
};

numla_status numla_safetensors_writer_create(numla_safetensors_writer **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "safetensors: no memory for a writer");
    return NUMLA_STATUS_OK;
}

void numla_safetensors_writer_destroy(numla_safetensors_writer **pw)
{
    numla_safetensors_writer *w = *pw;
    if (!w)
        return;
    for (size_t i = 0; i < w->n; i++) {
        free(w->e[i].name);
        free(w->e[i].data);
    }
    free(w->e);
    free(w);
    *pw = NULL;
}

static numla_status numla_safetensors_writer_push(numla_safetensors_writer *w, const char *name, numla_dtype dtype,
                                         int32_t ndim, const int64_t *shape,
                                         numla_safetensors_wentry **out)
{
    if (!name || !name[0] || !strcmp(name, "__metadata__"))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "safetensors writer: invalid tensor name '%s'",
                   name ? name : "(null)");
    if (!numla_dtype_valid(dtype))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "safetensors writer: tensor '" T_ "': bad dtype %d",
                   name, (int)dtype);
    if (ndim < 0 || ndim > NUMLA_SAFETENSORS_MAX_DIMS)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "safetensors writer: tensor '" T_ "': ndim %d",
                   name, (int)ndim);
    uint64_t nb = numla_dtype_size(dtype);
    for (int32_t i = 0; i < ndim; i++) {
        if (shape[i] < 0 || __builtin_mul_overflow(nb, (uint64_t)shape[i], &nb))
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "safetensors writer: tensor '" T_
                       "': bad shape[%d] = %lld", name, (int)i, (long long)shape[i]);
    }
    /* Duplicate names are caught once, in writer_write (a scan per add is quadratic). */
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 64;
        numla_safetensors_wentry *e = realloc(w->e, cap * sizeof *e);
        if (!e)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "safetensors writer: no memory");
        w->e = e;
        w->cap = cap;
    }
    numla_safetensors_wentry *e = &w->e[w->n];
    memset(e, 0, sizeof *e);
    e->name = strdup(name);
    if (!e->name)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "safetensors writer: no memory");
    e->dtype = dtype;
    e->ndim = ndim;
    if (ndim)
        memcpy(e->shape, shape, (size_t)ndim * sizeof *shape);
    e->nbytes = (size_t)nb;
    w->n++;
    *out = e;
    return NUMLA_STATUS_OK;
}

numla_status numla_safetensors_writer_add(numla_safetensors_writer *w, const char *name, numla_dtype dtype,
                                 int32_t ndim, const int64_t *shape, const void *data)
{
    numla_safetensors_wentry *e = NULL;
    NUMLA_CHECK(numla_safetensors_writer_push(w, name, dtype, ndim, shape, &e));
    if (e->nbytes) {
        e->data = malloc(e->nbytes);
        if (!e->data) {
            free(e->name);
            w->n--;
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "safetensors writer: no memory for tensor '" T_
                       "' (%zu bytes)", name, e->nbytes);
        }
        memcpy(e->data, data, e->nbytes);
    }
    return NUMLA_STATUS_OK;
}

numla_status numla_safetensors_writer_add_fill(numla_safetensors_writer *w, const char *name, numla_dtype dtype,
                                      int32_t ndim, const int64_t *shape, numla_safetensors_fill_fn fill,
                                      void *ctx)
{
    numla_safetensors_wentry *e = NULL;
    NUMLA_CHECK(numla_safetensors_writer_push(w, name, dtype, ndim, shape, &e));
    e->fill = fill;
    e->ctx = ctx;
    return NUMLA_STATUS_OK;
}

static int numla_safetensors_name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Header JSON (compact, insertion order), padded with spaces to a multiple of 8 bytes. */
static numla_status numla_safetensors_writer_header(const numla_safetensors_writer *w, char **out, size_t *len)
{
    json_t *root = json_object();
    json_t *meta = json_object();
    int bad = !root || !meta || json_object_set_new(meta, "format", json_string("pt")) ||
              json_object_set_new(root, "__metadata__", meta);
    uint64_t off = 0;
    for (size_t i = 0; i < w->n && !bad; i++) {
        const numla_safetensors_wentry *e = &w->e[i];
        json_t *t = json_object(), *shape = json_array(), *offs = json_array();
        bad = !t || !shape || !offs;
        for (int32_t d = 0; d < e->ndim && !bad; d++)
            bad = json_array_append_new(shape, json_integer(e->shape[d]));
        bad = bad || json_array_append_new(offs, json_integer((json_int_t)off)) ||
              json_array_append_new(offs, json_integer((json_int_t)(off + e->nbytes))) ||
              json_object_set_new(t, "dtype", json_string(numla_safetensors_dtype_str(e->dtype))) ||
              json_object_set_new(t, "shape", shape) ||
              json_object_set_new(t, "data_offsets", offs) ||
              json_object_set_new(root, e->name, t);
        off += e->nbytes;
    }
    char *js = bad ? NULL : json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!js)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "safetensors writer: cannot build the header");
    size_t n = strlen(js), padded = (n + 7) & ~(size_t)7;
    char *buf = realloc(js, padded + 1);
    if (!buf) {
        free(js);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "safetensors writer: cannot build the header");
    }
    memset(buf + n, ' ', padded - n);
    buf[padded] = '\0';
    *out = buf;
    *len = padded;
    return NUMLA_STATUS_OK;
}

/* write(2) until done; 0 or an errno. */
static int numla_safetensors_write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t k = write(fd, c, n > ((size_t)1 << 30) ? (size_t)1 << 30 : n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return k < 0 ? errno : EIO;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

typedef struct numla_safetensors_wjob {
    int fd;
    const void *p;
    size_t n;
    int err;
} numla_safetensors_wjob;

static void *numla_safetensors_wjob_run(void *arg)
{
    numla_safetensors_wjob *j = arg;
    j->err = numla_safetensors_write_all(j->fd, j->p, j->n);
    return NULL;
}

/* The writer's chunk size set by the tests (0: the default). */
static size_t numla_safetensors_chunk_bytes_;

void numla_safetensors_testing_set_chunk_bytes(size_t bytes) { numla_safetensors_chunk_bytes_ = bytes; }

numla_status numla_safetensors_writer_write(const numla_safetensors_writer *w, const char *path)
{
    /* Duplicate names would silently collapse in the JSON object: reject them here, once. */
    char **names = malloc((w->n ? w->n : 1) * sizeof *names);
    if (!names)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "safetensors writer: no memory");
    for (size_t i = 0; i < w->n; i++)
        names[i] = w->e[i].name;
    qsort(names, w->n, sizeof *names, numla_safetensors_name_cmp);
    for (size_t i = 1; i < w->n; i++)
        if (!strcmp(names[i - 1], names[i])) {
            numla_status s = numla_error_set(NUMLA_STATUS_INVALID_ARG, __FILE__, __LINE__,
                                             __func__, "safetensors writer: tensor '" T_
                                             "' added twice (writing " P_ ")", names[i], path);
            free(names);
            return s;
        }
    free(names);

    char *hdr = NULL;
    size_t hlen = 0;
    NUMLA_CHECK(numla_safetensors_writer_header(w, &hdr, &hlen));
    numla_status s = NUMLA_STATUS_OK;
    /* A new inode, not a truncated one: a process that still maps the old file keeps valid
     * pages (truncation would SIGBUS it), and ext4 does not force a writeback on close. */
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        s = numla_error_set(NUMLA_STATUS_IO, __FILE__, __LINE__, __func__,
                            "safetensors writer: cannot create " P_ ": %s", path, strerror(errno));
        free(hdr);
        return s;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    int err = numla_safetensors_write_all(fd, len8, 8);
    if (!err)
        err = numla_safetensors_write_all(fd, hdr, hlen);
    free(hdr);

    /* Produced tensors go through two chunk buffers: a thread writes chunk k while fill()
     * makes chunk k+1, so generation overlaps the kernel's copy into the page cache, and the
     * chunk is still in cache when it is copied. Memory stays at two chunks whatever the
     * tensor sizes. */
    size_t chunk = (size_t)4 << 20; /* a multiple of every element size */
    if (numla_safetensors_chunk_bytes_ >= 4) /* tests: chunks that split rows */
        chunk = numla_safetensors_chunk_bytes_ & ~(size_t)3;
    void *buf[2] = {NULL, NULL};
    int cur = 0, pending = 0;
    pthread_t th;
    numla_safetensors_wjob job = {.fd = fd};
    for (size_t i = 0; i < w->n && !err && s == NUMLA_STATUS_OK; i++) {
        const numla_safetensors_wentry *e = &w->e[i];
        for (size_t off = 0; off < e->nbytes; off += chunk) {
            size_t n = e->nbytes - off < chunk ? e->nbytes - off : chunk;
            const void *src = e->fill ? NULL : (const char *)e->data + off;
            if (e->fill) {
                /* buf[cur] is not the one the pending write reads. */
                if (!buf[cur] && !(buf[cur] = malloc(chunk))) {
                    s = numla_error_set(NUMLA_STATUS_NO_MEMORY, __FILE__, __LINE__, __func__,
                                        "safetensors writer: no memory writing " P_, path);
                    break;
                }
                s = e->fill(e->ctx, buf[cur], off, n);
                if (s != NUMLA_STATUS_OK) {
                    numla_error_frame(__FILE__, __LINE__, __func__);
                    break;
                }
                src = buf[cur];
                cur ^= 1;
            }
            if (pending) {
                pthread_join(th, NULL);
                pending = 0;
                if ((err = job.err))
                    break;
            }
            job.p = src;
            job.n = n;
            job.err = 0;
            if (e->fill && pthread_create(&th, NULL, numla_safetensors_wjob_run, &job) == 0)
                pending = 1;
            else if ((err = numla_safetensors_write_all(fd, src, n)))
                break;
        }
    }
    if (pending) {
        pthread_join(th, NULL);
        if (!err)
            err = job.err;
    }
    free(buf[0]);
    free(buf[1]);
    if (err && s == NUMLA_STATUS_OK)
        s = numla_error_set(NUMLA_STATUS_IO, __FILE__, __LINE__, __func__,
                            "safetensors writer: writing " P_ " failed: %s", path, strerror(err));
    if (close(fd) != 0 && s == NUMLA_STATUS_OK)
        s = numla_error_set(NUMLA_STATUS_IO, __FILE__, __LINE__, __func__,
                            "safetensors writer: closing " P_ " failed: %s", path, strerror(errno));
    if (s != NUMLA_STATUS_OK)
        unlink(path);
    return s;
}
