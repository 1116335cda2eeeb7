/* kernels/mha_prefill.c — mha_prefill dispatcher (kernels/mha_prefill.h): validates, picks the
 * variant for the ISA, and spreads (sequence, head, query block) tasks over one OpenMP region.
 * Variants live in ref/ and x86/. */
#include "kernels/mha_prefill_internal.h"

#include <omp.h>
#include <string.h>

static void pack_block(const numla_mha_prefill_args *a, int32_t b, int32_t h, int64_t kb,
                       float *kt);

static int numla_mha_prefill_avx2_takes_(const void *args) { return numla_mha_prefill_avx2_applies(args); }
static int numla_mha_prefill_amx_takes_(const void *args) { return numla_mha_prefill_amx_applies(args); }

static const numla_mha_prefill_impl numla_mha_prefill_ref_ = {{"ref", 0, NULL}, numla_mha_prefill_ref, NULL};
static const numla_mha_prefill_impl numla_mha_prefill_avx2_ = {
    {"avx2", 0, numla_mha_prefill_avx2_takes_}, numla_mha_prefill_avx2, pack_block};
static const numla_mha_prefill_impl numla_mha_prefill_avx512_ = {{"avx512", 0, NULL}, numla_mha_prefill_avx512,
                                                                 pack_block};
static const numla_mha_prefill_impl numla_mha_prefill_amx_ = {
    {"amx", NUMLA_CPU_AMX_BF16, numla_mha_prefill_amx_takes_}, numla_mha_prefill_avx512_amx,
    numla_mha_prefill_pack_block_amx};

/* Native variants per level (one kind), starting from ref; an empty entry inherits the level
 * below, and so does a level whose variant does not apply to the args. */
static const numla_variant *const numla_mha_prefill_table_[NUMLA_ISA_COUNT][1] = {
    [NUMLA_ISA_REF] = {&numla_mha_prefill_ref_.v},
    [NUMLA_ISA_AVX2] = {&numla_mha_prefill_avx2_.v},
    [NUMLA_ISA_AVX512] = {&numla_mha_prefill_avx512_.v},
    [NUMLA_ISA_AMX] = {&numla_mha_prefill_amx_.v},
};

static const numla_mha_prefill_impl *numla_mha_prefill_pick(numla_isa isa,
                                                           const numla_mha_prefill_args *a)
{
    const numla_isa level = numla_isa_pick(isa, &numla_mha_prefill_table_[0][0], 1, 0, a);
    return (const numla_mha_prefill_impl *)numla_mha_prefill_table_[level][0];
}

static size_t thread_bytes(const numla_mha_prefill_args *a)
{
    return (numla_mha_prefill_thread_floats(a) * sizeof(float) + 63) & ~(size_t)63;
}

static int64_t blocks_of(int32_t n)
{
    return ((int64_t)n + NUMLA_MHA_PREFILL_QB - 1) / NUMLA_MHA_PREFILL_QB;
}

static int64_t key_blocks_of(const numla_mha_prefill_args *a, int32_t b)
{
    return ((int64_t)a->prefix[b] + a->q_len[b] + NUMLA_MHA_PREFILL_KB - 1) / NUMLA_MHA_PREFILL_KB;
}

/* Floats of one (sequence, head)'s packed keys and values. */
static size_t kt_floats(const numla_mha_prefill_args *a, int32_t b)
{
    return (size_t)key_blocks_of(a, b) * numla_mha_prefill_kv_block_floats(a);
}

/* Workspace: per-thread scratch, then every (sequence, head)'s transposed keys (sequence by
 * sequence, head by head). */
size_t numla_mha_prefill_workspace_size(numla_isa isa, const numla_mha_prefill_args *args,
                                        int num_threads)
{
    (void)isa;
    size_t kt = 0;
    for (int32_t b = 0; b < args->num_seqs; b++)
        kt += kt_floats(args, b) * (size_t)args->num_heads;
    return thread_bytes(args) * (size_t)(num_threads > 0 ? num_threads : 1) + kt * sizeof(float) +
           64;
}

/* Keys and values of (sequence b, head h), key block kb, into kt's fp32 layout
 * (kernels/mha_prefill_internal.h): the avx2 and avx512 variants' packing. */
static void pack_block(const numla_mha_prefill_args *a, int32_t b, int32_t h, int64_t kb,
                       float *kt)
{
    const int32_t D = a->qk_dim, KB = NUMLA_MHA_PREFILL_KB;
    const int64_t nkeys = (int64_t)a->prefix[b] + a->q_len[b], j0 = kb * KB;
    float *dst = kt + (size_t)kb * numla_mha_prefill_kv_block_floats(a);
    const float *src = a->k + ((int64_t)a->k_start[b] + j0) * a->k_stride + (int64_t)h * D;
    const int32_t n = nkeys - j0 < KB ? (int32_t)(nkeys - j0) : KB;
    const int32_t Dv = a->v_dim;
    float *vd = dst + (size_t)D * KB;
    const float *vs = a->v + ((int64_t)a->k_start[b] + j0) * a->v_stride + (int64_t)h * Dv;
    for (int32_t j = 0; j < n; j++)
        for (int32_t d = 0; d < D; d++)
            dst[(size_t)d * KB + j] = src[(int64_t)j * a->k_stride + d];
    if (n < KB)
        for (int32_t d = 0; d < D; d++)
            memset(dst + (size_t)d * KB + n, 0, (size_t)(KB - n) * sizeof *dst);
    /* values contiguous per block: rows a head apart in v would alias in L1 */
    for (int32_t j = 0; j < n; j++)
        memcpy(vd + (size_t)j * Dv, vs + (int64_t)j * a->v_stride, (size_t)Dv * sizeof *vd);
}

numla_status numla_mha_prefill(numla_isa isa, const numla_mha_prefill_args *a, void *workspace,
                               size_t workspace_bytes)
{
    if ((unsigned)isa >= NUMLA_ISA_COUNT)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "mha_prefill: unknown ISA %d", (int)isa);
    if (a->num_seqs < 0 || a->num_heads < 1 || a->qk_dim < 1 || a->v_dim < 1)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "mha_prefill: bad shape (seqs %d, heads %d, qk_dim %d, v_dim %d)", a->num_seqs,
                   a->num_heads, a->qk_dim, a->v_dim);
    if (a->num_seqs == 0)
        return NUMLA_STATUS_OK;
    if (!a->q_start || !a->q_len || !a->k_start || !a->prefix || !a->q || !a->k || !a->v ||
        !a->out)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "mha_prefill: NULL pointer argument");
    const int64_t H = a->num_heads;
    if (a->q_stride < H * a->qk_dim || a->k_stride < H * a->qk_dim || a->v_stride < H * a->v_dim ||
        a->out_stride < H * a->v_dim)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "mha_prefill: row strides (q %lld, k %lld, v %lld, out %lld) below H·D",
                   (long long)a->q_stride, (long long)a->k_stride, (long long)a->v_stride,
                   (long long)a->out_stride);
    int64_t tasks = 0;
    for (int32_t b = 0; b < a->num_seqs; b++) {
        if (a->q_len[b] < 0 || a->prefix[b] < 0 || a->q_start[b] < 0 || a->k_start[b] < 0)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                       "mha_prefill: sequence %d has q_len %d, prefix %d, q_start %d, k_start %d",
                       b, a->q_len[b], a->prefix[b], a->q_start[b], a->k_start[b]);
        tasks += blocks_of(a->q_len[b]) * H;
    }
    const int nt = omp_get_max_threads();
    const size_t tb = thread_bytes(a);
    if (!workspace || workspace_bytes < numla_mha_prefill_workspace_size(isa, a, nt))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "mha_prefill: workspace of %zu bytes, need %zu",
                   workspace_bytes, numla_mha_prefill_workspace_size(isa, a, nt));
    char *ws = (char *)(((uintptr_t)workspace + 63) & ~(uintptr_t)63);
    float *kt_all = (float *)(ws + tb * (size_t)nt);
    /* the variant and its packing, decided once here for the packing and every task */
    const numla_mha_prefill_impl *impl = numla_mha_prefill_pick(isa, a);
    const numla_mha_prefill_fn fn = impl->attend;
    int64_t ktasks = 0;
    for (int32_t b = 0; impl->pack && b < a->num_seqs; b++)
        ktasks += key_blocks_of(a, b) * H;
#pragma omp parallel num_threads(nt) if (tasks > 1)
    {
        /* 1. transpose every (sequence, head, key block) once; each thread walks its
         * sequences forward, so its indices must increase. A static schedule is monotonic
         * anyway (OpenMP 5.0); the modifier says what the walk relies on. */
        int32_t b = 0;
        int64_t base = 0;
        size_t off = 0; /* floats of kt_all before sequence b */
#pragma omp for schedule(monotonic : static)
        for (int64_t t = 0; t < ktasks; t++) {
            while (t >= base + key_blocks_of(a, b) * H) {
                base += key_blocks_of(a, b) * H;
                off += kt_floats(a, b) * (size_t)H;
                b++;
            }
            const int64_t nkb = key_blocks_of(a, b), r = t - base;
            const int32_t h = (int32_t)(r / nkb);
            impl->pack(a, b, h, r % nkb, kt_all + off + (size_t)h * kt_floats(a, b));
        }
        /* 2. attention tasks (the implicit barrier above published kt_all) */
        float *scratch = (float *)(ws + tb * (size_t)omp_get_thread_num());
        b = 0;
        base = 0;
        off = 0;
#pragma omp for schedule(monotonic : dynamic, 1)
        for (int64_t t = 0; t < tasks; t++) {
            /* each thread's chunks in increasing order, for the same forward walk: without
             * `monotonic`, OpenMP 5 lets a dynamic schedule hand them out in any order, and
             * LLVM's libomp does (it steals) */
            while (t >= base + blocks_of(a->q_len[b]) * H) {
                base += blocks_of(a->q_len[b]) * H;
                off += kt_floats(a, b) * (size_t)H;
                b++;
            }
            const int64_t nb = blocks_of(a->q_len[b]), r = t - base;
            /* longest tasks (last query blocks, most keys) first */
            const int64_t blk = nb - 1 - r / H;
            const int32_t h = (int32_t)(r % H);
            const int32_t i0 = (int32_t)(blk * NUMLA_MHA_PREFILL_QB);
            int32_t i1 = i0 + NUMLA_MHA_PREFILL_QB;
            if (i1 > a->q_len[b])
                i1 = a->q_len[b];
            fn(a, b, h, i0, i1, scratch, kt_all + off + (size_t)h * kt_floats(a, b));
        }
    }
    return NUMLA_STATUS_OK;
}
