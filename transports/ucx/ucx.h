/*
 * UCX transport: private structures shared by its files, and the protocol
 * its ranks speak over UCX active messages (one handler id, TL_UCX_AM_ID).
 *
 * Addresses. A rank publishes its UCP worker's address with a fresh random
 * nonce and its window (tl_ucx_blob_t). When the full address does not fit
 * TL_ADDR_MAX, the network-only one is published (ranks of one node then
 * reach each other over the network devices too). UCX itself picks the
 * devices (shared memory on one node, TCP, RDMA where there is a device;
 * UCX_TLS and UCX_NET_DEVICES narrow them).
 *
 * Connections. set_peers only records every peer's address; the first send
 * to a peer creates the endpoint (with UCX's peer error handling, so a peer
 * that dies fails it) and proves the job key, and sends posted meanwhile
 * wait in the peer's queue:
 *
 *   a -> b  HELLO  payload HMAC(key, "hello" || nonce_b || a || b)
 *   b -> a  ACK    payload HMAC(key, "ack" || nonce_a || a || b), over b's
 *                  own endpoint to a, created then if b had none
 *        or REJECT (b could not verify the hello: the keys differ)
 *
 * A rank whose hello passed is connected both ways: either side may send
 * data at once (b on its endpoint, a once the ACK arrived and passed). A
 * REJECT, or an ACK that does not pass, fails the peer with CHORUS_ERR_AUTH;
 * no answer within the context's timeout fails it with CHORUS_ERR_TIMEOUT.
 * A receive never creates an endpoint.
 *
 * Messages. Every message has a 56-byte header (tl_ucx_hdr_t, little-endian):
 *
 *   HELLO, ACK, REJECT   the handshake above; the MAC is the payload
 *   DATA   space, tag, seq   a message; seq counts the DATA the sender has
 *                            sent this receiver, so one that is lost or
 *                            out of order is a protocol error, never a
 *                            silent mismatch
 *   CREDIT value             window bytes returned to the sender
 *   BYE                      the sender is closing: fail it now, not when
 *                            UCX notices it gone
 *   BYE_ACK                  the answer: every message sent before the BYE
 *                            has been taken in
 *
 * Closing. UCX drops what is still on its way from a peer it finds gone,
 * so a context that closes (or fails all) sends BYE to the peers it talks
 * to and waits, at most TL_UCX_CLOSE_S, for each one's BYE_ACK before it
 * closes its endpoints: the last messages of a job are received, not lost
 * to the race between its exit and their arrival. A rank answers a BYE after
 * recording everything that came before it, and closes its endpoint to that
 * peer once the answer has left.
 *
 * DATA, CREDIT, BYE and BYE_ACK carry the pair's token: the first 16 bytes of
 * HMAC(key, "data" || nonce_receiver || sender || receiver), which only a
 * holder of the job key can compute for this context. A message with a
 * wrong token, a malformed header, or from a failed peer is dropped.
 *
 *   RTS    space, tag, seq, value   a message of value bytes waits for its
 *                                   receive (CHORUS_UCX_RNDV=chorus)
 *   CTS    seq, value               send it: value bytes (0: it was dropped)
 *   RDATA  seq, tag = offset        a fragment of its payload, placed at the
 *                                   offset in the posted buffer on arrival
 *
 * Flow control, as in the TCP transport. Each rank publishes a window
 * (CHORUS_UCX_WINDOW): what it holds of one peer's messages that have not
 * met their receive. A message of at most CHORUS_UCX_EAGER_SIZE bytes that
 * fits the remaining credit goes eagerly and costs its length; the receiver
 * returns the bytes in CREDIT messages as it consumes them (a quarter
 * window at a time). Every other message goes by rendezvous, one of two
 * (CHORUS_UCX_RNDV):
 *
 *   ucx     UCX's own: the receiver keeps only UCX's descriptor until a
 *           receive is posted, then UCX moves the payload straight into the
 *           posted buffer (zero-copy where the device allows: RDMA).
 *   chorus  RTS, then CTS once a receive is posted, then the payload in
 *           RDATA fragments of TL_UCX_FRAG bytes, sent eagerly and copied
 *           into the posted buffer as they arrive. Over UCX's TCP this keeps
 *           both directions of a link busy where UCX's own rendezvous, whose
 *           acknowledgements queue behind the other direction's payload,
 *           halves an allreduce's rate.
 *
 * Either way a receiver holds no payload it has not asked for, so no order
 * of posts can deadlock and no peer can make a rank hold more than its
 * window.
 *
 * Matching. DATA and RTS are matched against posted receives by (space, tag) in
 * arrival order (UCX delivers one endpoint's messages in order; seq checks
 * it). A message longer than its receive fails the receive with
 * CHORUS_ERR_TRUNCATED, as does one whose TL_TAG_FINAL bit differs.
 * Control messages (TL_TAG_CTRL) go eagerly, need no credit and reach the
 * context's control handler whole.
 *
 * Progress. UCX's callbacks run inside ucp_worker_progress; they only
 * record what arrived (or, for eager data that meets a posted receive when
 * nothing is waiting before it, copy it there), and progress() acts on the
 * records afterwards, so no UCX call is made from inside UCX. The event fd
 * is an epoll set of the worker's fd, a timer for handshake deadlines and
 * an eventfd for work left over.
 */
#ifndef CHORUS_TL_UCX_H
#define CHORUS_TL_UCX_H

#include <stddef.h>
#include <stdint.h>

#include <ucp/api/ucp.h>

#include "transports/base/transport.h"

#define TL_UCX_MAGIC        0x55524843u /* "CHRU" */
#define TL_UCX_VERSION      1u
#define TL_UCX_AM_ID        0x43u
#define TL_UCX_NONCE_BYTES  32
#define TL_UCX_MAC_BYTES    32
#define TL_UCX_TOKEN_BYTES  16
/* The largest message: as in the TCP transport. */
#define TL_UCX_MAX_MSG      (UINT64_C(1) << 40)
/* RDATA fragments of chorus's rendezvous. */
#define TL_UCX_FRAG         (256u << 10)

typedef enum {
    TL_UCX_HELLO = 1,
    TL_UCX_ACK,
    TL_UCX_REJECT,
    TL_UCX_DATA,
    TL_UCX_CREDIT,
    TL_UCX_BYE,
    TL_UCX_BYE_ACK,
    TL_UCX_RTS,
    TL_UCX_CTS,
    TL_UCX_RDATA,
    TL_UCX_KIND_END
} tl_ucx_kind_t;

/* A message's header as it travels (56 bytes, little-endian, no padding). */
typedef struct {
    uint32_t magic;
    uint8_t kind;               /* tl_ucx_kind_t */
    uint8_t charged;            /* DATA: its length counts against the receiver's window */
    uint16_t zero;
    uint32_t from;              /* the sender's rank */
    uint32_t space;             /* DATA, RTS */
    uint64_t tag;               /* DATA, RTS; RDATA: the fragment's offset */
    uint64_t seq;               /* DATA, RTS: the sender's count of them to this receiver;
                                   CTS, RDATA: the RTS's, naming its message */
    uint64_t value;             /* CREDIT: bytes returned; RTS: the message's length;
                                   CTS: the bytes asked for (0: none, it was dropped) */
    uint8_t token[TL_UCX_TOKEN_BYTES]; /* zero in the handshake; else the pair's token */
} tl_ucx_hdr_t;

/* A header decoded. */
typedef struct {
    tl_ucx_kind_t kind;
    int charged;
    uint32_t from;
    uint32_t space;
    uint64_t tag;
    uint64_t seq;
    uint64_t value;
    uint8_t token[TL_UCX_TOKEN_BYTES];
} tl_ucx_msg_hdr_t;

/* The address blob exchanged through the bootstrap (TL_ADDR_MAX bytes at most). */
#define TL_UCX_BLOB_HEAD    56
#define TL_UCX_ADDR_MAX     (TL_ADDR_MAX - TL_UCX_BLOB_HEAD)
typedef struct {
    uint32_t magic;
    uint16_t version;
    uint16_t addr_len;          /* bytes of addr used */
    uint32_t rank;
    uint32_t zero;
    uint64_t window;            /* bytes of eager data this rank holds per peer */
    uint8_t nonce[TL_UCX_NONCE_BYTES];
    uint8_t addr[TL_UCX_ADDR_MAX]; /* the UCP worker's address */
} tl_ucx_blob_t;

/* A blob decoded. */
typedef struct {
    uint64_t window;
    uint8_t nonce[TL_UCX_NONCE_BYTES];
    size_t addr_len;
    const uint8_t *addr;        /* inside the blob */
} tl_ucx_peer_addr_t;

/* Variables (CHORUS_UCX_*). */
typedef struct {
    size_t eager_bytes;
    size_t window_bytes;
    chorus__config_str_t rndv;  /* "ucx" or "chorus" */
} tl_ucx_config_t;

extern const chorus__config_table_t tl_ucx_config_table;

/*
 * Something that arrived: recorded by the active-message callback, acted
 * on by progress(). Unexpected DATA stays on in its peer's list.
 */
typedef struct tl_ucx_msg {
    struct tl_ucx_msg *next;
    tl_ucx_msg_hdr_t hdr;
    size_t length;              /* payload bytes */
    void *desc;                 /* rendezvous: UCX's descriptor of the payload; else NULL */
    unsigned char data[];       /* eager payload */
} tl_ucx_msg_t;

typedef struct {
    tl_ucx_msg_t *head;
    tl_ucx_msg_t *tail;
} tl_ucx_msgq_t;

typedef enum {
    TL_UCX_PEER_IDLE = 0,       /* no endpoint of ours yet, no hello heard */
    TL_UCX_PEER_CONNECTING,     /* our hello is out; sends wait for the ACK */
    TL_UCX_PEER_UP,             /* a hello passed, one way or the other */
    TL_UCX_PEER_CLOSED          /* for good; failed says why */
} tl_ucx_peer_state_t;

struct tl_ucx_ctx;

typedef struct {
    struct tl_ucx_ctx *ctx;
    int rank;
    tl_ucx_peer_state_t state;
    chorus_status_t failed;     /* why it closed */
    ucp_ep_h ep;                /* ours to the peer; NULL until needed */
    ucs_status_t ep_error;      /* set by UCX's error callback, acted on by progress */
    uint8_t *addr;              /* its worker address */
    size_t addr_len;
    uint8_t nonce[TL_UCX_NONCE_BYTES];
    uint64_t window;            /* its window: our credit starts there */
    uint64_t credit;            /* bytes we may still send it eagerly */
    uint64_t charged_out;       /* bytes of our eager data it has not returned yet */
    uint64_t owed;              /* bytes of its eager data consumed here, not returned */
    uint64_t seq_out;
    uint64_t seq_in;
    uint8_t token_out[TL_UCX_TOKEN_BYTES];
    uint8_t token_in[TL_UCX_TOKEN_BYTES];
    double deadline;            /* CONNECTING: the ACK must come by then */
    tl_reqq_t sendq;        /* sends waiting for the ACK */
    tl_reqq_t recvq;        /* posted receives */
    tl_ucx_msgq_t ueq;          /* messages that came before their receive */
    tl_reqq_t rtsq;         /* chorus rendezvous: sends announced, waiting for their CTS */
    tl_reqq_t rdvq;         /* chorus rendezvous: receives whose RDATA is on its way */
    int bye_acked;              /* closing: it answered our BYE */
    int close_due;              /* our BYE_ACK to it has left: close the endpoint */
} tl_ucx_peer_t;

/* A UCX operation in flight: a send (of any kind) or a rendezvous receive. */
typedef struct tl_ucx_op {
    struct tl_ucx_op *next;     /* the context's list of operations in flight */
    struct tl_ucx_op *prev;
    struct tl_ucx_ctx *ctx;
    tl_ucx_peer_t *peer;
    tl_req_t *req;              /* what it completes; NULL: none (handshake, credit, bye) */
    void *ucp;                  /* UCX's request, or NULL */
    int recv;                   /* a rendezvous receive: UCX writes into req's buffer */
    size_t length;              /* bytes it moves: the request's length once it is done */
    int posting;                /* inside the UCX call that starts it */
    int early;                  /* UCX called it back from inside that call, with: */
    ucs_status_t early_status;
    tl_ucx_hdr_t hdr;           /* a send's header: UCX reads it until the send completes */
    uint8_t mac[TL_UCX_MAC_BYTES]; /* a handshake's payload */
    int close_after;            /* a BYE_ACK: its endpoint closes once it has left */
    int part;                   /* an RDATA fragment: req completes when all its parts have */
} tl_ucx_op_t;

/* What tests read; counted since the context was created. */
typedef struct {
    uint64_t eager_bytes;       /* DATA bytes sent against the receiver's window */
    uint64_t rndv_sent;         /* messages sent by rendezvous (UCX's or chorus's) */
    uint64_t credit_sent;
    uint64_t credit_recv;
    uint64_t dropped;           /* messages dropped: malformed, wrong token, or late */
    size_t ue_bytes;            /* eager payload bytes held for receives not posted yet */
    size_t ue_peak;
} tl_ucx_stats_t;

typedef struct tl_ucx_ctx {
    int rank;
    int size;
    double timeout_s;
    tl_ucx_config_t cfg;
    uint8_t *auth_key;
    size_t auth_key_len;
    tl_ctrl_handler_t ctrl;
    void *ctrl_arg;
    uint8_t nonce[TL_UCX_NONCE_BYTES];
    int rndv_chorus;            /* CHORUS_UCX_RNDV=chorus */

    ucp_context_h ucp;
    ucp_worker_h worker;
    uint8_t *my_addr;           /* the address published */
    size_t my_addr_len;
    int epfd;                   /* the event fd: worker fd, timer, wake */
    int timer_fd;
    int wake_fd;
    double timer_at;            /* when the timer fires; 0: disarmed */
    int woken;                  /* wake_fd was written and not drained yet */

    tl_ucx_peer_t *peers;       /* [size], after set_peers; NULL before */
    int connecting;             /* peers in TL_UCX_PEER_CONNECTING */
    int ep_errors;              /* peers whose endpoint UCX failed, not acted on yet */
    int closes_due;             /* some peer's close_due is set */
    chorus_status_t failed;     /* fail_all's status; CHORUS_OK while usable */
    tl_ucx_msgq_t arrived;      /* what the callbacks recorded, in arrival order */
    tl_ucx_op_t *ops;           /* operations in flight */
    void **closing;             /* endpoint close requests still running */
    int nclosing;
    int closing_cap;
    int completed;              /* requests completed and control messages delivered
                                   since progress() last reported */
    int warned;                 /* a dropped message was warned about */
    tl_ucx_stats_t stats;
} tl_ucx_ctx_t;

static inline tl_ucx_ctx_t *tl_ucx_of(tl_ctx_t *ctx)
{
    return (tl_ucx_ctx_t *)ctx;
}

extern const tl_ops_t tl_ucx_ops;

/* ucx_ctx.c */
/* Make the next wait on the event fd return at once (work is left). */
void tl_ucx_wake(tl_ucx_ctx_t *ctx);
/* Fire the timer by `at` (chorus__now's clock) at the latest. */
void tl_ucx_timer_by(tl_ucx_ctx_t *ctx, double at);

/* ucx_peer.c: endpoints and the handshake. */
/* Our endpoint to peer, created on first need. CHORUS_OK or why not (the peer failed). */
chorus_status_t tl_ucx_ep(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer);
/* Start the handshake with an idle peer; sends wait in its queue meanwhile. */
chorus_status_t tl_ucx_connect(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer);
/* A HELLO, ACK or REJECT arrived from peer (payload: the MAC, if any). */
void tl_ucx_handshake_recv(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer, const tl_ucx_msg_t *msg);
/*
 * Close peer for good with status: every request of it fails, and its
 * endpoint is closed (its UCX operations then fail too). What it sent
 * eagerly before stays to be received; what it announced for rendezvous
 * is dropped, since its payload can no longer come.
 */
void tl_ucx_peer_fail(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer, chorus_status_t status);
/* peer said BYE: it fails as closed, and its endpoint closes once our BYE_ACK has left. */
void tl_ucx_peer_bye(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer);
/* Every request of peer waiting in one of its queues fails with status. */
void tl_ucx_peer_fail_reqs(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer, chorus_status_t status);
/*
 * Peers past their handshake deadline fail; endpoints UCX failed, and those
 * whose BYE_ACK has left, are acted on.
 */
void tl_ucx_peers_check(tl_ucx_ctx_t *ctx, double now);
/* Close an endpoint without waiting for the peer; the request is kept until it is done. */
void tl_ucx_ep_close(tl_ucx_ctx_t *ctx, ucp_ep_h ep);
/* Close requests that finished are released; returns how many are still running. */
int tl_ucx_closing_reap(tl_ucx_ctx_t *ctx);

/* ucx_msg.c: sends, receives, matching, credit. */
chorus_status_t tl_ucx_send_nb(tl_ctx_t *ctx, int peer, uint32_t space, uint64_t tag,
                               const void *buf, size_t len, tl_req_t *req);
chorus_status_t tl_ucx_recv_nb(tl_ctx_t *ctx, int peer, uint32_t space, uint64_t tag,
                               void *buf, size_t capacity, tl_req_t *req);
/* The active-message callback (ucp_am_recv_callback_t). */
ucs_status_t tl_ucx_am_recv(void *arg, const void *header, size_t header_length, void *data,
                            size_t length, const ucp_am_recv_param_t *param);
/* Act on what the callbacks recorded, in order. */
void tl_ucx_arrivals(tl_ucx_ctx_t *ctx);
/*
 * Post a message of kind to peer's endpoint (payload: a handshake's MAC, or
 * none). A BYE_ACK closes the endpoint once it has left.
 */
chorus_status_t tl_ucx_post_ctl(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer, tl_ucx_kind_t kind,
                                uint64_t value, const uint8_t *mac);
/* Send what waited for the handshake. */
void tl_ucx_flush_sendq(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer);
void tl_ucx_req_complete(tl_ucx_ctx_t *ctx, tl_req_t *req, chorus_status_t status,
                         size_t length);
/* Drop a message: its rendezvous descriptor goes back to UCX, its memory is freed. */
void tl_ucx_msg_drop(tl_ucx_ctx_t *ctx, tl_ucx_msg_t *msg);
/*
 * The operations in flight of peer (all peers: NULL) give up their requests,
 * which fail with status: sends at once (their endpoint is closed, so UCX
 * reads their buffers no more); receives at once only with recvs_too (the
 * worker is about to go), else they are cancelled and fail when UCX calls
 * them back, since until then UCX may still write into their buffers.
 */
void tl_ucx_ops_abandon(tl_ucx_ctx_t *ctx, tl_ucx_peer_t *peer, chorus_status_t status,
                        int recvs_too);

/* ucx_probe.c */
/*
 * 0 when UCX_TLS (as set in the environment; NULL: unset) keeps UCX off
 * every RDMA transport, else 1.
 */
int tl_ucx_tls_allow_rdma(const char *tls);
/* 1 when UCX finds an RDMA device on this machine (its verbs component has one). */
int tl_ucx_rdma_here(void);
/*
 * An RDMA device that UCX_TLS allows: then CHORUS_TRANSPORT=auto opens UCX
 * (tl_ops_t.offered), and CHORUS_UCX_RNDV=auto takes UCX's rendezvous.
 */
int tl_ucx_offered(void);

/* ucx_wire.c: pure encoders and decoders of what crosses the wire or the bootstrap. */
void tl_ucx_hdr_encode(tl_ucx_hdr_t *wire, const tl_ucx_msg_hdr_t *hdr);
/*
 * The header_length bytes of a message received by a context of `size`
 * ranks: CHORUS_ERR_PROTOCOL unless it is a header of this version, of a
 * known kind, from a rank of the context, with zeros where they belong.
 */
chorus_status_t tl_ucx_hdr_decode(const void *buf, size_t len, int size, tl_ucx_msg_hdr_t *hdr);
/*
 * Rank `rank`'s blob at buf (TL_ADDR_MAX bytes): CHORUS_ERR_INVALID_ARG
 * unless it is a blob of this version for that rank with an address.
 * Reads the magic first, so a short buffer that is not a blob is refused
 * before anything past it is read.
 */
chorus_status_t tl_ucx_blob_decode(const void *buf, int rank, tl_ucx_peer_addr_t *out);
/* HMAC(key, label || nonce || from || to), from and to little-endian. */
void tl_ucx_mac(const tl_ucx_ctx_t *ctx, const char *label, const uint8_t *nonce, uint32_t from,
                uint32_t to, uint8_t out[TL_UCX_MAC_BYTES]);

#endif
