/*
 * TCP transport: context lifetime, variables, address, progress and the ops
 * table.
 */
#include "transports/tcp/tcp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "util/log.h"
#include "util/time.h"

#define TL_TCP_SOCKBUF      (4 << 20)
#define TL_TCP_SCRATCH      (64 << 10)
#define TL_TCP_EVENTS       64
/* Longest a context that ends normally waits for its peers to close their side. */
#define TL_TCP_CLOSE_S      0.5

_Static_assert(sizeof(tl_tcp_blob_t) <= TL_ADDR_MAX, "tcp address blob exceeds TL_ADDR_MAX");
_Static_assert(sizeof(tl_tcp_hdr_t) == 32, "tcp header must have no padding");
_Static_assert(sizeof(tl_tcp_hello_t) == 52, "tcp hello must have no padding");

static const chorus__config_var_t tcp_vars[] = {
    {"CHORUS_TCP_EAGER_SIZE", "256K",
     "messages of at most this many bytes go to a peer at once while the peer's window has "
     "room for them; larger ones, and any the window cannot take, are announced and sent "
     "once the receiver posts its receive, straight into its buffer (K, M, G suffixes)",
     chorus__config_parse_size, offsetof(tl_tcp_config_t, eager_bytes)},
    {"CHORUS_TCP_WINDOW", "4M",
     "bytes of messages that have not met their receive yet which a rank holds for each "
     "peer; a peer that has filled it sends by rendezvous until the receives are posted. "
     "It also bounds the bytes of unexpected-message buffers kept for reuse (K, M, G "
     "suffixes)",
     chorus__config_parse_size, offsetof(tl_tcp_config_t, window_bytes)},
    {"CHORUS_TCP_STREAMS", "0",
     "connections to each peer (1 to 8): a payload's fragments are dealt over them by the "
     "rate each is measured to deliver at, so several streams fill a link one stream "
     "cannot, and links of unequal speed each carry their share; ranks use the fewer of "
     "their two settings; 0: one per address of CHORUS_TCP_IFACES; with CHORUS_AUTOTUNE "
     "the training engine may use fewer of them",
     chorus__config_parse_int, offsetof(tl_tcp_config_t, streams)},
    {"CHORUS_TCP_IFACES", "auto",
     "the addresses to listen on and publish, up to 4; a peer's streams go to its "
     "addresses in turn, so each link of a node with several carries some, and a stream "
     "whose address does not answer from here is dialled again at the peer's first; "
     "auto: the address the bootstrap chose and one on each other network an interface "
     "is up and running on (not loopback, not link-local), a peer's streams going only to "
     "its addresses on a network this machine is on and not its own; bootstrap: that one "
     "address alone; or comma-separated interfaces (names, or numeric addresses); use the "
     "same setting on every rank",
     chorus__config_parse_string, offsetof(tl_tcp_config_t, ifaces)},
};

const chorus__config_table_t tl_tcp_config_table = {
    "tcp", "the network transport",
    tcp_vars, sizeof(tcp_vars) / sizeof(tcp_vars[0]),
};

/* Best effort: the kernel caps the buffers at net.core.[rw]mem_max. */
void tl_tcp_sock_tune(int fd)
{
    int one = 1, size = TL_TCP_SOCKBUF;

    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
        chorus_debug("setsockopt(TCP_NODELAY) on fd %d failed: %m", fd);
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size)) < 0)
        chorus_debug("setsockopt(SO_SNDBUF, %d) on fd %d failed: %m", size, fd);
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size)) < 0)
        chorus_debug("setsockopt(SO_RCVBUF, %d) on fd %d failed: %m", size, fd);
}

static void tcp_query(tl_caps_t *caps_p)
{
    memset(caps_p, 0, sizeof(*caps_p));
    caps_p->mem_host = 1;
    caps_p->reach_node = 1;
    caps_p->reach_network = 1;
    caps_p->latency_us = 20.0;
    caps_p->bandwidth_gbs = 1.25;
}

/* One more address to listen on, published in that order. */
static chorus_status_t tcp_listen(tl_ctx_t *ctx, const char *host)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE};
    struct addrinfo *res;
    int backlog = ctx->size < SOMAXCONN - 16 ? ctx->size + 16 : SOMAXCONN;
    int rc = getaddrinfo(host, "0", &hints, &res);
    int fd;

    if (rc != 0) {
        chorus_error("rank %d: tcp: bind host '%s' is not a numeric address: %s", ctx->rank,
                     host, gai_strerror(rc));
        return CHORUS_ERR_INVALID_ARG;
    }
    fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        chorus_error("rank %d: tcp: socket() failed: %m", ctx->rank);
        goto err_free;
    }
    /* Accepted sockets inherit the buffer sizes, which must be set before listen. */
    tl_tcp_sock_tune(fd);
    if (bind(fd, res->ai_addr, res->ai_addrlen) < 0) {
        chorus_error("rank %d: tcp: bind to %s failed: %m", ctx->rank, host);
        goto err_close;
    }
    if (listen(fd, backlog) < 0) {
        chorus_error("rank %d: tcp: listen on %s failed: %m", ctx->rank, host);
        goto err_close;
    }
    freeaddrinfo(res);
    ctx->listen_fd[ctx->nlisten++] = fd;
    return CHORUS_OK;

err_close:
    close(fd);
err_free:
    freeaddrinfo(res);
    return CHORUS_ERR_SYSTEM;
}

static void tcp_listen_close(tl_ctx_t *ctx)
{
    for (int i = 0; i < ctx->nlisten; i++) {
        if (ctx->listen_fd[i] >= 0)
            close(ctx->listen_fd[i]);
        ctx->listen_fd[i] = -1;
    }
}

static void tcp_ctx_free(tl_ctx_t *ctx)
{
    if (ctx->in != NULL)
        tl_tcp_hs_close_all(ctx);
    tcp_listen_close(ctx);
    if (ctx->timer_fd >= 0)
        close(ctx->timer_fd);
    if (ctx->epfd >= 0)
        close(ctx->epfd);
    if (ctx->auth_key != NULL) {
        explicit_bzero(ctx->auth_key, ctx->auth_key_len);
        free(ctx->auth_key);
    }
    tl_tcp_ue_cache_clear(ctx);
    free(ctx->scratch);
    free(ctx->in);
    free(ctx->peers);
    free(ctx);
}

/* Variables from the environment, once per context. */
static chorus_status_t tcp_read_config(tl_ctx_t *ctx)
{
    if (chorus__config_read(&tl_tcp_config_table, &ctx->cfg) != CHORUS_OK)
        return CHORUS_ERR_INVALID_ARG;
    if (ctx->cfg.eager_bytes > TL_TCP_MAX_MSG || ctx->cfg.window_bytes > TL_TCP_MAX_MSG) {
        chorus_error("rank %d: tcp: CHORUS_TCP_EAGER_SIZE (%zu) and CHORUS_TCP_WINDOW (%zu) "
                     "must not exceed %llu bytes", ctx->rank, ctx->cfg.eager_bytes,
                     ctx->cfg.window_bytes, (unsigned long long)TL_TCP_MAX_MSG);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (ctx->cfg.streams < 0 || ctx->cfg.streams > TL_TCP_STREAMS_MAX) {
        chorus_error("rank %d: tcp: CHORUS_TCP_STREAMS=%d is not in [0, %d] (0: one per "
                     "interface)", ctx->rank, ctx->cfg.streams, TL_TCP_STREAMS_MAX);
        return CHORUS_ERR_INVALID_ARG;
    }
    return CHORUS_OK;
}

/* Listen on every entry of CHORUS_TCP_IFACES: an interface's name, or an address. */
static chorus_status_t tcp_listen_ifaces(tl_ctx_t *ctx)
{
    char list[sizeof(ctx->cfg.ifaces.s)], *save = NULL;
    struct ifaddrs *ifas = NULL;
    chorus_status_t status = CHORUS_OK;

    memcpy(list, ctx->cfg.ifaces.s, sizeof(list));
    if (getifaddrs(&ifas) < 0) {
        chorus_error("rank %d: tcp: getifaddrs failed: %m", ctx->rank);
        return CHORUS_ERR_SYSTEM;
    }
    for (char *name = strtok_r(list, ", ", &save); name != NULL && status == CHORUS_OK;
         name = strtok_r(NULL, ", ", &save)) {
        char host[TL_TCP_HOST_MAX];
        struct in6_addr any;

        if (ctx->nlisten == TL_TCP_ADDRS_MAX) {
            chorus_error("rank %d: tcp: CHORUS_TCP_IFACES='%s' names more than %d interfaces",
                         ctx->rank, ctx->cfg.ifaces.s, TL_TCP_ADDRS_MAX);
            status = CHORUS_ERR_INVALID_ARG;
        } else if (inet_pton(AF_INET, name, &any) == 1 || inet_pton(AF_INET6, name, &any) == 1) {
            status = tcp_listen(ctx, name);
        } else if (tl_tcp_iface_address(ifas, name, host, sizeof(host))) {
            status = tcp_listen(ctx, host);
        } else {
            chorus_error("rank %d: tcp: CHORUS_TCP_IFACES: '%s' is neither an address nor an "
                         "interface with one", ctx->rank, name);
            status = CHORUS_ERR_INVALID_ARG;
        }
    }
    freeifaddrs(ifas);
    if (status == CHORUS_OK && ctx->nlisten == 0) {
        chorus_error("rank %d: tcp: CHORUS_TCP_IFACES='%s' names no interface", ctx->rank,
                     ctx->cfg.ifaces.s);
        status = CHORUS_ERR_INVALID_ARG;
    }
    return status;
}

/*
 * CHORUS_TCP_IFACES=auto: the bootstrap's address, then one on each other
 * network this machine is on (tl_tcp_iface_auto).
 */
static chorus_status_t tcp_listen_auto(tl_ctx_t *ctx, const char *host)
{
    struct addrinfo hints = {.ai_flags = AI_NUMERICHOST}, *res;
    char more[TL_TCP_ADDRS_MAX - 1][TL_TCP_HOST_MAX];
    struct ifaddrs *ifas = NULL;
    chorus_status_t status = tcp_listen(ctx, host);
    int n = 0;

    if (status != CHORUS_OK || getaddrinfo(host, NULL, &hints, &res) != 0)
        return status;
    if (getifaddrs(&ifas) == 0)
        n = tl_tcp_iface_auto(ifas, res->ai_addr, more, TL_TCP_ADDRS_MAX);
    else
        chorus_warn("rank %d: tcp: CHORUS_TCP_IFACES=auto: getifaddrs failed (%m): only %s",
                    ctx->rank, host);
    freeaddrinfo(res);
    freeifaddrs(ifas);
    for (int i = 0; i < n && status == CHORUS_OK; i++)
        status = tcp_listen(ctx, more[i]);
    chorus_debug("rank %d: tcp: CHORUS_TCP_IFACES=auto: %s and %d more", ctx->rank, host, n);
    return status;
}

static chorus_status_t tcp_watch(tl_ctx_t *ctx, int fd, uint32_t kind, int index)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = TL_TCP_EV(kind, index)};

    if (epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
        chorus_error("rank %d: tcp: epoll_ctl(add) failed: %m", ctx->rank);
        return CHORUS_ERR_SYSTEM;
    }
    return CHORUS_OK;
}

/* The epoll set progress() drives: the listener, the handshake timer, then connections. */
static chorus_status_t tcp_events_open(tl_ctx_t *ctx, const char *host)
{
    chorus_status_t status;

    ctx->epfd = epoll_create1(EPOLL_CLOEXEC);
    ctx->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (ctx->epfd < 0 || ctx->timer_fd < 0) {
        chorus_error("rank %d: tcp: epoll_create1 or timerfd_create failed: %m", ctx->rank);
        return CHORUS_ERR_SYSTEM;
    }
    status = tcp_watch(ctx, ctx->timer_fd, TL_TCP_EV_TIMER, 0);
    if (status == CHORUS_OK)
        status = tl_tcp_ifaces_bootstrap(&ctx->cfg) ? tcp_listen(ctx, host)
                 : tl_tcp_ifaces_auto(&ctx->cfg)    ? tcp_listen_auto(ctx, host)
                                                    : tcp_listen_ifaces(ctx);
    for (int i = 0; status == CHORUS_OK && i < ctx->nlisten; i++)
        status = tcp_watch(ctx, ctx->listen_fd[i], TL_TCP_EV_LISTEN, i);
    return status;
}

static tl_ctx_t *tcp_ctx_alloc(const tl_ctx_params_t *params)
{
    tl_ctx_t *ctx = calloc(1, sizeof(*ctx));

    if (ctx == NULL)
        return NULL;
    ctx->rank = params->rank;
    ctx->size = params->size;
    ctx->timeout_s = params->timeout_s;
    ctx->epfd = ctx->timer_fd = -1;
    for (int i = 0; i < TL_TCP_ADDRS_MAX; i++)
        ctx->listen_fd[i] = -1;
    ctx->fatal = CHORUS_OK;
    ctx->ctrl = params->ctrl;
    ctx->ctrl_arg = params->ctrl_arg;
    ctx->scratch_len = TL_TCP_SCRATCH;
    ctx->peers = calloc((size_t)params->size, sizeof(*ctx->peers));
    ctx->scratch = malloc(ctx->scratch_len);
    ctx->auth_key = malloc(params->auth_key_len);
    if (ctx->peers == NULL || ctx->scratch == NULL || ctx->auth_key == NULL) {
        tcp_ctx_free(ctx);
        return NULL;
    }
    memcpy(ctx->auth_key, params->auth_key, params->auth_key_len);
    ctx->auth_key_len = params->auth_key_len;
    for (int r = 0; r < ctx->size; r++)
        tl_tcp_peer_init(&ctx->peers[r], r);
    return ctx;
}

/*
 * Streams per peer, and the slots for incoming connections: every other rank
 * may be authenticating its connection and its lanes at once (two for the
 * connection when both ranks connect), with room for strangers besides.
 */
static chorus_status_t tcp_slots_alloc(tl_ctx_t *ctx)
{
    ctx->streams = ctx->cfg.streams > 0 ? ctx->cfg.streams : ctx->nlisten;
    atomic_init(&ctx->streams_use, ctx->streams);
    ctx->in_max = (ctx->streams + 1) * (ctx->size - 1) + 8;
    ctx->in = calloc((size_t)ctx->in_max, sizeof(*ctx->in));
    if (ctx->in == NULL) {
        chorus_error("rank %d: tcp: no memory for %d connection slots", ctx->rank, ctx->in_max);
        return CHORUS_ERR_NO_MEMORY;
    }
    for (int i = 0; i < ctx->in_max; i++)
        ctx->in[i].fd = -1;
    return CHORUS_OK;
}

static chorus_status_t tcp_ctx_create(const tl_ctx_params_t *params, tl_ctx_t **ctx_p)
{
    chorus_status_t status = tl_ctx_params_check("tcp", params);
    tl_ctx_t *ctx;

    chorus__log_init();
    if (status != CHORUS_OK)
        return status;
    ctx = tcp_ctx_alloc(params);
    if (ctx == NULL) {
        chorus_error("rank %d: tcp: no memory for a context of %d peers", params->rank,
                     params->size);
        return CHORUS_ERR_NO_MEMORY;
    }
    status = tcp_read_config(ctx);
    if (status == CHORUS_OK)
        status = tcp_events_open(ctx, params->bind_host);
    if (status == CHORUS_OK)
        status = tcp_slots_alloc(ctx);
    if (status != CHORUS_OK) {
        tcp_ctx_free(ctx);
        return status;
    }
    *ctx_p = ctx;
    return CHORUS_OK;
}

static chorus_status_t tcp_get_address(tl_ctx_t *ctx, void *addr, size_t *len_p)
{
    tl_tcp_blob_t blob;

    if (ctx == NULL || addr == NULL || len_p == NULL || ctx->nlisten == 0 ||
        ctx->listen_fd[0] < 0)
        return CHORUS_ERR_INVALID_ARG;
    memset(&blob, 0, sizeof(blob));
    blob.count = (uint8_t)ctx->nlisten;
    blob.streams = (uint8_t)ctx->streams;
    for (int i = 0; i < ctx->nlisten; i++) {
        struct sockaddr_storage ss;
        socklen_t sslen = sizeof(ss);
        tl_tcp_addr_t *a = &blob.addr[i];
        int rc;

        if (getsockname(ctx->listen_fd[i], (struct sockaddr *)&ss, &sslen) < 0) {
            chorus_error("rank %d: tcp: getsockname failed: %m", ctx->rank);
            return CHORUS_ERR_SYSTEM;
        }
        rc = getnameinfo((struct sockaddr *)&ss, sslen, a->host, sizeof(a->host), a->port,
                         sizeof(a->port), NI_NUMERICHOST | NI_NUMERICSERV);
        if (rc != 0) {
            chorus_error("rank %d: tcp: getnameinfo failed: %s", ctx->rank, gai_strerror(rc));
            return CHORUS_ERR_SYSTEM;
        }
    }
    memcpy(addr, &blob, sizeof(blob));
    *len_p = sizeof(blob);
    return CHORUS_OK;
}

static int tcp_event(tl_ctx_t *ctx, const struct epoll_event *ev)
{
    uint32_t kind = TL_TCP_EV_KIND(ev->data.u64);
    int index = (int)(uint32_t)ev->data.u64, lane = TL_TCP_EV_LANE_OF(ev->data.u64);
    tl_tcp_peer_t *peer;
    int n = 0;

    switch (kind) {
    case TL_TCP_EV_LISTEN:
        return tl_tcp_hs_accept(ctx, index);
    case TL_TCP_EV_TIMER:
        return tl_tcp_hs_timer(ctx);
    case TL_TCP_EV_OUT:
        return tl_tcp_hs_out_event(ctx, &ctx->peers[index], lane);
    case TL_TCP_EV_IN:
        return tl_tcp_hs_in_event(ctx, index);
    default:
        peer = &ctx->peers[index];
        if (lane > 0) {
            if (ev->events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                n += tl_tcp_lane_read(ctx, peer, lane);
            /* A lane that finished a frame may let any lane, the connection too, take one. */
            if (ev->events & (EPOLLOUT | EPOLLHUP | EPOLLERR))
                n += tl_tcp_peer_write(ctx, peer);
            return n + tl_tcp_peer_update_events(ctx, peer);
        }
        /* An earlier event of this batch may have closed the peer: both calls check. */
        if (ev->events & (EPOLLIN | EPOLLHUP | EPOLLERR))
            n += tl_tcp_peer_read(ctx, peer);
        if (ev->events & (EPOLLOUT | EPOLLHUP | EPOLLERR))
            n += tl_tcp_peer_write(ctx, peer);
        return n;
    }
}

static int tcp_progress(tl_ctx_t *ctx)
{
    struct epoll_event ev[TL_TCP_EVENTS];
    int n = ctx->deferred;
    int k;

    ctx->deferred = 0;
    k = epoll_wait(ctx->epfd, ev, TL_TCP_EVENTS, 0);
    if (k < 0) {
        if (errno == EINTR)
            return n;
        chorus_error("rank %d: tcp: epoll_wait failed: %m", ctx->rank);
        ctx->deferred = n;
        return CHORUS_ERR_SYSTEM;
    }
    for (int i = 0; i < k; i++)
        n += tcp_event(ctx, &ev[i]);
    /* Completions made by posts during these events are reported now as well. */
    n += ctx->deferred;
    ctx->deferred = 0;
    return n;
}

static int tcp_event_fd(tl_ctx_t *ctx)
{
    return ctx->epfd;
}

static void tcp_fail_all(tl_ctx_t *ctx, chorus_status_t status)
{
    int n = 0;

    if (status == CHORUS_OK)
        status = CHORUS_ERR_ABORTED;
    if (ctx->fatal == CHORUS_OK)
        ctx->fatal = status;
    for (int r = 0; r < ctx->size; r++) {
        n += tl_tcp_peer_fail(ctx, &ctx->peers[r], status);
        tl_tcp_peer_free_unexpected(ctx, &ctx->peers[r]);
    }
    tl_tcp_hs_close_all(ctx);
    /* No new connection may arrive once the context has failed. */
    tcp_listen_close(ctx);
    ctx->deferred += n;
}

static int tcp_reaches(tl_ctx_t *ctx, int peer)
{
    return ctx != NULL && peer >= 0 && peer < ctx->size;
}

static int tcp_connections(tl_ctx_t *ctx)
{
    int n = 0;

    for (int r = 0; r < ctx->size; r++)
        n += ctx->peers[r].state == TL_TCP_PEER_UP;
    return n;
}

/* Read and drop what came on fd; 1 once the peer closed its side (or the connection broke). */
static int close_drain(tl_ctx_t *ctx, int fd)
{
    for (;;) {
        ssize_t r = read(fd, ctx->scratch, ctx->scratch_len);

        if (r > 0)
            continue;
        if (r < 0 && errno == EINTR)
            continue;
        return r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
    }
}

/*
 * A context that ends normally closes its connections in order: it sends its
 * end of stream, then reads (and drops) what its peers still send until they
 * close their side, for at most TL_TCP_CLOSE_S. Closing a socket with unread
 * data in it makes the kernel reset the connection, and a reset makes the
 * peer's kernel drop what it received but its process has not read yet:
 * the last messages of a call, ahead of the credit this rank sent back. The
 * lanes close the same way.
 */
static void tcp_close_gently(tl_ctx_t *ctx)
{
    double deadline = chorus__now() + TL_TCP_CLOSE_S;
    size_t nfds = (size_t)ctx->size * TL_TCP_STREAMS_MAX;
    struct pollfd *fds = calloc(nfds, sizeof(*fds));
    int open = 0;

    if (fds == NULL)
        return;
    for (size_t i = 0; i < nfds; i++) {
        const tl_tcp_peer_t *peer = &ctx->peers[i / TL_TCP_STREAMS_MAX];
        int lane = (int)(i % TL_TCP_STREAMS_MAX);
        int fd = lane == 0 ? peer->fd : peer->lanes[lane].fd;

        fds[i].fd = -1;
        if (fd < 0 || shutdown(fd, SHUT_WR) != 0)
            continue;
        fds[i] = (struct pollfd){.fd = fd, .events = POLLIN};
        open++;
    }
    while (open > 0 && chorus__now() < deadline) {
        int n = poll(fds, (nfds_t)nfds, chorus__ms_left(deadline));

        if (n < 0 && errno != EINTR)
            break;
        for (size_t i = 0; n > 0 && i < nfds; i++) {
            if (fds[i].fd < 0 || fds[i].revents == 0)
                continue;
            if (close_drain(ctx, fds[i].fd)) {
                fds[i].fd = -1;
                open--;
            }
        }
    }
    free(fds);
}

static void tcp_ctx_destroy(tl_ctx_t *ctx)
{
    const tl_tcp_stats_t *st;

    if (ctx == NULL)
        return;
    st = &ctx->stats;
    chorus_debug("rank %d: tcp: %llu messages sent eagerly (%llu bytes), %llu by rendezvous; "
                 "%llu credit frames sent, %llu received; unexpected buffers peaked at %zu "
                 "bytes; %llu connection collisions, %llu lanes dialled again at a first "
                 "address", ctx->rank,
                 (unsigned long long)st->eager_sent, (unsigned long long)st->eager_bytes,
                 (unsigned long long)st->rndv_sent, (unsigned long long)st->credit_sent,
                 (unsigned long long)st->credit_recv, st->ue_peak,
                 (unsigned long long)st->collisions, (unsigned long long)st->lane_fallbacks);
    if (ctx->fatal == CHORUS_OK)
        tcp_close_gently(ctx);
    tcp_fail_all(ctx, CHORUS_ERR_ABORTED);
    tcp_ctx_free(ctx);
}

static int tcp_streams(tl_ctx_t *ctx, int use)
{
    if (use > 0)
        atomic_store_explicit(&ctx->streams_use, use < ctx->streams ? use : ctx->streams,
                              memory_order_relaxed);
    return ctx->streams;
}

const tl_ops_t tl_tcp_ops = {
    .name = "tcp",
    .query = tcp_query,
    .config = &tl_tcp_config_table,
    .ctx_create = tcp_ctx_create,
    .ctx_destroy = tcp_ctx_destroy,
    .get_address = tcp_get_address,
    .set_peers = tl_tcp_set_peers,
    .reaches = tcp_reaches,
    .send_nb = tl_tcp_send_nb,
    .recv_nb = tl_tcp_recv_nb,
    .progress = tcp_progress,
    .event_fd = tcp_event_fd,
    .fail_all = tcp_fail_all,
    .connections = tcp_connections,
    .streams = tcp_streams,
};
