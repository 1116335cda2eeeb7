/* bench/bench_formats.c — `numla bench formats --model DIR [--weights bf16,fp8,int8]
 * [--threads N] [--tokens 128] [--prompt 64] [--json]`: batch-1 decode of one checkpoint in
 * several weight formats, loaded side by side in one process (one engine each) and stepped in
 * turn: round k runs one decode step of every format. On a machine whose speed drifts or
 * switches between levels from minute to minute (a shared VM), formats measured in separate
 * runs are not comparable; steps taken in alternation see the same machine. Reports per format
 * the median step, tokens/s, the weight bytes a token reads (bench/bench_model.h) and the
 * bandwidth that makes, decode_bw_frac against the read bandwidth measured in the same run, and
 * the speed-up over the first format two ways: the ratio of the medians and the median of the
 * per-round ratios. One rank (run without mpirun); the first format is the baseline. A
 * DeepSeek-V4 model runs its weights as stored (FP8 projections and FP4 experts, or a GGUF
 * file's blocks), so its formats are the two activation modes of those weights: stored (exact
 * fp32 activations) and stored-q8 (int8 activations, --linear-act q8). Prints, never asserts. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/bench_model.h"
#include "bench/bench_opts.h"
#include "comm/comm.h"
#include "engine/cli/cli.h"
#include "engine/cli/settings.h"
#include "engine/model/model.h"
#include "engine/model/model_v4.h"
#include "engine/model/weights.h"
#include "engine/parallel/engine.h"

enum { BF_MAX = 4, BF_BLOCK = 16 };

static void usage(void)
{
    fprintf(stderr, "usage: numla bench formats --model DIR [--weights bf16,fp8,int8 (at most %d, "
                    "the first is the baseline; DeepSeek-V4: stored,stored-q8)] [--keep-lm-head] "
                    "[--threads N] [--tokens 128] [--prompt 64] [--no-bind] [--json]\n", BF_MAX);
}

typedef struct bf_opts {
    numla_cli_engine_opts e; /* --model, --threads, --keep-lm-head (--weights is a list here) */
    const char *formats;
    int tokens, prompt, json, bind;
} bf_opts;

/* One format: its engine, the sequence's block table and the step times. */
typedef struct bf_fmt {
    char name[16];
    numla_weights_options wo;
    numla_engine *e;
    int32_t *bt;                 /* (mb) */
    double *dt;                  /* (tokens) seconds per decode step */
    double bytes;                /* weight bytes a decode token reads */
    double med;
    double part0[NUMLA_MODEL_PART_COUNT], part[NUMLA_MODEL_PART_COUNT]; /* seconds: cumulative at
                                                   the start, then per token of the rounds */
} bf_fmt;

static int bf_parse(int argc, char **argv, bf_opts *o)
{
    static const char *const cmd = "numla bench formats";
    static const char *const shared[] = {"--model", "--threads", "--keep-lm-head", NULL};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        const int r = numla_bench_engine_opt(cmd, &o->e, shared, argc, argv, &i);
        if (r == NUMLA_CLI_OPT_BAD)
            return 2;
        if (r != NUMLA_CLI_OPT_NONE)
            continue;
        int *num = !strcmp(a, "--tokens") ? &o->tokens : !strcmp(a, "--prompt") ? &o->prompt : NULL;
        if (num) {
            if (!numla_bench_int_opt(cmd, argc, argv, &i, num))
                return 2;
        } else if (!strcmp(a, "--json"))
            o->json = 1;
        else if (!strcmp(a, "--no-bind"))
            o->bind = 0;
        else if (!strcmp(a, "--weights") && v)
            o->formats = argv[++i];
        else {
            usage();
            return 2;
        }
    }
    if (!o->e.model || o->tokens < 1 || o->prompt < 1) {
        usage();
        return 2;
    }
    return numla_cli_engine_opts_check(cmd, &o->e);
}

/* The comma-separated list into f[] (v4: a DeepSeek-V4 model, whose formats are stored and
 * stored-q8); returns the count, 0 on a bad name (printed). */
static int bf_formats(const bf_opts *o, int v4, bf_fmt *f)
{
    int n = 0;
    const char *p = o->formats;
    while (*p) {
        size_t len = strcspn(p, ",");
        if (n == BF_MAX || len == 0 || len >= sizeof f[n].name) {
            fprintf(stderr, "numla bench formats: --weights %s: give 1 to %d of bf16, fp8, int8\n",
                    o->formats, BF_MAX);
            return 0;
        }
        memcpy(f[n].name, p, len);
        f[n].name[len] = '\0';
        f[n].wo = numla_weights_options_default();
        f[n].wo.keep_lm_head = o->e.weights.keep_lm_head;
        if (v4) {
            f[n].wo.qblock_q8_act = !strcmp(f[n].name, "stored-q8");
            if (!f[n].wo.qblock_q8_act && strcmp(f[n].name, "stored")) {
                fprintf(stderr, "numla bench formats: --weights: '%s': deepseek_v4 runs its "
                        "weights as stored; give stored and/or stored-q8 (its FP4 experts and "
                        "GGUF blocks on int8 activations)\n", f[n].name);
                return 0;
            }
        } else if (!numla_weights_format_parse(f[n].name, &f[n].wo)) {
            fprintf(stderr, "numla bench formats: --weights: '%s' is not bf16, fp8 or int8\n",
                    f[n].name);
            return 0;
        }
        n++;
        p += len + (p[len] == ',');
    }
    return n;
}

/* Weight bytes a decode token of engine e reads, counted from its loaded weights (a block
 * format's recipe mixes encodings: Q4_K_M keeps some tensors in Q6_K). */
static numla_status bf_bytes(numla_engine *e, double *bytes)
{
    const numla_model *m = numla_engine_model(e);
    const numla_v4_model *v4 = numla_engine_v4_model(e);
    numla_bench_model_costs co;
    if (v4)
        NUMLA_CHECK(numla_bench_model_costs_v4(v4, &co));
    else if (m)
        NUMLA_CHECK(numla_bench_model_costs_loaded(numla_model_get_weights(m),
                                                   numla_engine_kv_cache(e)->dtype, &co));
    else
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "bench formats: the engine holds no model");
    *bytes = co.weight_bytes;
    return NUMLA_STATUS_OK;
}

/* n new tokens of f's sequence at positions at..at+n-1 (tokens from *rng); its wall time. */
static double bf_step(bf_fmt *f, int at, int n, uint32_t *rng, int32_t *tok, int32_t *pos,
                      int64_t *slot, float *logits, numla_status *s)
{
    const int64_t V = numla_engine_config(f->e)->vocab_size;
    for (int i = 0; i < n; i++) {
        *rng = *rng * 1664525u + 1013904223u;
        tok[i] = (int32_t)(2 + (*rng >> 8) % (uint32_t)(V - 2));
        pos[i] = at + i;
        slot[i] = (int64_t)f->bt[(at + i) / BF_BLOCK] * BF_BLOCK + (at + i) % BF_BLOCK;
    }
    int32_t q2[2] = {0, n}, len = at + n, row = n - 1;
    const int32_t mb = (int32_t)((len + BF_BLOCK - 1) / BF_BLOCK);
    numla_step st = {.num_seqs = 1, .num_tokens = n, .tokens = tok, .positions = pos,
                     .slots = slot, .query_start_loc = q2, .seq_lens = &len,
                     .block_tables = f->bt, .max_blocks_per_seq = mb, .num_logit_rows = 1,
                     .logit_rows = &row};
    double t0 = numla_now_s();
    *s = numla_engine_step(f->e, &st, logits);
    return numla_now_s() - t0;
}

static void bf_report(const bf_opts *o, bf_fmt *f, int nf, double bw, int nth)
{
    double *ratio = malloc(sizeof *ratio * (size_t)o->tokens);
    if (!o->json)
        printf("bench formats: %s, batch-1 decode after %d tokens, %d rounds of one step per "
               "format in turn, %d thread%s; read bandwidth %.2f GB/s (same run)\n"
               "  %-9s %9s %9s %10s %8s %8s %12s %14s\n", o->e.model, o->prompt, o->tokens, nth,
               nth > 1 ? "s" : "", bw, "format", "median_ms", "tok/s", "MB/token", "GB/s",
               "bw_frac", "vs_first", "vs_first_rounds");
    for (int i = 0; i < nf; i++) {
        f[i].med = numla_bench_median(f[i].dt, o->tokens);
        for (int k = 0; ratio && k < o->tokens; k++)
            ratio[k] = f[0].dt[k] / f[i].dt[k];
        const double rr = ratio ? numla_bench_median(ratio, o->tokens) : 0;
        const double tps = 1.0 / f[i].med, gbs = f[i].bytes * tps / 1e9;
        if (o->json)
            printf("{\"bench\": \"formats\", \"model\": \"%s\", \"format\": \"%s\", \"threads\": "
                   "%d, \"tokens\": %d, \"median_ms\": %.4f, \"tok_s\": %.3f, \"weight_bytes\": "
                   "%.0f, \"gbps\": %.3f, \"read_gbps\": %.3f, \"decode_bw_frac\": %.4f, "
                   "\"speedup_vs_first\": %.4f, \"speedup_vs_first_rounds\": %.4f}\n", o->e.model,
                   f[i].name, nth, o->tokens, 1e3 * f[i].med, tps, f[i].bytes, gbs, bw,
                   bw > 0 ? gbs / bw : 0, f[0].med / f[i].med, rr);
        else
            printf("  %-9s %9.3f %9.2f %10.1f %8.2f %8.3f %12.3f %14.3f\n", f[i].name,
                   1e3 * f[i].med, tps, f[i].bytes / 1e6, gbs, bw > 0 ? gbs / bw : 0,
                   f[0].med / f[i].med, rr);
    }
    if (!o->json) {
        printf("  (vs_first: the first format's median step over this one's; vs_first_rounds: "
               "the median over rounds of the same ratio within a round)\n");
        /* DeepSeek-V4 keeps no per-part counters: no profile */
        const int profile = numla_engine_model(f[0].e) != NULL;
        if (profile)
            printf("  step profile, ms per token (rank 0):\n");
        for (int i = 0; profile && i < nf; i++) {
            printf("  %-6s", f[i].name);
            for (int p = 0; p < NUMLA_MODEL_PART_COUNT; p++)
                printf(" %s %.3f", numla_model_part_names[p], 1e3 * f[i].part[p]);
            printf("\n");
        }
    }
    fflush(stdout);
    free(ratio);
}

static int bench_formats_main(int argc, char **argv)
{
    bf_opts o = {.tokens = 128, .prompt = 64, .bind = 1};
    numla_cli_engine_opts_default(&o.e);
    int rc = bf_parse(argc, argv, &o);
    if (rc >= 0)
        return rc;
    numla_model_config cfg;
    const int v4 = numla_model_config_load(o.e.model, &cfg) == NUMLA_STATUS_OK && cfg.v4.enabled;
    if (!o.formats)
        o.formats = v4 ? "stored,stored-q8" : "bf16,fp8,int8";
    bf_fmt f[BF_MAX];
    memset(f, 0, sizeof f);
    const int nf = bf_formats(&o, v4, f);
    if (nf == 0)
        return 2;
    numla_comm_session mpi;
    numla_settings set;
    numla_status s = numla_settings_start(&set, &mpi);
    if (s != NUMLA_STATUS_OK)
        numla_comm_abort(NULL, s, "bench formats: %s", numla_error_message());
    if (numla_comm_size(mpi.comm) != 1) {
        if (numla_comm_rank(mpi.comm) == 0)
            fprintf(stderr, "numla bench formats: runs on one rank (start it without mpirun)\n");
        numla_comm_world_finalize(&mpi);
        return 2;
    }
    const int ctx = o.prompt + o.tokens + 2;
    const int32_t mb = (int32_t)((ctx + BF_BLOCK - 1) / BF_BLOCK);
    const int maxT = o.prompt;
    int32_t *tok = malloc(sizeof *tok * (size_t)maxT), *pos = malloc(sizeof *pos * (size_t)maxT);
    int64_t *slot = malloc(sizeof *slot * (size_t)maxT);
    float *logits = NULL;
    uint32_t rng = 7;
    int nth = 0;
    rc = 1;
    for (int i = 0; i < nf && tok && pos && slot; i++) {
        numla_engine_options eo = numla_engine_options_default();
        numla_settings_engine_options(&set, &eo);
        eo.num_threads = o.e.threads;
        eo.bind = o.bind;
        eo.block_size = BF_BLOCK;
        eo.num_blocks = mb;
        eo.num_blocks_seqs = 1; /* deepseek_v4: and the blocks its sequence holds for its own cache */
        eo.weights = f[i].wo;
        if ((s = numla_engine_create(mpi.comm, o.e.model, &eo, &f[i].e)) != NUMLA_STATUS_OK ||
            (s = bf_bytes(f[i].e, &f[i].bytes)) != NUMLA_STATUS_OK)
            goto done;
        nth = numla_engine_num_threads(f[i].e);
        f[i].bt = malloc(sizeof *f[i].bt * (size_t)mb);
        f[i].dt = malloc(sizeof *f[i].dt * (size_t)o.tokens);
        float *lg = realloc(logits, sizeof *logits * (size_t)numla_engine_config(f[i].e)->vocab_size);
        if (lg) /* realloc freed the old buffer when it moved it */
            logits = lg;
        if (!f[i].bt || !f[i].dt || !lg) {
            fprintf(stderr, "numla bench formats: no memory for the %s engine's buffers\n", f[i].name);
            goto done;
        }
        for (int32_t j = 0; j < mb; j++)
            if ((s = numla_kv_cache_alloc_block(numla_engine_kv_cache(f[i].e), &f[i].bt[j])) !=
                NUMLA_STATUS_OK)
                goto done;
    }
    if (!tok || !pos || !slot || !logits) {
        fprintf(stderr, "numla bench formats: no memory for the step buffers\n");
        goto done;
    }
    /* the same prompt for each (the rng restarts), then one warm-up step each */
    for (int i = 0; i < nf; i++) {
        uint32_t r = rng;
        bf_step(&f[i], 0, o.prompt, &r, tok, pos, slot, logits, &s);
        if (s == NUMLA_STATUS_OK)
            bf_step(&f[i], o.prompt, 1, &r, tok, pos, slot, logits, &s);
        if (s != NUMLA_STATUS_OK)
            goto done;
    }
    for (int i = 0; i < nf && numla_engine_model(f[i].e); i++) {
        numla_model_stats ms;
        numla_model_get_stats(numla_engine_model(f[i].e), &ms);
        memcpy(f[i].part0, ms.part_s, sizeof f[i].part0);
    }
    for (int k = 0; k < o.tokens; k++)
        for (int i = 0; i < nf; i++) {
            uint32_t r = rng + (uint32_t)k;
            f[i].dt[k] = bf_step(&f[i], o.prompt + 1 + k, 1, &r, tok, pos, slot, logits, &s);
            if (s != NUMLA_STATUS_OK)
                goto done;
        }
    for (int i = 0; i < nf && numla_engine_model(f[i].e); i++) {
        numla_model_stats ms;
        numla_model_get_stats(numla_engine_model(f[i].e), &ms);
        for (int p = 0; p < NUMLA_MODEL_PART_COUNT; p++)
            f[i].part[p] = (ms.part_s[p] - f[i].part0[p]) / o.tokens;
    }
    bf_report(&o, f, nf, numla_bench_read_gbps(nth, numla_bench_stream_bytes(), 5), nth);
    rc = 0;
done:
    if (rc != 0 && s != NUMLA_STATUS_OK) /* (the out-of-memory cases said so above) */
        fprintf(stderr, "numla bench formats: %s\n", numla_error_message());
    for (int i = 0; i < nf; i++) {
        numla_engine_destroy(&f[i].e);
        free(f[i].bt);
        free(f[i].dt);
    }
    free(tok);
    free(pos);
    free(slot);
    free(logits);
    numla_comm_world_finalize(&mpi);
    return rc;
}

NUMLA_CLI_COMMAND("bench formats", bench_formats_main,
                  "batch-1 decode of one model in several weight formats, stepped in turn in one "
                  "process (--model DIR [--weights bf16,fp8,int8]; DeepSeek-V4: stored,stored-q8)")
