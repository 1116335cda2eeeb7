/* engine/serving/grammar.c — JSON Schema → grammar, the byte matcher and the token mask
 * (see grammar.h). */
#include "engine/serving/grammar.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/serving/grammar_regex.h"

/* ---------------------------------------------------------------- the grammar ---------- */

enum { G_LIT, G_STR, G_NUM, G_ARR, G_OBJ, G_OBJANY, G_ALT };

/* LIT: bytes[off, off + len); STR: a = min code points, b = max (-1: none), child = the
 * pattern's automaton (regexes[child], -1: none); NUM: child = bounds[child] (-1: none), a = integer
 * only; ARR: a = minItems, b = maxItems (-1: none), child = items; OBJ: props[off, off + len);
 * OBJANY: a = the key string node, child = the value node; ALT: list[off, off + len). */
typedef struct gnode {
    int32_t kind, a, b, child, off, len;
} gnode;

typedef struct gprop {
    int32_t key_off, key_len; /* "\"key\":" in bytes */
    int32_t value;
    int32_t required;
} gprop;

struct numla_grammar {
    gnode *nodes;
    int32_t num_nodes, cap_nodes;
    uint8_t *bytes;
    int32_t num_bytes, cap_bytes;
    int32_t *list;
    int32_t num_list, cap_list;
    gprop *props;
    int32_t num_props, cap_props;
    numla_regex **regexes; /* strings' patterns and formats */
    int32_t num_regexes, cap_regexes;
    struct gbound *bounds; /* numbers' minimum/maximum/multipleOf */
    int32_t num_bounds, cap_bounds;
    int32_t root;
    int32_t refs;      /* references less one (numla_grammar_ref) */
};

/* A bounded number's limits in units of 1e-15 (Q), inclusive: lo <= x <= hi (where has_lo,
 * has_hi), and x a multiple of mult (0: any). Such a number is written without an exponent and
 * with at most 15 digits in all, so each value is exact in Q and reads back as a double that
 * keeps its order against the bound (docs/serving.md). */
__extension__ typedef __int128 i128;
typedef struct gbound {
    i128 lo, hi, mult;
    int has_lo, has_hi;
} gbound;

/* Number limits: what jansson reads back without overflow. */
enum { NUM_INT_DIGITS = 15, NUM_FRAC_DIGITS = 15, NUM_EXP_DIGITS = 2 };

static int grow(void **p, int32_t *cap, int32_t need, size_t elem)
{
    if (need <= *cap)
        return 1;
    int32_t c = *cap ? *cap : 16;
    while (c < need) {
        if (c > (1 << 28))
            return 0;
        c *= 2;
    }
    void *q = realloc(*p, (size_t)c * elem);
    if (!q)
        return 0;
    *p = q;
    *cap = c;
    return 1;
}

static int32_t g_node(numla_grammar *g, int32_t kind, int32_t a, int32_t b)
{
    if (!grow((void **)&g->nodes, &g->cap_nodes, g->num_nodes + 1, sizeof *g->nodes))
        return -1;
    g->nodes[g->num_nodes] = (gnode){.kind = kind, .a = a, .b = b, .child = -1};
    return g->num_nodes++;
}

static int32_t g_bytes(numla_grammar *g, const void *b, size_t n)
{
    if (n > (1u << 24) || !grow((void **)&g->bytes, &g->cap_bytes, g->num_bytes + (int32_t)n, 1))
        return -1;
    memcpy(g->bytes + g->num_bytes, b, n);
    int32_t off = g->num_bytes;
    g->num_bytes += (int32_t)n;
    return off;
}

static int32_t g_lit(numla_grammar *g, const void *b, size_t n)
{
    int32_t off = g_bytes(g, b, n);
    if (off < 0 || n == 0)
        return -1;
    int32_t id = g_node(g, G_LIT, 0, 0);
    if (id < 0)
        return -1;
    g->nodes[id].off = off;
    g->nodes[id].len = (int32_t)n;
    return id;
}

/* An ALT node over children[n] (node id ALT may be given: a placeholder to fill). */
static int32_t g_alt(numla_grammar *g, int32_t id, const int32_t *children, int32_t n)
{
    if (id < 0 && (id = g_node(g, G_ALT, 0, 0)) < 0)
        return -1;
    if (!grow((void **)&g->list, &g->cap_list, g->num_list + n, sizeof *g->list))
        return -1;
    memcpy(g->list + g->num_list, children, (size_t)n * sizeof *children);
    g->nodes[id].off = g->num_list;
    g->nodes[id].len = n;
    g->num_list += n;
    return id;
}

numla_grammar *numla_grammar_ref(numla_grammar *g)
{
    __atomic_add_fetch(&g->refs, 1, __ATOMIC_RELAXED);
    return g;
}

void numla_grammar_destroy(numla_grammar **gp)
{
    if (!gp || !*gp)
        return;
    numla_grammar *g = *gp;
    *gp = NULL;
    if (__atomic_sub_fetch(&g->refs, 1, __ATOMIC_ACQ_REL) >= 0)
        return; /* another reference holds it */
    free(g->nodes);
    free(g->bytes);
    free(g->list);
    free(g->props);
    for (int32_t i = 0; i < g->num_regexes; i++)
        numla_regex_destroy(&g->regexes[i]);
    free(g->regexes);
    free(g->bounds);
    free(g);
    *gp = NULL;
}

/* ---------------------------------------------------------------- the compiler --------- */

typedef struct gref {
    char *name;
    int32_t node;
} gref;

typedef struct gcomp {
    numla_grammar *g;
    const json_t *root;
    gref *refs;
    int32_t num_refs, cap_refs;
    int32_t any;       /* the any-value node, -1 until needed */
    int32_t nothing;   /* a node no document matches (an ALT of none), -1 until needed */
    numla_status st;
    char msg[384];
    int depth;
} gcomp;

static int32_t refuse(gcomp *c, numla_status st, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int32_t refuse(gcomp *c, numla_status st, const char *path, const char *fmt, ...)
{
    if (c->st != NUMLA_STATUS_OK)
        return -1;
    c->st = st;
    int n = snprintf(c->msg, sizeof c->msg, "%s: ", path);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof c->msg)
        vsnprintf(c->msg + n, sizeof c->msg - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

static int32_t oom(gcomp *c)
{
    return refuse(c, NUMLA_STATUS_NO_MEMORY, "schema", "no memory to compile the schema");
}

static int32_t lit_str(gcomp *c, const char *s)
{
    int32_t id = g_lit(c->g, s, strlen(s));
    return id < 0 ? oom(c) : id;
}

/* The any-value node: ALT(any object, array of any, string, number, true, false, null). */
static int32_t any_node(gcomp *c)
{
    if (c->any >= 0)
        return c->any;
    numla_grammar *g = c->g;
    int32_t any = g_node(g, G_ALT, 0, 0);
    if (any < 0)
        return oom(c);
    c->any = any;
    int32_t key = g_node(g, G_STR, 0, -1), obj = g_node(g, G_OBJANY, 0, 0);
    int32_t arr = g_node(g, G_ARR, 0, -1), str = g_node(g, G_STR, 0, -1);
    int32_t num = g_node(g, G_NUM, 0, 0);
    if (key < 0 || obj < 0 || arr < 0 || str < 0 || num < 0)
        return oom(c);
    g->nodes[obj].a = key;
    g->nodes[obj].child = any;
    g->nodes[obj].len = -1; /* no maxProperties */
    g->nodes[arr].child = any;
    int32_t kids[7] = {obj, arr, str, num, lit_str(c, "true"), lit_str(c, "false"),
                       lit_str(c, "null")};
    if (kids[4] < 0 || kids[5] < 0 || kids[6] < 0 || g_alt(g, any, kids, 7) < 0)
        return oom(c);
    return any;
}

static int32_t compile(gcomp *c, const json_t *s, const char *path);

/* The node no document matches: a property it is the value of is left out, an alternative it is
 * dropped; a schema that is nothing as a whole is refused. */
static int32_t nothing_node(gcomp *c)
{
    if (c->nothing < 0 && (c->nothing = g_node(c->g, G_ALT, 0, 0)) < 0)
        return oom(c);
    c->g->nodes[c->nothing].off = 0;
    return c->nothing;
}
static int str_ok(const numla_regex *re, const gnode *nd, int32_t d, int32_t n);
typedef struct gbound gbound;
static int num_start_viable(const gbound *b, int nofrac, int neg);

/* The validation keywords of JSON Schema's drafts 4 to 2020-12 that the compiler does not take:
 * a schema with one is refused; any other unknown keyword is an annotation (the spec ignores
 * it). */
static int is_unsupported_validation(const char *k)
{
    static const char *const a[] = {
         "uniqueItems", "contains", "maxContains", "minContains",
        "dependencies",
        "dependentRequired", "dependentSchemas", "propertyNames", "if", "then", "else", "not",
        "contentEncoding", "contentMediaType", "contentSchema", "$dynamicRef", "$recursiveRef",
        "unevaluatedItems", "unevaluatedProperties", "prefixItems", "$anchor", "$dynamicAnchor",
        "$recursiveAnchor", "$vocabulary", "extends", "disallow", "divisibleBy"};
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++)
        if (!strcmp(k, a[i]))
            return 1;
    return 0;
}

static int is_supported(const char *k)
{
    static const char *const a[] = {"type",     "properties", "required", "additionalProperties",
                                    "items",    "minItems",   "maxItems", "minLength",
                                    "maxLength", "enum",      "const",    "anyOf",
                                    "oneOf",    "allOf",      "$ref",     "pattern",
                                    "format",   "minimum",    "maximum",  "exclusiveMinimum",
                                    "exclusiveMaximum", "multipleOf", "additionalItems",
                                    "minProperties", "maxProperties", "patternProperties"};
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++)
        if (!strcmp(k, a[i]))
            return 1;
    return 0;
}

/* Only annotations besides `keep` (and `keep2`, may be NULL). */
static int alone(const json_t *s, const char *keep, const char *keep2)
{
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (!strcmp(k, keep) || (keep2 && !strcmp(k, keep2)) || !is_supported(k))
            continue; /* an annotation or an unknown keyword (those refused are refused first) */
        return 0;
    }
    return 1;
}

/* The value a JSON pointer "#/a/b/0" (~1 is '/', ~0 '~') names in root, NULL: none. */
static const json_t *resolve_pointer(const json_t *root, const char *name)
{
    if (!strcmp(name, "#"))
        return root;
    if (strncmp(name, "#/", 2) || strchr(name, '%'))
        return NULL;
    const json_t *target = root;
    for (const char *p = name + 2; target;) {
        char tok[256];
        size_t k = 0;
        for (; *p && *p != '/' && k + 1 < sizeof tok; p++) {
            if (*p == '~' && (p[1] == '0' || p[1] == '1')) {
                tok[k++] = p[1] == '0' ? '~' : '/';
                p++;
            } else
                tok[k++] = *p;
        }
        if (*p && *p != '/')
            return NULL; /* a name longer than tok: none */
        tok[k] = 0;
        if (json_is_object(target))
            target = json_object_get(target, tok);
        else if (json_is_array(target)) {
            char *end;
            unsigned long i = strtoul(tok, &end, 10);
            target = *end || !k ? NULL : json_array_get(target, i);
        } else
            target = NULL;
        if (!*p)
            break;
        p++;
    }
    return target;
}

static int ref_type_implied(const gcomp *c, const json_t *target, const json_t *type);

static int32_t compile_ref(gcomp *c, const json_t *s, const char *path)
{
    const json_t *r = json_object_get(s, "$ref");
    if (!json_is_string(r))
        return refuse(c, NUMLA_STATUS_FORMAT, path, "'$ref' must be a string");
    if (!alone(s, "$ref", "type"))
        return refuse(c, NUMLA_STATUS_UNSUPPORTED, path,
                      "'$ref' next to other keywords is not supported");
    const char *name = json_string_value(r);
    /* a 'type' beside it: only one the referenced schema implies (so it changes nothing,
     * whether a validator ignores it, as drafts up to 7 do, or applies it) */
    const json_t *type = json_object_get(s, "type");
    if (type && !ref_type_implied(c, resolve_pointer(c->root, name), type))
        return refuse(c, NUMLA_STATUS_UNSUPPORTED, path,
                      "'$ref' next to a 'type' its schema does not imply is not supported");
    for (int32_t i = 0; i < c->num_refs; i++)
        if (!strcmp(c->refs[i].name, name))
            return c->refs[i].node;
    const json_t *target = NULL;
    if (!strcmp(name, "#"))
        target = c->root;
    else {
        /* a JSON pointer into this document: "#/a/b/0" (~1 is '/', ~0 '~') */
        if (strncmp(name, "#/", 2) || strchr(name, '%'))
            return refuse(c, NUMLA_STATUS_UNSUPPORTED, path,
                          "'$ref' \"%.100s\" is not supported (only a pointer into this "
                          "document: \"#\", \"#/$defs/NAME\", \"#/definitions/NAME\", ...)",
                          name);
        target = resolve_pointer(c->root, name);
        if (!target)
            return refuse(c, NUMLA_STATUS_FORMAT, path, "'$ref' \"%.100s\" names no schema",
                          name);
    }
    int32_t id = g_node(c->g, G_ALT, 0, 0);
    char *copy = strdup(name);
    if (id < 0 || !copy ||
        !grow((void **)&c->refs, &c->cap_refs, c->num_refs + 1, sizeof *c->refs)) {
        free(copy);
        return oom(c);
    }
    c->refs[c->num_refs++] = (gref){copy, id};
    char sub[256];
    snprintf(sub, sizeof sub, "%.200s", name);
    int32_t body = compile(c, target, sub);
    if (body < 0 || body == c->nothing)
        return body;
    return g_alt(c->g, id, &body, 1) < 0 ? oom(c) : id;
}

/* First bytes a node's documents can start with (conservative: all bytes past a depth). */
static void first_bytes(const numla_grammar *g, int32_t id, uint8_t set[256], int depth)
{
    const gnode *n = &g->nodes[id];
    if (depth > 32) {
        memset(set, 1, 256);
        return;
    }
    switch (n->kind) {
    case G_LIT: set[g->bytes[n->off]] = 1; break;
    case G_STR: set['"'] = 1; break;
    case G_NUM:
        set['-'] = 1;
        for (int d = '0'; d <= '9'; d++)
            set[d] = 1;
        break;
    case G_ARR: set['['] = 1; break;
    case G_OBJ:
    case G_OBJANY: set['{'] = 1; break;
    default:
        if (n->len == 0) /* a $ref still being compiled */
            memset(set, 1, 256);
        for (int32_t i = 0; i < n->len; i++)
            first_bytes(g, g->list[n->off + i], set, depth + 1);
    }
}

/* s with its local $refs followed (a few levels). */
static const json_t *deref(const gcomp *c, const json_t *s)
{
    for (int k = 0; k < 8 && json_is_object(s); k++) {
        const json_t *r = json_object_get(s, "$ref");
        if (!json_is_string(r))
            break;
        const char *name = json_string_value(r);
        const json_t *t = !strcmp(name, "#") ? c->root : resolve_pointer(c->root, name);
        if (!t)
            break;
        s = t;
    }
    return s;
}

/* The values an 'enum' or 'const' of s allows (an array; *own: the caller decrefs), NULL:
 * s has neither. */
static json_t *literal_values(const json_t *s)
{
    const json_t *e = json_object_get(s, "enum"), *k = json_object_get(s, "const");
    if (json_is_array(e))
        return json_incref((json_t *)e);
    if (k)
        return json_pack("[O]", k);
    return NULL;
}

/* No value of x equals one of y, as JSON Schema compares (1 equals 1.0; arrays and objects,
 * which may hold such numbers, count as equal to be safe). */
static int values_disjoint(const json_t *x, const json_t *y)
{
    for (size_t i = 0; i < json_array_size(x); i++)
        for (size_t j = 0; j < json_array_size(y); j++) {
            const json_t *u = json_array_get(x, i), *w = json_array_get(y, j);
            if (json_is_array(u) || json_is_object(u) || json_is_array(w) || json_is_object(w))
                return 0;
            if (json_is_number(u) && json_is_number(w)
                    ? json_number_value(u) == json_number_value(w)
                    : json_equal(u, w))
                return 0;
        }
    return 1;
}

/* No document matches both a and b (a sufficient check: distinct enum/const values, or objects
 * with a property both require whose enum/const values differ). */
static int disjoint(const gcomp *c, const json_t *a, const json_t *b)
{
    a = deref(c, a);
    b = deref(c, b);
    if (!json_is_object(a) || !json_is_object(b))
        return 0;
    json_t *la = literal_values(a), *lb = literal_values(b);
    int d = la && lb && values_disjoint(la, lb);
    json_decref(la);
    json_decref(lb);
    if (d)
        return 1;
    const json_t *ra = json_object_get(a, "required"), *rb = json_object_get(b, "required");
    const json_t *pa = json_object_get(a, "properties"), *pb = json_object_get(b, "properties");
    for (size_t i = 0; !d && i < json_array_size(ra); i++) {
        const char *name = json_string_value(json_array_get(ra, i));
        int both = 0;
        for (size_t j = 0; name && j < json_array_size(rb); j++)
            both |= json_is_string(json_array_get(rb, j)) &&
                    !strcmp(name, json_string_value(json_array_get(rb, j)));
        if (!both)
            continue;
        const json_t *sa = deref(c, json_object_get(pa, name)), *sb = deref(c, json_object_get(pb, name));
        if (!json_is_object(sa) || !json_is_object(sb))
            continue;
        la = literal_values(sa);
        lb = literal_values(sb);
        d = la && lb && values_disjoint(la, lb);
        json_decref(la);
        json_decref(lb);
    }
    return d;
}

static int32_t compile_alts(gcomp *c, const json_t *s, const char *key, const char *path)
{
    const json_t *a = json_object_get(s, key);
    if (!json_is_array(a) || json_array_size(a) == 0)
        return refuse(c, NUMLA_STATUS_FORMAT, path, "'%s' must be a non-empty list", key);
    if (!alone(s, key, NULL))
        return refuse(c, NUMLA_STATUS_UNSUPPORTED, path,
                      "'%s' next to other keywords is not supported", key);
    size_t n = json_array_size(a);
    if (n > 256)
        return refuse(c, NUMLA_STATUS_UNSUPPORTED, path, "'%s' has more than 256 schemas", key);
    int32_t kids[256], idx[256];
    size_t nk = 0;
    for (size_t i = 0; i < n; i++) {
        char sub[256];
        snprintf(sub, sizeof sub, "%.200s.%s[%zu]", path, key, i);
        idx[nk] = (int32_t)i;
        if ((kids[nk] = compile(c, json_array_get(a, i), sub)) < 0)
            return -1;
        if (kids[nk] == c->nothing) {
            if (!strcmp(key, "allOf"))
                return c->nothing;
            continue; /* an alternative nothing matches */
        }
        nk++;
    }
    if (nk == 0)
        return nothing_node(c);
    n = nk;
    if (!strcmp(key, "allOf")) {
        if (n != 1)
            return refuse(c, NUMLA_STATUS_UNSUPPORTED, path,
                          "'allOf' with more than one schema is not supported");
        return kids[0];
    }
    if (!strcmp(key, "oneOf")) {
        /* exactly one may match: each two alternatives start apart or are disjoint */
        uint8_t (*sets)[256] = calloc(n, sizeof *sets);
        if (!sets)
            return oom(c);
        for (size_t i = 0; i < n; i++)
            first_bytes(c->g, kids[i], sets[i], 0);
        for (size_t i = 0; i < n; i++)
            for (size_t j = i + 1; j < n; j++) {
                int overlap = 0;
                for (int b = 0; b < 256 && !overlap; b++)
                    overlap = sets[i][b] && sets[j][b];
                if (overlap && !disjoint(c, json_array_get(a, (size_t)idx[i]),
                                         json_array_get(a, (size_t)idx[j]))) {
                    free(sets);
                    return refuse(c, NUMLA_STATUS_UNSUPPORTED, path,
                                  "'oneOf' whose alternatives %zu and %zu may both match is "
                                  "not supported (only alternatives that start apart, distinct "
                                  "'enum'/'const' values, or objects told apart by a required "
                                  "property's distinct constants; use anyOf)",
                                  (size_t)idx[i], (size_t)idx[j]);
                }
            }
        free(sets);
    }
    if (n == 1)
        return kids[0];
    int32_t id = g_alt(c->g, -1, kids, (int32_t)n);
    return id < 0 ? oom(c) : id;
}

enum { T_NULL = 1, T_BOOL = 2, T_OBJ = 4, T_ARR = 8, T_STR = 16, T_NUM = 32, T_INT = 64,
       T_ALL = 63 };

static int type_bit(const char *t)
{
    static const char *const names[] = {"null", "boolean", "object", "array",
                                        "string", "number", "integer"};
    for (int i = 0; i < 7; i++)
        if (!strcmp(t, names[i]))
            return 1 << i;
    return 0;
}

/* The type bits of a 'type' value (0: malformed). */
static int type_bits(const json_t *t)
{
    if (json_is_string(t))
        return type_bit(json_string_value(t));
    int types = 0;
    for (size_t i = 0; json_is_array(t) && i < json_array_size(t); i++) {
        const json_t *e = json_array_get(t, i);
        const int b = json_is_string(e) ? type_bit(json_string_value(e)) : 0;
        if (!b)
            return 0;
        types |= b;
    }
    return types;
}

/* The referenced schema's own 'type' is within `type` (integer within number). */
static int ref_type_implied(const gcomp *c, const json_t *target, const json_t *type)
{
    if (!target)
        return 0;
    int outer = type_bits(type);
    const int inner = type_bits(json_object_get(deref(c, target), "type"));
    if (outer & T_NUM)
        outer |= T_INT;
    return outer && inner && (inner & ~outer) == 0;
}

/* Does value v have one of the types? */
static int has_type(const json_t *v, int types)
{
    if (json_is_null(v))
        return types & T_NULL;
    if (json_is_boolean(v))
        return types & T_BOOL;
    if (json_is_object(v))
        return types & T_OBJ;
    if (json_is_array(v))
        return types & T_ARR;
    if (json_is_string(v))
        return types & T_STR;
    if (json_is_integer(v))
        return types & (T_NUM | T_INT);
    if (json_is_real(v)) {
        double d = json_real_value(v);
        return (types & T_NUM) || ((types & T_INT) && d == (double)(int64_t)d);
    }
    return 0;
}

static int32_t compile_enum(gcomp *c, const json_t *s, int types, const char *path)
{
    const json_t *e = json_object_get(s, "enum"), *k = json_object_get(s, "const");
    if (e && k)
        return refuse(c, NUMLA_STATUS_UNSUPPORTED, path, "'enum' with 'const' is not supported");
    if (!alone(s, e ? "enum" : "const", "type"))
        return refuse(c, NUMLA_STATUS_UNSUPPORTED, path,
                      "'%s' next to keywords other than 'type' is not supported",
                      e ? "enum" : "const");
    if (e && !json_is_array(e))
        return refuse(c, NUMLA_STATUS_FORMAT, path, "'enum' must be a list");
    size_t n = e ? json_array_size(e) : 1;
    if (n > 4096)
        return refuse(c, NUMLA_STATUS_UNSUPPORTED, path, "'enum' has more than 4096 values");
    int32_t *kids = malloc((n ? n : 1) * sizeof *kids);
    if (!kids)
        return oom(c);
    int32_t nk = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *v = e ? json_array_get(e, i) : k;
        if (!has_type(v, types))
            continue;
        char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!text) {
            free(kids);
            return refuse(c, NUMLA_STATUS_FORMAT, path, "an 'enum' value cannot be written");
        }
        int32_t id = g_lit(c->g, text, strlen(text));
        free(text);
        if (id < 0) {
            free(kids);
            return oom(c);
        }
        kids[nk++] = id;
    }
    int32_t id = nk == 0   ? nothing_node(c)
                 : nk == 1 ? kids[0]
                           : g_alt(c->g, -1, kids, nk);
    free(kids);
    return id < 0 && c->st == NUMLA_STATUS_OK ? oom(c) : id;
}

/* A non-negative integer keyword (absent: dflt). */
static int get_count(gcomp *c, const json_t *s, const char *key, int32_t dflt, int32_t *out,
                     const char *path)
{
    const json_t *v = json_object_get(s, key);
    *out = dflt;
    if (!v)
        return 1;
    double d = json_is_integer(v) ? (double)json_integer_value(v)
               : json_is_real(v)  ? json_real_value(v)
                                  : -1;
    if (d < 0 || d != (double)(int64_t)d) {
        refuse(c, NUMLA_STATUS_FORMAT, path, "'%s' must be a non-negative integer", key);
        return 0;
    }
    *out = d > 1e9 ? 1000000000 : (int32_t)d;
    return 1;
}

static int32_t compile_object(gcomp *c, const json_t *s, const char *path)
{
    numla_grammar *g = c->g;
    const json_t *props = json_object_get(s, "properties");
    const json_t *req = json_object_get(s, "required");
    const json_t *ap = json_object_get(s, "additionalProperties");
    int32_t minp, maxp;
    if (props && !json_is_object(props))
        return refuse(c, NUMLA_STATUS_FORMAT, path, "'properties' must be an object");
    if (req && !json_is_array(req))
        return refuse(c, NUMLA_STATUS_FORMAT, path, "'required' must be a list of names");
    if (ap && !json_is_boolean(ap) && !json_is_object(ap))
        return refuse(c, NUMLA_STATUS_FORMAT, path,
                      "'additionalProperties' must be a boolean or a schema");
    if (!get_count(c, s, "minProperties", 0, &minp, path) ||
        !get_count(c, s, "maxProperties", -1, &maxp, path))
        return -1;
    if (maxp >= 0 && minp > maxp)
        return nothing_node(c);
    const json_t *pp = json_object_get(s, "patternProperties");
    if (pp && !json_is_object(pp))
        return refuse(c, NUMLA_STATUS_FORMAT, path, "'patternProperties' must be an object");
    /* the properties: those of 'properties', then each required name it does not define (its
     * value a document of additionalProperties) */
    size_t np = props ? json_object_size(props) : 0, nr = req ? json_array_size(req) : 0;
    const char **names = malloc((np + nr + 1) * sizeof *names);
    const json_t **schemas = malloc((np + nr + 1) * sizeof *schemas);
    int32_t *vals = malloc((np + nr + 1) * sizeof *vals);
    uint8_t *isreq = calloc(np + nr + 1, 1);
    int32_t id = -1;
    if (!names || !schemas || !vals || !isreq) {
        id = oom(c);
        goto out;
    }
    size_t n = 0;
    const char *key;
    const json_t *ps;
    json_object_foreach((json_t *)props, key, ps) {
        names[n] = key;
        schemas[n++] = ps;
    }
    for (size_t i = 0; i < nr; i++) {
        const json_t *r = json_array_get(req, i);
        if (!json_is_string(r)) {
            id = refuse(c, NUMLA_STATUS_FORMAT, path, "'required'[%zu] must be a string", i);
            goto out;
        }
        size_t k = 0;
        while (k < n && strcmp(names[k], json_string_value(r)))
            k++;
        if (k == n) {
            if (json_is_false(ap)) {
                id = nothing_node(c); /* required, and no other key may be there */
                goto out;
            }
            names[n] = json_string_value(r);
            schemas[n++] = json_is_object(ap) ? ap : json_true();
        }
        isreq[k] = 1;
    }
    if (n == 0 && pp && json_object_size(pp) > 0) {
        /* keys of one pattern only (additionalProperties applies to no such key) */
        if (json_object_size(pp) > 1) {
            id = minp > 0 ? refuse(c, NUMLA_STATUS_UNSUPPORTED, path,
                                   "'patternProperties' with more than one pattern and "
                                   "'minProperties' is not supported")
                          : lit_str(c, "{}");
            goto out;
        }
        const char *pat = NULL;
        const json_t *psch = NULL;
        json_object_foreach((json_t *)pp, pat, psch) break;
        numla_regex *r = NULL;
        const numla_status rs = numla_regex_compile(pat, strlen(pat), &r);
        if (rs != NUMLA_STATUS_OK) {
            id = refuse(c, rs == NUMLA_STATUS_NO_MEMORY ? rs : NUMLA_STATUS_UNSUPPORTED, path,
                        "'patternProperties' /%.60s/: %s", pat, numla_error_message());
            goto out;
        }
        if (!grow((void **)&g->regexes, &g->cap_regexes, g->num_regexes + 1,
                  sizeof *g->regexes)) {
            numla_regex_destroy(&r);
            id = oom(c);
            goto out;
        }
        g->regexes[g->num_regexes++] = r;
        char sub[256];
        snprintf(sub, sizeof sub, "%.150s.patternProperties", path);
        const int32_t key_node = g_node(g, G_STR, 0, -1);
        if (key_node < 0) {
            id = oom(c);
            goto out;
        }
        g->nodes[key_node].child = g->num_regexes - 1;
        const int32_t value = compile(c, psch, sub);
        if (value < 0)
            goto out;
        if (value == c->nothing) {
            id = minp > 0 ? nothing_node(c) : lit_str(c, "{}");
            goto out;
        }
        if ((id = g_node(g, G_OBJANY, key_node, 0)) < 0) {
            id = oom(c);
            goto out;
        }
        g->nodes[id].child = value;
        g->nodes[id].off = minp;
        g->nodes[id].len = maxp;
        goto out;
    }
    /* listed keys only: a name some pattern matches must also follow that pattern's schema */
    if (n > 0 && pp) {
        const char *pat;
        const json_t *psch;
        json_object_foreach((json_t *)pp, pat, psch) {
            if (json_is_true(psch) || (json_is_object(psch) && json_object_size(psch) == 0))
                continue;
            numla_regex *r = NULL;
            const numla_status rs = numla_regex_compile(pat, strlen(pat), &r);
            if (rs != NUMLA_STATUS_OK) {
                id = refuse(c, rs == NUMLA_STATUS_NO_MEMORY ? rs : NUMLA_STATUS_UNSUPPORTED, path,
                            "'patternProperties' /%.60s/: %s", pat, numla_error_message());
                goto out;
            }
            size_t k = 0;
            while (k < n && !numla_regex_matches(r, (const uint8_t *)names[k], strlen(names[k])))
                k++;
            numla_regex_destroy(&r);
            if (k < n) {
                id = refuse(c, NUMLA_STATUS_UNSUPPORTED, path,
                            "'patternProperties' /%.60s/ matching the property \"%.60s\" is "
                            "not supported", pat, names[k]);
                goto out;
            }
        }
    }
    if (n == 0) {
        if (json_is_false(ap)) {
            id = minp > 0 ? nothing_node(c) : lit_str(c, "{}");
            goto out;
        }
        int32_t any = any_node(c);
        if (any < 0)
            goto out;
        const int32_t objany = g->list[g->nodes[any].off]; /* any keys, any values */
        if ((!json_is_object(ap) || json_object_size(ap) == 0) && minp == 0 && maxp < 0) {
            id = objany;
            goto out;
        }
        /* any keys, each value valid for additionalProperties */
        char sub[256];
        snprintf(sub, sizeof sub, "%.200s.additionalProperties", path);
        const int32_t key_node = g->nodes[objany].a;
        const int32_t value = json_is_object(ap) ? compile(c, ap, sub) : any;
        if (value < 0)
            goto out;
        if (value == c->nothing) {
            id = minp > 0 ? nothing_node(c) : lit_str(c, "{}");
            goto out;
        }
        if ((id = g_node(g, G_OBJANY, key_node, 0)) < 0) {
            id = oom(c);
            goto out;
        }
        g->nodes[id].child = value;
        g->nodes[id].off = minp;
        g->nodes[id].len = maxp;
        goto out;
    }
    /* the values; a property no value matches is left out (or the object is nothing) */
    size_t kept = 0, nreq = 0;
    for (size_t i = 0; i < n; i++) {
        char sub[256];
        snprintf(sub, sizeof sub, "%.150s.properties.%.80s", path, names[i]);
        if ((vals[i] = compile(c, schemas[i], sub)) < 0)
            goto out;
        if (vals[i] == c->nothing && isreq[i]) {
            id = nothing_node(c);
            goto out;
        }
        kept += vals[i] != c->nothing;
        nreq += isreq[i];
    }
    if ((size_t)minp > kept || (maxp >= 0 && nreq > (size_t)maxp)) {
        id = nothing_node(c); /* only the listed keys are written */
        goto out;
    }
    if (kept > 64 && (minp > 0 || maxp >= 0)) {
        id = refuse(c, NUMLA_STATUS_UNSUPPORTED, path,
                    "'minProperties'/'maxProperties' with more than 64 properties are not "
                    "supported");
        goto out;
    }
    if ((id = g_node(g, G_OBJ, 0, 0)) < 0 ||
        !grow((void **)&g->props, &g->cap_props, g->num_props + (int32_t)kept, sizeof *g->props)) {
        id = oom(c);
        goto out;
    }
    g->nodes[id].off = g->num_props;
    g->nodes[id].len = (int32_t)kept;
    g->nodes[id].a = kept <= 64; /* keys in any order (a set of those written in the state) */
    g->nodes[id].child = minp;
    g->nodes[id].b = maxp;
    for (size_t i = 0; i < n; i++) {
        if (vals[i] == c->nothing)
            continue;
        json_t *ks = json_string(names[i]);
        char *text = ks ? json_dumps(ks, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
        json_decref(ks);
        int32_t off = -1;
        size_t len = text ? strlen(text) : 0;
        if (text) {
            text[len] = ':'; /* the NUL becomes the colon: "\"key\":" */
            off = g_bytes(g, text, len + 1);
        }
        free(text);
        if (off < 0) {
            id = oom(c);
            goto out;
        }
        g->props[g->num_props++] = (gprop){off, (int32_t)len + 1, vals[i], isreq[i]};
    }
out:
    free(names);
    free(schemas);
    free(vals);
    free(isreq);
    return id;
}

/* The string formats compiled, as anchored patterns (a subset of each RFC's syntax where the
 * whole is impractical: docs/serving.md), and the longest string each allows (-1: no bound). */
#define FMT_DATE                                                                                 \
    "[12]\\d{3}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)"\
    "|02-(?:0[1-9]|1\\d|2[0-8]))"
#define FMT_TIME "(?:[01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(?:\\.\\d{1,6})?(?:Z|[+-](?:[01]\\d|2[0-3]):[0-5]\\d)"
#define FMT_LABEL "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
#define FMT_HOST "(?:" FMT_LABEL "\\.)*[A-Za-z](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
#define FMT_H16 "[0-9a-fA-F]{1,4}"
#define FMT_PCHAR "(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})"
#define FMT_QCHAR "(?:[A-Za-z0-9._~!$&'()*+,;=:@/?-]|%[0-9A-Fa-f]{2})"
static const struct {
    const char *name, *pattern;
    int32_t max_len;
} string_formats[] = {
    {"date", "^" FMT_DATE "$", -1},
    {"time", "^" FMT_TIME "$", -1},
    {"date-time", "^" FMT_DATE "T" FMT_TIME "$", -1},
    {"email", "^[A-Za-z0-9_+-]+(?:\\.[A-Za-z0-9_+-]+)*@" FMT_HOST "$", 254},
    {"hostname", "^" FMT_HOST "$", 253},
    {"uuid", "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$", -1},
    {"ipv4", "^(?:(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)\\.){3}(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)$",
     -1},
    {"ipv6",
     "^(?:(?:" FMT_H16 ":){7}" FMT_H16 "|(?:" FMT_H16 ":){1,7}:|(?:" FMT_H16 ":){1,6}:" FMT_H16
     "|(?:" FMT_H16 ":){1,5}(?::" FMT_H16 "){1,2}|(?:" FMT_H16 ":){1,4}(?::" FMT_H16 "){1,3}"
     "|(?:" FMT_H16 ":){1,3}(?::" FMT_H16 "){1,4}|(?:" FMT_H16 ":){1,2}(?::" FMT_H16 "){1,5}"
     "|" FMT_H16 ":(?::" FMT_H16 "){1,6}|:(?:(?::" FMT_H16 "){1,7}|:))$",
     -1},
    {"uri",
     "^[A-Za-z][A-Za-z0-9+.-]*://" FMT_HOST "(?::\\d{1,5})?(?:/" FMT_PCHAR "*)*(?:\\?" FMT_QCHAR
     "*)?(?:#" FMT_QCHAR "*)?$",
     -1},
};
/* Formats JSON Schema defines that are not compiled (refused: a validator may check them);
 * any other format name is an annotation, as the specification says of unknown formats. */
static const char *const refused_formats[] = {
    "duration", "idn-email", "idn-hostname", "iri", "iri-reference", "uri-reference",
    "uri-template", "json-pointer", "relative-json-pointer", "regex", "color", "host-name",
    "ip-address", "utc-millisec", "style", "phone"};

/* A string schema's pattern or format: *re the automaton's index (-1: none); a format may lower
 * *max_len. 0: refused. */
static int compile_string_pattern(gcomp *c, const json_t *s, int32_t *re, int32_t *max_len,
                                  const char *path)
{
    const json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    const char *text = NULL;
    size_t len = 0;
    if (pat && !json_is_string(pat)) {
        refuse(c, NUMLA_STATUS_FORMAT, path, "'pattern' must be a string");
        return 0;
    }
    if (fmt && !json_is_string(fmt)) {
        refuse(c, NUMLA_STATUS_FORMAT, path, "'format' must be a string");
        return 0;
    }
    if (fmt) {
        const char *name = json_string_value(fmt);
        for (size_t i = 0; i < sizeof refused_formats / sizeof refused_formats[0]; i++)
            if (!strcmp(name, refused_formats[i])) {
                refuse(c, NUMLA_STATUS_UNSUPPORTED, path, "'format' \"%s\" is not supported",
                       name);
                return 0;
            }
        for (size_t i = 0; i < sizeof string_formats / sizeof string_formats[0]; i++)
            if (!strcmp(name, string_formats[i].name)) {
                text = string_formats[i].pattern;
                len = strlen(text);
                if (string_formats[i].max_len >= 0 &&
                    (*max_len < 0 || *max_len > string_formats[i].max_len))
                    *max_len = string_formats[i].max_len;
            }
    }
    if (pat && text) {
        refuse(c, NUMLA_STATUS_UNSUPPORTED, path,
               "'pattern' together with 'format' \"%s\" is not supported",
               json_string_value(fmt));
        return 0;
    }
    if (pat) {
        text = json_string_value(pat);
        len = json_string_length(pat);
    }
    if (!text)
        return 1;
    numla_regex *r = NULL;
    const numla_status rs = numla_regex_compile(text, len, &r);
    if (rs != NUMLA_STATUS_OK) {
        refuse(c, rs == NUMLA_STATUS_NO_MEMORY ? NUMLA_STATUS_NO_MEMORY : NUMLA_STATUS_UNSUPPORTED,
               path, "'%s' %s%.60s%s: %s", pat ? "pattern" : "format", pat ? "/" : "\"",
               pat ? text : json_string_value(fmt), pat ? "/" : "\"", numla_error_message());
        return 0;
    }
    numla_grammar *g = c->g;
    if (!grow((void **)&g->regexes, &g->cap_regexes, g->num_regexes + 1, sizeof *g->regexes)) {
        numla_regex_destroy(&r);
        oom(c);
        return 0;
    }
    *re = g->num_regexes;
    g->regexes[g->num_regexes++] = r;
    return 1;
}

static i128 pow10_q(int e)
{
    i128 p = 1;
    for (int i = 0; i < e; i++)
        p *= 10;
    return p;
}

/* floor(a / b), b > 0 */
static i128 floor_div(i128 a, i128 b)
{
    i128 q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}

/* A bound's value v in Q units, rounded up (up = 1) or down when not exact; *exact, *digits
 * (significant digits of its shortest decimal form). 0: beyond +-1e16 (*sign says which). */
static int bound_q(const json_t *v, int up, i128 *q, int *exact, int *digits, int *sign)
{
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        *sign = i < 0 ? -1 : 1;
        if (i > 10000000000000000LL || i < -10000000000000000LL)
            return 0;
        *q = (i128)i * pow10_q(15);
        *exact = 1;
        int d = 0;
        for (json_int_t a = i < 0 ? -i : i; a; a /= 10)
            d++;
        while (i != 0 && i % 10 == 0) {
            i /= 10;
            d--;
        }
        *digits = d;
        return 1;
    }
    const double d = json_real_value(v);
    *sign = d < 0 ? -1 : 1;
    if (!(d > -1e16 && d < 1e16))
        return 0;
    char buf[64];
    int prec = 0;
    for (; prec < 17; prec++) { /* the shortest form that reads back as d */
        snprintf(buf, sizeof buf, "%.*e", prec, d);
        if (strtod(buf, NULL) == d)
            break;
    }
    /* buf: -?D.DDDDe[+-]XX */
    i128 mant = 0;
    int nd = 0, neg = buf[0] == '-';
    const char *p = buf + neg;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') {
            mant = mant * 10 + (*p - '0');
            nd++;
        }
    const int e10 = atoi(p + 1) - (nd - 1); /* value = mant * 10^e10 */
    int sig = nd;
    for (i128 m = mant; m != 0 && m % 10 == 0; m /= 10)
        sig--;
    *digits = mant == 0 ? 0 : sig;
    if (neg)
        mant = -mant;
    if (e10 + 15 >= 0) {
        *q = mant * pow10_q(e10 + 15);
        *exact = 1;
    } else if (e10 + 15 < -20) { /* below 1e-20 in magnitude: 0 or the next unit */
        *q = mant == 0 ? 0 : (up ? (mant > 0 ? 1 : 0) : (mant > 0 ? 0 : -1));
        *exact = mant == 0;
    } else {
        const i128 div = pow10_q(-(e10 + 15));
        *q = up ? -floor_div(-mant, div) : floor_div(mant, div);
        *exact = mant % div == 0;
    }
    return 1;
}

/* A number schema's minimum, maximum, exclusiveMinimum, exclusiveMaximum (draft 4's boolean
 * forms too) and multipleOf into *b (-1: none). 0: refused. */
static int compile_bounds(gcomp *c, const json_t *s, int integer, int32_t *b, const char *path)
{
    static const char *const keys[] = {"minimum", "exclusiveMinimum", "maximum",
                                       "exclusiveMaximum"};
    gbound gb = {0};
    int any = 0;
    const json_t *xmin = json_object_get(s, "exclusiveMinimum");
    const json_t *xmax = json_object_get(s, "exclusiveMaximum");
    for (int k = 0; k < 4; k++) {
        const json_t *v = json_object_get(s, keys[k]);
        if (!v || json_is_boolean(v))
            continue;
        if (!json_is_number(v)) {
            refuse(c, NUMLA_STATUS_FORMAT, path, "'%s' must be a number", keys[k]);
            return 0;
        }
        const int lower = k < 2;
        /* draft 4: exclusiveMinimum/Maximum true makes minimum/maximum exclusive */
        const int excl = (k & 1) || (k == 0 && json_is_true(xmin)) || (k == 2 && json_is_true(xmax));
        i128 q;
        int exact, digits, sign;
        if (!bound_q(v, lower, &q, &exact, &digits, &sign)) {
            if ((lower && sign < 0) || (!lower && sign > 0))
                continue; /* beyond every number written (15 digits): no limit */
            refuse(c, NUMLA_STATUS_UNSUPPORTED, path,
                   "'%s' beyond 1e16 is not supported (numbers are written with 15 digits)",
                   keys[k]);
            return 0;
        }
        if (excl && digits > 15) {
            refuse(c, NUMLA_STATUS_UNSUPPORTED, path,
                   "'%s' with more than 15 significant digits is not supported", keys[k]);
            return 0;
        }
        if (excl && exact)
            q += lower ? 1 : -1;
        if (lower && (!gb.has_lo || q > gb.lo))
            gb.lo = q, gb.has_lo = 1;
        if (!lower && (!gb.has_hi || q < gb.hi))
            gb.hi = q, gb.has_hi = 1;
        any = 1;
    }
    const json_t *mo = json_object_get(s, "multipleOf");
    if (mo) {
        double d = json_is_integer(mo) ? (double)json_integer_value(mo)
                   : json_is_real(mo)  ? json_real_value(mo)
                                       : -1;
        if (!(d > 0)) {
            refuse(c, NUMLA_STATUS_FORMAT, path, "'multipleOf' must be a positive number");
            return 0;
        }
        if (d != (double)(int64_t)d || d >= 1e15) {
            refuse(c, NUMLA_STATUS_UNSUPPORTED, path,
                   "'multipleOf' other than an integer below 1e15 is not supported");
            return 0;
        }
        gb.mult = (i128)(int64_t)d * pow10_q(15);
        any = 1;
    }
    if (!any)
        return 1;
    const i128 limit = pow10_q(30); /* every number written is below 1e15 */
    if ((gb.has_lo && gb.lo >= limit) || (gb.has_hi && gb.hi <= -limit) ||
        (gb.has_lo && gb.has_hi && gb.lo > gb.hi)) {
        refuse(c, NUMLA_STATUS_UNSUPPORTED, path,
               "the bounds leave no number (minimum > maximum)");
        return 0;
    }
    const int nofrac = integer || gb.mult != 0;
    if (!num_start_viable(&gb, nofrac, 0) && !num_start_viable(&gb, nofrac, 1)) {
        refuse(c, NUMLA_STATUS_UNSUPPORTED, path,
               "the bounds leave no number written with at most 15 digits");
        return 0;
    }
    numla_grammar *g = c->g;
    if (!grow((void **)&g->bounds, &g->cap_bounds, g->num_bounds + 1, sizeof *g->bounds)) {
        oom(c);
        return 0;
    }
    *b = g->num_bounds;
    g->bounds[g->num_bounds++] = gb;
    return 1;
}

static int32_t compile_type(gcomp *c, const json_t *s, int bit, const char *path)
{
    numla_grammar *g = c->g;
    int32_t lo, hi;
    switch (bit) {
    case T_NULL: return lit_str(c, "null");
    case T_BOOL: {
        int32_t kids[2] = {lit_str(c, "true"), lit_str(c, "false")};
        if (kids[0] < 0 || kids[1] < 0)
            return -1;
        int32_t id = g_alt(g, -1, kids, 2);
        return id < 0 ? oom(c) : id;
    }
    case T_STR: {
        if (!get_count(c, s, "minLength", 0, &lo, path) ||
            !get_count(c, s, "maxLength", -1, &hi, path))
            return -1;
        if (hi >= 0 && lo > hi)
            return refuse(c, NUMLA_STATUS_UNSUPPORTED, path,
                          "'minLength' > 'maxLength': nothing matches");
        int32_t re = -1;
        if (!compile_string_pattern(c, s, &re, &hi, path))
            return -1;
        if (hi >= 0 && lo > hi)
            return refuse(c, NUMLA_STATUS_UNSUPPORTED, path,
                          "'minLength' > the format's longest string: nothing matches");
        int32_t id = g_node(g, G_STR, lo, hi);
        if (id < 0)
            return oom(c);
        g->nodes[id].child = re;
        if (re >= 0 && !str_ok(g->regexes[re], &g->nodes[id],
                               numla_regex_start(g->regexes[re]), 0))
            return refuse(c, NUMLA_STATUS_UNSUPPORTED, path,
                          "'%s' with 'minLength'/'maxLength': nothing matches",
                          json_object_get(s, "pattern") ? "pattern" : "format");
        return id;
    }
    case T_NUM:
    case T_INT: {
        int32_t b = -1;
        if (!compile_bounds(c, s, bit == T_INT, &b, path))
            return -1;
        int32_t id = g_node(g, G_NUM, bit == T_INT, 0);
        if (id < 0)
            return oom(c);
        g->nodes[id].child = b;
        return id;
    }
    case T_ARR: {
        const json_t *items = json_object_get(s, "items");
        if (!get_count(c, s, "minItems", 0, &lo, path) ||
            !get_count(c, s, "maxItems", -1, &hi, path))
            return -1;
        if (hi >= 0 && lo > hi)
            return refuse(c, NUMLA_STATUS_UNSUPPORTED, path,
                          "'minItems' > 'maxItems': nothing matches");
        if (items && json_is_array(items))
            return refuse(c, NUMLA_STATUS_UNSUPPORTED, path,
                          "'items' as a list (tuple validation) is not supported");
        int32_t item;
        if (json_is_false(items)) {
            if (lo > 0)
                return refuse(c, NUMLA_STATUS_UNSUPPORTED, path,
                              "'items' false with 'minItems' > 0: nothing matches");
            return lit_str(c, "[]");
        }
        char sub[256];
        snprintf(sub, sizeof sub, "%.200s.items", path);
        if ((item = items ? compile(c, items, sub) : any_node(c)) < 0)
            return -1;
        if (item == c->nothing)
            return lo > 0 ? item : lit_str(c, "[]");
        int32_t id = g_node(g, G_ARR, lo, hi);
        if (id < 0)
            return oom(c);
        g->nodes[id].child = item;
        return id;
    }
    default: return compile_object(c, s, path);
    }
}

static int32_t compile(gcomp *c, const json_t *s, const char *path)
{
    if (c->st != NUMLA_STATUS_OK)
        return -1;
    if (json_is_true(s))
        return any_node(c);
    if (json_is_false(s))
        return refuse(c, NUMLA_STATUS_UNSUPPORTED, path, "the schema false matches nothing");
    if (!json_is_object(s))
        return refuse(c, NUMLA_STATUS_FORMAT, path, "a schema must be an object or a boolean");
    if (++c->depth > 128) {
        c->depth--;
        return refuse(c, NUMLA_STATUS_UNSUPPORTED, path, "the schema nests more than 128 deep");
    }
    int32_t id = -1;
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (is_unsupported_validation(k)) {
            id = refuse(c, NUMLA_STATUS_UNSUPPORTED, path, "'%.60s' is not supported", k);
            goto out;
        }
    }
    if (json_object_get(s, "$ref")) {
        id = compile_ref(c, s, path);
        goto out;
    }
    static const char *const alts[] = {"anyOf", "oneOf", "allOf"};
    for (int i = 0; i < 3; i++)
        if (json_object_get(s, alts[i])) {
            id = compile_alts(c, s, alts[i], path);
            goto out;
        }
    int types = 0;
    const json_t *t = json_object_get(s, "type");
    if (!t)
        types = T_ALL;
    else if (json_is_string(t))
        types = type_bit(json_string_value(t));
    else if (json_is_array(t))
        for (size_t i = 0; i < json_array_size(t); i++) {
            const json_t *e = json_array_get(t, i);
            int b = json_is_string(e) ? type_bit(json_string_value(e)) : 0;
            if (!b) {
                types = 0;
                break;
            }
            types |= b;
        }
    if (!types) {
        id = refuse(c, NUMLA_STATUS_FORMAT, path,
                    "'type' must be one of null, boolean, object, array, string, number, "
                    "integer or a non-empty list of them");
        goto out;
    }
    if (json_object_get(s, "enum") || json_object_get(s, "const")) {
        id = compile_enum(c, s, types, path);
        goto out;
    }
    if ((types & T_NUM) && (types & T_INT))
        types &= ~T_INT;
    int32_t kids[7];
    int32_t nk = 0;
    for (int b = 1; b <= T_INT; b <<= 1)
        if (types & b) {
            if ((kids[nk] = compile_type(c, s, b, path)) < 0)
                goto out;
            nk += kids[nk] != c->nothing;
        }
    if (nk == 0)
        id = nothing_node(c);
    else if (nk == 1)
        id = kids[0];
    else if ((id = g_alt(c->g, -1, kids, nk)) < 0)
        id = oom(c);
out:
    c->depth--;
    return id;
}

static numla_status finish_compile(gcomp *c, int32_t root, numla_grammar **out)
{
    for (int32_t i = 0; i < c->num_refs; i++)
        free(c->refs[i].name);
    free(c->refs);
    if (root < 0 || c->st != NUMLA_STATUS_OK) {
        numla_grammar_destroy(&c->g);
        NUMLA_FAIL(c->st != NUMLA_STATUS_OK ? c->st : NUMLA_STATUS_NO_MEMORY, "%s", c->msg);
    }
    c->g->root = root;
    *out = c->g;
    return NUMLA_STATUS_OK;
}

numla_status numla_grammar_compile_schema(const json_t *schema, numla_grammar **out)
{
    *out = NULL;
    gcomp c = {.root = schema, .any = -1, .nothing = -1};
    if (!(c.g = calloc(1, sizeof *c.g)))
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for a grammar");
    int32_t root = compile(&c, schema, "schema");
    if (root >= 0 && root == c.nothing)
        root = refuse(&c, NUMLA_STATUS_UNSUPPORTED, "schema", "the schema matches nothing "
                      "(an 'enum' without a value of its type, bounds that leave nothing, ...)");
    return finish_compile(&c, root, out);
}

numla_status numla_grammar_compile_json_object(numla_grammar **out)
{
    *out = NULL;
    gcomp c = {.any = -1, .nothing = -1};
    if (!(c.g = calloc(1, sizeof *c.g)))
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for a grammar");
    int32_t any = any_node(&c);
    int32_t root = any < 0 ? -1 : c.g->list[c.g->nodes[any].off];
    return finish_compile(&c, root, out);
}

/* ---------------------------------------------------------------- the matcher ---------- */

/* One frame of a stack, immutable once in the arena (stacks share their lower frames). */
typedef struct gframe {
    int32_t up;      /* the frame below, -1: none */
    int32_t node, depth;
    int32_t n;       /* STR: code points; NUM: digits of the part; ARR: items; OBJ: emitted */
    int32_t aux;     /* STR: escape state; OBJ: next property (or the key's) */
    int32_t v;       /* STR: \u value so far */
    int32_t pos;     /* LIT, OBJ key: bytes matched */
    uint64_t mask;   /* OBJ: candidate keys (bit k: property aux + k); bounded NUM: digits */
    uint64_t done;   /* OBJ in any order: the properties written (bit k: property k) */
    uint8_t st, r, lo, hi; /* state; STR: UTF-8 continuation bytes left, their range */
} gframe;

enum { ARENA_MAX = 1 << 22, WORK = 128, WORK_BUDGET = 512, PLAIN_MASKS = 32 };

struct numla_grammar_matcher {
    const numla_grammar *g;
    gframe *ar;
    int32_t na, ca;
    int32_t tops[NUMLA_GRAMMAR_MAX_STACKS];
    int32_t nt;
    /* mask walk scratch: per trie depth, the stacks and the arena mark */
    int32_t *lv_tops;   /* ((lv_cap + 1) * MAX_STACKS) */
    int32_t *lv_n, *lv_mark;
    int32_t lv_cap;
    gframe *tmp;        /* (cap_tmp) compaction scratch */
    int32_t cap_tmp;
    /* inside a pattern string: the plain tokens (grammar_vocab.plain) each automaton state
     * lets through, computed once per (pattern, state) for the vocabulary `pm_vocab` */
    const numla_grammar_vocab *pm_vocab;
    struct { int32_t re, state; uint64_t *mask; } pm[PLAIN_MASKS];
    int32_t num_pm;
};

/* -2: the arena is full (the alternative is dropped). */
static int32_t fnew(numla_grammar_matcher *m, const gframe *f)
{
    if (m->na == m->ca) {
        if (m->ca >= ARENA_MAX)
            return -2;
        int32_t c = m->ca ? m->ca * 2 : 256;
        gframe *q = realloc(m->ar, (size_t)c * sizeof *q);
        if (!q)
            return -2;
        m->ar = q;
        m->ca = c;
    }
    m->ar[m->na] = *f;
    return m->na++;
}

static int32_t finit(numla_grammar_matcher *m, int32_t node, int32_t up, int32_t depth)
{
    if (depth > NUMLA_GRAMMAR_MAX_DEPTH)
        return -2;
    gframe f;
    memset(&f, 0, sizeof f);
    f.up = up;
    f.node = node;
    f.depth = depth;
    return fnew(m, &f);
}

static void emit(int32_t t, int32_t *out, int *nout)
{
    if (t == -2)
        return;
    for (int i = 0; i < *nout; i++)
        if (out[i] == t)
            return;
    if (*nout < NUMLA_GRAMMAR_MAX_STACKS)
        out[(*nout)++] = t;
}

static int hexval(uint8_t c)
{
    return c >= '0' && c <= '9' ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* The lead byte of a UTF-8 sequence: continuation bytes (0: ASCII, -1: invalid) and the range
 * of the first continuation byte. */
static int utf8_lead(uint8_t c, uint8_t *lo, uint8_t *hi)
{
    *lo = 0x80;
    *hi = 0xBF;
    if (c < 0x80)
        return 0;
    if (c >= 0xC2 && c <= 0xDF)
        return 1;
    if (c == 0xE0) {
        *lo = 0xA0;
        return 2;
    }
    if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF)
        return 2;
    if (c == 0xED) {
        *hi = 0x9F;
        return 2;
    }
    if (c == 0xF0) {
        *lo = 0x90;
        return 3;
    }
    if (c >= 0xF1 && c <= 0xF3)
        return 3;
    if (c == 0xF4) {
        *hi = 0x8F;
        return 3;
    }
    return -1;
}

static int num_accepting(int st) { return st == 2 || st == 3 || st == 5 || st == 8; }

/* Does a bounded number hit the bounds with a value of magnitude A..B on the grid of g? */
static int num_hit(const gbound *b, int neg, i128 A, i128 B, i128 g)
{
    i128 lo = neg ? -B : A, hi = neg ? -A : B;
    if (b->has_lo && b->lo > lo)
        lo = b->lo;
    if (b->has_hi && b->hi < hi)
        hi = b->hi;
    const i128 step = b->mult ? b->mult : g;
    const i128 x = -floor_div(-lo, step) * step; /* the first multiple of step >= lo */
    return x <= hi;
}

/* Can a bounded number written so far (state st: 2 "0", 3 integer digits, 4 after '.', 5
 * fraction digits; digits N, `digits` of them in all, fd after the point) still end within
 * its bounds? */
static int num_viable(const gbound *b, int nofrac, int st, uint64_t N, int digits, int fd,
                      int neg)
{
    if (st == 2 || st == 3) {
        const int jmax = st == 3 ? NUM_INT_DIGITS - digits : 0;
        for (int j = 0; j <= jmax; j++) {
            const int F = nofrac ? 0 : NUM_INT_DIGITS - digits - j; /* fraction digits left */
            const i128 g = pow10_q(15 - F), A = (i128)N * pow10_q(j + 15);
            if (num_hit(b, neg, A, A + pow10_q(j + 15) - g, g))
                return 1;
        }
        return 0;
    }
    const int F = fd + NUM_INT_DIGITS - digits;
    if (F == fd && st == 4)
        return 0;
    const i128 g = pow10_q(15 - F), A = (i128)N * pow10_q(15 - fd);
    return num_hit(b, neg, A, A + pow10_q(15 - fd) - g, g);
}

static int num_start_viable(const gbound *b, int nofrac, int neg)
{
    for (int d = 0; d <= 9; d++)
        if (num_viable(b, nofrac, d ? 3 : 2, (uint64_t)d, 1, 0, neg))
            return 1;
    return 0;
}

/* A number frame that may end here. */
static int num_final_ok(const numla_grammar *g, const gnode *nd, const gframe *f)
{
    if (nd->child < 0)
        return num_accepting(f->st);
    if (f->st != 2 && f->st != 3 && f->st != 5)
        return 0;
    const gbound *b = &g->bounds[nd->child];
    i128 x = (i128)f->mask * pow10_q(15 - f->v);
    if (f->r)
        x = -x;
    return (!b->has_lo || x >= b->lo) && (!b->has_hi || x <= b->hi) &&
           (!b->mult || x % b->mult == 0);
}

/* A bounded number's byte: 1 taken, 0 the number ended before c, -1 refused. */
static int num_step_bounded(const gbound *b, int nofrac, gframe *f, uint8_t c)
{
    const int digit = c >= '0' && c <= '9', d = c - '0';
    switch (f->st) {
    case 0:
    case 1:
        if (c == '-' && f->st == 0) {
            f->st = 1;
            f->r = 1;
            return num_start_viable(b, nofrac, 1) ? 1 : -1;
        }
        if (!digit)
            return -1;
        f->st = d ? 3 : 2;
        f->mask = (uint64_t)d;
        f->aux = 1;
        break;
    case 2:
    case 3:
        if (digit) {
            if (f->st == 2 || f->aux >= NUM_INT_DIGITS)
                return -1;
            f->mask = f->mask * 10 + (uint64_t)d;
            f->aux++;
        } else if (c == '.' && !nofrac && f->aux < NUM_INT_DIGITS) {
            f->st = 4;
        } else
            return 0;
        break;
    case 4:
    case 5:
        if (digit) {
            if (f->aux >= NUM_INT_DIGITS)
                return -1;
            f->st = 5;
            f->mask = f->mask * 10 + (uint64_t)d;
            f->aux++;
            f->v++;
        } else
            return f->st == 5 ? 0 : -1;
        break;
    default: return -1;
    }
    return num_viable(b, nofrac, f->st, f->mask, f->aux, f->v, f->r) ? 1 : -1;
}

/* Object key candidates from property i: up to and including the first required one, at most
 * 64. */
static uint64_t key_candidates(const numla_grammar *g, const gnode *nd, int32_t i)
{
    uint64_t mask = 0;
    for (int32_t k = 0; k < 64 && i + k < nd->len; k++) {
        mask |= (uint64_t)1 << k;
        if (g->props[nd->off + i + k].required)
            break;
    }
    return mask;
}

/* An object in any order: every property (bit k: property k) and the required ones. */
static uint64_t all_props(const gnode *nd)
{
    return nd->len >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << nd->len) - 1;
}

static uint64_t required_props(const numla_grammar *g, const gnode *nd)
{
    uint64_t r = 0;
    for (int32_t k = 0; k < nd->len && k < 64; k++)
        if (g->props[nd->off + k].required)
            r |= (uint64_t)1 << k;
    return r;
}

static int required_left(const numla_grammar *g, const gnode *nd, int32_t i)
{
    for (; i < nd->len; i++)
        if (g->props[nd->off + i].required)
            return 1;
    return 0;
}

/* A pattern string can still end well from automaton state d with n code points read. */
static int str_ok(const numla_regex *re, const gnode *nd, int32_t d, int32_t n)
{
    if (d < 0)
        return 0;
    const int32_t lo = numla_regex_min_left(re, d), hi = numla_regex_max_left(re, d);
    return (nd->b < 0 || (int64_t)n + lo <= nd->b) &&
           (hi == NUMLA_REGEX_INF || (int64_t)n + hi >= nd->a);
}

/* The byte an escape \c stands for (c one of " \ / b f n r t). */
static uint8_t unescape(uint8_t c)
{
    switch (c) {
    case 'b': return '\b';
    case 'f': return '\f';
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    default: return c;
    }
}

/* Some escape (not \u: pattern strings take none) can follow a backslash in state d. */
static int escape_ok(const numla_regex *re, const gnode *nd, int32_t d, int32_t n)
{
    static const uint8_t esc[] = {'"', '\\', '/', 'b', 'f', 'n', 'r', 't'};
    for (size_t i = 0; i < sizeof esc; i++)
        if (str_ok(re, nd, numla_regex_step(re, d, unescape(esc[i])), n))
            return 1;
    return 0;
}

/* Every stack that stack `top` becomes by consuming byte c, added to out. */
static void step_one(numla_grammar_matcher *m, int32_t top, uint8_t c, int32_t *out, int *nout)
{
    const numla_grammar *g = m->g;
    int32_t work[WORK];
    int nw = 0, budget = WORK_BUDGET;
    work[nw++] = top;
#define PUSH_WORK(x)                                                                             \
    do {                                                                                         \
        int32_t w_ = (x);                                                                        \
        if (w_ >= 0 && nw < WORK)                                                                \
            work[nw++] = w_;                                                                     \
    } while (0)
    /* the parent p (modified copy of f) with a child frame of node `child` on it */
#define PUSH_CHILD(p, child)                                                                     \
    do {                                                                                         \
        int32_t pi_ = fnew(m, &(p));                                                             \
        if (pi_ >= 0)                                                                            \
            PUSH_WORK(finit(m, (child), pi_, (p).depth + 1));                                    \
    } while (0)
    while (nw > 0 && budget-- > 0) {
        const int32_t t = work[--nw];
        gframe f = m->ar[t];
        const gnode *nd = &g->nodes[f.node];
        switch (nd->kind) {
        case G_LIT:
            if (g->bytes[nd->off + f.pos] != c)
                break;
            if (f.pos + 1 == nd->len) {
                emit(f.up, out, nout);
                break;
            }
            f.pos++;
            emit(fnew(m, &f), out, nout);
            break;
        case G_ALT:
            for (int32_t i = nd->len - 1; i >= 0; i--)
                PUSH_WORK(finit(m, g->list[nd->off + i], f.up, f.depth));
            break;
        case G_STR: {
            const numla_regex *re = nd->child >= 0 ? g->regexes[nd->child] : NULL;
            if (f.st == 0) {
                if (c != '"')
                    break;
                f.st = 1;
                if (re) {
                    f.pos = numla_regex_start(re);
                    if (!str_ok(re, nd, f.pos, 0))
                        break;
                }
            } else if (f.r > 0) {
                if (c < f.lo || c > f.hi)
                    break;
                f.r--;
                f.lo = 0x80;
                f.hi = 0xBF;
                if (re && !str_ok(re, nd, f.pos = numla_regex_step(re, f.pos, c), f.n))
                    break;
            } else if (f.aux == 1) {
                if (c == 'u' && !re) {
                    f.aux = 2;
                    f.v = 0;
                } else if (strchr("\"\\/bfnrt", c) && c) {
                    f.aux = 0;
                    if (re && !str_ok(re, nd, f.pos = numla_regex_step(re, f.pos, unescape(c)),
                                      f.n))
                        break;
                } else
                    break;
            } else if (f.aux >= 2) {
                int h = hexval(c);
                if (h < 0)
                    break;
                f.v = f.v * 16 + h;
                const int k = f.aux - 2; /* digits before this one */
                if (k == 1 && f.v >= 0xD8 && f.v <= 0xDF)
                    break; /* a surrogate: jansson wants pairs, numla writes none */
                if (k == 3 && f.v == 0)
                    break; /* \u0000: jansson refuses it */
                f.aux = k == 3 ? 0 : f.aux + 1;
            } else if (c == '"') {
                if (f.n < nd->a || (re && !numla_regex_accepting(re, f.pos)))
                    break;
                emit(f.up, out, nout);
                break;
            } else {
                if (c < 0x20 || (nd->b >= 0 && f.n >= nd->b))
                    break;
                if (c == '\\') {
                    if (re && !escape_ok(re, nd, f.pos, f.n + 1))
                        break;
                    f.aux = 1;
                } else {
                    int r = utf8_lead(c, &f.lo, &f.hi);
                    if (r < 0)
                        break;
                    f.r = (uint8_t)r;
                    if (re && !str_ok(re, nd, f.pos = numla_regex_step(re, f.pos, c), f.n + 1))
                        break;
                }
                f.n++;
            }
            emit(fnew(m, &f), out, nout);
            break;
        }
        case G_NUM: {
            if (nd->child >= 0) {
                const gbound *bd = &g->bounds[nd->child];
                const int ok = num_step_bounded(bd, nd->a || bd->mult != 0, &f, c);
                if (ok == 1)
                    emit(fnew(m, &f), out, nout);
                else if (ok == 0 && num_final_ok(g, nd, &m->ar[t]))
                    PUSH_WORK(f.up);
                break;
            }
            const int digit = c >= '0' && c <= '9', integer = nd->a;
            int ok = 1;
            switch (f.st) {
            case 0:
            case 1:
                if (c == '-' && f.st == 0)
                    f.st = 1;
                else if (c == '0')
                    f.st = 2;
                else if (digit) {
                    f.st = 3;
                    f.n = 1;
                } else
                    ok = -1;
                break;
            case 2:
            case 3:
                if (f.st == 3 && digit && f.n < NUM_INT_DIGITS)
                    f.n++;
                else if (!integer && c == '.')
                    f.st = 4;
                else if (!integer && (c == 'e' || c == 'E'))
                    f.st = 6;
                else
                    ok = 0;
                break;
            case 4:
                if (!digit)
                    ok = -1;
                f.st = 5;
                f.n = 1;
                break;
            case 5:
                if (digit && f.n < NUM_FRAC_DIGITS)
                    f.n++;
                else if (c == 'e' || c == 'E')
                    f.st = 6;
                else
                    ok = 0;
                break;
            case 6:
            case 7:
                if ((c == '+' || c == '-') && f.st == 6)
                    f.st = 7;
                else if (digit) {
                    f.st = 8;
                    f.n = 1;
                } else
                    ok = -1;
                break;
            default:
                if (digit && f.n < NUM_EXP_DIGITS)
                    f.n++;
                else
                    ok = 0;
            }
            if (ok == 1)
                emit(fnew(m, &f), out, nout);
            else if (ok == 0 && num_accepting(m->ar[t].st))
                PUSH_WORK(f.up); /* the number ended before c: c goes to the frame below */
            break;
        }
        case G_ARR:
            if (f.st == 0) {
                if (c != '[')
                    break;
                f.st = 1;
                emit(fnew(m, &f), out, nout);
            } else if ((f.st == 1 || f.st == 2) && c == ']') {
                if (f.n >= nd->a)
                    emit(f.up, out, nout);
            } else if (f.st == 2) {
                if (c == ',' && (nd->b < 0 || f.n < nd->b)) {
                    f.st = 3;
                    emit(fnew(m, &f), out, nout);
                }
            } else if (f.st == 1 && nd->b == 0) {
                break;
            } else { /* 1 or 3: an item starts with c */
                f.st = 2;
                f.n++;
                PUSH_CHILD(f, nd->child);
            }
            break;
        case G_OBJ: {
            /* in any order (a): the keys not yet written; else those from aux on */
            uint64_t left =
                nd->a ? all_props(nd) & ~f.done : (f.aux < nd->len ? key_candidates(g, nd, f.aux) : 0);
            if (nd->a && nd->b >= 0) { /* maxProperties: room kept for the required keys */
                const uint64_t req = required_props(g, nd) & ~f.done;
                if (f.n + __builtin_popcountll(req) >= nd->b)
                    left &= req;
            }
            switch (f.st) {
            case 0:
                if (c != '{')
                    break;
                f.st = 1;
                emit(fnew(m, &f), out, nout);
                break;
            case 1:
                if (c == '}') {
                    if ((nd->a ? !(required_props(g, nd) & ~f.done) : !required_left(g, nd, f.aux)) &&
                        f.n >= nd->child)
                        emit(f.up, out, nout);
                    break;
                }
                if (f.n > 0) {
                    if (c == ',' && left) {
                        f.st = 2;
                        emit(fnew(m, &f), out, nout);
                    }
                    break;
                }
                /* the first key */
                __attribute__((fallthrough));
            case 2:
                if (!left)
                    break;
                f.st = 4;
                f.pos = 0;
                f.mask = left;
                if (nd->a)
                    f.aux = 0;
                PUSH_WORK(fnew(m, &f));
                break;
            case 3: { /* the key of property aux was read: its value */
                const int32_t value = g->props[nd->off + f.aux].value;
                f.st = 1;
                if (nd->a)
                    f.done |= (uint64_t)1 << f.aux;
                else
                    f.aux++;
                f.n++;
                PUSH_CHILD(f, value);
                break;
            }
            default: { /* 4: in a key */
                uint64_t keep = 0;
                int32_t done = -1;
                for (int k = 0; k < 64; k++) {
                    if (!(f.mask >> k & 1))
                        continue;
                    const gprop *p = &g->props[nd->off + f.aux + k];
                    if (f.pos < p->key_len && g->bytes[p->key_off + f.pos] == c) {
                        keep |= (uint64_t)1 << k;
                        if (f.pos + 1 == p->key_len)
                            done = k;
                    }
                }
                if (!keep)
                    break;
                if (done >= 0) { /* a complete key is the only one left (quotes are escaped) */
                    f.st = 3;
                    f.aux += done;
                    f.mask = 0;
                    f.pos = 0;
                } else {
                    f.mask = keep;
                    f.pos++;
                }
                emit(fnew(m, &f), out, nout);
            }
            }
            break;
        }
        case G_OBJANY: /* off: minProperties, len: maxProperties (-1: none) */
            switch (f.st) {
            case 0:
            case 2:
                if (c != (f.st == 0 ? '{' : ':'))
                    break;
                f.st++;
                emit(fnew(m, &f), out, nout);
                break;
            case 1:
            case 5:
                if (c == '}' && f.st == 1) {
                    if (nd->off == 0)
                        emit(f.up, out, nout);
                    break;
                }
                if (nd->len == 0)
                    break;
                f.st = 2;
                PUSH_CHILD(f, nd->a);
                break;
            case 3:
                f.st = 4;
                f.n++;
                PUSH_CHILD(f, nd->child);
                break;
            default:
                if (c == '}') {
                    if (f.n >= nd->off)
                        emit(f.up, out, nout);
                } else if (c == ',' && (nd->len < 0 || f.n < nd->len)) {
                    f.st = 5;
                    emit(fnew(m, &f), out, nout);
                }
            }
            break;
        }
    }
#undef PUSH_WORK
#undef PUSH_CHILD
}

static int set_step(numla_grammar_matcher *m, const int32_t *in, int nin, uint8_t c, int32_t *out)
{
    int nout = 0;
    for (int i = 0; i < nin; i++)
        if (in[i] >= 0)
            step_one(m, in[i], c, out, &nout);
    return nout;
}

static int stack_complete(const numla_grammar_matcher *m, int32_t t)
{
    if (t == -1)
        return 1;
    const gframe *f = &m->ar[t];
    return f->up == -1 && m->g->nodes[f->node].kind == G_NUM &&
           num_final_ok(m->g, &m->g->nodes[f->node], f);
}

int numla_grammar_matcher_is_complete(const numla_grammar_matcher *m)
{
    for (int i = 0; i < m->nt; i++)
        if (stack_complete(m, m->tops[i]))
            return 1;
    return 0;
}

int numla_grammar_matcher_is_closed(const numla_grammar_matcher *m)
{
    for (int i = 0; i < m->nt; i++)
        if (m->tops[i] != -1)
            return 0;
    return m->nt > 0;
}

static int frames_equal(const gframe *a, const gframe *b)
{
    return a->node == b->node && a->depth == b->depth && a->n == b->n && a->aux == b->aux &&
           a->v == b->v && a->pos == b->pos && a->mask == b->mask && a->done == b->done &&
           a->st == b->st &&
           a->r == b->r && a->lo == b->lo && a->hi == b->hi;
}

static int stacks_equal(const numla_grammar_matcher *m, int32_t a, int32_t b)
{
    while (a >= 0 && b >= 0) {
        if (a == b)
            return 1;
        if (!frames_equal(&m->ar[a], &m->ar[b]))
            return 0;
        a = m->ar[a].up;
        b = m->ar[b].up;
    }
    return a == b;
}

/* Make tops[n] the committed state: distinct stacks copied to the start of the arena. 0: out
 * of memory (the state is then as before). */
static int commit(numla_grammar_matcher *m, const int32_t *tops, int n)
{
    int32_t keep[NUMLA_GRAMMAR_MAX_STACKS];
    int nk = 0;
    for (int i = 0; i < n; i++) {
        int dup = 0;
        for (int j = 0; j < nk && !dup; j++)
            dup = stacks_equal(m, keep[j], tops[i]);
        if (!dup)
            keep[nk++] = tops[i];
    }
    int32_t nt = 0, newtops[NUMLA_GRAMMAR_MAX_STACKS], need = 0;
    for (int i = 0; i < nk; i++)
        for (int32_t t = keep[i]; t >= 0; t = m->ar[t].up)
            need++;
    if (!grow((void **)&m->tmp, &m->cap_tmp, need + 1, sizeof *m->tmp))
        return 0;
    for (int i = 0; i < nk; i++) {
        int32_t chain[NUMLA_GRAMMAR_MAX_DEPTH + 1], len = 0;
        for (int32_t t = keep[i]; t >= 0 && len <= NUMLA_GRAMMAR_MAX_DEPTH; t = m->ar[t].up)
            chain[len++] = t;
        int32_t up = -1;
        for (int32_t k = len - 1; k >= 0; k--) {
            m->tmp[nt] = m->ar[chain[k]];
            m->tmp[nt].up = up;
            up = nt++;
        }
        newtops[i] = up;
    }
    memcpy(m->ar, m->tmp, (size_t)nt * sizeof *m->ar);
    m->na = nt;
    memcpy(m->tops, newtops, (size_t)nk * sizeof *newtops);
    m->nt = nk;
    return 1;
}

numla_status numla_grammar_matcher_create(const numla_grammar *g, numla_grammar_matcher **out)
{
    *out = NULL;
    numla_grammar_matcher *m = calloc(1, sizeof *m);
    if (!m)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for a grammar matcher");
    m->g = g;
    int32_t t = finit(m, g->root, -1, 1);
    if (t < 0) {
        numla_grammar_matcher_destroy(&m);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for a grammar matcher");
    }
    m->tops[0] = t;
    m->nt = 1;
    *out = m;
    return NUMLA_STATUS_OK;
}

void numla_grammar_matcher_destroy(numla_grammar_matcher **mp)
{
    if (!mp || !*mp)
        return;
    numla_grammar_matcher *m = *mp;
    free(m->ar);
    free(m->lv_tops);
    free(m->lv_n);
    free(m->lv_mark);
    free(m->tmp);
    for (int32_t i = 0; i < m->num_pm; i++)
        free(m->pm[i].mask);
    free(m);
    *mp = NULL;
}

int numla_grammar_matcher_accept_bytes(numla_grammar_matcher *m, const uint8_t *b, size_t n)
{
    const int32_t mark = m->na;
    int32_t cur[NUMLA_GRAMMAR_MAX_STACKS], next[NUMLA_GRAMMAR_MAX_STACKS];
    int nc = m->nt;
    memcpy(cur, m->tops, (size_t)nc * sizeof *cur);
    for (size_t i = 0; i < n; i++) {
        int nn = set_step(m, cur, nc, b[i], next);
        if (nn == 0) {
            m->na = mark;
            return 0;
        }
        memcpy(cur, next, (size_t)nn * sizeof *cur);
        nc = nn;
    }
    if (!commit(m, cur, nc)) {
        m->na = mark;
        return 0;
    }
    return 1;
}

/* ---------------------------------------------------------------- the vocabulary ------- */

typedef struct tnode {
    int32_t skip;      /* the next node outside this one's subtree */
    int32_t tok_first; /* into sorted[]: the tokens whose bytes end here */
    int32_t tok_n;
    uint16_t depth;    /* 1: a root child */
    uint8_t byte;
} tnode;

typedef struct trie {
    tnode *nodes;
    int32_t n;
    int32_t *sorted;   /* token ids, by bytes */
} trie;

enum { MAX_TOKEN_BYTES = 1024 };
/* plain tokens of up to this many characters are bucketed by bitmaps; longer ones are listed */
enum { PLAIN_LE_CHARS = 32 };

struct numla_grammar_vocab {
    int32_t V;
    uint8_t *bytes;
    int64_t *off;      /* (V + 1) */
    int32_t *end_ids;
    int32_t num_end;
    uint8_t *is_end;   /* (V) */
    trie all, other;   /* every token; the tokens that are not plain string content */
    uint64_t *plain;   /* (words) tokens that are whole UTF-8 characters, none a control,
                          quote or backslash: inside a string they only add characters */
    int32_t plain_max_chars;
    uint64_t *plain_le;      /* (PLAIN_LE_CHARS + 1, words): row c, the plain tokens of at most
                                c characters (row 0 empty) */
    int32_t *plain_long;     /* (num_plain_long) the plain tokens of more than PLAIN_LE_CHARS
                                characters, fewest characters first */
    int32_t *plain_long_chars; /* (num_plain_long) their characters */
    int32_t num_plain_long;
    int32_t max_len;
};

typedef struct sort_key {
    const uint8_t *p;
    int64_t len;
    int32_t id;
} sort_key;

static int cmp_key(const void *a, const void *b)
{
    const sort_key *x = a, *y = b;
    int c = memcmp(x->p, y->p, (size_t)(x->len < y->len ? x->len : y->len));
    if (c)
        return c;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int cmp_i64(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* ids[n] in byte order. */
static int sort_ids(const numla_grammar_vocab *v, int32_t *ids, int32_t n)
{
    sort_key *k = malloc(((size_t)n + 1) * sizeof *k);
    if (!k)
        return 0;
    for (int32_t i = 0; i < n; i++)
        k[i] = (sort_key){v->bytes + v->off[ids[i]], v->off[ids[i] + 1] - v->off[ids[i]], ids[i]};
    qsort(k, (size_t)n, sizeof *k, cmp_key);
    for (int32_t i = 0; i < n; i++)
        ids[i] = k[i].id;
    free(k);
    return 1;
}

/* A trie in depth-first order over ids[n] sorted by bytes. */
static int trie_build(const numla_grammar_vocab *v, int32_t *ids, int32_t n, trie *t)
{
    int64_t total = 0;
    for (int32_t i = 0; i < n; i++)
        total += v->off[ids[i] + 1] - v->off[ids[i]];
    t->sorted = ids;
    t->nodes = malloc((size_t)(total + 1) * sizeof *t->nodes);
    int32_t *path = malloc((MAX_TOKEN_BYTES + 1) * sizeof *path);
    if (!t->nodes || !path) {
        free(path);
        return 0;
    }
    int32_t nn = 0;
    const uint8_t *prev = NULL;
    int64_t prev_len = 0;
    for (int32_t i = 0; i < n; i++) {
        const uint8_t *s = v->bytes + v->off[ids[i]];
        const int64_t len = v->off[ids[i] + 1] - v->off[ids[i]];
        int64_t l = 0;
        while (prev && l < len && l < prev_len && s[l] == prev[l])
            l++;
        for (int64_t p = l; p < len; p++) {
            t->nodes[nn] = (tnode){.skip = 0, .tok_first = -1, .tok_n = 0,
                                   .depth = (uint16_t)(p + 1), .byte = s[p]};
            path[p + 1] = nn++;
        }
        tnode *end = &t->nodes[path[len]];
        if (end->tok_n == 0)
            end->tok_first = i;
        end->tok_n++;
        prev = s;
        prev_len = len;
    }
    /* skip: the next node whose depth is not greater */
    int32_t *stack = malloc((MAX_TOKEN_BYTES + 1) * sizeof *stack);
    if (!stack) {
        free(path);
        return 0;
    }
    int32_t sp = 0;
    for (int32_t k = 0; k < nn; k++) {
        while (sp > 0 && t->nodes[stack[sp - 1]].depth >= t->nodes[k].depth)
            t->nodes[stack[--sp]].skip = k;
        stack[sp++] = k;
    }
    while (sp > 0)
        t->nodes[stack[--sp]].skip = nn;
    t->n = nn;
    free(stack);
    free(path);
    return 1;
}

/* Plain string content: whole UTF-8 characters, no control, quote or backslash; *chars. */
static int plain_bytes(const uint8_t *s, int64_t n, int32_t *chars)
{
    int32_t ch = 0;
    for (int64_t i = 0; i < n; ch++) {
        uint8_t c = s[i], lo, hi;
        if (c < 0x20 || c == '"' || c == '\\')
            return 0;
        int r = utf8_lead(c, &lo, &hi);
        if (r < 0 || i + r >= n)
            return 0;
        for (int k = 1; k <= r; k++) {
            uint8_t d = s[i + k];
            if (d < (k == 1 ? lo : 0x80) || d > (k == 1 ? hi : 0xBF))
                return 0;
        }
        i += r + 1;
    }
    *chars = ch;
    return n > 0;
}

void numla_grammar_vocab_destroy(numla_grammar_vocab **vp)
{
    if (!vp || !*vp)
        return;
    numla_grammar_vocab *v = *vp;
    free(v->bytes);
    free(v->off);
    free(v->end_ids);
    free(v->is_end);
    free(v->all.nodes);
    free(v->all.sorted);
    free(v->other.nodes);
    free(v->other.sorted);
    free(v->plain);
    free(v->plain_le);
    free(v->plain_long);
    free(v->plain_long_chars);
    free(v);
    *vp = NULL;
}

int32_t numla_grammar_vocab_size(const numla_grammar_vocab *v) { return v->V; }

numla_status numla_grammar_vocab_create(int32_t V, const uint8_t *const *bytes,
                                        const size_t *lens, const int32_t *end_ids,
                                        int32_t num_end, numla_grammar_vocab **out)
{
    *out = NULL;
    if (V <= 0 || num_end < 0)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "grammar vocabulary: %d tokens, %d end ids", V,
                   num_end);
    numla_grammar_vocab *v = calloc(1, sizeof *v);
    if (!v)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for a grammar vocabulary");
    v->V = V;
    const size_t words = ((size_t)V + 63) / 64;
    v->off = malloc(((size_t)V + 1) * sizeof *v->off);
    v->is_end = calloc((size_t)V, 1);
    v->end_ids = malloc(((size_t)num_end + 1) * sizeof *v->end_ids);
    v->plain = calloc(words, sizeof *v->plain);
    v->plain_le = calloc((PLAIN_LE_CHARS + 1) * words, sizeof *v->plain_le);
    int32_t *chars_of = malloc((size_t)V * sizeof *chars_of);
    int32_t *all = malloc((size_t)V * sizeof *all), *other = malloc((size_t)V * sizeof *other);
    int64_t total = 0;
    if (v->off && v->is_end && v->end_ids && v->plain && v->plain_le && chars_of && all &&
        other) {
        for (int32_t i = 0; i < num_end; i++) {
            if (end_ids[i] < 0 || end_ids[i] >= V)
                continue;
            v->is_end[end_ids[i]] = 1;
            v->end_ids[v->num_end++] = end_ids[i];
        }
        for (int32_t i = 0; i < V; i++) {
            v->off[i] = total;
            if (bytes[i] && lens[i] > 0 && lens[i] <= MAX_TOKEN_BYTES && !v->is_end[i])
                total += (int64_t)lens[i];
        }
        v->off[V] = total;
        v->bytes = malloc((size_t)total + 1);
    }
    if (!v->bytes) {
        free(all);
        free(other);
        free(chars_of);
        numla_grammar_vocab_destroy(&v);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for a grammar vocabulary of %d tokens", V);
    }
    int32_t na = 0, no = 0;
    for (int32_t i = 0; i < V; i++) {
        const int64_t len = v->off[i + 1] - v->off[i];
        chars_of[i] = 0;
        if (!len)
            continue;
        memcpy(v->bytes + v->off[i], bytes[i], (size_t)len);
        all[na++] = i;
        int32_t chars;
        if (plain_bytes(v->bytes + v->off[i], len, &chars)) {
            v->plain[i / 64] |= (uint64_t)1 << (i % 64);
            chars_of[i] = chars;
            if (chars > v->plain_max_chars)
                v->plain_max_chars = chars;
        } else
            other[no++] = i;
        if (len > v->max_len)
            v->max_len = (int32_t)len;
    }
    /* the plain tokens by their characters: cumulative rows, then the longer ones by count */
    for (int32_t c = 1; c <= PLAIN_LE_CHARS; c++) {
        uint64_t *row = v->plain_le + (size_t)c * words;
        memcpy(row, row - words, words * sizeof *row);
        for (int32_t i = 0; i < V; i++)
            if (chars_of[i] == c)
                row[i / 64] |= (uint64_t)1 << (i % 64);
    }
    for (int32_t i = 0; i < V; i++)
        v->num_plain_long += chars_of[i] > PLAIN_LE_CHARS;
    v->plain_long = malloc(((size_t)v->num_plain_long + 1) * sizeof *v->plain_long);
    v->plain_long_chars = malloc(((size_t)v->num_plain_long + 1) * sizeof *v->plain_long_chars);
    int64_t *keys = malloc(((size_t)v->num_plain_long + 1) * sizeof *keys);
    if (v->plain_long && v->plain_long_chars && keys) {
        int32_t nl = 0;
        for (int32_t i = 0; i < V; i++)
            if (chars_of[i] > PLAIN_LE_CHARS)
                keys[nl++] = (int64_t)chars_of[i] << 32 | i;
        qsort(keys, (size_t)nl, sizeof *keys, cmp_i64);
        for (int32_t k = 0; k < nl; k++) {
            v->plain_long[k] = (int32_t)(keys[k] & 0xFFFFFFFF);
            v->plain_long_chars[k] = (int32_t)(keys[k] >> 32);
        }
    }
    free(chars_of);
    if (!keys || !v->plain_long || !v->plain_long_chars) {
        free(keys);
        free(all);
        free(other);
        numla_grammar_vocab_destroy(&v);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for a grammar vocabulary of %d tokens", V);
    }
    free(keys);
    int ok = sort_ids(v, all, na) && trie_build(v, all, na, &v->all);
    if (!ok)
        free(all);
    int ok2 = sort_ids(v, other, no) && trie_build(v, other, no, &v->other);
    if (!ok2)
        free(other);
    if (!ok || !ok2) {
        numla_grammar_vocab_destroy(&v);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for a grammar vocabulary trie");
    }
    *out = v;
    return NUMLA_STATUS_OK;
}

numla_status numla_grammar_vocab_from_tokenizer(const numla_tokenizer *t, int64_t vocab_size,
                                                const int32_t *end_ids, int32_t num_end,
                                                numla_grammar_vocab **out)
{
    *out = NULL;
    if (vocab_size <= 0 || vocab_size > INT32_MAX)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "grammar vocabulary of %lld tokens",
                   (long long)vocab_size);
    const uint8_t **b = calloc((size_t)vocab_size, sizeof *b);
    size_t *lens = calloc((size_t)vocab_size, sizeof *lens);
    if (!b || !lens) {
        free(b);
        free(lens);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for a grammar vocabulary");
    }
    const int64_t tv = numla_tokenizer_vocab_size(t);
    for (int64_t i = 0; i < vocab_size && i < tv; i++)
        if (!numla_tokenizer_is_special(t, (int32_t)i))
            b[i] = numla_tokenizer_token_bytes(t, (int32_t)i, &lens[i]);
    numla_status st =
        numla_grammar_vocab_create((int32_t)vocab_size, b, lens, end_ids, num_end, out);
    free(b);
    free(lens);
    return st;
}

/* ---------------------------------------------------------------- the mask ------------- */

static int lv_reserve(numla_grammar_matcher *m, int32_t depth)
{
    if (depth <= m->lv_cap)
        return 1;
    free(m->lv_tops);
    free(m->lv_n);
    free(m->lv_mark);
    m->lv_tops = malloc((size_t)(depth + 1) * NUMLA_GRAMMAR_MAX_STACKS * sizeof *m->lv_tops);
    m->lv_n = malloc((size_t)(depth + 1) * sizeof *m->lv_n);
    m->lv_mark = malloc((size_t)(depth + 1) * sizeof *m->lv_mark);
    if (!m->lv_tops || !m->lv_n || !m->lv_mark) {
        m->lv_cap = 0;
        return 0;
    }
    m->lv_cap = depth;
    return 1;
}

static void walk(numla_grammar_matcher *m, const trie *t, uint64_t *mask)
{
    const int32_t mark0 = m->na;
    memcpy(m->lv_tops, m->tops, (size_t)m->nt * sizeof *m->tops);
    m->lv_n[0] = m->nt;
    m->lv_mark[0] = mark0;
    for (int32_t k = 0; k < t->n;) {
        const tnode *nd = &t->nodes[k];
        const int32_t d = nd->depth;
        m->na = m->lv_mark[d - 1];
        int32_t *cur = m->lv_tops + (size_t)d * NUMLA_GRAMMAR_MAX_STACKS;
        const int n = set_step(m, m->lv_tops + (size_t)(d - 1) * NUMLA_GRAMMAR_MAX_STACKS,
                               m->lv_n[d - 1], nd->byte, cur);
        if (n == 0) {
            k = nd->skip;
            continue;
        }
        m->lv_n[d] = n;
        m->lv_mark[d] = m->na;
        for (int32_t i = 0; i < nd->tok_n; i++) {
            const int32_t id = t->sorted[nd->tok_first + i];
            mask[id / 64] |= (uint64_t)1 << (id % 64);
        }
        k++;
    }
    m->na = mark0;
}

/* The most code points any state of re still needs before a match. */
static int32_t max_min_left(const numla_regex *re)
{
    int32_t best = 0;
    for (int32_t s = 0; s < numla_regex_num_states(re); s++)
        if (numla_regex_min_left(re, s) > best)
            best = numla_regex_min_left(re, s);
    return best;
}

/* The plain tokens whose bytes pattern re's automaton takes from state d (each state it
 * reaches can still match: the automaton is pruned), cached in the matcher; NULL when the cache
 * is full or out of memory. */
static const uint64_t *plain_mask(numla_grammar_matcher *m, const numla_grammar_vocab *v,
                                  int32_t re_id, int32_t d)
{
    if (m->pm_vocab != v) {
        for (int32_t i = 0; i < m->num_pm; i++)
            free(m->pm[i].mask);
        m->num_pm = 0;
        m->pm_vocab = v;
    }
    for (int32_t i = 0; i < m->num_pm; i++)
        if (m->pm[i].re == re_id && m->pm[i].state == d)
            return m->pm[i].mask;
    if (m->num_pm == PLAIN_MASKS)
        return NULL;
    const size_t words = ((size_t)v->V + 63) / 64;
    uint64_t *mask = calloc(words, sizeof *mask);
    int32_t *ds = malloc(((size_t)v->max_len + 1) * sizeof *ds);
    if (!mask || !ds) {
        free(mask);
        free(ds);
        return NULL;
    }
    const numla_regex *re = m->g->regexes[re_id];
    const trie *t = &v->all;
    ds[0] = d;
    for (int32_t k = 0; k < t->n;) {
        const tnode *nd = &t->nodes[k];
        const int32_t s = numla_regex_step(re, ds[nd->depth - 1], nd->byte);
        if (s < 0) {
            k = nd->skip;
            continue;
        }
        ds[nd->depth] = s;
        for (int32_t i = 0; i < nd->tok_n; i++) {
            const int32_t id = t->sorted[nd->tok_first + i];
            mask[id / 64] |= v->plain[id / 64] & (uint64_t)1 << (id % 64);
        }
        k++;
    }
    free(ds);
    m->pm[m->num_pm].re = re_id;
    m->pm[m->num_pm].state = d;
    m->pm[m->num_pm++].mask = mask;
    return mask;
}

numla_status numla_grammar_matcher_fill_mask(numla_grammar_matcher *m,
                                             const numla_grammar_vocab *v, uint64_t *mask)
{
    const size_t words = ((size_t)v->V + 63) / 64;
    if (!lv_reserve(m, v->max_len))
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for the grammar's mask walk");
    memset(mask, 0, words * sizeof *mask);
    /* inside a string without a pattern (or where it accepts anything that follows), room
     * left for r more characters: the plain tokens of at most r characters, and only the
     * others walked */
    const gframe *f = m->nt == 1 && m->tops[0] >= 0 ? &m->ar[m->tops[0]] : NULL;
    const gnode *nd = f ? &m->g->nodes[f->node] : NULL;
    if (nd && nd->kind == G_STR && f->st == 1 && f->r == 0 && f->aux == 0 &&
        (nd->child < 0 || numla_regex_is_sink(m->g->regexes[nd->child], f->pos))) {
        const int64_t room = nd->b < 0 ? INT64_MAX : (int64_t)nd->b - f->n;
        if (room >= v->plain_max_chars)
            memcpy(mask, v->plain, words * sizeof *mask);
        else if (room > 0) {
            const int64_t c = room < PLAIN_LE_CHARS ? room : PLAIN_LE_CHARS;
            memcpy(mask, v->plain_le + (size_t)c * words, words * sizeof *mask);
            for (int32_t i = 0; i < v->num_plain_long && v->plain_long_chars[i] <= room; i++)
                mask[v->plain_long[i] / 64] |= (uint64_t)1 << (v->plain_long[i] % 64);
        }
        walk(m, &v->other, mask);
    } else if (nd && nd->kind == G_STR && f->st == 1 && f->r == 0 && f->aux == 0 &&
               nd->child >= 0 && f->n >= nd->a &&
               (nd->b < 0 || (int64_t)nd->b - f->n >= (int64_t)v->plain_max_chars +
                                                          max_min_left(m->g->regexes[nd->child]))) {
        /* a pattern string without a length bound left: the plain tokens by the automaton
         * alone (cached per state), the others walked */
        const uint64_t *pm = plain_mask(m, v, nd->child, f->pos);
        if (pm) {
            memcpy(mask, pm, words * sizeof *mask);
            walk(m, &v->other, mask);
        } else
            walk(m, &v->all, mask);
    } else
        walk(m, &v->all, mask);
    if (numla_grammar_matcher_is_complete(m))
        for (int32_t i = 0; i < v->num_end; i++)
            mask[v->end_ids[i] / 64] |= (uint64_t)1 << (v->end_ids[i] % 64);
    return NUMLA_STATUS_OK;
}

numla_status numla_grammar_matcher_accept_token(numla_grammar_matcher *m,
                                                const numla_grammar_vocab *v, int32_t token)
{
    if (token < 0 || token >= v->V)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "token %d is outside the grammar's vocabulary",
                   token);
    if (v->is_end[token]) {
        if (!numla_grammar_matcher_is_complete(m))
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "end token %d before the document is complete",
                       token);
        return NUMLA_STATUS_OK;
    }
    const int64_t len = v->off[token + 1] - v->off[token];
    if (len == 0 || !numla_grammar_matcher_accept_bytes(m, v->bytes + v->off[token], (size_t)len))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "token %d does not follow the response format",
                   token);
    return NUMLA_STATUS_OK;
}
