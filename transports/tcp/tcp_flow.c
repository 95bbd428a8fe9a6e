/*
 * TCP transport flow control: the buffers of unexpected messages, the credit
 * that bounds them, and the rendezvous that carries what credit does not
 * cover (tcp.h describes the frames).
 *
 * A receiver holds, per peer, at most the window it granted in unexpected
 * eager data: the sender spends credit on every eager byte, and the receiver
 * gives it back only once the bytes have left its buffers (or went straight
 * into a posted receive). Everything else waits at the sender as an RTS that
 * costs the receiver one small record until a receive matches it.
 */
#include "transports/tcp/tcp.h"

#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "util/pages.h"

/* A cached buffer serves a message at most this many times smaller than it. */
#define UE_CACHE_MAX_WASTE 4

/* ---- Unexpected-message buffers --------------------------------------------- */

static void ue_account(tl_ctx_t *ctx, size_t bytes, int add)
{
    if (add) {
        ctx->stats.ue_bytes += bytes;
        if (ctx->stats.ue_bytes > ctx->stats.ue_peak)
            ctx->stats.ue_peak = ctx->stats.ue_bytes;
    } else {
        ctx->stats.ue_bytes -= bytes;
    }
}

static tl_tcp_ue_t *ue_from_cache(tl_ctx_t *ctx, uint64_t length)
{
    tl_tcp_ue_t *ue;
    int best = -1;

    for (int i = 0; i < ctx->ue_cached; i++) {
        size_t cap = ctx->ue_cache[i]->capacity;

        if (cap >= length && cap / UE_CACHE_MAX_WASTE <= length &&
            (best < 0 || cap < ctx->ue_cache[best]->capacity))
            best = i;
    }
    if (best < 0)
        return NULL;
    ue = ctx->ue_cache[best];
    ctx->ue_cache[best] = ctx->ue_cache[--ctx->ue_cached];
    ctx->ue_cached_bytes -= ue->capacity;
    return ue;
}

tl_tcp_ue_t *tl_tcp_ue_alloc(tl_ctx_t *ctx, uint32_t space, uint64_t tag, uint64_t length)
{
    tl_tcp_ue_t *ue = ue_from_cache(ctx, length);

    if (ue == NULL) {
        ue = chorus__pages_alloc(sizeof(*ue) + (size_t)length);
        if (ue == NULL)
            return NULL;
        ue->capacity = (size_t)length;
        ue_account(ctx, sizeof(*ue) + ue->capacity, 1);
    }
    ue->next = NULL;
    ue->space = space;
    ue->tag = tag;
    ue->length = length;
    ue->id = 0;
    ue->rts = 0;
    ue->credit = 0;
    ue->complete = (length == 0);
    ue->req = NULL;
    return ue;
}

tl_tcp_ue_t *tl_tcp_rts_alloc(tl_ctx_t *ctx, const tl_tcp_frame_t *frame)
{
    tl_tcp_ue_t *rec = calloc(1, sizeof(*rec));

    if (rec == NULL)
        return NULL;
    ue_account(ctx, sizeof(*rec), 1);
    rec->space = frame->space;
    rec->tag = frame->tag;
    rec->length = frame->length;
    rec->id = frame->id;
    rec->rts = 1;
    return rec;
}

static void ue_free(tl_ctx_t *ctx, tl_tcp_ue_t *ue)
{
    ue_account(ctx, sizeof(*ue) + ue->capacity, 0);
    if (ue->rts) {
        if (ue->seen != &ue->seen_few)
            free(ue->seen);
        free(ue);
    }
    else {
        chorus__pages_free(ue, sizeof(*ue) + ue->capacity);
    }
}

/*
 * Keep the buffer for the next unexpected message, or free it. The cache
 * holds at most TL_TCP_UE_CACHE buffers and a window's worth of bytes, so
 * that what a burst once needed does not stay allocated.
 */
void tl_tcp_ue_release(tl_ctx_t *ctx, tl_tcp_peer_t *peer, tl_tcp_ue_t *ue)
{
    if (peer != NULL && ue->credit)
        tl_tcp_credit_return(peer, ue->length);
    if (!ue->rts && ctx->ue_cached < TL_TCP_UE_CACHE &&
        ctx->ue_cached_bytes + ue->capacity <= ctx->cfg.window_bytes) {
        ctx->ue_cache[ctx->ue_cached++] = ue;
        ctx->ue_cached_bytes += ue->capacity;
        return;
    }
    ue_free(ctx, ue);
}

void tl_tcp_ue_cache_clear(tl_ctx_t *ctx)
{
    while (ctx->ue_cached > 0)
        ue_free(ctx, ctx->ue_cache[--ctx->ue_cached]);
    ctx->ue_cached_bytes = 0;
}

void tl_tcp_ueq_push(tl_tcp_ueq_t *q, tl_tcp_ue_t *ue)
{
    ue->next = NULL;
    if (q->tail != NULL)
        q->tail->next = ue;
    else
        q->head = ue;
    q->tail = ue;
}

tl_tcp_ue_t *tl_tcp_ueq_pop(tl_tcp_ueq_t *q)
{
    tl_tcp_ue_t *ue = q->head;

    if (ue != NULL) {
        q->head = ue->next;
        if (q->head == NULL)
            q->tail = NULL;
        ue->next = NULL;
    }
    return ue;
}

static void ueq_unlink(tl_tcp_ueq_t *q, tl_tcp_ue_t *prev, tl_tcp_ue_t *ue)
{
    if (prev != NULL)
        prev->next = ue->next;
    else
        q->head = ue->next;
    if (q->tail == ue)
        q->tail = prev;
    ue->next = NULL;
}

/* Unlink ue, which is in q. */
static void ueq_remove(tl_tcp_ueq_t *q, tl_tcp_ue_t *ue)
{
    tl_tcp_ue_t *prev = NULL;

    for (tl_tcp_ue_t *at = q->head; at != NULL && at != ue; at = at->next)
        prev = at;
    ueq_unlink(q, prev, ue);
}

tl_tcp_ue_t *tl_tcp_ueq_take(tl_tcp_ueq_t *q, uint32_t space, uint64_t tag)
{
    tl_tcp_ue_t *prev = NULL;

    for (tl_tcp_ue_t *ue = q->head; ue != NULL; prev = ue, ue = ue->next) {
        if (tl_tag_meets(ue->tag, tag) && ue->space == space) {
            ueq_unlink(q, prev, ue);
            return ue;
        }
    }
    return NULL;
}

/* Rendezvous records: their receives fail with status (none are waiting when OK). */
static int recq_fail(tl_ctx_t *ctx, tl_tcp_ueq_t *q, chorus_status_t status)
{
    tl_tcp_ue_t *rec;
    int n = 0;

    while ((rec = tl_tcp_ueq_pop(q)) != NULL) {
        if (rec->req != NULL) {
            tl_req_complete(rec->req, status, 0);
            n++;
        }
        ue_free(ctx, rec);
    }
    return n;
}

int tl_tcp_peer_drop_rx(tl_ctx_t *ctx, tl_tcp_peer_t *peer, chorus_status_t status)
{
    if (peer->rx_ue != NULL) {
        /* A partial data message is the newest one. */
        if (!peer->rx_ctrl)
            ueq_remove(&peer->ueq, peer->rx_ue);
        tl_tcp_ue_release(ctx, NULL, peer->rx_ue);
        peer->rx_ue = NULL;
    }
    peer->rx_rec = NULL;
    return recq_fail(ctx, &peer->ctsq, status) + recq_fail(ctx, &peer->rdvq, status);
}

void tl_tcp_peer_free_unexpected(tl_ctx_t *ctx, tl_tcp_peer_t *peer)
{
    tl_tcp_ue_t *ue;

    tl_tcp_peer_drop_rx(ctx, peer, CHORUS_ERR_ABORTED);
    while ((ue = tl_tcp_ueq_pop(&peer->ueq)) != NULL)
        tl_tcp_ue_release(ctx, NULL, ue);
}

/* ---- Credit ----------------------------------------------------------------- */

void tl_tcp_credit_return(tl_tcp_peer_t *peer, uint64_t bytes)
{
    peer->credit_owed += bytes;
}

/*
 * Credit goes back in batches of a quarter window: the sender keeps three
 * quarters to go on with, and a stream of small messages costs one CREDIT
 * frame per quarter window rather than one per message.
 */
int tl_tcp_credit_due(const tl_ctx_t *ctx, const tl_tcp_peer_t *peer)
{
    uint64_t batch = ctx->cfg.window_bytes / 4;

    if (peer->state != TL_TCP_PEER_UP)
        return 0;
    if (!peer->grant_sent)
        return 1;
    return peer->credit_owed > 0 && peer->credit_owed >= (batch > 0 ? batch : 1);
}

chorus_status_t tl_tcp_rx_credit(tl_ctx_t *ctx, tl_tcp_peer_t *peer,
                                 const tl_tcp_frame_t *frame)
{
    if (frame->length > TL_TCP_MAX_MSG - peer->tx_credit)
        return CHORUS_ERR_PROTOCOL;
    peer->tx_credit += frame->length;
    peer->granted = 1;
    ctx->stats.credit_recv++;
    return CHORUS_OK;
}

/* ---- Rendezvous ------------------------------------------------------------- */

int tl_tcp_recv_rts(tl_ctx_t *ctx, tl_tcp_peer_t *peer, tl_tcp_ue_t *rts, tl_req_t *req)
{
    int n = 0;

    uint64_t frags;

    rts->frag = tl_tcp_stripe_frag(rts->length, peer->nlanes);
    frags = (rts->length + rts->frag - 1) / rts->frag;
    rts->seen = &rts->seen_few;
    if (!tl_msg_fits(ctx->rank, peer->rank, rts->tag, rts->length, req)) {
        tl_req_complete(req, CHORUS_ERR_TRUNCATED, 0);
        n = 1;
        /* The CTS says "dropped": the payload never travels. */
        rts->req = NULL;
    } else if (frags > 64 &&
               (rts->seen = calloc((size_t)(frags + 63) / 64, sizeof(uint64_t))) == NULL) {
        chorus_error("rank %d: no memory to track the %llu fragments of a message from "
                     "peer %d", ctx->rank, (unsigned long long)frags, peer->rank);
        tl_req_complete(req, CHORUS_ERR_NO_MEMORY, 0);
        n = 1;
        rts->req = NULL;
    } else {
        req->offset = 0;
        rts->req = req;
    }
    tl_tcp_ueq_push(&peer->ctsq, rts);
    return n;
}

int tl_tcp_rx_rts(tl_ctx_t *ctx, tl_tcp_peer_t *peer, const tl_tcp_frame_t *frame)
{
    tl_tcp_ue_t *rts = tl_tcp_rts_alloc(ctx, frame);
    tl_req_t *req;

    if (rts == NULL) {
        chorus_error("rank %d: no memory for a rendezvous record from peer %d", ctx->rank,
                     peer->rank);
        return tl_tcp_peer_fail(ctx, peer, CHORUS_ERR_NO_MEMORY);
    }
    req = tl_reqq_take(&peer->postq, frame->space, frame->tag);
    if (req == NULL) {
        tl_tcp_ueq_push(&peer->ueq, rts);
        return 0;
    }
    return tl_tcp_recv_rts(ctx, peer, rts, req);
}

chorus_status_t tl_tcp_rx_cts(tl_ctx_t *ctx, tl_tcp_peer_t *peer, const tl_tcp_frame_t *frame,
                              int *completed_p)
{
    tl_req_t *req = tl_reqq_take_id(&peer->rtsq, frame->id);

    (void)ctx;
    if (req == NULL)
        return CHORUS_ERR_PROTOCOL;
    if (frame->length != 0 && frame->length != req->capacity) {
        tl_reqq_push(&peer->rtsq, req);
        return CHORUS_ERR_PROTOCOL;
    }
    *completed_p = 0;
    if (frame->length != 0 && (frame->space < TL_TCP_FRAG_MIN || frame->space > TL_TCP_FRAG_MAX ||
                               (frame->space & (frame->space - 1)) != 0)) {
        tl_reqq_push(&peer->rtsq, req);
        return CHORUS_ERR_PROTOCOL;
    }
    if (frame->length == 0) {
        /* The receiver dropped it as truncated: this side's part is done. */
        tl_req_complete(req, CHORUS_OK, req->capacity);
        *completed_p = 1;
        return CHORUS_OK;
    }
    req->offset = 0;
    req->moved = 0;
    req->frag = frame->space;
    tl_reqq_push(&peer->rdataq, req);
    return CHORUS_OK;
}

/*
 * Fragments may come in any order and on any lane, each at its offset: one
 * that is not a whole fragment of a message asked for, or that came before,
 * breaks the protocol (it would overwrite or leave a hole unnoticed).
 */
tl_tcp_ue_t *tl_tcp_rdata_place(tl_tcp_peer_t *peer, const tl_tcp_frame_t *frame,
                                unsigned char **dst_p)
{
    uint64_t off = frame->tag, index;
    tl_tcp_ue_t *rec;

    for (rec = peer->rdvq.head; rec != NULL && rec->id != frame->id; rec = rec->next)
        ;
    if (rec == NULL || off >= rec->length || off % rec->frag != 0 ||
        frame->length != (rec->length - off < rec->frag ? rec->length - off : rec->frag))
        return NULL;
    index = off / rec->frag;
    if (rec->seen[index / 64] & (UINT64_C(1) << (index % 64)))
        return NULL;
    rec->seen[index / 64] |= UINT64_C(1) << (index % 64);
    *dst_p = (unsigned char *)rec->req->buf + off;
    return rec;
}

int tl_tcp_rdata_arrived(tl_ctx_t *ctx, tl_tcp_peer_t *peer, tl_tcp_ue_t *rec, uint64_t len)
{
    rec->got += len;
    if (rec->got < rec->length)
        return 0;
    ueq_remove(&peer->rdvq, rec);
    tl_req_complete(rec->req, CHORUS_OK, (size_t)rec->length);
    ue_free(ctx, rec);
    return 1;
}

/* ---- The next frame to write ------------------------------------------------ */

static void tx_credit_frame(tl_ctx_t *ctx, tl_tcp_peer_t *peer, tl_tcp_frame_t *f)
{
    f->type = TL_TCP_FRAME_CREDIT;
    f->length = peer->credit_owed;
    /* Counted as granted before the peer can spend it. */
    peer->rx_credit += peer->credit_owed;
    peer->credit_owed = 0;
    peer->grant_sent = 1;
    ctx->stats.credit_sent++;
}

static void tx_cts_frame(tl_ctx_t *ctx, tl_tcp_peer_t *peer, tl_tcp_frame_t *f)
{
    tl_tcp_ue_t *rec = tl_tcp_ueq_pop(&peer->ctsq);

    f->type = TL_TCP_FRAME_CTS;
    f->id = rec->id;
    f->length = rec->req != NULL ? rec->length : 0;
    f->space = rec->req != NULL ? rec->frag : 0;
    if (rec->req != NULL)
        tl_tcp_ueq_push(&peer->rdvq, rec);
    else
        ue_free(ctx, rec);
}

int tl_tcp_rdata_take(tl_tcp_peer_t *peer, tl_tcp_tx_t *tx)
{
    tl_req_t *req = peer->rdataq.head;
    tl_tcp_frame_t f = {.type = TL_TCP_FRAME_RDATA};
    size_t left, len;

    if (req == NULL)
        return 0;
    left = req->capacity - req->offset;
    len = left < req->frag ? left : req->frag;
    f.id = (uint32_t)req->id;
    f.tag = req->offset;
    f.length = len;
    memset(tx, 0, sizeof(*tx));
    tl_tcp_header_encode(&tx->hdr, &f);
    tx->payload = (const unsigned char *)req->buf + req->offset;
    tx->len = len;
    tx->req = req;
    tx->busy = 1;
    req->offset += len;
    /* Dealt out whole: the send completes once the last of its frames is written. */
    if (req->offset == req->capacity)
        tl_reqq_pop(&peer->rdataq);
    return 1;
}

int tl_tcp_rdata_written(tl_ctx_t *ctx, int lane, tl_tcp_tx_t *tx)
{
    tl_req_t *req = tx->req;

    ctx->stats.lane_bytes[lane] += tx->len;
    req->moved += tx->len;
    memset(tx, 0, sizeof(*tx));
    if (req->moved < req->capacity)
        return 0;
    tl_req_complete(req, CHORUS_OK, req->capacity);
    return 1;
}

/* A new message: eager while the credit covers it, else announced by an RTS. */
static void tx_message_frame(tl_ctx_t *ctx, tl_tcp_peer_t *peer, tl_tcp_frame_t *f)
{
    tl_req_t *req = tl_reqq_pop(&peer->sendq);
    int ctrl = (req->tag & TL_TAG_CTRL) != 0;

    f->space = req->space;
    f->tag = req->tag;
    f->length = req->capacity;
    /*
     * Eager data travels on the connection alone: with lanes beside it, a
     * message goes eagerly only when the connection would deliver it first,
     * else by rendezvous, its fragments dealt to the lanes that deliver first.
     */
    if (ctrl || (req->capacity <= ctx->cfg.eager_bytes && req->capacity <= peer->tx_credit &&
                 tl_tcp_lanes_eager_ok(ctx, peer, req->capacity))) {
        f->type = TL_TCP_FRAME_DATA;
        if (!ctrl) {
            peer->tx_credit -= req->capacity;
            ctx->stats.eager_sent++;
            ctx->stats.eager_bytes += req->capacity;
        }
        peer->tx.payload = req->buf;
        peer->tx.len = req->capacity;
        peer->tx.req = req;
        return;
    }
    f->type = TL_TCP_FRAME_RTS;
    f->id = ++peer->next_id;
    req->id = f->id;
    ctx->stats.rndv_sent++;
    tl_reqq_push(&peer->rtsq, req);
}

/*
 * Credit and CTS frames first: they are small and let the peer go on. Then
 * rendezvous payload, a fragment at a time, taking turns with new messages so
 * that a control message never waits behind a whole large payload.
 */
int tl_tcp_tx_next(tl_ctx_t *ctx, tl_tcp_peer_t *peer)
{
    tl_tcp_frame_t f = {0};

    int message = peer->granted && peer->sendq.head != NULL;

    memset(&peer->tx, 0, sizeof(peer->tx));
    if (tl_tcp_credit_due(ctx, peer)) {
        tx_credit_frame(ctx, peer, &f);
    } else if (peer->ctsq.head != NULL) {
        tx_cts_frame(ctx, peer, &f);
    } else if (peer->rdataq.head != NULL && (!message || !peer->message_turn) &&
               (peer->lanes_up > 1 ? peer->deal_to == 0 : tl_tcp_lane_room(peer, 0))) {
        /* Payload fragments and new messages take turns: neither waits behind the other. */
        peer->message_turn = 1;
        peer->deal_to = -1;
        return tl_tcp_rdata_take(peer, &peer->tx);
    } else if (message) {
        tx_message_frame(ctx, peer, &f);
        peer->message_turn = 0;
    } else {
        return 0;
    }
    tl_tcp_header_encode(&peer->tx.hdr, &f);
    peer->tx.busy = 1;
    return 1;
}

int tl_tcp_tx_done(tl_ctx_t *ctx, tl_tcp_peer_t *peer)
{
    tl_req_t *req = peer->tx.req;
    uint8_t type = peer->tx.hdr.type;

    if (type == TL_TCP_FRAME_RDATA)
        return tl_tcp_rdata_written(ctx, 0, &peer->tx);
    memset(&peer->tx, 0, sizeof(peer->tx));
    if (type == TL_TCP_FRAME_DATA) {
        tl_req_complete(req, CHORUS_OK, req->capacity);
        return 1;
    }
    return 0;
}
