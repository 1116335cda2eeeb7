/* engine/cli/stop.c — stop requests by signal (stop.h). */
#include "engine/cli/stop.h"

#include <stddef.h>

#include "common/clock.h"

volatile sig_atomic_t numla_cli_stop_requests = 0;
volatile sig_atomic_t numla_cli_stop_signal = 0;
volatile sig_atomic_t numla_cli_stop_received = 0;
static volatile long numla_cli_stop_ms_ = 0;

static const int numla_cli_stop_signals_[4] = {SIGINT, SIGTERM, SIGUSR1, SIGUSR2};

static void numla_cli_stop_on_signal_(int sig)
{
    const long ms = (long)(numla_now_ns() / 1000000);
    if (numla_cli_stop_requests == 1 && ms - numla_cli_stop_ms_ < 1000)
        return;
    numla_cli_stop_ms_ = ms;
    numla_cli_stop_signal = sig == SIGUSR1 || sig == SIGUSR2 ? SIGTERM : sig;
    numla_cli_stop_received = sig;
    numla_cli_stop_requests++;
}

void numla_cli_stop_install(numla_cli_stop_saved *saved, int restart)
{
    struct sigaction sa = {0};
    sa.sa_handler = numla_cli_stop_on_signal_;
    sa.sa_flags = restart ? SA_RESTART : 0;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 4; i++)
        sigaction(numla_cli_stop_signals_[i], &sa, &saved->old[i]);
}

void numla_cli_stop_restore(const numla_cli_stop_saved *saved)
{
    for (int i = 0; i < 4; i++)
        sigaction(numla_cli_stop_signals_[i], &saved->old[i], NULL);
    numla_cli_stop_requests = 0;
    numla_cli_stop_signal = 0;
    numla_cli_stop_received = 0;
    numla_cli_stop_ms_ = 0;
}

void numla_cli_stop_ignore(void)
{
    for (int i = 0; i < 4; i++)
        signal(numla_cli_stop_signals_[i], SIG_IGN);
}
