/*
 * Failure paths: a rank killed mid-allreduce, a silent peer, abort from
 * another thread, bad arguments. Each must end in an error, never a hang.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define KILL_COUNT (4u << 20)   /* 16 MiB of float32: an allreduce that takes a while */
#define FAULT_TIMEOUT_S 5.0

/* Exit codes of the rank functions: 0 = saw the expected outcome. */
enum { RC_OK = 0, RC_UNEXPECTED_OK = 10, RC_WRONG_STATUS = 11, RC_NO_MEMORY = 12 };

static int allreduce_until_error(chorus_comm_t comm, int rank, int size, void *arg)
{
    float *buf = malloc(KILL_COUNT * sizeof(float));
    chorus_status_t status = CHORUS_OK;

    (void)rank; (void)size; (void)arg;
    if (buf == NULL)
        return RC_NO_MEMORY;
    for (size_t i = 0; i < KILL_COUNT; i++)
        buf[i] = 1.0f;
    /* Bounded: the killed rank makes a call fail long before the loop ends. */
    for (int iter = 0; iter < 2000 && status == CHORUS_OK; iter++)
        status = chorus_allreduce(buf, buf, KILL_COUNT, CHORUS_FLOAT32, CHORUS_MAX, comm, NULL);
    free(buf);
    if (status == CHORUS_OK)
        return RC_UNEXPECTED_OK;
    if (status != CHORUS_ERR_PEER_FAILED && status != CHORUS_ERR_TIMEOUT &&
        status != CHORUS_ERR_ABORTED)
        return RC_WRONG_STATUS;
    /* The fault is also recorded on the communicator. */
    return chorus_comm_get_error(comm) == CHORUS_OK ? RC_WRONG_STATUS : RC_OK;
}

Test(faults, killed_rank_survivors_return_error, .timeout = 120)
{
    harness_opts_t opts = {.nranks = 4, .timeout_s = FAULT_TIMEOUT_S, .deadline_s = 60,
                           .kill_rank = 1, .kill_after_s = 1.5};
    int status[4];
    double elapsed[4];

    cr_assert_eq(harness_run(&opts, allreduce_until_error, NULL, status, elapsed), 0);
    cr_assert_eq(status[1], 128 + 9, "rank 1 was not killed (%d)", status[1]);
    for (int r = 0; r < 4; r++) {
        if (r == 1)
            continue;
        cr_expect_eq(status[r], RC_OK, "survivor %d exited with %d", r, status[r]);
        cr_expect_lt(elapsed[r], opts.kill_after_s + FAULT_TIMEOUT_S + 5.0,
                     "survivor %d took %.1f s", r, elapsed[r]);
    }
}

/* Rank 0 calls an allreduce that rank 1 never joins: a timeout, not a hang. */
static int silent_peer(chorus_comm_t comm, int rank, int size, void *arg)
{
    float x = 1.0f;
    chorus_status_t status;

    (void)size; (void)arg;
    if (rank == 1) {
        usleep((useconds_t)((FAULT_TIMEOUT_S + 2.0) * 1e6));
        return RC_OK;
    }
    status = chorus_allreduce(&x, &x, 1, CHORUS_FLOAT32, CHORUS_SUM, comm, NULL);
    return status == CHORUS_ERR_TIMEOUT ? RC_OK : RC_WRONG_STATUS;
}

Test(faults, silent_peer_times_out, .timeout = 60)
{
    harness_opts_t opts = {.nranks = 2, .timeout_s = 2.0, .deadline_s = 30, .kill_rank = -1};
    int status[2];
    double elapsed[2];

    opts.timeout_s = 2.0;
    cr_assert_eq(harness_run(&opts, silent_peer, NULL, status, elapsed), 0,
                 "rank 0 exited with %d", status[0]);
    cr_expect_lt(elapsed[0], 2.0 + 3.0, "rank 0 took %.1f s to time out", elapsed[0]);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *abort_later(void *comm)
{
    usleep(300 * 1000);
    chorus_comm_abort(comm);
    return NULL;
}

/* Abort from another thread makes a blocked call return within a second. */
static int abort_from_thread(chorus_comm_t comm, int rank, int size, void *arg)
{
    float x = 1.0f;
    pthread_t thread;
    chorus_status_t status;
    double start;

    (void)size; (void)arg;
    if (rank == 1) {
        usleep(3 * 1000 * 1000);
        return RC_OK;
    }
    pthread_create(&thread, NULL, abort_later, comm);
    start = now_s();
    status = chorus_allreduce(&x, &x, 1, CHORUS_FLOAT32, CHORUS_SUM, comm, NULL);
    pthread_join(thread, NULL);
    if (status != CHORUS_ERR_ABORTED || now_s() - start > 1.3)
        return RC_WRONG_STATUS;
    /* Later calls fail at once with the same status. */
    status = chorus_allreduce(&x, &x, 1, CHORUS_FLOAT32, CHORUS_SUM, comm, NULL);
    return status == CHORUS_ERR_ABORTED ? RC_OK : RC_WRONG_STATUS;
}

Test(faults, abort_from_another_thread, .timeout = 60)
{
    harness_opts_t opts = {.nranks = 2, .timeout_s = 30, .deadline_s = 30, .kill_rank = -1};
    int status[2];

    cr_assert_eq(harness_run(&opts, abort_from_thread, NULL, status, NULL), 0,
                 "rank 0 exited with %d", status[0]);
}

/* Non-blocking calls: post two, test until done, wait. */
static int nonblocking(chorus_comm_t comm, int rank, int size, void *arg)
{
    int32_t a[5], b[3];
    chorus_request_t ra, rb;
    int done = 0;

    (void)arg;
    for (int i = 0; i < 5; i++)
        a[i] = rank + i;
    for (int i = 0; i < 3; i++)
        b[i] = rank;
    if (chorus_iallreduce(a, a, 5, CHORUS_INT32, CHORUS_SUM, comm, NULL, &ra) != CHORUS_OK ||
        chorus_ibroadcast(b, b, 3, CHORUS_INT32, size - 1, comm, NULL, &rb) != CHORUS_OK)
        return RC_WRONG_STATUS;
    for (int spins = 0; !done && spins < 100000; spins++) {
        if (chorus_request_test(ra, &done) != CHORUS_OK)
            return RC_WRONG_STATUS;
        if (!done)
            usleep(100);
    }
    if (!done || chorus_request_free(ra) != CHORUS_OK || chorus_request_wait(rb) != CHORUS_OK ||
        chorus_request_free(rb) != CHORUS_OK)
        return RC_WRONG_STATUS;
    for (int i = 0; i < 5; i++)
        if (a[i] != size * (size - 1) / 2 + size * i)
            return RC_WRONG_STATUS;
    for (int i = 0; i < 3; i++)
        if (b[i] != size - 1)
            return RC_WRONG_STATUS;
    return RC_OK;
}

Test(requests, nonblocking_test_and_wait, .timeout = 60)
{
    harness_opts_t opts = {.nranks = 3, .timeout_s = 20, .deadline_s = 40, .kill_rank = -1};
    int status[3];

    cr_assert_eq(harness_run(&opts, nonblocking, NULL, status, NULL), 0);
}

/* Bad arguments: CHORUS_ERR_INVALID_ARG, and the communicator stays usable. */
static int bad_arguments(chorus_comm_t comm, int rank, int size, void *arg)
{
    float x[4] = {1, 2, 3, 4};
    chorus_opts_t opts = CHORUS_OPTS_INIT;
    chorus_request_t req;
    int bad = 0;

    (void)rank; (void)arg;
    bad += chorus_allreduce(NULL, x, 4, CHORUS_FLOAT32, CHORUS_SUM, comm, NULL) !=
           CHORUS_ERR_INVALID_ARG;
    bad += chorus_allreduce(x, x, 4, (chorus_dtype_t)99, CHORUS_SUM, comm, NULL) !=
           CHORUS_ERR_INVALID_ARG;
    bad += chorus_allreduce(x, x, 4, CHORUS_FLOAT32, (chorus_op_t)-1, comm, NULL) !=
           CHORUS_ERR_INVALID_ARG;
    bad += chorus_broadcast(x, x, 4, CHORUS_FLOAT32, size, comm, NULL) != CHORUS_ERR_INVALID_ARG;
    bad += chorus_reduce(x, x, 4, CHORUS_FLOAT32, CHORUS_SUM, -1, comm, NULL) !=
           CHORUS_ERR_INVALID_ARG;
    bad += chorus_allreduce(x, x + 1, 2, CHORUS_FLOAT32, CHORUS_SUM, comm, NULL) !=
           CHORUS_ERR_INVALID_ARG;
    bad += chorus_allreduce(x, x, 4, CHORUS_FLOAT32, CHORUS_SUM, NULL, NULL) !=
           CHORUS_ERR_INVALID_ARG;
    bad += chorus_iallreduce(x, x, 4, CHORUS_FLOAT32, CHORUS_SUM, comm, NULL, NULL) !=
           CHORUS_ERR_INVALID_ARG;
    opts.flags = 1;
    bad += chorus_allreduce(x, x, 4, CHORUS_FLOAT32, CHORUS_SUM, comm, &opts) !=
           CHORUS_ERR_INVALID_ARG;
    opts.flags = 0;
    opts.struct_size = 0;
    bad += chorus_allreduce(x, x, 4, CHORUS_FLOAT32, CHORUS_SUM, comm, &opts) !=
           CHORUS_ERR_INVALID_ARG;
    bad += chorus_request_wait(NULL) != CHORUS_ERR_INVALID_ARG;
    bad += chorus_comm_get_error(NULL) != CHORUS_ERR_INVALID_ARG;
    /* Count 0 is valid, NULL buffers included. */
    bad += chorus_allreduce(NULL, NULL, 0, CHORUS_FLOAT32, CHORUS_SUM, comm, NULL) != CHORUS_OK;
    /* Still usable. */
    opts.struct_size = sizeof(opts);
    bad += chorus_iallreduce(x, x, 4, CHORUS_FLOAT32, CHORUS_SUM, comm, &opts, &req) != CHORUS_OK;
    bad += chorus_request_free(req) != CHORUS_OK;
    bad += x[3] != 4.0f * (float)size;
    return bad ? RC_WRONG_STATUS : RC_OK;
}

Test(api, bad_arguments_are_refused, .timeout = 60)
{
    harness_opts_t opts = {.nranks = 2, .timeout_s = 20, .deadline_s = 40, .kill_rank = -1};
    int status[2];

    cr_assert_eq(harness_run(&opts, bad_arguments, NULL, status, NULL), 0,
                 "ranks exited with %d %d", status[0], status[1]);
}

Test(api, create_refuses_bad_arguments)
{
    chorus_comm_t comm = NULL;

    cr_expect_eq(chorus_comm_create(2, 2, "127.0.0.1:1", "s", 1, &comm), CHORUS_ERR_INVALID_ARG);
    cr_expect_eq(chorus_comm_create(0, 0, "127.0.0.1:1", "s", 1, &comm), CHORUS_ERR_INVALID_ARG);
    cr_expect_eq(chorus_comm_create(0, 1, "nocolon", "s", 1, &comm), CHORUS_ERR_INVALID_ARG);
    cr_expect_eq(chorus_comm_create(0, 1, NULL, "s", 1, &comm), CHORUS_ERR_INVALID_ARG);
    cr_expect_eq(chorus_comm_create(0, 1, "127.0.0.1:1", "s", 1, NULL), CHORUS_ERR_INVALID_ARG);
    cr_expect_null(comm);
    cr_expect_str_eq(chorus_status_string(CHORUS_ERR_TIMEOUT), "timed out");
    cr_expect_eq(chorus_dtype_size(CHORUS_BFLOAT16), 2);
}
