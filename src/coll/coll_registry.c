/* Names of the collectives and the table of every algorithm. */
#include "coll/coll.h"

#include <stddef.h>
#include <string.h>

static const char *const coll_type_names[COLL_TYPE_COUNT] = {
    [COLL_ALLREDUCE] = "allreduce",
    [COLL_ALLGATHER] = "allgather",
    [COLL_BROADCAST] = "broadcast",
    [COLL_REDUCE_SCATTER] = "reduce_scatter",
    [COLL_REDUCE] = "reduce",
    [COLL_ALLTOALL] = "alltoall",
    [COLL_BARRIER] = "barrier",
};

const char *coll_type_name(coll_type_t coll)
{
    if ((unsigned)coll >= COLL_TYPE_COUNT)
        return NULL;
    return coll_type_names[coll];
}

coll_type_t coll_type_from_name(const char *name)
{
    if (name == NULL)
        return COLL_TYPE_COUNT;
    for (int c = 0; c < COLL_TYPE_COUNT; c++) {
        if (strcmp(name, coll_type_names[c]) == 0)
            return (coll_type_t)c;
    }
    return COLL_TYPE_COUNT;
}

/* Within one collective, the first entry is the default when nothing else decides. */
const coll_alg_t *const coll_algs[] = {
    &coll_ring_allreduce,
    &coll_rd_allreduce,
    &coll_rabenseifner_allreduce,
    &coll_hier_allreduce,
    &coll_ring_allgather,
    &coll_ring_reduce_scatter,
    &coll_hier_reduce_scatter,
    &coll_binomial_broadcast,
    &coll_chain_broadcast,
    &coll_binomial_reduce,
    &coll_pairwise_alltoall,
    &coll_dissemination_barrier,
    &coll_hier_allgather,
    &coll_hier_broadcast,
    NULL,
};

const coll_alg_t *coll_alg_find(coll_type_t coll, const char *name)
{
    if (name == NULL)
        return NULL;
    for (size_t i = 0; coll_algs[i] != NULL; i++) {
        if (coll_algs[i]->coll == coll && strcmp(coll_algs[i]->name, name) == 0)
            return coll_algs[i];
    }
    for (size_t i = 0; coll_shm_algs[i].name != NULL; i++) {
        if (coll_shm_algs[i].coll == coll && strcmp(coll_shm_algs[i].name, name) == 0)
            return &coll_shm_algs[i];
    }
    return NULL;
}
