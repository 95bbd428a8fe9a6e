/*
 * Calls on CUDA device buffers (SHM_CUDA): every rank publishes where its
 * buffers are as CUDA IPC handles, opens its peers' (kept open for later
 * calls, per allocation), and its kernels read and write them directly:
 *
 *   allreduce   each rank reduces one slice of every rank's input and
 *               writes it into every rank's output, in one pass;
 *   reduce      the same, into the root's output only;
 *   reduce_scatter  each rank reduces its own block of every rank's input;
 *   allgather   each rank copies its block into every rank's output;
 *   broadcast   each rank copies one slice of the root's data to everyone.
 *
 * So each byte of the vector is read once and written once on the devices.
 * Two steps per call, as the single-copy path: every rank's buffers are
 * published (and its earlier device work done), and every rank's kernels
 * are done. Kernels run on the library's non-blocking stream of the rank's
 * device: the steps and events keep their order with the caller's work, and
 * a blocking stream could wait on a caller's stream that waits for this
 * call. A host thread polls their event, never blocks on them.
 *
 * A buffer that cannot be opened by another process (host memory, memory of
 * a stream-ordered pool) goes through a device scratch buffer of the rank:
 * copied in before the first step, out after the second.
 *
 * With the caller's stream, the call's inputs are what the stream's earlier
 * work left (an event recorded when the call is made), and the stream's
 * later work waits on a page-locked word that is set when the call ends,
 * however it ends; where every buffer of the rank is device memory, a
 * blocking call need not wait (CHORUS__TASK_ENQUEUED).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "transports/shm/shm_internal.h"
#include "util/log.h"

/* Peers' allocations kept open per node; a call opens at most two per peer. */
#define CUDA_MAPS 64
/* This rank's allocations whose handles are kept (asking the driver costs a system call). */
#define CUDA_SHARES 16
/* Scratch placement: both parts start on this boundary. */
#define CUDA_ALIGN 256
/* The scratch buffer's least size; it grows at least twofold, so it is seldom replaced. */
#define CUDA_SCRATCH_MIN ((size_t)1 << 20)

enum { CU_READY, CU_IN, CU_POSTED, CU_RUN, CU_END, CU_OUT, CU_DONE };

typedef struct {
    int peer;                   /* -1: a free entry */
    uint64_t id;
    uint8_t handle[CHORUS__DEVICE_HANDLE_BYTES];
    void *base;                 /* opened here */
    uint64_t used;              /* the last call that used it */
} cuda_map_t;

struct shm_cuda {
    cuda_map_t maps[CUDA_MAPS];
    /*
     * Scratch buffers outgrown, freed with the node: cudaFree waits for the
     * whole device, so during a call it could wait on a caller's stream that
     * waits for this call.
     */
    void **retired;
    size_t nretired;
    void *stream;               /* the library's non-blocking stream of the node's device */
    chorus__device_share_t shares[CUDA_SHARES];    /* by allocation id, round robin */
    int next_share;
    uint64_t calls;
    char *scratch;              /* this rank's buffers that cannot be shared, or NULL */
    size_t scratch_bytes;
    /* The current call: where every rank's data is, as this rank's kernels see it. */
    char **send;
    char **recv;
    int send_staged, recv_staged;
};

void shm_cuda_card(const shm_config_t *cfg, shm_card_t *card)
{
    int dev = -1;

    if (cfg->cuda && chorus__device_uuid(card->dev_uuid, &dev) == CHORUS_OK)
        card->dev = dev;
}

int shm_cuda_team_ok(const shm_card_t *cards, int n, int me)
{
    if (cards[me].dev < 0 || n > CHORUS__DEVICE_REDUCE_MAX_SRCS)
        return 0;
    for (int j = 0; j < n; j++) {
        if (cards[j].dev < 0 || !chorus__device_reaches(cards[j].dev_uuid))
            return 0;
    }
    return 1;
}

static void cuda_unmap(cuda_map_t *m)
{
    chorus__device_close(m->base);
    m->peer = -1;
    m->base = NULL;
}

void shm_cuda_node_free(shm_node_t *node)
{
    struct shm_cuda *c = node->cuda;
    int old = -1;

    if (c == NULL)
        return;
    if (chorus__device_enter(node->dev, &old) == CHORUS_OK) {
        for (int i = 0; i < CUDA_MAPS; i++) {
            if (c->maps[i].peer >= 0)
                cuda_unmap(&c->maps[i]);
        }
        chorus__device_free(c->scratch);
        for (size_t i = 0; i < c->nretired; i++)
            chorus__device_free(c->retired[i]);
        chorus__device_leave(node->dev, old);
    }
    free(c->retired);
    free(c->send);
    free(c->recv);
    free(c);
    node->cuda = NULL;
}

static struct shm_cuda *cuda_state(shm_node_t *node)
{
    struct shm_cuda *c = node->cuda;

    if (c != NULL)
        return c;
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->send = calloc((size_t)node->n, sizeof(*c->send));
    c->recv = calloc((size_t)node->n, sizeof(*c->recv));
    if (c->send == NULL || c->recv == NULL) {
        free(c->send);
        free(c->recv);
        free(c);
        return NULL;
    }
    for (int i = 0; i < CUDA_MAPS; i++)
        c->maps[i].peer = -1;
    node->cuda = c;
    return c;
}

/* ---- what each rank's buffers are ------------------------------------------ */

/* Whether the peers' kernels read rank j's send buffer. */
static int send_shared(const coll_args_t *a, int j)
{
    return a->coll == COLL_BROADCAST ? j == a->root : a->coll != COLL_ALLGATHER;
}

/* Whether the peers' kernels write rank j's receive buffer. */
static int recv_shared(const coll_args_t *a, int j)
{
    return a->coll == COLL_REDUCE ? j == a->root : a->coll != COLL_REDUCE_SCATTER;
}

/* Rank me's buffers in bytes: [0] what it reads, [1] what it writes (0: untouched). */
static void own_bytes(const shm_op_t *op, size_t bytes[2])
{
    const coll_args_t *a = &op->args;
    size_t elems[2];

    coll_args_elems(a, (size_t)a->size, elems);
    bytes[0] = coll_args_reads_send(a) ? elems[0] * op->esize : 0;
    bytes[1] = coll_args_writes_recv(a) ? elems[1] * op->esize : 0;
}

static size_t align_up(size_t n)
{
    return (n + CUDA_ALIGN - 1) / CUDA_ALIGN * CUDA_ALIGN;
}

/*
 * Whether this rank's kernels can use the device buffer ptr where it is, and
 * when peers' must too (shared), how they open it: the driver's answer, kept
 * by allocation id (which the process never reuses, so a kept answer is
 * never stale). Nonzero when ptr must be staged: memory of another device
 * than the node team's, or that the driver cannot share.
 */
static int share_of(const shm_node_t *node, struct shm_cuda *c, const void *ptr, int shared,
                    chorus__device_share_t *share)
{
    if (chorus__device_share_id(ptr, share) != CHORUS_OK || share->device != node->dev)
        return 1;
    if (!shared)
        return 0;
    for (int i = 0; i < CUDA_SHARES; i++) {
        if (c->shares[i].id == share->id && c->shares[i].base == share->base) {
            memcpy(share->handle, c->shares[i].handle, sizeof(share->handle));
            return 0;
        }
    }
    if (chorus__device_share_handle(share) != CHORUS_OK)
        return 1;
    c->shares[c->next_share] = *share;
    c->next_share = (c->next_share + 1) % CUDA_SHARES;
    return 0;
}

/* The scratch buffer of at least bytes (kept for later calls). */
static chorus_status_t scratch_reserve(struct shm_cuda *c, size_t bytes)
{
    if (c->scratch != NULL && c->scratch_bytes >= bytes)
        return CHORUS_OK;
    if (bytes < CUDA_SCRATCH_MIN)
        bytes = CUDA_SCRATCH_MIN;
    if (bytes < 2 * c->scratch_bytes)
        bytes = 2 * c->scratch_bytes;
    if (c->scratch != NULL) {
        void **grown = realloc(c->retired, (c->nretired + 1) * sizeof(*grown));

        if (grown == NULL)
            return CHORUS_ERR_NO_MEMORY;
        c->retired = grown;
        c->retired[c->nretired++] = c->scratch;
    }
    c->scratch_bytes = 0;
    c->scratch = chorus__device_alloc(bytes);
    if (c->scratch == NULL) {
        chorus_error("no device memory for %zu bytes of staging for a node-local call", bytes);
        return CHORUS_ERR_NO_MEMORY;
    }
    c->scratch_bytes = bytes;
    return CHORUS_OK;
}

/*
 * Where this rank's kernels and its peers find its data: its own buffers
 * where they are device memory of the team's device that can be shared (or
 * that only it touches), else the scratch buffer, into which the input is
 * copied now. Overlapping buffers (in place) keep their distance in the
 * scratch.
 */
static chorus_status_t own_place(shm_op_t *op, struct shm_cuda *c, void *stream)
{
    const coll_args_t *a = &op->args;
    shm_dev_desc_t *d = &op->node->ctrl[op->node->me]->dev_desc;
    int me = op->node->me;
    size_t bytes[2];
    uintptr_t s = (uintptr_t)a->sendbuf, r = (uintptr_t)a->recvbuf, lo = 0, hi = 0;
    int overlap;
    chorus_status_t status;

    own_bytes(op, bytes);
    c->send_staged =
        bytes[0] > 0 && (!(a->dev_bufs & COLL_DEV_SEND) ||
                         share_of(op->node, c, a->sendbuf, send_shared(a, me), &d->send) != 0);
    c->recv_staged =
        bytes[1] > 0 && (!(a->dev_bufs & COLL_DEV_RECV) ||
                         share_of(op->node, c, a->recvbuf, recv_shared(a, me), &d->recv) != 0);
    c->send[me] = c->send_staged ? NULL : (char *)a->sendbuf;
    c->recv[me] = c->recv_staged ? NULL : (char *)a->recvbuf;
    if (!c->send_staged && !c->recv_staged)
        goto publish;
    overlap = c->send_staged && c->recv_staged && s < r + bytes[1] && r < s + bytes[0];
    if (overlap) {
        lo = s < r ? s : r;
        hi = s + bytes[0] > r + bytes[1] ? s + bytes[0] : r + bytes[1];
        status = scratch_reserve(c, hi - lo);
    } else {
        status = scratch_reserve(c, align_up(c->send_staged ? bytes[0] : 0) +
                                        (c->recv_staged ? bytes[1] : 0));
    }
    if (status != CHORUS_OK)
        return status;
    if (c->send_staged)
        c->send[me] = overlap ? c->scratch + (s - lo) : c->scratch;
    if (c->recv_staged)
        c->recv[me] = overlap ? c->scratch + (r - lo)
                              : c->scratch + align_up(c->send_staged ? bytes[0] : 0);
    if ((c->send_staged && share_of(op->node, c, c->send[me], send_shared(a, me), &d->send)) ||
        (c->recv_staged && share_of(op->node, c, c->recv[me], recv_shared(a, me), &d->recv))) {
        chorus_error("local rank %d: its device staging buffer cannot be shared (CUDA IPC)", me);
        return CHORUS_ERR_DEVICE;
    }
    if (c->send_staged &&
        (status = chorus__device_copy_queue(c->send[me], a->sendbuf, bytes[0], stream)) !=
            CHORUS_OK)
        return status;
publish:
    d->shared = (send_shared(a, me) && bytes[0] > 0 ? SHM_BUF_SEND : 0) |
                (recv_shared(a, me) && bytes[1] > 0 ? SHM_BUF_RECV : 0);
    d->count = a->count;
    d->fp = op->fp;
    return CHORUS_OK;
}

/* ---- peers' buffers -------------------------------------------------------- */

/* Peer j's allocation opened here (kept for later calls), or NULL after an error. */
static void *peer_base(shm_node_t *node, struct shm_cuda *c, int j,
                       const chorus__device_share_t *share)
{
    cuda_map_t *m = NULL;

    /* A peer in this process shares its address space: its addresses are ours. */
    if (node->pids[j] == node->pids[node->me])
        return (void *)(uintptr_t)share->base;
    for (int i = 0; i < CUDA_MAPS; i++) {
        cuda_map_t *e = &c->maps[i];

        if (e->peer == j && e->id == share->id &&
            memcmp(e->handle, share->handle, sizeof(e->handle)) == 0) {
            e->used = c->calls;
            return e->base;
        }
        /* The free entry, else the one used longest ago (never by this call). */
        if (m == NULL || (m->peer >= 0 && (e->peer < 0 || e->used < m->used)))
            m = e;
    }
    if (m->peer >= 0)
        cuda_unmap(m);
    if (chorus__device_open(share, &m->base) != CHORUS_OK) {
        /*
         * The peer freed an allocation that is still open here and made a new
         * one at its address, which the driver refuses to open twice: close
         * what this call does not use of that peer's, and try again.
         */
        for (int i = 0; i < CUDA_MAPS; i++) {
            if (c->maps[i].peer == j && c->maps[i].used != c->calls)
                cuda_unmap(&c->maps[i]);
        }
        if (chorus__device_open(share, &m->base) != CHORUS_OK) {
            chorus_error("local rank %d: the device buffer of local rank %d cannot be opened "
                         "(cudaIpcOpenMemHandle; CHORUS_LOG_LEVEL=debug shows why)", node->me,
                         j);
            m->base = NULL;
            return NULL;
        }
    }
    m->peer = j;
    m->id = share->id;
    memcpy(m->handle, share->handle, sizeof(m->handle));
    m->used = c->calls;
    return m->base;
}

/* Check every peer's descriptor against this call and open its buffers. */
static int peers_place(shm_op_t *op, struct shm_cuda *c)
{
    shm_node_t *node = op->node;
    const coll_args_t *a = &op->args;

    for (int j = 0; j < node->n; j++) {
        const shm_dev_desc_t *d = &node->ctrl[j]->dev_desc;
        shm_dev_desc_t mine;
        uint32_t need = (send_shared(a, j) ? SHM_BUF_SEND : 0) |
                        (recv_shared(a, j) ? SHM_BUF_RECV : 0);
        char *base;

        if (j == node->me)
            continue;
        memcpy(&mine, d, sizeof(mine));     /* a peer's words, read once */
        if (mine.fp != op->fp || mine.count != a->count || (mine.shared & need) != need) {
            chorus_error("local rank %d published a device call that does not match this one "
                         "(count %llu against %zu, fingerprint %016llx against %016llx, or a "
                         "buffer missing)" SHM_MISMATCH_HINT, j,
                         (unsigned long long)mine.count, a->count,
                         (unsigned long long)mine.fp, (unsigned long long)op->fp);
            return CHORUS_ERR_INVALID_ARG;
        }
        c->send[j] = c->recv[j] = NULL;
        if ((need & SHM_BUF_SEND) && a->count > 0) {
            if ((base = peer_base(node, c, j, &mine.send)) == NULL)
                return CHORUS_ERR_DEVICE;
            c->send[j] = base + mine.send.offset;
        }
        if ((need & SHM_BUF_RECV) && a->count > 0) {
            if ((base = peer_base(node, c, j, &mine.recv)) == NULL)
                return CHORUS_ERR_DEVICE;
            c->recv[j] = base + mine.recv.offset;
        }
    }
    return 0;
}

/* ---- the kernels of a call ------------------------------------------------- */

/* This rank's slice [*lo, *hi) of count elements, starting on 64-byte lines. */
static void own_slice(const shm_op_t *op, size_t count, size_t *lo, size_t *hi)
{
    shm_part(count, shm_unit(op->esize), op->node->n, op->node->me, lo, hi);
}

static chorus_status_t reduce_slice(shm_op_t *op, struct shm_cuda *c, size_t first,
                                    size_t elems, int to_all, void *stream)
{
    const coll_args_t *a = &op->args;
    int n = op->node->n;
    const void *srcs[CHORUS__DEVICE_REDUCE_MAX_SRCS];
    void *dsts[CHORUS__DEVICE_REDUCE_MAX_SRCS];
    size_t at = first * op->esize;
    int ndst = 0;

    if (elems == 0)
        return CHORUS_OK;
    for (int j = 0; j < n; j++)
        srcs[j] = c->send[j] + at;
    if (to_all) {
        for (int j = 0; j < n; j++)
            dsts[ndst++] = c->recv[j] + at;
    } else {
        dsts[ndst++] = c->recv[a->root] + at;
    }
    return chorus__device_reduce_to(a->dtype, a->op, dsts, ndst, srcs, n, elems, stream);
}

static chorus_status_t cuda_moves(shm_op_t *op, struct shm_cuda *c, void *stream)
{
    const coll_args_t *a = &op->args;
    int n = op->node->n, me = op->node->me;
    size_t es = op->esize, lo, hi, block = a->count * es;
    chorus_status_t status = CHORUS_OK;
    const void *srcs[CHORUS__DEVICE_REDUCE_MAX_SRCS];

    if (a->count == 0)
        return CHORUS_OK;
    switch (a->coll) {
    case COLL_ALLREDUCE:
    case COLL_REDUCE:
        own_slice(op, a->count, &lo, &hi);
        return reduce_slice(op, c, lo, hi - lo, a->coll == COLL_ALLREDUCE, stream);
    case COLL_REDUCE_SCATTER:
        for (int j = 0; j < n; j++)
            srcs[j] = c->send[j] + (size_t)me * block;
        return chorus__device_reduce_to(a->dtype, a->op, (void **)&c->recv[me], 1, srcs, n,
                                        a->count, stream);
    case COLL_ALLGATHER:
        for (int j = 0; j < n && status == CHORUS_OK; j++)
            status = chorus__device_copy_queue(c->recv[j] + (size_t)me * block, c->send[me],
                                               block, stream);
        return status;
    case COLL_BROADCAST:
        own_slice(op, a->count, &lo, &hi);
        for (int j = 0; j < n && status == CHORUS_OK && hi > lo; j++)
            status = chorus__device_copy_queue(c->recv[j] + lo * es, c->send[a->root] + lo * es,
                                               (hi - lo) * es, stream);
        return status;
    default:
        return CHORUS_ERR_UNSUPPORTED;
    }
}

/* After the last step: AVG's division on this rank's result, and the copy out of scratch. */
static chorus_status_t cuda_finish(shm_op_t *op, struct shm_cuda *c, void *stream, int *queued)
{
    const coll_args_t *a = &op->args;
    size_t bytes[2];
    chorus_status_t status = CHORUS_OK;

    own_bytes(op, bytes);
    *queued = 0;
    if (a->op == CHORUS_AVG && coll_type_reduces(a->coll) && bytes[1] > 0) {
        status = chorus__device_finalize(a->dtype, a->op, c->recv[op->node->me], a->count,
                                         op->node->n, stream);
        *queued = 1;
    }
    if (status == CHORUS_OK && c->recv_staged) {
        status = chorus__device_copy_queue(a->recvbuf, c->recv[op->node->me], bytes[1], stream);
        *queued = 1;
    }
    return status;
}

/* ---- the steps -------------------------------------------------------------- */

/* 1: the event is done (and freed); 0: not yet; < 0: the device failed. */
static int event_over(void **event_p)
{
    int rc;

    if (*event_p == NULL)
        return 1;
    rc = chorus__device_event_done(*event_p);
    if (rc != 0) {
        chorus__device_event_free(*event_p);
        *event_p = NULL;
    }
    return rc;
}

void shm_cuda_op_init(shm_op_t *op)
{
    void *stream = op->args.stream;

    op->nrounds = op->args.count > 0;
    if (op->nrounds == 0)
        return;                 /* nothing to read or write: no order to keep */
    /* The caller's device work so far, on its stream (or before the library's blocking one). */
    op->dev_status = chorus__device_event_record(stream, &op->dev_ready);
    if (op->dev_status != CHORUS_OK || stream == NULL)
        return;
    op->dev_gate = chorus__device_pinned_get(sizeof(uint32_t));
    if (op->dev_gate == NULL)
        return;
    __atomic_store_n(op->dev_gate, 0u, __ATOMIC_RELAXED);
    if (chorus__device_stream_wait(stream, op->dev_gate, 1) != CHORUS_OK ||
        chorus__device_event_record(stream, &op->dev_gate_passed) != CHORUS_OK) {
        /* Without the wait, the stream's later work is not held: the call must be waited for. */
        __atomic_store_n(op->dev_gate, 1u, __ATOMIC_RELEASE);
        op->dev_gate_passed = NULL;
    }
}

int shm_cuda_enqueued(const shm_op_t *op)
{
    const coll_args_t *a = &op->args;
    size_t bytes[2];

    if (op->kind != SHM_CUDA || op->dev_gate_passed == NULL)
        return 0;
    /* Host memory is read and written by the caller without the stream: it must wait. */
    own_bytes(op, bytes);
    return (bytes[0] == 0 || (a->dev_bufs & COLL_DEV_SEND)) &&
           (bytes[1] == 0 || (a->dev_bufs & COLL_DEV_RECV));
}

/* Post the next step once this rank's device work before it is done (1), or not yet (0). */
static int post_when_done(shm_op_t *op)
{
    int rc = event_over(&op->dev_work);

    if (rc > 0)
        shm_post(op->node, op->tag);
    return rc;
}

/* 1 once every member has posted step base + k; 0 while the op waits on a peer. */
static int all_posted(shm_op_t *op, uint64_t k)
{
    int rc = shm_reached(op->node, op->base + k, op->base, op->tag, &op->wait_peer);

    if (rc <= 0)
        op->wait_step = op->base + k;
    else
        op->wait_peer = -1;     /* what follows waits on the device: no peer to sleep on */
    return rc;
}

/* One move of the call: 1 once complete, 0 while waiting, < 0 when failed. */
static int cuda_step(shm_op_t *op, struct shm_cuda *c, void *stream)
{
    int rc, queued;

    switch (op->round) {
    case CU_READY:
        /* A call whose inputs cannot be ordered after the caller's work fails. */
        if (op->dev_status != CHORUS_OK)
            return op->dev_status;
        if ((rc = event_over(&op->dev_ready)) <= 0)
            return rc;
        c->calls++;
        if ((rc = own_place(op, c, stream)) < 0)
            return rc;
        if (c->send_staged && (rc = chorus__device_event_record(stream, &op->dev_work)) < 0)
            return rc;
        op->round = CU_IN;
        /* fall through */
    case CU_IN:
        if ((rc = post_when_done(op)) <= 0)
            return rc;
        op->round = CU_POSTED;
        /* fall through */
    case CU_POSTED:
        if ((rc = all_posted(op, 1)) <= 0)
            return rc;
        if ((rc = peers_place(op, c)) < 0 || (rc = cuda_moves(op, c, stream)) < 0 ||
            (rc = chorus__device_event_record(stream, &op->dev_work)) < 0)
            return rc;
        op->round = CU_RUN;
        /* fall through */
    case CU_RUN:
        if ((rc = post_when_done(op)) <= 0)
            return rc;
        op->round = CU_END;
        /* fall through */
    case CU_END:
        if ((rc = all_posted(op, 2)) <= 0)
            return rc;
        if ((rc = cuda_finish(op, c, stream, &queued)) < 0 ||
            (queued && (rc = chorus__device_event_record(stream, &op->dev_work)) < 0))
            return rc;
        op->round = CU_OUT;
        /* fall through */
    case CU_OUT:
        if ((rc = event_over(&op->dev_work)) <= 0)
            return rc;
        op->round = CU_DONE;
        return 1;
    default:
        return 1;
    }
}

int shm_cuda_progress(shm_op_t *op)
{
    shm_node_t *node = op->node;
    struct shm_cuda *c = cuda_state(node);
    void *stream, *ended = NULL;
    int old = -1, rc;

    if (c == NULL)
        return CHORUS_ERR_NO_MEMORY;
    if ((rc = chorus__device_enter(node->dev, &old)) != CHORUS_OK)
        return rc;
    /* Looked up once: the node's device never changes, and the lookup takes a lock. */
    if (c->stream == NULL)
        c->stream = chorus__device_stream_async();
    stream = c->stream;
    rc = stream != NULL ? cuda_step(op, c, stream) : CHORUS_ERR_DEVICE;
    /* Failed: what this rank queued may still write the buffers; let it end first. */
    if (rc < 0 && stream != NULL && chorus__device_event_record(stream, &ended) == CHORUS_OK) {
        (void)chorus__device_event_finish(ended);
        chorus__device_event_free(ended);
    }
    chorus__device_leave(node->dev, old);
    /* Over, done or failed: the caller's stream goes on (the word is returned at release). */
    if (rc != 0 && op->dev_gate != NULL)
        __atomic_store_n(op->dev_gate, 1u, __ATOMIC_RELEASE);
    return rc;
}

void shm_cuda_op_release(shm_op_t *op)
{
    /* Work of a call that failed part way is waited for: it may still write the buffers. */
    if (op->dev_work != NULL) {
        (void)chorus__device_event_finish(op->dev_work);
        chorus__device_event_free(op->dev_work);
    }
    chorus__device_event_free(op->dev_ready);
    op->dev_work = op->dev_ready = NULL;
    if (op->dev_gate == NULL)
        return;
    __atomic_store_n(op->dev_gate, 1u, __ATOMIC_RELEASE);
    /*
     * The word is handed out again only once the stream has read it; waiting
     * for that here could wait on the caller's earlier work, which may wait
     * on a call that this thread has yet to drive.
     */
    chorus__device_pinned_put_after(op->dev_gate, op->dev_gate_passed);
    op->dev_gate = NULL;
    op->dev_gate_passed = NULL;
}
