/* kernels/ref/qblock_ref.c — scalar reference of the block-quantized linear layers
 * (kernels/qblock.h): each encoding's dequantization, rounded as the header writes it, and the
 * linear on top of it. The oracle of the vector levels, and the level every type falls back to. */
#include "kernels/qblock_internal.h"

#include <math.h>
#include <omp.h>

const int8_t numla_qblock_iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

void numla_qblock_dequant_q8_0_ref(const uint8_t *b, float *y)
{
    const float d = numla_qblock_f16_(b);
    for (int j = 0; j < 32; j++)
        y[j] = (float)(int8_t)b[2 + j] * d;
}

void numla_qblock_dequant_q4_0_ref(const uint8_t *b, float *y)
{
    const float d = numla_qblock_f16_(b);
    for (int j = 0; j < 16; j++) {
        y[j] = (float)((b[2 + j] & 15) - 8) * d;
        y[j + 16] = (float)((b[2 + j] >> 4) - 8) * d;
    }
}

/* Q4_K and Q5_K (qh NULL for Q4_K). */
static void numla_qblock_k45_(const uint8_t *b, const uint8_t *qh, const uint8_t *qs, float *y)
{
    const float d = numla_qblock_f16_(b), dmin = numla_qblock_f16_(b + 2);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        numla_qblock_k4_scale_min_(b + 4, j, &sc, &m);
        const float dl = d * (float)sc, ml = dmin * (float)m;
        const uint8_t *q = qs + 32 * (j / 2);
        for (int l = 0; l < 32; l++) {
            int v = (j & 1) ? q[l] >> 4 : q[l] & 15;
            if (qh)
                v |= ((qh[l] >> j) & 1) << 4;
            y[32 * j + l] = dl * (float)v - ml;
        }
    }
}

void numla_qblock_dequant_q4_k_ref(const uint8_t *b, float *y) { numla_qblock_k45_(b, NULL, b + 16, y); }
void numla_qblock_dequant_q5_k_ref(const uint8_t *b, float *y) { numla_qblock_k45_(b, b + 16, b + 48, y); }

void numla_qblock_dequant_q6_k_ref(const uint8_t *b, float *y)
{
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    const float d = numla_qblock_f16_(b + 208);
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const uint8_t a = ql[64 * h + l], c = ql[64 * h + 32 + l], hb = qh[32 * h + l];
            const int q[4] = {(a & 15) | ((hb & 3) << 4), (c & 15) | (((hb >> 2) & 3) << 4),
                              (a >> 4) | (((hb >> 4) & 3) << 4), (c >> 4) | (((hb >> 6) & 3) << 4)};
            for (int t = 0; t < 4; t++) {
                const int e = 128 * h + 32 * t + l;
                y[e] = (d * (float)sc[e / 16]) * (float)(q[t] - 32);
            }
        }
}

void numla_qblock_dequant_iq4_xs_ref(const uint8_t *b, float *y)
{
    const float d = numla_qblock_f16_(b);
    const unsigned sh = (unsigned)b[2] | (unsigned)b[3] << 8;
    const uint8_t *sl = b + 4, *qs = b + 8;
    for (int ib = 0; ib < 8; ib++) {
        const int ls = ((sl[ib / 2] >> (4 * (ib % 2))) & 15) | (int)(((sh >> (2 * ib)) & 3) << 4);
        const float dl = d * (float)(ls - 32);
        for (int j = 0; j < 16; j++) {
            y[32 * ib + j] = dl * (float)numla_qblock_iq4_values[qs[16 * ib + j] & 15];
            y[32 * ib + j + 16] = dl * (float)numla_qblock_iq4_values[qs[16 * ib + j] >> 4];
        }
    }
}

void numla_qblock_dequant_q5_0_ref(const uint8_t *b, float *y)
{
    const float d = numla_qblock_f16_(b);
    const uint32_t qh = (uint32_t)b[2] | (uint32_t)b[3] << 8 | (uint32_t)b[4] << 16 | (uint32_t)b[5] << 24;
    for (int j = 0; j < 16; j++) {
        y[j] = (float)((int)((b[6 + j] & 15) | ((qh >> j) & 1) << 4) - 16) * d;
        y[j + 16] = (float)((int)((b[6 + j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - 16) * d;
    }
}

/* w = d·q + m, two roundings (the gguf package's (d * q) + m in fp32). */
void numla_qblock_dequant_q5_1_ref(const uint8_t *b, float *y)
{
    const float d = numla_qblock_f16_(b), m = numla_qblock_f16_(b + 2);
    const uint32_t qh = (uint32_t)b[4] | (uint32_t)b[5] << 8 | (uint32_t)b[6] << 16 | (uint32_t)b[7] << 24;
    for (int j = 0; j < 16; j++) {
        const float lo = (float)((b[8 + j] & 15) | ((qh >> j) & 1) << 4) * d;
        const float hi = (float)((b[8 + j] >> 4) | ((qh >> (j + 16)) & 1) << 4) * d;
        y[j] = lo + m;
        y[j + 16] = hi + m;
    }
}

/* Q4_1: w = d·q + m, two roundings as Q5_1 (the gguf package's (d * q) + m in fp32). */
void numla_qblock_dequant_q4_1_ref(const uint8_t *b, float *y)
{
    const float d = numla_qblock_f16_(b), m = numla_qblock_f16_(b + 2);
    for (int j = 0; j < 16; j++) {
        const float lo = (float)(b[4 + j] & 15) * d, hi = (float)(b[4 + j] >> 4) * d;
        y[j] = lo + m;
        y[j + 16] = hi + m;
    }
}

void numla_qblock_dequant_iq4_nl_ref(const uint8_t *b, float *y)
{
    const float d = numla_qblock_f16_(b);
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)numla_qblock_iq4_values[b[2 + j] & 15];
        y[j + 16] = d * (float)numla_qblock_iq4_values[b[2 + j] >> 4];
    }
}

/* MXFP4: ggml's e8m0 "half" 2^(e - 128) (bits 0x00200000 << e below e = 2: the subnormals)
 * times twice the e2m1 value. Every product is exact (a small integer times a power of two) but
 * where it leaves the float range (e >= 253 with a code of 8 or more). */
const int8_t numla_qblock_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

void numla_qblock_dequant_mxfp4_ref(const uint8_t *b, float *y)
{
    const float d = numla_qblock_e8m0_half_(b[0]);
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)numla_qblock_mxfp4_values[b[1 + j] & 15];
        y[j + 16] = d * (float)numla_qblock_mxfp4_values[b[1 + j] >> 4];
    }
}

void numla_qblock_dequant_q2_k_ref(const uint8_t *b, float *y)
{
    const uint8_t *sc = b, *qs = b + 16;
    const float d = numla_qblock_f16_(b + 80), dmin = numla_qblock_f16_(b + 82);
    for (int e = 0; e < 256; e++) {
        const int h = e / 128, s = (e / 32) % 4, l = e % 32, g = e / 16;
        const int q = (qs[32 * h + l] >> (2 * s)) & 3;
        y[e] = (d * (float)(sc[g] & 15)) * (float)q - dmin * (float)(sc[g] >> 4);
    }
}

void numla_qblock_dequant_q3_k_ref(const uint8_t *b, float *y)
{
    const uint8_t *hm = b, *qs = b + 32, *sc = b + 96;
    const float d = numla_qblock_f16_(b + 108);
    for (int e = 0; e < 256; e++) {
        const int h = e / 128, s = (e / 32) % 4, l = e % 32, g = e / 16;
        const int q = ((qs[32 * h + l] >> (2 * s)) & 3) - (((hm[l] >> (e / 32)) & 1) ? 0 : 4);
        y[e] = (d * (float)numla_qblock_q3k_scale_(sc, g)) * (float)q;
    }
}

void numla_qblock_dequant_block_ref(numla_qblock_type type, const uint8_t *b, float *out)
{
    numla_qblock_type_row_get(type)->dequant(b, out);
}

/* round(v) to nearest, ties to even, whatever the FPU rounding mode (|v| <= 127.x here). */
static float numla_qblock_round_half_even_(float v)
{
    float f = floorf(v), d = v - f; /* exact: |v| < 2^23 */
    if (d > 0.5f || (d == 0.5f && fmodf(f, 2.0f) != 0.0f))
        f += 1.0f;
    return f;
}

void numla_qblock_quantize_rows_(const float *x, int64_t ldx, int64_t m, int64_t k, void *ws)
{
    int8_t *xq = numla_qblock_ws_xq_(ws);
    float *dx = numla_qblock_ws_dx_(ws, m, k);
    int32_t *bs = numla_qblock_ws_bs_(ws, m, k);
    const int64_t nb = numla_qblock_q8_groups_(k);
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < m * nb; t++) {
        const int64_t i = t / nb, b = t % nb;
        const int len = k - 256 * b < 256 ? (int)(k - 256 * b) : 256; /* the last group may be short */
        const float *xb = x + i * ldx + 256 * b;
        int8_t *q = xq + i * k + 256 * b;
        float amax = 0.0f;
        for (int j = 0; j < len; j++)
            amax = fmaxf(amax, fabsf(xb[j]));
        const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        dx[i * nb + b] = amax > 0.0f ? amax / 127.0f : 0.0f;
        for (int j = 0; j < len; j++) {
            float v = numla_qblock_round_half_even_(xb[j] * inv);
            v = fminf(fmaxf(v, -127.0f), 127.0f); /* |x·inv| <= 127 (1 + 2^-23): a no-op guard */
            q[j] = (int8_t)v;
        }
        for (int g = 0; g < len / 16; g++) {
            int32_t s = 0;
            for (int j = 0; j < 16; j++)
                s += q[16 * g + j];
            bs[i * (k / 16) + 16 * b + g] = s;
        }
    }
}

void numla_qblock_forward_ref(const numla_qblock_weight *w, int64_t m, const float *x, int64_t ldx,
                              float *y, int64_t ldy, int accumulate, void *ws, size_t ws_bytes)
{
    (void)ws_bytes;
    const numla_qblock_info *info = numla_qblock_info_get(w->type);
    const int64_t B = info->block, nb = w->k / B, k = w->k;
    const int q8 = w->act == NUMLA_QBLOCK_ACT_Q8;
    if (q8)
        numla_qblock_quantize_rows_(x, ldx, m, k, ws);
    const int8_t *xq = q8 ? numla_qblock_ws_xq_(ws) : NULL;
    const float *dx = q8 ? numla_qblock_ws_dx_(ws, m, k) : NULL;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < w->n; r++) {
        float blk[256], xt[256];
        uint8_t raw[256]; /* a PANEL16 row's block, back in the file's bytes */
        const uint8_t *row = w->layout == NUMLA_QBLOCK_LAYOUT_ROWS ? w->q + r * w->ld : NULL;
        for (int64_t i = 0; i < m; i++) {
            const float *xi = x + i * ldx;
            float v = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                if (row) {
                    numla_qblock_dequant_block_ref(w->type, row + b * info->bytes, blk);
                } else {
                    numla_qblock_p16_block_(w, r, b, raw);
                    numla_qblock_dequant_block_ref(w->type, raw, blk);
                }
                const float *xb = xi + b * B;
                if (q8) { /* x̃ = dx · q, in fp32 */
                    for (int64_t j = 0; j < B; j++) {
                        const int64_t c = b * B + j;
                        xt[j] = dx[i * numla_qblock_q8_groups_(k) + c / 256] * (float)xq[i * k + c];
                    }
                    xb = xt;
                }
                float s = 0.0f;
                for (int64_t j = 0; j < B; j++)
                    s += blk[j] * xb[j];
                v += s;
            }
            float *yo = y + i * ldy + r;
            *yo = accumulate ? *yo + v : v;
        }
    }
}
