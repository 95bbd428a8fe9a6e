/* The task interface's common part, and composite tasks (see task.h). */
#include "transports/base/task.h"

#include <stdlib.h>

#include "util/shared_mem.h"

void chorus__task_init(chorus__task_t *task, const chorus__task_ops_t *ops, unsigned flags)
{
    task->ops = ops;
    task->state = CHORUS__TASK_NEW;
    task->flags = flags;
    task->status = CHORUS_OK;
    task->failed_peer = -1;
    task->held[0] = task->held[1] = NULL;
}

chorus_status_t chorus__task_post(chorus__task_t *task)
{
    chorus_status_t status = task->ops->post != NULL ? task->ops->post(task) : CHORUS_OK;

    if (status != CHORUS_OK) {
        task->status = status;
        task->state = CHORUS__TASK_DONE;
        return status;
    }
    task->state = CHORUS__TASK_POSTED;
    return CHORUS_OK;
}

int chorus__task_progress(chorus__task_t *task)
{
    int rc;

    if (task->state == CHORUS__TASK_DONE)
        return 1;
    rc = task->ops->progress(task);
    if (rc == 1)
        task->state = CHORUS__TASK_DONE;
    else if (rc < 0 && task->status == CHORUS_OK)
        task->status = (chorus_status_t)rc;
    return rc;
}

int chorus__task_wait(chorus__task_t *task, unsigned max_us)
{
    if (task->state != CHORUS__TASK_POSTED || task->ops->wait == NULL)
        return 0;
    return task->ops->wait(task, max_us);
}

void chorus__task_skip(chorus__task_t *task, chorus_status_t status)
{
    if (task->state != CHORUS__TASK_NEW)
        return;
    if (task->ops->skip != NULL)
        task->ops->skip(task, status);
    task->status = status;
    task->state = CHORUS__TASK_DONE;
}

void chorus__task_fail(chorus__task_t *task, chorus_status_t status)
{
    if (task->ops->fail != NULL)
        task->ops->fail(task, status);
}

void chorus__task_hold(chorus__task_t *task, const void *sendbuf, const void *recvbuf)
{
    /* Most processes have no shareable allocations: one look says so for both buffers. */
    if (chorus__shared_count() == 0) {
        task->held[0] = task->held[1] = NULL;
        return;
    }
    task->held[0] = chorus__shared_hold(sendbuf);
    task->held[1] = chorus__shared_hold(recvbuf);
}

void chorus__task_unhold(chorus__task_t *task)
{
    if (task->held[0] == NULL && task->held[1] == NULL)
        return;
    chorus__shared_release(task->held[0]);
    chorus__shared_release(task->held[1]);
    task->held[0] = task->held[1] = NULL;
}

int chorus__task_again(chorus__task_t *task, const void *sendbuf, void *recvbuf)
{
    if (task->ops->again == NULL || task->state != CHORUS__TASK_DONE ||
        task->status != CHORUS_OK || task->ops->again(task, sendbuf, recvbuf) != 0)
        return -1;
    task->state = CHORUS__TASK_NEW;
    task->failed_peer = -1;
    return 0;
}

void chorus__task_finalize(chorus__task_t *task)
{
    if (task == NULL)
        return;
    chorus__shared_release(task->held[0]);
    chorus__shared_release(task->held[1]);
    task->ops->finalize(task);
}

const char *chorus__task_served_by(const chorus__task_t *task)
{
    return task != NULL && task->ops->served_by != NULL ? task->ops->served_by(task) : NULL;
}

/* ---- composite tasks ------------------------------------------------------ */

typedef struct {
    chorus__task_t *task;       /* NULL for a function step */
    chorus__task_fn fn;
    void *arg;
} composite_step_t;

typedef struct {
    chorus__task_t head;
    composite_step_t *steps;
    int nsteps;
    int capacity;
    int current;                /* the step running */
} composite_t;

static composite_t *composite_of(chorus__task_t *task)
{
    return (composite_t *)task;
}

/* The steps not run yet keep their turns, then the composite is over with status. */
static int composite_end(composite_t *c, chorus_status_t status)
{
    for (int i = c->current; i < c->nsteps; i++) {
        if (c->steps[i].task != NULL)
            chorus__task_skip(c->steps[i].task, status);
    }
    c->current = c->nsteps;
    c->head.status = status;
    return 1;
}

static int composite_progress(chorus__task_t *task)
{
    composite_t *c = composite_of(task);

    while (c->current < c->nsteps) {
        composite_step_t *step = &c->steps[c->current];
        chorus_status_t status;
        int rc;

        if (step->task == NULL) {
            status = step->fn(step->arg);
            c->current++;
            if (status != CHORUS_OK)
                return composite_end(c, status);
            continue;
        }
        if (step->task->state == CHORUS__TASK_NEW &&
            (status = chorus__task_post(step->task)) != CHORUS_OK) {
            c->current++;
            return composite_end(c, status);
        }
        rc = chorus__task_progress(step->task);
        if (rc < 0) {
            task->failed_peer = step->task->failed_peer;
            return rc;
        }
        if (rc == 0)
            return 0;
        c->current++;
        if (step->task->status != CHORUS_OK)
            return composite_end(c, step->task->status);
    }
    return 1;
}

static int composite_wait(chorus__task_t *task, unsigned max_us)
{
    composite_t *c = composite_of(task);

    if (c->current >= c->nsteps || c->steps[c->current].task == NULL)
        return 0;
    return chorus__task_wait(c->steps[c->current].task, max_us);
}

static void composite_skip(chorus__task_t *task, chorus_status_t status)
{
    composite_end(composite_of(task), status);
}

static void composite_fail(chorus__task_t *task, chorus_status_t status)
{
    composite_t *c = composite_of(task);

    for (int i = 0; i < c->nsteps; i++) {
        if (c->steps[i].task != NULL)
            chorus__task_fail(c->steps[i].task, status);
    }
}

static void composite_finalize(chorus__task_t *task)
{
    composite_t *c = composite_of(task);

    for (int i = 0; i < c->nsteps; i++)
        chorus__task_finalize(c->steps[i].task);
    free(c->steps);
    free(c);
}

static const chorus__task_ops_t composite_ops = {
    .name = "composite",
    .progress = composite_progress,
    .wait = composite_wait,
    .skip = composite_skip,
    .fail = composite_fail,
    .finalize = composite_finalize,
};

chorus_status_t chorus__composite_create(chorus__task_t **task_p)
{
    composite_t *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return CHORUS_ERR_NO_MEMORY;
    /* Inline until a step that is not joins. */
    chorus__task_init(&c->head, &composite_ops, CHORUS__TASK_INLINE);
    *task_p = &c->head;
    return CHORUS_OK;
}

static chorus_status_t composite_push(composite_t *c, composite_step_t step)
{
    if (c->nsteps == c->capacity) {
        int cap = c->capacity ? 2 * c->capacity : 4;
        composite_step_t *grown = realloc(c->steps, (size_t)cap * sizeof(*grown));

        if (grown == NULL)
            return CHORUS_ERR_NO_MEMORY;
        c->steps = grown;
        c->capacity = cap;
    }
    c->steps[c->nsteps++] = step;
    return CHORUS_OK;
}

chorus_status_t chorus__composite_add_task(chorus__task_t *composite, chorus__task_t *sub)
{
    composite_t *c = composite_of(composite);
    chorus_status_t status = composite_push(c, (composite_step_t){.task = sub});

    if (status != CHORUS_OK) {
        chorus__task_finalize(sub);
        return status;
    }
    composite->flags &= sub->flags;
    return CHORUS_OK;
}

chorus_status_t chorus__composite_add_fn(chorus__task_t *composite, chorus__task_fn fn, void *arg)
{
    return composite_push(composite_of(composite), (composite_step_t){.fn = fn, .arg = arg});
}

chorus__task_t *chorus__composite_sub(chorus__task_t *composite, int i)
{
    composite_t *c = composite_of(composite);

    return i >= 0 && i < c->nsteps ? c->steps[i].task : NULL;
}
