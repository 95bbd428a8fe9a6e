/*
 * Bootstrap rendezvous: every rank sends a small address blob to a store and
 * receives every rank's blob, plus a session key the transports use to
 * authenticate their own connections.
 *
 * Wire format (all integers big-endian). Every message starts with a header:
 *   u32 magic CHORUS_BOOT_MAGIC, u16 version, u16 type, u32 payload length.
 * The exchange, with K the job secret, Nc and Ns 32-byte random nonces:
 *   client -> store  HELLO      Nc
 *   store  -> client CHALLENGE  Ns, HMAC(K, "chorus-boot-v1 store" Nc Ns)
 *   client -> store  JOIN       HMAC(K, "chorus-boot-v1 client" Nc Ns rank size blob),
 *                               u32 rank, u32 size, blob
 *   store  -> client RESULT     session key XOR HMAC(K, "chorus-boot-v1 key" Nc Ns),
 *                               HMAC(K, "chorus-boot-v1 result" Nc Ns wrapped-key
 *                                       SHA-256(blobs)),
 *                               size * blob_len bytes of blobs in rank order
 * or, at any point, store -> client ERROR: u32 code (negated chorus_status_t), text.
 * Each side proves it holds K over the other side's fresh nonce, so the secret
 * never crosses the wire and a recorded exchange cannot be replayed.
 */
#ifndef CHORUS_CORE_BOOTSTRAP_H
#define CHORUS_CORE_BOOTSTRAP_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"
#include "util/sock.h"

#define CHORUS_BOOT_MAGIC      0x43484231u  /* "CHB1" */
#define CHORUS_BOOT_VERSION    1
#define CHORUS_BOOT_HEADER     12           /* bytes */
#define CHORUS_BOOT_NONCE      32
#define CHORUS_BOOT_BLOB_MAX   4096         /* bytes per rank */
#define CHORUS_BOOT_SIZE_MAX   (1 << 20)    /* ranks */
#define CHORUS_BOOT_TOTAL_MAX  (1u << 30)   /* bytes of all blobs together */
#define CHORUS_BOOT_ERROR_TEXT_MAX 200      /* bytes of an ERROR message's text */

enum {
    CHORUS_BOOT_HELLO = 1,
    CHORUS_BOOT_CHALLENGE = 2,
    CHORUS_BOOT_JOIN = 3,
    CHORUS_BOOT_RESULT = 4,
    CHORUS_BOOT_ERROR = 5,
};

#define CHORUS_BOOT_LABEL_STORE  "chorus-boot-v1 store"
#define CHORUS_BOOT_LABEL_CLIENT "chorus-boot-v1 client"
#define CHORUS_BOOT_LABEL_KEY    "chorus-boot-v1 key"
#define CHORUS_BOOT_LABEL_RESULT "chorus-boot-v1 result"

typedef struct chorus__store chorus__store_t;

/*
 * Start a rendezvous store listening on addr ("host:port", port may be 0) in
 * its own thread. bound_addr (may be NULL) receives the "host:port" actually
 * bound, at most CHORUS_SOCK_ADDR_MAX bytes with its NUL. The
 * store serves ONE rendezvous of `size` ranks (size is announced by each
 * client; all must agree, and so must their blob lengths), then its thread
 * ends; it also ends at timeout_s, closing everything.
 * detached != 0: the thread frees itself when done (for a store nobody joins)
 * and *store_p is set to NULL (store_p may then be NULL); otherwise
 * chorus__store_join() waits for it and frees it.
 */
chorus_status_t chorus__store_start(const char *addr, const char *secret, size_t secret_len,
                                    double timeout_s, int detached, char *bound_addr,
                                    size_t bound_len, chorus__store_t **store_p);

/*
 * Wait for a non-detached store's thread (it ends by its deadline) and free it.
 * Returns CHORUS_OK when every rank received the result, CHORUS_ERR_TIMEOUT
 * when the deadline passed first, or the fault that stopped the store.
 */
chorus_status_t chorus__store_join(chorus__store_t *store);

/* Ranks that have joined so far (authenticated and accepted); for progress and tests. */
int chorus__store_joined(chorus__store_t *store);

/*
 * Client: connect to the store at addr, authenticate, announce (rank, size,
 * blob), and receive every rank's blob (all_blobs: size * blob_len bytes, in
 * rank order; undefined on failure), a 32-byte per-job session key generated
 * by the store, and local_host: the numeric local address of this connection
 * (what a transport should listen on to be reachable by the others), without
 * port or brackets. local_host may be NULL. Bounded by timeout_s.
 * Errors: CHORUS_ERR_AUTH (the store or this rank has the wrong secret),
 * CHORUS_ERR_IN_USE (rank already joined), CHORUS_ERR_INVALID_ARG (rank out of
 * range, or size or blob length disagreeing with the first rank),
 * CHORUS_ERR_PROTOCOL (malformed reply), CHORUS_ERR_TIMEOUT.
 */
chorus_status_t chorus__bootstrap_exchange(const char *addr, const char *secret,
                                           size_t secret_len, int rank, int size,
                                           double timeout_s, const void *blob,
                                           size_t blob_len, void *all_blobs,
                                           uint8_t session_key[32], char *local_host,
                                           size_t local_host_len);

#endif
