/* engine/serving/grammar.h — constrained decoding: a JSON Schema compiled to a grammar, a
 * matcher that walks it byte by byte, and the per-step token mask over a vocabulary.
 *
 * The schema (parsed by jansson) compiles to a graph of nodes (literal bytes, string, number,
 * array, object, any-object, alternatives); the matcher is a nondeterministic pushdown automaton
 * over bytes: a set of at most NUMLA_GRAMMAR_MAX_STACKS stacks (alternatives that are still
 * alive), each at most NUMLA_GRAMMAR_MAX_DEPTH frames deep, kept as persistent (shared) frames
 * in an arena. Where the set would grow past its bound the later alternatives are dropped: the
 * matcher may then refuse a valid document, never accept an invalid one.
 *
 * What is generated (the "canonical" documents of a schema; docs/serving.md):
 *   - compact JSON: no whitespace anywhere (separators "," and ":");
 *   - an object's properties in any order, each at most once, the required ones present (in
 *     the order the schema lists them when it lists more than 64); no other keys (additionalProperties true / absent / a
 *     schema: none are generated, which the schema allows); json_object mode and an object
 *     schema without "properties" take any keys, with any values (or values of
 *     additionalProperties when it is a schema);
 *   - strings: any valid UTF-8 without control characters, escapes \" \\ \/ \b \f \n \r \t and
 *     \uXXXX except surrogates (D800-DFFF) and \u0000 (what jansson reads back);
 *     minLength/maxLength count code points (an escape is one); a string with a pattern or a
 *     format takes no \uXXXX escape, and its decoded text must match (grammar_regex.h);
 *   - numbers: -?(0|[1-9]d*)(.d+)?([eE][+-]?d+)? with at most 15 integer digits, 15 fraction
 *     digits and 2 exponent digits (so jansson reads every one without overflow); integer:
 *     -?(0|[1-9]d*) with at most 15 digits; a number with minimum/maximum/exclusiveMinimum/
 *     exclusiveMaximum/multipleOf: no exponent and at most 15 digits in all, checked exactly
 *     against the bounds (each prefix must still be able to end within them);
 *   - enum/const: the values' compact serialization (jansson's) as alternatives.
 * Keywords compiled: type (a name or a list), properties, required (a name properties does
 * not define takes a value of additionalProperties), additionalProperties (boolean or a schema:
 * no extra keys are generated either way), minProperties, maxProperties, patternProperties
 * (beside properties when no property name matches a constraining pattern; alone: the keys of
 * one pattern), items (a schema;
 * additionalItems beside it is ignored), minItems,
 * maxItems, minLength, maxLength, minimum, maximum, exclusiveMinimum, exclusiveMaximum (numbers
 * or draft 4's booleans), multipleOf (an integer), pattern (grammar_regex.h's subset of
 * ECMA-262), format
 * (date, time, date-time, email, hostname, uuid, ipv4, ipv6, uri: a documented subset of each;
 * the other formats JSON Schema defines are refused, unknown names are annotations), enum,
 * const, anyOf, oneOf (only when no two alternatives can both match: they start with different
 * bytes, or their enum/const values differ, or a property both require has different
 * enum/const values), allOf of one schema, $ref to a JSON pointer into the document ("#", "#/$defs/NAME", ...);
 * annotations and unknown keywords (title, description, default, $schema, id, x-..., ...) are
 * ignored, as JSON Schema says. Every other validation keyword of drafts 4 to 2020-12
 * (prefixItems, propertyNames, not, if/then/else, uniqueItems, ...) is refused with an
 * error naming it;
 * so are enum/const together with other constraints, an empty enum, minItems > maxItems and the
 * like. Refusal is allowed, accepting and then violating is not.
 *
 * Not collective; a compiled grammar (reference-counted) and a vocabulary are immutable and may
 * be shared across threads; a matcher belongs to one request.
 */
#ifndef NUMLA_ENGINE_GRAMMAR_H
#define NUMLA_ENGINE_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/status.h"
#include "engine/text/tokenizer.h"

enum { NUMLA_GRAMMAR_MAX_STACKS = 32, NUMLA_GRAMMAR_MAX_DEPTH = 64 };

typedef struct numla_grammar numla_grammar;
typedef struct numla_grammar_vocab numla_grammar_vocab;
typedef struct numla_grammar_matcher numla_grammar_matcher;

/* Compile a JSON Schema. A schema outside the subset fails with NUMLA_STATUS_UNSUPPORTED (or
 * NUMLA_STATUS_FORMAT for a malformed one) and a message that names the keyword and where it is
 * ("schema.properties.a: 'pattern' is not supported"); out of memory: NO_MEMORY. */
numla_status numla_grammar_compile_schema(const json_t *schema, numla_grammar **out);
/* json_object mode: any JSON object. */
numla_status numla_grammar_compile_json_object(numla_grammar **out);
/* One more reference to g (thread-safe): each holder calls numla_grammar_destroy, the last frees
 * it (a request's grammar shared by its n choices across the HTTP and serving threads). */
numla_grammar *numla_grammar_ref(numla_grammar *g);
/* Drop a reference (the last frees); sets *g to NULL; NULL is a no-op. */
void numla_grammar_destroy(numla_grammar **g);

/* The vocabulary's byte strings as a trie: token i stands for bytes[i] (lens[i] bytes; NULL or
 * empty: never allowed, e.g. a special token); the end ids (EOS) are allowed only where the
 * grammar is complete. */
numla_status numla_grammar_vocab_create(int32_t num_tokens, const uint8_t *const *bytes,
                                        const size_t *lens, const int32_t *end_ids,
                                        int32_t num_end, numla_grammar_vocab **out);
/* The same from a tokenizer (special tokens excluded), for a model of vocab_size ids. */
numla_status numla_grammar_vocab_from_tokenizer(const numla_tokenizer *t, int64_t vocab_size,
                                                const int32_t *end_ids, int32_t num_end,
                                                numla_grammar_vocab **out);
void numla_grammar_vocab_destroy(numla_grammar_vocab **v);
int32_t numla_grammar_vocab_size(const numla_grammar_vocab *v);

numla_status numla_grammar_matcher_create(const numla_grammar *g, numla_grammar_matcher **out);
void numla_grammar_matcher_destroy(numla_grammar_matcher **m);
/* Feed n bytes: 1 when every one was accepted (the state advanced), 0 when one was refused (the
 * state is then as before the call). */
int numla_grammar_matcher_accept_bytes(numla_grammar_matcher *m, const uint8_t *b, size_t n);
/* The bytes so far are a whole document of the schema. */
int numla_grammar_matcher_is_complete(const numla_grammar_matcher *m);
/* Complete, and no further byte can be accepted (the document closed). */
int numla_grammar_matcher_is_closed(const numla_grammar_matcher *m);
/* The tokens allowed next, as bits (token i: mask[i / 64] >> (i % 64) & 1; (V + 63) / 64
 * words): a token whose bytes the matcher accepts, an end id where it is complete. Not
 * thread-safe on one matcher (it uses the matcher's scratch). */
numla_status numla_grammar_matcher_fill_mask(numla_grammar_matcher *m,
                                             const numla_grammar_vocab *v, uint64_t *mask);
/* Advance by a sampled token: its bytes (an end id: no change). Fails (INVALID_ARG) when the
 * grammar does not allow it. */
numla_status numla_grammar_matcher_accept_token(numla_grammar_matcher *m,
                                                const numla_grammar_vocab *v, int32_t token);

#endif
