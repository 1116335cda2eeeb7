/* bench/bench_opts.c — the benchmarks' shared options through the engine's parser (see
 * bench_opts.h). */
#include "bench/bench_opts.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int numla_bench_engine_opt(const char *cmd, numla_cli_engine_opts *e, const char *const *names,
                           int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    int listed = 0;
    for (const char *const *n = names; *n && !listed; n++)
        listed = !strcmp(a, *n);
    if (!listed)
        return NUMLA_CLI_OPT_NONE;
    const int r = numla_cli_engine_opts_parse(cmd, e, a, *i + 1 < argc ? argv[*i + 1] : NULL);
    if (r == NUMLA_CLI_OPT_VALUE)
        ++*i;
    if (r == NUMLA_CLI_OPT_NONE) { /* a name the engine's parser does not know: a caller's slip */
        fprintf(stderr, "%s: option %s is not an engine option\n", cmd, a);
        return NUMLA_CLI_OPT_BAD;
    }
    return r;
}

int numla_bench_int_opt(const char *cmd, int argc, char **argv, int *i, int *out)
{
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (!v) {
        fprintf(stderr, "%s: option %s needs a value\n", cmd, a);
        return 0;
    }
    char *end = NULL;
    errno = 0;
    const long x = strtol(v, &end, 10);
    if (end == v || *end || errno == ERANGE || x < INT_MIN || x > INT_MAX) {
        fprintf(stderr, "%s: option %s: '%s' is not a number\n", cmd, a, v);
        return 0;
    }
    *out = (int)x;
    ++*i;
    return 1;
}
