/*
 * UCX transport: sends and receives, the active-message callback, matching
 * in arrival order, and the window's credit.
 */
#include "transports/ucx/ucx.h"

#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "util/sha256.h"

/* ---- requests ----------------------------------------------------------------- */

void tl_ucx_req_complete(tl_ucx_ctx_t *ctx, tl_req_t *req, chorus_status_t status,
                         size_t length)
{
    tl_req_complete(req, status, length);
    ctx->completed++;
}

static void protocol_fail(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer, const char *why)
{
    chorus_error("rank %d: ucx: peer %d broke the protocol: %s", ctx->rank, peer->rank, why);
    tl_ucx_peer_fail(ctx, peer, CHORUS_ERR_PROTOCOL);
}

/* ---- operations in flight ------------------------------------------------------- */

static tl_ucx_op_t *op_new(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer, tl_req_t *req)
{
    tl_ucx_op_t *op = calloc(1, sizeof(*op));

    if (op == NULL)
        return NULL;
    op->ctx = ctx;
    op->peer = peer;
    op->req = req;
    op->next = ctx->ops;
    if (ctx->ops != NULL)
        ctx->ops->prev = op;
    ctx->ops = op;
    return op;
}

static chorus_status_t status_of(const tl_ucx_peer_t *peer, ucs_status_t st)
{
    if (st == UCS_OK)
        return CHORUS_OK;
    return peer->failed != CHORUS_OK ? peer->failed : CHORUS_ERR_PEER_FAILED;
}

/* An operation is over: its request (if still attached) completes, its memory goes. */
static void op_done(tl_ucx_op_t *op, ucs_status_t st)
{
    tl_ucx_ctx_t *ctx = op->ctx;

    /* A BYE_ACK has left: the endpoint to the peer that said BYE goes, after this callback. */
    if (op->close_after) {
        op->peer->close_due = 1;
        ctx->closes_due = 1;
    }

    if (op->req != NULL && op->part) {
        /* One fragment of a chorus rendezvous: the send is over with its last. */
        if (st != UCS_OK && op->req->status == CHORUS_OK)
            op->req->status = status_of(op->peer, st);
        op->req->moved += op->length;
        if (op->req->moved == op->req->capacity)
            tl_ucx_req_complete(ctx, op->req, op->req->status,
                                op->req->status == CHORUS_OK ? op->req->capacity : 0);
    } else if (op->req != NULL) {
        tl_ucx_req_complete(ctx, op->req, status_of(op->peer, st), st == UCS_OK ? op->length : 0);
    }
    if (op->ucp != NULL)
        ucp_request_free(op->ucp);
    if (op->prev != NULL)
        op->prev->next = op->next;
    else
        ctx->ops = op->next;
    if (op->next != NULL)
        op->next->prev = op->prev;
    free(op);
}

void tl_ucx_ops_abandon(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer, chorus_status_t status,
                        int recvs_too)
{
    tl_ucx_op_t *next;

    /* A cancel may call its operation back at once, which frees it: step ahead first. */
    for (tl_ucx_op_t *op = ctx->ops; op != NULL; op = next) {
        next = op->next;
        if ((peer != NULL && op->peer != peer) || op->req == NULL)
            continue;
        if (op->req->done) {
            op->req = NULL;     /* another fragment of its send failed it already */
            continue;
        }
        if (op->recv && !recvs_too) {
            if (op->ucp != NULL)
                ucp_request_cancel(ctx->worker, op->ucp);
            continue;
        }
        tl_ucx_req_complete(ctx, op->req, status, 0);
        op->req = NULL;
    }
}

/*
 * UCX called an operation back. It may do so from inside the call that
 * starts it (a rendezvous receive from a peer already gone) and still return
 * the request: then op_started finishes it, once.
 */
static void op_called_back(tl_ucx_op_t *op, void *request, ucs_status_t st)
{
    op->ucp = request;
    if (op->posting) {
        op->early = 1;
        op->early_status = st;
        return;
    }
    op_done(op, st);
}

static void send_cb(void *request, ucs_status_t st, void *user_data)
{
    op_called_back(user_data, request, st);
}

static void recv_cb(void *request, ucs_status_t st, size_t length, void *user_data)
{
    (void)length;   /* the announced length, kept in op */
    op_called_back(user_data, request, st);
}

/* What ucp_*_nbx returned: done now, failed now, or in flight. */
static void op_started(tl_ucx_op_t *op, ucs_status_ptr_t sp)
{
    op->posting = 0;
    if (op->early) {
        if (op->ucp == NULL && sp != NULL && !UCS_PTR_IS_ERR(sp))
            op->ucp = sp;
        op_done(op, op->early_status);
    } else if (sp == NULL)
        op_done(op, UCS_OK);
    else if (UCS_PTR_IS_ERR(sp)) {
        chorus_debug("rank %d: ucx: an operation to peer %d failed at once: %s", op->ctx->rank,
                     op->peer->rank, ucs_status_string(UCS_PTR_STATUS(sp)));
        op_done(op, UCS_PTR_STATUS(sp));
    } else
        op->ucp = sp;
}

/* ---- sending -------------------------------------------------------------------- */

static chorus_status_t post(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer, tl_ucx_op_t *op,
                            const tl_ucx_msg_hdr_t *hdr, const void *buf, size_t len,
                            uint32_t flags)
{
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FIELD_FLAGS,
        .cb.send = send_cb,
        .user_data = op,
        .flags = flags,
    };

    tl_ucx_hdr_encode(&op->hdr, hdr);
    op->length = len;
    op->posting = 1;
    op_started(op, ucp_am_send_nbx(peer->ep, TL_UCX_AM_ID, &op->hdr, sizeof(op->hdr), buf, len,
                                   &param));
    (void)ctx;
    return CHORUS_OK;
}

chorus_status_t tl_ucx_post_ctl(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer, tl_ucx_kind_t kind,
                                uint64_t value, const uint8_t *mac)
{
    tl_ucx_msg_hdr_t hdr = {.kind = kind, .from = (uint32_t)ctx->rank, .value = value};
    tl_ucx_op_t *op;

    if (peer->ep == NULL)
        return CHORUS_ERR_PEER_FAILED;
    op = op_new(ctx, peer, NULL);
    if (op == NULL)
        return CHORUS_ERR_NO_MEMORY;
    if (kind > TL_UCX_REJECT)
        memcpy(hdr.token, peer->token_out, TL_UCX_TOKEN_BYTES);
    if (mac != NULL)
        memcpy(op->mac, mac, TL_UCX_MAC_BYTES);
    op->close_after = kind == TL_UCX_BYE_ACK;
    return post(ctx, peer, op, &hdr, mac != NULL ? op->mac : NULL,
                mac != NULL ? TL_UCX_MAC_BYTES : 0, UCP_AM_SEND_FLAG_EAGER);
}

/* A message announced by chorus's rendezvous waits for its CTS in the peer's rtsq. */
static chorus_status_t post_rts(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer, tl_req_t *req,
                                tl_ucx_msg_hdr_t *hdr)
{
    tl_ucx_op_t *op = op_new(ctx, peer, NULL);

    if (op == NULL) {
        tl_ucx_req_complete(ctx, req, CHORUS_ERR_NO_MEMORY, 0);
        return CHORUS_ERR_NO_MEMORY;
    }
    hdr->kind = TL_UCX_RTS;
    hdr->value = req->capacity;
    req->id = hdr->seq;
    req->moved = 0;
    tl_reqq_push(&peer->rtsq, req);
    return post(ctx, peer, op, hdr, NULL, 0, UCP_AM_SEND_FLAG_EAGER);
}

/* A send on an UP peer: eagerly against the window where it fits, else by rendezvous. */
static chorus_status_t post_data(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer, tl_req_t *req)
{
    int ctrl = (req->tag & TL_TAG_CTRL) != 0;
    size_t len = req->capacity;
    tl_ucx_msg_hdr_t hdr = {.kind = TL_UCX_DATA, .from = (uint32_t)ctx->rank,
                            .space = req->space, .tag = req->tag, .seq = peer->seq_out++};
    uint32_t flags = 0;
    tl_ucx_op_t *op;

    memcpy(hdr.token, peer->token_out, TL_UCX_TOKEN_BYTES);
    if (ctrl) {
        flags = UCP_AM_SEND_FLAG_EAGER;
    } else if (len > 0 && len <= ctx->cfg.eager_bytes && len <= peer->credit) {
        hdr.charged = 1;
        flags = UCP_AM_SEND_FLAG_EAGER;
        peer->credit -= len;
        peer->charged_out += len;
        ctx->stats.eager_bytes += len;
    } else if (len > 0) {
        ctx->stats.rndv_sent++;
        if (ctx->rndv_chorus)
            return post_rts(ctx, peer, req, &hdr);
        flags = UCP_AM_SEND_FLAG_RNDV;
    }
    op = op_new(ctx, peer, req);
    if (op == NULL) {
        tl_ucx_req_complete(ctx, req, CHORUS_ERR_NO_MEMORY, 0);
        return CHORUS_ERR_NO_MEMORY;
    }
    return post(ctx, peer, op, &hdr, req->buf, len, flags);
}

/* CTS for the announced message seq: its payload goes in RDATA fragments (none: dropped). */
static void cts_recv(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer, uint64_t seq, uint64_t asked)
{
    tl_req_t *req = tl_reqq_take_id(&peer->rtsq, seq);

    if (req == NULL || (asked != 0 && asked != req->capacity)) {
        if (req != NULL)
            tl_ucx_req_complete(ctx, req, CHORUS_ERR_PROTOCOL, 0);
        protocol_fail(ctx, peer, req == NULL ? "a CTS for no message announced"
                                             : "a CTS for another length than announced");
        return;
    }
    if (asked == 0) {
        /* The receive was too short: it failed there, the send is over here. */
        tl_ucx_req_complete(ctx, req, CHORUS_OK, req->capacity);
        return;
    }
    for (uint64_t off = 0; off < asked; off += TL_UCX_FRAG) {
        tl_ucx_msg_hdr_t hdr = {.kind = TL_UCX_RDATA, .from = (uint32_t)ctx->rank, .seq = seq,
                                .tag = off};
        size_t n = asked - off < TL_UCX_FRAG ? (size_t)(asked - off) : TL_UCX_FRAG;
        tl_ucx_op_t *op = op_new(ctx, peer, req);

        if (op == NULL) {
            /* The fragments posted complete; the rest count as failed now. */
            req->status = CHORUS_ERR_NO_MEMORY;
            req->moved += asked - off;
            if (req->moved == req->capacity)
                tl_ucx_req_complete(ctx, req, req->status, 0);
            return;
        }
        op->part = 1;
        memcpy(hdr.token, peer->token_out, TL_UCX_TOKEN_BYTES);
        post(ctx, peer, op, &hdr, (const char *)req->buf + off, n, UCP_AM_SEND_FLAG_EAGER);
    }
}

void tl_ucx_flush_sendq(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer)
{
    tl_req_t *req;

    while (peer->state == TL_UCX_PEER_UP && (req = tl_reqq_pop(&peer->sendq)) != NULL)
        post_data(ctx, peer, req);
}

static chorus_status_t check_post(tl_ucx_ctx_t *ctx, const char *what, int peer,
                                  const void *buf, size_t len, const tl_req_t *req)
{
    if (ctx == NULL || req == NULL || peer < 0 || peer >= ctx->size || ctx->peers == NULL ||
        (buf == NULL && len > 0) || len > TL_UCX_MAX_MSG) {
        chorus_error("rank %d: ucx: %s: bad arguments (peer %d of %d, %zu bytes at %p, "
                     "request %p, peers %s)", ctx != NULL ? ctx->rank : -1, what, peer,
                     ctx != NULL ? ctx->size : 0, len, buf, (const void *)req,
                     ctx != NULL && ctx->peers != NULL ? "set" : "not set");
        return CHORUS_ERR_INVALID_ARG;
    }
    return CHORUS_OK;
}

/* A post that cannot go ahead completes its request with status, which it returns too. */
static chorus_status_t refuse(tl_ucx_ctx_t *ctx, tl_req_t *req, chorus_status_t status)
{
    tl_ucx_req_complete(ctx, req, status, 0);
    return status;
}

chorus_status_t tl_ucx_send_nb(tl_ctx_t *tctx, int rank, uint32_t space, uint64_t tag,
                               const void *buf, size_t len, tl_req_t *req)
{
    tl_ucx_ctx_t *ctx = tl_ucx_of(tctx);
    tl_ucx_peer_t *peer;
    chorus_status_t status = check_post(ctx, "send", rank, buf, len, req);

    if (status != CHORUS_OK)
        return status;
    tl_req_init(req, rank, space, tag, (void *)buf, len);
    if ((tag & TL_TAG_CTRL) && len > TL_CTRL_MAX) {
        chorus_error("rank %d: ucx: a control message of %zu bytes exceeds %d", ctx->rank, len,
                     TL_CTRL_MAX);
        return refuse(ctx, req, CHORUS_ERR_INVALID_ARG);
    }
    if (ctx->failed != CHORUS_OK)
        return refuse(ctx, req, ctx->failed);
    peer = &ctx->peers[rank];
    if (peer->state == TL_UCX_PEER_CLOSED)
        return refuse(ctx, req, peer->failed);
    if (peer->state == TL_UCX_PEER_UP)
        return post_data(ctx, peer, req);
    if (peer->state == TL_UCX_PEER_IDLE) {
        status = tl_ucx_connect(ctx, peer);
        if (status != CHORUS_OK)
            return refuse(ctx, req, status);
    }
    tl_reqq_push(&peer->sendq, req);
    return CHORUS_OK;
}

/* ---- receiving ------------------------------------------------------------------- */

static void ue_account(tl_ucx_ctx_t *ctx, const tl_ucx_msg_t *msg, int add)
{
    if (msg->desc != NULL || msg->hdr.kind != TL_UCX_DATA)
        return;
    if (add) {
        ctx->stats.ue_bytes += msg->length;
        if (ctx->stats.ue_bytes > ctx->stats.ue_peak)
            ctx->stats.ue_peak = ctx->stats.ue_bytes;
    } else {
        ctx->stats.ue_bytes -= msg->length;
    }
}

/* Credit goes back to a peer once this many of its bytes were consumed. */
static uint64_t credit_batch(const tl_ucx_ctx_t *ctx)
{
    return ctx->cfg.window_bytes / 4 ? ctx->cfg.window_bytes / 4 : 1;
}

/* Eager bytes of peer consumed here: returned in CREDIT messages a quarter window at a time. */
static void credit_owe(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer, int charged, size_t len)
{
    if (!charged || len == 0)
        return;
    peer->owed += len;
    if (peer->owed >= credit_batch(ctx) && peer->state != TL_UCX_PEER_CLOSED && peer->ep != NULL &&
        tl_ucx_post_ctl(ctx, peer, TL_UCX_CREDIT, peer->owed, NULL) == CHORUS_OK) {
        ctx->stats.credit_sent++;
        peer->owed = 0;
    }
}

void tl_ucx_msg_drop(tl_ucx_ctx_t *ctx, tl_ucx_msg_t *msg)
{
    if (msg->desc != NULL)
        ucp_am_data_release(ctx->worker, msg->desc);
    free(msg);
}


/* Ask for the payload of the announced message seq (asked 0: it was dropped). */
static void cts_send(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer, uint64_t seq, uint64_t asked)
{
    tl_ucx_msg_hdr_t hdr = {.kind = TL_UCX_CTS, .from = (uint32_t)ctx->rank, .seq = seq,
                            .value = asked};
    tl_ucx_op_t *op;

    if (peer->ep == NULL || (op = op_new(ctx, peer, NULL)) == NULL) {
        if (peer->state != TL_UCX_PEER_CLOSED)
            tl_ucx_peer_fail(ctx, peer, CHORUS_ERR_NO_MEMORY);
        return;
    }
    memcpy(hdr.token, peer->token_out, TL_UCX_TOKEN_BYTES);
    post(ctx, peer, op, &hdr, NULL, 0, UCP_AM_SEND_FLAG_EAGER);
}

/*
 * An RDATA fragment into the receive it belongs to, which completes with its
 * last. Fragments come in order (one endpoint, one sender): one at another
 * offset, too long, or of no receive here is refused (0).
 */
static int rdata_place(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer, uint64_t seq, uint64_t off,
                       const void *data, size_t length)
{
    tl_req_t *req;

    for (req = peer->rdvq.head; req != NULL && req->id != seq; req = req->next)
        ;
    if (req == NULL || off != req->moved || length == 0 || length > req->offset - off)
        return 0;
    memcpy((char *)req->buf + off, data, length);
    req->moved += length;
    if (req->moved < req->offset)
        return 1;
    tl_reqq_take_id(&peer->rdvq, seq);
    tl_ucx_req_complete(ctx, req, CHORUS_OK, req->offset);
    return 1;
}

/* A message meets its receive: the payload moves (or the receive fails as truncated). */
static void deliver(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer, tl_ucx_msg_t *msg, tl_req_t *req)
{
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.recv_am = recv_cb,
    };
    tl_ucx_op_t *op;

    if (!tl_msg_fits(ctx->rank, peer->rank, msg->hdr.tag, msg->length, req)) {
        tl_ucx_req_complete(ctx, req, CHORUS_ERR_TRUNCATED, 0);
        if (msg->hdr.kind == TL_UCX_RTS)
            cts_send(ctx, peer, msg->hdr.seq, 0);
    } else if (msg->hdr.kind == TL_UCX_RTS) {
        /* Its payload comes in RDATA, placed as it arrives (rdata_place). */
        req->id = msg->hdr.seq;
        req->offset = msg->length;
        req->moved = 0;
        tl_reqq_push(&peer->rdvq, req);
        cts_send(ctx, peer, msg->hdr.seq, msg->length);
    } else if (msg->desc == NULL) {
        if (msg->length > 0)
            memcpy(req->buf, msg->data, msg->length);
        tl_ucx_req_complete(ctx, req, CHORUS_OK, msg->length);
    } else if ((op = op_new(ctx, peer, req)) == NULL) {
        tl_ucx_req_complete(ctx, req, CHORUS_ERR_NO_MEMORY, 0);
    } else {
        op->recv = 1;
        op->length = msg->length;
        op->posting = 1;
        param.user_data = op;
        op_started(op, ucp_am_recv_data_nbx(ctx->worker, msg->desc, req->buf, msg->length,
                                            &param));
        msg->desc = NULL;   /* UCX's now */
    }
    credit_owe(ctx, peer, msg->hdr.charged, msg->length);
    tl_ucx_msg_drop(ctx, msg);
}

chorus_status_t tl_ucx_recv_nb(tl_ctx_t *tctx, int rank, uint32_t space, uint64_t tag,
                               void *buf, size_t capacity, tl_req_t *req)
{
    tl_ucx_ctx_t *ctx = tl_ucx_of(tctx);
    tl_ucx_peer_t *peer;
    tl_ucx_msg_t *prev = NULL;
    chorus_status_t status = check_post(ctx, "receive", rank, buf, capacity, req);

    if (status != CHORUS_OK)
        return status;
    tl_req_init(req, rank, space, tag, buf, capacity);
    if (ctx->failed != CHORUS_OK)
        return refuse(ctx, req, ctx->failed);
    peer = &ctx->peers[rank];
    /* A peer that closed may have sent messages before: they are still received. */
    for (tl_ucx_msg_t *msg = peer->ueq.head; msg != NULL; prev = msg, msg = msg->next) {
        if (msg->hdr.space != space || !tl_tag_meets(msg->hdr.tag, tag))
            continue;
        if (prev != NULL)
            prev->next = msg->next;
        else
            peer->ueq.head = msg->next;
        if (peer->ueq.tail == msg)
            peer->ueq.tail = prev;
        ue_account(ctx, msg, 0);
        deliver(ctx, peer, msg, req);
        return CHORUS_OK;
    }
    if (peer->state == TL_UCX_PEER_CLOSED)
        return refuse(ctx, req, peer->failed);
    tl_reqq_push(&peer->recvq, req);
    return CHORUS_OK;
}

/* ---- arrivals ---------------------------------------------------------------------- */

static void msgq_push(tl_ucx_msgq_t *q, tl_ucx_msg_t *msg)
{
    msg->next = NULL;
    if (q->tail != NULL)
        q->tail->next = msg;
    else
        q->head = msg;
    q->tail = msg;
}

static tl_ucx_msg_t *msgq_pop(tl_ucx_msgq_t *q)
{
    tl_ucx_msg_t *msg = q->head;

    if (msg != NULL) {
        q->head = msg->next;
        if (q->head == NULL)
            q->tail = NULL;
    }
    return msg;
}

static void dropped(tl_ucx_ctx_t *ctx, int from, const char *why)
{
    ctx->stats.dropped++;
    if (!ctx->warned) {
        ctx->warned = 1;
        chorus_warn("rank %d: ucx: dropped a message (claiming rank %d): %s; later ones are "
                    "logged at debug level", ctx->rank, from, why);
    } else {
        chorus_debug("rank %d: ucx: dropped a message (claiming rank %d): %s", ctx->rank, from,
                     why);
    }
}

/*
 * Eager DATA that meets a posted receive, while nothing recorded waits
 * before it: straight into the receive, from inside the callback (it makes
 * no UCX call). 1 when taken.
 */
static int deliver_now(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer, const tl_ucx_msg_hdr_t *hdr,
                       const void *data, size_t length)
{
    tl_req_t *req;

    if (ctx->arrived.head != NULL || peer->state == TL_UCX_PEER_CLOSED ||
        (hdr->tag & TL_TAG_CTRL) || hdr->seq != peer->seq_in ||
        (hdr->charged && peer->owed + length >= credit_batch(ctx)))
        return 0;
    req = tl_reqq_take(&peer->recvq, hdr->space, hdr->tag);
    if (req == NULL)
        return 0;
    if (!tl_msg_fits(ctx->rank, peer->rank, hdr->tag, length, req)) {
        tl_ucx_req_complete(ctx, req, CHORUS_ERR_TRUNCATED, 0);
    } else {
        if (length > 0)
            memcpy(req->buf, data, length);
        tl_ucx_req_complete(ctx, req, CHORUS_OK, length);
    }
    if (hdr->charged)
        peer->owed += length;   /* below a quarter window: no CREDIT to send now */
    peer->seq_in++;
    return 1;
}

ucs_status_t tl_ucx_am_recv(void *arg, const void *header, size_t header_length, void *data,
                            size_t length, const ucp_am_recv_param_t *param)
{
    tl_ucx_ctx_t *ctx = arg;
    int rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    tl_ucx_msg_hdr_t hdr;
    tl_ucx_peer_t *peer;
    tl_ucx_msg_t *msg;

    if (ctx->peers == NULL) {
        dropped(ctx, -1, "before set_peers");
        return UCS_OK;
    }
    if (tl_ucx_hdr_decode(header, header_length, ctx->size, &hdr) != CHORUS_OK) {
        dropped(ctx, -1, "malformed header");
        return UCS_OK;
    }
    /* A context that failed still hears the goodbyes of its closing. */
    if (ctx->failed != CHORUS_OK && hdr.kind != TL_UCX_BYE && hdr.kind != TL_UCX_BYE_ACK) {
        ctx->stats.dropped++;
        return UCS_OK;
    }
    peer = &ctx->peers[hdr.from];
    if (hdr.kind > TL_UCX_REJECT &&
        !chorus__mac_equal(hdr.token, peer->token_in, TL_UCX_TOKEN_BYTES)) {
        dropped(ctx, (int)hdr.from, "wrong token (not of this job, or not of this context)");
        return UCS_OK;
    }
    /* A charged message may still come by rendezvous: UCX chooses, above its own bounds. */
    if (length > TL_UCX_MAX_MSG || (rndv && hdr.kind != TL_UCX_DATA && hdr.kind != TL_UCX_RDATA) ||
        (hdr.kind == TL_UCX_RTS && length != 0)) {
        dropped(ctx, (int)hdr.from, "payload not as its kind allows");
        return UCS_OK;
    }
    if (hdr.kind == TL_UCX_DATA && !rndv && deliver_now(ctx, peer, &hdr, data, length))
        return UCS_OK;
    /* A fragment goes where its receive is, now; one that does not fit is for progress. */
    if (hdr.kind == TL_UCX_RDATA && !rndv && peer->state != TL_UCX_PEER_CLOSED &&
        rdata_place(ctx, peer, hdr.seq, hdr.tag, data, length))
        return UCS_OK;
    msg = malloc(sizeof(*msg) + (rndv ? 0 : length));
    if (msg == NULL) {
        /* Not to be lost silently: the peer fails once progress acts on it. */
        peer->ep_error = UCS_ERR_NO_MEMORY;
        ctx->ep_errors++;
        return UCS_OK;  /* a rendezvous descriptor goes back to UCX */
    }
    msg->hdr = hdr;
    /* An announcement carries no payload: its length is the message's. */
    msg->length = hdr.kind == TL_UCX_RTS ? hdr.value : length;
    msg->desc = rndv ? data : NULL;
    if (!rndv && length > 0)
        memcpy(msg->data, data, length);
    msgq_push(&ctx->arrived, msg);
    return rndv ? UCS_INPROGRESS : UCS_OK;
}


static void data_recv(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer, tl_ucx_msg_t *msg)
{
    tl_req_t *req;

    if (msg->hdr.seq != peer->seq_in) {
        protocol_fail(ctx, peer, "a message came out of order or one was lost");
        tl_ucx_msg_drop(ctx, msg);
        return;
    }
    peer->seq_in++;
    if (msg->hdr.tag & TL_TAG_CTRL) {
        if (msg->desc != NULL || msg->length > TL_CTRL_MAX || msg->hdr.charged ||
            msg->hdr.kind != TL_UCX_DATA) {
            protocol_fail(ctx, peer, "a control message that is not small and eager");
            tl_ucx_msg_drop(ctx, msg);
            return;
        }
        if (ctx->ctrl != NULL)
            ctx->ctrl(ctx->ctrl_arg, peer->rank, msg->hdr.space, msg->hdr.tag, msg->data,
                      msg->length);
        ctx->completed++;
        tl_ucx_msg_drop(ctx, msg);
        return;
    }
    req = tl_reqq_take(&peer->recvq, msg->hdr.space, msg->hdr.tag);
    if (req != NULL) {
        deliver(ctx, peer, msg, req);
        return;
    }
    ue_account(ctx, msg, 1);
    msgq_push(&peer->ueq, msg);
}

static void credit_recv(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer, uint64_t value)
{
    if (value > peer->charged_out) {
        protocol_fail(ctx, peer, "it returned more credit than it was sent");
        return;
    }
    peer->charged_out -= value;
    peer->credit += value;
    ctx->stats.credit_recv++;
}

void tl_ucx_arrivals(tl_ucx_ctx_t *ctx)
{
    tl_ucx_msg_t *msg;

    while ((msg = msgq_pop(&ctx->arrived)) != NULL) {
        tl_ucx_peer_t *peer = &ctx->peers[msg->hdr.from];

        if (peer->state == TL_UCX_PEER_CLOSED && msg->hdr.kind != TL_UCX_BYE_ACK) {
            ctx->stats.dropped++;
            tl_ucx_msg_drop(ctx, msg);
            continue;
        }
        switch (msg->hdr.kind) {
        case TL_UCX_DATA:
        case TL_UCX_RTS:
            data_recv(ctx, peer, msg);
            continue;   /* data_recv keeps or frees it */
        case TL_UCX_CTS:
            cts_recv(ctx, peer, msg->hdr.seq, msg->hdr.value);
            break;
        case TL_UCX_RDATA:
            /* A fragment by UCX's rendezvous, or one the callback could not place. */
            if (msg->desc != NULL ||
                !rdata_place(ctx, peer, msg->hdr.seq, msg->hdr.tag, msg->data, msg->length))
                protocol_fail(ctx, peer, "a fragment of no announced message, or out of place");
            break;
        case TL_UCX_CREDIT:
            credit_recv(ctx, peer, msg->hdr.value);
            break;
        case TL_UCX_BYE:
            chorus_debug("rank %d: ucx: peer %d closed its context", ctx->rank, peer->rank);
            tl_ucx_peer_bye(ctx, peer);
            break;
        case TL_UCX_BYE_ACK:
            peer->bye_acked = 1;
            break;
        default:
            tl_ucx_handshake_recv(ctx, peer, msg);
            break;
        }
        tl_ucx_msg_drop(ctx, msg);
    }
}
