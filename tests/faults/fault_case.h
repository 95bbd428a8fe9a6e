/*
 * One collective call repeated by a fault test: its buffers, exact inputs
 * and exact expected output (from tests/coll/expect.h), so that a rank can
 * loop the call and prove every call that returned CHORUS_OK was correct,
 * up to the moment a fault makes a call fail.
 */
#ifndef CHORUS_TEST_FAULT_CASE_H
#define CHORUS_TEST_FAULT_CASE_H

#include <stddef.h>
#include "chorus.h"

typedef enum {
    FC_ALLREDUCE,
    FC_REDUCE_SCATTER,
    FC_REDUCE,
    FC_ALLGATHER,
    FC_BROADCAST,
    FC_ALLTOALL,
    FC_BARRIER,
    FC_COUNT
} fault_coll_t;

typedef struct {
    fault_coll_t coll;
    chorus_dtype_t dtype;
    chorus_op_t op;
    size_t count;       /* the call's count argument (per rank for allgather, ...) */
    int root;
    int in_place;
    int rank, size;
} fault_case_t;

typedef struct {
    char *send, *recv, *want;
    size_t send_bytes, recv_bytes;
    size_t ncmp;        /* elements compared after each call */
    size_t cmp_off;     /* byte offset of the compared output in recv */
} fault_bufs_t;

const char *fault_coll_name(fault_coll_t coll);
int fault_coll_reduces(fault_coll_t coll);

/* The count argument that moves about total_bytes in all (the size a trial draws). */
size_t fault_case_count(fault_coll_t coll, chorus_dtype_t dtype, int size, size_t total_bytes);

/* Allocate and fill the buffers of c; returns 0, or -1 when out of memory. */
int fault_case_setup(const fault_case_t *c, fault_bufs_t *b);
/* Reset the input (in place) or poison the output, then make the call. */
chorus_status_t fault_case_call(const fault_case_t *c, chorus_comm_t comm, fault_bufs_t *b);
/* Elements of the last call's output that differ from the expected ones. */
size_t fault_case_check(const fault_case_t *c, const fault_bufs_t *b, const char *label);
void fault_case_free(fault_bufs_t *b);

/* Seconds on CLOCK_MONOTONIC, comparable between the processes of one machine. */
double fault_now(void);

#endif
