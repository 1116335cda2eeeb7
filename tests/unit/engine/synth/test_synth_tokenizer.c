/* Tests for the synthetic tokenizer (engine/text/synthetic_vocab.h) and `numla synth
 * --tokenizer synthetic` (engine/synth/synth.h): DeepSeek-V3's 129,280-token vocabulary written
 * as tokenizer.json + tokenizer_config.json and loaded back through numla's tokenizer — every
 * token present under its id with the generator's bytes, all distinct, BOS/EOS special; text
 * encoded then decoded comes back byte for byte, a token's own text encodes to that one token;
 * a synthesized model's config.json agrees with its tokenizer (vocab_size, BOS, EOS). */
#define _GNU_SOURCE
#include "test_util.h"

#include "engine/synth/synth.h"
#include "engine/text/synthetic_vocab.h"
#include "engine/text/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *st_dir(const char *name)
{
    static char buf[4][512];
    static int k;
    char *p = buf[k++ & 3];
    snprintf(p, 512, "%s/synth-tok-%s", numla_test_tmpdir(), name);
    mkdir(p, 0755);
    return p;
}

static int st_save(json_t *root, const char *dir, const char *name)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return json_dump_file(root, path, JSON_COMPACT) == 0;
}

/* text -> ids -> text, byte for byte (add_special off, so no BOS either way) */
static void st_round_trip(numla_tokenizer *t, const char *text)
{
    int32_t *ids = NULL;
    int64_t n = 0;
    char *back = NULL;
    size_t len = 0;
    CU_ASSERT_EQUAL_FATAL(numla_tokenizer_encode(t, text, strlen(text), 0, &ids, &n),
                          NUMLA_STATUS_OK);
    CU_ASSERT(n > 0);
    CU_ASSERT_EQUAL_FATAL(numla_tokenizer_decode(t, ids, n, 0, &back, &len), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(len, strlen(text));
    CU_ASSERT_STRING_EQUAL(back, text);
    free(ids);
    free(back);
}

static void test_v3_vocabulary_loads(void)
{
    const int32_t V = 129280;
    numla_synthetic_vocab *v = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_synthetic_vocab_create(V, &v), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_synthetic_vocab_size(v), V);
    json_t *tj = NULL, *cj = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_synthetic_vocab_tokenizer_json(v, &tj, &cj), NUMLA_STATUS_OK);
    const char *dir = st_dir("v3");
    CU_ASSERT_FATAL(st_save(tj, dir, "tokenizer.json") && st_save(cj, dir, "tokenizer_config.json"));
    json_decref(tj);
    json_decref(cj);

    numla_tokenizer *t = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_tokenizer_load_for_model(dir, V, &t), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_tokenizer_vocab_size(t), V);
    const uint8_t *const *bytes;
    const size_t *lens;
    numla_synthetic_vocab_tokens(v, &bytes, &lens);
    const int32_t first = numla_synthetic_vocab_first_special(v);
    CU_ASSERT(first > 256 && first < V);
    /* every id is a token: the generator's bytes below the specials, special tokens above */
    int64_t wrong = 0, special_wrong = 0, multi = 0;
    for (int32_t id = 0; id < V; id++) {
        size_t n = 0;
        const uint8_t *b = numla_tokenizer_token_bytes(t, id, &n);
        if (id < first) {
            wrong += !b || n != lens[id] || n == 0 || n > NUMLA_SYNTHETIC_VOCAB_MAX_BYTES ||
                     memcmp(b, bytes[id], n) || numla_tokenizer_is_special(t, id) ||
                     (id < 256 && (n != 1 || b[0] != id));
            multi += n > 1;
        } else
            special_wrong += !numla_tokenizer_is_special(t, id) || lens[id] != 0;
    }
    CU_ASSERT_EQUAL(wrong, 0);
    CU_ASSERT_EQUAL(special_wrong, 0);
    CU_ASSERT_EQUAL(multi, first - 256);
    CU_ASSERT_EQUAL(numla_tokenizer_bos(t), numla_synthetic_vocab_bos(v));
    CU_ASSERT_EQUAL(numla_tokenizer_eos(t), numla_synthetic_vocab_eos(v));
    CU_ASSERT_NOT_EQUAL(numla_tokenizer_bos(t), numla_tokenizer_eos(t));
    CU_ASSERT(numla_tokenizer_bos(t) >= first && numla_tokenizer_eos(t) >= first);

    st_round_trip(t, "Hello, world! The quick brown fox jumps over the lazy dog.");
    st_round_trip(t, "{\"name\": \"Jane\", \"age\": 42, \"tags\": [\"a\", \"b\"], \"ok\": true}\n");
    st_round_trip(t, "数据 日本語 한국어 😀 €→π ñü ß Ω, tabs\tand\r\nlines  12345 -7.5e3");
    /* a word piece that is a whole pre-token encodes to its own id (ignore_merges); the BOS
     * token written in the text is matched as the special token */
    int checked = 0;
    for (int32_t id = 256; id < first && checked < 50; id++) {
        if (lens[id] < 3 || bytes[id][0] != ' ')
            continue;
        int word = 1;
        for (size_t i = 1; i < lens[id]; i++)
            word &= bytes[id][i] >= 'a' && bytes[id][i] <= 'z';
        if (!word)
            continue;
        char text[64];
        memcpy(text, bytes[id], lens[id]);
        text[lens[id]] = 0;
        int32_t *ids = NULL;
        int64_t n = 0;
        CU_ASSERT_EQUAL_FATAL(numla_tokenizer_encode(t, text, lens[id], 0, &ids, &n),
                              NUMLA_STATUS_OK);
        CU_ASSERT(n == 1 && ids[0] == id);
        free(ids);
        checked++;
    }
    CU_ASSERT_EQUAL(checked, 50);
    int32_t *ids = NULL;
    int64_t n = 0;
    CU_ASSERT_EQUAL_FATAL(numla_tokenizer_encode(t, "hi", 2, 1, &ids, &n), NUMLA_STATUS_OK);
    CU_ASSERT(n >= 2 && ids[0] == numla_tokenizer_bos(t));
    free(ids);
    numla_tokenizer_destroy(&t);
    numla_synthetic_vocab_destroy(&v);

    /* a smaller vocabulary holds the first pieces of the larger one */
    numla_synthetic_vocab *small = NULL, *big = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_synthetic_vocab_create(1000, &small), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL_FATAL(numla_synthetic_vocab_create(4000, &big), NUMLA_STATUS_OK);
    const uint8_t *const *sb, *const *bb;
    const size_t *sl, *bl;
    numla_synthetic_vocab_tokens(small, &sb, &sl);
    numla_synthetic_vocab_tokens(big, &bb, &bl);
    int same = 1;
    for (int32_t id = 0; id < numla_synthetic_vocab_first_special(small); id++)
        same &= sl[id] == bl[id] && !memcmp(sb[id], bb[id], sl[id]);
    CU_ASSERT(same);
    numla_synthetic_vocab_destroy(&small);
    numla_synthetic_vocab_destroy(&big);
    CU_ASSERT_EQUAL(numla_synthetic_vocab_create(NUMLA_SYNTHETIC_VOCAB_MIN - 1, &small),
                    NUMLA_STATUS_INVALID_ARG);
}

static void test_synth_writes_tokenizer(void)
{
    const char *dir = st_dir("tiny");
    numla_synth_options o = {.preset = "tiny", .out_dir = dir, .dtype = NUMLA_DTYPE_F32,
                             .synthetic_tokenizer = 1};
    CU_ASSERT_EQUAL_FATAL(numla_synth_write(&o, NULL), NUMLA_STATUS_OK);
    char path[700];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *cfg = json_load_file(path, 0, NULL);
    CU_ASSERT_FATAL(cfg != NULL);
    const int64_t V = json_integer_value(json_object_get(cfg, "vocab_size"));
    CU_ASSERT(V >= NUMLA_SYNTHETIC_VOCAB_MIN);
    numla_tokenizer *t = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_tokenizer_load_for_model(dir, V, &t), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_tokenizer_vocab_size(t), V);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(cfg, "bos_token_id")),
                    numla_tokenizer_bos(t));
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(cfg, "eos_token_id")),
                    numla_tokenizer_eos(t));
    st_round_trip(t, "a small model's text: {\"k\": [1, 2]} 中文");
    numla_tokenizer_destroy(&t);
    json_decref(cfg);
    /* a tokenizer directory and the synthetic tokenizer at once are refused */
    o.tokenizer_dir = dir;
    CU_ASSERT_EQUAL(numla_synth_write(&o, NULL), NUMLA_STATUS_INVALID_ARG);
    numla_error_clear();
}

NUMLA_TEST_SUITE(synth_tokenizer, NULL, NULL, NUMLA_TEST(test_v3_vocabulary_loads),
                 NUMLA_TEST(test_synth_writes_tokenizer))
