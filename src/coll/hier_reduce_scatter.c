/*
 * Hierarchical reduce-scatter: each node sends each other node's blocks
 * across the network once, already reduced over the node.
 *
 * A block b whose rank lives on another node is reduced on my node by
 * red(n, b), the rank at local position (local index of b) mod L(n), L(n)
 * being the node's rank count, so that a node's outgoing partials are
 * spread over all its ranks as the senders on b's node are. The node
 * reduces them in node-local reduce-scatters, one per round of another
 * node's blocks (round t: those whose local indices are t L(n) .. t L(n) +
 * L(n) - 1, one per reducer), and one of its own ranks' blocks, straight
 * into their recvbufs. Each reducer sends the node's partial to b, and
 * every rank reduces the partials of the other nodes (by node number) into
 * its own block after its node's part, always in that order, so the
 * result does not depend on arrival order. The node-local stages run on
 * the node team when a collective transport serves the node, else as
 * transfers between the node's ranks (node_stage.h); they reduce AVG as
 * SUM, and each rank divides its block once at the end.
 *
 * A node link so carries (p - L(n)) blocks out of node n, where a flat ring
 * pushes p - 1 through one link. The schedule is appended chunk by chunk,
 * then node by node, the same walk on every rank, so the steps a peer
 * waits for sit within one chunk of its own schedule and never beyond the
 * executor's window. Tags: b * nchunks + c for the network stage, then one
 * per node-local call.
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
    int node_id, local;     /* my node and its rank count */
    size_t *counts, *displs;    /* [local]: one node-local reduce-scatter's blocks */
} hier_rs_t;

static int hier_rs_reducer(const topo_layout_t *l, int node, int b)
{
    return topo_layout_rank(l, node, l->local_index[b] % topo_layout_node_size(l, node));
}

/* Network tags: b * nchunks + c for the size blocks b. */
static uint32_t hier_rs_tag(const hier_rs_t *h, int b, size_t c)
{
    return (uint32_t)((size_t)b * h->nchunks + c);
}

/* Node-local tags, after the network's: one per chunk, node and round. */
static uint32_t hier_rs_node_tag(const hier_rs_t *h, size_t c, int m, int t)
{
    size_t calls = (c * (size_t)h->l->nnodes + (size_t)m) * (size_t)h->l->local_max;

    return (uint32_t)((size_t)h->a->size * h->nchunks + calls + (size_t)t);
}

static size_t hier_rs_elems(const hier_rs_t *h, size_t c)
{
    size_t left = h->a->count - c * h->chunk;

    return left < h->chunk ? left : h->chunk;
}

/*
 * Chunk c of the blocks of node m's ranks in round t, reduced over my node:
 * mine (if any) lands in recv. Returns the stage's step or -2.
 */
static long hier_rs_stage(hier_rs_t *h, size_t c, int m, int t, void *recv)
{
    int owners = topo_layout_node_size(h->l, m);
    coll_node_call_t call = {.coll = COLL_REDUCE_SCATTER, .send = h->a->sendbuf, .recv = recv,
                             .counts = h->counts, .displs = h->displs,
                             .tag0 = hier_rs_node_tag(h, c, m, t)};

    for (int j = 0; j < h->local; j++) {
        int i = t * h->local + j, b = i < owners ? topo_layout_rank(h->l, m, i) : -1;

        h->counts[j] = b >= 0 ? hier_rs_elems(h, c) : 0;
        h->displs[j] = b >= 0 ? (size_t)b * h->a->count + c * h->chunk : 0;
    }
    return coll_node_stage(&h->node, &call, NULL, 0);
}

/* Chunk c of node m's blocks (m not mine): reduced over my node, my partial sent to its rank. */
static chorus_status_t hier_rs_foreign(hier_rs_t *h, size_t c, int m)
{
    int owners = topo_layout_node_size(h->l, m);
    size_t bytes = hier_rs_elems(h, c) * h->esize;

    for (int t = 0; t * h->local < owners; t++) {
        int i = t * h->local + h->node.group.me;
        int b = i < owners ? topo_layout_rank(h->l, m, i) : -1;
        char *partial = b >= 0 ? coll_node_alloc(&h->node, bytes) : NULL;
        long reduced;

        if (b >= 0 && partial == NULL)
            return CHORUS_ERR_NO_MEMORY;
        reduced = hier_rs_stage(h, c, m, t, partial);
        if (reduced == -2 || (b >= 0 && coll_sched_send(h->sched, b, hier_rs_tag(h, b, c),
                                                        partial, bytes, &reduced, 1) < 0))
            return CHORUS_ERR_NO_MEMORY;
    }
    return CHORUS_OK;
}

/*
 * Chunk c of my own block: my node's part (after step `mine`), then each
 * other node's partial; AVG divided at the end.
 */
static chorus_status_t hier_rs_own(hier_rs_t *h, size_t c, long mine)
{
    const topo_layout_t *l = h->l;
    int me = h->a->rank;
    size_t bytes = hier_rs_elems(h, c) * h->esize;
    char *acc = (char *)h->a->recvbuf + c * h->chunk * h->esize;
    char *slots = l->nnodes > 1 ? coll_node_alloc(&h->node, (size_t)(l->nnodes - 1) * bytes)
                                : NULL;
    long prev = mine;

    if (l->nnodes > 1 && slots == NULL)
        return CHORUS_ERR_NO_MEMORY;
    for (int m = 0, k = 0; m < l->nnodes; m++) {
        long deps[2];

        if (m == h->node_id)
            continue;
        deps[0] = coll_sched_recv(h->sched, hier_rs_reducer(l, m, me), hier_rs_tag(h, me, c),
                                  slots + (size_t)k++ * bytes, bytes, NULL, 0);
        deps[1] = prev;
        if (deps[0] < 0)
            return CHORUS_ERR_NO_MEMORY;
        prev = coll_sched_reduce(h->sched, acc, acc, slots + (size_t)(k - 1) * bytes, bytes,
                                 deps, 2);
        if (prev < 0)
            return CHORUS_ERR_NO_MEMORY;
    }
    if (h->a->op == CHORUS_AVG && coll_sched_finalize_op(h->sched, acc, bytes, &prev, 1) < 0)
        return CHORUS_ERR_NO_MEMORY;
    return CHORUS_OK;
}

/* My steps for chunk c: every node's blocks in node order, then my own block's partials. */
static chorus_status_t hier_rs_chunk(hier_rs_t *h, size_t c)
{
    chorus_status_t status = CHORUS_OK;
    long mine = -1;

    for (int m = 0; m < h->l->nnodes && status == CHORUS_OK; m++) {
        if (m != h->node_id) {
            status = hier_rs_foreign(h, c, m);
            continue;
        }
        mine = hier_rs_stage(h, c, m, 0, (char *)h->a->recvbuf + c * h->chunk * h->esize);
        if (mine == -2)
            status = CHORUS_ERR_NO_MEMORY;
    }
    return status == CHORUS_OK ? hier_rs_own(h, c, mine) : status;
}

static chorus_status_t hier_reduce_scatter_build(const coll_args_t *args,
                                                 const coll_env_t *env, coll_sched_t *sched)
{
    hier_rs_t h = {.a = args, .l = env->layout, .sched = sched};
    chorus_status_t status = coll_check_blocks(args, "hier reduce_scatter", 1, 1, &h.esize);

    if (status == CHORUS_OK)
        status = coll_check_layout(args, env, "hier reduce_scatter", 1);
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
        status = hier_rs_chunk(&h, c);
    free(h.counts);
    return status;
}

/*
 * n is the whole input, p blocks. Each rank sends the blocks of its node's
 * other ranks to them and the other nodes' blocks it does not reduce to the
 * local rank that does; the reducers send one partial per block to its
 * owner, so each node link carries the other nodes' blocks once. Both stages
 * and the reductions run chunk by chunk, so they overlap but for one chunk.
 * On the node team the node-local part is its reduce-scatter of the input,
 * and each rank still reduces the other nodes' partials.
 */
static double hier_reduce_scatter_price(const coll_env_t *env, size_t bytes)
{
    const tune_model_t *m = env->model;
    tune_shape_t s;
    int p = env->nranks;
    double price, n = (double)bytes, L, G, block, c, reduced, local, net, latency;

    if (!coll_price_hier(env, &s, &price))
        return price;
    L = s.local_max;
    G = s.nnodes;
    block = n / p;
    c = m->chunk_bytes ? (double)m->chunk_bytes : block;
    reduced = (L - 1) * (p - L) / L + (L - 1) + (G - 1);
    local = (L - 1) * block * m->beta + (L - 1) * (p - L) / L * block * m->beta
            + reduced * block * m->gamma;
    latency = (L - 1) * m->alpha;
    if (env->team_ops != NULL) {
        local = coll_price_team(env, COLL_REDUCE_SCATTER, n) + (G - 1) * block * m->gamma;
        latency = 0.0;
    }
    net = (G - 1) * L * block * m->net_beta;
    latency += (G - 1) * m->net_alpha;
    return latency + tune_overlap(local, net, block > 0 ? c / block : 1.0);
}

const coll_alg_t coll_hier_reduce_scatter = {
    .name = "hier",
    .coll = COLL_REDUCE_SCATTER,
    .build = hier_reduce_scatter_build,
    .price = hier_reduce_scatter_price,
};
