/* engine/model/model_v4_step.c — DeepSeek-V4 driven by numla_step (model_v4.h): the sequences a
 * rank holds, by identity, and one step's forward over them. The scheduler's steps name blocks
 * of the paged pool, which hold the sequences' compressed entries (numla_v4_seqs_use_pool); the
 * rest of V4's cache is per sequence (numla_v4_seq), so a step also names each sequence
 * (numla_step.seq_ids) and the sequences that ended (numla_step.released). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/model_v4.h"

typedef struct v4_entry {
    int64_t key;
    numla_v4_seq *seq;
} v4_entry;

/* The sequences of a step and where their rows start (for an MTP step's hidden rows). */
typedef struct v4_rowmap {
    int64_t *keys;     /* (B) */
    int64_t *start;    /* (B + 1) */
    int32_t B, cap;
} v4_rowmap;

/* A step's arrays, one per use, kept between steps and grown only when a step has more
 * sequences or rows than any before, so a step allocates nothing once steps of its size have
 * run. Behind a pointer, so the checks (const) use them too; a step runs one use at a time
 * (the MTP step's check before the step's plan). */
typedef enum v4_step_slot {
    V4_T_SEQS, V4_T_TOKS, V4_T_SRCS, V4_T_NS, V4_T_SRC, V4_T_SEGS, V4_T_CAPS, V4_T_COUNT
} v4_step_slot;

typedef struct v4_step_scratch {
    void *p[V4_T_COUNT];
    size_t cap[V4_T_COUNT]; /* bytes */
} v4_step_scratch;

struct numla_v4_seqs {
    const numla_v4_model *m;
    v4_step_scratch *scr;
    v4_entry *e;       /* (n) live sequences, unordered */
    int32_t n, cap;
    int spec;          /* the model has its MTP layer: mark each sequence before its steps */
    v4_rowmap last, last_mtp; /* the last step's and the last MTP step's sequences */
    /* the prefix cache (numla_v4_seqs_enable_prefix): the state a sequence had at the end of
     * each block whose end is a multiple of stride, by block id (dropped when a step writes the
     * block again) */
    int64_t stride;    /* 0: off */
    int32_t bs;        /* the pool's tokens a block */
    numla_v4_prefix **pst; /* (npst) by block id, NULL where none */
    int32_t npst;
    size_t pbytes;     /* held by pst */
    numla_v4_pool *pool; /* the pool's regions of compressed entries, or NULL */
};

static int64_t seq_key(const numla_step *st, int32_t b);

/* Slot s of t's step scratch with room for at least `bytes` (never NULL for 0), or NULL without
 * memory; its contents are not kept when it grows. */
static void *step_room(const numla_v4_seqs *t, v4_step_slot s, size_t bytes)
{
    v4_step_scratch *sc = t->scr;
    if (!sc->p[s] || bytes > sc->cap[s]) {
        const size_t cap = bytes > 2 * sc->cap[s] ? (bytes ? bytes : 1) : 2 * sc->cap[s];
        void *p = malloc(cap);
        if (!p)
            return NULL;
        free(sc->p[s]);
        sc->p[s] = p;
        sc->cap[s] = cap;
    }
    return sc->p[s];
}

static numla_status rowmap_set(v4_rowmap *r, const numla_step *st)
{
    const int32_t B = st->num_seqs;
    if (B > r->cap) {
        int64_t *k = realloc(r->keys, sizeof *k * (size_t)B);
        if (k)
            r->keys = k;
        int64_t *a = realloc(r->start, sizeof *a * (size_t)(B + 1));
        if (a)
            r->start = a;
        if (!k || !a)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "deepseek_v4 step: no memory");
        r->cap = B;
    }
    for (int32_t b = 0; b < B; b++) {
        r->keys[b] = seq_key(st, b);
        r->start[b] = st->query_start_loc[b];
    }
    r->start[B] = st->query_start_loc[B];
    r->B = B;
    return NUMLA_STATUS_OK;
}

/* The sequence (key) and its local row of global row `row` of a recorded step; -1 if none. */
static int32_t rowmap_find(const v4_rowmap *r, int64_t row, int64_t *key, int64_t *local)
{
    for (int32_t b = 0; b < r->B; b++)
        if (row >= r->start[b] && row < r->start[b + 1]) {
            *key = r->keys[b];
            *local = row - r->start[b];
            return b;
        }
    return -1;
}

numla_status numla_v4_seqs_create(const numla_v4_model *m, numla_v4_seqs **out)
{
    if (!m || !out)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_seqs_create: NULL argument");
    *out = calloc(1, sizeof **out);
    if (*out && !((*out)->scr = calloc(1, sizeof *(*out)->scr))) {
        free(*out);
        *out = NULL;
    }
    if (!*out)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "v4 sequences: no memory");
    (*out)->m = m;
    (*out)->spec = numla_v4_model_config(m)->mtp_enabled;
    return NUMLA_STATUS_OK;
}

void numla_v4_seqs_destroy(numla_v4_seqs **pt)
{
    if (!pt || !*pt)
        return;
    numla_v4_seqs *t = *pt;
    for (int32_t i = 0; i < t->n; i++)
        numla_v4_seq_destroy(&t->e[i].seq);
    for (int32_t i = 0; i < t->npst; i++)
        numla_v4_prefix_destroy(&t->pst[i]);
    free(t->pst);
    free(t->pool);
    free(t->e);
    free(t->last.keys);
    free(t->last.start);
    free(t->last_mtp.keys);
    free(t->last_mtp.start);
    for (int i = 0; i < V4_T_COUNT; i++)
        free(t->scr->p[i]);
    free(t->scr);
    free(t);
    *pt = NULL;
}

int32_t numla_v4_seqs_count(const numla_v4_seqs *t) { return t ? t->n : 0; }

numla_status numla_v4_seqs_enable_prefix(numla_v4_seqs *t, int32_t block_size)
{
    if (!t || block_size < 1)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_seqs_enable_prefix: bad argument");
    t->stride = numla_v4_prefix_stride(numla_v4_model_config(t->m), block_size);
    t->bs = block_size;
    return NUMLA_STATUS_OK;
}

void numla_v4_seqs_set_block_size(numla_v4_seqs *t, int32_t block_size)
{
    if (t && block_size > 0)
        t->bs = block_size;
}

numla_status numla_v4_seqs_use_pool(numla_v4_seqs *t, const numla_v4_pool *pool)
{
    if (!t || !pool)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_seqs_use_pool: NULL argument");
    if (!t->pool && !(t->pool = malloc(sizeof *t->pool)))
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "v4 sequences: no memory");
    *t->pool = *pool;
    t->bs = pool->block_size;
    return NUMLA_STATUS_OK;
}

/* A new sequence of t: in t's pool when it has one. */
static numla_status seq_new(const numla_v4_seqs *t, numla_v4_seq **q)
{
    NUMLA_CHECK(numla_v4_seq_create(t->m, q));
    numla_status s = t->pool ? numla_v4_seq_use_pool(*q, t->pool) : NUMLA_STATUS_OK;
    if (s != NUMLA_STATUS_OK) {
        numla_v4_seq_destroy(q);
        NUMLA_CHECK(s);
    }
    return NUMLA_STATUS_OK;
}

int64_t numla_v4_seqs_prefix_stride(const numla_v4_seqs *t) { return t ? t->stride : 0; }

size_t numla_v4_seqs_prefix_bytes(const numla_v4_seqs *t) { return t ? t->pbytes : 0; }

int32_t numla_v4_seqs_prefix_count(const numla_v4_seqs *t)
{
    int32_t n = 0;
    for (int32_t i = 0; t && i < t->npst; i++)
        n += t->pst[i] != NULL;
    return n;
}

/* Block id of block index k of sequence b's table, -1 outside the table. */
static int32_t block_of(const numla_step *st, int32_t b, int64_t k)
{
    if (!st->block_tables || k < 0 || k >= st->max_blocks_per_seq)
        return -1;
    return st->block_tables[(int64_t)b * st->max_blocks_per_seq + k];
}

/* The state kept for the segment ending at p (a multiple of t->stride) of sequence b: the one of
 * the block that ends at p, if that is the state of p. NULL if none. */
static numla_v4_prefix *prefix_state(const numla_v4_seqs *t, const numla_step *st, int32_t b,
                                     int64_t p)
{
    const int32_t id = block_of(st, b, p / t->bs - 1);
    if (id < 0 || id >= t->npst || !t->pst[id] || numla_v4_prefix_pos(t->pst[id]) != p)
        return NULL;
    return t->pst[id];
}

/* Whether sequence b, not held, can start at `first` from kept states (a prefix-cache hit). */
static int prefix_hit(const numla_v4_seqs *t, const numla_step *st, int32_t b, int64_t first)
{
    if (!t->stride || first % t->stride)
        return 0;
    for (int64_t p = t->stride; p <= first; p += t->stride)
        if (!numla_v4_prefix_complete(prefix_state(t, st, b, p)))
            return 0; /* none, or (the MTP layer) its MTP row p - 1 not run yet */
    return 1;
}

static void prefix_drop(numla_v4_seqs *t, int32_t id)
{
    if (id >= 0 && id < t->npst && t->pst[id]) {
        t->pbytes -= numla_v4_prefix_bytes(t->pst[id]);
        numla_v4_prefix_destroy(&t->pst[id]);
    }
}

/* Keep p as block id's state (replacing what it held). */
static numla_status prefix_keep(numla_v4_seqs *t, int32_t id, numla_v4_prefix *p)
{
    if (id < 0) {
        numla_v4_prefix_destroy(&p);
        return NUMLA_STATUS_OK;
    }
    if (id >= t->npst) {
        const int32_t n = id + 1 > 2 * t->npst ? id + 1 : 2 * t->npst;
        numla_v4_prefix **a = realloc(t->pst, sizeof *a * (size_t)n);
        if (!a) {
            numla_v4_prefix_destroy(&p);
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "deepseek_v4: no memory for the prefix states");
        }
        memset(a + t->npst, 0, sizeof *a * (size_t)(n - t->npst));
        t->pst = a;
        t->npst = n;
    }
    prefix_drop(t, id);
    t->pst[id] = p;
    t->pbytes += numla_v4_prefix_bytes(p);
    return NUMLA_STATUS_OK;
}

/* Sequence q (step sequence b) in t's pool: its table's blocks up to token n - 1. */
static numla_status set_blocks(const numla_v4_seqs *t, const numla_step *st, int32_t b,
                               numla_v4_seq *q, int64_t n)
{
    const int64_t nb = (n + t->bs - 1) / t->bs;
    if (!st->block_tables || nb > st->max_blocks_per_seq)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "deepseek_v4 step: sequence %d holds %lld tokens, "
                   "its block table lists %d blocks of %d", b, (long long)n,
                   st->block_tables ? st->max_blocks_per_seq : 0, t->bs);
    NUMLA_CHECK(numla_v4_seq_set_blocks(q, st->block_tables + (int64_t)b * st->max_blocks_per_seq,
                                        nb));
    return NUMLA_STATUS_OK;
}

/* Sequence b's key: its id, or (no ids) its first block, kept apart from ids. */
static int64_t seq_key(const numla_step *st, int32_t b)
{
    return st->seq_ids ? st->seq_ids[b]
                       : INT64_MIN + st->block_tables[(int64_t)b * st->max_blocks_per_seq];
}

static int32_t find(const numla_v4_seqs *t, int64_t key)
{
    for (int32_t i = 0; i < t->n; i++)
        if (t->e[i].key == key)
            return i;
    return -1;
}

static int released_now(const numla_step *st, int64_t key)
{
    if (st->release_all)
        return 1;
    for (int32_t r = 0; st->seq_ids && r < st->num_released; r++)
        if (st->released[r] == key)
            return 1;
    return 0;
}

numla_status numla_v4_step_check(const numla_v4_seqs *t, const numla_step *st)
{
    if (!t || !st || (st->num_released > 0 && !st->released) || st->num_released < 0)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "deepseek_v4 step: NULL argument or bad released list");
    for (int32_t b = 0; b < st->num_seqs; b++) {
        const int64_t key = seq_key(st, b);
        for (int32_t b2 = 0; b2 < b; b2++)
            if (seq_key(st, b2) == key)
                NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "deepseek_v4 step: sequences %d and %d are "
                           "the same sequence (%s %lld)", b2, b, st->seq_ids ? "id" : "first block",
                           (long long)(st->seq_ids ? key : key - INT64_MIN));
        const int32_t first = st->positions[st->query_start_loc[b]];
        if (first == 0)
            continue; /* starts (or starts again) from an empty cache */
        const int32_t i = released_now(st, key) ? -1 : find(t, key);
        if (i < 0 && prefix_hit(t, st, b, first))
            continue; /* starts from the prefix cache's states */
        const int64_t have = i < 0 ? -1 : numla_v4_seq_len(t->e[i].seq);
        /* after a verify step: back to its verified length (the rejected drafts undone) */
        if (have > first && numla_v4_seq_can_truncate(t->e[i].seq, first))
            continue;
        if (have != first)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                       "deepseek_v4 step: sequence %d (%s %lld) continues at position %d but "
                       "%s (V4's cache is per sequence: a sequence starts at position 0, or at a "
                       "multiple of %lld whose blocks' prefix states this rank keeps)", b,
                       st->seq_ids ? "id" : "first block",
                       (long long)(st->seq_ids ? key : key - INT64_MIN), first,
                       i < 0 ? "this rank holds no such sequence" : "its cache holds another "
                       "number of tokens", (long long)t->stride);
    }
    return NUMLA_STATUS_OK;
}

/* Room in t for one more sequence (NO_MEMORY, not set as the error). */
static numla_status room(numla_v4_seqs *t)
{
    if (t->n < t->cap)
        return NUMLA_STATUS_OK;
    const int32_t cap = t->cap ? 2 * t->cap : 16;
    v4_entry *e = realloc(t->e, sizeof *e * (size_t)cap);
    if (!e)
        return NUMLA_STATUS_NO_MEMORY;
    t->e = e;
    t->cap = cap;
    return NUMLA_STATUS_OK;
}

static void drop(numla_v4_seqs *t, int32_t i)
{
    numla_v4_seq_destroy(&t->e[i].seq);
    t->e[i] = t->e[--t->n];
}

numla_status numla_v4_step_forward(numla_v4_seqs *t, const numla_step *st, float *logits)
{
    NUMLA_CHECK(numla_v4_step_check(t, st));
    while (st->release_all && t->n > 0)
        drop(t, t->n - 1);
    for (int32_t r = 0; st->seq_ids && r < st->num_released; r++) {
        const int32_t i = find(t, st->released[r]);
        if (i >= 0)
            drop(t, i);
    }
    const int32_t B = st->num_seqs;
    if (B == 0)
        return NUMLA_STATUS_OK;
    numla_v4_seq **seqs = step_room(t, V4_T_SEQS, sizeof *seqs * (size_t)B);
    const int32_t **toks = step_room(t, V4_T_TOKS, sizeof *toks * (size_t)B);
    int64_t *ns = step_room(t, V4_T_NS, sizeof *ns * (size_t)B);
    numla_status s = seqs && toks && ns ? NUMLA_STATUS_OK : NUMLA_STATUS_NO_MEMORY;
    for (int32_t b = 0; s == NUMLA_STATUS_OK && b < B; b++) {
        const int64_t key = seq_key(st, b);
        int32_t i = find(t, key);
        if (i >= 0 && st->positions[st->query_start_loc[b]] == 0)
            drop(t, i), i = -1; /* the same sequence from the start: an empty cache */
        const int32_t first = st->positions[st->query_start_loc[b]];
        if (i < 0) {
            if ((s = room(t)) != NUMLA_STATUS_OK)
                break;
            numla_v4_seq *q = NULL;
            if ((s = seq_new(t, &q)) != NUMLA_STATUS_OK)
                break;
            i = t->n++;
            t->e[i] = (v4_entry){key, q};
            ns[b] = st->query_start_loc[b + 1] - st->query_start_loc[b];
            if (t->pool && (s = set_blocks(t, st, b, q, first + ns[b])) != NUMLA_STATUS_OK)
                break;
            if (first > 0) { /* a prefix-cache hit (numla_v4_step_check): its segments' states */
                const int64_t nseg = first / t->stride;
                const numla_v4_prefix **segs = step_room(t, V4_T_SEGS, sizeof *segs * (size_t)nseg);
                if (!segs) {
                    s = NUMLA_STATUS_NO_MEMORY;
                    break;
                }
                for (int64_t k = 0; k < nseg; k++)
                    segs[k] = prefix_state(t, st, b, (k + 1) * t->stride);
                s = numla_v4_seq_restore(q, segs, nseg);
                if (s != NUMLA_STATUS_OK)
                    break;
            }
        }
        seqs[b] = t->e[i].seq;
        if (numla_v4_seq_len(seqs[b]) > first &&
            (s = numla_v4_seq_truncate(seqs[b], first)) != NUMLA_STATUS_OK)
            break;
        if (t->spec && (s = numla_v4_seq_mark(seqs[b])) != NUMLA_STATUS_OK)
            break;
        toks[b] = st->tokens + st->query_start_loc[b];
        ns[b] = st->query_start_loc[b + 1] - st->query_start_loc[b];
        /* its entries in the pool: the blocks of its table up to its last token */
        if (t->pool && (s = set_blocks(t, st, b, seqs[b], first + ns[b])) != NUMLA_STATUS_OK)
            break;
        /* room for its entries up to the end of its last block (the pool's charge), so the
         * forward makes none */
        const int64_t held = t->bs > 0 ? (first + ns[b] + t->bs - 1) / t->bs * t->bs : first + ns[b];
        if ((s = numla_v4_seq_reserve(seqs[b], held)) != NUMLA_STATUS_OK)
            break;
        if (t->stride && (s = numla_v4_seq_capture(seqs[b], t->stride, ns[b])) != NUMLA_STATUS_OK)
            break;
    }
    /* the blocks this step writes lose the states they held (their rows change) */
    for (int32_t b = 0; s == NUMLA_STATUS_OK && t->stride && b < B; b++) {
        const int64_t first = st->positions[st->query_start_loc[b]];
        for (int64_t k = first / t->bs; k <= (first + ns[b] - 1) / t->bs; k++)
            prefix_drop(t, block_of(st, b, k));
    }
    if (s == NUMLA_STATUS_OK)
        s = numla_v4_forward_rows(t->m, B, seqs, toks, ns, st->num_logit_rows, st->logit_rows,
                                  logits);
    /* the states of the segments it completed, kept with the blocks that end them */
    for (int32_t b = 0; s == NUMLA_STATUS_OK && t->stride && b < B; b++) {
        numla_v4_prefix *p;
        while (s == NUMLA_STATUS_OK && (p = numla_v4_seq_take_capture(seqs[b])) != NULL)
            s = prefix_keep(t, block_of(st, b, numla_v4_prefix_pos(p) / t->bs - 1), p);
    }
    if (s == NUMLA_STATUS_OK && t->spec)
        s = rowmap_set(&t->last, st);
    if (s == NUMLA_STATUS_NO_MEMORY) {
        char why[512];
        snprintf(why, sizeof why, "%s", numla_error_message());
        NUMLA_FAIL(s, "deepseek_v4 step: no memory for the caches of %d sequences (%d held on "
                   "this rank): %s", B, t->n, why);
    }
    NUMLA_CHECK(s);
    return NUMLA_STATUS_OK;
}

numla_status numla_v4_seqs_fill(numla_v4_seqs *t, int64_t key, const int32_t *table, int64_t n)
{
    if (!t || (t->pool && !table))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_seqs_fill: NULL argument");
    const int32_t held = find(t, key);
    if (held >= 0)
        drop(t, held); /* as a step starting it again from position 0 */
    if (room(t) != NUMLA_STATUS_OK)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "deepseek_v4: no memory for a sequence");
    numla_v4_seq *q = NULL;
    NUMLA_CHECK(seq_new(t, &q));
    numla_status s = t->pool ? numla_v4_seq_set_blocks(q, table, (n + t->bs - 1) / t->bs)
                             : NUMLA_STATUS_OK;
    if (s == NUMLA_STATUS_OK)
        s = numla_v4_seq_fill(q, n);
    if (s != NUMLA_STATUS_OK) {
        numla_v4_seq_destroy(&q);
        NUMLA_CHECK(s);
    }
    t->e[t->n++] = (v4_entry){key, q};
    return NUMLA_STATUS_OK;
}

/* An MTP step's sequences and each row's source (numla_v4_mtp_forward's src), or the reason it
 * cannot run (*why). seqs (B), src (T) allocated by the caller. */
static const char *mtp_plan(const numla_v4_seqs *t, const numla_step *st, const int32_t *hidden_rows,
                            numla_v4_seq **seqs, int32_t *src, int32_t *bad_row)
{
    *bad_row = -1;
    if (!t->spec)
        return "the model was loaded without its MTP layer";
    for (int32_t b = 0; b < st->num_seqs; b++) {
        const int64_t key = seq_key(st, b);
        const int32_t i = find(t, key);
        if (i < 0)
            return "a sequence this rank does not hold";
        seqs[b] = t->e[i].seq;
        for (int32_t b2 = 0; b2 < b; b2++)
            if (seq_key(st, b2) == key)
                return "a sequence twice";
        const int32_t q0 = st->query_start_loc[b], q1 = st->query_start_loc[b + 1];
        const int32_t first = st->positions[q0];
        if (q1 <= q0)
            return "a sequence without rows";
        if (numla_v4_seq_mtp_len(seqs[b]) != first &&
            !numla_v4_seq_mtp_can_truncate(seqs[b], first))
            return "MTP rows that do not continue the sequence's MTP cache";
        for (int32_t r = q0; r < q1; r++) {
            int64_t k2 = 0, local = 0;
            const int32_t h = hidden_rows[r];
            const v4_rowmap *map = h >= 0 ? &t->last : &t->last_mtp;
            *bad_row = r;
            if (st->positions[r] != first + (r - q0))
                return "positions that are not consecutive";
            if (rowmap_find(map, h >= 0 ? h : -1 - (int64_t)h, &k2, &local) < 0 || k2 != key)
                return "a hidden row that is not one of the sequence's in the last step";
            src[r] = h >= 0 ? (int32_t)local : (int32_t)(-1 - local);
        }
    }
    *bad_row = -1;
    return NULL;
}

numla_status numla_v4_step_mtp_check(const numla_v4_seqs *t, const numla_step *st,
                                     const int32_t *hidden_rows)
{
    if (!t || !st || !hidden_rows)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "deepseek_v4 MTP step: NULL argument");
    numla_v4_seq **seqs = step_room(t, V4_T_SEQS, sizeof *seqs * (size_t)(st->num_seqs + 1));
    int32_t *src = step_room(t, V4_T_SRC, sizeof *src * (size_t)(st->num_tokens + 1));
    int32_t row = -1;
    const char *why = seqs && src ? mtp_plan(t, st, hidden_rows, seqs, src, &row) : "no memory";
    if (why)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "deepseek_v4 MTP step: %s (row %d)", why, row);
    return NUMLA_STATUS_OK;
}

numla_status numla_v4_step_mtp(numla_v4_seqs *t, const numla_step *st, const int32_t *hidden_rows,
                               float *logits)
{
    NUMLA_CHECK(numla_v4_step_mtp_check(t, st, hidden_rows));
    const int32_t B = st->num_seqs;
    if (B == 0)
        return NUMLA_STATUS_OK;
    numla_v4_seq **seqs = step_room(t, V4_T_SEQS, sizeof *seqs * (size_t)B);
    int32_t *src = step_room(t, V4_T_SRC, sizeof *src * (size_t)st->num_tokens);
    const int32_t **toks = step_room(t, V4_T_TOKS, sizeof *toks * (size_t)B);
    const int32_t **srcs = step_room(t, V4_T_SRCS, sizeof *srcs * (size_t)B);
    int64_t *ns = step_room(t, V4_T_NS, sizeof *ns * (size_t)B);
    int32_t row;
    numla_status s = seqs && src && toks && srcs && ns ? NUMLA_STATUS_OK : NUMLA_STATUS_NO_MEMORY;
    if (s == NUMLA_STATUS_OK)
        mtp_plan(t, st, hidden_rows, seqs, src, &row);
    int final = 1; /* every row from the main step: mark the MTP caches after it */
    for (int32_t b = 0; s == NUMLA_STATUS_OK && b < B; b++) {
        const int32_t q0 = st->query_start_loc[b];
        toks[b] = st->tokens + q0;
        srcs[b] = src + q0;
        ns[b] = st->query_start_loc[b + 1] - q0;
        for (int64_t i = 0; i < ns[b]; i++)
            final &= srcs[b][i] >= 0;
        if (numla_v4_seq_mtp_len(seqs[b]) > st->positions[q0])
            s = numla_v4_seq_mtp_truncate(seqs[b], st->positions[q0]);
    }
    /* a step of final rows is a point to come back to (the next one starts at or after it);
     * after more than 8 of them (a prompt chunk's) its end is, so the chained rows after it
     * stay within what a snapshot keeps */
    for (int32_t b = 0; s == NUMLA_STATUS_OK && final && b < B; b++)
        s = numla_v4_seq_mtp_mark(seqs[b]);
    /* the prefix cache: final rows that pass a multiple p of the stride fill the MTP part of the
     * state the main step kept at p (the block ending at p); a chained draft's never do */
    for (int32_t b = 0; s == NUMLA_STATUS_OK && final && t->stride && b < B; b++) {
        const int64_t p0 = st->positions[st->query_start_loc[b]];
        numla_v4_prefix **caps = step_room(t, V4_T_CAPS, sizeof *caps * (size_t)(ns[b] / t->stride + 1));
        int32_t nc = 0;
        if (!caps) {
            s = NUMLA_STATUS_NO_MEMORY;
            break;
        }
        for (int64_t p = (p0 / t->stride + 1) * t->stride; p <= p0 + ns[b]; p += t->stride) {
            numla_v4_prefix *ps = prefix_state(t, st, b, p);
            if (ps)
                caps[nc++] = ps;
        }
        s = numla_v4_seq_mtp_capture(seqs[b], caps, nc);
    }
    for (int32_t b = 0; s != NUMLA_STATUS_OK && final && t->stride && b < B; b++)
        numla_v4_seq_mtp_capture(seqs[b], NULL, 0); /* no capture outlives a failed step */
    if (s == NUMLA_STATUS_OK)
        s = numla_v4_mtp_forward(t->m, B, seqs, toks, srcs, ns, st->num_logit_rows,
                                 st->logit_rows, logits);
    for (int32_t b = 0; s == NUMLA_STATUS_OK && final && b < B; b++)
        if (ns[b] > 8)
            s = numla_v4_seq_mtp_mark(seqs[b]);
    if (s == NUMLA_STATUS_OK)
        s = rowmap_set(&t->last_mtp, st);
    NUMLA_CHECK(s);
    return NUMLA_STATUS_OK;
}
