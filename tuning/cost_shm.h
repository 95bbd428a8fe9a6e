/*
 * Costs of the node-local candidates (transports/shm). Each is infinite
 * unless the model says every rank shares a node (and, for the single-copy
 * ones, that cross-memory attach works), so other tables never choose them.
 */
#ifndef CHORUS_TUNING_COST_SHM_H
#define CHORUS_TUNING_COST_SHM_H

#include "tuning/cost_model.h"

/* How many ranks share a core on the node (1 when each has one): the factor on work. */
double tune_shm_share(const tune_model_t *m, int p);

double tune_shm_allreduce_flat(const tune_model_t *m, double n, int p);
double tune_shm_allreduce_slice(const tune_model_t *m, double n, int p);
double tune_shm_allreduce_cma(const tune_model_t *m, double n, int p);
double tune_shm_reduce_scatter(const tune_model_t *m, double n, int p);
double tune_shm_reduce_scatter_cma(const tune_model_t *m, double n, int p);
double tune_shm_allgather(const tune_model_t *m, double n, int p);
double tune_shm_allgather_cma(const tune_model_t *m, double n, int p);
double tune_shm_broadcast(const tune_model_t *m, double n, int p);
double tune_shm_broadcast_cma(const tune_model_t *m, double n, int p);
double tune_shm_barrier(const tune_model_t *m, double n, int p);

#endif
