/* engine/serving/grammar_regex.c — an ECMA-262 pattern → syntax tree → NFA over UTF-8 bytes
 * (Thompson) → DFA (subset construction over byte classes), dead states pruned (see
 * grammar_regex.h). */
#include "engine/serving/grammar_regex.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    MAX_AST = 1 << 16,   /* syntax tree nodes */
    MAX_NFA = 1 << 18,   /* NFA states (a counted repeat copies its body) */
    MAX_REPEAT = 1000,   /* {n,m} bounds */
    MAX_NEST = 200,      /* group nesting */
    CP_MAX = 0x10FFFF
};

/* ---------------------------------------------------------------- code point sets ------ */

typedef struct cprange {
    uint32_t lo, hi;
} cprange;

typedef struct cpset {
    cprange *r;
    int32_t n, cap;
} cpset;

static int set_add(cpset *s, uint32_t lo, uint32_t hi)
{
    if (s->n == s->cap) {
        int32_t c = s->cap ? s->cap * 2 : 8;
        cprange *q = realloc(s->r, (size_t)c * sizeof *q);
        if (!q)
            return 0;
        s->r = q;
        s->cap = c;
    }
    s->r[s->n++] = (cprange){lo, hi};
    return 1;
}

static int cmp_range(const void *a, const void *b)
{
    const cprange *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorted, merged, surrogates removed. */
static int set_norm(cpset *s)
{
    if (s->n > 1)
        qsort(s->r, (size_t)s->n, sizeof *s->r, cmp_range);
    int32_t k = 0;
    for (int32_t i = 0; i < s->n; i++) {
        if (k > 0 && s->r[i].lo <= s->r[k - 1].hi + 1) {
            if (s->r[i].hi > s->r[k - 1].hi)
                s->r[k - 1].hi = s->r[i].hi;
        } else
            s->r[k++] = s->r[i];
    }
    s->n = k;
    /* cut D800-DFFF */
    for (int32_t i = 0; i < s->n; i++) {
        cprange r = s->r[i];
        if (r.hi < 0xD800 || r.lo > 0xDFFF)
            continue;
        if (r.lo < 0xD800 && r.hi > 0xDFFF) {
            s->r[i].hi = 0xD7FF;
            if (!set_add(s, 0xE000, r.hi))
                return 0;
        } else if (r.lo < 0xD800)
            s->r[i].hi = 0xD7FF;
        else if (r.hi > 0xDFFF)
            s->r[i].lo = 0xE000;
        else
            s->r[i].lo = 1, s->r[i].hi = 0; /* empty: dropped below */
    }
    k = 0;
    for (int32_t i = 0; i < s->n; i++)
        if (s->r[i].lo <= s->r[i].hi)
            s->r[k++] = s->r[i];
    s->n = k;
    if (s->n > 1)
        qsort(s->r, (size_t)s->n, sizeof *s->r, cmp_range);
    return 1;
}

/* The complement over 0..CP_MAX of a normalized set. */
static int set_negate(cpset *s)
{
    cpset o = {0};
    uint32_t next = 0;
    for (int32_t i = 0; i < s->n; i++) {
        if (s->r[i].lo > next && !set_add(&o, next, s->r[i].lo - 1))
            goto fail;
        next = s->r[i].hi + 1;
    }
    if (next <= CP_MAX && !set_add(&o, next, CP_MAX))
        goto fail;
    free(s->r);
    *s = o;
    return set_norm(s);
fail:
    free(o.r);
    return 0;
}

/* ---------------------------------------------------------------- the syntax tree ------ */

enum { A_SET, A_CAT, A_ALT, A_REP, A_BOL, A_EOL, A_EMPTY };

typedef struct anode {
    int32_t kind;
    int32_t kid, next; /* CAT, ALT: first child; children linked by next; REP: kid */
    int32_t min, max;  /* REP: max -1 = unbounded */
    int32_t set;       /* SET: index into sets */
} anode;

typedef struct rparse {
    const uint8_t *p, *end, *start;
    anode *ast;
    int32_t nast, cap_ast;
    cpset *sets;
    int32_t nsets, cap_sets;
    numla_status st;
    char msg[256];
    int nest;
} rparse;

static int rfail(rparse *r, numla_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int rfail(rparse *r, numla_status st, const char *fmt, ...)
{
    if (r->st == NUMLA_STATUS_OK) {
        r->st = st;
        int n = snprintf(r->msg, sizeof r->msg, "at offset %td: ", r->p - r->start);
        va_list ap;
        va_start(ap, fmt);
        if (n > 0 && (size_t)n < sizeof r->msg)
            vsnprintf(r->msg + n, sizeof r->msg - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int32_t anew(rparse *r, int32_t kind)
{
    if (r->nast >= MAX_AST)
        return rfail(r, NUMLA_STATUS_UNSUPPORTED, "the pattern is too long");
    if (r->nast == r->cap_ast) {
        int32_t c = r->cap_ast ? r->cap_ast * 2 : 64;
        anode *q = realloc(r->ast, (size_t)c * sizeof *q);
        if (!q)
            return rfail(r, NUMLA_STATUS_NO_MEMORY, "no memory");
        r->ast = q;
        r->cap_ast = c;
    }
    r->ast[r->nast] = (anode){.kind = kind, .kid = -1, .next = -1, .set = -1};
    return r->nast++;
}

/* A new empty set node; *s is its set. */
static int32_t aset(rparse *r, cpset **s)
{
    int32_t id = anew(r, A_SET);
    if (id < 0)
        return -1;
    if (r->nsets == r->cap_sets) {
        int32_t c = r->cap_sets ? r->cap_sets * 2 : 16;
        cpset *q = realloc(r->sets, (size_t)c * sizeof *q);
        if (!q)
            return rfail(r, NUMLA_STATUS_NO_MEMORY, "no memory");
        r->sets = q;
        r->cap_sets = c;
    }
    r->sets[r->nsets] = (cpset){0};
    r->ast[id].set = r->nsets;
    *s = &r->sets[r->nsets++];
    return id;
}

/* The next code point of the pattern (UTF-8), -1 at the end or on bad UTF-8 (failed). */
static int32_t next_cp(rparse *r)
{
    if (r->p >= r->end)
        return -1;
    uint8_t c = *r->p;
    int n = c < 0x80 ? 0 : c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2
            : c >= 0xF0 && c <= 0xF4 ? 3 : -1;
    if (n < 0 || r->end - r->p <= n)
        return rfail(r, NUMLA_STATUS_FORMAT, "the pattern is not valid UTF-8");
    uint32_t cp = n == 0 ? c : c & (0x3F >> n);
    for (int i = 1; i <= n; i++) {
        if ((r->p[i] & 0xC0) != 0x80)
            return rfail(r, NUMLA_STATUS_FORMAT, "the pattern is not valid UTF-8");
        cp = cp << 6 | (r->p[i] & 0x3F);
    }
    static const uint32_t min_cp[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > CP_MAX || (cp >= 0xD800 && cp <= 0xDFFF))
        return rfail(r, NUMLA_STATUS_FORMAT, "the pattern is not valid UTF-8");
    r->p += n + 1;
    return (int32_t)cp;
}

static int hex(uint8_t c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int32_t read_hex(rparse *r, int n)
{
    int32_t v = 0;
    if (r->end - r->p < n)
        return -1;
    for (int i = 0; i < n; i++) {
        int h = hex(r->p[i]);
        if (h < 0)
            return -1;
        v = v * 16 + h;
    }
    r->p += n;
    return v;
}

/* The class escapes \d \w \s (negated: upper case) into s. */
static int add_class_escape(cpset *s, uint8_t c)
{
    static const uint32_t digit[] = {'0', '9'};
    static const uint32_t word[] = {'0', '9', 'A', 'Z', '_', '_', 'a', 'z'};
    static const uint32_t space[] = {0x09, 0x0D, 0x20, 0x20, 0xA0, 0xA0, 0x1680, 0x1680,
                                     0x2000, 0x200A, 0x2028, 0x2029, 0x202F, 0x202F,
                                     0x205F, 0x205F, 0x3000, 0x3000, 0xFEFF, 0xFEFF};
    const uint32_t *t = c == 'd' || c == 'D' ? digit : c == 'w' || c == 'W' ? word : space;
    const int n = c == 'd' || c == 'D' ? 1 : c == 'w' || c == 'W' ? 4 : 10;
    cpset tmp = {0};
    for (int i = 0; i < n; i++)
        if (!set_add(&tmp, t[2 * i], t[2 * i + 1]))
            goto fail;
    if (!set_norm(&tmp) || (c >= 'A' && c <= 'Z' && !set_negate(&tmp)))
        goto fail;
    for (int32_t i = 0; i < tmp.n; i++)
        if (!set_add(s, tmp.r[i].lo, tmp.r[i].hi))
            goto fail;
    free(tmp.r);
    return 1;
fail:
    free(tmp.r);
    return 0;
}

/* After a backslash: a class escape (adds to *cls, returns -2), or a code point. In a class
 * \b is a backspace. -1: failed. */
static int32_t parse_escape(rparse *r, cpset *cls, int in_class)
{
    if (r->p >= r->end)
        return rfail(r, NUMLA_STATUS_FORMAT, "the pattern ends with a backslash");
    const uint8_t c = *r->p;
    if (strchr("dDwWsS", c) && c) {
        r->p++;
        if (!add_class_escape(cls, c))
            return rfail(r, NUMLA_STATUS_NO_MEMORY, "no memory");
        return -2;
    }
    switch (c) {
    case 't': r->p++; return '\t';
    case 'n': r->p++; return '\n';
    case 'v': r->p++; return '\v';
    case 'f': r->p++; return '\f';
    case 'r': r->p++; return '\r';
    case 'b':
        if (in_class) {
            r->p++;
            return '\b';
        }
        return rfail(r, NUMLA_STATUS_UNSUPPORTED, "the word boundary \\b is not supported");
    case 'B': return rfail(r, NUMLA_STATUS_UNSUPPORTED, "the word boundary \\B is not supported");
    case '0':
        if (r->end - r->p > 1 && r->p[1] >= '0' && r->p[1] <= '9')
            return rfail(r, NUMLA_STATUS_UNSUPPORTED, "octal escapes are not supported");
        r->p++;
        return 0;
    case 'x': {
        r->p++;
        int32_t v = read_hex(r, 2);
        return v >= 0 ? v : rfail(r, NUMLA_STATUS_UNSUPPORTED, "\\x without two hex digits");
    }
    case 'u': {
        r->p++;
        if (r->p < r->end && *r->p == '{')
            return rfail(r, NUMLA_STATUS_UNSUPPORTED, "\\u{...} is not supported");
        int32_t v = read_hex(r, 4);
        if (v < 0)
            return rfail(r, NUMLA_STATUS_UNSUPPORTED, "\\u without four hex digits");
        if (v >= 0xD800 && v <= 0xDBFF && r->end - r->p >= 6 && r->p[0] == '\\' &&
            r->p[1] == 'u') {
            const uint8_t *save = r->p;
            r->p += 2;
            int32_t lo = read_hex(r, 4);
            if (lo >= 0xDC00 && lo <= 0xDFFF)
                return 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
            r->p = save;
        }
        if (v >= 0xD800 && v <= 0xDFFF)
            return rfail(r, NUMLA_STATUS_UNSUPPORTED, "a lone surrogate \\u%04X", (unsigned)v);
        return v;
    }
    case 'c':
        if (r->end - r->p > 1 && ((r->p[1] | 0x20) >= 'a' && (r->p[1] | 0x20) <= 'z')) {
            r->p += 2;
            return r->p[-1] % 32;
        }
        return rfail(r, NUMLA_STATUS_UNSUPPORTED, "\\c without a letter");
    default: break;
    }
    if (c >= '1' && c <= '9')
        return rfail(r, NUMLA_STATUS_UNSUPPORTED, "backreferences are not supported");
    if (c == 'k')
        return rfail(r, NUMLA_STATUS_UNSUPPORTED, "backreferences are not supported");
    if (c == 'p' || c == 'P')
        return rfail(r, NUMLA_STATUS_UNSUPPORTED, "\\p{...} is not supported");
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_')
        return rfail(r, NUMLA_STATUS_UNSUPPORTED, "the escape \\%c is not supported", c);
    return next_cp(r); /* an escaped punctuation or other character: itself */
}

static int32_t parse_class(rparse *r)
{
    cpset *s;
    int32_t id = aset(r, &s);
    if (id < 0)
        return -1;
    const int32_t si = r->ast[id].set;
    int neg = 0;
    if (r->p < r->end && *r->p == '^') {
        neg = 1;
        r->p++;
    }
    for (;;) {
        if (r->p >= r->end)
            return rfail(r, NUMLA_STATUS_FORMAT, "a class '[' without its ']'");
        if (*r->p == ']') {
            r->p++;
            break;
        }
        int32_t lo;
        if (*r->p == '\\') {
            r->p++;
            lo = parse_escape(r, &r->sets[si], 1);
        } else
            lo = next_cp(r);
        if (lo == -1)
            return -1;
        if (lo != -2 && r->end - r->p >= 2 && r->p[0] == '-' && r->p[1] != ']') {
            r->p++;
            int32_t hi;
            if (*r->p == '\\') {
                r->p++;
                hi = parse_escape(r, &r->sets[si], 1);
            } else
                hi = next_cp(r);
            if (hi == -1)
                return -1;
            if (hi == -2) { /* [a-\d]: a, '-' and the class */
                if (!set_add(&r->sets[si], (uint32_t)lo, (uint32_t)lo) ||
                    !set_add(&r->sets[si], '-', '-'))
                    return rfail(r, NUMLA_STATUS_NO_MEMORY, "no memory");
                continue;
            }
            if (hi < lo)
                return rfail(r, NUMLA_STATUS_FORMAT, "a class range out of order");
            if (!set_add(&r->sets[si], (uint32_t)lo, (uint32_t)hi))
                return rfail(r, NUMLA_STATUS_NO_MEMORY, "no memory");
        } else if (lo >= 0 && !set_add(&r->sets[si], (uint32_t)lo, (uint32_t)lo))
            return rfail(r, NUMLA_STATUS_NO_MEMORY, "no memory");
    }
    if (!set_norm(&r->sets[si]) || (neg && !set_negate(&r->sets[si])))
        return rfail(r, NUMLA_STATUS_NO_MEMORY, "no memory");
    return id;
}

static int32_t parse_alt(rparse *r);

/* A quantifier {n}, {n,}, {n,m} at r->p ('{'): 1 and the bounds, 0 when it is not one (the
 * '{' is then a literal). */
static int parse_braces(rparse *r, int32_t *min, int32_t *max)
{
    const uint8_t *q = r->p + 1;
    long a = 0, b = -1;
    int digits = 0;
    while (q < r->end && *q >= '0' && *q <= '9' && digits < 9)
        a = a * 10 + (*q++ - '0'), digits++;
    if (!digits)
        return 0;
    if (q < r->end && *q == ',') {
        q++;
        int d2 = 0;
        long v = 0;
        while (q < r->end && *q >= '0' && *q <= '9' && d2 < 9)
            v = v * 10 + (*q++ - '0'), d2++;
        b = d2 ? v : -1;
    } else
        b = a;
    if (q >= r->end || *q != '}')
        return 0;
    r->p = q + 1;
    *min = (int32_t)a;
    *max = (int32_t)b;
    return 1;
}

static int32_t parse_atom(rparse *r)
{
    const uint8_t c = *r->p;
    if (c == '(') {
        r->p++;
        if (r->end - r->p >= 2 && r->p[0] == '?') {
            if (r->p[1] == ':')
                r->p += 2;
            else if (r->p[1] == '<' && r->end - r->p >= 3 && r->p[2] != '=' && r->p[2] != '!') {
                const uint8_t *gt = memchr(r->p, '>', (size_t)(r->end - r->p));
                if (!gt)
                    return rfail(r, NUMLA_STATUS_FORMAT, "a group name without its '>'");
                r->p = gt + 1;
            } else if (r->p[1] == '=' || r->p[1] == '!' || r->p[1] == '<')
                return rfail(r, NUMLA_STATUS_UNSUPPORTED, "lookaround is not supported");
            else
                return rfail(r, NUMLA_STATUS_UNSUPPORTED, "the group '(?%c' is not supported",
                             r->p[1]);
        }
        if (++r->nest > MAX_NEST)
            return rfail(r, NUMLA_STATUS_UNSUPPORTED, "groups nest too deep");
        int32_t id = parse_alt(r);
        r->nest--;
        if (id < 0)
            return -1;
        if (r->p >= r->end || *r->p != ')')
            return rfail(r, NUMLA_STATUS_FORMAT, "a group '(' without its ')'");
        r->p++;
        return id;
    }
    if (c == '[') {
        r->p++;
        return parse_class(r);
    }
    if (c == '^' || c == '$') {
        r->p++;
        return anew(r, c == '^' ? A_BOL : A_EOL);
    }
    if (c == '*' || c == '+' || c == '?')
        return rfail(r, NUMLA_STATUS_FORMAT, "a quantifier '%c' with nothing to repeat", c);
    cpset *s;
    int32_t id = aset(r, &s);
    if (id < 0)
        return -1;
    const int32_t si = r->ast[id].set;
    int32_t cp;
    if (c == '.') {
        r->p++;
        if (!set_add(&r->sets[si], '\n', '\n') || !set_add(&r->sets[si], '\r', '\r') ||
            !set_add(&r->sets[si], 0x2028, 0x2029) || !set_norm(&r->sets[si]) ||
            !set_negate(&r->sets[si]))
            return rfail(r, NUMLA_STATUS_NO_MEMORY, "no memory");
        return id;
    }
    if (c == '\\') {
        r->p++;
        cp = parse_escape(r, &r->sets[si], 0);
    } else
        cp = next_cp(r);
    if (cp == -1)
        return -1;
    if (cp >= 0 && !set_add(&r->sets[si], (uint32_t)cp, (uint32_t)cp))
        return rfail(r, NUMLA_STATUS_NO_MEMORY, "no memory");
    if (!set_norm(&r->sets[si]))
        return rfail(r, NUMLA_STATUS_NO_MEMORY, "no memory");
    return id;
}

static int32_t parse_repeat(rparse *r)
{
    int32_t id = parse_atom(r);
    while (id >= 0 && r->p < r->end) {
        int32_t min, max;
        const uint8_t c = *r->p;
        if (c == '*')
            min = 0, max = -1, r->p++;
        else if (c == '+')
            min = 1, max = -1, r->p++;
        else if (c == '?')
            min = 0, max = 1, r->p++;
        else if (c == '{') {
            if (!parse_braces(r, &min, &max))
                break;
            if (max >= 0 && max < min)
                return rfail(r, NUMLA_STATUS_FORMAT, "a quantifier {%d,%d} out of order", min,
                             max);
            if (min > MAX_REPEAT || max > MAX_REPEAT)
                return rfail(r, NUMLA_STATUS_UNSUPPORTED, "a quantifier above {%d}",
                             MAX_REPEAT);
        } else
            break;
        if (r->p < r->end && *r->p == '?')
            r->p++; /* lazy: the same strings match */
        if (r->p < r->end && (*r->p == '*' || *r->p == '+' || *r->p == '?'))
            return rfail(r, NUMLA_STATUS_FORMAT, "a quantifier after a quantifier");
        const int k = r->ast[id].kind;
        if (k == A_BOL || k == A_EOL)
            return rfail(r, NUMLA_STATUS_FORMAT, "a quantifier on an anchor");
        int32_t rep = anew(r, A_REP);
        if (rep < 0)
            return -1;
        r->ast[rep].kid = id;
        r->ast[rep].min = min;
        r->ast[rep].max = max;
        id = rep;
    }
    return id;
}

static int32_t parse_cat(rparse *r)
{
    int32_t cat = anew(r, A_CAT), last = -1;
    if (cat < 0)
        return -1;
    while (r->p < r->end && *r->p != '|' && *r->p != ')') {
        int32_t id = parse_repeat(r);
        if (id < 0)
            return -1;
        if (last < 0)
            r->ast[cat].kid = id;
        else
            r->ast[last].next = id;
        last = id;
    }
    return cat;
}

static int32_t parse_alt(rparse *r)
{
    int32_t first = parse_cat(r);
    if (first < 0 || r->p >= r->end || *r->p != '|')
        return first;
    int32_t alt = anew(r, A_ALT), last = first;
    if (alt < 0)
        return -1;
    r->ast[alt].kid = first;
    while (r->p < r->end && *r->p == '|') {
        r->p++;
        int32_t id = parse_cat(r);
        if (id < 0)
            return -1;
        r->ast[last].next = id;
        last = id;
    }
    return alt;
}

/* ---------------------------------------------------------------- the NFA -------------- */

enum { N_EPS, N_BYTE, N_BOL, N_EOL, N_MATCH };

typedef struct nstate {
    uint8_t kind, lo, hi;
    int32_t out, out2; /* EPS: out2 may be -1 */
} nstate;

typedef struct nfa {
    nstate *s;
    int32_t n, cap;
    int full;
} nfa;

static int32_t nnew(nfa *a, uint8_t kind, uint8_t lo, uint8_t hi, int32_t out, int32_t out2)
{
    if (a->n >= MAX_NFA) {
        a->full = 1;
        return -1;
    }
    if (a->n == a->cap) {
        int32_t c = a->cap ? a->cap * 2 : 256;
        nstate *q = realloc(a->s, (size_t)c * sizeof *q);
        if (!q) {
            a->full = 2;
            return -1;
        }
        a->s = q;
        a->cap = c;
    }
    a->s[a->n] = (nstate){kind, lo, hi, out, out2};
    return a->n++;
}

static int utf8_encode(uint32_t cp, uint8_t *b)
{
    if (cp < 0x80) {
        b[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        b[0] = (uint8_t)(0xC0 | cp >> 6);
        b[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        b[0] = (uint8_t)(0xE0 | cp >> 12);
        b[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        b[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    b[0] = (uint8_t)(0xF0 | cp >> 18);
    b[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
    b[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
    b[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* The code points lo..hi (one UTF-8 length, no surrogates) as byte-range sequences, each a
 * chain to `next`, joined into *entry by EPS splits. */
static void utf8_ranges(nfa *a, uint32_t lo, uint32_t hi, int32_t next, int32_t *entry)
{
    static const uint32_t bounds[] = {0x7F, 0x7FF, 0xFFFF};
    if (a->full)
        return;
    for (int i = 0; i < 3; i++)
        if (lo <= bounds[i] && hi > bounds[i]) {
            utf8_ranges(a, lo, bounds[i], next, entry);
            utf8_ranges(a, bounds[i] + 1, hi, next, entry);
            return;
        }
    uint8_t bl[4], bh[4];
    const int n = utf8_encode(lo, bl);
    utf8_encode(hi, bh);
    for (int i = 1; i < n; i++) {
        const uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                utf8_ranges(a, lo, lo | m, next, entry);
                utf8_ranges(a, (lo | m) + 1, hi, next, entry);
                return;
            }
            if ((hi & m) != m) {
                utf8_ranges(a, lo, (hi & ~m) - 1, next, entry);
                utf8_ranges(a, hi & ~m, hi, next, entry);
                return;
            }
        }
    }
    int32_t t = next;
    for (int i = n - 1; i >= 0; i--)
        t = nnew(a, N_BYTE, bl[i], bh[i], t, -1);
    if (t < 0)
        return;
    *entry = *entry < 0 ? t : nnew(a, N_EPS, 0, 0, t, *entry);
}

/* The states for AST node id that lead to `next`; the entry state (-1: failed or matches
 * nothing, e.g. an empty class: then *dead). */
static int32_t gen(nfa *a, const rparse *r, int32_t id, int32_t next)
{
    if (a->full)
        return -1;
    const anode *nd = &r->ast[id];
    switch (nd->kind) {
    case A_SET: {
        const cpset *s = &r->sets[nd->set];
        int32_t entry = -1;
        for (int32_t i = 0; i < s->n; i++)
            utf8_ranges(a, s->r[i].lo, s->r[i].hi, next, &entry);
        /* an empty class never matches: an empty byte range */
        return entry >= 0 || a->full ? entry : nnew(a, N_BYTE, 1, 0, next, -1);
    }
    case A_CAT: {
        int32_t nk = 0, t = next;
        for (int32_t k = nd->kid; k >= 0; k = r->ast[k].next)
            nk++;
        int32_t *kids = malloc(((size_t)nk + 1) * sizeof *kids);
        if (!kids) {
            a->full = 2;
            return -1;
        }
        nk = 0;
        for (int32_t k = nd->kid; k >= 0; k = r->ast[k].next)
            kids[nk++] = k;
        for (int32_t i = nk - 1; i >= 0 && t >= 0; i--)
            t = gen(a, r, kids[i], t);
        free(kids);
        return t;
    }
    case A_ALT: {
        int32_t entry = -1;
        for (int32_t k = nd->kid; k >= 0; k = r->ast[k].next) {
            int32_t e = gen(a, r, k, next);
            if (e < 0)
                return -1;
            entry = entry < 0 ? e : nnew(a, N_EPS, 0, 0, e, entry);
        }
        return entry;
    }
    case A_REP: {
        int32_t t = next;
        if (nd->max < 0) {
            int32_t loop = nnew(a, N_EPS, 0, 0, -1, next);
            if (loop < 0)
                return -1;
            int32_t body = gen(a, r, nd->kid, loop);
            if (body < 0)
                return -1;
            a->s[loop].out = body;
            t = loop;
        } else
            for (int32_t i = 0; i < nd->max - nd->min; i++) {
                int32_t body = gen(a, r, nd->kid, t);
                if (body < 0)
                    return -1;
                t = nnew(a, N_EPS, 0, 0, body, next);
            }
        for (int32_t i = 0; i < nd->min && t >= 0; i++)
            t = gen(a, r, nd->kid, t);
        return t;
    }
    case A_BOL: return nnew(a, N_BOL, 0, 0, next, -1);
    case A_EOL: return nnew(a, N_EOL, 0, 0, next, -1);
    default: return next;
    }
}

/* ---------------------------------------------------------------- the DFA -------------- */

struct numla_regex {
    int32_t ns, nc;        /* states, byte classes */
    uint8_t cls[256];      /* byte -> class */
    uint8_t cost[256];     /* class -> 1: a character's first byte, 0: a continuation byte */
    int32_t *trans;        /* (ns, nc) next state, -1 dead */
    uint8_t *accept, *sink; /* (ns) */
    int32_t *min_left, *max_left; /* (ns) */
    int32_t start;
};

typedef struct dstate {
    int32_t off, len; /* into the set pool */
    int32_t accept;
    uint32_t hash;
} dstate;

typedef struct builder {
    const nfa *a;
    int32_t *pool;
    int64_t npool, cap_pool;
    dstate *ds;
    int32_t nds, cap_ds;
    int32_t *table; /* hash table of dstate ids, -1 empty */
    int32_t table_cap;
    int32_t *mark, *mark2, gen, gen2;
    int32_t *stack, *stack2, *list;
    int32_t match;
} builder;

static uint32_t hash_set(const int32_t *s, int32_t n, int32_t accept)
{
    uint32_t h = 2166136261u ^ (uint32_t)accept;
    for (int32_t i = 0; i < n; i++)
        h = (h ^ (uint32_t)s[i]) * 16777619u;
    return h;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* Does the path on from s (after a $) reach the match without reading? */
static int eol_reaches_match(builder *b, int32_t s0, int at_start)
{
    b->gen2++;
    int32_t sp = 0;
    b->stack2[sp++] = s0;
    while (sp > 0) {
        int32_t s = b->stack2[--sp];
        if (s < 0 || b->mark2[s] == b->gen2)
            continue;
        b->mark2[s] = b->gen2;
        const nstate *st = &b->a->s[s];
        switch (st->kind) {
        case N_MATCH: return 1;
        case N_EPS:
            b->stack2[sp++] = st->out;
            if (st->out2 >= 0)
                b->stack2[sp++] = st->out2;
            break;
        case N_EOL: b->stack2[sp++] = st->out; break;
        case N_BOL:
            if (at_start)
                b->stack2[sp++] = st->out;
            break;
        default: break;
        }
    }
    return 0;
}

/* The epsilon closure of seeds[n]: the byte and match states into b->list (sorted; only the
 * match when it is reached), *accept. Returns the count. */
static int32_t closure(builder *b, const int32_t *seeds, int32_t n, int at_start, int32_t *accept)
{
    b->gen++;
    int32_t sp = 0, nl = 0;
    *accept = 0;
    for (int32_t i = 0; i < n; i++)
        b->stack[sp++] = seeds[i];
    /* the stack holds at most every state once per push site: 2 per state */
    while (sp > 0) {
        int32_t s = b->stack[--sp];
        if (s < 0 || b->mark[s] == b->gen)
            continue;
        b->mark[s] = b->gen;
        const nstate *st = &b->a->s[s];
        switch (st->kind) {
        case N_MATCH:
            *accept = 1;
            b->list[0] = s;
            return 1; /* anything may follow a match: the sink */
        case N_BYTE: b->list[nl++] = s; break;
        case N_EPS:
            if (st->out2 >= 0)
                b->stack[sp++] = st->out2;
            b->stack[sp++] = st->out;
            break;
        case N_BOL:
            if (at_start)
                b->stack[sp++] = st->out;
            break;
        case N_EOL:
            if (!*accept && eol_reaches_match(b, st->out, at_start))
                *accept = 1;
            break;
        }
    }
    qsort(b->list, (size_t)nl, sizeof *b->list, cmp_i32);
    return nl;
}

/* The DFA state for list[n] (found or added); -1 past the limit, -2 out of memory. */
static int32_t intern(builder *b, const int32_t *list, int32_t n, int32_t accept)
{
    const uint32_t h = hash_set(list, n, accept);
    for (uint32_t i = h & (uint32_t)(b->table_cap - 1);; i = (i + 1) & (uint32_t)(b->table_cap - 1)) {
        int32_t d = b->table[i];
        if (d < 0) {
            if (b->nds >= NUMLA_REGEX_MAX_STATES)
                return -1;
            if (b->nds == b->cap_ds) {
                int32_t c = b->cap_ds ? b->cap_ds * 2 : 64;
                dstate *q = realloc(b->ds, (size_t)c * sizeof *q);
                if (!q)
                    return -2;
                b->ds = q;
                b->cap_ds = c;
            }
            if (b->npool + n > b->cap_pool) {
                int64_t c = b->cap_pool ? b->cap_pool * 2 : 1024;
                while (c < b->npool + n)
                    c *= 2;
                int32_t *q = realloc(b->pool, (size_t)c * sizeof *q);
                if (!q)
                    return -2;
                b->pool = q;
                b->cap_pool = c;
            }
            memcpy(b->pool + b->npool, list, (size_t)n * sizeof *list);
            b->ds[b->nds] = (dstate){(int32_t)b->npool, n, accept, h};
            b->npool += n;
            b->table[i] = b->nds;
            return b->nds++;
        }
        const dstate *e = &b->ds[d];
        if (e->hash == h && e->len == n && e->accept == accept &&
            !memcmp(b->pool + e->off, list, (size_t)n * sizeof *list))
            return d;
    }
}

void numla_regex_destroy(numla_regex **rp)
{
    if (!rp || !*rp)
        return;
    numla_regex *r = *rp;
    free(r->trans);
    free(r->accept);
    free(r->sink);
    free(r->min_left);
    free(r->max_left);
    free(r);
    *rp = NULL;
}

/* Continuation-byte ranges after a lead byte (the first one; the rest 80-BF): the count. */
static int lead_info(int c, int *lo, int *hi)
{
    *lo = 0x80;
    *hi = 0xBF;
    if (c < 0x80)
        return 0;
    if (c >= 0xC2 && c <= 0xDF)
        return 1;
    if (c == 0xE0)
        *lo = 0xA0;
    if (c == 0xED)
        *hi = 0x9F;
    if (c >= 0xE0 && c <= 0xEF)
        return 2;
    if (c == 0xF0)
        *lo = 0x90;
    if (c == 0xF4)
        *hi = 0x8F;
    if (c >= 0xF0 && c <= 0xF4)
        return 3;
    return -1;
}

/* Every valid rest of a character (left continuation bytes, the first in lo..hi) from t ends in
 * s. */
static int all_back(const numla_regex *r, int32_t t, int left, int lo, int hi, int32_t s)
{
    if (t < 0)
        return 0;
    if (left == 0)
        return t == s;
    for (int c = lo; c <= hi; c++)
        if (!all_back(r, r->trans[(size_t)t * (size_t)r->nc + r->cls[c]], left - 1, 0x80, 0xBF,
                      s))
            return 0;
    return 1;
}


/* The reverse edges of trans (n states, nc classes) as lists: first[n + 1], from[...]
 * (the class of each edge in cls_of when not NULL). */
static int reverse_edges(const int32_t *trans, int32_t n, int32_t nc, int32_t **first,
                         int32_t **from, int32_t **cls_of)
{
    *first = calloc((size_t)n + 1, sizeof **first);
    size_t edges = 0;
    for (size_t i = 0; i < (size_t)n * (size_t)nc; i++)
        edges += trans[i] >= 0;
    *from = malloc((edges + 1) * sizeof **from);
    *cls_of = malloc((edges + 1) * sizeof **cls_of);
    int32_t *fill = calloc((size_t)n + 1, sizeof *fill);
    if (!*first || !*from || !*cls_of || !fill) {
        free(fill);
        return 0;
    }
    for (size_t i = 0; i < (size_t)n * (size_t)nc; i++)
        if (trans[i] >= 0)
            (*first)[trans[i] + 1]++;
    for (int32_t d = 0; d < n; d++)
        (*first)[d + 1] += (*first)[d];
    for (int32_t d = 0; d < n; d++)
        for (int32_t c = 0; c < nc; c++) {
            int32_t t = trans[(size_t)d * (size_t)nc + c];
            if (t < 0)
                continue;
            int32_t k = (*first)[t] + fill[t]++;
            (*from)[k] = d;
            (*cls_of)[k] = c;
        }
    free(fill);
    return 1;
}

/* live[d] (set for the accepting states) grows to every state that reaches one. */
static int mark_live(const int32_t *trans, int32_t n, int32_t nc, uint8_t *live)
{
    int32_t *first = NULL, *from = NULL, *cls_of = NULL;
    int32_t *queue = malloc(((size_t)n + 1) * sizeof *queue);
    int ok = queue && reverse_edges(trans, n, nc, &first, &from, &cls_of);
    if (ok) {
        int32_t qh = 0, qt = 0;
        for (int32_t d = 0; d < n; d++)
            if (live[d])
                queue[qt++] = d;
        while (qh < qt) {
            int32_t t = queue[qh++];
            for (int32_t k = first[t]; k < first[t + 1]; k++)
                if (!live[from[k]]) {
                    live[from[k]] = 1;
                    queue[qt++] = from[k];
                }
        }
    }
    free(queue);
    free(first);
    free(from);
    free(cls_of);
    return ok;
}

/* min_left by a 0-1 breadth-first search backwards from the accepting states. */
static int min_left(numla_regex *r)
{
    const int32_t n = r->ns;
    int32_t *first = NULL, *from = NULL, *cls_of = NULL;
    int32_t *dq = malloc(((size_t)n * (size_t)r->nc * 2 + 2 * (size_t)n + 2) * sizeof *dq);
    int ok = dq && reverse_edges(r->trans, n, r->nc, &first, &from, &cls_of);
    if (ok) {
        /* a deque in a buffer large enough for every push: the head starts in the middle */
        const size_t cap = (size_t)n * (size_t)r->nc * 2 + 2 * (size_t)n + 2;
        size_t head = cap / 2, tail = cap / 2;
        for (int32_t s = 0; s < n; s++) {
            r->min_left[s] = r->accept[s] ? 0 : NUMLA_REGEX_INF;
            if (r->accept[s])
                dq[tail++] = s;
        }
        while (head < tail) {
            int32_t t = dq[head++];
            for (int32_t k = first[t]; k < first[t + 1]; k++) {
                const int32_t w = r->cost[cls_of[k]], d = from[k];
                if (r->min_left[t] + w < r->min_left[d]) {
                    r->min_left[d] = r->min_left[t] + w;
                    if (w == 0 && head > 0)
                        dq[--head] = d;
                    else if (tail < cap)
                        dq[tail++] = d;
                }
            }
        }
    }
    free(dq);
    free(first);
    free(from);
    free(cls_of);
    return ok;
}

static int32_t max_dfs(numla_regex *r, int32_t s, uint8_t *color, int depth)
{
    if (color[s] == 2)
        return r->max_left[s];
    if (color[s] == 1 || depth > NUMLA_REGEX_MAX_STATES + 8)
        return NUMLA_REGEX_INF; /* a cycle */
    color[s] = 1;
    int64_t best = r->accept[s] ? 0 : -1;
    for (int32_t c = 0; c < r->nc && best < NUMLA_REGEX_INF; c++) {
        int32_t t = r->trans[(size_t)s * (size_t)r->nc + c];
        if (t < 0)
            continue;
        int32_t m = max_dfs(r, t, color, depth + 1);
        int64_t v = m >= NUMLA_REGEX_INF ? NUMLA_REGEX_INF : (int64_t)m + r->cost[c];
        if (v > best)
            best = v;
    }
    color[s] = 2;
    r->max_left[s] = best >= NUMLA_REGEX_INF ? NUMLA_REGEX_INF : (int32_t)best;
    return r->max_left[s];
}

numla_status numla_regex_compile(const char *pattern, size_t len, numla_regex **out)
{
    *out = NULL;
    rparse p = {.p = (const uint8_t *)pattern, .end = (const uint8_t *)pattern + len,
                .start = (const uint8_t *)pattern};
    nfa a = {0};
    builder b = {.a = &a};
    numla_regex *r = NULL;
    numla_status st = NUMLA_STATUS_OK;
    char msg[300] = "";
    int32_t root = parse_alt(&p);
    if (root >= 0 && p.p < p.end)
        root = rfail(&p, NUMLA_STATUS_FORMAT, "a ')' without its '('");
    if (root < 0) {
        st = p.st;
        snprintf(msg, sizeof msg, "%s", p.msg);
        goto done;
    }
    /* search: start = split(any byte -> start, pattern); the match accepts anything after */
    int32_t match = nnew(&a, N_MATCH, 0, 0, -1, -1);
    int32_t entry = gen(&a, &p, root, match);
    int32_t start = nnew(&a, N_EPS, 0, 0, -1, entry);
    int32_t loop = nnew(&a, N_BYTE, 0x00, 0xFF, start, -1);
    if (a.full || entry < 0 || start < 0 || loop < 0) {
        st = a.full == 2 ? NUMLA_STATUS_NO_MEMORY : NUMLA_STATUS_UNSUPPORTED;
        snprintf(msg, sizeof msg, "the pattern's automaton is too large");
        goto done;
    }
    a.s[start].out = loop;
    b.match = match;
    /* byte classes: the edges' bounds, and 0x80/0xC0 so none mixes continuation bytes */
    uint8_t cut[257] = {0};
    cut[0] = cut[0x80] = cut[0xC0] = 1;
    for (int32_t i = 0; i < a.n; i++)
        if (a.s[i].kind == N_BYTE) {
            cut[a.s[i].lo] = 1;
            cut[a.s[i].hi + 1] = 1;
        }
    r = calloc(1, sizeof *r);
    b.mark = calloc((size_t)a.n, sizeof *b.mark);
    b.mark2 = calloc((size_t)a.n, sizeof *b.mark2);
    b.stack = malloc(((size_t)a.n * 3 + 16) * sizeof *b.stack);
    b.stack2 = malloc(((size_t)a.n * 3 + 16) * sizeof *b.stack2);
    b.list = malloc(((size_t)a.n + 1) * sizeof *b.list);
    b.table_cap = 4 * NUMLA_REGEX_MAX_STATES;
    b.table = malloc((size_t)b.table_cap * sizeof *b.table);
    int32_t *seeds = malloc(((size_t)a.n + 1) * sizeof *seeds);
    int32_t *tr = NULL;
    if (!r || !b.mark || !b.mark2 || !b.stack || !b.stack2 || !b.list || !b.table || !seeds) {
        free(seeds);
        st = NUMLA_STATUS_NO_MEMORY;
        snprintf(msg, sizeof msg, "no memory for the pattern's automaton");
        goto done;
    }
    memset(b.table, 0xFF, (size_t)b.table_cap * sizeof *b.table);
    int rep[256], nc = 0;
    for (int c = 0; c < 256; c++) {
        if (cut[c] && c > 0)
            nc++;
        r->cls[c] = (uint8_t)nc;
        if (c == 0 || cut[c])
            rep[nc] = c;
    }
    nc++;
    r->nc = nc;
    int32_t acc, nl = closure(&b, &start, 1, 1, &acc);
    int32_t d0 = intern(&b, b.list, nl, acc);
    size_t cap_tr = 0;
    for (int32_t d = 0; d0 >= 0 && d < b.nds; d++) {
        if ((size_t)(d + 1) * (size_t)nc > cap_tr) {
            size_t c = cap_tr ? cap_tr * 2 : (size_t)nc * 64;
            int32_t *q = realloc(tr, c * sizeof *q);
            if (!q) {
                d0 = -2;
                break;
            }
            tr = q;
            cap_tr = c;
        }
        for (int32_t c = 0; c < nc; c++) {
            const uint8_t byte = (uint8_t)rep[c];
            int32_t ns = 0;
            const dstate ds = b.ds[d];
            for (int32_t i = 0; i < ds.len; i++) {
                const nstate *s = &a.s[b.pool[ds.off + i]];
                if (s->kind == N_MATCH)
                    seeds[ns++] = b.pool[ds.off + i];
                else if (byte >= s->lo && byte <= s->hi)
                    seeds[ns++] = s->out;
            }
            int32_t t = -1;
            if (ns > 0) {
                nl = closure(&b, seeds, ns, 0, &acc);
                t = nl > 0 || acc ? intern(&b, b.list, nl, acc) : -1;
                if (t == -1 && (nl > 0 || acc)) {
                    d0 = -1;
                    break;
                }
                if (t == -2) {
                    d0 = -2;
                    break;
                }
            }
            tr[(size_t)d * (size_t)nc + c] = t;
        }
        if (d0 < 0)
            break;
    }
    free(seeds);
    if (d0 < 0) {
        free(tr);
        st = d0 == -1 ? NUMLA_STATUS_UNSUPPORTED : NUMLA_STATUS_NO_MEMORY;
        snprintf(msg, sizeof msg, d0 == -1 ? "the pattern's automaton has more than %d states"
                                           : "no memory for the pattern's automaton (%d)",
                 NUMLA_REGEX_MAX_STATES);
        goto done;
    }
    /* live states: those that reach an accepting one */
    const int32_t n = b.nds;
    uint8_t *live = calloc((size_t)n, 1);
    int32_t *newid = malloc((size_t)n * sizeof *newid);
    if (!live || !newid) {
        free(live);
        free(newid);
        free(tr);
        st = NUMLA_STATUS_NO_MEMORY;
        snprintf(msg, sizeof msg, "no memory for the pattern's automaton");
        goto done;
    }
    for (int32_t d = 0; d < n; d++)
        live[d] = (uint8_t)(b.ds[d].accept != 0);
    if (!mark_live(tr, n, nc, live)) {
        free(live);
        free(newid);
        free(tr);
        st = NUMLA_STATUS_NO_MEMORY;
        snprintf(msg, sizeof msg, "no memory for the pattern's automaton");
        goto done;
    }
    if (!live[d0]) {
        free(live);
        free(newid);
        free(tr);
        st = NUMLA_STATUS_UNSUPPORTED;
        snprintf(msg, sizeof msg, "the pattern matches no string");
        goto done;
    }
    int32_t ns = 0;
    for (int32_t d = 0; d < n; d++)
        newid[d] = live[d] ? ns++ : -1;
    r->ns = ns;
    r->start = newid[d0];
    r->trans = malloc((size_t)ns * (size_t)nc * sizeof *r->trans);
    r->accept = calloc((size_t)ns, 1);
    r->sink = calloc((size_t)ns, 1);
    r->min_left = malloc((size_t)ns * sizeof *r->min_left);
    r->max_left = malloc((size_t)ns * sizeof *r->max_left);
    uint8_t *color = calloc((size_t)ns, 1);
    if (!r->trans || !r->accept || !r->sink || !r->min_left || !r->max_left || !color) {
        free(color);
        free(live);
        free(newid);
        free(tr);
        st = NUMLA_STATUS_NO_MEMORY;
        snprintf(msg, sizeof msg, "no memory for the pattern's automaton");
        goto done;
    }
    for (int32_t d = 0; d < n; d++) {
        if (!live[d])
            continue;
        r->accept[newid[d]] = (uint8_t)(b.ds[d].accept != 0);
        for (int32_t c = 0; c < nc; c++) {
            int32_t t = tr[(size_t)d * (size_t)nc + c];
            r->trans[(size_t)newid[d] * (size_t)nc + c] = t >= 0 ? newid[t] : -1;
        }
    }
    free(live);
    free(newid);
    free(tr);
    for (int c = 0; c < nc; c++)
        r->cost[c] = (uint8_t)(rep[c] < 0x80 || rep[c] >= 0xC0);
    if (!min_left(r)) {
        free(color);
        st = NUMLA_STATUS_NO_MEMORY;
        snprintf(msg, sizeof msg, "no memory for the pattern's automaton");
        goto done;
    }
    for (int32_t s = 0; s < ns; s++)
        if (color[s] != 2)
            max_dfs(r, s, color, 0);
    free(color);
    for (int32_t s = 0; s < ns; s++) {
        int sink = r->accept[s];
        for (int c = 0; c < 256 && sink; c++) {
            int lo, hi, k = lead_info(c, &lo, &hi);
            if (k < 0)
                continue; /* never a character's first byte */
            sink = all_back(r, r->trans[(size_t)s * (size_t)nc + r->cls[c]], k, lo, hi, s);
        }
        r->sink[s] = (uint8_t)sink;
    }
done:
    for (int32_t i = 0; i < p.nsets; i++)
        free(p.sets[i].r);
    free(p.sets);
    free(p.ast);
    free(a.s);
    free(b.pool);
    free(b.ds);
    free(b.table);
    free(b.mark);
    free(b.mark2);
    free(b.stack);
    free(b.stack2);
    free(b.list);
    if (st != NUMLA_STATUS_OK) {
        numla_regex_destroy(&r);
        NUMLA_FAIL(st, "%s", msg);
    }
    *out = r;
    return NUMLA_STATUS_OK;
}

int32_t numla_regex_start(const numla_regex *r) { return r->start; }

int32_t numla_regex_step(const numla_regex *r, int32_t s, uint8_t b)
{
    return r->trans[(size_t)s * (size_t)r->nc + r->cls[b]];
}

int numla_regex_accepting(const numla_regex *r, int32_t s) { return r->accept[s]; }
int32_t numla_regex_min_left(const numla_regex *r, int32_t s) { return r->min_left[s]; }
int32_t numla_regex_max_left(const numla_regex *r, int32_t s) { return r->max_left[s]; }
int numla_regex_is_sink(const numla_regex *r, int32_t s) { return r->sink[s]; }
int32_t numla_regex_num_states(const numla_regex *r) { return r->ns; }

int numla_regex_matches(const numla_regex *r, const uint8_t *s, size_t n)
{
    int32_t d = r->start;
    for (size_t i = 0; i < n && d >= 0; i++)
        d = numla_regex_step(r, d, s[i]);
    return d >= 0 && r->accept[d];
}
