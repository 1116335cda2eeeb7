/* bench/bench_engine.c — `numla bench engine --model DIR [--batch B] [--context L] [--steps S]
 * [--threads T] [--no-bind] [--json]`: batched decode through the collective engine (engine/parallel/engine.h) on
 * every rank of the job, with each rank's step time split into compute and communication
 * (docs/design.md §7: allreduces in numla_model_reduce, the logits gather, the plan broadcast).
 * Run as `mpirun -n R numla bench engine ...`; 1 rank works without mpirun.
 * B sequences are prefilled to L tokens (not timed), then S decode steps of B tokens are timed
 * (after 2 warm-up steps). Reports tokens/s (median step), per-rank ms per step, and per layer.
 * --no-bind skips the launch/ binding (numla_bind_apply), e.g. to compare 1 rank × 2 threads
 * with 2 ranks × 1 thread under the same (unpinned) conditions on an oversubscribed machine.
 * Prints, never asserts. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/bench_opts.h"
#include "comm/comm.h"
#include "common/log.h"
#include "engine/cli/cli.h"
#include "engine/cli/settings.h"
#include "engine/parallel/engine.h"

static void usage(void)
{
    fprintf(stderr, "usage: numla bench engine --model DIR [--batch B (1)] [--context L (64)] "
                    "[--steps S (16)] [--threads T] [--no-bind] [--json] "
                    "[--weights bf16|int8|fp8|q8_0|q4_0|q4_k [--keep-lm-head]]\n");
}

typedef struct be_opts {
    numla_cli_engine_opts e; /* --model, --threads, --weights, --keep-lm-head */
    int batch, context, steps, json, bind;
} be_opts;

/* Returns -1 when the options are good, else the exit code (usage or the bad option printed). */
static int be_parse_opts(int argc, char **argv, be_opts *o)
{
    static const char *const cmd = "numla bench engine";
    static const char *const shared[] = {"--model", "--threads", "--weights", "--keep-lm-head",
                                         NULL};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int r = numla_bench_engine_opt(cmd, &o->e, shared, argc, argv, &i);
        if (r == NUMLA_CLI_OPT_BAD)
            return 2;
        if (r != NUMLA_CLI_OPT_NONE)
            continue;
        int *num = !strcmp(a, "--batch")     ? &o->batch
                   : !strcmp(a, "--context") ? &o->context
                   : !strcmp(a, "--steps")   ? &o->steps
                                             : NULL;
        if (num) {
            if (!numla_bench_int_opt(cmd, argc, argv, &i, num))
                return 2;
        } else if (!strcmp(a, "--json"))
            o->json = 1;
        else if (!strcmp(a, "--no-bind"))
            o->bind = 0;
        else {
            usage();
            return 2;
        }
    }
    if (!o->e.model || o->batch < 1 || o->context < 1 || o->steps < 1) {
        usage();
        return 2;
    }
    return numla_cli_engine_opts_check(cmd, &o->e);
}

enum { BE_WARM = 2, BE_BLOCK = 16 };

/* Rank 0's step buffers: B sequences of mb blocks each. */
typedef struct be_bufs {
    numla_comm *c;
    numla_engine *e;
    int64_t V;
    int32_t mb;
    int chunk;
    uint32_t rng;
    int32_t *bt;     /* (B, mb) block tables */
    int32_t *tok, *pos; /* (max(B, chunk)) */
    int64_t *slot;   /* (max(B, chunk)) */
    int32_t *qsl;    /* (B + 1) */
    int32_t *lens, *rows; /* (B) */
    float *logits;   /* (B, V) */
    double *dt;      /* (steps) seconds per timed decode step */
} be_bufs;

static void be_die(const be_bufs *b, numla_status s)
{
    numla_comm_abort(b->c, s, "bench engine: %s", numla_error_message());
}

static void be_bufs_free(be_bufs *b)
{
    free(b->bt);
    free(b->tok);
    free(b->pos);
    free(b->slot);
    free(b->qsl);
    free(b->lens);
    free(b->rows);
    free(b->logits);
    free(b->dt);
}

static void be_bufs_alloc(be_bufs *b, const be_opts *o)
{
    const int64_t total = (int64_t)o->context + o->steps + BE_WARM + 1;
    const size_t B = (size_t)o->batch;
    b->V = numla_engine_config(b->e)->vocab_size;
    b->mb = (int32_t)((total + BE_BLOCK - 1) / BE_BLOCK);
    b->chunk = o->context < 256 ? o->context : 256;
    b->rng = 7;
    const size_t maxT = (size_t)(o->batch > b->chunk ? o->batch : b->chunk);
    b->bt = malloc(sizeof *b->bt * B * (size_t)b->mb);
    b->tok = malloc(sizeof *b->tok * maxT);
    b->pos = malloc(sizeof *b->pos * maxT);
    b->slot = malloc(sizeof *b->slot * maxT);
    b->qsl = malloc(sizeof *b->qsl * (B + 1));
    b->lens = malloc(sizeof *b->lens * B);
    b->rows = malloc(sizeof *b->rows * B);
    b->logits = malloc(sizeof *b->logits * B * (size_t)b->V);
    b->dt = malloc(sizeof *b->dt * (size_t)o->steps);
    if (!b->bt || !b->tok || !b->pos || !b->slot || !b->qsl || !b->lens || !b->rows ||
        !b->logits || !b->dt)
        be_die(b, NUMLA_STATUS_NO_MEMORY);
    numla_kv_cache *kv = numla_engine_kv_cache(b->e);
    numla_status s;
    for (size_t j = 0; j < B * (size_t)b->mb; j++)
        if ((s = numla_kv_cache_alloc_block(kv, &b->bt[j])) != NUMLA_STATUS_OK)
            be_die(b, s);
}

static int32_t be_next_token(be_bufs *b)
{
    b->rng = b->rng * 1664525u + 1013904223u;
    return (int32_t)(2 + (b->rng >> 8) % (uint32_t)(b->V - 2));
}

static int64_t be_slot(const be_bufs *b, int seq, int p)
{
    return (int64_t)b->bt[(size_t)seq * (size_t)b->mb + (size_t)(p / BE_BLOCK)] * BE_BLOCK +
           p % BE_BLOCK;
}

/* Prefill every sequence to `context` tokens, one sequence per step, in chunks (not timed). */
static void be_prefill(be_bufs *b, const be_opts *o)
{
    numla_status s;
    for (int q = 0; q < o->batch; q++)
        for (int at = 0; at < o->context; at += b->chunk) {
            int n = o->context - at < b->chunk ? o->context - at : b->chunk;
            for (int i = 0; i < n; i++) {
                b->tok[i] = be_next_token(b);
                b->pos[i] = at + i;
                b->slot[i] = be_slot(b, q, at + i);
            }
            int32_t q2[2] = {0, n}, len = at + n, row = n - 1;
            numla_step st = {.num_seqs = 1, .num_tokens = n, .tokens = b->tok,
                             .positions = b->pos, .slots = b->slot, .query_start_loc = q2,
                             .seq_lens = &len, .block_tables = b->bt + (size_t)q * b->mb,
                             .max_blocks_per_seq = b->mb, .num_logit_rows = 1, .logit_rows = &row};
            if ((s = numla_engine_step(b->e, &st, b->logits)) != NUMLA_STATUS_OK)
                be_die(b, s);
        }
}

/* BE_WARM + steps decode steps of B tokens; the engine counters reset after the warm-up, the
 * timed steps' seconds in b->dt. */
static void be_decode(be_bufs *b, const be_opts *o)
{
    numla_status s;
    for (int k = 0; k < BE_WARM + o->steps; k++) {
        if (k == BE_WARM && (s = numla_engine_stats_reset_all(b->e)) != NUMLA_STATUS_OK)
            be_die(b, s);
        int p = o->context + k;
        b->qsl[0] = 0;
        for (int q = 0; q < o->batch; q++) {
            b->tok[q] = be_next_token(b);
            b->pos[q] = p;
            b->slot[q] = be_slot(b, q, p);
            b->qsl[q + 1] = q + 1;
            b->lens[q] = p + 1;
            b->rows[q] = q;
        }
        numla_step st = {.num_seqs = o->batch, .num_tokens = o->batch, .tokens = b->tok,
                         .positions = b->pos, .slots = b->slot, .query_start_loc = b->qsl,
                         .seq_lens = b->lens, .block_tables = b->bt, .max_blocks_per_seq = b->mb,
                         .num_logit_rows = o->batch, .logit_rows = b->rows};
        double t0 = numla_now_s();
        if ((s = numla_engine_step(b->e, &st, b->logits)) != NUMLA_STATUS_OK)
            be_die(b, s);
        if (k >= BE_WARM)
            b->dt[k - BE_WARM] = numla_now_s() - t0;
    }
}

/* The step time and every rank's split (collective: the stats are collected from all ranks). */
static void be_report(const be_bufs *b, const be_opts *o, int size)
{
    numla_engine_stats *all = calloc((size_t)size, sizeof *all);
    numla_status s = all ? numla_engine_stats_collect(b->e, all) : NUMLA_STATUS_NO_MEMORY;
    if (s != NUMLA_STATUS_OK)
        be_die(b, s);
    const numla_model_config *cfg = numla_engine_config(b->e);
    const int nth = numla_engine_num_threads(b->e);
    const double med = numla_bench_median(b->dt, o->steps);
    double mean = 0;
    for (int k = 0; k < o->steps; k++)
        mean += b->dt[k] / o->steps;
    const double L = (double)cfg->num_hidden_layers;
    const double ar_bytes = (double)o->batch * (double)cfg->hidden_size * 4;
    if (o->json) {
        printf("{\"bench\": \"engine\", \"model\": \"%s\", \"ranks\": %d, \"threads\": %d, "
               "\"batch\": %d, \"context\": %d, \"steps\": %d, \"median_step_ms\": %.4f, "
               "\"tokens_per_s\": %.3f}\n", o->e.model, size, nth, o->batch, o->context, o->steps,
               1e3 * med, o->batch / med);
    } else {
        printf("engine decode: %s, %d rank%s x %d thread%s, batch %d, context %d, %d steps\n"
               "  median step %.3f ms (mean %.3f) -> %.2f tokens/s; allreduce %.0f bytes x %d "
               "per step; logits gather %lld floats\n", o->e.model, size, size > 1 ? "s" : "", nth,
               nth > 1 ? "s" : "", o->batch, o->context, o->steps, 1e3 * med, 1e3 * mean,
               o->batch / med, ar_bytes, (int)(2 * cfg->num_hidden_layers),
               (long long)(o->batch * b->V));
        printf("  %4s %9s %10s %10s %10s %10s %10s %12s\n", "rank", "step_ms", "compute_ms",
               "reduce_ms", "gather_ms", "bcast_ms", "reduce_us", "layer_cmp_ms");
    }
    for (int q = 0; q < size; q++) {
        const numla_engine_stats *x = &all[q];
        double n = x->steps > 0 ? (double)x->steps : 1;
        double step = x->step_s / n, red = x->reduce_s / n, gat = x->gather_s / n;
        double comp = step - red - gat, bc = x->bcast_s / n;
        double per_red = x->reduces > 0 ? x->reduce_s / (double)x->reduces : 0;
        if (o->json)
            printf("{\"bench\": \"engine\", \"rank\": %d, \"step_ms\": %.4f, \"compute_ms\": "
                   "%.4f, \"reduce_ms\": %.4f, \"gather_ms\": %.4f, \"bcast_ms\": %.4f, "
                   "\"reduce_us_per_call\": %.2f, \"compute_per_layer_ms\": %.4f}\n", q,
                   1e3 * step, 1e3 * comp, 1e3 * red, 1e3 * gat, 1e3 * bc, 1e6 * per_red,
                   1e3 * comp / L);
        else
            printf("  %4d %9.3f %10.3f %10.3f %10.3f %10.3f %10.1f %12.4f\n", q, 1e3 * step,
                   1e3 * comp, 1e3 * red, 1e3 * gat, 1e3 * bc, 1e6 * per_red, 1e3 * comp / L);
    }
    /* The allreduce's route (across machines: shm inside each, MPI between them, or MPI) and
     * its cost per decode step on the slowest rank. */
    double red_step = 0, red_call = 0;
    int64_t calls = 0;
    for (int q = 0; q < size; q++) {
        double n = all[q].steps > 0 ? (double)all[q].steps : 1;
        if (all[q].reduce_s / n > red_step)
            red_step = all[q].reduce_s / n;
        if (all[q].reduces > 0 && all[q].reduce_s / (double)all[q].reduces > red_call)
            red_call = all[q].reduce_s / (double)all[q].reduces;
        if (all[q].steps > 0 && all[q].reduces / all[q].steps > calls)
            calls = all[q].reduces / all[q].steps;
    }
    const int machines = numla_comm_machines(b->c);
    if (o->json)
        printf("{\"bench\": \"engine\", \"allreduce_path\": \"%s\", \"machines\": %d, "
               "\"allreduce_ms_per_step\": %.4f, \"allreduce_us_per_call\": %.2f}\n",
               numla_comm_allreduce_route(b->c), machines, 1e3 * red_step, 1e6 * red_call);
    else
        printf("  allreduce path: %s, %d rank%s on %d machine%s\n"
               "  allreduce per step: %.3f ms (%lld calls of %.0f bytes, %.1f us each; slowest "
               "rank)\n"
               "  (compute = step - reduce - gather; reduce includes waiting for the slowest "
               "rank; bcast on rank 0 is sending the plan, on workers waiting for it)\n",
               numla_comm_allreduce_route(b->c), size, size > 1 ? "s" : "", machines,
               machines > 1 ? "s" : "", 1e3 * red_step, (long long)calls, ar_bytes,
               1e6 * red_call);
    fflush(stdout);
    free(all);
}

static int bench_engine_main(int argc, char **argv)
{
    be_opts o = {.batch = 1, .context = 64, .steps = 16, .bind = 1};
    numla_cli_engine_opts_default(&o.e);
    int rc = be_parse_opts(argc, argv, &o);
    if (rc >= 0)
        return rc;
    numla_comm_session mpi;
    numla_settings set;
    numla_status s = numla_settings_start(&set, &mpi);
    if (s != NUMLA_STATUS_OK)
        numla_comm_abort(NULL, s, "bench engine: %s", numla_error_message());
    numla_comm *c = mpi.comm;
    numla_engine_options eo = numla_engine_options_default();
    numla_settings_engine_options(&set, &eo);
    eo.num_threads = o.e.threads;
    eo.bind = o.bind;
    eo.block_size = BE_BLOCK;
    eo.weights = o.e.weights;
    const int64_t total = (int64_t)o.context + o.steps + BE_WARM + 1;
    eo.num_blocks = (int64_t)o.batch * ((total + BE_BLOCK - 1) / BE_BLOCK);
    be_bufs b = {.c = c};
    if ((s = numla_engine_create(c, o.e.model, &eo, &b.e)) != NUMLA_STATUS_OK)
        be_die(&b, s);
    if (numla_comm_rank(c) != 0) {
        if ((s = numla_engine_worker_loop(b.e)) != NUMLA_STATUS_OK)
            be_die(&b, s);
    } else {
        be_bufs_alloc(&b, &o);
        be_prefill(&b, &o);
        be_decode(&b, &o);
        be_report(&b, &o, numla_comm_size(c));
        be_bufs_free(&b);
    }
    numla_engine_destroy(&b.e);
    numla_comm_world_finalize(&mpi);
    return 0;
}

NUMLA_CLI_COMMAND("bench engine", bench_engine_main,
                  "batched decode through the sharded engine, per-rank compute vs communication "
                  "(mpirun -n R) [--model DIR]")
