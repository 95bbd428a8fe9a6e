/* Requests: posting a collective, waiting for it, completing it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/comm.h"
#include "core/debug_check.h"
#include "util/log.h"
#include "util/time.h"

size_t chorus__request_bytes(const coll_args_t *args)
{
    size_t bytes = args->count * chorus_dtype_size(args->dtype);

    switch (args->coll) {
    case COLL_ALLGATHER:
    case COLL_REDUCE_SCATTER:
    case COLL_ALLTOALL:
        return bytes * (size_t)args->size;
    default:
        return bytes;
    }
}

const coll_alg_t *chorus__request_select(chorus_comm_t comm, const coll_args_t *args)
{
    const char *name = tune_table_lookup(comm->tune, (tune_coll_t)args->coll,
                                         chorus__request_bytes(args));
    const coll_alg_t *alg = name ? coll_alg_find(args->coll, name) : NULL;

    if (alg == NULL)
        chorus_error("rank %d: no algorithm '%s' for %s", comm->rank, name ? name : "(none)",
                     coll_type_name(args->coll));
    return alg;
}

/* The call's work: a schedule, or a node-local operation. */
static chorus_status_t request_prepare(chorus_comm_t comm, chorus_request_t req)
{
    chorus_status_t status;

    coll_sched_init(&req->sched, req->args.dtype, req->args.op, req->args.size);
    req->sched.pool = &comm->scratch_pool;
    if (req->alg->shm != COLL_SHM_NONE) {
        if (comm->shm == NULL) {
            chorus_error("rank %d: %s %s needs node-local shared memory, which this "
                         "communicator does not have", comm->rank, req->alg->name,
                         coll_type_name(req->args.coll));
            return CHORUS_ERR_INTERNAL;
        }
        shm_op_init(&req->shm_op, comm->shm, &req->args, req->alg->shm);
        return CHORUS_OK;
    }
    status = req->alg->build(&req->args, &req->sched);
    if (status != CHORUS_OK)
        chorus_error("rank %d: %s %s of %zu elements could not be scheduled: %s", comm->rank,
                     req->alg->name, coll_type_name(req->args.coll), req->args.count,
                     chorus_status_string(status));
    return status;
}

static void request_times(chorus_comm_t comm, chorus_request_t req, double posted_at)
{
    req->posted_at = posted_at;
    req->deadline = posted_at + comm->cfg.timeout_s;
    if (comm->cfg.stall_warn_s > 0)
        req->stall_at = posted_at + comm->cfg.stall_warn_s;
}

/* Queue req for the progress thread; with assign_seq, it takes the next sequence number. */
static void request_enqueue(chorus_comm_t comm, chorus_request_t req, int assign_seq)
{
    pthread_mutex_lock(&comm->lock);
    if (assign_seq)
        req->seq = comm->next_seq++;
    /* Sealed before the progress thread can see the request. */
    if (req->check != NULL)
        chorus__check_seal(req->check, &req->args, req->seq);
    if (comm->queue_tail)
        comm->queue_tail->next = req;
    else
        comm->queue_head = req;
    comm->queue_tail = req;
    comm->outstanding++;
    pthread_mutex_unlock(&comm->lock);
    chorus__progress_wake(comm);
}

chorus_status_t chorus__request_post_alg(chorus_comm_t comm, const coll_args_t *args,
                                         const coll_alg_t *alg, chorus_request_t *req_p)
{
    chorus_request_t req;
    chorus_status_t status = (chorus_status_t)atomic_load(&comm->error);

    if (status != CHORUS_OK)
        return status;
    if (alg == NULL)
        return CHORUS_ERR_INTERNAL;
    req = calloc(1, sizeof(*req));
    if (req == NULL)
        return CHORUS_ERR_NO_MEMORY;
    req->comm = comm;
    req->args = *args;
    req->alg = alg;
    status = request_prepare(comm, req);
    if (status != CHORUS_OK)
        goto err_sched;
    if (comm->cfg.debug_check) {
        status = chorus__check_create(comm, &req->args, &req->check);
        if (status != CHORUS_OK)
            goto err_sched;
    }
    request_times(comm, req, chorus__now());
    request_enqueue(comm, req, 1);
    *req_p = req;
    return CHORUS_OK;

err_sched:
    coll_sched_finalize(&req->sched);
    free(req);
    return status;
}

chorus_status_t chorus__request_adopt_shm(chorus_comm_t comm, const shm_op_t *op,
                                          const coll_alg_t *alg, uint64_t seq,
                                          double posted_at, chorus_request_t *req_p)
{
    chorus_request_t req = calloc(1, sizeof(*req));

    if (req == NULL)
        return CHORUS_ERR_NO_MEMORY;
    req->comm = comm;
    req->args = op->args;
    req->alg = alg;
    req->seq = seq;
    req->shm_op = *op;
    coll_sched_init(&req->sched, op->args.dtype, op->args.op, op->args.size);
    request_times(comm, req, posted_at);
    request_enqueue(comm, req, 0);
    *req_p = req;
    return CHORUS_OK;
}

void chorus__request_complete(chorus_request_t req, chorus_status_t status)
{
    chorus_comm_t comm = req->comm;
    int orphaned;

    coll_sched_finalize(&req->sched);
    chorus__check_destroy(req->check);
    req->check = NULL;
    pthread_mutex_lock(&comm->lock);
    req->status = status;
    req->done = 1;
    comm->outstanding--;
    orphaned = req->orphaned;
    pthread_cond_broadcast(&comm->cond);
    pthread_mutex_unlock(&comm->lock);
    if (orphaned)
        free(req);
}

static void abs_deadline(struct timespec *ts, double deadline)
{
    double left = deadline - chorus__now();

    clock_gettime(CLOCK_MONOTONIC, ts);
    if (left < 0)
        left = 0;
    ts->tv_sec += (time_t)left;
    ts->tv_nsec += (long)((left - (double)(time_t)left) * 1e9);
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/*
 * The progress thread enforces each request's deadline; the waiter allows a
 * grace period beyond it so that it only gives up on its own when the
 * progress thread itself is stuck.
 */
#define REQUEST_WAIT_GRACE_S 5.0

chorus_status_t chorus_request_wait(chorus_request_t req)
{
    chorus_comm_t comm;
    struct timespec ts;
    chorus_status_t status;

    if (req == NULL) {
        chorus_error("chorus_request_wait: req is NULL");
        return CHORUS_ERR_INVALID_ARG;
    }
    comm = req->comm;
    abs_deadline(&ts, req->deadline + REQUEST_WAIT_GRACE_S);
    pthread_mutex_lock(&comm->lock);
    while (!req->done) {
        if (pthread_cond_timedwait(&comm->cond, &comm->lock, &ts) == ETIMEDOUT)
            break;
    }
    status = req->done ? req->status : CHORUS_ERR_TIMEOUT;
    pthread_mutex_unlock(&comm->lock);
    if (!req->done)
        chorus_error("rank %d: request %llu did not complete %.0f s past its deadline",
                     comm->rank, (unsigned long long)req->seq, REQUEST_WAIT_GRACE_S);
    return status;
}

chorus_status_t chorus_request_test(chorus_request_t req, int *done_p)
{
    chorus_status_t status = CHORUS_OK;
    int done;

    if (req == NULL || done_p == NULL) {
        chorus_error("chorus_request_test: %s is NULL", req == NULL ? "req" : "done_p");
        return CHORUS_ERR_INVALID_ARG;
    }
    pthread_mutex_lock(&req->comm->lock);
    done = req->done;
    if (done)
        status = req->status;
    pthread_mutex_unlock(&req->comm->lock);
    *done_p = done;
    return status;
}

chorus_status_t chorus_request_free(chorus_request_t req)
{
    chorus_status_t status;
    int free_now;

    if (req == NULL)
        return CHORUS_OK;
    status = chorus_request_wait(req);
    pthread_mutex_lock(&req->comm->lock);
    free_now = req->done;
    if (!free_now)
        req->orphaned = 1;
    pthread_mutex_unlock(&req->comm->lock);
    if (free_now)
        free(req);
    return status;
}
