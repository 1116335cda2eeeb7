/* bench/bench_serve.c — `numla bench serve`: serving throughput with continuous batching
 * (engine/scheduler.h over engine/engine.h) at concurrency 1, 8 and 32: greedy requests with
 * mixed prompt lengths (uniform 64..1024 tokens) and 128 output tokens each, `concurrency`
 * sequences in flight (max_seqs), 2 x concurrency requests per level. Reports output tok/s,
 * TTFT and TPOT percentiles and the ratio to concurrency 1 measured in the same run
 * (speedup_vs_batch1, DESIGN.md §7). --quick: prompts 16..128, 16 output tokens, one request
 * per sequence slot. Runs on the ranks of MPI_COMM_WORLD (rank 0 prints). */
#include <mpi.h>
#include <stddef.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "comm/comm.h"
#include "engine/cli.h"
#include "engine/engine.h"
#include "engine/model.h"
#include "engine/scheduler.h"

typedef struct bs_acc {
    int64_t done, out_tokens;
    double *ttft, *tpot;
    int n_ttft, n_tpot;
} bs_acc;

static void bs_done(void *ctx, const numla_sched_output *o)
{
    bs_acc *a = ctx;
    a->done++;
    a->out_tokens += o->num_output;
    if (o->first_token_s > 0) {
        a->ttft[a->n_ttft++] = o->first_token_s - o->arrival_s;
        if (o->num_output > 1)
            a->tpot[a->n_tpot++] = (o->finish_s - o->first_token_s) / (o->num_output - 1);
    }
}

static numla_status bs_exec(void *ctx, const numla_step *st, float *logits)
{
    return numla_engine_step(ctx, st, logits);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: numla bench serve --model DIR [--json] [--quick] [--threads N]\n"
               "                         [--concurrency 1,8,32] [--output-tokens 128]\n"
               "                         [--min-prompt 64] [--max-prompt 1024] [--rounds 2]\n"
               "                         [--max-batch-tokens 2048] [--prefill-chunk 512]\n");
}

static int bench_serve_main(int argc, char **argv)
{
    const char *model = NULL, *conc_s = "1,8,32";
    int json = 0, quick = 0, threads = 0, out_tokens = 128, pmin = 64, pmax = 1024, rounds = 2;
    int max_batch_tokens = 2048, prefill_chunk = 512;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--quick")) {
            quick = 1;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (v && !strcmp(a, "--model")) {
            model = argv[++i];
        } else if (v && !strcmp(a, "--threads")) {
            threads = atoi(argv[++i]);
        } else if (v && !strcmp(a, "--concurrency")) {
            conc_s = argv[++i];
        } else if (v && !strcmp(a, "--output-tokens")) {
            out_tokens = atoi(argv[++i]);
        } else if (v && !strcmp(a, "--min-prompt")) {
            pmin = atoi(argv[++i]);
        } else if (v && !strcmp(a, "--max-prompt")) {
            pmax = atoi(argv[++i]);
        } else if (v && !strcmp(a, "--rounds")) {
            rounds = atoi(argv[++i]);
        } else if (v && !strcmp(a, "--max-batch-tokens")) {
            max_batch_tokens = atoi(argv[++i]);
        } else if (v && !strcmp(a, "--prefill-chunk")) {
            prefill_chunk = atoi(argv[++i]);
        } else {
            fprintf(stderr, "numla bench serve: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (quick) {
        out_tokens = 16;
        pmin = 16;
        pmax = 128;
        rounds = 1;
    }
    if (!model || out_tokens < 1 || pmin < 1 || pmax < pmin || rounds < 1 ||
        max_batch_tokens < 1 || prefill_chunk < 1) {
        usage(stderr);
        return 2;
    }
    int conc[16], nconc = 0;
    for (const char *p = conc_s; *p && nconc < 16;) {
        conc[nconc] = atoi(p);
        if (conc[nconc] < 1) {
            fprintf(stderr, "numla bench serve: bad --concurrency %s\n", conc_s);
            return 2;
        }
        nconc++;
        p = strchr(p, ',');
        if (!p)
            break;
        p++;
    }
    int maxc = 1;
    for (int i = 0; i < nconc; i++)
        maxc = conc[i] > maxc ? conc[i] : maxc;

    int inited = 0, own = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided;
        MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
        own = 1;
    }
    numla_comm *comm = NULL;
    numla_engine *eng = NULL;
    numla_sched *sc = NULL;
    numla_request *rq = NULL;
    bs_acc acc = {0};
    int rc = 1, nreq_max = maxc * rounds;
    numla_status s;
    NUMLA_CHECK_GOTO(numla_comm_create(MPI_COMM_WORLD, &comm), s, fail);
    numla_engine_options eo = numla_engine_options_default();
    eo.num_threads = threads;
    eo.block_size = 16;
    /* every sequence in flight at its longest, plus a little slack */
    eo.num_blocks = (int64_t)maxc * ((pmax + out_tokens + 15) / 16 + 1) + 16;
    NUMLA_CHECK_GOTO(numla_engine_create(comm, model, &eo, &eng), s, fail);
    if (numla_comm_rank(comm) != 0) {
        NUMLA_CHECK_GOTO(numla_engine_worker_loop(eng), s, fail);
        rc = 0;
        goto done;
    }
    const numla_model_config *cfg = numla_engine_config(eng);
    rq = calloc((size_t)nreq_max, sizeof *rq);
    acc.ttft = calloc((size_t)nreq_max, sizeof(double));
    acc.tpot = calloc((size_t)nreq_max, sizeof(double));
    if (!rq || !acc.ttft || !acc.tpot) {
        fprintf(stderr, "numla bench serve: no memory\n");
        goto done;
    }
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < nreq_max; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        int32_t P = pmin + (int32_t)((rng >> 33) % (uint64_t)(pmax - pmin + 1));
        rq[i].line = i + 1;
        rq[i].num_prompt = P;
        rq[i].prompt_tokens = malloc((size_t)P * sizeof(int32_t));
        if (!rq[i].prompt_tokens)
            goto done;
        for (int32_t t = 0; t < P; t++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            rq[i].prompt_tokens[t] = (int32_t)((rng >> 33) % (uint64_t)cfg->vocab_size);
        }
        numla_sampling_params_default(&rq[i].params);
        rq[i].params.temperature = 0;
        rq[i].params.max_tokens = out_tokens;
        rq[i].params.ignore_eos = 1;
    }
    if (!json)
        printf("bench serve: %s, %d threads, %d rank(s); prompts %d..%d, %d output tokens\n"
               "%12s %9s %13s %9s %12s %12s %12s %12s\n",
               model, numla_engine_num_threads(eng), numla_comm_size(comm), pmin, pmax,
               out_tokens, "concurrency", "requests", "output tok/s", "speedup", "TTFT p50 ms",
               "TTFT p99 ms", "TPOT p50 ms", "TPOT p99 ms");
    double base = 0;
    for (int ci = 0; ci < nconc; ci++) {
        int c = conc[ci], n = c * rounds;
        numla_sched_options so = {.max_batch_tokens = max_batch_tokens > c ? max_batch_tokens : c,
                                  .max_seqs = c, .prefill_chunk = prefill_chunk,
                                  .vocab_size = cfg->vocab_size,
                                  .num_eos = cfg->num_eos, .eos_token_ids = cfg->eos_token_ids};
        memset(&acc, 0, offsetof(bs_acc, ttft));
        acc.n_ttft = acc.n_tpot = 0;
        NUMLA_CHECK_GOTO(numla_sched_create(&so, numla_engine_kv_cache(eng), bs_exec, eng, bs_done,
                                            &acc, &sc), s, fail);
        if (ci == 0) { /* warm-up: first touch of scratch and KV, one short request */
            numla_request w = rq[0];
            w.params.max_tokens = 2;
            NUMLA_CHECK_GOTO(numla_sched_submit(sc, &w, NULL), s, fail);
            while (numla_sched_busy(sc))
                NUMLA_CHECK_GOTO(numla_sched_step(sc), s, fail);
            memset(&acc, 0, offsetof(bs_acc, ttft));
            acc.n_ttft = acc.n_tpot = 0;
        }
        /* rank 0's step profile over the level (the other ranks run the same steps) */
        const numla_model *m = numla_engine_model(eng);
        double part0[NUMLA_MODEL_PART_COUNT];
        memcpy(part0, m->part_s, sizeof part0);
        double attn0 = m->attn_s, attk0 = m->attn_kernel_s, lin0 = m->linear_s;
        numla_engine_stats es0, es1;
        numla_engine_stats_get(eng, &es0);
        double t0 = numla_bench_now();
        for (int i = 0; i < n; i++)
            NUMLA_CHECK_GOTO(numla_sched_submit(sc, &rq[i], NULL), s, fail);
        while (numla_sched_busy(sc))
            NUMLA_CHECK_GOTO(numla_sched_step(sc), s, fail);
        double wall = numla_bench_now() - t0;
        numla_sched_destroy(&sc);
        numla_engine_stats_get(eng, &es1);
        const int64_t steps = es1.steps - es0.steps, step_tokens = es1.tokens - es0.tokens;
        double tps = (double)acc.out_tokens / wall;
        if (ci == 0)
            base = tps;
        double sp = base > 0 ? tps / base : 0;
        double t50 = 1e3 * numla_bench_percentile(acc.ttft, acc.n_ttft, 50);
        double t99 = 1e3 * numla_bench_percentile(acc.ttft, acc.n_ttft, 99);
        double p50 = 1e3 * numla_bench_percentile(acc.tpot, acc.n_tpot, 50);
        double p99 = 1e3 * numla_bench_percentile(acc.tpot, acc.n_tpot, 99);
        if (json)
            printf("{\"bench\":\"serve\",\"model\":\"%s\",\"threads\":%d,\"ranks\":%d,"
                   "\"concurrency\":%d,\"requests\":%d,\"output_tokens\":%lld,\"wall_s\":%.3f,"
                   "\"output_tok_s\":%.2f,\"speedup_vs_batch1\":%.3f,\"ttft_p50_ms\":%.1f,"
                   "\"ttft_p99_ms\":%.1f,\"tpot_p50_ms\":%.2f,\"tpot_p99_ms\":%.2f}\n",
                   model, numla_engine_num_threads(eng), numla_comm_size(comm), c, n,
                   (long long)acc.out_tokens, wall, tps, sp, t50, t99, p50, p99);
        else
            printf("%12d %9d %13.1f %9.2f %12.1f %12.1f %12.2f %12.2f\n", c, n, tps, sp, t50,
                   t99, p50, p99);
        /* where the level's time went: to stderr with --json, so stdout stays one object per
         * line */
        FILE *pf = json ? stderr : stdout;
        fprintf(pf, "  concurrency %d: %lld steps, %.1f tokens/step, step time %.2f of %.2f s "
                    "wall; profile s:", c, (long long)steps,
                steps ? (double)step_tokens / (double)steps : 0.0, es1.step_s - es0.step_s, wall);
        for (int p = 0; p < NUMLA_MODEL_PART_COUNT; p++)
            fprintf(pf, " %s %.2f", numla_model_part_names[p], m->part_s[p] - part0[p]);
        fprintf(pf, " (attention's form-specific part %.2f, attention kernels %.2f; linear "
                    "layers %.2f)\n", m->attn_s - attn0, m->attn_kernel_s - attk0,
                m->linear_s - lin0);
        fflush(stdout);
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "numla bench serve: %s\n%s", numla_error_message(), numla_error_trace());
    rc = 1;
done:
    numla_sched_destroy(&sc);
    if (rq)
        for (int i = 0; i < nreq_max; i++)
            free(rq[i].prompt_tokens);
    free(rq);
    free(acc.ttft);
    free(acc.tpot);
    numla_engine_destroy(&eng);
    numla_comm_destroy(&comm);
    if (own)
        MPI_Finalize();
    return rc;
}

NUMLA_CLI_COMMAND("bench serve", bench_serve_main,
                  "serving throughput at concurrency 1/8/32 with continuous batching (--model "
                  "DIR [--json] [--quick])")
