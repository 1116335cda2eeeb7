/* engine/cli/run_cmd.c — `numla run`: serve a JSONL file of requests with continuous batching
 * (engine/serving/scheduler.h) on one or more ranks (engine/parallel/engine.h), writing each result as it
 * finishes, in completion order, one flushed line per request (engine/serving/request_io.h).
 *
 * Under mpirun the model is sharded over the ranks: rank 0 runs the serving loop
 * (engine/serving/serve_loop.h) with a JSONL-file source and a JSONL sink; the other ranks run
 * the engine's worker loop (and ignore SIGINT/SIGTERM: rank 0 decides when to stop).
 *
 * Files: rank 0 opens them before the model loads (every rank waits for its verdict): the
 * input, read once front to back (a pipe, FIFO or /dev/stdin works, read as lines arrive so a
 * silent writer does not hold up the requests in flight; a directory does not work); the
 * output, refused when it is the input under any name (exit 2) and opened without truncation
 * (a fresh run truncates it once the model has loaded), so an unwritable path fails at once.
 * A line whose id an earlier line used gets an error record ("line N: id X already used on
 * line M"): one answer per id.
 *
 * Restartable batch job:
 *   --resume reads the existing output, keeps every complete record, truncates a torn last
 *   line (a kill mid-write leaves a line without its '\n', or one that is not JSON), skips the
 *   input requests already answered (an error record by the "line N:" it names, any other
 *   record by its whole "id", for the id's first line only) and appends the rest. Each
 *   record is written by one fputs + fflush, so SIGKILL at any time loses at most the records
 *   in flight and never duplicates one on resume.
 *   SIGINT/SIGTERM: stop reading, drop the requests not started yet, finish the ones in flight
 *   (a second signal, a second or more later, stops at once), print the summary and exit
 *   128 + signal number; SIGUSR1/SIGUSR2 (all that mpirun forwards to the ranks; see
 *   launch/numla-launch) count as SIGTERM, and the other ranks ignore all four. The output
 *   is then complete up to what it holds; rerun with --resume for the rest. Under a plain
 *   mpirun, SIGTERM or SIGINT to mpirun reaches the ranks as itself and Open MPI kills them
 *   about a second later (its odls_base_sigkill_timeout): the requests in flight are lost,
 *   the records written stay whole, and --resume serves the rest exactly once.
 * Exit status: 0 all requests answered (per-request errors included), 1 fatal error, 2 usage,
 * 128 + N stopped by signal N.
 * Progress: on a terminal, one line on stderr (requests done/total, tokens/s, KV use); quiet
 * otherwise. The summary (requests, prompt/output tokens, throughput, TTFT/TPOT p50/p99) goes
 * to stderr at the end.
 * Collective over MPI_COMM_WORLD (initialises MPI when the caller has not: comm/comm.h,
 * numla_comm_world_init).
 */
#define _GNU_SOURCE /* getline, ftruncate */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm/comm.h"
#include "common/clock.h"
#include "common/log.h"
#include "engine/cli/cli.h"
#include "engine/cli/engine_opts.h"
#include "engine/cli/model_text.h"
#include "engine/cli/run_cmd.h"
#include "engine/cli/settings.h"
#include "engine/cli/stop.h"
#include "engine/model/config.h"
#include "engine/model/kv_cache.h"
#include "engine/parallel/engine.h"
#include "engine/serving/request_io.h"
#include "engine/serving/serve_loop.h"
#include "engine/text/tokenizer.h"

typedef struct run_opts {
    numla_cli_engine_opts e;    /* model, threads, batching, KV pool (engine_opts.h) */
    const char *input, *output;
    int resume;
    int progress; /* -1: auto (terminal) */
} run_opts;

static void usage(FILE *f)
{
    fprintf(f, "usage: numla run --model DIR --input requests.jsonl --output results.jsonl\n"
               "                 [--resume]\n");
    numla_cli_engine_opts_usage(f, 17);
    fprintf(f,
            "                 [--progress | --no-progress]\n"
            "Input '-' reads stdin, output '-' writes stdout (not with --resume); the input\n"
            "may be a pipe or FIFO, the output may not be the input. The KV pool defaults to\n"
            "%.0f%% of the free memory of each rank's NUMA node after the weights, shared by\n"
            "the ranks on that node, capped at what --max-seqs sequences of --max-context\n"
            "tokens can use.\n"
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

/* Key of an id: "id " + its compact ASCII JSON, whole (no length limit: ids that share a long
 * prefix are different requests). NULL for no id or a null one (or out of memory). */
static char *id_key(json_t *id)
{
    if (!id || json_is_null(id))
        return NULL;
    char *s = json_dumps(id, JSON_ENCODE_ANY | JSON_COMPACT | JSON_ENSURE_ASCII);
    if (!s)
        return NULL;
    size_t n = strlen(s);
    char *k = malloc(n + 4);
    if (k) {
        memcpy(k, "id ", 3);
        memcpy(k + 3, s, n + 1);
    }
    free(s);
    return k;
}

static void line_key(int64_t line, char *buf, size_t cap)
{
    snprintf(buf, cap, "line %lld", (long long)line);
}

/* The input line an error record names ("line N: ..."), or 0. */
static int64_t error_line(const char *e)
{
    if (!e || strncmp(e, "line ", 5) != 0)
        return 0;
    char *end = NULL;
    long long n = strtoll(e + 5, &end, 10);
    return n > 0 && end && *end == ':' ? (int64_t)n : 0;
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
        /* an error record answers the line it names (a duplicate id's error must not mark
         * the id's first request done); any other record answers its id */
        int64_t ln = error_line(json_string_value(json_object_get(o, "error")));
        char lkey[32], *ikey = ln > 0 ? NULL : id_key(json_object_get(o, "id"));
        if (ln > 0) {
            line_key(ln, lkey, sizeof lkey);
            json_object_set_new(done, lkey, json_true());
        } else if (ikey) {
            json_object_set_new(done, ikey, json_true());
        }
        free(ikey);
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

/* Requests left in the input for the progress total: the non-blank lines from the current
 * position of a regular file (read, then the position restored, so the stream is still read
 * once from where it was); -1 for a pipe, FIFO, terminal or socket, which can be read only once. */
static int64_t count_requests(FILE *f)
{
    struct stat sb;
    off_t at = ftello(f);
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode) || at < 0)
        return -1;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int64_t c = 0;
    while ((n = getline(&line, &cap, f)) >= 0)
        c += !is_blank(line, (size_t)n);
    free(line);
    int bad = ferror(f);
    clearerr(f);
    if (fseeko(f, at, SEEK_SET) != 0 || bad)
        return -1;
    return c;
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
        const char *v = NULL;
        const int r = numla_cli_engine_opts_next("numla run", &o->e, argc, argv, &i, &v);
        if (r == NUMLA_CLI_OPT_BAD) {
            usage(stderr);
            return 2;
        }
        if (r != NUMLA_CLI_OPT_NONE)
            continue;
        if (!strcmp(a, "--input")) {
            o->input = v;
        } else if (!strcmp(a, "--output")) {
            o->output = v;
        } else {
            fprintf(stderr, "numla run: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!o->e.model || !o->input || !o->output) {
        usage(stderr);
        return 2;
    }
    int rc = numla_cli_engine_opts_check("numla run", &o->e);
    if (rc >= 0)
        return rc;
    if (o->resume && !strcmp(o->output, "-")) {
        fprintf(stderr, "numla run: --resume needs an output file, not '-'\n");
        return 2;
    }
    return -1;
}

/* ---- the source: the input file's requests, minus those --resume found answered ---- */

typedef struct run_source {
    FILE *in;                   /* opened here; after count_requests only its fd is read */
    const char *path;
    /* The input as a stream of lines, read with read(2) into buf: from a pipe, FIFO, socket or
     * terminal (`stream`) only what is there, so a slow writer never holds up the requests in
     * flight (the loop steps on and asks again; when nothing runs, run_source_wait polls). */
    int fd, stream, eof;
    char *buf;                  /* (cap) bytes; [start, len) not yet returned */
    size_t len, start, cap;
    char *line;                 /* the current line, NUL-terminated */
    size_t line_cap;
    int64_t lineno, skipped;
    numla_request_limits lim;
    json_t *done_ids;           /* keys of the records already in the output; NULL: no --resume */
    json_t *seen;               /* id key -> the line that first used it */
} run_source;

/* Remember the request's id; returns the line that used it first, or 0 when it is new. */
static int64_t id_seen(run_source *src, const char *ikey)
{
    json_t *first = json_object_get(src->seen, ikey);
    if (first)
        return (int64_t)json_integer_value(first);
    json_object_set_new(src->seen, ikey, json_integer(src->lineno));
    return 0;
}

/* A request whose id an earlier line used is answered with an error (serving it twice would
 * leave two answers for one id, which --resume cannot tell apart). */
static void id_duplicate_error(numla_request *req, int64_t line, int64_t first)
{
    if (req->error[0])
        return; /* already an error record for this line */
    char *s = json_dumps(req->id, JSON_ENCODE_ANY | JSON_COMPACT | JSON_ENSURE_ASCII);
    snprintf(req->error, sizeof req->error, "line %lld: id %s already used on line %lld",
             (long long)line, s ? s : "?", (long long)first);
    free(s);
}

/* Copy [start, end) of buf into src->line as the current line. */
static numla_status run_line_take(run_source *src, size_t end, size_t *n)
{
    *n = end - src->start;
    if (*n + 1 > src->line_cap) {
        char *p = realloc(src->line, *n + 1);
        if (!p)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "%s: no memory for line %lld (%zu bytes)",
                       src->path, (long long)src->lineno + 1, *n);
        src->line = p;
        src->line_cap = *n + 1;
    }
    memcpy(src->line, src->buf + src->start, *n);
    src->line[*n] = '\0';
    src->start = end;
    return NUMLA_STATUS_OK;
}

/* The next line (with its newline; the last may have none) into src->line, *n bytes:
 * *what REQUEST when there is one, NONE when a stream has no whole line yet, END at the end. */
static numla_status run_line_next(run_source *src, size_t *n, numla_serve_pull *what)
{
    for (;;) {
        const char *nl = src->len > src->start
                             ? memchr(src->buf + src->start, '\n', src->len - src->start)
                             : NULL;
        if (nl || (src->eof && src->len > src->start)) {
            *what = NUMLA_SERVE_PULL_REQUEST;
            return run_line_take(src, nl ? (size_t)(nl - src->buf) + 1 : src->len, n);
        }
        if (src->eof) {
            *what = NUMLA_SERVE_PULL_END;
            return NUMLA_STATUS_OK;
        }
        if (src->start > 0) { /* keep the partial line at the front */
            memmove(src->buf, src->buf + src->start, src->len - src->start);
            src->len -= src->start;
            src->start = 0;
        }
        if (src->len == src->cap) {
            size_t c = src->cap ? 2 * src->cap : 65536;
            char *p = realloc(src->buf, c);
            if (!p)
                NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "%s: no memory for line %lld (%zu bytes so far)",
                           src->path, (long long)src->lineno + 1, src->len);
            src->buf = p;
            src->cap = c;
        }
        if (src->stream) {
            struct pollfd pf = {.fd = src->fd, .events = POLLIN};
            int r = poll(&pf, 1, 0);
            if (r == 0 || (r < 0 && errno == EINTR)) {
                *what = NUMLA_SERVE_PULL_NONE; /* nothing yet: ask again after a step */
                return NUMLA_STATUS_OK;
            }
        }
        ssize_t r = read(src->fd, src->buf + src->len, src->cap - src->len);
        if (r > 0)
            src->len += (size_t)r;
        else if (r == 0)
            src->eof = 1;
        else if (errno == EINTR || errno == EAGAIN) {
            *what = NUMLA_SERVE_PULL_NONE;
            return NUMLA_STATUS_OK;
        } else
            NUMLA_FAIL(NUMLA_STATUS_IO, "%s: read error after line %lld: %s", src->path,
                       (long long)src->lineno, strerror(errno));
    }
}

/* Nothing runs and the input had no whole line: wait until it has more (or a signal, such as
 * a stop request, comes), at most 100 ms so the loop looks at its stop count now and then. */
static void run_source_wait(void *ctx)
{
    run_source *src = ctx;
    struct pollfd pf = {.fd = src->fd, .events = POLLIN};
    (void)poll(&pf, 1, 100);
}

static numla_status run_source_next(void *ctx, numla_request *req, void **user,
                                    numla_serve_pull *what)
{
    run_source *src = ctx;
    (void)user;
    for (;;) {
        size_t n = 0;
        NUMLA_CHECK(run_line_next(src, &n, what));
        if (*what != NUMLA_SERVE_PULL_REQUEST)
            return NUMLA_STATUS_OK;
        src->lineno++;
        if (is_blank(src->line, n))
            continue;
        NUMLA_CHECK(numla_request_parse(src->line, n, src->lineno, &src->lim, req));
        json_t *id = req->id;
        char *ikey = id_key(id);
        if (id && !json_is_null(id) && !ikey) {
            numla_request_free(req);
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for the id of line %lld",
                       (long long)src->lineno);
        }
        const int64_t first = ikey ? id_seen(src, ikey) : 0;
        /* --resume: done when the output answers this line, or (first use only) this id */
        char lkey[32];
        line_key(src->lineno, lkey, sizeof lkey);
        const int done = src->done_ids &&
                         (json_object_get(src->done_ids, lkey) ||
                          (ikey && !first && json_object_get(src->done_ids, ikey)));
        free(ikey);
        if (done) {
            src->skipped++;
            numla_request_free(req);
            memset(req, 0, sizeof *req);
            continue;
        }
        if (first)
            id_duplicate_error(req, src->lineno, first);
        *what = NUMLA_SERVE_PULL_REQUEST;
        return NUMLA_STATUS_OK;
    }
}

/* ---- the sink: one flushed JSON line per result, progress on stderr ---- */

typedef struct run_sink {
    FILE *out;
    const char *path;           /* for messages ("stdout" for '-') */
    numla_serve_loop *loop;
    int progress;               /* 1: the progress line on stderr */
    int open_mpi;               /* 1: started by Open MPI's mpirun (numla_settings.open_mpi) */
    int64_t total;              /* requests to serve, -1: unknown (stdin) */
    double t_run, t_prog;
} run_sink;

static numla_status run_sink_done(void *ctx, void *user, const numla_serve_done *d)
{
    run_sink *k = ctx;
    (void)user;
    errno = 0;
    numla_status s = numla_result_write(k->out, &d->result);
    if (s == NUMLA_STATUS_IO) {
        const int e = errno;
        fprintf(stderr, "numla run: cannot write a result to %s: %s\n", k->path,
                e ? strerror(e) : "I/O error");
    } else if (s != NUMLA_STATUS_OK) {
        fprintf(stderr, "numla run: %s\n", numla_error_message());
    }
    return s;
}

static void run_sink_draining(void *ctx, int32_t dropped)
{
    run_sink *k = ctx;
    fprintf(stderr, "%snumla run: signal %d: finishing the requests in flight (%d not "
                    "started are left for --resume); signal again to stop now\n",
            k->progress ? "\n" : "", (int)numla_cli_stop_signal, dropped);
    /* mpirun itself was signalled (not numla-launch, whose SIGUSR1 mpirun passes on and
     * then waits): Open MPI kills the ranks about a second later, so the requests in flight
     * may not finish. Every record is written whole by one flush, and --resume serves the
     * rest exactly once. */
    const int sig = (int)numla_cli_stop_received;
    if (k->open_mpi && (sig == SIGTERM || sig == SIGINT))
        fprintf(stderr, "numla run: under mpirun, signal %d is followed by SIGKILL about a "
                        "second later: the records written are whole; rerun with --resume for "
                        "the rest (SIGUSR1 to mpirun, or numla-launch, lets the requests in "
                        "flight finish)\n", sig);
}

static void progress_line(const run_sink *k, int final)
{
    numla_serve_stats st;
    numla_serve_loop_stats_get(k->loop, &st);
    double dt = numla_now_s() - k->t_run;
    char tot[32];
    if (k->total >= 0)
        snprintf(tot, sizeof tot, "%lld", (long long)k->total);
    else
        snprintf(tot, sizeof tot, "?");
    fprintf(stderr, "\r\033[Knumla run: %lld/%s requests, %.1f out tok/s, %.1f tok/s, %d running, "
                    "%d waiting, KV %.0f%%%s",
            (long long)st.done, tot, dt > 0 ? (double)st.output_tokens / dt : 0.0,
            dt > 0 ? (double)st.sched.step_tokens / dt : 0.0, st.sched.running, st.sched.waiting,
            st.sched.kv_blocks_total
                ? 100.0 * (double)st.sched.kv_blocks_used / (double)st.sched.kv_blocks_total
                : 0.0,
            final ? "\n" : "");
    fflush(stderr);
}

static void run_sink_after_step(void *ctx)
{
    run_sink *k = ctx;
    if (k->progress && numla_now_s() - k->t_prog > 0.5) {
        progress_line(k, 0);
        k->t_prog = numla_now_s();
    }
}

/* ---- rank 0: the job ---- */

typedef struct run_job {
    run_opts *o;
    numla_engine *eng;
    numla_model_config cfg;
    numla_tokenizer *tok;
    run_source src;
    run_sink sink;
    numla_serve_loop *loop;
    int64_t already;            /* records kept by --resume */
} run_job;

static numla_status run_report_loaded(run_job *j, numla_comm *comm, double t_load)
{
    const run_opts *o = j->o;
    const numla_kv_cache *kv = numla_engine_kv_cache(j->eng);
    const numla_model *m = numla_engine_model(j->eng);
    const numla_model_options mo = m ? numla_model_get_options(m)
                                     : numla_model_options_default(numla_engine_isa(j->eng));
    char kvs[160];
    if (m)
        snprintf(kvs, sizeof kvs, "%.2f GiB per rank, %s",
                 (double)numla_engine_kv_bytes(j->eng) / 1073741824.0,
                 numla_dtype_name(o->e.kv_dtype));
    else /* deepseek_v4: the blocks bound the sequences' caches (docs/design.md §3.1) */
        snprintf(kvs, sizeof kvs, "%.2f GiB per rank of deepseek_v4 caches, %s, %d blocks a "
                 "sequence beside its tokens'",
                 (double)numla_engine_kv_bytes(j->eng) / 1073741824.0,
                 numla_dtype_name(o->e.kv_dtype), kv->seq_blocks);
    fprintf(stderr, "numla run: %s (%s, %lld layers) loaded in %.2f s: %.1f MB of weights on "
                    "rank 0, %d rank%s, isa %s (%s), %d threads, context %lld, KV %lld blocks of %d "
                    "(%s)\n",
            o->e.model, j->cfg.model_type, (long long)j->cfg.num_hidden_layers,
            numla_now_s() - t_load,
            (double)numla_engine_weight_bytes(j->eng) / 1e6, numla_comm_size(comm),
            numla_comm_size(comm) > 1 ? "s" : "", numla_isa_name(mo.isa), numla_uarch_name(mo.uarch),
            numla_engine_num_threads(j->eng), (long long)o->e.max_context,
            (long long)kv->num_blocks, kv->block_size, kvs);
    return NUMLA_STATUS_OK;
}

/* Refuse an output that is the input (the same file by any name: a symlink, ./F, a hard
 * link, stdin redirected from it), before anything is opened for writing. Returns 1 when it is. */
static int run_output_is_input(const run_opts *o, FILE *in)
{
    struct stat si, so;
    if (fstat(fileno(in), &si) != 0 || S_ISCHR(si.st_mode)) /* /dev/null, a terminal */
        return 0;
    if (strcmp(o->output, "-") ? stat(o->output, &so) != 0 : fstat(STDOUT_FILENO, &so) != 0)
        return 0; /* not there yet (or not reachable: opening it reports why) */
    if (si.st_dev != so.st_dev || si.st_ino != so.st_ino)
        return 0;
    fprintf(stderr, "numla run: --output %s is the input file %s: the results would overwrite "
                    "the requests; write them to another file\n",
            strcmp(o->output, "-") ? o->output : "(stdout)", o->input);
    return 1;
}

/* Open the output for appending, creating it, but truncate nothing: a fresh run truncates it
 * after the model has loaded (run_output_reset), so a failed start leaves an old file as it
 * was. Opening it now reports a missing or read-only directory before the model loads. */
static FILE *run_output_open(const char *path)
{
    if (!strcmp(path, "-"))
        return stdout;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, "a");
    if (!f) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return f;
}

/* Rank 0, before the model loads: the input (opened once, read as a stream), the checks on
 * the output path, --resume's scan, the output. Returns -1 when all is well, else the exit
 * code (the message printed). */
static int run_files_open(run_job *j)
{
    const run_opts *o = j->o;
    j->src.path = strcmp(o->input, "-") ? o->input : "stdin";
    j->sink.path = strcmp(o->output, "-") ? o->output : "stdout";
    j->src.in = strcmp(o->input, "-") ? fopen(o->input, "rb") : stdin;
    if (!j->src.in) {
        fprintf(stderr, "numla run: --input %s: %s\n", o->input, strerror(errno));
        return 1;
    }
    struct stat sb;
    if (fstat(fileno(j->src.in), &sb) == 0 && S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "numla run: --input %s is a directory, not a file of requests\n",
                o->input);
        return 1;
    }
    if (run_output_is_input(o, j->src.in))
        return 2;
    j->src.seen = json_object();
    if (o->resume)
        j->src.done_ids = json_object();
    if (!j->src.seen || (o->resume && !j->src.done_ids)) {
        fprintf(stderr, "numla run: no memory\n");
        return 1;
    }
    if (o->resume) {
        int64_t torn = 0;
        j->already = resume_scan(o->output, j->src.done_ids, &torn);
        if (j->already < 0) {
            fprintf(stderr, "numla run: %s\n", numla_error_message());
            return 1;
        }
        fprintf(stderr, "numla run: --resume: %lld records in %s%s\n", (long long)j->already,
                o->output, torn ? " (a torn last line was truncated)" : "");
    }
    j->sink.out = run_output_open(o->output);
    if (!j->sink.out) {
        fprintf(stderr, "numla run: --output %s: %s\n", o->output, strerror(errno));
        return 1;
    }
    /* From here on the input is read through its fd, nothing through the FILE: a regular
     * file (or block device) as it comes, from where the FILE stood before count_requests read
     * it; anything else as it arrives. */
    j->src.fd = fileno(j->src.in);
    j->src.stream = fstat(j->src.fd, &sb) != 0 || (!S_ISREG(sb.st_mode) && !S_ISBLK(sb.st_mode));
    const off_t at = j->src.stream ? -1 : ftello(j->src.in);
    j->sink.total = count_requests(j->src.in);
    if (!j->src.stream && (at < 0 || lseek(j->src.fd, at, SEEK_SET) != at)) {
        fprintf(stderr, "numla run: --input %s: cannot rewind it: %s\n", o->input, strerror(errno));
        return 1;
    }
    if (j->sink.total >= 0)
        j->sink.total = j->sink.total > j->already ? j->sink.total - j->already : 0;
    return -1;
}

/* A fresh run (no --resume) starts the output file empty. */
static numla_status run_output_reset(run_job *j)
{
    struct stat sb;
    if (j->o->resume || j->sink.out == stdout || fstat(fileno(j->sink.out), &sb) != 0 ||
        !S_ISREG(sb.st_mode))
        return NUMLA_STATUS_OK;
    if (ftruncate(fileno(j->sink.out), 0) != 0)
        NUMLA_FAIL(NUMLA_STATUS_IO, "--output %s: cannot truncate: %s", j->o->output,
                   strerror(errno));
    return NUMLA_STATUS_OK;
}

/* Text prompts and stop strings need the model's tokenizer; without tokenizer.json only token
 * ids are served (a broken tokenizer.json is an error: the user meant to use it). */
static numla_status run_tokenizer_load(run_job *j)
{
    if (numla_model_text_present(j->o->e.model)) /* tokenizer.json, tiktoken.model or GGUF keys */
        NUMLA_CHECK(numla_model_text_tokenizer(j->o->e.model, j->cfg.vocab_size, &j->tok));
    j->src.lim = (numla_request_limits){.vocab_size = j->cfg.vocab_size,
                                        .max_context = j->o->e.max_context, .tokenizer = j->tok,
                                        .defaults = &j->o->e.sampling_defaults};
    return NUMLA_STATUS_OK;
}

static numla_status run_loop_create(run_job *j)
{
    const run_opts *o = j->o;
    numla_serve_options so = {
        .sched = numla_cli_sched_options(&o->e, &j->cfg),
        .kv = numla_engine_kv_cache(j->eng), .exec = numla_cli_engine_exec, .exec_ctx = j->eng,
        .tokenizer = j->tok, .stop_requests = &numla_cli_stop_requests};
    numla_serve_source src = {.ctx = &j->src, .next = run_source_next, .wait = run_source_wait};
    numla_serve_sink sink = {.ctx = &j->sink, .done = run_sink_done,
                             .draining = run_sink_draining, .after_step = run_sink_after_step};
    NUMLA_CHECK(numla_serve_loop_create(&so, &src, &sink, &j->loop));
    j->sink.loop = j->loop;
    j->sink.progress = o->progress >= 0 ? o->progress : isatty(STDERR_FILENO);
    return NUMLA_STATUS_OK;
}

static void run_summary(const run_job *j, double wall, int rc)
{
    numla_serve_stats st;
    numla_serve_loop_stats_get(j->loop, &st);
    fprintf(stderr,
            "numla run: summary: %lld requests (%lld ok, %lld errors%s%lld skipped as already "
            "done) in %.2f s\n"
            "numla run:   prompt tokens %lld, output tokens %lld; %.1f output tok/s, %.1f tok/s "
            "overall\n"
            "numla run:   TTFT p50 %.1f ms p99 %.1f ms; TPOT p50 %.2f ms p99 %.2f ms\n"
            "numla run:   %lld steps, %lld preemptions (%lld tokens recomputed)%s\n"
            "numla run:   prefix cache: hit rate %.1f %% (%lld of %lld tokens looked up); prompt "
            "tokens %lld cached, %lld computed\n",
            (long long)st.done, (long long)st.ok, (long long)st.errors, ", ",
            (long long)j->src.skipped, wall, (long long)st.prompt_tokens,
            (long long)st.output_tokens, wall > 0 ? (double)st.output_tokens / wall : 0.0,
            wall > 0 ? (double)(st.prompt_tokens + st.output_tokens) / wall : 0.0,
            1e3 * st.ttft_p50_s, 1e3 * st.ttft_p99_s, 1e3 * st.tpot_p50_s, 1e3 * st.tpot_p99_s,
            (long long)st.sched.steps, (long long)st.sched.preemptions,
            (long long)st.sched.recompute_tokens,
            rc >= 128 ? "; stopped by a signal: rerun with --resume for the rest" : "",
            st.sched.prefix_lookup_tokens > 0
                ? 100.0 * (double)st.sched.prefix_hit_tokens / (double)st.sched.prefix_lookup_tokens
                : 0.0,
            (long long)st.sched.prefix_hit_tokens, (long long)st.sched.prefix_lookup_tokens,
            (long long)st.sched.cached_prompt_tokens, (long long)st.sched.prefill_tokens);
    if (j->o->e.spec_k > 0)
        fprintf(stderr,
                "numla run:   speculative mtp:%d: acceptance %.1f %% (%lld of %lld draft tokens), "
                "mean accepted length %.2f tokens per verify step (%lld steps); %lld MTP steps, "
                "%.2f s\n",
                j->o->e.spec_k,
                st.sched.spec_drafted > 0
                    ? 100.0 * (double)st.sched.spec_accepted / (double)st.sched.spec_drafted
                    : 0.0,
                (long long)st.sched.spec_accepted, (long long)st.sched.spec_drafted,
                st.sched.spec_steps > 0 ? (double)(st.sched.spec_accepted + st.sched.spec_steps) /
                                              (double)st.sched.spec_steps
                                        : 0.0,
                (long long)st.sched.spec_steps, (long long)st.sched.mtp_steps, st.sched.mtp_s);
}

/* Serve every request, then the summary; the exit code (1 when the output failed, 128 + N
 * after signal N), or -1 with the error set. SIGINT/SIGTERM count stop requests meanwhile. */
static int run_serve_requests(run_job *j)
{
    numla_cli_stop_saved saved;
    numla_cli_stop_install(&saved, 0);
    j->sink.t_run = numla_now_s();
    numla_serve_end why = NUMLA_SERVE_END_DONE;
    numla_status s = numla_serve_loop_run(j->loop, &why);
    const int stops = numla_cli_stop_requests, stop_signal = numla_cli_stop_signal;
    numla_cli_stop_restore(&saved);
    if (s != NUMLA_STATUS_OK)
        return -1;
    double wall = numla_now_s() - j->sink.t_run;
    if (j->sink.progress)
        progress_line(&j->sink, 1);
    int rc = why == NUMLA_SERVE_END_SINK_FAILED ? 1 : stops > 0 ? 128 + stop_signal : 0;
    run_summary(j, wall, rc);
    return rc;
}

static void run_job_close(run_job *j, int *rc)
{
    numla_serve_loop_destroy(&j->loop);
    numla_tokenizer_destroy(&j->tok);
    json_decref(j->src.done_ids);
    json_decref(j->src.seen);
    free(j->src.line);
    free(j->src.buf);
    if (j->src.in && j->src.in != stdin)
        fclose(j->src.in);
    if (j->sink.out && j->sink.out != stdout && fclose(j->sink.out) != 0) {
        fprintf(stderr, "numla run: %s: %s\n", j->o->output, strerror(errno));
        *rc = 1;
    }
}

static int run_fail(void) { return numla_cli_fail("numla run"); }

/* Rank 0 with the engine loaded and the files open: the whole batch job. */
static int run_rank0(run_job *j, numla_engine *eng, numla_comm *comm, double t_load)
{
    run_opts *o = j->o;
    j->eng = eng;
    j->cfg = *numla_engine_config(eng);
    numla_status s;
    int rc = -1;
    NUMLA_CHECK_GOTO(numla_cli_engine_opts_model("numla run", &o->e, &j->cfg), s, done);
    NUMLA_CHECK_GOTO(run_report_loaded(j, comm, t_load), s, done);
    NUMLA_CHECK_GOTO(run_output_reset(j), s, done);
    NUMLA_CHECK_GOTO(run_tokenizer_load(j), s, done);
    NUMLA_CHECK_GOTO(run_loop_create(j), s, done);
    rc = run_serve_requests(j);
done:
    (void)s;
    if (rc < 0)
        rc = run_fail();
    return rc;
}

static int run_prepare(void *ctx) { return run_files_open(ctx); }
static int run_serve(void *ctx, numla_engine *eng, numla_comm *comm, double t_load)
{
    return run_rank0(ctx, eng, comm, t_load);
}
static void run_close(void *ctx, int *rc) { run_job_close(ctx, rc); }

int numla_run_main(int argc, char **argv)
{
    run_opts o = {.progress = -1};
    numla_cli_engine_opts_default(&o.e);
    int rc = parse_opts(argc, argv, &o);
    if (rc >= 0)
        return rc;
    numla_settings set;
    numla_comm_session mpi;
    if (numla_settings_start(&set, &mpi) != NUMLA_STATUS_OK)
        return run_fail();
    /* the files first: a bad path is reported before the model loads, on every rank's exit */
    run_job j = {.o = &o};
    j.sink.open_mpi = set.open_mpi;
    const numla_cli_front f = {.cmd = "numla run", .ctx = &j, .prepare = run_prepare,
                               .serve = run_serve, .close = run_close};
    rc = numla_cli_engine_serve(&o.e, &set, &mpi, &f);
    numla_comm_world_finalize(&mpi);
    return rc;
}

NUMLA_CLI_COMMAND("run", numla_run_main,
                  "serve a JSONL file of requests with continuous batching (--model --input "
                  "--output [--resume])")
