/* kernels/ref/qblock_quant_ref.c — ggml blocks from fp32 rows (kernels/qblock_quant.h): each
 * type's block quantizer, named by its row in kernels/qblock_types.c. */
#include "kernels/qblock_quant.h"
#include "kernels/qblock_types.h"

#include <math.h>
#include <string.h>

#include "common/dtype.h"

static void put_f16(uint8_t *p, float v)
{
    const uint16_t h = numla_f32_to_f16(v);
    memcpy(p, &h, 2);
}

void numla_qblock_quantize_q8_0_ref(const float *x, uint8_t *b)
{
    float amax = 0.0f;
    for (int j = 0; j < 32; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, d);
    for (int j = 0; j < 32; j++)
        b[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
}

void numla_qblock_quantize_q4_0_ref(const float *x, uint8_t *b)
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

static float rnd(float v) { return roundf(v); }

/* Q4_K: 8 sub-blocks of 32, each w = (D·sc)·q - (DM·m), q 0..15, sc and m 6-bit (header). */
void numla_qblock_quantize_q4_k_ref(const float *x, uint8_t *b)
{
    float scale[8], mins[8], smax = 0.0f, mmax = 0.0f;
    for (int j = 0; j < 8; j++) {
        float lo = 0.0f, hi = 0.0f;
        for (int i = 0; i < 32; i++) {
            lo = fminf(lo, x[32 * j + i]);
            hi = fmaxf(hi, x[32 * j + i]);
        }
        scale[j] = (hi - lo) / 15.0f;
        mins[j] = -lo;
        smax = fmaxf(smax, scale[j]);
        mmax = fmaxf(mmax, mins[j]);
    }
    put_f16(b, smax / 63.0f);
    put_f16(b + 2, mmax / 63.0f);
    uint16_t hd, hm;
    memcpy(&hd, b, 2);
    memcpy(&hm, b + 2, 2);
    const float D = numla_f16_to_f32(hd), DM = numla_f16_to_f32(hm);
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)(D > 0.0f ? fminf(63.0f, rnd(scale[j] / D)) : 0.0f);
        m[j] = (uint8_t)(DM > 0.0f ? fminf(63.0f, rnd(mins[j] / DM)) : 0.0f);
    }
    uint8_t *s = b + 4;
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
        s[j + 4] = (uint8_t)((m[j] & 63) | (m[j + 4] >> 4) << 6);
        s[j + 8] = (uint8_t)((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
    }
    uint8_t q[256];
    for (int j = 0; j < 8; j++) {
        const float step = D * (float)sc[j], off = DM * (float)m[j];
        for (int i = 0; i < 32; i++) {
            const float v = step > 0.0f ? rnd((x[32 * j + i] + off) / step) : 0.0f;
            q[32 * j + i] = (uint8_t)fminf(15.0f, fmaxf(0.0f, v));
        }
    }
    uint8_t *qs = b + 16;
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            qs[32 * c + l] = (uint8_t)(q[64 * c + l] | q[64 * c + 32 + l] << 4);
}

/* Q6_K: 16 groups of 16, each w = (D·sc)·q, q -32..31, sc int8 (header). */
void numla_qblock_quantize_q6_k_ref(const float *x, uint8_t *b)
{
    float gs[16], gmax = 0.0f;
    for (int g = 0; g < 16; g++) {
        float a = 0.0f;
        for (int i = 0; i < 16; i++)
            a = fmaxf(a, fabsf(x[16 * g + i]));
        gs[g] = a / 31.0f;
        gmax = fmaxf(gmax, gs[g]);
    }
    uint8_t *ql = b, *qh = b + 128, *scb = b + 192;
    put_f16(b + 208, gmax / 127.0f);
    uint16_t hd;
    memcpy(&hd, b + 208, 2);
    const float D = numla_f16_to_f32(hd);
    uint8_t q[256];
    for (int g = 0; g < 16; g++) {
        const int8_t sc = (int8_t)(D > 0.0f ? fminf(127.0f, rnd(gs[g] / D)) : 0.0f);
        scb[g] = (uint8_t)sc;
        const float step = D * (float)sc;
        for (int i = 0; i < 16; i++) {
            const float v = step > 0.0f ? rnd(x[16 * g + i] / step) : 0.0f;
            q[16 * g + i] = (uint8_t)(fminf(31.0f, fmaxf(-32.0f, v)) + 32.0f);
        }
    }
    memset(ql, 0, 128);
    memset(qh, 0, 64);
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const int e = 128 * h + l;
            ql[64 * h + l] = (uint8_t)((q[e] & 15) | (q[e + 64] & 15) << 4);
            ql[64 * h + 32 + l] = (uint8_t)((q[e + 32] & 15) | (q[e + 96] & 15) << 4);
            qh[32 * h + l] = (uint8_t)((q[e] >> 4) | (q[e + 32] >> 4) << 2 | (q[e + 64] >> 4) << 4 |
                                       (q[e + 96] >> 4) << 6);
        }
}

numla_status numla_qblock_quantize_row_ref(numla_qblock_type type, const float *x, int64_t k,
                                           void *dst)
{
    const numla_qblock_info *info = numla_qblock_info_get(type);
    const numla_qblock_type_row *row = info ? numla_qblock_type_row_get(type) : NULL;
    if (!row || !row->quantize)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "qblock quantize: no quantizer for %s yet (the types whose row in "
                   "kernels/qblock_types.c names one)", info ? info->name : "?");
    if (k < 0 || k % info->block)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qblock quantize: %lld columns is not whole blocks of %d", (long long)k,
                   info->block);
    uint8_t *o = dst;
    for (int64_t i = 0; i < k / info->block; i++)
        row->quantize(x + i * info->block, o + i * info->bytes);
    return NUMLA_STATUS_OK;
}

numla_status numla_qblock_mxfp4_from_e2m1(const uint8_t *codes, const uint8_t *scales, int64_t k,
                                          void *dst)
{
    if (k < 0 || k % 32)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "fp4 repack: %lld columns is not whole blocks of 32",
                   (long long)k);
    uint8_t *o = dst;
    for (int64_t b = 0; b < k / 32; b++, o += 17) {
        if (scales[b] == 0xFF)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "fp4 repack: block %lld has the E8M0 scale 0xFF "
                       "(NaN)", (long long)b);
        const uint8_t *c = codes + 16 * b;
        o[0] = scales[b];
        for (int j = 0; j < 16; j++) {
            /* element e sits in byte e / 2, low nibble when e is even */
            const uint8_t lo = (uint8_t)(c[j / 2] >> (4 * (j & 1))) & 15;
            const uint8_t hi = (uint8_t)(c[(j + 16) / 2] >> (4 * (j & 1))) & 15;
            o[1 + j] = (uint8_t)(lo | hi << 4);
        }
    }
    return NUMLA_STATUS_OK;
}
