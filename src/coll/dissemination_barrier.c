/*
 * Dissemination barrier: in round k a rank signals rank + 2^k and waits for
 * rank - 2^k; it signals round k + 1 only after every earlier round's wait. After
 * ceil(log2 size) rounds every rank has heard, directly or through others,
 * from every rank. Signals carry one byte because the executor never posts
 * empty transfers.
 */
#include "coll/coll.h"

#include "coll/ring.h"
#include "util/log.h"

static const char barrier_token = 1;

static chorus_status_t dissemination_barrier_build(const coll_args_t *args,
                                                   const coll_env_t *env, coll_sched_t *sched)
{
    char *sink;
    /* The previous round's send and receive: a round signals only what all earlier ones heard. */
    long prev[2] = {-1, -1};
    uint32_t round = 0;

    if (args->size < 1 || args->rank < 0 || args->rank >= args->size) {
        chorus_error("dissemination barrier: invalid rank %d of size %d", args->rank, args->size);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (args->size == 1)
        return CHORUS_OK;
    sink = coll_sched_alloc(sched, 64);
    if (sink == NULL)
        return CHORUS_ERR_NO_MEMORY;
    for (long dist = 1; dist < args->size; dist *= 2, round++) {
        int to = coll_ring_mod((long)args->rank + dist, args->size);
        int from = coll_ring_mod((long)args->rank - dist, args->size);
        prev[0] = coll_sched_send(sched, to, round, &barrier_token, 1, prev, 2);
        if (prev[0] < 0)
            return CHORUS_ERR_NO_MEMORY;
        /* Each round receives into its own byte, so receives can be posted early. */
        prev[1] = coll_sched_recv(sched, from, round, sink + round, 1, NULL, 0);
        if (prev[1] < 0)
            return CHORUS_ERR_NO_MEMORY;
    }
    return CHORUS_OK;
}

static double dissemination_barrier_cost(const tune_model_t *m, double n, int p)
{
    (void)n;
    return tune_log2_ceil(p) * m->alpha;
}

static double dissemination_barrier_price(const coll_env_t *env, size_t bytes)
{
    return coll_price_flat(env, dissemination_barrier_cost, COLL_FLOWS_NODE, bytes);
}

const coll_alg_t coll_dissemination_barrier = {
    .name = "dissemination",
    .coll = COLL_BARRIER,
    .build = dissemination_barrier_build,
    .price = dissemination_barrier_price,
};
