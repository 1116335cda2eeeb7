/* engine/text/synthetic_vocab.c — the synthetic byte-level vocabulary (synthetic_vocab.h). */
#include "engine/text/synthetic_vocab.h"

#include <stdlib.h>
#include <string.h>

#include "engine/text/chat_template.h"
#include "engine/text/tokenizer_internal.h"

/* DeepSeek-V3's special tokens the deepseek-v3 chat template writes; BOS first, EOS second. */
static const char *const numla_synthetic_specials[] = {
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
    "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
    "<｜tool▁call▁end｜>", "<｜tool▁sep｜>", "<｜tool▁outputs▁begin｜>",
    "<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>"};
enum { NUMLA_SYNTHETIC_NUM_SPECIAL = sizeof numla_synthetic_specials / sizeof(char *) };

struct numla_synthetic_vocab {
    int32_t n;
    uint8_t *store;            /* (n, NUMLA_SYNTHETIC_VOCAB_MAX_BYTES) */
    const uint8_t **bytes;     /* (n) into store; NULL for the special tokens */
    size_t *lens;              /* (n) */
};

static uint32_t numla_synthetic_rand(uint64_t *x)
{
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*x >> 33);
}

/* One drawn piece into buf (at most NUMLA_SYNTHETIC_VOCAB_MAX_BYTES bytes); its length. */
static size_t numla_synthetic_piece(uint64_t *x, uint8_t *buf)
{
    static const char *const punct[] = {"\"", "\",", "\":", "{\"", "}", "},", "}}", "]", "],",
                                        "[", "[\"", "\"]", ",\"", "\":\"", "\n", "  ", "    ",
                                        ".", ",", ":", ";", "(", ")", "\\n", "\\\"", "'", "-",
                                        "\":[", "\":{", "\"}", " {", " \""};
    static const char *const cjk[] = {"的", "是", "日本", "语", "数据", "é", "ü", "ñ", "ß",
                                      "π", "€", "→", "😀", "中文", "한국어", "Ω"};
    const uint32_t kind = numla_synthetic_rand(x) % 100;
    size_t n = 0;
    if (kind < 70) { /* a word piece, most with a leading space */
        if (numla_synthetic_rand(x) % 3)
            buf[n++] = ' ';
        const size_t len = 2 + numla_synthetic_rand(x) % 9;
        const int cap = numla_synthetic_rand(x) % 5 == 0;
        for (size_t i = 0; i < len; i++)
            buf[n++] = (uint8_t)((cap && i == 0 ? 'A' : 'a') + numla_synthetic_rand(x) % 26);
    } else if (kind < 78) { /* digits */
        const size_t len = 1 + numla_synthetic_rand(x) % 3;
        for (size_t i = 0; i < len; i++)
            buf[n++] = (uint8_t)('0' + numla_synthetic_rand(x) % 10);
    } else if (kind < 86) { /* punctuation, maybe with a word */
        const char *p = punct[numla_synthetic_rand(x) % (sizeof punct / sizeof punct[0])];
        memcpy(buf, p, strlen(p));
        n = strlen(p);
        if (numla_synthetic_rand(x) % 2)
            for (size_t i = 0; i < 1 + numla_synthetic_rand(x) % 6; i++)
                buf[n++] = (uint8_t)('a' + numla_synthetic_rand(x) % 26);
    } else if (kind < 97) { /* UTF-8: up to 3 characters of at most 9 bytes */
        const size_t k = 1 + numla_synthetic_rand(x) % 3;
        for (size_t i = 0; i < k; i++) {
            const char *c = cjk[numla_synthetic_rand(x) % (sizeof cjk / sizeof cjk[0])];
            memcpy(buf + n, c, strlen(c));
            n += strlen(c);
        }
    } else { /* random bytes (pieces of characters) */
        const size_t len = 2 + numla_synthetic_rand(x) % 3;
        for (size_t i = 0; i < len; i++)
            buf[n++] = (uint8_t)(numla_synthetic_rand(x) & 0xFF);
    }
    return n;
}

/* The distinct-piece set: open addressing over ids, keyed by the pieces' bytes. */
static int numla_synthetic_insert(const numla_synthetic_vocab *v, int32_t *slot, uint64_t mask,
                                  int32_t id)
{
    uint64_t h = numla_tokenizer_hash(v->bytes[id], v->lens[id]) & mask;
    for (; slot[h] >= 0; h = (h + 1) & mask)
        if (v->lens[slot[h]] == v->lens[id] && !memcmp(v->bytes[slot[h]], v->bytes[id], v->lens[id]))
            return 0;
    slot[h] = id;
    return 1;
}

numla_status numla_synthetic_vocab_create(int32_t num_tokens, numla_synthetic_vocab **out)
{
    *out = NULL;
    if (num_tokens < NUMLA_SYNTHETIC_VOCAB_MIN)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "synthetic vocabulary of %d tokens: at least %d",
                   (int)num_tokens, (int)NUMLA_SYNTHETIC_VOCAB_MIN);
    numla_synthetic_vocab *v = calloc(1, sizeof *v);
    const uint64_t mask = numla_tokenizer_pow2(2 * (uint64_t)num_tokens) - 1;
    int32_t *slot = malloc((mask + 1) * sizeof *slot);
    if (v) {
        v->n = num_tokens;
        v->store = malloc((size_t)num_tokens * NUMLA_SYNTHETIC_VOCAB_MAX_BYTES);
        v->bytes = calloc((size_t)num_tokens, sizeof *v->bytes);
        v->lens = calloc((size_t)num_tokens, sizeof *v->lens);
    }
    if (!v || !slot || !v->store || !v->bytes || !v->lens) {
        free(slot);
        numla_synthetic_vocab_destroy(&v);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for a synthetic vocabulary of %d tokens",
                   (int)num_tokens);
    }
    memset(slot, 0xff, (mask + 1) * sizeof *slot);
    const int32_t first_special = num_tokens - NUMLA_SYNTHETIC_NUM_SPECIAL;
    uint64_t x = 12345;
    for (int32_t t = 0; t < first_special; t++) {
        uint8_t *b = v->store + (size_t)t * NUMLA_SYNTHETIC_VOCAB_MAX_BYTES;
        v->bytes[t] = b;
        if (t < 256) {
            b[0] = (uint8_t)t;
            v->lens[t] = 1;
            numla_synthetic_insert(v, slot, mask, t);
            continue;
        }
        do
            v->lens[t] = numla_synthetic_piece(&x, b);
        while (!numla_synthetic_insert(v, slot, mask, t));
    }
    free(slot);
    *out = v;
    return NUMLA_STATUS_OK;
}

void numla_synthetic_vocab_destroy(numla_synthetic_vocab **v)
{
    if (!v || !*v)
        return;
    free((*v)->store);
    free((*v)->bytes);
    free((*v)->lens);
    free(*v);
    *v = NULL;
}

int32_t numla_synthetic_vocab_size(const numla_synthetic_vocab *v)
{
    return v->n;
}

void numla_synthetic_vocab_tokens(const numla_synthetic_vocab *v, const uint8_t *const **bytes,
                                  const size_t **lens)
{
    *bytes = v->bytes;
    *lens = v->lens;
}

int32_t numla_synthetic_vocab_first_special(const numla_synthetic_vocab *v)
{
    return v->n - NUMLA_SYNTHETIC_NUM_SPECIAL;
}

int32_t numla_synthetic_vocab_bos(const numla_synthetic_vocab *v)
{
    return v->n - NUMLA_SYNTHETIC_NUM_SPECIAL;
}

int32_t numla_synthetic_vocab_eos(const numla_synthetic_vocab *v)
{
    return v->n - NUMLA_SYNTHETIC_NUM_SPECIAL + 1;
}

/* A token's byte-level string (GPT-2's bytes_to_unicode, as tokenizer.json stores it) into
 * s (room for 2 bytes per byte and the NUL). */
static void numla_synthetic_byte_level(const uint8_t *b, size_t n, char *s)
{
    for (size_t i = 0; i < n; i++) {
        const uint32_t cp = numla_tokenizer_byte_cp(b[i]);
        if (cp < 0x80)
            *s++ = (char)cp;
        else {
            *s++ = (char)(0xc0 | (cp >> 6));
            *s++ = (char)(0x80 | (cp & 0x3f));
        }
    }
    *s = 0;
}

numla_status numla_synthetic_vocab_tokenizer_json(const numla_synthetic_vocab *v,
                                                  json_t **tokenizer, json_t **config)
{
    *tokenizer = *config = NULL;
    const int32_t first = numla_synthetic_vocab_first_special(v);
    json_t *vocab = json_object(), *added = json_array();
    int ok = vocab && added;
    char s[2 * NUMLA_SYNTHETIC_VOCAB_MAX_BYTES + 1];
    for (int32_t t = 0; ok && t < first; t++) {
        numla_synthetic_byte_level(v->bytes[t], v->lens[t], s);
        ok = !json_object_set_new(vocab, s, json_integer(t));
    }
    for (int32_t t = first; ok && t < v->n; t++)
        ok = !json_array_append_new(
            added, json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", (int)t, "content",
                             numla_synthetic_specials[t - first], "single_word", 0, "lstrip", 0,
                             "rstrip", 0, "normalized", 0, "special", 1));
    json_t *byte_level = json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel",
                                   "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 1);
    json_t *tok = ok && byte_level ? json_pack(
        "{s:s, s:n, s:n, s:O, s:n, s:O, s:O, s:O, s:{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:b, "
        "s:O, s:[]}}", "version", "1.0", "truncation", "padding", "added_tokens", added,
        "normalizer", "pre_tokenizer", byte_level, "post_processor", byte_level, "decoder",
        byte_level, "model", "type", "BPE", "dropout", "unk_token", "continuing_subword_prefix",
        "end_of_word_suffix", "fuse_unk", 0, "byte_fallback", 0, "ignore_merges", 1, "vocab",
        vocab, "merges") : NULL;
    json_decref(byte_level);
    json_decref(vocab);
    json_decref(added);
    const char *tmpl = numla_chat_template_source("deepseek-v3");
    json_t *cfg = tok && tmpl ? json_pack(
        "{s:b, s:b, s:s, s:s, s:n, s:I, s:s, s:s}", "add_bos_token", 1, "add_eos_token", 0,
        "bos_token", numla_synthetic_specials[0], "eos_token", numla_synthetic_specials[1],
        "unk_token", "model_max_length", (json_int_t)131072, "tokenizer_class",
        "LlamaTokenizerFast", "chat_template", tmpl) : NULL;
    if (!cfg) {
        json_decref(tok);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for the synthetic tokenizer's documents");
    }
    *tokenizer = tok;
    *config = cfg;
    return NUMLA_STATUS_OK;
}
