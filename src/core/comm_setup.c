/*
 * What a new communicator agrees on before its first call, over its own
 * setup space: whether a collective transport serves the ranks of each of
 * its nodes (a node team), how many cores a node's ranks run on at once
 * (the fewest of any node), and from these, the selection table every rank
 * builds alike.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "topology/topo.h"
#include "tuning/cores.h"
#include "tuning/tune_config.h"
#include "util/log.h"

/* Team flag bits every rank votes on, per collective transport. */
#define SETUP_FLAG_BITS 8

chorus_status_t chorus__comm_setup_allgather(chorus_comm_t comm, const void *mine, size_t len,
                                             void *all)
{
    coll_args_t a = {.coll = COLL_ALLGATHER, .sendbuf = mine, .recvbuf = all, .count = len,
                     .dtype = CHORUS_UINT8, .op = CHORUS_SUM, .rank = comm->rank,
                     .size = comm->size, .chunk_bytes = comm->ctx->cfg.chunk_bytes};

    return chorus__call_setup(comm, &a, &coll_ring_allgather);
}

chorus_status_t chorus__comm_setup_min(chorus_comm_t comm, const int32_t *mine, int32_t *all,
                                       int n)
{
    coll_args_t a = {.coll = COLL_ALLREDUCE, .sendbuf = mine, .recvbuf = all, .count = (size_t)n,
                     .dtype = CHORUS_INT32, .op = CHORUS_MIN, .rank = comm->rank,
                     .size = comm->size, .chunk_bytes = comm->ctx->cfg.chunk_bytes};

    return chorus__call_setup(comm, &a, &coll_rd_allreduce);
}

/* What each rank says about every collective transport of the context. */
typedef struct {
    int32_t has[CHORUS__TEAMS_MAX];     /* this rank made a card */
    unsigned char card[CHORUS__TEAMS_MAX][TL_TEAM_CARD_MAX];
    tune_cpus_t cpus;                   /* the cores this rank may run on */
} setup_card_t;

typedef struct {
    void *pending[CHORUS__TEAMS_MAX];
    tl_team_t *team[CHORUS__TEAMS_MAX];
    uint32_t flags[CHORUS__TEAMS_MAX];
} setup_teams_t;

/* Step 1 of every collective transport: this rank's cards. */
static chorus_status_t setup_cards(chorus_comm_t comm, setup_card_t *mine, setup_teams_t *t)
{
    chorus__ctx_t *ctx = comm->ctx;

    memset(mine, 0, sizeof(*mine));
    tune_cpus_mine(&mine->cpus);
    if (comm->local_size < 2)
        return CHORUS_OK;   /* alone on its node: nothing to serve */
    for (int i = 0; i < ctx->nteams; i++) {
        size_t len = 0;
        chorus_status_t status;

        if (ctx->ctl_ctx[i] == NULL)
            continue;
        status = ctx->ctl[i]->team_card(ctx->ctl_ctx[i], comm->local_size, comm->local_rank,
                                        mine->card[i], &len, &t->pending[i]);
        if (status != CHORUS_OK)
            return status;
        mine->has[i] = 1;
    }
    return CHORUS_OK;
}

/* Step 2: join the node's members from their cards. */
static chorus_status_t setup_join(chorus_comm_t comm, const setup_card_t *all, setup_teams_t *t)
{
    chorus__ctx_t *ctx = comm->ctx;
    unsigned char *cards = malloc((size_t)comm->local_size * TL_TEAM_CARD_MAX);
    chorus_status_t status = CHORUS_OK;

    if (cards == NULL)
        return CHORUS_ERR_NO_MEMORY;
    for (int i = 0; i < ctx->nteams && status == CHORUS_OK; i++) {
        int complete = 1;

        if (!all[comm->rank].has[i])
            continue;
        for (int j = 0; j < comm->local_size; j++) {
            const setup_card_t *c = &all[comm->node_members[j]];

            complete &= c->has[i] != 0;
            memcpy(cards + (size_t)j * TL_TEAM_CARD_MAX, c->card[i], TL_TEAM_CARD_MAX);
        }
        if (!complete) {
            /* A member has the transport off: the node has no team of it. */
            ctx->ctl[i]->team_abandon(ctx->ctl_ctx[i], t->pending[i]);
            t->pending[i] = NULL;
            continue;
        }
        status = ctx->ctl[i]->team_create(ctx->ctl_ctx[i], t->pending[i], cards,
                                          comm->local_size, comm->local_rank, &t->team[i],
                                          &t->flags[i]);
        t->pending[i] = NULL;
    }
    free(cards);
    return status;
}

/* The cores this rank's node runs its ranks of the communicator on at once (tune_node_cores). */
static int setup_node_cores(chorus_comm_t comm, const setup_card_t *all)
{
    tune_cpus_t *masks = calloc((size_t)comm->local_size, sizeof(*masks));
    int cores;

    if (masks == NULL)
        return 1;
    for (int j = 0; j < comm->local_size; j++)
        masks[j] = all[comm->node_members[j]].cpus;
    cores = tune_node_cores(masks, comm->local_size);
    free(masks);
    return cores;
}

/*
 * Step 3: every rank's flags, ANDed (as the minimum of one value per bit),
 * and the fewest cores of any node. A rank alone on its node votes for
 * everything; a rank without a team of a transport votes it down
 * everywhere, so that all ranks build the same selection table.
 */
static chorus_status_t setup_vote(chorus_comm_t comm, const setup_teams_t *t, int node_cores,
                                  uint32_t *agreed, int *cores_p)
{
    enum { n = CHORUS__TEAMS_MAX * SETUP_FLAG_BITS };
    int32_t mine[n + 1], all[n + 1];
    chorus_status_t status;

    for (int i = 0; i < CHORUS__TEAMS_MAX; i++) {
        for (int b = 0; b < SETUP_FLAG_BITS; b++) {
            int alone = comm->local_size < 2 && i < comm->ctx->nteams;
            mine[i * SETUP_FLAG_BITS + b] = alone || ((t->flags[i] >> b) & 1u);
        }
    }
    mine[n] = (int32_t)node_cores;
    status = chorus__comm_setup_min(comm, mine, all, n + 1);
    if (status != CHORUS_OK)
        return status;
    for (int i = 0; i < CHORUS__TEAMS_MAX; i++) {
        agreed[i] = 0;
        for (int b = 0; b < SETUP_FLAG_BITS; b++)
            agreed[i] |= (uint32_t)(all[i * SETUP_FLAG_BITS + b] != 0) << b;
    }
    *cores_p = all[n];
    return CHORUS_OK;
}

/* Seal the first transport every node agreed on; drop the other teams. */
static void setup_choose(chorus_comm_t comm, setup_teams_t *t, const uint32_t *agreed)
{
    chorus__ctx_t *ctx = comm->ctx;
    int chosen = -1;

    for (int i = 0; i < ctx->nteams; i++) {
        if (chosen < 0 && (agreed[i] & TL_TEAM_OK) && comm->layout->local_max > 1)
            chosen = i;
        if (i != chosen && t->team[i] != NULL) {
            ctx->ctl[i]->team_destroy(t->team[i]);
            t->team[i] = NULL;
        }
    }
    if (chosen < 0)
        return;
    comm->env.team_ops = ctx->ctl[chosen];
    comm->env.team_ctx = ctx->ctl_ctx[chosen];
    comm->env.team_desc = (tl_team_desc_t){.size = comm->layout->local_max,
                                           .cores = comm->cores, .flags = agreed[chosen]};
    if (t->team[chosen] == NULL)
        return;     /* this rank is alone on its node */
    ctx->ctl[chosen]->team_seal(t->team[chosen], agreed[chosen], comm->cores);
    comm->node_team = (coll_team_t){
        .ops = ctx->ctl[chosen], .ctx = ctx->ctl_ctx[chosen], .team = t->team[chosen],
        .desc = {.size = comm->local_size, .cores = comm->cores, .flags = agreed[chosen]},
        .ranks = comm->node_members, .me = comm->local_rank,
    };
    comm->env.node_team = &comm->node_team;
}

/* Whether some collective transport is on in this process. */
static int setup_any_on(const chorus__ctx_t *ctx)
{
    for (int i = 0; i < ctx->nteams; i++) {
        if (ctx->ctl_ctx[i] != NULL)
            return 1;
    }
    return 0;
}

static chorus_status_t setup_teams(chorus_comm_t comm)
{
    chorus__ctx_t *ctx = comm->ctx;
    setup_card_t mine, *all = calloc((size_t)comm->size, sizeof(*all));
    setup_teams_t t;
    uint32_t agreed[CHORUS__TEAMS_MAX];
    chorus_status_t status;
    int node_cores = 1;

    memset(&t, 0, sizeof(t));
    if (all == NULL)
        return CHORUS_ERR_NO_MEMORY;
    status = setup_cards(comm, &mine, &t);
    if (status == CHORUS_OK)
        status = chorus__comm_setup_allgather(comm, &mine, sizeof(mine), all);
    if (status == CHORUS_OK) {
        node_cores = setup_node_cores(comm, all);
        status = setup_join(comm, all, &t);
    }
    free(all);
    if (status == CHORUS_OK)
        status = setup_vote(comm, &t, node_cores, agreed, &comm->cores);
    for (int i = 0; i < ctx->nteams; i++) {
        if (t.pending[i] != NULL)
            ctx->ctl[i]->team_abandon(ctx->ctl_ctx[i], t.pending[i]);
        if (status != CHORUS_OK && t.team[i] != NULL)
            ctx->ctl[i]->team_destroy(t.team[i]);
    }
    if (status != CHORUS_OK)
        return status;
    setup_choose(comm, &t, agreed);
    if (comm->rank == 0 && comm->env.team_ops != NULL)
        chorus_debug("rank 0: node-local stages on %s teams (%d nodes, up to %d ranks each, "
                     "flags 0x%x, %d cores)", comm->env.team_ops->name, comm->layout->nnodes,
                     comm->layout->local_max, comm->env.team_desc.flags, comm->cores);
    else if (comm->rank == 0 && comm->layout->local_max > 1 && setup_any_on(ctx))
        chorus_warn("rank 0: no collective transport serves every node of this communicator; "
                    "node-local stages go over the network transport");
    return CHORUS_OK;
}

/* Rank 0 at debug level: the layout and the selection table, as chorus-info prints them. */
static void setup_log_tune(chorus_comm_t comm)
{
    char *text = NULL, *line, *save = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    if (f == NULL)
        return;
    topo_layout_print(f, comm->layout, NULL, "");
    coll_select_print(f, comm->select);
    fclose(f);
    for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save))
        chorus_debug("%s", line);
    free(text);
}

/* The model, then the table every rank builds alike from the prices in the agreed env. */
static chorus_status_t setup_tune(chorus_comm_t comm)
{
    tune_config_t tcfg;
    chorus_status_t status = chorus__config_read(&tune_config_table, &tcfg);

    if (status == CHORUS_OK)
        status = tune_model_from_config(&tcfg, comm->ctx->cfg.chunk_bytes, &comm->model);
    if (status == CHORUS_OK && (tcfg.fc_blocks < 0 || tcfg.fc_blocks > TUNE_FC_BLOCKS_MAX)) {
        chorus_error("invalid CHORUS_FC_BLOCKS %d: must be 0 to %d", tcfg.fc_blocks,
                     TUNE_FC_BLOCKS_MAX);
        status = CHORUS_ERR_INVALID_ARG;
    }
    if (status != CHORUS_OK)
        return status;
    comm->env.model = &comm->model;
    comm->env.cores = comm->cores;
    status = coll_select_create(&comm->env, tcfg.tune.s, &comm->select);
    if (status == CHORUS_OK)
        comm->select->fc_blocks = tcfg.fc_blocks;
    if (status == CHORUS_OK && comm->rank == 0 && chorus_log_enabled(CHORUS_LOG_DEBUG))
        setup_log_tune(comm);
    return status;
}

chorus_status_t chorus__comm_setup(chorus_comm_t comm)
{
    chorus_status_t status;

    comm->env.nranks = comm->size;
    comm->env.layout = comm->layout;
    comm->env.mem = COLL_MEM_HOST;
    status = setup_teams(comm);
    if (status == CHORUS_OK)
        status = setup_tune(comm);
    if (status == CHORUS_OK && comm->rank == 0)
        chorus_debug("rank 0: a communicator of %d ranks on %d nodes is set up (space %u)",
                     comm->size, comm->layout->nnodes, comm->space);
    return status;
}

void chorus__comm_teardown(chorus_comm_t comm)
{
    chorus__call_forget(comm);
    if (comm->env.node_team != NULL)
        comm->node_team.ops->team_destroy(comm->node_team.team);
    comm->env.node_team = NULL;
    coll_select_destroy(comm->select);
    comm->select = NULL;
}
