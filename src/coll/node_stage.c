/*
 * Node-local stages: one step on the node team, or the same collective as
 * transfers through the port (see node_stage.h).
 */
#include "coll/node_stage.h"

#include <string.h>

#include "coll/ring.h"
#include "util/log.h"

/* Scratch blocks start small, so that a small call allocates little, and double up to a cap. */
#define NODE_ARENA_FIRST 4096
#define NODE_ARENA_CAP ((size_t)1 << 20)
#define NODE_ARENA_ALIGN 64

chorus_status_t coll_node_init(coll_node_t *node, coll_sched_t *sched, const coll_args_t *args,
                               const coll_env_t *env, size_t chunk)
{
    const topo_layout_t *l = env->layout;
    int n = l->node_of[args->rank];
    coll_team_t *team = env->node_team;

    memset(node, 0, sizeof(*node));
    node->sched = sched;
    node->group = (coll_group_t){.size = topo_layout_node_size(l, n),
                                 .me = l->local_index[args->rank],
                                 .ranks = &l->by_node[l->node_first[n]]};
    node->dtype = args->dtype;
    node->op = args->op;
    node->esize = chorus_dtype_size(args->dtype);
    node->chunk = chunk > 0 ? chunk : 1;
    node->chunk_bytes = args->chunk_bytes;
    node->mem = args->mem;
    node->arena_next = NODE_ARENA_FIRST;
    if (team == NULL || team->team == NULL || node->group.size < 2)
        return CHORUS_OK;
    if (team->desc.size != node->group.size || team->me != node->group.me) {
        chorus_error("rank %d: its node team has %d members (position %d), its node in the "
                     "layout %d ranks (position %d)", args->rank, team->desc.size, team->me,
                     node->group.size, node->group.me);
        return CHORUS_ERR_INTERNAL;
    }
    node->team = team;
    return CHORUS_OK;
}

void *coll_node_alloc(coll_node_t *node, size_t bytes)
{
    size_t need = (bytes + NODE_ARENA_ALIGN - 1) / NODE_ARENA_ALIGN * NODE_ARENA_ALIGN;
    char *at;

    if (need == 0)
        need = NODE_ARENA_ALIGN;
    if (need > node->arena_left) {
        size_t size = node->arena_next > need ? node->arena_next : need;

        node->arena = coll_sched_alloc(node->sched, size);
        node->arena_left = node->arena != NULL ? size : 0;
        if (node->arena == NULL)
            return NULL;
        if (node->arena_next < NODE_ARENA_CAP)
            node->arena_next *= 2;
    }
    at = node->arena;
    node->arena += need;
    node->arena_left -= need;
    return at;
}

/* ---- helpers ------------------------------------------------------------------ */

/* Chunk k of a block of n elements: its first element and length; 0 when past the end. */
static int node_piece(const coll_node_t *node, size_t n, size_t k, size_t *off_p,
                      size_t *len_p)
{
    size_t off = k * node->chunk;

    if (off >= n)
        return 0;
    *off_p = off;
    *len_p = n - off < node->chunk ? n - off : node->chunk;
    return 1;
}

/* Elements of the largest block (allgather, reduce_scatter) or the vector (broadcast). */
static size_t node_most(const coll_node_t *node, const coll_node_call_t *c)
{
    size_t most = 0;

    if (c->coll == COLL_BROADCAST)
        return c->count;
    for (int j = 0; j < node->group.size; j++)
        most = c->counts[j] > most ? c->counts[j] : most;
    return most;
}

/* The end of a stage through the port: its steps, or what it waited for when it had none. */
static long node_joined(const coll_node_t *node, long first, long after)
{
    if ((size_t)first == node->sched->nsteps)
        return after;
    return coll_sched_join_since(node->sched, first);
}

/* ---- on the team ------------------------------------------------------------- */

/* Whether some variant of the team's transport runs coll (its v-form when vform). */
static int node_team_runs(const coll_team_t *team, coll_type_t coll, int vform)
{
    for (int v = 0; v < team->ops->nvariants; v++) {
        if (tl_coll_variant_runs(team->ops, v, coll, team->desc.flags, vform))
            return 1;
    }
    return 0;
}

/* Blocks of one length that follow each other in member order: the plain form of the call. */
static int node_blocks_plain(const coll_node_t *node, const coll_node_call_t *c)
{
    for (int j = 1; j < node->group.size; j++) {
        if (c->counts[j] != c->counts[0] || c->displs[j] != c->displs[0] + j * c->counts[0])
            return 0;
    }
    return 1;
}

/*
 * The stage as one team call. Team collectives divide AVG by the team's
 * size; the node's share of a larger reduction is summed instead, and the
 * builder divides once by the communicator's size.
 */
static long node_team_stage(coll_node_t *node, const coll_node_call_t *c, int plain, long after)
{
    int n = node->group.size;
    coll_args_t a = {.coll = c->coll, .sendbuf = c->send, .recvbuf = c->recv,
                     .count = c->count, .dtype = node->dtype,
                     .op = node->op == CHORUS_AVG ? CHORUS_SUM : node->op, .root = c->root,
                     .rank = node->group.me, .size = n, .chunk_bytes = node->chunk_bytes,
                     .mem = node->mem};
    long idx;

    if (c->coll != COLL_BROADCAST && plain) {
        a.count = c->counts[0];
        if (c->coll == COLL_ALLGATHER)
            a.recvbuf = (char *)c->recv + c->displs[0] * node->esize;
        else
            a.sendbuf = (const char *)c->send + c->displs[0] * node->esize;
    } else if (c->coll != COLL_BROADCAST) {
        /* The team reads the arrays when the call runs: they live with the schedule. */
        size_t *arrays = coll_node_alloc(node, 2 * (size_t)n * sizeof(*arrays));

        if (arrays == NULL)
            return -2;
        memcpy(arrays, c->counts, (size_t)n * sizeof(*arrays));
        memcpy(arrays + n, c->displs, (size_t)n * sizeof(*arrays));
        a.count = 0;
        a.counts = arrays;
        a.displs = arrays + n;
    }
    idx = coll_sched_team(node->sched, node->team, &a, &after, 1);
    return idx < 0 ? -2 : idx;
}

/* ---- through the port ---------------------------------------------------------- */

/* Each member's block to every other member, chunk by chunk. */
static long node_port_allgather(coll_node_t *node, const coll_node_call_t *c, long after)
{
    const coll_group_t *g = &node->group;
    size_t es = node->esize, mine = c->counts[g->me], most = node_most(node, c), off, len;
    char *recv = c->recv, *own = recv + c->displs[g->me] * es;
    const char *send = c->send;
    long first = (long)node->sched->nsteps;

    if (mine > 0 && own != send && coll_sched_copy(node->sched, own, send, mine * es, &after,
                                                   1) < 0)
        return -2;
    for (size_t k = 0; k * node->chunk < most; k++) {
        for (int j = 0; j < g->size; j++) {
            if (j == g->me)
                continue;
            if (node_piece(node, mine, k, &off, &len) &&
                coll_sched_send(node->sched, g->ranks[j], c->tag0 + (uint32_t)k,
                                send + off * es, len * es, &after, 1) < 0)
                return -2;
            if (node_piece(node, c->counts[j], k, &off, &len) &&
                coll_sched_recv(node->sched, g->ranks[j], c->tag0 + (uint32_t)k,
                                recv + (c->displs[j] + off) * es, len * es, &after, 1) < 0)
                return -2;
        }
    }
    return node_joined(node, first, after);
}

/*
 * Chunk k of this member's block: every other member's part received into
 * slots and reduced into recv, this member's own part first, then the
 * others by position.
 */
static long node_port_fold(coll_node_t *node, const coll_node_call_t *c, char *slots,
                           size_t k, long after)
{
    const coll_group_t *g = &node->group;
    size_t es = node->esize, mine = c->counts[g->me], off, len;
    const char *own = (const char *)c->send + c->displs[g->me] * es;
    char *acc = c->recv;
    long prev = -1;

    if (!node_piece(node, mine, k, &off, &len))
        return 0;
    if (g->size == 1)
        return coll_sched_copy(node->sched, acc + off * es, own + off * es, len * es, &after,
                               1) < 0 ? -2 : 0;
    for (int j = 0, i = 0; j < g->size; j++) {
        char *slot = slots + ((size_t)i * mine + off) * es;
        long deps[3];

        if (j == g->me)
            continue;
        deps[0] = coll_sched_recv(node->sched, g->ranks[j], c->tag0 + (uint32_t)k, slot,
                                  len * es, &after, 1);
        deps[1] = prev;
        deps[2] = after;
        if (deps[0] < 0)
            return -2;
        prev = coll_sched_reduce(node->sched, acc + off * es,
                                 i == 0 ? own + off * es : acc + off * es, slot, len * es,
                                 deps, 3);
        if (prev < 0)
            return -2;
        i++;
    }
    return 0;
}

static long node_port_reduce_scatter(coll_node_t *node, const coll_node_call_t *c, long after)
{
    const coll_group_t *g = &node->group;
    size_t es = node->esize, mine = c->counts[g->me], most = node_most(node, c), off, len;
    const char *send = c->send;
    char *slots = NULL;
    long first = (long)node->sched->nsteps;

    if (g->size > 1 && mine > 0 &&
        (slots = coll_node_alloc(node, (size_t)(g->size - 1) * mine * es)) == NULL)
        return -2;
    for (size_t k = 0; k * node->chunk < most; k++) {
        for (int j = 0; j < g->size; j++) {
            if (j != g->me && node_piece(node, c->counts[j], k, &off, &len) &&
                coll_sched_send(node->sched, g->ranks[j], c->tag0 + (uint32_t)k,
                                send + (c->displs[j] + off) * es, len * es, &after, 1) < 0)
                return -2;
        }
        if (node_port_fold(node, c, slots, k, after) < 0)
            return -2;
    }
    return node_joined(node, first, after);
}

/* Chunk k of a broadcast: root to relay, relay to the others (root to all when it relays). */
static long node_port_bcast_chunk(coll_node_t *node, const coll_node_call_t *c, size_t k,
                                  long after)
{
    const coll_group_t *g = &node->group;
    size_t es = node->esize, off, len;
    const char *src = (const char *)(g->me == c->root ? c->send : c->recv);
    char *dst = c->recv;
    uint32_t tag = c->tag0 + (uint32_t)k;
    long got = after;

    node_piece(node, c->count, k, &off, &len);
    src += off * es;
    dst += off * es;
    if (g->me == c->root && src != dst &&
        coll_sched_copy(node->sched, dst, src, len * es, &after, 1) < 0)
        return -2;
    if (g->me != c->root) {
        got = coll_sched_recv(node->sched, g->ranks[g->me == c->relay ? c->root : c->relay],
                              tag, dst, len * es, &after, 1);
        if (got < 0)
            return -2;
    }
    if (g->me == c->root && c->relay != c->root)
        return coll_sched_send(node->sched, g->ranks[c->relay], tag, src, len * es, &after,
                               1) < 0 ? -2 : 0;
    for (int j = 0; j < g->size && g->me == c->relay; j++) {
        if (j != g->me && j != c->root &&
            coll_sched_send(node->sched, g->ranks[j], tag, src, len * es, &got, 1) < 0)
            return -2;
    }
    return 0;
}

static long node_port_broadcast(coll_node_t *node, const coll_node_call_t *c, long after)
{
    long first = (long)node->sched->nsteps;

    for (size_t k = 0; k * node->chunk < c->count; k++) {
        if (node_port_bcast_chunk(node, c, k, after) < 0)
            return -2;
    }
    return node_joined(node, first, after);
}

long coll_node_stage(coll_node_t *node, const coll_node_call_t *call, const long *deps,
                     int ndeps)
{
    long after = coll_sched_join(node->sched, deps, ndeps > 0 ? (size_t)ndeps : 0);

    if (after == -2)
        return -2;
    if (node_most(node, call) == 0)
        return after;
    if (node->team != NULL) {
        int plain = call->coll == COLL_BROADCAST || node_blocks_plain(node, call);

        if (node_team_runs(node->team, call->coll, !plain))
            return node_team_stage(node, call, plain, after);
    }
    switch (call->coll) {
    case COLL_ALLGATHER:
        return node_port_allgather(node, call, after);
    case COLL_REDUCE_SCATTER:
        return node_port_reduce_scatter(node, call, after);
    case COLL_BROADCAST:
        return node_port_broadcast(node, call, after);
    default:
        chorus_error("no node-local stage of %s", coll_type_name(call->coll));
        return -2;
    }
}
