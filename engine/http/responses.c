/* engine/http/responses.c — OpenAI's Responses API over the chat path (see responses.h). */
#include "engine/http/responses.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/serving/request_io.h"

static int fail(numla_openai_error *err, const char *param, const char *code, const char *fmt,
                ...) __attribute__((format(printf, 4, 5)));
static int fail(numla_openai_error *err, const char *param, const char *code, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    numla_openai_error_set(err, 400, param, code, "%s", msg);
    return 0;
}

static int oom(numla_openai_error *err)
{
    numla_openai_error_set(err, 500, NULL, "server_error", "no memory for the request");
    return 0;
}

/* A message item's content: a string, or parts of text joined (other part kinds: 400). */
static json_t *content_text(json_t *c, size_t i, numla_openai_error *err)
{
    char at[64];
    if (json_is_string(c))
        return json_incref(c);
    snprintf(at, sizeof at, "input[%zu].content", i);
    if (!json_is_array(c))
        return fail(err, at, "invalid_value", "'%s' must be a string or a list of text parts", at),
               NULL;
    numla_strbuf b = {0};
    for (size_t k = 0; k < json_array_size(c); k++) {
        json_t *p = json_array_get(c, k), *t = json_object_get(p, "type");
        const char *ty = json_string_value(t);
        char pk[96];
        snprintf(pk, sizeof pk, "%s[%zu].type", at, k);
        if (!ty || (strcmp(ty, "input_text") && strcmp(ty, "output_text") && strcmp(ty, "text"))) {
            numla_strbuf_free(&b);
            return fail(err, pk, "unsupported_field", "'%s' %s%s%s is not supported by this "
                        "server (text parts only: input_text, output_text)", pk,
                        ty ? "\"" : "", ty ? ty : "(missing)", ty ? "\"" : ""), NULL;
        }
        json_t *text = json_object_get(p, "text");
        if (!json_is_string(text)) {
            numla_strbuf_free(&b);
            snprintf(pk, sizeof pk, "%s[%zu].text", at, k);
            return fail(err, pk, "invalid_value", "'%s' must be a string", pk), NULL;
        }
        if (numla_strbuf_append(&b, json_string_value(text), json_string_length(text)) !=
            NUMLA_STATUS_OK) {
            numla_strbuf_free(&b);
            return oom(err), NULL;
        }
    }
    json_t *s = json_stringn(numla_strbuf_str(&b), b.len);
    numla_strbuf_free(&b);
    return s ? s : (oom(err), NULL);
}

/* Fields an item may carry that change nothing here (ids and statuses of earlier outputs). */
static int item_keys_ok(json_t *it, size_t i, const char *const *keys, numla_openai_error *err)
{
    const char *key;
    json_t *v;
    json_object_foreach(it, key, v) {
        int ok = 0;
        for (const char *const *k = keys; *k && !ok; k++)
            ok = !strcmp(*k, key);
        if (!ok) {
            char p[96];
            snprintf(p, sizeof p, "input[%zu].%.40s", i, key);
            return fail(err, p, "unknown_field", "unknown field '%s'", p);
        }
    }
    return 1;
}

/* input (string | items) and instructions as chat messages. */
static int input_messages(json_t *body, json_t *msgs, numla_openai_error *err)
{
    json_t *ins = json_object_get(body, "instructions");
    if (ins && !json_is_null(ins)) {
        if (!json_is_string(ins))
            return fail(err, "instructions", "invalid_value", "'instructions' must be a string");
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "system", "content", ins));
    }
    json_t *in = json_object_get(body, "input");
    if (!in)
        return fail(err, "input", "invalid_value", "missing field 'input'");
    if (json_is_string(in)) {
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "user", "content", in));
        return 1;
    }
    if (!json_is_array(in) || json_array_size(in) == 0)
        return fail(err, "input", "invalid_value", "'input' must be a string or a non-empty list "
                    "of items");
    static const char *const msg_keys[] = {"type", "role", "content", "id", "status", NULL};
    static const char *const call_keys[] = {"type", "call_id", "name", "arguments", "id",
                                            "status", NULL};
    static const char *const out_keys[] = {"type", "call_id", "output", "id", "status", NULL};
    json_t *calls = NULL; /* the assistant message the last function_call items joined */
    for (size_t i = 0; i < json_array_size(in); i++) {
        json_t *it = json_array_get(in, i);
        char at[64];
        snprintf(at, sizeof at, "input[%zu]", i);
        if (!json_is_object(it))
            return fail(err, at, "invalid_value", "'%s' must be an object", at);
        const char *ty = json_string_value(json_object_get(it, "type"));
        if (!ty || !strcmp(ty, "message")) {
            if (!item_keys_ok(it, i, msg_keys, err))
                return 0;
            const char *role = json_string_value(json_object_get(it, "role"));
            char rp[80];
            snprintf(rp, sizeof rp, "%s.role", at);
            if (!role || (strcmp(role, "user") && strcmp(role, "system") &&
                          strcmp(role, "developer") && strcmp(role, "assistant")))
                return fail(err, rp, "invalid_value", "'%s' must be \"user\", \"system\", "
                            "\"developer\" or \"assistant\"", rp);
            json_t *text = content_text(json_object_get(it, "content"), i, err);
            if (!text)
                return 0;
            json_array_append_new(msgs, json_pack("{s:s, s:o}", "role",
                                                  !strcmp(role, "developer") ? "system" : role,
                                                  "content", text));
            calls = NULL;
        } else if (!strcmp(ty, "function_call")) {
            if (!item_keys_ok(it, i, call_keys, err))
                return 0;
            json_t *id = json_object_get(it, "call_id"), *name = json_object_get(it, "name"),
                   *args = json_object_get(it, "arguments");
            if (!json_is_string(id) || !json_is_string(name) || !json_is_string(args))
                return fail(err, at, "invalid_value", "'%s' (a function_call) needs string "
                            "'call_id', 'name' and 'arguments'", at);
            if (!calls) {
                json_t *m = json_pack("{s:s, s:n, s:[]}", "role", "assistant", "content",
                                      "tool_calls");
                json_array_append_new(msgs, m);
                calls = json_object_get(m, "tool_calls");
            }
            json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", id, "type",
                                                   "function", "function", "name", name,
                                                   "arguments", args));
        } else if (!strcmp(ty, "function_call_output")) {
            if (!item_keys_ok(it, i, out_keys, err))
                return 0;
            json_t *id = json_object_get(it, "call_id"), *out = json_object_get(it, "output");
            if (!json_is_string(id) || !json_is_string(out))
                return fail(err, at, "invalid_value", "'%s' (a function_call_output) needs string "
                            "'call_id' and 'output'", at);
            json_array_append_new(msgs, json_pack("{s:s, s:O, s:O}", "role", "tool",
                                                  "tool_call_id", id, "content", out));
            calls = NULL;
        } else if (!strcmp(ty, "reasoning")) {
            continue; /* earlier reasoning: the templates drop it from history */
        } else {
            char tp[80];
            snprintf(tp, sizeof tp, "%s.type", at);
            return fail(err, tp, "unsupported_field", "'%s' \"%.40s\" is not supported by this "
                        "server (message, function_call, function_call_output)", tp, ty);
        }
    }
    return 1;
}

/* tools in chat's shape. */
static int chat_tools(json_t *tools, json_t *chat, numla_openai_error *err)
{
    if (!tools || json_is_null(tools))
        return 1;
    if (!json_is_array(tools))
        return fail(err, "tools", "invalid_value", "'tools' must be a list of function tools");
    json_t *out = json_array();
    json_object_set_new(chat, "tools", out);
    static const char *const keys[] = {"type", "name", "description", "parameters", "strict"};
    for (size_t k = 0; k < json_array_size(tools); k++) {
        json_t *t = json_array_get(tools, k);
        char at[48];
        snprintf(at, sizeof at, "tools[%zu]", k);
        const char *ty = json_string_value(json_object_get(t, "type"));
        if (!json_is_object(t) || !ty)
            return fail(err, at, "invalid_value", "'%s' must be an object with a 'type'", at);
        if (strcmp(ty, "function"))
            return fail(err, at, "unsupported_field", "'%s' of type \"%.40s\" is not supported by "
                        "this server (function tools only)", at, ty);
        json_t *fn = json_object();
        const char *key;
        json_t *v;
        json_object_foreach(t, key, v) {
            int ok = 0;
            for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
                ok |= !strcmp(keys[i], key);
            if (!ok) {
                json_decref(fn);
                char p[96];
                snprintf(p, sizeof p, "%s.%.40s", at, key);
                return fail(err, p, "unknown_field", "unknown field '%s'", p);
            }
            if (strcmp(key, "type") && !json_is_null(v))
                json_object_set(fn, key, v);
        }
        json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", fn));
    }
    return 1;
}

/* tool_choice in chat's shape. */
static int chat_tool_choice(json_t *tc, json_t *chat, numla_openai_error *err)
{
    if (!tc || json_is_null(tc) || json_is_string(tc)) {
        if (tc)
            json_object_set(chat, "tool_choice", tc);
        return 1;
    }
    const char *ty = json_string_value(json_object_get(tc, "type"));
    json_t *name = json_object_get(tc, "name");
    if (!json_is_object(tc) || !ty || strcmp(ty, "function") || !json_is_string(name) ||
        json_object_size(tc) != 2)
        return fail(err, "tool_choice", "invalid_value", "'tool_choice' must be \"auto\", "
                    "\"none\", \"required\" or {\"type\": \"function\", \"name\": NAME}");
    json_object_set_new(chat, "tool_choice", json_pack("{s:s, s:{s:O}}", "type", "function",
                                                       "function", "name", name));
    return 1;
}

/* reasoning ({effort?, summary?} or null): effort, a string or null, as chat's reasoning_effort
 * (which values the model's template knows is the serving adapter's check, as for chat); summary
 * is taken and ignored (no summaries are written). */
static int chat_reasoning(json_t *r, json_t *chat, numla_openai_error *err)
{
    if (!r || json_is_null(r))
        return 1;
    if (!json_is_object(r))
        return fail(err, "reasoning", "invalid_value", "'reasoning' must be an object or null");
    const char *key;
    json_t *v;
    json_object_foreach(r, key, v) {
        if (strcmp(key, "effort") && strcmp(key, "summary")) {
            char p[64];
            snprintf(p, sizeof p, "reasoning.%.40s", key);
            return fail(err, p, "unknown_field", "unknown field '%s'", p);
        }
    }
    json_t *e = json_object_get(r, "effort");
    if (!e || json_is_null(e))
        return 1;
    if (!json_is_string(e))
        return fail(err, "reasoning.effort", "invalid_value", "'reasoning.effort' must be a "
                    "string or null");
    json_object_set(chat, "reasoning_effort", e);
    return 1;
}

/* text.format as response_format. */
static int chat_format(json_t *text, json_t *chat, numla_openai_error *err)
{
    if (!text || json_is_null(text))
        return 1;
    const char *key;
    json_t *v;
    if (!json_is_object(text))
        return fail(err, "text", "invalid_value", "'text' must be an object");
    json_object_foreach(text, key, v) {
        if (!strcmp(key, "format") || (!strcmp(key, "verbosity") &&
                                       (json_is_null(v) || !strcmp(json_string_value(v) ?
                                                                   json_string_value(v) : "",
                                                                   "medium"))))
            continue;
        char p[64];
        snprintf(p, sizeof p, "text.%.40s", key);
        return fail(err, p, "unsupported_field", "'%s' is not supported by this server", p);
    }
    json_t *f = json_object_get(text, "format");
    if (!f || json_is_null(f))
        return 1;
    const char *ty = json_string_value(json_object_get(f, "type"));
    if (!json_is_object(f) || !ty)
        return fail(err, "text.format", "invalid_value", "'text.format' must be an object with a "
                    "'type'");
    if (!strcmp(ty, "json_schema")) {
        json_t *js = json_object();
        json_object_foreach(f, key, v) {
            if (strcmp(key, "type"))
                json_object_set(js, key, v);
        }
        json_object_set_new(chat, "response_format", json_pack("{s:s, s:o}", "type",
                                                                "json_schema", "json_schema", js));
    } else {
        json_object_set(chat, "response_format", f);
    }
    return 1;
}

int numla_responses_to_chat(json_t *body, json_t **chat, json_t **settings,
                            numla_openai_error *err)
{
    *chat = NULL;
    *settings = NULL;
    static const char *const taken[] = {
        "model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "stream",
        "tools", "tool_choice", "parallel_tool_calls", "text", "user", "metadata", "store",
        "reasoning"};
    /* accepted only with these values (null always) */
    static const struct {
        const char *key, *json;
    } fixed[] = {{"truncation", "\"disabled\""}, {"include", "[]"},
                 {"background", "false"},         {"previous_response_id", ""},
                 {"service_tier", "\"auto\""},    {"prompt", ""},
                 {"max_tool_calls", ""},          {"stream_options", ""},
                 {"top_logprobs", "0"}};
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v) {
        int ok = 0;
        for (size_t i = 0; i < sizeof taken / sizeof *taken && !ok; i++)
            ok = !strcmp(taken[i], key);
        for (size_t i = 0; i < sizeof fixed / sizeof *fixed && !ok; i++) {
            if (strcmp(fixed[i].key, key))
                continue;
            json_t *want = fixed[i].json[0] ? json_loads(fixed[i].json, JSON_DECODE_ANY, NULL)
                                            : NULL;
            const int same = json_is_null(v) || (want && json_equal(want, v));
            json_decref(want);
            if (!same) {
                char p[64];
                snprintf(p, sizeof p, "%.60s", key);
                return fail(err, p, "unsupported_field", "'%s' is not supported by this server%s",
                            p, !strcmp(key, "previous_response_id")
                                   ? " (responses are not stored: send the conversation as input)"
                                   : fixed[i].json[0] ? " (only its default)" : " (only null)");
            }
            ok = 1;
        }
        if (!ok) {
            char p[64];
            snprintf(p, sizeof p, "%.60s", key);
            return fail(err, p, "unknown_field", "unknown field '%s'", p);
        }
    }
    json_t *m = json_object_get(body, "metadata"), *st = json_object_get(body, "store");
    if (m && !json_is_null(m) && !json_is_object(m))
        return fail(err, "metadata", "invalid_value", "'metadata' must be an object");
    if (st && !json_is_null(st) && !json_is_boolean(st))
        return fail(err, "store", "invalid_value", "'store' must be true or false");
    json_t *c = json_object(), *msgs = json_array();
    if (!c || !msgs || json_object_set_new(c, "messages", msgs)) {
        json_decref(c);
        return oom(err);
    }
    static const struct {
        const char *from, *to;
    } same[] = {{"model", "model"},
                {"max_output_tokens", "max_tokens"},
                {"temperature", "temperature"},
                {"top_p", "top_p"},
                {"stream", "stream"},
                {"parallel_tool_calls", "parallel_tool_calls"},
                {"user", "user"}};
    for (size_t i = 0; i < sizeof same / sizeof *same; i++)
        if ((v = json_object_get(body, same[i].from)))
            json_object_set(c, same[i].to, v);
    if (!input_messages(body, msgs, err) || !chat_tools(json_object_get(body, "tools"), c, err) ||
        !chat_tool_choice(json_object_get(body, "tool_choice"), c, err) ||
        !chat_format(json_object_get(body, "text"), c, err) ||
        !chat_reasoning(json_object_get(body, "reasoning"), c, err)) {
        json_decref(c);
        return 0;
    }
    /* what the response object says of the request */
#define OR(k, dflt) (json_object_get(body, k) && !json_is_null(json_object_get(body, k)) \
                         ? json_incref(json_object_get(body, k)) : (dflt))
    json_t *s = json_object();
    json_object_set_new(s, "instructions", OR("instructions", json_null()));
    json_object_set_new(s, "max_output_tokens", OR("max_output_tokens", json_null()));
    json_object_set_new(s, "temperature", OR("temperature", json_real(1.0)));
    json_object_set_new(s, "top_p", OR("top_p", json_real(1.0)));
    json_object_set_new(s, "tools", OR("tools", json_array()));
    json_object_set_new(s, "tool_choice", OR("tool_choice", json_string("auto")));
    json_object_set_new(s, "parallel_tool_calls", OR("parallel_tool_calls", json_true()));
    json_object_set_new(s, "text", OR("text", json_pack("{s:{s:s}}", "format", "type", "text")));
    json_object_set_new(s, "metadata", OR("metadata", json_object()));
    json_object_set_new(s, "user", OR("user", json_null()));
    json_object_set_new(s, "store", json_false());
    json_object_set_new(s, "truncation", json_string("disabled"));
    json_t *effort = json_object_get(c, "reasoning_effort");
    json_object_set_new(s, "reasoning", json_pack("{s:O?, s:n}", "effort", effort, "summary"));
    json_object_set_new(s, "previous_response_id", json_null());
    json_object_set_new(s, "error", json_null());
#undef OR
    *chat = c;
    *settings = s;
    return 1;
}

void numla_responses_error_param(numla_openai_error *err)
{
    /* the message quotes chat's field: 'max_tokens' ... */
    static const char *const quoted[][2] = {{"'max_tokens'", "'max_output_tokens'"},
                                            {"'response_format", "'text.format"},
                                            {"'messages", "'input"},
                                            {"'reasoning_effort'", "'reasoning.effort'"}};
    for (size_t i = 0; i < sizeof quoted / sizeof *quoted; i++) {
        char *at = strstr(err->message, quoted[i][0]);
        if (!at)
            continue;
        char m[sizeof err->message];
        snprintf(m, sizeof m, "%.*s%s%s", (int)(at - err->message), err->message, quoted[i][1],
                 at + strlen(quoted[i][0]));
        snprintf(err->message, sizeof err->message, "%s", m);
    }
    static const struct {
        const char *from, *to;
    } map[] = {{"messages", "input"},
               {"max_tokens", "max_output_tokens"},
               {"response_format", "text.format"},
               {"reasoning_effort", "reasoning.effort"}};
    for (size_t i = 0; i < sizeof map / sizeof *map; i++) {
        const size_t n = strlen(map[i].from);
        if (!strncmp(err->param, map[i].from, n) &&
            (!err->param[n] || err->param[n] == '.' || err->param[n] == '[')) {
            char p[sizeof err->param];
            snprintf(p, sizeof p, "%s", map[i].to); /* the item's index is chat's, not input's */
            snprintf(err->param, sizeof err->param, "%s", p);
            break;
        }
    }
}

/* ---- the response object and its stream ---- */

/* The item ids of a reply: "msg_" / "rs_" / "fc_" + the reply id's part after its "resp_". */
static void item_id(const numla_openai_reply *r, const char *prefix, int32_t k, char *out,
                    size_t n)
{
    const char *u = strchr(r->id, '_');
    if (k < 0)
        snprintf(out, n, "%s_%s", prefix, u ? u + 1 : r->id);
    else
        snprintf(out, n, "%s_%s_%d", prefix, u ? u + 1 : r->id, (int)k);
}

static json_t *message_item(const numla_openai_reply *r, const char *text, size_t len,
                            const char *status)
{
    char id[96];
    item_id(r, "msg", -1, id, sizeof id);
    json_t *content = json_array();
    if (text)
        json_array_append_new(content, json_pack("{s:s, s:s%, s:[]}", "type", "output_text",
                                                 "text", text, len, "annotations"));
    return json_pack("{s:s, s:s, s:s, s:s, s:o}", "id", id, "type", "message", "status", status,
                     "role", "assistant", "content", content);
}

/* The reasoning item: text NULL while in progress (no content yet). */
static json_t *reasoning_item(const numla_openai_reply *r, const char *text, size_t len, const char *status)
{
    char id[96];
    item_id(r, "rs", -1, id, sizeof id);
    json_t *content = json_array();
    if (text)
        json_array_append_new(content, json_pack("{s:s, s:s%}", "type", "reasoning_text", "text", text, len));
    json_t *o = json_pack("{s:s, s:s, s:[], s:o}", "id", id, "type", "reasoning", "summary", "content", content);
    if (o && status)
        json_object_set_new(o, "status", json_string(status));
    return o;
}

static json_t *call_item(const numla_openai_reply *r, const numla_tool_call_out *t, int32_t k,
                         const char *status)
{
    char id[96];
    item_id(r, "fc", k, id, sizeof id);
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "id", id, "type", "function_call",
                     "status", status, "call_id", t->id, "name", t->name, "arguments",
                     t->arguments);
}

/* usage; with speculative decoding on, its figures as chat's usage.speculative (openai.c). */
static json_t *usage_json(const numla_openai_usage *u)
{
    json_t *o = json_pack("{s:I, s:{s:I}, s:I, s:{s:i}, s:I}", "input_tokens",
                          (json_int_t)u->prompt_tokens, "input_tokens_details", "cached_tokens",
                          (json_int_t)u->cached_tokens, "output_tokens",
                          (json_int_t)u->completion_tokens, "output_tokens_details",
                          "reasoning_tokens", 0, "total_tokens",
                          (json_int_t)(u->prompt_tokens + u->completion_tokens));
    if (o && u->speculative)
        json_object_set_new(o, "speculative",
                            numla_result_speculative_json((int32_t)u->spec_steps,
                                                          (int32_t)u->spec_drafted,
                                                          (int32_t)u->spec_accepted));
    return o;
}

/* The whole object (a new reference; NULL: no memory). */
static json_t *response_json(const numla_openai_reply *r, const char *settings,
                             const numla_openai_choice *c, const numla_openai_usage *u)
{
    const int length = c && c->finish_reason && !strcmp(c->finish_reason, "length");
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:s, s:o}", "id", r->id, "object", "response",
                          "created_at", (json_int_t)r->created, "status",
                          !c ? "in_progress" : length ? "incomplete" : "completed", "model",
                          r->model ? r->model : "", "incomplete_details",
                          length ? json_pack("{s:s}", "reason", "max_output_tokens")
                                 : json_null());
    if (!o)
        return NULL;
    json_t *out = json_array();
    json_object_set_new(o, "output", out);
    if (c && c->has_reasoning && c->reasoning)
        json_array_append_new(out, reasoning_item(r, c->reasoning, c->reasoning_len, NULL));
    if (c && (c->text_len > 0 || c->num_tool_calls == 0))
        json_array_append_new(out, message_item(r, c->text ? c->text : "", c->text_len,
                                                length ? "incomplete" : "completed"));
    for (int32_t k = 0; c && k < c->num_tool_calls; k++)
        json_array_append_new(out, call_item(r, &c->tool_calls[k], k, "completed"));
    json_object_set_new(o, "usage", u && c ? usage_json(u) : json_null());
    json_t *s = settings ? json_loads(settings, 0, NULL) : NULL;
    if (s)
        json_object_update_missing(o, s);
    json_decref(s);
    return o;
}

static numla_status dump(json_t *o, char **out)
{
    *out = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!*out)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for a Responses object");
    return NUMLA_STATUS_OK;
}

numla_status numla_responses_format(const numla_openai_reply *r, const char *settings,
                                    const numla_openai_choice *c, const numla_openai_usage *u,
                                    char **out)
{
    return dump(response_json(r, settings, c, u), out);
}

/* "event: TYPE\ndata: {type, sequence_number, ...fields}\n\n" onto out; takes fields. */
static numla_status event(numla_responses_stream *st, const char *type, json_t *fields,
                          numla_strbuf *out)
{
    if (!fields || json_object_set_new(fields, "type", json_string(type)) ||
        json_object_set_new(fields, "sequence_number", json_integer(st->seq++))) {
        json_decref(fields);
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for a Responses event");
    }
    char *s = json_dumps(fields, JSON_COMPACT);
    json_decref(fields);
    if (!s)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for a Responses event");
    numla_status ns = NUMLA_STATUS_OK;
    if (numla_strbuf_append(out, "event: ", 7) || numla_strbuf_append(out, type, strlen(type)) ||
        numla_strbuf_append(out, "\ndata: ", 7) || numla_strbuf_append(out, s, strlen(s)) ||
        numla_strbuf_append(out, "\n\n", 2))
        ns = NUMLA_STATUS_NO_MEMORY;
    free(s);
    if (ns != NUMLA_STATUS_OK)
        NUMLA_FAIL(ns, "no memory for a Responses event");
    return NUMLA_STATUS_OK;
}

numla_status numla_responses_stream_start(numla_responses_stream *st,
                                          const numla_openai_reply *r, const char *settings,
                                          numla_strbuf *out)
{
    *st = (numla_responses_stream){0};
    NUMLA_CHECK(event(st, "response.created",
                      json_pack("{s:o}", "response", response_json(r, settings, NULL, NULL)), out));
    return event(st, "response.in_progress",
                 json_pack("{s:o}", "response", response_json(r, settings, NULL, NULL)), out);
}

/* The reasoning item's done events with its whole text, once, if it was opened. */
static numla_status close_reasoning(numla_responses_stream *st, const numla_openai_reply *r, const char *all,
                                   size_t all_len, numla_strbuf *out)
{
    if (!st->reasoning_open || st->reasoning_closed)
        return NUMLA_STATUS_OK;
    st->reasoning_closed = 1;
    char id[96];
    item_id(r, "rs", -1, id, sizeof id);
    NUMLA_CHECK(event(st, "response.reasoning_text.done",
                      json_pack("{s:s, s:i, s:i, s:s%}", "item_id", id, "output_index", (int)st->reasoning_index,
                                "content_index", 0, "text", all ? all : "", all ? all_len : 0),
                      out));
    return event(st, "response.output_item.done",
                 json_pack("{s:i, s:o}", "output_index", (int)st->reasoning_index, "item",
                           reasoning_item(r, all ? all : "", all ? all_len : 0, "completed")),
                 out);
}

/* The message's output_item.added and content_part.added, once (the reasoning item closed
 * first, with its whole text all). */
static numla_status open_message(numla_responses_stream *st, const numla_openai_reply *r, const char *all,
                                 size_t all_len, numla_strbuf *out)
{
    if (st->message_open)
        return NUMLA_STATUS_OK;
    NUMLA_CHECK(close_reasoning(st, r, all, all_len, out));
    st->message_open = 1;
    st->message_index = st->output_index++;
    char id[96];
    item_id(r, "msg", -1, id, sizeof id);
    NUMLA_CHECK(event(st, "response.output_item.added",
                      json_pack("{s:i, s:o}", "output_index", (int)st->message_index, "item",
                                message_item(r, NULL, 0, "in_progress")), out));
    return event(st, "response.content_part.added",
                 json_pack("{s:s, s:i, s:i, s:{s:s, s:s, s:[]}}", "item_id", id, "output_index",
                           (int)st->message_index, "content_index", 0, "part", "type",
                           "output_text", "text", "", "annotations"), out);
}

numla_status numla_responses_stream_reasoning(numla_responses_stream *st, const numla_openai_reply *r,
                                              const char *text, size_t len, numla_strbuf *out)
{
    if (len == 0 || st->reasoning_closed)
        return NUMLA_STATUS_OK;
    char id[96];
    item_id(r, "rs", -1, id, sizeof id);
    if (!st->reasoning_open) {
        st->reasoning_open = 1;
        st->reasoning_index = st->output_index++;
        NUMLA_CHECK(event(st, "response.output_item.added",
                          json_pack("{s:i, s:o}", "output_index", (int)st->reasoning_index, "item",
                                    reasoning_item(r, NULL, 0, "in_progress")),
                          out));
    }
    return event(st, "response.reasoning_text.delta",
                 json_pack("{s:s, s:i, s:i, s:s%}", "item_id", id, "output_index", (int)st->reasoning_index,
                           "content_index", 0, "delta", text, len),
                 out);
}

numla_status numla_responses_stream_text(numla_responses_stream *st, const numla_openai_reply *r,
                                         const char *text, size_t len, const char *reasoning,
                                         size_t reasoning_len, numla_strbuf *out)
{
    if (len == 0)
        return NUMLA_STATUS_OK;
    NUMLA_CHECK(open_message(st, r, reasoning, reasoning_len, out));
    char id[96];
    item_id(r, "msg", -1, id, sizeof id);
    return event(st, "response.output_text.delta",
                 json_pack("{s:s, s:i, s:i, s:s%, s:[]}", "item_id", id, "output_index",
                           (int)st->message_index, "content_index", 0, "delta", text, len,
                           "logprobs"), out);
}

numla_status numla_responses_stream_end(numla_responses_stream *st, const numla_openai_reply *r,
                                        const char *settings, const numla_openai_choice *c,
                                        const numla_openai_usage *u, numla_strbuf *out)
{
    const int length = c->finish_reason && !strcmp(c->finish_reason, "length");
    NUMLA_CHECK(close_reasoning(st, r, c->reasoning, c->reasoning_len, out));
    if (c->text_len > 0 || c->num_tool_calls == 0) {
        NUMLA_CHECK(open_message(st, r, c->reasoning, c->reasoning_len, out));
        char id[96];
        item_id(r, "msg", -1, id, sizeof id);
        const char *t = c->text ? c->text : "";
        NUMLA_CHECK(event(st, "response.output_text.done",
                          json_pack("{s:s, s:i, s:i, s:s%, s:[]}", "item_id", id, "output_index",
                                    (int)st->message_index, "content_index", 0, "text", t,
                                    c->text_len, "logprobs"), out));
        NUMLA_CHECK(event(st, "response.content_part.done",
                          json_pack("{s:s, s:i, s:i, s:{s:s, s:s%, s:[]}}", "item_id", id,
                                    "output_index", (int)st->message_index, "content_index", 0,
                                    "part", "type", "output_text", "text", t, c->text_len,
                                    "annotations"), out));
        NUMLA_CHECK(event(st, "response.output_item.done",
                          json_pack("{s:i, s:o}", "output_index", (int)st->message_index, "item",
                                    message_item(r, t, c->text_len,
                                                 length ? "incomplete" : "completed")), out));
    }
    for (int32_t k = 0; k < c->num_tool_calls; k++) {
        const int32_t at = st->output_index++;
        const numla_tool_call_out *t = &c->tool_calls[k];
        char id[96];
        item_id(r, "fc", k, id, sizeof id);
        json_t *added = call_item(r, t, k, "in_progress");
        json_object_set_new(added, "arguments", json_string(""));
        NUMLA_CHECK(event(st, "response.output_item.added",
                          json_pack("{s:i, s:o}", "output_index", (int)at, "item", added), out));
        NUMLA_CHECK(event(st, "response.function_call_arguments.delta",
                          json_pack("{s:s, s:i, s:s}", "item_id", id, "output_index", (int)at,
                                    "delta", t->arguments), out));
        NUMLA_CHECK(event(st, "response.function_call_arguments.done",
                          json_pack("{s:s, s:i, s:s}", "item_id", id, "output_index", (int)at,
                                    "arguments", t->arguments), out));
        NUMLA_CHECK(event(st, "response.output_item.done",
                          json_pack("{s:i, s:o}", "output_index", (int)at, "item",
                                    call_item(r, t, k, "completed")), out));
    }
    return event(st, length ? "response.incomplete" : "response.completed",
                 json_pack("{s:o}", "response", response_json(r, settings, c, u)), out);
}

numla_status numla_responses_stream_error(numla_responses_stream *st,
                                          const numla_openai_error *err, numla_strbuf *out)
{
    return event(st, "error",
                 json_pack("{s:s?, s:s, s:s?}", "code", err->code[0] ? err->code : NULL,
                           "message", err->message, "param", err->param[0] ? err->param : NULL),
                 out);
}
