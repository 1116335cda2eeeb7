/* engine/http/reasoning.c — reasoning_content split off streamed text (see reasoning.h). */
#define _GNU_SOURCE
#include "engine/http/reasoning.h"

#include <stdlib.h>
#include <string.h>

static const char open_tag[] = "<think>", close_tag[] = "</think>";

enum { ST_START, ST_REASONING, ST_CONTENT };

struct numla_http_reasoning {
    int state;
    char *held;  /* text not yet placed */
    size_t held_len, held_cap;
    char *r_out, *c_out; /* the last call's pieces */
    size_t r_cap, c_cap;
};

numla_status numla_http_reasoning_create(numla_http_reasoning_mode mode,
                                         numla_http_reasoning **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for a reasoning splitter");
    (*out)->state = mode == NUMLA_HTTP_REASONING_OPEN ? ST_REASONING : ST_START;
    return NUMLA_STATUS_OK;
}

void numla_http_reasoning_destroy(numla_http_reasoning **r)
{
    if (!r || !*r)
        return;
    free((*r)->held);
    free((*r)->r_out);
    free((*r)->c_out);
    free(*r);
    *r = NULL;
}

static int grow(char **b, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 1;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    char *n = realloc(*b, c);
    if (!n)
        return 0;
    *b = n;
    *cap = c;
    return 1;
}

/* The longest suffix of s[0..n) that is a proper prefix of tag. */
static size_t tag_prefix_tail(const char *s, size_t n, const char *tag, size_t tl)
{
    for (size_t k = tl - 1 < n ? tl - 1 : n; k > 0; k--)
        if (!memcmp(s + n - k, tag, k))
            return k;
    return 0;
}

/* Place held text; final: nothing more comes. */
static numla_status place(numla_http_reasoning *r, int final, const char **reasoning,
                          size_t *reasoning_len, const char **content, size_t *content_len)
{
    size_t rn = 0, cn = 0;
    if (!grow(&r->r_out, &r->r_cap, r->held_len + 1) || !grow(&r->c_out, &r->c_cap, r->held_len + 1))
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for reasoning text");
    size_t pos = 0;
    for (;;) {
        const char *h = r->held + pos;
        size_t n = r->held_len - pos;
        if (r->state == ST_START) {
            size_t ol = sizeof open_tag - 1;
            if (n >= ol && !memcmp(h, open_tag, ol)) {
                pos += ol;
                r->state = ST_REASONING;
                continue;
            }
            if (!final && n < ol && !memcmp(h, open_tag, n))
                break; /* may still become "<think>" */
            r->state = ST_CONTENT;
            continue;
        }
        if (r->state == ST_REASONING) {
            size_t cl = sizeof close_tag - 1;
            const char *at = n >= cl ? memmem(h, n, close_tag, cl) : NULL;
            if (at) {
                memcpy(r->r_out + rn, h, (size_t)(at - h));
                rn += (size_t)(at - h);
                pos += (size_t)(at - h) + cl;
                r->state = ST_CONTENT;
                continue;
            }
            size_t keep = final ? 0 : tag_prefix_tail(h, n, close_tag, cl);
            memcpy(r->r_out + rn, h, n - keep);
            rn += n - keep;
            pos += n - keep;
            break;
        }
        memcpy(r->c_out + cn, h, n);
        cn += n;
        pos += n;
        break;
    }
    memmove(r->held, r->held + pos, r->held_len - pos);
    r->held_len -= pos;
    r->r_out[rn] = 0;
    r->c_out[cn] = 0;
    *reasoning = r->r_out;
    *reasoning_len = rn;
    *content = r->c_out;
    *content_len = cn;
    return NUMLA_STATUS_OK;
}

numla_status numla_http_reasoning_push(numla_http_reasoning *r, const char *text, size_t len,
                                       const char **reasoning, size_t *reasoning_len,
                                       const char **content, size_t *content_len)
{
    if (!grow(&r->held, &r->held_cap, r->held_len + len + 1))
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for reasoning text");
    if (len)
        memcpy(r->held + r->held_len, text, len);
    r->held_len += len;
    return place(r, 0, reasoning, reasoning_len, content, content_len);
}

numla_status numla_http_reasoning_finish(numla_http_reasoning *r, const char **reasoning,
                                         size_t *reasoning_len, const char **content,
                                         size_t *content_len)
{
    return place(r, 1, reasoning, reasoning_len, content, content_len);
}

numla_http_reasoning_mode numla_http_reasoning_mode_of_prompt(const char *prompt, size_t len)
{
    const char *last_open = NULL, *last_close = NULL;
    for (const char *p = prompt; p && (p = memmem(p, len - (size_t)(p - prompt), open_tag,
                                                  sizeof open_tag - 1));
         p++)
        last_open = p;
    for (const char *p = prompt; p && (p = memmem(p, len - (size_t)(p - prompt), close_tag,
                                                  sizeof close_tag - 1));
         p++)
        last_close = p;
    return last_open && (!last_close || last_open > last_close) ? NUMLA_HTTP_REASONING_OPEN
                                                                : NUMLA_HTTP_REASONING_DETECT;
}
