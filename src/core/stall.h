/*
 * Stall reports: when a collective waits longer than CHORUS_STALL_WARN, the
 * progress thread asks every peer how far it has got and warns which ranks
 * have not started the call. There is no coordinator: each rank keeps one
 * control receive posted per peer (tag CHORUS_TAG_CTRL) and answers queries
 * from its own progress thread, so a rank whose user thread is busy
 * elsewhere still answers. Everything here runs on the progress thread.
 */
#ifndef CHORUS_CORE_STALL_H
#define CHORUS_CORE_STALL_H

#include "core/comm.h"

/* Allocate the per-peer state; nothing is posted yet. */
chorus_status_t chorus__stall_create(int rank, int size, chorus__stall_t **stall_p);
/* Free it; the transport must no longer hold its buffers (after ctx_destroy). */
void chorus__stall_destroy(chorus__stall_t *stall);

/* Post the control receives: once, on the progress thread, before its loop. */
void chorus__stall_start(chorus_comm_t comm);
/*
 * One turn: handle arrived control messages, answer queries, send what was
 * owed, end a query round whose answers are in (or late) and print its
 * report. tl_moved: the transport completed something this turn. Returns 1
 * when anything happened.
 */
int chorus__stall_progress(chorus_comm_t comm, int tl_moved);
/* req has waited past req->stall_at: query the peers (unless a round is on). */
void chorus__stall_notice(chorus_comm_t comm, chorus_request_t req, double now);
/* Internal calls of the creation are over: the user's first call is number 0 again. */
void chorus__stall_restart(chorus_comm_t comm);
/* The call seq has ended on this rank: answers report it. */
void chorus__stall_completed(chorus_comm_t comm, uint64_t seq);
/*
 * The communicator is closing normally: tell the peers, so that the end of
 * their connection to this rank is not taken for a lost peer. Bounded.
 */
void chorus__stall_close(chorus_comm_t comm);

#endif
