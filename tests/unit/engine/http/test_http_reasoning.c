/* engine/http/reasoning.c: reasoning and content the same wherever the text is cut into pieces;
 * the mode a rendered prompt gives. */
#include <stdlib.h>
#include <string.h>

#include "engine/http/reasoning.h"
#include "test_util.h"

/* Feed text cut at a and b (a <= b); concatenate what comes out. */
static void split3(numla_http_reasoning_mode mode, const char *text, size_t a, size_t b,
                   char *rs, char *cs)
{
    numla_http_reasoning *r = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_http_reasoning_create(mode, &r), NUMLA_STATUS_OK);
    size_t n = strlen(text), cut[4] = {0, a, b, n};
    rs[0] = cs[0] = 0;
    for (int k = 0; k < 4; k++) {
        const char *x, *y;
        size_t xl, yl;
        numla_status s = k < 3 ? numla_http_reasoning_push(r, text + cut[k], cut[k + 1] - cut[k],
                                                           &x, &xl, &y, &yl)
                               : numla_http_reasoning_finish(r, &x, &xl, &y, &yl);
        CU_ASSERT_EQUAL_FATAL(s, NUMLA_STATUS_OK);
        strncat(rs, x, xl);
        strncat(cs, y, yl);
    }
    numla_http_reasoning_destroy(&r);
    CU_ASSERT_PTR_NULL(r);
}

static void expect_all_cuts(numla_http_reasoning_mode mode, const char *text,
                            const char *want_r, const char *want_c)
{
    size_t n = strlen(text);
    char rs[256], cs[256];
    int bad = 0;
    for (size_t a = 0; a <= n; a++)
        for (size_t b = a; b <= n; b++) {
            split3(mode, text, a, b, rs, cs);
            if ((strcmp(rs, want_r) || strcmp(cs, want_c)) && bad++ < 3)
                NUMLA_ASSERT_MSG(0, "'%s' cut at %zu,%zu: reasoning '%s' content '%s'", text, a,
                                 b, rs, cs);
        }
    CU_ASSERT_EQUAL(bad, 0);
}

static void test_split_any_cut(void)
{
    expect_all_cuts(NUMLA_HTTP_REASONING_DETECT, "<think>abc</think>def", "abc", "def");
    expect_all_cuts(NUMLA_HTTP_REASONING_DETECT, "<thin>abc</think>", "", "<thin>abc</think>");
    expect_all_cuts(NUMLA_HTTP_REASONING_DETECT, " <think>x</think>y", "", " <think>x</think>y");
    expect_all_cuts(NUMLA_HTTP_REASONING_DETECT, "<thi", "", "<thi");
    expect_all_cuts(NUMLA_HTTP_REASONING_OPEN, "r</think>c</think>d", "r", "c</think>d");
    expect_all_cuts(NUMLA_HTTP_REASONING_OPEN, "only reasoning </thi", "only reasoning </thi", "");
    expect_all_cuts(NUMLA_HTTP_REASONING_OPEN, "<think>r</think>", "<think>r", "");
    expect_all_cuts(NUMLA_HTTP_REASONING_OPEN, "\xe4\xb8\xad</think>\xe6\x96\x87",
                    "\xe4\xb8\xad", "\xe6\x96\x87");
}

static void test_mode_of_prompt(void)
{
    const char *p1 = "<｜User｜>q<｜Assistant｜><think>";
    const char *p2 = "<｜User｜>q<｜Assistant｜></think>";
    const char *p3 = "<|im_assistant|>assistant<|im_middle|>";
    const char *p4 = "<think>a</think>b<|im_assistant|>assistant<|im_middle|><think>";
    CU_ASSERT_EQUAL(numla_http_reasoning_mode_of_prompt(p1, strlen(p1)), NUMLA_HTTP_REASONING_OPEN);
    CU_ASSERT_EQUAL(numla_http_reasoning_mode_of_prompt(p2, strlen(p2)),
                    NUMLA_HTTP_REASONING_DETECT);
    CU_ASSERT_EQUAL(numla_http_reasoning_mode_of_prompt(p3, strlen(p3)),
                    NUMLA_HTTP_REASONING_DETECT);
    CU_ASSERT_EQUAL(numla_http_reasoning_mode_of_prompt(p4, strlen(p4)), NUMLA_HTTP_REASONING_OPEN);
    CU_ASSERT_EQUAL(numla_http_reasoning_mode_of_prompt("", 0), NUMLA_HTTP_REASONING_DETECT);
}

NUMLA_TEST_SUITE(http_reasoning, NULL, NULL, NUMLA_TEST(test_split_any_cut),
                 NUMLA_TEST(test_mode_of_prompt))
