/*
 * Single-copy collectives with cross-memory attach: every rank publishes
 * where its buffers are, then reads its peers' data straight from their
 * buffers (process_vm_readv) and, for reductions, writes the reduced slice
 * straight into theirs (process_vm_writev). Each rank's reduction runs in
 * private cache-sized chunks, in rank order. Two steps per call: the
 * descriptors are published, and every rank is done with every buffer.
 * The v-forms read and reduce each block where its layout puts it;
 * alltoall's moves are in shm_alltoall.c.
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/uio.h>

#include "reduce/reduce.h"
#include "transports/shm/shm_internal.h"
#include "util/log.h"

static int cma_error(const shm_node_t *node, int peer, const char *what, size_t bytes)
{
    int err = errno;

    /* A peer that gave up has left the call and may have freed its buffers, and a process
     * being torn down answers with EFAULT before ESRCH: both are the peer's failure. */
    if (err == ESRCH || atomic_load(&node->ctrl[peer]->failed) != 0 ||
        shm_pid_gone(node->pids[peer])) {
        chorus_error("local rank %d gave up or is gone: %s of %zu bytes failed (%s)", peer,
                     what, bytes, strerror(err));
        return CHORUS_ERR_PEER_FAILED;
    }
    chorus_error("local rank %d: %s of %zu bytes failed: %s%s", peer, what, bytes, strerror(err),
                 err == EPERM || err == ENOSYS ? " (the kernel refuses cross-memory attach; "
                 "set CHORUS_SHM_CMA=0)" : "");
    return err == EFAULT ? CHORUS_ERR_INVALID_ARG : CHORUS_ERR_SYSTEM;
}

/* Cross-memory attach between this process at local and peer's remote address; partial
 * moves resume. */
static int kernel_move(const shm_node_t *node, int peer, int write, void *local,
                       uint64_t remote, size_t bytes)
{
    while (bytes > 0) {
        struct iovec l = {.iov_base = local, .iov_len = bytes};
        struct iovec r = {.iov_base = (void *)(uintptr_t)remote, .iov_len = bytes};
        ssize_t n = write ? process_vm_writev(node->pids[peer], &l, 1, &r, 1, 0)
                          : process_vm_readv(node->pids[peer], &l, 1, &r, 1, 0);

        if (n <= 0) {
            if (n < 0 && errno == EINTR)
                continue;
            if (n == 0)
                errno = EFAULT;
            return cma_error(node, peer, write ? "process_vm_writev" : "process_vm_readv", bytes);
        }
        local = (char *)local + n;
        remote += (uint64_t)n;
        bytes -= (size_t)n;
    }
    return 0;
}

/*
 * Move bytes between this process at local and peer's remote address: a
 * copy where the peer's buffer is chorus memory mapped here (streaming
 * stores for a write when streaming), else cross-memory attach.
 */
static int peer_move(shm_node_t *node, int peer, int write, void *local, uint64_t remote,
                     size_t bytes, int streaming)
{
    void *mapped;
    int rc;

    if ((rc = shm_mem_resolve(node, peer, remote, bytes, &mapped)) < 0)
        return rc;
    if (mapped == NULL)
        return kernel_move(node, peer, write, local, remote, bytes);
    if (write)
        shm_copy(mapped, local, bytes, streaming);
    else
        memcpy(local, mapped, bytes);
    return 0;
}

int shm_cma_move(shm_node_t *node, int peer, int write, void *local, uint64_t remote,
                 size_t bytes)
{
    return peer_move(node, peer, write, local, remote, bytes, 0);
}

int shm_cma_probe(pid_t pid, const shm_ctrl_t *peer_ctrl_local, uint64_t peer_addr)
{
    uint8_t token[SHM_TOKEN_BYTES];
    struct iovec l = {.iov_base = token, .iov_len = sizeof(token)};
    struct iovec r = {.iov_base = (void *)(uintptr_t)(peer_addr + offsetof(shm_ctrl_t, token)),
                      .iov_len = sizeof(token)};

    if (process_vm_readv(pid, &l, 1, &r, 1, 0) != (ssize_t)sizeof(token)) {
        chorus_info("cross-memory attach to pid %d is not available (%m): node-local calls "
                    "use the staging path", (int)pid);
        return 0;
    }
    return memcmp(token, peer_ctrl_local->token, sizeof(token)) == 0;
}

static const shm_desc_t *desc_of(const shm_node_t *node, int j)
{
    return &node->ctrl[j]->desc;
}

/*
 * Where this rank's reduced chunk is formed: straight in its recvbuf when the
 * result stays there, so no copy follows; in the private acc buffer when it
 * has no result here (a reduce's non-root), when forming it in place would
 * overwrite its own input before rank order reaches it, or when the results
 * go out with streaming stores (a cache-resident chunk copied out with them
 * costs no read of the destination, which plain stores into it would).
 */
static char *cma_dst(shm_op_t *op, const char *own, size_t c, size_t k, int streaming)
{
    const coll_args_t *a = &op->args;
    size_t bytes = k * op->esize;
    char *dst;

    if ((a->coll == COLL_REDUCE && a->rank != a->root) || streaming)
        return op->node->acc;
    dst = (char *)a->recvbuf + c * op->esize;
    if (dst == own && op->node->me == 0)
        return dst;
    if (dst < own + bytes && own < dst + bytes)
        return op->node->acc;
    return dst;
}

/*
 * dst = reduction in rank order of elements [c, c+k) at offset elem0 of every
 * rank's sendbuf: operands in chorus memory are read where they lie, as is
 * this rank's own; of the others, the first is read straight into dst, every
 * later one through tmp.
 */
static int cma_reduce_chunk(shm_op_t *op, char *dst, size_t elem0, size_t c, size_t k)
{
    shm_node_t *node = op->node;
    chorus__reduce_fn fn = chorus__reduce_kernel(op->args.dtype, op->args.op);
    size_t es = op->esize, off = (elem0 + c) * es;
    const char *own = (const char *)op->args.sendbuf + off;
    const void *sofar = NULL;   /* the reduction of ranks 0..j-1 */
    int rc;

    for (int j = 0; j < node->n; j++) {
        const void *src = own;

        if (j != node->me) {
            uint64_t remote = desc_of(node, j)->sendbuf + off;
            void *into = sofar == NULL ? (void *)dst : node->tmp, *mapped;

            if ((rc = shm_mem_resolve(node, j, remote, k * es, &mapped)) < 0)
                return rc;
            if (mapped == NULL && (rc = kernel_move(node, j, 0, into, remote, k * es)) < 0)
                return rc;
            src = mapped != NULL ? mapped : into;
        }
        if (sofar != NULL)
            fn(dst, sofar, src, k);
        sofar = sofar == NULL ? src : dst;
    }
    if (sofar != dst)
        memcpy(dst, sofar, k * es);
    chorus__reduce_finalize(op->args.dtype, op->args.op, dst, k, node->n);
    return 0;
}

static int cma_reduce(shm_op_t *op)
{
    shm_node_t *node = op->node;
    const coll_args_t *a = &op->args;
    size_t es = op->esize, per = node->chunk / es, lo, hi, elem0 = 0;
    size_t unit = shm_unit(es);
    int streaming = op->bytes >= node->cfg.nt_bytes, rc;

    if (a->coll == COLL_REDUCE_SCATTER) {
        lo = 0;
        hi = coll_args_block(a, node->me);
        elem0 = coll_args_displ(a, node->me);
    } else {
        shm_part(a->count, unit, node->n, node->me, &lo, &hi);
    }
    for (size_t c = lo; c < hi; c += per) {
        size_t k = hi - c < per ? hi - c : per, bytes = k * es;
        const char *own = (const char *)a->sendbuf + (elem0 + c) * es;
        char *dst = cma_dst(op, own, c, k, streaming);

        if ((rc = cma_reduce_chunk(op, dst, elem0, c, k)) < 0)
            return rc;
        if (dst == node->acc && (a->coll != COLL_REDUCE || a->rank == a->root))
            shm_copy((char *)a->recvbuf + c * es, dst, bytes, streaming);
        for (int j = 0; j < node->n && a->coll != COLL_REDUCE_SCATTER; j++) {
            if (j == node->me || (a->coll == COLL_REDUCE && j != a->root))
                continue;
            rc = peer_move(node, j, 1, dst, desc_of(node, j)->recvbuf + c * es, bytes,
                           streaming);
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

static int cma_broadcast(shm_op_t *op)
{
    const coll_args_t *a = &op->args;
    size_t bytes = a->count * op->esize;

    if (a->rank != a->root)
        return shm_cma_move(op->node, a->root, 0, a->recvbuf, desc_of(op->node, a->root)->sendbuf,
                            bytes);
    if (a->recvbuf != a->sendbuf)
        memcpy(a->recvbuf, a->sendbuf, bytes);
    return 0;
}

/* Allgather: every peer's block read straight from its send buffer to where it goes. */
static int cma_gather(shm_op_t *op)
{
    shm_node_t *node = op->node;
    const coll_args_t *a = &op->args;
    char *recv = a->recvbuf;
    int rc;

    for (int j = 0; j < node->n; j++) {
        size_t bytes = coll_args_block(a, j) * op->esize;
        char *at = recv + coll_args_displ(a, j) * op->esize;

        if (bytes == 0)
            continue;
        if (j == node->me) {
            if (at != a->sendbuf)
                memcpy(at, a->sendbuf, bytes);
        } else if ((rc = shm_cma_move(node, j, 0, at, desc_of(node, j)->sendbuf, bytes)) < 0) {
            return rc;
        }
    }
    return 0;
}

/* Every rank's part of the call, once every descriptor is published and checked. */
static int cma_moves(shm_op_t *op)
{
    switch (op->args.coll) {
    case COLL_BROADCAST:
        return cma_broadcast(op);
    case COLL_ALLGATHER:
        return cma_gather(op);
    case COLL_ALLTOALL:
        return shm_a2a_cma(op);
    default:
        return cma_reduce(op);
    }
}

int shm_cma_progress(shm_op_t *op)
{
    shm_node_t *node = op->node;
    int rc;

    switch (op->round) {
    case 0:
        shm_desc_publish(node, &op->args, op->fp);
        shm_post(node, op->tag);
        op->round = 1;
        /* fall through */
    case 1:
        if ((rc = shm_reached(node, op->base + 1, op->base, op->tag, &op->wait_peer)) <= 0) {
            op->wait_step = op->base + 1;
            return rc;
        }
        if ((rc = shm_desc_check(node, &op->args, op->fp)) < 0 || (rc = cma_moves(op)) < 0)
            return rc;
        shm_post(node, op->tag);
        op->round = 2;
        /* fall through */
    default:
        rc = shm_reached(node, op->base + 2, op->base, op->tag, &op->wait_peer);
        op->wait_step = op->base + 2;
        return rc;
    }
}
