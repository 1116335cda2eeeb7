/* common/strbuf.h — a growable byte string, always NUL-terminated once it holds anything.
 *
 * The buffers that collect text piece by piece (an HTTP body or stream, a rendered chat
 * template, a generated regex, a metrics page, a request's decoded text) all use this one.
 * A zero-initialised numla_strbuf is empty and ready; numla_strbuf_free releases it.
 *
 * A failed append (out of memory, or a size that overflows) leaves the buffer as it was and
 * sets `oom`; later appends then do nothing, so a writer that makes many small appends may
 * check once at the end. numla_strbuf_clear empties the buffer and forgets `oom`.
 * Not thread-safe: one buffer, one writer.
 */
#ifndef NUMLA_COMMON_STRBUF_H
#define NUMLA_COMMON_STRBUF_H

#include <stddef.h>

#include "common/status.h"

typedef struct numla_strbuf {
    char *p;    /* (cap) bytes, p[len] == '\0'; NULL until the first append or reserve */
    size_t len; /* bytes held, the terminating NUL not counted */
    size_t cap; /* bytes allocated */
    int oom;    /* an append failed: the buffer ignores appends until cleared */
} numla_strbuf;

/* Append n bytes at s (any bytes, NUL included). NO_MEMORY when it cannot grow (or already
 * failed before). */
numla_status numla_strbuf_append(numla_strbuf *b, const void *s, size_t n);
/* Append the C string s. */
numla_status numla_strbuf_puts(numla_strbuf *b, const char *s);
/* Append printf(fmt, ...); INVALID_ARG when the format cannot be rendered. */
numla_status numla_strbuf_printf(numla_strbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Room for `extra` more bytes (and the NUL) without another allocation. */
numla_status numla_strbuf_reserve(numla_strbuf *b, size_t extra);
/* The bytes held as a C string: "" while nothing was appended. */
const char *numla_strbuf_str(const numla_strbuf *b);
/* Keep the first len bytes (no-op when len >= b->len); the memory stays. */
void numla_strbuf_truncate(numla_strbuf *b, size_t len);
/* Empty the buffer (its memory is kept for the next appends) and forget a failure. */
void numla_strbuf_clear(numla_strbuf *b);
/* Hand the bytes to the caller (free() them; NULL when nothing was appended) and leave b empty. */
char *numla_strbuf_take(numla_strbuf *b);
/* Release the memory; b is empty and usable again. */
void numla_strbuf_free(numla_strbuf *b);

#endif
