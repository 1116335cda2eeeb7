/* common/log.h — leveled logging to stderr. Level info until numla_log_set_level (the settings
 * set it from NUMLA_LOG=debug|info|warn|error|quiet, engine/cli/settings.h). Each line is
 * prefixed "numla[<rank>] <level>:" once a rank is set. */
#ifndef NUMLA_COMMON_LOG_H
#define NUMLA_COMMON_LOG_H

typedef enum numla_log_level {
    NUMLA_LOG_LEVEL_DEBUG = 0,
    NUMLA_LOG_LEVEL_INFO,
    NUMLA_LOG_LEVEL_WARN,
    NUMLA_LOG_LEVEL_ERROR,
    NUMLA_LOG_LEVEL_QUIET,
} numla_log_level;

void numla_log(numla_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int numla_log_enabled(numla_log_level level);
/* Set the rank shown in the prefix (-1: none). */
void numla_log_set_rank(int rank);
void numla_log_set_level(numla_log_level level);

#define NUMLA_DEBUG(...) numla_log(NUMLA_LOG_LEVEL_DEBUG, __VA_ARGS__)
#define NUMLA_INFO(...) numla_log(NUMLA_LOG_LEVEL_INFO, __VA_ARGS__)
#define NUMLA_WARN(...) numla_log(NUMLA_LOG_LEVEL_WARN, __VA_ARGS__)
#define NUMLA_ERROR(...) numla_log(NUMLA_LOG_LEVEL_ERROR, __VA_ARGS__)

#endif
