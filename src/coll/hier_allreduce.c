/*
 * Hierarchical allreduce, for ranks spread over nodes. The vector is cut
 * into S shards, S being the rank count of the fullest node; on node n,
 * shard s belongs to the rank at local position s mod L(n), L(n) being the
 * node's rank count (on a node with fewer ranks, a rank owns several). The
 * shards are taken in rounds of L(n), round t holding shards t L(n) ..
 * t L(n) + L(n) - 1, one per local rank.
 *
 * 1. Node-local reduce-scatter, one per round: each shard reduced over the
 *    node into its owner's recvbuf.
 * 2. For each shard, a ring allreduce among its owners, one per node, in
 *    node order: every local rank carries its share across the network, and
 *    each node sends 2 (N-1)/N of the vector for N nodes instead of the
 *    2 (p-1)/p a flat ring sends through one node link.
 * 3. Node-local allgather, one per round: each owner's shard to the rest
 *    of its node.
 *
 * The node-local stages run on the node team when a collective transport
 * serves the node, else as transfers between the node's ranks (node_stage.h).
 * They reduce AVG as SUM; the ring divides once by the communicator's size.
 * The vector is built in segments (SEG_CHUNKS chunks per shard and node)
 * so that the stages pipeline: while the network carries one segment, the
 * node reduces the next or spreads the previous one. Every rank ends with
 * the same bits, as with the ring: each shard is reduced in one order (over
 * the node, then the ring) and then copied.
 */
#include "coll/coll.h"

#include <stdlib.h>

#include "coll/node_stage.h"
#include "coll/ring.h"

/* One segment of the vector while it is built. */
typedef struct {
    size_t base;            /* its first element */
    size_t elems;
    uint32_t tag_base;      /* its first tag */
    long *reduced;          /* [rounds]: this rank's stage 1 of the round is over */
    long *done;             /* [rounds]: that, and its shard of the round is final */
} hier_ar_seg_t;

typedef struct {
    const coll_args_t *args;
    const topo_layout_t *l;
    coll_sched_t *sched;
    coll_node_t node;
    size_t esize;
    size_t chunk;           /* elements per chunk of every stage */
    size_t seg_elems;       /* elements per segment (the last one may be shorter) */
    size_t nchunks;         /* chunks of a segment's largest shard: the local stages' tag stride */
    uint32_t seg_tags;      /* tags of one segment */
    int pos;                /* this rank's position on its node */
    int local;              /* ranks on its node */
    int shards;
    int rounds;             /* of local shards each */
    size_t *counts;         /* [local]: one round's shards, as node-local blocks */
    size_t *displs;
    int *ring;              /* the owners of one shard, by node */
    uint32_t ring_tag0;
    uint32_t ring_stride;   /* tags of one shard's ring */
    hier_ar_seg_t seg[2];   /* the segment whose network stage runs, and the next */
} hier_ar_t;

static size_t shard_count(const hier_ar_t *h, const hier_ar_seg_t *g, int s)
{
    return s < h->shards ? coll_ring_block_count(g->elems, h->shards, s) : 0;
}

/* First element of shard s (the segment's end for a shard past the last). */
static size_t shard_first(const hier_ar_t *h, const hier_ar_seg_t *g, int s)
{
    return g->base + coll_ring_block_offset(g->elems, h->shards, s < h->shards ? s : h->shards);
}

static int owner_on(const hier_ar_t *h, int node, int s)
{
    return topo_layout_rank(h->l, node, s % topo_layout_node_size(h->l, node));
}

/* The shards of round t as node-local blocks: counts and displs. */
static void round_blocks(hier_ar_t *h, const hier_ar_seg_t *g, int t)
{
    for (int j = 0; j < h->local; j++) {
        h->counts[j] = shard_count(h, g, t * h->local + j);
        h->displs[j] = shard_first(h, g, t * h->local + j);
    }
}

/* Stage 1 of segment g: every round's shards reduced over the node into their owners. */
static chorus_status_t stage1(hier_ar_t *h, hier_ar_seg_t *g)
{
    for (int t = 0; t < h->rounds; t++) {
        coll_node_call_t call = {.coll = COLL_REDUCE_SCATTER, .send = h->args->sendbuf,
                                 .counts = h->counts, .displs = h->displs,
                                 .tag0 = g->tag_base + (uint32_t)((size_t)t * h->nchunks)};

        round_blocks(h, g, t);
        call.recv = (char *)h->args->recvbuf + h->displs[h->pos] * h->esize;
        g->reduced[t] = coll_node_stage(&h->node, &call, NULL, 0);
        if (g->reduced[t] == -2)
            return CHORUS_ERR_NO_MEMORY;
    }
    return CHORUS_OK;
}

/* AVG on one node: the owner divides its shard (a ring among nodes divides otherwise). */
static long finalize_alone(hier_ar_t *h, hier_ar_seg_t *g, int t, size_t n)
{
    char *shard = (char *)h->args->recvbuf + shard_first(h, g, t * h->local + h->pos) * h->esize;

    if (h->args->op != CHORUS_AVG || h->l->nnodes > 1)
        return g->reduced[t];
    return coll_sched_finalize_op(h->sched, shard, n * h->esize, &g->reduced[t], 1);
}

/* Stage 2 of segment g for the shard this rank owns in each round; done[t] is its final value. */
static chorus_status_t stage2(hier_ar_t *h, hier_ar_seg_t *g)
{
    for (int t = 0; t < h->rounds; t++) {
        int s = t * h->local + h->pos;
        coll_ring_part_t part = {
            .group = {.size = h->l->nnodes, .me = h->l->node_of[h->args->rank],
                      .ranks = h->ring},
            .count = shard_count(h, g, s), .chunk = h->chunk, .after = g->reduced[t],
            .tag0 = g->tag_base + h->ring_tag0 + (uint32_t)s * h->ring_stride,
        };
        long first = (long)h->sched->nsteps;
        chorus_status_t status;

        g->done[t] = g->reduced[t];
        if (part.count == 0)
            continue;
        for (int m = 0; m < h->l->nnodes; m++)
            h->ring[m] = owner_on(h, m, s);
        part.send = part.recv = (char *)h->args->recvbuf + shard_first(h, g, s) * h->esize;
        status = coll_ring_allreduce_part(h->sched, &part, h->args->op, h->esize);
        if (status != CHORUS_OK)
            return status;
        g->done[t] = (size_t)first < h->sched->nsteps ? coll_sched_join_since(h->sched, first)
                                                      : finalize_alone(h, g, t, part.count);
        if (g->done[t] == -2)
            return CHORUS_ERR_NO_MEMORY;
    }
    return CHORUS_OK;
}

/*
 * Stage 3 of segment g: each round's shards to the rest of the node. It
 * writes the shards this rank did not own, which its stage 1 read when in
 * place: done[t] waits for that too.
 */
static chorus_status_t stage3(hier_ar_t *h, hier_ar_seg_t *g)
{
    uint32_t tag0 = g->tag_base + (uint32_t)((size_t)h->shards * h->nchunks);

    for (int t = 0; t < h->rounds; t++) {
        coll_node_call_t call = {.coll = COLL_ALLGATHER, .recv = h->args->recvbuf,
                                 .counts = h->counts, .displs = h->displs,
                                 .tag0 = tag0 + (uint32_t)((size_t)t * h->nchunks)};
        round_blocks(h, g, t);
        call.send = (char *)h->args->recvbuf + h->displs[h->pos] * h->esize;
        if (coll_node_stage(&h->node, &call, &g->done[t], 1) == -2)
            return CHORUS_ERR_NO_MEMORY;
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

static chorus_status_t hier_ar_setup(hier_ar_t *h, const coll_env_t *env)
{
    const coll_args_t *a = h->args;
    int node = h->l->node_of[a->rank];
    size_t tags, nseg;

    h->pos = h->l->local_index[a->rank];
    h->local = topo_layout_node_size(h->l, node);
    h->rounds = (h->shards + h->local - 1) / h->local;
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
    h->counts = malloc(2 * (size_t)h->local * sizeof(*h->counts));
    h->ring = malloc((size_t)h->l->nnodes * sizeof(*h->ring));
    for (int i = 0; i < 2; i++)
        h->seg[i].reduced = malloc(2 * (size_t)h->rounds * sizeof(long));
    if (h->counts == NULL || h->ring == NULL || h->seg[0].reduced == NULL ||
        h->seg[1].reduced == NULL)
        return CHORUS_ERR_NO_MEMORY;
    h->displs = h->counts + h->local;
    for (int i = 0; i < 2; i++)
        h->seg[i].done = h->seg[i].reduced + h->rounds;
    return coll_node_init(&h->node, h->sched, a, env, h->chunk);
}

/* Segment k: where it lies and its tags. */
static void hier_ar_seg_at(hier_ar_t *h, hier_ar_seg_t *g, size_t k)
{
    size_t left;

    g->base = k * h->seg_elems;
    left = h->args->count - g->base;
    g->elems = left < h->seg_elems ? left : h->seg_elems;
    g->tag_base = (uint32_t)(k * h->seg_tags);
}

/*
 * Stage 1 of segment k + 1 is appended before stage 3 of segment k: team
 * calls run in the order they are appended, and so the node reduces the
 * next segment while the network still carries this one.
 */
static chorus_status_t hier_ar_segments(hier_ar_t *h)
{
    size_t nseg = (h->args->count + h->seg_elems - 1) / h->seg_elems;
    chorus_status_t status;

    hier_ar_seg_at(h, &h->seg[0], 0);
    status = stage1(h, &h->seg[0]);
    for (size_t k = 0; k < nseg && status == CHORUS_OK; k++) {
        hier_ar_seg_t *cur = &h->seg[k % 2], *next = &h->seg[(k + 1) % 2];

        status = stage2(h, cur);
        if (status == CHORUS_OK && k + 1 < nseg) {
            hier_ar_seg_at(h, next, k + 1);
            status = stage1(h, next);
        }
        if (status == CHORUS_OK)
            status = stage3(h, cur);
    }
    return status;
}

static chorus_status_t hier_allreduce_build(const coll_args_t *args,
                                            const coll_env_t *env, coll_sched_t *sched)
{
    hier_ar_t h = {.args = args, .l = env->layout, .sched = sched};
    chorus_status_t status = coll_check_blocks(args, "hier allreduce", 1, 0, &h.esize);

    if (status == CHORUS_OK)
        status = coll_check_layout(args, env, "hier allreduce", 1);
    if (status != CHORUS_OK || args->count == 0)
        return status;
    h.shards = h.l->local_max;
    status = hier_ar_setup(&h, env);
    if (status == CHORUS_OK)
        status = hier_ar_segments(&h);
    free(h.counts);
    free(h.ring);
    free(h.seg[0].reduced);
    free(h.seg[1].reduced);
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
