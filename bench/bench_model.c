/* bench/bench_model.c — `numla bench model --model DIR [--json] [--threads N] [--quick]
 * [--no-bind]`: end-to-end figures of one model through the collective engine (DESIGN.md §7),
 * each against a machine figure measured in the same run:
 *   prefill tokens/s at prompt 512 and the linear layers' GFLOP/s vs the peak of the units
 *     they run on, prefill_peak_frac: the AMX tile peak (numla_bench_peak_amx_gflops) when the
 *     GEMMs use AMX, else the bf16 peak (numla_bench_peak_gflops), which is also reported as
 *     prefill_avx512_peak_frac;
 *   decode tokens/s at batch 1 over 128 tokens after the 512-token prompt (decode_tok_s) and
 *     after a 16384-token context prefilled in chunks (decode_16k_tok_s; --quick: 2048, the
 *     output says so in long_context);
 *   active weight bytes per decode token (bench/bench_model.h), the read bandwidth
 *     (numla_bench_read_gbps), decode_bw_frac = bytes · tok/s / bandwidth;
 *   decode_16k_roofline_frac = max(bytes incl. KV / bandwidth, FLOPs / peak) / time per token;
 *   (tokens/s and both fractions from the total time of the run; the *_median keys from the
 *   median step, which an oversubscribed machine's stalls do not move);
 *   (bandwidth and peak: the best of a reading before and one after the runs);
 *   peak RSS (before the second bandwidth buffer), the load average, OMP_WAIT_POLICY;
 *   per rank, the decode step split into compute and communication (engine counters).
 * Run as `mpirun -n R numla bench model ...`; 1 rank works without mpirun. Costs are for the
 * whole model; the bandwidth and peak are rank 0's (one node). Prints, never asserts. */
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench/bench.h"
#include "bench/bench_model.h"
#include "comm/comm.h"
#include "common/log.h"
#include "engine/cli/cli.h"
#include "engine/cli/settings.h"
#include "engine/parallel/engine.h"

static void usage(void)
{
    fprintf(stderr, "usage: numla bench model --model DIR [--json] [--threads N] [--quick] "
                    "[--no-bind] [--long-context L (16384; --quick 2048)] [--prompt N (512)] [--chunk N (1024, long-context prefill)]\n");
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

/* One step of n new tokens of sequence q at positions at..at+n-1; returns its wall time. */
static double bm_step(bm_ctx *x, const bm_seq *q, int at, int n)
{
    for (int i = 0; i < n; i++) {
        int p = at + i;
        x->tok[i] = bm_next(x);
        x->pos[i] = p;
        x->slot[i] = (int64_t)q->bt[p / 16] * 16 + p % 16;
    }
    int32_t q2[2] = {0, n}, len = at + n, row = n - 1;
    numla_step st = {.num_seqs = 1, .num_tokens = n, .tokens = x->tok, .positions = x->pos,
                     .slots = x->slot, .query_start_loc = q2, .seq_lens = &len,
                     .block_tables = q->bt, .max_blocks_per_seq = q->mb,
                     .num_logit_rows = 1, .logit_rows = &row};
    double t0 = numla_bench_now();
    numla_status s = numla_engine_step(x->e, &st, x->logits);
    if (s != NUMLA_STATUS_OK)
        bm_die(x, s);
    return numla_bench_now() - t0;
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

static int bench_model_main(int argc, char **argv)
{
    const char *model = NULL;
    int threads = 0, json = 0, bind = 1, quick = 0, long_ctx = 0, prompt = 512, chunk = 1024;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--no-bind"))
            bind = 0;
        else if (!strcmp(argv[i], "--model") && v)
            model = argv[++i];
        else if (!strcmp(argv[i], "--threads") && v)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--long-context") && v)
            long_ctx = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--prompt") && v)
            prompt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--chunk") && v)
            chunk = atoi(argv[++i]);
        else {
            usage();
            return 2;
        }
    }
    if (!model || threads < 0 || long_ctx < 0 || prompt < 1 || chunk < 1) {
        usage();
        return 2;
    }
    if (long_ctx == 0)
        long_ctx = quick ? 2048 : 16384;
    const int ndec = 128, nlong = quick ? 16 : 32, prefill_reps = quick ? 1 : 2;

    int inited = 0, we_inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided;
        MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
        we_inited = 1;
    }
    bm_ctx x = {.rng = 7};
    numla_settings set;
    numla_status s = numla_settings_load(&set);
    if (s == NUMLA_STATUS_OK)
        s = numla_comm_create(MPI_COMM_WORLD, &set.comm, &x.c);
    if (s != NUMLA_STATUS_OK)
        numla_comm_abort(NULL, s, "bench model: %s", numla_error_message());
    const int rank = numla_comm_rank(x.c), size = numla_comm_size(x.c);
    numla_engine_options eo = numla_engine_options_default();
    numla_settings_engine_options(&set, &eo);
    eo.num_threads = threads;
    eo.bind = bind;
    eo.block_size = 16;
    bm_seq sa = {.mb = (prompt + ndec + 2 + 15) / 16}, sb = {.mb = (long_ctx + nlong + 2 + 15) / 16};
    eo.num_blocks = sa.mb + sb.mb;
    if ((s = numla_engine_create(x.c, model, &eo, &x.e)) != NUMLA_STATUS_OK)
        bm_die(&x, s);
    if (rank != 0) {
        if ((s = numla_engine_worker_loop(x.e)) != NUMLA_STATUS_OK)
            bm_die(&x, s);
        numla_engine_destroy(&x.e);
        numla_comm_destroy(&x.c);
        if (we_inited)
            MPI_Finalize();
        return 0;
    }

    const numla_model_config *cfg = numla_engine_config(x.e);
    const numla_model *m = numla_engine_model(x.e);
    numla_kv_cache *kv = numla_engine_kv_cache(x.e);
    const int nth = numla_engine_num_threads(x.e);
    numla_bench_model_costs co;
    if ((s = numla_bench_model_costs_get(cfg, m->w->isa, m->w->lm_head.dtype, m->w->embed_dtype,
                                         kv->dtype, &co)) != NUMLA_STATUS_OK)
        bm_die(&x, s);
    x.V = cfg->vocab_size;
    const int maxT = chunk > prompt ? chunk : prompt;
    x.tok = malloc(sizeof *x.tok * (size_t)maxT);
    x.pos = malloc(sizeof *x.pos * (size_t)maxT);
    x.slot = malloc(sizeof *x.slot * (size_t)maxT);
    x.logits = malloc(sizeof *x.logits * (size_t)x.V);
    sa.bt = malloc(sizeof *sa.bt * (size_t)sa.mb);
    sb.bt = malloc(sizeof *sb.bt * (size_t)sb.mb);
    double *dt = malloc(sizeof *dt * (size_t)(ndec > nlong ? ndec : nlong));
    if (!x.tok || !x.pos || !x.slot || !x.logits || !sa.bt || !sb.bt || !dt)
        bm_die(&x, NUMLA_STATUS_NO_MEMORY);
    for (int j = 0; j < sa.mb; j++)
        if ((s = numla_kv_cache_alloc_block(kv, &sa.bt[j])) != NUMLA_STATUS_OK)
            bm_die(&x, s);
    for (int j = 0; j < sb.mb; j++)
        if ((s = numla_kv_cache_alloc_block(kv, &sb.bt[j])) != NUMLA_STATUS_OK)
            bm_die(&x, s);
    const double load_start = load1();
    /* machine figures now and again at the end, keeping the best of the two: on a shared
     * machine a low reading would flatter every fraction */
    double bw = numla_bench_read_gbps(nth, numla_bench_stream_bytes(), 5);
    double peak = numla_bench_peak_gflops(m->w->isa, nth, 5);
    /* The prefill GEMMs run on AMX tiles when the weights are bf16 and the tiles are usable
     * (kernels/x86/linear_amx.c): their ceiling is then the tile peak, reported next to the
     * AVX-512 one. */
    const int amx = m->isa_linear == NUMLA_ISA_AMX && m->w->lm_head.dtype == NUMLA_DTYPE_BF16;
    double amx_peak = amx ? numla_bench_peak_amx_gflops(nth, 5) : 0;

    /* prefill: one step of the whole prompt (rewriting the same slots each repetition) */
    double pf_best = 1e30, pf_lin_s = 0, pf_lin_fl = 0, pf_attn_s = 0, pf_attn_k_s = 0;
    double pf_part[NUMLA_MODEL_PART_COUNT] = {0};
    for (int r = 0; r < prefill_reps; r++) {
        double ls0 = m->linear_s, lf0 = m->linear_flops, as0 = m->attn_s, ak0 = m->attn_kernel_s;
        double part0[NUMLA_MODEL_PART_COUNT];
        memcpy(part0, m->part_s, sizeof part0);
        double t = bm_step(&x, &sa, 0, prompt);
        if (t < pf_best) {
            pf_best = t;
            for (int p = 0; p < NUMLA_MODEL_PART_COUNT; p++)
                pf_part[p] = m->part_s[p] - part0[p];
            pf_lin_s = m->linear_s - ls0;
            pf_lin_fl = m->linear_flops - lf0;
            pf_attn_s = m->attn_s - as0;
            pf_attn_k_s = m->attn_kernel_s - ak0;
        }
    }
    const char *pf_form = m->prefill_form == NUMLA_PREFILL_FORM_ABSORBED   ? "absorbed"
                          : m->prefill_form == NUMLA_PREFILL_FORM_EXPANDED ? "expanded"
                          : prompt > 1 ? "auto (expanded: no prefix)" : "auto (absorbed)";
    /* decode 128 tokens at batch 1 after the prompt (1 warm-up step) */
    bm_step(&x, &sa, prompt, 1);
    if ((s = numla_engine_stats_reset_all(x.e)) != NUMLA_STATUS_OK)
        bm_die(&x, s);
    double dec_total = 0;
    for (int k = 0; k < ndec; k++)
        dec_total += dt[k] = bm_step(&x, &sa, prompt + 1 + k, 1);
    const double dec_med = numla_bench_median(dt, ndec);
    const double load_dec = load1();
    if (!json)
        printf("model %s: %d rank%s x %d thread%s, OMP_WAIT_POLICY=%s\n", model, size,
               size > 1 ? "s" : "", nth, nth > 1 ? "s" : "",
               getenv("OMP_WAIT_POLICY") ? getenv("OMP_WAIT_POLICY") : "(unset)");
    if (!json)
        printf("  per-rank decode split (batch 1, context %d):\n", prompt);
    bm_ranks(&x, "decode", json, size);

    /* long context: prefill in chunks (not timed as prefill), then decode */
    const double la0 = m->attn_s, lk0 = m->attn_kernel_s;
    double long_pf = numla_bench_now();
    for (int at = 0; at < long_ctx; at += chunk)
        bm_step(&x, &sb, at, long_ctx - at < chunk ? long_ctx - at : chunk);
    long_pf = numla_bench_now() - long_pf;
    const double long_pf_attn = m->attn_s - la0, long_pf_attn_k = m->attn_kernel_s - lk0;
    bm_step(&x, &sb, long_ctx, 1);
    if ((s = numla_engine_stats_reset_all(x.e)) != NUMLA_STATUS_OK)
        bm_die(&x, s);
    double long_total = 0;
    for (int k = 0; k < nlong; k++)
        long_total += dt[k] = bm_step(&x, &sb, long_ctx + 1 + k, 1);
    const double long_med = numla_bench_median(dt, nlong);
    const double load_long = load1();
    if (!json)
        printf("  per-rank decode split (batch 1, context %d):\n", long_ctx);
    bm_ranks(&x, long_ctx == 16384 ? "decode_16k" : "decode_long", json, size);

    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    const double rss_mib = (double)ru.ru_maxrss / 1024.0;
    /* machine figures, measured now (after the RSS reading: the stream buffer is big) */
    const double bw1 = numla_bench_read_gbps(nth, numla_bench_stream_bytes(), 5);
    const double peak1 = numla_bench_peak_gflops(m->w->isa, nth, 5);
    bw = bw1 > bw ? bw1 : bw;
    peak = peak1 > peak ? peak1 : peak;
    if (amx) {
        const double a1 = numla_bench_peak_amx_gflops(nth, 5);
        amx_peak = a1 > amx_peak ? a1 : amx_peak;
    }
    /* prefill_peak_frac: against the peak of the units the prefill GEMMs use */
    const double pf_peak = amx && amx_peak > 0 ? amx_peak : peak;

    const double pf_tok_s = prompt / pf_best;
    const double pf_lin_gf = pf_lin_s > 0 ? pf_lin_fl / pf_lin_s / 1e9 : 0;
    const double dec_tok_s = ndec / dec_total, long_tok_s = nlong / long_total;
    const double bw_frac = co.weight_bytes * dec_tok_s / (bw * 1e9);
    const double L = (double)long_ctx + 1 + nlong / 2.0; /* mean cached rows during the run */
    const double t_bytes = (co.weight_bytes + co.kv_bytes_per_ctx * L) / (bw * 1e9);
    const double t_flops = (co.linear_flops + co.attn_flops_per_ctx * L) / (peak * 1e9);
    const double roof = (t_bytes > t_flops ? t_bytes : t_flops) * long_tok_s;
    const char *wp = getenv("OMP_WAIT_POLICY") ? getenv("OMP_WAIT_POLICY") : "unset";
    if (json) {
        printf("{\"bench\": \"model\", \"model\": \"%s\", \"ranks\": %d, \"threads\": %d, "
               "\"omp_wait_policy\": \"%s\", \"quick\": %s, \"long_context\": %d, "
               "\"prefill_tokens\": %d, \"prefill_form\": \"%s\", \"prefill_s\": %.4f, "
               "\"prefill_attn_s\": %.4f, \"prefill_attn_kernel_s\": %.4f, "
               "\"prefill_tok_s\": %.3f, \"prefill_linear_gflops\": %.2f, "
               "\"peak_gflops\": %.2f, \"amx_peak_gflops\": %.2f, \"prefill_peak_frac\": %.4f, "
               "\"prefill_avx512_peak_frac\": %.4f, \"decode_tokens\": %d, "
               "\"decode_tok_s\": %.3f, \"decode_median_ms\": %.3f, \"decode_16k_tokens\": %d, "
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
               model, size, nth, wp, quick ? "true" : "false", long_ctx, prompt, pf_form, pf_best,
               pf_attn_s, pf_attn_k_s, pf_tok_s,
               pf_lin_gf, peak, amx_peak, pf_lin_gf / pf_peak, pf_lin_gf / peak, ndec, dec_tok_s,
               1e3 * dec_med, nlong,
               long_tok_s, 1e3 * long_med, long_pf, chunk, long_pf_attn, long_pf_attn_k,
               co.weight_bytes, co.attn_weight_bytes,
               co.mlp_weight_bytes, co.lm_head_bytes, co.linear_flops, co.kv_bytes_per_ctx,
               co.attn_flops_per_ctx, bw, bw_frac, roof, co.weight_bytes / dec_med / (bw * 1e9),
               (t_bytes > t_flops ? t_bytes : t_flops) / long_med, t_bytes, t_flops, rss_mib, load_start,
               load_dec, load_long);
    } else {
        printf("  prefill %d tokens: %.1f tok/s; linear layers %.1f GFLOP/s = prefill_peak_frac "
               "%.3f of the %s peak %.1f GFLOP/s (%.3f of the AVX-512 peak %.1f; %.0f%% of the "
               "step in linear)\n", prompt, pf_tok_s, pf_lin_gf, pf_lin_gf / pf_peak,
               amx ? "AMX tile" : "bf16", pf_peak, pf_lin_gf / peak, peak,
               100.0 * pf_lin_s / pf_best);
        printf("  prefill form %s: step %.3f s, attention (form-specific part) %.3f s, of which "
               "attention kernels %.3f s\n", pf_form, pf_best, pf_attn_s, pf_attn_k_s);
        printf("  prefill step profile (rank 0):");
        for (int p = 0; p < NUMLA_MODEL_PART_COUNT; p++)
            printf(" %s %.3f", numla_model_part_names[p], pf_part[p]);
        printf(" s\n");
        printf("  decode batch 1, %d tokens after %d: %.2f tok/s (median %.2f ms); active "
               "weights %.1f MB/token (attn %.1f, mlp %.1f, lm_head+embed %.1f); read %.2f GB/s "
               "-> decode_bw_frac %.3f\n", ndec, prompt, dec_tok_s, 1e3 * dec_med,
               co.weight_bytes / 1e6, co.attn_weight_bytes / 1e6, co.mlp_weight_bytes / 1e6,
               co.lm_head_bytes / 1e6, bw, bw_frac);
        printf("  decode batch 1, %d tokens after %d%s: %.2f tok/s (median %.2f ms); bound "
               "bytes %.2f ms, flops %.2f ms -> roofline_frac %.3f (context prefill %.1f s)\n",
               nlong, long_ctx, quick ? " (--quick: not 16384)" : "", long_tok_s,
               1e3 * long_med, 1e3 * t_bytes, 1e3 * t_flops, roof, long_pf);
        printf("  peak RSS %.1f MiB; load average %.2f / %.2f / %.2f (start / after decode / "
               "end)\n", rss_mib, load_start, load_dec, load_long);
    }
    fflush(stdout);
    free(x.tok);
    free(x.pos);
    free(x.slot);
    free(x.logits);
    free(sa.bt);
    free(sb.bt);
    free(dt);
    numla_engine_destroy(&x.e);
    numla_comm_destroy(&x.c);
    if (we_inited)
        MPI_Finalize();
    return 0;
}

NUMLA_CLI_COMMAND("bench model", bench_model_main,
                  "prefill/decode tokens/s of a model vs bandwidth and bf16 peak, 16k-context "
                  "decode, per-rank compute vs comm [--model DIR] [--quick]")
