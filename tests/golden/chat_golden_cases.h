/* tests/golden/chat_golden_cases.h — the check the DeepSeek encodings' golden suites share:
 * every render of a cases.json (made by DeepSeek's own Python encoding: scripts/
 * make_dsv32_chat_golden.py, make_dsv4_chat_golden.py) rendered by a built-in template byte
 * for byte, and every conversation the encoding refused refused too. Header-only, included by
 * test_chat_dsv32_golden.c and test_chat_dsv4_golden.c. */
#ifndef NUMLA_TESTS_CHAT_GOLDEN_CASES_H
#define NUMLA_TESTS_CHAT_GOLDEN_CASES_H

#include "test_util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/chat_template.h"

#include "chat_golden_conv.h"

static json_t *chat_golden_load(const char *rel)
{
    json_error_t err;
    json_t *j = json_load_file(numla_test_source_path(rel), 0, &err);
    NUMLA_ASSERT_MSG(j != NULL, "%s: %s", rel, err.text);
    return j;
}

static numla_status chat_golden_render(numla_chat_template *t, json_t *convs, json_t *r,
                                       char **got, size_t *len)
{
    int ci = (int)json_integer_value(json_object_get(r, "conversation"));
    conv_msgs c = messages_of(json_array_get(convs, (size_t)ci));
    numla_chat_options o = {.add_generation_prompt = 1,
                            .thinking = json_is_true(json_object_get(r, "thinking")),
                            .thinking_given = 1,
                            .tools_json = c.tools,
                            .reasoning_effort = json_string_value(
                                json_object_get(r, "reasoning_effort"))};
    numla_status s = numla_chat_template_render_opts(t, c.m, c.n, &o, got, len);
    conv_free(&c);
    return s;
}

static void chat_golden_check_cases(const char *rel, const char *template_name,
                                    size_t min_renders)
{
    json_t *cases = chat_golden_load(rel);
    if (!cases)
        return;
    numla_chat_template *t = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_chat_template_load_builtin(template_name, &t),
                          NUMLA_STATUS_OK);
    json_t *convs = json_object_get(cases, "conversations");
    json_t *renders = json_object_get(cases, "renders");
    NUMLA_ASSERT_MSG(json_array_size(renders) >= min_renders, "only %zu golden renders",
                     json_array_size(renders));
    size_t i, ok = 0;
    json_t *r;
    json_array_foreach(renders, i, r) {
        char *got = NULL;
        size_t len = 0;
        numla_status s = chat_golden_render(t, convs, r, &got, &len);
        const char *want = json_string_value(json_object_get(r, "text"));
        size_t wlen = json_string_length(json_object_get(r, "text"));
        int same = s == NUMLA_STATUS_OK && len == wlen && memcmp(got, want, len) == 0 &&
                   got[len] == 0;
        if (!same) {
            const char *effort = json_string_value(json_object_get(r, "reasoning_effort"));
            fprintf(stderr, "\n    conversation %d thinking=%d effort=%s: status %d %s\n",
                    (int)json_integer_value(json_object_get(r, "conversation")),
                    json_is_true(json_object_get(r, "thinking")), effort ? effort : "-", (int)s,
                    s ? numla_error_message() : "");
            if (s == NUMLA_STATUS_OK) {
                size_t k = 0;
                while (k < len && k < wlen && got[k] == want[k])
                    k++;
                fprintf(stderr, "      first difference at byte %zu: got \"%.60s\" want "
                                "\"%.60s\"\n", k, got + k, want + k);
            }
        }
        ok += (size_t)same;
        free(got);
    }
    NUMLA_ASSERT_MSG(ok == json_array_size(renders), "%zu of %zu golden renders match", ok,
                     json_array_size(renders));
    size_t refused = 0;
    json_array_foreach(json_object_get(cases, "errors"), i, r) {
        char *got = NULL;
        size_t len = 0;
        numla_status s = chat_golden_render(t, convs, r, &got, &len);
        refused += s != NUMLA_STATUS_OK && got == NULL && numla_error_message()[0];
        if (s == NUMLA_STATUS_OK)
            fprintf(stderr, "\n    conversation %d thinking=%d: rendered, the encoding refused\n",
                    (int)json_integer_value(json_object_get(r, "conversation")),
                    json_is_true(json_object_get(r, "thinking")));
        free(got);
    }
    NUMLA_ASSERT_MSG(refused == json_array_size(json_object_get(cases, "errors")),
                     "%zu of %zu refusals refused", refused,
                     json_array_size(json_object_get(cases, "errors")));
    numla_chat_template_destroy(&t);
    json_decref(cases);
}

#endif
