/*
 * Stall reports: when a collective waits longer than CHORUS_STALL_WARN, the
 * progress thread asks every other rank of its communicator how far it has
 * got and warns which ranks have not started the call. There is no
 * coordinator: queries and answers are control messages (ctrl.h) in the
 * communicator's space, and each rank answers from its own progress
 * thread, so a rank whose user thread is busy elsewhere still answers.
 * Everything here runs on the progress thread.
 */
#ifndef CHORUS_CORE_STALL_H
#define CHORUS_CORE_STALL_H

#include "core/comm.h"

/* The communicator's state (nothing is sent until a call stalls). */
chorus_status_t chorus__stall_create(chorus_comm_t comm);
void chorus__stall_destroy(chorus__stall_t *stall);

/* req has waited past req->stall_at: ask its communicator's ranks (unless a round is on). */
void chorus__stall_notice(chorus_request_t req, double now);
/* The call seq of comm has ended on this rank: answers report it. */
void chorus__stall_completed(chorus_comm_t comm, uint64_t seq);
/* End every round whose answers are in or late, and print its report. */
void chorus__stall_check(chorus__ctx_t *ctx, double now);
/* The control channel's handler of stall messages. */
void chorus__stall_receive(chorus__ctx_t *ctx, int peer, uint32_t space, const void *msg,
                           size_t len);

#endif
