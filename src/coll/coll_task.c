/* The task of a call: a built schedule, or a collective on the node team; and team steps. */
#include "coll/coll.h"

#include "util/log.h"

/* The bytes a team call moves, as its transport prices them; v-forms by their blocks. */
static size_t team_call_bytes(const coll_args_t *a)
{
    size_t total = 0;

    if (a->counts == NULL)
        return coll_args_bytes(a);
    for (int j = 0; j < a->size; j++)
        total += a->counts[j];
    return total * chorus_dtype_size(a->dtype);
}

long coll_sched_team(coll_sched_t *s, coll_team_t *team, const coll_args_t *args,
                     const long *deps, int ndeps)
{
    chorus__task_t *task;
    double price;
    int variant = -1;
    long idx;

    if (team != NULL && team->team != NULL)
        variant = coll_team_variant(team->ops, team->ctx, &team->desc, args->coll, args->mem,
                                    team_call_bytes(args), args->counts != NULL, &price);
    if (variant < 0) {
        chorus_error("no team variant runs %s on %d ranks", coll_type_name(args->coll),
                     team != NULL ? team->desc.size : 0);
        return -1;
    }
    if (team->ops->task_create(team->team, args, variant, &task) != CHORUS_OK)
        return -1;
    idx = coll_sched_copy(s, NULL, NULL, 0, deps, ndeps);
    if (idx < 0) {
        chorus__task_finalize(task);
        return -1;
    }
    s->steps[idx].kind = COLL_STEP_TEAM;
    s->steps[idx].team_coll = (uint8_t)args->coll;
    s->steps[idx].task = task;
    return idx;
}

chorus_status_t coll_alg_task(const coll_alg_t *alg, const coll_args_t *args,
                              const coll_env_t *env, tl_port_t *port, uint64_t tag_base,
                              coll_scratch_pool_t *pool, chorus__task_t **task_p)
{
    coll_sched_t *sched;
    chorus_status_t status;

    if (alg->team_ops != NULL) {
        const coll_team_t *team = env->node_team;

        if (team == NULL || team->team == NULL || team->ops != alg->team_ops ||
            team->desc.size != args->size ||
            !tl_coll_variant_runs(team->ops, alg->team_variant, args->coll, team->desc.flags,
                                  0) ||
            !tl_coll_variant_serves(team->ops, alg->team_variant, args->mem)) {
            chorus_error("rank %d: %s %s in %s memory needs a team of every rank that runs it "
                         "there, which this communicator does not have", args->rank, alg->name,
                         coll_type_name(args->coll), coll_mem_name(args->mem));
            return CHORUS_ERR_INTERNAL;
        }
        return team->ops->task_create(team->team, args, alg->team_variant, task_p);
    }
    status = coll_sched_create(pool, args->dtype, args->op, args->size, &sched);
    if (status != CHORUS_OK)
        return status;
    status = alg->build(args, env, sched);
    if (status != CHORUS_OK) {
        chorus_error("rank %d: %s %s of %zu elements could not be scheduled: %s", args->rank,
                     alg->name, coll_type_name(args->coll), args->count,
                     chorus_status_string(status));
        coll_sched_finalize(sched);
        return status;
    }
    status = coll_sched_bind(sched, port, tag_base);
    if (status != CHORUS_OK) {
        coll_sched_finalize(sched);
        return status;
    }
    *task_p = &sched->head;
    return CHORUS_OK;
}
