/*
 * The public collective calls: check every argument, describe the call as
 * coll_args_t, post it. A blocking call is a post followed by a wait, or
 * runs in the calling thread (request.c).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/comm.h"
#include "core/refusal.h"
#include "reduce/device.h"
#include "util/log.h"
#include "util/mem_bound.h"

uint32_t chorus__opts_flags(const chorus_opts_t *opts)
{
    return opts != NULL &&
                   opts->struct_size >= offsetof(chorus_opts_t, flags) + sizeof(opts->flags)
               ? opts->flags
               : 0;
}

chorus_status_t chorus__check_opts(const chorus_opts_t *opts, uint32_t allowed, char *why,
                                   size_t why_len)
{
    size_t covered;

    if (opts == NULL)
        return CHORUS_OK;
    if (opts->struct_size < sizeof(size_t)) {
        snprintf(why, why_len, "invalid argument opts->struct_size=%zu (use CHORUS_OPTS_INIT)",
                 opts->struct_size);
        return CHORUS_ERR_INVALID_ARG;
    }
    covered = opts->struct_size;
    if ((chorus__opts_flags(opts) & ~allowed) != 0) {
        snprintf(why, why_len, "invalid argument opts->flags=0x%x: %s", opts->flags,
                 allowed ? "a flag this call does not take" : "this call takes no flags");
        return CHORUS_ERR_INVALID_ARG;
    }
    if (covered >= offsetof(chorus_opts_t, priority) + sizeof(opts->priority) &&
        opts->priority != 0) {
        snprintf(why, why_len, "invalid argument opts->priority=%d: must be 0", opts->priority);
        return CHORUS_ERR_INVALID_ARG;
    }
    if ((unsigned)chorus__opts_mem(opts) > CHORUS_MEM_CUDA) {
        snprintf(why, why_len, "invalid argument opts->mem_type=%d: CHORUS_MEM_AUTO, _HOST "
                 "or _CUDA", opts->mem_type);
        return CHORUS_ERR_INVALID_ARG;
    }
    return CHORUS_OK;
}

int chorus__opts_mem(const chorus_opts_t *opts)
{
    return opts != NULL &&
                   opts->struct_size >= offsetof(chorus_opts_t, mem_type) + sizeof(opts->mem_type)
               ? opts->mem_type
               : CHORUS_MEM_AUTO;
}

void *chorus__opts_stream(const chorus_opts_t *opts)
{
    return opts != NULL &&
                   opts->struct_size >= offsetof(chorus_opts_t, stream) + sizeof(opts->stream)
               ? opts->stream
               : NULL;
}

/*
 * The call's memory type and stream. A call is staged (coll.h) when one of
 * the buffers this rank touches is on a CUDA device, or when it must wait
 * for a stream; elsewhere it runs on the host as it is.
 */
static chorus_status_t call_memory(coll_args_t *a, const chorus_opts_t *opts,
                                   const size_t elems[2], int send_here, int recv_here,
                                   char *why, size_t why_len)
{
    int mem = chorus__opts_mem(opts);

    a->mem = COLL_MEM_HOST;
    a->dev_bufs = 0;
    a->dev_call = 0;
    a->stream = chorus__opts_stream(opts);
    if (a->stream == NULL && mem != CHORUS_MEM_CUDA &&
        (mem == CHORUS_MEM_HOST || !chorus__device_present()))
        return CHORUS_OK;   /* host memory, known or the only kind this process has */
    if ((mem == CHORUS_MEM_CUDA || a->stream != NULL) && !chorus__device_present()) {
        snprintf(why, why_len, "opts->%s given, but %s", a->stream ? "stream" : "mem_type=CUDA",
                 chorus__device_built() ? "this process sees no CUDA device"
                                        : "this build of chorus has no CUDA");
        return CHORUS_ERR_UNSUPPORTED;
    }
    /* Each buffer is looked up once, here: the staging reads the answer from dev_bufs. */
    if (send_here && elems[0] > 0 && chorus__device_ptr(a->sendbuf))
        a->dev_bufs |= COLL_DEV_SEND;
    if (recv_here && elems[1] > 0 && chorus__device_ptr(a->recvbuf))
        a->dev_bufs |= COLL_DEV_RECV;
    if (mem == CHORUS_MEM_CUDA || a->stream != NULL || a->dev_bufs != 0)
        a->mem = COLL_MEM_CUDA;
    a->dev_call = mem == CHORUS_MEM_CUDA;
    return CHORUS_OK;
}

/* Byte ranges [a, a+alen) and [b, b+blen) overlap without being the same start. */
static int partial_overlap(const void *a, size_t alen, const void *b, size_t blen)
{
    uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;

    if (a == NULL || b == NULL || alen == 0 || blen == 0)
        return 0;
    return pa < pb + blen && pb < pa + alen;
}

#define COMPRESS_FLAGS (CHORUS_COMPRESS_FP16 | CHORUS_COMPRESS_BF16)

/* opts: compression only on an allreduce or reduce-scatter of float32 by sum or avg. */
static chorus_status_t check_compress(const coll_args_t *a, const chorus_opts_t *opts,
                                      char *why, size_t why_len)
{
    uint32_t flags = chorus__opts_flags(opts) & COMPRESS_FLAGS;
    chorus_status_t status =
        chorus__check_opts(opts,
                           a->coll == COLL_ALLREDUCE || a->coll == COLL_REDUCE_SCATTER
                               ? COMPRESS_FLAGS
                               : 0,
                           why, why_len);

    if (status != CHORUS_OK || flags == 0)
        return status;
    if (flags == COMPRESS_FLAGS) {
        snprintf(why, why_len, "invalid argument opts->flags=0x%x: CHORUS_COMPRESS_FP16 and "
                 "CHORUS_COMPRESS_BF16 together", opts->flags);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (a->dtype != CHORUS_FLOAT32 || (a->op != CHORUS_SUM && a->op != CHORUS_AVG)) {
        snprintf(why, why_len, "invalid argument: compression takes float32 by sum or avg, "
                 "not %s by %s", chorus_dtype_name(a->dtype), chorus_op_name(a->op));
        return CHORUS_ERR_INVALID_ARG;
    }
    return CHORUS_OK;
}

chorus_dtype_t chorus__opts_wire(const chorus_opts_t *opts)
{
    uint32_t flags = chorus__opts_flags(opts);

    return flags & CHORUS_COMPRESS_FP16   ? CHORUS_FLOAT16
           : flags & CHORUS_COMPRESS_BF16 ? CHORUS_BFLOAT16
                                          : CHORUS_DTYPE_COUNT;
}

/*
 * The call's shape: everything the other ranks' calls must agree with (dtype,
 * op, root, count, opts). A call that passes it could be run by this rank
 * with buffers of its own.
 */
static chorus_status_t check_shape(chorus_comm_t comm, const coll_args_t *a,
                                   const chorus_opts_t *opts, size_t send_elems,
                                   size_t recv_elems, int send_here, int recv_here, char *why,
                                   size_t why_len)
{
    size_t esize = chorus_dtype_size(a->dtype);
    int needs_op = a->coll == COLL_ALLREDUCE || a->coll == COLL_REDUCE_SCATTER ||
                   a->coll == COLL_REDUCE;
    int rooted = a->coll == COLL_BROADCAST || a->coll == COLL_REDUCE;
    size_t total;

    if (comm == NULL) {
        snprintf(why, why_len, "invalid argument comm=NULL");
        return CHORUS_ERR_INVALID_ARG;
    }
    if (esize == 0) {
        snprintf(why, why_len, "invalid argument dtype=%d", (int)a->dtype);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (needs_op && ((int)a->op < 0 || a->op >= CHORUS_OP_COUNT)) {
        snprintf(why, why_len, "invalid argument op=%d", (int)a->op);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (rooted && (a->root < 0 || a->root >= comm->size)) {
        snprintf(why, why_len, "invalid argument root=%d: must be in [0, %d)", a->root,
                 comm->size);
        return CHORUS_ERR_INVALID_ARG;
    }
    /* count * esize * size overflows exactly when count > SIZE_MAX / esize / size, without
       the divisions (esize * size cannot overflow: esize <= 8, size < INT_MAX). */
    if (__builtin_mul_overflow(a->count, esize * (size_t)comm->size, &total) ||
        !chorus__mem_fits(send_here ? a->sendbuf : NULL, send_elems * esize) ||
        !chorus__mem_fits(recv_here ? a->recvbuf : NULL, recv_elems * esize) ||
        !chorus__mem_under_limit((send_elems > recv_elems ? send_elems : recv_elems) * esize)) {
        snprintf(why, why_len, "invalid argument count=%zu: %zu-byte elements at %d ranks do "
                 "not fit in this process's memory (address space, PTRDIFF_MAX, RLIMIT_AS)",
                 a->count, esize, comm->size);
        return CHORUS_ERR_INVALID_ARG;
    }
    return check_compress(a, opts, why, why_len);
}

/* The buffers, once the shape is valid: present where the call reads or writes, apart. */
static chorus_status_t check_buffers(const coll_args_t *a, size_t send_elems,
                                     size_t recv_elems, int send_here, int recv_here,
                                     int in_place, char *why, size_t why_len)
{
    size_t esize = chorus_dtype_size(a->dtype);

    if (send_elems > 0 && send_here && a->sendbuf == NULL) {
        snprintf(why, why_len, "invalid argument sendbuf=NULL with count=%zu", a->count);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (recv_elems > 0 && recv_here && a->recvbuf == NULL) {
        snprintf(why, why_len, "invalid argument recvbuf=NULL with count=%zu", a->count);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (send_here && recv_here && !in_place &&
        partial_overlap(a->sendbuf, send_elems * esize, a->recvbuf, recv_elems * esize)) {
        snprintf(why, why_len, "invalid argument: sendbuf=%p and recvbuf=%p overlap without "
                 "being the in-place layout", a->sendbuf, a->recvbuf);
        return CHORUS_ERR_INVALID_ARG;
    }
    return CHORUS_OK;
}

/* Whether the buffers have the call's in-place layout. */
static int in_place_layout(const coll_args_t *a)
{
    const char *sbuf = a->sendbuf, *rbuf = a->recvbuf;
    /* Addresses are compared as integers: an absurd count, refused by the checks, must not
       make pointer arithmetic overflow first. */
    uintptr_t block = (uintptr_t)a->count * chorus_dtype_size(a->dtype);

    /* The in-place layouts of allgather and reduce_scatter sit this rank's block in the other. */
    if (a->coll == COLL_ALLGATHER)
        return rbuf != NULL && (uintptr_t)sbuf == (uintptr_t)rbuf + block * (size_t)a->rank;
    if (a->coll == COLL_REDUCE_SCATTER)
        return sbuf != NULL && (uintptr_t)rbuf == (uintptr_t)sbuf + block * (size_t)a->rank;
    return sbuf == rbuf;
}

/* Both checks; *shape_ok_p (may be NULL) tells whether the shape passed. */
static chorus_status_t check_call(chorus_comm_t comm, coll_args_t *a,
                                  const chorus_opts_t *opts, char *why, size_t why_len,
                                  int *shape_ok_p)
{
    size_t n = comm ? (size_t)comm->size : 1;
    size_t elems[2], send_elems, recv_elems;
    int in_place, send_here, recv_here;
    chorus_status_t status;

    if (comm != NULL) {
        a->rank = comm->rank;
        a->size = comm->size;
        a->chunk_bytes = comm->ctx->cfg.chunk_bytes;
    }
    coll_args_elems(a, n, elems);
    send_elems = elems[0];
    recv_elems = elems[1];
    in_place = in_place_layout(a);
    send_here = coll_args_reads_send(a);
    recv_here = coll_args_writes_recv(a);
    status = check_shape(comm, a, opts, send_elems, recv_elems, send_here, recv_here, why,
                         why_len);
    if (shape_ok_p != NULL)
        *shape_ok_p = status == CHORUS_OK;
    if (status != CHORUS_OK)
        return status;
    status = check_buffers(a, send_elems, recv_elems, send_here, recv_here, in_place, why,
                           why_len);
    if (status != CHORUS_OK)
        return status;
    return call_memory(a, opts, elems, send_here, recv_here, why, why_len);
}

chorus_status_t chorus__check_call(chorus_comm_t comm, coll_args_t *a,
                                   const chorus_opts_t *opts, char *why, size_t why_len)
{
    return check_call(comm, a, opts, why, why_len, NULL);
}

/*
 * The checks of a call whose shape passed that depend on its buffers: that
 * they fit in the address space, are there where the call needs them and
 * overlap only in the in-place layout. 1 when they pass.
 */
static int buffers_pass(const coll_args_t *a)
{
    size_t esize = chorus_dtype_size(a->dtype), elems[2];
    int send_here = coll_args_reads_send(a), recv_here = coll_args_writes_recv(a);
    char why[8];

    coll_args_elems(a, (size_t)a->size, elems);
    return chorus__mem_fits(send_here ? a->sendbuf : NULL, elems[0] * esize) &&
           chorus__mem_fits(recv_here ? a->recvbuf : NULL, elems[1] * esize) &&
           check_buffers(a, elems[0], elems[1], send_here, recv_here, in_place_layout(a), why,
                         sizeof(why)) == CHORUS_OK;
}

/*
 * opts that say nothing beyond the defaults (NULL, or a valid struct with
 * no flags, priority 0, mem_type AUTO and no stream): the call is checked
 * as without them.
 */
static int opts_plain(const chorus_opts_t *opts)
{
    return opts == NULL ||
           (opts->struct_size >= sizeof(size_t) && chorus__opts_flags(opts) == 0 &&
            (opts->struct_size < offsetof(chorus_opts_t, priority) + sizeof(opts->priority) ||
             opts->priority == 0) &&
            chorus__opts_mem(opts) == CHORUS_MEM_AUTO && chorus__opts_stream(opts) == NULL);
}

/*
 * A call that repeats the communicator's last checked one (comm->call_memo)
 * in its every argument, with plain opts, gets that call's checked
 * arguments in *a: the checks would give the same answers. One that repeats
 * it in all but its buffers gets them too once its buffers pass their own
 * checks; one whose buffers fail them is checked in full, which says why.
 * The memo is kept only where the answers hold for a later call alike:
 * plain opts, and a process without CUDA devices, whose buffers are host
 * memory without a lookup.
 */
static int call_memo_hit(chorus_comm_t comm, coll_args_t *a, const chorus_opts_t *opts)
{
    coll_args_t *g, c;

    if (comm == NULL || !opts_plain(opts))
        return 0;
    g = &comm->call_memo.given;
    if (g->coll != a->coll || g->count != a->count || g->dtype != a->dtype || g->op != a->op ||
        g->root != a->root)
        return 0;
    if (g->sendbuf == a->sendbuf && g->recvbuf == a->recvbuf) {
        *a = comm->call_memo.checked;
        return 1;
    }
    c = comm->call_memo.checked;
    c.sendbuf = a->sendbuf;
    c.recvbuf = a->recvbuf;
    if (!buffers_pass(&c))
        return 0;
    g->sendbuf = c.sendbuf;
    g->recvbuf = c.recvbuf;
    comm->call_memo.checked = c;
    *a = c;
    return 1;
}

static void call_memo_keep(chorus_comm_t comm, const coll_args_t *given,
                           const coll_args_t *checked, const chorus_opts_t *opts)
{
    if (!opts_plain(opts) || chorus__device_present())
        return;
    comm->call_memo.given = *given;
    comm->call_memo.checked = *checked;
}

/*
 * Check and post a call. With blocking set, the call may run at once in the
 * calling thread instead: then *req_p is NULL and the call is over. *req_p
 * is written only when the call returns CHORUS_OK. A call refused for its
 * arguments on a communicator still takes its place in the communicator's
 * sequence, and the other ranks learn of it (refusal.h); this rank runs it
 * on scratch buffers (as the other ranks made it when its own shape was
 * refused), so that the communicator goes on.
 */
static chorus_status_t coll_start(const char *fn, chorus_comm_t comm, coll_args_t *a,
                                  const chorus_opts_t *opts, int blocking,
                                  chorus_request_t *req_p)
{
    chorus_request_t req = NULL;
    chorus_status_t status;
    char why[CHORUS__REFUSAL_WHY_MAX];
    int shape_ok = 1;

    if (!call_memo_hit(comm, a, opts)) {
        coll_args_t given = *a;

        status = check_call(comm, a, opts, why, sizeof(why), &shape_ok);
        if (status == CHORUS_OK)
            call_memo_keep(comm, &given, a, opts);
    } else {
        status = CHORUS_OK;
    }
    if (status == CHORUS_OK && req_p == NULL) {
        snprintf(why, sizeof(why), "invalid argument req_p=NULL");
        status = CHORUS_ERR_INVALID_ARG;
    }
    if (status != CHORUS_OK) {
        chorus__join_t join = {.shape_ok = shape_ok,
                               .wire = shape_ok ? chorus__opts_wire(opts) : CHORUS_DTYPE_COUNT,
                               .blocking = blocking};

        chorus_error("%s: %s", fn, why);
        /* Without a communicator there is no sequence to keep: the error stays here. */
        if (comm != NULL)
            (void)chorus__call_refused(comm, coll_type_name(a->coll), a, why, &join);
        return status;
    }
    if (chorus__opts_wire(opts) != CHORUS_DTYPE_COUNT)
        status = chorus__call_compressed(comm, a, chorus__opts_wire(opts), &req);
    else
        status = chorus__call(comm, a, blocking, &req);
    /* Output arguments are written only on success (chorus_allreduce(3)). */
    if (status == CHORUS_OK)
        *req_p = req;
    return status;
}

static chorus_status_t coll_post(const char *fn, chorus_comm_t comm, coll_args_t *a,
                                 const chorus_opts_t *opts, chorus_request_t *req_p)
{
    return coll_start(fn, comm, a, opts, 0, req_p);
}

static chorus_status_t coll_run(const char *fn, chorus_comm_t comm, coll_args_t *a,
                                const chorus_opts_t *opts)
{
    chorus_request_t req = NULL;
    chorus_status_t status = coll_start(fn, comm, a, opts, 1, &req);

    if (status != CHORUS_OK || req == NULL)
        return status;
    return chorus_request_free(req);
}

#define ARGS(kind, sbuf, rbuf, cnt, dt, o, r)                                           \
    {.coll = (kind), .sendbuf = (sbuf), .recvbuf = (rbuf), .count = (cnt), .dtype = (dt), \
     .op = (o), .root = (r)}

chorus_status_t chorus_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                                 chorus_dtype_t dtype, chorus_op_t op, chorus_comm_t comm,
                                 const chorus_opts_t *opts)
{
    coll_args_t a = ARGS(COLL_ALLREDUCE, sendbuf, recvbuf, count, dtype, op, 0);
    return coll_run(__func__, comm, &a, opts);
}

chorus_status_t chorus_iallreduce(const void *sendbuf, void *recvbuf, size_t count,
                                  chorus_dtype_t dtype, chorus_op_t op, chorus_comm_t comm,
                                  const chorus_opts_t *opts, chorus_request_t *req_p)
{
    coll_args_t a = ARGS(COLL_ALLREDUCE, sendbuf, recvbuf, count, dtype, op, 0);
    return coll_post(__func__, comm, &a, opts, req_p);
}

chorus_status_t chorus_allgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                 chorus_dtype_t dtype, chorus_comm_t comm,
                                 const chorus_opts_t *opts)
{
    coll_args_t a = ARGS(COLL_ALLGATHER, sendbuf, recvbuf, sendcount, dtype, CHORUS_SUM, 0);
    return coll_run(__func__, comm, &a, opts);
}

chorus_status_t chorus_iallgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                  chorus_dtype_t dtype, chorus_comm_t comm,
                                  const chorus_opts_t *opts, chorus_request_t *req_p)
{
    coll_args_t a = ARGS(COLL_ALLGATHER, sendbuf, recvbuf, sendcount, dtype, CHORUS_SUM, 0);
    return coll_post(__func__, comm, &a, opts, req_p);
}

chorus_status_t chorus_broadcast(const void *sendbuf, void *recvbuf, size_t count,
                                 chorus_dtype_t dtype, int root, chorus_comm_t comm,
                                 const chorus_opts_t *opts)
{
    coll_args_t a = ARGS(COLL_BROADCAST, sendbuf, recvbuf, count, dtype, CHORUS_SUM, root);
    return coll_run(__func__, comm, &a, opts);
}

chorus_status_t chorus_ibroadcast(const void *sendbuf, void *recvbuf, size_t count,
                                  chorus_dtype_t dtype, int root, chorus_comm_t comm,
                                  const chorus_opts_t *opts, chorus_request_t *req_p)
{
    coll_args_t a = ARGS(COLL_BROADCAST, sendbuf, recvbuf, count, dtype, CHORUS_SUM, root);
    return coll_post(__func__, comm, &a, opts, req_p);
}

chorus_status_t chorus_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                      chorus_dtype_t dtype, chorus_op_t op, chorus_comm_t comm,
                                      const chorus_opts_t *opts)
{
    coll_args_t a = ARGS(COLL_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, dtype, op, 0);
    return coll_run(__func__, comm, &a, opts);
}

chorus_status_t chorus_ireduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                       chorus_dtype_t dtype, chorus_op_t op, chorus_comm_t comm,
                                       const chorus_opts_t *opts, chorus_request_t *req_p)
{
    coll_args_t a = ARGS(COLL_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, dtype, op, 0);
    return coll_post(__func__, comm, &a, opts, req_p);
}

chorus_status_t chorus_reduce(const void *sendbuf, void *recvbuf, size_t count,
                              chorus_dtype_t dtype, chorus_op_t op, int root, chorus_comm_t comm,
                              const chorus_opts_t *opts)
{
    coll_args_t a = ARGS(COLL_REDUCE, sendbuf, recvbuf, count, dtype, op, root);
    return coll_run(__func__, comm, &a, opts);
}

chorus_status_t chorus_ireduce(const void *sendbuf, void *recvbuf, size_t count,
                               chorus_dtype_t dtype, chorus_op_t op, int root,
                               chorus_comm_t comm, const chorus_opts_t *opts,
                               chorus_request_t *req_p)
{
    coll_args_t a = ARGS(COLL_REDUCE, sendbuf, recvbuf, count, dtype, op, root);
    return coll_post(__func__, comm, &a, opts, req_p);
}

chorus_status_t chorus_alltoall(const void *sendbuf, void *recvbuf, size_t count,
                                chorus_dtype_t dtype, chorus_comm_t comm,
                                const chorus_opts_t *opts)
{
    coll_args_t a = ARGS(COLL_ALLTOALL, sendbuf, recvbuf, count, dtype, CHORUS_SUM, 0);
    return coll_run(__func__, comm, &a, opts);
}

chorus_status_t chorus_ialltoall(const void *sendbuf, void *recvbuf, size_t count,
                                 chorus_dtype_t dtype, chorus_comm_t comm,
                                 const chorus_opts_t *opts, chorus_request_t *req_p)
{
    coll_args_t a = ARGS(COLL_ALLTOALL, sendbuf, recvbuf, count, dtype, CHORUS_SUM, 0);
    return coll_post(__func__, comm, &a, opts, req_p);
}

chorus_status_t chorus_barrier(chorus_comm_t comm, const chorus_opts_t *opts)
{
    coll_args_t a = ARGS(COLL_BARRIER, NULL, NULL, 0, CHORUS_UINT8, CHORUS_SUM, 0);
    return coll_run(__func__, comm, &a, opts);
}

chorus_status_t chorus_ibarrier(chorus_comm_t comm, const chorus_opts_t *opts,
                                chorus_request_t *req_p)
{
    coll_args_t a = ARGS(COLL_BARRIER, NULL, NULL, 0, CHORUS_UINT8, CHORUS_SUM, 0);
    return coll_post(__func__, comm, &a, opts, req_p);
}
