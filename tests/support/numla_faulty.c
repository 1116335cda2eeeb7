/* tests/support/numla_faulty.c — build/numla_faulty: build/numla with the engine's fault
 * injection switched on from the environment, for the multi-rank failure tests
 * (tests/mpi/engine_run.sh). build/numla itself has no such hooks.
 *   NUMLA_TEST_DIE_AT_STEP=S   the faulty rank SIGKILLs itself when step S starts
 *   NUMLA_TEST_FAIL_AT_STEP=S  the faulty rank's step S fails with an error
 *   NUMLA_TEST_DIE_RANK=R      the faulty rank (default 1) */
#include <stdio.h>
#include <stdlib.h>

#include "engine/parallel/engine_testing.h"

int numla_cli_main(int argc, char **argv);

/* A whole number >= 0 from the environment, or def when unset; an error exits. */
static long long faulty_env(const char *name, long long def)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return def;
    char *end;
    long long n = strtoll(v, &end, 10);
    if (*end || n < 0) {
        fprintf(stderr, "numla_faulty: %s=%s: expected a whole number >= 0\n", name, v);
        exit(2);
    }
    return n;
}

int main(int argc, char **argv)
{
    const numla_engine_faults f = {
        .rank = (int)faulty_env("NUMLA_TEST_DIE_RANK", 1),
        .die_at_step = faulty_env("NUMLA_TEST_DIE_AT_STEP", -1),
        .fail_at_step = faulty_env("NUMLA_TEST_FAIL_AT_STEP", -1),
    };
    numla_engine_testing_set_faults(&f);
    return numla_cli_main(argc, argv);
}
