/*
 * Launch under a PMIx server (Open MPI's mpirun, srun --mpi=pmix, prterun):
 * rank and size come from PMIx, and rank 0's unique id (the rendezvous
 * address and a fresh job secret) reaches the other ranks through the
 * server's key-value store, which only the processes of the job can read.
 */
#include "config.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <pmix.h>

#include "core/comm_create.h"
#include "util/log.h"

/* The key rank 0 publishes its unique id under. */
#define LAUNCH_PMIX_KEY "chorus.unique_id"

static chorus_status_t pmix_fail(const char *what, pmix_status_t rc)
{
    chorus_error("PMIx: %s failed: %s", what, PMIx_Error_string(rc));
    return CHORUS_ERR_SYSTEM;
}

/* The job's size, as the server tells it. */
static chorus_status_t pmix_job_size(const pmix_proc_t *me, int *size_p)
{
    pmix_proc_t job;
    pmix_value_t *val = NULL;
    pmix_status_t rc;
    chorus_status_t status = CHORUS_OK;

    PMIX_LOAD_PROCID(&job, me->nspace, PMIX_RANK_WILDCARD);
    rc = PMIx_Get(&job, PMIX_JOB_SIZE, NULL, 0, &val);
    if (rc != PMIX_SUCCESS)
        return pmix_fail("the job size (PMIX_JOB_SIZE)", rc);
    if (val->type != PMIX_UINT32 || val->data.uint32 == 0 || val->data.uint32 > INT32_MAX) {
        chorus_error("PMIx: the job size is not a positive 32-bit count");
        status = CHORUS_ERR_PROTOCOL;
    } else {
        *size_p = (int)val->data.uint32;
    }
    PMIX_VALUE_RELEASE(val);
    return status;
}

/*
 * Rank 0 publishes id (all zeros when it could not make one); after the
 * fence, which every rank reaches whatever happened before, every rank
 * reads it. The fence waits at most timeout_s.
 */
static chorus_status_t pmix_share_id(const pmix_proc_t *me, double timeout_s,
                                     chorus_unique_id_t *id)
{
    pmix_proc_t job, zero;
    pmix_value_t value, *got = NULL;
    pmix_info_t info[2];
    bool yes = true;
    int timeout = timeout_s < 1 ? 1 : timeout_s > INT32_MAX ? INT32_MAX : (int)timeout_s;
    pmix_status_t rc;
    chorus_status_t status = CHORUS_OK;

    if (me->rank == 0) {
        PMIX_VALUE_CONSTRUCT(&value);
        value.type = PMIX_BYTE_OBJECT;
        value.data.bo.bytes = id->bytes;
        value.data.bo.size = sizeof(id->bytes);
        /* PMIx_Put copies the value: value itself stays ours. */
        if ((rc = PMIx_Put(PMIX_GLOBAL, LAUNCH_PMIX_KEY, &value)) != PMIX_SUCCESS)
            status = pmix_fail("publishing the rendezvous (PMIx_Put)", rc);
        else if ((rc = PMIx_Commit()) != PMIX_SUCCESS)
            status = pmix_fail("PMIx_Commit", rc);
    }
    PMIX_LOAD_PROCID(&job, me->nspace, PMIX_RANK_WILDCARD);
    PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &yes, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &timeout, PMIX_INT);
    rc = PMIx_Fence(&job, 1, info, 2);
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
    if (rc != PMIX_SUCCESS)
        return pmix_fail("the fence after rank 0 published the rendezvous", rc);
    if (me->rank == 0 || status != CHORUS_OK)
        return status;
    PMIX_LOAD_PROCID(&zero, me->nspace, 0);
    if ((rc = PMIx_Get(&zero, LAUNCH_PMIX_KEY, NULL, 0, &got)) != PMIX_SUCCESS)
        return pmix_fail("reading rank 0's rendezvous (PMIx_Get)", rc);
    if (got->type != PMIX_BYTE_OBJECT || got->data.bo.size != sizeof(id->bytes)) {
        chorus_error("PMIx: rank 0's rendezvous is not a chorus unique id");
        status = CHORUS_ERR_PROTOCOL;
    } else if (got->data.bo.bytes[0] == '\0') {
        chorus_error("PMIx: rank 0 could not start the rendezvous (its log says why)");
        status = CHORUS_ERR_PEER_FAILED;
    } else {
        memcpy(id->bytes, got->data.bo.bytes, sizeof(id->bytes));
    }
    PMIX_VALUE_RELEASE(got);
    return status;
}

chorus_status_t chorus__launch_pmix(double timeout_s, chorus_comm_t *comm_p)
{
    pmix_proc_t me;
    pmix_status_t rc;
    chorus_unique_id_t id;
    chorus_status_t status, shared;
    int size = 0;

    rc = PMIx_Init(&me, NULL, 0);
    if (rc != PMIX_SUCCESS)
        return pmix_fail("connecting to the launcher's PMIx server (PMIx_Init)", rc);
    memset(&id, 0, sizeof(id));
    status = pmix_job_size(&me, &size);
    if (status == CHORUS_OK && me.rank > (pmix_rank_t)INT32_MAX) {
        chorus_error("PMIx: rank %u is not a rank chorus can have", (unsigned)me.rank);
        status = CHORUS_ERR_PROTOCOL;
    }
    if (status == CHORUS_OK && me.rank == 0 && (status = chorus_unique_id_create(&id)) != CHORUS_OK)
        memset(&id, 0, sizeof(id));
    /* Every rank reaches the fence, so that none waits there for a rank that failed above. */
    shared = pmix_share_id(&me, timeout_s, &id);
    if (status == CHORUS_OK)
        status = shared;
    chorus_debug("PMIx: rank %u of %d in namespace %s", (unsigned)me.rank, size, me.nspace);
    if (status == CHORUS_OK)
        status = chorus_comm_create_from_id((int)me.rank, size, &id, timeout_s, comm_p);
    memset(&id, 0, sizeof(id));     /* it holds the job secret */
    /* Reference-counted by the PMIx client: a program that uses PMIx itself keeps it. */
    rc = PMIx_Finalize(NULL, 0);
    if (rc != PMIX_SUCCESS)
        chorus_debug("PMIx: PMIx_Finalize: %s", PMIx_Error_string(rc));
    return status;
}
