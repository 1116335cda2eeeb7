/* engine/cli/model_text.h — a model's tokenizer and chat template wherever its files keep them:
 * tokenizer.json / tokenizer_config.json in a model directory, or the tokenizer.* keys of a GGUF
 * file (model_text.c says how they map). Shared by numla run and numla serve. Not collective. */
#ifndef NUMLA_ENGINE_CLI_MODEL_TEXT_H
#define NUMLA_ENGINE_CLI_MODEL_TEXT_H

#include <stdint.h>

#include "common/status.h"
#include "engine/text/chat_template.h"
#include "engine/text/tokenizer.h"

/* 1 when model (a directory or a .gguf file) has a tokenizer: tokenizer.json or tiktoken.model
 * in a directory, the tokenizer.ggml.model key in a GGUF file (an unreadable file answers 1, so
 * loading it reports why). Without one only token-id prompts are served. Not collective. */
int numla_model_text_present(const char *model);
/* The tokenizer of model (a directory or a .gguf file), ids below vocab_size. Not collective. */
numla_status numla_model_text_tokenizer(const char *model, int64_t vocab_size,
                                        numla_tokenizer **out);
/* Its chat template (force_name: as numla_chat_template_load). Not collective. */
numla_status numla_model_text_chat_template(const char *model, const char *force_name,
                                            numla_chat_template **out);

#endif
