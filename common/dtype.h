/* common/dtype.h — element types and exact scalar conversions.
 * bf16 and fp16 are stored as uint16_t bit patterns. Conversions to float are exact;
 * float -> bf16/fp16 rounds to nearest even (NaN stays NaN). Vector conversions live in kernels.
 *
 * Two families: the float types F32/F16/BF16 (values below NUMLA_DTYPE_COUNT) are what
 * activations, the KV cache and the float kernels take; every `dtype < NUMLA_DTYPE_COUNT` check
 * in the tree means "a float type". The 1-byte weight types F8_E4M3 (OCP e4m3fn: no
 * infinities, 0x7f/0xff are NaN, max 448) and I8 come after it: they are stored with scale
 * tensors (kernels/quant.h) and are only meaningful together with them; I32 and I64 hold
 * compressed-tensors' packed int4 codes and shapes (engine/model/weights.c), never values;
 * F8_E8M0 (OCP MX's scale type: an unsigned exponent byte e worth 2^(e - 127), 0xff NaN) holds
 * DeepSeek-V4's block scales (engine/formats/weight_encoding.h NUMLA_ENCODING_FP4). */
#ifndef NUMLA_COMMON_DTYPE_H
#define NUMLA_COMMON_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum numla_dtype {
    NUMLA_DTYPE_F32 = 0,
    NUMLA_DTYPE_F16,
    NUMLA_DTYPE_BF16,
    NUMLA_DTYPE_COUNT,               /* number of float types (see above) */
    NUMLA_DTYPE_F8_E4M3 = 16,        /* 1-byte weights: e4m3fn, safetensors "F8_E4M3" */
    NUMLA_DTYPE_I8,                  /* 1-byte weights: int8, safetensors "I8" */
    NUMLA_DTYPE_I32,                 /* packed int4 weights (compressed-tensors weight_packed) */
    NUMLA_DTYPE_I64,                 /* integer metadata tensors (compressed-tensors weight_shape) */
    NUMLA_DTYPE_F8_E8M0,             /* 1-byte power-of-two scales, safetensors "F8_E8M0" */
    NUMLA_DTYPE_END,                 /* one past the last dtype of either family */
} numla_dtype;

/* Any dtype of either family. */
static inline int numla_dtype_valid(numla_dtype t)
{
    return (unsigned)t < NUMLA_DTYPE_COUNT || t == NUMLA_DTYPE_F8_E4M3 || t == NUMLA_DTYPE_I8 ||
           t == NUMLA_DTYPE_I32 || t == NUMLA_DTYPE_I64 || t == NUMLA_DTYPE_F8_E8M0;
}

static inline size_t numla_dtype_size(numla_dtype t)
{
    switch (t) {
    case NUMLA_DTYPE_F32:
    case NUMLA_DTYPE_I32: return 4;
    case NUMLA_DTYPE_I64: return 8;
    case NUMLA_DTYPE_F8_E4M3:
    case NUMLA_DTYPE_F8_E8M0:
    case NUMLA_DTYPE_I8: return 1;
    default: return 2;
    }
}
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

/* e4m3fn byte -> float: exact (every code is a float); 0x7f and 0xff are NaN. */
float numla_e4m3_to_f32(uint8_t b);
/* float -> e4m3fn byte exactly as torch's `x.to(torch.float8_e4m3fn)` (c10
 * fp8e4m3fn_from_fp32_value): round to nearest even, subnormals kept (smallest 2^-9), the sign
 * of zero kept; no saturation: |x| > 464 (it would round past 448), inf and NaN give NaN
 * (0x7f, with x's sign bit). */
uint8_t numla_f32_to_e4m3(float f);

/* E8M0 byte -> float: 2^(e - 127) exactly (e = 0: the subnormal 2^-127); 0xff is NaN. */
static inline float numla_e8m0_to_f32(uint8_t e)
{
    const uint32_t bits = e == 0xff ? 0x7fc00000u : e == 0 ? 0x00400000u : (uint32_t)e << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}
/* float -> E8M0 byte: the smallest power of two >= v (a block scale that keeps its codes in
 * range), clamped to [2^-127, 2^127]; v <= 0, inf or NaN give 0xff (NaN). */
static inline uint8_t numla_f32_to_e8m0(float v)
{
    if (!(v > 0.0f) || v > 0x1p127f)
        return 0xff;
    uint32_t bits;
    memcpy(&bits, &v, 4);
    int e = (int)(bits >> 23) - 127 + ((bits & 0x7fffffu) != 0); /* ceil(log2 v), normal v */
    if ((bits >> 23) == 0) /* subnormal v: 2^-127 (mantissa 0x400000) or 2^-126 covers it */
        e = (bits & 0x7fffffu) <= 0x400000u ? -127 : -126;
    e = e < -127 ? -127 : e > 127 ? 127 : e;
    return (uint8_t)(e + 127);
}

/* Load element i of a typed array as float. */
static inline float numla_load_f32(const void *p, numla_dtype t, size_t i)
{
    switch (t) {
    case NUMLA_DTYPE_F32: return ((const float *)p)[i];
    case NUMLA_DTYPE_BF16: return numla_bf16_to_f32(((const uint16_t *)p)[i]);
    case NUMLA_DTYPE_F8_E4M3: return numla_e4m3_to_f32(((const uint8_t *)p)[i]);
    case NUMLA_DTYPE_I8: return (float)((const int8_t *)p)[i];
    case NUMLA_DTYPE_F8_E8M0: return numla_e8m0_to_f32(((const uint8_t *)p)[i]);
    default: return numla_f16_to_f32(((const uint16_t *)p)[i]);
    }
}

/* Store a float as element i of a typed array (rounding to nearest even; I8 saturates to
 * [-128, 127] and stores NaN as 0). The 1-byte types hold the raw code: scales are the
 * caller's (kernels/quant.h). */
static inline void numla_store_f32(void *p, numla_dtype t, size_t i, float v)
{
    switch (t) {
    case NUMLA_DTYPE_F32: ((float *)p)[i] = v; break;
    case NUMLA_DTYPE_BF16: ((uint16_t *)p)[i] = numla_f32_to_bf16(v); break;
    case NUMLA_DTYPE_F8_E4M3: ((uint8_t *)p)[i] = numla_f32_to_e4m3(v); break;
    case NUMLA_DTYPE_F8_E8M0: ((uint8_t *)p)[i] = numla_f32_to_e8m0(v); break;
    case NUMLA_DTYPE_I8: {
        float r = __builtin_rintf(v);
        ((int8_t *)p)[i] = (int8_t)(r != r ? 0.0f : r < -128.0f ? -128.0f : r > 127.0f ? 127.0f : r);
        break;
    }
    default: ((uint16_t *)p)[i] = numla_f32_to_f16(v); break;
    }
}

/* Store n floats, each times scale, as elements [i, i + n) of a typed array (as
 * numla_store_f32; the f32 and bf16 loops are written out so they vectorise). */
static inline void numla_store_f32_row(void *p, numla_dtype t, size_t i, const float *src,
                                       size_t n, float scale)
{
    if (t == NUMLA_DTYPE_F32) {
        float *dst = (float *)p + i;
        for (size_t d = 0; d < n; d++)
            dst[d] = src[d] * scale;
    } else if (t == NUMLA_DTYPE_BF16) {
        uint16_t *dst = (uint16_t *)p + i;
        for (size_t d = 0; d < n; d++)
            dst[d] = numla_f32_to_bf16(src[d] * scale);
    } else {
        for (size_t d = 0; d < n; d++)
            numla_store_f32(p, t, i + d, src[d] * scale);
    }
}

#endif
