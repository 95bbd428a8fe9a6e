/*
 * TCP transport: a peer's lanes, the connections beside its own that carry
 * payload fragments (tcp.h, "Streams"). Lane 0 is the connection itself and
 * keeps its reader and writer (tcp_conn.c); lanes 1.. read and write RDATA
 * frames only, with the small reader and writer here. Which lane takes a
 * fragment is tcp_stripe.c's choice, made here from each socket's backlog.
 */
#include "transports/tcp/tcp.h"

#include <errno.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include "util/log.h"
#include "util/time.h"

/* Reads per lane and progress call, as for the connection itself. */
#define LANE_READ_ROUNDS 32

static int lane_fd(const tl_tcp_peer_t *peer, int lane)
{
    return lane == 0 ? peer->fd : peer->lanes[lane].fd;
}

static const tl_tcp_tx_t *lane_tx(const tl_tcp_peer_t *peer, int lane)
{
    return lane == 0 ? &peer->tx : &peer->lanes[lane].tx;
}

/* Bytes a lane's socket holds that the peer has not acknowledged (0 when unknown). */
static uint64_t lane_held(const tl_tcp_peer_t *peer, int lane)
{
    int queued = 0;

    /* Sent and not acknowledged, or not sent yet: what the link still has to carry. */
    if (ioctl(lane_fd(peer, lane), SIOCOUTQ, &queued) == 0 && queued > 0)
        return (uint64_t)queued;
    return 0;
}

/* Bytes a lane's socket took and has not sent yet. */
static uint64_t lane_not_sent(const tl_tcp_peer_t *peer, int lane)
{
    int queued = 0;

    if (ioctl(lane_fd(peer, lane), SIOCOUTQNSD, &queued) == 0 && queued > 0)
        return (uint64_t)queued;
    return 0;
}

/* tl_tcp_lane_room once the lane's rate is sampled. */
static int lane_room_sampled(tl_tcp_peer_t *peer, int lane)
{
    tl_tcp_lane_t *l = &peer->lanes[lane];
    int fd = lane_fd(peer, lane);
    uint32_t want = tl_tcp_stripe_queue(&l->rate);

    if (fd < 0 || l->queue_refused)
        return 1;
    /* A bound follows the rate by quarters, not every wobble: each change is a call. */
    if (l->queue == 0 || want > l->queue + l->queue / 4 || want < l->queue - l->queue / 4) {
        int v = (int)want;

        if (setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &v, sizeof(v)) != 0) {
            chorus_debug("setsockopt(TCP_NOTSENT_LOWAT) on fd %d failed: %m; its send queue "
                         "has no bound", fd);
            l->queue_refused = 1;
            return 1;
        }
        l->queue = want;
    }
    return lane_not_sent(peer, lane) < l->queue;
}

int tl_tcp_lane_room(tl_tcp_peer_t *peer, int lane)
{
    /* Sampled here: a connection without lanes is never looked at by a pick. */
    if (lane_fd(peer, lane) >= 0)
        tl_tcp_rate_sample(&peer->lanes[lane].rate, chorus__now(), lane_held(peer, lane));
    return lane_room_sampled(peer, lane);
}

/* What of the frame a lane is writing its socket has not taken yet. */
static uint64_t lane_unsent(const tl_tcp_peer_t *peer, int lane)
{
    const tl_tcp_tx_t *tx = lane_tx(peer, lane);

    return tx->busy ? sizeof(tl_tcp_hdr_t) + tx->len - tx->off : 0;
}

/*
 * The lane that would deliver frag bytes first: of the first ones the
 * context deals to (a tuner's bound, tl_ops_t streams), those up.
 */
static int lane_pick(tl_ctx_t *ctx, tl_tcp_peer_t *peer, size_t frag)
{
    tl_tcp_rate_t rates[TL_TCP_STREAMS_MAX];
    uint64_t backlog[TL_TCP_STREAMS_MAX];
    int up[TL_TCP_STREAMS_MAX];
    int use = atomic_load_explicit(&ctx->streams_use, memory_order_relaxed);
    double now = chorus__now();

    for (int i = 0; i < peer->nlanes; i++) {
        up[i] = lane_fd(peer, i) >= 0 && i < use;
        backlog[i] = up[i] ? tl_tcp_stripe_look(&peer->lanes[i].rate, now, lane_held(peer, i),
                                                lane_unsent(peer, i))
                           : 0;
        /* Its rate is sampled by the look: the bound follows it. */
        up[i] = up[i] && lane_room_sampled(peer, i);
        rates[i] = peer->lanes[i].rate;
    }
    return tl_tcp_stripe_pick(rates, backlog, up, peer->nlanes, frag, now);
}

int tl_tcp_lanes_eager_ok(tl_ctx_t *ctx, tl_tcp_peer_t *peer, size_t bytes)
{
    /* Less than lanes would share is not worth the rendezvous's round trip. */
    return peer->lanes_up <= 1 || bytes < TL_TCP_SHARED_FRAG_MIN ||
           lane_pick(ctx, peer, bytes) == 0;
}

/*
 * A fragment waits for a socket with room: the drain below its bound of
 * any lane it may be dealt to (the first `use`, all of them full) ends it.
 * A lane it may not go to is left out: its EPOLLOUT would fire at once.
 */
static int deal_waits_on(const tl_ctx_t *ctx, const tl_tcp_peer_t *peer, int lane)
{
    return peer->rdataq.head != NULL && peer->deal_to < 0 &&
           lane < atomic_load_explicit(&ctx->streams_use, memory_order_relaxed);
}

/*
 * One choice per fragment, and it stands until the lane takes it: choosing
 * again at every look could pass a fragment from lane to lane as their
 * backlogs drain, and leave it with none while no lane waits to write.
 */
int tl_tcp_lanes_write(tl_ctx_t *ctx, tl_tcp_peer_t *peer, int *moved_p)
{
    const size_t hdr = sizeof(tl_tcp_hdr_t);
    int n = 0;

    while (peer->fd >= 0) {
        for (int i = 1; i < peer->nlanes; i++) {
            tl_tcp_lane_t *lane = &peer->lanes[i];

            while (lane->fd >= 0 && lane->tx.busy) {
                ssize_t w = tl_tcp_tx_send(lane->fd, &lane->tx, &lane->rate);

                if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                    break;
                if (w < 0)
                    return n + tl_tcp_peer_lost(ctx, peer, "send on a lane", errno);
                if (lane->tx.off == hdr + lane->tx.len) {
                    n += tl_tcp_rdata_written(ctx, i, &lane->tx);
                    *moved_p = 1;
                }
            }
        }
        if (peer->rdataq.head == NULL)
            return n;
        if (peer->deal_to < 0) {
            const tl_req_t *req = peer->rdataq.head;
            size_t left = req->capacity - req->offset;

            peer->deal_to = lane_pick(ctx, peer, left < req->frag ? left : req->frag);
            if (peer->deal_to < 0)
                return n; /* no socket has room: EPOLLOUT is armed on all of them */
        }
        if (peer->deal_to == 0) {
            /* The connection's writer takes it, in turn with new messages. */
            *moved_p |= !peer->tx.busy;
            return n;
        }
        if (peer->lanes[peer->deal_to].tx.busy)
            return n; /* its EPOLLOUT is armed: the fragment waits for it */
        tl_tcp_rdata_take(peer, &peer->lanes[peer->deal_to].tx);
        peer->deal_to = -1;
        *moved_p = 1;
    }
    return n;
}

int tl_tcp_lanes_update_events(tl_ctx_t *ctx, tl_tcp_peer_t *peer)
{
    for (int i = 1; i < peer->nlanes; i++) {
        tl_tcp_lane_t *lane = &peer->lanes[i];
        uint32_t events = EPOLLIN | (lane->tx.busy || deal_waits_on(ctx, peer, i) ? EPOLLOUT : 0);
        struct epoll_event ev = {.events = events,
                                 .data.u64 = TL_TCP_EV_LANE(TL_TCP_EV_DATA, peer->rank, i)};

        if (lane->fd < 0 || lane->events == events)
            continue;
        if (epoll_ctl(ctx->epfd, EPOLL_CTL_MOD, lane->fd, &ev) < 0) {
            chorus_error("rank %d: tcp: epoll_ctl(mod) for lane %d of peer %d failed: %m",
                         ctx->rank, i, peer->rank);
            return tl_tcp_peer_fail(ctx, peer, CHORUS_ERR_SYSTEM);
        }
        lane->events = events;
    }
    return 0;
}

/* What a lane measured of its socket (its rate, and the queue bound set from it): anew. */
static void lane_meter_reset(tl_tcp_lane_t *lane)
{
    memset(&lane->rate, 0, sizeof(lane->rate));
    lane->queue = 0;
    lane->queue_refused = 0;
}

static void lane_rx_reset(tl_tcp_lane_t *lane)
{
    lane->rx_hdr_got = 0;
    lane->rx_got = 0;
    lane->rx_rec = NULL;
    lane->rx_dst = NULL;
}

int tl_tcp_lanes_close(tl_ctx_t *ctx, tl_tcp_peer_t *peer, chorus_status_t status)
{
    int n = 0;

    (void)ctx;
    for (int i = 1; i < TL_TCP_STREAMS_MAX; i++) {
        tl_tcp_lane_t *lane = &peer->lanes[i];

        tl_tcp_hs_close(&lane->hs);
        if (lane->fd >= 0)
            close(lane->fd); /* also leaves the epoll set */
        lane->fd = -1;
        lane->events = 0;
        n += tl_tcp_tx_fail(&lane->tx, status);
        lane_rx_reset(lane);
    }
    lane_meter_reset(&peer->lanes[0]);
    peer->lanes_up = 0;
    peer->deal_to = -1;
    return n;
}

int tl_tcp_lane_attach(tl_ctx_t *ctx, tl_tcp_peer_t *peer, int index, int fd)
{
    tl_tcp_lane_t *lane = &peer->lanes[index];
    struct epoll_event ev = {.events = EPOLLIN,
                             .data.u64 = TL_TCP_EV_LANE(TL_TCP_EV_DATA, peer->rank, index)};

    if (peer->state != TL_TCP_PEER_UP || lane->fd >= 0) {
        close(fd);
        if (peer->state != TL_TCP_PEER_UP)
            return 0;
        return tl_tcp_peer_protocol(ctx, peer, "a second connection for one lane");
    }
    /* The socket is in the epoll set already, as a handshake. */
    if (epoll_ctl(ctx->epfd, EPOLL_CTL_MOD, fd, &ev) < 0) {
        chorus_error("rank %d: tcp: epoll_ctl(mod) for lane %d of peer %d failed: %m",
                     ctx->rank, index, peer->rank);
        close(fd);
        return tl_tcp_peer_fail(ctx, peer, CHORUS_ERR_SYSTEM);
    }
    lane->fd = fd;
    lane->events = EPOLLIN;
    memset(&lane->tx, 0, sizeof(lane->tx));
    lane_meter_reset(lane);
    lane_rx_reset(lane);
    peer->lanes_up++;
    chorus_debug("rank %d: tcp: lane %d to peer %d is up (%d of %d)", ctx->rank, index,
                 peer->rank, peer->lanes_up, peer->nlanes);
    return tl_tcp_lane_read(ctx, peer, index) + tl_tcp_peer_write(ctx, peer);
}

/* A whole header arrived on a lane: only rendezvous data may come there. */
static int lane_header(tl_ctx_t *ctx, tl_tcp_peer_t *peer, tl_tcp_lane_t *lane)
{
    tl_tcp_frame_t *f = &lane->rx_frame;

    lane->rx_hdr_got = 0;
    lane->rx_got = 0;
    if (tl_tcp_header_check(&lane->rx_hdr, f) != CHORUS_OK || f->type != TL_TCP_FRAME_RDATA)
        return tl_tcp_peer_protocol(ctx, peer, "a frame other than rendezvous data on a lane");
    lane->rx_rec = tl_tcp_rdata_place(peer, f, &lane->rx_dst);
    if (lane->rx_rec == NULL)
        return tl_tcp_peer_protocol(ctx, peer, "rendezvous data for no message asked for, "
                                               "out of place, or twice");
    return 0;
}

/* got bytes were read into the iovecs lane_read set up. */
static int lane_consume(tl_ctx_t *ctx, tl_tcp_peer_t *peer, tl_tcp_lane_t *lane, size_t got)
{
    uint64_t left;
    size_t body;
    tl_tcp_ue_t *rec;
    int n;

    if (lane->rx_rec == NULL) {
        lane->rx_hdr_got += got;
        return lane->rx_hdr_got == sizeof(tl_tcp_hdr_t) ? lane_header(ctx, peer, lane) : 0;
    }
    left = lane->rx_frame.length - lane->rx_got;
    body = got < left ? got : (size_t)left;
    lane->rx_got += body;
    if (lane->rx_got < lane->rx_frame.length)
        return 0;
    rec = lane->rx_rec;
    lane->rx_rec = NULL;
    n = tl_tcp_rdata_arrived(ctx, peer, rec, lane->rx_frame.length);
    lane->rx_hdr_got = got - body;
    if (lane->rx_hdr_got == sizeof(tl_tcp_hdr_t))
        n += lane_header(ctx, peer, lane);
    return n;
}

int tl_tcp_lane_read(tl_ctx_t *ctx, tl_tcp_peer_t *peer, int index)
{
    tl_tcp_lane_t *lane = &peer->lanes[index];
    int n = 0;

    for (int round = 0; round < LANE_READ_ROUNDS && lane->fd >= 0; round++) {
        struct iovec iov[2];
        int cnt = 1;
        size_t want;
        ssize_t r;

        if (lane->rx_rec == NULL) {
            iov[0].iov_base = (char *)&lane->rx_hdr + lane->rx_hdr_got;
            iov[0].iov_len = sizeof(tl_tcp_hdr_t) - lane->rx_hdr_got;
        } else {
            /* The payload, and the next header with it. */
            iov[0].iov_base = lane->rx_dst + lane->rx_got;
            iov[0].iov_len = (size_t)(lane->rx_frame.length - lane->rx_got);
            iov[1].iov_base = &lane->rx_hdr;
            iov[1].iov_len = sizeof(tl_tcp_hdr_t);
            cnt = 2;
        }
        want = iov[0].iov_len + (cnt == 2 ? iov[1].iov_len : 0);
        r = readv(lane->fd, iov, cnt);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (r <= 0)
            return n + tl_tcp_peer_lost(ctx, peer, "receive on a lane", r < 0 ? errno : 0);
        n += lane_consume(ctx, peer, lane, (size_t)r);
        if ((size_t)r < want)
            break;
    }
    return n;
}
