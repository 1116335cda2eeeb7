/* bench/bench_tokenizer.c — `numla bench tokenizer`: single-threaded encode MB/s of
 * engine/tokenizer on the ~1 MB mixed text of the golden data, against the reference tokenizers
 * library's MB/s recorded next to it (tests/golden/tokenizer/README.md; for the tiktoken path,
 * tests/golden/kimi_tok/README.md: the tiktoken package's) or given with --ref-mbps.
 * Prints numbers and the ratio; never asserts a time. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/bench_opts.h"
#include "engine/cli/cli.h"
#include "engine/text/tokenizer.h"

static char *numla_bench_tok_read(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *b = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        b = malloc((size_t)n + 1);
        if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
            free(b);
            b = NULL;
        }
    }
    fclose(f);
    if (b) {
        b[n] = 0;
        *len = (size_t)n;
    }
    return b;
}

/* The reference MB/s the golden script wrote: the number in "**X MB/s**". */
static double numla_bench_tok_ref(const char *readme)
{
    size_t len;
    char *s = numla_bench_tok_read(readme, &len);
    double v = 0;
    char *p = s ? strstr(s, " MB/s**") : NULL;
    if (p) {
        while (p > s && p[-1] != '*')
            p--;
        v = atof(p);
    }
    free(s);
    return v;
}

static int numla_bench_tokenizer(int argc, char **argv)
{
    const char *model = NULL, *file = NULL;
    int json = 0, reps = 5;
    double ref = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--model") == 0 && i + 1 < argc)
            model = argv[++i];
        else if (strcmp(argv[i], "--file") == 0 && i + 1 < argc)
            file = argv[++i];
        else if (strcmp(argv[i], "--reps") == 0) {
            if (!numla_bench_int_opt("numla bench tokenizer", argc, argv, &i, &reps))
                return 2;
        } else if (strcmp(argv[i], "--ref-mbps") == 0 && i + 1 < argc)
            ref = atof(argv[++i]);
        else if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else
            model = NULL, i = argc;
    }
    if (!model || reps < 1) {
        fprintf(stderr, "usage: numla bench tokenizer --model DIR [--file F] [--reps N] "
                        "[--ref-mbps X] [--json]\n"
                        "  F defaults to DIR/../mixed_1mb.txt (the golden data's benchmark text;\n"
                        "  for a tiktoken.model dir DIR/../tokenizer/mixed_1mb.txt)\n");
        return 2;
    }
    char *path = NULL, *readme = NULL;
    /* a tiktoken model of the golden data (tests/golden/kimi_tok/) keeps its reference MB/s in
     * its own README and reads the same mixed text as the tokenizer.json ones */
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/tiktoken.model", model);
    FILE *tk = fopen(probe, "rb");
    int tiktoken = tk != NULL;
    if (tk)
        fclose(tk);
    if (!file && asprintf(&path, tiktoken ? "%s/../tokenizer/mixed_1mb.txt" : "%s/../mixed_1mb.txt",
                          model) >= 0)
        file = path;
    if (ref <= 0 && asprintf(&readme, tiktoken ? "%s/README.md" : "%s/../README.md", model) >= 0)
        ref = numla_bench_tok_ref(readme);
    size_t len = 0;
    char *text = file ? numla_bench_tok_read(file, &len) : NULL;
    if (!text) {
        fprintf(stderr, "numla bench tokenizer: cannot read %s (pass --file)\n",
                file ? file : "(none)");
        free(path);
        free(readme);
        return 1;
    }
    numla_tokenizer *t = NULL;
    double t0 = numla_now_s();
    if (numla_tokenizer_load(model, &t) != NUMLA_STATUS_OK) {
        fprintf(stderr, "numla bench tokenizer: %s\n", numla_error_message());
        free(text);
        free(path);
        free(readme);
        return 1;
    }
    double load_s = numla_now_s() - t0;
    double *sec = malloc((size_t)reps * sizeof *sec);
    int64_t n = 0;
    int rc = 0;
    for (int r = 0; r < reps && sec; r++) {
        int32_t *ids = NULL;
        double a = numla_now_s();
        numla_status s = numla_tokenizer_encode(t, text, len, 0, &ids, &n);
        sec[r] = numla_now_s() - a;
        free(ids);
        if (s != NUMLA_STATUS_OK) {
            fprintf(stderr, "numla bench tokenizer: %s\n", numla_error_message());
            rc = 1;
            break;
        }
    }
    if (rc == 0 && sec) {
        double best = sec[0];
        for (int r = 1; r < reps; r++)
            best = sec[r] < best ? sec[r] : best;
        double mb = (double)len / 1e6;
        double cold = mb / sec[0], warm = mb / best, med = mb / numla_bench_median(sec, reps);
        if (json)
            printf("{\"bench\": \"tokenizer\", \"bytes\": %zu, \"ids\": %lld, \"load_s\": %.4f, "
                   "\"mbps_first\": %.3f, \"mbps_best\": %.3f, \"mbps_median\": %.3f, "
                   "\"ref_mbps\": %.3f, \"ratio_best_vs_ref\": %.3f}\n",
                   len, (long long)n, load_s, cold, warm, med, ref, ref > 0 ? warm / ref : 0.0);
        else {
            printf("tokenizer encode, 1 thread: %zu bytes -> %lld ids (load %.3f s)\n", len,
                   (long long)n, load_s);
            printf("  first run (cold word cache) %8.2f MB/s\n", cold);
            printf("  best of %-3d                 %8.2f MB/s (median %.2f)\n", reps, warm, med);
            if (ref > 0)
                printf("  reference %-18s%8.2f MB/s (recorded) -> ratio %.2f\n",
                       tiktoken ? "tiktoken" : "tokenizers", ref, warm / ref);
        }
    }
    free(sec);
    free(text);
    free(path);
    free(readme);
    numla_tokenizer_destroy(&t);
    return rc;
}

NUMLA_CLI_COMMAND("bench tokenizer", numla_bench_tokenizer,
                  "--model DIR [--file F] [--json]: single-threaded encode MB/s vs the reference")
