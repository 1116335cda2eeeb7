/* common/log.c — stderr logger (see log.h). */
#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int numla_log_level_ = -1; /* -1: not read from the environment yet */
static int numla_log_rank_ = -1;

static int numla_log_current_level(void)
{
    if (numla_log_level_ < 0) {
        const char *e = getenv("NUMLA_LOG");
        int lvl = NUMLA_LOG_LEVEL_INFO;
        if (e) {
            if (!strcmp(e, "debug")) lvl = NUMLA_LOG_LEVEL_DEBUG;
            else if (!strcmp(e, "info")) lvl = NUMLA_LOG_LEVEL_INFO;
            else if (!strcmp(e, "warn")) lvl = NUMLA_LOG_LEVEL_WARN;
            else if (!strcmp(e, "error")) lvl = NUMLA_LOG_LEVEL_ERROR;
            else if (!strcmp(e, "quiet")) lvl = NUMLA_LOG_LEVEL_QUIET;
        }
        numla_log_level_ = lvl;
    }
    return numla_log_level_;
}

int numla_log_enabled(numla_log_level level) { return (int)level >= numla_log_current_level(); }
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
