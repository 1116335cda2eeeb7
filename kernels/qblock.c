/* kernels/qblock.c — the block-quantized linear dispatch table (per level and mode; what each
 * type has is its row in kernels/qblock_types.c), packing (ISA-independent) and argument
 * validation. The compute is in kernels/ref/qblock_ref.c and kernels/x86/qblock_<isa>.c; the
 * contract in kernels/qblock.h. */
#include "kernels/linear.h"
#include "kernels/qblock_internal.h"

#include <omp.h>

/* A variant: the head (kernels/isa.h; applies() is asked about the block type's row,
 * kernels/qblock_types.c) and its forward. */
typedef struct numla_qblock_variant {
    numla_variant v;
    numla_qblock_forward_fn forward;
} numla_qblock_variant;

/* A level runs a type where the type's row names its kernels there. */
static int numla_qblock_row_f32_(const void *row) { return ((const numla_qblock_type_row *)row)->f32_rows != NULL; }
static int numla_qblock_row_q8_(const void *row) { return numla_qblock_type_row_q8_vnni(row); }
static int numla_qblock_row_f32_avx2_(const void *row) { return ((const numla_qblock_type_row *)row)->f32_avx2 != NULL; }
static int numla_qblock_row_q8_avx2_(const void *row) { return ((const numla_qblock_type_row *)row)->q8_avx2 != NULL; }
static int numla_qblock_row_bf16_tile_(const void *row)
{
    return ((const numla_qblock_type_row *)row)->bf16_tile != NULL;
}

static const numla_qblock_variant numla_qblock_ref_ = {{"ref", 0, NULL}, numla_qblock_forward_ref};
static const numla_qblock_variant numla_qblock_f32_avx2_ = {{"avx2", 0, numla_qblock_row_f32_avx2_},
                                                            numla_qblock_forward_f32_avx2};
static const numla_qblock_variant numla_qblock_q8_avx2_ = {{"avx2", 0, numla_qblock_row_q8_avx2_},
                                                           numla_qblock_forward_avx2};
static const numla_qblock_variant numla_qblock_f32_avx512_ = {{"avx512", 0, numla_qblock_row_f32_},
                                                              numla_qblock_forward_avx512};
static const numla_qblock_variant numla_qblock_q8_avx512_ = {{"avx512vnni", NUMLA_CPU_VNNI, numla_qblock_row_q8_},
                                                             numla_qblock_forward_avx512vnni};
/* its tiles from NUMLA_QBLOCK_PANEL_MIN_M rows (Q6_K's in the PANEL16 layout), the vnni kernels
 * below (the amx level itself needs only AMX-BF16) */
static const numla_qblock_variant numla_qblock_q8_amx_ = {
    {"amx", NUMLA_CPU_AMX_INT8 | NUMLA_CPU_VNNI, numla_qblock_row_q8_}, numla_qblock_forward_amx};

/* F32 mode on AMX-BF16 tiles from NUMLA_QBLOCK_AMX_F32_MIN_M rows, the avx512 kernels below */
static const numla_qblock_variant numla_qblock_f32_amx_ = {{"amx", NUMLA_CPU_AMX_BF16, numla_qblock_row_bf16_tile_},
                                                           numla_qblock_forward_f32_amx};

/* Native variants per level and kind (the activation mode: F32, Q8); an empty entry, one whose
 * CPU needs are missing or whose type row names no kernels there inherits the level below. */
static const numla_variant *const numla_qblock_table_[NUMLA_ISA_COUNT][NUMLA_QBLOCK_ACT_COUNT] = {
    [NUMLA_ISA_REF] = {&numla_qblock_ref_.v, &numla_qblock_ref_.v},
    [NUMLA_ISA_AVX2] = {&numla_qblock_f32_avx2_.v, &numla_qblock_q8_avx2_.v},
    [NUMLA_ISA_AVX512] = {&numla_qblock_f32_avx512_.v, &numla_qblock_q8_avx512_.v},
    [NUMLA_ISA_AMX] = {&numla_qblock_f32_amx_.v, &numla_qblock_q8_amx_.v},
};

const numla_qblock_info *numla_qblock_info_get(numla_qblock_type type)
{
    return (unsigned)type < NUMLA_QBLOCK_TYPE_COUNT ? &numla_qblock_type_rows[type].info : NULL;
}

numla_status numla_qblock_from_ggml(uint32_t ggml_type, numla_qblock_type *out)
{
    for (int t = 0; t < NUMLA_QBLOCK_TYPE_COUNT; t++)
        if (numla_qblock_type_rows[t].info.ggml_type == ggml_type) {
            *out = (numla_qblock_type)t;
            return NUMLA_STATUS_OK;
        }
    NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "qblock: ggml type %u has no block encoding here", ggml_type);
}

numla_isa numla_qblock_level(numla_isa isa, numla_qblock_type type, numla_qblock_act act)
{
    if ((unsigned)type >= NUMLA_QBLOCK_TYPE_COUNT || (unsigned)act >= NUMLA_QBLOCK_ACT_COUNT ||
        (unsigned)isa >= NUMLA_ISA_COUNT)
        return NUMLA_ISA_REF;
    return numla_isa_pick(isa, &numla_qblock_table_[0][0], NUMLA_QBLOCK_ACT_COUNT, (int)act,
                          numla_qblock_type_row_get(type));
}

numla_status numla_qblock_dequant_ref(numla_qblock_type type, const void *src, int64_t n, float *dst)
{
    const numla_qblock_info *info = numla_qblock_info_get(type);
    if (!info)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qblock dequant: type %d unknown", (int)type);
    if (!src || !dst || n < 0 || n % info->block)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qblock dequant: %s needs a multiple of %d elements, got %lld",
                   info->name, info->block, (long long)n);
    for (int64_t b = 0; b < n / info->block; b++)
        numla_qblock_dequant_block_ref(type, (const uint8_t *)src + b * info->bytes, dst + b * info->block);
    return NUMLA_STATUS_OK;
}

int numla_qblock_q8_takes(numla_qblock_type type, int64_t k)
{
    if (k <= 0)
        return 0;
    if ((unsigned)type >= NUMLA_QBLOCK_TYPE_COUNT)
        return 0;
    const int32_t group = numla_qblock_type_row_get(type)->q8_group;
    return group && k % group == 0;
}

numla_qblock_act numla_qblock_act_for(numla_isa isa, numla_qblock_type type, int64_t k)
{
    if (!numla_qblock_q8_takes(type, k))
        return NUMLA_QBLOCK_ACT_F32;
    if (isa != NUMLA_ISA_REF && numla_qblock_level(isa, type, NUMLA_QBLOCK_ACT_Q8) == NUMLA_ISA_REF)
        return NUMLA_QBLOCK_ACT_F32;
    return NUMLA_QBLOCK_ACT_Q8;
}

static int64_t numla_qblock_ld_(const numla_qblock_info *info, int64_t k)
{
    return (k / info->block * info->bytes + 63) & ~(int64_t)63;
}

size_t numla_qblock_packed_size(numla_qblock_type type, int64_t n, int64_t k)
{
    const numla_qblock_info *info = numla_qblock_info_get(type);
    if (!info || n <= 0 || k <= 0 || k % info->block)
        return 0;
    return (size_t)n * (size_t)numla_qblock_ld_(info, k);
}

numla_status numla_qblock_pack(const numla_qblock_source *src, void *dst, numla_qblock_weight *out)
{
    if (!src || !dst || !out || !src->data)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qblock pack: NULL %s",
                   !src ? "source" : !dst ? "dst" : !out ? "out" : "data");
    const numla_qblock_info *info = numla_qblock_info_get(src->type);
    if (!info)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qblock pack: type %d unknown", (int)src->type);
    if (src->n <= 0 || src->k <= 0 || src->k % info->block)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qblock pack: %s slice N=%lld K=%lld: K must be a positive multiple "
                   "of the %d-element block", info->name, (long long)src->n, (long long)src->k, info->block);
    const int64_t row_bytes = src->k / info->block * info->bytes, ld = numla_qblock_ld_(info, src->k);
    if (src->ld < row_bytes)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qblock pack: %s source ld %lld < a row's %lld bytes", info->name,
                   (long long)src->ld, (long long)row_bytes);
    if ((uintptr_t)dst % 64)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qblock pack: dst %p is not 64-byte aligned", dst);
    if ((unsigned)src->act >= NUMLA_QBLOCK_ACT_COUNT ||
        (src->act == NUMLA_QBLOCK_ACT_Q8 && !numla_qblock_q8_takes(src->type, src->k)))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qblock pack: %s activation mode %d does not take K=%lld (Q8: a multiple "
                   "of the type's Q8 group, 256 or 32; none for an F32-only type)", info->name, (int)src->act, (long long)src->k);
    if (src->layout == NUMLA_QBLOCK_LAYOUT_PANEL16) {
        if (!numla_qblock_p16_takes_(src->type, src->act, src->k))
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qblock pack: the 16-row panel layout takes a type whose row names a "
                       "panel piece, in Q8 mode, K a multiple of the piece's columns; not %s act %d K=%lld", info->name, (int)src->act, (long long)src->k);
        return numla_qblock_p16_pack_(src, dst, out);
    }
    if (src->layout != NUMLA_QBLOCK_LAYOUT_ROWS)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qblock pack: layout %d unknown", (int)src->layout);
    uint8_t *d = dst;
    const uint8_t *s = src->data;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < src->n; r++) {
        memcpy(d + r * ld, s + r * src->ld, (size_t)row_bytes);
        memset(d + r * ld + row_bytes, 0, (size_t)(ld - row_bytes));
    }
    *out = (numla_qblock_weight){.type = src->type, .n = src->n, .k = src->k, .ld = ld, .q = d, .act = src->act};
    return NUMLA_STATUS_OK;
}

void numla_qblock_quantize_team_(const float *x, int64_t ldx, int64_t m, int64_t k, void *ws,
                                 numla_qblock_quantize_group_fn group)
{
    int8_t *xq = numla_qblock_ws_xq_(ws);
    float *dx = numla_qblock_ws_dx_(ws, m, k);
    int32_t *bs = numla_qblock_ws_bs_(ws, m, k);
    const int64_t ng = numla_qblock_q8_groups_(k);
    if (m * ng < NUMLA_QBLOCK_QUANT_TEAM_GROUPS || omp_in_parallel()) {
        for (int64_t t = 0; t < m * ng; t++)
            group(x, ldx, k, ng, t, xq, dx, bs);
        return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < m * ng; t++)
        group(x, ldx, k, ng, t, xq, dx, bs);
}

static numla_status numla_qblock_check_weight_(const numla_qblock_weight *w)
{
    if (!w || !w->q)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qblock forward: NULL weight");
    const numla_qblock_info *info = numla_qblock_info_get(w->type);
    if (!info)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qblock forward: weight type %d unknown", (int)w->type);
    const int p16 = w->layout == NUMLA_QBLOCK_LAYOUT_PANEL16;
    if (w->n <= 0 || w->k <= 0 || w->k % info->block ||
        (p16 ? !numla_qblock_p16_takes_(w->type, w->act, w->k) || w->ld != numla_qblock_p16_ld_(w->type, w->k)
             : w->layout != NUMLA_QBLOCK_LAYOUT_ROWS || w->ld != numla_qblock_ld_(info, w->k)) ||
        (unsigned)w->act >= NUMLA_QBLOCK_ACT_COUNT || (w->act == NUMLA_QBLOCK_ACT_Q8 && !numla_qblock_q8_takes(w->type, w->k)))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qblock forward: %s weight N=%lld K=%lld ld=%lld act=%d layout=%d is not packed",
                   info->name, (long long)w->n, (long long)w->k, (long long)w->ld, (int)w->act, (int)w->layout);
    return NUMLA_STATUS_OK;
}

size_t numla_qblock_workspace_size(const numla_qblock_weight *w, int64_t m, int num_threads)
{
    if (numla_qblock_check_weight_(w) != NUMLA_STATUS_OK || m <= 0) {
        numla_error_clear();
        return 0;
    }
    if (w->act == NUMLA_QBLOCK_ACT_Q8)
        return 64 + numla_qblock_align64_((size_t)(m * w->k)) +
               numla_qblock_align64_((size_t)(m * numla_qblock_q8_groups_(w->k)) * sizeof(float)) +
               numla_qblock_align64_((size_t)(m * (w->k / 16)) * sizeof(int32_t)) +
               (numla_qblock_panel_applies_(w, m)
                    ? (size_t)(num_threads > 1 ? num_threads : 1) * numla_qblock_panel_thread_bytes_(w)
                    : 0);
    /* whatever level runs it: the avx512 many-row path's decoded rows, or the amx tiles' packed x
     * and per-thread tiles, whichever is larger */
    const size_t th = (size_t)(num_threads > 1 ? num_threads : 1);
    size_t need = numla_qblock_many_applies_(w, m) ? 64 + th * numla_qblock_many_thread_bytes_(m, w->k) : 0;
    if (numla_qblock_amx_f32_applies_(w, m)) {
        const size_t amx = 64 + numla_qblock_amx_f32_x_bytes_(m, w->k) + th * numla_qblock_amx_f32_thread_bytes_();
        need = amx > need ? amx : need;
    }
    return need;
}

int64_t numla_qblock_row_invariant_m(numla_isa isa, const numla_qblock_weight *w)
{
    if (numla_qblock_check_weight_(w) != NUMLA_STATUS_OK) {
        numla_error_clear();
        return 1;
    }
    if (numla_qblock_level(isa, w->type, w->act) == NUMLA_ISA_AMX &&
        numla_qblock_amx_f32_applies_(w, NUMLA_QBLOCK_AMX_F32_MIN_M))
        return NUMLA_QBLOCK_AMX_F32_MIN_M - 1 < NUMLA_LINEAR_ROW_INVARIANT_M ? NUMLA_QBLOCK_AMX_F32_MIN_M - 1
                                                                           : NUMLA_LINEAR_ROW_INVARIANT_M;
    return NUMLA_LINEAR_ROW_INVARIANT_M;
}

numla_status numla_qblock_forward(numla_isa isa, const numla_qblock_weight *w, int64_t m, const float *x,
                                  int64_t ldx, float *y, int64_t ldy, int accumulate, void *workspace,
                                  size_t workspace_bytes)
{
    NUMLA_CHECK(numla_qblock_check_weight_(w));
    if ((unsigned)isa >= NUMLA_ISA_COUNT)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qblock forward: isa %d out of range", (int)isa);
    if (m < 0)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qblock forward: M=%lld is negative", (long long)m);
    if (m == 0)
        return NUMLA_STATUS_OK;
    if (!x || !y)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qblock forward: NULL %s", !x ? "x" : "y");
    if (ldx < w->k || ldy < w->n)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qblock forward: ldx %lld < K %lld or ldy %lld < N %lld",
                   (long long)ldx, (long long)w->k, (long long)ldy, (long long)w->n);
    const char *xb = (const char *)x, *xe = (const char *)(x + (m - 1) * ldx + w->k);
    const char *yb = (const char *)y, *ye = (const char *)(y + (m - 1) * ldy + w->n);
    if (xb < ye && yb < xe)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "qblock forward: x and y overlap");
    /* at least one thread's worth; a team larger than the workspace holds runs on fewer
     * threads (results do not depend on the thread count) */
    const size_t need = numla_qblock_workspace_size(w, m, 1);
    if (need > 0 && (!workspace || workspace_bytes < need))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "qblock forward: workspace %zu bytes < %zu needed (numla_qblock_workspace_size)",
                   workspace ? workspace_bytes : (size_t)0, need);
    const numla_qblock_variant *v =
        (const numla_qblock_variant *)numla_qblock_table_[numla_qblock_level(isa, w->type, w->act)][w->act];
    v->forward(w, m, x, ldx, y, ldy, accumulate, need ? workspace : NULL, need ? workspace_bytes : 0);
    return NUMLA_STATUS_OK;
}
