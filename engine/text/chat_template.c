/* engine/text/chat_template.c — recognise DeepSeek, Kimi and GLM chat templates and render them
 * in C (GLM-5: chat_template_glm.c; DeepSeek-V3.2's encoding: chat_template_dsv32.c).
 *
 * Each renderer below is the Jinja template it replaces, read for plain-text messages under
 * transformers' settings (trim_blocks, lstrip_blocks): the literal strings, the order in which
 * the template walks the messages, and the whitespace its tags leave. One table holds the
 * families: name, renderer, what it refuses, stop tokens, tool-call markers, abilities. The
 * Jinja texts that recognise a model's tokenizer_config.json are text/templates/<name>.jinja,
 * compiled in by the build (their sources: the READMEs of tests/golden/chat,
 * chat_kimi and chat_glm5).
 * Owns no tokenizer state; must not touch the tokenizer files. */
#include "engine/text/chat_template.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/strbuf.h"
#include "engine/json/model_json.h"
#include "engine/text/chat_template_internal.h"

/* One renderer per family: the template it replaces, as text from the messages and options. */
typedef numla_status (*numla_chat_render_fn)(const numla_chat_template *t,
                                             const numla_chat_message *msgs, int n,
                                             const numla_chat_options *o, numla_strbuf *b);
/* What a family refuses before rendering (transformers refuses the same). */
typedef numla_status (*numla_chat_check_fn)(const numla_chat_template *t,
                                            const numla_chat_message *msgs, int n);

static numla_status render_v2(const numla_chat_template *, const numla_chat_message *, int,
                              const numla_chat_options *, numla_strbuf *);
static numla_status render_v2_5(const numla_chat_template *, const numla_chat_message *, int,
                                const numla_chat_options *, numla_strbuf *);
static numla_status render_v3(const numla_chat_template *, const numla_chat_message *, int,
                              const numla_chat_options *, numla_strbuf *);
static numla_status render_r1(const numla_chat_template *, const numla_chat_message *, int,
                              const numla_chat_options *, numla_strbuf *);
static numla_status render_v3_1(const numla_chat_template *, const numla_chat_message *, int,
                                const numla_chat_options *, numla_strbuf *);
static numla_status render_kimi_k2(const numla_chat_template *, const numla_chat_message *, int,
                                   const numla_chat_options *, numla_strbuf *);
static numla_status render_kimi_k2_thinking(const numla_chat_template *,
                                            const numla_chat_message *, int,
                                            const numla_chat_options *, numla_strbuf *);
static numla_status render_glm5(const numla_chat_template *, const numla_chat_message *, int,
                                const numla_chat_options *, numla_strbuf *);
static numla_status render_dsv32(const numla_chat_template *, const numla_chat_message *, int,
                                 const numla_chat_options *, numla_strbuf *);
static numla_status render_dsv4(const numla_chat_template *, const numla_chat_message *, int,
                                const numla_chat_options *, numla_strbuf *);
static numla_status check_plain(const numla_chat_template *, const numla_chat_message *, int);
static numla_status check_tools(const numla_chat_template *, const numla_chat_message *, int);

/* The Kimi templates' role markers. */
#define K_SYS "<|im_system|>"
#define K_USER "<|im_user|>"
#define K_ASSISTANT "<|im_assistant|>"
#define K_MIDDLE "<|im_middle|>"
#define K_END "<|im_end|>"

static const char *const stop_none[] = {NULL};
static const char *const stop_kimi[] = {K_END, NULL};
/* GLM-5's generation config stops at <|user|> and <|observation|> besides its EOS */
static const char *const stop_glm[] = {"<|user|>", "<|observation|>", NULL};
/* the reasoning_effort values DeepSeek-V4's encode_messages accepts (chat_template_dsv4.c) */
static const char *const efforts_dsv4[] = {"high", "max", NULL};

enum {
    THINKS = NUMLA_CHAT_CAN_SWITCH_THINKING << 1, /* writes its reasoning before the answer */
    EMPTY_OK = THINKS << 1,                       /* renders zero messages */
    CONTENT_NEEDED = EMPTY_OK << 1,               /* deepseek-v3.1: text where it writes text */
};
#define TOOLS_ALL                                                                                \
    (NUMLA_CHAT_CAN_DECLARE_TOOLS | NUMLA_CHAT_CAN_WRITE_TOOL_CALLS |                            \
     NUMLA_CHAT_CAN_WRITE_TOOL_RESULTS | NUMLA_CHAT_CAN_SWITCH_THINKING)

/* The one table of chat-template families. The name is the --chat-template name and the file
 * text/templates/<name>.jinja whose text is recognised in a tokenizer_config.json (none for
 * deepseek-v3.2 and deepseek-v4: DeepSeek ships Python; picked by name or model_type). tools:
 * the markers its model writes tool calls with (tool_calls.c), NULL when it writes none. */
static const numla_chat_family families[] = {
    {"deepseek-v2", render_v2, check_plain, stop_none, NULL, 0, NULL},
    {"deepseek-v2.5", render_v2_5, check_plain, stop_none, NULL, 0, NULL},
    {"deepseek-v3", render_v3, check_plain, stop_none, &numla_tool_markers_deepseek_fenced, 0,
     NULL},
    {"deepseek-r1", render_r1, check_plain, stop_none, &numla_tool_markers_deepseek_fenced,
     THINKS, NULL},
    {"deepseek-v3.1", render_v3_1, check_tools, stop_none, &numla_tool_markers_deepseek,
     NUMLA_CHAT_CAN_WRITE_TOOL_CALLS | NUMLA_CHAT_CAN_WRITE_TOOL_RESULTS |
         NUMLA_CHAT_CAN_SWITCH_THINKING | THINKS | CONTENT_NEEDED, NULL},
    {"kimi-k2", render_kimi_k2, check_tools, stop_kimi, &numla_tool_markers_kimi,
     NUMLA_CHAT_CAN_DECLARE_TOOLS | NUMLA_CHAT_CAN_WRITE_TOOL_RESULTS, NULL},
    {"kimi-k2-thinking", render_kimi_k2_thinking, check_tools, stop_kimi, &numla_tool_markers_kimi,
     NUMLA_CHAT_CAN_DECLARE_TOOLS | NUMLA_CHAT_CAN_WRITE_TOOL_CALLS |
         NUMLA_CHAT_CAN_WRITE_TOOL_RESULTS | THINKS, NULL},
    {"glm-5", render_glm5, check_tools, stop_glm, &numla_tool_markers_glm, TOOLS_ALL | THINKS,
     NULL},
    {"deepseek-v3.2", render_dsv32, check_tools, stop_none, &numla_tool_markers_dsml,
     TOOLS_ALL | THINKS | EMPTY_OK, NULL},
    {"deepseek-v4", render_dsv4, check_tools, stop_none, &numla_tool_markers_dsml_v4,
     TOOLS_ALL | THINKS | EMPTY_OK, efforts_dsv4},
};
#define NUMLA_CHAT_NFAMILIES ((int)(sizeof families / sizeof families[0]))

static const numla_chat_family *family_named(const char *name)
{
    for (int i = 0; name && i < NUMLA_CHAT_NFAMILIES; i++)
        if (strcmp(families[i].name, name) == 0)
            return &families[i];
    return NULL;
}

/* "deepseek-v2, deepseek-v2.5, ...": the names for an error message. */
static const char *names_text(char *buf, size_t cap)
{
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < NUMLA_CHAT_NFAMILIES && k < cap; i++) {
        int w = snprintf(buf + k, cap - k, "%s%s", i ? ", " : "", families[i].name);
        if (w < 0)
            break;
        k += (size_t)w;
    }
    return buf;
}

const numla_tool_syntax *numla_chat_family_tool_markers(const char *name)
{
    const numla_chat_family *f = family_named(name);
    return f ? f->tools : NULL;
}

const char *numla_chat_family_name(int i)
{
    return i >= 0 && i < NUMLA_CHAT_NFAMILIES ? families[i].name : NULL;
}

/* DeepSeek's special-token strings: the defaults when no tokenizer_config.json is at hand. */
#define NUMLA_CHAT_BOS "<｜begin▁of▁sentence｜>"
#define NUMLA_CHAT_EOS "<｜end▁of▁sentence｜>"

struct numla_chat_template {
    const numla_chat_family *builtin;
    char *bos; /* bos_token as the template sees it ("" when unset) */
    char *eos; /* eos_token likewise */
};

const char *const *numla_chat_template_names(void)
{
    static const char *names[NUMLA_CHAT_NFAMILIES + 1]; /* the same pointers on every call */
    for (int i = 0; i < NUMLA_CHAT_NFAMILIES; i++)
        names[i] = families[i].name;
    return names;
}

int numla_chat_template_known(const char *name) { return family_named(name) != NULL; }

const char *numla_chat_template_source(const char *name)
{
    return family_named(name) ? numla_chat_jinja_source(name) : NULL;
}

/* The recognition fingerprint: CRLF -> LF, the escape "\n" -> newline, outer whitespace cut.
 * malloc'd; NULL when out of memory. */
static char *fingerprint(const char *s)
{
    size_t n = strlen(s);
    char *f = malloc(n + 1);
    if (!f)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\r' && s[i + 1] == '\n')
            continue;
        if (s[i] == '\\' && s[i + 1] == 'n') {
            f[k++] = '\n';
            i++;
            continue;
        }
        f[k++] = s[i];
    }
    size_t a = 0;
    while (a < k && (f[a] == ' ' || f[a] == '\n' || f[a] == '\t'))
        a++;
    while (k > a && (f[k - 1] == ' ' || f[k - 1] == '\n' || f[k - 1] == '\t'))
        k--;
    memmove(f, f + a, k - a);
    f[k - a] = 0;
    return f;
}

static numla_status recognise(const char *tmpl, const numla_chat_family **out)
{
    *out = NULL;
    char *fp = fingerprint(tmpl);
    if (!fp)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "chat template fingerprint");
    for (int i = 0; i < NUMLA_CHAT_NFAMILIES && !*out; i++) {
        const char *source = numla_chat_jinja_source(families[i].name);
        if (!source)
            continue;
        char *known = fingerprint(source);
        if (!known) {
            free(fp);
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "chat template fingerprint");
        }
        if (strcmp(fp, known) == 0)
            *out = &families[i];
        free(known);
    }
    free(fp);
    return NUMLA_STATUS_OK;
}

/* A special token of tokenizer_config.json: a string, an AddedToken object's "content", or
 * absent/null (""). */
static numla_status config_token(json_t *cfg, const char *key, const char *dflt, char **out)
{
    json_t *v = cfg ? json_object_get(cfg, key) : NULL;
    const char *s = dflt;
    if (cfg) {
        s = "";
        if (json_is_object(v))
            v = json_object_get(v, "content");
        if (json_is_string(v))
            s = json_string_value(v);
        else if (v && !json_is_null(v))
            NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                              "tokenizer_config.json: %s is neither a string nor a token object",
                              key);
    }
    *out = strdup(s);
    if (!*out)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "tokenizer_config.json %s", key);
    return NUMLA_STATUS_OK;
}

/* The template string of the config: a string, or the "default" entry of a list of
 * {"name", "template"} objects; NULL when there is none. */
static const char *config_template(json_t *cfg)
{
    json_t *v = json_object_get(cfg, "chat_template");
    if (json_is_string(v))
        return json_string_value(v);
    if (json_is_array(v)) {
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) {
            const char *name = json_string_value(json_object_get(e, "name"));
            if (name && strcmp(name, "default") == 0)
                return json_string_value(json_object_get(e, "template"));
        }
    }
    return NULL;
}

static numla_status load_parsed(json_t *cfg, const char *what, const char *force_name,
                                const char *jinja, numla_chat_template **out)
{
    const numla_chat_family *b = NULL;
    char names[256];
    if (force_name) {
        b = family_named(force_name);
        if (!b)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                              "--chat-template %s: unknown chat template (built-in: %s)",
                              force_name, names_text(names, sizeof names));
    } else {
        const char *tmpl = cfg ? config_template(cfg) : NULL;
        if (!tmpl)
            tmpl = jinja; /* chat_template.jinja beside it (Kimi-K2-Thinking ships one) */
        if (!tmpl)
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                              "%s has no chat_template; pick a built-in one with "
                              "--chat-template NAME (%s)",
                              what, names_text(names, sizeof names));
        NUMLA_CHECK(recognise(tmpl, &b));
        if (!b)
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                              "%s: chat_template (starting \"%.60s\") is not one of the DeepSeek / "
                              "Kimi / GLM templates numla renders; pick a built-in one with "
                              "--chat-template NAME (%s)",
                              what, tmpl, names_text(names, sizeof names));
    }
    numla_chat_template *t = calloc(1, sizeof *t);
    if (!t)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "chat template");
    t->builtin = b;
    numla_status s = config_token(cfg, "bos_token", NUMLA_CHAT_BOS, &t->bos);
    if (s == NUMLA_STATUS_OK)
        s = config_token(cfg, "eos_token", NUMLA_CHAT_EOS, &t->eos);
    if (s != NUMLA_STATUS_OK) {
        numla_chat_template_destroy(&t);
        return s;
    }
    *out = t;
    return NUMLA_STATUS_OK;
}

numla_status numla_chat_template_load_builtin(const char *name, numla_chat_template **out)
{
    *out = NULL;
    char names[256];
    if (!name)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "chat template name missing (built-in: %s)",
                   names_text(names, sizeof names));
    return load_parsed(NULL, "built-in chat template", name, NULL, out);
}

const char *numla_chat_template_builtin_for_model_type(const char *model_type)
{
    if (!model_type)
        return NULL;
    if (strcmp(model_type, "deepseek_v32") == 0)
        return "deepseek-v3.2";
    return strcmp(model_type, "deepseek_v4") == 0 ? "deepseek-v4" : NULL;
}

numla_status numla_chat_template_load_json(const char *json, const char *force_name,
                                           numla_chat_template **out)
{
    *out = NULL;
    json_t *cfg = NULL;
    if (json) {
        NUMLA_CHECK(numla_json_text_parse(json, strlen(json), 0, "tokenizer_config.json", &cfg));
        if (!json_is_object(cfg)) {
            json_decref(cfg);
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "tokenizer_config.json: not an object");
        }
    }
    numla_status s = load_parsed(cfg, "tokenizer_config.json", force_name, NULL, out);
    json_decref(cfg);
    return s;
}

numla_status numla_chat_template_load(const char *model_dir, const char *force_name,
                                      numla_chat_template **out)
{
    *out = NULL;
    char path[4096];
    int w = snprintf(path, sizeof path, "%s/tokenizer_config.json", model_dir);
    if (w < 0 || (size_t)w >= sizeof path)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "model directory path too long: %s",
                          model_dir);
    /* a separate chat_template.jinja is used when tokenizer_config.json has no chat_template */
    char jpath[4096];
    snprintf(jpath, sizeof jpath, "%s/chat_template.jinja", model_dir);
    char *jinja = NULL;
    FILE *jf = fopen(jpath, "rb");
    if (jf) {
        long n = fseek(jf, 0, SEEK_END) == 0 ? ftell(jf) : -1;
        if (n >= 0 && n < (16L << 20) && fseek(jf, 0, SEEK_SET) == 0 &&
            (jinja = malloc((size_t)n + 1)) != NULL) {
            if (fread(jinja, 1, (size_t)n, jf) != (size_t)n) {
                free(jinja);
                jinja = NULL;
            } else {
                jinja[n] = 0;
            }
        }
        fclose(jf);
    }
    json_t *cfg = NULL;
    if (numla_json_file_read(path, 0, &cfg) != NUMLA_STATUS_OK) {
        if (!force_name) {
            char msg[1024], names[256];
            snprintf(msg, sizeof msg, "%s", numla_error_message());
            free(jinja);
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                       "%s; without it pick a built-in chat template with --chat-template NAME "
                       "(%s)", msg, names_text(names, sizeof names));
        }
        numla_error_clear(); /* a forced template needs no tokenizer_config.json */
    }
    if (cfg && !json_is_object(cfg)) {
        json_decref(cfg);
        free(jinja);
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: not a JSON object", path);
    }
    numla_status s = load_parsed(cfg, path, force_name, jinja, out);
    json_decref(cfg);
    free(jinja);
    return s;
}

void numla_chat_template_destroy(numla_chat_template **t)
{
    if (!t || !*t)
        return;
    free((*t)->bos);
    free((*t)->eos);
    free(*t);
    *t = NULL;
}

const char *numla_chat_template_name(const numla_chat_template *t) { return t->builtin->name; }

/* ---- rendering ---- */

/* Appends whose failure b->oom records: rendering checks once at the end. */
static void put_n(numla_strbuf *b, const char *s, size_t len) { numla_strbuf_append(b, s, len); }

static void put(numla_strbuf *b, const char *s) { numla_strbuf_puts(b, s); }

static int is_role(const numla_chat_message *m, const char *role)
{
    return strcmp(m->role, role) == 0;
}

/* Every system message's content, in order, joined by "\n\n" (the V3 and V3.1 templates). */
static void put_systems_joined(const numla_chat_message *msgs, int n, numla_strbuf *b)
{
    int first = 1;
    for (int i = 0; i < n; i++)
        if (is_role(&msgs[i], "system")) {
            if (!first)
                put(b, "\n\n");
            put(b, msgs[i].content);
            first = 0;
        }
}

/* The literals of the V2.5 / V3 / R1 templates. */
#define T_USER "<｜User｜>"
#define T_ASSISTANT "<｜Assistant｜>"
#define T_EOS_LITERAL "<｜end▁of▁sentence｜>"
#define T_OUTPUTS_BEGIN "<｜tool▁outputs▁begin｜>"
#define T_OUTPUTS_END "<｜tool▁outputs▁end｜>"
#define T_OUTPUT_BEGIN "<｜tool▁output▁begin｜>"
#define T_OUTPUT_END "<｜tool▁output▁end｜>"

static numla_status render_v2(const numla_chat_template *t, const numla_chat_message *msgs, int n,
                              const numla_chat_options *o, numla_strbuf *b)
{
    put(b, t->bos);
    for (int i = 0; i < n; i++) {
        const numla_chat_message *m = &msgs[i];
        if (is_role(m, "user")) {
            put(b, "User: ");
            put(b, m->content);
            put(b, "\n\n");
        } else if (is_role(m, "assistant")) {
            put(b, "Assistant: ");
            put(b, m->content);
            put(b, t->eos);
        } else if (is_role(m, "system")) {
            put(b, m->content);
            put(b, "\n\n");
        }
    }
    if (o->add_generation_prompt)
        put(b, "Assistant:");
    return NUMLA_STATUS_OK;
}

/* V2.5, V3 and R1 share one walk; they differ in the system prompt, the separator between tool
 * outputs, R1's reasoning strip and R1's generation prompt. */
typedef enum turns_style { TURNS_V2_5, TURNS_V3, TURNS_R1 } turns_style;

static void render_turns(const numla_chat_template *t, const numla_chat_message *msgs, int n,
                         int agp, turns_style kind, numla_strbuf *b)
{
    if (kind == TURNS_V2_5) {
        /* The last system message wins; each one also emits the spaces in front of the
         * template's {% set %}, which precede the BOS token. */
        const char *sp = "";
        for (int i = 0; i < n; i++)
            if (is_role(&msgs[i], "system")) {
                put(b, "        ");
                sp = msgs[i].content;
            }
        put(b, t->bos);
        put(b, sp);
    } else {
        put(b, t->bos);
        put_systems_joined(msgs, n, b);
    }
    int is_tool = 0, output_first = 1;
    for (int i = 0; i < n; i++) {
        const numla_chat_message *m = &msgs[i];
        if (is_role(m, "user")) {
            is_tool = 0;
            put(b, T_USER);
            put(b, m->content);
        } else if (is_role(m, "assistant")) {
            if (is_tool) {
                put(b, T_OUTPUTS_END);
                put(b, m->content);
                put(b, T_EOS_LITERAL);
                is_tool = 0;
            } else {
                const char *c = m->content;
                if (kind == TURNS_R1) {
                    /* content.split('</think>')[-1]: what follows the last "</think>". */
                    for (const char *p = strstr(c, "</think>"); p; p = strstr(p + 1, "</think>"))
                        c = p + strlen("</think>");
                }
                put(b, T_ASSISTANT);
                put(b, c);
                put(b, T_EOS_LITERAL);
            }
        } else if (is_role(m, "tool")) {
            is_tool = 1;
            if (output_first) {
                put(b, T_OUTPUTS_BEGIN);
                output_first = 0;
            } else if (kind != TURNS_R1) {
                put(b, "\n");
            }
            put(b, T_OUTPUT_BEGIN);
            put(b, m->content);
            put(b, T_OUTPUT_END);
        }
    }
    if (is_tool)
        put(b, T_OUTPUTS_END);
    if (agp && !is_tool)
        put(b, kind == TURNS_R1 ? T_ASSISTANT "<think>\n" : T_ASSISTANT);
}

static numla_status render_v2_5(const numla_chat_template *t, const numla_chat_message *msgs,
                                int n, const numla_chat_options *o, numla_strbuf *b)
{
    render_turns(t, msgs, n, o->add_generation_prompt, TURNS_V2_5, b);
    return NUMLA_STATUS_OK;
}

static numla_status render_v3(const numla_chat_template *t, const numla_chat_message *msgs, int n,
                              const numla_chat_options *o, numla_strbuf *b)
{
    render_turns(t, msgs, n, o->add_generation_prompt, TURNS_V3, b);
    return NUMLA_STATUS_OK;
}

static numla_status render_r1(const numla_chat_template *t, const numla_chat_message *msgs, int n,
                              const numla_chat_options *o, numla_strbuf *b)
{
    render_turns(t, msgs, n, o->add_generation_prompt, TURNS_R1, b);
    return NUMLA_STATUS_OK;
}

/* ---- DeepSeek-V3.1 and Kimi ---- */

/* Python's repr of a double (shortest round trip; exponent form below 1e-4 and from 1e16). */
static void put_py_float(numla_strbuf *b, double v)
{
    char digits[40];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(digits, sizeof digits, "%.*e", prec - 1, v);
        if (strtod(digits, NULL) == v)
            break;
    }
    /* digits: [-]d.ddde[+-]XX; take the mantissa digits and the exponent */
    char mant[24];
    size_t k = 0;
    const char *p = digits;
    int neg = *p == '-';
    if (neg)
        p++;
    for (; *p && *p != 'e'; p++)
        if (*p != '.')
            mant[k++] = *p;
    mant[k] = 0;
    int exp = atoi(p + 1);
    while (k > 1 && mant[k - 1] == '0')
        mant[--k] = 0;
    char o[64];
    size_t n = 0;
    if (neg)
        o[n++] = '-';
    if (exp < -4 || exp >= 16) {
        o[n++] = mant[0];
        if (k > 1) {
            o[n++] = '.';
            memcpy(o + n, mant + 1, k - 1);
            n += k - 1;
        }
        n += (size_t)snprintf(o + n, sizeof o - n, "e%c%02d", exp < 0 ? '-' : '+',
                              exp < 0 ? -exp : exp);
    } else if (exp < 0) {
        o[n++] = '0';
        o[n++] = '.';
        for (int z = 0; z < -exp - 1; z++)
            o[n++] = '0';
        memcpy(o + n, mant, k);
        n += k;
    } else {
        for (int d = 0; d <= exp; d++)
            o[n++] = (size_t)d < k ? mant[d] : '0';
        o[n++] = '.';
        if ((size_t)exp + 1 < k) {
            memcpy(o + n, mant + exp + 1, k - (size_t)exp - 1);
            n += k - (size_t)exp - 1;
        } else {
            o[n++] = '0';
        }
    }
    put_n(b, o, n);
}

static void put_py_string(numla_strbuf *b, const char *s, size_t len)
{
    put(b, "\"");
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        char e[8];
        switch (c) {
        case '"': put(b, "\\\""); break;
        case '\\': put(b, "\\\\"); break;
        case '\n': put(b, "\\n"); break;
        case '\r': put(b, "\\r"); break;
        case '\t': put(b, "\\t"); break;
        case '\b': put(b, "\\b"); break;
        case '\f': put(b, "\\f"); break;
        default:
            if (c < 0x20) {
                snprintf(e, sizeof e, "\\u%04x", c);
                put(b, e);
            } else {
                put_n(b, (const char *)&s[i], 1);
            }
        }
    }
    put(b, "\"");
}

/* v as Python's json.dumps(v, ensure_ascii=False) writes it (transformers' tojson): ", " and
 * ": " separators, keys in their order, non-ASCII as is. */
static void put_py_json(numla_strbuf *b, json_t *v)
{
    char num[32];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        put(b, "{");
        const char *key;
        json_t *x;
        int first = 1;
        json_object_foreach(v, key, x) {
            if (!first)
                put(b, ", ");
            first = 0;
            put_py_string(b, key, strlen(key));
            put(b, ": ");
            put_py_json(b, x);
        }
        put(b, "}");
        break;
    }
    case JSON_ARRAY: {
        put(b, "[");
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) {
            if (i)
                put(b, ", ");
            put_py_json(b, x);
        }
        put(b, "]");
        break;
    }
    case JSON_STRING:
        put_py_string(b, json_string_value(v), json_string_length(v));
        break;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v));
        put(b, num);
        break;
    case JSON_REAL:
        put_py_float(b, json_real_value(v));
        break;
    case JSON_TRUE: put(b, "true"); break;
    case JSON_FALSE: put(b, "false"); break;
    default: put(b, "null"); break;
    }
}

void numla_chat_put_py_json(numla_strbuf *b, json_t *v) { put_py_json(b, v); }

int numla_chat_json_truthy(const json_t *v)
{
    return !(!v || json_is_null(v) || json_is_false(v) ||
             (json_is_array(v) && json_array_size(v) == 0) ||
             (json_is_object(v) && json_object_size(v) == 0) ||
             (json_is_string(v) && json_string_length(v) == 0) ||
             (json_is_integer(v) && json_integer_value(v) == 0) ||
             (json_is_real(v) && json_real_value(v) == 0.0));
}

numla_status numla_chat_tools_parse(const char *tools_json, const char *template_name,
                                    json_t **out)
{
    *out = NULL;
    if (!tools_json)
        return NUMLA_STATUS_OK;
    json_error_t err;
    json_t *tools = json_loads(tools_json, JSON_DECODE_ANY, &err);
    if (!tools)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "tools: not JSON (%s)", err.text);
    if (!numla_chat_json_truthy(tools)) {
        json_decref(tools);
        return NUMLA_STATUS_OK;
    }
    if (!json_is_array(tools)) {
        json_decref(tools);
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "tools: not an array (the %s template lists each "
                                             "tool)", template_name);
    }
    *out = tools;
    return NUMLA_STATUS_OK;
}

numla_status numla_chat_tool_arguments(const numla_chat_message *m, int i, int k,
                                       const char *template_name, json_t **out)
{
    json_error_t err;
    *out = json_loads(m->tool_calls[k].arguments, JSON_DECODE_ANY, &err);
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "messages[%d].tool_calls[%d].function.arguments is not a JSON object (the %s "
                   "template writes its keys one by one)", i, k, template_name);
    }
    return NUMLA_STATUS_OK;
}


static numla_status put_tools(numla_strbuf *b, const char *tools_json)
{
    json_error_t err;
    json_t *tools = json_loads(tools_json, JSON_DECODE_ANY, &err);
    if (!tools)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "tools: not JSON (%s)", err.text);
    /* `if tools`: an empty list or object, false, null, 0 and "" declare nothing */
    if (numla_chat_json_truthy(tools)) {
        put(b, K_SYS "tool_declare" K_MIDDLE);
        put_py_json(b, tools);
        put(b, K_END);
    }
    json_decref(tools);
    return NUMLA_STATUS_OK;
}

static numla_status render_kimi_k2(const numla_chat_template *t, const numla_chat_message *msgs,
                                   int n, const numla_chat_options *o, numla_strbuf *b)
{
    (void)t;
    if (o->tools_json)
        NUMLA_CHECK(put_tools(b, o->tools_json));
    for (int i = 0; i < n; i++) {
        const numla_chat_message *m = &msgs[i];
        if (i == 0 && !is_role(&msgs[0], "system"))
            put(b, K_SYS "system" K_MIDDLE "You are a helpful assistant" K_END);
        if (is_role(m, "system"))
            put(b, K_SYS "system" K_MIDDLE);
        else if (is_role(m, "user"))
            put(b, K_USER "user" K_MIDDLE);
        else if (is_role(m, "assistant"))
            put(b, K_ASSISTANT "assistant" K_MIDDLE);
        else if (is_role(m, "tool"))
            put(b, K_SYS "tool" K_MIDDLE);
        if (m->content)
            put(b, m->content);
        put(b, K_END);
    }
    if (o->add_generation_prompt)
        put(b, K_ASSISTANT "assistant" K_MIDDLE);
    return NUMLA_STATUS_OK;
}

static void kimi_thinking_message(const numla_chat_message *m, int suffix, numla_strbuf *b)
{
    const char *rn = m->name && *m->name ? m->name : m->role;
    put(b, is_role(m, "user") ? K_USER : is_role(m, "assistant") ? K_ASSISTANT : K_SYS);
    put(b, rn);
    put(b, K_MIDDLE);
    if (is_role(m, "assistant")) {
        put(b, "<think>");
        if (suffix && m->reasoning_content)
            put(b, m->reasoning_content);
        put(b, "</think>");
        if (m->content)
            put(b, m->content);
        if (m->num_tool_calls > 0) {
            put(b, "<|tool_calls_section_begin|>");
            for (int k = 0; k < m->num_tool_calls; k++) {
                put(b, "<|tool_call_begin|>");
                if (m->tool_calls[k].id)
                    put(b, m->tool_calls[k].id);
                put(b, "<|tool_call_argument_begin|>");
                if (m->tool_calls[k].arguments)
                    put(b, m->tool_calls[k].arguments);
                put(b, "<|tool_call_end|>");
            }
            put(b, "<|tool_calls_section_end|>");
        }
    } else if (is_role(m, "tool")) {
        put(b, "## Return of ");
        if (m->tool_call_id)
            put(b, m->tool_call_id);
        put(b, "\n");
        if (m->content)
            put(b, m->content);
    } else if (m->content) {
        put(b, m->content);
    }
    put(b, K_END);
}

static numla_status render_kimi_k2_thinking(const numla_chat_template *t,
                                            const numla_chat_message *msgs, int n,
                                            const numla_chat_options *o, numla_strbuf *b)
{
    (void)t;
    if (o->tools_json)
        NUMLA_CHECK(put_tools(b, o->tools_json));
    /* the last assistant message without tool calls ends the history; reasoning_content is
     * kept only after it */
    int last = -1;
    for (int i = n - 1; i >= 0 && last < 0; i--)
        if (is_role(&msgs[i], "assistant") && msgs[i].num_tool_calls == 0)
            last = i;
    if (n == 0 || !is_role(&msgs[0], "system"))
        put(b, K_SYS "system" K_MIDDLE "You are Kimi, an AI assistant created by Moonshot AI." K_END);
    for (int i = 0; i < n; i++)
        kimi_thinking_message(&msgs[i], i > last, b);
    if (o->add_generation_prompt)
        put(b, K_ASSISTANT "assistant" K_MIDDLE);
    return NUMLA_STATUS_OK;
}

static numla_status render_v3_1(const numla_chat_template *t, const numla_chat_message *msgs,
                                int n, const numla_chat_options *o, numla_strbuf *b)
{
    put(b, t->bos);
    put_systems_joined(msgs, n, b);
    int is_tool = 0, is_last_user = 0;
    for (int i = 0; i < n; i++) {
        const numla_chat_message *m = &msgs[i];
        if (is_role(m, "user")) {
            is_tool = 0;
            is_last_user = 1;
            put(b, T_USER);
            put(b, m->content);
        }
        if (is_role(m, "assistant") && m->has_tool_calls) {
            if (is_last_user)
                put(b, T_ASSISTANT "</think>");
            is_last_user = 0;
            is_tool = 0;
            for (int k = 0; k < m->num_tool_calls; k++) {
                if (k == 0) {
                    if (m->content)
                        put(b, m->content);
                    put(b, "<｜tool▁calls▁begin｜>");
                }
                put(b, "<｜tool▁call▁begin｜>");
                put(b, m->tool_calls[k].name);
                put(b, "<｜tool▁sep｜>");
                put(b, m->tool_calls[k].arguments);
                put(b, "<｜tool▁call▁end｜>");
            }
            put(b, "<｜tool▁calls▁end｜>" T_EOS_LITERAL);
        }
        if (is_role(m, "assistant") && !m->has_tool_calls) {
            if (is_last_user)
                put(b, T_ASSISTANT "</think>");
            is_last_user = 0;
            if (is_tool) {
                put(b, m->content);
                is_tool = 0;
            } else {
                /* content.split('</think>', 1)[1]: what follows the first "</think>" */
                const char *c = m->content, *p = strstr(c, "</think>");
                put(b, p ? p + strlen("</think>") : c);
            }
            put(b, T_EOS_LITERAL);
        }
        if (is_role(m, "tool")) {
            is_last_user = 0;
            is_tool = 1;
            put(b, T_OUTPUT_BEGIN);
            put(b, m->content);
            put(b, T_OUTPUT_END);
        }
    }
    if (o->add_generation_prompt && is_last_user && !is_tool)
        put(b, o->thinking ? T_ASSISTANT "<think>" : T_ASSISTANT "</think>");
    return NUMLA_STATUS_OK;
}

static numla_status render_glm5(const numla_chat_template *t, const numla_chat_message *msgs,
                                int n, const numla_chat_options *o, numla_strbuf *b)
{
    (void)t;
    return numla_chat_render_glm5(msgs, n, o, b);
}

static numla_status render_dsv32(const numla_chat_template *t, const numla_chat_message *msgs,
                                 int n, const numla_chat_options *o, numla_strbuf *b)
{
    (void)t;
    return numla_chat_render_dsv32(msgs, n, o, b);
}

static numla_status render_dsv4(const numla_chat_template *t, const numla_chat_message *msgs,
                                int n, const numla_chat_options *o, numla_strbuf *b)
{
    (void)t;
    return numla_chat_render_dsv4(msgs, n, o, b);
}

const char *const *numla_chat_template_stop_tokens(const numla_chat_template *t)
{
    return t->builtin->stop;
}

const char *numla_chat_template_end_of_turn(const numla_chat_template *t)
{
    return numla_chat_template_stop_tokens(t)[0];
}

int numla_chat_template_thinks(const numla_chat_template *t)
{
    return (t->builtin->flags & THINKS) != 0;
}

const char *const *numla_chat_template_reasoning_efforts(const numla_chat_template *t)
{
    return t->builtin->efforts ? t->builtin->efforts : stop_none;
}

int numla_chat_template_can(const numla_chat_template *t, numla_chat_ability what)
{
    return (t->builtin->flags & what) == what;
}

/* The DeepSeek V2-R1 templates write plain text only. */
static numla_status check_plain(const numla_chat_template *t, const numla_chat_message *msgs,
                                int n)
{
    for (int i = 0; i < n; i++) {
        if (msgs[i].has_tool_calls || msgs[i].num_tool_calls)
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                       "messages[%d].tool_calls: tool calls are not supported by numla's "
                       "%s chat template",
                       i, t->builtin->name);
        if (!msgs[i].content)
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                       "messages[%d].content is null (tool calls are not supported by "
                       "numla's %s chat template)",
                       i, t->builtin->name);
    }
    return NUMLA_STATUS_OK;
}

/* What the templates with tool calls cannot render (transformers refuses them too). */
static numla_status check_tools(const numla_chat_template *t, const numla_chat_message *msgs,
                                int n)
{
    const char *name = t->builtin->name;
    if (n == 0 && !(t->builtin->flags & EMPTY_OK)) /* deepseek-v3.2 writes the BOS alone */
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "messages is empty (the %s template needs at "
                                             "least one message)", name);
    for (int i = 0; i < n; i++) {
        const numla_chat_message *m = &msgs[i];
        for (int k = 0; k < m->num_tool_calls; k++)
            if (!m->tool_calls[k].name || !m->tool_calls[k].arguments)
                NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                           "messages[%d].tool_calls[%d].function needs a name and arguments", i,
                           k);
        if (!(t->builtin->flags & CONTENT_NEEDED))
            continue;
        int needs_content = is_role(m, "user") || is_role(m, "tool") || is_role(m, "system") ||
                            (is_role(m, "assistant") && !m->has_tool_calls);
        if (needs_content && !m->content)
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "messages[%d].content is null (the %s template "
                                                 "needs text there)", i, name);
    }
    return NUMLA_STATUS_OK;
}

numla_status numla_chat_template_render(const numla_chat_template *t,
                                        const numla_chat_message *msgs, int n,
                                        int add_generation_prompt, char **out, size_t *len)
{
    numla_chat_options o = {.add_generation_prompt = add_generation_prompt};
    return numla_chat_template_render_opts(t, msgs, n, &o, out, len);
}

numla_status numla_chat_template_render_opts(const numla_chat_template *t,
                                             const numla_chat_message *msgs, int n,
                                             const numla_chat_options *opts, char **out,
                                             size_t *len)
{
    *out = NULL;
    *len = 0;
    if (n < 0 || (n > 0 && !msgs))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "chat messages: bad count %d", n);
    for (int i = 0; i < n; i++)
        if (!msgs[i].role)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "messages[%d].role is missing", i);
    if (opts && opts->reasoning_effort) {
        const char *const *e = numla_chat_template_reasoning_efforts(t);
        while (*e && strcmp(*e, opts->reasoning_effort))
            e++;
        if (!*e) {
            if (!t->builtin->efforts)
                NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "reasoning_effort: the %s chat template "
                           "has no reasoning effort", t->builtin->name);
            char known[96] = "";
            for (e = t->builtin->efforts; *e; e++)
                snprintf(known + strlen(known), sizeof known - strlen(known), "%s\"%s\"",
                         e == t->builtin->efforts ? "" : e[1] ? ", " : " or ", *e);
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "reasoning_effort: \"%.40s\" is not one the "
                       "%s chat template knows (%s)", opts->reasoning_effort, t->builtin->name,
                       known);
        }
    }
    NUMLA_CHECK(t->builtin->check(t, msgs, n));
    numla_strbuf b = {0};
    numla_status st = t->builtin->render(t, msgs, n, opts, &b);
    put_n(&b, "", 0);
    if (st != NUMLA_STATUS_OK || b.oom) {
        numla_strbuf_free(&b);
        NUMLA_CHECK(st);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "rendering %d chat messages", n);
    }
    *len = b.len;
    *out = numla_strbuf_take(&b);
    return NUMLA_STATUS_OK;
}
