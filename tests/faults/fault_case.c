/* One collective call repeated by a fault test: see fault_case.h. */
#include "fault_case.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coll/expect.h"

static const char *const fc_names[FC_COUNT] = {
    "allreduce", "reduce_scatter", "reduce", "allgather", "broadcast", "alltoall", "barrier",
};

const char *fault_coll_name(fault_coll_t coll)
{
    return coll < FC_COUNT ? fc_names[coll] : "?";
}

int fault_coll_reduces(fault_coll_t coll)
{
    return coll == FC_ALLREDUCE || coll == FC_REDUCE_SCATTER || coll == FC_REDUCE;
}

double fault_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int fc_per_rank(fault_coll_t coll)
{
    return coll == FC_ALLGATHER || coll == FC_REDUCE_SCATTER || coll == FC_ALLTOALL;
}

size_t fault_case_count(fault_coll_t coll, chorus_dtype_t dtype, int size, size_t total_bytes)
{
    size_t n = total_bytes / chorus_dtype_size(dtype);

    if (coll == FC_BARRIER)
        return 0;
    return fc_per_rank(coll) ? n / (size_t)size : n;
}

/* Inputs and expected outputs; the layouts are those of chorus.h. */
static void fc_fill(const fault_case_t *c, fault_bufs_t *b)
{
    size_t es = chorus_dtype_size(c->dtype), n = c->count, p = (size_t)c->size;

    b->ncmp = n;
    b->cmp_off = 0;
    switch (c->coll) {
    case FC_ALLREDUCE:
    case FC_REDUCE:
        expect_fill(c->op, c->dtype, c->rank, b->send, n, 0);
        expect_fill_reduced(c->op, c->dtype, c->size, b->want, n, 0);
        if (c->coll == FC_REDUCE && c->rank != c->root)
            b->ncmp = 0;
        break;
    case FC_REDUCE_SCATTER:
        expect_fill(c->op, c->dtype, c->rank, b->send, n * p, 0);
        expect_fill_reduced(c->op, c->dtype, c->size, b->want, n, n * (size_t)c->rank);
        if (c->in_place)
            b->cmp_off = (size_t)c->rank * n * es;
        break;
    case FC_ALLGATHER:
        for (size_t r = 0; r < p; r++)
            expect_fill(CHORUS_MIN, c->dtype, (int)r, b->want + r * n * es, n, r);
        memcpy(b->send, b->want + (size_t)c->rank * n * es, n * es);
        b->ncmp = n * p;
        break;
    case FC_BROADCAST:
        expect_fill(CHORUS_MAX, c->dtype, c->root + 1, b->want, n, 0);
        if (c->rank == c->root)
            memcpy(b->send, b->want, n * es);
        else
            memset(b->send, 0x5a, n * es);
        break;
    case FC_ALLTOALL:
        /* Block j of rank i's input holds values of (i, j); rank j expects them in block i. */
        for (size_t j = 0; j < p; j++)
            expect_fill(CHORUS_MIN, c->dtype, (int)((size_t)c->rank * 31 + j),
                        b->send + j * n * es, n, j);
        for (size_t i = 0; i < p; i++)
            expect_fill(CHORUS_MIN, c->dtype, (int)(i * 31 + (size_t)c->rank),
                        b->want + i * n * es, n, (size_t)c->rank);
        b->ncmp = n * p;
        break;
    default:
        b->ncmp = 0;
        break;
    }
}

int fault_case_setup(const fault_case_t *c, fault_bufs_t *b)
{
    size_t es = chorus_dtype_size(c->dtype), n = c->count, p = (size_t)c->size;
    size_t in = n, out = n;

    memset(b, 0, sizeof(*b));
    if (c->coll == FC_REDUCE_SCATTER || c->coll == FC_ALLTOALL)
        in = n * p;
    if (c->coll == FC_ALLGATHER || c->coll == FC_ALLTOALL ||
        (c->coll == FC_REDUCE_SCATTER && c->in_place))
        out = n * p;
    b->send_bytes = in * es;
    b->recv_bytes = out * es;
    /* One spare element: malloc(0) may return NULL, and count 0 is a valid call. */
    b->send = malloc(b->send_bytes + es);
    b->recv = malloc(b->recv_bytes + es);
    b->want = malloc((c->coll == FC_REDUCE_SCATTER ? n : out) * es + es);
    if (b->send == NULL || b->recv == NULL || b->want == NULL) {
        fault_case_free(b);
        return -1;
    }
    fc_fill(c, b);
    return 0;
}

chorus_status_t fault_case_call(const fault_case_t *c, chorus_comm_t comm, fault_bufs_t *b)
{
    size_t es = chorus_dtype_size(c->dtype), n = c->count, own = (size_t)c->rank * n * es;
    char *s = b->send, *r = b->recv;

    /* Poisoned output: a call that reports success without writing is caught. */
    memset(b->recv, 0xa5, b->recv_bytes);
    if (c->in_place) {
        switch (c->coll) {
        case FC_ALLGATHER:
            memcpy(b->recv + own, b->send, n * es);
            s = b->recv + own;
            break;
        case FC_REDUCE_SCATTER:
            memcpy(b->recv, b->send, b->send_bytes);
            s = b->recv;
            r = b->recv + own;
            break;
        default:
            memcpy(b->recv, b->send, b->send_bytes);
            s = b->recv;
            break;
        }
    }
    switch (c->coll) {
    case FC_ALLREDUCE:
        return chorus_allreduce(s, r, n, c->dtype, c->op, comm, NULL);
    case FC_REDUCE_SCATTER:
        return chorus_reduce_scatter(s, r, n, c->dtype, c->op, comm, NULL);
    case FC_REDUCE:
        return chorus_reduce(s, r, n, c->dtype, c->op, c->root, comm, NULL);
    case FC_ALLGATHER:
        return chorus_allgather(s, r, n, c->dtype, comm, NULL);
    case FC_BROADCAST:
        return chorus_broadcast(s, r, n, c->dtype, c->root, comm, NULL);
    case FC_ALLTOALL:
        return chorus_alltoall(s, r, n, c->dtype, comm, NULL);
    case FC_BARRIER:
        return chorus_barrier(comm, NULL);
    default:
        return CHORUS_ERR_INVALID_ARG;
    }
}

size_t fault_case_check(const fault_case_t *c, const fault_bufs_t *b, const char *label)
{
    /* The common case first: one memcmp instead of a call per element. */
    if (memcmp(b->recv + b->cmp_off, b->want, b->ncmp * chorus_dtype_size(c->dtype)) == 0)
        return 0;
    return expect_compare(c->dtype, b->recv + b->cmp_off, b->want, b->ncmp, label);
}

void fault_case_free(fault_bufs_t *b)
{
    free(b->send);
    free(b->recv);
    free(b->want);
    b->send = b->recv = b->want = NULL;
}
