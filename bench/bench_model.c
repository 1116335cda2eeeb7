/* bench/bench_model.c — `numla bench model --model DIR [--json] [--threads N] [--quick]
 * [--no-bind]`: end-to-end figures of one model through the collective engine (docs/design.md §7),
 * each against a machine figure measured in the same run:
 *   prefill tokens/s at prompt 512 and the linear layers' GFLOP/s vs the peak of the units
 *     they run on, prefill_peak_frac: the AMX tile peak (numla_bench_peak_amx_gflops) when the
 *     GEMMs use AMX, else the bf16 peak (numla_bench_peak_gflops), which is also reported as
 *     prefill_avx512_peak_frac;
 *   decode tokens/s at batch 1 over 128 tokens after the 512-token prompt (decode_tok_s) and
 *     after a 16384-token context prefilled in chunks (decode_16k_tok_s; --quick: 2048, the
 *     output says so in long_context); --fill-context writes that context's cache rows with
 *     random values instead of prefilling them (one rank; long_prefill_s is then 0), for
 *     contexts whose prefill would take far longer than the decode it prepares;
 *   decode tokens/s over 128 tokens from context 0 (decode_ctx0_tok_s: the window of
 *     llama-bench's tg128, so that scripts/bench_peers compares like with like);
 *   active weight bytes per decode token (bench/bench_model.h), the read bandwidth
 *     (numla_bench_read_gbps), decode_bw_frac = bytes · tok/s / bandwidth;
 *   decode_16k_roofline_frac = max(bytes incl. KV / bandwidth, FLOPs / peak) / time per token;
 *   (tokens/s and both fractions from the total time of the run; the *_median keys from the
 *   median step, which an oversubscribed machine's stalls do not move);
 *   (bandwidth and peak: the best of a reading before and one after the runs);
 *   peak RSS (VmHWM: the larger of the load's peak and the runs' peak, the bandwidth probe's
 *     buffer excluded; ru_maxrss, which includes it, where /proc cannot reset the peak), the
 *     load average, OMP_WAIT_POLICY;
 *   per rank, the decode step split into compute and communication (engine counters).
 * Run as `mpirun -n R numla bench model ...`; 1 rank works without mpirun. Costs are for the
 * whole model; the bandwidth and peak are rank 0's (one node). Prints, never asserts. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench/bench.h"
#include "bench/bench_model.h"
#include "bench/bench_opts.h"
#include "comm/comm.h"
#include "common/log.h"
#include "engine/cli/cli.h"
#include "engine/cli/model_text.h"
#include "engine/cli/settings.h"
#include "engine/parallel/engine.h"

/* --speculative K: verify steps of up to K + 1 rows (scheduler.h NUMLA_SCHED_MAX_DRAFT + 1) */
enum { NUMLA_BENCH_MAX_VERIFY = 9 };

static void usage(void)
{
    fprintf(stderr, "usage: numla bench model --model DIR [--json] [--threads N] [--quick] "
                    "[--no-bind] [--long-context L (16384; --quick 2048)] [--prompt N (512)] [--chunk N (1024, long-context prefill)] "
                    "[--fill-context (random cache rows instead of the long prefill; 1 rank)] "
                    "[--weights bf16|int8|fp8|q8_0|q4_0|q4_k [--keep-lm-head]] [--linear-act f32|bf16|q8] "
                    "[--speculative K (1-8: instead, the cost of verify steps of 2..K+1 rows and "
                    "of an MTP step, and the decode tok/s they give at acceptance 0.6/0.7/0.8; "
                    "the routed experts 1..K+1 consecutive tokens touch) [--text FILE (those "
                    "tokens: FILE's first --prompt tokens; default random ones)] [--mtp-model FILE (a "
                    "deepseek4 GGUF model's MTP layer, the mtp-*.gguf file llama.cpp's "
                    "convert_hf_to_gguf.py --mtp writes)]]\n");
}

typedef struct bm_seq {
    int32_t *bt;  /* (mb) block table */
    int32_t mb;
} bm_seq;

typedef struct bm_ctx {
    numla_engine *e;
    numla_comm *c;
    int32_t *tok, *pos;
    int64_t *slot;
    float *logits;
    double *dt;   /* (max(ndec, nlong)) step times */
    uint32_t rng;
    int64_t V;
} bm_ctx;

static void bm_die(bm_ctx *x, numla_status s)
{
    numla_comm_abort(x->c, s, "bench model: %s", numla_error_message());
}

static int32_t bm_next(bm_ctx *x)
{
    x->rng = x->rng * 1664525u + 1013904223u;
    return (int32_t)(2 + (x->rng >> 8) % (uint32_t)(x->V - 2));
}

/* One step of n new tokens of sequence q at positions at..at+n-1, logits for the last `rows`
 * of them (an MTP step of the model's MTP layer when mtp: hidden rows 0..n-1 of the last main
 * step); returns its wall time. */
static double bm_step_ex(bm_ctx *x, const bm_seq *q, int at, int n, int rows, int mtp)
{
    int32_t hid[NUMLA_BENCH_MAX_VERIFY], lrows[NUMLA_BENCH_MAX_VERIFY];
    for (int i = 0; i < n; i++) {
        int p = at + i;
        x->tok[i] = bm_next(x);
        x->pos[i] = p;
        x->slot[i] = (int64_t)q->bt[p / 16] * 16 + p % 16;
        hid[i] = i;
    }
    for (int r = 0; r < rows; r++)
        lrows[r] = n - rows + r;
    int32_t q2[2] = {0, n}, len = at + n;
    numla_step st = {.num_seqs = 1, .num_tokens = n, .tokens = x->tok, .positions = x->pos,
                     .slots = x->slot, .query_start_loc = q2, .seq_lens = &len,
                     .block_tables = q->bt, .max_blocks_per_seq = q->mb,
                     .num_logit_rows = rows, .logit_rows = lrows};
    double t0 = numla_now_s();
    numla_status s = mtp ? numla_engine_mtp_step(x->e, &st, hid, x->logits)
                         : numla_engine_step(x->e, &st, x->logits);
    if (s != NUMLA_STATUS_OK)
        bm_die(x, s);
    return numla_now_s() - t0;
}

/* An MTP step over positions 0..n-1 of q, each row's hidden state that row of the last main
 * step (a prefill of n tokens). */
static void bm_mtp_prompt(bm_ctx *x, const bm_seq *q, int n)
{
    int32_t *tok = malloc(sizeof *tok * (size_t)n), *pos = malloc(sizeof *pos * (size_t)n);
    int32_t *hid = malloc(sizeof *hid * (size_t)n);
    int64_t *slot = malloc(sizeof *slot * (size_t)n);
    if (!tok || !pos || !hid || !slot)
        bm_die(x, NUMLA_STATUS_NO_MEMORY);
    for (int i = 0; i < n; i++) {
        tok[i] = bm_next(x);
        pos[i] = i;
        hid[i] = i;
        slot[i] = (int64_t)q->bt[i / 16] * 16 + i % 16;
    }
    int32_t q2[2] = {0, n}, len = n;
    numla_step st = {.num_seqs = 1, .num_tokens = n, .tokens = tok, .positions = pos,
                     .slots = slot, .query_start_loc = q2, .seq_lens = &len,
                     .block_tables = q->bt, .max_blocks_per_seq = q->mb};
    numla_status s = numla_engine_mtp_step(x->e, &st, hid, NULL);
    free(tok);
    free(pos);
    free(hid);
    free(slot);
    if (s != NUMLA_STATUS_OK)
        bm_die(x, s);
}

/* One step of the n tokens in x->tok, sequence q's positions at..at+n-1; returns its wall
 * time. */
static double bm_step_tok(bm_ctx *x, const bm_seq *q, int at, int n)
{
    for (int i = 0; i < n; i++) {
        int p = at + i;
        x->pos[i] = p;
        x->slot[i] = (int64_t)q->bt[p / 16] * 16 + p % 16;
    }
    int32_t q2[2] = {0, n}, len = at + n, row = n - 1;
    numla_step st = {.num_seqs = 1, .num_tokens = n, .tokens = x->tok, .positions = x->pos,
                     .slots = x->slot, .query_start_loc = q2, .seq_lens = &len,
                     .block_tables = q->bt, .max_blocks_per_seq = q->mb,
                     .num_logit_rows = 1, .logit_rows = &row};
    double t0 = numla_now_s();
    numla_status s = numla_engine_step(x->e, &st, x->logits);
    if (s != NUMLA_STATUS_OK)
        bm_die(x, s);
    return numla_now_s() - t0;
}

/* One step of n new random tokens of sequence q at positions at..at+n-1; returns its wall
 * time. */
static double bm_step(bm_ctx *x, const bm_seq *q, int at, int n)
{
    for (int i = 0; i < n; i++)
        x->tok[i] = bm_next(x);
    return bm_step_tok(x, q, at, n);
}

static double load1(void)
{
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1)
            l = -1;
        fclose(f);
    }
    return l;
}

/* The process's resident-set peak (VmHWM) in MiB, -1 when /proc does not say. */
static double bm_hwm_mib(void)
{
    double kib = -1;
    char line[256];
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) {
            kib = atof(line + 6);
            break;
        }
    fclose(f);
    return kib < 0 ? -1 : kib / 1024.0;
}

/* Restart the VmHWM peak from the current RSS (Linux: "5" to /proc/self/clear_refs), so the
 * bandwidth probe's buffer, freed by now, does not count as the model's memory. 0 when it
 * cannot. */
static int bm_hwm_reset(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f)
        return 0;
    const int ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok;
}

/* Per-rank split of the steps since the last reset. */
static void bm_ranks(bm_ctx *x, const char *phase, int json, int size)
{
    numla_engine_stats *all = calloc((size_t)size, sizeof *all);
    numla_status s = all ? numla_engine_stats_collect(x->e, all) : NUMLA_STATUS_NO_MEMORY;
    if (s != NUMLA_STATUS_OK)
        bm_die(x, s);
    for (int q = 0; q < size; q++) {
        const numla_engine_stats *a = &all[q];
        double n = a->steps > 0 ? (double)a->steps : 1;
        double step = a->step_s / n, red = a->reduce_s / n, gat = a->gather_s / n;
        double comm = red + gat, bc = a->bcast_s / n;
        if (json)
            printf("{\"bench\": \"model\", \"phase\": \"%s\", \"rank\": %d, \"steps\": %lld, "
                   "\"step_ms\": %.4f, \"compute_ms\": %.4f, \"comm_ms\": %.4f, \"reduce_ms\": "
                   "%.4f, \"gather_ms\": %.4f, \"bcast_ms\": %.4f}\n", phase, q,
                   (long long)a->steps, 1e3 * step, 1e3 * (step - comm), 1e3 * comm, 1e3 * red,
                   1e3 * gat, 1e3 * bc);
        else
            printf("  %-10s rank %d: step %.3f ms = compute %.3f + comm %.3f (allreduce %.3f, "
                   "gather %.3f); plan bcast %.3f ms\n", phase, q, 1e3 * step,
                   1e3 * (step - comm), 1e3 * comm, 1e3 * red, 1e3 * gat, 1e3 * bc);
    }
    free(all);
}

typedef struct bm_opts {
    numla_cli_engine_opts e; /* --model, --threads, --weights, --keep-lm-head, --linear-act,
                              * --mtp-model */
    int json, bind, quick, long_ctx, prompt, chunk;
    int long_ctx_default; /* --long-context not given: cut to the model's context */
    int fill; /* --fill-context */
    int spec; /* --speculative K: the verify-step costs instead */
    const char *text; /* --text FILE: the tokens whose routing --speculative counts */
} bm_opts;

/* Parse the command line into o; returns -1 to go on, else the exit code. */
static int bm_parse_opts(int argc, char **argv, bm_opts *o)
{
    static const char *const cmd = "numla bench model";
    static const char *const shared[] = {"--model", "--threads", "--weights", "--keep-lm-head",
                                         "--linear-act", "--mtp-model", NULL};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int r = numla_bench_engine_opt(cmd, &o->e, shared, argc, argv, &i);
        if (r == NUMLA_CLI_OPT_BAD)
            return 2;
        if (r != NUMLA_CLI_OPT_NONE)
            continue;
        int *num = !strcmp(a, "--long-context") ? &o->long_ctx
                   : !strcmp(a, "--speculative") ? &o->spec
                   : !strcmp(a, "--prompt")     ? &o->prompt
                   : !strcmp(a, "--chunk")      ? &o->chunk
                                                : NULL;
        if (num) {
            if (!numla_bench_int_opt(cmd, argc, argv, &i, num))
                return 2;
        } else if (!strcmp(a, "--text") && i + 1 < argc)
            o->text = argv[++i];
        else if (!strcmp(a, "--json"))
            o->json = 1;
        else if (!strcmp(a, "--quick"))
            o->quick = 1;
        else if (!strcmp(a, "--fill-context"))
            o->fill = 1;
        else if (!strcmp(a, "--no-bind"))
            o->bind = 0;
        else {
            usage();
            return 2;
        }
    }
    if (!o->e.model || o->long_ctx < 0 || o->prompt < 1 || o->chunk < 1 || o->spec < 0 ||
        o->spec >= NUMLA_BENCH_MAX_VERIFY) {
        usage();
        return 2;
    }
    if (o->e.mtp_model && o->spec == 0) {
        fprintf(stderr, "%s: --mtp-model %s is the MTP layer's file for --speculative K, which is "
                "not given\n", cmd, o->e.mtp_model);
        return 2;
    }
    const int rc = numla_cli_engine_opts_check(cmd, &o->e);
    if (rc >= 0)
        return rc;
    o->long_ctx_default = o->long_ctx == 0;
    if (o->long_ctx == 0)
        o->long_ctx = o->quick ? 2048 : 16384;
    return -1;
}

/* The model's cumulative counters and step form: the only place this benchmark reads them. */
typedef struct bm_counters {
    double linear_s, linear_flops, attn_s, attn_kernel_s;
    double part_s[NUMLA_MODEL_PART_COUNT];
    numla_prefill_form prefill_form;
} bm_counters;

static void bm_counters_read(const numla_model *m, bm_counters *c)
{
    if (!m) { /* deepseek_v4 runs its own forward, which keeps no counters */
        memset(c, 0, sizeof *c);
        return;
    }
    numla_model_stats st;
    numla_model_get_stats(m, &st);
    c->linear_s = st.linear_s;
    c->linear_flops = st.linear_flops;
    c->attn_s = st.attn_s;
    c->attn_kernel_s = st.attn_kernel_s;
    memcpy(c->part_s, st.part_s, sizeof c->part_s);
    c->prefill_form = numla_model_get_options(m).prefill_form;
}

/* The weights' kernel level and dtypes (for the costs and the peaks). */
typedef struct bm_weights_info {
    numla_isa isa;
    numla_dtype lm_head_dtype, embed_dtype;
    numla_weight_format format; /* the projections' 8-bit format, NONE for float */
    int lm_head_q8;
} bm_weights_info;

static void bm_weights_info_read(const numla_engine *e, bm_weights_info *w)
{
    const numla_model *m = numla_engine_model(e);
    if (!m) { /* deepseek_v4: as the checkpoint stores them */
        *w = (bm_weights_info){.isa = numla_engine_isa(e), .lm_head_dtype = NUMLA_DTYPE_BF16,
                               .embed_dtype = NUMLA_DTYPE_F32};
        return;
    }
    const numla_model_weights *mw = numla_model_get_weights(m);
    w->isa = mw->isa;
    /* a block lm_head counts in the projections' encoding (exact counts: the one-rank path) */
    w->lm_head_q8 = mw->lm_head_q8 || mw->lm_head.kind == NUMLA_MODEL_LINEAR_QBLOCK;
    w->lm_head_dtype = mw->lm_head_q8 ? NUMLA_DTYPE_BF16 : mw->lm_head.lin.dtype;
    w->embed_dtype = mw->embed_dtype;
    w->format = mw->format;
}

/* Everything rank 0 measures. */
typedef struct bm_results {
    int nth, ndec, nlong, amx;
    int v4;                                            /* deepseek_v4: no counters */
    double v4_cache_tok, v4_cache_seq;                 /* deepseek_v4: cache values per token
                                                        * once long, and per sequence besides
                                                        * (numla_v4_config_sizes) */
    int v4_cache_es;                                   /* bytes a value (its cache dtype) */
    double bw, peak, amx_peak;                         /* machine figures (best of two) */
    double pf_best, pf_lin_s, pf_lin_fl, pf_attn_s, pf_attn_k_s;
    double pf_part[NUMLA_MODEL_PART_COUNT];
    double dec_part[NUMLA_MODEL_PART_COUNT]; /* per decode token (the 128 after the prompt) */
    const char *pf_form;
    double dec0_total, dec0_med; /* the 128 decode tokens from context 0 */
    double dec_total, dec_med, long_pf, long_pf_attn, long_pf_attn_k, long_total, long_med;
    double rss_mib, load_start, load_dec, load_long;
    double long_part[NUMLA_MODEL_PART_COUNT]; /* per decode token after the long context */
    numla_bench_model_costs co;
} bm_results;

/* Block tables for the two sequences (prompt + decode, long context + decode) and the step
 * buffers. */
static void bm_setup(bm_ctx *x, const bm_opts *o, bm_seq *sa, bm_seq *sb, int ndec)
{
    numla_kv_cache *kv = numla_engine_kv_cache(x->e);
    numla_status s;
    x->V = numla_engine_config(x->e)->vocab_size;
    const int maxT = o->chunk > o->prompt ? o->chunk : o->prompt;
    x->tok = malloc(sizeof *x->tok * (size_t)maxT);
    x->pos = malloc(sizeof *x->pos * (size_t)maxT);
    x->slot = malloc(sizeof *x->slot * (size_t)maxT);
    x->logits = malloc(sizeof *x->logits * (size_t)x->V);
    sa->bt = malloc(sizeof *sa->bt * (size_t)sa->mb);
    sb->bt = malloc(sizeof *sb->bt * (size_t)sb->mb);
    x->dt = malloc(sizeof *x->dt * (size_t)ndec);
    if (!x->tok || !x->pos || !x->slot || !x->logits || !sa->bt || !sb->bt || !x->dt)
        bm_die(x, NUMLA_STATUS_NO_MEMORY);
    for (int j = 0; j < sa->mb; j++)
        if ((s = numla_kv_cache_alloc_block(kv, &sa->bt[j])) != NUMLA_STATUS_OK)
            bm_die(x, s);
    for (int j = 0; j < sb->mb; j++)
        if ((s = numla_kv_cache_alloc_block(kv, &sb->bt[j])) != NUMLA_STATUS_OK)
            bm_die(x, s);
}

/* Read bandwidth, bf16 peak and (when the prefill GEMMs use AMX) the tile peak, keeping the
 * best of this and any earlier reading: on a shared machine a low reading would flatter every
 * fraction. */
static void bm_machine_figures(bm_results *r, numla_isa isa)
{
    const double bw = numla_bench_read_gbps(r->nth, numla_bench_stream_bytes(), 5);
    const double peak = numla_bench_peak_gflops(isa, r->nth, 5);
    r->bw = bw > r->bw ? bw : r->bw;
    r->peak = peak > r->peak ? peak : r->peak;
    if (r->amx) {
        const double a = numla_bench_peak_amx_gflops(r->nth, 5);
        r->amx_peak = a > r->amx_peak ? a : r->amx_peak;
    }
}

/* Prefill: one step of the whole prompt (rewriting the same slots each repetition). */
static void bm_prefill(bm_ctx *x, const bm_opts *o, const bm_seq *sa, bm_results *r)
{
    const numla_model *m = numla_engine_model(x->e);
    const int reps = o->quick ? 1 : 2;
    r->pf_best = 1e30;
    for (int rep = 0; rep < reps; rep++) {
        bm_counters c0, c1;
        bm_counters_read(m, &c0);
        double t = bm_step(x, sa, 0, o->prompt);
        bm_counters_read(m, &c1);
        if (t < r->pf_best) {
            r->pf_best = t;
            for (int p = 0; p < NUMLA_MODEL_PART_COUNT; p++)
                r->pf_part[p] = c1.part_s[p] - c0.part_s[p];
            r->pf_lin_s = c1.linear_s - c0.linear_s;
            r->pf_lin_fl = c1.linear_flops - c0.linear_flops;
            r->pf_attn_s = c1.attn_s - c0.attn_s;
            r->pf_attn_k_s = c1.attn_kernel_s - c0.attn_kernel_s;
        }
    }
    bm_counters c;
    bm_counters_read(m, &c);
    r->pf_form = !m ? "deepseek_v4"
                 : c.prefill_form == NUMLA_PREFILL_FORM_ABSORBED   ? "absorbed"
                 : c.prefill_form == NUMLA_PREFILL_FORM_EXPANDED ? "expanded"
                 : o->prompt > 1 ? "auto (expanded: no prefix)" : "auto (absorbed)";
}

/* Decode n tokens at batch 1 after `at` cached rows (1 warm-up step first, then the engine
 * counters reset); returns the total time, the median step in *med and, when part is not
 * NULL, rank 0's mean time per token in each part of the forward pass. */
static double bm_decode(bm_ctx *x, const bm_seq *q, int at, int n, double *med, double *part)
{
    numla_status s;
    bm_step(x, q, at, 1);
    if ((s = numla_engine_stats_reset_all(x->e)) != NUMLA_STATUS_OK)
        bm_die(x, s);
    bm_counters c0, c1;
    bm_counters_read(numla_engine_model(x->e), &c0);
    double total = 0;
    for (int k = 0; k < n; k++)
        total += x->dt[k] = bm_step(x, q, at + 1 + k, 1);
    bm_counters_read(numla_engine_model(x->e), &c1);
    for (int p = 0; part && p < NUMLA_MODEL_PART_COUNT; p++)
        part[p] = (c1.part_s[p] - c0.part_s[p]) / n;
    *med = numla_bench_median(x->dt, n);
    return total;
}

/* --fill-context: rows 0..n-1 of sequence q, in every layer's latent cache and (DSA models)
 * index-key cache, set to values of unit variance (uniform, from a fixed seed) instead of a
 * prefill. A decode step reads and scores every cached row the same way whatever it holds (the
 * indexer's top-k keeps a heap whose updates depend on the order of the scores, a second-order
 * effect). Rank 0's cache only: the caller refuses more ranks. */
static void bm_fill_context(bm_ctx *x, const bm_seq *q, int n)
{
    numla_kv_cache *kv = numla_engine_kv_cache(x->e);
    const size_t row = (size_t)(kv->kv_lora_rank + kv->rope_dim), irow = (size_t)kv->index_dim;
    for (int32_t l = 0; l < kv->num_layers; l++) {
        void *lat = numla_kv_cache_layer(kv, l);
        void *idx = irow ? numla_kv_cache_index_layer(kv, l) : NULL;
#pragma omp parallel for schedule(static)
        for (int p = 0; p < n; p++) {
            const size_t slot = (size_t)q->bt[p / kv->block_size] * (size_t)kv->block_size +
                                (size_t)(p % kv->block_size);
            uint32_t h = 0x9e3779b9u * (uint32_t)(p + 1) ^ 0x85ebca6bu * (uint32_t)(l + 1);
            for (size_t d = 0; d < row + irow; d++) {
                h ^= h << 13;
                h ^= h >> 17;
                h ^= h << 5;
                const float v = ((float)(h >> 8) * 0x1.0p-24f * 2.0f - 1.0f) * 1.7320508f;
                if (d < row)
                    numla_store_f32(lat, kv->dtype, slot * row + d, v);
                else
                    numla_store_f32(idx, kv->index_dtype, slot * irow + (d - row), v);
            }
        }
    }
}

/* Long context: prefill in chunks (timed apart from the prompt's prefill) or --fill-context,
 * then decode. */
static void bm_long_context(bm_ctx *x, const bm_opts *o, const bm_seq *sb, bm_results *r)
{
    const numla_model *m = numla_engine_model(x->e);
    bm_counters c0, c1;
    bm_counters_read(m, &c0);
    r->long_pf = numla_now_s();
    if (o->fill && numla_engine_v4_model(x->e)) {
        numla_status s = numla_engine_v4_fill(x->e, sb->bt, o->long_ctx);
        if (s != NUMLA_STATUS_OK)
            bm_die(x, s);
    } else if (o->fill)
        bm_fill_context(x, sb, o->long_ctx);
    else
        for (int at = 0; at < o->long_ctx; at += o->chunk)
            bm_step(x, sb, at, o->long_ctx - at < o->chunk ? o->long_ctx - at : o->chunk);
    r->long_pf = o->fill ? 0 : numla_now_s() - r->long_pf;
    bm_counters_read(m, &c1);
    r->long_pf_attn = c1.attn_s - c0.attn_s;
    r->long_pf_attn_k = c1.attn_kernel_s - c0.attn_kernel_s;
    r->long_total = bm_decode(x, sb, o->long_ctx, r->nlong, &r->long_med, r->long_part);
}

static void bm_print(const bm_opts *o, const bm_results *r, int size)
{
    const numla_bench_model_costs *co = &r->co;
    const int prompt = o->prompt, long_ctx = o->long_ctx;
    /* prefill_peak_frac: against the peak of the units the prefill GEMMs use */
    const double pf_peak = r->amx && r->amx_peak > 0 ? r->amx_peak : r->peak;
    const double pf_tok_s = prompt / r->pf_best;
    const double pf_lin_gf = r->pf_lin_s > 0 ? r->pf_lin_fl / r->pf_lin_s / 1e9 : 0;
    const double dec_tok_s = r->ndec / r->dec_total, long_tok_s = r->nlong / r->long_total;
    const double bw = r->bw, peak = r->peak;
    const double bw_frac = co->weight_bytes * dec_tok_s / (bw * 1e9);
    const double L = (double)long_ctx + 1 + r->nlong / 2.0; /* mean cached rows during the run */
    /* a DSA model's MLA reads at most index_topk rows; its indexers score all L */
    const double La = co->index_topk > 0 && L > (double)co->index_topk ? (double)co->index_topk : L;
    const double t_bytes = (co->weight_bytes + co->kv_bytes_per_ctx * La +
                            co->index_bytes_per_ctx * L) / (bw * 1e9);
    const double t_flops = (co->linear_flops + co->attn_flops_per_ctx * La +
                            co->index_flops_per_ctx * L) / (peak * 1e9);
    const double roof = (t_bytes > t_flops ? t_bytes : t_flops) * long_tok_s;
    const char *wp = getenv("OMP_WAIT_POLICY") ? getenv("OMP_WAIT_POLICY") : "unset";
    if (o->json) {
        printf("{\"bench\": \"model\", \"model\": \"%s\", \"ranks\": %d, \"threads\": %d, "
               "\"omp_wait_policy\": \"%s\", \"quick\": %s, \"long_context\": %d, "
               "\"prefill_tokens\": %d, \"prefill_form\": \"%s\", \"prefill_s\": %.4f, "
               "\"prefill_attn_s\": %.4f, \"prefill_attn_kernel_s\": %.4f, "
               "\"prefill_tok_s\": %.3f, \"prefill_linear_gflops\": %.2f, "
               "\"peak_gflops\": %.2f, \"amx_peak_gflops\": %.2f, \"prefill_peak_frac\": %.4f, "
               "\"prefill_avx512_peak_frac\": %.4f, \"decode_tokens\": %d, "
               "\"decode_tok_s\": %.3f, \"decode_median_ms\": %.3f, \"decode_ctx0_tok_s\": %.3f, "
               "\"decode_ctx0_median_ms\": %.3f, \"decode_16k_tokens\": %d, "
               "\"decode_16k_tok_s\": %.3f, \"decode_16k_median_ms\": %.3f, "
               "\"long_prefill_s\": %.2f, \"long_prefill_chunk\": %d, "
               "\"long_prefill_attn_s\": %.3f, \"long_prefill_attn_kernel_s\": %.3f, "
               "\"active_weight_bytes\": %.0f, "
               "\"attn_weight_bytes\": %.0f, \"mlp_weight_bytes\": %.0f, "
               "\"lm_head_bytes\": %.0f, \"linear_flops_per_token\": %.0f, "
               "\"kv_bytes_per_ctx\": %.0f, \"attn_flops_per_ctx\": %.0f, \"read_gbps\": %.3f, "
               "\"decode_bw_frac\": %.4f, \"decode_16k_roofline_frac\": %.4f, "
               "\"decode_bw_frac_median\": %.4f, \"decode_16k_roofline_frac_median\": %.4f, "
               "\"decode_16k_bytes_s\": %.6f, \"decode_16k_flops_s\": %.6f, "
               "\"peak_rss_mib\": %.1f, \"load1_start\": %.2f, \"load1_decode\": %.2f, "
               "\"load1_end\": %.2f}\n",
               o->e.model, size, r->nth, wp, o->quick ? "true" : "false", long_ctx, prompt,
               r->pf_form, r->pf_best, r->pf_attn_s, r->pf_attn_k_s, pf_tok_s,
               pf_lin_gf, peak, r->amx_peak, pf_lin_gf / pf_peak, pf_lin_gf / peak, r->ndec,
               dec_tok_s, 1e3 * r->dec_med, r->ndec / r->dec0_total, 1e3 * r->dec0_med, r->nlong,
               long_tok_s, 1e3 * r->long_med, r->long_pf, o->chunk, r->long_pf_attn,
               r->long_pf_attn_k, co->weight_bytes, co->attn_weight_bytes,
               co->mlp_weight_bytes, co->lm_head_bytes, co->linear_flops, co->kv_bytes_per_ctx,
               co->attn_flops_per_ctx, bw, bw_frac, roof,
               co->weight_bytes / r->dec_med / (bw * 1e9),
               (t_bytes > t_flops ? t_bytes : t_flops) / r->long_med, t_bytes, t_flops,
               r->rss_mib, r->load_start, r->load_dec, r->load_long);
    } else if (r->v4) { /* deepseek_v4's forward keeps no counters: no split, no profiles */
        printf("  prefill %d tokens (one step): %.1f tok/s (%.3f s)\n", prompt, pf_tok_s, r->pf_best);
        printf("  decode batch 1, %d tokens after %d: %.2f tok/s (median %.2f ms); active "
               "weights %.1f MB/token (attn %.1f, mlp %.1f, head+embed %.1f); read %.2f GB/s "
               "-> decode_bw_frac %.3f\n", r->ndec, prompt, dec_tok_s, 1e3 * r->dec_med,
               co->weight_bytes / 1e6, co->attn_weight_bytes / 1e6, co->mlp_weight_bytes / 1e6,
               co->lm_head_bytes / 1e6, bw, bw_frac);
        printf("  decode batch 1, %d tokens from context 0: %.2f tok/s (median %.2f ms)\n",
               r->ndec, r->ndec / r->dec0_total, 1e3 * r->dec0_med);
        printf("  decode batch 1, %d tokens after %d%s: %.2f tok/s (median %.2f ms); bound "
               "bytes %.2f ms, flops %.2f ms -> roofline_frac %.3f (context prefill %.1f s)\n",
               r->nlong, long_ctx, o->quick ? " (--quick: not 16384)" : "", long_tok_s,
               1e3 * r->long_med, 1e3 * t_bytes, 1e3 * t_flops, roof, r->long_pf);
        printf("  cache: %.1f values per token once the context is long (%.0f bytes at %s, the "
               "cache's type), %.0f values per sequence besides (windows, compressors' carry-over)\n",
               r->v4_cache_tok, r->v4_cache_es * r->v4_cache_tok,
               r->v4_cache_es == 2 ? "bf16" : "fp32", r->v4_cache_seq);
        printf("  peak RSS %.1f MiB; load average %.2f / %.2f / %.2f (start / after decode / "
               "end)\n", r->rss_mib, r->load_start, r->load_dec, r->load_long);
    } else {
        printf("  prefill %d tokens: %.1f tok/s; linear layers %.1f GFLOP/s = prefill_peak_frac "
               "%.3f of the %s peak %.1f GFLOP/s (%.3f of the AVX-512 peak %.1f; %.0f%% of the "
               "step in linear)\n", prompt, pf_tok_s, pf_lin_gf, pf_lin_gf / pf_peak,
               r->amx ? "AMX tile" : "bf16", pf_peak, pf_lin_gf / peak, peak,
               100.0 * r->pf_lin_s / r->pf_best);
        printf("  prefill form %s: step %.3f s, attention (form-specific part) %.3f s, of which "
               "attention kernels %.3f s\n", r->pf_form, r->pf_best, r->pf_attn_s,
               r->pf_attn_k_s);
        printf("  prefill step profile (rank 0):");
        for (int p = 0; p < NUMLA_MODEL_PART_COUNT; p++)
            printf(" %s %.3f", numla_model_part_names[p], r->pf_part[p]);
        printf(" s\n");
        printf("  decode batch 1, %d tokens after %d: %.2f tok/s (median %.2f ms); active "
               "weights %.1f MB/token (attn %.1f, mlp %.1f, lm_head+embed %.1f); read %.2f GB/s "
               "-> decode_bw_frac %.3f\n", r->ndec, prompt, dec_tok_s, 1e3 * r->dec_med,
               co->weight_bytes / 1e6, co->attn_weight_bytes / 1e6, co->mlp_weight_bytes / 1e6,
               co->lm_head_bytes / 1e6, bw, bw_frac);
        double parts = 0;
        printf("  decode step profile (rank 0, per token):");
        for (int p = 0; p < NUMLA_MODEL_PART_COUNT; p++) {
            printf(" %s %.3f", numla_model_part_names[p], 1e3 * r->dec_part[p]);
            parts += r->dec_part[p];
        }
        printf(" ms; outside the parts %.3f ms\n", 1e3 * (r->dec_total / r->ndec - parts));
        printf("  decode batch 1, %d tokens from context 0 (llama-bench's tg128): %.2f tok/s "
               "(median %.2f ms)\n", r->ndec, r->ndec / r->dec0_total, 1e3 * r->dec0_med);
        printf("  decode batch 1, %d tokens after %d%s: %.2f tok/s (median %.2f ms); bound "
               "bytes %.2f ms, flops %.2f ms -> roofline_frac %.3f (context %s %.1f s)\n",
               r->nlong, long_ctx, o->quick ? " (--quick: not 16384)" : "", long_tok_s,
               1e3 * r->long_med, 1e3 * t_bytes, 1e3 * t_flops, roof,
               o->fill ? "filled with random rows, not prefilled:" : "prefill", r->long_pf);
        parts = 0;
        printf("  decode step profile after %d (rank 0, per token):", long_ctx);
        for (int p = 0; p < NUMLA_MODEL_PART_COUNT; p++) {
            printf(" %s %.3f", numla_model_part_names[p], 1e3 * r->long_part[p]);
            parts += r->long_part[p];
        }
        printf(" ms; outside the parts %.3f ms\n", 1e3 * (r->long_total / r->nlong - parts));
        printf("  peak RSS %.1f MiB; load average %.2f / %.2f / %.2f (start / after decode / "
               "end)\n", r->rss_mib, r->load_start, r->load_dec, r->load_long);
    }
    fflush(stdout);
}

/* Rank 0: every measurement, then the report. */
static void bm_measure(bm_ctx *x, const bm_opts *o, bm_seq *sa, bm_seq *sb, int size)
{
    bm_results r = {.ndec = 128, .nlong = o->quick ? 16 : 32};
    bm_weights_info wi;
    bm_weights_info_read(x->e, &wi);
    const numla_kv_cache *kv = numla_engine_kv_cache(x->e);
    const int gguf = numla_model_path_is_gguf(o->e.model);
    /* a GGUF file, or a block format made at load (--weights q4_k ...), mixes encodings: with
     * one rank (the whole model loaded here) its bytes are counted from the loaded weights
     * (as stored: 16-row panels included); with more, from the file or the recipe */
    const int blocks_at_load = !gguf && wi.format != NUMLA_WEIGHT_FORMAT_NONE &&
                               wi.format != NUMLA_WEIGHT_FORMAT_FP8 &&
                               wi.format != NUMLA_WEIGHT_FORMAT_INT8;
    const numla_v4_model *v4 = numla_engine_v4_model(x->e);
    numla_status s =
        v4 ? numla_bench_model_costs_v4(v4, &r.co)
        : gguf && size > 1 ? numla_bench_model_costs_gguf(numla_engine_config(x->e), o->e.model, kv->dtype,
                                                        &r.co)
        : (gguf || blocks_at_load) && size == 1
            ? numla_bench_model_costs_loaded(numla_model_get_weights(numla_engine_model(x->e)),
                                             kv->dtype, &r.co)
            : numla_bench_model_costs_get_q(numla_engine_config(x->e), wi.isa, wi.lm_head_dtype,
                                            wi.format, wi.lm_head_q8, wi.embed_dtype, kv->dtype,
                                            &r.co);
    if (s != NUMLA_STATUS_OK)
        bm_die(x, s);
    r.nth = numla_engine_num_threads(x->e);
    bm_setup(x, o, sa, sb, r.ndec > r.nlong ? r.ndec : r.nlong);
    r.load_start = load1();
    /* The prefill GEMMs run on AMX tiles when the weights are bf16 and the tiles are usable
     * (kernels/x86/linear_amx.c): their ceiling is then the tile peak, reported next to the
     * AVX-512 one. */
    const numla_model *mm = numla_engine_model(x->e);
    const numla_model_options mo = mm ? numla_model_get_options(mm)
                                      : numla_model_options_default(wi.isa);
    r.amx = mo.isa == NUMLA_ISA_AMX && mo.linear_amx && wi.lm_head_dtype == NUMLA_DTYPE_BF16 &&
            wi.format == NUMLA_WEIGHT_FORMAT_NONE;
    r.v4 = v4 != NULL;
    if (v4) {
        numla_v4_sizes vz;
        numla_v4_config_sizes(numla_v4_model_config(v4), &vz);
        r.v4_cache_tok = vz.cache_per_token;
        r.v4_cache_seq = vz.cache_per_seq;
        r.v4_cache_es = (int)numla_dtype_size(numla_v4_model_cache_dtype(v4));
    }
    /* peak RSS: the load's, and the runs' after the probe buffer is gone (ru_maxrss would
     * count the probe's gigabytes as the model's) */
    const double rss_load = bm_hwm_mib();
    bm_machine_figures(&r, wi.isa);
    const int rss_reset = bm_hwm_reset();
    bm_prefill(x, o, sa, &r);
    r.dec_total = bm_decode(x, sa, o->prompt, r.ndec, &r.dec_med, r.dec_part);
    r.load_dec = load1();
    if (!o->json)
        printf("model %s (weights %s%s): %d rank%s x %d thread%s, OMP_WAIT_POLICY=%s\n",
               o->e.model, gguf ? "as the GGUF file stores them"
                                : numla_model_config_format_name(wi.format),
               wi.format != NUMLA_WEIGHT_FORMAT_NONE && !wi.lm_head_q8 ? ", lm_head bf16" : "", size,
               size > 1 ? "s" : "", r.nth, r.nth > 1 ? "s" : "",
               getenv("OMP_WAIT_POLICY") ? getenv("OMP_WAIT_POLICY") : "(unset)");
    if (!o->json)
        printf("  per-rank decode split (batch 1, context %d):\n", o->prompt);
    bm_ranks(x, "decode", o->json, size);
    /* the same count of tokens from context 0, on the second sequence (its long context
     * overwrites those rows next) */
    r.dec0_total = bm_decode(x, sb, 0, r.ndec, &r.dec0_med, NULL);
    bm_long_context(x, o, sb, &r);
    r.load_long = load1();
    if (!o->json)
        printf("  per-rank decode split (batch 1, context %d):\n", o->long_ctx);
    bm_ranks(x, o->long_ctx == 16384 ? "decode_16k" : "decode_long", o->json, size);
    const double rss_run = bm_hwm_mib();
    if (rss_reset && rss_load >= 0 && rss_run >= 0) {
        r.rss_mib = rss_load > rss_run ? rss_load : rss_run;
    } else {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        r.rss_mib = (double)ru.ru_maxrss / 1024.0;
    }
    /* measured again after the RSS reading (the stream buffer is big) */
    bm_machine_figures(&r, wi.isa);
    bm_print(o, &r, size);
}

/* The routing of one step, per MoE layer (rank 0's model: every rank routes every token). */
typedef struct bm_routes {
    const numla_model *m;
    const numla_model_config *c;
    int64_t n, k;       /* the step's tokens, experts per token */
    int32_t layers, cap;
    int32_t *layer;     /* (cap) the MoE layers seen, in order */
    int32_t *ids;       /* (cap, n, k) their routed experts */
} bm_routes;

static void bm_route_hook(void *ctx, int32_t layer, const float *h, int32_t tokens, int64_t hid)
{
    bm_routes *r = ctx;
    (void)h;
    (void)hid;
    if (tokens != r->n || r->layers >= r->cap || !numla_model_config_is_moe_layer(r->c, layer))
        return;
    memcpy(r->ids + (size_t)r->layers * (size_t)(r->n * r->k), numla_model_last_routes(r->m),
           sizeof *r->ids * (size_t)(r->n * r->k));
    r->layer[r->layers++] = layer;
}

/* --speculative K, rank 0: the routed experts that w = 1..K+1 consecutive tokens touch per MoE
 * layer (numla_bench_union_mean), from one prefill of --text's first --prompt tokens (random
 * tokens without it); a verify step of w rows reads that union of experts. Beside it, what
 * routing independent from token to token would give: E · (1 - (1 - k/E)^w). */
static void bm_expert_union(bm_ctx *x, const bm_opts *o, const bm_seq *sa, double *mean_u)
{
    const numla_model *m = numla_engine_model(x->e);
    const numla_model_config *c = numla_engine_config(x->e);
    const int W = o->spec + 1;
    if (!m || c->n_routed_experts <= 0)
        return;
    int n = o->prompt;
    const char *src = "random tokens";
    if (o->text) {
        numla_tokenizer *tk = NULL;
        FILE *f = fopen(o->text, "rb");
        char *buf = NULL;
        long len = -1;
        if (f && fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
            (buf = malloc((size_t)len + 1)) && fread(buf, 1, (size_t)len, f) == (size_t)len)
            buf[len] = 0;
        else
            len = -1;
        if (f)
            fclose(f);
        if (len < 0) {
            free(buf);
            bm_die(x, numla_error_set(NUMLA_STATUS_IO, __FILE__, __LINE__, __func__,
                                      "bench model: cannot read --text %s", o->text));
        }
        int32_t *ids = NULL;
        int64_t nt = 0;
        numla_status s = numla_model_text_tokenizer(o->e.model, x->V, &tk);
        if (s == NUMLA_STATUS_OK)
            s = numla_tokenizer_encode(tk, buf, (size_t)len, 1, &ids, &nt);
        free(buf);
        numla_tokenizer_destroy(&tk);
        if (s != NUMLA_STATUS_OK)
            bm_die(x, s);
        n = nt < n ? (int)nt : n;
        memcpy(x->tok, ids, sizeof *ids * (size_t)n);
        free(ids);
        src = o->text;
    } else {
        for (int i = 0; i < n; i++)
            x->tok[i] = bm_next(x);
    }
    if (n < W) {
        printf("  routed experts: %s has %d tokens, fewer than %d\n", src, n, W);
        return;
    }
    const int64_t k = c->num_experts_per_tok, E = c->n_routed_experts;
    bm_routes r = {.m = m, .c = c, .n = n, .k = k, .cap = (int32_t)c->num_hidden_layers};
    r.layer = malloc(sizeof *r.layer * (size_t)r.cap);
    r.ids = malloc(sizeof *r.ids * (size_t)r.cap * (size_t)(n * k));
    if (!r.layer || !r.ids)
        bm_die(x, NUMLA_STATUS_NO_MEMORY);
    numla_engine_set_layer_hook(x->e, bm_route_hook, &r);
    bm_step_tok(x, sa, 0, n);
    numla_engine_set_layer_hook(x->e, NULL, NULL);
    printf("  routed experts touched by w consecutive tokens (a verify step of w rows reads their "
           "union), per MoE layer: mean over the %d windows of each w in %d tokens of %s; %lld of "
           "%lld experts per token\n", n - W + 1, n, src, (long long)k, (long long)E);
    for (int w = 1; w <= W; w++)
        mean_u[w] = 0;
    for (int32_t l = 0; l < r.layers; l++) {
        printf("    layer %2d:", (int)r.layer[l]);
        for (int w = 1; w <= W; w++) {
            const double u = numla_bench_union_mean(r.ids + (size_t)l * (size_t)(n * k), n, k, E, w);
            mean_u[w] += u / r.layers;
            printf("  %d row%s %.2f (%.2fx)", w, w > 1 ? "s" : "", u, u / (double)k);
        }
        printf("\n");
    }
    printf("    mean    :");
    for (int w = 1; w <= W; w++)
        printf("  %d row%s %.2f (%.2fx)", w, w > 1 ? "s" : "", mean_u[w], mean_u[w] / (double)k);
    printf("\n    independent routing would give:");
    for (int w = 2; w <= W; w++) {
        const double u = (double)E * (1.0 - pow(1.0 - (double)k / (double)E, w));
        printf("  %d rows %.2f (%.2fx)", w, u, u / (double)k);
    }
    printf("\n");
    free(r.layer);
    free(r.ids);
}

/* --speculative K, rank 0: after the prompt, the median of `reps` decode steps of n = 1..K+1
 * rows (logits for every row, as a verify step asks) at the same context, and of a one-row
 * MTP step when the model has the layer; then the decode rate a verify step of k drafts gives
 * when each draft is accepted with probability a independently of the others: E = (1 -
 * a^(k+1)) / (1 - a) tokens per verify step, costing t(k+1) + k · t_mtp (the first MTP row
 * rides on the MTP step over the accepted rows, counted here as one row). */
static void bm_speculative(bm_ctx *x, const bm_opts *o, const bm_seq *sa, int has_mtp)
{
    const int K = o->spec, reps = o->quick ? 9 : 31, at = o->prompt;
    double t[NUMLA_BENCH_MAX_VERIFY + 1] = {0}, t_mtp = 0;
    /* rank 0's mean time per step in each part of the forward (the MLA path's counters; none
     * for deepseek_v4): where a verify step's rows cost more than one row */
    double part[NUMLA_BENCH_MAX_VERIFY + 1][NUMLA_MODEL_PART_COUNT] = {{0}};
    const numla_model *mm = numla_engine_model(x->e);
    double *dt = malloc(sizeof *dt * (size_t)reps);
    if (!dt)
        bm_die(x, NUMLA_STATUS_NO_MEMORY);
    bm_step(x, sa, 0, o->prompt);
    if (has_mtp && numla_engine_v4_model(x->e)) /* DeepSeek-V4's MTP cache is the sequence's: its rows of the prompt */
        bm_mtp_prompt(x, sa, o->prompt);
    for (int n = 1; n <= K + 1; n++) {
        bm_step_ex(x, sa, at, n, n, 0); /* warm-up */
        bm_counters c0, c1;
        bm_counters_read(mm, &c0);
        for (int r = 0; r < reps; r++)
            dt[r] = bm_step_ex(x, sa, at, n, n, 0);
        bm_counters_read(mm, &c1);
        for (int p = 0; p < NUMLA_MODEL_PART_COUNT; p++)
            part[n][p] = (c1.part_s[p] - c0.part_s[p]) / reps;
        t[n] = numla_bench_median(dt, reps);
    }
    if (has_mtp) {
        for (int r = 0; r <= reps; r++) {
            bm_step_ex(x, sa, at, 1, 1, 0); /* a main row for the MTP row's hidden state */
            const double d = bm_step_ex(x, sa, at, 1, 1, 1);
            if (r > 0)
                dt[r - 1] = d;
        }
        t_mtp = numla_bench_median(dt, reps);
    }
    free(dt);
    const double alpha[3] = {0.6, 0.7, 0.8};
    printf("model %s: speculative decoding, batch 1, context %d, %d threads (medians of %d "
           "steps)\n", o->e.model, at, numla_engine_num_threads(x->e), reps);
    for (int n = 1; n <= K + 1; n++) {
        printf("  step of %d row%s: %.3f ms (%.3fx one row)", n, n > 1 ? "s" : " ", 1e3 * t[n],
               t[n] / t[1]);
        for (int p = 0; mm && p < NUMLA_MODEL_PART_COUNT; p++) /* mean ms (x one row's) */
            printf("%s %s %.3f (%.2fx)", p ? "" : ";", numla_model_part_names[p],
                   1e3 * part[n][p], part[1][p] > 0 ? part[n][p] / part[1][p] : 0.0);
        printf("\n");
    }
    if (has_mtp)
        printf("  MTP step of 1 row: %.3f ms (%.3fx a main step of one row)\n", 1e3 * t_mtp,
               t_mtp / t[1]);
    else
        printf("  the model has no MTP layer: the draft cost is left out below\n");
    printf("  decode tok/s without drafts: %.1f\n", 1.0 / t[1]);
    for (int k = 1; k <= K; k++) {
        printf("  %d draft%s:", k, k > 1 ? "s" : " ");
        for (int i = 0; i < 3; i++) {
            const double a = alpha[i], e = (1 - pow(a, k + 1)) / (1 - a);
            const double rate = e / (t[k + 1] + k * t_mtp);
            printf("  acceptance %.1f: %.2f tok/step, %.1f tok/s (%.2fx)", a, e, rate,
                   rate * t[1]);
        }
        printf("\n");
    }
    double u[NUMLA_BENCH_MAX_VERIFY + 1] = {0};
    bm_expert_union(x, o, sa, u);
    if (o->json) {
        printf("{\"bench\": \"model_speculative\", \"context\": %d, \"mtp_ms\": %.4f", at,
               1e3 * t_mtp);
        for (int n = 1; n <= K + 1; n++)
            printf(", \"step_%d_ms\": %.4f", n, 1e3 * t[n]);
        for (int n = 1; n <= K + 1 && u[1] > 0; n++)
            printf(", \"experts_%d_rows\": %.4f", n, u[n]);
        printf("}\n");
    }
    fflush(stdout);
}

static int bench_model_main(int argc, char **argv)
{
    bm_opts o = {.bind = 1, .prompt = 512, .chunk = 1024};
    numla_cli_engine_opts_default(&o.e);
    int rc = bm_parse_opts(argc, argv, &o);
    if (rc >= 0)
        return rc;
    const int ndec = 128, nlong = o.quick ? 16 : 32;
    numla_comm_session mpi;
    numla_settings set;
    numla_status s = numla_settings_start(&set, &mpi);
    if (s != NUMLA_STATUS_OK)
        numla_comm_abort(NULL, s, "bench model: %s", numla_error_message());
    bm_ctx x = {.rng = 7, .c = mpi.comm};
    numla_model_config mc;
    const int mc_ok = numla_model_config_load(o.e.model, &mc) == NUMLA_STATUS_OK;
    const int is_v4 = mc_ok && mc.v4.enabled;
    /* both sequences within the model's context: the prompt and its decode, the long context
     * and its; a default long context longer than that is cut to fit, a given one refused
     * before any work */
    const int64_t ctx = mc_ok ? mc.max_position_embeddings : 0;
    if (ctx > 0 && o.prompt + ndec + 1 > ctx)
        numla_comm_abort(x.c, NUMLA_STATUS_OUT_OF_RANGE, "bench model: --prompt %d and its %d "
                         "decode tokens do not fit the model's context (%lld)", o.prompt, ndec,
                         (long long)ctx);
    if (ctx > 0 && o.long_ctx + nlong + 1 > ctx) {
        if (!o.long_ctx_default || ctx < nlong + 2)
            numla_comm_abort(x.c, NUMLA_STATUS_OUT_OF_RANGE, "bench model: --long-context %d and "
                             "its %d decode tokens do not fit the model's context (%lld)",
                             o.long_ctx, nlong, (long long)ctx);
        o.long_ctx = (int)(ctx - nlong - 1);
        if (numla_comm_rank(x.c) == 0)
            NUMLA_INFO("bench model: the long context is %d tokens: the model's context (%lld) "
                       "less the %d decode tokens after it", o.long_ctx, (long long)ctx, nlong);
    }
    if (is_v4 && numla_comm_size(x.c) > 1)
        numla_comm_abort(x.c, NUMLA_STATUS_UNSUPPORTED, "bench model: deepseek_v4 is measured on "
                         "one rank (%d given)", numla_comm_size(x.c));
    if (o.fill && numla_comm_size(x.c) > 1)
        numla_comm_abort(x.c, NUMLA_STATUS_INVALID_ARG, "bench model: --fill-context writes rank "
                         "0's cache only: run it on one rank (%d here)", numla_comm_size(x.c));
    numla_engine_options eo = numla_engine_options_default();
    numla_settings_engine_options(&set, &eo);
    eo.num_threads = o.e.threads;
    eo.bind = o.bind;
    eo.block_size = 0; /* the model's */
    eo.weights = o.e.weights;
    numla_model_config cfg;
    int has_mtp = 0;
    /* a deepseek4 GGUF model's MTP layer is a file of its own (--mtp-model): the engine reads the
     * pair's config (once) and loads the layer or refuses the pair, naming the problem */
    if (o.spec > 0 && !o.e.mtp_model && numla_model_config_load(o.e.model, &cfg) == NUMLA_STATUS_OK)
        has_mtp = cfg.arch == NUMLA_MODEL_ARCH_DEEPSEEK_V4 ? cfg.v4.num_nextn_predict_layers > 0
                                                           : cfg.num_nextn_predict_layers > 0;
    has_mtp |= o.spec > 0 && o.e.mtp_model;
    /* DeepSeek-V4 rolls a verify step's rejected rows back only with its MTP layer loaded
     * (docs/speculative.md "DeepSeek-V4"): its verify steps are measured with the layer */
    if (o.spec > 0 && !has_mtp && is_v4)
        numla_comm_abort(x.c, NUMLA_STATUS_UNSUPPORTED, "bench model: --speculative %d on "
                         "deepseek_v4: %s has no multi-token-prediction layer; %s", o.spec,
                         o.e.model, numla_model_path_is_gguf(o.e.model)
                             ? "llama.cpp's converter writes it as a file of its own "
                               "(convert_hf_to_gguf.py --mtp: mtp-*.gguf): give that file with "
                               "--mtp-model FILE"
                             : "its verify steps are measured with the layer (mtp.0.*)");
    /* with --mtp-model the engine loads the layer or refuses the pair, naming the problem */
    eo.mtp = has_mtp || o.e.mtp_model;
    eo.mtp_model = o.e.mtp_model;
    bm_seq sa = {.mb = (o.prompt + ndec + 2 + 15) / 16};
    /* sb also takes the decode from context 0 before its long context */
    const int sb_rows = o.long_ctx + nlong > ndec ? o.long_ctx + nlong : ndec;
    bm_seq sb = {.mb = (sb_rows + 2 + 15) / 16};
    eo.num_blocks = sa.mb + sb.mb;
    eo.num_blocks_seqs = 2; /* deepseek_v4: and the blocks each holds for its own cache */
    if ((s = numla_engine_create(x.c, o.e.model, &eo, &x.e)) != NUMLA_STATUS_OK)
        bm_die(&x, s);
    if (numla_comm_rank(x.c) != 0) {
        if ((s = numla_engine_worker_loop(x.e)) != NUMLA_STATUS_OK)
            bm_die(&x, s);
    } else if (o.spec > 0) {
        bm_setup(&x, &o, &sa, &sb, ndec);
        float *lg = realloc(x.logits, sizeof *x.logits * (size_t)x.V * NUMLA_BENCH_MAX_VERIFY);
        if (!lg)
            bm_die(&x, NUMLA_STATUS_NO_MEMORY);
        x.logits = lg;
        bm_speculative(&x, &o, &sa, has_mtp);
    } else {
        bm_measure(&x, &o, &sa, &sb, numla_comm_size(x.c));
    }
    free(x.tok);
    free(x.pos);
    free(x.slot);
    free(x.logits);
    free(x.dt);
    free(sa.bt);
    free(sb.bt);
    numla_engine_destroy(&x.e);
    numla_comm_world_finalize(&mpi);
    return 0;
}

NUMLA_CLI_COMMAND("bench model", bench_model_main,
                  "prefill/decode tokens/s of a model vs bandwidth and bf16 peak, 16k-context "
                  "decode, per-rank compute vs comm [--model DIR] [--quick]")
