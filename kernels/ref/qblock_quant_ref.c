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

/* Round to the nearest integer, ties to even, as ggml's k-quant searches round: adding 1.5 ·
 * 2^23 leaves the rounded integer in the low mantissa bits (exact for |v| < 2^22, where every
 * code and scale here lies; v is clamped there first) without a call to rintf, which the
 * baseline x86-64 build does not inline. */
static int nearest(float v)
{
    const float t = fminf(fmaxf(v, -4194303.0f), 4194303.0f) + 12582912.0f;
    int32_t i;
    memcpy(&i, &t, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* One Q4_K sub-block: x (n values) ≈ scale · q - mn with q in 0..nmax, mn >= 0, chosen to
 * minimize Σ w (x - x̂)². Start from the min/max fit (offset lo = min(0, min x), hi = max x,
 * q = round((x - lo) · nmax / (hi - lo))); then for each of 21 trial step counts nmax - 1,
 * nmax - 0.9, ..., nmax + 1 over [b, hi], b the offset of the best fit so far, round the codes
 * (x - b) / step and solve the weighted least squares for (scale, offset) with the codes held
 * (the offset held at 0 when the best one is positive, as the format stores only a subtracted
 * minimum); keep the fit of least error.
 * Writes the codes to q and the minimum (>= 0) to *mn; returns the scale (>= 0). */
static float q4k_fit_subblock(int n, int nmax, const float *x, const float *w, uint8_t *q,
                              float *mn)
{
    float lo = x[0], hi = x[0], sw = 0.0f, swx = 0.0f;
    for (int i = 0; i < n; i++) {
        lo = fminf(lo, x[i]);
        hi = fmaxf(hi, x[i]);
        sw += w[i];
        swx += w[i] * x[i];
    }
    lo = fminf(lo, 0.0f);
    if (hi == lo) {
        memset(q, 0, (size_t)n);
        *mn = -lo;
        return 0.0f;
    }
    const float inv0 = (float)nmax / (hi - lo);
    float scale = 1.0f / inv0, off = lo, best = 0.0f;
    for (int i = 0; i < n; i++) {
        q[i] = (uint8_t)clampi(nearest((x[i] - lo) * inv0), 0, nmax);
        const float e = scale * (float)q[i] + lo - x[i];
        best += w[i] * e * e;
    }
    uint8_t t[32];
    for (int step = 0; step <= 20; step++) {
        /* the trial's grid starts at the offset of the best fit so far */
        if (!(hi - off > 0.0f))
            break;
        const float inv = (-1.0f + 0.1f * (float)step + (float)nmax) / (hi - off);
        float sl = 0.0f, sll = 0.0f, sxl = 0.0f;
        for (int i = 0; i < n; i++) {
            const int l = clampi(nearest((x[i] - off) * inv), 0, nmax);
            t[i] = (uint8_t)l;
            sl += w[i] * (float)l;
            sll += w[i] * (float)l * (float)l;
            sxl += w[i] * (float)l * x[i];
        }
        const float det = sw * sll - sl * sl;
        if (!(det > 0.0f))
            continue;
        float s = (sw * sxl - swx * sl) / det, b = (sll * swx - sl * sxl) / det;
        if (b > 0.0f) {
            b = 0.0f;
            s = sxl / sll;
        }
        float err = 0.0f;
        for (int i = 0; i < n; i++) {
            const float e = s * (float)t[i] + b - x[i];
            err += w[i] * e * e;
        }
        if (err < best) {
            best = err;
            scale = s;
            off = b;
            memcpy(q, t, (size_t)n);
        }
    }
    *mn = -off;
    return scale;
}

/* Q4_K: 8 sub-blocks of 32, each w = (D·sc)·q - (DM·m), q 0..15, sc and m 6-bit (header). */
void numla_qblock_quantize_q4_k_ref(const float *x, uint8_t *b)
{
    float scale[8], mins[8], smax = 0.0f, mmax = 0.0f, w[32];
    uint8_t q[256];
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        float s2 = 0.0f;
        for (int i = 0; i < 32; i++)
            s2 += xs[i] * xs[i];
        const float rms = sqrtf(s2 / 32.0f);
        for (int i = 0; i < 32; i++)
            w[i] = rms + fabsf(xs[i]);
        scale[j] = q4k_fit_subblock(32, 15, xs, w, q + 32 * j, &mins[j]);
        smax = fmaxf(smax, scale[j]);
        mmax = fmaxf(mmax, mins[j]);
    }
    const float isc = smax > 0.0f ? 63.0f / smax : 0.0f, imn = mmax > 0.0f ? 63.0f / mmax : 0.0f;
    put_f16(b, smax / 63.0f);
    put_f16(b + 2, mmax / 63.0f);
    uint16_t hd, hm;
    memcpy(&hd, b, 2);
    memcpy(&hm, b + 2, 2);
    const float D = numla_f16_to_f32(hd), DM = numla_f16_to_f32(hm);
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)clampi(nearest(isc * scale[j]), 0, 63);
        m[j] = (uint8_t)clampi(nearest(imn * mins[j]), 0, 63);
    }
    uint8_t *s = b + 4;
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
        s[j + 4] = (uint8_t)((m[j] & 63) | (m[j + 4] >> 4) << 6);
        s[j + 8] = (uint8_t)((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
    }
    /* the codes again against the stored (rounded) scale and minimum */
    for (int j = 0; j < 8; j++) {
        const float step = D * (float)sc[j], off = DM * (float)m[j];
        if (step == 0.0f)
            continue;
        for (int i = 0; i < 32; i++)
            q[32 * j + i] = (uint8_t)clampi(nearest((x[32 * j + i] + off) / step), 0, 15);
    }
    uint8_t *qs = b + 16;
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            qs[32 * c + l] = (uint8_t)(q[64 * c + l] | q[64 * c + 32 + l] << 4);
}

/* One Q6_K group: x (n values) ≈ scale · q with q in -nmax..nmax-1 (the extreme value of x on
 * the side of code -nmax, whichever sign it has, so a signed scale uses the longer side), the
 * scale minimizing Σ x² (x - x̂)² over 19 trial steps: q = round(x · -(nmax + t) / m) for m the
 * value of largest |x| and t = 0, ±0.1, ..., ±0.9, each with its least-squares scale Σ w x q /
 * Σ w q²; the trial of greatest (Σ w x q)² / Σ w q² (least error) wins. Writes its codes + nmax
 * to q (0 for a group of zeros) and returns the scale (signed; 0 for a group of zeros). */
static float q6k_fit_group(int n, int nmax, const float *x, uint8_t *q)
{
    float amax = 0.0f, m = 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            m = x[i];
        }
    memset(q, 0, (size_t)n);
    if (amax < 1e-15f)
        return 0.0f;
    float scale = 0.0f, best = 0.0f;
    for (int t = 0; t <= 18; t++) {
        /* t = 0 first (the plain fit), then -0.9 .. -0.1, 0.1 .. 0.9 */
        const int k = t == 0 ? 0 : t <= 9 ? t - 10 : t - 9;
        const float inv = -((float)nmax + 0.1f * (float)k) / m;
        float sxl = 0.0f, sll = 0.0f;
        for (int i = 0; i < n; i++) {
            const int l = clampi(nearest(inv * x[i]), -nmax, nmax - 1);
            const float w = x[i] * x[i];
            sxl += w * x[i] * (float)l;
            sll += w * (float)l * (float)l;
        }
        if (!(sll > 0.0f))
            continue;
        if (t == 0 || sxl * sxl > best * sll) {
            scale = sxl / sll;
            best = scale * sxl;
            for (int i = 0; i < n; i++)
                q[i] = (uint8_t)(clampi(nearest(inv * x[i]), -nmax, nmax - 1) + nmax);
        }
    }
    return scale;
}

/* Q6_K: 16 groups of 16, each w = (D·sc)·q, q -32..31, sc int8 (header). */
void numla_qblock_quantize_q6_k_ref(const float *x, uint8_t *b)
{
    float gs[16], smax = 0.0f;
    uint8_t q[256];
    for (int g = 0; g < 16; g++) {
        gs[g] = q6k_fit_group(16, 32, x + 16 * g, q + 16 * g);
        if (fabsf(gs[g]) > fabsf(smax))
            smax = gs[g];
    }
    uint8_t *ql = b, *qh = b + 128, *scb = b + 192;
    memset(b, 0, 210);
    if (fabsf(smax) < 1e-15f)
        return; /* all zero: d = 0, every byte 0 */
    {
        /* the largest scale takes code -128 (int8's longer side); a group whose scale code
         * rounds to 0 keeps its fitted codes (it reads as 0 whatever they are) */
        const float isc = -128.0f / smax;
        put_f16(b + 208, 1.0f / isc);
        uint16_t hd;
        memcpy(&hd, b + 208, 2);
        const float D = numla_f16_to_f32(hd);
        for (int g = 0; g < 16; g++) {
            const int sc = clampi(nearest(isc * gs[g]), -128, 127);
            scb[g] = (uint8_t)(int8_t)sc;
            const float step = D * (float)sc;
            if (step == 0.0f)
                continue;
            for (int i = 0; i < 16; i++)
                q[16 * g + i] = (uint8_t)(clampi(nearest(x[16 * g + i] / step), -32, 31) + 32);
        }
    }
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
