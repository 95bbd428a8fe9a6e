/*
 * Stall reports (see stall.h). Control messages of user CHORUS__CTRL_STALL,
 * fixed-size records in the host's byte order, like every message of a job:
 *
 *   QUERY   "how far have you got?"           (sent by a rank whose call waits)
 *   ANSWER  calls posted and calls completed  (echoes the query's round)
 *
 * A rank that has no communicator of that space (not created yet, or
 * destroyed) answers so, and is reported as not having started the call.
 * A peer that does not answer within STALL_REPLY_S is named as such; a dead
 * one just never answers.
 */
#include "core/stall.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_trace.h"
#include "core/ctrl.h"
#include "util/log.h"
#include "util/time.h"

#define STALL_MAGIC 0x63737432u     /* "cst2" */
#define STALL_REPLY_S 1.0           /* how long a round waits for answers */
#define STALL_LIST_MAX 16           /* ranks named in one list of a report */

enum { STALL_QUERY = 1, STALL_ANSWER = 2 };
#define STALL_NO_COMM 1u            /* ANSWER flag: the sender has no such communicator */

typedef struct {
    uint32_t magic;
    uint32_t kind;
    uint32_t flags;
    uint32_t pad;
    uint64_t round;             /* the query's round, echoed by the answer */
    uint64_t started;           /* calls the sender has posted (its next sequence number) */
    uint64_t completed;         /* highest sequence number it has completed, plus one */
} stall_msg_t;

typedef struct {
    int answered;               /* in the current round */
    uint64_t started, completed;
} stall_peer_t;

typedef struct {
    int active;
    uint64_t id;
    uint64_t seq;               /* the call it is about */
    double deadline;            /* answers later than this are not waited for */
} stall_round_t;

struct chorus__stall {
    int rank;
    int size;
    uint64_t done_seq;          /* highest completed sequence number, plus one */
    stall_round_t round;
    stall_peer_t *peers;        /* by rank of the communicator */
};

chorus_status_t chorus__stall_create(chorus_comm_t comm)
{
    chorus__stall_t *st = calloc(1, sizeof(*st));

    if (st == NULL)
        return CHORUS_ERR_NO_MEMORY;
    st->peers = calloc((size_t)comm->size, sizeof(*st->peers));
    if (st->peers == NULL) {
        free(st);
        return CHORUS_ERR_NO_MEMORY;
    }
    st->rank = comm->rank;
    st->size = comm->size;
    comm->stall = st;
    return CHORUS_OK;
}

void chorus__stall_destroy(chorus__stall_t *stall)
{
    if (stall == NULL)
        return;
    free(stall->peers);
    free(stall);
}

void chorus__stall_completed(chorus_comm_t comm, uint64_t seq)
{
    if (seq + 1 > comm->stall->done_seq)
        comm->stall->done_seq = seq + 1;
}

/* This rank's figures on comm: calls posted, and completed here or in the calling thread. */
static void stall_figures(chorus_comm_t comm, stall_msg_t *m)
{
    uint64_t inline_done = atomic_load(&comm->inline_done);

    m->started = atomic_load(&comm->next_seq);
    m->completed = comm->stall->done_seq > inline_done ? comm->stall->done_seq : inline_done;
}

static void stall_send(chorus__ctx_t *ctx, int peer, uint32_t space, const stall_msg_t *m)
{
    if (chorus__ctrl_send(ctx, peer, space, CHORUS__CTRL_STALL, m, sizeof(*m)) != CHORUS_OK)
        chorus_debug("rank %d: stall control message to rank %d could not be sent", ctx->rank,
                     peer);
}

void chorus__stall_receive(chorus__ctx_t *ctx, int peer, uint32_t space, const void *data,
                           size_t len)
{
    stall_msg_t m;
    chorus_comm_t comm;

    if (len != sizeof(m)) {
        chorus_debug("rank %d: malformed stall message (%zu bytes) from rank %d", ctx->rank,
                     len, peer);
        return;
    }
    memcpy(&m, data, sizeof(m));
    if (m.magic != STALL_MAGIC)
        return;
    pthread_mutex_lock(&ctx->lock);
    comm = chorus__comm_of_space(ctx, space);
    if (m.kind == STALL_QUERY) {
        stall_msg_t answer = {.magic = STALL_MAGIC, .kind = STALL_ANSWER, .round = m.round};

        if (comm != NULL)
            stall_figures(comm, &answer);
        else
            answer.flags = STALL_NO_COMM;
        pthread_mutex_unlock(&ctx->lock);
        stall_send(ctx, peer, space, &answer);
        return;
    }
    if (m.kind == STALL_ANSWER && comm != NULL && comm->rank_of[peer] >= 0) {
        chorus__stall_t *st = comm->stall;
        stall_peer_t *p = &st->peers[comm->rank_of[peer]];

        if (st->round.active && m.round == st->round.id) {
            p->answered = 1;
            p->started = m.flags & STALL_NO_COMM ? 0 : m.started;
            p->completed = m.flags & STALL_NO_COMM ? 0 : m.completed;
        }
    }
    pthread_mutex_unlock(&ctx->lock);
}

void chorus__stall_notice(chorus_request_t req, double now)
{
    chorus_comm_t comm = req->comm;
    chorus__stall_t *st = comm->stall;
    stall_msg_t query = {.magic = STALL_MAGIC, .kind = STALL_QUERY};

    if (st->round.active)
        return;     /* one round at a time: req is noticed again next turn */
    req->stall_at = now + comm->ctx->cfg.stall_warn_s;
    st->round.active = 1;
    st->round.id++;
    st->round.seq = req->seq;
    st->round.deadline = now + STALL_REPLY_S;
    query.round = st->round.id;
    chorus_debug("rank %d: %s #%llu waits for %.1f s; asking every peer how far it is",
                 comm->rank, req->call, (unsigned long long)req->seq,
                 now - req->posted_at);
    for (int p = 0; p < st->size; p++) {
        st->peers[p].answered = 0;
        if (p != st->rank)
            stall_send(comm->ctx, comm->ranks[p], comm->space, &query);
    }
}

/* ---- the report ------------------------------------------------------- */

typedef struct {
    char text[900];
    size_t len;
} stall_text_t;

static void text_add(stall_text_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void text_add(stall_text_t *t, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (t->len >= sizeof(t->text) - 1)
        return;
    va_start(ap, fmt);
    n = vsnprintf(t->text + t->len, sizeof(t->text) - t->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        t->len += (size_t)n < sizeof(t->text) - t->len ? (size_t)n : sizeof(t->text) - 1 - t->len;
}

/* "rank 3" or "ranks 1, 3, 5", at most STALL_LIST_MAX of them named. */
static void text_ranks(stall_text_t *t, const int *ranks, int n)
{
    text_add(t, n == 1 ? "rank %d" : "ranks %d", ranks[0]);
    for (int i = 1; i < n && i < STALL_LIST_MAX; i++)
        text_add(t, ", %d", ranks[i]);
    if (n > STALL_LIST_MAX)
        text_add(t, " and %d more", n - STALL_LIST_MAX);
}

/* Where the ranks that have not started the call are: "(they are at #16)". */
static void text_where(stall_text_t *t, const stall_peer_t *peers, const int *ranks, int n)
{
    int same = 1;

    for (int i = 1; i < n; i++)
        same &= peers[ranks[i]].started == peers[ranks[0]].started;
    if (same && peers[ranks[0]].started == 0) {
        text_add(t, " (%s started no collective)", n == 1 ? "it has" : "they have");
    } else if (same) {
        text_add(t, " (%s at #%llu)", n == 1 ? "it is" : "they are",
                 (unsigned long long)(peers[ranks[0]].started - 1));
    } else {
        for (int i = 0; i < n && i < STALL_LIST_MAX; i++) {
            uint64_t started = peers[ranks[i]].started;

            text_add(t, i == 0 ? " (" : ", ");
            if (started == 0)
                text_add(t, "rank %d at none", ranks[i]);
            else
                text_add(t, "rank %d at #%llu", ranks[i], (unsigned long long)(started - 1));
        }
        text_add(t, ")");
    }
}

static void stall_report(chorus_comm_t comm, chorus_request_t req, double now)
{
    chorus__stall_t *st = comm->stall;
    int *missing = malloc((size_t)st->size * 2 * sizeof(int)), *silent;
    int nmissing = 0, nsilent = 0;
    stall_text_t t = {.len = 0};

    if (missing == NULL)
        return;
    silent = missing + st->size;
    for (int p = 0; p < st->size; p++) {
        if (p == st->rank)
            continue;
        if (!st->peers[p].answered)
            silent[nsilent++] = p;
        else if (st->peers[p].started <= req->seq)
            missing[nmissing++] = p;
    }
    text_add(&t, "rank %d: %s #%llu (%zu x %s) waiting %.0f s", comm->rank,
             req->call, (unsigned long long)req->seq, req->args.count,
             chorus_dtype_name(req->args.dtype), now - req->posted_at);
    if (nmissing > 0) {
        text_add(&t, "; ");
        text_ranks(&t, missing, nmissing);
        text_add(&t, nmissing == 1 ? " has not started it" : " have not started it");
        text_where(&t, st->peers, missing, nmissing);
    }
    if (nsilent > 0) {
        text_add(&t, "; ");
        text_ranks(&t, silent, nsilent);
        text_add(&t, " did not answer");
    }
    if (nmissing == 0 && nsilent == 0)
        text_add(&t, "; every rank has started it");
    chorus_warn("%s", t.text);
    if (comm->ctx->trace != NULL)
        chorus__trace_stall(comm, t.text);
    free(missing);
}

/* End comm's round once every peer answered or its time is up. */
static void stall_round_check(chorus_comm_t comm, double now)
{
    chorus__stall_t *st = comm->stall;
    chorus_request_t req;
    int waiting = 0;

    for (int p = 0; p < st->size; p++)
        waiting += p != st->rank && !st->peers[p].answered;
    if (waiting > 0 && now < st->round.deadline)
        return;
    st->round.active = 0;
    for (req = comm->ctx->active; req != NULL; req = req->next)
        if (req->comm == comm && !req->setup && req->seq == st->round.seq)
            break;
    /* A call that completed while its peers answered is no longer stalled. */
    if (req != NULL)
        stall_report(comm, req, now);
}

void chorus__stall_check(chorus__ctx_t *ctx, double now)
{
    pthread_mutex_lock(&ctx->lock);
    for (chorus_comm_t comm = ctx->comms; comm != NULL; comm = comm->next) {
        if (comm->stall != NULL && comm->stall->round.active)
            stall_round_check(comm, now);
    }
    pthread_mutex_unlock(&ctx->lock);
}
