/* tests/fuzz/fuzz_tool_calls.c — fuzz target for the tool-call parser (engine/text/tool_calls.c).
 * The first byte picks the family (numla_tool_syntax_families), the second the size of the
 * pieces the rest is cut into. Any input must give, whole and in pieces, the same content and
 * the same calls; every call has an id, a name and arguments that are a JSON object's text;
 * content is valid UTF-8 when the input is; input without the family's opening marker comes
 * back as content unchanged. Anything else aborts. Linked into numla_unit (suite tool_calls
 * feeds it mutated model outputs); with -DNUMLA_FUZZ=ON also a libFuzzer binary. */
#define _GNU_SOURCE
#include "engine/text/tokenizer.h"
#include "engine/text/tool_calls.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 1: parsed (the invariants hold), -1: out of memory. A broken invariant aborts. */
int numla_fuzz_tool_calls_run(const uint8_t *data, size_t size);

static const char fuzz_tool_calls_tools[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": "
    "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": "
    "{\"type\": \"integer\"}}}}}]";

static void fuzz_tool_calls_die(const char *what, const char *text)
{
    fprintf(stderr, "fuzz_tool_calls: %s (%s)\n", what, text);
    abort();
}

/* Append the content events of one push or finish to *c (len, cap). 0 on no memory. */
static int fuzz_tool_calls_collect(const numla_tool_calls *p, const numla_tool_event *ev,
                                   int32_t ne, const char *t, char **c, size_t *len,
                                   size_t *cap)
{
    for (int32_t e = 0; e < ne; e++) {
        if (ev[e].call >= numla_tool_calls_count(p))
            fuzz_tool_calls_die("an event names a call that is not there", t);
        if (ev[e].call >= 0)
            continue;
        if (*len + ev[e].len >= *cap) {
            size_t nc = 2 * (*len + ev[e].len) + 1;
            char *b = realloc(*c, nc);
            if (!b)
                return 0;
            *c = b;
            *cap = nc;
        }
        memcpy(*c + *len, t + ev[e].off, ev[e].len);
        *len += ev[e].len;
    }
    return 1;
}

/* Parse text cut every `step` bytes (0: whole); *content gets the content, *calls the calls
 * as "id\x1fname\x1farguments\x1e" records. 0 on no memory. */
static int fuzz_tool_calls_parse(const numla_tool_syntax *y, const char *text, size_t n,
                                 size_t step, char **content, size_t *content_len, char **calls)
{
    numla_tool_calls *p = NULL;
    if (numla_tool_calls_create(y, fuzz_tool_calls_tools, 7, &p) != NUMLA_STATUS_OK)
        return 0;
    size_t cap = n + 1, len = 0, at = 0;
    char *c = malloc(cap);
    int ok = c != NULL;
    const numla_tool_event *ev;
    int32_t ne;
    const char *t;
    do {
        size_t k = step && n - at > step ? step : n - at;
        ok = ok && numla_tool_calls_push(p, text + at, k, &ev, &ne, &t) == NUMLA_STATUS_OK &&
             fuzz_tool_calls_collect(p, ev, ne, t, &c, &len, &cap);
        at += k;
    } while (ok && at < n);
    ok = ok && numla_tool_calls_finish(p, &ev, &ne, &t) == NUMLA_STATUS_OK &&
         fuzz_tool_calls_collect(p, ev, ne, t, &c, &len, &cap);
    size_t rec = 1;
    for (int32_t i = 0; ok && i < numla_tool_calls_count(p); i++) {
        const numla_tool_call_out *o = numla_tool_calls_get(p, i);
        rec += strlen(o->id) + strlen(o->name) + strlen(o->arguments) + 3;
    }
    char *r = ok ? malloc(rec) : NULL;
    if (r) {
        r[0] = 0;
        for (int32_t i = 0; i < numla_tool_calls_count(p); i++) {
            const numla_tool_call_out *o = numla_tool_calls_get(p, i);
            if (!o->id[0] || !o->name[0])
                fuzz_tool_calls_die("a call without an id or a name", text);
            json_t *a = json_loads(o->arguments, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
            if (!json_is_object(a))
                fuzz_tool_calls_die("arguments that are not a JSON object", o->arguments);
            json_decref(a);
            strcat(r, o->id);
            strcat(r, "\x1f");
            strcat(r, o->name);
            strcat(r, "\x1f");
            strcat(r, o->arguments);
            strcat(r, "\x1e");
        }
    }
    numla_tool_calls_destroy(&p);
    if (!ok || !r) {
        free(c);
        free(r);
        return 0;
    }
    *content = c;
    *content_len = len;
    *calls = r;
    return 1;
}

int numla_fuzz_tool_calls_run(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 1;
    const char *const *fam = numla_tool_syntax_families();
    size_t nf = 0;
    while (fam[nf])
        nf++;
    const numla_tool_syntax *y = numla_tool_syntax_for_template(fam[data[0] % nf]);
    if (!y)
        fuzz_tool_calls_die("a family of the table has no syntax", fam[data[0] % nf]);
    const size_t step = 1 + data[1] % 16;
    const char *text = (const char *)data + 2;
    const size_t n = size - 2;
    char *c1 = NULL, *c2 = NULL, *k1 = NULL, *k2 = NULL;
    size_t l1 = 0, l2 = 0;
    if (!fuzz_tool_calls_parse(y, text, n, 0, &c1, &l1, &k1))
        return -1;
    if (!fuzz_tool_calls_parse(y, text, n, step, &c2, &l2, &k2)) {
        free(c1);
        free(k1);
        return -1;
    }
    if (l1 != l2 || memcmp(c1, c2, l1))
        fuzz_tool_calls_die("content differs whole and in pieces", text);
    if (strcmp(k1, k2))
        fuzz_tool_calls_die("calls differ whole and in pieces", k1);
    if (numla_utf8_invalid_offset(text, n) < 0 && numla_utf8_invalid_offset(c1, l1) >= 0)
        fuzz_tool_calls_die("content that is not UTF-8 from UTF-8 input", text);
    /* no opening marker: content as given */
    const char *open[] = {"<｜tool▁calls▁begin｜>", "<|tool_calls_section_begin|>",
                          "<｜DSML｜function_calls>", "<｜DSML｜tool_calls>", "<tool_call>"};
    int has_open = 0;
    for (size_t i = 0; i < sizeof open / sizeof *open; i++)
        has_open |= memmem(text, n, open[i], strlen(open[i])) != NULL;
    if (!has_open && (l1 != n || memcmp(c1, text, n) || k1[0]))
        fuzz_tool_calls_die("text without a tool call changed", text);
    free(c1);
    free(c2);
    free(k1);
    free(k2);
    return 1;
}

#ifdef NUMLA_FUZZ_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    numla_fuzz_tool_calls_run(data, size);
    return 0;
}
#endif
