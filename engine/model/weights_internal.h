/* engine/model/weights_internal.h — what the weight loader (weights.c) and its 8-bit part
 * (weights_quantize.c) share: how one linear tensor of the checkpoint is read. Included only
 * by engine/model/weights*.c. */
#ifndef NUMLA_ENGINE_WEIGHTS_INTERNAL_H
#define NUMLA_ENGINE_WEIGHTS_INTERNAL_H

#include <stdint.h>

#include "engine/formats/gguf.h"
#include "engine/model/weights.h"
#include "kernels/qblock.h"

/* How one linear tensor is loaded. */
typedef enum {
    NUMLA_WEIGHTS_FLOAT = 0,  /* float tensor, packed as it is */
    NUMLA_WEIGHTS_Q8_FILE,    /* 8-bit in the checkpoint, kept 8-bit */
    NUMLA_WEIGHTS_Q8_MAKE,    /* float in the checkpoint, quantized while loading */
    NUMLA_WEIGHTS_DEQUANT,    /* 8-bit in the checkpoint, dequantized to bf16 (--weights bf16) */
    NUMLA_WEIGHTS_QBLOCK,     /* ggml blocks in a GGUF file, kept as blocks (or dequantized to
                                 fp32 where a shard cuts a block: weights.h) */
    NUMLA_WEIGHTS_QBLOCK_MAKE, /* float in the checkpoint, made Q8_0 / Q4_0 blocks while loading
                                  (--weights q8_0|q4_0, kernels/qblock_quant.h) */
    NUMLA_WEIGHTS_INT4,       /* compressed-tensors int4 (X.weight_packed + X.weight_scale),
                                 run as Q4_0 blocks (weights.c ld_linear_int4) */
} numla_weights_mode;

/* A GGUF tensor seen under its Hugging Face name (weights_gguf.c): what the loader reads
 * instead of a safetensors tensor. `t` comes first so a loader holding `&e->t` gets `e` back.
 * A stacked expert tensor (ffn_*_exps, ne {K, N, E}) gives one entry per expert; a layer in the
 * split MLA layout gets a kv_b_proj entry made of attn_k_b and attn_v_b (t.data NULL: its rows
 * exist only dequantized, numla_weights_entry_rows_f32). */
typedef struct numla_weights_entry {
    numla_safetensors_tensor t; /* HF name and shape ((N, K) or (N)); a float tensor's dtype
                                 * and data; NUMLA_DTYPE_END for blocks */
    int qtype;                  /* numla_qblock_type, -1 for a float tensor */
    int64_t row_bytes;          /* bytes between rows in the file */
    const numla_gguf_tensor *src;       /* the file's tensor (k_b for a split kv_b_proj) */
    const numla_gguf_tensor *v_b;       /* split kv_b_proj: attn_v_b; else NULL */
    int64_t nope, vdim, heads;          /* split kv_b_proj: per-head sizes */
    char hf[160];
} numla_weights_entry;

/* Every weight of an open GGUF deepseek2 file under its HF name. */
typedef struct numla_weights_view {
    numla_weights_entry *e;     /* (n) sorted by name */
    int64_t n;
    const numla_gguf *g;        /* the file the entries point into */
} numla_weights_view;

/* Build the view of g (cfg from the same file). FORMAT naming the file and tensor for a tensor
 * of an encoding numla cannot run or a split-layout pair shaped otherwise. Not collective. */
numla_status numla_weights_view_create(const numla_gguf *g, const numla_model_config *cfg,
                                       numla_weights_view **out);
void numla_weights_view_destroy(numla_weights_view **v);
/* The entry called name, or NULL. Local. */
const numla_weights_entry *numla_weights_view_find(const numla_weights_view *v, const char *name);
/* Rows [r0, r0 + n) x columns [c0, c0 + k) of an entry as fp32 (dst, ld k), dequantized with the
 * encoding's reference (kernels/qblock.h). Not collective. */
numla_status numla_weights_entry_rows_f32(const numla_weights_entry *e, int64_t r0, int64_t n,
                                          int64_t c0, int64_t k, float *dst);

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
