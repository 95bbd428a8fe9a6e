/*
 * Requests: posting a call, waiting for it, completing it. A call takes its
 * sequence number and its task (with its team turns) under the
 * communicator's post lock, so that both follow the order of the calls.
 *
 * A blocking call whose task needs no transport (a node team's collective)
 * and whose communicator has nothing else outstanding runs in the calling
 * thread: no hand-off to the progress thread, no wake-up. A call that waits
 * longer than a moment is handed over to the progress thread with its state,
 * so that deadlines, stall reports and aborts work for it as for every other.
 * Any other blocking call is queued like a non-blocking one, but its thread
 * runs the progress loop while it waits (chorus__progress_drive), where no
 * other thread does (CHORUS_PROGRESS_CALLER): deadlines, stall reports and
 * aborts are the loop's, and the progress thread is neither woken for the
 * call nor wakes the caller when it is over.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/comm.h"
#include "core/core_trace.h"
#include "core/debug_check.h"
#include "core/refusal.h"
#include "core/stall.h"
#include "core/wait_hook.h"
#include "util/log.h"
#include "util/time.h"

/* How long a call waits in the calling thread before the progress thread takes it over. */
#define CALL_INLINE_HANDOFF_S 0.02
/* Longest single sleep of the calling thread, in microseconds. */
#define CALL_INLINE_SLEEP_US 1000

static void abs_deadline(struct timespec *ts, double deadline)
{
    *ts = chorus__timespec_in(CLOCK_MONOTONIC, deadline - chorus__now());
}

/*
 * The progress thread enforces each request's deadline; the waiter allows a
 * grace period beyond it so that it only gives up on its own when the
 * progress thread itself is stuck.
 */
#define REQUEST_WAIT_GRACE_S 5.0

static void request_release(chorus_request_t req);

/*
 * The selection table's algorithm for args (logged and NULL when there is
 * none). The table does not change once built: the last answer is kept for
 * a call of the same collective, memory, count and type, not a v-form
 * (comm->select_memo), whose size is the same.
 */
static const coll_alg_t *call_select(chorus_comm_t comm, const coll_args_t *args)
{
    size_t bytes;
    const coll_alg_t *alg;

    if (comm->select_memo.coll == args->coll && comm->select_memo.mem == args->mem &&
        comm->select_memo.count == args->count && comm->select_memo.dtype == args->dtype &&
        args->counts == NULL)
        return comm->select_memo.alg;
    bytes = coll_args_bytes(args);
    alg = coll_select_call(comm->select, args->coll, args->mem, bytes, comm->rank);
    if (alg == NULL) {
        chorus_error("rank %d: no algorithm runs %s of %zu bytes in %s memory", comm->rank,
                     coll_type_name(args->coll), bytes,
                     coll_mem_name(args->mem) ? coll_mem_name(args->mem) : "unknown");
        return NULL;
    }
    /* A v-form is not kept: its size lies in its counts. */
    comm->select_memo.coll = args->counts == NULL ? args->coll : COLL_TYPE_COUNT;
    comm->select_memo.mem = args->mem;
    comm->select_memo.count = args->count;
    comm->select_memo.dtype = args->dtype;
    comm->select_memo.alg = alg;
    return alg;
}

static chorus_request_t request_new(chorus_comm_t comm, const char *call,
                                    const coll_args_t *args, const char *alg_name,
                                    const char *via, chorus__task_t *task, uint64_t seq,
                                    int setup, double posted_at)
{
    chorus_request_t req = calloc(1, sizeof(*req));

    if (req == NULL)
        return NULL;
    req->comm = comm;
    req->args = *args;
    req->call = call;
    req->alg_name = alg_name;
    req->via = via;
    req->task = task;
    req->seq = seq;
    req->setup = setup;
    req->posted_at = posted_at;
    req->deadline = posted_at + comm->ctx->cfg.timeout_s;
    if (!setup && comm->ctx->cfg.stall_warn_s > 0)
        req->stall_at = posted_at + comm->ctx->cfg.stall_warn_s;
    return req;
}

/* Queue req for the progress thread (ctx->lock held). */
static void request_enqueue_locked(chorus__ctx_t *ctx, chorus_request_t req)
{
    if (ctx->queue_tail)
        ctx->queue_tail->next = req;
    else
        ctx->queue_head = req;
    ctx->queue_tail = req;
    atomic_fetch_add(&req->comm->outstanding, 1);
}

/* A new request of task, queued for the progress thread, in *req_p. */
static chorus_status_t request_queue(chorus_comm_t comm, const char *call,
                                     const coll_args_t *args, const char *alg_name,
                                     const char *via, chorus__task_t *task, uint64_t seq,
                                     int setup, chorus_request_t *req_p)
{
    chorus__ctx_t *ctx = comm->ctx;
    chorus_request_t req;

    pthread_mutex_lock(&ctx->lock);
    req = request_new(comm, call, args, alg_name, via, task, seq, setup, chorus__now());
    if (req != NULL)
        request_enqueue_locked(ctx, req);
    pthread_mutex_unlock(&ctx->lock);
    *req_p = req;
    return req != NULL ? CHORUS_OK : CHORUS_ERR_NO_MEMORY;
}

void chorus__request_complete(chorus_request_t req, chorus_status_t status)
{
    chorus__ctx_t *ctx = req->comm->ctx;
    const char *served;
    int orphaned;

    served = chorus__task_served_by(req->task);
    if (served != NULL)
        req->alg_name = served;
    if (req->task != NULL && !req->setup)
        status = chorus__refusal_outcome(req->comm, req->seq, status, 0);
    chorus__task_finalize(req->task);
    if (ctx->trace != NULL)
        chorus__trace_call(req->comm, req->call, &req->args, req->alg_name, req->via, req->seq,
                           req->setup, req->posted_at, status);
    req->task = NULL;
    pthread_mutex_lock(&ctx->lock);
    req->status = status;
    req->done = 1;
    atomic_fetch_sub(&req->comm->outstanding, 1);
    orphaned = req->orphaned;
    pthread_cond_broadcast(&ctx->cond);
    pthread_mutex_unlock(&ctx->lock);
    /* Nobody waits for an orphan (a stream-ordered blocking call): its failure is told here. */
    if (orphaned && status != CHORUS_OK)
        chorus_error("rank %d: %s #%llu, which returned before its work was done, failed: %s",
                     req->comm->rank, req->call, (unsigned long long)req->seq,
                     chorus_status_string(status));
    if (orphaned)
        free(req);
}

/* The call's task: the algorithm's, after the debug check when it is on. */
static chorus_status_t call_task(chorus_comm_t comm, const coll_args_t *args,
                                 const coll_alg_t *alg, uint64_t seq, int setup,
                                 chorus__task_t **task_p, const char **via_p)
{
    chorus__port_t *port = setup ? &comm->setup_port : &comm->port;
    chorus__task_t *task, *check = NULL, *both = NULL;
    chorus_status_t status;

    status = coll_alg_task(alg, args, &comm->env, &port->port, chorus__tag_base(seq),
                           &comm->ctx->scratch_pool, &task);
    if (status == CHORUS_OK && comm->ctx->trace != NULL)
        *via_p = chorus__trace_task(comm, task, alg, setup);
    if (status != CHORUS_OK || setup || !comm->ctx->cfg.debug_check) {
        *task_p = task;
        return status;
    }
    status = chorus__check_create(comm, args, seq, &check);
    if (status == CHORUS_OK)
        status = chorus__composite_create(&both);
    if (status != CHORUS_OK) {
        chorus__task_finalize(check);
        chorus__task_finalize(task);
        return status;
    }
    /* A mismatch ends the call on every rank alike; the call's task then gives up its turns. */
    if ((status = chorus__composite_add_task(both, check)) != CHORUS_OK ||
        (status = chorus__composite_add_task(both, task)) != CHORUS_OK) {
        chorus__task_finalize(both);
        return status;
    }
    *task_p = both;
    return CHORUS_OK;
}

/*
 * The kept task (comm->kept) re-armed for a call that repeats it: args
 * alike to the field but for the buffers, the same algorithm, and a call
 * that may reuse it (repeatable). NULL when there is none for this call; a
 * kept task of another call is finalized then, so that its team gets its
 * spare back.
 */
static chorus__task_t *kept_take(chorus_comm_t comm, const coll_args_t *args,
                                 const coll_alg_t *alg, int repeatable)
{
    chorus__task_t *task = comm->kept.task;

    if (task == NULL)
        return NULL;
    comm->kept.task = NULL;
    if (repeatable && comm->kept.alg == alg && coll_args_same_shape(&comm->kept.args, args) &&
        chorus__task_again(task, args->sendbuf, args->recvbuf) == 0)
        return task;
    chorus__task_finalize(task);
    return NULL;
}

/* Keep the task of a call that ran here and ended well, where its kind can run again. */
static void kept_put(chorus_comm_t comm, chorus__task_t *task, const coll_alg_t *alg,
                     const coll_args_t *args)
{
    chorus__task_unhold(task);
    comm->kept.task = task;
    comm->kept.alg = alg;
    comm->kept.args = *args;
}

void chorus__call_forget(chorus_comm_t comm)
{
    chorus__task_finalize(comm->kept.task);
    comm->kept.task = NULL;
}

/* The calling thread runs the call; after a moment the progress thread takes it over. */
static chorus_status_t call_inline(chorus_comm_t comm, const coll_args_t *args,
                                   const coll_alg_t *alg, const char *via, chorus__task_t *task,
                                   uint64_t seq)
{
    chorus__ctx_t *ctx = comm->ctx;
    /* The clock is read at the first wait (or at once, for the trace): a small call that is
     * over at its first progress reads none. */
    double started = ctx->trace != NULL ? chorus__now() : 0;
    chorus_request_t req;
    chorus_status_t status = chorus__task_post(task);

    for (;;) {
        int rc = status == CHORUS_OK ? chorus__task_progress(task) : 1;

        if (rc == 1) {
            status = task->status;
            /* Read by the stall reports only: no order is owed beyond the release. */
            atomic_store_explicit(&comm->inline_done, seq + 1, memory_order_release);
            break;
        }
        if (rc < 0) {
            chorus_error("rank %d: %s #%llu (%s, %zu x %s) failed: %s", comm->rank,
                         coll_type_name(args->coll), (unsigned long long)seq, alg->name,
                         args->count, chorus_dtype_name(args->dtype),
                         chorus_status_string((chorus_status_t)rc));
            chorus__task_fail(task, (chorus_status_t)rc);
            chorus__ctx_fail(ctx, (chorus_status_t)rc);
            status = (chorus_status_t)rc;
            break;
        }
        if (atomic_load(&ctx->aborted) || chorus__ctx_error(ctx) != CHORUS_OK) {
            chorus__task_fail(task, CHORUS_ERR_ABORTED);
            status = chorus__ctx_error(ctx) != CHORUS_OK ? chorus__ctx_error(ctx)
                                                          : CHORUS_ERR_ABORTED;
            break;
        }
        if (started == 0) {
            started = chorus__now();
        } else if (chorus__now() - started > CALL_INLINE_HANDOFF_S) {
            /* The call stays outstanding: the progress thread finishes it. */
            req = request_new(comm, coll_type_name(args->coll), args, alg->name, via, task,
                              seq, 0, started);
            if (req == NULL) {
                chorus__task_fail(task, CHORUS_ERR_NO_MEMORY);
                chorus__ctx_fail(ctx, CHORUS_ERR_NO_MEMORY);
                status = CHORUS_ERR_NO_MEMORY;
                break;
            }
            pthread_mutex_lock(&ctx->lock);
            request_enqueue_locked(ctx, req);
            atomic_fetch_sub(&comm->outstanding, 1);   /* counted once, by the request now */
            atomic_store(&comm->inline_seq, CHORUS__NO_SEQ);
            pthread_mutex_unlock(&ctx->lock);
            chorus__progress_wake(ctx);
            return chorus_request_free(req);
        }
        chorus__task_wait(task, CALL_INLINE_SLEEP_US);
        chorus__wait_hook_run(started);
    }
    status = chorus__refusal_outcome(comm, seq, status, 1);
    /* A traced call names its task in the trace: each one is built anew. */
    if (status == CHORUS_OK && task->ops->again != NULL && ctx->trace == NULL)
        kept_put(comm, task, alg, args);
    else
        chorus__task_finalize(task);
    if (ctx->trace != NULL)
        chorus__trace_call(comm, coll_type_name(args->coll), args, alg->name, via, seq, 0,
                           started, status);
    /* From 1, this call's, to 0: nothing else was added meanwhile (comm.h). */
    atomic_store_explicit(&comm->outstanding, 0, memory_order_release);
    return status;
}

/*
 * Number, build and post a call (in the setup space when setup). The
 * algorithm's task runs run: args itself, or args staged to the host, when
 * staged (owned from here on) wraps the task with the copies.
 */
static chorus_status_t call_post(chorus_comm_t comm, const coll_args_t *args,
                                 const coll_args_t *run, coll_staged_t *staged,
                                 const coll_alg_t *alg, int blocking, int setup,
                                 chorus_request_t *req_p)
{
    chorus__ctx_t *ctx = comm->ctx;
    chorus__task_t *task = NULL;
    chorus_request_t req = NULL;
    const char *via = NULL;
    chorus_status_t status;
    int run_here = 0, detach = 0;
    uint64_t seq;

    chorus__spin_lock(&comm->post_lock);
    seq = setup ? comm->setup_seq : atomic_load(&comm->next_seq);
    /* Only a blocking call can be run here, and so kept: only such a call reuses one. */
    task = kept_take(comm, run, alg, blocking && !setup && staged == NULL);
    status = task != NULL ? CHORUS_OK : call_task(comm, run, alg, seq, setup, &task, &via);
    if (status == CHORUS_OK && staged != NULL) {
        task = coll_staged_task(staged, task);
        staged = NULL;
    }
    /* chorus_mem_alloc memory under the call cannot be freed until it is over. */
    if (status == CHORUS_OK)
        chorus__task_hold(task, args->sendbuf, args->recvbuf);
    /* Its result reaches the caller's stream by itself: a blocking call need not wait. */
    if (status == CHORUS_OK && blocking)
        detach = (task->flags & CHORUS__TASK_ENQUEUED) || coll_staged_enqueued(task);
    /* Nothing else of comm in flight: this thread runs the call. The acquire load pairs with
     * the completion of the last queued request, whose effects this call then sees. */
    if (status == CHORUS_OK && blocking && !detach && (task->flags & CHORUS__TASK_INLINE) &&
        atomic_load_explicit(&comm->outstanding, memory_order_acquire) == 0) {
        atomic_store_explicit(&comm->outstanding, 1, memory_order_relaxed);
        run_here = 1;
    }
    if (status == CHORUS_OK && !run_here)
        status = request_queue(comm, coll_type_name(args->coll), args, alg->name, via, task,
                               seq, setup, &req);
    if (status == CHORUS_OK && setup) {
        comm->setup_seq++;
    } else if (status == CHORUS_OK) {
        if (run_here)
            /* In flight before it counts as posted: the refusal lock taken next orders the
             * store before the notices' handlers' look. */
            atomic_store_explicit(&comm->inline_seq, seq, memory_order_release);
        /* A peer's stopping refusal fails the context. */
        (void)chorus__refusal_advance(comm, seq, CHORUS__REFUSED_NOT, args, CHORUS_DTYPE_COUNT);
    }
    chorus__spin_unlock(&comm->post_lock);
    if (status != CHORUS_OK) {
        chorus__task_finalize(task);
        coll_staged_free(staged);
        return status;
    }
    if (run_here) {
        *req_p = NULL;
        return call_inline(comm, args, alg, via, task, seq);
    }
    if (blocking && !detach && !setup && ctx->cfg.progress_caller)
        req->drive = 1;     /* its waiter, this thread, runs it (chorus_request_wait) */
    else
        chorus__progress_wake(ctx);
    if (detach) {
        request_release(req);
        req = NULL;
    }
    *req_p = req;
    return CHORUS_OK;
}

chorus_status_t chorus__call(chorus_comm_t comm, const coll_args_t *args, int blocking,
                             chorus_request_t *req_p)
{
    chorus_status_t status = chorus__ctx_error(comm->ctx);
    coll_staged_t *staged = NULL;
    const coll_args_t *run = args;
    const coll_alg_t *alg;
    coll_args_t host;

    if (status != CHORUS_OK)
        return status;
    /*
     * A device call that every rank declared runs on the devices where an
     * algorithm does (the node team's kernels); the v-forms, and calls that
     * none serves, are staged like any other device buffers.
     */
    if (args->mem == COLL_MEM_CUDA && args->dev_call && args->counts == NULL &&
        (alg = coll_select_call(comm->select, args->coll, COLL_MEM_CUDA, coll_args_bytes(args),
                                comm->rank)) != NULL)
        return call_post(comm, args, args, NULL, alg, blocking, 0, req_p);
    /* Device buffers: a host algorithm runs on page-locked copies of them. */
    if (args->mem == COLL_MEM_CUDA) {
        status = coll_staged_begin(args, &host, &staged);
        if (status != CHORUS_OK)
            return status;
        run = &host;
    }
    alg = call_select(comm, run);
    if (alg == NULL) {
        coll_staged_free(staged);
        return CHORUS_ERR_UNSUPPORTED;
    }
    return call_post(comm, args, run, staged, alg, blocking, 0, req_p);
}

/* chorus__call_made; shape and wire: the call as a plain collective, or shape NULL. */
static chorus_status_t call_made_as(chorus_comm_t comm, const char *call, const coll_args_t *args,
                                    chorus__call_maker_fn make, void *make_arg,
                                    const coll_args_t *shape, chorus_dtype_t wire,
                                    chorus_request_t *req_p)
{
    chorus__ctx_t *ctx = comm->ctx;
    chorus__task_t *task = NULL;
    chorus_request_t req = NULL;
    chorus_status_t status = chorus__ctx_error(ctx);
    uint64_t seq;

    if (status != CHORUS_OK)
        return status;
    chorus__spin_lock(&comm->post_lock);
    seq = atomic_load(&comm->next_seq);
    status = make(comm, make_arg, chorus__tag_base(seq), &task);
    if (status == CHORUS_OK)
        status = request_queue(comm, call, args, call, NULL, task, seq, 0, &req);
    if (status == CHORUS_OK)   /* a peer's stopping refusal fails the context */
        (void)chorus__refusal_advance(comm, seq, CHORUS__REFUSED_NOT, shape, wire);
    chorus__spin_unlock(&comm->post_lock);
    if (status != CHORUS_OK) {
        chorus__task_finalize(task);
        return status;
    }
    chorus__progress_wake(ctx);
    *req_p = req;
    return CHORUS_OK;
}

chorus_status_t chorus__call_made(chorus_comm_t comm, const char *call, const coll_args_t *args,
                                  chorus__call_maker_fn make, void *make_arg,
                                  chorus_request_t *req_p)
{
    return call_made_as(comm, call, args, make, make_arg, NULL, CHORUS_DTYPE_COUNT, req_p);
}

typedef struct {
    const coll_args_t *args;
    chorus_dtype_t wire;
} compressed_call_t;

static chorus_status_t compressed_make(chorus_comm_t comm, void *arg, uint64_t tag_base,
                                       chorus__task_t **task_p)
{
    const compressed_call_t *c = arg;
    coll_staged_t *staged = NULL;
    coll_args_t host;
    chorus_status_t status;

    /* Device buffers: the compressed call runs on page-locked copies of them. */
    if (c->args->mem == COLL_MEM_CUDA &&
        (status = coll_staged_begin(c->args, &host, &staged)) != CHORUS_OK)
        return status;
    status = coll_compressed_task(staged != NULL ? &host : c->args, c->wire, &comm->env,
                                  &comm->port.port, tag_base, &comm->ctx->scratch_pool, NULL,
                                  task_p);
    if (status != CHORUS_OK)
        coll_staged_free(staged);
    else if (staged != NULL)
        *task_p = coll_staged_task(staged, *task_p);
    return status;
}

chorus_status_t chorus__call_compressed(chorus_comm_t comm, const coll_args_t *args,
                                        chorus_dtype_t wire, chorus_request_t *req_p)
{
    compressed_call_t c = {args, wire};

    return call_made_as(comm, coll_type_name(args->coll), args, compressed_make, &c, args, wire,
                        req_p);
}

int chorus__call_in_flight(chorus_comm_t comm, uint64_t seq)
{
    chorus__ctx_t *ctx = comm->ctx;
    chorus_request_t lists[2] = {ctx->queue_head, ctx->active};

    if (atomic_load(&comm->inline_seq) == seq)
        return 1;
    for (int i = 0; i < 2; i++)
        for (chorus_request_t req = lists[i]; req != NULL; req = req->next)
            if (req->comm == comm && req->seq == seq && !req->setup && req->task != NULL)
                return 1;
    return 0;
}

/* The last step of a refused call that ran: whatever the scratch run gave, the call was refused. */
static chorus_status_t refused_end(void *arg)
{
    (void)arg;
    return CHORUS_ERR_INVALID_ARG;
}

/* Free req once over: now if it is, else when it completes. */
static void request_release(chorus_request_t req)
{
    chorus__ctx_t *ctx = req->comm->ctx;
    int free_now;

    pthread_mutex_lock(&ctx->lock);
    free_now = req->done;
    if (!free_now)
        req->orphaned = 1;
    pthread_mutex_unlock(&ctx->lock);
    if (free_now)
        free(req);
}

/*
 * A refused call run here all the same, on scratch buffers of its size: as
 * this rank made it (joining: built when created, under the post lock, like
 * any call) or as the other ranks made it (learning: built once posted, from
 * what the first step, notice, heard; the refusing thread holds the post
 * lock until then, comm->learning). Building takes the call's turns on the
 * node team.
 */
typedef struct {
    chorus__task_t head;
    chorus_comm_t comm;
    uint64_t seq;
    chorus__task_t *notice;     /* learning: the notice that hears the shape; NULL: joining */
    chorus__task_t *sub;        /* the call, once built */
    const char *via;            /* who serves it, for the trace (set only while tracing) */
    void *scratch[2];
} scratch_call_t;

/* The call's turns are taken (or never will be): the refusing thread may post again. */
static void scratch_release_turn(scratch_call_t *t)
{
    chorus__ctx_t *ctx = t->comm->ctx;
    uint64_t seq = t->seq;

    if (!atomic_compare_exchange_strong(&t->comm->learning, &seq, CHORUS__NO_SEQ))
        return;
    pthread_mutex_lock(&ctx->lock);
    pthread_cond_broadcast(&ctx->cond);
    pthread_mutex_unlock(&ctx->lock);
}

/* t->sub: shape's call (compressed to wire, unless CHORUS_DTYPE_COUNT) on scratch buffers. */
static chorus_status_t scratch_build(scratch_call_t *t, const coll_args_t *shape,
                                     chorus_dtype_t wire)
{
    chorus_comm_t comm = t->comm;
    coll_args_t run = *shape;
    const coll_alg_t *alg;
    size_t elems[2], esize = chorus_dtype_size(shape->dtype);

    run.rank = comm->rank;
    run.size = comm->size;
    run.chunk_bytes = comm->ctx->cfg.chunk_bytes;
    run.mem = COLL_MEM_HOST;
    run.stream = NULL;
    run.dev_bufs = 0;
    coll_args_elems(&run, (size_t)comm->size, elems);
    /* calloc: pages that the call only reads cost nothing. */
    if (run.count > SIZE_MAX / esize / (size_t)comm->size ||
        (t->scratch[0] = calloc(1, elems[0] * esize + 1)) == NULL ||
        (t->scratch[1] = calloc(1, elems[1] * esize + 1)) == NULL) {
        chorus_error("rank %d: no memory to run refused call #%llu (%zu x %s) on scratch "
                     "buffers", comm->rank, (unsigned long long)t->seq, run.count,
                     chorus_dtype_name(run.dtype));
        return CHORUS_ERR_NO_MEMORY;
    }
    run.sendbuf = t->scratch[0];
    run.recvbuf = t->scratch[1];
    if (wire != CHORUS_DTYPE_COUNT)
        return coll_compressed_task(&run, wire, &comm->env, &comm->port.port,
                                    chorus__tag_base(t->seq), &comm->ctx->scratch_pool, NULL,
                                    &t->sub);
    /* A device call runs as the others run it: the device path stages host buffers too. */
    if (run.dev_call &&
        (alg = coll_select_lookup(comm->select, run.coll, COLL_MEM_CUDA,
                                  coll_args_bytes(&run))) != NULL)
        run.mem = COLL_MEM_CUDA;
    else if ((alg = call_select(comm, &run)) == NULL)
        return CHORUS_ERR_UNSUPPORTED;
    return call_task(comm, &run, alg, t->seq, 0, &t->sub, &t->via);
}

static chorus_status_t scratch_post(chorus__task_t *task)
{
    scratch_call_t *t = (scratch_call_t *)task;
    coll_args_t shape = {0};
    chorus_dtype_t wire = CHORUS_DTYPE_COUNT;
    chorus_status_t status = CHORUS_OK;

    if (t->notice != NULL) {
        status = chorus__refusal_learned(t->notice, &shape, &wire)
                     ? scratch_build(t, &shape, wire)
                     : CHORUS_ERR_INVALID_ARG;  /* every rank refused its shape: no data moves */
        scratch_release_turn(t);
    }
    return status == CHORUS_OK ? chorus__task_post(t->sub) : status;
}

static int scratch_progress(chorus__task_t *task)
{
    scratch_call_t *t = (scratch_call_t *)task;
    int rc = chorus__task_progress(t->sub);

    task->failed_peer = t->sub->failed_peer;
    if (rc == 1)
        task->status = t->sub->status;
    return rc;
}

static int scratch_wait(chorus__task_t *task, unsigned max_us)
{
    scratch_call_t *t = (scratch_call_t *)task;

    return t->sub != NULL ? chorus__task_wait(t->sub, max_us) : 0;
}

static void scratch_skip(chorus__task_t *task, chorus_status_t status)
{
    scratch_call_t *t = (scratch_call_t *)task;

    if (t->sub != NULL)
        chorus__task_skip(t->sub, status);  /* joining: built, so its turns are kept */
    scratch_release_turn(t);                /* learning: built nothing, no turn to keep */
}

static void scratch_fail(chorus__task_t *task, chorus_status_t status)
{
    scratch_call_t *t = (scratch_call_t *)task;

    if (t->sub != NULL)
        chorus__task_fail(t->sub, status);
}

static void scratch_finalize(chorus__task_t *task)
{
    scratch_call_t *t = (scratch_call_t *)task;

    scratch_release_turn(t);
    chorus__task_finalize(t->sub);
    free(t->scratch[0]);
    free(t->scratch[1]);
    free(t);
}

static const char *scratch_served_by(const chorus__task_t *task)
{
    const scratch_call_t *t = (const scratch_call_t *)task;

    return t->sub != NULL ? chorus__task_served_by(t->sub) : NULL;
}

static const chorus__task_ops_t scratch_ops = {
    .name = "refused call, on scratch buffers",
    .post = scratch_post,
    .progress = scratch_progress,
    .wait = scratch_wait,
    .skip = scratch_skip,
    .fail = scratch_fail,
    .finalize = scratch_finalize,
    .served_by = scratch_served_by,
};

/*
 * Call seq on scratch buffers: built now from shape and wire (joining), or
 * when posted from what notice heard (learning, shape NULL).
 */
static chorus_status_t scratch_call_create(chorus_comm_t comm, uint64_t seq,
                                           chorus__task_t *notice, const coll_args_t *shape,
                                           chorus_dtype_t wire, scratch_call_t **t_p)
{
    scratch_call_t *t = calloc(1, sizeof(*t));
    chorus_status_t status = CHORUS_OK;

    if (t == NULL)
        return CHORUS_ERR_NO_MEMORY;
    chorus__task_init(&t->head, &scratch_ops, 0);
    t->comm = comm;
    t->seq = seq;
    t->notice = notice;
    if (shape != NULL && (status = scratch_build(t, shape, wire)) != CHORUS_OK) {
        scratch_finalize(&t->head);
        return status;
    }
    *t_p = t;
    return CHORUS_OK;
}

/*
 * The request of refused call seq: stopping (the notice alone), joining or
 * learning (the notice, the call on scratch buffers, then
 * CHORUS_ERR_INVALID_ARG). Under the post lock. A joining call that cannot
 * be built here stops instead (*kind_p says which it became).
 */
static chorus_status_t refused_queue(chorus_comm_t comm, const char *call,
                                     const coll_args_t *args, const char *why,
                                     chorus__refused_t *kind_p, const chorus__join_t *join,
                                     uint64_t seq, chorus_request_t *req_p)
{
    chorus__task_t *notice = NULL, *all = NULL;
    scratch_call_t *run = NULL;
    const char *via;
    chorus_status_t status;

    if (*kind_p == CHORUS__REFUSED_JOIN &&
        scratch_call_create(comm, seq, NULL, args, join->wire, &run) != CHORUS_OK) {
        chorus_warn("rank %d: refused %s #%llu cannot run on scratch buffers; its peers fail",
                    comm->rank, call, (unsigned long long)seq);
        *kind_p = CHORUS__REFUSED_STOP;
    }
    status = chorus__refusal_task_create(comm, args, seq, why, *kind_p, &notice);
    if (status == CHORUS_OK && *kind_p == CHORUS__REFUSED_LEARN)
        status = scratch_call_create(comm, seq, notice, NULL, CHORUS_DTYPE_COUNT, &run);
    if (status != CHORUS_OK)
        goto fail;
    if (*kind_p == CHORUS__REFUSED_STOP) {
        if ((status = request_queue(comm, call, args, "refused", NULL, notice, seq, 0,
                                    req_p)) != CHORUS_OK)
            goto fail;
        return CHORUS_OK;
    }
    if ((status = chorus__composite_create(&all)) != CHORUS_OK)
        goto fail;
    via = run->via;
    status = chorus__composite_add_task(all, notice);
    notice = NULL;      /* the composite's now, or finalized by it */
    if (status == CHORUS_OK) {
        status = chorus__composite_add_task(all, &run->head);
        run = NULL;
    }
    if (status == CHORUS_OK)
        status = chorus__composite_add_fn(all, refused_end, NULL);
    if (status == CHORUS_OK &&
        (status = request_queue(comm, call, args, "refused", via, all, seq, 0, req_p)) ==
            CHORUS_OK)
        return CHORUS_OK;
fail:
    chorus__task_finalize(all);
    chorus__task_finalize(notice);
    if (run != NULL)
        scratch_finalize(&run->head);
    return status;
}

/* Holding the post lock: wait until learning call seq has taken its turns, or is over. */
static void refused_wait_turn(chorus_comm_t comm, chorus_request_t req, uint64_t seq)
{
    chorus__ctx_t *ctx = comm->ctx;
    struct timespec ts;

    abs_deadline(&ts, req->deadline + REQUEST_WAIT_GRACE_S);
    pthread_mutex_lock(&ctx->lock);
    while (!req->done && atomic_load(&comm->learning) == seq) {
        if (pthread_cond_timedwait(&ctx->cond, &ctx->lock, &ts) == ETIMEDOUT)
            break;
    }
    pthread_mutex_unlock(&ctx->lock);
}

chorus_status_t chorus__call_refused(chorus_comm_t comm, const char *call,
                                     const coll_args_t *args, const char *why,
                                     const chorus__join_t *join)
{
    chorus__ctx_t *ctx = comm->ctx;
    chorus_request_t req = NULL;
    chorus_status_t status = chorus__ctx_error(ctx);
    chorus__refused_t kind = join == NULL ? CHORUS__REFUSED_STOP
                             : join->shape_ok ? CHORUS__REFUSED_JOIN
                             : comm->size > 1 ? CHORUS__REFUSED_LEARN
                                              : CHORUS__REFUSED_STOP;  /* no one to learn from */
    int blocking = join == NULL || join->blocking;
    uint64_t seq;

    if (status != CHORUS_OK)
        return status;      /* after a fault no call pairs with another: nothing to keep */
    chorus__spin_lock(&comm->post_lock);
    seq = atomic_load(&comm->next_seq);
    if (kind == CHORUS__REFUSED_LEARN)
        atomic_store(&comm->learning, seq);
    status = refused_queue(comm, call, args, why, &kind, join, seq, &req);
    if (status == CHORUS_OK) {
        (void)chorus__refusal_advance(comm, seq, kind,
                                      kind == CHORUS__REFUSED_JOIN ? args : NULL,
                                      kind == CHORUS__REFUSED_JOIN ? join->wire
                                                                   : CHORUS_DTYPE_COUNT);
        chorus__progress_wake(ctx);
        /* No later call of this rank may take this one's turns on the node team. */
        if (kind == CHORUS__REFUSED_LEARN)
            refused_wait_turn(comm, req, seq);
    }
    atomic_store(&comm->learning, CHORUS__NO_SEQ);
    chorus__spin_unlock(&comm->post_lock);
    if (status != CHORUS_OK) {
        /* Its peers would wait for a call that never comes: fail them now rather than later. */
        chorus_error("rank %d: refused %s #%llu could not be numbered (%s); the communicator "
                     "fails", comm->rank, call, (unsigned long long)seq,
                     chorus_status_string(status));
        chorus__ctx_fail(ctx, status);
        return status;
    }
    /*
     * A stopping call returns only once its peers know: no later call may take its turns.
     * The others have taken theirs already.
     */
    if (kind == CHORUS__REFUSED_STOP || blocking)
        return chorus_request_free(req);
    request_release(req);
    return CHORUS_ERR_INVALID_ARG;
}

chorus_status_t chorus__request_detached(chorus_comm_t comm, const char *call,
                                         const coll_args_t *args, double deadline_s,
                                         chorus_request_t *req_p)
{
    chorus_request_t req = request_new(comm, call, args, call, NULL, NULL, 0, 0, chorus__now());

    if (req == NULL)
        return CHORUS_ERR_NO_MEMORY;
    req->deadline = req->posted_at + deadline_s;
    req->stall_at = 0;
    atomic_fetch_add(&comm->outstanding, 1);
    *req_p = req;
    return CHORUS_OK;
}

chorus_status_t chorus__call_setup(chorus_comm_t comm, const coll_args_t *args,
                                   const coll_alg_t *alg)
{
    chorus_request_t req;
    chorus_status_t status = call_post(comm, args, args, NULL, alg, 0, 1, &req);

    return status == CHORUS_OK ? chorus_request_free(req) : status;
}

chorus_status_t chorus_request_wait(chorus_request_t req)
{
    chorus__ctx_t *ctx;
    struct timespec ts;
    double deadline, waiting_since;
    chorus_status_t status;
    int done;

    if (req == NULL) {
        chorus_error("chorus_request_wait: req is NULL");
        return CHORUS_ERR_INVALID_ARG;
    }
    ctx = req->comm->ctx;
    if (req->drive) {
        /* Posted without waking the progress thread: run it here, or wake it after all. */
        req->drive = 0;
        if (!chorus__progress_drive(ctx, req))
            chorus__progress_wake(ctx);
    }
    waiting_since = chorus__now();
    deadline = req->deadline + REQUEST_WAIT_GRACE_S;
    abs_deadline(&ts, deadline);
    pthread_mutex_lock(&ctx->lock);
    while (!req->done) {
        struct timespec slice;
        int hook = chorus__wait_hook_on();

        /* With a wait hook, wake when it is due to run it (without the lock). */
        if (hook) {
            double next = chorus__wait_hook_due(waiting_since);

            abs_deadline(&slice, next < deadline ? next : deadline);
        }
        if (pthread_cond_timedwait(&ctx->cond, &ctx->lock, hook ? &slice : &ts) == ETIMEDOUT &&
            (!hook || chorus__now() >= deadline))
            break;
        if (hook && !req->done) {
            pthread_mutex_unlock(&ctx->lock);
            chorus__wait_hook_run(waiting_since);
            pthread_mutex_lock(&ctx->lock);
        }
    }
    done = req->done;
    status = done ? req->status : CHORUS_ERR_TIMEOUT;
    pthread_mutex_unlock(&ctx->lock);
    if (!done)
        chorus_error("rank %d: request %llu did not complete %.0f s past its deadline",
                     req->comm->rank, (unsigned long long)req->seq, REQUEST_WAIT_GRACE_S);
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
    pthread_mutex_lock(&req->comm->ctx->lock);
    done = req->done;
    if (done)
        status = req->status;
    pthread_mutex_unlock(&req->comm->ctx->lock);
    *done_p = done;
    return status;
}

chorus_status_t chorus_request_free(chorus_request_t req)
{
    chorus_status_t status;

    if (req == NULL)
        return CHORUS_OK;
    status = chorus_request_wait(req);
    request_release(req);
    return status;
}

const char *chorus_request_algorithm(chorus_request_t req)
{
    return req == NULL ? NULL : req->alg_name;
}
