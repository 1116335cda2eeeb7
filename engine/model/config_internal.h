/* engine/model/config_internal.h — what config.c and config_gguf.c share: the derived values of
 * a filled config. Included only by engine/model/config*.c and the model room's tests. */
#ifndef NUMLA_ENGINE_CONFIG_INTERNAL_H
#define NUMLA_ENGINE_CONFIG_INTERNAL_H

#include "engine/model/config.h"

/* softmax scale, RoPE attention factor and inverse frequencies of o (docs/design.md §5); FORMAT
 * naming `source` when a combination of in-range values breaks them. Local. */
numla_status numla_model_config_derive(const char *source, numla_model_config *o);

/* The config of the GGUF file at path (config_gguf.c). Not collective. */
numla_status numla_model_config_load_gguf(const char *path, numla_model_config *out);

#endif
