/*
 * Point-to-point transports. A transport is one const struct of operations
 * (designated initializers) that moves tagged messages between the ranks of
 * a context. The core creates one context of each transport per process
 * context and reaches every peer over the best transport that reaches it (a
 * lane per peer); algorithms see neither, only a port (below).
 *
 * Messages match on (peer, space, tag), in order of arrival among equal
 * keys. The space separates communicators that share the connections; the
 * tag separates calls and steps within one. Messages whose tag has
 * TL_TAG_CTRL set are never matched: the transport hands each one, whole,
 * to the context's control handler as it arrives (at most TL_CTRL_MAX
 * bytes); the core's control channel owns them.
 *
 * Connections open on first use: set_peers only records where every peer
 * listens. A transport must bound what a peer can make it buffer: a peer
 * that sends far ahead of the matching receives is held back (credits,
 * rendezvous), never absorbed without limit.
 *
 * Threading: every operation except ctx_create is called from the context's
 * progress thread only.
 */
#ifndef CHORUS_TRANSPORT_H
#define CHORUS_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"
#include "util/config.h"

/* Tags with this bit are control messages: delivered to the control handler, never matched. */
#define TL_TAG_CTRL (1ULL << 63)
/* Largest control message. */
#define TL_CTRL_MAX 1024
/*
 * Set on the last message of a call between two ranks: the one with the
 * highest tag that one sends the other. A receive and a message whose tags
 * differ only in this bit still match, and the receive fails with
 * CHORUS_ERR_TRUNCATED: one side's call has more messages for the other
 * than the other's expects, which lengths alone do not show when the ranks'
 * counts differ by whole messages of equal size.
 */
#define TL_TAG_FINAL (1ULL << 61)

/* A message's tag and a receive's meet: equal but for TL_TAG_FINAL. */
static inline int tl_tag_meets(uint64_t msg_tag, uint64_t recv_tag)
{
    return ((msg_tag ^ recv_tag) & ~TL_TAG_FINAL) == 0;
}

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
 * A send or receive in flight, the same for every transport. The caller
 * owns the memory and keeps it valid until done is set; the transport sets
 * status (and, for a receive, the received length) and then done. Fields
 * after "length" are the transport's own.
 */
typedef struct tl_req tl_req_t;
struct tl_req {
    volatile int done;
    chorus_status_t status;
    size_t length;              /* bytes received (receives) */
    /* transport-private */
    struct tl_req *next;
    int peer;
    uint32_t space;
    uint64_t tag;
    void *buf;
    size_t capacity;
    size_t offset;
    uint64_t id;                /* a transport's handle of the message (rendezvous) */
    size_t frag;                /* bytes of each fragment its payload travels in */
    size_t moved;               /* payload bytes written so far */
};

/* A FIFO of requests linked through tl_req_t.next. */
typedef struct {
    tl_req_t *head;
    tl_req_t *tail;
} tl_reqq_t;

/* A control message arrived whole: from peer, in space, with tag (TL_TAG_CTRL set). */
typedef void (*tl_ctrl_handler_t)(void *arg, int peer, uint32_t space, uint64_t tag,
                                  const void *data, size_t len);

/* Parameters of a context: one per process context. */
typedef struct {
    int rank;
    int size;
    const char *bind_host;      /* numeric address to listen on ("127.0.0.1") */
    const uint8_t *auth_key;    /* per-job key that connections prove they hold */
    size_t auth_key_len;
    double timeout_s;           /* bound of a connection's setup */
    tl_ctrl_handler_t ctrl;     /* where control messages go (NULL: dropped) */
    void *ctrl_arg;
    /* [size] node of every rank (ranks with equal values share a node); NULL: unknown */
    const int *node_of;
} tl_ctx_params_t;

typedef struct tl_ctx tl_ctx_t;

typedef struct {
    const char *name;
    void (*query)(tl_caps_t *caps_p);
    /* This transport's variables (NULL: none). */
    const chorus__config_table_t *config;

    /* Create a context and start listening; the address comes from get_address. */
    chorus_status_t (*ctx_create)(const tl_ctx_params_t *params, tl_ctx_t **ctx_p);
    /* Closes every connection; pending requests complete with CHORUS_ERR_ABORTED. */
    void (*ctx_destroy)(tl_ctx_t *ctx);

    /* This rank's address blob (at most TL_ADDR_MAX bytes), to be exchanged via the bootstrap. */
    chorus_status_t (*get_address)(tl_ctx_t *ctx, void *addr, size_t *len_p);
    /*
     * Every rank's address blob (addrs + r * TL_ADDR_MAX), from the bootstrap.
     * Connections open on first use and authenticate with the auth key.
     * CHORUS_ERR_INVALID_ARG when a blob is malformed.
     */
    chorus_status_t (*set_peers)(tl_ctx_t *ctx, const void *addrs);
    /* 1 when this transport reaches peer (after set_peers). */
    int (*reaches)(tl_ctx_t *ctx, int peer);

    /* Post a send or a receive of exactly-tagged data to/from peer in space. */
    chorus_status_t (*send_nb)(tl_ctx_t *ctx, int peer, uint32_t space, uint64_t tag,
                               const void *buf, size_t len, tl_req_t *req);
    chorus_status_t (*recv_nb)(tl_ctx_t *ctx, int peer, uint32_t space, uint64_t tag,
                               void *buf, size_t capacity, tl_req_t *req);

    /*
     * Make progress without blocking. Returns the number of requests completed
     * and control messages delivered, or a negative status for a fault of the
     * whole context.
     */
    int (*progress)(tl_ctx_t *ctx);
    /* A file descriptor that becomes readable when progress has work (epoll-able). */
    int (*event_fd)(tl_ctx_t *ctx);

    /* Fail every pending request with status and close all connections. */
    void (*fail_all)(tl_ctx_t *ctx, chorus_status_t status);
    /* Connections open now (for tests and chorus-info); may be NULL. */
    int (*connections)(tl_ctx_t *ctx);
    /*
     * Streams per peer that payload is dealt to: use > 0 caps them at use
     * from the next fragment on (a peer never has more than both ranks
     * opened); use <= 0 only asks. Returns the most this rank opens per
     * peer. Safe from any thread (a tuner's): it only sets a bound the
     * progress thread reads. NULL: one stream per peer, always.
     */
    int (*streams)(tl_ctx_t *ctx, int use);
    /*
     * CHORUS_TRANSPORT=auto: 1 when this machine has a device this network
     * transport reaches peers over faster than the first network transport
     * does (which is always opened), so it is opened beside it and taken
     * where every rank opened it. NULL: never. Cheap: no context is made.
     */
    int (*offered)(void);
} tl_ops_t;

#define TL_ADDR_MAX 320

/* ---- what every transport does alike (req.c) ---- */

/* The request is over: status and length, then done (a release: who sees done sees them). */
void tl_req_complete(tl_req_t *req, chorus_status_t status, size_t length);
/* A request about to be posted: to or from peer, in space with tag, on capacity bytes at buf. */
void tl_req_init(tl_req_t *req, int peer, uint32_t space, uint64_t tag, void *buf,
                 size_t capacity);
/* Complete every request of q with status (nothing received); returns how many. */
int tl_reqq_fail(tl_reqq_t *q, chorus_status_t status);
void tl_reqq_push(tl_reqq_t *q, tl_req_t *req);
tl_req_t *tl_reqq_pop(tl_reqq_t *q);
/* Unlink the oldest receive a message of (space, tag) meets (same-tag messages match in order). */
tl_req_t *tl_reqq_take(tl_reqq_t *q, uint32_t space, uint64_t tag);
/* Unlink the request with this id (a transport's handle of its message), or NULL. */
tl_req_t *tl_reqq_take_id(tl_reqq_t *q, uint64_t id);
/*
 * 1 when a message (tag, length) from peer may land in the receive req it
 * met at `rank`; else logs why not (longer than the receive, or TL_TAG_FINAL
 * differs) and returns 0: the receive then fails as truncated.
 */
int tl_msg_fits(int rank, int peer, uint64_t tag, uint64_t length, const tl_req_t *req);
/*
 * The checks of ctx_create every transport (named tl) makes: a rank within
 * the size, a bind host, a non-empty key, a positive timeout.
 */
chorus_status_t tl_ctx_params_check(const char *tl, const tl_ctx_params_t *params);

/*
 * Every point-to-point transport built in, in order of preference: a peer
 * is reached over the first one that reaches it. NULL-terminated.
 */
extern const tl_ops_t *const tl_p2p_all[];
/* The transport named name ("tcp"), or NULL. */
const tl_ops_t *tl_find(const char *name);

/*
 * A port: what an algorithm sends and receives through, in the ranks of its
 * communicator. The core implements it over the lanes of the communicator's
 * context, with the communicator's space; the schedule simulator over
 * memory.
 */
typedef struct tl_port tl_port_t;
struct tl_port {
    chorus_status_t (*send_nb)(tl_port_t *port, int peer, uint64_t tag, const void *buf,
                               size_t len, tl_req_t *req);
    chorus_status_t (*recv_nb)(tl_port_t *port, int peer, uint64_t tag, void *buf,
                               size_t capacity, tl_req_t *req);
};

#endif
