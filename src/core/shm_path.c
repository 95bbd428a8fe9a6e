/*
 * The node-local path of a communicator: its shared-memory node, set up
 * when every rank shares one node, and the calls it runs in the calling
 * thread. Such a call needs no hand-off to the progress thread; one that
 * waits longer than a moment is handed over to it, so that deadlines, stall
 * reports and aborts work for it as for every other call.
 */
#include <stdlib.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/stall.h"
#include "tuning/select.h"
#include "util/log.h"
#include "util/time.h"

/* How long a call waits in the calling thread before the progress thread takes it over. */
#define SHM_INLINE_HANDOFF_S 0.02
/* Longest single sleep of the calling thread, in microseconds. */
#define SHM_INLINE_SLEEP_US 1000

chorus_status_t chorus__shm_region_open(chorus_comm_t comm, shm_card_t *card)
{
    chorus_status_t status = chorus__config_read(&shm_config_table, &comm->shm_cfg);

    card->pid = (int32_t)getpid();
    card->fd = -1;
    if (status != CHORUS_OK || !comm->shm_cfg.enabled || comm->size == 1)
        return status;
    status = shm_region_create(&comm->shm_cfg, &comm->shm_region, card);
    /* A bad setting fails the communicator; a refused region only turns the path off. */
    return status == CHORUS_ERR_INVALID_ARG ? status : CHORUS_OK;
}

/* What every rank agrees on at creation: regions mapped, single copy, cores. */
#define SHM_AGREE 3

/*
 * Every rank agrees, over the network transport, whether every rank mapped
 * every region, whether single copy works, and on the fewest cores any rank
 * may run on, so that all build the same selection table.
 */
static chorus_status_t shm_agree(chorus_comm_t comm, const int32_t mine[SHM_AGREE],
                                 int32_t all[SHM_AGREE])
{
    coll_args_t a = {
        .coll = COLL_ALLREDUCE, .sendbuf = mine, .recvbuf = all, .count = SHM_AGREE,
        .dtype = CHORUS_INT32, .op = CHORUS_MIN, .rank = comm->rank, .size = comm->size,
        .chunk_bytes = comm->cfg.chunk_bytes,
    };
    chorus_request_t req;
    chorus_status_t status = chorus__request_post_alg(comm, &a, coll_alg_find(a.coll, "rd"),
                                                      &req);

    if (status == CHORUS_OK)
        status = chorus_request_free(req);
    /*
     * Every message of this call has been matched on this rank, and a peer's
     * late ones match its own receives of it: the user's first call is #0.
     */
    pthread_mutex_lock(&comm->lock);
    comm->next_seq = 0;
    chorus__stall_restart(comm);
    pthread_mutex_unlock(&comm->lock);
    return status;
}

chorus_status_t chorus__shm_setup(chorus_comm_t comm)
{
    int32_t mine[SHM_AGREE] = {0, 0, (int32_t)tune_usable_cores()}, all[SHM_AGREE] = {0, 0, 0};
    shm_node_t *node = NULL;
    chorus_status_t status;
    int cma = 0;

    if (comm->shm_cards == NULL) {
        chorus__shm_close(comm);
        return CHORUS_OK;
    }
    if (comm->shm_region != NULL) {
        status = shm_node_create(comm->shm_region, comm->shm_cards, comm->local_rank,
                                 comm->local_size, &comm->shm_cfg, &node, &cma);
        comm->shm_region = NULL;
        mine[0] = status == CHORUS_OK;
        mine[1] = mine[0] && cma;
    }
    free(comm->shm_cards);
    comm->shm_cards = NULL;
    status = shm_agree(comm, mine, all);
    if (status != CHORUS_OK || !all[0]) {
        if (status == CHORUS_OK && comm->rank == 0 && comm->shm_cfg.enabled)
            chorus_warn("rank 0: node-local shared memory is not available on every rank; "
                        "collectives of this communicator go over %s", comm->tl->name);
        shm_node_destroy(node);
        return status;
    }
    shm_node_seal(node, all[1], all[2]);
    comm->shm_agreed = (tune_node_t){.cma = all[1], .cores = all[2],
                                     .slot_bytes = comm->shm_cfg.slot_bytes};
    comm->shm = node;
    chorus_debug("rank %d: node-local collectives through shared memory (%d ranks, slots of "
                 "%zu bytes, single copy %s)", comm->rank, comm->local_size,
                 comm->shm_cfg.slot_bytes, all[1] ? "on" : "off");
    return CHORUS_OK;
}

void chorus__shm_close(chorus_comm_t comm)
{
    shm_node_destroy(comm->shm);
    comm->shm = NULL;
    shm_region_destroy(comm->shm_region);
    comm->shm_region = NULL;
    free(comm->shm_cards);
    comm->shm_cards = NULL;
}

/* The call has waited long enough: the progress thread finishes it. */
static chorus_status_t shm_hand_off(chorus_comm_t comm, const shm_op_t *op,
                                    const coll_alg_t *alg, uint64_t seq, double started)
{
    chorus_request_t req;
    chorus_status_t status = chorus__request_adopt_shm(comm, op, alg, seq, started, &req);

    if (status != CHORUS_OK) {
        shm_node_fail(comm->shm, status);
        chorus__comm_set_error(comm, status);
        chorus__progress_wake(comm);
        return status;
    }
    return chorus_request_free(req);
}

static chorus_status_t shm_inline_failed(chorus_comm_t comm, const shm_op_t *op, uint64_t seq,
                                         chorus_status_t status)
{
    chorus_error("rank %d: %s #%llu (%zu x %s) failed: %s", comm->rank,
                 coll_type_name(op->args.coll), (unsigned long long)seq, op->args.count,
                 chorus_dtype_name(op->args.dtype), chorus_status_string(status));
    chorus__comm_set_error(comm, status);
    chorus__progress_wake(comm);
    return status;
}

int chorus__shm_run_inline(chorus_comm_t comm, const coll_args_t *args, const coll_alg_t *alg,
                           chorus_status_t *status_p)
{
    shm_op_t op;
    uint64_t seq;
    double started;

    if (comm == NULL || comm->shm == NULL || comm->cfg.debug_check)
        return 0;
    if (alg == NULL || alg->shm == COLL_SHM_NONE)
        return 0;
    pthread_mutex_lock(&comm->lock);
    if (comm->outstanding > 0 || atomic_load(&comm->error) != 0) {
        pthread_mutex_unlock(&comm->lock);
        return 0;
    }
    seq = comm->next_seq++;
    shm_op_init(&op, comm->shm, args, alg->shm);
    pthread_mutex_unlock(&comm->lock);
    started = chorus__now();
    for (;;) {
        int rc = shm_op_progress(&op);

        if (rc == 1) {
            atomic_store(&comm->inline_done, seq + 1);
            *status_p = CHORUS_OK;
            return 1;
        }
        if (rc < 0) {
            *status_p = shm_inline_failed(comm, &op, seq, (chorus_status_t)rc);
            return 1;
        }
        if (atomic_load(&comm->aborted) || atomic_load(&comm->error)) {
            shm_node_fail(comm->shm, CHORUS_ERR_ABORTED);
            *status_p = atomic_load(&comm->error) ? (chorus_status_t)atomic_load(&comm->error)
                                                  : CHORUS_ERR_ABORTED;
            return 1;
        }
        if (chorus__now() - started > SHM_INLINE_HANDOFF_S) {
            *status_p = shm_hand_off(comm, &op, alg, seq, started);
            return 1;
        }
        shm_op_wait(&op, SHM_INLINE_SLEEP_US);
    }
}
