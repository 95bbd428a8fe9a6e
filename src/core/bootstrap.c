/* The bootstrap logs as its own component, although it is built with the core. */
#undef CHORUS_LOG_COMPONENT
#define CHORUS_LOG_COMPONENT CHORUS_LOG_COMP_BOOTSTRAP
/*
 * Bootstrap rendezvous store (its client is bootstrap_client.c); the wire
 * format is described in bootstrap.h. The store is one thread polling every
 * connection, so a slow, idle or hostile peer delays nobody: each
 * unauthenticated connection has its own short deadline, their number is
 * capped, and every length is checked against a fixed bound before a byte of
 * payload is read.
 */
#include "core/bootstrap.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/log.h"
#include "util/rank_set.h"
#include "util/sha256.h"
#include "util/sock.h"
#include "util/time.h"
#include "core/bootstrap_wire.h"

/*
 * Connections that have not proved the secret yet; more wait in the listen
 * backlog. Each holds a fixed 4 KiB input buffer, so the cap also bounds what
 * unauthenticated peers can make the store allocate (about 0.5 MiB).
 */
#define STORE_UNAUTH_MAX 128
/* Bounds of the time an unauthenticated connection may hold a slot. */
#define STORE_AUTH_MIN_S 1.0
#define STORE_AUTH_MAX_S 5.0
/* Pause before accepting again after accept() itself failed (e.g. out of descriptors). */
#define STORE_ACCEPT_PAUSE_S 0.1
/*
 * Refusals awaiting their grace (bootstrap.h, "refused peers"). More are
 * logged but not held: fail-fast then falls back to the timeout.
 */
#define STORE_REFUSALS_MAX 16

/* ---- Store ------------------------------------------------------------------------- */

typedef enum {
    CONN_HELLO,     /* waiting for HELLO */
    CONN_JOIN,      /* challenge sent, waiting for JOIN */
    CONN_JOINED,    /* authenticated and admitted; waiting for the other ranks */
    CONN_RESULT,    /* sending the RESULT */
    CONN_LINGER,    /* RESULT sent and the write side shut; waiting for the client to close */
    CONN_CLOSED
} store_conn_state_t;

typedef struct {
    int fd;
    store_conn_state_t state;
    int rank;
    int result_sent;
    /* The rank and size the peer claimed (from JOIN or ABANDON), named if it is refused. */
    int64_t claim_rank, claim_size;
    int claim_authed;           /* the claim came with a genuine MAC */
    double deadline;            /* to authenticate; unused once admitted */
    char peer[CHORUS_SOCK_ADDR_MAX];
    uint8_t nc[CHORUS_BOOT_NONCE], ns[CHORUS_BOOT_NONCE];
    uint8_t *in;                /* header + CHORUS_BOOT_JOIN_MAX bytes until admitted */
    size_t in_len;
    uint32_t msg_len;           /* payload length from the header */
    unsigned msg_type;          /* its type: JOIN or ABANDON where a JOIN is awaited */
    uint8_t out[CHORUS_BOOT_HEADER + CHORUS_BOOT_RESULT_HDR];
    size_t out_len, out_off;
    size_t blobs_off;           /* bytes of the blobs sent */
    /* Once admitted: a QUERY being read, and the STATUS that answers it. */
    uint8_t query[CHORUS_BOOT_HEADER + CHORUS_BOOT_QUERY_LEN];
    size_t query_len;
    int query_pending;
    uint32_t query_seq;
    uint8_t *status_msg;
    size_t status_len, status_off;
} store_conn_t;

/* A refused peer's claim, failing the rendezvous if still unanswered after the grace. */
typedef struct {
    int64_t rank;
    int authed;
    chorus_status_t status;
    double due;
    char why[CHORUS_BOOT_ERROR_TEXT_MAX + 1];
} store_refusal_t;

struct chorus__store {
    pthread_t thread;
    int detached;
    int listen_fd;
    char addr[CHORUS_SOCK_ADDR_MAX];
    uint8_t *secret;
    size_t secret_len;
    double timeout_s, deadline, auth_timeout_s, accept_pause_until;
    double started, grace_s;
    chorus_status_t status;
    uint8_t session_key[32];

    int size;                   /* 0 until the first rank is admitted */
    size_t blob_len;
    uint8_t *blobs;             /* size * blob_len */
    store_conn_t **by_rank;
    uint8_t *joined_set;        /* rank set of by_rank[r] != NULL, for STATUS */
    uint8_t *left_set;          /* ranks that joined, then closed before the result */
    atomic_int joined;
    int complete;               /* every rank joined; results are going out */
    int sending, send_failures, lingering;
    store_refusal_t refusals[STORE_REFUSALS_MAX];
    int nrefusals;

    store_conn_t **conns;
    size_t nconns, conns_cap;
    int unauth;
    struct pollfd *pfds;
    size_t pfds_cap;
};

static void store_conn_close(chorus__store_t *st, store_conn_t *c)
{
    if (c->state == CONN_CLOSED)
        return;
    close(c->fd);
    c->fd = -1;
    if (c->state == CONN_HELLO || c->state == CONN_JOIN) {
        st->unauth--;
    } else if (c->state == CONN_JOINED) {
        st->by_rank[c->rank] = NULL;
        chorus__rank_set_put(st->joined_set, c->rank, 0);
        chorus__rank_set_put(st->left_set, c->rank, 1);
        atomic_fetch_sub(&st->joined, 1);
    } else if (c->state == CONN_RESULT) {
        st->sending--;
        st->send_failures += !c->result_sent;
    } else if (c->state == CONN_LINGER) {
        st->lingering--;
    }
    c->state = CONN_CLOSED;
    free(c->in);
    c->in = NULL;
    free(c->status_msg);
    c->status_msg = NULL;
}

/*
 * Reads and discards what the peer sent (a QUERY, most likely), up to 16 KiB
 * a time, so that a close does not reset the connection over unread data and
 * destroy what is still queued for the peer. Returns -1 once the peer has
 * closed or the socket failed, else 0.
 */
static int store_conn_discard_input(store_conn_t *c)
{
    uint8_t scrap[256];
    size_t got;

    for (int i = 0; i < 64; i++) {
        if (chorus__sock_recv_some(c->fd, scrap, sizeof(scrap), &got) != CHORUS_OK)
            return -1;
        if (got == 0)
            break;
    }
    return 0;
}

/* A refusal's grace: a share of the timeout within fixed bounds (bootstrap.h). */
static double store_grace(double timeout_s)
{
    return fmin(CHORUS_BOOT_GRACE_MAX, fmax(CHORUS_BOOT_GRACE_MIN,
                                             timeout_s * CHORUS_BOOT_GRACE));
}

/* Holds a refused peer's claim until its grace ends (store_refusals_due decides then). */
static void store_note_refusal(chorus__store_t *st, const store_conn_t *c,
                               chorus_status_t status, const char *why)
{
    store_refusal_t *f;

    /* Only a refused JOIN or ABANDON claims a place; an admitted rank that misbehaves does not. */
    if (c->state != CONN_JOIN || c->claim_rank < 0 || st->complete ||
        st->nrefusals == STORE_REFUSALS_MAX)
        return;
    f = &st->refusals[st->nrefusals++];
    f->rank = c->claim_rank;
    f->authed = c->claim_authed;
    f->status = status;
    f->due = chorus__now() + st->grace_s;
    snprintf(f->why, sizeof(f->why), "%s", why);
}

/* Tells the peer why and drops it. One non-blocking send: the message is small. */
static void store_drop(chorus__store_t *st, store_conn_t *c, chorus_status_t status,
                       const char *text)
{
    uint8_t msg[CHORUS_BOOT_HEADER + CHORUS_BOOT_ERROR_MAX];
    size_t len = chorus__boot_error_encode(msg, status, text), sent;

    /* A STATUS cut short would garble the ERROR; finish it first if the kernel takes it. */
    if (c->status_off > 0 && c->status_off < c->status_len &&
        (chorus__sock_send_some(c->fd, c->status_msg + c->status_off,
                                c->status_len - c->status_off, &sent) != CHORUS_OK ||
         c->status_off + sent < c->status_len)) {
        store_conn_close(st, c);
        return;
    }
    (void)chorus__sock_send_some(c->fd, msg, len, &sent);
    (void)store_conn_discard_input(c);
    store_conn_close(st, c);
}

/* store_drop with a formatted reason, logged with the peer's address. */
static void store_refuse(chorus__store_t *st, store_conn_t *c, chorus_status_t status,
                         const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void store_refuse(chorus__store_t *st, store_conn_t *c, chorus_status_t status,
                         const char *fmt, ...)
{
    char text[CHORUS_BOOT_ERROR_TEXT_MAX + 1];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    chorus_warn("bootstrap store %s: refusing %s: %s", st->addr, c->peer, text);
    store_note_refusal(st, c, status, text);
    store_drop(st, c, status, text);
}

static chorus_status_t store_add_conn(chorus__store_t *st, int fd, const char *peer)
{
    store_conn_t *c;

    if (st->nconns == st->conns_cap) {
        size_t cap = st->conns_cap ? 2 * st->conns_cap : 64;
        store_conn_t **conns = realloc(st->conns, cap * sizeof(*conns));
        if (conns == NULL)
            return CHORUS_ERR_NO_MEMORY;
        st->conns = conns;
        st->conns_cap = cap;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return CHORUS_ERR_NO_MEMORY;
    /* Fixed size: no length from the wire ever sizes an allocation. */
    c->in = malloc(CHORUS_BOOT_HEADER + CHORUS_BOOT_JOIN_MAX);
    if (c->in == NULL) {
        free(c);
        return CHORUS_ERR_NO_MEMORY;
    }
    c->fd = fd;
    c->state = CONN_HELLO;
    c->rank = -1;
    c->claim_rank = -1;
    c->deadline = chorus__now() + st->auth_timeout_s;
    snprintf(c->peer, sizeof(c->peer), "%s", peer);
    st->conns[st->nconns++] = c;
    st->unauth++;
    return CHORUS_OK;
}

static void store_accept(chorus__store_t *st)
{
    char peer[CHORUS_SOCK_ADDR_MAX];
    int fd;

    while (st->unauth < STORE_UNAUTH_MAX) {
        if (chorus__sock_accept(st->listen_fd, &fd, peer, sizeof(peer)) != CHORUS_OK) {
            st->accept_pause_until = chorus__now() + STORE_ACCEPT_PAUSE_S;
            return;
        }
        if (fd < 0)
            return;
        chorus_debug("bootstrap store %s: connection from %s", st->addr, peer);
        if (store_add_conn(st, fd, peer) != CHORUS_OK) {
            chorus_error("bootstrap store %s: out of memory accepting %s", st->addr, peer);
            close(fd);
            return;
        }
    }
}

/* The secret and this connection's nonces, for the wire's MACs. */
static chorus__boot_keys_t store_keys(const chorus__store_t *st, const store_conn_t *c)
{
    return (chorus__boot_keys_t){.secret = st->secret, .secret_len = st->secret_len,
                                 .nc = c->nc, .ns = c->ns};
}

static void store_on_hello(chorus__store_t *st, store_conn_t *c)
{
    chorus__boot_keys_t keys = store_keys(st, c);

    /* store_check_header admitted only this length; the decoder checks it again. */
    if (chorus__boot_hello_decode(c->in + CHORUS_BOOT_HEADER, c->msg_len, c->nc) !=
        CHORUS_OK) {
        store_refuse(st, c, CHORUS_ERR_PROTOCOL, "a HELLO of %u bytes", c->msg_len);
        return;
    }
    if (chorus__random_bytes(c->ns, sizeof(c->ns)) != CHORUS_OK) {
        store_refuse(st, c, CHORUS_ERR_SYSTEM, "store cannot draw a random nonce");
        return;
    }
    c->out_len = chorus__boot_challenge_encode(c->out, &keys);
    c->out_off = 0;
    c->state = CONN_JOIN;
    c->in_len = 0;
}

static chorus_status_t store_first_rank(chorus__store_t *st, uint32_t size, size_t blob_len)
{
    st->by_rank = calloc(size, sizeof(*st->by_rank));
    st->blobs = calloc(size, blob_len ? blob_len : 1);
    st->joined_set = calloc(chorus__rank_set_bytes((int)size), 1);
    st->left_set = calloc(chorus__rank_set_bytes((int)size), 1);
    if (st->by_rank == NULL || st->blobs == NULL || st->joined_set == NULL ||
        st->left_set == NULL) {
        free(st->by_rank);
        free(st->blobs);
        free(st->joined_set);
        free(st->left_set);
        st->by_rank = NULL;
        st->blobs = NULL;
        st->joined_set = NULL;
        st->left_set = NULL;
        return CHORUS_ERR_NO_MEMORY;
    }
    st->size = (int)size;
    st->blob_len = blob_len;
    return CHORUS_OK;
}

/* An authenticated JOIN: admit the rank unless it conflicts with what others announced. */
static void store_admit(chorus__store_t *st, store_conn_t *c, const chorus__boot_join_t *join)
{
    uint32_t rank = join->rank, size = join->size;
    size_t blob_len = join->blob_len;
    char why[CHORUS_BOOT_WHY_MAX];

    /* The MAC is genuine: whoever sent it holds the job secret. */
    c->claim_rank = rank;
    c->claim_size = size;
    c->claim_authed = 1;
    if (chorus__boot_join_check(join, why, sizeof(why)) != CHORUS_OK) {
        store_refuse(st, c, CHORUS_ERR_INVALID_ARG, "%s", why);
        return;
    }
    if (st->size == 0 && store_first_rank(st, size, blob_len) != CHORUS_OK) {
        store_refuse(st, c, CHORUS_ERR_NO_MEMORY,
                     "store cannot allocate %u blobs of %zu bytes", size, blob_len);
        return;
    }
    if ((int)size != st->size) {
        store_refuse(st, c, CHORUS_ERR_INVALID_ARG,
                     "rank %u announced size %u, which disagrees with size %d "
                     "announced by the first rank", rank, size, st->size);
        return;
    }
    if (blob_len != st->blob_len) {
        store_refuse(st, c, CHORUS_ERR_INVALID_ARG,
                     "rank %u announced a %zu-byte address, which disagrees with "
                     "%zu bytes announced by the first rank", rank, blob_len,
                     st->blob_len);
        return;
    }
    if (st->by_rank[rank] != NULL) {
        store_refuse(st, c, CHORUS_ERR_IN_USE, "rank %u already joined (from %s)",
                     rank, st->by_rank[rank]->peer);
        return;
    }

    memcpy(st->blobs + (size_t)rank * blob_len, join->blob, blob_len);
    st->by_rank[rank] = c;
    chorus__rank_set_put(st->joined_set, (int)rank, 1);
    c->rank = (int)rank;
    c->state = CONN_JOINED;
    st->unauth--;
    free(c->in);
    c->in = NULL;
    atomic_fetch_add(&st->joined, 1);
    chorus_debug("bootstrap store %s: rank %u joined from %s (%d of %d)", st->addr, rank,
                 c->peer, atomic_load(&st->joined), st->size);
}

static void store_on_join(chorus__store_t *st, store_conn_t *c)
{
    chorus__boot_keys_t keys = store_keys(st, c);
    chorus__boot_join_t join;
    chorus_status_t status;

    status = chorus__boot_join_decode(&keys, c->in + CHORUS_BOOT_HEADER, c->msg_len, &join);
    if (status == CHORUS_ERR_AUTH) {
        uint32_t rank, size;

        /* Unauthenticated, the claim is still worth naming; its grace decides what it costs. */
        if (chorus__boot_join_claim(c->in + CHORUS_BOOT_HEADER, c->msg_len, &rank, &size) ==
            CHORUS_OK) {
            c->claim_rank = rank;
            c->claim_size = size;
        }
        store_refuse(st, c, CHORUS_ERR_AUTH, "rank %lld (of %lld): authentication failed: "
                     "the peer does not hold the job secret", (long long)c->claim_rank,
                     (long long)c->claim_size);
        return;
    }
    /* store_check_header bounded the length already; the decoder checks it again. */
    if (status != CHORUS_OK) {
        store_refuse(st, c, status, "a JOIN of %u bytes", c->msg_len);
        return;
    }
    store_admit(st, c, &join);
}

/* A client whose check of our CHALLENGE failed: its secret differs from ours. */
static void store_on_abandon(chorus__store_t *st, store_conn_t *c)
{
    uint32_t rank, size;

    if (chorus__boot_abandon_decode(c->in + CHORUS_BOOT_HEADER, c->msg_len, &rank, &size) !=
        CHORUS_OK) {
        store_refuse(st, c, CHORUS_ERR_PROTOCOL, "an ABANDON of %u bytes", c->msg_len);
        return;
    }
    c->claim_rank = rank;
    c->claim_size = size;
    store_refuse(st, c, CHORUS_ERR_AUTH, "rank %u (of %u) could not verify the store's "
                 "proof: its job secret differs from the store's", rank, size);
}

/* Validates a complete header against what this connection may send now. */
static int store_check_header(chorus__store_t *st, store_conn_t *c)
{
    unsigned want = c->state == CONN_HELLO ? CHORUS_BOOT_HELLO : CHORUS_BOOT_JOIN;
    char why[CHORUS_BOOT_WHY_MAX];
    chorus__boot_hdr_t hdr;

    if (chorus__boot_header_decode(c->in, CHORUS_BOOT_HEADER, &hdr, why, sizeof(why)) !=
        CHORUS_OK) {
        store_refuse(st, c, CHORUS_ERR_PROTOCOL, "%s", why);
        return -1;
    }
    if (chorus__boot_store_expect(&hdr, want) != CHORUS_OK) {
        store_refuse(st, c, CHORUS_ERR_PROTOCOL, "unexpected message type %u of %u bytes "
                     "(a JOIN carries at most %d bytes)", hdr.type, hdr.len,
                     CHORUS_BOOT_JOIN_MAX);
        return -1;
    }
    c->msg_len = hdr.len;
    c->msg_type = hdr.type;
    return 0;
}

static void store_conn_read(chorus__store_t *st, store_conn_t *c)
{
    while (c->state == CONN_HELLO || c->state == CONN_JOIN) {
        size_t want = CHORUS_BOOT_HEADER + (c->in_len < CHORUS_BOOT_HEADER ? 0 : c->msg_len);
        size_t got;

        if (chorus__sock_recv_some(c->fd, c->in + c->in_len, want - c->in_len, &got) !=
            CHORUS_OK) {
            /* A peer that leaves after our challenge most likely failed to verify it. */
            if (c->state == CONN_JOIN)
                chorus_warn("bootstrap store %s: %s left after the challenge without "
                            "authenticating (does its job secret differ?)", st->addr, c->peer);
            store_conn_close(st, c);
            return;
        }
        if (got == 0)
            return;
        c->in_len += got;
        if (c->in_len == CHORUS_BOOT_HEADER && store_check_header(st, c) != 0)
            return;
        if (c->in_len < CHORUS_BOOT_HEADER || c->in_len < CHORUS_BOOT_HEADER + c->msg_len)
            continue;
        if (c->state == CONN_HELLO)
            store_on_hello(st, c);
        else if (c->msg_type == CHORUS_BOOT_ABANDON)
            store_on_abandon(st, c);
        else
            store_on_join(st, c);
    }
}

/* Builds the STATUS that answers the connection's last QUERY: who has joined now. */
static chorus_status_t store_status_prepare(chorus__store_t *st, store_conn_t *c)
{
    chorus__boot_keys_t keys = store_keys(st, c);
    chorus__boot_status_t status = {
        .seq = c->query_seq, .size = (uint32_t)st->size, .joined = st->joined_set,
        .elapsed_ms = (uint32_t)fmin(4e9, (chorus__now() - st->started) * 1e3)};

    free(c->status_msg);
    c->status_msg = malloc(CHORUS_BOOT_HEADER + chorus__boot_status_len(status.size));
    if (c->status_msg == NULL)
        return CHORUS_ERR_NO_MEMORY;
    c->status_len = chorus__boot_status_encode(c->status_msg, &keys, &status);
    c->status_off = 0;
    c->query_pending = 0;
    return CHORUS_OK;
}

/*
 * Sends what is queued: a challenge; a STATUS; or a RESULT prefix followed by
 * the shared blobs. A STATUS begun is finished first, so messages never mix.
 */
static void store_conn_write(chorus__store_t *st, store_conn_t *c)
{
    size_t total = (size_t)st->size * st->blob_len, sent;

    if (c->state == CONN_RESULT && c->status_off == 0)
        c->status_len = 0;      /* an answer not begun is moot: the result says more */
    if (c->state == CONN_JOINED && c->query_pending && c->status_off == c->status_len &&
        store_status_prepare(st, c) != CHORUS_OK) {
        store_refuse(st, c, CHORUS_ERR_NO_MEMORY, "store cannot allocate a status message");
        return;
    }
    while (c->state != CONN_CLOSED) {
        chorus_status_t status;
        if (c->status_off < c->status_len)
            status = chorus__sock_send_some(c->fd, c->status_msg + c->status_off,
                                            c->status_len - c->status_off, &sent);
        else if (c->out_off < c->out_len)
            status = chorus__sock_send_some(c->fd, c->out + c->out_off,
                                            c->out_len - c->out_off, &sent);
        else if (c->state == CONN_RESULT && c->blobs_off < total)
            status = chorus__sock_send_some(c->fd, st->blobs + c->blobs_off,
                                            total - c->blobs_off, &sent);
        else
            break;
        if (status != CHORUS_OK) {
            chorus_warn("bootstrap store %s: lost %s (rank %d) while sending to it", st->addr,
                        c->peer, c->rank);
            store_conn_close(st, c);
            return;
        }
        if (sent == 0)
            return;
        if (c->status_off < c->status_len) {
            c->status_off += sent;
            if (c->status_off == c->status_len) {
                /* Answers are rare and each holds a bit per rank: keep none between them. */
                free(c->status_msg);
                c->status_msg = NULL;
                c->status_len = c->status_off = 0;
            }
        } else if (c->out_off < c->out_len)
            c->out_off += sent;
        else
            c->blobs_off += sent;
    }
    if (c->state == CONN_RESULT) {
        /*
         * Everything is in the kernel's hands. The client may have sent a
         * QUERY meanwhile, and closing over unread data would reset the
         * connection and drop the result; so shut the write side and close
         * when the client does.
         */
        c->result_sent = 1;
        if (shutdown(c->fd, SHUT_WR) != 0) {
            store_conn_close(st, c);
            return;
        }
        st->sending--;
        c->state = CONN_LINGER;
        st->lingering++;
    }
}

/* A lingering connection: discard what the client sends until it closes. */
static void store_conn_linger_event(chorus__store_t *st, store_conn_t *c)
{
    if (store_conn_discard_input(c) != 0)
        store_conn_close(st, c);
}

/* An admitted rank's QUERY, complete in c->query: authenticate it and queue the answer. */
static void store_on_query(chorus__store_t *st, store_conn_t *c)
{
    chorus__boot_keys_t keys = store_keys(st, c);
    char why[CHORUS_BOOT_WHY_MAX];
    chorus__boot_hdr_t hdr;
    uint32_t seq;

    if (chorus__boot_header_decode(c->query, CHORUS_BOOT_HEADER, &hdr, why, sizeof(why)) !=
        CHORUS_OK || chorus__boot_store_expect(&hdr, CHORUS_BOOT_QUERY) != CHORUS_OK) {
        store_refuse(st, c, CHORUS_ERR_PROTOCOL, "rank %d sent something other than a "
                     "status query while waiting for the result", c->rank);
        return;
    }
    if (chorus__boot_query_decode(&keys, c->query + CHORUS_BOOT_HEADER, CHORUS_BOOT_QUERY_LEN,
                                  &seq) != CHORUS_OK) {
        store_refuse(st, c, CHORUS_ERR_AUTH, "rank %d sent a status query that fails its "
                     "authentication check", c->rank);
        return;
    }
    c->query_seq = seq;
    c->query_pending = 1;
    c->query_len = 0;
}

/*
 * An admitted rank may only ask who has joined (QUERY); anything else, or a
 * close, means it gave up or misbehaves.
 */
static void store_conn_joined_event(chorus__store_t *st, store_conn_t *c)
{
    while (c->state == CONN_JOINED) {
        size_t got;

        if (chorus__sock_recv_some(c->fd, c->query + c->query_len,
                                   sizeof(c->query) - c->query_len, &got) != CHORUS_OK) {
            chorus_warn("bootstrap store %s: rank %d (%s) left before the rendezvous "
                        "completed; its rank is free again", st->addr, c->rank, c->peer);
            store_conn_close(st, c);
            return;
        }
        if (got == 0)
            break;
        c->query_len += got;
        if (c->query_len == sizeof(c->query))
            store_on_query(st, c);
    }
    /* Also the rest of an answer the socket did not take at once. */
    if (c->state == CONN_JOINED && (c->query_pending || c->status_off < c->status_len))
        store_conn_write(st, c);
}

static void store_conn_event(chorus__store_t *st, store_conn_t *c, short revents)
{
    if (c->state == CONN_JOINED) {
        store_conn_joined_event(st, c);
        return;
    }
    if (c->state == CONN_LINGER) {
        store_conn_linger_event(st, c);
        return;
    }
    if ((revents & (POLLIN | POLLERR | POLLHUP)) &&
        (c->state == CONN_HELLO || c->state == CONN_JOIN))
        store_conn_read(st, c);
    if (c->state != CONN_CLOSED)
        store_conn_write(st, c);
}

/* Every rank joined: queue each one's RESULT and stop taking connections. */
static void store_complete(chorus__store_t *st)
{
    size_t total = (size_t)st->size * st->blob_len;
    uint8_t digest[32];

    chorus__sha256(st->blobs, total, digest);
    for (int r = 0; r < st->size; r++) {
        store_conn_t *c = st->by_rank[r];
        chorus__boot_keys_t keys = store_keys(st, c);

        c->out_len = chorus__boot_result_encode(c->out, &keys, st->session_key, digest, total);
        c->out_off = 0;
        c->state = CONN_RESULT;
        st->sending++;
    }
    st->complete = 1;
    close(st->listen_fd);
    st->listen_fd = -1;
    for (size_t i = 0; i < st->nconns; i++) {
        if (st->conns[i]->state == CONN_HELLO || st->conns[i]->state == CONN_JOIN)
            store_conn_close(st, st->conns[i]);
    }
    chorus_info("bootstrap store %s: all %d ranks joined", st->addr, st->size);
}

static void store_expire(chorus__store_t *st, double now)
{
    for (size_t i = 0; i < st->nconns; i++) {
        store_conn_t *c = st->conns[i];
        if ((c->state == CONN_HELLO || c->state == CONN_JOIN) && now >= c->deadline)
            store_refuse(st, c, CHORUS_ERR_TIMEOUT, "no authentication within %.1f s",
                         st->auth_timeout_s);
    }
}

static void store_compact(chorus__store_t *st)
{
    size_t n = 0;

    for (size_t i = 0; i < st->nconns; i++) {
        if (st->conns[i]->state == CONN_CLOSED)
            free(st->conns[i]);
        else
            st->conns[n++] = st->conns[i];
    }
    st->nconns = n;
}

/* Fills pfds (listener first) and returns the poll timeout in milliseconds. */
static int store_prepare_poll(chorus__store_t *st, double now)
{
    double next = st->deadline;
    int listening = st->listen_fd >= 0 && st->unauth < STORE_UNAUTH_MAX;

    if (listening && now < st->accept_pause_until) {
        listening = 0;
        next = fmin(next, st->accept_pause_until);
    }
    st->pfds[0].fd = listening ? st->listen_fd : -1;
    st->pfds[0].events = POLLIN;
    for (size_t i = 0; i < st->nconns; i++) {
        store_conn_t *c = st->conns[i];
        short events = c->state == CONN_RESULT ? 0 : POLLIN;
        if (c->out_off < c->out_len || c->state == CONN_RESULT ||
            c->status_off < c->status_len || (c->state == CONN_JOINED && c->query_pending))
            events |= POLLOUT;
        st->pfds[i + 1].fd = c->fd;
        st->pfds[i + 1].events = events;
        st->pfds[i + 1].revents = 0;
        if (c->state == CONN_HELLO || c->state == CONN_JOIN)
            next = fmin(next, c->deadline);
    }
    for (int i = 0; i < st->nrefusals; i++)
        next = fmin(next, st->refusals[i].due);
    st->pfds[0].revents = 0;
    return chorus__ms_left(next);
}

/* Sends every admitted rank an ERROR with the text; the store's own log says it once. */
static void store_fail_all(chorus__store_t *st, chorus_status_t status, const char *text)
{
    for (int r = 0; r < st->size; r++) {
        if (st->by_rank[r] != NULL)
            store_drop(st, st->by_rank[r], status, text);
    }
}

/*
 * Ranks that never joined, as "2, 5-7"; ranks that joined and then left (and
 * have not come back) are named apart, since they did join.
 */
static void store_missing_text(const chorus__store_t *st, char *buf, size_t len)
{
    size_t bytes = chorus__rank_set_bytes(st->size), off;
    uint8_t *seen = malloc(bytes), *gone = malloc(bytes);

    if (seen == NULL || gone == NULL) {
        chorus__rank_set_format(st->joined_set, st->size, 0, buf, len);
        goto out;
    }
    for (size_t i = 0; i < bytes; i++) {
        seen[i] = st->joined_set[i] | st->left_set[i];
        gone[i] = (uint8_t)(st->left_set[i] & ~st->joined_set[i]);
    }
    chorus__rank_set_format(seen, st->size, 0, buf, len);
    off = strlen(buf);
    if (chorus__rank_set_count(gone, st->size, 1) == 0 || off + 64 > len)
        goto out;
    off += (size_t)snprintf(buf + off, len - off, " (joined, then left: ");
    chorus__rank_set_format(gone, st->size, 1, buf + off, len - off - 1);
    strcat(buf + off, ")");
out:
    free(seen);
    free(gone);
}

/*
 * Refusals whose grace has ended: the first that the rendezvous still suffers
 * from (bootstrap.h, "refused peers") stops it; the others are forgotten.
 */
static chorus_status_t store_refusals_due(chorus__store_t *st, double now)
{
    int kept = 0;

    for (int i = 0; i < st->nrefusals; i++) {
        store_refusal_t *f = &st->refusals[i];
        /* Longer than an ERROR carries: chorus__boot_error_encode cuts it. */
        char missing[96], text[2 * CHORUS_BOOT_ERROR_TEXT_MAX];
        int hurts;

        if (now < f->due) {
            st->refusals[kept++] = *f;
            continue;
        }
        hurts = !st->complete && st->size > 0 &&
                (f->authed || (f->rank < st->size && st->by_rank[f->rank] == NULL));
        if (!hurts)
            continue;
        store_missing_text(st, missing, sizeof(missing));
        chorus_error("bootstrap store %s: stopping the rendezvous: %s; %.1f s later ranks "
                     "%s have still not joined", st->addr, f->why, st->grace_s, missing);
        snprintf(text, sizeof(text), "rendezvous stopped: %s; not joined after %.1f s: "
                 "ranks %s", f->why, st->grace_s, missing);
        store_fail_all(st, f->status, text);
        return f->status;
    }
    st->nrefusals = kept;
    return CHORUS_OK;
}

static chorus_status_t store_timeout(chorus__store_t *st)
{
    char missing[96], text[2 * CHORUS_BOOT_ERROR_TEXT_MAX];
    int joined = atomic_load(&st->joined);

    if (st->complete) {
        chorus_error("bootstrap store %s: timed out after %.1f s sending the result to %d "
                     "ranks", st->addr, st->timeout_s, st->sending);
        return CHORUS_ERR_TIMEOUT;
    }
    if (st->size == 0) {
        chorus_error("bootstrap store %s: timed out after %.1f s; no rank joined", st->addr,
                     st->timeout_s);
        return CHORUS_ERR_TIMEOUT;
    }
    store_missing_text(st, missing, sizeof(missing));
    chorus_error("bootstrap store %s: timed out after %.1f s with %d of %d ranks joined; "
                 "never joined: ranks %s", st->addr, st->timeout_s, joined, st->size,
                 missing);
    /* Tell the ranks that came why; the summary above is the one log line. */
    snprintf(text, sizeof(text), "rendezvous timed out after %.1f s with %d of %d ranks "
             "joined; never joined: ranks %s", st->timeout_s, joined, st->size, missing);
    store_fail_all(st, CHORUS_ERR_TIMEOUT, text);
    return CHORUS_ERR_TIMEOUT;
}

static chorus_status_t store_run(chorus__store_t *st)
{
    for (;;) {
        double now = chorus__now();
        size_t npolled = st->nconns;
        chorus_status_t status;
        int ms;

        /* Lingering clients are waited for while time remains; they close once they have read. */
        if (st->complete && st->sending == 0 && (st->lingering == 0 || now >= st->deadline))
            return st->send_failures ? CHORUS_ERR_PEER_FAILED : CHORUS_OK;
        if (now >= st->deadline)
            return store_timeout(st);
        status = store_refusals_due(st, now);
        if (status != CHORUS_OK)
            return status;
        if (st->pfds_cap < st->nconns + 1) {
            struct pollfd *pfds = realloc(st->pfds, 2 * (st->nconns + 1) * sizeof(*pfds));
            if (pfds == NULL) {
                chorus_error("bootstrap store %s: out of memory polling %zu connections",
                             st->addr, st->nconns);
                return CHORUS_ERR_NO_MEMORY;
            }
            st->pfds = pfds;
            st->pfds_cap = 2 * (st->nconns + 1);
        }
        ms = store_prepare_poll(st, now);
        if (poll(st->pfds, npolled + 1, ms) < 0 && errno != EINTR) {
            chorus_error("bootstrap store %s: poll failed: %m", st->addr);
            return CHORUS_ERR_SYSTEM;
        }
        /* Connections first: accepting may grow conns beyond the polled ones. */
        for (size_t i = 0; i < npolled; i++) {
            if (st->pfds[i + 1].revents != 0)
                store_conn_event(st, st->conns[i], st->pfds[i + 1].revents);
        }
        if (st->pfds[0].revents != 0 && st->listen_fd >= 0)
            store_accept(st);
        store_expire(st, chorus__now());
        store_compact(st);
        if (!st->complete && st->size > 0 && atomic_load(&st->joined) == st->size)
            store_complete(st);
    }
}

static void store_free(chorus__store_t *st)
{
    for (size_t i = 0; i < st->nconns; i++) {
        store_conn_close(st, st->conns[i]);
        free(st->conns[i]);
    }
    if (st->listen_fd >= 0)
        close(st->listen_fd);
    free(st->conns);
    free(st->pfds);
    free(st->by_rank);
    free(st->blobs);
    free(st->joined_set);
    free(st->left_set);
    if (st->secret != NULL)
        explicit_bzero(st->secret, st->secret_len);
    explicit_bzero(st->session_key, sizeof(st->session_key));
    free(st->secret);
    free(st);
}

static void *store_thread(void *arg)
{
    chorus__store_t *st = arg;

    st->status = store_run(st);
    if (st->detached) {
        store_free(st);
        return NULL;
    }
    /* Close everything now rather than when someone joins. */
    for (size_t i = 0; i < st->nconns; i++)
        store_conn_close(st, st->conns[i]);
    if (st->listen_fd >= 0)
        close(st->listen_fd);
    st->listen_fd = -1;
    return NULL;
}

static double store_auth_timeout(double timeout_s)
{
    /* A handshake is two round trips: a few seconds, never a large share of the job's wait. */
    return fmin(STORE_AUTH_MAX_S, fmax(STORE_AUTH_MIN_S, timeout_s / 4));
}

static chorus_status_t store_check_args(const char *addr, const char *secret,
                                        size_t secret_len, double timeout_s, int detached,
                                        chorus__store_t **store_p)
{
    if (addr == NULL) {
        chorus_error("bootstrap store: the address to listen on is NULL");
        return CHORUS_ERR_INVALID_ARG;
    }
    if (secret == NULL || secret_len == 0) {
        chorus_error("bootstrap store on %s: the job secret is empty", addr);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (!(timeout_s > 0) || !isfinite(timeout_s)) {
        chorus_error("bootstrap store on %s: timeout %g s is not a positive number", addr,
                     timeout_s);
        return CHORUS_ERR_INVALID_ARG;
    }
    if (!detached && store_p == NULL) {
        chorus_error("bootstrap store on %s: store_p is NULL for a joinable store", addr);
        return CHORUS_ERR_INVALID_ARG;
    }
    return CHORUS_OK;
}

/* Allocates the store and binds its listener; its thread is not started yet. */
static chorus_status_t store_create(const char *addr, const char *secret, size_t secret_len,
                                    double timeout_s, int detached, chorus__store_t **st_p)
{
    chorus__store_t *st = calloc(1, sizeof(*st));
    chorus_status_t status = CHORUS_ERR_NO_MEMORY;

    if (st == NULL) {
        chorus_error("bootstrap store on %s: out of memory", addr);
        return status;
    }
    st->listen_fd = -1;
    st->secret = malloc(secret_len);
    st->pfds = calloc(64, sizeof(*st->pfds));
    if (st->secret == NULL || st->pfds == NULL) {
        chorus_error("bootstrap store on %s: out of memory", addr);
        goto err_free;
    }
    memcpy(st->secret, secret, secret_len);
    st->secret_len = secret_len;
    st->pfds_cap = 64;
    st->detached = detached;
    st->timeout_s = timeout_s;
    st->auth_timeout_s = store_auth_timeout(timeout_s);
    st->grace_s = store_grace(timeout_s);
    atomic_init(&st->joined, 0);
    status = chorus__random_bytes(st->session_key, sizeof(st->session_key));
    if (status != CHORUS_OK)
        goto err_free;
    status = chorus__sock_listen(addr, SOMAXCONN, &st->listen_fd, st->addr, sizeof(st->addr));
    if (status != CHORUS_OK)
        goto err_free;
    *st_p = st;
    return CHORUS_OK;

err_free:
    store_free(st);
    return status;
}

chorus_status_t chorus__store_start(const char *addr, const char *secret, size_t secret_len,
                                    double timeout_s, int detached, char *bound_addr,
                                    size_t bound_len, chorus__store_t **store_p)
{
    char bound[CHORUS_SOCK_ADDR_MAX];
    chorus__store_t *st;
    pthread_attr_t attr;
    chorus_status_t status;
    int rc;

    chorus__log_init();
    status = store_check_args(addr, secret, secret_len, timeout_s, detached, store_p);
    if (status == CHORUS_OK)
        status = store_create(addr, secret, secret_len, timeout_s, detached, &st);
    if (status != CHORUS_OK)
        return status;
    /* Kept here: a detached store may be gone before this function returns. */
    snprintf(bound, sizeof(bound), "%s", st->addr);
    if (bound_addr != NULL && strlen(bound) >= bound_len) {
        chorus_error("bootstrap store: bound_addr of %zu bytes cannot hold '%s'", bound_len,
                     bound);
        status = CHORUS_ERR_INVALID_ARG;
        goto err_free;
    }
    st->started = chorus__now();
    st->deadline = st->started + timeout_s;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, detached ? PTHREAD_CREATE_DETACHED
                                                : PTHREAD_CREATE_JOINABLE);
    rc = pthread_create(&st->thread, &attr, store_thread, st);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        errno = rc;
        chorus_error("bootstrap store %s: cannot start its thread: %m", bound);
        status = CHORUS_ERR_SYSTEM;
        goto err_free;
    }
    chorus_info("bootstrap store listening on %s for %.1f s", bound, timeout_s);
    if (bound_addr != NULL)
        strcpy(bound_addr, bound);
    if (store_p != NULL)
        *store_p = detached ? NULL : st;
    return CHORUS_OK;

err_free:
    store_free(st);
    return status;
}

chorus_status_t chorus__store_join(chorus__store_t *store)
{
    chorus_status_t status;
    int rc;

    if (store == NULL || store->detached) {
        chorus_error("bootstrap store: join of a %s store", store ? "detached" : "NULL");
        return CHORUS_ERR_INVALID_ARG;
    }
    /* The thread's every wait ends by its deadline, so this join is bounded too. */
    rc = pthread_join(store->thread, NULL);
    if (rc != 0) {
        errno = rc;
        chorus_error("bootstrap store %s: pthread_join failed: %m", store->addr);
        return CHORUS_ERR_SYSTEM;
    }
    status = store->status;
    store_free(store);
    return status;
}

int chorus__store_joined(chorus__store_t *store)
{
    return atomic_load(&store->joined);
}
