/*
 * The state machine of a team call, and the turns that order the calls.
 *
 * Staging calls run in rounds of at most one slot of data; each round:
 * every rank copies its part into its slot and posts; then, once all have
 * posted, each rank reads what it needs from every slot (the whole chunk,
 * or only its own slice, which it reduces in its slot for the others to
 * copy out in a third step). The two slots alternate, so the next round's
 * copy-in only waits until every rank is done with the slot it overwrites.
 * What each collective copies in and out is in shm_stage.c and
 * shm_alltoall.c; single-copy calls are in shm_cma.c, calls on device
 * buffers in shm_cuda.c.
 *
 * The first round's wait also checks every rank's whole fingerprint of the
 * call (published beside its step word), so that ranks that called with
 * different arguments fail instead of reading each other's data wrongly.
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "transports/shm/shm_internal.h"
#include "util/log.h"

enum { PH_START, PH_SETTLE, PH_SLOT, PH_IN, PH_MID, PH_CMA, PH_CUDA, PH_LL, PH_DONE };

/* Elements of each rank's part per round: a slot, shared by the parts it holds. */
static size_t round_elems(const shm_node_t *node, coll_type_t coll, size_t esize)
{
    size_t per = node->cfg.slot_bytes / esize, parts = 1, unit = shm_unit(esize);

    if (coll == COLL_REDUCE_SCATTER)
        parts = (size_t)node->n;
    else if (coll == COLL_ALLTOALL && node->n > 1)
        parts = (size_t)node->n - 1;
    per /= parts;
    /* Parts that start on cache lines copy faster and share no line. */
    return parts > 1 && per > unit ? per / unit * unit : per;
}

/* The longest part of any rank, which sets the number of rounds. */
static size_t longest_part(const coll_args_t *a)
{
    size_t m = 0;

    if (a->counts == NULL)
        return a->count;
    for (int j = 0; j < a->size; j++)
        m = a->counts[j] > m ? a->counts[j] : m;
    return m;
}

/* The bytes of the whole vector: what decides the streaming copies. */
static size_t whole_bytes(const coll_args_t *a, size_t esize)
{
    size_t total = 0;

    if (a->counts != NULL) {
        for (int j = 0; j < a->size; j++)
            total += a->counts[j];
        return total * esize;
    }
    if (a->coll == COLL_ALLGATHER || a->coll == COLL_REDUCE_SCATTER ||
        a->coll == COLL_ALLTOALL)
        return a->count * esize * (size_t)a->size;
    return a->count * esize;
}

/*
 * The node's next turn. Calls take their turns in call order, under the
 * communicator's post lock (or while its holder waits for the progress
 * thread to take them, for a refused call): never two at once, so a load
 * and a store do, without a locked add.
 */
static uint64_t take_ticket(shm_node_t *node)
{
    uint64_t t = atomic_load_explicit(&node->next_ticket, memory_order_relaxed);

    atomic_store_explicit(&node->next_ticket, t + 1, memory_order_relaxed);
    return t;
}

void shm_op_init(shm_op_t *op, shm_node_t *node, const coll_args_t *args, shm_kind_t kind)
{
    memset(op, 0, sizeof(*op));
    op->node = node;
    op->args = *args;
    op->asked = kind;
    /* Only reductions to every rank or to a root have a slice variant. */
    if (kind == SHM_SLICE && args->coll != COLL_ALLREDUCE && args->coll != COLL_REDUCE)
        kind = SHM_FLAT;
    /* Small calls only; the rest stage (every rank decides alike from the call). */
    if (kind == SHM_LL && !shm_ll_fits(args))
        kind = SHM_FLAT;
    op->kind = kind;
    op->esize = chorus_dtype_size(args->dtype);
    op->bytes = whole_bytes(args, op->esize);
    op->fp = shm_fingerprint(args, kind);
    op->tag = shm_fp_tag(op->fp);
    op->ticket = take_ticket(node);
    op->wait_peer = -1;
    if (args->coll == COLL_BARRIER) {
        op->nrounds = 1;
        return;
    }
    /* A small call is one step, or none when it moves nothing. */
    if (kind == SHM_LL) {
        op->nrounds = args->count > 0;
        shm_ll_init(op);
        return;
    }
    op->per = op->esize ? round_elems(node, args->coll, op->esize) : 0;
    op->nrounds = op->per ? (longest_part(args) + op->per - 1) / op->per : 0;
    if (kind == SHM_CUDA)
        shm_cuda_op_init(op);
}

int shm_op_same_shape(const shm_op_t *op, const coll_args_t *args, shm_kind_t kind)
{
    /* Neither a v-form: the field comparison then leaves only the buffers free. */
    return kind == op->asked && kind != SHM_CUDA && args->counts == NULL &&
           coll_args_same_shape(args, &op->args);
}

/*
 * A call of a shape that ran before: its progress as shm_op_init leaves it,
 * and the node's next turn. What the shape gives (fingerprint, form,
 * rounds, sizes) is kept; the CUDA fields are never set outside SHM_CUDA,
 * which no call repeats this way.
 */
static void op_restart(shm_op_t *op)
{
    op->ticket = take_ticket(op->node);
    op->phase = PH_START;
    op->base = 0;
    op->wait_step = 0;
    op->wait_peer = -1;
    op->wait_word = NULL;
    op->round = 0;
    op->mem_marks = 0;
    op->mem_agreed = 0;
    op->mem_direct = 0;
    op->ll_posted = 0;
    op->ll_ready = 0;
}

void shm_op_again(shm_op_t *op, const coll_args_t *args)
{
    op->args = *args;
    op_restart(op);
}

int shm_op_rearm(shm_op_t *op, const void *sendbuf, void *recvbuf)
{
    if (op->asked == SHM_CUDA || op->kind == SHM_CUDA || op->args.counts != NULL)
        return -1;
    op->args.sendbuf = sendbuf;
    op->args.recvbuf = recvbuf;
    op_restart(op);
    return 0;
}

void shm_op_release(shm_op_t *op)
{
    if (op->kind == SHM_CUDA)
        shm_cuda_op_release(op);
}

/*
 * The turn being served is over (turn_lock held): serve the turns given up
 * before they came, then publish the next one. The release store makes
 * everything this thread did to the node visible to the thread that sees
 * the new value.
 */
static void turn_pass(shm_node_t *node)
{
    uint64_t next = atomic_load_explicit(&node->serving, memory_order_relaxed) + 1;

    for (size_t i = 0; i < node->nskipped;) {
        if (node->skipped[i] != next) {
            i++;
            continue;
        }
        node->skipped[i] = node->skipped[--node->nskipped];
        next++;
        i = 0;
    }
    atomic_store_explicit(&node->serving, next, memory_order_release);
}

/* Remember a turn given up before it came (turn_lock held); 0 when out of memory. */
static int turn_remember(shm_node_t *node, uint64_t ticket)
{
    if (node->nskipped == node->skipped_cap) {
        size_t cap = node->skipped_cap ? 2 * node->skipped_cap : 8;
        uint64_t *grown = realloc(node->skipped, cap * sizeof(*grown));

        if (grown == NULL)
            return 0;
        node->skipped = grown;
        node->skipped_cap = cap;
    }
    node->skipped[node->nskipped++] = ticket;
    return 1;
}

void shm_op_skip(shm_op_t *op)
{
    shm_node_t *node = op->node;

    chorus__spin_lock(&node->turn_lock);
    if (atomic_load_explicit(&node->serving, memory_order_relaxed) == op->ticket) {
        turn_pass(node);
    } else if (!turn_remember(node, op->ticket)) {
        /* The turn cannot be remembered: later calls must not wait for it forever. */
        chorus_error("local rank %d: no memory to skip a node-local call", node->me);
        atomic_store(&node->broken, 1);
    }
    chorus__spin_unlock(&node->turn_lock);
}

static int op_finish(shm_op_t *op)
{
    shm_node_t *node = op->node;

    chorus__spin_lock(&node->turn_lock);
    turn_pass(node);
    chorus__spin_unlock(&node->turn_lock);
    op->phase = PH_DONE;
    return 1;
}

static int op_wait(shm_op_t *op, uint64_t step)
{
    int rc = shm_reached(op->node, step, op->base, op->tag, &op->wait_peer);

    if (rc == 0)
        op->wait_step = step;
    else if (rc < 0)
        shm_node_fail(op->node, (chorus_status_t)rc);
    return rc;
}

static void end_round(shm_op_t *op)
{
    shm_node_t *node = op->node;

    node->slot_free[node->slot] = node->step;
    node->slot ^= 1;
    op->round++;
    op->phase = PH_SLOT;
}

/* The first phase of the call's own work. */
static int op_first_phase(const shm_op_t *op)
{
    if (op->kind == SHM_CUDA)
        return PH_CUDA;
    if (op->kind == SHM_LL)
        return PH_LL;
    return op->kind == SHM_CMA && op->args.coll != COLL_BARRIER ? PH_CMA : PH_SLOT;
}

/* 2: this call's turn has come; 0: an earlier call still runs; < 0: the node is broken. */
static int op_start(shm_op_t *op)
{
    shm_node_t *node = op->node;

    if (atomic_load_explicit(&node->broken, memory_order_relaxed)) {
        chorus_error("local rank %d: an earlier node-local call failed part way; the "
                     "communicator cannot run more", node->me);
        return CHORUS_ERR_PEER_FAILED;
    }
    if (atomic_load_explicit(&node->serving, memory_order_acquire) != op->ticket) {
        op->wait_peer = -1;
        return 0;
    }
    op->base = node->step;
    if (op->nrounds == 0)
        return op_finish(op);
    /* A small call before this one returned before it saw every peer's part: first that. */
    op->phase = shm_ll_owed(op) ? PH_SETTLE : op_first_phase(op);
    return 2;
}

/* Copy this round's part in and post it. 1: posted; 0 or < 0: as op_wait. */
static int op_copy_in(shm_op_t *op)
{
    shm_node_t *node = op->node;
    int rc;

    if (op->args.coll != COLL_BARRIER) {
        if ((rc = op_wait(op, node->slot_free[node->slot])) <= 0)
            return rc;
        if (op->round == 0) {
            op->mem_marks = shm_mem_mark(op);
            atomic_store_explicit(&node->ctrl[node->me]->stage_fp[node->slot],
                                  op->fp | op->mem_marks, memory_order_relaxed);
        }
        if (op->args.coll == COLL_ALLTOALL)
            shm_a2a_stage_in(op);
        else if (!(op->mem_marks & SHM_FP_SKIP))
            shm_stage_in(op);
    }
    shm_post(node, op->tag);
    op->phase = PH_IN;
    return 1;
}

/* Every rank's part is in: take this rank's out (or reduce its slice first). */
static int op_take_out(shm_op_t *op)
{
    shm_node_t *node = op->node;
    int rc;

    if ((rc = op_wait(op, node->step)) <= 0)
        return rc;
    if (op->args.coll == COLL_BARRIER) {
        op->round++;
        return op_finish(op);
    }
    if (op->round == 0 && !op->mem_agreed) {
        int marked, skipped;

        if ((rc = shm_stage_check(node, node->slot, op->fp, &marked, &skipped)) < 0) {
            shm_node_fail(node, (chorus_status_t)rc);
            return rc;
        }
        op->mem_agreed = 1;
        /* Every rank's buffers are chorus memory, published: a single-copy call from here. */
        if (marked == node->n) {
            op->mem_direct = 1;
            op->round = 1;
            op->phase = PH_CMA;
            return 2;
        }
        /* Some are, and skipped their copy in: they copy in after all, one step later. */
        if (skipped > 0) {
            if (op->mem_marks & SHM_FP_SKIP)
                shm_stage_in(op);
            op->mem_marks = 0;      /* later rounds copy in as usual */
            shm_post(node, op->tag);
            return 2;
        }
    }
    if (op->kind == SHM_SLICE) {
        shm_stage_slice(op);
        shm_post(node, op->tag);
        op->phase = PH_MID;
        return 2;
    }
    if (op->args.coll == COLL_ALLTOALL)
        shm_a2a_stage_out(op);
    else
        shm_stage_out(op);
    shm_post(node, op->tag);
    end_round(op);
    return 2;
}

int shm_op_progress(shm_op_t *op)
{
    shm_node_t *node = op->node;
    int rc;

    for (;;) {
        switch (op->phase) {
        case PH_START:
            rc = op_start(op);
            break;
        case PH_SETTLE:
            if ((rc = shm_ll_settle(op)) < 0)
                shm_node_fail(node, (chorus_status_t)rc);
            if (rc <= 0)
                return rc;
            op->phase = op_first_phase(op);
            break;
        case PH_CMA:
        case PH_CUDA:
        case PH_LL:
            rc = op->phase == PH_CMA    ? shm_cma_progress(op)
                 : op->phase == PH_CUDA ? shm_cuda_progress(op)
                                        : shm_ll_progress(op);
            if (rc == 1)
                return op_finish(op);
            if (rc < 0)
                shm_node_fail(node, (chorus_status_t)rc);
            return rc;
        case PH_SLOT:
            rc = op->round == op->nrounds ? op_finish(op) : op_copy_in(op);
            break;
        case PH_IN:
            rc = op_take_out(op);
            break;
        case PH_MID:
            if ((rc = op_wait(op, node->step)) <= 0)
                return rc;
            shm_stage_out(op);
            shm_post(node, op->tag);
            end_round(op);
            break;
        default:
            return 1;
        }
        if (rc <= 0 || op->phase == PH_DONE)
            return rc;
    }
}

void shm_op_wait(shm_op_t *op, unsigned max_us)
{
    if (op->phase == PH_START || op->wait_peer < 0) {
        sched_yield();
        return;
    }
    shm_sleep(op->node, op->wait_peer, op->wait_word, op->wait_step, max_us);
}
