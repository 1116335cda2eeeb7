/* kernels/qlinear.c — the 8-bit linear dispatch table, packing (ISA-independent), argument
 * validation and the e4m3 definition. The layout is in kernels/qlinear_internal.h; the compute
 * in kernels/ref/qlinear_ref.c and kernels/x86/qlinear_<isa>.c. */
#include "kernels/qlinear_internal.h"

#include <math.h>
#include <string.h>


/* A variant: the head (kernels/isa.h) and its functions: the forward, and the many-row GEMM
 * where the level has one (used when numla_qlinear_gemm_applies). */
typedef struct numla_qlinear_variant {
    numla_variant v;
    numla_qlinear_forward_fn forward;
    numla_qlinear_gemm_fn gemm; /* NULL: the forward runs every M */
} numla_qlinear_variant;

static const numla_qlinear_variant numla_qlinear_ref_ = {{"ref", 0, NULL}, numla_qlinear_forward_ref, NULL};
/* fp8 (the panel GEMM from NUMLA_QLINEAR_PANEL_MIN_M rows), int8-row and W8A8 on AVX2 + FMA + F16C */
static const numla_qlinear_variant numla_qlinear_fp8_avx2_ = {{"avx2", 0, NULL}, numla_qlinear_forward_avx2,
                                                              numla_qlinear_gemm_avx2};
static const numla_qlinear_variant numla_qlinear_int8_avx2_ = {{"avx2", 0, NULL}, numla_qlinear_forward_avx2, NULL};
static const numla_qlinear_variant numla_qlinear_fp8_avx512_ = {{"avx512", 0, NULL}, numla_qlinear_forward_avx512,
                                                                numla_qlinear_gemm_avx512};
static const numla_qlinear_variant numla_qlinear_row_avx512_ = {{"avx512", 0, NULL}, numla_qlinear_forward_avx512,
                                                                NULL};
static const numla_qlinear_variant numla_qlinear_w8a8_avx512_ = {
    {"avx512vnni", NUMLA_CPU_VNNI, NULL}, numla_qlinear_forward_avx512vnni, numla_qlinear_gemm_avx512vnni};
/* fp8 at M = 1 (the GEMM from avx512 for more rows) */
static const numla_qlinear_variant numla_qlinear_fp8_avx512bf16_ = {
    {"avx512bf16", NUMLA_CPU_VBMI, NULL}, numla_qlinear_forward_fp8_avx512bf16, numla_qlinear_gemm_avx512};
/* int8-row as three int8 planes of x on vpdpbusd, few rows and a panel GEMM (the amx level's
 * bits; at this level, not avx512, so that a CPU with AVX-512 but no VNNI keeps avx512's) */
static const numla_qlinear_variant numla_qlinear_row_avx512bf16_ = {
    {"avx512vnni", NUMLA_CPU_VNNI, NULL}, numla_qlinear_forward_int8row_vnni, numla_qlinear_gemm_int8row_vnni};
/* fp8 on TDPBF16PS (weights widened to bf16 per tile with VBMI byte lookups); int8-row as three
 * int8 planes of x on TDPBSSD, few rows on VNNI (the same entry hands it on); W8A8 on TDPBSSD */
static const numla_qlinear_variant numla_qlinear_wide_amx_ = {
    {"amx", NUMLA_CPU_AMX_BF16 | NUMLA_CPU_VBMI, NULL}, numla_qlinear_forward_amx_wide, NULL};
static const numla_qlinear_variant numla_qlinear_row_amx_ = {
    {"amx", NUMLA_CPU_AMX_INT8 | NUMLA_CPU_VNNI, NULL}, numla_qlinear_forward_amx_wide, NULL};
static const numla_qlinear_variant numla_qlinear_w8a8_amx_ = {
    {"amx", NUMLA_CPU_AMX_INT8 | NUMLA_CPU_VNNI, NULL}, numla_qlinear_forward_amx, NULL};

/* Native variants per level and kind (the format: fp8-block, int8-row, W8A8); an empty entry,
 * or one whose CPU needs are missing, inherits the level below. */
static const numla_variant *const numla_qlinear_table_[NUMLA_ISA_COUNT][NUMLA_QLINEAR_FORMAT_COUNT] = {
    [NUMLA_ISA_REF] = {&numla_qlinear_ref_.v, &numla_qlinear_ref_.v, &numla_qlinear_ref_.v},
    [NUMLA_ISA_AVX2] = {&numla_qlinear_fp8_avx2_.v, &numla_qlinear_int8_avx2_.v, &numla_qlinear_int8_avx2_.v},
    [NUMLA_ISA_AVX512] = {&numla_qlinear_fp8_avx512_.v, &numla_qlinear_row_avx512_.v, &numla_qlinear_w8a8_avx512_.v},
    [NUMLA_ISA_AVX512BF16] = {&numla_qlinear_fp8_avx512bf16_.v, &numla_qlinear_row_avx512bf16_.v, NULL},
    [NUMLA_ISA_AMX] = {&numla_qlinear_wide_amx_.v, &numla_qlinear_row_amx_.v, &numla_qlinear_w8a8_amx_.v},
};

static const numla_qlinear_variant *numla_qlinear_variant_(numla_isa level, numla_qlinear_format fmt)
{
    return (const numla_qlinear_variant *)numla_qlinear_table_[level][fmt];
}

numla_isa numla_qlinear_level(numla_isa isa, numla_qlinear_format fmt)
{
    if ((unsigned)fmt >= NUMLA_QLINEAR_FORMAT_COUNT || (unsigned)isa >= NUMLA_ISA_COUNT)
        return NUMLA_ISA_REF;
    return numla_isa_pick(isa, &numla_qlinear_table_[0][0], NUMLA_QLINEAR_FORMAT_COUNT, (int)fmt, NULL);
}

int numla_qlinear_uses_amx(numla_isa isa, const numla_qlinear_weight *w, int64_t m)
{
    return numla_qlinear_level(isa, w->fmt) == NUMLA_ISA_AMX &&
           (numla_qlinear_amx_applies(w, m) || numla_qlinear_amx_wide_applies(w, m));
}

const char *numla_qlinear_format_name(numla_qlinear_format fmt)
{
    static const char *const names[NUMLA_QLINEAR_FORMAT_COUNT] = {"fp8-block", "int8-row", "int8-w8a8"};
    return (unsigned)fmt < NUMLA_QLINEAR_FORMAT_COUNT ? names[fmt] : "?";
}

float numla_qlinear_fp8_to_f32(uint8_t b)
{
    const int e = (b >> 3) & 15, m = b & 7;
    float v;
    if (e == 15 && m == 7)
        v = NAN;
    else if (e == 0)
        v = ldexpf((float)m, -9); /* subnormal: m/8 · 2^-6 */
    else
        v = ldexpf((float)(8 + m), e - 10); /* (1 + m/8) · 2^(e-7) */
    return (b & 0x80) ? -v : v;
}

/* Scale-grid shape a packed slice holds. */
static void numla_qlinear_grid_(numla_qlinear_format fmt, int64_t n, int64_t k, int64_t row0,
                                int64_t *rows, int64_t *cols)
{
    if (fmt == NUMLA_QLINEAR_FP8_BLOCK) {
        *rows = (row0 + n - 1) / NUMLA_QLINEAR_BLOCK - row0 / NUMLA_QLINEAR_BLOCK + 1;
        *cols = (k + NUMLA_QLINEAR_BLOCK - 1) / NUMLA_QLINEAR_BLOCK;
    } else {
        *rows = n;
        *cols = 1;
    }
}

/* Offsets of the scales and row sums in a packed buffer. row0 % 128 decides how many grid
 * rows an fp8 slice touches; the size is taken for the worst case (one more block row). */
static size_t numla_qlinear_scales_off_(int64_t n, int64_t k) { return numla_qlinear_align64((size_t)n * (size_t)numla_qlinear_kp(k)); }
static size_t numla_qlinear_sums_off_(numla_qlinear_format fmt, int64_t n, int64_t k)
{
    int64_t rows = fmt == NUMLA_QLINEAR_FP8_BLOCK ? (n + NUMLA_QLINEAR_BLOCK - 1) / NUMLA_QLINEAR_BLOCK + 1 : n;
    int64_t cols = fmt == NUMLA_QLINEAR_FP8_BLOCK ? (k + NUMLA_QLINEAR_BLOCK - 1) / NUMLA_QLINEAR_BLOCK : 1;
    return numla_qlinear_scales_off_(n, k) + numla_qlinear_align64((size_t)rows * (size_t)cols * sizeof(float));
}

size_t numla_qlinear_packed_size(numla_qlinear_format fmt, int64_t n, int64_t k)
{
    if ((unsigned)fmt >= NUMLA_QLINEAR_FORMAT_COUNT || n <= 0 || k <= 0)
        return 0;
    size_t bytes = numla_qlinear_sums_off_(fmt, n, k);
    if (fmt != NUMLA_QLINEAR_FP8_BLOCK)
        bytes += numla_qlinear_align64((size_t)n * sizeof(int32_t));
    return bytes;
}

static numla_status numla_qlinear_check_source_(const numla_qlinear_source *s, const void *dst,
                                                const numla_qlinear_weight *out)
{
    if (!s || !dst || !out)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qlinear pack: NULL %s", !s ? "source" : !dst ? "dst" : "out");
    if ((unsigned)s->fmt >= NUMLA_QLINEAR_FORMAT_COUNT)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qlinear pack: format %d unknown", (int)s->fmt);
    if (s->n <= 0 || s->k <= 0 || s->row0 < 0 || s->col0 < 0)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "qlinear pack: slice N=%lld K=%lld at (%lld, %lld) must be positive and start >= 0",
                   (long long)s->n, (long long)s->k, (long long)s->row0, (long long)s->col0);
    if (!s->data || !s->scales)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qlinear pack: NULL %s", !s->data ? "data" : "scales");
    if (s->ld < s->k)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qlinear pack: ld %lld < K %lld", (long long)s->ld,
                   (long long)s->k);
    if ((uintptr_t)dst % 64)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qlinear pack: dst %p is not 64-byte aligned", dst);
    if (s->fmt == NUMLA_QLINEAR_FP8_BLOCK) {
        const int64_t B = NUMLA_QLINEAR_BLOCK;
        if (s->col0 % B)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                       "qlinear pack: fp8 column offset %lld cuts a %lld-wide scale block",
                       (long long)s->col0, (long long)B);
        if (s->scale_rows < (s->row0 + s->n + B - 1) / B || s->scale_cols < (s->col0 + s->k + B - 1) / B)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                       "qlinear pack: fp8 scale grid %lld x %lld does not cover rows [%lld, %lld) "
                       "and columns [%lld, %lld) in %lld-blocks",
                       (long long)s->scale_rows, (long long)s->scale_cols, (long long)s->row0,
                       (long long)(s->row0 + s->n), (long long)s->col0, (long long)(s->col0 + s->k),
                       (long long)B);
    } else if (s->k > 65536) {
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "qlinear pack: int8 K %lld > 65536 could overflow the int32 dot product",
                   (long long)s->k);
    } else if (s->scale_cols != 1 || s->scale_rows < s->row0 + s->n) {
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "qlinear pack: int8 scales %lld x %lld are not one per row for rows [%lld, %lld)",
                   (long long)s->scale_rows, (long long)s->scale_cols, (long long)s->row0,
                   (long long)(s->row0 + s->n));
    }
    return NUMLA_STATUS_OK;
}

/* Whether every one of the count scales is 2^e with -117 <= e <= 119: then s · w, for every
 * e4m3 w != 0 (2^-9 <= |w| <= 448), is a normal bf16 (numla_qlinear_weight.scale_pow2). */
static int numla_qlinear_scales_pow2_(const float *s, int64_t count)
{
    for (int64_t i = 0; i < count; i++) {
        uint32_t bits;
        memcpy(&bits, &s[i], sizeof bits);
        const int e = (int)(bits >> 23) - 127; /* sign bit set: e > 128 */
        if ((bits & 0x7FFFFFu) || e < -117 || e > 119)
            return 0;
    }
    return 1;
}

numla_status numla_qlinear_pack(const numla_qlinear_source *src, void *dst, numla_qlinear_weight *out)
{
    NUMLA_CHECK(numla_qlinear_check_source_(src, dst, out));
    const int64_t n = src->n, k = src->k, kp = numla_qlinear_kp(k);
    numla_qlinear_weight w = {.fmt = src->fmt, .n = n, .k = k, .kp = kp, .row0 = src->row0};
    numla_qlinear_grid_(src->fmt, n, k, src->row0, &w.scale_rows, &w.scale_cols);
    unsigned char *base = dst;
    int8_t *q = (int8_t *)base;
    float *scales = (float *)(void *)(base + numla_qlinear_scales_off_(n, k));
    int32_t *sums = src->fmt == NUMLA_QLINEAR_FP8_BLOCK
                        ? NULL
                        : (int32_t *)(void *)(base + numla_qlinear_sums_off_(src->fmt, n, k));
    const unsigned char *s = src->data;

    /* Rows in the forward's static split over N, so first touch puts each thread's rows on its
     * node. */
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; r++) {
        int8_t *d = q + r * kp;
        memcpy(d, s + r * src->ld, (size_t)k);
        memset(d + k, 0, (size_t)(kp - k));
        if (sums) {
            int32_t t = 0;
            for (int64_t c = 0; c < k; c++)
                t += d[c];
            sums[r] = t;
        }
    }
    if (src->fmt == NUMLA_QLINEAR_FP8_BLOCK) {
        const int64_t g0 = src->row0 / NUMLA_QLINEAR_BLOCK, c0 = src->col0 / NUMLA_QLINEAR_BLOCK;
        for (int64_t g = 0; g < w.scale_rows; g++)
            for (int64_t c = 0; c < w.scale_cols; c++)
                scales[g * w.scale_cols + c] = src->scales[(g0 + g) * src->scale_cols + c0 + c];
        w.scale_pow2 = numla_qlinear_scales_pow2_(scales, w.scale_rows * w.scale_cols);
    } else {
        for (int64_t r = 0; r < n; r++)
            scales[r] = src->scales[src->row0 + r];
    }
    w.q = q;
    w.scales = scales;
    w.row_sums = sums;
    *out = w;
    return NUMLA_STATUS_OK;
}

static numla_status numla_qlinear_check_weight_(const numla_qlinear_weight *w)
{
    if (!w || !w->q || !w->scales)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qlinear: NULL weight, weights or scales");
    if ((unsigned)w->fmt >= NUMLA_QLINEAR_FORMAT_COUNT)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qlinear: weight format %d unknown", (int)w->fmt);
    if (w->n <= 0 || w->k <= 0 || w->kp != numla_qlinear_kp(w->k))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qlinear: weight shape N=%lld K=%lld Kp=%lld is not packed",
                   (long long)w->n, (long long)w->k, (long long)w->kp);
    if (w->fmt != NUMLA_QLINEAR_FP8_BLOCK && !w->row_sums)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qlinear: int8 weight without row sums");
    return NUMLA_STATUS_OK;
}

size_t numla_qlinear_workspace_size(const numla_qlinear_weight *w, int64_t m, int num_threads)
{
    if (numla_qlinear_check_weight_(w) != NUMLA_STATUS_OK || m <= 0) {
        numla_error_clear();
        return 0;
    }
    if (w->fmt == NUMLA_QLINEAR_INT8_W8A8) /* + the VNNI GEMM's packed chunks, at any level */
        return 64 + numla_qlinear_ws_w8a8_bytes(w, m) +
               (numla_qlinear_gemm_applies(w, m)
                    ? (size_t)(num_threads > 1 ? num_threads : 1) * numla_qlinear_gemm_thread_bytes(w)
                    : 0);
    /* Whatever level runs it (the caller does not say; the reference ignores the scratch):
     * the avx512 many-row path's per-thread scratch, int8-row's planes (with the GEMM's
     * per-thread scratch), or the amx tiles' packed x, which never run in one call together. */
    const size_t threads = (size_t)(num_threads > 1 ? num_threads : 1);
    size_t gemm = numla_qlinear_gemm_applies(w, m) ? threads * numla_qlinear_gemm_thread_bytes(w) : 0;
    if (numla_qlinear_int8row_planes_apply(w))
        gemm += numla_qlinear_ws_planes_bytes(w, m);
    size_t amx = numla_qlinear_amx_wide_applies(w, m) ? numla_qlinear_amx_wide_ws_bytes(w, m) : 0;
    size_t most = gemm > amx ? gemm : amx;
    const size_t rows = numla_qlinear_fp8_rows_ws_bytes(w, m); /* the avx512bf16 rows' packed x */
    most = rows > most ? rows : most;
    return most ? 64 + most : 0;
}

numla_status numla_qlinear_forward(numla_isa isa, const numla_qlinear_weight *w, int64_t m,
                                   const float *x, int64_t ldx, float *y, int64_t ldy,
                                   int accumulate, void *workspace, size_t workspace_bytes)
{
    NUMLA_CHECK(numla_qlinear_check_weight_(w));
    if ((unsigned)isa >= NUMLA_ISA_COUNT)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qlinear forward: isa %d out of range", (int)isa);
    if (m < 0)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qlinear forward: M=%lld is negative", (long long)m);
    if (m == 0)
        return NUMLA_STATUS_OK;
    if (!x || !y)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qlinear forward: NULL %s", !x ? "x" : "y");
    if (ldx < w->k || ldy < w->n)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "qlinear forward: ldx %lld < K %lld or ldy %lld < N %lld", (long long)ldx,
                   (long long)w->k, (long long)ldy, (long long)w->n);
    const char *xb = (const char *)x, *xe = (const char *)(x + (m - 1) * ldx + w->k);
    const char *yb = (const char *)y, *ye = (const char *)(y + (m - 1) * ldy + w->n);
    if (xb < ye && yb < xe)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qlinear forward: x and y overlap");
    /* At least one thread's worth; a team larger than the workspace holds runs on fewer
     * threads (results do not depend on the thread count). */
    size_t need = numla_qlinear_workspace_size(w, m, 1);
    if (need > 0 && (!workspace || workspace_bytes < need))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "qlinear forward: workspace %zu bytes < %zu needed (numla_qlinear_workspace_size)",
                   workspace ? workspace_bytes : (size_t)0, need);
    const numla_qlinear_variant *v = numla_qlinear_variant_(numla_qlinear_level(isa, w->fmt), w->fmt);
    const numla_qlinear_gemm_fn gemm = numla_qlinear_gemm_applies(w, m) ? v->gemm : NULL;
    if (gemm) {
        const size_t fixed = 64 + (w->fmt == NUMLA_QLINEAR_INT8_W8A8 ? numla_qlinear_ws_w8a8_bytes(w, m)
                                   : w->fmt == NUMLA_QLINEAR_INT8_ROW  ? numla_qlinear_ws_planes_bytes(w, m)
                                                                       : 0);
        const size_t per = numla_qlinear_gemm_thread_bytes(w), fit = (workspace_bytes - fixed) / per;
        gemm(w, m, x, ldx, y, ldy, accumulate, workspace, fit < 1024 ? (int)fit : 1024);
        return NUMLA_STATUS_OK;
    }
    v->forward(w, m, x, ldx, y, ldy, accumulate, need > 0 ? workspace : NULL);
    return NUMLA_STATUS_OK;
}
