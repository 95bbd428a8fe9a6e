/*
 * Calls refused for their arguments keep their place. A call that this rank
 * refuses (a NULL buffer, a bad root, dtype, op, count, opts or req_p)
 * still takes the communicator's next sequence number, so that the other
 * ranks' calls never pair with this rank's next one, and its request tells
 * every other rank of the communicator, as a control message (ctrl.h),
 * which call was refused, by which rank and why.
 *
 * A rank that receives such a notice:
 *   - ignores it when it refused the same call itself (every rank passed the
 *     same bad argument: no data was sent, the communicator goes on);
 *   - otherwise its own call of that number has sent or will send data that
 *     the refusing rank never receives, and no transport can take back a
 *     message once posted: it logs the refusing rank and its reason and fails
 *     the context with CHORUS_ERR_INVALID_ARG, at once when its call is
 *     posted or over, or when it posts the call if the notice came first.
 *
 * The refusing rank's call returns only once it knows which: the ranks that
 * refused the call exchange one byte in its hidden tag, and the transfer
 * with a rank that did not fails when that rank's context fails. So every
 * rank's call returns an error, and no later call of any rank pairs with
 * another call than its own.
 *
 * A NULL communicator is refused locally: there is no sequence to keep.
 */
#ifndef CHORUS_CORE_REFUSAL_H
#define CHORUS_CORE_REFUSAL_H

#include <stdint.h>

#include "core/comm.h"

/* Longest reason sent with a notice, including its terminating NUL. */
#define CHORUS__REFUSAL_WHY_MAX 256

chorus_status_t chorus__refusal_create(chorus_comm_t comm);
void chorus__refusal_destroy(chorus__refusal_t *refusal);

/*
 * The task of call seq refused here for why (copied): its post sends the
 * notices; it is over with CHORUS_ERR_INVALID_ARG once every other rank
 * refused the call too (or the context fails first).
 */
chorus_status_t chorus__refusal_task_create(chorus_comm_t comm, const coll_args_t *args,
                                            uint64_t seq, const char *why,
                                            chorus__task_t **task_p);

/*
 * Under comm->post_lock, once call seq is queued: the communicator's next
 * sequence number becomes seq + 1. refused: this rank refused it. Returns
 * CHORUS_ERR_INVALID_ARG when a peer had refused call seq and this rank did
 * not (the context is then failed, with the peer's reason logged).
 */
chorus_status_t chorus__refusal_advance(chorus_comm_t comm, uint64_t seq, int refused);

/* The control channel's handler of notices (progress thread). */
void chorus__refusal_receive(chorus__ctx_t *ctx, int peer, uint32_t space, const void *msg,
                             size_t len);

#endif
