/*
 * Hierarchical broadcast: the vector is cut into one piece per rank of the
 * fullest node, and every node has a holder for each piece (local index
 * piece mod the node's size). On the root's node the root broadcasts each
 * piece, and the piece's holder passes it on to the next node's holder: the
 * holders of a piece form a pipelined chain across the nodes, starting at
 * the root's node. On every other node, what the holders received is
 * spread in node-local allgathers, one per round of L pieces for a node of
 * L ranks (one piece per holder). Each byte crosses to each other node
 * exactly once, and every rank of a node carries a share of the node's
 * links instead of one leader carrying it all.
 *
 * The node-local stages run on the node team when a collective transport
 * serves the node, else as transfers between the node's ranks
 * (node_stage.h), where the root's broadcast of a piece goes through the
 * piece's holder, so that the root sends each byte once.
 */
#include "coll/coll.h"

#include <stdlib.h>

#include "coll/node_stage.h"
#include "coll/ring.h"
#include "util/log.h"

/* Tag phases: holder to holder across nodes, node-local stages. */
enum { HIER_BC_CHAIN = 0, HIER_BC_NODE, HIER_BC_PHASES };

typedef struct {
    const coll_args_t *a;
    const topo_layout_t *l;
    coll_sched_t *sched;
    coll_node_t node;
    size_t esize, chunk, nchunks;
    int lmax, rootnode, node_id, local;
    size_t *counts, *displs;    /* [local]: one node-local allgather's blocks */
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

/* The chain's next node after `node`, or -1 at its end (the node before the root's). */
static int hier_bc_next_node(const hier_bc_t *h, int node)
{
    int next = (node + 1) % h->l->nnodes;

    return next == h->rootnode ? -1 : next;
}

/* Chunk c of piece s: its elements (0: the piece has no chunk c) and the first of them. */
static size_t hier_bc_piece(const hier_bc_t *h, int s, size_t c, size_t *first_p)
{
    size_t n = s < h->lmax ? coll_ring_block_count(h->a->count, h->lmax, s) : 0;
    size_t at = c * h->chunk;

    *first_p = 0;
    if (at >= n)
        return 0;   /* an empty piece, or one chunk shorter than piece 0 */
    *first_p = coll_ring_block_offset(h->a->count, h->lmax, s) + at;
    return n - at < h->chunk ? n - at : h->chunk;
}

/* Where this rank reads the vector from: the root its sendbuf, the others their recvbuf. */
static const char *hier_bc_src(const hier_bc_t *h, size_t first)
{
    const coll_args_t *a = h->a;

    return (a->rank == a->root ? (const char *)a->sendbuf : (const char *)a->recvbuf) +
           first * h->esize;
}

/* As holder of piece s, its chunk c, there once `got` is done: to the next node's holder. */
static chorus_status_t hier_bc_forward(const hier_bc_t *h, int s, size_t c, size_t first,
                                       size_t elems, long got)
{
    int nn = hier_bc_next_node(h, h->node_id);

    if (nn < 0)
        return CHORUS_OK;
    return coll_sched_send(h->sched, hier_bc_holder(h->l, nn, s),
                           hier_bc_tag(h, HIER_BC_CHAIN, s, c), hier_bc_src(h, first),
                           elems * h->esize, &got, 1) < 0 ? CHORUS_ERR_NO_MEMORY : CHORUS_OK;
}

/* Chunk c of every piece on the root's node: the root broadcasts it, its holder passes it on. */
static chorus_status_t hier_bc_root_node(hier_bc_t *h, size_t c)
{
    const coll_args_t *a = h->a;
    chorus_status_t status = CHORUS_OK;

    for (int s = 0; s < h->lmax && status == CHORUS_OK; s++) {
        size_t first, elems = hier_bc_piece(h, s, c, &first);
        coll_node_call_t call = {.coll = COLL_BROADCAST, .send = hier_bc_src(h, first),
                                 .recv = (char *)a->recvbuf + first * h->esize,
                                 .count = elems, .root = h->l->local_index[a->root],
                                 .relay = s % h->local,
                                 .tag0 = hier_bc_tag(h, HIER_BC_NODE, s, c)};
        long spread;

        if (elems == 0)
            continue;
        spread = coll_node_stage(&h->node, &call, NULL, 0);
        if (spread == -2)
            return CHORUS_ERR_NO_MEMORY;
        /* The root has the piece already. */
        if (hier_bc_holder(h->l, h->node_id, s) == a->rank)
            status = hier_bc_forward(h, s, c, first, elems, a->rank == a->root ? -1 : spread);
    }
    return status;
}

/*
 * Chunk c of every piece on another node, in rounds of L pieces: each
 * holder receives its piece from the previous node's holder and passes it
 * on, and the round is spread over the node.
 */
static chorus_status_t hier_bc_other_node(hier_bc_t *h, size_t c)
{
    int me = h->node.group.me, prev = (h->node_id + h->l->nnodes - 1) % h->l->nnodes;

    for (int t = 0; t * h->local < h->lmax; t++) {
        int s = t * h->local + me;
        coll_node_call_t call = {.coll = COLL_ALLGATHER, .recv = h->a->recvbuf,
                                 .counts = h->counts, .displs = h->displs,
                                 .tag0 = hier_bc_tag(h, HIER_BC_NODE, t, c)};
        long got = -1;

        for (int j = 0; j < h->local; j++)
            h->counts[j] = hier_bc_piece(h, t * h->local + j, c, &h->displs[j]);
        call.send = (const char *)h->a->recvbuf + h->displs[me] * h->esize;
        if (h->counts[me] > 0) {
            got = coll_sched_recv(h->sched, hier_bc_holder(h->l, prev, s),
                                  hier_bc_tag(h, HIER_BC_CHAIN, s, c),
                                  (char *)h->a->recvbuf + h->displs[me] * h->esize,
                                  h->counts[me] * h->esize, NULL, 0);
            if (got < 0 || hier_bc_forward(h, s, c, h->displs[me], h->counts[me], got) !=
                               CHORUS_OK)
                return CHORUS_ERR_NO_MEMORY;
        }
        if (coll_node_stage(&h->node, &call, &got, 1) == -2)
            return CHORUS_ERR_NO_MEMORY;
    }
    return CHORUS_OK;
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

/*
 * Chunk by chunk over all pieces, rather than piece by piece, keeps every
 * piece's chain busy at once within the executor's window; and as a
 * transfer's two sides are both in chunk c and every rank runs through the
 * chunks (and the pieces or rounds in them) in the same order, nothing
 * waits for a step beyond a peer's window, and the node-local stages come
 * in the same order on every rank of a node.
 */
static chorus_status_t hier_broadcast_build(const coll_args_t *args,
                                            const coll_env_t *env, coll_sched_t *sched)
{
    hier_bc_t h = {.a = args, .l = env->layout, .sched = sched};
    chorus_status_t status = coll_check_blocks(args, "hier broadcast", 0, 0, &h.esize);

    if (status == CHORUS_OK)
        status = hier_bc_check(args, env);
    if (status != CHORUS_OK || args->count == 0)
        return status;
    h.lmax = h.l->local_max;
    h.rootnode = h.l->node_of[args->root];
    h.node_id = h.l->node_of[args->rank];
    h.local = topo_layout_node_size(h.l, h.node_id);
    /* Piece 0 is the largest; tags run over every (phase, piece or round, chunk). */
    h.chunk = coll_chunk_elems(args->chunk_bytes, h.esize,
                               coll_ring_block_count(args->count, h.lmax, 0),
                               (long)HIER_BC_PHASES * h.lmax);
    h.nchunks = coll_chunk_count(coll_ring_block_count(args->count, h.lmax, 0), h.chunk);
    h.counts = malloc(2 * (size_t)h.local * sizeof(*h.counts));
    if (h.counts == NULL)
        return CHORUS_ERR_NO_MEMORY;
    h.displs = h.counts + h.local;
    status = coll_node_init(&h.node, sched, args, env, h.chunk);
    for (size_t c = 0; c < h.nchunks && status == CHORUS_OK; c++)
        status = h.node_id == h.rootnode ? hier_bc_root_node(&h, c) : hier_bc_other_node(&h, c);
    free(h.counts);
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
