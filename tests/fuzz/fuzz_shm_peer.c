/*
 * Fuzz target: what a rank reads from its local peers' shared-memory regions,
 * which other processes write: their step words (step count and call
 * fingerprint), their failure words, and their single-copy call descriptors.
 * The input sets the node (ranks, this rank, the call) and every peer's words;
 * the target checks what shm_reached and shm_desc_check conclude from them.
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
static int step_ok(uint64_t v, uint64_t base, uint64_t step, uint32_t fp)
{
    uint64_t s = v & SHM_STEP_MASK;

    return s >= step && (s > step || (v >> SHM_STEP_BITS) == (fp & 0xffff));
}

static int step_foreign(uint64_t v, uint64_t base, uint64_t step, uint32_t fp)
{
    uint64_t s = v & SHM_STEP_MASK;

    return s > base && s <= step && (v >> SHM_STEP_BITS) != (fp & 0xffff);
}

static void check_reached(shm_node_t *node, uint64_t base, uint64_t step, uint32_t fp)
{
    int peer = -1, any_failed = 0, any_foreign = 0, all_ok = 1;
    int rc = shm_reached(node, step, base, fp, &peer);

    for (int j = 0; j < node->n; j++) {
        uint64_t v = atomic_load(&node->ctrl[j]->step);

        any_failed |= j != node->me && atomic_load(&node->ctrl[j]->failed) != 0;
        any_foreign |= step_foreign(v, base, step, fp);
        all_ok &= step_ok(v, base, step, fp);
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
            FUZZ_CHECK(step_ok(atomic_load(&node->ctrl[j]->step), base, step, fp));
    }
    if (!any_failed && all_ok)
        FUZZ_CHECK(rc == 1);
}

static void check_desc(const shm_node_t *node, const coll_args_t *a, uint32_t fp)
{
    int rc = shm_desc_check(node, a, fp), all_match = 1;

    for (int j = 0; j < node->n; j++) {
        const shm_desc_t *d = &node->ctrl[j]->desc;
        int reads_send = a->coll != COLL_BROADCAST || j == a->root;
        int writes_recv = a->coll == COLL_ALLREDUCE || a->coll == COLL_BROADCAST ||
                          (a->coll == COLL_REDUCE && j == a->root);

        all_match &= d->fp == fp && d->count == a->count && (!reads_send || d->sendbuf != 0) &&
                     (!writes_recv || d->recvbuf != 0);
    }
    FUZZ_CHECK(rc == 0 || rc == CHORUS_ERR_INVALID_ARG);
    FUZZ_CHECK((rc == 0) == all_match);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const coll_type_t colls[] = {COLL_ALLREDUCE, COLL_ALLGATHER, COLL_BROADCAST,
                                        COLL_REDUCE_SCATTER, COLL_REDUCE};
    shm_ctrl_t *ctrl;
    shm_ctrl_t *ptrs[MAX_RANKS];
    pid_t pids[MAX_RANKS];
    shm_node_t node = {0};
    coll_args_t a = {0};
    uint32_t fp = fuzz_u32(data, size, 4);
    uint64_t base = fuzz_u32(data, size, 8) & 0xffffff, step;
    int n = size > 0 ? 1 + data[0] % MAX_RANKS : 1;

    ctrl = aligned_alloc(SHM_LINE, sizeof(shm_ctrl_t) * MAX_RANKS);
    FUZZ_CHECK(ctrl != NULL);
    memset(ctrl, 0, sizeof(shm_ctrl_t) * MAX_RANKS);
    node.n = n;
    node.me = size > 1 ? data[1] % n : 0;
    node.dead_peer = -1;
    node.ctrl = ptrs;
    node.pids = pids;
    a.coll = colls[(size > 2 ? data[2] : 0) % (sizeof(colls) / sizeof(colls[0]))];
    a.root = size > 3 ? data[3] % n : 0;
    a.count = fuzz_u32(data, size, 12);
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
        d->fp = fuzz_u32(data, size, at + 40);
    }

    check_reached(&node, base, step, fp);
    check_desc(&node, &a, fp);
    free(ctrl);
    return 0;
}
