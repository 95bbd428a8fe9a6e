/*
 * sched_sim: an in-memory transport and a round-robin driver that runs the
 * schedules of every rank of one call inside one process (see sched_sim.h).
 */
#include "tests/unit/sched_sim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reduce/reduce.h"

/* Every algorithm tag is OR-ed with this, as the core does with the call's sequence number. */
#define SIM_TAG_BASE ((uint64_t)0x5eedu << 32)

/* A send that found no receive yet. */
typedef struct sim_msg {
    struct sim_msg *next;
    int src, dst;
    uint64_t tag;
    void *data;             /* eager: a private copy; rendezvous: the sender's buffer */
    size_t len;
    tl_req_t *sreq;         /* rendezvous: the send to complete on match */
} sim_msg_t;

typedef struct sim_task sim_task_t;

typedef struct {
    sched_sim_opts_t opts;
    int p;
    sim_msg_t *msgs;                    /* unmatched sends, oldest first */
    tl_req_t *recvs;                    /* unmatched receives, oldest first (via req->next) */
    tl_req_t *ready[SCHED_SIM_MAX_RANKS];   /* deferred: matched, waiting for progress */
    sim_task_t *team_ready[SCHED_SIM_MAX_RANKS];    /* deferred: team calls over, the same */
    long events;                        /* posts and completions: "somebody moved" */
    long bad_tags;
    sched_sim_stats_t stats;
} sim_world_t;

/* One rank's view of the in-memory network. */
typedef struct {
    tl_port_t port;
    sim_world_t *w;
    int rank;
} sim_port_t;

static uint64_t sim_hash(const void *buf, size_t len)
{
    const unsigned char *b = buf;
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/*
 * Sends record their buffer and its hash (peer < 0 marks a send): a real
 * transport may read the buffer at any time until the send completes.
 */
static void sim_mark_done(sim_world_t *w, tl_req_t *req)
{
    int hashed = !w->opts.eager || w->opts.deferred;

    if (hashed && req->peer < 0 && req->status == CHORUS_OK && req->capacity > 0 &&
        sim_hash(req->buf, req->capacity) != (uint64_t)req->offset)
        w->stats.send_buffer_changed++;
    req->done = 1;
}

static void sim_complete(sim_world_t *w, int owner, tl_req_t *req, chorus_status_t status)
{
    req->status = status;
    w->events++;
    if (w->opts.deferred) {
        req->next = w->ready[owner];
        w->ready[owner] = req;
    } else {
        sim_mark_done(w, req);
    }
}

static void sim_deliver(sim_world_t *w, int dst, tl_req_t *rreq, const void *data, size_t len)
{
    chorus_status_t status = CHORUS_OK;

    if (len != rreq->capacity)
        w->stats.size_mismatches++;
    if (len > rreq->capacity) {
        len = rreq->capacity;
        status = CHORUS_ERR_TRUNCATED;
    }
    memcpy(rreq->buf, data, len);
    rreq->length = len;
    sim_complete(w, dst, rreq, status);
}

static int sim_check_post(sim_world_t *w, int rank, int peer, size_t len, uint64_t tag,
                          tl_req_t *req)
{
    w->events++;
    if (len == 0)
        w->stats.zero_byte_posts++;
    /* The executor adds TL_TAG_FINAL to the last message between two ranks. */
    if (((tag & ~TL_TAG_FINAL) >> 32) != (SIM_TAG_BASE >> 32))
        w->bad_tags++;
    req->done = 0;
    req->status = CHORUS_OK;
    req->length = 0;
    if (peer < 0 || peer >= w->p || peer == rank)
        return CHORUS_ERR_INVALID_ARG;
    if (peer == w->opts.dead_rank)
        sim_complete(w, rank, req, CHORUS_ERR_PEER_FAILED);
    return peer == w->opts.dead_rank ? 1 : 0;
}

static chorus_status_t sim_send_nb(tl_port_t *port, int peer, uint64_t tag, const void *buf,
                                   size_t len, tl_req_t *req)
{
    sim_port_t *ctx = (sim_port_t *)port;
    sim_world_t *w = ctx->w;
    int rc = sim_check_post(w, ctx->rank, peer, len, tag, req);
    tl_req_t **pp;
    sim_msg_t *m, **mp;

    if (rc != 0)
        return rc < 0 ? rc : CHORUS_OK;
    req->peer = -1 - peer;
    req->buf = (void *)buf;
    req->capacity = len;
    if (!w->opts.eager || w->opts.deferred)
        req->offset = (size_t)sim_hash(buf, len);
    w->stats.messages++;
    w->stats.bytes += len;
    for (pp = &w->recvs; *pp != NULL; pp = &(*pp)->next) {
        tl_req_t *r = *pp;
        if (r->peer == ctx->rank && (int)r->offset == peer && r->tag == tag) {
            *pp = r->next;
            sim_deliver(w, peer, r, buf, len);
            sim_complete(w, ctx->rank, req, CHORUS_OK);
            return CHORUS_OK;
        }
    }
    m = calloc(1, sizeof(*m));
    if (m == NULL)
        return CHORUS_ERR_NO_MEMORY;
    *m = (sim_msg_t){.src = ctx->rank, .dst = peer, .tag = tag, .len = len};
    if (w->opts.eager) {
        m->data = malloc(len ? len : 1);
        if (m->data == NULL) {
            free(m);
            return CHORUS_ERR_NO_MEMORY;
        }
        memcpy(m->data, buf, len);
        sim_complete(w, ctx->rank, req, CHORUS_OK);
    } else {
        m->data = (void *)buf;
        m->sreq = req;
    }
    for (mp = &w->msgs; *mp != NULL; mp = &(*mp)->next)
        ;
    *mp = m;
    return CHORUS_OK;
}

static chorus_status_t sim_recv_nb(tl_port_t *port, int peer, uint64_t tag, void *buf,
                                   size_t capacity, tl_req_t *req)
{
    sim_port_t *ctx = (sim_port_t *)port;
    sim_world_t *w = ctx->w;
    int rc = sim_check_post(w, ctx->rank, peer, capacity, tag, req);
    tl_req_t **pp;

    if (rc != 0)
        return rc < 0 ? rc : CHORUS_OK;
    req->peer = peer;
    req->tag = tag;
    req->buf = buf;
    req->capacity = capacity;
    req->offset = (size_t)ctx->rank;     /* the receiving rank, for matching */
    for (sim_msg_t **mp = &w->msgs; *mp != NULL; mp = &(*mp)->next) {
        sim_msg_t *m = *mp;
        if (m->src == peer && m->dst == ctx->rank && m->tag == tag) {
            *mp = m->next;
            sim_deliver(w, ctx->rank, req, m->data, m->len);
            if (m->sreq != NULL)
                sim_complete(w, m->src, m->sreq, CHORUS_OK);
            else
                free(m->data);
            free(m);
            return CHORUS_OK;
        }
    }
    req->next = NULL;
    for (pp = &w->recvs; *pp != NULL; pp = &(*pp)->next)
        ;
    *pp = req;
    return CHORUS_OK;
}

/* ---- node teams: an in-memory collective transport ------------------------------ */

/* The team flag of the variant that runs the v-forms. */
#define SIM_TEAM_VFORMS 2u

/* One member of a node team: the team handle the builders get. */
typedef struct {
    sched_sim_teams_t *set;
    int node;
    int me;                     /* position in the team */
    sim_task_t **turns;         /* [nturns]: this member's call of each turn (NULL: freed) */
    size_t nturns, cap;
} sim_member_t;

/* A team call's life: over once computed; seen by its rank at once, or on a later progress. */
enum { SIM_TASK_NEW = 0, SIM_TASK_POSTED, SIM_TASK_OVER, SIM_TASK_SEEN };

struct sim_task {
    chorus__task_t head;
    sim_member_t *m;
    size_t turn;
    coll_args_t args;
    int state;
    sim_task_t *next;           /* on its rank's team_ready list */
};

struct sched_sim_teams {
    const topo_layout_t *l;
    sim_world_t *w;             /* NULL: built only, never run */
    uint32_t flags;
    size_t *serving;            /* [nnodes]: the turn each node runs next */
    sim_member_t member[SCHED_SIM_MAX_RANKS];
    coll_team_t team[SCHED_SIM_MAX_RANKS];
};

/* Whether member j's call agrees with member 0's; else a reason. */
static const char *sim_call_differs(const coll_args_t *a, const coll_args_t *b, int j, int n)
{
    int v = a->counts != NULL;

    if (b->rank != j || b->size != n)
        return "rank or size";
    if (b->coll != a->coll || b->dtype != a->dtype || chorus_dtype_size(a->dtype) == 0)
        return "collective or dtype";
    if (coll_type_reduces(a->coll) && (b->op != a->op || (unsigned)a->op >= CHORUS_OP_COUNT))
        return "op";
    if ((a->coll == COLL_BROADCAST || a->coll == COLL_REDUCE) &&
        (b->root != a->root || a->root < 0 || a->root >= n))
        return "root";
    if ((b->counts != NULL) != v || (b->displs != NULL) != v ||
        (v && a->coll != COLL_ALLGATHER && a->coll != COLL_REDUCE_SCATTER))
        return "form";
    if (!v && b->count != a->count)
        return "count";
    for (int k = 0; v && k < n; k++) {
        if (b->counts[k] != a->counts[k] || b->displs[k] != a->displs[k])
            return "blocks";
    }
    return NULL;
}

/* memcpy that accepts the NULL buffers of members with nothing to move. */
static void sim_copy(void *dst, const void *src, size_t bytes)
{
    if (bytes > 0)
        memcpy(dst, src, bytes);
}

/* dst = the reduction of src[0 .. n) (at byte offset off), in member order; AVG divided by n. */
static void sim_reduce_into(char *dst, sim_task_t **t, int n, size_t off, size_t elems)
{
    const coll_args_t *a = &t[0]->args;
    chorus__reduce_fn fn = chorus__reduce_kernel(a->dtype, a->op);
    size_t es = chorus_dtype_size(a->dtype);

    if (elems == 0)
        return;
    memcpy(dst, (const char *)t[0]->args.sendbuf + off, elems * es);
    for (int j = 1; j < n; j++)
        fn(dst, dst, (const char *)t[j]->args.sendbuf + off, elems);
    chorus__reduce_finalize(a->dtype, a->op, dst, elems, n);
}

/*
 * The reference of one call: every result is computed into tmp before any
 * is written, so that calls in place read their inputs intact. blocks: the
 * elements every member contributes (allgather) or gets (reduce_scatter).
 */
static void sim_team_compute(sim_task_t **t, int n, char *tmp)
{
    const coll_args_t *a = &t[0]->args;
    size_t es = chorus_dtype_size(a->dtype), bytes = a->count * es, at = 0;

    switch (a->coll) {
    case COLL_ALLREDUCE:
    case COLL_REDUCE:
        sim_reduce_into(tmp, t, n, 0, a->count);
        for (int j = 0; j < n; j++) {
            if (a->coll == COLL_ALLREDUCE || j == a->root)
                sim_copy(t[j]->args.recvbuf, tmp, bytes);
        }
        break;
    case COLL_BROADCAST:
        sim_copy(tmp, t[a->root]->args.sendbuf, bytes);
        for (int j = 0; j < n; j++)
            sim_copy(t[j]->args.recvbuf, tmp, bytes);
        break;
    case COLL_ALLGATHER:
        for (int j = 0; j < n; j++) {
            sim_copy(tmp + at, t[j]->args.sendbuf, coll_args_block(a, j) * es);
            at += coll_args_block(a, j) * es;
        }
        for (int i = 0; i < n; i++) {
            at = 0;
            for (int j = 0; j < n; j++) {
                sim_copy((char *)t[i]->args.recvbuf + coll_args_displ(a, j) * es, tmp + at,
                         coll_args_block(a, j) * es);
                at += coll_args_block(a, j) * es;
            }
        }
        break;
    case COLL_REDUCE_SCATTER:
        for (int j = 0; j < n; j++) {
            sim_reduce_into(tmp + at, t, n, coll_args_displ(a, j) * es, coll_args_block(a, j));
            at += coll_args_block(a, j) * es;
        }
        at = 0;
        for (int j = 0; j < n; j++) {
            sim_copy(t[j]->args.recvbuf, tmp + at, coll_args_block(a, j) * es);
            at += coll_args_block(a, j) * es;
        }
        break;
    case COLL_ALLTOALL:
        for (int i = 0; i < n; i++)
            sim_copy(tmp + (size_t)i * n * bytes, t[i]->args.sendbuf, (size_t)n * bytes);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++)
                sim_copy((char *)t[j]->args.recvbuf + (size_t)i * bytes,
                       tmp + ((size_t)i * n + (size_t)j) * bytes, bytes);
        break;
    default:
        break;      /* barrier: nothing moves */
    }
}

/* Bytes of scratch the reference of a call needs. */
static size_t sim_team_scratch(const coll_args_t *a, int n)
{
    size_t blocks = 0;

    for (int j = 0; j < n; j++)
        blocks += coll_args_block(a, j);
    blocks = blocks > a->count ? blocks : a->count;
    if (a->coll == COLL_ALLTOALL)
        blocks = a->count * (size_t)n * (size_t)n;
    return blocks * chorus_dtype_size(a->dtype) + 1;
}

/* The call of every member of a turn is in: run it, and complete each member's task. */
static void sim_team_run(sched_sim_teams_t *set, int node, sim_task_t **t, int n)
{
    sim_world_t *w = set->w;
    chorus_status_t status = CHORUS_OK;
    const char *why = NULL;
    char *tmp = NULL;

    for (int j = 0; j < n && why == NULL; j++) {
        why = sim_call_differs(&t[0]->args, &t[j]->args, j, n);
        if (why != NULL) {
            fprintf(stderr, "sched_sim: node %d turn %zu: member %d calls %s, member 0 %s: "
                    "their %s differ\n", node, t[0]->turn, j,
                    coll_type_name(t[j]->args.coll), coll_type_name(t[0]->args.coll), why);
            w->stats.team_mismatches++;
            status = CHORUS_ERR_INVALID_ARG;
        }
    }
    if (why == NULL && (tmp = malloc(sim_team_scratch(&t[0]->args, n))) == NULL)
        status = CHORUS_ERR_NO_MEMORY;
    if (status == CHORUS_OK)
        sim_team_compute(t, n, tmp);
    free(tmp);
    w->stats.team_calls++;
    for (int j = 0; j < n; j++) {
        int rank = topo_layout_rank(set->l, node, j);

        t[j]->head.status = status;
        t[j]->state = w->opts.deferred ? SIM_TASK_OVER : SIM_TASK_SEEN;
        w->events++;
        if (w->opts.deferred) {
            t[j]->next = w->team_ready[rank];
            w->team_ready[rank] = t[j];
        }
    }
}

/* Run the node's turns, in order, while every member's call of the next one is in. */
static void sim_team_advance(sched_sim_teams_t *set, int node)
{
    int n = topo_layout_node_size(set->l, node);
    sim_task_t *t[SCHED_SIM_MAX_RANKS];

    for (;;) {
        size_t turn = set->serving[node];

        for (int j = 0; j < n; j++) {
            sim_member_t *m = &set->member[topo_layout_rank(set->l, node, j)];

            t[j] = turn < m->nturns ? m->turns[turn] : NULL;
            if (t[j] == NULL || t[j]->state != SIM_TASK_POSTED)
                return;
        }
        set->serving[node]++;
        sim_team_run(set, node, t, n);
    }
}

static sim_task_t *sim_task_of(chorus__task_t *task)
{
    return (sim_task_t *)task;
}

static chorus_status_t sim_task_post(chorus__task_t *task)
{
    sim_task_t *t = sim_task_of(task);
    sched_sim_teams_t *set = t->m->set;

    t->state = SIM_TASK_POSTED;
    if (set->w == NULL)
        return CHORUS_ERR_INTERNAL;     /* built only: nothing runs its calls */
    set->w->events++;
    sim_team_advance(set, t->m->node);
    return CHORUS_OK;
}

static int sim_task_progress(chorus__task_t *task)
{
    return sim_task_of(task)->state == SIM_TASK_SEEN;
}

static void sim_task_finalize(chorus__task_t *task)
{
    sim_task_t *t = sim_task_of(task);

    t->m->turns[t->turn] = NULL;
    free(t);
}

static const chorus__task_ops_t sim_task_ops = {
    .name = "sim team",
    .post = sim_task_post,
    .progress = sim_task_progress,
    .finalize = sim_task_finalize,
};

#define SIM_TEAM_ALL ((1u << COLL_TYPE_COUNT) - 1)

static const tl_coll_variant_t sim_team_variants[] = {
    {.name = "sim_v", .colls = SIM_TEAM_ALL, .needs = SIM_TEAM_VFORMS, .vforms = 1},
    {.name = "sim", .colls = SIM_TEAM_ALL},
};

static chorus_status_t sim_task_create(tl_team_t *team, const coll_args_t *args, int variant,
                                       chorus__task_t **task_p)
{
    sim_member_t *m = (sim_member_t *)team;
    sim_task_t *t;

    if (args->counts != NULL && !sim_team_variants[variant].vforms) {
        fprintf(stderr, "sched_sim: a v-form of %s on variant %s, which has none\n",
                coll_type_name(args->coll), sim_team_variants[variant].name);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (m->nturns == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 64;
        sim_task_t **grown = realloc(m->turns, cap * sizeof(*grown));

        if (grown == NULL)
            return CHORUS_ERR_NO_MEMORY;
        m->turns = grown;
        m->cap = cap;
    }
    t = calloc(1, sizeof(*t));
    if (t == NULL)
        return CHORUS_ERR_NO_MEMORY;
    chorus__task_init(&t->head, &sim_task_ops, 0);
    t->m = m;
    t->turn = m->nturns;
    t->args = *args;
    m->turns[m->nturns++] = t;
    *task_p = &t->head;
    return CHORUS_OK;
}

static double sim_team_price(const tl_coll_ctx_t *ctx, const tl_team_desc_t *team, int variant,
                             coll_type_t coll, size_t bytes)
{
    (void)ctx;
    (void)team;
    (void)coll;
    return 1e-6 * (variant + 1) + (double)bytes * 1e-10;
}

static const tl_coll_ops_t sim_team_ops = {
    .name = "sim",
    .variants = sim_team_variants,
    .nvariants = sizeof(sim_team_variants) / sizeof(sim_team_variants[0]),
    .price = sim_team_price,
    .task_create = sim_task_create,
};

int sched_sim_teams_create(const topo_layout_t *layout, int teams, sched_sim_teams_t **teams_p)
{
    sched_sim_teams_t *set;

    if (layout == NULL || layout->size > SCHED_SIM_MAX_RANKS ||
        (teams != SCHED_SIM_TEAMS_VFORMS && teams != SCHED_SIM_TEAMS_PLAIN))
        return -1;
    set = calloc(1, sizeof(*set));
    if (set == NULL || (set->serving = calloc((size_t)layout->nnodes, sizeof(size_t))) == NULL) {
        free(set);
        return -1;
    }
    set->l = layout;
    set->flags = TL_TEAM_OK | (teams == SCHED_SIM_TEAMS_VFORMS ? SIM_TEAM_VFORMS : 0);
    for (int r = 0; r < layout->size; r++) {
        int node = layout->node_of[r];

        set->member[r] = (sim_member_t){.set = set, .node = node, .me = layout->local_index[r]};
        set->team[r] = (coll_team_t){
            .ops = &sim_team_ops, .team = (tl_team_t *)&set->member[r],
            .desc = {.size = topo_layout_node_size(layout, node), .flags = set->flags},
            .ranks = &layout->by_node[layout->node_first[node]], .me = layout->local_index[r],
        };
    }
    *teams_p = set;
    return 0;
}

void sched_sim_teams_env(sched_sim_teams_t *set, int rank, coll_env_t *env)
{
    const topo_layout_t *l = set->l;

    *env = (coll_env_t){.nranks = l->size, .layout = l, .team_ops = &sim_team_ops,
                        .team_desc = {.size = l->local_max, .flags = set->flags}};
    if (topo_layout_node_size(l, l->node_of[rank]) > 1)
        env->node_team = &set->team[rank];
}

void sched_sim_teams_destroy(sched_sim_teams_t *set)
{
    if (set == NULL)
        return;
    for (int r = 0; r < set->l->size; r++)
        free(set->member[r].turns);
    free(set->serving);
    free(set);
}

static int sim_progress(sim_port_t *ctx)
{
    sim_world_t *w = ctx->w;
    int n = 0;

    while (w->ready[ctx->rank] != NULL) {
        tl_req_t *r = w->ready[ctx->rank];
        w->ready[ctx->rank] = r->next;
        sim_mark_done(w, r);
        n++;
    }
    while (w->team_ready[ctx->rank] != NULL) {
        sim_task_t *t = w->team_ready[ctx->rank];
        w->team_ready[ctx->rank] = t->next;
        t->state = SIM_TASK_SEEN;
        n++;
    }
    return n;
}

/* Complete everything still pending (like ctx_destroy) so schedules can be freed. */
static void sim_drain(sim_world_t *w)
{
    for (int r = 0; r < w->p; r++) {
        sim_port_t ctx = {.w = w, .rank = r};
        sim_progress(&ctx);
    }
    while (w->recvs != NULL) {
        tl_req_t *r = w->recvs;
        w->recvs = r->next;
        r->status = CHORUS_ERR_ABORTED;
        r->done = 1;
        w->stats.unmatched++;
    }
    while (w->msgs != NULL) {
        sim_msg_t *m = w->msgs;
        w->msgs = m->next;
        if (m->sreq != NULL) {
            m->sreq->status = CHORUS_ERR_ABORTED;
            m->sreq->done = 1;
        } else {
            free(m->data);
        }
        free(m);
        w->stats.unmatched++;
    }
}

static int sim_validate(const coll_alg_t *alg, const coll_args_t *args, int p,
                        const sched_sim_opts_t *opts)
{
    if (alg == NULL || alg->build == NULL || args == NULL || p < 1 || p > SCHED_SIM_MAX_RANKS) {
        fprintf(stderr, "sched_sim: bad arguments (p=%d)\n", p);
        return -1;
    }
    if (opts != NULL && opts->teams != SCHED_SIM_TEAMS_NONE &&
        (opts->layout == NULL || opts->layout->size != p)) {
        fprintf(stderr, "sched_sim: node teams need a layout of %d ranks\n", p);
        return -1;
    }
    for (int r = 0; r < p; r++) {
        if (args[r].rank != r || args[r].size != p) {
            fprintf(stderr, "sched_sim: args[%d] has rank %d size %d, expected %d of %d\n", r,
                    args[r].rank, args[r].size, r, p);
            return -1;
        }
    }
    return 0;
}

static void sim_order(int *order, int p, unsigned *seed)
{
    for (int r = 0; r < p; r++)
        order[r] = r;
    if (*seed == 0)
        return;
    for (int r = p - 1; r > 0; r--) {
        int j, t;
        *seed = *seed * 1103515245u + 12345u;
        j = (int)((*seed >> 16) % (unsigned)(r + 1));
        t = order[r];
        order[r] = order[j];
        order[j] = t;
    }
}

/* Round-robin until every live rank is finished or nobody moves. */
static void sim_drive(sim_world_t *w, coll_sched_t *sched, sim_port_t *ctx)
{
    long max_rounds = w->opts.max_rounds > 0 ? w->opts.max_rounds : 1000000;
    unsigned seed = w->opts.seed;
    int order[SCHED_SIM_MAX_RANKS];
    int idle = 0, idle_limit = w->opts.skew ? 64 : 2;
    uint64_t skew_state = w->opts.seed + 1;

    for (w->stats.rounds = 0; w->stats.rounds < max_rounds; w->stats.rounds++) {
        long before = w->events;
        int running = 0, moved = 0;

        sim_order(order, w->p, &seed);
        for (int i = 0; i < w->p; i++) {
            int r = order[i];
            size_t first = sched[r].first_pending;
            if (r == w->opts.dead_rank || w->stats.result[r] != 0)
                continue;
            if (r == w->opts.late_rank && w->stats.rounds < w->opts.late_rounds) {
                running++;
                moved = 1;      /* waiting for the late rank is not a deadlock */
                continue;
            }
            if (w->opts.skew) {
                skew_state = skew_state * 6364136223846793005ull + 1442695040888963407ull;
                if (skew_state >> 63) {
                    running++;
                    continue;
                }
            }
            sim_progress(&ctx[r]);
            w->stats.result[r] = coll_sched_progress(&sched[r]);
            w->stats.failed_peer[r] = sched[r].failed_peer;
            if (w->stats.result[r] != 0)
                w->stats.finish_round[r] = w->stats.rounds;
            moved |= w->stats.result[r] != 0 || sched[r].first_pending != first;
            running += w->stats.result[r] == 0;
        }
        if (running == 0)
            return;
        /* Everything runnable runs inside one call; only transport events enable more. */
        idle = (moved || w->events != before) ? 0 : idle + 1;
        if (idle >= idle_limit)
            break;
    }
    w->stats.stuck = 1;
}

static int sim_verdict(const sim_world_t *w, const coll_alg_t *alg)
{
    const sched_sim_stats_t *st = &w->stats;

    for (int r = 0; r < w->p; r++) {
        if (r == w->opts.dead_rank || st->result[r] == 1)
            continue;
        fprintf(stderr, "sched_sim: %s/%s p=%d: rank %d %s (result %d, failed peer %d)\n",
                coll_type_name(alg->coll), alg->name, w->p, r,
                st->result[r] < 0 ? "failed" : "stuck", st->result[r], st->failed_peer[r]);
        return 1;
    }
    if (w->opts.dead_rank >= 0 && w->opts.dead_rank < w->p)
        return 1;
    if (st->zero_byte_posts || st->size_mismatches || st->unmatched || w->bad_tags ||
        st->send_buffer_changed || st->team_mismatches) {
        fprintf(stderr, "sched_sim: %s/%s p=%d: %ld zero-byte posts, %ld size mismatches, "
                "%ld unmatched, %ld bad tags, %ld send buffers changed in flight, %ld team "
                "calls whose members differ\n",
                coll_type_name(alg->coll), alg->name, w->p, st->zero_byte_posts,
                st->size_mismatches, st->unmatched, w->bad_tags, st->send_buffer_changed,
                st->team_mismatches);
        return 1;
    }
    return 0;
}

int sched_sim_run_opts(const coll_alg_t *alg, const coll_args_t *args_per_rank, int p,
                       const sched_sim_opts_t *opts, sched_sim_stats_t *stats_p)
{
    static const sched_sim_opts_t defaults = SCHED_SIM_OPTS_DEFAULT;
    sim_world_t *w;
    coll_sched_t *sched;
    sim_port_t ctx[SCHED_SIM_MAX_RANKS];
    sched_sim_teams_t *teams = NULL;
    int rc = 1;

    if (sim_validate(alg, args_per_rank, p, opts) != 0)
        return -1;
    w = calloc(1, sizeof(*w));
    sched = calloc((size_t)p, sizeof(*sched));
    if (w == NULL || sched == NULL)
        goto out;
    w->opts = opts != NULL ? *opts : defaults;
    w->p = p;
    for (int r = 0; r < p; r++)
        w->stats.finish_round[r] = -1;
    if (w->opts.teams != SCHED_SIM_TEAMS_NONE) {
        if (sched_sim_teams_create(w->opts.layout, w->opts.teams, &teams) != 0)
            goto out;
        teams->w = w;
    }
    for (int r = 0; r < p; r++) {
        coll_env_t env = {.nranks = p, .layout = w->opts.layout};
        chorus_status_t st;

        if (teams != NULL)
            sched_sim_teams_env(teams, r, &env);
        ctx[r] = (sim_port_t){.port = {.send_nb = sim_send_nb, .recv_nb = sim_recv_nb},
                              .w = w, .rank = r};
        coll_sched_init(&sched[r], args_per_rank[r].dtype, args_per_rank[r].op, p);
        st = alg->build(&args_per_rank[r], &env, &sched[r]);
        /* Bound once built, as the core does, so that the last messages are marked. */
        if (st == CHORUS_OK)
            st = coll_sched_bind(&sched[r], &ctx[r].port, SIM_TAG_BASE);
        if (w->opts.trace != NULL)
            coll_task_trace(&sched[r].head, w->opts.trace, (uint32_t)r);
        if (st != CHORUS_OK) {
            fprintf(stderr, "sched_sim: %s/%s p=%d: build failed on rank %d: %d\n",
                    coll_type_name(alg->coll), alg->name, p, r, (int)st);
            for (int q = 0; q <= r; q++)
                coll_sched_finalize(&sched[q]);
            goto out;
        }
    }
    sim_drive(w, sched, ctx);
    sim_drain(w);
    rc = sim_verdict(w, alg);
    for (int r = 0; r < p; r++)
        coll_sched_finalize(&sched[r]);
    if (stats_p != NULL)
        *stats_p = w->stats;
out:
    sched_sim_teams_destroy(teams);
    free(sched);
    free(w);
    return rc;
}

int sched_sim_run(const coll_alg_t *alg, const coll_args_t *args_per_rank, int p)
{
    return sched_sim_run_opts(alg, args_per_rank, p, NULL, NULL);
}
