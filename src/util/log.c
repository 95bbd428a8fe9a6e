/*
 * Logging: one level per component, read once per process from
 * CHORUS_LOG_LEVEL, a level for every component optionally followed by
 * component=level items ("warn,tcp=debug,bootstrap=trace").
 */
#include "util/log.h"

#include <stddef.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "util/config.h"

#define LOG_LEVEL_DEFAULT CHORUS_LOG_WARN

#define LOG_COMP_DEFAULT(id, name) [id] = LOG_LEVEL_DEFAULT,
#define LOG_COMP_NAME(id, name) [id] = name,
#define LOG_COMP_LIST(id, name) " " name

/* Messages logged before chorus__log_init use the default level. */
int chorus__log_levels[CHORUS_LOG_COMP_COUNT] = {CHORUS_LOG_COMPONENTS(LOG_COMP_DEFAULT)};
int chorus__log_level = LOG_LEVEL_DEFAULT;

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};
static const char *const comp_names[CHORUS_LOG_COMP_COUNT] = {
    CHORUS_LOG_COMPONENTS(LOG_COMP_NAME)
};
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

typedef struct {
    chorus__config_str_t level;
} log_config_t;

static const chorus__config_var_t log_vars[] = {
    {"CHORUS_LOG_LEVEL", "warn",
     "messages printed to stderr: a level for every component, error, warn, info, debug or "
     "trace (each includes the ones before it), optionally followed by component=level "
     "items that override it, as in 'warn,tcp=debug,bootstrap=trace'; components:"
     CHORUS_LOG_COMPONENTS(LOG_COMP_LIST) ". Each message names its component; at debug and "
     "trace it also names its source line",
     chorus__config_parse_string, offsetof(log_config_t, level)},
};

const chorus__config_table_t chorus__log_config_table = {
    "log", "logging", log_vars, sizeof(log_vars) / sizeof(log_vars[0]),
};

const char *chorus__log_comp_name(int comp)
{
    return comp >= 0 && comp < CHORUS_LOG_COMP_COUNT ? comp_names[comp] : "?";
}

static int log_find(const char *const *names, int n, const char *text)
{
    for (int i = 0; i < n; i++)
        if (strcasecmp(text, names[i]) == 0)
            return i;
    return -1;
}

/* Logging is not set up yet: complaints about its variable go straight to stderr. */
static void log_bad_item(const char *item, const char *why)
{
    fprintf(stderr, "chorus[%d]: warn: util: CHORUS_LOG_LEVEL item '%s' ignored: %s\n",
            (int)getpid(), item, why);
}

static char *log_trim(char *s)
{
    char *end;

    while (*s == ' ' || *s == '\t')
        s++;
    end = s + strlen(s);
    while (end > s && (end[-1] == ' ' || end[-1] == '\t'))
        *--end = '\0';
    return s;
}

/* One "level" or "component=level" item; comp_p is -1 for a bare level. Returns 0 or -1. */
static int log_parse_item(char *item, int *comp_p, int *level_p)
{
    char *eq = strchr(item, '=');
    const char *level_text = item;

    *comp_p = -1;
    if (eq != NULL) {
        *eq = '\0';
        *comp_p = log_find(comp_names, CHORUS_LOG_COMP_COUNT, log_trim(item));
        *eq = '=';
        if (*comp_p < 0) {
            log_bad_item(item, "unknown component (one of:"
                         CHORUS_LOG_COMPONENTS(LOG_COMP_LIST) ")");
            return -1;
        }
        level_text = log_trim(eq + 1);
    }
    *level_p = log_find(level_names, CHORUS_LOG_TRACE + 1, level_text);
    if (*level_p < 0) {
        log_bad_item(item, "unknown level (error, warn, info, debug, trace)");
        return -1;
    }
    return 0;
}

/*
 * Bare levels set every component and component items override them,
 * whatever their order in the list.
 */
static void log_parse(char *text)
{
    int comp_level[CHORUS_LOG_COMP_COUNT];
    int base = LOG_LEVEL_DEFAULT;
    char *save = NULL;

    for (int c = 0; c < CHORUS_LOG_COMP_COUNT; c++)
        comp_level[c] = -1;
    for (char *tok = strtok_r(text, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        char *item = log_trim(tok);
        int comp, level;

        if (*item == '\0' || log_parse_item(item, &comp, &level) != 0)
            continue;
        if (comp < 0)
            base = level;
        else
            comp_level[comp] = level;
    }
    chorus__log_level = base;
    for (int c = 0; c < CHORUS_LOG_COMP_COUNT; c++)
        chorus__log_levels[c] = comp_level[c] >= 0 ? comp_level[c] : base;
}

static void log_read_level(void)
{
    log_config_t cfg;

    if (chorus__config_read(&chorus__log_config_table, &cfg) != CHORUS_OK)
        return;
    log_parse(cfg.level.s);
}

void chorus__log_init(void)
{
    pthread_once(&log_once, log_read_level);
}

void chorus__log_emit(int comp, int level, const char *file, int line, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    const char *base = strrchr(file, '/');
    const char *comp_name = chorus__log_comp_name(comp);

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (level < 0 || level > CHORUS_LOG_TRACE)
        level = CHORUS_LOG_ERROR;
    /* One write per message so lines of concurrent ranks do not interleave. */
    if (comp >= 0 && comp < CHORUS_LOG_COMP_COUNT && chorus__log_levels[comp] >= CHORUS_LOG_DEBUG)
        fprintf(stderr, "chorus[%d]: %s: %s: %s (%s:%d)\n", (int)getpid(), level_names[level],
                comp_name, msg, base ? base + 1 : file, line);
    else
        fprintf(stderr, "chorus[%d]: %s: %s: %s\n", (int)getpid(), level_names[level],
                comp_name, msg);
}
