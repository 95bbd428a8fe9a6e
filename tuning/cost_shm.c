/*
 * Node-local costs. A staging call moves in rounds of one slot; a round
 * costs the steps where a rank waits for all others (the flat algorithms
 * wait once a round: the wait for a slot to be free overlaps the next
 * round), plus the copies and reductions of one core. A single-copy call
 * waits twice and moves each byte once, through the kernel, which pins the
 * pages it copies: dearer per byte than copies through cache-sized slots.
 * With more ranks than cores, every wait costs a trip through the
 * scheduler and the ranks share the cores' time.
 */
#include "tuning/cost_shm.h"

#include <math.h>

static int usable(const tune_model_t *m, int cma)
{
    return m->node_local && (!cma || m->node_cma);
}

/* A lone rank has nothing to exchange. */
#define SHM_COST(m, p, cma, expr) (!usable(m, cma) ? INFINITY : (p) == 1 ? 0.0 : (expr))

static int oversubscribed(const tune_model_t *m, int p)
{
    return m->node_cores > 0 && p > m->node_cores;
}

/* Seconds per wait for every rank. */
static double step(const tune_model_t *m, int p)
{
    return oversubscribed(m, p) ? m->shm_alpha_oversub : m->shm_alpha;
}

double tune_shm_share(const tune_model_t *m, int p)
{
    return oversubscribed(m, p) ? (double)p / m->node_cores : 1.0;
}


static double rounds(const tune_model_t *m, double n)
{
    double slot = m->shm_slot ? (double)m->shm_slot : 262144.0;

    return n > 0 ? ceil(n / slot) : 1.0;
}

/* Every rank copies its vector in, then reduces the whole vector from every slot. */
double tune_shm_allreduce_flat(const tune_model_t *m, double n, int p)
{
    double work = n * m->shm_beta + (p - 1) * n * m->shm_gamma;

    return SHM_COST(m, p, 0, rounds(m, n) * step(m, p) + tune_shm_share(m, p) * work);
}

/*
 * Copy in, reduce one slice of every slot, copy every slice out: two waits a
 * round, and each waits for every rank's turn on the cores when ranks
 * outnumber them.
 */
double tune_shm_allreduce_slice(const tune_model_t *m, double n, int p)
{
    double wait = step(m, p) * tune_shm_share(m, p);
    double work = 2 * n * m->shm_beta + (p - 1) * n / p * m->shm_gamma;

    return SHM_COST(m, p, 0, rounds(m, n) * 2 * wait + tune_shm_share(m, p) * work);
}

/* Read one slice from every peer, reduce it, write it to every peer. */
double tune_shm_allreduce_cma(const tune_model_t *m, double n, int p)
{
    double slice = n / p;
    double work = 2.0 * (p - 1) * (rounds(m, slice) * m->cma_alpha + slice * m->cma_beta)
                  + (p - 1) * slice * m->shm_gamma;

    return SHM_COST(m, p, 1, 2 * step(m, p) + tune_shm_share(m, p) * work);
}

/* n is the whole input; each rank reduces its block from every slot. */
double tune_shm_reduce_scatter(const tune_model_t *m, double n, int p)
{
    double work = n * m->shm_beta + (p - 1) * n / p * m->shm_gamma;

    return SHM_COST(m, p, 0, rounds(m, n) * step(m, p) + tune_shm_share(m, p) * work);
}

double tune_shm_reduce_scatter_cma(const tune_model_t *m, double n, int p)
{
    double block = n / p;
    double work = (p - 1) * (rounds(m, block) * m->cma_alpha
                             + block * (m->cma_beta + m->shm_gamma));

    return SHM_COST(m, p, 1, 2 * step(m, p) + tune_shm_share(m, p) * work);
}

/* n is the gathered result: each rank copies its block in and the whole result out. */
double tune_shm_allgather(const tune_model_t *m, double n, int p)
{
    double work = (n / p + n) * m->shm_beta;

    return SHM_COST(m, p, 0, rounds(m, n / p) * step(m, p) + tune_shm_share(m, p) * work);
}

double tune_shm_allgather_cma(const tune_model_t *m, double n, int p)
{
    double work = (p - 1) * (rounds(m, n / p) * m->cma_alpha + n / p * m->cma_beta);

    return SHM_COST(m, p, 1, 2 * step(m, p) + tune_shm_share(m, p) * work);
}

double tune_shm_broadcast(const tune_model_t *m, double n, int p)
{
    double work = 2 * n * m->shm_beta;

    return SHM_COST(m, p, 0, rounds(m, n) * step(m, p) + tune_shm_share(m, p) * work);
}

double tune_shm_broadcast_cma(const tune_model_t *m, double n, int p)
{
    double work = rounds(m, n) * m->cma_alpha + n * m->cma_beta;

    return SHM_COST(m, p, 1, 2 * step(m, p) + tune_shm_share(m, p) * work);
}

double tune_shm_barrier(const tune_model_t *m, double n, int p)
{
    (void)n;
    return SHM_COST(m, p, 0, step(m, p));
}
