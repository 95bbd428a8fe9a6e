/* Calls refused for their arguments keep their place: see refusal.h. */
#include "core/refusal.h"

#include <endian.h>
#include <stdlib.h>
#include <string.h>

#include "core/ctrl.h"
#include "util/fence.h"
#include "util/log.h"
#include "util/spinlock.h"

#define REFUSAL_MAGIC 0x72656675u   /* "refu" */

/* Calls whose shape a rank remembers after posting them, for learning ranks that ask late. */
#define REFUSAL_RING 16

/* The notice of a refused call, as it travels. */
typedef struct {
    uint32_t magic;
    uint32_t coll;
    uint32_t kind;              /* chorus__refused_t: STOP, JOIN or LEARN */
    uint32_t reserved;
    uint64_t seq;
    char why[CHORUS__REFUSAL_WHY_MAX];
} refusal_msg_t;

/* A call's shape, as a rank tells it to a learning rank (little-endian on the wire). */
typedef struct {
    uint32_t known;             /* 0: this rank has no valid shape for the call; else
                                 * SHAPE_KNOWN, and SHAPE_DEVICE for a device call */
    uint32_t coll;
    uint32_t dtype;
    uint32_t op;
    int32_t root;
    uint32_t wire;              /* compression: chorus_dtype_t, CHORUS_DTYPE_COUNT for none */
    uint64_t count;
} refusal_shape_t;

#define SHAPE_KNOWN 1u
#define SHAPE_DEVICE 2u             /* coll_args_t.dev_call: the ranks run it on the devices */

/* A refused call: one of this rank's, or a peer's. */
typedef struct refusal_note {
    struct refusal_note *next;
    uint64_t seq;
    int rank;                   /* the refusing rank (of the communicator) */
    int left;                   /* this rank's stopping refusal: peers' notices still due */
    chorus__refused_t kind;
    coll_type_t coll;
    char why[CHORUS__REFUSAL_WHY_MAX];
    int ctx_peer;               /* the refusing rank in the context, and the space, */
    uint32_t space;             /* where a reply goes */
    refusal_shape_t shape;      /* owed or due: what to tell the learning rank */
} refusal_note_t;

/* A call posted here lately. */
typedef struct {
    uint64_t seq;
    int used;
    refusal_shape_t shape;
} refusal_posted_t;

struct chorus__refusal {
    /* A leaf lock: taken under post_lock or ctx->lock, never around either. */
    chorus__spinlock_t lock;
    /* Calls refused here: stopping ones until their peers' notices are in, others until over. */
    refusal_note_t *mine;
    refusal_note_t *pending;    /* peers' stopping notices of calls not yet posted here */
    refusal_note_t *joined;     /* peers' joining or learning notices of calls not yet over here */
    refusal_note_t *owed;       /* learning notices of calls not yet posted here: shape owed */
    refusal_note_t *due;        /* shapes owed of calls now posted: the progress thread sends */
    atomic_int njoin;           /* notes in joined and non-stopping ones in mine */
    int fence_ready;            /* the handlers' barrier stands for the calls' (outcome) */
    refusal_posted_t ring[REFUSAL_RING];
};

/*
 * The low tag bits of the replies to a notice (with CHORUS__TAG_HIDDEN and
 * the call's number, like the debug check's exchange, whose ring tags are
 * small): the exchange by which the ranks that stopped a call learn that
 * every other rank did too, the acknowledgements of a joining notice, and
 * the shapes sent to a learning rank.
 */
#define REFUSAL_TAG 0xfffffff0u
#define REFUSAL_ACK_TAG 0xfffffff1u
#define REFUSAL_SHAPE_TAG 0xfffffff2u

typedef struct {
    chorus__task_t head;
    chorus_comm_t comm;
    refusal_msg_t msg;
    chorus__refused_t kind;
    int nreqs;                  /* a send and a receive per other rank (sends done at once
                                   unless stopping) */
    tl_req_t *reqs;
    unsigned char byte_out, *bytes_in;
    refusal_shape_t *shapes;    /* learning: each other rank's reply */
    chorus_status_t post_status;    /* a notice or transfer that could not be posted */
} refusal_task_t;

chorus_status_t chorus__refusal_create(chorus_comm_t comm)
{
    comm->refusal = calloc(1, sizeof(*comm->refusal));
    if (comm->refusal == NULL)
        return CHORUS_ERR_NO_MEMORY;
    comm->refusal->fence_ready = chorus__fence_ready(CHORUS__FENCE_PROCESS);
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
    note_free_list(refusal->owed);
    note_free_list(refusal->due);
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

/* Unlink and return the first note of seq in *list that stops (stop set) or not, or NULL. */
static refusal_note_t *note_take_stop(refusal_note_t **list, uint64_t seq, int stop)
{
    for (refusal_note_t **link = list; *link != NULL; link = &(*link)->next) {
        refusal_note_t *n = *link;

        if (n->seq == seq && (n->kind == CHORUS__REFUSED_STOP) == stop) {
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
 * post what each answers in the call's hidden tag. Stopping: exchange one
 * byte with each: a rank that stopped the call too answers in kind; one
 * that did not fails its context at our notice, its connections close, and
 * our transfer with it fails. Joining: one byte from each, sent once it has
 * noted the notice. Learning: the call's shape from each, as it knows it.
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
        if (st == CHORUS_ERR_PEER_FAILED && t->kind != CHORUS__REFUSED_STOP) {
            /* Gone already: it takes no data of this call (refusal_progress). */
            t->reqs[k].done = t->reqs[k + 1].done = 1;
            t->reqs[k + 1].status = CHORUS_ERR_PEER_FAILED;
            k += 2;
            continue;
        }
        if (st == CHORUS_OK && t->kind != CHORUS__REFUSED_STOP)
            t->reqs[k].done = 1;    /* no byte of ours: the peer replies as a hidden message */
        else if (st == CHORUS_OK)
            st = chorus__ctx_send(comm->ctx, peer, comm->space, base | REFUSAL_TAG,
                                  &t->byte_out, 1, &t->reqs[k]);
        if (st == CHORUS_OK && t->kind == CHORUS__REFUSED_LEARN)
            st = chorus__ctx_recv(comm->ctx, peer, comm->space, base | REFUSAL_SHAPE_TAG,
                                  &t->shapes[k / 2], sizeof(t->shapes[0]), &t->reqs[k + 1]);
        else if (st == CHORUS_OK)
            st = chorus__ctx_recv(comm->ctx, peer, comm->space,
                                  base | (t->kind == CHORUS__REFUSED_JOIN ? REFUSAL_ACK_TAG
                                                                          : REFUSAL_TAG),
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
 * Joining and learning: over with CHORUS_OK once every other rank replied
 * or is gone (a rank whose part of the call was over before the notice may
 * have left, and takes no data of it), so that the call may run; a rank that
 * stopped the call fails its context instead, and the receive from it fails.
 */
static int refusal_progress(chorus__task_t *task)
{
    refusal_task_t *t = (refusal_task_t *)task;
    int failed = -1, unsent = 0, waiting = 0;

    if (t->post_status != CHORUS_OK)
        return t->post_status;
    for (int i = 0; i < t->nreqs; i++) {
        if (!t->reqs[i].done) {
            *(i % 2 == 0 ? &unsent : &waiting) += 1;    /* even: sends, odd: receives */
        } else if (t->reqs[i].status == CHORUS_ERR_PEER_FAILED &&
                   t->kind != CHORUS__REFUSED_STOP) {
            /* Gone (its part over, or dead): it takes no data of this call, and tells nothing. */
            if (t->kind == CHORUS__REFUSED_LEARN)
                memset(&t->shapes[i / 2], 0, sizeof(t->shapes[0]));
        } else if (t->reqs[i].status != CHORUS_OK && failed < 0) {
            failed = i;
        }
    }
    if (failed >= 0 && unsent == 0) {
        int other = failed / 2 < t->comm->rank ? failed / 2 : failed / 2 + 1;

        chorus_error("rank %d: rank %d did not %s call #%llu; the communicator fails",
                     t->comm->rank, other,
                     t->kind == CHORUS__REFUSED_STOP ? "refuse, as this rank did,"
                                                     : "answer this rank's refusal of",
                     (unsigned long long)le64toh(t->msg.seq));
        return t->reqs[failed].status;
    }
    if (failed >= 0 || unsent > 0 || waiting > 0)
        return 0;
    task->status = t->kind == CHORUS__REFUSED_STOP ? CHORUS_ERR_INVALID_ARG : CHORUS_OK;
    return 1;
}

static void refusal_finalize(chorus__task_t *task)
{
    refusal_task_t *t = (refusal_task_t *)task;

    free(t->reqs);
    free(t->bytes_in);
    free(t->shapes);
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
                                            chorus__refused_t kind,
                                            chorus__task_t **task_p)
{
    refusal_task_t *t = calloc(1, sizeof(*t));
    size_t peers = (size_t)comm->size - 1;

    if (t == NULL)
        return CHORUS_ERR_NO_MEMORY;
    chorus__task_init(&t->head, &refusal_ops, 0);
    t->comm = comm;
    t->kind = kind;
    t->nreqs = 2 * (int)peers;
    t->reqs = calloc(2 * peers + 1, sizeof(*t->reqs));
    t->bytes_in = calloc(peers + 1, 1);
    t->shapes = calloc(peers + 1, sizeof(*t->shapes));
    if (t->reqs == NULL || t->bytes_in == NULL || t->shapes == NULL) {
        refusal_finalize(&t->head);
        return CHORUS_ERR_NO_MEMORY;
    }
    t->msg.magic = htole32(REFUSAL_MAGIC);
    t->msg.coll = htole32((uint32_t)args->coll);
    t->msg.kind = htole32((uint32_t)kind);
    t->msg.seq = htole64(seq);
    strncpy(t->msg.why, why, sizeof(t->msg.why) - 1);
    *task_p = &t->head;
    return CHORUS_OK;
}

/* A shape from the wire, checked: 1 when it is one a valid call of comm could have. */
static int shape_decode(chorus_comm_t comm, const refusal_shape_t *w, coll_args_t *a,
                        chorus_dtype_t *wire_p)
{
    coll_type_t coll = (coll_type_t)le32toh(w->coll);
    chorus_dtype_t dtype = (chorus_dtype_t)le32toh(w->dtype), wire;
    chorus_op_t op = (chorus_op_t)le32toh(w->op);
    int root = (int32_t)le32toh((uint32_t)w->root);
    uint64_t count = le64toh(w->count);
    uint32_t known = le32toh(w->known);

    wire = (chorus_dtype_t)le32toh(w->wire);
    if (!(known & SHAPE_KNOWN) || (unsigned)coll >= COLL_TYPE_COUNT ||
        (unsigned)dtype >= CHORUS_DTYPE_COUNT || (unsigned)op >= CHORUS_OP_COUNT ||
        root < 0 || root >= comm->size || count > SIZE_MAX ||
        (wire != CHORUS_DTYPE_COUNT && wire != CHORUS_FLOAT16 && wire != CHORUS_BFLOAT16))
        return 0;
    a->coll = coll;
    a->dtype = dtype;
    a->op = op;
    a->root = root;
    a->count = (size_t)count;
    a->dev_call = (known & SHAPE_DEVICE) != 0;
    *wire_p = wire;
    return 1;
}

int chorus__refusal_learned(const chorus__task_t *task, coll_args_t *shape,
                            chorus_dtype_t *wire_p)
{
    const refusal_task_t *t = (const refusal_task_t *)task;
    chorus_comm_t comm = t->comm;
    int from = -1;

    for (int k = 0; k < comm->size - 1; k++) {
        coll_args_t theirs = *shape;
        chorus_dtype_t wire;
        int r = k < comm->rank ? k : k + 1;

        if (!shape_decode(comm, &t->shapes[k], &theirs, &wire))
            continue;
        if (from < 0) {
            *shape = theirs;
            *wire_p = wire;
            from = r;
        } else if (theirs.coll != shape->coll || theirs.count != shape->count ||
                   theirs.dtype != shape->dtype || theirs.op != shape->op ||
                   theirs.root != shape->root || theirs.dev_call != shape->dev_call ||
                   wire != *wire_p) {
            chorus_warn("rank %d: ranks %d and %d made call #%llu differently; this rank "
                        "runs it as rank %d did", comm->rank, from, r,
                        (unsigned long long)le64toh(t->msg.seq), from);
        }
    }
    return from >= 0;
}

/* ---- numbering ------------------------------------------------------------ */

/* Log a peer's refusal n and what it means for this rank's call of that number. */
static void refusal_log(chorus_comm_t comm, const refusal_note_t *n, const char *what)
{
    const char *coll = coll_type_name(n->coll);

    chorus_error("rank %d: rank %d refused %s #%llu (%s); %s", comm->rank, n->rank,
                 coll != NULL ? coll : "call", (unsigned long long)n->seq, n->why, what);
}

static void refusal_conflict(chorus_comm_t comm, const refusal_note_t *n)
{
    refusal_log(comm, n, "this rank's call of that number cannot complete without it, so "
                         "the communicator fails");
    chorus__ctx_fail(comm->ctx, CHORUS_ERR_INVALID_ARG);
}

/* Under rf->lock: remember call seq's shape here (known: args is a valid call's). */
static void refusal_remember(chorus__refusal_t *rf, uint64_t seq, const coll_args_t *args,
                             chorus_dtype_t wire, int known)
{
    refusal_posted_t *p = &rf->ring[seq % REFUSAL_RING];

    memset(p, 0, sizeof(*p));
    p->seq = seq;
    p->used = 1;
    if (!known || args == NULL)
        return;
    p->shape.known =
        htole32(SHAPE_KNOWN | (args->dev_call && args->counts == NULL ? SHAPE_DEVICE : 0));
    p->shape.coll = htole32((uint32_t)args->coll);
    p->shape.dtype = htole32((uint32_t)args->dtype);
    p->shape.op = htole32((uint32_t)args->op);
    p->shape.root = (int32_t)htole32((uint32_t)args->root);
    p->shape.wire = htole32((uint32_t)wire);
    p->shape.count = htole64((uint64_t)args->count);
}

/* Under rf->lock: the shape of call seq as remembered here; 0 when it is not. */
static int refusal_recall(const chorus__refusal_t *rf, uint64_t seq, refusal_shape_t *shape)
{
    const refusal_posted_t *p = &rf->ring[seq % REFUSAL_RING];

    if (!p->used || p->seq != seq)
        return 0;
    *shape = p->shape;
    return 1;
}

chorus_status_t chorus__refusal_advance(chorus_comm_t comm, uint64_t seq,
                                        chorus__refused_t refused, const coll_args_t *shape,
                                        chorus_dtype_t wire)
{
    chorus__refusal_t *rf = comm->refusal;
    refusal_note_t *theirs, *mine = NULL, *conflict = NULL;
    int arrived = 0, due = 0;

    if (refused != CHORUS__REFUSED_NOT && comm->size > 1) {
        mine = calloc(1, sizeof(*mine));
        if (mine == NULL)
            chorus_warn("rank %d: no memory to remember refused call #%llu; its peers' "
                        "notices will fail the communicator", comm->rank,
                        (unsigned long long)seq);
    }
    chorus__spin_lock(&rf->lock);
    refusal_remember(rf, seq, shape, wire,
                     refused == CHORUS__REFUSED_NOT || refused == CHORUS__REFUSED_JOIN);
    /* Learning ranks that asked before this call was posted: tell them now. */
    while ((theirs = note_take(&rf->owed, seq)) != NULL) {
        refusal_recall(rf, seq, &theirs->shape);
        note_push(&rf->due, theirs);
        due = 1;
    }
    /* Stopping notices pair only with a stopping refusal here. */
    while ((theirs = note_take(&rf->pending, seq)) != NULL) {
        arrived++;
        if (refused == CHORUS__REFUSED_STOP || conflict != NULL)
            free(theirs);
        else
            conflict = theirs;
    }
    /* A joining or learning rank waits for a reply that a stopping rank never sends. */
    if (refused == CHORUS__REFUSED_STOP && conflict == NULL &&
        (theirs = note_find(rf->joined, seq)) != NULL) {
        conflict = calloc(1, sizeof(*conflict));
        if (conflict != NULL)
            *conflict = *theirs;
        else
            chorus__ctx_fail(comm->ctx, CHORUS_ERR_NO_MEMORY);
    }
    if (mine != NULL &&
        (refused != CHORUS__REFUSED_STOP || arrived < comm->size - 1)) {
        mine->seq = seq;
        mine->rank = comm->rank;
        mine->kind = refused;
        mine->left = refused == CHORUS__REFUSED_STOP ? comm->size - 1 - arrived : 0;
        note_push(&rf->mine, mine);
        if (refused != CHORUS__REFUSED_STOP)
            atomic_fetch_add(&rf->njoin, 1);
        mine = NULL;
    }
    /* Under the lock, which orders it for the notices' handlers; others only read it. */
    atomic_store_explicit(&comm->next_seq, seq + 1, memory_order_release);
    chorus__spin_unlock(&rf->lock);
    free(mine);
    if (due) {
        atomic_store(&comm->ctx->refusal_due, 1);
        chorus__progress_wake(comm->ctx);
    }
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

    /*
     * The progress thread completes calls and handles notices alike: nothing
     * can come between. A call of the calling thread stops being in flight
     * first; a notice's handler counts itself in njoin before it looks
     * whether the call is in flight (refusal_note_join). So when njoin is 0
     * after the store, any notice of seq comes later and finds it returned.
     * Both sides store, then load: the handler's barrier stands for this
     * one's where the process has them (chorus__fence_heavy), as notices are
     * rare and calls many.
     */
    if (inline_call) {
        atomic_store_explicit(&comm->inline_seq, CHORUS__NO_SEQ, memory_order_release);
        chorus__fence_light(rf->fence_ready);
    }
    if (atomic_load_explicit(&rf->njoin, memory_order_relaxed) == 0)
        return status;
    chorus__spin_lock(&rf->lock);
    while ((n = note_take(&rf->joined, seq)) != NULL) {
        if (first == NULL)
            first = n;
        else
            free(n);
        atomic_fetch_sub(&rf->njoin, 1);
    }
    if ((n = note_take_stop(&rf->mine, seq, 0)) != NULL) {
        free(n);
        atomic_fetch_sub(&rf->njoin, 1);
    }
    chorus__spin_unlock(&rf->lock);
    if (first == NULL)
        return status;
    refusal_log(comm, first, "this rank's call of that number fails with it");
    free(first);
    return status == CHORUS_OK ? CHORUS_ERR_INVALID_ARG : status;
}

/* ---- notices from peers --------------------------------------------------- */

/* Under ctx->lock: what this rank makes of a peer's stopping notice; a note to log, or NULL. */
static refusal_note_t *refusal_note_stop(chorus_comm_t comm, refusal_note_t *n)
{
    chorus__refusal_t *rf = comm->refusal;
    refusal_note_t *mine;

    chorus__spin_lock(&rf->lock);
    mine = note_find(rf->mine, n->seq);
    if (mine != NULL && mine->kind == CHORUS__REFUSED_STOP) {
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
    chorus__spin_unlock(&rf->lock);
    return n;
}

/* What a joining or learning notice asks of this rank once the locks are released. */
typedef enum { REPLY_NONE = 0, REPLY_ACK, REPLY_SHAPE } refusal_reply_t;

/*
 * Under ctx->lock: a peer's joining or learning notice, n. It is kept until
 * this rank's call of that number is over (which then fails with it and
 * logs it), unless that call returned already (logged now). A learning rank
 * is owed the call's shape as this rank made it: in *shape now, or when the
 * call is posted (owed, a copy of n). Returns the reply to send now;
 * REPLY_NONE also when this rank stopped the call (the context then fails).
 */
static refusal_reply_t refusal_note_join(chorus_comm_t comm, refusal_note_t *n,
                                         refusal_note_t *owed, refusal_shape_t *shape)
{
    chorus__refusal_t *rf = comm->refusal;
    refusal_reply_t reply = n->kind == CHORUS__REFUSED_JOIN ? REPLY_ACK : REPLY_SHAPE;
    refusal_note_t *mine;
    int keep, posted;

    chorus__spin_lock(&rf->lock);
    mine = note_find(rf->mine, n->seq);
    if (mine != NULL && mine->kind == CHORUS__REFUSED_STOP) {
        chorus__spin_unlock(&rf->lock);
        refusal_conflict(comm, n);
        free(n);
        free(owed);
        return REPLY_NONE;
    }
    /* Counted before the look at the calls in flight: see chorus__refusal_outcome. */
    atomic_fetch_add(&rf->njoin, 1);
    if (rf->fence_ready && chorus__fence_heavy(CHORUS__FENCE_PROCESS) != 0) {
        /* Registered, so it cannot fail; if it did, whether the call is over is unknown. */
        chorus_error("rank %d: membarrier failed while a refusal notice of call #%llu was "
                     "handled: %m", comm->rank, (unsigned long long)n->seq);
        chorus__ctx_fail(comm->ctx, CHORUS_ERR_INTERNAL);
    }
    posted = n->seq < atomic_load(&comm->next_seq);
    keep = !posted || chorus__call_in_flight(comm, n->seq);
    if (keep)
        note_push(&rf->joined, n);
    else
        atomic_fetch_sub(&rf->njoin, 1);
    if (reply == REPLY_SHAPE) {
        memset(shape, 0, sizeof(*shape));
        if (!posted) {
            *owed = *n;
            note_push(&rf->owed, owed);
            owed = NULL;
            reply = REPLY_NONE;
        } else {
            /* Long over and forgotten: the shape stays unknown. */
            refusal_recall(rf, n->seq, shape);
        }
    }
    chorus__spin_unlock(&rf->lock);
    free(owed);
    if (!keep) {
        refusal_log(comm, n, "this rank's call of that number had returned already");
        free(n);
    }
    return reply;
}

/* Send a joining rank its acknowledgement, or a learning rank the call's shape. */
static void refusal_reply(chorus__ctx_t *ctx, int peer, uint32_t space, uint64_t seq,
                          refusal_reply_t reply, const refusal_shape_t *shape)
{
    static const unsigned char ack = 1;
    uint64_t tag = CHORUS__TAG_HIDDEN | chorus__tag_base(seq) |
                   (reply == REPLY_ACK ? REFUSAL_ACK_TAG : REFUSAL_SHAPE_TAG);

    if (chorus__ctrl_send_hidden(ctx, peer, space, tag,
                                 reply == REPLY_ACK ? (const void *)&ack : (const void *)shape,
                                 reply == REPLY_ACK ? 1 : sizeof(*shape)) == CHORUS_OK)
        return;
    chorus_error("rank %d: could not answer rank %d's refusal of call #%llu", ctx->rank, peer,
                 (unsigned long long)seq);
    chorus__ctx_fail(ctx, CHORUS_ERR_SYSTEM);
}

void chorus__refusal_receive(chorus__ctx_t *ctx, int peer, uint32_t space, const void *msg,
                             size_t len)
{
    refusal_msg_t m;
    refusal_note_t *n, *owed;
    refusal_shape_t shape;
    refusal_reply_t reply;
    chorus_comm_t comm;
    uint64_t seq;

    if (len != sizeof(m)) {
        chorus_debug("rank %d: malformed refusal notice (%zu bytes) from rank %d", ctx->rank,
                     len, peer);
        return;
    }
    memcpy(&m, msg, sizeof(m));
    if (le32toh(m.magic) != REFUSAL_MAGIC || le32toh(m.kind) < CHORUS__REFUSED_STOP ||
        le32toh(m.kind) > CHORUS__REFUSED_LEARN)
        return;
    n = calloc(1, sizeof(*n));
    owed = calloc(1, sizeof(*owed));
    pthread_mutex_lock(&ctx->lock);
    comm = chorus__comm_of_space(ctx, space);
    if (comm == NULL || comm->rank_of[peer] < 0) {
        pthread_mutex_unlock(&ctx->lock);
        chorus_debug("rank %d: refusal notice from rank %d for no communicator here",
                     ctx->rank, peer);
        free(n);
        free(owed);
        /* Destroyed here (every member registers before the first call): it takes no data. */
        memset(&shape, 0, sizeof(shape));
        if (le32toh(m.kind) != CHORUS__REFUSED_STOP)
            refusal_reply(ctx, peer, space, le64toh(m.seq),
                          le32toh(m.kind) == CHORUS__REFUSED_JOIN ? REPLY_ACK : REPLY_SHAPE,
                          &shape);
        return;
    }
    if (n == NULL || owed == NULL) {
        pthread_mutex_unlock(&ctx->lock);
        chorus_error("rank %d: no memory for rank %d's notice of a refused call",
                     comm->rank, comm->rank_of[peer]);
        chorus__ctx_fail(ctx, CHORUS_ERR_NO_MEMORY);
        free(n);
        free(owed);
        return;
    }
    seq = le64toh(m.seq);
    n->seq = seq;
    n->rank = comm->rank_of[peer];
    n->ctx_peer = peer;
    n->space = space;
    n->kind = (chorus__refused_t)le32toh(m.kind);
    n->coll = (coll_type_t)le32toh(m.coll);
    memcpy(n->why, m.why, sizeof(n->why));
    n->why[sizeof(n->why) - 1] = '\0';
    if (n->kind != CHORUS__REFUSED_STOP) {
        /* The note is in place before the reply: the refusing rank may then send its data. */
        reply = refusal_note_join(comm, n, owed, &shape);
        pthread_mutex_unlock(&ctx->lock);
        if (reply != REPLY_NONE)
            refusal_reply(ctx, peer, space, seq, reply, &shape);
        return;
    }
    free(owed);
    n = refusal_note_stop(comm, n);
    if (n != NULL)
        refusal_conflict(comm, n);
    pthread_mutex_unlock(&ctx->lock);
    free(n);
}

void chorus__refusal_flush(chorus__ctx_t *ctx)
{
    refusal_note_t *due = NULL, *n;

    if (atomic_load(&ctx->refusal_due) == 0)
        return;
    /* Cleared first: a call posted while this runs raises it again for the next turn. */
    atomic_store(&ctx->refusal_due, 0);
    pthread_mutex_lock(&ctx->lock);
    for (chorus_comm_t comm = ctx->comms; comm != NULL; comm = comm->next) {
        chorus__refusal_t *rf = comm->refusal;

        chorus__spin_lock(&rf->lock);
        while ((n = rf->due) != NULL) {
            rf->due = n->next;
            note_push(&due, n);
        }
        chorus__spin_unlock(&rf->lock);
    }
    pthread_mutex_unlock(&ctx->lock);
    while ((n = due) != NULL) {
        due = n->next;
        refusal_reply(ctx, n->ctx_peer, n->space, n->seq, REPLY_SHAPE, &n->shape);
        free(n);
    }
}
