/* engine/http/emitter.c — stop strings and UTF-8 boundaries over streamed text (see emitter.h). */
#include "engine/http/emitter.h"

#include <stdlib.h>
#include <string.h>

#include "engine/text/tokenizer.h"

numla_status numla_http_emitter_create(const char *const *stops, int32_t num_stops,
                                       numla_http_emitter **out)
{
    *out = NULL;
    if (num_stops < 0)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "emitter: negative number of stop strings");
    numla_http_emitter *e = calloc(1, sizeof *e);
    if (!e)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for a text emitter");
    e->stop_index = -1;
    e->stops = calloc((size_t)num_stops + 1, sizeof *e->stops);
    e->stop_len = calloc((size_t)num_stops + 1, sizeof *e->stop_len);
    if (!e->stops || !e->stop_len) {
        numla_http_emitter_destroy(&e);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for a text emitter");
    }
    for (int32_t i = 0; i < num_stops; i++) {
        if (!stops[i] || !stops[i][0]) {
            numla_http_emitter_destroy(&e);
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "emitter: stop string %d is empty", i);
        }
        e->stops[i] = strdup(stops[i]);
        if (!e->stops[i]) {
            numla_http_emitter_destroy(&e);
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for a stop string");
        }
        e->stop_len[i] = strlen(stops[i]);
        e->num_stops = i + 1;
    }
    *out = e;
    return NUMLA_STATUS_OK;
}

void numla_http_emitter_destroy(numla_http_emitter **e)
{
    if (!*e)
        return;
    for (int32_t i = 0; i < (*e)->num_stops; i++)
        free((*e)->stops[i]);
    free((*e)->stops);
    free((*e)->stop_len);
    numla_strbuf_free(&(*e)->held);
    numla_strbuf_free(&(*e)->out);
    free(*e);
    *e = NULL;
}

/* The length of a character that starts with byte b (0: b cannot start one). */
static size_t utf8_lead_len(unsigned char b)
{
    if (b < 0x80)
        return 1;
    if (b >= 0xC2 && b <= 0xDF)
        return 2;
    if (b >= 0xE0 && b <= 0xEF)
        return 3;
    if (b >= 0xF0 && b <= 0xF4)
        return 4;
    return 0;
}

/* How many of the n bytes end in a character that more bytes could still complete. */
static size_t incomplete_tail(const char *s, size_t n)
{
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char b = (unsigned char)s[n - back];
        if ((b & 0xC0) == 0x80)
            continue; /* a continuation byte: look further back for its lead */
        size_t need = utf8_lead_len(b);
        return need > back ? back : 0;
    }
    return 0;
}

/* Emit s[0..n) into e->out as valid UTF-8, each invalid byte as U+FFFD. */
static numla_status emit(numla_http_emitter *e, const char *s, size_t n, const char **text,
                         size_t *text_len)
{
    numla_strbuf_clear(&e->out);
    if (numla_strbuf_reserve(&e->out, 3 * n) != NUMLA_STATUS_OK) /* the most it can become */
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for emitted text");
    while (n > 0) {
        int64_t bad = numla_utf8_invalid_offset(s, n);
        size_t good = bad < 0 ? n : (size_t)bad;
        numla_strbuf_append(&e->out, s, good); /* reserved: cannot fail */
        if (bad < 0)
            break;
        numla_strbuf_append(&e->out, "\xEF\xBF\xBD", 3);
        /* One U+FFFD for a stray byte, or for a lead byte and the continuations it claims. */
        size_t skip = 1;
        size_t want = utf8_lead_len((unsigned char)s[good]);
        while (skip < want && good + skip < n && ((unsigned char)s[good + skip] & 0xC0) == 0x80)
            skip++;
        s += good + skip;
        n -= good + skip;
    }
    *text = numla_strbuf_str(&e->out);
    *text_len = e->out.len;
    return NUMLA_STATUS_OK;
}

/* The longest suffix of s[0..n) that is a proper prefix of some stop string. */
static size_t stop_prefix_tail(const numla_http_emitter *e, const char *s, size_t n)
{
    size_t best = 0;
    for (int32_t i = 0; i < e->num_stops; i++) {
        size_t m = e->stop_len[i] - 1 < n ? e->stop_len[i] - 1 : n;
        for (size_t k = m; k > best; k--)
            if (!memcmp(s + n - k, e->stops[i], k)) {
                best = k;
                break;
            }
    }
    return best;
}

numla_status numla_http_emitter_push(numla_http_emitter *e, const char *piece, size_t len,
                                     const char **text, size_t *text_len, int *stopped)
{
    *text = "";
    *text_len = 0;
    if (e->stopped) {
        if (stopped)
            *stopped = 1;
        return NUMLA_STATUS_OK;
    }
    if (numla_strbuf_append(&e->held, piece, len) != NUMLA_STATUS_OK)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for held-back text");
    const char *held = e->held.p;
    const size_t held_len = e->held.len;

    /* The stop that completes first ends generation, as it would have token by token: the
     * match with the earliest end, the longest of those on a tie. Held bytes hold no complete
     * match, so every match ends in the new piece and the answer does not depend on how the
     * text was cut into pieces. */
    size_t first = SIZE_MAX, first_end = SIZE_MAX;
    for (int32_t i = 0; i < e->num_stops; i++) {
        size_t m = e->stop_len[i];
        for (size_t at = 0; at + m <= held_len && at + m <= first_end; at++)
            if (!memcmp(held + at, e->stops[i], m)) {
                if (at + m < first_end || at < first) {
                    first = at;
                    first_end = at + m;
                    e->stop_index = i;
                }
                break;
            }
    }
    size_t n;
    if (first != SIZE_MAX) {
        e->stopped = 1;
        n = first;
    } else {
        n = held_len - stop_prefix_tail(e, held, held_len);
        n -= incomplete_tail(held, n);
    }
    if (stopped)
        *stopped = e->stopped;
    NUMLA_CHECK(emit(e, held, n, text, text_len));
    memmove(e->held.p, held + n, held_len - n); /* keep the bytes not emitted, at the front */
    numla_strbuf_truncate(&e->held, e->stopped ? 0 : held_len - n);
    return NUMLA_STATUS_OK;
}

numla_status numla_http_emitter_finish(numla_http_emitter *e, const char **text,
                                       size_t *text_len)
{
    NUMLA_CHECK(emit(e, e->held.p, e->stopped ? 0 : e->held.len, text, text_len));
    numla_strbuf_clear(&e->held);
    return NUMLA_STATUS_OK;
}
