/* Tests for kernels/qblock: the reference dequantization of every encoding bit for bit against
 * the gguf PyPI package's numpy dequantization (tests/golden/gguf/blocks.gguf), every level's
 * linear against the dequantized weights in double for many shapes, M, thread counts and
 * accumulate, the same bits whatever M and the thread count, the block table against the GGUF
 * reader's type table, and packing's argument checks. */
#include "test_util.h"

#include "engine/formats/gguf.h"
#include "kernels/linear.h"
#include "kernels/qblock.h"
#include "kernels/qblock_internal.h"
#include "qblock_check.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_dequant_golden(void)
{
    numla_gguf *g = NULL;
    CU_ASSERT_EQUAL_FATAL(numla_gguf_open(numla_test_source_path("tests/golden/gguf/blocks.gguf"), &g),
                          NUMLA_STATUS_OK);
    for (int t = 0; t < NUMLA_QBLOCK_TYPE_COUNT; t++) {
        const numla_qblock_info *info = numla_qblock_info_get((numla_qblock_type)t);
        char qn[32], rn[32];
        snprintf(qn, sizeof qn, "%s.q", info->name);
        for (char *p = qn; *p; p++)
            *p = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
        snprintf(rn, sizeof rn, "%.*s.ref", (int)(strlen(qn) - 2), qn);
        const numla_gguf_tensor *q = numla_gguf_tensor_find(g, qn), *ref = numla_gguf_tensor_find(g, rn);
        CU_ASSERT_PTR_NOT_NULL_FATAL(q);
        CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
        CU_ASSERT_EQUAL(q->type, info->ggml_type);
        const int64_t n = q->ne[0] * q->ne[1];
        float *out = malloc((size_t)n * sizeof *out);
        CU_ASSERT_EQUAL(numla_qblock_dequant_ref((numla_qblock_type)t, q->data, n, out), NUMLA_STATUS_OK);
        int64_t diff = 0, first = -1;
        const float *want = ref->data;
        for (int64_t i = 0; i < n; i++)
            if (memcmp(&out[i], &want[i], 4)) {
                if (first < 0)
                    first = i;
                diff++;
            }
        NUMLA_ASSERT_MSG(diff == 0, "%s: %lld of %lld values differ from the gguf package's, first at %lld: %g vs %g",
                         info->name, (long long)diff, (long long)n, (long long)first,
                         first >= 0 ? out[first] : 0.0, first >= 0 ? want[first] : 0.0);
        free(out);
    }
    numla_gguf_close(&g);
}

/* The block table agrees with the GGUF reader's type table. */
static void test_table(void)
{
    for (int t = 0; t < NUMLA_QBLOCK_TYPE_COUNT; t++) {
        const numla_qblock_info *info = numla_qblock_info_get((numla_qblock_type)t);
        const numla_ggml_type_info *gi = numla_ggml_type_get(info->ggml_type);
        CU_ASSERT_PTR_NOT_NULL_FATAL(gi);
        CU_ASSERT_STRING_EQUAL(gi->name, info->name);
        CU_ASSERT_EQUAL(gi->block, info->block);
        CU_ASSERT_EQUAL(gi->bytes, info->bytes);
        numla_qblock_type back;
        CU_ASSERT_EQUAL(numla_qblock_from_ggml(info->ggml_type, &back), NUMLA_STATUS_OK);
        CU_ASSERT_EQUAL((int)back, t);
    }
    /* each row's columns hold together (kernels/qblock_types.h) */
    for (int t = 0; t < NUMLA_QBLOCK_TYPE_COUNT; t++) {
        const numla_qblock_type_row *row = numla_qblock_type_row_get((numla_qblock_type)t);
        CU_ASSERT_PTR_NOT_NULL(row->dequant);
        CU_ASSERT(row->q8_group == 0 || row->q8_group % row->info.block == 0);
        CU_ASSERT(row->sub == 16 || row->sub == 32);
        CU_ASSERT(!row->p16_cols || (row->p16_cols % row->info.block == 0 && row->p16_bytes > 0));
        CU_ASSERT(!row->p16_cols == !row->p16_put && !row->p16_put == !row->p16_get && !row->p16_get == !row->p16_vnni);
        CU_ASSERT(!row->panel_gemm || row->p16_cols || row->info.block == 32); /* MXFP4: unpacked per call */
        CU_ASSERT(!numla_qblock_type_row_q8_vnni(row) || row->q8_group); /* Q8 kernels need the Q8 mode */
        CU_ASSERT(!row->q8_gemm.full == !row->q8_gemm.part);
        CU_ASSERT(!row->q8_gemm_short.full || row->q8_gemm.full);
        CU_ASSERT(!row->p16_cols || row->q8_group); /* PANEL16 is a Q8-mode layout */
        CU_ASSERT(!row->f32_rows == !row->f32_decode);
    }
    numla_qblock_type x;
    CU_ASSERT_EQUAL(numla_qblock_from_ggml(NUMLA_GGML_IQ2_XXS, &x), NUMLA_STATUS_UNSUPPORTED);
    CU_ASSERT_PTR_NULL(numla_qblock_info_get(NUMLA_QBLOCK_TYPE_COUNT));
}

/* Every level against the dequantized weights in double, bound of kernels/qblock.h; every
 * level's rows have the same bits whatever M and the thread count. */
static void test_forward(void)
{
    numla_isa isas[NUMLA_ISA_COUNT];
    const int nisa = numla_test_isas(isas);
    numla_test_rng rng = {424242};
    static const int64_t ns[] = {1, 3, 17, 40};
    static const int64_t ks256[] = {256, 1280};
    static const int64_t ks32[] = {32, 96, 288, 544};
    static const int64_t ms[] = {1, 2, 3, 4, 7}; /* from 4: the avx512 many-row path */
    int checked = 0;
    unsigned kept = 0; /* the (level, M, acc) cases of the sweep, one in 3 by default, 7 lean */
    for (int t = 0; t < NUMLA_QBLOCK_TYPE_COUNT; t++) {
        const numla_qblock_info *info = numla_qblock_info_get((numla_qblock_type)t);
        const int64_t *ks = info->block == 32 ? ks32 : ks256;
        const int nk = info->block == 32 ? 4 : 2;
        for (int in = 0; in < 4; in++)
            for (int ik = 0; ik < nk; ik++) {
                const int64_t n = ns[in], k = ks[ik], M = 7;
                int64_t rb;
                uint8_t *src = qb_random((numla_qblock_type)t, n, k, &rng, &rb);
                size_t bytes = numla_qblock_packed_size((numla_qblock_type)t, n, k);
                CU_ASSERT_FATAL(bytes > 0);
                void *dst = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
                numla_qblock_weight w;
                numla_qblock_source s = {.type = (numla_qblock_type)t, .n = n, .k = k, .data = src, .ld = rb};
                CU_ASSERT_EQUAL_FATAL(numla_qblock_pack(&s, dst, &w), NUMLA_STATUS_OK);
                float *wd = malloc((size_t)(n * k) * sizeof *wd);
                CU_ASSERT_EQUAL(numla_qblock_dequant_ref((numla_qblock_type)t, src, n * k, wd), NUMLA_STATUS_OK);
                const int64_t ldx = k + 3, ldy = n + 2;
                float *x = malloc((size_t)(M * ldx) * sizeof *x);
                for (int64_t i = 0; i < M * ldx; i++)
                    x[i] = (float)numla_test_rng_normal(&rng);
                float *y0 = malloc((size_t)(M * ldy) * sizeof *y0), *y = malloc((size_t)(M * ldy) * sizeof *y);
                for (int64_t i = 0; i < M * ldy; i++)
                    y0[i] = (float)numla_test_rng_normal(&rng);
                /* room for 3 threads: th = 4 runs a team of 4 on it; th = 2 gets a workspace for 1 */
                const size_t ws3 = numla_qblock_workspace_size(&w, M, 3), ws1 = numla_qblock_workspace_size(&w, M, 1);
                void *ws = malloc(ws3 ? ws3 : 1);
                for (int il = 0; il < nisa; il++)
                    for (int im = 0; im < 5; im++)
                        for (int acc = 0; acc < 2; acc++) {
                            if (!numla_test_sweep_keep(&kept, 3))
                                continue; /* every case under NUMLA_TEST_SWEEP=full */
                            const int64_t m = ms[im];
                            float *yfirst = NULL;
                            for (int th = 1; th <= 4; th += th) { /* 1, 2, 4 */
                                memcpy(y, y0, (size_t)(M * ldy) * sizeof *y);
                                omp_set_num_threads(th);
                                CU_ASSERT_EQUAL(numla_qblock_forward(isas[il], &w, m, x, ldx, y, ldy, acc, ws,
                                                                     th == 2 ? ws1 : ws3),
                                                NUMLA_STATUS_OK);
                                for (int64_t i = 0; i < m; i++)
                                    for (int64_t r = 0; r < n; r++) {
                                        double ref, bound;
                                        if (!qb_f32_within(wd, k, x, ldx, y0, ldy, acc, i, r, y[i * ldy + r], &ref,
                                                           &bound)) {
                                            NUMLA_ASSERT_MSG(0, "%s %s N=%lld K=%lld M=%lld acc=%d th=%d row %lld,%lld: %g vs %g (bound %g)",
                                                             info->name, numla_isa_name(isas[il]), (long long)n,
                                                             (long long)k, (long long)m, acc, th, (long long)i,
                                                             (long long)r, y[i * ldy + r], ref, bound);
                                            i = m;
                                            break;
                                        }
                                    }
                                /* the padding between rows is left alone */
                                for (int64_t i = 0; i < M; i++)
                                    for (int64_t r = (i < m ? n : 0); r < ldy; r++)
                                        CU_ASSERT_EQUAL(y[i * ldy + r], y0[i * ldy + r]);
                                if (!yfirst) {
                                    yfirst = malloc((size_t)(M * ldy) * sizeof *yfirst);
                                    memcpy(yfirst, y, (size_t)(M * ldy) * sizeof *y);
                                } else {
                                    CU_ASSERT_EQUAL(memcmp(yfirst, y, (size_t)(M * ldy) * sizeof *y), 0);
                                }
                            }
                            /* row i of an M-row call has the bits of a 1-row call on row i */
                            for (int64_t i = 0; i < m; i++) {
                                memcpy(y, y0, (size_t)(M * ldy) * sizeof *y);
                                CU_ASSERT_EQUAL(numla_qblock_forward(isas[il], &w, 1, x + i * ldx, ldx, y + i * ldy,
                                                                     ldy, acc, NULL, 0),
                                                NUMLA_STATUS_OK);
                                CU_ASSERT_EQUAL(memcmp(y + i * ldy, yfirst + i * ldy, (size_t)n * sizeof *y), 0);
                            }
                            free(yfirst);
                            checked++;
                        }
                /* the many-row path needs its workspace */
                if (ws1)
                    CU_ASSERT_EQUAL(numla_qblock_forward(NUMLA_ISA_REF, &w, M, x, ldx, y, ldy, 0, ws, ws1 - 1),
                                    NUMLA_STATUS_INVALID_ARG);
                free(ws);
                free(x);
                free(y);
                free(y0);
                free(wd);
                free(dst);
                free(src);
            }
    }
    omp_set_num_threads(2);
    CU_ASSERT(checked > 0);
    /* the levels this CPU runs natively are reached */
    for (int il = 0; il < nisa; il++)
        if (isas[il] >= NUMLA_ISA_AVX512)
            CU_ASSERT_EQUAL(numla_qblock_level(isas[il], NUMLA_QBLOCK_Q4_K, NUMLA_QBLOCK_ACT_F32), NUMLA_ISA_AVX512);
    /* the avx2 level runs F32 mode for every type (Q4_1 at the levels above too) */
    for (int t = 0; t < NUMLA_QBLOCK_TYPE_COUNT; t++)
        CU_ASSERT_EQUAL(numla_qblock_level(NUMLA_ISA_AVX2, (numla_qblock_type)t, NUMLA_QBLOCK_ACT_F32), NUMLA_ISA_AVX2);
    CU_ASSERT_EQUAL(numla_qblock_level(NUMLA_ISA_AMX, NUMLA_QBLOCK_Q4_1, NUMLA_QBLOCK_ACT_F32), NUMLA_ISA_AVX2);
}

/* Up to NUMLA_LINEAR_ROW_INVARIANT_M rows a row keeps its one-row bits (kernels/qblock.h; a
 * speculative verify step's rows, docs/speculative.md): every type, in both modes and the layout
 * the engine packs for each level (numla_qblock_layout_for), every level, M = 2..12, each row
 * of the M-row call against a one-row call on that row alone. N = 40 and K = 512 let every
 * multi-row path take the call. The one exception: F32 mode on AMX-BF16 tiles (MXFP4 at the amx
 * level), from NUMLA_QBLOCK_AMX_F32_MIN_M rows, where numla_qblock_row_invariant_m says so (the
 * engine splits a verify step's rows into calls of at most that many). */
static void test_row_invariant_m(void)
{
    enum { MMAX = NUMLA_LINEAR_ROW_INVARIANT_M, N = 40, K = 512 };
    CU_ASSERT(NUMLA_QBLOCK_AMX_F32_MIN_M >= 8);
    numla_isa isas[NUMLA_ISA_COUNT];
    const int nisa = numla_test_isas(isas);
    numla_test_rng rng = {1212};
    const int64_t ldx = K + 3, ldy = N + 2;
    float *x = malloc((size_t)(MMAX * ldx) * sizeof *x), *y = malloc((size_t)(MMAX * ldy) * sizeof *y);
    float *y1 = malloc((size_t)ldy * sizeof *y1);
    CU_ASSERT_FATAL(x && y && y1);
    for (int64_t i = 0; i < MMAX * ldx; i++)
        x[i] = (float)numla_test_rng_normal(&rng);
    int checked = 0, bad = 0;
    for (int t = 0; t < NUMLA_QBLOCK_TYPE_COUNT; t++) {
        int64_t rb;
        uint8_t *src = qb_random((numla_qblock_type)t, N, K, &rng, &rb);
        for (int act = 0; act < NUMLA_QBLOCK_ACT_COUNT; act++) {
            if (act == NUMLA_QBLOCK_ACT_Q8 && !numla_qblock_q8_takes((numla_qblock_type)t, K))
                continue;
            for (int il = 0; il < nisa; il++) {
                const numla_qblock_layout lay =
                    numla_qblock_layout_for(isas[il], (numla_qblock_type)t, (numla_qblock_act)act, K);
                const size_t bytes = numla_qblock_layout_size((numla_qblock_type)t, lay, N, K);
                CU_ASSERT_FATAL(bytes > 0);
                void *dst = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
                numla_qblock_weight w;
                numla_qblock_source s = {.type = (numla_qblock_type)t, .n = N, .k = K, .data = src, .ld = rb,
                                         .act = (numla_qblock_act)act, .layout = lay};
                CU_ASSERT_FATAL(dst != NULL);
                CU_ASSERT_EQUAL_FATAL(numla_qblock_pack(&s, dst, &w), NUMLA_STATUS_OK);
                const size_t wsb = numla_qblock_workspace_size(&w, MMAX, omp_get_max_threads());
                void *ws = malloc(wsb ? wsb : 1);
                CU_ASSERT_FATAL(ws != NULL);
                const int tiles = act == NUMLA_QBLOCK_ACT_F32 && isas[il] >= NUMLA_ISA_AMX &&
                                  numla_qblock_amx_f32_applies_(&w, NUMLA_QBLOCK_AMX_F32_MIN_M);
                /* the calls the engine splits a verify step's rows into keep one-row bits */
                const int64_t mmax = numla_qblock_row_invariant_m(isas[il], &w);
                CU_ASSERT_EQUAL(mmax, tiles ? NUMLA_QBLOCK_AMX_F32_MIN_M - 1 : MMAX);
                for (int64_t m = 2; m <= mmax; m++) {
                    CU_ASSERT_EQUAL(numla_qblock_forward(isas[il], &w, m, x, ldx, y, ldy, 0, ws, wsb),
                                    NUMLA_STATUS_OK);
                    for (int64_t i = 0; i < m; i++) {
                        CU_ASSERT_EQUAL(numla_qblock_forward(isas[il], &w, 1, x + i * ldx, ldx, y1, ldy, 0, ws, wsb),
                                        NUMLA_STATUS_OK);
                        if (memcmp(y1, y + i * ldy, (size_t)N * sizeof *y) != 0 && bad++ < 3)
                            NUMLA_ASSERT_MSG(0, "%s %s mode, level %s (%s runs it): row %lld of %lld rows differs "
                                             "from its one-row call", numla_qblock_info_get((numla_qblock_type)t)->name,
                                             act ? "Q8" : "F32", numla_isa_name(isas[il]),
                                             numla_isa_name(numla_qblock_level(isas[il], (numla_qblock_type)t,
                                                                               (numla_qblock_act)act)),
                                             (long long)i, (long long)m);
                    }
                    checked++;
                }
                free(ws);
                free(dst);
            }
        }
        free(src);
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(checked > 0);
    free(x);
    free(y);
    free(y1);
}

/* Q8 activation mode: every level against W x̃ in double, x̃ quantized here by the rule of
 * kernels/qblock.h (rintf: round half to even in the default mode); the M and thread invariance;
 * and the reference's Q8 output within the quantization error of its F32 output. */
static void test_forward_q8(void)
{
    numla_isa isas[NUMLA_ISA_COUNT];
    const int nisa = numla_test_isas(isas);
    numla_test_rng rng = {777};
    static const int64_t ns[] = {1, 5, 20};
    static const int64_t ks[] = {256, 1280};
    static const int64_t ms[] = {1, 2, 4};
    int vnni_seen = 0, avx2_seen = 0;
    for (int t = 0; t < NUMLA_QBLOCK_TYPE_COUNT; t++)
        for (int in = 0; in < 3; in++)
            for (int ik = 0; ik < 2; ik++) {
                const numla_qblock_type type = (numla_qblock_type)t;
                const int64_t n = ns[in], k = ks[ik], M = 4, ldx = k + 5, ldy = n + 1;
                int64_t rb;
                uint8_t *src = qb_random(type, n, k, &rng, &rb);
                const size_t bytes = numla_qblock_packed_size(type, n, k);
                void *d8 = aligned_alloc(64, bytes), *d32 = aligned_alloc(64, bytes);
                numla_qblock_weight w8, w32;
                numla_qblock_source s = {.type = type, .n = n, .k = k, .data = src, .ld = rb, .act = NUMLA_QBLOCK_ACT_Q8};
                CU_ASSERT_EQUAL_FATAL(numla_qblock_pack(&s, d8, &w8), NUMLA_STATUS_OK);
                s.act = NUMLA_QBLOCK_ACT_F32;
                CU_ASSERT_EQUAL_FATAL(numla_qblock_pack(&s, d32, &w32), NUMLA_STATUS_OK);
                float *wd = malloc((size_t)(n * k) * sizeof *wd);
                numla_qblock_dequant_ref(type, src, n * k, wd);
                /* 32-element group maxima of |w| */
                float *wmax = malloc((size_t)(n * k / 32) * sizeof *wmax);
                for (int64_t g = 0; g < n * k / 32; g++) {
                    wmax[g] = 0.0f;
                    for (int j = 0; j < 32; j++)
                        wmax[g] = fmaxf(wmax[g], fabsf(wd[32 * g + j]));
                }
                float *x = malloc((size_t)(M * ldx) * sizeof *x), *xt = malloc((size_t)(M * k) * sizeof *xt);
                for (int64_t i = 0; i < M * ldx; i++)
                    x[i] = (float)numla_test_rng_normal(&rng) * (i % 7 == 0 ? 3.0f : 1.0f);
                for (int64_t i = 0; i < M; i++)
                    for (int64_t b = 0; b < k / 256; b++) {
                        const float *xb = x + i * ldx + 256 * b;
                        float amax = 0.0f;
                        for (int j = 0; j < 256; j++)
                            amax = fmaxf(amax, fabsf(xb[j]));
                        const float dx = amax / 127.0f, inv = 127.0f / amax;
                        for (int j = 0; j < 256; j++)
                            xt[i * k + 256 * b + j] = dx * rintf(xb[j] * inv);
                    }
                float *y = malloc((size_t)(M * ldy) * sizeof *y), *y0 = malloc((size_t)(M * ldy) * sizeof *y0);
                float *yf = malloc((size_t)(M * ldy) * sizeof *yf), *yfirst = malloc((size_t)(M * ldy) * sizeof *yfirst);
                for (int64_t i = 0; i < M * ldy; i++)
                    y0[i] = (float)numla_test_rng_normal(&rng);
                const size_t wsb = numla_qblock_workspace_size(&w8, M, 3);
                void *ws = malloc(wsb);
                for (int il = 0; il < nisa; il++) {
                    if (numla_qblock_level(isas[il], type, NUMLA_QBLOCK_ACT_Q8) == NUMLA_ISA_AVX512)
                        vnni_seen |= 1 << t;
                    if (numla_qblock_level(isas[il], type, NUMLA_QBLOCK_ACT_Q8) == NUMLA_ISA_AVX2)
                        avx2_seen |= 1 << t;
                    for (int im = 0; im < 3; im++)
                        for (int acc = 0; acc < 2; acc++) {
                            const int64_t m = ms[im];
                            for (int th = 1; th <= 3; th += 2) {
                                omp_set_num_threads(th);
                                memcpy(y, y0, (size_t)(M * ldy) * sizeof *y);
                                CU_ASSERT_EQUAL(numla_qblock_forward(isas[il], &w8, m, x, ldx, y, ldy, acc, ws, wsb),
                                                NUMLA_STATUS_OK);
                                if (th == 1)
                                    memcpy(yfirst, y, (size_t)(M * ldy) * sizeof *y);
                                else
                                    CU_ASSERT_EQUAL(memcmp(yfirst, y, (size_t)(M * ldy) * sizeof *y), 0);
                            }
                            int bad = 0;
                            for (int64_t i = 0; i < m && !bad; i++)
                                for (int64_t r = 0; r < n && !bad; r++) {
                                    double ref = acc ? y0[i * ldy + r] : 0.0, mag = fabs(ref);
                                    for (int64_t c = 0; c < k; c++) {
                                        ref += (double)wd[r * k + c] * xt[i * k + c];
                                        mag += (fabs(wd[r * k + c]) + 4.0 * wmax[(r * k + c) / 32]) * fabs(xt[i * k + c]);
                                    }
                                    const double err = fabs(y[i * ldy + r] - ref),
                                                 bound = (double)(k + 8) * ldexp(1.0, -24) * mag;
                                    if (!(err <= bound)) {
                                        bad = 1;
                                        NUMLA_ASSERT_MSG(0, "%s q8 %s N=%lld K=%lld M=%lld acc=%d row %lld,%lld: %g vs %g (bound %g)",
                                                         numla_qblock_info_get(type)->name, numla_isa_name(isas[il]),
                                                         (long long)n, (long long)k, (long long)m, acc, (long long)i,
                                                         (long long)r, y[i * ldy + r], ref, bound);
                                    }
                                }
                            /* the quantization error against the F32 mode on the same weights */
                            if (isas[il] == NUMLA_ISA_REF && acc == 0) {
                                const size_t wsf = numla_qblock_workspace_size(&w32, m, 1);
                                void *wf = malloc(wsf ? wsf : 1);
                                CU_ASSERT_EQUAL(numla_qblock_forward(NUMLA_ISA_REF, &w32, m, x, ldx, yf, ldy, 0, wf, wsf),
                                                NUMLA_STATUS_OK);
                                free(wf);
                                for (int64_t i = 0; i < m; i++)
                                    for (int64_t r = 0; r < n; r++) {
                                        double qerr = 0.0, mag = 0.0;
                                        for (int64_t c = 0; c < k; c++) {
                                            qerr += fabs(wd[r * k + c]) * fabs(xt[i * k + c] - x[i * ldx + c]);
                                            mag += fabs(wd[r * k + c]) * (fabs(x[i * ldx + c]) + fabs(xt[i * k + c]));
                                        }
                                        CU_ASSERT(fabs(y[i * ldy + r] - yf[i * ldy + r]) <=
                                                  qerr + (double)(k + 8) * ldexp(1.0, -24) * mag);
                                    }
                            }
                            /* row i alone has the bits of row i in the batch */
                            for (int64_t i = 0; i < m; i++) {
                                memcpy(y, y0, (size_t)(M * ldy) * sizeof *y);
                                CU_ASSERT_EQUAL(numla_qblock_forward(isas[il], &w8, 1, x + i * ldx, ldx, y + i * ldy,
                                                                     ldy, acc, ws, wsb),
                                                NUMLA_STATUS_OK);
                                CU_ASSERT_EQUAL(memcmp(y + i * ldy, yfirst + i * ldy, (size_t)n * sizeof *y), 0);
                            }
                        }
                }
                free(ws);
                free(y);
                free(y0);
                free(yf);
                free(yfirst);
                free(x);
                free(xt);
                free(wmax);
                free(wd);
                free(d8);
                free(d32);
                free(src);
            }
    omp_set_num_threads(2);
    /* with VNNI every type whose row names Q8 kernels runs them, and each was run above */
    if (numla_isa_supported(NUMLA_ISA_AVX512) && numla_qblock_level(NUMLA_ISA_AVX512, NUMLA_QBLOCK_Q4_K, NUMLA_QBLOCK_ACT_Q8) == NUMLA_ISA_AVX512) {
        int no_q8 = 0;
        for (int t = 0; t < NUMLA_QBLOCK_TYPE_COUNT; t++)
            no_q8 |= !numla_qblock_type_row_q8_vnni(numla_qblock_type_row_get((numla_qblock_type)t)) << t;
        CU_ASSERT_EQUAL(vnni_seen, ((1 << NUMLA_QBLOCK_TYPE_COUNT) - 1) & ~no_q8);
        for (int t = 0; t < NUMLA_QBLOCK_TYPE_COUNT; t++)
            CU_ASSERT_EQUAL(numla_qblock_level(NUMLA_ISA_AVX512, (numla_qblock_type)t, NUMLA_QBLOCK_ACT_Q8),
                            (no_q8 >> t) & 1 ? NUMLA_ISA_REF : NUMLA_ISA_AVX512);
    }
    /* the avx2 level runs Q8 mode for every type whose row names its kernel (Q4_1: the reference),
     * and each was run above where the CPU has AVX2 */
    int avx2_types = 0;
    for (int t = 0; t < NUMLA_QBLOCK_TYPE_COUNT; t++) {
        const int has = numla_qblock_type_row_get((numla_qblock_type)t)->q8_avx2 != NULL;
        avx2_types |= has << t;
        CU_ASSERT_EQUAL(numla_qblock_level(NUMLA_ISA_AVX2, (numla_qblock_type)t, NUMLA_QBLOCK_ACT_Q8),
                        has ? NUMLA_ISA_AVX2 : NUMLA_ISA_REF);
    }
    CU_ASSERT_EQUAL(numla_qblock_level(NUMLA_ISA_AVX2, NUMLA_QBLOCK_Q5_K, NUMLA_QBLOCK_ACT_Q8), NUMLA_ISA_AVX2);
    CU_ASSERT_EQUAL(numla_qblock_level(NUMLA_ISA_AVX2, NUMLA_QBLOCK_Q4_1, NUMLA_QBLOCK_ACT_Q8), NUMLA_ISA_REF);
    CU_ASSERT_EQUAL(numla_qblock_act_for(NUMLA_ISA_AVX2, NUMLA_QBLOCK_Q4_K, 2048), NUMLA_QBLOCK_ACT_Q8);
    CU_ASSERT_EQUAL(numla_qblock_layout_for(NUMLA_ISA_AVX2, NUMLA_QBLOCK_Q4_K, NUMLA_QBLOCK_ACT_Q8, 2048),
                    NUMLA_QBLOCK_LAYOUT_ROWS);
    if (numla_isa_supported(NUMLA_ISA_AVX2))
        CU_ASSERT_EQUAL(avx2_seen & avx2_types, avx2_types);
}

/* Q8 mode on extreme codes, where an int16 pair sum of vpmaddubsw (the avx2 level) or any
 * narrower intermediate would saturate if the kernel let it: every code byte (and scale byte)
 * drawn from 0x00, 0xff, 0x80, 0x7f, 0x0f, 0xf0 (Q8_0's -128 and 127, the largest nibbles, all
 * high bits set, the most negative Q6_K scale), x whose codes are all +-127 (|x| equal, signs
 * random, or all negative), M = 1 .. 6; every level against W x̃ in double (the bound of
 * test_forward_q8), each row with the bits of the row alone. */
static void test_forward_q8_extreme(void)
{
    numla_isa isas[NUMLA_ISA_COUNT];
    const int nisa = numla_test_isas(isas);
    numla_test_rng rng = {12701};
    static const uint8_t ext[] = {0x00, 0xff, 0x80, 0x7f, 0x0f, 0xf0};
    int checked = 0;
    for (int t = 0; t < NUMLA_QBLOCK_TYPE_COUNT; t++) {
        const numla_qblock_type type = (numla_qblock_type)t;
        const numla_qblock_info *info = numla_qblock_info_get(type);
        const numla_qblock_type_row *trow = numla_qblock_type_row_get(type);
        if (!trow->q8_group)
            continue;
        const int64_t n = 9, k = info->block == 32 ? 544 : 512, M = 6, ldx = k, ldy = n;
        for (int pattern = 0; pattern < 3; pattern++) {
            int64_t rb;
            uint8_t *src = qb_random(type, n, k, &rng, &rb);
            int off[2];
            const int nh = qb_halves(type, off);
            for (int64_t b = 0; b < n * k / info->block; b++)
                for (int j = 0; j < info->bytes; j++) {
                    int scale = trow->e8m0 && j == 0;
                    for (int h = 0; h < nh; h++)
                        scale |= j == off[h] || j == off[h] + 1;
                    if (!scale) /* pattern 0: all 0xff; 1: all 0x80; 2: mixed */
                        src[b * info->bytes + j] =
                            pattern == 0 ? 0xff : pattern == 1 ? 0x80 : ext[numla_test_rng_u64(&rng) % 6];
                }
            void *d8 = aligned_alloc(64, numla_qblock_packed_size(type, n, k));
            numla_qblock_weight w;
            numla_qblock_source s = {.type = type, .n = n, .k = k, .data = src, .ld = rb, .act = NUMLA_QBLOCK_ACT_Q8};
            CU_ASSERT_EQUAL_FATAL(numla_qblock_pack(&s, d8, &w), NUMLA_STATUS_OK);
            float *wd = malloc((size_t)(n * k) * sizeof *wd);
            numla_qblock_dequant_ref(type, src, n * k, wd);
            /* x = +-1: every code +-127, dx = 1/127; pattern 1 (Q8_0's -128) all -1, so every
             * product is +128 · 127 */
            float *x = malloc((size_t)(M * ldx) * sizeof *x);
            for (int64_t i = 0; i < M * ldx; i++)
                x[i] = pattern == 1 || (numla_test_rng_u64(&rng) & 1) ? -1.0f : 1.0f;
            float *y = malloc((size_t)(M * ldy) * sizeof *y), *y1 = malloc((size_t)ldy * sizeof *y1);
            const size_t wsb = numla_qblock_workspace_size(&w, M, 3);
            void *ws = malloc(wsb);
            for (int il = 0; il < nisa; il++) {
                if (numla_qblock_level(isas[il], type, NUMLA_QBLOCK_ACT_Q8) != isas[il])
                    continue;
                for (int64_t m = 1; m <= M; m++) {
                    omp_set_num_threads(m % 2 ? 1 : 3);
                    CU_ASSERT_EQUAL(numla_qblock_forward(isas[il], &w, m, x, ldx, y, ldy, 0, ws, wsb), NUMLA_STATUS_OK);
                    int bad = 0;
                    for (int64_t i = 0; i < m && !bad; i++) {
                        CU_ASSERT_EQUAL(numla_qblock_forward(isas[il], &w, 1, x + i * ldx, ldx, y1, ldy, 0, ws, wsb),
                                        NUMLA_STATUS_OK);
                        if (memcmp(y1, y + i * ldy, (size_t)n * sizeof *y1)) {
                            bad = 1;
                            NUMLA_ASSERT_MSG(0, "%s extreme %d %s M=%lld: row %lld differs from the row alone",
                                             info->name, pattern, numla_isa_name(isas[il]), (long long)m, (long long)i);
                        }
                        for (int64_t r = 0; r < n && !bad; r++) {
                            double ref = 0.0, mag = 0.0;
                            float wmax = 0.0f;
                            for (int64_t c = 0; c < k; c++) {
                                if (c % 32 == 0) {
                                    wmax = 0.0f;
                                    for (int jj = 0; jj < 32; jj++)
                                        wmax = fmaxf(wmax, fabsf(wd[r * k + c + jj]));
                                }
                                const double xt = (double)(1.0f / 127.0f) * 127.0 * (x[i * ldx + c] < 0 ? -1.0 : 1.0);
                                ref += (double)wd[r * k + c] * xt;
                                mag += (fabs(wd[r * k + c]) + 4.0 * wmax) * fabs(xt);
                            }
                            const double err = fabs(y[i * ldy + r] - ref), bound = (double)(k + 8) * ldexp(1.0, -24) * mag;
                            if (!(err <= bound)) {
                                bad = 1;
                                NUMLA_ASSERT_MSG(0, "%s extreme %d %s M=%lld row %lld,%lld: %g vs %g (bound %g)",
                                                 info->name, pattern, numla_isa_name(isas[il]), (long long)m,
                                                 (long long)i, (long long)r, y[i * ldy + r], ref, bound);
                            }
                        }
                    }
                    checked++;
                }
            }
            omp_set_num_threads(2);
            free(ws);
            free(y1);
            free(y);
            free(x);
            free(wd);
            free(d8);
            free(src);
        }
    }
    CU_ASSERT(checked > 0);
}

/* Q8 mode with many x rows (the vnni level's register tiles of x rows, kernels/x86/
 * qblock_gemm_avx512vnni.c, and the 1-row kernels below its threshold): at M = 1, 2, 5, 17 and
 * 64 (whole tiles, partial tiles, both), odd N (one shape spans several of a thread's row
 * chunks), 1 and 3 threads, accumulate or not (Q4_K from NUMLA_QBLOCK_PANEL_MIN_M rows: the panel
 * GEMM of kernels/x86/qblock_panel_avx512vnni.c, whose rows are compared with another panel
 * call instead of the row alone): every output row has the bits of that x row run
 * alone, and is within the header's bound of W x̃ in double. */
static void test_forward_q8_many(void)
{
    numla_isa isas[NUMLA_ISA_COUNT];
    const int nisa = numla_test_isas(isas);
    numla_test_rng rng = {4242};
    static const int64_t ms[] = {1, 2, 5, 17, 64};
    static const struct {
        int64_t n, k;
    } shapes[] = {{7, 512}, {37, 1280}, {301, 1280}, {19, 1408}, {5, 96}};
    unsigned kept = 0; /* the (M, threads, acc) cases of the sweep, one in 3 by default, 7 lean */
    for (int t = 0; t < NUMLA_QBLOCK_TYPE_COUNT; t++)
        for (int sh = 0; sh < 5; sh++) {
            const numla_qblock_type type = (numla_qblock_type)t;
            const int64_t n = shapes[sh].n, k = shapes[sh].k, M = 64, ldx = k + 3, ldy = n + 2;
            if (!numla_qblock_q8_takes(type, k))
                continue; /* K not a multiple of 256: Q5_0 and IQ4_NL only */
            int64_t rb;
            uint8_t *src = qb_random(type, n, k, &rng, &rb);
            void *d8 = aligned_alloc(64, numla_qblock_packed_size(type, n, k));
            numla_qblock_weight w;
            numla_qblock_source s = {.type = type, .n = n, .k = k, .data = src, .ld = rb, .act = NUMLA_QBLOCK_ACT_Q8};
            CU_ASSERT_EQUAL_FATAL(numla_qblock_pack(&s, d8, &w), NUMLA_STATUS_OK);
            float *wd = malloc((size_t)(n * k) * sizeof *wd);
            numla_qblock_dequant_ref(type, src, n * k, wd);
            float *wmax = malloc((size_t)(n * k / 32) * sizeof *wmax);
            for (int64_t g = 0; g < n * k / 32; g++) {
                wmax[g] = 0.0f;
                for (int j = 0; j < 32; j++)
                    wmax[g] = fmaxf(wmax[g], fabsf(wd[32 * g + j]));
            }
            float *x = malloc((size_t)(M * ldx) * sizeof *x), *xt = malloc((size_t)(M * k) * sizeof *xt);
            for (int64_t i = 0; i < M * ldx; i++)
                x[i] = (float)numla_test_rng_normal(&rng) * (i % 5 == 0 ? 4.0f : 1.0f);
            /* groups of 256 columns, the last one K mod 256 where K is not a multiple */
            for (int64_t i = 0; i < M; i++)
                for (int64_t b = 0; 256 * b < k; b++) {
                    const int len = k - 256 * b < 256 ? (int)(k - 256 * b) : 256;
                    const float *xb = x + i * ldx + 256 * b;
                    float amax = 0.0f;
                    for (int j = 0; j < len; j++)
                        amax = fmaxf(amax, fabsf(xb[j]));
                    const float dx = amax / 127.0f, inv = 127.0f / amax;
                    for (int j = 0; j < len; j++)
                        xt[i * k + 256 * b + j] = dx * rintf(xb[j] * inv);
                }
            float *y = malloc((size_t)(M * ldy) * sizeof *y), *y0 = malloc((size_t)(M * ldy) * sizeof *y0);
            float *y1 = malloc((size_t)ldy * sizeof *y1);
            for (int64_t i = 0; i < M * ldy; i++)
                y0[i] = (float)numla_test_rng_normal(&rng);
            const size_t wsb = numla_qblock_workspace_size(&w, M, 3);
            void *ws = malloc(wsb);
            for (int il = 0; il < nisa; il++) {
                if (isas[il] == NUMLA_ISA_REF && n * k > 20000)
                    continue; /* the reference, on the small shapes only */
                if (numla_qblock_level(isas[il], type, NUMLA_QBLOCK_ACT_Q8) != isas[il])
                    continue; /* a level that inherits runs the same code as the one below */
                for (int im = 0; im < 5; im++)
                    for (int th = 1; th <= 3; th += 2)
                        for (int acc = 0; acc < 2; acc++) {
                            if (!numla_test_sweep_keep(&kept, 3))
                                continue; /* every case under NUMLA_TEST_SWEEP=full */
                            const int64_t m = ms[im];
                            omp_set_num_threads(th);
                            memcpy(y, y0, (size_t)(M * ldy) * sizeof *y);
                            CU_ASSERT_EQUAL(numla_qblock_forward(isas[il], &w, m, x, ldx, y, ldy, acc, ws, wsb),
                                            NUMLA_STATUS_OK);
                            int bad = 0;
                            /* Q4_K's panel GEMM (from NUMLA_QBLOCK_PANEL_MIN_M rows) sums in another
                             * order than the 1-row kernel: there a row must have the bits it has
                             * in any other panel call (PANEL_MIN_M rows from near it, one thread) */
                            const int panel = numla_qblock_panel_applies_(&w, m) &&
                                              numla_qblock_level(isas[il], type, NUMLA_QBLOCK_ACT_Q8) != NUMLA_ISA_REF;
                            for (int64_t i = 0; i < m && !bad; i++) {
                                const int64_t i0 = panel ? (i + NUMLA_QBLOCK_PANEL_MIN_M <= M ? i : M - NUMLA_QBLOCK_PANEL_MIN_M) : i;
                                const int64_t mm = panel ? NUMLA_QBLOCK_PANEL_MIN_M : 1;
                                float *ya = malloc((size_t)(mm * ldy) * sizeof *ya);
                                for (int64_t j = 0; j < mm; j++)
                                    memcpy(ya + j * ldy, y0 + (i0 + j) * ldy, (size_t)ldy * sizeof *ya);
                                const int th_was = omp_get_max_threads();
                                omp_set_num_threads(1);
                                CU_ASSERT_EQUAL(numla_qblock_forward(isas[il], &w, mm, x + i0 * ldx, ldx, ya, ldy, acc,
                                                                     ws, wsb),
                                                NUMLA_STATUS_OK);
                                omp_set_num_threads(th_was);
                                memcpy(y1, ya + (i - i0) * ldy, (size_t)ldy * sizeof *y1);
                                free(ya);
                                if (memcmp(y1, y + i * ldy, (size_t)n * sizeof *y1) != 0) {
                                    bad = 1;
                                    NUMLA_ASSERT_MSG(0, "%s q8 %s N=%lld K=%lld M=%lld th=%d acc=%d: row %lld differs "
                                                     "from the row alone (or in another panel call)", numla_qblock_info_get(type)->name,
                                                     numla_isa_name(isas[il]), (long long)n, (long long)k,
                                                     (long long)m, th, acc, (long long)i);
                                }
                                for (int64_t r = 0; r < n && !bad; r++) {
                                    double ref = acc ? y0[i * ldy + r] : 0.0, mag = fabs(ref);
                                    for (int64_t c = 0; c < k; c++) {
                                        ref += (double)wd[r * k + c] * xt[i * k + c];
                                        mag += (fabs(wd[r * k + c]) + 4.0 * wmax[(r * k + c) / 32]) * fabs(xt[i * k + c]);
                                    }
                                    const double err = fabs(y[i * ldy + r] - ref),
                                                 bound = (double)(k + 8) * ldexp(1.0, -24) * mag;
                                    if (!(err <= bound)) {
                                        bad = 1;
                                        NUMLA_ASSERT_MSG(0, "%s q8 %s N=%lld K=%lld M=%lld th=%d acc=%d row %lld,%lld: "
                                                         "%g vs %g (bound %g)", numla_qblock_info_get(type)->name,
                                                         numla_isa_name(isas[il]), (long long)n, (long long)k,
                                                         (long long)m, th, acc, (long long)i, (long long)r,
                                                         y[i * ldy + r], ref, bound);
                                    }
                                }
                            }
                            /* rows past m and columns past n untouched */
                            for (int64_t i = 0; i < M; i++)
                                for (int64_t r = i < m ? n : 0; r < ldy; r++)
                                    if (y[i * ldy + r] != y0[i * ldy + r] && !bad) {
                                        bad = 1;
                                        NUMLA_ASSERT_MSG(0, "%s q8 M=%lld wrote y[%lld][%lld] outside the output",
                                                         numla_qblock_info_get(type)->name, (long long)m,
                                                         (long long)i, (long long)r);
                                    }
                        }
            }
            omp_set_num_threads(2);
            free(ws);
            free(y1);
            free(y);
            free(y0);
            free(x);
            free(xt);
            free(wmax);
            free(wd);
            free(d8);
            free(src);
        }
}

/* The PANEL16 layout (kernels/qblock.h) of Q4_K, Q6_K, IQ4_XS, Q5_0, IQ4_NL and Q8_0 in Q8 mode
 * (K of 64 and 1408 for the 32-element types: a last quantization group of K mod 256): every
 * row's blocks come back byte for byte; the reference gives the ROWS layout's bits on it; at the
 * vnni level a row has the same bits at every M, on 1 and 3 threads (below
 * NUMLA_QBLOCK_PANEL_MIN_M the stored panels run straight, from it the panel GEMM unpacks them),
 * and from PANEL_MIN_M rows the bits of the ROWS layout's panel GEMM (bounded against W x̃ in
 * test_forward_q8_many), which ties the small-M kernel to a bounded result; Q6_K, which has no
 * panel GEMM, within both rounding bounds of ROWS at every M; layout choice and argument checks. */
static void test_panel16(void)
{
    numla_isa isas[NUMLA_ISA_COUNT];
    const int nisa = numla_test_isas(isas);
    numla_test_rng rng = {1616};
    static const int64_t ns[] = {1, 16, 37, 301};
    static const int64_t ks[] = {64, 256, 1280, 1408};
    static const int64_t ms[] = {1, 2, 3, 4, 5, 7, 15, 16, 17, 33};
    const numla_qblock_type types[] = {NUMLA_QBLOCK_Q4_K, NUMLA_QBLOCK_IQ4_XS, NUMLA_QBLOCK_Q5_0,
                                       NUMLA_QBLOCK_IQ4_NL, NUMLA_QBLOCK_Q8_0, NUMLA_QBLOCK_Q6_K, NUMLA_QBLOCK_Q4_0,
                                       NUMLA_QBLOCK_Q2_K, NUMLA_QBLOCK_Q3_K, NUMLA_QBLOCK_Q5_K, NUMLA_QBLOCK_Q5_1};
    int vnni_runs = 0;
    unsigned kept = 0; /* the (M, threads) cases of the sweep, one in 3 by default, 7 lean */
    for (int t = 0; t < 11; t++)
        for (int in = 0; in < 4; in++)
            for (int ik = 0; ik < 4; ik++) {
                const numla_qblock_type type = types[t];
                const int64_t n = ns[in], k = ks[ik], M = 33, ldx = k + 1, ldy = n + 3;
                if (!numla_qblock_layout_size(type, NUMLA_QBLOCK_LAYOUT_PANEL16, n, k) || !numla_qblock_q8_takes(type, k))
                    continue; /* K-quants and Q4_0: K a multiple of 256; the other 32-element types: of 64 */
                int64_t rb;
                uint8_t *src = qb_random(type, n, k, &rng, &rb);
                const size_t pb = numla_qblock_layout_size(type, NUMLA_QBLOCK_LAYOUT_PANEL16, n, k);
                CU_ASSERT_EQUAL_FATAL(pb, (size_t)((n + 15) / 16) * (size_t)numla_qblock_p16_ld_(type, k));
                /* (Q6_K's panels are the file's bytes: their size need not be a multiple of 64) */
                void *dr = aligned_alloc(64, numla_qblock_packed_size(type, n, k));
                void *dp = aligned_alloc(64, (pb + 63) & ~(size_t)63);
                numla_qblock_weight wr, wp;
                numla_qblock_source s = {.type = type, .n = n, .k = k, .data = src, .ld = rb, .act = NUMLA_QBLOCK_ACT_Q8};
                CU_ASSERT_EQUAL_FATAL(numla_qblock_pack(&s, dr, &wr), NUMLA_STATUS_OK);
                s.layout = NUMLA_QBLOCK_LAYOUT_PANEL16;
                CU_ASSERT_EQUAL_FATAL(numla_qblock_pack(&s, dp, &wp), NUMLA_STATUS_OK);
                CU_ASSERT_EQUAL(wp.layout, NUMLA_QBLOCK_LAYOUT_PANEL16);
                uint8_t *row = malloc((size_t)rb);
                for (int64_t r = 0; r < n; r++) {
                    CU_ASSERT_EQUAL(numla_qblock_row_blocks(&wp, r, row), NUMLA_STATUS_OK);
                    CU_ASSERT_EQUAL(memcmp(row, src + r * rb, (size_t)rb), 0);
                }
                CU_ASSERT_EQUAL(numla_qblock_row_blocks(&wp, n, row), NUMLA_STATUS_INVALID_ARG);
                free(row);
                float *x = malloc((size_t)(M * ldx) * sizeof *x);
                for (int64_t i = 0; i < M * ldx; i++)
                    x[i] = (float)numla_test_rng_normal(&rng) * (i % 9 == 0 ? 5.0f : 1.0f);
                float *y0 = malloc((size_t)(M * ldy) * sizeof *y0), *ya = malloc((size_t)(M * ldy) * sizeof *ya);
                float *yb = malloc((size_t)(M * ldy) * sizeof *yb), *y16 = malloc((size_t)(M * ldy) * sizeof *y16);
                for (int64_t i = 0; i < M * ldy; i++)
                    y0[i] = (float)numla_test_rng_normal(&rng);
                const size_t wsb = numla_qblock_workspace_size(&wr, M, 3) > numla_qblock_workspace_size(&wp, M, 3)
                                       ? numla_qblock_workspace_size(&wr, M, 3)
                                       : numla_qblock_workspace_size(&wp, M, 3);
                void *ws = malloc(wsb);
                /* Q6_K has no panel GEMM: its panels run their own kernel at every M, which sums a
                 * block's sub-blocks in int32 and the blocks in fp32 where the ROWS kernels keep 16
                 * lanes; a row differs from ROWS by at most both results' rounding bounds (that of
                 * test_forward_q8_many, against W x̃; mag: the row's Σ |w| |x|, |y0| and a margin
                 * for x's rounding to x̃) */
                double *mag = NULL;
                if (type == NUMLA_QBLOCK_Q6_K) {
                    float *wd = malloc((size_t)(n * k) * sizeof *wd);
                    numla_qblock_dequant_ref(type, src, n * k, wd);
                    mag = malloc((size_t)(M * n) * sizeof *mag);
                    for (int64_t i = 0; i < M; i++)
                        for (int64_t r = 0; r < n; r++) {
                            double sm = fabs(y0[i * ldy + r]);
                            for (int64_t c = 0; c < k; c++)
                                sm += 1.01 * fabs((double)wd[r * k + c] * x[i * ldx + c]);
                            mag[i * n + r] = sm;
                        }
                    free(wd);
                }
                for (int il = 0; il < nisa; il++) {
                    const numla_isa isa = isas[il];
                    const int ref = numla_qblock_level(isa, type, NUMLA_QBLOCK_ACT_Q8) == NUMLA_ISA_REF;
                    if (ref && (isa != NUMLA_ISA_REF || n * k > 40000))
                        continue; /* the reference once, on the smaller shapes */
                    if (numla_qblock_level(isa, type, NUMLA_QBLOCK_ACT_Q8) != isa)
                        continue; /* a level that inherits runs the same code as the one below */
                    vnni_runs += !ref;
                    for (int acc = 0; acc < 2; acc++) {
                        /* the rows of a PANEL_MIN_M-row call at the rows' end, one thread */
                        const int64_t i16 = M - NUMLA_QBLOCK_PANEL_MIN_M;
                        omp_set_num_threads(1);
                        memcpy(y16, y0, (size_t)(M * ldy) * sizeof *y16);
                        CU_ASSERT_EQUAL(numla_qblock_forward(isa, &wp, NUMLA_QBLOCK_PANEL_MIN_M, x + i16 * ldx, ldx,
                                                             y16 + i16 * ldy, ldy, acc, ws, wsb),
                                        NUMLA_STATUS_OK);
                        for (int im = 0; im < 10; im++)
                            for (int th = 1; th <= 3; th += 2) {
                                if (!numla_test_sweep_keep(&kept, 3))
                                    continue; /* every case under NUMLA_TEST_SWEEP=full */
                                const int64_t m = ms[im], i0 = M - m;
                                omp_set_num_threads(th);
                                memcpy(ya, y0, (size_t)(M * ldy) * sizeof *ya);
                                memcpy(yb, y0, (size_t)(M * ldy) * sizeof *yb);
                                CU_ASSERT_EQUAL(numla_qblock_forward(isa, &wp, m, x + i0 * ldx, ldx, ya + i0 * ldy, ldy,
                                                                     acc, ws, wsb),
                                                NUMLA_STATUS_OK);
                                CU_ASSERT_EQUAL(numla_qblock_forward(isa, &wr, m, x + i0 * ldx, ldx, yb + i0 * ldy, ldy,
                                                                     acc, ws, wsb),
                                                NUMLA_STATUS_OK);
                                /* the reference, and the panel GEMM: the ROWS layout's bits */
                                if (mag && !ref)
                                    for (int64_t i = i0; i < M; i++)
                                        for (int64_t r = 0; r < n; r++) {
                                            const double err = fabs((double)ya[i * ldy + r] - yb[i * ldy + r]);
                                            const double bound = 2.0 * (double)(k + 8) * ldexp(1.0, -24) * mag[i * n + r];
                                            if (!(err <= bound)) {
                                                NUMLA_ASSERT_MSG(0, "%s %s N=%lld K=%lld M=%lld th=%d acc=%d [%lld][%lld]: "
                                                                 "panels %g vs rows %g (bound %g)",
                                                                 numla_qblock_info_get(type)->name, numla_isa_name(isa),
                                                                 (long long)n, (long long)k, (long long)m, th, acc,
                                                                 (long long)i, (long long)r, ya[i * ldy + r],
                                                                 yb[i * ldy + r], bound);
                                                i = M;
                                                break;
                                            }
                                        }
                                else if (ref || m >= NUMLA_QBLOCK_PANEL_MIN_M)
                                    NUMLA_ASSERT_MSG(!memcmp(ya, yb, (size_t)(M * ldy) * sizeof *ya),
                                                     "%s %s N=%lld K=%lld M=%lld th=%d acc=%d: panels != rows",
                                                     numla_qblock_info_get(type)->name, numla_isa_name(isa),
                                                     (long long)n, (long long)k, (long long)m, th, acc);
                                /* every row as in the 16-row call; nothing outside the output */
                                for (int64_t i = 0; i < M; i++) {
                                    const int inside = i >= i0;
                                    const float *want = inside && i >= i16 ? y16 + i * ldy : NULL;
                                    if (want && memcmp(ya + i * ldy, want, (size_t)n * sizeof *ya)) {
                                        NUMLA_ASSERT_MSG(0, "%s %s N=%lld K=%lld M=%lld th=%d acc=%d: row %lld differs "
                                                         "from the 16-row call", numla_qblock_info_get(type)->name,
                                                         numla_isa_name(isa), (long long)n, (long long)k, (long long)m,
                                                         th, acc, (long long)i);
                                        break;
                                    }
                                    for (int64_t r = inside ? n : 0; r < ldy; r++)
                                        if (ya[i * ldy + r] != y0[i * ldy + r]) {
                                            NUMLA_ASSERT_MSG(0, "%s M=%lld wrote y[%lld][%lld]",
                                                             numla_qblock_info_get(type)->name, (long long)m,
                                                             (long long)i, (long long)r);
                                            r = ldy;
                                            i = M;
                                        }
                                }
                            }
                    }
                }
                omp_set_num_threads(2);
                free(mag);
                free(ws);
                free(x);
                free(y0);
                free(ya);
                free(yb);
                free(y16);
                free(dr);
                free(dp);
                free(src);
            }
    /* the layout the engine packs: panels where the vnni level runs the type in Q8 mode */
    const int vnni = numla_isa_supported(NUMLA_ISA_AVX512) &&
                     numla_qblock_level(NUMLA_ISA_AVX512, NUMLA_QBLOCK_Q4_K, NUMLA_QBLOCK_ACT_Q8) == NUMLA_ISA_AVX512;
    CU_ASSERT(!vnni || vnni_runs > 0);
    CU_ASSERT_EQUAL(numla_qblock_layout_for(NUMLA_ISA_AVX512, NUMLA_QBLOCK_Q4_K, NUMLA_QBLOCK_ACT_Q8, 2048),
                    vnni ? NUMLA_QBLOCK_LAYOUT_PANEL16 : NUMLA_QBLOCK_LAYOUT_ROWS);
    CU_ASSERT_EQUAL(numla_qblock_layout_for(NUMLA_ISA_AVX512, NUMLA_QBLOCK_IQ4_XS, NUMLA_QBLOCK_ACT_Q8, 256),
                    vnni ? NUMLA_QBLOCK_LAYOUT_PANEL16 : NUMLA_QBLOCK_LAYOUT_ROWS);
    CU_ASSERT_EQUAL(numla_qblock_layout_for(NUMLA_ISA_AVX512, NUMLA_QBLOCK_Q4_K, NUMLA_QBLOCK_ACT_F32, 2048),
                    NUMLA_QBLOCK_LAYOUT_ROWS);
    CU_ASSERT_EQUAL(numla_qblock_layout_for(NUMLA_ISA_REF, NUMLA_QBLOCK_Q4_K, NUMLA_QBLOCK_ACT_Q8, 2048),
                    NUMLA_QBLOCK_LAYOUT_ROWS);
    CU_ASSERT_EQUAL(numla_qblock_layout_for(NUMLA_ISA_AVX512, NUMLA_QBLOCK_Q6_K, NUMLA_QBLOCK_ACT_Q8, 2048),
                    vnni ? NUMLA_QBLOCK_LAYOUT_PANEL16 : NUMLA_QBLOCK_LAYOUT_ROWS);
    CU_ASSERT_EQUAL(numla_qblock_layout_size(NUMLA_QBLOCK_Q6_K, NUMLA_QBLOCK_LAYOUT_PANEL16, 17, 512), 2 * 2 * (size_t)3360);
    CU_ASSERT_EQUAL(numla_qblock_layout_for(NUMLA_ISA_AVX512, NUMLA_QBLOCK_Q5_K, NUMLA_QBLOCK_ACT_Q8, 2048),
                    vnni ? NUMLA_QBLOCK_LAYOUT_PANEL16 : NUMLA_QBLOCK_LAYOUT_ROWS);
    CU_ASSERT_EQUAL(numla_qblock_layout_size(NUMLA_QBLOCK_Q5_K, NUMLA_QBLOCK_LAYOUT_PANEL16, 16, 256), (size_t)2880);
    CU_ASSERT_EQUAL(numla_qblock_layout_size(NUMLA_QBLOCK_Q8_0, NUMLA_QBLOCK_LAYOUT_PANEL16, 16, 96), 0);
    CU_ASSERT_EQUAL(numla_qblock_layout_for(NUMLA_ISA_AVX512, NUMLA_QBLOCK_Q5_0, NUMLA_QBLOCK_ACT_Q8, 1408),
                    vnni ? NUMLA_QBLOCK_LAYOUT_PANEL16 : NUMLA_QBLOCK_LAYOUT_ROWS);
    CU_ASSERT_EQUAL(numla_qblock_layout_for(NUMLA_ISA_AVX512, NUMLA_QBLOCK_Q8_0, NUMLA_QBLOCK_ACT_Q8, 96),
                    NUMLA_QBLOCK_LAYOUT_ROWS);
    CU_ASSERT_EQUAL(numla_qblock_layout_size(NUMLA_QBLOCK_IQ4_NL, NUMLA_QBLOCK_LAYOUT_PANEL16, 17, 1408),
                    2 * 22 * (size_t)576);
    /* the layout takes only what it holds */
    uint8_t src[144] = {0};
    void *dst = aligned_alloc(64, 4096);
    numla_qblock_weight w;
    numla_qblock_source bad = {.type = NUMLA_QBLOCK_Q4_K, .n = 1, .k = 256, .data = src, .ld = 144,
                               .act = NUMLA_QBLOCK_ACT_F32, .layout = NUMLA_QBLOCK_LAYOUT_PANEL16};
    CU_ASSERT_EQUAL(numla_qblock_pack(&bad, dst, &w), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "16-row panel layout"));
    bad.act = NUMLA_QBLOCK_ACT_Q8;
    bad.type = NUMLA_QBLOCK_Q8_0; /* K 96: Q8 mode takes it, the panels (64-column pieces) do not */
    bad.k = 96;
    bad.ld = 102;
    CU_ASSERT_EQUAL(numla_qblock_pack(&bad, dst, &w), NUMLA_STATUS_INVALID_ARG);
    bad.type = NUMLA_QBLOCK_Q4_K;
    bad.k = 256;
    bad.ld = 144;
    bad.layout = NUMLA_QBLOCK_LAYOUT_COUNT;
    CU_ASSERT_EQUAL(numla_qblock_pack(&bad, dst, &w), NUMLA_STATUS_INVALID_ARG);
    bad.layout = NUMLA_QBLOCK_LAYOUT_PANEL16;
    CU_ASSERT_EQUAL(numla_qblock_pack(&bad, dst, &w), NUMLA_STATUS_OK);
    float x[256] = {0}, y[1];
    w.ld = 192; /* a row's ld on a panel weight */
    CU_ASSERT_EQUAL(numla_qblock_forward(NUMLA_ISA_REF, &w, 1, x, 256, y, 1, 0, NULL, 0), NUMLA_STATUS_INVALID_ARG);
    free(dst);
}

/* The vnni and avx2 levels' vector quantizations of x (numla_qblock_gemm_vnni_quantize_,
 * numla_qblock_avx2_quantize_), where the CPU runs them, against the scalar rule (numla_qblock_quantize_rows_) byte for byte: codes, scales and per-16 sums, on
 * rows with exact ties (amax 127: inv 1, x = n + 0.5), a zero row, a lone large value, and a
 * short last group (K 1408). */
static void test_q8_quantize_vector(void)
{
    numla_test_rng rng = {31337};
    static const int64_t ks[] = {256, 1408};
    for (int vec = 0; vec < 2; vec++) /* the vnni level's quantizer, then the avx2 level's */
    for (int ik = 0; ik < 2; ik++) {
        if (vec == 0 ? !numla_isa_supported(NUMLA_ISA_AVX512) || !numla_cpu_has(NUMLA_CPU_VNNI)
                     : !numla_isa_supported(NUMLA_ISA_AVX2))
            continue;
        const int64_t k = ks[ik], m = 5, ldx = k + 7;
        float *x = malloc((size_t)(m * ldx) * sizeof *x);
        for (int64_t i = 0; i < m * ldx; i++)
            x[i] = (float)numla_test_rng_normal(&rng);
        for (int64_t c = 0; c < k; c++) { /* row 1: ties, half of them at even n */
            const int64_t n = (int64_t)(numla_test_rng_u64(&rng) % 254) - 127;
            x[ldx + c] = n == 126 ? 127.0f : (float)n + 0.5f;
        }
        for (int64_t c = 0; c < k; c++)
            x[ldx + c] = c % 256 == 3 ? 127.0f : x[ldx + c]; /* amax 127 in every group */
        memset(x + 2 * ldx, 0, (size_t)k * sizeof *x); /* row 2: zeros */
        x[3 * ldx + 17] = 1e30f; /* row 3: one large value */
        const size_t bytes = 64 + numla_qblock_align64_((size_t)(m * k)) +
                             numla_qblock_align64_((size_t)(m * numla_qblock_q8_groups_(k)) * sizeof(float)) +
                             (size_t)(m * (k / 16)) * sizeof(int32_t);
        uint8_t *wa = calloc(1, bytes), *wb = calloc(1, bytes);
        omp_set_num_threads(3);
        numla_qblock_quantize_rows_(x, ldx, m, k, wa);
        if (vec == 0)
            numla_qblock_gemm_vnni_quantize_(x, ldx, m, k, wb);
        else
            numla_qblock_avx2_quantize_(x, ldx, m, k, wb);
        omp_set_num_threads(2);
        NUMLA_ASSERT_MSG(memcmp(numla_qblock_ws_xq_(wa), numla_qblock_ws_xq_(wb), (size_t)(m * k)) == 0,
                         "%s K=%lld: codes differ", vec ? "avx2" : "vnni", (long long)k);
        NUMLA_ASSERT_MSG(memcmp(numla_qblock_ws_dx_(wa, m, k), numla_qblock_ws_dx_(wb, m, k),
                                (size_t)(m * numla_qblock_q8_groups_(k)) * sizeof(float)) == 0,
                         "%s K=%lld: scales differ", vec ? "avx2" : "vnni", (long long)k);
        NUMLA_ASSERT_MSG(memcmp(numla_qblock_ws_bs_(wa, m, k), numla_qblock_ws_bs_(wb, m, k),
                                (size_t)(m * (k / 16)) * sizeof(int32_t)) == 0,
                         "%s K=%lld: per-16 sums differ", vec ? "avx2" : "vnni", (long long)k);
        /* the ties went to even codes */
        const int8_t *q = numla_qblock_ws_xq_(wa);
        int odd = 0;
        for (int64_t c = 0; c < k; c++)
            odd += x[ldx + c] != 127.0f && (q[k + c] & 1);
        CU_ASSERT_EQUAL(odd, 0);
        free(wa);
        free(wb);
        free(x);
    }
}

/* The many-row path with x blocked (K = 32768: a 256 KiB block holds 3 rows, so M = 7 runs 3
 * blocks of 3, 3 and 1 rows): each output row equals the 1-row GEMV's bits and W x in double. */
static void test_many_blocks(void)
{
    if (!numla_isa_supported(NUMLA_ISA_AVX512))
        return;
    numla_test_rng rng = {99};
    const numla_qblock_type types[] = {NUMLA_QBLOCK_Q4_K, NUMLA_QBLOCK_Q8_0};
    for (int t = 0; t < 2; t++) {
        const int64_t n = 5, k = 32768, m = 7;
        int64_t rb;
        uint8_t *src = qb_random(types[t], n, k, &rng, &rb);
        void *dst = aligned_alloc(64, numla_qblock_packed_size(types[t], n, k));
        numla_qblock_weight w;
        numla_qblock_source s = {.type = types[t], .n = n, .k = k, .data = src, .ld = rb};
        CU_ASSERT_EQUAL_FATAL(numla_qblock_pack(&s, dst, &w), NUMLA_STATUS_OK);
        float *wd = malloc((size_t)(n * k) * sizeof *wd), *x = malloc((size_t)(m * k) * sizeof *x);
        float *y = malloc((size_t)(m * n) * sizeof *y), *y1 = malloc((size_t)n * sizeof *y1);
        numla_qblock_dequant_ref(types[t], src, n * k, wd);
        for (int64_t i = 0; i < m * k; i++)
            x[i] = (float)numla_test_rng_normal(&rng);
        const size_t wsb = numla_qblock_workspace_size(&w, m, 2);
        void *ws = malloc(wsb);
        omp_set_num_threads(2);
        CU_ASSERT_EQUAL(numla_qblock_forward(NUMLA_ISA_AVX512, &w, m, x, k, y, n, 0, ws, wsb), NUMLA_STATUS_OK);
        for (int64_t i = 0; i < m; i++) {
            CU_ASSERT_EQUAL(numla_qblock_forward(NUMLA_ISA_AVX512, &w, 1, x + i * k, k, y1, n, 0, NULL, 0),
                            NUMLA_STATUS_OK);
            CU_ASSERT_EQUAL(memcmp(y1, y + i * n, (size_t)n * sizeof *y1), 0);
            for (int64_t r = 0; r < n; r++) {
                double ref = 0.0, mag = 0.0;
                for (int64_t c = 0; c < k; c++) {
                    ref += (double)wd[r * k + c] * x[i * k + c];
                    mag += fabs((double)wd[r * k + c] * x[i * k + c]);
                }
                CU_ASSERT(fabs(y[i * n + r] - ref) <= (double)(k + 2) * ldexp(1.0, -24) * mag);
            }
        }
        free(ws);
        free(y1);
        free(y);
        free(x);
        free(wd);
        free(dst);
        free(src);
    }
}

/* F32 mode's many-row paths at the avx512 and avx2 levels with many rows
 * (kernels/x86/qblock_avx512.c, kernels/x86/qblock_f32_avx2.c: NW x MR tiles over chunks of x
 * rows, columns in blocks of NUMLA_QBLOCK_MANY_KC, one accumulator set a pass): every type against the dequantized weights in double (kernels/qblock.h's bound),
 * N not a multiple of the tile's weight rows (18, 41, 70, 130), K over two column blocks with
 * a 32-column tail for the 32-element types, accumulate on and off; at M = 4, 5, 23 and
 * 300 (a tail tile, several chunks) and on 1, 2 and 3 threads every row has the bits of its
 * one-row call (the GEMV); the padding between output rows is left alone. */
static void test_many_rows_bits_at(numla_isa isa)
{
    enum { MBIG = 300 };
    CU_ASSERT((int)MBIG > 2 * (int)NUMLA_QBLOCK_MANY_CHUNK);
    numla_test_rng rng = {5150};
    static const int64_t ns[] = {18, 41, 70, 130};
    static const int64_t ms[] = {NUMLA_QBLOCK_MANY_MIN_M, 5, 23, MBIG};
    int checked = 0, bad = 0;
    for (int t = 0; t < NUMLA_QBLOCK_TYPE_COUNT; t++) {
        const numla_qblock_info *info = numla_qblock_info_get((numla_qblock_type)t);
        if (numla_qblock_level(isa, (numla_qblock_type)t, NUMLA_QBLOCK_ACT_F32) != isa)
            continue;
        /* past one column block (NUMLA_QBLOCK_MANY_KC), with a 32-column tail where the type has one */
        const int64_t n = ns[t % 4], k = NUMLA_QBLOCK_MANY_KC + (info->block == 32 ? 288 : 256);
        int64_t rb;
        uint8_t *src = qb_random((numla_qblock_type)t, n, k, &rng, &rb);
        void *dst = aligned_alloc(64, (numla_qblock_packed_size((numla_qblock_type)t, n, k) + 63) & ~(size_t)63);
        numla_qblock_weight w;
        numla_qblock_source s = {.type = (numla_qblock_type)t, .n = n, .k = k, .data = src, .ld = rb};
        CU_ASSERT_EQUAL_FATAL(numla_qblock_pack(&s, dst, &w), NUMLA_STATUS_OK);
        float *wd = malloc((size_t)(n * k) * sizeof *wd);
        CU_ASSERT_EQUAL(numla_qblock_dequant_ref((numla_qblock_type)t, src, n * k, wd), NUMLA_STATUS_OK);
        const int64_t ldx = k + 5, ldy = n + 3;
        float *x = malloc((size_t)(MBIG * ldx) * sizeof *x), *y0 = malloc((size_t)(MBIG * ldy) * sizeof *y0);
        float *y = malloc((size_t)(MBIG * ldy) * sizeof *y), *yone = malloc((size_t)(2 * MBIG * ldy) * sizeof *yone);
        for (int64_t i = 0; i < MBIG * ldx; i++)
            x[i] = (float)numla_test_rng_normal(&rng);
        for (int64_t i = 0; i < MBIG * ldy; i++)
            y0[i] = (float)numla_test_rng_normal(&rng);
        /* each row alone (the GEMV), without and with accumulation */
        for (int acc = 0; acc < 2; acc++) {
            float *yo = yone + acc * MBIG * ldy;
            memcpy(yo, y0, (size_t)(MBIG * ldy) * sizeof *yo);
            for (int64_t i = 0; i < MBIG; i++)
                CU_ASSERT_EQUAL(numla_qblock_forward(isa, &w, 1, x + i * ldx, ldx, yo + i * ldy, ldy,
                                                     acc, NULL, 0), NUMLA_STATUS_OK);
        }
        const size_t wsb = numla_qblock_workspace_size(&w, MBIG, 3);
        void *ws = malloc(wsb);
        for (int acc = 0; acc < 2; acc++)
            for (int im = 0; im < 4; im++)
                for (int th = 1; th <= 3; th++) {
                    const int64_t m = ms[im];
                    const float *want1 = yone + acc * MBIG * ldy;
                    memcpy(y, y0, (size_t)(MBIG * ldy) * sizeof *y);
                    omp_set_num_threads(th);
                    CU_ASSERT_EQUAL(numla_qblock_forward(isa, &w, m, x, ldx, y, ldy, acc, ws, wsb),
                                    NUMLA_STATUS_OK);
                    if (m == MBIG && th == 1)
                        for (int64_t i = 0; i < m; i++)
                            for (int64_t r = 0; r < n; r++) {
                                double ref, bound;
                                if (!qb_f32_within(wd, k, x, ldx, y0, ldy, acc, i, r, y[i * ldy + r], &ref, &bound) &&
                                    bad++ < 3)
                                    NUMLA_ASSERT_MSG(0, "%s %s N=%lld K=%lld M=%lld acc=%d row %lld,%lld: %g vs %g "
                                                     "(bound %g)", numla_isa_name(isa), info->name, (long long)n, (long long)k,
                                                     (long long)m, acc, (long long)i, (long long)r,
                                                     y[i * ldy + r], ref, bound);
                            }
                    for (int64_t i = 0; i < MBIG; i++)
                        for (int64_t r = 0; r < ldy; r++) {
                            /* rows of the call: their one-row bits; the rest, and the padding: untouched */
                            const float want = i < m && r < n ? want1[i * ldy + r] : y0[i * ldy + r];
                            if (memcmp(&y[i * ldy + r], &want, sizeof want) != 0 && bad++ < 3)
                                NUMLA_ASSERT_MSG(0, "%s %s N=%lld K=%lld M=%lld acc=%d th=%d: y[%lld][%lld] = %.9g, "
                                                 "want %.9g", numla_isa_name(isa), info->name, (long long)n, (long long)k, (long long)m,
                                                 acc, th, (long long)i, (long long)r, y[i * ldy + r], want);
                        }
                    checked++;
                }
        free(ws);
        free(yone);
        free(y);
        free(y0);
        free(x);
        free(wd);
        free(dst);
        free(src);
    }
    omp_set_num_threads(2);
    CU_ASSERT(checked >= 12 * 24); /* avx512: every type but Q4_1; avx2: all 13 */
    CU_ASSERT_EQUAL(bad, 0);
}

static void test_many_rows_bits(void)
{
    static const numla_isa levels[] = {NUMLA_ISA_AVX2, NUMLA_ISA_AVX512};
    for (int il = 0; il < 2; il++)
        if (numla_isa_supported(levels[il]))
            test_many_rows_bits_at(levels[il]);
}

static void test_bad_args(void)
{
    uint8_t src[2 * 144] = {0};
    void *dst = aligned_alloc(64, 512);
    numla_qblock_weight w;
    numla_qblock_source s = {.type = NUMLA_QBLOCK_Q4_K, .n = 1, .k = 128, .data = src, .ld = 144};
    CU_ASSERT_EQUAL(numla_qblock_pack(&s, dst, &w), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "multiple of the 256-element block"));
    s.k = 256;
    s.ld = 100;
    CU_ASSERT_EQUAL(numla_qblock_pack(&s, dst, &w), NUMLA_STATUS_INVALID_ARG);
    s.ld = 144;
    CU_ASSERT_EQUAL(numla_qblock_pack(&s, (char *)dst + 8, &w), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_qblock_pack(&s, dst, &w), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(w.ld, 192);
    CU_ASSERT_EQUAL(numla_qblock_packed_size(NUMLA_QBLOCK_Q4_K, 2, 256), 384);
    CU_ASSERT_EQUAL(numla_qblock_packed_size(NUMLA_QBLOCK_Q4_K, 2, 100), 0);
    float x[256] = {0}, y[4] = {0};
    CU_ASSERT_EQUAL(numla_qblock_forward(NUMLA_ISA_REF, &w, 1, x, 100, y, 1, 0, NULL, 0), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_qblock_forward(NUMLA_ISA_REF, &w, 1, x, 256, x + 10, 1, 0, NULL, 0), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_qblock_forward(NUMLA_ISA_REF, &w, 0, NULL, 256, NULL, 1, 0, NULL, 0), NUMLA_STATUS_OK);
    CU_ASSERT_EQUAL(numla_qblock_forward(NUMLA_ISA_REF, &w, 1, x, 256, y, 1, 0, NULL, 0), NUMLA_STATUS_OK);
    /* Q8 mode: K a multiple of 256 (of 32 for Q5_0, IQ4_NL, Q4_0 and Q8_0), and a workspace */
    numla_qblock_source s8 = {.type = NUMLA_QBLOCK_Q4_0, .n = 1, .k = 32, .data = src, .ld = 18, .act = NUMLA_QBLOCK_ACT_Q8};
    CU_ASSERT_EQUAL(numla_qblock_pack(&s8, dst, &w), NUMLA_STATUS_OK);
    s8.type = NUMLA_QBLOCK_Q5_0;
    s8.ld = 22;
    CU_ASSERT_EQUAL(numla_qblock_pack(&s8, dst, &w), NUMLA_STATUS_OK);
    CU_ASSERT(numla_qblock_q8_takes(NUMLA_QBLOCK_Q8_0, 1408) && !numla_qblock_q8_takes(NUMLA_QBLOCK_Q8_0, 1400));
    CU_ASSERT(numla_qblock_q8_takes(NUMLA_QBLOCK_IQ4_NL, 1408) && !numla_qblock_q8_takes(NUMLA_QBLOCK_IQ4_NL, 1400) &&
              numla_qblock_q8_takes(NUMLA_QBLOCK_Q4_0, 1408) && !numla_qblock_q8_takes(NUMLA_QBLOCK_Q4_0, 1400) &&
              !numla_qblock_q8_takes(NUMLA_QBLOCK_Q2_K, 1408) && numla_qblock_q8_takes(NUMLA_QBLOCK_Q4_K, 1536) &&
              !numla_qblock_q8_takes(NUMLA_QBLOCK_TYPE_COUNT, 256));
    s.act = NUMLA_QBLOCK_ACT_Q8;
    CU_ASSERT_EQUAL(numla_qblock_pack(&s, dst, &w), NUMLA_STATUS_OK);
    const size_t need = numla_qblock_workspace_size(&w, 1, 1);
    CU_ASSERT(need >= 256 + 4 + 16 * 4);
    CU_ASSERT_EQUAL(numla_qblock_forward(NUMLA_ISA_REF, &w, 1, x, 256, y, 1, 0, NULL, 0), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(numla_error_message(), "workspace 0 bytes"));
    void *ws = malloc(need);
    CU_ASSERT_EQUAL(numla_qblock_forward(NUMLA_ISA_REF, &w, 1, x, 256, y, 1, 0, ws, need - 1), NUMLA_STATUS_INVALID_ARG);
    CU_ASSERT_EQUAL(numla_qblock_forward(NUMLA_ISA_REF, &w, 1, x, 256, y, 1, 0, ws, need), NUMLA_STATUS_OK);
    free(ws);
    CU_ASSERT_EQUAL(numla_qblock_dequant_ref(NUMLA_QBLOCK_Q8_0, src, 33, x), NUMLA_STATUS_INVALID_ARG);
    free(dst);
}

NUMLA_TEST_SUITE(qblock, NULL, NULL, NUMLA_TEST(test_dequant_golden), NUMLA_TEST(test_table),
                 NUMLA_TEST(test_forward), NUMLA_TEST(test_row_invariant_m), NUMLA_TEST(test_forward_q8), NUMLA_TEST(test_forward_q8_extreme), NUMLA_TEST(test_forward_q8_many), NUMLA_TEST(test_panel16),
                 NUMLA_TEST(test_q8_quantize_vector),
                 NUMLA_TEST(test_many_blocks), NUMLA_TEST(test_many_rows_bits),
                 NUMLA_TEST(test_bad_args))
