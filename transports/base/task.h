/*
 * Tasks: every unit of work the core drives implements one small interface.
 * A schedule of an algorithm is a task (src/coll/schedule.c), a collective
 * that a collective transport runs on a team is a task (transports/<name>),
 * and a composite task runs sub-tasks and local computation in order
 * (task.c). A request holds one task.
 *
 * Life of a task: created by its kind's constructor; post() starts it;
 * progress() moves it as far as it can without blocking, until it returns
 * 1 (over: status says how the call ended) or a negative status (a fault
 * that fails the whole context: a lost peer, a broken node, a timeout).
 * A call can end with an error without a fault, for instance when the debug
 * check finds ranks that called differently: progress() returns 1 and
 * status is that error. finalize() frees the task; it must not be called
 * while a transport still holds one of its transfers (fail the transports
 * first).
 *
 * Threads: one thread at a time drives a task. Tasks flagged
 * CHORUS__TASK_INLINE do not need the transports' progress (they poll
 * shared memory), so the calling thread may drive them itself and hand
 * them over to the progress thread later.
 */
#ifndef CHORUS_TL_TASK_H
#define CHORUS_TL_TASK_H

#include <stdint.h>

#include "chorus.h"

typedef struct chorus__task chorus__task_t;

typedef struct {
    const char *name;
    /* Start: CHORUS_OK, or a status that fails the task before it did anything. */
    chorus_status_t (*post)(chorus__task_t *task);
    /* 1: over (see task->status); 0: still running; < 0: a fault. */
    int (*progress)(chorus__task_t *task);
    /*
     * Optional. Block the calling thread at most max_us until progress may
     * move, for tasks that poll memory rather than wait on file descriptors.
     * Returns 1 when it waited on something of its own, 0 when the task is
     * waiting only for the transports (the caller then sleeps on their fds).
     */
    int (*wait)(chorus__task_t *task, unsigned max_us);
    /*
     * Optional. Instead of posting: take the task's turn in every order it is
     * part of (a team's sequence of calls) without moving data, and be over
     * with status. Every rank of the call skips it alike.
     */
    void (*skip)(chorus__task_t *task, chorus_status_t status);
    /* Optional. A fault elsewhere: tell whoever waits on this rank here (local peers). */
    void (*fail)(chorus__task_t *task, chorus_status_t status);
    /* Free the task and everything it owns. */
    void (*finalize)(chorus__task_t *task);
    /*
     * Optional. For a task that chooses how it runs once posted: the name of
     * what served it (a static string), once over; NULL when it did not choose.
     */
    const char *(*served_by)(const chorus__task_t *task);
    /*
     * Optional. For a task that is over and succeeded: make it the task of
     * the same call once more (every argument alike) on sendbuf and recvbuf,
     * as its constructor would, turns included. 0: done; otherwise the task
     * is as it was, to be finalized.
     */
    int (*again)(chorus__task_t *task, const void *sendbuf, void *recvbuf);
} chorus__task_ops_t;

enum { CHORUS__TASK_NEW = 0, CHORUS__TASK_POSTED, CHORUS__TASK_DONE };

/* May be driven by any one thread at a time without the transports' progress. */
#define CHORUS__TASK_INLINE 1u
/*
 * Ordered on the caller's CUDA stream at the call: the stream's later work
 * waits until the call is over, so a blocking call need not wait for it.
 */
#define CHORUS__TASK_ENQUEUED 2u

/* The common head of every task; a kind's own struct starts with it. */
struct chorus__task {
    const chorus__task_ops_t *ops;
    uint8_t state;
    unsigned flags;
    chorus_status_t status;     /* how the call ended, once over */
    int failed_peer;            /* the peer of the transfer that failed, or -1 (for reports) */
    /* Shareable allocations (util/shared_mem.h) the call's buffers lie in, held until
       the task is finalized, so that they cannot be freed under it; NULL: none. */
    void *held[2];
};

/* Fill the head of a new task. */
void chorus__task_init(chorus__task_t *task, const chorus__task_ops_t *ops, unsigned flags);

/* post(); a failed post leaves the task over with that status. */
chorus_status_t chorus__task_post(chorus__task_t *task);
/* progress() of a posted task; 1 at once once over. */
int chorus__task_progress(chorus__task_t *task);
/* 1 when over. */
static inline int chorus__task_test(const chorus__task_t *task)
{
    return task->state == CHORUS__TASK_DONE;
}
/* wait() where the kind has one, else 0. */
int chorus__task_wait(chorus__task_t *task, unsigned max_us);
/* skip() of a task not yet posted: over with status, its turn taken. */
void chorus__task_skip(chorus__task_t *task, chorus_status_t status);
void chorus__task_fail(chorus__task_t *task, chorus_status_t status);
/* NULL is allowed. */
/* Hold the shareable allocations that sendbuf and recvbuf lie in (either may be NULL). */
void chorus__task_hold(chorus__task_t *task, const void *sendbuf, const void *recvbuf);
void chorus__task_finalize(chorus__task_t *task);
/* Give back what chorus__task_hold held, for a task kept over rather than finalized. */
void chorus__task_unhold(chorus__task_t *task);
/*
 * again() of a task kept over after it succeeded: a new task of the same
 * call on these buffers, its head as chorus__task_init left it. 0 when the
 * kind could, else the task must be finalized.
 */
int chorus__task_again(chorus__task_t *task, const void *sendbuf, void *recvbuf);
/* served_by() where the kind has one, else NULL. */
const char *chorus__task_served_by(const chorus__task_t *task);

/*
 * Composite tasks: steps run one after the other, each a sub-task (owned by
 * the composite from then on) or a function of local computation. A
 * function that returns an error ends the call with it: the sub-tasks left
 * are skipped, so that they keep their turns, and the composite is over
 * with that status. A sub-task that ends with an error does the same.
 */
typedef chorus_status_t (*chorus__task_fn)(void *arg);

chorus_status_t chorus__composite_create(chorus__task_t **task_p);
/* On failure the sub-task is finalized. */
chorus_status_t chorus__composite_add_task(chorus__task_t *composite, chorus__task_t *sub);
chorus_status_t chorus__composite_add_fn(chorus__task_t *composite, chorus__task_fn fn,
                                         void *arg);
/* The sub-task of step i, or NULL (a function step, or out of range). */
chorus__task_t *chorus__composite_sub(chorus__task_t *composite, int i);

#endif
