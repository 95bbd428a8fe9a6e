/*
 * The communicator and its requests. A communicator owns one transport
 * context and one progress thread; user threads post requests to a queue
 * and wait on them, the progress thread runs their schedules.
 */
#ifndef CHORUS_CORE_COMM_H
#define CHORUS_CORE_COMM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "chorus.h"
#include "coll/coll.h"
#include "core/core_config.h"
#include "transports/base/transport.h"
#include "topology/layout.h"
#include "transports/shm/shm.h"
#include "tuning/select.h"

/*
 * The 64-bit transport tag: bits 0-31 the algorithm's tag, bits 32-61 the
 * call's sequence number (modulo 2^30: calls that far apart are never in
 * flight together), bit 62 the debug check's fingerprint exchange, bit 63
 * the stall reports' control messages. Algorithm traffic never sets the top
 * two bits, so neither kind of hidden message can match a data receive.
 */
#define CHORUS_TAG_SEQ_BITS 30
#define CHORUS_TAG_CHECK (1ULL << 62)
#define CHORUS_TAG_CTRL  (1ULL << 63)

static inline uint64_t chorus__tag_base(uint64_t seq)
{
    return (seq & ((1ULL << CHORUS_TAG_SEQ_BITS) - 1)) << 32;
}

typedef struct chorus__check chorus__check_t;   /* debug_check.c */
typedef struct chorus__stall chorus__stall_t;   /* stall.c */

struct chorus_request {
    chorus_comm_t comm;
    coll_args_t args;
    const coll_alg_t *alg;
    coll_sched_t sched;
    uint64_t seq;               /* the call's sequence number on this communicator */
    double deadline;
    double posted_at;           /* chorus__now() when posted */
    double stall_at;            /* next stall report, 0: none */
    chorus__check_t *check;     /* the fingerprint exchange still to run (CHORUS_DEBUG_CHECK) */
    shm_op_t shm_op;            /* the call's state when alg is node-local (alg->shm) */
    chorus_status_t check_status;   /* the debug check's verdict */
    int done;                   /* under comm->lock */
    int orphaned;               /* freed by the user before completion: the progress thread frees it */
    chorus_status_t status;
    struct chorus_request *next;
};

struct chorus_comm {
    int rank;
    int size;
    int local_rank;
    int local_size;
    topo_layout_t *layout;      /* which ranks share a node (from the rendezvous) */
    chorus__core_config_t cfg;
    tune_table_t *tune;
    coll_scratch_pool_t scratch_pool;   /* scratch of large schedules, reused across calls */

    const tl_ops_t *tl;
    tl_ctx_t *tl_ctx;

    pthread_t thread;
    int thread_started;
    int epoll_fd;
    int wake_fd;                /* eventfd: new work, abort, stop */
    int tl_fd_watched;          /* the transport's fd is in epoll_fd (progress thread) */

    pthread_mutex_t lock;
    pthread_cond_t cond;        /* a request completed */
    struct chorus_request *queue_head;   /* posted, not yet seen by the progress thread */
    struct chorus_request *queue_tail;
    int outstanding;            /* posted and not complete */
    uint64_t next_seq;          /* of the calling thread */

    struct chorus_request *active;       /* owned by the progress thread */
    chorus__stall_t *stall;     /* control messages of the stall reports (progress thread) */

    shm_config_t shm_cfg;
    shm_region_t *shm_region;   /* this rank's region until the node is set up */
    shm_card_t *shm_cards;      /* every rank's card, until the node is set up */
    shm_node_t *shm;            /* node-local path: set when every rank shares this node */
    tune_node_t shm_agreed;     /* what every local rank agreed on: single copy, cores, slots */
    _Atomic uint64_t inline_done;   /* calls completed in the calling thread: highest seq + 1 */

    atomic_int stop;
    atomic_int aborted;
    atomic_int error;           /* first fault (chorus_status_t), 0 when none */
};

/* Progress thread (progress.c). */
chorus_status_t chorus__progress_start(chorus_comm_t comm);
void chorus__progress_stop(chorus_comm_t comm);
void chorus__progress_wake(chorus_comm_t comm);

/* Requests (request.c). */
/* Post a call to the progress thread with alg (chorus__request_select's choice, or another). */
chorus_status_t chorus__request_post_alg(chorus_comm_t comm, const coll_args_t *args,
                                         const coll_alg_t *alg, chorus_request_t *req_p);
/* Hand a node-local call begun in the calling thread over to the progress thread. */
chorus_status_t chorus__request_adopt_shm(chorus_comm_t comm, const shm_op_t *op,
                                          const coll_alg_t *alg, uint64_t seq,
                                          double posted_at, chorus_request_t *req_p);
/* The selection table's algorithm for args (logged and NULL when there is none). */
const coll_alg_t *chorus__request_select(chorus_comm_t comm, const coll_args_t *args);
/* Bytes the selection table is indexed by: the whole vector moved. */
size_t chorus__request_bytes(const coll_args_t *args);

/* Node-local path (shm_path.c). */
chorus_status_t chorus__shm_region_open(chorus_comm_t comm, shm_card_t *card);
chorus_status_t chorus__shm_setup(chorus_comm_t comm);
void chorus__shm_close(chorus_comm_t comm);
/* Runs the call (alg: the table's choice) in the calling thread when it can: 1, else 0. */
int chorus__shm_run_inline(chorus_comm_t comm, const coll_args_t *args, const coll_alg_t *alg,
                           chorus_status_t *status_p);
void chorus__request_complete(chorus_request_t req, chorus_status_t status);
void chorus__request_release(chorus_request_t req);

/* Record the first fault of the communicator (background errors). */
void chorus__comm_set_error(chorus_comm_t comm, chorus_status_t status);

#endif
