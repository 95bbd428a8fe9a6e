/*
 * The progress thread: one per communicator. Each turn it takes newly
 * posted requests, drives the transport and every active schedule, enforces
 * deadlines, and sleeps in epoll when nothing moved. Any fault fails the
 * whole communicator and closes its connections, so that peers waiting on
 * this rank notice at once instead of at their own deadline.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/debug_check.h"
#include "core/stall.h"
#include "util/log.h"
#include "util/time.h"

/* Longest sleep while requests are active: a bound on how late a deadline is noticed. */
#define PROGRESS_MAX_SLEEP_MS 100
/* Non-blocking polls before sleeping: short waits stay off the scheduler's slow path. */
#define PROGRESS_SPIN_POLLS 64
/* Longest sleep on a node-local peer's flag: new work and sockets are checked this often. */
#define PROGRESS_SHM_SLEEP_US 1000

void chorus__progress_wake(chorus_comm_t comm)
{
    uint64_t one = 1;

    if (write(comm->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        chorus_debug("rank %d: progress wake-up failed: %m", comm->rank);
}

void chorus__comm_set_error(chorus_comm_t comm, chorus_status_t status)
{
    int expected = 0;

    atomic_compare_exchange_strong(&comm->error, &expected, (int)status);
}

static void progress_take_queue(chorus_comm_t comm)
{
    chorus_request_t head, *tail = &comm->active;

    pthread_mutex_lock(&comm->lock);
    head = comm->queue_head;
    comm->queue_head = comm->queue_tail = NULL;
    pthread_mutex_unlock(&comm->lock);
    while (*tail)
        tail = &(*tail)->next;
    *tail = head;
}

/* Fail every request and close the transport's connections. */
static void progress_fail_all(chorus_comm_t comm, chorus_status_t status)
{
    chorus_request_t req, next;

    if (comm->tl_fd_watched) {
        /* The closed transport has nothing more to say: stop watching it. */
        epoll_ctl(comm->epoll_fd, EPOLL_CTL_DEL, comm->tl->event_fd(comm->tl_ctx), NULL);
        comm->tl_fd_watched = 0;
    }
    chorus__comm_set_error(comm, status);
    /* Local peers waiting on this rank's flags stop waiting too. */
    shm_node_fail(comm->shm, (chorus_status_t)atomic_load(&comm->error));
    comm->tl->fail_all(comm->tl_ctx, (chorus_status_t)atomic_load(&comm->error));
    progress_take_queue(comm);
    for (req = comm->active; req != NULL; req = next) {
        next = req->next;
        chorus__request_complete(req, (chorus_status_t)atomic_load(&comm->error));
    }
    comm->active = NULL;
}

static void progress_report(chorus_comm_t comm, chorus_request_t req, chorus_status_t status)
{
    const coll_args_t *a = &req->args;
    char peer[32] = "";

    if (req->sched.failed_peer >= 0)
        snprintf(peer, sizeof(peer), " with peer %d", req->sched.failed_peer);
    chorus_error("rank %d: %s #%llu (%s, %zu x %s) failed%s: %s", comm->rank,
                 coll_type_name(a->coll), (unsigned long long)req->seq, req->alg->name,
                 a->count, chorus_dtype_name(a->dtype), peer, chorus_status_string(status));
}

/*
 * Drive one request: its debug check's exchange first, then its schedule.
 * Returns 1 when it is over (*status_p says how), 0 while it runs, or a
 * negative status for a fault that fails the communicator.
 */
static int progress_one(chorus_comm_t comm, chorus_request_t req, chorus_status_t *status_p)
{
    *status_p = CHORUS_OK;
    if (req->check != NULL) {
        int rc = chorus__check_progress(comm, req, status_p);

        if (rc <= 0)
            return rc;
        chorus__check_destroy(req->check);
        req->check = NULL;
        /* A mismatch ends the call on every rank alike: the communicator stays usable. */
        req->check_status = *status_p;
        if (*status_p != CHORUS_OK) {
            if (req->alg->shm == COLL_SHM_NONE)
                return 1;
            /* The node-local call keeps its turn but moves nothing. */
            shm_op_skip(&req->shm_op);
        }
    }
    if (req->alg->shm != COLL_SHM_NONE) {
        int rc = shm_op_progress(&req->shm_op);

        *status_p = req->check_status;
        return rc;
    }
    return coll_sched_progress(&req->sched, comm->tl, comm->tl_ctx, chorus__tag_base(req->seq));
}

/* The first active node-local call: its peers' flags, not file descriptors, wake it. */
static chorus_request_t progress_shm_waiter(chorus_comm_t comm)
{
    for (chorus_request_t req = comm->active; req != NULL; req = req->next) {
        if (req->alg->shm != COLL_SHM_NONE && req->check == NULL)
            return req;
    }
    return NULL;
}

static int progress_timed_out(chorus_comm_t comm, chorus_request_t req)
{
    chorus_error("rank %d: %s #%llu of %zu x %s timed out after %.1f s "
                 "(CHORUS_TIMEOUT); a peer is dead, stalled or called another "
                 "collective", comm->rank, coll_type_name(req->args.coll),
                 (unsigned long long)req->seq, req->args.count,
                 chorus_dtype_name(req->args.dtype), comm->cfg.timeout_s);
    return CHORUS_ERR_TIMEOUT;
}

/* Drive every active request once; returns 1 when anything completed, <0 on a fault. */
static int progress_requests(chorus_comm_t comm, double *next_deadline_p)
{
    chorus_request_t *link = &comm->active;
    double now = chorus__now();
    int moved = 0;

    *next_deadline_p = now + 3600.0;
    while (*link) {
        chorus_request_t req = *link;
        chorus_status_t status;
        int rc = progress_one(comm, req, &status);

        if (rc == 0 && now > req->deadline)
            return progress_timed_out(comm, req);
        if (rc < 0) {
            progress_report(comm, req, (chorus_status_t)rc);
            return rc;
        }
        if (rc == 1) {
            *link = req->next;
            chorus__stall_completed(comm, req->seq);
            chorus__request_complete(req, status);
            moved = 1;
            continue;
        }
        if (req->stall_at > 0 && now >= req->stall_at)
            chorus__stall_notice(comm, req, now);
        if (req->deadline < *next_deadline_p)
            *next_deadline_p = req->deadline;
        link = &req->next;
    }
    return moved;
}

static void progress_sleep(chorus_comm_t comm, int timeout_ms)
{
    struct epoll_event events[4];
    uint64_t count;
    int n = epoll_wait(comm->epoll_fd, events, 4, timeout_ms);

    for (int i = 0; i < n; i++) {
        if (events[i].data.fd == comm->wake_fd &&
            read(comm->wake_fd, &count, sizeof(count)) < 0 && errno != EAGAIN)
            chorus_debug("rank %d: reading the wake-up eventfd failed: %m", comm->rank);
    }
}

static void *progress_main(void *arg)
{
    chorus_comm_t comm = arg;
    int idle_polls = 0;

    chorus__stall_start(comm);
    while (!atomic_load(&comm->stop)) {
        chorus_request_t shm_waiter;
        double next_deadline;
        int moved, rc;

        if (atomic_load(&comm->aborted) || atomic_load(&comm->error)) {
            progress_fail_all(comm, CHORUS_ERR_ABORTED);
            progress_sleep(comm, -1);
            continue;
        }
        progress_take_queue(comm);
        rc = comm->tl->progress(comm->tl_ctx);
        if (rc < 0) {
            progress_fail_all(comm, (chorus_status_t)rc);
            continue;
        }
        moved = rc > 0;
        rc = progress_requests(comm, &next_deadline);
        if (rc < 0) {
            progress_fail_all(comm, (chorus_status_t)rc);
            continue;
        }
        moved |= rc;
        moved |= chorus__stall_progress(comm, moved);
        if (moved) {
            idle_polls = 0;
            continue;
        }
        if (comm->active == NULL) {
            progress_sleep(comm, -1);
        } else if ((shm_waiter = progress_shm_waiter(comm)) != NULL) {
            progress_sleep(comm, 0);
            shm_op_wait(&shm_waiter->shm_op, PROGRESS_SHM_SLEEP_US);
        } else if (++idle_polls < PROGRESS_SPIN_POLLS) {
            progress_sleep(comm, 0);
        } else {
            int ms = chorus__ms_left(next_deadline);
            progress_sleep(comm, ms < PROGRESS_MAX_SLEEP_MS ? ms : PROGRESS_MAX_SLEEP_MS);
        }
    }
    chorus__stall_close(comm);
    /* Stopping: whatever is still pending ends now. */
    progress_take_queue(comm);
    for (chorus_request_t req = comm->active, next; req != NULL; req = next) {
        next = req->next;
        chorus__request_complete(req, CHORUS_ERR_ABORTED);
    }
    comm->active = NULL;
    return NULL;
}

static chorus_status_t progress_add_fd(chorus_comm_t comm, int fd)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};

    if (epoll_ctl(comm->epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        chorus_error("rank %d: epoll_ctl(add %d) failed: %m", comm->rank, fd);
        return CHORUS_ERR_SYSTEM;
    }
    return CHORUS_OK;
}

chorus_status_t chorus__progress_start(chorus_comm_t comm)
{
    chorus_status_t status;
    int rc;

    status = chorus__stall_create(comm->rank, comm->size, &comm->stall);
    if (status != CHORUS_OK)
        return status;
    comm->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    if (comm->epoll_fd < 0) {
        chorus_error("rank %d: epoll_create1 failed: %m", comm->rank);
        status = CHORUS_ERR_SYSTEM;
        goto err_stall;
    }
    comm->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (comm->wake_fd < 0) {
        chorus_error("rank %d: eventfd failed: %m", comm->rank);
        status = CHORUS_ERR_SYSTEM;
        goto err_epoll;
    }
    status = progress_add_fd(comm, comm->wake_fd);
    if (status == CHORUS_OK)
        status = progress_add_fd(comm, comm->tl->event_fd(comm->tl_ctx));
    if (status != CHORUS_OK)
        goto err_wake;
    comm->tl_fd_watched = 1;
    rc = pthread_create(&comm->thread, NULL, progress_main, comm);
    if (rc != 0) {
        chorus_error("rank %d: pthread_create failed: %s", comm->rank, strerror(rc));
        status = CHORUS_ERR_SYSTEM;
        goto err_wake;
    }
    comm->thread_started = 1;
    return CHORUS_OK;

err_wake:
    close(comm->wake_fd);
    comm->wake_fd = -1;
err_epoll:
    close(comm->epoll_fd);
    comm->epoll_fd = -1;
err_stall:
    /* Nothing of it was posted: only the progress thread posts. */
    chorus__stall_destroy(comm->stall);
    comm->stall = NULL;
    return status;
}

void chorus__progress_stop(chorus_comm_t comm)
{
    if (comm->thread_started) {
        atomic_store(&comm->stop, 1);
        chorus__progress_wake(comm);
        pthread_join(comm->thread, NULL);
        comm->thread_started = 0;
    }
    if (comm->wake_fd >= 0)
        close(comm->wake_fd);
    if (comm->epoll_fd >= 0)
        close(comm->epoll_fd);
    comm->wake_fd = comm->epoll_fd = -1;
}
