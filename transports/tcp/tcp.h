/*
 * TCP transport: private structures shared by its files, and the wire
 * protocol they speak.
 *
 * Connections. set_peers only records where every peer listens; the listen
 * socket stays open for the life of the context. The first send to a peer
 * opens the connection (a receive never does: the control channel and the
 * algorithms post receives from peers that may never send). Sends posted
 * meanwhile wait in the peer's queue and go out in order once it is up. Each
 * connection proves the job key both ways, driven by progress() from the
 * same epoll set as the data:
 *
 *   acceptor  -> connector: nonce (32 random bytes, fresh per connection)
 *   connector -> acceptor : hello {magic, version, from, to,
 *                                  HMAC(key, nonce || from || to)}
 *   acceptor  -> connector: reply, 32 bytes, one of
 *                           ack   = HMAC(key, "ack" || nonce || from || to)
 *                           yield = HMAC(key, "yld" || nonce || from || to)
 *                           reject (TL_TCP_REJECT, unauthenticated: the hello
 *                                   did not pass; the acceptor closes)
 *
 * Collisions: two ranks may connect to each other at once. The connection
 * opened by the higher rank survives. The lower rank, when a genuine hello of
 * the higher one arrives while its own attempt runs, closes its attempt and
 * acks; the higher rank answers the lower one's hello with yield, and the
 * lower rank then waits for the higher one's connection. Either way exactly
 * one connection per pair remains and the sends queued on both sides leave on
 * it, in order.
 *
 * Failures. After set_peers every peer is known to listen (addresses are
 * published only once listening), so a refused or reset connect, or a close
 * during the handshake, fails the peer at once (CHORUS_ERR_PEER_FAILED); a
 * wrong ack or a reject fails it with CHORUS_ERR_AUTH; a connection not up
 * within the context's timeout fails it with CHORUS_ERR_TIMEOUT. A timerfd in
 * the epoll set wakes progress for these deadlines. Incoming connections wait
 * for their hello in a bounded set of slots; a connection that fails a check
 * is dropped (the first with a warning, later ones at debug level).
 *
 * Frames. Every frame starts with a 32-byte header (tl_tcp_hdr_t,
 * little-endian):
 *
 *   DATA   space, tag, length + payload   an eager message
 *   RTS    space, tag, length, id         a message waiting for its receive
 *   CTS    id, length, space = fragment   send the payload of RTS id in
 *                                         fragments of that many bytes
 *                                         (length 0: it was dropped as truncated)
 *   RDATA  id, tag = offset, length       one fragment of RTS id's payload, at
 *          + payload                      offset (a multiple of the fragment)
 *   CREDIT length                         window bytes returned to the sender
 *
 * Flow control. Each side grants its peer a window of bytes
 * (CHORUS_TCP_WINDOW) in a CREDIT frame right after the connection comes up.
 * A message of at most CHORUS_TCP_EAGER_SIZE bytes goes as DATA while the
 * sender holds that much credit, and costs it that much; the receiver, as it
 * consumes eager data (at once when a receive is posted, else when a later
 * receive copies it out of its unexpected buffer), owes the bytes back and
 * returns them in batched CREDIT frames. Every other message goes by
 * rendezvous: RTS, then CTS once a matching receive is posted, then RDATA
 * fragments written straight into the posted buffer. A message that does
 * not fit the remaining credit takes the rendezvous path rather than waiting,
 * so no order of posts can deadlock, and a receiver never buffers more than
 * its window of a peer's data. Control messages (TL_TAG_CTRL) are DATA
 * frames that need no credit: they are small and delivered as they arrive.
 *
 * Streams. A peer's connection may have lanes: further connections
 * (CHORUS_TCP_STREAMS in all, the fewer of both ranks' settings), opened by
 * the rank whose connection survived, each to one of the peer's addresses in
 * turn (CHORUS_TCP_IFACES publishes several), each proving the key in its own
 * hello that names its lane. Lanes carry RDATA frames only; every other frame
 * stays on the connection itself, which is lane 0. A payload's fragments are
 * dealt to the lanes by tcp_stripe.c: each goes to the lane that would have
 * it delivered first, judged by the bytes the lane's socket still holds and
 * the rate it was measured to deliver them at, so a faster link carries more
 * and all of them drain together. The receiver places each fragment by its
 * offset and counts it off in a bitmap of the message's fragments: one that
 * is out of bounds, of the wrong length or there already breaks the
 * protocol. A lane that fails fails its peer, as the connection would.
 *
 * Short send queues. Whatever a socket has not sent yet, a frame written
 * after it waits behind, and the connection carries the frames that a
 * peer waits for (CTS, CREDIT, RTS): a socket buffer of megabytes in front
 * of a CTS on a 100 Mbit/s link is most of a second during which the
 * peer's payload cannot start. So a socket (the connection's or a lane's)
 * takes a new payload fragment only while the bytes it has not sent are
 * below its queue bound, about TL_TCP_QUEUE_S of its measured rate
 * (tl_tcp_stripe_queue), and TCP_NOTSENT_LOWAT at that bound makes it
 * report EPOLLOUT once it drains below (the kernel also takes no more
 * than that unsent). Control frames and eager messages are not held back
 * for room: they wait at most for that bound to drain. Bytes in flight
 * are left to TCP, so the bound costs no throughput on a long path. Where
 * the kernel refuses the option, the socket has no bound (its EPOLLOUT
 * would not say when it drained).
 *
 * Matching. DATA and RTS frames are matched against posted receives by
 * (space, tag) in arrival order; those that arrive first wait, in that order,
 * in the peer's unexpected list. A message longer than its receive fails it
 * with CHORUS_ERR_TRUNCATED: DATA payloads are drained, RTS are answered with
 * a CTS of length 0. The decision eager or rendezvous is made when a message
 * reaches the wire, so it needs no agreement between the ranks' settings.
 */
#ifndef CHORUS_TL_TCP_H
#define CHORUS_TL_TCP_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "transports/base/transport.h"

/* Wire format, little-endian on the wire whatever the host's byte order. */
#define TL_TCP_MAGIC         0x53524843u /* "CHRS" */
#define TL_TCP_HELLO_MAGIC   0x4f4c4548u /* "HELO" */
#define TL_TCP_VERSION       4u
#define TL_TCP_MAX_MSG       (UINT64_C(1) << 40)
#define TL_TCP_NONCE_BYTES   32
#define TL_TCP_MAC_BYTES     32
/* Connections per peer, lanes included; addresses a rank publishes. */
#define TL_TCP_STREAMS_MAX   8
#define TL_TCP_ADDRS_MAX     4
/* The reply to a hello that did not pass, padded with zeros to TL_TCP_MAC_BYTES. */
#define TL_TCP_REJECT        "chorus tcp: hello rejected"

typedef enum {
    TL_TCP_FRAME_DATA = 1,
    TL_TCP_FRAME_RTS,
    TL_TCP_FRAME_CTS,
    TL_TCP_FRAME_RDATA,
    TL_TCP_FRAME_CREDIT
} tl_tcp_frame_type_t;

/* Frame header as it travels (32 bytes, no padding). */
typedef struct {
    uint32_t magic;
    uint8_t type;               /* tl_tcp_frame_type_t */
    uint8_t zero[3];
    uint32_t space;             /* DATA, RTS: the communicator's space (tl_ops_t) */
    uint32_t id;                /* RTS, CTS, RDATA: the sender's handle of the message */
    uint64_t tag;               /* DATA, RTS */
    uint64_t length;            /* bytes: of the message, fragment or credit */
} tl_tcp_hdr_t;

/* A header decoded; fields a type does not use are zero. */
typedef struct {
    tl_tcp_frame_type_t type;
    uint32_t space;
    uint32_t id;
    uint64_t tag;
    uint64_t length;
} tl_tcp_frame_t;

/* Connection hello, sent by the connecting side after it reads the nonce. */
typedef struct {
    uint32_t magic;
    uint32_t version;
    uint32_t from_rank;
    uint32_t to_rank;
    uint32_t lane;              /* 0: the connection itself; else one of its lanes */
    uint8_t mac[TL_TCP_MAC_BYTES]; /* HMAC(key, nonce || from || to || lane) */
} tl_tcp_hello_t;

/*
 * A message that arrived before its receive was posted (eager data, or an
 * RTS), or a rendezvous receive whose payload is on its way.
 */
typedef struct tl_tcp_ue {
    struct tl_tcp_ue *next;
    size_t capacity;            /* bytes of data allocated (>= length for eager data) */
    uint32_t space;
    uint64_t tag;
    uint64_t length;
    uint32_t id;                /* rts: the sender's handle */
    uint32_t frag;              /* rendezvous: bytes of each payload fragment (the last: less) */
    uint64_t got;               /* rendezvous: payload bytes arrived */
    uint64_t *seen;             /* rendezvous: one bit per fragment arrived (seen_few, or
                                   allocated for more than 64 fragments) */
    uint64_t seen_few;
    unsigned rts : 1;           /* announced only: the payload stays with the sender */
    unsigned complete : 1;      /* eager: all payload bytes are in data */
    unsigned credit : 1;        /* eager: its length returns to the sender's window on release */
    tl_req_t *req;              /* rendezvous receive the payload goes into; NULL: dropped */
    unsigned char data[];
} tl_tcp_ue_t;

/* FIFO of unexpected messages or rendezvous records, linked through next. */
typedef struct {
    tl_tcp_ue_t *head;
    tl_tcp_ue_t *tail;
} tl_tcp_ueq_t;

typedef enum {
    TL_TCP_RX_HEADER = 0,       /* reading a header into rx_hdr */
    TL_TCP_RX_PAYLOAD,          /* reading payload to rx_dst */
    TL_TCP_RX_DISCARD           /* draining the payload of a truncated message */
} tl_tcp_rx_state_t;


/* One side of a connection's authentication. */
typedef enum {
    TL_TCP_HS_NONE = 0,         /* no socket */
    TL_TCP_HS_CONNECTING,       /* connector: connect() in progress */
    TL_TCP_HS_NONCE,            /* connector reads it, acceptor writes it */
    TL_TCP_HS_HELLO,            /* connector writes it, acceptor reads it */
    TL_TCP_HS_REPLY             /* acceptor writes it, connector reads it */
} tl_tcp_hs_state_t;

typedef struct {
    int fd;
    tl_tcp_hs_state_t state;
    int rank;                   /* connector: the target; acceptor: the proven rank, or -1 */
    int lane;                   /* which of the peer's connections this one becomes */
    int accept;                 /* acceptor: the reply is an ack (else yield or reject) */
    double deadline;            /* acceptor: the hello must come by then */
    size_t done;                /* bytes of the current step moved so far */
    uint8_t nonce[TL_TCP_NONCE_BYTES];
    tl_tcp_hello_t hello;
    uint8_t reply[TL_TCP_MAC_BYTES];
} tl_tcp_hs_t;

typedef enum {
    TL_TCP_PEER_IDLE = 0,       /* no connection, none on its way */
    TL_TCP_PEER_CONNECTING,     /* our own connection authenticates (peer->hs) */
    TL_TCP_PEER_WAITING,        /* the peer's connection is on its way (yield, or accepting) */
    TL_TCP_PEER_UP,             /* fd is the data connection */
    TL_TCP_PEER_CLOSED          /* for good; failed says why */
} tl_tcp_peer_state_t;

/* The frame being written. */
typedef struct {
    tl_tcp_hdr_t hdr;
    size_t off;                 /* bytes of header and payload written */
    const unsigned char *payload;
    size_t len;                 /* payload bytes of this frame */
    tl_req_t *req;              /* DATA: the send it completes; RDATA: the send it is part of */
    int busy;
} tl_tcp_tx_t;

/*
 * A delivery rate, measured from what a socket has taken and what of it the
 * peer has acknowledged (tcp_stripe.c).
 */
typedef struct {
    double rate;                /* bytes per second; 0 until a first measure */
    double mark_t;              /* start of the current measure, or 0 */
    double fresh_t;             /* when the rate was last measured */
    uint64_t mark_acked;        /* bytes acknowledged at mark_t */
    uint64_t sent;              /* bytes handed to the socket */
} tl_tcp_rate_t;

/*
 * One of a peer's lanes. Lane 0 is the peer's connection itself (its fd, tx
 * and rx fields): its entry holds only its rate. Lanes 1.. carry RDATA only.
 */
typedef struct {
    int fd;                     /* -1 until authenticated */
    uint32_t events;
    uint32_t queue;             /* its socket's queue bound (TCP_NOTSENT_LOWAT); 0: not set */
    int queue_refused;          /* the kernel refused TCP_NOTSENT_LOWAT: no bound */
    tl_tcp_hs_t hs;             /* connector: the lane's handshake */
    double deadline;            /* connector: the lane must be up by then */
    int addr;                   /* connector: the peer's address it dials (peer->sa) */
    double try_until;           /* connector: a further address must answer by then */
    tl_tcp_tx_t tx;
    tl_tcp_rate_t rate;
    tl_tcp_hdr_t rx_hdr;
    size_t rx_hdr_got;
    tl_tcp_frame_t rx_frame;
    uint64_t rx_got;
    unsigned char *rx_dst;
    tl_tcp_ue_t *rx_rec;        /* the rendezvous the payload being read belongs to */
} tl_tcp_lane_t;

typedef struct {
    int rank;
    tl_tcp_peer_state_t state;
    int fd;                     /* the data connection, or -1 */
    chorus_status_t failed;     /* status of every later post once the peer is lost */
    uint32_t events;            /* current epoll interest of fd */
    struct sockaddr_storage sa[TL_TCP_ADDRS_MAX]; /* where the peer listens (set_peers) */
    socklen_t salen[TL_TCP_ADDRS_MAX];
    int naddrs;
    int nlanes;                 /* connections to have: the fewer of both ranks' streams */
    tl_tcp_lane_t lanes[TL_TCP_STREAMS_MAX];
    int lanes_up;               /* lanes authenticated, lane 0 included */
    int deal_to;                /* the lane chosen for the next fragment; -1: none yet */
    tl_tcp_hs_t hs;             /* our own connection while it authenticates */
    int accepting;              /* 1 + slot of its connection being acked, or 0 */
    double deadline;            /* CONNECTING, WAITING: the connection must be up by then */

    /* sending */
    tl_reqq_t sendq;        /* posted, not started */
    tl_reqq_t rtsq;         /* RTS written, waiting for CTS */
    tl_reqq_t rdataq;       /* cleared to send: payload going out, head first */
    tl_tcp_tx_t tx;
    uint64_t tx_credit;         /* eager bytes the peer still takes */
    int granted;                /* the peer's first CREDIT came: messages may start */
    int message_turn;           /* a new message goes before the next payload fragment */
    uint32_t next_id;

    /* receiving */
    tl_reqq_t postq;        /* posted receives not yet matched */
    tl_tcp_ueq_t ueq;           /* unexpected eager messages and RTS, in arrival order */
    tl_tcp_ueq_t ctsq;          /* matched rendezvous: CTS to write */
    tl_tcp_ueq_t rdvq;          /* CTS written: payload expected, head first */
    uint64_t rx_credit;         /* eager bytes the peer may still send (>= its tx_credit) */
    uint64_t credit_owed;       /* consumed eager bytes not yet returned */
    int grant_sent;             /* our first CREDIT, due even when it grants nothing */

    tl_tcp_rx_state_t rx_state;
    tl_tcp_ue_t *rx_rec;        /* RDATA: the rendezvous the payload belongs to */
    tl_tcp_hdr_t rx_hdr;
    size_t rx_hdr_got;
    tl_tcp_frame_t rx_frame;    /* the frame whose payload is being read */
    uint64_t rx_got;
    unsigned char *rx_dst;      /* where the payload goes (PAYLOAD) */
    tl_req_t *rx_req;           /* receive that completes with the payload, or NULL */
    tl_tcp_ue_t *rx_ue;         /* unexpected buffer the payload lands in, or NULL */
    int rx_ctrl;                /* rx_ue is a control message: delivered, never matched */
} tl_tcp_peer_t;

/* The transport's variables (tcp_ctx.c). */
typedef struct {
    size_t eager_bytes;
    size_t window_bytes;
    int streams;                /* 0: one per interface */
    chorus__config_str_t ifaces; /* "auto": the bootstrap's, and one per other network */
} tl_tcp_config_t;

extern const chorus__config_table_t tl_tcp_config_table;

/* What tests and chorus-info read; counted since the context was created. */
typedef struct {
    uint64_t eager_sent;        /* DATA frames of data messages */
    uint64_t eager_bytes;
    uint64_t rndv_sent;         /* messages sent by rendezvous */
    uint64_t credit_sent;       /* CREDIT frames written */
    uint64_t credit_recv;
    uint64_t collisions;        /* both connected at once: attempts yielded or given up here */
    uint64_t lane_fallbacks;    /* lanes dialled again at a peer's first address */
    uint64_t lane_bytes[TL_TCP_STREAMS_MAX]; /* RDATA payload bytes written on each lane */
    size_t ue_bytes;            /* bytes allocated for unexpected messages, cache included */
    size_t ue_peak;             /* the most ue_bytes ever was */
} tl_tcp_stats_t;

/* Largest RDATA fragment: control frames may pass between fragments. */
#define TL_TCP_FRAG_MAX (1u << 20)
/* Smallest fragment of a payload that lanes share (tcp_stripe.c). */
#define TL_TCP_SHARED_FRAG_MIN (64u << 10)
/* Smallest fragment a receiver asks for. */
#define TL_TCP_FRAG_MIN (1u << 12)
/* Most unexpected-message buffers kept for reuse (their bytes are bounded by the window). */
#define TL_TCP_UE_CACHE 16

struct tl_ctx {
    int rank;
    int size;
    int listen_fd[TL_TCP_ADDRS_MAX];
    int nlisten;                /* addresses listened on (and published) */
    int streams;                /* connections per peer this rank takes */
    atomic_int streams_use;     /* lanes fragments are dealt to, 1..streams (tl_ops_t streams) */
    int epfd;
    int timer_fd;               /* wakes progress at the next handshake deadline */
    double timer_at;            /* when it is armed to fire; 0: disarmed */
    int peers_set;              /* set_peers succeeded */
    double timeout_s;
    tl_tcp_config_t cfg;
    uint8_t *auth_key;
    size_t auth_key_len;
    chorus_status_t fatal;      /* set by fail_all: every later post fails with it */
    tl_ctrl_handler_t ctrl;     /* where control messages go */
    void *ctrl_arg;
    int deferred;               /* completions made outside progress, reported by it */
    tl_tcp_peer_t *peers;       /* size entries; peers[rank] is this rank (loopback) */
    tl_tcp_hs_t *in;            /* incoming connections not yet authenticated */
    int in_max;
    int dropped;                /* incoming connections dropped: the first one is a warning */
    unsigned char *scratch;     /* sink for the payload of truncated messages */
    size_t scratch_len;
    /*
     * Unexpected-message buffers kept for reuse: allocating one per message
     * makes the kernel fault in fresh pages for every chunk that arrives
     * before its receive is posted.
     */
    tl_tcp_ue_t *ue_cache[TL_TCP_UE_CACHE];
    int ue_cached;
    size_t ue_cached_bytes;
    tl_tcp_stats_t stats;
};

extern const tl_ops_t tl_tcp_ops;

/* Epoll tags: kind in the high 32 bits, a peer rank or slot in the low ones. */
#define TL_TCP_EV_LISTEN 0u
#define TL_TCP_EV_TIMER  1u
#define TL_TCP_EV_OUT    2u     /* peer's own connection while it authenticates */
#define TL_TCP_EV_IN     3u     /* slot of ctx->in */
#define TL_TCP_EV_DATA   4u     /* peer's data connection */
#define TL_TCP_EV(kind, index) (((uint64_t)(kind) << 32) | (uint32_t)(index))
/* EV_OUT and EV_DATA of a lane: its number above the kind. */
#define TL_TCP_EV_LANE(kind, index, lane) (TL_TCP_EV(kind, index) | ((uint64_t)(lane) << 40))
#define TL_TCP_EV_KIND(u64) ((uint32_t)((u64) >> 32) & 0xffu)
#define TL_TCP_EV_LANE_OF(u64) ((int)(((u64) >> 40) & 0xffu))

/*
 * tcp_conn.c: wire codec of frame headers, pure so that tests/fuzz/ runs
 * exactly this code. check: CHORUS_ERR_PROTOCOL unless the header is one the
 * encoder writes for a valid frame; *frame_p is written only on success.
 */
void tl_tcp_header_encode(tl_tcp_hdr_t *wire, const tl_tcp_frame_t *frame);
chorus_status_t tl_tcp_header_check(const tl_tcp_hdr_t *wire, tl_tcp_frame_t *frame_p);

/* tcp_conn.c: the data path */
void tl_tcp_peer_init(tl_tcp_peer_t *peer, int rank);
/* fd is authenticated: it becomes the peer's connection; returns completions. */
int tl_tcp_peer_attach(tl_ctx_t *ctx, tl_tcp_peer_t *peer, int fd);
/* Close whatever the peer has open and fail everything pending on it; returns completions. */
int tl_tcp_peer_fail(tl_ctx_t *ctx, tl_tcp_peer_t *peer, chorus_status_t status);
int tl_tcp_peer_read(tl_ctx_t *ctx, tl_tcp_peer_t *peer);
int tl_tcp_peer_write(tl_ctx_t *ctx, tl_tcp_peer_t *peer);
/* A connection or lane of the peer broke or ended: it fails; returns completions. */
int tl_tcp_peer_lost(tl_ctx_t *ctx, tl_tcp_peer_t *peer, const char *what, int err);
int tl_tcp_peer_protocol(tl_ctx_t *ctx, tl_tcp_peer_t *peer, const char *why);
/* One sendmsg of what is left of tx's frame (EINTR retried); counts into rate->sent. */
ssize_t tl_tcp_tx_send(int fd, tl_tcp_tx_t *tx, tl_tcp_rate_t *rate);
/* The frame in tx is lost with its connection: the send it was for fails; returns completions. */
int tl_tcp_tx_fail(tl_tcp_tx_t *tx, chorus_status_t status);
/* Keep EPOLLOUT armed exactly while the peer has something to write; returns completions. */
int tl_tcp_peer_update_events(tl_ctx_t *ctx, tl_tcp_peer_t *peer);
chorus_status_t tl_tcp_send_nb(tl_ctx_t *ctx, int peer, uint32_t space, uint64_t tag,
                               const void *buf, size_t len, tl_req_t *req);
chorus_status_t tl_tcp_recv_nb(tl_ctx_t *ctx, int peer, uint32_t space, uint64_t tag,
                               void *buf, size_t capacity, tl_req_t *req);

/* tcp_flow.c: unexpected messages, credits and rendezvous */
tl_tcp_ue_t *tl_tcp_ue_alloc(tl_ctx_t *ctx, uint32_t space, uint64_t tag, uint64_t length);
tl_tcp_ue_t *tl_tcp_rts_alloc(tl_ctx_t *ctx, const tl_tcp_frame_t *frame);
/* Keep the buffer for reuse or free it; its credit goes back to peer (may be NULL). */
void tl_tcp_ue_release(tl_ctx_t *ctx, tl_tcp_peer_t *peer, tl_tcp_ue_t *ue);
void tl_tcp_ue_cache_clear(tl_ctx_t *ctx);
void tl_tcp_ueq_push(tl_tcp_ueq_t *q, tl_tcp_ue_t *ue);
tl_tcp_ue_t *tl_tcp_ueq_pop(tl_tcp_ueq_t *q);
/* Unlink the oldest entry of q with this space and tag, or NULL. */
tl_tcp_ue_t *tl_tcp_ueq_take(tl_tcp_ueq_t *q, uint32_t space, uint64_t tag);
/*
 * What a lost connection leaves half done: the message arriving in part, and
 * the rendezvous receives (they fail with status). Returns completions.
 */
int tl_tcp_peer_drop_rx(tl_ctx_t *ctx, tl_tcp_peer_t *peer, chorus_status_t status);
/* Free every unexpected message of the peer (the context failed or ends). */
void tl_tcp_peer_free_unexpected(tl_ctx_t *ctx, tl_tcp_peer_t *peer);
void tl_tcp_credit_return(tl_tcp_peer_t *peer, uint64_t bytes);
int tl_tcp_credit_due(const tl_ctx_t *ctx, const tl_tcp_peer_t *peer);
/* An RTS arrived: match it or keep it; returns completions. */
int tl_tcp_rx_rts(tl_ctx_t *ctx, tl_tcp_peer_t *peer, const tl_tcp_frame_t *frame);
/* A CTS or CREDIT arrived: CHORUS_ERR_PROTOCOL when the peer broke the protocol. */
chorus_status_t tl_tcp_rx_cts(tl_ctx_t *ctx, tl_tcp_peer_t *peer, const tl_tcp_frame_t *frame,
                              int *completed_p);
chorus_status_t tl_tcp_rx_credit(tl_ctx_t *ctx, tl_tcp_peer_t *peer,
                                 const tl_tcp_frame_t *frame);
/* A receive matched an announced message: its CTS is queued; returns completions. */
int tl_tcp_recv_rts(tl_ctx_t *ctx, tl_tcp_peer_t *peer, tl_tcp_ue_t *rts, tl_req_t *req);
/* Pick the next frame to write into peer->tx; 0 when there is none. */
int tl_tcp_tx_next(tl_ctx_t *ctx, tl_tcp_peer_t *peer);
/* The frame in peer->tx is written whole; returns completions. */
int tl_tcp_tx_done(tl_ctx_t *ctx, tl_tcp_peer_t *peer);

/* tcp_connect.c: connections on first use */
chorus_status_t tl_tcp_set_peers(tl_ctx_t *ctx, const void *addrs);
/* Start connecting to peer (a send is queued); returns completions (it may fail the peer). */
int tl_tcp_connect(tl_ctx_t *ctx, tl_tcp_peer_t *peer);
/* An event on the peer's own connection (lane 0) or a lane's while it authenticates. */
int tl_tcp_hs_out_event(tl_ctx_t *ctx, tl_tcp_peer_t *peer, int lane);
int tl_tcp_hs_in_event(tl_ctx_t *ctx, int slot);
/* Connections wait at ctx->listen_fd[listener]. */
int tl_tcp_hs_accept(tl_ctx_t *ctx, int listener);
/* The timer fired: fail what passed its deadline, re-arm for the next. */
int tl_tcp_hs_timer(tl_ctx_t *ctx);
/* Close every incoming connection that is not authenticated yet. */
void tl_tcp_hs_close_all(tl_ctx_t *ctx);
void tl_tcp_hs_close(tl_tcp_hs_t *hs);

/* tcp_ctx.c: TCP_NODELAY and large buffers, best effort */
void tl_tcp_sock_tune(int fd);

/*
 * tcp_connect.c: the rank whose connection to the peer survived opens its
 * lanes once it is up (the other accepts them); returns completions.
 */
int tl_tcp_lanes_open(tl_ctx_t *ctx, tl_tcp_peer_t *peer);

/* tcp_lane.c: a peer's lanes. */
/* fd is authenticated as the peer's lane; returns completions. */
int tl_tcp_lane_attach(tl_ctx_t *ctx, tl_tcp_peer_t *peer, int lane, int fd);
int tl_tcp_lane_read(tl_ctx_t *ctx, tl_tcp_peer_t *peer, int lane);
/*
 * Write what lanes 1.. hold, and deal payload fragments to the lanes chosen
 * for them; *moved_p is set when a frame was taken or finished, or when the
 * connection itself is chosen and free to take the next (its writer then
 * runs again). Returns completions.
 */
int tl_tcp_lanes_write(tl_ctx_t *ctx, tl_tcp_peer_t *peer, int *moved_p);
/*
 * May a message of `bytes` go to peer eagerly, on the connection? Always
 * without lanes, or when smaller than the smallest shared fragment; else
 * when the connection would deliver it first.
 */
int tl_tcp_lanes_eager_ok(tl_ctx_t *ctx, tl_tcp_peer_t *peer, size_t bytes);
/*
 * Whether the socket of a lane (0: the connection) may take a payload
 * fragment now: what it has not sent is below its queue bound, which is
 * first brought to the lane's rate (tcp.h, "Short send queues").
 */
int tl_tcp_lane_room(tl_tcp_peer_t *peer, int lane);
/*
 * Keep EPOLLOUT armed on lanes 1.. exactly while they have a frame to
 * finish, or a fragment waits for a socket with room (their drain below
 * the bound wakes the writer).
 */
int tl_tcp_lanes_update_events(tl_ctx_t *ctx, tl_tcp_peer_t *peer);
/* Close the lanes; the RDATA sends their frames belonged to fail; returns completions. */
int tl_tcp_lanes_close(tl_ctx_t *ctx, tl_tcp_peer_t *peer, chorus_status_t status);
/* The next fragment of the oldest cleared send into tx; 0 when none is left. */
int tl_tcp_rdata_take(tl_tcp_peer_t *peer, tl_tcp_tx_t *tx);
/* A fragment's frame is written whole; returns completions. */
int tl_tcp_rdata_written(tl_ctx_t *ctx, int lane, tl_tcp_tx_t *tx);
/* An RDATA header arrived (on any lane): the record its payload goes to, or NULL. */
tl_tcp_ue_t *tl_tcp_rdata_place(tl_tcp_peer_t *peer, const tl_tcp_frame_t *frame,
                                unsigned char **dst_p);
/* A fragment's payload is in place; returns completions. */
int tl_tcp_rdata_arrived(tl_ctx_t *ctx, tl_tcp_peer_t *peer, tl_tcp_ue_t *rec, uint64_t len);

/*
 * tcp_stripe.c: which lane takes the next fragment. Pure: tests/unit/ runs
 * it over simulated links.
 *
 * Rates: a measure runs while the lane's socket holds at least
 * TL_TCP_RATE_BUSY bytes (held: sent and not acknowledged, or not sent yet,
 * of what it took); once at least TL_TCP_RATE_PERIOD has passed it yields
 * acknowledged bytes over time, which the rate follows by half (a few
 * fragments' time to follow a change).
 */
#define TL_TCP_RATE_PERIOD 0.002
#define TL_TCP_RATE_BUSY (64u << 10)
/* A rate not measured for this long starts to count for more (tcp_stripe.c). */
#define TL_TCP_RATE_STALE 0.05
void tl_tcp_rate_sample(tl_tcp_rate_t *r, double now, uint64_t held);
/*
 * The queue bound of a lane that delivers at rate r: what it has not sent
 * yet may reach TL_TCP_QUEUE_S of its rate, within [TL_TCP_QUEUE_MIN,
 * TL_TCP_QUEUE_MAX]; TL_TCP_QUEUE_START until a first measure. A lane whose
 * socket never holds a measure's worth (TL_TCP_RATE_BUSY) drains faster
 * than it is filled, a loopback one for instance, and stays there.
 */
#define TL_TCP_QUEUE_S 0.002
#define TL_TCP_QUEUE_MIN (128u << 10)
#define TL_TCP_QUEUE_START (1u << 20)
#define TL_TCP_QUEUE_MAX (4u << 20)
uint32_t tl_tcp_stripe_queue(const tl_tcp_rate_t *r);
/*
 * One look at a lane before a pick: samples its rate from what its socket
 * holds, and returns its backlog, that plus the unsent rest of the frame it
 * is writing.
 */
uint64_t tl_tcp_stripe_look(tl_tcp_rate_t *r, double now, uint64_t held, uint64_t unsent);
/*
 * The lane, of n, that would deliver a fragment of frag bytes first, at
 * time now: the least (backlog + frag) / rate, a lane not measured yet taken
 * at the fastest measured rate (all alike when none is), one measured long
 * ago at more than it was. up[i] says lane i may take one. -1 when none may.
 */
int tl_tcp_stripe_pick(const tl_tcp_rate_t *rates, const uint64_t *backlog, const int *up,
                       int n, size_t frag, double now);
/* The fragment a receiver asks for: whole 1 MiB ones on one lane, smaller to share. */
uint32_t tl_tcp_stripe_frag(uint64_t length, int nlanes);

/* The address blob exchanged through the bootstrap. */
#define TL_TCP_HOST_MAX 64
typedef struct {
    char host[TL_TCP_HOST_MAX]; /* numeric, NUL-terminated */
    char port[8];               /* decimal, NUL-terminated */
} tl_tcp_addr_t;

typedef struct {
    uint8_t count;              /* addresses, 1..TL_TCP_ADDRS_MAX */
    uint8_t streams;            /* connections per peer the rank takes, 1..TL_TCP_STREAMS_MAX */
    uint8_t zero[2];
    tl_tcp_addr_t addr[TL_TCP_ADDRS_MAX]; /* unused entries are zero */
} tl_tcp_blob_t;

/*
 * tcp_iface.c: choosing interfaces, over a list as getifaddrs gives it.
 *
 * name's address, numerically, into host (len bytes): IPv4 first, else
 * IPv6; 0 when it has none.
 */
struct ifaddrs;
int tl_tcp_iface_address(const struct ifaddrs *list, const char *name, char *host, size_t len);
/*
 * CHORUS_TCP_IFACES=auto: the addresses, numerically into hosts (up to max
 * - 1 of them), to listen on besides first, the bootstrap's: one on each
 * other network of first's family that an interface is up and running on
 * (not loopback). None when first is on no such interface (a loopback
 * address: the ranks share a machine). Returns how many.
 */
int tl_tcp_iface_auto(const struct ifaddrs *list, const struct sockaddr *first,
                      char hosts[][TL_TCP_HOST_MAX], int max);
/*
 * 1 when a peer's published address sa lies on a network this machine has
 * an interface up on (so a stream reaches it over that link), and is not
 * one of this machine's own addresses; else 0.
 */
int tl_tcp_iface_on_link(const struct ifaddrs *list, const struct sockaddr *sa);
/* CHORUS_TCP_IFACES asks for the interfaces to be found (the word "auto", the default). */
int tl_tcp_ifaces_auto(const tl_tcp_config_t *cfg);
/* CHORUS_TCP_IFACES asks for the bootstrap's address alone (the word "bootstrap"). */
int tl_tcp_ifaces_bootstrap(const tl_tcp_config_t *cfg);

/*
 * tcp_connect.c: decoders of what arrives from the wire or through the
 * bootstrap, pure so that tests/fuzz/ runs exactly this code. Output
 * arguments are written only on success.
 */
void tl_tcp_hello_encode(tl_tcp_hello_t *wire, uint32_t from, uint32_t to, uint32_t lane,
                         const uint8_t mac[TL_TCP_MAC_BYTES]);
/*
 * The len bytes of a hello received by `rank` of `size`: CHORUS_ERR_PROTOCOL,
 * with the reason in why (why_len bytes), unless it is a hello of this version
 * from another rank of the context to this one, for a lane below
 * TL_TCP_STREAMS_MAX. The MAC is returned unchecked (it needs the key).
 */
chorus_status_t tl_tcp_hello_decode(const void *buf, size_t len, int rank, int size,
                                    uint32_t *from_p, uint32_t *lane_p,
                                    uint8_t mac_p[TL_TCP_MAC_BYTES], char *why, size_t why_len);
/*
 * CHORUS_ERR_INVALID_ARG unless the first sizeof(tl_tcp_blob_t) of len bytes
 * hold 1..TL_TCP_ADDRS_MAX NUL-terminated hosts and ports, a stream count in
 * 1..TL_TCP_STREAMS_MAX, and zeros everywhere else.
 */
chorus_status_t tl_tcp_blob_decode(const void *buf, size_t len, tl_tcp_blob_t *blob_p);
/* A decoded address to a socket address, numerically only: getaddrinfo's code, 0 on success. */
int tl_tcp_addr_resolve(const tl_tcp_addr_t *addr, struct sockaddr_storage *sa_p,
                        socklen_t *salen_p);

#endif
