/* engine/run.c — `numla run`: serve a JSONL file of requests, one request at a time (prefill in
 * chunks, then decode), writing each result as it finishes (engine/request_io.h).
 * Under mpirun the model is sharded over the ranks (engine/engine.h): rank 0 reads the
 * requests, plans every step, samples and writes the results; the other ranks run the engine's
 * worker loop. A bad request line or a request the engine rejects yields an error record; the
 * run goes on. An unrecoverable failure on any rank aborts the job (numla_comm_abort); result
 * lines already written stay intact (each is flushed). Throughput goes to stderr at the end.
 * Collective over MPI_COMM_WORLD (initialises MPI when the caller has not).
 */
#include <errno.h>
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "common/log.h"
#include "engine/cli.h"
#include "engine/config.h"
#include "engine/engine.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/request_io.h"
#include "engine/run.h"
#include "engine/sampler.h"
#include "engine/safetensors.h"
#include "engine/weights.h"

typedef struct run_opts {
    const char *model, *input, *output;
    int threads;
    int64_t max_context;
    int32_t block_size;
    int32_t prefill_chunk;
    numla_dtype kv_dtype;
} run_opts;

typedef struct run_stats {
    int64_t requests, errors, prompt_tokens, gen_tokens;
    double prefill_s, decode_s;
} run_stats;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: numla run --model DIR --input requests.jsonl --output results.jsonl\n"
            "                 [--threads N] [--max-context N (default min(4096, model))]\n"
            "                 [--kv-dtype bf16|f16|f32] [--block-size N] [--prefill-chunk N]\n"
            "Input '-' reads stdin, output '-' writes stdout. NUMLA_ISA picks the kernel level.\n");
}

/* One step of `n` tokens for one sequence; logits of its last token into `logits`. */
static numla_status run_step(numla_engine *e, numla_kv_cache *kv, numla_kv_seq *seq,
                             const int32_t *tokens, int32_t n, int64_t *slots, int32_t *pos,
                             float *logits)
{
    NUMLA_CHECK(numla_kv_seq_reserve(kv, seq, seq->len + n));
    for (int32_t i = 0; i < n; i++) {
        pos[i] = (int32_t)(seq->len + i);
        slots[i] = numla_kv_seq_slot(kv, seq, seq->len + i);
    }
    int32_t qsl[2] = {0, n}, len = (int32_t)(seq->len + n), row = n - 1;
    numla_step st = {.num_seqs = 1, .num_tokens = n, .tokens = tokens, .positions = pos,
                     .slots = slots, .query_start_loc = qsl, .seq_lens = &len,
                     .block_tables = seq->block_table, .max_blocks_per_seq = seq->num_blocks,
                     .num_logit_rows = 1, .logit_rows = &row};
    NUMLA_CHECK(numla_engine_step(e, &st, logits));
    seq->len += n;
    return NUMLA_STATUS_OK;
}

/* Serve one valid request; on an engine failure, fills `err` and returns its status. */
static numla_status serve(const run_opts *o, const numla_model_config *cfg, numla_engine *m,
                          numla_kv_cache *kv, const numla_request *rq, FILE *out, run_stats *rs,
                          float *logits, int64_t *slots, int32_t *pos)
{
    numla_sampler *smp = NULL;
    numla_kv_seq seq = {0};
    int32_t *gen = NULL;
    numla_logprob_entry *lps = NULL;
    numla_status s = NUMLA_STATUS_OK;
    const int32_t maxt = rq->params.max_tokens;
    int32_t ngen = 0;
    const char *finish = "length";
    NUMLA_CHECK_GOTO(numla_sampler_create(&rq->params, (int32_t)cfg->vocab_size, &smp), s, done);
    gen = malloc(sizeof *gen * (size_t)(maxt + 1));
    if (rq->params.logprobs >= 0)
        lps = calloc((size_t)maxt + 1, sizeof *lps);
    if (!gen || (rq->params.logprobs >= 0 && !lps)) {
        s = numla_error_set(NUMLA_STATUS_NO_MEMORY, __FILE__, __LINE__, __func__,
                            "no memory for %d output tokens", maxt);
        goto done;
    }
    if (maxt > 0) {
        double t0 = now_s();
        for (int32_t at = 0; at < rq->num_prompt; at += o->prefill_chunk) {
            int32_t n = rq->num_prompt - at < o->prefill_chunk ? rq->num_prompt - at
                                                                : o->prefill_chunk;
            NUMLA_CHECK_GOTO(run_step(m, kv, &seq, rq->prompt_tokens + at, n, slots, pos, logits),
                             s, done);
        }
        double t1 = now_s();
        rs->prefill_s += t1 - t0;
        rs->prompt_tokens += rq->num_prompt;
        for (;;) {
            int32_t tok;
            NUMLA_CHECK_GOTO(numla_sampler_sample(smp, logits, &tok, lps ? &lps[ngen] : NULL), s,
                             done);
            gen[ngen++] = tok;
            if (numla_sampler_is_stop(smp, tok, cfg->eos_token_ids, cfg->num_eos)) {
                finish = "stop";
                break;
            }
            if (ngen >= maxt)
                break;
            NUMLA_CHECK_GOTO(run_step(m, kv, &seq, &tok, 1, slots, pos, logits), s, done);
        }
        rs->decode_s += now_s() - t1;
        rs->gen_tokens += ngen;
    }
    numla_result res = {.req = rq, .output_tokens = gen, .num_output = ngen,
                        .finish_reason = finish, .logprobs = lps};
    NUMLA_CHECK_GOTO(numla_result_write(out, &res), s, done);
done:
    numla_kv_seq_release(kv, &seq);
    numla_sampler_destroy(&smp);
    free(gen);
    free(lps);
    return s;
}

static int write_error(FILE *out, const numla_request *rq, const char *msg)
{
    numla_result res = {.req = rq, .finish_reason = "error", .error = msg};
    if (numla_result_write(out, &res) != NUMLA_STATUS_OK) {
        fprintf(stderr, "numla run: %s\n", numla_error_message());
        return -1;
    }
    return 0;
}

static int is_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
            return 0;
    return 1;
}

int numla_run_main(int argc, char **argv)
{
    run_opts o = {.threads = 0, .max_context = 4096, .block_size = 16, .prefill_chunk = 256,
                  .kv_dtype = NUMLA_DTYPE_BF16};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "numla run: option %s needs a value\n", a);
            usage(stderr);
            return 2;
        }
        i++;
        char *end = NULL;
        if (!strcmp(a, "--model")) {
            o.model = v;
        } else if (!strcmp(a, "--input")) {
            o.input = v;
        } else if (!strcmp(a, "--output")) {
            o.output = v;
        } else if (!strcmp(a, "--threads")) {
            o.threads = (int)strtol(v, &end, 10);
        } else if (!strcmp(a, "--max-context")) {
            o.max_context = strtoll(v, &end, 10);
        } else if (!strcmp(a, "--block-size")) {
            o.block_size = (int32_t)strtol(v, &end, 10);
        } else if (!strcmp(a, "--prefill-chunk")) {
            o.prefill_chunk = (int32_t)strtol(v, &end, 10);
        } else if (!strcmp(a, "--kv-dtype")) {
            if (!strcmp(v, "bf16"))
                o.kv_dtype = NUMLA_DTYPE_BF16;
            else if (!strcmp(v, "f16"))
                o.kv_dtype = NUMLA_DTYPE_F16;
            else if (!strcmp(v, "f32"))
                o.kv_dtype = NUMLA_DTYPE_F32;
            else {
                fprintf(stderr, "numla run: --kv-dtype %s is not bf16, f16 or f32\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "numla run: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
        if (end && *end) {
            fprintf(stderr, "numla run: option %s: '%s' is not a number\n", a, v);
            return 2;
        }
    }
    if (!o.model || !o.input || !o.output) {
        usage(stderr);
        return 2;
    }
    if (o.threads < 0 || o.max_context < 1 || o.block_size < 1 || o.prefill_chunk < 1) {
        fprintf(stderr, "numla run: --threads/--max-context/--block-size/--prefill-chunk must be "
                        "positive\n");
        return 2;
    }
    int mpi_inited = 0, own_mpi = 0;
    MPI_Initialized(&mpi_inited);
    if (!mpi_inited) {
        int provided;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
            fprintf(stderr, "numla run: MPI_Init_thread failed\n");
            return 1;
        }
        own_mpi = 1;
    }

    numla_comm *comm = NULL;
    numla_engine *eng = NULL;
    const numla_model_config *cfgp = NULL;
    numla_kv_cache *kv = NULL;
    FILE *in = NULL, *out = NULL;
    float *logits = NULL;
    int64_t *slots = NULL;
    int32_t *pos = NULL;
    char *line = NULL;
    size_t cap = 0;
    int rc = 1, rank = 0;
    run_stats rs = {0};
    numla_status s;
    double t_load = now_s();
    NUMLA_CHECK_GOTO(numla_comm_create(MPI_COMM_WORLD, &comm), s, fail);
    rank = numla_comm_rank(comm);
    numla_log_set_rank(rank);
    numla_engine_options eo = numla_engine_options_default();
    eo.num_threads = o.threads;
    eo.block_size = o.block_size;
    eo.max_context = o.max_context;
    eo.kv_dtype = o.kv_dtype;
    NUMLA_CHECK_GOTO(numla_engine_create(comm, o.model, &eo, &eng), s, fail);
    if (rank != 0) {
        /* rank 0 owns requests, sampling and output; the others only run steps */
        NUMLA_CHECK_GOTO(numla_engine_worker_loop(eng), s, fail);
        rc = 0;
        goto cleanup;
    }
    cfgp = numla_engine_config(eng);
    const numla_model_config cfg = *cfgp;
    kv = numla_engine_kv_cache(eng);
    if (o.max_context > cfg.max_position_embeddings)
        o.max_context = cfg.max_position_embeddings;
    if (o.max_context > kv->num_blocks * kv->block_size)
        o.max_context = kv->num_blocks * kv->block_size;
    logits = malloc(sizeof *logits * (size_t)cfg.vocab_size);
    slots = malloc(sizeof *slots * (size_t)o.prefill_chunk);
    pos = malloc(sizeof *pos * (size_t)o.prefill_chunk);
    if (!logits || !slots || !pos) {
        s = numla_error_set(NUMLA_STATUS_NO_MEMORY, __FILE__, __LINE__, __func__, "no memory");
        goto fail;
    }
    numla_isa isa;
    NUMLA_CHECK_GOTO(numla_isa_select(&isa), s, fail);
    fprintf(stderr, "numla run: %s (%s, %lld layers) loaded in %.2f s: %.1f MB of weights on "
                    "rank 0, %d rank%s, isa %s, %d threads, context %lld, kv %s\n",
            o.model, cfg.model_type, (long long)cfg.num_hidden_layers, now_s() - t_load,
            (double)numla_engine_weight_bytes(eng) / 1e6, numla_comm_size(comm),
            numla_comm_size(comm) > 1 ? "s" : "", numla_isa_name(isa),
            numla_engine_num_threads(eng), (long long)o.max_context,
            numla_dtype_name(o.kv_dtype));

    in = strcmp(o.input, "-") ? fopen(o.input, "rb") : stdin;
    if (!in) {
        s = numla_error_set(NUMLA_STATUS_IO, __FILE__, __LINE__, __func__, "%s: %s", o.input,
                            strerror(errno));
        goto fail;
    }
    out = strcmp(o.output, "-") ? fopen(o.output, "w") : stdout;
    if (!out) {
        s = numla_error_set(NUMLA_STATUS_IO, __FILE__, __LINE__, __func__, "%s: %s", o.output,
                            strerror(errno));
        goto fail;
    }
    numla_request_limits lim = {.vocab_size = cfg.vocab_size, .max_context = o.max_context};
    double t_run = now_s();
    int64_t lineno = 0;
    ssize_t n;
    rc = 0;
    while ((n = getline(&line, &cap, in)) >= 0) {
        lineno++;
        if (is_blank(line, (size_t)n))
            continue;
        numla_request rq;
        NUMLA_CHECK_GOTO(numla_request_parse(line, (size_t)n, lineno, &lim, &rq), s, fail);
        rs.requests++;
        if (rq.error[0]) {
            rs.errors++;
            if (write_error(out, &rq, rq.error))
                rc = 1;
        } else if ((s = serve(&o, &cfg, eng, kv, &rq, out, &rs, logits, slots, pos)) !=
                   NUMLA_STATUS_OK) {
            char msg[1024];
            snprintf(msg, sizeof msg, "line %lld: %s", (long long)lineno, numla_error_message());
            rs.errors++;
            fprintf(stderr, "numla run: %s\n%s", msg, numla_error_trace());
            if (write_error(out, &rq, msg))
                rc = 1;
        }
        numla_request_free(&rq);
        if (rc)
            break;
    }
    double t_total = now_s() - t_run;
    fprintf(stderr,
            "numla run: %lld requests (%lld errors) in %.2f s; prefill %lld tokens in %.3f s "
            "(%.1f tok/s); decode %lld tokens in %.3f s (%.1f tok/s)\n",
            (long long)rs.requests, (long long)rs.errors, t_total, (long long)rs.prompt_tokens,
            rs.prefill_s, rs.prefill_s > 0 ? (double)rs.prompt_tokens / rs.prefill_s : 0.0,
            (long long)rs.gen_tokens, rs.decode_s,
            rs.decode_s > 0 ? (double)rs.gen_tokens / rs.decode_s : 0.0);
    goto cleanup;
fail:
    fprintf(stderr, "numla run: %s\n%s", numla_error_message(), numla_error_trace());
    rc = 1;
cleanup:
    free(line);
    if (in && in != stdin)
        fclose(in);
    if (out && out != stdout && fclose(out) != 0) {
        fprintf(stderr, "numla run: %s: %s\n", o.output, strerror(errno));
        rc = 1;
    }
    free(logits);
    free(slots);
    free(pos);
    numla_engine_destroy(&eng); /* rank 0: releases the workers */
    numla_comm_destroy(&comm);
    if (own_mpi)
        MPI_Finalize();
    return rc;
}

NUMLA_CLI_COMMAND("run", numla_run_main, "serve a JSONL file of requests (--model --input --output)")
