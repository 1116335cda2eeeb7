/* tests/fuzz/fuzz_json_schema.c — fuzz target for the JSON-Schema grammar
 * (engine/serving/grammar.c). The input's first line is a schema (compiled if jansson reads it
 * and the compiler takes it: refusals are fine), the rest bytes to walk: each byte is fed to
 * the matcher of that schema and of json_object mode; a refused byte is skipped (the state must
 * stay as it was), an accepted one is kept. Whenever the kept bytes are complete they must parse
 * with jansson (as any JSON, or as an object in json_object mode), once closed no byte may be
 * accepted, and the token mask over the single bytes must agree with feeding each byte. Anything
 * else aborts. Linked into numla_unit (suite grammar feeds it its corpus and mutations); with
 * -DNUMLA_FUZZ=ON also a libFuzzer binary. */
#include "engine/serving/grammar.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 1: walked (the invariants hold), -1: out of memory. A broken invariant aborts. */
int numla_fuzz_json_schema_run(const uint8_t *data, size_t size);

enum { FUZZ_JSON_SCHEMA_MAX_DOC = 2048 };

static void fuzz_json_schema_die(const char *what, const uint8_t *doc, size_t n)
{
    fprintf(stderr, "fuzz_json_schema: %s (%.*s)\n", what, (int)n, (const char *)doc);
    abort();
}

static int fuzz_json_schema_walk(const numla_grammar *g, const numla_grammar_vocab *v,
                                 int object_only, const uint8_t *b, size_t n)
{
    numla_grammar_matcher *m = NULL;
    if (numla_grammar_matcher_create(g, &m) != NUMLA_STATUS_OK)
        return -1;
    uint8_t *doc = malloc(FUZZ_JSON_SCHEMA_MAX_DOC);
    uint64_t mask[4];
    size_t len = 0;
    int masks = 0;
    for (size_t i = 0; doc && i < n && len < FUZZ_JSON_SCHEMA_MAX_DOC; i++) {
        /* the mask over the 256 bytes is what feeding says (at a few early states: each
         * check replays the document 256 times) */
        if (masks < 3 && (i & 7) == 0 && len <= 128) {
            masks++;
            if (numla_grammar_matcher_fill_mask(m, v, mask) != NUMLA_STATUS_OK)
                break;
            for (int c = 0; c < 256; c++) {
                numla_grammar_matcher *m2 = NULL;
                if (numla_grammar_matcher_create(g, &m2) != NUMLA_STATUS_OK)
                    break;
                const uint8_t byte = (uint8_t)c;
                int ok = (!len || numla_grammar_matcher_accept_bytes(m2, doc, len)) &&
                         numla_grammar_matcher_accept_bytes(m2, &byte, 1);
                numla_grammar_matcher_destroy(&m2);
                if (ok != (int)(mask[c / 64] >> (c % 64) & 1))
                    fuzz_json_schema_die("the mask and the bytes disagree", doc, len);
            }
        }
        const int closed = numla_grammar_matcher_is_closed(m);
        if (!numla_grammar_matcher_accept_bytes(m, b + i, 1))
            continue;
        if (closed)
            fuzz_json_schema_die("a byte accepted after the document closed", doc, len);
        doc[len++] = b[i];
        if (numla_grammar_matcher_is_complete(m)) {
            json_error_t e;
            json_t *j = json_loadb((const char *)doc, len, JSON_DECODE_ANY, &e);
            if (!j || (object_only && !json_is_object(j)))
                fuzz_json_schema_die("a complete document jansson does not read", doc, len);
            json_decref(j);
        }
    }
    int ret = doc ? 1 : -1;
    free(doc);
    numla_grammar_matcher_destroy(&m);
    return ret;
}

int numla_fuzz_json_schema_run(const uint8_t *data, size_t size)
{
    const uint8_t *nl = memchr(data, '\n', size);
    const size_t slen = nl ? (size_t)(nl - data) : size;
    const uint8_t *walk = nl ? nl + 1 : data + size;
    const size_t wlen = size - (size_t)(walk - data);
    const uint8_t *bytes[256];
    size_t lens[256];
    uint8_t all[256];
    for (int c = 0; c < 256; c++) {
        all[c] = (uint8_t)c;
        bytes[c] = &all[c];
        lens[c] = 1;
    }
    numla_grammar_vocab *v = NULL;
    if (numla_grammar_vocab_create(256, bytes, lens, NULL, 0, &v) != NUMLA_STATUS_OK)
        return -1;
    int ret = 1;
    numla_grammar *g = NULL;
    if (numla_grammar_compile_json_object(&g) != NUMLA_STATUS_OK)
        ret = -1;
    else
        ret = fuzz_json_schema_walk(g, v, 1, walk, wlen);
    numla_grammar_destroy(&g);
    json_t *s = ret == 1 ? json_loadb((const char *)data, slen, JSON_DECODE_ANY, NULL) : NULL;
    if (s && numla_grammar_compile_schema(s, &g) == NUMLA_STATUS_OK)
        ret = fuzz_json_schema_walk(g, v, 0, walk, wlen);
    numla_grammar_destroy(&g);
    json_decref(s);
    numla_grammar_vocab_destroy(&v);
    return ret;
}

#ifdef NUMLA_FUZZ_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    numla_fuzz_json_schema_run(data, size);
    return 0;
}
#endif
