/* engine/text/tokenizer.c — encode (added tokens, normalizer, pre-tokenizers, BPE, post-processor),
 * decode and the streaming decoder. Loading lives in tokenizer_load.c. The order of every step
 * and each split rule follow the reference `tokenizers` library, so ids match it exactly. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "engine/text/tokenizer_internal.h"

static numla_status numla_tokenizer_reserve(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return NUMLA_STATUS_OK;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *np = realloc(*p, c * elem);
    if (!np)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for %zu tokenizer scratch items", need);
    *p = np;
    *cap = c;
    return NUMLA_STATUS_OK;
}
#define NUMLA_TOKENIZER_RESERVE(v, need) \
    numla_tokenizer_reserve((void **)&(v).p, &(v).cap, (need), sizeof *(v).p)

static numla_status numla_tokenizer_push_span(numla_tokenizer *t, void *vec, size_t a, size_t b, int m)
{
    NUMLA_TOKENIZER_VEC(numla_tokenizer_span) *v = vec;
    NUMLA_CHECK(NUMLA_TOKENIZER_RESERVE(*v, v->n + 1));
    v->p[v->n++] = (numla_tokenizer_span){a, b, m};
    (void)t;
    return NUMLA_STATUS_OK;
}

static numla_status numla_tokenizer_push_id(numla_tokenizer *t, int32_t id)
{
    NUMLA_CHECK(NUMLA_TOKENIZER_RESERVE(t->ids, t->ids.n + 1));
    t->ids.p[t->ids.n++] = id;
    return NUMLA_STATUS_OK;
}

/* ---- UTF-8 and character classes ---------------------------------------------------------- */

int64_t numla_utf8_invalid_offset(const char *str, size_t len)
{
    const uint8_t *s = (const uint8_t *)str;
    size_t i = 0;
    while (i < len) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int need;
        uint8_t lo = 0x80, hi = 0xbf;
        if (c >= 0xc2 && c <= 0xdf)
            need = 1;
        else if (c >= 0xe0 && c <= 0xef) {
            need = 2;
            if (c == 0xe0)
                lo = 0xa0;
            else if (c == 0xed)
                hi = 0x9f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            need = 3;
            if (c == 0xf0)
                lo = 0x90;
            else if (c == 0xf4)
                hi = 0x8f;
        } else
            return (int64_t)i;
        for (int k = 1; k <= need; k++) {
            if (i + (size_t)k >= len)
                return (int64_t)i;
            uint8_t d = s[i + (size_t)k];
            if (d < (k == 1 ? lo : 0x80) || d > (k == 1 ? hi : 0xbf))
                return (int64_t)i;
        }
        i += (size_t)need + 1;
    }
    return -1;
}

/* Code point at s[i] of valid UTF-8; returns its length. */
static int numla_tokenizer_cp(const uint8_t *s, size_t i, uint32_t *cp)
{
    uint8_t c = s[i];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c < 0xe0) {
        *cp = (uint32_t)(c & 0x1f) << 6 | (s[i + 1] & 0x3fu);
        return 2;
    }
    if (c < 0xf0) {
        *cp = (uint32_t)(c & 0x0f) << 12 | (uint32_t)(s[i + 1] & 0x3f) << 6 | (s[i + 2] & 0x3fu);
        return 3;
    }
    *cp = (uint32_t)(c & 0x07) << 18 | (uint32_t)(s[i + 1] & 0x3f) << 12 |
          (uint32_t)(s[i + 2] & 0x3f) << 6 | (s[i + 3] & 0x3fu);
    return 4;
}

/* Start of the character ending just before s[i]. */
static size_t numla_tokenizer_prev(const uint8_t *s, size_t i)
{
    do
        i--;
    while (i > 0 && (s[i] & 0xc0) == 0x80);
    return i;
}

/* Unicode White_Space (Rust's char::is_whitespace, regex \s). */
static int numla_tokenizer_is_ws(uint32_t c)
{
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
           c == 0x205f || c == 0x3000;
}

/* Rust regex \w: letters, marks, decimal digits, connector punctuation, joiners. */
static int numla_tokenizer_is_word(uint32_t c)
{
    if (c < 0x80)
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (c == 0x200c || c == 0x200d)
        return 1;
    switch (numla_tokenizer_unicode_category(c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
        return 1;
    default:
        return 0;
    }
}

/* Rust's char::is_numeric (Nd, Nl, No): what the Digits pre-tokenizer splits on. */
static int numla_tokenizer_is_numeric(uint32_t c)
{
    if (c < 0x80)
        return c >= '0' && c <= '9';
    utf8proc_category_t k = numla_tokenizer_unicode_category(c);
    return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

/* ---- added tokens ------------------------------------------------------------------------- */

/* Split s on the added tokens of set, leftmost-longest and non-overlapping (as aho-corasick's
 * LeftmostLongest iterator), applying single_word / lstrip / rstrip. Spans get m = index into
 * t->added, or -1 for text between tokens. */
static numla_status numla_tokenizer_split_added(numla_tokenizer *t, const numla_tokenizer_addset *set,
                                          const char *str, size_t len, void *outv)
{
    NUMLA_TOKENIZER_VEC(numla_tokenizer_span) *out = outv;
    const uint8_t *s = (const uint8_t *)str;
    out->n = 0;
    size_t start_off = 0, pos = 0;
    while (set->n > 0 && pos < len) {
        int32_t node = set->first[s[pos]], best = -1;
        for (size_t q = pos + 1; node >= 0;) {
            if (set->nodes[node].token >= 0)
                best = set->nodes[node].token;
            if (q >= len)
                break;
            node = set->nodes[node].child;
            while (node >= 0 && set->nodes[node].byte != s[q])
                node = set->nodes[node].sibling;
            q++;
        }
        if (best < 0) {
            pos++;
            continue;
        }
        const numla_tokenizer_added *a = &t->added[best];
        size_t st = pos, sp = pos + a->len;
        pos = sp;
        uint32_t cp;
        if (a->single_word) {
            int start_space = 1, stop_space = 1;
            if (st > 0) {
                numla_tokenizer_cp(s, numla_tokenizer_prev(s, st), &cp);
                start_space = !numla_tokenizer_is_word(cp);
            }
            if (sp < len) {
                numla_tokenizer_cp(s, sp, &cp);
                stop_space = !numla_tokenizer_is_word(cp);
            }
            if (!start_space || !stop_space)
                continue;
        }
        if (a->lstrip) {
            size_t ns = st;
            while (ns > 0) {
                size_t p = numla_tokenizer_prev(s, ns);
                numla_tokenizer_cp(s, p, &cp);
                if (!numla_tokenizer_is_ws(cp))
                    break;
                ns = p;
            }
            st = ns > start_off ? ns : start_off;
        }
        if (a->rstrip) {
            while (sp < len) {
                int l = numla_tokenizer_cp(s, sp, &cp);
                if (!numla_tokenizer_is_ws(cp))
                    break;
                sp += (size_t)l;
            }
        }
        if (start_off < st)
            NUMLA_CHECK(numla_tokenizer_push_span(t, out, start_off, st, -1));
        NUMLA_CHECK(numla_tokenizer_push_span(t, out, st, sp, best));
        start_off = sp;
    }
    if (start_off < len)
        NUMLA_CHECK(numla_tokenizer_push_span(t, out, start_off, len, -1));
    return NUMLA_STATUS_OK;
}

/* ---- pre-tokenizers ----------------------------------------------------------------------- */

/* Matches of re in s as (span, is_match) covering s, like tokenizers' find_matches over onig's
 * find_iter: an empty match right where the previous match ended is skipped. */
static numla_status numla_tokenizer_find_regex(numla_tokenizer *t, numla_tokenizer_regex *re,
                                         const char *s, size_t len)
{
    t->spans.n = 0;
    size_t prev = 0, pos = 0, last_end = SIZE_MAX;
    while (pos <= len) {
        int rc = -1;
        if (re->jit)
            rc = pcre2_jit_match(re->code, (PCRE2_SPTR)s, len, pos, 0, re->md, t->mctx);
        if (!re->jit || rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(re->code, (PCRE2_SPTR)s, len, pos, PCRE2_NO_UTF_CHECK, re->md,
                             t->mctx);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            NUMLA_FAIL(NUMLA_STATUS_INTERNAL, "regex match failed: %s", (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(re->md);
        size_t st = ov[0], en = ov[1];
        if (st == en && en == last_end) {
            if (pos >= len)
                break;
            uint32_t cp;
            pos += (size_t)numla_tokenizer_cp((const uint8_t *)s, pos, &cp);
            continue;
        }
        if (prev != st)
            NUMLA_CHECK(numla_tokenizer_push_span(t, &t->spans, prev, st, 0));
        NUMLA_CHECK(numla_tokenizer_push_span(t, &t->spans, st, en, 1));
        prev = en;
        last_end = en;
        pos = en;
    }
    if (prev != len)
        NUMLA_CHECK(numla_tokenizer_push_span(t, &t->spans, prev, len, 0));
    return NUMLA_STATUS_OK;
}

/* Matches of the Digits predicate, one match per numeric character. */
static numla_status numla_tokenizer_find_digits(numla_tokenizer *t, const char *str, size_t len)
{
    const uint8_t *s = (const uint8_t *)str;
    t->spans.n = 0;
    size_t last = 0, i = 0;
    while (i < len) {
        uint32_t cp;
        int l = numla_tokenizer_cp(s, i, &cp);
        if (numla_tokenizer_is_numeric(cp)) {
            if (last < i)
                NUMLA_CHECK(numla_tokenizer_push_span(t, &t->spans, last, i, 0));
            NUMLA_CHECK(numla_tokenizer_push_span(t, &t->spans, i, i + (size_t)l, 1));
            last = i + (size_t)l;
        }
        i += (size_t)l;
    }
    if (last < len)
        NUMLA_CHECK(numla_tokenizer_push_span(t, &t->spans, last, len, 0));
    return NUMLA_STATUS_OK;
}

/* Turn t->spans (relative to base) into pieces appended to t->pieces2, per behaviour, dropping
 * empty pieces at the end as the reference does. */
static numla_status numla_tokenizer_apply(numla_tokenizer *t, numla_tokenizer_behavior b, int invert,
                                    size_t base)
{
    size_t first = t->pieces2.n, n = t->spans.n;
    NUMLA_CHECK(NUMLA_TOKENIZER_RESERVE(t->pieces2, first + n));
    numla_tokenizer_span *o = t->pieces2.p;
    size_t k = first;
    int prev_match = 0;
    for (size_t j = 0; j < n; j++) {
        size_t i = b == NUMLA_TOKENIZER_MERGED_NEXT ? n - 1 - j : j;
        numla_tokenizer_span s = t->spans.p[i];
        s.a += base;
        s.b += base;
        if (invert)
            s.m = !s.m;
        switch (b) {
        case NUMLA_TOKENIZER_REMOVED:
            if (!s.m)
                o[k++] = s;
            break;
        case NUMLA_TOKENIZER_ISOLATED:
            o[k++] = s;
            break;
        case NUMLA_TOKENIZER_MERGED_PREV:
            if (s.m && !prev_match && k > first)
                o[k - 1].b = s.b;
            else
                o[k++] = s;
            break;
        case NUMLA_TOKENIZER_MERGED_NEXT: /* walking backwards */
            if (s.m && !prev_match && k > first)
                o[k - 1].a = s.a;
            else
                o[k++] = s;
            break;
        case NUMLA_TOKENIZER_CONTIGUOUS:
            if (s.m == prev_match && k > first)
                o[k - 1].b = s.b;
            else
                o[k++] = s;
            break;
        }
        prev_match = s.m;
    }
    if (b == NUMLA_TOKENIZER_MERGED_NEXT)
        for (size_t i = first, j = k; i + 1 < j; i++, j--) {
            numla_tokenizer_span tmp = o[i];
            o[i] = o[j - 1];
            o[j - 1] = tmp;
        }
    size_t w = first;
    for (size_t i = first; i < k; i++)
        if (o[i].b > o[i].a)
            o[w++] = o[i];
    t->pieces2.n = w;
    return NUMLA_STATUS_OK;
}

/* ---- BPE ---------------------------------------------------------------------------------- */

static int numla_tokenizer_merge_get(const numla_tokenizer *t, int32_t a, int32_t b, int32_t *rank,
                               int32_t *nid)
{
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint64_t i = numla_tokenizer_hash(&key, 8) & t->merge_mask;
    for (;;) {
        uint64_t k = t->merge_key[i];
        if (k == key) {
            *rank = t->merge_rank[i];
            *nid = t->merge_new[i];
            return 1;
        }
        if (k == UINT64_MAX)
            return 0;
        i = (i + 1) & t->merge_mask;
    }
}

typedef struct numla_tokenizer_merge numla_tokenizer_merge;

static int numla_tokenizer_merge_less(const numla_tokenizer_merge *x, const numla_tokenizer_merge *y)
{
    return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos);
}

static void numla_tokenizer_heap_push(numla_tokenizer_merge *h, size_t *n, numla_tokenizer_merge m)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!numla_tokenizer_merge_less(&m, &h[p]))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = m;
}

static numla_tokenizer_merge numla_tokenizer_heap_pop(numla_tokenizer_merge *h, size_t *n)
{
    numla_tokenizer_merge top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && numla_tokenizer_merge_less(&h[c + 1], &h[c]))
            c++;
        if (!numla_tokenizer_merge_less(&h[c], &last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0)
        h[i] = last;
    return top;
}

enum { NUMLA_TOKENIZER_CACHE_MAX_WORD = 96 };

static void numla_tokenizer_cache_put(numla_tokenizer *t, uint64_t h, const uint8_t *w, size_t n,
                                const int32_t *ids, size_t nid)
{
    if ((size_t)t->cache_used * 4 >= ((size_t)t->cache_mask + 1) * 3 ||
        t->cache_keys.n > (64u << 20) || t->cache_vals.n > (16u << 20)) {
        memset(t->cache, 0, ((size_t)t->cache_mask + 1) * sizeof *t->cache);
        t->cache_used = 0;
        t->cache_keys.n = t->cache_vals.n = 0;
    }
    if (NUMLA_TOKENIZER_RESERVE(t->cache_keys, t->cache_keys.n + n) != NUMLA_STATUS_OK ||
        NUMLA_TOKENIZER_RESERVE(t->cache_vals, t->cache_vals.n + nid) != NUMLA_STATUS_OK) {
        numla_error_clear(); /* the cache is an optimisation: skip it when memory is short */
        return;
    }
    uint32_t i = (uint32_t)h & t->cache_mask;
    while (t->cache[i].h)
        i = (i + 1) & t->cache_mask;
    t->cache[i] = (struct numla_tokenizer_cache_ent){h, (uint32_t)t->cache_keys.n, (uint32_t)n,
                                               (uint32_t)t->cache_vals.n, (uint32_t)nid};
    if (n)
        memcpy(t->cache_keys.p + t->cache_keys.n, w, n);
    t->cache_keys.n += n;
    if (nid)
        memcpy(t->cache_vals.p + t->cache_vals.n, ids, nid * sizeof *ids);
    t->cache_vals.n += nid;
    t->cache_used++;
}

/* tiktoken's byte-pair merge of one piece (t->tiktoken; scratch sized for n by the caller):
 * a piece that is a token is that token; else, from single bytes, repeatedly join the adjacent
 * pair of parts whose concatenated bytes are a token of the lowest rank, leftmost on ties. Done
 * through a heap of (rank, left part) so long pieces cost n log n; a heap entry is stale once its
 * left part is gone or the part after it no longer ends where the entry's pair did. */
static numla_status numla_tokenizer_tiktoken_bpe(numla_tokenizer *t, const uint8_t *w, size_t n)
{
    int32_t whole = numla_tokenizer_vocab_find(t, (const char *)w, n);
    if (whole >= 0)
        return numla_tokenizer_push_id(t, whole);
    int32_t *id = t->sym_id, *start = t->sym_start, *prev = t->sym_prev, *next = t->sym_next;
    int32_t ns = (int32_t)n;
    for (int32_t i = 0; i < ns; i++) {
        id[i] = t->byte_id[w[i]];
        start[i] = i;
        prev[i] = i - 1;
        next[i] = i + 1 < ns ? i + 1 : -1;
    }
    size_t hn = 0;
    numla_tokenizer_merge *heap = t->heap;
#define NUMLA_TT_END(j) ((j) >= 0 ? (next[j] >= 0 ? start[next[j]] : ns) : ns)
    for (int32_t i = 0; i + 1 < ns; i++) {
        int32_t r = numla_tokenizer_vocab_find(t, (const char *)w + i, 2);
        if (r >= 0)
            numla_tokenizer_heap_push(heap, &hn, (numla_tokenizer_merge){r, i, i + 2});
    }
    while (hn > 0) {
        numla_tokenizer_merge m = numla_tokenizer_heap_pop(heap, &hn);
        int32_t p = m.pos, q = id[p] >= 0 ? next[p] : -1;
        if (q < 0 || NUMLA_TT_END(q) != m.new_id)
            continue;
        id[p] = m.rank;
        id[q] = -1;
        next[p] = next[q];
        if (next[q] >= 0)
            prev[next[q]] = p;
        /* the pairs with the part before p and after p changed */
        if (prev[p] >= 0) {
            int32_t a = prev[p], e = NUMLA_TT_END(p);
            int32_t r = numla_tokenizer_vocab_find(t, (const char *)w + start[a],
                                                   (size_t)(e - start[a]));
            if (r >= 0)
                numla_tokenizer_heap_push(heap, &hn, (numla_tokenizer_merge){r, a, e});
        }
        if (next[p] >= 0) {
            int32_t e = NUMLA_TT_END(next[p]);
            int32_t r = numla_tokenizer_vocab_find(t, (const char *)w + start[p],
                                                   (size_t)(e - start[p]));
            if (r >= 0)
                numla_tokenizer_heap_push(heap, &hn, (numla_tokenizer_merge){r, p, e});
        }
    }
#undef NUMLA_TT_END
    for (int32_t i = 0; i >= 0; i = next[i])
        NUMLA_CHECK(numla_tokenizer_push_id(t, id[i]));
    return NUMLA_STATUS_OK;
}

/* BPE of one pre-tokenized piece (raw bytes; the byte-level mapping is byte_id[]). Merges the
 * lowest-ranked adjacent pair first, leftmost on ties, through a heap over a linked list of
 * symbols; stale heap entries are skipped when popped. */
static numla_status numla_tokenizer_bpe(numla_tokenizer *t, const uint8_t *w, size_t n)
{
    uint64_t h = 0;
    if (n <= NUMLA_TOKENIZER_CACHE_MAX_WORD) {
        h = numla_tokenizer_hash(w, n) | 1;
        uint32_t i = (uint32_t)h & t->cache_mask;
        while (t->cache[i].h) {
            const struct numla_tokenizer_cache_ent *e = &t->cache[i];
            if (e->h == h && e->klen == n && memcmp(t->cache_keys.p + e->koff, w, n) == 0) {
                NUMLA_CHECK(NUMLA_TOKENIZER_RESERVE(t->ids, t->ids.n + e->vn + 1));
                if (e->vn)
                    memcpy(t->ids.p + t->ids.n, t->cache_vals.p + e->voff, e->vn * sizeof(int32_t));
                t->ids.n += e->vn;
                return NUMLA_STATUS_OK;
            }
            i = (i + 1) & t->cache_mask;
        }
    }
    size_t first = t->ids.n;
    if (t->ignore_merges) {
        NUMLA_CHECK(NUMLA_TOKENIZER_RESERVE(t->mapped, 2 * n));
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            uint32_t cp = numla_tokenizer_byte_cp(w[i]);
            if (cp < 0x80)
                t->mapped.p[m++] = (char)cp;
            else {
                t->mapped.p[m++] = (char)(0xc0 | (cp >> 6));
                t->mapped.p[m++] = (char)(0x80 | (cp & 0x3f));
            }
        }
        int32_t id = numla_tokenizer_vocab_find(t, t->mapped.p, m);
        if (id >= 0) {
            NUMLA_CHECK(numla_tokenizer_push_id(t, id));
            goto cache;
        }
    }
    if (n > t->sym_cap) {
        size_t c = n < 64 ? 64 : 2 * n;
        int32_t *a = realloc(t->sym_id, c * sizeof *a);
        if (a)
            t->sym_id = a;
        int32_t *b = realloc(t->sym_prev, c * sizeof *b);
        if (b)
            t->sym_prev = b;
        int32_t *d = realloc(t->sym_next, c * sizeof *d);
        if (d)
            t->sym_next = d;
        int32_t *st = realloc(t->sym_start, c * sizeof *st);
        if (st)
            t->sym_start = st;
        numla_tokenizer_merge *hp = realloc(t->heap, (3 * c + 4) * sizeof *hp);
        if (hp)
            t->heap = hp;
        if (!a || !b || !d || !st || !hp)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for a %zu-byte word", n);
        t->sym_cap = c;
        t->heap_cap = 3 * c + 4;
    }
    if (t->tiktoken) {
        NUMLA_CHECK(numla_tokenizer_tiktoken_bpe(t, w, n));
        goto cache;
    }
    int32_t *id = t->sym_id, *prev = t->sym_prev, *next = t->sym_next;
    int32_t ns = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t s = t->byte_id[w[i]];
        if (s < 0)
            s = t->unk_id;
        if (s < 0)
            continue; /* no byte token and no unk: the reference drops the byte too */
        id[ns] = s;
        prev[ns] = ns - 1;
        next[ns] = ns + 1;
        ns++;
    }
    if (ns == 0)
        goto cache;
    next[ns - 1] = -1;
    size_t hn = 0;
    numla_tokenizer_merge *heap = t->heap;
    int32_t rank, nid;
    for (int32_t i = 0; i + 1 < ns; i++)
        if (numla_tokenizer_merge_get(t, id[i], id[i + 1], &rank, &nid))
            numla_tokenizer_heap_push(heap, &hn, (numla_tokenizer_merge){rank, i, nid});
    while (hn > 0) {
        numla_tokenizer_merge m = numla_tokenizer_heap_pop(heap, &hn);
        int32_t p = m.pos, q = next[p];
        if (id[p] < 0 || q < 0)
            continue;
        if (!numla_tokenizer_merge_get(t, id[p], id[q], &rank, &nid) || nid != m.new_id)
            continue;
        id[p] = nid;
        id[q] = -1;
        next[p] = next[q];
        if (next[q] >= 0)
            prev[next[q]] = p;
        if (prev[p] >= 0 && numla_tokenizer_merge_get(t, id[prev[p]], id[p], &rank, &nid))
            numla_tokenizer_heap_push(heap, &hn, (numla_tokenizer_merge){rank, prev[p], nid});
        if (next[p] >= 0 && numla_tokenizer_merge_get(t, id[p], id[next[p]], &rank, &nid))
            numla_tokenizer_heap_push(heap, &hn, (numla_tokenizer_merge){rank, p, nid});
    }
    for (int32_t i = 0; i >= 0; i = next[i])
        NUMLA_CHECK(numla_tokenizer_push_id(t, id[i]));
cache:
    if (h)
        numla_tokenizer_cache_put(t, h, w, n, t->ids.p + first, t->ids.n - first);
    return NUMLA_STATUS_OK;
}

/* ---- encode ------------------------------------------------------------------------------- */

/* Pre-tokenize and BPE one normalized stretch of text that holds no added token. */
static numla_status numla_tokenizer_encode_text(numla_tokenizer *t, const char *s, size_t len)
{
    if (len == 0)
        return NUMLA_STATUS_OK;
    NUMLA_CHECK(NUMLA_TOKENIZER_RESERVE(t->arena, len));
    memcpy(t->arena.p, s, len);
    t->arena.n = len;
    t->pieces.n = 0;
    NUMLA_CHECK(numla_tokenizer_push_span(t, &t->pieces, 0, len, 0));
    for (int k = 0; k < t->n_pt; k++) {
        numla_tokenizer_pretok *p = &t->pt[k];
        t->pieces2.n = 0;
        for (size_t i = 0; i < t->pieces.n; i++) {
            numla_tokenizer_span pc = t->pieces.p[i];
            switch (p->kind) {
            case NUMLA_TOKENIZER_PT_SPLIT:
                NUMLA_CHECK(numla_tokenizer_find_regex(t, &p->re, t->arena.p + pc.a, pc.b - pc.a));
                NUMLA_CHECK(numla_tokenizer_apply(t, p->behavior, p->invert, pc.a));
                break;
            case NUMLA_TOKENIZER_PT_DIGITS:
                NUMLA_CHECK(numla_tokenizer_find_digits(t, t->arena.p + pc.a, pc.b - pc.a));
                NUMLA_CHECK(numla_tokenizer_apply(
                    t, p->individual_digits ? NUMLA_TOKENIZER_ISOLATED : NUMLA_TOKENIZER_CONTIGUOUS, 0, pc.a));
                break;
            case NUMLA_TOKENIZER_PT_BYTELEVEL:
                if (p->add_prefix_space && t->arena.p[pc.a] != ' ') {
                    size_t l = pc.b - pc.a, off = t->arena.n;
                    NUMLA_CHECK(NUMLA_TOKENIZER_RESERVE(t->arena, off + l + 1));
                    t->arena.p[off] = ' ';
                    memcpy(t->arena.p + off + 1, t->arena.p + pc.a, l);
                    t->arena.n = off + l + 1;
                    pc = (numla_tokenizer_span){off, off + l + 1, 0};
                }
                if (p->use_regex) {
                    NUMLA_CHECK(numla_tokenizer_find_regex(t, &p->re, t->arena.p + pc.a, pc.b - pc.a));
                    NUMLA_CHECK(numla_tokenizer_apply(t, NUMLA_TOKENIZER_ISOLATED, 0, pc.a));
                } else {
                    NUMLA_CHECK(numla_tokenizer_push_span(t, &t->pieces2, pc.a, pc.b, 0));
                }
                break;
            }
        }
        numla_tokenizer_span *sw = t->pieces.p;
        size_t swc = t->pieces.cap;
        t->pieces.p = t->pieces2.p;
        t->pieces.cap = t->pieces2.cap;
        t->pieces.n = t->pieces2.n;
        t->pieces2.p = sw;
        t->pieces2.cap = swc;
        t->pieces2.n = 0;
    }
    for (size_t i = 0; i < t->pieces.n; i++)
        NUMLA_CHECK(numla_tokenizer_bpe(t, (const uint8_t *)t->arena.p + t->pieces.p[i].a,
                                  t->pieces.p[i].b - t->pieces.p[i].a));
    return NUMLA_STATUS_OK;
}

/* tiktoken: one stretch of text between special tokens, split by Kimi's pattern (every
 * character belongs to a match, so no text is dropped) and each piece merged. */
static numla_status numla_tokenizer_tiktoken_text(numla_tokenizer *t, const char *s, size_t len)
{
    size_t p = 0;
    while (p < len) {
        size_t e = numla_tokenizer_kimi_match((const uint8_t *)s, len, p);
        NUMLA_CHECK(numla_tokenizer_bpe(t, (const uint8_t *)s + p, e - p));
        p = e;
    }
    return NUMLA_STATUS_OK;
}

/* One stretch of input between non-normalized added tokens: normalize, split on the
 * normalized added tokens, encode the rest. */
static numla_status numla_tokenizer_encode_segment(numla_tokenizer *t, const char *s, size_t len)
{
    utf8proc_uint8_t *nfc = NULL;
    if (t->nfc && len > 0) {
        utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len,
                                          &nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (r < 0)
            NUMLA_FAIL(NUMLA_STATUS_INTERNAL, "NFC normalization failed: %s",
                       utf8proc_errmsg(r));
        s = (const char *)nfc;
        len = (size_t)r;
    }
    numla_status st = numla_tokenizer_split_added(t, &t->norm, s, len, &t->seg_norm);
    for (size_t i = 0; st == NUMLA_STATUS_OK && i < t->seg_norm.n; i++) {
        numla_tokenizer_span g = t->seg_norm.p[i];
        if (g.m >= 0)
            st = numla_tokenizer_push_id(t, t->added[g.m].id);
        else
            st = numla_tokenizer_encode_text(t, s + g.a, g.b - g.a);
    }
    free(nfc);
    NUMLA_CHECK(st);
    return NUMLA_STATUS_OK;
}

numla_status numla_tokenizer_encode(numla_tokenizer *t, const char *text, size_t len,
                                    int add_special, int32_t **ids, int64_t *n)
{
    *ids = NULL;
    *n = 0;
    if (!t || (!text && len > 0))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_tokenizer_encode: NULL tokenizer or text");
    int64_t bad = numla_utf8_invalid_offset(text, len);
    if (bad >= 0)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "text is not valid UTF-8 at byte offset %lld (0x%02x)",
                   (long long)bad, (unsigned)(uint8_t)text[bad]);
    t->ids.n = 0;
    if (add_special) {
        if (t->has_template)
            for (int i = 0; i < t->n_tmpl_pre; i++)
                NUMLA_CHECK(numla_tokenizer_push_id(t, t->tmpl_pre[i]));
        else if (t->add_bos)
            NUMLA_CHECK(numla_tokenizer_push_id(t, t->bos));
    }
    NUMLA_CHECK(numla_tokenizer_split_added(t, &t->raw, text, len, &t->seg_raw));
    for (size_t i = 0; i < t->seg_raw.n; i++) {
        numla_tokenizer_span g = t->seg_raw.p[i];
        if (g.m >= 0)
            NUMLA_CHECK(numla_tokenizer_push_id(t, t->added[g.m].id));
        else if (t->tiktoken)
            NUMLA_CHECK(numla_tokenizer_tiktoken_text(t, text + g.a, g.b - g.a));
        else
            NUMLA_CHECK(numla_tokenizer_encode_segment(t, text + g.a, g.b - g.a));
    }
    if (add_special) {
        if (t->has_template)
            for (int i = 0; i < t->n_tmpl_post; i++)
                NUMLA_CHECK(numla_tokenizer_push_id(t, t->tmpl_post[i]));
        else if (t->add_eos)
            NUMLA_CHECK(numla_tokenizer_push_id(t, t->eos));
    }
    *ids = malloc((t->ids.n ? t->ids.n : 1) * sizeof **ids);
    if (!*ids)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for %zu ids", t->ids.n);
    if (t->ids.n)
        memcpy(*ids, t->ids.p, t->ids.n * sizeof **ids);
    *n = (int64_t)t->ids.n;
    return NUMLA_STATUS_OK;
}

/* ---- decode ------------------------------------------------------------------------------- */

/* Convert bytes to UTF-8 as Rust's String::from_utf8_lossy: each maximal invalid subpart becomes
 * one U+FFFD. Writes to out (room for 3 * n bytes); returns the bytes consumed, which is n when
 * final, else stops before an unfinished (still possibly valid) character at the end. */
static size_t numla_tokenizer_lossy(const uint8_t *s, size_t n, char *out, size_t *olen, int final)
{
    size_t i = 0, o = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            out[o++] = (char)c;
            i++;
            continue;
        }
        int need = 0;
        uint8_t lo = 0x80, hi = 0xbf;
        if (c >= 0xc2 && c <= 0xdf)
            need = 1;
        else if (c >= 0xe0 && c <= 0xef) {
            need = 2;
            lo = c == 0xe0 ? 0xa0 : 0x80;
            hi = c == 0xed ? 0x9f : 0xbf;
        } else if (c >= 0xf0 && c <= 0xf4) {
            need = 3;
            lo = c == 0xf0 ? 0x90 : 0x80;
            hi = c == 0xf4 ? 0x8f : 0xbf;
        }
        size_t j = i + 1;
        int k = 0, bad = need == 0;
        while (!bad && k < need) {
            if (j >= n) {
                if (!final) {
                    *olen = o;
                    return i;
                }
                bad = 1;
                break;
            }
            uint8_t d = s[j];
            if (d < (k == 0 ? lo : 0x80) || d > (k == 0 ? hi : 0xbf)) {
                bad = 1;
                break;
            }
            j++;
            k++;
        }
        if (bad) {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
        } else {
            memcpy(out + o, s + i, j - i);
            o += j - i;
        }
        i = j;
    }
    *olen = o;
    return n;
}

const uint8_t *numla_tokenizer_token_bytes(const numla_tokenizer *t, int32_t id, size_t *len)
{
    *len = 0;
    if (id < 0 || id >= t->n_ids || !t->tok[id])
        return NULL;
    *len = t->dec_len[id];
    return t->dec_pool + t->dec_off[id];
}

numla_status numla_tokenizer_decode(const numla_tokenizer *t, const int32_t *ids, int64_t n,
                                    int skip_special, char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    size_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_ids || !t->tok[ids[i]])
            NUMLA_FAIL(NUMLA_STATUS_OUT_OF_RANGE, "token id %d (position %lld) is not in the "
                                                  "vocabulary of %lld", (int)ids[i],
                       (long long)i, (long long)t->n_ids);
        if (!(skip_special && t->special[ids[i]] == 1))
            total += t->dec_len[ids[i]];
    }
    uint8_t *raw = malloc(total + 1);
    char *out = malloc(3 * total + 1);
    if (!raw || !out) {
        free(raw);
        free(out);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory to decode %lld ids", (long long)n);
    }
    size_t o = 0;
    for (int64_t i = 0; i < n; i++)
        if (!(skip_special && t->special[ids[i]] == 1)) {
            memcpy(raw + o, t->dec_pool + t->dec_off[ids[i]], t->dec_len[ids[i]]);
            o += t->dec_len[ids[i]];
        }
    numla_tokenizer_lossy(raw, total, out, len, 1);
    out[*len] = 0;
    free(raw);
    *text = out;
    return NUMLA_STATUS_OK;
}

/* ---- streaming decoder -------------------------------------------------------------------- */

struct numla_tokenizer_stream {
    const numla_tokenizer *t;
    int skip_special;
    uint8_t *pend;  /* bytes not yet emitted (an unfinished character), then the new token's */
    size_t npend, pend_cap;
    char *out;
    size_t out_cap;
};

numla_status numla_tokenizer_stream_create(const numla_tokenizer *t, int skip_special,
                                           numla_tokenizer_stream **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for a decode stream");
    (*out)->t = t;
    (*out)->skip_special = skip_special;
    return NUMLA_STATUS_OK;
}

void numla_tokenizer_stream_destroy(numla_tokenizer_stream **s)
{
    if (!s || !*s)
        return;
    free((*s)->pend);
    free((*s)->out);
    free(*s);
    *s = NULL;
}

static numla_status numla_tokenizer_stream_emit(numla_tokenizer_stream *s, int final,
                                          const char **piece, size_t *len)
{
    NUMLA_CHECK(numla_tokenizer_reserve((void **)&s->out, &s->out_cap, 3 * s->npend + 1, 1));
    size_t used = s->npend ? numla_tokenizer_lossy(s->pend, s->npend, s->out, len, final) : 0;
    if (!s->npend)
        *len = 0;
    if (used < s->npend)
        memmove(s->pend, s->pend + used, s->npend - used);
    s->npend -= used;
    s->out[*len] = 0;
    *piece = s->out;
    return NUMLA_STATUS_OK;
}

numla_status numla_tokenizer_stream_push(numla_tokenizer_stream *s, int32_t id,
                                         const char **piece, size_t *len)
{
    const numla_tokenizer *t = s->t;
    *piece = "";
    *len = 0;
    if (id < 0 || id >= t->n_ids || !t->tok[id])
        NUMLA_FAIL(NUMLA_STATUS_OUT_OF_RANGE, "token id %d is not in the vocabulary of %lld",
                   (int)id, (long long)t->n_ids);
    if (s->skip_special && t->special[id] == 1)
        return NUMLA_STATUS_OK;
    NUMLA_CHECK(numla_tokenizer_reserve((void **)&s->pend, &s->pend_cap, s->npend + t->dec_len[id] + 1, 1));
    memcpy(s->pend + s->npend, t->dec_pool + t->dec_off[id], t->dec_len[id]);
    s->npend += t->dec_len[id];
    NUMLA_CHECK(numla_tokenizer_stream_emit(s, 0, piece, len));
    return NUMLA_STATUS_OK;
}

numla_status numla_tokenizer_stream_flush(numla_tokenizer_stream *s, const char **piece,
                                          size_t *len)
{
    NUMLA_CHECK(numla_tokenizer_stream_emit(s, 1, piece, len));
    return NUMLA_STATUS_OK;
}

/* ---- queries ------------------------------------------------------------------------------ */

int32_t numla_tokenizer_bos(const numla_tokenizer *t) { return t->bos; }
int32_t numla_tokenizer_eos(const numla_tokenizer *t) { return t->eos; }
int64_t numla_tokenizer_vocab_size(const numla_tokenizer *t) { return t->n_ids; }

const char *numla_tokenizer_token(const numla_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_ids ? t->tok[id] : NULL;
}

int32_t numla_tokenizer_token_id(const numla_tokenizer *t, const char *token)
{
    size_t n = strlen(token);
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].len == n && memcmp(t->added[i].content, token, n) == 0)
            return t->added[i].id;
    return numla_tokenizer_vocab_find(t, token, n);
}

int numla_tokenizer_is_special(const numla_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_ids && t->special[id];
}

int numla_tokenizer_keep_in_text(numla_tokenizer *t, const char *token)
{
    const int32_t id = numla_tokenizer_token_id(t, token);
    if (id < 0)
        return 0;
    if (t->special[id]) /* 2: special, decoded all the same */
        t->special[id] = 2;
    return 1;
}
