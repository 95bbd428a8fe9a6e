/*
 * The process context (see context.h): its transports, the lane each peer
 * is reached over, the collective transports' state, and its lifetime.
 */
#include "core/context.h"

#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "core/core_trace.h"
#include "core/ctrl.h"
#include "util/log.h"

static chorus_status_t ctx_read_config(chorus__ctx_t *ctx, double timeout_s)
{
    chorus__core_config_t *cfg = &ctx->cfg;
    chorus_status_t status = chorus__config_read(&chorus__core_config_table, cfg);

    if (status != CHORUS_OK)
        return status;
    if (timeout_s > 0)
        cfg->timeout_s = timeout_s;
    if (cfg->timeout_s <= 0) {
        chorus_error("invalid value %g for CHORUS_TIMEOUT: must be positive", cfg->timeout_s);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (cfg->chunk_bytes < 64) {
        chorus_error("invalid value %zu for CHORUS_CHUNK_SIZE: must be at least 64",
                     cfg->chunk_bytes);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (!(cfg->stall_warn_s >= 0)) {
        chorus_error("invalid value %g for CHORUS_STALL_WARN: must be 0 (off) or positive "
                     "seconds", cfg->stall_warn_s);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (strcmp(cfg->transport.s, "auto") != 0 && tl_find(cfg->transport.s) == NULL) {
        char names[128] = "";
        size_t used = 0;

        for (int i = 0; tl_p2p_all[i] != NULL && used < sizeof(names); i++)
            used += (size_t)snprintf(names + used, sizeof(names) - used, "%s%s",
                                     i ? ", " : "", tl_p2p_all[i]->name);
        chorus_error("invalid value '%s' for CHORUS_TRANSPORT: not auto, nor built in (built "
                     "in: %s)",
                     cfg->transport.s, names);
        return CHORUS_ERR_INVALID_ARG;
    }
    return CHORUS_OK;
}

static int ctx_auto(const chorus__ctx_t *ctx)
{
    return strcmp(ctx->cfg.transport.s, "auto") == 0;
}

static int tl_is_network(const tl_ops_t *ops)
{
    tl_caps_t caps;

    ops->query(&caps);
    return caps.reach_network;
}

/*
 * The transports of the context: CHORUS_TRANSPORT names the one that
 * reaches every peer; the others (node-local ones) join in the order of
 * tl_p2p_all, each reaching the peers it can. With auto, every network
 * transport has a lane: the first one open, each later one open where it is
 * offered here (tl_ops_t.offered), else an empty slot whose address is all
 * zeros; chorus__ctx_start keeps one of them on every rank alike.
 */
static chorus_status_t ctx_open_lanes(chorus__ctx_t *ctx, const chorus__ctx_params_t *p)
{
    const tl_ops_t *network = tl_find(ctx->cfg.transport.s);
    tl_ctx_params_t tlp = {
        .rank = p->rank, .size = p->size, .bind_host = p->bind_host,
        .auth_key = p->tl_key, .auth_key_len = p->tl_key_len,
        .timeout_s = ctx->cfg.timeout_s, .ctrl = chorus__ctrl_deliver, .ctrl_arg = ctx,
    };
    int first_net = 1;
    chorus_status_t status;

    for (int i = 0; tl_p2p_all[i] != NULL && ctx->nlanes < CHORUS__LANES_MAX; i++) {
        const tl_ops_t *ops = tl_p2p_all[i];
        int open = 1;

        if (tl_is_network(ops) && ctx_auto(ctx)) {
            open = first_net || (ops->offered != NULL && ops->offered());
            first_net = 0;
        } else if (tl_is_network(ops) && ops != network) {
            continue;   /* another network transport: CHORUS_TRANSPORT chose */
        }
        ctx->tl_slot[ctx->nlanes] = ctx->nlanes;
        ctx->tl[ctx->nlanes] = ops;
        ctx->tl_ctx[ctx->nlanes] = NULL;
        if (open) {
            status = ops->ctx_create(&tlp, &ctx->tl_ctx[ctx->nlanes]);
            if (status != CHORUS_OK)
                return status;
        }
        ctx->nlanes++;
    }
    return CHORUS_OK;
}

int chorus__net_choose(const char *addrs, int size, const int *slots, int nslots)
{
    const size_t card = (size_t)CHORUS__LANES_MAX * TL_ADDR_MAX;
    int chosen = 0;

    for (int k = 1; k < nslots; k++) {
        int everywhere = 1;

        for (int r = 0; r < size && everywhere; r++) {
            const char *a = addrs + (size_t)r * card + (size_t)slots[k] * TL_ADDR_MAX;
            int any = 0;

            for (size_t b = 0; b < TL_ADDR_MAX && !any; b++)
                any = a[b] != 0;
            everywhere = any;
        }
        if (everywhere)
            chosen = k;
    }
    return chosen;
}

/*
 * CHORUS_TRANSPORT=auto, once every rank's addresses are known: the network
 * lane kept is the last one every rank opened (all ranks choose alike from
 * the same addresses); the other network lanes close, and the lanes left
 * keep the address slot they were published in.
 */
static void ctx_pick_network(chorus__ctx_t *ctx, const char *addrs)
{
    int slots[CHORUS__LANES_MAX], lanes[CHORUS__LANES_MAX], nnet = 0, chosen, kept = 0;

    for (int i = 0; i < ctx->nlanes; i++) {
        if (tl_is_network(ctx->tl[i])) {
            slots[nnet] = ctx->tl_slot[i];
            lanes[nnet++] = i;
        }
    }
    chosen = nnet > 0 ? lanes[chorus__net_choose(addrs, ctx->size, slots, nnet)] : -1;
    for (int i = 0; i < ctx->nlanes; i++) {
        if (tl_is_network(ctx->tl[i]) && i != chosen) {
            if (ctx->tl_ctx[i] != NULL)
                ctx->tl[i]->ctx_destroy(ctx->tl_ctx[i]);
            continue;
        }
        ctx->tl[kept] = ctx->tl[i];
        ctx->tl_ctx[kept] = ctx->tl_ctx[i];
        ctx->tl_slot[kept++] = ctx->tl_slot[i];
    }
    ctx->nlanes = kept;
    chorus_debug("rank %d: CHORUS_TRANSPORT=auto: %s", ctx->rank, chorus__ctx_net_name(ctx));
}

const char *chorus__ctx_net_name(const chorus__ctx_t *ctx)
{
    for (int i = 0; i < ctx->nlanes; i++) {
        if (tl_is_network(ctx->tl[i]) && ctx->tl_ctx[i] != NULL)
            return ctx->tl[i]->name;
    }
    return ctx->cfg.transport.s;
}

static chorus_status_t ctx_open_teams(chorus__ctx_t *ctx)
{
    tl_coll_ctx_params_t cp = {.rank = ctx->rank, .size = ctx->size};

    /* Indexed like tl_coll_all on every rank; a NULL context: off or not available here. */
    for (int i = 0; tl_coll_all[i] != NULL && ctx->nteams < CHORUS__TEAMS_MAX; i++) {
        chorus_status_t status = tl_coll_all[i]->ctx_create(&cp, &ctx->ctl_ctx[i]);

        ctx->ctl[ctx->nteams++] = tl_coll_all[i];
        if (status != CHORUS_OK)
            return status;
    }
    return CHORUS_OK;
}

static void ctx_free(chorus__ctx_t *ctx)
{
    for (int i = 0; i < ctx->nlanes; i++) {
        if (ctx->tl_ctx[i] != NULL)
            ctx->tl[i]->ctx_destroy(ctx->tl_ctx[i]);
    }
    /* After the transports: they held the control messages' buffers until then. */
    chorus__ctrl_destroy(ctx);
    for (int i = 0; i < ctx->nteams; i++) {
        if (ctx->ctl_ctx[i] != NULL)
            ctx->ctl[i]->ctx_destroy(ctx->ctl_ctx[i]);
    }
    /* Last: everything that could still add to the trace is gone. */
    chorus__trace_destroy(ctx->trace);
    topo_layout_free(ctx->layout);
    free(ctx->lane_of);
    coll_pool_destroy(&ctx->scratch_pool);
    pthread_cond_destroy(&ctx->cond);
    pthread_mutex_destroy(&ctx->lock);
    pthread_mutex_destroy(&ctx->engine);
    free(ctx);
}

chorus_status_t chorus__ctx_create(const chorus__ctx_params_t *params, double timeout_s,
                                   chorus__ctx_t **ctx_p)
{
    chorus__ctx_t *ctx = calloc(1, sizeof(*ctx));
    pthread_condattr_t attr;
    chorus_status_t status;

    if (ctx == NULL)
        return CHORUS_ERR_NO_MEMORY;
    ctx->rank = params->rank;
    ctx->size = params->size;
    ctx->epoll_fd = ctx->drive_fd = ctx->wake_fd = ctx->drive_wake_fd = -1;
    pthread_mutex_init(&ctx->lock, NULL);
    pthread_mutex_init(&ctx->engine, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&ctx->cond, &attr);
    pthread_condattr_destroy(&attr);
    coll_pool_init(&ctx->scratch_pool);
    status = ctx_read_config(ctx, timeout_s);
    if (status == CHORUS_OK)
        status = chorus__trace_open(ctx);
    if (status == CHORUS_OK)
        status = chorus__ctrl_create(ctx);
    if (status == CHORUS_OK)
        status = ctx_open_lanes(ctx, params);
    if (status == CHORUS_OK)
        status = ctx_open_teams(ctx);
    if (status != CHORUS_OK) {
        ctx_free(ctx);
        return status;
    }
    *ctx_p = ctx;
    return CHORUS_OK;
}

chorus_status_t chorus__ctx_address(chorus__ctx_t *ctx, char *addr)
{
    for (int i = 0; i < ctx->nlanes; i++) {
        size_t len = TL_ADDR_MAX;
        chorus_status_t status;

        /* An empty slot (auto: a transport not opened here) publishes zeros. */
        memset(addr + i * TL_ADDR_MAX, 0, TL_ADDR_MAX);
        if (ctx->tl_ctx[i] == NULL)
            continue;
        status = ctx->tl[i]->get_address(ctx->tl_ctx[i], addr + i * TL_ADDR_MAX, &len);
        if (status != CHORUS_OK)
            return status;
    }
    return CHORUS_OK;
}

chorus_status_t chorus__ctx_start(chorus__ctx_t *ctx, const char *addrs, topo_layout_t *layout)
{
    const size_t card = (size_t)CHORUS__LANES_MAX * TL_ADDR_MAX;
    char *lane_addrs = malloc((size_t)ctx->size * TL_ADDR_MAX);
    chorus_status_t status = CHORUS_OK;

    ctx->layout = layout;
    ctx->lane_of = calloc((size_t)ctx->size, sizeof(*ctx->lane_of));
    if (lane_addrs == NULL || ctx->lane_of == NULL) {
        free(lane_addrs);
        return CHORUS_ERR_NO_MEMORY;
    }
    if (ctx_auto(ctx))
        ctx_pick_network(ctx, addrs);
    for (int i = 0; i < ctx->nlanes && status == CHORUS_OK; i++) {
        for (int r = 0; r < ctx->size; r++)
            memcpy(lane_addrs + (size_t)r * TL_ADDR_MAX, addrs + (size_t)r * card +
                   (size_t)ctx->tl_slot[i] * TL_ADDR_MAX, TL_ADDR_MAX);
        status = ctx->tl[i]->set_peers(ctx->tl_ctx[i], lane_addrs);
    }
    free(lane_addrs);
    if (status != CHORUS_OK)
        return status;
    /* Each peer's lane: the first transport that reaches it (the network one reaches all). */
    for (int r = 0; r < ctx->size; r++) {
        int lane = ctx->nlanes - 1;

        for (int i = 0; i < ctx->nlanes; i++) {
            if (ctx->tl[i]->reaches(ctx->tl_ctx[i], r)) {
                lane = i;
                break;
            }
        }
        ctx->lane_of[r] = (uint8_t)lane;
    }
    return chorus__progress_start(ctx);
}

void chorus__ctx_release(chorus__ctx_t *ctx)
{
    int last;

    pthread_mutex_lock(&ctx->lock);
    last = --ctx->refs == 0;
    pthread_mutex_unlock(&ctx->lock);
    if (!last)
        return;
    chorus__progress_stop(ctx);
    ctx_free(ctx);
}

void chorus__ctx_fail(chorus__ctx_t *ctx, chorus_status_t status)
{
    int expected = 0;

    /* The first fault writes the trace, in case the process does not live to destroy. */
    if (atomic_compare_exchange_strong(&ctx->error, &expected, (int)status) &&
        ctx->trace != NULL)
        chorus__trace_fault(ctx, 0, "fault", chorus_status_string(status));
    chorus__progress_wake(ctx);
}

int chorus__ctx_net_streams(chorus__ctx_t *ctx, int use)
{
    int most = 1;

    for (int i = 0; i < ctx->nlanes; i++) {
        int opened;

        if (ctx->tl[i]->streams == NULL || ctx->tl_ctx[i] == NULL)
            continue;
        opened = ctx->tl[i]->streams(ctx->tl_ctx[i], use);
        if (opened > most)
            most = opened;
    }
    return most;
}

chorus_status_t chorus__ctx_send(chorus__ctx_t *ctx, int peer, uint32_t space, uint64_t tag,
                                 const void *buf, size_t len, tl_req_t *req)
{
    int lane = ctx->lane_of[peer];

    return ctx->tl[lane]->send_nb(ctx->tl_ctx[lane], peer, space, tag, buf, len, req);
}

chorus_status_t chorus__ctx_recv(chorus__ctx_t *ctx, int peer, uint32_t space, uint64_t tag,
                                 void *buf, size_t capacity, tl_req_t *req)
{
    int lane = ctx->lane_of[peer];

    return ctx->tl[lane]->recv_nb(ctx->tl_ctx[lane], peer, space, tag, buf, capacity, req);
}
