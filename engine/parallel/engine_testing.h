/* engine/parallel/engine_testing.h — fault injection for the multi-rank tests (a rank that
 * dies or fails at a given step, tests/mpi/engine_run.sh). Only test programs call it
 * (tests/support/numla_faulty.c); build/numla never does, so it injects nothing. */
#ifndef NUMLA_ENGINE_ENGINE_TESTING_H
#define NUMLA_ENGINE_ENGINE_TESTING_H

#include <stdint.h>

typedef struct numla_engine_faults {
    int rank;              /* the rank that misbehaves */
    int64_t die_at_step;   /* >= 0: it SIGKILLs itself when this step starts */
    int64_t fail_at_step;  /* >= 0: its step fails with an error (the job aborts) */
} numla_engine_faults;

/* Engines created after this call inject these faults (process-wide). Not thread-safe; call
 * before numla_engine_create. Local. */
void numla_engine_testing_set_faults(const numla_engine_faults *f);

#endif
