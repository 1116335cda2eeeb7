/* common/ggml_types.h — the one table of ggml tensor types: each type's code (as GGUF tensor
 * infos write it), name, and storage (a block of `block` elements takes `bytes` bytes; a row of
 * ne[0] elements takes ne[0] / block · bytes). The GGUF reader (engine/formats/gguf.c), the
 * weight-encoding table (engine/formats/weight_encoding.c) and the block kernels' types
 * (kernels/qblock_types.c) all take their ggml facts from here. The sizes are the ones the gguf
 * PyPI package (GGML_QUANT_SIZES) writes; tests/unit/engine/formats/test_weight_encoding.c
 * checks that the three tables agree, test_gguf.c the sizes against the package's files. Pure data; not collective.
 *
 * NUMLA_GGML_TYPES(X) lists the rows as X(NAME, code, block, bytes), so that another table may
 * copy a row's facts at compile time: NUMLA_GGML_BLOCK_<NAME> and NUMLA_GGML_BYTES_<NAME> are
 * constants beside the code NUMLA_GGML_<NAME>. */
#ifndef NUMLA_COMMON_GGML_TYPES_H
#define NUMLA_COMMON_GGML_TYPES_H

#include <stdint.h>

#define NUMLA_GGML_TYPES(X)                                                                        \
    X(F32, 0, 1, 4)                                                                                \
    X(F16, 1, 1, 2)                                                                                \
    X(Q4_0, 2, 32, 18)                                                                             \
    X(Q4_1, 3, 32, 20)                                                                             \
    X(Q5_0, 6, 32, 22)                                                                             \
    X(Q5_1, 7, 32, 24)                                                                             \
    X(Q8_0, 8, 32, 34)                                                                             \
    X(Q8_1, 9, 32, 40)                                                                             \
    X(Q2_K, 10, 256, 84)                                                                           \
    X(Q3_K, 11, 256, 110)                                                                          \
    X(Q4_K, 12, 256, 144)                                                                          \
    X(Q5_K, 13, 256, 176)                                                                          \
    X(Q6_K, 14, 256, 210)                                                                          \
    X(Q8_K, 15, 256, 292)                                                                          \
    X(IQ2_XXS, 16, 256, 66)                                                                        \
    X(IQ2_XS, 17, 256, 74)                                                                         \
    X(IQ3_XXS, 18, 256, 98)                                                                        \
    X(IQ1_S, 19, 256, 50)                                                                          \
    X(IQ4_NL, 20, 32, 18)                                                                          \
    X(IQ3_S, 21, 256, 110)                                                                         \
    X(IQ2_S, 22, 256, 82)                                                                          \
    X(IQ4_XS, 23, 256, 136)                                                                        \
    X(I8, 24, 1, 1)                                                                                \
    X(I16, 25, 1, 2)                                                                               \
    X(I32, 26, 1, 4)                                                                               \
    X(I64, 27, 1, 8)                                                                               \
    X(F64, 28, 1, 8)                                                                               \
    X(IQ1_M, 29, 256, 56)                                                                          \
    X(BF16, 30, 1, 2)                                                                              \
    X(TQ1_0, 34, 256, 54)                                                                          \
    X(TQ2_0, 35, 256, 66)                                                                          \
    X(MXFP4, 39, 32, 17)                                                                           \
    X(NVFP4, 40, 64, 36)                                                                           \
    X(Q1_0, 41, 128, 18)

typedef enum numla_ggml_type {
#define NUMLA_GGML_ENUM_(name, code, block, bytes) NUMLA_GGML_##name = code,
    NUMLA_GGML_TYPES(NUMLA_GGML_ENUM_)
#undef NUMLA_GGML_ENUM_
    NUMLA_GGML_TYPE_LIMIT = 42, /* codes at or above this are unknown */
} numla_ggml_type;

enum {
#define NUMLA_GGML_SHAPE_(name, code, block, bytes) NUMLA_GGML_BLOCK_##name = block, NUMLA_GGML_BYTES_##name = bytes,
    NUMLA_GGML_TYPES(NUMLA_GGML_SHAPE_)
#undef NUMLA_GGML_SHAPE_
};

/* A row's facts as a brace list {name, block, bytes, code}, for a table that keeps its own copy
 * (numla_qblock_info, numla_weight_encoding_info's leading fields). */
#define NUMLA_GGML_ROW(name) #name, NUMLA_GGML_BLOCK_##name, NUMLA_GGML_BYTES_##name, NUMLA_GGML_##name

typedef struct numla_ggml_type_info {
    const char *name; /* "Q4_K" */
    int32_t block;    /* elements per block (1 for the float and integer types) */
    int32_t bytes;    /* bytes per block */
    uint32_t code;    /* the type's code in GGUF tensor infos */
} numla_ggml_type_info;

/* The type's row, or NULL for an unknown (or removed) code. */
const numla_ggml_type_info *numla_ggml_type_get(uint32_t type);

#endif
