/*
 * The collectives chorus serves for MPI programs. A call is served when its
 * communicator has a chorus communicator, its datatype and op are ones chorus
 * has (predefined datatypes laid out without gaps; for reductions, the
 * integer and floating types and sum, prod, min, max), its count is
 * positive, and CHORUS_PMPI allows its size. Every input of that decision is
 * the same on every rank of a correct MPI program, so all ranks of a call
 * take the same path. Anything else goes to the MPI library's PMPI_ call
 * with the caller's arguments.
 */
#include "pmpi/pmpi.h"

#include <string.h>

typedef enum {
    CALL_ALLREDUCE, CALL_ALLGATHER, CALL_BCAST, CALL_REDUCE, CALL_REDUCE_SCATTER,
    CALL_ALLTOALL, CALL_BARRIER
} call_kind_t;

/* One call as chorus will run it; buffers as MPI gave them (MPI_IN_PLACE included). */
typedef struct {
    call_kind_t kind;
    const void *sendbuf;
    void *recvbuf;
    size_t count;               /* elements: per rank's block where the collective has blocks */
    chorus_dtype_t dtype;
    chorus_op_t op;
    int root;
    size_t bytes;               /* the size CHORUS_PMPI=auto judges: one rank's result */
    MPI_Datatype types[2];      /* moved as bytes: checked by plain_type (NULL: none) */
} call_t;

/*
 * CHORUS_PMPI=auto: the smallest size (call_t.bytes) at which chorus serves
 * each collective, from the interposed benchmark beside the native one at 2
 * and 4 ranks on one node (docs/PERFORMANCE.md, "MPI programs through the
 * interposer"): below it that MPI's own call was as fast or faster at one of
 * the two counts. Open MPI's shared-memory paths for small calls (and its
 * barrier) are quicker than chorus's at 2 ranks, and its allgather copies
 * once where chorus's copies twice, so allgathers go to chorus only from 16
 * MiB; MPICH's are slower than chorus's but for broadcast and the smallest
 * alltoalls.
 */
static size_t auto_min_bytes(call_kind_t kind)
{
#if defined(OPEN_MPI)
    switch (kind) {
    case CALL_BCAST:
    case CALL_ALLTOALL:
        return 512;
    case CALL_ALLREDUCE:
        return 4096;
    case CALL_ALLGATHER:
        return (size_t)16 << 20;
    default:
        return 16384;
    }
#else
    return kind == CALL_BCAST ? 16384 : kind == CALL_ALLTOALL ? 512 : 0;
#endif
}

static int call_allowed(const call_t *c)
{
    switch (pmpi_serve_mode()) {
    case PMPI_SERVE_ALL:
        return 1;
    case PMPI_SERVE_AUTO:
        return c->bytes >= auto_min_bytes(c->kind);
    default:
        return 0;
    }
}

static void call_init(call_t *c, call_kind_t kind, const void *sendbuf, void *recvbuf,
                      int root)
{
    *c = (call_t){.kind = kind, .sendbuf = sendbuf, .recvbuf = recvbuf, .root = root,
                  .types = {MPI_DATATYPE_NULL, MPI_DATATYPE_NULL}};
}

/* ---- datatypes and ops ---------------------------------------------------- */

enum { SIGNED, UNSIGNED, FLOAT };

/* The chorus dtype of a number of that kind and size in bytes; 0 when chorus has none. */
static int number_dtype(int kind, int size, chorus_dtype_t *dtype_p)
{
    switch (size) {
    case 1:
        *dtype_p = kind == SIGNED ? CHORUS_INT8 : CHORUS_UINT8;
        return kind != FLOAT;
    case 2:
        *dtype_p = CHORUS_FLOAT16;
        return kind == FLOAT;
    case 4:
        *dtype_p = kind == SIGNED ? CHORUS_INT32 : kind == UNSIGNED ? CHORUS_UINT32
                                                                   : CHORUS_FLOAT32;
        return 1;
    case 8:
        *dtype_p = kind == SIGNED ? CHORUS_INT64 : kind == UNSIGNED ? CHORUS_UINT64
                                                                   : CHORUS_FLOAT64;
        return 1;
    default:
        return 0;
    }
}

/*
 * The chorus dtype that reduces type as MPI does; 0 when chorus has none.
 * The C types and the Fortran ones (whose sizes the MPI library knows), by
 * kind; the size comes from the MPI library.
 */
static int reduce_dtype(MPI_Datatype type, chorus_dtype_t *dtype_p)
{
    static const struct {
        MPI_Datatype type;
        int kind;
    } numbers[] = {
        {MPI_FLOAT, FLOAT}, {MPI_DOUBLE, FLOAT},
        {MPI_INT8_T, SIGNED}, {MPI_UINT8_T, UNSIGNED}, {MPI_SIGNED_CHAR, SIGNED},
        {MPI_UNSIGNED_CHAR, UNSIGNED}, {MPI_INT32_T, SIGNED}, {MPI_UINT32_T, UNSIGNED},
        {MPI_INT64_T, SIGNED}, {MPI_UINT64_T, UNSIGNED}, {MPI_INT, SIGNED},
        {MPI_UNSIGNED, UNSIGNED}, {MPI_LONG, SIGNED}, {MPI_UNSIGNED_LONG, UNSIGNED},
        {MPI_LONG_LONG, SIGNED}, {MPI_UNSIGNED_LONG_LONG, UNSIGNED},
        {MPI_REAL, FLOAT}, {MPI_DOUBLE_PRECISION, FLOAT}, {MPI_REAL4, FLOAT},
        {MPI_REAL8, FLOAT}, {MPI_INTEGER, SIGNED}, {MPI_INTEGER1, SIGNED},
        {MPI_INTEGER4, SIGNED}, {MPI_INTEGER8, SIGNED},
#ifdef MPIX_C_FLOAT16
        {MPIX_C_FLOAT16, FLOAT},
#endif
    };
    int size;

    if (type == MPI_DATATYPE_NULL)
        return 0;
    for (size_t i = 0; i < sizeof(numbers) / sizeof(numbers[0]); i++) {
        if (type == numbers[i].type)
            return PMPI_Type_size(type, &size) == MPI_SUCCESS &&
                   number_dtype(numbers[i].kind, size, dtype_p);
    }
    return 0;
}

static int reduce_op(MPI_Op op, chorus_op_t *op_p)
{
    if (op == MPI_SUM)
        *op_p = CHORUS_SUM;
    else if (op == MPI_PROD)
        *op_p = CHORUS_PROD;
    else if (op == MPI_MIN)
        *op_p = CHORUS_MIN;
    else if (op == MPI_MAX)
        *op_p = CHORUS_MAX;
    else
        return 0;
    return 1;
}

/* A reduction of count elements of type with op, as chorus runs it; 0 when it cannot. */
static int reduction(call_t *c, int count, MPI_Datatype type, MPI_Op op)
{
    if (count <= 0 || !reduce_dtype(type, &c->dtype) || !reduce_op(op, &c->op))
        return 0;
    c->count = (size_t)count;
    c->bytes = c->count * chorus_dtype_size(c->dtype);
    return 1;
}

/* The bytes of count elements of type; 0 when count or type cannot be served. */
static size_t type_bytes(int count, MPI_Datatype type)
{
    int size;

    if (count <= 0 || type == MPI_DATATYPE_NULL || PMPI_Type_size(type, &size) != MPI_SUCCESS ||
        size <= 0)
        return 0;
    return (size_t)count * (size_t)size;
}

/*
 * Data that is only moved: count elements of type go as bytes. Whether type
 * may (plain_type) is asked only once the size is one chorus would serve.
 */
static int movement(call_t *c, int count, MPI_Datatype type)
{
    if ((c->count = type_bytes(count, type)) == 0)
        return 0;
    c->dtype = CHORUS_UINT8;
    c->bytes = c->count;
    c->types[0] = type;
    return 1;
}

/* The send side of movement: the same bytes per block as the receive side (c->count). */
static int movement_send(call_t *c, int count, MPI_Datatype type)
{
    if (type_bytes(count, type) != c->count)
        return 0;
    c->types[1] = type;
    return 1;
}

/*
 * Whether type is predefined and without gaps, so that its elements are
 * plain bytes. Derived types (even contiguous ones) and types with holes
 * (MPI_SHORT_INT) stay with the MPI library. Predefined handles never change
 * meaning, so the ones found plain are remembered.
 */
static int plain_type(MPI_Datatype type)
{
    enum { KNOWN = 8 };
    static _Thread_local MPI_Datatype known[KNOWN];
    static _Thread_local unsigned next;
    int nints, naddrs, ntypes, combiner, size;
    MPI_Aint lb, extent;

    if (type == MPI_DATATYPE_NULL)
        return 1;   /* no type to check (in place) */
    for (unsigned i = 0; i < KNOWN; i++) {
        if (known[i] == type)
            return 1;
    }
    if (PMPI_Type_get_envelope(type, &nints, &naddrs, &ntypes, &combiner) != MPI_SUCCESS ||
        combiner != MPI_COMBINER_NAMED || PMPI_Type_size(type, &size) != MPI_SUCCESS ||
        PMPI_Type_get_extent(type, &lb, &extent) != MPI_SUCCESS || lb != 0 ||
        extent != (MPI_Aint)size)
        return 0;
    known[next++ % KNOWN] = type;
    return 1;
}

/* ---- serving a call ------------------------------------------------------- */

/* Runs c on chorus (req_p NULL: blocking). MPI_IN_PLACE becomes chorus's in-place form. */
static chorus_status_t call_run(const call_t *c, chorus_comm_t chorus, chorus_request_t *req_p,
                                void **copy_to, const void **copy_from, size_t *copy_bytes)
{
    int in_place = c->sendbuf == MPI_IN_PLACE, rank = chorus_comm_rank(chorus);
    size_t block = c->count * chorus_dtype_size(c->dtype);
    char *recv = c->recvbuf;
    const void *send = in_place ? c->recvbuf : c->sendbuf;
    chorus_dtype_t t = c->dtype;
    chorus_op_t op = c->op;
    size_t n = c->count;

    *copy_bytes = 0;
    switch (c->kind) {
    case CALL_ALLREDUCE:
        return req_p ? chorus_iallreduce(send, recv, n, t, op, chorus, NULL, req_p)
                     : chorus_allreduce(send, recv, n, t, op, chorus, NULL);
    case CALL_ALLGATHER:
        if (in_place)
            send = recv + (size_t)rank * block;
        return req_p ? chorus_iallgather(send, recv, n, t, chorus, NULL, req_p)
                     : chorus_allgather(send, recv, n, t, chorus, NULL);
    case CALL_BCAST:
        return req_p ? chorus_ibroadcast(recv, recv, n, t, c->root, chorus, NULL, req_p)
                     : chorus_broadcast(recv, recv, n, t, c->root, chorus, NULL);
    case CALL_REDUCE:
        /* recvbuf matters on the root only; elsewhere MPI_IN_PLACE is not allowed as sendbuf. */
        if (rank != c->root)
            recv = NULL;
        return req_p ? chorus_ireduce(send, recv, n, t, op, c->root, chorus, NULL, req_p)
                     : chorus_reduce(send, recv, n, t, op, c->root, chorus, NULL);
    case CALL_REDUCE_SCATTER:
        /* MPI in place: the input is recvbuf and the block goes to its start; chorus's in
           place leaves the block at its position, so it moves once the call is done. */
        if (in_place) {
            recv += (size_t)rank * block;
            if (rank != 0) {
                *copy_to = c->recvbuf;
                *copy_from = recv;
                *copy_bytes = block;
            }
        }
        return req_p ? chorus_ireduce_scatter(send, recv, n, t, op, chorus, NULL, req_p)
                     : chorus_reduce_scatter(send, recv, n, t, op, chorus, NULL);
    case CALL_ALLTOALL:
        return req_p ? chorus_ialltoall(send, recv, n, t, chorus, NULL, req_p)
                     : chorus_alltoall(send, recv, n, t, chorus, NULL);
    case CALL_BARRIER:
        return req_p ? chorus_ibarrier(chorus, NULL, req_p) : chorus_barrier(chorus, NULL);
    }
    return CHORUS_ERR_INTERNAL;
}

/* A rooted call's root is a rank of chorus (else MPI reports the error). */
static int root_ok(const call_t *c, chorus_comm_t chorus)
{
    if (c->kind != CALL_BCAST && c->kind != CALL_REDUCE)
        return 1;
    return c->root >= 0 && c->root < chorus_comm_size(chorus);
}

/*
 * Serves c on comm when chorus can: *rc_p is then the MPI return code and the
 * result 1. c NULL: a call chorus cannot serve (counted as passed). request
 * NULL: a blocking call (which may create comm's chorus communicator); else
 * *request becomes the call's request.
 */
static int serve(pmpi_fn_t fn, MPI_Comm comm, const call_t *c, MPI_Request *request, int *rc_p)
{
    chorus_comm_t chorus;
    chorus_request_t creq = NULL;
    chorus_status_t status;
    void *copy_to = NULL;
    const void *copy_from = NULL;
    size_t copy_bytes;

    if (c == NULL || !call_allowed(c) || !plain_type(c->types[0]) ||
        !plain_type(c->types[1]) || (chorus = pmpi_chorus_comm(comm, request == NULL)) == NULL ||
        !root_ok(c, chorus)) {
        pmpi_count(fn, 0);
        return 0;
    }
    pmpi_count(fn, 1);
    /* A blocking call waits in chorus, which keeps MPI progressing (pmpi_progress). */
    status = call_run(c, chorus, request != NULL ? &creq : NULL, &copy_to, &copy_from,
                      &copy_bytes);
    if (status != CHORUS_OK) {
        *rc_p = pmpi_error(comm, pmpi_fn_name(fn), status);
    } else if (request != NULL) {
        *rc_p = pmpi_request_start(creq, copy_to, copy_from, copy_bytes, request);
    } else {
        if (copy_bytes > 0)
            memmove(copy_to, copy_from, copy_bytes);
        *rc_p = MPI_SUCCESS;
    }
    return 1;
}

/* ---- the MPI functions ---------------------------------------------------- */

static const call_t *allreduce_call(call_t *c, const void *sendbuf, void *recvbuf, int count,
                                    MPI_Datatype type, MPI_Op op)
{
    call_init(c, CALL_ALLREDUCE, sendbuf, recvbuf, 0);
    return reduction(c, count, type, op) ? c : NULL;
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
                  MPI_Comm comm)
{
    call_t call;
    int rc;

    if (serve(PMPI_FN_ALLREDUCE, comm,
              allreduce_call(&call, sendbuf, recvbuf, count, type, op), NULL, &rc))
        return rc;
    return PMPI_Allreduce(sendbuf, recvbuf, count, type, op, comm);
}

int MPI_Iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type,
                   MPI_Op op, MPI_Comm comm, MPI_Request *request)
{
    call_t call;
    int rc;

    if (serve(PMPI_FN_IALLREDUCE, comm,
              allreduce_call(&call, sendbuf, recvbuf, count, type, op), request, &rc))
        return rc;
    return PMPI_Iallreduce(sendbuf, recvbuf, count, type, op, comm, request);
}

/* Allgather and alltoall: a block per rank each way, as bytes; judged by one rank's result. */
static const call_t *blocks_call(call_t *c, call_kind_t kind, const void *sendbuf,
                                 int sendcount, MPI_Datatype sendtype, void *recvbuf,
                                 int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    int size;

    call_init(c, kind, sendbuf, recvbuf, 0);
    if (!movement(c, recvcount, recvtype) ||
        (sendbuf != MPI_IN_PLACE && !movement_send(c, sendcount, sendtype)) ||
        PMPI_Comm_size(comm, &size) != MPI_SUCCESS)
        return NULL;
    c->bytes = c->count * (size_t)size;
    return c;
}

int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    call_t call;
    int rc;

    if (serve(PMPI_FN_ALLGATHER, comm,
              blocks_call(&call, CALL_ALLGATHER, sendbuf, sendcount, sendtype, recvbuf,
                          recvcount, recvtype, comm),
              NULL, &rc))
        return rc;
    return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

int MPI_Iallgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                   int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request)
{
    call_t call;
    int rc;

    if (serve(PMPI_FN_IALLGATHER, comm,
              blocks_call(&call, CALL_ALLGATHER, sendbuf, sendcount, sendtype, recvbuf,
                          recvcount, recvtype, comm),
              request, &rc))
        return rc;
    return PMPI_Iallgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm,
                           request);
}

static const call_t *bcast_call(call_t *c, void *buffer, int count, MPI_Datatype type, int root)
{
    call_init(c, CALL_BCAST, buffer, buffer, root);
    return movement(c, count, type) ? c : NULL;
}

int MPI_Bcast(void *buffer, int count, MPI_Datatype type, int root, MPI_Comm comm)
{
    call_t call;
    int rc;

    if (serve(PMPI_FN_BCAST, comm, bcast_call(&call, buffer, count, type, root), NULL, &rc))
        return rc;
    return PMPI_Bcast(buffer, count, type, root, comm);
}

int MPI_Ibcast(void *buffer, int count, MPI_Datatype type, int root, MPI_Comm comm,
               MPI_Request *request)
{
    call_t call;
    int rc;

    if (serve(PMPI_FN_IBCAST, comm, bcast_call(&call, buffer, count, type, root), request, &rc))
        return rc;
    return PMPI_Ibcast(buffer, count, type, root, comm, request);
}

static const call_t *reduce_call(call_t *c, const void *sendbuf, void *recvbuf, int count,
                                 MPI_Datatype type, MPI_Op op, int root)
{
    call_init(c, CALL_REDUCE, sendbuf, recvbuf, root);
    return reduction(c, count, type, op) ? c : NULL;
}

int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
               int root, MPI_Comm comm)
{
    call_t call;
    int rc;

    if (serve(PMPI_FN_REDUCE, comm,
              reduce_call(&call, sendbuf, recvbuf, count, type, op, root), NULL, &rc))
        return rc;
    return PMPI_Reduce(sendbuf, recvbuf, count, type, op, root, comm);
}

int MPI_Ireduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
                int root, MPI_Comm comm, MPI_Request *request)
{
    call_t call;
    int rc;

    if (serve(PMPI_FN_IREDUCE, comm,
              reduce_call(&call, sendbuf, recvbuf, count, type, op, root), request, &rc))
        return rc;
    return PMPI_Ireduce(sendbuf, recvbuf, count, type, op, root, comm, request);
}

static const call_t *reduce_scatter_call(call_t *c, const void *sendbuf, void *recvbuf,
                                         int recvcount, MPI_Datatype type, MPI_Op op)
{
    call_init(c, CALL_REDUCE_SCATTER, sendbuf, recvbuf, 0);
    return reduction(c, recvcount, type, op) ? c : NULL;
}

int MPI_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount,
                             MPI_Datatype type, MPI_Op op, MPI_Comm comm)
{
    call_t call;
    int rc;

    if (serve(PMPI_FN_REDUCE_SCATTER_BLOCK, comm,
              reduce_scatter_call(&call, sendbuf, recvbuf, recvcount, type, op), NULL, &rc))
        return rc;
    return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, type, op, comm);
}

int MPI_Ireduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount,
                              MPI_Datatype type, MPI_Op op, MPI_Comm comm, MPI_Request *request)
{
    call_t call;
    int rc;

    if (serve(PMPI_FN_IREDUCE_SCATTER_BLOCK, comm,
              reduce_scatter_call(&call, sendbuf, recvbuf, recvcount, type, op), request, &rc))
        return rc;
    return PMPI_Ireduce_scatter_block(sendbuf, recvbuf, recvcount, type, op, comm, request);
}

int MPI_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                 int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    call_t call;
    int rc;

    if (serve(PMPI_FN_ALLTOALL, comm,
              blocks_call(&call, CALL_ALLTOALL, sendbuf, sendcount, sendtype, recvbuf,
                          recvcount, recvtype, comm),
              NULL, &rc))
        return rc;
    return PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

int MPI_Ialltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request)
{
    call_t call;
    int rc;

    if (serve(PMPI_FN_IALLTOALL, comm,
              blocks_call(&call, CALL_ALLTOALL, sendbuf, sendcount, sendtype, recvbuf,
                          recvcount, recvtype, comm),
              request, &rc))
        return rc;
    return PMPI_Ialltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm,
                          request);
}

int MPI_Barrier(MPI_Comm comm)
{
    call_t c;
    int rc;

    call_init(&c, CALL_BARRIER, NULL, NULL, 0);
    if (serve(PMPI_FN_BARRIER, comm, &c, NULL, &rc))
        return rc;
    return PMPI_Barrier(comm);
}

int MPI_Ibarrier(MPI_Comm comm, MPI_Request *request)
{
    call_t c;
    int rc;

    call_init(&c, CALL_BARRIER, NULL, NULL, 0);
    if (serve(PMPI_FN_IBARRIER, comm, &c, request, &rc))
        return rc;
    return PMPI_Ibarrier(comm, request);
}
