/* Tests for kernels/dsa: the indexer's scores and fused top-k against a double-precision
 * reference (the kept set must be a valid top-k of the reference scores, exact count, ascending,
 * -1 padded, ties to the lower position), the sparse attention against a double-precision
 * softmax over the selected rows, and the dense equivalence: with context <= topk the indexer
 * keeps every visible key and numla_dsa_attn equals numla_mla_attn. Paged caches with shuffled
 * block tables shared by both caches, NaN in every row nobody owns; every ISA the CPU has;
 * contexts long enough that both calls split and merge. */
#include "test_util.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "kernels/dsa.h"
#include "kernels/mla_attn.h"

typedef struct dsa_case {
    int32_t B, Hi, Di, topk, H, Dc, Dr, bs;
    const int32_t *lens; /* (B) */
    const int32_t *nq;   /* (B) causal queries per sequence, NULL: decode */
    numla_dtype qt, kt;  /* queries (both calls), caches (both) */
    int zero_q;          /* indexer q all zero: every score ties at 0 */
    int coarse;          /* index q and keys in {-1, 0, 1}, weights ±1/8: exact scores, many
                            exact ties at every depth of the top-k */
    int structured;      /* keys shaped like the indexer's (LayerNorm with a per-channel weight
                            and bias, a few outlier channels x8) and queries that share a
                            direction with some keys: what per-token int8 handles worst */
    int i8;              /* the index-key cache is I8 (quantized scoring), written by
                            numla_dsa_key_quantize from the same float keys */
    uint64_t seed;
} dsa_case;

typedef struct dsa_problem {
    dsa_case c;
    int32_t T, mbps;
    int64_t nblk;
    int32_t *lens, *qsl, *tables, *qseq, *qlim; /* qseq/qlim: (T) sequence and visible keys */
    void *iq, *kc, *q, *kv;                     /* index q, index-key cache, MLA q, latent cache */
    float *iqf, *kcf, *qf, *kvf;                /* the same read as float once, for the
                                                   references (kcf NULL for I8 keys) */
    float *w;
    float iscale, scale;
    /* The references, computed once and shared by every level's check (dsa_ref_scores,
     * dsa_attn_ref): the index scores of query q at rs + rs_off[q] (qlim[q] keys); the
     * attention's out (T, H, Dc) and lse (T, H) for the selection ref_ix / ref_cnt. */
    double *rs;
    int64_t *rs_off;
    int32_t *ref_ix, *ref_cnt;
    double *ref_o, *ref_lse;
} dsa_problem;

static void dsa_nan(void *p, numla_dtype t, size_t i)
{
    if (t == NUMLA_DTYPE_F32)
        ((float *)p)[i] = NAN;
    else
        ((uint16_t *)p)[i] = t == NUMLA_DTYPE_BF16 ? 0x7fc0 : 0x7e00;
}

static dsa_problem *dsa_make(const dsa_case *c)
{
    dsa_problem *p = calloc(1, sizeof *p);
    p->c = *c;
    numla_test_rng rng = {c->seed};
    const int32_t W = c->Dc + c->Dr;
    p->lens = malloc(sizeof(int32_t) * (size_t)c->B);
    p->qsl = malloc(sizeof(int32_t) * (size_t)(c->B + 1));
    int64_t used = 0;
    p->mbps = 1;
    p->qsl[0] = 0;
    for (int32_t b = 0; b < c->B; b++) {
        p->lens[b] = c->lens[b];
        int32_t nb = (c->lens[b] + c->bs - 1) / c->bs;
        used += nb;
        p->mbps = nb + 1 > p->mbps ? nb + 1 : p->mbps;
        p->qsl[b + 1] = p->qsl[b] + (c->nq ? c->nq[b] : 1);
    }
    p->T = p->qsl[c->B];
    p->qseq = malloc(sizeof(int32_t) * (size_t)p->T);
    p->qlim = malloc(sizeof(int32_t) * (size_t)p->T);
    for (int32_t b = 0; b < c->B; b++)
        for (int32_t i = 0; i < p->qsl[b + 1] - p->qsl[b]; i++) {
            int32_t n = p->qsl[b + 1] - p->qsl[b];
            p->qseq[p->qsl[b] + i] = b;
            p->qlim[p->qsl[b] + i] = c->nq ? c->lens[b] - n + i + 1 : c->lens[b];
        }
    p->nblk = used + used / 3 + 2;
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)p->nblk);
    for (int64_t i = 0; i < p->nblk; i++)
        perm[i] = (int32_t)i;
    for (int64_t i = p->nblk - 1; i > 0; i--) {
        int64_t j = (int64_t)(numla_test_rng_u64(&rng) % (uint64_t)(i + 1));
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    const size_t es = numla_dtype_size(c->kt);
    const size_t kcn = (size_t)p->nblk * c->bs * c->Di, kvn = (size_t)p->nblk * c->bs * W;
    const size_t irow = numla_dsa_key_row_bytes(c->i8 ? NUMLA_DTYPE_I8 : c->kt, c->Di);
    p->kc = malloc((size_t)p->nblk * c->bs * irow);
    p->kv = malloc(kvn * es);
    if (c->i8) /* codes -128 (outside the code range), scale NaN, a wild sum */
        for (size_t i = 0; i < (size_t)p->nblk * c->bs; i++) {
            char *r = (char *)p->kc + i * irow;
            const float nan = NAN;
            const int32_t wild = 0x7fff1234;
            memset(r, 0x80, (size_t)c->Di);
            memcpy(r + c->Di, &nan, 4);
            memcpy(r + c->Di + 4, &wild, 4);
        }
    else
        for (size_t i = 0; i < kcn; i++)
            dsa_nan(p->kc, c->kt, i);
    float *krow = malloc(sizeof(float) * (size_t)c->Di);
    for (size_t i = 0; i < kvn; i++)
        dsa_nan(p->kv, c->kt, i);
    p->tables = malloc(sizeof(int32_t) * (size_t)c->B * p->mbps);
    int64_t next = 0;
    for (int32_t b = 0; b < c->B; b++) {
        int32_t nb = (c->lens[b] + c->bs - 1) / c->bs;
        for (int32_t j = 0; j < p->mbps; j++)
            p->tables[(size_t)b * p->mbps + j] = j < nb ? perm[next++] : -5;
        for (int32_t t = 0; t < c->lens[b]; t++) {
            size_t slot = (size_t)p->tables[(size_t)b * p->mbps + t / c->bs] * c->bs + t % c->bs;
            for (int32_t d = 0; d < c->Di; d++)
                krow[d] = c->coarse ? (float)((int)(numla_test_rng_u64(&rng) % 3) - 1)
                                    : (float)numla_test_rng_normal(&rng);
            if (c->structured) {
                double mu = 0, var = 0;
                for (int32_t d = 0; d < c->Di; d++)
                    mu += krow[d] / c->Di;
                for (int32_t d = 0; d < c->Di; d++)
                    var += (krow[d] - mu) * (krow[d] - mu) / c->Di;
                for (int32_t d = 0; d < c->Di; d++) /* fixed per-channel weight and bias */
                    krow[d] = (float)((krow[d] - mu) / sqrt(var + 1e-6) *
                                          (0.5 + (d * 37 % 11) / 10.0) * (d % 29 == 3 ? 8.0 : 1.0) +
                                      0.3 * ((d * 53 % 7) - 3) / 3.0);
            }
            if (c->i8)
                numla_dsa_key_quantize(krow, c->Di, (char *)p->kc + slot * irow);
            else
                for (int32_t d = 0; d < c->Di; d++)
                    numla_store_f32(p->kc, c->kt, slot * c->Di + d, krow[d]);
            for (int32_t d = 0; d < W; d++)
                numla_store_f32(p->kv, c->kt, slot * W + d,
                                (float)(0.3 * (d % 7) + numla_test_rng_normal(&rng)));
        }
    }
    const size_t iqn = (size_t)p->T * c->Hi * c->Di, qn = (size_t)p->T * c->H * W;
    p->iq = malloc(iqn * numla_dtype_size(c->qt));
    p->q = malloc(qn * numla_dtype_size(c->qt));
    p->w = malloc(sizeof(float) * (size_t)p->T * c->Hi);
    for (size_t i = 0; i < iqn; i++)
        numla_store_f32(p->iq, c->qt, i,
                        c->zero_q   ? 0.0f
                        : c->coarse ? (float)((int)(numla_test_rng_u64(&rng) % 3) - 1)
                                    : (float)numla_test_rng_normal(&rng));
    for (size_t i = 0; i < qn; i++)
        numla_store_f32(p->q, c->qt, i, (float)(0.5 * numla_test_rng_normal(&rng)));
    if (c->structured) /* each query head leans toward the channels' common direction */
        for (size_t i = 0; i < iqn; i++) {
            const int32_t d = (int32_t)(i % (size_t)c->Di);
            const float v = numla_load_f32(p->iq, c->qt, i) +
                            (float)(0.6 * ((d * 53 % 7) - 3) / 3.0 * (d % 29 == 3 ? 0.25 : 1.0));
            numla_store_f32(p->iq, c->qt, i, v);
        }
    for (int64_t i = 0; i < (int64_t)p->T * c->Hi; i++)
        p->w[i] = c->coarse ? (numla_test_rng_u64(&rng) % 4 ? 0.125f : -0.125f)
                            : (float)(numla_test_rng_normal(&rng) / sqrt((double)c->Hi));
    p->iscale = (float)(1.0 / sqrt((double)c->Di));
    p->scale = (float)(1.0 / sqrt(192.0));
    p->iqf = malloc(sizeof(float) * iqn + 4);
    p->qf = malloc(sizeof(float) * qn + 4);
    p->kvf = malloc(sizeof(float) * kvn + 4);
    for (size_t i = 0; i < iqn; i++)
        p->iqf[i] = numla_load_f32(p->iq, c->qt, i);
    for (size_t i = 0; i < qn; i++)
        p->qf[i] = numla_load_f32(p->q, c->qt, i);
    for (size_t i = 0; i < kvn; i++)
        p->kvf[i] = numla_load_f32(p->kv, c->kt, i);
    if (!c->i8) {
        p->kcf = malloc(sizeof(float) * kcn + 4);
        for (size_t i = 0; i < kcn; i++)
            p->kcf[i] = numla_load_f32(p->kc, c->kt, i);
    }
    free(perm);
    free(krow);
    return p;
}

static void dsa_free(dsa_problem *p)
{
    free(p->lens), free(p->qsl), free(p->tables), free(p->qseq), free(p->qlim);
    free(p->iq), free(p->kc), free(p->q), free(p->kv), free(p->w);
    free(p->iqf), free(p->kcf), free(p->qf), free(p->kvf);
    free(p->rs), free(p->rs_off), free(p->ref_ix), free(p->ref_cnt), free(p->ref_o), free(p->ref_lse);
    free(p);
}

static size_t dsa_slot(const dsa_problem *p, int32_t b, int64_t t)
{
    return (size_t)p->tables[(size_t)b * p->mbps + t / p->c.bs] * p->c.bs + (size_t)(t % p->c.bs);
}

/* The int8 rule of kernels/dsa.h, written out independently: s = max|x| / 127, codes
 * x · (127 / max|x|) rounded to nearest even, clamped to ±127. */
static double dsa_quantize(const float *x, int32_t n, int32_t *codes)
{
    float amax = 0.0f;
    for (int32_t i = 0; i < n; i++)
        amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int32_t i = 0; i < n; i++) {
        const double c = rint((double)(x[i] * inv));
        codes[i] = (int32_t)(c > 127 ? 127 : c < -127 ? -127 : c);
    }
    return (double)(amax / 127.0f);
}

/* Reference index score of key t for query q, in double (I8 keys: the quantized numerics,
 * from the row's codes and scale and an independent quantization of the query). */
static double dsa_ref_score(const dsa_problem *p, int32_t q, int64_t t)
{
    const dsa_case *c = &p->c;
    const size_t slot = dsa_slot(p, p->qseq[q], t);
    double s = 0;
    if (c->i8) {
        const int8_t *kc = (const int8_t *)p->kc + slot * numla_dsa_key_row_bytes(NUMLA_DTYPE_I8, c->Di);
        float sk;
        memcpy(&sk, kc + c->Di, 4);
        float *x = malloc(sizeof(float) * (size_t)c->Di);
        int32_t *qc = malloc(sizeof(int32_t) * (size_t)c->Di);
        for (int32_t h = 0; h < c->Hi; h++) {
            for (int32_t d = 0; d < c->Di; d++)
                x[d] = p->iqf[((size_t)q * c->Hi + h) * c->Di + d];
            const double sq = dsa_quantize(x, c->Di, qc);
            int64_t dot = 0;
            for (int32_t d = 0; d < c->Di; d++)
                dot += (int64_t)qc[d] * kc[d];
            s += (double)p->w[(size_t)q * c->Hi + h] * sq * (double)(dot > 0 ? dot : 0);
        }
        free(x);
        free(qc);
        return s * sk * p->iscale;
    }
    for (int32_t h = 0; h < c->Hi; h++) {
        double dot = 0;
        for (int32_t d = 0; d < c->Di; d++)
            dot += (double)p->iqf[((size_t)q * c->Hi + h) * c->Di + d] *
                   p->kcf[slot * c->Di + d];
        s += (double)p->w[(size_t)q * c->Hi + h] * (dot > 0 ? dot : 0);
    }
    return s * p->iscale;
}

static int dsa_threads(void)
{
    int n = 1;
#pragma omp parallel
#pragma omp single
    n = omp_get_num_threads();
    return n;
}

static numla_dsa_index_args dsa_index_args(const dsa_problem *p, int32_t *ix, int32_t *cnt)
{
    return (numla_dsa_index_args){
        .num_seqs = p->c.B, .num_heads = p->c.Hi, .head_dim = p->c.Di, .block_size = p->c.bs,
        .num_blocks = p->nblk, .max_blocks_per_seq = p->mbps, .block_table_stride = p->mbps,
        .topk = p->c.topk, .q = p->iq,
        .q_dtype = p->c.qt, .w = p->w, .kcache = p->kc, .k_dtype = p->c.i8 ? NUMLA_DTYPE_I8 : p->c.kt,
        .block_tables = p->tables, .seq_lens = p->lens,
        .query_start_loc = p->c.nq ? p->qsl : NULL, .causal = p->c.nq != NULL,
        .scale = p->iscale, .indices = ix, .counts = cnt};
}

static numla_dsa_attn_args dsa_attn_args(const dsa_problem *p, const int32_t *ix, const int32_t *cnt,
                                         void *out, numla_dtype ot, float *lse)
{
    return (numla_dsa_attn_args){
        .num_seqs = p->c.B, .num_heads = p->c.H, .kv_lora_rank = p->c.Dc, .rope_dim = p->c.Dr,
        .block_size = p->c.bs, .num_blocks = p->nblk, .max_blocks_per_seq = p->mbps,
        .block_table_stride = p->mbps, .index_stride = p->c.topk, .q = p->q, .q_dtype = p->c.qt, .kv_cache = p->kv,
        .kv_dtype = p->c.kt, .block_tables = p->tables, .seq_lens = p->lens,
        .query_start_loc = p->c.nq ? p->qsl : NULL, .indices = ix, .counts = cnt,
        .scale = p->scale, .out = out, .out_dtype = ot, .lse = lse};
}

/* The reference index scores of every query over its visible keys (dsa_ref_score), computed on
 * the first call: they do not depend on the level checked. */
static const double *dsa_ref_scores(dsa_problem *p)
{
    if (!p->rs) {
        p->rs_off = malloc(sizeof(int64_t) * (size_t)(p->T + 1));
        p->rs_off[0] = 0;
        for (int32_t q = 0; q < p->T; q++)
            p->rs_off[q + 1] = p->rs_off[q] + p->qlim[q];
        p->rs = malloc(sizeof(double) * (size_t)(p->rs_off[p->T] > 0 ? p->rs_off[p->T] : 1));
        for (int32_t q = 0; q < p->T; q++)
            for (int64_t t = 0; t < p->qlim[q]; t++)
                p->rs[p->rs_off[q] + t] = dsa_ref_score(p, q, t);
    }
    return p->rs;
}

/* Run the indexer at isa; check the selection. Returns the indices (T, topk) and counts. */
static int dsa_check_index(dsa_problem *p, numla_isa isa, int32_t **ixo, int32_t **cnto,
                           const char *label)
{
    const dsa_case *c = &p->c;
    int32_t *ix = malloc(sizeof(int32_t) * (size_t)p->T * c->topk);
    int32_t *cnt = malloc(sizeof(int32_t) * (size_t)p->T);
    for (int64_t i = 0; i < (int64_t)p->T * c->topk; i++)
        ix[i] = 12345;
    numla_dsa_index_args a = dsa_index_args(p, ix, cnt);
    size_t wsb = numla_dsa_index_workspace_size(isa, &a, dsa_threads());
    void *ws = malloc(wsb);
    int ok = numla_dsa_index(isa, &a, ws, wsb) == NUMLA_STATUS_OK;
    free(ws);
    int64_t maxl = 1;
    for (int32_t q = 0; q < p->T; q++)
        maxl = p->qlim[q] > maxl ? p->qlim[q] : maxl;
    const double *rs = dsa_ref_scores(p);
    char *sel = malloc((size_t)maxl);
    for (int32_t q = 0; ok && q < p->T; q++) {
        const int32_t lim = p->qlim[q], want = lim < c->topk ? lim : c->topk;
        const int32_t *r = ix + (size_t)q * c->topk;
        const double *s = rs + p->rs_off[q];
        if (cnt[q] != want) {
            fprintf(stderr, "%s [%s] q %d: count %d, want %d\n", label, numla_isa_name(isa), q, cnt[q], want);
            ok = 0;
            break;
        }
        memset(sel, 0, (size_t)maxl);
        double amp = 1e-30;
        for (int64_t t = 0; t < lim; t++)
            amp = fabs(s[t]) > amp ? fabs(s[t]) : amp;
        for (int32_t j = 0; j < c->topk && ok; j++) {
            if (j >= want) {
                ok = r[j] == -1;
                continue;
            }
            ok = r[j] >= 0 && r[j] < lim && (j == 0 || r[j] > r[j - 1]);
            if (ok)
                sel[r[j]] = 1;
        }
        if (!ok) {
            fprintf(stderr, "%s [%s] q %d: indices not ascending in range / not -1 padded\n", label,
                    numla_isa_name(isa), q);
            break;
        }
        /* a valid top-k: nothing left out beats anything kept (beyond fp32 rounding); an
         * exact tie goes to the lower position */
        double min_in = INFINITY, max_out = -INFINITY;
        int64_t min_in_t = -1, max_out_t = -1;
        for (int64_t t = 0; t < lim; t++) {
            if (sel[t] && s[t] < min_in)
                min_in = s[t], min_in_t = t;
            if (!sel[t] && s[t] > max_out)
                max_out = s[t], max_out_t = t;
        }
        /* exact ties at the boundary: every kept key of the boundary score sits before every
         * left-out one */
        int64_t last_tie_in = -1, first_tie_out = -1;
        for (int64_t t = 0; t < lim; t++)
            if (s[t] == min_in) {
                if (sel[t])
                    last_tie_in = t;
                else if (first_tie_out < 0)
                    first_tie_out = t;
            }
        const double tol = 1e-5 * amp;
        if (first_tie_out >= 0 && first_tie_out < last_tie_in)
            max_out_t = first_tie_out, min_in_t = last_tie_in, max_out = min_in + 2 * tol + 1;
        if (max_out > min_in + tol) {
            fprintf(stderr, "%s [%s] q %d: left out t=%lld (%.9g) above kept t=%lld (%.9g)\n",
                    label, numla_isa_name(isa), q, (long long)max_out_t, max_out,
                    (long long)min_in_t, min_in);
            ok = 0;
        }
    }
    free(sel);
    *ixo = ix;
    *cnto = cnt;
    return ok;
}

/* The double softmax over a selection (T, topk) with counts (T): ref_o (T, H, Dc) and ref_lse
 * (T, H), kept for the next call with the same selection (every level's, and every output
 * dtype's, unless a level kept other keys of an exact tie). */
static void dsa_attn_ref(dsa_problem *p, const int32_t *ix, const int32_t *cnt)
{
    const dsa_case *c = &p->c;
    const int32_t W = c->Dc + c->Dr;
    const size_t nrow = (size_t)p->T * c->H, nix = (size_t)p->T * c->topk;
    if (p->ref_o && !memcmp(p->ref_ix, ix, sizeof(int32_t) * nix) &&
        !memcmp(p->ref_cnt, cnt, sizeof(int32_t) * (size_t)p->T))
        return;
    if (!p->ref_o) {
        p->ref_ix = malloc(sizeof(int32_t) * nix);
        p->ref_cnt = malloc(sizeof(int32_t) * (size_t)p->T);
        p->ref_o = malloc(sizeof(double) * nrow * (size_t)c->Dc);
        p->ref_lse = malloc(sizeof(double) * nrow);
    }
    memcpy(p->ref_ix, ix, sizeof(int32_t) * nix);
    memcpy(p->ref_cnt, cnt, sizeof(int32_t) * (size_t)p->T);
    double *sc = malloc(sizeof(double) * (c->topk + 1));
    for (size_t row = 0; row < nrow; row++) {
        const int32_t q = (int32_t)(row / c->H), n = cnt[q], b = p->qseq[q];
        double *o = p->ref_o + row * (size_t)c->Dc;
        double mx = -INFINITY, sum = 0;
        for (int32_t j = 0; j < n; j++) {
            const size_t slot = dsa_slot(p, b, ix[(size_t)q * c->topk + j]);
            double acc = 0;
            for (int32_t d = 0; d < W; d++)
                acc += (double)p->qf[row * W + d] * p->kvf[slot * W + d];
            sc[j] = acc * p->scale;
            mx = sc[j] > mx ? sc[j] : mx;
        }
        memset(o, 0, sizeof(double) * c->Dc);
        for (int32_t j = 0; j < n; j++) {
            const size_t slot = dsa_slot(p, b, ix[(size_t)q * c->topk + j]);
            const double e = exp(sc[j] - mx);
            sum += e;
            for (int32_t d = 0; d < c->Dc; d++)
                o[d] += e * p->kvf[slot * W + d];
        }
        for (int32_t d = 0; d < c->Dc; d++)
            o[d] = n ? o[d] / sum : 0;
        p->ref_lse[row] = n ? mx + log(sum) : -INFINITY;
    }
    free(sc);
}

/* Sparse attention at isa against a double softmax over the given selection. */
static int dsa_check_attn(dsa_problem *p, numla_isa isa, const int32_t *ix,
                          const int32_t *cnt, numla_dtype ot, const char *label)
{
    const dsa_case *c = &p->c;
    const size_t nrow = (size_t)p->T * c->H, nout = nrow * c->Dc;
    void *out = malloc(nout * numla_dtype_size(ot));
    float *lse = malloc(sizeof(float) * nrow);
    memset(out, 0xff, nout * numla_dtype_size(ot));
    numla_dsa_attn_args a = dsa_attn_args(p, ix, cnt, out, ot, lse);
    size_t wsb = numla_dsa_attn_workspace_size(isa, &a, dsa_threads());
    void *ws = malloc(wsb);
    int ok = numla_dsa_attn(isa, &a, ws, wsb) == NUMLA_STATUS_OK;
    free(ws);
    const double atol = ot == NUMLA_DTYPE_F32 ? 1e-4 : 1e-2, rtol = ot == NUMLA_DTYPE_F32 ? 1e-4 : 1.6e-2;
    if (ok)
        dsa_attn_ref(p, ix, cnt);
    for (size_t row = 0; ok && row < nrow; row++) {
        const int32_t n = cnt[row / c->H];
        const double rl = p->ref_lse[row];
        if (n ? fabs(lse[row] - rl) > 1e-4 + 1e-5 * fabs(rl) : lse[row] != -INFINITY) {
            fprintf(stderr, "%s [%s] row %zu: lse %.7g, want %.7g\n", label, numla_isa_name(isa),
                    row, lse[row], rl);
            ok = 0;
        }
        for (int32_t d = 0; ok && d < c->Dc; d++) {
            const double want = p->ref_o[row * (size_t)c->Dc + d],
                         got = numla_load_f32(out, ot, row * c->Dc + d);
            if (!(fabs(got - want) <= atol + rtol * fabs(want))) {
                fprintf(stderr, "%s [%s] row %zu d %d: %.7g, want %.7g\n", label,
                        numla_isa_name(isa), row, d, got, want);
                ok = 0;
            }
        }
    }
    free(out);
    free(lse);
    return ok;
}

static void dsa_run_case(const dsa_case *c, const char *label)
{
    dsa_problem *p = dsa_make(c);
    numla_isa isas[NUMLA_ISA_COUNT];
    int ni = numla_test_isas(isas);
    for (int i = 0; i < ni; i++) {
        int32_t *ix = NULL, *cnt = NULL;
        CU_ASSERT_TRUE(dsa_check_index(p, isas[i], &ix, &cnt, label));
        static const numla_dtype ots[2] = {NUMLA_DTYPE_F32, NUMLA_DTYPE_BF16};
        for (int o = 0; o < 2; o++)
            CU_ASSERT_TRUE(dsa_check_attn(p, isas[i], ix, cnt, ots[o], label));
        free(ix);
        free(cnt);
    }
    dsa_free(p);
}

/* Decode: contexts around topk, long ones that the indexer and the attention split. */
static void test_decode_shapes(void)
{
    static const int32_t lens[5] = {1, 16, 17, 300, 5000};
    static const int32_t hs[3][3] = {{16, 32, 16}, {64, 128, 22}, {4, 24, 3}}; /* Hi, Di, H */
    for (int i = 0; i < 3; i++) {
        dsa_case c = {.B = 5, .Hi = hs[i][0], .Di = hs[i][1], .topk = 16, .H = hs[i][2],
                      .Dc = 64, .Dr = 16, .bs = 16, .lens = lens, .qt = NUMLA_DTYPE_BF16,
                      .kt = NUMLA_DTYPE_BF16, .seed = 10 + i};
        dsa_run_case(&c, "decode");
    }
    /* the real dims: 64 x 128 indexer, 512 + 64 latent, topk 2048 over 5000 keys */
    static const int32_t lens2[2] = {5000, 2100};
    dsa_case d = {.B = 2, .Hi = 64, .Di = 128, .topk = 2048, .H = 16, .Dc = 512, .Dr = 64,
                  .bs = 64, .lens = lens2, .qt = NUMLA_DTYPE_BF16, .kt = NUMLA_DTYPE_BF16, .seed = 20};
    dsa_run_case(&d, "decode, real dims");
}

/* Multi-token causal prefill: every query gets its own selection. */
static void test_prefill(void)
{
    static const int32_t lens[3] = {40, 7, 90};
    static const int32_t nq[3] = {40, 3, 25};
    static const int32_t bss[3] = {1, 5, 32};
    static const numla_dtype dts[3] = {NUMLA_DTYPE_F32, NUMLA_DTYPE_BF16, NUMLA_DTYPE_F16};
    for (int i = 0; i < 3; i++) {
        dsa_case c = {.B = 3, .Hi = 32, .Di = 48, .topk = 16, .H = 20, .Dc = 32, .Dr = 16,
                      .bs = bss[i], .lens = lens, .nq = nq, .qt = dts[i], .kt = dts[(i + 1) % 3],
                      .seed = 30 + i};
        dsa_run_case(&c, "prefill");
    }
}

/* Odd dims the vector variants do not take (they fall back to ref) and exact ties. */
static void test_odd_dims_and_ties(void)
{
    static const int32_t lens[2] = {33, 4100};
    dsa_case c = {.B = 2, .Hi = 3, .Di = 5, .topk = 7, .H = 2, .Dc = 6, .Dr = 3, .bs = 4,
                  .lens = lens, .qt = NUMLA_DTYPE_F32, .kt = NUMLA_DTYPE_F32, .seed = 40};
    dsa_run_case(&c, "odd dims");
    /* all scores 0: the lowest positions win, whatever the split */
    dsa_case t = {.B = 2, .Hi = 16, .Di = 32, .topk = 20, .H = 16, .Dc = 32, .Dr = 16, .bs = 8,
                  .lens = lens, .qt = NUMLA_DTYPE_BF16, .kt = NUMLA_DTYPE_BF16, .zero_q = 1,
                  .seed = 41};
    /* few distinct scores: ties everywhere, through the candidate cuts, splits and merges */
    static const int32_t clens[3] = {9000, 4100, 700};
    static const int32_t cnq[3] = {3, 1, 20};
    for (int i8 = 0; i8 < 2; i8++) {
        dsa_case k = {.B = 3, .Hi = 16, .Di = 64, .topk = 300, .H = 16, .Dc = 32, .Dr = 16,
                      .bs = 16, .lens = clens, .nq = cnq, .qt = NUMLA_DTYPE_BF16,
                      .kt = NUMLA_DTYPE_BF16, .coarse = 1, .i8 = i8, .seed = 42 + i8};
        dsa_run_case(&k, i8 ? "coarse ties, i8" : "coarse ties");
    }
    dsa_problem *p = dsa_make(&t);
    numla_isa isas[NUMLA_ISA_COUNT];
    int ni = numla_test_isas(isas);
    for (int i = 0; i < ni; i++) {
        int32_t *ix = NULL, *cnt = NULL;
        CU_ASSERT_TRUE(dsa_check_index(p, isas[i], &ix, &cnt, "ties"));
        for (int32_t q = 0; q < p->T; q++)
            for (int32_t j = 0; j < cnt[q]; j++)
                CU_ASSERT_EQUAL_FATAL(ix[(size_t)q * t.topk + j], j);
        free(ix);
        free(cnt);
    }
    dsa_free(p);
}

/* Context <= topk: every visible key is kept and the sparse call equals the dense one. */
static void test_dense_equivalence(void)
{
    static const int32_t lens[3] = {64, 9, 50};
    static const int32_t nq[3] = {64, 2, 1};
    dsa_case c = {.B = 3, .Hi = 16, .Di = 64, .topk = 64, .H = 16, .Dc = 512, .Dr = 64, .bs = 16,
                  .lens = lens, .nq = nq, .qt = NUMLA_DTYPE_BF16, .kt = NUMLA_DTYPE_BF16, .seed = 50};
    dsa_problem *p = dsa_make(&c);
    numla_isa isas[NUMLA_ISA_COUNT];
    int ni = numla_test_isas(isas);
    const size_t nrow = (size_t)p->T * c.H, nout = nrow * c.Dc;
    for (int i = 0; i < ni; i++) {
        int32_t *ix = NULL, *cnt = NULL;
        CU_ASSERT_TRUE(dsa_check_index(p, isas[i], &ix, &cnt, "dense"));
        for (int32_t q = 0; q < p->T; q++) {
            CU_ASSERT_EQUAL(cnt[q], p->qlim[q]);
            for (int32_t j = 0; j < cnt[q]; j++)
                CU_ASSERT_EQUAL(ix[(size_t)q * c.topk + j], j);
        }
        float *o1 = malloc(nout * 4), *o2 = malloc(nout * 4), *l1 = malloc(nrow * 4),
              *l2 = malloc(nrow * 4);
        numla_dsa_attn_args a = dsa_attn_args(p, ix, cnt, o1, NUMLA_DTYPE_F32, l1);
        size_t wsb = numla_dsa_attn_workspace_size(isas[i], &a, dsa_threads());
        void *ws = malloc(wsb);
        CU_ASSERT_EQUAL(numla_dsa_attn(isas[i], &a, ws, wsb), NUMLA_STATUS_OK);
        free(ws);
        numla_mla_attn_args m = {
            .num_seqs = c.B, .num_heads = c.H, .kv_lora_rank = c.Dc, .rope_dim = c.Dr,
            .block_size = c.bs, .num_blocks = p->nblk, .max_blocks_per_seq = p->mbps,
            .q = p->q, .q_dtype = c.qt, .kv_cache = p->kv, .kv_dtype = c.kt,
            .block_tables = p->tables, .seq_lens = p->lens, .query_start_loc = p->qsl,
            .causal = 1, .scale = p->scale, .out = o2, .out_dtype = NUMLA_DTYPE_F32, .lse = l2};
        wsb = numla_mla_attn_workspace_size(isas[i], &m, dsa_threads());
        ws = malloc(wsb);
        CU_ASSERT_EQUAL(numla_mla_attn(isas[i], &m, ws, wsb), NUMLA_STATUS_OK);
        free(ws);
        double worst = 0, worst_l = 0;
        for (size_t k = 0; k < nout; k++)
            worst = fmax(worst, fabs((double)o1[k] - o2[k]) / (1.0 + fabs((double)o2[k])));
        for (size_t k = 0; k < nrow; k++)
            worst_l = fmax(worst_l, fabs((double)l1[k] - l2[k]));
        if (worst > 2e-4 || worst_l > 1e-4)
            fprintf(stderr, "dense [%s]: out rel %.3g, lse %.3g\n", numla_isa_name(isas[i]), worst, worst_l);
        CU_ASSERT_TRUE(worst <= 2e-4 && worst_l <= 1e-4); /* both fp32, each within 1e-4 of exact */
        free(o1), free(o2), free(l1), free(l2), free(ix), free(cnt);
    }
    dsa_free(p);
}

/* The I8 row writer: codes, scale and code sum worked out by hand. */
static void test_i8_key_quantize(void)
{
    /* max |k| = 127: the codes are k rounded to nearest even (2.5 -> 2, -2.5 -> -2, 3.5 -> 4) */
    const float k[8] = {127.0f, 2.5f, -2.5f, 3.5f, 0.5f, -127.0f, 126.6f, -0.4f};
    static const int8_t want[8] = {127, 2, -2, 4, 0, -127, 127, 0};
    char row[16];
    CU_ASSERT_EQUAL(numla_dsa_key_row_bytes(NUMLA_DTYPE_I8, 8), 16);
    CU_ASSERT_EQUAL(numla_dsa_key_row_bytes(NUMLA_DTYPE_BF16, 8), 16);
    CU_ASSERT_EQUAL(numla_dsa_key_row_bytes(NUMLA_DTYPE_F32, 8), 32);
    numla_dsa_key_quantize(k, 8, row);
    int32_t sum = 0, got_sum;
    for (int i = 0; i < 8; i++) {
        NUMLA_ASSERT_MSG(((const int8_t *)row)[i] == want[i], "code %d: %d, want %d", i,
                         ((const int8_t *)row)[i], want[i]);
        sum += want[i];
    }
    float sc;
    memcpy(&sc, row + 8, 4);
    memcpy(&got_sum, row + 12, 4);
    CU_ASSERT_EQUAL(sc, 1.0f);
    CU_ASSERT_EQUAL(got_sum, sum);
    const float bad[4] = {NAN, 1.0f, -2.0f, 0.5f}; /* NaN is skipped by the max and coded 0 */
    numla_dsa_key_quantize(bad, 4, row);
    CU_ASSERT_EQUAL(row[0], 0);
    CU_ASSERT_EQUAL(row[2], -127);
    const float z[4] = {0, 0, 0, 0};
    numla_dsa_key_quantize(z, 4, row);
    memcpy(&sc, row + 4, 4);
    CU_ASSERT_EQUAL(sc, 0.0f);
    CU_ASSERT_EQUAL(row[0] | row[1] | row[2] | row[3], 0);
}

/* Quantized scoring (I8 index keys): every level against a double reference of the int8
 * numerics, decode (split and merged) and causal prefill, head counts the VNNI variant takes
 * and one it does not (the int8 reference runs it). */
static void test_i8_index(void)
{
    static const int32_t lens[5] = {1, 16, 17, 300, 5000};
    static const int32_t hs[3][3] = {{16, 32, 16}, {64, 128, 22}, {4, 24, 3}}; /* Hi, Di, H */
    for (int i = 0; i < 3; i++) {
        dsa_case c = {.B = 5, .Hi = hs[i][0], .Di = hs[i][1], .topk = 16, .H = hs[i][2],
                      .Dc = 64, .Dr = 16, .bs = 16, .lens = lens, .qt = NUMLA_DTYPE_BF16,
                      .kt = NUMLA_DTYPE_BF16, .i8 = 1, .seed = 70 + i};
        dsa_run_case(&c, "i8 decode");
    }
    static const int32_t plens[3] = {40, 7, 300};
    static const int32_t nq[3] = {40, 3, 25};
    dsa_case c = {.B = 3, .Hi = 32, .Di = 64, .topk = 16, .H = 16, .Dc = 32, .Dr = 16, .bs = 5,
                  .lens = plens, .nq = nq, .qt = NUMLA_DTYPE_F32, .kt = NUMLA_DTYPE_F32, .i8 = 1,
                  .seed = 75};
    dsa_run_case(&c, "i8 prefill");
    /* the VNNI variant is what the avx512 level runs where the CPU has it */
    dsa_problem *p = dsa_make(&c);
    int32_t ix[1], cnt[1];
    numla_dsa_index_args a = dsa_index_args(p, ix, cnt);
    CU_ASSERT_STRING_EQUAL(numla_dsa_index_variant(NUMLA_ISA_REF, &a), "i8-ref");
    CU_ASSERT_STRING_EQUAL(numla_dsa_index_variant(NUMLA_ISA_AVX2, &a), "i8-avx2");
    if (numla_isa_supported(NUMLA_ISA_AVX512)) {
        const char *v = numla_dsa_index_variant(NUMLA_ISA_AVX512BF16, &a);
        fprintf(stderr, "[i8 at avx512bf16: %s] ", v);
        CU_ASSERT_TRUE(!strcmp(v, "i8-avx512vnni") || !strcmp(v, "i8-avx2"));
    }
    a.num_heads = 4; /* not a multiple of 8: the int8 reference */
    CU_ASSERT_STRING_EQUAL(numla_dsa_index_variant(NUMLA_ISA_AVX512BF16, &a), "i8-ref");
    a.num_heads = 32, a.k_dtype = NUMLA_DTYPE_F32; /* the float indexer */
    CU_ASSERT_STRING_EQUAL(numla_dsa_index_variant(NUMLA_ISA_AVX2, &a), "avx2");
    a.num_heads = 8; /* heads the avx2 variant takes, avx512's do not */
    CU_ASSERT_STRING_EQUAL(numla_dsa_index_variant(NUMLA_ISA_AVX512BF16, &a), "avx2");
    a.num_heads = 32, a.k_dtype = NUMLA_DTYPE_I8;
    /* the sparse attention's avx2 variant (the dense avx2 chunk over an index list) is what runs
     * at avx2 on the real latent widths, so the cases above checked it there */
    numla_dsa_attn_args t2 = dsa_attn_args(p, ix, cnt, NULL, NUMLA_DTYPE_F32, NULL);
    t2.kv_lora_rank = 512, t2.rope_dim = 64;
    CU_ASSERT_STRING_EQUAL(numla_dsa_attn_variant(NUMLA_ISA_AVX2, &t2), "avx2");
    t2.rope_dim = 8; /* not a multiple of 16: the reference */
    CU_ASSERT_STRING_EQUAL(numla_dsa_attn_variant(NUMLA_ISA_AVX2, &t2), "ref");
    /* the sparse attention's avx512bf16 variant (the dense kernel's chunk over an index list)
     * is what runs there on a bf16 latent cache, so the cases above checked it */
    if (numla_isa_supported(NUMLA_ISA_AVX512BF16)) {
        numla_dsa_attn_args t = dsa_attn_args(p, ix, cnt, NULL, NUMLA_DTYPE_F32, NULL);
        t.kv_dtype = NUMLA_DTYPE_BF16, t.kv_lora_rank = 512, t.rope_dim = 64;
        CU_ASSERT_STRING_EQUAL(numla_dsa_attn_variant(NUMLA_ISA_AVX512BF16, &t), "avx512bf16");
    }
    a.head_dim = 30; /* not a multiple of 4 */
    CU_ASSERT_EQUAL(numla_dsa_index(NUMLA_ISA_REF, &a, ix, 0), NUMLA_STATUS_INVALID_ARG);
    dsa_free(p);
}

/* Run the indexer; return the selection (T, topk) (caller frees). */
static int32_t *dsa_select(const dsa_problem *p, numla_isa isa)
{
    int32_t *ix = malloc(sizeof(int32_t) * (size_t)p->T * p->c.topk);
    int32_t *cnt = malloc(sizeof(int32_t) * (size_t)p->T);
    numla_dsa_index_args a = dsa_index_args(p, ix, cnt);
    size_t wsb = numla_dsa_index_workspace_size(isa, &a, dsa_threads());
    void *ws = malloc(wsb);
    CU_ASSERT_EQUAL(numla_dsa_index(isa, &a, ws, wsb), NUMLA_STATUS_OK);
    free(ws);
    free(cnt);
    return ix;
}

/* A query's selection does not depend on the call's other queries (kernels/dsa.h): each of a
 * sequence's causal queries (a speculative verify step's rows) selected again alone, as a
 * one-query decode over the keys it sees, keeps exactly the same positions, at every level,
 * float and I8 keys, head counts the vector variants take (64) and one they leave to the
 * reference (4 at avx512; avx2 takes 8). Random scores, so the cut falls between close ones.
 * On 2 threads the 25-query call scores the long sequence's queries unsplit, 3 a group, and
 * each alone is split in two parts at half its keys (not a key-block boundary). */
static void test_index_rows_alone(void)
{
    static const int32_t lens[2] = {2600, 700}, nq[2] = {20, 5}, his[3] = {64, 8, 4};
    numla_isa isas[NUMLA_ISA_COUNT];
    const int ni = numla_test_isas(isas), threads = omp_get_max_threads();
    omp_set_num_threads(2);
    for (int v = 0; v < 6; v++) {
        dsa_case c = {.B = 2, .Hi = his[v % 3], .Di = 32, .topk = 256, .H = 16, .Dc = 32,
                      .Dr = 16, .bs = 16, .lens = lens, .nq = nq, .qt = NUMLA_DTYPE_BF16,
                      .kt = NUMLA_DTYPE_BF16, .i8 = v >= 3, .seed = 95 + v};
        dsa_problem *p = dsa_make(&c);
        for (int i = 0; i < ni; i++) {
            int32_t *ix = dsa_select(p, isas[i]), one[256], cnt = 0;
            for (int32_t q = 0; q < p->T; q++) {
                const int32_t b = p->qseq[q], lim = p->qlim[q];
                numla_dsa_index_args a = dsa_index_args(p, one, &cnt);
                const size_t qbytes = (size_t)c.Hi * c.Di * numla_dtype_size(c.qt);
                a.num_seqs = 1, a.query_start_loc = NULL, a.causal = 0;
                a.q = (const char *)p->iq + (size_t)q * qbytes;
                a.w = p->w + (size_t)q * c.Hi;
                a.block_tables = p->tables + (size_t)b * p->mbps;
                a.seq_lens = &lim;
                const size_t wsb = numla_dsa_index_workspace_size(isas[i], &a, dsa_threads());
                void *ws = malloc(wsb);
                CU_ASSERT_EQUAL_FATAL(numla_dsa_index(isas[i], &a, ws, wsb), NUMLA_STATUS_OK);
                free(ws);
                NUMLA_ASSERT_MSG(!memcmp(one, ix + (size_t)q * c.topk, sizeof one),
                                 "%s (%s) Hi %d %s: query %d alone selects other keys\n",
                                 numla_isa_name(isas[i]), numla_dsa_index_variant(isas[i], &a),
                                 c.Hi, c.i8 ? "i8" : "bf16", q);
            }
            free(ix);
        }
        dsa_free(p);
    }
    omp_set_num_threads(threads);
}

/* Accuracy of the quantized scoring against the float one on the same keys: the mean share of
 * the float top-k that the int8 scoring keeps too (docs/sparse_attention.md has the figures). */
static double dsa_i8_overlap(dsa_case c, numla_isa isa)
{
    c.i8 = 0;
    dsa_problem *pf = dsa_make(&c);
    c.i8 = 1;
    dsa_problem *pq = dsa_make(&c); /* same seed: the same float keys, queries and weights */
    int32_t *sf = dsa_select(pf, isa), *sq = dsa_select(pq, isa);
    double tot = 0;
    for (int32_t q = 0; q < pf->T; q++) {
        const int32_t *a = sf + (size_t)q * c.topk, *b = sq + (size_t)q * c.topk;
        int32_t i = 0, j = 0, same = 0, n = 0;
        while (n < c.topk && a[n] >= 0)
            n++;
        while (i < n && j < c.topk && b[j] >= 0) { /* both ascending */
            if (a[i] == b[j])
                same++, i++, j++;
            else if (a[i] < b[j])
                i++;
            else
                j++;
        }
        tot += n ? (double)same / n : 1.0;
    }
    const double r = tot / pf->T;
    free(sf), free(sq);
    dsa_free(pf), dsa_free(pq);
    return r;
}

static void test_i8_accuracy(void)
{
    static const int32_t lens[4] = {8000, 8000, 6000, 4096};
    dsa_case c = {.B = 4, .Hi = 64, .Di = 128, .topk = 2048, .H = 16, .Dc = 32, .Dr = 16,
                  .bs = 64, .lens = lens, .qt = NUMLA_DTYPE_F32, .kt = NUMLA_DTYPE_F32, .seed = 90};
    const numla_isa isa = numla_isa_best();
    const double r = dsa_i8_overlap(c, isa);
    fprintf(stderr, "[i8 top-2048 overlap, random: %.4f] ", r);
    NUMLA_ASSERT_MSG(r >= 0.9, "int8 keeps %.4f of the float top-k on random data", r);
    c.structured = 1;
    const double rs = dsa_i8_overlap(c, isa);
    fprintf(stderr, "[structured: %.4f] ", rs);
    NUMLA_ASSERT_MSG(rs >= 0.9, "int8 keeps %.4f of the float top-k on structured data", rs);
}

/* Bad input is an error naming the field, and nothing is written. */
static void test_errors(void)
{
    static const int32_t lens[2] = {20, 40};
    dsa_case c = {.B = 2, .Hi = 16, .Di = 16, .topk = 8, .H = 4, .Dc = 16, .Dr = 16, .bs = 8,
                  .lens = lens, .qt = NUMLA_DTYPE_F32, .kt = NUMLA_DTYPE_F32, .seed = 60};
    dsa_problem *p = dsa_make(&c);
    int32_t ix[2 * 8], cnt[2] = {-9, -9};
    numla_dsa_index_args a = dsa_index_args(p, ix, cnt);
    size_t wsb = numla_dsa_index_workspace_size(NUMLA_ISA_REF, &a, dsa_threads());
    void *ws = malloc(wsb);
    CU_ASSERT_EQUAL(numla_dsa_index(NUMLA_ISA_REF, &a, ws, wsb - 100), NUMLA_STATUS_INVALID_ARG);
    int32_t saved = p->tables[1];
    p->tables[1] = (int32_t)p->nblk;
    CU_ASSERT_EQUAL(numla_dsa_index(NUMLA_ISA_REF, &a, ws, wsb), NUMLA_STATUS_OUT_OF_RANGE);
    CU_ASSERT_EQUAL(cnt[0], -9);
    p->tables[1] = saved;
    a.topk = 0;
    CU_ASSERT_EQUAL(numla_dsa_index(NUMLA_ISA_REF, &a, ws, wsb), NUMLA_STATUS_INVALID_ARG);
    a.topk = 8;
    CU_ASSERT_EQUAL(numla_dsa_index(NUMLA_ISA_REF, &a, ws, wsb), NUMLA_STATUS_OK);
    free(ws);
    float out[2 * 4 * 16], lse[8];
    numla_dsa_attn_args t = dsa_attn_args(p, ix, cnt, out, NUMLA_DTYPE_F32, lse);
    wsb = numla_dsa_attn_workspace_size(NUMLA_ISA_REF, &t, dsa_threads());
    ws = malloc(wsb);
    CU_ASSERT_EQUAL(numla_dsa_attn(NUMLA_ISA_REF, &t, ws, wsb), NUMLA_STATUS_OK);
    ix[8] = 40; /* sequence 1 has keys 0 .. 39 */
    CU_ASSERT_EQUAL(numla_dsa_attn(NUMLA_ISA_REF, &t, ws, wsb), NUMLA_STATUS_OUT_OF_RANGE);
    ix[8] = 0;
    cnt[0] = 9;
    CU_ASSERT_EQUAL(numla_dsa_attn(NUMLA_ISA_REF, &t, ws, wsb), NUMLA_STATUS_OUT_OF_RANGE);
    free(ws);
    dsa_free(p);
}

/* One block table shared by every sequence (block_table_stride 0): each sequence a query row
 * that reads the longest one's cache at its own limit (DeepSeek-V4's indexer passes a prefill
 * chunk so). The same bits as the copied form (every row of the table a copy of sequence 0's,
 * stride max_blocks_per_seq) at every level, both calls; the other sequences' own rows of the
 * problem's table hold other blocks (other keys), so a kernel that reads past row 0 differs. */
static void dsa_check_shared_table(const dsa_case *c, const char *label)
{
    dsa_problem *p = dsa_make(c);
    const size_t mbps = (size_t)p->mbps, K = (size_t)c->topk, T = (size_t)p->T;
    const size_t nrow = T * (size_t)c->H, nout = nrow * (size_t)c->Dc;
    int32_t *copy = malloc(sizeof(int32_t) * (size_t)c->B * mbps);
    for (int32_t b = 0; b < c->B; b++)
        memcpy(copy + (size_t)b * mbps, p->tables, sizeof(int32_t) * mbps);
    int32_t *ix[2], *cnt[2];
    float *out[2], *lse[2];
    for (int k = 0; k < 2; k++) {
        ix[k] = malloc(sizeof(int32_t) * T * K), cnt[k] = malloc(sizeof(int32_t) * T);
        out[k] = malloc(sizeof(float) * nout), lse[k] = malloc(sizeof(float) * nrow);
    }
    numla_isa isas[NUMLA_ISA_COUNT];
    const int ni = numla_test_isas(isas);
    for (int i = 0; i < ni; i++) {
        for (int k = 0; k < 2; k++) { /* k 0: the copied rows; 1: one shared row */
            numla_dsa_index_args a = dsa_index_args(p, ix[k], cnt[k]);
            a.block_tables = k ? p->tables : copy;
            a.block_table_stride = k ? 0 : p->mbps;
            size_t wsb = numla_dsa_index_workspace_size(isas[i], &a, dsa_threads());
            void *ws = malloc(wsb);
            CU_ASSERT_EQUAL(numla_dsa_index(isas[i], &a, ws, wsb), NUMLA_STATUS_OK);
            free(ws);
            /* both attend to the copied form's selection */
            numla_dsa_attn_args t = dsa_attn_args(p, ix[0], cnt[0], out[k], NUMLA_DTYPE_F32, lse[k]);
            t.block_tables = a.block_tables;
            t.block_table_stride = a.block_table_stride;
            wsb = numla_dsa_attn_workspace_size(isas[i], &t, dsa_threads());
            ws = malloc(wsb);
            CU_ASSERT_EQUAL(numla_dsa_attn(isas[i], &t, ws, wsb), NUMLA_STATUS_OK);
            free(ws);
        }
        for (int32_t q = 0; q < p->T; q++)
            CU_ASSERT_EQUAL(cnt[0][q], p->qlim[q] < c->topk ? p->qlim[q] : c->topk);
        NUMLA_ASSERT_MSG(!memcmp(cnt[0], cnt[1], sizeof(int32_t) * T) &&
                             !memcmp(ix[0], ix[1], sizeof(int32_t) * T * K),
                         "%s [%s]: the shared table's selection differs", label,
                         numla_isa_name(isas[i]));
        NUMLA_ASSERT_MSG(!memcmp(out[0], out[1], sizeof(float) * nout) &&
                             !memcmp(lse[0], lse[1], sizeof(float) * nrow),
                         "%s [%s]: the shared table's attention differs", label,
                         numla_isa_name(isas[i]));
    }
    /* a stride wider than max_blocks_per_seq: the rows further apart, the same selection */
    const size_t wide = mbps + 3;
    int32_t *wtab = malloc(sizeof(int32_t) * (size_t)c->B * wide);
    for (size_t i = 0; i < (size_t)c->B * wide; i++)
        wtab[i] = -7;
    for (int32_t b = 0; b < c->B; b++)
        memcpy(wtab + (size_t)b * wide, p->tables + (size_t)b * mbps, sizeof(int32_t) * mbps);
    numla_dsa_index_args a = dsa_index_args(p, ix[0], cnt[0]);
    size_t wsb = numla_dsa_index_workspace_size(NUMLA_ISA_REF, &a, dsa_threads());
    void *ws = malloc(wsb);
    CU_ASSERT_EQUAL(numla_dsa_index(NUMLA_ISA_REF, &a, ws, wsb), NUMLA_STATUS_OK);
    a.indices = ix[1], a.counts = cnt[1], a.block_tables = wtab, a.block_table_stride = (int32_t)wide;
    CU_ASSERT_EQUAL(numla_dsa_index(NUMLA_ISA_REF, &a, ws, wsb), NUMLA_STATUS_OK);
    CU_ASSERT(!memcmp(ix[0], ix[1], sizeof(int32_t) * T * K) &&
              !memcmp(cnt[0], cnt[1], sizeof(int32_t) * T));
    free(wtab);
    /* the rows the shared table is checked up to (the longest sequence's), and the stride */
    a.block_tables = p->tables, a.block_table_stride = 0;
    const int32_t last = (p->lens[0] - 1) / c->bs, saved = p->tables[last];
    p->tables[last] = -1;
    CU_ASSERT_EQUAL(numla_dsa_index(NUMLA_ISA_REF, &a, ws, wsb), NUMLA_STATUS_OUT_OF_RANGE);
    p->tables[last] = saved;
    a.block_table_stride = p->mbps - 1;
    CU_ASSERT_EQUAL(numla_dsa_index(NUMLA_ISA_REF, &a, ws, wsb), NUMLA_STATUS_INVALID_ARG);
    free(ws);
    for (int k = 0; k < 2; k++)
        free(ix[k]), free(cnt[k]), free(out[k]), free(lse[k]);
    free(copy);
    dsa_free(p);
}

static void test_shared_table(void)
{
    /* sequence 0 the longest; limits below and above topk, one long enough to split */
    static const int32_t lens[6] = {5000, 1, 17, 300, 4999, 2100};
    dsa_case c = {.B = 6, .Hi = 16, .Di = 32, .topk = 64, .H = 16, .Dc = 64, .Dr = 16, .bs = 16,
                  .lens = lens, .qt = NUMLA_DTYPE_BF16, .kt = NUMLA_DTYPE_BF16, .seed = 110};
    dsa_check_shared_table(&c, "shared table");
    c.i8 = 1, c.seed = 111;
    dsa_check_shared_table(&c, "shared table, i8 keys");
    c.i8 = 0, c.kt = NUMLA_DTYPE_F32, c.qt = NUMLA_DTYPE_F32, c.bs = 5, c.seed = 112;
    dsa_check_shared_table(&c, "shared table, f32");
}

NUMLA_TEST_SUITE(dsa, NULL, NULL, NUMLA_TEST(test_decode_shapes), NUMLA_TEST(test_prefill),
                 NUMLA_TEST(test_odd_dims_and_ties), NUMLA_TEST(test_dense_equivalence),
                 NUMLA_TEST(test_errors), NUMLA_TEST(test_i8_key_quantize),
                 NUMLA_TEST(test_i8_index), NUMLA_TEST(test_index_rows_alone),
                 NUMLA_TEST(test_i8_accuracy), NUMLA_TEST(test_shared_table))
