/*
 * Hierarchical reduce-scatter: each node sends each other node's blocks
 * across the network once, already reduced over the node.
 *
 * A block b whose rank lives on another node is reduced on my node by
 * red(n, b), the rank at local position (local index of b) mod L(n), L(n)
 * being the node's rank count, so that a node's outgoing partials are
 * spread over all its ranks as the senders on b's node are. The other
 * ranks of the node send their block b to that reducer, which reduces its
 * own block with theirs (by local position) and sends the node's partial
 * to b. Blocks of ranks on my node go straight to their owner. A rank
 * reduces its own block, those of its local peers (by position) and the
 * partials of the other nodes (by node number) into recvbuf, always in
 * that order, so the result does not depend on arrival order.
 *
 * A node link so carries (p - L(n)) blocks out of node n, where a flat ring
 * pushes p - 1 through one link. The schedule is appended chunk by chunk,
 * then block by block, the same walk on every rank, so the steps a peer
 * waits for sit within one (chunk, block) group of its own schedule and
 * never beyond the executor's window. Tags: b * nchunks + c for the local
 * stage, (p + b) * nchunks + c for the network stage.
 */
#include "coll/coll.h"

#include <stdlib.h>

#include "coll/ring.h"

typedef struct {
    const coll_args_t *a;
    const topo_layout_t *l;
    coll_sched_t *sched;
    size_t esize, block, chunk, nchunks;
    int node, local;        /* my node and its rank count */
    char *own_slots;        /* (local - 1) + (nnodes - 1) blocks: what my block receives */
    char *red_slots;        /* (local - 1) blocks per block I reduce for another node */
    int *red_index;         /* [size]: which of those blocks, or -1 */
} hier_rs_t;

static int hier_rs_reducer(const topo_layout_t *l, int node, int b)
{
    return topo_layout_rank(l, node, l->local_index[b] % topo_layout_node_size(l, node));
}

static uint32_t hier_rs_tag(const hier_rs_t *h, int net, int b, size_t c)
{
    return (uint32_t)(((size_t)(net ? h->a->size : 0) + (size_t)b) * h->nchunks + c);
}

static size_t hier_rs_bytes(const hier_rs_t *h, size_t c)
{
    size_t left = h->a->count - c * h->chunk;

    return (left < h->chunk ? left : h->chunk) * h->esize;
}

/* Chunk c of my sendbuf's block b. */
static const char *hier_rs_send_at(const hier_rs_t *h, int b, size_t c)
{
    return (const char *)h->a->sendbuf + (size_t)b * h->block + c * h->chunk * h->esize;
}

/*
 * Receive chunk c from peer into slot k of slots and reduce it into acc
 * (the first time: first op slot). *prev is the chain's last reduce.
 */
static chorus_status_t hier_rs_fold(const hier_rs_t *h, int peer, uint32_t tag, char *slots,
                                    int k, size_t c, const char *first, char *acc, long *prev)
{
    size_t off = c * h->chunk * h->esize, bytes = hier_rs_bytes(h, c);
    char *slot = slots + (size_t)k * h->block + off;
    long deps[2];

    deps[0] = coll_sched_recv(h->sched, peer, tag, slot, bytes, NULL, 0);
    deps[1] = *prev;
    if (deps[0] < 0)
        return CHORUS_ERR_NO_MEMORY;
    *prev = coll_sched_reduce(h->sched, acc, k == 0 ? first : acc, slot, bytes, deps, 2);
    return *prev < 0 ? CHORUS_ERR_NO_MEMORY : CHORUS_OK;
}

/* Chunk c of my own block: local peers' blocks, then each other node's partial. */
static chorus_status_t hier_rs_own(const hier_rs_t *h, size_t c)
{
    const topo_layout_t *l = h->l;
    int me = h->a->rank, k = 0;
    char *acc = (char *)h->a->recvbuf + c * h->chunk * h->esize;
    const char *own = hier_rs_send_at(h, me, c);
    chorus_status_t status = CHORUS_OK;
    long prev = -1;

    for (int i = 0; i < h->local && status == CHORUS_OK; i++) {
        int peer = topo_layout_rank(l, h->node, i);

        if (peer != me)
            status = hier_rs_fold(h, peer, hier_rs_tag(h, 0, me, c), h->own_slots, k++, c,
                                  own, acc, &prev);
    }
    for (int m = 0; m < l->nnodes && status == CHORUS_OK; m++) {
        if (m != h->node)
            status = hier_rs_fold(h, hier_rs_reducer(l, m, me), hier_rs_tag(h, 1, me, c),
                                  h->own_slots, k++, c, own, acc, &prev);
    }
    if (status != CHORUS_OK)
        return status;
    /* Alone in the job: nothing to reduce with (a no-op in place). */
    if (k == 0 && (prev = coll_sched_copy(h->sched, acc, own, hier_rs_bytes(h, c), NULL, 0)) < 0)
        return CHORUS_ERR_NO_MEMORY;
    if (h->a->op == CHORUS_AVG &&
        coll_sched_finalize_op(h->sched, acc, hier_rs_bytes(h, c), &prev, 1) < 0)
        return CHORUS_ERR_NO_MEMORY;
    return CHORUS_OK;
}

/* Chunk c of block b (on another node), which I reduce for my node and send to b. */
static chorus_status_t hier_rs_reduce(const hier_rs_t *h, int b, size_t c)
{
    int me = h->a->rank, k = 0;
    const char *own = hier_rs_send_at(h, b, c);
    char *slots, *acc;
    chorus_status_t status = CHORUS_OK;
    long prev = -1;

    if (h->local == 1)      /* alone on my node: my block is the node's partial */
        return coll_sched_send(h->sched, b, hier_rs_tag(h, 1, b, c), own, hier_rs_bytes(h, c),
                               NULL, 0) < 0 ? CHORUS_ERR_NO_MEMORY : CHORUS_OK;
    slots = h->red_slots + (size_t)h->red_index[b] * (size_t)(h->local - 1) * h->block;
    /* The first received chunk's slot accumulates the node's partial. */
    acc = slots + c * h->chunk * h->esize;
    for (int i = 0; i < h->local && status == CHORUS_OK; i++) {
        int peer = topo_layout_rank(h->l, h->node, i);

        if (peer != me)
            status = hier_rs_fold(h, peer, hier_rs_tag(h, 0, b, c), slots, k++, c, own, acc,
                                  &prev);
    }
    if (status == CHORUS_OK && coll_sched_send(h->sched, b, hier_rs_tag(h, 1, b, c), acc,
                                               hier_rs_bytes(h, c), &prev, 1) < 0)
        status = CHORUS_ERR_NO_MEMORY;
    return status;
}

/* My steps for chunk c of block b. */
static chorus_status_t hier_rs_group(const hier_rs_t *h, int b, size_t c)
{
    int to;

    if (b == h->a->rank)
        return hier_rs_own(h, c);
    if (h->red_index[b] >= 0)
        return hier_rs_reduce(h, b, c);
    /* To b itself on my node, else to the rank that reduces b here. */
    to = h->l->node_of[b] == h->node ? b : hier_rs_reducer(h->l, h->node, b);
    return coll_sched_send(h->sched, to, hier_rs_tag(h, 0, b, c), hier_rs_send_at(h, b, c),
                           hier_rs_bytes(h, c), NULL, 0) < 0 ? CHORUS_ERR_NO_MEMORY
                                                             : CHORUS_OK;
}

/* Which blocks I reduce, and scratch for them and for my own block. */
static chorus_status_t hier_rs_setup(hier_rs_t *h)
{
    const topo_layout_t *l = h->l;
    int me = h->a->rank, nred = 0;
    size_t own_slots = (size_t)(h->local - 1) + (size_t)(l->nnodes - 1), red_slots;

    h->red_index = malloc((size_t)h->a->size * sizeof(*h->red_index));
    if (h->red_index == NULL)
        return CHORUS_ERR_NO_MEMORY;
    for (int b = 0; b < h->a->size; b++) {
        int foreign = l->node_of[b] != h->node;

        h->red_index[b] = foreign && hier_rs_reducer(l, h->node, b) == me ? nred++ : -1;
    }
    red_slots = (size_t)nred * (size_t)(h->local - 1);
    if (own_slots > 0 && (h->own_slots = coll_sched_alloc(h->sched, own_slots * h->block)) == NULL)
        return CHORUS_ERR_NO_MEMORY;
    if (red_slots > 0 && (h->red_slots = coll_sched_alloc(h->sched, red_slots * h->block)) == NULL)
        return CHORUS_ERR_NO_MEMORY;
    return CHORUS_OK;
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
    h.node = h.l->node_of[args->rank];
    h.local = topo_layout_node_size(h.l, h.node);
    /* Two tag ranges (local, network) of size blocks each. */
    h.chunk = coll_chunk_elems(args->chunk_bytes, h.esize, args->count, 2L * args->size);
    h.nchunks = coll_chunk_count(args->count, h.chunk);
    status = hier_rs_setup(&h);
    for (size_t c = 0; c < h.nchunks && status == CHORUS_OK; c++)
        for (int b = 0; b < args->size && status == CHORUS_OK; b++)
            status = hier_rs_group(&h, b, c);
    free(h.red_index);
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
