/*
 * The progress thread: one per context. Each turn runs the loop's phases in
 * order, each a function of the table below: the transports move bytes,
 * the tasks of the posted calls move, timers fire (deadlines, stall
 * reports), and the control channel hands its messages over. When nothing
 * moved it sleeps: on a task's own wait when one polls shared memory, else
 * in epoll on the transports' descriptors and the wake-up eventfd. Any
 * fault fails the whole context and closes its connections, so that peers
 * waiting on this rank notice at once instead of at their own deadline.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/core_trace.h"
#include "core/ctrl.h"
#include "core/refusal.h"
#include "core/stall.h"
#include "util/log.h"
#include "util/time.h"

/* Longest sleep while requests are active: a bound on how late a deadline is noticed. */
#define PROGRESS_MAX_SLEEP_MS 100
/* Non-blocking polls before sleeping: short waits stay off the scheduler's slow path. */
#define PROGRESS_SPIN_POLLS 64
/* Longest sleep on a task's own wait: new work and sockets are checked this often. */
#define PROGRESS_TASK_SLEEP_US 1000

/* What a turn of the loop found out. */
typedef struct {
    double now;
    double next_deadline;       /* the earliest deadline of an active call */
} progress_turn_t;

/* A phase: 1 when something moved, 0 when nothing did, < 0 for a fault of the context. */
typedef int (*progress_phase_fn)(chorus__ctx_t *ctx, progress_turn_t *turn);

void chorus__progress_wake(chorus__ctx_t *ctx)
{
    uint64_t one = 1;

    if (ctx->wake_fd >= 0 && write(ctx->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        chorus_debug("rank %d: progress wake-up failed: %m", ctx->rank);
}

static void progress_take_queue(chorus__ctx_t *ctx)
{
    chorus_request_t head, *tail = &ctx->active;

    pthread_mutex_lock(&ctx->lock);
    head = ctx->queue_head;
    ctx->queue_head = ctx->queue_tail = NULL;
    pthread_mutex_unlock(&ctx->lock);
    while (*tail)
        tail = &(*tail)->next;
    *tail = head;
}

static void progress_unwatch(chorus__ctx_t *ctx)
{
    for (int i = 0; i < ctx->nlanes; i++) {
        if (ctx->tl_watched[i]) {
            /* A closed transport has nothing more to say: stop watching it. */
            epoll_ctl(ctx->epoll_fd, EPOLL_CTL_DEL, ctx->tl[i]->event_fd(ctx->tl_ctx[i]), NULL);
            ctx->tl_watched[i] = 0;
        }
    }
}

/* Fail every request, tell local peers, and close the transports' connections. */
static void progress_fail_all(chorus__ctx_t *ctx, chorus_status_t status)
{
    chorus_status_t error;

    progress_unwatch(ctx);
    chorus__ctx_fail(ctx, status);
    error = chorus__ctx_error(ctx);
    pthread_mutex_lock(&ctx->lock);
    for (chorus_comm_t comm = ctx->comms; comm != NULL; comm = comm->next) {
        coll_team_t *team = comm->env.node_team;

        /* Local peers waiting on this rank's memory stop waiting too. */
        if (team != NULL && team->team != NULL)
            team->ops->team_fail(team->team, error);
    }
    pthread_mutex_unlock(&ctx->lock);
    for (int i = 0; i < ctx->nlanes; i++)
        ctx->tl[i]->fail_all(ctx->tl_ctx[i], error);
    progress_take_queue(ctx);
    for (chorus_request_t req = ctx->active, next; req != NULL; req = next) {
        next = req->next;
        chorus__task_fail(req->task, error);
        chorus__request_complete(req, error);
    }
    ctx->active = NULL;
}

static void progress_report(chorus_request_t req, chorus_status_t status)
{
    const coll_args_t *a = &req->args;
    char peer[32] = "", text[256];

    if (req->task->failed_peer >= 0)
        snprintf(peer, sizeof(peer), " with peer %d", req->task->failed_peer);
    snprintf(text, sizeof(text), "rank %d: %s%s #%llu (%s, %zu x %s) failed%s: %s",
             req->comm->rank, req->setup ? "setup " : "", req->call,
             (unsigned long long)req->seq, req->alg_name, a->count,
             chorus_dtype_name(a->dtype), peer, chorus_status_string(status));
    chorus_error("%s", text);
    if (req->comm->ctx->trace != NULL)
        chorus__trace_fault(req->comm->ctx, req->comm->space, "transfer failed", text);
}

/* ---- phases ------------------------------------------------------------- */

static int phase_transports(chorus__ctx_t *ctx, progress_turn_t *turn)
{
    int moved = 0;

    (void)turn;
    for (int i = 0; i < ctx->nlanes; i++) {
        int rc = ctx->tl[i]->progress(ctx->tl_ctx[i]);

        if (rc < 0)
            return rc;
        moved |= rc > 0;
    }
    return moved;
}

/* Drive every active request once; complete those that are over. */
static int phase_tasks(chorus__ctx_t *ctx, progress_turn_t *turn)
{
    chorus_request_t *link = &ctx->active;
    int moved = 0;

    (void)turn;
    progress_take_queue(ctx);
    while (*link) {
        chorus_request_t req = *link;
        int rc;

        if (req->task->state == CHORUS__TASK_NEW && chorus__task_post(req->task) != CHORUS_OK)
            rc = 1;     /* refused before it moved anything: over with that status */
        else
            rc = chorus__task_progress(req->task);
        if (rc < 0) {
            progress_report(req, (chorus_status_t)rc);
            return rc;
        }
        if (rc == 1) {
            *link = req->next;
            if (!req->setup)
                chorus__stall_completed(req->comm, req->seq);
            chorus__request_complete(req, req->task->status);
            moved = 1;
            continue;
        }
        link = &req->next;
    }
    return moved;
}

static int progress_timed_out(chorus_request_t req)
{
    char text[256];

    snprintf(text, sizeof(text), "rank %d: %s%s #%llu of %zu x %s timed out after %.1f s "
             "(CHORUS_TIMEOUT); a peer is dead, stalled or called another collective",
             req->comm->rank, req->setup ? "setup " : "", req->call,
             (unsigned long long)req->seq, req->args.count,
             chorus_dtype_name(req->args.dtype), req->comm->ctx->cfg.timeout_s);
    chorus_error("%s", text);
    if (req->comm->ctx->trace != NULL)
        chorus__trace_fault(req->comm->ctx, req->comm->space, "timeout", text);
    return CHORUS_ERR_TIMEOUT;
}

/* Deadlines and stall reports of the calls still running. */
static int phase_timers(chorus__ctx_t *ctx, progress_turn_t *turn)
{
    turn->now = chorus__now();
    turn->next_deadline = turn->now + 3600.0;
    for (chorus_request_t req = ctx->active; req != NULL; req = req->next) {
        if (turn->now > req->deadline)
            return progress_timed_out(req);
        if (req->stall_at > 0 && turn->now >= req->stall_at)
            chorus__stall_notice(req, turn->now);
        if (req->deadline < turn->next_deadline)
            turn->next_deadline = req->deadline;
    }
    return 0;
}

static int phase_control(chorus__ctx_t *ctx, progress_turn_t *turn)
{
    int moved = chorus__ctrl_progress(ctx);

    chorus__refusal_flush(ctx);
    chorus__stall_check(ctx, turn->now);
    return moved;
}

static const struct {
    const char *name;
    progress_phase_fn fn;
} progress_phases[] = {
    {"transports", phase_transports},
    {"tasks", phase_tasks},
    {"timers", phase_timers},
    {"control", phase_control},
};

/* ---- the loop ----------------------------------------------------------- */

static void progress_sleep(chorus__ctx_t *ctx, int timeout_ms)
{
    struct epoll_event events[4];
    uint64_t count;
    int n = epoll_wait(ctx->epoll_fd, events, 4, timeout_ms);

    for (int i = 0; i < n; i++) {
        if (events[i].data.fd == ctx->wake_fd &&
            read(ctx->wake_fd, &count, sizeof(count)) < 0 && errno != EAGAIN)
            chorus_debug("rank %d: reading the wake-up eventfd failed: %m", ctx->rank);
    }
}

/* Sleep on the first active task that waits on memory; 0 when none does. */
static int progress_task_wait(chorus__ctx_t *ctx)
{
    for (chorus_request_t req = ctx->active; req != NULL; req = req->next) {
        if (chorus__task_wait(req->task, PROGRESS_TASK_SLEEP_US))
            return 1;
    }
    return 0;
}

/* One turn: 1 when something moved, 0 when not, < 0 for a fault. */
static int progress_turn(chorus__ctx_t *ctx, progress_turn_t *turn)
{
    int moved = 0;

    for (size_t i = 0; i < sizeof(progress_phases) / sizeof(progress_phases[0]); i++) {
        int rc = progress_phases[i].fn(ctx, turn);

        if (rc < 0) {
            chorus_debug("rank %d: the %s phase failed: %s", ctx->rank,
                         progress_phases[i].name, chorus_status_string((chorus_status_t)rc));
            return rc;
        }
        moved |= rc;
    }
    return moved;
}

static void *progress_main(void *arg)
{
    chorus__ctx_t *ctx = arg;
    int idle_polls = 0;

    while (!atomic_load(&ctx->stop)) {
        progress_turn_t turn;
        int rc;

        if (atomic_load(&ctx->aborted) || chorus__ctx_error(ctx) != CHORUS_OK) {
            progress_fail_all(ctx, CHORUS_ERR_ABORTED);
            progress_sleep(ctx, -1);
            continue;
        }
        rc = progress_turn(ctx, &turn);
        if (rc < 0) {
            progress_fail_all(ctx, (chorus_status_t)rc);
            continue;
        }
        if (rc > 0) {
            idle_polls = 0;
            continue;
        }
        if (ctx->active == NULL) {
            progress_sleep(ctx, -1);
        } else if (progress_sleep(ctx, 0), progress_task_wait(ctx)) {
            /* A task slept on its peers' memory; sockets were polled just before. */
        } else if (++idle_polls < PROGRESS_SPIN_POLLS) {
            continue;
        } else {
            int ms = chorus__ms_left(turn.next_deadline);
            progress_sleep(ctx, ms < PROGRESS_MAX_SLEEP_MS ? ms : PROGRESS_MAX_SLEEP_MS);
        }
    }
    /* Stopping: whatever is still pending ends now. */
    progress_take_queue(ctx);
    for (chorus_request_t req = ctx->active, next; req != NULL; req = next) {
        next = req->next;
        chorus__request_complete(req, CHORUS_ERR_ABORTED);
    }
    ctx->active = NULL;
    return NULL;
}

static chorus_status_t progress_add_fd(chorus__ctx_t *ctx, int fd)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};

    if (epoll_ctl(ctx->epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        chorus_error("rank %d: epoll_ctl(add %d) failed: %m", ctx->rank, fd);
        return CHORUS_ERR_SYSTEM;
    }
    return CHORUS_OK;
}

chorus_status_t chorus__progress_start(chorus__ctx_t *ctx)
{
    chorus_status_t status;
    int rc;

    ctx->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    if (ctx->epoll_fd < 0) {
        chorus_error("rank %d: epoll_create1 failed: %m", ctx->rank);
        return CHORUS_ERR_SYSTEM;
    }
    ctx->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (ctx->wake_fd < 0) {
        chorus_error("rank %d: eventfd failed: %m", ctx->rank);
        status = CHORUS_ERR_SYSTEM;
        goto err_epoll;
    }
    status = progress_add_fd(ctx, ctx->wake_fd);
    for (int i = 0; i < ctx->nlanes && status == CHORUS_OK; i++) {
        status = progress_add_fd(ctx, ctx->tl[i]->event_fd(ctx->tl_ctx[i]));
        ctx->tl_watched[i] = status == CHORUS_OK;
    }
    if (status != CHORUS_OK)
        goto err_wake;
    rc = pthread_create(&ctx->thread, NULL, progress_main, ctx);
    if (rc != 0) {
        chorus_error("rank %d: pthread_create failed: %s", ctx->rank, strerror(rc));
        status = CHORUS_ERR_SYSTEM;
        goto err_wake;
    }
    ctx->thread_started = 1;
    return CHORUS_OK;

err_wake:
    close(ctx->wake_fd);
    ctx->wake_fd = -1;
err_epoll:
    close(ctx->epoll_fd);
    ctx->epoll_fd = -1;
    return status;
}

void chorus__progress_stop(chorus__ctx_t *ctx)
{
    if (ctx->thread_started) {
        atomic_store(&ctx->stop, 1);
        chorus__progress_wake(ctx);
        pthread_join(ctx->thread, NULL);
        ctx->thread_started = 0;
    }
    if (ctx->wake_fd >= 0)
        close(ctx->wake_fd);
    if (ctx->epoll_fd >= 0)
        close(ctx->epoll_fd);
    ctx->wake_fd = ctx->epoll_fd = -1;
}
