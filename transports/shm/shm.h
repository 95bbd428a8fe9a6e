/*
 * Collectives over shared memory on a team: ranks that share a machine,
 * all of its ranks or any subset (one team per communicator). Every member
 * owns one region per team (a memfd: never a file in /dev/shm, gone with
 * the last mapping, also after SIGKILL) that the other members map through
 * /proc/<pid>/fd. A region holds this member's progress counter, a futex
 * word, what it publishes about the call and two data slots. Collectives
 * are state machines over the counters: each rank posts "step s done" and
 * waits until every member has posted step s, so any thread (the caller's,
 * or the progress thread for non-blocking calls) can drive them, one call
 * at a time and in call order.
 *
 * Two data paths: staging through the slots (copy in, reduce one slice of
 * every rank's data or copy every rank's part out), and single copy with
 * cross-memory attach (process_vm_readv/writev straight between the ranks'
 * own buffers) where the kernel allows it. Both run allreduce, reduce,
 * reduce_scatter, allgather, broadcast and alltoall, and the v-forms of
 * allgather and reduce_scatter (blocks of any length, anywhere). Small
 * calls of every collective but alltoall have a one-step path of their own
 * (shm_ll.c): each rank writes its data on cache lines that carry their own
 * flags, and its peers read them as soon as the flags say they are there.
 *
 * A third path serves calls on CUDA device memory (shm_cuda.c): the ranks'
 * buffers are opened in each other's processes through CUDA IPC, and each
 * rank's kernels read and write its peers' buffers directly; the counters
 * in the regions still order the steps.
 */
#ifndef CHORUS_SHM_H
#define CHORUS_SHM_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"
#include "transports/base/coll_args.h"
#include "transports/base/team.h"
#include "util/config.h"

#define SHM_TOKEN_BYTES 16

/* What a rank publishes at the rendezvous so that local peers can map its region. */
typedef struct {
    int32_t pid;
    int32_t fd;                 /* -1: this rank has no region */
    uint8_t token[SHM_TOKEN_BYTES];
    int32_t dev;                /* the rank's CUDA device (ordinal in its process), or -1 */
    uint8_t dev_uuid[16];       /* that device's identity */
} shm_card_t;

typedef struct {
    int enabled;                /* CHORUS_SHM */
    size_t slot_bytes;          /* CHORUS_SHM_SLOT_SIZE */
    int cma;                    /* CHORUS_SHM_CMA */
    size_t nt_bytes;            /* CHORUS_SHM_NT_THRESHOLD */
    size_t spin;                /* CHORUS_SHM_SPIN */
    int cuda;                   /* CHORUS_SHM_CUDA */
    int membarrier;             /* CHORUS_SHM_MEMBARRIER */
} shm_config_t;

extern const chorus__config_table_t shm_config_table;

/* How a call moves its data (the variants of tl_shm_coll_ops). */
typedef enum {
    SHM_FLAT = 0,           /* staging; every rank reads every slot */
    SHM_SLICE,              /* staging; each rank reduces one slice for all */
    SHM_CMA,                /* single copy between the ranks' buffers */
    SHM_CUDA,               /* device kernels on the ranks' device buffers (CUDA IPC) */
    SHM_LL                  /* small calls: data on the lines of the flags (shm_ll.c) */
} shm_kind_t;

/* Team flag: single copy (cross-memory attach) works between every pair of members. */
#define SHM_TEAM_CMA (1u << 1)
/* Team flag: every member has a CUDA device whose kernels reach every other member's. */
#define SHM_TEAM_CUDA (1u << 2)

/* The collective transport (shm_team.c). */
extern const tl_coll_ops_t tl_shm_coll_ops;

typedef struct shm_region shm_region_t;
typedef struct shm_node shm_node_t;

/* This rank's region, created before the rendezvous; card is what to publish. */
chorus_status_t shm_region_create(const shm_config_t *cfg, shm_region_t **region_p,
                                  shm_card_t *card);
/* For a region that never became part of a node. */
void shm_region_destroy(shm_region_t *region);

/*
 * Map every local peer's region (cards in local-rank order, own card at
 * local_rank) and check each one's token. Takes the own region over, also
 * on failure. *cma_ok_p says whether cross-memory attach reached every peer.
 * A card's device (dev, dev_uuid) is filled by shm_cuda_card.
 */
chorus_status_t shm_node_create(shm_region_t *own, const shm_card_t *cards, int local_rank,
                                int local_size, const shm_config_t *cfg, shm_node_t **node_p,
                                int *cma_ok_p);
/*
 * After every local rank has mapped every region: the memfd is no longer
 * needed. cores: the cores the local ranks run on at once (0: unknown).
 */
void shm_node_seal(shm_node_t *node, int use_cma, int cores);
void shm_node_destroy(shm_node_t *node);
/* Tell the local peers that this rank gave up (their waits end with PEER_FAILED). */
void shm_node_fail(shm_node_t *node, chorus_status_t status);

/*
 * One collective on the node, driven by shm_op_progress. A field of the
 * call's progress (from ticket on) that a new call starts afresh is reset
 * by op_restart too (shm_coll.c), where a call of a known shape begins.
 */
typedef struct {
    shm_node_t *node;
    coll_args_t args;
    shm_kind_t asked;           /* the variant the call was made for */
    shm_kind_t kind;            /* the one it runs: asked, or the flat one where that has no form */
    uint64_t ticket;            /* call order on the node */
    int phase;
    uint64_t fp;                /* fingerprint of the call, checked against every peer's */
    uint32_t tag;               /* its 16 bits that every step word of the call carries */
    uint64_t base;              /* last step before this call */
    uint64_t wait_step;         /* step every rank must reach before the next move */
    int wait_peer;              /* first local rank found short of wait_step */
    const _Atomic uint64_t *wait_word;  /* its word to watch; NULL: its step counter */
    size_t round, nrounds;
    size_t per;                 /* staging: elements of each rank's part per round */
    size_t esize;
    size_t bytes;               /* the call's whole vector in bytes */
    size_t ll_part;             /* SHM_LL: bytes of each rank's part (shm_ll_init) */
    size_t ll_lines;            /* SHM_LL: the lines a part takes, the fingerprint's included */
    int ll_reads_all;           /* SHM_LL: this rank reads every peer's part */
    uint64_t mem_marks;         /* staging: this rank's SHM_FP_* marks (shm_mem.c) */
    int mem_agreed;             /* staging: every rank's mark has been seen */
    int mem_direct;             /* every rank marked: it ran as a single-copy call */
    int ll_posted;              /* SHM_LL: this rank's data and step are out */
    int ll_ready;               /* SHM_LL: the local ranks before this one have posted */
    /* SHM_CUDA (shm_cuda.c): the call's device work, from the call on */
    chorus_status_t dev_status; /* a failure to order the call after the caller's work */
    void *dev_ready;            /* event: the caller's earlier device work is done */
    void *dev_work;             /* event: this rank's work of the current step is done */
    uint32_t *dev_gate;         /* the caller's stream waits for this word (page-locked) */
    void *dev_gate_passed;      /* event after that wait on the caller's stream */
} shm_op_t;

/*
 * Takes the node's next turn. args (with its counts and displs in a v-form)
 * must stay valid until the call is over. Every member passes the same
 * arguments but its rank and buffers, a v-form's counts and displs
 * included; members that differ fail the call (see shm_fingerprint).
 */
void shm_op_init(shm_op_t *op, shm_node_t *node, const coll_args_t *args,
                 shm_kind_t kind);
/*
 * Whether a call of args made for kind has the shape of op's, a call of
 * the same node that is over: every argument alike but the buffers, and
 * neither a v-form (its arrays may have changed in place) nor a device call.
 */
int shm_op_same_shape(const shm_op_t *op, const coll_args_t *args, shm_kind_t kind);
/* shm_op_init for such a call: what follows from the shape is kept from op. */
void shm_op_again(shm_op_t *op, const coll_args_t *args);
/*
 * shm_op_init for the call op made last, on sendbuf and recvbuf, once it is
 * over: 0, or -1 for a call that cannot repeat so (a v-form, a device call).
 */
int shm_op_rearm(shm_op_t *op, const void *sendbuf, void *recvbuf);
/*
 * A call that will not run (skipped on every rank alike, or finalized
 * before it was posted): its turn is given up, from any thread, without
 * moving data or steps.
 */
void shm_op_skip(shm_op_t *op);
/* 1: complete; 0: waiting for peers; < 0: failed (the node is unusable afterwards). */
int shm_op_progress(shm_op_t *op);
/* Wait at most max_us for the peer the op waits on: spin, then yield, then sleep (futex). */
void shm_op_wait(shm_op_t *op, unsigned max_us);
/* The call's task is released: what the op holds besides the node goes (any kind). */
void shm_op_release(shm_op_t *op);

/* ---- CUDA device buffers (shm_cuda.c) ----------------------------------- */

/* This rank's device in card, when cfg allows and the process has one (else dev = -1). */
void shm_cuda_card(const shm_config_t *cfg, shm_card_t *card);
/* Whether every card's device is reachable from this rank's (SHM_TEAM_CUDA). */
int shm_cuda_team_ok(const shm_card_t *cards, int n, int me);
/* Whether op's results reach the caller's stream by themselves (CHORUS__TASK_ENQUEUED). */
int shm_cuda_enqueued(const shm_op_t *op);

#endif
