/* common/clock.h — the monotonic clock every timing in numla reads (CLOCK_MONOTONIC: never
 * steps with the wall clock, so differences are durations). Async-signal-safe. */
#ifndef NUMLA_COMMON_CLOCK_H
#define NUMLA_COMMON_CLOCK_H

#include <stdint.h>

/* Seconds since an arbitrary fixed point (differences only). */
double numla_now_s(void);
/* The same clock in nanoseconds. */
int64_t numla_now_ns(void);

#endif
