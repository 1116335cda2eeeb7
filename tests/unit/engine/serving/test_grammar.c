/* tests/unit/engine/serving/test_grammar.c — the JSON-Schema grammar (engine/serving/grammar.h)
 * against independent checks:
 *   - hand-written schemas with documents the matcher must accept (whole, byte by byte, in
 *     random pieces, and token by token through the mask) and documents it must refuse;
 *     every accepted one also parses with jansson and passes this file's own validator;
 *   - the mask equals, token for token, what feeding each token's bytes says (a brute force
 *     over a vocabulary of bytes, words, JSON pieces and UTF-8), at many reachable states;
 *   - documents drawn through numla_sampler with random logits (many seeds) always parse and
 *     validate (this file's validator of the subset, independent of the compiler), and end on
 *     an end token or when the document closes;
 *   - refusals name the keyword;
 *   - the fuzz target (tests/fuzz/fuzz_json_schema.c) over its corpus and mutations. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <arpa/inet.h>
#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "engine/serving/grammar.h"
#include "engine/serving/request_io.h"
#include "engine/serving/sampler.h"
#include "engine/text/synthetic_vocab.h"
#include "test_util.h"

/* ---------------------------------------------------------------- a validator ---------- */

static size_t utf8_chars(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

static const json_t *resolve(const json_t *root, const char *ref)
{
    if (!strcmp(ref, "#"))
        return root;
    if (!strncmp(ref, "#/$defs/", 8))
        return json_object_get(json_object_get(root, "$defs"), ref + 8);
    if (!strncmp(ref, "#/definitions/", 14))
        return json_object_get(json_object_get(root, "definitions"), ref + 14);
    if (!strncmp(ref, "#/properties/", 13))
        return json_object_get(json_object_get(root, "properties"), ref + 13);
    return NULL;
}

static int type_ok(const json_t *v, const char *t)
{
    if (!strcmp(t, "null"))
        return json_is_null(v);
    if (!strcmp(t, "boolean"))
        return json_is_boolean(v);
    if (!strcmp(t, "object"))
        return json_is_object(v);
    if (!strcmp(t, "array"))
        return json_is_array(v);
    if (!strcmp(t, "string"))
        return json_is_string(v);
    if (!strcmp(t, "number"))
        return json_is_number(v);
    if (!strcmp(t, "integer"))
        return json_is_integer(v) ||
               (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
    return 0;
}

/* A pattern's search in s[n], by PCRE2 with JavaScript-like options. */
static int pattern_ok(const char *pat, const char *s, size_t n)
{
    int err;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_DOLLAR_ENDONLY | PCRE2_ALT_BSUX, &err, &off,
                                   NULL);
    if (!re)
        return 0;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = pcre2_match(re, (PCRE2_SPTR)s, n, 0, 0, md, NULL);
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return rc >= 0;
}

static int all_of(const char *s, size_t n, const char *set)
{
    for (size_t i = 0; i < n; i++)
        if (!s[i] || !strchr(set, s[i]))
            return 0;
    return 1;
}

static int digits_ok(const char *s, int n) { return all_of(s, (size_t)n, "0123456789"); }

/* RFC 3339 full-date (calendar days, leap years). */
static int date_ok(const char *s, size_t n)
{
    if (n != 10 || s[4] != '-' || s[7] != '-' || !digits_ok(s, 4) || !digits_ok(s + 5, 2) ||
        !digits_ok(s + 8, 2))
        return 0;
    int y = atoi(s), m = atoi(s + 5), d = atoi(s + 8);
    static const int days[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return m >= 1 && m <= 12 && d >= 1 && d <= (m == 2 && !leap ? 28 : days[m - 1]);
}

/* RFC 3339 full-time (seconds up to 59: no leap second). */
static int time_ok(const char *s, size_t n)
{
    if (n < 9 || s[2] != ':' || s[5] != ':' || !digits_ok(s, 2) || !digits_ok(s + 3, 2) ||
        !digits_ok(s + 6, 2) || atoi(s) > 23 || atoi(s + 3) > 59 || atoi(s + 6) > 59)
        return 0;
    size_t i = 8;
    if (s[i] == '.') {
        size_t k = ++i;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        if (i == k)
            return 0;
    }
    if (i + 1 == n && (s[i] == 'Z' || s[i] == 'z'))
        return 1;
    return i + 6 == n && (s[i] == '+' || s[i] == '-') && s[i + 3] == ':' &&
           digits_ok(s + i + 1, 2) && digits_ok(s + i + 4, 2) && atoi(s + i + 1) <= 23 &&
           atoi(s + i + 4) <= 59;
}

/* RFC 1123 host name: labels of 1-63 letters, digits, hyphens, not starting or ending with a
 * hyphen; at most 253 bytes. */
static int hostname_ok(const char *s, size_t n)
{
    if (n == 0 || n > 253)
        return 0;
    size_t start = 0;
    for (size_t i = 0; i <= n; i++)
        if (i == n || s[i] == '.') {
            size_t len = i - start;
            if (len == 0 || len > 63 || s[start] == '-' || s[i - 1] == '-' ||
                !all_of(s + start, len,
                        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-"))
                return 0;
            start = i + 1;
        }
    return 1;
}

static int format_ok(const char *f, const char *s, size_t n)
{
    char buf[512];
    if (n >= sizeof buf)
        return 0;
    memcpy(buf, s, n);
    buf[n] = 0;
    unsigned char addr[16];
    if (!strcmp(f, "date"))
        return date_ok(s, n);
    if (!strcmp(f, "time"))
        return time_ok(s, n);
    if (!strcmp(f, "date-time"))
        return n > 11 && (s[10] == 'T' || s[10] == 't') && date_ok(s, 10) &&
               time_ok(s + 11, n - 11);
    if (!strcmp(f, "ipv4"))
        return inet_pton(AF_INET, buf, addr) == 1;
    if (!strcmp(f, "ipv6"))
        return inet_pton(AF_INET6, buf, addr) == 1;
    if (!strcmp(f, "uuid"))
        return n == 36 && buf[8] == '-' && buf[13] == '-' && buf[18] == '-' && buf[23] == '-' &&
               all_of(s, 8, "0123456789abcdefABCDEF") && all_of(s + 9, 4, "0123456789abcdefABCDEF") &&
               all_of(s + 14, 4, "0123456789abcdefABCDEF") &&
               all_of(s + 19, 4, "0123456789abcdefABCDEF") &&
               all_of(s + 24, 12, "0123456789abcdefABCDEF");
    if (!strcmp(f, "hostname"))
        return hostname_ok(s, n);
    if (!strcmp(f, "email")) {
        const char *at = strchr(buf, '@');
        return at && at > buf && !strchr(at + 1, '@') && hostname_ok(at + 1, strlen(at + 1)) &&
               buf[0] != '.' && at[-1] != '.' && !strstr(buf, "..");
    }
    if (!strcmp(f, "uri")) { /* RFC 3986: scheme ":" then no space, control or quote */
        size_t i = 0;
        while (i < n && (isalnum((unsigned char)s[i]) || strchr("+.-", s[i])))
            i++;
        if (i == 0 || i == n || s[i] != ':' || !isalpha((unsigned char)s[0]))
            return 0;
        for (; i < n; i++)
            if ((unsigned char)s[i] <= 0x20 || strchr("\"<>\\^`{|}", s[i]))
                return 0;
        return 1;
    }
    return 1; /* an unknown format: an annotation */
}

/* JSON Schema's validity of v under s (the keywords the grammar compiles). */
static int valid(const json_t *v, const json_t *s, const json_t *root)
{
    if (json_is_boolean(s))
        return json_is_true(s);
    const json_t *k;
    if ((k = json_object_get(s, "$ref")))
        return valid(v, resolve(root, json_string_value(k)), root);
    if ((k = json_object_get(s, "type"))) {
        int ok = 0;
        if (json_is_string(k))
            ok = type_ok(v, json_string_value(k));
        for (size_t i = 0; json_is_array(k) && i < json_array_size(k); i++)
            ok |= type_ok(v, json_string_value(json_array_get(k, i)));
        if (!ok)
            return 0;
    }
    if ((k = json_object_get(s, "const")) && !json_equal(v, (json_t *)k))
        return 0;
    if ((k = json_object_get(s, "enum"))) {
        int ok = 0;
        for (size_t i = 0; i < json_array_size(k); i++)
            ok |= json_equal(v, json_array_get(k, i));
        if (!ok)
            return 0;
    }
    if ((k = json_object_get(s, "anyOf"))) {
        int ok = 0;
        for (size_t i = 0; i < json_array_size(k); i++)
            ok |= valid(v, json_array_get(k, i), root);
        if (!ok)
            return 0;
    }
    if ((k = json_object_get(s, "oneOf"))) {
        int n = 0;
        for (size_t i = 0; i < json_array_size(k); i++)
            n += valid(v, json_array_get(k, i), root);
        if (n != 1)
            return 0;
    }
    if ((k = json_object_get(s, "allOf")))
        for (size_t i = 0; i < json_array_size(k); i++)
            if (!valid(v, json_array_get(k, i), root))
                return 0;
    if (json_is_string(v)) {
        size_t n = utf8_chars(json_string_value(v), json_string_length(v));
        if ((k = json_object_get(s, "minLength")) && (json_int_t)n < json_integer_value(k))
            return 0;
        if ((k = json_object_get(s, "maxLength")) && (json_int_t)n > json_integer_value(k))
            return 0;
        if ((k = json_object_get(s, "pattern")) &&
            !pattern_ok(json_string_value(k), json_string_value(v), json_string_length(v)))
            return 0;
        if ((k = json_object_get(s, "format")) &&
            !format_ok(json_string_value(k), json_string_value(v), json_string_length(v)))
            return 0;
    }
    if (json_is_number(v)) { /* as Python's jsonschema: doubles, draft 4's booleans too */
        const double x = json_number_value(v);
        const json_t *xmin = json_object_get(s, "exclusiveMinimum");
        const json_t *xmax = json_object_get(s, "exclusiveMaximum");
        if ((k = json_object_get(s, "minimum")) &&
            (json_is_true(xmin) ? x <= json_number_value(k) : x < json_number_value(k)))
            return 0;
        if ((k = json_object_get(s, "maximum")) &&
            (json_is_true(xmax) ? x >= json_number_value(k) : x > json_number_value(k)))
            return 0;
        if (json_is_number(xmin) && x <= json_number_value(xmin))
            return 0;
        if (json_is_number(xmax) && x >= json_number_value(xmax))
            return 0;
        if ((k = json_object_get(s, "multipleOf")) && fmod(x, json_number_value(k)) != 0)
            return 0;
    }
    if (json_is_array(v)) {
        size_t n = json_array_size(v);
        if ((k = json_object_get(s, "minItems")) && (json_int_t)n < json_integer_value(k))
            return 0;
        if ((k = json_object_get(s, "maxItems")) && (json_int_t)n > json_integer_value(k))
            return 0;
        if ((k = json_object_get(s, "items")))
            for (size_t i = 0; i < n; i++)
                if (!valid(json_array_get(v, i), k, root))
                    return 0;
    }
    if (json_is_object(v)) {
        const json_t *props = json_object_get(s, "properties");
        const json_t *ap = json_object_get(s, "additionalProperties");
        if ((k = json_object_get(s, "required")))
            for (size_t i = 0; i < json_array_size(k); i++)
                if (!json_object_get(v, json_string_value(json_array_get(k, i))))
                    return 0;
        if ((k = json_object_get(s, "minProperties")) &&
            (json_int_t)json_object_size(v) < json_integer_value(k))
            return 0;
        if ((k = json_object_get(s, "maxProperties")) &&
            (json_int_t)json_object_size(v) > json_integer_value(k))
            return 0;
        const char *key;
        json_t *val;
        const json_t *pp = json_object_get(s, "patternProperties");
        json_object_foreach((json_t *)v, key, val) {
            const json_t *ps = json_object_get(props, key);
            int matched = 0;
            const char *pat;
            const json_t *psch;
            json_object_foreach((json_t *)pp, pat, psch) {
                if (pattern_ok(pat, key, strlen(key))) {
                    matched = 1;
                    if (!valid(val, psch, root))
                        return 0;
                }
            }
            if (ps ? !valid(val, ps, root) : !matched && ap && !valid(val, ap, root))
                return 0;
        }
    }
    return 1;
}

/* ---------------------------------------------------------------- a small vocabulary --- */

/* Bytes 0..255 as tokens 0..255, then multi-byte pieces; EOS the last id. */
static const char *const PIECES[] = {
    "{\"", "\":", "\",", "\"}", "\":\"", "\",\"", "true", "false", "null", "[]", "{}", "[{",
    "}]", "},{", "name", "age", "\"name\":\"", "\"age\":", "ab", "abc", "red", "green", "\"red\"",
    "12", "0.", "1e", "e+", "-1", "00", "\\n", "\\u00e9", "\\u", "\\\"", "é", "日本", "語",
    "\xe6\x97", "\xa5", "\xf0\x9f\x98\x80", "\xed\xa0", "\xc0\xaf", "a\"", "x\\", " ", "\n",
    "\"v\":", "kids", "\"kids\":[", "\"a\":", "\"ab\":", "\"b\":null", ",\"", "]}", "1,2", "\"x\"",
    "hello world", "\x01", "\"\"", "é\"}"};
enum { NP = sizeof PIECES / sizeof PIECES[0], VOCAB = 256 + NP + 1, EOS_ID = VOCAB - 1 };

static const uint8_t *vbytes[VOCAB];
static size_t vlens[VOCAB];
static uint8_t byte_tok[256];

static numla_grammar_vocab *small_vocab(void)
{
    for (int i = 0; i < 256; i++) {
        byte_tok[i] = (uint8_t)i;
        vbytes[i] = &byte_tok[i];
        vlens[i] = 1;
    }
    for (int i = 0; i < NP; i++) {
        vbytes[256 + i] = (const uint8_t *)PIECES[i];
        vlens[256 + i] = strlen(PIECES[i]);
    }
    vbytes[EOS_ID] = NULL;
    vlens[EOS_ID] = 0;
    int32_t eos = EOS_ID;
    numla_grammar_vocab *v = NULL;
    CU_ASSERT_FATAL(numla_grammar_vocab_create(VOCAB, vbytes, vlens, &eos, 1, &v) ==
                    NUMLA_STATUS_OK);
    return v;
}

static int mask_has(const uint64_t *mask, int32_t t) { return (int)(mask[t / 64] >> (t % 64) & 1); }

/* ---------------------------------------------------------------- the cases ----------- */

typedef struct gcase {
    const char *schema;   /* NULL: json_object mode */
    const char *good[8];  /* canonical documents: accepted */
    const char *bad[12];  /* refused (invalid, or valid but not canonical: marked so below) */
} gcase;

static const gcase CASES[] = {
    {"{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":"
     "\"integer\"}},\"required\":[\"name\",\"age\"],\"additionalProperties\":false}",
     {"{\"name\":\"Al\",\"age\":3}", "{\"name\":\"\",\"age\":-12}", "{\"age\":3,\"name\":\"Al\"}",
      "{\"name\":\"é\\\"x\\u00e9\\n\",\"age\":0}", "{\"name\":\"\xf0\x9f\x98\x80\",\"age\":-0}"},
     {"{\"name\":\"Al\"}", "{\"name\":\"Al\",\"age\":3.5}", "{\"name\":\"Al\",\"age\":03}",
      "{\"name\":\"Al\",\"age\":3,\"x\":1}", "{\"name\":1,\"age\":3}",
      "{\"name\":\"\\u0000\",\"age\":1}", "{\"name\":\"\\ud800\",\"age\":1}",
      "{\"name\":\"\xc0\xaf\",\"age\":1}", "{\"name\":\"\xed\xa0\x80\",\"age\":1}",
      "{\"name\":\"a\x01\",\"age\":1}",
      "{\"name\":\"Al\",\"age\":3,\"name\":\"B\"}",
      /* valid JSON Schema-wise, not canonical: whitespace */
      "{\"name\": \"Al\",\"age\":3}"}},
    {"{\"type\":\"array\",\"items\":{\"type\":\"number\"},\"minItems\":1,\"maxItems\":3}",
     {"[1]", "[1.5,-2e10,0]", "[0.0,1E+2]", "[123456789012345,1.5e-99]"},
     {"[]", "[1,2,3,4]", "[1,]", "[01]", "[1.]", "[-]", "[\"a\"]", "[1e123]",
      "[1234567890123456]", "[.5]", "[+1]", "[1]]"}},
    {"{\"enum\":[\"red\",\"green\",null,1]}",
     {"\"red\"", "\"green\"", "null", "1"},
     {"\"blue\"", "\"re\"", "2", "\"red", "red", "1.0", "nul"}},
    {"{\"anyOf\":[{\"type\":\"string\",\"maxLength\":2},{\"type\":\"integer\"}]}",
     {"\"ab\"", "\"\"", "12", "\"é日\"", "\"\\n\\t\""},
     {"\"abc\"", "1.5", "true", "\"é日本\""}},
    {"{\"type\":[\"string\",\"null\"],\"minLength\":2}",
     {"\"ab\"", "null", "\"日本\""},
     {"\"a\"", "1", "\"\"", "\"日\""}},
    {"{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
     "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"]}},"
     "\"$ref\":\"#/$defs/node\"}",
     {"{\"v\":1}", "{\"v\":1,\"kids\":[]}", "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[{\"v\":4}]}]}"},
     {"{\"kids\":[]}", "{\"v\":1,\"kids\":[{}]}", "{\"v\":1,\"kids\":[{\"v\":\"x\"}]}", "{}"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"boolean\"},\"b\":{\"type\":\"null\"},"
     "\"c\":{\"const\":\"x\"}},\"required\":[\"b\"]}",
     {"{\"b\":null}", "{\"a\":true,\"b\":null}", "{\"b\":null,\"c\":\"x\"}",
      "{\"a\":false,\"b\":null,\"c\":\"x\"}", "{\"b\":null,\"a\":true}", "{\"c\":\"x\",\"b\":null,\"a\":false}"},
     {"{}", "{\"a\":true}", "{\"b\":null,\"c\":\"y\"}", "{\"b\":null,}", "{\"b\":null,\"b\":null}"}},
    {NULL,
     {"{}", "{\"a\":[1,{\"b\":null}],\"a\":\"x\"}", "{\"k\":\"v\",\"n\":-0.5e-3,\"t\":[true,false]}"},
     {"[]", "\"x\"", "{\"a\"}", "{\"a\":1,}", "{,}", "{\"a\":tru}", "1", "{\"a\":1}}"}},
    {"{\"type\":\"string\",\"minLength\":1,\"maxLength\":3}",
     {"\"a\"", "\"abc\"", "\"\\n\\t\"", "\"日本語\"", "\"\\u00e9\\/\""},
     {"\"\"", "\"abcd\"", "\"日本語x\"", "\"\\x\"", "\"a\nb\"", "\"\xff\"", "\"\xe6\x97\""}},
    {"{\"oneOf\":[{\"type\":\"boolean\"},{\"type\":\"array\",\"items\":{\"type\":\"string\"}}]}",
     {"true", "[\"a\"]", "[]", "[\"a\",\"b\"]"},
     {"[1]", "\"x\"", "[\"a\",]"}},
    {"{}",
     {"1", "\"x\"", "[1,{}]", "null", "{\"a\":{\"b\":[[]]}}", "-0.5"},
     {"", "[1,,2]", "{\"a\"}", "tru", "01"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"ab\":{\"type\":"
     "\"integer\"},\"abc\":{\"type\":\"integer\"}}}",
     {"{}", "{\"ab\":1}", "{\"a\":1,\"abc\":2}", "{\"a\":1,\"ab\":2,\"abc\":3}", "{\"abc\":1,\"a\":2}",
      "{\"ab\":1,\"abc\":2,\"a\":3}"},
     {"{\"abd\":1}", "{\"a\":1,\"a\":2}", "{\"ab\":1,}", "{\"abc\":1,\"ab\":2,\"abc\":3}"}},
    {"{\"type\":\"number\"}",
     {"-0", "1.25e-7", "123456789012345", "0.5E+10", "7"},
     {"+1", ".5", "1.2.3", "0x1", "NaN", "1e+", "-", "1e"}},
    {"{\"type\":\"array\",\"items\":false}", {"[]"}, {"[1]", "[[]]"}},
    {"{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"pattern\":"
     "\"^[a-z]{2}-\\\\d{3}$\"},\"d\":{\"type\":\"string\",\"format\":\"date\"},\"ip\":{\"type\":"
     "\"string\",\"format\":\"ipv4\"}},\"required\":[\"id\"]}",
     {"{\"id\":\"ab-123\"}", "{\"id\":\"zz-000\",\"d\":\"2024-02-28\"}",
      "{\"id\":\"ab-123\",\"ip\":\"192.168.0.1\"}",
      "{\"id\":\"ab-123\",\"d\":\"2000-12-31\",\"ip\":\"0.0.0.0\"}"},
     {"{\"id\":\"ab-1234\"}", "{\"id\":\"AB-123\"}", "{\"id\":\"ab-123\",\"d\":\"2024-02-30\"}",
      "{\"id\":\"ab-123\",\"d\":\"2024-13-01\"}", "{\"id\":\"ab-123\",\"ip\":\"256.1.1.1\"}",
      "{\"id\":\"ab-123\",\"ip\":\"01.1.1.1\"}", "{\"id\":\"ab-123\",\"d\":\"2024-1-01\"}",
      /* valid, not generated: a \u escape in a pattern string */
      "{\"id\":\"ab\\u002d123\"}"}},
    {"{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":-5,"
     "\"maximum\":120},\"p\":{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1.5},"
     "\"m\":{\"type\":\"integer\",\"multipleOf\":5,\"exclusiveMaximum\":100},\"old\":{\"type\":"
     "\"number\",\"minimum\":2.5,\"exclusiveMinimum\":true}}}",
     {"{\"n\":-5}", "{\"n\":120,\"p\":1.5}", "{\"p\":0.001,\"m\":95}",
      "{\"n\":0,\"p\":1,\"m\":-10,\"old\":2.6}", "{\"p\":0.00000000000001}",
      "{\"m\":-999999999999995}", "{\"old\":99999999999999.9}", "{\"n\":-0,\"m\":0}"},
     {"{\"n\":-6}", "{\"n\":121}", "{\"n\":1200}", "{\"p\":0}", "{\"p\":-0.5}", "{\"p\":1.51}",
      "{\"m\":100}", "{\"m\":7}", "{\"old\":2.5}",
      /* valid, not generated: 16 digits, an exponent, a fraction on a multipleOf */
      "{\"p\":0.000000000000001}",
      "{\"p\":1e-3}", "{\"m\":5.0}"}},
    {"{\"type\":\"number\",\"minimum\":0.1,\"maximum\":0.3}",
     {"0.1", "0.3", "0.25", "0.2999999999999", "0.10"},
     {"0.09999", "0.30001", "0", "1", "-0.2", "0.3000000000000001"}},
    /* a required name 'properties' does not define (its value: additionalProperties), a
     * property no value matches (left out), min/maxProperties, a $ref pointer */
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"enum\":[\"x\"],"
     "\"type\":\"integer\"}},\"required\":[\"a\",\"z\"],\"minProperties\":2,\"maxProperties\":2}",
     {"{\"a\":1,\"z\":null}", "{\"z\":[1],\"a\":2}"},
     {"{\"a\":1}", "{\"a\":1,\"z\":1,\"b\":1}", "{\"a\":1,\"b\":\"x\"}", "{\"z\":1}"}},
    {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"},\"minProperties\":1,"
     "\"maxProperties\":2}",
     {"{\"a\":1}", "{\"a\":1,\"b\":2}"},
     {"{}", "{\"a\":1,\"b\":2,\"c\":3}", "{\"a\":\"x\"}"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"null\"},\"b\":{\"type\":\"null\"},"
     "\"c\":{\"type\":\"null\"},\"x\":{\"type\":\"string\",\"maxLength\":2},\"y\":{\"$ref\":"
     "\"#/properties/x\"}},\"required\":[\"c\"],\"maxProperties\":2}",
     {"{\"c\":null}", "{\"a\":null,\"c\":null}", "{\"c\":null,\"b\":null}", "{\"y\":\"ab\",\"c\":null}"},
     {"{\"a\":null,\"b\":null}", "{\"a\":null,\"b\":null,\"c\":null}", "{\"c\":null,\"y\":\"abc\"}"}},
    {"{\"type\":\"object\",\"patternProperties\":{\"^x-[a-z]+$\":{\"type\":\"integer\"}},"
     "\"additionalProperties\":false,\"maxProperties\":2}",
     {"{}", "{\"x-a\":1}", "{\"x-ab\":1,\"x-c\":2}"},
     {"{\"y\":1}", "{\"x-a\":\"s\"}", "{\"x-A\":1}", "{\"x-a\":1,\"x-b\":2,\"x-c\":3}"}},
    {"{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"}},\"patternProperties\":"
     "{\"^x-\":{\"type\":\"integer\"}}}",
     {"{\"name\":\"a\"}", "{}"},
     {"{\"name\":1}", /* valid, not generated: a key of the pattern */ "{\"x-a\":1}"}},
    /* a $ref beside the type its schema has */
    {"{\"$defs\":{\"n\":{\"type\":\"integer\",\"maximum\":9}},\"type\":\"array\",\"items\":"
     "{\"$ref\":\"#/$defs/n\",\"type\":\"number\"}}",
     {"[]", "[9,-1]"},
     {"[10]", "[1.5]", "[\"a\"]"}},
    /* oneOf over disjoint alternatives: objects told apart by a required constant, literals */
    {"{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"a\"},\"x\":{\"type\":"
     "\"integer\"}},\"required\":[\"kind\"]},{\"$ref\":\"#/$defs/b\"}],\"$defs\":{\"b\":{\"type\":"
     "\"object\",\"properties\":{\"kind\":{\"enum\":[\"b\",\"c\"]},\"y\":{\"type\":\"string\"}},"
     "\"required\":[\"kind\"]}}}",
     {"{\"kind\":\"a\"}", "{\"kind\":\"a\",\"x\":1}", "{\"kind\":\"b\",\"y\":\"s\"}",
      "{\"y\":\"s\",\"kind\":\"c\"}"},
     {"{\"kind\":\"d\"}", "{\"x\":1}", "{\"kind\":\"a\",\"x\":\"s\"}",
      /* valid, not generated: a key of the other alternative */
      "{\"kind\":\"a\",\"y\":\"s\"}"}},
    {"{\"oneOf\":[{\"const\":\"ab\"},{\"enum\":[\"a\",\"abc\",2]}]}",
     {"\"ab\"", "\"a\"", "\"abc\"", "2"},
     {"\"b\"", "\"abcd\"", "3"}},
    /* a pattern matches anywhere in the string (a search), within the length bounds */
    {"{\"type\":\"string\",\"pattern\":\"b\",\"maxLength\":3}",
     {"\"b\"", "\"abc\"", "\"\\nb\"", "\"éb\"", "\"\\\"b\""},
     {"\"\"", "\"ac\"", "\"abcd\"", "\"aaab\"", "\"\\u0062\""}},
    {"{\"anyOf\":[{\"type\":\"string\",\"format\":\"uuid\"},{\"type\":\"string\",\"format\":"
     "\"date-time\"},{\"type\":\"string\",\"format\":\"time\"}]}",
     {"\"123e4567-e89b-12d3-a456-426614174000\"", "\"2024-01-02T03:04:05Z\"",
      "\"2024-01-02T03:04:05.123+05:30\"", "\"23:59:59-01:00\""},
     {"\"2024-01-02T24:00:00Z\"", "\"2024-01-02 03:04:05Z\"", "\"12:00:00\"",
      "\"123e4567-e89b-12d3-a456-42661417400\"", "\"2024-01-02T03:04:05\"",
      "\"2023-02-29T00:00:00Z\""}},
    {"{\"type\":\"array\",\"items\":{\"anyOf\":[{\"type\":\"string\",\"format\":\"email\"},"
     "{\"type\":\"string\",\"format\":\"ipv6\"},{\"type\":\"string\",\"format\":\"hostname\"},"
     "{\"type\":\"string\",\"format\":\"uri\"}]}}",
     {"[\"a@b.co\",\"x.y+z@mail.example.org\"]", "[\"::1\",\"fe80::1:2\",\"1:2:3:4:5:6:7:8\"]",
      "[\"example.com\",\"a-b.c\"]", "[\"https://example.com:8080/a/b?q=1#f\"]"},
     {"[\"@b.co\"]", "[\"a@@b.co\"]", "[\"a..b@c.co\"]", "[\"a@-b.co\"]", "[\"1:2:3:4:5:6:7:8:9\"]",
      "[\"1::2::3\"]", "[\"-a.com\"]", "[\"http://a b\"]", "[\"a_b.com\"]"}},

    /* additionalProperties as a schema with no properties: every value follows it (a
     * JSONSchemaBench case once accepted any value); unknown keywords are annotations */
    {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"},\"x-note\":1}",
     {"{}", "{\"a\":1,\"b\":-2}", "{\"\":0}"},
     {"{\"a\":\"x\"}", "{\"a\":1,\"b\":true}", "{\"a\":{}}"}},
    {"{\"type\":\"object\",\"properties\":{\"k\":{\"enum\":[\"a\\\"b\",\"é\"]}},\"required\":"
     "[\"k\"],\"additionalProperties\":false}",
     {"{\"k\":\"a\\\"b\"}", "{\"k\":\"é\"}"},
     {"{\"k\":\"a\"}", "{\"k\":\"\\u00e9\"}"}},
};
enum { NCASES = sizeof CASES / sizeof CASES[0] };

static numla_grammar *compile_case(const gcase *c, json_t **schema)
{
    numla_grammar *g = NULL;
    *schema = NULL;
    if (!c->schema) {
        CU_ASSERT_FATAL(numla_grammar_compile_json_object(&g) == NUMLA_STATUS_OK);
        *schema = json_pack("{s:s}", "type", "object");
        return g;
    }
    json_error_t e;
    *schema = json_loads(c->schema, 0, &e);
    NUMLA_ASSERT_MSG(*schema != NULL, "schema %s: %s", c->schema, e.text);
    if (!*schema)
        return NULL;
    numla_status st = numla_grammar_compile_schema(*schema, &g);
    NUMLA_ASSERT_MSG(st == NUMLA_STATUS_OK, "schema %s: %s", c->schema, numla_error_message());
    return g;
}

/* Whole, then byte by byte (accept_bytes is all or nothing: a refused byte leaves the state) */
static int accepts(const numla_grammar *g, const char *doc, size_t step)
{
    numla_grammar_matcher *m = NULL;
    CU_ASSERT_FATAL(numla_grammar_matcher_create(g, &m) == NUMLA_STATUS_OK);
    const size_t n = strlen(doc);
    int ok = 1;
    for (size_t i = 0; ok && i < n; i += step) {
        size_t k = n - i < step ? n - i : step;
        ok = numla_grammar_matcher_accept_bytes(m, (const uint8_t *)doc + i, k);
    }
    ok = ok && numla_grammar_matcher_is_complete(m);
    numla_grammar_matcher_destroy(&m);
    return ok;
}

/* Token by token: the longest vocabulary piece that starts the rest, which the mask must allow;
 * at the end the mask must allow EOS. 1: the whole document went through. */
static int accepts_tokens(const numla_grammar *g, const numla_grammar_vocab *v, const char *doc)
{
    numla_grammar_matcher *m = NULL;
    CU_ASSERT_FATAL(numla_grammar_matcher_create(g, &m) == NUMLA_STATUS_OK);
    uint64_t mask[(VOCAB + 63) / 64];
    const size_t n = strlen(doc);
    int ok = 1;
    for (size_t i = 0; ok && i < n;) {
        int32_t best = -1;
        size_t bl = 0;
        for (int32_t t = 0; t < EOS_ID; t++)
            if (vlens[t] > bl && vlens[t] <= n - i && !memcmp(vbytes[t], doc + i, vlens[t])) {
                best = t;
                bl = vlens[t];
            }
        CU_ASSERT_FATAL(numla_grammar_matcher_fill_mask(m, v, mask) == NUMLA_STATUS_OK);
        CU_ASSERT(!mask_has(mask, EOS_ID) || numla_grammar_matcher_is_complete(m));
        if (!mask_has(mask, best)) {
            ok = 0;
            /* the single byte may still be allowed: take it if so */
            if (bl > 1 && mask_has(mask, (uint8_t)doc[i])) {
                best = (uint8_t)doc[i];
                bl = 1;
                ok = 1;
            }
        }
        if (ok)
            CU_ASSERT_FATAL(numla_grammar_matcher_accept_token(m, v, best) == NUMLA_STATUS_OK);
        i += bl;
    }
    if (ok) {
        CU_ASSERT_FATAL(numla_grammar_matcher_fill_mask(m, v, mask) == NUMLA_STATUS_OK);
        ok = mask_has(mask, EOS_ID);
        CU_ASSERT_EQUAL(ok, numla_grammar_matcher_is_complete(m));
    }
    numla_grammar_matcher_destroy(&m);
    return ok;
}

static void test_documents(void)
{
    numla_grammar_vocab *v = small_vocab();
    numla_test_rng rng = {7};
    for (int c = 0; c < NCASES; c++) {
        json_t *schema;
        numla_grammar *g = compile_case(&CASES[c], &schema);
        if (!g)
            continue;
        for (int k = 0; k < 8 && CASES[c].good[k]; k++) {
            const char *d = CASES[c].good[k];
            json_t *j = json_loads(d, JSON_DECODE_ANY, NULL);
            NUMLA_ASSERT_MSG(j && valid(j, schema, schema), "case %d: %s is not valid", c, d);
            json_decref(j);
            size_t step = 1 + numla_test_rng_u64(&rng) % 5;
            NUMLA_ASSERT_MSG(accepts(g, d, strlen(d) ? strlen(d) : 1), "case %d: %s refused", c, d);
            NUMLA_ASSERT_MSG(accepts(g, d, 1), "case %d: %s refused byte by byte", c, d);
            NUMLA_ASSERT_MSG(accepts(g, d, step), "case %d: %s refused in %zu pieces", c, d, step);
            NUMLA_ASSERT_MSG(accepts_tokens(g, v, d), "case %d: %s refused token by token", c, d);
        }
        for (int k = 0; k < 12 && CASES[c].bad[k]; k++) {
            const char *d = CASES[c].bad[k];
            NUMLA_ASSERT_MSG(!accepts(g, d, 1), "case %d: %s accepted byte by byte", c, d);
            NUMLA_ASSERT_MSG(!accepts(g, d, strlen(d) ? strlen(d) : 1), "case %d: %s accepted", c,
                             d);
            NUMLA_ASSERT_MSG(!accepts_tokens(g, v, d), "case %d: %s accepted token by token", c,
                             d);
        }
        numla_grammar_destroy(&g);
        json_decref(schema);
    }
    numla_grammar_vocab_destroy(&v);
}

/* The mask is what feeding each token says, at states reached by prefixes of the documents. */
static void test_mask_is_bytes(void)
{
    numla_grammar_vocab *v = small_vocab();
    uint64_t mask[(VOCAB + 63) / 64];
    int checked = 0;
    for (int c = 0; c < NCASES; c++) {
        json_t *schema;
        numla_grammar *g = compile_case(&CASES[c], &schema);
        if (!g)
            continue;
        for (int k = 0; k < 8 && CASES[c].good[k]; k++) {
            const char *d = CASES[c].good[k];
            const size_t n = strlen(d);
            for (size_t p = 0; p <= n; p++) {
                numla_grammar_matcher *m = NULL;
                CU_ASSERT_FATAL(numla_grammar_matcher_create(g, &m) == NUMLA_STATUS_OK);
                CU_ASSERT_FATAL(numla_grammar_matcher_accept_bytes(m, (const uint8_t *)d, p));
                CU_ASSERT_FATAL(numla_grammar_matcher_fill_mask(m, v, mask) == NUMLA_STATUS_OK);
                for (int32_t t = 0; t < EOS_ID; t++) {
                    numla_grammar_matcher *m2 = NULL;
                    CU_ASSERT_FATAL(numla_grammar_matcher_create(g, &m2) == NUMLA_STATUS_OK);
                    numla_grammar_matcher_accept_bytes(m2, (const uint8_t *)d, p);
                    int want = numla_grammar_matcher_accept_bytes(m2, vbytes[t], vlens[t]);
                    NUMLA_ASSERT_MSG(mask_has(mask, t) == want,
                                     "case %d, \"%.*s\" + token %d (\"%.*s\"): mask %d, bytes %d",
                                     c, (int)p, d, t, (int)vlens[t], (const char *)vbytes[t],
                                     mask_has(mask, t), want);
                    numla_grammar_matcher_destroy(&m2);
                    checked++;
                }
                CU_ASSERT_EQUAL(mask_has(mask, EOS_ID), numla_grammar_matcher_is_complete(m));
                numla_grammar_matcher_destroy(&m);
            }
        }
        numla_grammar_destroy(&g);
        json_decref(schema);
    }
    CU_ASSERT(checked > 100000);
    numla_grammar_vocab_destroy(&v);
}

/* Inside a bounded string, at every room left 0..40 characters, the mask is what feeding each
 * token says: a vocabulary with plain tokens (whole characters, no quote or backslash) of 1 to
 * 88 characters of 1-, 2- and 3-byte characters (more than the room, so every room takes the
 * rows by count), and tokens that end the string or escape. */
static void test_bounded_string_mask(void)
{
    numla_synthetic_vocab *sv = NULL;
    CU_ASSERT_FATAL(numla_synthetic_vocab_create(NUMLA_SYNTHETIC_VOCAB_MIN, &sv) ==
                    NUMLA_STATUS_OK);
    const uint8_t *const *sb;
    const size_t *sl;
    numla_synthetic_vocab_tokens(sv, &sb, &sl);
    enum { NS = NUMLA_SYNTHETIC_VOCAB_MIN, MAXC = 44, NX = 6 * MAXC, NV = NS + NX };
    static const char *const unit[] = {"a", "é", "日", "a日", "x\"", "\\n"};
    static char extra[NX][MAXC * 6 + 1];
    const uint8_t **vb = malloc(NV * sizeof *vb);
    size_t *vl = malloc(NV * sizeof *vl);
    uint64_t *mask = malloc((NV + 63) / 64 * sizeof *mask);
    CU_ASSERT_FATAL(vb && vl && mask);
    for (int i = 0; i < NS; i++) {
        vb[i] = sb[i];
        vl[i] = sl[i];
    }
    for (int u = 0; u < 6; u++)
        for (int k = 1; k <= MAXC; k++) { /* k units (k - 1 b and an ending for the last two) */
            char *e = extra[u * MAXC + k - 1];
            e[0] = 0;
            for (int j = 0; j < k - (u >= 4); j++)
                strcat(e, u >= 4 ? "b" : unit[u]);
            if (u >= 4)
                strcat(e, unit[u]);
            vb[NS + u * MAXC + k - 1] = (const uint8_t *)e;
            vl[NS + u * MAXC + k - 1] = strlen(e);
        }
    const int32_t eos = numla_synthetic_vocab_eos(sv);
    numla_grammar_vocab *v = NULL;
    CU_ASSERT_FATAL(numla_grammar_vocab_create(NV, vb, vl, &eos, 1, &v) == NUMLA_STATUS_OK);
    /* the schema, its string's maxLength, what opens it, the character that fills it */
    static const struct {
        const char *schema, *open, *fill;
        int max;
    } S[] = {
        {"{\"type\":\"string\",\"maxLength\":40}", "\"", "x", 40},
        {"{\"type\":\"string\",\"minLength\":3,\"maxLength\":40,\"pattern\":\"a\"}", "\"a",
         "x", 39},
        {"{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"maxLength\":38}}}",
         "{\"s\":\"", "日", 38},
    };
    int checked = 0, plain_allowed = 0;
    char prefix[256];
    for (size_t c = 0; c < sizeof S / sizeof S[0]; c++) {
        json_t *schema = json_loads(S[c].schema, 0, NULL);
        numla_grammar *g = NULL;
        CU_ASSERT_FATAL(schema && numla_grammar_compile_schema(schema, &g) == NUMLA_STATUS_OK);
        for (int k = 0; k <= S[c].max; k++) { /* room left: S[c].max - k */
            snprintf(prefix, sizeof prefix, "%s", S[c].open);
            for (int j = 0; j < k; j++)
                strcat(prefix, S[c].fill);
            const size_t pn = strlen(prefix);
            numla_grammar_matcher *m = NULL;
            CU_ASSERT_FATAL(numla_grammar_matcher_create(g, &m) == NUMLA_STATUS_OK);
            CU_ASSERT_FATAL(numla_grammar_matcher_accept_bytes(m, (const uint8_t *)prefix, pn));
            CU_ASSERT_FATAL(numla_grammar_matcher_fill_mask(m, v, mask) == NUMLA_STATUS_OK);
            for (int32_t t = 0; t < NV; t++) {
                if (!vl[t])
                    continue;
                numla_grammar_matcher *m2 = NULL;
                CU_ASSERT_FATAL(numla_grammar_matcher_create(g, &m2) == NUMLA_STATUS_OK);
                numla_grammar_matcher_accept_bytes(m2, (const uint8_t *)prefix, pn);
                const int want = numla_grammar_matcher_accept_bytes(m2, vb[t], vl[t]);
                NUMLA_ASSERT_MSG(mask_has(mask, t) == want,
                                 "schema %zu, room %d, token %d (%zu bytes): mask %d, bytes %d", c,
                                 S[c].max - k, t, vl[t], mask_has(mask, t), want);
                plain_allowed += want && t >= NS && t < NS + 4 * MAXC;
                numla_grammar_matcher_destroy(&m2);
                checked++;
            }
            numla_grammar_matcher_destroy(&m);
        }
        numla_grammar_destroy(&g);
        json_decref(schema);
    }
    CU_ASSERT(checked > 80000);
    CU_ASSERT(plain_allowed > 1000); /* the long plain tokens are allowed where they fit */
    numla_grammar_vocab_destroy(&v);
    numla_synthetic_vocab_destroy(&sv);
    free(vb);
    free(vl);
    free(mask);
}

/* Random logits through the sampler's mask: every document parses and validates. */
static void test_generated_documents_validate(void)
{
    numla_grammar_vocab *v = small_vocab();
    float *logits = malloc(VOCAB * sizeof *logits);
    int32_t *out = malloc(4096 * sizeof *out);
    char *text = malloc(1 << 16);
    CU_ASSERT_FATAL(logits && out && text);
    int docs = 0, closed = 0;
    for (int c = 0; c < NCASES; c++) {
        json_t *schema;
        numla_grammar *g = compile_case(&CASES[c], &schema);
        if (!g)
            continue;
        for (uint64_t seed = 1; seed <= 40; seed++) {
            numla_sampling_params p;
            numla_sampling_params_default(&p);
            p.seed = seed * 7919 + (uint64_t)c;
            p.has_seed = 1;
            p.temperature = seed % 5 == 0 ? 0.0 : 1.0;
            p.top_k = seed % 3 == 0 ? 5 : 0;
            numla_sampler *s = NULL;
            CU_ASSERT_FATAL(numla_sampler_create(&p, VOCAB, &s) == NUMLA_STATUS_OK);
            CU_ASSERT_FATAL(numla_sampler_set_grammar(s, g, v) == NUMLA_STATUS_OK);
            numla_test_rng rng = {seed * 31 + (uint64_t)c};
            size_t len = 0;
            int n = 0, ended = 0;
            const int32_t eos = EOS_ID;
            while (n < 4000 && !ended) {
                for (int32_t t = 0; t < VOCAB; t++)
                    logits[t] = (float)numla_test_rng_normal(&rng) * 2.0f;
                /* lean towards closing things so that documents end */
                logits['"'] += 2.0f;
                logits[']'] += 2.0f;
                logits['}'] += 2.0f;
                logits[EOS_ID] += 2.0f;
                int32_t tok;
                numla_status st = numla_sampler_sample(s, logits, &tok, NULL);
                NUMLA_ASSERT_MSG(st == NUMLA_STATUS_OK, "%s", numla_error_message());
                if (st != NUMLA_STATUS_OK)
                    break;
                CU_ASSERT_FATAL(numla_sampler_add_tokens(s, &tok, 1, 1) == NUMLA_STATUS_OK);
                if (tok != EOS_ID && len + vlens[tok] < (1 << 16)) {
                    memcpy(text + len, vbytes[tok], vlens[tok]);
                    len += vlens[tok];
                }
                n++;
                if (numla_sampler_is_stop(s, tok, &eos, 1) || numla_sampler_grammar_closed(s)) {
                    ended = 1;
                    closed += tok != EOS_ID;
                }
            }
            text[len] = 0;
            NUMLA_ASSERT_MSG(ended, "case %d seed %llu: no end in %d tokens: %.200s", c,
                             (unsigned long long)seed, n, text);
            if (ended) {
                json_error_t e;
                json_t *j = json_loadb(text, len, JSON_DECODE_ANY, &e);
                NUMLA_ASSERT_MSG(j != NULL, "case %d seed %llu: %s does not parse: %s", c,
                                 (unsigned long long)seed, text, e.text);
                NUMLA_ASSERT_MSG(j && valid(j, schema, schema),
                                 "case %d seed %llu: %s does not validate", c,
                                 (unsigned long long)seed, text);
                json_decref(j);
                docs++;
            }
            numla_sampler_destroy(&s);
        }
        numla_grammar_destroy(&g);
        json_decref(schema);
    }
    CU_ASSERT(docs == NCASES * 40);
    CU_ASSERT(closed > 0);
    free(logits);
    free(out);
    free(text);
    numla_grammar_vocab_destroy(&v);
}

static void test_refusals(void)
{
    static const char *const cases[][2] = {
        {"{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", "'pattern' /(a)\\1/: at offset 4: backref"},
        {"{\"type\":\"string\",\"pattern\":\"(?=a)\"}", "lookaround is not supported"},
        {"{\"type\":\"string\",\"pattern\":\"^a$\",\"maxLength\":0}", "nothing matches"},
        {"{\"type\":\"string\",\"format\":\"regex\"}", "'format' \"regex\""},
        {"{\"type\":\"string\",\"format\":\"date\",\"pattern\":\"a\"}", "'pattern' together"},
        {"{\"type\":\"object\",\"properties\":{\"x-a\":{}},\"patternProperties\":"
         "{\"^x-\":{\"type\":\"integer\"}}}", "matching the property \"x-a\""},
        {"{\"type\":\"object\",\"patternProperties\":{\"(?=a)\":{}}}", "lookaround"},
        {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "leave no number"},
        {"{\"$defs\":{\"n\":{\"type\":\"integer\"}},\"$ref\":\"#/$defs/n\",\"type\":\"string\"}",
         "a 'type' its schema does not imply"},
        {"{\"$defs\":{\"n\":{}},\"$ref\":\"#/$defs/n\",\"type\":\"string\"}",
         "a 'type' its schema does not imply"},
        {"{\"oneOf\":[{\"const\":1},{\"enum\":[2,1.0]}]}", "'oneOf' whose alternatives 0 and 1"},
        {"{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"k\":{\"const\":1}}},{\"type\":"
         "\"object\",\"properties\":{\"k\":{\"const\":2}},\"required\":[\"k\"]}]}", "'oneOf'"},
        {"{\"type\":\"integer\",\"minimum\":0.2,\"maximum\":0.8}", "no number written"},
        {"{\"type\":\"number\",\"minimum\":1e20}", "'minimum' beyond 1e16"},
        {"{\"type\":\"number\",\"exclusiveMaximum\":0.12345678901234567}", "significant digits"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\",\"multipleOf\":0.5}}}",
         "schema.properties.a: 'multipleOf'"},
        {"{\"type\":\"array\",\"prefixItems\":[{}]}", "'prefixItems'"},
        {"{\"not\":{}}", "'not'"},
        {"{\"type\":\"array\",\"items\":[{}]}", "'items' as a list"},
        {"{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"string\",\"maxLength\":3}]}", "'oneOf'"},
        {"{\"allOf\":[{\"type\":\"string\"},{\"maxLength\":3}]}", "'allOf'"},
        {"{\"$ref\":\"http://x/y\"}", "'$ref'"},
        {"{\"$ref\":\"#/$defs/missing\"}", "names no schema"},
        {"{\"enum\":[]}", "'enum'"},
        {"{\"type\":\"string\",\"enum\":[1,2]}", "'enum'"},
        {"{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", "'minLength'"},
        {"{\"type\":\"object\",\"required\":[\"a\"],\"additionalProperties\":false}",
         "matches nothing"},
        {"{\"type\":\"strings\"}", "'type'"},
        {"false", "false"},
        {"{\"type\":\"string\",\"enum\":[\"a\"],\"maxLength\":3}", "'enum'"},
        {"{\"type\":\"object\",\"minProperties\":1,\"additionalProperties\":false}",
         "matches nothing"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"minProperties\":2,"
         "\"maxProperties\":1}", "matches nothing"},
        {"{\"type\":\"array\",\"uniqueItems\":true}", "'uniqueItems'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *s = json_loads(cases[i][0], JSON_DECODE_ANY, NULL);
        CU_ASSERT_FATAL(s != NULL);
        numla_grammar *g = NULL;
        numla_status st = numla_grammar_compile_schema(s, &g);
        NUMLA_ASSERT_MSG(st != NUMLA_STATUS_OK && !g, "%s compiled", cases[i][0]);
        NUMLA_ASSERT_MSG(st == NUMLA_STATUS_OK || strstr(numla_error_message(), cases[i][1]),
                         "%s: message \"%s\" does not name %s", cases[i][0],
                         numla_error_message(), cases[i][1]);
        numla_grammar_destroy(&g);
        json_decref(s);
    }
}

/* More than 64 properties: the keys in the schema's order only (a valid document in another
 * order is refused, never an invalid one accepted). */
static void test_many_properties(void)
{
    json_t *props = json_object(), *schema = json_pack("{s:s,s:o,s:[s,s]}", "type", "object",
                                                       "properties", props, "required", "p3",
                                                       "p69");
    for (int i = 0; i < 70; i++) {
        char k[8];
        snprintf(k, sizeof k, "p%d", i);
        json_object_set_new(props, k, json_pack("{s:s}", "type", "integer"));
    }
    numla_grammar *g = NULL;
    CU_ASSERT_FATAL(numla_grammar_compile_schema(schema, &g) == NUMLA_STATUS_OK);
    CU_ASSERT(accepts(g, "{\"p3\":1,\"p60\":0,\"p69\":2}", 1000));
    CU_ASSERT(accepts(g, "{\"p0\":0,\"p3\":1,\"p40\":5,\"p69\":2}", 1));
    CU_ASSERT(!accepts(g, "{\"p3\":1}", 1000));             /* p69 missing */
    CU_ASSERT(!accepts(g, "{\"p69\":2,\"p3\":1}", 1000)); /* valid, out of order */
    CU_ASSERT(!accepts(g, "{\"p3\":1,\"p3\":1,\"p69\":2}", 1000));
    CU_ASSERT(!accepts(g, "{\"p3\":1,\"p70\":1,\"p69\":2}", 1000));
    numla_grammar_destroy(&g);
    json_decref(schema);
}

/* numla run's lines: response_format through the one validation pass, errors naming the field. */
static void test_request_response_format(void)
{
    numla_tokenizer *tok = NULL;
    CU_ASSERT_FATAL(numla_tokenizer_load(numla_test_source_path("tests/golden/tokenizer/bpe1k"),
                                         &tok) == NUMLA_STATUS_OK);
    numla_request_limits lim = {.vocab_size = 1000, .max_context = 4096, .tokenizer = tok};
    static const char *const lines[][2] = {
        {"{\"id\":1,\"prompt_tokens\":[1],\"response_format\":{\"type\":\"json_object\"}}", ""},
        {"{\"id\":1,\"prompt_tokens\":[1],\"response_format\":{\"type\":\"text\"}}", ""},
        {"{\"id\":1,\"prompt_tokens\":[1],\"response_format\":null}", ""},
        {"{\"id\":1,\"prompt_tokens\":[1],\"response_format\":{\"type\":\"json_schema\","
         "\"json_schema\":{\"name\":\"x\",\"strict\":true,\"schema\":{\"type\":\"integer\"}}}}", ""},
        {"{\"id\":1,\"prompt_tokens\":[1],\"response_format\":{\"type\":\"json_schema\","
         "\"json_schema\":{\"name\":\"x\",\"schema\":{\"type\":\"string\",\"pattern\":\"(?!a)\"}}}}",
         "field \"response_format.json_schema.schema\" is outside the supported subset "
         "(docs/serving.md): schema: 'pattern' /(?!a)/: at offset 1: lookaround is not "
         "supported"},
        {"{\"id\":1,\"prompt_tokens\":[1],\"response_format\":{\"type\":\"yaml\"}}",
         "field \"response_format.type\""},
        {"{\"id\":1,\"prompt_tokens\":[1],\"response_format\":{\"type\":\"json_object\","
         "\"json_schema\":{}}}", "field \"response_format.json_schema\" is not a field"},
        {"{\"id\":1,\"prompt_tokens\":[1],\"response_format\":{\"type\":\"json_schema\","
         "\"json_schema\":{\"name\":\"x\"}}}", "field \"response_format.json_schema.schema\""},
        {"{\"id\":1,\"prompt_tokens\":[1],\"ignore_eos\":true,\"response_format\":{\"type\":"
         "\"json_object\"}}", "ignore_eos"},
        {"{\"id\":1,\"prompt_tokens\":[1],\"response_format\":\"json\"}", "field \"response_format\""},
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        numla_request r;
        CU_ASSERT_FATAL(numla_request_parse(lines[i][0], strlen(lines[i][0]), 1, &lim, &r) ==
                        NUMLA_STATUS_OK);
        const int want_ok = !lines[i][1][0];
        NUMLA_ASSERT_MSG(want_ok ? !r.error[0] : strstr(r.error, lines[i][1]) != NULL,
                         "%s: error \"%s\"", lines[i][0], r.error);
        const int has_grammar = r.grammar != NULL;
        CU_ASSERT_EQUAL(has_grammar, want_ok && !strstr(lines[i][0], "\"text\"") &&
                                         !strstr(lines[i][0], "null"));
        numla_request_free(&r);
    }
    /* no tokenizer: refused */
    lim.tokenizer = NULL;
    numla_request r;
    CU_ASSERT_FATAL(numla_request_parse(lines[0][0], strlen(lines[0][0]), 1, &lim, &r) ==
                    NUMLA_STATUS_OK);
    CU_ASSERT(strstr(r.error, "tokenizer") != NULL);
    CU_ASSERT(r.grammar == NULL);
    numla_request_free(&r);
    numla_tokenizer_destroy(&tok);
}

/* The fuzz target over its corpus and seeded mutations of it. */
int numla_fuzz_json_schema_run(const uint8_t *data, size_t size);

static void test_fuzz_json_schema(void)
{
    static const char *const seeds[] = {"corpus_a", "corpus_b", "corpus_c",
                                        "corpus_d", "corpus_e", "corpus_f"};
    numla_test_rng rng = {99};
    int ran = 0;
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "tests/fuzz/corpus/json_schema/%s.txt", seeds[i]);
        size_t n = 0;
        char *seed = numla_test_read_file(numla_test_source_path(rel), &n);
        NUMLA_ASSERT_MSG(seed != NULL, "cannot read %s", rel);
        if (!seed)
            continue;
        CU_ASSERT_EQUAL(numla_fuzz_json_schema_run((const uint8_t *)seed, n), 1);
        uint8_t *buf = malloc(n + 1);
        for (int r = 0; buf && r < 200; r++) {
            memcpy(buf, seed, n);
            size_t len = numla_test_mutate_json(buf, n, 0, &rng);
            CU_ASSERT_EQUAL_FATAL(numla_fuzz_json_schema_run(buf, len), 1);
            ran++;
        }
        free(buf);
        free(seed);
    }
    CU_ASSERT(ran >= 1200);
}

NUMLA_TEST_SUITE(grammar, NULL, NULL, NUMLA_TEST(test_documents), NUMLA_TEST(test_mask_is_bytes),
                 NUMLA_TEST(test_bounded_string_mask),
                 NUMLA_TEST(test_generated_documents_validate), NUMLA_TEST(test_refusals), NUMLA_TEST(test_many_properties),
                 NUMLA_TEST(test_request_response_format), NUMLA_TEST(test_fuzz_json_schema))
