/*
 * The process context: what the communicators of one job share. The
 * rendezvous creates it with its first communicator; every communicator
 * split or duplicated from that one is a view over the same context, so a
 * split costs no thread, no connection and no rendezvous.
 *
 * The context owns the progress thread, the point-to-point transports (a
 * lane per peer: the first transport that reaches it), the collective
 * transports' per-process state, the control channel and the scratch
 * memory. A fault (a lost peer, a timeout, an abort) fails the context:
 * every pending call of every communicator over it ends with the fault,
 * and the transports close their connections so that peers notice at once.
 */
#ifndef CHORUS_CORE_CONTEXT_H
#define CHORUS_CORE_CONTEXT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "chorus.h"
#include "coll/coll.h"
#include "core/core_config.h"
#include "topology/layout.h"
#include "transports/base/team.h"
#include "transports/base/transport.h"
#include "util/trace.h"

/* Transports of each kind a context can hold. */
#define CHORUS__LANES_MAX 4
#define CHORUS__TEAMS_MAX 4
/* Splits in progress at once on one rank (threads of a process). */
#define CHORUS__RESERVED_MAX 64

/*
 * The 64-bit tag of a message: bits 0-31 the algorithm's tag, bits 32-60 the
 * call's sequence number (modulo 2^29: calls that far apart are never in
 * flight together), bit 61 marks the last message of a call between two
 * ranks (TL_TAG_FINAL, set by the schedule executor). Bits 62 and 63 belong
 * to the control channel (ctrl.h).
 */
#define CHORUS_TAG_SEQ_BITS 29

static inline uint64_t chorus__tag_base(uint64_t seq)
{
    return (seq & ((1ULL << CHORUS_TAG_SEQ_BITS) - 1)) << 32;
}

/*
 * Spaces: each communicator has its own, agreed by its ranks (0 for the
 * rendezvous's communicator). Its creation-time exchanges run in the same
 * space with this bit set, so they never meet a user's call.
 */
#define CHORUS__SPACE_SETUP (1u << 31)

typedef struct chorus__ctrl chorus__ctrl_t;     /* ctrl.c */
typedef struct chorus__ctx chorus__ctx_t;

struct chorus__ctx {
    int rank;                   /* in the job */
    int size;
    topo_layout_t *layout;      /* the job's nodes (from the rendezvous) */
    chorus__core_config_t cfg;

    /* Point-to-point transports, and the one each peer is reached over. */
    int nlanes;
    const tl_ops_t *tl[CHORUS__LANES_MAX];
    tl_ctx_t *tl_ctx[CHORUS__LANES_MAX];
    int tl_watched[CHORUS__LANES_MAX];  /* its fd is in epoll_fd */
    int tl_slot[CHORUS__LANES_MAX];     /* the slot of the rank's addresses it was published in */
    uint8_t *lane_of;           /* [size]: index into tl of the transport reaching each rank */

    /* Collective transports, indexed like tl_coll_all (a NULL context: off here). */
    int nteams;
    const tl_coll_ops_t *ctl[CHORUS__TEAMS_MAX];
    tl_coll_ctx_t *ctl_ctx[CHORUS__TEAMS_MAX];

    /* Progress thread and the queue user threads post to. */
    pthread_t thread;
    int thread_started;
    /*
     * Held by whoever runs the progress loop's turns, and so owns the
     * requests in flight (active), the transports' progress and the
     * control channel: the progress thread, or a thread that drives its
     * blocking call (chorus__progress_drive). Taken before ctx->lock.
     */
    pthread_mutex_t engine;
    int epoll_fd;               /* the progress thread's sleep: transports and wake_fd */
    int drive_fd;               /* a driving thread's sleep: transports and drive_wake_fd */
    int drive_wake_fd;          /* eventfd: new work or a fault while a thread drives */
    atomic_int driving;         /* a thread drives its call now: wake-ups ring drive_wake_fd too */
    int lent;                   /* the transports are out of epoll_fd, lent to drivers (engine) */
    double lent_until;          /* when the progress thread takes them back (engine) */
    int sleep_untimed;          /* the progress thread sleeps until told (set under engine) */
    int wake_fd;                /* eventfd of the progress thread: new work, abort, stop, a loan */
    pthread_mutex_t lock;
    pthread_cond_t cond;        /* a request completed */
    struct chorus_request *queue_head;   /* posted, not yet taken by the progress thread */
    struct chorus_request *queue_tail;
    struct chorus_request *active;       /* owned by the engine's holder */

    /* Communicators over the context, and the spaces splits in progress reserved (under lock). */
    struct chorus_comm *comms;
    uint32_t reserved[CHORUS__RESERVED_MAX];
    int nreserved;
    int refs;                   /* communicators alive, under lock */

    chorus__ctrl_t *ctrl;       /* the control channel (progress thread) */
    coll_scratch_pool_t scratch_pool;
    chorus__trace_t *trace;     /* CHORUS_TRACE; NULL when off */

    atomic_int stop;
    atomic_int aborted;
    atomic_int error;           /* the fault (chorus_status_t), 0 when none */
    atomic_int refusal_due;     /* replies to refusal notices wait for the progress thread */
};

/* What the rendezvous produced, to build a context on. */
typedef struct {
    int rank;
    int size;
    const char *bind_host;
    const uint8_t *tl_key;      /* the key transport connections prove */
    size_t tl_key_len;
} chorus__ctx_params_t;

/*
 * Create the context: read the configuration (timeout_s > 0 overrides
 * CHORUS_TIMEOUT) and create every transport's context, listening. The
 * addresses come next (chorus__ctx_address, chorus__ctx_peers).
 */
chorus_status_t chorus__ctx_create(const chorus__ctx_params_t *params, double timeout_s,
                                   chorus__ctx_t **ctx_p);
/* Every lane's address, TL_ADDR_MAX bytes each, into addr (CHORUS__LANES_MAX slots). */
chorus_status_t chorus__ctx_address(chorus__ctx_t *ctx, char *addr);
/*
 * From every rank's addresses (rank r's at addrs + r * CHORUS__LANES_MAX * TL_ADDR_MAX)
 * and the job's layout (taken over): choose each peer's lane, start the progress thread.
 */
chorus_status_t chorus__ctx_start(chorus__ctx_t *ctx, const char *addrs, topo_layout_t *layout);
/* The network transport the context reaches other nodes over ("tcp", "ucx"). */
const char *chorus__ctx_net_name(const chorus__ctx_t *ctx);
/*
 * CHORUS_TRANSPORT=auto: of nslots network transports, published at slots[k]
 * of every rank's addresses (as chorus__ctx_start takes them), the index k
 * of the last one every rank published (not all zeros); 0 when none but the
 * first is.
 */
int chorus__net_choose(const char *addrs, int size, const int *slots, int nslots);
/* Drop one reference; the last stops the progress thread and frees everything. */
void chorus__ctx_release(chorus__ctx_t *ctx);

/* Record the context's fault (the first one stays) and wake the progress thread. */
void chorus__ctx_fail(chorus__ctx_t *ctx, chorus_status_t status);
static inline chorus_status_t chorus__ctx_error(chorus__ctx_t *ctx)
{
    return (chorus_status_t)atomic_load(&ctx->error);
}

/* The progress thread (progress.c). */
chorus_status_t chorus__progress_start(chorus__ctx_t *ctx);
void chorus__progress_stop(chorus__ctx_t *ctx);
void chorus__progress_wake(chorus__ctx_t *ctx);
/*
 * Run the progress loop in this thread until req (posted by it, not woken
 * for) is over, when the engine is free: 1. Its transports' events wake
 * this thread, not the progress thread, meanwhile; the progress thread
 * goes on with what is left. 0, and nothing done, when another thread
 * holds the engine.
 */
int chorus__progress_drive(chorus__ctx_t *ctx, struct chorus_request *req);

/*
 * Payload streams per peer over the transports that open several (tl_ops_t
 * streams), for every peer of the context: use > 0 caps them, use <= 0
 * only asks. Returns the most any of them opens per peer; 1 when none opens
 * more. Safe from any thread.
 */
int chorus__ctx_net_streams(chorus__ctx_t *ctx, int use);

/* Send and receive with a context rank over its lane (progress thread). */
chorus_status_t chorus__ctx_send(chorus__ctx_t *ctx, int peer, uint32_t space, uint64_t tag,
                                 const void *buf, size_t len, tl_req_t *req);
chorus_status_t chorus__ctx_recv(chorus__ctx_t *ctx, int peer, uint32_t space, uint64_t tag,
                                 void *buf, size_t capacity, tl_req_t *req);

#endif
