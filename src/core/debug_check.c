/* CHORUS_DEBUG_CHECK: compare every rank's call before it moves data (see debug_check.h). */
#include "core/debug_check.h"

#include <endian.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

#define CHECK_MAGIC 0x6368636b66703031ULL   /* "chckfp01" */

/* One rank's call, little-endian on the wire: 56 bytes. */
typedef struct {
    uint64_t magic;
    uint64_t coll;
    uint64_t seq;
    uint64_t count;
    uint64_t dtype;
    uint64_t op;
    uint64_t root;
} check_fp_t;

struct chorus__check {
    check_fp_t *all;            /* size entries; this rank's is all[rank] */
    coll_sched_t sched;         /* ring allgather of the entries, in place */
};

chorus_status_t chorus__check_create(chorus_comm_t comm, const coll_args_t *args,
                                     chorus__check_t **check_p)
{
    chorus__check_t *check = calloc(1, sizeof(*check));
    coll_args_t ag = {
        .coll = COLL_ALLGATHER, .count = sizeof(check_fp_t), .dtype = CHORUS_UINT8,
        .op = CHORUS_SUM, .rank = args->rank, .size = args->size,
        .chunk_bytes = args->chunk_bytes,
    };
    chorus_status_t status;

    if (check == NULL)
        return CHORUS_ERR_NO_MEMORY;
    check->all = calloc((size_t)args->size, sizeof(check_fp_t));
    if (check->all == NULL) {
        free(check);
        return CHORUS_ERR_NO_MEMORY;
    }
    ag.recvbuf = check->all;
    ag.sendbuf = &check->all[args->rank];
    coll_sched_init(&check->sched, CHORUS_UINT8, CHORUS_SUM, args->size);
    check->sched.pool = &comm->scratch_pool;
    status = coll_ring_allgather.build(&ag, &check->sched);
    if (status != CHORUS_OK) {
        chorus_error("rank %d: the debug check's exchange could not be scheduled: %s",
                     comm->rank, chorus_status_string(status));
        chorus__check_destroy(check);
        return status;
    }
    *check_p = check;
    return CHORUS_OK;
}

void chorus__check_seal(chorus__check_t *check, const coll_args_t *args, uint64_t seq)
{
    check_fp_t *fp = &check->all[args->rank];

    fp->magic = htole64(CHECK_MAGIC);
    fp->coll = htole64((uint64_t)args->coll);
    fp->seq = htole64(seq);
    fp->count = htole64((uint64_t)args->count);
    fp->dtype = htole64((uint64_t)args->dtype);
    fp->op = htole64((uint64_t)args->op);
    fp->root = htole64((uint64_t)(int64_t)args->root);
}

void chorus__check_destroy(chorus__check_t *check)
{
    if (check == NULL)
        return;
    coll_sched_finalize(&check->sched);
    free(check->all);
    free(check);
}

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
    if (n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, ")");
}

/* Every rank compares the same table the same way, so all reach one verdict. */
static chorus_status_t check_compare(chorus_comm_t comm, const chorus__check_t *check,
                                     uint64_t seq)
{
    char first[160], other[160];

    for (int r = 1; r < comm->size; r++) {
        if (memcmp(&check->all[0], &check->all[r], sizeof(check_fp_t)) == 0)
            continue;
        check_describe(&check->all[0], first, sizeof(first));
        check_describe(&check->all[r], other, sizeof(other));
        chorus_error("rank %d: call #%llu fails on every rank (CHORUS_DEBUG_CHECK): rank 0 "
                     "called %s but rank %d called %s; no data was moved", comm->rank,
                     (unsigned long long)seq, first, r, other);
        return CHORUS_ERR_INVALID_ARG;
    }
    return CHORUS_OK;
}

int chorus__check_progress(chorus_comm_t comm, chorus_request_t req, chorus_status_t *verdict_p)
{
    chorus__check_t *check = req->check;
    int rc = coll_sched_progress(&check->sched, comm->tl, comm->tl_ctx,
                                 CHORUS_TAG_CHECK | chorus__tag_base(req->seq));

    if (rc < 0) {
        req->sched.failed_peer = check->sched.failed_peer;
        return rc;
    }
    if (rc == 0)
        return 0;
    *verdict_p = check_compare(comm, check, req->seq);
    return 1;
}
