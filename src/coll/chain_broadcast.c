/*
 * Broadcast along a pipelined chain root -> root + 1 -> ... -> root - 1
 * (mod size). The vector goes in chunks of chunk_bytes and a rank forwards
 * each chunk as soon as it has it, so once the pipeline fills every link
 * carries data at the same time: for large vectors the time approaches one
 * vector's transfer, whatever the rank count.
 */
#include "coll/coll.h"

#include <math.h>

#include "coll/tree.h"
#include "util/log.h"

enum { CHAIN_BCAST_PHASE = 1 };

static chorus_status_t chain_broadcast_build(const coll_args_t *args,
                                             const coll_env_t *env, coll_sched_t *sched)
{
    int is_root = args->rank == args->root;
    int v, prev, next;
    size_t esize, ce, nchunks;

    if (coll_tree_check(args, "chain broadcast", 1, 0, COLL_TREE_RECV | COLL_TREE_SEND_ROOT))
        return CHORUS_ERR_INVALID_ARG;
    if (args->count == 0)
        return CHORUS_OK;
    esize = chorus_dtype_size(args->dtype);
    v = coll_tree_vrank(args->rank, args->root, args->size);
    prev = v > 0 ? coll_tree_rank(v - 1, args->root, args->size) : -1;
    next = v + 1 < args->size ? coll_tree_rank(v + 1, args->root, args->size) : -1;
    if (is_root && args->sendbuf != args->recvbuf &&
        coll_sched_copy(sched, args->recvbuf, args->sendbuf, args->count * esize, NULL, 0) < 0)
        return CHORUS_ERR_NO_MEMORY;
    ce = coll_tree_chunk_elems(args->count, esize, args->chunk_bytes);
    nchunks = (args->count + ce - 1) / ce;
    for (size_t c = 0; c < nchunks; c++) {
        size_t off = c * ce * esize;
        size_t bytes = ((args->count - c * ce < ce) ? args->count - c * ce : ce) * esize;
        uint32_t tag = coll_tree_tag(CHAIN_BCAST_PHASE, 0, c);
        const char *src = (const char *)args->sendbuf + off;
        long deps[COLL_STEP_MAX_DEPS], rcv = -1;

        if (prev >= 0) {
            src = (const char *)args->recvbuf + off;
            rcv = coll_sched_recv(sched, prev, tag, (char *)args->recvbuf + off, bytes, NULL, 0);
            if (rcv < 0)
                return CHORUS_ERR_NO_MEMORY;
        }
        if (next >= 0 && coll_sched_send(sched, next, tag, src, bytes, deps,
                                         coll_tree_deps(deps, rcv, -1, -1, -1)) < 0)
            return CHORUS_ERR_NO_MEMORY;
    }
    return CHORUS_OK;
}

/*
 * The message goes down the chain in chunks of c bytes: the last rank gets
 * the first chunk after p-1 hops and one more chunk every hop after that.
 */
static double chain_broadcast_cost(const tune_model_t *m, double n, int p)
{
    double c = (m->chunk_bytes == 0 || (double)m->chunk_bytes > n) ? n : (double)m->chunk_bytes;
    double chunks = c > 0.0 ? ceil(n / c) : 1.0;

    if (p == 1)
        return 0.0;
    return (p - 2 + chunks) * (m->alpha + c * m->beta);
}

static double chain_broadcast_price(const coll_env_t *env, size_t bytes)
{
    return coll_price_flat(env, chain_broadcast_cost, COLL_FLOWS_RING, bytes);
}

const coll_alg_t coll_chain_broadcast = {
    .name = "chain",
    .coll = COLL_BROADCAST,
    .build = chain_broadcast_build,
    .price = chain_broadcast_price,
};
