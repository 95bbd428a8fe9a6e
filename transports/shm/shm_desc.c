/*
 * Call descriptors of the single-copy path: where this rank's buffers are,
 * published in its own region, and the check of what every peer published.
 * A peer's descriptor is input from another process, so it is checked
 * against this rank's own call before any address in it is used.
 */
#include "transports/shm/shm_internal.h"
#include "util/log.h"

void shm_desc_publish(shm_node_t *node, const coll_args_t *a, uint32_t fp)
{
    shm_desc_t *mine = &node->ctrl[node->me]->desc;

    mine->sendbuf = (uint64_t)(uintptr_t)a->sendbuf;
    mine->recvbuf = (uint64_t)(uintptr_t)a->recvbuf;
    mine->count = a->count;
    mine->fp = fp;
}

int shm_desc_check(const shm_node_t *node, const coll_args_t *a, uint32_t fp)
{
    for (int j = 0; j < node->n; j++) {
        const shm_desc_t *d = &node->ctrl[j]->desc;
        int needs_recv = a->coll == COLL_ALLREDUCE || a->coll == COLL_BROADCAST ||
                         (a->coll == COLL_REDUCE && j == a->root);
        int needs_send = a->coll != COLL_BROADCAST || j == a->root;
        uint64_t sendbuf = d->sendbuf, recvbuf = d->recvbuf, count = d->count;
        uint32_t dfp = d->fp;

        if (dfp != fp || count != a->count || (needs_recv && recvbuf == 0) ||
            (needs_send && sendbuf == 0)) {
            chorus_error("local rank %d published a call that does not match this one (count "
                         "%llu against %zu, fingerprint %04x against %04x, or a NULL buffer)",
                         j, (unsigned long long)count, a->count, dfp, fp);
            return CHORUS_ERR_INVALID_ARG;
        }
    }
    return 0;
}
