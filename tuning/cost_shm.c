/*
 * Node-local costs. A staging call moves in rounds of one slot; each round
 * costs a step (every rank's flag seen by all) per phase, plus the copies
 * and reductions of one core. A single-copy call costs two steps plus one
 * system call per peer and chunk, and moves each byte once.
 */
#include "tuning/cost_shm.h"

#include <math.h>

static int usable(const tune_model_t *m, int cma)
{
    return m->node_local && (!cma || m->node_cma);
}

/* A lone rank has nothing to exchange. */
#define SHM_COST(m, p, cma, expr) (!usable(m, cma) ? INFINITY : (p) == 1 ? 0.0 : (expr))

static double rounds(const tune_model_t *m, double n)
{
    double slot = m->shm_slot ? (double)m->shm_slot : 262144.0;

    return n > 0 ? ceil(n / slot) : 1.0;
}

/* Every rank copies its vector in, then reduces the whole vector from every slot. */
double tune_shm_allreduce_flat(const tune_model_t *m, double n, int p)
{
    return SHM_COST(m, p, 0, rounds(m, n) * 2 * m->shm_alpha + n * m->shm_beta
                                 + (p - 1) * n * m->gamma);
}

/* Copy in, reduce one slice of every slot, copy every slice out: three steps a round. */
double tune_shm_allreduce_slice(const tune_model_t *m, double n, int p)
{
    return SHM_COST(m, p, 0, rounds(m, n) * 3 * m->shm_alpha + 2 * n * m->shm_beta
                                 + (p - 1) * n / p * m->gamma);
}

/* Read one slice from every peer, reduce it, write it to every peer. */
double tune_shm_allreduce_cma(const tune_model_t *m, double n, int p)
{
    double slice = n / p;

    return SHM_COST(m, p, 1, 2 * m->shm_alpha + 2.0 * (p - 1) * rounds(m, slice) * m->cma_alpha
           + 2.0 * (p - 1) * slice * m->shm_beta + (p - 1) * slice * m->gamma);
}

/* n is the whole input; each rank reduces its block from every slot. */
double tune_shm_reduce_scatter(const tune_model_t *m, double n, int p)
{
    return SHM_COST(m, p, 0, rounds(m, n) * 2 * m->shm_alpha + n * m->shm_beta
                                 + (p - 1) * n / p * m->gamma);
}

double tune_shm_reduce_scatter_cma(const tune_model_t *m, double n, int p)
{
    double block = n / p;

    return SHM_COST(m, p, 1, 2 * m->shm_alpha + (p - 1) * rounds(m, block) * m->cma_alpha
           + (p - 1) * block * (m->shm_beta + m->gamma));
}

/* n is the gathered result: each rank copies its block in and the whole result out. */
double tune_shm_allgather(const tune_model_t *m, double n, int p)
{
    return SHM_COST(m, p, 0, rounds(m, n / p) * 2 * m->shm_alpha + (n / p + n) * m->shm_beta);
}

double tune_shm_allgather_cma(const tune_model_t *m, double n, int p)
{
    return SHM_COST(m, p, 1, 2 * m->shm_alpha + (p - 1) * m->cma_alpha
                                 + (p - 1) * n / p * m->shm_beta);
}

double tune_shm_broadcast(const tune_model_t *m, double n, int p)
{
    return SHM_COST(m, p, 0, rounds(m, n) * 2 * m->shm_alpha + 2 * n * m->shm_beta);
}

double tune_shm_broadcast_cma(const tune_model_t *m, double n, int p)
{
    return SHM_COST(m, p, 1, 2 * m->shm_alpha + m->cma_alpha + n * m->shm_beta);
}

double tune_shm_barrier(const tune_model_t *m, double n, int p)
{
    (void)n;
    return SHM_COST(m, p, 0, m->shm_alpha);
}
