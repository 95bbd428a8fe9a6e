/*
 * Names of the node-local algorithms, for the selection table and
 * CHORUS_TUNE. They have no schedule builder: the shared-memory path runs
 * them (transports/shm/shm.h).
 */
#include "coll/coll.h"

#define SHM_ALG(n, c, k) {.name = (n), .coll = (c), .build = NULL, .shm = (k)}

const coll_alg_t coll_shm_algs[] = {
    SHM_ALG("shm", COLL_ALLREDUCE, COLL_SHM_FLAT),
    SHM_ALG("shm_slice", COLL_ALLREDUCE, COLL_SHM_SLICE),
    SHM_ALG("shm_cma", COLL_ALLREDUCE, COLL_SHM_CMA),
    SHM_ALG("shm", COLL_REDUCE, COLL_SHM_FLAT),
    SHM_ALG("shm_slice", COLL_REDUCE, COLL_SHM_SLICE),
    SHM_ALG("shm_cma", COLL_REDUCE, COLL_SHM_CMA),
    SHM_ALG("shm", COLL_REDUCE_SCATTER, COLL_SHM_FLAT),
    SHM_ALG("shm_cma", COLL_REDUCE_SCATTER, COLL_SHM_CMA),
    SHM_ALG("shm", COLL_ALLGATHER, COLL_SHM_FLAT),
    SHM_ALG("shm_cma", COLL_ALLGATHER, COLL_SHM_CMA),
    SHM_ALG("shm", COLL_BROADCAST, COLL_SHM_FLAT),
    SHM_ALG("shm_cma", COLL_BROADCAST, COLL_SHM_CMA),
    SHM_ALG("shm", COLL_BARRIER, COLL_SHM_FLAT),
    {.name = NULL},
};
