/* Costs of the algorithms on several nodes (see cost_hier.h). */
#include "tuning/cost_hier.h"

#include <math.h>

/* Some node holds several ranks and there are several nodes. */
static int spread(const tune_model_t *m)
{
    return m->nnodes > 1 && m->local_max > 1;
}

/* t where the algorithm helps (some node holds several ranks, several nodes); one rank: 0. */
static double priced(const tune_model_t *m, int p, double t)
{
    if (p == 1)
        return 0.0;
    return spread(m) ? t : INFINITY;
}

void tune_hier_flat_model(const tune_model_t *m, int ring_shaped, tune_model_t *out)
{
    int flows = ring_shaped ? m->ring_crossings : m->local_max;
    double net = (flows > 1 ? flows : 1) * m->net_beta;

    *out = *m;
    out->alpha = m->alpha > m->net_alpha ? m->alpha : m->net_alpha;
    out->beta = m->beta > net ? m->beta : net;
}

/*
 * Node-local reduce-scatter into local_max shards, a ring among the nodes
 * per shard (a rank on the emptiest node runs local_max / local_min of
 * them, and each node link carries 2 (N-1)/N of the vector), node-local
 * allgather. The stages run in segments of 2 chunks per shard and node, so
 * the node's work hides behind the network's but for one segment.
 */
double tune_hier_allreduce(const tune_model_t *m, double n, int p)
{
    double L = m->local_max, G = m->nnodes, shard = n / L;
    double rings = ceil(L / (m->local_min > 0 ? m->local_min : 1));
    double seg = (m->chunk_bytes ? (double)m->chunk_bytes : n) * L * G * 2;
    double local = 2.0 * (L - 1) * shard * m->beta + (L - 1) * shard * m->gamma;
    double net = 2.0 * (G - 1) / G * n * m->net_beta + (G - 1) / G * shard * rings * m->gamma;
    double fill = (local < net ? local : net) * (seg < n ? seg / n : 1.0);
    double latency = 2.0 * (L - 1) * m->alpha + 2.0 * (G - 1) * rings * m->net_alpha;

    return priced(m, p, latency + (local > net ? local : net) + fill);
}

/* Two stages running at once, the shorter one hidden but for its first part of `frac`. */
static double overlapped(double a, double b, double frac)
{
    return (a > b ? a : b) + (a < b ? a : b) * (frac < 1.0 ? frac : 1.0);
}

/*
 * n is the gathered result. Each rank sends its block to the other ranks
 * of its node and to one rank on each other node, which passes it on chunk
 * by chunk: each node link carries the node's blocks once per other node.
 */
double tune_hier_allgather(const tune_model_t *m, double n, int p)
{
    double L = m->local_max, G = m->nnodes, block = n / p;
    double c = m->chunk_bytes ? (double)m->chunk_bytes : block;
    double local = (L - 1) * block * m->beta + (L - 1) * (p - L) / L * block * m->beta;
    double net = (G - 1) * L * block * m->net_beta;
    double latency = (L - 1) * m->alpha + (G - 1) * m->net_alpha;

    return priced(m, p, latency + overlapped(local, net, block > 0 ? c / block : 1.0));
}

/*
 * The root's node cuts the vector into local_max pieces, each piece goes
 * down a chain of nodes (the root's node link carries the vector once),
 * and each node's holders pass their pieces on chunk by chunk.
 */
double tune_hier_broadcast(const tune_model_t *m, double n, int p)
{
    double L = m->local_max, G = m->nnodes, piece = n / L;
    double c = (m->chunk_bytes == 0 || (double)m->chunk_bytes > piece) ? piece
                                                                        : (double)m->chunk_bytes;
    double local = 2.0 * (L - 1) * piece * m->beta;
    /* The pieces' chunks cross the root's node link in L flows at once. */
    double net = n * m->net_beta + (G - 2) * c * L * m->net_beta
                 + (c > 0 ? n / c / L : 0.0) * m->net_alpha;
    double latency = 2.0 * (L - 1) * m->alpha + (G - 1) * m->net_alpha;

    return priced(m, p, latency + overlapped(local, net, piece > 0 ? c / piece : 1.0));
}

/*
 * n is the whole input, p blocks. Each rank sends the blocks of its node's
 * other ranks to them and the other nodes' blocks it does not reduce to the
 * local rank that does; the reducers send one partial per block to its
 * owner, so each node link carries the other nodes' blocks once. Both stages
 * and the reductions run chunk by chunk, so they overlap but for one chunk.
 */
double tune_hier_reduce_scatter(const tune_model_t *m, double n, int p)
{
    double L = m->local_max, G = m->nnodes, block = n / p;
    double c = m->chunk_bytes ? (double)m->chunk_bytes : block;
    double reduced = (L - 1) * (p - L) / L + (L - 1) + (G - 1);
    double local = (L - 1) * block * m->beta + (L - 1) * (p - L) / L * block * m->beta
                   + reduced * block * m->gamma;
    double net = (G - 1) * L * block * m->net_beta;
    double latency = (L - 1) * m->alpha + (G - 1) * m->net_alpha;

    return priced(m, p, latency + overlapped(local, net, block > 0 ? c / block : 1.0));
}
