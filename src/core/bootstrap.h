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
 *
 * Version 2 adds three messages; a peer of another version is refused at its
 * first header, by a message naming both versions.
 *   client -> store  ABANDON    u32 rank, u32 size: sent instead of JOIN when the
 *                               CHALLENGE fails to verify, so that the store can
 *                               say at once which rank has another secret. It
 *                               carries no MAC: it is a claim, and the store
 *                               treats it as one (see "refused peers" below).
 *   client -> store  QUERY      HMAC(K, "chorus-boot-v2 query" Nc Ns seq), u32 seq:
 *                               a joined rank asks who has joined.
 *   store  -> client STATUS     HMAC(K, "chorus-boot-v2 status" Nc Ns seq size
 *                                       elapsed_ms SHA-256(bitmap)),
 *                               u32 seq, u32 size, u32 elapsed_ms (since the store
 *                               started), bitmap of joined ranks (rank r is bit
 *                               r % 8 of byte r / 8; ceil(size / 8) bytes).
 *
 * Refused peers. The store refuses a peer that fails to authenticate (or
 * ABANDONs), announces a rank that is already joined, or disagrees on the size
 * or the address length. It logs a warning naming the peer, the rank it claimed
 * and why, at once. Such a refusal stops the whole rendezvous, with an ERROR
 * naming it sent to every joined rank, when after a grace period
 * (CHORUS_BOOT_GRACE of the timeout, at least 1 s and at most 10 s):
 *   - the refused peer had authenticated (it holds the job secret, so it is one
 *     of the job's own processes, started with a wrong rank or size) and the
 *     rendezvous is still incomplete; or
 *   - it had not (a claim anyone can make) and the rank it claimed is still
 *     missing.
 * So a process started with the wrong secret fails the job within seconds, a
 * correct process that arrives for that rank within the grace still completes
 * it, and a stranger without the secret can stop only a rendezvous that is
 * missing the very rank it names, after that rank was already late.
 */
#ifndef CHORUS_CORE_BOOTSTRAP_H
#define CHORUS_CORE_BOOTSTRAP_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"
#include "util/sock.h"

#define CHORUS_BOOT_MAGIC      0x43484231u  /* "CHB1" */
#define CHORUS_BOOT_VERSION    2
#define CHORUS_BOOT_HEADER     12           /* bytes */
#define CHORUS_BOOT_NONCE      32
#define CHORUS_BOOT_BLOB_MAX   4096         /* bytes per rank */
#define CHORUS_BOOT_SIZE_MAX   (1 << 20)    /* ranks */
#define CHORUS_BOOT_TOTAL_MAX  (1u << 30)   /* bytes of all blobs together */
#define CHORUS_BOOT_ERROR_TEXT_MAX 200      /* bytes of an ERROR message's text */
/* The grace after a refusal, as a share of the timeout, and its bounds in seconds. */
#define CHORUS_BOOT_GRACE      0.1
#define CHORUS_BOOT_GRACE_MIN  1.0
#define CHORUS_BOOT_GRACE_MAX  10.0

enum {
    CHORUS_BOOT_HELLO = 1,
    CHORUS_BOOT_CHALLENGE = 2,
    CHORUS_BOOT_JOIN = 3,
    CHORUS_BOOT_RESULT = 4,
    CHORUS_BOOT_ERROR = 5,
    CHORUS_BOOT_ABANDON = 6,
    CHORUS_BOOT_QUERY = 7,
    CHORUS_BOOT_STATUS = 8,
};

#define CHORUS_BOOT_LABEL_STORE  "chorus-boot-v1 store"
#define CHORUS_BOOT_LABEL_CLIENT "chorus-boot-v1 client"
#define CHORUS_BOOT_LABEL_KEY    "chorus-boot-v1 key"
#define CHORUS_BOOT_LABEL_RESULT "chorus-boot-v1 result"
#define CHORUS_BOOT_LABEL_QUERY  "chorus-boot-v2 query"
#define CHORUS_BOOT_LABEL_STATUS "chorus-boot-v2 status"

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

/* Who a client is and how long it waits. */
typedef struct {
    const char *addr;           /* the store's "host:port" */
    const char *secret;
    size_t secret_len;
    int rank, size;
    double timeout_s;
    /*
     * Every report_s seconds while this rank waits for the store to accept
     * its connection, say so at the warning level; while it waits for the
     * others, ask the store who has joined and log it (0: never; the
     * store is still asked once shortly before the timeout, so that a timeout
     * names the ranks that never joined).
     */
    double report_s;
} chorus__boot_client_params_t;

/*
 * Client: connect to the store at p->addr, authenticate, announce (rank, size,
 * blob), and receive every rank's blob (all_blobs: size * blob_len bytes, in
 * rank order; undefined on failure), a 32-byte per-job session key generated
 * by the store, and local_host: the numeric local address of this connection
 * (what a transport should listen on to be reachable by the others), without
 * port or brackets. local_host may be NULL. Bounded by p->timeout_s.
 * Errors: CHORUS_ERR_AUTH (the store or this rank has the wrong secret, or the
 * store stopped the rendezvous because a rank had it),
 * CHORUS_ERR_IN_USE (rank already joined), CHORUS_ERR_INVALID_ARG (rank out of
 * range, or size or blob length disagreeing with the first rank),
 * CHORUS_ERR_PROTOCOL (malformed reply), CHORUS_ERR_TIMEOUT. When the store
 * stops the rendezvous for another rank's refusal, its status is returned
 * and the store's reason logged.
 */
chorus_status_t chorus__bootstrap_exchange(const chorus__boot_client_params_t *p,
                                           const void *blob, size_t blob_len, void *all_blobs,
                                           uint8_t session_key[32], char *local_host,
                                           size_t local_host_len);

#endif
