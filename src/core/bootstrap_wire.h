/*
 * Bootstrap wire format (described in bootstrap.h): the encoder and decoder of
 * every message and the MACs both sides compute over them. These functions
 * take bytes and return a status and fields; they neither read sockets nor
 * log, so the store, the client and the fuzz targets (tests/fuzz/) run the
 * same parsing code. A decoder reads at most `len` bytes of `payload`, and its
 * output arguments are written only when it returns CHORUS_OK.
 */
#ifndef CHORUS_CORE_BOOTSTRAP_WIRE_H
#define CHORUS_CORE_BOOTSTRAP_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "core/bootstrap.h"
#include "util/sha256.h"

/* Big-endian 32-bit fields of the bootstrap messages. */
static inline void chorus__boot_put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline uint32_t chorus__boot_get_u32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

#define CHORUS_BOOT_MAC        CHORUS_SHA256_BYTES
#define CHORUS_BOOT_KEY        32   /* bytes of the session key */
#define CHORUS_BOOT_HELLO_LEN  CHORUS_BOOT_NONCE
#define CHORUS_BOOT_CHAL_LEN   (CHORUS_BOOT_NONCE + CHORUS_BOOT_MAC)
#define CHORUS_BOOT_JOIN_MIN   (CHORUS_BOOT_MAC + 8)
#define CHORUS_BOOT_JOIN_MAX   (CHORUS_BOOT_JOIN_MIN + CHORUS_BOOT_BLOB_MAX)
/* The wrapped key and MAC of a RESULT, before the blobs. */
#define CHORUS_BOOT_RESULT_HDR (CHORUS_BOOT_KEY + CHORUS_BOOT_MAC)
#define CHORUS_BOOT_ABANDON_LEN 8
#define CHORUS_BOOT_QUERY_LEN  (CHORUS_BOOT_MAC + 4)
/* The MAC and fixed fields of a STATUS, before its bitmap of joined ranks. */
#define CHORUS_BOOT_STATUS_HDR (CHORUS_BOOT_MAC + 12)
#define CHORUS_BOOT_ERROR_MIN  4
#define CHORUS_BOOT_ERROR_MAX  (4 + CHORUS_BOOT_ERROR_TEXT_MAX)
/* Room for the reason a decoder gives when it refuses a message. */
#define CHORUS_BOOT_WHY_MAX    96

typedef struct {
    unsigned type;              /* CHORUS_BOOT_HELLO.. (not checked by the decoder) */
    uint32_t len;               /* payload bytes that follow the header */
} chorus__boot_hdr_t;

/* A JOIN whose MAC is genuine; blob points into the decoded payload. */
typedef struct {
    uint32_t rank;
    uint32_t size;
    const uint8_t *blob;
    size_t blob_len;
} chorus__boot_join_t;

/* A STATUS whose MAC is genuine; joined points into the decoded payload. */
typedef struct {
    uint32_t seq;
    uint32_t size;
    uint32_t elapsed_ms;        /* since the store started */
    const uint8_t *joined;      /* util/rank_set.h bitmap of size ranks */
} chorus__boot_status_t;

/* The secret and both nonces of one connection: the inputs of every MAC. */
typedef struct {
    const uint8_t *secret;
    size_t secret_len;
    const uint8_t *nc;          /* CHORUS_BOOT_NONCE bytes, the client's */
    const uint8_t *ns;          /* CHORUS_BOOT_NONCE bytes, the store's */
} chorus__boot_keys_t;

/* ---- Header -------------------------------------------------------------------- */

void chorus__boot_header_encode(uint8_t out[CHORUS_BOOT_HEADER], unsigned type, uint32_t len);

/*
 * Checks magic and version of the `len` bytes at buf (a header is
 * CHORUS_BOOT_HEADER bytes). CHORUS_ERR_PROTOCOL with the reason in why
 * (why_len bytes, may be 0); the type and length are for the caller to check.
 */
chorus_status_t chorus__boot_header_decode(const uint8_t *buf, size_t len,
                                           chorus__boot_hdr_t *hdr_p, char *why, size_t why_len);

/*
 * Store: may a connection waiting for want_type (HELLO, JOIN or QUERY) read
 * this payload? Where a JOIN is awaited, an ABANDON is accepted too.
 */
chorus_status_t chorus__boot_store_expect(const chorus__boot_hdr_t *hdr, unsigned want_type);

/* Client: is this exactly the awaited message? (ERROR is the caller's to handle first.) */
chorus_status_t chorus__boot_client_expect(const chorus__boot_hdr_t *hdr, unsigned want_type,
                                           uint64_t want_len);

/* ---- Messages; each encoder returns the bytes it wrote, header included --------- */

size_t chorus__boot_hello_encode(uint8_t out[CHORUS_BOOT_HEADER + CHORUS_BOOT_HELLO_LEN],
                                 const uint8_t nc[CHORUS_BOOT_NONCE]);
chorus_status_t chorus__boot_hello_decode(const uint8_t *payload, size_t len,
                                          uint8_t nc_p[CHORUS_BOOT_NONCE]);

/* keys->ns is the store's fresh nonce; the MAC proves the store holds the secret. */
size_t chorus__boot_challenge_encode(uint8_t out[CHORUS_BOOT_HEADER + CHORUS_BOOT_CHAL_LEN],
                                     const chorus__boot_keys_t *keys);
/*
 * Client: CHORUS_ERR_PROTOCOL (wrong length) or CHORUS_ERR_AUTH (the MAC is
 * not over keys->nc and the store's nonce); on success ns_p is that nonce.
 * keys->ns is not used.
 */
chorus_status_t chorus__boot_challenge_decode(const chorus__boot_keys_t *keys,
                                              const uint8_t *payload, size_t len,
                                              uint8_t ns_p[CHORUS_BOOT_NONCE]);

/* 0 when blob_len exceeds CHORUS_BOOT_BLOB_MAX. */
size_t chorus__boot_join_encode(uint8_t out[CHORUS_BOOT_HEADER + CHORUS_BOOT_JOIN_MAX],
                                const chorus__boot_keys_t *keys, uint32_t rank, uint32_t size,
                                const void *blob, size_t blob_len);
/* CHORUS_ERR_PROTOCOL (length out of range) or CHORUS_ERR_AUTH (MAC). */
chorus_status_t chorus__boot_join_decode(const chorus__boot_keys_t *keys,
                                         const uint8_t *payload, size_t len,
                                         chorus__boot_join_t *join_p);
/*
 * The checks of a JOIN that need no other rank: size in 1..CHORUS_BOOT_SIZE_MAX,
 * rank below size, size * blob_len within CHORUS_BOOT_TOTAL_MAX.
 * CHORUS_ERR_INVALID_ARG with the reason in why.
 */
chorus_status_t chorus__boot_join_check(const chorus__boot_join_t *join, char *why,
                                        size_t why_len);

/*
 * The rank and size a JOIN claims, read without its MAC: what the store names
 * when it refuses a JOIN that fails to authenticate. CHORUS_ERR_PROTOCOL when
 * len is out of range.
 */
chorus_status_t chorus__boot_join_claim(const uint8_t *payload, size_t len, uint32_t *rank_p,
                                        uint32_t *size_p);

/* ---- ABANDON, QUERY and STATUS (version 2) --------------------------------------- */

size_t chorus__boot_abandon_encode(uint8_t out[CHORUS_BOOT_HEADER + CHORUS_BOOT_ABANDON_LEN],
                                   uint32_t rank, uint32_t size);
/* CHORUS_ERR_PROTOCOL when len is not CHORUS_BOOT_ABANDON_LEN. */
chorus_status_t chorus__boot_abandon_decode(const uint8_t *payload, size_t len,
                                            uint32_t *rank_p, uint32_t *size_p);

size_t chorus__boot_query_encode(uint8_t out[CHORUS_BOOT_HEADER + CHORUS_BOOT_QUERY_LEN],
                                 const chorus__boot_keys_t *keys, uint32_t seq);
/* CHORUS_ERR_PROTOCOL (length) or CHORUS_ERR_AUTH (MAC). */
chorus_status_t chorus__boot_query_decode(const chorus__boot_keys_t *keys,
                                          const uint8_t *payload, size_t len, uint32_t *seq_p);

/* Payload bytes of a STATUS for size ranks (size at most CHORUS_BOOT_SIZE_MAX). */
size_t chorus__boot_status_len(uint32_t size);
/*
 * A whole STATUS, header included, into out (room for CHORUS_BOOT_HEADER +
 * chorus__boot_status_len(status->size) bytes); returns the bytes written.
 */
size_t chorus__boot_status_encode(uint8_t *out, const chorus__boot_keys_t *keys,
                                  const chorus__boot_status_t *status);
/*
 * Client: a STATUS for exactly want_size ranks. CHORUS_ERR_PROTOCOL (length or
 * size) or CHORUS_ERR_AUTH (MAC); on success the fields, joined pointing into
 * payload.
 */
chorus_status_t chorus__boot_status_decode(const chorus__boot_keys_t *keys,
                                           const uint8_t *payload, size_t len,
                                           uint32_t want_size, chorus__boot_status_t *status_p);

/*
 * The RESULT's header and prefix (the session key wrapped for this connection
 * and the MAC binding it to the SHA-256 of the blobs); the `total` bytes of
 * blobs follow on the wire. total is at most CHORUS_BOOT_TOTAL_MAX.
 */
size_t chorus__boot_result_encode(uint8_t out[CHORUS_BOOT_HEADER + CHORUS_BOOT_RESULT_HDR],
                                  const chorus__boot_keys_t *keys,
                                  const uint8_t session_key[CHORUS_BOOT_KEY],
                                  const uint8_t blobs_digest[32], uint64_t total);
/*
 * Client: checks the prefix (len bytes, CHORUS_BOOT_RESULT_HDR expected)
 * against the digest of the blobs received: CHORUS_ERR_PROTOCOL or
 * CHORUS_ERR_AUTH; on success the unwrapped session key.
 */
chorus_status_t chorus__boot_result_decode(const chorus__boot_keys_t *keys,
                                           const uint8_t *payload, size_t len,
                                           const uint8_t blobs_digest[32],
                                           uint8_t session_key_p[CHORUS_BOOT_KEY]);

/* text is cut at CHORUS_BOOT_ERROR_TEXT_MAX bytes; status is negative. */
size_t chorus__boot_error_encode(uint8_t out[CHORUS_BOOT_HEADER + CHORUS_BOOT_ERROR_MAX],
                                 chorus_status_t status, const char *text);
/* Whether an ERROR payload of len bytes is acceptable (checked before reading it). */
int chorus__boot_error_len_ok(uint64_t len);
/*
 * CHORUS_ERR_PROTOCOL when len is out of range; otherwise the carried status
 * (CHORUS_ERR_PROTOCOL for a code that is no store error) and the text with
 * control and non-ASCII bytes replaced by '?', NUL-terminated.
 */
chorus_status_t chorus__boot_error_decode(const uint8_t *payload, size_t len,
                                          chorus_status_t *status_p,
                                          char text_p[CHORUS_BOOT_ERROR_TEXT_MAX + 1]);

#endif
