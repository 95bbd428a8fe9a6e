/*
 * sched_sim: an in-memory transport and a round-robin driver that runs the
 * schedules of every rank of one call inside one process (see sched_sim.h).
 */
#include "tests/unit/sched_sim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

typedef struct {
    sched_sim_opts_t opts;
    int p;
    sim_msg_t *msgs;                    /* unmatched sends, oldest first */
    tl_req_t *recvs;                    /* unmatched receives, oldest first (via req->next) */
    tl_req_t *ready[SCHED_SIM_MAX_RANKS];   /* deferred: matched, waiting for progress */
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
    if ((tag >> 32) != (SIM_TAG_BASE >> 32))
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

static int sim_validate(const coll_alg_t *alg, const coll_args_t *args, int p)
{
    if (alg == NULL || alg->build == NULL || args == NULL || p < 1 || p > SCHED_SIM_MAX_RANKS) {
        fprintf(stderr, "sched_sim: bad arguments (p=%d)\n", p);
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
        st->send_buffer_changed) {
        fprintf(stderr, "sched_sim: %s/%s p=%d: %ld zero-byte posts, %ld size mismatches, "
                "%ld unmatched, %ld bad tags, %ld send buffers changed in flight\n",
                coll_type_name(alg->coll), alg->name, w->p, st->zero_byte_posts,
                st->size_mismatches, st->unmatched, w->bad_tags, st->send_buffer_changed);
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
    int rc = 1;

    if (sim_validate(alg, args_per_rank, p) != 0)
        return -1;
    w = calloc(1, sizeof(*w));
    sched = calloc((size_t)p, sizeof(*sched));
    if (w == NULL || sched == NULL)
        goto out;
    w->opts = opts != NULL ? *opts : defaults;
    w->p = p;
    for (int r = 0; r < p; r++)
        w->stats.finish_round[r] = -1;
    for (int r = 0; r < p; r++) {
        coll_env_t env = {.nranks = p, .layout = w->opts.layout};
        chorus_status_t st;

        ctx[r] = (sim_port_t){.port = {.send_nb = sim_send_nb, .recv_nb = sim_recv_nb},
                              .w = w, .rank = r};
        coll_sched_init(&sched[r], args_per_rank[r].dtype, args_per_rank[r].op, p);
        coll_sched_bind(&sched[r], &ctx[r].port, SIM_TAG_BASE);
        st = alg->build(&args_per_rank[r], &env, &sched[r]);
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
    free(sched);
    free(w);
    return rc;
}

int sched_sim_run(const coll_alg_t *alg, const coll_args_t *args_per_rank, int p)
{
    return sched_sim_run_opts(alg, args_per_rank, p, NULL, NULL);
}
