/* engine/cli/generation_config.c — generation_config.json (see generation_config.h). */
#include "engine/cli/generation_config.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/json/model_json.h"

/* A token id field's value: an integer in [0, vocab_size) (vocab_size <= 0: any int32). */
static numla_status gen_token_id(const char *src, const char *field, const json_t *v,
                                 int64_t vocab_size, int32_t *out)
{
    if (!json_is_integer(v)) {
        if (json_is_real(v))
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %s = %g is not a token id", src, field,
                       json_real_value(v));
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %s has the wrong type, expected a token id",
                   src, field);
    }
    json_int_t id = json_integer_value(v);
    int64_t hi = vocab_size > 0 ? vocab_size - 1 : INT32_MAX;
    if (id < 0 || id > hi)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %s = %lld is outside [0, %lld]", src, field,
                   (long long)id, (long long)hi);
    *out = (int32_t)id;
    return NUMLA_STATUS_OK;
}

/* A number field in [lo, hi] (lo excluded when lo_open); absent or null: *has = 0. */
static numla_status gen_number(const char *src, const json_t *root, const char *field, double lo,
                               int lo_open, double hi, int *has, double *out)
{
    const json_t *v = json_object_get(root, field);
    *has = 0;
    if (!v || json_is_null(v))
        return NUMLA_STATUS_OK;
    if (!json_is_number(v))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %s has the wrong type, expected a number", src,
                   field);
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || (lo_open && x == lo) || x > hi)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field %s = %g is outside %s%g, %g]", src, field, x,
                   lo_open ? "(" : "[", lo, hi);
    *has = 1;
    *out = x;
    return NUMLA_STATUS_OK;
}

static numla_status gen_parse_root(const char *src, const json_t *root, int64_t vocab_size,
                                   numla_generation_config *g)
{
    if (!json_is_object(root))
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: top level is not a JSON object", src);
    const json_t *v = json_object_get(root, "bos_token_id");
    if (v && !json_is_null(v))
        NUMLA_CHECK(gen_token_id(src, "bos_token_id", v, vocab_size, &g->bos_token_id));
    v = json_object_get(root, "eos_token_id");
    if (v && !json_is_null(v)) {
        if (!json_is_array(v) && !json_is_number(v))
            NUMLA_FAIL(NUMLA_STATUS_FORMAT,
                       "%s: field eos_token_id must be a token id or a list of them", src);
        size_t n = json_is_array(v) ? json_array_size(v) : 1;
        for (size_t i = 0; i < n; i++) {
            char field[48];
            snprintf(field, sizeof field, json_is_array(v) ? "eos_token_id[%zu]" : "eos_token_id",
                     i);
            int32_t id = -1;
            NUMLA_CHECK(gen_token_id(src, field, json_is_array(v) ? json_array_get(v, i) : v,
                                     vocab_size, &id));
            if (g->num_eos < NUMLA_CONFIG_MAX_EOS)
                g->eos_token_ids[g->num_eos++] = id;
        }
    }
    NUMLA_CHECK(gen_number(src, root, "temperature", 0, 0, 1e6, &g->has_temperature,
                           &g->temperature));
    NUMLA_CHECK(gen_number(src, root, "top_p", 0, 1, 1, &g->has_top_p, &g->top_p));
    double k = 0;
    NUMLA_CHECK(gen_number(src, root, "top_k", -1e300, 0, 1e300, &g->has_top_k, &k));
    if (g->has_top_k) {
        if (k != floor(k))
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field top_k = %g is not an integer", src, k);
        if (k < INT32_MIN || k > INT32_MAX)
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field top_k = %g is outside [%d, %d]", src, k,
                       INT32_MIN, INT32_MAX);
        g->top_k = (int32_t)k;
    }
    v = json_object_get(root, "do_sample");
    if (v && !json_is_null(v)) {
        if (!json_is_boolean(v))
            NUMLA_FAIL(NUMLA_STATUS_FORMAT, "%s: field do_sample has the wrong type, expected "
                       "true/false", src);
        g->has_do_sample = 1;
        g->do_sample = json_is_true(v);
    }
    return NUMLA_STATUS_OK;
}

/* The fields of a parsed file (root, whose reference this takes) into *out, all or nothing. */
static numla_status gen_take_root(const char *src, json_t *root, int64_t vocab_size,
                                  numla_generation_config *out)
{
    numla_generation_config g = *out;
    g.found = 1;
    numla_status s = gen_parse_root(src, root, vocab_size, &g);
    json_decref(root);
    NUMLA_CHECK(s);
    *out = g;
    return NUMLA_STATUS_OK;
}

numla_status numla_generation_config_parse(const char *text, size_t len, const char *source,
                                           int64_t vocab_size, numla_generation_config *out)
{
    const char *src = source ? source : "generation_config.json";
    memset(out, 0, sizeof *out);
    out->bos_token_id = -1;
    json_t *root = NULL;
    NUMLA_CHECK(numla_json_text_parse(text, len, 0, src, &root));
    return gen_take_root(src, root, vocab_size, out);
}

numla_status numla_generation_config_load(const char *model_dir, int64_t vocab_size,
                                          numla_generation_config *out)
{
    memset(out, 0, sizeof *out);
    out->bos_token_id = -1;
    if (numla_model_path_is_gguf(model_dir))
        return NUMLA_STATUS_OK;
    char path[4200];
    snprintf(path, sizeof path, "%s/generation_config.json", model_dir);
    struct stat st;
    if (stat(path, &st) != 0)
        return NUMLA_STATUS_OK;
    json_t *root = NULL;
    NUMLA_CHECK(numla_json_file_read(path, 0, &root));
    return gen_take_root(path, root, vocab_size, out);
}

void numla_generation_config_defaults(const numla_generation_config *g, numla_sampling_params *p)
{
    if (g->has_temperature)
        p->temperature = g->temperature;
    else if (g->has_do_sample && !g->do_sample)
        p->temperature = 0.0;
    if (g->has_top_p)
        p->top_p = g->top_p;
    if (g->has_top_k)
        p->top_k = g->top_k;
}

int numla_generation_config_add_eos(const numla_generation_config *g, numla_model_config *cfg)
{
    int added = 0;
    for (int32_t i = 0; i < g->num_eos; i++) {
        int have = 0;
        for (int32_t k = 0; k < cfg->num_eos; k++)
            have |= cfg->eos_token_ids[k] == g->eos_token_ids[i];
        if (!have && cfg->num_eos < NUMLA_CONFIG_MAX_EOS) {
            cfg->eos_token_ids[cfg->num_eos++] = g->eos_token_ids[i];
            added++;
        }
    }
    return added;
}

void numla_generation_config_describe(const numla_generation_config *g, char *buf, size_t n)
{
    size_t w = 0;
    buf[0] = 0;
#define GEN_PUT(...)                                                                   \
    do {                                                                               \
        int r_ = snprintf(buf + w, w < n ? n - w : 0, __VA_ARGS__);                    \
        if (r_ > 0)                                                                    \
            w = w + (size_t)r_ < n ? w + (size_t)r_ : n - 1;                           \
    } while (0)
    const char *sep = "";
    if (g->has_temperature) {
        GEN_PUT("temperature %g", g->temperature);
        sep = ", ";
    } else if (g->has_do_sample && !g->do_sample) {
        GEN_PUT("greedy (do_sample false)");
        sep = ", ";
    }
    if (g->has_top_p) {
        GEN_PUT("%stop_p %g", sep, g->top_p);
        sep = ", ";
    }
    if (g->has_top_k) {
        GEN_PUT("%stop_k %d", sep, (int)g->top_k);
        sep = ", ";
    }
    for (int32_t i = 0; i < g->num_eos; i++)
        GEN_PUT("%s%d", i ? ", " : sep[0] ? "; stop tokens " : "stop tokens ",
                (int)g->eos_token_ids[i]);
#undef GEN_PUT
}
