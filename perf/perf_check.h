/*
 * chorus-perf collectives: what each one is, how big its buffers are, where
 * in-place buffers point, and how its inputs are filled and its outputs
 * checked. Pure code: the calls into the library live in chorus-perf.c.
 */
#ifndef CHORUS_PERF_CHECK_H
#define CHORUS_PERF_CHECK_H

#include <stddef.h>

#include "chorus.h"

typedef enum {
    PERF_ALLREDUCE = 0,
    PERF_ALLGATHER,
    PERF_BROADCAST,
    PERF_REDUCE_SCATTER,
    PERF_REDUCE,
    PERF_ALLTOALL,
    PERF_BARRIER,
    PERF_COLL_COUNT
} perf_coll_t;

typedef struct {
    const char *name;
    int reduces;   /* takes an op */
    int rooted;    /* takes a root */
    int blocks;    /* the call's count is per rank: buffers hold nranks blocks */
} perf_coll_info_t;

const perf_coll_info_t *perf_coll_info(perf_coll_t coll);
/* Collective by name; -1 when unknown. */
int perf_coll_parse(const char *text);

/*
 * One call: count is the count argument of the chorus call (elements per
 * rank or per block for blocked collectives). Root is ignored by collectives
 * without one, op by those that do not reduce.
 */
typedef struct {
    perf_coll_t coll;
    chorus_dtype_t dtype;
    chorus_op_t op;
    int root;
    int rank, nranks;
    size_t count;
    uint32_t compress;  /* CHORUS_COMPRESS_FP16 or _BF16: checked within the bound */
} perf_args_t;

/*
 * The call's count for a requested message size in bytes: bytes / element
 * size, divided by nranks for blocked collectives (nccl-tests' convention:
 * the size of allgather, reduce_scatter and alltoall is the full buffer).
 */
size_t perf_count_for_bytes(perf_coll_t coll, chorus_dtype_t dtype, int nranks,
                            size_t bytes);
/* The message size S of a call, as used for algbw = S / time. */
size_t perf_msg_bytes(const perf_args_t *a);
/* Total elements, as the "count" column shows. */
size_t perf_msg_elems(const perf_args_t *a);
/* busbw / algbw: 2(n-1)/n for allreduce, (n-1)/n for allgather,
 * reduce_scatter and alltoall, 1 for broadcast and reduce. */
double perf_busbw_factor(perf_coll_t coll, int nranks);

/* Elements of each allocation the caller needs for count (also in place). */
size_t perf_send_elems(const perf_args_t *a);
size_t perf_recv_elems(const perf_args_t *a);

/*
 * The buffers to pass to the call, given allocations send_base and
 * recv_base sized by perf_send_elems/perf_recv_elems. In place, both point
 * into recv_base where the API says an in-place call must.
 */
void perf_buffers(const perf_args_t *a, int in_place, void *send_base, void *recv_base,
                  void **send_p, void **recv_p);

/* Writes the check inputs and a sentinel into every output element. */
void perf_fill(const perf_args_t *a, int in_place, void *send_base, void *recv_base);
/*
 * The bound of chorus_allreduce(3) on the error of a compressed allreduce or
 * reduce-scatter of nranks values of at most maxabs (avg: of their mean).
 */
double perf_compress_bound(uint32_t compress, chorus_op_t op, int nranks, double maxabs);
/*
 * Counts output elements that differ from the exact expected value (a
 * compressed call: that lie outside the bound).
 */
size_t perf_check(const perf_args_t *a, int in_place, const void *send_base,
                  const void *recv_base);

#endif
