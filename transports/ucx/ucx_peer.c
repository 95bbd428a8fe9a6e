/*
 * UCX transport: endpoints, the handshake that proves the job key, and
 * peers that fail (refused, silent, lost, or closing).
 */
#include "transports/ucx/ucx.h"

#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "util/sha256.h"
#include "util/time.h"

/* UCX's error callback runs inside progress: record it, act afterwards. */
static void ep_error_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    tl_ucx_peer_t *peer = arg;

    if (peer->ep == ep && peer->ep_error == UCS_OK) {
        peer->ep_error = status;
        peer->ctx->ep_errors++;
    }
}

chorus_status_t tl_ucx_ep(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer)
{
    ucp_ep_params_t params = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .address = (const ucp_address_t *)peer->addr,
        .err_mode = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler = {.cb = ep_error_cb, .arg = peer},
    };
    ucs_status_t st;

    if (peer->ep != NULL)
        return CHORUS_OK;
    st = ucp_ep_create(ctx->worker, &params, &peer->ep);
    if (st != UCS_OK) {
        peer->ep = NULL;
        chorus_error("rank %d: ucx: no endpoint to peer %d: %s", ctx->rank, peer->rank,
                     ucs_status_string(st));
        return CHORUS_ERR_PEER_FAILED;
    }
    return CHORUS_OK;
}

void tl_ucx_ep_close(tl_ucx_ctx_t *ctx, ucp_ep_h ep)
{
    ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                 .flags = UCP_EP_CLOSE_FLAG_FORCE};
    ucs_status_ptr_t sp = ucp_ep_close_nbx(ep, &param);

    if (sp == NULL || UCS_PTR_IS_ERR(sp))
        return;
    if (ctx->nclosing == ctx->closing_cap) {
        int cap = ctx->closing_cap ? 2 * ctx->closing_cap : 8;
        void **grown = realloc(ctx->closing, (size_t)cap * sizeof(*grown));

        if (grown == NULL) {
            /* Cannot track it: wait for it here, it does not need the peer. */
            while (ucp_request_check_status(sp) == UCS_INPROGRESS)
                ucp_worker_progress(ctx->worker);
            ucp_request_free(sp);
            return;
        }
        ctx->closing = grown;
        ctx->closing_cap = cap;
    }
    ctx->closing[ctx->nclosing++] = sp;
}

int tl_ucx_closing_reap(tl_ucx_ctx_t *ctx)
{
    int kept = 0;

    for (int i = 0; i < ctx->nclosing; i++) {
        if (ucp_request_check_status(ctx->closing[i]) == UCS_INPROGRESS)
            ctx->closing[kept++] = ctx->closing[i];
        else
            ucp_request_free(ctx->closing[i]);
    }
    ctx->nclosing = kept;
    return kept;
}

chorus_status_t tl_ucx_connect(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer)
{
    uint8_t mac[TL_UCX_MAC_BYTES];
    chorus_status_t status = tl_ucx_ep(ctx, peer);

    if (status == CHORUS_OK) {
        tl_ucx_mac(ctx, "hello", peer->nonce, (uint32_t)ctx->rank, (uint32_t)peer->rank, mac);
        status = tl_ucx_post_ctl(ctx, peer, TL_UCX_HELLO, 0, mac);
    }
    if (status != CHORUS_OK) {
        tl_ucx_peer_fail(ctx, peer, status);
        return status;
    }
    peer->state = TL_UCX_PEER_CONNECTING;
    peer->deadline = chorus__now() + ctx->timeout_s;
    ctx->connecting++;
    tl_ucx_timer_by(ctx, peer->deadline);
    return CHORUS_OK;
}

static void peer_up(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer)
{
    if (peer->state == TL_UCX_PEER_CONNECTING)
        ctx->connecting--;
    peer->state = TL_UCX_PEER_UP;
    tl_ucx_flush_sendq(ctx, peer);
}

static int mac_is(const tl_ucx_msg_t *msg, const uint8_t expect[TL_UCX_MAC_BYTES])
{
    return msg->desc == NULL && msg->length == TL_UCX_MAC_BYTES &&
           chorus__mac_equal(msg->data, expect, TL_UCX_MAC_BYTES);
}

static void hello_recv(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer, const tl_ucx_msg_t *msg)
{
    uint8_t mac[TL_UCX_MAC_BYTES];

    tl_ucx_mac(ctx, "hello", ctx->nonce, (uint32_t)peer->rank, (uint32_t)ctx->rank, mac);
    if (!mac_is(msg, mac)) {
        ctx->stats.dropped++;
        chorus_warn("rank %d: ucx: a hello claiming to be rank %d does not prove the job key; "
                    "rejected", ctx->rank, peer->rank);
        if (tl_ucx_ep(ctx, peer) == CHORUS_OK)
            tl_ucx_post_ctl(ctx, peer, TL_UCX_REJECT, 0, NULL);
        return;
    }
    if (tl_ucx_ep(ctx, peer) != CHORUS_OK) {
        tl_ucx_peer_fail(ctx, peer, CHORUS_ERR_PEER_FAILED);
        return;
    }
    tl_ucx_mac(ctx, "ack", peer->nonce, (uint32_t)peer->rank, (uint32_t)ctx->rank, mac);
    if (tl_ucx_post_ctl(ctx, peer, TL_UCX_ACK, 0, mac) != CHORUS_OK) {
        tl_ucx_peer_fail(ctx, peer, CHORUS_ERR_NO_MEMORY);
        return;
    }
    if (peer->state != TL_UCX_PEER_UP)
        peer_up(ctx, peer);
}

void tl_ucx_handshake_recv(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer, const tl_ucx_msg_t *msg)
{
    uint8_t mac[TL_UCX_MAC_BYTES];

    switch (msg->hdr.kind) {
    case TL_UCX_HELLO:
        hello_recv(ctx, peer, msg);
        return;
    case TL_UCX_ACK:
        if (peer->state == TL_UCX_PEER_IDLE) {
            ctx->stats.dropped++;   /* we never said hello */
            return;
        }
        tl_ucx_mac(ctx, "ack", ctx->nonce, (uint32_t)ctx->rank, (uint32_t)peer->rank, mac);
        if (!mac_is(msg, mac)) {
            chorus_error("rank %d: ucx: peer %d's answer to this rank's hello does not prove "
                         "the job key", ctx->rank, peer->rank);
            tl_ucx_peer_fail(ctx, peer, CHORUS_ERR_AUTH);
        } else if (peer->state == TL_UCX_PEER_CONNECTING) {
            peer_up(ctx, peer);
        }
        return;
    case TL_UCX_REJECT:
        if (peer->state != TL_UCX_PEER_CONNECTING) {
            ctx->stats.dropped++;
            return;
        }
        chorus_error("rank %d: ucx: peer %d rejected this rank's hello: the two hold "
                     "different job keys", ctx->rank, peer->rank);
        tl_ucx_peer_fail(ctx, peer, CHORUS_ERR_AUTH);
        return;
    default:
        return;
    }
}

void tl_ucx_peer_fail_reqs(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer, chorus_status_t status)
{
    ctx->completed += tl_reqq_fail(&peer->sendq, status) +
                      tl_reqq_fail(&peer->recvq, status) +
                      tl_reqq_fail(&peer->rtsq, status) +
                      tl_reqq_fail(&peer->rdvq, status);
}

/* Rendezvous announcements of a closed peer go; its eager messages stay to be received. */
static void ueq_drop_rndv(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer)
{
    tl_ucx_msg_t **link = &peer->ueq.head, *msg;

    peer->ueq.tail = NULL;
    while ((msg = *link) != NULL) {
        if (msg->desc != NULL || msg->hdr.kind == TL_UCX_RTS) {
            *link = msg->next;
            tl_ucx_msg_drop(ctx, msg);
        } else {
            peer->ueq.tail = msg;
            link = &msg->next;
        }
    }
}

void tl_ucx_peer_fail(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer, chorus_status_t status)
{
    if (peer->state == TL_UCX_PEER_CLOSED)
        return;
    if (peer->state == TL_UCX_PEER_CONNECTING)
        ctx->connecting--;
    peer->state = TL_UCX_PEER_CLOSED;
    peer->failed = status;
    /* Closing the endpoint ends our operations on it; UCX calls them back with errors. */
    if (peer->ep != NULL) {
        tl_ucx_ep_close(ctx, peer->ep);
        peer->ep = NULL;
    }
    tl_ucx_peer_fail_reqs(ctx, peer, status);
    tl_ucx_ops_abandon(ctx, peer, status, 0);
    ueq_drop_rndv(ctx, peer);
}

void tl_ucx_peer_bye(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer)
{
    if (peer->state == TL_UCX_PEER_CLOSED)
        return;
    if (peer->state == TL_UCX_PEER_CONNECTING)
        ctx->connecting--;
    peer->state = TL_UCX_PEER_CLOSED;
    peer->failed = CHORUS_ERR_PEER_FAILED;
    tl_ucx_peer_fail_reqs(ctx, peer, peer->failed);
    ueq_drop_rndv(ctx, peer);
    /* The answer closes the endpoint once it has left (op_done); without one, close now. */
    if (peer->ep == NULL || tl_ucx_post_ctl(ctx, peer, TL_UCX_BYE_ACK, 0, NULL) != CHORUS_OK) {
        if (peer->ep != NULL) {
            tl_ucx_ep_close(ctx, peer->ep);
            peer->ep = NULL;
        }
        tl_ucx_ops_abandon(ctx, peer, peer->failed, 0);
    }
}

void tl_ucx_peers_check(tl_ucx_ctx_t *ctx, double now)
{
    double next = 0;

    if (ctx->peers == NULL)
        return;
    if (ctx->closes_due) {
        ctx->closes_due = 0;
        for (int r = 0; r < ctx->size; r++) {
            tl_ucx_peer_t *peer = &ctx->peers[r];

            if (!peer->close_due)
                continue;
            peer->close_due = 0;
            if (peer->ep != NULL) {
                tl_ucx_ep_close(ctx, peer->ep);
                peer->ep = NULL;
            }
            tl_ucx_ops_abandon(ctx, peer, peer->failed, 0);
        }
    }
    if (ctx->ep_errors > 0) {
        ctx->ep_errors = 0;
        for (int r = 0; r < ctx->size; r++) {
            tl_ucx_peer_t *peer = &ctx->peers[r];
            ucs_status_t st = peer->ep_error;

            if (st == UCS_OK)
                continue;
            peer->ep_error = UCS_OK;
            if (peer->state == TL_UCX_PEER_CLOSED)
                continue;
            chorus_error("rank %d: ucx: peer %d is lost: %s", ctx->rank, r,
                         ucs_status_string(st));
            tl_ucx_peer_fail(ctx, peer, st == UCS_ERR_NO_MEMORY ? CHORUS_ERR_NO_MEMORY
                                                                : CHORUS_ERR_PEER_FAILED);
        }
    }
    for (int r = 0; ctx->connecting > 0 && r < ctx->size; r++) {
        tl_ucx_peer_t *peer = &ctx->peers[r];

        if (peer->state != TL_UCX_PEER_CONNECTING)
            continue;
        if (now >= peer->deadline) {
            chorus_error("rank %d: ucx: peer %d did not answer this rank's hello within "
                         "%.1f s (CHORUS_TIMEOUT)", ctx->rank, r, ctx->timeout_s);
            tl_ucx_peer_fail(ctx, peer, CHORUS_ERR_TIMEOUT);
        } else if (next == 0 || peer->deadline < next) {
            next = peer->deadline;
        }
    }
    if (next > 0)
        tl_ucx_timer_by(ctx, next);
}
