/*
 * Stall reports (see stall.h). Control messages are fixed-size records on
 * tag CHORUS_TAG_CTRL, which algorithm tags never carry:
 *
 *   QUERY   "how far have you got?"           (sent by a rank whose call waits)
 *   ANSWER  calls posted and calls completed  (echoes the query's round)
 *   BYE     the same figures, sent when a communicator is destroyed
 *
 * Queries are answered by the progress thread, never by the user's thread,
 * so a rank busy elsewhere (the usual cause of a stall) still answers. A
 * send never waits: each peer has one slot per kind, and what cannot be sent
 * now is marked owed and sent on a later turn. A peer that does not answer
 * within STALL_REPLY_S is named as such; a dead one just never answers.
 * The records use the host's byte order, like every message of a job.
 */
#include "core/stall.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/log.h"
#include "util/time.h"

#define STALL_MAGIC 0x63737431u     /* "cst1" */
#define STALL_REPLY_S 1.0           /* how long a round waits for answers */
#define STALL_CLOSE_S 0.5           /* how long destroy waits for its goodbyes to leave */
#define STALL_LIST_MAX 16           /* ranks named in one list of a report */

enum { STALL_QUERY = 1, STALL_ANSWER = 2, STALL_BYE = 3 };

typedef struct {
    uint32_t magic;
    uint32_t kind;
    uint64_t round;             /* the query's round, echoed by the answer */
    uint64_t started;           /* calls the sender has posted (its next sequence number) */
    uint64_t completed;         /* highest sequence number it has completed, plus one */
} stall_msg_t;

typedef struct {
    stall_msg_t msg;
    tl_req_t req;
    int busy;                   /* posted and not yet done */
} stall_tx_t;

typedef struct {
    stall_msg_t rx_msg;
    tl_req_t rx;
    int rx_posted;
    int gone;                   /* said goodbye or its connection failed: nothing more comes */
    int left;                   /* said goodbye; started/completed are its final figures */
    stall_tx_t query, answer, bye;
    int query_owed;             /* the current round's query is still to be sent */
    int answer_owed;            /* a query from this peer awaits its answer */
    uint64_t answer_round;
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
    int started;                /* control receives posted */
    int owed;                   /* some peer has a query or an answer owed */
    uint64_t done_seq;          /* highest completed sequence number, plus one */
    stall_round_t round;
    stall_peer_t *peers;
};

chorus_status_t chorus__stall_create(int rank, int size, chorus__stall_t **stall_p)
{
    chorus__stall_t *st = calloc(1, sizeof(*st));

    if (st == NULL)
        return CHORUS_ERR_NO_MEMORY;
    st->peers = calloc((size_t)size, sizeof(*st->peers));
    if (st->peers == NULL) {
        free(st);
        return CHORUS_ERR_NO_MEMORY;
    }
    st->rank = rank;
    st->size = size;
    *stall_p = st;
    return CHORUS_OK;
}

void chorus__stall_destroy(chorus__stall_t *stall)
{
    if (stall == NULL)
        return;
    free(stall->peers);
    free(stall);
}

static void stall_post_rx(chorus_comm_t comm, int p)
{
    stall_peer_t *peer = &comm->stall->peers[p];

    memset(&peer->rx, 0, sizeof(peer->rx));
    if (comm->tl->recv_nb(comm->tl_ctx, p, &peer->rx_msg, sizeof(peer->rx_msg),
                          CHORUS_TAG_CTRL, &peer->rx) != CHORUS_OK) {
        peer->gone = 1;
        return;
    }
    peer->rx_posted = 1;
}

void chorus__stall_start(chorus_comm_t comm)
{
    chorus__stall_t *st = comm->stall;

    if (st == NULL || st->started)
        return;
    st->started = 1;
    for (int p = 0; p < st->size; p++)
        if (p != st->rank)
            stall_post_rx(comm, p);
}

void chorus__stall_restart(chorus_comm_t comm)
{
    if (comm->stall != NULL)
        comm->stall->done_seq = 0;
}

void chorus__stall_completed(chorus_comm_t comm, uint64_t seq)
{
    if (comm->stall != NULL && seq + 1 > comm->stall->done_seq)
        comm->stall->done_seq = seq + 1;
}

/* Returns 0 when posted (or completed at once), -1 when the slot is still busy or failed. */
static int stall_send(chorus_comm_t comm, int p, stall_tx_t *tx, uint32_t kind, uint64_t round)
{
    if (tx->busy && !tx->req.done)
        return -1;
    tx->busy = 0;
    tx->msg.magic = STALL_MAGIC;
    tx->msg.kind = kind;
    tx->msg.round = round;
    pthread_mutex_lock(&comm->lock);
    tx->msg.started = comm->next_seq;
    pthread_mutex_unlock(&comm->lock);
    tx->msg.completed = comm->stall->done_seq;
    /* Calls completed in the calling thread (shm_path.c) count too. */
    if (atomic_load(&comm->inline_done) > tx->msg.completed)
        tx->msg.completed = atomic_load(&comm->inline_done);
    memset(&tx->req, 0, sizeof(tx->req));
    if (comm->tl->send_nb(comm->tl_ctx, p, &tx->msg, sizeof(tx->msg), CHORUS_TAG_CTRL,
                          &tx->req) != CHORUS_OK) {
        chorus_debug("rank %d: stall control message to peer %d could not be sent", comm->rank,
                     p);
        return -1;
    }
    tx->busy = 1;
    return 0;
}

static void stall_handle_msg(chorus_comm_t comm, int p, const stall_msg_t *m)
{
    chorus__stall_t *st = comm->stall;
    stall_peer_t *peer = &st->peers[p];

    switch (m->kind) {
    case STALL_QUERY:
        peer->answer_owed = 1;
        peer->answer_round = m->round;
        st->owed = 1;
        break;
    case STALL_BYE:
    case STALL_ANSWER:
        /* A goodbye's figures are final: they answer this round and every later one. */
        if (m->kind == STALL_BYE)
            peer->gone = peer->left = 1;
        if (m->kind == STALL_BYE || (st->round.active && m->round == st->round.id)) {
            peer->answered = 1;
            peer->started = m->started;
            peer->completed = m->completed;
        }
        break;
    default:
        chorus_debug("rank %d: unknown stall control message kind %u from peer %d", comm->rank,
                     m->kind, p);
    }
}

/* Take what arrived on each peer's control receive, and post the next one. */
static int stall_receive(chorus_comm_t comm)
{
    chorus__stall_t *st = comm->stall;
    int moved = 0;

    for (int p = 0; p < st->size; p++) {
        stall_peer_t *peer = &st->peers[p];

        if (!peer->rx_posted || !peer->rx.done)
            continue;
        peer->rx_posted = 0;
        moved = 1;
        if (peer->rx.status != CHORUS_OK) {
            /* The connection is gone; the data path reports it if it matters. */
            peer->gone = 1;
            continue;
        }
        if (peer->rx.length == sizeof(stall_msg_t) && peer->rx_msg.magic == STALL_MAGIC)
            stall_handle_msg(comm, p, &peer->rx_msg);
        else
            chorus_debug("rank %d: malformed stall control message (%zu bytes) from peer %d",
                         comm->rank, peer->rx.length, p);
        if (!peer->gone)
            stall_post_rx(comm, p);
    }
    return moved;
}

/* Send the answers and queries that are owed, as far as their slots are free. */
static void stall_flush(chorus_comm_t comm)
{
    chorus__stall_t *st = comm->stall;
    int still_owed = 0;

    for (int p = 0; p < st->size; p++) {
        stall_peer_t *peer = &st->peers[p];

        if (peer->answer_owed && stall_send(comm, p, &peer->answer, STALL_ANSWER,
                                            peer->answer_round) == 0)
            peer->answer_owed = 0;
        if (peer->query_owed && (!st->round.active || peer->gone))
            peer->query_owed = 0;
        if (peer->query_owed && stall_send(comm, p, &peer->query, STALL_QUERY,
                                           st->round.id) == 0)
            peer->query_owed = 0;
        still_owed |= peer->answer_owed | peer->query_owed;
    }
    st->owed = still_owed;
}

void chorus__stall_notice(chorus_comm_t comm, chorus_request_t req, double now)
{
    chorus__stall_t *st = comm->stall;

    if (st == NULL || st->round.active)
        return;     /* one round at a time: req is noticed again next turn */
    req->stall_at = now + comm->cfg.stall_warn_s;
    st->round.active = 1;
    st->round.id++;
    st->round.seq = req->seq;
    st->round.deadline = now + STALL_REPLY_S;
    for (int p = 0; p < st->size; p++) {
        stall_peer_t *peer = &st->peers[p];

        /* A peer that said goodbye keeps its final figures as its answer. */
        if (!peer->left)
            peer->answered = 0;
        if (p != st->rank && !peer->gone)
            peer->query_owed = 1;
    }
    st->owed = 1;
    chorus_debug("rank %d: %s #%llu waits for %.1f s; asking every peer how far it is",
                 comm->rank, coll_type_name(req->args.coll), (unsigned long long)req->seq,
                 now - req->posted_at);
    stall_flush(comm);
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
             coll_type_name(req->args.coll), (unsigned long long)req->seq, req->args.count,
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
    free(missing);
}

/* End the round once every live peer answered or its time is up. */
static void stall_round_check(chorus_comm_t comm, double now)
{
    chorus__stall_t *st = comm->stall;
    chorus_request_t req;
    int waiting = 0;

    for (int p = 0; p < st->size; p++)
        waiting += p != st->rank && !st->peers[p].gone && !st->peers[p].answered;
    if (waiting > 0 && now < st->round.deadline)
        return;
    st->round.active = 0;
    for (req = comm->active; req != NULL; req = req->next)
        if (req->seq == st->round.seq)
            break;
    /* A call that completed while its peers answered is no longer stalled. */
    if (req != NULL)
        stall_report(comm, req, now);
}

int chorus__stall_progress(chorus_comm_t comm, int tl_moved)
{
    chorus__stall_t *st = comm->stall;
    int moved = 0;

    if (st == NULL || !st->started)
        return 0;
    if (tl_moved || st->round.active)
        moved = stall_receive(comm);
    if (st->owed)
        stall_flush(comm);
    if (st->round.active)
        stall_round_check(comm, chorus__now());
    return moved;
}

static int stall_bye_pending(const chorus__stall_t *st)
{
    for (int p = 0; p < st->size; p++)
        if (st->peers[p].bye.busy && !st->peers[p].bye.req.done)
            return 1;
    return 0;
}

void chorus__stall_close(chorus_comm_t comm)
{
    chorus__stall_t *st = comm->stall;
    double deadline = chorus__now() + STALL_CLOSE_S;

    if (st == NULL || !st->started || atomic_load(&comm->error))
        return;
    for (int p = 0; p < st->size; p++)
        if (p != st->rank && !st->peers[p].gone)
            stall_send(comm, p, &st->peers[p].bye, STALL_BYE, 0);
    while (stall_bye_pending(st) && chorus__now() < deadline) {
        int rc = comm->tl->progress(comm->tl_ctx);

        if (rc < 0)
            break;
        if (rc == 0)
            usleep(1000);
    }
}
