/* engine/model/model.h — the forward pass of one batched step on one rank (docs/design.md §5).
 *
 * A step is a list of sequences, each contributing n_b >= 1 new tokens (prefill chunks and
 * decode tokens mix freely). Tokens are laid out sequence after sequence:
 *   sequence b owns token rows query_start_loc[b] .. query_start_loc[b+1]-1,
 *   token t has id tokens[t], position positions[t] and cache slot slots[t] (negative: padding,
 *   not written), and after the step sequence b has seq_lens[b] cached rows, the new ones being
 *   the last n_b (so positions of b are seq_lens[b]-n_b .. seq_lens[b]-1).
 * The caller (scheduler) owns the block tables and has reserved the blocks.
 *
 * Per layer: RMSNorm → MLA (q / q_lora, kv_a + norm, YaRN RoPE, write c' and rope(k_pe) to the
 * paged cache; decode rows take the absorbed attention through numla_mla_attn: each
 * query attends to its sequence's cached prefix (non-causal, seq_lens - n_b rows) and, causally,
 * to the step's own new rows; the two parts are merged by LSE with numla_merge_attn_states, an
 * empty prefix having LSE -inf, so a prompt gives the same numbers however it is chunked;
 * prefill chunks take that form or the expanded one (kv_b-expanded k/v, numla_mha_prefill)
 * per numla_prefill_form, docs/prefill.md) →
 * o_proj partial sum (+ residual on rank 0) → numla_model_reduce → RMSNorm → dense MLP or MoE
 * (+ shared experts) partial sum (+ residual on rank 0) → numla_model_reduce.
 * Logits are produced for the tokens listed in logit_rows, vocab slice of this rank.
 *
 * Collective over the model's ranks once numla_model_reduce does an allreduce (today: a no-op
 * for nranks = 1); every rank must run the identical step.
 */
#ifndef NUMLA_ENGINE_MODEL_H
#define NUMLA_ENGINE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "engine/model/config.h"
#include "engine/model/kv_cache.h"
#include "engine/model/weights.h"
#include "kernels/isa.h"

typedef struct numla_step {
    int32_t num_seqs;               /* B */
    int32_t num_tokens;             /* T = query_start_loc[B] */
    const int32_t *tokens;          /* (T) token ids */
    const int32_t *positions;       /* (T) */
    const int64_t *slots;           /* (T) cache slots, -1 = padding */
    const int32_t *query_start_loc; /* (B + 1) */
    const int32_t *seq_lens;        /* (B) cached rows after the step */
    const int32_t *block_tables;    /* (B, max_blocks_per_seq) */
    int32_t max_blocks_per_seq;
    int32_t num_logit_rows;         /* R */
    const int32_t *logit_rows;      /* (R) token rows whose logits are wanted */
    /* Sequence identity, for models whose cache is per sequence rather than in the paged pool
     * (DeepSeek-V4, model_v4.h; the MLA forward ignores both): seq_ids[b] names sequence b for
     * as long as it holds its blocks (the scheduler: a new id at each admission, so a preempted
     * sequence comes back as a new one), and the step frees the state of the ids in released
     * (sequences finished, cancelled or preempted since the previous step) before it runs.
     * NULL seq_ids: a sequence is known by its first block. release_all: the step first frees
     * the state of every sequence the engine holds (a new scheduler's first step: nothing the
     * engine holds is one of its sequences). */
    const int64_t *seq_ids;         /* (B) or NULL */
    int32_t num_released;
    const int64_t *released;        /* (num_released) */
    int32_t release_all;            /* 0 or 1 */
} numla_step;

/* Optional per-layer hooks for debugging/tests: called after each decoder layer with the
 * residual stream h (T, hidden). */
typedef void (*numla_model_layer_hook)(void *ctx, int32_t layer, const float *h, int32_t tokens,
                                       int64_t hidden);

/* The allreduce between ranks: sum buf (count fp32) over the model's ranks in place, identical
 * result on every rank. Set by whoever owns the communicator (comm/ with MPI; tests use an
 * in-process version). Collective. */
typedef numla_status (*numla_model_reduce_fn)(void *ctx, float *buf, int64_t count);

/* Which MLA form prefill chunks use (docs/design.md §5; docs/prefill.md), per sequence. Decode
 * rows (one new token) are always absorbed. AUTO: by NUMLA_MODEL_EXPAND_PAIRS_PER_ROW below.
 * EXPANDED: every sequence with more than one new token. A step with sequences of both forms
 * runs each form over its own (the absorbed ones as a compacted sub-step). */
typedef enum numla_prefill_form {
    NUMLA_PREFILL_FORM_AUTO = 0,
    NUMLA_PREFILL_FORM_ABSORBED,
    NUMLA_PREFILL_FORM_EXPANDED,
} numla_prefill_form;

/* "auto", "absorbed" or "expanded" → *out; anything else: INVALID_ARG naming the text. */
numla_status numla_prefill_form_parse(const char *text, numla_prefill_form *out);
const char *numla_prefill_form_name(numla_prefill_form f);

/* Parts of the forward pass timed in numla_model_stats.part_s. */
typedef enum {
    NUMLA_MODEL_PART_EMBED_NORM, /* embedding, RoPE tables, RMSNorms */
    NUMLA_MODEL_PART_ATTENTION,  /* the whole attention block, projections included */
    NUMLA_MODEL_PART_DENSE_MLP,  /* dense layers' MLP */
    NUMLA_MODEL_PART_ROUTER,     /* router logits, top-k, grouping by expert */
    NUMLA_MODEL_PART_EXPERTS,    /* routed experts, their gather and weighted scatter */
    NUMLA_MODEL_PART_SHARED,     /* shared experts (when not joined with the routed ones) */
    NUMLA_MODEL_PART_REDUCE,     /* numla_model_reduce (allreduce over the ranks) */
    NUMLA_MODEL_PART_LM_HEAD,    /* final norm and lm_head */
    NUMLA_MODEL_PART_COUNT
} numla_model_part;
extern const char *const numla_model_part_names[NUMLA_MODEL_PART_COUNT];

/* The model: weights (borrowed), settings and scratch; opaque (engine/model/model_internal.h). */
typedef struct numla_model numla_model;

typedef struct numla_model_options {
    numla_isa isa;
    /* informational: each step uses omp_get_max_threads() of the calling thread (the team the
     * kernels will open), so set the team size with omp_set_num_threads. <= 0: 1. */
    int num_threads;
    /* 1: run the linear layers at the avx512 level (fp32 FMA on widened weights) instead of
     * amx, whose AMX GEMM (M >= 3, bf16 weights) splits activations into two bf16
     * halves (error 2^-17 relative, kernels/x86/linear_amx.c): slower, fp32 summation error
     * only. Default 0. */
    int exact_activations;
    /* Models with fewer weight bytes run each step on the calling thread (team wake-ups cost
     * more than the work); default 32 MiB, 0 = always use the OpenMP team. */
    size_t single_thread_below_bytes;
    numla_prefill_form prefill_form; /* default AUTO */
    /* 1 (default): that kernel family runs its AMX path when isa is amx; 0: at most
     * avx512bf16 for it (the settings' NUMLA_LINEAR_AMX, NUMLA_MLA_AMX, NUMLA_MHA_AMX) */
    int linear_amx, mla_amx, mha_amx;
    /* the CPU to tune for (kernels/isa.h; the settings' NUMLA_UARCH): where vdpbf16ps does not
     * outrun fp32 FMAs (intel), MLA attention and the 8-bit linears run the avx512 FMA kernels
     * instead of the avx512bf16 ones. Default: numla_uarch_detect(). */
    numla_uarch uarch;
} numla_model_options;

/* The defaults above for this isa. */
numla_model_options numla_model_options_default(numla_isa isa);

/* The kernel families whose level the options decide. */
typedef enum numla_model_kernels {
    NUMLA_MODEL_KERNELS_LINEAR = 0, /* numla_linear_forward */
    NUMLA_MODEL_KERNELS_MLA,        /* numla_mla_attn */
    NUMLA_MODEL_KERNELS_MHA,        /* numla_mha_prefill */
    NUMLA_MODEL_KERNELS_QLINEAR,    /* numla_qlinear_forward (fp8, int8; AMX switch: linear_amx) */
} numla_model_kernels;
/* The level family f runs at under o: o->isa, or at most avx512bf16 when f's AMX switch is
 * off; MLA and the 8-bit linears at most avx512 where they would land on avx512bf16 and
 * o->uarch's vdpbf16ps is slow (numla_uarch_bf16_dot_fast): the avx512bf16 fp8 GEMV splits x
 * into two bf16 halves, two vdpbf16ps per 32 weights, which lose to the FMA GEMV there. Every
 * M of a call runs at the one level, so up to 12 rows a row keeps its one-row bits. */
numla_isa numla_model_options_level(const numla_model_options *o, numla_model_kernels f);

/* Cumulative counters since numla_model_create (callers diff two readings). */
typedef struct numla_model_stats {
    double reduce_s;          /* wall time spent in numla_model_reduce */
    int64_t reduces;          /* numla_model_reduce calls with nranks > 1 */
    double linear_s;          /* linear layers (numla_linear_forward calls): wall time */
    double linear_flops;      /* 2 · M · N · K summed */
    /* attention: the form-specific part (absorbed: W_UKᵀ q, the two mla_attn calls, merge,
     * W_UV; expanded: latent gather, kv_b expansion, q/k/v packing, mha_prefill) and within it
     * the attention kernels alone */
    double attn_s;
    double attn_kernel_s;
    int64_t expanded_tokens;  /* new tokens (per layer) that went through the expanded form */
    int64_t absorbed_bf16_tokens; /* tokens (per layer) whose absorbed attention gave bf16
                                   * output (attention.c: W_UV quantizes its input) */
    double part_s[NUMLA_MODEL_PART_COUNT]; /* wall time per part of the forward pass */
} numla_model_stats;

/* AUTO's crossover: expand a chunk of n new tokens over a prefix of P when its causal
 * (query, key) pairs n·P + n(n+1)/2 exceed P times this (the cost of expanding one latent row
 * in units of the time the expanded form saves per pair). Measured, with its history, in
 * docs/prefill.md; re-measure when the linear layers or either attention kernel change. */
enum { NUMLA_MODEL_EXPAND_PAIRS_PER_ROW = 160 };

/* A speculative verify step's rows of one sequence at most (the token and up to 8 drafts,
 * engine/serving/scheduler.h NUMLA_SCHED_MAX_DRAFT). A step of one sequence with 2 to this many
 * new rows over a cached prefix computes each row with the bits a one-row step at its position
 * gives it: its attention as a one-row step's two calls (attention.c), its linears on the
 * kernels' small-M paths, whose rows do not depend on M (kernels/linear.h, qlinear.h, qblock.h),
 * so greedy decoding with drafts emits what decoding without them emits (docs/speculative.md). */
enum { NUMLA_MODEL_VERIFY_MAX_ROWS = 9 };

/* opts: numla_model_options_default() and changes; w is borrowed and must outlive the model. */
numla_status numla_model_create(const numla_model_weights *w, const numla_model_options *opts,
                                numla_model **out);
void numla_model_destroy(numla_model **m);

/* The allreduce (NULL: only nranks = 1 can run); set by whoever owns the communicator. */
void numla_model_set_reduce(numla_model *m, numla_model_reduce_fn fn, void *ctx);
/* Called after every decoder layer (NULL: none). */
void numla_model_set_layer_hook(numla_model *m, numla_model_layer_hook fn, void *ctx);
/* The routed experts the layer just run picked, (tokens, num_experts_per_tok) global expert
 * ids as every rank computes them: valid inside a layer hook's call for an MoE layer
 * (numla_model_config_is_moe_layer), until the next layer runs. Not collective. */
const int32_t *numla_model_last_routes(const numla_model *m);
void numla_model_get_stats(const numla_model *m, numla_model_stats *out);
numla_model_options numla_model_get_options(const numla_model *m);
const numla_model_weights *numla_model_get_weights(const numla_model *m);

/* Is st a step this model and cache can run? Checks counts, missing arrays, query_start_loc,
 * each sequence's new tokens / seq_len / blocks (block ids inside kv's pool), tokens inside
 * the vocabulary, slots inside the cache, positions inside the context, logit rows inside the
 * step. Errors name the first bad field. Local (not collective). */
numla_status numla_model_step_check(const numla_model_config *c, const numla_kv_cache *kv,
                                    const numla_step *st);

/* Run one step: writes the new tokens' rows into `cache` and logits (R, vocab_count) fp32 for
 * the requested rows. Collective (see above). */
numla_status numla_model_forward(numla_model *m, numla_kv_cache *cache, const numla_step *step,
                                 float *logits);

/* One step of the multi-token-prediction layer (the model's weights must have it:
 * cfg.mtp_enabled; docs/speculative.md). Row t of `st` is the MTP row at position
 * st->positions[t]: st->tokens[t] is the token at position + 1 (emb(t_{i+1})) and the hidden
 * state h_i comes from hidden_rows[t]: >= 0, that row of the last numla_model_forward (its
 * final-normed residual stream); < 0, row -1 - hidden_rows[t] of the last MTP step's block
 * output (chaining drafts). Then h' = eh_proj([enorm(emb) | hnorm(h)]), the MTP decoder block
 * (layer num_hidden_layers: its latent rows go to that layer of the cache, at st's slots),
 * and logits (R, vocab_count) = lm_head(shared_head.norm(h')) for the logit rows: the draft
 * distribution of the token at position + 2. Collective (one allreduce for eh_proj's rows,
 * then the layer's two). */
numla_status numla_model_mtp_forward(numla_model *m, numla_kv_cache *cache, const numla_step *st,
                                     const int32_t *hidden_rows, float *logits);
/* Whether hidden_rows (T of them) are all rows numla_model_mtp_forward can read now; an error
 * names the first that is not. Local. */
numla_status numla_model_mtp_check(const numla_model *m, const numla_step *st,
                                   const int32_t *hidden_rows);

/* The allreduce hook: sums buf (count fp32 values) over the model's ranks through the reduce
 * set by numla_model_set_reduce.
 * nranks = 1: no-op. Every rank adds its partial sum; the residual was added on rank 0 only.
 * Collective. */
numla_status numla_model_reduce(numla_model *m, float *buf, int64_t count);

#endif
