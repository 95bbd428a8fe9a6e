/*
 * TCP transport: authenticated full-mesh setup.
 *
 * Rank i connects to every rank below it and accepts from every rank above
 * it, all at once in one event loop, so no ordering between ranks is needed.
 * Each connection proves the job key both ways:
 *
 *   acceptor  -> connector: nonce (32 random bytes, fresh per connection)
 *   connector -> acceptor : hello {magic, version, from, to,
 *                                  HMAC(key, nonce || from || to)}
 *   acceptor  -> connector: HMAC(key, "ack" || nonce || from || to)
 *
 * A connection that fails any check is dropped with a warning and the loop
 * keeps waiting for the real peer until the deadline.
 */
#include "transports/tcp/tcp.h"

#include <endian.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/log.h"
#include "util/sha256.h"
#include "util/time.h"

#define HS_RETRY_S      0.05    /* first pause before connecting again after a refusal */
#define HS_RETRY_MAX_S  0.5     /* the pause doubles up to this */
#define HS_EVENTS       32
#define HS_KIND_LISTEN  0u
#define HS_KIND_OUT     1u
#define HS_KIND_IN      2u

typedef enum {
    HS_IDLE = 0,                /* connector: waiting for retry_at */
    HS_CONNECTING,
    HS_NONCE,                   /* connector reads it, acceptor writes it */
    HS_HELLO,                   /* connector writes it, acceptor reads it */
    HS_ACK,                     /* acceptor writes it, connector reads it */
    HS_DONE
} hs_state_t;

typedef struct {
    int fd;
    hs_state_t state;
    int rank;                   /* connector: target rank; acceptor: claimed rank */
    double when;                /* connector: retry time; acceptor: accept time */
    double backoff;             /* connector: next pause before retrying */
    size_t done;                /* bytes of the current step moved so far */
    uint8_t nonce[TL_TCP_NONCE_BYTES];
    tl_tcp_hello_t hello;
    uint8_t ack[TL_TCP_MAC_BYTES];
} hs_conn_t;

typedef struct {
    tl_ctx_t *ctx;
    int epfd;
    struct sockaddr_storage *sa;    /* addresses of the lower ranks */
    socklen_t *salen;
    hs_conn_t *out;                 /* out[j]: our connection to rank j < rank */
    hs_conn_t *in;                  /* connections accepted, not yet authenticated */
    int in_max;
    int missing;
    int rejected;                   /* connections that failed authentication */
    int dropped;                    /* connections dropped for any reason */
} hs_t;

/* The first dropped connection is a warning; repeats (retries, scanners) are debug. */
static int hs_drop_level(hs_t *hs)
{
    return hs->dropped++ ? CHORUS_LOG_DEBUG : CHORUS_LOG_WARN;
}

#define hs_drop_log(hs, ...)                        \
    do {                                            \
        int hs_level_ = hs_drop_level(hs);          \
        chorus_log(hs_level_, __VA_ARGS__);         \
    } while (0)

/* ---- Wire codecs: no sockets, no logging (tests/fuzz/ calls them directly) ---- */

void tl_tcp_hello_encode(tl_tcp_hello_t *wire, uint32_t from, uint32_t to,
                         const uint8_t mac[TL_TCP_MAC_BYTES])
{
    wire->magic = htole32(TL_TCP_HELLO_MAGIC);
    wire->version = htole32(TL_TCP_VERSION);
    wire->from_rank = htole32(from);
    wire->to_rank = htole32(to);
    memcpy(wire->mac, mac, TL_TCP_MAC_BYTES);
}

chorus_status_t tl_tcp_hello_decode(const void *buf, size_t len, int rank, int size,
                                    uint32_t *from_p, uint8_t mac_p[TL_TCP_MAC_BYTES],
                                    char *why, size_t why_len)
{
    tl_tcp_hello_t hello;
    uint32_t from, to;

    if (len != sizeof(hello)) {
        snprintf(why, why_len, "a hello of %zu bytes, expected %zu", len, sizeof(hello));
        return CHORUS_ERR_PROTOCOL;
    }
    memcpy(&hello, buf, sizeof(hello));
    if (le32toh(hello.magic) != TL_TCP_HELLO_MAGIC || le32toh(hello.version) != TL_TCP_VERSION) {
        snprintf(why, why_len, "a connection that is not a chorus tcp v%u hello (magic 0x%08x, "
                 "version %u)", TL_TCP_VERSION, le32toh(hello.magic), le32toh(hello.version));
        return CHORUS_ERR_PROTOCOL;
    }
    from = le32toh(hello.from_rank);
    to = le32toh(hello.to_rank);
    /* Only higher ranks connect to this one, so `from` indexes the peers safely. */
    if (to != (uint32_t)rank || from <= (uint32_t)rank || from >= (uint32_t)size) {
        snprintf(why, why_len, "a hello from rank %u to rank %u: this rank accepts only ranks "
                 "%d..%d", from, to, rank + 1, size - 1);
        return CHORUS_ERR_PROTOCOL;
    }
    *from_p = from;
    memcpy(mac_p, hello.mac, TL_TCP_MAC_BYTES);
    return CHORUS_OK;
}

chorus_status_t tl_tcp_addr_decode(const void *buf, size_t len, tl_tcp_addr_t *addr_p)
{
    tl_tcp_addr_t blob;

    if (len < sizeof(blob))
        return CHORUS_ERR_INVALID_ARG;
    memcpy(&blob, buf, sizeof(blob));
    if (memchr(blob.host, '\0', sizeof(blob.host)) == NULL ||
        memchr(blob.port, '\0', sizeof(blob.port)) == NULL)
        return CHORUS_ERR_INVALID_ARG;
    *addr_p = blob;
    return CHORUS_OK;
}

int tl_tcp_addr_resolve(const tl_tcp_addr_t *addr, struct sockaddr_storage *sa_p,
                        socklen_t *salen_p)
{
    const struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                                   .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV};
    struct addrinfo *res;
    int rc;

    rc = getaddrinfo(addr->host, addr->port, &hints, &res);
    if (rc != 0)
        return rc;
    if (res->ai_addrlen > sizeof(*sa_p)) {
        freeaddrinfo(res);
        return EAI_FAMILY;
    }
    memcpy(sa_p, res->ai_addr, res->ai_addrlen);
    *salen_p = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

/* ---- Handshake -------------------------------------------------------------- */

static void hs_mac(const tl_ctx_t *ctx, int ack, const uint8_t *nonce, uint32_t from,
                   uint32_t to, uint8_t out[TL_TCP_MAC_BYTES])
{
    uint8_t msg[3 + TL_TCP_NONCE_BYTES + 8];
    uint32_t from_le = htole32(from), to_le = htole32(to);
    size_t len = 0;

    if (ack) {
        memcpy(msg, "ack", 3);
        len = 3;
    }
    memcpy(msg + len, nonce, TL_TCP_NONCE_BYTES);
    len += TL_TCP_NONCE_BYTES;
    memcpy(msg + len, &from_le, 4);
    memcpy(msg + len + 4, &to_le, 4);
    len += 8;
    chorus__hmac_sha256(ctx->auth_key, ctx->auth_key_len, msg, len, out);
}

/* Move the rest of one step's bytes: 1 when done, 0 when the socket is full or empty. */
static int hs_io(hs_conn_t *c, void *buf, size_t len, int writing)
{
    while (c->done < len) {
        ssize_t r = writing ? send(c->fd, (char *)buf + c->done, len - c->done, MSG_NOSIGNAL)
                            : recv(c->fd, (char *)buf + c->done, len - c->done, 0);

        if (r > 0) {
            c->done += (size_t)r;
            continue;
        }
        if (r == 0)
            return -1;
        if (errno == EINTR)
            continue;
        return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
    }
    c->done = 0;
    return 1;
}

static chorus_status_t hs_watch(hs_t *hs, hs_conn_t *c, int op, uint32_t kind, int index,
                                uint32_t events)
{
    struct epoll_event ev = {.events = events,
                             .data.u64 = ((uint64_t)kind << 32) | (uint32_t)index};

    if (epoll_ctl(hs->epfd, op, c->fd, &ev) < 0) {
        chorus_error("rank %d: tcp setup: epoll_ctl failed: %m", hs->ctx->rank);
        return CHORUS_ERR_SYSTEM;
    }
    return CHORUS_OK;
}

static void hs_close(hs_conn_t *c)
{
    if (c->fd >= 0)
        close(c->fd); /* also leaves the setup epoll set */
    c->fd = -1;
    c->done = 0;
}

/* The connection is authenticated: it becomes the peer's data connection. */
static chorus_status_t hs_established(hs_t *hs, hs_conn_t *c)
{
    tl_ctx_t *ctx = hs->ctx;
    chorus_status_t status;

    epoll_ctl(hs->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    status = tl_tcp_peer_attach(ctx, &ctx->peers[c->rank], c->fd);
    if (status != CHORUS_OK) {
        hs_close(c);
        return status;
    }
    chorus_debug("rank %d: tcp: connected to peer %d", ctx->rank, c->rank);
    c->fd = -1;
    c->state = HS_DONE;
    hs->missing--;
    return CHORUS_OK;
}

static void hs_out_retry(hs_conn_t *c)
{
    hs_close(c);
    c->state = HS_IDLE;
    c->when = chorus__now() + c->backoff;
    c->backoff = c->backoff * 2 < HS_RETRY_MAX_S ? c->backoff * 2 : HS_RETRY_MAX_S;
}

static chorus_status_t hs_out_start(hs_t *hs, int j)
{
    hs_conn_t *c = &hs->out[j];

    c->fd = socket(hs->sa[j].ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        chorus_error("rank %d: tcp setup: socket() for peer %d failed: %m", hs->ctx->rank, j);
        return CHORUS_ERR_SYSTEM;
    }
    tl_tcp_sock_tune(c->fd);
    if (connect(c->fd, (struct sockaddr *)&hs->sa[j], hs->salen[j]) < 0 &&
        errno != EINPROGRESS) {
        chorus_debug("rank %d: tcp setup: connect to peer %d: %m; retrying", hs->ctx->rank, j);
        hs_out_retry(c);
        return CHORUS_OK;
    }
    c->state = HS_CONNECTING;
    c->done = 0;
    return hs_watch(hs, c, EPOLL_CTL_ADD, HS_KIND_OUT, j, EPOLLOUT);
}

/* Connector side; any failure before the peer proves the key means: try again later. */
static chorus_status_t hs_out_event(hs_t *hs, int j)
{
    tl_ctx_t *ctx = hs->ctx;
    hs_conn_t *c = &hs->out[j];
    uint8_t expect[TL_TCP_MAC_BYTES], mac[TL_TCP_MAC_BYTES];
    int err = 0, r = 0;
    socklen_t len = sizeof(err);

    switch (c->state) {
    case HS_CONNECTING:
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
            err = errno;
        if (err != 0) {
            chorus_debug("rank %d: tcp setup: connect to peer %d: %s; retrying", ctx->rank, j,
                         strerror(err));
            hs_out_retry(c);
            return CHORUS_OK;
        }
        c->state = HS_NONCE;
        if (hs_watch(hs, c, EPOLL_CTL_MOD, HS_KIND_OUT, j, EPOLLIN) != CHORUS_OK)
            return CHORUS_ERR_SYSTEM;
        /* fall through - the nonce may already be there */
    case HS_NONCE:
        r = hs_io(c, c->nonce, sizeof(c->nonce), 0);
        if (r <= 0)
            break;
        hs_mac(ctx, 0, c->nonce, (uint32_t)ctx->rank, (uint32_t)j, mac);
        tl_tcp_hello_encode(&c->hello, (uint32_t)ctx->rank, (uint32_t)j, mac);
        c->state = HS_HELLO;
        /* fall through */
    case HS_HELLO:
        r = hs_io(c, &c->hello, sizeof(c->hello), 1);
        if (r == 0)
            return hs_watch(hs, c, EPOLL_CTL_MOD, HS_KIND_OUT, j, EPOLLOUT);
        if (r < 0)
            break;
        c->state = HS_ACK;
        if (hs_watch(hs, c, EPOLL_CTL_MOD, HS_KIND_OUT, j, EPOLLIN) != CHORUS_OK)
            return CHORUS_ERR_SYSTEM;
        /* fall through */
    case HS_ACK:
        r = hs_io(c, c->ack, sizeof(c->ack), 0);
        if (r <= 0)
            break;
        hs_mac(ctx, 1, c->nonce, (uint32_t)ctx->rank, (uint32_t)j, expect);
        if (!chorus__mac_equal(expect, c->ack, sizeof(expect))) {
            hs_drop_log(hs, "rank %d: tcp setup: the listener at peer %d's address did not "
                        "prove the job key; dropping it", ctx->rank, j);
            hs->rejected++;
            hs_out_retry(c);
            return CHORUS_OK;
        }
        return hs_established(hs, c);
    default:
        return CHORUS_OK;
    }
    if (r < 0) {
        chorus_debug("rank %d: tcp setup: connection to peer %d closed during the handshake; "
                     "retrying", ctx->rank, j);
        hs_out_retry(c);
    }
    return CHORUS_OK;
}

/* Acceptor side: checks the hello; returns 1 when it is genuine. */
static int hs_hello_ok(hs_t *hs, hs_conn_t *c)
{
    tl_ctx_t *ctx = hs->ctx;
    uint8_t expect[TL_TCP_MAC_BYTES], mac[TL_TCP_MAC_BYTES];
    char why[128];
    uint32_t from;

    if (tl_tcp_hello_decode(&c->hello, sizeof(c->hello), ctx->rank, ctx->size, &from, mac, why,
                            sizeof(why)) != CHORUS_OK) {
        hs_drop_log(hs, "rank %d: tcp setup: dropping %s", ctx->rank, why);
        return 0;
    }
    hs_mac(ctx, 0, c->nonce, from, (uint32_t)ctx->rank, expect);
    if (!chorus__mac_equal(expect, mac, sizeof(expect))) {
        hs_drop_log(hs, "rank %d: tcp setup: a connection claiming to be rank %u failed "
                    "authentication (wrong job key?); dropping it", ctx->rank, from);
        hs->rejected++;
        return 0;
    }
    if (ctx->peers[from].fd >= 0) {
        hs_drop_log(hs, "rank %d: tcp setup: duplicate connection from rank %u; dropping it",
                    ctx->rank, from);
        return 0;
    }
    c->rank = (int)from;
    return 1;
}

static chorus_status_t hs_in_event(hs_t *hs, int i)
{
    hs_conn_t *c = &hs->in[i];
    int r = 0;

    switch (c->state) {
    case HS_NONCE:
        r = hs_io(c, c->nonce, sizeof(c->nonce), 1);
        if (r <= 0)
            break;
        c->state = HS_HELLO;
        if (hs_watch(hs, c, EPOLL_CTL_MOD, HS_KIND_IN, i, EPOLLIN) != CHORUS_OK)
            return CHORUS_ERR_SYSTEM;
        /* fall through */
    case HS_HELLO:
        r = hs_io(c, &c->hello, sizeof(c->hello), 0);
        if (r <= 0)
            break;
        if (!hs_hello_ok(hs, c)) {
            hs_close(c);
            return CHORUS_OK;
        }
        hs_mac(hs->ctx, 1, c->nonce, (uint32_t)c->rank, (uint32_t)hs->ctx->rank, c->ack);
        c->state = HS_ACK;
        /* fall through */
    case HS_ACK:
        r = hs_io(c, c->ack, sizeof(c->ack), 1);
        if (r <= 0)
            break;
        /* Two genuine connections from one rank cannot both be kept. */
        if (hs->ctx->peers[c->rank].fd >= 0) {
            hs_close(c);
            return CHORUS_OK;
        }
        return hs_established(hs, c);
    default:
        return CHORUS_OK;
    }
    if (r < 0) {
        chorus_debug("rank %d: tcp setup: an incoming connection closed during the handshake",
                     hs->ctx->rank);
        hs_close(c);
    } else if (c->state != HS_HELLO) {
        return hs_watch(hs, c, EPOLL_CTL_MOD, HS_KIND_IN, i, EPOLLOUT);
    }
    return CHORUS_OK;
}

/* A slot for a new incoming connection; the oldest pending one yields when all are taken. */
static int hs_in_slot(hs_t *hs)
{
    int oldest = 0;

    for (int i = 0; i < hs->in_max; i++) {
        if (hs->in[i].fd < 0)
            return i;
        if (hs->in[i].when < hs->in[oldest].when)
            oldest = i;
    }
    hs_drop_log(hs, "rank %d: tcp setup: %d connections wait for authentication; dropping the "
                "oldest", hs->ctx->rank, hs->in_max);
    hs_close(&hs->in[oldest]);
    return oldest;
}

static chorus_status_t hs_accept(hs_t *hs)
{
    for (;;) {
        int fd = accept4(hs->ctx->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        hs_conn_t *c;
        int i;

        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                hs_drop_log(hs, "rank %d: tcp setup: accept failed: %m", hs->ctx->rank);
            return CHORUS_OK;
        }
        i = hs_in_slot(hs);
        c = &hs->in[i];
        c->fd = fd;
        c->state = HS_NONCE;
        c->rank = -1;
        c->done = 0;
        c->when = chorus__now();
        tl_tcp_sock_tune(fd);
        if (chorus__random_bytes(c->nonce, sizeof(c->nonce)) != 0) {
            hs_close(c);
            return CHORUS_ERR_SYSTEM;
        }
        if (hs_watch(hs, c, EPOLL_CTL_ADD, HS_KIND_IN, i, EPOLLOUT) != CHORUS_OK ||
            hs_in_event(hs, i) != CHORUS_OK)
            return CHORUS_ERR_SYSTEM;
    }
}

/* Parse the blobs of the ranks this one connects to; they came from the bootstrap. */
static chorus_status_t hs_resolve(hs_t *hs, const void *addrs)
{
    for (int j = 0; j < hs->ctx->rank; j++) {
        tl_tcp_addr_t blob;
        int rc;

        if (tl_tcp_addr_decode((const char *)addrs + (size_t)j * TL_ADDR_MAX, TL_ADDR_MAX,
                               &blob) != CHORUS_OK) {
            chorus_error("rank %d: tcp: the address blob of rank %d is malformed",
                         hs->ctx->rank, j);
            return CHORUS_ERR_INVALID_ARG;
        }
        rc = tl_tcp_addr_resolve(&blob, &hs->sa[j], &hs->salen[j]);
        if (rc != 0) {
            chorus_error("rank %d: tcp: address '%s' port '%s' of rank %d is invalid: %s",
                         hs->ctx->rank, blob.host, blob.port, j, gai_strerror(rc));
            return CHORUS_ERR_INVALID_ARG;
        }
    }
    return CHORUS_OK;
}

static chorus_status_t hs_init(hs_t *hs, tl_ctx_t *ctx, const void *addrs)
{
    size_t lower = (size_t)ctx->rank + 1;
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uint64_t)HS_KIND_LISTEN << 32};

    memset(hs, 0, sizeof(*hs));
    hs->ctx = ctx;
    hs->missing = ctx->size - 1;
    hs->in_max = 2 * (ctx->size - ctx->rank) + 8;
    hs->sa = calloc(lower, sizeof(*hs->sa));
    hs->salen = calloc(lower, sizeof(*hs->salen));
    hs->out = calloc(lower, sizeof(*hs->out));
    hs->in = calloc((size_t)hs->in_max, sizeof(*hs->in));
    hs->epfd = -1;
    if (hs->sa == NULL || hs->salen == NULL || hs->out == NULL || hs->in == NULL)
        return CHORUS_ERR_NO_MEMORY;
    for (int j = 0; j < ctx->rank; j++) {
        hs->out[j].fd = -1;
        hs->out[j].rank = j;
        hs->out[j].backoff = HS_RETRY_S;
    }
    for (int i = 0; i < hs->in_max; i++)
        hs->in[i].fd = -1;
    hs->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (hs->epfd < 0 || epoll_ctl(hs->epfd, EPOLL_CTL_ADD, ctx->listen_fd, &ev) < 0) {
        chorus_error("rank %d: tcp setup: epoll failed: %m", ctx->rank);
        return CHORUS_ERR_SYSTEM;
    }
    return hs_resolve(hs, addrs);
}

static void hs_fini(hs_t *hs)
{
    for (int j = 0; hs->out != NULL && j < hs->ctx->rank; j++)
        hs_close(&hs->out[j]);
    for (int i = 0; hs->in != NULL && i < hs->in_max; i++)
        hs_close(&hs->in[i]);
    if (hs->epfd >= 0)
        close(hs->epfd);
    free(hs->sa);
    free(hs->salen);
    free(hs->out);
    free(hs->in);
}

static chorus_status_t hs_report_missing(const hs_t *hs)
{
    const tl_ctx_t *ctx = hs->ctx;
    char list[256];
    size_t used = 0;

    list[0] = '\0';
    for (int r = 0; r < ctx->size && used < sizeof(list) - 8; r++) {
        if (r == ctx->rank || ctx->peers[r].fd >= 0)
            continue;
        used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%d", used ? " " : "", r);
    }
    if (used >= sizeof(list) - 8)
        snprintf(list + sizeof(list) - 8, 8, " ...");
    chorus_error("rank %d: tcp: no authenticated connection to %d rank(s) [%s] within %g s%s",
                 ctx->rank, hs->missing, list, ctx->timeout_s,
                 hs->rejected ? "; some connections failed authentication" : "");
    return hs->rejected ? CHORUS_ERR_AUTH : CHORUS_ERR_TIMEOUT;
}

/* One round: start due connects, wait for events until the next retry or deadline. */
static chorus_status_t hs_round(hs_t *hs, double deadline)
{
    struct epoll_event ev[HS_EVENTS];
    chorus_status_t status = CHORUS_OK;
    double wake = deadline;
    int k;

    for (int j = 0; j < hs->ctx->rank && status == CHORUS_OK; j++) {
        if (hs->out[j].state == HS_IDLE && hs->out[j].when <= chorus__now())
            status = hs_out_start(hs, j);
        if (hs->out[j].state == HS_IDLE && hs->out[j].when < wake)
            wake = hs->out[j].when;
    }
    if (status != CHORUS_OK)
        return status;
    k = epoll_wait(hs->epfd, ev, HS_EVENTS, chorus__ms_left(wake));
    if (k < 0 && errno != EINTR) {
        chorus_error("rank %d: tcp setup: epoll_wait failed: %m", hs->ctx->rank);
        return CHORUS_ERR_SYSTEM;
    }
    for (int i = 0; i < k && status == CHORUS_OK; i++) {
        uint32_t kind = (uint32_t)(ev[i].data.u64 >> 32);
        int index = (int)(uint32_t)ev[i].data.u64;

        if (kind == HS_KIND_LISTEN)
            status = hs_accept(hs);
        else if (kind == HS_KIND_OUT && hs->out[index].fd >= 0)
            status = hs_out_event(hs, index);
        else if (kind == HS_KIND_IN && hs->in[index].fd >= 0)
            status = hs_in_event(hs, index);
    }
    return status;
}

chorus_status_t tl_tcp_connect_all(tl_ctx_t *ctx, const void *addrs)
{
    chorus_status_t status;
    double deadline;
    hs_t hs;

    if (ctx == NULL || addrs == NULL || ctx->connected || ctx->listen_fd < 0) {
        chorus_error("tcp: connect_all: invalid context or addresses, or called twice");
        return CHORUS_ERR_INVALID_ARG;
    }
    deadline = chorus__now() + ctx->timeout_s;
    status = hs_init(&hs, ctx, addrs);
    while (status == CHORUS_OK && hs.missing > 0 && chorus__now() < deadline)
        status = hs_round(&hs, deadline);
    if (status == CHORUS_OK && hs.missing > 0)
        status = hs_report_missing(&hs);
    hs_fini(&hs);
    if (status != CHORUS_OK)
        return status;
    /* The mesh is complete: nobody else may connect. */
    close(ctx->listen_fd);
    ctx->listen_fd = -1;
    ctx->connected = 1;
    return CHORUS_OK;
}
