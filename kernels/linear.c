/* kernels/linear.c — the linear-layer dispatch table, the (ISA-independent) weight packing and
 * argument validation. The packed layout is described in kernels/linear_internal.h; the compute
 * lives in kernels/ref/linear_ref.c and kernels/x86/linear_<isa>.c. */
#include "kernels/linear_internal.h"

#include <string.h>

/* The few-row paths that keep a row's one-row bits cover the contract's M (kernels/linear.h). */
_Static_assert((int)NUMLA_LINEAR_ROW_INVARIANT_M <= (int)NUMLA_LINEAR_AVX512_MR &&
                   (int)NUMLA_LINEAR_ROW_INVARIANT_M <= (int)NUMLA_LINEAR_AVX2_ROWS_MAX_M &&
                   (int)NUMLA_LINEAR_ROW_INVARIANT_M < (int)NUMLA_LINEAR_AMX_MIN_M,
               "kernels/blocking.h: the row-invariant M of kernels/linear.h");

/* What a variant's applies() is asked about. */
typedef struct numla_linear_call {
    const numla_linear_weight *w;
    int64_t m;
} numla_linear_call;

static int numla_linear_avx512bf16_takes_(const void *call)
{
    const numla_linear_call *c = call;
    return numla_linear_avx512bf16_applies(c->w, c->m);
}

static int numla_linear_amx_takes_(const void *call)
{
    const numla_linear_call *c = call;
    return numla_linear_amx_applies(c->w, c->m);
}

static const numla_linear_impl numla_linear_ref_ = {{"ref", 0, NULL}, numla_linear_forward_ref, NULL};
static const numla_linear_impl numla_linear_avx2_ = {{"avx2", 0, NULL}, numla_linear_forward_avx2, NULL};
static const numla_linear_impl numla_linear_avx512_ = {{"avx512", 0, NULL}, numla_linear_forward_avx512,
                                                       numla_linear_workspace_avx512};
static const numla_linear_impl numla_linear_avx512bf16_ = {
    {"avx512bf16", 0, numla_linear_avx512bf16_takes_}, numla_linear_forward_avx512bf16,
    numla_linear_workspace_avx512bf16};
static const numla_linear_impl numla_linear_amx_ = {{"amx", NUMLA_CPU_AMX_BF16, numla_linear_amx_takes_},
                                                    numla_linear_forward_amx, numla_linear_workspace_amx};

/* Native variants per level (one kind); an empty entry, or one whose applies() does not take
 * the weight and M, inherits the level below. */
static const numla_variant *const numla_linear_table_[NUMLA_ISA_COUNT][1] = {
    [NUMLA_ISA_REF] = {&numla_linear_ref_.v},
    [NUMLA_ISA_AVX2] = {&numla_linear_avx2_.v},
    [NUMLA_ISA_AVX512] = {&numla_linear_avx512_.v},
    [NUMLA_ISA_AVX512BF16] = {&numla_linear_avx512bf16_.v},
    [NUMLA_ISA_AMX] = {&numla_linear_amx_.v},
};

static const numla_linear_impl *numla_linear_pick_(numla_isa isa, const numla_linear_weight *w,
                                                   int64_t m)
{
    const numla_linear_call call = {w, m};
    return (const numla_linear_impl *)numla_linear_table_[numla_isa_pick(isa, &numla_linear_table_[0][0], 1, 0,
                                                                         &call)][0];
}

static numla_dtype numla_linear_packed_dtype_(numla_dtype src)
{
    return src == NUMLA_DTYPE_BF16 ? NUMLA_DTYPE_BF16 : NUMLA_DTYPE_F32;
}

size_t numla_linear_packed_size(numla_isa isa, int64_t n, int64_t k, numla_dtype src_dtype)
{
    if (n <= 0 || k <= 0 || (unsigned)isa >= NUMLA_ISA_COUNT || (unsigned)src_dtype >= NUMLA_DTYPE_COUNT)
        return 0;
    size_t kk = (size_t)(src_dtype == NUMLA_DTYPE_BF16 ? numla_linear_kp(k) : k);
    return (size_t)numla_linear_panels(n) * NUMLA_LINEAR_NR * kk *
           numla_dtype_size(numla_linear_packed_dtype_(src_dtype));
}

numla_status numla_linear_pack(numla_isa isa, int64_t n, int64_t k, const void *src,
                               numla_dtype src_dtype, int64_t ld_src, void *dst,
                               numla_linear_weight *out)
{
    if ((unsigned)isa >= NUMLA_ISA_COUNT)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "linear pack: isa %d out of range", (int)isa);
    if (n <= 0 || k <= 0)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "linear pack: shape N=%lld K=%lld must be positive",
                   (long long)n, (long long)k);
    if ((unsigned)src_dtype >= NUMLA_DTYPE_COUNT)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "linear pack: source dtype %d unknown", (int)src_dtype);
    if (ld_src < k)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "linear pack: ld_src %lld < K %lld", (long long)ld_src,
                   (long long)k);
    if (!src || !dst || !out)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "linear pack: NULL %s",
                   !src ? "src" : !dst ? "dst" : "out");
    if ((uintptr_t)dst % 64)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "linear pack: dst %p is not 64-byte aligned", dst);

    numla_linear_weight w = {isa, n, k, numla_linear_packed_dtype_(src_dtype), dst,
                             NUMLA_LINEAR_ACT_F32};
    const int64_t panels = numla_linear_panels(n), kp = numla_linear_kp(k);
    const size_t pe = numla_linear_panel_elems(&w);
    const size_t es = numla_dtype_size(src_dtype);

    /* One panel per iteration: the thread that will stream a panel in forward (same static
     * split over N) touches it first, so its pages land on that thread's node. */
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < panels; p++) {
        for (int j = 0; j < NUMLA_LINEAR_NR; j++) {
            int64_t row = p * NUMLA_LINEAR_NR + j;
            const unsigned char *s = (const unsigned char *)src + (size_t)row * (size_t)ld_src * es;
            if (w.dtype == NUMLA_DTYPE_BF16) {
                uint16_t *d = (uint16_t *)dst + (size_t)p * pe;
                const uint16_t *sb = (const uint16_t *)(const void *)s;
                for (int64_t c = 0; c < kp; c++) {
                    uint16_t v = (row < n && c < k) ? sb[c] : 0;
                    d[(size_t)(c >> 1) * 2 * NUMLA_LINEAR_NR + (size_t)j * 2 + (size_t)(c & 1)] = v;
                }
            } else {
                float *d = (float *)dst + (size_t)p * pe;
                for (int64_t c = 0; c < k; c++)
                    d[(size_t)c * NUMLA_LINEAR_NR + (size_t)j] =
                        row < n ? numla_load_f32(s, src_dtype, (size_t)c) : 0.0f;
            }
        }
    }
    *out = w;
    return NUMLA_STATUS_OK;
}

/* The weight, and the level to run it at: every level reads the one packed layout
 * (kernels/linear_internal.h), so any in-range level runs any weight. */
static numla_status numla_linear_check_weight_(numla_isa isa, const numla_linear_weight *w)
{
    if ((unsigned)isa >= NUMLA_ISA_COUNT)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "linear: isa %d out of range", (int)isa);
    if (!w || !w->packed)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "linear: NULL weight or packed data");
    if ((unsigned)w->isa >= NUMLA_ISA_COUNT)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "linear: weight isa %d out of range", (int)w->isa);
    if (w->dtype != NUMLA_DTYPE_BF16 && w->dtype != NUMLA_DTYPE_F32)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "linear: packed dtype %s is neither bf16 nor f32",
                   numla_dtype_name(w->dtype));
    if (w->act != NUMLA_LINEAR_ACT_F32 && w->act != NUMLA_LINEAR_ACT_BF16)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "linear: activation mode %d is neither F32 nor BF16",
                   (int)w->act);
    if (w->n <= 0 || w->k <= 0)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "linear: weight shape N=%lld K=%lld must be positive",
                   (long long)w->n, (long long)w->k);
    return NUMLA_STATUS_OK;
}

size_t numla_linear_workspace_size(numla_isa isa, const numla_linear_weight *w, int64_t m,
                                   int num_threads)
{
    if (numla_linear_check_weight_(isa, w) != NUMLA_STATUS_OK || m <= 0) {
        numla_error_clear();
        return 0;
    }
    const numla_linear_impl *t = numla_linear_pick_(isa, w, m);
    return t->workspace ? t->workspace(w, m, num_threads) : 0;
}

numla_status numla_linear_forward(numla_isa isa, const numla_linear_weight *w, int64_t m,
                                  const float *x, int64_t ldx, float *y, int64_t ldy,
                                  int accumulate, void *workspace, size_t workspace_bytes)
{
    NUMLA_CHECK(numla_linear_check_weight_(isa, w));
    if (m < 0)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "linear forward: M=%lld is negative", (long long)m);
    if (m == 0)
        return NUMLA_STATUS_OK;
    if (!x || !y)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "linear forward: NULL %s", !x ? "x" : "y");
    if (ldx < w->k || ldy < w->n)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "linear forward: ldx %lld < K %lld or ldy %lld < N %lld", (long long)ldx,
                   (long long)w->k, (long long)ldy, (long long)w->n);
    /* x and y must not alias (y is written while x rows are still being read). */
    const char *xb = (const char *)x, *xe = (const char *)(x + (m - 1) * ldx + w->k);
    const char *yb = (const char *)y, *ye = (const char *)(y + (m - 1) * ldy + w->n);
    if (xb < ye && yb < xe)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "linear forward: x and y overlap");
    const numla_linear_impl *t = numla_linear_pick_(isa, w, m);
    /* Threads: the workspace is sized for a team of any size (see the ISA's workspace fn). */
    size_t need = t->workspace ? t->workspace(w, m, 0) : 0;
    if (need > 0 && (!workspace || workspace_bytes < need))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "linear forward: workspace %zu bytes < %zu needed (numla_linear_workspace_size)",
                   workspace ? workspace_bytes : (size_t)0, need);
    t->forward(w, m, x, ldx, y, ldy, accumulate, need > 0 ? workspace : NULL);
    return NUMLA_STATUS_OK;
}

int numla_linear_uses_amx(numla_isa isa, const numla_linear_weight *w, int64_t m)
{
    return isa == NUMLA_ISA_AMX && numla_linear_amx_applies(w, m);
}
