/*
 * The transport interface. A transport is one const struct of operations
 * (designated initializers) that moves tagged messages between ranks.
 * Algorithms never see a concrete transport; the core creates a context per
 * communicator and drives it from its progress thread.
 *
 * Threading: every operation except ctx_create is called from the
 * communicator's progress thread only.
 */
#ifndef CHORUS_TRANSPORT_H
#define CHORUS_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include "chorus.h"

/* What a transport can do. */
typedef struct {
    unsigned mem_host : 1;      /* moves host memory */
    unsigned mem_cuda : 1;      /* moves CUDA device memory */
    unsigned reach_node : 1;    /* ranks on the same node */
    unsigned reach_network : 1; /* ranks on other nodes */
    double latency_us;          /* class figures for the cost model */
    double bandwidth_gbs;
} tl_caps_t;

/*
 * A send or receive in flight. The caller owns the memory and keeps it
 * valid until done is set; the transport sets status (and, for a receive,
 * the received length) and then done. Fields after "done" are the
 * transport's own.
 */
typedef struct tl_req {
    volatile int done;
    chorus_status_t status;
    size_t length;              /* bytes received (receives) */
    /* transport-private */
    struct tl_req *next;
    int peer;
    uint64_t tag;
    void *buf;
    size_t capacity;
    size_t offset;
} tl_req_t;

/* Parameters of a context: one per communicator. */
typedef struct {
    int rank;
    int size;
    const char *bind_host;      /* numeric address to listen on ("127.0.0.1") */
    const uint8_t *auth_key;    /* per-job key that connections prove they hold */
    size_t auth_key_len;
    double timeout_s;           /* bound of connection setup */
} tl_ctx_params_t;

typedef struct tl_ctx tl_ctx_t;

typedef struct {
    const char *name;
    void (*query)(tl_caps_t *caps_p);

    /* Create a context and start listening; the address comes from get_address. */
    chorus_status_t (*ctx_create)(const tl_ctx_params_t *params, tl_ctx_t **ctx_p);
    /* Closes every connection; pending requests complete with CHORUS_ERR_ABORTED. */
    void (*ctx_destroy)(tl_ctx_t *ctx);

    /* This rank's address blob (at most TL_ADDR_MAX bytes), to be exchanged via the bootstrap. */
    chorus_status_t (*get_address)(tl_ctx_t *ctx, void *addr, size_t *len_p);
    /*
     * Connect to every peer, given every rank's address blob (addrs + r * TL_ADDR_MAX),
     * authenticating each connection with the auth key. Collective; bounded by timeout_s.
     */
    chorus_status_t (*connect_all)(tl_ctx_t *ctx, const void *addrs);

    /* Post a send or a receive of exactly-tagged data to/from peer. */
    chorus_status_t (*send_nb)(tl_ctx_t *ctx, int peer, const void *buf, size_t len,
                               uint64_t tag, tl_req_t *req);
    chorus_status_t (*recv_nb)(tl_ctx_t *ctx, int peer, void *buf, size_t capacity,
                               uint64_t tag, tl_req_t *req);

    /*
     * Make progress without blocking. Returns the number of requests completed,
     * or a negative status for a fault of the whole context.
     */
    int (*progress)(tl_ctx_t *ctx);
    /* A file descriptor that becomes readable when progress has work (epoll-able). */
    int (*event_fd)(tl_ctx_t *ctx);

    /* Fail every pending request with status and close all connections. */
    void (*fail_all)(tl_ctx_t *ctx, chorus_status_t status);
} tl_ops_t;

#define TL_ADDR_MAX 128

extern const tl_ops_t tl_tcp_ops;

/* The transport named name ("tcp"), or NULL. */
const tl_ops_t *tl_find(const char *name);

#endif
