/*
 * Fuzz target: what a rank reads from the other members' shared-memory
 * regions, which other processes write: their step words (step count and
 * call tag), their failure words, the whole call fingerprints they publish
 * beside their step words for the staging slots, and their single-copy call
 * descriptors. The input sets the team (members, this member, the call, a
 * v-form's blocks) and every member's words; the target checks what
 * shm_reached, shm_stage_check and shm_desc_check conclude from them, and
 * that the call fingerprint tells apart layouts that differ in one block.
 */
#include <stdlib.h>

#include "transports/shm/shm_internal.h"
#include "util/log.h"
#include "fuzz.h"

#define MAX_RANKS 8

static uint64_t fuzz_u64(const uint8_t *data, size_t size, size_t at)
{
    return (uint64_t)fuzz_u32(data, size, at) | (uint64_t)fuzz_u32(data, size, at + 4) << 32;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* Every rejected input logs an error; the log is not what is fuzzed. */
    for (int c = 0; c < CHORUS_LOG_COMP_COUNT; c++)
        chorus__log_levels[c] = -1;
    return 0;
}

/* Whether peer j's step word is fine for a wait up to step in the call after base. */
static int step_ok(uint64_t v, uint64_t step, uint32_t tag)
{
    uint64_t s = v & SHM_STEP_MASK;

    return s >= step && (s > step || (v >> SHM_STEP_BITS) == (tag & 0xffff));
}

static int step_foreign(uint64_t v, uint64_t base, uint64_t step, uint32_t tag)
{
    uint64_t s = v & SHM_STEP_MASK;

    return s > base && s <= step && (v >> SHM_STEP_BITS) != (tag & 0xffff);
}

static void check_reached(shm_node_t *node, uint64_t base, uint64_t step, uint32_t tag)
{
    int peer = -1, any_failed = 0, any_foreign = 0, all_ok = 1;
    int rc = shm_reached(node, step, base, tag, &peer);

    for (int j = 0; j < node->n; j++) {
        uint64_t v = atomic_load(&node->ctrl[j]->step);

        any_failed |= j != node->me && atomic_load(&node->ctrl[j]->failed) != 0;
        any_foreign |= step_foreign(v, base, step, tag);
        all_ok &= step_ok(v, step, tag);
    }
    FUZZ_CHECK(rc == 1 || rc == 0 || rc == CHORUS_ERR_PEER_FAILED ||
               rc == CHORUS_ERR_INVALID_ARG);
    /* A peer that gave up ends every wait, whatever the counters say. */
    FUZZ_CHECK((rc == CHORUS_ERR_PEER_FAILED) == any_failed);
    if (rc == 1)
        FUZZ_CHECK(all_ok && !any_foreign);
    if (rc == CHORUS_ERR_INVALID_ARG)
        FUZZ_CHECK(any_foreign);
    if (rc == 0) {
        /* The named peer is short of the step, and every rank before it is fine. */
        FUZZ_CHECK(peer >= 0 && peer < node->n);
        FUZZ_CHECK((atomic_load(&node->ctrl[peer]->step) & SHM_STEP_MASK) < step);
        for (int j = 0; j < peer; j++)
            FUZZ_CHECK(step_ok(atomic_load(&node->ctrl[j]->step), step, tag));
    }
    if (!any_failed && all_ok)
        FUZZ_CHECK(rc == 1);
}

/* The low bits of a published fingerprint are marks (SHM_FP_MARKS), counted, not compared. */
static void check_stage(const shm_node_t *node, int slot, uint64_t fp)
{
    int marked, skipped, all_match = 1, n_mem = 0, n_skip = 0;
    int rc = shm_stage_check(node, slot, fp & ~SHM_FP_MARKS, &marked, &skipped);

    for (int j = 0; j < node->n; j++) {
        uint64_t theirs = atomic_load(&node->ctrl[j]->stage_fp[slot]);

        all_match &= (theirs & ~SHM_FP_MARKS) == (fp & ~SHM_FP_MARKS);
        n_mem += (theirs & SHM_FP_MEM) != 0;
        n_skip += (theirs & SHM_FP_SKIP) != 0;
    }
    FUZZ_CHECK(rc == 0 || rc == CHORUS_ERR_INVALID_ARG);
    FUZZ_CHECK((rc == 0) == all_match);
    /* Every rank's marks are counted when all match; on a mismatch the counts stop early. */
    FUZZ_CHECK(marked >= 0 && marked <= n_mem && skipped >= 0 && skipped <= n_skip);
    if (rc == 0)
        FUZZ_CHECK(marked == n_mem && skipped == n_skip);
}

/* Whether the call reads rank j's send buffer, and writes into its receive buffer. */
static int reads_send(const coll_args_t *a, int j)
{
    size_t total = 0;

    for (int b = 0; b < a->size; b++)
        total += coll_args_block(a, b);
    if (a->coll == COLL_BROADCAST)
        return j == a->root;
    if (a->coll == COLL_ALLGATHER)
        return coll_args_block(a, j) != 0;
    return a->coll != COLL_REDUCE_SCATTER || total != 0;
}

static int writes_recv(const coll_args_t *a, int j)
{
    return a->coll == COLL_ALLREDUCE || a->coll == COLL_BROADCAST ||
           a->coll == COLL_ALLTOALL || (a->coll == COLL_REDUCE && j == a->root);
}

static void check_desc(const shm_node_t *node, const coll_args_t *a, uint64_t fp)
{
    int rc = shm_desc_check(node, a, fp), all_match = 1;

    for (int j = 0; j < node->n; j++) {
        const shm_desc_t *d = &node->ctrl[j]->desc;

        all_match &= d->fp == fp && (a->counts != NULL || d->count == a->count) &&
                     (!reads_send(a, j) || d->sendbuf != 0) &&
                     (!writes_recv(a, j) || d->recvbuf != 0);
    }
    FUZZ_CHECK(rc == 0 || rc == CHORUS_ERR_INVALID_ARG);
    FUZZ_CHECK((rc == 0) == all_match);
}

/* A layout that differs from a's in one block's length or place has another fingerprint. */
static void check_fingerprint(const coll_args_t *a, size_t *counts, size_t *displs, int k,
                              int which)
{
    uint64_t fp = shm_fingerprint(a, SHM_FLAT), other;
    size_t *field = which ? &displs[k] : &counts[k];

    FUZZ_CHECK(fp == shm_fingerprint(a, SHM_FLAT));
    FUZZ_CHECK(fp != shm_fingerprint(a, SHM_CMA));
    (*field)++;
    other = shm_fingerprint(a, SHM_FLAT);
    (*field)--;
    FUZZ_CHECK(other != fp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const coll_type_t colls[] = {COLL_ALLREDUCE, COLL_ALLGATHER, COLL_BROADCAST,
                                        COLL_REDUCE_SCATTER, COLL_REDUCE, COLL_ALLTOALL};
    shm_ctrl_t *ctrl;
    shm_ctrl_t *ptrs[MAX_RANKS];
    pid_t pids[MAX_RANKS];
    size_t counts[MAX_RANKS], displs[MAX_RANKS];
    shm_node_t node = {0};
    coll_args_t a = {0};
    uint64_t fp = fuzz_u64(data, size, 4), base = fuzz_u32(data, size, 12) & 0xffffff, step;
    int n = size > 0 ? 1 + data[0] % MAX_RANKS : 1;
    int vform = size > 20 && (data[20] & 1);

    ctrl = aligned_alloc(SHM_LINE, sizeof(shm_ctrl_t) * MAX_RANKS);
    FUZZ_CHECK(ctrl != NULL);
    memset(ctrl, 0, sizeof(shm_ctrl_t) * MAX_RANKS);
    node.n = n;
    node.me = size > 1 ? data[1] % n : 0;
    node.dead_peer = -1;
    node.ctrl = ptrs;
    node.pids = pids;
    a.coll = colls[(size > 2 ? data[2] & 0xf : 0) % (sizeof(colls) / sizeof(colls[0]))];
    if (vform)
        a.coll = a.coll == COLL_ALLGATHER ? COLL_ALLGATHER : COLL_REDUCE_SCATTER;
    a.root = size > 3 ? data[3] % n : 0;
    a.count = fuzz_u32(data, size, 16);
    a.op = (chorus_op_t)((size > 21 ? data[21] : 0) % CHORUS_OP_COUNT);
    a.rank = node.me;
    a.size = n;
    /* A call spans one to three steps after base. */
    step = base + 1 + (size > 2 ? (data[2] >> 4) % 3 : 0);

    for (int j = 0; j < n; j++) {
        size_t at = FUZZ_SHM_HEAD_BYTES + (size_t)j * FUZZ_SHM_PEER_BYTES;
        shm_desc_t *d = &ctrl[j].desc;

        ptrs[j] = &ctrl[j];
        pids[j] = 1;
        atomic_store(&ctrl[j].step, fuzz_u64(data, size, at));
        atomic_store(&ctrl[j].failed, (int32_t)fuzz_u32(data, size, at + 8));
        d->sendbuf = fuzz_u64(data, size, at + 12);
        d->recvbuf = fuzz_u64(data, size, at + 20);
        /* Small counts reach the matching case; the high bit keeps the rest reachable. */
        d->count = fuzz_u32(data, size, at + 28) & 0x80000000u ? fuzz_u64(data, size, at + 32)
                                                                : fuzz_u32(data, size, at + 28);
        d->fp = fuzz_u64(data, size, at + 40);
        atomic_store(&ctrl[j].stage_fp[j % 2], fuzz_u64(data, size, at + 48));
        atomic_store(&ctrl[j].stage_fp[(j + 1) % 2], fp);
        counts[j] = fuzz_u32(data, size, at + 56) % 4096;
        displs[j] = fuzz_u32(data, size, at + 60);
    }
    if (vform) {
        a.counts = counts;
        a.displs = displs;
    }

    check_reached(&node, base, step, shm_fp_tag(fp));
    check_stage(&node, 0, fp);
    check_stage(&node, 1, fp);
    check_desc(&node, &a, fp);
    if (vform)
        check_fingerprint(&a, counts, displs, a.root, data[3] >> 7);
    free(ctrl);
    return 0;
}
