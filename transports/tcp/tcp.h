/*
 * TCP transport: private structures shared by its files.
 *
 * One context holds one connection per peer (a full mesh). Every message on
 * a connection is a fixed header followed by its payload. Sends wait in a
 * per-peer queue; receives are matched by (peer, tag) in arrival order.
 */
#ifndef CHORUS_TL_TCP_H
#define CHORUS_TL_TCP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "transports/base/transport.h"

/* Wire format, little-endian on the wire whatever the host's byte order. */
#define TL_TCP_MAGIC         0x53524843u /* "CHRS" */
#define TL_TCP_HELLO_MAGIC   0x4f4c4548u /* "HELO" */
#define TL_TCP_VERSION       2u
#define TL_TCP_MAX_MSG       (UINT64_C(1) << 40)
#define TL_TCP_NONCE_BYTES   32
#define TL_TCP_MAC_BYTES     32

/* Message header as it travels (24 bytes, no padding). */
typedef struct {
    uint32_t magic;
    uint32_t space;             /* the communicator's space (tl_ops_t) */
    uint64_t tag;
    uint64_t length;
} tl_tcp_hdr_t;

/* Connection hello, sent by the connecting side after it reads the nonce. */
typedef struct {
    uint32_t magic;
    uint32_t version;
    uint32_t from_rank;
    uint32_t to_rank;
    uint8_t mac[TL_TCP_MAC_BYTES]; /* HMAC(key, nonce || from || to) */
} tl_tcp_hello_t;

/* A message that arrived before its receive was posted. */
typedef struct tl_tcp_ue {
    struct tl_tcp_ue *next;
    size_t capacity;            /* bytes of data allocated (>= length) */
    uint32_t space;
    uint64_t tag;
    uint64_t length;
    int complete;               /* all payload bytes are in data */
    unsigned char data[];
} tl_tcp_ue_t;

typedef enum {
    TL_TCP_RX_HEADER = 0,       /* reading a header into rx_hdr */
    TL_TCP_RX_PAYLOAD,          /* reading payload into rx_req's buffer or rx_ue */
    TL_TCP_RX_DISCARD           /* draining the payload of a truncated message */
} tl_tcp_rx_state_t;

/* FIFO of requests linked through tl_req_t.next. */
typedef struct {
    tl_req_t *head;
    tl_req_t *tail;
} tl_tcp_reqq_t;

typedef struct {
    int rank;
    int fd;                     /* -1 when not connected or closed */
    chorus_status_t failed;     /* status of every later post once the peer is lost */
    uint32_t events;            /* current epoll interest */

    tl_tcp_reqq_t sendq;        /* head is being written */
    tl_tcp_hdr_t tx_hdr;        /* encoded header of sendq.head */

    tl_tcp_reqq_t postq;        /* posted receives not yet matched */
    tl_tcp_ue_t *ue_head;       /* unexpected messages, in arrival order */
    tl_tcp_ue_t *ue_tail;

    tl_tcp_rx_state_t rx_state;
    tl_tcp_hdr_t rx_hdr;
    size_t rx_hdr_got;
    uint64_t rx_len;            /* payload length of the message being read */
    uint64_t rx_got;
    tl_req_t *rx_req;           /* matched receive the payload lands in, or NULL */
    int rx_ctrl;                /* rx_ue is a control message: delivered, never matched */
    tl_tcp_ue_t *rx_ue;         /* unexpected buffer the payload lands in, or NULL */
} tl_tcp_peer_t;

#define TL_TCP_UE_CACHE 16

struct tl_ctx {
    int rank;
    int size;
    int listen_fd;
    int epfd;
    int connected;              /* connect_all succeeded */
    double timeout_s;
    uint8_t *auth_key;
    size_t auth_key_len;
    chorus_status_t fatal;      /* set by fail_all: every later post fails with it */
    tl_ctrl_handler_t ctrl;     /* where control messages go */
    void *ctrl_arg;
    int deferred;               /* completions made outside progress, reported by it */
    tl_tcp_peer_t *peers;       /* size entries; peers[rank] is this rank (loopback) */
    unsigned char *scratch;     /* sink for the payload of truncated messages */
    size_t scratch_len;
    /*
     * Unexpected-message buffers kept for reuse: allocating one per message
     * makes the kernel fault in fresh pages for every chunk that arrives
     * before its receive is posted.
     */
    tl_tcp_ue_t *ue_cache[TL_TCP_UE_CACHE];
    int ue_cached;
};

extern const tl_ops_t tl_tcp_ops;

/* Decode a received header and check it: CHORUS_ERR_PROTOCOL if malformed. */
chorus_status_t tl_tcp_header_check(const tl_tcp_hdr_t *wire, uint32_t *space_p,
                                    uint64_t *tag_p, uint64_t *length_p);
void tl_tcp_header_encode(tl_tcp_hdr_t *wire, uint32_t space, uint64_t tag, uint64_t length);

/* tcp_conn.c: data path */
void tl_tcp_peer_init(tl_tcp_peer_t *peer, int rank);
chorus_status_t tl_tcp_peer_attach(tl_ctx_t *ctx, tl_tcp_peer_t *peer, int fd);
int tl_tcp_peer_fail(tl_ctx_t *ctx, tl_tcp_peer_t *peer, chorus_status_t status);
void tl_tcp_peer_free_unexpected(tl_ctx_t *ctx, tl_tcp_peer_t *peer);
/* Free the cached unexpected-message buffers (context teardown). */
void tl_tcp_ue_cache_clear(tl_ctx_t *ctx);
int tl_tcp_peer_read(tl_ctx_t *ctx, tl_tcp_peer_t *peer);
int tl_tcp_peer_write(tl_ctx_t *ctx, tl_tcp_peer_t *peer);
void tl_tcp_req_complete(tl_req_t *req, chorus_status_t status, size_t length);
chorus_status_t tl_tcp_send_nb(tl_ctx_t *ctx, int peer, uint32_t space, uint64_t tag,
                               const void *buf, size_t len, tl_req_t *req);
chorus_status_t tl_tcp_recv_nb(tl_ctx_t *ctx, int peer, uint32_t space, uint64_t tag,
                               void *buf, size_t capacity, tl_req_t *req);

/* tcp_connect.c: authenticated full-mesh setup */
chorus_status_t tl_tcp_connect_all(tl_ctx_t *ctx, const void *addrs);

/* tcp_ctx.c: TCP_NODELAY and large buffers, best effort */
void tl_tcp_sock_tune(int fd);

/* The address blob exchanged through the bootstrap. */
#define TL_TCP_HOST_MAX 64
typedef struct {
    char host[TL_TCP_HOST_MAX]; /* numeric, NUL-terminated */
    char port[8];               /* decimal, NUL-terminated */
} tl_tcp_addr_t;

/*
 * tcp_connect.c: decoders of what arrives from the wire or through the
 * bootstrap, pure so that tests/fuzz/ runs exactly this code. Output
 * arguments are written only on success.
 */
void tl_tcp_hello_encode(tl_tcp_hello_t *wire, uint32_t from, uint32_t to,
                         const uint8_t mac[TL_TCP_MAC_BYTES]);
/*
 * The len bytes of a hello received by `rank` of `size`: CHORUS_ERR_PROTOCOL,
 * with the reason in why (why_len bytes), unless it is a hello of this version
 * from a higher rank to this one. The MAC is returned unchecked (it needs the key).
 */
chorus_status_t tl_tcp_hello_decode(const void *buf, size_t len, int rank, int size,
                                    uint32_t *from_p, uint8_t mac_p[TL_TCP_MAC_BYTES],
                                    char *why, size_t why_len);
/* CHORUS_ERR_INVALID_ARG unless the first sizeof(tl_tcp_addr_t) of len bytes hold
 * a NUL-terminated host and port. */
chorus_status_t tl_tcp_addr_decode(const void *buf, size_t len, tl_tcp_addr_t *addr_p);
/* A decoded blob to a socket address, numerically only: getaddrinfo's code, 0 on success. */
int tl_tcp_addr_resolve(const tl_tcp_addr_t *addr, struct sockaddr_storage *sa_p,
                        socklen_t *salen_p);

#endif
