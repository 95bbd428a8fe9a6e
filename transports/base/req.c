/*
 * What every point-to-point transport does alike with requests: complete
 * them, queue them, match them, check what lands in them; and the checks of
 * a context's parameters.
 */
#include "transports/base/transport.h"

#include "util/log.h"

void tl_req_complete(tl_req_t *req, chorus_status_t status, size_t length)
{
    req->status = status;
    req->length = length;
    req->next = NULL;
    /* Release: a thread that sees done also sees status, length and the data. */
    __atomic_store_n(&req->done, 1, __ATOMIC_RELEASE);
}

void tl_req_init(tl_req_t *req, int peer, uint32_t space, uint64_t tag, void *buf,
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
    req->id = 0;
    req->frag = 0;
    req->moved = 0;
}

int tl_reqq_fail(tl_reqq_t *q, chorus_status_t status)
{
    tl_req_t *req;
    int n = 0;

    while ((req = tl_reqq_pop(q)) != NULL) {
        tl_req_complete(req, status, 0);
        n++;
    }
    return n;
}

void tl_reqq_push(tl_reqq_t *q, tl_req_t *req)
{
    req->next = NULL;
    if (q->tail != NULL)
        q->tail->next = req;
    else
        q->head = req;
    q->tail = req;
}

tl_req_t *tl_reqq_pop(tl_reqq_t *q)
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

static tl_req_t *reqq_unlink(tl_reqq_t *q, tl_req_t *prev, tl_req_t *req)
{
    if (prev != NULL)
        prev->next = req->next;
    else
        q->head = req->next;
    if (q->tail == req)
        q->tail = prev;
    req->next = NULL;
    return req;
}

tl_req_t *tl_reqq_take(tl_reqq_t *q, uint32_t space, uint64_t tag)
{
    tl_req_t *prev = NULL;

    for (tl_req_t *req = q->head; req != NULL; prev = req, req = req->next) {
        if (tl_tag_meets(tag, req->tag) && req->space == space)
            return reqq_unlink(q, prev, req);
    }
    return NULL;
}

tl_req_t *tl_reqq_take_id(tl_reqq_t *q, uint64_t id)
{
    tl_req_t *prev = NULL;

    for (tl_req_t *req = q->head; req != NULL; prev = req, req = req->next) {
        if (req->id == id)
            return reqq_unlink(q, prev, req);
    }
    return NULL;
}

int tl_msg_fits(int rank, int peer, uint64_t tag, uint64_t length, const tl_req_t *req)
{
    if (length > req->capacity) {
        chorus_error("rank %d: message from peer %d with tag %llu has %llu bytes but the "
                     "receive holds %zu; request fails as truncated", rank, peer,
                     (unsigned long long)tag, (unsigned long long)length, req->capacity);
        return 0;
    }
    if ((tag ^ req->tag) & TL_TAG_FINAL) {
        chorus_error("rank %d: message from peer %d with tag %llu is %s; the ranks' calls "
                     "differ (request fails as truncated)", rank, peer,
                     (unsigned long long)(tag & ~TL_TAG_FINAL),
                     (tag & TL_TAG_FINAL) ? "the peer's last for this call, but this rank "
                                            "expects more from it"
                                          : "not the peer's last for this call, but this "
                                            "rank expects none after it");
        return 0;
    }
    return 1;
}

chorus_status_t tl_ctx_params_check(const char *tl, const tl_ctx_params_t *params)
{
    if (params == NULL) {
        chorus_error("%s: ctx_create: params is NULL", tl);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (params->size < 1 || params->rank < 0 || params->rank >= params->size) {
        chorus_error("%s: ctx_create: rank %d of size %d is out of range", tl, params->rank,
                     params->size);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (params->bind_host == NULL || params->auth_key == NULL || params->auth_key_len == 0) {
        chorus_error("rank %d: %s: ctx_create needs a bind host and a non-empty auth key",
                     params->rank, tl);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (!(params->timeout_s > 0)) {
        chorus_error("rank %d: %s: ctx_create: timeout %g s must be positive", params->rank,
                     tl, params->timeout_s);
        return CHORUS_ERR_INVALID_ARG;
    }
    return CHORUS_OK;
}
