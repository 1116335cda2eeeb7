/* common/log.c — stderr logger (see log.h). */
#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>

static int numla_log_level_ = NUMLA_LOG_LEVEL_INFO; /* set from NUMLA_LOG by the settings */
static int numla_log_rank_ = -1;

int numla_log_enabled(numla_log_level level) { return (int)level >= numla_log_level_; }
void numla_log_set_rank(int rank) { numla_log_rank_ = rank; }
void numla_log_set_level(numla_log_level level) { numla_log_level_ = (int)level; }

void numla_log(numla_log_level level, const char *fmt, ...)
{
    static const char *names[] = {"debug", "info", "warn", "error", "quiet"};
    if (!numla_log_enabled(level))
        return;
    char buf[2048];
    int n;
    if (numla_log_rank_ >= 0)
        n = snprintf(buf, sizeof buf, "numla[%d] %s: ", numla_log_rank_, names[level]);
    else
        n = snprintf(buf, sizeof buf, "numla %s: ", names[level]);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", buf); /* one call: lines from ranks/threads do not interleave */
}
