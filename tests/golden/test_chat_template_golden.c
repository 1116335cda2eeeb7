/* Golden tests for engine/text/chat_template: every conversation of tests/golden/chat/cases.json
 * rendered by transformers' apply_chat_template (scripts/make_chat_golden.py) with and without
 * the generation prompt, byte for byte, each template recognised from a tokenizer_config.json
 * holding its real string; plus the load errors, forced names and unsupported messages. */
#include "test_util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/text/chat_template.h"

#include "chat_golden_cases.h"

static json_t *load_golden(const char *file)
{
    char rel[256];
    snprintf(rel, sizeof rel, "tests/golden/chat/%s", file);
    json_error_t err;
    json_t *j = json_load_file(numla_test_source_path(rel), 0, &err);
    NUMLA_ASSERT_MSG(j != NULL, "%s: %s", rel, err.text);
    return j;
}

/* A tokenizer_config.json text carrying the template string and special tokens of entry e of
 * templates.json (bos as an AddedToken object, as DeepSeek's configs write it). */
static char *config_for(json_t *e, const char *template_override)
{
    json_t *cfg = json_pack("{s:{s:s, s:s}, s:s, s:s, s:b}", "bos_token", "__type", "AddedToken",
                            "content", json_string_value(json_object_get(e, "bos_token")),
                            "eos_token", json_string_value(json_object_get(e, "eos_token")),
                            "chat_template",
                            template_override ? template_override
                                              : json_string_value(json_object_get(e, "template")),
                            "add_bos_token", 1);
    char *s = json_dumps(cfg, 0);
    json_decref(cfg);
    return s;
}

static numla_chat_template *load_named(json_t *templates, const char *name)
{
    char *cfg = config_for(json_object_get(templates, name), NULL);
    numla_chat_template *t = NULL;
    numla_status s = numla_chat_template_load_json(cfg, NULL, &t);
    free(cfg);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OK, "load %s: %s", name, numla_error_message());
    if (t)
        NUMLA_ASSERT_MSG(strcmp(numla_chat_template_name(t), name) == 0,
                         "template %s recognised as %s", name, numla_chat_template_name(t));
    return t;
}

/* The render check's context: templates.json, and how many renders each built-in template
 * was given (each must get at least one). */
typedef struct golden_templates {
    json_t *templates;
    size_t per_template[4];
} golden_templates;

/* Case r: its conversation (an array of role/content messages) rendered by the template it
 * names, with or without the generation prompt. */
static numla_status render_case(void *ctx, json_t *convs, json_t *r, char **got, size_t *len)
{
    golden_templates *g = ctx;
    const char *name = json_string_value(json_object_get(r, "template"));
    for (int k = 0; k < 4; k++)
        if (strcmp(name, numla_chat_template_names()[k]) == 0)
            g->per_template[k]++;
    numla_chat_template *t = load_named(g->templates, name);
    conv_msgs c = messages_of(json_array_get(convs, (size_t)json_integer_value(json_object_get(r, "conversation"))));
    numla_status s = t ? numla_chat_template_render(t, c.m, c.n,
                                                    json_is_true(json_object_get(r, "add_generation_prompt")),
                                                    got, len)
                       : NUMLA_STATUS_INTERNAL;
    conv_free(&c);
    numla_chat_template_destroy(&t);
    return s;
}

static void show_case(json_t *r, numla_status s)
{
    fprintf(stderr, "\n    %s conversation %d add_generation_prompt=%d: status %d %s\n",
            json_string_value(json_object_get(r, "template")),
            (int)json_integer_value(json_object_get(r, "conversation")),
            json_is_true(json_object_get(r, "add_generation_prompt")), (int)s,
            s ? numla_error_message() : "");
}

static void test_golden_renders(void)
{
    golden_templates g = {.templates = load_golden("templates.json")};
    json_t *cases = load_golden("cases.json");
    if (!g.templates || !cases)
        return;
    chat_golden_check_renders(cases, 100, render_case, &g, show_case);
    for (int k = 0; k < 4; k++)
        NUMLA_ASSERT_MSG(g.per_template[k] > 0, "no golden render of %s",
                         numla_chat_template_names()[k]);
    json_decref(g.templates);
    json_decref(cases);
}

/* The golden template strings are the ones compiled in, and each built-in name maps back to its
 * own source; an escape-spelled or CRLF copy is recognised, a one-character change is not. */
static void test_recognition(void)
{
    json_t *templates = load_golden("templates.json");
    if (!templates)
        return;
    const char *const *names = numla_chat_template_names();
    int count = 0;
    /* the DeepSeek V2-R1 templates, the first four names (V3.1 and Kimi: chat_kimi_golden) */
    for (; names[count] && count < 4; count++) {
        json_t *e = json_object_get(templates, names[count]);
        NUMLA_ASSERT_MSG(e != NULL, "%s missing from templates.json", names[count]);
        if (!e)
            continue;
        const char *src = json_string_value(json_object_get(e, "template"));
        NUMLA_ASSERT_MSG(strcmp(src, numla_chat_template_source(names[count])) == 0,
                         "compiled-in %s differs from templates.json", names[count]);

        /* CRLF line ends and real newlines spelled as \n escapes. */
        size_t n = strlen(src);
        char *variant = malloc(2 * n + 3), *p = variant;
        *p++ = '\r';
        *p++ = '\n';
        for (size_t k = 0; k < n; k++) {
            if (src[k] == '\n') {
                *p++ = '\\';
                *p++ = 'n';
            } else {
                *p++ = src[k];
            }
        }
        *p = 0;
        char *cfg = config_for(e, variant);
        numla_chat_template *t = NULL;
        numla_status s = numla_chat_template_load_json(cfg, NULL, &t);
        NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OK && strcmp(numla_chat_template_name(t),
                                                        names[count]) == 0,
                         "%s variant not recognised: %s", names[count], numla_error_message());
        numla_chat_template_destroy(&t);
        free(cfg);

        /* One character changed: no longer a template numla knows. */
        strcpy(variant, src);
        char *q = strstr(variant, "ssistant");
        q[0] = 'S';
        cfg = config_for(e, variant);
        s = numla_chat_template_load_json(cfg, NULL, &t);
        NUMLA_ASSERT_MSG(s == NUMLA_STATUS_UNSUPPORTED && t == NULL &&
                             strstr(numla_error_message(), "--chat-template"),
                         "%s changed template: status %d '%s'", names[count], (int)s,
                         numla_error_message());
        free(cfg);
        free(variant);
    }
    CU_ASSERT_EQUAL(count, 4);
    json_decref(templates);
}

static void test_load_errors_and_force(void)
{
    numla_chat_template *t = NULL;
    const char *llama3 = "{\"chat_template\": \"{% for m in messages %}{{ m['content'] }}"
                         "{% endfor %}\", \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";
    numla_status s = numla_chat_template_load_json(llama3, NULL, &t);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_UNSUPPORTED && !t &&
                         strstr(numla_error_message(), "deepseek-v3"),
                     "unknown template: %d '%s'", (int)s, numla_error_message());

    /* Forced: the file's template is ignored, its tokens are used. */
    s = numla_chat_template_load_json(llama3, "deepseek-v2", &t);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OK, "forced: %s", numla_error_message());
    numla_chat_message m[] = {{.role = "user", .content = "hi", .has_tool_calls = 0}, {.role = "assistant", .content = "yo", .has_tool_calls = 0}};
    char *out = NULL;
    size_t len = 0;
    if (t) {
        CU_ASSERT_EQUAL(numla_chat_template_render(t, m, 2, 1, &out, &len), NUMLA_STATUS_OK);
        CU_ASSERT_STRING_EQUAL(out, "<s>User: hi\n\nAssistant: yo</s>Assistant:");
        CU_ASSERT_EQUAL(len, strlen("<s>User: hi\n\nAssistant: yo</s>Assistant:"));
        free(out);
    }
    numla_chat_template_destroy(&t);
    CU_ASSERT_PTR_NULL(t);

    s = numla_chat_template_load_json(llama3, "chatml", &t);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_INVALID_ARG && !t &&
                         strstr(numla_error_message(), "chatml"),
                     "unknown name: %d '%s'", (int)s, numla_error_message());
    s = numla_chat_template_load_json("{\"bos_token\": \"<s>\"}", NULL, &t);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_UNSUPPORTED &&
                         strstr(numla_error_message(), "chat_template"),
                     "no template: %d '%s'", (int)s, numla_error_message());
    s = numla_chat_template_load_json("{not json", NULL, &t);
    CU_ASSERT_EQUAL(s, NUMLA_STATUS_FORMAT);

    /* No config at all, forced: DeepSeek's token strings. */
    s = numla_chat_template_load_json(NULL, "deepseek-r1", &t);
    CU_ASSERT_EQUAL(s, NUMLA_STATUS_OK);
    if (t) {
        numla_chat_message one = {.role = "user", .content = "q", .has_tool_calls = 0};
        CU_ASSERT_EQUAL(numla_chat_template_render(t, &one, 1, 1, &out, &len), NUMLA_STATUS_OK);
        CU_ASSERT_STRING_EQUAL(out, "<｜begin▁of▁sentence｜><｜User｜>q<｜Assistant｜><think>\n");
        free(out);
    }
    numla_chat_template_destroy(&t);

    /* From a model directory; the list form of chat_template; null bos renders as "". */
    json_t *templates = load_golden("templates.json");
    if (!templates)
        return;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/chat_model", numla_test_tmpdir());
    mkdir(dir, 0755);
    s = numla_chat_template_load(dir, NULL, &t);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_UNSUPPORTED && strstr(numla_error_message(),
                                                             "tokenizer_config.json"),
                     "missing file: %d '%s'", (int)s, numla_error_message());
    s = numla_chat_template_load(dir, "deepseek-v3", &t);
    CU_ASSERT_EQUAL(s, NUMLA_STATUS_OK);
    numla_chat_template_destroy(&t);
    json_t *cfg = json_pack("{s:n, s:s, s:[{s:s, s:s}, {s:s, s:O}]}", "bos_token", "eos_token",
                            "E", "chat_template", "name", "tool_use", "template", "x", "name",
                            "default", "template",
                            json_object_get(json_object_get(templates, "deepseek-v2"), "template"));
    char path[1200];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    CU_ASSERT_EQUAL(json_dump_file(cfg, path, 0), 0);
    json_decref(cfg);
    s = numla_chat_template_load(dir, NULL, &t);
    NUMLA_ASSERT_MSG(s == NUMLA_STATUS_OK, "dir load: %s", numla_error_message());
    if (t) {
        CU_ASSERT_STRING_EQUAL(numla_chat_template_name(t), "deepseek-v2");
        CU_ASSERT_EQUAL(numla_chat_template_render(t, m, 2, 0, &out, &len), NUMLA_STATUS_OK);
        CU_ASSERT_STRING_EQUAL(out, "User: hi\n\nAssistant: yoE");
        free(out);
    }
    numla_chat_template_destroy(&t);
    json_decref(templates);
}

/* Tool calls fail naming the message and the field; nothing is returned. The DeepSeek V2-R1
 * templates, the first four names (V3.1 and Kimi render tool calls: chat_kimi_golden). */
static void test_unsupported_messages(void)
{
    const char *const *names = numla_chat_template_names();
    for (int k = 0; names[k] && k < 4; k++) {
        numla_chat_template *t = NULL;
        CU_ASSERT_EQUAL(numla_chat_template_load_json(NULL, names[k], &t), NUMLA_STATUS_OK);
        if (!t)
            continue;
        numla_chat_message m[] = {{.role = "user", .content = "weather?", .has_tool_calls = 0}, {.role = "assistant", .content = "", .has_tool_calls = 1}};
        char *out = (char *)1;
        size_t len = 7;
        numla_status s = numla_chat_template_render(t, m, 2, 1, &out, &len);
        NUMLA_ASSERT_MSG(s == NUMLA_STATUS_UNSUPPORTED &&
                             strstr(numla_error_message(), "messages[1].tool_calls"),
                         "%s tool_calls: %d '%s'", names[k], (int)s, numla_error_message());
        CU_ASSERT_PTR_NULL(out);
        CU_ASSERT_EQUAL(len, 0);
        numla_chat_message nul[] = {{.role = "system", .content = "s", .has_tool_calls = 0}, {.role = "user", .content = "u", .has_tool_calls = 0}, {.role = "assistant", .content = NULL, .has_tool_calls = 0}};
        s = numla_chat_template_render(t, nul, 3, 0, &out, &len);
        NUMLA_ASSERT_MSG(s == NUMLA_STATUS_UNSUPPORTED &&
                             strstr(numla_error_message(), "messages[2].content"),
                         "%s null content: %d '%s'", names[k], (int)s, numla_error_message());
        numla_chat_message norole[] = {{.role = NULL, .content = "x"}};
        s = numla_chat_template_render(t, norole, 1, 0, &out, &len);
        NUMLA_ASSERT_MSG(s == NUMLA_STATUS_INVALID_ARG &&
                             strstr(numla_error_message(), "messages[0].role"),
                         "%s no role: %d '%s'", names[k], (int)s, numla_error_message());
        /* No messages: the template's prologue (and the generation prompt) only. */
        s = numla_chat_template_render(t, NULL, 0, 0, &out, &len);
        CU_ASSERT_EQUAL(s, NUMLA_STATUS_OK);
        if (s == NUMLA_STATUS_OK)
            CU_ASSERT_STRING_EQUAL(out, "<｜begin▁of▁sentence｜>");
        free(out);
        numla_chat_template_destroy(&t);
    }
}

NUMLA_TEST_SUITE(chat_template_golden, NULL, NULL, NUMLA_TEST(test_golden_renders),
                 NUMLA_TEST(test_recognition), NUMLA_TEST(test_load_errors_and_force),
                 NUMLA_TEST(test_unsupported_messages))
