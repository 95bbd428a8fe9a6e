/*
 * TCP transport data path: frame headers, the writer and reader of a
 * connection, and the posts.
 *
 * A connection carries a stream of frames (tcp.h). The writer sends one frame
 * at a time, picked by tl_tcp_tx_next (tcp_flow.c): credit returns and CTS
 * first, then rendezvous payload, then new messages in the order they were
 * posted. The reader is a small state machine: read a header, then read its
 * payload straight into the matching posted receive (no copy), into an
 * unexpected-message buffer paid for by the sender's credit, or into the
 * scratch sink when it does not fit.
 */
#include "transports/tcp/tcp.h"

#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "util/log.h"

/* Reads per peer and progress call, so that one busy peer cannot starve the others. */
#define TL_TCP_READ_ROUNDS 32

/* ---- Frame headers: no sockets, no logging (tests/fuzz/ calls them directly) ---- */

void tl_tcp_header_encode(tl_tcp_hdr_t *wire, const tl_tcp_frame_t *frame)
{
    memset(wire, 0, sizeof(*wire));
    wire->magic = htole32(TL_TCP_MAGIC);
    wire->type = (uint8_t)frame->type;
    wire->space = htole32(frame->space);
    wire->id = htole32(frame->id);
    wire->tag = htole64(frame->tag);
    wire->length = htole64(frame->length);
}

/* Which fields a frame type carries; the others must be zero. */
static int frame_fields_ok(const tl_tcp_frame_t *f)
{
    int ctrl = (f->tag & TL_TAG_CTRL) != 0;

    switch (f->type) {
    case TL_TCP_FRAME_DATA:
        return f->id == 0 && (!ctrl || f->length <= TL_CTRL_MAX);
    case TL_TCP_FRAME_RTS:
        /* Control messages always go eagerly; an empty message never needs a rendezvous. */
        return !ctrl && f->length > 0;
    case TL_TCP_FRAME_CTS:
        /* space: the fragment asked for, a power of two in bounds; none when dropped. */
        return f->tag == 0 &&
               (f->length == 0 ? f->space == 0
                               : f->space >= TL_TCP_FRAG_MIN && f->space <= TL_TCP_FRAG_MAX &&
                                     (f->space & (f->space - 1)) == 0);
    case TL_TCP_FRAME_RDATA:
        /* tag: the fragment's offset. */
        return f->space == 0 && f->tag < TL_TCP_MAX_MSG && f->length > 0 &&
               f->length <= TL_TCP_FRAG_MAX;
    case TL_TCP_FRAME_CREDIT:
        return f->space == 0 && f->tag == 0 && f->id == 0;
    default:
        return 0;
    }
}

chorus_status_t tl_tcp_header_check(const tl_tcp_hdr_t *wire, tl_tcp_frame_t *frame_p)
{
    tl_tcp_frame_t f = {
        .type = (tl_tcp_frame_type_t)wire->type,
        .space = le32toh(wire->space),
        .id = le32toh(wire->id),
        .tag = le64toh(wire->tag),
        .length = le64toh(wire->length),
    };

    /* The length bound comes before any allocation sized by it. */
    if (le32toh(wire->magic) != TL_TCP_MAGIC || wire->zero[0] != 0 || wire->zero[1] != 0 ||
        wire->zero[2] != 0 || f.length > TL_TCP_MAX_MSG || !frame_fields_ok(&f))
        return CHORUS_ERR_PROTOCOL;
    *frame_p = f;
    return CHORUS_OK;
}

/* ---- Peers ------------------------------------------------------------------ */

void tl_tcp_peer_init(tl_tcp_peer_t *peer, int rank)
{
    memset(peer, 0, sizeof(*peer));
    peer->rank = rank;
    peer->fd = -1;
    peer->hs.fd = -1;
    peer->nlanes = 1;
    peer->deal_to = -1;
    for (int i = 0; i < TL_TCP_STREAMS_MAX; i++) {
        peer->lanes[i].fd = -1;
        peer->lanes[i].hs.fd = -1;
    }
    peer->failed = CHORUS_OK;
    peer->rx_state = TL_TCP_RX_HEADER;
}

int tl_tcp_peer_attach(tl_ctx_t *ctx, tl_tcp_peer_t *peer, int fd)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = TL_TCP_EV(TL_TCP_EV_DATA, peer->rank)};
    int n;

    /* The socket is in the epoll set already, as a handshake. */
    if (epoll_ctl(ctx->epfd, EPOLL_CTL_MOD, fd, &ev) < 0) {
        chorus_error("rank %d: tcp: epoll_ctl(mod) for peer %d failed: %m", ctx->rank,
                     peer->rank);
        close(fd);
        return tl_tcp_peer_fail(ctx, peer, CHORUS_ERR_SYSTEM);
    }
    peer->fd = fd;
    peer->events = EPOLLIN;
    peer->state = TL_TCP_PEER_UP;
    peer->accepting = 0;
    peer->lanes_up = 1;
    peer->credit_owed = ctx->cfg.window_bytes;
    /* The peer's grant may have come with its ack: read it before the sends start. */
    n = tl_tcp_peer_read(ctx, peer);
    return n + tl_tcp_peer_write(ctx, peer);
}

/*
 * The frame being written when the connection went: a DATA send is in no
 * queue, nor is an RDATA send dealt out whole (those still in rdataq have
 * failed by now).
 */
int tl_tcp_tx_fail(tl_tcp_tx_t *tx, chorus_status_t status)
{
    int n = 0;

    if (tx->busy && tx->req != NULL && !tx->req->done &&
        (tx->hdr.type == TL_TCP_FRAME_DATA || tx->hdr.type == TL_TCP_FRAME_RDATA)) {
        tl_req_complete(tx->req, status, 0);
        n = 1;
    }
    memset(tx, 0, sizeof(*tx));
    return n;
}

/*
 * Close the connection (or the attempt) and fail everything pending on it.
 * Eager messages that arrived whole before the loss stay deliverable; a
 * partial one is dropped; an announced one fails the receive it matches.
 * Returns the number of requests completed.
 */
int tl_tcp_peer_fail(tl_ctx_t *ctx, tl_tcp_peer_t *peer, chorus_status_t status)
{
    int n = 0;

    if (peer->fd >= 0) {
        close(peer->fd); /* also leaves the epoll set */
        peer->fd = -1;
    }
    tl_tcp_hs_close(&peer->hs);
    if (peer->accepting) {
        tl_tcp_hs_close(&ctx->in[peer->accepting - 1]);
        peer->accepting = 0;
    }
    peer->state = TL_TCP_PEER_CLOSED;
    if (peer->failed == CHORUS_OK)
        peer->failed = status;
    n += tl_reqq_fail(&peer->sendq, status);
    n += tl_reqq_fail(&peer->rtsq, status);
    n += tl_reqq_fail(&peer->rdataq, status);
    n += tl_tcp_tx_fail(&peer->tx, status);
    n += tl_tcp_lanes_close(ctx, peer, status);
    n += tl_reqq_fail(&peer->postq, status);
    n += tl_tcp_peer_drop_rx(ctx, peer, status);
    if (peer->rx_req != NULL) {
        tl_req_complete(peer->rx_req, status, 0);
        peer->rx_req = NULL;
        n++;
    }
    peer->rx_state = TL_TCP_RX_HEADER;
    peer->rx_hdr_got = 0;
    return n;
}

/*
 * With lanes, the connection's writer also deals fragments (through
 * tl_tcp_lanes_write): it is due while a fragment waits for a lane to be
 * chosen or is the connection's own; one chosen for a busy lane waits for
 * that lane's EPOLLOUT.
 */
static int peer_has_output(const tl_ctx_t *ctx, const tl_tcp_peer_t *peer)
{
    return peer->tx.busy || tl_tcp_credit_due(ctx, peer) || peer->ctsq.head != NULL ||
           (peer->rdataq.head != NULL && (peer->lanes_up <= 1 || peer->deal_to <= 0)) ||
           (peer->granted && peer->sendq.head != NULL);
}

int tl_tcp_peer_update_events(tl_ctx_t *ctx, tl_tcp_peer_t *peer)
{
    uint32_t events = EPOLLIN | (peer_has_output(ctx, peer) ? EPOLLOUT : 0);
    struct epoll_event ev = {.events = events,
                             .data.u64 = TL_TCP_EV(TL_TCP_EV_DATA, peer->rank)};

    if (peer->lanes_up > 1) {
        int n = tl_tcp_lanes_update_events(ctx, peer);

        if (n > 0 || peer->fd < 0)
            return n; /* the peer failed */
    }
    if (peer->fd < 0 || peer->events == events)
        return 0;
    if (epoll_ctl(ctx->epfd, EPOLL_CTL_MOD, peer->fd, &ev) < 0) {
        chorus_error("rank %d: tcp: epoll_ctl(mod) for peer %d failed: %m", ctx->rank,
                     peer->rank);
        return tl_tcp_peer_fail(ctx, peer, CHORUS_ERR_SYSTEM);
    }
    peer->events = events;
    return 0;
}

int tl_tcp_peer_lost(tl_ctx_t *ctx, tl_tcp_peer_t *peer, const char *what, int err)
{
    int pending = peer->sendq.head != NULL || peer->postq.head != NULL ||
                  peer->rx_req != NULL || peer->tx.busy || peer->rtsq.head != NULL ||
                  peer->rdvq.head != NULL;

    /* A peer leaving with nothing outstanding is how a job ends; say so quietly. */
    if (pending)
        chorus_warn("rank %d: connection to peer %d lost (%s: %s)", ctx->rank, peer->rank,
                    what, err ? strerror(err) : "end of stream");
    else
        chorus_info("rank %d: connection to peer %d closed (%s: %s)", ctx->rank, peer->rank,
                    what, err ? strerror(err) : "end of stream");
    return tl_tcp_peer_fail(ctx, peer, CHORUS_ERR_PEER_FAILED);
}

int tl_tcp_peer_protocol(tl_ctx_t *ctx, tl_tcp_peer_t *peer, const char *why)
{
    chorus_error("rank %d: tcp: peer %d broke the protocol (%s); closing the connection",
                 ctx->rank, peer->rank, why);
    return tl_tcp_peer_fail(ctx, peer, CHORUS_ERR_PROTOCOL);
}

/* ---- Writing ---------------------------------------------------------------- */

ssize_t tl_tcp_tx_send(int fd, tl_tcp_tx_t *tx, tl_tcp_rate_t *rate)
{
    const size_t hdr = sizeof(tl_tcp_hdr_t);
    struct iovec iov[2];
    struct msghdr msg = {.msg_iov = iov, .msg_iovlen = 0};
    size_t body = tx->off > hdr ? tx->off - hdr : 0;
    ssize_t w;

    if (tx->off < hdr) {
        iov[msg.msg_iovlen].iov_base = (char *)&tx->hdr + tx->off;
        iov[msg.msg_iovlen++].iov_len = hdr - tx->off;
    }
    if (body < tx->len) {
        iov[msg.msg_iovlen].iov_base = (char *)tx->payload + body;
        iov[msg.msg_iovlen++].iov_len = tx->len - body;
    }
    do {
        w = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (w < 0 && errno == EINTR);
    if (w > 0) {
        tx->off += (size_t)w;
        rate->sent += (uint64_t)w;
    }
    return w;
}

/*
 * Write what the socket takes; eager sends complete once the kernel holds
 * their bytes. With lanes, the connection and its lanes take turns until
 * none of them takes or finishes a frame: a fragment one of them declined
 * may be the connection's to take once another lane took its share.
 */
int tl_tcp_peer_write(tl_ctx_t *ctx, tl_tcp_peer_t *peer)
{
    const size_t hdr = sizeof(tl_tcp_hdr_t);
    tl_tcp_tx_t *tx = &peer->tx;
    int n = 0, moved;

    do {
        moved = 0;
        while (peer->fd >= 0 && (tx->busy || tl_tcp_tx_next(ctx, peer))) {
            ssize_t w = tl_tcp_tx_send(peer->fd, tx, &peer->lanes[0].rate);

            if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                break;
            if (w < 0)
                return n + tl_tcp_peer_lost(ctx, peer, "send", errno);
            if (tx->off == hdr + tx->len) {
                n += tl_tcp_tx_done(ctx, peer);
                moved = 1;
            }
        }
        if (peer->lanes_up > 1 && peer->fd >= 0)
            n += tl_tcp_lanes_write(ctx, peer, &moved);
    } while (moved && peer->lanes_up > 1 && peer->fd >= 0);
    return n + tl_tcp_peer_update_events(ctx, peer);
}

/* ---- Reading ---------------------------------------------------------------- */

/* A header arrived and a receive was posted for it. */
static int rx_match(tl_ctx_t *ctx, tl_tcp_peer_t *peer, tl_req_t *req)
{
    const tl_tcp_frame_t *f = &peer->rx_frame;

    if (!tl_msg_fits(ctx->rank, peer->rank, f->tag, f->length, req)) {
        tl_req_complete(req, CHORUS_ERR_TRUNCATED, 0);
        /* The payload still has to leave the stream to keep the framing. */
        peer->rx_state = TL_TCP_RX_DISCARD;
        return 1;
    }
    if (f->length == 0) {
        tl_req_complete(req, CHORUS_OK, 0);
        return 1;
    }
    peer->rx_req = req;
    peer->rx_dst = req->buf;
    peer->rx_state = TL_TCP_RX_PAYLOAD;
    return 0;
}

/* A control message is whole: it goes to the context's handler, never to a receive. */
static int ctrl_deliver(tl_ctx_t *ctx, int peer, tl_tcp_ue_t *ue)
{
    if (ctx->ctrl != NULL)
        ctx->ctrl(ctx->ctrl_arg, peer, ue->space, ue->tag, ue->data, (size_t)ue->length);
    tl_tcp_ue_release(ctx, NULL, ue);
    return 1;
}

static int rx_unexpected(tl_ctx_t *ctx, tl_tcp_peer_t *peer, int ctrl)
{
    const tl_tcp_frame_t *f = &peer->rx_frame;
    tl_tcp_ue_t *ue = tl_tcp_ue_alloc(ctx, f->space, f->tag, f->length);

    if (ue == NULL) {
        chorus_error("rank %d: no memory for a %llu-byte unexpected message from peer %d",
                     ctx->rank, (unsigned long long)f->length, peer->rank);
        return tl_tcp_peer_fail(ctx, peer, CHORUS_ERR_NO_MEMORY);
    }
    if (ctrl && f->length == 0)
        return ctrl_deliver(ctx, peer->rank, ue);
    ue->credit = !ctrl;
    if (!ctrl)
        tl_tcp_ueq_push(&peer->ueq, ue);
    peer->rx_ctrl = ctrl;
    if (f->length > 0) {
        peer->rx_ue = ue;
        peer->rx_dst = ue->data;
        peer->rx_state = TL_TCP_RX_PAYLOAD;
    }
    return 0;
}

/* An eager message: data paid for by the sender's credit, or a control message. */
static int rx_data(tl_ctx_t *ctx, tl_tcp_peer_t *peer)
{
    const tl_tcp_frame_t *f = &peer->rx_frame;
    int ctrl = (f->tag & TL_TAG_CTRL) != 0;
    tl_req_t *req;

    if (ctrl)
        return rx_unexpected(ctx, peer, 1);
    if (f->length > peer->rx_credit)
        return tl_tcp_peer_protocol(ctx, peer, "eager data beyond the window it was granted");
    peer->rx_credit -= f->length;
    req = tl_reqq_take(&peer->postq, f->space, f->tag);
    if (req == NULL)
        return rx_unexpected(ctx, peer, 0);
    /* Straight into the receive: the bytes never occupy this rank's memory. */
    tl_tcp_credit_return(peer, f->length);
    return rx_match(ctx, peer, req);
}

static int rx_header(tl_ctx_t *ctx, tl_tcp_peer_t *peer)
{
    tl_tcp_frame_t *f = &peer->rx_frame;
    int n = 0;

    peer->rx_hdr_got = 0;
    peer->rx_got = 0;
    if (tl_tcp_header_check(&peer->rx_hdr, f) != CHORUS_OK) {
        chorus_error("rank %d: tcp: malformed header from peer %d (magic 0x%08x, type %u, "
                     "tag 0x%llx, length %llu); closing the connection", ctx->rank,
                     peer->rank, le32toh(peer->rx_hdr.magic), peer->rx_hdr.type,
                     (unsigned long long)le64toh(peer->rx_hdr.tag),
                     (unsigned long long)le64toh(peer->rx_hdr.length));
        return tl_tcp_peer_fail(ctx, peer, CHORUS_ERR_PROTOCOL);
    }
    switch (f->type) {
    case TL_TCP_FRAME_DATA:
        return rx_data(ctx, peer);
    case TL_TCP_FRAME_RTS:
        return tl_tcp_rx_rts(ctx, peer, f);
    case TL_TCP_FRAME_CTS:
        if (tl_tcp_rx_cts(ctx, peer, f, &n) != CHORUS_OK)
            return tl_tcp_peer_protocol(ctx, peer, "a CTS for no message it was offered");
        return n;
    case TL_TCP_FRAME_RDATA:
        peer->rx_rec = tl_tcp_rdata_place(peer, f, &peer->rx_dst);
        if (peer->rx_rec == NULL)
            return tl_tcp_peer_protocol(ctx, peer, "rendezvous data for no message asked for, "
                                                   "out of place, or twice");
        peer->rx_req = NULL;
        peer->rx_ue = NULL;
        peer->rx_state = TL_TCP_RX_PAYLOAD;
        return 0;
    default:
        if (tl_tcp_rx_credit(ctx, peer, f) != CHORUS_OK)
            return tl_tcp_peer_protocol(ctx, peer, "credit beyond any window");
        return 0;
    }
}

static int rx_payload_done(tl_ctx_t *ctx, tl_tcp_peer_t *peer)
{
    int n = 0;

    peer->rx_state = TL_TCP_RX_HEADER;
    if (peer->rx_frame.type == TL_TCP_FRAME_RDATA) {
        tl_tcp_ue_t *rec = peer->rx_rec;

        peer->rx_rec = NULL;
        return tl_tcp_rdata_arrived(ctx, peer, rec, peer->rx_frame.length);
    }
    if (peer->rx_req != NULL) {
        tl_req_complete(peer->rx_req, CHORUS_OK, (size_t)peer->rx_frame.length);
        peer->rx_req = NULL;
        n = 1;
    } else if (peer->rx_ue != NULL && peer->rx_ctrl) {
        n = ctrl_deliver(ctx, peer->rank, peer->rx_ue);
        peer->rx_ue = NULL;
    } else if (peer->rx_ue != NULL) {
        peer->rx_ue->complete = 1;
        peer->rx_ue = NULL;
    }
    return n;
}

/*
 * Where the next read goes. While a payload is read, the next header is read
 * with it (second iovec), so a stream of messages costs one call each.
 */
static size_t rx_iov(tl_ctx_t *ctx, tl_tcp_peer_t *peer, struct iovec *iov, int *cnt_p)
{
    uint64_t left = peer->rx_frame.length - peer->rx_got;

    if (peer->rx_state == TL_TCP_RX_HEADER) {
        iov[0].iov_base = (char *)&peer->rx_hdr + peer->rx_hdr_got;
        iov[0].iov_len = sizeof(tl_tcp_hdr_t) - peer->rx_hdr_got;
        *cnt_p = 1;
        return iov[0].iov_len;
    }
    if (peer->rx_state == TL_TCP_RX_DISCARD) {
        iov[0].iov_base = ctx->scratch;
        iov[0].iov_len = left < ctx->scratch_len ? (size_t)left : ctx->scratch_len;
    } else {
        iov[0].iov_base = peer->rx_dst + peer->rx_got;
        iov[0].iov_len = (size_t)left;
    }
    iov[1].iov_base = &peer->rx_hdr;
    iov[1].iov_len = sizeof(tl_tcp_hdr_t);
    *cnt_p = 2;
    return iov[0].iov_len + iov[1].iov_len;
}

static int rx_consume(tl_ctx_t *ctx, tl_tcp_peer_t *peer, size_t got)
{
    uint64_t left = peer->rx_frame.length - peer->rx_got;
    size_t body = got < left ? got : (size_t)left;
    int n = 0;

    if (peer->rx_state == TL_TCP_RX_HEADER) {
        peer->rx_hdr_got += got;
        return peer->rx_hdr_got == sizeof(tl_tcp_hdr_t) ? rx_header(ctx, peer) : 0;
    }
    peer->rx_got += body;
    if (peer->rx_got < peer->rx_frame.length)
        return 0;
    n += rx_payload_done(ctx, peer);
    peer->rx_hdr_got = got - body;
    if (peer->rx_hdr_got == sizeof(tl_tcp_hdr_t))
        n += rx_header(ctx, peer);
    return n;
}

int tl_tcp_peer_read(tl_ctx_t *ctx, tl_tcp_peer_t *peer)
{
    int n = 0;

    for (int round = 0; round < TL_TCP_READ_ROUNDS && peer->fd >= 0; round++) {
        struct iovec iov[2];
        int cnt;
        size_t want = rx_iov(ctx, peer, iov, &cnt);
        ssize_t r = readv(peer->fd, iov, cnt);

        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            return n + tl_tcp_peer_lost(ctx, peer, "receive", errno);
        }
        if (r == 0)
            return n + tl_tcp_peer_lost(ctx, peer, "receive", 0);
        n += rx_consume(ctx, peer, (size_t)r);
        if ((size_t)r < want)
            break; /* drained for now; epoll is level-triggered */
    }
    /* What was read may call for frames: CTS, credit, or sends the grant let start. */
    return n + tl_tcp_peer_update_events(ctx, peer);
}

/* ---- Posts ------------------------------------------------------------------ */

static chorus_status_t post_check(tl_ctx_t *ctx, int peer, const void *buf, size_t len,
                                  tl_req_t *req, const char *what)
{
    if (ctx == NULL || req == NULL) {
        chorus_error("tcp %s: %s is NULL", what, ctx == NULL ? "ctx" : "req");
        return CHORUS_ERR_INVALID_ARG;
    }
    if (peer < 0 || peer >= ctx->size) {
        chorus_error("rank %d: tcp %s: peer %d is not in [0, %d)", ctx->rank, what, peer,
                     ctx->size);
        return CHORUS_ERR_INVALID_ARG;
    }
    if ((buf == NULL && len > 0) || len > TL_TCP_MAX_MSG) {
        chorus_error("rank %d: tcp %s: peer %d: buffer %p of %zu bytes is invalid",
                     ctx->rank, what, peer, buf, len);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (!ctx->peers_set && peer != ctx->rank && ctx->fatal == CHORUS_OK) {
        chorus_error("rank %d: tcp %s to peer %d before set_peers succeeded", ctx->rank,
                     what, peer);
        return CHORUS_ERR_INVALID_ARG;
    }
    return CHORUS_OK;
}

/* Later posts to a lost peer fail at once, with the status that lost it. */
static chorus_status_t post_failed(tl_ctx_t *ctx, tl_tcp_peer_t *peer, tl_req_t *req)
{
    chorus_status_t status = ctx->fatal != CHORUS_OK ? ctx->fatal : peer->failed;

    if (status != CHORUS_OK)
        tl_req_complete(req, status, 0);
    return status;
}

/* A send to this rank itself: delivered by copy, no socket involved. */
static chorus_status_t send_self(tl_ctx_t *ctx, tl_tcp_peer_t *self, tl_req_t *req)
{
    int ctrl = (req->tag & TL_TAG_CTRL) != 0;
    tl_req_t *recv = ctrl ? NULL : tl_reqq_take(&self->postq, req->space, req->tag);

    if (recv != NULL) {
        if (!tl_msg_fits(ctx->rank, ctx->rank, req->tag, req->capacity, recv)) {
            tl_req_complete(recv, CHORUS_ERR_TRUNCATED, 0);
        } else {
            if (req->capacity > 0)
                memcpy(recv->buf, req->buf, req->capacity);
            tl_req_complete(recv, CHORUS_OK, req->capacity);
        }
    } else {
        tl_tcp_ue_t *ue = tl_tcp_ue_alloc(ctx, req->space, req->tag, req->capacity);

        if (ue == NULL) {
            chorus_error("rank %d: no memory for a %zu-byte message to itself", ctx->rank,
                         req->capacity);
            tl_req_complete(req, CHORUS_ERR_NO_MEMORY, 0);
            return CHORUS_ERR_NO_MEMORY;
        }
        if (req->capacity > 0)
            memcpy(ue->data, req->buf, req->capacity);
        ue->complete = 1;
        if (ctrl)
            ctrl_deliver(ctx, ctx->rank, ue);
        else
            tl_tcp_ueq_push(&self->ueq, ue);
    }
    tl_req_complete(req, CHORUS_OK, req->capacity);
    ctx->deferred += recv != NULL ? 2 : 1;
    return CHORUS_OK;
}

chorus_status_t tl_tcp_send_nb(tl_ctx_t *ctx, int peer_rank, uint32_t space, uint64_t tag,
                               const void *buf, size_t len, tl_req_t *req)
{
    chorus_status_t status = post_check(ctx, peer_rank, buf, len, req, "send");
    tl_tcp_peer_t *peer;

    if (status == CHORUS_OK && (tag & TL_TAG_CTRL) && len > TL_CTRL_MAX) {
        chorus_error("rank %d: tcp send: control message of %zu bytes exceeds %d",
                     ctx->rank, len, TL_CTRL_MAX);
        status = CHORUS_ERR_INVALID_ARG;
    }
    if (status != CHORUS_OK)
        return status;
    /* The request's buffer field is shared with receives; sends never write through it. */
    tl_req_init(req, peer_rank, space, tag, (void *)(uintptr_t)buf, len);
    peer = &ctx->peers[peer_rank];
    status = post_failed(ctx, peer, req);
    if (status != CHORUS_OK)
        return status;
    if (peer_rank == ctx->rank)
        return send_self(ctx, peer, req);
    tl_reqq_push(&peer->sendq, req);
    if (peer->state == TL_TCP_PEER_IDLE && !peer->accepting) {
        /* First use: the connection opens now; a peer found gone fails this send at once. */
        ctx->deferred += tl_tcp_connect(ctx, peer);
        if (req->done) {
            ctx->deferred--;
            return req->status;
        }
        return CHORUS_OK;
    }
    ctx->deferred += tl_tcp_peer_update_events(ctx, peer);
    return CHORUS_OK;
}

/* A receive matched eager data that arrived (at least in part) before it. */
static void recv_unexpected(tl_ctx_t *ctx, tl_tcp_peer_t *peer, tl_tcp_ue_t *ue,
                            tl_req_t *req)
{
    if (!tl_msg_fits(ctx->rank, peer->rank, ue->tag, ue->length, req)) {
        if (ue == peer->rx_ue) {
            peer->rx_ue = NULL;
            peer->rx_state = TL_TCP_RX_DISCARD;
        }
        tl_req_complete(req, CHORUS_ERR_TRUNCATED, 0);
        ctx->deferred++;
    } else if (ue == peer->rx_ue) {
        /* Still arriving: move what came so far; the rest lands in place. */
        memcpy(req->buf, ue->data, (size_t)peer->rx_got);
        peer->rx_ue = NULL;
        peer->rx_req = req;
        peer->rx_dst = req->buf;
    } else {
        if (ue->length > 0)
            memcpy(req->buf, ue->data, (size_t)ue->length);
        tl_req_complete(req, CHORUS_OK, (size_t)ue->length);
        ctx->deferred++;
    }
    tl_tcp_ue_release(ctx, peer, ue);
}

chorus_status_t tl_tcp_recv_nb(tl_ctx_t *ctx, int peer_rank, uint32_t space, uint64_t tag,
                               void *buf, size_t capacity, tl_req_t *req)
{
    chorus_status_t status = post_check(ctx, peer_rank, buf, capacity, req, "recv");
    tl_tcp_peer_t *peer;
    tl_tcp_ue_t *ue;

    if (status != CHORUS_OK)
        return status;
    if (tag & TL_TAG_CTRL) {
        chorus_error("rank %d: tcp recv: control tags are never matched", ctx->rank);
        return CHORUS_ERR_INVALID_ARG;
    }
    tl_req_init(req, peer_rank, space, tag, buf, capacity);
    peer = &ctx->peers[peer_rank];
    ue = tl_tcp_ueq_take(&peer->ueq, space, tag);
    if (ue != NULL && ue->rts && peer->state == TL_TCP_PEER_CLOSED) {
        /* Announced, but its payload went with the connection. */
        tl_tcp_ue_release(ctx, NULL, ue);
        tl_req_complete(req, peer->failed, 0);
        return peer->failed;
    }
    if (ue != NULL && ue->rts) {
        ctx->deferred += tl_tcp_recv_rts(ctx, peer, ue, req);
        ctx->deferred += tl_tcp_peer_update_events(ctx, peer);
        return CHORUS_OK;
    }
    if (ue != NULL) {
        recv_unexpected(ctx, peer, ue, req);
        ctx->deferred += tl_tcp_peer_update_events(ctx, peer);
        return CHORUS_OK;
    }
    status = post_failed(ctx, peer, req);
    if (status != CHORUS_OK)
        return status;
    tl_reqq_push(&peer->postq, req);
    return CHORUS_OK;
}
