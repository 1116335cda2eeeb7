/* engine/text/tokenizer_unicode.c — general-category classes (\p{L}, \p{N}, \d, ...) in
 * pre-tokenizer regexes follow Unicode 16.0, the version of the reference `tokenizers`' tables.
 *
 * An older system PCRE2 (Debian 12: PCRE2 10.42 has Unicode 14) and utf8proc (2.8: Unicode 15.0)
 * leave characters assigned since then (🩷 🫨 🪿 🛜, CJK Extensions H and I, Garay, ...)
 * unassigned, where the reference sees letters, digits or symbols. The categories used here are
 * utf8proc's, with unicode_newer.h (generated from the UCD) laid over them while utf8proc's Unicode
 * is older than the table's. When PCRE2's Unicode is older than that, each general-category
 * escape in a pattern is rewritten as PCRE2's own class plus the code points put in the category
 * here and not by PCRE2 (minus those PCRE2 puts there and this file does not). The differences
 * are found at load by testing every assigned code point against PCRE2's class, once per category
 * per process. Escapes other than general categories (scripts, \w, long names) are left to
 * PCRE2. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "common/strbuf.h"
#include "engine/text/tokenizer_internal.h"
#include "engine/text/unicode_newer.h"

/* utf8proc's category codes, in utf8proc_category_t order (index 0: Cn). */
static const char *const unicode_gc[] = {"Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me",
                                         "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf",
                                         "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc",
                                         "Cf", "Cs", "Co"};
enum { UNICODE_N_GC = sizeof unicode_gc / sizeof unicode_gc[0] };

/* A set of code points as sorted, disjoint ranges. */
typedef struct cp_ranges {
    uint32_t (*r)[2];
    size_t n, cap;
} cp_ranges;

/* One general-category class as PCRE2 names it ("L", "Nd", "L&") and how it differs from the
 * categories used here. */
typedef struct unicode_class {
    char name[4];
    uint32_t gc_mask; /* bit k: utf8proc category k is in the class */
    int ready;        /* 1: add/remove computed; -1: could not be (left to PCRE2) */
    cp_ranges add;    /* in the class here, not by PCRE2 */
    cp_ranges remove; /* in the class by PCRE2, not here */
    cp_ranges full;   /* the whole class here (built on demand) */
} unicode_class;

static unicode_class unicode_classes[64];
static int unicode_n_classes;
static pthread_mutex_t unicode_lock = PTHREAD_MUTEX_INITIALIZER;

static int ranges_add(cp_ranges *s, uint32_t cp)
{
    if (s->n && s->r[s->n - 1][1] + 1 == cp) {
        s->r[s->n - 1][1] = cp;
        return 1;
    }
    if (s->n == s->cap) {
        size_t c = s->cap ? 2 * s->cap : 64;
        uint32_t(*nr)[2] = realloc(s->r, c * sizeof *nr);
        if (!nr)
            return 0;
        s->r = nr;
        s->cap = c;
    }
    s->r[s->n][0] = s->r[s->n][1] = cp;
    s->n++;
    return 1;
}

static int unicode_version_less(const char *a, const char *b)
{
    int x[3] = {0}, y[3] = {0};
    sscanf(a, "%d.%d.%d", &x[0], &x[1], &x[2]);
    sscanf(b, "%d.%d.%d", &y[0], &y[1], &y[2]);
    for (int i = 0; i < 3; i++)
        if (x[i] != y[i])
            return x[i] < y[i];
    return 0;
}

/* 1 when unicode_newer.h is newer than utf8proc's tables, so its categories are laid over them. */
static int unicode_newer_on;
static pthread_once_t unicode_newer_once = PTHREAD_ONCE_INIT;

static void unicode_newer_init(void)
{
    unicode_newer_on =
        unicode_version_less(utf8proc_unicode_version(), NUMLA_UNICODE_NEWER_VERSION);
}

static int unicode_newer_applies(void)
{
    pthread_once(&unicode_newer_once, unicode_newer_init);
    return unicode_newer_on;
}

/* 1 when the categories used here (utf8proc's, or unicode_newer.h's where newer) are newer than
 * PCRE2's tables, so rewriting pays. */
static int unicode_rewrite_needed(void)
{
    char pv[32] = "";
    if (pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, pv) < 0)
        return 0;
    const char *ours =
        unicode_newer_applies() ? NUMLA_UNICODE_NEWER_VERSION : utf8proc_unicode_version();
    return unicode_version_less(pv, ours);
}

utf8proc_category_t numla_tokenizer_unicode_category(uint32_t cp)
{
    if (unicode_newer_applies()) {
        size_t lo = 0, hi = sizeof numla_unicode_newer / sizeof numla_unicode_newer[0];
        while (lo < hi) { /* the first range ending at or after cp */
            size_t mid = lo + (hi - lo) / 2;
            if (numla_unicode_newer[mid].last < cp)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo < sizeof numla_unicode_newer / sizeof numla_unicode_newer[0] &&
            numla_unicode_newer[lo].first <= cp)
            return numla_unicode_newer[lo].gc;
    }
    return utf8proc_category((utf8proc_int32_t)cp);
}

/* The utf8proc categories of a PCRE2 general-category name (after loose matching: case, spaces,
 * '_' and '-' ignored), 0 when the name is not one. */
static uint32_t unicode_gc_mask(const char *name, size_t len, char canon[4])
{
    char s[8];
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = name[i];
        if (ch == ' ' || ch == '_' || ch == '-')
            continue;
        if (k == sizeof s - 1)
            return 0;
        s[k++] = ch;
    }
    s[k] = 0;
    if (k == 0 || k > 2)
        return 0;
    char major = (char)(s[0] >= 'a' && s[0] <= 'z' ? s[0] - 32 : s[0]);
    if (k == 2 && s[1] == '&' && major == 'L') {
        strcpy(canon, "L&");
        return 1u << UTF8PROC_CATEGORY_LU | 1u << UTF8PROC_CATEGORY_LL | 1u << UTF8PROC_CATEGORY_LT;
    }
    char minor = k == 2 ? (char)(s[1] >= 'A' && s[1] <= 'Z' ? s[1] + 32 : s[1]) : 0;
    uint32_t mask = 0;
    for (int g = 0; g < UNICODE_N_GC; g++)
        if (unicode_gc[g][0] == major && (!minor || unicode_gc[g][1] == minor))
            mask |= 1u << g;
    if (!mask)
        return 0;
    canon[0] = major;
    canon[1] = minor;
    canon[2] = 0;
    return mask;
}

static int unicode_in(const unicode_class *c, uint32_t cp)
{
    return (c->gc_mask >> numla_tokenizer_unicode_category(cp)) & 1;
}

/* Compare PCRE2's class with ours over every code point assigned here (a code point PCRE2 knows
 * is assigned in every later Unicode too). Called under unicode_lock. */
static void unicode_class_compute(unicode_class *c)
{
    char pat[16];
    snprintf(pat, sizeof pat, "\\p{%s}", c->name);
    int err;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &err, &off, NULL);
    pcre2_match_data *md = re ? pcre2_match_data_create_from_pattern(re, NULL) : NULL;
    c->ready = -1;
    if (!re || !md)
        goto done;
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    for (uint32_t cp = 0; cp < 0x110000; cp++) {
        if (cp == 0xd800)
            cp = 0xe000;
        utf8proc_category_t k = numla_tokenizer_unicode_category(cp);
        if (k == UTF8PROC_CATEGORY_CN || k == UTF8PROC_CATEGORY_CO)
            continue; /* unassigned or private use: the same in both tables */
        utf8proc_uint8_t b[4];
        utf8proc_ssize_t n = utf8proc_encode_char((utf8proc_int32_t)cp, b);
        int by_pcre = pcre2_match(re, b, (PCRE2_SIZE)n, 0, 0, md, NULL) >= 0;
        int by_us = unicode_in(c, cp);
        if (by_us != by_pcre && !ranges_add(by_us ? &c->add : &c->remove, cp))
            goto done;
    }
    c->ready = 1;
done:
    pcre2_match_data_free(md);
    pcre2_code_free(re);
}

/* The class of `mask`, computed on first use; NULL when it cannot be (out of memory, or PCRE2
 * refuses the name): the escape is then left as written. */
static const unicode_class *unicode_class_get(const char *canon, uint32_t mask)
{
    pthread_mutex_lock(&unicode_lock);
    unicode_class *c = NULL;
    for (int i = 0; i < unicode_n_classes; i++)
        if (!strcmp(unicode_classes[i].name, canon))
            c = &unicode_classes[i];
    if (!c && unicode_n_classes < (int)(sizeof unicode_classes / sizeof unicode_classes[0])) {
        c = &unicode_classes[unicode_n_classes++];
        snprintf(c->name, sizeof c->name, "%s", canon);
        c->gc_mask = mask;
        unicode_class_compute(c);
        if (c->ready == 1) {
            for (uint32_t cp = 0; cp < 0x110000 && c->ready == 1; cp++)
                if (unicode_in(c, cp) && !(cp >= 0xd800 && cp < 0xe000) &&
                    !ranges_add(&c->full, cp))
                    c->ready = -1;
        }
    }
    pthread_mutex_unlock(&unicode_lock);
    return c && c->ready == 1 ? c : NULL;
}

/* ---- output buffer ---- */

/* Appends whose failure b->oom records: the rewrite checks once at the end. */
static void buf_put(numla_strbuf *b, const char *s, size_t n) { numla_strbuf_append(b, s, n); }

static void buf_str(numla_strbuf *b, const char *s) { numla_strbuf_puts(b, s); }

/* Ranges as class items: \x{A}-\x{B} ... (no brackets). complement: the ranges not in s. */
static void buf_ranges(numla_strbuf *b, const cp_ranges *s, int complement)
{
    char item[40];
    uint32_t next = 0;
    for (size_t i = 0; i <= s->n; i++) {
        uint32_t lo, hi;
        if (complement) {
            lo = next;
            hi = i < s->n ? (s->r[i][0] ? s->r[i][0] - 1 : 0) : 0x10ffff;
            int empty = i < s->n ? s->r[i][0] == next : next > 0x10ffff;
            if (i < s->n)
                next = s->r[i][1] + 1;
            if (empty)
                continue;
        } else {
            if (i == s->n)
                break;
            lo = s->r[i][0];
            hi = s->r[i][1];
        }
        /* surrogates are not characters in UTF mode: step around them */
        if (lo < 0xd800 && hi >= 0xd800 && hi < 0xe000)
            hi = 0xd7ff;
        if (lo >= 0xd800 && lo < 0xe000)
            lo = 0xe000;
        if (lo > hi)
            continue;
        if (lo < 0xd800 && hi >= 0xe000) {
            snprintf(item, sizeof item, "\\x{%x}-\\x{d7ff}\\x{e000}-\\x{%x}", lo, hi);
        } else if (lo == hi) {
            snprintf(item, sizeof item, "\\x{%x}", lo);
        } else {
            snprintf(item, sizeof item, "\\x{%x}-\\x{%x}", lo, hi);
        }
        buf_str(b, item);
    }
}

/* Write the class `neg ? \P{name} : \p{name}` with the membership used here; in_class: inside
 * [...], where only class items may go. */
static void buf_class(numla_strbuf *b, const unicode_class *c, int neg, int in_class)
{
    /* the code points to add to PCRE2's class and to take out of it */
    const cp_ranges *plus = neg ? &c->remove : &c->add;
    const cp_ranges *minus = neg ? &c->add : &c->remove;
    char own[16];
    snprintf(own, sizeof own, "\\%c{%s}", neg ? 'P' : 'p', c->name);
    if (in_class) {
        if (minus->n == 0) {
            buf_str(b, own);
            buf_ranges(b, plus, 0);
        } else { /* a class item cannot subtract: spell the whole class out */
            buf_ranges(b, &c->full, neg);
        }
        return;
    }
    if (plus->n == 0 && minus->n == 0) {
        buf_str(b, own);
        return;
    }
    buf_str(b, "(?:");
    if (minus->n) {
        buf_str(b, "(?![");
        buf_ranges(b, minus, 0);
        buf_str(b, "])");
    }
    buf_str(b, "[");
    buf_str(b, own);
    buf_ranges(b, plus, 0);
    buf_str(b, "])");
}

/* Rewrite pat (len bytes) into *out (malloc'd, NUL-terminated; *out = NULL when nothing needs
 * rewriting). Tracks character classes, \Q...\E and POSIX [:name:] so only real escapes are
 * touched. */
numla_status numla_tokenizer_unicode_pattern(const char *pat, size_t len, char **out,
                                             size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    if (!unicode_rewrite_needed())
        return NUMLA_STATUS_OK;
    numla_strbuf b = {0};
    int in_class = 0, changed = 0;
    size_t i = 0;
    while (i < len) {
        char ch = pat[i];
        if (ch == '\\' && i + 1 < len) {
            char e = pat[i + 1];
            if (e == 'Q') { /* quoted run up to \E */
                size_t j = i + 2;
                while (j < len && !(pat[j] == '\\' && j + 1 < len && pat[j + 1] == 'E'))
                    j++;
                j = j < len ? j + 2 : len;
                buf_put(&b, pat + i, j - i);
                i = j;
                continue;
            }
            if (e == 'p' || e == 'P' || e == 'd' || e == 'D') {
                int neg = e == 'P' || e == 'D';
                const char *name = "Nd";
                size_t nlen = 2, end = i + 2;
                if (e == 'p' || e == 'P') {
                    if (i + 2 < len && pat[i + 2] == '{') {
                        size_t close = i + 3;
                        while (close < len && pat[close] != '}')
                            close++;
                        if (close >= len)
                            goto copy; /* let PCRE2 report it */
                        name = pat + i + 3;
                        nlen = close - (i + 3);
                        if (nlen && name[0] == '^') {
                            neg = !neg;
                            name++;
                            nlen--;
                        }
                        end = close + 1;
                    } else if (i + 2 < len) {
                        name = pat + i + 2;
                        nlen = 1;
                        end = i + 3;
                    } else {
                        goto copy;
                    }
                }
                char canon[4];
                uint32_t mask = unicode_gc_mask(name, nlen, canon);
                const unicode_class *c = mask ? unicode_class_get(canon, mask) : NULL;
                if (!c)
                    goto copy_n;
                buf_class(&b, c, neg, in_class);
                changed = 1;
                i = end;
                continue;
            copy_n:
                buf_put(&b, pat + i, end - i);
                i = end;
                continue;
            }
        copy:
            buf_put(&b, pat + i, 2);
            i += 2;
            continue;
        }
        if (!in_class && ch == '[') {
            in_class = 1;
            size_t j = i + 1;
            if (j < len && pat[j] == '^')
                j++;
            if (j < len && pat[j] == ']') /* a leading ] is literal */
                j++;
            buf_put(&b, pat + i, j - i);
            i = j;
            continue;
        }
        if (in_class && ch == '[' && i + 1 < len && pat[i + 1] == ':') { /* [:alpha:] */
            const char *end = NULL;
            for (size_t j = i + 2; j + 1 < len; j++)
                if (pat[j] == ':' && pat[j + 1] == ']') {
                    end = pat + j + 2;
                    break;
                }
            if (end) {
                buf_put(&b, pat + i, (size_t)(end - (pat + i)));
                i = (size_t)(end - pat);
                continue;
            }
        }
        if (in_class && ch == ']')
            in_class = 0;
        buf_put(&b, pat + i, 1);
        i++;
    }
    if (b.oom) {
        numla_strbuf_free(&b);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for a rewritten regex");
    }
    if (!changed) {
        numla_strbuf_free(&b);
        return NUMLA_STATUS_OK;
    }
    *out_len = b.len;
    *out = numla_strbuf_take(&b);
    return NUMLA_STATUS_OK;
}
