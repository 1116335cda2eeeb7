/* engine/text/chat_template.c — recognise DeepSeek chat templates and render them in C.
 *
 * Each renderer below is the Jinja template it replaces, read for plain-text messages under
 * transformers' settings (trim_blocks, lstrip_blocks): the literal strings, the order in which
 * the template walks the messages, and the whitespace its tags leave. The template sources are
 * kept as data to recognise a model's tokenizer_config.json (sources: tests/golden/chat/README.md).
 * Owns no tokenizer state; must not touch the tokenizer files. */
#include "engine/text/chat_template.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/strbuf.h"

static const char numla_tmpl_v2[] =
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% e"
    "ndif %}{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ "
    "'User: ' + message['content'] + '\n\n' }}{% elif message['role'] == 'assistant' %}{{ 'As"
    "sistant: ' + message['content'] + eos_token }}{% elif message['role'] == 'system' %}{{ m"
    "essage['content'] + '\n\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ 'As"
    "sistant:' }}{% endif %}";

static const char numla_tmpl_v2_5[] =
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% e"
    "ndif %}{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system"
    "_prompt='') %}{%- for message in messages %}    {%- if message['role'] == 'system' %}   "
    "     {% set ns.system_prompt = message['content'] %}    {%- endif %}{%- endfor %}{{bos_t"
    "oken}}{{ns.system_prompt}}{%- for message in messages %}    {%- if message['role'] == 'u"
    "ser' %}    {%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}    {%- "
    "endif %}    {%- if message['role'] == 'assistant' and message['content'] is none %}     "
    "   {%- set ns.is_tool = false -%}        {%- for tool in message['tool_calls']%}        "
    "    {%- if not ns.is_first %}{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁"
    "call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\"
    "n' + '```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```' + '<｜tool▁cal"
    "l▁end｜>'}}            {%- set ns.is_first = true -%}            {%- else %}{{'\\n' +"
    " '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']["
    "'name'] + '\\n' + '```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```' + '<"
    "｜tool▁call▁end｜>'}}{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}  "
    "                 {%- endif %}        {%- endfor %}    {%- endif %}    {%- if message['ro"
    "le'] == 'assistant' and message['content'] is not none %}        {%- if ns.is_tool %}{{'"
    "<｜tool▁outputs▁end｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}    "
    "    {%- set ns.is_tool = false -%}        {%- else %}{{'<｜Assistant｜>' + message['co"
    "ntent'] + '<｜end▁of▁sentence｜>'}}        {%- endif %}    {%- endif %}    {%- if "
    "message['role'] == 'tool' %}        {%- set ns.is_tool = true -%}        {%- if ns.is_ou"
    "tput_first %}{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + message['"
    "content'] + '<｜tool▁output▁end｜>'}}        {%- set ns.is_output_first = false %}"
    "        {%- else %}{{'\\n<｜tool▁output▁begin｜>' + message['content'] + '<｜tool"
    "▁output▁end｜>'}}        {%- endif %}    {%- endif %}{%- endfor -%}{% if ns.is_tool"
    " %}{{'<｜tool▁outputs▁end｜>'}}{% endif %}{% if add_generation_prompt and not ns.i"
    "s_tool %}{{'<｜Assistant｜>'}}{% endif %}";

static const char numla_tmpl_v3[] =
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% e"
    "ndif %}{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system"
    "_prompt='', is_first_sp=true) %}{%- for message in messages %}{%- if message['role'] == "
    "'system' %}{%- if ns.is_first_sp %}{% set ns.system_prompt = ns.system_prompt + message["
    "'content'] %}{% set ns.is_first_sp = false %}{%- else %}{% set ns.system_prompt = ns.sys"
    "tem_prompt + '\\n\\n' + message['content'] %}{%- endif %}{%- endif %}{%- endfor %}{{bos_"
    "token}}{{ns.system_prompt}}{%- for message in messages %}{%- if message['role'] == 'user"
    "' %}{%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}{%- endif %}{%-"
    " if message['role'] == 'assistant' and message['content'] is none %}{%- set ns.is_tool ="
    " false -%}{%- for tool in message['tool_calls']%}{%- if not ns.is_first %}{{'<｜Assista"
    "nt｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜too"
    "l▁sep｜>' + tool['function']['name'] + '\\n' + '```json' + '\\n' + tool['function']['"
    "arguments'] + '\\n' + '```' + '<｜tool▁call▁end｜>'}}{%- set ns.is_first = true -%"
    "}{%- else %}{{'\\n' + '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>"
    "' + tool['function']['name'] + '\\n' + '```json' + '\\n' + tool['function']['arguments']"
    " + '\\n' + '```' + '<｜tool▁call▁end｜>'}}{{'<｜tool▁calls▁end｜><｜end▁o"
    "f▁sentence｜>'}}{%- endif %}{%- endfor %}{%- endif %}{%- if message['role'] == 'assis"
    "tant' and message['content'] is not none %}{%- if ns.is_tool %}{{'<｜tool▁outputs▁e"
    "nd｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}{%- set ns.is_tool = false"
    " -%}{%- else %}{{'<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>"
    "'}}{%- endif %}{%- endif %}{%- if message['role'] == 'tool' %}{%- set ns.is_tool = true "
    "-%}{%- if ns.is_output_first %}{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begi"
    "n｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- set ns.is_output_first "
    "= false %}{%- else %}{{'\\n<｜tool▁output▁begin｜>' + message['content'] + '<｜to"
    "ol▁output▁end｜>'}}{%- endif %}{%- endif %}{%- endfor -%}{% if ns.is_tool %}{{'<｜"
    "tool▁outputs▁end｜>'}}{% endif %}{% if add_generation_prompt and not ns.is_tool %}{"
    "{'<｜Assistant｜>'}}{% endif %}";

static const char numla_tmpl_r1[] =
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% e"
    "ndif %}{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system"
    "_prompt='', is_first_sp=true) %}{%- for message in messages %}{%- if message['role'] == "
    "'system' %}{%- if ns.is_first_sp %}{% set ns.system_prompt = ns.system_prompt + message["
    "'content'] %}{% set ns.is_first_sp = false %}{%- else %}{% set ns.system_prompt = ns.sys"
    "tem_prompt + '\\n\\n' + message['content'] %}{%- endif %}{%- endif %}{%- endfor %}{{ bos"
    "_token }}{{ ns.system_prompt }}{%- for message in messages %}{%- if message['role'] == '"
    "user' %}{%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}{%- endif %"
    "}{%- if message['role'] == 'assistant' and 'tool_calls' in message %}{%- set ns.is_tool "
    "= false -%}{%- for tool in message['tool_calls'] %}{%- if not ns.is_first %}{%- if messa"
    "ge['content'] is none %}{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call"
    "▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\n' +"
    " '```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```' + '<｜tool▁call▁"
    "end｜>'}}{%- else %}{{'<｜Assistant｜>' + message['content'] + '<｜tool▁calls▁be"
    "gin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['functi"
    "on']['name'] + '\\n' + '```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```'"
    " + '<｜tool▁call▁end｜>'}}{%- endif %}{%- set ns.is_first = true -%}{%- else %}{{'"
    "\\n' + '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['funct"
    "ion']['name'] + '\\n' + '```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```"
    "' + '<｜tool▁call▁end｜>'}}{%- endif %}{%- endfor %}{{'<｜tool▁calls▁end｜><"
    "｜end▁of▁sentence｜>'}}{%- endif %}{%- if message['role'] == 'assistant' and 'tool"
    "_calls' not in message %}{%- if ns.is_tool %}{{'<｜tool▁outputs▁end｜>' + message["
    "'content'] + '<｜end▁of▁sentence｜>'}}{%- set ns.is_tool = false -%}{%- else %}{% "
    "set content = message['content'] %}{% if '</think>' in content %}{% set content = conten"
    "t.split('</think>')[-1] %}{% endif %}{{'<｜Assistant｜>' + content + '<｜end▁of▁s"
    "entence｜>'}}{%- endif %}{%- endif %}{%- if message['role'] == 'tool' %}{%- set ns.is_t"
    "ool = true -%}{%- if ns.is_output_first %}{{'<｜tool▁outputs▁begin｜><｜tool▁ou"
    "tput▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- set ns.is_ou"
    "tput_first = false %}{%- else %}{{'<｜tool▁output▁begin｜>' + message['content'] +"
    " '<｜tool▁output▁end｜>'}}{%- endif %}{%- endif %}{%- endfor -%}{% if ns.is_tool %"
    "}{{'<｜tool▁outputs▁end｜>'}}{% endif %}{% if add_generation_prompt and not ns.is_"
    "tool %}{{'<｜Assistant｜><think>\\n'}}{% endif %}";

typedef enum numla_chat_kind {
    NUMLA_CHAT_KIND_V2,
    NUMLA_CHAT_KIND_V2_5,
    NUMLA_CHAT_KIND_V3,
    NUMLA_CHAT_KIND_R1,
} numla_chat_kind;

typedef struct numla_chat_builtin {
    const char *name;
    numla_chat_kind kind;
    const char *source;
} numla_chat_builtin;

static const numla_chat_builtin numla_chat_builtins[] = {
    {"deepseek-v2", NUMLA_CHAT_KIND_V2, numla_tmpl_v2},
    {"deepseek-v2.5", NUMLA_CHAT_KIND_V2_5, numla_tmpl_v2_5},
    {"deepseek-v3", NUMLA_CHAT_KIND_V3, numla_tmpl_v3},
    {"deepseek-r1", NUMLA_CHAT_KIND_R1, numla_tmpl_r1},
};
#define NUMLA_CHAT_NBUILTIN ((int)(sizeof numla_chat_builtins / sizeof numla_chat_builtins[0]))

static const char *const numla_chat_name_list[] = {"deepseek-v2", "deepseek-v2.5", "deepseek-v3",
                                                   "deepseek-r1", NULL};
#define NUMLA_CHAT_NAMES_TEXT "deepseek-v2, deepseek-v2.5, deepseek-v3, deepseek-r1"

/* DeepSeek's special-token strings: the defaults when no tokenizer_config.json is at hand. */
#define NUMLA_CHAT_BOS "<｜begin▁of▁sentence｜>"
#define NUMLA_CHAT_EOS "<｜end▁of▁sentence｜>"

struct numla_chat_template {
    const numla_chat_builtin *builtin;
    char *bos; /* bos_token as the template sees it ("" when unset) */
    char *eos; /* eos_token likewise */
};

const char *const *numla_chat_template_names(void) { return numla_chat_name_list; }

const char *numla_chat_template_source(const char *name)
{
    for (int i = 0; name && i < NUMLA_CHAT_NBUILTIN; i++)
        if (strcmp(numla_chat_builtins[i].name, name) == 0)
            return numla_chat_builtins[i].source;
    return NULL;
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

static numla_status recognise(const char *tmpl, const numla_chat_builtin **out)
{
    *out = NULL;
    char *fp = fingerprint(tmpl);
    if (!fp)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "chat template fingerprint");
    for (int i = 0; i < NUMLA_CHAT_NBUILTIN && !*out; i++) {
        char *known = fingerprint(numla_chat_builtins[i].source);
        if (!known) {
            free(fp);
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "chat template fingerprint");
        }
        if (strcmp(fp, known) == 0)
            *out = &numla_chat_builtins[i];
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
                                numla_chat_template **out)
{
    const numla_chat_builtin *b = NULL;
    if (force_name) {
        for (int i = 0; i < NUMLA_CHAT_NBUILTIN; i++)
            if (strcmp(numla_chat_builtins[i].name, force_name) == 0)
                b = &numla_chat_builtins[i];
        if (!b)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                              "--chat-template %s: unknown chat template (built-in: %s)",
                              force_name, NUMLA_CHAT_NAMES_TEXT);
    } else {
        const char *tmpl = cfg ? config_template(cfg) : NULL;
        if (!tmpl)
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                              "%s has no chat_template; pick a built-in one with "
                              "--chat-template NAME (%s)",
                              what, NUMLA_CHAT_NAMES_TEXT);
        NUMLA_CHECK(recognise(tmpl, &b));
        if (!b)
            NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                              "%s: chat_template (starting \"%.60s\") is not one of the DeepSeek "
                              "templates numla renders; pick a built-in one with "
                              "--chat-template NAME (%s)",
                              what, tmpl, NUMLA_CHAT_NAMES_TEXT);
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

numla_status numla_chat_template_load_json(const char *json, const char *force_name,
                                           numla_chat_template **out)
{
    *out = NULL;
    json_t *cfg = NULL;
    if (json) {
        json_error_t err;
        cfg = json_loads(json, 0, &err);
        if (!cfg || !json_is_object(cfg)) {
            json_decref(cfg);
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "tokenizer_config.json: %s (line %d)",
                              cfg ? "not an object" : err.text, err.line);
        }
    }
    numla_status s = load_parsed(cfg, "tokenizer_config.json", force_name, out);
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
    json_error_t err;
    json_t *cfg = json_load_file(path, 0, &err);
    if (!cfg && !force_name)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED,
                          "%s: %s; without it pick a built-in chat template with "
                          "--chat-template NAME (%s)",
                          path, err.text, NUMLA_CHAT_NAMES_TEXT);
    if (cfg && !json_is_object(cfg)) {
        json_decref(cfg);
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: not a JSON object", path);
    }
    numla_status s = load_parsed(cfg, path, force_name, out);
    json_decref(cfg);
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

/* The literals of the V2.5 / V3 / R1 templates. */
#define T_USER "<｜User｜>"
#define T_ASSISTANT "<｜Assistant｜>"
#define T_EOS_LITERAL "<｜end▁of▁sentence｜>"
#define T_OUTPUTS_BEGIN "<｜tool▁outputs▁begin｜>"
#define T_OUTPUTS_END "<｜tool▁outputs▁end｜>"
#define T_OUTPUT_BEGIN "<｜tool▁output▁begin｜>"
#define T_OUTPUT_END "<｜tool▁output▁end｜>"

static void render_v2(const numla_chat_template *t, const numla_chat_message *msgs, int n,
                      int agp, numla_strbuf *b)
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
    if (agp)
        put(b, "Assistant:");
}

/* V2.5, V3 and R1 share one walk; they differ in the system prompt, the separator between tool
 * outputs, R1's reasoning strip and R1's generation prompt. */
static void render_turns(const numla_chat_template *t, const numla_chat_message *msgs, int n,
                         int agp, numla_strbuf *b)
{
    numla_chat_kind kind = t->builtin->kind;
    if (kind == NUMLA_CHAT_KIND_V2_5) {
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
        int first = 1;
        for (int i = 0; i < n; i++)
            if (is_role(&msgs[i], "system")) {
                if (!first)
                    put(b, "\n\n");
                put(b, msgs[i].content);
                first = 0;
            }
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
                if (kind == NUMLA_CHAT_KIND_R1) {
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
            } else if (kind != NUMLA_CHAT_KIND_R1) {
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
        put(b, kind == NUMLA_CHAT_KIND_R1 ? T_ASSISTANT "<think>\n" : T_ASSISTANT);
}

numla_status numla_chat_template_render(const numla_chat_template *t,
                                        const numla_chat_message *msgs, int n,
                                        int add_generation_prompt, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    if (n < 0 || (n > 0 && !msgs))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "chat messages: bad count %d", n);
    for (int i = 0; i < n; i++) {
        if (!msgs[i].role)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "messages[%d].role is missing", i);
        if (msgs[i].has_tool_calls)
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
    numla_strbuf b = {0};
    if (t->builtin->kind == NUMLA_CHAT_KIND_V2)
        render_v2(t, msgs, n, add_generation_prompt, &b);
    else
        render_turns(t, msgs, n, add_generation_prompt, &b);
    put_n(&b, "", 0);
    if (b.oom) {
        numla_strbuf_free(&b);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "rendering %d chat messages", n);
    }
    *len = b.len;
    *out = numla_strbuf_take(&b);
    return NUMLA_STATUS_OK;
}
