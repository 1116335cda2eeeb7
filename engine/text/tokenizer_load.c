/* engine/text/tokenizer_load.c — reading tokenizer.json / tokenizer_config.json into the tokenizer's
 * tables (vocabulary and merge hashes, added tokens, compiled regexes, post-processor). Every
 * component it does not implement is rejected here by name, so encode never meets one. */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/json/model_json.h"
#include "engine/text/tokenizer_internal.h"

/* GPT-2's pre-tokenizer regex, used by ByteLevel with use_regex. */
static const char numla_tokenizer_gpt2_re[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

uint64_t numla_tokenizer_hash(const void *p, size_t n)
{
    const uint8_t *s = p;
    uint64_t h = 0xcbf29ce484222325ull ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    for (; i < n; i++)
        h = (h ^ s[i]) * 0x100000001b3ull;
    h ^= h >> 32;
    h *= 0xd6e8feb86659fd93ull;
    h ^= h >> 32;
    return h;
}

int32_t numla_tokenizer_vocab_find(const numla_tokenizer *t, const char *s, size_t n)
{
    uint64_t i = numla_tokenizer_hash(s, n) & t->vocab_mask;
    for (;;) {
        int32_t id = t->vocab_slot[i];
        if (id < 0)
            return -1;
        if (t->tok_len[id] == n && memcmp(t->tok[id], s, n) == 0)
            return id;
        i = (i + 1) & t->vocab_mask;
    }
}

uint64_t numla_tokenizer_pow2(uint64_t n)
{
    uint64_t c = 16;
    while (c < 2 * n)
        c <<= 1;
    return c;
}

static numla_status numla_tokenizer_merge_put(numla_tokenizer *t, int32_t a, int32_t b, int32_t rank,
                                        int32_t nid)
{
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint64_t i = numla_tokenizer_hash(&key, 8) & t->merge_mask;
    while (t->merge_key[i] != UINT64_MAX) {
        if (t->merge_key[i] == key)
            return NUMLA_STATUS_OK; /* a repeated merge keeps its first (best) rank */
        i = (i + 1) & t->merge_mask;
    }
    t->merge_key[i] = key;
    t->merge_rank[i] = rank;
    t->merge_new[i] = nid;
    return NUMLA_STATUS_OK;
}

static numla_status numla_tokenizer_regex_compile(numla_tokenizer *t, numla_tokenizer_regex *re,
                                            const char *pat, size_t len, int literal,
                                            const char *what)
{
    int err;
    PCRE2_SIZE off;
    /* PCRE2_LITERAL refuses UCP, which a literal does not need */
    uint32_t flags = PCRE2_UTF | PCRE2_NO_UTF_CHECK | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    char *uni = NULL;
    size_t uni_len = 0;
    if (!literal)
        NUMLA_CHECK(numla_tokenizer_unicode_pattern(pat, len, &uni, &uni_len));
    re->code = pcre2_compile((PCRE2_SPTR)(uni ? uni : pat), uni ? uni_len : len, flags, &err, &off,
                             NULL);
    free(uni);
    if (!re->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s regex /%.*s/ does not compile at offset %zu: %s",
                   what, (int)len, pat, (size_t)off, (const char *)msg);
    }
    re->jit = pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE) == 0;
    re->md = pcre2_match_data_create_from_pattern(re->code, NULL);
    if (!re->md)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for regex match data");
    (void)t;
    return NUMLA_STATUS_OK;
}

static const char *numla_tokenizer_type(json_t *o)
{
    const char *s = json_string_value(json_object_get(o, "type"));
    return s ? s : "(no type)";
}

static numla_status numla_tokenizer_behavior_parse(const char *s, numla_tokenizer_behavior *b)
{
    static const struct { const char *name; numla_tokenizer_behavior b; } names[] = {
        {"Removed", NUMLA_TOKENIZER_REMOVED},          {"Isolated", NUMLA_TOKENIZER_ISOLATED},
        {"MergedWithPrevious", NUMLA_TOKENIZER_MERGED_PREV}, {"MergedWithNext", NUMLA_TOKENIZER_MERGED_NEXT},
        {"Contiguous", NUMLA_TOKENIZER_CONTIGUOUS},
    };
    for (size_t i = 0; s && i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i].name) == 0) {
            *b = names[i].b;
            return NUMLA_STATUS_OK;
        }
    NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "Split behavior '%s' is not supported",
               s ? s : "(missing)");
}

static numla_status numla_tokenizer_pretok_add(numla_tokenizer *t, json_t *o)
{
    const char *type = numla_tokenizer_type(o);
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(o, "pretokenizers");
        if (!json_is_array(list))
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "pre_tokenizer Sequence without 'pretokenizers'");
        size_t i;
        json_t *e;
        json_array_foreach(list, i, e) NUMLA_CHECK(numla_tokenizer_pretok_add(t, e));
        return NUMLA_STATUS_OK;
    }
    if (t->n_pt > 0 && t->pt[t->n_pt - 1].kind == NUMLA_TOKENIZER_PT_BYTELEVEL)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                   "pre_tokenizer '%s' after ByteLevel is not supported (ByteLevel must be last)",
                   type);
    numla_tokenizer_pretok *np = realloc(t->pt, (size_t)(t->n_pt + 1) * sizeof *np);
    if (!np)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for pre-tokenizers");
    t->pt = np;
    numla_tokenizer_pretok *p = &t->pt[t->n_pt];
    memset(p, 0, sizeof *p);
    if (strcmp(type, "Split") == 0) {
        p->kind = NUMLA_TOKENIZER_PT_SPLIT;
        t->n_pt++;
        json_t *pat = json_object_get(o, "pattern");
        json_t *rx = json_object_get(pat, "Regex"), *lit = json_object_get(pat, "String");
        json_t *ps = rx ? rx : lit;
        if (!json_is_string(ps))
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "Split pre_tokenizer without a String or Regex pattern");
        NUMLA_CHECK(numla_tokenizer_regex_compile(t, &p->re, json_string_value(ps),
                                            json_string_length(ps), rx == NULL, "Split"));
        NUMLA_CHECK(numla_tokenizer_behavior_parse(
            json_string_value(json_object_get(o, "behavior")), &p->behavior));
        p->invert = json_is_true(json_object_get(o, "invert"));
    } else if (strcmp(type, "Digits") == 0) {
        p->kind = NUMLA_TOKENIZER_PT_DIGITS;
        p->individual_digits = json_is_true(json_object_get(o, "individual_digits"));
        t->n_pt++;
    } else if (strcmp(type, "ByteLevel") == 0) {
        p->kind = NUMLA_TOKENIZER_PT_BYTELEVEL;
        t->n_pt++;
        p->add_prefix_space = json_is_true(json_object_get(o, "add_prefix_space"));
        json_t *ur = json_object_get(o, "use_regex");
        p->use_regex = ur ? json_is_true(ur) : 1;
        if (p->use_regex)
            NUMLA_CHECK(numla_tokenizer_regex_compile(t, &p->re, numla_tokenizer_gpt2_re,
                                                sizeof numla_tokenizer_gpt2_re - 1, 0, "ByteLevel"));
    } else {
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "pre_tokenizer type '%s' is not supported", type);
    }
    return NUMLA_STATUS_OK;
}

static numla_status numla_tokenizer_normalizer_add(numla_tokenizer *t, json_t *o)
{
    if (json_is_null(o) || !o)
        return NUMLA_STATUS_OK;
    const char *type = numla_tokenizer_type(o);
    if (strcmp(type, "Sequence") == 0) {
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(o, "normalizers"), i, e)
            NUMLA_CHECK(numla_tokenizer_normalizer_add(t, e));
        return NUMLA_STATUS_OK;
    }
    if (strcmp(type, "NFC") == 0) {
        t->nfc = 1; /* NFC is idempotent: a Sequence of several is one */
        return NUMLA_STATUS_OK;
    }
    NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "normalizer type '%s' is not supported", type);
}

static numla_status numla_tokenizer_decoder_check(json_t *o)
{
    if (!o || json_is_null(o))
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "a tokenizer without a decoder is not supported "
                                             "(byte-level BPE needs the ByteLevel decoder)");
    const char *type = numla_tokenizer_type(o);
    if (strcmp(type, "ByteLevel") == 0)
        return NUMLA_STATUS_OK;
    if (strcmp(type, "Sequence") == 0) {
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(o, "decoders"), i, e)
            NUMLA_CHECK(numla_tokenizer_decoder_check(e));
        return NUMLA_STATUS_OK;
    }
    NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "decoder type '%s' is not supported", type);
}

static numla_status numla_tokenizer_ids_append(int32_t **v, int *n, int32_t id)
{
    int32_t *nv = realloc(*v, (size_t)(*n + 1) * sizeof *nv);
    if (!nv)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for template ids");
    nv[(*n)++] = id;
    *v = nv;
    return NUMLA_STATUS_OK;
}

static numla_status numla_tokenizer_post_add(numla_tokenizer *t, json_t *o)
{
    if (!o || json_is_null(o))
        return NUMLA_STATUS_OK;
    const char *type = numla_tokenizer_type(o);
    if (strcmp(type, "ByteLevel") == 0)
        return NUMLA_STATUS_OK; /* only trims offsets; ids are unchanged */
    if (strcmp(type, "Sequence") == 0) {
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(o, "processors"), i, e)
            NUMLA_CHECK(numla_tokenizer_post_add(t, e));
        return NUMLA_STATUS_OK;
    }
    if (strcmp(type, "TemplateProcessing") != 0)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "post_processor type '%s' is not supported", type);
    if (t->has_template)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "more than one TemplateProcessing post_processor");
    t->has_template = 1;
    json_t *specials = json_object_get(o, "special_tokens");
    int seen_a = 0;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(o, "single"), i, e) {
        json_t *st = json_object_get(e, "SpecialToken");
        if (json_object_get(e, "Sequence")) {
            if (seen_a)
                NUMLA_FAIL(NUMLA_STATUS_FORMAT, "TemplateProcessing single template has two $A");
            seen_a = 1;
        } else if (st) {
            const char *name = json_string_value(json_object_get(st, "id"));
            json_t *ids = json_object_get(json_object_get(specials, name ? name : ""), "ids");
            if (!json_is_array(ids))
                NUMLA_FAIL(NUMLA_STATUS_FORMAT, "TemplateProcessing special token '%s' has no ids",
                           name ? name : "(missing)");
            size_t k;
            json_t *idj;
            json_array_foreach(ids, k, idj) {
                if (!json_is_integer(idj) || json_integer_value(idj) < 0 ||
                    json_integer_value(idj) > INT32_MAX)
                    NUMLA_FAIL(NUMLA_STATUS_FORMAT, "TemplateProcessing special token '%s': "
                               "ids[%zu] is not a token id", name ? name : "(missing)", k);
                if (seen_a)
                    NUMLA_CHECK(numla_tokenizer_ids_append(&t->tmpl_post, &t->n_tmpl_post,
                                                     (int32_t)json_integer_value(idj)));
                else
                    NUMLA_CHECK(numla_tokenizer_ids_append(&t->tmpl_pre, &t->n_tmpl_pre,
                                                     (int32_t)json_integer_value(idj)));
            }
        } else {
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "TemplateProcessing item is neither Sequence nor "
                                            "SpecialToken");
        }
    }
    return NUMLA_STATUS_OK;
}

static int32_t numla_tokenizer_trie_new(numla_tokenizer_addset *s, uint8_t byte, int32_t sibling)
{
    if (s->n_nodes == s->cap_nodes) {
        int32_t c = s->cap_nodes ? 2 * s->cap_nodes : 64;
        numla_tokenizer_trie_node *nn = realloc(s->nodes, (size_t)c * sizeof *nn);
        if (!nn)
            return -1;
        s->nodes = nn;
        s->cap_nodes = c;
    }
    s->nodes[s->n_nodes] = (numla_tokenizer_trie_node){-1, sibling, -1, byte};
    return s->n_nodes++;
}

numla_status numla_tokenizer_addset_build(numla_tokenizer *t, numla_tokenizer_addset *s, int normalized)
{
    memset(s->first, 0xff, sizeof s->first);
    for (int i = 0; i < t->n_added; i++) {
        const numla_tokenizer_added *a = &t->added[i];
        if (a->normalized != normalized || a->len == 0)
            continue;
        s->n++;
        const uint8_t *c = (const uint8_t *)a->content;
        int32_t node = s->first[c[0]];
        if (node < 0) {
            node = numla_tokenizer_trie_new(s, c[0], -1);
            if (node < 0)
                NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for the added-token trie");
            s->first[c[0]] = node;
        }
        for (uint32_t k = 1; k < a->len; k++) {
            int32_t ch = s->nodes[node].child;
            while (ch >= 0 && s->nodes[ch].byte != c[k])
                ch = s->nodes[ch].sibling;
            if (ch < 0) {
                ch = numla_tokenizer_trie_new(s, c[k], s->nodes[node].child);
                if (ch < 0)
                    NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for the added-token trie");
                s->nodes[node].child = ch;
            }
            node = ch;
        }
        if (s->nodes[node].token < 0) /* the same content twice: the first one wins */
            s->nodes[node].token = i;
    }
    return NUMLA_STATUS_OK;
}

/* The id of a token named in tokenizer_config.json (a string or an AddedToken object). */
static int32_t numla_tokenizer_config_token(numla_tokenizer *t, json_t *v)
{
    if (json_is_object(v))
        v = json_object_get(v, "content");
    const char *s = json_string_value(v);
    if (!s)
        return -1;
    return numla_tokenizer_token_id(t, s);
}

static numla_status numla_tokenizer_set_token(numla_tokenizer *t, int32_t id, const char *s, size_t n)
{
    if (id < 0 || id >= t->n_ids)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "token id %d out of range", (int)id);
    free(t->tok[id]);
    t->tok[id] = strndup(s, n);
    if (!t->tok[id])
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for token strings");
    t->tok_len[id] = (uint32_t)n;
    return NUMLA_STATUS_OK;
}

/* The decode table's arrays, sized for every id's token bytes (a decoded token is never longer
 * than its token); filled by the caller. */
numla_status numla_tokenizer_decode_alloc(numla_tokenizer *t)
{
    if (t->n_ids < 1 || t->n_ids > NUMLA_TOKENIZER_MAX_IDS)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "tokenizer has %lld ids", (long long)t->n_ids);
    size_t total = 0;
    for (int64_t i = 0; i < t->n_ids; i++)
        total += t->tok_len[i];
    t->dec_pool = malloc(total + 1);
    t->dec_off = calloc((size_t)t->n_ids, sizeof *t->dec_off);
    t->dec_len = calloc((size_t)t->n_ids, sizeof *t->dec_len);
    if (!t->dec_pool || !t->dec_off || !t->dec_len)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for the decode table");
    return NUMLA_STATUS_OK;
}

/* Decoded bytes of every id, as the ByteLevel decoder makes them: a token made only of
 * byte-level chars becomes those bytes, any other token its own UTF-8. */
static numla_status numla_tokenizer_build_decode(numla_tokenizer *t)
{
    NUMLA_CHECK(numla_tokenizer_decode_alloc(t));
    size_t o = 0;
    for (int64_t i = 0; i < t->n_ids; i++) {
        t->dec_off[i] = o;
        const uint8_t *s = (const uint8_t *)t->tok[i];
        uint32_t n = t->tok_len[i], j = 0;
        size_t start = o;
        int ok = 1;
        while (j < n && ok) {
            uint32_t cp;
            uint8_t c = s[j];
            int l = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
            if (j + (uint32_t)l > n)
                break;
            cp = l == 1 ? c : l == 2 ? (c & 0x1fu) : l == 3 ? (c & 0x0fu) : (c & 0x07u);
            for (int k = 1; k < l; k++)
                cp = cp << 6 | (s[j + (uint32_t)k] & 0x3fu);
            int b = numla_tokenizer_cp_byte(cp);
            if (b < 0)
                ok = 0;
            else
                t->dec_pool[o++] = (uint8_t)b;
            j += (uint32_t)l;
        }
        if (!ok || j != n) {
            o = start;
            memcpy(t->dec_pool + o, s, n);
            o += n;
        }
        t->dec_len[i] = (uint32_t)(o - start);
    }
    return NUMLA_STATUS_OK;
}

/* Ids index dense tables, so each must lie below the model's vocab_size when the caller gave
 * it, else below NUMLA_TOKENIZER_MAX_IDS: one huge id would otherwise cost gigabytes. */
static numla_status numla_tokenizer_id_check(const numla_tokenizer *t, json_int_t id,
                                             const char *what, const char *name)
{
    if (id < t->id_limit)
        return NUMLA_STATUS_OK;
    if (t->id_limit_from_model)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s '%s' has id %lld, outside the model's vocab_size %lld",
                   what, name, (long long)id, (long long)t->id_limit);
    NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s '%s' has id %lld, above the limit of %lld ids", what, name,
               (long long)id, (long long)t->id_limit);
}

static numla_status numla_tokenizer_load_model(numla_tokenizer *t, json_t *model)
{
    const char *type = json_string_value(json_object_get(model, "type"));
    if (type && strcmp(type, "BPE") != 0)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "tokenizer model type '%s' is not supported", type);
    json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    if (!json_is_object(vocab) || !json_is_array(merges))
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "tokenizer model without BPE vocab and merges "
                                             "(type '%s') is not supported",
                   type ? type : "(none)");
    json_t *dr = json_object_get(model, "dropout");
    if (json_is_number(dr) && json_number_value(dr) > 0)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "BPE dropout is not supported");
    const char *fields[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const char *v = json_string_value(json_object_get(model, fields[i]));
        if (v && *v)
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "BPE %s '%s' is not supported", fields[i], v);
    }
    if (json_is_true(json_object_get(model, "byte_fallback")))
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "BPE byte_fallback is not supported");
    t->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));

    const char *key;
    json_t *v;
    int64_t max_id = -1;
    json_object_foreach(vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "vocab entry '%s' has no valid id", key);
        NUMLA_CHECK(numla_tokenizer_id_check(t, json_integer_value(v), "vocab entry", key));
        if (json_integer_value(v) > max_id)
            max_id = json_integer_value(v);
    }
    t->n_ids = max_id + 1;
    return NUMLA_STATUS_OK;
}

/* The largest id of the model vocabulary and the added tokens, each checked against the limit. */
static numla_status numla_tokenizer_count_ids(numla_tokenizer *t, json_t *model, json_t *added)
{
    NUMLA_CHECK(numla_tokenizer_load_model(t, model));
    size_t i;
    json_t *e;
    json_array_foreach(added, i, e) {
        json_int_t id = json_integer_value(json_object_get(e, "id"));
        json_t *content = json_object_get(e, "content");
        if (!json_is_string(content) || !json_is_integer(json_object_get(e, "id")) || id < 0)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "added token %zu has no content or id", i);
        NUMLA_CHECK(numla_tokenizer_id_check(t, id, "added token", json_string_value(content)));
        if (id + 1 > t->n_ids)
            t->n_ids = id + 1;
    }
    return NUMLA_STATUS_OK;
}

/* The id tables and the vocabulary hash, the byte-level ids and unk. */
static numla_status numla_tokenizer_load_vocab(numla_tokenizer *t, json_t *model, json_t *vocab)
{
    t->tok = calloc((size_t)t->n_ids + 1, sizeof *t->tok);
    t->tok_len = calloc((size_t)t->n_ids + 1, sizeof *t->tok_len);
    t->special = calloc((size_t)t->n_ids + 1, 1);
    t->vocab_mask = numla_tokenizer_pow2(json_object_size(vocab)) - 1;
    t->vocab_slot = malloc((t->vocab_mask + 1) * sizeof *t->vocab_slot);
    if (!t->tok || !t->tok_len || !t->special || !t->vocab_slot)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for a vocabulary of %lld",
                   (long long)t->n_ids);
    memset(t->vocab_slot, 0xff, (t->vocab_mask + 1) * sizeof *t->vocab_slot);
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        int32_t id = (int32_t)json_integer_value(v);
        size_t n = strlen(key);
        if (t->tok[id])
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "vocab id %d appears twice ('%s')", (int)id, key);
        NUMLA_CHECK(numla_tokenizer_set_token(t, id, key, n));
        uint64_t h = numla_tokenizer_hash(key, n) & t->vocab_mask;
        while (t->vocab_slot[h] >= 0)
            h = (h + 1) & t->vocab_mask;
        t->vocab_slot[h] = id;
    }
    for (int b = 0; b < 256; b++) {
        uint32_t cp = numla_tokenizer_byte_cp(b);
        char u[3];
        size_t n;
        if (cp < 0x80) {
            u[0] = (char)cp;
            n = 1;
        } else {
            u[0] = (char)(0xc0 | (cp >> 6));
            u[1] = (char)(0x80 | (cp & 0x3f));
            n = 2;
        }
        t->byte_id[b] = numla_tokenizer_vocab_find(t, u, n);
    }
    const char *unk = json_string_value(json_object_get(model, "unk_token"));
    t->unk_id = unk ? numla_tokenizer_vocab_find(t, unk, strlen(unk)) : -1;
    return NUMLA_STATUS_OK;
}

/* The merges hash: (left, right) -> rank, merged id. */
static numla_status numla_tokenizer_load_merges(numla_tokenizer *t, json_t *merges)
{
    size_t i;
    json_t *e;
    size_t n_merges = json_array_size(merges);
    t->merge_mask = numla_tokenizer_pow2(n_merges) - 1;
    t->merge_key = malloc((t->merge_mask + 1) * sizeof *t->merge_key);
    t->merge_rank = malloc((t->merge_mask + 1) * sizeof *t->merge_rank);
    t->merge_new = malloc((t->merge_mask + 1) * sizeof *t->merge_new);
    if (!t->merge_key || !t->merge_rank || !t->merge_new)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for %zu merges", n_merges);
    memset(t->merge_key, 0xff, (t->merge_mask + 1) * sizeof *t->merge_key);
    char *cat = NULL;
    size_t cat_cap = 0;
    json_array_foreach(merges, i, e) {
        const char *a, *b;
        size_t na, nb;
        if (json_is_string(e)) {
            a = json_string_value(e);
            const char *sp = strchr(a, ' ');
            if (!sp || strchr(sp + 1, ' ')) {
                free(cat);
                NUMLA_FAIL(NUMLA_STATUS_FORMAT, "merge %zu '%s' is not two tokens", i, a);
            }
            na = (size_t)(sp - a);
            b = sp + 1;
            nb = strlen(b);
        } else if (json_is_array(e) && json_array_size(e) == 2 &&
                   json_is_string(json_array_get(e, 0)) && json_is_string(json_array_get(e, 1))) {
            a = json_string_value(json_array_get(e, 0));
            b = json_string_value(json_array_get(e, 1));
            na = json_string_length(json_array_get(e, 0));
            nb = json_string_length(json_array_get(e, 1));
        } else {
            free(cat);
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "merge %zu is neither \"a b\" nor [a, b]", i);
        }
        if (na + nb > cat_cap) {
            cat_cap = 2 * (na + nb);
            char *nc = realloc(cat, cat_cap);
            if (!nc) {
                free(cat);
                NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for merges");
            }
            cat = nc;
        }
        memcpy(cat, a, na);
        memcpy(cat + na, b, nb);
        int32_t ia = numla_tokenizer_vocab_find(t, a, na), ib = numla_tokenizer_vocab_find(t, b, nb);
        int32_t in = numla_tokenizer_vocab_find(t, cat, na + nb);
        if (ia < 0 || ib < 0 || in < 0) {
            free(cat);
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "merge %zu ('%.*s' '%.*s') uses a token missing from "
                                            "the vocab", i, (int)na, a, (int)nb, b);
        }
        NUMLA_CHECK(numla_tokenizer_merge_put(t, ia, ib, (int32_t)i, in));
    }
    free(cat);
    return NUMLA_STATUS_OK;
}

/* Added tokens: their table entries and the two tries (raw and normalized text). */
static numla_status numla_tokenizer_load_added(numla_tokenizer *t, json_t *added)
{
    size_t i;
    json_t *e;
    t->n_added = (int)json_array_size(added);
    t->added = calloc((size_t)t->n_added + 1, sizeof *t->added);
    if (!t->added)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for added tokens");
    json_array_foreach(added, i, e) {
        numla_tokenizer_added *a = &t->added[i];
        json_t *c = json_object_get(e, "content");
        a->id = (int32_t)json_integer_value(json_object_get(e, "id"));
        a->len = (uint32_t)json_string_length(c);
        a->content = strndup(json_string_value(c), a->len);
        if (!a->content)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for added tokens");
        a->special = json_is_true(json_object_get(e, "special"));
        a->lstrip = json_is_true(json_object_get(e, "lstrip"));
        a->rstrip = json_is_true(json_object_get(e, "rstrip"));
        a->single_word = json_is_true(json_object_get(e, "single_word"));
        json_t *nz = json_object_get(e, "normalized");
        a->normalized = nz ? json_is_true(nz) : !a->special;
        NUMLA_CHECK(numla_tokenizer_set_token(t, a->id, a->content, a->len));
        t->special[a->id] = a->special;
    }
    NUMLA_CHECK(numla_tokenizer_addset_build(t, &t->raw, 0));
    NUMLA_CHECK(numla_tokenizer_addset_build(t, &t->norm, 1));
    return NUMLA_STATUS_OK;
}

/* Normalizer, pre-tokenizers, post-processor and decoder; the decode table. */
static numla_status numla_tokenizer_load_pipeline(numla_tokenizer *t, json_t *root)
{
    NUMLA_CHECK(numla_tokenizer_normalizer_add(t, json_object_get(root, "normalizer")));
    json_t *pre = json_object_get(root, "pre_tokenizer");
    if (!pre || json_is_null(pre))
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "pre_tokenizer null is not supported (byte-level "
                                             "BPE needs a ByteLevel pre-tokenizer)");
    NUMLA_CHECK(numla_tokenizer_pretok_add(t, pre));
    if (t->n_pt == 0 || t->pt[t->n_pt - 1].kind != NUMLA_TOKENIZER_PT_BYTELEVEL)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "pre_tokenizer without a final ByteLevel is not "
                                             "supported (only byte-level BPE is)");
    NUMLA_CHECK(numla_tokenizer_post_add(t, json_object_get(root, "post_processor")));
    NUMLA_CHECK(numla_tokenizer_decoder_check(json_object_get(root, "decoder")));
    NUMLA_CHECK(numla_tokenizer_build_decode(t));
    return NUMLA_STATUS_OK;
}

/* BOS / EOS and the BOS-EOS rules from tokenizer_config.json; template ids in range. */
numla_status numla_tokenizer_load_specials(numla_tokenizer *t, json_t *config)
{
    t->bos = t->eos = -1;
    if (config) {
        t->add_bos = json_is_true(json_object_get(config, "add_bos_token"));
        t->add_eos = json_is_true(json_object_get(config, "add_eos_token"));
        t->bos = numla_tokenizer_config_token(t, json_object_get(config, "bos_token"));
        t->eos = numla_tokenizer_config_token(t, json_object_get(config, "eos_token"));
        if (t->add_bos && t->bos < 0 && !t->has_template)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "tokenizer_config.json: add_bos_token without a "
                                            "bos_token in the vocabulary");
        if (t->add_eos && t->eos < 0 && !t->has_template)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "tokenizer_config.json: add_eos_token without an "
                                            "eos_token in the vocabulary");
    }
    if (t->bos < 0 && t->n_tmpl_pre > 0)
        t->bos = t->tmpl_pre[0];
    for (int k = 0; k < t->n_tmpl_pre; k++)
        if (t->tmpl_pre[k] < 0 || t->tmpl_pre[k] >= t->n_ids)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "TemplateProcessing id %d out of range",
                       (int)t->tmpl_pre[k]);
    for (int k = 0; k < t->n_tmpl_post; k++)
        if (t->tmpl_post[k] < 0 || t->tmpl_post[k] >= t->n_ids)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "TemplateProcessing id %d out of range",
                       (int)t->tmpl_post[k]);
    return NUMLA_STATUS_OK;
}

/* NFC can compose up to 3 bytes of input into 1 (a Hangul jamo triple, 9 bytes, into one 3-byte
 * syllable); 4 leaves a margin. */
enum { NUMLA_TOKENIZER_NFC_SHRINK = 4 };

int64_t numla_tokenizer_max_bytes_per_token(const numla_tokenizer *t)
{
    for (int i = 0; i < t->n_pt; i++)
        if (t->pt[i].kind == NUMLA_TOKENIZER_PT_SPLIT && t->pt[i].behavior == NUMLA_TOKENIZER_REMOVED)
            return 0;
    int64_t most = 1;
    for (int64_t i = 0; i < t->n_ids; i++)
        if ((int64_t)t->dec_len[i] > most)
            most = (int64_t)t->dec_len[i];
    for (int i = 0; i < t->n_added; i++)
        if ((int64_t)t->added[i].len > most)
            most = (int64_t)t->added[i].len;
    return t->nfc ? most * NUMLA_TOKENIZER_NFC_SHRINK : most;
}

int64_t numla_tokenizer_min_tokens(const numla_tokenizer *t, const char *text, size_t len)
{
    const int64_t per = numla_tokenizer_max_bytes_per_token(t);
    if (per <= 0)
        return 0;
    int strips = 0;
    for (int i = 0; i < t->n_added; i++)
        strips |= t->added[i].lstrip || t->added[i].rstrip;
    uint64_t counted = len;
    if (strips) { /* bytes 0x21..0x7e are never whitespace, so never stripped */
        counted = 0;
        for (size_t i = 0; i < len; i++)
            counted += (unsigned char)text[i] > 0x20 && (unsigned char)text[i] < 0x7f;
    }
    return (int64_t)((counted + (uint64_t)per - 1) / (uint64_t)per);
}

/* Encode state: the regex match context and the word cache. */
numla_status numla_tokenizer_prepare_encode(numla_tokenizer *t)
{
    t->mctx = pcre2_match_context_create(NULL);
    t->jit_stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, NULL);
    if (!t->mctx || !t->jit_stack)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for the regex match context");
    pcre2_jit_stack_assign(t->mctx, NULL, t->jit_stack);
    t->cache_mask = (1u << 16) - 1;
    t->cache = calloc((size_t)t->cache_mask + 1, sizeof *t->cache);
    if (!t->cache)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for the word cache");
    return NUMLA_STATUS_OK;
}

static numla_status numla_tokenizer_load_json(numla_tokenizer *t, json_t *root, json_t *config)
{
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "tokenizer.json has no model");
    json_t *added = json_object_get(root, "added_tokens");
    NUMLA_CHECK(numla_tokenizer_count_ids(t, model, added));
    NUMLA_CHECK(numla_tokenizer_load_vocab(t, model, json_object_get(model, "vocab")));
    NUMLA_CHECK(numla_tokenizer_load_merges(t, json_object_get(model, "merges")));
    NUMLA_CHECK(numla_tokenizer_load_added(t, added));
    NUMLA_CHECK(numla_tokenizer_load_pipeline(t, root));
    NUMLA_CHECK(numla_tokenizer_load_specials(t, config));
    NUMLA_CHECK(numla_tokenizer_prepare_encode(t));
    return NUMLA_STATUS_OK;
}

static numla_status numla_tokenizer_read_json(const char *path, int optional, json_t **out)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (optional)
            return NUMLA_STATUS_OK;
        NUMLA_FAIL(NUMLA_STATUS_IO, "cannot open %s", path);
    }
    fclose(f);
    NUMLA_CHECK(numla_json_file_read(path, JSON_ALLOW_NUL, out));
    return NUMLA_STATUS_OK;
}

/* Read a whole file (NUL-terminated); *buf NULL when it does not exist. */
static numla_status numla_tokenizer_read_file(const char *path, char **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return NUMLA_STATUS_OK;
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap + 1);
    while (b) {
        size_t r = fread(b + n, 1, cap - n, f);
        n += r;
        if (n < cap)
            break;
        char *nb = cap < ((size_t)1 << 32) ? realloc(b, 2 * cap + 1) : NULL;
        if (!nb) {
            free(b);
            b = NULL;
            break;
        }
        b = nb;
        cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (!b)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory to read %s", path);
    if (err) {
        free(b);
        NUMLA_FAIL(NUMLA_STATUS_IO, "read error on %s", path);
    }
    b[n] = 0;
    *buf = b;
    *len = n;
    return NUMLA_STATUS_OK;
}

static numla_tokenizer *numla_tokenizer_new(int64_t vocab_size)
{
    numla_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->id_limit = vocab_size > 0 && vocab_size < NUMLA_TOKENIZER_MAX_IDS ? vocab_size
                                                                         : NUMLA_TOKENIZER_MAX_IDS;
    t->id_limit_from_model = vocab_size > 0 && vocab_size <= NUMLA_TOKENIZER_MAX_IDS;
    return t;
}

numla_status numla_tokenizer_load_tiktoken_text(const char *model_text, size_t len,
                                                const char *config_json, int64_t vocab_size,
                                                const char *name, numla_tokenizer **out)
{
    *out = NULL;
    json_t *config = NULL;
    if (config_json) {
        NUMLA_CHECK(numla_json_text_parse(config_json, strlen(config_json), JSON_ALLOW_NUL,
                                          "tokenizer_config.json", &config));
        if (!json_is_object(config)) {
            json_decref(config);
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "tokenizer_config.json is not a JSON object");
        }
    }
    numla_tokenizer *t = numla_tokenizer_new(vocab_size);
    if (!t) {
        json_decref(config);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for a tokenizer");
    }
    numla_status s = numla_tokenizer_tiktoken_fill(t, model_text, len, name ? name : "tiktoken.model",
                                                   config);
    json_decref(config);
    if (s != NUMLA_STATUS_OK) {
        numla_tokenizer_destroy(&t);
        NUMLA_CHECK(s);
    }
    *out = t;
    return NUMLA_STATUS_OK;
}

/* A model directory without tokenizer.json but with tiktoken.model (Kimi). */
static numla_status numla_tokenizer_load_tiktoken_dir(const char *model_dir, int64_t vocab_size,
                                                      numla_tokenizer **out, int *found)
{
    char *path = NULL, *cpath = NULL, *text = NULL, *ctext = NULL;
    size_t len = 0, clen = 0;
    *found = 0;
    if (asprintf(&path, "%s/tiktoken.model", model_dir) < 0) {
        path = NULL;
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for a path");
    }
    numla_status s = numla_tokenizer_read_file(path, &text, &len);
    if (s == NUMLA_STATUS_OK && text) {
        *found = 1;
        if (asprintf(&cpath, "%s/tokenizer_config.json", model_dir) < 0) {
            cpath = NULL;
            numla_error_set(NUMLA_STATUS_NO_MEMORY, __FILE__, __LINE__, __func__, "no memory");
            s = NUMLA_STATUS_NO_MEMORY;
        } else {
            s = numla_tokenizer_read_file(cpath, &ctext, &clen);
        }
        if (s == NUMLA_STATUS_OK)
            s = numla_tokenizer_load_tiktoken_text(text, len, ctext, vocab_size, path, out);
    }
    free(path);
    free(cpath);
    free(text);
    free(ctext);
    NUMLA_CHECK(s);
    return NUMLA_STATUS_OK;
}

int numla_tokenizer_present(const char *model_dir)
{
    char a[4200], b[4200];
    snprintf(a, sizeof a, "%s/tokenizer.json", model_dir);
    snprintf(b, sizeof b, "%s/tiktoken.model", model_dir);
    return access(a, F_OK) == 0 || access(b, F_OK) == 0;
}

numla_status numla_tokenizer_load(const char *model_dir, numla_tokenizer **out)
{
    return numla_tokenizer_load_for_model(model_dir, 0, out);
}

numla_status numla_tokenizer_load_for_model(const char *model_dir, int64_t vocab_size,
                                            numla_tokenizer **out)
{
    *out = NULL;
    char *path = NULL, *cpath = NULL;
    {
        char probe[4200];
        snprintf(probe, sizeof probe, "%s/tokenizer.json", model_dir);
        FILE *pf = fopen(probe, "rb");
        if (pf) {
            fclose(pf);
        } else {
            int found = 0;
            NUMLA_CHECK(numla_tokenizer_load_tiktoken_dir(model_dir, vocab_size, out, &found));
            if (found)
                return NUMLA_STATUS_OK;
        }
    }
    if (asprintf(&path, "%s/tokenizer.json", model_dir) < 0 ||
        asprintf(&cpath, "%s/tokenizer_config.json", model_dir) < 0) {
        free(path);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for a path");
    }
    json_t *root = NULL, *config = NULL;
    numla_tokenizer *t = calloc(1, sizeof *t);
    numla_status s = t ? NUMLA_STATUS_OK : NUMLA_STATUS_NO_MEMORY;
    if (!t) {
        numla_error_set(s, __FILE__, __LINE__, __func__, "no memory for a tokenizer");
        goto done;
    }
    t->id_limit = vocab_size > 0 && vocab_size < NUMLA_TOKENIZER_MAX_IDS ? vocab_size
                                                                       : NUMLA_TOKENIZER_MAX_IDS;
    t->id_limit_from_model = vocab_size > 0 && vocab_size <= NUMLA_TOKENIZER_MAX_IDS;
    NUMLA_CHECK_GOTO(numla_tokenizer_read_json(path, 0, &root), s, done);
    NUMLA_CHECK_GOTO(numla_tokenizer_read_json(cpath, 1, &config), s, done);
    s = numla_tokenizer_load_json(t, root, config);
    if (s != NUMLA_STATUS_OK) {
        /* name the file in the message: the components are only named inside it */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", numla_error_message());
        numla_error_set(s, __FILE__, __LINE__, __func__, "%s: %s", path, msg);
    }
done:
    json_decref(root);
    json_decref(config);
    free(path);
    free(cpath);
    if (s != NUMLA_STATUS_OK)
        numla_tokenizer_destroy(&t);
    *out = t;
    return s;
}

numla_status numla_tokenizer_load_json_text(const char *tokenizer_json, const char *config_json,
                                            int64_t vocab_size, const char *source,
                                            numla_tokenizer **out)
{
    *out = NULL;
    json_t *root = NULL, *config = NULL;
    char what[1200];
    snprintf(what, sizeof what, "%s: tokenizer", source);
    NUMLA_CHECK(numla_json_text_parse(tokenizer_json, strlen(tokenizer_json), JSON_ALLOW_NUL, what,
                                      &root));
    snprintf(what, sizeof what, "%s: tokenizer config", source);
    if (config_json) {
        numla_status ps = numla_json_text_parse(config_json, strlen(config_json), JSON_ALLOW_NUL,
                                                what, &config);
        if (ps != NUMLA_STATUS_OK) {
            json_decref(root);
            NUMLA_CHECK(ps);
        }
    }
    numla_tokenizer *t = calloc(1, sizeof *t);
    numla_status s = NUMLA_STATUS_NO_MEMORY;
    if (t) {
        t->id_limit = vocab_size > 0 && vocab_size < NUMLA_TOKENIZER_MAX_IDS
                          ? vocab_size
                          : NUMLA_TOKENIZER_MAX_IDS;
        t->id_limit_from_model = vocab_size > 0 && vocab_size <= NUMLA_TOKENIZER_MAX_IDS;
        s = numla_tokenizer_load_json(t, root, config);
        if (s != NUMLA_STATUS_OK) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", numla_error_message());
            numla_error_set(s, __FILE__, __LINE__, __func__, "%s: %s", source, msg);
        }
    } else {
        numla_error_set(s, __FILE__, __LINE__, __func__, "no memory for a tokenizer");
    }
    json_decref(root);
    json_decref(config);
    if (s != NUMLA_STATUS_OK)
        numla_tokenizer_destroy(&t);
    *out = t;
    return s;
}

void numla_tokenizer_destroy(numla_tokenizer **tp)
{
    numla_tokenizer *t = tp ? *tp : NULL;
    if (!t)
        return;
    for (int64_t i = 0; t->tok && i < t->n_ids; i++)
        free(t->tok[i]);
    free(t->tok);
    free(t->tok_len);
    free(t->special);
    free(t->dec_pool);
    free(t->dec_off);
    free(t->dec_len);
    free(t->vocab_slot);
    free(t->merge_key);
    free(t->merge_rank);
    free(t->merge_new);
    for (int i = 0; t->added && i < t->n_added; i++)
        free(t->added[i].content);
    free(t->added);
    free(t->raw.nodes);
    free(t->norm.nodes);
    for (int i = 0; i < t->n_pt; i++) {
        pcre2_match_data_free(t->pt[i].re.md);
        pcre2_code_free(t->pt[i].re.code);
    }
    free(t->pt);
    free(t->tmpl_pre);
    free(t->tmpl_post);
    pcre2_match_context_free(t->mctx);
    pcre2_jit_stack_free(t->jit_stack);
    free(t->ids.p);
    free(t->arena.p);
    free(t->norm_buf.p);
    free(t->pieces.p);
    free(t->pieces2.p);
    free(t->spans.p);
    free(t->seg_raw.p);
    free(t->seg_norm.p);
    free(t->mapped.p);
    free(t->sym_id);
    free(t->sym_prev);
    free(t->sym_next);
    free(t->sym_start);
    free(t->heap);
    free(t->cache);
    free(t->cache_keys.p);
    free(t->cache_vals.p);
    free(t);
    *tp = NULL;
}
