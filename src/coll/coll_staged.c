/*
 * Calls on CUDA device buffers, run by the host algorithms on page-locked
 * copies: one task that
 *
 *   1. copies what this rank's call reads (its sendbuf) from the device,
 *   2. runs the host algorithm's task on the copies,
 *   3. copies what the call writes (its recvbuf) back to the device,
 *
 * each copy on the call's stream (the caller's, or the library's own), and
 * polls the copies' events, so no thread blocks on the device. Only this
 * rank's buffers are staged: the other ranks of the call see a host call,
 * whatever memory theirs is in.
 *
 * With the caller's stream, 1 is queued on it when the call is made, so the
 * call reads what the stream's earlier work wrote. When the result goes to
 * the device and the driver can make a stream wait for a word of host
 * memory, 3 is queued then too, behind such a wait on the block's flag: the
 * stream's later work sees the result, and the call need not be waited for
 * (coll_staged_enqueued). The flag is stored once 2 is over, or when the
 * call ends any other way, so the stream never waits forever.
 *
 * A buffer in host memory is used where it is. When both buffers are on
 * the device and overlap (the in-place layouts), one staging block holds
 * both at the same distance apart, so the algorithm sees the in-place call.
 */
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "reduce/device.h"
#include "util/log.h"

enum { STAGED_COPY_IN, STAGED_RUN, STAGED_COPY_OUT, STAGED_OVER };

/* The block starts with the flag word, on a line of its own; the staged data follows. */
#define STAGED_FLAG_BYTES 64

struct coll_staged {
    chorus__task_t task;
    chorus__task_t *inner;      /* the host algorithm's task, on the staged buffers */
    void *stream;
    int phase;
    chorus_status_t fault;      /* a device error that ends the call as a fault */
    void *event;                /* the copy in flight, or NULL */
    void *event_out;            /* enqueued: the copy out, queued behind the flag's wait */
    int enqueued;               /* the copy out waits on the stream for the flag */
    char *block;                /* the page-locked staging memory, or NULL */
    uint32_t *flag;             /* the block's first word: 1 once the result is in the block */
    /* The device ranges the call reads and writes, and where they sit in block. */
    const void *send_dev;
    size_t send_bytes;
    char *send_host;
    void *recv_dev;
    size_t recv_bytes;
    char *recv_host;
};

#define STAGED(t) ((coll_staged_t *)(t))

/* Let the stream's copy out go: the result is in the block, or the call is over without one. */
static void staged_flag_set(coll_staged_t *st)
{
    if (st->flag != NULL)
        __atomic_store_n(st->flag, 1u, __ATOMIC_RELEASE);
}

/* Wait for a copy into or out of the block to end, and free its event. */
static void staged_event_drain(void **event_p)
{
    if (*event_p == NULL)
        return;
    (void)chorus__device_event_finish(*event_p);
    chorus__device_event_free(*event_p);
    *event_p = NULL;
}

static void staged_release(coll_staged_t *st)
{
    /* A stream still waiting on the flag copies whatever the block holds, but goes on. */
    staged_flag_set(st);
    staged_event_drain(&st->event);
    staged_event_drain(&st->event_out);
    if (st->block != NULL)
        chorus__device_pinned_put(st->block - STAGED_FLAG_BYTES);
    st->block = NULL;
    st->flag = NULL;
}

chorus_status_t coll_staged_begin(const coll_args_t *args, coll_args_t *host_p,
                                  coll_staged_t **staged_p)
{
    size_t esize = chorus_dtype_size(args->dtype), elems[2], bytes = 0;
    uintptr_t s = (uintptr_t)args->sendbuf, r = (uintptr_t)args->recvbuf, lo = 0;
    int send_dev, recv_dev, shared = 0;
    coll_staged_t *st;

    coll_args_elems(args, (size_t)args->size, elems);
    st = calloc(1, sizeof(*st));
    if (st == NULL)
        return CHORUS_ERR_NO_MEMORY;
    st->stream = args->stream;
    *host_p = *args;
    host_p->mem = COLL_MEM_HOST;
    host_p->stream = NULL;
    send_dev = (args->dev_bufs & COLL_DEV_SEND) != 0;
    recv_dev = (args->dev_bufs & COLL_DEV_RECV) != 0;
    if (send_dev) {
        st->send_dev = args->sendbuf;
        st->send_bytes = elems[0] * esize;
    }
    if (recv_dev) {
        st->recv_dev = args->recvbuf;
        st->recv_bytes = elems[1] * esize;
    }
    /* Overlapping device ranges share one stretch of the block, at the same distance apart. */
    shared = send_dev && recv_dev && s < r + st->recv_bytes && r < s + st->send_bytes;
    if (shared) {
        uintptr_t hi = s + st->send_bytes > r + st->recv_bytes ? s + st->send_bytes
                                                               : r + st->recv_bytes;

        lo = s < r ? s : r;
        bytes = (size_t)(hi - lo);
    } else {
        bytes = st->send_bytes + st->recv_bytes;
    }
    if (bytes > 0) {
        st->block = chorus__device_pinned_get(STAGED_FLAG_BYTES + bytes);
        if (st->block == NULL) {
            free(st);
            chorus_error("rank %d: no page-locked memory for a %s of %zu bytes on the device",
                         args->rank, coll_type_name(args->coll), bytes);
            return CHORUS_ERR_NO_MEMORY;
        }
        st->flag = (uint32_t *)st->block;
        *st->flag = 0;
        st->block += STAGED_FLAG_BYTES;
    }
    /* A buffer this rank does not touch (a broadcast's non-root sendbuf, a reduce's non-root
       recvbuf) goes to the algorithm as NULL, which those calls allow: it may be device
       memory, which was not looked up. */
    host_p->dev_bufs = 0;
    if (!coll_args_reads_send(args))
        host_p->sendbuf = NULL;
    if (!coll_args_writes_recv(args))
        host_p->recvbuf = NULL;
    if (send_dev) {
        st->send_host = shared ? st->block + (s - lo) : st->block;
        host_p->sendbuf = st->send_host;
    }
    if (recv_dev) {
        st->recv_host = shared ? st->block + (r - lo) : st->block + st->send_bytes;
        host_p->recvbuf = st->recv_host;
    }
    *staged_p = st;
    return CHORUS_OK;
}

void coll_staged_free(coll_staged_t *st)
{
    if (st == NULL)
        return;
    staged_release(st);
    chorus__task_finalize(st->inner);
    free(st);
}

/* Start a copy of bytes on stream (nothing when 0); *event_p is then polled. */
static chorus_status_t staged_copy(void *dst, const void *src, size_t bytes, void *stream,
                                   void **event_p)
{
    if (bytes == 0)
        return CHORUS_OK;
    return chorus__device_copy_start(dst, src, bytes, stream, event_p);
}

/*
 * A device error fails the context (progress returns it) rather than the
 * post: the other ranks' calls wait for this one, and a fault is what tells
 * them it is gone.
 */
static chorus_status_t staged_post(chorus__task_t *task)
{
    coll_staged_t *st = STAGED(task);

    st->phase = STAGED_COPY_IN;
    /* On the caller's stream the copy in was queued with the call (staged_enqueue). */
    if (st->stream == NULL && st->fault == CHORUS_OK)
        st->fault = staged_copy(st->send_host, st->send_dev, st->send_bytes, NULL, &st->event);
    return CHORUS_OK;
}

/*
 * On the caller's stream, when the call is made: the copy in (or, with
 * nothing to copy, an event: the call still waits for the stream's earlier
 * work), then where it can be, the copy out behind a wait for the flag.
 */
static void staged_enqueue(coll_staged_t *st)
{
    if (st->send_dev == NULL)
        st->fault = chorus__device_event_record(st->stream, &st->event);
    else
        st->fault = staged_copy(st->send_host, st->send_dev, st->send_bytes, st->stream,
                                &st->event);
    if (st->fault != CHORUS_OK || st->recv_dev == NULL ||
        chorus__device_stream_wait(st->stream, st->flag, 1u) != CHORUS_OK)
        return;
    /* From here the stream waits for the flag: every way out of the call stores it. */
    st->enqueued = 1;
    st->fault = staged_copy(st->recv_dev, st->recv_host, st->recv_bytes, st->stream,
                            &st->event_out);
}

/* 1 when the copy in flight (if any) is done, 0 while it runs, < 0 when it failed. */
static int staged_copy_done(coll_staged_t *st)
{
    int rc;

    if (st->event == NULL)
        return 1;
    rc = chorus__device_event_done(st->event);
    if (rc == 1) {
        chorus__device_event_free(st->event);
        st->event = NULL;
    }
    return rc;
}

/* The call is over with status (CHORUS_OK or the error that ended it). */
static int staged_over(coll_staged_t *st, chorus_status_t status)
{
    staged_flag_set(st);   /* a call that failed lets the stream go on too */
    st->phase = STAGED_OVER;
    st->task.status = status;
    return 1;
}

static int staged_progress(chorus__task_t *task)
{
    coll_staged_t *st = STAGED(task);
    chorus_status_t status;
    int rc;

    if (st->fault != CHORUS_OK)
        return (int)st->fault;
    switch (st->phase) {
    case STAGED_COPY_IN:
        rc = staged_copy_done(st);
        if (rc <= 0)
            return rc;
        st->phase = STAGED_RUN;
        status = chorus__task_post(st->inner);
        if (status != CHORUS_OK)
            return staged_over(st, status);
        /* fall through */
    case STAGED_RUN:
        rc = chorus__task_progress(st->inner);
        if (rc <= 0)
            return rc;
        if (st->inner->status != CHORUS_OK)
            return staged_over(st, st->inner->status);
        st->phase = STAGED_COPY_OUT;
        if (st->enqueued) {
            /* The copy out is queued on the stream already: let it go. */
            staged_flag_set(st);
            st->event = st->event_out;
            st->event_out = NULL;
        } else {
            st->fault = staged_copy(st->recv_dev, st->recv_host, st->recv_bytes, st->stream,
                                    &st->event);
            if (st->fault != CHORUS_OK)
                return (int)st->fault;
        }
        /* fall through */
    case STAGED_COPY_OUT:
        rc = staged_copy_done(st);
        if (rc <= 0)
            return rc;
        return staged_over(st, CHORUS_OK);
    default:
        return 1;
    }
}

/* A copy in flight is this task's own to wait on; the algorithm's waits are the inner's. */
static int staged_wait(chorus__task_t *task, unsigned max_us)
{
    coll_staged_t *st = STAGED(task);

    if (st->phase == STAGED_RUN)
        return chorus__task_wait(st->inner, max_us);
    if (st->event == NULL || st->fault != CHORUS_OK)
        return 0;
    chorus__device_event_wait(st->event, max_us);
    return 1;
}

static void staged_skip(chorus__task_t *task, chorus_status_t status)
{
    coll_staged_t *st = STAGED(task);

    chorus__task_skip(st->inner, status);
    st->phase = STAGED_OVER;
}

static void staged_fail(chorus__task_t *task, chorus_status_t status)
{
    chorus__task_fail(STAGED(task)->inner, status);
}

static void staged_finalize(chorus__task_t *task)
{
    coll_staged_free(STAGED(task));
}

static const char *staged_served_by(const chorus__task_t *task)
{
    return chorus__task_served_by(STAGED(task)->inner);
}

static const chorus__task_ops_t staged_ops = {
    .name = "staged",
    .post = staged_post,
    .progress = staged_progress,
    .wait = staged_wait,
    .skip = staged_skip,
    .fail = staged_fail,
    .finalize = staged_finalize,
    .served_by = staged_served_by,
};

chorus__task_t *coll_staged_task(coll_staged_t *st, chorus__task_t *inner)
{
    st->inner = inner;
    /* Polling the copies' events needs no transport: inline when the algorithm is. */
    chorus__task_init(&st->task, &staged_ops, inner->flags & CHORUS__TASK_INLINE);
    if (st->stream != NULL)
        staged_enqueue(st);
    return &st->task;
}

int coll_staged_enqueued(const chorus__task_t *task)
{
    return task->ops == &staged_ops && STAGED(task)->enqueued &&
           STAGED(task)->fault == CHORUS_OK;
}
