/* The collective test matrix: see coll_matrix.h. */
#include "coll_matrix.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h"

typedef enum { M_ALLREDUCE, M_REDUCE_SCATTER, M_REDUCE, M_ALLGATHER, M_BROADCAST, M_ALLTOALL,
               M_COUNT } m_coll_t;
static const char *const m_names[] = {"allreduce", "reduce_scatter", "reduce", "allgather",
                                      "broadcast", "alltoall"};

typedef struct {
    m_coll_t coll;
    chorus_dtype_t dtype;
    chorus_op_t op;
    size_t count;           /* per rank for allgather, reduce_scatter, alltoall */
    int root;
    int in_place;
    int rank, size;
    char label[160];
} m_case_t;

/* Fill send (and recv for in place) and the expected recv; returns elements to compare. */
static size_t m_prepare(const m_case_t *c, char *send, char *want)
{
    size_t es = chorus_dtype_size(c->dtype), n = c->count, p = (size_t)c->size;

    switch (c->coll) {
    case M_ALLREDUCE:
        expect_fill(c->op, c->dtype, c->rank, send, n, 0);
        expect_fill_reduced(c->op, c->dtype, c->size, want, n, 0);
        return n;
    case M_REDUCE:
        expect_fill(c->op, c->dtype, c->rank, send, n, 0);
        expect_fill_reduced(c->op, c->dtype, c->size, want, n, 0);
        return c->rank == c->root ? n : 0;
    case M_REDUCE_SCATTER:
        expect_fill(c->op, c->dtype, c->rank, send, n * p, 0);
        expect_fill_reduced(c->op, c->dtype, c->size, want, n, n * (size_t)c->rank);
        return n;
    case M_ALLGATHER:
        for (size_t r = 0; r < p; r++)
            expect_fill(CHORUS_MIN, c->dtype, (int)r, want + r * n * es, n, r);
        memcpy(send, want + (size_t)c->rank * n * es, n * es);
        return n * p;
    case M_BROADCAST:
        expect_fill(CHORUS_MAX, c->dtype, c->root + 1, want, n, 0);
        if (c->rank == c->root)
            memcpy(send, want, n * es);
        else
            memset(send, 0x5a, n * es);
        return n;
    case M_ALLTOALL:
        /* Block j of rank i's send holds values of (i, j); rank j expects (i, j) at block i. */
        for (size_t j = 0; j < p; j++)
            expect_fill(CHORUS_MIN, c->dtype, (int)(c->rank * 31 + j), send + j * n * es, n, j);
        for (size_t i = 0; i < p; i++)
            expect_fill(CHORUS_MIN, c->dtype, (int)(i * 31 + (size_t)c->rank),
                        want + i * n * es, n, (size_t)c->rank);
        return n * p;
    default:
        return 0;
    }
}

static chorus_status_t m_call(const m_case_t *c, chorus_comm_t comm, char *send, char *recv)
{
    size_t es = chorus_dtype_size(c->dtype), n = c->count;

    switch (c->coll) {
    case M_ALLREDUCE:
        return chorus_allreduce(send, recv, n, c->dtype, c->op, comm, NULL);
    case M_REDUCE:
        return chorus_reduce(send, recv, n, c->dtype, c->op, c->root, comm, NULL);
    case M_REDUCE_SCATTER:
        return chorus_reduce_scatter(send, recv, n, c->dtype, c->op, comm, NULL);
    case M_ALLGATHER:
        return chorus_allgather(send, recv, n, c->dtype, comm, NULL);
    case M_BROADCAST:
        return chorus_broadcast(send, recv, n, c->dtype, c->root, comm, NULL);
    case M_ALLTOALL:
        return chorus_alltoall(send, recv, n, c->dtype, comm, NULL);
    default:
        (void)es;
        return CHORUS_ERR_INVALID_ARG;
    }
}

/* A buffer of the matrix's kind for this rank: malloc, or chorus_mem_alloc on mem_comm. */
static void *m_alloc(const coll_matrix_t *m, chorus_comm_t comm, int rank, size_t bytes)
{
    void *p = NULL;

    if (m->mem == COLL_MATRIX_MALLOC || (m->mem == COLL_MATRIX_MIXED && rank % 2 == 1))
        return malloc(bytes);
    if (chorus_mem_alloc(m->mem_comm != NULL ? m->mem_comm : comm, bytes, &p) != CHORUS_OK)
        return NULL;
    return p;
}

static void m_free(const coll_matrix_t *m, chorus_comm_t comm, int rank, void *p)
{
    chorus_status_t status;

    if (m->mem == COLL_MATRIX_MALLOC || (m->mem == COLL_MATRIX_MIXED && rank % 2 == 1)) {
        free(p);
        return;
    }
    status = chorus_mem_free(m->mem_comm != NULL ? m->mem_comm : comm, p);
    if (status != CHORUS_OK) {
        fprintf(stderr, "rank %d: chorus_mem_free after a completed call: %s\n", rank,
                chorus_status_string(status));
        abort();
    }
}

static int m_run_case(chorus_comm_t comm, const coll_matrix_t *m, m_case_t *c)
{
    size_t es = chorus_dtype_size(c->dtype), p = (size_t)c->size;
    size_t bytes = (c->count * p + 1) * es;
    char *send = m_alloc(m, comm, c->rank, bytes), *recv = m_alloc(m, comm, c->rank, bytes);
    char *want = malloc(bytes);
    char *s, *r, *cmp;
    size_t ncmp, wrong;
    chorus_status_t status;
    int failed = 0;

    if (!send || !recv || !want) {
        fprintf(stderr, "%s: out of memory\n", c->label);
        failed = 1;
        goto out;
    }
    memset(recv, 0xa5, bytes);
    ncmp = m_prepare(c, send, want);
    s = send;
    r = recv;
    cmp = recv;
    if (c->in_place) {
        /* The in-place layouts of the public API. */
        switch (c->coll) {
        case M_ALLGATHER:
            memcpy(recv + (size_t)c->rank * c->count * es, send, c->count * es);
            s = recv + (size_t)c->rank * c->count * es;
            break;
        case M_REDUCE_SCATTER:
            memcpy(recv, send, c->count * p * es);
            s = recv;
            r = cmp = recv + (size_t)c->rank * c->count * es;
            break;
        default:
            memcpy(recv, send, (c->coll == M_ALLTOALL ? c->count * p : c->count) * es);
            s = recv;
            break;
        }
    }
    status = m_call(c, comm, s, r);
    if (status != CHORUS_OK) {
        fprintf(stderr, "%s: %s\n", c->label, chorus_status_string(status));
        failed = 1;
        goto out;
    }
    wrong = expect_compare(c->dtype, cmp, want, ncmp, c->label);
    if (wrong) {
        fprintf(stderr, "%s: %zu of %zu elements wrong\n", c->label, wrong, ncmp);
        failed = 1;
    }
out:
    if (send != NULL)
        m_free(m, comm, c->rank, send);
    if (recv != NULL)
        m_free(m, comm, c->rank, recv);
    free(want);
    return failed;
}

static int m_reducing(m_coll_t coll)
{
    return coll == M_ALLREDUCE || coll == M_REDUCE_SCATTER || coll == M_REDUCE;
}

/* Per-rank count for the collectives whose count is per rank. */
static size_t m_count(m_coll_t coll, size_t whole, int size)
{
    if (coll == M_ALLGATHER || coll == M_REDUCE_SCATTER || coll == M_ALLTOALL)
        return whole / (size_t)size + (whole % (size_t)size != 0);
    return whole;
}

static int m_run_count(chorus_comm_t comm, const coll_matrix_t *m, int rank, int size,
                       size_t whole)
{
    int failures = 0;

    for (int coll = 0; coll < M_COUNT; coll++) {
        for (int d = 0; d < CHORUS_DTYPE_COUNT; d++) {
            int nops = m_reducing((m_coll_t)coll) ? CHORUS_OP_COUNT : 1;
            for (int op = 0; op < nops; op++) {
                for (int in_place = 0; in_place < 2; in_place++) {
                    m_case_t c = {
                        .coll = (m_coll_t)coll, .dtype = (chorus_dtype_t)d,
                        .op = (chorus_op_t)op, .count = m_count((m_coll_t)coll, whole, size),
                        .root = (int)((whole + (size_t)op + (size_t)d) % (size_t)size),
                        .in_place = in_place, .rank = rank, .size = size,
                    };
                    snprintf(c.label, sizeof(c.label),
                             "rank %d/%d: %s %s %s count %zu root %d %s", rank, size,
                             m_names[coll], chorus_dtype_name(c.dtype),
                             m_reducing(c.coll) ? chorus_op_name(c.op) : "-", c.count, c.root,
                             in_place ? "in-place" : "out-of-place");
                    failures += m_run_case(comm, m, &c);
                }
            }
        }
    }
    if (chorus_barrier(comm, NULL) != CHORUS_OK) {
        fprintf(stderr, "rank %d/%d: barrier after count %zu failed\n", rank, size, whole);
        failures++;
    }
    return failures;
}

int coll_matrix_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    const coll_matrix_t *m = arg;
    int failures = 0;

    for (int k = 0; k < m->ncounts; k++)
        failures += m_run_count(comm, m, rank, size, m->counts[k]);
    if (m->big_count)
        failures += m_run_count(comm, m, rank, size, m->big_count);
    return failures > 100 ? 100 : failures;
}
