/* engine/parallel/engine.h — the collective engine: one model sharded over the ranks of a communicator
 * (head-parallel attention, expert-parallel MoE, vocab-parallel lm_head; docs/design.md §1, §2, §6).
 *
 * Every rank creates the engine (collectively). Rank 0 owns the requests: it decides each step
 * (a numla_step: sequences, tokens, positions, slots, block tables, logit rows) and calls
 * numla_engine_step, which broadcasts the plan so that every rank runs the identical
 * numla_model_forward on its shard; the two allreduces per layer go through numla_comm; the
 * vocab slices of the logits are gathered to rank 0. Ranks != 0 sit in numla_engine_worker_loop
 * until rank 0 calls numla_engine_stop (or destroys the engine).
 *
 *   rank 0                                   ranks 1..R-1
 *   numla_engine_create(comm, dir, &o, &e)   numla_engine_create(comm, dir, &o, &e)
 *   loop: numla_engine_step(e, &plan, lg)    numla_engine_worker_loop(e)
 *   numla_engine_destroy(&e)  (stops them)   numla_engine_destroy(&e)
 *
 * KV cache: each rank holds its own cache of the same geometry (the full latent of every
 * sequence: head parallelism replicates it R times). Only rank 0's block allocator is used:
 * rank 0 reserves blocks in numla_engine_kv_cache(e) and sends the block tables with the plan;
 * the other ranks write the same slots of their own caches.
 * DeepSeek-V4 (model_type deepseek_v4) keeps its cache per sequence instead (numla_v4_seqs on
 * every rank, by the plan's seq_ids; released ones freed at the next step): its block pool is
 * rank 0's accounting of tokens only, its rows never written.
 *
 * Failure policy: an invalid plan is rejected on rank 0 before anything is broadcast (the call
 * returns the error, the job goes on). Any failure after the broadcast — on any rank — is
 * unrecoverable (the ranks are no longer in step) and calls numla_comm_abort, which ends the job
 * with a message within seconds.
 */
#ifndef NUMLA_ENGINE_ENGINE_H
#define NUMLA_ENGINE_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "common/dtype.h"
#include "common/status.h"
#include "engine/model/config.h"
#include "engine/model/kv_cache.h"
#include "engine/model/model.h"
#include "engine/model/model_v4.h"
#include "kernels/isa.h"
#include "launch/plan.h"

typedef struct numla_engine numla_engine;

typedef struct numla_engine_options {
    int num_threads;          /* OpenMP threads of this rank; 0: omp_get_max_threads() (after
                                 binding, the plan's thread count) */
    int32_t block_size;       /* KV tokens per block; 0: the model's (numla_kv_default_block_size) */
    int64_t num_blocks;       /* KV blocks per rank; 0: from kv_memory_bytes / kv_memory_fraction,
                                 or enough for max_context tokens when both are 0 */
    int64_t max_context;      /* used when all three are 0; 0: min(4096, model max) */
    int32_t num_blocks_seqs;  /* with num_blocks > 0: that many sequences' own blocks on top
                                 (deepseek_v4's seq_blocks, numla_kv_pool_charge; a benchmark
                                 that holds its sequences' blocks itself); 0 otherwise */
    int64_t kv_memory_bytes;  /* > 0 (num_blocks 0): pool bytes per rank (numla run --kv-memory);
                                 an error when the ranks sharing a node cannot all have it in
                                 the node's free memory */
    double kv_memory_fraction;/* > 0 (num_blocks, kv_memory_bytes 0): this fraction of the free
                                 memory of the rank's NUMA node once every rank has loaded its
                                 weights, divided among the ranks of the same host that draw on
                                 that node (numla_kv_cache_share_bytes); every rank takes the
                                 smallest block count any rank can afford, so the pools match */
    int32_t max_seqs;         /* > 0: a pool sized from memory is capped at what max_seqs
                                 sequences of max_context tokens (0: the model's) can use, so a
                                 small model does not claim most of the node; 0: no cap */
    numla_dtype kv_dtype;     /* KV element type; NUMLA_DTYPE_BF16 recommended */
    int index_dtype;          /* sparse-attention models' index keys: a numla_dtype (bf16, f16,
                                 f32, or I8: the quantized scoring option, docs/
                                 sparse_attention.md); -1: kv_dtype */
    int bind;                 /* 1: apply the launch/ binding plan for this rank (node-local
                                 memory, pinned threads) before loading; 0: leave as is */
    const numla_launch_opts *launch; /* the launcher's plan options (NUMLA_PLAN, parsed once by
                                 the settings) the binding plan is recomputed from; NULL: none
                                 (then a failed binding is only a debug note) */
    numla_isa isa;            /* kernel level (the settings' NUMLA_ISA); must be supported */
    numla_model_options kernels; /* the model's options: per-family AMX switches, prefill
                                    form, ... (its isa and num_threads are the engine's) */
    numla_weights_options weights; /* the weights' format (--weights, --keep-lm-head): as the
                                      checkpoint is by default */
    int mtp;                  /* 1: load the model's multi-token-prediction layer too (it gets
                                 a layer of the KV pool; numla_engine_mtp_step runs it) */
    int prefix_cache;         /* 1: the scheduler's prefix cache is on: a model whose cache is
                                 per sequence (deepseek_v4) keeps the states its hits start
                                 from (numla_v4_seqs_enable_prefix); ignored with mtp */
    const char *mtp_model;    /* with mtp, a deepseek4 GGUF model: the file that holds its MTP
                                 layer (llama.cpp's convert_hf_to_gguf.py --mtp); NULL: none */
} numla_engine_options;

/* Defaults: all zero except kv_dtype = bf16, index_dtype = -1, bind = 1, isa = numla_isa_best(), every kernel
 * family's AMX path allowed, prefill form auto, weights as the checkpoint is. numla run fills them from the settings
 * (engine/cli/settings.h). */
numla_engine_options numla_engine_options_default(void);

/* Create the engine on every rank of comm: read the config, check that there are no more ranks
 * than heads (the error is the same on every rank), load this rank's shard (plus replicated
 * tensors) into memory of its own node, allocate the KV cache and the model scratch.
 * comm is borrowed (must outlive the engine). Collective over comm; a failure on one rank is
 * reported on every rank (each returns an error). */
numla_status numla_engine_create(numla_comm *comm, const char *model_dir,
                                 const numla_engine_options *opts, numla_engine **out);

/* Rank 0: release the workers (broadcast shutdown) if still running, then free. Other ranks:
 * free (after their worker loop returned). Sets *e to NULL; NULL is a no-op. Collective in
 * the sense that rank 0's stop must match the workers' loops; frees only local memory. */
void numla_engine_destroy(numla_engine **e);

/* Rank 0 only: run one step on every rank. plan: the step (engine/model/model.h layout); logits:
 * (plan->num_logit_rows, vocab_size) fp32, the full vocabulary. Validates the plan first
 * (error returned, nothing broadcast); afterwards every failure aborts the job.
 * Collective (the workers take part through their loop). */
numla_status numla_engine_step(numla_engine *e, const numla_step *plan, float *logits);

/* Rank 0 only: one step of the MTP layer on every rank (numla_model_mtp_forward: plan's rows
 * are MTP rows, hidden_rows (plan->num_tokens) says where each row's hidden state comes from:
 * a row of the last numla_engine_step, or, negative, of the last MTP step); logits
 * (plan->num_logit_rows, vocab_size) are the draft distributions. The engine must have been
 * created with mtp. Checked first (error returned, nothing broadcast); afterwards every failure
 * aborts the job. Collective. */
numla_status numla_engine_mtp_step(numla_engine *e, const numla_step *plan,
                                   const int32_t *hidden_rows, float *logits);
/* Ranks != 0: receive and run plans until rank 0 stops the engine; returns OK then.
 * Rank 0 calling it is NUMLA_STATUS_INVALID_ARG. Collective. */
numla_status numla_engine_worker_loop(numla_engine *e);

/* Rank 0 only: broadcast shutdown, ending the workers' loops (idempotent). Collective. */
numla_status numla_engine_stop(numla_engine *e);

/* ---- accessors (local) ---- */
int numla_engine_rank(const numla_engine *e);
int numla_engine_size(const numla_engine *e);
const numla_model_config *numla_engine_config(const numla_engine *e);
/* This rank's shard ranges (heads, experts, vocab, ...). */
const numla_shard *numla_engine_shard(const numla_engine *e);
/* This rank's KV cache; on rank 0 the scheduler allocates blocks from it. */
numla_kv_cache *numla_engine_kv_cache(numla_engine *e);
int numla_engine_num_threads(const numla_engine *e);
/* The kernel level the engine runs at. */
numla_isa numla_engine_isa(const numla_engine *e);
/* Bytes of this rank's weights / of its KV pool. */
size_t numla_engine_weight_bytes(const numla_engine *e);
size_t numla_engine_kv_bytes(const numla_engine *e);
/* This rank's model (its linear_s / linear_flops counters; read between steps); NULL for
 * deepseek_v4, which runs its own forward (engine/model/model_v4.h). */
const numla_model *numla_engine_model(const numla_engine *e);
/* A layer hook on this rank's model (numla_model_set_layer_hook; e.g. to read the routing with
 * numla_model_last_routes); nothing for deepseek_v4. Set between steps. Not collective. */
void numla_engine_set_layer_hook(numla_engine *e, numla_model_layer_hook fn, void *ctx);
/* This rank's DeepSeek-V4 model (engine/model/model_v4.h); NULL for the MLA models. */
const numla_v4_model *numla_engine_v4_model(const numla_engine *e);
/* DeepSeek-V4: give this rank's sequence that steps name by their first block block_table[0]
 * (steps without seq_ids, as the benchmarks send) n tokens of filled cache
 * (numla_v4_seq_fill, its entries in the blocks of block_table, ceil(n / block_size) of them);
 * the next step continues it at position n. Local (each rank its own). */
numla_status numla_engine_v4_fill(numla_engine *e, const int32_t *block_table, int64_t n);

/* ---- per-rank timing (docs/design.md §7: step time split into compute and communication) ---- */
typedef struct numla_engine_stats {
    int64_t steps;            /* steps run by this rank */
    int64_t tokens;           /* tokens of those steps */
    double step_s;            /* wall time of those steps (plan receive to logits sent) */
    double bcast_s;           /* plan broadcast (on workers: includes waiting for rank 0) */
    double reduce_s;          /* numla_model_reduce allreduces (2 per layer) */
    double gather_s;          /* logits gather */
    int64_t reduces;          /* allreduce calls */
} numla_engine_stats;
/* compute = step_s - reduce_s - gather_s (bcast is outside step_s on workers: idle time). */

/* This rank's counters since creation or the last reset. Local. */
void numla_engine_stats_get(const numla_engine *e, numla_engine_stats *out);
void numla_engine_stats_reset(numla_engine *e);
/* Rank 0 only: every rank's counters into all[size] (a collective run through the worker
 * loop, like a step). */
numla_status numla_engine_stats_collect(numla_engine *e, numla_engine_stats *all);
/* Rank 0 only: reset every rank's counters (collective through the worker loop). */
numla_status numla_engine_stats_reset_all(numla_engine *e);

#endif
