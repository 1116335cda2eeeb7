/* engine/parallel/placement.c — where a rank runs and where its memory comes from
 * (placement_internal.h): the launch/ binding plan applied to this rank's threads, and the KV
 * pool sized from the free memory of the NUMA node each rank draws on. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_ISSET */
#include "engine/parallel/placement_internal.h"

#include <numa.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "launch/bind.h"
#include "launch/plan.h"
#include "launch/topo.h"

/* Apply the launch/ plan for this rank (docs/design.md §1) when one can be made for this job on
 * this machine; otherwise say why once and run as placed by mpirun. */
void numla_placement_bind(int rank, int size, const numla_engine_options *o)
{
    numla_topo *t = NULL;
    numla_launch_plan *p = NULL;
    numla_launch_opts lo = o->launch ? *o->launch : (numla_launch_opts){0};
    lo.ranks = size;
    numla_status s = numla_topo_load(NULL, NULL, &t);
    if (s == NUMLA_STATUS_OK)
        s = numla_launch_plan_make(t, &lo, &p);
    if (s == NUMLA_STATUS_OK)
        s = numla_bind_apply(t, p, rank, 0);
    /* Only a job started by numla-launch (NUMLA_PLAN set) expects a binding; otherwise the
     * reason is a debug note (e.g. tests oversubscribing one node). */
    if (s != NUMLA_STATUS_OK && rank == 0)
        numla_log(o->launch ? NUMLA_LOG_LEVEL_WARN : NUMLA_LOG_LEVEL_DEBUG,
                  "engine: no binding applied (%s); ranks run where mpirun placed them",
                  numla_error_message());
    numla_launch_plan_destroy(&p);
    numla_topo_destroy(&t);
}

/* Where a rank draws its memory from: its host, and the NUMA node its allowed CPUs all sit on
 * (-1: they span several nodes, or libnuma is unavailable: the whole machine). */
typedef struct engine_kv_site {
    char host[64];
    int32_t node;
    int32_t failed;           /* this rank failed before the sizing: it offers nothing */
    int64_t free_bytes;       /* free memory of that node (or machine) after the weights */
} engine_kv_site;

static int engine_kv_node(void)
{
    cpu_set_t set;
    if (numa_available() < 0 || sched_getaffinity(0, sizeof set, &set) != 0)
        return -1;
    int node = -1;
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &set))
            continue;
        int n = numa_node_of_cpu(c);
        if (n < 0 || (node >= 0 && n != node))
            return -1;
        node = n;
    }
    return node;
}

/* Ranks drawing on the memory rank q draws on: same host, and the same node (a rank not held
 * to one node draws on all of them). */
static int engine_kv_sharers(const engine_kv_site *all, int size, int q)
{
    int n = 0;
    for (int r = 0; r < size; r++)
        n += !strcmp(all[r].host, all[q].host) &&
             (all[r].node == all[q].node || all[r].node < 0 || all[q].node < 0);
    return n;
}

/* Rank 0's decision on a pool sized from memory, broadcast to every rank. */
typedef struct engine_kv_verdict {
    int64_t num_blocks;       /* > 0: every rank's pool; 0: see the fields below */
    int32_t any_failed;       /* a rank failed before the sizing */
    int32_t rank;             /* the rank whose node decided (the smallest share, or too small) */
    int32_t node, sharers;    /* that rank's node (-1: machine) and the ranks drawing on it */
    int64_t free_bytes;       /* that node's free memory */
    int64_t share_bytes;      /* the pool bytes each of its ranks may take */
} engine_kv_verdict;

static void engine_kv_decide(const numla_model_config *cfg, int size,
                             const numla_engine_options *o, const engine_kv_site *all,
                             size_t blk, int32_t bs, int32_t seqb, engine_kv_verdict *v)
{
    /* (a sequence's own blocks, seqb, count as that many more tokens of context) */
    const int64_t ctx = (o->max_context > 0 && o->max_context < cfg->max_position_embeddings
                             ? o->max_context : cfg->max_position_embeddings) +
                        (int64_t)seqb * bs;
    *v = (engine_kv_verdict){.num_blocks = INT64_MAX, .rank = -1};
    for (int q = 0; q < size; q++) {
        if (all[q].failed) {
            *v = (engine_kv_verdict){.any_failed = 1, .rank = q};
            return;
        }
        const int n = engine_kv_sharers(all, size, q);
        int64_t c;
        size_t share;
        if (o->kv_memory_bytes > 0) {
            /* an explicit size: all the ranks on the node must fit in its free memory */
            share = (double)o->kv_memory_bytes * n <= (double)all[q].free_bytes
                        ? (size_t)o->kv_memory_bytes : 0;
            c = share ? numla_kv_cache_pool_blocks(share, blk, bs, 0, 0) : 0;
        } else {
            share = numla_kv_cache_share_bytes((size_t)all[q].free_bytes,
                                               o->kv_memory_fraction, n);
            c = numla_kv_cache_pool_blocks(share, blk, bs, o->max_seqs, ctx);
        }
        if (c < v->num_blocks) {
            *v = (engine_kv_verdict){.num_blocks = c, .rank = q, .node = all[q].node,
                                     .sharers = n, .free_bytes = all[q].free_bytes,
                                     .share_bytes = (int64_t)share};
            if (c == 0)
                return;
        }
    }
}

/* The KV pool, after the weights (so "free memory" excludes them). Collective: when sized from
 * memory, the free memory of each rank's node is divided among the ranks that draw on it (the
 * ranks of the same host bound to that node, and those bound to none), and every rank takes
 * the smallest count any rank can afford (rank 0 decides the block ids, so the pools must have
 * the same geometry). An explicit size (kv_memory_bytes) that the ranks of a node cannot all
 * have is an error, as is a share too small for one block; rank 0 reports it. */
numla_status numla_placement_kv_create(numla_comm *comm, const numla_model_config *cfg,
                                       const numla_engine_options *o, int *failed,
                                       numla_kv_cache **out)
{
    const int rank = numla_comm_rank(comm), size = numla_comm_size(comm);
    int32_t bs = o->block_size > 0 ? o->block_size : numla_kv_default_block_size(cfg);
    int64_t nb = o->num_blocks;
    const numla_dtype idt = o->index_dtype >= 0 ? (numla_dtype)o->index_dtype : o->kv_dtype;
    size_t blk = 0, v4seq = 0;
    int32_t seqb = 0; /* blocks a running sequence holds beside its tokens' (deepseek_v4) */
    numla_kv_pool_charge(cfg, bs, o->kv_dtype, idt, o->prefix_cache, &blk, &seqb, &v4seq);
    if (nb > 0 && o->num_blocks_seqs > 0)
        nb += (int64_t)o->num_blocks_seqs * seqb;
    if (nb <= 0 && (o->kv_memory_bytes > 0 || o->kv_memory_fraction > 0)) {
        /* every rank of a node has its weights in memory before any rank measures */
        NUMLA_CHECK(numla_comm_barrier(comm));
        engine_kv_site me = {.failed = *failed};
        if (gethostname(me.host, sizeof me.host - 1) != 0)
            snprintf(me.host, sizeof me.host, "?");
        me.node = engine_kv_node();
        me.free_bytes = (int64_t)numla_kv_cache_node_free_bytes(me.node);
        engine_kv_site *all = rank == 0 ? calloc((size_t)size, sizeof *all) : NULL;
        if (rank == 0 && !all)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "engine: no memory");
        engine_kv_verdict v = {0};
        numla_status s = numla_comm_gather(comm, &me, sizeof me, all, 0);
        if (s == NUMLA_STATUS_OK && rank == 0)
            engine_kv_decide(cfg, size, o, all, blk, bs, seqb, &v);
        free(all);
        if (s == NUMLA_STATUS_OK)
            s = numla_comm_bcast(comm, &v, sizeof v, 0);
        NUMLA_CHECK(s);
        if (*failed || v.any_failed)
            return NUMLA_STATUS_OK; /* the failed rank reports */
        if (v.num_blocks < 1 && rank != 0)
            return NUMLA_STATUS_OK; /* rank 0 reports; numla_engine_create fails everywhere */
        const char *where = v.node >= 0 ? "NUMA node" : "machine";
        if (v.num_blocks < 1 && o->kv_memory_bytes > 0 && v.share_bytes == 0)
            NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                       "engine: a KV pool of %.2f GiB per rank is more than there is: rank %d's "
                       "%s %d has %.2f GiB free for its %d rank%s (%.2f GiB needed)",
                       (double)o->kv_memory_bytes / 1073741824.0, v.rank, where, v.node,
                       (double)v.free_bytes / 1073741824.0, v.sharers,
                       v.sharers > 1 ? "s" : "",
                       (double)o->kv_memory_bytes * v.sharers / 1073741824.0);
        if (v.num_blocks < 1)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY,
                       "engine: %.3f GiB of KV memory per rank (rank %d's %s %d: %.2f GiB free "
                       "for %d rank%s) hold no %zu-byte block",
                       (double)v.share_bytes / 1073741824.0, v.rank, where, v.node,
                       (double)v.free_bytes / 1073741824.0, v.sharers,
                       v.sharers > 1 ? "s" : "", blk);
        nb = v.num_blocks;
    } else if (nb <= 0) {
        int64_t ctx = o->max_context > 0 ? o->max_context : 4096;
        if (ctx > cfg->max_position_embeddings)
            ctx = cfg->max_position_embeddings;
        nb = (ctx + bs - 1) / bs + seqb;
    }
    if (*failed)
        return NUMLA_STATUS_OK;
    if (seqb > 0 && nb < seqb + 1)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG,
                   "engine: deepseek_v4: a KV pool of %lld blocks (%.2f MiB at %zu bytes a block of "
                   "%d tokens) cannot hold one sequence: its window rings and compressors' rows "
                   "take %.2f MiB (%d blocks) before its first token; raise --kv-memory/--kv-blocks",
                   (long long)nb, (double)nb * (double)blk / 1048576.0, blk, bs,
                   (double)v4seq / 1048576.0, seqb);
    NUMLA_CHECK(numla_kv_cache_create_for_model(cfg, bs, nb, o->kv_dtype, idt, out));
    (*out)->block_bytes = blk;
    (*out)->seq_blocks = seqb;
    return NUMLA_STATUS_OK;
}
