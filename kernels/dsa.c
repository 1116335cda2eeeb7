/* kernels/dsa.c — the DSA frame (kernels/dsa.h): dispatch tables, validation, work plans,
 * OpenMP drivers, the indexer's fused top-k (a candidate buffer fed one key block at a time,
 * so scores never leave L1, cut back to the best topk by a selection whenever it fills) and its
 * candidate merge, and the sparse attention's LSE merge.
 *
 * Plans (both calls): the work of a query (indexer: its visible keys; attention: each head
 * block's selected rows) is cut into parts of at least `chunk` = max(minimum, total / (8 ·
 * threads)). A query cut once writes its result directly; a query cut s >= 2 times writes s
 * partial results into workspace slots that a second phase merges. Σ (s - 1) < total / chunk
 * <= 8 · threads, so items <= units + 8 · threads and slots <= 16 · threads whatever the
 * lengths: the workspace depends on shapes and thread count only.
 */
#include "kernels/dsa.h"
#include "kernels/dsa_internal.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define NUMLA_DSA_FTZ_DAZ 0x8040u /* MXCSR flush-to-zero | denormals-are-zero */
#endif

/* Indexer variants per level and kind: the int8 indexer (I8 index keys) and the float one
 * (every other key type). An empty entry inherits the level below, and so does one whose
 * applies() does not take the call (amx runs avx512bf16's; the int8 kind at avx512 without
 * VNNI runs avx2's). */
enum { NUMLA_DSA_INDEX_I8 = 0, NUMLA_DSA_INDEX_FLOAT, NUMLA_DSA_INDEX_KINDS };
static const numla_variant *const numla_dsa_index_table_[NUMLA_ISA_COUNT][NUMLA_DSA_INDEX_KINDS] = {
    [NUMLA_ISA_REF] = {&numla_dsa_index_kernel_i8_ref.v, &numla_dsa_index_kernel_ref.v},
    [NUMLA_ISA_AVX2] = {&numla_dsa_index_kernel_i8_avx2.v, &numla_dsa_index_kernel_avx2.v},
    [NUMLA_ISA_AVX512] = {&numla_dsa_index_kernel_i8_avx512vnni.v, &numla_dsa_index_kernel_avx512.v},
    [NUMLA_ISA_AVX512BF16] = {NULL, &numla_dsa_index_kernel_avx512bf16.v}, /* bf16 q and cache */
};

/* Sparse attention's variants per level (one kind; a bf16 cache at avx512bf16, amx inherits). */
static const numla_variant *const numla_dsa_attn_table_[NUMLA_ISA_COUNT][1] = {
    [NUMLA_ISA_REF] = {&numla_dsa_attn_kernel_ref.v},
    [NUMLA_ISA_AVX2] = {&numla_dsa_attn_kernel_avx2.v},
    [NUMLA_ISA_AVX512] = {&numla_dsa_attn_kernel_avx512.v},
    [NUMLA_ISA_AVX512BF16] = {&numla_dsa_attn_kernel_avx512bf16.v},
};

static const numla_dsa_index_kernel *numla_dsa_index_pick(numla_isa isa, const numla_dsa_index_args *a)
{
    const int kind = a->k_dtype == NUMLA_DTYPE_I8 ? NUMLA_DSA_INDEX_I8 : NUMLA_DSA_INDEX_FLOAT;
    const numla_isa level = numla_isa_pick(isa, &numla_dsa_index_table_[0][0], NUMLA_DSA_INDEX_KINDS, kind, a);
    return (const numla_dsa_index_kernel *)numla_dsa_index_table_[level][kind];
}

static const numla_dsa_attn_kernel *numla_dsa_attn_pick(numla_isa isa, const numla_dsa_attn_args *a)
{
    return (const numla_dsa_attn_kernel *)numla_dsa_attn_table_[numla_isa_pick(isa, &numla_dsa_attn_table_[0][0], 1,
                                                                               0, a)][0];
}

const char *numla_dsa_index_variant(numla_isa isa, const numla_dsa_index_args *a)
{
    return numla_dsa_index_pick(isa, a)->v.name;
}

const char *numla_dsa_attn_variant(numla_isa isa, const numla_dsa_attn_args *a)
{
    return numla_dsa_attn_pick(isa, a)->v.name;
}

static size_t numla_dsa_align(size_t n) { return (n + 63) & ~(size_t)63; }

/* ---- shared shape checks ------------------------------------------------------------------ */

/* Queries of each sequence and the paged table (shared by both calls). */
static numla_status numla_dsa_validate_paging(const char *who, int32_t B, int32_t bs, int64_t nblk,
                                              int32_t mbps, int32_t stride, const int32_t *tables,
                                              const int32_t *lens, const int32_t *qsl, int causal)
{
    if (B < 0 || bs < 1 || nblk < 0 || mbps < 0)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "%s: bad sizes (num_seqs %d, block_size %d, num_blocks %lld, max_blocks_per_seq %d)",
                   who, B, bs, (long long)nblk, mbps);
    if (stride != 0 && stride < mbps)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "%s: block_table_stride %d is neither 0 (one shared table) nor >= max_blocks_per_seq %d",
                   who, stride, mbps);
    int32_t shared_nb = 0; /* a shared table: its entries checked once, up to the longest */
    if (B > 0 && (!tables || !lens))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "%s: block_tables or seq_lens is NULL", who);
    if (qsl && qsl[0] != 0)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "%s: query_start_loc[0] is %d, not 0", who, qsl[0]);
    for (int32_t b = 0; b < B; b++) {
        if (lens[b] < 0 || (int64_t)lens[b] > (int64_t)mbps * bs)
            NUMLA_FAIL(NUMLA_STATUS_OUT_OF_RANGE,
                       "%s: seq_lens[%d] = %d outside 0 ..= %lld (max_blocks_per_seq x block_size)",
                       who, b, lens[b], (long long)mbps * bs);
        if (qsl) {
            int64_t n = (int64_t)qsl[b + 1] - qsl[b];
            if (n < 0)
                NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "%s: query_start_loc decreases at %d", who, b + 1);
            if (causal && n > lens[b])
                NUMLA_FAIL(NUMLA_STATUS_OUT_OF_RANGE,
                           "%s: sequence %d has %lld causal queries but seq_lens %d", who, b,
                           (long long)n, lens[b]);
        }
        int32_t nb = (int32_t)(((int64_t)lens[b] + bs - 1) / bs);
        if (stride == 0) {
            shared_nb = nb > shared_nb ? nb : shared_nb;
            continue;
        }
        for (int32_t j = 0; j < nb; j++) {
            int32_t e = tables[(int64_t)b * stride + j];
            if (e < 0 || e >= nblk)
                NUMLA_FAIL(NUMLA_STATUS_OUT_OF_RANGE,
                           "%s: block_tables[%d][%d] = %d outside 0 .. num_blocks-1 (%lld)", who, b,
                           j, e, (long long)nblk - 1);
        }
    }
    for (int32_t j = 0; j < shared_nb; j++)
        if (tables[j] < 0 || tables[j] >= nblk)
            NUMLA_FAIL(NUMLA_STATUS_OUT_OF_RANGE,
                       "%s: block_tables[%d] (shared) = %d outside 0 .. num_blocks-1 (%lld)", who,
                       j, tables[j], (long long)nblk - 1);
    return NUMLA_STATUS_OK;
}

static int numla_dsa_dtype_ok(numla_dtype t)
{
    return t == NUMLA_DTYPE_F32 || t == NUMLA_DTYPE_BF16 || t == NUMLA_DTYPE_F16;
}

void numla_dsa_key_quantize(const float *k, int32_t head_dim, void *row)
{
    int32_t sum = 0;
    const float s = numla_dsa_quantize_row(k, 1, head_dim, (int8_t *)row, &sum);
    memcpy((char *)row + head_dim, &s, 4);
    memcpy((char *)row + head_dim + 4, &sum, 4);
}

static int64_t numla_dsa_num_queries(int32_t B, const int32_t *qsl) { return qsl ? qsl[B] : B; }

/* ---- indexer ------------------------------------------------------------------------------ */

/* A scored key as one integer that orders like the selection rule: the score's bits made
 * monotonic (sign flipped for positives, all bits for negatives; -0 is first made +0) above the
 * complemented position, so a larger key is a higher score or, at an equal score, a lower
 * position. One unsigned compare ranks two candidates. */
typedef uint64_t numla_dsa_cand;

static inline numla_dsa_cand numla_dsa_cand_of(float s, int64_t t)
{
    uint32_t u;
    s += 0.0f; /* -0 -> +0: they are equal scores */
    memcpy(&u, &s, 4);
    u ^= (u >> 31) ? 0xffffffffu : 0x80000000u;
    return (uint64_t)u << 32 | (uint32_t)~(uint32_t)t;
}

static inline int32_t numla_dsa_cand_pos(numla_dsa_cand c) { return (int32_t)~(uint32_t)c; }

static inline float numla_dsa_cand_score(numla_dsa_cand c)
{
    uint32_t u = (uint32_t)(c >> 32);
    u ^= (u >> 31) ? 0x80000000u : 0xffffffffu;
    float s;
    memcpy(&s, &u, 4);
    return s;
}

typedef struct numla_dsa_index_item {
    int32_t seq, slot; /* slot -1: write the query's output directly */
    int64_t q;         /* global query (the first of a group) */
    int64_t k0, k1;    /* a group: 0 and the largest of its queries' limits */
    int32_t nq, pad_;  /* queries q .. q+nq-1 (nq > 1 only for unsplit queries: slot -1) */
} numla_dsa_index_item;

typedef struct numla_dsa_index_merge {
    int64_t q;
    int32_t slot0, nslots;
} numla_dsa_index_merge;

typedef struct numla_dsa_index_layout {
    size_t items, merges, cand, cand_n, thread, thread_stride, total;
    size_t qt, packed, ws, sc, buf, sel, scratch; /* offsets inside a thread's part */
    int64_t max_items, max_merges, max_slots;
} numla_dsa_index_layout;

static numla_dsa_index_layout numla_dsa_index_plan_layout(const numla_dsa_index_kernel *k,
                                                          const numla_dsa_index_args *a, int nt)
{
    numla_dsa_index_layout L = {0};
    const int64_t T = numla_dsa_num_queries(a->num_seqs, a->query_start_loc);
    const int64_t pt = (int64_t)NUMLA_DSA_ITEMS_PER_THREAD * (nt > 0 ? nt : 1);
    L.max_items = T + pt + 1;
    L.max_merges = pt + 1;
    L.max_slots = 2 * pt + 1;
    size_t o = 0;
    L.items = o, o += numla_dsa_align((size_t)L.max_items * sizeof(numla_dsa_index_item));
    L.merges = o, o += numla_dsa_align((size_t)L.max_merges * sizeof(numla_dsa_index_merge));
    L.cand = o, o += numla_dsa_align((size_t)L.max_slots * (size_t)a->topk * sizeof(numla_dsa_cand));
    L.cand_n = o, o += numla_dsa_align((size_t)L.max_slots * sizeof(int32_t));
    size_t t = 0;
    const size_t G = a->query_start_loc ? NUMLA_DSA_INDEX_GROUP : 1;
    L.qt = t, t += numla_dsa_align((size_t)a->head_dim * (size_t)a->num_heads * sizeof(float));
    L.packed = t, t += G * numla_dsa_align(k->packed_bytes(a));
    L.ws = t, t += G * numla_dsa_align((size_t)a->num_heads * sizeof(float));
    L.sc = t, t += numla_dsa_align(NUMLA_DSA_KEY_BLOCK * sizeof(float));
    L.buf = t, t += G * numla_dsa_align(2 * (size_t)a->topk * sizeof(numla_dsa_cand));
    L.sel = t, t += numla_dsa_align(2 * (size_t)a->topk * sizeof(numla_dsa_cand));
    L.scratch = t, t += numla_dsa_align(k->scratch_bytes ? k->scratch_bytes(a) : 0);
    L.thread = o;
    L.thread_stride = t;
    L.total = o + (size_t)(nt > 0 ? nt : 1) * t + 64;
    return L;
}

size_t numla_dsa_index_workspace_size(numla_isa isa, const numla_dsa_index_args *a, int num_threads)
{
    return numla_dsa_index_plan_layout(numla_dsa_index_pick(isa, a), a, num_threads).total;
}

static numla_status numla_dsa_index_validate(const numla_dsa_index_args *a)
{
    if (!a)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "dsa_index: args is NULL");
    if (a->num_heads < 1 || a->head_dim < 1 || a->topk < 1)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "dsa_index: num_heads %d, head_dim %d, topk %d must all be >= 1", a->num_heads,
                   a->head_dim, a->topk);
    if (!numla_dsa_dtype_ok(a->q_dtype) ||
        (!numla_dsa_dtype_ok(a->k_dtype) && a->k_dtype != NUMLA_DTYPE_I8))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "dsa_index: q_dtype must be f32, f16 or bf16 and k_dtype one of those or i8");
    if (a->k_dtype == NUMLA_DTYPE_I8 && a->head_dim % 4 != 0)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "dsa_index: head_dim %d must be a multiple of 4 for an i8 index-key cache",
                   a->head_dim);
    if (a->num_seqs > 0 && (!a->q || !a->w || !a->kcache || !a->indices || !a->counts))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "dsa_index: q, w, kcache, indices or counts is NULL");
    return numla_dsa_validate_paging("dsa_index", a->num_seqs, a->block_size, a->num_blocks,
                                     a->max_blocks_per_seq, a->block_table_stride,
                                     a->block_tables, a->seq_lens, a->query_start_loc,
                                     a->query_start_loc && a->causal);
}

static int64_t numla_dsa_index_limit(const numla_dsa_index_args *a, int32_t b, int64_t i)
{
    int64_t L = a->seq_lens[b];
    if (a->query_start_loc && a->causal)
        return L - ((int64_t)a->query_start_loc[b + 1] - a->query_start_loc[b]) + i + 1;
    return L;
}

static int64_t numla_dsa_index_plan(const numla_dsa_index_args *a, int nt,
                                    numla_dsa_index_item *items, numla_dsa_index_merge *merges,
                                    int64_t *num_merges)
{
    const int32_t *qsl = a->query_start_loc;
    int64_t total = 0;
    for (int32_t b = 0; b < a->num_seqs; b++) {
        int64_t n = qsl ? (int64_t)qsl[b + 1] - qsl[b] : 1;
        for (int64_t i = 0; i < n; i++)
            total += numla_dsa_index_limit(a, b, i);
    }
    int64_t chunk = (total + (int64_t)NUMLA_DSA_ITEMS_PER_THREAD * nt - 1) /
                    ((int64_t)NUMLA_DSA_ITEMS_PER_THREAD * nt);
    if (chunk < NUMLA_DSA_INDEX_MIN_CHUNK)
        chunk = NUMLA_DSA_INDEX_MIN_CHUNK;
    if (chunk < 2 * (int64_t)a->topk)
        chunk = 2 * (int64_t)a->topk;
    /* groups of unsplit queries, as long as every thread still gets a few items */
    const int64_t T = numla_dsa_num_queries(a->num_seqs, qsl);
    int64_t G = qsl ? T / (4 * (int64_t)nt) : 1;
    G = G < 1 ? 1 : G > NUMLA_DSA_INDEX_GROUP ? NUMLA_DSA_INDEX_GROUP : G;
    int64_t n = 0, nm = 0;
    int32_t slot = 0;
    for (int32_t b = 0; b < a->num_seqs; b++) {
        int64_t nq = qsl ? (int64_t)qsl[b + 1] - qsl[b] : 1, q0 = qsl ? qsl[b] : b;
        for (int64_t i = 0; i < nq; i++) {
            int64_t lim = numla_dsa_index_limit(a, b, i);
            int64_t s = lim > chunk ? (lim + chunk - 1) / chunk : 1;
            s = s > nt ? nt : s; /* more parts than threads only adds merges */
            if (s == 1 && G > 1) {
                /* this query and the following unsplit ones of the sequence (limits grow with
                 * i, so the last one's is the group's key end) */
                int64_t g = 1, end = lim;
                while (g < G && i + g < nq && numla_dsa_index_limit(a, b, i + g) <= chunk)
                    end = numla_dsa_index_limit(a, b, i + g), g++;
                items[n++] = (numla_dsa_index_item){.seq = b, .q = q0 + i, .slot = -1, .k0 = 0,
                                                    .k1 = end, .nq = (int32_t)g};
                i += g - 1;
                continue;
            }
            if (s > 1)
                merges[nm++] = (numla_dsa_index_merge){.q = q0 + i, .slot0 = slot, .nslots = (int32_t)s};
            for (int64_t j = 0; j < s; j++)
                items[n++] = (numla_dsa_index_item){
                    .seq = b, .q = q0 + i, .slot = s > 1 ? slot + (int32_t)j : -1,
                    .k0 = j * lim / s, .k1 = (j + 1) * lim / s, .nq = 1};
            if (s > 1)
                slot += (int32_t)s;
        }
    }
    *num_merges = nm;
    return n;
}

/* x ranks above y: higher score, or the same score at a lower position. */
static inline int numla_dsa_better(numla_dsa_cand x, numla_dsa_cand y) { return x > y; }

/* The element that ranks r-th (0: the best) among a[0 .. n-1], which it reorders. Quickselect
 * with a middle pivot; the order is total (positions differ), so no run of equal keys can
 * degrade it. */
static numla_dsa_cand numla_dsa_select(numla_dsa_cand *a, int32_t n, int32_t r)
{
    int32_t lo = 0, hi = n - 1;
    while (hi > lo) {
        const numla_dsa_cand p = a[lo + (hi - lo) / 2];
        int32_t i = lo, j = hi;
        while (i <= j) {
            while (numla_dsa_better(a[i], p))
                i++;
            while (numla_dsa_better(p, a[j]))
                j--;
            if (i <= j) {
                const numla_dsa_cand x = a[i];
                a[i++] = a[j];
                a[j--] = x;
            }
        }
        /* a[lo .. j] rank above a[i .. hi]; between them only the pivot */
        if (r <= j)
            hi = j;
        else if (r >= i)
            lo = i;
        else
            break;
    }
    return a[r];
}

/* Top-k of a stream of candidates arriving in ascending position order: they are appended to
 * a buffer of 2 · topk while they beat the topk-th best seen so far (thr); when the buffer is
 * full a selection finds the new topk-th best and keeps the topk that rank at or above it, in
 * their (ascending) order. Each candidate costs a comparison and, if it enters, an amortised
 * constant, not a heap's log2(topk) unpredictable branches, and the kept set comes out
 * sorted by position. */
typedef struct numla_dsa_topk {
    numla_dsa_cand *c; /* (2 · k) */
    int32_t n, k, full, pad_;
    numla_dsa_cand thr; /* valid once full: the k-th best so far */
} numla_dsa_topk;

/* Keep the best k of the buffer (n > k). sel: 2 · k scratch entries. */
static void numla_dsa_topk_cut(numla_dsa_topk *b, numla_dsa_cand *sel)
{
    memcpy(sel, b->c, (size_t)b->n * sizeof *sel);
    const numla_dsa_cand kth = numla_dsa_select(sel, b->n, b->k - 1);
    int32_t m = 0;
    for (int32_t i = 0; i < b->n; i++)
        if (!numla_dsa_better(kth, b->c[i]))
            b->c[m++] = b->c[i];
    b->n = m; /* == k: the order is total */
    b->thr = kth;
    b->full = 1;
}

static inline void numla_dsa_topk_add(numla_dsa_topk *b, numla_dsa_cand x, numla_dsa_cand *sel)
{
    if (b->full && !numla_dsa_better(x, b->thr))
        return;
    b->c[b->n++] = x;
    if (b->n == 2 * b->k)
        numla_dsa_topk_cut(b, sel);
}

/* The final set (at most k, ascending positions). */
static void numla_dsa_topk_finish(numla_dsa_topk *b, numla_dsa_cand *sel)
{
    if (b->n > b->k)
        numla_dsa_topk_cut(b, sel);
}

/* indices[q] = the kept positions (ascending), -1 padded; counts[q] = n. */
static void numla_dsa_index_store(const numla_dsa_index_args *a, int64_t q, const numla_dsa_cand *h,
                                  int32_t n)
{
    int32_t *dst = a->indices + q * (int64_t)a->topk;
    for (int32_t i = 0; i < n; i++)
        dst[i] = numla_dsa_cand_pos(h[i]);
    for (int32_t i = n; i < a->topk; i++)
        dst[i] = -1;
    a->counts[q] = n;
}

static void numla_dsa_index_run_item(const numla_dsa_index_kernel *k, const numla_dsa_index_args *a,
                                     const numla_dsa_index_item *it, char *t,
                                     const numla_dsa_index_layout *L, numla_dsa_cand *cand,
                                     int32_t *cand_n)
{
    const int32_t H = a->num_heads, D = a->head_dim, nq = it->nq;
    const size_t pk_stride = numla_dsa_align(k->packed_bytes(a));
    const size_t ws_stride = numla_dsa_align((size_t)H * sizeof(float));
    const size_t buf_stride = numla_dsa_align(2 * (size_t)a->topk * sizeof(numla_dsa_cand));
    float *sc = (float *)(t + L->sc), *qt = (float *)(t + L->qt);
    numla_dsa_cand *sel = (numla_dsa_cand *)(t + L->sel);
    numla_dsa_topk tk[NUMLA_DSA_INDEX_GROUP];
    int64_t lim[NUMLA_DSA_INDEX_GROUP];
    const int64_t qb = a->query_start_loc ? a->query_start_loc[it->seq] : it->seq;
    for (int32_t g = 0; g < nq; g++) {
        float *ws = (float *)(t + L->ws + g * ws_stride);
        const int64_t q = it->q + g;
        const size_t qbase = (size_t)q * (size_t)H * (size_t)D;
        for (int32_t h = 0; h < H; h++) {
            ws[h] = a->w[(size_t)q * (size_t)H + (size_t)h] * a->scale;
            for (int32_t d = 0; d < D; d++)
                qt[(size_t)d * H + h] = numla_load_f32(a->q, a->q_dtype, qbase + (size_t)h * D + d);
        }
        k->prepare(a, qt, ws, t + L->packed + g * pk_stride);
        tk[g] = (numla_dsa_topk){.c = (numla_dsa_cand *)(t + L->buf + g * buf_stride), .k = a->topk};
        /* one query: the item's range (a split part); a group: each query's own limit */
        lim[g] = nq == 1 ? it->k1 : numla_dsa_index_limit(a, it->seq, q - qb);
    }
    /* key block outer, queries inner: a block's rows come from memory once per group */
    for (int64_t k0 = it->k0; k0 < it->k1; k0 += NUMLA_DSA_KEY_BLOCK) {
        for (int32_t g = 0; g < nq; g++) {
            const int64_t k1 = lim[g] - k0 < NUMLA_DSA_KEY_BLOCK ? lim[g] : k0 + NUMLA_DSA_KEY_BLOCK;
            if (k1 <= k0)
                continue;
            k->scores(a, t + L->packed + g * pk_stride, (const float *)(t + L->ws + g * ws_stride),
                      it->seq, k0, k1, sc, t + L->scratch);
            numla_dsa_topk *b = &tk[g];
            if (b->full) { /* most keys fail this one comparison */
                /* keys of the same score as thr's come after it and rank below: only a higher
                 * score enters */
                const float thr = numla_dsa_cand_score(b->thr);
                for (int64_t j = k0; j < k1; j++)
                    if (sc[j - k0] > thr)
                        numla_dsa_topk_add(b, numla_dsa_cand_of(sc[j - k0], j), sel);
            } else {
                for (int64_t j = k0; j < k1; j++)
                    numla_dsa_topk_add(b, numla_dsa_cand_of(sc[j - k0], j), sel);
            }
        }
    }
    for (int32_t g = 0; g < nq; g++) {
        numla_dsa_topk *b = &tk[g];
        numla_dsa_topk_finish(b, sel);
        if (it->slot < 0) {
            numla_dsa_index_store(a, it->q + g, b->c, b->n);
            continue;
        }
        memcpy(cand + (size_t)it->slot * (size_t)a->topk, b->c, (size_t)b->n * sizeof *b->c);
        cand_n[it->slot] = b->n;
    }
}

numla_status numla_dsa_index(numla_isa isa, const numla_dsa_index_args *a, void *workspace,
                             size_t workspace_bytes)
{
    NUMLA_CHECK(numla_dsa_index_validate(a));
    if (a->num_seqs == 0)
        return NUMLA_STATUS_OK;
    const numla_dsa_index_kernel *k = numla_dsa_index_pick(isa, a);
    int nt = omp_get_max_threads();
    numla_dsa_index_layout L = numla_dsa_index_plan_layout(k, a, nt);
    if (!workspace || workspace_bytes < L.total)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "dsa_index: workspace of %zu bytes is smaller than the %zu needed for %d threads",
                   workspace_bytes, L.total, nt);
    char *ws = (char *)(((uintptr_t)workspace + 63) & ~(uintptr_t)63);
    numla_dsa_index_item *items = (numla_dsa_index_item *)(ws + L.items);
    numla_dsa_index_merge *merges = (numla_dsa_index_merge *)(ws + L.merges);
    numla_dsa_cand *cand = (numla_dsa_cand *)(ws + L.cand);
    int32_t *cand_n = (int32_t *)(ws + L.cand_n);
    int64_t nm = 0, n = numla_dsa_index_plan(a, nt, items, merges, &nm);
    int use = (int)(n < nt ? n : nt);
    if (use < 1)
        use = 1;
#pragma omp parallel num_threads(use)
    {
        char *t = ws + L.thread + (size_t)omp_get_thread_num() * L.thread_stride;
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < n; i++)
            numla_dsa_index_run_item(k, a, &items[i], t, &L, cand, cand_n);
#pragma omp for schedule(dynamic, 1)
        for (int64_t j = 0; j < nm; j++) {
            /* the parts cover consecutive key ranges in slot order, so their candidates arrive
             * in ascending positions, as the top-k buffer wants */
            numla_dsa_topk b = {.c = (numla_dsa_cand *)(t + L.buf), .k = a->topk};
            numla_dsa_cand *sel = (numla_dsa_cand *)(t + L.sel);
            for (int32_t s = 0; s < merges[j].nslots; s++) {
                const int32_t sl = merges[j].slot0 + s;
                const numla_dsa_cand *c = cand + (size_t)sl * (size_t)a->topk;
                for (int32_t i = 0; i < cand_n[sl]; i++)
                    numla_dsa_topk_add(&b, c[i], sel);
            }
            numla_dsa_topk_finish(&b, sel);
            numla_dsa_index_store(a, merges[j].q, b.c, b.n);
        }
    }
    return NUMLA_STATUS_OK;
}

/* ---- sparse attention --------------------------------------------------------------------- */

typedef struct numla_dsa_attn_item {
    int32_t seq, h0, nrows, slot; /* slot -1: write directly */
    int64_t q;
    int32_t j0, j1; /* part of the query's index list */
} numla_dsa_attn_item;

typedef struct numla_dsa_attn_merge {
    int64_t row0;
    int32_t nrows, slot0, nslots, pad_;
} numla_dsa_attn_merge;

typedef struct numla_dsa_attn_layout {
    size_t items, merges, partial, partial_lse, thread, thread_stride, total;
    size_t acc, ml, tmp, scratch;
    int64_t max_items, max_merges, max_slots;
} numla_dsa_attn_layout;

static int64_t numla_dsa_attn_units(const numla_dsa_attn_args *a)
{
    return numla_dsa_num_queries(a->num_seqs, a->query_start_loc) *
           (((int64_t)a->num_heads + NUMLA_DSA_ROWS - 1) / NUMLA_DSA_ROWS);
}

static numla_dsa_attn_layout numla_dsa_attn_plan_layout(const numla_dsa_attn_kernel *k,
                                                        const numla_dsa_attn_args *a, int nt)
{
    numla_dsa_attn_layout L = {0};
    const int64_t pt = (int64_t)NUMLA_DSA_ITEMS_PER_THREAD * (nt > 0 ? nt : 1);
    const size_t dc = (size_t)(a->kv_lora_rank > 0 ? a->kv_lora_rank : 1);
    L.max_items = numla_dsa_attn_units(a) + pt + 1;
    L.max_merges = pt + 1;
    L.max_slots = 2 * pt + 1;
    size_t o = 0;
    L.items = o, o += numla_dsa_align((size_t)L.max_items * sizeof(numla_dsa_attn_item));
    L.merges = o, o += numla_dsa_align((size_t)L.max_merges * sizeof(numla_dsa_attn_merge));
    L.partial = o, o += numla_dsa_align((size_t)L.max_slots * NUMLA_DSA_ROWS * dc * sizeof(float));
    L.partial_lse = o, o += numla_dsa_align((size_t)L.max_slots * NUMLA_DSA_ROWS * sizeof(float));
    size_t t = 0;
    L.acc = t, t += numla_dsa_align(NUMLA_DSA_ROWS * dc * sizeof(float));
    L.ml = t, t += numla_dsa_align(2 * NUMLA_DSA_ROWS * sizeof(float));
    L.tmp = t, t += numla_dsa_align(dc * sizeof(float));
    L.scratch = t, t += numla_dsa_align(k->scratch_bytes ? k->scratch_bytes(a) : 0);
    L.thread = o;
    L.thread_stride = t;
    L.total = o + (size_t)(nt > 0 ? nt : 1) * t + 64;
    return L;
}

size_t numla_dsa_attn_workspace_size(numla_isa isa, const numla_dsa_attn_args *a, int num_threads)
{
    return numla_dsa_attn_plan_layout(numla_dsa_attn_pick(isa, a), a, num_threads).total;
}

static numla_status numla_dsa_attn_validate(const numla_dsa_attn_args *a)
{
    if (!a)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "dsa_attn: args is NULL");
    if (a->num_heads < 1 || a->kv_lora_rank < 1 || a->rope_dim < 0 || a->index_stride < 1)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "dsa_attn: num_heads %d, kv_lora_rank %d, index_stride %d must be >= 1 "
                   "(rope_dim %d >= 0)", a->num_heads, a->kv_lora_rank, a->index_stride, a->rope_dim);
    if (!numla_dsa_dtype_ok(a->q_dtype) || !numla_dsa_dtype_ok(a->kv_dtype) ||
        !numla_dsa_dtype_ok(a->out_dtype))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "dsa_attn: q, kv and out dtypes must be f32, f16 or bf16");
    if (a->num_seqs > 0 && (!a->q || !a->kv_cache || !a->indices || !a->counts || !a->out))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "dsa_attn: q, kv_cache, indices, counts or out is NULL");
    NUMLA_CHECK(numla_dsa_validate_paging("dsa_attn", a->num_seqs, a->block_size, a->num_blocks,
                                          a->max_blocks_per_seq, a->block_table_stride,
                                          a->block_tables, a->seq_lens, a->query_start_loc, 0));
    const int32_t *qsl = a->query_start_loc;
    for (int32_t b = 0; b < a->num_seqs; b++) {
        int64_t q0 = qsl ? qsl[b] : b, q1 = qsl ? qsl[b + 1] : b + 1;
        for (int64_t q = q0; q < q1; q++) {
            int32_t c = a->counts[q];
            if (c < 0 || c > a->index_stride)
                NUMLA_FAIL(NUMLA_STATUS_OUT_OF_RANGE,
                           "dsa_attn: counts[%lld] = %d outside 0 ..= index_stride %d",
                           (long long)q, c, a->index_stride);
            const int32_t *ix = a->indices + q * (int64_t)a->index_stride;
            for (int32_t j = 0; j < c; j++)
                if (ix[j] < 0 || ix[j] >= a->seq_lens[b])
                    NUMLA_FAIL(NUMLA_STATUS_OUT_OF_RANGE,
                               "dsa_attn: indices[%lld][%d] = %d outside sequence %d's 0 .. %d",
                               (long long)q, j, ix[j], b, a->seq_lens[b] - 1);
        }
    }
    return NUMLA_STATUS_OK;
}

static int64_t numla_dsa_attn_plan(const numla_dsa_attn_args *a, int nt, numla_dsa_attn_item *items,
                                   numla_dsa_attn_merge *merges, int64_t *num_merges)
{
    const int32_t *qsl = a->query_start_loc, H = a->num_heads, R = NUMLA_DSA_ROWS;
    const int64_t T = numla_dsa_num_queries(a->num_seqs, qsl), hb = (H + R - 1) / R;
    int64_t total = 0;
    for (int64_t q = 0; q < T; q++)
        total += (int64_t)a->counts[q] * hb;
    int64_t chunk = (total + (int64_t)NUMLA_DSA_ITEMS_PER_THREAD * nt - 1) /
                    ((int64_t)NUMLA_DSA_ITEMS_PER_THREAD * nt);
    if (chunk < NUMLA_DSA_ATTN_MIN_CHUNK)
        chunk = NUMLA_DSA_ATTN_MIN_CHUNK;
    int64_t n = 0, nm = 0;
    int32_t slot = 0;
    for (int32_t b = 0; b < a->num_seqs; b++) {
        int64_t q0 = qsl ? qsl[b] : b, q1 = qsl ? qsl[b + 1] : b + 1;
        for (int64_t q = q0; q < q1; q++)
            for (int32_t h0 = 0; h0 < H; h0 += R) {
                const int32_t nr = H - h0 < R ? H - h0 : R, c = a->counts[q];
                int64_t s = c > chunk ? (c + chunk - 1) / chunk : 1;
                s = s > nt ? nt : s; /* more parts than threads only adds merges */
                if (s > 1)
                    merges[nm++] = (numla_dsa_attn_merge){.row0 = q * H + h0, .nrows = nr,
                                                          .slot0 = slot, .nslots = (int32_t)s};
                for (int64_t j = 0; j < s; j++)
                    items[n++] = (numla_dsa_attn_item){
                        .seq = b, .q = q, .h0 = h0, .nrows = nr,
                        .slot = s > 1 ? slot + (int32_t)j : -1,
                        .j0 = (int32_t)(j * c / s), .j1 = (int32_t)((j + 1) * c / s)};
                if (s > 1)
                    slot += (int32_t)s;
            }
    }
    *num_merges = nm;
    return n;
}

static void numla_dsa_attn_store_row(const numla_dsa_attn_args *a, int64_t row, const float *src,
                                     float scale)
{
    const size_t dc = (size_t)a->kv_lora_rank;
    numla_store_f32_row(a->out, a->out_dtype, (size_t)row * dc, src, dc, scale);
}

static void numla_dsa_attn_run_item(const numla_dsa_attn_kernel *k, const numla_dsa_attn_args *a,
                                    const numla_dsa_attn_item *it, char *t,
                                    const numla_dsa_attn_layout *L, float *partial,
                                    float *partial_lse)
{
    const size_t dc = (size_t)a->kv_lora_rank;
    float *acc = (float *)(t + L->acc), *m = (float *)(t + L->ml), *l = m + NUMLA_DSA_ROWS;
    const int32_t *idx = a->indices + it->q * (int64_t)a->index_stride + it->j0;
    const int64_t row0 = it->q * a->num_heads + it->h0;
    k->chunk(a, it->seq, row0, it->nrows, idx, it->j1 - it->j0, acc, m, l, t + L->scratch);
    for (int32_t r = 0; r < it->nrows; r++) {
        const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
        const float lse = l[r] > 0.0f ? m[r] + logf(l[r]) : -INFINITY;
        const float *ar = acc + (size_t)r * dc;
        if (it->slot >= 0) {
            const size_t p = (size_t)it->slot * NUMLA_DSA_ROWS + (size_t)r;
            for (size_t d = 0; d < dc; d++)
                partial[p * dc + d] = ar[d] * inv;
            partial_lse[p] = lse;
        } else {
            numla_dsa_attn_store_row(a, row0 + r, ar, inv);
            if (a->lse)
                a->lse[row0 + r] = lse;
        }
    }
}

static void numla_dsa_attn_merge_row(const numla_dsa_attn_args *a, const numla_dsa_attn_merge *mu,
                                     int32_t r, const float *partial, const float *partial_lse,
                                     float *tmp)
{
    const size_t dc = (size_t)a->kv_lora_rank;
    float mx = -INFINITY;
    for (int32_t s = 0; s < mu->nslots; s++) {
        float v = partial_lse[(size_t)(mu->slot0 + s) * NUMLA_DSA_ROWS + (size_t)r];
        mx = v > mx ? v : mx;
    }
    memset(tmp, 0, dc * sizeof(float));
    float lse = -INFINITY;
    if (mx > -INFINITY) {
        float wsum = 0.0f;
        for (int32_t s = 0; s < mu->nslots; s++) {
            const size_t p = (size_t)(mu->slot0 + s) * NUMLA_DSA_ROWS + (size_t)r;
            if (partial_lse[p] == -INFINITY)
                continue;
            const float w = expf(partial_lse[p] - mx);
            wsum += w;
            for (size_t d = 0; d < dc; d++)
                tmp[d] += w * partial[p * dc + d];
        }
        const float inv = 1.0f / wsum;
        for (size_t d = 0; d < dc; d++)
            tmp[d] *= inv;
        lse = mx + logf(wsum);
    }
    numla_dsa_attn_store_row(a, mu->row0 + r, tmp, 1.0f);
    if (a->lse)
        a->lse[mu->row0 + r] = lse;
}

numla_status numla_dsa_attn(numla_isa isa, const numla_dsa_attn_args *a, void *workspace,
                            size_t workspace_bytes)
{
    NUMLA_CHECK(numla_dsa_attn_validate(a));
    if (a->num_seqs == 0)
        return NUMLA_STATUS_OK;
    const numla_dsa_attn_kernel *k = numla_dsa_attn_pick(isa, a);
    int nt = omp_get_max_threads();
    numla_dsa_attn_layout L = numla_dsa_attn_plan_layout(k, a, nt);
    if (!workspace || workspace_bytes < L.total)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "dsa_attn: workspace of %zu bytes is smaller than the %zu needed for %d threads",
                   workspace_bytes, L.total, nt);
    char *ws = (char *)(((uintptr_t)workspace + 63) & ~(uintptr_t)63);
    numla_dsa_attn_item *items = (numla_dsa_attn_item *)(ws + L.items);
    numla_dsa_attn_merge *merges = (numla_dsa_attn_merge *)(ws + L.merges);
    float *partial = (float *)(ws + L.partial), *partial_lse = (float *)(ws + L.partial_lse);
    int64_t nm = 0, n = numla_dsa_attn_plan(a, nt, items, merges, &nm);
    int use = (int)(n < nt ? n : nt);
    if (use < 1)
        use = 1;
#pragma omp parallel num_threads(use)
    {
        char *t = ws + L.thread + (size_t)omp_get_thread_num() * L.thread_stride;
#ifdef NUMLA_DSA_FTZ_DAZ
        /* As in mla_attn.c: subnormal exp(s - max) terms weigh < 2^-126 against the max
         * term, flushing them changes nothing at fp32 and avoids the slow path. */
        const unsigned numla_mxcsr_saved = _mm_getcsr();
        _mm_setcsr(numla_mxcsr_saved | NUMLA_DSA_FTZ_DAZ);
#endif
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < n; i++)
            numla_dsa_attn_run_item(k, a, &items[i], t, &L, partial, partial_lse);
#pragma omp for schedule(static)
        for (int64_t j = 0; j < nm * NUMLA_DSA_ROWS; j++) {
            const numla_dsa_attn_merge *mu = &merges[j / NUMLA_DSA_ROWS];
            const int32_t r = (int32_t)(j % NUMLA_DSA_ROWS);
            if (r < mu->nrows)
                numla_dsa_attn_merge_row(a, mu, r, partial, partial_lse, (float *)(t + L.tmp));
        }
#ifdef NUMLA_DSA_FTZ_DAZ
        _mm_setcsr(numla_mxcsr_saved);
#endif
    }
    return NUMLA_STATUS_OK;
}
