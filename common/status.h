/* common/status.h — numla's error model.
 *
 * Every fallible function returns numla_status. The function that detects a problem calls
 * NUMLA_FAIL(code, "fmt", ...), which records a message (thread-local) and returns the code;
 * callers propagate with NUMLA_CHECK(call), which appends "at func (file:line)" to the
 * thread-local traceback. The top level prints numla_error_message() and numla_error_trace()
 * once, so a failure deep in a collective reads like a traceback, not a hang or a bare code.
 * Kernels, comm, launch and engine all use this; it owns no other state.
 */
#ifndef NUMLA_COMMON_STATUS_H
#define NUMLA_COMMON_STATUS_H

typedef enum numla_status {
    NUMLA_STATUS_OK = 0,
    NUMLA_STATUS_INVALID_ARG,   /* caller passed a bad value or shape */
    NUMLA_STATUS_OUT_OF_RANGE,  /* an index/slot/token outside its bounds */
    NUMLA_STATUS_NO_MEMORY,     /* allocation failed (host memory) */
    NUMLA_STATUS_KV_FULL,       /* KV block pool exhausted (schedulers preempt on this) */
    NUMLA_STATUS_IO,            /* a file or stream operation failed */
    NUMLA_STATUS_FORMAT,        /* malformed file or request contents */
    NUMLA_STATUS_UNSUPPORTED,   /* valid request the build/CPU/model cannot serve */
    NUMLA_STATUS_MPI,           /* an MPI call failed or a peer rank died */
    NUMLA_STATUS_INTERRUPTED,   /* stopped by a signal */
    NUMLA_STATUS_INTERNAL,      /* a bug: an invariant did not hold */
} numla_status;

/* Short name of a status ("invalid argument", ...). Never NULL. */
const char *numla_status_name(numla_status s);

/* Record an error message for this thread (replacing the previous one and clearing the trace),
 * log it at debug level, and return s. Use through NUMLA_FAIL. */
numla_status numla_error_set(numla_status s, const char *file, int line, const char *func,
                             const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Append one traceback frame. Use through NUMLA_CHECK. */
void numla_error_frame(const char *file, int line, const char *func);
/* The last recorded message of this thread ("" when none). */
const char *numla_error_message(void);
/* The traceback of this thread, one "  at func (file:line)" per line ("" when none). */
const char *numla_error_trace(void);
/* Forget the recorded error of this thread. */
void numla_error_clear(void);

#define NUMLA_FAIL(status, ...) \
    return numla_error_set((status), __FILE__, __LINE__, __func__, __VA_ARGS__)

#define NUMLA_CHECK(call)                                        \
    do {                                                         \
        numla_status numla_check_s_ = (call);                    \
        if (numla_check_s_ != NUMLA_STATUS_OK) {                 \
            numla_error_frame(__FILE__, __LINE__, __func__);     \
            return numla_check_s_;                               \
        }                                                        \
    } while (0)

/* Like NUMLA_CHECK but jumps to a cleanup label, storing the status in `var`. */
#define NUMLA_CHECK_GOTO(call, var, label)                       \
    do {                                                         \
        (var) = (call);                                          \
        if ((var) != NUMLA_STATUS_OK) {                          \
            numla_error_frame(__FILE__, __LINE__, __func__);     \
            goto label;                                          \
        }                                                        \
    } while (0)

#endif
