/* engine/http/openai.c — OpenAI request bodies and response objects (see openai.h). */
#include "engine/http/openai.h"
#include "engine/http/responses.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/serving/request_io.h"
#include "engine/text/tokenizer.h"

numla_openai_error *numla_openai_error_set(numla_openai_error *err, int status, const char *param,
                                           const char *code, const char *fmt, ...)
{
    err->status = status;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    snprintf(err->code, sizeof err->code, "%s", code ? code : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    /* The message may quote the body (a parser's "near '...'") or be cut inside a character:
     * keep it valid UTF-8, so the JSON error object can always be written. */
    for (char *f = err->param; f; f = f == err->param ? err->message : NULL) {
        const size_t len = strlen(f);
        int64_t at;
        while ((at = numla_utf8_invalid_offset(f, len)) >= 0)
            f[at] = '?';
    }
    return err;
}

/* A 400 for an invalid value of `param`; returns 0 so parsers can `return bad(...)`. */
static int bad(numla_openai_error *err, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad(numla_openai_error *err, const char *param, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    numla_openai_error_set(err, 400, param, "invalid_value", "%s", msg);
    return 0;
}

static int oom(numla_openai_error *err)
{
    numla_openai_error_set(err, 500, NULL, "no_memory", "out of memory while parsing the request");
    return 0;
}

/* A token-id list; `param` names it in errors. Returns 0 on error. */
static int parse_ids(json_t *v, const numla_openai_limits *lim, const char *param,
                     numla_openai_prompt *p, numla_openai_error *err)
{
    size_t n = json_array_size(v);
    if (n == 0)
        return bad(err, param, "'%s' must not be an empty list of token ids", param);
    if (n > (size_t)INT32_MAX / 2)
        return bad(err, param, "'%s' is too long", param);
    p->tokens = malloc(n * sizeof *p->tokens);
    if (!p->tokens)
        return oom(err);
    for (size_t i = 0; i < n; i++) {
        int64_t t;
        if (!numla_request_json_int(json_array_get(v, i), &t) || t < 0 ||
            (lim->vocab_size > 0 && t >= lim->vocab_size))
            return bad(err, param, "'%s'[%zu] is not a token id in 0..%lld", param, i,
                       (long long)(lim->vocab_size > 0 ? lim->vocab_size - 1 : INT32_MAX));
        p->tokens[i] = (int32_t)t;
    }
    p->num_tokens = (int32_t)n;
    return 1;
}

static int copy_text(json_t *v, char **out, size_t *len, numla_openai_error *err)
{
    *len = json_string_length(v);
    *out = malloc(*len + 1);
    if (!*out)
        return oom(err);
    memcpy(*out, json_string_value(v), *len);
    (*out)[*len] = 0;
    return 1;
}

/* prompt: string | [string, ...] | [id, ...] | [[id, ...], ...]. */
static int parse_prompt(json_t *v, const numla_openai_limits *lim, numla_openai_request *r,
                        numla_openai_error *err)
{
    const char *what = "'prompt' must be a string, a list of strings, a list of token ids or a "
                       "list of token-id lists";
    size_t n = 1;
    int kind; /* 0: one string, 1: strings, 2: one id list, 3: id lists */
    if (json_is_string(v)) {
        kind = 0;
    } else if (json_is_array(v) && json_array_size(v) > 0) {
        json_t *e0 = json_array_get(v, 0);
        if (json_is_string(e0))
            kind = 1;
        else if (json_is_array(e0))
            kind = 3;
        else if (json_is_number(e0))
            kind = 2;
        else
            return bad(err, "prompt", "%s", what);
        if (kind != 2)
            n = json_array_size(v);
    } else {
        return bad(err, "prompt", "%s", what);
    }
    if (n > NUMLA_OPENAI_MAX_PROMPTS)
        return bad(err, "prompt", "'prompt' holds %zu prompts; at most %d are served per request",
                   n, NUMLA_OPENAI_MAX_PROMPTS);
    r->prompts = calloc(n, sizeof *r->prompts);
    if (!r->prompts)
        return oom(err);
    r->num_prompts = (int32_t)n;
    for (size_t i = 0; i < n; i++) {
        json_t *e = kind == 0 || kind == 2 ? v : json_array_get(v, i);
        numla_openai_prompt *p = &r->prompts[i];
        if (kind <= 1) {
            if (!json_is_string(e))
                return bad(err, "prompt", "%s (prompt[%zu] is not a string)", what, i);
            if (!copy_text(e, &p->text, &p->text_len, err))
                return 0;
        } else {
            if (!json_is_array(e))
                return bad(err, "prompt", "%s (prompt[%zu] is not a list)", what, i);
            if (!parse_ids(e, lim, "prompt", p, err))
                return 0;
        }
    }
    return 1;
}

/* An optional string field `key` of object o into *out (NULL when absent; null too when
 * null_ok); `param` names it in errors. Returns 0 on error. */
static int opt_string(json_t *o, const char *key, const char *param, int null_ok, char **out,
                      numla_openai_error *err)
{
    json_t *f = json_object_get(o, key);
    *out = NULL;
    if (!f || (null_ok && json_is_null(f)))
        return 1;
    if (!json_is_string(f))
        return bad(err, param, "'%s' must be a string%s", param, null_ok ? " or null" : "");
    size_t len;
    return copy_text(f, out, &len, err);
}

/* Every key of object o is in names (NULL-terminated); else a 400 naming "<prefix>.<key>". */
static int known_keys(json_t *o, const char *prefix, const char *const *names,
                      numla_openai_error *err)
{
    const char *key;
    json_t *f;
    json_object_foreach(o, key, f) {
        int ok = 0;
        for (const char *const *k = names; *k && !ok; k++)
            ok = !strcmp(key, *k);
        if (!ok) {
            char param[96];
            if (*prefix)
                snprintf(param, sizeof param, "%.47s.%.47s", prefix, key);
            else
                snprintf(param, sizeof param, "%.60s", key);
            numla_openai_error_set(err, 400, param, "unknown_field",
                                   "unknown or unsupported field '%s'", param);
            return 0;
        }
    }
    return 1;
}

/* An assistant message's tool_calls: [{id?, type?: "function", function: {name, arguments}}]. */
static int parse_tool_calls(json_t *v, size_t i, numla_openai_message *m, numla_openai_error *err)
{
    static const char *const call_keys[] = {"id", "type", "function", NULL};
    static const char *const fn_keys[] = {"name", "arguments", NULL};
    char param[96];
    snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
    if (!json_is_array(v))
        return bad(err, param, "'%s' must be a list of tool calls", param);
    m->has_tool_calls = 1;
    size_t n = json_array_size(v);
    if (n > 1024)
        return bad(err, param, "'%s' holds too many tool calls", param);
    if (n == 0)
        return 1;
    m->tool_calls = calloc(n, sizeof *m->tool_calls);
    if (!m->tool_calls)
        return oom(err);
    m->num_tool_calls = (int32_t)n;
    for (size_t k = 0; k < n; k++) {
        json_t *c = json_array_get(v, k), *f;
        numla_openai_tool_call *tc = &m->tool_calls[k];
        char at[64], fp[96];
        snprintf(at, sizeof at, "messages[%zu].tool_calls[%zu]", i, k);
        if (!json_is_object(c))
            return bad(err, at, "'%s' must be an object with 'function'", at);
        if (!known_keys(c, at, call_keys, err))
            return 0;
        snprintf(fp, sizeof fp, "%s.id", at);
        if (!opt_string(c, "id", fp, 0, &tc->id, err))
            return 0;
        f = json_object_get(c, "type");
        snprintf(fp, sizeof fp, "%s.type", at);
        if (f && !(json_is_string(f) && !strcmp(json_string_value(f), "function")))
            return bad(err, fp, "'%s' must be \"function\"", fp);
        f = json_object_get(c, "function");
        snprintf(fp, sizeof fp, "%s.function", at);
        if (!json_is_object(f))
            return bad(err, fp, "'%s' must be an object with 'name' and 'arguments'", fp);
        if (!known_keys(f, fp, fn_keys, err))
            return 0;
        snprintf(fp, sizeof fp, "%s.function.name", at);
        json_t *name = json_object_get(f, "name");
        if (!json_is_string(name) || json_string_length(name) == 0)
            return bad(err, fp, "'%s' must be a non-empty string", fp);
        snprintf(fp, sizeof fp, "%s.function.arguments", at);
        if (!json_is_string(json_object_get(f, "arguments")))
            return bad(err, fp, "'%s' must be a string (the arguments as JSON text)", fp);
        size_t len;
        if (!copy_text(name, &tc->name, &len, err) ||
            !copy_text(json_object_get(f, "arguments"), &tc->arguments, &len, err))
            return 0;
    }
    return 1;
}

static int parse_message(json_t *m, size_t i, numla_openai_message *out, numla_openai_error *err)
{
    static const char *const keys[] = {"role", "content", "name", "tool_calls", "tool_call_id",
                                       "reasoning_content", NULL};
    char param[96], at[48];
    snprintf(at, sizeof at, "messages[%zu]", i);
    if (!json_is_object(m))
        return bad(err, at, "'%s' must be an object with 'role' and 'content'", at);
    if (!known_keys(m, at, keys, err))
        return 0;
    json_t *f = json_object_get(m, "role");
    const char *role = json_is_string(f) ? json_string_value(f) : "";
    snprintf(param, sizeof param, "%s.role", at);
    if (!strcmp(role, "system"))
        out->role = NUMLA_OPENAI_ROLE_SYSTEM;
    else if (!strcmp(role, "user"))
        out->role = NUMLA_OPENAI_ROLE_USER;
    else if (!strcmp(role, "assistant"))
        out->role = NUMLA_OPENAI_ROLE_ASSISTANT;
    else if (!strcmp(role, "tool"))
        out->role = NUMLA_OPENAI_ROLE_TOOL;
    else
        return bad(err, param,
                   "'%s' must be \"system\", \"user\", \"assistant\" or \"tool\"", param);
    const int assistant = out->role == NUMLA_OPENAI_ROLE_ASSISTANT;
    /* fields that belong to one role only */
    const struct {
        const char *key;
        int ok;
        const char *who;
    } only[] = {{"tool_calls", assistant, "assistant"},
                {"reasoning_content", assistant, "assistant"},
                {"tool_call_id", out->role == NUMLA_OPENAI_ROLE_TOOL, "tool"}};
    for (size_t k = 0; k < sizeof only / sizeof *only; k++)
        if (json_object_get(m, only[k].key) && !only[k].ok) {
            snprintf(param, sizeof param, "%s.%s", at, only[k].key);
            return bad(err, param, "'%s' is only allowed on a message with role \"%s\"", param,
                       only[k].who);
        }
    if ((f = json_object_get(m, "tool_calls")) && !json_is_null(f) &&
        !parse_tool_calls(f, i, out, err))
        return 0;
    f = json_object_get(m, "content");
    snprintf(param, sizeof param, "%s.content", at);
    if (json_is_null(f) && out->num_tool_calls > 0) {
        out->content = NULL; /* a tool-call turn without text */
    } else if (!json_is_string(f)) {
        return bad(err, param, "'%s' must be a string%s", param,
                   assistant ? " (null only with tool_calls)" : "");
    } else if (!copy_text(f, &out->content, &out->content_len, err)) {
        return 0;
    }
    snprintf(param, sizeof param, "%s.name", at);
    if (!opt_string(m, "name", param, 0, &out->name, err))
        return 0;
    snprintf(param, sizeof param, "%s.tool_call_id", at);
    if (!opt_string(m, "tool_call_id", param, 0, &out->tool_call_id, err))
        return 0;
    snprintf(param, sizeof param, "%s.reasoning_content", at);
    return opt_string(m, "reasoning_content", param, 1, &out->reasoning_content, err);
}

static int parse_messages(json_t *v, numla_openai_request *r, numla_openai_error *err)
{
    if (!json_is_array(v) || json_array_size(v) == 0)
        return bad(err, "messages", "'messages' must be a non-empty list of messages");
    size_t n = json_array_size(v);
    if (n > 100000)
        return bad(err, "messages", "'messages' holds too many messages");
    r->messages = calloc(n, sizeof *r->messages);
    if (!r->messages)
        return oom(err);
    r->num_messages = (int32_t)n;
    for (size_t i = 0; i < n; i++)
        if (!parse_message(json_array_get(v, i), i, &r->messages[i], err))
            return 0;
    return 1;
}

/* tools: [{type: "function", function: {name, description?, parameters?, strict?}}], kept as
 * compact JSON text for the chat template (which writes it back as the model expects). */
static int parse_tools(json_t *v, numla_openai_request *r, numla_openai_error *err)
{
    static const char *const tool_keys[] = {"type", "function", NULL};
    static const char *const fn_keys[] = {"name", "description", "parameters", "strict", NULL};
    if (json_is_null(v))
        return 1;
    if (!json_is_array(v))
        return bad(err, "tools", "'tools' must be a list of {\"type\": \"function\", "
                                 "\"function\": {...}} objects");
    size_t n = json_array_size(v);
    if (n > 1024)
        return bad(err, "tools", "'tools' holds %zu tools; at most 1024 are served", n);
    for (size_t k = 0; k < n; k++) {
        json_t *t = json_array_get(v, k), *f;
        char at[48], fp[96];
        snprintf(at, sizeof at, "tools[%zu]", k);
        if (!json_is_object(t))
            return bad(err, at, "'%s' must be an object with 'type' and 'function'", at);
        if (!known_keys(t, at, tool_keys, err))
            return 0;
        snprintf(fp, sizeof fp, "%s.type", at);
        f = json_object_get(t, "type");
        if (!(json_is_string(f) && !strcmp(json_string_value(f), "function")))
            return bad(err, fp, "'%s' must be \"function\"", fp);
        snprintf(fp, sizeof fp, "%s.function", at);
        json_t *fn = json_object_get(t, "function");
        if (!json_is_object(fn))
            return bad(err, fp, "'%s' must be an object with 'name'", fp);
        if (!known_keys(fn, fp, fn_keys, err))
            return 0;
        snprintf(fp, sizeof fp, "%s.function.name", at);
        f = json_object_get(fn, "name");
        if (!json_is_string(f) || json_string_length(f) == 0)
            return bad(err, fp, "'%s' must be a non-empty string", fp);
        snprintf(fp, sizeof fp, "%s.function.description", at);
        f = json_object_get(fn, "description");
        if (f && !json_is_string(f))
            return bad(err, fp, "'%s' must be a string", fp);
        snprintf(fp, sizeof fp, "%s.function.parameters", at);
        f = json_object_get(fn, "parameters");
        if (f && !json_is_object(f))
            return bad(err, fp, "'%s' must be a JSON Schema object", fp);
        snprintf(fp, sizeof fp, "%s.function.strict", at);
        f = json_object_get(fn, "strict");
        if (f && !json_is_boolean(f))
            return bad(err, fp, "'%s' must be true or false", fp);
    }
    if (n == 0)
        return 1; /* the templates treat an empty list as none */
    r->tools_json = json_dumps(v, JSON_COMPACT);
    if (!r->tools_json)
        return oom(err);
    r->num_tools = (int32_t)n;
    return 1;
}

/* chat_template_kwargs: {thinking?: bool, enable_thinking?: bool} (the same switch; both given
 * must agree). */
static int parse_template_kwargs(json_t *v, numla_openai_request *r, numla_openai_error *err)
{
    static const char *const keys[] = {"thinking", "enable_thinking", NULL};
    if (!v || json_is_null(v))
        return 1;
    if (!json_is_object(v))
        return bad(err, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
    if (!known_keys(v, "chat_template_kwargs", keys, err))
        return 0;
    for (int k = 0; keys[k]; k++) {
        json_t *f = json_object_get(v, keys[k]);
        char fp[64];
        snprintf(fp, sizeof fp, "chat_template_kwargs.%s", keys[k]);
        if (!f || json_is_null(f))
            continue;
        if (!json_is_boolean(f))
            return bad(err, fp, "'%s' must be true or false", fp);
        if (r->thinking >= 0 && r->thinking != json_is_true(f))
            return bad(err, fp, "'chat_template_kwargs.thinking' and "
                                "'chat_template_kwargs.enable_thinking' disagree");
        r->thinking = json_is_true(f);
    }
    return 1;
}

/* reasoning_effort: a string or null; which values the model's template knows is the serving
 * adapter's check. */
static int parse_effort(json_t *v, numla_openai_request *r, numla_openai_error *err)
{
    if (!v || json_is_null(v))
        return 1;
    if (!json_is_string(v) || json_string_length(v) == 0)
        return bad(err, "reasoning_effort", "'reasoning_effort' must be a non-empty string");
    if (!(r->reasoning_effort = strdup(json_string_value(v))))
        return oom(err);
    return 1;
}

/* A forced call's grammar: the arguments of tool `fn` follow its parameters (absent: no
 * arguments, "{}"), which must be an object schema inside the subset. */
static int forced_call_grammar(json_t *fn, size_t k, numla_openai_request *r,
                               numla_openai_error *err)
{
    json_t *params = json_object_get(fn, "parameters");
    json_t *empty = params ? NULL : json_pack("{s:s, s:{}, s:b}", "type", "object",
                                              "properties", "additionalProperties", 0);
    json_t *t = json_object_get(params ? params : empty, "type");
    char fp[96];
    snprintf(fp, sizeof fp, "tools[%zu].function.parameters", k);
    if (!params && !empty)
        return oom(err);
    if (!(json_is_string(t) && !strcmp(json_string_value(t), "object"))) {
        json_decref(empty);
        return bad(err, "tool_choice", "'tool_choice' names a function whose '%s' is not an "
                   "object schema ({\"type\": \"object\", ...})", fp);
    }
    numla_status st = numla_grammar_compile_schema(params ? params : empty, &r->grammar);
    json_decref(empty);
    if (st == NUMLA_STATUS_NO_MEMORY)
        return oom(err);
    if (st != NUMLA_STATUS_OK)
        return bad(err, "tool_choice", "'tool_choice' forces a call of a function whose '%s' is "
                   "outside the supported schema subset (docs/serving.md): %s", fp,
                   numla_error_message());
    return 1;
}

/* "required" over several tools: the output is {"name": N, "arguments": ARGS}, N one of the
 * tools and ARGS a document of its parameters (anyOf over the tools; a tool's parameters must
 * be an object schema without $ref, which would point elsewhere once embedded). */
static int forced_any_grammar(json_t *tools, numla_openai_request *r, numla_openai_error *err)
{
    json_t *alts = json_array(), *env = json_pack("{s:o}", "anyOf", alts);
    if (!alts || !env)
        return oom(err);
    for (size_t k = 0; k < json_array_size(tools); k++) {
        json_t *fn = json_object_get(json_array_get(tools, k), "function");
        json_t *params = json_object_get(fn, "parameters"), *t = json_object_get(params, "type");
        char fp[96];
        snprintf(fp, sizeof fp, "tools[%zu].function.parameters", k);
        if (params && !(json_is_string(t) && !strcmp(json_string_value(t), "object"))) {
            json_decref(env);
            return bad(err, "tool_choice", "'tool_choice' \"required\": '%s' is not an object "
                       "schema ({\"type\": \"object\", ...})", fp);
        }
        char *text = params ? json_dumps(params, JSON_COMPACT) : NULL;
        const int has_ref = text && strstr(text, "\"$ref\"");
        free(text);
        if (has_ref) {
            json_decref(env);
            return bad(err, "tool_choice", "'tool_choice' \"required\" over several tools: '%s' "
                       "uses $ref (name the function instead)", fp);
        }
        json_t *args = params ? json_incref(params)
                              : json_pack("{s:s, s:{}, s:b}", "type", "object", "properties",
                                          "additionalProperties", 0);
        json_t *alt = json_pack("{s:s, s:{s:{s:O}, s:o}, s:[s,s], s:b}", "type", "object",
                                "properties", "name", "const", json_object_get(fn, "name"),
                                "arguments", args, "required", "name", "arguments",
                                "additionalProperties", 0);
        if (!alt || json_array_append_new(alts, alt)) {
            json_decref(env);
            return oom(err);
        }
    }
    numla_status st = numla_grammar_compile_schema(env, &r->grammar);
    json_decref(env);
    if (st == NUMLA_STATUS_NO_MEMORY)
        return oom(err);
    if (st != NUMLA_STATUS_OK)
        return bad(err, "tool_choice", "'tool_choice' \"required\": a tool's parameters are "
                   "outside the supported schema subset (docs/serving.md): %s",
                   numla_error_message());
    r->tool_choice_required = 1;
    return 1;
}

/* tool_choice: "auto" (what a model with tools does anyway) or null; "none" (the tools are
 * rendered, no call is read out of the output); {"type": "function", "function": {"name"}} or
 * "required" with a single tool: the output is that function's arguments, constrained to its
 * parameters schema, and the server wraps them as the call. parallel_tool_calls: a boolean or
 * null (the model decides how many calls it writes). */
static int parse_tool_choice(json_t *o, numla_openai_request *r, numla_openai_error *err)
{
    json_t *v = json_object_get(o, "tool_choice");
    json_t *tools = json_object_get(o, "tools");
    const size_t nt = json_is_array(tools) ? json_array_size(tools) : 0;
    const char *name = NULL;
    if (!v || json_is_null(v) || (json_is_string(v) && !strcmp(json_string_value(v), "auto"))) {
    } else if (json_is_string(v) && !strcmp(json_string_value(v), "none")) {
        r->tool_choice_none = 1;
    } else if (json_is_string(v) && !strcmp(json_string_value(v), "required")) {
        if (nt == 0)
            return bad(err, "tool_choice", "'tool_choice' \"required\" needs 'tools'");
        if (nt > 1) /* {"name": N, "arguments": ...}: one of the tools, its arguments' schema */
            return forced_any_grammar(tools, r, err);
        name = json_string_value(
            json_object_get(json_object_get(json_array_get(tools, 0), "function"), "name"));
    } else if (json_is_object(v)) {
        json_t *ty = json_object_get(v, "type"), *fn = json_object_get(v, "function");
        const char *key;
        json_t *f;
        json_object_foreach(v, key, f) if (strcmp(key, "type") && strcmp(key, "function"))
            return bad(err, "tool_choice", "'tool_choice.%.40s' is not a field of tool_choice", key);
        if (!(json_is_string(ty) && !strcmp(json_string_value(ty), "function")) ||
            !json_is_object(fn) || !json_is_string(json_object_get(fn, "name")) ||
            json_object_size(fn) != 1)
            return bad(err, "tool_choice", "'tool_choice' must be \"auto\", \"none\", "
                       "\"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
        name = json_string_value(json_object_get(fn, "name"));
    } else {
        return bad(err, "tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" "
                   "or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    if (name) {
        size_t k = 0;
        json_t *fn = NULL;
        for (; k < nt && !fn; k++) {
            json_t *f = json_object_get(json_array_get(tools, k), "function");
            const char *n = json_string_value(json_object_get(f, "name"));
            if (n && !strcmp(n, name))
                fn = f;
        }
        if (!fn)
            return bad(err, "tool_choice", "'tool_choice' names the function \"%.64s\", which "
                       "'tools' does not declare", name);
        if (!(r->tool_choice_name = strdup(name)))
            return oom(err);
        if (!forced_call_grammar(fn, k - 1, r, err))
            return 0;
    }
    v = json_object_get(o, "parallel_tool_calls");
    if (v && !json_is_null(v) && !json_is_boolean(v))
        return bad(err, "parallel_tool_calls", "'parallel_tool_calls' must be true or false");
    return 1;
}

static int parse_stop(json_t *v, numla_openai_request *r, numla_openai_error *err)
{
    if (json_is_null(v))
        return 1;
    size_t n = json_is_string(v) ? 1 : json_array_size(v);
    if (!(json_is_string(v) || json_is_array(v)) || n > NUMLA_OPENAI_MAX_STOP)
        return bad(err, "stop", "'stop' must be a string or a list of at most %d strings",
                   NUMLA_OPENAI_MAX_STOP);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_is_string(v) ? v : json_array_get(v, i);
        if (!json_is_string(e) || json_string_length(e) == 0)
            return bad(err, "stop", "'stop'[%zu] must be a non-empty string", i);
        size_t len;
        if (!copy_text(e, &r->stop_strings[r->num_stop_strings], &len, err))
            return 0;
        r->num_stop_strings++;
    }
    return 1;
}

/* Fields the API defines that numla does not serve, with the value that is harmless. */
static int unsupported(const char *key, json_t *v, numla_openai_error *err)
{
    const int ok = json_is_null(v);
    if (!ok)
        numla_openai_error_set(err, 400, key, "unsupported_field",
                               "'%s' is not supported by this server (only null)", key);
    return ok;
}

static const char *const UNSUPPORTED[] = {
    "suffix", "functions", "function_call",
    "service_tier", "store", "metadata", "modalities", "audio", "prediction", "reasoning_effort",
    "web_search_options"}; /* reasoning_effort: chat takes a string (parse_effort) */

static int in_list(const char *key, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(key, list[i]))
            return 1;
    return 0;
}

/* Every field name known (or an unsupported one with a harmless value), before any value is
 * looked at, so an unknown field is reported even next to an invalid value. */
static int check_field_names(json_t *o, int is_chat, numla_openai_error *err)
{
    static const char *const common[] = {"model", "max_tokens", "temperature", "top_p", "top_k",
                                         "seed", "stop", "logprobs", "stream", "stream_options",
                                         "user", "ignore_eos", "stop_token_ids",
                                         "return_tokens_as_token_ids", "presence_penalty",
                                         "frequency_penalty", "repetition_penalty",
                                         "logit_bias", "min_p", "n", "best_of",
                                         "response_format"};
    static const char *const completions[] = {"prompt", "echo"};
    static const char *const chat[] = {"messages",     "max_completion_tokens", "top_logprobs",
                                       "tools",        "tool_choice", "parallel_tool_calls",
                                       "chat_template_kwargs", "reasoning_effort"};
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        if (in_list(key, common, sizeof common / sizeof common[0]) ||
            (!is_chat && in_list(key, completions, 2)) ||
            (is_chat && in_list(key, chat, sizeof chat / sizeof chat[0])))
            continue;
        if (is_chat && !strcmp(key, "echo")) { /* completions' field; false is harmless */
            if (json_is_null(v) || json_is_false(v))
                continue;
            numla_openai_error_set(err, 400, key, "unsupported_field",
                                   "'echo' is a completions field (chat takes only false)");
            return 0;
        }
        if (in_list(key, UNSUPPORTED, sizeof UNSUPPORTED / sizeof UNSUPPORTED[0])) {
            if (!unsupported(key, v, err))
                return 0;
            continue;
        }
        char name[64];
        snprintf(name, sizeof name, "%.60s", key);
        numla_openai_error_set(err, 400, name, "unknown_field", "unknown field '%s'", name);
        return 0;
    }
    return 1;
}

/* model, then the prompt (completions) or the messages (chat). */
static int parse_input(json_t *o, const numla_openai_limits *lim, numla_openai_request *r,
                       numla_openai_error *err)
{
    json_t *v;
    if ((v = json_object_get(o, "model")) && !json_is_null(v)) {
        if (!json_is_string(v))
            return bad(err, "model", "'model' must be a string");
        r->model = strdup(json_string_value(v));
        if (!r->model)
            return oom(err);
    }
    if (r->endpoint == NUMLA_OPENAI_CHAT) {
        if (!(v = json_object_get(o, "messages")))
            return bad(err, "messages", "missing field 'messages'");
        return parse_messages(v, r, err) &&
               (!(v = json_object_get(o, "tools")) || parse_tools(v, r, err)) &&
               parse_tool_choice(o, r, err) &&
               parse_template_kwargs(json_object_get(o, "chat_template_kwargs"), r, err) &&
               parse_effort(json_object_get(o, "reasoning_effort"), r, err);
    }
    if (!(v = json_object_get(o, "prompt")))
        return bad(err, "prompt", "missing field 'prompt'");
    return parse_prompt(v, lim, r, err);
}

/* The shared sampling fields (engine/serving/request_io.h: max_tokens -- chat: or
 * max_completion_tokens, not both --, temperature, top_k, top_p, seed, stop_token_ids,
 * ignore_eos, completions' logprobs count, presence/frequency/repetition_penalty, min_p,
 * logit_bias), then stop. Without max_tokens chat generates up to the context, which the
 * serving adapter works out after tokenization (max_tokens_given = 0). */
static int parse_sampling(json_t *o, const numla_openai_limits *lim, numla_openai_request *r,
                          numla_openai_error *err)
{
    const int is_chat = r->endpoint == NUMLA_OPENAI_CHAT;
    numla_request_field_rules rules = {.vocab_size = lim->vocab_size,
                                       .max_tokens_key = "max_tokens", .logprobs_count = !is_chat};
    json_t *mct = is_chat ? json_object_get(o, "max_completion_tokens") : NULL;
    if (mct && !json_is_null(mct)) {
        json_t *v = json_object_get(o, "max_tokens");
        if (v && !json_is_null(v))
            return bad(err, "max_completion_tokens",
                       "give 'max_tokens' or 'max_completion_tokens', not both");
        rules.max_tokens_key = "max_completion_tokens";
    }
    numla_request_field_error fe;
    if (!numla_request_parse_sampling(o, &rules, &r->params, &r->max_tokens_given, &fe))
        return bad(err, fe.param, "'%s' %s", fe.field, fe.what);
    if (!is_chat)
        r->max_tokens_given = 1; /* the API's default of 16 */
    json_t *v;
    /* response_format: the grammar every choice's sampler follows (engine/serving/grammar.h);
     * a tool_choice that forces a call has its own */
    numla_grammar *rf = NULL;
    if (!numla_request_parse_response_format(json_object_get(o, "response_format"), &r->params,
                                             &rf, &fe))
        return bad(err, fe.param, "'%s' %s", fe.field, fe.what);
    if (rf && r->grammar) {
        numla_grammar_destroy(&rf);
        return bad(err, "response_format", "'response_format' cannot be combined with a "
                   "'tool_choice' that forces a call (the call's arguments follow its schema)");
    }
    if (rf)
        r->grammar = rf;
    if ((v = json_object_get(o, "stop")) && !parse_stop(v, r, err))
        return 0;
    return 1;
}

/* logprobs: chat's boolean + top_logprobs, or completions' count. */
static int parse_logprobs(json_t *o, numla_openai_request *r, numla_openai_error *err)
{
    numla_sampling_params *p = &r->params;
    json_t *v;
    int64_t iv = 0;
    if (r->endpoint == NUMLA_OPENAI_CHAT) {
        json_t *top = json_object_get(o, "top_logprobs");
        v = json_object_get(o, "logprobs");
        if (v && !json_is_null(v) && !json_is_boolean(v))
            return bad(err, "logprobs", "'logprobs' must be true or false");
        int want = v && json_is_true(v);
        if (top && !json_is_null(top)) {
            if (!numla_request_json_int(top, &iv) || iv < 0 || iv > NUMLA_SAMPLER_MAX_LOGPROBS)
                return bad(err, "top_logprobs", "'top_logprobs' must be an integer in 0..%d",
                           NUMLA_SAMPLER_MAX_LOGPROBS);
            if (!want)
                return bad(err, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
        }
        if (want)
            p->logprobs = (int32_t)iv;
    } /* completions' count: parse_sampling */
    return 1;
}

/* stream and stream_options (include_usage only, and only when streaming). */
static int parse_stream(json_t *o, numla_openai_request *r, numla_openai_error *err)
{
    json_t *v;
    if ((v = json_object_get(o, "stream")) && !json_is_null(v)) {
        if (!json_is_boolean(v))
            return bad(err, "stream", "'stream' must be true or false");
        r->stream = json_is_true(v);
    }
    if ((v = json_object_get(o, "stream_options")) && !json_is_null(v)) {
        if (!r->stream)
            return bad(err, "stream_options", "'stream_options' is only allowed with 'stream': true");
        if (!json_is_object(v))
            return bad(err, "stream_options", "'stream_options' must be an object");
        const char *key;
        json_t *f;
        json_object_foreach(v, key, f) {
            if (strcmp(key, "include_usage")) {
                char name[96];
                snprintf(name, sizeof name, "stream_options.%.60s", key);
                numla_openai_error_set(err, 400, name, "unknown_field", "unknown field '%s'", name);
                return 0;
            }
            if (!json_is_boolean(f) && !json_is_null(f))
                return bad(err, "stream_options.include_usage",
                           "'stream_options.include_usage' must be true or false");
            r->include_usage = json_is_true(f);
        }
    }
    return 1;
}

/* n (choices per prompt, 1..128; null: 1) and best_of (null, or equal to n: numla returns
 * every choice it generates, so it cannot pick the best n of more). */
static int parse_choices(json_t *o, numla_openai_request *r, numla_openai_error *err)
{
    json_t *v = json_object_get(o, "n");
    int64_t n = 1;
    if (v && !json_is_null(v) &&
        (!numla_request_json_int(v, &n) || n < 1 || n > NUMLA_OPENAI_MAX_CHOICES))
        return bad(err, "n", "'n' must be an integer in [1, %d]", NUMLA_OPENAI_MAX_CHOICES);
    const int64_t prompts = r->endpoint == NUMLA_OPENAI_COMPLETIONS ? r->num_prompts : 1;
    if (prompts * n > NUMLA_OPENAI_MAX_CHOICES)
        return bad(err, "n", "%lld prompts x n = %lld choices; at most %d are served per request",
                   (long long)prompts, (long long)(prompts * n), NUMLA_OPENAI_MAX_CHOICES);
    int64_t best = n;
    if ((v = json_object_get(o, "best_of")) && !json_is_null(v) &&
        (!numla_request_json_int(v, &best) || best != n))
        return bad(err, "best_of", "'best_of' must equal 'n' (%lld): every choice generated is "
                   "returned", (long long)n);
    r->n = (int32_t)n;
    return 1;
}

/* vLLM's return_tokens_as_token_ids: logprobs name tokens "token_id:N" (bool | null). */
static int parse_token_ids(json_t *o, numla_openai_request *r, numla_openai_error *err)
{
    json_t *v = json_object_get(o, "return_tokens_as_token_ids");
    if (v && !json_is_boolean(v) && !json_is_null(v))
        return bad(err, "return_tokens_as_token_ids",
                   "'return_tokens_as_token_ids' must be true or false");
    r->tokens_as_ids = json_is_true(v);
    if (r->endpoint == NUMLA_OPENAI_COMPLETIONS) { /* echo (bool | null) */
        v = json_object_get(o, "echo");
        if (v && !json_is_boolean(v) && !json_is_null(v))
            return bad(err, "echo", "'echo' must be true or false");
        r->echo = json_is_true(v);
    }
    return 1;
}

/* Every field, in the order the errors are reported in. The prompt against the context is
 * checked once, after tokenization (numla_request_fit_context, from the serving adapter). */
static int parse_fields(json_t *o, const numla_openai_limits *lim, numla_openai_request *r,
                        numla_openai_error *err)
{
    return check_field_names(o, r->endpoint == NUMLA_OPENAI_CHAT, err) &&
           parse_input(o, lim, r, err) && parse_sampling(o, lim, r, err) &&
           parse_logprobs(o, r, err) && parse_stream(o, r, err) && parse_token_ids(o, r, err) &&
           parse_choices(o, r, err);
}

/* vLLM's /tokenize and /detokenize bodies (openai.h). */
static int parse_tokenize(json_t *o, const numla_openai_limits *lim, numla_openai_request *r,
                          numla_openai_error *err)
{
    static const char *const tok_keys[] = {"model", "prompt", "messages", "add_special_tokens",
                                           "add_generation_prompt", "continue_final_message",
                                           "return_token_strs", "tools", "chat_template_kwargs",
                                           NULL};
    static const char *const detok_keys[] = {"model", "tokens", NULL};
    const int tok = r->endpoint == NUMLA_OPENAI_TOKENIZE;
    if (!known_keys(o, "", tok ? tok_keys : detok_keys, err))
        return 0;
    json_t *v;
    if ((v = json_object_get(o, "model")) && !json_is_null(v)) {
        if (!json_is_string(v))
            return bad(err, "model", "'model' must be a string");
        if (!(r->model = strdup(json_string_value(v))))
            return oom(err);
    }
    if (!tok) {
        v = json_object_get(o, "tokens");
        if (!json_is_array(v))
            return bad(err, "tokens", "'tokens' must be a list of token ids");
        if (!(r->prompts = calloc(1, sizeof *r->prompts)))
            return oom(err);
        r->num_prompts = 1;
        if (json_array_size(v) == 0)
            return (r->prompts[0].tokens = malloc(sizeof(int32_t))) ? 1 : oom(err);
        return parse_ids(v, lim, "tokens", &r->prompts[0], err);
    }
    json_t *p = json_object_get(o, "prompt"), *m = json_object_get(o, "messages");
    if ((p != NULL) == (m != NULL))
        return bad(err, p ? "messages" : "prompt", "give either 'prompt' or 'messages'");
    static const char *const flags[] = {"add_special_tokens", "add_generation_prompt",
                                        "continue_final_message", "return_token_strs"};
    int val[4] = {p != NULL, 1, 0, 0};
    for (int k = 0; k < 4; k++)
        if ((v = json_object_get(o, flags[k])) && !json_is_null(v)) {
            if (!json_is_boolean(v))
                return bad(err, flags[k], "'%s' must be true or false", flags[k]);
            val[k] = json_is_true(v);
        }
    r->add_special = val[0];
    r->add_generation_prompt = val[1];
    r->token_strs = val[3];
    if (val[2]) {
        numla_openai_error_set(err, 400, "continue_final_message", "unsupported_field",
                               "'continue_final_message' is not supported by this server (only "
                               "false)");
        return 0;
    }
    if (p) {
        if (m || json_object_get(o, "tools") || json_object_get(o, "chat_template_kwargs"))
            return bad(err, json_object_get(o, "tools") ? "tools" : "chat_template_kwargs",
                       "'tools' and 'chat_template_kwargs' go with 'messages'");
        if (!json_is_string(p))
            return bad(err, "prompt", "'prompt' must be a string");
        if (!(r->prompts = calloc(1, sizeof *r->prompts)))
            return oom(err);
        r->num_prompts = 1;
        return copy_text(p, &r->prompts[0].text, &r->prompts[0].text_len, err);
    }
    return parse_messages(m, r, err) &&
           (!(v = json_object_get(o, "tools")) || parse_tools(v, r, err)) &&
           parse_template_kwargs(json_object_get(o, "chat_template_kwargs"), r, err);
}

numla_status numla_openai_parse(numla_openai_endpoint endpoint, const char *body, size_t len,
                                const numla_openai_limits *lim, numla_openai_request *out,
                                numla_openai_error *err)
{
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    out->endpoint = endpoint;
    out->thinking = -1;
    if (lim && lim->defaults)
        out->params = *lim->defaults;
    else
        numla_sampling_params_default(&out->params);
    int64_t badat = numla_utf8_invalid_offset(body, len);
    if (badat >= 0) {
        numla_openai_error_set(err, 400, NULL, "invalid_json",
                               "the body is not valid UTF-8 at byte offset %lld", (long long)badat);
        return NUMLA_STATUS_OK;
    }
    json_error_t jerr;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (!o) {
        numla_openai_error_set(err, 400, NULL, "invalid_json",
                               "the body is not valid JSON (line %d, column %d): %s", jerr.line,
                               jerr.column, jerr.text);
        return NUMLA_STATUS_OK;
    }
    if (!json_is_object(o)) {
        numla_openai_error_set(err, 400, NULL, "invalid_json", "the body must be a JSON object");
    } else if (endpoint == NUMLA_OPENAI_TOKENIZE || endpoint == NUMLA_OPENAI_DETOKENIZE) {
        parse_tokenize(o, lim, out, err);
    } else if (endpoint == NUMLA_OPENAI_RESPONSES) {
        /* the Responses API over the chat path: its body as a chat body */
        json_t *chat = NULL, *settings = NULL;
        out->endpoint = NUMLA_OPENAI_CHAT;
        out->responses = 1;
        if (numla_responses_to_chat(o, &chat, &settings, err)) {
            out->responses_settings = json_dumps(settings, JSON_COMPACT);
            if (!out->responses_settings)
                numla_openai_error_set(err, 500, NULL, "server_error", "no memory");
            else if (!parse_fields(chat, lim, out, err))
                numla_responses_error_param(err);
        }
        json_decref(chat);
        json_decref(settings);
    } else {
        parse_fields(o, lim, out, err);
    }
    json_decref(o);
    if (err->status) {
        numla_openai_request_free(out);
        if (err->status == 500)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for an OpenAI request body");
    }
    return NUMLA_STATUS_OK;
}

void numla_openai_request_free(numla_openai_request *r)
{
    free(r->responses_settings);
    r->responses_settings = NULL;
    for (int32_t i = 0; i < r->num_prompts; i++) {
        free(r->prompts[i].text);
        free(r->prompts[i].tokens);
    }
    free(r->prompts);
    for (int32_t i = 0; r->messages && i < r->num_messages; i++) {
        numla_openai_message *m = &r->messages[i];
        free(m->content);
        free(m->name);
        free(m->tool_call_id);
        free(m->reasoning_content);
        for (int32_t k = 0; k < m->num_tool_calls; k++) {
            free(m->tool_calls[k].id);
            free(m->tool_calls[k].name);
            free(m->tool_calls[k].arguments);
        }
        free(m->tool_calls);
    }
    free(r->messages);
    free(r->tools_json);
    free(r->reasoning_effort);
    numla_grammar_destroy(&r->grammar);
    free(r->tool_choice_name);
    for (int32_t i = 0; i < r->num_stop_strings; i++)
        free(r->stop_strings[i]);
    free(r->model);
    numla_openai_endpoint e = r->endpoint;
    memset(r, 0, sizeof *r);
    r->endpoint = e;
    r->thinking = -1;
}

/* ---- formatting ---- */

static numla_status dump(json_t *o, const char *prefix, const char *suffix, char **out)
{
    *out = NULL;
    if (!o)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for a response object");
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory to write a response object");
    size_t n = strlen(prefix) + strlen(s) + strlen(suffix) + 1;
    *out = malloc(n);
    if (*out)
        snprintf(*out, n, "%s%s%s", prefix, s, suffix);
    free(s);
    if (!*out)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory to write a response object");
    return NUMLA_STATUS_OK;
}

numla_status numla_openai_format_error(const numla_openai_error *err, char **out)
{
    json_t *o = json_pack("{s:{s:s, s:s, s:s?, s:s?}}", "error", "message", err->message, "type",
                          err->status >= 400 && err->status < 500 ? "invalid_request_error"
                                                                  : "server_error",
                          "param", err->param[0] ? err->param : NULL, "code",
                          err->code[0] ? err->code : NULL);
    return dump(o, "", "", out);
}

static double finite_logprob(float v)
{
    return isfinite(v) ? (double)v : -9999.0; /* JSON has no infinities */
}

/* A token as OpenAI names it: its text, where bytes that are only part of a UTF-8 character
 * read U+FFFD (as the tokenizer decodes them); "token_id:N" without a tokenizer or for an id
 * it does not know (a model's padding rows). */
static json_t *token_name(const numla_tokenizer *tok, int32_t id)
{
    if (tok) {
        char *text = NULL;
        size_t len = 0;
        if (numla_tokenizer_decode(tok, &id, 1, 0, &text, &len) == NUMLA_STATUS_OK) {
            json_t *s = json_stringn(text, len);
            free(text);
            if (s)
                return s;
        }
        numla_error_clear();
    }
    char s[32];
    snprintf(s, sizeof s, "token_id:%d", id);
    return json_string(s);
}

/* The token's bytes as OpenAI's "bytes" (exact, also when they are part of a character);
 * null where the token has no text. */
static json_t *token_bytes(const numla_tokenizer *tok, int32_t id)
{
    size_t n = 0;
    const uint8_t *b = tok ? numla_tokenizer_token_bytes(tok, id, &n) : NULL;
    if (!b)
        return json_null();
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        json_array_append_new(a, json_integer(b[i]));
    return a ? a : json_null();
}

/* Code points in a valid UTF-8 string (text_offset counts characters, as OpenAI's does). */
static int64_t utf8_chars(const char *s)
{
    int64_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xc0) != 0x80;
    return n;
}

/* completions: {"tokens", "token_logprobs", "top_logprobs", "text_offset"}; chat:
 * {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}.
 * text_offset: the characters of the tokens before each one, from the completion's start. */
static json_t *logprobs_json(numla_openai_endpoint e, const numla_openai_choice *c,
                             const numla_tokenizer *tok)
{
    if (!c->logprobs)
        return json_null();
    if (e == NUMLA_OPENAI_CHAT) {
        json_t *content = json_array();
        for (int32_t i = 0; i < c->num_logprobs; i++) {
            const numla_logprob_entry *l = &c->logprobs[i];
            json_t *top = json_array();
            for (int32_t k = 0; k < l->num_top; k++)
                json_array_append_new(top, json_pack("{s:o, s:f, s:o}", "token",
                                                     token_name(tok, l->top_tokens[k]),
                                                     "logprob", finite_logprob(l->top_logprobs[k]),
                                                     "bytes", token_bytes(tok, l->top_tokens[k])));
            json_array_append_new(content, json_pack("{s:o, s:f, s:o, s:o}", "token",
                                                     token_name(tok, l->token), "logprob",
                                                     finite_logprob(l->logprob), "bytes",
                                                     token_bytes(tok, l->token), "top_logprobs",
                                                     top));
        }
        return json_pack("{s:o}", "content", content);
    }
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *off = json_array();
    int64_t at = 0;
    for (int32_t i = 0; i < c->num_logprobs; i++) {
        const numla_logprob_entry *l = &c->logprobs[i];
        json_t *name = token_name(tok, l->token);
        json_array_append_new(off, json_integer(at));
        at += name ? utf8_chars(json_string_value(name)) : 0;
        json_array_append_new(tokens, name);
        if (l->num_top < 0) { /* an echoed prompt's first token: nothing before it */
            json_array_append_new(lps, json_null());
            json_array_append_new(tops, json_null());
            continue;
        }
        json_array_append_new(lps, json_real(finite_logprob(l->logprob)));
        json_t *top = json_object();
        for (int32_t k = 0; k < l->num_top; k++) { /* two tokens of one text: the likelier */
            json_t *key = token_name(tok, l->top_tokens[k]);
            if (key && !json_object_get(top, json_string_value(key)))
                json_object_set_new(top, json_string_value(key),
                                    json_real(finite_logprob(l->top_logprobs[k])));
            json_decref(key);
        }
        json_array_append_new(tops, top);
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps,
                     "top_logprobs", tops, "text_offset", off);
}

static json_t *usage_json(const numla_openai_usage *u)
{
    json_t *o = json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)u->prompt_tokens,
                          "completion_tokens", (json_int_t)u->completion_tokens, "total_tokens",
                          (json_int_t)(u->prompt_tokens + u->completion_tokens),
                          "prompt_tokens_details", "cached_tokens", (json_int_t)u->cached_tokens);
    if (o && u->speculative)
        json_object_set_new(o, "speculative",
                            numla_result_speculative_json((int32_t)u->spec_steps,
                                                          (int32_t)u->spec_drafted,
                                                          (int32_t)u->spec_accepted));
    return o;
}

static json_t *reply_json(const numla_openai_reply *r, const char *object)
{
    return json_pack("{s:s, s:s, s:I, s:s}", "id", r->id, "object", object, "created",
                     (json_int_t)r->created, "model", r->model ? r->model : "");
}

static json_t *finish_json(const char *finish_reason)
{
    return finish_reason ? json_string(finish_reason) : json_null();
}

/* One call as OpenAI writes it; first: a chunk's first (id, type, name, arguments ""), else
 * only its arguments; whole: the non-streamed call. */
static json_t *tool_call_json(const numla_tool_call_out *t, int32_t index, int first, int whole)
{
    if (whole)
        return json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", t->id, "type", "function", "function",
                         "name", t->name, "arguments", t->arguments);
    if (first)
        return json_pack("{s:i, s:s, s:s, s:{s:s, s:s}}", "index", (int)index, "id", t->id,
                         "type", "function", "function", "name", t->name, "arguments", "");
    return json_pack("{s:i, s:{s:s}}", "index", (int)index, "function", "arguments",
                     t->arguments);
}

/* message.tool_calls of a non-streamed chat choice; content null when empty. 0: no memory. */
static int tool_calls_json(json_t *ch, const numla_openai_choice *c)
{
    json_t *m = json_object_get(ch, "message"), *arr = json_array();
    for (int32_t k = 0; arr && k < c->num_tool_calls; k++)
        if (json_array_append_new(arr, tool_call_json(&c->tool_calls[k], k, 0, 1))) {
            json_decref(arr);
            arr = NULL;
        }
    if (!arr || json_object_set_new(m, "tool_calls", arr))
        return 0;
    if (!c->text_len)
        json_object_set_new(m, "content", json_null());
    return 1;
}

numla_status numla_openai_format_response(const numla_openai_reply *r,
                                          const numla_openai_choice *choices, int32_t num_choices,
                                          const numla_openai_usage *usage, char **out)
{
    int chat = r->endpoint == NUMLA_OPENAI_CHAT;
    json_t *o = reply_json(r, chat ? "chat.completion" : "text_completion");
    json_t *arr = json_array();
    for (int32_t i = 0; o && arr && i < num_choices; i++) {
        const numla_openai_choice *c = &choices[i];
        json_t *text = json_stringn(c->text ? c->text : "", c->text ? c->text_len : 0);
        json_t *ch = chat ? json_pack("{s:i, s:{s:s, s:o}, s:o, s:o}", "index", (int)i, "message",
                                      "role", "assistant", "content", text, "logprobs",
                                      logprobs_json(r->endpoint, c, r->tokenizer), "finish_reason",
                                      finish_json(c->finish_reason))
                          : json_pack("{s:i, s:o, s:o, s:o}", "index", (int)i, "text", text,
                                      "logprobs", logprobs_json(r->endpoint, c, r->tokenizer), "finish_reason",
                                      finish_json(c->finish_reason));
        if (ch && chat && c->has_reasoning)
            json_object_set_new(json_object_get(ch, "message"), "reasoning_content",
                                c->reasoning ? json_stringn(c->reasoning, c->reasoning_len)
                                             : json_null());
        if (ch && chat && c->num_tool_calls > 0 && !tool_calls_json(ch, c)) {
            json_decref(ch);
            ch = NULL;
        }
        if (!ch || json_array_append_new(arr, ch)) {
            json_decref(arr);
            arr = NULL;
        }
    }
    if (o && arr && !json_object_set_new(o, "choices", arr) &&
        !json_object_set_new(o, "usage", usage_json(usage)))
        return dump(o, "", "", out);
    if (!o)
        json_decref(arr);
    json_decref(o);
    return dump(NULL, "", "", out);
}

numla_status numla_openai_format_chunk(const numla_openai_reply *r, int32_t index,
                                       const numla_openai_choice *c, int role_delta, char **out)
{
    int chat = r->endpoint == NUMLA_OPENAI_CHAT;
    json_t *o = reply_json(r, chat ? "chat.completion.chunk" : "text_completion");
    json_t *ch;
    if (chat) {
        json_t *delta = json_object();
        const size_t rl = c->has_reasoning && c->reasoning ? c->reasoning_len : 0;
        if (role_delta)
            json_object_set_new(delta, "role", json_string("assistant"));
        if (!role_delta && rl > 0)
            json_object_set_new(delta, "reasoning_content", json_stringn(c->reasoning, rl));
        if (!role_delta && (c->text_len > 0 || (!c->finish_reason && rl == 0 && !c->tool_delta)))
            json_object_set_new(delta, "content", json_stringn(c->text ? c->text : "", c->text_len));
        if (!role_delta && c->tool_delta)
            json_object_set_new(delta, "tool_calls",
                                json_pack("[o]", tool_call_json(c->tool_delta, c->tool_index,
                                                                c->tool_first, 0)));
        ch = json_pack("{s:i, s:o, s:o, s:o}", "index", (int)index, "delta", delta, "logprobs",
                       logprobs_json(r->endpoint, c, r->tokenizer), "finish_reason",
                       finish_json(c->finish_reason));
    } else {
        ch = json_pack("{s:i, s:o, s:o, s:o}", "index", (int)index, "text",
                       json_stringn(c->text ? c->text : "", c->text_len), "logprobs",
                       logprobs_json(r->endpoint, c, r->tokenizer), "finish_reason",
                       finish_json(c->finish_reason));
    }
    if (o && ch && !json_object_set_new(o, "choices", json_pack("[o]", ch)))
        return dump(o, "data: ", "\n\n", out);
    if (!o)
        json_decref(ch);
    json_decref(o);
    return dump(NULL, "", "", out);
}

numla_status numla_openai_format_usage_chunk(const numla_openai_reply *r,
                                             const numla_openai_usage *usage, char **out)
{
    json_t *o = reply_json(r, r->endpoint == NUMLA_OPENAI_CHAT ? "chat.completion.chunk"
                                                               : "text_completion");
    if (o && (json_object_set_new(o, "choices", json_array()) ||
              json_object_set_new(o, "usage", usage_json(usage)))) {
        json_decref(o);
        o = NULL;
    }
    return dump(o, "data: ", "\n\n", out);
}
