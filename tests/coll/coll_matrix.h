/*
 * The collective test matrix run on every rank: every collective, dtype, op,
 * count, root, in place and out of place, each result checked exactly.
 */
#ifndef CHORUS_TEST_COLL_MATRIX_H
#define CHORUS_TEST_COLL_MATRIX_H

#include <stddef.h>
#include "chorus.h"

typedef struct {
    const size_t *counts;   /* whole-vector element counts to try */
    int ncounts;
    size_t big_count;       /* a large count tried for every dtype and op (0: none) */
    int mem;                /* COLL_MATRIX_*: where the buffers come from */
    chorus_comm_t mem_comm; /* the communicator chorus_mem_alloc is given (NULL: the call's) */
} coll_matrix_t;

#define COLL_MATRIX_MALLOC 0    /* malloc on every rank */
#define COLL_MATRIX_CHORUS 1    /* chorus_mem_alloc on every rank */
#define COLL_MATRIX_MIXED 2     /* chorus_mem_alloc on even ranks, malloc on odd ones */

/* Runs the matrix on this rank; returns the number of failures (0 = all exact). */
int coll_matrix_rank(chorus_comm_t comm, int rank, int size, void *matrix);

#endif
