/* tests/unit/kernels/test_mla_attn_rows.c — the bits contract of kernels/mla_attn.h: a row's
 * result depends only on the keys it sees. Several rows in one call (a causal multi-token
 * sequence, sequences of one query with their own lengths over one shared table, decode with
 * query_start_loc NULL) give each row exactly the output and LSE bits of a call of that row
 * alone (one query, non-causal, seq_lens = its key count: what a one-row decode step passes), at
 * every level and on 1 and 2 threads. Key counts straddle chunk boundaries (256, 512, 1024), the
 * head counts give units of 4, 16 and 16 + 4 rows and groups of 8 units, so the key chunking,
 * the head blocks, the groups and the thread split are all exercised. */
#include "mla_attn_check.h"

#include "kernels/isa.h"

typedef struct rows_case {
    int32_t H, Dc, Dr, bs, P, T; /* row j sees P + j keys */
    numla_dtype qt, kvt, ot;
    uint64_t seed;
} rows_case;

/* Row j alone: out_j (H, Dc) in ot and lse_j (H). */
static int rows_one(const mla_problem *p, const rows_case *rc, numla_isa isa, int32_t j, void *out,
                    float *lse)
{
    static const int32_t qsl1[2] = {0, 1};
    const int32_t len = rc->P + j;
    const size_t W = (size_t)rc->Dc + (size_t)rc->Dr;
    numla_mla_attn_args a = mla_problem_args(p, out, rc->ot, lse);
    a.num_seqs = 1;
    a.q = (const char *)p->q + (size_t)j * (size_t)rc->H * W * numla_dtype_size(rc->qt);
    a.query_start_loc = qsl1;
    a.causal = 0;
    a.seq_lens = &len;
    size_t ws = numla_mla_attn_workspace_size(isa, &a, omp_get_max_threads());
    void *w = malloc(ws);
    numla_status st = numla_mla_attn(isa, &a, w, ws);
    free(w);
    return st == NUMLA_STATUS_OK;
}

/* The whole call: kind 0 causal (one sequence of T queries), 1 T sequences of one query
 * (query_start_loc 0..T) over one table, 2 the same as decode (query_start_loc NULL). */
static int rows_all(const mla_problem *p, const rows_case *rc, numla_isa isa, int kind, void *out,
                    float *lse)
{
    const int32_t T = rc->T;
    int32_t *lens = malloc(sizeof(int32_t) * (size_t)T), *qsl = malloc(sizeof(int32_t) * (size_t)(T + 1));
    int32_t *tab = malloc(sizeof(int32_t) * (size_t)T * (size_t)p->mbps);
    for (int32_t j = 0; j <= T; j++)
        qsl[j] = j;
    for (int32_t j = 0; j < T; j++) {
        lens[j] = rc->P + j;
        memcpy(tab + (size_t)j * p->mbps, p->tables, sizeof(int32_t) * (size_t)p->mbps);
    }
    numla_mla_attn_args a = mla_problem_args(p, out, rc->ot, lse);
    if (kind > 0) {
        a.num_seqs = T;
        a.seq_lens = lens;
        a.block_tables = tab;
        a.query_start_loc = kind == 1 ? qsl : NULL;
        a.causal = 0;
    }
    size_t ws = numla_mla_attn_workspace_size(isa, &a, omp_get_max_threads());
    void *w = malloc(ws);
    numla_status st = numla_mla_attn(isa, &a, w, ws);
    free(w);
    free(lens);
    free(qsl);
    free(tab);
    return st == NUMLA_STATUS_OK;
}

static void rows_check(const rows_case *rc)
{
    const int32_t L = rc->P + rc->T - 1;
    mla_case c = {.B = 1, .H = rc->H, .Dc = rc->Dc, .Dr = rc->Dr, .bs = rc->bs, .lens = &L,
                  .nq = &rc->T, .causal = 1, .qt = rc->qt, .kvt = rc->kvt, .seed = rc->seed};
    mla_problem *p = mla_problem_make(&c);
    const size_t orow = (size_t)rc->H * (size_t)rc->Dc * numla_dtype_size(rc->ot);
    const size_t nout = orow * (size_t)rc->T, nlse = (size_t)rc->H * (size_t)rc->T;
    char *ref = malloc(nout), *out = malloc(nout), *one1 = malloc(orow);
    float *ref_lse = malloc(sizeof(float) * nlse), *lse = malloc(sizeof(float) * nlse);
    float *one_lse = malloc(sizeof(float) * (size_t)rc->H);
    const int team = omp_get_max_threads();
    numla_isa isas[NUMLA_ISA_COUNT];
    const int n = numla_test_isas(isas);
    for (int i = 0; i < n; i++) {
        const numla_isa isa = isas[i];
        numla_mla_attn_args probe = mla_problem_args(p, out, rc->ot, lse);
        const char *var = numla_mla_attn_variant(isa, &probe);
        if (i > 0 && strcmp(var, numla_mla_attn_variant(isas[i - 1], &probe)) == 0)
            continue; /* this level runs the level below's variant */
        /* the one-row calls on one thread are the reference; on two they must agree */
        omp_set_num_threads(1);
        for (int32_t j = 0; j < rc->T; j++)
            CU_ASSERT_FATAL(rows_one(p, rc, isa, j, ref + (size_t)j * orow, ref_lse + (size_t)j * rc->H));
        omp_set_num_threads(2);
        for (int32_t j = 0; j < rc->T; j++) {
            CU_ASSERT_FATAL(rows_one(p, rc, isa, j, one1, one_lse));
            NUMLA_ASSERT_MSG(memcmp(one1, ref + (size_t)j * orow, orow) == 0 &&
                                 memcmp(one_lse, ref_lse + (size_t)j * rc->H, sizeof(float) * (size_t)rc->H) == 0,
                             "%s (H %d, Dc %d, %d keys): a one-row call's bits differ on 2 threads",
                             var, rc->H, rc->Dc, rc->P + j);
        }
        for (int nt = 1; nt <= 2; nt++)
            for (int kind = 0; kind < 3; kind++) {
                omp_set_num_threads(nt);
                memset(out, 0x55, nout);
                CU_ASSERT_FATAL(rows_all(p, rc, isa, kind, out, lse));
                for (int32_t j = 0; j < rc->T; j++) {
                    const int same = memcmp(out + (size_t)j * orow, ref + (size_t)j * orow, orow) == 0 &&
                                     memcmp(lse + (size_t)j * rc->H, ref_lse + (size_t)j * rc->H,
                                            sizeof(float) * (size_t)rc->H) == 0;
                    NUMLA_ASSERT_MSG(same,
                                     "%s, %s of %d rows on %d thread(s) (H %d, Dc %d, out %s): row %d "
                                     "(%d keys) differs from its one-row call",
                                     var, kind == 0 ? "causal" : kind == 1 ? "sequences" : "decode",
                                     rc->T, nt, rc->H, rc->Dc, numla_dtype_name(rc->ot), j, rc->P + j);
                    if (!same)
                        break;
                }
            }
    }
    omp_set_num_threads(team);
    free(ref), free(out), free(one1), free(ref_lse), free(lse), free(one_lse);
    mla_problem_free(p);
}

static void test_rows_keep_one_row_bits(void)
{
    const numla_dtype B16 = NUMLA_DTYPE_BF16, F32 = NUMLA_DTYPE_F32;
    const rows_case cases[] = {
        /* the kjv-v3 shape, a verify step of 9 rows across key 512 */
        {4, 128, 32, 16, 508, 9, F32, B16, F32, 901},
        {4, 128, 32, 16, 508, 9, F32, B16, B16, 902},
        /* DeepSeek's latent width (P·V on the tiles), across 256 and 768 */
        {16, 512, 64, 64, 254, 4, F32, B16, B16, 903},
        {16, 512, 64, 64, 766, 3, F32, B16, F32, 904},
        /* 20 heads: units of 16 + 4 a query; an fp32 cache; across 1024 (a tree of 5 chunks) */
        {20, 64, 16, 8, 1022, 4, B16, F32, F32, 905},
        /* 128 heads: groups of 8 units, across 256 */
        {128, 64, 16, 16, 255, 3, F32, B16, B16, 906},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        rows_check(&cases[i]);
}

NUMLA_TEST_SUITE(mla_attn_rows, NULL, NULL, NUMLA_TEST(test_rows_keep_one_row_bits));
