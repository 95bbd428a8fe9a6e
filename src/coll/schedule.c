/*
 * Schedules and their executor. A schedule is an array of steps whose
 * dependencies point backwards; the executor starts every step whose
 * dependencies are done, within a bounded window past the first
 * incomplete step, so a call costs O(window) however long the schedule.
 *
 * The executor never drives the transports: the caller (the context's
 * progress loop) does, then progresses each running task. A team step's
 * task is progressed here, as it polls memory rather than file descriptors.
 */
#include "coll/coll.h"

#include <stdlib.h>
#include <string.h>

#include "reduce/reduce.h"
#include "reduce/wire.h"
#include "util/log.h"
#include "util/time.h"

/* Steps scanned past the first incomplete one per pass. */
#define COLL_SCHED_WINDOW 512
#define COLL_SCHED_MIN_CAPACITY 16

enum { STEP_WAITING = 0, STEP_POSTED = 1, STEP_DONE = 2 };

static const chorus__task_ops_t sched_task_ops;
static void sched_trace_close(coll_sched_t *s, double now);

void coll_sched_init(coll_sched_t *sched, chorus_dtype_t dtype, chorus_op_t op, int nranks)
{
    memset(sched, 0, sizeof(*sched));
    chorus__task_init(&sched->head, &sched_task_ops, 0);
    sched->dtype = dtype;
    sched->op = op;
    sched->nranks = nranks;
    sched->status = CHORUS_OK;
    sched->failed_peer = -1;
    sched->wire = CHORUS_DTYPE_COUNT;
    sched->wire_scale = 1.0f;
}

chorus_status_t coll_sched_create(coll_scratch_pool_t *pool, chorus_dtype_t dtype,
                                  chorus_op_t op, int nranks, coll_sched_t **sched_p)
{
    coll_sched_t *s = malloc(sizeof(*s));

    if (s == NULL)
        return CHORUS_ERR_NO_MEMORY;
    coll_sched_init(s, dtype, op, nranks);
    s->pool = pool;
    s->owned = 1;
    *sched_p = s;
    return CHORUS_OK;
}

/*
 * Mark, for each peer, the send and the receive with the highest tag among
 * the transfers that move data (empty ones are never posted). Both ranks of
 * a pair build the same set of tags for the messages between them when
 * their calls match, so both mark the same message.
 */
static chorus_status_t sched_mark_final(coll_sched_t *s)
{
    size_t n = (size_t)s->nranks;
    long small[2 * 64];     /* every call builds its schedule: no allocation up to 64 ranks */
    long *last = 2 * n <= sizeof(small) / sizeof(small[0]) ? small
                                                            : malloc(2 * n * sizeof(*last));

    if (last == NULL)
        return CHORUS_ERR_NO_MEMORY;
    for (size_t i = 0; i < 2 * n; i++)
        last[i] = -1;
    for (size_t i = 0; i < s->nsteps; i++) {
        coll_step_t *step = &s->steps[i];
        long *slot;

        step->final = 0;
        if ((step->kind != COLL_STEP_SEND && step->kind != COLL_STEP_RECV) ||
            step->bytes == 0 || step->peer < 0 || (size_t)step->peer >= n)
            continue;
        slot = &last[2 * (size_t)step->peer + (step->kind == COLL_STEP_RECV)];
        if (*slot < 0 || s->steps[*slot].tag < step->tag)
            *slot = (long)i;
    }
    for (size_t i = 0; i < 2 * n; i++)
        if (last[i] >= 0)
            s->steps[last[i]].final = 1;
    if (last != small)
        free(last);
    return CHORUS_OK;
}

/* 1 when no step needs the transports' progress: no transfer, and team steps that poll memory. */
static int sched_is_local(const coll_sched_t *s)
{
    for (size_t i = 0; i < s->nsteps; i++) {
        const coll_step_t *step = &s->steps[i];

        if (step->kind == COLL_STEP_SEND || step->kind == COLL_STEP_RECV ||
            (step->kind == COLL_STEP_TEAM && !(step->task->flags & CHORUS__TASK_INLINE)))
            return 0;
    }
    return 1;
}

chorus_status_t coll_sched_bind(coll_sched_t *sched, tl_port_t *port, uint64_t tag_base)
{
    sched->port = port;
    sched->tag_base = tag_base;
    /* A call on one rank, for one: the calling thread may run it (request.c). */
    if (sched_is_local(sched))
        sched->head.flags |= CHORUS__TASK_INLINE;
    return sched_mark_final(sched);
}

/* 1 when some transfer is posted to the transport and not yet completed by it. */
static int sched_has_inflight(const coll_sched_t *s)
{
    size_t end = s->first_pending + COLL_SCHED_WINDOW;

    if (end > s->nsteps)
        end = s->nsteps;
    /* A team step's task holds no transport request: its finalize ends its part. */
    for (size_t i = s->first_pending; i < end; i++) {
        if (s->steps[i].state == STEP_POSTED && s->steps[i].kind != COLL_STEP_TEAM &&
            !s->steps[i].req.done)
            return 1;
    }
    return 0;
}

void coll_sched_finalize(coll_sched_t *sched)
{
    int owned = sched->owned;

    /* A call that failed or was given up ends its last wait here. */
    if (sched->trace != NULL && sched->trace_open)
        sched_trace_close(sched, chorus__now());

    if (sched->steps != NULL && sched_has_inflight(sched)) {
        /*
         * The transport still holds requests pointing into this schedule
         * (there is no cancel): freeing would let it write into freed
         * memory. Leak instead; the caller should fail the transports first.
         */
        chorus_error("schedule finalized with transfers in flight; leaking %zu steps",
                     sched->nsteps);
        memset(sched, 0, sizeof(*sched));
        return;
    }
    for (size_t i = 0; i < sched->nsteps; i++)
        chorus__task_finalize(sched->steps[i].task);
    for (size_t i = 0; i < sched->nscratch; i++)
        coll_pool_put(sched->pool, sched->scratch[i]);
    free(sched->scratch);
    free(sched->steps);
    if (owned) {
        free(sched);
        return;
    }
    memset(sched, 0, sizeof(*sched));
    sched->failed_peer = -1;
}

void *coll_sched_alloc(coll_sched_t *sched, size_t bytes)
{
    coll_pool_buf_t *list, buf;

    list = realloc(sched->scratch, (sched->nscratch + 1) * sizeof(*list));
    if (list == NULL)
        return NULL;
    sched->scratch = list;
    buf = coll_pool_get(sched->pool, bytes);
    if (buf.mem == NULL)
        return NULL;
    sched->scratch[sched->nscratch++] = buf;
    return buf.mem;
}

/*
 * Reserve and fill the common part of a new step. Steps may only be added
 * before execution starts: the transport holds pointers to the requests
 * inside the array, which growing it would move.
 */
static long sched_append(coll_sched_t *s, coll_step_kind_t kind, const long *deps, int ndeps)
{
    coll_step_t *step;
    long index = (long)s->nsteps;

    if (s->nsteps > 0 && (s->first_pending > 0 || s->steps[0].state != STEP_WAITING)) {
        chorus_error("step appended to a running schedule");
        return -1;
    }
    if (s->nsteps >= UINT32_MAX - 1) {
        chorus_error("schedule too long (%zu steps)", s->nsteps);
        return -1;
    }
    if (s->nsteps == s->capacity) {
        size_t cap = s->capacity ? s->capacity * 2 : COLL_SCHED_MIN_CAPACITY;
        coll_step_t *grown = realloc(s->steps, cap * sizeof(*grown));
        if (grown == NULL)
            return -1;
        s->steps = grown;
        s->capacity = cap;
    }
    step = &s->steps[s->nsteps];
    memset(step, 0, sizeof(*step));
    step->kind = (uint8_t)kind;
    step->peer = -1;
    for (int d = 0; d < ndeps; d++) {
        long dep = deps[d];
        /* Negative entries (an unset "previous step") and COLL_NO_DEP mean none. */
        if (dep < 0 || dep == (long)COLL_NO_DEP)
            continue;
        if (dep >= index) {
            chorus_error("step %ld depends on later step %ld", index, dep);
            return -1;
        }
        if (step->ndeps == COLL_STEP_MAX_DEPS) {
            chorus_error("step %ld has more than %d dependencies", index, COLL_STEP_MAX_DEPS);
            return -1;
        }
        step->deps[step->ndeps++] = (uint32_t)dep;
    }
    s->nsteps++;
    return index;
}

long coll_sched_send(coll_sched_t *s, int peer, uint32_t tag, const void *src, size_t bytes,
                     const long *deps, int ndeps)
{
    long i = sched_append(s, COLL_STEP_SEND, deps, ndeps);

    if (i >= 0) {
        s->steps[i].peer = peer;
        s->steps[i].tag = tag;
        s->steps[i].src = src;
        s->steps[i].bytes = bytes;
    }
    return i;
}

long coll_sched_recv(coll_sched_t *s, int peer, uint32_t tag, void *dst, size_t bytes,
                     const long *deps, int ndeps)
{
    long i = sched_append(s, COLL_STEP_RECV, deps, ndeps);

    if (i >= 0) {
        s->steps[i].peer = peer;
        s->steps[i].tag = tag;
        s->steps[i].dst = dst;
        s->steps[i].bytes = bytes;
    }
    return i;
}

long coll_sched_reduce(coll_sched_t *s, void *dst, const void *a, const void *b, size_t bytes,
                       const long *deps, int ndeps)
{
    long i = sched_append(s, COLL_STEP_REDUCE, deps, ndeps);

    if (i >= 0) {
        s->steps[i].dst = dst;
        s->steps[i].src = a;
        s->steps[i].src2 = b;
        s->steps[i].bytes = bytes;
    }
    return i;
}

long coll_sched_copy(coll_sched_t *s, void *dst, const void *src, size_t bytes,
                     const long *deps, int ndeps)
{
    long i = sched_append(s, COLL_STEP_COPY, deps, ndeps);

    if (i >= 0) {
        s->steps[i].dst = dst;
        s->steps[i].src = src;
        s->steps[i].bytes = bytes;
    }
    return i;
}

long coll_sched_finalize_op(coll_sched_t *s, void *buf, size_t bytes,
                            const long *deps, int ndeps)
{
    long i = sched_append(s, COLL_STEP_FINALIZE, deps, ndeps);

    if (i >= 0) {
        s->steps[i].dst = buf;
        s->steps[i].bytes = bytes;
    }
    return i;
}

long coll_sched_join(coll_sched_t *s, const long *deps, size_t n)
{
    long *level = NULL, out = -1;
    size_t k = 0;

    for (size_t i = 0; i < n; i++)
        k += deps[i] >= 0;
    if (k == 0)
        return -1;
    level = malloc(k * sizeof(*level));
    if (level == NULL)
        return -2;
    k = 0;
    for (size_t i = 0; i < n; i++) {
        if (deps[i] >= 0)
            level[k++] = deps[i];
    }
    /* Each pass replaces groups of up to COLL_STEP_MAX_DEPS steps by one empty copy. */
    while (k > 1) {
        size_t next = 0;
        for (size_t i = 0; i < k; i += COLL_STEP_MAX_DEPS) {
            int m = (int)(k - i < COLL_STEP_MAX_DEPS ? k - i : COLL_STEP_MAX_DEPS);
            long idx = coll_sched_copy(s, NULL, NULL, 0, level + i, m);
            if (idx < 0) {
                free(level);
                return -2;
            }
            level[next++] = idx;
        }
        k = next;
    }
    out = level[0];
    free(level);
    return out;
}

int coll_sched_step_done(const coll_sched_t *s, long idx)
{
    return idx < 0 || ((size_t)idx < s->nsteps && s->steps[idx].state == STEP_DONE);
}

long coll_sched_join_since(coll_sched_t *s, long first)
{
    long *sinks, out;
    unsigned char *needed;
    size_t n, k = 0;

    if (first < 0)
        first = 0;
    if ((size_t)first >= s->nsteps)
        return -1;
    n = s->nsteps - (size_t)first;
    /*
     * Only the steps no later step of the range waits for: a step starts
     * after its dependencies, so when these are done, all are.
     */
    needed = calloc(n, 1);
    sinks = malloc(n * sizeof(*sinks));
    if (needed == NULL || sinks == NULL) {
        free(needed);
        free(sinks);
        return -2;
    }
    for (size_t i = 0; i < n; i++) {
        const coll_step_t *st = &s->steps[(size_t)first + i];
        for (int d = 0; d < st->ndeps; d++) {
            if (st->deps[d] >= (uint32_t)first)
                needed[st->deps[d] - (uint32_t)first] = 1;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (!needed[i])
            sinks[k++] = first + (long)i;
    }
    out = coll_sched_join(s, sinks, k);
    free(needed);
    free(sinks);
    return out;
}

/* ---- executor ----------------------------------------------------------- */

static int sched_fail(coll_sched_t *s, chorus_status_t status, int peer)
{
    if (s->status == CHORUS_OK) {
        s->status = status;
        s->failed_peer = peer;
        chorus_debug("schedule failed with status %d (peer %d)", (int)status, peer);
    }
    return status;
}

static int step_deps_done(const coll_sched_t *s, const coll_step_t *step)
{
    for (int d = 0; d < step->ndeps; d++) {
        uint32_t dep = step->deps[d];
        if (dep >= s->first_pending && s->steps[dep].state != STEP_DONE)
            return 0;
    }
    return 1;
}

/* Whether the schedule's transfers are compressed (float32 values, 16 bits on the wire). */
static int sched_wired(const coll_sched_t *s)
{
    return s->wire != CHORUS_DTYPE_COUNT && s->dtype == CHORUS_FLOAT32;
}

/* Bytes a transfer step moves: its own, or half of them on a 16-bit wire. */
static size_t step_wire_bytes(const coll_sched_t *s, const coll_step_t *step)
{
    return sched_wired(s) ? step->bytes / sizeof(float) * 2 : step->bytes;
}

/*
 * Compressed: every transfer's 16-bit values get their place in one scratch
 * buffer of the schedule's, at its first transfer. 0, or -1 out of memory.
 */
static int sched_wire_prepare(coll_sched_t *s)
{
    size_t total = 0, off = 0;
    char *base;

    for (size_t i = 0; i < s->nsteps; i++)
        if (s->steps[i].kind == COLL_STEP_SEND || s->steps[i].kind == COLL_STEP_RECV)
            total += step_wire_bytes(s, &s->steps[i]);
    base = coll_sched_alloc(s, total > 0 ? total : 1);
    if (base == NULL)
        return -1;
    for (size_t i = 0; i < s->nsteps; i++) {
        coll_step_t *step = &s->steps[i];

        if (step->kind != COLL_STEP_SEND && step->kind != COLL_STEP_RECV)
            continue;
        step->wire_buf = base + off;
        off += step_wire_bytes(s, step);
    }
    return 0;
}

/* A posted transfer whose request is done: check it. Returns 0 or a negative status. */
static int step_complete_transfer(coll_sched_t *s, coll_step_t *step)
{
    size_t expected = step_wire_bytes(s, step);

    if (step->req.status != CHORUS_OK)
        return sched_fail(s, step->req.status, step->peer);
    if (step->kind == COLL_STEP_RECV && step->req.length != expected) {
        chorus_error("received %zu bytes from peer %d, expected %zu (tag %u)",
                     step->req.length, step->peer, expected, step->tag);
        return sched_fail(s, step->req.length > expected ? CHORUS_ERR_TRUNCATED
                                                         : CHORUS_ERR_PROTOCOL,
                          step->peer);
    }
    if (step->kind == COLL_STEP_RECV && step->wire_buf != NULL)
        chorus__wire_widen(s->wire, step->dst, step->wire_buf, step->bytes / sizeof(float),
                           s->wire_scale);
    step->state = STEP_DONE;
    return 0;
}

static int step_run_local(coll_sched_t *s, coll_step_t *step)
{
    size_t esize = chorus_dtype_size(s->dtype);

    switch (step->kind) {
    case COLL_STEP_REDUCE: {
        chorus__reduce_fn fn = chorus__reduce_kernel(s->dtype, s->op);
        if (fn == NULL || esize == 0)
            return sched_fail(s, CHORUS_ERR_INVALID_ARG, -1);
        if (step->bytes > 0)
            fn(step->dst, step->src, step->src2, step->bytes / esize);
        break;
    }
    case COLL_STEP_COPY:
        if (step->bytes > 0 && step->dst != step->src)
            memmove(step->dst, step->src, step->bytes);
        break;
    case COLL_STEP_FINALIZE:
        if (esize == 0)
            return sched_fail(s, CHORUS_ERR_INVALID_ARG, -1);
        if (step->bytes > 0)
            chorus__reduce_finalize(s->dtype, s->op, step->dst, step->bytes / esize,
                                    s->nranks);
        break;
    default:
        return sched_fail(s, CHORUS_ERR_INTERNAL, -1);
    }
    step->state = STEP_DONE;
    return 0;
}

/* A team step's task moved: 0, or a negative status. */
static int step_team_progress(coll_sched_t *s, coll_step_t *step, int *moved)
{
    int rc = chorus__task_progress(step->task);

    if (rc < 0)
        return sched_fail(s, (chorus_status_t)rc, step->task->failed_peer);
    if (rc == 0)
        return 0;
    *moved = 1;
    if (step->task->status != CHORUS_OK)
        return sched_fail(s, step->task->status, step->task->failed_peer);
    step->state = STEP_DONE;
    return 0;
}

/* Start a step whose dependencies are done. Returns 0 or a negative status. */
static int step_start(coll_sched_t *s, coll_step_t *step)
{
    chorus_status_t st;
    uint64_t tag;
    int moved = 0;

    if (step->kind == COLL_STEP_TEAM) {
        st = chorus__task_post(step->task);
        if (st != CHORUS_OK)
            return sched_fail(s, st, -1);
        step->state = STEP_POSTED;
        return step_team_progress(s, step, &moved);
    }
    if (step->kind != COLL_STEP_SEND && step->kind != COLL_STEP_RECV)
        return step_run_local(s, step);
    /* Both sides build the same sizes, so neither posts an empty transfer. */
    if (step->bytes == 0) {
        step->state = STEP_DONE;
        return 0;
    }
    memset(&step->req, 0, sizeof(step->req));
    tag = s->tag_base | step->tag | (step->final ? TL_TAG_FINAL : 0);
    if (sched_wired(s)) {
        if (step->wire_buf == NULL && sched_wire_prepare(s) != 0)
            return sched_fail(s, CHORUS_ERR_NO_MEMORY, -1);
        if (step->kind == COLL_STEP_SEND)
            chorus__wire_narrow(s->wire, step->wire_buf, step->src,
                                step->bytes / sizeof(float), s->wire_scale);
    }
    if (step->kind == COLL_STEP_SEND)
        st = s->port->send_nb(s->port, step->peer, tag,
                              step->wire_buf ? step->wire_buf : step->src,
                              step_wire_bytes(s, step), &step->req);
    else
        st = s->port->recv_nb(s->port, step->peer, tag,
                              step->wire_buf ? step->wire_buf : step->dst,
                              step_wire_bytes(s, step), &step->req);
    if (st != CHORUS_OK)
        return sched_fail(s, st, step->peer);
    step->state = STEP_POSTED;
    if (step->req.done)
        return step_complete_transfer(s, step);
    return 0;
}

/* One pass over the window. Returns 1 when a step moved, 0 when none, or a negative status. */
static int sched_pass(coll_sched_t *s)
{
    size_t end;
    int moved = 0;
    int rc;

    while (s->first_pending < s->nsteps && s->steps[s->first_pending].state == STEP_DONE)
        s->first_pending++;
    end = s->first_pending + COLL_SCHED_WINDOW;
    if (end > s->nsteps)
        end = s->nsteps;
    for (size_t i = s->first_pending; i < end; i++) {
        coll_step_t *step = &s->steps[i];

        if (step->state == STEP_DONE)
            continue;
        if (step->state == STEP_POSTED && step->kind == COLL_STEP_TEAM) {
            if ((rc = step_team_progress(s, step, &moved)) < 0)
                return rc;
            continue;
        }
        if (step->state == STEP_POSTED) {
            if (!step->req.done)
                continue;
            rc = step_complete_transfer(s, step);
        } else {
            if (!step_deps_done(s, step))
                continue;
            rc = step_start(s, step);
        }
        if (rc < 0)
            return rc;
        moved = 1;
    }
    return moved;
}

/* ---- the trace of its waits ---------------------------------------------- */

/* The wait on step i ends at now: one slice named for what it waited on. */
static void sched_trace_close(coll_sched_t *s, double now)
{
    const coll_step_t *step = &s->steps[s->trace_step];
    const char *cat = "wait";
    char name[CHORUS__TRACE_NAME_MAX], args[96];

    switch (step->kind) {
    case COLL_STEP_SEND:
        snprintf(name, sizeof(name), "send to %d", step->peer);
        break;
    case COLL_STEP_RECV:
        snprintf(name, sizeof(name), "recv from %d", step->peer);
        break;
    case COLL_STEP_TEAM:
        cat = "stage";
        snprintf(name, sizeof(name), "node %s (%s)",
                 coll_type_name((coll_type_t)step->team_coll), step->task->ops->name);
        break;
    default:
        cat = "stage";
        snprintf(name, sizeof(name), "local step");
        break;
    }
    snprintf(args, sizeof(args), "\"step\":%zu,\"steps\":%zu,\"bytes\":%zu", s->trace_step,
             s->nsteps, step->bytes);
    chorus__trace_slice(s->trace, s->trace_tid, cat, name, s->trace_since, now, args);
    s->trace_open = 0;
}

/* After a pass: close the wait that ended, open one on the step the schedule now waits on. */
static void sched_trace_head(coll_sched_t *s)
{
    double now;

    if (s->trace_open && s->trace_step == s->first_pending)
        return;
    now = chorus__now();
    if (s->trace_open)
        sched_trace_close(s, now);
    if (s->first_pending < s->nsteps && s->status == CHORUS_OK) {
        s->trace_open = 1;
        s->trace_step = s->first_pending;
        s->trace_since = now;
    }
}

int coll_sched_progress(coll_sched_t *s)
{
    int rc;

    if (s->status != CHORUS_OK)
        return s->status;
    do {
        rc = sched_pass(s);
    } while (rc > 0);
    if (s->trace != NULL)
        sched_trace_head(s);
    if (rc < 0)
        return rc;
    return s->first_pending == s->nsteps ? 1 : 0;
}

/* ---- the schedule as a task ---------------------------------------------- */

static coll_sched_t *sched_of(chorus__task_t *task)
{
    return (coll_sched_t *)task;
}

static int sched_task_progress(chorus__task_t *task)
{
    coll_sched_t *s = sched_of(task);
    int rc = coll_sched_progress(s);

    if (rc < 0)
        task->failed_peer = s->failed_peer;
    return rc;
}

/* A team step in progress waits on its peers' memory: sleep there. */
static int sched_task_wait(chorus__task_t *task, unsigned max_us)
{
    coll_sched_t *s = sched_of(task);
    size_t end = s->first_pending + COLL_SCHED_WINDOW;

    if (end > s->nsteps)
        end = s->nsteps;
    for (size_t i = s->first_pending; i < end; i++) {
        coll_step_t *step = &s->steps[i];

        if (step->kind == COLL_STEP_TEAM && step->state == STEP_POSTED)
            return chorus__task_wait(step->task, max_us);
    }
    return 0;
}

/* Every rank skips the call alike: its team steps still take their turns. */
static void sched_task_skip(chorus__task_t *task, chorus_status_t status)
{
    coll_sched_t *s = sched_of(task);

    for (size_t i = 0; i < s->nsteps; i++) {
        if (s->steps[i].task != NULL)
            chorus__task_skip(s->steps[i].task, status);
    }
}

static void sched_task_fail(chorus__task_t *task, chorus_status_t status)
{
    coll_sched_t *s = sched_of(task);

    for (size_t i = 0; i < s->nsteps; i++) {
        if (s->steps[i].task != NULL)
            chorus__task_fail(s->steps[i].task, status);
    }
}

static void sched_task_finalize(chorus__task_t *task)
{
    coll_sched_finalize(sched_of(task));
}

static const chorus__task_ops_t sched_task_ops = {
    .name = "schedule",
    .progress = sched_task_progress,
    .wait = sched_task_wait,
    .skip = sched_task_skip,
    .fail = sched_task_fail,
    .finalize = sched_task_finalize,
};

void coll_task_trace(chorus__task_t *task, chorus__trace_t *trace, uint32_t tid)
{
    if (task == NULL || task->ops != &sched_task_ops)
        return;
    sched_of(task)->trace = trace;
    sched_of(task)->trace_tid = tid;
}

const char *coll_task_team_name(const chorus__task_t *task)
{
    const coll_sched_t *s;

    if (task == NULL)
        return NULL;
    if (task->ops != &sched_task_ops)
        return task->ops->name;
    s = (const coll_sched_t *)task;
    for (size_t i = 0; i < s->nsteps; i++) {
        if (s->steps[i].kind == COLL_STEP_TEAM)
            return s->steps[i].task->ops->name;
    }
    return NULL;
}
