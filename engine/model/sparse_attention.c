/* engine/model/sparse_attention.c — DeepSeek Sparse Attention in the forward pass (DSA models:
 * deepseek_v32, glm_moe_dsa; docs/sparse_attention.md): the lightning indexer of a layer
 * (projections, numla_indexer_prepare, its keys into the index-key cache, numla_dsa_index) and
 * the sparse MLA that attends to the selected rows only (numla_dsa_attn).
 *
 * A step selects tokens when one of its sequences is longer than index_topk; otherwise the
 * indexer would keep every visible key, and the layer runs the dense forms of attention.c
 * (the same result; kernels/dsa.h's dense-equivalence test). The indexer still writes its keys
 * on every step, so a sequence that grows past index_topk finds them all cached. A selecting
 * step's rows then attend to their selected rows, those with at most index_topk keys to every
 * key; in a speculative verify step (one sequence, 2 to NUMLA_MODEL_VERIFY_MAX_ROWS rows) each
 * row runs the calls a one-row step at its position runs, so its bits are that step's
 * (docs/speculative.md): a row with at most index_topk keys the dense absorbed form's two
 * calls (attention.c), a row past it the sparse attention over its own selection alone. GLM-5's
 * "shared" layers have no indexer and reuse the selection of the last full layer, which stays
 * in m->idx_sel for the rest of the step. The indexer is replicated: every rank computes the
 * same selection from the same (allreduced) inputs. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "engine/model/indexer.h"
#include "engine/model/model_internal.h"
#include "kernels/dsa.h"
#include "kernels/kv_write.h"
#include "kernels/merge_attn.h"
#include "kernels/mla_attn.h"

/* A speculative verify step: one sequence, 2 to NUMLA_MODEL_VERIFY_MAX_ROWS rows, each of which
 * gets the bits of a one-row step at its position (as attention.c's attention_rows). */
static int verify_step(const numla_step *st)
{
    return st->num_seqs == 1 && st->num_tokens >= 2 &&
           st->num_tokens <= NUMLA_MODEL_VERIFY_MAX_ROWS;
}

/* How many of a verify step's rows have at most index_topk keys (the first ones): a one-row
 * step there does not select, so these rows run the dense form. */
static int64_t verify_dense_rows(const numla_model *m, const numla_step *st)
{
    const int64_t T = st->num_tokens, P = (int64_t)st->seq_lens[0] - T;
    const int64_t n = m->cfg.dsa.index_topk - P; /* row j has P + j + 1 keys */
    return n < 0 ? 0 : n > T ? T : n;
}

numla_status numla_model_dsa_plan(numla_model *m, const numla_kv_cache *cache,
                                  const numla_step *st)
{
    const numla_dsa_config *d = &m->cfg.dsa;
    m->dsa_sparse = 0;
    if (!d->enabled)
        return NUMLA_STATUS_OK;
    if (cache->index_dim != d->index_head_dim || !cache->index_data)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "model: %s needs the KV cache's index-key pool of %lld values a token "
                   "(numla_kv_cache_create_for_model); this cache has %d",
                   m->cfg.model_type, (long long)d->index_head_dim, cache->index_dim);
    for (int32_t b = 0; b < st->num_seqs; b++)
        m->dsa_sparse |= st->seq_lens[b] > d->index_topk;
    if (st->num_tokens > m->cap[NUMLA_SCRATCH_DSA_TOKENS])
        NUMLA_CHECK(numla_model_scratch_grow(m, NUMLA_SCRATCH_DSA_TOKENS, st->num_tokens,
                                             "sparse-attention indexer scratch"));
    /* a verify step that straddles index_topk: its first rows' dense calls need the two-part
     * attention's scratch (attention.c plans none for a selecting step) and one block of the
     * in-step copy for a row's own cache row */
    if (m->dsa_sparse && verify_step(st) && verify_dense_rows(m, st) > 0) {
        const char *what = "attention scratch";
        const int64_t row_bytes = (int64_t)(m->cfg.kv_lora_rank + m->cfg.qk_rope_head_dim) *
                                  (int64_t)numla_dtype_size(cache->dtype);
        if (st->num_tokens > m->cap[NUMLA_SCRATCH_ATTN_ROWS])
            NUMLA_CHECK(numla_model_scratch_grow(m, NUMLA_SCRATCH_ATTN_ROWS, st->num_tokens, what));
        if (NUMLA_MODEL_NEW_BLOCK * row_bytes > m->cap[NUMLA_SCRATCH_NEW_KV])
            NUMLA_CHECK(numla_model_scratch_grow(m, NUMLA_SCRATCH_NEW_KV,
                                                 NUMLA_MODEL_NEW_BLOCK * row_bytes, what));
    }
    return NUMLA_STATUS_OK;
}

numla_status numla_model_dsa_index(numla_model *m, const numla_weights_layer *lw, int32_t layer,
                                   numla_kv_cache *cache, const numla_step *st)
{
    const numla_model_config *c = &m->cfg;
    const numla_dsa_config *d = &c->dsa;
    const int64_t T = st->num_tokens, hid = c->hidden_size, r = c->q_lora_rank;
    const int64_t hi = d->index_n_heads, di = d->index_head_dim;
    /* q = wq_b(q latent), k = wk(x), w = weights_proj(x) */
    NUMLA_CHECK(numla_model_lin(m, &lw->idx_wq_b, T, m->qa, r, m->idx_q, hi * di, 0));
    NUMLA_CHECK(numla_model_lin(m, &lw->idx_wk, T, m->x, hid, m->idx_k, di, 0));
    NUMLA_CHECK(numla_model_lin(m, &lw->idx_weights, T, m->x, hid, m->idx_w, hi, 0));
    numla_indexer_prep_args pa = {
        .num_tokens = T, .num_heads = (int32_t)hi, .head_dim = (int32_t)di,
        .rope_dim = (int32_t)d->rope_dim, .rope = d->index_rope, .cos_sin = m->cos_sin,
        .k_norm_w = lw->idx_k_norm_w, .k_norm_b = lw->idx_k_norm_b,
        .q = m->idx_q, .k = m->idx_k, .w = m->idx_w,
    };
    NUMLA_CHECK(numla_indexer_prepare(&pa));
    /* the keys into the index-key cache, at the latent rows' slots: float rows as the latent
     * rows are written, int8 rows (the quantized scoring option) by the kernels' own rule */
    char *pool = numla_kv_cache_index_layer(cache, layer);
    if (cache->index_dtype == NUMLA_DTYPE_I8) {
        const size_t row = numla_dsa_key_row_bytes(NUMLA_DTYPE_I8, (int32_t)di);
        const int64_t slots = cache->num_blocks * (int64_t)cache->block_size;
        for (int64_t t = 0; t < T; t++) {
            const int64_t slot = st->slots[t];
            if (slot >= slots)
                NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "model: slot %lld of token %lld is outside "
                           "the index-key pool (%lld slots)", (long long)slot, (long long)t,
                           (long long)slots);
            if (slot >= 0)
                numla_dsa_key_quantize(m->idx_k + t * di, (int32_t)di, pool + (size_t)slot * row);
        }
    } else {
        numla_kv_write_args kw = {
            .num_tokens = T, .kv_lora_rank = (int32_t)di, .rope_dim = 0,
            .kv_c = m->idx_k, .kv_c_stride = di, .src_dtype = NUMLA_DTYPE_F32,
            .slot_mapping = st->slots, .kv_cache = pool, .kv_dtype = cache->index_dtype,
            .num_blocks = cache->num_blocks, .block_size = cache->block_size,
        };
        NUMLA_CHECK(numla_concat_and_cache_mla(m->isa, &kw));
    }
    if (!m->dsa_sparse)
        return NUMLA_STATUS_OK;

    /* With bf16 index keys the queries are scored in bf16 too (the vdpbf16ps variant; its
     * rounding is the keys' own); f32 keys keep f32 queries (transformers' fp32 scoring), the
     * int8 option quantizes them itself. */
    const void *q = m->idx_q;
    numla_dtype qdt = NUMLA_DTYPE_F32;
    if (cache->index_dtype == NUMLA_DTYPE_BF16) {
#pragma omp parallel for num_threads(m->num_threads) if (T > 16)
        for (int64_t i = 0; i < T * hi * di; i++)
            m->idx_qb[i] = numla_f32_to_bf16(m->idx_q[i]);
        q = m->idx_qb;
        qdt = NUMLA_DTYPE_BF16;
    }

    /* each row's visible keys (causal: its own position and before), the best index_topk */
    numla_dsa_index_args ia = {
        .num_seqs = st->num_seqs, .num_heads = (int32_t)hi, .head_dim = (int32_t)di,
        .block_size = cache->block_size, .num_blocks = cache->num_blocks,
        .max_blocks_per_seq = st->max_blocks_per_seq,
        .block_table_stride = st->max_blocks_per_seq, .topk = (int32_t)d->index_topk,
        .q = q, .q_dtype = qdt, .w = m->idx_w,
        .kcache = pool, .k_dtype = cache->index_dtype,
        .block_tables = st->block_tables, .seq_lens = st->seq_lens,
        .query_start_loc = st->query_start_loc, .causal = 1,
        .scale = (float)(1.0 / sqrt((double)di)),
        .indices = m->idx_sel, .counts = m->idx_cnt,
    };
    const size_t need = numla_dsa_index_workspace_size(m->isa, &ia, m->num_threads);
    NUMLA_CHECK(numla_model_grow_workspace(&m->dsa_ws, &m->dsa_ws_bytes, need,
                                           "sparse-attention indexer workspace"));
    double tk = omp_get_wtime();
    NUMLA_CHECK(numla_dsa_index(m->isa, &ia, m->dsa_ws, m->dsa_ws_bytes));
    m->stats.attn_kernel_s += omp_get_wtime() - tk;
    return NUMLA_STATUS_OK;
}

/* Row j of a verify step that has at most index_topk keys: the absorbed form's two calls of a
 * one-row step at its position (attention.c attention_absorbed with one row): the P + j cached
 * rows before it, then its own cache row alone (first in a block of the in-step copy, where a
 * one-row step has it), both outputs in bf16 where W_UV quantizes its input, merged by LSE into
 * row j of m->ctx. Only the one step whose rows straddle index_topk has such rows, so each
 * reads the cached prefix in a call of its own. */
static numla_status dense_row(numla_model *m, const numla_weights_layer *lw, int32_t layer,
                              const numla_kv_cache *cache, const numla_step *st, int64_t j)
{
    const numla_model_config *c = &m->cfg;
    const int64_t T = st->num_tokens, Hr = m->w->shard.head_count, dc = c->kv_lora_rank;
    const int64_t dr = c->qk_rope_head_dim, aw = dc + dr, NB = NUMLA_MODEL_NEW_BLOCK;
    const size_t row_bytes = (size_t)aw * numla_dtype_size(cache->dtype);
    const char *layer_kv = numla_kv_cache_layer(cache, layer);
    const int obf = m->attn_out_bf16 && numla_model_linear_quantizes_input(&lw->uv[0]);
    static const int32_t qsl[2] = {0, 1}, own_table[1] = {0}, one = 1;
    const int32_t plen = st->seq_lens[0] - (int32_t)T + (int32_t)j;
    const int64_t off = j * Hr * dc;
    m->stats.absorbed_bf16_tokens += obf ? 1 : 0;
    numla_mla_attn_args pre = {
        .num_seqs = 1, .num_heads = (int32_t)Hr, .kv_lora_rank = (int32_t)dc,
        .rope_dim = (int32_t)dr, .block_size = cache->block_size, .num_blocks = cache->num_blocks,
        .max_blocks_per_seq = st->max_blocks_per_seq,
        .q = m->qabs + j * Hr * aw, .q_dtype = NUMLA_DTYPE_F32,
        .kv_cache = layer_kv, .kv_dtype = cache->dtype,
        .block_tables = st->block_tables, .seq_lens = &plen, .query_start_loc = qsl, .causal = 0,
        .scale = (float)c->softmax_scale,
        .out = obf ? (void *)(m->ctx_bf + off) : (void *)(m->ctx + off),
        .out_dtype = obf ? NUMLA_DTYPE_BF16 : NUMLA_DTYPE_F32, .lse = m->lse_pre + j * Hr,
    };
    numla_mla_attn_args cur = pre;
    cur.block_size = (int32_t)NB;
    cur.num_blocks = (int64_t)((size_t)m->cap[NUMLA_SCRATCH_NEW_KV] / row_bytes / (size_t)NB);
    cur.max_blocks_per_seq = 1;
    cur.kv_cache = m->new_kv;
    cur.block_tables = own_table;
    cur.seq_lens = &one;
    cur.causal = 1;
    cur.out = obf ? (void *)(m->ctx2_bf + off) : (void *)(m->ctx2 + off);
    cur.lse = m->lse_new + j * Hr;
    const int64_t slot = st->slots[j];
    if (slot >= 0)
        memcpy(m->new_kv, layer_kv + (size_t)slot * row_bytes, row_bytes);
    else
        memset(m->new_kv, 0, row_bytes);
    const size_t na = numla_mla_attn_workspace_size(m->isa_mla, &pre, m->num_threads);
    const size_t nb = numla_mla_attn_workspace_size(m->isa_mla, &cur, m->num_threads);
    NUMLA_CHECK(numla_model_grow_workspace(&m->attn_ws, &m->attn_ws_bytes, na > nb ? na : nb,
                                           "attention workspace"));
    NUMLA_CHECK(numla_mla_attn(m->isa_mla, &pre, m->attn_ws, m->attn_ws_bytes));
    NUMLA_CHECK(numla_mla_attn(m->isa_mla, &cur, m->attn_ws, m->attn_ws_bytes));
    if (obf)
        for (int64_t i = off; i < off + Hr * dc; i++) {
            m->ctx[i] = numla_bf16_to_f32(m->ctx_bf[i]);
            m->ctx2[i] = numla_bf16_to_f32(m->ctx2_bf[i]);
        }
    return numla_merge_attn_states(m->isa, Hr, (int32_t)dc, m->ctx + off, NULL, m->ctx + off,
                                   m->lse_pre + j * Hr, m->ctx2 + off, m->lse_new + j * Hr);
}

numla_status numla_model_dsa_attention(numla_model *m, const numla_weights_layer *lw,
                                       int32_t layer, numla_kv_cache *cache,
                                       const numla_step *st)
{
    const numla_model_config *c = &m->cfg;
    const int64_t T = st->num_tokens, Hr = m->w->shard.head_count;
    const int64_t dc = c->kv_lora_rank, dr = c->qk_rope_head_dim, vd = c->v_head_dim;
    if (Hr == 0)
        return NUMLA_STATUS_OK; /* a rank without heads adds nothing to o_proj */
    NUMLA_CHECK(numla_model_absorb_queries(m, lw, T, m->q, m->cos_sin, m->qabs));
    numla_dsa_attn_args aa = {
        .num_seqs = st->num_seqs, .num_heads = (int32_t)Hr, .kv_lora_rank = (int32_t)dc,
        .rope_dim = (int32_t)dr, .block_size = cache->block_size,
        .num_blocks = cache->num_blocks, .max_blocks_per_seq = st->max_blocks_per_seq,
        .block_table_stride = st->max_blocks_per_seq, .index_stride = (int32_t)c->dsa.index_topk,
        .q = m->qabs, .q_dtype = NUMLA_DTYPE_F32,
        .kv_cache = numla_kv_cache_layer(cache, layer), .kv_dtype = cache->dtype,
        .block_tables = st->block_tables, .seq_lens = st->seq_lens,
        .query_start_loc = st->query_start_loc, .indices = m->idx_sel, .counts = m->idx_cnt,
        .scale = (float)c->softmax_scale, .out = m->ctx, .out_dtype = NUMLA_DTYPE_F32,
        .lse = NULL,
    };
    double tk = omp_get_wtime();
    if (verify_step(st)) {
        /* row by row, as one-row steps: a call's split of the selected rows depends on all its
         * rows (kernels/dsa.c), and a one-row step at a row's position does not select when the
         * row has at most index_topk keys */
        static const int32_t qsl[2] = {0, 1};
        const int64_t nd = verify_dense_rows(m, st);
        for (int64_t j = 0; j < T; j++) {
            if (j < nd) {
                NUMLA_CHECK(dense_row(m, lw, layer, cache, st, j));
                continue;
            }
            const int32_t len = st->seq_lens[0] - (int32_t)T + (int32_t)j + 1;
            numla_dsa_attn_args a1 = aa;
            a1.q = m->qabs + j * Hr * (dc + dr);
            a1.seq_lens = &len;
            a1.query_start_loc = qsl;
            a1.indices = m->idx_sel + j * c->dsa.index_topk;
            a1.counts = m->idx_cnt + j;
            a1.out = m->ctx + j * Hr * dc;
            const size_t need = numla_dsa_attn_workspace_size(m->isa, &a1, m->num_threads);
            NUMLA_CHECK(numla_model_grow_workspace(&m->dsa_ws, &m->dsa_ws_bytes, need,
                                                   "sparse-attention workspace"));
            NUMLA_CHECK(numla_dsa_attn(m->isa, &a1, m->dsa_ws, m->dsa_ws_bytes));
        }
    } else {
        const size_t need = numla_dsa_attn_workspace_size(m->isa, &aa, m->num_threads);
        NUMLA_CHECK(numla_model_grow_workspace(&m->dsa_ws, &m->dsa_ws_bytes, need,
                                               "sparse-attention workspace"));
        NUMLA_CHECK(numla_dsa_attn(m->isa, &aa, m->dsa_ws, m->dsa_ws_bytes));
    }
    m->stats.attn_kernel_s += omp_get_wtime() - tk;
    /* o_h = W_UV,h · ctx_h */
    NUMLA_CHECK(numla_model_per_head(m, lw->uv, NULL, Hr, T, m->ctx, Hr * dc, dc, m->o, Hr * vd,
                                     vd));
    return NUMLA_STATUS_OK;
}
