/* Region layout, the node and the step counters shared by the shm files. */
#ifndef CHORUS_SHM_INTERNAL_H
#define CHORUS_SHM_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "transports/shm/shm.h"

#define SHM_LINE 64
#define SHM_MAGIC 0x63686f7275736d31ULL   /* "chorusm1" */
#define SHM_DATA_OFFSET 4096

/*
 * A step word: the low 48 bits count the steps this rank has finished, the
 * high 16 bits carry the fingerprint of the call those steps belong to, so a
 * peer in a different call is noticed instead of read.
 */
#define SHM_STEP_BITS 48
#define SHM_STEP_MASK ((1ULL << SHM_STEP_BITS) - 1)

/* Where a call's buffers are, for the single-copy path. */
typedef struct {
    uint64_t sendbuf;
    uint64_t recvbuf;
    uint64_t count;
    uint32_t fp;
    uint32_t pad;
} shm_desc_t;

/* The start of every region; each member that peers poll has a cache line of its own. */
typedef struct {
    uint64_t magic;
    uint8_t token[SHM_TOKEN_BYTES];
    int32_t pid;
    uint32_t pad0;
    uint64_t slot_bytes;
    uint64_t self_addr;         /* the owner's address of this header (single-copy probe) */
    char pad1[SHM_LINE - 48];
    _Atomic uint64_t step;      /* polled by every peer */
    _Atomic int32_t failed;     /* a chorus_status_t once the owner gave up */
    char pad2[SHM_LINE - 12];
    _Atomic uint32_t bell;      /* futex word: bumped after a post when someone sleeps */
    _Atomic uint32_t sleepers;
    char pad3[SHM_LINE - 8];
    shm_desc_t desc;
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
    uint64_t slot_free[2];      /* step after which every rank is done reading slot i */
    int slot;                   /* slot of the next round */
    uint64_t next_ticket;
    uint64_t serving;
    uint64_t *skipped;          /* turns given up before they came (shm_op_skip) */
    size_t nskipped;
    size_t skipped_cap;
    int broken;                 /* a call failed part way: the counters are out of step */
    int dead_peer;              /* a local rank whose process is gone, or -1 */
    size_t spin;
    void *acc;                  /* single-copy path: private chunk buffers */
    void *tmp;
    size_t chunk;
};

static inline char *shm_slot(const shm_node_t *node, int rank, int slot)
{
    return (char *)node->ctrl[rank] + SHM_DATA_OFFSET + (size_t)slot * node->cfg.slot_bytes;
}

/* Post step: own counter to node->step + 1, tagged with fp; wakes sleepers. */
void shm_post(shm_node_t *node, uint32_t fp);
/*
 * 1 when every local rank has reached step (peers within the call's steps
 * (base, end] must carry fp), 0 when some has not (*peer_p says which), or
 * a negative status: a peer failed or is in another call.
 */
int shm_reached(shm_node_t *node, uint64_t step, uint64_t base, uint32_t fp, int *peer_p);
/* Whether the process is gone or exiting (killed, not yet reaped, counts as gone). */
int shm_pid_gone(pid_t pid);
/* Sleep on peer's bell until its step word changes or max_us pass. */
void shm_sleep(shm_node_t *node, int peer, uint64_t step, unsigned max_us);

/* Copies and reductions. */
void shm_copy(void *dst, const void *src, size_t bytes, int streaming);
/* Slices are whole cache lines of elements, so no two ranks write one line. */
static inline size_t shm_unit(size_t esize)
{
    return esize < SHM_LINE ? SHM_LINE / esize : 1;
}

/* One part of m items split into n near-equal parts in units of unit items: [*lo, *hi). */
void shm_part(size_t m, size_t unit, int n, int j, size_t *lo, size_t *hi);

/* Single-copy call descriptors (shm_desc.c): publish this rank's; 0 when every peer's
 * matches the call, else INVALID_ARG. */
void shm_desc_publish(shm_node_t *node, const coll_args_t *a, uint32_t fp);
int shm_desc_check(const shm_node_t *node, const coll_args_t *a, uint32_t fp);

/* The single-copy path (shm_cma.c). */
int shm_cma_progress(shm_op_t *op);
int shm_cma_probe(pid_t pid, const shm_ctrl_t *peer_ctrl_local, uint64_t peer_addr);

#endif
