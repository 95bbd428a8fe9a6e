/*
 * Logging. The level is process-wide (CHORUS_LOG_LEVEL, read once) and is
 * checked before any formatting, so disabled messages cost one comparison.
 * Messages are lowercase and name the rank, peer and sizes they concern.
 */
#ifndef CHORUS_UTIL_LOG_H
#define CHORUS_UTIL_LOG_H

#include <stdarg.h>

typedef enum {
    CHORUS_LOG_ERROR = 0,
    CHORUS_LOG_WARN,
    CHORUS_LOG_INFO,
    CHORUS_LOG_DEBUG,
    CHORUS_LOG_TRACE
} chorus__log_level_t;

extern int chorus__log_level;

/* Reads CHORUS_LOG_LEVEL once per process; later calls do nothing. */
void chorus__log_init(void);
void chorus__log_emit(int level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define chorus_log(level, ...)                                              \
    do {                                                                    \
        if ((int)(level) <= chorus__log_level)                              \
            chorus__log_emit((level), __FILE__, __LINE__, __VA_ARGS__);     \
    } while (0)

#define chorus_error(...) chorus_log(CHORUS_LOG_ERROR, __VA_ARGS__)
#define chorus_warn(...)  chorus_log(CHORUS_LOG_WARN, __VA_ARGS__)
#define chorus_info(...)  chorus_log(CHORUS_LOG_INFO, __VA_ARGS__)
#define chorus_debug(...) chorus_log(CHORUS_LOG_DEBUG, __VA_ARGS__)
#define chorus_trace(...) chorus_log(CHORUS_LOG_TRACE, __VA_ARGS__)

struct chorus__config_table;
/* The logging variables, for chorus-info and chorus(7). */
extern const struct chorus__config_table chorus__log_config_table;

#endif
