/*
 * The trace ring and its file (see trace.h). Events are fixed-size records
 * so that the ring never allocates after creation; the file is rewritten
 * whole on every flush (under a temporary name, then renamed), so a reader
 * never sees half of one and a later flush supersedes an earlier one.
 */
#include "util/trace.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/log.h"

typedef struct {
    char ph;                        /* 'X' slice, 'i' instant */
    uint32_t tid;
    const char *cat;                /* a string literal of the caller */
    double ts;                      /* seconds */
    double dur;
    char name[CHORUS__TRACE_NAME_MAX];
    char args[CHORUS__TRACE_ARGS_MAX];
} trace_event_t;

struct chorus__trace {
    pthread_mutex_t lock;
    char *path;                     /* <prefix>.<rank>.json */
    int rank;
    int size;
    char domain[CHORUS__TRACE_DOMAIN_MAX];  /* JSON-escaped */
    double sync;                    /* 0: not yet */
    size_t capacity;
    uint64_t recorded;              /* every event ever added; the ring holds the last ones */
    trace_event_t *events;          /* [capacity] */
};

/* Create the folders above path (mkdir -p of its directory part). */
static chorus_status_t trace_make_dirs(const char *path)
{
    char *dir = strdup(path);

    if (dir == NULL)
        return CHORUS_ERR_NO_MEMORY;
    for (char *p = dir + 1; *p != '\0'; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
            chorus_error("CHORUS_TRACE: cannot create folder %s: %m", dir);
            free(dir);
            return CHORUS_ERR_SYSTEM;
        }
        *p = '/';
    }
    free(dir);
    return CHORUS_OK;
}

chorus_status_t chorus__trace_create(const char *prefix, int rank, int size, size_t capacity,
                                     const char *clock_domain, chorus__trace_t **trace_p)
{
    chorus__trace_t *t;
    chorus_status_t status;
    int len;

    if (prefix == NULL || prefix[0] == '\0') {
        chorus_error("CHORUS_TRACE: the file prefix is empty");
        return CHORUS_ERR_INVALID_ARG;
    }
    if (capacity < CHORUS__TRACE_MIN_EVENTS || capacity > SIZE_MAX / sizeof(trace_event_t)) {
        chorus_error("invalid value %zu for CHORUS_TRACE_EVENTS: must be at least %d and "
                     "fit in memory", capacity, CHORUS__TRACE_MIN_EVENTS);
        return CHORUS_ERR_INVALID_ARG;
    }
    t = calloc(1, sizeof(*t));
    if (t == NULL)
        return CHORUS_ERR_NO_MEMORY;
    t->rank = rank;
    t->size = size;
    t->capacity = capacity;
    chorus__trace_escape(clock_domain != NULL ? clock_domain : "", t->domain, sizeof(t->domain));
    len = snprintf(NULL, 0, "%s.%d.json", prefix, rank);
    t->path = malloc((size_t)len + 1);
    t->events = calloc(capacity, sizeof(*t->events));
    if (t->path == NULL || t->events == NULL) {
        status = CHORUS_ERR_NO_MEMORY;
        goto err_free;
    }
    snprintf(t->path, (size_t)len + 1, "%s.%d.json", prefix, rank);
    status = trace_make_dirs(t->path);
    if (status != CHORUS_OK)
        goto err_free;
    pthread_mutex_init(&t->lock, NULL);
    *trace_p = t;
    return CHORUS_OK;

err_free:
    free(t->events);
    free(t->path);
    free(t);
    return status;
}

void chorus__trace_destroy(chorus__trace_t *trace)
{
    if (trace == NULL)
        return;
    chorus__trace_flush(trace);
    pthread_mutex_destroy(&trace->lock);
    free(trace->events);
    free(trace->path);
    free(trace);
}

void chorus__trace_sync(chorus__trace_t *trace, double at)
{
    pthread_mutex_lock(&trace->lock);
    if (trace->sync == 0)
        trace->sync = at;
    pthread_mutex_unlock(&trace->lock);
}

/* The next slot of the ring, overwriting the oldest event when full (lock held). */
static trace_event_t *trace_next_locked(chorus__trace_t *trace)
{
    return &trace->events[trace->recorded++ % trace->capacity];
}

static void trace_copy(char *dst, size_t cap, const char *src)
{
    size_t n = src == NULL ? 0 : strnlen(src, cap - 1);

    memcpy(dst, src == NULL ? "" : src, n);
    dst[n] = '\0';
}

static void trace_add(chorus__trace_t *trace, char ph, uint32_t tid, const char *cat,
                      const char *name, double start, double end, const char *args)
{
    trace_event_t *e;

    pthread_mutex_lock(&trace->lock);
    e = trace_next_locked(trace);
    e->ph = ph;
    e->tid = tid;
    e->cat = cat;
    e->ts = start;
    e->dur = end > start ? end - start : 0;
    trace_copy(e->name, sizeof(e->name), name);
    /* Arguments cut in the middle would not be JSON: keep them whole or not at all. */
    if (args != NULL && strlen(args) < sizeof(e->args))
        trace_copy(e->args, sizeof(e->args), args);
    else
        e->args[0] = '\0';
    pthread_mutex_unlock(&trace->lock);
}

void chorus__trace_slice(chorus__trace_t *trace, uint32_t tid, const char *cat,
                         const char *name, double start, double end, const char *args)
{
    trace_add(trace, 'X', tid, cat, name, start, end, args);
}

void chorus__trace_escape(const char *text, char *out, size_t cap)
{
    size_t n = 0;

    for (const unsigned char *p = (const unsigned char *)text; *p != '\0'; p++) {
        char buf[8];
        size_t len;

        if (*p == '"' || *p == '\\')
            len = (size_t)snprintf(buf, sizeof(buf), "\\%c", *p);
        else if (*p < 0x20)
            len = (size_t)snprintf(buf, sizeof(buf), "\\u%04x", *p);
        else
            len = (size_t)snprintf(buf, sizeof(buf), "%c", *p);
        if (n + len + 1 > cap)
            break;
        memcpy(out + n, buf, len);
        n += len;
    }
    out[n] = '\0';
}

void chorus__trace_instant(chorus__trace_t *trace, uint32_t tid, const char *cat,
                           const char *name, double at, const char *msg)
{
    char args[CHORUS__TRACE_ARGS_MAX];
    char text[CHORUS__TRACE_ARGS_MAX - 16];

    args[0] = '\0';
    if (msg != NULL) {
        chorus__trace_escape(msg, text, sizeof(text));
        snprintf(args, sizeof(args), "\"msg\":\"%s\"", text);
    }
    trace_add(trace, 'i', tid, cat, name, at, at, args);
}

static void trace_write_event(FILE *f, const chorus__trace_t *trace, const trace_event_t *e)
{
    char name[2 * CHORUS__TRACE_NAME_MAX];

    chorus__trace_escape(e->name, name, sizeof(name));
    fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"%c\",\"pid\":%d,\"tid\":%u,"
            "\"ts\":%.3f", name, e->cat, e->ph, trace->rank, e->tid, e->ts * 1e6);
    if (e->ph == 'X')
        fprintf(f, ",\"dur\":%.3f", e->dur * 1e6);
    else
        fprintf(f, ",\"s\":\"t\"");
    fprintf(f, ",\"args\":{%s}}", e->args);
}

/* The file's contents (lock held). */
static void trace_write_locked(FILE *f, const chorus__trace_t *trace)
{
    uint64_t kept = trace->recorded < trace->capacity ? trace->recorded : trace->capacity;
    uint64_t first = trace->recorded - kept;

    fprintf(f, "{\"traceEvents\":[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,"
            "\"tid\":0,\"args\":{\"name\":\"rank %d\"}}", trace->rank, trace->rank);
    for (uint64_t i = first; i < trace->recorded; i++)
        trace_write_event(f, trace, &trace->events[i % trace->capacity]);
    fprintf(f, "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"format\":\"chorus-trace\","
            "\"version\":1,\"rank\":%d,\"size\":%d,\"clock_sync_us\":%.3f,"
            "\"clock_domain\":\"%s\",\"capacity\":%zu,\"recorded\":%llu,\"dropped\":%llu}}\n",
            trace->rank, trace->size, trace->sync * 1e6, trace->domain, trace->capacity, (unsigned long long)trace->recorded,
            (unsigned long long)first);
}

chorus_status_t chorus__trace_flush(chorus__trace_t *trace)
{
    size_t len = strlen(trace->path) + 8;
    char *tmp = malloc(len);
    chorus_status_t status = CHORUS_OK;
    FILE *f;

    if (tmp == NULL)
        return CHORUS_ERR_NO_MEMORY;
    snprintf(tmp, len, "%s.tmp", trace->path);
    pthread_mutex_lock(&trace->lock);
    f = fopen(tmp, "w");
    if (f == NULL) {
        chorus_error("CHORUS_TRACE: cannot write %s: %m", tmp);
        status = CHORUS_ERR_SYSTEM;
    } else {
        trace_write_locked(f, trace);
        if (ferror(f) | (fclose(f) != 0)) {
            chorus_error("CHORUS_TRACE: writing %s failed: %m", tmp);
            status = CHORUS_ERR_SYSTEM;
            unlink(tmp);
        } else if (rename(tmp, trace->path) != 0) {
            chorus_error("CHORUS_TRACE: cannot rename %s to %s: %m", tmp, trace->path);
            status = CHORUS_ERR_SYSTEM;
            unlink(tmp);
        }
    }
    pthread_mutex_unlock(&trace->lock);
    free(tmp);
    return status;
}
