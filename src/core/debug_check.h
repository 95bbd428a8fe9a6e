/*
 * CHORUS_DEBUG_CHECK: before a collective moves any data, every rank
 * publishes a fingerprint of its call (collective, sequence number, count,
 * dtype, op, root) in a hidden ring allgather on tag space CHORUS_TAG_CHECK,
 * and compares all of them. Every rank sees the same fingerprints, so every
 * rank reaches the same verdict: on a mismatch each fails the call with
 * CHORUS_ERR_INVALID_ARG and names the first rank whose call differs from
 * rank 0's. The communicator stays usable, as nothing of the call was sent.
 */
#ifndef CHORUS_CORE_DEBUG_CHECK_H
#define CHORUS_CORE_DEBUG_CHECK_H

#include "core/comm.h"

/* Build the exchange for a call about to be posted (the calling thread). */
chorus_status_t chorus__check_create(chorus_comm_t comm, const coll_args_t *args,
                                     chorus__check_t **check_p);
/* Write this rank's fingerprint once the call has its sequence number. */
void chorus__check_seal(chorus__check_t *check, const coll_args_t *args, uint64_t seq);
/*
 * Drive the exchange (progress thread). Returns 0 while it runs, 1 once it is
 * over with *verdict_p CHORUS_OK or CHORUS_ERR_INVALID_ARG (a mismatch, logged
 * here), or a negative status when a transfer failed (req->sched.failed_peer
 * is set for the report).
 */
int chorus__check_progress(chorus_comm_t comm, chorus_request_t req,
                           chorus_status_t *verdict_p);
void chorus__check_destroy(chorus__check_t *check);

#endif
