/* engine/model/attention.c — the MLA block of a layer (docs/design.md §5; docs/prefill.md): the
 * q and latent projections and the cache write, then per sequence the absorbed form (decode
 * rows, short chunks over a long prefix) or the expanded one (other prefill chunks), a mixed
 * step running each form over its own sequences, then o_proj. */
#include <omp.h>
#include <string.h>

#include "engine/model/model_internal.h"
#include "kernels/kv_write.h"
#include "kernels/linear.h"
#include "kernels/merge_attn.h"
#include "kernels/mha_prefill.h"
#include "kernels/mla_attn.h"

static int expand_seq(const numla_model *m, int32_t n, int32_t L);
static int32_t expanded_seqs(const numla_model *m, const numla_step *st);
static numla_status attention_absorbed(numla_model *m, const numla_weights_layer *lw,
                                       int32_t layer, numla_kv_cache *cache, const numla_step *st,
                                       const float *q, const float *cos_sin, float *o);
static numla_status attention_split(numla_model *m, const numla_weights_layer *lw, int32_t layer,
                                    numla_kv_cache *cache, const numla_step *st);
static numla_status attention_expanded(numla_model *m, const numla_weights_layer *lw,
                                       int32_t layer, numla_kv_cache *cache, const numla_step *st);

/* m->sub := the sequences of st that expand_seq() leaves absorbed, as a step of their own
 * (rows compacted in order; m->sub_rows maps them back). Only the fields the absorbed form
 * reads are set. */
static numla_status build_sub_step(numla_model *m, const numla_step *st)
{
    const int64_t B = st->num_seqs, T = st->num_tokens, mb = st->max_blocks_per_seq;
    const char *what = "absorbed part of a mixed step";
    if (T > m->cap[NUMLA_SCRATCH_SUB_TOKENS])
        NUMLA_CHECK(numla_model_scratch_grow(m, NUMLA_SCRATCH_SUB_TOKENS, T, what));
    const int64_t meta = 2 * B + 1 + B * mb;
    if (meta > m->cap[NUMLA_SCRATCH_SUB_META])
        NUMLA_CHECK(numla_model_scratch_grow(m, NUMLA_SCRATCH_SUB_META, meta, what));
    int32_t *qsl = m->sub_meta, *lens = qsl + B + 1, *tables = lens + B;
    int32_t ba = 0, ta = 0;
    qsl[0] = 0;
    for (int64_t b = 0; b < B; b++) {
        const int32_t q0 = st->query_start_loc[b], n = st->query_start_loc[b + 1] - q0;
        if (expand_seq(m, n, st->seq_lens[b]))
            continue;
        for (int32_t i = 0; i < n; i++) {
            m->sub_rows[ta + i] = q0 + i;
            m->sub_slots[ta + i] = st->slots[q0 + i];
        }
        memcpy(tables + (int64_t)ba * mb, st->block_tables + b * mb, (size_t)mb * 4);
        lens[ba] = st->seq_lens[b];
        ta += n;
        qsl[++ba] = ta;
    }
    m->sub = (numla_step){
        .num_seqs = ba, .num_tokens = ta, .slots = m->sub_slots, .query_start_loc = qsl,
        .seq_lens = lens, .block_tables = tables, .max_blocks_per_seq = st->max_blocks_per_seq,
    };
    return NUMLA_STATUS_OK;
}

/* Scratch of the two-part attention for this step (sizes depend on the step's sequences), the
 * step's attention form (m->split, m->all_expanded; the absorbed sub-step when split), and
 * the per-sequence prefix lengths and new-row block tables every layer reuses. */
numla_status numla_model_attention_plan(numla_model *m, const numla_kv_cache *cache,
                                        const numla_step *st)
{
    m->split = m->all_expanded = 0;
    if (m->dsa_sparse) /* every row takes the sparse form (numla_model_dsa_attention) */
        return NUMLA_STATUS_OK;
    const int64_t T = st->num_tokens, B = st->num_seqs, NB = NUMLA_MODEL_NEW_BLOCK;
    const int64_t dc = m->cfg.kv_lora_rank;
    const size_t row_bytes =
        (size_t)(dc + m->cfg.qk_rope_head_dim) * numla_dtype_size(cache->dtype);
    int64_t nmax = 1, blocks = 0;
    for (int64_t b = 0; b < B; b++) {
        int64_t n = st->query_start_loc[b + 1] - st->query_start_loc[b];
        int64_t nb = (n + NB - 1) / NB;
        nmax = nb > nmax ? nb : nmax;
        blocks += nb;
    }
    const char *what = "attention scratch";
    if (T > m->cap[NUMLA_SCRATCH_ATTN_ROWS]) /* T >= B: sized by tokens, so it grows rarely */
        NUMLA_CHECK(numla_model_scratch_grow(m, NUMLA_SCRATCH_ATTN_ROWS, T, what));
    if (B * nmax > m->cap[NUMLA_SCRATCH_NEW_TABLES])
        NUMLA_CHECK(numla_model_scratch_grow(m, NUMLA_SCRATCH_NEW_TABLES, B * nmax, what));
    const int64_t kv_bytes = blocks * NB * (int64_t)row_bytes;
    if (kv_bytes > m->cap[NUMLA_SCRATCH_NEW_KV])
        NUMLA_CHECK(numla_model_scratch_grow(m, NUMLA_SCRATCH_NEW_KV, 2 * kv_bytes, what));
    /* The absorbed form's step: the whole step, or its absorbed sequences compacted. */
    const int32_t ne = expanded_seqs(m, st);
    m->split = ne > 0 && ne < B;
    m->all_expanded = B > 0 && ne == B;
    const numla_step *ab = st;
    if (m->split) {
        NUMLA_CHECK(build_sub_step(m, st));
        ab = &m->sub;
    }
    /* the table stride is cap_new_tables / B: keep every row of the table valid (the
     * sub-step's Ba <= B rows fit in the same table) */
    const int64_t AB = ab->num_seqs;
    const int64_t stride = m->cap[NUMLA_SCRATCH_NEW_TABLES] / (AB > 0 ? AB : 1);
    int32_t next = 0;
    for (int64_t b = 0; b < AB; b++) {
        int32_t n = ab->query_start_loc[b + 1] - ab->query_start_loc[b];
        m->new_lens[b] = n;
        m->pre_lens[b] = ab->seq_lens[b] - n;
        int32_t nb = (n + (int32_t)NB - 1) / (int32_t)NB;
        for (int64_t j = 0; j < stride; j++)
            m->new_tables[b * stride + j] = j < nb ? next + (int32_t)j : next;
        next += nb;
    }
    return NUMLA_STATUS_OK;
}

numla_status numla_model_attention(numla_model *m, const numla_weights_layer *lw, int32_t layer,
                                   numla_kv_cache *cache, const numla_step *st)
{
    const numla_model_config *c = &m->cfg;
    const int64_t T = st->num_tokens, hid = c->hidden_size;
    const int64_t Hr = m->w->shard.head_count, qhd = c->q_head_dim;
    const int64_t dc = c->kv_lora_rank, dr = c->qk_rope_head_dim, vd = c->v_head_dim;
    const int64_t qw = Hr * qhd, aw = dc + dr;

    /* q = W_q x, or W_qb · RMSNorm_qa(W_qa x) */
    if (c->q_lora_rank == 0) {
        NUMLA_CHECK(numla_model_lin(m, &lw->q_proj, T, m->x, hid, m->q, qw, 0));
    } else {
        const int64_t r = c->q_lora_rank;
        NUMLA_CHECK(numla_model_lin(m, &lw->q_a_proj, T, m->x, hid, m->qa, r, 0));
#pragma omp parallel for num_threads(m->num_threads) if (T > 1)
        for (int64_t t = 0; t < T; t++)
            numla_model_rmsnorm(m->qa + t * r, m->qa + t * r, lw->q_a_norm, r,
                                NUMLA_LATENT_NORM_EPS);
        NUMLA_CHECK(numla_model_lin(m, &lw->q_b_proj, T, m->qa, r, m->q, qw, 0));
    }
    /* [c | k_pe] = W_kva x; c' = RMSNorm_kva(c); rope(k_pe) */
    NUMLA_CHECK(numla_model_lin(m, &lw->kv_a_proj, T, m->x, hid, m->kva, aw, 0));
#pragma omp parallel for num_threads(m->num_threads) if (T > 1)
    for (int64_t t = 0; t < T; t++) {
        numla_model_rmsnorm(m->ckv + t * dc, m->kva + t * aw, lw->kv_a_norm, dc,
                            NUMLA_LATENT_NORM_EPS);
        numla_rope_apply(m->kpe + t * dr, m->kva + t * aw + dc, m->cos_sin + t * dr, dr);
    }
    numla_kv_write_args kw = {
        .num_tokens = T, .kv_lora_rank = (int32_t)dc, .rope_dim = (int32_t)dr,
        .kv_c = m->ckv, .kv_c_stride = dc, .k_pe = m->kpe, .k_pe_stride = dr,
        .src_dtype = NUMLA_DTYPE_F32, .slot_mapping = st->slots,
        .kv_cache = numla_kv_cache_layer(cache, layer), .kv_dtype = cache->dtype,
        .num_blocks = cache->num_blocks, .block_size = cache->block_size,
    };
    NUMLA_CHECK(numla_concat_and_cache_mla(m->isa, &kw));

    /* Sparse attention (DSA models): the layer's indexer writes its keys and, when the step
     * selects tokens, picks each row's positions; such a step attends to those only, every
     * row in the absorbed form (docs/sparse_attention.md). */
    if (lw->has_indexer)
        NUMLA_CHECK(numla_model_dsa_index(m, lw, layer, cache, st));
    if (m->dsa_sparse) {
        double ts = omp_get_wtime();
        NUMLA_CHECK(numla_model_dsa_attention(m, lw, layer, cache, st));
        m->stats.attn_s += omp_get_wtime() - ts;
        NUMLA_CHECK(numla_model_lin(m, &lw->o_proj, T, m->o, Hr * vd, m->h, hid, 1));
        return NUMLA_STATUS_OK;
    }

    /* Per sequence, the form expand_seq() picks: decode rows (and short chunks over a long
     * prefix) absorbed, the other prefill chunks expanded. A step with both runs each form
     * over its own sequences (numla_model_attention_plan set m->split and built the absorbed
     * part). */
    double ta = omp_get_wtime();
    if (m->split)
        NUMLA_CHECK(attention_split(m, lw, layer, cache, st));
    else if (m->all_expanded)
        NUMLA_CHECK(attention_expanded(m, lw, layer, cache, st));
    else
        NUMLA_CHECK(attention_absorbed(m, lw, layer, cache, st, m->q, m->cos_sin, m->o));
    m->stats.attn_s += omp_get_wtime() - ta;

    /* h (+)= W_o · concat(o_h) */
    NUMLA_CHECK(numla_model_lin(m, &lw->o_proj, T, m->o, Hr * vd, m->h, hid, 1));
    return NUMLA_STATUS_OK;
}

/* A mixed step: the expanded sequences write their rows of m->o directly; the absorbed ones
 * run as the compacted step m->sub over gathered rows of m->q and m->cos_sin, and their
 * output rows are scattered back into m->o. */
static numla_status attention_split(numla_model *m, const numla_weights_layer *lw, int32_t layer,
                                    numla_kv_cache *cache, const numla_step *st)
{
    NUMLA_CHECK(attention_expanded(m, lw, layer, cache, st));
    const int64_t Ta = m->sub.num_tokens, Hr = m->w->shard.head_count;
    const int64_t qw = Hr * m->cfg.q_head_dim, dr = m->cfg.qk_rope_head_dim;
    const int64_t ow = Hr * m->cfg.v_head_dim;
    for (int64_t i = 0; i < Ta; i++) {
        const int64_t t = m->sub_rows[i];
        memcpy(m->sub_q + i * qw, m->q + t * qw, (size_t)qw * sizeof(float));
        memcpy(m->sub_cs + i * dr, m->cos_sin + t * dr, (size_t)dr * sizeof(float));
    }
    NUMLA_CHECK(attention_absorbed(m, lw, layer, cache, &m->sub, m->sub_q, m->sub_cs, m->sub_o));
    for (int64_t i = 0; i < Ta; i++)
        memcpy(m->o + (int64_t)m->sub_rows[i] * ow, m->sub_o + i * ow, (size_t)ow * sizeof(float));
    return NUMLA_STATUS_OK;
}

numla_status numla_model_absorb_queries(numla_model *m, const numla_weights_layer *lw, int64_t T,
                                        const float *q, const float *cos_sin, float *qabs)
{
    const numla_model_config *c = &m->cfg;
    const int64_t Hr = m->w->shard.head_count, qhd = c->q_head_dim, nope = c->qk_nope_head_dim;
    const int64_t dc = c->kv_lora_rank, dr = c->qk_rope_head_dim;
    const int64_t qw = Hr * qhd, aw = dc + dr;
    /* q̃_h = W_UK,hᵀ q_nope,h, then rope(q_pe,h) */
    NUMLA_CHECK(numla_model_per_head(m, lw->uk_t, lw->uk_in_scale, Hr, T, q, qw, qhd, qabs,
                                     Hr * aw, aw));
#pragma omp parallel for num_threads(m->num_threads) collapse(2) if (T * Hr > 1)
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < Hr; h++)
            numla_rope_apply(qabs + (t * Hr + h) * aw + dc, q + t * qw + h * qhd + nope,
                             cos_sin + t * dr, dr);
    return NUMLA_STATUS_OK;
}

/* A verify step's rows (one sequence, 2 to NUMLA_MODEL_VERIFY_MAX_ROWS new rows, model.h), each
 * with the bits a one-row step at its position gives it: a row's result depends only on the
 * keys it sees, its head blocks being its own query's (kernels/mla_attn.h), so the cached prefix
 * is one causal call in which row j sees the P + j rows before it (the step's earlier rows are
 * in the cache already), each cache row read once for all rows, and the new part one call of
 * T one-query sequences, row j's over its own row alone, where a one-row step has it (first in
 * its new block). With no cached row (P = 0), row 0's prefix call is a one-row call over no
 * key. pre and cur: the whole step's calls, whose outputs and LSEs these fill. */
static numla_status attention_rows(numla_model *m, const numla_step *st,
                                   const numla_mla_attn_args *pre, const numla_mla_attn_args *cur)
{
    const int32_t T = st->num_tokens, P = m->pre_lens[0];
    const int64_t Hr = pre->num_heads, dc = pre->kv_lora_rank, aw = dc + pre->rope_dim;
    const size_t oes = numla_dtype_size(pre->out_dtype);
    const int32_t first = P == 0, NB = NUMLA_MODEL_NEW_BLOCK;
    int32_t qsl[NUMLA_MODEL_VERIFY_MAX_ROWS + 1], ones[NUMLA_MODEL_VERIFY_MAX_ROWS];
    int32_t own[NUMLA_MODEL_VERIFY_MAX_ROWS];
    for (int32_t j = 0; j <= T; j++)
        qsl[j] = j;
    for (int32_t j = 0; j < T; j++) {
        ones[j] = 1;
        own[j] = m->new_tables[0] * NB + j; /* row j of the new rows, as blocks of one row */
    }
    const int32_t zero = 0, plen = P + T - 1, pq[2] = {0, T - first};
    numla_mla_attn_args a0 = *pre, a = *pre, b = *cur;
    a0.query_start_loc = qsl; /* row 0 over no key (P = 0) */
    a0.seq_lens = &zero;
    a.q = (const float *)pre->q + first * Hr * aw; /* q_dtype F32 */
    a.query_start_loc = pq;
    a.causal = 1;
    a.seq_lens = &plen;
    a.out = (char *)pre->out + (size_t)(first * Hr * dc) * oes;
    a.lse = pre->lse + first * Hr;
    b.num_seqs = T;
    b.query_start_loc = qsl;
    b.seq_lens = ones;
    b.block_size = 1;
    b.num_blocks = cur->num_blocks * NB;
    b.max_blocks_per_seq = 1;
    b.block_tables = own;
    const size_t na = numla_mla_attn_workspace_size(m->isa_mla, &a, m->num_threads);
    const size_t nb = numla_mla_attn_workspace_size(m->isa_mla, &b, m->num_threads);
    NUMLA_CHECK(numla_model_grow_workspace(&m->attn_ws, &m->attn_ws_bytes, na > nb ? na : nb,
                                           "attention workspace"));
    if (first)
        NUMLA_CHECK(numla_mla_attn(m->isa_mla, &a0, m->attn_ws, m->attn_ws_bytes));
    NUMLA_CHECK(numla_mla_attn(m->isa_mla, &a, m->attn_ws, m->attn_ws_bytes));
    NUMLA_CHECK(numla_mla_attn(m->isa_mla, &b, m->attn_ws, m->attn_ws_bytes));
    return NUMLA_STATUS_OK;
}

/* Absorbed form (docs/design.md §5) over every row of the step st: reads q (T, H_r · q_head_dim)
 * and cos_sin (T, Dr), writes o (T, H_r · v). */
static numla_status attention_absorbed(numla_model *m, const numla_weights_layer *lw,
                                       int32_t layer, numla_kv_cache *cache, const numla_step *st,
                                       const float *q, const float *cos_sin, float *o)
{
    const numla_model_config *c = &m->cfg;
    const int64_t T = st->num_tokens;
    const int64_t Hr = m->w->shard.head_count;
    const int64_t dc = c->kv_lora_rank, dr = c->qk_rope_head_dim, vd = c->v_head_dim;
    const int64_t aw = dc + dr;

    NUMLA_CHECK(numla_model_absorb_queries(m, lw, T, q, cos_sin, m->qabs));

    /* Attention in two parts merged by LSE (docs/design.md §4): the cached prefix of each sequence
     * (every new query sees all of it) and, causally, the step's own new rows, copied from the
     * paged cache into per-sequence blocks so the numbers match whatever chunking wrote them. */
    const int32_t B = st->num_seqs, NB = NUMLA_MODEL_NEW_BLOCK;
    const size_t row_bytes = (size_t)aw * numla_dtype_size(cache->dtype);
    const char *layer_kv = numla_kv_cache_layer(cache, layer);
    int32_t nmax = (int32_t)(m->cap[NUMLA_SCRATCH_NEW_TABLES] / (B > 0 ? B : 1));
#pragma omp parallel for num_threads(m->num_threads) if (T > 16)
    for (int32_t b = 0; b < B; b++) {
        int32_t q0 = st->query_start_loc[b], n = st->query_start_loc[b + 1] - q0;
        int32_t blk0 = m->new_tables[(int64_t)b * nmax];
        for (int32_t i = 0; i < n; i++) {
            char *dst = (char *)m->new_kv + ((size_t)blk0 * NB + (size_t)i) * row_bytes;
            int64_t slot = st->slots[q0 + i];
            if (slot >= 0)
                memcpy(dst, layer_kv + (size_t)slot * row_bytes, row_bytes);
            else
                memset(dst, 0, row_bytes); /* padding: never written to the cache */
        }
    }
    /* The output in bf16 where W_UV rounds its input to 8 bits next: the kernel then rounds P
     * once to bf16 for the P·V products where an fp32 output needs it split in two (one
     * vdpbf16ps per element instead of two, kernels/mla_attn.h), and both roundings (2^-9
     * relative) are finer than W_UV's (docs/design.md §5.3). The choice is the layer's, never
     * the step's: a row's result does not depend on its batch. (Queries in bf16 would halve
     * the Q·K products too, but move the logits of sensitive models by more than the 8-bit
     * activations do: docs/quantization.md.) */
    const int obf = m->attn_out_bf16 && numla_model_linear_quantizes_input(&lw->uv[0]);
    const int64_t nc = T * Hr * dc;
    m->stats.absorbed_bf16_tokens += obf ? T : 0;
    numla_mla_attn_args pre = {
        .num_seqs = B, .num_heads = (int32_t)Hr, .kv_lora_rank = (int32_t)dc,
        .rope_dim = (int32_t)dr, .block_size = cache->block_size, .num_blocks = cache->num_blocks,
        .max_blocks_per_seq = st->max_blocks_per_seq,
        .q = m->qabs, .q_dtype = NUMLA_DTYPE_F32,
        .kv_cache = layer_kv, .kv_dtype = cache->dtype,
        .block_tables = st->block_tables, .seq_lens = m->pre_lens,
        .query_start_loc = st->query_start_loc, .causal = 0,
        .scale = (float)c->softmax_scale, .out = obf ? (void *)m->ctx_bf : (void *)m->ctx,
        .out_dtype = obf ? NUMLA_DTYPE_BF16 : NUMLA_DTYPE_F32,
        .lse = m->lse_pre,
    };
    numla_mla_attn_args cur = pre;
    cur.block_size = NB;
    cur.num_blocks = (int64_t)((size_t)m->cap[NUMLA_SCRATCH_NEW_KV] / row_bytes / NB);
    cur.max_blocks_per_seq = nmax;
    cur.kv_cache = m->new_kv;
    cur.block_tables = m->new_tables;
    cur.seq_lens = m->new_lens;
    cur.causal = 1;
    cur.out = obf ? (void *)m->ctx2_bf : (void *)m->ctx2;
    cur.lse = m->lse_new;
    size_t need = numla_mla_attn_workspace_size(m->isa_mla, &pre, m->num_threads);
    size_t need2 = numla_mla_attn_workspace_size(m->isa_mla, &cur, m->num_threads);
    NUMLA_CHECK(numla_model_grow_workspace(&m->attn_ws, &m->attn_ws_bytes,
                                           need2 > need ? need2 : need, "attention workspace"));
    double tk = omp_get_wtime();
    if (B == 1 && T >= 2 && T <= NUMLA_MODEL_VERIFY_MAX_ROWS)
        NUMLA_CHECK(attention_rows(m, st, &pre, &cur));
    else {
        NUMLA_CHECK(numla_mla_attn(m->isa_mla, &pre, m->attn_ws, m->attn_ws_bytes));
        NUMLA_CHECK(numla_mla_attn(m->isa_mla, &cur, m->attn_ws, m->attn_ws_bytes));
    }
    if (obf) {
#pragma omp parallel for num_threads(m->num_threads) if (nc > 65536)
        for (int64_t i = 0; i < nc; i++) {
            m->ctx[i] = numla_bf16_to_f32(m->ctx_bf[i]);
            m->ctx2[i] = numla_bf16_to_f32(m->ctx2_bf[i]);
        }
    }
    NUMLA_CHECK(numla_merge_attn_states(m->isa, T * Hr, (int32_t)dc, m->ctx, NULL, m->ctx,
                                        m->lse_pre, m->ctx2, m->lse_new));
    m->stats.attn_kernel_s += omp_get_wtime() - tk;

    /* o_h = W_UV,h · ctx_h */
    NUMLA_CHECK(numla_model_per_head(m, lw->uv, NULL, Hr, T, m->ctx, Hr * dc, dc, o, Hr * vd, vd));
    return NUMLA_STATUS_OK;
}

/* Does a sequence with n new tokens and L keys after the step take the expanded form? (see
 * numla_prefill_form). AUTO compares the two forms' extra work: the expanded form runs kv_b
 * over the P = L - n prefix rows the absorbed form never expands, and saves a fixed time per
 * causal (query, key) pair; it wins when pairs > P · NUMLA_MODEL_EXPAND_PAIRS_PER_ROW. */
static int expand_seq(const numla_model *m, int32_t n, int32_t L)
{
    if (n < 2) /* decode rows stay absorbed */
        return 0;
    switch (m->prefill_form) {
    case NUMLA_PREFILL_FORM_ABSORBED: return 0;
    case NUMLA_PREFILL_FORM_EXPANDED: return 1;
    default: {
        /* the reference level keeps one form (its kernels are for checking, not speed); the
         * constant was measured with the vector kernels (docs/prefill.md) */
        if (m->isa < NUMLA_ISA_AVX2)
            return 0;
        const int64_t P = (int64_t)L - n;
        const int64_t pairs = (int64_t)n * P + (int64_t)n * (n + 1) / 2;
        return pairs > P * (int64_t)NUMLA_MODEL_EXPAND_PAIRS_PER_ROW;
    }
    }
}

static int32_t expanded_seqs(const numla_model *m, const numla_step *st)
{
    int32_t k = 0;
    for (int32_t b = 0; b < st->num_seqs; b++)
        k += expand_seq(m, st->query_start_loc[b + 1] - st->query_start_loc[b], st->seq_lens[b]);
    return k;
}

/* Expanded form (docs/design.md §5) for the sequences expand_seq() picks: every key row of such a
 * sequence (cached prefix and this step's rows, read back from the paged cache so the numbers
 * match the absorbed form's) is expanded by kv_b_proj into per-head [k_nope | v] in one GEMM,
 * k = [k_nope | rope(k_pe)], q = [q_nope | rope(q_pe)], and numla_mha_prefill writes the
 * sequences' rows of m->o (T, H_r · v) directly. */
static numla_status attention_expanded(numla_model *m, const numla_weights_layer *lw,
                                       int32_t layer, numla_kv_cache *cache, const numla_step *st)
{
    const numla_model_config *c = &m->cfg;
    const int64_t T = st->num_tokens, B = st->num_seqs;
    const int64_t Hr = m->w->shard.head_count, qhd = c->q_head_dim, nope = c->qk_nope_head_dim;
    const int64_t dc = c->kv_lora_rank, dr = c->qk_rope_head_dim, vd = c->v_head_dim;
    const int64_t aw = dc + dr, kvw = Hr * (nope + vd);
    if (Hr == 0)
        return NUMLA_STATUS_OK;
    int64_t K = 0, Te = 0;
    for (int64_t b = 0; b < B; b++) {
        int32_t n = st->query_start_loc[b + 1] - st->query_start_loc[b];
        if (expand_seq(m, n, st->seq_lens[b])) {
            K += st->seq_lens[b];
            Te += n;
        }
    }
    const char *what = "expanded attention";
    const int64_t kcap = m->cap[NUMLA_SCRATCH_XP_KEYS];
    if (K > kcap)
        NUMLA_CHECK(numla_model_scratch_grow(m, NUMLA_SCRATCH_XP_KEYS, K > 2 * kcap ? K : 2 * kcap,
                                             what));
    if (T > m->cap[NUMLA_SCRATCH_XP_TOKENS])
        NUMLA_CHECK(numla_model_scratch_grow(m, NUMLA_SCRATCH_XP_TOKENS, T, what));
    if (B > m->cap[NUMLA_SCRATCH_XP_SEQS])
        NUMLA_CHECK(numla_model_scratch_grow(m, NUMLA_SCRATCH_XP_SEQS, B, what));
    int32_t *q_start = m->xp_seq, *q_len = q_start + B, *k_start = q_len + B, *prefix = k_start + B;
    int32_t ne = 0, k0 = 0;
    for (int32_t b = 0; b < (int32_t)B; b++) {
        int32_t n = st->query_start_loc[b + 1] - st->query_start_loc[b];
        if (!expand_seq(m, n, st->seq_lens[b]))
            continue;
        q_start[ne] = st->query_start_loc[b];
        q_len[ne] = n;
        k_start[ne] = k0;
        prefix[ne] = st->seq_lens[b] - n;
        k0 += st->seq_lens[b];
        ne++;
    }
    /* latent rows: the prefix through the block table, the new rows through their slots (a
     * padding slot was never written: zeros, as in the absorbed form) */
    const char *layer_kv = numla_kv_cache_layer(cache, layer);
    const numla_dtype kdt = cache->dtype;
    const int32_t bs = cache->block_size;
    for (int32_t e = 0, b = 0; b < (int32_t)B; b++) {
        int32_t n = st->query_start_loc[b + 1] - st->query_start_loc[b];
        if (!expand_seq(m, n, st->seq_lens[b]))
            continue;
        const int32_t L = st->seq_lens[b], P = L - n;
        const int32_t *table = st->block_tables + (int64_t)b * st->max_blocks_per_seq;
        float *lat = m->xp_lat + (int64_t)k_start[e] * aw;
#pragma omp parallel for num_threads(m->num_threads) schedule(static) if (L > 64)
        for (int32_t t = 0; t < L; t++) {
            int64_t slot = t < P ? (int64_t)table[t / bs] * bs + t % bs
                                 : st->slots[st->query_start_loc[b] + (t - P)];
            float *dst = lat + (int64_t)t * aw;
            if (slot < 0) {
                memset(dst, 0, (size_t)aw * sizeof *dst);
                continue;
            }
            const char *row = layer_kv + (size_t)slot * (size_t)aw * numla_dtype_size(kdt);
            for (int64_t d = 0; d < aw; d++)
                dst[d] = numla_load_f32(row, kdt, (size_t)d);
        }
        e++;
    }
    /* [k_nope | v] per head for every key row: one GEMM (K, Dc) x (Dc, H_r · (nope + v)) */
    NUMLA_CHECK(numla_model_lin(m, &lw->kv_b, K, m->xp_lat, aw, m->xp_kv, kvw, 0));
    const int64_t qhw = Hr * qhd, vw = Hr * vd;
#pragma omp parallel for num_threads(m->num_threads) schedule(static) if (K > 64)
    for (int64_t r = 0; r < K; r++)
        for (int64_t h = 0; h < Hr; h++) {
            const float *src = m->xp_kv + r * kvw + h * (nope + vd);
            float *kd = m->xp_k + r * qhw + h * qhd;
            memcpy(kd, src, (size_t)nope * sizeof *kd);
            memcpy(kd + nope, m->xp_lat + r * aw + dc, (size_t)dr * sizeof *kd);
            memcpy(m->xp_v + r * vw + h * vd, src + nope, (size_t)vd * sizeof *kd);
        }
    /* q = [q_nope | rope(q_pe)] for the expanded sequences' rows */
    const int64_t qw = Hr * qhd;
    for (int32_t e = 0; e < ne; e++) {
#pragma omp parallel for num_threads(m->num_threads) schedule(static) if (q_len[e] > 16)
        for (int32_t i = 0; i < q_len[e]; i++) {
            const int64_t t = (int64_t)q_start[e] + i;
            for (int64_t h = 0; h < Hr; h++) {
                const float *src = m->q + t * qw + h * qhd;
                float *qd = m->xp_q + t * qhw + h * qhd;
                memcpy(qd, src, (size_t)nope * sizeof *qd);
                numla_rope_apply(qd + nope, src + nope, m->cos_sin + t * dr, dr);
            }
        }
    }
    numla_mha_prefill_args a = {
        .num_seqs = ne, .num_heads = (int32_t)Hr, .qk_dim = (int32_t)qhd, .v_dim = (int32_t)vd,
        .q_start = q_start, .q_len = q_len, .k_start = k_start, .prefix = prefix,
        .scale = (float)c->softmax_scale,
        .q = m->xp_q, .q_stride = qhw, .k = m->xp_k, .k_stride = qhw,
        .v = m->xp_v, .v_stride = vw, .out = m->o, .out_stride = vw, .lse = NULL,
    };
    const size_t need = numla_mha_prefill_workspace_size(m->isa_mha, &a, omp_get_max_threads());
    NUMLA_CHECK(numla_model_grow_workspace(&m->xp_ws, &m->xp_ws_bytes, need,
                                           "mha_prefill workspace"));
    double tk = omp_get_wtime();
    NUMLA_CHECK(numla_mha_prefill(m->isa_mha, &a, m->xp_ws, m->xp_ws_bytes));
    m->stats.attn_kernel_s += omp_get_wtime() - tk;
    m->stats.expanded_tokens += Te;
    return NUMLA_STATUS_OK;
}
