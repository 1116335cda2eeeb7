/* kernels/qblock_quant.h: Q8_0 / Q4_0 rows quantized here have exactly the bytes the gguf PyPI
 * package's quantizer writes for the same fp32 rows (tests/golden/gguf_quant/quant.gguf, made by
 * scripts/make_gguf_model_golden.py: normal, tiny and large rows, a zero block, a negative
 * extreme, exact halves), and dequant(quant(x)) stays within the header's bound. */
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

/* Q4_K / Q6_K: numla's own rounding (no byte oracle): dequant(quant(x)) through the reference
 * dequantization (checked against the gguf package in unit.qblock) within the header's bound
 * element by element, and an rms error far below the values' (garbage packing would give
 * errors of the size of x). */
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
        for (int64_t r = 0; r < rows; r++) {
            const float *x = (const float *)xt->data + r * k;
            CU_ASSERT_EQUAL_FATAL(numla_qblock_quantize_row_ref(qt, x, k, blocks), NUMLA_STATUS_OK);
            CU_ASSERT_EQUAL_FATAL(numla_qblock_dequant_ref(qt, blocks, k, back), NUMLA_STATUS_OK);
            double e2 = 0, x2 = 0;
            for (int64_t i = 0; i < k; i++) {
                e2 += ((double)back[i] - x[i]) * ((double)back[i] - x[i]);
                x2 += (double)x[i] * x[i];
                double bound;
                uint16_t h;
                if (!t) {
                    const uint8_t *s = blocks + 4;
                    const int j = (int)(i / 32);
                    const int sc = j < 4 ? s[j] & 63 : (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
                    memcpy(&h, blocks, 2);
                    const double D = numla_f16_to_f32(h);
                    memcpy(&h, blocks + 2, 2);
                    bound = D * sc / 2 + 7.5 * D + numla_f16_to_f32(h) / 2;
                } else {
                    memcpy(&h, blocks + 208, 2);
                    const double D = numla_f16_to_f32(h);
                    bound = D * (int8_t)blocks[192 + i / 16] / 2 + 15.5 * D;
                }
                NUMLA_ASSERT_MSG(fabs((double)back[i] - x[i]) <= bound * (1 + 1e-6) + 1e-30,
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

NUMLA_TEST_SUITE(qblock_quant, NULL, NULL, NUMLA_TEST(test_quantize_matches_gguf),
                 NUMLA_TEST(test_k_quants_roundtrip))
