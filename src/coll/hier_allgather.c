/*
 * Hierarchical allgather: every block crosses to each other node once.
 *
 * A rank sends its block to every other rank of its node and to one proxy
 * on each other node: the rank there whose local index is the sender's
 * modulo that node's size, so a node's incoming blocks are spread over all
 * its ranks rather than funnelled through a leader. A proxy forwards each
 * chunk of such a block to the rest of its node as soon as that chunk has
 * arrived. Who sends which block to whom follows from the layout alone, so
 * every rank knows its senders without asking, and no receive waits for
 * anything: only forwarding waits, for the chunk it forwards.
 */
#include "coll/coll.h"

#include "coll/ring.h"
#include "util/log.h"

typedef struct {
    const coll_args_t *a;
    const topo_layout_t *l;
    coll_sched_t *sched;
    size_t esize, block, chunk, nchunks;
} hier_ag_t;

/* The rank of `node` that receives block q (from another node) for the whole node. */
static int hier_ag_proxy(const topo_layout_t *l, int node, int q)
{
    return topo_layout_rank(l, node, l->local_index[q] % topo_layout_node_size(l, node));
}

/* Who sends block q (q != me) to rank me. */
static int hier_ag_sender(const topo_layout_t *l, int me, int q)
{
    int node = l->node_of[me], proxy;

    if (l->node_of[q] == node)
        return q;
    proxy = hier_ag_proxy(l, node, q);
    return proxy == me ? q : proxy;
}

static size_t hier_ag_chunk_bytes(const hier_ag_t *h, size_t c)
{
    size_t left = h->a->count - c * h->chunk;

    return (left < h->chunk ? left : h->chunk) * h->esize;
}

static uint32_t hier_ag_tag(const hier_ag_t *h, int q, size_t c)
{
    return (uint32_t)((size_t)q * h->nchunks + c);
}

/* Chunk c of block q at src to every rank of my node but me; each send waits for dep. */
static chorus_status_t hier_ag_send_local(const hier_ag_t *h, int q, size_t c, const char *src,
                                          long dep)
{
    int me = h->a->rank, node = h->l->node_of[me];

    for (int i = 0; i < topo_layout_node_size(h->l, node); i++) {
        int peer = topo_layout_rank(h->l, node, i);

        if (peer != me && coll_sched_send(h->sched, peer, hier_ag_tag(h, q, c), src,
                                          hier_ag_chunk_bytes(h, c), &dep, 1) < 0)
            return CHORUS_ERR_NO_MEMORY;
    }
    return CHORUS_OK;
}

/* Chunk c of block q from its sender; as q's proxy, forward it once it is in. */
static chorus_status_t hier_ag_recv_chunk(const hier_ag_t *h, int q, size_t c)
{
    int me = h->a->rank, from = hier_ag_sender(h->l, me, q);
    int proxy = from == q && h->l->node_of[q] != h->l->node_of[me];
    char *at = (char *)h->a->recvbuf + (size_t)q * h->block + c * h->chunk * h->esize;
    long got = coll_sched_recv(h->sched, from, hier_ag_tag(h, q, c), at,
                               hier_ag_chunk_bytes(h, c), NULL, 0);

    if (got < 0)
        return CHORUS_ERR_NO_MEMORY;
    return proxy ? hier_ag_send_local(h, q, c, at, got) : CHORUS_OK;
}

/*
 * The steps of chunk c at node distance d: for d == 0 the exchange within
 * my node; else my block to node + d and the blocks of node - d. A send
 * and its receive fall in the same (c, d) on both sides, and the schedule
 * runs through (c, d) in order, so each rank's executor window holds the
 * steps its peers wait for and rendezvous transports cannot deadlock.
 */
static chorus_status_t hier_ag_level(const hier_ag_t *h, size_t c, int d)
{
    const topo_layout_t *l = h->l;
    int me = h->a->rank, node = l->node_of[me];
    int to = (node + d) % l->nnodes, from = (node - d + l->nnodes) % l->nnodes;
    const char *src = (const char *)h->a->sendbuf + c * h->chunk * h->esize;
    chorus_status_t status = CHORUS_OK;

    if (d == 0) {
        status = hier_ag_send_local(h, me, c, src, -1);
    } else if (coll_sched_send(h->sched, hier_ag_proxy(l, to, me), hier_ag_tag(h, me, c), src,
                               hier_ag_chunk_bytes(h, c), NULL, 0) < 0) {
        return CHORUS_ERR_NO_MEMORY;
    }
    for (int i = 0; i < topo_layout_node_size(l, from) && status == CHORUS_OK; i++) {
        int q = topo_layout_rank(l, from, i);

        if (q != me)
            status = hier_ag_recv_chunk(h, q, c);
    }
    return status;
}

static chorus_status_t hier_allgather_build(const coll_args_t *args,
                                            const coll_env_t *env, coll_sched_t *sched)
{
    hier_ag_t h = {.a = args, .l = env->layout, .sched = sched};
    chorus_status_t status = coll_check_blocks(args, "hier allgather", 0, 1, &h.esize);
    char *own;

    if (status == CHORUS_OK)
        status = coll_check_layout(args, env, "hier allgather", 1);
    if (status != CHORUS_OK || args->count == 0)
        return status;
    h.block = args->count * h.esize;
    own = (char *)args->recvbuf + (size_t)args->rank * h.block;
    /* In place when sendbuf already is this rank's block of recvbuf: nothing to copy. */
    if (own != args->sendbuf &&
        coll_sched_copy(sched, own, args->sendbuf, h.block, NULL, 0) < 0)
        return CHORUS_ERR_NO_MEMORY;
    if (args->size == 1)
        return CHORUS_OK;
    /* Tags are q * nchunks + c for the size blocks q. */
    h.chunk = coll_chunk_elems(args->chunk_bytes, h.esize, args->count, args->size);
    h.nchunks = coll_chunk_count(args->count, h.chunk);
    for (size_t c = 0; c < h.nchunks && status == CHORUS_OK; c++)
        for (int d = 0; d < h.l->nnodes && status == CHORUS_OK; d++)
            status = hier_ag_level(&h, c, d);
    return status;
}

/*
 * n is the gathered result. Each rank sends its block to the other ranks
 * of its node and to one rank on each other node, which passes it on chunk
 * by chunk: each node link carries the node's blocks once per other node.
 * On the node team the node-local part is its allgather of the result.
 */
static double hier_allgather_price(const coll_env_t *env, size_t bytes)
{
    const tune_model_t *m = env->model;
    tune_shape_t s;
    int p = env->nranks;
    double price, n = (double)bytes, L, G, block, c, local, net, latency;

    if (!coll_price_hier(env, &s, &price))
        return price;
    L = s.local_max;
    G = s.nnodes;
    block = n / p;
    c = m->chunk_bytes ? (double)m->chunk_bytes : block;
    local = (L - 1) * block * m->beta + (L - 1) * (p - L) / L * block * m->beta;
    latency = (L - 1) * m->alpha;
    if (env->team_ops != NULL) {
        local = coll_price_team(env, COLL_ALLGATHER, n);
        latency = 0.0;
    }
    net = (G - 1) * L * block * m->net_beta;
    latency += (G - 1) * m->net_alpha;
    return latency + tune_overlap(local, net, block > 0 ? c / block : 1.0);
}

const coll_alg_t coll_hier_allgather = {
    .name = "hier",
    .coll = COLL_ALLGATHER,
    .build = hier_allgather_build,
    .price = hier_allgather_price,
};
