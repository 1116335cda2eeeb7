/* engine/model/model_v4_step.c — DeepSeek-V4 driven by numla_step (model_v4.h): the sequences a
 * rank holds, by identity, and one step's forward over them. The scheduler's steps name blocks
 * of the paged pool; V4's cache is per sequence (numla_v4_seq), so a step also names each
 * sequence (numla_step.seq_ids) and the sequences that ended (numla_step.released). */
#include <stdlib.h>
#include <string.h>

#include "engine/model/model_v4.h"

typedef struct v4_entry {
    int64_t key;
    numla_v4_seq *seq;
} v4_entry;

struct numla_v4_seqs {
    const numla_v4_model *m;
    v4_entry *e;       /* (n) live sequences, unordered */
    int32_t n, cap;
};

numla_status numla_v4_seqs_create(const numla_v4_model *m, numla_v4_seqs **out)
{
    if (!m || !out)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_seqs_create: NULL argument");
    *out = calloc(1, sizeof **out);
    if (!*out)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "v4 sequences: no memory");
    (*out)->m = m;
    return NUMLA_STATUS_OK;
}

void numla_v4_seqs_destroy(numla_v4_seqs **pt)
{
    if (!pt || !*pt)
        return;
    numla_v4_seqs *t = *pt;
    for (int32_t i = 0; i < t->n; i++)
        numla_v4_seq_destroy(&t->e[i].seq);
    free(t->e);
    free(t);
    *pt = NULL;
}

int32_t numla_v4_seqs_count(const numla_v4_seqs *t) { return t ? t->n : 0; }

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
        const int64_t have = i < 0 ? -1 : numla_v4_seq_len(t->e[i].seq);
        if (have != first)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                       "deepseek_v4 step: sequence %d (%s %lld) continues at position %d but "
                       "%s (V4's cache is per sequence: a sequence is computed from position 0, "
                       "with no prefix cache)", b, st->seq_ids ? "id" : "first block",
                       (long long)(st->seq_ids ? key : key - INT64_MIN), first,
                       i < 0 ? "this rank holds no such sequence" : "its cache holds another "
                       "number of tokens");
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
    for (int32_t r = 0; st->seq_ids && r < st->num_released; r++) {
        const int32_t i = find(t, st->released[r]);
        if (i >= 0)
            drop(t, i);
    }
    const int32_t B = st->num_seqs;
    if (B == 0)
        return NUMLA_STATUS_OK;
    numla_v4_seq **seqs = malloc(sizeof *seqs * (size_t)B);
    const int32_t **toks = malloc(sizeof *toks * (size_t)B);
    int64_t *ns = malloc(sizeof *ns * (size_t)B);
    numla_status s = seqs && toks && ns ? NUMLA_STATUS_OK : NUMLA_STATUS_NO_MEMORY;
    for (int32_t b = 0; s == NUMLA_STATUS_OK && b < B; b++) {
        const int64_t key = seq_key(st, b);
        int32_t i = find(t, key);
        if (i >= 0 && st->positions[st->query_start_loc[b]] == 0)
            drop(t, i), i = -1; /* the same sequence from the start: an empty cache */
        if (i < 0) {
            if ((s = room(t)) != NUMLA_STATUS_OK)
                break;
            numla_v4_seq *q = NULL;
            if ((s = numla_v4_seq_create(t->m, &q)) != NUMLA_STATUS_OK)
                break;
            i = t->n++;
            t->e[i] = (v4_entry){key, q};
        }
        seqs[b] = t->e[i].seq;
        toks[b] = st->tokens + st->query_start_loc[b];
        ns[b] = st->query_start_loc[b + 1] - st->query_start_loc[b];
    }
    if (s == NUMLA_STATUS_OK)
        s = numla_v4_forward_rows(t->m, B, seqs, toks, ns, st->num_logit_rows, st->logit_rows,
                                  logits);
    free(seqs);
    free(toks);
    free(ns);
    if (s == NUMLA_STATUS_NO_MEMORY)
        NUMLA_FAIL(s, "deepseek_v4 step: no memory for the caches of %d sequences (%d held on "
                   "this rank)", B, t->n);
    NUMLA_CHECK(s);
    return NUMLA_STATUS_OK;
}

numla_status numla_v4_seqs_fill(numla_v4_seqs *t, int64_t key, int64_t n)
{
    if (!t)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_v4_seqs_fill: NULL argument");
    const int32_t held = find(t, key);
    if (held >= 0)
        drop(t, held); /* as a step starting it again from position 0 */
    if (room(t) != NUMLA_STATUS_OK)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "deepseek_v4: no memory for a sequence");
    numla_v4_seq *q = NULL;
    NUMLA_CHECK(numla_v4_seq_create(t->m, &q));
    numla_status s = numla_v4_seq_fill(q, n);
    if (s != NUMLA_STATUS_OK) {
        numla_v4_seq_destroy(&q);
        NUMLA_CHECK(s);
    }
    t->e[t->n++] = (v4_entry){key, q};
    return NUMLA_STATUS_OK;
}
