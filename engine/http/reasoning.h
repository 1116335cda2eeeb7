/* engine/http/reasoning.h — the reasoning a thinking model writes before its answer, split off
 * as OpenAI-style `reasoning_content` (as vLLM and SGLang return it).
 *
 * Streamed text (the emitter's output: valid UTF-8, stop strings already applied) goes in; out
 * come two pieces, the reasoning and the content. The text before "</think>" is reasoning and
 * the tag itself is dropped; everything after it is content. A model whose prompt did not open
 * the think block (mode DETECT) reasons only when its output starts with "<think>" (dropped
 * too); otherwise all of its text is content. Text that could still be the start of a tag is
 * held back until it is known. Without "</think>" by the end, all of the text after the opening
 * is reasoning (the answer was cut off while thinking). `numla run` does not use this: it keeps
 * the raw text. Not thread-safe (one per choice); not collective. */
#ifndef NUMLA_ENGINE_HTTP_REASONING_H
#define NUMLA_ENGINE_HTTP_REASONING_H

#include <stddef.h>

#include "common/status.h"

typedef enum numla_http_reasoning_mode {
    NUMLA_HTTP_REASONING_OFF = 0, /* not a thinking model: no reasoning_content at all */
    NUMLA_HTTP_REASONING_DETECT,  /* reasoning when the output opens with "<think>" */
    NUMLA_HTTP_REASONING_OPEN,    /* the prompt ended inside "<think>": reasoning first */
} numla_http_reasoning_mode;

typedef struct numla_http_reasoning numla_http_reasoning;

numla_status numla_http_reasoning_create(numla_http_reasoning_mode mode,
                                         numla_http_reasoning **out);
void numla_http_reasoning_destroy(numla_http_reasoning **r);

/* Append text; *reasoning and *content (valid until the next call) get what is known now. */
numla_status numla_http_reasoning_push(numla_http_reasoning *r, const char *text, size_t len,
                                       const char **reasoning, size_t *reasoning_len,
                                       const char **content, size_t *content_len);
/* The end: what was held back goes where it was headed. */
numla_status numla_http_reasoning_finish(numla_http_reasoning *r, const char **reasoning,
                                         size_t *reasoning_len, const char **content,
                                         size_t *content_len);

/* The mode for a rendered chat prompt of a thinking template: OPEN when its last "<think>"
 * comes after its last "</think>", else DETECT. */
numla_http_reasoning_mode numla_http_reasoning_mode_of_prompt(const char *prompt, size_t len);

#endif
