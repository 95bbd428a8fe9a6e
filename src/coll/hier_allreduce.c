/*
 * Hierarchical allreduce, for ranks spread over nodes. The vector is cut
 * into S shards, S being the rank count of the fullest node; on node n,
 * shard s belongs to the rank at local position s mod L(n), L(n) being the
 * node's rank count (on a node with fewer ranks, a rank owns several).
 *
 * 1. Node-local reduce-scatter: every rank sends each shard it does not own
 *    to the shard's owner on its node, which reduces them into recvbuf.
 * 2. For each shard, a ring allreduce among its owners, one per node, in
 *    node order: every local rank carries its share across the network, and
 *    each node sends 2 (N-1)/N of the vector for N nodes instead of the
 *    2 (p-1)/p a flat ring sends through one node link.
 * 3. Node-local allgather: each owner sends its shard's result to the other
 *    ranks of its node.
 *
 * The vector is built in segments (SEG_CHUNKS chunks per shard and node)
 * so that the stages pipeline: while the network carries one segment, the
 * node reduces the next. The node-local stages go over the transport. Every
 * rank ends with the same bits, as with the ring: each shard is reduced in
 * one order (local ranks by position, then the ring) and then copied.
 */
#include "coll/coll.h"

#include <stdlib.h>

#include "coll/ring.h"
#include "util/log.h"

typedef struct {
    const coll_args_t *args;
    const topo_layout_t *l;
    coll_sched_t *sched;
    size_t esize;
    size_t chunk;           /* elements per chunk of every stage */
    size_t seg_elems;       /* elements per segment (the last one may be shorter) */
    size_t base;            /* the segment being built: its first element */
    size_t seg;             /* and its elements */
    size_t nchunks;         /* chunks of a segment's largest shard: the local stages' tag stride */
    uint32_t tag_base;      /* the segment's first tag */
    uint32_t seg_tags;      /* tags of one segment */
    int node;               /* this rank's node */
    int pos;                /* its position there */
    int local;              /* ranks on its node */
    int shards;
    const char *send;
    char *recv;
    long *ready;            /* per shard: this rank's stage 1 is over (-1: nothing to wait for) */
    int *ring;              /* the owners of one shard, by node */
    uint32_t ring_tag0;
    uint32_t ring_stride;   /* tags of one shard's ring */
} hier_ar_t;

static size_t shard_count(const hier_ar_t *h, int s)
{
    return coll_ring_block_count(h->seg, h->shards, s);
}

static size_t shard_off(const hier_ar_t *h, int s)
{
    return (h->base + coll_ring_block_offset(h->seg, h->shards, s)) * h->esize;
}

static size_t chunk_bytes(const hier_ar_t *h, size_t n, size_t c)
{
    size_t left = n - c * h->chunk;
    return (left < h->chunk ? left : h->chunk) * h->esize;
}

static int owner_on(const hier_ar_t *h, int node, int s)
{
    return topo_layout_rank(h->l, node, s % topo_layout_node_size(h->l, node));
}

static int owns(const hier_ar_t *h, int s)
{
    return s % h->local == h->pos;
}

/* Owner's stage 1 of shard s: receive each local peer's shard and reduce, chunk by chunk. */
static chorus_status_t stage1_reduce(hier_ar_t *h, int s, long *last)
{
    size_t n = shard_count(h, s), off = shard_off(h, s), nc = coll_chunk_count(n, h->chunk);
    char *slots = NULL;

    if (h->local == 1) {
        /* Alone on its node: its own shard is the node's. */
        long idx = coll_sched_copy(h->sched, h->recv + off, h->send + off, n * h->esize,
                                   NULL, 0);
        for (size_t c = 0; c < nc; c++)
            last[c] = idx;
        return idx < 0 ? CHORUS_ERR_NO_MEMORY : CHORUS_OK;
    }
    slots = coll_sched_alloc(h->sched, (size_t)(h->local - 1) * n * h->esize);
    if (slots == NULL)
        return CHORUS_ERR_NO_MEMORY;
    for (size_t c = 0; c < nc; c++) {
        size_t o = c * h->chunk * h->esize, bytes = chunk_bytes(h, n, c);
        long prev = -1;

        for (int i = 0, k = 0; i < h->local; i++) {
            int peer = topo_layout_rank(h->l, h->node, i);
            char *buf = slots + (size_t)k * n * h->esize + o;
            long r;

            if (i == h->pos)
                continue;
            r = coll_sched_recv(h->sched, peer, h->tag_base + (uint32_t)(s * h->nchunks + c), buf,
                                bytes, NULL, 0);
            {
                long deps[2] = {r, prev};
                prev = r < 0 ? -1 : coll_sched_reduce(h->sched, h->recv + off + o,
                                                      k == 0 ? h->send + off + o
                                                             : h->recv + off + o,
                                                      buf, bytes, deps, 2);
            }
            if (prev < 0)
                return CHORUS_ERR_NO_MEMORY;
            k++;
        }
        last[c] = prev;
    }
    return CHORUS_OK;
}

/* Non-owner's stage 1 of shard s: send it to the shard's owner on this node. */
static chorus_status_t stage1_send(hier_ar_t *h, int s, long *last)
{
    size_t n = shard_count(h, s), off = shard_off(h, s), nc = coll_chunk_count(n, h->chunk);
    int owner = owner_on(h, h->node, s);

    for (size_t c = 0; c < nc; c++) {
        last[c] = coll_sched_send(h->sched, owner, h->tag_base + (uint32_t)(s * h->nchunks + c),
                                  h->send + off + c * h->chunk * h->esize,
                                  chunk_bytes(h, n, c), NULL, 0);
        if (last[c] < 0)
            return CHORUS_ERR_NO_MEMORY;
    }
    return CHORUS_OK;
}

static chorus_status_t stage1(hier_ar_t *h, long *last)
{
    for (int s = 0; s < h->shards; s++) {
        size_t nc = coll_chunk_count(shard_count(h, s), h->chunk);
        chorus_status_t status;

        h->ready[s] = -1;
        if (nc == 0)
            continue;
        status = owns(h, s) ? stage1_reduce(h, s, last) : stage1_send(h, s, last);
        if (status != CHORUS_OK)
            return status;
        h->ready[s] = coll_sched_join(h->sched, last, nc);
        if (h->ready[s] == -2)
            return CHORUS_ERR_NO_MEMORY;
    }
    return CHORUS_OK;
}

/* AVG on one node: the owner divides its shard (a ring among nodes divides otherwise). */
static long finalize_alone(hier_ar_t *h, int s)
{
    size_t n = shard_count(h, s);

    if (h->args->op != CHORUS_AVG || h->l->nnodes > 1)
        return h->ready[s];
    return coll_sched_finalize_op(h->sched, h->recv + shard_off(h, s), n * h->esize,
                                  &h->ready[s], 1);
}

/* Stage 2 for the shards this rank owns; ready[s] becomes the shard's final value. */
static chorus_status_t stage2(hier_ar_t *h)
{
    for (int s = 0; s < h->shards; s++) {
        coll_ring_part_t part = {
            .group = {.size = h->l->nnodes, .me = h->node, .ranks = h->ring},
            .count = shard_count(h, s), .chunk = h->chunk, .after = h->ready[s],
            .tag0 = h->tag_base + h->ring_tag0 + (uint32_t)s * h->ring_stride,
        };
        long first = (long)h->sched->nsteps;
        chorus_status_t status;

        if (!owns(h, s) || part.count == 0)
            continue;
        for (int m = 0; m < h->l->nnodes; m++)
            h->ring[m] = owner_on(h, m, s);
        part.send = part.recv = h->recv + shard_off(h, s);
        status = coll_ring_allreduce_part(h->sched, &part, h->args->op, h->esize);
        if (status != CHORUS_OK)
            return status;
        h->ready[s] = (size_t)first < h->sched->nsteps ? coll_sched_join_since(h->sched, first)
                                                       : finalize_alone(h, s);
        if (h->ready[s] == -2)
            return CHORUS_ERR_NO_MEMORY;
    }
    return CHORUS_OK;
}

/* Stage 3: owners send each shard's result to the rest of the node. */
static chorus_status_t stage3(hier_ar_t *h)
{
    uint32_t tag0 = h->tag_base + (uint32_t)((size_t)h->shards * h->nchunks);

    for (int s = 0; s < h->shards; s++) {
        size_t n = shard_count(h, s), off = shard_off(h, s);

        for (size_t c = 0; c * h->chunk < n; c++) {
            uint32_t tag = tag0 + (uint32_t)((size_t)s * h->nchunks + c);
            char *buf = h->recv + off + c * h->chunk * h->esize;

            for (int i = 0; i < h->local; i++) {
                int peer = topo_layout_rank(h->l, h->node, i);
                long idx;

                if (i == h->pos || (owns(h, s) ? 0 : peer != owner_on(h, h->node, s)))
                    continue;
                /* A non-owner overwrites its shard once its stage-1 send has read it. */
                idx = owns(h, s) ? coll_sched_send(h->sched, peer, tag, buf,
                                                   chunk_bytes(h, n, c), &h->ready[s], 1)
                                 : coll_sched_recv(h->sched, peer, tag, buf,
                                                   chunk_bytes(h, n, c), &h->ready[s], 1);
                if (idx < 0)
                    return CHORUS_ERR_NO_MEMORY;
            }
        }
    }
    return CHORUS_OK;
}

/* Tags of one segment of seg_elems elements with chunk: sets nchunks and the ring's. */
static size_t hier_ar_tags(hier_ar_t *h)
{
    size_t largest = coll_ring_block_count(h->seg_elems, h->shards, 0);

    h->nchunks = coll_chunk_count(largest, h->chunk);
    h->ring_tag0 = (uint32_t)(2 * (size_t)h->shards * h->nchunks);
    h->ring_stride = (uint32_t)coll_ring_allreduce_tags(largest, h->l->nnodes, h->chunk);
    return 2 * (size_t)h->shards * h->nchunks + (size_t)h->shards * h->ring_stride;
}

/*
 * Segments of SEG_CHUNKS chunks per shard and node pipeline the stages: the
 * network carries segment k while the node reduces segment k + 1. The chunk
 * doubles until every tag of every segment fits in 32 bits.
 */
#define SEG_CHUNKS 2

static chorus_status_t hier_ar_setup(hier_ar_t *h)
{
    const coll_args_t *a = h->args;
    size_t tags, nseg;

    h->node = h->l->node_of[a->rank];
    h->pos = h->l->local_index[a->rank];
    h->local = topo_layout_node_size(h->l, h->node);
    h->chunk = a->chunk_bytes / h->esize ? a->chunk_bytes / h->esize : 1;
    for (;;) {
        size_t span = h->chunk * (size_t)h->shards * (size_t)h->l->nnodes * SEG_CHUNKS;
        h->seg_elems = span < a->count ? span : a->count;
        tags = hier_ar_tags(h);
        nseg = (a->count + h->seg_elems - 1) / h->seg_elems;
        if (tags <= UINT32_MAX / nseg)
            break;
        h->chunk *= 2;
    }
    h->seg_tags = (uint32_t)tags;
    h->ready = malloc((size_t)h->shards * sizeof(*h->ready));
    h->ring = malloc((size_t)h->l->nnodes * sizeof(*h->ring));
    return h->ready != NULL && h->ring != NULL ? CHORUS_OK : CHORUS_ERR_NO_MEMORY;
}

static chorus_status_t hier_ar_segments(hier_ar_t *h, long *last)
{
    chorus_status_t status = CHORUS_OK;
    size_t k = 0;

    for (h->base = 0; h->base < h->args->count && status == CHORUS_OK; h->base += h->seg, k++) {
        size_t left = h->args->count - h->base;
        h->seg = left < h->seg_elems ? left : h->seg_elems;
        h->tag_base = (uint32_t)(k * h->seg_tags);
        status = stage1(h, last);
        if (status == CHORUS_OK)
            status = stage2(h);
        if (status == CHORUS_OK)
            status = stage3(h);
    }
    return status;
}

static chorus_status_t hier_allreduce_build(const coll_args_t *args,
                                            const coll_env_t *env, coll_sched_t *sched)
{
    hier_ar_t h = {.args = args, .l = env->layout, .sched = sched};
    long *last = NULL;
    chorus_status_t status = coll_check_blocks(args, "hier allreduce", 1, 0, &h.esize);

    if (status == CHORUS_OK)
        status = coll_check_layout(args, env, "hier allreduce", 1);
    if (status != CHORUS_OK || args->count == 0)
        return status;
    h.shards = h.l->local_max;
    h.send = args->sendbuf;
    h.recv = args->recvbuf;
    status = hier_ar_setup(&h);
    if (status == CHORUS_OK && (last = malloc(h.nchunks * sizeof(*last))) == NULL)
        status = CHORUS_ERR_NO_MEMORY;
    if (status == CHORUS_OK)
        status = hier_ar_segments(&h, last);
    free(last);
    free(h.ready);
    free(h.ring);
    return status;
}

/*
 * Node-local reduce-scatter into local_max shards, a ring among the nodes
 * per shard (a rank on the emptiest node runs local_max / local_min of
 * them, and each node link carries 2 (N-1)/N of the vector), node-local
 * allgather. The stages run in segments of 2 chunks per shard and node, so
 * the node's work hides behind the network's but for one segment. On the
 * node team the node-local stages are its reduce-scatter and allgather.
 */
static double hier_allreduce_price(const coll_env_t *env, size_t bytes)
{
    const tune_model_t *m = env->model;
    tune_shape_t s;
    double price, n = (double)bytes, L, G, shard, rings, seg, local, net, fill, latency;

    if (!coll_price_hier(env, &s, &price))
        return price;
    L = s.local_max;
    G = s.nnodes;
    shard = n / L;
    rings = (s.local_max + (s.local_min > 0 ? s.local_min : 1) - 1) /
            (s.local_min > 0 ? s.local_min : 1);
    seg = (m->chunk_bytes ? (double)m->chunk_bytes : n) * L * G * 2;
    local = 2.0 * (L - 1) * shard * m->beta + (L - 1) * shard * m->gamma;
    latency = 2.0 * (L - 1) * m->alpha;
    if (env->team_ops != NULL) {
        local = coll_price_team(env, COLL_REDUCE_SCATTER, n) +
                coll_price_team(env, COLL_ALLGATHER, n);
        latency = 0.0;
    }
    net = 2.0 * (G - 1) / G * n * m->net_beta + (G - 1) / G * shard * rings * m->gamma;
    fill = (local < net ? local : net) * (seg < n ? seg / n : 1.0);
    latency += 2.0 * (G - 1) * rings * m->net_alpha;
    return latency + (local > net ? local : net) + fill;
}

const coll_alg_t coll_hier_allreduce = {
    .name = "hier",
    .coll = COLL_ALLREDUCE,
    .build = hier_allreduce_build,
    .price = hier_allreduce_price,
};
