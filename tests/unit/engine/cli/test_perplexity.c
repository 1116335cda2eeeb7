/* Tests for `numla perplexity` (engine/cli/perplexity_cmd.c, engine/serving/perplexity.c), run
 * in-process on the golden V3 model with a tokenizer (tests/golden/ppl/, made by
 * scripts/make_ppl_golden.py):
 *   - the perplexity equals llama.cpp's scoring of transformers' logits (expected.json) to 1e-3
 *     relative, at two contexts (an f32 KV cache: a bf16 one moves this random model's huge
 *     logits by ~0.5 %);
 *   - --kl-base against the run's own saved file gives KLD ~ 0 and full top-1 agreement;
 *     against int8 weights, the KLD, its 99th percentile, the top-1 agreement and RMS Δp equal
 *     what this file computes from the two saved files with its own reader of the format
 *     (docs/quantization.md) and the reference's tokens (the model's lm_head is scaled so
 *     that no stored log-prob is cut at llama.cpp's 16 nats: the files are then exact up to
 *     rounding);
 *   - bad input is refused with a message naming it: an empty file, a text shorter than two
 *     chunks, a base file from another text, from another model, truncated, corrupt, not one,
 *     --save-logits naming the text file itself. */
#include "test_util.h"

#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/cli/perplexity_cmd.h"
#include "engine/synth/synth.h"

static char model_dir[1024], other_dir[1024], text[1024];

static int suite_init(void)
{
    if (numla_test_mpi_init())
        return 1;
    snprintf(model_dir, sizeof model_dir, "%s", numla_test_source_path("tests/golden/ppl/model"));
    snprintf(text, sizeof text, "%s", numla_test_source_path("tests/golden/ppl/text.txt"));
    /* another model (another vocabulary) with a tokenizer */
    snprintf(other_dir, sizeof other_dir, "%s/ppl_other", numla_test_tmpdir());
    char tok_dir[1024];
    snprintf(tok_dir, sizeof tok_dir, "%s", numla_test_source_path("tests/golden/tokenizer/bpe1k"));
    numla_synth_options o = {.preset = "tiny", .out_dir = other_dir, .seed = 5,
                             .dtype = NUMLA_DTYPE_BF16, .tokenizer_dir = tok_dir};
    return numla_synth_write(&o, NULL) != NUMLA_STATUS_OK;
}

typedef struct ppl_run {
    int rc;
    char *out, *err;
} ppl_run;

/* numla perplexity with these arguments (NULL-terminated), stdout and stderr captured. */
static ppl_run run_ppl(const char *name, const char *const *args)
{
    char *argv[64];
    int argc = 0;
    argv[argc++] = "perplexity";
    for (; *args; args++)
        argv[argc++] = (char *)*args;
    argv[argc] = NULL;
    char po[1200], pe[1200];
    snprintf(po, sizeof po, "%s/%s.out", numla_test_tmpdir(), name);
    snprintf(pe, sizeof pe, "%s/%s.err", numla_test_tmpdir(), name);
    fflush(stdout);
    fflush(stderr);
    int so = dup(1), se = dup(2);
    int fo = open(po, O_WRONLY | O_CREAT | O_TRUNC, 0644), fe = open(pe, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fo, 1);
    dup2(fe, 2);
    ppl_run r = {.rc = numla_perplexity_main(argc, argv)};
    fflush(stdout);
    fflush(stderr);
    dup2(so, 1);
    dup2(se, 2);
    close(so);
    close(se);
    close(fo);
    close(fe);
    r.out = numla_test_read_file(po, NULL);
    r.err = numla_test_read_file(pe, NULL);
    return r;
}

static void run_free(ppl_run *r)
{
    free(r->out);
    free(r->err);
}

/* The number after `label` in text; NAN when absent. */
static double field(const char *text_, const char *label)
{
    const char *p = text_ ? strstr(text_, label) : NULL;
    if (!p)
        return NAN;
    p += strlen(label);
    while (*p == ' ' || *p == ':' || *p == '=')
        p++;
    return strtod(p, NULL);
}

static json_t *expected(void)
{
    return json_load_file(numla_test_source_path("tests/golden/ppl/expected.json"), 0, NULL);
}

static double expected_ppl(json_t *e, int ctx, double *err)
{
    json_t *runs = json_object_get(e, "runs"), *r;
    size_t i;
    json_array_foreach(runs, i, r) {
        if (json_integer_value(json_object_get(r, "ctx")) == ctx) {
            *err = json_real_value(json_object_get(r, "ppl_err"));
            return json_real_value(json_object_get(r, "ppl"));
        }
    }
    return NAN;
}

static void test_golden_ppl(void)
{
    json_t *e = expected();
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    static const char *ctxs[] = {"16", "64"};
    for (int k = 0; k < 2; k++) {
        const char *args[] = {"--model", model_dir, "--file", text, "--ctx", ctxs[k],
                              "--threads", "2", "--kv-dtype", "f32", "--kv-blocks", "64", NULL};
        ppl_run r = run_ppl("golden", args);
        NUMLA_ASSERT_MSG(r.rc == 0, "ctx %s: rc %d: %s", ctxs[k], r.rc, r.err);
        double want_err = 0, want = expected_ppl(e, atoi(ctxs[k]), &want_err);
        double got = field(r.out, "PPL ="), got_err = field(r.out, "+/-");
        NUMLA_ASSERT_MSG(fabs(got - want) <= 1e-3 * want, "ctx %s: PPL %.6g, transformers %.6g",
                         ctxs[k], got, want);
        NUMLA_ASSERT_MSG(fabs(got_err - want_err) <= 1e-2 * want_err, "ctx %s: +/- %.6g vs %.6g",
                         ctxs[k], got_err, want_err);
        /* the progress line: llama.cpp's running perplexity after each chunk */
        CU_ASSERT(r.err && strstr(r.err, "[1]"));
        run_free(&r);
    }
    /* --chunks 5: the running value after llama.cpp's fifth chunk */
    const char *args[] = {"--model", model_dir, "--file", text, "--ctx", "16", "--chunks", "5",
                          "--threads", "2", "--kv-dtype", "f32", "--kv-blocks", "64", NULL};
    ppl_run r = run_ppl("golden_chunks", args);
    json_t *runs = json_object_get(e, "runs"), *run16 = json_array_get(runs, 0);
    const double want = json_real_value(
        json_array_get(json_object_get(run16, "ppl_after_chunk"), 4));
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(run16, "ctx")), 16);
    NUMLA_ASSERT_MSG(r.rc == 0 && fabs(field(r.out, "PPL =") - want) <= 1e-3 * want,
                     "--chunks 5: rc %d, PPL %g, transformers after 5 chunks %g", r.rc,
                     field(r.out, "PPL ="), want);
    CU_ASSERT(r.out && strstr(r.out, "(5 chunks, 35 tokens scored)"));
    run_free(&r);
    json_decref(e);
}

/* ---- an independent reader of the base file (docs/quantization.md's layout) ---- */

typedef struct base_file {
    uint8_t *b;
    size_t len;
    int64_t vocab, chunks;
    int32_t ctx, first;
} base_file;

static uint64_t le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static int base_load(const char *path, base_file *f)
{
    f->b = (uint8_t *)numla_test_read_file(path, &f->len);
    if (!f->b || f->len < 64 || memcmp(f->b, "NUMLAKLB", 8))
        return -1;
    f->vocab = (int64_t)le(f->b + 16, 8);
    f->ctx = (int32_t)le(f->b + 24, 4);
    f->first = (int32_t)le(f->b + 28, 4);
    f->chunks = (int64_t)le(f->b + 40, 8);
    return 0;
}

/* Decoded log-probabilities of row r (over all chunks) into lp (vocab). */
static void base_row(const base_file *f, int64_t r, double *lp)
{
    const uint8_t *p = f->b + 64 + (size_t)r * (size_t)(8 + 2 * f->vocab);
    float scale, minlp;
    uint32_t u = (uint32_t)le(p, 4);
    memcpy(&scale, &u, 4);
    u = (uint32_t)le(p + 4, 4);
    memcpy(&minlp, &u, 4);
    for (int64_t v = 0; v < f->vocab; v++)
        lp[v] = (double)scale * (double)le(p + 8 + 2 * v, 2) + (double)minlp;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void test_kl(void)
{
    char base[1200], q8[1200];
    snprintf(base, sizeof base, "%s/ppl_base.bin", numla_test_tmpdir());
    snprintf(q8, sizeof q8, "%s/ppl_int8.bin", numla_test_tmpdir());
    const char *save[] = {"--model", model_dir, "--file", text, "--ctx", "32", "--threads", "2",
                          "--kv-dtype", "f32", "--kv-blocks", "64", "--save-logits", base, NULL};
    ppl_run r = run_ppl("kl_save", save);
    NUMLA_ASSERT_MSG(r.rc == 0, "save: %s", r.err);
    const double ppl_base = field(r.out, "PPL =");
    run_free(&r);

    /* against itself: KLD 0 up to the codes' rounding, top-1 always the same */
    const char *self[] = {"--model", model_dir, "--file", text, "--threads", "2", "--kv-dtype",
                          "f32", "--kv-blocks", "64", "--kl-base", base, NULL};
    r = run_ppl("kl_self", self);
    NUMLA_ASSERT_MSG(r.rc == 0, "self: %s", r.err);
    NUMLA_ASSERT_MSG(fabs(field(r.out, "Mean    KLD")) < 1e-4, "self KLD %g",
                     field(r.out, "Mean    KLD"));
    CU_ASSERT_DOUBLE_EQUAL(field(r.out, "Same top p"), 100.0, 1e-9);
    CU_ASSERT(fabs(field(r.out, "Mean PPL(base)") - ppl_base) <= 1e-3 * ppl_base);
    run_free(&r);

    /* int8 weights against the bf16 base, and the same int8 run saved */
    const char *kl[] = {"--model", model_dir, "--file", text, "--threads", "2", "--kv-dtype",
                        "f32", "--kv-blocks", "64", "--weights", "int8", "--kl-base", base, NULL};
    r = run_ppl("kl_int8", kl);
    NUMLA_ASSERT_MSG(r.rc == 0, "int8: %s", r.err);
    const char *kl_save[] = {"--model", model_dir, "--file", text, "--ctx", "32", "--threads", "2",
                             "--kv-dtype", "f32", "--kv-blocks", "64", "--weights", "int8",
                             "--save-logits", q8, NULL};
    ppl_run r8 = run_ppl("kl_int8_save", kl_save);
    NUMLA_ASSERT_MSG(r8.rc == 0, "int8 save: %s", r8.err);
    run_free(&r8);

    base_file a = {0}, b = {0};
    CU_ASSERT_EQUAL_FATAL(base_load(base, &a), 0);
    CU_ASSERT_EQUAL_FATAL(base_load(q8, &b), 0);
    CU_ASSERT_EQUAL_FATAL(a.len, b.len);
    CU_ASSERT_EQUAL_FATAL(a.ctx, 32);
    const int64_t rows = a.chunks * (a.ctx - 1 - a.first), V = a.vocab;
    double *la = malloc((size_t)V * sizeof *la), *lb = malloc((size_t)V * sizeof *lb);
    double *kld = malloc((size_t)rows * sizeof *kld);
    double sum = 0, same = 0, dp2 = 0;
    json_t *e = expected(), *toks = json_object_get(e, "tokens");
    CU_ASSERT_FATAL(json_array_size(toks) > 0);
    const int64_t per = a.ctx - 1 - a.first;
    for (int64_t i = 0; i < rows; i++) {
        base_row(&a, i, la);
        base_row(&b, i, lb);
        const int64_t tok = json_integer_value(
            json_array_get(toks, (size_t)((i / per) * a.ctx + a.first + i % per + 1)));
        const double dp = exp(lb[tok]) - exp(la[tok]);
        dp2 += dp * dp;
        double k = 0;
        int64_t ta = 0, tb = 0;
        for (int64_t v = 0; v < V; v++) {
            if (la[v] > -16)
                k += exp(la[v]) * (la[v] - lb[v]);
            ta = la[v] > la[ta] ? v : ta;
            tb = lb[v] > lb[tb] ? v : tb;
        }
        kld[i] = k;
        sum += k;
        same += ta == tb;
    }
    qsort(kld, (size_t)rows, sizeof *kld, cmp_d);
    const double mean = sum / (double)rows, p = 0.99 * (double)(rows - 1);
    const int64_t ip = (int64_t)p;
    const double p99 = (1 - (p - (double)ip)) * kld[ip] + (p - (double)ip) * kld[ip + 1];
    const double got = field(r.out, "Mean    KLD"), got99 = field(r.out, "99.0%   KLD");
    NUMLA_ASSERT_MSG(mean > 1e-4, "int8 KLD %g: too small to tell anything", mean);
    NUMLA_ASSERT_MSG(fabs(got - mean) <= 2e-4 + 1e-2 * mean, "KLD %g, from the files %g", got,
                     mean);
    NUMLA_ASSERT_MSG(fabs(got99 - p99) <= 5e-4 + 2e-2 * p99, "99%% KLD %g, from the files %g",
                     got99, p99);
    NUMLA_ASSERT_MSG(fabs(field(r.out, "Same top p") - 100.0 * same / (double)rows) <= 0.5,
                     "same top %g%%, from the files %g%%", field(r.out, "Same top p"),
                     100.0 * same / (double)rows);
    const double rms = 100 * sqrt(dp2 / (double)rows), got_rms = field(r.out, "RMS     Δp");
    NUMLA_ASSERT_MSG(rms > 0.01 && fabs(got_rms - rms) <= 2e-3 + 1e-2 * rms,
                     "RMS Δp %g%%, from the files %g%%", got_rms, rms);
    json_decref(e);
    free(la);
    free(lb);
    free(kld);
    free(a.b);
    free(b.b);
    run_free(&r);
}

/* rc 1 and a message on stderr containing want. */
static void expect_error(const char *name, const char *const *args, const char *want)
{
    ppl_run r = run_ppl(name, args);
    NUMLA_ASSERT_MSG(r.rc == 1 && r.err && strstr(r.err, want), "%s: rc %d, stderr:\n%s", name,
                     r.rc, r.err ? r.err : "(none)");
    run_free(&r);
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    if (n)
        fwrite(data, 1, n, f);
    fclose(f);
}

static void test_bad_input(void)
{
    char empty[1200], shortf[1200], other_text[1200], base[1200], bad[1200];
    snprintf(empty, sizeof empty, "%s/ppl_empty.txt", numla_test_tmpdir());
    snprintf(shortf, sizeof shortf, "%s/ppl_short.txt", numla_test_tmpdir());
    snprintf(other_text, sizeof other_text, "%s/ppl_other.txt", numla_test_tmpdir());
    snprintf(base, sizeof base, "%s/ppl_bad_base.bin", numla_test_tmpdir());
    snprintf(bad, sizeof bad, "%s/ppl_bad.bin", numla_test_tmpdir());
    write_file(empty, "", 0);
    const char *brief = "The LORD is my shepherd; I shall not want.\n";
    write_file(shortf, brief, strlen(brief));
    size_t tl = 0;
    char *t = numla_test_read_file(text, &tl);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    t[0] = t[0] == 'X' ? 'Y' : 'X'; /* another text of the same length */
    write_file(other_text, t, tl);
    free(t);

    const char *a_empty[] = {"--model", model_dir, "--file", empty, "--threads", "1", NULL};
    expect_error("empty", a_empty, "is empty");
    const char *a_short[] = {"--model", model_dir, "--file", shortf, "--ctx", "64", "--threads",
                             "1", "--kv-blocks", "64", NULL};
    expect_error("short", a_short, "tokenizes to");
    const char *a_big[] = {"--model", model_dir, "--file", text, "--ctx", "1024", "--threads",
                           "1", "--kv-blocks", "128", NULL};
    expect_error("short_ctx", a_big, "needs at least 2048");

    const char *a_save[] = {"--model", model_dir, "--file", text, "--ctx", "16", "--threads", "1",
                            "--kv-blocks", "64", "--save-logits", base, NULL};
    ppl_run r = run_ppl("bad_save", a_save);
    NUMLA_ASSERT_MSG(r.rc == 0, "save: %s", r.err);
    run_free(&r);
    const char *a_text[] = {"--model", model_dir, "--file", other_text, "--threads", "1",
                            "--kv-blocks", "64", "--kl-base", base, NULL};
    expect_error("other_text", a_text, "saved from another text");
    const char *a_ctx[] = {"--model", model_dir, "--file", text, "--ctx", "32", "--threads", "1",
                           "--kv-blocks", "64", "--kl-base", base, NULL};
    expect_error("other_ctx", a_ctx, "saved with --ctx 16");
    char few[1200];
    snprintf(few, sizeof few, "%s/ppl_few.bin", numla_test_tmpdir());
    const char *a_few[] = {"--model", model_dir, "--file", text, "--ctx", "16", "--chunks", "3",
                           "--threads", "1", "--kv-blocks", "64", "--save-logits", few, NULL};
    r = run_ppl("few_save", a_few);
    NUMLA_ASSERT_MSG(r.rc == 0, "save 3 chunks: %s", r.err);
    run_free(&r);
    const char *a_few_kl[] = {"--model", model_dir, "--file", text, "--threads", "1",
                              "--kv-blocks", "64", "--kl-base", few, NULL};
    r = run_ppl("few_kl", a_few_kl); /* the base file's context and chunk count */
    NUMLA_ASSERT_MSG(r.rc == 0 && r.out && strstr(r.out, "16 (3 chunks"), "rc %d: %s", r.rc,
                     r.err);
    run_free(&r);
    const char *a_few_other[] = {"--model", model_dir, "--file", text, "--chunks", "4",
                                 "--threads", "1", "--kv-blocks", "64", "--kl-base", few, NULL};
    expect_error("few_other", a_few_other, "holds 3 chunks, this run scores 4");
    const char *a_model[] = {"--model", other_dir, "--file", text, "--threads", "1",
                             "--kv-blocks", "64", "--kl-base", base, NULL};
    expect_error("other_model", a_model, "vocabulary of 288");

    size_t bl = 0;
    uint8_t *b = (uint8_t *)numla_test_read_file(base, &bl);
    CU_ASSERT_FATAL(b && bl > 1000);
    const char *a_bad[] = {"--model", model_dir, "--file", text, "--threads", "1", "--kv-blocks",
                           "64", "--kl-base", bad, NULL};
    write_file(bad, b, bl - 100);
    expect_error("truncated", a_bad, "truncated base file");
    b[bl / 2] ^= 0x40; /* a code in the middle of the rows */
    write_file(bad, b, bl);
    expect_error("corrupt_row", a_bad, "does not match its checksum");
    b[bl / 2] ^= 0x40;
    b[20] ^= 1; /* the header's vocabulary */
    write_file(bad, b, bl);
    expect_error("corrupt_header", a_bad, "header checksum");
    b[20] ^= 1;
    write_file(bad, brief, strlen(brief));
    expect_error("not_base", a_bad, "not a numla perplexity base file");
    free(b);

    const char *a_both[] = {"--model", model_dir, "--file", text, "--save-logits", bad,
                            "--kl-base", base, NULL};
    r = run_ppl("both", a_both);
    CU_ASSERT_EQUAL(r.rc, 2);
    run_free(&r);
    const char *a_self[] = {"--model", model_dir, "--file", other_text, "--save-logits",
                            other_text, NULL};
    r = run_ppl("save_over_text", a_self);
    NUMLA_ASSERT_MSG(r.rc == 2 && r.err && strstr(r.err, "is the text file"), "rc %d: %s", r.rc,
                     r.err ? r.err : "");
    run_free(&r);
    size_t ol = 0;
    char *still = numla_test_read_file(other_text, &ol);
    CU_ASSERT(still && ol == tl); /* the text is untouched */
    free(still);
}

NUMLA_TEST_SUITE(perplexity, suite_init, numla_test_mpi_finalize, NUMLA_TEST(test_golden_ppl),
                 NUMLA_TEST(test_kl), NUMLA_TEST(test_bad_input))
