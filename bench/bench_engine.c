/* bench/bench_engine.c — `numla bench engine --model DIR [--batch B] [--context L] [--steps S]
 * [--threads T] [--no-bind] [--json]`: batched decode through the collective engine (engine/parallel/engine.h) on
 * every rank of the job, with each rank's step time split into compute and communication
 * (DESIGN.md §7: allreduces in numla_model_reduce, the logits gather, the plan broadcast).
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
#include "comm/comm.h"
#include "common/log.h"
#include "engine/cli/cli.h"
#include "engine/cli/settings.h"
#include "engine/parallel/engine.h"

static void usage(void)
{
    fprintf(stderr, "usage: numla bench engine --model DIR [--batch B (1)] [--context L (64)] "
                    "[--steps S (16)] [--threads T] [--no-bind] [--json] "
                    "[--weights bf16|int8|fp8 [--keep-lm-head]]\n");
}

static int bench_engine_main(int argc, char **argv)
{
    const char *model = NULL;
    int batch = 1, context = 64, steps = 16, threads = 0, json = 0, bind = 1;
    numla_weights_options wopt = numla_weights_options_default();
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (!strcmp(argv[i], "--no-bind"))
            bind = 0;
        else if (!strcmp(argv[i], "--keep-lm-head"))
            wopt.keep_lm_head = 1;
        else if (!strcmp(argv[i], "--weights") && v) {
            if (!numla_weights_format_parse(argv[++i], &wopt)) {
                usage();
                return 2;
            }
        }
        else if (!strcmp(argv[i], "--model") && v)
            model = argv[++i];
        else if (!strcmp(argv[i], "--batch") && v)
            batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--context") && v)
            context = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && v)
            steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && v)
            threads = atoi(argv[++i]);
        else {
            usage();
            return 2;
        }
    }
    if (!model || batch < 1 || context < 1 || steps < 1) {
        usage();
        return 2;
    }
    numla_comm_session mpi;
    numla_settings set;
    numla_status s = numla_settings_start(&set, &mpi);
    if (s != NUMLA_STATUS_OK)
        numla_comm_abort(NULL, s, "bench engine: %s", numla_error_message());
    numla_comm *c = mpi.comm;
    const int rank = numla_comm_rank(c), size = numla_comm_size(c);
    numla_engine_options eo = numla_engine_options_default();
    numla_settings_engine_options(&set, &eo);
    eo.num_threads = threads;
    eo.bind = bind;
    eo.block_size = 16;
    eo.weights = wopt;
    const int warm = 2;
    const int64_t total = (int64_t)context + steps + warm + 1;
    eo.num_blocks = (int64_t)batch * ((total + 15) / 16);
    numla_engine *e = NULL;
    if ((s = numla_engine_create(c, model, &eo, &e)) != NUMLA_STATUS_OK)
        numla_comm_abort(c, s, "bench engine: %s", numla_error_message());
    if (rank != 0) {
        if ((s = numla_engine_worker_loop(e)) != NUMLA_STATUS_OK)
            numla_comm_abort(c, s, "bench engine: %s", numla_error_message());
        numla_engine_destroy(&e);
        numla_comm_world_finalize(&mpi);
        return 0;
    }

    const numla_model_config *cfg = numla_engine_config(e);
    numla_kv_cache *kv = numla_engine_kv_cache(e);
    const int64_t V = cfg->vocab_size;
    const int32_t mb = (int32_t)((total + 15) / 16);
    const int chunk = context < 256 ? context : 256;
    const int maxT = batch > chunk ? batch : chunk;
    int32_t *bt = malloc(sizeof *bt * (size_t)batch * (size_t)mb);
    int32_t *tok = malloc(sizeof *tok * (size_t)maxT), *pos = malloc(sizeof *pos * (size_t)maxT);
    int64_t *slot = malloc(sizeof *slot * (size_t)maxT);
    int32_t *qsl = malloc(sizeof *qsl * (size_t)(batch + 1));
    int32_t *lens = malloc(sizeof *lens * (size_t)batch), *rows = malloc(sizeof *rows * (size_t)batch);
    float *logits = malloc(sizeof *logits * (size_t)batch * (size_t)V);
    double *dt = malloc(sizeof *dt * (size_t)steps);
    if (!bt || !tok || !pos || !slot || !qsl || !lens || !rows || !logits || !dt)
        numla_comm_abort(c, NUMLA_STATUS_NO_MEMORY, "bench engine: out of memory");
    for (int b = 0; b < batch; b++)
        for (int j = 0; j < mb; j++)
            if ((s = numla_kv_cache_alloc_block(kv, &bt[(size_t)b * mb + j])) != NUMLA_STATUS_OK)
                numla_comm_abort(c, s, "bench engine: %s", numla_error_message());
    uint32_t rng = 7;
#define NEXT_TOKEN() (rng = rng * 1664525u + 1013904223u, (int32_t)(2 + (rng >> 8) % (uint32_t)(V - 2)))
    /* prefill, one sequence per step, in chunks */
    for (int b = 0; b < batch; b++)
        for (int at = 0; at < context; at += chunk) {
            int n = context - at < chunk ? context - at : chunk;
            for (int i = 0; i < n; i++) {
                int p = at + i;
                tok[i] = NEXT_TOKEN();
                pos[i] = p;
                slot[i] = (int64_t)bt[(size_t)b * mb + p / 16] * 16 + p % 16;
            }
            int32_t q2[2] = {0, n}, len = at + n, row = n - 1;
            numla_step st = {.num_seqs = 1, .num_tokens = n, .tokens = tok, .positions = pos,
                             .slots = slot, .query_start_loc = q2, .seq_lens = &len,
                             .block_tables = bt + (size_t)b * mb, .max_blocks_per_seq = mb,
                             .num_logit_rows = 1, .logit_rows = &row};
            if ((s = numla_engine_step(e, &st, logits)) != NUMLA_STATUS_OK)
                numla_comm_abort(c, s, "bench engine: %s", numla_error_message());
        }
    /* decode: B tokens per step */
    for (int k = 0; k < warm + steps; k++) {
        if (k == warm && (s = numla_engine_stats_reset_all(e)) != NUMLA_STATUS_OK)
            numla_comm_abort(c, s, "bench engine: %s", numla_error_message());
        int p = context + k;
        qsl[0] = 0;
        for (int b = 0; b < batch; b++) {
            tok[b] = NEXT_TOKEN();
            pos[b] = p;
            slot[b] = (int64_t)bt[(size_t)b * mb + p / 16] * 16 + p % 16;
            qsl[b + 1] = b + 1;
            lens[b] = p + 1;
            rows[b] = b;
        }
        numla_step st = {.num_seqs = batch, .num_tokens = batch, .tokens = tok, .positions = pos,
                         .slots = slot, .query_start_loc = qsl, .seq_lens = lens,
                         .block_tables = bt, .max_blocks_per_seq = mb,
                         .num_logit_rows = batch, .logit_rows = rows};
        double t0 = numla_bench_now();
        if ((s = numla_engine_step(e, &st, logits)) != NUMLA_STATUS_OK)
            numla_comm_abort(c, s, "bench engine: %s", numla_error_message());
        if (k >= warm)
            dt[k - warm] = numla_bench_now() - t0;
    }
#undef NEXT_TOKEN
    numla_engine_stats *all = calloc((size_t)size, sizeof *all);
    if (!all || (s = numla_engine_stats_collect(e, all)) != NUMLA_STATUS_OK)
        numla_comm_abort(c, s ? s : NUMLA_STATUS_NO_MEMORY, "bench engine: %s",
                         numla_error_message());
    const double med = numla_bench_median(dt, steps);
    double mean = 0;
    for (int k = 0; k < steps; k++)
        mean += dt[k] / steps;
    const double L = (double)cfg->num_hidden_layers;
    const double ar_bytes = (double)batch * (double)cfg->hidden_size * 4;
    if (json) {
        printf("{\"bench\": \"engine\", \"model\": \"%s\", \"ranks\": %d, \"threads\": %d, "
               "\"batch\": %d, \"context\": %d, \"steps\": %d, \"median_step_ms\": %.4f, "
               "\"tokens_per_s\": %.3f}\n", model, size, numla_engine_num_threads(e), batch,
               context, steps, 1e3 * med, batch / med);
    } else {
        printf("engine decode: %s, %d rank%s x %d thread%s, batch %d, context %d, %d steps\n"
               "  median step %.3f ms (mean %.3f) -> %.2f tokens/s; allreduce %.0f bytes x %d "
               "per step; logits gather %lld floats\n", model, size, size > 1 ? "s" : "",
               numla_engine_num_threads(e), numla_engine_num_threads(e) > 1 ? "s" : "", batch,
               context, steps, 1e3 * med, 1e3 * mean, batch / med, ar_bytes,
               (int)(2 * cfg->num_hidden_layers), (long long)(batch * V));
        printf("  %4s %9s %10s %10s %10s %10s %10s %12s\n", "rank", "step_ms", "compute_ms",
               "reduce_ms", "gather_ms", "bcast_ms", "reduce_us", "layer_cmp_ms");
    }
    for (int q = 0; q < size; q++) {
        const numla_engine_stats *x = &all[q];
        double n = x->steps > 0 ? (double)x->steps : 1;
        double step = x->step_s / n, red = x->reduce_s / n, gat = x->gather_s / n;
        double comp = step - red - gat, bc = x->bcast_s / n;
        double per_red = x->reduces > 0 ? x->reduce_s / (double)x->reduces : 0;
        if (json)
            printf("{\"bench\": \"engine\", \"rank\": %d, \"step_ms\": %.4f, \"compute_ms\": "
                   "%.4f, \"reduce_ms\": %.4f, \"gather_ms\": %.4f, \"bcast_ms\": %.4f, "
                   "\"reduce_us_per_call\": %.2f, \"compute_per_layer_ms\": %.4f}\n", q,
                   1e3 * step, 1e3 * comp, 1e3 * red, 1e3 * gat, 1e3 * bc, 1e6 * per_red,
                   1e3 * comp / L);
        else
            printf("  %4d %9.3f %10.3f %10.3f %10.3f %10.3f %10.1f %12.4f\n", q, 1e3 * step,
                   1e3 * comp, 1e3 * red, 1e3 * gat, 1e3 * bc, 1e6 * per_red, 1e3 * comp / L);
    }
    if (!json)
        printf("  (compute = step - reduce - gather; reduce includes waiting for the slowest "
               "rank; bcast on rank 0 is sending the plan, on workers waiting for it)\n");
    fflush(stdout);
    free(all);
    free(bt);
    free(tok);
    free(pos);
    free(slot);
    free(qsl);
    free(lens);
    free(rows);
    free(logits);
    free(dt);
    numla_engine_destroy(&e);
    numla_comm_world_finalize(&mpi);
    return 0;
}

NUMLA_CLI_COMMAND("bench engine", bench_engine_main,
                  "batched decode through the sharded engine, per-rank compute vs communication "
                  "(mpirun -n R) [--model DIR]")
