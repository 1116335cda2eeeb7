/* common/status.c — thread-local error message and traceback (see status.h). */
#include "common/status.h"
#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

enum { NUMLA_ERROR_MSG_MAX = 1024, NUMLA_ERROR_TRACE_MAX = 2048 };

static _Thread_local char numla_error_msg_[NUMLA_ERROR_MSG_MAX];
static _Thread_local char numla_error_trace_[NUMLA_ERROR_TRACE_MAX];

const char *numla_status_name(numla_status s)
{
    switch (s) {
    case NUMLA_STATUS_OK: return "ok";
    case NUMLA_STATUS_INVALID_ARG: return "invalid argument";
    case NUMLA_STATUS_OUT_OF_RANGE: return "out of range";
    case NUMLA_STATUS_NO_MEMORY: return "out of memory";
    case NUMLA_STATUS_KV_FULL: return "KV cache full";
    case NUMLA_STATUS_IO: return "I/O error";
    case NUMLA_STATUS_FORMAT: return "format error";
    case NUMLA_STATUS_UNSUPPORTED: return "unsupported";
    case NUMLA_STATUS_MPI: return "MPI error";
    case NUMLA_STATUS_INTERRUPTED: return "interrupted";
    case NUMLA_STATUS_INTERNAL: return "internal error";
    }
    return "unknown status";
}

numla_status numla_error_set(numla_status s, const char *file, int line, const char *func,
                             const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(numla_error_msg_, sizeof numla_error_msg_, fmt, ap);
    va_end(ap);
    snprintf(numla_error_trace_, sizeof numla_error_trace_, "  at %s (%s:%d)\n", func, file, line);
    NUMLA_DEBUG("%s: %s [%s:%d]", numla_status_name(s), numla_error_msg_, file, line);
    return s;
}

void numla_error_frame(const char *file, int line, const char *func)
{
    size_t used = strlen(numla_error_trace_);
    if (used + 1 < sizeof numla_error_trace_)
        snprintf(numla_error_trace_ + used, sizeof numla_error_trace_ - used, "  at %s (%s:%d)\n",
                 func, file, line);
}

const char *numla_error_message(void) { return numla_error_msg_; }
const char *numla_error_trace(void) { return numla_error_trace_; }

void numla_error_clear(void)
{
    numla_error_msg_[0] = '\0';
    numla_error_trace_[0] = '\0';
}
