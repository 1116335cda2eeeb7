/* tests/fuzz/fuzz_regex.c — fuzz target for the pattern compiler
 * (engine/serving/grammar_regex.c). The input's first line is a pattern, each further line a
 * subject. Compiled or refused, nothing may crash; when it compiles: matching a subject equals
 * stepping its bytes to an accepting state; every state reached has min_left <= max_left and
 * min_left 0 when accepting; a sink state stays accepting on every byte of a valid character;
 * and where the pattern uses only constructs on which PCRE2 (JavaScript-like options) and
 * ECMA-262 agree and a subject is valid UTF-8 without \r, U+2028, U+2029, PCRE2 must say the
 * same. Anything else aborts. Linked into numla_unit (suite grammar_regex feeds it its corpus
 * and mutations); with -DNUMLA_FUZZ=ON also a libFuzzer binary. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/serving/grammar_regex.h"

/* 1: walked (the invariants hold). A broken invariant aborts. */
int numla_fuzz_regex_run(const uint8_t *data, size_t size);

static void fuzz_regex_die(const char *what, const uint8_t *pat, size_t np, const uint8_t *s,
                           size_t n)
{
    fprintf(stderr, "fuzz_regex: %s (/%.*s/ on \"%.*s\")\n", what, (int)np, (const char *)pat,
            (int)n, (const char *)s);
    abort();
}

/* Constructs whose meaning PCRE2 shares: letters a-f, digits, the operators, \d \w \D \W and
 * escaped punctuation (no \s, \v, \c, \x, \u, no '{' that is not a quantifier). */
static int fuzz_regex_comparable(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const uint8_t c = p[i];
        if (c == '\\') {
            if (i + 1 >= n || !strchr("dwDW.-()[]|*+?^$", p[i + 1]) || !p[i + 1])
                return 0;
            i++;
        } else if (!((c >= 'a' && c <= 'f') || (c >= '0' && c <= '9') ||
                     (strchr("()[]|*+?^$.-,:", c) && c)))
            return 0;
    }
    /* '[' first in a class and ']' right after are read differently; an empty group too */
    for (size_t i = 0; i + 1 < n; i++)
        if ((p[i] == '[' && (p[i + 1] == ']' || (p[i + 1] == '^' && i + 2 < n && p[i + 2] == ']'))) ||
            (p[i] == '(' && p[i + 1] == ')'))
            return 0;
    return 1;
}

static int fuzz_regex_plain_utf8(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        const uint8_t c = s[i];
        int k = c < 0x80 ? 0 : c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE1 && c <= 0xEC ? 2 : -1;
        if (k < 0 || c == '\r' || i + (size_t)k >= n)
            return 0;
        for (int j = 1; j <= k; j++)
            if ((s[i + j] & 0xC0) != 0x80)
                return 0;
        i += (size_t)k + 1;
    }
    return 1;
}

int numla_fuzz_regex_run(const uint8_t *data, size_t size)
{
    const uint8_t *nl = memchr(data, '\n', size);
    const size_t plen = nl ? (size_t)(nl - data) : size;
    numla_regex *r = NULL;
    if (numla_regex_compile((const char *)data, plen, &r) != NUMLA_STATUS_OK)
        return 1;
    pcre2_code *re = NULL;
    char *pat = NULL;
    if (fuzz_regex_comparable(data, plen) && (pat = malloc(plen + 1))) {
        memcpy(pat, data, plen);
        pat[plen] = 0;
        int err;
        PCRE2_SIZE off;
        re = pcre2_compile((PCRE2_SPTR)pat, plen,
                           PCRE2_UTF | PCRE2_DOLLAR_ENDONLY | PCRE2_ALT_BSUX |
                               PCRE2_ALLOW_EMPTY_CLASS,
                           &err, &off, NULL);
    }
    pcre2_match_data *md = re ? pcre2_match_data_create_from_pattern(re, NULL) : NULL;
    const uint8_t *s = nl ? nl + 1 : data + size;
    while (s <= data + size) {
        const uint8_t *e = memchr(s, '\n', (size_t)(data + size - s));
        const size_t n = e ? (size_t)(e - s) : (size_t)(data + size - s);
        int32_t st = numla_regex_start(r);
        for (size_t i = 0; i <= n; i++) {
            if (numla_regex_min_left(r, st) > numla_regex_max_left(r, st) ||
                (numla_regex_accepting(r, st) && numla_regex_min_left(r, st) != 0) ||
                (numla_regex_is_sink(r, st) && !numla_regex_accepting(r, st)))
                fuzz_regex_die("a state's lengths or sink flag disagree", data, plen, s, i);
            if (numla_regex_is_sink(r, st))
                for (int c = 0; c < 0x80; c++)
                    if (numla_regex_step(r, st, (uint8_t)c) != st)
                        fuzz_regex_die("a sink state leaves on an ASCII byte", data, plen, s, i);
            if (i == n)
                break;
            st = numla_regex_step(r, st, s[i]);
            if (st < 0)
                break;
        }
        const int stepped = st >= 0 && numla_regex_accepting(r, st);
        if (stepped != numla_regex_matches(r, s, n))
            fuzz_regex_die("matching and stepping disagree", data, plen, s, n);
        if (md && fuzz_regex_plain_utf8(s, n)) {
            const int want = pcre2_match(re, (PCRE2_SPTR)s, n, 0, 0, md, NULL) >= 0;
            if (want != stepped)
                fuzz_regex_die(want ? "PCRE2 matches, the automaton does not"
                                    : "the automaton matches, PCRE2 does not",
                               data, plen, s, n);
        }
        if (!e)
            break;
        s = e + 1;
    }
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    free(pat);
    numla_regex_destroy(&r);
    return 1;
}

#ifdef NUMLA_FUZZ_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    numla_fuzz_regex_run(data, size);
    return 0;
}
#endif
