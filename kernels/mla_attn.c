/* kernels/mla_attn.c — the MLA attention frame: dispatch table, shape validation, the
 * (sequence, head block, context split) work plan, OpenMP driver, LSE merge of split results
 * and output conversion. The per-ISA chunk kernels (mla_attn_internal.h) own the inner loops.
 *
 * Plan: rows of each sequence are cut into head blocks of NUMLA_MLA_ATTN_ROWS rows ("units").
 * The keys of all units are cut into chunks of about total_keys / (8 · threads) keys (at least
 * NUMLA_MLA_ATTN_MIN_CHUNK) so that one long sequence, many short ones and anything in between
 * give enough items to keep every thread busy. A unit cut into one chunk writes its output
 * directly; a unit cut into several writes normalised partial outputs and LSEs into the
 * workspace, and a second phase merges them. Both bounds below hold for any seq_lens:
 *   items  <= units + 8·threads
 *   slots  <= 2 · 8·threads   (a split unit with s >= 2 chunks uses s <= 2(s-1) slots, and
 *                             Σ(s-1) < total_keys / chunk <= 8·threads)
 * so the workspace size does not depend on seq_lens.
 *
 * Head groups: with more than NUMLA_MLA_ATTN_ROWS rows per sequence (H > 16, or several
 * queries of a multi-token sequence), up to G = numla_mla_attn_group_units() consecutive units
 * of one sequence form one item, so that each cache row is read from memory once for all of
 * them (docs/design.md §4). The item walks its keys in sub-ranges of NUMLA_MLA_ATTN_SUB_KEYS (kept
 * in L2), runs the chunk kernel of every unit over each sub-range and folds the results into a
 * running online-softmax state per unit. A group's splits are at least max(64, 256 / units)
 * keys long; when that leaves a sequence fewer items than its share of the work asks for (one
 * sequence, few keys, many threads), it takes smaller groups. A split group uses one partial
 * slot per (unit, split), so with G > 1 the bounds above become merges <= G·8·threads and
 * slots <= 2·G·8·threads.
 * A one-unit item (H <= 16 decode) runs exactly as before: one chunk call over its range.
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

typedef struct numla_mla_attn_item {
    int32_t seq;    /* b */
    int32_t nrows;  /* rows of the item: its units' rows, <= nunits · NUMLA_MLA_ATTN_ROWS */
    int32_t slot;   /* partial-result slot of its first unit, -1: write the output directly */
    int32_t nunits; /* head blocks in the group, 1 ..= numla_mla_attn_group_units() */
    int32_t slot_stride; /* unit u's slot is slot + u · slot_stride (the group's split count) */
    int32_t pad_;
    int64_t row0;   /* first global row */
    int64_t k0, k1;
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
    for (int32_t b = 0; b < a->num_seqs; b++) {
        int64_t rows = numla_mla_attn_nq(a, b) * a->num_heads;
        units += (rows + NUMLA_MLA_ATTN_ROWS - 1) / NUMLA_MLA_ATTN_ROWS;
    }
    return units;
}

typedef struct numla_mla_attn_layout {
    size_t items, merges, partial, partial_lse, thread, thread_stride, total;
    size_t run;    /* offset of the group running state within a thread's share */
    size_t vshare; /* offset of the group's shared V pack within a thread's share */
    int64_t max_items, max_slots, max_merges;
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
    size_t off = 0;
    L.items = off;
    off += numla_mla_attn_align((size_t)L.max_items * sizeof(numla_mla_attn_item));
    L.merges = off;
    off += numla_mla_attn_align((size_t)L.max_merges * sizeof(numla_mla_attn_merge));
    L.partial = off;
    off += numla_mla_attn_align((size_t)L.max_slots * NUMLA_MLA_ATTN_ROWS * dc * sizeof(float));
    L.partial_lse = off;
    off += numla_mla_attn_align((size_t)L.max_slots * NUMLA_MLA_ATTN_ROWS * sizeof(float));
    L.thread = off;
    L.thread_stride = numla_mla_attn_align(NUMLA_MLA_ATTN_ROWS * dc * sizeof(float)) +
                      numla_mla_attn_align(2 * NUMLA_MLA_ATTN_ROWS * sizeof(float)) +
                      numla_mla_attn_align(k->scratch_bytes(a));
    L.run = L.thread_stride; /* a group's running state: (G, 16, Dc) acc, then (G, 2, 16) m, l */
    L.vshare = L.run;
    if (G > 1) {
        L.thread_stride += numla_mla_attn_align((size_t)G * NUMLA_MLA_ATTN_ROWS * dc * sizeof(float)) +
                           numla_mla_attn_align((size_t)G * 2 * NUMLA_MLA_ATTN_ROWS * sizeof(float));
        L.vshare = L.thread_stride; /* V packed once per sub-range: (512, Dc) bf16 */
        L.thread_stride += numla_mla_attn_align((size_t)NUMLA_MLA_ATTN_SUB_KEYS * dc * sizeof(uint16_t));
    }
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

static int numla_mla_attn_item_cmp(const void *x, const void *y)
{
    const numla_mla_attn_item *p = x, *q = y; /* most work first: keys x head blocks */
    int64_t lp = (p->k1 - p->k0) * p->nunits, lq = (q->k1 - q->k0) * q->nunits;
    return lp < lq ? 1 : lp > lq ? -1 : 0;
}

/* Work of sequence b's rows [r0, r1) cut into units from r0: each unit's keys, its last
 * row's limit. */
static int64_t numla_mla_attn_work(const numla_mla_attn_args *a, int32_t b, int64_t r0, int64_t r1)
{
    const int64_t R = NUMLA_MLA_ATTN_ROWS;
    int64_t w = 0;
    for (int64_t u = r0; u < r1; u += R)
        w += numla_mla_attn_limit(a, b, ((u + R < r1 ? u + R : r1) - 1) / a->num_heads);
    return w;
}

/* Shortest split of a group of nu > 1 units: one key tile, and MIN_CHUNK / nu keys, so that
 * an item still covers >= MIN_CHUNK (unit, key) pairs. */
static int64_t numla_mla_attn_min_split(int64_t nu)
{
    const int64_t m = NUMLA_MLA_ATTN_MIN_CHUNK / nu;
    return m > 64 ? m : 64;
}

/* Build the items (longest first) and merge units; returns the item count. */
static int64_t numla_mla_attn_plan(const numla_mla_attn_args *a, int nt, numla_mla_attn_item *items,
                                   numla_mla_attn_merge *merges, int64_t *num_merges)
{
    const int64_t R = NUMLA_MLA_ATTN_ROWS, G = numla_mla_attn_group_units(a);
    int64_t total = 0;
    for (int32_t b = 0; b < a->num_seqs; b++)
        total += numla_mla_attn_work(a, b, 0, numla_mla_attn_nq(a, b) * a->num_heads);
    int64_t target = (int64_t)NUMLA_MLA_ATTN_ITEMS_PER_THREAD * nt;
    int64_t chunk = (total + target - 1) / target;
    if (chunk < NUMLA_MLA_ATTN_MIN_CHUNK)
        chunk = NUMLA_MLA_ATTN_MIN_CHUNK;
    int64_t n = 0, nm = 0;
    int32_t slot = 0;
    for (int32_t b = 0; b < a->num_seqs; b++) {
        int64_t nq = numla_mla_attn_nq(a, b), rows = nq * a->num_heads;
        int64_t base = numla_mla_attn_q0(a, b) * a->num_heads;
        if (rows == 0) /* a multi-token sequence without queries this step */
            continue;
        /* The group size g: the largest <= G whose groups, split as finely as a group may
         * be, still give this sequence its share of items (work / chunk). One sequence with
         * few keys on many threads takes smaller groups instead of idling threads. */
        const int64_t U = (rows + R - 1) / R;
        const int64_t Ls = numla_mla_attn_limit(a, b, (rows - 1) / a->num_heads);
        const int64_t want = (numla_mla_attn_work(a, b, 0, rows) + chunk - 1) / chunk;
        int64_t g = G;
        while (g > 1) {
            const int64_t per = Ls / numla_mla_attn_min_split(g);
            if ((U + g - 1) / g * (per > 1 ? per : 1) >= want)
                break;
            g--;
        }
        g = (U + (U + g - 1) / g - 1) / ((U + g - 1) / g); /* as many groups, evenly sized */
        for (int64_t r = 0; r < rows; r += g * R) {
            const int64_t rend = r + g * R < rows ? r + g * R : rows;
            const int32_t nr = (int32_t)(rend - r), nu = (int32_t)((nr + R - 1) / R);
            /* the group's keys: its last row's limit; its work: each unit's last row's limit */
            const int64_t Lu = numla_mla_attn_limit(a, b, (rend - 1) / a->num_heads);
            const int64_t work = numla_mla_attn_work(a, b, r, rend);
            int64_t splits = work > chunk ? (work + chunk - 1) / chunk : 1;
            const int64_t most = nu > 1 ? Lu / numla_mla_attn_min_split(nu) : splits;
            if (splits > most)
                splits = most > 1 ? most : 1;
            if (splits > 1)
                for (int32_t u = 0; u < nu; u++)
                    merges[nm++] = (numla_mla_attn_merge){
                        .row0 = base + r + u * R,
                        .nrows = (int32_t)(nr - u * R < R ? nr - u * R : R),
                        .slot0 = slot + u * (int32_t)splits, .nslots = (int32_t)splits};
            for (int64_t s = 0; s < splits; s++) {
                /* Split points on multiples of 64 keys, so key tiles (and the AMX path's
                 * 16-row groups) start on cache-block boundaries for power-of-two block sizes
                 * instead of straddling blocks. Unrounded splits are > chunk / 2 >= 128 keys
                 * long (>= 64 for groups), so rounded boundaries still increase and tile
                 * [0, Lu). */
                int64_t k0 = s ? (s * Lu / splits) & ~(int64_t)63 : 0;
                int64_t k1 = s + 1 < splits ? ((s + 1) * Lu / splits) & ~(int64_t)63 : Lu;
                items[n++] = (numla_mla_attn_item){.seq = b, .nrows = nr, .nunits = nu,
                                                   .slot = splits > 1 ? slot + (int32_t)s : -1,
                                                   .slot_stride = (int32_t)splits,
                                                   .row0 = base + r, .k0 = k0, .k1 = k1};
            }
            if (splits > 1)
                slot += nu * (int32_t)splits;
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

/* out[row][0..dc) = src · scale in the output dtype (per-dtype loops the compiler vectorizes). */
static void numla_mla_attn_store_row(const numla_mla_attn_args *a, int64_t row, const float *src,
                                     float scale)
{
    const size_t dc = (size_t)a->kv_lora_rank;
    numla_store_f32_row(a->out, a->out_dtype, (size_t)row * dc, src, dc, scale);
}

/* The chunk of unit u of item it over keys [k0, k1): its rows and their clamped key ends. */
static void numla_mla_attn_unit_chunk(const numla_mla_attn_args *a, const numla_mla_attn_item *it,
                                      int32_t u, int64_t k0, int64_t k1, numla_mla_attn_chunk *c)
{
    const int32_t r0 = u * NUMLA_MLA_ATTN_ROWS;
    *c = (numla_mla_attn_chunk){
        .a = a, .seq = it->seq, .row0 = it->row0 + r0, .k0 = k0, .k1 = k1,
        .nrows = it->nrows - r0 < NUMLA_MLA_ATTN_ROWS ? it->nrows - r0 : NUMLA_MLA_ATTN_ROWS};
    int64_t q0 = numla_mla_attn_q0(a, it->seq);
    for (int32_t r = 0; r < c->nrows; r++) {
        int64_t lim = numla_mla_attn_limit(a, it->seq, (c->row0 + r) / a->num_heads - q0);
        c->lim[r] = lim < k0 ? k0 : lim > k1 ? k1 : lim;
    }
}

/* Fold a chunk's online-softmax state (acc, m, l) into a running one (racc, rm, rl), rows
 * [0, nrows): the LSE merge of docs/design.md §4 before normalisation. A side with m = -inf (no key
 * yet) has weight e^-inf = 0; both -inf leaves the running state as it is (zeros). */
static void numla_mla_attn_fold(float *racc, float *rm, float *rl, const float *acc,
                                const float *m, const float *l, int32_t nrows, size_t dc)
{
    for (int32_t r = 0; r < nrows; r++) {
        const float mn = m[r] > rm[r] ? m[r] : rm[r];
        if (mn == -INFINITY || m[r] == -INFINITY)
            continue;
        const float wr = expf(rm[r] - mn), wc = expf(m[r] - mn);
        float *ra = racc + (size_t)r * dc;
        const float *ca = acc + (size_t)r * dc;
        for (size_t d = 0; d < dc; d++) /* an empty running state holds zeros: wr = 0 */
            ra[d] = wr * ra[d] + wc * ca[d];
        rl[r] = wr * rl[r] + wc * l[r];
        rm[r] = mn;
    }
}

/* Store unit u's rows (acc, m, l: its final state) to out/lse, or to its partial slot. */
static void numla_mla_attn_store_unit(const numla_mla_attn_args *a, const numla_mla_attn_item *it,
                                      int32_t u, const numla_mla_attn_chunk *c, const float *acc,
                                      const float *m, const float *l, float *partial,
                                      float *partial_lse)
{
    size_t dc = (size_t)a->kv_lora_rank;
    for (int32_t r = 0; r < c->nrows; r++) {
        const float *ar = acc + (size_t)r * dc;
        float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
        float lse = l[r] > 0.0f ? m[r] + logf(l[r]) : -INFINITY;
        if (it->slot >= 0) {
            size_t p = (size_t)(it->slot + u * it->slot_stride) * NUMLA_MLA_ATTN_ROWS + (size_t)r;
            float *dst = partial + p * dc;
            for (size_t d = 0; d < dc; d++)
                dst[d] = ar[d] * inv;
            partial_lse[p] = lse;
        } else {
            int64_t row = c->row0 + r;
            numla_mla_attn_store_row(a, row, ar, inv);
            if (a->lse)
                a->lse[row] = lse;
        }
    }
}

/* Run one item and store its rows. A one-unit item is one chunk call over [k0, k1). A group
 * walks sub-ranges of NUMLA_MLA_ATTN_SUB_KEYS keys and runs every unit on each before the next,
 * so the sub-range's cache rows come from memory for the first unit and from L2 for the
 * others; run: (nunits, 16, Dc) acc + (nunits, 2, 16) m, l of running state. */
static void numla_mla_attn_run_item(const numla_mla_attn_kernel *k, const numla_mla_attn_args *a,
                                    const numla_mla_attn_item *it, float *acc, float *m, float *l,
                                    void *scratch, float *run, uint16_t *vshare, float *partial,
                                    float *partial_lse)
{
    numla_mla_attn_chunk c;
    if (it->nunits == 1) {
        numla_mla_attn_unit_chunk(a, it, 0, it->k0, it->k1, &c);
        k->chunk(&c, acc, m, l, scratch);
        numla_mla_attn_store_unit(a, it, 0, &c, acc, m, l, partial, partial_lse);
        return;
    }
    const size_t dc = (size_t)a->kv_lora_rank, ustride = NUMLA_MLA_ATTN_ROWS * dc;
    float *rml = run + (size_t)it->nunits * ustride;
    /* Every row sees every key of the item (decode, non-causal multi-token): the head blocks
     * tile each sub-range alike and can share its packed V. */
    const int share = !(a->query_start_loc && a->causal);
    /* at least one pass: an empty range (a sequence with no cached keys) still runs the chunk
     * kernel once per unit, which gives its rows zeros and m = -inf */
    for (int64_t kk = it->k0, ke;; kk = ke) {
        ke = it->k1 - kk < NUMLA_MLA_ATTN_SUB_KEYS ? it->k1 : kk + NUMLA_MLA_ATTN_SUB_KEYS;
        for (int32_t u = 0; u < it->nunits; u++) {
            float *racc = run + (size_t)u * ustride, *rm = rml + (size_t)u * 2 * NUMLA_MLA_ATTN_ROWS;
            numla_mla_attn_unit_chunk(a, it, u, kk, ke, &c);
            if (share) {
                c.vshare = vshare;
                c.vshare_fill = u == 0;
            }
            if (kk == it->k0) { /* the first sub-range starts the running state */
                k->chunk(&c, racc, rm, rm + NUMLA_MLA_ATTN_ROWS, scratch);
                continue;
            }
            k->chunk(&c, acc, m, l, scratch);
            numla_mla_attn_fold(racc, rm, rm + NUMLA_MLA_ATTN_ROWS, acc, m, l, c.nrows, dc);
        }
        if (ke >= it->k1)
            break;
    }
    for (int32_t u = 0; u < it->nunits; u++) {
        const float *rm = rml + (size_t)u * 2 * NUMLA_MLA_ATTN_ROWS;
        numla_mla_attn_unit_chunk(a, it, u, it->k0, it->k1, &c);
        numla_mla_attn_store_unit(a, it, u, &c, run + (size_t)u * ustride, rm,
                                  rm + NUMLA_MLA_ATTN_ROWS, partial, partial_lse);
    }
}

static void numla_mla_attn_merge_row(const numla_mla_attn_args *a, const numla_mla_attn_merge *mu,
                                     int32_t r, const float *partial, const float *partial_lse,
                                     float *tmp)
{
    size_t dc = (size_t)a->kv_lora_rank;
    float mx = -INFINITY;
    for (int32_t s = 0; s < mu->nslots; s++) {
        float v = partial_lse[(size_t)(mu->slot0 + s) * NUMLA_MLA_ATTN_ROWS + (size_t)r];
        mx = v > mx ? v : mx;
    }
    int64_t row = mu->row0 + r;
    memset(tmp, 0, dc * sizeof(float));
    float lse = -INFINITY;
    if (mx > -INFINITY) {
        float wsum = 0.0f;
        for (int32_t s = 0; s < mu->nslots; s++) {
            size_t p = (size_t)(mu->slot0 + s) * NUMLA_MLA_ATTN_ROWS + (size_t)r;
            if (partial_lse[p] == -INFINITY)
                continue;
            float w = expf(partial_lse[p] - mx);
            wsum += w;
            const float *src = partial + p * dc;
            for (size_t d = 0; d < dc; d++)
                tmp[d] += w * src[d];
        }
        float inv = 1.0f / wsum;
        for (size_t d = 0; d < dc; d++)
            tmp[d] *= inv;
        lse = mx + logf(wsum);
    }
    numla_mla_attn_store_row(a, row, tmp, 1.0f);
    if (a->lse)
        a->lse[row] = lse;
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
    float *partial = (float *)(ws + L.partial), *partial_lse = (float *)(ws + L.partial_lse);
    int64_t nm = 0;
    int64_t n = numla_mla_attn_plan(a, nt, items, merges, &nm);
    int use = (int)(n < nt ? n : nt);
    size_t dc = (size_t)a->kv_lora_rank;

#pragma omp parallel num_threads(use)
    {
        char *t = ws + L.thread + (size_t)omp_get_thread_num() * L.thread_stride;
        float *acc = (float *)t;
        float *ml = (float *)(t + numla_mla_attn_align(NUMLA_MLA_ATTN_ROWS * dc * sizeof(float)));
        void *scratch = (char *)ml + numla_mla_attn_align(2 * NUMLA_MLA_ATTN_ROWS * sizeof(float));
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
            numla_mla_attn_run_item(k, a, &items[i], acc, ml, ml + NUMLA_MLA_ATTN_ROWS, scratch,
                                    (float *)(t + L.run), (uint16_t *)(t + L.vshare), partial,
                                    partial_lse);
#pragma omp for schedule(static)
        for (int64_t j = 0; j < nm * NUMLA_MLA_ATTN_ROWS; j++) {
            const numla_mla_attn_merge *mu = &merges[j / NUMLA_MLA_ATTN_ROWS];
            int32_t r = (int32_t)(j % NUMLA_MLA_ATTN_ROWS);
            if (r < mu->nrows)
                numla_mla_attn_merge_row(a, mu, r, partial, partial_lse, acc);
        }
#ifdef NUMLA_MLA_ATTN_FTZ_DAZ
        _mm_setcsr(numla_mxcsr_saved);
#endif
    }
    return NUMLA_STATUS_OK;
}
