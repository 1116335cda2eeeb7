/* engine/cli/stop.h — how a serving process (numla run, numla serve) is asked to stop.
 *
 * Rank 0 counts stop requests: SIGINT, SIGTERM, and SIGUSR1/SIGUSR2, which are what mpirun
 * forwards to the ranks (launch/numla-launch turns its own SIGTERM into SIGUSR1 for mpirun), so
 * they count as SIGTERM. One stop often arrives twice at once (Slurm signals every task and
 * srun passes its own copy on): a repeat within a second is the same request. The serving loop
 * reads the count (numla_serve_options.stop_requests): 1 drains, 2 stops now. The other ranks
 * ignore all four: rank 0 decides when to stop and releases them.
 * restart: install with SA_RESTART (system calls resume after the handler); 0: a blocking read
 * returns EINTR, so a batch job waiting on a slow pipe sees the request. Local (per process).
 */
#ifndef NUMLA_ENGINE_CLI_STOP_H
#define NUMLA_ENGINE_CLI_STOP_H

#include <signal.h>

/* Stop requests so far, and the signal of the last one (SIGTERM for SIGUSR1/SIGUSR2). */
extern volatile sig_atomic_t numla_cli_stop_requests;
extern volatile sig_atomic_t numla_cli_stop_signal;
/* The signal of the last stop request as it arrived (SIGUSR1 stays SIGUSR1). */
extern volatile sig_atomic_t numla_cli_stop_received;

typedef struct numla_cli_stop_saved {
    struct sigaction old[4]; /* SIGINT, SIGTERM, SIGUSR1, SIGUSR2 as they were */
} numla_cli_stop_saved;

/* Rank 0: count stop requests from now on; the previous handlers go to *saved. */
void numla_cli_stop_install(numla_cli_stop_saved *saved, int restart);
/* Put the previous handlers back and forget the requests counted. */
void numla_cli_stop_restore(const numla_cli_stop_saved *saved);
/* Ranks != 0: ignore the four signals. */
void numla_cli_stop_ignore(void);

#endif
