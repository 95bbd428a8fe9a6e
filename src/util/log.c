/* Logging: one level per process, read once from CHORUS_LOG_LEVEL. */
#include "util/log.h"

#include <stddef.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "util/config.h"

int chorus__log_level = CHORUS_LOG_WARN;

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

typedef struct {
    chorus__config_str_t level;
} log_config_t;

static const chorus__config_var_t log_vars[] = {
    {"CHORUS_LOG_LEVEL", "warn",
     "messages printed to stderr: error, warn, info, debug or trace (each includes the ones "
     "before it)",
     chorus__config_parse_string, offsetof(log_config_t, level)},
};

const chorus__config_table_t chorus__log_config_table = {
    "log", "logging", log_vars, sizeof(log_vars) / sizeof(log_vars[0]),
};

static void log_read_level(void)
{
    log_config_t cfg;
    const char *text;

    if (chorus__config_read(&chorus__log_config_table, &cfg) != CHORUS_OK)
        return;
    text = cfg.level.s;
    for (int i = 0; i <= CHORUS_LOG_TRACE; i++) {
        if (strcasecmp(text, level_names[i]) == 0) {
            chorus__log_level = i;
            return;
        }
    }
    fprintf(stderr, "chorus: warn: CHORUS_LOG_LEVEL='%s' is not one of "
            "error|warn|info|debug|trace; using warn\n", text);
}

void chorus__log_init(void)
{
    pthread_once(&log_once, log_read_level);
}

void chorus__log_emit(int level, const char *file, int line, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    const char *base = strrchr(file, '/');

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (level < 0 || level > CHORUS_LOG_TRACE)
        level = CHORUS_LOG_ERROR;
    /* One write per message so lines of concurrent ranks do not interleave. */
    if (chorus__log_level >= CHORUS_LOG_DEBUG)
        fprintf(stderr, "chorus[%d]: %s: %s (%s:%d)\n", (int)getpid(), level_names[level],
                msg, base ? base + 1 : file, line);
    else
        fprintf(stderr, "chorus[%d]: %s: %s\n", (int)getpid(), level_names[level], msg);
}
