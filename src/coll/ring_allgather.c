/*
 * Ring allgather: every block travels size - 1 hops to the right, in
 * pipeline chunks that each rank forwards as soon as they arrive.
 * Receives go straight into recvbuf; there is nothing to reduce.
 */
#include "coll/coll.h"

#include <stdlib.h>

#include "coll/ring.h"
#include "util/log.h"

static size_t chunk_len(size_t n, size_t chunk, size_t c)
{
    size_t left = n - c * chunk;
    return left < chunk ? left : chunk;
}

/*
 * Step s forwards block rank - s and receives block rank - s - 1. prev[c]
 * is the step that made chunk c of the block in hand available (-1 for
 * this rank's own block, which step 0 sends straight from sendbuf).
 */
static chorus_status_t ring_ag_steps(const coll_args_t *a, coll_sched_t *sched, size_t esize,
                                     size_t chunk, size_t nchunks, long *prev)
{
    int right = coll_ring_right(a->rank, a->size), left = coll_ring_left(a->rank, a->size);
    size_t block = a->count * esize;
    char *recv = a->recvbuf;

    for (int s = 0; s < a->size - 1; s++) {
        int sb = coll_ring_ag_send_block(a->rank, a->size, s);
        int rb = coll_ring_ag_recv_block(a->rank, a->size, s);
        const char *src = s == 0 ? (const char *)a->sendbuf : recv + (size_t)sb * block;
        uint32_t tag = (uint32_t)((size_t)s * nchunks);

        for (size_t c = 0; c < nchunks; c++) {
            size_t off = c * chunk * esize, bytes = chunk_len(a->count, chunk, c) * esize;
            long idx = coll_sched_send(sched, right, tag + (uint32_t)c, src + off, bytes,
                                       &prev[c], 1);
            if (idx < 0)
                return CHORUS_ERR_NO_MEMORY;
            idx = coll_sched_recv(sched, left, tag + (uint32_t)c, recv + (size_t)rb * block + off,
                                  bytes, NULL, 0);
            if (idx < 0)
                return CHORUS_ERR_NO_MEMORY;
            prev[c] = idx;
        }
    }
    return CHORUS_OK;
}

static chorus_status_t ring_allgather_build(const coll_args_t *args,
                                            const coll_env_t *env, coll_sched_t *sched)
{
    size_t esize, chunk, nchunks;
    char *own;
    long *prev;
    chorus_status_t status = coll_check_blocks(args, "ring allgather", 0, 1, &esize);

    if (status != CHORUS_OK || args->count == 0)
        return status;
    own = (char *)args->recvbuf + (size_t)args->rank * args->count * esize;
    /* In place when sendbuf already is this rank's block of recvbuf: the copy is a no-op. */
    if (own != args->sendbuf &&
        coll_sched_copy(sched, own, args->sendbuf, args->count * esize, NULL, 0) < 0)
        return CHORUS_ERR_NO_MEMORY;
    if (args->size == 1)
        return CHORUS_OK;
    chunk = coll_chunk_elems(args->chunk_bytes, esize, args->count, args->size - 1);
    nchunks = coll_chunk_count(args->count, chunk);
    prev = malloc(nchunks * sizeof(*prev));
    if (prev == NULL)
        return CHORUS_ERR_NO_MEMORY;
    for (size_t c = 0; c < nchunks; c++)
        prev[c] = -1;
    status = ring_ag_steps(args, sched, esize, chunk, nchunks, prev);
    free(prev);
    return status;
}

/* n is the gathered result: p-1 steps of one rank's block, n/p. */
static double ring_allgather_cost(const tune_model_t *m, double n, int p)
{
    return (p - 1) * (m->alpha + n / p * m->beta);
}

static double ring_allgather_price(const coll_env_t *env, size_t bytes)
{
    return coll_price_flat(env, ring_allgather_cost, COLL_FLOWS_RING, bytes);
}

const coll_alg_t coll_ring_allgather = {
    .name = "ring",
    .coll = COLL_ALLGATHER,
    .build = ring_allgather_build,
    .price = ring_allgather_price,
};
