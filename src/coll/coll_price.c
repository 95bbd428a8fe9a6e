/*
 * What the algorithms' prices share: the environment as the cost model
 * sees it (the layout's shape, the cores, the node team) and the prices of
 * the collective transports' variants.
 */
#include "coll/coll.h"

#include <math.h>

int coll_team_variant(const tl_coll_ops_t *ops, const tl_coll_ctx_t *ctx,
                      const tl_team_desc_t *desc, coll_type_t coll, coll_mem_t mem,
                      size_t bytes, int vform, double *price_p)
{
    double best_price = INFINITY;
    int best = -1;

    for (int v = 0; v < ops->nvariants; v++) {
        double price;

        if (!tl_coll_variant_runs(ops, v, coll, desc->flags, vform) ||
            !tl_coll_variant_serves(ops, v, mem))
            continue;
        price = ops->price(ctx, desc, v, coll, bytes);
        if (best < 0 || price < best_price) {
            best = v;
            best_price = price;
        }
    }
    *price_p = best_price;
    return best;
}

int coll_env_team_of_all(const coll_env_t *env)
{
    return env->team_ops != NULL && env->team_desc.size == env->nranks;
}

/* A transport's variant runs where the team holds every rank, on the memory it serves. */
double coll_alg_price(const coll_alg_t *alg, const coll_env_t *env, size_t bytes)
{
    if (alg->team_ops == NULL)
        return alg->price(env, bytes);
    if (!coll_env_team_of_all(env) || env->team_ops != alg->team_ops ||
        !tl_coll_variant_serves(alg->team_ops, alg->team_variant, env->mem) ||
        !tl_coll_variant_runs(alg->team_ops, alg->team_variant, alg->coll, env->team_desc.flags,
                              0))
        return INFINITY;
    return alg->team_ops->price(env->team_ctx, &env->team_desc, alg->team_variant, alg->coll,
                                bytes);
}

void coll_price_shape(const coll_env_t *env, tune_shape_t *shape_p)
{
    const topo_layout_t *l = env->layout;

    if (l == NULL) {
        *shape_p = (tune_shape_t){.nnodes = 0, .local_min = 1, .local_max = 1,
                                  .ring_crossings = 1};
        return;
    }
    *shape_p = (tune_shape_t){.nnodes = l->nnodes, .local_min = l->local_min,
                              .local_max = l->local_max, .ring_crossings = l->ring_crossings};
}

double coll_price_flat(const coll_env_t *env, tune_cost_fn_t cost, int ring_shaped,
                       size_t bytes)
{
    tune_shape_t shape;
    tune_model_t flat;
    double share;

    if (env->mem != COLL_MEM_HOST)
        return INFINITY;
    coll_price_shape(env, &shape);
    if (shape.nnodes > 1) {
        tune_flat_model(env->model, &shape, ring_shaped, &flat);
        return cost(&flat, (double)bytes, env->nranks);
    }
    share = shape.nnodes == 1 ? tune_share(env->nranks, env->cores) : 1.0;
    return share * cost(env->model, (double)bytes, env->nranks);
}

int coll_price_hier(const coll_env_t *env, tune_shape_t *shape_p, double *price_p)
{
    if (env->mem != COLL_MEM_HOST) {
        *price_p = INFINITY;
        return 0;
    }
    if (env->nranks == 1) {
        *price_p = 0.0;
        return 0;
    }
    coll_price_shape(env, shape_p);
    if (shape_p->nnodes > 1 && shape_p->local_max > 1)
        return 1;
    *price_p = INFINITY;
    return 0;
}

double coll_price_team(const coll_env_t *env, coll_type_t coll, double bytes)
{
    double price = INFINITY;

    if (env->team_ops != NULL)
        coll_team_variant(env->team_ops, env->team_ctx, &env->team_desc, coll, env->mem,
                          (size_t)bytes, 0, &price);
    return price;
}
