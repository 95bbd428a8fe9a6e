/* Alpha-beta-gamma cost of every algorithm chorus can select. */
#include "tuning/cost_model.h"
#include "tuning/cost_hier.h"
#include "tuning/cost_shm.h"

#include <math.h>
#include <strings.h>

/* Rounds of a binomial tree or of dissemination: ceil(log2 p). */
static int log2_ceil(int p)
{
    int k = 0;

    while (k < 31 && (1 << k) < p)
        k++;
    return k;
}

/* log2 of the largest power of two not above p (p >= 1). */
static int log2_floor(int p)
{
    int k = 0;

    while (k < 30 && (2 << k) <= p)
        k++;
    return k;
}

/*
 * Non-power-of-two rank counts are folded onto the largest power of two p2:
 * each extra rank sends its vector to a partner, which reduces it, and gets
 * the result back at the end. That costs two messages of n bytes and one
 * reduction of n bytes on top of the power-of-two algorithm.
 */
static double fold_cost(const tune_model_t *m, double n, int p)
{
    if ((1 << log2_floor(p)) == p)
        return 0.0;
    return 2.0 * (m->alpha + n * m->beta) + n * m->gamma;
}

/* Reduce-scatter then allgather around the ring, n/p bytes per step. */
static double allreduce_ring(const tune_model_t *m, double n, int p)
{
    double frac = (double)(p - 1) / p;

    return 2.0 * (p - 1) * m->alpha + 2.0 * frac * n * m->beta + frac * n * m->gamma;
}

/* log2(p2) exchanges of the whole vector, each followed by a reduction. */
static double allreduce_rd(const tune_model_t *m, double n, int p)
{
    int steps = log2_floor(p);

    return steps * (m->alpha + n * m->beta + n * m->gamma) + fold_cost(m, n, p);
}

/* Recursive halving reduce-scatter, recursive doubling allgather. */
static double allreduce_rabenseifner(const tune_model_t *m, double n, int p)
{
    int p2 = 1 << log2_floor(p);
    double frac = (double)(p2 - 1) / p2;

    return 2.0 * log2_floor(p) * m->alpha + 2.0 * frac * n * m->beta + frac * n * m->gamma
           + fold_cost(m, n, p);
}

/* n is the gathered result: p-1 steps of one rank's block, n/p. */
static double allgather_ring(const tune_model_t *m, double n, int p)
{
    return (p - 1) * (m->alpha + n / p * m->beta);
}

/* n is the whole input: p-1 steps, each receiving and reducing one block. */
static double reduce_scatter_ring(const tune_model_t *m, double n, int p)
{
    return (p - 1) * (m->alpha + n / p * (m->beta + m->gamma));
}

static double broadcast_binomial(const tune_model_t *m, double n, int p)
{
    return log2_ceil(p) * (m->alpha + n * m->beta);
}

/*
 * The message goes down the chain in chunks of c bytes: the last rank gets
 * the first chunk after p-1 hops and one more chunk every hop after that.
 */
static double broadcast_chain(const tune_model_t *m, double n, int p)
{
    double c = (m->chunk_bytes == 0 || (double)m->chunk_bytes > n) ? n : (double)m->chunk_bytes;
    double chunks = c > 0.0 ? ceil(n / c) : 1.0;

    if (p == 1)
        return 0.0;
    return (p - 2 + chunks) * (m->alpha + c * m->beta);
}

static double reduce_binomial(const tune_model_t *m, double n, int p)
{
    return log2_ceil(p) * (m->alpha + n * m->beta + n * m->gamma);
}

/* n is one rank's whole send buffer: p-1 exchanges of one peer's block. */
static double alltoall_pairwise(const tune_model_t *m, double n, int p)
{
    return (p - 1) * (m->alpha + n / p * m->beta);
}

static double barrier_dissemination(const tune_model_t *m, double n, int p)
{
    (void)n;
    return log2_ceil(p) * m->alpha;
}

typedef struct {
    const char *name;
    double (*cost)(const tune_model_t *m, double n, int p);
    int node_local;         /* a shared-memory algorithm: prices ranks sharing cores itself */
    int ring_shaped;        /* a flat algorithm whose flows follow the ring (cost_hier.h) */
    int spread;             /* a hierarchical algorithm: prices several nodes itself */
} tune_alg_t;

typedef struct {
    const char *name;
    int nalgs;
    tune_alg_t algs[TUNE_ALGS_MAX];
} tune_coll_desc_t;

/*
 * Indexed by tune_coll_t. The first candidate is the one kept when the
 * model cannot tell the candidates apart (see select.c).
 */
static const tune_coll_desc_t tune_colls[TUNE_COLL_COUNT] = {
    [TUNE_COLL_ALLREDUCE] = {
        .name = "allreduce", .nalgs = 7,
        .algs = {{.name = "ring", .cost = allreduce_ring, .ring_shaped = 1},
                 {.name = "rd", .cost = allreduce_rd},
                 {.name = "rabenseifner", .cost = allreduce_rabenseifner},
                 {.name = "shm", .cost = tune_shm_allreduce_flat, .node_local = 1},
                 {.name = "shm_slice", .cost = tune_shm_allreduce_slice, .node_local = 1},
                 {.name = "shm_cma", .cost = tune_shm_allreduce_cma, .node_local = 1},
                 {.name = "hier", .cost = tune_hier_allreduce, .spread = 1}},
    },
    [TUNE_COLL_ALLGATHER] = {
        .name = "allgather", .nalgs = 4,
        .algs = {{.name = "ring", .cost = allgather_ring, .ring_shaped = 1},
                 {.name = "shm", .cost = tune_shm_allgather, .node_local = 1},
                 {.name = "shm_cma", .cost = tune_shm_allgather_cma, .node_local = 1},
                 {.name = "hier", .cost = tune_hier_allgather, .spread = 1}},
    },
    [TUNE_COLL_BROADCAST] = {
        .name = "broadcast", .nalgs = 5,
        .algs = {{.name = "binomial", .cost = broadcast_binomial},
                 {.name = "chain", .cost = broadcast_chain, .ring_shaped = 1},
                 {.name = "shm", .cost = tune_shm_broadcast, .node_local = 1},
                 {.name = "shm_cma", .cost = tune_shm_broadcast_cma, .node_local = 1},
                 {.name = "hier", .cost = tune_hier_broadcast, .spread = 1}},
    },
    [TUNE_COLL_REDUCE_SCATTER] = {
        .name = "reduce_scatter", .nalgs = 4,
        .algs = {{.name = "ring", .cost = reduce_scatter_ring, .ring_shaped = 1},
                 {.name = "shm", .cost = tune_shm_reduce_scatter, .node_local = 1},
                 {.name = "shm_cma", .cost = tune_shm_reduce_scatter_cma, .node_local = 1},
                 {.name = "hier", .cost = tune_hier_reduce_scatter, .spread = 1}},
    },
    [TUNE_COLL_REDUCE] = {
        .name = "reduce", .nalgs = 4,
        .algs = {{.name = "binomial", .cost = reduce_binomial},
                 {.name = "shm", .cost = tune_shm_allreduce_flat, .node_local = 1},
                 {.name = "shm_slice", .cost = tune_shm_allreduce_slice, .node_local = 1},
                 {.name = "shm_cma", .cost = tune_shm_allreduce_cma, .node_local = 1}},
    },
    [TUNE_COLL_ALLTOALL] = {
        .name = "alltoall", .nalgs = 1,
        .algs = {{.name = "pairwise", .cost = alltoall_pairwise}},
    },
    [TUNE_COLL_BARRIER] = {
        .name = "barrier", .nalgs = 2,
        .algs = {{.name = "dissemination", .cost = barrier_dissemination},
                 {.name = "shm", .cost = tune_shm_barrier, .node_local = 1}},
    },
};

void tune_model_default(tune_model_t *model_p)
{
    model_p->alpha = TUNE_DEFAULT_ALPHA;
    model_p->beta = TUNE_DEFAULT_BETA;
    model_p->gamma = TUNE_DEFAULT_GAMMA;
    model_p->chunk_bytes = TUNE_DEFAULT_CHUNK_BYTES;
    model_p->node_local = 0;
    model_p->node_cma = 0;
    model_p->shm_slot = 0;
    model_p->node_cores = 0;
    model_p->shm_alpha = TUNE_DEFAULT_SHM_ALPHA;
    model_p->shm_alpha_oversub = TUNE_DEFAULT_SHM_ALPHA_OVERSUB;
    model_p->shm_beta = TUNE_DEFAULT_SHM_BETA;
    model_p->shm_gamma = TUNE_DEFAULT_SHM_GAMMA;
    model_p->cma_alpha = TUNE_DEFAULT_CMA_ALPHA;
    model_p->cma_beta = TUNE_DEFAULT_CMA_BETA;
    model_p->nnodes = 0;
    model_p->local_min = model_p->local_max = 1;
    model_p->ring_crossings = 1;
    model_p->net_alpha = TUNE_DEFAULT_NET_ALPHA;
    model_p->net_beta = TUNE_DEFAULT_NET_BETA;
}

const char *tune_coll_name(tune_coll_t coll)
{
    if ((unsigned)coll >= TUNE_COLL_COUNT)
        return NULL;
    return tune_colls[coll].name;
}

tune_coll_t tune_coll_from_name(const char *name)
{
    for (int c = 0; c < TUNE_COLL_COUNT; c++) {
        if (name != NULL && strcasecmp(name, tune_colls[c].name) == 0)
            return (tune_coll_t)c;
    }
    return TUNE_COLL_COUNT;
}

int tune_coll_nalgs(tune_coll_t coll)
{
    if ((unsigned)coll >= TUNE_COLL_COUNT)
        return 0;
    return tune_colls[coll].nalgs;
}

const char *tune_coll_alg(tune_coll_t coll, int i)
{
    if (i < 0 || i >= tune_coll_nalgs(coll))
        return NULL;
    return tune_colls[coll].algs[i].name;
}

int tune_alg_spread(tune_coll_t coll, int i)
{
    return i >= 0 && i < tune_coll_nalgs(coll) && tune_colls[coll].algs[i].spread;
}

int tune_alg_index(tune_coll_t coll, const char *name)
{
    for (int i = 0; name != NULL && i < tune_coll_nalgs(coll); i++) {
        if (strcasecmp(name, tune_colls[coll].algs[i].name) == 0)
            return i;
    }
    return -1;
}

double tune_cost(const tune_model_t *model, tune_coll_t coll, int alg, size_t bytes, int p)
{
    const tune_alg_t *a;

    if (model == NULL || p < 1 || alg < 0 || alg >= tune_coll_nalgs(coll))
        return -1.0;
    a = &tune_colls[coll].algs[alg];
    if (a->spread)
        return a->cost(model, (double)bytes, p);
    /* On several nodes a flat algorithm waits for the node links its flows share. */
    if (!a->node_local && model->nnodes > 1) {
        tune_model_t flat;
        tune_hier_flat_model(model, a->ring_shaped, &flat);
        return a->cost(&flat, (double)bytes, p);
    }
    /* On one node with more ranks than cores, the network algorithms' ranks share the
     * cores as the shared-memory ones do. */
    if (!a->node_local && model->node_local)
        return tune_shm_share(model, p) * a->cost(model, (double)bytes, p);
    return a->cost(model, (double)bytes, p);
}
