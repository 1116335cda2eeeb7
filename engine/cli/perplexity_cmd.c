/* engine/cli/perplexity_cmd.c — `numla perplexity`: the perplexity of a model over a text file as
 * llama.cpp's llama-perplexity computes it, and the KL divergence against a saved base run
 * (engine/serving/perplexity.h has the definitions; docs/quantization.md the usage).
 *
 * The text is tokenized with the model's tokenizer (BOS first when it adds one) and cut into
 * num_tokens / ctx chunks of --ctx tokens (default 512, or the base file's; the first --chunks
 * of them when given, or as many as the base file holds); every chunk is a
 * request of the scheduler that asks for its prompt rows' logits (max_tokens 0), so chunks run
 * batched and chunked like any prompt, on 1-N ranks (rank 0 drives the collective engine, the
 * other ranks run its worker loop, as numla run). Rank 0 scores rows ctx/2 .. ctx-2 of each
 * chunk as they come, prints the running perplexity after each chunk (llama.cpp's
 * "[1]x,[2]y,..." on stderr) and the final table on stdout. --save-logits FILE writes the
 * scored rows' log-probabilities (compressed as llama.cpp does); --kl-base FILE compares this
 * run against such a file: same vocabulary, context and tokens, or it is refused.
 * Exit: 0 done, 1 error (bad text, base file or engine failure: the message names it), 2 usage.
 * Collective over MPI_COMM_WORLD.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm/comm.h"
#include "common/clock.h"
#include "engine/cli/cli.h"
#include "engine/cli/engine_opts.h"
#include "engine/cli/model_text.h"
#include "engine/cli/perplexity_cmd.h"
#include "engine/cli/settings.h"
#include "engine/parallel/engine.h"
#include "engine/serving/perplexity.h"
#include "engine/serving/request_io.h"
#include "engine/serving/scheduler.h"
#include "engine/text/tokenizer.h"

#define PPL_CMD "numla perplexity"
#define PPL_DEFAULT_CTX 512

typedef struct ppl_opts {
    numla_cli_engine_opts e;   /* model, threads, weights, KV pool (engine_opts.h) */
    const char *file, *save, *kl_base;
    int32_t ctx;               /* 0: the base file's, else 512 */
    int64_t chunks;            /* --chunks: at most this many chunks; 0: the base file's, else
                                  all */
} ppl_opts;

typedef struct ppl_job {
    ppl_opts *o;
    char *text;                /* (text_len) the file */
    size_t text_len;
    FILE *base_f;
    numla_ppl_base *base;
    numla_ppl_base_writer *w;
    numla_tokenizer *tok;
    int64_t vocab;
    int32_t *tokens;           /* (num_tokens) the whole text */
    int64_t num_tokens, num_chunks;
    int32_t ctx, first, rows, bos;
    numla_request *reqs;       /* (num_chunks) */
    double *nll;               /* (num_chunks, rows) */
    numla_ppl_kl_row *kl;      /* (num_chunks, rows) with --kl-base */
    uint16_t *codes;           /* (cap_rows, vocab) a call's rows, saved or read */
    float *scale, *minlp;      /* (cap_rows) */
    int32_t cap_rows;
    uint8_t *chunk_done;       /* (num_chunks) */
    int64_t printed;           /* chunks whose running perplexity is printed */
    double print_sum;
    int failed;
    char error[1024];
} ppl_job;

static void usage(FILE *f)
{
    fprintf(f, "usage: numla perplexity --model DIR --file TEXT [--ctx N] [--chunks N]\n"
               "                        [--save-logits FILE | --kl-base FILE]\n");
    numla_cli_engine_opts_usage(f, 24);
    fprintf(f,
            "Perplexity as llama.cpp's llama-perplexity: chunks of --ctx tokens (default %d,\n"
            "or the base file's), BOS first, the second half of each chunk scored; --chunks N:\n"
            "the first N chunks only (default: all, or as many as the base file).\n"
            "--save-logits FILE keeps this run's log-probabilities (the base); --kl-base FILE\n"
            "compares this run with it: KL divergence, top-1 agreement, RMS of the change in\n"
            "the token's probability. The text needs at least 2 x --ctx tokens.\n"
            "Exit: 0 done, 1 error, 2 usage. NUMLA_ISA picks the kernel level.\n",
            PPL_DEFAULT_CTX);
}

static int parse_opts(int argc, char **argv, ppl_opts *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        const char *v = NULL;
        const int r = numla_cli_engine_opts_next(PPL_CMD, &o->e, argc, argv, &i, &v);
        if (r == NUMLA_CLI_OPT_BAD) {
            usage(stderr);
            return 2;
        }
        if (r != NUMLA_CLI_OPT_NONE)
            continue;
        if (!strcmp(a, "--file")) {
            o->file = v;
        } else if (!strcmp(a, "--save-logits")) {
            o->save = v;
        } else if (!strcmp(a, "--kl-base")) {
            o->kl_base = v;
        } else if (!strcmp(a, "--chunks")) {
            char *end = NULL;
            errno = 0;
            long long n = strtoll(v, &end, 10);
            if (errno || !end || *end || n < 1) {
                fprintf(stderr, PPL_CMD ": --chunks %s: give a number of chunks from 1 up\n", v);
                return 2;
            }
            o->chunks = n;
        } else if (!strcmp(a, "--ctx")) {
            char *end = NULL;
            errno = 0;
            long n = strtol(v, &end, 10);
            if (errno || !end || *end || n < 4 || n > (1 << 24)) {
                fprintf(stderr, PPL_CMD ": --ctx %s: give a number of tokens from 4 up\n", v);
                return 2;
            }
            o->ctx = (int32_t)n;
        } else {
            fprintf(stderr, PPL_CMD ": unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!o->e.model || !o->file) {
        fprintf(stderr, PPL_CMD ": --model and --file are required\n");
        usage(stderr);
        return 2;
    }
    if (o->save && o->kl_base) {
        fprintf(stderr, PPL_CMD ": give --save-logits or --kl-base, not both\n");
        return 2;
    }
    return numla_cli_engine_opts_check(PPL_CMD, &o->e);
}

/* Rank 0, before the model loads: the text (whole), the base file (its header checked), the
 * place of --save-logits. Returns -1 when all is well, else the exit code (message printed). */
static int ppl_prepare(void *ctx)
{
    ppl_job *j = ctx;
    const ppl_opts *o = j->o;
    FILE *f = fopen(o->file, "rb");
    struct stat sb;
    if (!f || fstat(fileno(f), &sb) != 0 || S_ISDIR(sb.st_mode)) {
        fprintf(stderr, PPL_CMD ": --file %s: %s\n", o->file,
                f ? "is a directory, not a text file" : strerror(errno));
        if (f)
            fclose(f);
        return 1;
    }
    size_t cap = 1 << 16;
    j->text = malloc(cap);
    for (size_t n; j->text && (n = fread(j->text + j->text_len, 1, cap - j->text_len, f)) > 0;) {
        j->text_len += n;
        if (j->text_len == cap) {
            char *t = realloc(j->text, cap *= 2);
            if (!t)
                free(j->text);
            j->text = t;
        }
    }
    const int rerr = ferror(f);
    fclose(f);
    if (!j->text || rerr) {
        fprintf(stderr, PPL_CMD ": --file %s: %s\n", o->file, j->text ? "read error" : "no memory");
        return 1;
    }
    if (j->text_len == 0) {
        fprintf(stderr, PPL_CMD ": --file %s is empty: there is no text to score\n", o->file);
        return 1;
    }
    if (o->kl_base) {
        j->base_f = fopen(o->kl_base, "rb");
        if (!j->base_f) {
            fprintf(stderr, PPL_CMD ": --kl-base %s: %s\n", o->kl_base, strerror(errno));
            return 1;
        }
        if (numla_ppl_base_open(j->base_f, o->kl_base, &j->base) != NUMLA_STATUS_OK) {
            fprintf(stderr, PPL_CMD ": --kl-base %s\n", numla_error_message());
            return 1;
        }
    }
    if (o->save) { /* a path that cannot be written fails now, not after the run */
        struct stat ss;
        if (stat(o->save, &ss) == 0 && ss.st_dev == sb.st_dev && ss.st_ino == sb.st_ino) {
            fprintf(stderr, PPL_CMD ": --save-logits %s is the text file %s: it would be "
                            "overwritten; write the log-probabilities to another file\n",
                    o->save, o->file);
            return 2;
        }
        const int existed = access(o->save, F_OK) == 0;
        FILE *s = fopen(o->save, "ab");
        if (!s) {
            fprintf(stderr, PPL_CMD ": --save-logits %s: %s\n", o->save, strerror(errno));
            return 1;
        }
        fclose(s);
        if (!existed)
            unlink(o->save);
    }
    return -1;
}

/* Whether the tokenizer puts BOS first (llama.cpp's add_bos): a probe with and without the
 * special tokens. */
static numla_status ppl_adds_bos(ppl_job *j, int *adds)
{
    int32_t *a = NULL, *b = NULL;
    int64_t na = 0, nb = 0;
    numla_status s = numla_tokenizer_encode(j->tok, "a", 1, 1, &a, &na);
    if (s == NUMLA_STATUS_OK)
        s = numla_tokenizer_encode(j->tok, "a", 1, 0, &b, &nb);
    *adds = s == NUMLA_STATUS_OK && j->bos >= 0 && na == nb + 1 && na > 0 && a[0] == j->bos;
    free(a);
    free(b);
    return s;
}

/* The scheduler hands over a chunk's rows: score the ones of its second half. */
static numla_status ppl_rows(void *ctx, void *user, int32_t first, int32_t n, const float *logits)
{
    ppl_job *j = ctx;
    const int64_t c = (int64_t)(intptr_t)user;
    const int64_t V = j->vocab;
    /* the scored positions among these rows: [a, b) */
    const int32_t a = first > j->first ? first : j->first;
    const int32_t b = first + n < j->ctx - 1 ? first + n : j->ctx - 1;
    if (b <= a)
        return NUMLA_STATUS_OK;
    const int32_t m = b - a;
    if ((j->w || j->base) && m > j->cap_rows) {
        uint16_t *codes = realloc(j->codes, (size_t)m * (size_t)V * sizeof *codes);
        if (codes)
            j->codes = codes;
        float *sc = codes ? realloc(j->scale, (size_t)m * sizeof *sc) : NULL;
        if (sc)
            j->scale = sc;
        float *mn = sc ? realloc(j->minlp, (size_t)m * sizeof *mn) : NULL;
        if (!mn)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for %d rows of log-probabilities", m);
        j->minlp = mn;
        j->cap_rows = m;
    }
    /* the base file's rows are read in order, then every row is scored on the rank's team */
    for (int32_t k = 0; k < m && j->base; k++)
        NUMLA_CHECK(numla_ppl_base_read_row(j->base, c, a + k - j->first, &j->scale[k],
                                            &j->minlp[k], j->codes + (size_t)k * (size_t)V));
#pragma omp parallel for schedule(dynamic, 1) if (m > 1)
    for (int32_t k = 0; k < m; k++) {
        const int32_t p = a + k;
        const float *lg = logits + (size_t)(p - first) * (size_t)V;
        const int32_t tok = j->tokens[c * j->ctx + p + 1];
        const size_t at = (size_t)c * (size_t)j->rows + (size_t)(p - j->first);
        uint16_t *codes = j->codes ? j->codes + (size_t)k * (size_t)V : NULL;
        j->nll[at] = numla_ppl_row_nll(lg, V, tok);
        if (j->w)
            numla_ppl_row_encode(lg, V, &j->scale[k], &j->minlp[k], codes);
        if (j->base)
            numla_ppl_kl_compare(lg, V, j->scale[k], j->minlp[k], codes, tok, &j->kl[at]);
    }
    for (int32_t k = 0; k < m && j->w; k++)
        NUMLA_CHECK(numla_ppl_base_writer_put(j->w, c, a + k - j->first, j->scale[k],
                                              j->minlp[k], j->codes + (size_t)k * (size_t)V));
    return NUMLA_STATUS_OK;
}

/* llama.cpp's running perplexity "[i]ppl," after each chunk, in chunk order. */
static void ppl_progress(ppl_job *j)
{
    while (j->printed < j->num_chunks && j->chunk_done[j->printed]) {
        for (int32_t r = 0; r < j->rows; r++)
            j->print_sum += j->nll[(size_t)j->printed * (size_t)j->rows + (size_t)r];
        j->printed++;
        fprintf(stderr, "[%lld]%.4f,", (long long)j->printed,
                exp(j->print_sum / (double)(j->printed * j->rows)));
        if (j->printed == j->num_chunks)
            fputc('\n', stderr);
        fflush(stderr);
    }
}

static void ppl_done(void *ctx, const numla_sched_output *out)
{
    ppl_job *j = ctx;
    const int64_t c = (int64_t)(intptr_t)out->user;
    if (out->error || strcmp(out->finish_reason, "length") != 0) {
        if (!j->failed)
            snprintf(j->error, sizeof j->error, "chunk %lld: %s", (long long)c + 1,
                     out->error ? out->error : out->finish_reason);
        j->failed = 1;
        return;
    }
    j->chunk_done[c] = 1;
    ppl_progress(j);
}

/* Tokens, chunks and the files' headers once the model (its vocabulary) is known. */
static numla_status ppl_setup(ppl_job *j, const numla_model_config *cfg)
{
    ppl_opts *o = j->o;
    j->vocab = cfg->vocab_size;
    if (!numla_model_text_present(o->e.model))
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "%s has no tokenizer (tokenizer.json, "
                   "tiktoken.model or a GGUF file's tokenizer keys): perplexity scores text",
                   o->e.model);
    NUMLA_CHECK(numla_model_text_tokenizer(o->e.model, cfg->vocab_size, &j->tok));
    j->bos = numla_tokenizer_bos(j->tok);
    int add_bos = 0;
    NUMLA_CHECK(ppl_adds_bos(j, &add_bos));
    NUMLA_CHECK(numla_tokenizer_encode(j->tok, j->text, j->text_len, 1, &j->tokens,
                                       &j->num_tokens));
    j->ctx = o->ctx ? o->ctx : j->base ? numla_ppl_base_get_header(j->base)->ctx : PPL_DEFAULT_CTX;
    if (j->ctx > o->e.max_context)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "--ctx %d is above the context of %lld tokens "
                   "(the model's, or --max-context)", j->ctx, (long long)o->e.max_context);
    if (j->num_tokens < 2 * (int64_t)j->ctx)
        NUMLA_FAIL(NUMLA_STATUS_INVALID_ARG, "--file %s tokenizes to %lld tokens; --ctx %d needs "
                   "at least %lld (two chunks, as llama-perplexity): give a longer text or a "
                   "smaller --ctx", o->file, (long long)j->num_tokens, j->ctx,
                   2 * (long long)j->ctx);
    j->first = j->ctx / 2;
    j->rows = j->ctx - 1 - j->first;
    j->num_chunks = j->num_tokens / j->ctx;
    const int64_t want = o->chunks ? o->chunks
                                   : j->base ? numla_ppl_base_get_header(j->base)->num_chunks : 0;
    if (want > 0 && want < j->num_chunks)
        j->num_chunks = want;
    const numla_ppl_base_header h = {.vocab_size = cfg->vocab_size, .ctx = j->ctx,
                                     .first = j->first, .num_tokens = j->num_tokens,
                                     .num_chunks = j->num_chunks,
                                     .tokens_hash = numla_ppl_tokens_hash(j->tokens,
                                                                          j->num_tokens)};
    if (j->base)
        NUMLA_CHECK(numla_ppl_base_check(j->base, &h));
    const size_t C = (size_t)j->num_chunks, R = (size_t)j->rows;
    j->reqs = calloc(C, sizeof *j->reqs);
    j->nll = calloc(C * R, sizeof *j->nll);
    j->chunk_done = calloc(C, 1);
    if (j->base)
        j->kl = calloc(C * R, sizeof *j->kl);
    if (!j->reqs || !j->nll || !j->chunk_done || (j->base && !j->kl))
        NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for %zu chunks", C);
    for (size_t c = 0; c < C; c++) {
        numla_request *q = &j->reqs[c];
        q->line = (int64_t)c + 1;
        q->num_prompt = j->ctx;
        q->prompt_tokens = malloc((size_t)j->ctx * sizeof *q->prompt_tokens);
        if (!q->prompt_tokens)
            NUMLA_FAIL(NUMLA_STATUS_NO_MEMORY, "no memory for chunk %zu", c + 1);
        memcpy(q->prompt_tokens, j->tokens + c * (size_t)j->ctx,
               (size_t)j->ctx * sizeof *q->prompt_tokens);
        if (add_bos)
            q->prompt_tokens[0] = j->bos;
        numla_sampling_params_default(&q->params);
        q->params.max_tokens = 0;
        q->prompt_logprobs = 1; /* its prompt rows' logits, through ppl_rows */
        q->prompt_logprobs_top = 0;
    }
    if (o->save)
        NUMLA_CHECK(numla_ppl_base_writer_create(o->save, &h, &j->w));
    fprintf(stderr, PPL_CMD ": %s: %lld tokens (%s), %lld chunks of %d, rows %d..%d of each "
                    "scored (%lld tokens)\n",
            o->file, (long long)j->num_tokens, add_bos ? "BOS first" : "no BOS",
            (long long)j->num_chunks, j->ctx, j->first, j->ctx - 2,
            (long long)(j->num_chunks * j->rows));
    return NUMLA_STATUS_OK;
}

static numla_status ppl_score(ppl_job *j, numla_engine *eng, const numla_model_config *cfg)
{
    numla_sched_options so = numla_cli_sched_options(&j->o->e, cfg);
    so.prompt_rows = ppl_rows;
    so.prompt_rows_ctx = j;
    /* a whole chunk's rows fit in one step, and several chunks' while their logits stay
     * within 256 MiB (a small vocabulary, a small --ctx) */
    const int64_t by_memory = ((int64_t)1 << 28) / (j->vocab * (int64_t)sizeof(float));
    const int64_t rows = by_memory < so.max_batch_tokens ? by_memory : so.max_batch_tokens;
    so.prompt_logit_rows = rows > j->ctx ? (int32_t)rows : j->ctx;
    numla_sched *s = NULL;
    NUMLA_CHECK(numla_sched_create(&so, numla_engine_kv_cache(eng), numla_cli_engine_exec, eng,
                                   ppl_done, j, &s));
    numla_status st = NUMLA_STATUS_OK;
    for (int64_t c = 0; c < j->num_chunks && st == NUMLA_STATUS_OK; c++)
        st = numla_sched_submit(s, &j->reqs[c], (void *)(intptr_t)c);
    while (st == NUMLA_STATUS_OK && !j->failed && numla_sched_busy(s))
        st = numla_sched_step(s);
    numla_sched_destroy(&s);
    NUMLA_CHECK(st);
    if (j->failed)
        NUMLA_FAIL(NUMLA_STATUS_INTERNAL, "%s", j->error);
    return NUMLA_STATUS_OK;
}

static numla_status ppl_report(ppl_job *j)
{
    const int64_t n = j->num_chunks * j->rows;
    double sum = 0, sum2 = 0;
    for (int64_t i = 0; i < n; i++) {
        sum += j->nll[i];
        sum2 += j->nll[i] * j->nll[i];
    }
    const double mean = sum / (double)n, var = sum2 / (double)n - mean * mean;
    const double ppl = exp(mean), unc = var > 0 && n > 1 ? ppl * sqrt(var / (double)(n - 1)) : 0;
    printf("====== Perplexity ======\n");
    printf("model                         : %s\n", j->o->e.model);
    printf("text                          : %s (%lld tokens)\n", j->o->file,
           (long long)j->num_tokens);
    printf("context                       : %d (%lld chunks, %lld tokens scored)\n", j->ctx,
           (long long)j->num_chunks, (long long)n);
    printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, unc);
    if (!j->kl) {
        fflush(stdout);
        return NUMLA_STATUS_OK;
    }
    numla_ppl_kl_summary k;
    NUMLA_CHECK(numla_ppl_kl_summarize(j->kl, n, &k));
    printf("\n====== KL divergence against %s ======\n", j->o->kl_base);
    printf("Mean PPL(Q)                   : %10.6f ± %10.6f\n", k.ppl, k.ppl_unc);
    printf("Mean PPL(base)                : %10.6f ± %10.6f\n", k.ppl_base, k.ppl_base_unc);
    printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", k.ln_ratio, k.ln_ratio_unc);
    printf("Mean    KLD                   : %10.6f ± %10.6f\n", k.kld_mean, k.kld_unc);
    printf("Maximum KLD                   : %10.6f\n", k.kld_max);
    printf("99.9%%   KLD                   : %10.6f\n", k.kld_p999);
    printf("99.0%%   KLD                   : %10.6f\n", k.kld_p99);
    printf("95.0%%   KLD                   : %10.6f\n", k.kld_p95);
    printf("Median  KLD                   : %10.6f\n", k.kld_median);
    printf("Same top p                    : %7.3f ± %5.3f %%\n", 100 * k.same_top,
           100 * k.same_top_unc);
    printf("Mean    Δp                    : %7.3f %%\n", 100 * k.p_diff_mean);
    printf("RMS     Δp                    : %7.3f ± %5.3f %%\n", 100 * k.p_diff_rms,
           100 * k.p_diff_rms_unc);
    fflush(stdout);
    return NUMLA_STATUS_OK;
}

/* Rank 0 with the engine loaded. */
static int ppl_serve(void *ctx, numla_engine *eng, numla_comm *comm, double t_load)
{
    ppl_job *j = ctx;
    numla_model_config cfg = *numla_engine_config(eng);
    numla_status s;
    NUMLA_CHECK_GOTO(numla_cli_engine_opts_model(PPL_CMD, &j->o->e, &cfg), s, fail);
    fprintf(stderr, PPL_CMD ": %s loaded in %.2f s on %d rank%s\n", j->o->e.model,
            numla_now_s() - t_load, numla_comm_size(comm), numla_comm_size(comm) > 1 ? "s" : "");
    NUMLA_CHECK_GOTO(ppl_setup(j, &cfg), s, fail);
    const double t0 = numla_now_s();
    NUMLA_CHECK_GOTO(ppl_score(j, eng, &cfg), s, fail);
    if (j->w)
        NUMLA_CHECK_GOTO(numla_ppl_base_writer_finish(&j->w), s, fail);
    fprintf(stderr, PPL_CMD ": %lld chunks in %.2f s\n", (long long)j->num_chunks,
            numla_now_s() - t0);
    NUMLA_CHECK_GOTO(ppl_report(j), s, fail);
    if (j->w == NULL && j->o->save)
        fprintf(stderr, PPL_CMD ": log-probabilities saved to %s\n", j->o->save);
    return 0;
fail:
    (void)s;
    if (j->printed < j->num_chunks && j->printed > 0)
        fputc('\n', stderr);
    return numla_cli_fail(PPL_CMD);
}

static void ppl_close(void *ctx, int *rc)
{
    (void)rc;
    ppl_job *j = ctx;
    numla_ppl_base_writer_abandon(&j->w); /* a failed run leaves no half-written base file */
    numla_ppl_base_close(&j->base);
    if (j->base_f)
        fclose(j->base_f);
    if (j->reqs)
        for (int64_t c = 0; c < j->num_chunks; c++)
            numla_request_free(&j->reqs[c]);
    free(j->reqs);
    free(j->nll);
    free(j->kl);
    free(j->codes);
    free(j->scale);
    free(j->minlp);
    free(j->chunk_done);
    free(j->tokens);
    free(j->text);
    numla_tokenizer_destroy(&j->tok);
}

int numla_perplexity_main(int argc, char **argv)
{
    ppl_opts o = {0};
    numla_cli_engine_opts_default(&o.e);
    int rc = parse_opts(argc, argv, &o);
    if (rc >= 0)
        return rc;
    numla_settings set;
    numla_comm_session mpi;
    if (numla_settings_start(&set, &mpi) != NUMLA_STATUS_OK)
        return numla_cli_fail(PPL_CMD);
    ppl_job j = {.o = &o};
    const numla_cli_front f = {.cmd = PPL_CMD, .ctx = &j, .prepare = ppl_prepare,
                               .serve = ppl_serve, .close = ppl_close};
    rc = numla_cli_engine_serve(&o.e, &set, &mpi, &f);
    numla_comm_world_finalize(&mpi);
    return rc;
}

NUMLA_CLI_COMMAND("perplexity", numla_perplexity_main,
                  "perplexity of a model over a text as llama-perplexity, and the KL divergence "
                  "against a saved run (--model --file [--ctx] [--save-logits | --kl-base])")
