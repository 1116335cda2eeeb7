/* tests/unit/engine/serving/test_grammar_regex.c — the pattern automaton
 * (engine/serving/grammar_regex.h) against PCRE2 as the independent reference (JavaScript-like
 * options: UTF, $ only at the end, \u escapes, empty classes): random patterns of the subset
 * over a small alphabet matched against random strings (ASCII, 2- and 3-byte characters,
 * newlines), JSON Schema's search semantics; the refusals; the lengths left and the sink states
 * checked by exhaustive walks; the fuzz target over its corpus and mutations. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "engine/serving/grammar_regex.h"
#include "test_util.h"

static pcre2_code *ref_compile(const char *pat)
{
    int err;
    PCRE2_SIZE off;
    return pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
                         PCRE2_UTF | PCRE2_DOLLAR_ENDONLY | PCRE2_ALT_BSUX |
                             PCRE2_ALLOW_EMPTY_CLASS,
                         &err, &off, NULL);
}

static int ref_matches(pcre2_code *re, const char *s, size_t n)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = pcre2_match(re, (PCRE2_SPTR)s, n, 0, 0, md, NULL);
    pcre2_match_data_free(md);
    return rc >= 0;
}

/* A random pattern of the subset over a, b, -, é, 中. */
static void gen_pattern(numla_test_rng *rng, char *out, size_t cap, int depth)
{
    static const char *const atoms[] = {"a", "b", "-", "é", "中", ".", "[ab]", "[^a]", "[a-c]",
                                        "[^-中]", "\\d", "\\w", "\\W", "[é-中]", "\\x61",
                                        "\\u4e2d", "[\\w-]", "\\.", "\\-"};
    size_t len = strlen(out);
    const int parts = 1 + (int)(numla_test_rng_u64(rng) % 3);
    for (int i = 0; i < parts && len + 40 < cap; i++) {
        const uint64_t k = numla_test_rng_u64(rng) % 20;
        if (k < 3 && depth < 3) {
            strcat(out, k == 0 ? "(?:" : "(");
            gen_pattern(rng, out, cap, depth + 1);
            if (numla_test_rng_u64(rng) % 3 == 0 && strlen(out) + 40 < cap) {
                strcat(out, "|");
                gen_pattern(rng, out, cap, depth + 1);
            }
            strcat(out, ")");
        } else if (k == 3 && i == 0)
            strcat(out, "^");
        else if (k == 4 && i == parts - 1)
            strcat(out, "$");
        else
            strcat(out, atoms[numla_test_rng_u64(rng) % (sizeof atoms / sizeof atoms[0])]);
        static const char *const quants[] = {"*", "+", "?", "{2}", "{1,3}", "{0,2}", "{2,}",
                                             "*?", "{1,2}?"};
        if (numla_test_rng_u64(rng) % 3 == 0 && out[strlen(out) - 1] != '^' &&
            out[strlen(out) - 1] != '$' && out[strlen(out) - 1] != '(')
            strcat(out, quants[numla_test_rng_u64(rng) % (sizeof quants / sizeof quants[0])]);
        len = strlen(out);
    }
    if (depth == 0 && numla_test_rng_u64(rng) % 4 == 0 && strlen(out) + 40 < cap) {
        strcat(out, "|");
        gen_pattern(rng, out, cap, 1);
    }
}

static size_t gen_subject(numla_test_rng *rng, char *out)
{
    static const char *const chars[] = {"a", "b", "c", "-", "é", "中", "\n", "1", "_", "."};
    size_t n = 0;
    const int k = (int)(numla_test_rng_u64(rng) % 8);
    for (int i = 0; i < k; i++) {
        const char *c = chars[numla_test_rng_u64(rng) % (sizeof chars / sizeof chars[0])];
        memcpy(out + n, c, strlen(c));
        n += strlen(c);
    }
    return n;
}

static void test_against_pcre2(void)
{
    numla_test_rng rng = {2026};
    int compared = 0, matched = 0;
    for (int p = 0; p < 400; p++) {
        char pat[512] = "";
        gen_pattern(&rng, pat, sizeof pat, 0);
        pcre2_code *re = ref_compile(pat);
        NUMLA_ASSERT_MSG(re != NULL, "PCRE2 refuses %s", pat);
        numla_regex *r = NULL;
        numla_status st = numla_regex_compile(pat, strlen(pat), &r);
        if (st == NUMLA_STATUS_UNSUPPORTED) { /* matches nothing, or too large: check the first */
            for (int s = 0; s < 50 && re; s++) {
                char subj[64];
                size_t n = gen_subject(&rng, subj);
                NUMLA_ASSERT_MSG(!ref_matches(re, subj, n), "%s refused but matches", pat);
            }
            pcre2_code_free(re);
            continue;
        }
        NUMLA_ASSERT_MSG(st == NUMLA_STATUS_OK, "%s: %s", pat, numla_error_message());
        for (int s = 0; r && re && s < 80; s++) {
            char subj[64];
            size_t n = gen_subject(&rng, subj);
            const int want = ref_matches(re, subj, n);
            const int got = numla_regex_matches(r, (const uint8_t *)subj, n);
            NUMLA_ASSERT_MSG(want == got, "/%s/ on \"%.*s\": PCRE2 %d, automaton %d", pat,
                             (int)n, subj, want, got);
            compared++;
            matched += want;
        }
        numla_regex_destroy(&r);
        pcre2_code_free(re);
    }
    CU_ASSERT(compared > 20000);
    CU_ASSERT(matched > compared / 10 && matched < compared * 9 / 10);
}

static void expect(const char *pat, const char *s, int want)
{
    numla_regex *r = NULL;
    numla_status st = numla_regex_compile(pat, strlen(pat), &r);
    NUMLA_ASSERT_MSG(st == NUMLA_STATUS_OK, "%s: %s", pat, numla_error_message());
    if (r)
        NUMLA_ASSERT_MSG(numla_regex_matches(r, (const uint8_t *)s, strlen(s)) == want,
                         "/%s/ on \"%s\" should be %d", pat, s, want);
    numla_regex_destroy(&r);
}

static void test_cases(void)
{
    expect("a", "cat", 1);                   /* a search */
    expect("^a", "cat", 0);
    expect("t$", "cat", 1);
    expect("^$", "", 1);
    expect("^$", "x", 0);
    expect("^a|b$", "xxb", 1);
    expect("^a|b$", "bxx", 0);
    expect("^[0-9]{3}-[0-9]{4}$", "555-1234", 1);
    expect("^[0-9]{3}-[0-9]{4}$", "555-12345", 0);
    expect("^\\S+@\\S+$", "a@b", 1);
    expect("^\\S+@\\S+$", "a b@c", 0);
    expect("^\\s$", "\xe3\x80\x80", 1);      /* U+3000 is a space in ECMA-262 */
    expect("^.$", "\xe2\x80\xa8", 0);        /* U+2028 is a line terminator */
    expect("^.$", "\xf0\x9f\x98\x80", 1);    /* one code point */
    expect("^\\uD83D\\uDE00$", "\xf0\x9f\x98\x80", 1);
    expect("^a{2,}$", "a", 0);
    expect("^a{2,}$", "aaaa", 1);
    expect("^(?<y>\\d{4})$", "2024", 1);
    expect("x{", "x{", 1);                   /* not a quantifier: a literal */
    expect("^[\\d-z]+$", "1-z", 1);
    expect("^\\cJ$", "\n", 1);
    static const char *const refused[] = {"(a)\\1", "(?=a)", "(?!a)", "(?<=a)b", "(?<!a)b",
                                          "\\bword", "\\p{L}", "\\u{41}", "\\k<n>", "\\a",
                                          "a{2,1}", "(a", "a)", "[b-a]", "*", "\\", "[a",
                                          "a{1001}", "^[]$", "\xff"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        numla_regex *r = NULL;
        numla_status st = numla_regex_compile(refused[i], strlen(refused[i]), &r);
        NUMLA_ASSERT_MSG(st != NUMLA_STATUS_OK, "%s compiled", refused[i]);
        CU_ASSERT(strlen(numla_error_message()) > 0);
        numla_regex_destroy(&r);
    }
}

/* From every state reached by strings up to 3 characters: min_left/max_left agree with a
 * search over continuations of up to 4 characters, and a sink state accepts them all. */
static void test_lengths_and_sinks(void)
{
    static const char *const pats[] = {"^a{2,4}$", "^(ab|c)+$", "^[a-c]{0,3}d?$", "b",
                                       "^é.{1,2}$", "^(a|bc{3})$"};
    static const char *const chars[] = {"a", "b", "c", "d", "é"};
    for (size_t p = 0; p < sizeof pats / sizeof pats[0]; p++) {
        numla_regex *r = NULL;
        CU_ASSERT_EQUAL_FATAL(numla_regex_compile(pats[p], strlen(pats[p]), &r),
                              NUMLA_STATUS_OK);
        /* every string of up to 3 of the characters (a number in base 5) */
        for (int len = 0, pow = 1; len <= 3; len++, pow *= 5)
            for (int code = 0; code < pow; code++) {
                int32_t s = numla_regex_start(r);
                for (int i = 0, c = code; i < len && s >= 0; i++, c /= 5)
                    for (const char *b = chars[c % 5]; *b && s >= 0; b++)
                        s = numla_regex_step(r, s, (uint8_t)*b);
                if (s < 0)
                    continue;
                int best = -1, worst = -1;
                for (int more = 0, pow2 = 1; more <= 4; more++, pow2 *= 5)
                    for (int code2 = 0; code2 < pow2; code2++) {
                        int32_t t = s;
                        for (int i = 0, c = code2; i < more && t >= 0; i++, c /= 5)
                            for (const char *b = chars[c % 5]; *b && t >= 0; b++)
                                t = numla_regex_step(r, t, (uint8_t)*b);
                        int acc = t >= 0 && numla_regex_accepting(r, t);
                        if (numla_regex_is_sink(r, s))
                            CU_ASSERT(acc);
                        if (acc) {
                            if (best < 0)
                                best = more;
                            worst = more;
                        }
                    }
                CU_ASSERT(best >= 0); /* a live state reaches a match */
                CU_ASSERT_EQUAL(numla_regex_min_left(r, s), best);
                if (numla_regex_max_left(r, s) < 4)
                    CU_ASSERT_EQUAL(numla_regex_max_left(r, s), worst);
            }
        numla_regex_destroy(&r);
    }
}

int numla_fuzz_regex_run(const uint8_t *data, size_t size);

static void test_fuzz_regex(void)
{
    static const char *const seeds[] = {"corpus_a", "corpus_b", "corpus_c"};
    numla_test_rng rng = {7};
    int ran = 0;
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "tests/fuzz/corpus/regex/%s.txt", seeds[i]);
        size_t n = 0;
        char *seed = numla_test_read_file(numla_test_source_path(rel), &n);
        NUMLA_ASSERT_MSG(seed != NULL, "cannot read %s", rel);
        if (!seed)
            continue;
        CU_ASSERT_EQUAL(numla_fuzz_regex_run((const uint8_t *)seed, n), 1);
        uint8_t *buf = malloc(n + 1);
        for (int k = 0; buf && k < 300; k++) {
            memcpy(buf, seed, n);
            size_t len = numla_test_mutate_json(buf, n, 0, &rng);
            CU_ASSERT_EQUAL_FATAL(numla_fuzz_regex_run(buf, len), 1);
            ran++;
        }
        free(buf);
        free(seed);
    }
    CU_ASSERT(ran >= 900);
}

NUMLA_TEST_SUITE(grammar_regex, NULL, NULL, NUMLA_TEST(test_against_pcre2),
                 NUMLA_TEST(test_cases), NUMLA_TEST(test_lengths_and_sinks),
                 NUMLA_TEST(test_fuzz_regex))
