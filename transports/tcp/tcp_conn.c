/*
 * TCP transport data path: framing, per-peer send queues and receive
 * matching by (peer, tag).
 *
 * Every connection carries a stream of [header][payload] frames. A peer's
 * receive side is a small state machine: read a header, then read its payload
 * either straight into the matching posted receive (no copy) or into a freshly
 * allocated unexpected-message buffer, or drain it when it does not fit.
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
#include "util/pages.h"

/* Reads per peer and progress call, so that one busy peer cannot starve the others. */
#define TL_TCP_READ_ROUNDS 32

void tl_tcp_header_encode(tl_tcp_hdr_t *wire, uint32_t space, uint64_t tag, uint64_t length)
{
    wire->magic = htole32(TL_TCP_MAGIC);
    wire->space = htole32(space);
    wire->tag = htole64(tag);
    wire->length = htole64(length);
}

chorus_status_t tl_tcp_header_check(const tl_tcp_hdr_t *wire, uint32_t *space_p,
                                    uint64_t *tag_p, uint64_t *length_p)
{
    uint64_t length = le64toh(wire->length);
    uint64_t tag = le64toh(wire->tag);

    /* The length bound comes before any allocation sized by it. */
    if (le32toh(wire->magic) != TL_TCP_MAGIC || length > TL_TCP_MAX_MSG ||
        ((tag & TL_TAG_CTRL) && length > TL_CTRL_MAX))
        return CHORUS_ERR_PROTOCOL;
    *space_p = le32toh(wire->space);
    *tag_p = tag;
    *length_p = length;
    return CHORUS_OK;
}

void tl_tcp_req_complete(tl_req_t *req, chorus_status_t status, size_t length)
{
    req->status = status;
    req->length = length;
    req->next = NULL;
    /* Release: a thread that sees done also sees status, length and the data. */
    __atomic_store_n(&req->done, 1, __ATOMIC_RELEASE);
}

static void reqq_push(tl_tcp_reqq_t *q, tl_req_t *req)
{
    req->next = NULL;
    if (q->tail != NULL)
        q->tail->next = req;
    else
        q->head = req;
    q->tail = req;
}

static tl_req_t *reqq_pop(tl_tcp_reqq_t *q)
{
    tl_req_t *req = q->head;

    if (req != NULL) {
        q->head = req->next;
        if (q->head == NULL)
            q->tail = NULL;
        req->next = NULL;
    }
    return req;
}

/* Unlink the oldest request with this space and tag: same-tag messages match in order. */
static tl_req_t *reqq_take_tag(tl_tcp_reqq_t *q, uint32_t space, uint64_t tag)
{
    tl_req_t *prev = NULL;

    for (tl_req_t *req = q->head; req != NULL; prev = req, req = req->next) {
        if (req->tag != tag || req->space != space)
            continue;
        if (prev != NULL)
            prev->next = req->next;
        else
            q->head = req->next;
        if (q->tail == req)
            q->tail = prev;
        req->next = NULL;
        return req;
    }
    return NULL;
}

static int reqq_fail(tl_tcp_reqq_t *q, chorus_status_t status)
{
    tl_req_t *req;
    int n = 0;

    while ((req = reqq_pop(q)) != NULL) {
        tl_tcp_req_complete(req, status, 0);
        n++;
    }
    return n;
}

static void ue_push(tl_tcp_peer_t *peer, tl_tcp_ue_t *ue)
{
    ue->next = NULL;
    if (peer->ue_tail != NULL)
        peer->ue_tail->next = ue;
    else
        peer->ue_head = ue;
    peer->ue_tail = ue;
}

/* Unlink and return the oldest unexpected message with this space and tag, or NULL. */
static tl_tcp_ue_t *ue_take_tag(tl_tcp_peer_t *peer, uint32_t space, uint64_t tag, int any)
{
    tl_tcp_ue_t *prev = NULL;

    for (tl_tcp_ue_t *ue = peer->ue_head; ue != NULL; prev = ue, ue = ue->next) {
        if (!any && (ue->tag != tag || ue->space != space))
            continue;
        if (prev != NULL)
            prev->next = ue->next;
        else
            peer->ue_head = ue->next;
        if (peer->ue_tail == ue)
            peer->ue_tail = prev;
        ue->next = NULL;
        return ue;
    }
    return NULL;
}

/* A cached buffer serves a message at most this many times smaller than it. */
#define UE_CACHE_MAX_WASTE 4

static tl_tcp_ue_t *ue_alloc(tl_ctx_t *ctx, uint32_t space, uint64_t tag, uint64_t length)
{
    tl_tcp_ue_t *ue = NULL;
    int best = -1;

    for (int i = 0; i < ctx->ue_cached; i++) {
        size_t cap = ctx->ue_cache[i]->capacity;
        if (cap >= length && cap / UE_CACHE_MAX_WASTE <= length &&
            (best < 0 || cap < ctx->ue_cache[best]->capacity))
            best = i;
    }
    if (best >= 0) {
        ue = ctx->ue_cache[best];
        ctx->ue_cache[best] = ctx->ue_cache[--ctx->ue_cached];
    } else {
        ue = chorus__pages_alloc(sizeof(*ue) + (size_t)length);
        if (ue != NULL)
            ue->capacity = (size_t)length;
    }
    if (ue != NULL) {
        ue->next = NULL;
        ue->space = space;
        ue->tag = tag;
        ue->length = length;
        ue->complete = (length == 0);
    }
    return ue;
}

/* Keep the buffer for the next unexpected message, or free it when the cache is full. */
static void ue_release(tl_ctx_t *ctx, tl_tcp_ue_t *ue)
{
    if (ctx->ue_cached < TL_TCP_UE_CACHE)
        ctx->ue_cache[ctx->ue_cached++] = ue;
    else
        chorus__pages_free(ue, sizeof(*ue) + ue->capacity);
}

void tl_tcp_ue_cache_clear(tl_ctx_t *ctx)
{
    while (ctx->ue_cached > 0) {
        tl_tcp_ue_t *ue = ctx->ue_cache[--ctx->ue_cached];
        chorus__pages_free(ue, sizeof(*ue) + ue->capacity);
    }
}

void tl_tcp_peer_free_unexpected(tl_ctx_t *ctx, tl_tcp_peer_t *peer)
{
    tl_tcp_ue_t *ue;

    while ((ue = ue_take_tag(peer, 0, 0, 1)) != NULL)
        ue_release(ctx, ue);
    peer->rx_ue = NULL;
}

void tl_tcp_peer_init(tl_tcp_peer_t *peer, int rank)
{
    memset(peer, 0, sizeof(*peer));
    peer->rank = rank;
    peer->fd = -1;
    peer->failed = CHORUS_OK;
    peer->rx_state = TL_TCP_RX_HEADER;
}

chorus_status_t tl_tcp_peer_attach(tl_ctx_t *ctx, tl_tcp_peer_t *peer, int fd)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = peer};

    if (epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
        chorus_error("rank %d: epoll_ctl(add) for peer %d failed: %m", ctx->rank, peer->rank);
        return CHORUS_ERR_SYSTEM;
    }
    peer->fd = fd;
    peer->events = EPOLLIN;
    return CHORUS_OK;
}

/*
 * Close the connection and fail everything pending on it. Messages that
 * arrived whole before the loss stay deliverable; a partial one is dropped.
 * Returns the number of requests completed.
 */
int tl_tcp_peer_fail(tl_ctx_t *ctx, tl_tcp_peer_t *peer, chorus_status_t status)
{
    int n = 0;

    if (peer->fd >= 0) {
        epoll_ctl(ctx->epfd, EPOLL_CTL_DEL, peer->fd, NULL);
        close(peer->fd);
        peer->fd = -1;
    }
    if (peer->failed == CHORUS_OK)
        peer->failed = status;
    n += reqq_fail(&peer->sendq, status);
    n += reqq_fail(&peer->postq, status);
    if (peer->rx_req != NULL) {
        tl_tcp_req_complete(peer->rx_req, status, 0);
        peer->rx_req = NULL;
        n++;
    }
    if (peer->rx_ue != NULL) {
        tl_tcp_ue_t *prev = NULL;

        /* The partial message is the newest one: find its predecessor. */
        for (tl_tcp_ue_t *ue = peer->ue_head; ue != peer->rx_ue; ue = ue->next)
            prev = ue;
        if (prev != NULL)
            prev->next = NULL;
        else
            peer->ue_head = NULL;
        peer->ue_tail = prev;
        ue_release(ctx, peer->rx_ue);
        peer->rx_ue = NULL;
    }
    peer->rx_state = TL_TCP_RX_HEADER;
    peer->rx_hdr_got = 0;
    return n;
}

/* Keep EPOLLOUT armed exactly while the send queue holds data. */
static int peer_update_events(tl_ctx_t *ctx, tl_tcp_peer_t *peer)
{
    uint32_t events = EPOLLIN | (peer->sendq.head != NULL ? EPOLLOUT : 0);
    struct epoll_event ev = {.events = events, .data.ptr = peer};

    if (peer->fd < 0 || peer->events == events)
        return 0;
    if (epoll_ctl(ctx->epfd, EPOLL_CTL_MOD, peer->fd, &ev) < 0) {
        chorus_error("rank %d: epoll_ctl(mod) for peer %d failed: %m", ctx->rank, peer->rank);
        return tl_tcp_peer_fail(ctx, peer, CHORUS_ERR_SYSTEM);
    }
    peer->events = events;
    return 0;
}

static int peer_lost(tl_ctx_t *ctx, tl_tcp_peer_t *peer, const char *what, int err)
{
    int pending = peer->sendq.head != NULL || peer->postq.head != NULL ||
                  peer->rx_req != NULL;

    /* A peer leaving with nothing outstanding is how a job ends; say so quietly. */
    if (pending)
        chorus_warn("rank %d: connection to peer %d lost (%s: %s)", ctx->rank, peer->rank,
                    what, err ? strerror(err) : "end of stream");
    else
        chorus_info("rank %d: connection to peer %d closed (%s: %s)", ctx->rank, peer->rank,
                    what, err ? strerror(err) : "end of stream");
    return tl_tcp_peer_fail(ctx, peer, CHORUS_ERR_PEER_FAILED);
}

/* Write what the socket takes; sends complete once the kernel holds their bytes. */
int tl_tcp_peer_write(tl_ctx_t *ctx, tl_tcp_peer_t *peer)
{
    const size_t hdr = sizeof(tl_tcp_hdr_t);
    int n = 0;

    while (peer->fd >= 0 && peer->sendq.head != NULL) {
        tl_req_t *req = peer->sendq.head;
        struct iovec iov[2];
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = 0};
        size_t body = req->offset > hdr ? req->offset - hdr : 0;
        ssize_t w;

        if (req->offset < hdr) {
            iov[msg.msg_iovlen].iov_base = (char *)&peer->tx_hdr + req->offset;
            iov[msg.msg_iovlen++].iov_len = hdr - req->offset;
        }
        if (body < req->capacity) {
            iov[msg.msg_iovlen].iov_base = (char *)req->buf + body;
            iov[msg.msg_iovlen++].iov_len = req->capacity - body;
        }
        w = sendmsg(peer->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            return n + peer_lost(ctx, peer, "send", errno);
        }
        req->offset += (size_t)w;
        if (req->offset < hdr + req->capacity)
            continue;
        reqq_pop(&peer->sendq);
        tl_tcp_req_complete(req, CHORUS_OK, req->capacity);
        n++;
        if (peer->sendq.head != NULL)
            tl_tcp_header_encode(&peer->tx_hdr, peer->sendq.head->space,
                                 peer->sendq.head->tag, peer->sendq.head->capacity);
    }
    return n + peer_update_events(ctx, peer);
}

static void log_truncated(const tl_ctx_t *ctx, int peer, uint64_t tag, uint64_t length,
                          size_t capacity)
{
    chorus_error("rank %d: message from peer %d with tag %llu has %llu bytes but the "
                 "receive holds %zu; request fails as truncated", ctx->rank, peer,
                 (unsigned long long)tag, (unsigned long long)length, capacity);
}

/* A header arrived and a receive was posted for it. */
static int rx_match(tl_ctx_t *ctx, tl_tcp_peer_t *peer, tl_req_t *req, uint64_t tag,
                    uint64_t length)
{
    if (length > req->capacity) {
        log_truncated(ctx, peer->rank, tag, length, req->capacity);
        tl_tcp_req_complete(req, CHORUS_ERR_TRUNCATED, 0);
        /* The payload still has to leave the stream to keep the framing. */
        peer->rx_state = TL_TCP_RX_DISCARD;
        return 1;
    }
    if (length == 0) {
        tl_tcp_req_complete(req, CHORUS_OK, 0);
        return 1;
    }
    peer->rx_req = req;
    peer->rx_state = TL_TCP_RX_PAYLOAD;
    return 0;
}

/* A control message is whole: it goes to the context's handler, never to a receive. */
static int ctrl_deliver(tl_ctx_t *ctx, int peer, tl_tcp_ue_t *ue)
{
    if (ctx->ctrl != NULL)
        ctx->ctrl(ctx->ctrl_arg, peer, ue->space, ue->tag, ue->data, (size_t)ue->length);
    ue_release(ctx, ue);
    return 1;
}

static int rx_unexpected(tl_ctx_t *ctx, tl_tcp_peer_t *peer, uint32_t space, uint64_t tag,
                         uint64_t length)
{
    tl_tcp_ue_t *ue = ue_alloc(ctx, space, tag, length);
    int ctrl = (tag & TL_TAG_CTRL) != 0;

    if (ue == NULL) {
        chorus_error("rank %d: no memory for a %llu-byte unexpected message from peer %d",
                     ctx->rank, (unsigned long long)length, peer->rank);
        return tl_tcp_peer_fail(ctx, peer, CHORUS_ERR_NO_MEMORY);
    }
    if (ctrl && length == 0)
        return ctrl_deliver(ctx, peer->rank, ue);
    if (!ctrl)
        ue_push(peer, ue);
    peer->rx_ctrl = ctrl;
    if (length > 0) {
        peer->rx_ue = ue;
        peer->rx_state = TL_TCP_RX_PAYLOAD;
    }
    return 0;
}

static int rx_header(tl_ctx_t *ctx, tl_tcp_peer_t *peer)
{
    uint64_t tag, length;
    uint32_t space;
    tl_req_t *req;

    peer->rx_hdr_got = 0;
    if (tl_tcp_header_check(&peer->rx_hdr, &space, &tag, &length) != CHORUS_OK) {
        chorus_error("rank %d: malformed header from peer %d (magic 0x%08x, tag 0x%llx, "
                     "length %llu); closing the connection", ctx->rank, peer->rank,
                     le32toh(peer->rx_hdr.magic), (unsigned long long)le64toh(peer->rx_hdr.tag),
                     (unsigned long long)le64toh(peer->rx_hdr.length));
        return tl_tcp_peer_fail(ctx, peer, CHORUS_ERR_PROTOCOL);
    }
    peer->rx_len = length;
    peer->rx_got = 0;
    req = (tag & TL_TAG_CTRL) ? NULL : reqq_take_tag(&peer->postq, space, tag);
    if (req != NULL)
        return rx_match(ctx, peer, req, tag, length);
    return rx_unexpected(ctx, peer, space, tag, length);
}

static int rx_payload_done(tl_ctx_t *ctx, tl_tcp_peer_t *peer)
{
    int n = 0;

    if (peer->rx_req != NULL) {
        tl_tcp_req_complete(peer->rx_req, CHORUS_OK, (size_t)peer->rx_len);
        peer->rx_req = NULL;
        n = 1;
    } else if (peer->rx_ue != NULL && peer->rx_ctrl) {
        n = ctrl_deliver(ctx, peer->rank, peer->rx_ue);
        peer->rx_ue = NULL;
    } else if (peer->rx_ue != NULL) {
        peer->rx_ue->complete = 1;
        peer->rx_ue = NULL;
    }
    peer->rx_state = TL_TCP_RX_HEADER;
    return n;
}

/*
 * Where the next read goes. While a payload is read, the next header is read
 * with it (second iovec), so a stream of messages costs one call each.
 */
static size_t rx_iov(tl_ctx_t *ctx, tl_tcp_peer_t *peer, struct iovec *iov, int *cnt_p)
{
    uint64_t left = peer->rx_len - peer->rx_got;

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
        unsigned char *dst = peer->rx_req != NULL ? peer->rx_req->buf : peer->rx_ue->data;

        iov[0].iov_base = dst + peer->rx_got;
        iov[0].iov_len = (size_t)left;
    }
    iov[1].iov_base = &peer->rx_hdr;
    iov[1].iov_len = sizeof(tl_tcp_hdr_t);
    *cnt_p = 2;
    return iov[0].iov_len + iov[1].iov_len;
}

static int rx_consume(tl_ctx_t *ctx, tl_tcp_peer_t *peer, size_t got)
{
    uint64_t left = peer->rx_len - peer->rx_got;
    size_t body = got < left ? got : (size_t)left;
    int n = 0;

    if (peer->rx_state == TL_TCP_RX_HEADER) {
        peer->rx_hdr_got += got;
        return peer->rx_hdr_got == sizeof(tl_tcp_hdr_t) ? rx_header(ctx, peer) : 0;
    }
    peer->rx_got += body;
    if (peer->rx_got < peer->rx_len)
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
            return n + peer_lost(ctx, peer, "receive", errno);
        }
        if (r == 0)
            return n + peer_lost(ctx, peer, "receive", 0);
        n += rx_consume(ctx, peer, (size_t)r);
        if ((size_t)r < want)
            break; /* drained for now; epoll is level-triggered */
    }
    return n;
}

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
    if (!ctx->connected && peer != ctx->rank && ctx->fatal == CHORUS_OK) {
        chorus_error("rank %d: tcp %s to peer %d before set_peers succeeded", ctx->rank,
                     what, peer);
        return CHORUS_ERR_INVALID_ARG;
    }
    return CHORUS_OK;
}

static void req_init(tl_req_t *req, int peer, uint32_t space, uint64_t tag, void *buf,
                     size_t capacity)
{
    req->done = 0;
    req->status = CHORUS_OK;
    req->length = 0;
    req->next = NULL;
    req->peer = peer;
    req->space = space;
    req->tag = tag;
    req->buf = buf;
    req->capacity = capacity;
    req->offset = 0;
}

/* Later posts to a lost peer fail at once, with the status that lost it. */
static chorus_status_t post_failed(tl_ctx_t *ctx, tl_tcp_peer_t *peer, tl_req_t *req)
{
    chorus_status_t status = ctx->fatal != CHORUS_OK ? ctx->fatal : peer->failed;

    if (status != CHORUS_OK)
        tl_tcp_req_complete(req, status, 0);
    return status;
}

/* A send to this rank itself: delivered by copy, no socket involved. */
static chorus_status_t send_self(tl_ctx_t *ctx, tl_tcp_peer_t *self, tl_req_t *req)
{
    int ctrl = (req->tag & TL_TAG_CTRL) != 0;
    tl_req_t *recv = ctrl ? NULL : reqq_take_tag(&self->postq, req->space, req->tag);

    if (recv != NULL) {
        if (req->capacity > recv->capacity) {
            log_truncated(ctx, ctx->rank, req->tag, req->capacity, recv->capacity);
            tl_tcp_req_complete(recv, CHORUS_ERR_TRUNCATED, 0);
        } else {
            if (req->capacity > 0)
                memcpy(recv->buf, req->buf, req->capacity);
            tl_tcp_req_complete(recv, CHORUS_OK, req->capacity);
        }
    } else {
        tl_tcp_ue_t *ue = ue_alloc(ctx, req->space, req->tag, req->capacity);

        if (ue == NULL) {
            chorus_error("rank %d: no memory for a %zu-byte message to itself", ctx->rank,
                         req->capacity);
            tl_tcp_req_complete(req, CHORUS_ERR_NO_MEMORY, 0);
            return CHORUS_ERR_NO_MEMORY;
        }
        if (req->capacity > 0)
            memcpy(ue->data, req->buf, req->capacity);
        ue->complete = 1;
        if (ctrl)
            ctrl_deliver(ctx, ctx->rank, ue);
        else
            ue_push(self, ue);
    }
    tl_tcp_req_complete(req, CHORUS_OK, req->capacity);
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
    req_init(req, peer_rank, space, tag, (void *)(uintptr_t)buf, len);
    peer = &ctx->peers[peer_rank];
    status = post_failed(ctx, peer, req);
    if (status != CHORUS_OK)
        return status;
    if (peer_rank == ctx->rank)
        return send_self(ctx, peer, req);
    reqq_push(&peer->sendq, req);
    if (peer->sendq.head == req) {
        tl_tcp_header_encode(&peer->tx_hdr, space, tag, len);
        ctx->deferred += peer_update_events(ctx, peer);
    }
    return CHORUS_OK;
}

/* A receive matched a message that arrived (at least in part) before it. */
static void recv_unexpected(tl_ctx_t *ctx, tl_tcp_peer_t *peer, tl_tcp_ue_t *ue,
                            tl_req_t *req)
{
    if (ue->length > req->capacity) {
        log_truncated(ctx, peer->rank, ue->tag, ue->length, req->capacity);
        if (ue == peer->rx_ue) {
            peer->rx_ue = NULL;
            peer->rx_state = TL_TCP_RX_DISCARD;
        }
        tl_tcp_req_complete(req, CHORUS_ERR_TRUNCATED, 0);
        ctx->deferred++;
    } else if (ue == peer->rx_ue) {
        /* Still arriving: move what came so far; the rest lands in place. */
        memcpy(req->buf, ue->data, (size_t)peer->rx_got);
        peer->rx_ue = NULL;
        peer->rx_req = req;
    } else {
        if (ue->length > 0)
            memcpy(req->buf, ue->data, (size_t)ue->length);
        tl_tcp_req_complete(req, CHORUS_OK, (size_t)ue->length);
        ctx->deferred++;
    }
    ue_release(ctx, ue);
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
    req_init(req, peer_rank, space, tag, buf, capacity);
    peer = &ctx->peers[peer_rank];
    ue = ue_take_tag(peer, space, tag, 0);
    if (ue != NULL) {
        recv_unexpected(ctx, peer, ue, req);
        return CHORUS_OK;
    }
    status = post_failed(ctx, peer, req);
    if (status != CHORUS_OK)
        return status;
    reqq_push(&peer->postq, req);
    return CHORUS_OK;
}
