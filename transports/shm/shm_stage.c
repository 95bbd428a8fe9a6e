/*
 * What each staging round copies in and takes out, for every collective
 * but alltoall (shm_alltoall.c). A rank's part is its whole vector
 * (allreduce, reduce, broadcast), its block (allgather), or one block per
 * rank (reduce_scatter, each in a sub-slot of per elements); in the v-forms
 * block j has counts[j] elements at displs[j], so the blocks of a round are
 * pieces of different lengths, some empty. Reductions run in rank order, or
 * over slices reduced by one rank each, so every rank ends with the same
 * bits.
 *
 * In the slice variant a rank copies in only the slices its peers reduce:
 * it reduces its own slice from its send buffer and the peers' slots into
 * its slot, where the peers then copy it out. At 2 ranks each rank so moves
 * its vector's bytes about four and a half times (in: half read and half
 * written; the slice: one read, half written; out: one each), where a
 * whole copy in made it five and a half.
 */
#include <string.h>

#include "reduce/reduce.h"
#include "transports/shm/shm_internal.h"

/* memcpy of a piece that may be empty, of a buffer that may then be NULL. */
static void put(void *dst, const void *src, size_t bytes)
{
    if (bytes > 0)
        memcpy(dst, src, bytes);
}

static int is_root(const shm_op_t *op)
{
    return op->args.rank == op->args.root;
}

void shm_stage_in(shm_op_t *op)
{
    const coll_args_t *a = &op->args;
    shm_node_t *node = op->node;
    char *slot = shm_slot(node, node->me, node->slot);
    const char *src = a->sendbuf;
    size_t es = op->esize, lo, hi;

    switch (a->coll) {
    case COLL_BROADCAST:
        if (!is_root(op))
            break;
        shm_piece(op, a->count, &lo, &hi);
        put(slot, src + lo * es, (hi - lo) * es);
        break;
    case COLL_REDUCE_SCATTER:
        for (int b = 0; b < node->n; b++) {
            shm_piece(op, coll_args_block(a, b), &lo, &hi);
            if (hi > lo)
                memcpy(slot + (size_t)b * op->per * es,
                       src + (coll_args_displ(a, b) + lo) * es, (hi - lo) * es);
        }
        break;
    case COLL_ALLGATHER:
        shm_piece(op, coll_args_block(a, node->me), &lo, &hi);
        if (hi > lo)
            memcpy(slot, src + lo * es, (hi - lo) * es);
        break;
    default:
        shm_piece(op, a->count, &lo, &hi);
        if (op->kind == SHM_SLICE) {
            size_t slo, shi;

            /* Around this rank's own slice, which it reduces from src (shm_stage_slice). */
            shm_part(hi - lo, shm_unit(es), node->n, node->me, &slo, &shi);
            put(slot, src + lo * es, slo * es);
            put(slot + shi * es, src + (lo + shi) * es, (hi - lo - shi) * es);
        } else {
            memcpy(slot, src + lo * es, (hi - lo) * es);
        }
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

void shm_stage_slice(shm_op_t *op)
{
    shm_node_t *node = op->node;
    chorus__reduce_fn fn = chorus__reduce_kernel(op->args.dtype, op->args.op);
    size_t unit = shm_unit(op->esize), lo, hi, slo, shi;
    const char *own;
    char *mine;

    shm_piece(op, op->args.count, &lo, &hi);
    shm_part(hi - lo, unit, node->n, node->me, &slo, &shi);
    if (shi == slo)
        return;
    own = (const char *)op->args.sendbuf + (lo + slo) * op->esize;
    mine = shm_slot(node, node->me, node->slot) + slo * op->esize;
    /* This rank's own data first, then the peers' in rank order, as with a whole copy in. */
    if (node->n == 1)
        memcpy(mine, own, (shi - slo) * op->esize);
    for (int j = 0, first = 1; j < node->n; j++) {
        if (j == node->me)
            continue;
        fn(mine, first ? own : mine, shm_slot(node, j, node->slot) + slo * op->esize,
           shi - slo);
        first = 0;
    }
    chorus__reduce_finalize(op->args.dtype, op->args.op, mine, shi - slo, node->n);
}

/* Slice path, last step: every rank's reduced slice of the m elements into dst. */
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

/* Allgather: every rank's piece of its block to where that block goes; this rank's own
 * straight from its send buffer (nothing to do in place). */
static void gather_out(shm_op_t *op, int streaming)
{
    const coll_args_t *a = &op->args;
    shm_node_t *node = op->node;
    size_t es = op->esize, lo, hi;
    char *recv = a->recvbuf;

    for (int j = 0; j < node->n; j++) {
        const char *src;

        shm_piece(op, coll_args_block(a, j), &lo, &hi);
        if (hi == lo)
            continue;
        src = j == node->me ? (const char *)a->sendbuf + lo * es : shm_slot(node, j, node->slot);
        shm_copy(recv + (coll_args_displ(a, j) + lo) * es, src, (hi - lo) * es, streaming);
    }
}

void shm_stage_out(shm_op_t *op)
{
    const coll_args_t *a = &op->args;
    shm_node_t *node = op->node;
    size_t es = op->esize, lo, hi;
    char *recv = a->recvbuf;
    int streaming = op->bytes >= node->cfg.nt_bytes;

    switch (a->coll) {
    case COLL_ALLREDUCE:
    case COLL_REDUCE:
        if (a->coll == COLL_REDUCE && !is_root(op))
            break;
        shm_piece(op, a->count, &lo, &hi);
        if (op->kind == SHM_SLICE)
            gather_slices(op, recv + lo * es, hi - lo, streaming);
        else
            reduce_all(op, recv + lo * es, 0, hi - lo);
        break;
    case COLL_REDUCE_SCATTER:
        shm_piece(op, coll_args_block(a, node->me), &lo, &hi);
        if (hi > lo)
            reduce_all(op, recv + lo * es, (size_t)node->me * op->per * es, hi - lo);
        break;
    case COLL_ALLGATHER:
        gather_out(op, streaming);
        break;
    case COLL_BROADCAST:
        shm_piece(op, a->count, &lo, &hi);
        shm_copy(recv + lo * es,
                 is_root(op) ? (const char *)a->sendbuf + lo * es
                             : shm_slot(node, a->root, node->slot),
                 (hi - lo) * es, streaming);
        break;
    default:
        break;
    }
}
