/* engine/model/model.h — the forward pass of one batched step on one rank (DESIGN.md §5).
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
} numla_step;

/* Optional per-layer hooks for debugging/tests: called after each decoder layer with the
 * residual stream h (T, hidden). */
typedef void (*numla_model_layer_hook)(void *ctx, int32_t layer, const float *h, int32_t tokens,
                                       int64_t hidden);

/* The allreduce between ranks: sum buf (count fp32) over the model's ranks in place, identical
 * result on every rank. Set by whoever owns the communicator (comm/ with MPI; tests use an
 * in-process version). Collective. */
typedef numla_status (*numla_model_reduce_fn)(void *ctx, float *buf, int64_t count);

/* Which MLA form prefill chunks use (DESIGN.md §5; docs/prefill.md), per sequence. Decode
 * rows (one new token) are always absorbed. AUTO: by NUMLA_MODEL_EXPAND_PAIRS_PER_ROW below,
 * the crossover measured in docs/prefill.md. EXPANDED: every sequence with more than one new
 * token. A step with sequences of both forms runs each form over its own (the absorbed ones
 * as a compacted sub-step). Set by numla_model_configure (the settings' NUMLA_PREFILL_FORM,
 * engine/cli/settings.h); AUTO after numla_model_create. */
typedef enum numla_prefill_form {
    NUMLA_PREFILL_FORM_AUTO = 0,
    NUMLA_PREFILL_FORM_ABSORBED,
    NUMLA_PREFILL_FORM_EXPANDED,
} numla_prefill_form;

/* Parts of the forward pass timed in numla_model.part_s. */
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

typedef struct numla_model {
    const numla_model_weights *w;   /* not owned */
    numla_model_config cfg;
    numla_isa isa;
    /* the levels each kernel family runs at (numla_model_configure; isa after create): isa, or
     * below amx where that family's AMX path is turned off */
    numla_isa isa_linear, isa_mla, isa_mha;
    int num_threads;
    /* 1: run the linear layers at the avx512 level (fp32 FMA on widened weights) instead of
     * amx, whose AMX GEMM (M >= 3, bf16 weights) splits activations into two bf16
     * halves (error 2^-18 relative, kernels/x86/linear_amx.c): slower, fp32 summation error
     * only. Default 0. */
    int exact_activations;
    /* Models with fewer weight bytes run each step on the calling thread (team wake-ups cost
     * more than the work); default 32 MiB, 0 = always use the OpenMP team. */
    size_t single_thread_below_bytes;
    numla_model_layer_hook hook;
    void *hook_ctx;
    numla_model_reduce_fn reduce;   /* NULL: only nranks = 1 can run */
    void *reduce_ctx;

    /* scratch, grown on demand (never inside a layer) for T tokens */
    int64_t cap_tokens;
    float *h;          /* (T, hidden) residual stream */
    float *x;          /* (T, hidden) normed input */
    float *qa;         /* (T, q_lora_rank) */
    float *q;          /* (T, H_r · q_head_dim) */
    float *kva;        /* (T, Dc + Dr) */
    float *ckv;        /* (T, Dc) normalised latent */
    float *kpe;        /* (T, Dr) rope(k_pe) */
    float *qabs;       /* (T, H_r, Dc + Dr) absorbed queries */
    float *ctx;        /* (T, H_r, Dc) attention output in latent space */
    float *o;          /* (T, H_r · v_head_dim) */
    float *g;          /* (T, max intermediate) */
    float *u;          /* (T, max intermediate) */
    float *moe_out;    /* (T, hidden) */
    float *ex_x;       /* (T, hidden) tokens gathered for one expert */
    float *ex_y;       /* (T, hidden) */
    float *router;     /* (T, n_routed_experts) scores */
    int32_t *topk_idx; /* (T, k) */
    float *topk_w;     /* (T, k) */
    int32_t *ex_count; /* (n_routed_experts + 1) */
    int32_t *ex_list;  /* (T · k) (token · k + j) grouped by expert */
    int32_t *ex_cursor; /* (n_routed_experts + 1) fill cursor for ex_list */
    float *route_scratch; /* (T, 2 · n_routed_experts) */
    float *cos_sin;    /* (T, Dr) cos then sin per token (Dr/2 each) */
    float *xl;         /* (R, hidden) normed rows for the logits */
    /* decode MoE with the experts split over the team (model.c moe_experts_parallel):
     * NUMLA_MODEL_PAR_ROWS (token, expert) rows */
    float *par_x;      /* (P, hidden) gathered inputs, P = min(PAR_ROWS, cap_tokens · k) */
    float *par_y;      /* (P, hidden) expert outputs */
    float *par_g;      /* (P, moe_intermediate) */
    float *par_u;      /* (P, moe_intermediate) */
    int32_t *ex_act;   /* (n_routed_experts + 1) local experts with rows this step */
    void *lin_ws;      /* linear workspace */
    size_t lin_ws_bytes;
    void *par_ws;      /* (threads, par_ws_each) linear workspaces of calls made one per thread */
    size_t par_ws_bytes;
    void *attn_ws;     /* attention workspace */
    size_t attn_ws_bytes;

    /* chunked attention (prefix part + in-step part, merged by LSE), grown per step */
    float *ctx2;       /* (T, H_r, Dc) in-step part */
    float *lse_pre;    /* (T, H_r) */
    float *lse_new;    /* (T, H_r) */
    void *new_kv;      /* (new_kv_rows, Dc + Dr) cache dtype: each sequence's new rows, blocks
                          of NUMLA_MODEL_NEW_BLOCK rows starting at a block boundary */
    size_t new_kv_bytes;
    int32_t *new_tables; /* (B, new_max_blocks) blocks of new_kv per sequence */
    int32_t *pre_lens;   /* (B) cached prefix = seq_lens - n_b */
    int32_t *new_lens;   /* (B) n_b */
    int64_t cap_seqs, cap_new_tables;
    /* A step mixing absorbed sequences (decode rows, short chunks over a long prefix) with
     * expanded ones runs the absorbed form over a compacted copy of its absorbed sequences
     * (model.c attention_split); built once per step by ensure_step_scratch. */
    int split;               /* this step is split */
    int all_expanded;        /* every sequence of this step takes the expanded form */
    numla_step sub;          /* the absorbed sequences as a step of their own (Ba, Ta) */
    int32_t *sub_rows;       /* (Ta) step row of each sub-step row */
    int32_t *sub_meta;       /* (Ba + 1 | Ba | Ba · max_blocks_per_seq) query_start_loc,
                                seq_lens, block_tables of m->sub */
    int64_t *sub_slots;      /* (Ta) */
    float *sub_q;            /* (Ta, H_r · q_head_dim) m->q rows of the sub-step */
    float *sub_cs;           /* (Ta, Dr) m->cos_sin rows */
    float *sub_o;            /* (Ta, H_r · v_head_dim) its attention output */
    int64_t sub_cap_tokens, sub_cap_meta;
    /* expanded prefill (model.c attention_expanded), grown per step for K key rows */
    numla_prefill_form prefill_form;
    int64_t xp_cap_keys, xp_cap_tokens, xp_cap_seqs;
    float *xp_lat;     /* (K, Dc + Dr) latent rows of the expanded sequences, f32 */
    float *xp_kv;      /* (K, H_r · (nope + v_head_dim)) kv_b_proj · c' */
    float *xp_k;       /* (K, H_r, q_head_dim) [k_nope | rope(k_pe)] */
    float *xp_v;       /* (K, H_r, v_head_dim) */
    float *xp_q;       /* (T, H_r, q_head_dim) [q_nope | rope(q_pe)] */
    int32_t *xp_seq;   /* (4, B) q_start, q_len, k_start, prefix of the expanded sequences */
    void *xp_ws;       /* mha_prefill workspace */
    size_t xp_ws_bytes;
    /* multi-rank counters (the allreduce itself is m->reduce, set by engine/parallel/engine.c) */
    double reduce_s;          /* wall time spent in numla_model_reduce (cumulative) */
    int64_t reduces;          /* numla_model_reduce calls with nranks > 1 */
    /* linear layers (numla_linear_forward calls), cumulative, for numla bench model */
    double linear_s;          /* wall time */
    double linear_flops;      /* 2 · M · N · K summed */
    /* attention, cumulative, for numla bench model: the form-specific part (absorbed: W_UKᵀ q,
     * the two mla_attn calls, merge, W_UV; expanded: latent gather, kv_b expansion, q/k/v
     * packing, mha_prefill) and within it the attention kernels alone */
    double attn_s;
    double attn_kernel_s;
    int64_t expanded_tokens;  /* new tokens that went through the expanded form */
    /* wall time per part of the forward pass, cumulative (numla bench model's step profile) */
    double part_s[NUMLA_MODEL_PART_COUNT];
} numla_model;

/* NEW_BLOCK: rows per block of the in-step attention copy. PAR_ROWS: at most this many
 * (token, expert) rows run the experts one per thread (each expert's linears on one thread,
 * model.c moe_experts_parallel); beyond it (long prefill chunks, where every expert has many
 * rows) each expert uses the whole team. PER_THREAD_ROWS: steps of at most this many tokens
 * run the per-head products and the shared experts one call per thread. */
enum { NUMLA_MODEL_NEW_BLOCK = 16, NUMLA_MODEL_PAR_ROWS = 8192, NUMLA_MODEL_PER_THREAD_ROWS = 64 };
/* AUTO's crossover (docs/prefill.md): the time kv_b_proj takes to expand one latent row,
 * in units of the time the expanded attention saves per causal (query, key) pair over the
 * absorbed one. A chunk of n new tokens over a prefix of P is expanded when its
 * n·P + n(n+1)/2 pairs exceed P times this: always without a prefix, for n >~ this with a
 * long one. Measured 205 with the AVX-512 GEMM, ~230 with the AMX GEMM (the expansion is
 * bound by data movement, not the GEMM), ~160 once mha_prefill ran on AMX tiles (2026-12-03,
 * docs/prefill.md); re-measure when the linear layers or either attention kernel change. */
enum { NUMLA_MODEL_EXPAND_PAIRS_PER_ROW = 160 };

/* num_threads is informational: each step uses omp_get_max_threads() of the calling thread
 * (the team the kernels will open), so set the team size with omp_set_num_threads. */
numla_status numla_model_create(const numla_model_weights *w, numla_isa isa, int num_threads,
                                numla_model **out);
void numla_model_destroy(numla_model **m);

/* Kernel choices of a model: which families may run their AMX paths (0: that family runs at
 * most avx512bf16), and the prefill form. From the settings (engine/cli/settings.h). */
typedef struct numla_model_options {
    int linear_amx, mla_amx, mha_amx;
    numla_prefill_form prefill_form;
} numla_model_options;
/* Set the per-family kernel levels (from the model's isa) and the prefill form; call after
 * numla_model_create, before the first step. Local. */
void numla_model_configure(numla_model *m, const numla_model_options *o);

/* Run one step: writes the new tokens' rows into `cache` and logits (R, vocab_count) fp32 for
 * the requested rows. Collective (see above). */
numla_status numla_model_forward(numla_model *m, numla_kv_cache *cache, const numla_step *step,
                                 float *logits);

/* The allreduce hook: sums buf (count fp32 values) over the model's ranks through m->reduce.
 * nranks = 1: no-op. Every rank adds its partial sum; the residual was added on rank 0 only.
 * Collective. */
numla_status numla_model_reduce(numla_model *m, float *buf, int64_t count);

/* ---- building blocks, exposed for tests (DESIGN.md §5) ---- */

/* y (n) = x · rsqrt(mean(x²) + eps) · w, in fp32. y may alias x. */
void numla_rmsnorm(float *y, const float *x, const float *w, int64_t n, double eps);
/* cos_sin (Dr): first Dr/2 entries cos(pos·inv_freq_i)·af, next Dr/2 sin(...)·af. */
void numla_rope_cos_sin(const numla_model_config *c, int32_t pos, float *cos_sin);
/* Rotate adjacent pairs (x_2i, x_2i+1) by angle i and store de-interleaved, as the reference
 * does: out[i] = x_2i·cos - x_2i+1·sin, out[i + Dr/2] = x_2i+1·cos + x_2i·sin. out != x. */
void numla_rope_apply(float *out, const float *x, const float *cos_sin, int64_t dr);
/* MoE routing for one token: scores from router logits (n_routed_experts) → top-k expert ids
 * and weights, per the config's topk_method / scoring_func / norm_topk_prob / scaling.
 * bias: e_score_correction_bias or NULL. scratch: 2 · n_routed_experts floats. */
void numla_moe_route(const numla_model_config *c, const float *logits, const float *bias,
                     int32_t *idx, float *wts, float *scratch);

#endif
