/* engine/text/tokenizer.h — Hugging Face `tokenizer.json` byte-level BPE tokenizer (DeepSeek's kind),
 * and tiktoken BPE (Kimi's kind, see numla_tokenizer_load_tiktoken_text).
 *
 * Loads <model_dir>/tokenizer.json (and <model_dir>/tokenizer_config.json when present) and
 * encodes/decodes exactly as the reference `tokenizers` library does for what is supported:
 *
 *   added tokens   matched first (leftmost-longest) with their special/lstrip/rstrip/
 *                  single_word/normalized flags; `normalized: false` ones on the raw text,
 *                  `normalized: true` ones on the normalized text
 *   normalizer     null, NFC, or a Sequence of those
 *   pre-tokenizer  Sequence, Split (String or Regex pattern through PCRE2 with UTF+UCP; every
 *                  behaviour; invert), Digits, ByteLevel (add_prefix_space, use_regex); ByteLevel
 *                  must be present and last (the byte-to-char mapping is folded into the model)
 *   model          BPE (merges as "a b" strings or [a, b] lists, ignore_merges, no prefixes/suffixes)
 *   post-processor TemplateProcessing (single sequence), ByteLevel, Sequence of those; without a
 *                  TemplateProcessing, tokenizer_config.json's add_bos_token/add_eos_token apply
 *   decoder        ByteLevel, or a Sequence of ByteLevel
 *
 * Anything else is an error naming the component (NUMLA_STATUS_UNSUPPORTED).
 *
 * Threading: a tokenizer owns scratch space, regex match data and a word cache, so encode must be
 * called from one thread at a time per tokenizer (not collective; no MPI). Decoding and the
 * queries are read-only and may run concurrently with each other.
 */
#ifndef NUMLA_ENGINE_TOKENIZER_H
#define NUMLA_ENGINE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

typedef struct numla_tokenizer numla_tokenizer;
typedef struct numla_tokenizer_stream numla_tokenizer_stream;

/* Ids above this are refused at load when the model's vocab_size is not known (the largest
 * published vocabularies are below 2^18). */
#define NUMLA_TOKENIZER_MAX_IDS ((int64_t)1 << 24)

/* Load the tokenizer of a model directory. Ids must be below NUMLA_TOKENIZER_MAX_IDS.
 * Not collective. */
numla_status numla_tokenizer_load(const char *model_dir, numla_tokenizer **out);
/* The same for a model whose config gives vocab_size (> 0): every id in tokenizer.json must be
 * below it, else NUMLA_STATUS_FORMAT naming the token and its id. Not collective. */
numla_status numla_tokenizer_load_for_model(const char *model_dir, int64_t vocab_size,
                                            numla_tokenizer **out);
/* A model directory without tokenizer.json but with tiktoken.model (Kimi K2) loads as a
 * tiktoken tokenizer (tokenizer_tiktoken.c): "<base64 token> <rank>" lines with ranks 0..n-1,
 * the 256 ids after them special (named by tokenizer_config.json's added_tokens_decoder, else
 * "<|reserved_token_ID|>"), Kimi's pre-tokenizer pattern, tiktoken's byte-pair merge. Errors
 * name the file and line (malformed line, bad base64 or rank, duplicate rank or token) or the
 * special token (colliding with a BPE token's id or bytes). numla_tokenizer_token gives a
 * token's raw bytes for these.
 * numla_tokenizer_load_tiktoken_text loads one from the file texts (config_json may be NULL;
 * name is the file named in errors, NULL for "tiktoken.model"); vocab_size as
 * numla_tokenizer_load_for_model. Not collective. */
numla_status numla_tokenizer_load_tiktoken_text(const char *model_text, size_t len,
                                                const char *config_json, int64_t vocab_size,
                                                const char *name, numla_tokenizer **out);
/* 1 when model_dir holds a tokenizer numla_tokenizer_load reads (tokenizer.json or
 * tiktoken.model). Not collective. */
int numla_tokenizer_present(const char *model_dir);
/* The same from the texts of a tokenizer.json and (NULL: none) a tokenizer_config.json, e.g.
 * made from a GGUF file's tokenizer.ggml.* keys; `source` names them in errors. Not collective. */
numla_status numla_tokenizer_load_json_text(const char *tokenizer_json, const char *config_json,
                                            int64_t vocab_size, const char *source,
                                            numla_tokenizer **out);
/* Free and NULL the handle (NULL is fine). */
void numla_tokenizer_destroy(numla_tokenizer **t);

/* Encode len bytes of UTF-8 text. *ids is malloc'd (caller frees; non-NULL even when *n == 0).
 * add_special: apply the post-processor / BOS-EOS rules (special tokens written in the text are
 * matched either way). Invalid UTF-8 fails with NUMLA_STATUS_FORMAT naming the byte offset. */
numla_status numla_tokenizer_encode(numla_tokenizer *t, const char *text, size_t len,
                                    int add_special, int32_t **ids, int64_t *n);
/* Decode n ids to text (malloc'd, NUL-terminated, *len excludes the NUL). Byte sequences that
 * are not UTF-8 become U+FFFD, as the reference does. skip_special drops special tokens.
 * An id outside the vocabulary fails with NUMLA_STATUS_OUT_OF_RANGE. */
numla_status numla_tokenizer_decode(const numla_tokenizer *t, const int32_t *ids, int64_t n,
                                    int skip_special, char **text, size_t *len);

/* The most bytes of input text one token can stand for (the longest token, with room for NFC
 * composing); 0 when a Split removes text (then no text length bounds the tokens). */
int64_t numla_tokenizer_max_bytes_per_token(const numla_tokenizer *t);
/* A lower bound on the tokens text (len bytes) encodes to, without encoding it: the bytes that
 * some token must stand for over numla_tokenizer_max_bytes_per_token. Added tokens that strip
 * spaces swallow whitespace, so with them only printable ASCII bytes other than the space
 * count. 0 when no bound exists. */
int64_t numla_tokenizer_min_tokens(const numla_tokenizer *t, const char *text, size_t len);

/* BOS / EOS ids from tokenizer_config.json (or the TemplateProcessing BOS); -1 when none. */
int32_t numla_tokenizer_bos(const numla_tokenizer *t);
int32_t numla_tokenizer_eos(const numla_tokenizer *t);
/* One past the largest id (model vocabulary and added tokens). */
int64_t numla_tokenizer_vocab_size(const numla_tokenizer *t);
/* The token string of id as stored in tokenizer.json (byte-level chars, e.g. "Ġthe"), NULL when
 * id is not a token. Valid while t lives. */
const char *numla_tokenizer_token(const numla_tokenizer *t, int32_t id);
/* The bytes token id stands for when decoded (may be part of a UTF-8 character), *len of them;
 * NULL when id is not a token. Valid while t lives. */
const uint8_t *numla_tokenizer_token_bytes(const numla_tokenizer *t, int32_t id, size_t *len);
/* The id of a token string (exact, as stored), -1 when absent. */
int32_t numla_tokenizer_token_id(const numla_tokenizer *t, const char *token);
/* 1 when id is an added token marked special. */
int numla_tokenizer_is_special(const numla_tokenizer *t, int32_t id);
/* Decode the token `token` (its string, as numla_tokenizer_token_id) even where special tokens
 * are skipped: markup a server reads back out of the text (a chat template's tool-call and
 * think tags) that the tokenizer marks special. It stays special (numla_tokenizer_is_special).
 * Returns 1 when token is one, else 0. Call before decoding starts (not thread-safe); not
 * collective. */
int numla_tokenizer_keep_in_text(numla_tokenizer *t, const char *token);

/* Streaming decoder: feed one id at a time, get back the text it completes. Bytes are held until
 * they complete a UTF-8 character (or are known never to, then U+FFFD), so every piece is valid
 * UTF-8 and the pieces concatenate to numla_tokenizer_decode of all ids. t must outlive it. */
numla_status numla_tokenizer_stream_create(const numla_tokenizer *t, int skip_special,
                                           numla_tokenizer_stream **out);
void numla_tokenizer_stream_destroy(numla_tokenizer_stream **s);
/* *piece points into s and stays valid until the next call on s; *len may be 0. */
numla_status numla_tokenizer_stream_push(numla_tokenizer_stream *s, int32_t id,
                                         const char **piece, size_t *len);
/* End of stream: held bytes of an unfinished character come out as U+FFFD. */
numla_status numla_tokenizer_stream_flush(numla_tokenizer_stream *s, const char **piece,
                                          size_t *len);

/* Check that len bytes are UTF-8 (no overlongs, surrogates or values past U+10FFFF); returns -1
 * when valid, else the offset of the first bad byte. */
int64_t numla_utf8_invalid_offset(const char *s, size_t len);

#endif
