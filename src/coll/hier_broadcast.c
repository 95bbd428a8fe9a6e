/*
 * Hierarchical broadcast: the vector is cut into one piece per rank of the
 * fullest node, and every node has a holder for each piece (local index
 * piece mod the node's size). The root hands each piece to its own node's
 * holder; the holders of a piece form a pipelined chain across the nodes,
 * starting at the root's node; and each holder passes its piece, chunk by
 * chunk as it arrives, to the other ranks of its node. Each byte crosses
 * to each other node exactly once, and every rank of a node carries a
 * share of the node's links instead of one leader carrying it all.
 */
#include "coll/coll.h"

#include "coll/ring.h"
#include "util/log.h"

/* Tag phases: root to its node's holders, holder to holder across nodes, holder to its node. */
enum { HIER_BC_SCATTER = 0, HIER_BC_CHAIN, HIER_BC_LOCAL, HIER_BC_PHASES };

typedef struct {
    const coll_args_t *a;
    const topo_layout_t *l;
    coll_sched_t *sched;
    size_t esize, chunk, nchunks;
    int lmax, rootnode;
} hier_bc_t;

/* The rank of `node` that holds piece s and spreads it there. */
static int hier_bc_holder(const topo_layout_t *l, int node, int s)
{
    return topo_layout_rank(l, node, s % topo_layout_node_size(l, node));
}

static uint32_t hier_bc_tag(const hier_bc_t *h, int phase, int s, size_t c)
{
    return (uint32_t)(((size_t)phase * (size_t)h->lmax + (size_t)s) * h->nchunks + c);
}

static size_t hier_bc_chunk_bytes(const hier_bc_t *h, size_t n, size_t c)
{
    size_t left = n - c * h->chunk;

    return (left < h->chunk ? left : h->chunk) * h->esize;
}

/* The chain's next node after `node`, or -1 at its end (the node before the root's). */
static int hier_bc_next_node(const hier_bc_t *h, int node)
{
    int next = (node + 1) % h->l->nnodes;

    return next == h->rootnode ? -1 : next;
}

/*
 * As holder of piece s, its chunk c (at byte at): get it (from the root on
 * the root's node, else from the previous node's holder; the root has it
 * already), then pass it down the chain and to the rest of my node.
 */
static chorus_status_t hier_bc_hold(const hier_bc_t *h, int s, size_t c, size_t at,
                                    size_t bytes)
{
    const coll_args_t *a = h->a;
    int me = a->rank, node = h->l->node_of[me], nn = hier_bc_next_node(h, node);
    int next = nn >= 0 ? hier_bc_holder(h->l, nn, s) : -1;
    int from = node == h->rootnode
        ? a->root : hier_bc_holder(h->l, (node + h->l->nnodes - 1) % h->l->nnodes, s);
    int phase = node == h->rootnode ? HIER_BC_SCATTER : HIER_BC_CHAIN;
    const char *src = (me == a->root ? (const char *)a->sendbuf : (const char *)a->recvbuf) + at;
    long got = -1;

    if (me != a->root) {
        got = coll_sched_recv(h->sched, from, hier_bc_tag(h, phase, s, c),
                              (char *)a->recvbuf + at, bytes, NULL, 0);
        if (got < 0)
            return CHORUS_ERR_NO_MEMORY;
    }
    if (next >= 0 && coll_sched_send(h->sched, next, hier_bc_tag(h, HIER_BC_CHAIN, s, c), src,
                                     bytes, &got, 1) < 0)
        return CHORUS_ERR_NO_MEMORY;
    for (int i = 0; i < topo_layout_node_size(h->l, node); i++) {
        int peer = topo_layout_rank(h->l, node, i);

        if (peer != me && peer != a->root &&
            coll_sched_send(h->sched, peer, hier_bc_tag(h, HIER_BC_LOCAL, s, c), src, bytes,
                            &got, 1) < 0)
            return CHORUS_ERR_NO_MEMORY;
    }
    return CHORUS_OK;
}

/* Chunk c of piece s as a rank that does not hold it: the root hands it over, others receive. */
static chorus_status_t hier_bc_pass(const hier_bc_t *h, int s, size_t c, size_t at,
                                    size_t bytes)
{
    const coll_args_t *a = h->a;
    int holder = hier_bc_holder(h->l, h->l->node_of[a->rank], s);
    long idx = a->rank == a->root
        ? coll_sched_send(h->sched, holder, hier_bc_tag(h, HIER_BC_SCATTER, s, c),
                          (const char *)a->sendbuf + at, bytes, NULL, 0)
        : coll_sched_recv(h->sched, holder, hier_bc_tag(h, HIER_BC_LOCAL, s, c),
                          (char *)a->recvbuf + at, bytes, NULL, 0);

    return idx < 0 ? CHORUS_ERR_NO_MEMORY : CHORUS_OK;
}

/*
 * Chunk c of every piece. Going chunk by chunk over all pieces, rather than
 * piece by piece, keeps every piece's chain busy at once within the
 * executor's window; and as a transfer's two sides are both in (c, s) and
 * every rank runs through (c, s) in the same order, nothing waits for a
 * step beyond a peer's window.
 */
static chorus_status_t hier_bc_chunk(const hier_bc_t *h, size_t c)
{
    const coll_args_t *a = h->a;
    int node = h->l->node_of[a->rank];
    chorus_status_t status = CHORUS_OK;

    for (int s = 0; s < h->lmax && status == CHORUS_OK; s++) {
        size_t first = coll_ring_block_offset(a->count, h->lmax, s) + c * h->chunk;
        size_t n = coll_ring_block_count(a->count, h->lmax, s), bytes;

        if (c * h->chunk >= n)
            continue;   /* an empty piece, or one chunk shorter than piece 0 */
        bytes = hier_bc_chunk_bytes(h, n, c);
        if (hier_bc_holder(h->l, node, s) == a->rank)
            status = hier_bc_hold(h, s, c, first * h->esize, bytes);
        else
            status = hier_bc_pass(h, s, c, first * h->esize, bytes);
    }
    return status;
}

/* The checks beyond coll_check_blocks: the root, then coll_check_layout. */
static chorus_status_t hier_bc_check(const coll_args_t *a, const coll_env_t *env)
{
    if (a->root < 0 || a->root >= a->size) {
        chorus_error("hier broadcast: invalid root %d of size %d", a->root, a->size);
        return CHORUS_ERR_INVALID_ARG;
    }
    return coll_check_layout(a, env, "hier broadcast", a->rank == a->root);
}

static chorus_status_t hier_broadcast_build(const coll_args_t *args,
                                            const coll_env_t *env, coll_sched_t *sched)
{
    hier_bc_t h = {.a = args, .l = env->layout, .sched = sched};
    chorus_status_t status = coll_check_blocks(args, "hier broadcast", 0, 0, &h.esize);

    if (status == CHORUS_OK)
        status = hier_bc_check(args, env);
    if (status != CHORUS_OK || args->count == 0)
        return status;
    if (args->rank == args->root && args->sendbuf != args->recvbuf &&
        coll_sched_copy(sched, args->recvbuf, args->sendbuf, args->count * h.esize, NULL, 0) < 0)
        return CHORUS_ERR_NO_MEMORY;
    h.lmax = h.l->local_max;
    h.rootnode = h.l->node_of[args->root];
    /* Piece 0 is the largest; tags run over every (phase, piece, chunk). */
    h.chunk = coll_chunk_elems(args->chunk_bytes, h.esize,
                               coll_ring_block_count(args->count, h.lmax, 0),
                               (long)HIER_BC_PHASES * h.lmax);
    h.nchunks = coll_chunk_count(coll_ring_block_count(args->count, h.lmax, 0), h.chunk);
    for (size_t c = 0; c < h.nchunks && status == CHORUS_OK; c++)
        status = hier_bc_chunk(&h, c);
    return status;
}

/*
 * The root's node cuts the vector into local_max pieces, each piece goes
 * down a chain of nodes (the root's node link carries the vector once),
 * and each node's holders pass their pieces on chunk by chunk. On the node
 * teams the root's node broadcasts and the others allgather the pieces.
 */
static double hier_broadcast_price(const coll_env_t *env, size_t bytes)
{
    const tune_model_t *m = env->model;
    tune_shape_t s;
    double price, n = (double)bytes, L, G, piece, c, local, net, latency;

    if (!coll_price_hier(env, &s, &price))
        return price;
    L = s.local_max;
    G = s.nnodes;
    piece = n / L;
    c = (m->chunk_bytes == 0 || (double)m->chunk_bytes > piece) ? piece : (double)m->chunk_bytes;
    local = 2.0 * (L - 1) * piece * m->beta;
    latency = 2.0 * (L - 1) * m->alpha;
    if (env->team_ops != NULL) {
        local = coll_price_team(env, COLL_BROADCAST, n) +
                coll_price_team(env, COLL_ALLGATHER, n);
        latency = 0.0;
    }
    /* The pieces' chunks cross the root's node link in L flows at once. */
    net = n * m->net_beta + (G - 2) * c * L * m->net_beta
          + (c > 0 ? n / c / L : 0.0) * m->net_alpha;
    latency += (G - 1) * m->net_alpha;
    return latency + tune_overlap(local, net, piece > 0 ? c / piece : 1.0);
}

const coll_alg_t coll_hier_broadcast = {
    .name = "hier",
    .coll = COLL_BROADCAST,
    .build = hier_broadcast_build,
    .price = hier_broadcast_price,
};
