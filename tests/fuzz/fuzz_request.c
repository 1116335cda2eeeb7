/* tests/fuzz/fuzz_request.c — fuzz target for the request-line parser (engine/serving/request_io.c).
 * Any input must give either an error naming line 1, or a request whose every field is inside
 * its documented range; anything else aborts. Linked into numla_unit (suite request_io feeds it
 * mutated lines and checks the outcomes it returns); with -DNUMLA_FUZZ=ON also a libFuzzer
 * binary. */
#include "engine/serving/request_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 1: accepted, 0: an error record naming line 1, -1: out of memory. *out, when given, receives the request (the
 * caller frees it); else it is freed here. Limits: vocab_size 1000, max_context 512. */
int numla_fuzz_request_run(const uint8_t *data, size_t size, numla_request *out);

static void fuzz_request_die(const char *what, const char *text)
{
    fprintf(stderr, "fuzz_request: %s (%s)\n", what, text);
    abort();
}

int numla_fuzz_request_run(const uint8_t *data, size_t size, numla_request *out)
{
    numla_request_limits lim = {.vocab_size = 1000, .max_context = 512};
    numla_request r;
    if (numla_request_parse((const char *)data, size, 1, &lim, &r) != NUMLA_STATUS_OK) {
        if (out)
            memset(out, 0, sizeof *out);
        return -1;
    }
    if (r.error[0]) {
        if (strncmp(r.error, "line 1: ", 8))
            fuzz_request_die("error does not name the line", r.error);
        if (r.prompt_tokens)
            fuzz_request_die("error request keeps prompt tokens", r.error);
    } else {
        const numla_sampling_params *p = &r.params;
        if (!r.prompt_tokens || r.num_prompt < 1)
            fuzz_request_die("accepted without prompt", "");
        for (int32_t i = 0; i < r.num_prompt; i++)
            if (r.prompt_tokens[i] < 0 || r.prompt_tokens[i] >= lim.vocab_size)
                fuzz_request_die("token outside the vocabulary accepted", "");
        if (p->max_tokens < 0 || (int64_t)r.num_prompt + p->max_tokens > lim.max_context)
            fuzz_request_die("max_tokens out of range accepted", "");
        if (!(p->temperature >= 0) || !(p->top_p > 0 && p->top_p <= 1) || p->top_k < 0 ||
            p->logprobs > NUMLA_SAMPLER_MAX_LOGPROBS || p->num_stop > NUMLA_SAMPLER_MAX_STOP)
            fuzz_request_die("sampling parameter out of range accepted", "");
        for (int32_t i = 0; i < p->num_stop; i++)
            if (p->stop_token_ids[i] < 0 || p->stop_token_ids[i] >= lim.vocab_size)
                fuzz_request_die("stop token outside the vocabulary accepted", "");
        if (!r.id)
            fuzz_request_die("accepted without id", "");
        if (!(p->presence_penalty >= -2 && p->presence_penalty <= 2) ||
            !(p->frequency_penalty >= -2 && p->frequency_penalty <= 2) ||
            !(p->repetition_penalty > 0) || !(p->min_p >= 0 && p->min_p <= 1) ||
            p->num_logit_bias < 0 || p->num_logit_bias > NUMLA_SAMPLER_MAX_LOGIT_BIAS)
            fuzz_request_die("penalty, min_p or logit_bias out of range accepted", "");
        for (int32_t i = 0; i < p->num_logit_bias; i++) {
            if (p->logit_bias_tokens[i] < 0 || p->logit_bias_tokens[i] >= lim.vocab_size ||
                !(p->logit_bias_values[i] >= -100 && p->logit_bias_values[i] <= 100))
                fuzz_request_die("logit_bias entry out of range accepted", "");
            for (int32_t k = 0; k < i; k++)
                if (p->logit_bias_tokens[k] == p->logit_bias_tokens[i])
                    fuzz_request_die("logit_bias token given twice accepted", "");
        }
        /* what the one validation accepts, the sampler takes */
        numla_sampler *smp = NULL;
        if (numla_sampler_create(p, (int32_t)lim.vocab_size, &smp) != NUMLA_STATUS_OK)
            fuzz_request_die("accepted sampling parameters refused by the sampler", numla_error_message());
        numla_sampler_destroy(&smp);
    }
    int accepted = r.error[0] == 0;
    if (out)
        *out = r;
    else
        numla_request_free(&r);
    return accepted;
}

#ifdef NUMLA_FUZZ_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    numla_fuzz_request_run(data, size, NULL);
    return 0;
}
#endif
