/* engine/model/quant_recipe.h — which ggml block type `--weights q8_0|q4_0|q4_k` gives each
 * tensor of a float checkpoint quantized at load (engine/model/weights.c asks; docs/design.md
 * §10). The policy lives here, apart from the loading.
 */
#ifndef NUMLA_ENGINE_MODEL_QUANT_RECIPE_H
#define NUMLA_ENGINE_MODEL_QUANT_RECIPE_H

#include <stdint.h>

#include "engine/formats/weight_encoding.h"
#include "kernels/qblock.h"

/* The block type of the slice of columns [c0, c0 + k) (multiples of 32) of tensor `name` (its
 * HF name) in a model of num_layers decoder layers, for encoding (Q8_0, Q4_0 or Q4_K):
 *   Q8_0 / Q4_0: that type.
 *   Q4_K: llama.cpp's Q4_K_M recipe as it applies to DeepSeek's tensors: lm_head (and the
 *     embedding) Q6_K; every down_proj (dense MLP, routed and shared experts) Q6_K in the layers
 *     llama.cpp's use_more_bits picks (the first and last eighth of the layers and every third
 *     one between: i < L/8, i >= 7L/8, (i - L/8) % 3 == 2; llama.cpp counts the ffn_down
 *     tensors, here the layers), Q4_K elsewhere; its attn_v rule matches no DeepSeek tensor. A
 *     slice that is not whole blocks of 256 takes Q8_0 (llama.cpp falls back to a 32-element
 *     type too). */
numla_qblock_type numla_quant_recipe_type(numla_weight_encoding encoding, int64_t num_layers,
                                          const char *name, int64_t c0, int64_t k);

#endif
