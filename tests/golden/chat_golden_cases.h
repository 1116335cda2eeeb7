/* tests/golden/chat_golden_cases.h — the checks the chat-template golden suites share: every
 * render of a cases.json rendered by numla byte for byte (the first difference shown), and every
 * conversation the reference refused refused too; for the DeepSeek encodings' cases.json (made
 * by DeepSeek's own Python encoding: scripts/make_dsv32_chat_golden.py,
 * make_dsv4_chat_golden.py) the whole check against a built-in template. Header-only, included
 * by test_chat_dsv32_golden.c, test_chat_dsv4_golden.c, test_chat_kimi_golden.c,
 * test_chat_glm5_golden.c and test_chat_template_golden.c. */
#ifndef NUMLA_TESTS_CHAT_GOLDEN_CASES_H
#define NUMLA_TESTS_CHAT_GOLDEN_CASES_H

#pragma GCC diagnostic ignored "-Wunused-function"

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

/* Where got and want part: the byte and up to 60 bytes of each from there. */
static void chat_golden_show_diff(const char *got, size_t glen, const char *want, size_t wlen)
{
    size_t i = 0;
    while (i < glen && i < wlen && got[i] == want[i])
        i++;
    fprintf(stderr, "      first difference at byte %zu (got %zu bytes, want %zu)\n", i, glen,
            wlen);
    int g = (int)(glen - i < 60 ? glen - i : 60), w = (int)(wlen - i < 60 ? wlen - i : 60);
    fprintf(stderr, "      got : \"%.*s\"\n      want: \"%.*s\"\n", g, got + i, w, want + i);
}

/* A suite's rendering of case r (an entry of "renders" or "errors") of conversations convs, as
 * numla_chat_template_render_opts returns it; and its line naming case r and the status. */
typedef numla_status (*chat_golden_render_fn)(void *ctx, json_t *convs, json_t *r, char **got,
                                              size_t *len);
typedef void (*chat_golden_show_fn)(json_t *r, numla_status s);

/* Every entry of cases' "renders" (at least min_renders) rendered by render as its "text", byte
 * for byte. */
static void chat_golden_check_renders(json_t *cases, size_t min_renders,
                                      chat_golden_render_fn render, void *ctx,
                                      chat_golden_show_fn show)
{
    json_t *convs = json_object_get(cases, "conversations");
    json_t *renders = json_object_get(cases, "renders");
    NUMLA_ASSERT_MSG(json_array_size(renders) >= min_renders, "only %zu golden renders",
                     json_array_size(renders));
    size_t i, ok = 0;
    json_t *r;
    json_array_foreach(renders, i, r) {
        char *got = NULL;
        size_t len = 0;
        numla_status s = render(ctx, convs, r, &got, &len);
        const char *want = json_string_value(json_object_get(r, "text"));
        size_t wlen = json_string_length(json_object_get(r, "text"));
        int same = s == NUMLA_STATUS_OK && len == wlen && memcmp(got, want, len) == 0 &&
                   got[len] == 0;
        if (!same) {
            show(r, s);
            if (s == NUMLA_STATUS_OK)
                chat_golden_show_diff(got, len, want, wlen);
        }
        ok += (size_t)same;
        free(got);
    }
    NUMLA_ASSERT_MSG(ok == json_array_size(renders), "%zu of %zu golden renders match", ok,
                     json_array_size(renders));
}

/* Every entry of cases' "errors" refused by render with a message and no output. */
static void chat_golden_check_refusals(json_t *cases, chat_golden_render_fn render, void *ctx,
                                       chat_golden_show_fn show)
{
    json_t *convs = json_object_get(cases, "conversations");
    size_t i, refused = 0;
    json_t *r;
    json_array_foreach(json_object_get(cases, "errors"), i, r) {
        char *got = NULL;
        size_t len = 0;
        numla_status s = render(ctx, convs, r, &got, &len);
        refused += s != NUMLA_STATUS_OK && got == NULL && numla_error_message()[0];
        if (s == NUMLA_STATUS_OK) {
            show(r, s);
            fprintf(stderr, "      rendered, the reference refused\n");
        }
        free(got);
    }
    NUMLA_ASSERT_MSG(refused == json_array_size(json_object_get(cases, "errors")),
                     "%zu of %zu refusals refused", refused,
                     json_array_size(json_object_get(cases, "errors")));
}

/* A DeepSeek encoding's case: chat or thinking mode, a reasoning_effort or none, the
 * generation prompt added. */
static numla_status chat_golden_render(void *ctx, json_t *convs, json_t *r, char **got,
                                       size_t *len)
{
    int ci = (int)json_integer_value(json_object_get(r, "conversation"));
    conv_msgs c = messages_of(json_array_get(convs, (size_t)ci));
    numla_chat_options o = {.add_generation_prompt = 1,
                            .thinking = json_is_true(json_object_get(r, "thinking")),
                            .thinking_given = 1,
                            .tools_json = c.tools,
                            .reasoning_effort = json_string_value(
                                json_object_get(r, "reasoning_effort"))};
    numla_status s = numla_chat_template_render_opts(ctx, c.m, c.n, &o, got, len);
    conv_free(&c);
    return s;
}

static void chat_golden_show(json_t *r, numla_status s)
{
    const char *effort = json_string_value(json_object_get(r, "reasoning_effort"));
    fprintf(stderr, "\n    conversation %d thinking=%d effort=%s: status %d %s\n",
            (int)json_integer_value(json_object_get(r, "conversation")),
            json_is_true(json_object_get(r, "thinking")), effort ? effort : "-", (int)s,
            s ? numla_error_message() : "");
}

/* The DeepSeek encoding's cases.json at rel against the built-in template_name. */
static void chat_golden_check_cases(const char *rel, const char *template_name,
                                    size_t min_renders)
{
    json_t *cases = chat_golden_load(rel);
    if (!cases)
        return;
    numla_chat_template *t = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_chat_template_load_builtin(template_name, &t),
                          NUMLA_STATUS_OK);
    chat_golden_check_renders(cases, min_renders, chat_golden_render, t, chat_golden_show);
    chat_golden_check_refusals(cases, chat_golden_render, t, chat_golden_show);
    numla_chat_template_destroy(&t);
    json_decref(cases);
}

#endif
