/*
 * Hierarchical allgather: every block crosses to each other node once.
 *
 * A rank sends its block to one proxy on each other node: the rank there
 * whose local index is the sender's modulo that node's size, so a node's
 * incoming blocks are spread over all its ranks rather than funnelled
 * through a leader. The node then spreads them in node-local allgathers:
 * one of its own ranks' blocks, and for each other node one per round of
 * blocks (round t: the blocks whose senders' local indices are t L .. t L
 * + L - 1 for a node of L ranks, one per proxy). These run on the node team
 * when a collective transport serves the node, else as transfers between
 * the node's ranks (node_stage.h). Who sends which block to whom follows
 * from the layout alone, so every rank knows its senders without asking.
 */
#include "coll/coll.h"

#include <stdlib.h>

#include "coll/node_stage.h"
#include "coll/ring.h"

typedef struct {
    const coll_args_t *a;
    const topo_layout_t *l;
    coll_sched_t *sched;
    coll_node_t node;
    size_t esize, block, chunk, nchunks;
    int node_id, local;
    size_t *counts, *displs;    /* [local]: one node-local allgather's blocks */
} hier_ag_t;

/* The rank of `node` that receives block q (from another node) for the whole node. */
static int hier_ag_proxy(const topo_layout_t *l, int node, int q)
{
    return topo_layout_rank(l, node, l->local_index[q] % topo_layout_node_size(l, node));
}

static size_t hier_ag_chunk_elems(const hier_ag_t *h, size_t c)
{
    size_t left = h->a->count - c * h->chunk;

    return left < h->chunk ? left : h->chunk;
}

/* Network tags: q * nchunks + c for the size blocks q. */
static uint32_t hier_ag_tag(const hier_ag_t *h, int q, size_t c)
{
    return (uint32_t)((size_t)q * h->nchunks + c);
}

/* Node-local tags, after the network's: one per chunk, node distance and round. */
static uint32_t hier_ag_node_tag(const hier_ag_t *h, size_t c, int d, int t)
{
    size_t calls = (c * (size_t)h->l->nnodes + (size_t)d) * (size_t)h->l->local_max;

    return (uint32_t)((size_t)h->a->size * h->nchunks + calls + (size_t)t);
}

/*
 * Chunk c of the blocks of node `from` in round t, spread over my node; got
 * is the receive of my block of the round (-1: none, or my own node).
 */
static chorus_status_t hier_ag_spread(hier_ag_t *h, size_t c, int d, int t, long got)
{
    int from = (h->node_id - d + h->l->nnodes) % h->l->nnodes;
    int senders = topo_layout_node_size(h->l, from);
    coll_node_call_t call = {.coll = COLL_ALLGATHER, .recv = h->a->recvbuf,
                             .counts = h->counts, .displs = h->displs,
                             .tag0 = hier_ag_node_tag(h, c, d, t)};
    int me = h->node.group.me;

    for (int j = 0; j < h->local; j++) {
        int i = t * h->local + j, q = i < senders ? topo_layout_rank(h->l, from, i) : -1;

        h->counts[j] = q >= 0 ? hier_ag_chunk_elems(h, c) : 0;
        h->displs[j] = q >= 0 ? (size_t)q * h->a->count + c * h->chunk : 0;
    }
    /* My own block comes from sendbuf (in place when that is its place in recvbuf). */
    call.send = d == 0 ? (const char *)h->a->sendbuf + c * h->chunk * h->esize
                       : (const char *)h->a->recvbuf + h->displs[me] * h->esize;
    return coll_node_stage(&h->node, &call, &got, 1) == -2 ? CHORUS_ERR_NO_MEMORY : CHORUS_OK;
}

/*
 * The steps of chunk c at node distance d: for d == 0 the allgather of my
 * node's blocks; else my block to node + d, the blocks of node - d that I
 * receive for my node, and their spread. A send and its receive fall in
 * the same (c, d) on both sides, and the schedule runs through (c, d) in
 * order, so each rank's executor window holds the steps its peers wait for
 * and rendezvous transports cannot deadlock; the node-local stages come in
 * the same order on every rank of a node, as the team needs.
 */
static chorus_status_t hier_ag_level(hier_ag_t *h, size_t c, int d)
{
    const topo_layout_t *l = h->l;
    int me = h->a->rank, to = (h->node_id + d) % l->nnodes;
    int from = (h->node_id - d + l->nnodes) % l->nnodes, senders = topo_layout_node_size(l, from);
    size_t elems = hier_ag_chunk_elems(h, c);
    chorus_status_t status = CHORUS_OK;

    if (d == 0)
        return hier_ag_spread(h, c, 0, 0, -1);
    if (coll_sched_send(h->sched, hier_ag_proxy(l, to, me), hier_ag_tag(h, me, c),
                        (const char *)h->a->sendbuf + c * h->chunk * h->esize,
                        elems * h->esize, NULL, 0) < 0)
        return CHORUS_ERR_NO_MEMORY;
    for (int t = 0; t * h->local < senders && status == CHORUS_OK; t++) {
        int i = t * h->local + h->node.group.me;
        int q = i < senders ? topo_layout_rank(l, from, i) : -1;
        long got = -1;

        if (q >= 0) {
            got = coll_sched_recv(h->sched, q, hier_ag_tag(h, q, c),
                                  (char *)h->a->recvbuf + (size_t)q * h->block +
                                      c * h->chunk * h->esize,
                                  elems * h->esize, NULL, 0);
            if (got < 0)
                return CHORUS_ERR_NO_MEMORY;
        }
        status = hier_ag_spread(h, c, d, t, got);
    }
    return status;
}

static chorus_status_t hier_allgather_build(const coll_args_t *args,
                                            const coll_env_t *env, coll_sched_t *sched)
{
    hier_ag_t h = {.a = args, .l = env->layout, .sched = sched};
    chorus_status_t status = coll_check_blocks(args, "hier allgather", 0, 1, &h.esize);

    if (status == CHORUS_OK)
        status = coll_check_layout(args, env, "hier allgather", 1);
    if (status != CHORUS_OK || args->count == 0)
        return status;
    h.block = args->count * h.esize;
    h.node_id = h.l->node_of[args->rank];
    h.local = topo_layout_node_size(h.l, h.node_id);
    /* The network's size block tags, then one per node-local call (at most L rounds). */
    h.chunk = coll_chunk_elems(args->chunk_bytes, h.esize, args->count,
                               (long)args->size + (long)h.l->nnodes * h.l->local_max);
    h.nchunks = coll_chunk_count(args->count, h.chunk);
    h.counts = malloc(2 * (size_t)h.local * sizeof(*h.counts));
    if (h.counts == NULL)
        return CHORUS_ERR_NO_MEMORY;
    h.displs = h.counts + h.local;
    status = coll_node_init(&h.node, sched, args, env, h.chunk);
    for (size_t c = 0; c < h.nchunks && status == CHORUS_OK; c++)
        for (int d = 0; d < h.l->nnodes && status == CHORUS_OK; d++)
            status = hier_ag_level(&h, c, d);
    free(h.counts);
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
