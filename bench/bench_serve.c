/* bench/bench_serve.c — `numla bench serve`: serving throughput with continuous batching
 * (engine/serving/scheduler.h over engine/parallel/engine.h) at concurrency 1, 8 and 32: greedy requests with
 * mixed prompt lengths and 128 output tokens each, `concurrency` sequences in flight
 * (max_seqs), 2 x concurrency requests per level. The n prompt lengths of a level are evenly
 * spaced over 64..1024 (stratified, then shuffled into a random arrival order), so every level
 * serves the same length distribution with the same mean (544) and the ratios compare
 * concurrency alone, not two samples of different prompts. Reports output tok/s,
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
#include "engine/cli/cli.h"
#include "engine/cli/settings.h"
#include "engine/parallel/engine.h"
#include "engine/model/model.h"
#include "engine/serving/scheduler.h"

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

static uint64_t bs_lcg(uint64_t *x)
{
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    return *x >> 33;
}

/* rq[0..n): prompt lengths pmin + (2j + 1)(pmax - pmin + 1) / 2n for j < n (the midpoints of n
 * equal strata), in a shuffled order, random tokens below vocab; greedy, out_tokens each.
 * Frees the prompts rq held. Returns the total prompt tokens, or -1 without memory. */
static int64_t bs_requests(numla_request *rq, int n, int32_t pmin, int32_t pmax,
                           int32_t out_tokens, int64_t vocab)
{
    uint64_t rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        free(rq[i].prompt_tokens);
        rq[i].prompt_tokens = NULL;
        rq[i].num_prompt = pmin + (int32_t)(((int64_t)(2 * i + 1) * (pmax - pmin + 1)) / (2 * n));
    }
    for (int i = n - 1; i > 0; i--) { /* Fisher-Yates */
        int j = (int)(bs_lcg(&rng) % (uint64_t)(i + 1));
        int32_t t = rq[i].num_prompt;
        rq[i].num_prompt = rq[j].num_prompt;
        rq[j].num_prompt = t;
    }
    for (int i = 0; i < n; i++) {
        const int32_t P = rq[i].num_prompt;
        rq[i].line = i + 1;
        rq[i].prompt_tokens = malloc((size_t)P * sizeof(int32_t));
        if (!rq[i].prompt_tokens)
            return -1;
        for (int32_t t = 0; t < P; t++)
            rq[i].prompt_tokens[t] = (int32_t)(bs_lcg(&rng) % (uint64_t)vocab);
        numla_sampling_params_default(&rq[i].params);
        rq[i].params.temperature = 0;
        rq[i].params.max_tokens = out_tokens;
        rq[i].params.ignore_eos = 1;
        total += P;
    }
    return total;
}

static numla_status bs_exec(void *ctx, const numla_step *st, float *logits)
{
    return numla_engine_step(ctx, st, logits);
}

/* One level of one repetition. */
typedef struct bs_level {
    int requests;
    int64_t prompt_tokens, out_tokens;
    double wall, tps, ttft50, ttft99, tpot50, tpot99; /* s, tok/s, ms */
} bs_level;

static void bs_print_level(const bs_level *lv, const bs_level *base, int c, int rp, int repeat,
                           int json, const char *model, int threads, int ranks)
{
    const double sp = base->tps > 0 ? lv->tps / base->tps : 0;
    if (json)
        printf("{\"bench\":\"serve\",\"model\":\"%s\",\"threads\":%d,\"ranks\":%d,"
               "\"repetition\":%d,\"concurrency\":%d,\"requests\":%d,\"prompt_tokens\":%lld,"
               "\"output_tokens\":%lld,\"wall_s\":%.3f,\"output_tok_s\":%.2f,"
               "\"speedup_vs_batch1\":%.3f,\"ttft_p50_ms\":%.1f,\"ttft_p99_ms\":%.1f,"
               "\"tpot_p50_ms\":%.2f,\"tpot_p99_ms\":%.2f}\n",
               model, threads, ranks, rp, c, lv->requests, (long long)lv->prompt_tokens,
               (long long)lv->out_tokens, lv->wall, lv->tps, sp, lv->ttft50, lv->ttft99,
               lv->tpot50, lv->tpot99);
    else
        printf("%12d %9d %11.1f %13.1f %9.2f %12.1f %12.1f %12.2f %12.2f%s\n", c, lv->requests,
               (double)lv->prompt_tokens / lv->requests, lv->tps, sp, lv->ttft50, lv->ttft99,
               lv->tpot50, lv->tpot99,
               repeat > 1 ? (rp % 2 ? "   (backward sweep)" : "   (forward sweep)") : "");
    fflush(stdout);
}

static int bs_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Over the repetitions, per level: the median tok/s and the median, min and max of the
 * repetitions' own speedups (each against its own level 0). */
static void bs_print_summary(const bs_level *res, const int *conc, int nconc, int repeat, int json)
{
    if (!json)
        printf("median of %d repetitions:\n%12s %13s %9s %15s\n", repeat, "concurrency",
               "output tok/s", "speedup", "speedup min-max");
    for (int k = 0; k < nconc; k++) {
        double tps[64], sp[64];
        for (int r = 0; r < repeat; r++) {
            tps[r] = res[r * nconc + k].tps;
            sp[r] = res[r * nconc].tps > 0 ? tps[r] / res[r * nconc].tps : 0;
        }
        qsort(tps, (size_t)repeat, sizeof *tps, bs_cmp_double);
        qsort(sp, (size_t)repeat, sizeof *sp, bs_cmp_double);
        const double mt = repeat % 2 ? tps[repeat / 2] : 0.5 * (tps[repeat / 2 - 1] + tps[repeat / 2]);
        const double ms = repeat % 2 ? sp[repeat / 2] : 0.5 * (sp[repeat / 2 - 1] + sp[repeat / 2]);
        if (json)
            printf("{\"bench\":\"serve_summary\",\"repetitions\":%d,\"concurrency\":%d,"
                   "\"output_tok_s\":%.2f,\"speedup_vs_batch1\":%.3f,\"speedup_min\":%.3f,"
                   "\"speedup_max\":%.3f}\n",
                   repeat, conc[k], mt, ms, sp[0], sp[repeat - 1]);
        else
            printf("%12d %13.1f %9.2f %7.2f-%-7.2f\n", conc[k], mt, ms, sp[0], sp[repeat - 1]);
    }
    fflush(stdout);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: numla bench serve --model DIR [--json] [--quick] [--threads N]\n"
               "                         [--concurrency 1,8,32] [--output-tokens 128]\n"
               "                         [--min-prompt 64] [--max-prompt 1024] [--rounds 2]\n"
               "                         [--max-batch-tokens 2048] [--prefill-chunk 512]\n"
               "                         [--repeat 1]\n");
}

static int bench_serve_main(int argc, char **argv)
{
    const char *model = NULL, *conc_s = "1,8,32";
    int json = 0, quick = 0, threads = 0, out_tokens = 128, pmin = 64, pmax = 1024, rounds = 2;
    int max_batch_tokens = 2048, prefill_chunk = 512, repeat = 1;
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
        } else if (v && !strcmp(a, "--repeat")) {
            repeat = atoi(argv[++i]);
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
        max_batch_tokens < 1 || prefill_chunk < 1 || repeat < 1 || repeat > 64) {
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
    bs_level *res = NULL;
    bs_acc acc = {0};
    int rc = 1, nreq_max = maxc * rounds;
    numla_status s;
    numla_settings set;
    NUMLA_CHECK_GOTO(numla_settings_load(&set), s, fail);
    NUMLA_CHECK_GOTO(numla_comm_create(MPI_COMM_WORLD, &set.comm, &comm), s, fail);
    numla_engine_options eo = numla_engine_options_default();
    numla_settings_engine_options(&set, &eo);
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
    res = calloc((size_t)repeat * (size_t)nconc, sizeof *res);
    acc.ttft = calloc((size_t)nreq_max, sizeof(double));
    acc.tpot = calloc((size_t)nreq_max, sizeof(double));
    if (!rq || !res || !acc.ttft || !acc.tpot) {
        fprintf(stderr, "numla bench serve: no memory\n");
        goto done;
    }
    if (!json)
        printf("bench serve: %s, %d threads, %d rank(s); prompts %d..%d (stratified), %d output "
               "tokens\n%12s %9s %11s %13s %9s %12s %12s %12s %12s\n",
               model, numla_engine_num_threads(eng), numla_comm_size(comm), pmin, pmax,
               out_tokens, "concurrency", "requests", "mean prompt", "output tok/s", "speedup",
               "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms", "TPOT p99 ms");
    /* Repetitions run the levels in alternating order (forward, then backward), so a drift
     * of the machine over the minutes of a sweep weighs on every level alike. */
    for (int r = 0; r < repeat * nconc; r++) {
        const int rp = r / nconc, ci = rp % 2 ? nconc - 1 - r % nconc : r % nconc;
        int c = conc[ci], n = c * rounds;
        const int64_t prompt_tokens = bs_requests(rq, n, pmin, pmax, out_tokens, cfg->vocab_size);
        if (prompt_tokens < 0) {
            fprintf(stderr, "numla bench serve: no memory for the prompts\n");
            goto done;
        }
        numla_sched_options so = {.max_batch_tokens = max_batch_tokens > c ? max_batch_tokens : c,
                                  .max_seqs = c, .prefill_chunk = prefill_chunk,
                                  .vocab_size = cfg->vocab_size,
                                  .num_eos = cfg->num_eos, .eos_token_ids = cfg->eos_token_ids};
        memset(&acc, 0, offsetof(bs_acc, ttft));
        acc.n_ttft = acc.n_tpot = 0;
        NUMLA_CHECK_GOTO(numla_sched_create(&so, numla_engine_kv_cache(eng), bs_exec, eng, bs_done,
                                            &acc, &sc), s, fail);
        if (r == 0) { /* warm-up: first touch of scratch and KV, one short request */
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
        bs_level *lv = &res[rp * nconc + ci];
        lv->requests = n;
        lv->prompt_tokens = prompt_tokens;
        lv->out_tokens = acc.out_tokens;
        lv->wall = wall;
        lv->tps = (double)acc.out_tokens / wall;
        lv->ttft50 = 1e3 * numla_bench_percentile(acc.ttft, acc.n_ttft, 50);
        lv->ttft99 = 1e3 * numla_bench_percentile(acc.ttft, acc.n_ttft, 99);
        lv->tpot50 = 1e3 * numla_bench_percentile(acc.tpot, acc.n_tpot, 50);
        lv->tpot99 = 1e3 * numla_bench_percentile(acc.tpot, acc.n_tpot, 99);
        /* where the level's time went: to stderr with --json, so stdout stays one object per
         * line */
        FILE *pf = json ? stderr : stdout;
        fprintf(pf, "  %sconcurrency %d: %lld steps, %.1f tokens/step, step time %.2f of %.2f s "
                    "wall; profile s:", repeat > 1 ? "repetition " : "", c, (long long)steps,
                steps ? (double)step_tokens / (double)steps : 0.0, es1.step_s - es0.step_s, wall);
        for (int p = 0; p < NUMLA_MODEL_PART_COUNT; p++)
            fprintf(pf, " %s %.2f", numla_model_part_names[p], m->part_s[p] - part0[p]);
        fprintf(pf, " (attention's form-specific part %.2f, attention kernels %.2f; linear "
                    "layers %.2f)\n", m->attn_s - attn0, m->attn_kernel_s - attk0,
                m->linear_s - lin0);
        fflush(stdout);
        if (r % nconc == nconc - 1) /* the repetition is complete: its lines, against its level 0 */
            for (int k = 0; k < nconc; k++)
                bs_print_level(&res[rp * nconc + k], &res[rp * nconc], conc[k], rp, repeat, json,
                               model, numla_engine_num_threads(eng), numla_comm_size(comm));
    }
    if (repeat > 1)
        bs_print_summary(res, conc, nconc, repeat, json);
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
    free(res);
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
