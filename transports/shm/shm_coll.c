/*
 * Staging collectives. A call runs in rounds of at most one slot of data;
 * each round: every rank copies its part into its slot and posts; then,
 * once all have posted, each rank reads what it needs from every slot
 * (the whole chunk, or only its own slice, which it reduces in its slot for
 * the others to copy out in a third step). The two slots alternate, so the
 * next round's copy-in only waits until every rank is done with the slot it
 * overwrites. Reductions run in rank order, or over slices reduced by one
 * rank each, so every rank ends with the same bits.
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "reduce/reduce.h"
#include "transports/shm/shm_internal.h"
#include "util/log.h"

enum { PH_START, PH_SLOT, PH_IN, PH_MID, PH_CMA, PH_DONE };

/* Elements per round for every rank's part. */
static size_t round_elems(const shm_op_t *op)
{
    size_t per = op->node->cfg.slot_bytes / op->esize;

    if (op->args.coll == COLL_REDUCE_SCATTER)
        per /= (size_t)op->node->n;
    return per;
}

static uint32_t fingerprint(const coll_args_t *a, shm_kind_t kind)
{
    uint64_t f[] = {(uint64_t)a->coll, a->count, (uint64_t)a->dtype,
                    (uint64_t)(a->coll == COLL_ALLGATHER || a->coll == COLL_BROADCAST ||
                               a->coll == COLL_BARRIER ? 0 : a->op),
                    (uint64_t)a->root, (uint64_t)kind};
    const unsigned char *p = (const unsigned char *)f;
    uint32_t h = 2166136261u;

    for (size_t i = 0; i < sizeof(f); i++)
        h = (h ^ p[i]) * 16777619u;
    return (h ^ (h >> 16)) & 0xffff;
}

void shm_op_init(shm_op_t *op, shm_node_t *node, const coll_args_t *args, shm_kind_t kind)
{
    size_t per = 0;

    memset(op, 0, sizeof(*op));
    op->node = node;
    op->args = *args;
    /* Only reductions to every rank or to a root have a slice variant. */
    if (kind == SHM_SLICE && args->coll != COLL_ALLREDUCE && args->coll != COLL_REDUCE)
        kind = SHM_FLAT;
    op->kind = kind;
    op->esize = chorus_dtype_size(args->dtype);
    op->bytes = args->count * op->esize;
    if (args->coll == COLL_ALLGATHER || args->coll == COLL_REDUCE_SCATTER)
        op->bytes *= (size_t)node->n;
    op->fp = fingerprint(args, kind);
    op->ticket = node->next_ticket++;
    op->wait_peer = -1;
    if (args->coll == COLL_BARRIER) {
        op->nrounds = 1;
        return;
    }
    per = op->esize ? round_elems(op) : 0;
    op->nrounds = per ? (args->count + per - 1) / per : 0;
}

void shm_op_skip(shm_op_t *op)
{
    shm_node_t *node = op->node;
    uint64_t *grown;

    if (node->nskipped == node->skipped_cap) {
        size_t cap = node->skipped_cap ? 2 * node->skipped_cap : 8;
        grown = realloc(node->skipped, cap * sizeof(*grown));
        if (grown == NULL) {
            /* The turn cannot be remembered: later calls must not wait for it forever. */
            chorus_error("local rank %d: no memory to skip a node-local call", node->me);
            node->broken = 1;
            return;
        }
        node->skipped = grown;
        node->skipped_cap = cap;
    }
    node->skipped[node->nskipped++] = op->ticket;
}

/* Turns given up before they came are served as they come. */
static void serve_skipped(shm_node_t *node)
{
    for (size_t i = 0; i < node->nskipped;) {
        if (node->skipped[i] != node->serving) {
            i++;
            continue;
        }
        node->skipped[i] = node->skipped[--node->nskipped];
        node->serving++;
        i = 0;
    }
}

/* [*lo, *hi): this round's elements of every rank's part. */
static void round_range(const shm_op_t *op, size_t *lo, size_t *hi)
{
    size_t per = round_elems(op);

    *lo = op->round * per;
    *hi = *lo + per < op->args.count ? *lo + per : op->args.count;
}

static int is_root(const shm_op_t *op)
{
    return op->args.rank == op->args.root;
}

static void copy_in(shm_op_t *op, char *slot, size_t lo, size_t hi)
{
    const coll_args_t *a = &op->args;
    const char *src = a->sendbuf;
    size_t es = op->esize, len = (hi - lo) * es;

    switch (a->coll) {
    case COLL_BROADCAST:
        if (is_root(op))
            memcpy(slot, src + lo * es, len);
        break;
    case COLL_REDUCE_SCATTER:
        for (int b = 0; b < op->node->n; b++)
            memcpy(slot + (size_t)b * len, src + ((size_t)b * a->count + lo) * es, len);
        break;
    case COLL_BARRIER:
        break;
    default:
        memcpy(slot, src + lo * es, len);
        break;
    }
}

/* dst = reduction over every rank's slot at offset, in rank order. */
static void reduce_all(shm_op_t *op, void *dst, size_t offset, size_t elems)
{
    shm_node_t *node = op->node;
    chorus__reduce_fn fn = chorus__reduce_kernel(op->args.dtype, op->args.op);
    int slot = node->slot;

    if (node->n == 1)
        memcpy(dst, shm_slot(node, 0, slot) + offset, elems * op->esize);
    else
        fn(dst, shm_slot(node, 0, slot) + offset, shm_slot(node, 1, slot) + offset, elems);
    for (int j = 2; j < node->n; j++)
        fn(dst, dst, shm_slot(node, j, slot) + offset, elems);
    chorus__reduce_finalize(op->args.dtype, op->args.op, dst, elems, node->n);
}

/* Slice path, middle step: this rank's slice of the chunk, reduced in its own slot. */
static void reduce_slice(shm_op_t *op, size_t m)
{
    shm_node_t *node = op->node;
    chorus__reduce_fn fn = chorus__reduce_kernel(op->args.dtype, op->args.op);
    size_t unit = shm_unit(op->esize), lo, hi;
    char *mine;

    shm_part(m, unit, node->n, node->me, &lo, &hi);
    mine = shm_slot(node, node->me, node->slot) + lo * op->esize;
    for (int j = 0; j < node->n && hi > lo; j++) {
        if (j != node->me)
            fn(mine, mine, shm_slot(node, j, node->slot) + lo * op->esize, hi - lo);
    }
    chorus__reduce_finalize(op->args.dtype, op->args.op, mine, hi - lo, node->n);
}

/* Slice path, last step: every rank's reduced slice into dst. */
static void gather_slices(shm_op_t *op, char *dst, size_t m, int streaming)
{
    shm_node_t *node = op->node;
    size_t unit = shm_unit(op->esize), lo, hi;

    for (int j = 0; j < node->n; j++) {
        shm_part(m, unit, node->n, j, &lo, &hi);
        shm_copy(dst + lo * op->esize, shm_slot(node, j, node->slot) + lo * op->esize,
                 (hi - lo) * op->esize, streaming);
    }
}

/* The step after every rank's copy-in: what each rank takes out. */
static void take_out(shm_op_t *op, size_t lo, size_t hi)
{
    const coll_args_t *a = &op->args;
    shm_node_t *node = op->node;
    size_t es = op->esize, m = hi - lo;
    char *recv = a->recvbuf;
    int streaming = op->bytes >= node->cfg.nt_bytes;

    switch (a->coll) {
    case COLL_ALLREDUCE:
    case COLL_REDUCE:
        if (a->coll == COLL_REDUCE && !is_root(op))
            break;
        if (op->kind == SHM_SLICE)
            gather_slices(op, recv + lo * es, m, streaming);
        else
            reduce_all(op, recv + lo * es, 0, m);
        break;
    case COLL_REDUCE_SCATTER:
        reduce_all(op, recv + lo * es, (size_t)node->me * m * es, m);
        break;
    case COLL_ALLGATHER:
        for (int j = 0; j < node->n; j++)
            shm_copy(recv + ((size_t)j * a->count + lo) * es, shm_slot(node, j, node->slot),
                     m * es, streaming);
        break;
    case COLL_BROADCAST:
        shm_copy(recv + lo * es,
                 is_root(op) ? (const char *)a->sendbuf + lo * es
                             : shm_slot(node, a->root, node->slot),
                 m * es, streaming);
        break;
    default:
        break;
    }
}

static int op_wait(shm_op_t *op, uint64_t step)
{
    int rc = shm_reached(op->node, step, op->base, op->fp, &op->wait_peer);

    if (rc == 0)
        op->wait_step = step;
    else if (rc < 0)
        shm_node_fail(op->node, (chorus_status_t)rc);
    return rc;
}

static int op_finish(shm_op_t *op)
{
    op->node->serving++;
    serve_skipped(op->node);
    op->phase = PH_DONE;
    return 1;
}

static void end_round(shm_op_t *op)
{
    shm_node_t *node = op->node;

    node->slot_free[node->slot] = node->step;
    node->slot ^= 1;
    op->round++;
    op->phase = PH_SLOT;
}

static int op_start(shm_op_t *op)
{
    shm_node_t *node = op->node;

    if (node->broken) {
        chorus_error("local rank %d: an earlier node-local call failed part way; the "
                     "communicator cannot run more", node->me);
        return CHORUS_ERR_PEER_FAILED;
    }
    serve_skipped(node);
    if (op->ticket != node->serving) {
        op->wait_peer = -1;
        return 0;
    }
    op->base = node->step;
    if (op->nrounds == 0)
        return op_finish(op);
    op->phase = op->kind == SHM_CMA && op->args.coll != COLL_BARRIER ? PH_CMA : PH_SLOT;
    return 2;
}

int shm_op_progress(shm_op_t *op)
{
    shm_node_t *node = op->node;
    size_t lo, hi;
    int rc;

    for (;;) {
        switch (op->phase) {
        case PH_START:
            if ((rc = op_start(op)) != 2)
                return rc;
            break;
        case PH_CMA:
            if ((rc = shm_cma_progress(op)) == 1)
                return op_finish(op);
            if (rc < 0)
                shm_node_fail(node, (chorus_status_t)rc);
            return rc;
        case PH_SLOT:
            if (op->round == op->nrounds)
                return op_finish(op);
            if (op->args.coll != COLL_BARRIER &&
                (rc = op_wait(op, node->slot_free[node->slot])) <= 0)
                return rc;
            round_range(op, &lo, &hi);
            copy_in(op, shm_slot(node, node->me, node->slot), lo, hi);
            shm_post(node, op->fp);
            op->phase = PH_IN;
            break;
        case PH_IN:
            if ((rc = op_wait(op, node->step)) <= 0)
                return rc;
            if (op->args.coll == COLL_BARRIER) {
                op->round++;
                return op_finish(op);
            }
            round_range(op, &lo, &hi);
            if (op->kind == SHM_SLICE) {
                reduce_slice(op, hi - lo);
                shm_post(node, op->fp);
                op->phase = PH_MID;
                break;
            }
            take_out(op, lo, hi);
            shm_post(node, op->fp);
            end_round(op);
            break;
        case PH_MID:
            if ((rc = op_wait(op, node->step)) <= 0)
                return rc;
            round_range(op, &lo, &hi);
            take_out(op, lo, hi);
            shm_post(node, op->fp);
            end_round(op);
            break;
        default:
            return 1;
        }
    }
}

void shm_op_wait(shm_op_t *op, unsigned max_us)
{
    if (op->phase == PH_START || op->wait_peer < 0) {
        sched_yield();
        return;
    }
    shm_sleep(op->node, op->wait_peer, op->wait_step, max_us);
}
