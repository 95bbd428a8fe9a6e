/*
 * UCX transport: context lifetime, variables, address, progress, the event
 * fd and the ops table.
 */
#include "transports/ucx/ucx.h"

#include <netdb.h>
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "util/log.h"
#include "util/sha256.h"
#include "util/time.h"

/* Longest a closing context waits for its peers' BYE_ACKs, and then for its closes. */
#define TL_UCX_CLOSE_S      0.5
/* UCX's worker is polled at most this many times per progress() call. */
#define TL_UCX_POLLS        64

static const chorus__config_var_t ucx_vars[] = {
    {"CHORUS_UCX_EAGER_SIZE", "256K",
     "with CHORUS_TRANSPORT=ucx: messages of at most this many bytes go to a peer at once "
     "while the peer's window has room for them; larger ones, and any the window cannot "
     "take, go by UCX's rendezvous, once the receiver posts its receive (K, M, G suffixes)",
     chorus__config_parse_size, offsetof(tl_ucx_config_t, eager_bytes)},
    {"CHORUS_UCX_WINDOW", "4M",
     "with CHORUS_TRANSPORT=ucx: bytes of messages that have not met their receive yet which "
     "a rank holds for each peer; a peer that has filled it sends by rendezvous until the "
     "receives are posted (K, M, G suffixes)",
     chorus__config_parse_size, offsetof(tl_ucx_config_t, window_bytes)},
    {"CHORUS_UCX_RNDV", "auto",
     "with CHORUS_TRANSPORT=ucx, how a message that does not go at once travels: ucx, by "
     "UCX's rendezvous (zero-copy where the device allows, as RDMA does); chorus, announced "
     "and then sent in 256 KiB fragments of active messages once its receive is posted, "
     "which keeps both directions of a link busy over UCX's TCP; auto, ucx where UCX finds "
     "an RDMA device that UCX_TLS allows, else chorus",
     chorus__config_parse_string, offsetof(tl_ucx_config_t, rndv)},
};

const chorus__config_table_t tl_ucx_config_table = {
    "ucx", "the UCX network transport (CHORUS_TRANSPORT=ucx; UCX_* variables reach UCX)",
    ucx_vars, sizeof(ucx_vars) / sizeof(ucx_vars[0]),
};

static void ucx_query(tl_caps_t *caps_p)
{
    memset(caps_p, 0, sizeof(*caps_p));
    caps_p->mem_host = 1;
    caps_p->reach_node = 1;
    caps_p->reach_network = 1;
    /* The TCP transport's class figures: which devices UCX picks is known only at run time. */
    caps_p->latency_us = 20.0;
    caps_p->bandwidth_gbs = 1.25;
}

static chorus_status_t check_params(const tl_ctx_params_t *params)
{
    struct addrinfo hints = {.ai_flags = AI_NUMERICHOST}, *res;
    chorus_status_t status = tl_ctx_params_check("ucx", params);

    if (status != CHORUS_OK)
        return status;
    /* UCX picks its own devices; the address must still be one, as for every transport. */
    if (getaddrinfo(params->bind_host, NULL, &hints, &res) != 0) {
        chorus_error("rank %d: ucx: bind host '%s' is not a numeric address", params->rank,
                     params->bind_host);
        return CHORUS_ERR_INVALID_ARG;
    }
    freeaddrinfo(res);
    return CHORUS_OK;
}

void tl_ucx_wake(tl_ucx_ctx_t *ctx)
{
    uint64_t one = 1;

    if (ctx->woken)
        return;
    ctx->woken = 1;
    if (write(ctx->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        chorus_debug("rank %d: ucx: eventfd write failed: %m", ctx->rank);
}

void tl_ucx_timer_by(tl_ucx_ctx_t *ctx, double at)
{
    struct itimerspec its = {{0, 0}, {0, 0}};
    double left = at - chorus__now();

    if (ctx->timer_at > 0 && ctx->timer_at <= at)
        return;
    if (left < 1e-3)
        left = 1e-3;
    its.it_value.tv_sec = (time_t)left;
    its.it_value.tv_nsec = (long)((left - (double)its.it_value.tv_sec) * 1e9);
    if (timerfd_settime(ctx->timer_fd, 0, &its, NULL) == 0)
        ctx->timer_at = at;
    else
        tl_ucx_wake(ctx);   /* no timer: progress polls instead */
}

/* Drain an fd of the event set (eventfd, timerfd: 8 bytes). */
static void drain(int fd)
{
    uint64_t n;

    while (read(fd, &n, sizeof(n)) == sizeof(n))
        ;
}

static chorus_status_t ucx_open(tl_ucx_ctx_t *ctx)
{
    ucp_params_t params = {
        .field_mask = UCP_PARAM_FIELD_FEATURES,
        .features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP,
    };
    ucp_worker_params_t wparams = {
        .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE | UCP_WORKER_PARAM_FIELD_EVENTS,
        /* Created here, then driven by the context's progress thread alone. */
        .thread_mode = UCS_THREAD_MODE_SERIALIZED,
        .events = UCP_WAKEUP_TX | UCP_WAKEUP_RX,
    };
    ucp_am_handler_param_t am = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                      UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG,
        .id = TL_UCX_AM_ID,
        .flags = UCP_AM_FLAG_WHOLE_MSG,
        .cb = tl_ucx_am_recv,
        .arg = ctx,
    };
    ucp_config_t *config;
    ucs_status_t st = ucp_config_read(NULL, NULL, &config);
    char keepalive[32];

    if (st != UCS_OK) {
        chorus_error("rank %d: ucx: reading UCX's configuration failed: %s", ctx->rank,
                     ucs_status_string(st));
        return CHORUS_ERR_INVALID_ARG;
    }
    /* A dead peer is found by keepalive: often enough to report it well within the timeout. */
    if (getenv("UCX_KEEPALIVE_INTERVAL") == NULL) {
        double every = ctx->timeout_s / 4 < 0.5 ? ctx->timeout_s / 4 : 0.5;

        snprintf(keepalive, sizeof(keepalive), "%.0fms", every * 1000 > 1 ? every * 1000 : 1);
        ucp_config_modify(config, "KEEPALIVE_INTERVAL", keepalive);
    }
    st = ucp_init(&params, config, &ctx->ucp);
    ucp_config_release(config);
    if (st != UCS_OK) {
        ctx->ucp = NULL;
        chorus_error("rank %d: ucx: ucp_init failed: %s", ctx->rank, ucs_status_string(st));
        return CHORUS_ERR_UNSUPPORTED;
    }
    st = ucp_worker_create(ctx->ucp, &wparams, &ctx->worker);
    if (st != UCS_OK) {
        ctx->worker = NULL;
        chorus_error("rank %d: ucx: ucp_worker_create failed: %s", ctx->rank,
                     ucs_status_string(st));
        return CHORUS_ERR_UNSUPPORTED;
    }
    st = ucp_worker_set_am_recv_handler(ctx->worker, &am);
    if (st != UCS_OK) {
        chorus_error("rank %d: ucx: setting the message handler failed: %s", ctx->rank,
                     ucs_status_string(st));
        return CHORUS_ERR_UNSUPPORTED;
    }
    return CHORUS_OK;
}

/* The worker's address; the network-only one when the full one would not fit a blob. */
static chorus_status_t ucx_address(tl_ucx_ctx_t *ctx)
{
    static const uint32_t flags[] = {0, UCP_WORKER_ADDRESS_FLAG_NET_ONLY};

    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
        ucp_worker_attr_t attr = {
            .field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS | UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS |
                          UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER,
            .address_flags = flags[i],
        };
        ucs_status_t st = ucp_worker_query(ctx->worker, &attr);

        if (st != UCS_OK) {
            chorus_error("rank %d: ucx: ucp_worker_query failed: %s", ctx->rank,
                         ucs_status_string(st));
            return CHORUS_ERR_UNSUPPORTED;
        }
        if (attr.max_am_header < sizeof(tl_ucx_hdr_t)) {
            ucp_worker_release_address(ctx->worker, attr.address);
            chorus_error("rank %d: ucx: message headers hold %zu bytes, chorus needs %zu",
                         ctx->rank, attr.max_am_header, sizeof(tl_ucx_hdr_t));
            return CHORUS_ERR_UNSUPPORTED;
        }
        if (attr.address_length <= TL_UCX_ADDR_MAX) {
            ctx->my_addr = malloc(attr.address_length);
            if (ctx->my_addr != NULL)
                memcpy(ctx->my_addr, attr.address, attr.address_length);
            ctx->my_addr_len = attr.address_length;
            ucp_worker_release_address(ctx->worker, attr.address);
            if (i > 0)
                chorus_debug("rank %d: ucx: the worker's address takes more than %d bytes; "
                             "publishing its network devices only", ctx->rank,
                             TL_UCX_ADDR_MAX);
            return ctx->my_addr != NULL ? CHORUS_OK : CHORUS_ERR_NO_MEMORY;
        }
        chorus_debug("rank %d: ucx: worker address of %zu bytes (flags %u) exceeds %d",
                     ctx->rank, attr.address_length, flags[i], TL_UCX_ADDR_MAX);
        ucp_worker_release_address(ctx->worker, attr.address);
    }
    chorus_error("rank %d: ucx: the worker's address exceeds the %d bytes a rank may publish, "
                 "even for its network devices alone; narrow them with UCX_NET_DEVICES or "
                 "UCX_TLS", ctx->rank, TL_UCX_ADDR_MAX);
    return CHORUS_ERR_UNSUPPORTED;
}

/* The event fd: an epoll set of the worker's fd, the deadline timer and the wake eventfd. */
static chorus_status_t ucx_events(tl_ucx_ctx_t *ctx)
{
    int fds[3] = {-1, -1, -1};
    ucs_status_t st = ucp_worker_get_efd(ctx->worker, &fds[0]);

    if (st != UCS_OK) {
        chorus_error("rank %d: ucx: the worker has no event fd: %s", ctx->rank,
                     ucs_status_string(st));
        return CHORUS_ERR_UNSUPPORTED;
    }
    ctx->epfd = epoll_create1(EPOLL_CLOEXEC);
    ctx->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    ctx->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    fds[1] = ctx->timer_fd;
    fds[2] = ctx->wake_fd;
    if (ctx->epfd < 0 || ctx->timer_fd < 0 || ctx->wake_fd < 0) {
        chorus_error("rank %d: ucx: epoll, timerfd or eventfd failed: %m", ctx->rank);
        return CHORUS_ERR_SYSTEM;
    }
    for (int i = 0; i < 3; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = fds[i]};

        if (epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, fds[i], &ev) != 0) {
            chorus_error("rank %d: ucx: epoll_ctl failed: %m", ctx->rank);
            return CHORUS_ERR_SYSTEM;
        }
    }
    return CHORUS_OK;
}

static chorus_status_t ucx_read_config(tl_ucx_ctx_t *ctx)
{
    if (chorus__config_read(&tl_ucx_config_table, &ctx->cfg) != CHORUS_OK)
        return CHORUS_ERR_INVALID_ARG;
    if (strcmp(ctx->cfg.rndv.s, "auto") == 0) {
        ctx->rndv_chorus = !tl_ucx_offered();
        chorus_debug("rank %d: ucx: CHORUS_UCX_RNDV=auto: %s's rendezvous", ctx->rank,
                     ctx->rndv_chorus ? "chorus" : "UCX");
    } else if (strcmp(ctx->cfg.rndv.s, "ucx") == 0 || strcmp(ctx->cfg.rndv.s, "chorus") == 0) {
        ctx->rndv_chorus = strcmp(ctx->cfg.rndv.s, "chorus") == 0;
    } else {
        chorus_error("rank %d: ucx: CHORUS_UCX_RNDV='%s' is not auto, ucx or chorus", ctx->rank,
                     ctx->cfg.rndv.s);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (ctx->cfg.eager_bytes > TL_UCX_MAX_MSG || ctx->cfg.window_bytes > TL_UCX_MAX_MSG) {
        chorus_error("rank %d: ucx: CHORUS_UCX_EAGER_SIZE (%zu) and CHORUS_UCX_WINDOW (%zu) "
                     "must not exceed %llu bytes", ctx->rank, ctx->cfg.eager_bytes,
                     ctx->cfg.window_bytes, (unsigned long long)TL_UCX_MAX_MSG);
        return CHORUS_ERR_INVALID_ARG;
    }
    return CHORUS_OK;
}

static void ucx_free(tl_ucx_ctx_t *ctx)
{
    tl_ucx_msg_t *msg;

    while ((msg = ctx->arrived.head) != NULL) {
        ctx->arrived.head = msg->next;
        tl_ucx_msg_drop(ctx, msg);
    }
    for (int r = 0; ctx->peers != NULL && r < ctx->size; r++) {
        while ((msg = ctx->peers[r].ueq.head) != NULL) {
            ctx->peers[r].ueq.head = msg->next;
            tl_ucx_msg_drop(ctx, msg);
        }
        free(ctx->peers[r].addr);
    }
    if (ctx->worker != NULL)
        ucp_worker_destroy(ctx->worker);
    /* The worker took its requests with it; what is left of ours is memory only. */
    while (ctx->ops != NULL) {
        tl_ucx_op_t *op = ctx->ops;

        ctx->ops = op->next;
        free(op);
    }
    if (ctx->ucp != NULL)
        ucp_cleanup(ctx->ucp);
    if (ctx->epfd >= 0)
        close(ctx->epfd);
    if (ctx->timer_fd >= 0)
        close(ctx->timer_fd);
    if (ctx->wake_fd >= 0)
        close(ctx->wake_fd);
    if (ctx->auth_key != NULL) {
        explicit_bzero(ctx->auth_key, ctx->auth_key_len);
        free(ctx->auth_key);
    }
    free(ctx->closing);
    free(ctx->my_addr);
    free(ctx->peers);
    free(ctx);
}

static chorus_status_t ucx_ctx_create(const tl_ctx_params_t *params, tl_ctx_t **ctx_p)
{
    chorus_status_t status = check_params(params);
    tl_ucx_ctx_t *ctx;

    if (status != CHORUS_OK)
        return status;
    ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL)
        return CHORUS_ERR_NO_MEMORY;
    ctx->epfd = ctx->timer_fd = ctx->wake_fd = -1;
    ctx->rank = params->rank;
    ctx->size = params->size;
    ctx->timeout_s = params->timeout_s;
    ctx->ctrl = params->ctrl;
    ctx->ctrl_arg = params->ctrl_arg;
    ctx->auth_key = malloc(params->auth_key_len);
    ctx->auth_key_len = params->auth_key_len;
    if (ctx->auth_key == NULL) {
        status = CHORUS_ERR_NO_MEMORY;
        goto err;
    }
    memcpy(ctx->auth_key, params->auth_key, params->auth_key_len);
    if ((status = ucx_read_config(ctx)) != CHORUS_OK)
        goto err;
    if (chorus__random_bytes(ctx->nonce, sizeof(ctx->nonce)) != CHORUS_OK) {
        status = CHORUS_ERR_SYSTEM;
        goto err;
    }
    if ((status = ucx_open(ctx)) != CHORUS_OK || (status = ucx_address(ctx)) != CHORUS_OK ||
        (status = ucx_events(ctx)) != CHORUS_OK)
        goto err;
    *ctx_p = (tl_ctx_t *)ctx;
    return CHORUS_OK;

err:
    ucx_free(ctx);
    return status;
}

static chorus_status_t ucx_get_address(tl_ctx_t *tctx, void *addr, size_t *len_p)
{
    tl_ucx_ctx_t *ctx = tl_ucx_of(tctx);
    tl_ucx_blob_t blob;

    memset(&blob, 0, sizeof(blob));
    blob.magic = htole32(TL_UCX_MAGIC);
    blob.version = htole16(TL_UCX_VERSION);
    blob.addr_len = htole16((uint16_t)ctx->my_addr_len);
    blob.rank = htole32((uint32_t)ctx->rank);
    blob.window = htole64(ctx->cfg.window_bytes);
    memcpy(blob.nonce, ctx->nonce, TL_UCX_NONCE_BYTES);
    memcpy(blob.addr, ctx->my_addr, ctx->my_addr_len);
    memcpy(addr, &blob, sizeof(blob));
    *len_p = sizeof(blob);
    return CHORUS_OK;
}

static chorus_status_t ucx_set_peers(tl_ctx_t *tctx, const void *addrs)
{
    tl_ucx_ctx_t *ctx = tl_ucx_of(tctx);
    tl_ucx_peer_t *peers;

    if (ctx->peers != NULL) {
        chorus_error("rank %d: ucx: set_peers called twice", ctx->rank);
        return CHORUS_ERR_INVALID_ARG;
    }
    peers = calloc((size_t)ctx->size, sizeof(*peers));
    if (peers == NULL)
        return CHORUS_ERR_NO_MEMORY;
    for (int r = 0; r < ctx->size; r++) {
        tl_ucx_peer_t *peer = &peers[r];
        tl_ucx_peer_addr_t pa;
        uint8_t mac[TL_UCX_MAC_BYTES];

        if (tl_ucx_blob_decode((const uint8_t *)addrs + (size_t)r * TL_ADDR_MAX, r, &pa) !=
            CHORUS_OK) {
            chorus_error("rank %d: ucx: rank %d's address is malformed (not a UCX transport "
                         "address of this version for that rank)", ctx->rank, r);
            goto err;
        }
        peer->ctx = ctx;
        peer->rank = r;
        peer->addr = malloc(pa.addr_len);
        if (peer->addr == NULL)
            goto err;
        memcpy(peer->addr, pa.addr, pa.addr_len);
        peer->addr_len = pa.addr_len;
        memcpy(peer->nonce, pa.nonce, TL_UCX_NONCE_BYTES);
        peer->window = peer->credit = pa.window;
        tl_ucx_mac(ctx, "data", peer->nonce, (uint32_t)ctx->rank, (uint32_t)r, mac);
        memcpy(peer->token_out, mac, TL_UCX_TOKEN_BYTES);
        tl_ucx_mac(ctx, "data", ctx->nonce, (uint32_t)r, (uint32_t)ctx->rank, mac);
        memcpy(peer->token_in, mac, TL_UCX_TOKEN_BYTES);
    }
    ctx->peers = peers;
    return CHORUS_OK;

err:
    for (int r = 0; r < ctx->size; r++)
        free(peers[r].addr);
    free(peers);
    return CHORUS_ERR_INVALID_ARG;
}

static int ucx_reaches(tl_ctx_t *tctx, int peer)
{
    tl_ucx_ctx_t *ctx = tl_ucx_of(tctx);

    return ctx->peers != NULL && peer >= 0 && peer < ctx->size;
}

static int ucx_progress(tl_ctx_t *tctx)
{
    tl_ucx_ctx_t *ctx = tl_ucx_of(tctx);
    double now;
    int done;

    if (ctx->woken) {
        drain(ctx->wake_fd);
        ctx->woken = 0;
    }
    for (int i = 0; i < TL_UCX_POLLS && ucp_worker_progress(ctx->worker) > 0; i++)
        ;
    tl_ucx_arrivals(ctx);
    now = chorus__now();
    if (ctx->timer_at > 0 && now >= ctx->timer_at) {
        drain(ctx->timer_fd);
        ctx->timer_at = 0;
    }
    if (ctx->ep_errors > 0 || ctx->connecting > 0 || ctx->closes_due)
        tl_ucx_peers_check(ctx, now);
    if (ctx->nclosing > 0)
        tl_ucx_closing_reap(ctx);
    done = ctx->completed;
    ctx->completed = 0;
    /*
     * Before the caller may sleep on the event fd, the worker must be armed;
     * it refuses while it has events of its own to hand out, and then the
     * next wait must not sleep.
     */
    if (done == 0 && ucp_worker_arm(ctx->worker) == UCS_ERR_BUSY)
        tl_ucx_wake(ctx);
    return done;
}

static int ucx_event_fd(tl_ctx_t *tctx)
{
    return tl_ucx_of(tctx)->epfd;
}

/* Progress the worker until no operation is in flight and no close runs, or until `until`. */
static void ucx_drain_ops(tl_ucx_ctx_t *ctx, double until)
{
    while ((ctx->ops != NULL || tl_ucx_closing_reap(ctx) > 0) && chorus__now() < until)
        ucp_worker_progress(ctx->worker);
}

/*
 * Say BYE to the peers we talk to and wait, until `until` at most, for each
 * one's BYE_ACK (or for it to be lost): then everything we sent them has
 * been taken in, and closing cannot lose it.
 */
static void ucx_say_bye(tl_ucx_ctx_t *ctx, double until)
{
    int waiting = 0;

    for (int r = 0; r < ctx->size; r++) {
        tl_ucx_peer_t *peer = &ctx->peers[r];

        peer->bye_acked = 1;
        if (peer->state == TL_UCX_PEER_UP &&
            tl_ucx_post_ctl(ctx, peer, TL_UCX_BYE, 0, NULL) == CHORUS_OK) {
            peer->bye_acked = 0;
            waiting++;
        }
    }
    while (waiting > 0 && chorus__now() < until) {
        for (int i = 0; i < TL_UCX_POLLS && ucp_worker_progress(ctx->worker) > 0; i++)
            ;
        tl_ucx_arrivals(ctx);
        tl_ucx_peers_check(ctx, chorus__now());
        waiting = 0;
        for (int r = 0; r < ctx->size; r++)
            waiting += !ctx->peers[r].bye_acked && ctx->peers[r].ep != NULL &&
                       ctx->peers[r].ep_error == UCS_OK;
    }
}

static void ucx_fail_all(tl_ctx_t *tctx, chorus_status_t status)
{
    tl_ucx_ctx_t *ctx = tl_ucx_of(tctx);

    if (ctx->failed == CHORUS_OK)
        ctx->failed = status;
    if (ctx->peers == NULL)
        return;
    /*
     * Every request fails now, sends in flight too: a peer that drops what we
     * announced once it hears BYE completes our send as if received.
     */
    for (int r = 0; r < ctx->size; r++)
        tl_ucx_peer_fail_reqs(ctx, &ctx->peers[r], status);
    tl_ucx_ops_abandon(ctx, NULL, status, 0);
    ucx_say_bye(ctx, chorus__now() + TL_UCX_CLOSE_S);
    for (int r = 0; r < ctx->size; r++) {
        tl_ucx_peer_t *peer = &ctx->peers[r];

        tl_ucx_peer_fail(ctx, peer, status);
        /* One that said BYE first kept its endpoint until our answer left: it goes now. */
        if (peer->ep != NULL) {
            tl_ucx_ep_close(ctx, peer->ep);
            peer->ep = NULL;
        }
    }
    tl_ucx_ops_abandon(ctx, NULL, status, 0);
}

static void ucx_ctx_destroy(tl_ctx_t *tctx)
{
    tl_ucx_ctx_t *ctx = tl_ucx_of(tctx);

    if (ctx == NULL)
        return;
    ucx_fail_all(tctx, CHORUS_ERR_ABORTED);
    ucx_drain_ops(ctx, chorus__now() + TL_UCX_CLOSE_S);
    tl_ucx_ops_abandon(ctx, NULL, CHORUS_ERR_ABORTED, 1);
    ucx_free(ctx);
}

static int ucx_connections(tl_ctx_t *tctx)
{
    tl_ucx_ctx_t *ctx = tl_ucx_of(tctx);
    int n = 0;

    for (int r = 0; ctx->peers != NULL && r < ctx->size; r++)
        n += ctx->peers[r].state == TL_UCX_PEER_UP;
    return n;
}

const tl_ops_t tl_ucx_ops = {
    .name = "ucx",
    .query = ucx_query,
    .config = &tl_ucx_config_table,
    .ctx_create = ucx_ctx_create,
    .ctx_destroy = ucx_ctx_destroy,
    .get_address = ucx_get_address,
    .set_peers = ucx_set_peers,
    .reaches = ucx_reaches,
    .send_nb = tl_ucx_send_nb,
    .recv_nb = tl_ucx_recv_nb,
    .progress = ucx_progress,
    .event_fd = ucx_event_fd,
    .fail_all = ucx_fail_all,
    .connections = ucx_connections,
    .streams = NULL,
    .offered = tl_ucx_offered,
};
