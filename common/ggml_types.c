/* common/ggml_types.c — the ggml type table (common/ggml_types.h). */
#include "common/ggml_types.h"

#include <stddef.h>

static const numla_ggml_type_info numla_ggml_types_[NUMLA_GGML_TYPE_LIMIT] = {
#define NUMLA_GGML_INFO_(name, code, block, bytes) [code] = {#name, block, bytes, code},
    NUMLA_GGML_TYPES(NUMLA_GGML_INFO_)
#undef NUMLA_GGML_INFO_
};

const numla_ggml_type_info *numla_ggml_type_get(uint32_t type)
{
    if (type >= NUMLA_GGML_TYPE_LIMIT || !numla_ggml_types_[type].name)
        return NULL;
    return &numla_ggml_types_[type];
}
