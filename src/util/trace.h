/*
 * A timeline of what a process did, for CHORUS_TRACE: a fixed ring of
 * events (slices with a start and a duration, instants) that every layer
 * may add to, written as a Chrome trace-event JSON file that Perfetto and
 * chrome://tracing open. Memory is bounded: when the ring is full the
 * oldest events are overwritten and counted as dropped.
 *
 * Times are seconds on chorus__now()'s clock; the file holds microseconds.
 * A trace that is off is a NULL pointer: callers test it before formatting
 * anything, so tracing costs one branch when off.
 */
#ifndef CHORUS_UTIL_TRACE_H
#define CHORUS_UTIL_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"

typedef struct chorus__trace chorus__trace_t;

/* Fewest events a ring may hold. */
#define CHORUS__TRACE_MIN_EVENTS 16
/* Longest name and arguments of one event, in bytes; longer ones are cut. */
#define CHORUS__TRACE_NAME_MAX 48
#define CHORUS__TRACE_ARGS_MAX 224

/* Longest name of a clock domain. */
#define CHORUS__TRACE_DOMAIN_MAX 256

/*
 * A ring of capacity events written to "<prefix>.<rank>.json" (the folders
 * of prefix are created when missing). clock_domain names the processes
 * whose clocks are one (the node's identity): chorus-trace merge shifts
 * none of them against each other.
 */
chorus_status_t chorus__trace_create(const char *prefix, int rank, int size, size_t capacity,
                                     const char *clock_domain, chorus__trace_t **trace_p);
/* Write the file one last time and free the ring. NULL: nothing. */
void chorus__trace_destroy(chorus__trace_t *trace);

/*
 * The moment every rank passes together (the end of the first
 * communicator's creation), on chorus__now()'s clock; the first one stays.
 * chorus-trace merge aligns the ranks' clocks on it.
 */
void chorus__trace_sync(chorus__trace_t *trace, double at);

/*
 * A complete slice on track tid from start to end. args: the members of the
 * event's "args" object as JSON text ("\"seq\":3,\"alg\":\"ring\""), or NULL.
 */
void chorus__trace_slice(chorus__trace_t *trace, uint32_t tid, const char *cat,
                         const char *name, double start, double end, const char *args);
/* An instant event on track tid at time at; msg is any text (escaped here), or NULL. */
void chorus__trace_instant(chorus__trace_t *trace, uint32_t tid, const char *cat,
                           const char *name, double at, const char *msg);

/* Write the file now (the whole ring, oldest first), replacing the last one. */
chorus_status_t chorus__trace_flush(chorus__trace_t *trace);

/* text as the inside of a JSON string into out (cap bytes, cut to fit, terminated). */
void chorus__trace_escape(const char *text, char *out, size_t cap);

#endif
