/*
 * Requests of the non-blocking calls chorus serves. Each is an MPI
 * generalized request (MPI_Grequest_start), so the program holds a real
 * MPI_Request that every MPI function accepts; it is completed
 * (MPI_Grequest_complete) once its chorus request is done. The MPI_Wait and
 * MPI_Test families look at chorus's requests first and then let the MPI
 * library finish the call, so a program may mix them with its point-to-point
 * requests in one array. With no chorus request outstanding they go straight
 * to MPI. Also here: pmpi_progress, which chorus runs while a thread waits.
 */
#include "pmpi/pmpi.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

typedef struct entry {
    MPI_Request handle;
    chorus_request_t chorus;
    chorus_status_t status;     /* chorus's outcome, once done */
    int done;                   /* MPI_Grequest_complete was called */
    void *copy_to;              /* bytes to move once chorus is done (in-place reduce-scatter) */
    const void *copy_from;
    size_t copy_bytes;
    struct entry *next;
} entry_t;

#define BUCKETS 256

static entry_t *buckets[BUCKETS];
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int outstanding;  /* entries in the table */

static unsigned bucket_of(MPI_Request handle)
{
    uint64_t key = 0;

    memcpy(&key, &handle, sizeof(handle) < sizeof(key) ? sizeof(handle) : sizeof(key));
    key ^= key >> 29;
    key *= 0x9e3779b97f4a7c15ull;
    return (unsigned)(key >> 56) % BUCKETS;
}

/* table_lock held. */
static entry_t *lookup(MPI_Request handle)
{
    for (entry_t *e = buckets[bucket_of(handle)]; e != NULL; e = e->next) {
        if (e->handle == handle)
            return e;
    }
    return NULL;
}

static entry_t *find(MPI_Request handle)
{
    entry_t *e;

    if (handle == MPI_REQUEST_NULL)
        return NULL;
    pthread_mutex_lock(&table_lock);
    e = lookup(handle);
    pthread_mutex_unlock(&table_lock);
    return e;
}

/* ---- the generalized request's callbacks ---------------------------------- */

static int request_query(void *extra, MPI_Status *status)
{
    entry_t *e = extra;
    int rc = e->status == CHORUS_OK ? MPI_SUCCESS : MPI_ERR_OTHER;

    PMPI_Status_set_elements(status, MPI_BYTE, 0);
    PMPI_Status_set_cancelled(status, 0);
    status->MPI_SOURCE = MPI_UNDEFINED;
    status->MPI_TAG = MPI_UNDEFINED;
    status->MPI_ERROR = rc;
    return rc;
}

/* MPI frees the request once a wait or test has seen it complete. */
static int request_free(void *extra)
{
    entry_t *e = extra;
    entry_t **pp;

    pthread_mutex_lock(&table_lock);
    for (pp = &buckets[bucket_of(e->handle)]; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == e) {
            *pp = e->next;
            break;
        }
    }
    pthread_mutex_unlock(&table_lock);
    atomic_fetch_sub(&outstanding, 1);
    chorus_request_free(e->chorus);
    free(e);
    return MPI_SUCCESS;
}

/* A collective cannot be cancelled (MPI's rule for collectives); the call carries on. */
static int request_cancel(void *extra, int complete)
{
    (void)extra;
    (void)complete;
    return MPI_SUCCESS;
}

int pmpi_request_start(chorus_request_t creq, void *copy_to, const void *copy_from,
                       size_t copy_bytes, MPI_Request *request)
{
    entry_t *e = calloc(1, sizeof(*e));
    int rc;

    if (e == NULL) {
        /* The call still ends before the error returns: no chorus work on the buffers is left. */
        chorus_request_free(creq);
        chorus_error("no memory for the request of a non-blocking collective");
        *request = MPI_REQUEST_NULL;
        return MPI_ERR_NO_MEM;
    }
    e->chorus = creq;
    e->copy_to = copy_to;
    e->copy_from = copy_from;
    e->copy_bytes = copy_bytes;
    rc = PMPI_Grequest_start(request_query, request_free, request_cancel, e, &e->handle);
    if (rc != MPI_SUCCESS) {
        chorus_request_free(creq);
        free(e);
        return rc;
    }
    pthread_mutex_lock(&table_lock);
    e->next = buckets[bucket_of(e->handle)];
    buckets[bucket_of(e->handle)] = e;
    atomic_fetch_add(&outstanding, 1);
    pthread_mutex_unlock(&table_lock);
    *request = e->handle;
    return MPI_SUCCESS;
}

/*
 * Completes e's MPI request once its chorus request is done (wait: waits for
 * it, while MPI progresses); 1 when it is complete. Only the thread that
 * waits for or tests the request calls it (MPI lets no two threads complete
 * one request).
 */
static int entry_finish(entry_t *e, int wait)
{
    int done = 0;

    if (e->done)
        return 1;
    if (wait) {
        e->status = chorus_request_wait(e->chorus);
        done = 1;
    } else {
        e->status = chorus_request_test(e->chorus, &done);
    }
    if (!done)
        return 0;
    if (e->status == CHORUS_OK && e->copy_bytes > 0)
        memmove(e->copy_to, e->copy_from, e->copy_bytes);
    if (e->status != CHORUS_OK)
        chorus_error("a non-blocking collective failed: %s", chorus_status_string(e->status));
    e->done = 1;
    PMPI_Grequest_complete(e->handle);
    return 1;
}

/* Completes chorus's requests among reqs: those done, or (wait) all; how many are left. */
static int finish(int count, const MPI_Request reqs[], int wait)
{
    int pending = 0;

    for (int i = 0; i < count; i++) {
        entry_t *e = find(reqs[i]);

        if (e != NULL && !entry_finish(e, wait))
            pending++;
    }
    return pending;
}

void pmpi_progress(void)
{
    int flag;

    PMPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
}

/* ---- the MPI functions ---------------------------------------------------- */

/* The waits for all: chorus's requests first (MPI progresses meanwhile), then MPI's. */
int MPI_Wait(MPI_Request *request, MPI_Status *status)
{
    if (atomic_load(&outstanding) > 0)
        finish(1, request, 1);
    return PMPI_Wait(request, status);
}

int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[])
{
    if (atomic_load(&outstanding) > 0)
        finish(count, requests, 1);
    return PMPI_Waitall(count, requests, statuses);
}

/* The waits for any: each turn completes what is done, then asks MPI without blocking. */
int MPI_Waitany(int count, MPI_Request requests[], int *index, MPI_Status *status)
{
    int flag = 0, rc;

    if (atomic_load(&outstanding) == 0)
        return PMPI_Waitany(count, requests, index, status);
    for (;;) {
        finish(count, requests, 0);
        rc = PMPI_Testany(count, requests, index, &flag, status);
        if (rc != MPI_SUCCESS || flag)
            return rc;
        sched_yield();
    }
}

int MPI_Waitsome(int incount, MPI_Request requests[], int *outcount, int indices[],
                 MPI_Status statuses[])
{
    int rc;

    if (atomic_load(&outstanding) == 0)
        return PMPI_Waitsome(incount, requests, outcount, indices, statuses);
    for (;;) {
        finish(incount, requests, 0);
        rc = PMPI_Testsome(incount, requests, outcount, indices, statuses);
        if (rc != MPI_SUCCESS || *outcount != 0)
            return rc;
        sched_yield();
    }
}

int MPI_Test(MPI_Request *request, int *flag, MPI_Status *status)
{
    if (atomic_load(&outstanding) > 0)
        finish(1, request, 0);
    return PMPI_Test(request, flag, status);
}

int MPI_Testall(int count, MPI_Request requests[], int *flag, MPI_Status statuses[])
{
    if (atomic_load(&outstanding) > 0)
        finish(count, requests, 0);
    return PMPI_Testall(count, requests, flag, statuses);
}

int MPI_Testany(int count, MPI_Request requests[], int *index, int *flag, MPI_Status *status)
{
    if (atomic_load(&outstanding) > 0)
        finish(count, requests, 0);
    return PMPI_Testany(count, requests, index, flag, status);
}

int MPI_Testsome(int incount, MPI_Request requests[], int *outcount, int indices[],
                 MPI_Status statuses[])
{
    if (atomic_load(&outstanding) > 0)
        finish(incount, requests, 0);
    return PMPI_Testsome(incount, requests, outcount, indices, statuses);
}

int MPI_Request_get_status(MPI_Request request, int *flag, MPI_Status *status)
{
    if (atomic_load(&outstanding) > 0)
        finish(1, &request, 0);
    return PMPI_Request_get_status(request, flag, status);
}

/* MPI forbids freeing the request of a non-blocking collective (MPI 4.0, 6.12). */
int MPI_Request_free(MPI_Request *request)
{
    if (atomic_load(&outstanding) > 0 && find(*request) != NULL) {
        chorus_error("MPI_Request_free: the request of a non-blocking collective cannot be "
                     "freed; wait for it or test it");
        PMPI_Comm_call_errhandler(MPI_COMM_WORLD, MPI_ERR_REQUEST);
        return MPI_ERR_REQUEST;
    }
    return PMPI_Request_free(request);
}
