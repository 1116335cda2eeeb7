/* bench/bench_serve.c — `numla bench serve`: serving throughput with continuous batching
 * (engine/serving/scheduler.h over engine/parallel/engine.h) at concurrency 1, 8 and 32: greedy requests with
 * mixed prompt lengths and 128 output tokens each, `concurrency` sequences in flight
 * (max_seqs), 2 x concurrency requests per level. The n prompt lengths of a level are evenly
 * spaced over 64..1024 (stratified, then shuffled into a random arrival order), so every level
 * serves the same length distribution with the same mean (544) and the ratios compare
 * concurrency alone, not two samples of different prompts. Reports output tok/s,
 * TTFT and TPOT percentiles and the ratio to concurrency 1 measured in the same run
 * (speedup_vs_batch1, docs/design.md §7). --quick: prompts 16..128, 16 output tokens, one request
 * per sequence slot. Requests go through the serving loop `numla run` uses
 * (engine/serving/serve_loop.h). --http: each level is then served again through HTTP
 * (bench/bench_http.h: closed-loop loopback clients against an in-process `numla serve`),
 * printing its output tok/s, its ratio to the plain level of the same run, the clients' TTFT and
 * TPOT p50/p99 and the HTTP overhead per request. Runs on the ranks of MPI_COMM_WORLD (rank 0
 * prints).
 * Prefix caching (docs/serving.md): --shared-prefix N starts every prompt with the same N tokens
 * (then its own --min-prompt..--max-prompt, default 64..512); --multi-turn T serves
 * conversations: `concurrency` x rounds conversations of T turns, each turn's prompt the previous
 * prompt + its answer + a new 64-token message (the next turn is queued when the answer is
 * back). --prefix-cache on|off|both (default on): with both, each level runs without the cache
 * and then with it, from an empty cache each time (--warm-prefix: the cached level starts with
 * the shared prefix cached, as on a server that has seen it before), and a line gives the
 * ratios (TTFT p50 off / on, output tok/s on / off) and the hit rate.
 * Constrained decoding (docs/serving.md, response_format): --schema builtin|bounded|FILE serves
 * each level twice, without and with every request carrying that JSON Schema as its
 * response_format (builtin: bench grammar's 8-property object; bounded: the same with every
 * string, array and number bounded, so that a random model's greedy output, which otherwise
 * stays inside the first string it opens, walks the whole document within a few dozen tokens;
 * FILE: a schema), the two in alternating order
 * (repetition by repetition and level by level), and a line gives the decode throughput of one
 * sequence (1000 / TPOT p50) and the output tok/s of each and their ratios (with / without),
 * the time per step in the forward pass and outside it (where rank 0 samples and masks) and the
 * ratio with the same forward time in both; the grammar vocabulary is built once, before.
 * The grammar needs the model's tokenizer (e.g. `numla synth --tokenizer synthetic`); requests
 * with a schema may end early (EOS once the document is complete; without one they ignore EOS),
 * so the ratio that compares steps is the decode one.
 * Speculative decoding (docs/speculative.md): --speculative mtp[:K] serves every level with the
 * model's MTP layer drafting K tokens (also through --http), and prints each level's acceptance
 * and tokens per verify step under its line (JSON: in the level's object). */
#include <stddef.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/bench_http.h"
#include "bench/bench_opts.h"
#include "comm/comm.h"
#include "engine/cli/cli.h"
#include "engine/cli/engine_opts.h"
#include "engine/cli/model_text.h"
#include "engine/cli/settings.h"
#include "engine/parallel/engine.h"
#include "engine/model/model.h"
#include "engine/serving/grammar.h"
#include "engine/serving/serve_loop.h"

static uint64_t bs_lcg(uint64_t *x)
{
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    return *x >> 33;
}

/* rq[0..n): prompt lengths pmin + (2j + 1)(pmax - pmin + 1) / 2n for j < n (the midpoints of n
 * equal strata), in a shuffled order, random tokens below vocab; greedy, out_tokens each.
 * Frees the prompts rq held. Returns the total prompt tokens, or -1 without memory. */
static int64_t bs_requests(numla_request *rq, int n, int32_t pmin, int32_t pmax,
                           int32_t out_tokens, int64_t vocab, int32_t prefix)
{
    uint64_t rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
    int64_t total = 0;
    const uint64_t prng = 0x5851f42d4c957f2dull; /* the shared prefix: the same every level */
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
        const int32_t P = rq[i].num_prompt + prefix;
        rq[i].num_prompt = P;
        rq[i].line = i + 1;
        rq[i].prompt_tokens = malloc((size_t)P * sizeof(int32_t));
        if (!rq[i].prompt_tokens)
            return -1;
        uint64_t pr = prng;
        for (int32_t t = 0; t < P; t++)
            rq[i].prompt_tokens[t] = (int32_t)(bs_lcg(t < prefix ? &pr : &rng) % (uint64_t)vocab);
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
    double hit_rate;           /* prefix cache: hit / looked-up tokens */
    int64_t complete;          /* --schema: outputs that are a whole document of the schema */
    int64_t spec_steps, spec_drafted, spec_accepted; /* --speculative: verify steps, drafts
                                                      * checked, drafts accepted */
    double fwd_ms, host_ms;    /* per step: in the forward pass (exec, and the MTP drafts'),
                                  outside it (scheduling, sampling, the grammar's mask on
                                  rank 0) */
    int64_t mtp_steps;         /* --speculative: MTP steps run, and their time (s) */
    double mtp_s;
} bs_level;

static void bs_print_level(const bs_level *lv, const bs_level *base, int c, int rp, int repeat,
                           int json, const char *model, int threads, int ranks, int spec_k)
{
    const double sp = base->tps > 0 ? lv->tps / base->tps : 0;
    /* --speculative: drafts accepted / checked, and tokens per verify step (docs/speculative.md) */
    const double acc = lv->spec_drafted > 0 ? (double)lv->spec_accepted / (double)lv->spec_drafted
                                            : 0.0;
    const double len = lv->spec_steps > 0
                           ? (double)(lv->spec_accepted + lv->spec_steps) / (double)lv->spec_steps
                           : 0.0;
    if (json) {
        printf("{\"bench\":\"serve\",\"model\":\"%s\",\"threads\":%d,\"ranks\":%d,"
               "\"repetition\":%d,\"concurrency\":%d,\"requests\":%d,\"prompt_tokens\":%lld,"
               "\"output_tokens\":%lld,\"wall_s\":%.3f,\"output_tok_s\":%.2f,"
               "\"speedup_vs_batch1\":%.3f,\"ttft_p50_ms\":%.1f,\"ttft_p99_ms\":%.1f,"
               "\"tpot_p50_ms\":%.2f,\"tpot_p99_ms\":%.2f",
               model, threads, ranks, rp, c, lv->requests, (long long)lv->prompt_tokens,
               (long long)lv->out_tokens, lv->wall, lv->tps, sp, lv->ttft50, lv->ttft99,
               lv->tpot50, lv->tpot99);
        if (spec_k > 0)
            printf(",\"speculative_k\":%d,\"draft_tokens\":%lld,\"accepted_tokens\":%lld,"
                   "\"acceptance_rate\":%.4f,\"mean_accepted_length\":%.3f,\"mtp_steps\":%lld,"
                   "\"mtp_s\":%.3f", spec_k, (long long)lv->spec_drafted,
                   (long long)lv->spec_accepted, acc, len, (long long)lv->mtp_steps, lv->mtp_s);
        printf("}\n");
    } else {
        printf("%12d %9d %11.1f %13.1f %9.2f %12.1f %12.1f %12.2f %12.2f%s\n", c, lv->requests,
               (double)lv->prompt_tokens / lv->requests, lv->tps, sp, lv->ttft50, lv->ttft99,
               lv->tpot50, lv->tpot99,
               repeat > 1 ? (rp % 2 ? "   (backward sweep)" : "   (forward sweep)") : "");
        if (spec_k > 0)
            printf("%12s speculative mtp:%d: acceptance %.1f %% (%lld of %lld draft tokens), "
                   "mean accepted length %.2f tokens per verify step; %lld MTP steps, %.2f s\n",
                   "", spec_k, 100.0 * acc, (long long)lv->spec_accepted,
                   (long long)lv->spec_drafted, len, (long long)lv->mtp_steps, lv->mtp_s);
    }
    fflush(stdout);
}

/* --prefix-cache both: a level with the cache against the same level without it. */
static void bs_print_prefix(const bs_level *off, const bs_level *on, int c, int json)
{
    const double ttft = on->ttft50 > 0 ? off->ttft50 / on->ttft50 : 0,
                 tps = off->tps > 0 ? on->tps / off->tps : 0;
    if (json)
        printf("{\"bench\":\"serve_prefix_cache\",\"concurrency\":%d,\"hit_rate\":%.4f,"
               "\"off_output_tok_s\":%.2f,\"on_output_tok_s\":%.2f,\"tok_s_on_over_off\":%.3f,"
               "\"off_ttft_p50_ms\":%.1f,\"on_ttft_p50_ms\":%.1f,\"ttft_p50_off_over_on\":%.3f,"
               "\"off_tpot_p50_ms\":%.2f,\"on_tpot_p50_ms\":%.2f}\n",
               c, on->hit_rate, off->tps, on->tps, tps, off->ttft50, on->ttft50, ttft, off->tpot50,
               on->tpot50);
    else
        printf("  prefix cache, concurrency %d: hit rate %.1f %%; output tok/s %.1f -> %.1f "
               "(%.2fx); TTFT p50 %.1f -> %.1f ms (%.2fx lower); TPOT p50 %.2f -> %.2f ms\n",
               c, 100.0 * on->hit_rate, off->tps, on->tps, tps, off->ttft50, on->ttft50, ttft,
               off->tpot50, on->tpot50);
    fflush(stdout);
}

/* --schema: a level with every request constrained against the same level without. */
static double bs_decode_tps(const bs_level *lv)
{
    return lv->tpot50 > 0 ? 1e3 / lv->tpot50 : 0;
}

static void bs_print_schema(const bs_level *off, const bs_level *on, int c, int json)
{
    const double dr = bs_decode_tps(off) > 0 ? bs_decode_tps(on) / bs_decode_tps(off) : 0,
                 orr = off->tps > 0 ? on->tps / off->tps : 0,
                 mean = on->requests ? (double)on->out_tokens / on->requests : 0;
    /* the two runs' forward passes vary with the machine; what the schema adds is outside
     * them: the ratio the steps would have with the same forward time (the mean of both) */
    const double f = 0.5 * (off->fwd_ms + on->fwd_ms),
                 est = f + on->host_ms > 0 ? (f + off->host_ms) / (f + on->host_ms) : 0;
    if (json)
        printf("{\"bench\":\"serve_schema\",\"concurrency\":%d,\"decode_tok_s_without\":%.2f,"
               "\"decode_tok_s_with\":%.2f,\"decode_with_over_without\":%.3f,"
               "\"output_tok_s_without\":%.2f,\"output_tok_s_with\":%.2f,"
               "\"output_with_over_without\":%.3f,\"tpot_p50_ms_without\":%.2f,"
               "\"tpot_p50_ms_with\":%.2f,\"tpot_p99_ms_without\":%.2f,\"tpot_p99_ms_with\":%.2f,"
               "\"with_mean_output_tokens\":%.1f,\"with_requests\":%d,\"with_complete\":%lld,"
               "\"forward_ms_per_step_without\":%.2f,\"forward_ms_per_step_with\":%.2f,"
               "\"outside_ms_per_step_without\":%.3f,\"outside_ms_per_step_with\":%.3f,"
               "\"same_forward_with_over_without\":%.4f}\n",
               c, bs_decode_tps(off), bs_decode_tps(on), dr, off->tps, on->tps, orr, off->tpot50,
               on->tpot50, off->tpot99, on->tpot99, mean, on->requests, (long long)on->complete,
               off->fwd_ms, on->fwd_ms, off->host_ms, on->host_ms, est);
    else
        printf("  schema, concurrency %d: decode %.2f -> %.2f tok/s per sequence (1000 / TPOT p50; "
               "with / without %.3f); output tok/s %.1f -> %.1f (%.3f); TPOT p50 %.2f -> %.2f ms, "
               "p99 %.2f -> %.2f ms; with the schema %.1f output tokens per request, %lld of %d "
               "a whole document\n    per step: forward %.2f -> %.2f ms, outside it %.3f -> "
               "%.3f ms; with the same forward time, steps with / without %.4f\n",
               c, bs_decode_tps(off), bs_decode_tps(on), dr, off->tps, on->tps, orr, off->tpot50,
               on->tpot50, off->tpot99, on->tpot99, mean, (long long)on->complete, on->requests,
               off->fwd_ms, on->fwd_ms, off->host_ms, on->host_ms, est);
    fflush(stdout);
}

/* --schema over the repetitions, per level: the median, min and max of the decode ratios. */
static void bs_print_schema_summary(const bs_level *res, const bs_level *sch, const int *conc,
                                    int nconc, int repeat, int json)
{
    for (int k = 0; k < nconc; k++) {
        double r[64];
        for (int p = 0; p < repeat; p++) {
            const double off = bs_decode_tps(&res[p * nconc + k]);
            r[p] = off > 0 ? bs_decode_tps(&sch[p * nconc + k]) / off : 0;
        }
        const double med = numla_bench_median(r, repeat);
        double lo = r[0], hi = r[0];
        for (int p = 1; p < repeat; p++) {
            lo = r[p] < lo ? r[p] : lo;
            hi = r[p] > hi ? r[p] : hi;
        }
        if (json)
            printf("{\"bench\":\"serve_schema_summary\",\"repetitions\":%d,\"concurrency\":%d,"
                   "\"decode_with_over_without\":%.3f,\"min\":%.3f,\"max\":%.3f}\n",
                   repeat, conc[k], med, lo, hi);
        else
            printf("schema, concurrency %d: decode with / without the schema, median of %d "
                   "repetitions %.3f (%.3f-%.3f)\n", conc[k], repeat, med, lo, hi);
    }
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
               "                         [--repeat 1] [--http]\n"
               "                         [--shared-prefix N | --multi-turn TURNS]\n"
               "                         [--prefix-cache on|off|both [--warm-prefix]]\n"
               "                         [--weights bf16|int8|fp8|q8_0|q4_0|q4_k [--keep-lm-head]]\n"
               "                         [--linear-act f32|bf16|q8] [--schema builtin|bounded|FILE]\n"
               "                         [--speculative mtp[:K] (draft with the model's MTP "
               "layer; acceptance per level)]\n");
}

typedef struct bs_opts {
    numla_cli_engine_opts e; /* --model, --threads, --weights, --keep-lm-head,
                                --max-batch-tokens, --prefill-chunk */
    const char *conc_s;
    int json, quick, out_tokens, pmin, pmax, rounds;
    int repeat, http;
    int shared_prefix, turns, msg_tokens;
    int warm_prefix;           /* --warm-prefix: the cached level starts with the prefix cached */
    int cache_modes;           /* bit 0: off, bit 1: on */
    int prompt_given;          /* --min-prompt or --max-prompt given */
    int conc[16], nconc, maxc;
    const char *schema;        /* --schema: "builtin", "bounded" or a file of a JSON Schema;
                                  NULL: none */
    numla_grammar *grammar;    /* its grammar (every rank loads it; rank 0 serves it) */
    numla_tokenizer *tok;      /* the model's tokenizer (with --schema) */
    numla_grammar_vocab *gvocab; /* its grammar vocabulary, built once for every level */
} bs_opts;

/* Parse the command line into o; returns -1 to go on, else the exit code. */
static int bs_parse_opts(int argc, char **argv, bs_opts *o)
{
    static const char *const cmd = "numla bench serve";
    static const char *const shared[] = {"--model", "--threads", "--weights", "--keep-lm-head", "--linear-act",
                                         "--max-batch-tokens", "--prefill-chunk", "--speculative",
                                         NULL};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        const int r = numla_bench_engine_opt(cmd, &o->e, shared, argc, argv, &i);
        if (r == NUMLA_CLI_OPT_BAD)
            return 2;
        if (r != NUMLA_CLI_OPT_NONE)
            continue;
        int *num = !strcmp(a, "--output-tokens") ? &o->out_tokens
                   : !strcmp(a, "--min-prompt")  ? &o->pmin
                   : !strcmp(a, "--max-prompt")  ? &o->pmax
                   : !strcmp(a, "--rounds")      ? &o->rounds
                   : !strcmp(a, "--repeat")      ? &o->repeat
                   : !strcmp(a, "--shared-prefix") ? &o->shared_prefix
                   : !strcmp(a, "--multi-turn")  ? &o->turns
                                                 : NULL;
        if (num) {
            if (!numla_bench_int_opt(cmd, argc, argv, &i, num))
                return 2;
            if (num == &o->pmin || num == &o->pmax)
                o->prompt_given = 1;
        } else if (!strcmp(a, "--json")) {
            o->json = 1;
        } else if (!strcmp(a, "--quick")) {
            o->quick = 1;
        } else if (!strcmp(a, "--http")) {
            o->http = 1;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (v && !strcmp(a, "--concurrency")) {
            o->conc_s = argv[++i];
        } else if (v && !strcmp(a, "--schema")) {
            o->schema = argv[++i];
        } else if (!strcmp(a, "--warm-prefix")) {
            o->warm_prefix = 1;
        } else if (v && !strcmp(a, "--prefix-cache")) {
            const char *m = argv[++i];
            o->cache_modes = !strcmp(m, "on")     ? 2
                             : !strcmp(m, "off")  ? 1
                             : !strcmp(m, "both") ? 3
                                                  : 0;
            if (!o->cache_modes) {
                fprintf(stderr, "%s: --prefix-cache %s is not on, off or both\n", cmd, m);
                return 2;
            }
        } else {
            fprintf(stderr, "%s: unknown option %s\n", cmd, a);
            usage(stderr);
            return 2;
        }
    }
    if ((o->shared_prefix > 0 || o->turns > 0) && !o->prompt_given) {
        o->pmin = 64;
        o->pmax = 512;
    }
    if (o->quick) {
        o->out_tokens = 16;
        o->pmin = 16;
        o->pmax = o->shared_prefix > 0 || o->turns > 0 ? 64 : 128;
        o->rounds = 1;
    }
    o->msg_tokens = o->quick ? 16 : 64;
    if (!o->e.model || o->out_tokens < 1 || o->pmin < 1 || o->pmax < o->pmin || o->rounds < 1 ||
        o->shared_prefix < 0 || o->turns < 0 || (o->shared_prefix > 0 && o->turns > 0) ||
        o->e.max_batch_tokens < 1 || o->e.prefill_chunk < 1 || o->repeat < 1 || o->repeat > 64) {
        usage(stderr);
        return 2;
    }
    if (o->schema && (o->http || o->cache_modes == 3)) {
        fprintf(stderr, "%s: --schema is not served with --http or --prefix-cache both\n", cmd);
        return 2;
    }
    /* each concurrency level sets its own max_seqs (and lifts the batch to it), so the
     * engine check's batch-tokens-vs-sequences rule has nothing to hold here */
    o->e.max_seqs = 1;
    const int rc = numla_cli_engine_opts_check(cmd, &o->e);
    if (rc >= 0)
        return rc;
    for (const char *p = o->conc_s; *p && o->nconc < 16;) {
        char *end = NULL;
        const long c = strtol(p, &end, 10);
        o->conc[o->nconc] = c > 0 && c <= INT32_MAX ? (int)c : 0;
        if (o->conc[o->nconc] < 1 || (*end && *end != ',')) {
            fprintf(stderr, "numla bench serve: bad --concurrency %s\n", o->conc_s);
            return 2;
        }
        o->nconc++;
        p = strchr(p, ',');
        if (!p)
            break;
        p++;
    }
    o->maxc = 1;
    for (int i = 0; i < o->nconc; i++)
        o->maxc = o->conc[i] > o->maxc ? o->conc[i] : o->maxc;
    return -1;
}

static numla_status bs_engine_create(const bs_opts *o, const numla_settings *set,
                                     numla_comm *comm, numla_engine **eng)
{
    numla_engine_options eo = numla_engine_options_default();
    numla_settings_engine_options(set, &eo);
    eo.num_threads = o->e.threads;
    eo.block_size = 0; /* the model's */
    eo.weights = o->e.weights;
    eo.mtp = o->e.spec_k > 0; /* --speculative: the MTP layer too */
    eo.prefix_cache = 1;      /* the levels with the prefix cache on */
    /* every sequence in flight at its longest, plus a little slack */
    const int64_t longest =
        (int64_t)o->pmax + o->shared_prefix + o->out_tokens +
        (o->turns > 1 ? (int64_t)(o->turns - 1) * (o->out_tokens + o->msg_tokens) : 0);
    eo.num_blocks = (int64_t)o->maxc * ((longest + 15) / 16 + 1) + 16;
    return numla_engine_create(comm, o->e.model, &eo, eng);
}

/* ---- the serving loop's source and sink: n prepared requests, results only counted ---- */

/* --multi-turn: one conversation's tokens so far and where it stands. */
typedef struct bs_conv {
    int32_t *tok;              /* (n) the next turn's prompt once ready */
    int32_t n, cap;
    int turn;                  /* turns served or in flight */
    int ready;                 /* the next turn may be queued */
    uint64_t rng;
} bs_conv;

typedef struct bs_source {
    const numla_request *rq;
    int n, next;
    bs_conv *conv;             /* (n) with --multi-turn, else NULL */
    int turns, msg_tokens;
    int64_t vocab, prompt_tokens;
    int64_t errors;            /* requests answered with an error */
    char error[256];           /* the first error */
    const numla_grammar *grammar; /* --schema's level: each output is checked against it */
    const numla_tokenizer *tok;
    int64_t complete, violations; /* outputs that are a whole document / not a document's start */
} bs_source;

/* --multi-turn: the first ready conversation's next turn, NONE while turns are in flight. */
static numla_status bs_conv_next(bs_source *src, numla_request *req, void **user,
                                 numla_serve_pull *what)
{
    int left = 0;
    for (int i = 0; i < src->n; i++) {
        bs_conv *cv = &src->conv[i];
        left |= cv->turn < src->turns || !cv->ready;
        if (!cv->ready || cv->turn == src->turns)
            continue;
        *req = src->rq[i];
        req->grammar = req->grammar ? numla_grammar_ref(req->grammar) : NULL; /* the loop's */
        req->prompt_tokens = malloc((size_t)cv->n * sizeof *req->prompt_tokens);
        if (!req->prompt_tokens)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "bench serve: no memory for a prompt");
        memcpy(req->prompt_tokens, cv->tok, (size_t)cv->n * sizeof *cv->tok);
        req->num_prompt = cv->n;
        cv->ready = 0;
        cv->turn++;
        src->prompt_tokens += cv->n;
        *user = cv;
        *what = NUMLA_SERVE_PULL_REQUEST;
        return NUMLA_STATUS_OK;
    }
    *what = left ? NUMLA_SERVE_PULL_NONE : NUMLA_SERVE_PULL_END;
    return NUMLA_STATUS_OK;
}

static numla_status bs_source_next(void *ctx, numla_request *req, void **user,
                                   numla_serve_pull *what)
{
    bs_source *src = ctx;
    if (src->conv)
        return bs_conv_next(src, req, user, what);
    if (src->next == src->n) {
        *what = NUMLA_SERVE_PULL_END;
        return NUMLA_STATUS_OK;
    }
    const numla_request *q = &src->rq[src->next++];
    *req = *q; /* the loop owns its copy: the prompt is duplicated, the grammar referenced */
    req->grammar = q->grammar ? numla_grammar_ref(q->grammar) : NULL;
    req->prompt_tokens = malloc((size_t)q->num_prompt * sizeof *req->prompt_tokens);
    if (!req->prompt_tokens)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "bench serve: no memory for a prompt");
    memcpy(req->prompt_tokens, q->prompt_tokens, (size_t)q->num_prompt * sizeof *q->prompt_tokens);
    src->prompt_tokens += q->num_prompt;
    *user = NULL;
    *what = NUMLA_SERVE_PULL_REQUEST;
    return NUMLA_STATUS_OK;
}

/* --multi-turn: the answer and a new message extend the conversation; its next turn is ready. */
static numla_status bs_sink_done(void *ctx, void *user, const numla_serve_done *d)
{
    bs_source *src = ctx;
    bs_conv *cv = user;
    const char *fr = d->result.finish_reason;
    if (fr && !strcmp(fr, "error") && !src->errors++)
        snprintf(src->error, sizeof src->error, "%s", d->result.error ? d->result.error : "?");
    if (src->grammar && fr && strcmp(fr, "error")) { /* the output's text against the grammar */
        numla_grammar_matcher *m = NULL;
        NUMLA_CHECK(numla_grammar_matcher_create(src->grammar, &m));
        int ok = 1;
        for (int32_t i = 0; ok && i < d->result.num_output; i++) {
            const int32_t id = d->result.output_tokens[i];
            size_t len = 0;
            const uint8_t *b = numla_tokenizer_is_special(src->tok, id)
                                   ? NULL
                                   : numla_tokenizer_token_bytes(src->tok, id, &len);
            ok = !b || numla_grammar_matcher_accept_bytes(m, b, len);
        }
        src->violations += !ok;
        src->complete += ok && numla_grammar_matcher_is_complete(m);
        numla_grammar_matcher_destroy(&m);
    }
    if (!src->conv || !cv)
        return NUMLA_STATUS_OK;
    const int32_t add = d->result.num_output + src->msg_tokens;
    if (cv->n + add > cv->cap) {
        int32_t cap = 2 * (cv->n + add);
        int32_t *t = realloc(cv->tok, (size_t)cap * sizeof *t);
        if (!t)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "bench serve: no memory for a conversation");
        cv->tok = t;
        cv->cap = cap;
    }
    memcpy(cv->tok + cv->n, d->result.output_tokens,
           (size_t)d->result.num_output * sizeof *cv->tok);
    cv->n += d->result.num_output;
    for (int32_t t = 0; t < src->msg_tokens; t++)
        cv->tok[cv->n++] = (int32_t)(bs_lcg(&cv->rng) % (uint64_t)src->vocab);
    cv->ready = 1;
    return NUMLA_STATUS_OK;
}

/* Serve rq[0..n) (with --multi-turn: n conversations starting from them, o->turns turns each)
 * with c sequences in flight, the prefix cache off or on, from an empty cache; *loop is left
 * for its figures (destroy it); *prompt_tokens (may be NULL) gets the prompt tokens served.
 * schema (NULL: none): every output must be the start of one of its documents (an error
 * otherwise); *complete (may be NULL) gets the outputs that are a whole document. */
static numla_status bs_serve(const bs_opts *o, numla_engine *eng, const numla_request *rq, int n,
                             int c, int cache_on, numla_serve_loop **loop, int64_t *prompt_tokens,
                             const numla_grammar *schema, int64_t *complete)
{
    const numla_model_config *cfg = numla_engine_config(eng);
    const int turns = o->turns > 0 ? o->turns : 1;
    numla_serve_options so = {
        .sched = {.max_batch_tokens = o->e.max_batch_tokens > c ? o->e.max_batch_tokens : c,
                  .max_seqs = c, .prefill_chunk = o->e.prefill_chunk,
                  .vocab_size = cfg->vocab_size, .num_eos = cfg->num_eos,
                  .eos_token_ids = cfg->eos_token_ids,
                  .no_prefix_cache = !cache_on,
                  .prefix_stride = cfg->v4.enabled ? numla_v4_prefix_stride(cfg, 1) : 0,
                  .spec_k = o->e.spec_k,
                  .mtp_exec = o->e.spec_k > 0 ? numla_cli_engine_mtp_exec : NULL,
                  /* built once, outside the levels' time, as a server builds it once */
                  .grammar_vocab = o->gvocab},
        .kv = numla_engine_kv_cache(eng), .exec = bs_exec, .exec_ctx = eng,
        .max_waiting = n * turns, .latency_window = n * turns}; /* every request of the level */
    if (!o->warm_prefix || !cache_on)
        numla_kv_cache_prefix_clear(numla_engine_kv_cache(eng));
    bs_source src = {.rq = rq, .n = n, .turns = turns, .msg_tokens = o->msg_tokens,
                     .vocab = cfg->vocab_size, .grammar = schema,
                     .tok = o->tok};
    numla_status s = NUMLA_STATUS_OK;
    if (o->turns > 0) {
        src.conv = calloc((size_t)n, sizeof *src.conv);
        if (!src.conv)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "bench serve: no memory for conversations");
        for (int i = 0; i < n && s == NUMLA_STATUS_OK; i++) {
            bs_conv *cv = &src.conv[i];
            cv->cap = cv->n = rq[i].num_prompt;
            cv->tok = malloc((size_t)cv->cap * sizeof *cv->tok);
            if (!cv->tok)
                s = numla_error_set(NUMLA_STATUS_NO_MEMORY, __FILE__, __LINE__, __func__,
                                    "bench serve: no memory for conversations");
            else
                memcpy(cv->tok, rq[i].prompt_tokens, (size_t)cv->cap * sizeof *cv->tok);
            cv->ready = 1;
            cv->rng = 0x2545f4914f6cdd1dull + (uint64_t)i;
        }
    }
    numla_serve_source source = {.ctx = &src, .next = bs_source_next};
    numla_serve_sink sink = {.ctx = &src, .done = bs_sink_done};
    if (s == NUMLA_STATUS_OK)
        s = numla_serve_loop_create(&so, &source, &sink, loop);
    if (s == NUMLA_STATUS_OK)
        s = numla_serve_loop_run(*loop, NULL);
    if (prompt_tokens)
        *prompt_tokens = src.prompt_tokens;
    if (complete)
        *complete = src.complete;
    if (s == NUMLA_STATUS_OK && src.errors)
        s = numla_error_set(NUMLA_STATUS_INVALID_ARG, __FILE__, __LINE__, __func__,
                            "%lld requests failed, the first: %s",
                            (long long)src.errors, src.error);
    if (s == NUMLA_STATUS_OK && src.violations) /* the constraint did not hold: not a figure */
        s = numla_error_set(NUMLA_STATUS_INTERNAL, __FILE__, __LINE__, __func__,
                            "%lld of %d outputs with --schema are not the start of a "
                            "document of the schema", (long long)src.violations, n);
    for (int i = 0; src.conv && i < n; i++)
        free(src.conv[i].tok);
    free(src.conv);
    return s;
}

/* Warm-up: first touch of scratch and KV, one short request. */
static numla_status bs_warm_up(const bs_opts *o, numla_engine *eng, const numla_request *rq0)
{
    numla_request w = *rq0;
    w.params.max_tokens = 2;
    bs_opts o1 = *o;
    o1.turns = 0;
    numla_serve_loop *loop = NULL;
    numla_status s = bs_serve(&o1, eng, &w, 1, 1, 1, &loop, NULL, NULL, NULL);
    numla_serve_loop_destroy(&loop);
    return s;
}

/* ---- rank 0's step profile over a level (the other ranks run the same steps) ---- */

/* The model's cumulative counters: the only place this benchmark reads them. */
typedef struct bs_model_counters {
    double part_s[NUMLA_MODEL_PART_COUNT];
    double attn_s, attn_kernel_s, linear_s;
} bs_model_counters;

static void bs_model_counters_read(const numla_model *m, bs_model_counters *c)
{
    if (!m) { /* deepseek_v4's forward keeps no counters */
        memset(c, 0, sizeof *c);
        return;
    }
    numla_model_stats st;
    numla_model_get_stats(m, &st);
    memcpy(c->part_s, st.part_s, sizeof c->part_s);
    c->attn_s = st.attn_s;
    c->attn_kernel_s = st.attn_kernel_s;
    c->linear_s = st.linear_s;
}

/* Where the level's time went: to stderr with --json, so stdout stays one object per line. */
static void bs_print_profile(const bs_opts *o, int c, int with_schema, double wall,
                             const numla_engine_stats *es0,
                             const numla_engine_stats *es1, const bs_model_counters *m0,
                             const bs_model_counters *m1)
{
    const int64_t steps = es1->steps - es0->steps, step_tokens = es1->tokens - es0->tokens;
    FILE *pf = o->json ? stderr : stdout;
    fprintf(pf, "  %s%sconcurrency %d: %lld steps, %.1f tokens/step, step time %.2f of %.2f s "
                "wall; profile s:", o->repeat > 1 ? "repetition " : "",
            with_schema ? "with the schema, " : "", c, (long long)steps,
            steps ? (double)step_tokens / (double)steps : 0.0, es1->step_s - es0->step_s, wall);
    for (int p = 0; p < NUMLA_MODEL_PART_COUNT; p++)
        fprintf(pf, " %s %.2f", numla_model_part_names[p], m1->part_s[p] - m0->part_s[p]);
    fprintf(pf, " (attention's form-specific part %.2f, attention kernels %.2f; linear "
                "layers %.2f)\n", m1->attn_s - m0->attn_s, m1->attn_kernel_s - m0->attn_kernel_s,
            m1->linear_s - m0->linear_s);
    fflush(stdout);
}

/* The same requests through HTTP; one line after the plain level's profile. */
static numla_status bs_run_http(const bs_opts *o, numla_engine *eng, const numla_request *rq,
                                int n, int c, const bs_level *plain)
{
    const numla_model_config *cfg = numla_engine_config(eng);
    const int32_t batch = o->e.max_batch_tokens > c ? o->e.max_batch_tokens : c;
    numla_sched_options so = {.max_batch_tokens = batch, .max_seqs = c,
                              .prefill_chunk = o->e.prefill_chunk,
                              .vocab_size = cfg->vocab_size, .num_eos = cfg->num_eos,
                              .eos_token_ids = cfg->eos_token_ids, .spec_k = o->e.spec_k,
                              .mtp_exec = o->e.spec_k > 0 ? numla_cli_engine_mtp_exec : NULL,
                              .prefix_stride = cfg->v4.enabled ? numla_v4_prefix_stride(cfg, 1)
                                                               : 0};
    numla_bench_http_level h;
    NUMLA_CHECK(numla_bench_http_run(eng, &so, rq, n, c, &h));
    const double ratio = plain->tps > 0 ? h.tps / plain->tps : 0;
    FILE *f = o->json ? stderr : stdout;
    if (o->json)
        printf("{\"bench\":\"serve_http\",\"concurrency\":%d,\"requests\":%d,\"failed\":%d,"
               "\"output_tokens\":%lld,\"wall_s\":%.3f,\"output_tok_s\":%.2f,"
               "\"ratio_vs_plain\":%.3f,\"ttft_p50_ms\":%.1f,\"ttft_p99_ms\":%.1f,"
               "\"tpot_p50_ms\":%.2f,\"tpot_p99_ms\":%.2f,\"http_overhead_ms\":%.2f}\n",
               c, n, h.failed, (long long)h.out_tokens, h.wall, h.tps, ratio, h.ttft50, h.ttft99,
               h.tpot50, h.tpot99, h.overhead_ms);
    else
        fprintf(f, "  http concurrency %d: %d requests (%d failed), %.1f output tok/s = %.3f x "
                   "plain %.1f; TTFT p50 %.1f p99 %.1f ms; TPOT p50 %.2f p99 %.2f ms; HTTP "
                   "overhead %.2f ms per request\n", c, n, h.failed, h.tps, ratio, plain->tps,
                h.ttft50, h.ttft99, h.tpot50, h.tpot99, h.overhead_ms);
    fflush(stdout);
    return NUMLA_STATUS_OK;
}

/* One level: n = c x rounds requests, c in flight; its figures into *lv. */
static numla_status bs_run_level(const bs_opts *o, numla_engine *eng, numla_request *rq, int c,
                                 int cache_on, int with_schema, bs_level *lv)
{
    const int n = c * o->rounds;
    int64_t prompt_tokens = bs_requests(rq, n, o->pmin, o->pmax, o->out_tokens,
                                        numla_engine_config(eng)->vocab_size, o->shared_prefix);
    if (prompt_tokens < 0)
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "bench serve: no memory for the prompts");
    for (int i = 0; i < n; i++) { /* a grammar needs its end token: EOS is not ignored then */
        rq[i].grammar = with_schema ? o->grammar : NULL; /* borrowed; each request a reference */
        rq[i].params.ignore_eos = !with_schema;
    }
    if (cache_on && o->warm_prefix && o->shared_prefix > 0) {
        /* a server that has seen the prefix before: it is cached, untimed, from an empty cache */
        numla_kv_cache_prefix_clear(numla_engine_kv_cache(eng));
        numla_request w = rq[0];
        w.num_prompt = o->shared_prefix + 1;
        w.params.max_tokens = 1;
        bs_opts o1 = *o;
        o1.warm_prefix = 1;
        numla_serve_loop *wl = NULL;
        numla_status ws = bs_serve(&o1, eng, &w, 1, 1, 1, &wl, NULL, NULL, NULL);
        numla_serve_loop_destroy(&wl);
        NUMLA_CHECK(ws);
    }
    const numla_model *m = numla_engine_model(eng);
    bs_model_counters m0, m1;
    numla_engine_stats es0, es1;
    bs_model_counters_read(m, &m0);
    numla_engine_stats_get(eng, &es0);
    numla_serve_loop *loop = NULL;
    double t0 = numla_now_s();
    int64_t complete = 0;
    numla_status s = bs_serve(o, eng, rq, n, c, cache_on, &loop, &prompt_tokens,
                              with_schema ? o->grammar : NULL, &complete);
    double wall = numla_now_s() - t0;
    if (s == NUMLA_STATUS_OK) {
        numla_engine_stats_get(eng, &es1);
        bs_model_counters_read(m, &m1);
        numla_serve_stats st;
        numla_serve_loop_stats_get(loop, &st);
        const double *ttft, *tpot;
        int64_t n_ttft, n_tpot;
        numla_serve_loop_latencies(loop, &ttft, &n_ttft, &tpot, &n_tpot);
        const numla_sched_stats *sc = &st.sched;
        *lv = (bs_level){.requests = (int)st.done, .prompt_tokens = prompt_tokens,
                         .hit_rate = sc->prefix_lookup_tokens > 0
                                         ? (double)sc->prefix_hit_tokens /
                                               (double)sc->prefix_lookup_tokens
                                         : 0.0,
                         .out_tokens = st.output_tokens, .wall = wall,
                         .tps = (double)st.output_tokens / wall,
                         .ttft50 = 1e3 * numla_bench_percentile(ttft, (int)n_ttft, 50),
                         .ttft99 = 1e3 * numla_bench_percentile(ttft, (int)n_ttft, 99),
                         .tpot50 = 1e3 * numla_bench_percentile(tpot, (int)n_tpot, 50),
                         .tpot99 = 1e3 * numla_bench_percentile(tpot, (int)n_tpot, 99),
                         .complete = complete, .spec_steps = sc->spec_steps,
                         .spec_drafted = sc->spec_drafted, .spec_accepted = sc->spec_accepted,
                         .fwd_ms = sc->steps ? 1e3 * (sc->exec_s + sc->mtp_s) / (double)sc->steps
                                             : 0,
                         .host_ms = sc->steps ? 1e3 * (wall - sc->exec_s - sc->mtp_s) /
                                                    (double)sc->steps
                                              : 0,
                         .mtp_steps = sc->mtp_steps, .mtp_s = sc->mtp_s};
        bs_print_profile(o, c, with_schema, wall, &es0, &es1, &m0, &m1);
    }
    numla_serve_loop_destroy(&loop);
    for (int i = 0; i < n; i++)
        rq[i].grammar = NULL;
    if (s == NUMLA_STATUS_OK && o->http && cache_on)
        s = bs_run_http(o, eng, rq, n, c, lv);
    return s;
}

/* Every repetition of every level. Repetitions run the levels in alternating order (forward,
 * then backward), so a drift of the machine over the minutes of a sweep weighs on every level
 * alike. */
static numla_status bs_run_levels(const bs_opts *o, numla_engine *eng, int ranks)
{
    const int nconc = o->nconc, nreq_max = o->maxc * o->rounds;
    numla_request *rq = calloc((size_t)nreq_max, sizeof *rq);
    bs_level *res = calloc((size_t)o->repeat * (size_t)nconc, sizeof *res);
    bs_level *off = calloc((size_t)o->repeat * (size_t)nconc, sizeof *off);
    bs_level *sch = calloc((size_t)o->repeat * (size_t)nconc, sizeof *sch);
    numla_status s = NUMLA_STATUS_OK;
    if (!rq || !res || !off || !sch) {
        s = numla_error_set(NUMLA_STATUS_NO_MEMORY, __FILE__, __LINE__, __func__, "no memory");
        goto done;
    }
    if (!o->json)
        printf("bench serve: %s, %d threads, %d rank(s); prompts %d..%d (stratified), %d output "
               "tokens\n%12s %9s %11s %13s %9s %12s %12s %12s %12s\n",
               o->e.model, numla_engine_num_threads(eng), ranks, o->pmin + o->shared_prefix,
               o->pmax + o->shared_prefix, o->out_tokens,
               "concurrency", "requests", "mean prompt", "output tok/s", "speedup",
               "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms", "TPOT p99 ms");
    for (int r = 0; r < o->repeat * nconc; r++) {
        const int rp = r / nconc, ci = rp % 2 ? nconc - 1 - r % nconc : r % nconc;
        if (r == 0) {
            if (bs_requests(rq, 1, o->pmin, o->pmax, o->out_tokens,
                            numla_engine_config(eng)->vocab_size, o->shared_prefix) < 0) {
                s = numla_error_set(NUMLA_STATUS_NO_MEMORY, __FILE__, __LINE__, __func__,
                                    "bench serve: no memory for the prompts");
                goto done;
            }
            NUMLA_CHECK_GOTO(bs_warm_up(o, eng, &rq[0]), s, done);
        }
        /* --schema: with and without in alternating order, level by level and repetition by
         * repetition, so a drift of the machine weighs on both alike */
        const int schema_first = o->grammar && (rp + ci) % 2;
        for (int pass = 0; pass < 2; pass++) {
            if (o->grammar && pass == !schema_first)
                NUMLA_CHECK_GOTO(bs_run_level(o, eng, rq, o->conc[ci], o->cache_modes >> 1, 1,
                                              &sch[rp * nconc + ci]), s, done);
            if (pass == schema_first && (o->cache_modes & 1))
                NUMLA_CHECK_GOTO(bs_run_level(o, eng, rq, o->conc[ci], 0, 0,
                                              &off[rp * nconc + ci]), s, done);
            if (pass == schema_first && (o->cache_modes & 2))
                NUMLA_CHECK_GOTO(bs_run_level(o, eng, rq, o->conc[ci], 1, 0,
                                              &res[rp * nconc + ci]), s, done);
        }
        if (o->cache_modes == 1)
            res[rp * nconc + ci] = off[rp * nconc + ci];
        if (r % nconc == nconc - 1) { /* the repetition is complete: its lines, against level 0 */
            for (int k = 0; k < nconc; k++)
                bs_print_level(&res[rp * nconc + k], &res[rp * nconc], o->conc[k], rp, o->repeat,
                               o->json, o->e.model, numla_engine_num_threads(eng), ranks,
                               o->e.spec_k);
            for (int k = 0; o->cache_modes == 3 && k < nconc; k++)
                bs_print_prefix(&off[rp * nconc + k], &res[rp * nconc + k], o->conc[k], o->json);
            for (int k = 0; o->grammar && k < nconc; k++)
                bs_print_schema(&res[rp * nconc + k], &sch[rp * nconc + k], o->conc[k], o->json);
        }
    }
    if (o->repeat > 1)
        bs_print_summary(res, o->conc, nconc, o->repeat, o->json);
    if (o->repeat > 1 && o->grammar)
        bs_print_schema_summary(res, sch, o->conc, nconc, o->repeat, o->json);
done:
    if (rq)
        for (int i = 0; i < nreq_max; i++)
            free(rq[i].prompt_tokens);
    free(rq);
    free(res);
    free(off);
    free(sch);
    return s;
}

/* --schema: the model's tokenizer and the schema's grammar. Every rank loads them (rank 0 uses
 * them), so a missing tokenizer or a bad schema stops every rank alike instead of leaving the
 * others in their worker loop. */
static numla_status bs_schema_load(bs_opts *o, const numla_model_config *cfg)
{
    NUMLA_CHECK(numla_model_text_tokenizer(o->e.model, cfg->vocab_size, &o->tok));
    NUMLA_CHECK(numla_grammar_vocab_from_tokenizer(o->tok, cfg->vocab_size, cfg->eos_token_ids,
                                                   cfg->num_eos, &o->gvocab));
    json_error_t je;
    json_t *schema = !strcmp(o->schema, "builtin")   ? json_loads(numla_bench_schema_8prop, 0, &je)
                     : !strcmp(o->schema, "bounded") ? json_loads(numla_bench_schema_bounded, 0, &je)
                                                     : json_load_file(o->schema, 0, &je);
    if (!schema)
        NUMLA_FAIL(NUMLA_STATUS_FORMAT, "--schema %s: not JSON (line %d: %s)",
                   o->schema, je.line, je.text);
    numla_status s = numla_grammar_compile_schema(schema, &o->grammar);
    json_decref(schema);
    if (s != NUMLA_STATUS_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", numla_error_message());
        numla_error_clear();
        NUMLA_FAIL(s, "--schema %s: %s", o->schema, msg);
    }
    return NUMLA_STATUS_OK;
}

static int bench_serve_main(int argc, char **argv)
{
    bs_opts o = {.conc_s = "1,8,32", .out_tokens = 128, .pmin = 64, .pmax = 1024, .rounds = 2,
                 .repeat = 1, .cache_modes = 2};
    numla_cli_engine_opts_default(&o.e); /* batch tokens 2048, prefill chunk 512 */
    int rc = bs_parse_opts(argc, argv, &o);
    if (rc >= 0)
        return rc;
    numla_comm_session mpi = {0};
    numla_engine *eng = NULL;
    numla_settings set;
    numla_status s = numla_settings_start(&set, &mpi);
    if (s == NUMLA_STATUS_OK)
        s = bs_engine_create(&o, &set, mpi.comm, &eng);
    if (s == NUMLA_STATUS_OK && o.schema)
        s = bs_schema_load(&o, numla_engine_config(eng));
    if (s == NUMLA_STATUS_OK)
        s = numla_comm_rank(mpi.comm) != 0 ? numla_engine_worker_loop(eng)
                                           : bs_run_levels(&o, eng, numla_comm_size(mpi.comm));
    numla_grammar_destroy(&o.grammar);
    numla_grammar_vocab_destroy(&o.gvocab);
    numla_tokenizer_destroy(&o.tok);
    rc = 0;
    if (s != NUMLA_STATUS_OK) {
        fprintf(stderr, "numla bench serve: %s\n%s", numla_error_message(), numla_error_trace());
        rc = 1;
    }
    numla_engine_destroy(&eng);
    numla_comm_world_finalize(&mpi);
    return rc;
}

NUMLA_CLI_COMMAND("bench serve", bench_serve_main,
                  "serving throughput at concurrency 1/8/32 with continuous batching (--model "
                  "DIR [--json] [--quick])")
