/* engine/cli/tokenize_cmd.c — `numla tokenize` (text -> JSON array of ids) and `numla detokenize`
 * (comma-separated ids -> text) over engine/text/tokenizer.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cli/cli.h"
#include "engine/text/tokenizer.h"

static void numla_tokenizer_cli_error(const char *cmd)
{
    fprintf(stderr, "numla %s: %s\n%s", cmd, numla_error_message(), numla_error_trace());
}

static int numla_tokenizer_read_file(const char *path, char **buf, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "numla tokenize: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    while (b) {
        size_t r = fread(b + n, 1, cap - n, f);
        n += r;
        if (n < cap)
            break;
        char *nb = realloc(b, cap *= 2);
        if (!nb)
            free(b);
        b = nb;
    }
    int err = ferror(f);
    fclose(f);
    if (!b || err) {
        free(b);
        fprintf(stderr, "numla tokenize: cannot read %s\n", path);
        return -1;
    }
    *buf = b;
    *len = n;
    return 0;
}

static int numla_tokenizer_cli_tokenize(int argc, char **argv)
{
    const char *model = NULL, *text = NULL, *file = NULL;
    int special = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--model") == 0 && i + 1 < argc)
            model = argv[++i];
        else if (strcmp(argv[i], "--text") == 0 && i + 1 < argc)
            text = argv[++i];
        else if (strcmp(argv[i], "--file") == 0 && i + 1 < argc)
            file = argv[++i];
        else if (strcmp(argv[i], "--no-special") == 0)
            special = 0;
        else {
            fprintf(stderr, "usage: numla tokenize --model DIR (--text T | --file F) "
                            "[--no-special]\n");
            return 2;
        }
    }
    if (!model || (!text) == (!file)) {
        fprintf(stderr, "usage: numla tokenize --model DIR (--text T | --file F) [--no-special]\n");
        return 2;
    }
    char *buf = NULL;
    size_t len = 0;
    if (file) {
        if (numla_tokenizer_read_file(file, &buf, &len) != 0)
            return 1;
    } else {
        len = strlen(text);
    }
    numla_tokenizer *t = NULL;
    int32_t *ids = NULL;
    int64_t n = 0;
    int rc = 0;
    if (numla_tokenizer_load(model, &t) != NUMLA_STATUS_OK ||
        numla_tokenizer_encode(t, file ? buf : text, len, special, &ids, &n) != NUMLA_STATUS_OK) {
        numla_tokenizer_cli_error("tokenize");
        rc = 1;
    } else {
        putchar('[');
        for (int64_t i = 0; i < n; i++)
            printf(i ? ", %d" : "%d", (int)ids[i]);
        puts("]");
    }
    free(ids);
    free(buf);
    numla_tokenizer_destroy(&t);
    return rc;
}

static int numla_tokenizer_cli_detokenize(int argc, char **argv)
{
    const char *model = NULL, *list = NULL;
    int skip = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--model") == 0 && i + 1 < argc)
            model = argv[++i];
        else if (strcmp(argv[i], "--ids") == 0 && i + 1 < argc)
            list = argv[++i];
        else if (strcmp(argv[i], "--skip-special") == 0)
            skip = 1;
        else
            list = NULL, model = NULL, i = argc;
    }
    if (!model || !list) {
        fprintf(stderr, "usage: numla detokenize --model DIR --ids 1,2,3 [--skip-special]\n");
        return 2;
    }
    size_t cap = 16, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    const char *p = list;
    while (ids && *p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            fprintf(stderr, "numla detokenize: bad id list at '%s'\n", p);
            free(ids);
            return 2;
        }
        if (n == cap) {
            int32_t *ni = realloc(ids, (cap *= 2) * sizeof *ids);
            if (!ni)
                free(ids);
            ids = ni;
            if (!ids)
                break;
        }
        ids[n++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (!ids) {
        fprintf(stderr, "numla detokenize: out of memory\n");
        return 1;
    }
    numla_tokenizer *t = NULL;
    char *text = NULL;
    size_t len = 0;
    int rc = 0;
    if (numla_tokenizer_load(model, &t) != NUMLA_STATUS_OK ||
        numla_tokenizer_decode(t, ids, (int64_t)n, skip, &text, &len) != NUMLA_STATUS_OK) {
        numla_tokenizer_cli_error("detokenize");
        rc = 1;
    } else {
        fwrite(text, 1, len, stdout);
        putchar('\n');
    }
    free(text);
    free(ids);
    numla_tokenizer_destroy(&t);
    return rc;
}

NUMLA_CLI_COMMAND("tokenize", numla_tokenizer_cli_tokenize,
                  "--model DIR (--text T | --file F) [--no-special]: print token ids as JSON")
NUMLA_CLI_COMMAND("detokenize", numla_tokenizer_cli_detokenize,
                  "--model DIR --ids 1,2,3 [--skip-special]: print the decoded text")
