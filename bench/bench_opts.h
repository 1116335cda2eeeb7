/* bench/bench_opts.h — the command-line options the benchmarks share with `numla run` (--model,
 * --threads, --weights, --keep-lm-head, the batching sizes), read by the engine's own parser
 * (engine/cli/engine_opts.h) so a bad value is refused with the same message, and a checked
 * reader for the benchmarks' own whole-number options. Messages name the command (cmd, e.g.
 * "numla bench model"). Not collective.
 */
#ifndef NUMLA_BENCH_BENCH_OPTS_H
#define NUMLA_BENCH_BENCH_OPTS_H

#include "engine/cli/engine_opts.h"

/* argv[*i] when it is one of `names` (NULL-terminated; engine options of engine_opts.h) into e,
 * with argv[*i + 1] its value: NUMLA_CLI_OPT_VALUE (*i moved past the value) or _FLAG (a flag
 * such as --keep-lm-head) when taken, _BAD when its value is missing or bad (the message is
 * printed: exit 2), _NONE when argv[*i] is not one of `names` (*i unchanged). */
int numla_bench_engine_opt(const char *cmd, numla_cli_engine_opts *e, const char *const *names,
                           int argc, char **argv, int *i);

/* The value of option argv[*i] (argv[*i + 1]) as an int into *out: 1 when it is a whole decimal
 * number within int's range (*i moved past it), else 0 with "cmd: option A: 'V' is not a
 * number" or "cmd: option A needs a value" printed (exit 2). */
int numla_bench_int_opt(const char *cmd, int argc, char **argv, int *i, int *out);

#endif
