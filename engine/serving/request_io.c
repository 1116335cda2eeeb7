/* engine/serving/request_io.c — request parsing/validation and result writing (see request_io.h). */
#include "engine/serving/request_io.h"

#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static void req_error(numla_request *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void req_error(numla_request *r, const char *fmt, ...)
{
    int n = snprintf(r->error, sizeof r->error, "line %lld: ", (long long)r->line);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof r->error)
        vsnprintf(r->error + n, sizeof r->error - (size_t)n, fmt, ap);
    va_end(ap);
}

int numla_request_json_int(const json_t *v, int64_t *out)
{
    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return 1;
    }
    if (json_is_real(v)) { /* 3.0 is fine, 3.5 is not */
        double d = json_real_value(v);
        if (d == floor(d) && fabs(d) < 9e15) {
            *out = (int64_t)d;
            return 1;
        }
    }
    return 0;
}

/* "prompt_tokens": a non-empty array of ids inside the vocabulary. Returns 0 on error. */
static int parse_token_prompt(json_t *v, const numla_request_limits *lim, numla_request *r)
{
    if (!json_is_array(v) || json_array_size(v) == 0) {
        req_error(r, "field \"prompt_tokens\" must be a non-empty array of token ids");
        return 0;
    }
    size_t n = json_array_size(v);
    if (n > (size_t)INT32_MAX / 2) {
        req_error(r, "field \"prompt_tokens\" is too long");
        return 0;
    }
    r->prompt_tokens = malloc(n * sizeof *r->prompt_tokens);
    if (!r->prompt_tokens) {
        req_error(r, "no memory for %zu prompt tokens", n);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        int64_t t;
        if (!numla_request_json_int(json_array_get(v, i), &t)) {
            req_error(r, "prompt_tokens[%zu] is not an integer", i);
            return 0;
        }
        if (t < 0 || t >= lim->vocab_size) {
            req_error(r, "prompt_tokens[%zu] = %lld is outside the vocabulary (0..%lld)", i,
                      (long long)t, (long long)lim->vocab_size - 1);
            return 0;
        }
        r->prompt_tokens[i] = (int32_t)t;
    }
    r->num_prompt = (int32_t)n;
    return 1;
}

/* "prompt": text, encoded with the tokenizer's BOS rules. Returns 0 on error. */
static int parse_text_prompt(json_t *v, const numla_request_limits *lim, numla_request *r)
{
    if (!json_is_string(v)) {
        req_error(r, "field \"prompt\" must be a string");
        return 0;
    }
    if (!lim->tokenizer) {
        req_error(r, "field \"prompt\" needs a tokenizer.json in the model directory "
                     "(send \"prompt_tokens\" instead)");
        return 0;
    }
    const char *text = json_string_value(v);
    size_t len = json_string_length(v);
    /* jansson rejects invalid UTF-8 in the line itself; the tokenizer checks again. */
    int64_t bad = numla_utf8_invalid_offset(text, len);
    if (bad >= 0) {
        req_error(r, "field \"prompt\" is not valid UTF-8 at byte offset %lld", (long long)bad);
        return 0;
    }
    /* A text that cannot fit is refused before it is encoded (a 50 MB prompt would cost GBs). */
    const int64_t at_least = numla_tokenizer_min_tokens(lim->tokenizer, text, len);
    if (lim->max_context > 0 && at_least > lim->max_context) {
        req_error(r, "field \"prompt\" has %zu bytes, at least %lld tokens (a token stands for at "
                     "most %lld bytes): more than the context of %lld tokens", len,
                  (long long)at_least,
                  (long long)numla_tokenizer_max_bytes_per_token(lim->tokenizer),
                  (long long)lim->max_context);
        return 0;
    }
    int32_t *ids = NULL;
    int64_t n = 0;
    if (numla_tokenizer_encode(lim->tokenizer, text, len, 1, &ids, &n) != NUMLA_STATUS_OK) {
        req_error(r, "field \"prompt\": %s", numla_error_message());
        free(ids);
        return 0;
    }
    if (n == 0) {
        req_error(r, "field \"prompt\" encodes to no tokens");
        free(ids);
        return 0;
    }
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= lim->vocab_size) {
            req_error(r, "field \"prompt\": token %d is outside the model's vocabulary (0..%lld)",
                      ids[i], (long long)lim->vocab_size - 1);
            free(ids);
            return 0;
        }
    r->prompt_tokens = ids;
    r->num_prompt = (int32_t)n;
    r->text_output = 1;
    return 1;
}

/* "stop": a list of non-empty strings. Returns 0 on error. */
static int parse_stop_strings(json_t *v, const numla_request_limits *lim, numla_request *r)
{
    if (!v || json_is_null(v))
        return 1;
    if (!json_is_array(v) || json_array_size(v) > NUMLA_REQUEST_MAX_STOP) {
        req_error(r, "field \"stop\" must be a list of at most %d strings", NUMLA_REQUEST_MAX_STOP);
        return 0;
    }
    if (!lim->tokenizer && json_array_size(v) > 0) {
        req_error(r, "field \"stop\" needs a tokenizer.json in the model directory");
        return 0;
    }
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *e = json_array_get(v, i);
        if (!json_is_string(e) || json_string_length(e) == 0) {
            req_error(r, "stop[%zu] must be a non-empty string", i);
            return 0;
        }
        char *c = strdup(json_string_value(e));
        if (!c) {
            req_error(r, "no memory for stop strings");
            return 0;
        }
        r->stop_strings[r->num_stop_strings++] = c;
    }
    r->text_output |= r->num_stop_strings > 0;
    return 1;
}

static int field_bad(numla_request_field_error *e, const char *field, const char *param,
                     const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int field_bad(numla_request_field_error *e, const char *field, const char *param,
                     const char *fmt, ...)
{
    snprintf(e->field, sizeof e->field, "%s", field);
    snprintf(e->param, sizeof e->param, "%s", param ? param : field);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->what, sizeof e->what, fmt, ap);
    va_end(ap);
    return 0;
}

/* "logit_bias": {"<token id>": bias in [-100, 100], ...}, at most NUMLA_SAMPLER_MAX_LOGIT_BIAS
 * entries; a key is a token id written in decimal without sign or leading zeros (so distinct
 * keys are distinct tokens), below vocab_size when that is > 0. */
static int parse_logit_bias(json_t *v, int64_t vocab_size, numla_sampling_params *p,
                            numla_request_field_error *err)
{
    if (!json_is_object(v) || json_object_size(v) > NUMLA_SAMPLER_MAX_LOGIT_BIAS)
        return field_bad(err, "logit_bias", NULL,
                         "must be an object of at most %d entries {\"<token id>\": bias}",
                         NUMLA_SAMPLER_MAX_LOGIT_BIAS);
    const char *key;
    json_t *b;
    p->num_logit_bias = 0;
    json_object_foreach(v, key, b) {
        char f[64];
        snprintf(f, sizeof f, "logit_bias[\"%.40s\"]", key);
        int64_t id = 0;
        size_t len = strlen(key);
        int ok = len > 0 && len <= 10 && (key[0] != '0' || len == 1);
        for (size_t i = 0; ok && i < len; i++) {
            ok = key[i] >= '0' && key[i] <= '9';
            id = id * 10 + (key[i] - '0');
        }
        if (!ok || id > INT32_MAX || (vocab_size > 0 && id >= vocab_size))
            return vocab_size > 0
                       ? field_bad(err, f, "logit_bias", "is not a token id in 0..%lld",
                                   (long long)vocab_size - 1)
                       : field_bad(err, f, "logit_bias", "is not a token id");
        const double d = json_is_number(b) ? json_number_value(b) : NAN;
        if (!(d >= -100 && d <= 100))
            return field_bad(err, f, "logit_bias", "must be a number in [-100, 100]");
        p->logit_bias_tokens[p->num_logit_bias] = (int32_t)id;
        p->logit_bias_values[p->num_logit_bias++] = (float)d;
    }
    return 1;
}

int numla_request_parse_sampling(const json_t *o, const numla_request_field_rules *rules,
                                 numla_sampling_params *p, int *max_tokens_given,
                                 numla_request_field_error *err)
{
    const char *mt = rules->max_tokens_key ? rules->max_tokens_key : "max_tokens";
    json_t *v;
    int64_t iv;
    *max_tokens_given = 0;
    if ((v = json_object_get(o, mt)) && !json_is_null(v)) {
        if (!numla_request_json_int(v, &iv) || iv < 0 || iv > INT32_MAX)
            return field_bad(err, mt, NULL, "must be an integer >= 0");
        p->max_tokens = (int32_t)iv;
        *max_tokens_given = 1;
    }
    if ((v = json_object_get(o, "temperature")) && !json_is_null(v)) {
        if (!json_is_number(v) || !(json_number_value(v) >= 0) || !isfinite(json_number_value(v)))
            return field_bad(err, "temperature", NULL, "must be a number >= 0");
        p->temperature = json_number_value(v);
    }
    if ((v = json_object_get(o, "top_k")) && !json_is_null(v)) {
        if (!numla_request_json_int(v, &iv) || iv < -1 || iv > INT32_MAX)
            return field_bad(err, "top_k", NULL, "must be an integer >= -1 (-1 or 0: off)");
        p->top_k = iv <= 0 ? 0 : (int32_t)iv;
    }
    if ((v = json_object_get(o, "top_p")) && !json_is_null(v)) {
        double d = json_is_number(v) ? json_number_value(v) : -1;
        if (!(d > 0 && d <= 1))
            return field_bad(err, "top_p", NULL, "must be a number in (0, 1]");
        p->top_p = d;
    }
    if ((v = json_object_get(o, "seed")) && !json_is_null(v)) {
        if (!json_is_integer(v))
            return field_bad(err, "seed", NULL, "must be an integer");
        p->seed = (uint64_t)json_integer_value(v);
        p->has_seed = 1;
    }
    if ((v = json_object_get(o, "stop_token_ids")) && !json_is_null(v)) {
        if (!json_is_array(v) || json_array_size(v) > NUMLA_SAMPLER_MAX_STOP)
            return field_bad(err, "stop_token_ids", NULL,
                             "must be a list of at most %d token ids", NUMLA_SAMPLER_MAX_STOP);
        p->num_stop = 0;
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (!numla_request_json_int(json_array_get(v, i), &iv) || iv < 0 || iv > INT32_MAX ||
                (rules->vocab_size > 0 && iv >= rules->vocab_size)) {
                char f[64];
                snprintf(f, sizeof f, "stop_token_ids[%zu]", i);
                return rules->vocab_size > 0
                           ? field_bad(err, f, "stop_token_ids", "is not a token id in 0..%lld",
                                       (long long)rules->vocab_size - 1)
                           : field_bad(err, f, "stop_token_ids", "is not a token id");
            }
            p->stop_token_ids[p->num_stop++] = (int32_t)iv;
        }
    }
    if ((v = json_object_get(o, "ignore_eos")) && !json_is_null(v)) {
        if (!json_is_boolean(v))
            return field_bad(err, "ignore_eos", NULL, "must be true or false");
        p->ignore_eos = json_is_true(v);
    }
    if (rules->logprobs_count && (v = json_object_get(o, "logprobs")) && !json_is_null(v)) {
        if (!numla_request_json_int(v, &iv) || iv < 0 || iv > NUMLA_SAMPLER_MAX_LOGPROBS)
            return field_bad(err, "logprobs", NULL, "must be an integer in 0..%d or null",
                             NUMLA_SAMPLER_MAX_LOGPROBS);
        p->logprobs = (int32_t)iv;
    }
    static const struct {
        const char *key;
        double lo, hi;
        int open_lo;           /* 1: lo itself is refused */
        const char *range;
    } reals[] = {{"presence_penalty", -2, 2, 0, "in [-2, 2]"},
                 {"frequency_penalty", -2, 2, 0, "in [-2, 2]"},
                 {"repetition_penalty", 0, DBL_MAX, 1, "> 0 (1: off)"},
                 {"min_p", 0, 1, 0, "in [0, 1]"}};
    for (size_t k = 0; k < sizeof reals / sizeof reals[0]; k++) {
        if (!(v = json_object_get(o, reals[k].key)) || json_is_null(v))
            continue;
        const double d = json_is_number(v) ? json_number_value(v) : NAN;
        if (!(d >= reals[k].lo && d <= reals[k].hi) || (reals[k].open_lo && d == reals[k].lo))
            return field_bad(err, reals[k].key, NULL, "must be a number %s", reals[k].range);
        double *dst = k == 0 ? &p->presence_penalty : k == 1 ? &p->frequency_penalty
                    : k == 2 ? &p->repetition_penalty : &p->min_p;
        *dst = d;
    }
    if ((v = json_object_get(o, "logit_bias")) && !json_is_null(v))
        return parse_logit_bias(v, rules->vocab_size, p, err);
    return 1;
}

int numla_request_fit_context(int32_t num_prompt, int max_tokens_given, int64_t max_context,
                              numla_sampling_params *p, numla_request_field_error *err)
{
    if (num_prompt < 1)
        return field_bad(err, "prompt", NULL, "is empty");
    if (max_context <= 0)
        return 1;
    if (num_prompt >= max_context && (!max_tokens_given || p->max_tokens > 0))
        return field_bad(err, "prompt", NULL,
                         "(%d tokens) leaves no room to generate: it fills or exceeds the "
                         "context of %lld tokens", num_prompt, (long long)max_context);
    if (!max_tokens_given) {
        p->max_tokens = max_context - num_prompt > INT32_MAX ? INT32_MAX
                                                             : (int32_t)(max_context - num_prompt);
        return 1;
    }
    if ((int64_t)num_prompt + p->max_tokens > max_context)
        return field_bad(err, "max_tokens", NULL,
                         "(%d) + the prompt (%d tokens) exceeds the context of %lld tokens",
                         p->max_tokens, num_prompt, (long long)max_context);
    return 1;
}

int numla_request_parse_response_format(const json_t *v, const numla_sampling_params *p,
                                        numla_grammar **out, numla_request_field_error *err)
{
    *out = NULL;
    if (!v || json_is_null(v))
        return 1;
    const json_t *t = json_object_get(v, "type");
    if (!json_is_object(v) || !json_is_string(t))
        return field_bad(err, "response_format", "response_format",
                         "must be an object with a \"type\": \"text\", \"json_object\" or "
                         "\"json_schema\"");
    const char *type = json_string_value(t), *key;
    const json_t *f;
    json_object_foreach((json_t *)v, key, f) {
        if (strcmp(key, "type") && (strcmp(type, "json_schema") || strcmp(key, "json_schema"))) {
            char name[96];
            snprintf(name, sizeof name, "response_format.%.60s", key);
            return field_bad(err, name, "response_format", "is not a field of this type");
        }
    }
    if (!strcmp(type, "text"))
        return 1;
    if (p->ignore_eos)
        return field_bad(err, "response_format", "response_format",
                         "cannot be combined with ignore_eos (the document ends on EOS)");
    numla_status st;
    if (!strcmp(type, "json_object"))
        st = numla_grammar_compile_json_object(out);
    else if (!strcmp(type, "json_schema")) {
        const json_t *js = json_object_get(v, "json_schema");
        if (!json_is_object(js))
            return field_bad(err, "response_format.json_schema", "response_format",
                             "must be an object with \"name\" and \"schema\"");
        json_object_foreach((json_t *)js, key, f) {
            static const char *const known[] = {"name", "schema", "strict", "description"};
            int ok = 0;
            for (size_t i = 0; i < 4; i++)
                ok |= !strcmp(key, known[i]);
            if (!ok) {
                char name[96];
                snprintf(name, sizeof name, "response_format.json_schema.%.40s", key);
                return field_bad(err, name, "response_format", "is not a field of json_schema");
            }
        }
        const json_t *name = json_object_get(js, "name"), *schema = json_object_get(js, "schema");
        const json_t *strict = json_object_get(js, "strict");
        if (name && !json_is_string(name))
            return field_bad(err, "response_format.json_schema.name", "response_format",
                             "must be a string");
        if (strict && !json_is_null(strict) && !json_is_boolean(strict))
            return field_bad(err, "response_format.json_schema.strict", "response_format",
                             "must be true, false or null");
        if (!json_is_object(schema))
            return field_bad(err, "response_format.json_schema.schema", "response_format",
                             "must be a JSON Schema object");
        st = numla_grammar_compile_schema(schema, out);
        if (st != NUMLA_STATUS_OK)
            return field_bad(err, "response_format.json_schema.schema", "response_format",
                             "is outside the supported subset (docs/serving.md): %s",
                             numla_error_message());
    } else
        return field_bad(err, "response_format.type", "response_format",
                         "must be \"text\", \"json_object\" or \"json_schema\"");
    if (st != NUMLA_STATUS_OK)
        return field_bad(err, "response_format", "response_format", "%s", numla_error_message());
    return 1;
}

/* Returns 0 when r->error has been set. */
static int parse_fields(json_t *o, const numla_request_limits *lim, numla_request *r)
{
    numla_sampling_params *p = &r->params;
    static const char *known[] = {"id", "prompt_tokens", "max_tokens", "temperature", "top_k",
                                  "top_p", "seed", "stop_token_ids", "ignore_eos", "logprobs",
                                  "prompt", "stop", "presence_penalty", "frequency_penalty",
                                  "repetition_penalty", "logit_bias", "min_p",
                                  "response_format", "prompt_logprobs"};
    const char *key;
    json_t *v = json_object_get(o, "id");
    /* take the id first so that every later error record carries it */
    if (v && (json_is_string(v) || json_is_integer(v)))
        r->id = json_incref(v);
    json_object_foreach(o, key, v) {
        int ok = 0;
        for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
            ok |= !strcmp(key, known[i]);
        if (!ok) {
            req_error(r, "unknown field \"%.64s\"", key);
            return 0;
        }
    }
    v = json_object_get(o, "id");
    if (!v) {
        req_error(r, "missing field \"id\"");
        return 0;
    }
    if (!r->id) {
        req_error(r, "field \"id\" must be a string or an integer");
        return 0;
    }

    json_t *pt = json_object_get(o, "prompt");
    v = json_object_get(o, "prompt_tokens");
    if (pt && v) {
        req_error(r, "give either \"prompt\" or \"prompt_tokens\", not both");
        return 0;
    }
    if (pt && !parse_text_prompt(pt, lim, r))
        return 0;
    if (!pt && !v) {
        req_error(r, "missing field \"prompt_tokens\" (or \"prompt\")");
        return 0;
    }
    if (!pt && !parse_token_prompt(v, lim, r))
        return 0;
    if (!parse_stop_strings(json_object_get(o, "stop"), lim, r))
        return 0;


    const numla_request_field_rules rules = {.vocab_size = lim->vocab_size, .logprobs_count = 1};
    numla_request_field_error fe;
    int given = 0;
    if (!numla_request_parse_sampling(o, &rules, p, &given, &fe) ||
        !numla_request_fit_context(r->num_prompt, 1, lim->max_context, p, &fe) ||
        !numla_request_parse_response_format(json_object_get(o, "response_format"), p,
                                             &r->grammar, &fe)) {
        req_error(r, "field \"%s\" %s", fe.field, fe.what);
        return 0;
    }
    v = json_object_get(o, "prompt_logprobs");
    if (v && !json_is_null(v)) {
        int64_t n;
        if (!numla_request_json_int(v, &n) || n < 0 || n > NUMLA_SAMPLER_MAX_LOGPROBS) {
            req_error(r, "field \"prompt_logprobs\" must be an integer in 0..%d or null",
                      NUMLA_SAMPLER_MAX_LOGPROBS);
            return 0;
        }
        r->prompt_logprobs = 1;
        r->prompt_logprobs_top = (int32_t)n;
    }
    if (r->grammar) {
        if (!lim->tokenizer) {
            req_error(r, "field \"response_format\" needs a tokenizer.json in the model "
                         "directory (the grammar reads the tokens' bytes)");
            return 0;
        }
        r->text_output = 1;
    }
    return 1;
}

numla_status numla_request_parse(const char *text, size_t len, int64_t line,
                                 const numla_request_limits *lim, numla_request *out)
{
    memset(out, 0, sizeof *out);
    out->line = line;
    if (lim && lim->defaults)
        out->params = *lim->defaults;
    else
        numla_sampling_params_default(&out->params);
    /* Checked before JSON parsing so the error names the exact byte (jansson only says
     * "unable to decode byte"). */
    int64_t bad = numla_utf8_invalid_offset(text, len);
    if (bad >= 0) {
        req_error(out, "invalid UTF-8 at byte offset %lld of the line", (long long)bad);
        return NUMLA_STATUS_OK;
    }
    json_error_t err;
    json_t *o = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &err);
    if (!o) {
        req_error(out, "invalid JSON at column %d: %s", err.column, err.text);
        return NUMLA_STATUS_OK;
    }
    if (!json_is_object(o)) {
        req_error(out, "expected a JSON object");
        json_decref(o);
        return NUMLA_STATUS_OK;
    }
    if (!parse_fields(o, lim, out)) {
        free(out->prompt_tokens);
        out->prompt_tokens = NULL;
        out->num_prompt = 0;
        for (int32_t i = 0; i < out->num_stop_strings; i++)
            free(out->stop_strings[i]);
        out->num_stop_strings = 0;
        out->text_output = 0;
        numla_grammar_destroy(&out->grammar);
    }
    json_decref(o);
    return NUMLA_STATUS_OK;
}

void numla_request_free(numla_request *r)
{
    if (!r)
        return;
    json_decref((json_t *)r->id);
    free(r->prompt_tokens);
    for (int32_t i = 0; i < r->num_stop_strings; i++)
        free(r->stop_strings[i]);
    r->num_stop_strings = 0;
    r->id = NULL;
    r->prompt_tokens = NULL;
    numla_grammar_destroy(&r->grammar);
}

static json_t *lp_real(float v) { return json_real(isfinite(v) ? (double)v : -9999.0); }

/* {"token", "logprob", "top": [[token, logprob], ...]} */
static json_t *lp_json(const numla_logprob_entry *e)
{
    json_t *le = json_object(), *top = json_array();
    json_object_set_new(le, "token", json_integer(e->token));
    json_object_set_new(le, "logprob", lp_real(e->logprob));
    for (int32_t j = 0; j < e->num_top; j++) {
        json_t *pair = json_array();
        json_array_append_new(pair, json_integer(e->top_tokens[j]));
        json_array_append_new(pair, lp_real(e->top_logprobs[j]));
        json_array_append_new(top, pair);
    }
    json_object_set_new(le, "top", top);
    return le;
}

json_t *numla_result_speculative_json(int32_t steps, int32_t drafted, int32_t accepted)
{
    return json_pack("{s:i, s:i, s:i, s:f, s:f}", "verify_steps", (int)steps, "draft_tokens",
                     (int)drafted, "accepted_tokens", (int)accepted, "acceptance_rate",
                     drafted > 0 ? (double)accepted / (double)drafted : 0.0,
                     "mean_accepted_length",
                     steps > 0 ? (double)(accepted + steps) / (double)steps : 0.0);
}

numla_status numla_result_write(FILE *f, const numla_result *r)
{
    json_t *o = json_object();
    if (!o)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "result: no memory");
    json_object_set(o, "id", r->req && r->req->id ? (json_t *)r->req->id : json_null());
    json_t *toks = json_array();
    for (int32_t i = 0; i < r->num_output; i++)
        json_array_append_new(toks, json_integer(r->output_tokens[i]));
    json_object_set_new(o, "output_tokens", toks);
    json_object_set_new(o, "finish_reason", json_string(r->finish_reason));
    if (r->error)
        json_object_set_new(o, "error", json_string(r->error));
    json_t *usage = json_object();
    json_object_set_new(usage, "prompt_tokens", json_integer(r->req ? r->req->num_prompt : 0));
    json_object_set_new(usage, "completion_tokens", json_integer(r->num_output));
    json_t *details = json_object();
    json_object_set_new(details, "cached_tokens", json_integer(r->cached_tokens));
    json_object_set_new(usage, "prompt_tokens_details", details);
    if (r->speculative)
        json_object_set_new(usage, "speculative",
                            numla_result_speculative_json(r->spec_steps, r->spec_drafted,
                                                          r->spec_accepted));
    json_object_set_new(o, "usage", usage);
    if (r->logprobs) {
        json_t *arr = json_array();
        for (int32_t i = 0; i < r->num_output; i++)
            json_array_append_new(arr, lp_json(&r->logprobs[i]));
        json_object_set_new(o, "logprobs", arr);
    }
    if (r->prompt_logprobs && r->req) {
        json_t *arr = json_array();
        for (int32_t i = 0; i < r->req->num_prompt; i++)
            json_array_append_new(arr, i == 0 ? json_null() : lp_json(&r->prompt_logprobs[i]));
        json_object_set_new(o, "prompt_logprobs", arr);
    }
    if (r->text)
        json_object_set_new(o, "text", json_stringn(r->text, r->text_len));
    char *s = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_REAL_PRECISION(8));
    json_decref(o);
    if (!s)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "result: cannot serialise");
    int bad = fputs(s, f) < 0 || fputc('\n', f) == EOF || fflush(f) != 0;
    free(s);
    if (bad)
        NUMLA_FAIL(NUMLA_STATUS_IO, "result: write failed");
    return NUMLA_STATUS_OK;
}
