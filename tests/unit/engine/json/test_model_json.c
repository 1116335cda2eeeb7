/* Tests for engine/json/model_json.c: a model file's integers beyond 64 bits read as reals (the
 * 1e30 model_max_length transformers writes), every other integer exact, the caller's flags
 * kept, and errors that name the file, line and column. */
#include "test_util.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/json/model_json.h"

static json_t *parse(const char *text, size_t flags)
{
    json_t *root = NULL;
    numla_status s = numla_json_text_parse(text, strlen(text), flags, "t.json", &root);
    CU_ASSERT_EQUAL(s, NUMLA_STATUS_OK);
    if (s != NUMLA_STATUS_OK)
        fprintf(stderr, "model_json: %s\n", numla_error_message());
    return root;
}

/* The published sentinel becomes a real equal to 1e30; the integers around it stay integers. */
static void test_sentinel_is_a_real(void)
{
    json_t *o = parse("{\"add_bos_token\": true, \"model_max_length\": "
                      "1000000000000000019884624838656, \"big\": 9223372036854775807, "
                      "\"small\": -9223372036854775808, \"n\": 163584}", 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(o);
    json_t *m = json_object_get(o, "model_max_length");
    CU_ASSERT(json_is_real(m));
    CU_ASSERT_EQUAL(json_real_value(m), 1e30);
    CU_ASSERT(json_is_integer(json_object_get(o, "big")));
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(o, "big")), INT64_MAX);
    CU_ASSERT(json_is_integer(json_object_get(o, "small")));
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(o, "small")), INT64_MIN);
    CU_ASSERT(json_is_integer(json_object_get(o, "n")));
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(o, "n")), 163584);
    CU_ASSERT(json_is_true(json_object_get(o, "add_bos_token")));
    json_decref(o);
}

/* Several huge integers (negative, in arrays, at the very end of the text, just past int64). */
static void test_several_and_edges(void)
{
    json_t *a = parse("[9223372036854775808, -9223372036854775809, 1, "
                      "[123456789012345678901234567890], "
                      "{\"x\": -1000000000000000019884624838656}]",
                      0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT(json_is_real(json_array_get(a, 0)));
    CU_ASSERT_EQUAL(json_real_value(json_array_get(a, 0)), 9223372036854775808.0);
    CU_ASSERT(json_is_real(json_array_get(a, 1)));
    CU_ASSERT(json_real_value(json_array_get(a, 1)) < -9.2e18);
    CU_ASSERT(json_is_integer(json_array_get(a, 2)));
    CU_ASSERT(json_is_real(json_array_get(json_array_get(a, 3), 0)));
    CU_ASSERT_EQUAL(json_real_value(json_object_get(json_array_get(a, 4), "x")), -1e30);
    json_decref(a);
    json_t *v = parse("1000000000000000019884624838656", JSON_DECODE_ANY);
    CU_ASSERT(json_is_real(v));
    json_decref(v);
    /* not NUL-terminated: the length bounds the text */
    const char buf[] = "{\"m\": 1000000000000000019884624838656}garbage";
    json_t *o = NULL;
    CU_ASSERT_EQUAL(numla_json_text_parse(buf, 38, 0, "t.json", &o), NUMLA_STATUS_OK);
    CU_ASSERT(json_is_real(json_object_get(o, "m")));
    json_decref(o);
}

/* The caller's flags stay: duplicates refused with REJECT_DUPLICATES (after a repair too). */
static void test_flags_kept(void)
{
    const char *dup = "{\"a\": 1000000000000000019884624838656, \"a\": 2}";
    json_t *o = NULL;
    CU_ASSERT_EQUAL(numla_json_text_parse(dup, strlen(dup), JSON_REJECT_DUPLICATES, "cfg.json", &o),
                    NUMLA_STATUS_FORMAT);
    CU_ASSERT_PTR_NULL(o);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "cfg.json:1:"));
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "duplicate"));
    o = parse(dup, 0);
    json_decref(o);
    /* a bare scalar needs JSON_DECODE_ANY */
    CU_ASSERT_EQUAL(numla_json_text_parse("12", 2, 0, "s.json", &o), NUMLA_STATUS_FORMAT);
}

/* What cannot be read names the file, line and column (of the caller's text). */
static void test_errors_name_the_place(void)
{
    json_t *o = NULL;
    const char *bad = "{\n  \"m\": 1000000000000000019884624838656, \"x\": [1,]\n}";
    CU_ASSERT_EQUAL(numla_json_text_parse(bad, strlen(bad), 0, "tokenizer_config.json", &o),
                    NUMLA_STATUS_FORMAT);
    CU_ASSERT_PTR_NULL(o);
    const char *msg = numla_error_message();
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "tokenizer_config.json:2:"));
    /* the column counts the caller's text, not the repaired copy */
    int line = 0, col = 0;
    const char *p = strstr(msg, "tokenizer_config.json:");
    CU_ASSERT(p && sscanf(p, "tokenizer_config.json:%d:%d", &line, &col) == 2);
    CU_ASSERT_EQUAL(line, 2);
    CU_ASSERT(col >= 48 && col <= 50);
    /* a real beyond double's range stays an error */
    const char *inf = "{\"x\": 1e400}";
    CU_ASSERT_EQUAL(numla_json_text_parse(inf, strlen(inf), 0, "g.json", &o), NUMLA_STATUS_FORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "g.json:1:"));
    /* an integer of 400 digits turns into a real that still overflows: an error, not a loop */
    char big[512];
    memset(big, '9', 400);
    big[400] = 0;
    char text[600];
    snprintf(text, sizeof text, "{\"x\": %s}", big);
    CU_ASSERT_EQUAL(numla_json_text_parse(text, strlen(text), 0, "h.json", &o),
                    NUMLA_STATUS_FORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "h.json:1:"));
    /* more huge integers than the reader repairs */
    char many[8192] = "[";
    for (int i = 0; i < 80; i++)
        strcat(many, i ? ",1000000000000000019884624838656" : "1000000000000000019884624838656");
    strcat(many, "]");
    CU_ASSERT_EQUAL(numla_json_text_parse(many, strlen(many), 0, "m.json", &o),
                    NUMLA_STATUS_FORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "too many integers"));
}

static void test_file_read(void)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/model_json_tc.json", numla_test_tmpdir());
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("{\"bos_token\": \"[BOS]\", \"model_max_length\": 1000000000000000019884624838656}\n", f);
    fclose(f);
    json_t *o = NULL;
    CU_ASSERT_EQUAL(numla_json_file_read(path, JSON_ALLOW_NUL, &o), NUMLA_STATUS_OK);
    CU_ASSERT_PTR_NOT_NULL_FATAL(o);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(o, "bos_token")), "[BOS]");
    CU_ASSERT(json_is_real(json_object_get(o, "model_max_length")));
    json_decref(o);
    o = NULL;
    snprintf(path, sizeof path, "%s/model_json_absent.json", numla_test_tmpdir());
    CU_ASSERT_EQUAL(numla_json_file_read(path, 0, &o), NUMLA_STATUS_IO);
    CU_ASSERT_PTR_NULL(o);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "model_json_absent.json"));
    /* a directory is not a file */
    CU_ASSERT_EQUAL(numla_json_file_read(numla_test_tmpdir(), 0, &o), NUMLA_STATUS_IO);
}

NUMLA_TEST_SUITE(model_json, NULL, NULL, NUMLA_TEST(test_sentinel_is_a_real),
                 NUMLA_TEST(test_several_and_edges), NUMLA_TEST(test_flags_kept),
                 NUMLA_TEST(test_errors_name_the_place), NUMLA_TEST(test_file_read))
