/*
 * Shared memory as a collective transport: a team is a node (shm.h) over
 * the members' regions, made by the core's three steps (team.h): each
 * member creates its region and publishes where it is, maps its peers'
 * regions from their cards, and seals the node once every member of the
 * communicator agreed. A call on the team is a task around shm_op_t.
 *
 * A team is any group of ranks that share a machine, not necessarily all of
 * them, and a process may belong to many teams at once (one per
 * communicator): each has its own region, node and turns, and nothing is
 * kept per process but the configuration.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "transports/shm/shm_team.h"
#include "util/log.h"

struct tl_coll_ctx {
    shm_config_t cfg;
};

typedef struct shm_task shm_task_t;

struct tl_team {
    shm_node_t *node;
    int me, size;               /* this member's position, the members */
    uint32_t flags;             /* agreed at team_seal */
    /*
     * A finished call's task, kept for the next one: a call costs no
     * allocation. Any thread that finalizes a task may put one (NULL to a
     * task); only the one that creates tasks, one at a time in call order
     * (take_ticket), takes it back (a task to NULL).
     */
    _Atomic(shm_task_t *) spare;
};

struct shm_task {
    chorus__task_t head;
    shm_op_t op;
    tl_team_t *team;
};

_Static_assert(sizeof(shm_card_t) <= TL_TEAM_CARD_MAX, "shm card exceeds TL_TEAM_CARD_MAX");

const shm_config_t *shm_ctx_config(const tl_coll_ctx_t *ctx)
{
    return &ctx->cfg;
}

static chorus_status_t shm_ctx_create(const tl_coll_ctx_params_t *params,
                                      tl_coll_ctx_t **ctx_p)
{
    tl_coll_ctx_t *ctx = calloc(1, sizeof(*ctx));
    chorus_status_t status;

    if (ctx == NULL)
        return CHORUS_ERR_NO_MEMORY;
    status = chorus__config_read(&shm_config_table, &ctx->cfg);
    if (status != CHORUS_OK || !ctx->cfg.enabled || params->size == 1) {
        free(ctx);
        *ctx_p = NULL;
        return status;
    }
    *ctx_p = ctx;
    return CHORUS_OK;
}

static void shm_ctx_destroy(tl_coll_ctx_t *ctx)
{
    free(ctx);
}

static chorus_status_t shm_team_card(tl_coll_ctx_t *ctx, int size, int me, void *card,
                                     size_t *len_p, void **pending_p)
{
    shm_region_t *region = NULL;
    shm_card_t mine = {.pid = (int32_t)getpid(), .fd = -1};
    chorus_status_t status = shm_region_create(&ctx->cfg, &region, &mine);

    (void)size;
    (void)me;
    /* A bad setting fails the communicator; a refused region only leaves the team out. */
    if (status == CHORUS_ERR_INVALID_ARG)
        return status;
    if (status == CHORUS_OK)
        shm_cuda_card(&ctx->cfg, &mine);
    memcpy(card, &mine, sizeof(mine));
    *len_p = sizeof(mine);
    *pending_p = status == CHORUS_OK ? region : NULL;
    return CHORUS_OK;
}

static void shm_team_abandon(tl_coll_ctx_t *ctx, void *pending)
{
    (void)ctx;
    shm_region_destroy(pending);
}

static chorus_status_t shm_team_create(tl_coll_ctx_t *ctx, void *pending, const void *cards,
                                       int size, int me, tl_team_t **team_p, uint32_t *flags_p)
{
    shm_card_t *all = calloc((size_t)size, sizeof(*all));
    tl_team_t *team = calloc(1, sizeof(*team));
    chorus_status_t status = CHORUS_ERR_NO_MEMORY;
    int cma = 0;

    *team_p = NULL;
    *flags_p = 0;
    if (pending == NULL) {
        status = CHORUS_OK;     /* this rank has no region: no team, no fault */
        goto out;
    }
    if (all == NULL || team == NULL) {
        shm_region_destroy(pending);
        goto out;
    }
    for (int j = 0; j < size; j++)
        memcpy(&all[j], (const char *)cards + (size_t)j * TL_TEAM_CARD_MAX, sizeof(all[j]));
    /* shm_node_create takes the region over, also when it fails. */
    status = shm_node_create(pending, all, me, size, &ctx->cfg, &team->node, &cma);
    if (status == CHORUS_OK) {
        team->me = me;
        team->size = size;
        *flags_p = TL_TEAM_OK | (cma ? SHM_TEAM_CMA : 0) |
                   (shm_cuda_team_ok(all, size, me) ? SHM_TEAM_CUDA : 0);
        *team_p = team;
        team = NULL;
    } else if (status != CHORUS_ERR_NO_MEMORY && status != CHORUS_ERR_INVALID_ARG) {
        status = CHORUS_OK;     /* a peer's region could not be mapped: no team, no fault */
    }
out:
    free(team);
    free(all);
    return status;
}

static void shm_team_seal(tl_team_t *team, uint32_t flags, int cores)
{
    team->flags = flags;
    shm_node_seal(team->node, (flags & SHM_TEAM_CMA) != 0, cores);
}

static void shm_team_destroy(tl_team_t *team)
{
    if (team == NULL)
        return;
    free(atomic_load(&team->spare));
    shm_node_destroy(team->node);
    free(team);
}

static void shm_team_fail(tl_team_t *team, chorus_status_t status)
{
    shm_node_fail(team->node, status);
}

/* ---- a call as a task ---------------------------------------------------- */

static shm_task_t *task_of(chorus__task_t *task)
{
    return (shm_task_t *)task;
}

static int shm_task_progress(chorus__task_t *task)
{
    return shm_op_progress(&task_of(task)->op);
}

static int shm_task_wait(chorus__task_t *task, unsigned max_us)
{
    shm_op_wait(&task_of(task)->op, max_us);
    return 1;
}

static void shm_task_skip(chorus__task_t *task, chorus_status_t status)
{
    (void)status;
    shm_op_skip(&task_of(task)->op);
}

static void shm_task_fail(chorus__task_t *task, chorus_status_t status)
{
    shm_node_fail(task_of(task)->op.node, status);
}

/* The team keeps one task for its next call; tasks of calls in flight at once are freed. */
static void spare_put(tl_team_t *team, shm_task_t *t)
{
    shm_task_t *none = NULL;

    if (t != NULL && !atomic_compare_exchange_strong(&team->spare, &none, t))
        free(t);
}

static void shm_task_finalize(chorus__task_t *task)
{
    shm_task_t *t = task_of(task);

    /* A call that never ran gives its turn up, so that later calls are not held. */
    if (task->state == CHORUS__TASK_NEW)
        shm_op_skip(&t->op);
    shm_op_release(&t->op);
    spare_put(t->team, t);
}

static int shm_task_again(chorus__task_t *task, const void *sendbuf, void *recvbuf)
{
    return shm_op_rearm(&task_of(task)->op, sendbuf, recvbuf);
}

/* A staging call whose buffers were chorus memory on every rank ran on them directly. */
static const char *shm_task_served_by(const chorus__task_t *task)
{
    return task_of((chorus__task_t *)task)->op.mem_direct ? "shm_mem" : NULL;
}

static const chorus__task_ops_t shm_task_ops = {
    .name = "shm",
    .progress = shm_task_progress,
    .wait = shm_task_wait,
    .skip = shm_task_skip,
    .fail = shm_task_fail,
    .finalize = shm_task_finalize,
    .served_by = shm_task_served_by,
    .again = shm_task_again,
};

/* A call this team cannot run as asked is refused before it takes a turn. */
static chorus_status_t shm_task_check(const tl_team_t *team, const coll_args_t *a,
                                      int variant)
{
    int vform = a->counts != NULL;

    if (a->rank != team->me || a->size != team->size) {
        chorus_error("shm team call: invalid argument rank=%d size=%d: this member is %d of "
                     "%d", a->rank, a->size, team->me, team->size);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (vform && (a->displs == NULL ||
                  (a->coll != COLL_ALLGATHER && a->coll != COLL_REDUCE_SCATTER))) {
        chorus_error("shm team call: invalid argument counts: the v-form of %s needs counts "
                     "and displs, and only allgather and reduce_scatter have one",
                     coll_type_name(a->coll));
        return CHORUS_ERR_INVALID_ARG;
    }
    if (!tl_coll_variant_runs(&tl_shm_coll_ops, variant, a->coll, team->flags, vform)) {
        chorus_error("shm team call: invalid argument variant=%d: it does not run %s%s on "
                     "this team (flags 0x%x)", variant, coll_type_name(a->coll),
                     vform ? " (v-form)" : "", (unsigned)team->flags);
        return CHORUS_ERR_INVALID_ARG;
    }
    return CHORUS_OK;
}

/* The spare task, or NULL. Nobody else takes it meanwhile, and a put needs it NULL: a load
 * and a store do, without a locked exchange. */
static shm_task_t *spare_take(tl_team_t *team)
{
    shm_task_t *t = atomic_load_explicit(&team->spare, memory_order_acquire);

    if (t != NULL)
        atomic_store_explicit(&team->spare, NULL, memory_order_relaxed);
    return t;
}

static chorus_status_t shm_task_create(tl_team_t *team, const coll_args_t *args, int variant,
                                       chorus__task_t **task_p)
{
    shm_task_t *t = spare_take(team);
    chorus_status_t status;

    /* The spare's last call had this shape: it passed the check, and its fingerprint,
     * form and rounds hold for this one. */
    if (t != NULL && shm_op_same_shape(&t->op, args, (shm_kind_t)variant)) {
        chorus__task_init(&t->head, &shm_task_ops, CHORUS__TASK_INLINE);
        shm_op_again(&t->op, args);
        t->team = team;
        *task_p = &t->head;
        return CHORUS_OK;
    }
    if ((status = shm_task_check(team, args, variant)) != CHORUS_OK) {
        spare_put(team, t);
        return status;
    }
    if (t == NULL && (t = malloc(sizeof(*t))) == NULL)
        return CHORUS_ERR_NO_MEMORY;
    chorus__task_init(&t->head, &shm_task_ops, CHORUS__TASK_INLINE);
    shm_op_init(&t->op, team->node, args, (shm_kind_t)variant);
    if (shm_cuda_enqueued(&t->op))
        t->head.flags |= CHORUS__TASK_ENQUEUED;
    t->team = team;
    *task_p = &t->head;
    return CHORUS_OK;
}

#define BIT(c) (1u << (c))
#define SHM_REDUCING (BIT(COLL_ALLREDUCE) | BIT(COLL_REDUCE))

#define SHM_MOVING (BIT(COLL_REDUCE_SCATTER) | BIT(COLL_ALLGATHER) | BIT(COLL_BROADCAST) | \
                    BIT(COLL_ALLTOALL))
#define SHM_DEVICE (SHM_REDUCING | BIT(COLL_REDUCE_SCATTER) | BIT(COLL_ALLGATHER) | \
                    BIT(COLL_BROADCAST))

static const tl_coll_variant_t shm_variants[] = {
    [SHM_FLAT] = {.name = "shm", .colls = SHM_REDUCING | SHM_MOVING | BIT(COLL_BARRIER),
                  .vforms = 1},
    [SHM_SLICE] = {.name = "shm_slice", .colls = SHM_REDUCING},
    [SHM_CMA] = {.name = "shm_cma", .colls = SHM_REDUCING | SHM_MOVING, .needs = SHM_TEAM_CMA,
                 .vforms = 1},
    [SHM_CUDA] = {.name = "shm_cuda", .colls = SHM_DEVICE, .needs = SHM_TEAM_CUDA,
                  .mems = TL_MEM(COLL_MEM_CUDA)},
    [SHM_LL] = {.name = "shm_ll", .colls = SHM_REDUCING | BIT(COLL_REDUCE_SCATTER) |
                                           BIT(COLL_ALLGATHER) | BIT(COLL_BROADCAST)},
};

const tl_coll_ops_t tl_shm_coll_ops = {
    .name = "shm",
    .config = &shm_config_table,
    .ctx_create = shm_ctx_create,
    .ctx_destroy = shm_ctx_destroy,
    .team_card = shm_team_card,
    .team_abandon = shm_team_abandon,
    .team_create = shm_team_create,
    .team_seal = shm_team_seal,
    .team_destroy = shm_team_destroy,
    .team_fail = shm_team_fail,
    .variants = shm_variants,
    .nvariants = sizeof(shm_variants) / sizeof(shm_variants[0]),
    .price = shm_price,
    .task_create = shm_task_create,
};
