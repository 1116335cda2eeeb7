/* engine/text/synthetic_vocab.h — a synthetic byte-level BPE vocabulary the size of a real
 * model's (DeepSeek-V3's 129,280 tokens), for the benchmarks (`numla bench grammar`) and for
 * synthetic models (`numla synth --tokenizer synthetic`), so both see the same tokens.
 *
 * Ids 0..255 are the 256 bytes; then pieces drawn from a fixed seed: words with and without a
 * leading space, digits, JSON punctuation (some with a word), CJK and other UTF-8, a few random
 * bytes (pieces of characters); each piece is distinct (a repeat is drawn again), at most
 * NUMLA_SYNTHETIC_VOCAB_MAX_BYTES bytes. The pieces are the same sequence whatever the size:
 * a smaller vocabulary holds the first pieces of a larger one. The last
 * numla_synthetic_vocab_num_special ids are DeepSeek-V3's special tokens (BOS, EOS, the chat
 * template's role and tool markers), which stand for no bytes.
 *
 * numla_synthetic_vocab_tokenizer_json gives it as the tokenizer.json / tokenizer_config.json
 * pair numla_tokenizer_load reads: a BPE model holding every token under its byte-level string,
 * no merges and `ignore_merges` (a pre-token that is a token encodes to it, any other to its
 * bytes), the GPT-2 ByteLevel pre-tokenizer and decoder; the config names BOS and EOS, adds
 * BOS, and carries the deepseek-v3 chat template. Not collective; a vocabulary is immutable. */
#ifndef NUMLA_ENGINE_TEXT_SYNTHETIC_VOCAB_H
#define NUMLA_ENGINE_TEXT_SYNTHETIC_VOCAB_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

enum { NUMLA_SYNTHETIC_VOCAB_MAX_BYTES = 32 };
/* The smallest vocabulary: the bytes, the special tokens and some pieces. */
enum { NUMLA_SYNTHETIC_VOCAB_MIN = 512 };

typedef struct numla_synthetic_vocab numla_synthetic_vocab;

/* num_tokens >= NUMLA_SYNTHETIC_VOCAB_MIN tokens (INVALID_ARG otherwise). */
numla_status numla_synthetic_vocab_create(int32_t num_tokens, numla_synthetic_vocab **out);
void numla_synthetic_vocab_destroy(numla_synthetic_vocab **v);

int32_t numla_synthetic_vocab_size(const numla_synthetic_vocab *v);
/* Every token's bytes and length (num_tokens each; a special token: NULL and 0), valid while v
 * lives: what numla_grammar_vocab_create takes. */
void numla_synthetic_vocab_tokens(const numla_synthetic_vocab *v, const uint8_t *const **bytes,
                                  const size_t **lens);
/* The special tokens: ids [first, size) (*first), the BOS and EOS ids. */
int32_t numla_synthetic_vocab_first_special(const numla_synthetic_vocab *v);
int32_t numla_synthetic_vocab_bos(const numla_synthetic_vocab *v);
int32_t numla_synthetic_vocab_eos(const numla_synthetic_vocab *v);

/* The tokenizer.json (*tokenizer) and tokenizer_config.json (*config) documents (new
 * references; the caller decrefs). */
numla_status numla_synthetic_vocab_tokenizer_json(const numla_synthetic_vocab *v,
                                                  json_t **tokenizer, json_t **config);

#endif
