/* engine/text/tokenizer_internal.h — the tokenizer's private state, shared by engine/tokenizer*.c
 * only (load in tokenizer_load.c, encode/decode in tokenizer.c). Not a public header. */
#ifndef NUMLA_ENGINE_TOKENIZER_INTERNAL_H
#define NUMLA_ENGINE_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include <utf8proc.h>

#include "engine/text/tokenizer.h"

/* Split behaviours, as tokenizers' SplitDelimiterBehavior. */
typedef enum numla_tokenizer_behavior {
    NUMLA_TOKENIZER_REMOVED,
    NUMLA_TOKENIZER_ISOLATED,
    NUMLA_TOKENIZER_MERGED_PREV,
    NUMLA_TOKENIZER_MERGED_NEXT,
    NUMLA_TOKENIZER_CONTIGUOUS,
} numla_tokenizer_behavior;

typedef enum numla_tokenizer_pretok_kind {
    NUMLA_TOKENIZER_PT_SPLIT,
    NUMLA_TOKENIZER_PT_DIGITS,
    NUMLA_TOKENIZER_PT_BYTELEVEL,
} numla_tokenizer_pretok_kind;

typedef struct numla_tokenizer_regex {
    pcre2_code *code;
    pcre2_match_data *md; /* allocated once, reused by every match */
    int jit;              /* 1 when pcre2_jit_compile succeeded */
} numla_tokenizer_regex;

typedef struct numla_tokenizer_pretok {
    numla_tokenizer_pretok_kind kind;
    numla_tokenizer_regex re; /* Split pattern, or ByteLevel's GPT-2 regex when use_regex */
    numla_tokenizer_behavior behavior;
    int invert;
    int individual_digits;
    int add_prefix_space;
    int use_regex;
} numla_tokenizer_pretok;

typedef struct numla_tokenizer_added {
    int32_t id;
    char *content;
    uint32_t len;
    uint8_t special, lstrip, rstrip, single_word, normalized;
} numla_tokenizer_added;

/* Added tokens of one kind (normalized or not) as a byte trie, so the leftmost-longest scan
 * costs one table look-up per input byte that starts no token, whatever the token count
 * (DeepSeek has hundreds of "<｜...｜>" tokens sharing a prefix). */
typedef struct numla_tokenizer_trie_node {
    int32_t child;   /* first child node, -1 when none */
    int32_t sibling; /* next node with the same parent, -1 when none */
    int32_t token;   /* index into added[] of the token ending here, -1 when none */
    uint8_t byte;
} numla_tokenizer_trie_node;

typedef struct numla_tokenizer_addset {
    int n;                      /* tokens in the set */
    numla_tokenizer_trie_node *nodes; /* (n_nodes) */
    int32_t n_nodes, cap_nodes;
    int32_t first[256];         /* node for each first byte, -1 when no token starts with it */
} numla_tokenizer_addset;

typedef struct numla_tokenizer_span {
    size_t a, b;
    int m;
} numla_tokenizer_span;

/* A growable array of T, used for scratch everywhere. */
#define NUMLA_TOKENIZER_VEC(T) struct { T *p; size_t n, cap; }

struct numla_tokenizer {
    /* ids: model vocabulary and added tokens (added ones win, as in the reference) */
    int64_t n_ids;           /* one past the largest id */
    int64_t id_limit;        /* every id must be below it (load's vocab_size or the cap) */
    int id_limit_from_model; /* 1: id_limit is the model's vocab_size */
    char **tok;              /* (n_ids) token strings (NUL-terminated), NULL for holes */
    uint32_t *tok_len;       /* (n_ids) */
    uint8_t *special;        /* (n_ids) 1 for special added tokens, 2 for special ones decoded
                                all the same (numla_tokenizer_keep_in_text) */
    uint8_t *dec_pool;       /* decoded bytes of every id, back to back */
    size_t *dec_off;         /* (n_ids) offset of id's decoded bytes in dec_pool */
    uint32_t *dec_len;       /* (n_ids) */

    /* model vocabulary hash: token string -> id */
    int32_t *vocab_slot;     /* (vocab_mask + 1) id or -1 */
    uint64_t vocab_mask;
    /* merges hash: (left id, right id) -> rank, merged id */
    uint64_t *merge_key;     /* (merge_mask + 1) left << 32 | right, UINT64_MAX empty */
    int32_t *merge_rank;     /* (merge_mask + 1) */
    int32_t *merge_new;      /* (merge_mask + 1) */
    uint64_t merge_mask;
    int32_t byte_id[256];    /* id of each byte's byte-level char, -1 when not in the vocab */
    int32_t unk_id;          /* -1 when none */
    int ignore_merges;
    int tiktoken;            /* 1: loaded from tiktoken.model (tokenizer_tiktoken.c): tok[] holds
                                raw bytes, BPE ranks byte strings, Kimi's pre-tokenizer */
    int32_t n_base;          /* tiktoken: mergeable ranks; specials follow them */

    numla_tokenizer_added *added;  /* (n_added) */
    int n_added;
    numla_tokenizer_addset raw;    /* normalized == false: matched on the input text */
    numla_tokenizer_addset norm;   /* normalized == true: matched on the normalized text */

    int nfc;                 /* normalizer: NFC (else none) */
    numla_tokenizer_pretok *pt;    /* (n_pt) pre-tokenizer steps, ByteLevel last */
    int n_pt;

    int has_template;        /* TemplateProcessing: prefix $A suffix */
    int32_t *tmpl_pre;       /* (n_tmpl_pre) */
    int n_tmpl_pre;
    int32_t *tmpl_post;      /* (n_tmpl_post) */
    int n_tmpl_post;
    int add_bos, add_eos;    /* tokenizer_config.json, used without a template */
    int32_t bos, eos;

    pcre2_match_context *mctx;
    pcre2_jit_stack *jit_stack;

    /* encode scratch (reused across calls) */
    NUMLA_TOKENIZER_VEC(int32_t) ids;
    NUMLA_TOKENIZER_VEC(char) arena;        /* pre-tokenizer pieces live here */
    NUMLA_TOKENIZER_VEC(char) norm_buf;
    NUMLA_TOKENIZER_VEC(numla_tokenizer_span) pieces, pieces2, spans, seg_raw, seg_norm;
    NUMLA_TOKENIZER_VEC(char) mapped;       /* byte-level mapped word for ignore_merges */
    /* BPE word scratch */
    int32_t *sym_id, *sym_prev, *sym_next, *sym_start; /* (sym_cap) */
    struct numla_tokenizer_merge { int32_t rank, pos, new_id; } *heap; /* (heap_cap) */
    size_t sym_cap, heap_cap;

    /* word cache: piece bytes -> ids */
    struct numla_tokenizer_cache_ent { uint64_t h; uint32_t koff, klen, voff, vn; } *cache;
    uint32_t cache_mask, cache_used;
    NUMLA_TOKENIZER_VEC(char) cache_keys;
    NUMLA_TOKENIZER_VEC(int32_t) cache_vals;
};

/* Byte-level alphabet (GPT-2's bytes_to_unicode): printable Latin-1 bytes stand for themselves,
 * the other 68 bytes map in order to U+0100..U+0143. */
static inline uint32_t numla_tokenizer_byte_cp(int b)
{
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)
        return (uint32_t)b;
    if (b <= 32)
        return 256u + (uint32_t)b;
    if (b <= 160)
        return (uint32_t)b + 162u;
    return 323u; /* 173 */
}
/* The byte of a byte-level char, -1 when cp is not one. */
static inline int numla_tokenizer_cp_byte(uint32_t cp)
{
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255))
        return (int)cp;
    if (cp >= 256 && cp <= 288)
        return (int)cp - 256;
    if (cp >= 289 && cp <= 322)
        return (int)cp - 162;
    if (cp == 323)
        return 173;
    return -1;
}

uint64_t numla_tokenizer_hash(const void *p, size_t n);
/* tokenizer_unicode.c: pat with its general-category escapes (\p{L}, \P{N}, \d, ...) following
 * Unicode 16.0 (utf8proc's tables with unicode_newer.h over them) where PCRE2's are older. *out is malloc'd (NUL-terminated), or NULL
 * when the pattern needs no change. Not collective; thread-safe. */
numla_status numla_tokenizer_unicode_pattern(const char *pat, size_t len, char **out,
                                             size_t *out_len);
int32_t numla_tokenizer_vocab_find(const numla_tokenizer *t, const char *s, size_t n);

/* tokenizer_load.c, shared with tokenizer_tiktoken.c. */
uint64_t numla_tokenizer_pow2(uint64_t n);
numla_status numla_tokenizer_addset_build(numla_tokenizer *t, numla_tokenizer_addset *s,
                                          int normalized);
numla_status numla_tokenizer_load_specials(numla_tokenizer *t, json_t *config);
numla_status numla_tokenizer_prepare_encode(numla_tokenizer *t);
/* dec_pool / dec_off / dec_len sized for n_ids tokens of tok_len bytes; FORMAT on a bad n_ids. */
numla_status numla_tokenizer_decode_alloc(numla_tokenizer *t);

/* tokenizer_tiktoken.c: fill t (id_limit set, everything else zero) from the text of a
 * tiktoken.model file and tokenizer_config.json (parsed; may be NULL). name is the file named
 * in errors. Not collective. */
numla_status numla_tokenizer_tiktoken_fill(numla_tokenizer *t, const char *text, size_t len,
                                           const char *name, json_t *config);
/* tokenizer_tiktoken.c: the end of the Kimi pre-tokenizer match that starts at s[p] (p < len;
 * the pattern matches at every position, always at least one character). s is valid UTF-8. */
size_t numla_tokenizer_kimi_match(const uint8_t *s, size_t len, size_t p);

#include "engine/text/tokenizer_testing.h"

#endif
