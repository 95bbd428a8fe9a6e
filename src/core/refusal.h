/*
 * Calls refused for their arguments keep their place. A call that this rank
 * refuses (a NULL buffer, a bad root, dtype, op, count, opts or req_p)
 * still takes the communicator's next sequence number, so that the other
 * ranks' calls never pair with this rank's next one, and its request tells
 * every other rank of the communicator, as a control message (ctrl.h),
 * which call was refused, by which rank, why, and how:
 *
 * Joining (only its buffers or req_p were refused): the refusing rank runs
 * the call anyway, on scratch buffers of the call's size.
 *
 * Learning (its shape was refused: dtype, op, root, count or opts): the
 * refusing rank learns the call's shape from the other ranks, each telling
 * it as it made it, and runs that on scratch buffers. Until it has built
 * the call (and taken its turns on the node team) it posts nothing else on
 * the communicator. When no rank knew the shape (every rank refused it), no
 * data moves.
 *
 * Either way the call returns CHORUS_ERR_INVALID_ARG there and the
 * communicator goes on. So that no rank takes scratch data for real, the
 * refusing rank moves data only once every other rank has replied (a hidden
 * message: an acknowledgement, or the shape), and a rank replies only once
 * the notice is noted: its call of that number, posted or not yet, then
 * returns CHORUS_ERR_INVALID_ARG when it is over. A rank whose call of that
 * number returned before the notice came (a broadcast receiver that does
 * not depend on the refusing rank, a reduce contributor whose send was
 * eager) keeps the CHORUS_OK it returned: it holds data that did not pass
 * through the refusing rank, or none.
 *
 * Stopping (a call that is no plain collective, chorus_fc_weight_grad; or no
 * memory for scratch buffers): this rank moves no data. A rank that receives
 * such a notice:
 *   - ignores it when it stopped the same call itself (every rank passed the
 *     same bad argument: no data was sent, the communicator goes on);
 *   - otherwise its own call of that number has sent or will send data that
 *     the refusing rank never receives, and no transport can take back a
 *     message once posted: it logs the refusing rank and its reason and fails
 *     the context with CHORUS_ERR_INVALID_ARG, at once when its call is
 *     posted or over, or when it posts the call if the notice came first.
 * The stopping rank's call returns only once it knows which: the ranks that
 * stopped the call exchange one byte in its hidden tag, and the transfer
 * with a rank that did not fails when that rank's context fails. A call
 * stopped on one rank and joined or learned on another fails the context
 * too: the rank that sees both fails first.
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

/* How this rank refused a call, if it did (the values travel in notices). */
typedef enum {
    CHORUS__REFUSED_NOT = 0,
    CHORUS__REFUSED_STOP,       /* it moves no data */
    CHORUS__REFUSED_JOIN,       /* it runs the call on scratch buffers */
    CHORUS__REFUSED_LEARN       /* it learns the call's shape, then runs it on scratch */
} chorus__refused_t;

/*
 * The task of call seq refused here (kind) for why (copied); its post sends
 * the notices. Stopping: over with CHORUS_ERR_INVALID_ARG once every other
 * rank stopped the call too (or the context fails first). Joining and
 * learning: over with CHORUS_OK once every other rank replied, so that the
 * call's own task may follow it.
 */
chorus_status_t chorus__refusal_task_create(chorus_comm_t comm, const coll_args_t *args,
                                            uint64_t seq, const char *why,
                                            chorus__refused_t kind, chorus__task_t **task_p);

/*
 * What a learning task (over) heard: 1 with coll, count, dtype, op, root and
 * dev_call of *shape and the compression *wire_p set from the first rank that
 * knew the call's shape (ranks that knew it differently are logged); 0 when no
 * rank did (every rank refused the call's shape).
 */
int chorus__refusal_learned(const chorus__task_t *task, coll_args_t *shape,
                            chorus_dtype_t *wire_p);

/*
 * Under comm->post_lock, once call seq is queued: the communicator's next
 * sequence number becomes seq + 1. refused: how this rank refused it.
 * shape and wire: the call as posted (NULL for one that is not a plain
 * collective), remembered for a while for learning ranks. Returns
 * CHORUS_ERR_INVALID_ARG when a peer's refusal of call seq cannot pair with
 * this rank's call (the context is then failed, with the peer's reason
 * logged).
 */
chorus_status_t chorus__refusal_advance(chorus_comm_t comm, uint64_t seq,
                                        chorus__refused_t refused, const coll_args_t *shape,
                                        chorus_dtype_t wire);

/*
 * Call seq is over here with status: CHORUS_ERR_INVALID_ARG instead of
 * CHORUS_OK when a peer joined it as refused. On the progress thread, or
 * with inline_call set in the thread that ran the call (which then is no
 * longer comm->inline_seq).
 */
chorus_status_t chorus__refusal_outcome(chorus_comm_t comm, uint64_t seq,
                                        chorus_status_t status, int inline_call);

/* The progress loop's control phase: send the shapes owed to learning ranks. */
void chorus__refusal_flush(chorus__ctx_t *ctx);

/* The control channel's handler of notices (progress thread). */
void chorus__refusal_receive(chorus__ctx_t *ctx, int peer, uint32_t space, const void *msg,
                             size_t len);

#endif
