/*
 * CHORUS_DEBUG_CHECK: before a collective moves any data, every rank
 * publishes a fingerprint of its call (collective, sequence number, count,
 * dtype, op, root, whether it runs on the devices) in a hidden ring allgather (tags CHORUS__TAG_HIDDEN,
 * ctrl.h), and compares all of them. Every rank sees the same fingerprints,
 * so every rank reaches the same verdict: on a mismatch each fails the call
 * with CHORUS_ERR_INVALID_ARG and names the first rank whose call differs
 * from rank 0's. The communicator stays usable, as nothing of the call was
 * sent. The check is a task: the request runs it before the call's own task
 * in a composite, which skips the call's task on a mismatch.
 */
#ifndef CHORUS_CORE_DEBUG_CHECK_H
#define CHORUS_CORE_DEBUG_CHECK_H

#include "core/comm.h"

/* The check of call seq with args on comm. */
chorus_status_t chorus__check_create(chorus_comm_t comm, const coll_args_t *args, uint64_t seq,
                                     chorus__task_t **task_p);

#endif
