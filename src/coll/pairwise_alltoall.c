/*
 * Pairwise alltoall: at step s (1 .. size-1) a rank sends its block for
 * rank + s and receives the block of rank - s, so every pair meets at the
 * same step on both sides. A few steps may overlap; more would have every
 * rank flood every peer at once.
 *
 * In place (sendbuf == recvbuf) the send data is first copied to scratch,
 * because receives overwrite blocks that are still to be sent.
 */
#include "coll/coll.h"

#include "coll/ring.h"
#include "util/log.h"

/* Steps in flight: step s starts once step s - PAIRWISE_DEPTH has completed. */
#define PAIRWISE_DEPTH 4

static chorus_status_t pairwise_steps(const coll_args_t *a, coll_sched_t *sched,
                                      const char *send, long first)
{
    size_t block = a->count * chorus_dtype_size(a->dtype);
    char *recv = a->recvbuf;
    long done[PAIRWISE_DEPTH][2];

    for (int i = 0; i < PAIRWISE_DEPTH; i++)
        done[i][0] = done[i][1] = first;
    for (int s = 1; s < a->size; s++) {
        int to = coll_ring_mod((long)a->rank + s, a->size);
        int from = coll_ring_mod((long)a->rank - s, a->size);
        long *slot = done[s % PAIRWISE_DEPTH];
        long snd = coll_sched_send(sched, to, (uint32_t)s, send + (size_t)to * block, block,
                                   slot, 2);
        long rcv = coll_sched_recv(sched, from, (uint32_t)s, recv + (size_t)from * block, block,
                                   slot, 2);
        if (snd < 0 || rcv < 0)
            return CHORUS_ERR_NO_MEMORY;
        slot[0] = snd;
        slot[1] = rcv;
    }
    return CHORUS_OK;
}

static chorus_status_t pairwise_alltoall_build(const coll_args_t *args,
                                               const coll_env_t *env, coll_sched_t *sched)
{
    size_t esize, block, total;
    const char *send = args->sendbuf;
    long first = -1;
    chorus_status_t status = coll_check_blocks(args, "pairwise alltoall", 0, 1, &esize);

    if (status != CHORUS_OK || args->count == 0)
        return status;
    block = args->count * esize;
    total = block * (size_t)args->size;
    if (args->sendbuf == args->recvbuf) {
        char *copy;
        if (args->size == 1)
            return CHORUS_OK;
        copy = coll_sched_alloc(sched, total);
        if (copy == NULL)
            return CHORUS_ERR_NO_MEMORY;
        first = coll_sched_copy(sched, copy, args->sendbuf, total, NULL, 0);
        if (first < 0)
            return CHORUS_ERR_NO_MEMORY;
        send = copy;
    } else if (coll_sched_copy(sched, (char *)args->recvbuf + (size_t)args->rank * block,
                               send + (size_t)args->rank * block, block, NULL, 0) < 0) {
        return CHORUS_ERR_NO_MEMORY;
    }
    return pairwise_steps(args, sched, send, first);
}

/* n is one rank's whole send buffer: p-1 exchanges of one peer's block. */
static double pairwise_alltoall_cost(const tune_model_t *m, double n, int p)
{
    return (p - 1) * (m->alpha + n / p * m->beta);
}

static double pairwise_alltoall_price(const coll_env_t *env, size_t bytes)
{
    return coll_price_flat(env, pairwise_alltoall_cost, COLL_FLOWS_NODE, bytes);
}

const coll_alg_t coll_pairwise_alltoall = {
    .name = "pairwise",
    .coll = COLL_ALLTOALL,
    .build = pairwise_alltoall_build,
    .price = pairwise_alltoall_price,
};
