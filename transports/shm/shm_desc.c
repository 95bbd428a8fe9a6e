/*
 * What the ranks of a team publish about a call, and the checks of what
 * their peers published: the call's whole fingerprint beside each staging
 * slot, and for the single-copy path where its buffers are. A peer's words
 * are input from another process, so they are checked against this rank's
 * own call before any address in them is used.
 */
#include "transports/shm/shm_internal.h"
#include "util/log.h"

/* One word into the hash: a bijection of h for every v, so one differing word always shows. */
static uint64_t fp_mix(uint64_t h, uint64_t v)
{
    h = (h ^ v) * 0x9e3779b97f4a7c15ULL;
    return h ^ (h >> 29);
}

uint64_t shm_fingerprint(const coll_args_t *a, shm_kind_t kind)
{
    int rooted = a->coll == COLL_BROADCAST || a->coll == COLL_REDUCE;
    uint64_t h = 0x63686f7275736670ULL;     /* "chorusfp" */

    h = fp_mix(h, (uint64_t)a->coll << 32 | (uint64_t)kind << 16 | (uint64_t)a->dtype);
    h = fp_mix(h, coll_type_reduces(a->coll) ? (uint64_t)a->op : UINT64_MAX);
    h = fp_mix(h, rooted ? (uint64_t)a->root : UINT64_MAX);
    h = fp_mix(h, (uint64_t)a->size << 1 | (a->counts != NULL));
    if (a->counts == NULL)
        return fp_mix(h, a->count) & ~SHM_FP_MARKS;
    /* A v-form: every block's length and place; the count is not part of the call. */
    for (int j = 0; j < a->size; j++)
        h = fp_mix(fp_mix(h, a->counts[j]), a->displs[j]);
    return h & ~SHM_FP_MARKS;
}

int shm_stage_check(const shm_node_t *node, int slot, uint64_t fp, int *marked_p,
                    int *skipped_p)
{
    *marked_p = *skipped_p = 0;
    for (int j = 0; j < node->n; j++) {
        uint64_t theirs = atomic_load_explicit(&node->ctrl[j]->stage_fp[slot],
                                               memory_order_relaxed);

        *marked_p += (theirs & SHM_FP_MEM) != 0;
        *skipped_p += (theirs & SHM_FP_SKIP) != 0;
        theirs &= ~SHM_FP_MARKS;
        if (theirs != fp) {
            chorus_error("local rank %d called with other arguments (call fingerprint "
                         "%016llx, this rank's %016llx): a different count, type, op, root or "
                         "block layout" SHM_MISMATCH_HINT, j, (unsigned long long)theirs,
                         (unsigned long long)fp);
            return CHORUS_ERR_INVALID_ARG;
        }
    }
    return 0;
}

/* Bytes of the send (which 0) or receive (1) buffer a call of this rank's touches. */
static size_t buf_bytes(const coll_args_t *a, int which)
{
    size_t elems[2], end = 0;

    if (a->counts == NULL) {
        coll_args_elems(a, (size_t)a->size, elems);
        return elems[which] * chorus_dtype_size(a->dtype);
    }
    /* A v-form: one block on one side, the blocks of every rank where they lie on the other. */
    if ((a->coll == COLL_ALLGATHER) == (which == 0))
        return a->counts[a->rank] * chorus_dtype_size(a->dtype);
    for (int j = 0; j < a->size; j++)
        end = a->displs[j] + a->counts[j] > end ? a->displs[j] + a->counts[j] : end;
    return end * chorus_dtype_size(a->dtype);
}

void shm_desc_publish(shm_node_t *node, const coll_args_t *a, uint64_t fp)
{
    shm_desc_t *mine = &node->ctrl[node->me]->desc;
    unsigned mem = 0;

    mine->sendbuf = (uint64_t)(uintptr_t)a->sendbuf;
    mine->recvbuf = (uint64_t)(uintptr_t)a->recvbuf;
    mine->count = a->count;
    mine->fp = fp;
    if (chorus__shared_find(a->sendbuf, buf_bytes(a, 0), &mine->send_mem))
        mem |= SHM_BUF_SEND;
    if (chorus__shared_find(a->recvbuf, buf_bytes(a, 1), &mine->recv_mem))
        mem |= SHM_BUF_RECV;
    mine->mem = mem;
}

int shm_peer_reads_send(const coll_args_t *a, int j)
{
    size_t total = 0;

    switch (a->coll) {
    case COLL_BROADCAST:
        return j == a->root;
    case COLL_ALLGATHER:
        return coll_args_block(a, j) > 0;
    case COLL_REDUCE_SCATTER:
        for (int b = 0; b < a->size; b++)
            total += coll_args_block(a, b);
        return total > 0;
    default:
        return 1;
    }
}

int shm_peer_writes_recv(const coll_args_t *a, int j)
{
    return a->coll == COLL_ALLREDUCE || a->coll == COLL_BROADCAST ||
           a->coll == COLL_ALLTOALL || (a->coll == COLL_REDUCE && j == a->root);
}

int shm_desc_check(const shm_node_t *node, const coll_args_t *a, uint64_t fp)
{
    for (int j = 0; j < node->n; j++) {
        const shm_desc_t *d = &node->ctrl[j]->desc;
        uint64_t sendbuf = d->sendbuf, recvbuf = d->recvbuf, count = d->count, dfp = d->fp;

        /* The count of a v-form is not part of the call, so it may differ. */
        if (dfp != fp || (a->counts == NULL && count != a->count) ||
            (shm_peer_writes_recv(a, j) && recvbuf == 0) ||
            (shm_peer_reads_send(a, j) && sendbuf == 0)) {
            chorus_error("local rank %d published a call that does not match this one (count "
                         "%llu against %zu, fingerprint %016llx against %016llx, or a NULL "
                         "buffer)" SHM_MISMATCH_HINT, j, (unsigned long long)count, a->count,
                         (unsigned long long)dfp, (unsigned long long)fp);
            return CHORUS_ERR_INVALID_ARG;
        }
    }
    return 0;
}
