/* engine/model/model_v4.h — the DeepSeek-V4 forward pass on one rank (docs/design.md §5.9):
 * mHC residual streams, shared-KV attention with sinks and the grouped output projection over
 * a sliding window plus compressed entries (CSA through the lightning indexer, HCA densely),
 * sqrtsoftplus / hash-routed MoE with swiglu_limit. Beside the MLA path (model.c), sharing its
 * config, safetensors reader and linear kernels.
 *
 * The cache: a sequence (numla_v4_seq) owns, per layer, a ring of the last sliding_window KV
 * rows and the compressors' carry-over (the fp32 raw rows of the current and previous
 * compression window); its compressed entries (and CSA's indexer keys) live in the KV pool's
 * blocks, addressed through the sequence's block table (numla_v4_seq_use_pool, _set_blocks:
 * docs/design.md §3.1), or, for a sequence without a pool (and a compressor whose rate does not
 * divide the block size, and the MTP layer's), in growing arrays of its own (fp32 or bf16:
 * numla_v4_model_set_cache_dtype). The prefix cache keeps numla_v4_prefix states of segments
 * (below). A forward runs the new tokens of one sequence or
 * of several together, each in one chunk or several (prefill, chunked prefill, decode and
 * batching give the same numbers).
 */
#ifndef NUMLA_ENGINE_MODEL_V4_H
#define NUMLA_ENGINE_MODEL_V4_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "engine/formats/safetensors.h"
#include "engine/model/config.h"
#include "engine/model/model.h"
#include "engine/model/shard.h"
#include "engine/model/weights.h"
#include "kernels/isa.h"

/* weights, read-only during forwards, and the forwards' scratch (kept between forwards, grown
 * when a step needs more): a model runs one forward (main or MTP) at a time */
typedef struct numla_v4_model numla_v4_model;
typedef struct numla_v4_seq numla_v4_seq;     /* one sequence's cache */

/* Load cfg's weights (cfg->v4.enabled) from st: F32, BF16 or F16 tensors under DeepSeek's names
 * (docs/design.md §5.9); matrices are packed for kernels/linear.h at level isa (bf16 stays bf16,
 * the rest fp32), vectors, norms, the mHC and router weights become fp32. A missing tensor or a
 * wrong shape is NUMLA_STATUS_FORMAT naming it. The MTP layer (`mtp.0.*`) is read when
 * cfg->mtp_enabled, its block as a layer and sharded like one. Not collective. */
numla_status numla_v4_model_load(const numla_model_config *cfg, const numla_safetensors_model *st,
                                 numla_isa isa, numla_v4_model **out);
/* Rank `rank` of `nranks`'s part (docs/design.md §2 applied to V4): whole o_groups and their
 * heads (wq_b rows, sinks, wo_a groups, wo_b columns), the experts, the shared expert's
 * intermediate columns and the head's vocabulary rows of numla_shard_plan; everything else
 * (q_a, the KV row, the compressors, the indexer, mHC, norms, router, embedding) on every
 * rank. wo (NULL: numla_weights_options_default) is read for qblock_q8_act: block-quantized
 * linears (the FP4 experts, a GGUF file's blocks) packed for int8 activations where the level
 * has the Q8 kernel, as llama.cpp runs them, instead of exact fp32 ones. nranks > o_groups is
 * INVALID_ARG. Not collective (each rank loads its own). */
numla_status numla_v4_model_load_shard(const numla_model_config *cfg,
                                       const numla_safetensors_model *st, numla_isa isa,
                                       const numla_weights_options *wo, int32_t rank,
                                       int32_t nranks, numla_v4_model **out);
/* The dtype of the sequences' window rows and compressed entries (index keys included): F32
 * (the default) or BF16 (rounded to nearest even as they are made; the compressors' raw rows
 * stay fp32, docs/design.md §5.9); anything else is UNSUPPORTED naming it. Set it before any
 * sequence of m is made. Not collective. */
numla_status numla_v4_model_set_cache_dtype(numla_v4_model *m, numla_dtype dt);
numla_dtype numla_v4_model_cache_dtype(const numla_v4_model *m);
/* The sum over the ranks (numla_model_reduce_fn: every rank's buffer becomes the sum, identical
 * on every rank); needed when nranks > 1. */
void numla_v4_model_set_reduce(numla_v4_model *m, numla_model_reduce_fn fn, void *ctx);
/* The levels m's linears run at, decided as the MLA path's model decides them
 * (numla_model_options_level: each family's AMX switch, the uarch rule for 8-bit weights;
 * exact_activations caps both at avx512): bf16/fp32 and MXFP4 weights at the LINEAR family's
 * level, FP8 ones at QLINEAR's. o->isa is the level asked for (any level reads the packing of
 * any other; the kernels get at most the best level the CPU has). A model starts with
 * numla_model_options_default(its load level). Set it before a forward, not during one. Not
 * collective. */
void numla_v4_model_set_options(numla_v4_model *m, const numla_model_options *o);
/* Linear forwards of family f (LINEAR or QLINEAR, as above) that m has run with level `level`
 * chosen since it was loaded (0 for any other family): what the tests check the options
 * against. A level above what the CPU has is counted as chosen and runs the CPU's best. */
uint64_t numla_v4_model_linear_calls(const numla_v4_model *m, numla_model_kernels f,
                                     numla_isa level);
/* Allocations the forwards have made for their scratch since m was loaded: it grows when a
 * step needs more than any before, so steps of shapes already run add none. */
uint64_t numla_v4_model_scratch_grows(const numla_v4_model *m);
/* This rank's experts and vocabulary rows (heads are whole o_groups, not shard->head_*). */
const numla_shard *numla_v4_model_shard(const numla_v4_model *m);
void numla_v4_model_destroy(numla_v4_model **m);
const numla_model_config *numla_v4_model_config(const numla_v4_model *m);
/* Bytes of this rank's packed weights (the embedding's fp32 copy included; norms and vectors
 * not). */
size_t numla_v4_model_weight_bytes(const numla_v4_model *m);
/* What one decode token reads of this rank's weights (batch 1; norms and vectors left out):
 * every linear at its packed size (the attention's with the compressors and the indexer, both
 * hyper-connection projections, the router, the shared expert, k routed experts at the mean size
 * of this rank's, the head and hyper-head plus one fp32 embedding row) and their 2·n·k FLOPs.
 * With one rank: the whole model's. */
typedef struct numla_v4_token_costs {
    double attn_bytes, mlp_bytes, head_bytes;
    double linear_flops;
} numla_v4_token_costs;
void numla_v4_model_token_costs(const numla_v4_model *m, numla_v4_token_costs *out);

/* An empty sequence for m. Not collective. */
numla_status numla_v4_seq_create(const numla_v4_model *m, numla_v4_seq **out);
void numla_v4_seq_destroy(numla_v4_seq **s);
/* Tokens the sequence holds. */
int64_t numla_v4_seq_len(const numla_v4_seq *s);
/* Give each of s's compressed-entry buffers room for the entries of `tokens` tokens (exactly
 * that many; a forward within it makes no allocation for them). Grows only. NO_MEMORY naming
 * the count. Not collective. */
numla_status numla_v4_seq_reserve(numla_v4_seq *s, int64_t tokens);
/* DeepSeek-V4's compressed entries in the KV pool (engine/model/kv_cache.c makes the regions,
 * numla_kv_cache_v4_pool gives this view): for compressor k (0: the attention's, 1: the
 * indexer's) of layer l, entries[l][k] holds (num_blocks, block_size / rate, width) values of
 * dtype, entry e of a sequence in block table[e / (block_size / rate)] at e mod (block_size /
 * rate): a block holds the entries that end in its tokens. NULL where that compressor keeps its
 * entries per sequence (numla_v4_pool_block_bytes 0). */
typedef struct numla_v4_pool {
    int32_t block_size;
    int64_t num_blocks;
    numla_dtype dtype;
    void *entries[NUMLA_V4_MAX_LAYERS][2];
    struct numla_v4_slots *slots; /* the sequences' fixed state, or NULL: each its own */
} numla_v4_pool;
/* The pool's state slots (docs/design.md §3.1): what every sequence holds whatever its length
 * (per layer the window ring and each compressor's raw rows and the entry being made; with the
 * MTP layer, its cache's), numla_v4_state_bytes of it, one slot a running sequence, in a region
 * the pool maps beside its blocks, whose pages are touched as rows are written and stay, as the
 * blocks' do. The pool (engine/model/kv_cache.c) owns it; a sequence takes a slot in
 * numla_v4_seq_use_pool and gives it back in numla_v4_seq_destroy; the next one takes it as it
 * is (a sequence reads no row it has not written). */
typedef struct numla_v4_slots {
    char *base;      /* (count, stride) bytes */
    size_t stride;   /* bytes a slot: numla_v4_state_bytes rounded up to whole pages */
    size_t need;     /* numla_v4_state_bytes of the pool's config */
    int32_t count;
    int32_t nfree;
    int32_t *free;   /* (count) free slots, the last taken first */
} numla_v4_slots;
/* Bytes of one sequence's fixed state (the slot's layout, 64-byte aligned arrays) for a cache of
 * dtype dt: per layer (and the MTP layer's, where cfg->mtp_enabled) W · Dh values of dt and, per
 * compressor, 2 · (2 · rate) · c · width + width fp32 values. Not collective. */
size_t numla_v4_state_bytes(const numla_model_config *cfg, numla_dtype dt);
/* Bytes a pool block of block_size tokens holds for compressor comp of layer `layer` at dtype
 * dt: block_size / rate entries of its width; 0 where the layer has no such compressor, the
 * rate does not divide block_size (the entries stay the sequence's: one HCA entry spans several
 * blocks of 16), or layer is the MTP layer (>= num_layers). Not collective. */
size_t numla_v4_pool_block_bytes(const numla_model_config *cfg, int32_t block_size,
                                 numla_dtype dt, int64_t layer, int comp);
/* Put a new sequence's compressed entries in the pool's blocks (the compressors pool names) and
 * its fixed state in one of the pool's slots (pool->slots, when set); then every forward needs
 * numla_v4_seq_set_blocks first. INVALID_ARG if s is not new or the pool's dtype is not the
 * model's cache dtype; NO_MEMORY naming the count if every slot is held. Not collective. */
numla_status numla_v4_seq_use_pool(numla_v4_seq *s, const numla_v4_pool *pool);
/* The block table of a sequence in a pool (nblocks block ids, which must cover every token it
 * will hold after the next forward; borrowed, not copied: valid until the forward returns).
 * OUT_OF_RANGE naming an id outside the pool. Not collective. */
numla_status numla_v4_seq_set_blocks(numla_v4_seq *s, const int32_t *table, int64_t nblocks);
/* What a sequence's cache costs the paged pool (docs/design.md §3.1, docs/serving.md
 * "DeepSeek-V4's cache"), for a cache of dtype dt and blocks of block_size tokens: *per_block
 * the bytes its compressed entries and index keys gain per block of tokens (per layer and
 * compressor block_size · width / rate values, rounded up: in the pool's blocks or, where
 * numla_v4_pool_block_bytes is 0, in the sequence's own mapping), *per_seq the bytes it holds
 * whatever its length (per layer the window ring of W rows, each compressor's fp32 raw kv and
 * gate rows of two windows and its own mapping's last page; with the MTP layer
 * (cfg->mtp_enabled) its cache too and the draft snapshots). Not collective. */
void numla_v4_cache_charge(const numla_model_config *cfg, int32_t block_size, numla_dtype dt,
                           size_t *per_block, size_t *per_seq);
/* Cache values the sequence holds: per layer its window ring (W x Dh), each compressor's raw
 * rows of two windows and its entries so far (docs/scaling.md counts them per token and per
 * sequence: numla_v4_config_sizes). Not collective. */
int64_t numla_v4_seq_cache_values(const numla_v4_seq *s);
/* Give an empty sequence n tokens' worth of cache without running them (bench model
 * --fill-context): every layer's window ring, its compressed entries (n div rate of them) and
 * index keys set to uniform values of unit variance from a fixed seed; the compressors' carry-over
 * of the incomplete window zero. A decode step after it reads and scores what a prefilled
 * sequence of n tokens would hold, the values aside. INVALID_ARG if s is not empty or n is out
 * of [1, max_position_embeddings); NO_MEMORY leaves s empty. Not collective. */
numla_status numla_v4_seq_fill(numla_v4_seq *s, int64_t n);

/* Run n new tokens of s (positions len .. len + n - 1) and append them to its cache; logits
 * (n, vocab_count) gets every new token's logits over this rank's vocabulary rows
 * (numla_v4_model_shard; all of them with one rank). With several ranks every rank calls it
 * with the same tokens on its own sequence (collective through the reduce hook). Token ids outside the vocabulary, n < 1 or a
 * sequence past max_position_embeddings are NUMLA_STATUS_INVALID_ARG naming the problem, and
 * leave s unchanged; a later failure (out of memory) leaves s unusable (destroy it). Uses the
 * caller's OpenMP threads. */
numla_status numla_v4_forward(const numla_v4_model *m, numla_v4_seq *s, const int32_t *tokens,
                              int64_t n, float *logits);
/* The same for B distinct sequences in one step (continuous batching: prompts, chunks and
 * decode tokens of different sequences together): sequence b runs ns[b] tokens toks[b]; the
 * logits rows follow the sequences' order. Every linear runs once over all rows; the window,
 * compressors and indexer per sequence. The same refusals, naming the sequence. */
numla_status numla_v4_forward_batch(const numla_v4_model *m, int32_t B, numla_v4_seq *const *seqs,
                                    const int32_t *const *toks, const int64_t *ns, float *logits);
/* The same with logits (R, vocab_count) for the R new-token rows `rows` only (rows into the
 * sequences' concatenated new tokens, each < sum(ns); R 0: none, logits may be NULL; R < 0:
 * every row, as numla_v4_forward_batch). A row outside is INVALID_ARG, leaving the sequences
 * unchanged. */
numla_status numla_v4_forward_rows(const numla_v4_model *m, int32_t B, numla_v4_seq *const *seqs,
                                   const int32_t *const *toks, const int64_t *ns, int64_t R,
                                   const int32_t *rows, float *logits);

/* ---- prefix states: what the prefix cache keeps of a sequence (docs/serving.md "DeepSeek-V4's
 * cache") ---- */

/* The state a sequence needs to continue from a position p that is a multiple of a stride, for
 * the segment [p - stride, p): per layer the window rows of positions p - W + 1 .. p - 1, the
 * compressed entries (and CSA's index keys) made in the segment where the sequence keeps them
 * itself (those in the pool's blocks stay there: a hit shares the blocks), and CSA's compressors' carry
 * (the first halves of the kv and gate rows of positions p - csa_rate .. p - 1). HCA carries
 * nothing: p closes its window. With the MTP layer loaded, the same parts of the MTP layer's
 * cache after its rows 0 .. p - 1 (row p - 1 made with the token at p), filled by the MTP step
 * that runs row p - 1 (numla_v4_seq_mtp_capture); until then the state is not complete. A
 * sequence at p is rebuilt from the states of its p / stride segments (numla_v4_seq_restore). */
typedef struct numla_v4_prefix numla_v4_prefix;
/* The positions a prefix may end at for a pool of block_size tokens a block: multiples of the
 * least common multiple of block_size and the compress rates of cfg's layers and of its MTP
 * layer when it has one (V4-Flash with blocks of 16: 128). */
int64_t numla_v4_prefix_stride(const numla_model_config *cfg, int32_t block_size);
void numla_v4_prefix_destroy(numla_v4_prefix **p);
/* The position the state continues from (p), -1 for NULL. */
int64_t numla_v4_prefix_pos(const numla_v4_prefix *p);
/* Bytes it holds (fp32 values), and what one state of m at `stride` holds for a sequence in a
 * pool of block_size tokens a block (0: none, every entry in the state). */
size_t numla_v4_prefix_bytes(const numla_v4_prefix *p);
size_t numla_v4_prefix_bytes_for(const numla_v4_model *m, int64_t stride, int32_t block_size);
/* The same from cfg alone for a cache of dtype dt (the engine sizes the pool with it; the MTP
 * layer's part with cfg->mtp_enabled). */
size_t numla_v4_prefix_bytes_cfg(const numla_model_config *cfg, int64_t stride,
                                 int32_t block_size, numla_dtype dt);
/* Have s's next forward of n tokens keep the state at every multiple p of stride in
 * (len, len + n] (allocated here; states armed before and not taken are dropped); after it,
 * numla_v4_seq_take_capture hands them over in order of position (NULL when none is left).
 * A stride that is not a multiple of every compress rate is INVALID_ARG. Not collective. */
numla_status numla_v4_seq_capture(numla_v4_seq *s, int64_t stride, int64_t n);
numla_v4_prefix *numla_v4_seq_take_capture(numla_v4_seq *s);
/* Whether p is complete: without the MTP layer always; with it, once its MTP part is filled. */
int numla_v4_prefix_complete(const numla_v4_prefix *p);
/* Set an empty s to position nseg·stride from the states of its segments: segs[k] the state at
 * (k + 1)·stride, all of one stride; with the MTP layer its MTP cache too (nseg·stride rows).
 * The sequence is then the one a forward of those tokens (and the MTP rows of them) leaves,
 * bit for bit. INVALID_ARG if s is not empty or a segment does not fit or is not complete;
 * NO_MEMORY. Not collective. */
numla_status numla_v4_seq_restore(numla_v4_seq *s, const numla_v4_prefix *const *segs,
                                  int64_t nseg);

/* ---- the multi-token-prediction layer (cfg.mtp_enabled: numla_v4_config_enable_mtp before
 * loading; docs/design.md §5.9) ---- */

/* One step of the MTP layer for B distinct sequences: sequence b runs ns[b] MTP rows at the
 * positions numla_v4_seq_mtp_len(b) .. + ns[b] - 1 (the MTP layer's own cache, beside the
 * sequence's layers, made at its first row). Row i's token toks[b][i] is the token at its
 * position + 1; its hidden streams src[b][i]: >= 0, that row of the sequence's last
 * numla_v4_forward* (which must be the row of the same position), < 0, row -1 - src of its
 * last MTP step's block output (chaining a draft: the row of the previous position). logits
 * (R, vocab_count) for the rows `rows` into the concatenated rows (R < 0: every row, R 0:
 * none): the draft distribution of the token at position + 2, over this rank's vocabulary
 * rows. A bad row is INVALID_ARG naming it, leaving the sequences unchanged. Collective like
 * numla_v4_forward (the block's reductions). */
numla_status numla_v4_mtp_forward(const numla_v4_model *m, int32_t B, numla_v4_seq *const *seqs,
                                  const int32_t *const *toks, const int32_t *const *src,
                                  const int64_t *ns, int64_t R, const int32_t *rows, float *logits);
/* MTP rows the sequence's MTP cache holds. */
int64_t numla_v4_seq_mtp_len(const numla_v4_seq *s);
/* Have s's next numla_v4_mtp_forward fill the MTP layer's part of the n prefix states `states`
 * (borrowed: they must live through that forward; one stride, positions increasing, each past
 * numla_v4_seq_mtp_len): a state at p gets the MTP cache as the forward's rows pass p - 1 and
 * is complete (numla_v4_prefix_complete) once the forward ran row p - 1; the capture ends with
 * that forward. Only for MTP rows that are final (never a chained draft's). n 0 disarms.
 * INVALID_ARG without the MTP layer or for a state that does not fit. Not collective. */
numla_status numla_v4_seq_mtp_capture(numla_v4_seq *s, numla_v4_prefix *const *states, int32_t n);

/* Rolling back rejected draft rows (docs/design.md §5.9): numla_v4_seq_mark remembers the
 * sequence's length as a point it may come back to; the forwards after it keep what their first
 * 16 positions overwrite (each layer's window-ring row and compressors' raw rows at those
 * positions' slots); numla_v4_seq_truncate(s, n), base <= n <= len, puts those back for positions
 * n .. len - 1 and sets the compressed entries' count and the length to n's: the cache is then
 * the one a run of only the first n tokens leaves. More than 16 rows since the mark, a call of
 * more rows than a compressor's 2·rate slots, or n before the mark: INVALID_ARG naming the
 * reason (numla_v4_seq_can_truncate says it first). The _mtp_ forms do the same for the MTP
 * layer's cache (its rows). Not collective. */
numla_status numla_v4_seq_mark(numla_v4_seq *s);
numla_status numla_v4_seq_truncate(numla_v4_seq *s, int64_t n);
int numla_v4_seq_can_truncate(const numla_v4_seq *s, int64_t n);
numla_status numla_v4_seq_mtp_mark(numla_v4_seq *s);
numla_status numla_v4_seq_mtp_truncate(numla_v4_seq *s, int64_t n);
int numla_v4_seq_mtp_can_truncate(const numla_v4_seq *s, int64_t n);

/* ---- driven by numla_step (the scheduler and the engine; model_v4_step.c) ---- */

/* The sequences one rank holds for a step-driven model, by identity: numla_step.seq_ids[b], or
 * with none the sequence's first KV block (then nothing is ever released: a sequence's state
 * stays until a step starts that block's sequence again from position 0). */
typedef struct numla_v4_seqs numla_v4_seqs;
numla_status numla_v4_seqs_create(const numla_v4_model *m, numla_v4_seqs **out);
void numla_v4_seqs_destroy(numla_v4_seqs **t);
/* Sequences held. */
int32_t numla_v4_seqs_count(const numla_v4_seqs *t);
/* The pool's tokens a block: a step gives each sequence room for the entries of every token
 * of its blocks (numla_v4_seq_reserve) before it runs. Local. */
void numla_v4_seqs_set_block_size(numla_v4_seqs *t, int32_t block_size);
/* Keep the compressed entries of the sequences t makes from now on in pool's blocks
 * (numla_v4_seq_use_pool; pool copied), addressed through each step's block tables. Local. */
numla_status numla_v4_seqs_use_pool(numla_v4_seqs *t, const numla_v4_pool *pool);
/* The prefix cache (docs/serving.md "DeepSeek-V4's cache"), for a pool of block_size tokens a
 * block: at the end of every step, each sequence's state at every multiple p of
 * numla_v4_prefix_stride it passed is kept with the block that ends at p (its id from the
 * step's block table), and a step's block that it writes loses its state; a step may then
 * start a sequence t does not hold at such a p when every block of its table ending at a
 * multiple of the stride up to p holds one (a prefix-cache hit: the sequence is rebuilt from
 * them, numla_v4_seq_restore). At most one state per block, so the pool bounds them. Every
 * rank keeps its own, running the same steps. With the MTP layer a state also takes the MTP
 * cache's part in the MTP step of final rows that runs its last row (numla_v4_step_mtp), and
 * only a complete state is a hit. Local. */
numla_status numla_v4_seqs_enable_prefix(numla_v4_seqs *t, int32_t block_size);
/* The stride (0: off), the states kept, and their bytes. */
int64_t numla_v4_seqs_prefix_stride(const numla_v4_seqs *t);
int32_t numla_v4_seqs_prefix_count(const numla_v4_seqs *t);
size_t numla_v4_seqs_prefix_bytes(const numla_v4_seqs *t);
/* Whether st can run on t (beside numla_model_step_check's checks of the step itself): each
 * sequence either starts at position 0 (a new sequence, or one starting again: its state is
 * reset), continues one that t holds, not released by st, at exactly the tokens it holds, or
 * (the prefix cache on) starts a sequence t does not hold from its blocks' states; no sequence
 * twice. INVALID_ARG naming the sequence otherwise. Local. */
numla_status numla_v4_step_check(const numla_v4_seqs *t, const numla_step *st);
/* Free st's released sequences, then run its sequences' new tokens (creating the new ones) with
 * numla_v4_forward_rows: logits (st->num_logit_rows, vocab_count) for st->logit_rows. The
 * step's slots are not used; with a pool (numla_v4_seqs_use_pool) its block tables address the
 * sequences' compressed entries. Collective like numla_v4_forward (every rank runs the same
 * step on its own t). */
numla_status numla_v4_step_forward(numla_v4_seqs *t, const numla_step *st, float *logits);
/* An MTP step (the scheduler's, numla_model_mtp_forward's contract: docs/speculative.md) on t:
 * st->seq_ids name held sequences; hidden_rows[r] >= 0 is row r of the last step
 * numla_v4_step_forward ran (a row of the same sequence), < 0 row -1 - r of the last MTP step's
 * (chaining). A sequence's MTP rows start at its MTP cache's length or, after drafts, at or
 * after its mark (the chained rows are undone first); its main cache is first brought back to
 * the verified length the same way at its next step. A step whose rows all come from the main
 * step marks the MTP cache after it. _check: INVALID_ARG naming the first bad row. Collective
 * like numla_v4_step_forward. */
numla_status numla_v4_step_mtp_check(const numla_v4_seqs *t, const numla_step *st,
                                     const int32_t *hidden_rows);
numla_status numla_v4_step_mtp(numla_v4_seqs *t, const numla_step *st, const int32_t *hidden_rows,
                               float *logits);
/* numla_v4_seq_fill on the sequence a step names with `key` (its id, or with no ids INT64_MIN +
 * its first block), replacing what t held of it: the next step continues it at position n.
 * With a pool, table (ceil(n / block_size) block ids) holds its entries. */
numla_status numla_v4_seqs_fill(numla_v4_seqs *t, int64_t key, const int32_t *table, int64_t n);

#endif
