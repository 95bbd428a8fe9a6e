/*
 * Logging. Each component (the folder a file lives in) has its own level,
 * read once per process from CHORUS_LOG_LEVEL ("warn" or
 * "warn,tcp=debug,bootstrap=trace"). The level is checked before any
 * formatting, so a disabled message costs one array lookup and a comparison.
 * Messages are lowercase and name the rank, peer and sizes they concern.
 *
 * A file's component comes from CHORUS_LOG_COMPONENT, defined per folder in
 * its Makefile.am (-DCHORUS_LOG_COMPONENT=CHORUS_LOG_COMP_TCP); a file may
 * override it with #undef/#define before including this header.
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

/*
 * The components that have a level of their own, in one list: the enum, the
 * names CHORUS_LOG_LEVEL uses and the help text all come from it.
 */
#define CHORUS_LOG_COMPONENTS(X)                  \
    X(CHORUS_LOG_COMP_UTIL, "util")               \
    X(CHORUS_LOG_COMP_REDUCE, "reduce")           \
    X(CHORUS_LOG_COMP_COLL, "coll")               \
    X(CHORUS_LOG_COMP_CORE, "core")               \
    X(CHORUS_LOG_COMP_BOOTSTRAP, "bootstrap")     \
    X(CHORUS_LOG_COMP_TCP, "tcp")                 \
    X(CHORUS_LOG_COMP_SHM, "shm")                 \
    X(CHORUS_LOG_COMP_UCX, "ucx")                 \
    X(CHORUS_LOG_COMP_TOPOLOGY, "topology")       \
    X(CHORUS_LOG_COMP_TUNING, "tuning")           \
    X(CHORUS_LOG_COMP_ENGINE, "engine")           \
    X(CHORUS_LOG_COMP_TOOLS, "tools")             \
    X(CHORUS_LOG_COMP_PMPI, "pmpi")

#define CHORUS_LOG_COMP_ENUM(id, name) id,
typedef enum {
    CHORUS_LOG_COMPONENTS(CHORUS_LOG_COMP_ENUM)
    CHORUS_LOG_COMP_COUNT
} chorus__log_comp_t;
#undef CHORUS_LOG_COMP_ENUM

/* Files built outside the library's folders (tests, perf) log as util. */
#ifndef CHORUS_LOG_COMPONENT
#define CHORUS_LOG_COMPONENT CHORUS_LOG_COMP_UTIL
#endif

/* Level of each component; the level of components not named in the variable. */
extern int chorus__log_levels[CHORUS_LOG_COMP_COUNT];
extern int chorus__log_level;

/* Reads CHORUS_LOG_LEVEL once per process; later calls do nothing. */
void chorus__log_init(void);
void chorus__log_emit(int comp, int level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* "tcp", or "?" for a value out of range. */
const char *chorus__log_comp_name(int comp);

/* Whether a message of this level would print in this file's component. */
#define chorus_log_enabled(level) ((int)(level) <= chorus__log_levels[CHORUS_LOG_COMPONENT])

#define chorus_log(level, ...)                                                          \
    do {                                                                                \
        if (chorus_log_enabled(level))                                                  \
            chorus__log_emit(CHORUS_LOG_COMPONENT, (level), __FILE__, __LINE__,         \
                             __VA_ARGS__);                                              \
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
