/*
 * Communicators as views over a context: opening one over a group of the
 * context's ranks, splitting and duplicating, destroying, the queries.
 */
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "core/core_trace.h"
#include "core/refusal.h"
#include "core/stall.h"
#include "util/log.h"
#include "util/time.h"

/* ---- the port: a communicator's ranks and space over the context's lanes ---- */

static chorus__port_t *port_of(tl_port_t *port)
{
    return (chorus__port_t *)port;
}

static chorus_status_t port_send(tl_port_t *port, int peer, uint64_t tag, const void *buf,
                                 size_t len, tl_req_t *req)
{
    chorus__port_t *p = port_of(port);

    if (peer < 0 || peer >= p->comm->size)
        return CHORUS_ERR_INVALID_ARG;
    atomic_fetch_add_explicit(&p->sends, 1, memory_order_relaxed);
    return chorus__ctx_send(p->comm->ctx, p->comm->ranks[peer], p->space, tag, buf, len, req);
}

static chorus_status_t port_recv(tl_port_t *port, int peer, uint64_t tag, void *buf,
                                 size_t capacity, tl_req_t *req)
{
    chorus__port_t *p = port_of(port);

    if (peer < 0 || peer >= p->comm->size)
        return CHORUS_ERR_INVALID_ARG;
    atomic_fetch_add_explicit(&p->recvs, 1, memory_order_relaxed);
    return chorus__ctx_recv(p->comm->ctx, p->comm->ranks[peer], p->space, tag, buf, capacity,
                            req);
}

static void port_init(chorus__port_t *p, chorus_comm_t comm, uint32_t space)
{
    p->port.send_nb = port_send;
    p->port.recv_nb = port_recv;
    p->comm = comm;
    p->space = space;
}

/* ---- opening a communicator ---------------------------------------------- */

/* The communicator's own layout: the context's, restricted to its ranks in its order. */
static chorus_status_t comm_layout(chorus_comm_t comm)
{
    const topo_layout_t *world = comm->ctx->layout;
    int *node_of = malloc((size_t)comm->size * sizeof(*node_of));
    chorus_status_t status;
    int node;

    if (node_of == NULL)
        return CHORUS_ERR_NO_MEMORY;
    for (int r = 0; r < comm->size; r++)
        node_of[r] = world->node_of[comm->ranks[r]];
    status = topo_layout_from_nodes(node_of, comm->size, &comm->layout);
    free(node_of);
    if (status != CHORUS_OK)
        return status;
    node = comm->layout->node_of[comm->rank];
    comm->local_rank = comm->layout->local_index[comm->rank];
    comm->local_size = topo_layout_node_size(comm->layout, node);
    comm->node_members = malloc((size_t)comm->local_size * sizeof(*comm->node_members));
    if (comm->node_members == NULL)
        return CHORUS_ERR_NO_MEMORY;
    for (int i = 0; i < comm->local_size; i++)
        comm->node_members[i] = topo_layout_rank(comm->layout, node, i);
    return CHORUS_OK;
}

static void comm_free(chorus_comm_t comm)
{
    chorus__stall_destroy(comm->stall);
    chorus__refusal_destroy(comm->refusal);
    topo_layout_free(comm->layout);
    free(comm->node_members);
    free(comm->ranks);
    free(comm->rank_of);
    free(comm);
}

static void comm_register(chorus_comm_t comm)
{
    chorus__ctx_t *ctx = comm->ctx;

    pthread_mutex_lock(&ctx->lock);
    comm->next = ctx->comms;
    ctx->comms = comm;
    pthread_mutex_unlock(&ctx->lock);
}

static void comm_unregister(chorus_comm_t comm)
{
    chorus__ctx_t *ctx = comm->ctx;

    pthread_mutex_lock(&ctx->lock);
    for (chorus_comm_t *link = &ctx->comms; *link != NULL; link = &(*link)->next) {
        if (*link == comm) {
            *link = comm->next;
            break;
        }
    }
    pthread_mutex_unlock(&ctx->lock);
}

chorus_comm_t chorus__comm_of_space(chorus__ctx_t *ctx, uint32_t space)
{
    for (chorus_comm_t comm = ctx->comms; comm != NULL; comm = comm->next) {
        if (comm->space == space)
            return comm;
    }
    return NULL;
}

chorus_status_t chorus__comm_open(chorus__ctx_t *ctx, int *ranks, int size, uint32_t space,
                                  chorus_comm_t *comm_p)
{
    chorus_comm_t comm = calloc(1, sizeof(*comm));
    chorus_status_t status = CHORUS_ERR_NO_MEMORY;

    /* The communicator holds the context; failing here lets it go again. */
    pthread_mutex_lock(&ctx->lock);
    ctx->refs++;
    pthread_mutex_unlock(&ctx->lock);
    if (comm == NULL) {
        free(ranks);
        chorus__ctx_release(ctx);
        return status;
    }
    comm->ctx = ctx;
    comm->ranks = ranks;
    comm->size = size;
    comm->space = space;
    comm->rank = -1;
    atomic_store(&comm->inline_seq, CHORUS__NO_SEQ);
    atomic_store(&comm->learning, CHORUS__NO_SEQ);
    comm->call_memo.given.coll = COLL_TYPE_COUNT;
    comm->select_memo.coll = COLL_TYPE_COUNT;
    comm->rank_of = malloc((size_t)ctx->size * sizeof(*comm->rank_of));
    if (comm->rank_of == NULL)
        goto err;
    for (int r = 0; r < ctx->size; r++)
        comm->rank_of[r] = -1;
    for (int r = 0; r < size; r++) {
        comm->rank_of[ranks[r]] = r;
        if (ranks[r] == ctx->rank)
            comm->rank = r;
    }
    port_init(&comm->port, comm, space);
    port_init(&comm->setup_port, comm, space | CHORUS__SPACE_SETUP);
    if ((status = comm_layout(comm)) != CHORUS_OK ||
        (status = chorus__stall_create(comm)) != CHORUS_OK ||
        (status = chorus__refusal_create(comm)) != CHORUS_OK)
        goto err;
    /* Registered first: control messages of its space find it during the setup. */
    comm_register(comm);
    status = chorus__comm_setup(comm);
    if (status != CHORUS_OK) {
        comm_unregister(comm);
        chorus__comm_teardown(comm);
        goto err;
    }
    if (ctx->trace != NULL)
        chorus__trace_comm_ready(comm);
    *comm_p = comm;
    return CHORUS_OK;

err:
    comm_free(comm);
    chorus__ctx_release(ctx);
    return status;
}

/* ---- split and dup -------------------------------------------------------- */

/* What every rank of the parent says in a split. */
typedef struct {
    int64_t color;
    int64_t key;
    int64_t space;              /* a space free on this rank, reserved for this split;
                                   SPLIT_REFUSED: this rank refused its arguments */
} split_card_t;

#define SPLIT_REFUSED (-1)

typedef struct {
    int64_t key;
    int rank;
} split_member_t;

static int split_member_cmp(const void *a, const void *b)
{
    const split_member_t *x = a, *y = b;

    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

/* ---- spaces -------------------------------------------------------------- */

/* Whether space is taken on this rank: by a communicator, or reserved by a split (ctx->lock). */
static int space_taken(chorus__ctx_t *ctx, uint32_t space)
{
    if (chorus__comm_of_space(ctx, space) != NULL)
        return 1;
    for (int i = 0; i < ctx->nreserved; i++) {
        if (ctx->reserved[i] == space)
            return 1;
    }
    return 0;
}

/* Reserve the lowest space from `from` on that is not taken here; 0 when none is left. */
static uint32_t space_reserve(chorus__ctx_t *ctx, uint32_t from)
{
    uint32_t space = 0;

    pthread_mutex_lock(&ctx->lock);
    if (ctx->nreserved < CHORUS__RESERVED_MAX) {
        for (uint32_t s = from; s > 0 && s < CHORUS__SPACE_SETUP; s++) {
            if (!space_taken(ctx, s)) {
                space = s;
                ctx->reserved[ctx->nreserved++] = s;
                break;
            }
        }
    }
    pthread_mutex_unlock(&ctx->lock);
    return space;
}

static void space_release(chorus__ctx_t *ctx, uint32_t space)
{
    pthread_mutex_lock(&ctx->lock);
    for (int i = 0; i < ctx->nreserved; i++) {
        if (ctx->reserved[i] == space) {
            ctx->reserved[i] = ctx->reserved[--ctx->nreserved];
            break;
        }
    }
    pthread_mutex_unlock(&ctx->lock);
}

/* A blocking reduction of n int64 values over comm, numbered among its calls. */
static chorus_status_t split_reduce(chorus_comm_t comm, int64_t *vals, int n, chorus_op_t op)
{
    coll_args_t a = {.coll = COLL_ALLREDUCE, .sendbuf = vals, .recvbuf = vals, .count = (size_t)n,
                     .dtype = CHORUS_INT64, .op = op, .rank = comm->rank, .size = comm->size,
                     .chunk_bytes = comm->ctx->cfg.chunk_bytes};
    chorus_request_t req;
    chorus_status_t status = chorus__call(comm, &a, 1, &req);

    return status == CHORUS_OK && req != NULL ? chorus_request_free(req) : status;
}

/*
 * The new communicator's space, free on every rank of comm, also among the
 * splits other threads of a rank run at the same time: every rank proposes
 * one it reserved, all take the highest, and each says whether that one is
 * free here too; if some rank cannot take it, all try again above it. On
 * success *space_p stays reserved until the communicator holds it.
 * Members of different colors get the same number, but never exchange a
 * message in it.
 */
static chorus_status_t split_space(chorus_comm_t comm, const split_card_t *all,
                                   uint32_t mine, uint32_t *space_p)
{
    chorus__ctx_t *ctx = comm->ctx;
    int64_t agreed = 0;
    chorus_status_t status = CHORUS_OK;

    for (int r = 0; r < comm->size; r++)
        agreed = all[r].space > agreed ? all[r].space : agreed;
    for (int round = 0; status == CHORUS_OK; round++) {
        int64_t vote[2];
        int have;

        if (agreed <= 0) {
            chorus_error("rank %d: no free communicator space is left", comm->rank);
            status = CHORUS_ERR_NO_MEMORY;
            break;
        }
        if ((uint32_t)agreed != mine) {
            uint32_t got = space_reserve(ctx, (uint32_t)agreed);
            space_release(ctx, mine);
            mine = got;
        }
        have = mine == (uint32_t)agreed;
        /* Everyone could take it (min of 1/0), and the next proposal (max) otherwise. */
        vote[0] = have;
        vote[1] = have ? agreed : (int64_t)mine;
        status = split_reduce(comm, &vote[0], 1, CHORUS_MIN);
        if (status == CHORUS_OK && vote[0] == 1) {
            *space_p = mine;
            return CHORUS_OK;
        }
        if (status == CHORUS_OK)
            status = split_reduce(comm, &vote[1], 1, CHORUS_MAX);
        agreed = vote[1] > agreed ? vote[1] : agreed + 1;
        chorus_debug("rank %d: split: space taken somewhere, round %d tries %lld", comm->rank,
                     round + 1, (long long)agreed);
    }
    space_release(ctx, mine);
    return status;
}

static chorus_status_t split_members(chorus_comm_t comm, const split_card_t *all, int color,
                                     int **ranks_p, int *n_p)
{
    split_member_t *m = malloc((size_t)comm->size * sizeof(*m));
    int *ranks, n = 0;

    if (m == NULL)
        return CHORUS_ERR_NO_MEMORY;
    for (int r = 0; r < comm->size; r++) {
        if (all[r].color == color)
            m[n++] = (split_member_t){.key = all[r].key, .rank = r};
    }
    qsort(m, (size_t)n, sizeof(*m), split_member_cmp);
    ranks = malloc((size_t)n * sizeof(*ranks));
    if (ranks == NULL) {
        free(m);
        return CHORUS_ERR_NO_MEMORY;
    }
    for (int i = 0; i < n; i++)
        ranks[i] = comm->ranks[m[i].rank];
    free(m);
    *ranks_p = ranks;
    *n_p = n;
    return CHORUS_OK;
}

/* comm is not NULL: what else a split refuses, logged. */
static chorus_status_t split_check(const char *fn, int color, chorus_comm_t *newcomm_p)
{
    if (newcomm_p == NULL) {
        chorus_error("%s: invalid argument newcomm_p=NULL", fn);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (color < 0 && color != CHORUS_UNDEFINED) {
        chorus_error("%s: invalid argument color=%d: must be 0 or more, or CHORUS_UNDEFINED",
                     fn, color);
        return CHORUS_ERR_INVALID_ARG;
    }
    return CHORUS_OK;
}

/* The first rank whose card says it refused its arguments, or -1. */
static int split_refuser(chorus_comm_t comm, const split_card_t *all)
{
    for (int r = 0; r < comm->size; r++)
        if (all[r].space == SPLIT_REFUSED)
            return r;
    return -1;
}

/* chorus_comm_split, with fn naming the public call in messages. */
static chorus_status_t comm_split(const char *fn, chorus_comm_t comm, int color, int key,
                                  chorus_comm_t *newcomm_p)
{
    coll_args_t a = {.coll = COLL_ALLGATHER, .count = 3, .dtype = CHORUS_INT64,
                     .op = CHORUS_SUM};
    split_card_t mine, *all;
    chorus_request_t req;
    chorus_status_t status, refused;
    uint32_t space = 0;
    int *ranks, n, refuser;

    if (comm == NULL) {
        chorus_error("%s: invalid argument comm=NULL", fn);
        return CHORUS_ERR_INVALID_ARG;
    }
    if ((status = chorus__ctx_error(comm->ctx)) != CHORUS_OK)
        return status;
    /* Refused here: this rank still exchanges its card, so that every rank fails at once. */
    refused = split_check(fn, color, newcomm_p);
    all = malloc((size_t)comm->size * sizeof(*all));
    mine = (split_card_t){.color = color, .key = key,
                          .space = refused != CHORUS_OK ? (int64_t)SPLIT_REFUSED
                                                        : (int64_t)space_reserve(comm->ctx, 1)};
    if (all == NULL) {
        if (refused == CHORUS_OK)
            space_release(comm->ctx, (uint32_t)mine.space);
        return CHORUS_ERR_NO_MEMORY;
    }
    /* A collective of comm, numbered and ordered among its other calls. */
    a.sendbuf = &mine;
    a.recvbuf = all;
    a.rank = comm->rank;
    a.size = comm->size;
    a.chunk_bytes = comm->ctx->cfg.chunk_bytes;
    status = chorus__call(comm, &a, 1, &req);
    if (status == CHORUS_OK && req != NULL)
        status = chorus_request_free(req);
    refuser = status == CHORUS_OK ? split_refuser(comm, all) : -1;
    if (refuser >= 0) {
        if (refuser != comm->rank)
            chorus_error("rank %d: %s: rank %d refused its arguments (its log says which); "
                         "the split fails on every rank", comm->rank, fn, refuser);
        status = CHORUS_ERR_INVALID_ARG;
    }
    if (status == CHORUS_OK)
        status = split_space(comm, all, (uint32_t)mine.space, &space);
    else if (refused == CHORUS_OK)
        space_release(comm->ctx, (uint32_t)mine.space);
    if (status == CHORUS_OK && color != CHORUS_UNDEFINED)
        status = split_members(comm, all, color, &ranks, &n);
    free(all);
    if (status != CHORUS_OK || color == CHORUS_UNDEFINED) {
        if (status == CHORUS_OK) {
            space_release(comm->ctx, space);
            *newcomm_p = NULL;
        }
        return status;
    }
    status = chorus__comm_open(comm->ctx, ranks, n, space, newcomm_p);
    space_release(comm->ctx, space);
    if (status == CHORUS_OK && (*newcomm_p)->rank == 0)
        chorus_debug("rank %d: split color %d into a communicator of %d ranks (space %u)",
                     comm->rank, color, n, space);
    return status;
}

chorus_status_t chorus_comm_split(chorus_comm_t comm, int color, int key,
                                  chorus_comm_t *newcomm_p)
{
    return comm_split(__func__, comm, color, key, newcomm_p);
}

chorus_status_t chorus_comm_dup(chorus_comm_t comm, chorus_comm_t *newcomm_p)
{
    return comm_split(__func__, comm, 0, comm != NULL ? comm->rank : 0, newcomm_p);
}

/* ---- destroy, abort, queries ---------------------------------------------- */

/* Wait until comm has nothing outstanding or deadline passes; 1 when it has not. */
static int comm_wait_idle(chorus_comm_t comm, double deadline)
{
    chorus__ctx_t *ctx = comm->ctx;
    int busy;

    pthread_mutex_lock(&ctx->lock);
    while (atomic_load(&comm->outstanding) > 0 && chorus__now() < deadline) {
        struct timespec ts = chorus__timespec_in(CLOCK_MONOTONIC, 0.05);

        pthread_cond_timedwait(&ctx->cond, &ctx->lock, &ts);
    }
    busy = atomic_load(&comm->outstanding) > 0;
    pthread_mutex_unlock(&ctx->lock);
    return busy;
}

chorus_status_t chorus_comm_destroy(chorus_comm_t comm)
{
    chorus__ctx_t *ctx;
    chorus_status_t status = CHORUS_OK;

    if (comm == NULL) {
        chorus_error("chorus_comm_destroy: comm is NULL");
        return CHORUS_ERR_INVALID_ARG;
    }
    ctx = comm->ctx;
    if (comm_wait_idle(comm, chorus__now() + ctx->cfg.timeout_s)) {
        chorus_error("rank %d: destroying the communicator with %d operations still pending",
                     comm->rank, atomic_load(&comm->outstanding));
        status = CHORUS_ERR_TIMEOUT;
        /* Its calls must end before it goes: failing the context ends them at once. */
        chorus__ctx_fail(ctx, CHORUS_ERR_TIMEOUT);
        comm_wait_idle(comm, chorus__now() + ctx->cfg.timeout_s);
    }
    comm_unregister(comm);
    chorus__comm_teardown(comm);
    comm_free(comm);
    chorus__ctx_release(ctx);
    return status;
}

chorus_status_t chorus_comm_abort(chorus_comm_t comm)
{
    if (comm == NULL) {
        chorus_error("chorus_comm_abort: comm is NULL");
        return CHORUS_ERR_INVALID_ARG;
    }
    atomic_store(&comm->ctx->aborted, 1);
    chorus__ctx_fail(comm->ctx, CHORUS_ERR_ABORTED);
    return CHORUS_OK;
}

chorus_status_t chorus_comm_get_error(chorus_comm_t comm)
{
    if (comm == NULL) {
        chorus_error("chorus_comm_get_error: comm is NULL");
        return CHORUS_ERR_INVALID_ARG;
    }
    return chorus__ctx_error(comm->ctx);
}

int chorus_comm_rank(chorus_comm_t comm) { return comm ? comm->rank : -1; }
int chorus_comm_size(chorus_comm_t comm) { return comm ? comm->size : -1; }
int chorus_comm_local_rank(chorus_comm_t comm) { return comm ? comm->local_rank : -1; }
int chorus_comm_local_size(chorus_comm_t comm) { return comm ? comm->local_size : -1; }
int chorus_comm_node_count(chorus_comm_t comm) { return comm ? comm->layout->nnodes : -1; }

int chorus_comm_node(chorus_comm_t comm, int rank)
{
    if (comm == NULL || rank < 0 || rank >= comm->size)
        return -1;
    return comm->layout->node_of[rank];
}
