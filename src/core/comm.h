/*
 * Communicators and their requests. A communicator is a view over a
 * context (context.h): an ordered group of the context's ranks, its own
 * space in the connections, its own sequence of calls, its layout, its
 * node's team and its selection table. User threads post requests to the
 * context's queue and wait on them; the progress thread drives their tasks.
 */
#ifndef CHORUS_CORE_COMM_H
#define CHORUS_CORE_COMM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "chorus.h"
#include "coll/coll.h"
#include "coll/select.h"
#include "core/context.h"
#include "util/spinlock.h"

typedef struct chorus__stall chorus__stall_t;   /* stall.c */
typedef struct chorus__refusal chorus__refusal_t;   /* refusal.c */

/* No call's number (comm->inline_seq when no call runs in the calling thread). */
#define CHORUS__NO_SEQ UINT64_MAX

/* A port over the context's lanes, in one space of one communicator. */
typedef struct {
    tl_port_t port;
    struct chorus_comm *comm;
    uint32_t space;
    _Atomic uint64_t sends;     /* transfers posted through the port, for counters */
    _Atomic uint64_t recvs;
} chorus__port_t;

struct chorus_request {
    chorus_comm_t comm;
    chorus__task_t *task;
    coll_args_t args;           /* the call, for reports */
    const char *call;           /* its name, for reports: the collective's, "fc_weight_grad" */
    const char *alg_name;
    const char *via;            /* who serves it, for the trace (set only while tracing) */
    uint64_t seq;               /* the call's number on its communicator */
    int setup;                  /* a creation-time exchange: no stall reports */
    double deadline;
    double posted_at;           /* chorus__now() when posted */
    double stall_at;            /* next stall report, 0: none */
    int done;                   /* under ctx->lock */
    int orphaned;               /* freed by the user before completion: the progress thread frees it */
    int drive;                  /* a blocking call, not woken for: its waiter drives it */
    chorus_status_t status;
    struct chorus_request *next;
};

struct chorus_comm {
    chorus__ctx_t *ctx;
    int rank;
    int size;
    int *ranks;                 /* [size]: the context rank of each rank */
    int *rank_of;               /* [ctx->size]: the rank here of each context rank, or -1 */
    uint32_t space;
    int local_rank;
    int local_size;
    topo_layout_t *layout;      /* which of its ranks share a node */
    coll_select_t *select;      /* the algorithm of each call */

    /* What the algorithms see: layout, node team, the model. */
    coll_env_t env;
    tune_model_t model;         /* env.model points here */
    coll_team_t node_team;      /* env.node_team points here when a collective transport serves the node */
    int *node_members;          /* [local_size]: the ranks of this rank's node, ascending */
    int cores;                  /* cores a node's ranks run on at once, fewest of any node */

    chorus__port_t port;        /* the communicator's calls */
    chorus__port_t setup_port;  /* its creation-time exchanges */

    /*
     * Numbers calls and takes team turns in call order. Only a thread that
     * calls on the communicator takes it, and one at a time does
     * (chorus_comm(3)): so a refused call may hold it while it waits for the
     * progress thread to take its turns (request.c) with nobody spinning.
     */
    chorus__spinlock_t post_lock;
    _Atomic uint64_t next_seq;  /* changed under post_lock (and the refusal lock); read anywhere */
    uint64_t setup_seq;         /* under post_lock */
    /*
     * Calls posted and not complete. Queued requests change it under ctx->lock
     * (their waiters sleep on ctx->cond); a call run in the calling thread
     * takes it from 0 to 1 and back without the lock (only destroy waits for
     * it, and it polls). Only the thread that calls on the communicator adds
     * to it (one at a time, chorus_comm(3)); the progress thread only takes
     * off what completes. So at 0 nothing can change it but the calling
     * thread, which moves it to 1 and back with plain stores.
     */
    atomic_int outstanding;
    _Atomic uint64_t inline_done;   /* calls completed in the calling thread: highest seq + 1 */
    /* The call the calling thread runs now, or CHORUS__NO_SEQ (set under post_lock; cleared
       when it is over before the look at njoin, chorus__refusal_outcome, or when handed over
       under ctx->lock). */
    _Atomic uint64_t inline_seq;
    /* A call refused for its shape whose turns are not taken yet, or CHORUS__NO_SEQ: its
       thread holds post_lock until they are (request.c). */
    _Atomic uint64_t learning;
    /*
     * The last call that passed the checks, as the caller gave it and as
     * checked (coll_api.c), and the last selection with its key (request.c):
     * a call that repeats them skips both. Only one thread at a time calls
     * on a communicator (chorus_comm(3)), so they need no lock.
     */
    struct {
        coll_args_t given;      /* coll COLL_TYPE_COUNT: nothing yet */
        coll_args_t checked;
    } call_memo;
    struct {
        coll_type_t coll;       /* COLL_TYPE_COUNT: nothing yet */
        coll_mem_t mem;
        size_t count;
        chorus_dtype_t dtype;
        const coll_alg_t *alg;
    } select_memo;
    /*
     * The task of the last call, when it ran in the calling thread, ended
     * well and its kind can run again (chorus__task_again): a call that
     * repeats it in every argument but the buffers reuses it instead of
     * building one (request.c). Any other call finalizes it first; so does
     * destroy.
     */
    struct {
        chorus__task_t *task;   /* NULL: none */
        const coll_alg_t *alg;
        coll_args_t args;
    } kept;
    chorus__stall_t *stall;     /* stall reports (progress thread) */
    char trace_via[40];         /* "NET+TEAM": who serves calls that use the node team (tracing) */
    chorus__refusal_t *refusal; /* calls refused for their arguments (refusal.h) */
    struct chorus_comm *next;   /* in ctx->comms */
};

/* ---- communicators (comm.c) ---------------------------------------------- */

/*
 * A communicator over ctx of the context ranks ranks[0 .. size), in that
 * order (taken over), with space: layout, node team and selection table,
 * exchanged among its ranks. Collective over them.
 */
chorus_status_t chorus__comm_open(chorus__ctx_t *ctx, int *ranks, int size, uint32_t space,
                                  chorus_comm_t *comm_p);
/* The communicator of space in ctx, or NULL (progress thread; under ctx->lock). */
chorus_comm_t chorus__comm_of_space(chorus__ctx_t *ctx, uint32_t space);

/* ---- creation-time exchanges (comm_setup.c) ------------------------------ */

/* Node team and selection table of a new communicator. Collective. */
chorus_status_t chorus__comm_setup(chorus_comm_t comm);
/* Release what chorus__comm_setup made. */
void chorus__comm_teardown(chorus_comm_t comm);
/* Every rank's len bytes of mine into all (size * len bytes), in the setup space. */
chorus_status_t chorus__comm_setup_allgather(chorus_comm_t comm, const void *mine, size_t len,
                                             void *all);
/* The minimum over every rank of each of n int32 values, in the setup space. */
chorus_status_t chorus__comm_setup_min(chorus_comm_t comm, const int32_t *mine,
                                       int32_t *all, int n);

/* ---- requests (request.c) ------------------------------------------------ */

/*
 * Post a call whose arguments were checked. blocking: the call may run in
 * the calling thread instead, and then *req_p is NULL and the call is over
 * with the returned status.
 */
chorus_status_t chorus__call(chorus_comm_t comm, const coll_args_t *args, int blocking,
                             chorus_request_t *req_p);
/*
 * Post a call whose task make() builds (called under the post lock, with the
 * call's tag base) rather than the selection's algorithm: call names it in
 * reports, args describes it there. Queued for the progress thread.
 */
typedef chorus_status_t (*chorus__call_maker_fn)(chorus_comm_t comm, void *arg,
                                                 uint64_t tag_base, chorus__task_t **task_p);
chorus_status_t chorus__call_made(chorus_comm_t comm, const char *call, const coll_args_t *args,
                                  chorus__call_maker_fn make, void *make_arg,
                                  chorus_request_t *req_p);
/*
 * The checks of a collective's arguments as the public calls take them
 * (count per rank for allgather, reduce_scatter, alltoall), opts taking no
 * flag but compression on an allreduce or reduce-scatter of float32 by sum
 * or avg; fills
 * a->rank, size, chunk_bytes and mem from comm. Writes why and
 * returns CHORUS_ERR_INVALID_ARG when one fails.
 */
chorus_status_t chorus__check_call(chorus_comm_t comm, coll_args_t *a,
                                   const chorus_opts_t *opts, char *why, size_t why_len);
/*
 * The checks of opts: struct_size, flags outside allowed, priority. Writes
 * why and returns CHORUS_ERR_INVALID_ARG when one fails.
 */
chorus_status_t chorus__check_opts(const chorus_opts_t *opts, uint32_t allowed, char *why,
                                   size_t why_len);
/* opts->flags where the caller's struct_size covers it, else 0 (opts may be NULL). */
uint32_t chorus__opts_flags(const chorus_opts_t *opts);
/* opts->mem_type and opts->stream where struct_size covers them; else AUTO and NULL. */
int chorus__opts_mem(const chorus_opts_t *opts);
void *chorus__opts_stream(const chorus_opts_t *opts);
/* How a refused collective is run here all the same (refusal.h). */
typedef struct {
    int shape_ok;               /* only its buffers or req_p were refused: the rest is valid */
    chorus_dtype_t wire;        /* shape_ok: its compression (chorus__opts_wire) */
    int blocking;               /* return once it is over; else as soon as it may */
} chorus__join_t;

/*
 * A call (named call in reports) refused here for its arguments takes its
 * sequence number and tells the other ranks (refusal.h): why is the reason,
 * as logged; args->coll names the collective in the notice (COLL_TYPE_COUNT
 * for a call that is none). join: a collective, run here on scratch
 * buffers, as it is when join->shape_ok, else as the other ranks made it;
 * NULL: stop it. Returns CHORUS_ERR_INVALID_ARG once the call is over; a
 * non-blocking call as soon as no later call can take its turns; or the
 * context's fault.
 */
chorus_status_t chorus__call_refused(chorus_comm_t comm, const char *call,
                                     const coll_args_t *args, const char *why,
                                     const chorus__join_t *join);
/* Call seq of comm is queued, running, or run by the calling thread (progress thread, under ctx->lock). */
int chorus__call_in_flight(chorus_comm_t comm, uint64_t seq);
/*
 * A request that no task drives (the training engine's submissions), named
 * call in reports: whoever made it completes it with
 * chorus__request_complete, within deadline_s; its waiters wait that long
 * (plus a grace) before they give up.
 */
chorus_status_t chorus__request_detached(chorus_comm_t comm, const char *call,
                                         const coll_args_t *args, double deadline_s,
                                         chorus_request_t *req_p);
/* The wire of opts's compression flag (CHORUS_FLOAT16, _BFLOAT16), or CHORUS_DTYPE_COUNT. */
chorus_dtype_t chorus__opts_wire(const chorus_opts_t *opts);
/*
 * Post an allreduce or reduce-scatter (checked) compressed to wire on the network
 * (coll_compressed_task), for the progress thread.
 */
chorus_status_t chorus__call_compressed(chorus_comm_t comm, const coll_args_t *args,
                                        chorus_dtype_t wire, chorus_request_t *req_p);
/* Run an internal call with alg in the setup space and wait for it. */
chorus_status_t chorus__call_setup(chorus_comm_t comm, const coll_args_t *args,
                                   const coll_alg_t *alg);
/* Finalize the kept task (comm->kept), if any: before the teams go. */
void chorus__call_forget(chorus_comm_t comm);
/* Over: complete it (progress thread, or the inline path). */
void chorus__request_complete(chorus_request_t req, chorus_status_t status);

#endif
