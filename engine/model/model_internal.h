/* engine/model/model_internal.h — the model's private state: settings, the scratch buffers
 * (described once in scratch.c's table), counters, and the steps the forward pass is made of.
 * Included only by engine/model/{model,scratch,projections,attention,moe}.c. */
#ifndef NUMLA_ENGINE_MODEL_INTERNAL_H
#define NUMLA_ENGINE_MODEL_INTERNAL_H

#include <omp.h>

#include "engine/model/model.h"
#include "engine/model/model_testing.h"
#include "engine/model/rope.h"

/* q_a_layernorm and kv_a_layernorm use eps 1e-6 whatever rms_norm_eps says: both DeepSeek's
 * modeling code and transformers build them with the RMSNorm default (tests/golden/README.md). */
#define NUMLA_LATENT_NORM_EPS 1e-6

/* NEW_BLOCK: rows per block of the in-step attention copy. PAR_ROWS: at most this many
 * (token, expert) rows run the experts one per thread (each expert's linears on one thread,
 * moe.c moe_experts_parallel); beyond it (long prefill chunks, where every expert has many
 * rows) each expert uses the whole team. PER_THREAD_ROWS: steps of at most this many tokens
 * run the per-head products and the shared experts one call per thread. */
enum { NUMLA_MODEL_NEW_BLOCK = 16, NUMLA_MODEL_PAR_ROWS = 8192, NUMLA_MODEL_PER_THREAD_ROWS = 64 };

/* What a scratch buffer's length scales with (scratch.c's table): its capacity m->cap[d]
 * times a per-unit element count from the config and shard. */
typedef enum {
    NUMLA_SCRATCH_TOKENS,     /* cap_tokens: rows of the step */
    NUMLA_SCRATCH_PAR_ROWS,   /* min(cap_tokens · k, PAR_ROWS) (token, expert) rows */
    NUMLA_SCRATCH_EXPERTS,    /* fixed at create: 1 (lengths are n_routed_experts + 2) */
    NUMLA_SCRATCH_ATTN_ROWS,  /* step tokens (>= sequences) of the two-part attention */
    NUMLA_SCRATCH_NEW_TABLES, /* B · blocks of the in-step attention copy's tables */
    NUMLA_SCRATCH_NEW_KV,     /* bytes of the in-step attention copy */
    NUMLA_SCRATCH_SUB_TOKENS, /* tokens of the absorbed sub-step of a mixed step */
    NUMLA_SCRATCH_SUB_META,   /* int32s of the sub-step's query_start_loc | seq_lens | tables */
    NUMLA_SCRATCH_XP_KEYS,    /* key rows of the expanded form */
    NUMLA_SCRATCH_XP_TOKENS,  /* query rows of the expanded form */
    NUMLA_SCRATCH_XP_SEQS,    /* sequences of the expanded form */
    NUMLA_SCRATCH_DSA_TOKENS, /* rows of the sparse-attention indexer (DSA models only) */
    NUMLA_SCRATCH_MTP_HID,    /* rows of the last main step kept for the MTP layer */
    NUMLA_SCRATCH_MTP_OUT,    /* rows of an MTP step (its input and output) */
    NUMLA_SCRATCH_WORKSPACE,  /* kernel workspaces grown by size query (grow_workspace) */
    NUMLA_SCRATCH_DIM_COUNT
} numla_scratch_dim;

struct numla_model {
    const numla_model_weights *w;   /* not owned */
    numla_model_config cfg;
    numla_isa isa;
    int num_threads;                /* the team of the current step */
    int exact_activations;          /* numla_model_options */
    size_t single_thread_below_bytes;
    numla_prefill_form prefill_form;
    int linear_amx, mla_amx, mha_amx; /* numla_model_options */
    numla_uarch uarch;                /* numla_model_options */
    /* the level each kernel family runs at: isa, or below amx where that family's AMX path
     * is turned off */
    numla_isa isa_linear, isa_mla, isa_mha, isa_qlinear;
    /* some layer's absorbed attention gives bf16 output (attention.c attention_absorbed:
     * where W_UV quantizes its input); sizes ctx_bf, ctx2_bf */
    int attn_out_bf16;
    numla_model_layer_hook hook;
    void *hook_ctx;
    numla_model_reduce_fn reduce;   /* NULL: only nranks = 1 can run */
    void *reduce_ctx;
    numla_model_stats stats;
    size_t route_stride;            /* bytes per token of routing scratch, a multiple of 64 */

    /* scratch, grown on demand (never inside a layer); lengths in scratch.c's table */
    int64_t cap[NUMLA_SCRATCH_DIM_COUNT];
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
    int32_t *ex_list;  /* (T · k) (token · k + j) grouped by expert */
    void *route_scratch; /* (T, route_stride bytes) numla_model_moe_route scratch per token */
    float *cos_sin;    /* (T, Dr) cos then sin per token (Dr/2 each) */
    float *xl;         /* (R, hidden) normed rows for the logits */
    int32_t *ex_count; /* (n_routed_experts + 1) */
    int32_t *ex_cursor; /* (n_routed_experts + 1) fill cursor for ex_list */
    int32_t *ex_act;   /* (n_routed_experts + 1) local experts with rows this step */
    /* decode MoE with the experts split over the team (moe.c moe_experts_parallel) */
    float *par_x;      /* (P, hidden) gathered inputs, P = min(PAR_ROWS, cap_tokens · k) */
    float *par_y;      /* (P, hidden) expert outputs */
    float *par_g;      /* (P, moe_intermediate) */
    float *par_u;      /* (P, moe_intermediate) */
    void *lin_ws;      /* linear workspace */
    size_t lin_ws_bytes;
    void *par_ws;      /* (threads, par_ws_each) linear workspaces of calls made one per thread */
    size_t par_ws_bytes;
    void *attn_ws;     /* attention workspace */
    size_t attn_ws_bytes;

    /* chunked attention (prefix part + in-step part, merged by LSE), grown per step */
    float *ctx2;       /* (T, H_r, Dc) in-step part */
    uint16_t *ctx_bf;  /* (T, H_r, Dc) the prefix part in bf16 where attn_out_bf16, else empty */
    uint16_t *ctx2_bf; /* (T, H_r, Dc) the in-step part likewise */
    float *lse_pre;    /* (T, H_r) */
    float *lse_new;    /* (T, H_r) */
    void *new_kv;      /* (new_kv_rows, Dc + Dr) cache dtype: each sequence's new rows, blocks
                          of NUMLA_MODEL_NEW_BLOCK rows starting at a block boundary;
                          cap[NUMLA_SCRATCH_NEW_KV] bytes */
    int32_t *new_tables; /* (B, new_max_blocks) blocks of new_kv per sequence */
    int32_t *pre_lens;   /* (B) cached prefix = seq_lens - n_b */
    int32_t *new_lens;   /* (B) n_b */
    /* A step mixing absorbed sequences (decode rows, short chunks over a long prefix) with
     * expanded ones runs the absorbed form over a compacted copy of its absorbed sequences
     * (attention.c attention_split); built once per step by attention_plan_step. */
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
    /* expanded prefill (attention.c attention_expanded), grown per step for K key rows */
    float *xp_lat;     /* (K, Dc + Dr) latent rows of the expanded sequences, f32 */
    float *xp_kv;      /* (K, H_r · (nope + v_head_dim)) kv_b_proj · c' */
    float *xp_k;       /* (K, H_r, q_head_dim) [k_nope | rope(k_pe)] */
    float *xp_v;       /* (K, H_r, v_head_dim) */
    float *xp_q;       /* (T, H_r, q_head_dim) [q_nope | rope(q_pe)] */
    int32_t *xp_seq;   /* (4, B) q_start, q_len, k_start, prefix of the expanded sequences */
    void *xp_ws;       /* mha_prefill workspace */
    size_t xp_ws_bytes;
    /* sparse attention (sparse_attention.c; DSA models): Hi = index_n_heads, Di =
     * index_head_dim, K = index_topk */
    int dsa_sparse;    /* this step selects tokens: some sequence is longer than K */
    float *idx_q;      /* (T, Hi · Di) indexer queries */
    uint16_t *idx_qb;  /* (T, Hi · Di) the same in bf16, for a bf16 index-key cache */
    float *idx_k;      /* (T, Di) indexer keys (written to the index-key cache) */
    float *idx_w;      /* (T, Hi) head weights */
    int32_t *idx_sel;  /* (T, K) positions the last full indexer layer kept, -1 padded */
    int32_t *idx_cnt;  /* (T) how many */
    void *dsa_ws;      /* numla_dsa_index / numla_dsa_attn workspace */
    size_t dsa_ws_bytes;
    /* multi-token prediction (cfg.mtp_enabled; model.c numla_model_mtp_forward) */
    float *mtp_hid;    /* (T_main, hidden) residual stream after the last layer of the last main
                          step, before the final norm */
    int64_t mtp_hid_rows; /* T_main */
    float *mtp_out;    /* (T_mtp, hidden) the MTP block's output of the last MTP step */
    int64_t mtp_out_rows; /* T_mtp */
    float *mtp_cat;    /* (T_mtp, 2 · hidden) [enorm(emb) | hnorm(h)], eh_proj's input */
};

/* ---- scratch (scratch.c); every function here is local (one rank, the calling thread) ---- */

/* Grow every buffer of dimension d to capacity cap (contents kept); m->cap[d] = cap on
 * success. what names the buffers in the error. */
numla_status numla_model_scratch_grow(numla_model *m, numla_scratch_dim d, int64_t cap,
                                      const char *what);
/* Free every scratch buffer (numla_model_destroy). */
void numla_model_scratch_free(numla_model *m);
/* Grow a 64-byte aligned kernel workspace (*buf, *bytes) to at least need bytes; its old
 * contents are not kept. what names it in the error. */
numla_status numla_model_grow_workspace(void **buf, size_t *bytes, size_t need, const char *what);
/* nth workspaces of `each` bytes (rounded to 64, *stride) in m->par_ws, for linear calls made
 * one per thread inside our own parallel region. */
numla_status numla_model_par_workspace(numla_model *m, size_t each, int nth, size_t *stride);

/* ---- counters ---- */

/* Charges the time since *t to part p and restarts the clock. */
static inline void numla_model_part_tick(numla_model *m, numla_model_part p, double *t)
{
    double now = omp_get_wtime();
    m->stats.part_s[p] += now - *t;
    *t = now;
}

/* ---- projections (projections.c) ---- */

/* The level linear w runs at: its family's (8-bit weights: isa_qlinear, the rest isa_linear),
 * with exact_activations at most avx512 (it widens bf16 weights and keeps activations fp32 at
 * every M; every level reads the one packed layout). */
static inline numla_isa numla_model_lin_isa(const numla_model *m, const numla_model_linear *w)
{
    const numla_isa isa = w->kind == NUMLA_MODEL_LINEAR_Q8 ? m->isa_qlinear : m->isa_linear;
    return m->exact_activations ? numla_isa_min(isa, NUMLA_ISA_AVX512) : isa;
}
/* y (M, ldy) (+)= x (M, ldx) · Wᵀ, growing the shared workspace outside the kernel. */
numla_status numla_model_lin(numla_model *m, const numla_model_linear *w, int64_t M,
                             const float *x, int64_t ldx, float *y, int64_t ldy, int acc);
/* Hr per-head linears (float or 8-bit) on strided column blocks: head h reads x + h·xoff
 * (times row h of xs (Hr, k) when xs is not NULL), writes y + h·yoff. */
numla_status numla_model_per_head(numla_model *m, const numla_model_linear *w, const float *xs,
                                  int64_t Hr, int64_t T, const float *x, int64_t ldx,
                                  int64_t xoff, float *y, int64_t ldy, int64_t yoff);
/* SiLU-gated MLP slice on rows x (M, hidden), accumulating into y (M, ldy). */
numla_status numla_model_mlp(numla_model *m, const numla_weights_mlp *w, int64_t M,
                             const float *x, float *y, int64_t ldy);

/* ---- attention (attention.c) ---- */

/* Per step, before the layers: the attention form of each sequence (m->split, all_expanded,
 * the absorbed sub-step) and the two-part attention's scratch and tables every layer reuses. */
numla_status numla_model_attention_plan(numla_model *m, const numla_kv_cache *cache,
                                        const numla_step *st);
/* The attention block of one layer on m->x: h (+)= o_proj(attention). */
numla_status numla_model_attention(numla_model *m, const numla_weights_layer *lw, int32_t layer,
                                   numla_kv_cache *cache, const numla_step *st);

/* Absorbed queries of T rows: qabs (T, H_r, Dc + Dr) = [W_UK,hᵀ q_nope,h | rope(q_pe,h)] from
 * q (T, H_r · q_head_dim) and cos_sin (T, Dr). */
numla_status numla_model_absorb_queries(numla_model *m, const numla_weights_layer *lw, int64_t T,
                                        const float *q, const float *cos_sin, float *qabs);

/* ---- sparse attention (sparse_attention.c; DSA models) ---- */

/* Per step, before the layers: whether the step selects tokens (m->dsa_sparse) and its
 * scratch; checks that the cache has the index-key pool. A no-op for other models. */
numla_status numla_model_dsa_plan(numla_model *m, const numla_kv_cache *cache,
                                  const numla_step *st);
/* The indexer of a layer that has one: its keys into the index-key cache at the step's slots
 * and, when the step selects tokens, each row's positions into m->idx_sel / m->idx_cnt.
 * Reads m->qa (the normed q latent) and m->x. */
numla_status numla_model_dsa_index(numla_model *m, const numla_weights_layer *lw, int32_t layer,
                                   numla_kv_cache *cache, const numla_step *st);
/* Sparse MLA over the selected rows (every row of the step, absorbed form): o (T, H_r · v). */
numla_status numla_model_dsa_attention(numla_model *m, const numla_weights_layer *lw,
                                       int32_t layer, numla_kv_cache *cache,
                                       const numla_step *st);

/* ---- MoE (moe.c) ---- */

/* Router, routed experts and shared experts of one layer on m->x: h (+)= MoE(x). Ticks its
 * own parts. */
numla_status numla_model_moe(numla_model *m, const numla_weights_layer *lw, int64_t T);

#endif
