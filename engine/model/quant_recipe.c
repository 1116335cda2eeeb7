/* engine/model/quant_recipe.c — the block type of each tensor quantized at load
 * (quant_recipe.h). */
#include "engine/model/quant_recipe.h"

#include <stdlib.h>
#include <string.h>

numla_qblock_type numla_quant_recipe_type(numla_weight_encoding encoding, int64_t num_layers,
                                          const char *name, int64_t c0, int64_t k)
{
    if (encoding == NUMLA_ENCODING_Q8_0)
        return NUMLA_QBLOCK_Q8_0;
    if (encoding == NUMLA_ENCODING_Q4_0)
        return NUMLA_QBLOCK_Q4_0;
    if (c0 % 256 || k % 256)
        return NUMLA_QBLOCK_Q8_0;
    if (!strcmp(name, "lm_head.weight") || !strcmp(name, "model.embed_tokens.weight"))
        return NUMLA_QBLOCK_Q6_K;
    long i = -1;
    if (!strncmp(name, "model.layers.", 13))
        i = strtol(name + 13, NULL, 10);
    if (i >= 0 && strstr(name, "down_proj.weight") &&
        (i < num_layers / 8 || i >= 7 * num_layers / 8 || (i - num_layers / 8) % 3 == 2))
        return NUMLA_QBLOCK_Q6_K;
    return NUMLA_QBLOCK_Q4_K;
}
