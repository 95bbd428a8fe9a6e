/*
 * One collective call as every layer below the API sees it: the algorithms
 * (src/coll), the collective transports that run calls on a team
 * (transports/<name>), and the core that posts them. It lives here, below
 * both, so that a transport never needs the algorithms' headers.
 *
 * Ranks are positions in the group that runs the call: the communicator's
 * ranks for an algorithm, a team's members for a team collective.
 */
#ifndef CHORUS_TL_COLL_ARGS_H
#define CHORUS_TL_COLL_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"

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

/* "allreduce", "reduce_scatter", ...; NULL when out of range. */
const char *coll_type_name(coll_type_t coll);
/* COLL_TYPE_COUNT when name is not a collective (case-insensitive). */
coll_type_t coll_type_from_name(const char *name);

/* Where a call's buffers live. Selection tables are kept per memory type. */
typedef enum {
    COLL_MEM_HOST = 0,
    COLL_MEM_CUDA,          /* a buffer is CUDA device memory: the call is staged (coll.h) */
    COLL_MEM_TYPE_COUNT
} coll_mem_t;

/* "host", "cuda"; NULL when out of range. */
const char *coll_mem_name(coll_mem_t mem);

/*
 * count follows the public API: the element count per rank for allgather
 * (sendcount), reduce_scatter (recvcount) and alltoall (per peer), the
 * whole vector otherwise.
 *
 * The v-forms of allgather and reduce_scatter, used between the stages of
 * hierarchical algorithms, give every rank's block its own length and
 * place: counts[j] elements of rank j, starting at element displs[j] of
 * recvbuf (allgather: every rank receives every block there, and rank j's
 * sendbuf holds its counts[j] elements) or of sendbuf (reduce_scatter:
 * rank j's recvbuf receives the reduction of every rank's block j). count
 * is then ignored. In place: allgather when sendbuf == recvbuf + displs[rank]
 * elements, reduce_scatter when recvbuf == sendbuf + displs[rank] elements.
 */
typedef struct {
    coll_type_t coll;
    const void *sendbuf;
    void *recvbuf;
    size_t count;
    chorus_dtype_t dtype;
    chorus_op_t op;
    int root;
    int rank;               /* this rank's position in the group that runs the call */
    int size;               /* positions in that group */
    size_t chunk_bytes;     /* pipeline chunk (CHORUS_CHUNK_SIZE) */
    coll_mem_t mem;
    const size_t *counts;   /* v-forms only: [size] elements per block; NULL otherwise */
    const size_t *displs;   /* v-forms only: [size] first element of each block */
    void *stream;           /* CUDA stream the call is ordered on (a cudaStream_t), or NULL */
    unsigned dev_bufs;      /* COLL_DEV_*: this rank's buffers that are on a CUDA device */
    /*
     * The caller declared the call a device call (mem_type CHORUS_MEM_CUDA),
     * which every rank of the call does: the ranks may run it with device
     * algorithms together. Otherwise device buffers are staged by each rank.
     */
    int dev_call;
} coll_args_t;

/* coll_args_t.dev_bufs: the sendbuf or recvbuf this rank touches is CUDA device memory. */
#define COLL_DEV_SEND 1u
#define COLL_DEV_RECV 2u

/* Every field alike but the buffers: the same call, maybe on other memory. */
static inline int coll_args_same_shape(const coll_args_t *a, const coll_args_t *b)
{
    return a->coll == b->coll && a->count == b->count && a->dtype == b->dtype && a->op == b->op &&
           a->root == b->root && a->rank == b->rank && a->size == b->size &&
           a->chunk_bytes == b->chunk_bytes && a->mem == b->mem && a->counts == b->counts &&
           a->displs == b->displs && a->stream == b->stream && a->dev_bufs == b->dev_bufs &&
           a->dev_call == b->dev_call;
}

/* Elements of rank j's block: counts[j] in a v-form, else count. */
static inline size_t coll_args_block(const coll_args_t *a, int j)
{
    return a->counts != NULL ? a->counts[j] : a->count;
}

/* First element of rank j's block: displs[j] in a v-form, else j * count. */
static inline size_t coll_args_displ(const coll_args_t *a, int j)
{
    return a->displs != NULL ? a->displs[j] : (size_t)j * a->count;
}

/* Elements of a call's send (elems[0]) and receive (elems[1]) buffers at n ranks. */
void coll_args_elems(const coll_args_t *a, size_t n, size_t elems[2]);

/* Whether this rank reads its sendbuf (not a broadcast's non-root). */
static inline int coll_args_reads_send(const coll_args_t *a)
{
    return !(a->coll == COLL_BROADCAST && a->rank != a->root);
}

/* Whether this rank writes its recvbuf (not a reduce's non-root). */
static inline int coll_args_writes_recv(const coll_args_t *a)
{
    return !(a->coll == COLL_REDUCE && a->rank != a->root);
}

/* Whether the collective combines values with op. */
static inline int coll_type_reduces(coll_type_t coll)
{
    return coll == COLL_ALLREDUCE || coll == COLL_REDUCE_SCATTER || coll == COLL_REDUCE;
}

/*
 * Bytes the selection table is indexed by, the whole vector moved: the
 * vector reduced or broadcast; the gathered result of allgather; the input
 * of reduce_scatter; one rank's send buffer of alltoall; 0 for barrier.
 */
size_t coll_args_bytes(const coll_args_t *args);

#endif
