/*
 * What the core adds to the trace (CHORUS_TRACE, util/trace.h): a slice per
 * call, instants for faults, stall reports and the notes of the layers
 * above (the autotuner's moves), the clock point of the first
 * communicator's creation. Each track (tid) is a communicator's space, so
 * the calls of one communicator follow each other on one line.
 */
#ifndef CHORUS_CORE_CORE_TRACE_H
#define CHORUS_CORE_CORE_TRACE_H

#include "core/comm.h"
#include "util/trace.h"

/* The context's trace when CHORUS_TRACE names one (ctx->trace stays NULL otherwise). */
chorus_status_t chorus__trace_open(chorus__ctx_t *ctx);

/* comm is open: the name of its transports, and for the job's first one the clock point. */
void chorus__trace_comm_ready(chorus_comm_t comm);

/* Let task's schedule record its waits, and name who serves the call: the network
 * transport, the node team's collective transport, or both ("NET+TEAM"). */
const char *chorus__trace_task(chorus_comm_t comm, chorus__task_t *task, const coll_alg_t *alg,
                               int setup);

/* A call (named call) that ran from start until now with status: one slice with its arguments. */
void chorus__trace_call(chorus_comm_t comm, const char *call, const coll_args_t *args,
                        const char *alg, const char *via, uint64_t seq, int setup,
                        double start, chorus_status_t status);

/* A fault or error of ctx (what: "fault", "timeout", "abort"): an instant, then the file. */
void chorus__trace_fault(chorus__ctx_t *ctx, uint32_t tid, const char *what, const char *msg);

/* An instant on comm's track, of category cat, with text as its message (trace on). */
void chorus__trace_note(chorus_comm_t comm, const char *cat, const char *name,
                        const char *text);

/* A stall report's text, as an instant on comm's track. */
void chorus__trace_stall(chorus_comm_t comm, const char *text);

#endif
