/* The control channel (see ctrl.h). */
#include "core/ctrl.h"

#include <stdlib.h>
#include <string.h>

#include "core/refusal.h"
#include "core/stall.h"
#include "util/log.h"

/* A message on its way, in either direction. */
typedef struct ctrl_msg {
    struct ctrl_msg *next;
    tl_req_t req;               /* outgoing: the transport's request */
    int peer;
    uint32_t space;
    unsigned user;
    size_t len;
    unsigned char data[];
} ctrl_msg_t;

struct chorus__ctrl {
    ctrl_msg_t *inbox_head;     /* arrived, not yet handed over */
    ctrl_msg_t *inbox_tail;
    ctrl_msg_t *sent;           /* posted to a transport, not yet done */
};

/* Who handles each user's messages. */
typedef void (*ctrl_handler_t)(chorus__ctx_t *ctx, int peer, uint32_t space, const void *msg,
                               size_t len);

static const ctrl_handler_t ctrl_handlers[CHORUS__CTRL_USERS] = {
    [CHORUS__CTRL_STALL] = chorus__stall_receive,
    [CHORUS__CTRL_REFUSAL] = chorus__refusal_receive,
};

chorus_status_t chorus__ctrl_create(chorus__ctx_t *ctx)
{
    ctx->ctrl = calloc(1, sizeof(*ctx->ctrl));
    return ctx->ctrl != NULL ? CHORUS_OK : CHORUS_ERR_NO_MEMORY;
}

static void ctrl_free_list(ctrl_msg_t *m)
{
    while (m != NULL) {
        ctrl_msg_t *next = m->next;
        free(m);
        m = next;
    }
}

void chorus__ctrl_destroy(chorus__ctx_t *ctx)
{
    if (ctx->ctrl == NULL)
        return;
    ctrl_free_list(ctx->ctrl->inbox_head);
    ctrl_free_list(ctx->ctrl->sent);
    free(ctx->ctrl);
    ctx->ctrl = NULL;
}

static ctrl_msg_t *ctrl_msg_new(int peer, uint32_t space, unsigned user, const void *data,
                                size_t len)
{
    ctrl_msg_t *m = malloc(sizeof(*m) + len);

    if (m == NULL)
        return NULL;
    memset(m, 0, sizeof(*m));
    m->peer = peer;
    m->space = space;
    m->user = user;
    m->len = len;
    memcpy(m->data, data, len);
    return m;
}

void chorus__ctrl_deliver(void *arg, int peer, uint32_t space, uint64_t tag, const void *data,
                          size_t len)
{
    chorus__ctx_t *ctx = arg;
    unsigned user = (unsigned)(tag & 0xff);
    ctrl_msg_t *m;

    if (user == 0 || user >= CHORUS__CTRL_USERS || ctrl_handlers[user] == NULL) {
        chorus_debug("rank %d: control message for unknown user %u from rank %d dropped",
                     ctx->rank, user, peer);
        return;
    }
    m = ctrl_msg_new(peer, space, user, data, len);
    if (m == NULL) {
        chorus_warn("rank %d: no memory for a control message from rank %d; dropped",
                    ctx->rank, peer);
        return;
    }
    if (ctx->ctrl->inbox_tail != NULL)
        ctx->ctrl->inbox_tail->next = m;
    else
        ctx->ctrl->inbox_head = m;
    ctx->ctrl->inbox_tail = m;
}

/* Post a copy of msg with tag to peer; the channel keeps it until sent. */
static chorus_status_t ctrl_post(chorus__ctx_t *ctx, int peer, uint32_t space, uint64_t tag,
                                 unsigned user, const void *msg, size_t len)
{
    ctrl_msg_t *m = ctrl_msg_new(peer, space, user, msg, len);
    chorus_status_t status;

    if (m == NULL)
        return CHORUS_ERR_NO_MEMORY;
    status = chorus__ctx_send(ctx, peer, space, tag, m->data, len, &m->req);
    if (status != CHORUS_OK) {
        free(m);
        return status;
    }
    m->next = ctx->ctrl->sent;
    ctx->ctrl->sent = m;
    return CHORUS_OK;
}

chorus_status_t chorus__ctrl_send(chorus__ctx_t *ctx, int peer, uint32_t space,
                                  chorus__ctrl_user_t user, const void *msg, size_t len)
{
    if (len > TL_CTRL_MAX)
        return CHORUS_ERR_INVALID_ARG;
    return ctrl_post(ctx, peer, space, TL_TAG_CTRL | (uint64_t)user, user, msg, len);
}

chorus_status_t chorus__ctrl_send_hidden(chorus__ctx_t *ctx, int peer, uint32_t space,
                                         uint64_t tag, const void *msg, size_t len)
{
    if ((tag & (TL_TAG_CTRL | CHORUS__TAG_HIDDEN)) != CHORUS__TAG_HIDDEN)
        return CHORUS_ERR_INVALID_ARG;
    return ctrl_post(ctx, peer, space, tag, 0, msg, len);
}

int chorus__ctrl_progress(chorus__ctx_t *ctx)
{
    chorus__ctrl_t *c = ctx->ctrl;
    ctrl_msg_t **link = &c->sent;
    int moved = 0;

    while (*link != NULL) {
        ctrl_msg_t *m = *link;

        if (!m->req.done) {
            link = &m->next;
            continue;
        }
        *link = m->next;
        free(m);
    }
    while (c->inbox_head != NULL) {
        ctrl_msg_t *m = c->inbox_head;

        c->inbox_head = m->next;
        if (c->inbox_head == NULL)
            c->inbox_tail = NULL;
        ctrl_handlers[m->user](ctx, m->peer, m->space, m->data, m->len);
        free(m);
        moved = 1;
    }
    return moved;
}
