/* engine/text/tokenizer_tiktoken.c — tiktoken BPE tokenizers (Kimi K2's kind): the tiktoken.model
 * file, the special tokens of tokenizer_config.json, and Kimi's pre-tokenizer.
 *
 * tiktoken.model: one "<base64 token> <rank>" per line; a token's id is its rank. Encoding
 * splits the text on special tokens, then into pieces by the pre-tokenizer pattern, and each
 * piece that is not itself a token is merged as tiktoken does: starting from single bytes,
 * repeatedly join the adjacent pair whose concatenated bytes have the lowest rank (leftmost on
 * ties) until no adjacent pair is a token (tokenizer.c, numla_tokenizer_tiktoken_bpe).
 *
 * Specials follow Kimi's tokenization code: the 256 ids after the mergeable ranks are special
 * tokens, named by tokenizer_config.json's added_tokens_decoder where it lists them and
 * "<|reserved_token_ID|>" elsewhere.
 *
 * Kimi's pattern (tokenization_kimi.py) is, as alternatives tried in order:
 *
 *   A1 [\p{Han}]+
 *   A2 [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*
 *                        [\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
 *   A3 [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+
 *                        [\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
 *   A4 \p{N}{1,3}
 *   A5  ?[^\s\p{L}\p{N}]+[\r\n]*
 *   A6 \s*[\r\n]+
 *   A7 \s+(?!\S)
 *   A8 \s+
 *
 * Its `&&` (class intersection) is not PCRE2 syntax, so the matcher below is built by hand over
 * the character classes (utf8proc's general categories with unicode_newer.h, the Han ranges of
 * unicode_han.h, White_Space for \s), following the backtracking the reference regex engine
 * does on each alternative. tests/golden/kimi_tok/ checks the classes on every code point and
 * the whole encoding on thousands of strings against the tiktoken package. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/tokenizer_internal.h"
#include "engine/text/unicode_han.h"

/* Kimi's number of special-token ids after the mergeable ranks. */
enum { NUMLA_TIKTOKEN_RESERVED_SPECIALS = 256 };

/* ---- Kimi's pre-tokenizer ------------------------------------------------------------------- */

enum {
    KC_HAN = 1,   /* script Han */
    KC_U = 2,     /* [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]] */
    KC_W = 4,     /* [\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]] */
    KC_P = 8,     /* [^\r\n\p{L}\p{N}] */
    KC_N = 16,    /* \p{N} */
    KC_S = 32,    /* \s (White_Space) */
    KC_CRLF = 64, /* \r or \n */
};

int numla_tokenizer_kimi_is_han(uint32_t c)
{
    size_t lo = 0, hi = sizeof numla_unicode_han / sizeof numla_unicode_han[0];
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (numla_unicode_han[mid][1] < c)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < sizeof numla_unicode_han / sizeof numla_unicode_han[0] &&
           numla_unicode_han[lo][0] <= c;
}

int numla_tokenizer_kimi_is_ws(uint32_t c)
{
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
           c == 0x205f || c == 0x3000;
}

static int kimi_class_slow(uint32_t c)
{
    int k = 0;
    int han = numla_tokenizer_kimi_is_han(c);
    if (han)
        k |= KC_HAN;
    if (numla_tokenizer_kimi_is_ws(c))
        k |= KC_S;
    if (c == '\r' || c == '\n')
        k |= KC_CRLF;
    int l = 0, n = 0;
    switch (numla_tokenizer_unicode_category(c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LT:
        l = 1;
        k |= han ? 0 : KC_U;
        break;
    case UTF8PROC_CATEGORY_LL:
        l = 1;
        k |= han ? 0 : KC_W;
        break;
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
        l = 1;
        k |= han ? 0 : KC_U | KC_W;
        break;
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
        k |= han ? 0 : KC_U | KC_W;
        break;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
        n = 1;
        k |= KC_N;
        break;
    default:
        break;
    }
    if (!l && !n && c != '\r' && c != '\n')
        k |= KC_P;
    return k;
}

/* Classes of the ASCII characters, filled once (the table is the same for every process). */
static uint8_t kimi_ascii[128];
static pthread_once_t kimi_ascii_once = PTHREAD_ONCE_INIT;

static void kimi_ascii_init(void)
{
    for (uint32_t c = 0; c < 128; c++)
        kimi_ascii[c] = (uint8_t)kimi_class_slow(c);
}

/* The character at s[i] (valid UTF-8, i < len): its classes, code point and length. */
static int kimi_char(const uint8_t *s, size_t i, uint32_t *cp, int *len)
{
    uint8_t c = s[i];
    if (c < 0x80) {
        *cp = c;
        *len = 1;
        return kimi_ascii[c];
    }
    if (c < 0xe0) {
        *cp = (uint32_t)(c & 0x1f) << 6 | (s[i + 1] & 0x3fu);
        *len = 2;
    } else if (c < 0xf0) {
        *cp = (uint32_t)(c & 0x0f) << 12 | (uint32_t)(s[i + 1] & 0x3f) << 6 | (s[i + 2] & 0x3fu);
        *len = 3;
    } else {
        *cp = (uint32_t)(c & 0x07) << 18 | (uint32_t)(s[i + 1] & 0x3f) << 12 |
              (uint32_t)(s[i + 2] & 0x3f) << 6 | (s[i + 3] & 0x3fu);
        *len = 4;
    }
    return kimi_class_slow(*cp);
}

/* The end of the longest run of characters with any of the classes in mask, from p. */
static size_t kimi_run(const uint8_t *s, size_t len, size_t p, int mask)
{
    while (p < len) {
        uint32_t cp;
        int l;
        if (!(kimi_char(s, p, &cp, &l) & mask))
            break;
        p += (size_t)l;
    }
    return p;
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d) at p: its end, or p. Case folding as the reference's: 's' also
 * matches U+017F (long s), no other letter here has a fold outside ASCII. */
static size_t kimi_contraction(const uint8_t *s, size_t len, size_t p)
{
    if (p + 1 >= len || s[p] != '\'')
        return p;
    uint8_t a = s[p + 1] | 0x20, b = p + 2 < len ? s[p + 2] | 0x20 : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return p + 2;
    if (s[p + 1] == 0xc5 && p + 2 < len && s[p + 2] == 0xbf) /* U+017F */
        return p + 3;
    if ((a == 'r' || a == 'v') && b == 'e')
        return p + 3;
    if (a == 'l' && b == 'l')
        return p + 3;
    return p;
}

/* A2 from q (after the optional prefix): U* then W+ then the contraction; 0 when no match.
 * The regex engine takes the whole U run, then gives it back one character at a time until a W
 * follows: the W right after the run if there is one (then W+ is greedy), else the last W
 * inside the run (U and W share Lm, Lo and M), after which no W follows. */
static size_t kimi_alt2_from(const uint8_t *s, size_t len, size_t q)
{
    size_t e = q, last_w_end = 0;
    uint32_t cp;
    int l, k = 0;
    while (e < len) {
        k = kimi_char(s, e, &cp, &l);
        if (!(k & KC_U))
            break;
        if (k & KC_W)
            last_w_end = e + (size_t)l;
        e += (size_t)l;
    }
    if (e < len && (k & KC_W) && !(k & KC_U))
        return kimi_contraction(s, len, kimi_run(s, len, e, KC_W));
    if (last_w_end)
        return kimi_contraction(s, len, last_w_end);
    return 0;
}

/* A3 from q: U+ then W* then the contraction; 0 when no U at q. */
static size_t kimi_alt3_from(const uint8_t *s, size_t len, size_t q)
{
    size_t u = kimi_run(s, len, q, KC_U);
    if (u == q)
        return 0;
    return kimi_contraction(s, len, kimi_run(s, len, u, KC_W));
}

size_t numla_tokenizer_kimi_match(const uint8_t *s, size_t len, size_t p)
{
    pthread_once(&kimi_ascii_once, kimi_ascii_init);
    uint32_t cp;
    int l;
    int k = kimi_char(s, p, &cp, &l);
    size_t next = p + (size_t)l, e;
    /* A1 */
    if (k & KC_HAN)
        return kimi_run(s, len, p, KC_HAN);
    /* A2, A3: with the optional prefix character first, then without */
    for (int alt = 2; alt <= 3; alt++) {
        if ((k & KC_P) && next < len) {
            e = alt == 2 ? kimi_alt2_from(s, len, next) : kimi_alt3_from(s, len, next);
            if (e)
                return e;
        }
        e = alt == 2 ? kimi_alt2_from(s, len, p) : kimi_alt3_from(s, len, p);
        if (e)
            return e;
    }
    /* A4 */
    if (k & KC_N) {
        e = next;
        for (int i = 1; i < 3 && e < len; i++) {
            if (!(kimi_char(s, e, &cp, &l) & KC_N))
                break;
            e += (size_t)l;
        }
        return e;
    }
    /* A5: " ?[^\s\p{L}\p{N}]+[\r\n]*" */
    {
        size_t q = p;
        if (cp == ' ' && next < len) {
            uint32_t c2;
            int l2;
            int k2 = kimi_char(s, next, &c2, &l2);
            if ((k2 & KC_P) && !(k2 & KC_S))
                q = next;
        }
        uint32_t c3;
        int l3;
        int k3 = kimi_char(s, q, &c3, &l3);
        if ((k3 & KC_P) && !(k3 & KC_S)) {
            e = q;
            while (e < len) {
                int kk = kimi_char(s, e, &c3, &l3);
                if (!(kk & KC_P) || (kk & KC_S))
                    break;
                e += (size_t)l3;
            }
            return kimi_run(s, len, e, KC_CRLF);
        }
    }
    /* A6, A7, A8: whitespace from p */
    size_t ws = kimi_run(s, len, p, KC_S);
    if (ws == p)
        return next; /* unreachable: every character is in one of the classes above */
    size_t last_crlf = 0, i = p;
    int any_crlf = 0;
    while (i < ws) {
        int kk = kimi_char(s, i, &cp, &l);
        if (kk & KC_CRLF) {
            any_crlf = 1;
            last_crlf = i + (size_t)l;
        }
        i += (size_t)l;
    }
    if (any_crlf)
        return last_crlf;
    if (ws == len)
        return ws;
    /* \s+(?!\S): give back the last whitespace character when more than one */
    size_t before = p;
    i = p;
    while (i < ws) {
        kimi_char(s, i, &cp, &l);
        before = i;
        i += (size_t)l;
    }
    if (before > p)
        return before;
    return ws;
}

/* ---- tiktoken.model ------------------------------------------------------------------------- */

static int b64_val(uint8_t c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* Strict standard base64 (padding required, '=' only at the end); returns the decoded length,
 * or -1. out has room for 3 * n / 4 bytes. */
static long b64_decode(const char *in, size_t n, uint8_t *out)
{
    if (n == 0 || n % 4)
        return -1;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int j = 0; j < 4; j++) {
            uint8_t c = (uint8_t)in[i + (size_t)j];
            if (c == '=' && i + 4 == n && j >= 2) {
                v[j] = 0;
                pad++;
                continue;
            }
            if (pad) /* data after '=' */
                return -1;
            v[j] = b64_val(c);
            if (v[j] < 0)
                return -1;
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[o++] = (uint8_t)(w >> 16);
        if (pad < 2)
            out[o++] = (uint8_t)(w >> 8);
        if (pad < 1)
            out[o++] = (uint8_t)w;
    }
    return (long)o;
}

typedef struct tt_entry {
    int64_t rank;
    long line;
    size_t off; /* decoded bytes in the pool */
    uint32_t len;
} tt_entry;

static int tt_by_rank(const void *a, const void *b)
{
    const tt_entry *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return x->line < y->line ? -1 : x->line > y->line;
}

/* Parse the file into entries (rank, line, bytes); errors name the line. */
static numla_status tt_parse(const char *text, size_t len, const char *name, int64_t limit,
                             tt_entry **entries, size_t *n_entries, uint8_t **pool)
{
    size_t cap = 1024, n = 0, pool_n = 0;
    tt_entry *e = malloc(cap * sizeof *e);
    uint8_t *p = malloc(len / 4 * 3 + 4);
    *entries = NULL;
    *pool = NULL;
    *n_entries = 0;
    if (!e || !p) {
        free(e);
        free(p);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory to read %s", name);
    }
    numla_status st = NUMLA_STATUS_OK;
    long line = 0;
    size_t i = 0;
    while (i < len) {
        line++;
        const char *ln = text + i;
        const char *nl = memchr(ln, '\n', len - i);
        size_t ll = nl ? (size_t)(nl - ln) : len - i;
        i += ll + (nl ? 1 : 0);
        if (ll && ln[ll - 1] == '\r')
            ll--;
        if (ll == 0)
            continue;
        /* two fields separated by spaces or tabs */
        size_t a0 = 0;
        while (a0 < ll && (ln[a0] == ' ' || ln[a0] == '\t'))
            a0++;
        size_t a1 = a0;
        while (a1 < ll && ln[a1] != ' ' && ln[a1] != '\t')
            a1++;
        size_t b0 = a1;
        while (b0 < ll && (ln[b0] == ' ' || ln[b0] == '\t'))
            b0++;
        size_t b1 = b0;
        while (b1 < ll && ln[b1] != ' ' && ln[b1] != '\t')
            b1++;
        size_t rest = b1;
        while (rest < ll && (ln[rest] == ' ' || ln[rest] == '\t'))
            rest++;
        if (a1 == a0 || b1 == b0 || rest != ll) {
            numla_error_set(NUMLA_STATUS_FORMAT, __FILE__, __LINE__, __func__,
                            "%s:%ld: expected '<base64 token> <rank>'", name, line);
            st = NUMLA_STATUS_FORMAT;
            break;
        }
        long dl = b64_decode(ln + a0, a1 - a0, p + pool_n);
        if (dl <= 0) {
            numla_error_set(NUMLA_STATUS_FORMAT, __FILE__, __LINE__, __func__,
                            "%s:%ld: token '%.*s' is not base64 of a non-empty byte string",
                            name, line, (int)(a1 - a0 > 64 ? 64 : a1 - a0), ln + a0);
            st = NUMLA_STATUS_FORMAT;
            break;
        }
        int64_t rank = 0;
        int bad = b1 - b0 > 10;
        for (size_t k = b0; k < b1 && !bad; k++) {
            if (ln[k] < '0' || ln[k] > '9')
                bad = 1;
            else
                rank = rank * 10 + (ln[k] - '0');
        }
        if (bad || rank >= limit) {
            numla_error_set(NUMLA_STATUS_FORMAT, __FILE__, __LINE__, __func__,
                            "%s:%ld: rank '%.*s' is not an integer in [0, %lld)", name, line,
                            (int)(b1 - b0 > 24 ? 24 : b1 - b0), ln + b0, (long long)limit);
            st = NUMLA_STATUS_FORMAT;
            break;
        }
        if (n == cap) {
            tt_entry *ne = realloc(e, 2 * cap * sizeof *e);
            if (!ne) {
                numla_error_set(NUMLA_STATUS_NO_MEMORY, __FILE__, __LINE__, __func__,
                                "no memory to read %s", name);
                st = NUMLA_STATUS_NO_MEMORY;
                break;
            }
            e = ne;
            cap *= 2;
        }
        e[n++] = (tt_entry){rank, line, pool_n, (uint32_t)dl};
        pool_n += (size_t)dl;
    }
    if (st == NUMLA_STATUS_OK && n == 0) {
        numla_error_set(NUMLA_STATUS_FORMAT, __FILE__, __LINE__, __func__, "%s: no tokens", name);
        st = NUMLA_STATUS_FORMAT;
    }
    if (st != NUMLA_STATUS_OK) {
        free(e);
        free(p);
        return st;
    }
    *entries = e;
    *n_entries = n;
    *pool = p;
    return NUMLA_STATUS_OK;
}

static numla_status tt_set_token(numla_tokenizer *t, int32_t id, const uint8_t *s, size_t n)
{
    t->tok[id] = malloc(n + 1);
    if (!t->tok[id])
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for token strings");
    memcpy(t->tok[id], s, n);
    t->tok[id][n] = 0;
    t->tok_len[id] = (uint32_t)n;
    return NUMLA_STATUS_OK;
}

/* The ranks: ids, the byte-string hash, the single-byte ids. */
static numla_status tt_fill_ranks(numla_tokenizer *t, tt_entry *e, size_t n, const uint8_t *pool,
                                  const char *name)
{
    qsort(e, n, sizeof *e, tt_by_rank);
    for (size_t i = 1; i < n; i++)
        if (e[i].rank == e[i - 1].rank)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s:%ld: rank %lld already given on line %ld", name,
                       e[i].line, (long long)e[i].rank, e[i - 1].line);
    /* the ids after the ranks are the specials' (Kimi counts the ranks), so ranks are dense */
    for (size_t i = 0; i < n; i++)
        if (e[i].rank != (int64_t)i)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s:%ld: rank %lld leaves rank %zu unused (ranks must "
                                            "be 0, 1, 2, ... without gaps)", name, e[i].line,
                       (long long)e[i].rank, i);
    t->n_base = (int32_t)n;
    int64_t n_ids = (int64_t)n + NUMLA_TIKTOKEN_RESERVED_SPECIALS;
    if (n_ids > t->id_limit)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                   "%s: %zu ranks and %d special tokens need %lld ids, more than %s %lld", name,
                   n, NUMLA_TIKTOKEN_RESERVED_SPECIALS, (long long)n_ids,
                   t->id_limit_from_model ? "the model's vocab_size" : "the limit of",
                   (long long)t->id_limit);
    t->n_ids = n_ids;
    t->tok = calloc((size_t)n_ids + 1, sizeof *t->tok);
    t->tok_len = calloc((size_t)n_ids + 1, sizeof *t->tok_len);
    t->special = calloc((size_t)n_ids + 1, 1);
    t->vocab_mask = numla_tokenizer_pow2(n) - 1;
    t->vocab_slot = malloc((t->vocab_mask + 1) * sizeof *t->vocab_slot);
    long *line_of = malloc((size_t)n_ids * sizeof *line_of);
    if (!t->tok || !t->tok_len || !t->special || !t->vocab_slot || !line_of) {
        free(line_of);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for a vocabulary of %lld", (long long)n_ids);
    }
    memset(t->vocab_slot, 0xff, (t->vocab_mask + 1) * sizeof *t->vocab_slot);
    for (size_t i = 0; i < n; i++) {
        const char *s = (const char *)pool + e[i].off;
        int32_t dup = numla_tokenizer_vocab_find(t, s, e[i].len);
        if (dup >= 0) {
            long l1 = line_of[dup];
            free(line_of);
            NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                       "%s:%ld: the token of rank %lld is the token of rank %d (line %ld)", name,
                       e[i].line, (long long)e[i].rank, (int)dup, l1);
        }
        int32_t id = (int32_t)e[i].rank;
        numla_status st = tt_set_token(t, id, pool + e[i].off, e[i].len);
        if (st != NUMLA_STATUS_OK) {
            free(line_of);
            return st;
        }
        line_of[id] = e[i].line;
        uint64_t h = numla_tokenizer_hash(s, e[i].len) & t->vocab_mask;
        while (t->vocab_slot[h] >= 0)
            h = (h + 1) & t->vocab_mask;
        t->vocab_slot[h] = id;
    }
    free(line_of);
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        t->byte_id[b] = numla_tokenizer_vocab_find(t, &c, 1);
        if (t->byte_id[b] < 0)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: no token for the single byte 0x%02x (tiktoken "
                                            "needs all 256)", name, b);
    }
    t->unk_id = -1;
    return NUMLA_STATUS_OK;
}

/* The special tokens: ids n_base .. n_base + 255, named by added_tokens_decoder. e: the ranks'
 * entries sorted by rank (e[r] is rank r's), for the line of a colliding BPE token. */
static numla_status tt_fill_specials(numla_tokenizer *t, json_t *config, const char *name,
                                     const tt_entry *e)
{
    json_t *dec = config ? json_object_get(config, "added_tokens_decoder") : NULL;
    if (dec && !json_is_object(dec))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "tokenizer_config.json: added_tokens_decoder is not an "
                                        "object");
    const char *key;
    json_t *v;
    json_object_foreach(dec, key, v) {
        char *end;
        long long id = strtoll(key, &end, 10);
        const char *content = json_string_value(json_object_get(v, "content"));
        if (!*key || *end || id < 0)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "tokenizer_config.json: added_tokens_decoder key '%s' "
                                            "is not an id", key);
        if (!content || !*content)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "tokenizer_config.json: added_tokens_decoder '%s' "
                                            "has no content", key);
        if (id < t->n_base)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                       "tokenizer_config.json: special token '%s' has id %lld, the id of the BPE "
                       "token of rank %lld (%s:%ld)", content, id, id, name, e[id].line);
        if (id < t->n_base || id >= (long long)t->n_base + NUMLA_TIKTOKEN_RESERVED_SPECIALS)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                       "tokenizer_config.json: special token '%s' has id %lld, outside the %d "
                       "special ids [%d, %d) after the %d ranks of %s", content, id,
                       NUMLA_TIKTOKEN_RESERVED_SPECIALS, (int)t->n_base,
                       (int)t->n_base + NUMLA_TIKTOKEN_RESERVED_SPECIALS, (int)t->n_base, name);
        int32_t bpe = numla_tokenizer_vocab_find(t, content, strlen(content));
        if (bpe >= 0)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                       "tokenizer_config.json: special token '%s' (id %lld) is also the BPE "
                       "token of rank %d (%s:%ld)", content, id, (int)bpe, name, e[bpe].line);
    }
    t->n_added = NUMLA_TIKTOKEN_RESERVED_SPECIALS;
    t->added = calloc((size_t)t->n_added, sizeof *t->added);
    if (!t->added)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for special tokens");
    for (int k = 0; k < t->n_added; k++) {
        int32_t id = t->n_base + k;
        char idbuf[24];
        snprintf(idbuf, sizeof idbuf, "%d", (int)id);
        json_t *ent = dec ? json_object_get(dec, idbuf) : NULL;
        numla_tokenizer_added *a = &t->added[k];
        a->id = id;
        if (ent) {
            a->content = strdup(json_string_value(json_object_get(ent, "content")));
            json_t *sp = json_object_get(ent, "special");
            a->special = sp ? json_is_true(sp) : 1;
        } else {
            if (asprintf(&a->content, "<|reserved_token_%d|>", (int)id) < 0)
                a->content = NULL;
            a->special = 1;
        }
        if (!a->content)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for special tokens");
        a->len = (uint32_t)strlen(a->content);
        for (int j = 0; j < k; j++)
            if (t->added[j].len == a->len && memcmp(t->added[j].content, a->content, a->len) == 0)
                NUMLA_FAIL(NUMLA_STATUS_FORMAT, "tokenizer_config.json: special token '%s' has "
                                                "two ids, %d and %d", a->content,
                           (int)t->added[j].id, (int)id);
        NUMLA_CHECK(tt_set_token(t, id, (const uint8_t *)a->content, a->len));
        t->special[id] = a->special;
    }
    NUMLA_CHECK(numla_tokenizer_addset_build(t, &t->raw, 0));
    return NUMLA_STATUS_OK;
}

/* Decoded bytes: a token's own bytes. */
static numla_status tt_build_decode(numla_tokenizer *t)
{
    NUMLA_CHECK(numla_tokenizer_decode_alloc(t));
    size_t o = 0;
    for (int64_t i = 0; i < t->n_ids; i++) {
        t->dec_off[i] = o;
        t->dec_len[i] = t->tok_len[i];
        if (t->tok_len[i])
            memcpy(t->dec_pool + o, t->tok[i], t->tok_len[i]);
        o += t->tok_len[i];
    }
    return NUMLA_STATUS_OK;
}

numla_status numla_tokenizer_tiktoken_fill(numla_tokenizer *t, const char *text, size_t len,
                                           const char *name, json_t *config)
{
    tt_entry *e = NULL;
    uint8_t *pool = NULL;
    size_t n = 0;
    t->tiktoken = 1;
    NUMLA_CHECK(tt_parse(text, len, name, t->id_limit, &e, &n, &pool));
    numla_status st = tt_fill_ranks(t, e, n, pool, name);
    if (st == NUMLA_STATUS_OK)
        st = tt_fill_specials(t, config, name, e);
    free(e);
    free(pool);
    NUMLA_CHECK(st);
    NUMLA_CHECK(tt_build_decode(t));
    NUMLA_CHECK(numla_tokenizer_load_specials(t, config));
    NUMLA_CHECK(numla_tokenizer_prepare_encode(t));
    return NUMLA_STATUS_OK;
}
