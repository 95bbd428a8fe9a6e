/*
 * TCP transport: context lifetime, address, progress and the ops table.
 */
#include "transports/tcp/tcp.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/log.h"

#define TL_TCP_SOCKBUF      (4 << 20)
#define TL_TCP_SCRATCH      (64 << 10)
#define TL_TCP_EVENTS       64

_Static_assert(sizeof(tl_tcp_addr_t) <= TL_ADDR_MAX, "tcp address blob exceeds TL_ADDR_MAX");
_Static_assert(sizeof(tl_tcp_hdr_t) == 24, "tcp header must have no padding");
_Static_assert(sizeof(tl_tcp_hello_t) == 48, "tcp hello must have no padding");

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

static chorus_status_t check_params(const tl_ctx_params_t *params)
{
    if (params == NULL) {
        chorus_error("tcp: ctx_create: params is NULL");
        return CHORUS_ERR_INVALID_ARG;
    }
    if (params->size < 1 || params->rank < 0 || params->rank >= params->size) {
        chorus_error("tcp: ctx_create: rank %d of size %d is out of range", params->rank,
                     params->size);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (params->bind_host == NULL || params->auth_key == NULL || params->auth_key_len == 0) {
        chorus_error("rank %d: tcp: ctx_create needs a bind host and a non-empty auth key",
                     params->rank);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (!(params->timeout_s > 0)) {
        chorus_error("rank %d: tcp: ctx_create: timeout %g s must be positive", params->rank,
                     params->timeout_s);
        return CHORUS_ERR_INVALID_ARG;
    }
    return CHORUS_OK;
}

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
    ctx->listen_fd = fd;
    return CHORUS_OK;

err_close:
    close(fd);
err_free:
    freeaddrinfo(res);
    return CHORUS_ERR_SYSTEM;
}

static void tcp_ctx_free(tl_ctx_t *ctx)
{
    if (ctx->listen_fd >= 0)
        close(ctx->listen_fd);
    if (ctx->epfd >= 0)
        close(ctx->epfd);
    if (ctx->auth_key != NULL) {
        explicit_bzero(ctx->auth_key, ctx->auth_key_len);
        free(ctx->auth_key);
    }
    tl_tcp_ue_cache_clear(ctx);
    free(ctx->scratch);
    free(ctx->peers);
    free(ctx);
}

static chorus_status_t tcp_ctx_create(const tl_ctx_params_t *params, tl_ctx_t **ctx_p)
{
    chorus_status_t status = check_params(params);
    tl_ctx_t *ctx;

    chorus__log_init();
    if (status != CHORUS_OK)
        return status;
    ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL)
        return CHORUS_ERR_NO_MEMORY;
    ctx->rank = params->rank;
    ctx->size = params->size;
    ctx->timeout_s = params->timeout_s;
    ctx->listen_fd = -1;
    ctx->epfd = -1;
    ctx->fatal = CHORUS_OK;
    ctx->ctrl = params->ctrl;
    ctx->ctrl_arg = params->ctrl_arg;
    ctx->scratch_len = TL_TCP_SCRATCH;
    ctx->peers = calloc((size_t)params->size, sizeof(*ctx->peers));
    ctx->scratch = malloc(ctx->scratch_len);
    ctx->auth_key = malloc(params->auth_key_len);
    if (ctx->peers == NULL || ctx->scratch == NULL || ctx->auth_key == NULL) {
        chorus_error("rank %d: tcp: no memory for a context of %d peers", params->rank,
                     params->size);
        status = CHORUS_ERR_NO_MEMORY;
        goto err_free;
    }
    memcpy(ctx->auth_key, params->auth_key, params->auth_key_len);
    ctx->auth_key_len = params->auth_key_len;
    for (int r = 0; r < ctx->size; r++)
        tl_tcp_peer_init(&ctx->peers[r], r);
    ctx->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (ctx->epfd < 0) {
        chorus_error("rank %d: tcp: epoll_create1 failed: %m", ctx->rank);
        status = CHORUS_ERR_SYSTEM;
        goto err_free;
    }
    status = tcp_listen(ctx, params->bind_host);
    if (status != CHORUS_OK)
        goto err_free;
    *ctx_p = ctx;
    return CHORUS_OK;

err_free:
    tcp_ctx_free(ctx);
    return status;
}

static chorus_status_t tcp_get_address(tl_ctx_t *ctx, void *addr, size_t *len_p)
{
    struct sockaddr_storage ss;
    socklen_t sslen = sizeof(ss);
    tl_tcp_addr_t blob;
    int rc;

    if (ctx == NULL || addr == NULL || len_p == NULL || ctx->listen_fd < 0)
        return CHORUS_ERR_INVALID_ARG;
    if (getsockname(ctx->listen_fd, (struct sockaddr *)&ss, &sslen) < 0) {
        chorus_error("rank %d: tcp: getsockname failed: %m", ctx->rank);
        return CHORUS_ERR_SYSTEM;
    }
    memset(&blob, 0, sizeof(blob));
    rc = getnameinfo((struct sockaddr *)&ss, sslen, blob.host, sizeof(blob.host), blob.port,
                     sizeof(blob.port), NI_NUMERICHOST | NI_NUMERICSERV);
    if (rc != 0) {
        chorus_error("rank %d: tcp: getnameinfo failed: %s", ctx->rank, gai_strerror(rc));
        return CHORUS_ERR_SYSTEM;
    }
    memcpy(addr, &blob, sizeof(blob));
    *len_p = sizeof(blob);
    return CHORUS_OK;
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
    for (int i = 0; i < k; i++) {
        tl_tcp_peer_t *peer = ev[i].data.ptr;

        /* An earlier event of this batch may have closed the peer: both calls check. */
        if (ev[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
            n += tl_tcp_peer_read(ctx, peer);
        if (ev[i].events & (EPOLLOUT | EPOLLHUP | EPOLLERR))
            n += tl_tcp_peer_write(ctx, peer);
    }
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
    /* No new connection may arrive once the context has failed. */
    if (ctx->listen_fd >= 0) {
        close(ctx->listen_fd);
        ctx->listen_fd = -1;
    }
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
        n += ctx->peers[r].fd >= 0;
    return n;
}

static void tcp_ctx_destroy(tl_ctx_t *ctx)
{
    if (ctx == NULL)
        return;
    tcp_fail_all(ctx, CHORUS_ERR_ABORTED);
    tcp_ctx_free(ctx);
}

const tl_ops_t tl_tcp_ops = {
    .name = "tcp",
    .query = tcp_query,
    .ctx_create = tcp_ctx_create,
    .ctx_destroy = tcp_ctx_destroy,
    .get_address = tcp_get_address,
    .set_peers = tl_tcp_connect_all,
    .reaches = tcp_reaches,
    .send_nb = tl_tcp_send_nb,
    .recv_nb = tl_tcp_recv_nb,
    .progress = tcp_progress,
    .event_fd = tcp_event_fd,
    .fail_all = tcp_fail_all,
    .connections = tcp_connections,
};
