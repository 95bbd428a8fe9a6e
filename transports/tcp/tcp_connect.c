/*
 * TCP transport: connections on first use, authenticated, made inside
 * progress() (tcp.h describes the handshake, collisions and failures).
 *
 * A peer's own connection runs in peer->hs; incoming connections wait in the
 * slots of ctx->in until their hello proves a rank. Both kinds sit in the
 * context's epoll set and become the peer's data connection in place.
 */
#include "transports/tcp/tcp.h"

#include <endian.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "util/log.h"
#include "util/sha256.h"
#include "util/time.h"

/* Outcomes of moving one handshake step. */
enum { HS_AGAIN = 0, HS_DONE = 1, HS_EOF = -1, HS_ERROR = -2 };

/* The first dropped connection is a warning; repeats (retries, scanners) are debug. */
#define hs_drop_log(ctx, ...)                                                     \
    do {                                                                          \
        int hs_level_ = (ctx)->dropped++ ? CHORUS_LOG_DEBUG : CHORUS_LOG_WARN;    \
        chorus_log(hs_level_, __VA_ARGS__);                                       \
    } while (0)

/* ---- Wire codecs: no sockets, no logging (tests/fuzz/ calls them directly) ---- */

void tl_tcp_hello_encode(tl_tcp_hello_t *wire, uint32_t from, uint32_t to, uint32_t lane,
                         const uint8_t mac[TL_TCP_MAC_BYTES])
{
    wire->magic = htole32(TL_TCP_HELLO_MAGIC);
    wire->version = htole32(TL_TCP_VERSION);
    wire->from_rank = htole32(from);
    wire->to_rank = htole32(to);
    wire->lane = htole32(lane);
    memcpy(wire->mac, mac, TL_TCP_MAC_BYTES);
}

chorus_status_t tl_tcp_hello_decode(const void *buf, size_t len, int rank, int size,
                                    uint32_t *from_p, uint32_t *lane_p,
                                    uint8_t mac_p[TL_TCP_MAC_BYTES], char *why, size_t why_len)
{
    tl_tcp_hello_t hello;
    uint32_t from, to, lane;

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
    lane = le32toh(hello.lane);
    /* `from` indexes the peers: it must be another rank of this context. */
    if (to != (uint32_t)rank || from == (uint32_t)rank || from >= (uint32_t)size) {
        snprintf(why, why_len, "a hello from rank %u to rank %u: this is rank %d of %d", from,
                 to, rank, size);
        return CHORUS_ERR_PROTOCOL;
    }
    if (lane >= TL_TCP_STREAMS_MAX) {
        snprintf(why, why_len, "a hello from rank %u for lane %u: lanes are below %d", from,
                 lane, TL_TCP_STREAMS_MAX);
        return CHORUS_ERR_PROTOCOL;
    }
    *from_p = from;
    *lane_p = lane;
    memcpy(mac_p, hello.mac, TL_TCP_MAC_BYTES);
    return CHORUS_OK;
}

static int addr_terminated(const tl_tcp_addr_t *addr)
{
    return memchr(addr->host, '\0', sizeof(addr->host)) != NULL &&
           memchr(addr->port, '\0', sizeof(addr->port)) != NULL;
}

static int all_zero(const void *buf, size_t len)
{
    const unsigned char *b = buf;

    for (size_t i = 0; i < len; i++)
        if (b[i] != 0)
            return 0;
    return 1;
}

chorus_status_t tl_tcp_blob_decode(const void *buf, size_t len, tl_tcp_blob_t *blob_p)
{
    tl_tcp_blob_t blob;

    if (len < sizeof(blob))
        return CHORUS_ERR_INVALID_ARG;
    memcpy(&blob, buf, sizeof(blob));
    if (blob.count < 1 || blob.count > TL_TCP_ADDRS_MAX || blob.streams < 1 ||
        blob.streams > TL_TCP_STREAMS_MAX || !all_zero(blob.zero, sizeof(blob.zero)))
        return CHORUS_ERR_INVALID_ARG;
    for (int i = 0; i < TL_TCP_ADDRS_MAX; i++) {
        if (i < blob.count ? !addr_terminated(&blob.addr[i])
                           : !all_zero(&blob.addr[i], sizeof(blob.addr[i])))
            return CHORUS_ERR_INVALID_ARG;
    }
    *blob_p = blob;
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

/* ---- Addresses ---------------------------------------------------------------- */

/*
 * CHORUS_TCP_IFACES=auto: a peer's first address (its bootstrap's) stays;
 * a further one stays when it is on a network this machine is on.
 */
static void peer_keep_on_link(const tl_ctx_t *ctx, const struct ifaddrs *ifas,
                              tl_tcp_peer_t *peer)
{
    int kept = 1;

    for (int i = 1; i < peer->naddrs; i++) {
        if (!tl_tcp_iface_on_link(ifas, (const struct sockaddr *)&peer->sa[i])) {
            chorus_debug("rank %d: tcp: address %d of rank %d is on no network of this "
                         "machine: its streams go to the others", ctx->rank, i, peer->rank);
            continue;
        }
        peer->sa[kept] = peer->sa[i];
        peer->salen[kept++] = peer->salen[i];
    }
    peer->naddrs = kept;
}

chorus_status_t tl_tcp_set_peers(tl_ctx_t *ctx, const void *addrs)
{
    struct ifaddrs *ifas = NULL;
    int find;

    if (ctx == NULL || addrs == NULL || ctx->peers_set || ctx->fatal != CHORUS_OK) {
        chorus_error("tcp: set_peers: invalid context or addresses, or called twice");
        return CHORUS_ERR_INVALID_ARG;
    }
    find = tl_tcp_ifaces_auto(&ctx->cfg);
    if (find && getifaddrs(&ifas) != 0) {
        chorus_warn("rank %d: tcp: CHORUS_TCP_IFACES=auto: getifaddrs failed (%m): every "
                    "peer's streams go to its first address", ctx->rank);
        ifas = NULL;
    }
    for (int r = 0; r < ctx->size; r++) {
        tl_tcp_peer_t *peer = &ctx->peers[r];
        tl_tcp_blob_t blob;

        if (r == ctx->rank)
            continue;
        if (tl_tcp_blob_decode((const char *)addrs + (size_t)r * TL_ADDR_MAX, TL_ADDR_MAX,
                               &blob) != CHORUS_OK) {
            chorus_error("rank %d: tcp: the address blob of rank %d is malformed", ctx->rank, r);
            freeifaddrs(ifas);
            return CHORUS_ERR_INVALID_ARG;
        }
        for (int i = 0; i < blob.count; i++) {
            int rc = tl_tcp_addr_resolve(&blob.addr[i], &peer->sa[i], &peer->salen[i]);

            if (rc != 0) {
                chorus_error("rank %d: tcp: address '%s' port '%s' of rank %d is invalid: %s",
                             ctx->rank, blob.addr[i].host, blob.addr[i].port, r,
                             gai_strerror(rc));
                freeifaddrs(ifas);
                return CHORUS_ERR_INVALID_ARG;
            }
        }
        peer->naddrs = blob.count;
        if (find)
            peer_keep_on_link(ctx, ifas, peer);
        /* Both ends must take a lane: the fewer of the two counts. */
        peer->nlanes = blob.streams < ctx->streams ? blob.streams : ctx->streams;
    }
    freeifaddrs(ifas);
    ctx->peers_set = 1;
    return CHORUS_OK;
}

/* ---- Shared steps ------------------------------------------------------------- */

static void hs_mac(const tl_ctx_t *ctx, const char *label, const uint8_t *nonce, uint32_t from,
                   uint32_t to, uint32_t lane, uint8_t out[TL_TCP_MAC_BYTES])
{
    uint8_t msg[3 + TL_TCP_NONCE_BYTES + 12];
    uint32_t from_le = htole32(from), to_le = htole32(to), lane_le = htole32(lane);
    size_t len = 0;

    if (label != NULL) {
        memcpy(msg, label, 3);
        len = 3;
    }
    memcpy(msg + len, nonce, TL_TCP_NONCE_BYTES);
    len += TL_TCP_NONCE_BYTES;
    memcpy(msg + len, &from_le, 4);
    memcpy(msg + len + 4, &to_le, 4);
    memcpy(msg + len + 8, &lane_le, 4);
    len += 12;
    chorus__hmac_sha256(ctx->auth_key, ctx->auth_key_len, msg, len, out);
}

static void hs_reject_bytes(uint8_t out[TL_TCP_MAC_BYTES])
{
    memset(out, 0, TL_TCP_MAC_BYTES);
    memcpy(out, TL_TCP_REJECT, sizeof(TL_TCP_REJECT) - 1);
}

/* Move the rest of one step's bytes. */
static int hs_io(tl_tcp_hs_t *hs, void *buf, size_t len, int writing)
{
    while (hs->done < len) {
        ssize_t r = writing ? send(hs->fd, (char *)buf + hs->done, len - hs->done, MSG_NOSIGNAL)
                            : recv(hs->fd, (char *)buf + hs->done, len - hs->done, 0);

        if (r > 0) {
            hs->done += (size_t)r;
            continue;
        }
        if (r == 0)
            return HS_EOF;
        if (errno == EINTR)
            continue;
        return errno == EAGAIN || errno == EWOULDBLOCK ? HS_AGAIN : HS_ERROR;
    }
    hs->done = 0;
    return HS_DONE;
}

static int hs_watch(tl_ctx_t *ctx, tl_tcp_hs_t *hs, int op, uint64_t tag, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.u64 = tag};

    if (epoll_ctl(ctx->epfd, op, hs->fd, &ev) < 0) {
        chorus_error("rank %d: tcp: epoll_ctl for a connection being set up failed: %m",
                     ctx->rank);
        return -1;
    }
    return 0;
}

void tl_tcp_hs_close(tl_tcp_hs_t *hs)
{
    if (hs->fd >= 0)
        close(hs->fd); /* also leaves the epoll set */
    hs->fd = -1;
    hs->done = 0;
    hs->state = TL_TCP_HS_NONE;
}

/* Wake progress by `when` (the timer keeps the earliest deadline). */
static void timer_arm(tl_ctx_t *ctx, double when)
{
    struct itimerspec its = {{0, 0}, {0, 0}};

    if (ctx->timer_at > 0 && ctx->timer_at <= when)
        return;
    its.it_value.tv_sec = (time_t)when;
    its.it_value.tv_nsec = (long)((when - (double)(time_t)when) * 1e9);
    if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0)
        its.it_value.tv_nsec = 1;
    if (timerfd_settime(ctx->timer_fd, TFD_TIMER_ABSTIME, &its, NULL) < 0) {
        chorus_error("rank %d: tcp: timerfd_settime failed: %m", ctx->rank);
        return;
    }
    ctx->timer_at = when;
}

/* An authenticated connection becomes the peer's data connection. */
static int hs_established(tl_ctx_t *ctx, tl_tcp_peer_t *peer, tl_tcp_hs_t *hs)
{
    int fd = hs->fd;

    chorus_debug("rank %d: tcp: connected to peer %d", ctx->rank, peer->rank);
    hs->fd = -1;
    hs->state = TL_TCP_HS_NONE;
    peer->accepting = 0;
    return tl_tcp_peer_attach(ctx, peer, fd);
}

/* ---- Our own connection --------------------------------------------------------- */

static int hs_gone(tl_ctx_t *ctx, tl_tcp_peer_t *peer, const char *what, int err)
{
    chorus_warn("rank %d: tcp: peer %d is gone (%s: %s)", ctx->rank, peer->rank, what,
                err ? strerror(err) : "closed during the handshake");
    return tl_tcp_peer_fail(ctx, peer, CHORUS_ERR_PEER_FAILED);
}

static int hs_lost(tl_ctx_t *ctx, tl_tcp_peer_t *peer, tl_tcp_hs_t *hs, const char *what,
                   int err);

/* Seconds a lane waits for a further address of a peer to answer before it dials the first. */
#define TL_TCP_LANE_TRY_S 3.0

static double lane_try_s(double timeout_s)
{
    return timeout_s / 2 < TL_TCP_LANE_TRY_S ? timeout_s / 2 : TL_TCP_LANE_TRY_S;
}

/*
 * A socket for lane's connection to the peer's address a on its way: 0, or
 * the completions of failing the peer.
 */
static int hs_open(tl_ctx_t *ctx, tl_tcp_peer_t *peer, tl_tcp_hs_t *hs, int lane, int a)
{
    hs->fd = socket(peer->sa[a].ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (hs->fd < 0) {
        chorus_error("rank %d: tcp: socket() for peer %d failed: %m", ctx->rank, peer->rank);
        return tl_tcp_peer_fail(ctx, peer, CHORUS_ERR_SYSTEM);
    }
    tl_tcp_sock_tune(hs->fd);
    hs->rank = peer->rank;
    hs->lane = lane;
    hs->done = 0;
    hs->state = TL_TCP_HS_CONNECTING;
    /* Every peer listened before its address was published: a refusal means it is gone
       (at its first address; a further one may not be reachable from here). */
    if (connect(hs->fd, (struct sockaddr *)&peer->sa[a], peer->salen[a]) < 0 &&
        errno != EINPROGRESS)
        return hs_lost(ctx, peer, hs, "connect", errno);
    if (hs_watch(ctx, hs, EPOLL_CTL_ADD, TL_TCP_EV_LANE(TL_TCP_EV_OUT, peer->rank, lane),
                 EPOLLOUT) < 0)
        return tl_tcp_peer_fail(ctx, peer, CHORUS_ERR_SYSTEM);
    return 0;
}

int tl_tcp_connect(tl_ctx_t *ctx, tl_tcp_peer_t *peer)
{
    int n;

    peer->state = TL_TCP_PEER_CONNECTING;
    peer->deadline = chorus__now() + ctx->timeout_s;
    n = hs_open(ctx, peer, &peer->hs, 0, 0);
    if (peer->state == TL_TCP_PEER_CLOSED)
        return n;
    timer_arm(ctx, peer->deadline);
    chorus_debug("rank %d: tcp: connecting to peer %d", ctx->rank, peer->rank);
    return 0;
}

/* Dial lane i at the peer's address a, to be up within the timeout. */
static int lane_dial(tl_ctx_t *ctx, tl_tcp_peer_t *peer, int i, int a)
{
    tl_tcp_lane_t *lane = &peer->lanes[i];
    double now = chorus__now();
    int n;

    lane->addr = a;
    lane->deadline = now + ctx->timeout_s;
    lane->try_until = a != 0 ? now + lane_try_s(ctx->timeout_s) : 0;
    n = hs_open(ctx, peer, &lane->hs, i, a);
    if (peer->state == TL_TCP_PEER_UP)
        timer_arm(ctx, a != 0 ? lane->try_until : lane->deadline);
    return n;
}

/*
 * A lane's handshake failed. At a further address of the peer (one that
 * CHORUS_TCP_IFACES=auto or a list published) that is no proof the peer is
 * gone, only that this address is not the way to it from here: the lane is
 * dialled again at the first address, which the connection reached. At the
 * first address, or for the connection itself, the peer is gone.
 */
static int hs_lost(tl_ctx_t *ctx, tl_tcp_peer_t *peer, tl_tcp_hs_t *hs, const char *what,
                   int err)
{
    int i = hs->lane;

    if (i == 0 || peer->lanes[i].addr == 0 || peer->state != TL_TCP_PEER_UP)
        return hs_gone(ctx, peer, what, err);
    chorus_warn("rank %d: tcp: lane %d to peer %d: its address %d failed (%s: %s); dialling "
                "its first address instead", ctx->rank, i, peer->rank, peer->lanes[i].addr,
                what, err ? strerror(err) : "closed during the handshake");
    tl_tcp_hs_close(hs);
    ctx->stats.lane_fallbacks++;
    return lane_dial(ctx, peer, i, 0);
}

int tl_tcp_lanes_open(tl_ctx_t *ctx, tl_tcp_peer_t *peer)
{
    int n = 0;

    for (int i = 1; i < peer->nlanes && peer->state == TL_TCP_PEER_UP; i++) {
        tl_tcp_lane_t *lane = &peer->lanes[i];

        if (lane->fd >= 0 || lane->hs.fd >= 0)
            continue;
        /* The lanes go to the peer's addresses in turn. */
        n += lane_dial(ctx, peer, i, i % peer->naddrs);
    }
    return n;
}

/* The acceptor's 32-byte reply to our hello is in hs->reply. */
static int hs_out_reply(tl_ctx_t *ctx, tl_tcp_peer_t *peer, tl_tcp_hs_t *hs)
{
    uint8_t ack[TL_TCP_MAC_BYTES], yield[TL_TCP_MAC_BYTES], reject[TL_TCP_MAC_BYTES];
    uint32_t me = (uint32_t)ctx->rank, them = (uint32_t)peer->rank, lane = (uint32_t)hs->lane;

    hs_mac(ctx, "ack", hs->nonce, me, them, lane, ack);
    hs_mac(ctx, "yld", hs->nonce, me, them, lane, yield);
    hs_reject_bytes(reject);
    if (chorus__mac_equal(ack, hs->reply, sizeof(ack)) && lane > 0) {
        int fd = hs->fd;

        hs->fd = -1;
        hs->state = TL_TCP_HS_NONE;
        return tl_tcp_lane_attach(ctx, peer, (int)lane, fd);
    }
    if (chorus__mac_equal(ack, hs->reply, sizeof(ack))) {
        /* This rank's connection survived: the lanes are its to open. */
        int n = hs_established(ctx, peer, hs);

        return n + tl_tcp_lanes_open(ctx, peer);
    }
    if (chorus__mac_equal(yield, hs->reply, sizeof(yield)) && lane == 0) {
        /* Both connected at once and the peer's connection wins: it is on its way. */
        chorus_debug("rank %d: tcp: peer %d connects to this rank as well; using its "
                     "connection", ctx->rank, peer->rank);
        tl_tcp_hs_close(hs);
        peer->state = TL_TCP_PEER_WAITING;
        return 0;
    }
    /* Something else listens at a further address of the peer's, here. */
    if (lane > 0 && peer->lanes[lane].addr != 0)
        return hs_lost(ctx, peer, hs, "the listener did not prove the job key", 0);
    if (memcmp(reject, hs->reply, sizeof(reject)) == 0)
        chorus_error("rank %d: tcp: peer %d refused this rank's hello (another job key or "
                     "another version of chorus?)", ctx->rank, peer->rank);
    else
        chorus_error("rank %d: tcp: the listener at peer %d's address did not prove the job "
                     "key", ctx->rank, peer->rank);
    return tl_tcp_peer_fail(ctx, peer, CHORUS_ERR_AUTH);
}

int tl_tcp_hs_out_event(tl_ctx_t *ctx, tl_tcp_peer_t *peer, int lane)
{
    tl_tcp_hs_t *hs = lane == 0 ? &peer->hs : &peer->lanes[lane].hs;
    uint64_t tag = TL_TCP_EV_LANE(TL_TCP_EV_OUT, peer->rank, lane);
    uint8_t mac[TL_TCP_MAC_BYTES];
    int err = 0, r = HS_AGAIN;
    socklen_t len = sizeof(err);

    /* The connection itself while the peer connects; a lane once the peer is up. */
    if (peer->state != (lane == 0 ? TL_TCP_PEER_CONNECTING : TL_TCP_PEER_UP) || hs->fd < 0)
        return 0;
    switch (hs->state) {
    case TL_TCP_HS_CONNECTING:
        if (getsockopt(hs->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
            err = errno;
        if (err != 0)
            return hs_lost(ctx, peer, hs, "connect", err);
        hs->state = TL_TCP_HS_NONCE;
        if (hs_watch(ctx, hs, EPOLL_CTL_MOD, tag, EPOLLIN) < 0)
            return tl_tcp_peer_fail(ctx, peer, CHORUS_ERR_SYSTEM);
        /* fall through - the nonce may already be there */
    case TL_TCP_HS_NONCE:
        r = hs_io(hs, hs->nonce, sizeof(hs->nonce), 0);
        if (r != HS_DONE)
            break;
        hs_mac(ctx, NULL, hs->nonce, (uint32_t)ctx->rank, (uint32_t)peer->rank,
               (uint32_t)lane, mac);
        tl_tcp_hello_encode(&hs->hello, (uint32_t)ctx->rank, (uint32_t)peer->rank,
                            (uint32_t)lane, mac);
        hs->state = TL_TCP_HS_HELLO;
        /* fall through */
    case TL_TCP_HS_HELLO:
        r = hs_io(hs, &hs->hello, sizeof(hs->hello), 1);
        if (r == HS_AGAIN)
            return hs_watch(ctx, hs, EPOLL_CTL_MOD, tag, EPOLLOUT) < 0
                       ? tl_tcp_peer_fail(ctx, peer, CHORUS_ERR_SYSTEM) : 0;
        if (r != HS_DONE)
            break;
        hs->state = TL_TCP_HS_REPLY;
        if (hs_watch(ctx, hs, EPOLL_CTL_MOD, tag, EPOLLIN) < 0)
            return tl_tcp_peer_fail(ctx, peer, CHORUS_ERR_SYSTEM);
        /* fall through */
    case TL_TCP_HS_REPLY:
        r = hs_io(hs, hs->reply, sizeof(hs->reply), 0);
        if (r == HS_DONE)
            return hs_out_reply(ctx, peer, hs);
        break;
    default:
        return 0;
    }
    if (r == HS_EOF || r == HS_ERROR)
        return hs_lost(ctx, peer, hs, "handshake", r == HS_ERROR ? errno : 0);
    return 0;
}

/* ---- Connections from others ----------------------------------------------------- */

/* The reply to a genuine hello from `from` arriving in slot: ack, or yield to our own. */
static void hs_in_decide(tl_ctx_t *ctx, tl_tcp_hs_t *hs, int slot, uint32_t from)
{
    tl_tcp_peer_t *peer = &ctx->peers[from];

    hs->rank = (int)from;
    hs->lane = 0;
    if (peer->state == TL_TCP_PEER_CONNECTING && ctx->rank > (int)from) {
        /* Both connect at once: the higher rank's connection survives. */
        hs_mac(ctx, "yld", hs->nonce, from, (uint32_t)ctx->rank, 0, hs->reply);
        hs->accept = 0;
        ctx->stats.collisions++;
        return;
    }
    if (peer->state == TL_TCP_PEER_CONNECTING) {
        /* Ours loses: the peer yields to this one; the queued sends go on it. */
        tl_tcp_hs_close(&peer->hs);
        ctx->stats.collisions++;
    } else if (peer->state == TL_TCP_PEER_IDLE) {
        peer->deadline = chorus__now() + ctx->timeout_s;
    }
    peer->state = TL_TCP_PEER_WAITING;
    peer->accepting = slot + 1;
    hs_mac(ctx, "ack", hs->nonce, from, (uint32_t)ctx->rank, 0, hs->reply);
    hs->accept = 1;
}

/*
 * A genuine hello for one of the peer's lanes: its connection must be up and
 * the lane one both ranks take and not taken yet. Anything else closes it,
 * and the peer, which asked for the lane, fails.
 */
static int hs_in_lane(tl_ctx_t *ctx, tl_tcp_hs_t *hs, tl_tcp_peer_t *peer, uint32_t lane)
{
    if (peer->state != TL_TCP_PEER_UP || (int)lane >= peer->nlanes ||
        peer->lanes[lane].fd >= 0) {
        chorus_debug("rank %d: tcp: a connection from peer %d for lane %u, which it cannot "
                     "have now; closing it", ctx->rank, peer->rank, lane);
        return -1;
    }
    hs->rank = peer->rank;
    hs->lane = (int)lane;
    hs_mac(ctx, "ack", hs->nonce, (uint32_t)peer->rank, (uint32_t)ctx->rank, lane, hs->reply);
    hs->accept = 1;
    return 0;
}

/* Check the hello in hs; 0 with the reply set, or -1 to close without a word. */
static int hs_in_hello(tl_ctx_t *ctx, tl_tcp_hs_t *hs, int slot)
{
    uint8_t expect[TL_TCP_MAC_BYTES], mac[TL_TCP_MAC_BYTES];
    tl_tcp_peer_t *peer;
    char why[128];
    uint32_t from, lane;

    hs->accept = 0;
    hs_reject_bytes(hs->reply);
    if (tl_tcp_hello_decode(&hs->hello, sizeof(hs->hello), ctx->rank, ctx->size, &from, &lane,
                            mac, why, sizeof(why)) != CHORUS_OK) {
        hs_drop_log(ctx, "rank %d: tcp: dropping %s", ctx->rank, why);
        return 0;
    }
    hs_mac(ctx, NULL, hs->nonce, from, (uint32_t)ctx->rank, lane, expect);
    if (!chorus__mac_equal(expect, mac, sizeof(expect))) {
        hs_drop_log(ctx, "rank %d: tcp: a connection claiming to be rank %u failed "
                    "authentication (wrong job key?); dropping it", ctx->rank, from);
        return 0;
    }
    peer = &ctx->peers[from];
    if (peer->state == TL_TCP_PEER_CLOSED) {
        chorus_debug("rank %d: tcp: a connection from peer %u, which failed already; "
                     "closing it", ctx->rank, from);
        return -1;
    }
    if (lane > 0)
        return hs_in_lane(ctx, hs, peer, lane);
    if (peer->state == TL_TCP_PEER_UP || peer->accepting) {
        /* What is left of a collision: the peer has given this attempt up already. */
        chorus_debug("rank %d: tcp: a second connection from peer %u; closing it", ctx->rank,
                     from);
        return -1;
    }
    hs_in_decide(ctx, hs, slot, from);
    return 0;
}

/* The reply is written: an ack makes the connection the peer's; the others close. */
static int hs_in_replied(tl_ctx_t *ctx, tl_tcp_hs_t *hs)
{
    int fd = hs->fd;

    if (!hs->accept) {
        tl_tcp_hs_close(hs);
        return 0;
    }
    if (hs->lane == 0)
        return hs_established(ctx, &ctx->peers[hs->rank], hs);
    hs->fd = -1;
    hs->state = TL_TCP_HS_NONE;
    hs->accept = 0;
    return tl_tcp_lane_attach(ctx, &ctx->peers[hs->rank], hs->lane, fd);
}

/* An incoming connection ended early; the peer it proved to be, if any, is gone. */
static int hs_in_lost(tl_ctx_t *ctx, tl_tcp_hs_t *hs, int err)
{
    if (hs->accept && hs->lane > 0 && ctx->peers[hs->rank].state == TL_TCP_PEER_UP) {
        tl_tcp_hs_close(hs);
        return hs_gone(ctx, &ctx->peers[hs->rank], "a lane's handshake", err);
    }
    if (hs->accept && hs->rank >= 0 && ctx->peers[hs->rank].accepting) {
        tl_tcp_peer_t *peer = &ctx->peers[hs->rank];

        peer->accepting = 0;
        tl_tcp_hs_close(hs);
        return hs_gone(ctx, peer, "handshake", err);
    }
    chorus_debug("rank %d: tcp: an incoming connection closed during the handshake",
                 ctx->rank);
    tl_tcp_hs_close(hs);
    return 0;
}

int tl_tcp_hs_in_event(tl_ctx_t *ctx, int slot)
{
    tl_tcp_hs_t *hs = &ctx->in[slot];
    uint64_t tag = TL_TCP_EV(TL_TCP_EV_IN, slot);
    int r = HS_AGAIN;

    if (hs->fd < 0)
        return 0;
    switch (hs->state) {
    case TL_TCP_HS_NONCE:
        r = hs_io(hs, hs->nonce, sizeof(hs->nonce), 1);
        if (r != HS_DONE)
            break;
        hs->state = TL_TCP_HS_HELLO;
        if (hs_watch(ctx, hs, EPOLL_CTL_MOD, tag, EPOLLIN) < 0)
            return hs_in_lost(ctx, hs, 0);
        /* fall through */
    case TL_TCP_HS_HELLO:
        r = hs_io(hs, &hs->hello, sizeof(hs->hello), 0);
        if (r != HS_DONE)
            break;
        if (hs_in_hello(ctx, hs, slot) < 0) {
            tl_tcp_hs_close(hs);
            return 0;
        }
        hs->state = TL_TCP_HS_REPLY;
        /* fall through */
    case TL_TCP_HS_REPLY:
        r = hs_io(hs, hs->reply, sizeof(hs->reply), 1);
        if (r == HS_DONE)
            return hs_in_replied(ctx, hs);
        break;
    default:
        return 0;
    }
    if (r == HS_EOF || r == HS_ERROR)
        return hs_in_lost(ctx, hs, r == HS_ERROR ? errno : 0);
    if (hs->state != TL_TCP_HS_HELLO && hs_watch(ctx, hs, EPOLL_CTL_MOD, tag, EPOLLOUT) < 0)
        return hs_in_lost(ctx, hs, 0);
    return 0;
}

/*
 * A slot for a new incoming connection. When all are taken, the oldest one
 * that has not proven a rank yields: a flood of connections may delay real
 * peers but never displaces one that authenticated.
 */
static int hs_in_slot(tl_ctx_t *ctx)
{
    int oldest = -1;

    for (int i = 0; i < ctx->in_max; i++) {
        tl_tcp_hs_t *hs = &ctx->in[i];

        if (hs->fd < 0)
            return i;
        if (hs->rank < 0 && (oldest < 0 || hs->deadline < ctx->in[oldest].deadline))
            oldest = i;
    }
    if (oldest < 0)
        return -1;
    hs_drop_log(ctx, "rank %d: tcp: %d connections wait for authentication; dropping the "
                "oldest", ctx->rank, ctx->in_max);
    tl_tcp_hs_close(&ctx->in[oldest]);
    return oldest;
}

int tl_tcp_hs_accept(tl_ctx_t *ctx, int listener)
{
    int n = 0;

    while (ctx->listen_fd[listener] >= 0) {
        int fd = accept4(ctx->listen_fd[listener], NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        tl_tcp_hs_t *hs;
        int slot;

        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                hs_drop_log(ctx, "rank %d: tcp: accept failed: %m", ctx->rank);
            return n;
        }
        slot = hs_in_slot(ctx);
        if (slot < 0) {
            close(fd);
            continue;
        }
        hs = &ctx->in[slot];
        memset(hs, 0, sizeof(*hs));
        hs->fd = fd;
        hs->state = TL_TCP_HS_NONCE;
        hs->rank = -1;
        hs->lane = 0;
        hs->deadline = chorus__now() + ctx->timeout_s;
        tl_tcp_sock_tune(fd);
        if (chorus__random_bytes(hs->nonce, sizeof(hs->nonce)) != 0 ||
            hs_watch(ctx, hs, EPOLL_CTL_ADD, TL_TCP_EV(TL_TCP_EV_IN, slot), EPOLLOUT) < 0) {
            chorus_error("rank %d: tcp: cannot take an incoming connection", ctx->rank);
            tl_tcp_hs_close(hs);
            continue;
        }
        timer_arm(ctx, hs->deadline);
        n += tl_tcp_hs_in_event(ctx, slot);
    }
    return n;
}

void tl_tcp_hs_close_all(tl_ctx_t *ctx)
{
    for (int i = 0; i < ctx->in_max; i++)
        tl_tcp_hs_close(&ctx->in[i]);
}

/* ---- Deadlines ------------------------------------------------------------------- */

static int hs_expire_peer(tl_ctx_t *ctx, tl_tcp_peer_t *peer)
{
    chorus_error("rank %d: tcp: no authenticated connection to peer %d within %g s",
                 ctx->rank, peer->rank, ctx->timeout_s);
    return tl_tcp_peer_fail(ctx, peer, CHORUS_ERR_TIMEOUT);
}

/*
 * Lanes this rank opens must be up by their deadline, or the peer fails; a
 * further address that has not answered (the connect still on its way) by
 * its try gives way to the first.
 */
static int hs_timer_lanes(tl_ctx_t *ctx, tl_tcp_peer_t *peer, double now, double *next_p)
{
    for (int i = 1; i < peer->nlanes && peer->state == TL_TCP_PEER_UP; i++) {
        tl_tcp_lane_t *lane = &peer->lanes[i];

        if (lane->hs.fd < 0)
            continue;
        if (lane->addr != 0 && lane->hs.state == TL_TCP_HS_CONNECTING) {
            if (lane->try_until <= now) {
                int n = hs_lost(ctx, peer, &lane->hs, "connect", ETIMEDOUT);

                if (peer->state != TL_TCP_PEER_UP)
                    return n;
                continue;   /* dialled again, with deadlines of its own */
            } else if (*next_p == 0 || lane->try_until < *next_p) {
                *next_p = lane->try_until;
            }
        }
        if (lane->deadline <= now) {
            chorus_error("rank %d: tcp: lane %d to peer %d not up within %g s", ctx->rank, i,
                         peer->rank, ctx->timeout_s);
            return tl_tcp_peer_fail(ctx, peer, CHORUS_ERR_TIMEOUT);
        }
        if (*next_p == 0 || lane->deadline < *next_p)
            *next_p = lane->deadline;
    }
    return 0;
}

int tl_tcp_hs_timer(tl_ctx_t *ctx)
{
    uint64_t expirations;
    double now = chorus__now(), next = 0;
    int n = 0;

    if (read(ctx->timer_fd, &expirations, sizeof(expirations)) < 0 && errno != EAGAIN)
        chorus_debug("rank %d: tcp: reading the timerfd failed: %m", ctx->rank);
    ctx->timer_at = 0;
    for (int r = 0; r < ctx->size; r++) {
        tl_tcp_peer_t *peer = &ctx->peers[r];

        if (peer->state == TL_TCP_PEER_UP) {
            n += hs_timer_lanes(ctx, peer, now, &next);
            continue;
        }
        if (peer->state != TL_TCP_PEER_CONNECTING && peer->state != TL_TCP_PEER_WAITING)
            continue;
        if (peer->deadline <= now)
            n += hs_expire_peer(ctx, peer);
        else if (next == 0 || peer->deadline < next)
            next = peer->deadline;
    }
    for (int i = 0; i < ctx->in_max; i++) {
        tl_tcp_hs_t *hs = &ctx->in[i];

        if (hs->fd < 0 || hs->accept)
            continue; /* an accepted one goes with its peer's deadline */
        if (hs->deadline <= now) {
            hs_drop_log(ctx, "rank %d: tcp: an incoming connection did not authenticate "
                        "within %g s; dropping it", ctx->rank, ctx->timeout_s);
            tl_tcp_hs_close(hs);
        } else if (next == 0 || hs->deadline < next) {
            next = hs->deadline;
        }
    }
    if (next > 0)
        timer_arm(ctx, next);
    return n;
}
