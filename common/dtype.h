/* common/dtype.h — element types and exact scalar conversions.
 * bf16 and fp16 are stored as uint16_t bit patterns. Conversions to float are exact;
 * float -> bf16/fp16 rounds to nearest even (NaN stays NaN). Vector conversions live in kernels. */
#ifndef NUMLA_COMMON_DTYPE_H
#define NUMLA_COMMON_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum numla_dtype {
    NUMLA_DTYPE_F32 = 0,
    NUMLA_DTYPE_F16,
    NUMLA_DTYPE_BF16,
    NUMLA_DTYPE_COUNT,
} numla_dtype;

static inline size_t numla_dtype_size(numla_dtype t) { return t == NUMLA_DTYPE_F32 ? 4 : 2; }
const char *numla_dtype_name(numla_dtype t);

static inline float numla_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t numla_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float numla_f16_to_f32(uint16_t h);
uint16_t numla_f32_to_f16(float f);

/* Load element i of a typed array as float. */
static inline float numla_load_f32(const void *p, numla_dtype t, size_t i)
{
    switch (t) {
    case NUMLA_DTYPE_F32: return ((const float *)p)[i];
    case NUMLA_DTYPE_BF16: return numla_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return numla_f16_to_f32(((const uint16_t *)p)[i]);
    }
}

/* Store a float as element i of a typed array (rounding to nearest even). */
static inline void numla_store_f32(void *p, numla_dtype t, size_t i, float v)
{
    switch (t) {
    case NUMLA_DTYPE_F32: ((float *)p)[i] = v; break;
    case NUMLA_DTYPE_BF16: ((uint16_t *)p)[i] = numla_f32_to_bf16(v); break;
    default: ((uint16_t *)p)[i] = numla_f32_to_f16(v); break;
    }
}

#endif
