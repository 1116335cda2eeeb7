/* bench/bench_sampler.c — `numla bench sampler [--json] [--vocab V] [--reps R]`: time per row of
 * logits of engine/sampler for greedy, temperature, top_k and top_p, against one vectorised
 * read of the same row measured in the same run (the least any sampler must do). Rank 0 samples
 * the rows of a step on its team (engine/serving/scheduler.c), so at batch B a step pays about
 * B / threads of these. Prints the ratio ("passes"); never asserts a time. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/bench_opts.h"
#include "engine/cli/cli.h"
#include "engine/serving/sampler.h"

static uint32_t numla_bench_smp_lcg_(uint32_t *x)
{
    *x = *x * 1664525u + 1013904223u;
    return *x >> 8;
}

/* Logits (V) with std `spread` (sum of 4 uniforms) plus a few peaks, like a model's row. */
static void numla_bench_smp_fill_(float *lg, int32_t V, float spread, uint32_t seed)
{
    for (int32_t i = 0; i < V; i++) {
        float u = 0;
        for (int k = 0; k < 4; k++)
            u += (float)(numla_bench_smp_lcg_(&seed) % 65536) / 65536.0f - 0.5f;
        lg[i] = u * spread * 1.7320508f; /* 4 uniforms: std 1/sqrt(3) */
    }
    for (int k = 0; k < 8; k++)
        lg[numla_bench_smp_lcg_(&seed) % (uint32_t)V] = spread * (4.0f + (float)k * 0.5f);
}

/* The baseline: one read of the row, summed (vectorised), best of reps. */
static double numla_bench_smp_pass_(const float *lg, int32_t V, int reps)
{
    volatile float sink = 0; /* keeps the sums */
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = numla_now_s();
        float s = 0;
#pragma omp simd reduction(+ : s)
        for (int32_t i = 0; i < V; i++)
            s += lg[i];
        double dt = numla_now_s() - t0;
        sink = s;
        best = dt < best ? dt : best;
    }
    (void)sink;
    return best;
}

typedef struct {
    const char *name;
    double temperature, top_p;
    int32_t top_k;
    float spread; /* logit std: 2.5 model-like, 0.5 flat (a large nucleus) */
} numla_bench_smp_case;

static int numla_bench_sampler(int argc, char **argv)
{
    int json = 0, reps = 200;
    int32_t V = 102400;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else if (strcmp(argv[i], "--vocab") == 0 || strcmp(argv[i], "--reps") == 0) {
            if (!numla_bench_int_opt("numla bench sampler", argc, argv, &i,
                                     !strcmp(argv[i], "--vocab") ? &V : &reps))
                return 2;
        } else {
            fprintf(stderr, "usage: numla bench sampler [--json] [--vocab V (102400)] "
                            "[--reps R (200)]\n");
            return 2;
        }
    }
    if (V < 2 || reps < 1) {
        fprintf(stderr, "numla bench sampler: --vocab must be >= 2 and --reps >= 1\n");
        return 2;
    }
    static const numla_bench_smp_case cases[] = {
        {"greedy", 0.0, 1.0, 0, 2.5},
        {"temperature", 0.7, 1.0, 0, 2.5},
        {"top_k 40", 0.7, 1.0, 40, 2.5},
        {"top_p 0.9", 0.7, 0.9, 0, 2.5},
        {"top_k 40 top_p 0.9", 0.7, 0.9, 40, 2.5},
        {"top_p 0.95 flat", 1.0, 0.95, 0, 0.5},
    };
    float *lg = malloc((size_t)V * sizeof *lg);
    if (!lg) {
        fprintf(stderr, "numla bench sampler: no memory for %d logits\n", V);
        return 1;
    }
    if (!json)
        printf("bench sampler: vocab %d, 1 thread, best of %d rows per case; passes = time / one "
               "vectorised read of the row\n%-20s %10s %10s %8s %12s\n",
               V, reps, "case", "us/row", "read us", "passes", "distinct");
    int rc = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const numla_bench_smp_case *k = &cases[c];
        numla_bench_smp_fill_(lg, V, k->spread, 12345u + (uint32_t)c);
        numla_sampling_params p;
        numla_sampling_params_default(&p);
        p.temperature = k->temperature;
        p.top_p = k->top_p;
        p.top_k = k->top_k;
        p.has_seed = 1;
        p.seed = 7;
        numla_sampler *s = NULL;
        if (numla_sampler_create(&p, V, &s) != NUMLA_STATUS_OK) {
            fprintf(stderr, "numla bench sampler: %s\n", numla_error_message());
            rc = 1;
            break;
        }
        const double pass = numla_bench_smp_pass_(lg, V, reps);
        double best = 1e30;
        int distinct = 0;
        static int32_t seen[64];
        for (int r = 0; r < reps && rc == 0; r++) {
            int32_t t = -1;
            double t0 = numla_now_s();
            numla_status st = numla_sampler_sample(s, lg, &t, NULL);
            double dt = numla_now_s() - t0;
            if (st != NUMLA_STATUS_OK) {
                fprintf(stderr, "numla bench sampler: %s\n", numla_error_message());
                rc = 1;
            }
            best = dt < best ? dt : best;
            int j = 0; /* distinct tokens drawn (up to 64): says the case really samples */
            while (j < distinct && seen[j] != t)
                j++;
            if (j == distinct && distinct < 64)
                seen[distinct++] = t;
        }
        numla_sampler_destroy(&s);
        if (rc)
            break;
        if (json)
            printf("{\"bench\": \"sampler\", \"case\": \"%s\", \"vocab\": %d, \"temperature\": %g, "
                   "\"top_k\": %d, \"top_p\": %g, \"us_per_row\": %.3f, \"read_us\": %.3f, "
                   "\"passes\": %.2f, \"distinct_tokens\": %d}\n",
                   k->name, V, k->temperature, k->top_k, k->top_p, best * 1e6, pass * 1e6,
                   best / pass, distinct);
        else
            printf("%-20s %10.2f %10.2f %8.2f %12d\n", k->name, best * 1e6, pass * 1e6,
                   best / pass, distinct);
    }
    free(lg);
    return rc;
}

NUMLA_CLI_COMMAND("bench sampler", numla_bench_sampler,
                  "[--json] [--vocab V]: sampling time per logits row vs one read of it")
