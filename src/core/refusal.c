/* Calls refused for their arguments keep their place: see refusal.h. */
#include "core/refusal.h"

#include <endian.h>
#include <stdlib.h>
#include <string.h>

#include "core/ctrl.h"
#include "util/log.h"

#define REFUSAL_MAGIC 0x72656675u   /* "refu" */

/* The notice of a refused call, as it travels. */
typedef struct {
    uint32_t magic;
    uint32_t coll;
    uint32_t join;              /* 1: the refusing rank runs the call (refusal.h) */
    uint32_t reserved;
    uint64_t seq;
    char why[CHORUS__REFUSAL_WHY_MAX];
} refusal_msg_t;

/* A refused call: one of this rank's, or a peer's. */
typedef struct refusal_note {
    struct refusal_note *next;
    uint64_t seq;
    int rank;                   /* the refusing rank (of the communicator) */
    int left;                   /* this rank's stopping refusal: peers' notices still due */
    int join;                   /* a refusal whose rank runs the call */
    coll_type_t coll;
    char why[CHORUS__REFUSAL_WHY_MAX];
} refusal_note_t;

struct chorus__refusal {
    /* A leaf lock: taken under post_lock or ctx->lock, never around either. */
    pthread_mutex_t lock;
    /* Calls refused here: stopping ones until their peers' notices are in, joining ones until over. */
    refusal_note_t *mine;
    refusal_note_t *pending;    /* peers' stopping notices of calls not yet posted here */
    refusal_note_t *joined;     /* peers' joining notices of calls not yet over here */
    atomic_int njoin;           /* joining notes in mine and joined: none, no lock at completion */
};

/*
 * The low tag bits of the exchange by which the ranks that stopped a call
 * learn that every other rank did too, and of the acknowledgements of a
 * joining notice (with CHORUS__TAG_HIDDEN and the call's number, like the
 * debug check's exchange, whose ring tags are small).
 */
#define REFUSAL_TAG 0xfffffff0u
#define REFUSAL_ACK_TAG 0xfffffff1u

typedef struct {
    chorus__task_t head;
    chorus_comm_t comm;
    refusal_msg_t msg;
    int nreqs;                  /* a send and a receive per other rank (joining: receives only) */
    tl_req_t *reqs;
    unsigned char byte_out, *bytes_in;
    chorus_status_t post_status;    /* a notice or transfer that could not be posted */
    void *scratch[2];           /* joining: the buffers the call runs on here, freed with the task */
} refusal_task_t;

chorus_status_t chorus__refusal_create(chorus_comm_t comm)
{
    comm->refusal = calloc(1, sizeof(*comm->refusal));
    if (comm->refusal == NULL)
        return CHORUS_ERR_NO_MEMORY;
    pthread_mutex_init(&comm->refusal->lock, NULL);
    return CHORUS_OK;
}

static void note_free_list(refusal_note_t *n)
{
    while (n != NULL) {
        refusal_note_t *next = n->next;
        free(n);
        n = next;
    }
}

void chorus__refusal_destroy(chorus__refusal_t *refusal)
{
    if (refusal == NULL)
        return;
    note_free_list(refusal->mine);
    note_free_list(refusal->pending);
    note_free_list(refusal->joined);
    pthread_mutex_destroy(&refusal->lock);
    free(refusal);
}

/* Unlink and return the first note of seq in *list, or NULL. */
static refusal_note_t *note_take(refusal_note_t **list, uint64_t seq)
{
    for (refusal_note_t **link = list; *link != NULL; link = &(*link)->next) {
        refusal_note_t *n = *link;

        if (n->seq == seq) {
            *link = n->next;
            n->next = NULL;
            return n;
        }
    }
    return NULL;
}

static refusal_note_t *note_find(refusal_note_t *list, uint64_t seq)
{
    for (; list != NULL; list = list->next)
        if (list->seq == seq)
            return list;
    return NULL;
}

static void note_push(refusal_note_t **list, refusal_note_t *n)
{
    n->next = *list;
    *list = n;
}

/* ---- the refused call's task ---------------------------------------------- */

/*
 * Tell every other rank (a control message, handled on its arrival), and
 * exchange one byte with each in the call's hidden tag: a rank that refused
 * the call too answers in kind; one that did not fails its context at our
 * notice, its connections close, and our transfer with it fails.
 */
static chorus_status_t refusal_post(chorus__task_t *task)
{
    refusal_task_t *t = (refusal_task_t *)task;
    chorus_comm_t comm = t->comm;
    uint64_t base = CHORUS__TAG_HIDDEN | chorus__tag_base(le64toh(t->msg.seq));
    chorus_status_t st;
    int k = 0;

    for (int r = 0; r < comm->size; r++) {
        int peer = comm->ranks[r];

        if (r == comm->rank)
            continue;
        st = chorus__ctrl_send(comm->ctx, peer, comm->space, CHORUS__CTRL_REFUSAL, &t->msg,
                               sizeof(t->msg));
        /* Joining: no byte of ours; the peer's acknowledgement comes as a hidden message. */
        if (st == CHORUS_OK && t->msg.join)
            t->reqs[k].done = 1;
        else if (st == CHORUS_OK)
            st = chorus__ctx_send(comm->ctx, peer, comm->space, base | REFUSAL_TAG,
                                  &t->byte_out, 1, &t->reqs[k]);
        if (st == CHORUS_OK)
            st = chorus__ctx_recv(comm->ctx, peer, comm->space,
                                  base | (t->msg.join ? REFUSAL_ACK_TAG : REFUSAL_TAG),
                                  &t->bytes_in[k / 2], 1, &t->reqs[k + 1]);
        if (st != CHORUS_OK) {
            chorus_error("rank %d: could not tell rank %d that call #%llu was refused: %s",
                         comm->rank, r, (unsigned long long)le64toh(t->msg.seq),
                         chorus_status_string(st));
            /* A fault: progress reports it, once the transports have failed what is posted. */
            t->nreqs = k;
            t->post_status = st;
            return CHORUS_OK;
        }
        k += 2;
    }
    return CHORUS_OK;
}

/*
 * Stopping: over with CHORUS_ERR_INVALID_ARG once every other rank
 * answered; until then this rank starts no later call, which could
 * otherwise take this one's turn on a node team. A failed transfer means
 * another rank did not refuse the call: once every send is out (each
 * follows its notice on the same connection, so every rank that can be
 * told has been), the context fails.
 *
 * Joining: over with CHORUS_OK once every other rank acknowledged the
 * notice, so that the call may run; a rank that cannot join fails its
 * context instead, and the receive from it fails.
 */
static int refusal_progress(chorus__task_t *task)
{
    refusal_task_t *t = (refusal_task_t *)task;
    int failed = -1, unsent = 0, waiting = 0;

    if (t->post_status != CHORUS_OK)
        return t->post_status;
    for (int i = 0; i < t->nreqs; i++) {
        if (!t->reqs[i].done)
            *(i % 2 == 0 ? &unsent : &waiting) += 1;    /* even: sends, odd: receives */
        else if (t->reqs[i].status != CHORUS_OK && failed < 0)
            failed = i;
    }
    if (failed >= 0 && unsent == 0) {
        int other = failed / 2 < t->comm->rank ? failed / 2 : failed / 2 + 1;

        chorus_error("rank %d: rank %d did not %s call #%llu; the communicator fails",
                     t->comm->rank, other,
                     t->msg.join ? "acknowledge this rank's refusal of"
                                 : "refuse, as this rank did,",
                     (unsigned long long)le64toh(t->msg.seq));
        return t->reqs[failed].status;
    }
    if (failed >= 0 || unsent > 0 || waiting > 0)
        return 0;
    task->status = t->msg.join ? CHORUS_OK : CHORUS_ERR_INVALID_ARG;
    return 1;
}

static void refusal_finalize(chorus__task_t *task)
{
    refusal_task_t *t = (refusal_task_t *)task;

    free(t->reqs);
    free(t->bytes_in);
    free(t->scratch[0]);
    free(t->scratch[1]);
    free(t);
}

static const chorus__task_ops_t refusal_ops = {
    .name = "refused call",
    .post = refusal_post,
    .progress = refusal_progress,
    .finalize = refusal_finalize,
};

chorus_status_t chorus__refusal_task_create(chorus_comm_t comm, const coll_args_t *args,
                                            uint64_t seq, const char *why, void *scratch[2],
                                            chorus__task_t **task_p)
{
    refusal_task_t *t = calloc(1, sizeof(*t));
    size_t peers = (size_t)comm->size - 1;

    if (t == NULL) {
        if (scratch != NULL) {
            free(scratch[0]);
            free(scratch[1]);
        }
        return CHORUS_ERR_NO_MEMORY;
    }
    chorus__task_init(&t->head, &refusal_ops, 0);
    t->comm = comm;
    t->nreqs = 2 * (int)peers;
    t->reqs = calloc(2 * peers + 1, sizeof(*t->reqs));
    t->bytes_in = calloc(peers + 1, 1);
    if (t->reqs == NULL || t->bytes_in == NULL) {
        refusal_finalize(&t->head);
        return CHORUS_ERR_NO_MEMORY;
    }
    t->msg.magic = htole32(REFUSAL_MAGIC);
    t->msg.coll = htole32((uint32_t)args->coll);
    t->msg.join = htole32(scratch != NULL);
    if (scratch != NULL) {
        t->scratch[0] = scratch[0];
        t->scratch[1] = scratch[1];
    }
    t->msg.seq = htole64(seq);
    strncpy(t->msg.why, why, sizeof(t->msg.why) - 1);
    *task_p = &t->head;
    return CHORUS_OK;
}

/* ---- numbering ------------------------------------------------------------ */

static void refusal_conflict(chorus_comm_t comm, const refusal_note_t *n)
{
    const char *coll = coll_type_name(n->coll);

    chorus_error("rank %d: rank %d refused %s #%llu (%s); this rank's call #%llu cannot "
                 "complete without it, so the communicator fails", comm->rank, n->rank,
                 coll != NULL ? coll : "call", (unsigned long long)n->seq, n->why,
                 (unsigned long long)n->seq);
    chorus__ctx_fail(comm->ctx, CHORUS_ERR_INVALID_ARG);
}

/* Unlink and return the first joining (join set) or stopping note of seq in *list, or NULL. */
static refusal_note_t *note_take_kind(refusal_note_t **list, uint64_t seq, int join)
{
    for (refusal_note_t **link = list; *link != NULL; link = &(*link)->next) {
        refusal_note_t *n = *link;

        if (n->seq == seq && n->join == join) {
            *link = n->next;
            n->next = NULL;
            return n;
        }
    }
    return NULL;
}

static void refusal_log_join(chorus_comm_t comm, const refusal_note_t *n, const char *what)
{
    const char *coll = coll_type_name(n->coll);

    chorus_error("rank %d: rank %d refused %s #%llu (%s); %s", comm->rank, n->rank,
                 coll != NULL ? coll : "call", (unsigned long long)n->seq, n->why, what);
}

chorus_status_t chorus__refusal_advance(chorus_comm_t comm, uint64_t seq,
                                        chorus__refused_t refused)
{
    chorus__refusal_t *rf = comm->refusal;
    refusal_note_t *theirs, *mine = NULL, *conflict = NULL;
    int arrived = 0;

    if (refused != CHORUS__REFUSED_NOT && comm->size > 1) {
        mine = calloc(1, sizeof(*mine));
        if (mine == NULL)
            chorus_warn("rank %d: no memory to remember refused call #%llu; its peers' "
                        "notices will fail the communicator", comm->rank,
                        (unsigned long long)seq);
    }
    pthread_mutex_lock(&rf->lock);
    /* Stopping notices pair only with a stopping refusal here. */
    while ((theirs = note_take(&rf->pending, seq)) != NULL) {
        arrived++;
        if (refused == CHORUS__REFUSED_STOP || conflict != NULL)
            free(theirs);
        else
            conflict = theirs;
    }
    /* A joining rank waits for an acknowledgement that a stopping rank never sends. */
    if (refused == CHORUS__REFUSED_STOP && conflict == NULL &&
        (theirs = note_find(rf->joined, seq)) != NULL) {
        conflict = calloc(1, sizeof(*conflict));
        if (conflict != NULL)
            *conflict = *theirs;
        else
            chorus__ctx_fail(comm->ctx, CHORUS_ERR_NO_MEMORY);
    }
    if (mine != NULL && (refused == CHORUS__REFUSED_JOIN || arrived < comm->size - 1)) {
        mine->seq = seq;
        mine->rank = comm->rank;
        mine->join = refused == CHORUS__REFUSED_JOIN;
        mine->left = mine->join ? 0 : comm->size - 1 - arrived;
        note_push(&rf->mine, mine);
        if (mine->join)
            atomic_fetch_add(&rf->njoin, 1);
        mine = NULL;
    }
    atomic_store(&comm->next_seq, seq + 1);
    pthread_mutex_unlock(&rf->lock);
    free(mine);
    if (conflict == NULL)
        return CHORUS_OK;
    refusal_conflict(comm, conflict);
    free(conflict);
    return CHORUS_ERR_INVALID_ARG;
}

chorus_status_t chorus__refusal_outcome(chorus_comm_t comm, uint64_t seq,
                                        chorus_status_t status, int inline_call)
{
    chorus__refusal_t *rf = comm->refusal;
    refusal_note_t *n, *first = NULL;

    /* The progress thread completes calls and handles notices alike: nothing can come between. */
    if (!inline_call && atomic_load(&rf->njoin) == 0)
        return status;
    pthread_mutex_lock(&rf->lock);
    while ((n = note_take(&rf->joined, seq)) != NULL) {
        if (first == NULL)
            first = n;
        else
            free(n);
        atomic_fetch_sub(&rf->njoin, 1);
    }
    if ((n = note_take_kind(&rf->mine, seq, 1)) != NULL) {
        free(n);
        atomic_fetch_sub(&rf->njoin, 1);
    }
    if (inline_call)
        atomic_store(&comm->inline_seq, CHORUS__NO_SEQ);
    pthread_mutex_unlock(&rf->lock);
    if (first == NULL)
        return status;
    refusal_log_join(comm, first, "this rank's call of that number fails with it");
    free(first);
    return status == CHORUS_OK ? CHORUS_ERR_INVALID_ARG : status;
}

/* ---- notices from peers --------------------------------------------------- */

/* Under ctx->lock: what this rank makes of a peer's stopping notice; a note to log, or NULL. */
static refusal_note_t *refusal_note_stop(chorus_comm_t comm, refusal_note_t *n)
{
    chorus__refusal_t *rf = comm->refusal;
    refusal_note_t *mine;

    pthread_mutex_lock(&rf->lock);
    mine = note_find(rf->mine, n->seq);
    if (mine != NULL && !mine->join) {
        /* Refused here too: every rank passed the same bad argument. */
        if (--mine->left == 0)
            free(note_take(&rf->mine, n->seq));
        free(n);
        n = NULL;
    } else if (mine == NULL && n->seq >= atomic_load(&comm->next_seq)) {
        /* Not posted here yet: decided when it is. */
        note_push(&rf->pending, n);
        n = NULL;
    }
    pthread_mutex_unlock(&rf->lock);
    return n;
}

/*
 * Under ctx->lock: a peer's joining notice. Kept until this rank's call of
 * that number is over (which then fails with it and logs it), unless that
 * call returned already (logged now); 1 when the peer is to be acknowledged, 0 when this rank stopped
 * the call (the context then fails).
 */
static int refusal_note_join(chorus_comm_t comm, refusal_note_t *n)
{
    chorus__refusal_t *rf = comm->refusal;
    refusal_note_t *mine;
    int keep;

    pthread_mutex_lock(&rf->lock);
    mine = note_find(rf->mine, n->seq);
    if (mine != NULL && !mine->join) {
        pthread_mutex_unlock(&rf->lock);
        refusal_conflict(comm, n);
        free(n);
        return 0;
    }
    keep = n->seq >= atomic_load(&comm->next_seq) || chorus__call_in_flight(comm, n->seq);
    if (keep) {
        note_push(&rf->joined, n);
        atomic_fetch_add(&rf->njoin, 1);
    }
    pthread_mutex_unlock(&rf->lock);
    if (!keep) {
        refusal_log_join(comm, n, "this rank's call of that number had returned already");
        free(n);
    }
    return 1;
}

void chorus__refusal_receive(chorus__ctx_t *ctx, int peer, uint32_t space, const void *msg,
                             size_t len)
{
    static const unsigned char ack = 1;
    refusal_msg_t m;
    refusal_note_t *n;
    chorus_comm_t comm;
    int acknowledge;
    uint64_t seq;

    if (len != sizeof(m)) {
        chorus_debug("rank %d: malformed refusal notice (%zu bytes) from rank %d", ctx->rank,
                     len, peer);
        return;
    }
    memcpy(&m, msg, sizeof(m));
    if (le32toh(m.magic) != REFUSAL_MAGIC)
        return;
    n = calloc(1, sizeof(*n));
    pthread_mutex_lock(&ctx->lock);
    comm = chorus__comm_of_space(ctx, space);
    if (comm == NULL || comm->rank_of[peer] < 0) {
        pthread_mutex_unlock(&ctx->lock);
        chorus_debug("rank %d: refusal notice from rank %d for no communicator here",
                     ctx->rank, peer);
        free(n);
        return;
    }
    if (n == NULL) {
        pthread_mutex_unlock(&ctx->lock);
        chorus_error("rank %d: no memory for rank %d's notice of a refused call",
                     comm->rank, comm->rank_of[peer]);
        chorus__ctx_fail(ctx, CHORUS_ERR_NO_MEMORY);
        return;
    }
    seq = le64toh(m.seq);
    n->seq = seq;
    n->rank = comm->rank_of[peer];
    n->join = le32toh(m.join) != 0;
    n->coll = (coll_type_t)le32toh(m.coll);
    memcpy(n->why, m.why, sizeof(n->why));
    n->why[sizeof(n->why) - 1] = '\0';
    if (n->join) {
        acknowledge = refusal_note_join(comm, n);
        pthread_mutex_unlock(&ctx->lock);
        /* The note is in place: the refusing rank may now send what this call waits for. */
        if (acknowledge &&
            chorus__ctrl_send_hidden(ctx, peer, space,
                                     CHORUS__TAG_HIDDEN | chorus__tag_base(seq) |
                                         REFUSAL_ACK_TAG,
                                     &ack, 1) != CHORUS_OK) {
            chorus_error("rank %d: could not acknowledge rank %d's refusal of call #%llu",
                         ctx->rank, peer, (unsigned long long)seq);
            chorus__ctx_fail(ctx, CHORUS_ERR_SYSTEM);
        }
        return;
    }
    n = refusal_note_stop(comm, n);
    if (n != NULL)
        refusal_conflict(comm, n);
    pthread_mutex_unlock(&ctx->lock);
    free(n);
}
