/* engine/cli/run_cmd.c — `numla run`: serve a JSONL file of requests with continuous batching
 * (engine/serving/scheduler.h) on one or more ranks (engine/parallel/engine.h), writing each result as it
 * finishes, in completion order, one flushed line per request (engine/serving/request_io.h).
 *
 * Under mpirun the model is sharded over the ranks: rank 0 reads the requests, plans every
 * step, samples and writes the results; the other ranks run the engine's worker loop (and
 * ignore SIGINT/SIGTERM: rank 0 decides when to stop).
 *
 * Restartable batch job:
 *   --resume reads the existing output, keeps every complete record, truncates a torn last
 *   line (a kill mid-write leaves a line without its '\n', or one that is not JSON), skips the
 *   input requests already answered (by "id"; id-less error records by their "line N:" prefix)
 *   and appends the rest. Each record is written by one fputs + fflush, so SIGKILL at any time
 *   loses at most the records in flight and never duplicates one on resume.
 *   SIGINT/SIGTERM: stop reading, drop the requests not started yet, finish the ones in flight
 *   (a second signal, a second or more later, stops at once), print the summary and exit
 *   128 + signal number; SIGUSR1/SIGUSR2 (all that mpirun forwards to the ranks; see
 *   launch/numla-launch) count as SIGTERM, and the other ranks ignore all four. The output
 *   is then complete up to what it holds; rerun with --resume for the rest.
 * Exit status: 0 all requests answered (per-request errors included), 1 fatal error, 2 usage,
 * 128 + N stopped by signal N.
 * Progress: on a terminal, one line on stderr (requests done/total, tokens/s, KV use); quiet
 * otherwise. The summary (requests, prompt/output tokens, throughput, TTFT/TPOT p50/p99) goes
 * to stderr at the end.
 * Collective over MPI_COMM_WORLD (initialises MPI when the caller has not).
 */
#define _GNU_SOURCE /* memmem */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "common/log.h"
#include "engine/cli/cli.h"
#include "engine/model/config.h"
#include "engine/parallel/engine.h"
#include "engine/model/kv_cache.h"
#include "engine/serving/request_io.h"
#include "engine/cli/run_cmd.h"
#include "engine/serving/scheduler.h"
#include "engine/text/tokenizer.h"

typedef struct run_opts {
    const char *model, *input, *output;
    int threads;
    int64_t max_context;
    int32_t block_size;
    int32_t prefill_chunk, max_batch_tokens, max_seqs;
    double kv_memory_gib;
    int64_t kv_blocks;
    numla_dtype kv_dtype;
    int resume;
    int progress; /* -1: auto (terminal) */
} run_opts;

/* One request in flight (owned here, borrowed by the scheduler). */
typedef struct run_req {
    numla_request rq;
    struct run_req *prev, *next;
    /* text output (rq.text_output): generated text so far, decoded one token at a time */
    numla_tokenizer_stream *ts;
    char *text;
    size_t text_len, text_cap;
    int text_done;              /* a stop string ended it: text is final */
} run_req;

static void run_req_free(run_req *r)
{
    numla_request_free(&r->rq);
    numla_tokenizer_stream_destroy(&r->ts);
    free(r->text);
    free(r);
}

static int run_text_append(run_req *r, const char *piece, size_t len)
{
    if (r->text_len + len + 1 > r->text_cap) {
        size_t c = r->text_cap ? 2 * r->text_cap : 256;
        while (c < r->text_len + len + 1)
            c *= 2;
        char *p = realloc(r->text, c);
        if (!p)
            return 0;
        r->text = p;
        r->text_cap = c;
    }
    memcpy(r->text + r->text_len, piece, len);
    r->text_len += len;
    r->text[r->text_len] = '\0';
    return 1;
}

/* numla_sched_options.stop_check: decode the newest token into the request's text and end the
 * request when a stop string appears; the text is cut where the stop string starts. */
static int run_stop_check(void *ctx, void *user, const int32_t *out, int32_t n)
{
    (void)ctx;
    run_req *r = user;
    if (!r->rq.text_output || !r->ts || r->text_done || n < 1)
        return 0;
    const char *piece;
    size_t len;
    size_t before = r->text_len;
    if (numla_tokenizer_stream_push(r->ts, out[n - 1], &piece, &len) != NUMLA_STATUS_OK ||
        !run_text_append(r, piece, len))
        return 0;
    for (int32_t i = 0; i < r->rq.num_stop_strings; i++) {
        const char *stop = r->rq.stop_strings[i];
        size_t sl = strlen(stop);
        /* only matches that end in the new piece are new */
        size_t from = before + 1 > sl ? before + 1 - sl : 0;
        char *hit = r->text_len >= sl ? memmem(r->text + from, r->text_len - from, stop, sl) : NULL;
        if (hit) {
            r->text_len = (size_t)(hit - r->text);
            r->text[r->text_len] = '\0';
            r->text_done = 1;
            return 1;
        }
    }
    return 0;
}

typedef struct run_state {
    FILE *out;
    int write_failed;
    run_req *head;              /* outstanding requests */
    int64_t done, ok, errors, prompt_tokens, output_tokens, preemptions;
    double *ttft, *tpot;        /* seconds, per request */
    int64_t n_ttft, n_tpot, cap_ttft, cap_tpot;
} run_state;

static volatile sig_atomic_t run_signal = 0, run_signals = 0;
static volatile long run_signal_ms = 0;

static void run_on_signal(int sig)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long ms = (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    /* One stop often arrives twice at once (Slurm signals every task and srun passes its own
     * copy on): a repeat within a second is the same request, not "stop now". */
    if (run_signals == 1 && ms - run_signal_ms < 1000)
        return;
    run_signal_ms = ms;
    /* SIGUSR1/SIGUSR2: a launcher's SIGTERM passed on by mpirun (which forwards only those) */
    run_signal = sig == SIGUSR1 || sig == SIGUSR2 ? SIGTERM : sig;
    run_signals++;
}

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
            "                 [--resume] [--threads N] [--max-context N (default: the model's)]\n"
            "                 [--max-batch-tokens N (2048)] [--max-seqs N (64)]\n"
            "                 [--prefill-chunk N (512)] [--kv-memory GiB | --kv-blocks N]\n"
            "                 [--kv-dtype bf16|f16|f32] [--block-size N (16)]\n"
            "                 [--progress | --no-progress]\n"
            "Input '-' reads stdin, output '-' writes stdout (not with --resume). The KV pool\n"
            "defaults to %.0f%% of the free memory of each rank's NUMA node after its weights,\n"
            "capped at what --max-seqs sequences of --max-context tokens can use.\n"
            "Exit: 0 done, 1 fatal error, 2 usage, 128+N stopped by signal N (rerun with\n"
            "--resume). NUMLA_ISA picks the kernel level.\n",
            100.0 * NUMLA_KV_MEMORY_FRACTION);
}

static int is_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
            return 0;
    return 1;
}

/* ---- resume: which requests are answered already ---- */

/* Key of a record or request: the compact JSON of its id, or "line N" for an id-less one. */
static int record_key(json_t *id, int64_t line, char *buf, size_t cap)
{
    if (id && !json_is_null(id)) {
        char *s = json_dumps(id, JSON_ENCODE_ANY | JSON_COMPACT);
        if (!s)
            return 0;
        snprintf(buf, cap, "id %s", s);
        free(s);
        return 1;
    }
    if (line <= 0)
        return 0;
    snprintf(buf, cap, "line %lld", (long long)line);
    return 1;
}

/* Read `path`, add the keys of its complete records to `done`, truncate a torn tail.
 * Returns the number of records kept, or -1 with the error set. */
static int64_t resume_scan(const char *path, json_t *done, int64_t *truncated)
{
    *truncated = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT)
            return 0;
        numla_error_set(NUMLA_STATUS_IO, __FILE__, __LINE__, __func__, "--resume: %s: %s", path,
                        strerror(errno));
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int64_t keep = 0, records = 0, lineno = 0;
    int torn = 0;
    while ((n = getline(&line, &cap, f)) >= 0) {
        lineno++;
        int complete = n > 0 && line[n - 1] == '\n';
        json_error_t err;
        json_t *o = complete ? json_loadb(line, (size_t)n, 0, &err) : NULL;
        if (!o || !json_is_object(o)) {
            json_decref(o);
            /* only the last line can be torn: anything after it means a foreign file */
            if (getline(&line, &cap, f) >= 0) {
                free(line);
                fclose(f);
                numla_error_set(NUMLA_STATUS_FORMAT, __FILE__, __LINE__, __func__,
                                "--resume: %s line %lld is not a result record and is not the "
                                "last line; refusing to touch the file", path,
                                (long long)lineno);
                return -1;
            }
            torn = 1;
            break;
        }
        char key[512];
        json_t *id = json_object_get(o, "id");
        int64_t ln = 0;
        const char *e = json_string_value(json_object_get(o, "error"));
        if (e && (!id || json_is_null(id)))
            ln = strtoll(e + (strncmp(e, "line ", 5) ? 0 : 5), NULL, 10);
        if (record_key(id, ln, key, sizeof key))
            json_object_set_new(done, key, json_true());
        json_decref(o);
        keep += n;
        records++;
    }
    free(line);
    fclose(f);
    if (torn) {
        struct stat sb;
        if (stat(path, &sb) == 0)
            *truncated = (int64_t)sb.st_size - keep;
        if (truncate(path, (off_t)keep) != 0) {
            numla_error_set(NUMLA_STATUS_IO, __FILE__, __LINE__, __func__,
                            "--resume: cannot truncate the torn last line of %s: %s", path,
                            strerror(errno));
            return -1;
        }
    }
    return records;
}

/* ---- results ---- */

static int push(double **a, int64_t *n, int64_t *cap, double v)
{
    if (*n == *cap) {
        int64_t c = *cap ? 2 * *cap : 256;
        double *p = realloc(*a, (size_t)c * sizeof *p);
        if (!p)
            return 0;
        *a = p;
        *cap = c;
    }
    (*a)[(*n)++] = v;
    return 1;
}

static void run_done(void *ctx, const numla_sched_output *o)
{
    run_state *rs = ctx;
    run_req *r = o->user;
    numla_result res = {.req = o->req, .output_tokens = o->output_tokens,
                        .num_output = o->num_output, .finish_reason = o->finish_reason,
                        .error = o->error, .logprobs = o->logprobs};
    if (r->rq.text_output && !o->error && r->ts) {
        const char *piece = "";
        size_t len = 0;
        if (!r->text_done && numla_tokenizer_stream_flush(r->ts, &piece, &len) == NUMLA_STATUS_OK)
            run_text_append(r, piece, len);
        res.text = r->text ? r->text : "";
        res.text_len = r->text ? r->text_len : 0;
    }
    if (!rs->write_failed && numla_result_write(rs->out, &res) != NUMLA_STATUS_OK) {
        fprintf(stderr, "numla run: %s\n", numla_error_message());
        rs->write_failed = 1;
    }
    rs->done++;
    if (o->error) {
        rs->errors++;
    } else {
        rs->ok++;
        rs->prompt_tokens += o->req->num_prompt;
        rs->output_tokens += o->num_output;
        if (o->first_token_s > 0) {
            push(&rs->ttft, &rs->n_ttft, &rs->cap_ttft, o->first_token_s - o->arrival_s);
            if (o->num_output > 1)
                push(&rs->tpot, &rs->n_tpot, &rs->cap_tpot,
                     (o->finish_s - o->first_token_s) / (o->num_output - 1));
        }
    }
    rs->preemptions += o->preemptions;
    if (r->prev)
        r->prev->next = r->next;
    else
        rs->head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    run_req_free(r);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of v[0..n) (sorted in place); 0 when empty. */
static double percentile(double *v, int64_t n, double p)
{
    if (n == 0)
        return 0.0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    int64_t k = (int64_t)ceil(p / 100.0 * (double)n) - 1;
    return v[k < 0 ? 0 : k >= n ? n - 1 : k];
}

static int64_t count_lines(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int64_t c = 0;
    while ((n = getline(&line, &cap, f)) >= 0)
        c += !is_blank(line, (size_t)n);
    free(line);
    fclose(f);
    return c;
}

static numla_status run_exec(void *ctx, const numla_step *st, float *logits)
{
    return numla_engine_step(ctx, st, logits);
}

static int parse_opts(int argc, char **argv, run_opts *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--resume")) {
            o->resume = 1;
            continue;
        }
        if (!strcmp(a, "--progress") || !strcmp(a, "--no-progress")) {
            o->progress = !strcmp(a, "--progress");
            continue;
        }
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "numla run: option %s needs a value\n", a);
            usage(stderr);
            return 2;
        }
        i++;
        char *end = NULL;
        if (!strcmp(a, "--model")) {
            o->model = v;
        } else if (!strcmp(a, "--input")) {
            o->input = v;
        } else if (!strcmp(a, "--output")) {
            o->output = v;
        } else if (!strcmp(a, "--threads")) {
            o->threads = (int)strtol(v, &end, 10);
        } else if (!strcmp(a, "--max-context")) {
            o->max_context = strtoll(v, &end, 10);
        } else if (!strcmp(a, "--block-size")) {
            o->block_size = (int32_t)strtol(v, &end, 10);
        } else if (!strcmp(a, "--prefill-chunk")) {
            o->prefill_chunk = (int32_t)strtol(v, &end, 10);
        } else if (!strcmp(a, "--max-batch-tokens")) {
            o->max_batch_tokens = (int32_t)strtol(v, &end, 10);
        } else if (!strcmp(a, "--max-seqs")) {
            o->max_seqs = (int32_t)strtol(v, &end, 10);
        } else if (!strcmp(a, "--kv-memory")) {
            o->kv_memory_gib = strtod(v, &end);
            if (!(o->kv_memory_gib > 0)) {
                fprintf(stderr, "numla run: --kv-memory %s must be a positive number of GiB\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--kv-blocks")) {
            o->kv_blocks = strtoll(v, &end, 10);
            if (o->kv_blocks < 1) {
                fprintf(stderr, "numla run: --kv-blocks %s must be positive\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--kv-dtype")) {
            if (!strcmp(v, "bf16"))
                o->kv_dtype = NUMLA_DTYPE_BF16;
            else if (!strcmp(v, "f16"))
                o->kv_dtype = NUMLA_DTYPE_F16;
            else if (!strcmp(v, "f32"))
                o->kv_dtype = NUMLA_DTYPE_F32;
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
    if (!o->model || !o->input || !o->output) {
        usage(stderr);
        return 2;
    }
    if (o->threads < 0 || o->max_context < 0 || o->block_size < 1 || o->prefill_chunk < 1 ||
        o->max_batch_tokens < 1 || o->max_seqs < 1) {
        fprintf(stderr, "numla run: --threads/--max-context/--block-size/--prefill-chunk/"
                        "--max-batch-tokens/--max-seqs must be positive\n");
        return 2;
    }
    if (o->max_batch_tokens < o->max_seqs) {
        fprintf(stderr, "numla run: --max-batch-tokens %d is below --max-seqs %d\n",
                o->max_batch_tokens, o->max_seqs);
        return 2;
    }
    if (o->kv_memory_gib > 0 && o->kv_blocks > 0) {
        fprintf(stderr, "numla run: give --kv-memory or --kv-blocks, not both\n");
        return 2;
    }
    if (o->resume && !strcmp(o->output, "-")) {
        fprintf(stderr, "numla run: --resume needs an output file, not '-'\n");
        return 2;
    }
    return -1;
}

static void progress_line(const run_state *rs, int64_t total, const numla_sched *sc, double t0,
                          int final)
{
    numla_sched_stats st;
    numla_sched_stats_get(sc, &st);
    double dt = now_s() - t0;
    char tot[32];
    if (total >= 0)
        snprintf(tot, sizeof tot, "%lld", (long long)total);
    else
        snprintf(tot, sizeof tot, "?");
    fprintf(stderr, "\r\033[Knumla run: %lld/%s requests, %.1f out tok/s, %.1f tok/s, %d running, "
                    "%d waiting, KV %.0f%%%s",
            (long long)rs->done, tot, dt > 0 ? (double)rs->output_tokens / dt : 0.0,
            dt > 0 ? (double)st.step_tokens / dt : 0.0, st.running, st.waiting,
            st.kv_blocks_total ? 100.0 * (double)st.kv_blocks_used / (double)st.kv_blocks_total
                               : 0.0,
            final ? "\n" : "");
    fflush(stderr);
}

int numla_run_main(int argc, char **argv)
{
    run_opts o = {.threads = 0, .max_context = 0, .block_size = 16, .prefill_chunk = 512,
                  .max_batch_tokens = 2048, .max_seqs = 64, .kv_dtype = NUMLA_DTYPE_BF16,
                  .progress = -1};
    int prc = parse_opts(argc, argv, &o);
    if (prc >= 0)
        return prc;

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
    numla_sched *sc = NULL;
    numla_tokenizer *tok = NULL;
    FILE *in = NULL;
    json_t *done_ids = NULL;
    char *line = NULL;
    size_t cap = 0;
    int rc = 1, rank = 0;
    run_state rs = {0};
    numla_status s;
    struct sigaction sa_old_int, sa_old_term, sa_old_usr1, sa_old_usr2;
    int handlers = 0;
    double t_load = now_s();
    NUMLA_CHECK_GOTO(numla_comm_create(MPI_COMM_WORLD, &comm), s, fail);
    rank = numla_comm_rank(comm);
    numla_log_set_rank(rank);
    if (rank != 0) {
        /* rank 0 decides when to stop (it finishes the records in flight first) */
        signal(SIGINT, SIG_IGN);
        signal(SIGTERM, SIG_IGN);
        signal(SIGUSR1, SIG_IGN);
        signal(SIGUSR2, SIG_IGN);
    }
    numla_engine_options eo = numla_engine_options_default();
    eo.num_threads = o.threads;
    eo.block_size = o.block_size;
    eo.kv_dtype = o.kv_dtype;
    eo.num_blocks = o.kv_blocks;
    eo.kv_memory_bytes = (int64_t)(o.kv_memory_gib * 1073741824.0);
    eo.kv_memory_fraction = NUMLA_KV_MEMORY_FRACTION;
    eo.max_seqs = o.max_seqs;
    eo.max_context = o.max_context;
    NUMLA_CHECK_GOTO(numla_engine_create(comm, o.model, &eo, &eng), s, fail);
    if (rank != 0) {
        NUMLA_CHECK_GOTO(numla_engine_worker_loop(eng), s, fail);
        rc = 0;
        goto cleanup;
    }
    const numla_model_config cfg = *numla_engine_config(eng);
    numla_kv_cache *kv = numla_engine_kv_cache(eng);
    if (o.max_context == 0 || o.max_context > cfg.max_position_embeddings)
        o.max_context = cfg.max_position_embeddings;
    numla_isa isa;
    NUMLA_CHECK_GOTO(numla_isa_select(&isa), s, fail);
    fprintf(stderr, "numla run: %s (%s, %lld layers) loaded in %.2f s: %.1f MB of weights on "
                    "rank 0, %d rank%s, isa %s, %d threads, context %lld, KV %lld blocks of %d "
                    "(%.2f GiB per rank, %s)\n",
            o.model, cfg.model_type, (long long)cfg.num_hidden_layers, now_s() - t_load,
            (double)numla_engine_weight_bytes(eng) / 1e6, numla_comm_size(comm),
            numla_comm_size(comm) > 1 ? "s" : "", numla_isa_name(isa),
            numla_engine_num_threads(eng), (long long)o.max_context, (long long)kv->num_blocks,
            kv->block_size, (double)numla_engine_kv_bytes(eng) / 1073741824.0,
            numla_dtype_name(o.kv_dtype));

    done_ids = json_object();
    if (!done_ids) {
        s = numla_error_set(NUMLA_STATUS_NO_MEMORY, __FILE__, __LINE__, __func__, "no memory");
        goto fail;
    }
    int64_t already = 0;
    if (o.resume) {
        int64_t torn = 0;
        already = resume_scan(o.output, done_ids, &torn);
        if (already < 0) {
            s = NUMLA_STATUS_IO;
            goto fail;
        }
        fprintf(stderr, "numla run: --resume: %lld records in %s%s\n", (long long)already,
                o.output, torn ? " (a torn last line was truncated)" : "");
    }
    in = strcmp(o.input, "-") ? fopen(o.input, "rb") : stdin;
    if (!in) {
        s = numla_error_set(NUMLA_STATUS_IO, __FILE__, __LINE__, __func__, "%s: %s", o.input,
                            strerror(errno));
        goto fail;
    }
    rs.out = strcmp(o.output, "-") ? fopen(o.output, o.resume ? "a" : "w") : stdout;
    if (!rs.out) {
        s = numla_error_set(NUMLA_STATUS_IO, __FILE__, __LINE__, __func__, "%s: %s", o.output,
                            strerror(errno));
        goto fail;
    }
    numla_sched_options so = {.max_batch_tokens = o.max_batch_tokens, .max_seqs = o.max_seqs,
                              .prefill_chunk = o.prefill_chunk, .vocab_size = cfg.vocab_size,
                              .num_eos = cfg.num_eos, .eos_token_ids = cfg.eos_token_ids,
                              .stop_check = run_stop_check};
    NUMLA_CHECK_GOTO(numla_sched_create(&so, kv, run_exec, eng, run_done, &rs, &sc), s, fail);

    struct sigaction sa = {0};
    sa.sa_handler = run_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &sa_old_int);
    sigaction(SIGTERM, &sa, &sa_old_term);
    sigaction(SIGUSR1, &sa, &sa_old_usr1);
    sigaction(SIGUSR2, &sa, &sa_old_usr2);
    handlers = 1;

    const int progress = o.progress >= 0 ? o.progress : isatty(STDERR_FILENO);
    int64_t total = strcmp(o.input, "-") ? count_lines(o.input) : -1;
    if (total >= 0)
        total -= already;
    /* Text prompts and stop strings need the model's tokenizer; without tokenizer.json only
     * token ids are served (a broken tokenizer.json is an error: the user meant to use it). */
    char tok_path[4096];
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", o.model);
    if (access(tok_path, F_OK) == 0)
        NUMLA_CHECK_GOTO(numla_tokenizer_load(o.model, &tok), s, fail);
    numla_request_limits lim = {.vocab_size = cfg.vocab_size, .max_context = o.max_context,
                                .tokenizer = tok};
    const int32_t window = 2 * o.max_seqs + 16;
    int64_t lineno = 0, skipped = 0;
    int eof = 0, draining = 0;
    double t_run = now_s(), t_prog = 0;
    rc = 0;
    for (;;) {
        if (run_signals >= 2 || rs.write_failed)
            break;
        if (run_signals == 1 && !draining) {
            draining = 1;
            int32_t dropped = numla_sched_drop_waiting(sc);
            fprintf(stderr, "%snumla run: signal %d: finishing the requests in flight (%d not "
                            "started are left for --resume); signal again to stop now\n",
                    progress ? "\n" : "", (int)run_signal, dropped);
        }
        while (!eof && !draining) {
            numla_sched_stats st;
            numla_sched_stats_get(sc, &st);
            if (st.waiting >= window)
                break;
            ssize_t n = getline(&line, &cap, in);
            if (n < 0) {
                eof = 1;
                break;
            }
            lineno++;
            if (is_blank(line, (size_t)n))
                continue;
            run_req *r = calloc(1, sizeof *r);
            if (!r) {
                s = numla_error_set(NUMLA_STATUS_NO_MEMORY, __FILE__, __LINE__, __func__,
                                    "no memory");
                goto fail;
            }
            s = numla_request_parse(line, (size_t)n, lineno, &lim, &r->rq);
            if (s != NUMLA_STATUS_OK) {
                free(r);
                goto fail;
            }
            char key[512];
            if (o.resume && record_key(r->rq.id, r->rq.id ? 0 : lineno, key, sizeof key) &&
                json_object_get(done_ids, key)) {
                skipped++;
                run_req_free(r);
                continue;
            }
            if (r->rq.text_output && !r->rq.error[0])
                NUMLA_CHECK_GOTO(numla_tokenizer_stream_create(tok, 1, &r->ts), s, fail);
            r->next = rs.head;
            if (rs.head)
                rs.head->prev = r;
            rs.head = r;
            NUMLA_CHECK_GOTO(numla_sched_submit(sc, &r->rq, r), s, fail);
        }
        if (!numla_sched_busy(sc))
            break;
        NUMLA_CHECK_GOTO(numla_sched_step(sc), s, fail);
        if (progress && now_s() - t_prog > 0.5) {
            progress_line(&rs, total, sc, t_run, 0);
            t_prog = now_s();
        }
    }
    double wall = now_s() - t_run;
    if (progress)
        progress_line(&rs, total, sc, t_run, 1);
    if (rs.write_failed)
        rc = 1;
    else if (run_signals > 0)
        rc = 128 + (int)run_signal;
    numla_sched_stats st;
    numla_sched_stats_get(sc, &st);
    double ttft50 = percentile(rs.ttft, rs.n_ttft, 50), ttft99 = percentile(rs.ttft, rs.n_ttft, 99);
    double tpot50 = percentile(rs.tpot, rs.n_tpot, 50), tpot99 = percentile(rs.tpot, rs.n_tpot, 99);
    fprintf(stderr,
            "numla run: summary: %lld requests (%lld ok, %lld errors%s%lld skipped as already "
            "done) in %.2f s\n"
            "numla run:   prompt tokens %lld, output tokens %lld; %.1f output tok/s, %.1f tok/s "
            "overall\n"
            "numla run:   TTFT p50 %.1f ms p99 %.1f ms; TPOT p50 %.2f ms p99 %.2f ms\n"
            "numla run:   %lld steps, %lld preemptions (%lld tokens recomputed)%s\n",
            (long long)rs.done, (long long)rs.ok, (long long)rs.errors, ", ", (long long)skipped,
            wall, (long long)rs.prompt_tokens, (long long)rs.output_tokens,
            wall > 0 ? (double)rs.output_tokens / wall : 0.0,
            wall > 0 ? (double)(rs.prompt_tokens + rs.output_tokens) / wall : 0.0, 1e3 * ttft50,
            1e3 * ttft99, 1e3 * tpot50, 1e3 * tpot99, (long long)st.steps,
            (long long)st.preemptions, (long long)st.recompute_tokens,
            rc >= 128 ? "; stopped by a signal: rerun with --resume for the rest" : "");
    goto cleanup;
fail:
    fprintf(stderr, "numla run: %s\n%s", numla_error_message(), numla_error_trace());
    rc = 1;
cleanup:
    if (handlers) {
        sigaction(SIGINT, &sa_old_int, NULL);
        sigaction(SIGTERM, &sa_old_term, NULL);
        sigaction(SIGUSR1, &sa_old_usr1, NULL);
        sigaction(SIGUSR2, &sa_old_usr2, NULL);
    }
    numla_sched_destroy(&sc);
    numla_tokenizer_destroy(&tok);
    while (rs.head) {
        run_req *r = rs.head;
        rs.head = r->next;
        run_req_free(r);
    }
    free(rs.ttft);
    free(rs.tpot);
    json_decref(done_ids);
    free(line);
    if (in && in != stdin)
        fclose(in);
    if (rs.out && rs.out != stdout && fclose(rs.out) != 0) {
        fprintf(stderr, "numla run: %s: %s\n", o.output, strerror(errno));
        rc = 1;
    }
    numla_engine_destroy(&eng); /* rank 0: releases the workers */
    numla_comm_destroy(&comm);
    if (own_mpi)
        MPI_Finalize();
    run_signal = 0;
    run_signals = 0;
    return rc;
}

NUMLA_CLI_COMMAND("run", numla_run_main,
                  "serve a JSONL file of requests with continuous batching (--model --input "
                  "--output [--resume])")
