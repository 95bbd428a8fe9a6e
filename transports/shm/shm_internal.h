/* Region layout, the node and the step counters shared by the shm files. */
#ifndef CHORUS_SHM_INTERNAL_H
#define CHORUS_SHM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "reduce/device.h"
#include "transports/shm/shm.h"
#include "util/shared_mem.h"
#include "util/spinlock.h"

#define SHM_LINE 64
#define SHM_MAGIC 0x63686f7275736d36ULL   /* "chorusm6" */

/*
 * The small-call areas (shm_ll.c): a call that fits carries its data on
 * cache lines that each hold their own flag, so a peer that sees the flag
 * has the data in the same transfer. A line holds an 8-byte flag (a step
 * word: fingerprint tag and step) and 56 bytes of data; the first line's
 * data begins with the call's whole fingerprint. Each rank has
 * SHM_LL_DEPTH areas, used by step in turn. A broadcast's or an
 * allgather's part may fill the area (SHM_LL_BYTES, 1784 bytes); a
 * reduction's part only its first ten lines (SHM_LL_REDUCE_BYTES, 552):
 * each part is copied out of its lines before the reduction, and beyond
 * that the copies cost more than the step saved (docs/PERFORMANCE.md).
 *
 * A rank that reads nothing from some peers in a small call checks their
 * fingerprints of it up to SHM_LL_AHEAD steps later, so it may run that
 * many steps ahead of them; an area is therefore free again only once
 * every peer has posted SHM_LL_AHEAD steps past the one that wrote it last
 * (shm_ll.c). With twice SHM_LL_AHEAD areas, neither bound holds a rank
 * back before it is SHM_LL_AHEAD steps ahead of its slowest peer.
 */
#define SHM_LL_LINES 32
#define SHM_LL_DEPTH 64
#define SHM_LL_AHEAD 32
_Static_assert(SHM_LL_AHEAD >= 1 && 2 * SHM_LL_AHEAD <= SHM_LL_DEPTH,
               "a rank may run SHM_LL_AHEAD steps ahead only with that many areas to spare");
#define SHM_LL_DATA (SHM_LINE - 8)          /* data bytes of a line */
#define SHM_LL_FIRST (SHM_LL_DATA - 8)      /* of the first, after the fingerprint */
#define SHM_LL_BYTES (SHM_LL_FIRST + (SHM_LL_LINES - 1) * SHM_LL_DATA)
#define SHM_LL_REDUCE_BYTES (SHM_LL_FIRST + 9 * SHM_LL_DATA)

/* The most bytes of a rank's part that a small call of coll carries. */
static inline size_t shm_ll_limit(coll_type_t coll)
{
    return coll_type_reduces(coll) ? SHM_LL_REDUCE_BYTES : SHM_LL_BYTES;
}

typedef struct {
    _Atomic uint64_t flag;
    unsigned char data[SHM_LL_DATA];
} shm_ll_line_t;

_Static_assert(sizeof(shm_ll_line_t) == SHM_LINE, "a small-call line is one cache line");

/*
 * Yields between a waiter's spin and its sleep (shm_sync.c): SHM_YIELDS, or
 * SHM_YIELDS_SHARED where the node has more ranks than cores. There the peer
 * waited for is often not running, and a sleep costs both sides a trip
 * through the kernel that makes the next waits longer still; more yields
 * cost nothing when no other task wants this core, and give it away when one
 * does (4 ranks on 2 cores, 16 KiB allreduce, posts fenced: 15-17 us in the
 * slow runs with 64 yields, 22-27 us with 8; docs/PERFORMANCE.md).
 */
#define SHM_YIELDS 8
#define SHM_YIELDS_SHARED 64

/* Where the areas and the staging slots begin in a region. */
#define SHM_LL_OFFSET 4096
#define SHM_DATA_OFFSET                                                                   \
    ((SHM_LL_OFFSET + SHM_LL_DEPTH * SHM_LL_LINES * SHM_LINE + 4095) / 4096 * 4096)

/*
 * A step word: the low 48 bits count the steps this rank has finished, the
 * high 16 bits carry the fingerprint of the call those steps belong to, so a
 * peer in a different call is noticed instead of read.
 */
#define SHM_STEP_BITS 48
#define SHM_STEP_MASK ((1ULL << SHM_STEP_BITS) - 1)

/* The 16-bit tag of a step word: the call's fingerprint folded. */
static inline uint32_t shm_fp_tag(uint64_t fp)
{
    return (uint32_t)((fp ^ (fp >> 16) ^ (fp >> 32) ^ (fp >> 48)) & 0xffff);
}

/* Where a call's buffers are, for the single-copy path. */
typedef struct {
    uint64_t sendbuf;
    uint64_t recvbuf;
    uint64_t count;
    uint64_t fp;                /* the call's whole fingerprint (shm_fingerprint) */
    uint32_t mem;               /* SHM_BUF_SEND, SHM_BUF_RECV: the buffer is chorus memory */
    uint32_t pad;
    chorus__shared_ref_t send_mem;  /* the chorus_mem_alloc allocations they lie in */
    chorus__shared_ref_t recv_mem;
} shm_desc_t;

/*
 * The low bits of the whole fingerprint that a staging call's first round
 * writes beside its slot (shm_mem.c): MEM, this rank's buffers that peers
 * would reach in a single-copy call are chorus_mem_alloc memory (or there
 * are none); SKIP, it had data to copy in and did not. Fingerprints
 * themselves keep both bits clear.
 */
#define SHM_FP_MEM 1ULL
#define SHM_FP_SKIP 2ULL
#define SHM_FP_MARKS (SHM_FP_MEM | SHM_FP_SKIP)

/* Where a call's device buffers are, for the CUDA path (shm_cuda.c). */
typedef struct {
    uint64_t fp;                /* the call's whole fingerprint */
    uint64_t count;
    uint32_t shared;            /* SHM_BUF_SEND, SHM_BUF_RECV: the buffer is published */
    uint32_t pad;
    chorus__device_share_t send;
    chorus__device_share_t recv;
} shm_dev_desc_t;

/* shm_desc_t.mem, shm_dev_desc_t.shared: which buffers of the call the words describe. */
#define SHM_BUF_SEND 1u
#define SHM_BUF_RECV 2u

/* The start of every region; each member that peers poll has a cache line of its own. */
typedef struct {
    uint64_t magic;
    uint8_t token[SHM_TOKEN_BYTES];
    int32_t pid;
    uint32_t fence_ok;          /* the owner posts without a fence where peers allow (shm_sync.c) */
    uint64_t slot_bytes;
    uint64_t self_addr;         /* the owner's address of this header (single-copy probe) */
    char pad1[SHM_LINE - 48];
    _Atomic uint64_t step;      /* polled by every peer */
    _Atomic int32_t failed;     /* a chorus_status_t once the owner gave up */
    uint32_t pad2;
    /*
     * The whole fingerprint of the call whose data is in slot i, written
     * with the slot's first round. It shares the step word's line, which a
     * waiter reads anyway, so the check costs no extra transfer.
     */
    _Atomic uint64_t stage_fp[2];
    char pad3[SHM_LINE - 32];
    _Atomic uint32_t bell;      /* futex word: bumped after a post when someone sleeps */
    _Atomic uint32_t sleepers;
    char pad4[SHM_LINE - 8];
    shm_desc_t desc;
    shm_dev_desc_t dev_desc;
} shm_ctrl_t;

struct shm_region {
    int fd;
    size_t bytes;
    shm_ctrl_t *ctrl;           /* the mapping */
};

struct shm_node {
    int me;
    int n;
    shm_config_t cfg;
    shm_region_t own;
    shm_ctrl_t **ctrl;          /* every local rank's region, mapped here */
    size_t *map_bytes;
    int use_cma;
    pid_t *pids;
    uint64_t step;              /* this rank's last posted step (mirror of own ctrl->step) */
    uint64_t seen;              /* a step every local rank is known to have posted */
    uint64_t slot_free[2];      /* step after which every rank is done reading slot i */
    int slot;                   /* slot of the next round */
    /*
     * Turns. Calls run one at a time in ticket order, but the thread that
     * drives one may differ from the thread that drove the one before: the
     * release store of serving by the thread that ends (or skips) a turn,
     * and the acquire load that sees it in the thread of the next call,
     * hand this node's state (step, slots, buffers) from one to the other.
     * turn_lock orders the skips, which any thread may take, with the end
     * of the turn being served.
     */
    _Atomic uint64_t next_ticket;
    _Atomic uint64_t serving;
    chorus__spinlock_t turn_lock;
    uint64_t *skipped;          /* turns given up before they came (shm_op_skip) */
    size_t nskipped;
    size_t skipped_cap;
    _Atomic int broken;         /* a call failed part way: the counters are out of step */
    int dead_peer;              /* a local rank whose process is gone, or -1 */
    int fence_ready;            /* every local rank registered for node-wide barriers */
    size_t spin_max;            /* polls before yielding at most (CHORUS_SHM_SPIN, or 0) */
    int yields;                 /* yields before sleeping (shm_sync.c) */
    size_t spin;                /* polls before yielding now: learnt from recent waits */
    double poll_s;              /* seconds one poll takes (shm_spin_calibrate) */
    void *acc;                  /* single-copy path: private chunk buffers */
    void *tmp;
    size_t chunk;
    struct shm_mem *mem;        /* peers' chorus_mem_alloc memory mapped here (first use) */
    /*
     * Small calls (shm_ll.c) that returned once they had what they needed,
     * before every peer's part was there: a broadcast's root, a rank that
     * only contributes to a reduce. Oldest first, from defer_head: a later
     * call checks those peers' fingerprints of them (shm_ll_settle), a
     * small call only of those SHM_LL_AHEAD steps old, any other call of
     * all of them.
     */
    struct {
        uint64_t step;
        uint64_t fp;
        coll_type_t coll;
    } defer[SHM_LL_AHEAD];
    unsigned defer_head;
    unsigned defer_count;
    int defer_next;             /* the oldest's peers before this one are checked */
    int dev;                    /* CUDA path: this rank's device (its card's), or -1 */
    struct shm_cuda *cuda;      /* CUDA path: peers' opened buffers, scratch (first call) */
};

_Static_assert(sizeof(shm_ctrl_t) <= SHM_LL_OFFSET, "shm_ctrl_t overlaps the small-call areas");

static inline char *shm_slot(const shm_node_t *node, int rank, int slot)
{
    return (char *)node->ctrl[rank] + SHM_DATA_OFFSET + (size_t)slot * node->cfg.slot_bytes;
}

/* Post step: own counter to node->step + 1, tagged with tag (shm_fp_tag); wakes sleepers. */
void shm_post(shm_node_t *node, uint32_t tag);
/*
 * 1 when every local rank has reached step (peers within the call's steps
 * (base, end] must carry tag), 0 when some has not (*peer_p says which), or
 * a negative status: a peer failed or is in another call.
 */
int shm_reached(shm_node_t *node, uint64_t step, uint64_t base, uint32_t tag, int *peer_p);
/* Whether the process is gone or exiting (killed, not yet reaped, counts as gone). */
int shm_pid_gone(pid_t pid);
/* Measure how long a poll of the spin takes, for learning how long to spin. */
void shm_spin_calibrate(shm_node_t *node);
/* A local rank that gave up or is gone: its status (< 0) after saying so, else 0. */
int shm_any_failed(shm_node_t *node);
/*
 * Spin, yield, then sleep on peer's bell until word (one of peer's step
 * words; NULL: its step counter) reaches step or max_us pass.
 */
void shm_sleep(shm_node_t *node, int peer, const _Atomic uint64_t *word, uint64_t step,
               unsigned max_us);

/* Copies and reductions. */
void shm_copy(void *dst, const void *src, size_t bytes, int streaming);
/* Slices are whole cache lines of elements, so no two ranks write one line. */
static inline size_t shm_unit(size_t esize)
{
    return esize < SHM_LINE ? SHM_LINE / esize : 1;
}

/* One part of m items split into n near-equal parts in units of unit items: [*lo, *hi). */
void shm_part(size_t m, size_t unit, int n, int j, size_t *lo, size_t *hi);

/* Staging: the elements [*lo, *hi) of a part of len elements that this round moves. */
static inline void shm_piece(const shm_op_t *op, size_t len, size_t *lo, size_t *hi)
{
    size_t at = op->round * op->per;

    *lo = at < len ? at : len;
    *hi = len - *lo < op->per ? len : *lo + op->per;
}

/* A staging round of every collective but alltoall (shm_stage.c): copy this rank's part
 * into its slot; reduce its slice (slice variant); take out what it receives. */
void shm_stage_in(shm_op_t *op);
void shm_stage_slice(shm_op_t *op);
void shm_stage_out(shm_op_t *op);

/* Alltoall (shm_alltoall.c): a staging round's two halves, and the single-copy moves. */
void shm_a2a_stage_in(shm_op_t *op);
void shm_a2a_stage_out(shm_op_t *op);
int shm_a2a_cma(shm_op_t *op);

/*
 * What peers publish about a call (shm_desc.c). The fingerprint covers
 * everything the ranks must agree on: the collective, variant, type, op and
 * root where they matter, the count, or in a v-form every block's length
 * and place. A peer's words are input from another process, so they are
 * checked against this rank's own call before any address in them is used.
 */
uint64_t shm_fingerprint(const coll_args_t *a, shm_kind_t kind);
/* 0 when every rank's fingerprint of the call in slot is fp, else INVALID_ARG; *marked_p
 * and *skipped_p: how many ranks set SHM_FP_MEM and SHM_FP_SKIP beside it. */
int shm_stage_check(const shm_node_t *node, int slot, uint64_t fp, int *marked_p,
                    int *skipped_p);

/*
 * The end of every message about ranks whose calls differ: the fingerprints
 * say only that they differ, the call check says how.
 */
#define SHM_MISMATCH_HINT                                                              \
    "; set CHORUS_DEBUG_CHECK=1 on every rank to have each call compared before any " \
    "data moves, naming both ranks and their collective, sequence number, count, "   \
    "dtype, op and root"
/* Single copy: publish this rank's buffers; 0 when every peer's descriptor fits the call,
 * else INVALID_ARG. */
void shm_desc_publish(shm_node_t *node, const coll_args_t *a, uint64_t fp);
int shm_desc_check(const shm_node_t *node, const coll_args_t *a, uint64_t fp);

/* Small calls on the lines of the areas (shm_ll.c): whether a call fits, and its steps. */
int shm_ll_fits(const coll_args_t *a);
/* What a small call's shape gives (op->ll_part, ll_lines, ll_reads_all), at its init. */
void shm_ll_init(shm_op_t *op);
int shm_ll_progress(shm_op_t *op);
/*
 * Whether op must first check the small calls before it that returned
 * before they saw every peer's part (node->defer): a small call those
 * SHM_LL_AHEAD steps older than its step, any other call all of them.
 */
int shm_ll_owed(const shm_op_t *op);
/*
 * Check every peer's fingerprint of those calls, as shm_ll_progress does;
 * 1 when all match, 0 when one has not posted one yet (op waits on it),
 * < 0 when one is in another call.
 */
int shm_ll_settle(shm_op_t *op);

/* The CUDA path (shm_cuda.c): a call's steps, and what the node keeps for it. */
int shm_cuda_progress(shm_op_t *op);
/* At the call: its rounds, and the events and the stream's wait that order it. */
void shm_cuda_op_init(shm_op_t *op);
void shm_cuda_op_release(shm_op_t *op);
void shm_cuda_node_free(shm_node_t *node);

/* Whether local rank j's send buffer is read, or its receive buffer written, by its peers
 * in a single-copy call. */
int shm_peer_reads_send(const coll_args_t *a, int j);
int shm_peer_writes_recv(const coll_args_t *a, int j);

/*
 * chorus_mem_alloc memory (shm_mem.c). A staging call's first round marks
 * whether this rank's buffers that peers would reach are such memory
 * (publishing where they are); when every rank marked it, the call runs as
 * a single-copy call that reads and writes those buffers where they are.
 * Returns the SHM_FP_* marks of this rank.
 */
uint64_t shm_mem_mark(shm_op_t *op);
/*
 * Where peer's bytes at its address remote are in this process: *local_p
 * is NULL when they are not in chorus memory that peer published for the
 * call (the caller then uses cross-memory attach), else the mapping's
 * address. < 0: the memory could not be mapped and there is no other way.
 */
int shm_mem_resolve(shm_node_t *node, int peer, uint64_t remote, size_t bytes, void **local_p);
void shm_mem_node_free(shm_node_t *node);

/* The single-copy path (shm_cma.c). */
int shm_cma_progress(shm_op_t *op);
int shm_cma_probe(pid_t pid, const shm_ctrl_t *peer_ctrl_local, uint64_t peer_addr);
/* Move bytes between this process at local and peer's remote address (write: to it),
 * directly where the peer's buffer is chorus memory. */
int shm_cma_move(shm_node_t *node, int peer, int write, void *local, uint64_t remote,
                 size_t bytes);

#endif
