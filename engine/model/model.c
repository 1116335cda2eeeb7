/* engine/model/model.c — the model object and the forward pass of one batched step (model.h;
 * math: docs/design.md §5): create/destroy, the per-step scratch growth, settings and counters, the
 * step check, and the driver that reads top to bottom like the paper: embed → layers
 * (attention, MLP/MoE, each followed by the allreduce) → norm → lm_head. The blocks live in
 * projections.c, attention.c and moe.c, the scratch table in scratch.c, RoPE in rope.c. */
#include <omp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "engine/model/model_internal.h"

/* Below this many bytes of weights a step is a few hundred microseconds of work split over
 * ~100 kernel calls per token; waking an OpenMP team for each costs more than it saves
 * (figures: docs/launch.md), so small models run on the calling thread. */
#define NUMLA_MODEL_SMALL_WEIGHT_BYTES ((size_t)32 << 20)

/* ---- settings ---- */

numla_status numla_prefill_form_parse(const char *text, numla_prefill_form *out)
{
    if (!text || !*text || strcmp(text, "auto") == 0)
        *out = NUMLA_PREFILL_FORM_AUTO;
    else if (strcmp(text, "absorbed") == 0)
        *out = NUMLA_PREFILL_FORM_ABSORBED;
    else if (strcmp(text, "expanded") == 0)
        *out = NUMLA_PREFILL_FORM_EXPANDED;
    else
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "prefill form '%s' (expected auto, absorbed or "
                   "expanded)", text);
    return NUMLA_STATUS_OK;
}

const char *numla_prefill_form_name(numla_prefill_form f)
{
    switch (f) {
    case NUMLA_PREFILL_FORM_AUTO: return "auto";
    case NUMLA_PREFILL_FORM_ABSORBED: return "absorbed";
    case NUMLA_PREFILL_FORM_EXPANDED: return "expanded";
    }
    return "?";
}

numla_model_options numla_model_options_default(numla_isa isa)
{
    return (numla_model_options){.isa = isa, .num_threads = 1,
                                 .single_thread_below_bytes = NUMLA_MODEL_SMALL_WEIGHT_BYTES,
                                 .prefill_form = NUMLA_PREFILL_FORM_AUTO,
                                 .linear_amx = 1, .mla_amx = 1, .mha_amx = 1,
                                 .uarch = numla_uarch_detect()};
}

numla_isa numla_model_options_level(const numla_model_options *o, numla_model_kernels f)
{
    const int amx = f == NUMLA_MODEL_KERNELS_LINEAR || f == NUMLA_MODEL_KERNELS_QLINEAR ? o->linear_amx
                    : f == NUMLA_MODEL_KERNELS_MLA                                      ? o->mla_amx
                                                                                        : o->mha_amx;
    const numla_isa level = amx ? o->isa : numla_isa_min(o->isa, NUMLA_ISA_AVX512BF16);
    /* the avx512bf16 MLA kernel runs Q·K and P·V on vdpbf16ps, an fp32 q or P split in two
     * halves: twice the FMA kernel's multiply-add rate where vdpbf16ps issues like an FMA,
     * half of it where it issues at half that rate (docs/decode.md); so does the avx512bf16 fp8
     * GEMV of 1-12 rows (x split in two bf16 halves; docs/linear.md), and at avx512 every one
     * of those rows runs the FMA path, so a row's bits stay those of its one-row call */
    if ((f == NUMLA_MODEL_KERNELS_MLA || f == NUMLA_MODEL_KERNELS_QLINEAR) && level == NUMLA_ISA_AVX512BF16 &&
        !numla_uarch_bf16_dot_fast(o->uarch))
        return NUMLA_ISA_AVX512;
    return level;
}

/* ---- scratch: the per-step growth (the table is scratch.c) ---- */

/* The per-token scratch for T tokens and R logit rows (doubling, so it grows rarely). */
static numla_status ensure_capacity(numla_model *m, int64_t T, int64_t R)
{
    const int64_t have = m->cap[NUMLA_SCRATCH_TOKENS];
    if (T <= have && R <= T)
        return NUMLA_STATUS_OK;
    int64_t cap = T > R ? T : R;
    if (cap < 2 * have)
        cap = 2 * have;
    const int64_t pr = cap * m->cfg.num_experts_per_tok;
    /* the (token, expert) rows first: the token capacity says both are grown */
    NUMLA_CHECK(numla_model_scratch_grow(m, NUMLA_SCRATCH_PAR_ROWS,
                                         pr < NUMLA_MODEL_PAR_ROWS ? pr : NUMLA_MODEL_PAR_ROWS,
                                         "per-thread expert scratch"));
    NUMLA_CHECK(numla_model_scratch_grow(m, NUMLA_SCRATCH_TOKENS, cap, "scratch"));
    return NUMLA_STATUS_OK;
}

/* ---- model object ---- */

void numla_model_destroy(numla_model **pm)
{
    if (!pm || !*pm)
        return;
    numla_model *m = *pm;
    numla_model_scratch_free(m);
    free(m);
    *pm = NULL;
}

numla_status numla_model_create(const numla_model_weights *w, const numla_model_options *opts,
                                numla_model **out)
{
    *out = NULL;
    if (!opts || (unsigned)opts->prefill_form > NUMLA_PREFILL_FORM_EXPANDED)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "model: %s", opts ? "prefill form is not auto, "
                   "absorbed or expanded" : "no options");
    numla_model *m = calloc(1, sizeof *m);
    if (!m)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "model: no memory");
    m->w = w;
    m->cfg = w->cfg;
    m->isa = opts->isa;
    m->num_threads = opts->num_threads > 0 ? opts->num_threads : 1;
    m->exact_activations = opts->exact_activations;
    m->single_thread_below_bytes = opts->single_thread_below_bytes;
    m->prefill_form = opts->prefill_form;
    m->linear_amx = opts->linear_amx;
    m->mla_amx = opts->mla_amx;
    m->uarch = opts->uarch;
    m->mha_amx = opts->mha_amx;
    m->isa_linear = numla_model_options_level(opts, NUMLA_MODEL_KERNELS_LINEAR);
    m->isa_mla = numla_model_options_level(opts, NUMLA_MODEL_KERNELS_MLA);
    m->isa_mha = numla_model_options_level(opts, NUMLA_MODEL_KERNELS_MHA);
    m->isa_qlinear = numla_model_options_level(opts, NUMLA_MODEL_KERNELS_QLINEAR);
    NUMLA_DEBUG("kernel levels for %s (%s): linear %s, 8-bit linear %s, MLA %s, MHA %s",
                numla_isa_name(m->isa), numla_uarch_name(m->uarch), numla_isa_name(m->isa_linear),
                numla_isa_name(m->isa_qlinear), numla_isa_name(m->isa_mla), numla_isa_name(m->isa_mha));
    m->route_stride = (numla_model_moe_route_scratch_bytes(&m->cfg) + 63) & ~(size_t)63;
    for (int32_t l = 0; w->shard.head_count > 0 && l < numla_model_config_kv_layers(&m->cfg); l++) {
        const numla_weights_layer *lw = &w->layers[l];
        m->attn_out_bf16 |= lw->uv && numla_model_linear_quantizes_input(&lw->uv[0]);
    }
    numla_status s = numla_model_scratch_grow(m, NUMLA_SCRATCH_EXPERTS, 1, "expert counts");
    if (s != NUMLA_STATUS_OK) {
        numla_model_destroy(&m);
        return s;
    }
    *out = m;
    return NUMLA_STATUS_OK;
}

void numla_model_set_reduce(numla_model *m, numla_model_reduce_fn fn, void *ctx)
{
    m->reduce = fn;
    m->reduce_ctx = ctx;
}

void numla_model_set_layer_hook(numla_model *m, numla_model_layer_hook fn, void *ctx)
{
    m->hook = fn;
    m->hook_ctx = ctx;
}

const int32_t *numla_model_last_routes(const numla_model *m) { return m->topk_idx; }

const char *const numla_model_part_names[NUMLA_MODEL_PART_COUNT] = {
    "embed_norm", "attention", "dense_mlp", "router", "experts", "shared", "reduce", "lm_head"};

void numla_model_get_stats(const numla_model *m, numla_model_stats *out) { *out = m->stats; }

numla_model_options numla_model_get_options(const numla_model *m)
{
    return (numla_model_options){.isa = m->isa, .num_threads = m->num_threads,
                                 .exact_activations = m->exact_activations,
                                 .single_thread_below_bytes = m->single_thread_below_bytes,
                                 .prefill_form = m->prefill_form,
                                 .linear_amx = m->linear_amx, .mla_amx = m->mla_amx,
                                 .mha_amx = m->mha_amx, .uarch = m->uarch};
}

const numla_model_weights *numla_model_get_weights(const numla_model *m) { return m->w; }

numla_status numla_model_reduce(numla_model *m, float *buf, int64_t count)
{
    /* With one rank the partial sum is already the total. */
    if (m->w->shard.nranks == 1)
        return NUMLA_STATUS_OK;
    if (!m->reduce)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "model: %d ranks but no allreduce was set (create the "
                   "model through numla_engine_create)", m->w->shard.nranks);
    double t0 = omp_get_wtime();
    NUMLA_CHECK(m->reduce(m->reduce_ctx, buf, count));
    m->stats.reduce_s += omp_get_wtime() - t0;
    m->stats.reduces++;
    return NUMLA_STATUS_OK;
}

/* ---- the step check ---- */

/* Counts, arrays and query_start_loc. */
static numla_status step_check_shape(const numla_step *st)
{
    if (st->num_seqs < 1 || st->num_tokens < 1 || st->max_blocks_per_seq < 0 ||
        st->num_logit_rows < 0)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "step: %d sequences, %d tokens, %d blocks per "
                   "sequence, %d logit rows", st->num_seqs, st->num_tokens,
                   st->max_blocks_per_seq, st->num_logit_rows);
    if (!st->tokens || !st->positions || !st->slots || !st->query_start_loc || !st->seq_lens ||
        (st->max_blocks_per_seq > 0 && !st->block_tables) ||
        (st->num_logit_rows > 0 && !st->logit_rows))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "step: a missing array");
    if (st->query_start_loc[0] != 0 || st->query_start_loc[st->num_seqs] != st->num_tokens)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "step: query_start_loc does not span the %d "
                   "tokens", st->num_tokens);
    return NUMLA_STATUS_OK;
}

/* Each sequence's new tokens, length and blocks. */
static numla_status step_check_seqs(const numla_kv_cache *kv, const numla_step *st)
{
    for (int32_t b = 0; b < st->num_seqs; b++) {
        int32_t n = st->query_start_loc[b + 1] - st->query_start_loc[b];
        int64_t len = st->seq_lens[b];
        if (n < 1 || len < n || len > (int64_t)st->max_blocks_per_seq * kv->block_size)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "step: sequence %d has %d new tokens, "
                       "seq_len %lld and %d blocks of %d", b, n, (long long)len,
                       st->max_blocks_per_seq, kv->block_size);
        int64_t used = (len + kv->block_size - 1) / kv->block_size;
        for (int64_t j = 0; j < used; j++) {
            int32_t blk = st->block_tables[(int64_t)b * st->max_blocks_per_seq + j];
            if (blk < 0 || blk >= kv->num_blocks)
                NUMLA_FAIL(NUMLA_STATUS_OUT_OF_RANGE, "step: sequence %d block %lld is %d, "
                           "outside the pool of %lld", b, (long long)j, blk,
                           (long long)kv->num_blocks);
        }
    }
    return NUMLA_STATUS_OK;
}

/* Each token's id, slot and position, and the logit rows. */
static numla_status step_check_rows(const numla_model_config *c, const numla_kv_cache *kv,
                                    const numla_step *st)
{
    const int64_t cap = kv->num_blocks * kv->block_size;
    for (int32_t t = 0; t < st->num_tokens; t++) {
        if (st->tokens[t] < 0 || st->tokens[t] >= c->vocab_size)
            NUMLA_FAIL(NUMLA_STATUS_OUT_OF_RANGE, "step: token %d outside the vocabulary "
                       "(%lld)", st->tokens[t], (long long)c->vocab_size);
        if (st->slots[t] >= cap)
            NUMLA_FAIL(NUMLA_STATUS_OUT_OF_RANGE, "step: slot %lld outside the cache (%lld)",
                       (long long)st->slots[t], (long long)cap);
        if (st->positions[t] < 0 || st->positions[t] >= c->max_position_embeddings)
            NUMLA_FAIL(NUMLA_STATUS_OUT_OF_RANGE, "step: position %d outside the model's "
                       "context (%lld)", st->positions[t], (long long)c->max_position_embeddings);
    }
    for (int32_t r = 0; r < st->num_logit_rows; r++)
        if (st->logit_rows[r] < 0 || st->logit_rows[r] >= st->num_tokens)
            NUMLA_FAIL(NUMLA_STATUS_OUT_OF_RANGE, "step: logit row %d outside the step",
                       st->logit_rows[r]);
    return NUMLA_STATUS_OK;
}

numla_status numla_model_step_check(const numla_model_config *c, const numla_kv_cache *kv,
                              const numla_step *st)
{
    NUMLA_CHECK(step_check_shape(st));
    NUMLA_CHECK(step_check_seqs(kv, st));
    NUMLA_CHECK(step_check_rows(c, kv, st));
    return NUMLA_STATUS_OK;
}

/* ---- the forward pass ---- */

/* h = embedding rows (replicated), and per-token RoPE tables shared by every layer. */
static void forward_embed(numla_model *m, const numla_step *st)
{
    const numla_model_config *c = &m->cfg;
    const numla_model_weights *w = m->w;
    const int64_t T = st->num_tokens, hid = c->hidden_size, dr = c->qk_rope_head_dim;
#pragma omp parallel for num_threads(m->num_threads) if (T > 1)
    for (int64_t t = 0; t < T; t++) {
        if (w->embed_blocks) /* a GGUF row of blocks (whole rows: never fails) */
            (void)numla_qblock_dequant_ref(w->embed_qtype,
                                           (const char *)w->embed +
                                               (size_t)st->tokens[t] * w->embed_row_bytes,
                                           hid, m->h + t * hid);
        for (int64_t i = 0; !w->embed_blocks && i < hid; i++)
            m->h[t * hid + i] = numla_load_f32(w->embed, w->embed_dtype,
                                               (size_t)st->tokens[t] * (size_t)hid + (size_t)i);
        numla_rope_cos_sin(c, st->positions[t], m->cos_sin + t * dr);
    }
}

/* x = RMSNorm(h) with weight norm; ranks other than 0 then clear h, so that only rank 0 adds
 * the residual before the reduce (docs/design.md §2). */
static void forward_norm(numla_model *m, int64_t T, const float *norm)
{
    const int64_t hid = m->cfg.hidden_size;
#pragma omp parallel for num_threads(m->num_threads) if (T > 1)
    for (int64_t t = 0; t < T; t++)
        numla_model_rmsnorm(m->x + t * hid, m->h + t * hid, norm, hid, m->cfg.rms_norm_eps);
    if (m->w->shard.rank != 0)
        memset(m->h, 0, (size_t)(T * hid) * sizeof(float));
}

/* One decoder layer: h += attention(norm(h)), reduced; h += MLP or MoE(norm(h)), reduced. */
static numla_status forward_layer(numla_model *m, int32_t l, numla_kv_cache *cache,
                                  const numla_step *st, double *tp)
{
    const numla_weights_layer *lw = &m->w->layers[l];
    const int64_t T = st->num_tokens, hid = m->cfg.hidden_size;
    forward_norm(m, T, lw->input_norm);
    numla_model_part_tick(m, NUMLA_MODEL_PART_EMBED_NORM, tp);
    NUMLA_CHECK(numla_model_attention(m, lw, l, cache, st));
    numla_model_part_tick(m, NUMLA_MODEL_PART_ATTENTION, tp);
    NUMLA_CHECK(numla_model_reduce(m, m->h, T * hid));
    numla_model_part_tick(m, NUMLA_MODEL_PART_REDUCE, tp);

    forward_norm(m, T, lw->post_attn_norm);
    numla_model_part_tick(m, NUMLA_MODEL_PART_EMBED_NORM, tp);
    if (lw->is_moe) {
        NUMLA_CHECK(numla_model_moe(m, lw, T)); /* ticks its own parts */
        *tp = omp_get_wtime();
    } else {
        NUMLA_CHECK(numla_model_mlp(m, &lw->dense, T, m->x, m->h, hid));
        numla_model_part_tick(m, NUMLA_MODEL_PART_DENSE_MLP, tp);
    }
    NUMLA_CHECK(numla_model_reduce(m, m->h, T * hid));
    numla_model_part_tick(m, NUMLA_MODEL_PART_REDUCE, tp);
    if (m->hook)
        m->hook(m->hook_ctx, l, m->h, (int32_t)T, hid);
    return NUMLA_STATUS_OK;
}

/* logits (R, vocab_count) = lm_head(RMSNorm(h) with weight norm) for the step's logit rows. */
static numla_status forward_logits(numla_model *m, const numla_step *st, const float *norm,
                                   float *logits)
{
    const numla_model_weights *w = m->w;
    const int64_t R = st->num_logit_rows, hid = m->cfg.hidden_size;
    for (int64_t r = 0; r < R; r++)
        numla_model_rmsnorm(m->xl + r * hid, m->h + (int64_t)st->logit_rows[r] * hid, norm,
                      hid, m->cfg.rms_norm_eps);
    NUMLA_CHECK(numla_model_lin(m, &w->lm_head, R, m->xl, hid, logits, w->shard.vocab_count, 0));
    return NUMLA_STATUS_OK;
}

static numla_status forward_impl(numla_model *m, numla_kv_cache *cache, const numla_step *st,
                                 float *logits)
{
    const numla_model_config *c = &m->cfg;
    NUMLA_CHECK(numla_model_step_check(c, cache, st));
    /* The kernels open their own parallel regions with the OpenMP default team size; size
     * their workspaces (and our loops) by that. */
    m->num_threads = omp_get_max_threads();
    if (cache->kv_lora_rank != c->kv_lora_rank || cache->rope_dim != c->qk_rope_head_dim ||
        cache->num_layers < numla_model_config_kv_layers(c))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "model: KV cache geometry does not match the model");
    NUMLA_CHECK(ensure_capacity(m, st->num_tokens, st->num_logit_rows));
    NUMLA_CHECK(numla_model_dsa_plan(m, cache, st));
    NUMLA_CHECK(numla_model_attention_plan(m, cache, st));

    double tp = omp_get_wtime();
    forward_embed(m, st);
    for (int32_t l = 0; l < c->num_hidden_layers; l++)
        NUMLA_CHECK(forward_layer(m, l, cache, st, &tp));
    if (c->mtp_enabled) { /* the rows an MTP step may read next */
        const int64_t T = st->num_tokens, hid = c->hidden_size;
        if (T > m->cap[NUMLA_SCRATCH_MTP_HID])
            NUMLA_CHECK(numla_model_scratch_grow(m, NUMLA_SCRATCH_MTP_HID, T, "MTP hidden rows"));
        memcpy(m->mtp_hid, m->h, (size_t)(T * hid) * sizeof(float));
        m->mtp_hid_rows = T;
    }
    NUMLA_CHECK(forward_logits(m, st, m->w->final_norm, logits));
    numla_model_part_tick(m, NUMLA_MODEL_PART_LM_HEAD, &tp);
    return NUMLA_STATUS_OK;
}

/* ---- the multi-token-prediction layer ---- */

numla_status numla_model_mtp_check(const numla_model *m, const numla_step *st,
                                   const int32_t *hidden_rows)
{
    if (!m->cfg.mtp_enabled)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "model: an MTP step, but the MTP layer is not loaded");
    if (!hidden_rows)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "MTP step: no hidden rows");
    for (int32_t t = 0; t < st->num_tokens; t++) {
        const int32_t r = hidden_rows[t];
        if ((r >= 0 && r >= m->mtp_hid_rows) || (r < 0 && -1 - (int64_t)r >= m->mtp_out_rows))
            NUMLA_FAIL(NUMLA_STATUS_OUT_OF_RANGE, "MTP step: row %d reads %s row %lld of %lld", t,
                       r >= 0 ? "main-step" : "MTP-step", (long long)(r >= 0 ? r : -1 - (int64_t)r),
                       (long long)(r >= 0 ? m->mtp_hid_rows : m->mtp_out_rows));
    }
    return NUMLA_STATUS_OK;
}

/* mtp_cat (T, 2·hidden) = [enorm(emb(token)) | hnorm(h)], h = final_norm(main row) or the
 * previous MTP step's output row; m->h holds the embeddings. */
static void mtp_inputs(numla_model *m, const numla_step *st, const int32_t *hidden_rows)
{
    const numla_model_config *c = &m->cfg;
    const numla_weights_mtp *mw = &m->w->mtp;
    const int64_t T = st->num_tokens, hid = c->hidden_size;
    const double eps = c->rms_norm_eps;
#pragma omp parallel for num_threads(m->num_threads) if (T > 1)
    for (int64_t t = 0; t < T; t++) {
        float *cat = m->mtp_cat + t * 2 * hid;
        numla_model_rmsnorm(cat, m->h + t * hid, mw->enorm, hid, eps);
        const int32_t r = hidden_rows[t];
        const float *src = r >= 0 ? m->x + t * hid : m->mtp_out + (-1 - (int64_t)r) * hid;
        if (r >= 0) /* the main model's final norm first, as its lm_head sees it */
            numla_model_rmsnorm(m->x + t * hid, m->mtp_hid + (int64_t)r * hid,
                                m->w->final_norm, hid, eps);
        numla_model_rmsnorm(cat + hid, src, mw->hnorm, hid, eps);
    }
}

static numla_status mtp_forward_impl(numla_model *m, numla_kv_cache *cache, const numla_step *st,
                                     const int32_t *hidden_rows, float *logits)
{
    const numla_model_config *c = &m->cfg;
    const numla_weights_mtp *mw = &m->w->mtp;
    NUMLA_CHECK(numla_model_mtp_check(m, st, hidden_rows));
    NUMLA_CHECK(numla_model_step_check(c, cache, st));
    m->num_threads = omp_get_max_threads();
    if (cache->kv_lora_rank != c->kv_lora_rank || cache->rope_dim != c->qk_rope_head_dim ||
        cache->num_layers < numla_model_config_kv_layers(c))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "model: KV cache geometry does not match the model "
                   "with its MTP layer");
    const int64_t T = st->num_tokens, hid = c->hidden_size;
    NUMLA_CHECK(ensure_capacity(m, T, st->num_logit_rows));
    if (T > m->cap[NUMLA_SCRATCH_MTP_OUT]) /* keeps the previous step's rows (chaining) */
        NUMLA_CHECK(numla_model_scratch_grow(m, NUMLA_SCRATCH_MTP_OUT, T, "MTP rows"));
    NUMLA_CHECK(numla_model_dsa_plan(m, cache, st));
    NUMLA_CHECK(numla_model_attention_plan(m, cache, st));

    double tp = omp_get_wtime();
    forward_embed(m, st);
    mtp_inputs(m, st, hidden_rows);
    /* this rank's slice of h' = eh_proj · cat; the allreduce assembles the whole vector */
    if (m->w->shard.nranks > 1)
        memset(m->h, 0, (size_t)(T * hid) * sizeof(float));
    NUMLA_CHECK(numla_model_lin(m, &mw->eh_proj, T, m->mtp_cat, 2 * hid, m->h + mw->row_begin,
                                hid, 0));
    numla_model_part_tick(m, NUMLA_MODEL_PART_EMBED_NORM, &tp);
    NUMLA_CHECK(numla_model_reduce(m, m->h, T * hid));
    numla_model_part_tick(m, NUMLA_MODEL_PART_REDUCE, &tp);
    NUMLA_CHECK(forward_layer(m, (int32_t)c->num_hidden_layers, cache, st, &tp));
    memcpy(m->mtp_out, m->h, (size_t)(T * hid) * sizeof(float));
    m->mtp_out_rows = T;
    NUMLA_CHECK(forward_logits(m, st, mw->head_norm, logits));
    numla_model_part_tick(m, NUMLA_MODEL_PART_LM_HEAD, &tp);
    return NUMLA_STATUS_OK;
}

numla_status numla_model_mtp_forward(numla_model *m, numla_kv_cache *cache, const numla_step *st,
                                     const int32_t *hidden_rows, float *logits)
{
    int team = omp_get_max_threads();
    int small = m->w->loaded_bytes < m->single_thread_below_bytes && team > 1;
    if (small)
        omp_set_num_threads(1);
    numla_status s = mtp_forward_impl(m, cache, st, hidden_rows, logits);
    if (small)
        omp_set_num_threads(team);
    if (s != NUMLA_STATUS_OK)
        numla_error_frame(__FILE__, __LINE__, __func__);
    return s;
}

numla_status numla_model_forward(numla_model *m, numla_kv_cache *cache, const numla_step *st,
                                 float *logits)
{
    int team = omp_get_max_threads();
    int small = m->w->loaded_bytes < m->single_thread_below_bytes && team > 1;
    if (small)
        omp_set_num_threads(1);
    numla_status s = forward_impl(m, cache, st, logits);
    if (small)
        omp_set_num_threads(team);
    if (s != NUMLA_STATUS_OK)
        numla_error_frame(__FILE__, __LINE__, __func__);
    return s;
}
