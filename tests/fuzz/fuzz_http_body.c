/* tests/fuzz/fuzz_http_body.c — fuzz target for the OpenAI body parser (engine/http/openai.c).
 * The first byte picks the endpoint ('2' /tokenize, '3' /detokenize, '4' /v1/responses, which
 * parses as chat; otherwise its low bit: completions or chat); the rest is the body. Any input must
 * give either a 400 whose error names a param or none and formats as an error object, or a
 * request whose every field is inside its documented range; anything else aborts. Linked into
 * numla_unit (suite http_openai feeds it mutated bodies); with -DNUMLA_FUZZ=ON also a libFuzzer
 * binary. */
#include "engine/http/openai.h"
#include "engine/serving/request_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 1: accepted (the invariants hold), 0: rejected with a 400 and a message, -1: out of memory.
 * A broken invariant aborts. */
int numla_fuzz_http_body_run(const uint8_t *data, size_t size);

static void fuzz_http_body_die(const char *what, const char *text)
{
    fprintf(stderr, "fuzz_http_body: %s (%s)\n", what, text);
    abort();
}

int numla_fuzz_http_body_run(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    numla_openai_endpoint ep = data[0] == '2'   ? NUMLA_OPENAI_TOKENIZE
                               : data[0] == '3' ? NUMLA_OPENAI_DETOKENIZE
                               : data[0] == '4' ? NUMLA_OPENAI_RESPONSES
                               : data[0] & 1    ? NUMLA_OPENAI_CHAT
                                                : NUMLA_OPENAI_COMPLETIONS;
    numla_openai_limits lim = {.vocab_size = 1000, .max_context = 512};
    numla_openai_request r;
    numla_openai_error e;
    if (numla_openai_parse(ep, (const char *)data + 1, size - 1, &lim, &r, &e) != NUMLA_STATUS_OK)
        return -1; /* out of memory only */
    if (e.status) {
        if (e.status != 400 || !e.message[0])
            fuzz_http_body_die("a rejection that is not a 400 with a message", e.message);
        if (r.prompts || r.messages || r.num_stop_strings || r.model || r.tools_json)
            fuzz_http_body_die("a rejected request keeps its fields", e.message);
        char *s = NULL;
        if (numla_openai_format_error(&e, &s) != NUMLA_STATUS_OK || !s)
            fuzz_http_body_die("error object not written", e.message);
        free(s);
        return 0;
    }
    if (ep == NUMLA_OPENAI_TOKENIZE || ep == NUMLA_OPENAI_DETOKENIZE) {
        const numla_openai_prompt *q = r.num_prompts ? &r.prompts[0] : NULL;
        if (ep == NUMLA_OPENAI_DETOKENIZE &&
            (r.num_prompts != 1 || !q->tokens || q->text || r.num_messages))
            fuzz_http_body_die("detokenize accepted without its ids", "");
        if (ep == NUMLA_OPENAI_TOKENIZE &&
            (r.num_prompts + (r.num_messages > 0) != 1 || (q && (!q->text || q->tokens))))
            fuzz_http_body_die("tokenize accepted without one prompt text or messages", "");
        for (int32_t t = 0; q && q->tokens && t < q->num_tokens; t++)
            if (q->tokens[t] < 0 || q->tokens[t] >= lim.vocab_size)
                fuzz_http_body_die("token outside the vocabulary accepted", "");
        numla_openai_request_free(&r);
        return 1;
    }
    if (ep == NUMLA_OPENAI_RESPONSES) {
        if (r.endpoint != NUMLA_OPENAI_CHAT || !r.responses || !r.responses_settings)
            fuzz_http_body_die("a Responses body not parsed as chat with its settings", "");
        ep = NUMLA_OPENAI_CHAT; /* then every chat rule holds */
    }
    const numla_sampling_params *p = &r.params;
    if (ep == NUMLA_OPENAI_COMPLETIONS) {
        if (r.num_prompts < 1 || r.num_prompts > NUMLA_OPENAI_MAX_PROMPTS || r.num_messages)
            fuzz_http_body_die("completions accepted without 1..64 prompts", "");
        for (int32_t i = 0; i < r.num_prompts; i++) {
            const numla_openai_prompt *q = &r.prompts[i];
            if (!q->text == !q->tokens)
                fuzz_http_body_die("a prompt must be text or tokens", "");
            for (int32_t t = 0; q->tokens && t < q->num_tokens; t++)
                if (q->tokens[t] < 0 || q->tokens[t] >= lim.vocab_size)
                    fuzz_http_body_die("token outside the vocabulary accepted", "");
            if (q->tokens && q->num_tokens < 1)
                fuzz_http_body_die("empty token prompt accepted", "");
            /* the context is checked once, after tokenization: what it accepts fits */
            numla_sampling_params fp = *p;
            numla_request_field_error fe;
            if (q->tokens &&
                numla_request_fit_context(q->num_tokens, r.max_tokens_given, lim.max_context, &fp,
                                          &fe) &&
                q->num_tokens + (int64_t)fp.max_tokens > lim.max_context)
                fuzz_http_body_die("token prompt + max_tokens beyond the context accepted", "");
            if (q->text && strlen(q->text) != q->text_len)
                fuzz_http_body_die("text prompt with an embedded NUL or wrong length", "");
        }
    } else {
        if (r.num_messages < 1 || r.num_prompts)
            fuzz_http_body_die("chat accepted without messages", "");
        for (int32_t i = 0; i < r.num_messages; i++) {
            const numla_openai_message *m = &r.messages[i];
            const int assistant = m->role == NUMLA_OPENAI_ROLE_ASSISTANT;
            if (m->role > NUMLA_OPENAI_ROLE_TOOL || (!m->content && m->num_tool_calls < 1))
                fuzz_http_body_die("a message without a role or content", "");
            if ((!assistant && (m->has_tool_calls || m->reasoning_content)) ||
                (m->tool_call_id && m->role != NUMLA_OPENAI_ROLE_TOOL))
                fuzz_http_body_die("a field on a role that does not take it accepted", "");
            for (int32_t k = 0; k < m->num_tool_calls; k++)
                if (!m->tool_calls[k].name || !m->tool_calls[k].name[0] ||
                    !m->tool_calls[k].arguments)
                    fuzz_http_body_die("a tool call without a name or arguments", "");
        }
        if (!r.tools_json != !r.num_tools || r.thinking < -1 || r.thinking > 1)
            fuzz_http_body_die("tools or thinking inconsistent", "");
    }
    if (ep == NUMLA_OPENAI_COMPLETIONS && (r.tools_json || r.thinking != -1))
        fuzz_http_body_die("completions accepted chat-only fields", "");
    if (p->max_tokens < 0 || !(p->temperature >= 0) || !(p->top_p > 0 && p->top_p <= 1) ||
        p->top_k < 0 || p->logprobs > NUMLA_SAMPLER_MAX_LOGPROBS ||
        p->num_stop > NUMLA_SAMPLER_MAX_STOP || r.num_stop_strings > NUMLA_OPENAI_MAX_STOP)
        fuzz_http_body_die("sampling parameter out of range accepted", "");
    if (!(p->presence_penalty >= -2 && p->presence_penalty <= 2) ||
        !(p->frequency_penalty >= -2 && p->frequency_penalty <= 2) ||
        !(p->repetition_penalty > 0) || !(p->min_p >= 0 && p->min_p <= 1) ||
        p->num_logit_bias < 0 || p->num_logit_bias > NUMLA_SAMPLER_MAX_LOGIT_BIAS)
        fuzz_http_body_die("penalty, min_p or logit_bias out of range accepted", "");
    for (int32_t i = 0; i < p->num_logit_bias; i++) {
        if (p->logit_bias_tokens[i] < 0 || p->logit_bias_tokens[i] >= lim.vocab_size ||
            !(p->logit_bias_values[i] >= -100 && p->logit_bias_values[i] <= 100))
            fuzz_http_body_die("logit_bias entry out of range accepted", "");
        for (int32_t k = 0; k < i; k++)
            if (p->logit_bias_tokens[k] == p->logit_bias_tokens[i])
                fuzz_http_body_die("logit_bias token given twice accepted", "");
    }
    /* what the one validation accepts, the sampler takes */
    numla_sampler *smp = NULL;
    if (numla_sampler_create(p, (int32_t)lim.vocab_size, &smp) != NUMLA_STATUS_OK)
        fuzz_http_body_die("accepted sampling parameters refused by the sampler", numla_error_message());
    numla_sampler_destroy(&smp);
    for (int32_t i = 0; i < r.num_stop_strings; i++)
        if (!r.stop_strings[i] || !r.stop_strings[i][0])
            fuzz_http_body_die("empty stop string accepted", "");
    if (r.include_usage && !r.stream)
        fuzz_http_body_die("stream_options accepted without stream", "");
    numla_openai_request_free(&r);
    return 1;
}

#ifdef NUMLA_FUZZ_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    numla_fuzz_http_body_run(data, size);
    return 0;
}
#endif
