/* kernels/mla_attn.c — the MLA attention frame: dispatch table, shape validation, the
 * (sequence, head block, key chunk) work plan, OpenMP driver, the combination of chunk states
 * and output conversion. The per-ISA chunk kernels (mla_attn_internal.h) own the inner loops.
 *
 * Units: a sequence's rows are cut into head blocks of up to NUMLA_MLA_ATTN_ROWS rows
 * ("units"): each query's H rows on their own, except in a non-causal multi-token call, where
 * every row sees the same keys and the sequence's rows are cut into sixteens from its first
 * (with H < 16 several queries a block). So every row of a unit sees the same keys, and in a
 * causal call (or one query a sequence) a row's unit is the one a one-query call gives it.
 *
 * Key chunks (the bits contract of mla_attn.h): a unit whose rows see L keys cuts them at fixed
 * positions, chunk c = [c·C, min((c + 1)·C, L)) with C = NUMLA_MLA_ATTN_KEY_CHUNK; the chunk
 * kernel runs once per chunk and the chunks' states (unnormalised acc, m, l) are combined in a
 * fixed binary tree over the chunk index: node i of level k + 1 combines nodes 2i and 2i + 1 of
 * level k (a missing right node passes the left one through), and the root is normalised. So a
 * row's result depends on its own L only: not on the thread count, the other rows of the call
 * or the other sequences.
 *
 * Items: a group of consecutive units of one sequence (up to G = numla_mla_attn_group_units(),
 * so that each cache row is read from memory once for all of them: docs/design.md §4) and one
 * node of the tree (level k, index i: chunks [i·2^k, (i + 1)·2^k)). An item walks its chunks in
 * order, runs every unit's chunk kernel on each before the next (the chunk's rows come from
 * memory for the first unit and from L2 for the others), and combines each unit's chunk states
 * on a stack as the tree does (a binary counter). A unit with fewer keys than the group's last
 * one skips the chunks past its end; as empty states (m = -inf) pass through every
 * combination unchanged, its tree is that of its own L. An item that is a whole tree writes
 * the output; otherwise it writes its node's state per unit into a slot, and the merge phase
 * combines each unit's nodes up the tree and normalises.
 *
 * Plan: the work (unit, key) pairs of all units is cut into items of about
 * chunk = max(NUMLA_MLA_ATTN_MIN_CHUNK, total / (8 · threads)) pairs: a group of W pairs takes the
 * lowest level whose node count is <= ceil(W / chunk). A sequence's group size is the largest
 * <= G whose groups, one chunk an item, still give it two items per thread of its share of the
 * work (one sequence, few keys, many threads takes smaller groups). Bounds for any seq_lens:
 *   items  <= units + 8·threads
 *   slots  <= 2·G·8·threads   (a split group of s >= 2 items has nu·s <= G·2(s - 1) slots, and
 *                             Σ(s - 1) < total / chunk <= 8·threads)
 *   merges <= G·8·threads, and an item's stack <= depth = 1 + ceil(log2(ceil(cap / C))) states a
 *   unit (cap = max_blocks_per_seq · block_size >= every seq_len)
 * so the workspace size does not depend on seq_lens.
 */
#include "kernels/mla_attn.h"
#include "kernels/mla_attn_internal.h"

#include <math.h>
#include <omp.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define NUMLA_MLA_ATTN_FTZ_DAZ 0x8040u /* MXCSR flush-to-zero | denormals-are-zero */
#endif
#include <stdlib.h>
#include <string.h>

/* Native variants per level (one kind); an empty entry inherits the level below, and so does a
 * level whose variant cannot take these dims (the vector ones need Dc % 32 == 0 and
 * Dr % 16 == 0; avx512bf16 a bf16 cache; amx a bf16 cache and usable tiles). */
static const numla_variant *const numla_mla_attn_table_[NUMLA_ISA_COUNT][1] = {
    [NUMLA_ISA_REF] = {&numla_mla_attn_kernel_ref.v},
    [NUMLA_ISA_AVX2] = {&numla_mla_attn_kernel_avx2.v},
    [NUMLA_ISA_AVX512] = {&numla_mla_attn_kernel_avx512.v},
    [NUMLA_ISA_AVX512BF16] = {&numla_mla_attn_kernel_avx512bf16.v},
    [NUMLA_ISA_AMX] = {&numla_mla_attn_kernel_amx.v},
};

static const numla_mla_attn_kernel *numla_mla_attn_pick(numla_isa isa, const numla_mla_attn_args *a)
{
    const numla_isa level = numla_isa_pick(isa, &numla_mla_attn_table_[0][0], 1, 0, a);
    return (const numla_mla_attn_kernel *)numla_mla_attn_table_[level][0];
}

enum { NUMLA_MLA_ATTN_MAX_DEPTH = 40 }; /* stack levels an item may need: cap < 2^31 keys */

typedef struct numla_mla_attn_item {
    int32_t seq;         /* b */
    int32_t u0;          /* the group's first unit (numla_mla_attn_unit) */
    int32_t nunits;      /* units in the group, 1 ..= numla_mla_attn_group_units() */
    int32_t level;       /* the node's tree level k */
    int64_t node;        /* its index i: chunks [i·2^k, (i + 1)·2^k) */
    int64_t kend;        /* the group's key end: its last unit's limit */
    int32_t slot;        /* unit u0's node-state slot, -1: the node is the root, write out */
    int32_t slot_stride; /* nodes a unit: unit u0 + u's slot is slot + u · slot_stride */
} numla_mla_attn_item;

typedef struct numla_mla_attn_merge {
    int64_t row0;
    int32_t nrows, slot0, nslots, pad_;
} numla_mla_attn_merge;

static size_t numla_mla_attn_align(size_t n) { return (n + 63) & ~(size_t)63; }

static int64_t numla_mla_attn_nq(const numla_mla_attn_args *a, int32_t b)
{
    return a->query_start_loc ? (int64_t)a->query_start_loc[b + 1] - a->query_start_loc[b] : 1;
}

static int64_t numla_mla_attn_q0(const numla_mla_attn_args *a, int32_t b)
{
    return a->query_start_loc ? a->query_start_loc[b] : b;
}

/* Key end of query i of sequence b (docs/design.md §4.1, mla_attn.h). */
static int64_t numla_mla_attn_limit(const numla_mla_attn_args *a, int32_t b, int64_t i)
{
    int64_t L = a->seq_lens[b];
    if (a->query_start_loc && a->causal)
        return L - numla_mla_attn_nq(a, b) + i + 1;
    return L;
}

/* Rows of sequence b cut into units span by span: one query's H rows, or all its rows in a
 * non-causal multi-token call (every row sees the same keys there). */
static int64_t numla_mla_attn_span(const numla_mla_attn_args *a, int32_t b)
{
    return a->query_start_loc && !a->causal ? numla_mla_attn_nq(a, b) * a->num_heads
                                            : a->num_heads;
}

static int64_t numla_mla_attn_seq_units(const numla_mla_attn_args *a, int32_t b)
{
    const int64_t rows = numla_mla_attn_nq(a, b) * a->num_heads, span = numla_mla_attn_span(a, b);
    if (rows == 0)
        return 0;
    return rows / span * ((span + NUMLA_MLA_ATTN_ROWS - 1) / NUMLA_MLA_ATTN_ROWS);
}

/* Unit u of sequence b: its first row (from the sequence's first) and row count. */
static void numla_mla_attn_unit(const numla_mla_attn_args *a, int32_t b, int64_t u, int64_t *r0,
                                int32_t *nr)
{
    const int64_t span = numla_mla_attn_span(a, b);
    const int64_t per = (span + NUMLA_MLA_ATTN_ROWS - 1) / NUMLA_MLA_ATTN_ROWS;
    const int64_t k = u % per;
    *r0 = u / per * span + k * NUMLA_MLA_ATTN_ROWS;
    *nr = (int32_t)(span - k * NUMLA_MLA_ATTN_ROWS < NUMLA_MLA_ATTN_ROWS ? span - k * NUMLA_MLA_ATTN_ROWS
                                                                         : NUMLA_MLA_ATTN_ROWS);
}

/* The keys every row of unit u of sequence b sees. */
static int64_t numla_mla_attn_unit_lim(const numla_mla_attn_args *a, int32_t b, int64_t u)
{
    int64_t r0;
    int32_t nr;
    numla_mla_attn_unit(a, b, u, &r0, &nr);
    return numla_mla_attn_limit(a, b, (r0 + nr - 1) / a->num_heads);
}

/* G: units per head group. Decode has ceil(H / 16) units per sequence; a multi-token
 * sequence may have any number, so it takes the maximum. Depends on the args' shapes only. */
static int64_t numla_mla_attn_group_units(const numla_mla_attn_args *a)
{
    if (a->query_start_loc)
        return NUMLA_MLA_ATTN_MAX_GROUP;
    int64_t u = ((int64_t)a->num_heads + NUMLA_MLA_ATTN_ROWS - 1) / NUMLA_MLA_ATTN_ROWS;
    return u < NUMLA_MLA_ATTN_MAX_GROUP ? u : NUMLA_MLA_ATTN_MAX_GROUP;
}

static int64_t numla_mla_attn_units(const numla_mla_attn_args *a)
{
    int64_t units = 0;
    for (int32_t b = 0; b < a->num_seqs; b++)
        units += numla_mla_attn_seq_units(a, b);
    return units;
}

/* Stack states an item may need a unit: 1 + ceil(log2(chunks of the longest sequence)). */
static int64_t numla_mla_attn_depth(const numla_mla_attn_args *a)
{
    int64_t cap = (int64_t)a->max_blocks_per_seq * a->block_size;
    cap = cap < INT32_MAX ? cap : INT32_MAX; /* seq_lens are int32: depth <= 25 */
    const int64_t nch = (cap + NUMLA_MLA_ATTN_KEY_CHUNK - 1) / NUMLA_MLA_ATTN_KEY_CHUNK;
    int64_t d = 1;
    while (((int64_t)1 << (d - 1)) < nch)
        d++;
    return d;
}

typedef struct numla_mla_attn_layout {
    size_t items, merges, partial, thread, thread_stride, total;
    size_t stack;  /* offset of the item's stack states within a thread's share */
    size_t estate; /* bytes of one state: (16, Dc) acc, then (16) m and (16) l */
    size_t vshare; /* offset of the group's shared V pack within a thread's share */
    int64_t max_items, max_slots, max_merges, depth;
} numla_mla_attn_layout;

static numla_mla_attn_layout numla_mla_attn_plan_layout(const numla_mla_attn_kernel *k,
                                                        const numla_mla_attn_args *a, int nt)
{
    numla_mla_attn_layout L;
    int64_t target = (int64_t)NUMLA_MLA_ATTN_ITEMS_PER_THREAD * nt;
    size_t dc = (size_t)a->kv_lora_rank;
    const int64_t G = numla_mla_attn_group_units(a);
    L.max_items = numla_mla_attn_units(a) + target;
    L.max_slots = 2 * G * target;
    L.max_merges = G * target;
    L.depth = numla_mla_attn_depth(a);
    size_t off = 0;
    L.items = off;
    off += numla_mla_attn_align((size_t)L.max_items * sizeof(numla_mla_attn_item));
    L.merges = off;
    off += numla_mla_attn_align((size_t)L.max_merges * sizeof(numla_mla_attn_merge));
    L.estate = numla_mla_attn_align(NUMLA_MLA_ATTN_ROWS * dc * sizeof(float)) +
               numla_mla_attn_align(2 * NUMLA_MLA_ATTN_ROWS * sizeof(float));
    L.partial = off;
    off += (size_t)L.max_slots * L.estate;
        L.thread = off;
    L.thread_stride = numla_mla_attn_align(k->scratch_bytes(a));
    L.stack = L.thread_stride;
    L.thread_stride += (size_t)G * (size_t)L.depth * L.estate;
    L.vshare = L.thread_stride;
    if (G > 1) /* V packed once per chunk: (C, Dc) bf16 */
        L.thread_stride += numla_mla_attn_align((size_t)NUMLA_MLA_ATTN_KEY_CHUNK * dc * sizeof(uint16_t));
    off += (size_t)nt * L.thread_stride;
    L.total = off + 64; /* room to align the caller's pointer */
    return L;
}

const char *numla_mla_attn_variant(numla_isa isa, const numla_mla_attn_args *args)
{
    return args ? numla_mla_attn_pick(isa, args)->v.name : "?";
}

size_t numla_mla_attn_workspace_size(numla_isa isa, const numla_mla_attn_args *args, int num_threads)
{
    if (!args || num_threads < 1)
        return 0;
    const numla_mla_attn_kernel *k = numla_mla_attn_pick(isa, args);
    return numla_mla_attn_plan_layout(k, args, num_threads).total;
}

static numla_status numla_mla_attn_validate(const numla_mla_attn_args *a)
{
    if (!a)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "mla_attn: args is NULL");
    if (a->num_seqs < 0 || a->num_heads < 1 || a->kv_lora_rank < 1 || a->rope_dim < 0 ||
        a->block_size < 1 || a->num_blocks < 0 || a->max_blocks_per_seq < 0)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "mla_attn: bad dims (num_seqs=%d num_heads=%d kv_lora_rank=%d rope_dim=%d "
                   "block_size=%d num_blocks=%lld max_blocks_per_seq=%d)",
                   a->num_seqs, a->num_heads, a->kv_lora_rank, a->rope_dim, a->block_size,
                   (long long)a->num_blocks, a->max_blocks_per_seq);
    if ((unsigned)a->q_dtype >= NUMLA_DTYPE_COUNT || (unsigned)a->kv_dtype >= NUMLA_DTYPE_COUNT ||
        (unsigned)a->out_dtype >= NUMLA_DTYPE_COUNT)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "mla_attn: bad dtype (q %d, kv %d, out %d)",
                   (int)a->q_dtype, (int)a->kv_dtype, (int)a->out_dtype);
    if (a->num_seqs == 0)
        return NUMLA_STATUS_OK;
    if (!a->q || !a->out || !a->seq_lens || !a->block_tables)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "mla_attn: q, out, seq_lens and block_tables must be set");
    const int32_t *qsl = a->query_start_loc;
    if (qsl && qsl[0] < 0)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "mla_attn: query_start_loc[0] = %d < 0", qsl[0]);
    int64_t cap = (int64_t)a->max_blocks_per_seq * a->block_size;
    for (int32_t b = 0; b < a->num_seqs; b++) {
        int64_t L = a->seq_lens[b];
        if (L < 0 || L > cap)
            NUMLA_FAIL(NUMLA_STATUS_OUT_OF_RANGE,
                       "mla_attn: seq_lens[%d] = %lld outside 0..%lld (max_blocks_per_seq %d x "
                       "block_size %d)",
                       b, (long long)L, (long long)cap, a->max_blocks_per_seq, a->block_size);
        if (qsl) {
            if (qsl[b + 1] < qsl[b])
                NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                           "mla_attn: query_start_loc decreases at sequence %d (%d -> %d)", b,
                           qsl[b], qsl[b + 1]);
            if (a->causal && qsl[b + 1] - qsl[b] > L)
                NUMLA_FAIL(NUMLA_STATUS_OUT_OF_RANGE,
                           "mla_attn: sequence %d has %d causal queries but seq_lens = %lld", b,
                           qsl[b + 1] - qsl[b], (long long)L);
        }
        if (L > 0 && !a->kv_cache)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "mla_attn: kv_cache is NULL");
        int64_t nblk = (L + a->block_size - 1) / a->block_size;
        const int32_t *tab = a->block_tables + (int64_t)b * a->max_blocks_per_seq;
        for (int64_t j = 0; j < nblk; j++)
            if (tab[j] < 0 || tab[j] >= a->num_blocks)
                NUMLA_FAIL(NUMLA_STATUS_OUT_OF_RANGE,
                           "mla_attn: block_tables[%d][%lld] = %d outside 0..%lld", b,
                           (long long)j, tab[j], (long long)a->num_blocks - 1);
    }
    return NUMLA_STATUS_OK;
}

/* Keys of item it: [node·2^k·C, min((node + 1)·2^k·C, kend)). */
static int64_t numla_mla_attn_item_keys(const numla_mla_attn_item *it)
{
    const int64_t k0 = (it->node << it->level) * NUMLA_MLA_ATTN_KEY_CHUNK;
    const int64_t k1 = ((it->node + 1) << it->level) * NUMLA_MLA_ATTN_KEY_CHUNK;
    return (k1 < it->kend ? k1 : it->kend) - k0;
}

static int numla_mla_attn_item_cmp(const void *x, const void *y)
{
    const numla_mla_attn_item *p = x, *q = y; /* most work first: keys x head blocks */
    int64_t lp = numla_mla_attn_item_keys(p) * p->nunits, lq = numla_mla_attn_item_keys(q) * q->nunits;
    return lp < lq ? 1 : lp > lq ? -1 : 0;
}

/* Work of units [u0, u1) of sequence b: the sum of their limits. */
static int64_t numla_mla_attn_work(const numla_mla_attn_args *a, int32_t b, int64_t u0, int64_t u1)
{
    int64_t w = 0;
    for (int64_t u = u0; u < u1; u++)
        w += numla_mla_attn_unit_lim(a, b, u);
    return w;
}

/* Build the items (longest first) and merge units; returns the item count. */
static int64_t numla_mla_attn_plan(const numla_mla_attn_args *a, int nt, numla_mla_attn_item *items,
                                   numla_mla_attn_merge *merges, int64_t *num_merges)
{
    const int64_t C = NUMLA_MLA_ATTN_KEY_CHUNK, G = numla_mla_attn_group_units(a);
    int64_t total = 0;
    for (int32_t b = 0; b < a->num_seqs; b++)
        total += numla_mla_attn_work(a, b, 0, numla_mla_attn_seq_units(a, b));
    int64_t target = (int64_t)NUMLA_MLA_ATTN_ITEMS_PER_THREAD * nt;
    int64_t chunk = (total + target - 1) / target;
    if (chunk < NUMLA_MLA_ATTN_MIN_CHUNK)
        chunk = NUMLA_MLA_ATTN_MIN_CHUNK;
    int64_t n = 0, nm = 0;
    int32_t slot = 0;
    for (int32_t b = 0; b < a->num_seqs; b++) {
        const int64_t U = numla_mla_attn_seq_units(a, b);
        if (U == 0) /* a multi-token sequence without queries this step */
            continue;
        const int64_t base = numla_mla_attn_q0(a, b) * a->num_heads;
        /* The group size g: the largest <= G whose groups, one chunk an item, still give this
         * sequence two items per thread of its share of the work. */
        const int64_t Ls = numla_mla_attn_unit_lim(a, b, U - 1); /* limits grow with u */
        const int64_t nch = (Ls + C - 1) / C;
        const int64_t wb = numla_mla_attn_work(a, b, 0, U);
        const int64_t want = total > 0 ? (2 * nt * wb + total - 1) / total : 1;
        int64_t g = G;
        while (g > 1 && (U + g - 1) / g * (nch > 1 ? nch : 1) < want)
            g--;
        g = (U + (U + g - 1) / g - 1) / ((U + g - 1) / g); /* as many groups, evenly sized */
        for (int64_t u = 0; u < U; u += g) {
            const int32_t nu = (int32_t)(u + g < U ? g : U - u);
            const int64_t Lu = numla_mla_attn_unit_lim(a, b, u + nu - 1);
            const int64_t work = numla_mla_attn_work(a, b, u, u + nu);
            const int64_t s = work > chunk ? (work + chunk - 1) / chunk : 1;
            const int64_t nchg = (Lu + C - 1) / C;
            int32_t level = 0;
            while (((nchg + ((int64_t)1 << level) - 1) >> level) > s)
                level++;
            int64_t nodes = (nchg + ((int64_t)1 << level) - 1) >> level;
            nodes = nodes > 1 ? nodes : 1;
            if (nodes > 1)
                for (int32_t k = 0; k < nu; k++) {
                    int64_t r0;
                    int32_t nr;
                    numla_mla_attn_unit(a, b, u + k, &r0, &nr);
                    merges[nm++] = (numla_mla_attn_merge){.row0 = base + r0, .nrows = nr,
                                                          .slot0 = slot + k * (int32_t)nodes,
                                                          .nslots = (int32_t)nodes};
                }
            for (int64_t i = 0; i < nodes; i++)
                items[n++] = (numla_mla_attn_item){
                    .seq = b, .u0 = (int32_t)u, .nunits = nu, .level = level, .node = i, .kend = Lu,
                    .slot = nodes > 1 ? slot + (int32_t)i : -1, .slot_stride = (int32_t)nodes};
            if (nodes > 1)
                slot += nu * (int32_t)nodes;
        }
    }
    qsort(items, (size_t)n, sizeof *items, numla_mla_attn_item_cmp);
    *num_merges = nm;
    return n;
}

void numla_mla_attn_plan_stats(const numla_mla_attn_args *a, int nt, int64_t *items,
                               int32_t *max_units)
{
    *items = 0, *max_units = 0;
    const numla_mla_attn_layout L = numla_mla_attn_plan_layout(numla_mla_attn_pick(NUMLA_ISA_REF, a), a, nt);
    numla_mla_attn_item *it = malloc((size_t)L.max_items * sizeof *it);
    numla_mla_attn_merge *mu = malloc((size_t)L.max_merges * sizeof *mu);
    if (it && mu) {
        int64_t nm = 0;
        *items = numla_mla_attn_plan(a, nt, it, mu, &nm);
        for (int64_t i = 0; i < *items; i++)
            *max_units = it[i].nunits > *max_units ? it[i].nunits : *max_units;
    }
    free(it);
    free(mu);
}

/* The chunk of unit u of item it over keys [k0, k1): its rows and their clamped key ends. */
static void numla_mla_attn_unit_chunk(const numla_mla_attn_args *a, const numla_mla_attn_item *it,
                                      int32_t u, int64_t k0, int64_t k1, numla_mla_attn_chunk *c)
{
    int64_t r0;
    int32_t nr;
    numla_mla_attn_unit(a, it->seq, it->u0 + u, &r0, &nr);
    const int64_t base = numla_mla_attn_q0(a, it->seq) * a->num_heads;
    *c = (numla_mla_attn_chunk){.a = a, .seq = it->seq, .row0 = base + r0, .k0 = k0, .k1 = k1,
                                .nrows = nr};
    for (int32_t r = 0; r < nr; r++) {
        int64_t lim = numla_mla_attn_limit(a, it->seq, (r0 + r) / a->num_heads);
        c->lim[r] = lim < k0 ? k0 : lim > k1 ? k1 : lim;
    }
}

/* The tree's combination, rows [0, nrows): state x (left, earlier keys) := x ∘ y (right).
 * States are unnormalised (acc, m, l); one with m = -inf (no key) is the identity on either
 * side, so the result is y's bits when x is empty and x's when y is. One function for the
 * items and the merge phase, so a node's bits do not depend on where it was combined. */
static void numla_mla_attn_combine(float *xacc, float *xm, float *xl, const float *yacc,
                                   const float *ym, const float *yl, int32_t nrows, size_t dc)
{
    for (int32_t r = 0; r < nrows; r++) {
        float *xa = xacc + (size_t)r * dc;
        const float *ya = yacc + (size_t)r * dc;
        if (ym[r] == -INFINITY)
            continue;
        if (xm[r] == -INFINITY) {
            memcpy(xa, ya, dc * sizeof(float));
            xm[r] = ym[r], xl[r] = yl[r];
            continue;
        }
        const float mn = xm[r] > ym[r] ? xm[r] : ym[r];
        const float wx = expf(xm[r] - mn), wy = expf(ym[r] - mn);
        for (size_t d = 0; d < dc; d++)
            xa[d] = wx * xa[d] + wy * ya[d];
        xl[r] = wx * xl[r] + wy * yl[r];
        xm[r] = mn;
    }
}

/* Normalise a root state's row into out / lse (zeros and -inf for a row without keys). */
static void numla_mla_attn_finish_row(const numla_mla_attn_args *a, int64_t row, const float *acc,
                                      float m, float l)
{
    const size_t dc = (size_t)a->kv_lora_rank;
    if (l > 0.0f) {
        numla_store_f32_row(a->out, a->out_dtype, (size_t)row * dc, acc, dc, 1.0f / l);
        if (a->lse)
            a->lse[row] = m + logf(l);
        return;
    }
    for (size_t d = 0; d < dc; d++)
        numla_store_f32(a->out, a->out_dtype, (size_t)row * dc + d, 0.0f);
    if (a->lse)
        a->lse[row] = -INFINITY;
}

/* A state of the layout: acc (16, Dc), then m (16) and l (16). */
typedef struct numla_mla_attn_state {
    float *acc, *m, *l;
} numla_mla_attn_state;

static numla_mla_attn_state numla_mla_attn_state_at(char *base, size_t dc)
{
    float *acc = (float *)(void *)base;
    float *m = (float *)(void *)(base + numla_mla_attn_align(NUMLA_MLA_ATTN_ROWS * dc * sizeof(float)));
    return (numla_mla_attn_state){acc, m, m + NUMLA_MLA_ATTN_ROWS};
}

/* Run one item: every chunk of its node, each unit's states combined on its stack (stack:
 * (nunits, depth) states), then per unit its node's state to its slot, or its rows to out. */
static void numla_mla_attn_run_item(const numla_mla_attn_kernel *k, const numla_mla_attn_args *a,
                                    const numla_mla_attn_item *it, void *scratch, char *stack,
                                    const numla_mla_attn_layout *L, uint16_t *vshare, char *partial)
{
    const int64_t C = NUMLA_MLA_ATTN_KEY_CHUNK;
    const size_t dc = (size_t)a->kv_lora_rank, es = L->estate;
    const int64_t depth = L->depth;
    int32_t sd[NUMLA_MLA_ATTN_MAX_GROUP] = {0};
    int8_t lv[NUMLA_MLA_ATTN_MAX_GROUP][NUMLA_MLA_ATTN_MAX_DEPTH];
    /* Every row sees every key of the item (decode, non-causal multi-token): the units of a
     * group tile each chunk alike and can share its packed V. */
    const int share = it->nunits > 1 && !(a->query_start_loc && a->causal);
    const int64_t nch = (it->kend + C - 1) / C;
    const int64_t c0 = it->node << it->level;
    const int64_t c1 = ((it->node + 1) << it->level) < nch ? (it->node + 1) << it->level : nch;
    numla_mla_attn_chunk c;
    int packed = 0;
    for (int64_t ci = c0; ci < c1; ci++) {
        const int64_t k0 = ci * C, k1 = k0 + C < it->kend ? k0 + C : it->kend;
        for (int32_t u = 0; u < it->nunits; u++) {
            numla_mla_attn_unit_chunk(a, it, u, k0, k1, &c);
            if (c.lim[0] <= k0) /* the unit's keys end before the chunk (causal groups) */
                continue;
            if (share) {
                c.vshare = vshare;
                c.vshare_fill = u == 0;
            }
            /* a one-unit item's q stays packed in the scratch from its previous chunk */
            c.q_ready = it->nunits == 1 && packed;
            packed = 1;
            char *su = stack + (size_t)u * (size_t)depth * es;
            numla_mla_attn_state top = numla_mla_attn_state_at(su + (size_t)sd[u] * es, dc);
            k->chunk(&c, top.acc, top.m, top.l, scratch);
            lv[u][sd[u]++] = 0;
            while (sd[u] >= 2 && lv[u][sd[u] - 1] == lv[u][sd[u] - 2]) {
                numla_mla_attn_state x = numla_mla_attn_state_at(su + (size_t)(sd[u] - 2) * es, dc);
                numla_mla_attn_state y = numla_mla_attn_state_at(su + (size_t)(sd[u] - 1) * es, dc);
                numla_mla_attn_combine(x.acc, x.m, x.l, y.acc, y.m, y.l, c.nrows, dc);
                lv[u][sd[u] - 2]++;
                sd[u]--;
            }
        }
    }
    for (int32_t u = 0; u < it->nunits; u++) {
        numla_mla_attn_unit_chunk(a, it, u, 0, 0, &c);
        char *su = stack + (size_t)u * (size_t)depth * es;
        for (; sd[u] >= 2; sd[u]--) { /* the node's last, incomplete subtrees, right to left */
            numla_mla_attn_state x = numla_mla_attn_state_at(su + (size_t)(sd[u] - 2) * es, dc);
            numla_mla_attn_state y = numla_mla_attn_state_at(su + (size_t)(sd[u] - 1) * es, dc);
            numla_mla_attn_combine(x.acc, x.m, x.l, y.acc, y.m, y.l, c.nrows, dc);
        }
        numla_mla_attn_state s = numla_mla_attn_state_at(su, dc);
        if (sd[u] == 0) /* no key in the node */
            for (int32_t r = 0; r < c.nrows; r++)
                s.m[r] = -INFINITY, s.l[r] = 0.0f;
        if (it->slot >= 0) {
            char *dst = partial + (size_t)(it->slot + u * it->slot_stride) * es;
            numla_mla_attn_state d = numla_mla_attn_state_at(dst, dc);
            if (sd[u])
                memcpy(d.acc, s.acc, (size_t)c.nrows * dc * sizeof(float));
            memcpy(d.m, s.m, (size_t)c.nrows * sizeof(float));
            memcpy(d.l, s.l, (size_t)c.nrows * sizeof(float));
        } else {
            for (int32_t r = 0; r < c.nrows; r++)
                numla_mla_attn_finish_row(a, c.row0 + r, s.acc + (size_t)r * dc, s.m[r], s.l[r]);
        }
    }
}

/* Row r of merge unit mu: its nodes combined up the tree (in place in the slots), then
 * normalised. */
static void numla_mla_attn_merge_row(const numla_mla_attn_args *a, const numla_mla_attn_merge *mu,
                                     int32_t r, char *partial, size_t es)
{
    const size_t dc = (size_t)a->kv_lora_rank;
    for (int32_t step = 1; step < mu->nslots; step *= 2)
        for (int32_t j = 0; j + step < mu->nslots; j += 2 * step) {
            numla_mla_attn_state x = numla_mla_attn_state_at(partial + (size_t)(mu->slot0 + j) * es, dc);
            numla_mla_attn_state y =
                numla_mla_attn_state_at(partial + (size_t)(mu->slot0 + j + step) * es, dc);
            numla_mla_attn_combine(x.acc + (size_t)r * dc, x.m + r, x.l + r, y.acc + (size_t)r * dc,
                                   y.m + r, y.l + r, 1, dc);
        }
    numla_mla_attn_state s = numla_mla_attn_state_at(partial + (size_t)mu->slot0 * es, dc);
    numla_mla_attn_finish_row(a, mu->row0 + r, s.acc + (size_t)r * dc, s.m[r], s.l[r]);
}

numla_status numla_mla_attn(numla_isa isa, const numla_mla_attn_args *args, void *workspace,
                            size_t workspace_bytes)
{
    NUMLA_CHECK(numla_mla_attn_validate(args));
    const numla_mla_attn_args *a = args;
    if (a->num_seqs == 0)
        return NUMLA_STATUS_OK;
    const numla_mla_attn_kernel *k = numla_mla_attn_pick(isa, a);
    int nt = omp_get_max_threads();
    numla_mla_attn_layout L = numla_mla_attn_plan_layout(k, a, nt);
    if (!workspace || workspace_bytes < L.total)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "mla_attn: workspace of %zu bytes is smaller than the %zu needed for %d threads",
                   workspace_bytes, L.total, nt);
    char *ws = (char *)(((uintptr_t)workspace + 63) & ~(uintptr_t)63);
    numla_mla_attn_item *items = (numla_mla_attn_item *)(ws + L.items);
    numla_mla_attn_merge *merges = (numla_mla_attn_merge *)(ws + L.merges);
    char *partial = ws + L.partial;
    int64_t nm = 0;
    int64_t n = numla_mla_attn_plan(a, nt, items, merges, &nm);
    int use = (int)(n < nt ? n : nt);

#pragma omp parallel num_threads(use)
    {
        char *t = ws + L.thread + (size_t)omp_get_thread_num() * L.thread_stride;
#ifdef NUMLA_MLA_ATTN_FTZ_DAZ
        /* A peaked softmax makes most exp(s - max) subnormal, and subnormal arithmetic is far
         * slower on x86 (figures: docs/decode.md).
         * Their weight relative to the max term (1) is below 2^-126, so flushing them to zero
         * changes nothing at fp32 precision. The caller's MXCSR is restored below. */
        const unsigned numla_mxcsr_saved = _mm_getcsr();
        _mm_setcsr(numla_mxcsr_saved | NUMLA_MLA_ATTN_FTZ_DAZ);
#endif
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < n; i++)
            numla_mla_attn_run_item(k, a, &items[i], t, t + L.stack, &L, (uint16_t *)(t + L.vshare),
                                    partial);
#pragma omp for schedule(static)
        for (int64_t j = 0; j < nm * NUMLA_MLA_ATTN_ROWS; j++) {
            const numla_mla_attn_merge *mu = &merges[j / NUMLA_MLA_ATTN_ROWS];
            int32_t r = (int32_t)(j % NUMLA_MLA_ATTN_ROWS);
            if (r < mu->nrows)
                numla_mla_attn_merge_row(a, mu, r, partial, L.estate);
        }
#ifdef NUMLA_MLA_ATTN_FTZ_DAZ
        _mm_setcsr(numla_mxcsr_saved);
#endif
    }
    return NUMLA_STATUS_OK;
}
