/* bench/bench_linear.c — `numla bench linear [--json] [--threads T] [--class C] [--reps R]`:
 * the linear kernels against OpenBLAS (sgemv/sgemm on W widened to fp32; sbgemm when the
 * installed OpenBLAS exports it) and oneDNN (sgemm; bf16 matmul with its own weight layout) when
 * those were found at configure time, per shape class:
 *   gemv    M = 1    — GB/s of weights streamed and the fraction of read bandwidth;
 *   skinny  M = 8,32 — both figures;
 *   prefill M = 512  — GFLOP/s and the fraction of the vdpbf16ps peak;
 *   expert  M = 48   — a 512-token prefill's routed expert (6 of 64 experts per token): both;
 *           M = 12   — DeepSeek-V4-Flash's experts (6 of 256 a token: 12 rows at 512 tokens);
 *   rows    M = 1..4 — a verify step's few-row calls against one-row calls (see below).
 * Where the level has vdpbf16ps, numla_bf16x is the opt-in bf16 activations
 * (NUMLA_LINEAR_ACT_BF16: x rounded to bf16 once); --bf16-only times the bf16 rows alone.
 * Every class also times the 8-bit weights (kernels/qlinear.h: numla_fp8, numla_int8,
 * numla_w8a8) on the bytes they read, next to the bf16 row of the same run (prefill: from
 * cache, like bf16, on one copy), and the ggml block encodings (kernels/qblock.h: numla_q8_0,
 * numla_q4_k, ...) on their packed bytes. Where the level is amx and its tiles take the shape, the row
 * is numla_fp8_amx, numla_int8_amx or numla_w8a8_amx, and numla_fp8 / numla_int8 / numla_w8a8
 * is the variant it replaced (the avx512bf16 level: avx512 fp8 and int8-row, VNNI W8A8);
 * numla_fp8e8(_amx) is fp8 with power-of-two block scales (DeepSeek-V4's E8M0), which the amx
 * tiles fold into the weights.
 * Read bandwidth and peak are measured in the same run on the same threads. GEMV/skinny weights
 * and expert weights rotate over enough copies (>= 4x the LLC, at most 2 GiB) that every call reads them from memory. Prints
 * ratios; never asserts on time. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench/bench.h"
#include "bench/bench_opts.h"
#include "common/dtype.h"
#include "engine/cli/cli.h"
#include "engine/cli/settings.h"
#include "kernels/linear.h"
#include "kernels/qlinear.h"
#include "kernels/qblock.h"

#ifdef NUMLA_HAVE_OPENBLAS
#include <cblas.h>
#endif
#ifdef NUMLA_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif


/* Weight (and bandwidth-test) buffers: 2 MiB aligned and huge-page backed where the kernel allows (as the engine's
 * weight memory is, docs/design.md §3), so no contender pays 4 KiB TLB misses the engine would not. */
static void *numla_bench_linear_alloc_(size_t bytes)
{
    const size_t huge = (size_t)2 << 20;
    bytes = (bytes + huge - 1) & ~(huge - 1);
    void *p = aligned_alloc(huge, bytes);
    if (p)
        madvise(p, bytes, MADV_HUGEPAGE);
    return p;
}

/* Read bandwidth, GB/s, of an array of `bytes` (first-touched by the threads that read it).
 * The machine is shared, so besides the whole-array sum (*whole, best of reps) it times short
 * windows — all threads summing their parts of one 8 MiB slice (the size of a 2048x2048 bf16
 * GEMV), slices walking the array so the
 * data comes from memory — and returns the best window, the same "best undisturbed call"
 * convention the kernels are timed with. To be unified with numla_bench_read_gbps
 * (bench/bench.h) at merge. */
static double numla_bench_linear_read_gbps_(int threads, size_t bytes, int reps, double *whole)
{
    const size_t n = bytes / sizeof(uint64_t), slice = ((size_t)8 << 20) / sizeof(uint64_t);
    uint64_t *a = numla_bench_linear_alloc_(n * sizeof *a);
    *whole = 0.0;
    if (!a)
        return 0.0;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t i = 0; i < n; i++)
        a[i] = i;
    double best = 0.0;
    volatile uint64_t sink = 0;
    for (int r = 0; r < reps; r++) {
        uint64_t tot = 0;
        double t0 = numla_now_s();
#pragma omp parallel for num_threads(threads) schedule(static) reduction(+ : tot)
        for (size_t i = 0; i < n; i++)
            tot += a[i];
        double t = numla_now_s() - t0;
        sink = tot;
        if ((double)bytes / t * 1e-9 > *whole)
            *whole = (double)bytes / t * 1e-9;
        for (size_t s0 = 0; s0 + slice <= n; s0 += slice) {
            tot = 0;
            t0 = numla_now_s();
#pragma omp parallel for num_threads(threads) schedule(static) reduction(+ : tot)
            for (size_t i = s0; i < s0 + slice; i++)
                tot += a[i];
            t = numla_now_s() - t0;
            sink = tot;
            if ((double)(slice * sizeof *a) / t * 1e-9 > best)
                best = (double)(slice * sizeof *a) / t * 1e-9;
        }
    }
    (void)sink;
    free(a);
    return best;
}

typedef struct numla_bench_linear_shape {
    const char *cls;
    int64_t m, n, k;
} numla_bench_linear_shape;

static const numla_bench_linear_shape numla_bench_linear_shapes_[] = {
    {"gemv", 1, 2048, 2048},      {"gemv", 1, 10944, 2048},     {"gemv", 1, 2048, 10944},
    {"gemv", 1, 102400, 2048},    {"gemv", 1, 1408, 2048},      {"skinny", 4, 1408, 2048},    {"skinny", 8, 2048, 2048},    {"skinny", 8, 10944, 2048},
    {"skinny", 8, 2048, 10944},   {"skinny", 8, 102400, 2048},  {"skinny", 16, 2048, 2048},
    {"skinny", 16, 1408, 2048},   {"skinny", 32, 2048, 2048},
    {"skinny", 32, 10944, 2048},  {"skinny", 32, 2048, 10944},  {"skinny", 32, 102400, 2048},
    {"prefill", 512, 2048, 2048}, {"prefill", 512, 10944, 2048}, {"prefill", 512, 2048, 10944},
    {"prefill", 512, 1408, 2048}, {"prefill", 512, 102400, 2048}, {"expert", 48, 1408, 2048},
    {"expert", 48, 2048, 1408},   {"expert", 12, 2048, 4096},   {"expert", 12, 4096, 2048},
};

/* One timed contender: per-call seconds, best and median over the calls made (the machine is
 * shared: the best call is the one that ran undisturbed; the median shows the noise). */
typedef struct numla_bench_linear_result {
    const char *name;
    double sec;    /* best */
    double median;
    double weight_bytes; /* bytes of W one call streams in that library's format */
} numla_bench_linear_result;

/* Calls fn(ctx, copy) round-robin over `copies`, `calls` times after one warm rotation. */
typedef int (*numla_bench_linear_fn)(void *ctx, int copy);

static double numla_bench_linear_time_(numla_bench_linear_fn fn, void *ctx, int copies, int calls,
                                       double *median)
{
    *median = -1.0;
    for (int c = 0; c < copies && c < 4; c++)
        if (fn(ctx, c) != 0)
            return -1.0;
    double *t = malloc((size_t)calls * sizeof *t);
    for (int i = 0; i < calls; i++) {
        double t0 = numla_now_s();
        fn(ctx, i % copies);
        t[i] = numla_now_s() - t0;
    }
    *median = numla_bench_median(t, calls);
    double best = numla_bench_percentile(t, calls, 0.0);
    free(t);
    usleep(20000); /* let the spinning worker threads of one library go idle before the next */
    return best;
}

typedef struct numla_bench_linear_ctx {
    int64_t m, n, k;
    int copies;
    float *x;             /* (m, k) */
    float *y;             /* (m, n) */
    numla_linear_weight *w; /* (copies) */
    void *ws;
    size_t ws_bytes;
    numla_isa isa;        /* the level ours runs at */
    float **wf;           /* (copies) of (n, k) fp32 */
    uint16_t *xb;         /* (m, k) bf16 for sbgemm / dnnl bf16 */
    uint16_t **wb;        /* (copies) of (n, k) bf16 */
#ifdef NUMLA_HAVE_DNNL
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    dnnl_primitive_t mm;
    dnnl_memory_t msrc, mdst, *mwei;
#endif
} numla_bench_linear_ctx;

static int numla_bench_linear_ours_(void *p, int c)
{
    numla_bench_linear_ctx *cx = p;
    return numla_linear_forward(cx->isa, &cx->w[c], cx->m, cx->x, cx->k, cx->y, cx->n, 0, cx->ws,
                                cx->ws_bytes) != NUMLA_STATUS_OK;
}

#ifdef NUMLA_HAVE_OPENBLAS
static int numla_bench_linear_sgemm_(void *p, int c)
{
    numla_bench_linear_ctx *cx = p;
    if (cx->m == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, (blasint)cx->n, (blasint)cx->k, 1.0f, cx->wf[c],
                    (blasint)cx->k, cx->x, 1, 0.0f, cx->y, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)cx->m, (blasint)cx->n,
                    (blasint)cx->k, 1.0f, cx->x, (blasint)cx->k, cx->wf[c], (blasint)cx->k, 0.0f,
                    cx->y, (blasint)cx->n);
    return 0;
}
#ifdef NUMLA_HAVE_OPENBLAS_SBGEMM
static int numla_bench_linear_sbgemm_(void *p, int c)
{
    numla_bench_linear_ctx *cx = p;
    cblas_sbgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)cx->m, (blasint)cx->n,
                 (blasint)cx->k, 1.0f, cx->xb, (blasint)cx->k, cx->wb[c], (blasint)cx->k, 0.0f,
                 cx->y, (blasint)cx->n);
    return 0;
}
#endif
#endif

#ifdef NUMLA_HAVE_DNNL
static int numla_bench_linear_dnnl_sgemm_(void *p, int c)
{
    numla_bench_linear_ctx *cx = p;
    return dnnl_sgemm('N', 'T', cx->m, cx->n, cx->k, 1.0f, cx->x, cx->k, cx->wf[c], cx->k, 0.0f,
                      cx->y, cx->n) != dnnl_success;
}

static int numla_bench_linear_dnnl_bf16_(void *p, int c)
{
    numla_bench_linear_ctx *cx = p;
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, cx->msrc}, {DNNL_ARG_WEIGHTS, cx->mwei[c]},
                               {DNNL_ARG_DST, cx->mdst}};
    if (dnnl_primitive_execute(cx->mm, cx->stream, 3, args) != dnnl_success)
        return 1;
    return dnnl_stream_wait(cx->stream) != dnnl_success;
}

/* A bf16 x bf16 -> f32 matmul whose weights oneDNN lays out itself (format any, reordered once
 * from W (N, K) row-major, as our pack does). Returns 0 on success. */
static int numla_bench_linear_dnnl_setup_(numla_bench_linear_ctx *cx)
{
    if (dnnl_engine_create(&cx->eng, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&cx->stream, cx->eng, dnnl_stream_default_flags) != dnnl_success)
        return 1;
    dnnl_memory_desc_t src_md, wei_md, wei_any, dst_md;
    dnnl_dims_t sd = {cx->m, cx->k}, ss = {cx->k, 1};
    dnnl_dims_t wd = {cx->k, cx->n}, ws = {1, cx->k};
    dnnl_dims_t dd = {cx->m, cx->n}, ds = {cx->n, 1};
    dnnl_memory_desc_init_by_strides(&src_md, 2, sd, dnnl_bf16, ss);
    dnnl_memory_desc_init_by_strides(&wei_md, 2, wd, dnnl_bf16, ws);
    dnnl_memory_desc_init_by_tag(&wei_any, 2, wd, dnnl_bf16, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_strides(&dst_md, 2, dd, dnnl_f32, ds);
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd, rpd;
    if (dnnl_matmul_desc_init(&md, &src_md, &wei_any, NULL, &dst_md) != dnnl_success ||
        dnnl_primitive_desc_create(&pd, &md, NULL, cx->eng, NULL) != dnnl_success)
        return 1;
    const dnnl_memory_desc_t *wq = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    if (dnnl_primitive_create(&cx->mm, pd) != dnnl_success)
        return 1;
    dnnl_memory_create(&cx->msrc, &src_md, cx->eng, cx->xb);
    dnnl_memory_create(&cx->mdst, &dst_md, cx->eng, cx->y);
    cx->mwei = calloc((size_t)cx->copies, sizeof *cx->mwei);
    if (dnnl_reorder_primitive_desc_create(&rpd, &wei_md, cx->eng, wq, cx->eng, NULL) != dnnl_success)
        return 1;
    dnnl_primitive_t reorder;
    dnnl_primitive_create(&reorder, rpd);
    for (int c = 0; c < cx->copies; c++) {
        dnnl_memory_t plain;
        dnnl_memory_create(&plain, &wei_md, cx->eng, cx->wb[c]);
        dnnl_memory_create(&cx->mwei[c], wq, cx->eng, DNNL_MEMORY_ALLOCATE);
        dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, plain}, {DNNL_ARG_TO, cx->mwei[c]}};
        dnnl_primitive_execute(reorder, cx->stream, 2, a);
        dnnl_stream_wait(cx->stream);
        dnnl_memory_destroy(plain);
    }
    dnnl_primitive_destroy(reorder);
    dnnl_primitive_desc_destroy(rpd);
    dnnl_primitive_desc_destroy(pd);
    return 0;
}

static void numla_bench_linear_dnnl_free_(numla_bench_linear_ctx *cx)
{
    if (cx->mwei)
        for (int c = 0; c < cx->copies; c++)
            dnnl_memory_destroy(cx->mwei[c]);
    free(cx->mwei);
    cx->mwei = NULL;
    if (cx->msrc)
        dnnl_memory_destroy(cx->msrc);
    if (cx->mdst)
        dnnl_memory_destroy(cx->mdst);
    if (cx->mm)
        dnnl_primitive_destroy(cx->mm);
    if (cx->stream)
        dnnl_stream_destroy(cx->stream);
    if (cx->eng)
        dnnl_engine_destroy(cx->eng);
    cx->msrc = cx->mdst = NULL;
    cx->mm = NULL;
    cx->stream = NULL;
    cx->eng = NULL;
}
#endif

/* 8-bit weights (kernels/qlinear.h): one row per format, next to the bf16 row of the same run
 * (vs_numla is then the speed-up over bf16); fp8 or W8A8 on AMX tiles adds the row of the level
 * below (avx512 fp8, VNNI W8A8). GB/s and frac_bw count the bytes a call actually reads: 1-byte
 * weights plus scales (plus int8 row sums). pool 0: one copy, reps calls (the compute-bound
 * classes). */
typedef struct numla_bench_linear_q8_ctx {
    int64_t m;
    const float *x;
    float *y;
    numla_qlinear_weight *w; /* (copies) */
    numla_isa isa;
    void *ws;
    size_t ws_bytes;
} numla_bench_linear_q8_ctx;

static int numla_bench_linear_q8_call_(void *p, int c)
{
    numla_bench_linear_q8_ctx *cx = p;
    return numla_qlinear_forward(cx->isa, &cx->w[c], cx->m, cx->x, cx->w[c].k, cx->y, cx->w[c].n, 0,
                                 cx->ws, cx->ws_bytes) != NUMLA_STATUS_OK;
}

static int numla_bench_linear_q8_(const numla_bench_linear_shape *s, numla_isa isa, size_t pool,
                                  int reps, const float *x, float *y,
                                  numla_bench_linear_result *res)
{
    static const char *const names[NUMLA_QLINEAR_FORMAT_COUNT] = {"numla_fp8", "numla_int8",
                                                                  "numla_w8a8"};
    const size_t wb8 = (size_t)s->n * (size_t)s->k;
    int copies = (int)((pool + wb8 - 1) / wb8), nr = 0;
    if (copies < 1)
        copies = 1;
    const int calls = pool == 0 ? reps : copies * 2 > 3 * reps ? copies * 2 : 3 * reps;
    uint8_t *src = malloc(wb8);
    const int64_t sr = (s->n + NUMLA_QLINEAR_BLOCK - 1) / NUMLA_QLINEAR_BLOCK,
                  sc = (s->k + NUMLA_QLINEAR_BLOCK - 1) / NUMLA_QLINEAR_BLOCK;
    float *scales = malloc((size_t)(sr * sc > s->n ? sr * sc : s->n) * sizeof *scales);
    float *scales_p2 = malloc((size_t)(sr * sc) * sizeof *scales_p2);
    numla_qlinear_weight *w = calloc((size_t)copies, sizeof *w);
    void **packed = calloc((size_t)copies, sizeof *packed);
    if (!src || !scales || !scales_p2 || !w || !packed)
        goto done;
    uint64_t st = 0x2545F4914F6CDD1Dull;
    for (size_t i = 0; i < wb8; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        src[i] = (uint8_t)(st >> 56);
        if ((src[i] & 0x7f) == 0x7f) /* no e4m3 NaN encodings (the int8 rows do not care) */
            src[i] ^= 1;
    }
    for (int64_t i = 0; i < (sr * sc > s->n ? sr * sc : s->n); i++)
        scales[i] = 1e-3f;
    for (int64_t i = 0; i < sr * sc; i++)
        scales_p2[i] = 0x1p-10f;
    /* f == FORMAT_COUNT: fp8 again with power-of-two scales (DeepSeek-V4's E8M0), which the amx
     * tiles fold into the weights (numla_fp8e8, numla_fp8e8_amx) */
    for (int f = 0; f <= NUMLA_QLINEAR_FORMAT_COUNT; f++) {
        const int e8 = f == NUMLA_QLINEAR_FORMAT_COUNT;
        const numla_qlinear_format fmt = e8 ? NUMLA_QLINEAR_FP8_BLOCK : (numla_qlinear_format)f;
        const int fp8 = fmt == NUMLA_QLINEAR_FP8_BLOCK;
        numla_qlinear_source qs = {fmt, s->n, s->k, 0, 0, src, s->k, e8 ? scales_p2 : scales, fp8 ? sr : s->n,
                                   fp8 ? sc : 1};
        const size_t bytes = numla_qlinear_packed_size(fmt, s->n, s->k);
        size_t most = 0; /* one buffer per copy serves every format */
        for (int g = 0; g < NUMLA_QLINEAR_FORMAT_COUNT; g++)
            if (numla_qlinear_packed_size((numla_qlinear_format)g, s->n, s->k) > most)
                most = numla_qlinear_packed_size((numla_qlinear_format)g, s->n, s->k);
        int ok = 1;
        for (int c = 0; c < copies && ok; c++) {
            if (!packed[c])
                packed[c] = numla_bench_linear_alloc_(most);
            ok = packed[c] && numla_qlinear_pack(&qs, packed[c], &w[c]) == NUMLA_STATUS_OK;
        }
        if (!ok)
            break;
        numla_bench_linear_q8_ctx cx = {s->m, x, y, w, isa, NULL, numla_qlinear_workspace_size(&w[0], s->m, omp_get_max_threads())};
        cx.ws = cx.ws_bytes ? malloc(cx.ws_bytes) : NULL;
        const int amx = numla_qlinear_uses_amx(isa, &w[0], s->m);
        for (int o = 0; o < (amx ? 2 : 1); o++) {
            cx.isa = o == 0 ? isa : NUMLA_ISA_AVX512BF16;
            static const char *const amx_names[NUMLA_QLINEAR_FORMAT_COUNT] = {"numla_fp8_amx", "numla_int8_amx",
                                                                              "numla_w8a8_amx"};
            res[nr].name = e8 ? (amx && o == 0 ? "numla_fp8e8_amx" : "numla_fp8e8")
                              : amx && o == 0 ? amx_names[f] : names[f];
            /* Bytes read: the packed weights and scales (the int8 rows' per-row scale and row
             * sum are inside `bytes`; fp8 reads no row sums). */
            res[nr].weight_bytes = (double)bytes;
            res[nr].sec = numla_bench_linear_time_(numla_bench_linear_q8_call_, &cx, copies, calls,
                                                   &res[nr].median);
            nr++;
        }
        free(cx.ws);
    }
done:
    for (int c = 0; packed && c < copies; c++)
        free(packed[c]);
    free(packed);
    free(w);
    free(scales);
    free(scales_p2);
    free(src);
    return nr;
}

/* ggml block encodings (kernels/qblock.h): one row per encoding, on the packed blocks a call
 * reads. Random bytes masked with 0x3b, so every fp16 scale is finite (no inf/NaN exponent)
 * whatever the layout; the values do not change the work. pool 0: one copy. */
typedef struct numla_bench_linear_qb_ctx {
    int64_t m;
    const float *x;
    float *y;
    numla_qblock_weight *w; /* (copies) */
    numla_isa isa;
    void *ws;
    size_t ws_bytes;
} numla_bench_linear_qb_ctx;

static int numla_bench_linear_qb_call_(void *p, int c)
{
    numla_bench_linear_qb_ctx *cx = p;
    return numla_qblock_forward(cx->isa, &cx->w[c], cx->m, cx->x, cx->w[c].k, cx->y, cx->w[c].n, 0, cx->ws,
                                cx->ws_bytes) != NUMLA_STATUS_OK;
}

static int numla_bench_linear_qb_(const numla_bench_linear_shape *s, numla_isa isa, size_t pool, int reps,
                                  const float *x, float *y, numla_bench_linear_result *res)
{
    static const struct {
        numla_qblock_type type;
        numla_qblock_act act;
        const char *name;
    } rows[] = {
        {NUMLA_QBLOCK_Q8_0, NUMLA_QBLOCK_ACT_F32, "numla_q8_0"},     {NUMLA_QBLOCK_Q4_0, NUMLA_QBLOCK_ACT_F32, "numla_q4_0"},
        {NUMLA_QBLOCK_Q4_K, NUMLA_QBLOCK_ACT_F32, "numla_q4_k"},     {NUMLA_QBLOCK_Q5_K, NUMLA_QBLOCK_ACT_F32, "numla_q5_k"},
        {NUMLA_QBLOCK_Q6_K, NUMLA_QBLOCK_ACT_F32, "numla_q6_k"},     {NUMLA_QBLOCK_IQ4_XS, NUMLA_QBLOCK_ACT_F32, "numla_iq4_xs"},
        {NUMLA_QBLOCK_Q2_K, NUMLA_QBLOCK_ACT_F32, "numla_q2_k"},     {NUMLA_QBLOCK_Q3_K, NUMLA_QBLOCK_ACT_F32, "numla_q3_k"},
        {NUMLA_QBLOCK_MXFP4, NUMLA_QBLOCK_ACT_F32, "numla_mxfp4"},
        {NUMLA_QBLOCK_Q8_0, NUMLA_QBLOCK_ACT_Q8, "numla_q8_0_a8"},   {NUMLA_QBLOCK_Q4_K, NUMLA_QBLOCK_ACT_Q8, "numla_q4_k_a8"},
        {NUMLA_QBLOCK_Q6_K, NUMLA_QBLOCK_ACT_Q8, "numla_q6_k_a8"},   {NUMLA_QBLOCK_IQ4_XS, NUMLA_QBLOCK_ACT_Q8, "numla_iq4_xs_a8"},
        {NUMLA_QBLOCK_MXFP4, NUMLA_QBLOCK_ACT_Q8, "numla_mxfp4_a8"},
    };
    int nr = 0;
    for (size_t t = 0; t < sizeof rows / sizeof rows[0]; t++) {
        const numla_qblock_type type = rows[t].type;
        if (rows[t].act == NUMLA_QBLOCK_ACT_Q8 && (s->k % 256 || numla_qblock_level(isa, type, rows[t].act) == NUMLA_ISA_REF))
            continue; /* the reference's Q8 mode is not worth timing */
        const numla_qblock_layout layout = numla_qblock_layout_for(isa, type, rows[t].act, s->k);
        const size_t bytes = numla_qblock_layout_size(type, layout, s->n, s->k);
        if (!bytes)
            continue; /* K not a multiple of the block */
        int copies = (int)((pool + bytes - 1) / bytes);
        if (copies < 1)
            copies = 1;
        const int calls = pool == 0 ? reps : copies * 2 > 3 * reps ? copies * 2 : 3 * reps;
        const numla_qblock_info *info = numla_qblock_info_get(type);
        const int64_t row = s->k / info->block * info->bytes;
        uint8_t *src = malloc((size_t)(row * s->n));
        numla_qblock_weight *w = calloc((size_t)copies, sizeof *w);
        void **packed = calloc((size_t)copies, sizeof *packed);
        int ok = src && w && packed;
        uint64_t st = 0x853C49E6748FEA9Bull;
        for (int64_t i = 0; ok && i < row * s->n; i++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            src[i] = (uint8_t)(st >> 56) & 0x3b;
        }
        numla_qblock_source qs = {type, s->n, s->k, src, row, rows[t].act, layout};
        for (int c = 0; c < copies && ok; c++) {
            packed[c] = numla_bench_linear_alloc_(bytes);
            ok = packed[c] && numla_qblock_pack(&qs, packed[c], &w[c]) == NUMLA_STATUS_OK;
        }
        if (ok) {
            numla_bench_linear_qb_ctx cx = {s->m, x, y, w, isa, NULL, numla_qblock_workspace_size(&w[0], s->m, omp_get_max_threads())};
            cx.ws = cx.ws_bytes ? malloc(cx.ws_bytes) : NULL;
            res[nr].name = rows[t].name;
            res[nr].weight_bytes = (double)(row * s->n);
            res[nr].sec = numla_bench_linear_time_(numla_bench_linear_qb_call_, &cx, copies, calls, &res[nr].median);
            nr++;
            free(cx.ws);
        }
        for (int c = 0; packed && c < copies; c++)
            free(packed[c]);
        free(packed);
        free(w);
        free(src);
    }
    return nr;
}

/* Benchmarks one shape; fills up to 24 results; returns the count. */
/* Which tile peak a row is held to at the amx level: 1 AMX-BF16 (bf16 weights, fp8 widened to
 * bf16, MXFP4 in F32 mode), 2 AMX-INT8 (int8-row's planes, W8A8, the block encodings in Q8 mode:
 * the rows named _a8), 0 none (the vector kernels, the peers); only from 16 x rows, where every
 * one of those runs its tiles. */
static int numla_bench_linear_tile_(const char *name, int64_t m)
{
    if (m < 16)
        return 0;
    static const char *const bf16[] = {"numla", "numla_fp8", "numla_fp8e8", "numla_mxfp4"};
    for (size_t i = 0; i < sizeof bf16 / sizeof bf16[0]; i++)
        if (!strcmp(name, bf16[i]))
            return 1;
    const size_t len = strlen(name);
    if (!strcmp(name, "numla_int8") || !strcmp(name, "numla_w8a8") || (len > 3 && !strcmp(name + len - 3, "_a8")))
        return 2;
    return 0;
}

static int numla_bench_linear_shape_(const numla_bench_linear_shape *s, numla_isa isa, size_t pool,
                                     int reps, int bf16_only, numla_bench_linear_result *res)
{
    numla_bench_linear_ctx cx = {.m = s->m, .n = s->n, .k = s->k};
    const size_t wb16 = (size_t)s->n * (size_t)s->k * 2;
    const int streaming = s->m <= 64;
    cx.copies = streaming ? (int)((pool + wb16 - 1) / wb16) : 1;
    if (cx.copies < 1)
        cx.copies = 1;
    const int calls = streaming ? (cx.copies * 2 > 3 * reps ? cx.copies * 2 : 3 * reps) : reps;
    int nr = 0;

    cx.x = malloc((size_t)s->m * (size_t)s->k * sizeof(float));
    cx.y = malloc((size_t)s->m * (size_t)s->n * sizeof(float));
    cx.xb = malloc((size_t)s->m * (size_t)s->k * 2);
    uint16_t *src = malloc(wb16);
    if (!cx.x || !cx.y || !cx.xb || !src)
        return 0;
    uint64_t st = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < (size_t)s->n * (size_t)s->k; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        src[i] = numla_f32_to_bf16(((float)(st >> 40) / 16777216.0f - 0.5f) * 0.1f);
    }
    for (size_t i = 0; i < (size_t)s->m * (size_t)s->k; i++) {
        cx.x[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
        cx.xb[i] = numla_f32_to_bf16(cx.x[i]);
    }

    /* ours (what the dispatcher picks at the level given, fp32-class activations); where that
     * ran on AMX tiles, also the AVX-512 FMA path it replaced (the avx512bf16 level), and where
     * the level has vdpbf16ps the opt-in bf16 activations (NUMLA_LINEAR_ACT_BF16) */
    struct {
        numla_isa isa;
        numla_linear_act act;
        const char *name;
    } ours[3] = {{isa, NUMLA_LINEAR_ACT_F32, "numla"}};
    int nours = 1;
    const numla_linear_weight shape_only = {isa, s->n, s->k, NUMLA_DTYPE_BF16, NULL,
                                            NUMLA_LINEAR_ACT_F32};
    if (numla_linear_uses_amx(isa, &shape_only, s->m))
        ours[nours++] = (__typeof__(ours[0])){NUMLA_ISA_AVX512BF16, NUMLA_LINEAR_ACT_F32, "numla_fma"};
    if (isa >= NUMLA_ISA_AVX512BF16)
        ours[nours++] = (__typeof__(ours[0])){isa, NUMLA_LINEAR_ACT_BF16, "numla_bf16x"};
    for (int o = 0; o < nours; o++) {
        cx.isa = ours[o].isa;
        size_t pbytes = numla_linear_packed_size(isa, s->n, s->k, NUMLA_DTYPE_BF16);
        cx.w = calloc((size_t)cx.copies, sizeof *cx.w);
        void **packed = calloc((size_t)cx.copies, sizeof *packed);
        int ok = 1;
        for (int c = 0; c < cx.copies && ok; c++) {
            packed[c] = numla_bench_linear_alloc_(pbytes);
            ok = packed[c] && numla_linear_pack(isa, s->n, s->k, src, NUMLA_DTYPE_BF16, s->k,
                                                packed[c], &cx.w[c]) == NUMLA_STATUS_OK;
            if (ok)
                cx.w[c].act = ours[o].act;
        }
        if (ok) {
            cx.ws_bytes = numla_linear_workspace_size(cx.isa, &cx.w[0], s->m, omp_get_max_threads());
            cx.ws = cx.ws_bytes ? malloc(cx.ws_bytes) : NULL;
            res[nr].name = ours[o].name;
            res[nr].weight_bytes = (double)pbytes;
            res[nr].sec = numla_bench_linear_time_(numla_bench_linear_ours_, &cx, cx.copies, calls,
                                                   &res[nr].median);
            nr++;
            free(cx.ws);
        }
        for (int c = 0; c < cx.copies; c++)
            free(packed[c]);
        free(packed);
        free(cx.w);
    }

    if (bf16_only) {
        free(src);
        free(cx.x);
        free(cx.y);
        free(cx.xb);
        return nr;
    }
    nr += numla_bench_linear_q8_(s, isa, streaming ? pool : 0, reps, cx.x, cx.y, res + nr);
    nr += numla_bench_linear_qb_(s, isa, streaming ? pool : 0, reps, cx.x, cx.y, res + nr);

#if defined(NUMLA_HAVE_OPENBLAS) || defined(NUMLA_HAVE_DNNL)
    /* fp32 copies of W for the sgemm baselines: the same pool size in bytes, so they too read
     * from memory (each call streams twice the bytes of bf16). */
    const size_t wb32 = 2 * wb16;
    const int copies16 = cx.copies;
    cx.copies = streaming ? (int)((pool + wb32 - 1) / wb32) : 1;
    if (cx.copies < 1)
        cx.copies = 1;
    cx.wf = calloc((size_t)cx.copies, sizeof *cx.wf);
    int ok = 1;
    for (int c = 0; c < cx.copies && ok; c++) {
        cx.wf[c] = numla_bench_linear_alloc_(wb32);
        ok = cx.wf[c] != NULL;
        if (ok) {
#pragma omp parallel for schedule(static)
            for (size_t i = 0; i < (size_t)s->n * (size_t)s->k; i++)
                cx.wf[c][i] = numla_bf16_to_f32(src[i]);
        }
    }
    const int calls32 = streaming ? (cx.copies * 2 > 3 * reps ? cx.copies * 2 : 3 * reps) : reps;
    if (ok) {
#ifdef NUMLA_HAVE_OPENBLAS
        res[nr].name = s->m == 1 ? "openblas_sgemv" : "openblas_sgemm";
        res[nr].weight_bytes = (double)wb32;
        res[nr].sec = numla_bench_linear_time_(numla_bench_linear_sgemm_, &cx, cx.copies, calls32, &res[nr].median);
        nr++;
#endif
#ifdef NUMLA_HAVE_DNNL
        res[nr].name = "onednn_sgemm";
        res[nr].weight_bytes = (double)wb32;
        res[nr].sec = numla_bench_linear_time_(numla_bench_linear_dnnl_sgemm_, &cx, cx.copies, calls32, &res[nr].median);
        nr++;
#endif
    }
    for (int c = 0; c < cx.copies; c++)
        free(cx.wf[c]);
    free(cx.wf);
    cx.wf = NULL;

    /* bf16 copies of W for the bf16 baselines. */
    cx.copies = copies16;
    cx.wb = calloc((size_t)cx.copies, sizeof *cx.wb);
    ok = 1;
    for (int c = 0; c < cx.copies && ok; c++) {
        cx.wb[c] = numla_bench_linear_alloc_(wb16);
        ok = cx.wb[c] != NULL;
        if (ok)
            memcpy(cx.wb[c], src, wb16);
    }
    if (ok) {
#ifdef NUMLA_HAVE_OPENBLAS_SBGEMM
        res[nr].name = "openblas_sbgemm";
        res[nr].weight_bytes = (double)wb16;
        res[nr].sec = numla_bench_linear_time_(numla_bench_linear_sbgemm_, &cx, cx.copies, calls, &res[nr].median);
        nr++;
#endif
#ifdef NUMLA_HAVE_DNNL
        if (numla_bench_linear_dnnl_setup_(&cx) == 0) {
            for (int c = 0; c < cx.copies; c++) { /* oneDNN holds its own copies now */
                free(cx.wb[c]);
                cx.wb[c] = NULL;
            }
            res[nr].name = "onednn_bf16";
        res[nr].weight_bytes = (double)wb16;
        res[nr].sec = numla_bench_linear_time_(numla_bench_linear_dnnl_bf16_, &cx, cx.copies, calls, &res[nr].median);
        nr++;
        }
        numla_bench_linear_dnnl_free_(&cx);
#endif
    }
    for (int c = 0; c < cx.copies; c++)
        free(cx.wb[c]);
    free(cx.wb);
#endif
    free(src);
    free(cx.x);
    free(cx.y);
    free(cx.xb);
    return nr;
}

/* --class rows: a verify step's few-row linears. For M = 1..4 rows on the bf16 shapes of
 * models/kjv-v3 (hidden 256: W stays in cache, as in the model, one copy) and of DeepSeek-V3
 * (W rotated over the pool, so it comes from memory; there also the fp8-block weights of its
 * checkpoint, numla_fp8), the M-row call's best time over the
 * one-row call's (t(M)/t(1): what a verify step's linears cost against a one-row step's) and
 * over M one-row calls (t(M)/(M t(1))). The M values take turns within each rep, so load on a
 * shared machine falls on all of them. */
static const numla_bench_linear_shape numla_bench_linear_rows_shapes_[] = {
    {"kjv-v3", 0, 256, 256},  {"kjv-v3", 0, 384, 256},   {"kjv-v3", 0, 160, 256},
    {"kjv-v3", 0, 512, 128},  {"kjv-v3", 0, 768, 256},   {"kjv-v3", 0, 256, 768},
    {"kjv-v3", 0, 4096, 256}, {"v3", 0, 1536, 7168},     {"v3", 0, 576, 7168},
    {"v3", 0, 7168, 2048},    {"v3", 0, 2048, 7168},     {"v3", 0, 18432, 7168},
    {"v3", 0, 7168, 18432},
};

/* best[m] for m = 1..maxm: the best call of fn (ctx's row count at *m) over reps turns, the M
 * values taking turns within each. */
static void numla_bench_linear_rows_turns_(numla_bench_linear_fn fn, void *ctx, int64_t *m, int copies, int calls,
                                           int reps, int maxm, double *best)
{
    for (int i = 1; i <= maxm; i++)
        best[i] = 1e30;
    for (int r = 0; r < reps; r++)
        for (int i = 1; i <= maxm; i++) {
            double med;
            *m = i;
            const double t = numla_bench_linear_time_(fn, ctx, copies, calls, &med);
            if (t > 0 && t < best[i])
                best[i] = t;
        }
}

static void numla_bench_linear_rows_print_(const numla_bench_linear_shape *s, const char *name, const double *best,
                                           int maxm, int json)
{
    for (int m = 1; m <= maxm; m++) {
        if (json)
            printf("{\"class\":\"rows\",\"shape\":\"%s\",\"kernel\":\"%s\",\"m\":%d,\"n\":%lld,\"k\":%lld,"
                   "\"time_us\":%.3f,\"vs_one_row\":%.3f,\"vs_m_one_row_calls\":%.3f}\n",
                   s->cls, name, m, (long long)s->n, (long long)s->k, best[m] * 1e6, best[m] / best[1],
                   best[m] / (m * best[1]));
        else
            printf("%-8s %5d %7lld %6lld  %-16s %10.2f %12.3f %14.3f\n", s->cls, m, (long long)s->n,
                   (long long)s->k, name, best[m] * 1e6, best[m] / best[1], best[m] / (m * best[1]));
    }
    fflush(stdout);
}

/* The same M = 1..maxm turns on the shape's fp8-block weights (DeepSeek-V3's checkpoint format:
 * e4m3 bytes, a scale per 128 x 128 block), rotated over the pool; x and y as the bf16 rows'. */
static void numla_bench_linear_rows_fp8_(const numla_bench_linear_shape *s, numla_isa isa, size_t pool, int reps,
                                         int calls, const float *x, float *y, int json)
{
    enum { MAXM = 4 };
    const size_t wb8 = (size_t)s->n * (size_t)s->k;
    const int copies = (int)((pool + wb8 - 1) / wb8);
    const int64_t sr = (s->n + NUMLA_QLINEAR_BLOCK - 1) / NUMLA_QLINEAR_BLOCK,
                  sc = (s->k + NUMLA_QLINEAR_BLOCK - 1) / NUMLA_QLINEAR_BLOCK;
    uint8_t *src = malloc(wb8);
    float *scales = malloc((size_t)(sr * sc) * sizeof *scales);
    numla_qlinear_weight *w = calloc((size_t)copies, sizeof *w);
    void **packed = calloc((size_t)copies, sizeof *packed);
    int ok = src && scales && w && packed;
    uint64_t st = 0x2545F4914F6CDD1Dull;
    for (size_t i = 0; ok && i < wb8; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        src[i] = (uint8_t)(st >> 56);
        if ((src[i] & 0x7f) == 0x7f) /* no e4m3 NaN encodings */
            src[i] ^= 1;
    }
    for (int64_t i = 0; ok && i < sr * sc; i++)
        scales[i] = 1e-3f;
    const numla_qlinear_source qs = {NUMLA_QLINEAR_FP8_BLOCK, s->n, s->k, 0, 0, src, s->k, scales, sr, sc};
    for (int c = 0; ok && c < copies; c++) {
        packed[c] = numla_bench_linear_alloc_(numla_qlinear_packed_size(NUMLA_QLINEAR_FP8_BLOCK, s->n, s->k));
        ok = packed[c] && numla_qlinear_pack(&qs, packed[c], &w[c]) == NUMLA_STATUS_OK;
    }
    numla_bench_linear_q8_ctx cx = {1, x, y, w, isa, NULL,
                                    ok ? numla_qlinear_workspace_size(&w[0], MAXM, omp_get_max_threads()) : 0};
    cx.ws = cx.ws_bytes ? malloc(cx.ws_bytes) : NULL;
    double best[MAXM + 1];
    if (ok) {
        numla_bench_linear_rows_turns_(numla_bench_linear_q8_call_, &cx, &cx.m, copies, calls, reps, MAXM, best);
        numla_bench_linear_rows_print_(s, "numla_fp8", best, MAXM, json);
    }
    free(cx.ws);
    for (int c = 0; packed && c < copies; c++)
        free(packed[c]);
    free(packed);
    free(w);
    free(scales);
    free(src);
}

static void numla_bench_linear_rows_(numla_isa isa, size_t pool, int reps, int json)
{
    enum { MAXM = 4 };
    for (size_t si = 0; si < sizeof numla_bench_linear_rows_shapes_ / sizeof numla_bench_linear_rows_shapes_[0];
         si++) {
        const numla_bench_linear_shape *s = &numla_bench_linear_rows_shapes_[si];
        const size_t wb16 = (size_t)s->n * (size_t)s->k * 2;
        const int mem = strcmp(s->cls, "kjv-v3") != 0;
        numla_bench_linear_ctx cx = {.n = s->n, .k = s->k, .isa = isa};
        cx.copies = mem ? (int)((pool + wb16 - 1) / wb16) : 1;
        const int calls = mem ? (cx.copies * 2 > 30 ? cx.copies * 2 : 30) : 400;
        uint16_t *src = malloc(wb16);
        cx.x = malloc((size_t)MAXM * (size_t)s->k * sizeof(float));
        cx.y = malloc((size_t)MAXM * (size_t)s->n * sizeof(float));
        cx.w = calloc((size_t)cx.copies, sizeof *cx.w);
        void **packed = calloc((size_t)cx.copies, sizeof *packed);
        const size_t pbytes = numla_linear_packed_size(isa, s->n, s->k, NUMLA_DTYPE_BF16);
        int ok = src && cx.x && cx.y && cx.w && packed;
        uint64_t st = 0x9E3779B97F4A7C15ull;
        for (size_t i = 0; ok && i < (size_t)s->n * (size_t)s->k; i++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            src[i] = numla_f32_to_bf16(((float)(st >> 40) / 16777216.0f - 0.5f) * 0.1f);
        }
        for (size_t i = 0; ok && i < (size_t)MAXM * (size_t)s->k; i++)
            cx.x[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
        for (int c = 0; ok && c < cx.copies; c++) {
            packed[c] = numla_bench_linear_alloc_(pbytes);
            ok = packed[c] && numla_linear_pack(isa, s->n, s->k, src, NUMLA_DTYPE_BF16, s->k, packed[c],
                                                &cx.w[c]) == NUMLA_STATUS_OK;
        }
        cx.ws_bytes = ok ? numla_linear_workspace_size(isa, &cx.w[0], MAXM, omp_get_max_threads()) : 0;
        cx.ws = cx.ws_bytes ? malloc(cx.ws_bytes) : NULL;
        double best[MAXM + 1];
        if (ok) {
            numla_bench_linear_rows_turns_(numla_bench_linear_ours_, &cx, &cx.m, cx.copies, calls, reps, MAXM, best);
            numla_bench_linear_rows_print_(s, "numla", best, MAXM, json);
        }
        if (ok && mem)
            numla_bench_linear_rows_fp8_(s, isa, pool, reps, calls, cx.x, cx.y, json);
        free(cx.ws);
        for (int c = 0; packed && c < cx.copies; c++)
            free(packed[c]);
        free(packed);
        free(cx.w);
        free(cx.x);
        free(cx.y);
        free(src);
    }
}

static int numla_bench_linear_main_(int argc, char **argv)
{
    int json = 0, threads = omp_get_max_threads(), reps = 5;
    const char *only = NULL;
    int bf16_only = 0; /* --bf16-only: our bf16 rows alone (numla, numla_fma, numla_bf16x) */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (!strcmp(argv[i], "--bf16-only"))
            bf16_only = 1;
        else if (!strcmp(argv[i], "--threads") || !strcmp(argv[i], "--reps")) {
            if (!numla_bench_int_opt("numla bench linear", argc, argv, &i,
                                     !strcmp(argv[i], "--threads") ? &threads : &reps))
                return 2;
        } else if (!strcmp(argv[i], "--class") && i + 1 < argc)
            only = argv[++i];
        else {
            fprintf(stderr, "usage: numla bench linear [--json] [--threads T] [--reps R] "
                            "[--class gemv|skinny|prefill|expert|rows] [--bf16-only]\n");
            return 2;
        }
    }
    if (threads < 1 || reps < 1) {
        fprintf(stderr, "bench linear: --threads and --reps must be >= 1\n");
        return 2;
    }
    omp_set_num_threads(threads);
#ifdef NUMLA_HAVE_OPENBLAS
    openblas_set_num_threads(threads);
#endif
    numla_settings set;
    if (numla_settings_load(&set) != NUMLA_STATUS_OK) {
        fprintf(stderr, "bench linear: %s\n", numla_error_message());
        return 1;
    }
    /* the level the engine's linear layers would run at (NUMLA_LINEAR_AMX=0: below amx) */
    const numla_isa isa = numla_model_options_level(&set.kernels, NUMLA_MODEL_KERNELS_LINEAR);
    const size_t llc = numla_bench_llc_bytes();
    size_t pool = 4 * llc;
    if (pool < ((size_t)256 << 20))
        pool = (size_t)256 << 20;
    if (pool > ((size_t)2 << 30))
        pool = (size_t)2 << 30;
    if (only && !strcmp(only, "rows")) { /* no bandwidth or peak figures: ratios only */
        if (json)
            printf("{\"bench\":\"linear\",\"isa\":\"%s\",\"threads\":%d}\n", numla_isa_name(isa), threads);
        else
            printf("bench linear: isa %s, %d threads\n%-8s %5s %7s %6s  %-16s %10s %12s %14s\n",
                   numla_isa_name(isa), threads, "shape", "M", "N", "K", "kernel", "best_us", "vs_one_row",
                   "vs_M_one_rows");
        numla_bench_linear_rows_(isa, pool, reps, json);
        return 0;
    }
    double bw_whole;
    const double bw = numla_bench_linear_read_gbps_(threads, (size_t)2 << 30, 6, &bw_whole);
    const double peak = numla_isa_supported(NUMLA_ISA_AVX512BF16)
                            ? numla_bench_peak_dpbf16_gflops(threads, 20)
                            : 0.0;
    const double peak_fma = numla_isa_supported(NUMLA_ISA_AVX512BF16)
                                ? numla_bench_peak_gflops(NUMLA_ISA_AVX512, threads, 20)
                                : 0.0;
    /* at the amx level, each tile kernel's own ceiling too: AMX-BF16 for the bf16-tile rows,
     * AMX-INT8 for the int8-tile ones (numla_bench_linear_tile_) */
    const int tiles = isa == NUMLA_ISA_AMX;
    const double tile_bf16 = tiles ? numla_bench_peak_amx_gflops(threads, 20) : 0.0;
    const double tile_int8 = tiles ? numla_bench_peak_amx_int8_gops(threads, 20) : 0.0;
    if (json)
        printf("{\"bench\":\"linear\",\"isa\":\"%s\",\"threads\":%d,\"read_gbps\":%.2f,"
               "\"read_gbps_whole\":%.2f,\"bf16_peak_gflops\":%.1f,\"fp32_fma_peak_gflops\":%.1f,"
               "\"amx_bf16_peak_gflops\":%.1f,\"amx_int8_peak_gops\":%.1f,\"llc_bytes\":%zu,\"pool_bytes\":%zu}\n",
               numla_isa_name(isa), threads, bw, bw_whole, peak, peak_fma, tile_bf16, tile_int8, llc, pool);
    else {
        printf("bench linear: isa %s, %d threads, read BW %.2f GB/s (best 8 MiB window of a 2 GiB "
               "array; whole-array sum %.2f), vdpbf16ps peak %.1f GFLOP/s (fp32 FMA %.1f), weights "
               "rotated over >= %zu MiB\n",
               numla_isa_name(isa), threads, bw, bw_whole, peak, peak_fma, pool >> 20);
        if (tiles)
            printf("tile peaks: AMX-BF16 %.1f GFLOP/s, AMX-INT8 %.1f GOP/s (frac_tile: a tile row's useful "
                   "operations over its tile kind's peak)\n",
                   tile_bf16, tile_int8);
        printf("%-8s %5s %7s %6s  %-16s %10s %10s %8s %7s %9s %7s %8s%s\n", "class", "M", "N", "K", "kernel",
               "best_us", "median_us", "GB/s", "frac_bw", "GFLOP/s", "frac_pk", "vs_numla", tiles ? " frac_tile" : "");
    }

    for (size_t i = 0; i < sizeof numla_bench_linear_shapes_ / sizeof numla_bench_linear_shapes_[0]; i++) {
        const numla_bench_linear_shape *s = &numla_bench_linear_shapes_[i];
        if (only && strcmp(only, s->cls))
            continue;
        numla_bench_linear_result res[32];
        int nr = numla_bench_linear_shape_(s, isa, pool, reps, bf16_only, res);
        const double flops = 2.0 * (double)s->m * (double)s->n * (double)s->k;
        for (int r = 0; r < nr; r++) {
            const double sec = res[r].sec;
            const double gbps = sec > 0 ? res[r].weight_bytes / sec * 1e-9 : 0.0;
            const double gflops = sec > 0 ? flops / sec * 1e-9 : 0.0;
            const double vs = sec > 0 && res[0].sec > 0 ? res[0].sec / sec : 0.0;
            const int kind = tiles ? numla_bench_linear_tile_(res[r].name, s->m) : 0;
            const double tpk = kind == 1 ? tile_bf16 : kind == 2 ? tile_int8 : 0.0;
            const double ftile = tpk > 0 ? gflops / tpk : 0.0;
            if (json)
                printf("{\"class\":\"%s\",\"m\":%lld,\"n\":%lld,\"k\":%lld,\"kernel\":\"%s\","
                       "\"time_us\":%.2f,\"median_us\":%.2f,\"weight_gbps\":%.2f,\"frac_read_bw\":%.3f,"
                       "\"gflops\":%.1f,\"frac_peak\":%.3f,\"speed_vs_numla\":%.3f,\"frac_tile\":%.3f}\n",
                       s->cls, (long long)s->m, (long long)s->n, (long long)s->k, res[r].name,
                       sec * 1e6, res[r].median * 1e6, gbps, bw > 0 ? gbps / bw : 0.0, gflops,
                       peak > 0 ? gflops / peak : 0.0, vs, ftile);
            else if (tiles) {
                char ft[16] = "-";
                if (kind)
                    snprintf(ft, sizeof ft, "%.3f", ftile);
                printf("%-8s %5lld %7lld %6lld  %-16s %10.1f %10.1f %8.2f %7.3f %9.1f %7.3f %8.3f %9s\n",
                       s->cls, (long long)s->m, (long long)s->n, (long long)s->k, res[r].name,
                       sec * 1e6, res[r].median * 1e6, gbps, bw > 0 ? gbps / bw : 0.0, gflops,
                       peak > 0 ? gflops / peak : 0.0, vs, ft);
            }
            else
                printf("%-8s %5lld %7lld %6lld  %-16s %10.1f %10.1f %8.2f %7.3f %9.1f %7.3f %8.3f\n",
                       s->cls, (long long)s->m, (long long)s->n, (long long)s->k, res[r].name,
                       sec * 1e6, res[r].median * 1e6, gbps, bw > 0 ? gbps / bw : 0.0, gflops,
                       peak > 0 ? gflops / peak : 0.0, vs);
        }
        fflush(stdout);
    }
    return 0;
}

NUMLA_CLI_COMMAND("bench linear", numla_bench_linear_main_,
                  "linear kernels vs OpenBLAS/oneDNN: GEMV GB/s vs read BW, GEMM GFLOP/s vs bf16 peak")
