/* engine/http/emitter.h — streamed text that never shows part of a stop string and never
 * splits a UTF-8 character.
 *
 * Decoded pieces (any bytes, a character may be split over pieces) go in; out comes the text
 * that is final: bytes that can no longer become the start of a stop string and that end on a
 * character boundary. When a stop string appears, the text before it is emitted and the
 * emitter is stopped (the stop string and anything after it are dropped). The stop that
 * completes first wins (the longest on a tie), as when generation is checked token by token,
 * so the output does not depend on where the pieces were cut. At the end, finish
 * releases what was held back. Output is always valid UTF-8: a byte that cannot start or
 * continue a character becomes U+FFFD, as does a character left incomplete at the end.
 * Not thread-safe (one per choice of one request); not collective.
 */
#ifndef NUMLA_ENGINE_HTTP_EMITTER_H
#define NUMLA_ENGINE_HTTP_EMITTER_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "common/strbuf.h"

typedef struct numla_http_emitter {
    int32_t num_stops;
    char **stops;               /* (num_stops) copies, non-empty */
    size_t *stop_len;           /* (num_stops) */
    numla_strbuf held;          /* bytes not yet emitted */
    numla_strbuf out;           /* the last call's output */
    int stopped;                /* a stop string matched: further pieces are ignored */
    int32_t stop_index;         /* which stop string, -1 before */
} numla_http_emitter;

/* Empty stop strings are not allowed. */
numla_status numla_http_emitter_create(const char *const *stops, int32_t num_stops,
                                       numla_http_emitter **out);
void numla_http_emitter_destroy(numla_http_emitter **e);

/* Append a piece; *text / *text_len receive what is final now (valid until the next call, may
 * be empty). *stopped (may be NULL) becomes 1 when a stop string matched (then or earlier). */
numla_status numla_http_emitter_push(numla_http_emitter *e, const char *piece, size_t len,
                                     const char **text, size_t *text_len, int *stopped);

/* The end of generation: everything held back (nothing after a stop). */
numla_status numla_http_emitter_finish(numla_http_emitter *e, const char **text,
                                       size_t *text_len);

#endif
