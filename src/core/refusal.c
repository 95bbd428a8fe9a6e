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
    uint64_t seq;
    char why[CHORUS__REFUSAL_WHY_MAX];
} refusal_msg_t;

/* A refused call: one of this rank's, or a peer's that this rank has not posted yet. */
typedef struct refusal_note {
    struct refusal_note *next;
    uint64_t seq;
    int rank;                   /* the refusing rank (of the communicator) */
    int left;                   /* this rank's: peers' notices still due */
    coll_type_t coll;
    char why[CHORUS__REFUSAL_WHY_MAX];
} refusal_note_t;

struct chorus__refusal {
    /* A leaf lock: taken under post_lock or ctx->lock, never around either. */
    pthread_mutex_t lock;
    refusal_note_t *mine;       /* calls refused here whose peers' notices are still due */
    refusal_note_t *pending;    /* peers' notices of calls not yet posted here */
};

/*
 * The low tag bits of the exchange by which the ranks that refused a call
 * learn that every other rank did too (with CHORUS__TAG_HIDDEN and the
 * call's number, like the debug check's exchange, whose ring tags are small).
 */
#define REFUSAL_TAG 0xfffffff0u

typedef struct {
    chorus__task_t head;
    chorus_comm_t comm;
    refusal_msg_t msg;
    int nreqs;                  /* a send and a receive per other rank */
    tl_req_t *reqs;
    unsigned char byte_out, *bytes_in;
    chorus_status_t post_status;    /* a notice or transfer that could not be posted */
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
    uint64_t tag = CHORUS__TAG_HIDDEN | chorus__tag_base(le64toh(t->msg.seq)) | REFUSAL_TAG;
    chorus_status_t st;
    int k = 0;

    for (int r = 0; r < comm->size; r++) {
        int peer = comm->ranks[r];

        if (r == comm->rank)
            continue;
        st = chorus__ctrl_send(comm->ctx, peer, comm->space, CHORUS__CTRL_REFUSAL, &t->msg,
                               sizeof(t->msg));
        if (st == CHORUS_OK)
            st = chorus__ctx_send(comm->ctx, peer, comm->space, tag, &t->byte_out, 1,
                                  &t->reqs[k]);
        if (st == CHORUS_OK)
            st = chorus__ctx_recv(comm->ctx, peer, comm->space, tag, &t->bytes_in[k / 2], 1,
                                  &t->reqs[k + 1]);
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
 * Over with CHORUS_ERR_INVALID_ARG once every other rank answered; until
 * then this rank starts no later call, which could otherwise take this
 * one's turn on a node team. A failed transfer means another rank did not
 * refuse the call: once every send is out (each follows its notice on the
 * same connection, so every rank that can be told has been), the context
 * fails.
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

        chorus_error("rank %d: rank %d did not refuse call #%llu as this rank did; the "
                     "communicator fails", t->comm->rank, other,
                     (unsigned long long)le64toh(t->msg.seq));
        return t->reqs[failed].status;
    }
    if (failed >= 0 || unsent > 0 || waiting > 0)
        return 0;
    task->status = CHORUS_ERR_INVALID_ARG;
    return 1;
}

static void refusal_finalize(chorus__task_t *task)
{
    refusal_task_t *t = (refusal_task_t *)task;

    if (t == NULL)
        return;
    free(t->reqs);
    free(t->bytes_in);
    free(t);
}

static const chorus__task_ops_t refusal_ops = {
    .name = "refused call",
    .post = refusal_post,
    .progress = refusal_progress,
    .finalize = refusal_finalize,
};

chorus_status_t chorus__refusal_task_create(chorus_comm_t comm, const coll_args_t *args,
                                            uint64_t seq, const char *why,
                                            chorus__task_t **task_p)
{
    refusal_task_t *t = calloc(1, sizeof(*t));
    size_t peers = (size_t)comm->size - 1;

    if (t == NULL)
        return CHORUS_ERR_NO_MEMORY;
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

chorus_status_t chorus__refusal_advance(chorus_comm_t comm, uint64_t seq, int refused)
{
    chorus__refusal_t *rf = comm->refusal;
    refusal_note_t *theirs, *mine = NULL, *conflict = NULL;
    int arrived = 0;

    if (refused && comm->size > 1) {
        mine = calloc(1, sizeof(*mine));
        if (mine == NULL)
            chorus_warn("rank %d: no memory to remember refused call #%llu; its peers' "
                        "notices will fail the communicator", comm->rank,
                        (unsigned long long)seq);
    }
    pthread_mutex_lock(&rf->lock);
    while ((theirs = note_take(&rf->pending, seq)) != NULL) {
        arrived++;
        if (refused || conflict != NULL)
            free(theirs);
        else
            conflict = theirs;
    }
    if (mine != NULL && arrived < comm->size - 1) {
        mine->seq = seq;
        mine->rank = comm->rank;
        mine->left = comm->size - 1 - arrived;
        mine->next = rf->mine;
        rf->mine = mine;
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

/* ---- notices from peers --------------------------------------------------- */

/* Under ctx->lock: what this rank makes of a peer's notice; a note to log, or NULL. */
static refusal_note_t *refusal_note_peer(chorus_comm_t comm, refusal_note_t *n)
{
    chorus__refusal_t *rf = comm->refusal;
    refusal_note_t *mine;

    pthread_mutex_lock(&rf->lock);
    mine = note_find(rf->mine, n->seq);
    if (mine != NULL) {
        /* Refused here too: every rank passed the same bad argument. */
        if (--mine->left == 0)
            free(note_take(&rf->mine, n->seq));
        free(n);
        n = NULL;
    } else if (n->seq >= atomic_load(&comm->next_seq)) {
        /* Not posted here yet: decided when it is. */
        n->next = rf->pending;
        rf->pending = n;
        n = NULL;
    }
    pthread_mutex_unlock(&rf->lock);
    return n;
}

void chorus__refusal_receive(chorus__ctx_t *ctx, int peer, uint32_t space, const void *msg,
                             size_t len)
{
    refusal_msg_t m;
    refusal_note_t *n;
    chorus_comm_t comm;

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
    n->seq = le64toh(m.seq);
    n->rank = comm->rank_of[peer];
    n->coll = (coll_type_t)le32toh(m.coll);
    memcpy(n->why, m.why, sizeof(n->why));
    n->why[sizeof(n->why) - 1] = '\0';
    n = refusal_note_peer(comm, n);
    if (n != NULL)
        refusal_conflict(comm, n);
    pthread_mutex_unlock(&ctx->lock);
    free(n);
}
