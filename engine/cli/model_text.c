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
 *                              tests/golden/tokenizer/bpe8k's; other values are UNSUPPORTED
 *                              naming the key and value (deepseek-llm, V2's: not yet)
 *   tokenizer.ggml.bos_token_id / eos_token_id, add_bos_token (default true) / add_eos_token
 *                              tokenizer_config.json's bos_token / eos_token / add_*_token
 *   tokenizer.chat_template    tokenizer_config.json's chat_template: recognised as one of the
 *                              built-in renderers by engine/text/chat_template.c, like a file's
 */
#include "engine/cli/model_text.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "engine/formats/gguf.h"
#include "engine/model/config.h"

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

static json_t *str_value(const numla_gguf_str *s)
{
    return json_stringn(s->s, (size_t)s->len);
}

/* The two documents from g's tokenizer keys (malloc'd texts); config is always made. */
static numla_status gguf_docs(const numla_gguf *g, char **tok_json, char **cfg_json)
{
    const char *path = numla_gguf_path(g), *model = NULL, *pre = NULL;
    const numla_gguf_value *toks = NULL, *merges = NULL;
    NUMLA_CHECK(numla_gguf_get_str(g, "tokenizer.ggml.model", &model));
    if (strcmp(model, "gpt2"))
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "%s: key tokenizer.ggml.model = \"%s\": numla reads "
                   "only gpt2 (byte-level BPE) tokenizers", path, model);
    NUMLA_CHECK(numla_gguf_get_str(g, "tokenizer.ggml.pre", &pre));
    if (strcmp(pre, "deepseek-v3"))
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "%s: key tokenizer.ggml.pre = \"%s\": numla knows "
                   "the pre-tokenizer deepseek-v3 only (use a model directory's tokenizer.json, "
                   "or prompt_tokens)", path, pre);
    NUMLA_CHECK(numla_gguf_get_array(g, "tokenizer.ggml.tokens", NUMLA_GGUF_STRING, &toks));
    NUMLA_CHECK(numla_gguf_get_array(g, "tokenizer.ggml.merges", NUMLA_GGUF_STRING, &merges));
    const numla_gguf_value *types = numla_gguf_find(g, "tokenizer.ggml.token_type");
    if (types && (types->type != NUMLA_GGUF_ARRAY || types->v.arr.type != NUMLA_GGUF_INT32 ||
                  types->v.arr.count != toks->v.arr.count))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: key tokenizer.ggml.token_type is not an int32 array "
                   "of one entry per token (%llu)", path,
                   (unsigned long long)toks->v.arr.count);
    json_error_t err;
    json_t *root = json_object(), *m = json_object(), *vocab = json_object(), *ml = json_array();
    json_t *added = json_array(), *cfg = json_object();
    const numla_gguf_str *ts = toks->v.arr.items, *ms = merges->v.arr.items;
    const int32_t *ty = types ? types->v.arr.items : NULL;
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
    json_object_set_new(root, "pre_tokenizer", json_loads(DS_V3_PRE, 0, &err));
    json_object_set_new(root, "post_processor", json_null());
    json_object_set_new(root, "decoder", json_pack("{s:s,s:b,s:b,s:b}", "type", "ByteLevel",
                                                   "add_prefix_space", 1, "trim_offsets", 1,
                                                   "use_regex", 1));
    static const char *const ids[2] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"};
    static const char *const names[2] = {"bos_token", "eos_token"};
    for (int k = 0; k < 2; k++) {
        uint32_t id;
        if (numla_gguf_find(g, ids[k]) && numla_gguf_get_u32(g, ids[k], &id) == NUMLA_STATUS_OK &&
            id < toks->v.arr.count)
            json_object_set_new(cfg, names[k], str_value(&ts[id]));
    }
    int add_bos = 1, add_eos = 0;
    if (numla_gguf_find(g, "tokenizer.ggml.add_bos_token"))
        NUMLA_CHECK(numla_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos));
    if (numla_gguf_find(g, "tokenizer.ggml.add_eos_token"))
        NUMLA_CHECK(numla_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &add_eos));
    json_object_set_new(cfg, "add_bos_token", json_boolean(add_bos));
    json_object_set_new(cfg, "add_eos_token", json_boolean(add_eos));
    const char *tmpl = NULL;
    if (numla_gguf_find(g, "tokenizer.chat_template") &&
        numla_gguf_get_str(g, "tokenizer.chat_template", &tmpl) == NUMLA_STATUS_OK)
        json_object_set_new(cfg, "chat_template", json_string(tmpl));
    numla_error_clear();
    *tok_json = json_dumps(root, JSON_COMPACT);
    *cfg_json = json_dumps(cfg, JSON_COMPACT);
    json_decref(root);
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
static numla_status gguf_file_docs(const char *model, char **tok, char **cfg)
{
    numla_gguf *g = NULL;
    NUMLA_CHECK(numla_gguf_open(model, &g));
    numla_status s = gguf_docs(g, tok, cfg);
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
    NUMLA_CHECK(gguf_file_docs(model, &tok, &cfg));
    numla_status s = numla_tokenizer_load_json_text(tok, cfg, vocab_size, model, out);
    free(tok);
    free(cfg);
    NUMLA_CHECK(s);
    return NUMLA_STATUS_OK;
}

numla_status numla_model_text_chat_template(const char *model, const char *force_name,
                                            numla_chat_template **out)
{
    if (!numla_model_path_is_gguf(model)) {
        /* DeepSeek-V3.2 ships its chat format as Python code, not as a Jinja template: its
         * model_type names the built-in renderer when none is forced */
        numla_model_config c;
        const char *builtin = NULL;
        if (!force_name && numla_model_config_load(model, &c) == NUMLA_STATUS_OK)
            builtin = numla_chat_template_builtin_for_model_type(c.model_type);
        numla_error_clear();
        if (builtin)
            NUMLA_INFO("%s: model_type %s: chat format %s (built in)", model, c.model_type,
                       builtin);
        return numla_chat_template_load(model, builtin ? builtin : force_name, out);
    }
    *out = NULL;
    char *tok = NULL, *cfg = NULL;
    numla_status s = gguf_file_docs(model, &tok, &cfg);
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
