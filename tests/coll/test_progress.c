/*
 * Blocking calls over the network run the progress loop in the calling
 * thread while they wait (CHORUS_PROGRESS_CALLER, request.c and
 * progress.c): the progress thread ("chorus-progress") sleeps through a run
 * of them, and runs them again when the variable is 0. A driven call ends
 * as any call does on an abort from another thread and at its deadline.
 * (Driven calls beside non-blocking calls of another thread of the rank:
 * examples/two_threads, also under ThreadSanitizer in CI; a rank idle after
 * driven calls still answers its peers' stall queries: coll/test_diag.)
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

enum { RC_OK = 0, RC_FAILED = 20, RC_WRONG = 21, RC_SWITCHES = 22, RC_NO_THREAD = 23,
       RC_STATUS = 24, RC_LATE = 25 };

#define CALLS 400           /* blocking calls whose switches are counted */
#define ELEMS 7             /* int32 elements of each counted call */

/* The input of rank r at element i in call k. */
static int32_t input(int r, size_t i, int k)
{
    return (int32_t)(r * 1000 + (int)(i % 89) + 3 * k);
}

/* 0 when recv[0..n) is the sum over size ranks of input(., i, k). */
static int check_sum(const int32_t *recv, size_t n, int size, int k)
{
    for (size_t i = 0; i < n; i++) {
        int32_t want = 0;

        for (int r = 0; r < size; r++)
            want += input(r, i, k);
        if (recv[i] != want)
            return 1;
    }
    return 0;
}

/* One blocking allreduce of n elements, call k; RC_OK when exact. */
static int allreduce_k(chorus_comm_t comm, int rank, int size, int32_t *send, int32_t *recv,
                       size_t n, int k)
{
    chorus_status_t st;

    for (size_t i = 0; i < n; i++)
        send[i] = input(rank, i, k);
    st = chorus_allreduce(send, recv, n, CHORUS_INT32, CHORUS_SUM, comm, NULL);
    if (st != CHORUS_OK) {
        fprintf(stderr, "rank %d: allreduce %d of %zu failed: %s\n", rank, k, n,
                chorus_status_string(st));
        return RC_FAILED;
    }
    if (check_sum(recv, n, size, k) != 0) {
        fprintf(stderr, "rank %d: allreduce %d of %zu is wrong\n", rank, k, n);
        return RC_WRONG;
    }
    return RC_OK;
}

/* Context switches so far of this process's thread named chorus-progress; -1 when none is. */
static long progress_switches(void)
{
    DIR *dir = opendir("/proc/self/task");
    struct dirent *e;
    long total = -1;

    while (dir != NULL && (e = readdir(dir)) != NULL) {
        char path[300], line[128];
        FILE *f;

        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
        if ((f = fopen(path, "r")) == NULL)
            continue;
        line[0] = '\0';
        if (fgets(line, sizeof(line), f) == NULL || strcmp(line, "chorus-progress\n") != 0) {
            fclose(f);
            continue;
        }
        fclose(f);
        snprintf(path, sizeof(path), "/proc/self/task/%s/status", e->d_name);
        if ((f = fopen(path, "r")) == NULL)
            continue;
        total = 0;
        while (fgets(line, sizeof(line), f) != NULL) {
            long v;

            if (sscanf(line, "voluntary_ctxt_switches: %ld", &v) == 1 ||
                sscanf(line, "nonvoluntary_ctxt_switches: %ld", &v) == 1)
                total += v;
        }
        fclose(f);
    }
    if (dir != NULL)
        closedir(dir);
    return total;
}

typedef struct {
    int driven;     /* 1: at most CALLS / 4 switches of the progress thread; 0: at least CALLS / 2 */
} switches_arg_t;

/* CALLS small blocking allreduces; the progress thread's switches meanwhile as arg says. */
static int rank_switches(chorus_comm_t comm, int rank, int size, void *arg)
{
    const switches_arg_t *a = arg;
    int32_t send[ELEMS], recv[ELEMS];
    long before, after;
    double start, took;
    int rc = RC_OK;

    for (int k = 0; k < 20 && rc == RC_OK; k++)     /* connections made, tasks built */
        rc = allreduce_k(comm, rank, size, send, recv, ELEMS, k);
    before = progress_switches();
    start = harness_now();
    for (int k = 0; k < CALLS && rc == RC_OK; k++)
        rc = allreduce_k(comm, rank, size, send, recv, ELEMS, k);
    after = progress_switches();
    took = harness_now() - start;
    if (rc != RC_OK)
        return rc;
    if (before < 0 || after < 0) {
        fprintf(stderr, "rank %d: no thread named chorus-progress\n", rank);
        return RC_NO_THREAD;
    }
    fprintf(stderr, "rank %d: the progress thread switched %ld times in %d blocking calls of "
            "%.1f us each (CHORUS_PROGRESS_CALLER=%d)\n", rank, after - before, CALLS,
            took / CALLS * 1e6, a->driven);
    if (a->driven ? after - before > CALLS / 4 : after - before < CALLS / 2)
        return RC_SWITCHES;
    return RC_OK;
}

/* fn on nranks ranks over TCP alone (CHORUS_SHM=0), each with a timeout of timeout_s. */
static void run_tcp(int nranks, double timeout_s, harness_rank_fn fn, void *arg)
{
    harness_opts_t opts = {.nranks = nranks, .timeout_s = timeout_s, .deadline_s = 90,
                           .kill_rank = -1};
    int status[3] = {0};

    setenv("CHORUS_SHM", "0", 1);
    cr_expect_eq(harness_run(&opts, fn, arg, status, NULL), 0, "ranks exited %d %d %d",
                 status[0], status[1], status[2]);
    unsetenv("CHORUS_SHM");
}

static void run_switches(int driven)
{
    switches_arg_t arg = {driven};

    setenv("CHORUS_PROGRESS_CALLER", driven ? "1" : "0", 1);
    run_tcp(3, 30, rank_switches, &arg);
    unsetenv("CHORUS_PROGRESS_CALLER");
}

Test(progress, blocking_calls_leave_the_progress_thread_asleep, .timeout = 120)
{
    run_switches(1);
}

Test(progress, the_progress_thread_runs_them_when_told, .timeout = 120)
{
    run_switches(0);
}

/* Calls chorus_comm_abort on its communicator half a second after it starts. */
static void *abort_main(void *arg)
{
    usleep(500000);
    chorus_comm_abort(arg);
    return NULL;
}

typedef struct {
    int abort;      /* 1: rank 0's call is aborted by another thread; 0: it reaches its deadline */
} alone_arg_t;

/*
 * Rank 0 makes a blocking call that rank 1 never makes: it must end with
 * CHORUS_ERR_ABORTED soon after another thread aborts, or with
 * CHORUS_ERR_TIMEOUT at its deadline (2 s) and not much later.
 */
static int rank_alone(chorus_comm_t comm, int rank, int size, void *arg)
{
    const alone_arg_t *a = arg;
    int32_t send[ELEMS] = {0}, recv[ELEMS];
    chorus_status_t want = a->abort ? CHORUS_ERR_ABORTED : CHORUS_ERR_TIMEOUT;
    pthread_t thread;
    double start, took;
    int rc;

    (void)size;
    if (rank != 0) {
        usleep(a->abort ? 3000000 : 5000000);
        return RC_OK;
    }
    if (a->abort && pthread_create(&thread, NULL, abort_main, comm) != 0)
        return RC_FAILED;
    start = harness_now();
    rc = harness_expect_status(chorus_allreduce(send, recv, ELEMS, CHORUS_INT32, CHORUS_SUM, comm,
                                                NULL),
                               want, "the call no peer makes", rank) ? RC_STATUS : RC_OK;
    took = harness_now() - start;
    if (a->abort)
        pthread_join(thread, NULL);
    if (rc == RC_OK && took > (a->abort ? 2.0 : 4.0)) {
        fprintf(stderr, "rank 0: the call ended after %.2f s\n", took);
        rc = RC_LATE;
    }
    return rc;
}

static void run_alone(int abort)
{
    alone_arg_t arg = {abort};

    run_tcp(2, 2, rank_alone, &arg);
}

Test(progress, an_abort_from_another_thread_ends_a_driven_call, .timeout = 60)
{
    run_alone(1);
}

Test(progress, a_driven_call_ends_at_its_deadline, .timeout = 60)
{
    run_alone(0);
}
