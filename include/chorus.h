/*
 * chorus: collective communication for distributed training.
 *
 * Public C API. C11, usable from C++. Argument order follows MPI and NCCL:
 * buffers, count, dtype, op, root, communicator, then the per-call options
 * (NULL for defaults) and, for non-blocking calls, the request output.
 *
 * Every function returns a chorus_status_t: CHORUS_OK (0) on success, a
 * negative code otherwise; chorus_status_string() names it.
 */
#ifndef CHORUS_H
#define CHORUS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CHORUS_VERSION_MAJOR 0
#define CHORUS_VERSION_MINOR 1
#define CHORUS_VERSION_PATCH 0

typedef enum {
    CHORUS_OK = 0,
    CHORUS_ERR_INVALID_ARG = -1,  /* an argument is out of range; the log names it */
    CHORUS_ERR_NO_MEMORY = -2,
    CHORUS_ERR_TIMEOUT = -3,      /* a wait passed its deadline (CHORUS_TIMEOUT) */
    CHORUS_ERR_PEER_FAILED = -4,  /* a peer closed its connection or died */
    CHORUS_ERR_ABORTED = -5,      /* chorus_comm_abort() was called */
    CHORUS_ERR_AUTH = -6,         /* a peer failed to prove it holds the job secret */
    CHORUS_ERR_PROTOCOL = -7,     /* a malformed or out-of-bounds message */
    CHORUS_ERR_SYSTEM = -8,       /* an operating-system call failed; the log has errno */
    CHORUS_ERR_UNSUPPORTED = -9,  /* not built in, or not available on this system */
    CHORUS_ERR_TRUNCATED = -10,   /* a peer sent more data than the call expects */
    CHORUS_ERR_INTERNAL = -11,    /* a bug in chorus; please report it */
    CHORUS_ERR_IN_USE = -12,      /* the object is busy (e.g. a duplicate rank) */
    CHORUS_ERR_DEVICE = -13       /* a CUDA call failed; the log names it */
} chorus_status_t;

const char *chorus_status_string(chorus_status_t status);

/* Version of the library actually loaded (may differ from the header's). */
void chorus_version(int *major_p, int *minor_p, int *patch_p);
const char *chorus_version_string(void);

typedef enum {
    CHORUS_INT8 = 0,
    CHORUS_UINT8,
    CHORUS_INT32,
    CHORUS_UINT32,
    CHORUS_INT64,
    CHORUS_UINT64,
    CHORUS_FLOAT16,   /* IEEE 754 binary16 */
    CHORUS_BFLOAT16,  /* bfloat16: the top half of a binary32 */
    CHORUS_FLOAT32,
    CHORUS_FLOAT64,
    CHORUS_DTYPE_COUNT
} chorus_dtype_t;

typedef enum {
    CHORUS_SUM = 0,
    CHORUS_PROD,
    CHORUS_MIN,
    CHORUS_MAX,
    CHORUS_AVG,       /* sum divided by the rank count (integer division for integers) */
    CHORUS_OP_COUNT
} chorus_op_t;

/* Size of one element in bytes, or 0 for an invalid dtype. */
size_t chorus_dtype_size(chorus_dtype_t dtype);
/* "float32", "sum", ...; NULL when out of range. */
const char *chorus_dtype_name(chorus_dtype_t dtype);
const char *chorus_op_name(chorus_op_t op);

/* ---- communicators ---------------------------------------------------- */

typedef struct chorus_comm *chorus_comm_t;
typedef struct chorus_request *chorus_request_t;

/*
 * Create a communicator from the environment: CHORUS_RANK, CHORUS_SIZE,
 * CHORUS_ADDR, CHORUS_SECRET, or torchrun's RANK, WORLD_SIZE, LOCAL_RANK,
 * MASTER_ADDR, MASTER_PORT. Collective over all ranks of the job.
 */
chorus_status_t chorus_comm_create_from_env(chorus_comm_t *comm_p);

/*
 * Create a communicator from explicit arguments. addr is "host:port" of the
 * rendezvous store; rank 0 hosts it there unless one is already hosted by
 * chorus_unique_id_create(). secret authenticates every peer (NULL: the
 * CHORUS_SECRET variable). timeout_s bounds every wait (<= 0: CHORUS_TIMEOUT).
 */
chorus_status_t chorus_comm_create(int rank, int size, const char *addr,
                                   const char *secret, double timeout_s,
                                   chorus_comm_t *comm_p);

/*
 * A unique id names one rendezvous (address and secret), in the style of
 * NCCL's unique id: one process creates it, which starts a rendezvous store
 * on an ephemeral port of this host, sends the bytes to the others by any
 * means (MPI_Bcast, a file), and every rank calls
 * chorus_comm_create_from_id(). The id holds the job secret: keep it private.
 */
#define CHORUS_UNIQUE_ID_BYTES 256
typedef struct {
    char bytes[CHORUS_UNIQUE_ID_BYTES];
} chorus_unique_id_t;

chorus_status_t chorus_unique_id_create(chorus_unique_id_t *id_p);
chorus_status_t chorus_comm_create_from_id(int rank, int size,
                                           const chorus_unique_id_t *id,
                                           double timeout_s,
                                           chorus_comm_t *comm_p);

/*
 * Waits for this rank's pending operations on comm (bounded by the timeout),
 * then frees it. The connections and the progress thread go with the last
 * communicator of their context.
 */
chorus_status_t chorus_comm_destroy(chorus_comm_t comm);

/*
 * Abort: every pending and future call on comm, and on every communicator
 * split or duplicated from the same one, returns CHORUS_ERR_ABORTED, and the
 * peers see this rank leave. Safe to call from any thread, also while
 * another thread waits; returns without waiting for the network. The
 * communicators must still be destroyed.
 */
chorus_status_t chorus_comm_abort(chorus_comm_t comm);

/* The first background fault recorded on comm's context, or CHORUS_OK. */
chorus_status_t chorus_comm_get_error(chorus_comm_t comm);

/* Queries; -1 when comm is NULL. */
int chorus_comm_rank(chorus_comm_t comm);
int chorus_comm_size(chorus_comm_t comm);
int chorus_comm_local_rank(chorus_comm_t comm);
int chorus_comm_local_size(chorus_comm_t comm);
/*
 * Nodes: ranks with the same machine identity share a node; nodes are
 * numbered 0.. in the order of their lowest rank. chorus_comm_node returns
 * the node of rank (-1 when comm is NULL or rank is out of range).
 */
int chorus_comm_node_count(chorus_comm_t comm);
int chorus_comm_node(chorus_comm_t comm, int rank);

/*
 * Sub-communicators, with MPI's semantics. Both are collective over comm
 * (every rank calls, in the same order as its other calls on comm) and need
 * no new rendezvous, thread or connection: the new communicator shares
 * comm's context, and a fault or an abort on either fails both.
 *
 * chorus_comm_split: ranks that pass the same color form a new communicator,
 * ordered by key, then by their rank in comm. A rank that passes
 * CHORUS_UNDEFINED takes part but gets *newcomm_p = NULL. Other negative
 * colors are invalid. chorus_comm_dup: the same group in the same order,
 * with its own sequence of calls. Destroy the new communicator with
 * chorus_comm_destroy, before or after comm.
 */
#define CHORUS_UNDEFINED (-1)

chorus_status_t chorus_comm_split(chorus_comm_t comm, int color, int key,
                                  chorus_comm_t *newcomm_p);
chorus_status_t chorus_comm_dup(chorus_comm_t comm, chorus_comm_t *newcomm_p);

/* ---- memory the node's ranks share ------------------------------------- */

/*
 * bytes of memory that the other ranks of comm on this node can read and
 * write directly, zeroed; usable as any buffer of any collective on comm
 * and on every communicator split or duplicated from it (also on a part of
 * it, at any offset). A call whose buffers are such memory on every rank of
 * a node reads the peers' inputs where they are and writes results straight
 * into their outputs: no copy through shared slots. Any mix of such memory
 * and ordinary buffers across ranks and calls works. Not collective: each
 * rank allocates as it likes. chorus_mem(3).
 */
chorus_status_t chorus_mem_alloc(chorus_comm_t comm, size_t bytes, void **ptr_p);
/*
 * Free what chorus_mem_alloc returned. CHORUS_ERR_IN_USE while a call
 * posted on it is pending (the memory stays valid); CHORUS_ERR_INVALID_ARG
 * when ptr is not such memory. Peers that mapped it may keep its pages
 * until they make room for others.
 */
chorus_status_t chorus_mem_free(chorus_comm_t comm, void *ptr);

/* ---- per-call options: the one extension point ------------------------ */

/*
 * Options that later features add per call (wire compression, memory type,
 * CUDA stream, priority). Set struct_size to sizeof(chorus_opts_t) (the
 * CHORUS_OPTS_INIT initializer does); chorus reads only the fields that a
 * caller's struct_size covers, so programs built against an older header keep
 * working. Pass NULL for defaults.
 */
typedef struct {
    size_t struct_size;
    uint32_t flags;     /* CHORUS_FLAG_*, CHORUS_COMPRESS_*: the calls that take them; else 0 */
    int priority;       /* reserved, must be 0 */
    int mem_type;       /* CHORUS_MEM_*: where the call's buffers are; AUTO asks CUDA */
    void *stream;       /* a cudaStream_t the call is ordered after, or NULL */
} chorus_opts_t;

/*
 * opts->mem_type. AUTO: each buffer of a collective is looked up (CUDA
 * device memory or host memory; no cost in a process without a CUDA
 * device). HOST: every buffer is host memory (pinned and managed memory
 * count as host), no lookup. CUDA: a device call, which every rank of the
 * call declares alike; CHORUS_ERR_UNSUPPORTED where this build or process
 * has no device. A device call on ranks that share a node and reach each
 * other's devices runs on the devices (CUDA IPC). Other calls on device
 * buffers are staged through page-locked host memory, only on the rank that
 * has them: ranks may mix host and device buffers in a call.
 *
 * opts->stream: a collective reads its buffers only after the work queued
 * on stream before the call is done, and the stream's later work sees its
 * results in device buffers. A blocking call whose results all go to the
 * device returns once its work is queued. A non-blocking call completes
 * when its results are in place.
 */
#define CHORUS_MEM_AUTO 0
#define CHORUS_MEM_HOST 1
#define CHORUS_MEM_CUDA 2

/* chorus_fc_weight_grad's strategy, forced (at most one; every rank must agree). */
#define CHORUS_FLAG_FC_LATE      0x1u   /* gather the inputs and errors, multiply locally */
#define CHORUS_FLAG_FC_ALLREDUCE 0x2u   /* multiply locally, allreduce the gradient */

/*
 * Wire compression of an allreduce (direct or the engine's) or a
 * reduce-scatter of float32, sum or avg: values cross the network as float16
 * or bfloat16, scaled by a power of two the ranks agree on, and are added in
 * float32 at every hop; an allreduce's ranks get the same bits; within the
 * bound of chorus_allreduce(3).
 */
#define CHORUS_COMPRESS_FP16     0x4u
#define CHORUS_COMPRESS_BF16     0x8u

#define CHORUS_OPTS_INIT { sizeof(chorus_opts_t), 0, 0, CHORUS_MEM_AUTO, NULL }

/* ---- collectives -------------------------------------------------------- */

/*
 * recvbuf[i] = op over all ranks of sendbuf[i], for i < count.
 * In place when sendbuf == recvbuf.
 */
chorus_status_t chorus_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                                 chorus_dtype_t dtype, chorus_op_t op,
                                 chorus_comm_t comm, const chorus_opts_t *opts);
chorus_status_t chorus_iallreduce(const void *sendbuf, void *recvbuf, size_t count,
                                  chorus_dtype_t dtype, chorus_op_t op,
                                  chorus_comm_t comm, const chorus_opts_t *opts,
                                  chorus_request_t *req_p);

/*
 * recvbuf (size * sendcount elements) gets every rank's sendbuf in rank order.
 * In place when sendbuf == recvbuf + rank * sendcount elements.
 */
chorus_status_t chorus_allgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                 chorus_dtype_t dtype,
                                 chorus_comm_t comm, const chorus_opts_t *opts);
chorus_status_t chorus_iallgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                  chorus_dtype_t dtype,
                                  chorus_comm_t comm, const chorus_opts_t *opts,
                                  chorus_request_t *req_p);

/*
 * Every rank's recvbuf gets root's sendbuf (sendbuf is read on root only).
 * In place when sendbuf == recvbuf.
 */
chorus_status_t chorus_broadcast(const void *sendbuf, void *recvbuf, size_t count,
                                 chorus_dtype_t dtype, int root,
                                 chorus_comm_t comm, const chorus_opts_t *opts);
chorus_status_t chorus_ibroadcast(const void *sendbuf, void *recvbuf, size_t count,
                                  chorus_dtype_t dtype, int root,
                                  chorus_comm_t comm, const chorus_opts_t *opts,
                                  chorus_request_t *req_p);

/*
 * sendbuf holds size * recvcount elements; rank r's recvbuf gets block r of
 * the reduction. In place when recvbuf == sendbuf + rank * recvcount elements.
 */
chorus_status_t chorus_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                      chorus_dtype_t dtype, chorus_op_t op,
                                      chorus_comm_t comm, const chorus_opts_t *opts);
chorus_status_t chorus_ireduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                       chorus_dtype_t dtype, chorus_op_t op,
                                       chorus_comm_t comm, const chorus_opts_t *opts,
                                       chorus_request_t *req_p);

/*
 * Root's recvbuf gets the reduction (recvbuf is written on root only and may
 * be NULL elsewhere). In place when sendbuf == recvbuf on root.
 */
chorus_status_t chorus_reduce(const void *sendbuf, void *recvbuf, size_t count,
                              chorus_dtype_t dtype, chorus_op_t op, int root,
                              chorus_comm_t comm, const chorus_opts_t *opts);
chorus_status_t chorus_ireduce(const void *sendbuf, void *recvbuf, size_t count,
                               chorus_dtype_t dtype, chorus_op_t op, int root,
                               chorus_comm_t comm, const chorus_opts_t *opts,
                               chorus_request_t *req_p);

/*
 * Block j of rank i's sendbuf (count elements each) lands in block i of rank
 * j's recvbuf. In place when sendbuf == recvbuf.
 */
chorus_status_t chorus_alltoall(const void *sendbuf, void *recvbuf, size_t count,
                                chorus_dtype_t dtype,
                                chorus_comm_t comm, const chorus_opts_t *opts);
chorus_status_t chorus_ialltoall(const void *sendbuf, void *recvbuf, size_t count,
                                 chorus_dtype_t dtype,
                                 chorus_comm_t comm, const chorus_opts_t *opts,
                                 chorus_request_t *req_p);

/* Returns on a rank once every rank has entered the barrier. */
chorus_status_t chorus_barrier(chorus_comm_t comm, const chorus_opts_t *opts);
chorus_status_t chorus_ibarrier(chorus_comm_t comm, const chorus_opts_t *opts,
                                chorus_request_t *req_p);

/* ---- fully-connected layers ---------------------------------------------- */

/*
 * The weight gradient of a fully-connected layer: grad (out_features x
 * in_features, row-major) = sum over ranks of e^T x, on every rank, with the
 * same bits everywhere. x: rows x in_features, e: rows x out_features,
 * row-major; rows may differ between ranks (0 included). dtype: float32,
 * float64, or float16/bfloat16 (accumulated in float32). chorus chooses per
 * call between allreducing the gradient and gathering x and e to multiply
 * locally ("late"), by its cost model; CHORUS_FLAG_FC_* in opts->flags or
 * CHORUS_TUNE=fc_weight_grad=late|allreduce force one. chorus_fc_weight_grad(3).
 */
chorus_status_t chorus_fc_weight_grad(const void *x, const void *e, size_t rows,
                                      size_t in_features, size_t out_features,
                                      chorus_dtype_t dtype, void *grad, chorus_comm_t comm,
                                      const chorus_opts_t *opts);
chorus_status_t chorus_ifc_weight_grad(const void *x, const void *e, size_t rows,
                                       size_t in_features, size_t out_features,
                                       chorus_dtype_t dtype, void *grad, chorus_comm_t comm,
                                       const chorus_opts_t *opts, chorus_request_t *req_p);

/* ---- the training engine ------------------------------------------------ */

/*
 * Named tensors, submitted in any order on each rank, reduced (or broadcast,
 * gathered) once every rank has submitted them, fused into buckets. Ranks
 * agree each cycle which names are ready everywhere, with no coordinating
 * rank. One engine per communicator; creation and destruction are
 * collective. chorus_engine(3).
 */
typedef struct chorus_engine *chorus_engine_t;

typedef struct {
    size_t struct_size;     /* sizeof(chorus_engine_opts_t) */
    size_t bucket_bytes;    /* most bytes fused into one collective; 0: CHORUS_BUCKET_BYTES */
    double cycle_ms;        /* time between negotiation cycles; 0: CHORUS_CYCLE_MS */
} chorus_engine_opts_t;

#define CHORUS_ENGINE_OPTS_INIT { sizeof(chorus_engine_opts_t), 0, 0.0 }

chorus_status_t chorus_engine_create(chorus_comm_t comm, const chorus_engine_opts_t *opts,
                                     chorus_engine_t *engine_p);
/*
 * Each returns at once; *req_p completes (chorus_request_wait) once the
 * result is in recvbuf. Each submission of a name is paired with the
 * same-numbered submission of it on every other rank, and every rank
 * submits that round with the same count, dtype, op (root); a later round
 * may differ when it differs alike on every rank.
 */
chorus_status_t chorus_engine_allreduce(chorus_engine_t engine, const char *name,
                                        const void *sendbuf, void *recvbuf, size_t count,
                                        chorus_dtype_t dtype, chorus_op_t op,
                                        const chorus_opts_t *opts, chorus_request_t *req_p);
chorus_status_t chorus_engine_broadcast(chorus_engine_t engine, const char *name,
                                        const void *sendbuf, void *recvbuf, size_t count,
                                        chorus_dtype_t dtype, int root,
                                        const chorus_opts_t *opts, chorus_request_t *req_p);
chorus_status_t chorus_engine_allgather(chorus_engine_t engine, const char *name,
                                        const void *sendbuf, void *recvbuf, size_t sendcount,
                                        chorus_dtype_t dtype, const chorus_opts_t *opts,
                                        chorus_request_t *req_p);
/*
 * Collective: returns once every rank has called it. Submissions still
 * waiting for a rank fail with CHORUS_ERR_ABORTED; NULL is allowed.
 */
chorus_status_t chorus_engine_destroy(chorus_engine_t engine);

/* ---- requests ----------------------------------------------------------- */

/* Waits (bounded by the communicator's timeout); returns the operation's status. */
chorus_status_t chorus_request_wait(chorus_request_t req);
/* *done_p = 1 when complete; returns the operation's status once done, else CHORUS_OK. */
chorus_status_t chorus_request_test(chorus_request_t req, int *done_p);
/* Waits for completion if needed, then releases the request. NULL is allowed. */
chorus_status_t chorus_request_free(chorus_request_t req);
/* The name of the algorithm that serves the operation ("ring", "hier", "shm", ...;
 * for chorus_ifc_weight_grad "late" or "allreduce" once complete, "fc_weight_grad"
 * before); a static string, valid after the request is freed. NULL for a NULL request. */
const char *chorus_request_algorithm(chorus_request_t req);

#ifdef __cplusplus
}
#endif

#endif /* CHORUS_H */
