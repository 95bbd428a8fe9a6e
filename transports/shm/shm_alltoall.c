/*
 * Alltoall on a team: block j of rank i's send buffer (count elements)
 * lands in block i of rank j's receive buffer.
 *
 * Staging: a rank's slot holds one sub-slot per peer; a round copies a
 * piece of every block bound for a peer into that peer's sub-slot, and
 * once every rank has posted, each rank copies the pieces bound for it out
 * of every peer's slot. A rank's own block never goes through a slot: it
 * is copied straight across out of place, and left where it is in place.
 * Each rank touches only its own buffers, so in place needs nothing more:
 * a round's pieces are copied in before the same pieces are overwritten.
 *
 * Single copy: where both ranks of a pair have separate buffers, each reads
 * its block straight from the other's send buffer, one kernel copy per
 * byte. Where either works in place, a block may only be overwritten once
 * it has been read, so the pair swaps instead, each rank one half of the
 * elements: read the peer's block into a private chunk, write this rank's
 * block into the peer's buffer, then copy the chunk into place. The halves
 * are disjoint and only their rank touches them, so no further step is
 * needed inside a call.
 */
#include <string.h>

#include "transports/shm/shm_internal.h"

/* The sub-slot of from's slot that holds the pieces bound for to. */
static size_t sub_slot(int from, int to, int n)
{
    return (size_t)((to - from - 1 + n) % n);
}

void shm_a2a_stage_in(shm_op_t *op)
{
    const coll_args_t *a = &op->args;
    shm_node_t *node = op->node;
    char *slot = shm_slot(node, node->me, node->slot);
    const char *send = a->sendbuf;
    size_t es = op->esize, lo, hi;

    shm_piece(op, a->count, &lo, &hi);
    for (int j = 0; j < node->n; j++) {
        size_t at = ((size_t)j * a->count + lo) * es;

        if (j != node->me)
            memcpy(slot + sub_slot(node->me, j, node->n) * op->per * es, send + at,
                   (hi - lo) * es);
        else if (a->sendbuf != a->recvbuf)
            memcpy((char *)a->recvbuf + at, send + at, (hi - lo) * es);
    }
}

void shm_a2a_stage_out(shm_op_t *op)
{
    const coll_args_t *a = &op->args;
    shm_node_t *node = op->node;
    char *recv = a->recvbuf;
    size_t es = op->esize, lo, hi;
    int streaming = op->bytes >= node->cfg.nt_bytes;

    shm_piece(op, a->count, &lo, &hi);
    for (int j = 0; j < node->n; j++) {
        if (j == node->me)
            continue;
        shm_copy(recv + ((size_t)j * a->count + lo) * es,
                 shm_slot(node, j, node->slot) + sub_slot(j, node->me, node->n) * op->per * es,
                 (hi - lo) * es, streaming);
    }
}

static const shm_desc_t *desc_of(const shm_node_t *node, int j)
{
    return &node->ctrl[j]->desc;
}

static int in_place(const shm_desc_t *d)
{
    return d->sendbuf == d->recvbuf;
}

/*
 * This rank's half of the swap with peer j, elements [lo, hi) of the two
 * blocks: j's block for this rank and this rank's block for j.
 */
static int a2a_swap(shm_op_t *op, int j, size_t lo, size_t hi)
{
    const coll_args_t *a = &op->args;
    shm_node_t *node = op->node;
    size_t es = op->esize, per = node->chunk / es;
    uint64_t theirs = ((size_t)node->me * a->count) * es;
    size_t mine = ((size_t)j * a->count) * es;
    int rc;

    for (size_t c = lo; c < hi; c += per) {
        size_t bytes = (hi - c < per ? hi - c : per) * es, off = c * es;

        if ((rc = shm_cma_move(node, j, 0, node->tmp, desc_of(node, j)->sendbuf + theirs + off,
                               bytes)) < 0 ||
            (rc = shm_cma_move(node, j, 1, (char *)a->sendbuf + mine + off,
                               desc_of(node, j)->recvbuf + theirs + off, bytes)) < 0)
            return rc;
        memcpy((char *)a->recvbuf + mine + off, node->tmp, bytes);
    }
    return 0;
}

int shm_a2a_cma(shm_op_t *op)
{
    const coll_args_t *a = &op->args;
    shm_node_t *node = op->node;
    size_t es = op->esize, block = a->count * es, lo, hi;
    int mine_in_place = in_place(desc_of(node, node->me)), rc;

    /* Starting past this rank spreads the ranks over different peers at a time. */
    for (int s = 1; s < node->n; s++) {
        int j = (node->me + s) % node->n;

        if (!mine_in_place && !in_place(desc_of(node, j))) {
            rc = shm_cma_move(node, j, 0, (char *)a->recvbuf + (size_t)j * block,
                              desc_of(node, j)->sendbuf + (uint64_t)node->me * block, block);
        } else {
            shm_part(a->count, shm_unit(es), 2, node->me > j, &lo, &hi);
            rc = a2a_swap(op, j, lo, hi);
        }
        if (rc < 0)
            return rc;
    }
    if (!mine_in_place)
        memcpy((char *)a->recvbuf + (size_t)node->me * block,
               (const char *)a->sendbuf + (size_t)node->me * block, block);
    return 0;
}
