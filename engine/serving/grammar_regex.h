/* engine/serving/grammar_regex.h — JSON Schema's `pattern` (an ECMA-262 regular expression)
 * compiled to a deterministic automaton over the UTF-8 bytes of a string, for the grammar's
 * string state (engine/serving/grammar.c) to step one byte at a time while it builds a token
 * mask (PCRE2 matches whole subjects, it cannot say which next bytes keep a match possible).
 *
 * The subset: literals (UTF-8 code points), `.` (any code point but \n \r U+2028 U+2029), classes
 * `[...]` and `[^...]` with ranges, the escapes \d \D \w \W \s \S \t \n \v \f \r \0 \xHH \uHHHH
 * (a surrogate pair as one code point) \cX and an escaped punctuation character, groups `(...)`,
 * `(?:...)`, `(?<name>...)`, alternation `|`, the quantifiers * + ? {n} {n,} {n,m} (lazy forms
 * too: the set of matched strings is the same), and the anchors ^ and $ (at the subject's start
 * and end: no multiline flag). A `{` that does not open a quantifier and `]`, `}` outside a
 * class are literals, as ECMA-262's Annex B reads them. Refused with a message naming the
 * construct: backreferences (\1, \k<name>), lookaround ((?= (?! (?<= (?<!), word boundaries
 * (\b \B), \p{...}, \u{...}, other escaped letters, and automata past the size limits.
 * The semantics are JSON Schema's: the pattern matches a string when it matches some part of it
 * (a search, not a whole-string match), so "a" matches "cat"; anchor with ^...$ for the whole.
 *
 * Not collective; a compiled automaton is immutable (share it across threads). */
#ifndef NUMLA_ENGINE_GRAMMAR_REGEX_H
#define NUMLA_ENGINE_GRAMMAR_REGEX_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

enum {
    NUMLA_REGEX_MAX_STATES = 4096, /* automaton states (a larger one is refused) */
    NUMLA_REGEX_INF = INT32_MAX    /* an unbounded length */
};

typedef struct numla_regex numla_regex;

/* Compile pattern[len] (UTF-8). UNSUPPORTED for a construct outside the subset or an automaton
 * past the limits, FORMAT for a malformed pattern (the message names the construct and its
 * offset), NO_MEMORY. A pattern no string matches is UNSUPPORTED. */
numla_status numla_regex_compile(const char *pattern, size_t len, numla_regex **out);
void numla_regex_destroy(numla_regex **r);

/* The start state; the state after byte b from state s, or -1 when no string that goes on this
 * way can match (dead states are pruned: every state >= 0 can still reach a match). */
int32_t numla_regex_start(const numla_regex *r);
int32_t numla_regex_step(const numla_regex *r, int32_t s, uint8_t b);
/* The bytes so far match (the string may end here). */
int numla_regex_accepting(const numla_regex *r, int32_t s);
/* From s: the fewest and most code points still to read before a match (most:
 * NUMLA_REGEX_INF when unbounded); a continuation byte counts with its lead byte. */
int32_t numla_regex_min_left(const numla_regex *r, int32_t s);
int32_t numla_regex_max_left(const numla_regex *r, int32_t s);
/* s accepts, and every valid UTF-8 continuation leads back to s (anything may follow). */
int numla_regex_is_sink(const numla_regex *r, int32_t s);
int32_t numla_regex_num_states(const numla_regex *r);
/* Does the pattern match the UTF-8 string s[n] (JSON Schema's sense)? */
int numla_regex_matches(const numla_regex *r, const uint8_t *s, size_t n);

#endif
