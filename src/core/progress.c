/*
 * The progress loop: one per context. Each turn runs the loop's phases in
 * order, each a function of the table below: the transports move bytes,
 * the tasks of the posted calls move, timers fire (deadlines, stall
 * reports), and the control channel hands its messages over. When nothing
 * moved the loop sleeps: on a task's own wait when one polls shared memory,
 * else in epoll on the transports' descriptors and the wake-up eventfd. Any
 * fault fails the whole context and closes its connections, so that peers
 * waiting on this rank notice at once instead of at their own deadline.
 *
 * Whoever holds the engine (ctx->engine) runs the turns: the progress
 * thread, or a thread whose blocking call waits (chorus__progress_drive).
 * Such a thread runs the loop itself until its call is over; the
 * transports' events wake it alone, for they are lent to it: out of the
 * progress thread's epoll set. A call then costs no hand-over to the
 * progress thread and no wake-up back. They stay lent for
 * PROGRESS_LEND_MS after the last driven call, so that a run of blocking
 * calls does not wake the progress thread whenever a peer's next message
 * arrives between two of them: a message for a call not made yet waits
 * until that call, or the end of the loan, to be read. The progress
 * thread takes them back at the end of the loan, and at once when work is
 * left in flight (the driver wakes it then).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/core_trace.h"
#include "core/ctrl.h"
#include "core/refusal.h"
#include "core/stall.h"
#include "core/wait_hook.h"
#include "util/log.h"
#include "util/time.h"

/* Longest sleep while requests are active: a bound on how late a deadline is noticed. */
#define PROGRESS_MAX_SLEEP_MS 100
/* Non-blocking polls before sleeping: short waits stay off the scheduler's slow path. */
#define PROGRESS_SPIN_POLLS 64
/* Longest sleep on a task's own wait: new work and sockets are checked this often. */
#define PROGRESS_TASK_SLEEP_US 1000
/* Longest wait of a blocking call for the engine before the progress thread runs the call. */
#define PROGRESS_ENGINE_WAIT_S 0.002
/* How long the transports stay lent to driving threads after the last driven call. */
#define PROGRESS_LEND_MS 20

/* What a turn of the loop found out. */
typedef struct {
    double now;
    double next_deadline;       /* the earliest deadline of an active call */
} progress_turn_t;

/* A phase: 1 when something moved, 0 when nothing did, < 0 for a fault of the context. */
typedef int (*progress_phase_fn)(chorus__ctx_t *ctx, progress_turn_t *turn);

static void progress_ring(chorus__ctx_t *ctx, int fd)
{
    uint64_t one = 1;

    if (fd >= 0 && write(fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        chorus_debug("rank %d: progress wake-up failed: %m", ctx->rank);
}

void chorus__progress_wake(chorus__ctx_t *ctx)
{
    progress_ring(ctx, ctx->wake_fd);
    /* A thread that drives its call runs the loop now: new work and faults are its too. The
     * load follows the caller's queueing, and the driver's store precedes its taking the queue,
     * so a request it does not take is one it is woken for. */
    if (atomic_load(&ctx->driving))
        progress_ring(ctx, ctx->drive_wake_fd);
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
            int fd = ctx->tl[i]->event_fd(ctx->tl_ctx[i]);

            /* Out of the progress thread's set already while a call is driven: ENOENT. */
            epoll_ctl(ctx->epoll_fd, EPOLL_CTL_DEL, fd, NULL);
            epoll_ctl(ctx->drive_fd, EPOLL_CTL_DEL, fd, NULL);
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
        moved |= rc;
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

/* Read what events says of the wake-up eventfds (each set holds one). */
static void progress_woken(chorus__ctx_t *ctx, const struct epoll_event *events, int n)
{
    uint64_t count;

    for (int i = 0; i < n; i++) {
        int fd = events[i].data.fd;

        if ((fd == ctx->wake_fd || fd == ctx->drive_wake_fd) &&
            read(fd, &count, sizeof(count)) < 0 && errno != EAGAIN)
            chorus_debug("rank %d: reading the wake-up eventfd failed: %m", ctx->rank);
    }
}

/*
 * Wait for an event of epoll set fd, at most timeout_ms. The progress
 * thread (let_go) lets the engine go meanwhile; if a driving thread holds
 * it when the sleep ends, it sleeps again rather than queue for it (a
 * queued thread would be woken at every call the driver ends, to find it
 * taken again): the driver wakes it when it leaves work, and otherwise the
 * loan's end does.
 */
static void progress_sleep(chorus__ctx_t *ctx, int fd, int timeout_ms, int let_go)
{
    struct epoll_event events[4];

    if (let_go)
        pthread_mutex_unlock(&ctx->engine);
    for (;;) {
        int n = epoll_wait(fd, events, 4, timeout_ms);

        progress_woken(ctx, events, n);
        if (!let_go || pthread_mutex_trylock(&ctx->engine) == 0)
            return;
        timeout_ms = PROGRESS_LEND_MS;
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

/*
 * A turn that moved nothing, while requests are active: look at the set
 * once more, then sleep on a task's memory, or poll again (the first
 * PROGRESS_SPIN_POLLS times), or sleep on epoll set fd until an event, the
 * next deadline or max_ms.
 */
static void progress_idle(chorus__ctx_t *ctx, int fd, int let_go, int *idle_polls,
                          double next_deadline, int max_ms)
{
    int ms;

    progress_sleep(ctx, fd, 0, 0);
    if (progress_task_wait(ctx) || ++*idle_polls < PROGRESS_SPIN_POLLS)
        return;
    ms = chorus__ms_left(next_deadline);
    progress_sleep(ctx, fd, ms < max_ms ? ms : max_ms, let_go);
}

/* A turn of the loop: 1 when something moved, 0 when not, -1 when a fault failed every request. */
static int progress_step(chorus__ctx_t *ctx, progress_turn_t *turn)
{
    int rc;

    if (atomic_load(&ctx->aborted) || chorus__ctx_error(ctx) != CHORUS_OK) {
        progress_fail_all(ctx, CHORUS_ERR_ABORTED);
        return -1;
    }
    rc = progress_turn(ctx, turn);
    if (rc < 0) {
        progress_fail_all(ctx, (chorus_status_t)rc);
        return -1;
    }
    return rc;
}

static chorus_status_t progress_add_fd(chorus__ctx_t *ctx, int set, int fd)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};

    if (epoll_ctl(set, EPOLL_CTL_ADD, fd, &ev) != 0) {
        chorus_error("rank %d: epoll_ctl(add %d) failed: %m", ctx->rank, fd);
        return CHORUS_ERR_SYSTEM;
    }
    return CHORUS_OK;
}

/* Lend the transports' events to a driving thread (engine held): out of the progress thread's set. */
static void progress_lend(chorus__ctx_t *ctx)
{
    if (ctx->lent)
        return;
    for (int i = 0; i < ctx->nlanes; i++) {
        if (ctx->tl_watched[i])
            epoll_ctl(ctx->epoll_fd, EPOLL_CTL_DEL, ctx->tl[i]->event_fd(ctx->tl_ctx[i]), NULL);
    }
    ctx->lent = 1;
    /* An untimed sleep of the progress thread needs an end: the loan's (its doorbell alone). */
    if (ctx->sleep_untimed)
        progress_ring(ctx, ctx->wake_fd);
}

/* Take them back (engine held); one that is ready wakes the progress thread's next sleep. */
static void progress_take_back(chorus__ctx_t *ctx)
{
    if (!ctx->lent)
        return;
    for (int i = 0; i < ctx->nlanes; i++) {
        if (ctx->tl_watched[i] && progress_add_fd(ctx, ctx->epoll_fd,
                                                  ctx->tl[i]->event_fd(ctx->tl_ctx[i])) != CHORUS_OK)
            chorus__ctx_fail(ctx, CHORUS_ERR_SYSTEM);
    }
    ctx->lent = 0;
}

static void *progress_main(void *arg)
{
    chorus__ctx_t *ctx = arg;
    int idle_polls = 0;

    pthread_mutex_lock(&ctx->engine);
    while (!atomic_load(&ctx->stop)) {
        progress_turn_t turn;
        int rc = progress_step(ctx, &turn);

        if (ctx->lent && (ctx->active != NULL || chorus__now() >= ctx->lent_until))
            progress_take_back(ctx);
        if (rc > 0) {
            idle_polls = 0;
        } else if (rc < 0 || ctx->active == NULL) {
            /* Failed (nothing left to do), or nothing in flight: sleep until told, or until
             * the loan ends. */
            ctx->sleep_untimed = !ctx->lent;
            progress_sleep(ctx, ctx->epoll_fd, ctx->lent ? chorus__ms_left(ctx->lent_until) : -1,
                           1);
            ctx->sleep_untimed = 0;
        } else {
            progress_idle(ctx, ctx->epoll_fd, 1, &idle_polls, turn.next_deadline,
                          PROGRESS_MAX_SLEEP_MS);
        }
    }
    /* Stopping: whatever is still pending ends now. */
    progress_take_queue(ctx);
    for (chorus_request_t req = ctx->active, next; req != NULL; req = next) {
        next = req->next;
        chorus__request_complete(req, CHORUS_ERR_ABORTED);
    }
    ctx->active = NULL;
    pthread_mutex_unlock(&ctx->engine);
    return NULL;
}

/* Whether req is over (completed by the engine's holder, which the caller is). */
static int progress_req_done(chorus__ctx_t *ctx, chorus_request_t req)
{
    int done;

    pthread_mutex_lock(&ctx->lock);
    done = req->done;
    pthread_mutex_unlock(&ctx->lock);
    return done;
}

int chorus__progress_drive(chorus__ctx_t *ctx, chorus_request_t req)
{
    int idle_polls = 0, hook = chorus__wait_hook_on(), more, max_ms;
    double since = 0;
    struct timespec until;

    /* The progress thread may be in a turn, or in a task's wait (PROGRESS_TASK_SLEEP_US). Not
     * longer: a thread that waited for the engine through another's driven call could not make
     * the call that this one waits for. (The wall clock, which pthread_mutex_timedlock takes:
     * a jump of it only lengthens or shortens this wait.) */
    if (pthread_mutex_trylock(&ctx->engine) != 0) {
        until = chorus__timespec_in(CLOCK_REALTIME, PROGRESS_ENGINE_WAIT_S);
        if (pthread_mutex_timedlock(&ctx->engine, &until) != 0)
            return 0;
    }
    atomic_store(&ctx->driving, 1);
    progress_lend(ctx);
    while (!progress_req_done(ctx, req)) {
        progress_turn_t turn;
        int rc = progress_step(ctx, &turn);

        if (rc < 0)
            break;      /* every request failed, req with them */
        if (rc > 0) {
            idle_polls = 0;
            continue;
        }
        if (since == 0)
            since = chorus__now();
        /* With a wait hook (wait_hook.h), wake when it is due to run it. */
        max_ms = hook ? chorus__ms_left(chorus__wait_hook_due(since)) : PROGRESS_MAX_SLEEP_MS;
        progress_idle(ctx, ctx->drive_fd, 0, &idle_polls, turn.next_deadline, max_ms);
        if (hook)
            chorus__wait_hook_run(since);
    }
    atomic_store(&ctx->driving, 0);
    ctx->lent_until = chorus__now() + PROGRESS_LEND_MS * 1e-3;
    pthread_mutex_lock(&ctx->lock);
    more = ctx->active != NULL || ctx->queue_head != NULL;
    pthread_mutex_unlock(&ctx->lock);
    /* Work left in flight is the progress thread's again at once. */
    if (more)
        progress_take_back(ctx);
    pthread_mutex_unlock(&ctx->engine);
    if (more)
        chorus__progress_wake(ctx);
    return 1;
}

static void progress_close(chorus__ctx_t *ctx)
{
    int *fds[] = {&ctx->wake_fd, &ctx->drive_wake_fd, &ctx->drive_fd, &ctx->epoll_fd};

    for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++) {
        if (*fds[i] >= 0)
            close(*fds[i]);
        *fds[i] = -1;
    }
}

chorus_status_t chorus__progress_start(chorus__ctx_t *ctx)
{
    chorus_status_t status;
    int rc;

    ctx->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    ctx->drive_fd = epoll_create1(EPOLL_CLOEXEC);
    ctx->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ctx->drive_wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (ctx->epoll_fd < 0 || ctx->drive_fd < 0 || ctx->wake_fd < 0 || ctx->drive_wake_fd < 0) {
        chorus_error("rank %d: %s failed: %m", ctx->rank,
                     ctx->wake_fd < 0 || ctx->drive_wake_fd < 0 ? "eventfd" : "epoll_create1");
        status = CHORUS_ERR_SYSTEM;
        goto err;
    }
    /* The progress thread's set, and a driving thread's (chorus__progress_drive): the same
     * transports, a doorbell each, so that neither drains what the other was woken for. */
    status = progress_add_fd(ctx, ctx->epoll_fd, ctx->wake_fd);
    if (status == CHORUS_OK)
        status = progress_add_fd(ctx, ctx->drive_fd, ctx->drive_wake_fd);
    for (int i = 0; i < ctx->nlanes && status == CHORUS_OK; i++) {
        int fd = ctx->tl[i]->event_fd(ctx->tl_ctx[i]);

        status = progress_add_fd(ctx, ctx->epoll_fd, fd);
        if (status == CHORUS_OK)
            status = progress_add_fd(ctx, ctx->drive_fd, fd);
        ctx->tl_watched[i] = status == CHORUS_OK;
    }
    if (status != CHORUS_OK)
        goto err;
    rc = pthread_create(&ctx->thread, NULL, progress_main, ctx);
    if (rc != 0) {
        chorus_error("rank %d: pthread_create failed: %s", ctx->rank, strerror(rc));
        status = CHORUS_ERR_SYSTEM;
        goto err;
    }
    /* Its name in ps -L, top -H and debuggers (a failure costs only the name). */
    (void)pthread_setname_np(ctx->thread, "chorus-progress");
    ctx->thread_started = 1;
    return CHORUS_OK;

err:
    progress_close(ctx);
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
    progress_close(ctx);
}
