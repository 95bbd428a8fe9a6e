/*
 * Collectives as schedules. An algorithm is a pure builder: from the call's
 * arguments and this rank's place (the environment: layout, node team) it
 * appends steps (send, receive, reduce, copy, a collective on a team) to a
 * schedule, each naming the earlier steps it waits for. One generic
 * executor (schedule.c) runs any schedule through a port (a communicator's
 * view of the transports), so pipelining falls out of the dependencies:
 * chunk k+1 is on the wire while chunk k is reduced. A schedule is a task
 * (transports/base/task.h), as is a collective a collective transport runs
 * on a team.
 */
#ifndef CHORUS_COLL_H
#define CHORUS_COLL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "chorus.h"
#include "coll/scratch_pool.h"
#include "topology/layout.h"
#include "transports/base/coll_args.h"
#include "transports/base/task.h"
#include "transports/base/team.h"
#include "transports/base/transport.h"
#include "tuning/cost_model.h"
#include "util/trace.h"

/*
 * A team as the algorithms see it: the collective transport serving it, its
 * members (ranks of the communicator, ascending) and this rank's position.
 * team is NULL for a team that is only described, for pricing.
 */
typedef struct {
    const tl_coll_ops_t *ops;
    tl_coll_ctx_t *ctx;
    tl_team_t *team;
    tl_team_desc_t desc;
    const int *ranks;           /* [desc.size] */
    int me;
} coll_team_t;

/*
 * Where a call runs, beyond its arguments: what builders and prices read.
 * Every rank of a communicator has the same environment but for node_team.
 */
typedef struct {
    int nranks;
    const topo_layout_t *layout;    /* which ranks share a node; NULL: not known */
    /*
     * This rank's node's team, when a collective transport serves every node
     * of more than one rank (NULL: node-local stages go through the port).
     */
    coll_team_t *node_team;
    /* For pricing: the collective transport of the node teams and the typical team. */
    const tl_coll_ops_t *team_ops;
    tl_coll_ctx_t *team_ctx;
    tl_team_desc_t team_desc;
    const tune_model_t *model;
    int cores;                      /* cores the ranks run on at once; 0: not known */
    coll_mem_t mem;
} coll_env_t;

typedef enum {
    COLL_STEP_SEND = 0,     /* send bytes at src to peer with tag */
    COLL_STEP_RECV,         /* receive exactly bytes into dst from peer with tag */
    COLL_STEP_REDUCE,       /* dst = src op src2, bytes / dtype size elements */
    COLL_STEP_COPY,         /* memcpy(dst, src, bytes); no-op when dst == src */
    COLL_STEP_FINALIZE,     /* chorus__reduce_finalize(dst, bytes / esize, nranks): AVG's division */
    COLL_STEP_TEAM          /* a collective on a team: the task runs it */
} coll_step_kind_t;

#define COLL_STEP_MAX_DEPS 4

typedef struct {
    uint8_t kind;
    uint8_t ndeps;
    uint8_t state;          /* executor's: 0 waiting, 1 posted, 2 done */
    uint8_t team_coll;      /* COLL_STEP_TEAM: the collective it runs (coll_type_t), for traces */
    int32_t peer;
    uint32_t tag;           /* algorithm's tag; the executor adds the call's sequence number */
    uint8_t final;          /* the highest tag of its kind with its peer: sent with TL_TAG_FINAL */
    uint32_t deps[COLL_STEP_MAX_DEPS];  /* indices of earlier steps */
    void *dst;
    const void *src;
    const void *src2;
    size_t bytes;
    chorus__task_t *task;   /* COLL_STEP_TEAM */
    void *wire_buf;         /* a compressed transfer's 16-bit values (the schedule's scratch) */
    tl_req_t req;
} coll_step_t;

typedef struct {
    chorus__task_t head;    /* a schedule is a task */
    coll_step_t *steps;
    size_t nsteps;
    size_t capacity;
    coll_pool_buf_t *scratch;   /* allocations returned with the schedule */
    size_t nscratch;
    coll_scratch_pool_t *pool;  /* where scratch comes from and goes back to; may be NULL */
    chorus_dtype_t dtype;
    chorus_op_t op;
    int nranks;             /* for FINALIZE */
    int owned;              /* allocated by coll_sched_create: finalize frees it */
    /*
     * Compressed transfers (coll_compress.c): with wire set to CHORUS_FLOAT16
     * or CHORUS_BFLOAT16, a float32 schedule's sends carry its values times
     * wire_scale rounded to wire, and its receives widen them back into
     * float32; everything else runs in float32. CHORUS_DTYPE_COUNT: none.
     * Set before the schedule is posted.
     */
    chorus_dtype_t wire;
    float wire_scale;
    tl_port_t *port;        /* where transfers go (coll_sched_bind) */
    uint64_t tag_base;      /* OR-ed into every step's tag */
    /* executor state */
    size_t first_pending;
    chorus_status_t status;
    int failed_peer;        /* peer of the step that failed, or -1 */
    /* CHORUS_TRACE: where the waits of the schedule go (NULL: off), and the wait open now. */
    chorus__trace_t *trace;
    uint32_t trace_tid;
    int trace_open;
    size_t trace_step;
    double trace_since;
} coll_sched_t;

#define COLL_NO_DEP UINT32_MAX

/*
 * Record in trace, on track tid, the stretches where task (a schedule; any
 * other task is left alone) waits on its first unfinished step: a transfer
 * with a peer or a node team's collective. They follow each other, so they
 * nest inside the call's slice.
 */
void coll_task_trace(chorus__task_t *task, chorus__trace_t *trace, uint32_t tid);
/*
 * The collective transport that runs task or some of its steps ("shm"), or
 * NULL when only point-to-point transfers do.
 */
const char *coll_task_team_name(const chorus__task_t *task);

/* A schedule in place (tests), or one on the heap that its task's finalize frees. */
void coll_sched_init(coll_sched_t *sched, chorus_dtype_t dtype, chorus_op_t op, int nranks);
chorus_status_t coll_sched_create(coll_scratch_pool_t *pool, chorus_dtype_t dtype,
                                  chorus_op_t op, int nranks, coll_sched_t **sched_p);
/* Free the steps and scratch (and the schedule itself when created). */
void coll_sched_finalize(coll_sched_t *sched);
/*
 * Where the schedule's transfers go: port, with tag_base OR-ed into every
 * tag. Call once the schedule is built: it marks the transfer with the
 * highest tag to and from each peer (TL_TAG_FINAL), so that ranks whose
 * calls differ in how many messages pass between them fail rather than
 * leave messages behind. CHORUS_ERR_NO_MEMORY when it cannot.
 */
chorus_status_t coll_sched_bind(coll_sched_t *sched, tl_port_t *port, uint64_t tag_base);
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
 * A collective on team: args in the team's positions (rank = team->me, size
 * = its members); the v-forms' arrays and the buffers must outlive the
 * schedule (coll_sched_alloc). The team runs it with the variant its
 * transport prices lowest. The task is created now, so the call takes its
 * team turn in the order the steps are appended. Returns the step's index,
 * or -1 when out of memory or no variant runs it.
 */
long coll_sched_team(coll_sched_t *s, coll_team_t *team, const coll_args_t *args,
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

/* 1 once step idx has completed (the executor ran it); a negative idx counts as done. */
int coll_sched_step_done(const coll_sched_t *s, long idx);

/*
 * The executor, through the port and tag base given by coll_sched_bind.
 * Returns 1 when the schedule is complete, 0 when it is still running, or
 * a negative status when it failed (sched->failed_peer names the peer when
 * a transfer failed).
 */
int coll_sched_progress(coll_sched_t *s);

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
chorus_status_t coll_check_layout(const coll_args_t *a, const coll_env_t *env, const char *alg,
                                  int needs_send);

/*
 * An algorithm: a schedule builder, or (team_ops set) a variant of a
 * collective transport that runs the whole call on the node team, when that
 * team holds every rank. A builder prices itself: the estimated seconds of a
 * call of bytes (coll_args_bytes) in env, with the cost model's primitives
 * (tuning/), or INFINITY where it cannot run or must not be chosen (the
 * hierarchical ones where the ranks do not span nodes: they still run there
 * when forced). A team variant is priced by its transport (coll_alg_price).
 * The selection table (select.h) is built from these prices.
 */
typedef struct coll_alg {
    const char *name;
    coll_type_t coll;
    chorus_status_t (*build)(const coll_args_t *args, const coll_env_t *env,
                             coll_sched_t *sched);
    double (*price)(const coll_env_t *env, size_t bytes);
    const tl_coll_ops_t *team_ops;
    int team_variant;
} coll_alg_t;

/* ---- prices (coll_price.c) ----------------------------------------------- */

/*
 * What alg estimates for a call of bytes in env: a builder's price, or for a
 * team variant its transport's, where a node team serves every rank of the
 * communicator, with the team flags the variant needs, in a memory type the
 * variant serves (INFINITY otherwise).
 */
double coll_alg_price(const coll_alg_t *alg, const coll_env_t *env, size_t bytes);

/* Whether one node team holds every rank of env (the team variants run there). */
int coll_env_team_of_all(const coll_env_t *env);

/* The shape of env's layout; without a layout, one node of unknown size (nnodes 0). */
void coll_price_shape(const coll_env_t *env, tune_shape_t *shape_p);

/*
 * A flat algorithm's price: cost on env's model, in host memory. On several
 * nodes the algorithm sees the node links its flows share (tune_flat_model;
 * ring_shaped: its flows follow the ring); on one node with more ranks than
 * cores, the ranks share the cores (tune_share).
 */
double coll_price_flat(const coll_env_t *env, tune_cost_fn_t cost, int ring_shaped,
                       size_t bytes);
/* ring_shaped of coll_price_flat. */
#define COLL_FLOWS_RING 1   /* one flow per ring edge: ring, chain */
#define COLL_FLOWS_NODE 0   /* every rank of a node at once: trees, recursive doubling */

/*
 * Where a hierarchical algorithm is priced: 1 with the layout's shape when
 * the ranks span several nodes, some of them holding several ranks, in host
 * memory. Otherwise 0 with *price_p set to what it costs there instead:
 * nothing for one rank, INFINITY where it does not help or cannot run.
 */
int coll_price_hier(const coll_env_t *env, tune_shape_t *shape_p, double *price_p);

/*
 * A node-local stage of a hierarchical algorithm running coll on bytes on
 * env's node team (env->team_ops set): the price of the cheapest variant.
 */
double coll_price_team(const coll_env_t *env, coll_type_t coll, double bytes);

/*
 * The cheapest variant of ops that runs coll (vform: its v-form) on buffers in
 * mem on a team described by desc, with its price in *price_p; -1 when none does. Every
 * member prices the same call alike, so all choose the same one.
 */
int coll_team_variant(const tl_coll_ops_t *ops, const tl_coll_ctx_t *ctx,
                      const tl_team_desc_t *desc, coll_type_t coll, coll_mem_t mem,
                      size_t bytes, int vform, double *price_p);

/*
 * The task of a call with alg: a schedule built and bound to port and
 * tag_base (scratch from pool), or the node team's task. Team turns are
 * taken now: create the tasks of one communicator in call order.
 */
chorus_status_t coll_alg_task(const coll_alg_t *alg, const coll_args_t *args,
                              const coll_env_t *env, tl_port_t *port, uint64_t tag_base,
                              coll_scratch_pool_t *pool, chorus__task_t **task_p);

/* ---- compressed allreduce and reduce-scatter (coll_compress.c) -------------- */

/* How many compressed calls went compressed, and how many fell back to float32. */
typedef struct {
    _Atomic uint64_t compressed;
    _Atomic uint64_t fallbacks;
} coll_compress_counts_t;

/*
 * The task of an allreduce or reduce-scatter of float32 (args: sum or avg)
 * with wire (CHORUS_FLOAT16 or CHORUS_BFLOAT16) on the wire: the ranks agree
 * on a scale from their largest values, then the ring over port carries
 * 16-bit values and adds in float32; an allreduce's ranks round their
 * result through the wire once, so that all hold the same bits. A call with
 * a value that is not finite goes uncompressed. counts (may be NULL) counts
 * both outcomes. Tags: the ring's, and the scale's above bit 31.
 */
chorus_status_t coll_compressed_task(const coll_args_t *args, chorus_dtype_t wire,
                                               const coll_env_t *env, tl_port_t *port,
                                               uint64_t tag_base, coll_scratch_pool_t *pool,
                                               coll_compress_counts_t *counts,
                                               chorus__task_t **task_p);

/*
 * Calls on CUDA device buffers (args->mem == COLL_MEM_CUDA) run a host
 * algorithm on page-locked copies of this rank's device buffers
 * (coll_staged.c). coll_staged_begin() makes the copies' room and writes
 * *host_p: args as the host algorithm runs it (mem COLL_MEM_HOST, the
 * device buffers replaced by their copies); select the algorithm and build
 * its task for *host_p, then coll_staged_task() wraps that task: copy in on
 * args->stream, run it, copy out; with the caller's stream, the copies are
 * queued on it when coll_staged_task() is called (in the calling thread,
 * in call order). The staged task owns the inner task and
 * the copies from then on; coll_staged_free() frees a staging that never
 * got its task.
 */
typedef struct coll_staged coll_staged_t;
chorus_status_t coll_staged_begin(const coll_args_t *args, coll_args_t *host_p,
                                  coll_staged_t **staged_p);
chorus__task_t *coll_staged_task(coll_staged_t *staged, chorus__task_t *inner);
/*
 * Whether task (a staged task) has queued its whole device side on the
 * caller's stream, result included: the stream's later work sees the
 * result, so a blocking call may return without waiting for the task.
 */
int coll_staged_enqueued(const chorus__task_t *task);
void coll_staged_free(coll_staged_t *staged);

/* The algorithm of coll called name (a builder, or a team variant of a built-in transport). */
const coll_alg_t *coll_alg_find(coll_type_t coll, const char *name);
/*
 * The algorithms of coll: its builders in registry order, then the team
 * variants of the built-in transports. Fills algs with at most max of them
 * and returns how many there are (more than max: the rest were left out).
 */
int coll_alg_list(coll_type_t coll, const coll_alg_t **algs, int max);
/* Every schedule builder, NULL-terminated. */
extern const coll_alg_t *const coll_algs[];

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
/* Hierarchical: node-local stages on the node team, each byte crossing to a node once. */
extern const coll_alg_t coll_hier_allreduce;
extern const coll_alg_t coll_hier_allgather;
extern const coll_alg_t coll_hier_broadcast;
extern const coll_alg_t coll_hier_reduce_scatter;

#endif
