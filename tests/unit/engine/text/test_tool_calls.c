/* engine/text/tool_calls.c: each family's tool-call syntax (as the families document it and
 * the chat templates write it) read back into calls and content, whole, cut in two at every
 * byte, and byte by byte; parallel calls, calls among text, malformed calls kept as content;
 * finish_reason; the fuzz target over mutated model outputs (tests/fuzz/fuzz_tool_calls.c). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/tool_calls.h"
#include "test_util.h"

#define TB "<｜tool▁calls▁begin｜>"
#define TE "<｜tool▁calls▁end｜>"
#define CB "<｜tool▁call▁begin｜>"
#define CE "<｜tool▁call▁end｜>"
#define SEP "<｜tool▁sep｜>"
#define KSB "<|tool_calls_section_begin|>"
#define KSE "<|tool_calls_section_end|>"
#define KCB "<|tool_call_begin|>"
#define KCE "<|tool_call_end|>"
#define KAB "<|tool_call_argument_begin|>"
#define D "｜DSML｜"

static const char tools_json[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": "
    "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"zip\": "
    "{\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}}}}}]";

/* A model output and what it must give: {"content": "...", "calls": [[id|null, name, {args}],
 * ...]} (a null id: "call_" and 24 letters/digits). */
typedef struct golden {
    const char *family, *text, *want;
} golden;

static const golden goldens[] = {
    /* DeepSeek-V3 / R1: "function<sep>NAME\n```json\nARGS\n```", two calls after text */
    {"deepseek-v3",
     "Let me check." TB CB "function" SEP "get_weather\n```json\n{\"city\": \"Paris\"}\n```" CE
     "\n" CB "function" SEP "get_time\n```json\n{}\n```" CE TE,
     "{\"content\": \"Let me check.\", \"calls\": [[null, \"get_weather\", {\"city\": \"Paris\"}],"
     " [null, \"get_time\", {}]]}"},
    {"deepseek-r1",
     TB CB "function" SEP "f\n```json\n{\"a\": [1, 2]}\n```" CE TE "\n\nDone.",
     "{\"content\": \"\\n\\nDone.\", \"calls\": [[null, \"f\", {\"a\": [1, 2]}]]}"},
    /* bad JSON arguments: the whole section as written */
    {"deepseek-v3", "x" TB CB "function" SEP "f\n```json\n{bad\n```" CE TE,
     "{\"content\": \"x" TB CB "function" SEP "f\\n```json\\n{bad\\n```" CE TE "\", \"calls\": []}"},
    /* no fence: malformed in V3's syntax */
    {"deepseek-v3", TB CB "function" SEP "f\n{}" CE TE,
     "{\"content\": \"" TB CB "function" SEP "f\\n{}" CE TE "\", \"calls\": []}"},
    /* DeepSeek-V3.1: NAME<sep>ARGS; a bad second call is content, the first stays a call */
    {"deepseek-v3.1",
     TB CB "get_weather" SEP "{\"city\": \"Paris\"}" CE CB "get_time" SEP "{\"tz\": \"CET\"}" CE
     TE,
     "{\"content\": \"\", \"calls\": [[null, \"get_weather\", {\"city\": \"Paris\"}], [null, "
     "\"get_time\", {\"tz\": \"CET\"}]]}"},
    {"deepseek-v3.1", TB CB "a" SEP "{}" CE CB "b" SEP "[1]" CE TE,
     "{\"content\": \"" CB "b" SEP "[1]" CE "\", \"calls\": [[null, \"a\", {}]]}"},
    /* unterminated section: content as written */
    {"deepseek-v3.1", "hi " TB CB "f" SEP "{\"a\":",
     "{\"content\": \"hi " TB CB "f" SEP "{\\\"a\\\":\", \"calls\": []}"},
    /* a marker's prefix at the end is content */
    {"deepseek-v3.1", "Hello <｜tool▁calls", "{\"content\": \"Hello <｜tool▁calls\", \"calls\": []}"},
    /* Kimi K2: the id is Kimi's own */
    {"kimi-k2",
     "I'll look." KSB KCB "functions.get_weather:0" KAB "{\"city\": \"Paris\"}" KCE KCB
     " functions.get_time:1 " KAB " {} " KCE KSE,
     "{\"content\": \"I'll look.\", \"calls\": [[\"functions.get_weather:0\", \"get_weather\", "
     "{\"city\": \"Paris\"}], [\"functions.get_time:1\", \"get_time\", {}]]}"},
    {"kimi-k2-thinking", KSB KCB "get_weather:3" KAB "{\"city\": \"\xe6\x9d\xb1\"}" KCE KSE,
     "{\"content\": \"\", \"calls\": [[\"get_weather:3\", \"get_weather\", {\"city\": "
     "\"\xe6\x9d\xb1\"}]]}"},
    /* no ":IDX" in the id: content */
    {"kimi-k2", KSB KCB "functions.f" KAB "{}" KCE KSE,
     "{\"content\": \"" KSB KCB "functions.f" KAB "{}" KCE KSE "\", \"calls\": []}"},
    /* a control character in the id: content (the fuzz target's find) */
    {"kimi-k2", KSB KCB "functions.f\x01:0" KAB "{}" KCE KSE,
     "{\"content\": \"" KSB KCB "functions.f\\u0001:0" KAB "{}" KCE KSE "\", \"calls\": []}"},
    /* DeepSeek-V3.2 DSML: string="true" strings, string="false" JSON */
    {"deepseek-v3.2",
     "Sure.\n\n<" D "function_calls>\n<" D "invoke name=\"get_weather\">\n<" D
     "parameter name=\"city\" string=\"true\">Paris</" D "parameter>\n<" D
     "parameter name=\"days\" string=\"false\">3</" D "parameter>\n</" D "invoke>\n<" D
     "invoke name=\"get_time\">\n</" D "invoke>\n</" D "function_calls>",
     "{\"content\": \"Sure.\\n\\n\", \"calls\": [[null, \"get_weather\", {\"city\": \"Paris\", "
     "\"days\": 3}], [null, \"get_time\", {}]]}"},
    {"deepseek-v3.2",
     "<" D "function_calls>\n<" D "invoke name=\"f\">\n<" D
     "parameter name=\"n\" string=\"false\">not json</" D "parameter>\n</" D "invoke>\n</" D
     "function_calls>",
     "{\"content\": \"<" D "function_calls>\\n<" D "invoke name=\\\"f\\\">\\n<" D
     "parameter name=\\\"n\\\" string=\\\"false\\\">not json</" D "parameter>\\n</" D
     "invoke>\\n</" D "function_calls>\", \"calls\": []}"},
    /* DeepSeek-V4: V3.2's DSML in a "tool_calls" block, as encoding_dsv4.py writes it (an
     * empty call's name line is followed by an empty line); parallel calls after text */
    {"deepseek-v4",
     "Sure.\n\n<" D "tool_calls>\n<" D "invoke name=\"get_weather\">\n<" D
     "parameter name=\"city\" string=\"true\">Paris</" D "parameter>\n<" D
     "parameter name=\"days\" string=\"false\">[3, {\"x\": null}]</" D "parameter>\n</" D
     "invoke>\n<" D "invoke name=\"get_time\">\n\n</" D "invoke>\n</" D "tool_calls>",
     "{\"content\": \"Sure.\\n\\n\", \"calls\": [[null, \"get_weather\", {\"city\": \"Paris\", "
     "\"days\": [3, {\"x\": null}]}], [null, \"get_time\", {}]]}"},
    /* text after the block stays content; a string value keeps its newlines and non-ASCII */
    {"deepseek-v4",
     "<" D "tool_calls>\n<" D "invoke name=\"search\">\n<" D
     "parameter name=\"q\" string=\"true\">caf\xc3\xa9\nline 2</" D "parameter>\n</" D
     "invoke>\n</" D "tool_calls> done",
     "{\"content\": \" done\", \"calls\": [[null, \"search\", {\"q\": \"caf\xc3\xa9\\nline 2\"}]]}"},
    /* V3.2's block name is not V4's: content as written */
    {"deepseek-v4",
     "<" D "function_calls>\n<" D "invoke name=\"f\">\n</" D "invoke>\n</" D "function_calls>",
     "{\"content\": \"<" D "function_calls>\\n<" D "invoke name=\\\"f\\\">\\n</" D
     "invoke>\\n</" D "function_calls>\", \"calls\": []}"},
    /* a string="false" value that is not JSON: the whole block as written */
    {"deepseek-v4",
     "a<" D "tool_calls>\n<" D "invoke name=\"f\">\n<" D
     "parameter name=\"n\" string=\"false\">{bad</" D "parameter>\n</" D "invoke>\n</" D
     "tool_calls>",
     "{\"content\": \"a<" D "tool_calls>\\n<" D "invoke name=\\\"f\\\">\\n<" D
     "parameter name=\\\"n\\\" string=\\\"false\\\">{bad</" D "parameter>\\n</" D
     "invoke>\\n</" D "tool_calls>\", \"calls\": []}"},
    /* a block cut off (max_tokens): content as written */
    {"deepseek-v4",
     "x\n\n<" D "tool_calls>\n<" D "invoke name=\"f\">\n<" D "parameter name=\"a\" str",
     "{\"content\": \"x\\n\\n<" D "tool_calls>\\n<" D "invoke name=\\\"f\\\">\\n<" D
     "parameter name=\\\"a\\\" str\", \"calls\": []}"},
    /* GLM-5: values typed by the tool's declared parameter types, else JSON when they parse */
    {"glm-5",
     "Checking.\n<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
     "<arg_key>zip</arg_key><arg_value>75001</arg_value><arg_key>days</arg_key>"
     "<arg_value>3</arg_value><arg_key>x</arg_key><arg_value>[1, 2]</arg_value><arg_key>s"
     "</arg_key><arg_value>hello</arg_value></tool_call>\n<tool_call>get_time</tool_call>",
     "{\"content\": \"Checking.\\n\", \"calls\": [[null, \"get_weather\", {\"city\": \"Paris\", "
     "\"zip\": \"75001\", \"days\": 3, \"x\": [1, 2], \"s\": \"hello\"}], [null, \"get_time\", "
     "{}]]}"},
    /* GLM-4.5's newline after the name, whitespace between key and value */
    {"glm-5",
     "<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>true</arg_value>\n</tool_call> after",
     "{\"content\": \" after\", \"calls\": [[null, \"f\", {\"a\": true}]]}"},
    {"glm-5", "a<tool_call>f<arg_key>x",
     "{\"content\": \"a<tool_call>f<arg_key>x\", \"calls\": []}"},
    {"glm-5", "<tool_call>f<arg_value>1</arg_value></tool_call>",
     "{\"content\": \"<tool_call>f<arg_value>1</arg_value></tool_call>\", \"calls\": []}"},
};

/* Parse text cut at the offsets in cuts (ascending, n of them); the result as the goldens'
 * JSON (ids kept as given). */
static json_t *parse_cut(const char *family, const char *text, const size_t *cuts, int n,
                         const char **finish)
{
    numla_tool_calls *p = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_tool_calls_create(numla_tool_syntax_for_template(family),
                                                  tools_json, 99, &p),
                          NUMLA_STATUS_OK);
    size_t len = strlen(text), at = 0;
    char *content = calloc(len + 1, 1);
    size_t cl = 0;
    for (int k = 0; k <= n + 1; k++) {
        const numla_tool_event *ev;
        int32_t ne;
        const char *t;
        size_t to = k < n ? cuts[k] : len;
        numla_status s = k <= n ? numla_tool_calls_push(p, text + at, to - at, &ev, &ne, &t)
                                : numla_tool_calls_finish(p, &ev, &ne, &t);
        CU_ASSERT_EQUAL_FATAL(s, NUMLA_STATUS_OK);
        for (int32_t e = 0; e < ne; e++)
            if (ev[e].call < 0) {
                CU_ASSERT_FATAL(cl + ev[e].len <= len);
                memcpy(content + cl, t + ev[e].off, ev[e].len);
                cl += ev[e].len;
            }
        if (k <= n)
            at = to;
    }
    json_t *calls = json_array();
    for (int32_t i = 0; i < numla_tool_calls_count(p); i++) {
        const numla_tool_call_out *o = numla_tool_calls_get(p, i);
        json_t *args = json_loads(o->arguments, 0, NULL);
        NUMLA_ASSERT_MSG(args != NULL, "arguments '%s' are not JSON", o->arguments);
        json_array_append_new(calls, json_pack("[s, s, o]", o->id, o->name,
                                               args ? args : json_null()));
    }
    *finish = numla_tool_calls_finish_reason(p, "stop");
    numla_tool_calls_destroy(&p);
    CU_ASSERT_PTR_NULL(p);
    json_t *r = json_pack("{s:s%, s:o}", "content", content, cl, "calls", calls);
    free(content);
    return r;
}

/* got matches want: ids as given, or "call_" and 24 letters/digits where want has null. */
static int matches(json_t *got, json_t *want)
{
    if (!json_equal(json_object_get(got, "content"), json_object_get(want, "content")))
        return 0;
    json_t *gc = json_object_get(got, "calls"), *wc = json_object_get(want, "calls");
    if (json_array_size(gc) != json_array_size(wc))
        return 0;
    for (size_t i = 0; i < json_array_size(wc); i++) {
        json_t *g = json_array_get(gc, i), *w = json_array_get(wc, i);
        const char *id = json_string_value(json_array_get(g, 0));
        if (json_is_null(json_array_get(w, 0))) {
            if (strncmp(id, "call_", 5) || strlen(id) != 29 ||
                strspn(id + 5, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") !=
                    24)
                return 0;
        } else if (!json_equal(json_array_get(g, 0), json_array_get(w, 0))) {
            return 0;
        }
        if (!json_equal(json_array_get(g, 1), json_array_get(w, 1)) ||
            !json_equal(json_array_get(g, 2), json_array_get(w, 2)))
            return 0;
    }
    return 1;
}

static void check(const golden *gd, json_t *want, const size_t *cuts, int n, const char *how)
{
    const char *finish;
    json_t *got = parse_cut(gd->family, gd->text, cuts, n, &finish);
    if (!matches(got, want)) {
        char *g = json_dumps(got, JSON_ENSURE_ASCII);
        NUMLA_ASSERT_MSG(0, "%s: '%s' %s gave %s, want %s", gd->family, gd->text, how, g,
                         gd->want);
        free(g);
    }
    const char *want_finish = json_array_size(json_object_get(want, "calls")) ? "tool_calls"
                                                                                : "stop";
    NUMLA_ASSERT_MSG(!strcmp(finish, want_finish), "%s: finish_reason %s", gd->family, finish);
    json_decref(got);
}

static void test_goldens_any_cut(void)
{
    for (size_t g = 0; g < sizeof goldens / sizeof *goldens; g++) {
        const golden *gd = &goldens[g];
        json_error_t je;
        json_t *want = json_loads(gd->want, 0, &je);
        NUMLA_ASSERT_MSG(want != NULL, "golden %zu: %s", g, je.text);
        if (!want)
            continue;
        size_t n = strlen(gd->text);
        check(gd, want, NULL, 0, "whole");
        for (size_t a = 0; a <= n; a++) {
            char how[32];
            snprintf(how, sizeof how, "cut at %zu", a);
            check(gd, want, &a, 1, how);
        }
        size_t *bytes = malloc(n * sizeof *bytes);
        for (size_t a = 0; a < n; a++)
            bytes[a] = a;
        check(gd, want, bytes, (int)n, "byte by byte");
        free(bytes);
        json_decref(want);
    }
}

static void test_families(void)
{
    /* every family whose template writes tool calls has a row; the others none */
    static const char *const with[] = {"deepseek-v3", "deepseek-r1", "deepseek-v3.1", "kimi-k2",
                                       "kimi-k2-thinking", "deepseek-v3.2", "glm-5",
                                       "deepseek-v4"};
    for (size_t i = 0; i < sizeof with / sizeof *with; i++)
        NUMLA_ASSERT_MSG(numla_tool_syntax_for_template(with[i]) != NULL, "%s", with[i]);
    CU_ASSERT_PTR_NULL(numla_tool_syntax_for_template("deepseek-v2"));
    /* the markers a server keeps in the decoded text: Kimi's five tags, GLM's six */
    const char *m[NUMLA_TOOL_SYNTAX_MAX_MARKERS];
    CU_ASSERT_EQUAL(numla_tool_syntax_markers(numla_tool_syntax_for_template("kimi-k2"), m), 5);
    CU_ASSERT_STRING_EQUAL(m[0], "<|tool_calls_section_begin|>");
    CU_ASSERT_STRING_EQUAL(m[4], "<|tool_call_argument_begin|>");
    CU_ASSERT_EQUAL(numla_tool_syntax_markers(numla_tool_syntax_for_template("glm-5"), m), 6);
    CU_ASSERT_STRING_EQUAL(m[0], "<tool_call>");
    CU_ASSERT_STRING_EQUAL(m[5], "</arg_value>");
    CU_ASSERT_PTR_NULL(numla_tool_syntax_for_template(NULL));
    /* "length" stays "length" even with calls; no calls: the reason as given */
    numla_tool_calls *p = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_tool_calls_create(numla_tool_syntax_for_template("glm-5"), NULL,
                                                  1, &p),
                          NUMLA_STATUS_OK);
    CU_ASSERT_STRING_EQUAL(numla_tool_calls_finish_reason(p, "stop"), "stop");
    const numla_tool_event *ev;
    int32_t ne;
    const char *t;
    CU_ASSERT_EQUAL(numla_tool_calls_push(p, "<tool_call>f</tool_call>", 24, &ev, &ne, &t),
                    NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(ne, 1);
    CU_ASSERT_EQUAL(ev[0].call, 0);
    CU_ASSERT_STRING_EQUAL(numla_tool_calls_finish_reason(p, "length"), "length");
    CU_ASSERT_STRING_EQUAL(numla_tool_calls_finish_reason(p, "stop"), "tool_calls");
    /* ids differ call to call and come from the seed */
    CU_ASSERT_EQUAL(numla_tool_calls_push(p, "<tool_call>g</tool_call>", 24, &ev, &ne, &t),
                    NUMLA_STATUS_OK);
    CU_ASSERT_STRING_NOT_EQUAL(numla_tool_calls_get(p, 0)->id, numla_tool_calls_get(p, 1)->id);
    numla_tool_calls_destroy(&p);
}

int numla_fuzz_tool_calls_run(const uint8_t *data, size_t size);

/* Seeded mutations of tests/fuzz/corpus/tool_calls/ through the fuzz target's checks; the
 * invariants must hold for every one. */
static void test_fuzz_mutations(void)
{
    static const char *const seeds[] = {"v3.bin",  "v31.bin",     "kimi.bin",
                                        "dsml.bin", "glm.bin",    "dsml_v4.bin",
                                        "dsml_v4_malformed.bin"};
    static const char *const pieces[] = {"<", ">", "\n", "\"", "{", "}", "｜", "<|", "</",
                                         "<tool_call>", "</tool_call>", CB, CE, TE, KCB, KCE,
                                         "<arg_key>", "</arg_value>", "\xc3", "```"};
    static uint8_t seed[2048], buf[2300];
    numla_test_rng rng = {4040};
    for (size_t s = 0; s < sizeof seeds / sizeof *seeds; s++) {
        char rel[128];
        snprintf(rel, sizeof rel, "tests/fuzz/corpus/tool_calls/%s", seeds[s]);
        size_t n = 0;
        char *f = numla_test_read_file(numla_test_source_path(rel), &n);
        NUMLA_ASSERT_MSG(f != NULL && n > 2 && n <= sizeof seed, "%s", rel);
        if (!f)
            continue;
        memcpy(seed, f, n);
        free(f);
        CU_ASSERT_EQUAL(numla_fuzz_tool_calls_run(seed, n), 1);
        for (int it = 0; it < 600; it++) {
            memcpy(buf, seed, n);
            size_t len = n;
            buf[1] = (uint8_t)numla_test_rng_u64(&rng);
            for (int e = 1 + (int)(numla_test_rng_u64(&rng) % 3); e > 0 && len > 3; e--) {
                size_t at = 2 + (size_t)(numla_test_rng_u64(&rng) % (len - 2));
                switch (numla_test_rng_u64(&rng) % 3) {
                case 0:
                    buf[at] = (uint8_t)numla_test_rng_u64(&rng);
                    break;
                case 1: {
                    const char *p = pieces[numla_test_rng_u64(&rng) % (sizeof pieces /
                                                                       sizeof *pieces)];
                    size_t k = strlen(p);
                    if (len + k <= sizeof buf) {
                        memmove(buf + at + k, buf + at, len - at);
                        memcpy(buf + at, p, k);
                        len += k;
                    }
                    break;
                }
                default: {
                    size_t k = 1 + (size_t)(numla_test_rng_u64(&rng) % 8);
                    if (at + k > len)
                        k = len - at;
                    memmove(buf + at, buf + at + k, len - at - k);
                    len -= k;
                }
                }
            }
            CU_ASSERT_EQUAL_FATAL(numla_fuzz_tool_calls_run(buf, len), 1);
        }
    }
}

/* A forced call (tool_choice naming a function, the server wrapping the arguments): nothing
 * comes out before the end; then one call with the trimmed text as its arguments, or the text
 * as content when it is not a JSON object (cut by max_tokens). */
static void test_forced(void)
{
    static const char *const texts[] = {" {\"city\":\"Oslo\",", "\"days\":3} ", "{\"city\":\"Os"};
    for (int cut = 0; cut < 2; cut++) {
        numla_tool_calls *p = NULL;
        CU_ASSERT_FATAL(numla_tool_calls_create_forced("get_weather", 5, &p) == NUMLA_STATUS_OK);
        const numla_tool_event *ev;
        int32_t ne;
        const char *t;
        CU_ASSERT_FATAL(numla_tool_calls_push(p, texts[0], strlen(texts[0]), &ev, &ne, &t) ==
                        NUMLA_STATUS_OK);
        CU_ASSERT_EQUAL(ne, 0);
        const char *second = cut ? texts[2] : texts[1];
        CU_ASSERT_FATAL(numla_tool_calls_push(p, second, strlen(second), &ev, &ne, &t) ==
                        NUMLA_STATUS_OK);
        CU_ASSERT_EQUAL(ne, 0);
        CU_ASSERT_FATAL(numla_tool_calls_finish(p, &ev, &ne, &t) == NUMLA_STATUS_OK);
        CU_ASSERT_EQUAL_FATAL(ne, 1);
        if (!cut) {
            CU_ASSERT_EQUAL(ev[0].call, 0);
            const numla_tool_call_out *c = numla_tool_calls_get(p, 0);
            CU_ASSERT_FATAL(c != NULL);
            CU_ASSERT_STRING_EQUAL(c->name, "get_weather");
            CU_ASSERT_STRING_EQUAL(c->arguments, "{\"city\":\"Oslo\",\"days\":3}");
            CU_ASSERT(!strncmp(c->id, "call_", 5));
            CU_ASSERT_STRING_EQUAL(numla_tool_calls_finish_reason(p, "stop"), "tool_calls");
        } else {
            CU_ASSERT(ev[0].call < 0 && ev[0].len == strlen(texts[0]) + strlen(texts[2]));
            CU_ASSERT_EQUAL(numla_tool_calls_count(p), 0);
            CU_ASSERT_STRING_EQUAL(numla_tool_calls_finish_reason(p, "length"), "length");
        }
        numla_tool_calls_destroy(&p);
    }
}

/* "required" over several tools: {"name", "arguments"} gives that call; anything else content. */
static void test_forced_any(void)
{
    static const char *const texts[] = {"{\"name\":\"get\",\"arguments\":{\"a\":[1, 2]}}",
                                        "{\"name\":\"get\",\"arguments\":3}",
                                        "{\"name\":\"get\",\"arguments\":{},\"x\":1}", "{\"name\":"};
    for (int k = 0; k < 4; k++) {
        numla_tool_calls *p = NULL;
        CU_ASSERT_FATAL(numla_tool_calls_create_forced(NULL, 5, &p) == NUMLA_STATUS_OK);
        const numla_tool_event *ev;
        int32_t ne;
        const char *t;
        CU_ASSERT_FATAL(numla_tool_calls_push(p, texts[k], strlen(texts[k]), &ev, &ne, &t) ==
                        NUMLA_STATUS_OK);
        CU_ASSERT_FATAL(numla_tool_calls_finish(p, &ev, &ne, &t) == NUMLA_STATUS_OK);
        CU_ASSERT_EQUAL_FATAL(ne, 1);
        CU_ASSERT_EQUAL(numla_tool_calls_count(p), k == 0);
        if (k == 0) {
            CU_ASSERT_STRING_EQUAL(numla_tool_calls_get(p, 0)->name, "get");
            CU_ASSERT_STRING_EQUAL(numla_tool_calls_get(p, 0)->arguments, "{\"a\":[1,2]}");
        } else
            CU_ASSERT(ev[0].call < 0 && ev[0].len == strlen(texts[k]));
        numla_tool_calls_destroy(&p);
    }
}

NUMLA_TEST_SUITE(tool_calls, NULL, NULL, NUMLA_TEST(test_goldens_any_cut),
                 NUMLA_TEST(test_families), NUMLA_TEST(test_fuzz_mutations), NUMLA_TEST(test_forced),
                 NUMLA_TEST(test_forced_any))
