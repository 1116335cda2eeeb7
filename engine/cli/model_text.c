/* engine/cli/model_text.c — tokenizer and chat template of a model directory or a GGUF file.
 *
 * A GGUF file (llama.cpp's converter) keeps the tokenizer as keys; they become the
 * tokenizer.json / tokenizer_config.json documents engine/text reads:
 *   tokenizer.ggml.model       must be "gpt2" (byte-level BPE)
 *   tokenizer.ggml.tokens      model.vocab (token i has id i; byte-level strings as stored)
 *   tokenizer.ggml.token_type  3 (control) tokens become special added tokens and 4 (user
 *                              defined) non-special added tokens, both matched as written
 *                              (normalized false; GGUF keeps no lstrip / rstrip / single_word
 *                              flags, so an added token with one in tokenizer.json matches
 *                              as written here); the rest are plain vocabulary
 *   tokenizer.ggml.merges      model.merges ("a b" strings)
 *   tokenizer.ggml.pre         the pre-tokenizer: "deepseek-v3" is DeepSeek-V3's (three Splits -
 *                              digits in runs of up to 3, CJK/kana runs, words and punctuation -
 *                              then ByteLevel without its regex), the same as
 *                              tests/golden/tokenizer/bpe8k's; "deepseek-llm" is DeepSeek-V2's and
 *                              V2-Lite's (six Splits - each CR or LF, a space and a run of cased
 *                              letters, a space and a run of ASCII / fullwidth punctuation,
 *                              trailing spaces, CJK / Hangul runs, digit runs - then ByteLevel
 *                              without its regex), the Splits of their tokenizer.json;
 *                              "kimi-k2" below; other values are UNSUPPORTED naming the key and
 *                              value
 *   tokenizer.ggml.bos_token_id / eos_token_id, add_bos_token (default true; kimi-k2: false,
 *                              as Kimi's tiktoken tokenizer adds none) / add_eos_token
 *                              tokenizer_config.json's bos_token / eos_token / add_*_token
 *   tokenizer.chat_template    tokenizer_config.json's chat_template: recognised as one of the
 *                              built-in renderers by engine/text/chat_template.c, like a file's
 *   general.architecture       "deepseek4": DeepSeek-V4's encoding is rendered by the built-in
 *                              deepseek-v4 (the file's tokenizer.chat_template, llama.cpp's
 *                              Jinja approximation of it, is not read)
 *
 * Kimi K2 (pre "kimi-k2"): llama.cpp's converter writes Kimi's tiktoken vocabulary as a gpt2 one
 * (each rank's bytes as a byte-level string at id = rank, type 1; merges rebuilt from the ranks;
 * the special tokens at their ids, type 3; ids without a token "[PADn]", type 5). numla runs it
 * as the tiktoken tokenizer it came from (engine/text/tokenizer_tiktoken.c: Kimi's pattern, the
 * merge by rank), so its ids are tiktoken's: the type-1 tokens, ids 0..n-1 without a gap, become
 * the ranks (byte-level strings back to bytes), the type-3/4 tokens the specials, which must lie
 * in the 256 ids after the ranks (Kimi's layout); type-5 ids are left to the tiktoken loader's
 * reserved names; the merges are not read (the ranks imply them).
 */
#include "engine/cli/model_text.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/strbuf.h"
#include "engine/formats/gguf.h"
#include "engine/json/model_json.h"
#include "engine/model/config.h" /* numla_model_path_is_gguf */

/* DeepSeek-V3's pre-tokenizer (tokenizer.json form). */
static const char DS_V3_PRE[] =
    "{\"type\":\"Sequence\",\"pretokenizers\":["
    "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\p{N}{1,3}\"},\"behavior\":\"Isolated\","
    "\"invert\":false},"
    "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"[\\u4e00-\\u9fa5\\u3040-\\u309f\\u30a0-\\u30ff]+\"},"
    "\"behavior\":\"Isolated\",\"invert\":false},"
    "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"[!\\\"#$%&'()*+,\\\\-./:;<=>?@\\\\[\\\\\\\\\\\\]^_`{|}~]"
    "[A-Za-z]+|[^\\r\\n\\\\p{L}\\\\p{P}\\\\p{S}]?[\\\\p{L}\\\\p{M}]+| ?[\\\\p{P}\\\\p{S}]+[\\r\\n]*|"
    "\\\\s*[\\r\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},\"behavior\":\"Isolated\",\"invert\":false},"
    "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}]}";

/* DeepSeek-V2's pre-tokenizer (tokenizer.json form; the letter class written as escapes, several
 * of its characters being ones an editor's NFC normalisation would change). */
static const char DS_LLM_PRE[] =
    "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"[\\r"
    "\\n]\"},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"Split\",\"pattern\":{\"Regex"
    "\":\"\\\\s?[A-Za-z\\u00b5\\u00c0-\\u00d6\\u00d8-\\u00f6\\u00f8-\\u01ba\\u01bc-\\u01bf\\u01c4"
    "-\\u0293\\u0295-\\u02af\\u0370-\\u0373\\u0376\\u0377\\u037b-\\u037d\\u037f\\u0386\\u0388-"
    "\\u038a\\u038c\\u038e-\\u03a1\\u03a3-\\u03f5\\u03f7-\\u0481\\u048a-\\u052f\\u0531-\\u0556"
    "\\u10a0-\\u10c5\\u13a0-\\u13f5\\u13f8-\\u13fd\\u1c90-\\u1cba\\u1cbd-\\u1cbf\\u1d00-\\u1d2b"
    "\\u1d6b-\\u1d77\\u1d79-\\u1d9a\\u1e00-\\u1f15\\u1f18-\\u1f1d\\u1f20-\\u1f45\\u1f48-\\u1f4d"
    "\\u1f50-\\u1f57\\u1f59\\u1f5b\\u1f5d\\u1f5f-\\u1f7d\\u1f80-\\u1fb4\\u1fb6-\\u1fbc\\u1fbe"
    "\\u1fc2-\\u1fc4\\u1fc6-\\u1fcc\\u1fd0-\\u1fd3\\u1fd6-\\u1fdb\\u1fe0-\\u1fec\\u1ff2-\\u1ff4"
    "\\u1ff6-\\u1ffc\\u2102\\u2107\\u210a-\\u2113\\u2115\\u2119-\\u211d\\u2124\\u2126\\u2128"
    "\\u212a-\\u212d\\u212f-\\u2134\\u2139\\u213c-\\u213f\\u2145-\\u2149\\u214e\\u2183\\u2184"
    "\\u2c00-\\u2c7b\\u2c7e-\\u2ce4\\u2ceb-\\u2cee\\u2cf2\\u2cf3\\ua640-\\ua66d\\ua680-\\ua69b"
    "\\ua722-\\ua76f\\ua771-\\ua787\\ua78b-\\ua78e\\uab70-\\uabbf\\ufb00-\\ufb06\\ufb13-\\ufb17"
    "\\uff21-\\uff3a\\uff41-\\uff5a\\ud801\\udc00-\\ud801\\udc4f\\ud801\\udcb0-\\ud801\\udcd3"
    "\\ud801\\udcd8-\\ud801\\udcfb\\ud803\\udc80-\\ud803\\udcb2\\ud803\\udcc0-\\ud803\\udcf2"
    "\\ud806\\udca0-\\ud806\\udcdf\\ud83a\\udd00-\\ud83a\\udd43]+\"},\"behavior\":\"Isolated\",\""
    "invert\":false},{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\s?[!-/:-~\\uff01-\\uff0f"
    "\\uff1a-\\uff5e\\u2018-\\u201f\\u3000-\\u3002]+\"},\"behavior\":\"Isolated\",\"invert\":fals"
    "e},{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\s+$\"},\"behavior\":\"Isolated\",\"inver"
    "t\":false},{\"type\":\"Split\",\"pattern\":{\"Regex\":\"[\\u4e00-\\u9fa5\\u0800-\\u4e00"
    "\\uac00-\\ud7ff]+\"},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"Split\",\"patte"
    "rn\":{\"Regex\":\"\\\\p{N}+\"},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteL"
    "evel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}]}"
    ;

static json_t *str_value(const numla_gguf_str *s)
{
    return json_stringn(s->s, (size_t)s->len);
}

/* GPT-2's byte-level alphabet backwards: the byte a code point stands for, -1 when none. Bytes
 * 33-126, 161-172 and 174-255 are their own code points; the other 68 (0-32, 127-160, 173) are
 * U+0100 + their rank among those. */
static int byte_of_char(uint32_t cp)
{
    if (cp < 256)
        return (cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || cp >= 174 ? (int)cp : -1;
    const uint32_t k = cp - 256;
    return k < 33 ? (int)k : k < 67 ? (int)(127 + k - 33) : k == 67 ? 173 : -1;
}

/* A byte-level token string back to its bytes (out: at least len bytes); -1 when a character is
 * not of the alphabet. */
static long bytes_of_token(const char *s, size_t len, uint8_t *out)
{
    long n = 0;
    for (size_t i = 0; i < len;) {
        const uint8_t c = (uint8_t)s[i];
        uint32_t cp;
        if (c < 0x80) {
            cp = c;
            i += 1;
        } else if ((c & 0xe0) == 0xc0 && i + 1 < len) {
            cp = (uint32_t)(c & 0x1f) << 6 | ((uint8_t)s[i + 1] & 0x3f);
            i += 2;
        } else {
            return -1; /* the alphabet stops at U+0143 */
        }
        const int b = byte_of_char(cp);
        if (b < 0)
            return -1;
        out[n++] = (uint8_t)b;
    }
    return n;
}

static void base64_put(numla_strbuf *sb, const uint8_t *p, size_t n)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < n; i += 3) {
        const uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                           (i + 2 < n ? p[i + 2] : 0);
        const char q[4] = {a[v >> 18], a[(v >> 12) & 63], i + 1 < n ? a[(v >> 6) & 63] : '=',
                           i + 2 < n ? a[v & 63] : '='};
        numla_strbuf_append(sb, q, 4);
    }
}

/* kimi-k2: the ranks as tiktoken.model text (tok) and the specials in cfg's
 * added_tokens_decoder (see the top of the file). */
static numla_status kimi_docs(const char *path, const numla_gguf_value *toks, const int32_t *ty,
                              json_t *cfg, char **tok)
{
    const numla_gguf_str *ts = toks->v.arr.items;
    const uint64_t count = toks->v.arr.count;
    if (!ty)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: tokenizer.ggml.pre kimi-k2 needs the key "
                   "tokenizer.ggml.token_type (which ids are ranks and which special)", path);
    uint64_t n = 0;
    while (n < count && ty[n] == 1)
        n++;
    numla_strbuf sb = {0};
    json_t *dec = json_object();
    uint8_t *buf = NULL;
    size_t cap = 0;
    numla_status st = NUMLA_STATUS_OK;
    for (uint64_t i = 0; i < count && st == NUMLA_STATUS_OK; i++) {
        if (i < n) {
            if ((size_t)ts[i].len > cap) {
                cap = (size_t)ts[i].len * 2;
                uint8_t *nb = realloc(buf, cap);
                if (!nb) {
                    numla_error_set(NUMLA_STATUS_NO_MEMORY, __FILE__, __LINE__, __func__,
                                    "%s: no memory for the vocabulary", path);
                    st = NUMLA_STATUS_NO_MEMORY;
                    break;
                }
                buf = nb;
            }
            const long bl = bytes_of_token(ts[i].s, (size_t)ts[i].len, buf);
            if (bl <= 0) {
                numla_error_set(NUMLA_STATUS_FORMAT, __FILE__, __LINE__, __func__,
                                "%s: tokenizer.ggml.tokens[%llu] \"%.*s\" is not a byte-level "
                                "string (a kimi-k2 rank)", path, (unsigned long long)i,
                                (int)(ts[i].len > 64 ? 64 : ts[i].len), ts[i].s);
                st = NUMLA_STATUS_FORMAT;
                break;
            }
            base64_put(&sb, buf, (size_t)bl);
            char num[32];
            const int nl = snprintf(num, sizeof num, " %llu\n", (unsigned long long)i);
            numla_strbuf_append(&sb, num, (size_t)nl);
        } else if (ty[i] == 3 || ty[i] == 4) {
            if (i >= n + 256) {
                numla_error_set(NUMLA_STATUS_UNSUPPORTED, __FILE__, __LINE__, __func__,
                                "%s: tokenizer.ggml.tokens[%llu] \"%.*s\" is a special token past "
                                "the 256 ids after the %llu ranks (kimi-k2 keeps them there)",
                                path, (unsigned long long)i, (int)(ts[i].len > 64 ? 64 : ts[i].len),
                                ts[i].s, (unsigned long long)n);
                st = NUMLA_STATUS_UNSUPPORTED;
                break;
            }
            char key[24];
            snprintf(key, sizeof key, "%llu", (unsigned long long)i);
            json_object_set_new(dec, key, json_pack("{s:o,s:b}", "content", str_value(&ts[i]),
                                                    "special", ty[i] == 3));
        } else if (ty[i] != 5) {
            numla_error_set(NUMLA_STATUS_FORMAT, __FILE__, __LINE__, __func__,
                            "%s: tokenizer.ggml.token_type[%llu] = %d after the %llu ranks: a "
                            "kimi-k2 vocabulary has its ranks (type 1) first, then special (3, 4) "
                            "or unused (5) ids", path, (unsigned long long)i, (int)ty[i],
                            (unsigned long long)n);
            st = NUMLA_STATUS_FORMAT;
        }
    }
    free(buf);
    json_object_set_new(cfg, "added_tokens_decoder", dec);
    if (st == NUMLA_STATUS_OK && (sb.oom || !sb.len)) {
        numla_error_set(sb.oom ? NUMLA_STATUS_NO_MEMORY : NUMLA_STATUS_FORMAT, __FILE__,
                        __LINE__, __func__, "%s: %s", path,
                        sb.oom ? "no memory for the vocabulary" : "kimi-k2 vocabulary without ranks");
        st = sb.oom ? NUMLA_STATUS_NO_MEMORY : NUMLA_STATUS_FORMAT;
    }
    if (st != NUMLA_STATUS_OK) {
        numla_strbuf_free(&sb);
        return st;
    }
    *tok = numla_strbuf_take(&sb);
    return NUMLA_STATUS_OK;
}

/* The two documents from g's tokenizer keys (malloc'd texts); config is always made. *tiktoken:
 * tok is tiktoken.model text (kimi-k2), else tokenizer.json. */
static numla_status gguf_docs(const numla_gguf *g, char **tok_json, char **cfg_json, int *tiktoken)
{
    const char *path = numla_gguf_path(g), *model = NULL, *pre = NULL;
    const numla_gguf_value *toks = NULL, *merges = NULL;
    *tok_json = *cfg_json = NULL;
    NUMLA_CHECK(numla_gguf_get_str(g, "tokenizer.ggml.model", &model));
    if (strcmp(model, "gpt2"))
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "%s: key tokenizer.ggml.model = \"%s\": numla reads "
                   "only gpt2 (byte-level BPE) tokenizers", path, model);
    NUMLA_CHECK(numla_gguf_get_str(g, "tokenizer.ggml.pre", &pre));
    const char *pre_json = !strcmp(pre, "deepseek-v3") ? DS_V3_PRE : !strcmp(pre, "deepseek-llm") ? DS_LLM_PRE : NULL;
    *tiktoken = !strcmp(pre, "kimi-k2");
    if (!pre_json && !*tiktoken)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "%s: key tokenizer.ggml.pre = \"%s\": numla knows "
                   "the pre-tokenizers deepseek-v3, deepseek-llm and kimi-k2 (use a model "
                   "directory's tokenizer.json, or prompt_tokens)", path, pre);
    NUMLA_CHECK(numla_gguf_get_array(g, "tokenizer.ggml.tokens", NUMLA_GGUF_STRING, &toks));
    if (!*tiktoken)
        NUMLA_CHECK(numla_gguf_get_array(g, "tokenizer.ggml.merges", NUMLA_GGUF_STRING, &merges));
    const numla_gguf_value *types = numla_gguf_find(g, "tokenizer.ggml.token_type");
    if (types && (types->type != NUMLA_GGUF_ARRAY || types->v.arr.type != NUMLA_GGUF_INT32 ||
                  types->v.arr.count != toks->v.arr.count))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: key tokenizer.ggml.token_type is not an int32 array "
                   "of one entry per token (%llu)", path,
                   (unsigned long long)toks->v.arr.count);
    json_error_t err;
    json_t *cfg = json_object();
    const numla_gguf_str *ts = toks->v.arr.items;
    const int32_t *ty = types ? types->v.arr.items : NULL;
    if (*tiktoken) {
        numla_status st = kimi_docs(path, toks, ty, cfg, tok_json);
        if (st != NUMLA_STATUS_OK) {
            json_decref(cfg);
            return st;
        }
    } else {
        json_t *root = json_object(), *m = json_object(), *vocab = json_object(), *ml = json_array();
        json_t *added = json_array();
        const numla_gguf_str *ms = merges->v.arr.items;
        for (uint64_t i = 0; i < toks->v.arr.count; i++) {
            json_object_setn_new_nocheck(vocab, ts[i].s, (size_t)ts[i].len, json_integer((json_int_t)i));
            if (ty && (ty[i] == 3 || ty[i] == 4))
                json_array_append_new(
                    added, json_pack("{s:I,s:o,s:b,s:b,s:b,s:b,s:b}", "id", (json_int_t)i, "content",
                                     str_value(&ts[i]), "single_word", 0, "lstrip", 0, "rstrip", 0,
                                     "normalized", 0, "special", ty[i] == 3));
        }
        for (uint64_t i = 0; i < merges->v.arr.count; i++)
            json_array_append_new(ml, str_value(&ms[i]));
        json_object_set_new(m, "type", json_string("BPE"));
        json_object_set_new(m, "vocab", vocab);
        json_object_set_new(m, "merges", ml);
        json_object_set_new(root, "model", m);
        json_object_set_new(root, "added_tokens", added);
        json_object_set_new(root, "normalizer", json_null());
        json_object_set_new(root, "pre_tokenizer", json_loads(pre_json, 0, &err));
        json_object_set_new(root, "post_processor", json_null());
        json_object_set_new(root, "decoder", json_pack("{s:s,s:b,s:b,s:b}", "type", "ByteLevel",
                                                       "add_prefix_space", 1, "trim_offsets", 1,
                                                       "use_regex", 1));
        *tok_json = json_dumps(root, JSON_COMPACT);
        json_decref(root);
    }
    static const char *const ids[2] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"};
    static const char *const names[2] = {"bos_token", "eos_token"};
    for (int k = 0; k < 2; k++) {
        uint32_t id;
        if (numla_gguf_find(g, ids[k]) && numla_gguf_get_u32(g, ids[k], &id) == NUMLA_STATUS_OK &&
            id < toks->v.arr.count)
            json_object_set_new(cfg, names[k], str_value(&ts[id]));
    }
    /* without the key: DeepSeek's tokenizers add BOS, Kimi's tiktoken one does not */
    int add_bos = !*tiktoken, add_eos = 0;
    numla_status st = NUMLA_STATUS_OK;
    if (numla_gguf_find(g, "tokenizer.ggml.add_bos_token"))
        st = numla_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos);
    if (st == NUMLA_STATUS_OK && numla_gguf_find(g, "tokenizer.ggml.add_eos_token"))
        st = numla_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &add_eos);
    if (st != NUMLA_STATUS_OK) {
        free(*tok_json);
        *tok_json = NULL;
        json_decref(cfg);
        return st;
    }
    json_object_set_new(cfg, "add_bos_token", json_boolean(add_bos));
    json_object_set_new(cfg, "add_eos_token", json_boolean(add_eos));
    const char *tmpl = NULL;
    if (numla_gguf_find(g, "tokenizer.chat_template") &&
        numla_gguf_get_str(g, "tokenizer.chat_template", &tmpl) == NUMLA_STATUS_OK)
        json_object_set_new(cfg, "chat_template", json_string(tmpl));
    numla_error_clear();
    *cfg_json = json_dumps(cfg, JSON_COMPACT);
    json_decref(cfg);
    if (!*tok_json || !*cfg_json) {
        free(*tok_json);
        free(*cfg_json);
        *tok_json = *cfg_json = NULL;
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "%s: no memory for the tokenizer", path);
    }
    return NUMLA_STATUS_OK;
}

/* Open the GGUF file and make its documents. */
static numla_status gguf_file_docs(const char *model, char **tok, char **cfg, int *tiktoken)
{
    numla_gguf *g = NULL;
    NUMLA_CHECK(numla_gguf_open(model, &g));
    numla_status s = gguf_docs(g, tok, cfg, tiktoken);
    numla_gguf_close(&g);
    NUMLA_CHECK(s);
    return NUMLA_STATUS_OK;
}

int numla_model_text_present(const char *model)
{
    if (!numla_model_path_is_gguf(model))
        return numla_tokenizer_present(model);
    numla_gguf *g = NULL;
    if (numla_gguf_open(model, &g) != NUMLA_STATUS_OK) {
        numla_error_clear();
        return 1;
    }
    const int has = numla_gguf_find(g, "tokenizer.ggml.model") != NULL;
    numla_gguf_close(&g);
    return has;
}

numla_status numla_model_text_tokenizer(const char *model, int64_t vocab_size,
                                        numla_tokenizer **out)
{
    if (!numla_model_path_is_gguf(model))
        return numla_tokenizer_load_for_model(model, vocab_size, out);
    *out = NULL;
    char *tok = NULL, *cfg = NULL;
    int tiktoken = 0;
    NUMLA_CHECK(gguf_file_docs(model, &tok, &cfg, &tiktoken));
    char name[1200];
    snprintf(name, sizeof name, "%s (tokenizer.ggml.tokens as tiktoken.model: line = id + 1)", model);
    numla_status s = tiktoken ? numla_tokenizer_load_tiktoken_text(tok, strlen(tok), cfg, vocab_size, name, out)
                              : numla_tokenizer_load_json_text(tok, cfg, vocab_size, model, out);
    free(tok);
    free(cfg);
    NUMLA_CHECK(s);
    return NUMLA_STATUS_OK;
}

/* config.json's model_type into out ("" when the file, the key or a string is missing): only
 * the key that picks a built-in chat format, without loading (and logging) the whole config,
 * which the engine does once. */
static void model_text_model_type(const char *model, char *out, size_t n)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", model);
    json_t *root = NULL;
    if (numla_json_file_read(path, 0, &root) != NUMLA_STATUS_OK)
        numla_error_clear(); /* the engine's config load reports it */
    const json_t *t = json_is_object(root) ? json_object_get(root, "model_type") : NULL;
    snprintf(out, n, "%s", json_is_string(t) ? json_string_value(t) : "");
    json_decref(root);
}

/* The built-in chat format a GGUF file's general.architecture names, NULL for none: a deepseek4
 * file (llama.cpp's converter) carries llama.cpp's Jinja approximation of DeepSeek-V4's Python
 * encoding, which numla renders itself. */
static const char *gguf_builtin_chat(const char *model)
{
    numla_gguf *g = NULL;
    if (numla_gguf_open(model, &g) != NUMLA_STATUS_OK) {
        numla_error_clear(); /* the reads below report it */
        return NULL;
    }
    const char *arch = NULL, *builtin = NULL;
    if (numla_gguf_find(g, "general.architecture") &&
        numla_gguf_get_str(g, "general.architecture", &arch) == NUMLA_STATUS_OK &&
        strcmp(arch, "deepseek4") == 0)
        builtin = numla_chat_template_builtin_for_model_type("deepseek_v4");
    numla_error_clear();
    numla_gguf_close(&g);
    return builtin;
}

numla_status numla_model_text_chat_template(const char *model, const char *force_name,
                                            numla_chat_template **out)
{
    if (!numla_model_path_is_gguf(model)) {
        /* DeepSeek-V3.2 and V4 ship their chat format as Python code, not as a Jinja
         * template: the model_type names the built-in renderer when none is forced */
        const char *builtin = NULL;
        char model_type[64] = "";
        if (!force_name)
            model_text_model_type(model, model_type, sizeof model_type);
        if (model_type[0])
            builtin = numla_chat_template_builtin_for_model_type(model_type);
        if (builtin)
            NUMLA_INFO("%s: model_type %s: chat format %s (built in)", model, model_type, builtin);
        return numla_chat_template_load(model, builtin ? builtin : force_name, out);
    }
    *out = NULL;
    if (!force_name && (force_name = gguf_builtin_chat(model)) != NULL)
        NUMLA_INFO("%s: general.architecture deepseek4: chat format %s (built in)", model,
                   force_name);
    char *tok = NULL, *cfg = NULL;
    int tiktoken = 0;
    numla_status s = gguf_file_docs(model, &tok, &cfg, &tiktoken);
    if (s != NUMLA_STATUS_OK && force_name) { /* the template is forced: the keys may lack */
        numla_error_clear();
        return numla_chat_template_load_json(NULL, force_name, out);
    }
    NUMLA_CHECK(s);
    s = numla_chat_template_load_json(cfg, force_name, out);
    free(tok);
    free(cfg);
    NUMLA_CHECK(s);
    return NUMLA_STATUS_OK;
}
