/*
 * Calls that repeat the last one: a blocking call run in the calling
 * thread keeps its task, and the next call that repeats it in every
 * argument but the buffers runs it again (request.c). Every such call gives
 * the exact answer for the inputs it finds, in the buffers it names,
 * whatever came between: the same call, the same on other buffers, another
 * one (which gets a task of its own), the same with options that say
 * nothing (which are checked as none) or with bad ones (refused on every
 * rank, and the call after is exact), a non-blocking call of
 * the same arguments, calls on chorus_mem_alloc memory (freed once the
 * calls are over), small calls and staged ones, on the node team and over
 * TCP, with node-wide barriers and without them.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"

enum { RC_OK = 0, RC_FAILED = 20, RC_WRONG = 21, RC_FREE = 22, RC_SETUP = 23,
       RC_ACCEPTED = 24 };

#define SMALL 5             /* elements: the one-step small-call path */
#define LARGE 3000          /* elements: 12000 bytes, staged */
#define MAXN 5

typedef enum {
    K_ALLREDUCE, K_ALLREDUCE_IN_PLACE, K_BROADCAST, K_REDUCE, K_ALLGATHER, K_REDUCE_SCATTER,
    K_ALLREDUCE_LARGE, K_ALLREDUCE_SHORT, K_KINDS
} kind_t;

static const char *const kind_names[K_KINDS] = {
    "allreduce", "allreduce in place", "broadcast", "reduce", "allgather", "reduce_scatter",
    "allreduce (staged)", "allreduce (one element fewer)"
};

typedef struct {
    int32_t send[MAXN * LARGE];
    int32_t recv[MAXN * LARGE];
} bufs_t;

/* The input of rank r at element i in round k. */
static int32_t input(int r, size_t i, int k)
{
    return (int32_t)(r * 1000 + (int)(i % 97) + 7 * k);
}

/* The sum over size ranks of input(r, i, k). */
static int32_t input_sum(int size, size_t i, int k)
{
    int32_t s = 0;

    for (int r = 0; r < size; r++)
        s += input(r, i, k);
    return s;
}

/* Call k of kind on b, fresh inputs for round k; RC_OK when exact. */
static int run_kind(chorus_comm_t comm, int rank, int size, kind_t kind, int k, bufs_t *b,
                    int blocking)
{
    size_t count = kind == K_ALLREDUCE_LARGE   ? LARGE
                   : kind == K_ALLREDUCE_SHORT ? SMALL - 1
                                               : SMALL;
    size_t total = count * (size_t)size;
    int root = size - 1;
    chorus_request_t req = NULL;
    chorus_status_t st;

    for (size_t i = 0; i < total; i++) {
        b->send[i] = input(rank, i, k);
        b->recv[i] = -1;
    }
    switch (kind) {
    case K_ALLREDUCE:
    case K_ALLREDUCE_LARGE:
    case K_ALLREDUCE_SHORT:
        st = blocking ? chorus_allreduce(b->send, b->recv, count, CHORUS_INT32, CHORUS_SUM,
                                         comm, NULL)
                      : chorus_iallreduce(b->send, b->recv, count, CHORUS_INT32, CHORUS_SUM,
                                          comm, NULL, &req);
        break;
    case K_ALLREDUCE_IN_PLACE:
        st = chorus_allreduce(b->send, b->send, count, CHORUS_INT32, CHORUS_SUM, comm, NULL);
        break;
    case K_BROADCAST:
        st = chorus_broadcast(b->send, b->recv, count, CHORUS_INT32, root, comm, NULL);
        break;
    case K_REDUCE:
        st = chorus_reduce(b->send, b->recv, count, CHORUS_INT32, CHORUS_SUM, root, comm, NULL);
        break;
    case K_ALLGATHER:
        st = chorus_allgather(b->send, b->recv, count, CHORUS_INT32, comm, NULL);
        break;
    default:
        st = chorus_reduce_scatter(b->send, b->recv, count, CHORUS_INT32, CHORUS_SUM, comm,
                                   NULL);
        break;
    }
    if (st == CHORUS_OK && req != NULL)
        st = chorus_request_wait(req);
    chorus_request_free(req);
    if (st != CHORUS_OK) {
        fprintf(stderr, "rank %d: %s #%d failed: %s\n", rank, kind_names[kind], k,
                chorus_status_string(st));
        return RC_FAILED;
    }
    for (size_t i = 0; i < total; i++) {
        int32_t got, want;
        int checked = 1;

        switch (kind) {
        case K_ALLREDUCE:
        case K_ALLREDUCE_LARGE:
        case K_ALLREDUCE_SHORT:
            /* Past count, recv stays as it was. */
            got = b->recv[i];
            want = i < count ? input_sum(size, i, k) : -1;
            break;
        case K_ALLREDUCE_IN_PLACE:
            checked = i < count;
            got = b->send[i];
            want = input_sum(size, i, k);
            break;
        case K_BROADCAST:
            checked = i < count;
            got = b->recv[i];
            want = rank == root ? -1 : input(root, i, k);
            if (rank == root)
                got = want;     /* out of place at the root: recv is not written */
            break;
        case K_REDUCE:
            checked = i < count && rank == root;
            got = b->recv[i];
            want = input_sum(size, i, k);
            break;
        case K_ALLGATHER:
            got = b->recv[i];
            want = input((int)(i / count), i % count, k);
            break;
        default:
            checked = i < count;
            got = b->recv[i];
            want = input_sum(size, (size_t)rank * count + i, k);
            break;
        }
        if (checked && got != want) {
            fprintf(stderr, "rank %d: %s #%d: element %zu is %d, not %d\n", rank,
                    kind_names[kind], k, i, (int)got, (int)want);
            return RC_WRONG;
        }
    }
    return RC_OK;
}

/*
 * Each kind three times in a row, then on two sets of buffers in turn (a
 * repeat on other buffers each time), then every kind in turn twice over
 * (each call a repeat of none before it), then a blocking call, the same
 * call non-blocking, and the blocking one again, then the same with one
 * element fewer (the same algorithm and buffers: a call that is no repeat).
 */
static int repeat_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    bufs_t *b = calloc(2, sizeof(*b));
    int k = 0, rc = RC_OK;

    (void)arg;
    if (b == NULL)
        return RC_SETUP;
    for (int kind = 0; kind < K_KINDS && rc == RC_OK; kind++) {
        for (int i = 0; i < 3 && rc == RC_OK; i++)
            rc = run_kind(comm, rank, size, (kind_t)kind, k++, b, 1);
        for (int i = 0; i < 4 && rc == RC_OK; i++)
            rc = run_kind(comm, rank, size, (kind_t)kind, k++, &b[i % 2], 1);
    }
    for (int i = 0; i < 2 * K_KINDS && rc == RC_OK; i++)
        rc = run_kind(comm, rank, size, (kind_t)(i % K_KINDS), k++, b, 1);
    for (int large = 0; large < 2 && rc == RC_OK; large++) {
        kind_t kind = large ? K_ALLREDUCE_LARGE : K_ALLREDUCE;

        for (int blocking = 1; blocking >= 0 && rc == RC_OK; blocking--)
            rc = run_kind(comm, rank, size, kind, k++, b, blocking);
        if (rc == RC_OK)
            rc = run_kind(comm, rank, size, kind, k++, b, 1);
    }
    if (rc == RC_OK)
        rc = run_kind(comm, rank, size, K_ALLREDUCE_SHORT, k++, b, 1);
    free(b);
    return rc;
}

/*
 * An allreduce repeated with options that say nothing beyond the defaults
 * (checked as without options), then with bad options (struct_size 1, a
 * priority, an unknown memory type), each refused on every rank, each
 * followed by the plain call, exact.
 */
static int repeat_opts_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    bufs_t *b = calloc(1, sizeof(*b));
    chorus_opts_t plain = CHORUS_OPTS_INIT, bad[3] = {CHORUS_OPTS_INIT, CHORUS_OPTS_INIT,
                                                      CHORUS_OPTS_INIT};
    int rc = RC_OK, k = 0;

    (void)arg;
    if (b == NULL)
        return RC_SETUP;
    bad[0].struct_size = 1;
    bad[1].priority = 1;
    bad[2].mem_type = 99;
    for (int i = 0; i < 3 && rc == RC_OK; i++)
        rc = run_kind(comm, rank, size, K_ALLREDUCE, k++, b, 1);
    for (int i = 0; i < 3 && rc == RC_OK; i++) {
        chorus_status_t st;

        for (int j = 0; j < SMALL; j++)
            b->send[j] = input(rank, (size_t)j, k);
        st = chorus_allreduce(b->send, b->recv, SMALL, CHORUS_INT32, CHORUS_SUM, comm, &plain);
        for (int j = 0; j < SMALL && st == CHORUS_OK && rc == RC_OK; j++)
            if (b->recv[j] != input_sum(size, (size_t)j, k))
                rc = RC_WRONG;
        k++;
        if (st != CHORUS_OK)
            rc = RC_FAILED;
        if (rc == RC_OK &&
            chorus_allreduce(b->send, b->recv, SMALL, CHORUS_INT32, CHORUS_SUM, comm,
                             &bad[i]) != CHORUS_ERR_INVALID_ARG) {
            fprintf(stderr, "rank %d: bad options #%d after repeated calls were not refused\n",
                    rank, i);
            rc = RC_ACCEPTED;
        }
        if (rc == RC_OK)
            rc = run_kind(comm, rank, size, K_ALLREDUCE, k++, b, 1);
    }
    free(b);
    return rc;
}

/* Repeated calls on chorus_mem_alloc memory, which is free to go once they are over. */
static int repeat_mem_rank(chorus_comm_t comm, int rank, int size, void *arg)
{
    int32_t *send = NULL, *recv = NULL;
    int32_t plain_send[SMALL], plain_recv[SMALL];
    chorus_status_t st;

    (void)arg;
    if (chorus_mem_alloc(comm, SMALL * sizeof(int32_t), (void **)&send) != CHORUS_OK ||
        chorus_mem_alloc(comm, SMALL * sizeof(int32_t), (void **)&recv) != CHORUS_OK)
        return RC_SETUP;
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < SMALL; i++)
            send[i] = input(rank, (size_t)i, k);
        st = chorus_allreduce(send, recv, SMALL, CHORUS_INT32, CHORUS_SUM, comm, NULL);
        if (st != CHORUS_OK)
            return RC_FAILED;
        for (int i = 0; i < SMALL; i++)
            if (recv[i] != input_sum(size, (size_t)i, k))
                return RC_WRONG;
    }
    if ((st = chorus_mem_free(comm, send)) != CHORUS_OK ||
        (st = chorus_mem_free(comm, recv)) != CHORUS_OK) {
        fprintf(stderr, "rank %d: chorus_mem_free after the calls: %s\n", rank,
                chorus_status_string(st));
        return RC_FREE;
    }
    for (int i = 0; i < SMALL; i++)
        plain_send[i] = input(rank, (size_t)i, 3);
    if (chorus_allreduce(plain_send, plain_recv, SMALL, CHORUS_INT32, CHORUS_SUM, comm, NULL) !=
        CHORUS_OK)
        return RC_FAILED;
    for (int i = 0; i < SMALL; i++)
        if (plain_recv[i] != input_sum(size, (size_t)i, 3))
            return RC_WRONG;
    return RC_OK;
}

/* fn on jobs of lo..hi ranks with CHORUS_SHM=shm and CHORUS_SHM_MEMBARRIER=barriers. */
static void run_jobs(harness_rank_fn fn, int lo, int hi, int shm, int barriers)
{
    setenv("CHORUS_SHM", shm ? "1" : "0", 1);
    setenv("CHORUS_SHM_MEMBARRIER", barriers ? "1" : "0", 1);
    for (int n = lo; n <= hi; n++) {
        harness_opts_t opts = {.nranks = n, .timeout_s = 20, .deadline_s = 60,
                               .kill_rank = -1};
        int status[MAXN] = {0};

        cr_expect_eq(harness_run(&opts, fn, NULL, status, NULL), 0,
                     "%d ranks over %s (node-wide barriers %s): exit codes %d %d %d %d %d "
                     "(20 failed, 21 wrong, 22 not freed, 23 setup, 24 accepted)", n,
                     shm ? "shm" : "tcp",
                     barriers ? "on" : "off", status[0], status[1], status[2], status[3],
                     status[4]);
    }
    unsetenv("CHORUS_SHM");
    unsetenv("CHORUS_SHM_MEMBARRIER");
}

Test(repeat, every_call_exact_shm, .timeout = 240)
{
    run_jobs(repeat_rank, 1, MAXN, 1, 1);
}

Test(repeat, every_call_exact_shm_without_node_barriers, .timeout = 240)
{
    run_jobs(repeat_rank, 2, 4, 1, 0);
}

Test(repeat, every_call_exact_tcp, .timeout = 240)
{
    run_jobs(repeat_rank, 2, 3, 0, 1);
}

Test(repeat, plain_options_checked_as_none_bad_ones_refused, .timeout = 120)
{
    run_jobs(repeat_opts_rank, 1, 3, 1, 1);
    run_jobs(repeat_opts_rank, 2, 2, 0, 1);
}

Test(repeat, chorus_memory_free_after_repeated_calls, .timeout = 120)
{
    run_jobs(repeat_mem_rank, 1, 3, 1, 1);
}
