/* common/strbuf.c — the growable byte string (see strbuf.h). */
#include "common/strbuf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first allocation: small texts (a chat turn, a JSON chunk) fit without growing. */
enum { NUMLA_STRBUF_MIN_CAP = 256 };

numla_status numla_strbuf_reserve(numla_strbuf *b, size_t extra)
{
    if (b->oom)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "string buffer: an earlier append ran out of memory");
    if (extra > SIZE_MAX - 1 - b->len) {
        b->oom = 1;
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "string buffer: %zu + %zu bytes overflow size_t",
                   b->len, extra);
    }
    const size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return NUMLA_STATUS_OK;
    size_t cap = b->cap ? b->cap : NUMLA_STRBUF_MIN_CAP;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : 2 * cap; /* doubling: appends cost O(1) amortised */
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = 1;
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "string buffer: no memory for %zu bytes", cap);
    }
    p[b->len] = '\0'; /* a fresh buffer reads as "" before the first append */
    b->p = p;
    b->cap = cap;
    return NUMLA_STATUS_OK;
}

numla_status numla_strbuf_append(numla_strbuf *b, const void *s, size_t n)
{
    NUMLA_CHECK(numla_strbuf_reserve(b, n));
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return NUMLA_STATUS_OK;
}

numla_status numla_strbuf_puts(numla_strbuf *b, const char *s)
{
    NUMLA_CHECK(numla_strbuf_append(b, s, strlen(s)));
    return NUMLA_STATUS_OK;
}

numla_status numla_strbuf_printf(numla_strbuf *b, const char *fmt, ...)
{
    /* try in the room there is; when the text is longer, grow to its length and print again */
    for (int attempt = 0; attempt < 2; attempt++) {
        if (b->oom)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY,
                       "string buffer: an earlier append ran out of memory");
        char dummy;
        char *at = b->p ? b->p + b->len : &dummy;
        size_t room = b->p ? b->cap - b->len : 1;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(at, room, fmt, ap);
        va_end(ap);
        if (n < 0) {
            if (b->p)
                b->p[b->len] = '\0';
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "string buffer: cannot format \"%s\"", fmt);
        }
        if (b->p && (size_t)n < room) {
            b->len += (size_t)n;
            return NUMLA_STATUS_OK;
        }
        if (b->p)
            b->p[b->len] = '\0'; /* drop the cut-off attempt */
        NUMLA_CHECK(numla_strbuf_reserve(b, (size_t)n));
    }
    NUMLA_FAIL(NUMLA_STATUS_INTERNAL, "string buffer: \"%s\" did not fit after growing", fmt);
}

const char *numla_strbuf_str(const numla_strbuf *b) { return b->p ? b->p : ""; }

void numla_strbuf_truncate(numla_strbuf *b, size_t len)
{
    if (len >= b->len)
        return;
    b->len = len;
    b->p[len] = '\0';
}

void numla_strbuf_clear(numla_strbuf *b)
{
    b->len = 0;
    b->oom = 0;
    if (b->p)
        b->p[0] = '\0';
}

char *numla_strbuf_take(numla_strbuf *b)
{
    char *p = b->p;
    *b = (numla_strbuf){0};
    return p;
}

void numla_strbuf_free(numla_strbuf *b)
{
    free(b->p);
    *b = (numla_strbuf){0};
}
