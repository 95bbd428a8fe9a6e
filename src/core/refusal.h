/*
 * Calls refused for their arguments keep their place. A call that this rank
 * refuses (a NULL buffer, a bad root, dtype, op, count, opts or req_p)
 * still takes the communicator's next sequence number, so that the other
 * ranks' calls never pair with this rank's next one, and its request tells
 * every other rank of the communicator, as a control message (ctrl.h),
 * which call was refused, by which rank and why. There are two kinds.
 *
 * Joining refusals: the call's shape (dtype, op, root, count, opts) is
 * valid and only its buffers or req_p are not. The refusing rank runs the
 * call anyway, on scratch buffers of the call's size, and its call returns
 * CHORUS_ERR_INVALID_ARG; the communicator goes on. So that no rank takes
 * the scratch data for real, it first waits until every other rank has
 * acknowledged the notice (a hidden one-byte message), and a rank
 * acknowledges only once the notice is noted: its call of that number,
 * posted or not yet, then returns CHORUS_ERR_INVALID_ARG when it is over.
 * A rank whose call of that number returned before the notice came (a
 * broadcast receiver that does not depend on the refusing rank, a reduce
 * contributor whose send was eager) keeps the CHORUS_OK it returned: it
 * holds data that did not pass through the refusing rank, or none.
 *
 * Stopping refusals (the shape is invalid, or scratch memory is short):
 * this rank moves no data. A rank that receives such a notice:
 *   - ignores it when it stopped the same call itself (every rank passed the
 *     same bad argument: no data was sent, the communicator goes on);
 *   - otherwise its own call of that number has sent or will send data that
 *     the refusing rank never receives, and no transport can take back a
 *     message once posted: it logs the refusing rank and its reason and fails
 *     the context with CHORUS_ERR_INVALID_ARG, at once when its call is
 *     posted or over, or when it posts the call if the notice came first.
 * The stopping rank's call returns only once it knows which: the ranks that
 * stopped the call exchange one byte in its hidden tag, and the transfer
 * with a rank that did not fails when that rank's context fails. So every
 * rank's call returns an error, and no later call of any rank pairs with
 * another call than its own.
 *
 * A call stopped on one rank and joined on another fails the context: the
 * joining rank's acknowledgements never all come, the stopping rank's
 * exchange never completes, and the rank that sees both kinds fails first.
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

/* How this rank refused a call, if it did. */
typedef enum {
    CHORUS__REFUSED_NOT = 0,
    CHORUS__REFUSED_STOP,       /* it moves no data */
    CHORUS__REFUSED_JOIN        /* it runs the call on scratch buffers */
} chorus__refused_t;

/*
 * The task of call seq refused here for why (copied); its post sends the
 * notices. Stopping (scratch NULL): over with CHORUS_ERR_INVALID_ARG once
 * every other rank stopped the call too (or the context fails first).
 * Joining: scratch holds the buffers the call runs on here, which the task
 * takes over (in every case) and frees; over with CHORUS_OK once every other
 * rank acknowledged, so that the call's own task may follow it.
 */
chorus_status_t chorus__refusal_task_create(chorus_comm_t comm, const coll_args_t *args,
                                            uint64_t seq, const char *why, void *scratch[2],
                                            chorus__task_t **task_p);

/*
 * Under comm->post_lock, once call seq is queued: the communicator's next
 * sequence number becomes seq + 1. refused: how this rank refused it.
 * Returns CHORUS_ERR_INVALID_ARG when a peer's refusal of call seq cannot
 * pair with this rank's call (the context is then failed, with the peer's
 * reason logged).
 */
chorus_status_t chorus__refusal_advance(chorus_comm_t comm, uint64_t seq,
                                        chorus__refused_t refused);

/*
 * Call seq is over here with status: CHORUS_ERR_INVALID_ARG instead of
 * CHORUS_OK when a peer joined it as refused. On the progress thread, or
 * with inline_call set in the thread that ran the call (which then is no
 * longer comm->inline_seq).
 */
chorus_status_t chorus__refusal_outcome(chorus_comm_t comm, uint64_t seq,
                                        chorus_status_t status, int inline_call);

/* The control channel's handler of notices (progress thread). */
void chorus__refusal_receive(chorus__ctx_t *ctx, int peer, uint32_t space, const void *msg,
                             size_t len);

#endif
