/* kernels/ref/qblock_quant_ref.c — Q8_0 / Q4_0 blocks from fp32 rows (kernels/qblock_quant.h). */
#include "kernels/qblock_quant.h"

#include <math.h>
#include <string.h>

#include "common/dtype.h"

static void put_f16(uint8_t *p, float v)
{
    const uint16_t h = numla_f32_to_f16(v);
    memcpy(p, &h, 2);
}

static void q8_0_block(const float *x, uint8_t *b)
{
    float amax = 0.0f;
    for (int j = 0; j < 32; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, d);
    for (int j = 0; j < 32; j++)
        b[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
}

static void q4_0_block(const float *x, uint8_t *b)
{
    float amax = 0.0f, m = 0.0f;
    for (int j = 0; j < 32; j++)
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            m = x[j];
        }
    const float d = m / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, d);
    for (int j = 0; j < 16; j++) {
        float lo = truncf(x[j] * id + 8.5f), hi = truncf(x[j + 16] * id + 8.5f);
        lo = fminf(15.0f, fmaxf(0.0f, lo));
        hi = fminf(15.0f, fmaxf(0.0f, hi));
        b[2 + j] = (uint8_t)((uint8_t)lo | (uint8_t)hi << 4);
    }
}

numla_status numla_qblock_quantize_row_ref(numla_qblock_type type, const float *x, int64_t k,
                                           void *dst)
{
    if (k < 0 || k % 32)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qblock quantize: %lld columns is not whole blocks "
                   "of 32", (long long)k);
    uint8_t *o = dst;
    if (type == NUMLA_QBLOCK_Q8_0) {
        for (int64_t i = 0; i < k / 32; i++)
            q8_0_block(x + i * 32, o + i * 34);
        return NUMLA_STATUS_OK;
    }
    if (type == NUMLA_QBLOCK_Q4_0) {
        for (int64_t i = 0; i < k / 32; i++)
            q4_0_block(x + i * 32, o + i * 18);
        return NUMLA_STATUS_OK;
    }
    NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "qblock quantize: no quantizer for %s yet (Q8_0, Q4_0)",
               numla_qblock_info_get(type) ? numla_qblock_info_get(type)->name : "?");
}
