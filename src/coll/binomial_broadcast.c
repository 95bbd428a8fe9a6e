/*
 * Broadcast down a binomial tree rooted at root: log2(p) rounds, the
 * latency-optimal shape for small messages. Larger vectors are cut into
 * chunks and each chunk is forwarded as soon as it arrives, so the levels of
 * the tree work on different chunks at the same time.
 *
 * A rank forwards to its largest subtree first: that subtree has the
 * longest way still to go.
 */
#include "coll/coll.h"

#include "coll/tree.h"
#include "util/log.h"

enum { BINOMIAL_BCAST_PHASE = 1 };

/* Sends of one chunk to every child, largest subtree first, after step dep. */
static chorus_status_t bcast_forward(coll_sched_t *s, const coll_args_t *args, const char *src,
                                     size_t bytes, size_t chunk, long dep)
{
    int nchildren = coll_binomial_nchildren(args->rank, args->root, args->size);
    uint32_t tag = coll_tree_tag(BINOMIAL_BCAST_PHASE, 0, chunk);
    long deps[COLL_STEP_MAX_DEPS];
    int nd = coll_tree_deps(deps, dep, -1, -1, -1);

    for (int i = nchildren - 1; i >= 0; i--) {
        int child = coll_binomial_child(args->rank, args->root, args->size, i);

        if (coll_sched_send(s, child, tag, src, bytes, deps, nd) < 0)
            return CHORUS_ERR_NO_MEMORY;
    }
    return CHORUS_OK;
}

static chorus_status_t binomial_broadcast_build(const coll_args_t *args,
                                                const coll_env_t *env, coll_sched_t *sched)
{
    int is_root = args->rank == args->root;
    size_t esize, ce, nchunks;
    int parent;

    if (coll_tree_check(args, "binomial broadcast", 1, 0, COLL_TREE_RECV | COLL_TREE_SEND_ROOT))
        return CHORUS_ERR_INVALID_ARG;
    if (args->count == 0)
        return CHORUS_OK;
    esize = chorus_dtype_size(args->dtype);
    parent = coll_binomial_parent(args->rank, args->root, args->size);
    /* The root sends straight from sendbuf; its own copy runs alongside. */
    if (is_root && args->sendbuf != args->recvbuf &&
        coll_sched_copy(sched, args->recvbuf, args->sendbuf, args->count * esize, NULL, 0) < 0)
        return CHORUS_ERR_NO_MEMORY;
    ce = coll_tree_chunk_elems(args->count, esize, args->chunk_bytes);
    nchunks = (args->count + ce - 1) / ce;
    for (size_t c = 0; c < nchunks; c++) {
        size_t off = c * ce * esize;
        size_t n = (args->count - c * ce < ce) ? args->count - c * ce : ce;
        char *dst = (char *)args->recvbuf + off;
        long rcv = -1;
        chorus_status_t st;

        if (!is_root) {
            rcv = coll_sched_recv(sched, parent, coll_tree_tag(BINOMIAL_BCAST_PHASE, 0, c), dst,
                                  n * esize, NULL, 0);
            if (rcv < 0)
                return CHORUS_ERR_NO_MEMORY;
        }
        st = bcast_forward(sched, args, is_root ? (const char *)args->sendbuf + off : dst,
                           n * esize, c, rcv);
        if (st != CHORUS_OK)
            return st;
    }
    return CHORUS_OK;
}

static double binomial_broadcast_cost(const tune_model_t *m, double n, int p)
{
    return tune_log2_ceil(p) * (m->alpha + n * m->beta);
}

static double binomial_broadcast_price(const coll_env_t *env, size_t bytes)
{
    return coll_price_flat(env, binomial_broadcast_cost, COLL_FLOWS_NODE, bytes);
}

const coll_alg_t coll_binomial_broadcast = {
    .name = "binomial",
    .coll = COLL_BROADCAST,
    .build = binomial_broadcast_build,
    .price = binomial_broadcast_price,
};
