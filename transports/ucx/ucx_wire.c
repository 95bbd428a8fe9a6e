/*
 * UCX transport: the header and the address blob, encoded and decoded
 * (little-endian on the wire whatever the host's order), and the MACs of
 * the handshake and the tokens. Decoders are pure so that tests run exactly
 * this code on hostile input.
 */
#include "transports/ucx/ucx.h"

#include <endian.h>
#include <stddef.h>
#include <string.h>

#include "util/sha256.h"

_Static_assert(sizeof(tl_ucx_hdr_t) == 56, "ucx header must have no padding");
_Static_assert(offsetof(tl_ucx_blob_t, addr) == TL_UCX_BLOB_HEAD, "ucx blob head");
_Static_assert(sizeof(tl_ucx_blob_t) == TL_ADDR_MAX, "ucx blob must fill TL_ADDR_MAX");

void tl_ucx_hdr_encode(tl_ucx_hdr_t *wire, const tl_ucx_msg_hdr_t *hdr)
{
    memset(wire, 0, sizeof(*wire));
    wire->magic = htole32(TL_UCX_MAGIC);
    wire->kind = (uint8_t)hdr->kind;
    wire->charged = hdr->charged ? 1 : 0;
    wire->from = htole32(hdr->from);
    wire->space = htole32(hdr->space);
    wire->tag = htole64(hdr->tag);
    wire->seq = htole64(hdr->seq);
    wire->value = htole64(hdr->value);
    memcpy(wire->token, hdr->token, TL_UCX_TOKEN_BYTES);
}

static int all_zero(const uint8_t *p, size_t n)
{
    uint8_t acc = 0;

    for (size_t i = 0; i < n; i++)
        acc |= p[i];
    return acc == 0;
}

/* Fields a kind does not use are zero; those it uses are within bounds. Only DATA is charged. */
static int fields_fit(const tl_ucx_msg_hdr_t *h)
{
    switch (h->kind) {
    case TL_UCX_DATA:
        return h->value == 0;
    case TL_UCX_RTS:
        return !h->charged && h->value > 0 && h->value <= TL_UCX_MAX_MSG;
    case TL_UCX_CTS:
        return !h->charged && !h->space && !h->tag && h->value <= TL_UCX_MAX_MSG;
    case TL_UCX_RDATA:
        return !h->charged && !h->space && h->tag < TL_UCX_MAX_MSG && !h->value;
    case TL_UCX_CREDIT:
        return !h->charged && !h->space && !h->tag && !h->seq && h->value <= TL_UCX_MAX_MSG;
    default:
        return !h->charged && !h->space && !h->tag && !h->seq && !h->value;
    }
}

chorus_status_t tl_ucx_hdr_decode(const void *buf, size_t len, int size, tl_ucx_msg_hdr_t *hdr)
{
    tl_ucx_hdr_t w;
    tl_ucx_msg_hdr_t h = {0};

    if (buf == NULL || len != sizeof(w))
        return CHORUS_ERR_PROTOCOL;
    memcpy(&w, buf, sizeof(w));
    if (le32toh(w.magic) != TL_UCX_MAGIC || w.kind < TL_UCX_HELLO || w.kind >= TL_UCX_KIND_END ||
        w.charged > 1 || w.zero != 0 || le32toh(w.from) >= (uint32_t)size)
        return CHORUS_ERR_PROTOCOL;
    h.kind = (tl_ucx_kind_t)w.kind;
    h.charged = w.charged;
    h.from = le32toh(w.from);
    h.space = le32toh(w.space);
    h.tag = le64toh(w.tag);
    h.seq = le64toh(w.seq);
    h.value = le64toh(w.value);
    memcpy(h.token, w.token, TL_UCX_TOKEN_BYTES);
    if (!fields_fit(&h))
        return CHORUS_ERR_PROTOCOL;
    if (h.kind <= TL_UCX_REJECT && !all_zero(h.token, TL_UCX_TOKEN_BYTES))
        return CHORUS_ERR_PROTOCOL;
    *hdr = h;
    return CHORUS_OK;
}

chorus_status_t tl_ucx_blob_decode(const void *buf, int rank, tl_ucx_peer_addr_t *out)
{
    const uint8_t *b = buf;
    uint32_t magic, r, zero;
    uint16_t version, addr_len;
    uint64_t window;

    if (b == NULL)
        return CHORUS_ERR_INVALID_ARG;
    memcpy(&magic, b + offsetof(tl_ucx_blob_t, magic), sizeof(magic));
    if (le32toh(magic) != TL_UCX_MAGIC)
        return CHORUS_ERR_INVALID_ARG;
    memcpy(&version, b + offsetof(tl_ucx_blob_t, version), sizeof(version));
    memcpy(&addr_len, b + offsetof(tl_ucx_blob_t, addr_len), sizeof(addr_len));
    memcpy(&r, b + offsetof(tl_ucx_blob_t, rank), sizeof(r));
    memcpy(&zero, b + offsetof(tl_ucx_blob_t, zero), sizeof(zero));
    memcpy(&window, b + offsetof(tl_ucx_blob_t, window), sizeof(window));
    addr_len = le16toh(addr_len);
    window = le64toh(window);
    if (le16toh(version) != TL_UCX_VERSION || le32toh(r) != (uint32_t)rank || zero != 0 ||
        addr_len == 0 || addr_len > TL_UCX_ADDR_MAX || window > TL_UCX_MAX_MSG)
        return CHORUS_ERR_INVALID_ARG;
    if (!all_zero(b + TL_UCX_BLOB_HEAD + addr_len, TL_UCX_ADDR_MAX - addr_len))
        return CHORUS_ERR_INVALID_ARG;
    out->window = window;
    memcpy(out->nonce, b + offsetof(tl_ucx_blob_t, nonce), TL_UCX_NONCE_BYTES);
    out->addr_len = addr_len;
    out->addr = b + TL_UCX_BLOB_HEAD;
    return CHORUS_OK;
}

void tl_ucx_mac(const tl_ucx_ctx_t *ctx, const char *label, const uint8_t *nonce, uint32_t from,
                uint32_t to, uint8_t out[TL_UCX_MAC_BYTES])
{
    uint8_t msg[8 + TL_UCX_NONCE_BYTES + 8];
    size_t n = strlen(label);
    uint32_t f = htole32(from), t = htole32(to);

    /* Labels are short words; they are followed by a NUL so none prefixes another. */
    if (n > 7)
        n = 7;
    memset(msg, 0, sizeof(msg));
    memcpy(msg, label, n);
    memcpy(msg + 8, nonce, TL_UCX_NONCE_BYTES);
    memcpy(msg + 8 + TL_UCX_NONCE_BYTES, &f, 4);
    memcpy(msg + 12 + TL_UCX_NONCE_BYTES, &t, 4);
    chorus__hmac_sha256(ctx->auth_key, ctx->auth_key_len, msg, sizeof(msg), out);
}
