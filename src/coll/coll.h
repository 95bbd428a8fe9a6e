/*
 * Collectives as schedules. An algorithm is a pure builder: from the call's
 * arguments and this rank's position it appends steps (send, receive,
 * reduce, copy) to a schedule, each naming the earlier steps it waits for.
 * One generic executor (schedule.c) runs any schedule over the transport
 * interface, so pipelining falls out of the dependencies: chunk k+1 is on
 * the wire while chunk k is reduced.
 */
#ifndef CHORUS_COLL_H
#define CHORUS_COLL_H

#include <stddef.h>
#include <stdint.h>
#include "chorus.h"
#include "coll/scratch_pool.h"
#include "topology/layout.h"
#include "transports/base/transport.h"

typedef enum {
    COLL_ALLREDUCE = 0,
    COLL_ALLGATHER,
    COLL_BROADCAST,
    COLL_REDUCE_SCATTER,
    COLL_REDUCE,
    COLL_ALLTOALL,
    COLL_BARRIER,
    COLL_TYPE_COUNT
} coll_type_t;

const char *coll_type_name(coll_type_t coll);
/* COLL_TYPE_COUNT when name is unknown. */
coll_type_t coll_type_from_name(const char *name);

/*
 * One call, as the algorithms see it. count follows the public API: the
 * element count per rank for allgather (sendcount), reduce_scatter
 * (recvcount) and alltoall (per peer), the whole vector otherwise.
 */
typedef struct {
    coll_type_t coll;
    const void *sendbuf;
    void *recvbuf;
    size_t count;
    chorus_dtype_t dtype;
    chorus_op_t op;
    int root;
    int rank;
    int size;
    size_t chunk_bytes;     /* pipeline chunk (CHORUS_CHUNK_SIZE) */
    const topo_layout_t *layout;    /* which ranks share a node; NULL: not known */
} coll_args_t;

typedef enum {
    COLL_STEP_SEND = 0,     /* send bytes at src to peer with tag */
    COLL_STEP_RECV,         /* receive exactly bytes into dst from peer with tag */
    COLL_STEP_REDUCE,       /* dst = src op src2, bytes / dtype size elements */
    COLL_STEP_COPY,         /* memcpy(dst, src, bytes); no-op when dst == src */
    COLL_STEP_FINALIZE      /* chorus__reduce_finalize(dst, bytes / esize, nranks): AVG's division */
} coll_step_kind_t;

#define COLL_STEP_MAX_DEPS 4

typedef struct {
    uint8_t kind;
    uint8_t ndeps;
    uint8_t state;          /* executor's: 0 waiting, 1 posted, 2 done */
    int32_t peer;
    uint32_t tag;           /* algorithm's tag; the executor adds the call's sequence number */
    uint32_t deps[COLL_STEP_MAX_DEPS];  /* indices of earlier steps */
    void *dst;
    const void *src;
    const void *src2;
    size_t bytes;
    tl_req_t req;
} coll_step_t;

typedef struct {
    coll_step_t *steps;
    size_t nsteps;
    size_t capacity;
    coll_pool_buf_t *scratch;   /* allocations returned with the schedule */
    size_t nscratch;
    coll_scratch_pool_t *pool;  /* where scratch comes from and goes back to; may be NULL */
    chorus_dtype_t dtype;
    chorus_op_t op;
    int nranks;             /* for FINALIZE */
    /* executor state */
    size_t first_pending;
    chorus_status_t status;
    int failed_peer;        /* peer of the step that failed, or -1 */
} coll_sched_t;

#define COLL_NO_DEP UINT32_MAX

void coll_sched_init(coll_sched_t *sched, chorus_dtype_t dtype, chorus_op_t op, int nranks);
void coll_sched_finalize(coll_sched_t *sched);
/* Scratch memory owned by the schedule (NULL on failure). */
void *coll_sched_alloc(coll_sched_t *sched, size_t bytes);

/*
 * Append a step; returns its index, or -1 when out of memory. deps is an
 * array of ndeps earlier indices; COLL_NO_DEP entries and negative ndeps
 * are ignored.
 */
long coll_sched_send(coll_sched_t *s, int peer, uint32_t tag, const void *src, size_t bytes,
                     const long *deps, int ndeps);
long coll_sched_recv(coll_sched_t *s, int peer, uint32_t tag, void *dst, size_t bytes,
                     const long *deps, int ndeps);
long coll_sched_reduce(coll_sched_t *s, void *dst, const void *a, const void *b, size_t bytes,
                       const long *deps, int ndeps);
long coll_sched_copy(coll_sched_t *s, void *dst, const void *src, size_t bytes,
                     const long *deps, int ndeps);
long coll_sched_finalize_op(coll_sched_t *s, void *buf, size_t bytes,
                            const long *deps, int ndeps);
/*
 * A step that completes once every step in deps[0 .. n) has (negative
 * entries are ignored): empty copies, each waiting for at most
 * COLL_STEP_MAX_DEPS others, joined as a tree. Returns its index, -1 when
 * deps holds no step (nothing to wait for), or -2 when out of memory.
 */
long coll_sched_join(coll_sched_t *s, const long *deps, size_t n);
/* A step that completes once every step from first to the current end has (see above). */
long coll_sched_join_since(coll_sched_t *s, long first);

/*
 * The executor. tag_base is OR-ed into every algorithm tag (the call's
 * sequence number in the high 32 bits). Returns 1 when the schedule is
 * complete, 0 when it is still running, or a negative status when it
 * failed (sched->failed_peer names the peer when a transfer failed).
 */
int coll_sched_progress(coll_sched_t *s, const tl_ops_t *tl, tl_ctx_t *ctx, uint64_t tag_base);

/* Ranks taking part in a stage of an algorithm, as positions 0 .. size-1. */
typedef struct {
    int size;
    int me;                 /* this rank's position */
    const int *ranks;       /* comm rank at each position; NULL: position i is rank i */
} coll_group_t;

/*
 * One ring allreduce among a group, appended to a larger schedule: count
 * elements from send (may equal recv) reduced into recv, chunk elements per
 * pipeline chunk, tags tag0 .. tag0 + coll_ring_allreduce_tags() - 1. No
 * step reads send or touches recv before step `after` (-1: none). AVG's
 * division uses the schedule's rank count.
 */
typedef struct {
    coll_group_t group;
    const void *send;
    void *recv;
    size_t count;
    size_t chunk;
    uint32_t tag0;
    long after;
} coll_ring_part_t;

chorus_status_t coll_ring_allreduce_part(coll_sched_t *sched, const coll_ring_part_t *part,
                                         chorus_op_t op, size_t esize);
size_t coll_ring_allreduce_tags(size_t count, int n, size_t chunk);

/*
 * The checks of a builder whose buffers are count elements (per_rank = 0) or
 * size blocks of count elements (per_rank = 1): dtype, op when it reduces,
 * rank, and overflow of the byte count. Logs the first failure with alg.
 */
chorus_status_t coll_check_blocks(const coll_args_t *args, const char *alg, int reduces,
                                  int per_rank, size_t *esize_p);

/*
 * The checks of a builder that splits work by node: a layout of args->size
 * ranks, and recvbuf (and sendbuf when needs_send) not NULL when count > 0.
 */
chorus_status_t coll_check_layout(const coll_args_t *a, const char *alg, int needs_send);

/* Node-local algorithms run by the shared-memory path (transports/shm), not as schedules. */
typedef enum {
    COLL_SHM_NONE = 0,
    COLL_SHM_FLAT,          /* staging; every rank reads every slot */
    COLL_SHM_SLICE,         /* staging; each rank reduces one slice for all */
    COLL_SHM_CMA            /* single copy between the ranks' buffers */
} coll_shm_kind_t;

/* An algorithm: a schedule builder for one collective, or a node-local kind (build NULL). */
typedef struct {
    const char *name;
    coll_type_t coll;
    chorus_status_t (*build)(const coll_args_t *args, coll_sched_t *sched);
    coll_shm_kind_t shm;
} coll_alg_t;

/* Every algorithm, NULL-terminated; coll_alg_find by (collective, name). */
extern const coll_alg_t *const coll_algs[];
const coll_alg_t *coll_alg_find(coll_type_t coll, const char *name);

/* The algorithms. */
extern const coll_alg_t coll_ring_allreduce;
extern const coll_alg_t coll_rd_allreduce;            /* recursive doubling */
extern const coll_alg_t coll_rabenseifner_allreduce;  /* reduce-scatter halving + allgather doubling */
extern const coll_alg_t coll_ring_allgather;
extern const coll_alg_t coll_ring_reduce_scatter;
extern const coll_alg_t coll_binomial_broadcast;
extern const coll_alg_t coll_chain_broadcast;         /* pipelined chain */
extern const coll_alg_t coll_binomial_reduce;
extern const coll_alg_t coll_pairwise_alltoall;
extern const coll_alg_t coll_dissemination_barrier;
/* Hierarchical: node-local stages over the transport, each byte crossing to a node once. */
extern const coll_alg_t coll_hier_allreduce;
extern const coll_alg_t coll_hier_allgather;
extern const coll_alg_t coll_hier_broadcast;
extern const coll_alg_t coll_hier_reduce_scatter;
extern const coll_alg_t coll_shm_algs[];              /* coll_shm_algs.c, ends with name NULL */

#endif
