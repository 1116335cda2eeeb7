/* engine/text/tool_calls.c — the families' tool-call markers and the parser that reads them
 * (see tool_calls.h). */
#define _GNU_SOURCE
#include "engine/text/tool_calls.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "common/strbuf.h"
#include "engine/text/chat_template_internal.h"

typedef enum syntax_kind { KIND_SEP, KIND_TAGS, KIND_FORCED } syntax_kind;
typedef enum head_kind { HEAD_NAME, HEAD_ID, HEAD_TYPE } head_kind;

struct numla_tool_syntax {
    syntax_kind kind;
    const char *section_begin; /* NULL: calls stand alone (the call's begin starts them) */
    const char *section_end;
    const char *call_begin, *call_end;
    /* KIND_SEP */
    const char *sep;           /* between the head and the arguments */
    head_kind head;            /* what comes before sep */
    const char *fence_open;    /* HEAD_TYPE: "NAME\n" then the arguments inside this fence */
    const char *fence_close;
    /* KIND_TAGS */
    const char *name_end[2];   /* the first found ends the name (NULL: unused); a NAME_END that
                                  is also key_open is not consumed */
    const char *key_open, *key_close;
    const char *value_open;    /* value typed by the tool's schema (GLM), or a string (DSML) */
    const char *value_open_json; /* NULL, or the opening of a JSON value (DSML) */
    const char *value_close;
    int trim_values;           /* values are trimmed (GLM) */
};

#define DS_SECTION_BEGIN "<｜tool▁calls▁begin｜>"
#define DS_SECTION_END "<｜tool▁calls▁end｜>"
#define DS_CALL_BEGIN "<｜tool▁call▁begin｜>"
#define DS_CALL_END "<｜tool▁call▁end｜>"
#define DS_SEP "<｜tool▁sep｜>"
#define K_SECTION_BEGIN "<|tool_calls_section_begin|>"
#define K_SECTION_END "<|tool_calls_section_end|>"
#define K_CALL_BEGIN "<|tool_call_begin|>"
#define K_CALL_END "<|tool_call_end|>"
#define K_SEP "<|tool_call_argument_begin|>"
#define DSML "｜DSML｜"

/* The markers of each syntax; the families' table (chat_template.c) names which one a
 * template's model writes. */
const numla_tool_syntax numla_tool_markers_deepseek_fenced = {
    .kind = KIND_SEP, .section_begin = DS_SECTION_BEGIN,
    .section_end = DS_SECTION_END, .call_begin = DS_CALL_BEGIN, .call_end = DS_CALL_END,
    .sep = DS_SEP, .head = HEAD_TYPE, .fence_open = "```json", .fence_close = "```"};
const numla_tool_syntax numla_tool_markers_deepseek = {
    .kind = KIND_SEP, .section_begin = DS_SECTION_BEGIN,
    .section_end = DS_SECTION_END, .call_begin = DS_CALL_BEGIN, .call_end = DS_CALL_END,
    .sep = DS_SEP, .head = HEAD_NAME};
const numla_tool_syntax numla_tool_markers_kimi = {
    .kind = KIND_SEP, .section_begin = K_SECTION_BEGIN,
    .section_end = K_SECTION_END, .call_begin = K_CALL_BEGIN, .call_end = K_CALL_END,
    .sep = K_SEP, .head = HEAD_ID};
const numla_tool_syntax numla_tool_markers_dsml = {
    .kind = KIND_TAGS, .section_begin = "<" DSML "function_calls>",
    .section_end = "</" DSML "function_calls>", .call_begin = "<" DSML "invoke name=\"",
    .call_end = "</" DSML "invoke>", .name_end = {"\">", NULL},
    .key_open = "<" DSML "parameter name=\"", .key_close = "\"",
    .value_open = " string=\"true\">", .value_open_json = " string=\"false\">",
    .value_close = "</" DSML "parameter>"};
/* DeepSeek-V4: V3.2's DSML with the block named "tool_calls" */
const numla_tool_syntax numla_tool_markers_dsml_v4 = {
    .kind = KIND_TAGS, .section_begin = "<" DSML "tool_calls>",
    .section_end = "</" DSML "tool_calls>", .call_begin = "<" DSML "invoke name=\"",
    .call_end = "</" DSML "invoke>", .name_end = {"\">", NULL},
    .key_open = "<" DSML "parameter name=\"", .key_close = "\"",
    .value_open = " string=\"true\">", .value_open_json = " string=\"false\">",
    .value_close = "</" DSML "parameter>"};
const numla_tool_syntax numla_tool_markers_glm = {
    .kind = KIND_TAGS, .call_begin = "<tool_call>", .call_end = "</tool_call>",
    .name_end = {"<arg_key>", "\n"}, .key_open = "<arg_key>", .key_close = "</arg_key>",
    .value_open = "<arg_value>", .value_close = "</arg_value>", .trim_values = 1};

const numla_tool_syntax *numla_tool_syntax_for_template(const char *template_name)
{
    return numla_chat_family_tool_markers(template_name);
}

const char *const *numla_tool_syntax_families(void)
{
    static const char *names[64]; /* the same pointers on every call */
    int k = 0;
    for (int i = 0; numla_chat_family_name(i) && k < 63; i++)
        if (numla_chat_family_tool_markers(numla_chat_family_name(i)))
            names[k++] = numla_chat_family_name(i);
    names[k] = NULL;
    return names;
}

int numla_tool_syntax_markers(const numla_tool_syntax *y,
                              const char *out[NUMLA_TOOL_SYNTAX_MAX_MARKERS])
{
    const char *all[NUMLA_TOOL_SYNTAX_MAX_MARKERS] = {
        y->section_begin, y->section_end, y->call_begin, y->call_end, y->sep,
        y->key_open,      y->key_close,   y->value_open, y->value_open_json, y->value_close};
    int k = 0;
    for (int i = 0; i < NUMLA_TOOL_SYNTAX_MAX_MARKERS; i++)
        if (all[i])
            out[k++] = all[i];
    return k;
}

/* ---- the parser ---- */

enum { ST_CONTENT, ST_SECTION, ST_CALL };

struct numla_tool_calls {
    const numla_tool_syntax *syn;
    json_t *tools;              /* the request's tools (GLM's parameter types), or NULL */
    uint64_t seed;
    int state;
    int after_calls;            /* content after a call: leading whitespace is dropped */
    int32_t section_calls;      /* calls the open section has given */
    numla_strbuf held;          /* text not yet placed */
    numla_strbuf pending;       /* markers consumed but not yet accounted for (a section's
                                   opening while it has given no call) */
    numla_strbuf out;           /* this call's content */
    numla_tool_event *ev;
    int32_t num_ev, cap_ev;
    numla_tool_call_out *calls;
    int32_t num_calls, cap_calls;
    int oom;
    char *forced_name;          /* numla_tool_calls_create_forced: the function, else NULL */
};

/* The syntax of numla_tool_calls_create_forced's parsers (no markers: the text is the call's
 * arguments). */
static const numla_tool_syntax forced_syntax = {.kind = KIND_FORCED};

numla_status numla_tool_calls_create(const numla_tool_syntax *syn, const char *tools_json,
                                     uint64_t id_seed, numla_tool_calls **out)
{
    *out = NULL;
    if (!syn)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "tool calls: no syntax given");
    numla_tool_calls *p = calloc(1, sizeof *p);
    if (!p)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for a tool-call parser");
    p->syn = syn;
    p->seed = id_seed;
    if (tools_json) {
        p->tools = json_loads(tools_json, 0, NULL);
        if (p->tools && !json_is_array(p->tools)) {
            json_decref(p->tools);
            p->tools = NULL;
        }
    }
    *out = p;
    return NUMLA_STATUS_OK;
}

void numla_tool_calls_destroy(numla_tool_calls **pp)
{
    if (!pp || !*pp)
        return;
    numla_tool_calls *p = *pp;
    json_decref(p->tools);
    free(p->forced_name);
    numla_strbuf_free(&p->held);
    numla_strbuf_free(&p->pending);
    numla_strbuf_free(&p->out);
    free(p->ev);
    for (int32_t i = 0; i < p->num_calls; i++) {
        free(p->calls[i].id);
        free(p->calls[i].name);
        free(p->calls[i].arguments);
    }
    free(p->calls);
    free(p);
    *pp = NULL;
}

int32_t numla_tool_calls_count(const numla_tool_calls *p) { return p->num_calls; }

const numla_tool_call_out *numla_tool_calls_get(const numla_tool_calls *p, int32_t i)
{
    return i >= 0 && i < p->num_calls ? &p->calls[i] : NULL;
}

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

static void trim(const char **s, size_t *n)
{
    while (*n && is_ws(**s)) {
        (*s)++;
        (*n)--;
    }
    while (*n && is_ws((*s)[*n - 1]))
        (*n)--;
}

static int all_ws(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!is_ws(s[i]))
            return 0;
    return 1;
}

static const char *find(const char *s, size_t n, const char *m)
{
    return memmem(s, n, m, strlen(m));
}

static int starts(const char *s, size_t n, const char *m)
{
    size_t ml = strlen(m);
    return n >= ml && !memcmp(s, m, ml);
}

/* The longest suffix of s[0..n) that is a proper prefix of m. */
static size_t prefix_tail(const char *s, size_t n, const char *m)
{
    size_t ml = strlen(m);
    for (size_t k = ml - 1 < n ? ml - 1 : n; k > 0; k--)
        if (!memcmp(s + n - k, m, k))
            return k;
    return 0;
}

static void add_content(numla_tool_calls *p, const char *s, size_t n)
{
    if (!n)
        return;
    if (p->num_ev > 0 && p->ev[p->num_ev - 1].call < 0 &&
        p->ev[p->num_ev - 1].off + p->ev[p->num_ev - 1].len == p->out.len) {
        p->ev[p->num_ev - 1].len += n;
    } else {
        if (p->num_ev == p->cap_ev) {
            int32_t c = p->cap_ev ? 2 * p->cap_ev : 8;
            numla_tool_event *e = realloc(p->ev, (size_t)c * sizeof *e);
            if (!e) {
                p->oom = 1;
                return;
            }
            p->ev = e;
            p->cap_ev = c;
        }
        p->ev[p->num_ev++] = (numla_tool_event){.call = -1, .off = p->out.len, .len = n};
    }
    if (numla_strbuf_append(&p->out, s, n) != NUMLA_STATUS_OK)
        p->oom = 1;
}

/* The pending markers and s[0..n) as content. */
static void add_raw(numla_tool_calls *p, const char *s, size_t n)
{
    add_content(p, p->pending.p ? p->pending.p : "", p->pending.len);
    numla_strbuf_clear(&p->pending);
    add_content(p, s, n);
}

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

/* "call_" and 24 letters/digits from the seed and the call's index (splitmix64). */
static char *make_id(uint64_t seed, int32_t index)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    char id[5 + 24 + 1] = "call_";
    uint64_t x = seed + 0x9E3779B97F4A7C15ull * (uint64_t)(index + 1);
    for (int i = 0; i < 24; i++) {
        if (i % 8 == 0) {
            x += 0x9E3779B97F4A7C15ull;
            uint64_t z = x;
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
            x = z ^ (z >> 31);
        }
        id[5 + i] = abc[(x >> (6 * (i % 8))) % 62];
    }
    id[29] = 0;
    return dup_n(id, 29);
}

/* A function name (or Kimi's id): not empty, no markup, quotes, whitespace or control
 * characters inside. */
static int name_ok(const char *s, size_t n)
{
    if (!n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] == '<' || s[i] == '>' || s[i] == '"' || (unsigned char)s[i] < 0x20 ||
            s[i] == 0x7f)
            return 0;
    return 1;
}

/* 1 when s[0..n) is a JSON object's text. */
static int json_object_text(const char *s, size_t n)
{
    json_t *v = json_loadb(s, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    int ok = json_is_object(v);
    json_decref(v);
    return ok;
}

/* The declared "type" of parameter key of tool name in the request's tools is "string". */
static int declared_string(const numla_tool_calls *p, const char *name, const char *key)
{
    size_t i;
    json_t *t;
    json_array_foreach(p->tools, i, t) {
        json_t *f = json_object_get(t, "function");
        const char *fn = json_string_value(json_object_get(f, "name"));
        if (!fn || strcmp(fn, name))
            continue;
        json_t *prop = json_object_get(json_object_get(json_object_get(f, "parameters"),
                                                       "properties"), key);
        const char *ty = json_string_value(json_object_get(prop, "type"));
        return ty && !strcmp(ty, "string");
    }
    return 0;
}

/* A SEP call (between call_begin and call_end): 1 with name/args/id set, 0 when malformed. */
static int parse_sep(const numla_tool_syntax *y, const char *s, size_t n, char **name, char **args,
                     char **id)
{
    const char *sep = find(s, n, y->sep);
    if (!sep)
        return 0;
    const char *h = s, *a = sep + strlen(y->sep);
    size_t hn = (size_t)(sep - s), an = n - (size_t)(a - s);
    trim(&h, &hn);
    const char *nm = h;
    size_t nn = hn;
    if (y->head == HEAD_TYPE) {
        /* "function" <sep> NAME "\n```json\n" ARGS "\n```" */
        const char *nl = memchr(a, '\n', an);
        if (!hn || !nl)
            return 0;
        nm = a;
        nn = (size_t)(nl - a);
        an -= (size_t)(nl + 1 - a);
        a = nl + 1;
        trim(&a, &an);
        if (!starts(a, an, y->fence_open))
            return 0;
        a += strlen(y->fence_open);
        an -= strlen(y->fence_open);
        size_t fl = strlen(y->fence_close);
        if (an < fl || memcmp(a + an - fl, y->fence_close, fl))
            return 0;
        an -= fl;
        trim(&nm, &nn);
    } else if (y->head == HEAD_ID) {
        /* "functions.NAME:IDX": the name is between the last '.' and the ':' before IDX */
        size_t k = hn;
        while (k > 0 && h[k - 1] >= '0' && h[k - 1] <= '9')
            k--;
        if (k == hn || k < 2 || h[k - 1] != ':' || memchr(h, '<', hn))
            return 0;
        nm = h;
        nn = k - 1;
        for (size_t i = nn; i > 0; i--)
            if (h[i - 1] == '.') {
                nm = h + i;
                nn = k - 1 - i;
                break;
            }
    }
    trim(&a, &an);
    if (!name_ok(nm, nn) || (y->head == HEAD_ID && !name_ok(h, hn)) || !json_object_text(a, an))
        return 0;
    *name = dup_n(nm, nn);
    *args = dup_n(a, an);
    *id = y->head == HEAD_ID ? dup_n(h, hn) : NULL;
    return 1;
}

/* A TAGS call: 1 with name/args set, 0 when malformed, -1 out of memory. */
static int parse_tags(const numla_tool_calls *p, const char *s, size_t n, char **name,
                      char **args)
{
    const numla_tool_syntax *y = p->syn;
    const char *end = s + n, *ne = end, *after = end;
    for (int k = 0; k < 2 && y->name_end[k]; k++) {
        const char *e = find(s, n, y->name_end[k]);
        if (e && e < ne) {
            ne = e;
            after = !strcmp(y->name_end[k], y->key_open) ? e : e + strlen(y->name_end[k]);
        }
    }
    const char *nm = s;
    size_t nn = (size_t)(ne - s);
    trim(&nm, &nn);
    if (!name_ok(nm, nn))
        return 0;
    char *name_s = dup_n(nm, nn);
    json_t *obj = json_object();
    if (!name_s || !obj) {
        free(name_s);
        json_decref(obj);
        return -1;
    }
    const char *q = after;
    int ok = 1;
    for (;;) {
        while (q < end && is_ws(*q))
            q++;
        if (q == end)
            break;
        if (!starts(q, (size_t)(end - q), y->key_open)) {
            ok = 0;
            break;
        }
        q += strlen(y->key_open);
        const char *kc = find(q, (size_t)(end - q), y->key_close);
        if (!kc) {
            ok = 0;
            break;
        }
        const char *key = q;
        size_t kn = (size_t)(kc - q);
        trim(&key, &kn);
        q = kc + strlen(y->key_close);
        while (y->trim_values && q < end && is_ws(*q))
            q++;
        int as_json = -1; /* -1: by the schema (GLM), 0: string, 1: JSON */
        if (y->value_open_json && starts(q, (size_t)(end - q), y->value_open_json)) {
            as_json = 1;
            q += strlen(y->value_open_json);
        } else if (starts(q, (size_t)(end - q), y->value_open)) {
            as_json = y->value_open_json ? 0 : -1;
            q += strlen(y->value_open);
        } else {
            ok = 0;
            break;
        }
        const char *vc = find(q, (size_t)(end - q), y->value_close);
        if (!vc) {
            ok = 0;
            break;
        }
        const char *v = q;
        size_t vn = (size_t)(vc - q);
        q = vc + strlen(y->value_close);
        if (y->trim_values)
            trim(&v, &vn);
        char *key_s = dup_n(key, kn);
        if (!key_s) {
            ok = -1;
            break;
        }
        if (as_json == -1)
            as_json = !declared_string(p, name_s, key_s);
        json_t *val = as_json ? json_loadb(v, vn, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL) : NULL;
        if (!val && as_json == 1 && y->value_open_json) {
            free(key_s);
            ok = 0; /* DSML: string="false" must be JSON */
            break;
        }
        if (!val)
            val = json_stringn(v, vn);
        if (!val || json_object_set_new(obj, key_s, val)) {
            free(key_s);
            ok = 0; /* a key or value that is not UTF-8 */
            break;
        }
        free(key_s);
    }
    if (ok == 1) {
        *args = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (!*args)
            ok = -1;
    }
    json_decref(obj);
    if (ok != 1) {
        free(name_s);
        return ok;
    }
    *name = name_s;
    return 1;
}

/* The call whose text (between the markers) is s[0..n); raw: the whole call as written. */
static void take_call(numla_tool_calls *p, const char *s, size_t n, const char *raw,
                      size_t raw_len)
{
    char *name = NULL, *args = NULL, *id = NULL;
    int ok;
    if (p->syn->kind == KIND_FORCED && p->forced_name[0]) { /* the text: the arguments */
        trim(&s, &n);
        ok = json_object_text(s, n);
        if (ok == 1 && (!(name = strdup(p->forced_name)) || !(args = dup_n(s, n))))
            ok = -1;
    } else if (p->syn->kind == KIND_FORCED) { /* {"name": N, "arguments": {...}} */
        json_t *v = json_loadb(s, n, JSON_ALLOW_NUL, NULL);
        json_t *nm = json_object_get(v, "name"), *a = json_object_get(v, "arguments");
        ok = json_is_object(v) && json_object_size(v) == 2 && json_is_string(nm) &&
             json_string_length(nm) > 0 && json_is_object(a);
        if (ok == 1 && (!(name = strdup(json_string_value(nm))) ||
                        !(args = json_dumps(a, JSON_COMPACT))))
            ok = -1;
        json_decref(v);
    } else
        ok = p->syn->kind == KIND_SEP ? parse_sep(p->syn, s, n, &name, &args, &id)
                                      : parse_tags(p, s, n, &name, &args);
    if (ok == 1 && !id)
        id = make_id(p->seed, p->num_calls);
    if (ok == 1 && (!name || !args || !id))
        ok = -1;
    if (ok == 1 && p->num_calls == p->cap_calls) {
        int32_t c = p->cap_calls ? 2 * p->cap_calls : 4;
        numla_tool_call_out *nc = realloc(p->calls, (size_t)c * sizeof *nc);
        if (nc) {
            p->calls = nc;
            p->cap_calls = c;
        } else {
            ok = -1;
        }
    }
    if (ok != 1) {
        free(name);
        free(args);
        free(id);
        if (ok < 0)
            p->oom = 1;
        add_raw(p, raw, raw_len);
        return;
    }
    p->calls[p->num_calls] = (numla_tool_call_out){.id = id, .name = name, .arguments = args};
    if (p->num_ev == p->cap_ev) {
        int32_t c = p->cap_ev ? 2 * p->cap_ev : 8;
        numla_tool_event *e = realloc(p->ev, (size_t)c * sizeof *e);
        if (!e) {
            p->oom = 1; /* the call is kept; only its event is lost */
            p->num_calls++;
            p->section_calls++;
            return;
        }
        p->ev = e;
        p->cap_ev = c;
    }
    p->ev[p->num_ev++] = (numla_tool_event){.call = p->num_calls, .off = p->out.len};
    p->num_calls++;
    p->section_calls++;
    numla_strbuf_clear(&p->pending);
}

/* Place what is held; final: nothing more comes. Returns bytes consumed of held. */
static size_t place(numla_tool_calls *p, int final)
{
    const numla_tool_syntax *y = p->syn;
    if (y->kind == KIND_FORCED) { /* held until the end, then one call (or the text) */
        if (final && p->held.len)
            take_call(p, p->held.p, p->held.len, p->held.p, p->held.len);
        return final ? p->held.len : 0;
    }
    const char *start = y->section_begin ? y->section_begin : y->call_begin;
    const char *h = p->held.p ? p->held.p : "";
    size_t n = p->held.len, pos = 0;
    while (pos < n || (final && (p->state != ST_CONTENT || p->pending.len))) {
        const char *s = h + pos;
        size_t m = n - pos;
        if (p->state == ST_CONTENT) {
            if (p->after_calls) {
                size_t w = 0;
                while (w < m && is_ws(s[w]))
                    w++;
                if (w == m) {
                    if (!final)
                        break; /* whitespace after the calls: wait for what follows */
                    pos = n;   /* dropped */
                    break;
                }
                if (starts(s + w, m - w, start)) {
                    pos += w; /* whitespace between calls is dropped */
                    p->after_calls = 0;
                    continue;
                }
                if (!final && !memcmp(s + w, start, m - w < strlen(start) ? m - w : strlen(start)))
                    break; /* may still be the next call */
                p->after_calls = 0;
            }
            const char *at = find(s, m, start);
            if (at) {
                add_content(p, s, (size_t)(at - s));
                pos += (size_t)(at - s) + strlen(start);
                if (numla_strbuf_puts(&p->pending, start) != NUMLA_STATUS_OK)
                    p->oom = 1;
                p->state = y->section_begin ? ST_SECTION : ST_CALL;
                p->section_calls = 0;
                continue;
            }
            size_t keep = final ? 0 : prefix_tail(s, m, start);
            add_content(p, s, m - keep);
            pos += m - keep;
            break;
        }
        if (p->state == ST_SECTION) {
            const char *cb = find(s, m, y->call_begin), *se = find(s, m, y->section_end);
            if (cb && (!se || cb < se)) {
                size_t gap = (size_t)(cb - s);
                if (!all_ws(s, gap))
                    add_raw(p, s, gap);
                else if (numla_strbuf_append(&p->pending, s, gap) != NUMLA_STATUS_OK)
                    p->oom = 1; /* kept in case the call is malformed */
                pos += gap + strlen(y->call_begin);
                if (numla_strbuf_puts(&p->pending, y->call_begin) != NUMLA_STATUS_OK)
                    p->oom = 1;
                p->state = ST_CALL;
                continue;
            }
            if (se) {
                size_t gap = (size_t)(se - s);
                if (!p->section_calls) /* a section without calls: content as written */
                    add_raw(p, s, gap + strlen(y->section_end));
                else if (!all_ws(s, gap))
                    add_content(p, s, gap);
                numla_strbuf_clear(&p->pending);
                pos += gap + strlen(y->section_end);
                p->state = ST_CONTENT;
                p->after_calls = 1;
                continue;
            }
            if (!final)
                break; /* wait for the next call or the section's end */
            if (!p->section_calls || !all_ws(s, m))
                add_raw(p, s, m); /* an open section without calls: content as written */
            numla_strbuf_clear(&p->pending);
            pos = n;
            p->state = ST_CONTENT;
            break;
        }
        /* ST_CALL: pending ends with the call's begin */
        const char *ce = find(s, m, y->call_end);
        if (!ce) {
            if (!final)
                break;
            add_raw(p, s, m); /* an unterminated call: content as written */
            pos = n;
            p->state = ST_CONTENT;
            break;
        }
        size_t body = (size_t)(ce - s), cl = strlen(y->call_end);
        numla_strbuf raw = {0};
        numla_strbuf_append(&raw, p->pending.p, p->pending.len);
        numla_strbuf_append(&raw, s, body + cl);
        if (raw.oom) {
            p->oom = 1;
        } else {
            /* the raw text to give back is the pending markers and the call */
            numla_strbuf_clear(&p->pending);
            take_call(p, s, body, raw.p, raw.len);
        }
        numla_strbuf_free(&raw);
        pos += body + cl;
        if (y->section_begin) {
            p->state = ST_SECTION;
        } else {
            p->state = ST_CONTENT;
            p->after_calls = 1;
        }
    }
    return pos;
}

static numla_status run(numla_tool_calls *p, int final, const numla_tool_event **events,
                        int32_t *num_events, const char **text)
{
    p->num_ev = 0;
    numla_strbuf_clear(&p->out);
    size_t used = place(p, final);
    if (used) {
        memmove(p->held.p, p->held.p + used, p->held.len - used);
        numla_strbuf_truncate(&p->held, p->held.len - used);
    }
    if (p->oom || p->out.oom || p->pending.oom)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for tool-call text");
    *events = p->ev;
    *num_events = p->num_ev;
    *text = numla_strbuf_str(&p->out);
    return NUMLA_STATUS_OK;
}

numla_status numla_tool_calls_create_forced(const char *name, uint64_t id_seed,
                                            numla_tool_calls **out)
{
    *out = NULL;
    numla_tool_calls *p = calloc(1, sizeof *p);
    if (!p || !(p->forced_name = strdup(name ? name : ""))) {
        free(p);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for a tool-call parser");
    }
    p->syn = &forced_syntax;
    p->seed = id_seed;
    *out = p;
    return NUMLA_STATUS_OK;
}

numla_status numla_tool_calls_push(numla_tool_calls *p, const char *s, size_t len,
                                   const numla_tool_event **events, int32_t *num_events,
                                   const char **text)
{
    if (len && numla_strbuf_append(&p->held, s, len) != NUMLA_STATUS_OK)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for tool-call text");
    return run(p, 0, events, num_events, text);
}

numla_status numla_tool_calls_finish(numla_tool_calls *p, const numla_tool_event **events,
                                     int32_t *num_events, const char **text)
{
    return run(p, 1, events, num_events, text);
}

const char *numla_tool_calls_finish_reason(const numla_tool_calls *p, const char *reason)
{
    return p && p->num_calls > 0 && reason && !strcmp(reason, "stop") ? "tool_calls" : reason;
}
