/*
 * Costs on ranks spread over several nodes. The model then has two links:
 * alpha/beta between ranks of one node (over the transport) and
 * net_alpha/net_beta of each node's network link, which every flow leaving
 * the node shares.
 *
 * A flat algorithm is priced as if every step waited for its slowest link:
 * the ring-shaped ones (ring, chain) send ring_crossings flows through a node
 * link, the others (recursive doubling, trees, pairwise) up to local_max.
 * The hierarchical candidates are infinite unless some node holds more than
 * one rank and there is more than one node.
 */
#ifndef CHORUS_TUNING_COST_HIER_H
#define CHORUS_TUNING_COST_HIER_H

#include "tuning/cost_model.h"

/* model as a flat algorithm sees it on several nodes; ring_shaped: see above. */
void tune_hier_flat_model(const tune_model_t *m, int ring_shaped, tune_model_t *out);

double tune_hier_allreduce(const tune_model_t *m, double n, int p);
double tune_hier_allgather(const tune_model_t *m, double n, int p);
double tune_hier_broadcast(const tune_model_t *m, double n, int p);
double tune_hier_reduce_scatter(const tune_model_t *m, double n, int p);

#endif
