/* kernels/qblock_quant.h: Q8_0 / Q4_0 rows quantized here have exactly the bytes the gguf PyPI
 * package's quantizer writes for the same fp32 rows (tests/golden/gguf_quant/quant.gguf, made by
 * scripts/make_gguf_model_golden.py: normal, tiny and large rows, a zero block, a negative
 * extreme, exact halves), and dequant(quant(x)) stays within the header's bound; the searched
 * Q4_K / Q6_K rounding beats the plain min/max one and matches a numpy implementation of
 * llama.cpp's search (tests/golden/gguf_quant/kquant.gguf, scripts/make_kquant_golden.py). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "engine/formats/gguf.h"
#include "kernels/qblock.h"
#include "kernels/qblock_quant.h"
#include "test_util.h"

static void check_type(const numla_gguf *g, const char *name, numla_qblock_type qt)
{
    const numla_gguf_tensor *x = numla_gguf_tensor_find(g, "x"), *q = numla_gguf_tensor_find(g, name);
    CU_ASSERT_PTR_NOT_NULL_FATAL(x);
    CU_ASSERT_PTR_NOT_NULL_FATAL(q);
    const int64_t k = x->ne[0], rows = x->ne[1];
    const numla_qblock_info *in = numla_qblock_info_get(qt);
    const size_t rb = (size_t)(k / in->block * in->bytes);
    uint8_t *mine = malloc(rb);
    float *back = malloc(sizeof(float) * (size_t)k);
    int same = 1;
    double worst = 0;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = (const float *)x->data + r * k;
        CU_ASSERT_EQUAL_FATAL(numla_qblock_quantize_row_ref(qt, xr, k, mine), NUMLA_STATUS_OK);
        same &= !memcmp(mine, (const char *)q->data + (size_t)r * rb, rb);
        CU_ASSERT_EQUAL_FATAL(numla_qblock_dequant_ref(qt, mine, k, back), NUMLA_STATUS_OK);
        for (int64_t b = 0; b < k / 32; b++) {
            float amax = 0;
            for (int j = 0; j < 32; j++)
                amax = fmaxf(amax, fabsf(xr[b * 32 + j]));
            /* header bound: half a step plus the fp16 rounding of d over the codes; Q4_0's
             * clipped side may be one more step short */
            const double d = qt == NUMLA_QBLOCK_Q8_0 ? amax / 127.0 : amax / 8.0;
            const double codes = qt == NUMLA_QBLOCK_Q8_0 ? 127 : 8;
            const double bound = (qt == NUMLA_QBLOCK_Q8_0 ? 0.5 : 1.0) * d +
                                 codes * fmax(d * 0x1p-11, 0x1p-25) + 1e-30;
            for (int j = 0; j < 32; j++) {
                const double e = fabs((double)back[b * 32 + j] - (double)xr[b * 32 + j]);
                worst = fmax(worst, e / (d > 0 ? d : 1));
                NUMLA_ASSERT_MSG(e <= bound, "%s row %lld elem %lld: error %g > bound %g", name,
                                 (long long)r, (long long)(b * 32 + j), e, bound);
            }
        }
    }
    NUMLA_ASSERT_MSG(same, "%s: blocks differ from the gguf package's", name);
    free(mine);
    free(back);
}

static void test_quantize_matches_gguf(void)
{
    numla_gguf *g = NULL;
    CU_ASSERT_EQUAL_FATAL(
        numla_gguf_open(numla_test_source_path("tests/golden/gguf_quant/quant.gguf"), &g),
        NUMLA_STATUS_OK);
    check_type(g, "x.q8_0", NUMLA_QBLOCK_Q8_0);
    check_type(g, "x.q4_0", NUMLA_QBLOCK_Q4_0);
    numla_gguf_close(&g);
    uint8_t buf[256];
    float x[64] = {0};
    CU_ASSERT_EQUAL(numla_qblock_quantize_row_ref(NUMLA_QBLOCK_Q8_0, x, 33, buf),
                    NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_qblock_quantize_row_ref(NUMLA_QBLOCK_IQ4_XS, x, 256, buf),
                    NUMLA_STATUS_UNSUPPORTED);
    numla_error_clear();
}

/* Element e of a Q4_K / Q6_K row as the block stores it: the step (D·sc, signed for Q6_K) and
 * offset of its sub-block, and the dequantized values of the lowest and highest code. */
static void k_grid(numla_qblock_type qt, const uint8_t *blk, int e, double *step, double *lo,
                   double *hi)
{
    uint16_t h;
    if (qt == NUMLA_QBLOCK_Q4_K) {
        const uint8_t *s = blk + 4;
        const int j = e / 32;
        const int sc = j < 4 ? s[j] & 63 : (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
        const int m = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | (s[j] >> 6) << 4;
        memcpy(&h, blk, 2);
        *step = numla_f16_to_f32(h) * sc;
        memcpy(&h, blk + 2, 2);
        *lo = -(double)numla_f16_to_f32(h) * m;
        *hi = *lo + 15 * *step;
    } else {
        memcpy(&h, blk + 208, 2);
        *step = (double)numla_f16_to_f32(h) * (int8_t)blk[192 + e / 16];
        *lo = fmin(-32 * *step, 31 * *step);
        *hi = fmax(-32 * *step, 31 * *step);
    }
}

/* Q4_K / Q6_K round trip on quant.gguf's rows: dequant(quant(x)) through the reference
 * dequantization (checked against the gguf package in unit.qblock) is, element by element, the
 * nearest point of the block's grid (within half a step where x lies inside the grid's range,
 * the range's end where it lies outside: a searched scale may clip), and the rms error is far
 * below the values' (garbage packing would give errors of the size of x). */
static void test_k_quants_roundtrip(void)
{
    numla_gguf *g = NULL;
    CU_ASSERT_EQUAL_FATAL(
        numla_gguf_open(numla_test_source_path("tests/golden/gguf_quant/quant.gguf"), &g),
        NUMLA_STATUS_OK);
    const numla_gguf_tensor *xt = numla_gguf_tensor_find(g, "x");
    const int64_t k = xt->ne[0], rows = xt->ne[1];
    uint8_t blocks[256 * 2];
    float back[256];
    for (int t = 0; t < 2; t++) {
        const numla_qblock_type qt = t ? NUMLA_QBLOCK_Q6_K : NUMLA_QBLOCK_Q4_K;
        const int bytes = t ? 210 : 144;
        for (int64_t r = 0; r < rows; r++) {
            const float *x = (const float *)xt->data + r * k;
            CU_ASSERT_EQUAL_FATAL(numla_qblock_quantize_row_ref(qt, x, k, blocks), NUMLA_STATUS_OK);
            CU_ASSERT_EQUAL_FATAL(numla_qblock_dequant_ref(qt, blocks, k, back), NUMLA_STATUS_OK);
            double e2 = 0, x2 = 0;
            for (int64_t i = 0; i < k; i++) {
                e2 += ((double)back[i] - x[i]) * ((double)back[i] - x[i]);
                x2 += (double)x[i] * x[i];
                double step, lo, hi;
                k_grid(qt, blocks + (i / 256) * bytes, (int)(i % 256), &step, &lo, &hi);
                const double out = fmax(0, fmax(lo - x[i], x[i] - hi));
                const double bound = out > 0 ? out : fabs(step) / 2;
                NUMLA_ASSERT_MSG(fabs((double)back[i] - x[i]) <= bound * (1 + 1e-5) + 1e-6 * fabs(step) + 1e-30,
                                 "%s row %lld elem %lld: %g vs %g (bound %g)",
                                 t ? "Q6_K" : "Q4_K", (long long)r, (long long)i, back[i], x[i],
                                 bound);
            }
            NUMLA_ASSERT_MSG(e2 <= (t ? 1e-3 : 1e-2) * x2 + 1e-30,
                             "%s row %lld: rms error %g of rms %g", t ? "Q6_K" : "Q4_K",
                             (long long)r, sqrt(e2 / k), sqrt(x2 / k));
        }
    }
    numla_gguf_close(&g);
}

/* The plain min/max rounding numla had before the search, written out here as the baseline:
 * one block of 256 -> its dequantized values. Q4_K: per sub-block of 32 lo = min(0, min x),
 * scale (max x - lo) / 15, fp16 super-scales from the largest, 6-bit codes rounded; Q6_K: per
 * group of 16 max |x| / 31, an fp16 super-scale from the largest, codes 0..127. */
static void minmax_block(numla_qblock_type qt, const float *x, float *y)
{
    if (qt == NUMLA_QBLOCK_Q4_K) {
        float sc[8], mn[8], smax = 0, mmax = 0;
        for (int j = 0; j < 8; j++) {
            float lo = 0, hi = 0;
            for (int i = 0; i < 32; i++) {
                lo = fminf(lo, x[32 * j + i]);
                hi = fmaxf(hi, x[32 * j + i]);
            }
            sc[j] = (hi - lo) / 15;
            mn[j] = -lo;
            smax = fmaxf(smax, sc[j]);
            mmax = fmaxf(mmax, mn[j]);
        }
        const float D = numla_f16_to_f32(numla_f32_to_f16(smax / 63));
        const float DM = numla_f16_to_f32(numla_f32_to_f16(mmax / 63));
        for (int j = 0; j < 8; j++) {
            const float s = D > 0 ? fminf(63, roundf(sc[j] / D)) * D : 0;
            const float o = DM > 0 ? fminf(63, roundf(mn[j] / DM)) * DM : 0;
            for (int i = 0; i < 32; i++)
                y[32 * j + i] = s > 0 ? s * fminf(15, fmaxf(0, roundf((x[32 * j + i] + o) / s))) - o : -o;
        }
    } else {
        float gs[16], gmax = 0;
        for (int g = 0; g < 16; g++) {
            float a = 0;
            for (int i = 0; i < 16; i++)
                a = fmaxf(a, fabsf(x[16 * g + i]));
            gs[g] = a / 31;
            gmax = fmaxf(gmax, gs[g]);
        }
        const float D = numla_f16_to_f32(numla_f32_to_f16(gmax / 127));
        for (int g = 0; g < 16; g++) {
            const float s = D > 0 ? fminf(127, roundf(gs[g] / D)) * D : 0;
            for (int i = 0; i < 16; i++)
                y[16 * g + i] = s > 0 ? s * fminf(31, fmaxf(-32, roundf(x[16 * g + i] / s))) : 0;
        }
    }
}

/* The error the search minimizes, summed over a row: Q4_K weights each element by its
 * sub-block's rms plus |x|, Q6_K by x². */
static double weighted_err(numla_qblock_type qt, const float *x, const float *y, int64_t k)
{
    double e = 0;
    for (int64_t s = 0; s < k; s += 32) {
        double rms = 0;
        for (int i = 0; i < 32; i++)
            rms += (double)x[s + i] * x[s + i];
        rms = sqrt(rms / 32);
        for (int i = 0; i < 32; i++) {
            const double d = (double)y[s + i] - x[s + i];
            const double w = qt == NUMLA_QBLOCK_Q4_K ? rms + fabs(x[s + i]) : (double)x[s + i] * x[s + i];
            e += w * d * d;
        }
    }
    return e;
}

/* The searched Q4_K / Q6_K rounding on kquant.gguf's rows (normal, Student-t, Laplace, rare
 * outliers, all-positive, zero / sparse; scripts/make_kquant_golden.py): for each kind of row,
 * both the plain and the weighted squared error are at most the min/max baseline's, and at most
 * 0.1 % above those of the numpy implementation of llama.cpp's search in the same file (its
 * blocks dequantized by the reference dequantization); nearly every block is the same bytes
 * as numpy's (float ties aside). */
static void test_k_quants_search(void)
{
    numla_gguf *g = NULL;
    CU_ASSERT_EQUAL_FATAL(
        numla_gguf_open(numla_test_source_path("tests/golden/gguf_quant/kquant.gguf"), &g),
        NUMLA_STATUS_OK);
    const numla_gguf_tensor *xt = numla_gguf_tensor_find(g, "kx");
    CU_ASSERT_PTR_NOT_NULL_FATAL(xt);
    const int64_t k = xt->ne[0], rows = xt->ne[1];
    CU_ASSERT_EQUAL_FATAL(rows, 32);
    /* kinds of rows: [first, end) */
    static const int kinds[][2] = {{0, 8}, {8, 16}, {16, 24}, {24, 28}, {28, 30}, {30, 32}};
    static const char *kind_name[] = {"normal", "student-t", "laplace", "outliers", "positive",
                                      "zero/sparse"};
    float *y = malloc(sizeof(float) * (size_t)k), *yo = malloc(sizeof(float) * (size_t)k),
          *yn = malloc(sizeof(float) * (size_t)k);
    uint8_t *blk = malloc((size_t)(k / 256 * 210));
    for (int t = 0; t < 2; t++) {
        const numla_qblock_type qt = t ? NUMLA_QBLOCK_Q6_K : NUMLA_QBLOCK_Q4_K;
        const char *tn = t ? "Q6_K" : "Q4_K";
        const numla_gguf_tensor *qn = numla_gguf_tensor_find(g, t ? "kx.q6_k" : "kx.q4_k");
        CU_ASSERT_PTR_NOT_NULL_FATAL(qn);
        const size_t rb = (size_t)(k / 256 * (t ? 210 : 144));
        int same = 0, nblocks = 0;
        for (int c = 0; c < 6; c++) {
            double e[3] = {0}, we[3] = {0}; /* new, min/max, numpy */
            for (int r = kinds[c][0]; r < kinds[c][1]; r++) {
                const float *x = (const float *)xt->data + r * k;
                const uint8_t *ref = (const uint8_t *)qn->data + (size_t)r * rb;
                CU_ASSERT_EQUAL_FATAL(numla_qblock_quantize_row_ref(qt, x, k, blk), NUMLA_STATUS_OK);
                CU_ASSERT_EQUAL_FATAL(numla_qblock_dequant_ref(qt, blk, k, y), NUMLA_STATUS_OK);
                CU_ASSERT_EQUAL_FATAL(numla_qblock_dequant_ref(qt, ref, k, yn), NUMLA_STATUS_OK);
                for (int64_t b = 0; b < k; b += 256)
                    minmax_block(qt, x + b, yo + b);
                const float *ys[3] = {y, yo, yn};
                for (int v = 0; v < 3; v++) {
                    for (int64_t i = 0; i < k; i++)
                        e[v] += ((double)ys[v][i] - x[i]) * ((double)ys[v][i] - x[i]);
                    we[v] += weighted_err(qt, x, ys[v], k);
                }
                for (int64_t b = 0; b < k / 256; b++, nblocks++)
                    same += !memcmp(blk + b * (t ? 210 : 144), ref + b * (t ? 210 : 144), t ? 210 : 144);
            }
            printf("\n    %s %-11s sq err %.4g (min/max %.4g, numpy %.4g), weighted %.4g (%.4g, %.4g)",
                   tn, kind_name[c], e[0], e[1], e[2], we[0], we[1], we[2]);
            NUMLA_ASSERT_MSG(e[0] <= e[1] && we[0] <= we[1],
                             "%s %s rows: error %g / weighted %g above min/max's %g / %g", tn,
                             kind_name[c], e[0], we[0], e[1], we[1]);
            NUMLA_ASSERT_MSG(e[0] <= e[2] * 1.001 + 1e-30 && we[0] <= we[2] * 1.001 + 1e-30,
                             "%s %s rows: error %g / weighted %g above numpy's %g / %g", tn,
                             kind_name[c], e[0], we[0], e[2], we[2]);
        }
        printf("\n    %s: %d of %d blocks the same bytes as numpy's\n", tn, same, nblocks);
        NUMLA_ASSERT_MSG(same * 10 >= nblocks * 9, "%s: only %d of %d blocks equal numpy's", tn,
                         same, nblocks);
    }
    free(y);
    free(yo);
    free(yn);
    free(blk);
    numla_gguf_close(&g);
}

NUMLA_TEST_SUITE(qblock_quant, NULL, NULL, NUMLA_TEST(test_quantize_matches_gguf),
                 NUMLA_TEST(test_k_quants_roundtrip), NUMLA_TEST(test_k_quants_search))
