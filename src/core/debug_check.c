/* CHORUS_DEBUG_CHECK: compare every rank's call before it moves data (see debug_check.h). */
#include "core/debug_check.h"

#include <endian.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ctrl.h"
#include "util/log.h"

#define CHECK_MAGIC 0x6368636b66703031ULL   /* "chckfp01" */

/* One rank's call, little-endian on the wire: 64 bytes. */
typedef struct {
    uint64_t magic;
    uint64_t coll;
    uint64_t seq;
    uint64_t count;
    uint64_t dtype;
    uint64_t op;
    uint64_t root;
    uint64_t device;            /* 1: the call runs on the devices (a declared device call) */
} check_fp_t;

typedef struct {
    chorus__task_t head;
    int rank;
    int size;
    uint64_t seq;
    check_fp_t *all;            /* size entries; this rank's is all[rank] */
    coll_sched_t *sched;        /* ring allgather of the entries, in place */
} check_t;

static const char *name_or(const char *name, const char *fallback)
{
    return name != NULL ? name : fallback;
}

/* "allreduce #3 (count 1024, float32, op sum)"; the op and root only where they matter. */
static void check_describe(const check_fp_t *fp, char *buf, size_t len)
{
    coll_type_t coll = (coll_type_t)le64toh(fp->coll);
    int n;

    if (le64toh(fp->magic) != CHECK_MAGIC) {
        snprintf(buf, len, "an unreadable fingerprint");
        return;
    }
    n = snprintf(buf, len, "%s #%llu (count %llu, %s", name_or(coll_type_name(coll), "unknown"),
                 (unsigned long long)le64toh(fp->seq), (unsigned long long)le64toh(fp->count),
                 name_or(chorus_dtype_name((chorus_dtype_t)le64toh(fp->dtype)), "unknown dtype"));
    if (n > 0 && (size_t)n < len && (coll == COLL_ALLREDUCE || coll == COLL_REDUCE ||
                                     coll == COLL_REDUCE_SCATTER))
        n += snprintf(buf + n, len - (size_t)n, ", op %s",
                      name_or(chorus_op_name((chorus_op_t)le64toh(fp->op)), "unknown"));
    if (n > 0 && (size_t)n < len && (coll == COLL_BROADCAST || coll == COLL_REDUCE))
        n += snprintf(buf + n, len - (size_t)n, ", root %lld",
                      (long long)(int64_t)le64toh(fp->root));
    if (n > 0 && (size_t)n < len && le64toh(fp->device) != 0)
        n += snprintf(buf + n, len - (size_t)n, ", on the devices");
    if (n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, ")");
}

/* Every rank compares the same table the same way, so all reach one verdict. */
static chorus_status_t check_compare(const check_t *check)
{
    char first[160], other[160];

    for (int r = 1; r < check->size; r++) {
        if (memcmp(&check->all[0], &check->all[r], sizeof(check_fp_t)) == 0)
            continue;
        check_describe(&check->all[0], first, sizeof(first));
        check_describe(&check->all[r], other, sizeof(other));
        chorus_error("rank %d: call #%llu fails on every rank (CHORUS_DEBUG_CHECK): rank 0 "
                     "called %s but rank %d called %s; no data was moved", check->rank,
                     (unsigned long long)check->seq, first, r, other);
        return CHORUS_ERR_INVALID_ARG;
    }
    return CHORUS_OK;
}

static check_t *check_of(chorus__task_t *task)
{
    return (check_t *)task;
}

static chorus_status_t check_post(chorus__task_t *task)
{
    return chorus__task_post(&check_of(task)->sched->head);
}

static int check_progress(chorus__task_t *task)
{
    check_t *check = check_of(task);
    int rc = chorus__task_progress(&check->sched->head);

    if (rc < 0)
        task->failed_peer = check->sched->failed_peer;
    if (rc != 1)
        return rc;
    task->status = check_compare(check);
    return 1;
}

static void check_finalize(chorus__task_t *task)
{
    check_t *check = check_of(task);

    chorus__task_finalize(&check->sched->head);
    free(check->all);
    free(check);
}

static const chorus__task_ops_t check_ops = {
    .name = "debug check",
    .post = check_post,
    .progress = check_progress,
    .finalize = check_finalize,
};

/* This rank's fingerprint of the call. */
static void check_seal(check_fp_t *fp, const coll_args_t *args, uint64_t seq)
{
    fp->magic = htole64(CHECK_MAGIC);
    fp->coll = htole64((uint64_t)args->coll);
    fp->seq = htole64(seq);
    fp->count = htole64((uint64_t)args->count);
    fp->dtype = htole64((uint64_t)args->dtype);
    fp->op = htole64((uint64_t)args->op);
    fp->root = htole64((uint64_t)(int64_t)args->root);
    fp->device = htole64(args->mem == COLL_MEM_CUDA ? 1 : 0);
}

chorus_status_t chorus__check_create(chorus_comm_t comm, const coll_args_t *args, uint64_t seq,
                                     chorus__task_t **task_p)
{
    check_t *check = calloc(1, sizeof(*check));
    coll_args_t ag = {
        .coll = COLL_ALLGATHER, .count = sizeof(check_fp_t), .dtype = CHORUS_UINT8,
        .op = CHORUS_SUM, .rank = args->rank, .size = args->size,
        .chunk_bytes = args->chunk_bytes,
    };
    chorus_status_t status = CHORUS_ERR_NO_MEMORY;

    if (check == NULL)
        return status;
    chorus__task_init(&check->head, &check_ops, 0);
    check->rank = args->rank;
    check->size = args->size;
    check->seq = seq;
    check->all = calloc((size_t)args->size, sizeof(check_fp_t));
    if (check->all == NULL ||
        coll_sched_create(&comm->ctx->scratch_pool, CHORUS_UINT8, CHORUS_SUM, args->size,
                          &check->sched) != CHORUS_OK)
        goto err;
    check_seal(&check->all[args->rank], args, seq);
    ag.recvbuf = check->all;
    ag.sendbuf = &check->all[args->rank];
    status = coll_ring_allgather.build(&ag, &comm->env, check->sched);
    if (status != CHORUS_OK) {
        chorus_error("rank %d: the debug check's exchange could not be scheduled: %s",
                     comm->rank, chorus_status_string(status));
        goto err;
    }
    status = coll_sched_bind(check->sched, &comm->port.port,
                             CHORUS__TAG_HIDDEN | chorus__tag_base(seq));
    if (status != CHORUS_OK)
        goto err;
    *task_p = &check->head;
    return CHORUS_OK;

err:
    if (check->sched != NULL)
        coll_sched_finalize(check->sched);
    free(check->all);
    free(check);
    return status;
}
