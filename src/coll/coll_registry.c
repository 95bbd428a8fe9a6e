/*
 * Every algorithm: the schedule builders, listed here, and the variants of
 * the built-in collective transports, each of which runs a whole call on a
 * communicator's node team. Adding a builder is one file, one line below
 * and one line in Makefile.am.
 */
#include "coll/coll.h"

#include <pthread.h>
#include <string.h>
#include <strings.h>

/* Within one collective, the first entry is the default when nothing else decides. */
const coll_alg_t *const coll_algs[] = {
    &coll_ring_allreduce,
    &coll_rd_allreduce,
    &coll_rabenseifner_allreduce,
    &coll_hier_allreduce,
    &coll_ring_allgather,
    &coll_hier_allgather,
    &coll_ring_reduce_scatter,
    &coll_hier_reduce_scatter,
    &coll_binomial_broadcast,
    &coll_chain_broadcast,
    &coll_hier_broadcast,
    &coll_binomial_reduce,
    &coll_pairwise_alltoall,
    &coll_dissemination_barrier,
    NULL,
};

/* Team variants: one entry per (transport, variant, collective it runs). */
#define TEAM_ALGS_MAX 64

static coll_alg_t team_algs[TEAM_ALGS_MAX];
static int nteam_algs;
static pthread_once_t team_algs_once = PTHREAD_ONCE_INIT;

static void team_algs_list(void)
{
    for (int t = 0; tl_coll_all[t] != NULL; t++) {
        const tl_coll_ops_t *ops = tl_coll_all[t];

        for (int v = 0; v < ops->nvariants; v++) {
            for (int c = 0; c < COLL_TYPE_COUNT && nteam_algs < TEAM_ALGS_MAX; c++) {
                if (!(ops->variants[v].colls & (1u << c)))
                    continue;
                team_algs[nteam_algs++] = (coll_alg_t){
                    .name = ops->variants[v].name, .coll = (coll_type_t)c,
                    .team_ops = ops, .team_variant = v,
                };
            }
        }
    }
}

int coll_alg_list(coll_type_t coll, const coll_alg_t **algs, int max)
{
    int n = 0;

    for (size_t i = 0; coll_algs[i] != NULL; i++) {
        if (coll_algs[i]->coll != coll)
            continue;
        if (n < max)
            algs[n] = coll_algs[i];
        n++;
    }
    pthread_once(&team_algs_once, team_algs_list);
    for (int i = 0; i < nteam_algs; i++) {
        if (team_algs[i].coll != coll)
            continue;
        if (n < max)
            algs[n] = &team_algs[i];
        n++;
    }
    return n;
}

const coll_alg_t *coll_alg_find(coll_type_t coll, const char *name)
{
    if (name == NULL)
        return NULL;
    for (size_t i = 0; coll_algs[i] != NULL; i++) {
        if (coll_algs[i]->coll == coll && strcasecmp(coll_algs[i]->name, name) == 0)
            return coll_algs[i];
    }
    pthread_once(&team_algs_once, team_algs_list);
    for (int i = 0; i < nteam_algs; i++) {
        if (team_algs[i].coll == coll && strcasecmp(team_algs[i].name, name) == 0)
            return &team_algs[i];
    }
    return NULL;
}
