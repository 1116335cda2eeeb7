/* tests/unit/engine/http/test_http_openai.c — OpenAI bodies parsed and objects written
 * (engine/http/openai.h), checked field by field and against expected JSON. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "common/strbuf.h"
#include "engine/http/openai.h"
#include "engine/serving/request_io.h"
#include "test_util.h"

static const numla_openai_limits LIM = {.vocab_size = 1000, .max_context = 512};

static int parse(numla_openai_endpoint ep, const char *body, numla_openai_request *r,
                 numla_openai_error *e)
{
    CU_ASSERT_EQUAL_FATAL(numla_openai_parse(ep, body, strlen(body), &LIM, r, e), NUMLA_STATUS_OK);
    return e->status;
}

/* Expect a 400 naming `param` (and `code` when given). */
static void expect_400(numla_openai_endpoint ep, const char *body, const char *param,
                       const char *code)
{
    numla_openai_request r;
    numla_openai_error e;
    int st = parse(ep, body, &r, &e);
    NUMLA_ASSERT_MSG(st == 400, "%s: status %d, want 400", body, st);
    NUMLA_ASSERT_MSG(!strcmp(e.param, param), "%s: param \"%s\", want \"%s\" (%s)", body, e.param,
                     param, e.message);
    if (code)
        NUMLA_ASSERT_MSG(!strcmp(e.code, code), "%s: code \"%s\", want \"%s\"", body, e.code, code);
    if (st != 400)
        numla_openai_request_free(&r);
}

/* vLLM's /tokenize and /detokenize bodies. */
static void test_tokenize_bodies(void)
{
    const numla_openai_endpoint T = NUMLA_OPENAI_TOKENIZE, D = NUMLA_OPENAI_DETOKENIZE;
    numla_openai_request r;
    numla_openai_error e;
    CU_ASSERT_EQUAL(parse(T, "{\"model\": \"m\", \"prompt\": \"hi\"}", &r, &e), 0);
    CU_ASSERT_EQUAL(r.num_prompts, 1);
    CU_ASSERT_STRING_EQUAL(r.prompts[0].text, "hi");
    CU_ASSERT_EQUAL(r.add_special, 1);
    CU_ASSERT_EQUAL(r.token_strs, 0);
    CU_ASSERT_STRING_EQUAL(r.model, "m");
    numla_openai_request_free(&r);
    CU_ASSERT_EQUAL(parse(T, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], "
                             "\"add_generation_prompt\": false, \"return_token_strs\": true, "
                             "\"chat_template_kwargs\": {\"thinking\": true}}", &r, &e), 0);
    CU_ASSERT_EQUAL(r.num_messages, 1);
    CU_ASSERT_EQUAL(r.num_prompts, 0);
    CU_ASSERT_EQUAL(r.add_special, 0);
    CU_ASSERT_EQUAL(r.add_generation_prompt, 0);
    CU_ASSERT_EQUAL(r.token_strs, 1);
    CU_ASSERT_EQUAL(r.thinking, 1);
    numla_openai_request_free(&r);
    CU_ASSERT_EQUAL(parse(D, "{\"tokens\": [1, 2, 99]}", &r, &e), 0);
    CU_ASSERT_EQUAL(r.prompts[0].num_tokens, 3);
    CU_ASSERT_EQUAL(r.prompts[0].tokens[2], 99);
    numla_openai_request_free(&r);
    CU_ASSERT_EQUAL(parse(D, "{\"tokens\": []}", &r, &e), 0);
    CU_ASSERT_EQUAL(r.prompts[0].num_tokens, 0);
    numla_openai_request_free(&r);
    expect_400(T, "{}", "prompt", NULL);
    expect_400(T, "{\"prompt\": \"a\", \"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}",
               "messages", NULL);
    expect_400(T, "{\"prompt\": [1, 2]}", "prompt", NULL);
    expect_400(T, "{\"prompt\": \"a\", \"max_tokens\": 3}", "max_tokens", "unknown_field");
    expect_400(T, "{\"prompt\": \"a\", \"add_special_tokens\": 1}", "add_special_tokens", NULL);
    expect_400(T, "{\"prompt\": \"a\", \"tools\": []}", "tools", NULL);
    expect_400(T, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], "
                  "\"continue_final_message\": true}", "continue_final_message",
               "unsupported_field");
    expect_400(T, "{\"messages\": []}", "messages", NULL);
    expect_400(D, "{}", "tokens", NULL);
    expect_400(D, "{\"tokens\": [1, 1000]}", "tokens", NULL); /* LIM's vocabulary: 1000 */
    expect_400(D, "{\"tokens\": [-1]}", "tokens", NULL);
    expect_400(D, "{\"tokens\": \"abc\"}", "tokens", NULL);
    expect_400(D, "{\"tokens\": [1], \"prompt\": \"a\"}", "prompt", "unknown_field");
}

/* A parser message that quotes the body next to a multi-byte character (jansson's "near ..."
 * cuts it) still gives a JSON error object. */
/* tool_choice (docs/serving.md): "none" keeps the tools, no call read out; a named function or
 * "required" with one tool forces the call, its arguments constrained by the parameters'
 * grammar; the rest is a 400 naming tool_choice (or response_format when both force). */
static void test_tool_choice(void)
{
#define TC_TOOLS "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get\", " \
    "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, " \
    "\"required\": [\"city\"]}}}"
#define TC_MSG "\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]"
    const numla_openai_endpoint C = NUMLA_OPENAI_CHAT;
    numla_openai_request r;
    numla_openai_error e;
    CU_ASSERT_EQUAL_FATAL(parse(C, "{" TC_MSG ", " TC_TOOLS "], \"tool_choice\": \"none\"}", &r, &e),
                          0);
    CU_ASSERT(r.tool_choice_none && !r.tool_choice_name && !r.grammar);
    numla_openai_request_free(&r);
    CU_ASSERT_EQUAL_FATAL(parse(C, "{" TC_MSG ", " TC_TOOLS "], \"tool_choice\": {\"type\": "
                                   "\"function\", \"function\": {\"name\": \"get\"}}}", &r, &e), 0);
    CU_ASSERT(!r.tool_choice_none && r.grammar && !strcmp(r.tool_choice_name, "get"));
    numla_openai_request_free(&r);
    CU_ASSERT_EQUAL_FATAL(parse(C, "{" TC_MSG ", " TC_TOOLS "], \"tool_choice\": \"required\"}", &r,
                                &e), 0);
    CU_ASSERT(r.grammar && !strcmp(r.tool_choice_name, "get"));
    numla_openai_request_free(&r);
    CU_ASSERT_EQUAL_FATAL(parse(C, "{" TC_MSG ", \"tools\": [{\"type\": \"function\", \"function\": "
                                   "{\"name\": \"f\"}}], \"tool_choice\": \"required\"}", &r, &e), 0);
    CU_ASSERT(r.grammar && !strcmp(r.tool_choice_name, "f")); /* no parameters: "{}" */
    numla_openai_request_free(&r);
    /* "required" with two tools: {"name", "arguments"} over both */
    CU_ASSERT_EQUAL_FATAL(parse(C, "{" TC_MSG ", " TC_TOOLS ", {\"type\": \"function\", \"function\": "
                                   "{\"name\": \"g\"}}], \"tool_choice\": \"required\"}", &r, &e), 0);
    CU_ASSERT(r.grammar && r.tool_choice_required && !r.tool_choice_name);
    numla_openai_request_free(&r);
    /* ... not with a $ref in a tool's parameters; an undeclared name, a non-object or
     * unsupported schema */
    expect_400(C, "{" TC_MSG ", " TC_TOOLS ", {\"type\": \"function\", \"function\": {\"name\": "
                  "\"g\", \"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"$ref\": "
                  "\"#/$defs/x\"}}, \"$defs\": {\"x\": {}}}}}], \"tool_choice\": \"required\"}",
               "tool_choice", NULL);
    expect_400(C, "{" TC_MSG ", \"tool_choice\": \"required\"}", "tool_choice", NULL);
    expect_400(C, "{" TC_MSG ", " TC_TOOLS "], \"tool_choice\": {\"type\": \"function\", "
                  "\"function\": {\"name\": \"nope\"}}}", "tool_choice", NULL);
    expect_400(C, "{" TC_MSG ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
                  "\"f\", \"parameters\": {\"type\": \"string\"}}}], \"tool_choice\": \"required\"}",
               "tool_choice", NULL);
    CU_ASSERT_EQUAL(parse(C, "{" TC_MSG ", \"tools\": [{\"type\": \"function\", \"function\": "
                             "{\"name\": \"f\", \"parameters\": {\"type\": \"object\", \"properties\": "
                             "{\"d\": {\"type\": \"string\", \"format\": \"regex\"}}}}}], "
                             "\"tool_choice\": \"required\"}", &r, &e), 400);
    CU_ASSERT(!strcmp(e.param, "tool_choice") && strstr(e.message, "'format'") &&
              strstr(e.message, "tools[0].function.parameters"));
    expect_400(C, "{" TC_MSG ", " TC_TOOLS "], \"tool_choice\": \"required\", \"response_format\": "
                  "{\"type\": \"json_object\"}}", "response_format", NULL);
    expect_400(C, "{" TC_MSG ", " TC_TOOLS "], \"tool_choice\": \"any\"}", "tool_choice", NULL);
    expect_400(C, "{" TC_MSG ", " TC_TOOLS "], \"tool_choice\": {\"type\": \"function\", "
                  "\"function\": {\"name\": \"get\"}, \"x\": 1}}", "tool_choice", NULL);
    /* response_format alone: a grammar; outside the subset: a 400 naming it and the keyword */
    CU_ASSERT_EQUAL_FATAL(parse(C, "{" TC_MSG ", \"response_format\": {\"type\": \"json_object\"}}",
                                &r, &e), 0);
    CU_ASSERT(r.grammar != NULL);
    numla_openai_request_free(&r);
    CU_ASSERT_EQUAL(parse(NUMLA_OPENAI_COMPLETIONS, "{\"prompt\": \"a\", \"response_format\": "
                          "{\"type\": \"json_schema\", \"json_schema\": {\"name\": \"x\", "
                          "\"schema\": {\"type\": \"array\", \"uniqueItems\": true}}}}", &r, &e), 400);
    CU_ASSERT(!strcmp(e.param, "response_format") && strstr(e.message, "'uniqueItems'"));
#undef TC_TOOLS
#undef TC_MSG
}

static void test_error_message_utf8(void)
{
    const char body[] = "{\"messages\": [{\"role\": \"user\", \"content\":\"\\\xe2\x8c\x86" "fa\"}]}";
    numla_openai_request r;
    numla_openai_error e;
    CU_ASSERT_EQUAL(parse(NUMLA_OPENAI_CHAT, body, &r, &e), 400);
    char *s = NULL;
    const numla_status st = numla_openai_format_error(&e, &s);
    NUMLA_ASSERT_MSG(st == NUMLA_STATUS_OK && s, "no error object for '%s'", e.message);
    json_t *o = s ? json_loads(s, 0, NULL) : NULL;
    CU_ASSERT_PTR_NOT_NULL(json_object_get(o, "error"));
    json_decref(o);
    free(s);
}

static void test_completions_fields(void)
{
    numla_openai_request r;
    numla_openai_error e;
    CU_ASSERT_EQUAL(parse(NUMLA_OPENAI_COMPLETIONS,
                          "{\"model\": \"m\", \"prompt\": \"Hi \\u00e9\", \"max_tokens\": 7, "
                          "\"temperature\": 0.5, \"top_p\": 0.9, \"top_k\": 40, \"seed\": 3, "
                          "\"stop\": \"\\n\", \"logprobs\": 2, \"stream\": true, "
                          "\"stream_options\": {\"include_usage\": true}, \"ignore_eos\": true, "
                          "\"stop_token_ids\": [5, 6], \"n\": 1, \"echo\": false, \"user\": \"u\"}",
                          &r, &e), 0);
    CU_ASSERT_EQUAL(r.num_prompts, 1);
    CU_ASSERT_STRING_EQUAL(r.prompts[0].text, "Hi \xc3\xa9");
    CU_ASSERT_EQUAL(r.prompts[0].text_len, 5);
    CU_ASSERT_PTR_NULL(r.prompts[0].tokens);
    CU_ASSERT_STRING_EQUAL(r.model, "m");
    CU_ASSERT_EQUAL(r.params.max_tokens, 7);
    CU_ASSERT_DOUBLE_EQUAL(r.params.temperature, 0.5, 0);
    CU_ASSERT_DOUBLE_EQUAL(r.params.top_p, 0.9, 0);
    CU_ASSERT_EQUAL(r.params.top_k, 40);
    CU_ASSERT(r.params.has_seed && r.params.seed == 3);
    CU_ASSERT_EQUAL(r.num_stop_strings, 1);
    CU_ASSERT_STRING_EQUAL(r.stop_strings[0], "\n");
    CU_ASSERT_EQUAL(r.params.logprobs, 2);
    CU_ASSERT(r.stream && r.include_usage && r.params.ignore_eos);
    CU_ASSERT(r.params.num_stop == 2 && r.params.stop_token_ids[1] == 6);
    numla_openai_request_free(&r);

    /* defaults */
    CU_ASSERT_EQUAL(parse(NUMLA_OPENAI_COMPLETIONS, "{\"prompt\": [1, 2, 3]}", &r, &e), 0);
    CU_ASSERT(r.num_prompts == 1 && r.prompts[0].num_tokens == 3 && r.prompts[0].tokens[2] == 3);
    CU_ASSERT_EQUAL(r.params.max_tokens, 16);
    CU_ASSERT_DOUBLE_EQUAL(r.params.temperature, 1, 0);
    CU_ASSERT(r.params.logprobs < 0 && !r.stream && !r.params.has_seed && r.max_tokens_given);
    numla_openai_request_free(&r);

    /* lists of prompts */
    CU_ASSERT_EQUAL(parse(NUMLA_OPENAI_COMPLETIONS, "{\"prompt\": [\"a\", \"bc\"], \"stop\": [\"x\", \"yz\"]}",
                          &r, &e), 0);
    CU_ASSERT(r.num_prompts == 2 && !strcmp(r.prompts[1].text, "bc"));
    CU_ASSERT(r.num_stop_strings == 2 && !strcmp(r.stop_strings[1], "yz"));
    numla_openai_request_free(&r);
    CU_ASSERT_EQUAL(parse(NUMLA_OPENAI_COMPLETIONS, "{\"prompt\": [[1], [2, 999]]}", &r, &e), 0);
    CU_ASSERT(r.num_prompts == 2 && r.prompts[1].num_tokens == 2 && r.prompts[1].tokens[1] == 999);
    numla_openai_request_free(&r);
}

static void test_chat_fields(void)
{
    numla_openai_request r;
    numla_openai_error e;
    CU_ASSERT_EQUAL(parse(NUMLA_OPENAI_CHAT,
                          "{\"model\": \"m\", \"messages\": [{\"role\": \"system\", \"content\": \"S\"},"
                          " {\"role\": \"user\", \"content\": \"U\", \"name\": \"bob\"},"
                          " {\"role\": \"assistant\", \"content\": \"A\"}],"
                          " \"max_completion_tokens\": 9, \"logprobs\": true, \"top_logprobs\": 3,"
                          " \"stream\": true, \"stream_options\": {\"include_usage\": false}}",
                          &r, &e), 0);
    CU_ASSERT_EQUAL(r.num_messages, 3);
    CU_ASSERT(r.messages[0].role == NUMLA_OPENAI_ROLE_SYSTEM && !strcmp(r.messages[0].content, "S"));
    CU_ASSERT(r.messages[1].role == NUMLA_OPENAI_ROLE_USER && !strcmp(r.messages[1].content, "U"));
    CU_ASSERT(r.messages[2].role == NUMLA_OPENAI_ROLE_ASSISTANT);
    CU_ASSERT(r.params.max_tokens == 9 && r.max_tokens_given);
    CU_ASSERT_EQUAL(r.params.logprobs, 3);
    CU_ASSERT(r.stream && !r.include_usage);
    CU_ASSERT_EQUAL(r.num_prompts, 0);
    numla_openai_request_free(&r);

    /* without max_tokens: up to the context, which the one check sets after tokenization */
    CU_ASSERT_EQUAL(parse(NUMLA_OPENAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"\"}]}",
                          &r, &e), 0);
    CU_ASSERT(!r.max_tokens_given && r.params.logprobs < 0);
    numla_request_field_error fe;
    CU_ASSERT_EQUAL(numla_request_fit_context(12, r.max_tokens_given, LIM.max_context, &r.params,
                                              &fe), 1);
    CU_ASSERT_EQUAL(r.params.max_tokens, 500);
    numla_openai_request_free(&r);

    /* reasoning_effort: chat keeps the string (the adapter checks it against the template);
     * null is absent */
    CU_ASSERT_EQUAL(parse(NUMLA_OPENAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": "
                          "\"\"}], \"reasoning_effort\": \"max\"}", &r, &e), 0);
    CU_ASSERT(r.reasoning_effort && !strcmp(r.reasoning_effort, "max"));
    numla_openai_request_free(&r);
    CU_ASSERT_EQUAL(parse(NUMLA_OPENAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": "
                          "\"\"}], \"reasoning_effort\": null}", &r, &e), 0);
    CU_ASSERT_PTR_NULL(r.reasoning_effort);
    numla_openai_request_free(&r);
}

static void test_errors_name_the_field(void)
{
    numla_openai_endpoint C = NUMLA_OPENAI_COMPLETIONS, H = NUMLA_OPENAI_CHAT;
    expect_400(C, "{\"prompt\": \"a\"", "", "invalid_json");
    expect_400(C, "[1]", "", "invalid_json");
    expect_400(C, "{\"prompt\": \"\xff\"}", "", "invalid_json");
    expect_400(C, "{\"prompt\": \"a\", \"bogus\": 1}", "bogus", "unknown_field");
    expect_400(C, "{\"prompt\": \"a\", \"n\": 0}", "n", "invalid_value");
    expect_400(C, "{\"prompt\": \"a\", \"n\": 129}", "n", "invalid_value");
    expect_400(C, "{\"prompt\": \"a\", \"n\": 1.5}", "n", "invalid_value");
    expect_400(C, "{\"prompt\": [\"a\", \"b\", \"c\"], \"n\": 43}", "n", "invalid_value");
    expect_400(C, "{\"prompt\": \"a\", \"echo\": \"yes\"}", "echo", "invalid_value");
    { /* echo: completions take it */
        numla_openai_request r;
        numla_openai_error e;
        CU_ASSERT_EQUAL(parse(C, "{\"prompt\": \"a\", \"echo\": true, \"max_tokens\": 0}", &r, &e), 0);
        CU_ASSERT_EQUAL(r.echo, 1);
        CU_ASSERT_EQUAL(r.params.max_tokens, 0);
        numla_openai_request_free(&r);
    }
    expect_400(NUMLA_OPENAI_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"echo\": true}", "echo", "unsupported_field");
    expect_400(C, "{\"prompt\": \"a\", \"best_of\": 3}", "best_of", "invalid_value");
    expect_400(C, "{\"prompt\": \"a\", \"n\": 2, \"best_of\": 3}", "best_of", "invalid_value");
    expect_400(C, "{\"prompt\": \"a\", \"suffix\": \"z\"}", "suffix", "unsupported_field");
    expect_400(C, "{\"prompt\": \"a\", \"reasoning_effort\": \"max\"}", "reasoning_effort",
               "unsupported_field");
    expect_400(H, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], "
                  "\"reasoning_effort\": 3}", "reasoning_effort", "invalid_value");
    expect_400(H, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], "
                  "\"reasoning_effort\": \"\"}", "reasoning_effort", "invalid_value");
    /* the penalties, min_p and logit_bias: out of range or of the wrong type, naming the field */
    expect_400(C, "{\"prompt\": \"a\", \"presence_penalty\": 2.5}", "presence_penalty",
               "invalid_value");
    expect_400(C, "{\"prompt\": \"a\", \"presence_penalty\": \"0.5\"}", "presence_penalty", NULL);
    expect_400(H, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], "
                  "\"frequency_penalty\": -2.01}", "frequency_penalty", "invalid_value");
    expect_400(C, "{\"prompt\": \"a\", \"frequency_penalty\": true}", "frequency_penalty", NULL);
    expect_400(C, "{\"prompt\": \"a\", \"repetition_penalty\": 0}", "repetition_penalty", NULL);
    expect_400(C, "{\"prompt\": \"a\", \"repetition_penalty\": -1}", "repetition_penalty", NULL);
    expect_400(C, "{\"prompt\": \"a\", \"min_p\": 1.01}", "min_p", NULL);
    expect_400(H, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"min_p\": -0.1}",
               "min_p", NULL);
    expect_400(C, "{\"prompt\": \"a\", \"min_p\": [0.1]}", "min_p", NULL);
    expect_400(C, "{\"prompt\": \"a\", \"logit_bias\": [1, 5]}", "logit_bias", "invalid_value");
    expect_400(C, "{\"prompt\": \"a\", \"logit_bias\": {\"1000\": 5}}", "logit_bias", NULL);
    expect_400(C, "{\"prompt\": \"a\", \"logit_bias\": {\"-1\": 5}}", "logit_bias", NULL);
    expect_400(C, "{\"prompt\": \"a\", \"logit_bias\": {\"07\": 5}}", "logit_bias", NULL);
    expect_400(C, "{\"prompt\": \"a\", \"logit_bias\": {\"tok\": 5}}", "logit_bias", NULL);
    expect_400(C, "{\"prompt\": \"a\", \"logit_bias\": {\"7\": 100.5}}", "logit_bias", NULL);
    expect_400(H, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], "
                  "\"logit_bias\": {\"7\": \"5\"}}", "logit_bias", NULL);
    expect_400(H, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"tools\": {}}", "tools",
               "invalid_value");
    expect_400(C, "{}", "prompt", "invalid_value");
    expect_400(C, "{\"prompt\": []}", "prompt", NULL);
    expect_400(C, "{\"prompt\": [1, \"a\"]}", "prompt", NULL);
    expect_400(C, "{\"prompt\": [1000]}", "prompt", NULL);
    expect_400(C, "{\"prompt\": [[1], []]}", "prompt", NULL);
    expect_400(C, "{\"prompt\": {\"a\": 1}}", "prompt", NULL);
    expect_400(C, "{\"prompt\": \"a\", \"max_tokens\": -1}", "max_tokens", NULL);
    expect_400(C, "{\"prompt\": \"a\", \"max_tokens\": 1.5}", "max_tokens", NULL);
    expect_400(H, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], "
                  "\"max_completion_tokens\": -4}", "max_completion_tokens", NULL);
    expect_400(C, "{\"prompt\": \"a\", \"stop_token_ids\": [1, -1]}", "stop_token_ids", NULL);
    expect_400(C, "{\"prompt\": \"a\", \"temperature\": -0.1}", "temperature", NULL);
    expect_400(C, "{\"prompt\": \"a\", \"temperature\": \"hot\"}", "temperature", NULL);
    expect_400(C, "{\"prompt\": \"a\", \"top_p\": 0}", "top_p", NULL);
    expect_400(C, "{\"prompt\": \"a\", \"top_k\": -2}", "top_k", NULL);
    expect_400(C, "{\"prompt\": \"a\", \"seed\": 1.5}", "seed", NULL);
    expect_400(C, "{\"prompt\": \"a\", \"stop\": \"\"}", "stop", NULL);
    expect_400(C, "{\"prompt\": \"a\", \"stop\": [1]}", "stop", NULL);
    expect_400(C, "{\"prompt\": \"a\", \"logprobs\": 21}", "logprobs", NULL);
    expect_400(C, "{\"prompt\": \"a\", \"stream\": 1}", "stream", NULL);
    expect_400(C, "{\"prompt\": \"a\", \"stream_options\": {\"include_usage\": true}}",
               "stream_options", NULL);
    expect_400(C, "{\"prompt\": \"a\", \"stream\": true, \"stream_options\": {\"x\": 1}}",
               "stream_options.x", "unknown_field");
    expect_400(C, "{\"prompt\": \"a\", \"stop_token_ids\": [1000]}", "stop_token_ids", NULL);
    expect_400(C, "{\"prompt\": \"a\", \"ignore_eos\": 1}", "ignore_eos", NULL);
    expect_400(C, "{\"prompt\": \"a\", \"messages\": []}", "messages", "unknown_field");
    expect_400(H, "{\"prompt\": \"a\", \"messages\": []}", "prompt", "unknown_field");
    expect_400(H, "{\"messages\": []}", "messages", NULL);
    expect_400(H, "{\"messages\": [{\"role\": \"developer\", \"content\": \"a\"}]}",
               "messages[0].role", NULL);
    expect_400(H, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]}",
               "messages[0].content", NULL);
    expect_400(H, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\", \"tool_calls\": []}]}",
               "messages[0].tool_calls", "invalid_value");
    expect_400(H, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\", \"audio\": 1}]}",
               "messages[0].audio", "unknown_field");
    expect_400(H, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"top_logprobs\": 2}",
               "top_logprobs", NULL);
    expect_400(H, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"logprobs\": 2}",
               "logprobs", NULL);
    expect_400(H, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"max_tokens\": 3, "
                  "\"max_completion_tokens\": 4}", "max_completion_tokens", NULL);
}

/* presence/frequency/repetition_penalty, min_p and logit_bias reach the sampling params, on
 * both endpoints, at the ends of their ranges; a message names the key of a bad logit_bias. */
static void test_penalty_fields(void)
{
    numla_openai_request r;
    numla_openai_error e;
    CU_ASSERT_EQUAL(parse(NUMLA_OPENAI_COMPLETIONS,
                          "{\"prompt\": \"a\", \"presence_penalty\": -2, \"frequency_penalty\": 2,"
                          " \"repetition_penalty\": 1.3, \"min_p\": 1,"
                          " \"logit_bias\": {\"0\": -100, \"999\": 100, \"17\": 2.5}}", &r, &e), 0);
    CU_ASSERT_DOUBLE_EQUAL(r.params.presence_penalty, -2, 0);
    CU_ASSERT_DOUBLE_EQUAL(r.params.frequency_penalty, 2, 0);
    CU_ASSERT_DOUBLE_EQUAL(r.params.repetition_penalty, 1.3, 0);
    CU_ASSERT_DOUBLE_EQUAL(r.params.min_p, 1, 0);
    CU_ASSERT_EQUAL_FATAL(r.params.num_logit_bias, 3);
    float got[1000] = {0};
    for (int32_t i = 0; i < 3; i++)
        got[r.params.logit_bias_tokens[i]] = r.params.logit_bias_values[i];
    CU_ASSERT(got[0] == -100.0f && got[999] == 100.0f && got[17] == 2.5f);
    numla_openai_request_free(&r);
    /* chat, nulls keep the defaults (off) */
    CU_ASSERT_EQUAL(parse(NUMLA_OPENAI_CHAT,
                          "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}],"
                          " \"presence_penalty\": null, \"frequency_penalty\": 0.5,"
                          " \"repetition_penalty\": null, \"min_p\": 0, \"logit_bias\": null}", &r, &e), 0);
    CU_ASSERT(r.params.presence_penalty == 0 && r.params.frequency_penalty == 0.5 &&
              r.params.repetition_penalty == 1 && r.params.min_p == 0 &&
              r.params.num_logit_bias == 0);
    numla_openai_request_free(&r);
    /* the message quotes the key and the vocabulary */
    CU_ASSERT_EQUAL(parse(NUMLA_OPENAI_COMPLETIONS,
                          "{\"prompt\": \"a\", \"logit_bias\": {\"5\": 1, \"1000\": 1}}", &r, &e), 400);
    NUMLA_ASSERT_MSG(strstr(e.message, "logit_bias[\"1000\"]") && strstr(e.message, "0..999"),
                     "message: %s", e.message);
    /* more entries than the sampler keeps (the count is checked before the keys) */
    numla_strbuf b = {0};
    numla_strbuf_puts(&b, "{\"prompt\": \"a\", \"logit_bias\": {");
    for (int i = 0; i <= NUMLA_SAMPLER_MAX_LOGIT_BIAS; i++)
        numla_strbuf_printf(&b, "%s\"%d\": 1", i ? ", " : "", i);
    numla_strbuf_puts(&b, "}}");
    CU_ASSERT_EQUAL(parse(NUMLA_OPENAI_COMPLETIONS, numla_strbuf_str(&b), &r, &e), 400);
    NUMLA_ASSERT_MSG(!strcmp(e.param, "logit_bias") && strstr(e.message, "at most 1024"),
                     "param %s message: %s", e.param, e.message);
    numla_strbuf_free(&b);
}

/* tools, tool calls, tool messages, names, reasoning_content and chat_template_kwargs. */
static void test_chat_tools_fields(void)
{
    numla_openai_request r;
    numla_openai_error e;
    CU_ASSERT_EQUAL(parse(NUMLA_OPENAI_CHAT,
        "{\"messages\": ["
        " {\"role\": \"user\", \"content\": \"Weather?\", \"name\": \"alice\"},"
        " {\"role\": \"assistant\", \"content\": null, \"reasoning_content\": \"Look it up.\","
        "  \"tool_calls\": [{\"id\": \"functions.get_weather:0\", \"type\": \"function\","
        "   \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Oslo\\\"}\"}},"
        "   {\"function\": {\"name\": \"search\", \"arguments\": \"{}\"}}]},"
        " {\"role\": \"tool\", \"content\": \"cold\", \"tool_call_id\": \"functions.get_weather:0\","
        "  \"name\": \"get_weather\"},"
        " {\"role\": \"assistant\", \"content\": \"Cold.\", \"reasoning_content\": null}],"
        " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\","
        "  \"description\": \"W\\u00e9\", \"parameters\": {\"type\": \"object\", \"b\": 1, \"a\": 2},"
        "  \"strict\": false}}, {\"type\": \"function\", \"function\": {\"name\": \"search\"}}],"
        " \"tool_choice\": \"auto\", \"parallel_tool_calls\": true,"
        " \"chat_template_kwargs\": {\"thinking\": true}}", &r, &e), 0);
    CU_ASSERT_EQUAL_FATAL(r.num_messages, 4);
    CU_ASSERT_STRING_EQUAL(r.messages[0].name, "alice");
    const numla_openai_message *a = &r.messages[1];
    CU_ASSERT(a->role == NUMLA_OPENAI_ROLE_ASSISTANT && a->content == NULL && a->has_tool_calls);
    CU_ASSERT_STRING_EQUAL(a->reasoning_content, "Look it up.");
    CU_ASSERT_EQUAL_FATAL(a->num_tool_calls, 2);
    CU_ASSERT_STRING_EQUAL(a->tool_calls[0].id, "functions.get_weather:0");
    CU_ASSERT_STRING_EQUAL(a->tool_calls[0].name, "get_weather");
    CU_ASSERT_STRING_EQUAL(a->tool_calls[0].arguments, "{\"city\": \"Oslo\"}");
    CU_ASSERT(a->tool_calls[1].id == NULL && !strcmp(a->tool_calls[1].name, "search"));
    CU_ASSERT(r.messages[2].role == NUMLA_OPENAI_ROLE_TOOL);
    CU_ASSERT_STRING_EQUAL(r.messages[2].tool_call_id, "functions.get_weather:0");
    CU_ASSERT_STRING_EQUAL(r.messages[2].name, "get_weather");
    CU_ASSERT(r.messages[3].reasoning_content == NULL && !r.messages[3].has_tool_calls);
    CU_ASSERT_EQUAL(r.num_tools, 2);
    /* the client's key order is kept: the templates write the tools back in it */
    CU_ASSERT_STRING_EQUAL(r.tools_json,
                           "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                           "\"description\":\"W\xc3\xa9\",\"parameters\":{\"type\":\"object\","
                           "\"b\":1,\"a\":2},\"strict\":false}},{\"type\":\"function\","
                           "\"function\":{\"name\":\"search\"}}]");
    CU_ASSERT_EQUAL(r.thinking, 1);
    numla_openai_request_free(&r);

    /* enable_thinking is the same switch; absent is -1; an empty tools list is none */
    CU_ASSERT_EQUAL(parse(NUMLA_OPENAI_CHAT,
                          "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"tools\": [],"
                          " \"chat_template_kwargs\": {\"enable_thinking\": false}}", &r, &e), 0);
    CU_ASSERT(r.thinking == 0 && r.tools_json == NULL && r.num_tools == 0);
    numla_openai_request_free(&r);
    CU_ASSERT_EQUAL(parse(NUMLA_OPENAI_CHAT,
                          "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}", &r, &e), 0);
    CU_ASSERT_EQUAL(r.thinking, -1);
    numla_openai_request_free(&r);
}

static void test_chat_tools_errors(void)
{
    numla_openai_endpoint H = NUMLA_OPENAI_CHAT;
#define U "{\"role\": \"user\", \"content\": \"a\"}"
#define CALL(fn) "{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [" fn "]}"
    expect_400(H, "{\"messages\": [" U ", " CALL("{\"function\": {\"name\": \"f\"}}") "]}",
               "messages[1].tool_calls[0].function.arguments", NULL);
    expect_400(H, "{\"messages\": [" U ", " CALL("{\"function\": {\"name\": \"f\", \"arguments\": {}}}")
                  "]}", "messages[1].tool_calls[0].function.arguments", NULL);
    expect_400(H, "{\"messages\": [" U ", " CALL("{\"function\": {\"name\": \"\", \"arguments\": \"{}\"}}")
                  "]}", "messages[1].tool_calls[0].function.name", NULL);
    expect_400(H, "{\"messages\": [" U ", " CALL("{\"type\": \"code\", \"function\": {\"name\": \"f\", "
                  "\"arguments\": \"{}\"}}") "]}", "messages[1].tool_calls[0].type", NULL);
    expect_400(H, "{\"messages\": [" U ", " CALL("{\"id\": 7, \"function\": {\"name\": \"f\", "
                  "\"arguments\": \"{}\"}}") "]}", "messages[1].tool_calls[0].id", NULL);
    expect_400(H, "{\"messages\": [" U ", " CALL("{\"x\": 1, \"function\": {\"name\": \"f\", "
                  "\"arguments\": \"{}\"}}") "]}", "messages[1].tool_calls[0].x", "unknown_field");
    expect_400(H, "{\"messages\": [" U ", " CALL("{\"function\": {\"name\": \"f\", \"arguments\": \"{}\","
                  " \"y\": 2}}") "]}", "messages[1].tool_calls[0].function.y", "unknown_field");
    expect_400(H, "{\"messages\": [" U ", " CALL("1") "]}", "messages[1].tool_calls[0]", NULL);
    expect_400(H, "{\"messages\": [" U ", {\"role\": \"assistant\", \"content\": null}]}",
               "messages[1].content", NULL);
    expect_400(H, "{\"messages\": [" U ", {\"role\": \"assistant\", \"content\": null, "
                  "\"tool_calls\": []}]}", "messages[1].content", NULL);
    expect_400(H, "{\"messages\": [" U ", {\"role\": \"assistant\", \"content\": \"b\", "
                  "\"tool_calls\": {}}]}", "messages[1].tool_calls", NULL);
    expect_400(H, "{\"messages\": [{\"role\": \"tool\", \"content\": \"a\", \"tool_call_id\": 3}]}",
               "messages[0].tool_call_id", NULL);
    expect_400(H, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\", \"tool_call_id\": \"x\"}]}",
               "messages[0].tool_call_id", NULL);
    expect_400(H, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\", \"reasoning_content\": "
                  "\"r\"}]}", "messages[0].reasoning_content", NULL);
    expect_400(H, "{\"messages\": [{\"role\": \"assistant\", \"content\": \"a\", "
                  "\"reasoning_content\": 1}]}", "messages[0].reasoning_content", NULL);
    expect_400(H, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\", \"name\": 5}]}",
               "messages[0].name", NULL);
    expect_400(H, "{\"messages\": [" U "], \"tools\": [1]}", "tools[0]", NULL);
    expect_400(H, "{\"messages\": [" U "], \"tools\": [{\"type\": \"web\", \"function\": "
                  "{\"name\": \"f\"}}]}", "tools[0].type", NULL);
    expect_400(H, "{\"messages\": [" U "], \"tools\": [{\"type\": \"function\"}]}",
               "tools[0].function", NULL);
    expect_400(H, "{\"messages\": [" U "], \"tools\": [{\"type\": \"function\", \"function\": "
                  "{\"name\": \"f\"}}, {\"type\": \"function\", \"function\": {\"name\": 1}}]}",
               "tools[1].function.name", NULL);
    expect_400(H, "{\"messages\": [" U "], \"tools\": [{\"type\": \"function\", \"function\": "
                  "{\"name\": \"f\", \"parameters\": \"{}\"}}]}", "tools[0].function.parameters", NULL);
    expect_400(H, "{\"messages\": [" U "], \"tools\": [{\"type\": \"function\", \"function\": "
                  "{\"name\": \"f\", \"description\": 2}}]}", "tools[0].function.description", NULL);
    expect_400(H, "{\"messages\": [" U "], \"tools\": [{\"type\": \"function\", \"function\": "
                  "{\"name\": \"f\", \"examples\": []}}]}", "tools[0].function.examples",
               "unknown_field");
    expect_400(H, "{\"messages\": [" U "], \"tools\": [{\"type\": \"function\", \"function\": "
                  "{\"name\": \"f\"}, \"extra\": 1}]}", "tools[0].extra", "unknown_field");
    expect_400(H, "{\"messages\": [" U "], \"tool_choice\": \"required\"}", "tool_choice", NULL);
    expect_400(H, "{\"messages\": [" U "], \"tool_choice\": {\"type\": \"function\"}}",
               "tool_choice", NULL);
    expect_400(H, "{\"messages\": [" U "], \"parallel_tool_calls\": 1}", "parallel_tool_calls",
               NULL);
    expect_400(H, "{\"messages\": [" U "], \"chat_template_kwargs\": true}", "chat_template_kwargs",
               NULL);
    expect_400(H, "{\"messages\": [" U "], \"chat_template_kwargs\": {\"thinking\": \"yes\"}}",
               "chat_template_kwargs.thinking", NULL);
    expect_400(H, "{\"messages\": [" U "], \"chat_template_kwargs\": {\"tools_mode\": 1}}",
               "chat_template_kwargs.tools_mode", "unknown_field");
    expect_400(H, "{\"messages\": [" U "], \"chat_template_kwargs\": {\"thinking\": true, "
                  "\"enable_thinking\": false}}", "chat_template_kwargs.enable_thinking", NULL);
    /* completions take none of them */
    expect_400(NUMLA_OPENAI_COMPLETIONS, "{\"prompt\": \"a\", \"chat_template_kwargs\": {}}",
               "chat_template_kwargs", "unknown_field");
    expect_400(NUMLA_OPENAI_COMPLETIONS, "{\"prompt\": \"a\", \"tools\": []}", "tools",
               "unknown_field");
#undef U
#undef CALL
}

/* Compare a formatted object with the expected JSON (key order and spacing free). */
static void expect_json(const char *got, const char *want)
{
    json_error_t je;
    json_t *g = json_loads(got, 0, &je), *w = json_loads(want, 0, &je);
    NUMLA_ASSERT_MSG(g && w && json_equal(g, w), "got  %s\nwant %s", got, want);
    json_decref(g);
    json_decref(w);
}

/* An SSE event: "data: " + JSON + blank line. */
static void expect_event(const char *got, const char *want)
{
    size_t n = strlen(got);
    NUMLA_ASSERT_MSG(!strncmp(got, "data: ", 6) && n > 8 && !strcmp(got + n - 2, "\n\n"),
                     "not an SSE event: %s", got);
    char *body = strndup(got + 6, n - 8);
    expect_json(body, want);
    free(body);
}

static void test_format(void)
{
    char *s = NULL;
    numla_openai_error e;
    numla_openai_error_set(&e, 400, "top_p", "invalid_value", "'top_p' must be a number in (0, 1]");
    CU_ASSERT_EQUAL(numla_openai_format_error(&e, &s), NUMLA_STATUS_OK);
    expect_json(s, "{\"error\": {\"message\": \"'top_p' must be a number in (0, 1]\", \"type\": "
                   "\"invalid_request_error\", \"param\": \"top_p\", \"code\": \"invalid_value\"}}");
    free(s);
    numla_openai_error_set(&e, 503, NULL, NULL, "down");
    CU_ASSERT_EQUAL(numla_openai_format_error(&e, &s), NUMLA_STATUS_OK);
    expect_json(s, "{\"error\": {\"message\": \"down\", \"type\": \"server_error\", \"param\": null, "
                   "\"code\": null}}");
    free(s);

    numla_openai_reply rc = {NUMLA_OPENAI_COMPLETIONS, "cmpl-1", 1700000000, "tiny", NULL};
    numla_openai_reply rh = {NUMLA_OPENAI_CHAT, "chatcmpl-1", 1700000000, "tiny", NULL};
    numla_openai_usage u = {.prompt_tokens = 5, .completion_tokens = 3, .cached_tokens = 2};
    numla_openai_choice ch[2] = {{.text = "ab\xc3\xa9", .text_len = 4, .finish_reason = "length"},
                                 {.text = "x", .text_len = 1, .finish_reason = "stop"}};
    CU_ASSERT_EQUAL(numla_openai_format_response(&rc, ch, 2, &u, &s), NUMLA_STATUS_OK);
    expect_json(s, "{\"id\": \"cmpl-1\", \"object\": \"text_completion\", \"created\": 1700000000, "
                   "\"model\": \"tiny\", \"choices\": [{\"index\": 0, \"text\": \"ab\\u00e9\", "
                   "\"logprobs\": null, \"finish_reason\": \"length\"}, {\"index\": 1, \"text\": "
                   "\"x\", \"logprobs\": null, \"finish_reason\": \"stop\"}], \"usage\": "
                   "{\"prompt_tokens\": 5, \"completion_tokens\": 3, \"total_tokens\": 8, "
                   "\"prompt_tokens_details\": {\"cached_tokens\": 2}}}");
    free(s);
    CU_ASSERT_EQUAL(numla_openai_format_response(&rh, ch, 1, &u, &s), NUMLA_STATUS_OK);
    expect_json(s, "{\"id\": \"chatcmpl-1\", \"object\": \"chat.completion\", \"created\": 1700000000, "
                   "\"model\": \"tiny\", \"choices\": [{\"index\": 0, \"message\": {\"role\": "
                   "\"assistant\", \"content\": \"ab\\u00e9\"}, \"logprobs\": null, "
                   "\"finish_reason\": \"length\"}], \"usage\": {\"prompt_tokens\": 5, "
                   "\"completion_tokens\": 3, \"total_tokens\": 8, \"prompt_tokens_details\": "
                   "{\"cached_tokens\": 2}}}");
    free(s);

    /* logprobs */
    numla_logprob_entry lp = {.token = 7, .logprob = -0.5f, .num_top = 1, .top_tokens = {7},
                              .top_logprobs = {-0.5f}};
    numla_openai_choice cl = {.text = "t", .text_len = 1, .finish_reason = "length",
                              .num_logprobs = 1, .logprobs = &lp};
    CU_ASSERT_EQUAL(numla_openai_format_response(&rc, &cl, 1, &u, &s), NUMLA_STATUS_OK);
    expect_json(s, "{\"id\": \"cmpl-1\", \"object\": \"text_completion\", \"created\": 1700000000, "
                   "\"model\": \"tiny\", \"choices\": [{\"index\": 0, \"text\": \"t\", \"logprobs\": "
                   "{\"tokens\": [\"token_id:7\"], \"token_logprobs\": [-0.5], \"top_logprobs\": "
                   "[{\"token_id:7\": -0.5}], \"text_offset\": [0]}, \"finish_reason\": \"length\"}], "
                   "\"usage\": {\"prompt_tokens\": 5, \"completion_tokens\": 3, \"total_tokens\": 8, "
                   "\"prompt_tokens_details\": {\"cached_tokens\": 2}}}");
    free(s);
    CU_ASSERT_EQUAL(numla_openai_format_chunk(&rh, 0, &cl, 0, &s), NUMLA_STATUS_OK);
    expect_event(s, "{\"id\": \"chatcmpl-1\", \"object\": \"chat.completion.chunk\", \"created\": "
                    "1700000000, \"model\": \"tiny\", \"choices\": [{\"index\": 0, \"delta\": "
                    "{\"content\": \"t\"}, \"logprobs\": {\"content\": [{\"token\": \"token_id:7\", "
                    "\"logprob\": -0.5, \"bytes\": null, \"top_logprobs\": [{\"token\": "
                    "\"token_id:7\", \"logprob\": -0.5, \"bytes\": null}]}]}, \"finish_reason\": "
                    "\"length\"}]}");
    free(s);

    /* chunks */
    numla_openai_choice piece = {.text = "hi", .text_len = 2};
    CU_ASSERT_EQUAL(numla_openai_format_chunk(&rc, 1, &piece, 0, &s), NUMLA_STATUS_OK);
    expect_event(s, "{\"id\": \"cmpl-1\", \"object\": \"text_completion\", \"created\": 1700000000, "
                    "\"model\": \"tiny\", \"choices\": [{\"index\": 1, \"text\": \"hi\", "
                    "\"logprobs\": null, \"finish_reason\": null}]}");
    free(s);
    numla_openai_choice none = {0};
    CU_ASSERT_EQUAL(numla_openai_format_chunk(&rh, 0, &none, 1, &s), NUMLA_STATUS_OK);
    expect_event(s, "{\"id\": \"chatcmpl-1\", \"object\": \"chat.completion.chunk\", \"created\": "
                    "1700000000, \"model\": \"tiny\", \"choices\": [{\"index\": 0, \"delta\": "
                    "{\"role\": \"assistant\"}, \"logprobs\": null, \"finish_reason\": null}]}");
    free(s);
    numla_openai_choice last = {.text = "", .text_len = 0, .finish_reason = "stop"};
    CU_ASSERT_EQUAL(numla_openai_format_chunk(&rh, 0, &last, 0, &s), NUMLA_STATUS_OK);
    expect_event(s, "{\"id\": \"chatcmpl-1\", \"object\": \"chat.completion.chunk\", \"created\": "
                    "1700000000, \"model\": \"tiny\", \"choices\": [{\"index\": 0, \"delta\": {}, "
                    "\"logprobs\": null, \"finish_reason\": \"stop\"}]}");
    free(s);
    CU_ASSERT_EQUAL(numla_openai_format_usage_chunk(&rh, &u, &s), NUMLA_STATUS_OK);
    expect_event(s, "{\"id\": \"chatcmpl-1\", \"object\": \"chat.completion.chunk\", \"created\": "
                    "1700000000, \"model\": \"tiny\", \"choices\": [], \"usage\": {\"prompt_tokens\": "
                    "5, \"completion_tokens\": 3, \"total_tokens\": 8, \"prompt_tokens_details\": "
                    "{\"cached_tokens\": 2}}}");
    free(s);
}

/* With the model's tokenizer, logprobs name tokens as OpenAI does: the token's text (U+FFFD
 * for a byte that is only part of a character), its exact bytes, and text_offset in
 * characters; two top tokens of one text keep the likelier in a completion's top_logprobs. */
static void test_logprob_tokens(void)
{
    numla_tokenizer *tok = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_tokenizer_load(numla_test_source_path("tests/golden/tokenizer/bpe1k"),
                                               &tok),
                          NUMLA_STATUS_OK);
    /* byte-level names: "a" is byte 0x61, "\u0120" (Ġ) the space, "\u00c3" (Ã) byte 0xc3 */
    const int32_t a = numla_tokenizer_token_id(tok, "a"), sp = numla_tokenizer_token_id(tok, "\xc4\xa0"),
                  c3 = numla_tokenizer_token_id(tok, "\xc3\x83");
    CU_ASSERT_FATAL(a >= 0 && sp >= 0 && c3 >= 0);
    numla_logprob_entry lp[3] = {
        {.token = c3, .logprob = -1.0f, .num_top = 2, .top_tokens = {c3, a}, .top_logprobs = {-1.0f, -2.0f}},
        {.token = sp, .logprob = -0.25f, .num_top = 1, .top_tokens = {sp}, .top_logprobs = {-0.25f}},
        {.token = a, .logprob = -0.5f, .num_top = 0},
    };
    numla_openai_choice cl = {.text = "x", .text_len = 1, .finish_reason = "length",
                              .num_logprobs = 3, .logprobs = lp};
    numla_openai_reply rc = {NUMLA_OPENAI_COMPLETIONS, "cmpl-1", 1700000000, "tiny", tok};
    numla_openai_reply rh = {NUMLA_OPENAI_CHAT, "chatcmpl-1", 1700000000, "tiny", tok};
    numla_openai_usage u = {.prompt_tokens = 5, .completion_tokens = 3, .cached_tokens = 0};
    char *s = NULL;
    CU_ASSERT_EQUAL(numla_openai_format_response(&rc, &cl, 1, &u, &s), NUMLA_STATUS_OK);
    json_t *o = json_loads(s, 0, NULL);
    json_t *l = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "logprobs");
    char *got = json_dumps(l, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII);
    NUMLA_ASSERT_MSG(got && !strcmp(got, "{\"text_offset\":[0,1,2],\"token_logprobs\":[-1.0,-0.25,-0.5],"
                                         "\"tokens\":[\"\\uFFFD\",\" \",\"a\"],\"top_logprobs\":"
                                         "[{\"a\":-2.0,\"\\uFFFD\":-1.0},{\" \":-0.25},{}]}"),
                     "completion logprobs %s", got ? got : "(null)");
    free(got);
    json_decref(o);
    free(s);
    /* a token the tokenizer does not know (a padding row of the model) keeps its id */
    numla_logprob_entry pad = {.token = 999999, .logprob = -3.0f};
    numla_openai_choice cp = {.text = "", .text_len = 0, .num_logprobs = 1, .logprobs = &pad};
    CU_ASSERT_EQUAL(numla_openai_format_chunk(&rh, 0, &cp, 0, &s), NUMLA_STATUS_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(s, "\"token\":\"token_id:999999\",\"logprob\":-3.0,\"bytes\":null"));
    free(s);
    CU_ASSERT_EQUAL(numla_openai_format_response(&rh, &cl, 1, &u, &s), NUMLA_STATUS_OK);
    o = json_loads(s, 0, NULL);
    json_t *content = json_object_get(json_object_get(json_array_get(json_object_get(o, "choices"), 0),
                                                      "logprobs"), "content");
    got = json_dumps(content, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII);
    NUMLA_ASSERT_MSG(got && !strcmp(got, "[{\"bytes\":[195],\"logprob\":-1.0,\"token\":\"\\uFFFD\",\"top_logprobs\":"
                                         "[{\"bytes\":[195],\"logprob\":-1.0,\"token\":\"\\uFFFD\"},"
                                         "{\"bytes\":[97],\"logprob\":-2.0,\"token\":\"a\"}]},"
                                         "{\"bytes\":[32],\"logprob\":-0.25,\"token\":\" \",\"top_logprobs\":"
                                         "[{\"bytes\":[32],\"logprob\":-0.25,\"token\":\" \"}]},"
                                         "{\"bytes\":[97],\"logprob\":-0.5,\"token\":\"a\",\"top_logprobs\":[]}]"),
                     "chat logprobs %s", got ? got : "(null)");
    free(got);
    json_decref(o);
    free(s);
    numla_tokenizer_destroy(&tok);
}

int numla_fuzz_http_body_run(const uint8_t *data, size_t size);

/* The fuzz target's checks over seeded mutations of valid bodies of both endpoints: each is
 * accepted (and then the target's invariants hold) or rejected with a 400 naming the problem;
 * both outcomes must occur, so a parser rejecting everything fails. */
static void test_fuzz_mutations(void)
{
    static const char *const seeds[] = {
        "2{\"prompt\": \"Hello\", \"add_special_tokens\": false, \"return_token_strs\": true}",
        "3{\"tokens\": [1, 2, 3]}",
        "4{\"input\": [{\"role\": \"developer\", \"content\": \"d\"}, {\"role\": \"user\", "
        "\"content\": [{\"type\": \"input_text\", \"text\": \"w\"}]}, {\"type\": "
        "\"function_call\", \"call_id\": \"c\", \"name\": \"f\", \"arguments\": \"{}\"}, "
        "{\"type\": \"function_call_output\", \"call_id\": \"c\", \"output\": \"o\"}], "
        "\"max_output_tokens\": 9, \"instructions\": \"i\", \"tools\": [{\"type\": "
        "\"function\", \"name\": \"f\"}], \"text\": {\"format\": {\"type\": \"text\"}}}",
        "0{\"model\": \"m\", \"prompt\": [[1, 2], [3]], \"max_tokens\": 5, \"temperature\": 0.7, "
        "\"top_k\": 40, \"top_p\": 0.9, \"seed\": 12, \"stop\": [\"a\", \"bc\"], \"logprobs\": 3, "
        "\"stream\": true, \"stream_options\": {\"include_usage\": true}, \"ignore_eos\": true, "
        "\"stop_token_ids\": [7, 8], \"n\": 1}",
        "1{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", "
        "\"content\": \"\u00e9\"}], \"max_completion_tokens\": 9, \"logprobs\": true, "
        "\"top_logprobs\": 2, \"stop\": \"x\", \"echo\": false}",
        "1{\"messages\": [{\"role\": \"user\", \"content\": \"w\", \"name\": \"a\"}, "
        "{\"role\": \"assistant\", \"content\": null, \"reasoning_content\": \"r\", "
        "\"tool_calls\": [{\"id\": \"f:0\", \"type\": \"function\", \"function\": {\"name\": "
        "\"f\", \"arguments\": \"{}\"}}]}, {\"role\": \"tool\", \"content\": \"c\", "
        "\"tool_call_id\": \"f:0\"}], \"tools\": [{\"type\": \"function\", \"function\": "
        "{\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}}], "
        "\"chat_template_kwargs\": {\"thinking\": true}}",
        "0{\"prompt\": [1, 2, 3], \"max_tokens\": 4, \"presence_penalty\": -2, "
        "\"frequency_penalty\": 1.5, \"repetition_penalty\": 0.9, \"min_p\": 1, "
        "\"logit_bias\": {\"5\": 10, \"17\": -0.5, \"999\": 100}}",
        "1{\"messages\": [{\"role\": \"user\", \"content\": \"w\"}], \"tools\": [{\"type\": "
        "\"function\", \"function\": {\"name\": \"g\", \"parameters\": {\"type\": \"object\", "
        "\"properties\": {\"c\": {\"type\": \"string\", \"maxLength\": 8}}}}}], \"tool_choice\": "
        "\"required\"}",
        "0{\"prompt\": \"p\", \"response_format\": {\"type\": \"json_schema\", \"json_schema\": "
        "{\"name\": \"x\", \"schema\": {\"type\": \"object\", \"properties\": {\"v\": {\"enum\": "
        "[\"a\", 1, null]}, \"k\": {\"type\": \"array\", \"items\": {\"$ref\": \"#\"}}}}}}}"};
    numla_test_rng rng = {2027};
    uint8_t buf[512];
    int accepted = 0, rejected = 0;
    for (int it = 0; it < 4000; it++) {
        const char *seed = seeds[it % (int)(sizeof seeds / sizeof seeds[0])];
        size_t len = strlen(seed);
        memcpy(buf, seed, len);
        len = numla_test_mutate_json(buf, len, 1, &rng);
        const int r = numla_fuzz_http_body_run(buf, len);
        CU_ASSERT_NOT_EQUAL_FATAL(r, -1);
        accepted += r == 1;
        rejected += r == 0;
    }
    NUMLA_ASSERT_MSG(accepted > 30 && rejected > 2000, "%d accepted, %d rejected of 4000",
                     accepted, rejected);
}

NUMLA_TEST_SUITE(http_openai, NULL, NULL, NUMLA_TEST(test_error_message_utf8), NUMLA_TEST(test_tool_choice),
                 NUMLA_TEST(test_completions_fields), NUMLA_TEST(test_tokenize_bodies),
                 NUMLA_TEST(test_chat_fields), NUMLA_TEST(test_errors_name_the_field),
                 NUMLA_TEST(test_chat_tools_fields), NUMLA_TEST(test_chat_tools_errors),
                 NUMLA_TEST(test_penalty_fields),
                 NUMLA_TEST(test_format), NUMLA_TEST(test_logprob_tokens), NUMLA_TEST(test_fuzz_mutations))
