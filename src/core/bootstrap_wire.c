/*
 * Bootstrap wire format: encoders, decoders and MACs (see bootstrap_wire.h).
 * Every length is checked against a fixed bound before a byte it covers is
 * read, so a decoder is safe on any input; tests/fuzz/ holds it to that.
 */
#include "core/bootstrap_wire.h"

#include <stdio.h>
#include <string.h>

#include "util/rank_set.h"

#define BOOT_LABEL_MAX 32

/* HMAC(secret, label Nc Ns extra); extra_len is at most 8 + CHORUS_BOOT_BLOB_MAX. */
static void boot_mac(const chorus__boot_keys_t *keys, const char *label, const void *extra,
                     size_t extra_len, uint8_t out[CHORUS_BOOT_MAC])
{
    uint8_t msg[BOOT_LABEL_MAX + 2 * CHORUS_BOOT_NONCE + 8 + CHORUS_BOOT_BLOB_MAX];
    size_t label_len = strlen(label), off = 0;

    memcpy(msg, label, label_len);
    off += label_len;
    memcpy(msg + off, keys->nc, CHORUS_BOOT_NONCE);
    off += CHORUS_BOOT_NONCE;
    memcpy(msg + off, keys->ns, CHORUS_BOOT_NONCE);
    off += CHORUS_BOOT_NONCE;
    if (extra_len > 0)
        memcpy(msg + off, extra, extra_len);
    off += extra_len;
    chorus__hmac_sha256(keys->secret, keys->secret_len, msg, off, out);
    explicit_bzero(msg, off);
}

/* The key pad XOR the session key; the same call unwraps. */
static void boot_wrap_key(const chorus__boot_keys_t *keys, const uint8_t in[CHORUS_BOOT_KEY],
                          uint8_t out[CHORUS_BOOT_KEY])
{
    uint8_t pad[CHORUS_BOOT_MAC];

    boot_mac(keys, CHORUS_BOOT_LABEL_KEY, NULL, 0, pad);
    for (int i = 0; i < CHORUS_BOOT_KEY; i++)
        out[i] = in[i] ^ pad[i];
    explicit_bzero(pad, sizeof(pad));
}

/* MAC of a RESULT: binds the wrapped key and every blob to this connection's nonces. */
static void boot_result_mac(const chorus__boot_keys_t *keys,
                            const uint8_t wrapped[CHORUS_BOOT_KEY],
                            const uint8_t blobs_digest[32], uint8_t out[CHORUS_BOOT_MAC])
{
    uint8_t extra[CHORUS_BOOT_KEY + 32];

    memcpy(extra, wrapped, CHORUS_BOOT_KEY);
    memcpy(extra + CHORUS_BOOT_KEY, blobs_digest, 32);
    boot_mac(keys, CHORUS_BOOT_LABEL_RESULT, extra, sizeof(extra), out);
}

/* ---- Header -------------------------------------------------------------------- */

void chorus__boot_header_encode(uint8_t out[CHORUS_BOOT_HEADER], unsigned type, uint32_t len)
{
    chorus__boot_put_u32(out, CHORUS_BOOT_MAGIC);
    out[4] = 0;
    out[5] = CHORUS_BOOT_VERSION;
    out[6] = (uint8_t)(type >> 8);
    out[7] = (uint8_t)type;
    chorus__boot_put_u32(out + 8, len);
}

chorus_status_t chorus__boot_header_decode(const uint8_t *buf, size_t len,
                                           chorus__boot_hdr_t *hdr_p, char *why, size_t why_len)
{
    unsigned version;

    if (len < CHORUS_BOOT_HEADER) {
        snprintf(why, why_len, "a header of %zu bytes, expected %d", len, CHORUS_BOOT_HEADER);
        return CHORUS_ERR_PROTOCOL;
    }
    if (chorus__boot_get_u32(buf) != CHORUS_BOOT_MAGIC) {
        snprintf(why, why_len, "bad magic 0x%08x, not a chorus bootstrap peer",
                 chorus__boot_get_u32(buf));
        return CHORUS_ERR_PROTOCOL;
    }
    version = ((unsigned)buf[4] << 8) | buf[5];
    if (version != CHORUS_BOOT_VERSION) {
        snprintf(why, why_len, "protocol version %u, expected %d", version,
                 CHORUS_BOOT_VERSION);
        return CHORUS_ERR_PROTOCOL;
    }
    hdr_p->type = ((unsigned)buf[6] << 8) | buf[7];
    hdr_p->len = chorus__boot_get_u32(buf + 8);
    return CHORUS_OK;
}

chorus_status_t chorus__boot_store_expect(const chorus__boot_hdr_t *hdr, unsigned want_type)
{
    if (want_type == CHORUS_BOOT_HELLO && hdr->type == CHORUS_BOOT_HELLO &&
        hdr->len == CHORUS_BOOT_HELLO_LEN)
        return CHORUS_OK;
    if (want_type == CHORUS_BOOT_JOIN && hdr->type == CHORUS_BOOT_JOIN &&
        hdr->len >= CHORUS_BOOT_JOIN_MIN && hdr->len <= CHORUS_BOOT_JOIN_MAX)
        return CHORUS_OK;
    if (want_type == CHORUS_BOOT_JOIN && hdr->type == CHORUS_BOOT_ABANDON &&
        hdr->len == CHORUS_BOOT_ABANDON_LEN)
        return CHORUS_OK;
    if (want_type == CHORUS_BOOT_QUERY && hdr->type == CHORUS_BOOT_QUERY &&
        hdr->len == CHORUS_BOOT_QUERY_LEN)
        return CHORUS_OK;
    return CHORUS_ERR_PROTOCOL;
}

chorus_status_t chorus__boot_client_expect(const chorus__boot_hdr_t *hdr, unsigned want_type,
                                           uint64_t want_len)
{
    return hdr->type == want_type && hdr->len == want_len ? CHORUS_OK : CHORUS_ERR_PROTOCOL;
}

/* ---- HELLO and CHALLENGE -------------------------------------------------------- */

size_t chorus__boot_hello_encode(uint8_t out[CHORUS_BOOT_HEADER + CHORUS_BOOT_HELLO_LEN],
                                 const uint8_t nc[CHORUS_BOOT_NONCE])
{
    chorus__boot_header_encode(out, CHORUS_BOOT_HELLO, CHORUS_BOOT_HELLO_LEN);
    memcpy(out + CHORUS_BOOT_HEADER, nc, CHORUS_BOOT_NONCE);
    return CHORUS_BOOT_HEADER + CHORUS_BOOT_HELLO_LEN;
}

chorus_status_t chorus__boot_hello_decode(const uint8_t *payload, size_t len,
                                          uint8_t nc_p[CHORUS_BOOT_NONCE])
{
    if (len != CHORUS_BOOT_HELLO_LEN)
        return CHORUS_ERR_PROTOCOL;
    memcpy(nc_p, payload, CHORUS_BOOT_NONCE);
    return CHORUS_OK;
}

size_t chorus__boot_challenge_encode(uint8_t out[CHORUS_BOOT_HEADER + CHORUS_BOOT_CHAL_LEN],
                                     const chorus__boot_keys_t *keys)
{
    uint8_t *chal = out + CHORUS_BOOT_HEADER;

    chorus__boot_header_encode(out, CHORUS_BOOT_CHALLENGE, CHORUS_BOOT_CHAL_LEN);
    memcpy(chal, keys->ns, CHORUS_BOOT_NONCE);
    boot_mac(keys, CHORUS_BOOT_LABEL_STORE, NULL, 0, chal + CHORUS_BOOT_NONCE);
    return CHORUS_BOOT_HEADER + CHORUS_BOOT_CHAL_LEN;
}

chorus_status_t chorus__boot_challenge_decode(const chorus__boot_keys_t *keys,
                                              const uint8_t *payload, size_t len,
                                              uint8_t ns_p[CHORUS_BOOT_NONCE])
{
    chorus__boot_keys_t k = *keys;
    uint8_t expect[CHORUS_BOOT_MAC];

    if (len != CHORUS_BOOT_CHAL_LEN)
        return CHORUS_ERR_PROTOCOL;
    k.ns = payload;
    boot_mac(&k, CHORUS_BOOT_LABEL_STORE, NULL, 0, expect);
    if (!chorus__mac_equal(expect, payload + CHORUS_BOOT_NONCE, CHORUS_BOOT_MAC))
        return CHORUS_ERR_AUTH;
    memcpy(ns_p, payload, CHORUS_BOOT_NONCE);
    return CHORUS_OK;
}

/* ---- JOIN ---------------------------------------------------------------------- */

size_t chorus__boot_join_encode(uint8_t out[CHORUS_BOOT_HEADER + CHORUS_BOOT_JOIN_MAX],
                                const chorus__boot_keys_t *keys, uint32_t rank, uint32_t size,
                                const void *blob, size_t blob_len)
{
    uint8_t *body = out + CHORUS_BOOT_HEADER + CHORUS_BOOT_MAC;

    if (blob_len > CHORUS_BOOT_BLOB_MAX)
        return 0;
    chorus__boot_header_encode(out, CHORUS_BOOT_JOIN, (uint32_t)(CHORUS_BOOT_JOIN_MIN + blob_len));
    chorus__boot_put_u32(body, rank);
    chorus__boot_put_u32(body + 4, size);
    if (blob_len > 0)
        memcpy(body + 8, blob, blob_len);
    boot_mac(keys, CHORUS_BOOT_LABEL_CLIENT, body, 8 + blob_len, out + CHORUS_BOOT_HEADER);
    return CHORUS_BOOT_HEADER + CHORUS_BOOT_JOIN_MIN + blob_len;
}

chorus_status_t chorus__boot_join_decode(const chorus__boot_keys_t *keys,
                                         const uint8_t *payload, size_t len,
                                         chorus__boot_join_t *join_p)
{
    uint8_t expect[CHORUS_BOOT_MAC];

    /* The MAC covers the payload: its length must be bounded before it is hashed. */
    if (len < CHORUS_BOOT_JOIN_MIN || len > CHORUS_BOOT_JOIN_MAX)
        return CHORUS_ERR_PROTOCOL;
    boot_mac(keys, CHORUS_BOOT_LABEL_CLIENT, payload + CHORUS_BOOT_MAC, len - CHORUS_BOOT_MAC,
             expect);
    if (!chorus__mac_equal(expect, payload, CHORUS_BOOT_MAC))
        return CHORUS_ERR_AUTH;
    join_p->rank = chorus__boot_get_u32(payload + CHORUS_BOOT_MAC);
    join_p->size = chorus__boot_get_u32(payload + CHORUS_BOOT_MAC + 4);
    join_p->blob = payload + CHORUS_BOOT_JOIN_MIN;
    join_p->blob_len = len - CHORUS_BOOT_JOIN_MIN;
    return CHORUS_OK;
}

chorus_status_t chorus__boot_join_check(const chorus__boot_join_t *join, char *why,
                                        size_t why_len)
{
    if (join->size == 0 || join->size > CHORUS_BOOT_SIZE_MAX) {
        snprintf(why, why_len, "size %u is out of range 1..%d", join->size,
                 CHORUS_BOOT_SIZE_MAX);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (join->rank >= join->size) {
        snprintf(why, why_len, "rank %u is out of range for size %u", join->rank, join->size);
        return CHORUS_ERR_INVALID_ARG;
    }
    if ((uint64_t)join->size * join->blob_len > CHORUS_BOOT_TOTAL_MAX) {
        snprintf(why, why_len, "size %u with %zu-byte addresses exceeds %u bytes in all",
                 join->size, join->blob_len, CHORUS_BOOT_TOTAL_MAX);
        return CHORUS_ERR_INVALID_ARG;
    }
    return CHORUS_OK;
}

chorus_status_t chorus__boot_join_claim(const uint8_t *payload, size_t len, uint32_t *rank_p,
                                        uint32_t *size_p)
{
    if (len < CHORUS_BOOT_JOIN_MIN || len > CHORUS_BOOT_JOIN_MAX)
        return CHORUS_ERR_PROTOCOL;
    *rank_p = chorus__boot_get_u32(payload + CHORUS_BOOT_MAC);
    *size_p = chorus__boot_get_u32(payload + CHORUS_BOOT_MAC + 4);
    return CHORUS_OK;
}

/* ---- ABANDON, QUERY and STATUS ---------------------------------------------------- */

size_t chorus__boot_abandon_encode(uint8_t out[CHORUS_BOOT_HEADER + CHORUS_BOOT_ABANDON_LEN],
                                   uint32_t rank, uint32_t size)
{
    chorus__boot_header_encode(out, CHORUS_BOOT_ABANDON, CHORUS_BOOT_ABANDON_LEN);
    chorus__boot_put_u32(out + CHORUS_BOOT_HEADER, rank);
    chorus__boot_put_u32(out + CHORUS_BOOT_HEADER + 4, size);
    return CHORUS_BOOT_HEADER + CHORUS_BOOT_ABANDON_LEN;
}

chorus_status_t chorus__boot_abandon_decode(const uint8_t *payload, size_t len,
                                            uint32_t *rank_p, uint32_t *size_p)
{
    if (len != CHORUS_BOOT_ABANDON_LEN)
        return CHORUS_ERR_PROTOCOL;
    *rank_p = chorus__boot_get_u32(payload);
    *size_p = chorus__boot_get_u32(payload + 4);
    return CHORUS_OK;
}

size_t chorus__boot_query_encode(uint8_t out[CHORUS_BOOT_HEADER + CHORUS_BOOT_QUERY_LEN],
                                 const chorus__boot_keys_t *keys, uint32_t seq)
{
    uint8_t *body = out + CHORUS_BOOT_HEADER;

    chorus__boot_header_encode(out, CHORUS_BOOT_QUERY, CHORUS_BOOT_QUERY_LEN);
    chorus__boot_put_u32(body + CHORUS_BOOT_MAC, seq);
    boot_mac(keys, CHORUS_BOOT_LABEL_QUERY, body + CHORUS_BOOT_MAC, 4, body);
    return CHORUS_BOOT_HEADER + CHORUS_BOOT_QUERY_LEN;
}

chorus_status_t chorus__boot_query_decode(const chorus__boot_keys_t *keys,
                                          const uint8_t *payload, size_t len, uint32_t *seq_p)
{
    uint8_t expect[CHORUS_BOOT_MAC];

    if (len != CHORUS_BOOT_QUERY_LEN)
        return CHORUS_ERR_PROTOCOL;
    boot_mac(keys, CHORUS_BOOT_LABEL_QUERY, payload + CHORUS_BOOT_MAC, 4, expect);
    if (!chorus__mac_equal(expect, payload, CHORUS_BOOT_MAC))
        return CHORUS_ERR_AUTH;
    *seq_p = chorus__boot_get_u32(payload + CHORUS_BOOT_MAC);
    return CHORUS_OK;
}

size_t chorus__boot_status_len(uint32_t size)
{
    return CHORUS_BOOT_STATUS_HDR + chorus__rank_set_bytes((int)size);
}

/* MAC of a STATUS: its fixed fields and the digest of its bitmap (which may be large). */
static void boot_status_mac(const chorus__boot_keys_t *keys, const uint8_t fields[12],
                            const uint8_t *joined, size_t joined_len,
                            uint8_t out[CHORUS_BOOT_MAC])
{
    uint8_t extra[12 + CHORUS_SHA256_BYTES];

    memcpy(extra, fields, 12);
    chorus__sha256(joined, joined_len, extra + 12);
    boot_mac(keys, CHORUS_BOOT_LABEL_STATUS, extra, sizeof(extra), out);
}

size_t chorus__boot_status_encode(uint8_t *out, const chorus__boot_keys_t *keys,
                                  const chorus__boot_status_t *status)
{
    size_t len = chorus__boot_status_len(status->size);
    size_t bitmap_len = len - CHORUS_BOOT_STATUS_HDR;
    uint8_t *body = out + CHORUS_BOOT_HEADER, *fields = body + CHORUS_BOOT_MAC;

    chorus__boot_header_encode(out, CHORUS_BOOT_STATUS, (uint32_t)len);
    chorus__boot_put_u32(fields, status->seq);
    chorus__boot_put_u32(fields + 4, status->size);
    chorus__boot_put_u32(fields + 8, status->elapsed_ms);
    memcpy(fields + 12, status->joined, bitmap_len);
    boot_status_mac(keys, fields, fields + 12, bitmap_len, body);
    return CHORUS_BOOT_HEADER + len;
}

chorus_status_t chorus__boot_status_decode(const chorus__boot_keys_t *keys,
                                           const uint8_t *payload, size_t len,
                                           uint32_t want_size, chorus__boot_status_t *status_p)
{
    const uint8_t *fields = payload + CHORUS_BOOT_MAC;
    uint8_t expect[CHORUS_BOOT_MAC];

    if (want_size == 0 || want_size > CHORUS_BOOT_SIZE_MAX ||
        len != chorus__boot_status_len(want_size) ||
        chorus__boot_get_u32(fields + 4) != want_size)
        return CHORUS_ERR_PROTOCOL;
    boot_status_mac(keys, fields, fields + 12, len - CHORUS_BOOT_STATUS_HDR, expect);
    if (!chorus__mac_equal(expect, payload, CHORUS_BOOT_MAC))
        return CHORUS_ERR_AUTH;
    status_p->seq = chorus__boot_get_u32(fields);
    status_p->size = want_size;
    status_p->elapsed_ms = chorus__boot_get_u32(fields + 8);
    status_p->joined = fields + 12;
    return CHORUS_OK;
}

/* ---- RESULT -------------------------------------------------------------------- */

size_t chorus__boot_result_encode(uint8_t out[CHORUS_BOOT_HEADER + CHORUS_BOOT_RESULT_HDR],
                                  const chorus__boot_keys_t *keys,
                                  const uint8_t session_key[CHORUS_BOOT_KEY],
                                  const uint8_t blobs_digest[32], uint64_t total)
{
    uint8_t *head = out + CHORUS_BOOT_HEADER;

    chorus__boot_header_encode(out, CHORUS_BOOT_RESULT,
                               (uint32_t)(CHORUS_BOOT_RESULT_HDR + total));
    boot_wrap_key(keys, session_key, head);
    boot_result_mac(keys, head, blobs_digest, head + CHORUS_BOOT_KEY);
    return CHORUS_BOOT_HEADER + CHORUS_BOOT_RESULT_HDR;
}

chorus_status_t chorus__boot_result_decode(const chorus__boot_keys_t *keys,
                                           const uint8_t *payload, size_t len,
                                           const uint8_t blobs_digest[32],
                                           uint8_t session_key_p[CHORUS_BOOT_KEY])
{
    uint8_t expect[CHORUS_BOOT_MAC];

    if (len != CHORUS_BOOT_RESULT_HDR)
        return CHORUS_ERR_PROTOCOL;
    boot_result_mac(keys, payload, blobs_digest, expect);
    if (!chorus__mac_equal(expect, payload + CHORUS_BOOT_KEY, CHORUS_BOOT_MAC))
        return CHORUS_ERR_AUTH;
    boot_wrap_key(keys, payload, session_key_p);
    return CHORUS_OK;
}

/* ---- ERROR --------------------------------------------------------------------- */

size_t chorus__boot_error_encode(uint8_t out[CHORUS_BOOT_HEADER + CHORUS_BOOT_ERROR_MAX],
                                 chorus_status_t status, const char *text)
{
    size_t len = strnlen(text, CHORUS_BOOT_ERROR_TEXT_MAX);

    chorus__boot_header_encode(out, CHORUS_BOOT_ERROR, (uint32_t)(4 + len));
    chorus__boot_put_u32(out + CHORUS_BOOT_HEADER, (uint32_t)-status);
    memcpy(out + CHORUS_BOOT_HEADER + 4, text, len);
    return CHORUS_BOOT_HEADER + 4 + len;
}

int chorus__boot_error_len_ok(uint64_t len)
{
    return len >= CHORUS_BOOT_ERROR_MIN && len <= CHORUS_BOOT_ERROR_MAX;
}

chorus_status_t chorus__boot_error_decode(const uint8_t *payload, size_t len,
                                          chorus_status_t *status_p,
                                          char text_p[CHORUS_BOOT_ERROR_TEXT_MAX + 1])
{
    uint32_t code;

    if (!chorus__boot_error_len_ok(len))
        return CHORUS_ERR_PROTOCOL;
    /* The text is the store's; keep control characters out of the reader's log. */
    for (size_t i = 4; i < len; i++)
        text_p[i - 4] = payload[i] >= 0x20 && payload[i] < 0x7f ? (char)payload[i] : '?';
    text_p[len - 4] = '\0';
    code = chorus__boot_get_u32(payload);
    switch (-(int64_t)code) {
    case CHORUS_ERR_INVALID_ARG: case CHORUS_ERR_NO_MEMORY: case CHORUS_ERR_TIMEOUT:
    case CHORUS_ERR_AUTH: case CHORUS_ERR_PROTOCOL: case CHORUS_ERR_SYSTEM:
    case CHORUS_ERR_IN_USE:
        *status_p = (chorus_status_t)-(int64_t)code;
        break;
    default:
        *status_p = CHORUS_ERR_PROTOCOL;
    }
    return CHORUS_OK;
}
