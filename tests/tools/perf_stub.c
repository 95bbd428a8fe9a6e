/*
 * A one-rank stand-in for the chorus library, enough to run chorus-perf end
 * to end before (or without) the real library: with one rank every
 * collective is a copy. CHORUS_STUB_CORRUPT=1 makes out-of-place allreduce
 * write one wrong element, so that the tool's checking can be seen to fail.
 * Test code only; never linked into the library or the tools.
 */
#include <stdlib.h>
#include <string.h>

#include "chorus.h"

struct chorus_comm {
    int corrupt;
};

static size_t stub_esize(chorus_dtype_t dtype)
{
    static const size_t sizes[CHORUS_DTYPE_COUNT] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};
    return (int)dtype >= 0 && dtype < CHORUS_DTYPE_COUNT ? sizes[dtype] : 0;
}

const char *chorus_status_string(chorus_status_t status)
{
    return status == CHORUS_OK ? "success" : "stub error";
}

const char *chorus_version_string(void)
{
    return "0.1.0-stub";
}

chorus_status_t chorus_comm_create_from_env(chorus_comm_t *comm_p)
{
    const char *size = getenv("CHORUS_SIZE");
    const char *corrupt = getenv("CHORUS_STUB_CORRUPT");
    chorus_comm_t comm;

    if (size != NULL && strcmp(size, "1") != 0)
        return CHORUS_ERR_UNSUPPORTED;
    comm = calloc(1, sizeof(*comm));
    if (comm == NULL)
        return CHORUS_ERR_NO_MEMORY;
    comm->corrupt = corrupt != NULL && strcmp(corrupt, "1") == 0;
    *comm_p = comm;
    return CHORUS_OK;
}

chorus_status_t chorus_comm_destroy(chorus_comm_t comm)
{
    free(comm);
    return CHORUS_OK;
}

chorus_status_t chorus_comm_abort(chorus_comm_t comm)
{
    (void)comm;
    return CHORUS_OK;
}

int chorus_comm_rank(chorus_comm_t comm) { return comm ? 0 : -1; }
int chorus_comm_size(chorus_comm_t comm) { return comm ? 1 : -1; }
int chorus_comm_local_size(chorus_comm_t comm) { return comm ? 1 : -1; }

static chorus_status_t stub_copy(const void *src, void *dst, size_t count,
                                 chorus_dtype_t dtype)
{
    if (stub_esize(dtype) == 0 || (count > 0 && (src == NULL || dst == NULL)))
        return CHORUS_ERR_INVALID_ARG;
    if (count > 0)
        memmove(dst, src, count * stub_esize(dtype));
    return CHORUS_OK;
}

chorus_status_t chorus_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                                 chorus_dtype_t dtype, chorus_op_t op,
                                 chorus_comm_t comm, const chorus_opts_t *opts)
{
    chorus_status_t st = stub_copy(sendbuf, recvbuf, count, dtype);

    (void)op;
    (void)opts;
    if (st == CHORUS_OK && comm->corrupt && sendbuf != recvbuf && count > 0)
        ((unsigned char *)recvbuf)[0] ^= 0x40;
    return st;
}

chorus_status_t chorus_allgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                 chorus_dtype_t dtype, chorus_comm_t comm,
                                 const chorus_opts_t *opts)
{
    (void)comm;
    (void)opts;
    return stub_copy(sendbuf, recvbuf, sendcount, dtype);
}

chorus_status_t chorus_broadcast(const void *sendbuf, void *recvbuf, size_t count,
                                 chorus_dtype_t dtype, int root, chorus_comm_t comm,
                                 const chorus_opts_t *opts)
{
    (void)comm;
    (void)opts;
    return root != 0 ? CHORUS_ERR_INVALID_ARG : stub_copy(sendbuf, recvbuf, count, dtype);
}

chorus_status_t chorus_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                      chorus_dtype_t dtype, chorus_op_t op,
                                      chorus_comm_t comm, const chorus_opts_t *opts)
{
    (void)op;
    (void)comm;
    (void)opts;
    return stub_copy(sendbuf, recvbuf, recvcount, dtype);
}

chorus_status_t chorus_reduce(const void *sendbuf, void *recvbuf, size_t count,
                              chorus_dtype_t dtype, chorus_op_t op, int root,
                              chorus_comm_t comm, const chorus_opts_t *opts)
{
    (void)op;
    (void)comm;
    (void)opts;
    return root != 0 ? CHORUS_ERR_INVALID_ARG : stub_copy(sendbuf, recvbuf, count, dtype);
}

chorus_status_t chorus_alltoall(const void *sendbuf, void *recvbuf, size_t count,
                                chorus_dtype_t dtype, chorus_comm_t comm,
                                const chorus_opts_t *opts)
{
    (void)comm;
    (void)opts;
    return stub_copy(sendbuf, recvbuf, count, dtype);
}

chorus_status_t chorus_barrier(chorus_comm_t comm, const chorus_opts_t *opts)
{
    (void)opts;
    return comm != NULL ? CHORUS_OK : CHORUS_ERR_INVALID_ARG;
}
