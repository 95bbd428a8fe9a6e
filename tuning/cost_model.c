/* The cost model's defaults and the primitives the algorithms' prices share. */
#include "tuning/cost_model.h"

#include <math.h>
#include <sched.h>

void tune_model_default(tune_model_t *model_p)
{
    model_p->alpha = TUNE_DEFAULT_ALPHA;
    model_p->beta = TUNE_DEFAULT_BETA;
    model_p->gamma = TUNE_DEFAULT_GAMMA;
    model_p->chunk_bytes = TUNE_DEFAULT_CHUNK_BYTES;
    model_p->net_alpha = TUNE_DEFAULT_NET_ALPHA;
    model_p->net_beta = TUNE_DEFAULT_NET_BETA;
}

int tune_model_valid(const tune_model_t *m)
{
    return isfinite(m->alpha) && m->alpha >= 0.0 && isfinite(m->beta) && m->beta >= 0.0
           && isfinite(m->gamma) && m->gamma >= 0.0;
}

int tune_log2_ceil(int p)
{
    int k = 0;

    while (k < 31 && (1 << k) < p)
        k++;
    return k;
}

int tune_log2_floor(int p)
{
    int k = 0;

    while (k < 30 && (2 << k) <= p)
        k++;
    return k;
}

double tune_fold_cost(const tune_model_t *m, double n, int p)
{
    if ((1 << tune_log2_floor(p)) == p)
        return 0.0;
    return 2.0 * (m->alpha + n * m->beta) + n * m->gamma;
}

void tune_flat_model(const tune_model_t *m, const tune_shape_t *shape, int ring_shaped,
                     tune_model_t *out)
{
    int flows = ring_shaped ? shape->ring_crossings : shape->local_max;
    double net = (flows > 1 ? flows : 1) * m->net_beta;

    *out = *m;
    if (shape->local_max <= 1) {
        /* One rank per node: every flow crosses the network, none takes the node's link. */
        out->alpha = m->net_alpha;
        out->beta = net;
        return;
    }
    out->alpha = m->alpha > m->net_alpha ? m->alpha : m->net_alpha;
    out->beta = m->beta > net ? m->beta : net;
}

double tune_share(int p, int cores)
{
    return cores > 0 && p > cores ? (double)p / cores : 1.0;
}

double tune_overlap(double a, double b, double frac)
{
    return (a > b ? a : b) + (a < b ? a : b) * (frac < 1.0 ? frac : 1.0);
}

int tune_usable_cores(void)
{
    cpu_set_t set;

    if (sched_getaffinity(0, sizeof(set), &set) != 0 || CPU_COUNT(&set) < 1)
        return 1;
    return CPU_COUNT(&set);
}
