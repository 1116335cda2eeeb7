/* engine/parallel/sharded_engine.c — the collective engine (engine.h): the model sharded over the
 * ranks. Shard loading per rank, the step-plan broadcast, the worker loop, the logits gather,
 * and per-rank compute/communication counters. Owns the engine's weights, model scratch and KV
 * cache; borrows the communicator. Where a rank runs and where its KV pool lives (binding, NUMA
 * sizing): placement.c.
 *
 * Wire protocol (all broadcasts from rank 0, in this order):
 *   header  int64[9] {op, num_seqs, num_tokens, max_blocks_per_seq, num_logit_rows, step_no,
 *           has seq_ids (0/1), num_released, release_all (0/1)}
 *   payload (ops STEP, MTP) one byte buffer: slots (T int64) | seq_ids (B int64, when given) |
 *           released (N int64) | tokens (T) | positions (T) | query_start_loc (B+1) |
 *           seq_lens (B) | block_tables (B·MB) | logit_rows (R), int32, and for MTP then
 *           hidden_rows (T) int32
 * then the model's 2 allreduces per layer and one gather of the logits' vocab slices.
 */
#include "engine/parallel/engine.h"

#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "engine/formats/gguf_deepseek4.h"
#include "engine/formats/safetensors.h"
#include "engine/model/model_v4.h"
#include "engine/model/weights.h"
#include "engine/parallel/engine_testing.h"
#include "engine/parallel/placement_internal.h"
#include "kernels/isa.h"

enum {
    ENGINE_OP_STEP = 1,
    ENGINE_OP_STOP = 2,
    ENGINE_OP_STATS = 3,
    ENGINE_OP_RESET = 4,
    ENGINE_OP_MTP = 5,    /* a step of the MTP layer (numla_engine_mtp_step) */
};
enum { ENGINE_HDR = 9 };

struct numla_engine {
    numla_comm *comm;                 /* borrowed */
    int rank, size;
    int threads;
    numla_isa isa;                    /* the kernels' level */
    int stopped;
    numla_model_config cfg;
    numla_model_weights *w;           /* MLA models */
    numla_model *m;
    numla_v4_model *v4;               /* deepseek_v4 instead (w, m NULL): its own forward */
    numla_v4_seqs *v4_seqs;           /* and the sequences this rank holds (model_v4.h) */
    numla_kv_cache *kv;
    numla_engine_stats st;
    double reduce_base_s;             /* the model's reduce_s at the last reset */
    int64_t reduces_base;
    int64_t step_no;                  /* steps since creation (for the test faults) */
    int64_t die_at_step;              /* -1: never (numla_engine_testing_set_faults: SIGKILL) */
    int64_t fail_at_step;             /* -1: never (numla_engine_testing_set_faults: an error) */

    unsigned char *plan_buf;          /* received / packed plan */
    size_t plan_cap;
    float *lg_local;                  /* (R, vocab_count) this rank's logits slice */
    float *lg_all;                    /* (size · R · slices) rank 0: gathered, rank-major */
    size_t lg_local_cap, lg_all_cap;  /* in floats */
    size_t *counts, *displs;          /* (size) rank 0: gather layout in floats */
    int64_t *vbegin, *vcount;         /* (size) every rank's vocab slice */
};

static double wtime(void) { return omp_get_wtime(); }

/* Faults the tests inject (tests/support/numla_faulty.c); none in build/numla. */
static numla_engine_faults engine_faults_ = {.rank = 1, .die_at_step = -1, .fail_at_step = -1};

void numla_engine_testing_set_faults(const numla_engine_faults *f) { engine_faults_ = *f; }

numla_engine_options numla_engine_options_default(void)
{
    return (numla_engine_options){
        .kv_dtype = NUMLA_DTYPE_BF16,
        .index_dtype = -1,
        .bind = 1,
        .isa = numla_isa_best(),
        .kernels = numla_model_options_default(numla_isa_best()),
        .weights = numla_weights_options_default(),
    };
}

/* Every rank learns whether any rank failed (sum of 0/1 flags; exact in fp32). */
/* numla_model_reduce_fn over the engine's communicator: the model stays free of MPI. Collective. */
static numla_status engine_allreduce(void *ctx, float *buf, int64_t count)
{
    return numla_comm_allreduce_sum_f32((numla_comm *)ctx, buf, (size_t)count);
}

static int any_failed(numla_comm *c, int failed)
{
    float f = failed ? 1.0f : 0.0f;
    if (numla_comm_allreduce_sum_f32_path(c, &f, 1, NUMLA_COMM_ALLREDUCE_PATH_MPI) !=
        NUMLA_STATUS_OK)
        return 1;
    return f > 0.0f;
}

/* DeepSeek-V4 (docs/design.md §5.9): its own loader and forward; the block pool only does the
 * scheduler's accounting (its rows stay untouched), the cache is each sequence's. */
static numla_status engine_load_v4(numla_engine *e, const char *model_dir,
                                   const numla_engine_options *o)
{
    if (o->weights.format >= 0)
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "engine: --weights is not supported with "
                   "model_type deepseek_v4 (its weights run as the checkpoint stores them: "
                   "bf16/fp32, or FP8 + FP4)");
    numla_safetensors_model *st = NULL;
    numla_gguf *g = NULL; /* a GGUF deepseek4 file: its tensors under DeepSeek's names */
    numla_gguf *mg = NULL; /* with it, the MTP layer's own file */
    if (numla_model_path_is_gguf(model_dir)) {
        NUMLA_CHECK(numla_gguf_open(model_dir, &g));
        numla_status s = o->mtp && o->mtp_model ? numla_gguf_open(o->mtp_model, &mg)
                                                : NUMLA_STATUS_OK;
        if (s == NUMLA_STATUS_OK)
            s = mg ? numla_gguf_deepseek4_view_mtp(g, mg, &st) : numla_gguf_deepseek4_view(g, &st);
        if (s != NUMLA_STATUS_OK) {
            numla_gguf_close(&mg);
            numla_gguf_close(&g);
            NUMLA_CHECK(s);
        }
    } else {
        NUMLA_CHECK(numla_safetensors_open(model_dir, &st));
    }
    numla_status s = numla_v4_model_load_shard(&e->cfg, st, o->isa, &o->weights, e->rank, e->size,
                                               &e->v4);
    numla_safetensors_close(&st);
    numla_gguf_close(&mg);
    numla_gguf_close(&g);
    NUMLA_CHECK(s);
    if (e->size > 1)
        numla_v4_model_set_reduce(e->v4, engine_allreduce, e->comm);
    /* the linears' levels by the same options as the MLA path's model (NUMLA_LINEAR_AMX, the
     * uarch rule, exact activations) */
    numla_model_options mo = o->kernels;
    mo.isa = o->isa;
    numla_v4_model_set_options(e->v4, &mo);
    /* its window rows and compressed entries in the KV dtype (--kv-dtype: bf16 or fp32) */
    NUMLA_CHECK(numla_v4_model_set_cache_dtype(e->v4, o->kv_dtype));
    NUMLA_CHECK(numla_v4_seqs_create(e->v4, &e->v4_seqs));
    return NUMLA_STATUS_OK;
}

static const numla_shard *engine_shard_of(const numla_engine *e)
{
    return e->v4 ? numla_v4_model_shard(e->v4) : &e->w->shard;
}

static numla_status engine_load(numla_engine *e, const char *model_dir,
                                const numla_engine_options *o)
{
    const numla_isa isa = o->isa;
    if ((unsigned)isa >= NUMLA_ISA_COUNT || !numla_isa_supported(isa))
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "engine: kernel level %s is not supported here",
                   numla_isa_name(isa));
    e->isa = isa;
    if (o->mtp && o->mtp_model) { /* a deepseek4 GGUF file and its MTP layer's file */
        if (!numla_model_path_is_gguf(model_dir))
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "engine: an MTP file (%s) goes with a GGUF "
                       "model; %s is not one", o->mtp_model, model_dir);
        NUMLA_CHECK(numla_model_config_load_gguf_mtp(model_dir, o->mtp_model, &e->cfg));
    } else {
        NUMLA_CHECK(numla_model_config_load(model_dir, &e->cfg));
    }
    if (o->mtp && !o->mtp_model && e->cfg.v4.enabled && e->cfg.v4.num_nextn_predict_layers < 1 &&
        numla_model_path_is_gguf(model_dir))
        NUMLA_FAIL(NUMLA_STATUS_UNSUPPORTED, "engine: %s: --speculative mtp on a deepseek4 GGUF "
                   "file: llama.cpp's converter leaves DeepSeek-V4's MTP layer out of the model's "
                   "file and writes it as a file of its own (convert_hf_to_gguf.py --mtp, "
                   "mtp-*.gguf); give that file with --mtp-model FILE", model_dir);
    if (o->mtp) /* the KV pool and the weights then have the MTP layer too (deepseek_v4: its
                 * loader reads mtp.0.*) */
        NUMLA_CHECK(numla_model_config_enable_mtp(&e->cfg));
    if (e->size > e->cfg.num_attention_heads)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "engine: %d ranks but the model has only %lld "
                   "attention heads (head parallelism needs ranks <= heads)", e->size,
                   (long long)e->cfg.num_attention_heads);
    if (e->cfg.v4.enabled) {
        NUMLA_CHECK(engine_load_v4(e, model_dir, o));
    } else {
        /* a safetensors directory or a GGUF file; the shard lives in owned memory after
         * (docs/design.md §3) */
        NUMLA_CHECK(numla_weights_load_path(&e->cfg, model_dir, e->rank, e->size, isa,
                                            &o->weights, &e->w));
        numla_model_options mo = o->kernels;
        mo.isa = isa;
        mo.num_threads = e->threads;
        NUMLA_CHECK(numla_model_create(e->w, &mo, &e->m));
        if (e->size > 1)
            numla_model_set_reduce(e->m, engine_allreduce, e->comm);
    }

    e->vbegin = calloc((size_t)e->size, sizeof *e->vbegin);
    e->vcount = calloc((size_t)e->size, sizeof *e->vcount);
    e->counts = calloc((size_t)e->size, sizeof *e->counts);
    e->displs = calloc((size_t)e->size, sizeof *e->displs);
    if (!e->vbegin || !e->vcount || !e->counts || !e->displs)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "engine: no memory");
    for (int q = 0; q < e->size; q++)
        numla_shard_range(e->cfg.vocab_size, q, e->size, &e->vbegin[q], &e->vcount[q]);
    return NUMLA_STATUS_OK;
}

numla_status numla_engine_create(numla_comm *comm, const char *model_dir,
                                 const numla_engine_options *opts, numla_engine **out)
{
    *out = NULL;
    numla_engine_options o = opts ? *opts : numla_engine_options_default();
    numla_engine *e = calloc(1, sizeof *e);
    int failed = 0;
    char msg[1024] = "";
    numla_status s = NUMLA_STATUS_OK;
    if (!e) {
        failed = 1;
        s = NUMLA_STATUS_NO_MEMORY;
        snprintf(msg, sizeof msg, "engine: no memory");
    } else {
        e->comm = comm;
        e->rank = numla_comm_rank(comm);
        e->size = numla_comm_size(comm);
        /* failure injection for the tests (tests/mpi/engine_run.sh) */
        e->die_at_step = e->fail_at_step = -1;
        if (e->rank == engine_faults_.rank) {
            e->die_at_step = engine_faults_.die_at_step;
            e->fail_at_step = engine_faults_.fail_at_step;
        }
        if (o.bind)
            numla_placement_bind(e->rank, e->size, &o);
        if (o.num_threads > 0)
            omp_set_num_threads(o.num_threads);
        e->threads = omp_get_max_threads();
        s = engine_load(e, model_dir, &o);
        if (s != NUMLA_STATUS_OK) {
            failed = 1;
            snprintf(msg, sizeof msg, "%s", numla_error_message());
            fprintf(stderr, "numla: rank %d: %s\n%s", e->rank, msg, numla_error_trace());
        }
        /* every rank takes part in the KV sizing, even one that failed (it offers 0 blocks) */
        numla_status ks = numla_placement_kv_create(comm, &e->cfg, &o, &failed, &e->kv);
        if (ks != NUMLA_STATUS_OK && !failed) {
            failed = 1;
            s = ks;
            snprintf(msg, sizeof msg, "%s", numla_error_message());
            fprintf(stderr, "numla: rank %d: %s\n%s", e->rank, msg, numla_error_trace());
        }
        if (!failed && e->v4) {
            numla_v4_seqs_set_block_size(e->v4_seqs, e->kv->block_size);
            /* the sequences' compressed entries in the pool's blocks */
            numla_v4_pool *pool = malloc(sizeof *pool);
            s = pool ? numla_kv_cache_v4_pool(e->kv, pool) : NUMLA_STATUS_NO_MEMORY;
            if (s == NUMLA_STATUS_OK)
                s = numla_v4_seqs_use_pool(e->v4_seqs, pool);
            free(pool);
            if (s != NUMLA_STATUS_OK) {
                failed = 1;
                snprintf(msg, sizeof msg, "%s", numla_error_message());
            }
        }
        if (!failed && e->v4 && o.prefix_cache &&
            (s = numla_v4_seqs_enable_prefix(e->v4_seqs, e->kv->block_size)) != NUMLA_STATUS_OK) {
            failed = 1;
            snprintf(msg, sizeof msg, "%s", numla_error_message());
        }
    }
    if (any_failed(comm, failed)) {
        numla_engine_destroy(&e);
        if (failed)
            return numla_error_set(s, __FILE__, __LINE__, __func__, "%s", msg);
        NUMLA_FAIL(NUMLA_STATUS_MPI, "engine: another rank failed to create the engine (see "
                   "its message)");
    }
    *out = e;
    return NUMLA_STATUS_OK;
}

void numla_engine_destroy(numla_engine **pe)
{
    if (!pe || !*pe)
        return;
    numla_engine *e = *pe;
    if (e->rank == 0 && !e->stopped && (e->m || e->v4))
        (void)numla_engine_stop(e);
    numla_model_destroy(&e->m);
    numla_v4_seqs_destroy(&e->v4_seqs);
    numla_v4_model_destroy(&e->v4);
    numla_kv_cache_destroy(&e->kv);
    numla_weights_destroy(&e->w);
    free(e->plan_buf);
    free(e->lg_local);
    free(e->lg_all);
    free(e->counts);
    free(e->displs);
    free(e->vbegin);
    free(e->vcount);
    free(e);
    *pe = NULL;
}

/* ---- plan packing ---- */

static size_t plan_bytes(const int64_t *h)
{
    const int64_t B = h[1], T = h[2], MB = h[3], R = h[4];
    return (size_t)(T + (h[6] ? B : 0) + h[7]) * 8 +
           (size_t)(2 * T + (B + 1) + B + B * MB + R) * 4;
}

/* An op's payload: the plan, and an MTP step's hidden rows after it. */
static size_t op_bytes(const int64_t *h)
{
    return plan_bytes(h) + (h[0] == ENGINE_OP_MTP ? (size_t)h[2] * 4 : 0);
}

static numla_status plan_reserve(numla_engine *e, size_t bytes)
{
    if (bytes <= e->plan_cap)
        return NUMLA_STATUS_OK;
    unsigned char *n = realloc(e->plan_buf, bytes);
    if (!n)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "engine: no memory for a %zu-byte step plan", bytes);
    e->plan_buf = n;
    e->plan_cap = bytes;
    return NUMLA_STATUS_OK;
}

/* Point a numla_step at the fields of e->plan_buf (layout: file comment). */
static void plan_view(numla_engine *e, const int64_t *h, numla_step *st)
{
    int64_t B = h[1], T = h[2], MB = h[3], R = h[4];
    unsigned char *p = e->plan_buf;
    const int64_t *q64 = (const int64_t *)p + T;
    st->seq_ids = h[6] ? q64 : NULL;
    q64 += h[6] ? B : 0;
    st->num_released = (int32_t)h[7];
    st->released = q64;
    st->release_all = (int32_t)h[8];
    st->num_seqs = (int32_t)B;
    st->num_tokens = (int32_t)T;
    st->max_blocks_per_seq = (int32_t)MB;
    st->num_logit_rows = (int32_t)R;
    st->slots = (const int64_t *)p;
    const int32_t *q = (const int32_t *)(q64 + h[7]);
    st->tokens = q;
    q += T;
    st->positions = q;
    q += T;
    st->query_start_loc = q;
    q += B + 1;
    st->seq_lens = q;
    q += B;
    st->block_tables = q;
    q += B * MB;
    st->logit_rows = q;
}

static numla_status plan_pack(numla_engine *e, const numla_step *st, const int64_t *h,
                              const int32_t *hidden_rows)
{
    const size_t B = (size_t)st->num_seqs, T = (size_t)st->num_tokens;
    const size_t MB = (size_t)st->max_blocks_per_seq, R = (size_t)st->num_logit_rows;
    NUMLA_CHECK(plan_reserve(e, op_bytes(h)));
    unsigned char *p = e->plan_buf;
#define ENGINE_PUT(src, n, es)                      \
    do {                                            \
        if ((n) > 0)                                \
            memcpy(p, (src), (size_t)(n) * (es));   \
        p += (size_t)(n) * (es);                    \
    } while (0)
    ENGINE_PUT(st->slots, T, 8);
    if (st->seq_ids)
        ENGINE_PUT(st->seq_ids, B, 8);
    ENGINE_PUT(st->released, (size_t)st->num_released, 8);
    ENGINE_PUT(st->tokens, T, 4);
    ENGINE_PUT(st->positions, T, 4);
    ENGINE_PUT(st->query_start_loc, B + 1, 4);
    ENGINE_PUT(st->seq_lens, B, 4);
    ENGINE_PUT(st->block_tables, B * MB, 4);
    ENGINE_PUT(st->logit_rows, R, 4);
    if (hidden_rows)
        ENGINE_PUT(hidden_rows, T, 4);
#undef ENGINE_PUT
    return NUMLA_STATUS_OK;
}

/* Rank 0, before anything is broadcast: a plan the ranks could not all run is an error the
 * caller gets back (the job goes on). */
static numla_status plan_check(const numla_engine *e, const numla_step *st,
                               const int32_t *hidden_rows)
{
    NUMLA_CHECK(numla_model_step_check(&e->cfg, e->kv, st));
    if (e->v4 && hidden_rows)
        NUMLA_CHECK(numla_v4_step_mtp_check(e->v4_seqs, st, hidden_rows));
    else if (e->v4)
        NUMLA_CHECK(numla_v4_step_check(e->v4_seqs, st));
    return NUMLA_STATUS_OK;
}

/* ---- the step every rank runs ---- */

static numla_status grow_f32(float **p, size_t *cap, size_t n)
{
    if (n <= *cap)
        return NUMLA_STATUS_OK;
    float *q = realloc(*p, (n ? n : 1) * sizeof *q);
    if (!q)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "engine: no memory for %zu logits", n);
    *p = q;
    *cap = n;
    return NUMLA_STATUS_OK;
}

/* Forward on this rank's shard (the MTP layer's when hidden_rows is not NULL), then the logits'
 * vocab slices to rank 0 in (R, vocab) order. */
static numla_status engine_run(numla_engine *e, const numla_step *st, const int32_t *hidden_rows,
                               float *logits)
{
    const int64_t R = st->num_logit_rows, V = e->cfg.vocab_size;
    const int64_t vr = engine_shard_of(e)->vocab_count;
    if (e->die_at_step >= 0 && e->step_no == e->die_at_step) {
        fprintf(stderr, "numla: rank %d: test fault: killing myself at step %lld\n", e->rank,
                (long long)e->die_at_step);
        fflush(stderr);
        raise(SIGKILL);
    }
    if (e->fail_at_step >= 0 && e->step_no == e->fail_at_step)
        NUMLA_FAIL(NUMLA_STATUS_INTERNAL, "engine: test fault: injected failure at step %lld on "
                   "rank %d", (long long)e->fail_at_step, e->rank);
    e->step_no++;
    const double t0 = wtime();
    float *mine = logits;
    if (e->size > 1) {
        NUMLA_CHECK(grow_f32(&e->lg_local, &e->lg_local_cap, (size_t)(R * vr)));
        mine = e->lg_local;
    }
    if (hidden_rows && e->v4)
        NUMLA_CHECK(numla_v4_step_mtp(e->v4_seqs, st, hidden_rows, mine));
    else if (hidden_rows)
        NUMLA_CHECK(numla_model_mtp_forward(e->m, e->kv, st, hidden_rows, mine));
    else if (e->v4)
        NUMLA_CHECK(numla_v4_step_forward(e->v4_seqs, st, mine));
    else
        NUMLA_CHECK(numla_model_forward(e->m, e->kv, st, mine));
    if (e->size > 1 && R > 0) {
        const double g0 = wtime();
        float *dst = logits;
        if (e->rank == 0) {
            for (int q = 0; q < e->size; q++) {
                e->counts[q] = (size_t)(R * e->vcount[q]);
                e->displs[q] = (size_t)(R * e->vbegin[q]);
            }
            if (R > 1) {
                NUMLA_CHECK(grow_f32(&e->lg_all, &e->lg_all_cap, (size_t)(R * V)));
                dst = e->lg_all;
            }
        }
        NUMLA_CHECK(numla_comm_gatherv_f32(e->comm, mine, (size_t)(R * vr), dst, e->counts,
                                           e->displs, 0));
        if (e->rank == 0 && R > 1) {
            /* rank-major (rank q: (R, vcount[q]) at R·vbegin[q]) → (R, V) */
            for (int q = 0; q < e->size; q++)
                for (int64_t r = 0; r < R; r++)
                    memcpy(logits + r * V + e->vbegin[q],
                           e->lg_all + R * e->vbegin[q] + r * e->vcount[q],
                           (size_t)e->vcount[q] * sizeof(float));
        }
        e->st.gather_s += wtime() - g0;
    }
    e->st.steps++;
    e->st.tokens += st->num_tokens;
    e->st.step_s += wtime() - t0;
    return NUMLA_STATUS_OK;
}

static numla_status bcast_header(numla_engine *e, int64_t *h)
{
    const double t0 = wtime();
    NUMLA_CHECK(numla_comm_bcast(e->comm, h, ENGINE_HDR * sizeof *h, 0));
    e->st.bcast_s += wtime() - t0;
    return NUMLA_STATUS_OK;
}

/* The model's counters (deepseek_v4 keeps none: zeros). */
static void engine_model_stats(const numla_engine *e, numla_model_stats *ms)
{
    if (e->m)
        numla_model_get_stats(e->m, ms);
    else
        memset(ms, 0, sizeof *ms);
}

static void sync_reduce_stats(numla_engine *e)
{
    numla_model_stats ms;
    engine_model_stats(e, &ms);
    e->st.reduce_s = ms.reduce_s - e->reduce_base_s;
    e->st.reduces = ms.reduces - e->reduces_base;
}

static void stats_reset(numla_engine *e)
{
    numla_model_stats ms;
    engine_model_stats(e, &ms);
    memset(&e->st, 0, sizeof e->st);
    e->reduce_base_s = ms.reduce_s;
    e->reduces_base = ms.reduces;
}

static numla_status stats_gather(numla_engine *e, numla_engine_stats *all)
{
    sync_reduce_stats(e);
    NUMLA_CHECK(numla_comm_gather(e->comm, &e->st, sizeof e->st, all, 0));
    return NUMLA_STATUS_OK;
}

_Noreturn static void engine_abort(numla_engine *e, numla_status s)
{
    numla_comm_abort(e->comm, s, "%s\n%s", numla_error_message(), numla_error_trace());
}

/* Rank 0: check, broadcast and run a main step (hidden_rows NULL) or an MTP step. */
static numla_status engine_step_op(numla_engine *e, const numla_step *plan,
                                   const int32_t *hidden_rows, float *logits)
{
    if (e->rank != 0)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "engine: numla_engine_step on rank %d (rank 0 "
                   "drives the steps; the others run numla_engine_worker_loop)", e->rank);
    if (e->stopped)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "engine: step after numla_engine_stop");
    NUMLA_CHECK(plan_check(e, plan, hidden_rows));
    if (hidden_rows && e->m)
        NUMLA_CHECK(numla_model_mtp_check(e->m, plan, hidden_rows));
    if (plan->num_logit_rows > 0 && !logits)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "engine: no logits buffer");
    numla_status s = NUMLA_STATUS_OK;
    if (e->size > 1) {
        int64_t h[ENGINE_HDR] = {hidden_rows ? ENGINE_OP_MTP : ENGINE_OP_STEP, plan->num_seqs,
                                 plan->num_tokens, plan->max_blocks_per_seq,
                                 plan->num_logit_rows, e->step_no, plan->seq_ids != NULL,
                                 plan->num_released, plan->release_all != 0};
        NUMLA_CHECK(plan_pack(e, plan, h, hidden_rows));
        const double t0 = wtime();
        if ((s = numla_comm_bcast(e->comm, h, sizeof h, 0)) != NUMLA_STATUS_OK ||
            (s = numla_comm_bcast(e->comm, e->plan_buf, op_bytes(h), 0)) != NUMLA_STATUS_OK)
            engine_abort(e, s);
        e->st.bcast_s += wtime() - t0;
    }
    if ((s = engine_run(e, plan, hidden_rows, logits)) != NUMLA_STATUS_OK)
        engine_abort(e, s);
    return NUMLA_STATUS_OK;
}

numla_status numla_engine_step(numla_engine *e, const numla_step *plan, float *logits)
{
    return engine_step_op(e, plan, NULL, logits);
}

numla_status numla_engine_mtp_step(numla_engine *e, const numla_step *plan,
                                   const int32_t *hidden_rows, float *logits)
{
    if (!hidden_rows)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "engine: an MTP step without hidden rows");
    return engine_step_op(e, plan, hidden_rows, logits);
}

numla_status numla_engine_worker_loop(numla_engine *e)
{
    if (e->rank == 0)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "engine: rank 0 drives the steps; it does not run "
                   "the worker loop");
    numla_status s;
    for (;;) {
        int64_t h[ENGINE_HDR];
        if ((s = bcast_header(e, h)) != NUMLA_STATUS_OK)
            engine_abort(e, s);
        switch (h[0]) {
        case ENGINE_OP_STEP:
        case ENGINE_OP_MTP: {
            const double t0 = wtime();
            if ((s = plan_reserve(e, op_bytes(h))) != NUMLA_STATUS_OK ||
                (s = numla_comm_bcast(e->comm, e->plan_buf, op_bytes(h), 0)) != NUMLA_STATUS_OK)
                engine_abort(e, s);
            e->st.bcast_s += wtime() - t0;
            numla_step st;
            plan_view(e, h, &st);
            const int32_t *hidden_rows =
                h[0] == ENGINE_OP_MTP ? (const int32_t *)(e->plan_buf + plan_bytes(h)) : NULL;
            if ((s = engine_run(e, &st, hidden_rows, NULL)) != NUMLA_STATUS_OK)
                engine_abort(e, s);
            break;
        }
        case ENGINE_OP_STATS:
            if ((s = stats_gather(e, NULL)) != NUMLA_STATUS_OK)
                engine_abort(e, s);
            break;
        case ENGINE_OP_RESET:
            stats_reset(e);
            break;
        case ENGINE_OP_STOP:
            e->stopped = 1;
            return NUMLA_STATUS_OK;
        default:
            numla_comm_abort(e->comm, NUMLA_STATUS_INTERNAL, "engine: unknown op %lld from "
                             "rank 0", (long long)h[0]);
        }
    }
}

static numla_status send_op(numla_engine *e, int64_t op)
{
    if (e->rank != 0)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "engine: only rank 0 sends engine commands");
    if (e->stopped)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "engine: already stopped");
    if (e->size == 1)
        return NUMLA_STATUS_OK;
    int64_t h[ENGINE_HDR] = {op};
    numla_status s = numla_comm_bcast(e->comm, h, sizeof h, 0);
    if (s != NUMLA_STATUS_OK)
        engine_abort(e, s);
    return NUMLA_STATUS_OK;
}

numla_status numla_engine_stop(numla_engine *e)
{
    if (e->rank == 0 && e->stopped)
        return NUMLA_STATUS_OK;
    NUMLA_CHECK(send_op(e, ENGINE_OP_STOP));
    e->stopped = 1;
    return NUMLA_STATUS_OK;
}

numla_status numla_engine_stats_collect(numla_engine *e, numla_engine_stats *all)
{
    NUMLA_CHECK(send_op(e, ENGINE_OP_STATS));
    if (e->size == 1) {
        sync_reduce_stats(e);
        all[0] = e->st;
        return NUMLA_STATUS_OK;
    }
    numla_status s = stats_gather(e, all);
    if (s != NUMLA_STATUS_OK)
        engine_abort(e, s);
    return NUMLA_STATUS_OK;
}

numla_status numla_engine_stats_reset_all(numla_engine *e)
{
    NUMLA_CHECK(send_op(e, ENGINE_OP_RESET));
    stats_reset(e);
    return NUMLA_STATUS_OK;
}

void numla_engine_stats_get(const numla_engine *e, numla_engine_stats *out)
{
    numla_model_stats ms;
    engine_model_stats(e, &ms);
    *out = e->st;
    out->reduce_s = ms.reduce_s - e->reduce_base_s;
    out->reduces = ms.reduces - e->reduces_base;
}

void numla_engine_stats_reset(numla_engine *e) { stats_reset(e); }

int numla_engine_rank(const numla_engine *e) { return e->rank; }
int numla_engine_size(const numla_engine *e) { return e->size; }
const numla_model_config *numla_engine_config(const numla_engine *e) { return &e->cfg; }
const numla_shard *numla_engine_shard(const numla_engine *e) { return engine_shard_of(e); }
numla_kv_cache *numla_engine_kv_cache(numla_engine *e) { return e->kv; }
int numla_engine_num_threads(const numla_engine *e) { return e->threads; }
numla_isa numla_engine_isa(const numla_engine *e) { return e->isa; }
size_t numla_engine_weight_bytes(const numla_engine *e)
{
    return e->v4 ? numla_v4_model_weight_bytes(e->v4) : e->w->loaded_bytes;
}
size_t numla_engine_kv_bytes(const numla_engine *e)
{
    /* deepseek_v4's pool has no rows: what its blocks stand for */
    return e->v4 ? (size_t)e->kv->num_blocks * e->kv->block_bytes : e->kv->data_bytes;
}
const numla_model *numla_engine_model(const numla_engine *e) { return e->m; }
void numla_engine_set_layer_hook(numla_engine *e, numla_model_layer_hook fn, void *ctx)
{
    if (e->m)
        numla_model_set_layer_hook(e->m, fn, ctx);
}
const numla_v4_model *numla_engine_v4_model(const numla_engine *e) { return e->v4; }

numla_status numla_engine_v4_fill(numla_engine *e, const int32_t *block_table, int64_t n)
{
    if (!e || !e->v4 || !block_table)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "numla_engine_v4_fill: not a deepseek_v4 engine");
    NUMLA_CHECK(numla_v4_seqs_fill(e->v4_seqs, INT64_MIN + block_table[0], block_table, n));
    return NUMLA_STATUS_OK;
}
