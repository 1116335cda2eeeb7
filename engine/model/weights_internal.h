/* engine/model/weights_internal.h — what the weight loader (weights.c) and its 8-bit part
 * (weights_quantize.c) share: how one linear tensor of the checkpoint is read. Included only
 * by engine/model/weights*.c. */
#ifndef NUMLA_ENGINE_WEIGHTS_INTERNAL_H
#define NUMLA_ENGINE_WEIGHTS_INTERNAL_H

#include <stdint.h>

#include "engine/model/weights.h"

/* How one linear tensor is loaded. */
typedef enum {
    NUMLA_WEIGHTS_FLOAT = 0,  /* float tensor, packed as it is */
    NUMLA_WEIGHTS_Q8_FILE,    /* 8-bit in the checkpoint, kept 8-bit */
    NUMLA_WEIGHTS_Q8_MAKE,    /* float in the checkpoint, quantized while loading */
    NUMLA_WEIGHTS_DEQUANT,    /* 8-bit in the checkpoint, dequantized to bf16 (--weights bf16) */
} numla_weights_mode;

typedef struct numla_weights_tensor {
    const numla_safetensors_tensor *t;     /* the weight (NULL after a pass-0 problem) */
    const numla_safetensors_tensor *scale; /* Q8_FILE / DEQUANT */
    numla_weights_mode mode;
    numla_qlinear_format fmt;              /* Q8 modes and DEQUANT */
    int64_t full_n, full_k, grid_rows, grid_cols;
} numla_weights_tensor;

/* The packed format of a checkpoint's 8-bit format (int8: W8A8 unless the caller says
 * otherwise). Local. */
numla_qlinear_format numla_weights_q8_format(numla_weight_format f);
/* Pass 1: codes of rows [r0, r0 + n) (all full_k columns, ld full_k) and the full scale grid
 * (grid_rows, grid_cols) of an 8-bit tensor, from the file or quantized now (Q8_MAKE, exactly
 * as numla quantize does). *codes_own / *grid are malloc'd here (codes_own NULL when the codes
 * are the file's). Not collective. */
numla_status numla_weights_q8_rows(const numla_weights_tensor *d, int64_t r0, int64_t n,
                                   const uint8_t **codes, uint8_t **codes_own, float **grid);
/* Dequantized value of code (r, c) of rows starting at global row r0. Local. */
float numla_weights_q8_dequant(const numla_weights_tensor *d, const uint8_t *codes,
                               const float *grid, int64_t r0, int64_t r, int64_t c);

#endif
